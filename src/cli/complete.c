/* complete: `kvc __complete ...`, the hidden helper of scripts/kvc-completion.bash. It answers from kvc's own
 * tables, so the completion never holds a list of its own: the commands and their options (main.c, each
 * command's OptSpec), the methods and their parameters (the registry), the model shapes (config/shapes.h) and
 * the keys of a config (config/keys.h: the schema as the parser checks it). One candidate per line on stdout;
 * nothing (and exit 0) when there is none or the input makes no sense: completion never prints errors.
 *
 *   kvc __complete commands            the commands
 *   kvc __complete options CMD         CMD's options (and -h, --help); " =" after those that take a value
 *   kvc __complete methods             the method names
 *   kvc __complete models              the model shape names
 *   kvc __complete set [--config FILE] [--set PATH=JSON]... -- WORD
 *       WORD is the --set argument being typed. Without '=': the paths that extend it, each ending in '.' (an
 *       object or list the config has) or '=' (a value); with '=': the values known for that path, as JSON (a
 *       method name, a parameter's choices or true/false, a model shape). FILE is the config on the command
 *       line (else a built-in minimal one) and the --set values are those typed before WORD, so that
 *       experiments.0.<TAB> offers the parameters of the method experiment 0 has.
 */
#include "cli/cli.h"
#include "base/util.h"
#include "config/keys.h"
#include "config/shapes.h"
#include "methods/methods.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* When the command line names no config: the smallest one that parses, so that the schema is still walked. */
static const char minimal_config[] =
    "{\"data\": {\"tokens\": 16, \"head_dim\": 8, \"keys\": {\"generator\": \"normal\"}, \"values\": {\"generator\": "
    "\"normal\"}}, \"experiments\": [{\"method\": \"quantize\"}]}";

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* "parent.key", or "key" at the top level */
static void join(char *out, size_t cap, const char *parent, const char *key)
{
    snprintf(out, cap, "%s%s%s", parent, parent[0] ? "." : "", key);
}

