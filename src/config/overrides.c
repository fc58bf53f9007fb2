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

/* s[0..n) for a message, bytes from 0x80 up as \xNN (at most about 60 bytes). */
static const char *escape_bytes(char *buf, size_t cap, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80 || c < 0x20) k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
        else buf[k++] = (char)c;
    }
    buf[k] = '\0';
    return buf;
}

int overrides_apply(cJSON *root, const char *arg)
{
    char where[160], sarg[96], sseg[96];
    size_t alen = strlen(arg);
    if (utf8_check(arg, alen) < alen)   /* the message must not carry the broken bytes */
        snprintf(where, sizeof where, "--set %s", escape_bytes(sarg, sizeof sarg, arg, alen > 60 ? 60 : alen));
    else
        snprintf(where, sizeof where, "--set %s", clip(sarg, sizeof sarg, arg, alen));
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return kvc_fail("%s: expected PATH=JSON, e.g. --set data.tokens=20 (got \"%s\")", where, sarg);
    size_t plen = (size_t)(eq - arg);
    char *path = xmalloc(plen + 1);
    memcpy(path, arg, plen);
    path[plen] = '\0';
    size_t bad_at, vlen = strlen(eq + 1), str_off, at = utf8_check(arg, plen);
    if (at < plen) {
        free(path);
        return kvc_fail("%s: the path is not valid UTF-8: byte 0x%02x at offset %zu of the argument (got \"%s\")",
                        where, (unsigned char)arg[at], at, escape_bytes(sseg, sizeof sseg, arg, plen));
    }
    int kind = json_scan_at(eq + 1, vlen, &bad_at, NULL, 0, &str_off);
    if (kind == JSON_NUL_CHAR || kind == JSON_BAD_UTF8) {
        json_show_string(sseg, sizeof sseg, eq + 1, vlen, str_off, bad_at);
        free(path);
        if (kind == JSON_NUL_CHAR)
            return kvc_fail("%s: a string must not hold \\u0000 (NUL), which would end it early in kvc (got %s)",
                            where, sseg);
        return kvc_fail("%s: the value is not valid UTF-8: byte 0x%02x at offset %zu of the argument (got %s)", where,
                        (unsigned char)eq[1 + bad_at], plen + 1 + bad_at, sseg);
    }
    cJSON *value = kind == JSON_OK ? cJSON_Parse(eq + 1) : NULL;
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
