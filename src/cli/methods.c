/* methods: `kvc methods [NAME]`, the compression methods of the registry (src/methods/methods.h) with their
 * parameters, ranges and defaults, as text or JSON. */
#include "cli/cli.h"
#include "base/util.h"
#include "methods/methods.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

const char cmd_methods_usage[] =
    "usage: kvc methods [NAME] [--format text|json|jsonl]\n"
    "\n"
    "Every method runs once per (layer, KV head) on that head's (tokens, head_dim) cache; the bytes of all\n"
    "heads are summed. A method marked [oracle] looks at the exact attention of the evaluation queries,\n"
    "which no real cache can know: it is a bound, not a method to deploy.\n"
    "\n"
    "  NAME              only this method (e.g. kvc methods kivi)\n"
    "  --format FORMAT   text (default), json (a list of method objects; one object with NAME) or jsonl\n"
    "                    (one method per line). Each object: name, oracle, shrinks, summary, params; each\n"
    "                    parameter: name, kind (int, enum, number, bool), required, default (null when\n"
    "                    required or derived from the data), default_text, range, min and max (int,\n"
    "                    number), choices (enum), help. Ranges that depend on the data (rank <= head_dim)\n"
    "                    are checked when a config is read.\n"
    "  -h, --help        this help\n";

enum { METHODS_FORMAT };
const OptSpec cmd_methods_opts[] = {
    [METHODS_FORMAT] = {"--format", NULL, 1},
    {NULL, NULL, 0},
};

static void print_text(const MethodDesc *m)
{
    printf("%s%s\n  shrinks: %s\n  %s\n", m->name, m->needs_query ? "  [oracle: sees the evaluation queries]" : "",
           m->factor, m->summary);
    /* columns sized to this method's longest name, range and default */
    int wn = 0, wr = 0, wd = 0;
    char def[METHOD_MAX_PARAMS][64], range[METHOD_MAX_PARAMS][128];
    for (size_t j = 0; j < m->n_params; j++) {
        const ParamDesc *p = &m->params[j];
        param_default_text(def[j], sizeof def[j], p);
        param_range_text(range[j], sizeof range[j], p);
        if ((int)strlen(p->name) > wn) wn = (int)strlen(p->name);
        if ((int)strlen(range[j]) > wr) wr = (int)strlen(range[j]);
        if ((int)strlen(def[j]) > wd) wd = (int)strlen(def[j]);
    }
    for (size_t j = 0; j < m->n_params; j++)
        printf("    %-*s  %-*s  %-*s  %s\n", wn, m->params[j].name, wr, range[j], wd, def[j], m->params[j].help);
    printf("\n");
}

static cJSON *param_json(const ParamDesc *p)
{
    static const char *const kinds[] = {[PARAM_INT] = "int", [PARAM_ENUM] = "enum", [PARAM_NUM] = "number",
                                        [PARAM_BOOL] = "bool"};
    char buf[128];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", p->name);
    cJSON_AddStringToObject(j, "kind", kinds[p->kind]);
    int required = p->def == PARAM_REQUIRED;
    cJSON_AddBoolToObject(j, "required", required);
    if (required || (p->kind == PARAM_INT && (p->def < p->lo || p->def > p->hi))) cJSON_AddNullToObject(j, "default");
    else if (p->kind == PARAM_ENUM) cJSON_AddStringToObject(j, "default", p->choices[p->def]);
    else if (p->kind == PARAM_BOOL) cJSON_AddBoolToObject(j, "default", p->def != 0);
    else if (p->kind == PARAM_NUM) cJSON_AddNumberToObject(j, "default", p->num_def);
    else cJSON_AddNumberToObject(j, "default", (double)p->def);
    param_default_text(buf, sizeof buf, p);
    cJSON_AddStringToObject(j, "default_text", buf);
    param_range_text(buf, sizeof buf, p);
    cJSON_AddStringToObject(j, "range", buf);
    if (p->kind == PARAM_INT) {
        cJSON_AddNumberToObject(j, "min", (double)p->lo);
        cJSON_AddNumberToObject(j, "max", (double)p->hi);
    } else if (p->kind == PARAM_NUM) {
        cJSON_AddNumberToObject(j, "min", p->num_lo);
        cJSON_AddNumberToObject(j, "max", p->num_hi);
    } else if (p->kind == PARAM_ENUM) {
        cJSON *c = cJSON_AddArrayToObject(j, "choices");
        for (size_t k = 0; p->choices[k]; k++) cJSON_AddItemToArray(c, cJSON_CreateString(p->choices[k]));
    }
    cJSON_AddStringToObject(j, "help", p->help);
    return j;
}

static cJSON *method_json(const MethodDesc *m)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", m->name);
    cJSON_AddBoolToObject(j, "oracle", m->needs_query);
    cJSON_AddStringToObject(j, "shrinks", m->factor);
    cJSON_AddStringToObject(j, "summary", m->summary);
    cJSON *ps = cJSON_AddArrayToObject(j, "params");
    for (size_t k = 0; k < m->n_params; k++) cJSON_AddItemToArray(ps, param_json(&m->params[k]));
    return j;
}

static void print_json(cJSON *j, int pretty)
{
    char *t = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    printf("%s\n", t);
    cJSON_free(t);
    cJSON_Delete(j);
}

int cmd_methods(int argc, char **argv)
{
    enum { TEXT, JSON, JSONL } format = TEXT;
    const MethodDesc *only = NULL;
    OptParser op;
    opt_init(&op, "methods", argc, argv, cmd_methods_opts);
    for (int k; (k = opt_next(&op)) != OPT_END;) {
        if (k == OPT_ERROR) return cmd_fail(EXIT_USAGE);
        if (k == METHODS_FORMAT) {
            if (strcmp(op.value, "text") == 0) format = TEXT;
            else if (strcmp(op.value, "json") == 0) format = JSON;
            else if (strcmp(op.value, "jsonl") == 0) format = JSONL;
            else {
                kvc_fail("methods: --format: must be text, json or jsonl (got \"%s\")", op.value);
                return cmd_fail(EXIT_USAGE);
            }
        } else if (only) {
            kvc_fail("methods: one method name at most (got \"%s\" after \"%s\")", op.value, only->name);
            return cmd_fail(EXIT_USAGE);
        } else if (!(only = method_find(op.value))) {
            const char *names[64];
            size_t n = 0;
            for (; n < method_count && n < 64; n++) names[n] = method_registry[n]->name;
            kvc_fail("methods: unknown method; did you mean \"%s\"? see kvc methods (got \"%s\")",
                     opt_nearest(op.value, names, n, (size_t)-1), op.value);
            return cmd_fail(EXIT_USAGE);
        }
    }
    if (format == JSON && only) {
        print_json(method_json(only), 1);
        return EXIT_OK;
    }
    cJSON *list = format == JSON ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; i < method_count; i++) {
        const MethodDesc *m = method_registry[i];
        if (only && m != only) continue;
        if (format == TEXT) print_text(m);
        else if (format == JSONL) print_json(method_json(m), 0);
        else cJSON_AddItemToArray(list, method_json(m));
    }
    if (list) print_json(list, 1);
    return EXIT_OK;
}
