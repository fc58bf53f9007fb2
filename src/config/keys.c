/* keys: the objects of a config as the parser checks them (see keys.h). */
#include "config/keys.h"
#include "base/util.h"
#include "config/config.h"
#include "config/json.h"

#include <stdlib.h>
#include <string.h>

static KeysMap *seen;   /* the map being filled while json_keys_watch is set */
static size_t seen_cap;

static void watch(const cJSON *obj, const char *path, const char *const *allowed)
{
    if (config_keys_at(seen, path)) return;   /* an object checked twice (data with "source": "files") */
    if (seen->n == seen_cap) {
        seen_cap = seen_cap ? 2 * seen_cap : 16;
        KeysObject *bigger = xcalloc(seen_cap, sizeof *bigger);
        if (seen->n) memcpy(bigger, seen->obj, seen->n * sizeof *bigger);
        free(seen->obj);
        seen->obj = bigger;
    }
    KeysObject *o = &seen->obj[seen->n++];
    memset(o, 0, sizeof *o);
    o->path = xstrdup(path);
    size_t na = 0;
    while (allowed[na]) na++;
    o->allowed = xcalloc(na + 1, sizeof *o->allowed);
    for (size_t i = 0; i < na; i++) o->allowed[i] = xstrdup(allowed[i]);
    size_t nm = 0;
    for (const cJSON *it = obj->child; it; it = it->next) nm++;
    o->has = xcalloc(nm + 1, sizeof *o->has);
    for (const cJSON *it = obj->child; it; it = it->next) {
        KeysMember *m = &o->has[o->n_has++];
        m->key = xstrdup(it->string ? it->string : "");
        m->kind = cJSON_IsObject(it) ? KEYS_OBJECT : cJSON_IsArray(it) ? KEYS_LIST : KEYS_VALUE;
        m->count = m->kind == KEYS_LIST ? (size_t)cJSON_GetArraySize(it) : 0;
        if (it->string && strcmp(it->string, "method") == 0 && cJSON_IsString(it) && !o->method)
            o->method = xstrdup(it->valuestring);
    }
}

void config_keys(KeysMap *km, const char *path, const char *name, const char *text, char *const *sets,
                 size_t n_sets)
{
    memset(km, 0, sizeof *km);
    seen = km, seen_cap = 0;
    json_keys_watch = watch;
    Config cfg;
    if (path) config_load(&cfg, path, sets, n_sets);
    else config_parse(&cfg, name, text, strlen(text), sets, n_sets);
    config_free(&cfg);
    json_keys_watch = NULL;
    seen = NULL;
}

const KeysObject *config_keys_at(const KeysMap *km, const char *path)
{
    for (size_t i = 0; i < km->n; i++)
        if (strcmp(km->obj[i].path, path) == 0) return &km->obj[i];
    return NULL;
}

void config_keys_free(KeysMap *km)
{
    for (size_t i = 0; i < km->n; i++) {
        KeysObject *o = &km->obj[i];
        free(o->path);
        for (size_t k = 0; o->allowed[k]; k++) free(o->allowed[k]);
        free(o->allowed);
        for (size_t k = 0; k < o->n_has; k++) free(o->has[k].key);
        free(o->has);
        free(o->method);
    }
    free(km->obj);
    memset(km, 0, sizeof *km);
}
