/* keys: what a config may hold at each of its objects, learnt from the parser itself, for shell completion
 * (`kvc __complete`, scripts/kvc-completion.bash): the keys come from the schema and the method registry as
 * config_parse checks them, never from a second list that could drift.
 *
 * config_keys parses a config (a file, or text) with --set values while json_keys_watch (json.h) records every
 * object whose keys are checked: its path in --set form, the keys it allows, the keys it has (with whether each
 * holds an object, a list and how long, or a value) and its "method" when that is a string (an experiment or a
 * pipeline step). The parse stops at the first error, as kvc run's would: objects after it are not seen.
 *
 * May include: config/json.h, config/config.h, base/. Used by src/cli/complete.c.
 */
#ifndef KVC_CONFIG_KEYS_H
#define KVC_CONFIG_KEYS_H

#include <stddef.h>

enum { KEYS_VALUE, KEYS_OBJECT, KEYS_LIST };

typedef struct KeysMember {
    char *key;
    int kind;              /* KEYS_VALUE, KEYS_OBJECT or KEYS_LIST */
    size_t count;          /* KEYS_LIST: its length */
} KeysMember;

typedef struct KeysObject {
    char *path;            /* "" (the top level), "data", "data.keys", "experiments.0", "experiments.2.steps.1" */
    char **allowed;        /* the keys the schema allows here, NULL-terminated */
    KeysMember *has;       /* the keys the object has */
    size_t n_has;
    char *method;          /* its "method" member when that is a string, else NULL */
} KeysObject;

typedef struct KeysMap {
    KeysObject *obj;
    size_t n;
} KeysMap;

/* Parses the config file path (or, when path is NULL, text: name is its name in messages) with sets[0..n_sets)
 * and fills *km (zeroed first) with what it saw. Whether the config was valid does not matter. */
void config_keys(KeysMap *km, const char *path, const char *name, const char *text, char *const *sets,
                 size_t n_sets);
const KeysObject *config_keys_at(const KeysMap *km, const char *path);   /* NULL when not seen */
void config_keys_free(KeysMap *km);

#endif
