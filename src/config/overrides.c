/* overrides: --set PATH=JSON on the config tree (see overrides.h). */
#include "config/overrides.h"
#include "config/json.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s for a message: at most 60 bytes of it, then "..." (an argument may be as long as the command line). */
static const char *clip(char *buf, size_t cap, const char *s, size_t n)
{
    if (n > 60) snprintf(buf, cap, "%.60s...", s);
    else snprintf(buf, cap, "%.*s", (int)n, s);
    return buf;
}

int overrides_apply(cJSON *root, const char *arg)
{
    char where[128], sarg[80], sseg[80];
    snprintf(where, sizeof where, "--set %s", clip(sarg, sizeof sarg, arg, strlen(arg)));
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return kvc_fail("%s: expected PATH=JSON, e.g. --set data.tokens=20 (got \"%s\")", where, sarg);
    size_t plen = (size_t)(eq - arg);
    char *path = xmalloc(plen + 1);
    memcpy(path, arg, plen);
    path[plen] = '\0';
    size_t bad_at;
    cJSON *value = json_scan(eq + 1, strlen(eq + 1), &bad_at) == JSON_OK ? cJSON_Parse(eq + 1) : NULL;
    if (!value) {
        free(path);
        return kvc_fail("%s: the value is not valid JSON; strings need quotes, e.g. '\"channel\"' (got %s)", where,
                        clip(sseg, sizeof sseg, eq + 1, strlen(eq + 1)));
    }
    cJSON *node = root;
    char *seg = path, *next;
    int rc = 0;
    for (;; seg = next + 1) {
        next = strchr(seg, '.');
        if (next) *next = '\0';
        if (!*seg) {
            rc = kvc_fail("%s: empty component in the path (got \"%s\")", where, clip(sseg, sizeof sseg, arg, plen));
            break;
        }
        cJSON *child;
        clip(sseg, sizeof sseg, seg, strlen(seg));
        if (cJSON_IsArray(node)) {
            char *end;
            errno = 0;
            unsigned long idx = strtoul(seg, &end, 10);
            int size = cJSON_GetArraySize(node);
            if (*end || seg[0] < '0' || seg[0] > '9' || errno || idx >= (unsigned long)size) {
                rc = kvc_fail("%s: %s is not an index of a list of %d (got \"%s\")", where, sseg, size, sseg);
                break;
            }
            if (!next) {
                cJSON_ReplaceItemInArray(node, (int)idx, value);
                value = NULL;
                break;
            }
            child = cJSON_GetArrayItem(node, (int)idx);
        } else if (cJSON_IsObject(node)) {
            child = cJSON_GetObjectItemCaseSensitive(node, seg);
            if (!next) {
                if (child)
                    cJSON_ReplaceItemInObjectCaseSensitive(node, seg, value);
                else
                    cJSON_AddItemToObject(node, seg, value);
                value = NULL;
                break;
            }
            if (!child) {
                const char *keys[256];
                size_t n = 0;
                for (cJSON *it = node->child; it && n < 255; it = it->next) keys[n++] = it->string;
                keys[n] = NULL;
                if (n)
                    rc = kvc_fail("%s: no key \"%s\" here; did you mean \"%s\"? (got \"%s\")", where, sseg,
                                  json_nearest(seg, keys), sseg);
                else
                    rc = kvc_fail("%s: no key \"%s\" here, the object is empty (got \"%s\")", where, sseg, sseg);
                break;
            }
        } else {
            rc = kvc_fail("%s: cannot descend into a number, string or null at \"%s\" (got \"%s\")", where, sseg,
                          sseg);
            break;
        }
        node = child;
    }
    cJSON_Delete(value);
    free(path);
    return rc;
}