static int is_index(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

static void walk(KeysMap *km, const char *config, char **sets, size_t n_sets)
{
    if (config) config_keys(km, config, NULL, NULL, sets, n_sets);
    else config_keys(km, NULL, "(built-in)", minimal_config, sets, n_sets);
}

/* The object at path, walking again with path={} added when the config lacks it but its parent allows it. */
static const KeysObject *object_at(KeysMap *km, const char *path, const char *config, char **sets, size_t n_sets)
{
    const KeysObject *o = config_keys_at(km, path);
    const char *dot = strrchr(path, '.');
    const char *last = dot ? dot + 1 : path;
    if (o || !*path || is_index(last)) return o;
    char parent[512];
    snprintf(parent, sizeof parent, "%.*s", dot ? (int)(dot - path) : 0, path);
    const KeysObject *po = config_keys_at(km, parent);
    if (!po) return NULL;
    int allowed = 0;
    for (size_t k = 0; po->allowed[k]; k++) allowed |= strcmp(po->allowed[k], last) == 0;
    for (size_t k = 0; k < po->n_has; k++)
        if (strcmp(po->has[k].key, last) == 0) return NULL;   /* there, but not an object the parser reached */
    if (!allowed) return NULL;
    char **more = xcalloc(n_sets + 1, sizeof *more);
    memcpy(more, sets, n_sets * sizeof *more);
    size_t n = strlen(path) + 4;
    more[n_sets] = xmalloc(n);
    snprintf(more[n_sets], n, "%s={}", path);
    config_keys_free(km);
    walk(km, config, more, n_sets + 1);
    free(more[n_sets]);
    free(more);
    return config_keys_at(km, path);
}

/* WORD without '=': the paths extending it. */
static void complete_path(KeysMap *km, const char *word, const char *config, char **sets, size_t n_sets)
{
    char parent[512], cand[600];
    const char *dot = strrchr(word, '.');
    const char *partial = dot ? dot + 1 : word;
    snprintf(parent, sizeof parent, "%.*s", dot ? (int)(dot - word) : 0, word);
    const KeysObject *o = object_at(km, parent, config, sets, n_sets);
    if (o) {
        for (size_t k = 0; o->allowed[k]; k++) {
            if (!starts(o->allowed[k], partial)) continue;
            int nested = 0;
            for (size_t j = 0; j < o->n_has; j++)
                if (strcmp(o->has[j].key, o->allowed[k]) == 0)
                    nested = o->has[j].kind == KEYS_OBJECT || (o->has[j].kind == KEYS_LIST && o->has[j].count > 0);
            join(cand, sizeof cand, parent, o->allowed[k]);
            printf("%s%s\n", cand, nested ? "." : "=");
        }
        return;
    }
    /* a list: its indices (the parent of the list has it as a member) */
    const char *pdot = strrchr(parent, '.');
    char grand[512];
    snprintf(grand, sizeof grand, "%.*s", pdot ? (int)(pdot - parent) : 0, parent);
    const KeysObject *g = config_keys_at(km, grand);
    const char *lkey = pdot ? pdot + 1 : parent;
    for (size_t j = 0; g && j < g->n_has; j++) {
        if (g->has[j].kind != KEYS_LIST || strcmp(g->has[j].key, lkey) != 0) continue;
        for (size_t i = 0; i < g->has[j].count; i++) {
            char idx[32];
            snprintf(idx, sizeof idx, "%zu", i);
            if (!starts(idx, partial)) continue;
            join(cand, sizeof cand, parent, idx);
            printf("%s%s\n", cand, config_keys_at(km, cand) ? "." : "=");
        }
    }
}

/* A candidate value: printed as PATH=VALUE when VALUE, without its quotes, starts with the typed text. */
static void offer(const char *path, const char *typed, const char *value, int quoted)
{
    if (!starts(value, typed)) return;
    if (quoted) printf("%s=\"%s\"\n", path, value);
    else printf("%s=%s\n", path, value);
}

/* WORD = PATH=TYPED: the values known for PATH. */
static void complete_value(KeysMap *km, const char *word)
{
    const char *eq = strchr(word, '=');
    char path[512], parent[512], typed[256];
    snprintf(path, sizeof path, "%.*s", (int)(eq - word), word);
    size_t t = 0;
    for (const char *s = eq + 1; *s && t + 1 < sizeof typed; s++)
        if (*s != '"' && *s != '\'') typed[t++] = *s;   /* the shell's and JSON's quotes, as typed so far */
    typed[t] = '\0';
    const char *dot = strrchr(path, '.');
    const char *key = dot ? dot + 1 : path;
    snprintf(parent, sizeof parent, "%.*s", dot ? (int)(dot - path) : 0, path);
    char lkey[512];
    if (is_index(key) && dot) {   /* an item of a parameter's list (experiments.0.bits.1): that parameter's values */
        char *pdot = strrchr(parent, '.');
        snprintf(lkey, sizeof lkey, "%s", pdot ? pdot + 1 : parent);
        key = lkey;
        if (pdot) *pdot = '\0';
        else parent[0] = '\0';
    }
    const KeysObject *o = config_keys_at(km, parent);
    if (strcmp(key, "method") == 0) {
        for (size_t i = 0; i < method_count; i++) offer(path, typed, method_registry[i]->name, 1);
        return;
    }
    if (strcmp(path, "data.shape") == 0) {
        for (size_t i = 0; i < model_shape_count; i++) offer(path, typed, model_shapes[i].name, 1);
        return;
    }
    const MethodDesc *m = o && o->method ? method_find(o->method) : NULL;
    int p = m ? method_param_index(m, key) : -1;
    if (p < 0) return;
    const ParamDesc *pd = &m->params[p];
    if (pd->kind == PARAM_ENUM)
        for (size_t k = 0; pd->choices[k]; k++) offer(path, typed, pd->choices[k], 1);
    else if (pd->kind == PARAM_BOOL)
        offer(path, typed, "false", 0), offer(path, typed, "true", 0);
}

static int complete_set(int argc, char **argv)
{
    const char *config = NULL, *word = NULL;
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            word = i + 1 < argc ? argv[i + 1] : "";
            break;
        }
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config = argv[++i];
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) sets[n_sets++] = argv[++i];
    }
    if (word) {
        KeysMap km;
        walk(&km, config, sets, n_sets);
        if (!km.n && config) {   /* unreadable, or not JSON: the schema of the built-in config */
            config_keys_free(&km);
            config = NULL;
            walk(&km, config, sets, n_sets);
        }
        if (strchr(word, '=')) complete_value(&km, word);
        else complete_path(&km, word, config, sets, n_sets);
        config_keys_free(&km);
    }
    free(sets);
    return EXIT_OK;
}

int cmd_complete(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "commands") == 0) {
        for (size_t i = 0; i < cmd_count; i++) printf("%s\n", cmd_table[i].name);
    } else if (strcmp(what, "options") == 0 && argc > 2 && cmd_find(argv[2])) {
        for (const OptSpec *o = cmd_find(argv[2])->opts; o->name; o++) {
            printf("%s%s\n", o->name, o->has_value ? " =" : "");
            if (o->alias) printf("%s%s\n", o->alias, o->has_value ? " =" : "");
        }
        printf("-h\n--help\n");
    } else if (strcmp(what, "methods") == 0) {
        for (size_t i = 0; i < method_count; i++) printf("%s\n", method_registry[i]->name);
    } else if (strcmp(what, "models") == 0) {
        for (size_t i = 0; i < model_shape_count; i++) printf("%s\n", model_shapes[i].name);
    } else if (strcmp(what, "set") == 0) {
        return complete_set(argc, argv);
    }
    return EXIT_OK;
}
