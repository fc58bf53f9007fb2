/* grid: validate the experiments, expand parameter lists into grid points, fill labels (see grid.h). */
#include "config/grid.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One method parameter of an experiment object (or of a pipeline step): its values (a scalar is a list of one). */
typedef struct Axis {
    int param;            /* index in method->params */
    const cJSON *node;    /* the value or the list */
    int is_list;
    size_t n;
    size_t step;          /* pipelines: the step it belongs to */
} Axis;

/* Validates one value of a parameter; PARAM_NUM values go to *num, the others to *out. */
static int param_value(const JsonCtx *c, const ParamDesc *pd, const cJSON *v, const char *path, long *out, double *num)
{
    if (pd->kind == PARAM_ENUM) return json_choice(c, v, path, pd->choices, out);
    if (pd->kind == PARAM_NUM) return json_num(c, v, path, pd->num_lo, pd->num_hi, num);
    if (pd->kind == PARAM_BOOL) {
        if (!cJSON_IsBool(v)) return json_bad(c, path, v, "must be true or false");
        *out = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    }
    return json_int(c, v, path, pd->lo, pd->hi, out);
}

/* A pipeline placeholder: "steps.S.param", or "param" when exactly one step's method has that parameter.
 * Writes the value into val and returns 0, or returns -1 with the reason in why. */
static int step_placeholder(char *val, size_t cap, const Experiment *ex, const char *name, char *why, size_t wcap)
{
    unsigned long s;
    char pname[64];
    int used;
    if (sscanf(name, "steps.%lu.%63[A-Za-z0-9_]%n", &s, pname, &used) == 2 && name[used] == '\0' &&
        strncmp(name, "steps.", 6) == 0 && name[6] >= '0' && name[6] <= '9') {
        if (s >= ex->n_steps) {
            snprintf(why, wcap, "unknown placeholder {%s}; the pipeline has steps 0..%zu", name, ex->n_steps - 1);
            return -1;
        }
        int pi = method_param_index(ex->steps[s].method, pname);
        if (pi < 0) {
            snprintf(why, wcap, "unknown placeholder {%s}; step %lu (%s) has no parameter %s", name, s,
                     ex->steps[s].method->name, pname);
            return -1;
        }
        exp_param_text(val, cap, &ex->steps[s], (size_t)pi);
        return 0;
    }
    size_t found = 0, at = 0;
    int pi = -1;
    for (size_t k = 0; k < ex->n_steps; k++) {
        int i = method_param_index(ex->steps[k].method, name);
        if (i >= 0) {
            if (found++ == 0) {
                at = k;
                pi = i;
            }
        }
    }
    if (found == 1) {
        exp_param_text(val, cap, &ex->steps[at], (size_t)pi);
        return 0;
    }
    if (found > 1)
        snprintf(why, wcap, "placeholder {%s} is a parameter of %zu steps; name one, e.g. {steps.%zu.%s}", name,
                 found, at, name);
    else
        snprintf(why, wcap, "unknown placeholder {%s}; no step has that parameter (write {steps.N.param} or "
                 "{param} for a parameter of one step)", name);
    return -1;
}

/* Fills `{name}` placeholders of tmpl with the experiment's values (pipelines: `{steps.S.name}` or `{name}`). */
static int fill_label(const JsonCtx *c, const char *path, const cJSON *label_node, const Experiment *ex, char **out)
{
    const char *tmpl = label_node->valuestring;
    int pipeline = ex->n_steps > 0;
    size_t len = 0, cap = strlen(tmpl) + 16;
    char *buf = xmalloc(cap);
    buf[0] = '\0';
    for (const char *p = tmpl; *p;) {
        const char *close = p[0] == '{' ? strchr(p, '}') : NULL;
        if (close) {
            char name[64];
            size_t n = (size_t)(close - p - 1);
            int ident = n > 0 && n < sizeof name;
            for (size_t i = 0; ident && i < n; i++) {
                char ch = p[1 + i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      (pipeline && ch == '.')))
                    ident = 0;
            }
            if (ident) {
                memcpy(name, p + 1, n);
                name[n] = '\0';
                char val[64];
                if (pipeline) {
                    char why[256];
                    if (step_placeholder(val, sizeof val, ex, name, why, sizeof why)) {
                        free(buf);
                        return json_bad(c, path, label_node, "%s", why);
                    }
                } else {
                    int pi = method_param_index(ex->method, name);
                    if (pi < 0) {
                        const char *names[METHOD_MAX_PARAMS + 1];
                        for (size_t i = 0; i < ex->method->n_params; i++) names[i] = ex->method->params[i].name;
                        names[ex->method->n_params] = NULL;
                        free(buf);
                        return json_bad(c, path, label_node, "unknown placeholder {%s}; %s has %s%s%s", name,
                                   ex->method->name, names[0] ? "{" : "no parameters",
                                   names[0] ? json_nearest(name, names) : "", names[0] ? "}, ..." : "");
                    }
                    exp_param_text(val, sizeof val, ex, (size_t)pi);
                }
                str_append(&buf, &len, &cap, val, strlen(val));
                p = close + 1;
                continue;
            }
        }
        str_append(&buf, &len, &cap, p, 1);
        p++;
    }
    if (len > CONFIG_MAX_LABEL) {
        free(buf);
        return json_bad(c, path, label_node, "the label is %zu bytes once its placeholders are filled; a label must "
                        "be at most %d bytes (it is copied into every row)", len, CONFIG_MAX_LABEL);
    }
    *out = buf;
    return 0;
}

static int cmp_label(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* After an experiment object with a label template expanded into exps[0..n): when two rows got the same label, a
 * note naming the list-valued parameters the template leaves out (cfg->notes). */
static void note_duplicate_labels(const JsonCtx *c, Config *cfg, const char *lpath, const char *tmpl,
                                  const Experiment *exps, size_t n, const Axis *axes, size_t n_axes)
{
    if (n < 2) return;
    char **labels = xmalloc(n * sizeof *labels);
    for (size_t i = 0; i < n; i++) labels[i] = exps[i].label;
    qsort(labels, n, sizeof *labels, cmp_label);
    const char *dup = NULL;
    size_t same = 0;
    for (size_t i = 1; i < n; i++)
        if (strcmp(labels[i], labels[i - 1]) == 0) {
            if (!dup) dup = labels[i], same = 1;
            if (labels[i] == dup || strcmp(labels[i], dup) == 0) same++;
        }
    if (!dup) {
        free(labels);
        return;
    }
    char add[512] = "";
    size_t n_add = 0;
    for (size_t a = 0; a < n_axes; a++) {
        if (!axes[a].is_list || axes[a].n < 2) continue;
        const Experiment *ex = exps[0].n_steps ? &exps[0].steps[axes[a].step] : &exps[0];
        const char *name = ex->method->params[axes[a].param].name;
        char ph[96], ph_step[112];
        snprintf(ph, sizeof ph, "{%s}", name);
        snprintf(ph_step, sizeof ph_step, "{steps.%zu.%s}", axes[a].step, name);
        int shared = 0;   /* a pipeline parameter of several steps needs {steps.S.name} */
        for (size_t k = 0; exps[0].n_steps && k < exps[0].n_steps; k++)
            shared += method_param_index(exps[0].steps[k].method, name) >= 0;
        if (strstr(tmpl, ph_step) || (shared <= 1 && strstr(tmpl, ph))) continue;
        size_t l = strlen(add);
        snprintf(add + l, sizeof add - l, "%s%s", n_add++ ? " and " : "", shared > 1 ? ph_step : ph);
    }
    char line[1024];
    int len = snprintf(line, sizeof line, "kvc: note: %s: %s: %zu rows share the label \"%.60s%s\"; %s%s%s\n", c->file,
                       lpath, same, dup, strlen(dup) > 60 ? "..." : "",
                       n_add ? "add " : "give the rows different labels", add,
                       n_add ? " to the label to tell them apart" : "");
    for (int i = 0; i < len - 1 && i < (int)sizeof line - 2; i++)   /* one line, whatever the label holds */
        if ((unsigned char)line[i] < 0x20) line[i] = ' ';
    size_t nl = cfg->notes ? strlen(cfg->notes) : 0, cap = nl + 1;
    char *notes = cfg->notes ? cfg->notes : xmalloc(cap);
    if (!cfg->notes) notes[0] = '\0';
    str_append(&notes, &nl, &cap, line, strlen(line));
    cfg->notes = notes;
    free(labels);
}

/* Default label: "method key=value ..." for the keys the experiment object gives; a pipeline joins its steps'
 * default labels with " | ". */
static char *default_label(const Experiment *ex, const Axis *axes, size_t n_axes)
{
    size_t len = 0, cap = 64;
    char *buf = xmalloc(cap);
    buf[0] = '\0';
    size_t nsteps = ex->n_steps ? ex->n_steps : 1;
    for (size_t s = 0; s < nsteps; s++) {
        const Experiment *e = ex->n_steps ? &ex->steps[s] : ex;
        if (s) str_append(&buf, &len, &cap, " | ", 3);
        str_append(&buf, &len, &cap, e->method->name, strlen(e->method->name));
        for (size_t a = 0; a < n_axes; a++) {
            if (ex->n_steps && axes[a].step != s) continue;
            const ParamDesc *pd = &e->method->params[axes[a].param];
            char part[128], val[64];
            exp_param_text(val, sizeof val, e, (size_t)axes[a].param);
            snprintf(part, sizeof part, " %s=%s", pd->name, val);
            str_append(&buf, &len, &cap, part, strlen(part));
        }
    }
    return buf;
}

/* The method named by member "method" of object e (at path; mpath is path.method), a string from the registry. A
 * missing "method" next to a near spelling of it ("metod") names that key. */
static int method_of(const JsonCtx *c, const cJSON *e, const char *path, const char *mpath, const MethodDesc **out)
{
    const char *names[64];
    size_t nn = 0;
    for (size_t i = 0; i < method_count && nn < 63; i++) names[nn++] = method_registry[i]->name;
    names[nn] = NULL;
    const cJSON *mnode = json_member(e, "method");
    if (!mnode) return json_missing(c, e, path, "method", "(a method name; see `kvc methods`)");
    if (!cJSON_IsString(mnode)) return json_bad(c, mpath, mnode, "must be a method name string (see `kvc methods`)");
    *out = method_find(mnode->valuestring);
    if (!*out)
        return json_bad(c, mpath, mnode, "unknown method; did you mean \"%s\"? (see `kvc methods`)",
                   json_nearest(mnode->valuestring, names));
    return 0;
}

/* The keys of experiment (or step) object e of method m: allowed (NULL-terminated) or refused. A key that is a
 * parameter of other methods says which ones take it (a "budget" given to sink_window); any other unknown key
 * names the nearest allowed one (json_check_keys). */
static int check_method_keys(const JsonCtx *c, const cJSON *e, const char *path, const MethodDesc *m,
                             const char *const *allowed)
{
    if (json_keys_watch) json_keys_watch(e, path, allowed);   /* completion learns the keys even when e is refused */
    for (const cJSON *it = e->child; it; it = it->next) {
        int ok = 0;
        for (size_t i = 0; allowed[i]; i++) ok |= strcmp(allowed[i], it->string) == 0;
        if (ok) continue;
        char others[512] = "", own[512] = "";
        size_t n_others = 0;
        for (size_t k = 0; k < method_count; k++)
            if (method_registry[k] != m && method_param_index(method_registry[k], it->string) >= 0) {
                size_t l = strlen(others);
                snprintf(others + l, sizeof others - l, "%s%s", n_others++ ? ", " : "", method_registry[k]->name);
            }
        if (!n_others) break;   /* not a parameter of any method: json_check_keys suggests the nearest key */
        for (size_t i = 0; i < m->n_params; i++) {
            size_t l = strlen(own);
            snprintf(own + l, sizeof own - l, "%s%s", i ? ", " : "", m->params[i].name);
        }
        return json_unknown_key(c, path, it->string, "unknown key: %s takes %s%s; %s is a parameter of %s", m->name,
                                m->n_params ? "" : "no parameters", own, it->string, others);
    }
    return json_check_keys(c, e, path, allowed);
}

/* Collects the grid axes of the parameters of method m in object e (path `path`), in key order, validating every
 * value once, and checks that the required parameters are there. Appends to axes[*n_axes]; *rows *= sizes. */
static int collect_axes(const JsonCtx *c, const cJSON *e, const char *path, const MethodDesc *m, size_t step,
                        Axis *axes, size_t *n_axes, size_t *rows)
{
    size_t first = *n_axes;
    for (const cJSON *it = e->child; it; it = it->next) {
        int pi = method_param_index(m, it->string);
        if (pi < 0) continue;
        Axis *ax = &axes[(*n_axes)++];
        ax->param = pi;
        ax->node = it;
        ax->is_list = cJSON_IsArray(it);
        ax->n = ax->is_list ? (size_t)cJSON_GetArraySize(it) : 1;
        ax->step = step;
        char ppath[160];
        json_join(ppath, sizeof ppath, path, it->string);
        if (ax->is_list && ax->n == 0) return json_bad(c, ppath, it, "a list of values must not be empty");
        size_t k = 0;
        for (const cJSON *v = ax->is_list ? it->child : it; v; v = ax->is_list ? v->next : NULL, k++) {
            char vpath[192];
            if (ax->is_list)
                snprintf(vpath, sizeof vpath, "%s.%zu", ppath, k);
            else
                snprintf(vpath, sizeof vpath, "%s", ppath);
            long tmp;
            double dtmp;
            if (cJSON_IsArray(v)) return json_bad(c, vpath, v, "lists of lists are not allowed");
            if (param_value(c, &m->params[pi], v, vpath, &tmp, &dtmp)) return -1;
        }
        if (size_mul(*rows, ax->n, rows) || *rows > CONFIG_MAX_ROWS)
            return json_bad(c, ppath, it, "the experiment grid would exceed %lu rows", CONFIG_MAX_ROWS);
    }
    for (size_t i = 0; i < m->n_params; i++) {
        int given = 0;
        for (size_t a = first; a < *n_axes; a++) given |= axes[a].param == (int)i;
        if (!given && m->params[i].def == PARAM_REQUIRED) {
            char ppath[160];
            json_join(ppath, sizeof ppath, path, m->params[i].name);
            return json_bad(c, ppath, NULL, "missing required parameter of %s: %s", m->name, m->params[i].help);
        }
    }
    return 0;
}

/* An experiment (or step) of method m with every parameter at its default. */
static void init_experiment(Experiment *ex, const MethodDesc *m, size_t ei)
{
    memset(ex, 0, sizeof *ex);
    ex->method = m;
    ex->src = ei;
    for (size_t i = 0; i < m->n_params; i++) {
        ex->p[i] = m->params[i].def;
        ex->num[i] = m->params[i].num_def;
        ex->pos[i] = POS_DEFAULT;
    }
}

/* Validates experiment object `e` (index ei) and appends its grid points to cfg->exps. A pipeline's "steps" are
 * method objects without labels; their parameters form one grid, in step order and key order. */
static int expand_experiment(const JsonCtx *c, Config *cfg, const cJSON *e, size_t ei, size_t *cap)
{
    char path[64];
    snprintf(path, sizeof path, "experiments.%zu", ei);
    if (json_need_object(c, e, path)) return -1;

    char mpath[96];
    json_join(mpath, sizeof mpath, path, "method");
    const cJSON *mnode = json_member(e, "method");
    const MethodDesc *m;
    if (method_of(c, e, path, mpath, &m)) return -1;
    int pipeline = m == &method_pipeline;

    /* allowed keys: label, method and the method's parameters (a pipeline: steps) */
    const char *allowed[METHOD_MAX_PARAMS + 3];
    size_t na = 0;
    allowed[na++] = "label";
    allowed[na++] = "method";
    if (pipeline) allowed[na++] = "steps";
    for (size_t i = 0; i < m->n_params; i++) allowed[na++] = m->params[i].name;
    allowed[na] = NULL;
    if (check_method_keys(c, e, path, m, allowed)) return -1;

    const cJSON *label = json_member(e, "label");
    char lpath[96];
    json_join(lpath, sizeof lpath, path, "label");
    if (label && !cJSON_IsString(label)) return json_bad(c, lpath, label, "must be a string");
    if (label && strlen(label->valuestring) > CONFIG_MAX_LABEL)
        return json_bad(c, lpath, label, "a label must be at most %d bytes (it is copied into every row)",
                        CONFIG_MAX_LABEL);

    /* the grid axes, in the object's key order (a pipeline: its steps' keys, step by step); values are validated
     * here, once each */
    size_t n_steps = 0, rows = 1, n_axes = 0, max_axes = METHOD_MAX_PARAMS;
    const MethodDesc **smeth = NULL;
    const cJSON *steps = NULL;
    if (pipeline) {
        char spath[96];
        json_join(spath, sizeof spath, path, "steps");
        steps = json_member(e, "steps");
        if (!steps) return json_bad(c, spath, NULL,
                                    "missing required list of steps, e.g. [{\"method\": \"share_heads\", "
                               "\"group\": 4}, {\"method\": \"quantize\", \"bits\": 8}]");
        if (!cJSON_IsArray(steps) || !steps->child)
            return json_bad(c, spath, steps, "must be a non-empty list of method objects");
        n_steps = (size_t)cJSON_GetArraySize(steps);
        if (n_steps > 64) return json_bad(c, spath, steps, "at most 64 steps");
        max_axes = n_steps * METHOD_MAX_PARAMS;
    }
    Axis *axes = xcalloc(max_axes, sizeof *axes);
    int rc = 0;
    if (pipeline) {
        smeth = xcalloc(n_steps, sizeof *smeth);
        size_t k = 0;
        for (const cJSON *s = steps->child; s && rc == 0; s = s->next, k++) {
            char spath[96], smpath[112];
            snprintf(spath, sizeof spath, "%s.steps.%zu", path, k);
            json_join(smpath, sizeof smpath, spath, "method");
            if (json_need_object(c, s, spath) || method_of(c, s, spath, smpath, &smeth[k])) {
                rc = -1;
                break;
            }
            if (smeth[k] == &method_pipeline) {
                rc = json_bad(c, smpath, json_member(s, "method"),
                              "a pipeline cannot be a step of a pipeline; list its steps "
                         "here");
                break;
            }
            const char *sallowed[METHOD_MAX_PARAMS + 2];
            size_t sa = 0;
            sallowed[sa++] = "method";
            for (size_t i = 0; i < smeth[k]->n_params; i++) sallowed[sa++] = smeth[k]->params[i].name;
            sallowed[sa] = NULL;
            if (check_method_keys(c, s, spath, smeth[k], sallowed) ||
                collect_axes(c, s, spath, smeth[k], k, axes, &n_axes, &rows))
                rc = -1;
            if (rc == 0 && smeth[k]->needs_query && !cfg->dims.has_query)
                rc = json_bad(c, smpath, json_member(s, "method"),
                              "this method looks at the query's attention; add data.query");
        }
    } else {
        rc = collect_axes(c, e, path, m, 0, axes, &n_axes, &rows);
        if (rc == 0 && m->needs_query && !cfg->dims.has_query)
            rc = json_bad(c, mpath, mnode, "this method looks at the query's attention; add data.query");
    }
    size_t total;
    if (rc == 0 && (size_add(cfg->n_exps, rows, &total) || total > CONFIG_MAX_ROWS))
        rc = json_bad(c, path, NULL, "the expanded experiments would exceed %lu rows", CONFIG_MAX_ROWS);

    for (size_t r = 0; rc == 0 && r < rows; r++) {
        if (cfg->n_exps == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            Experiment *ne = xcalloc(nc, sizeof *ne);
            if (cfg->n_exps) memcpy(ne, cfg->exps, cfg->n_exps * sizeof *ne);
            free(cfg->exps);
            cfg->exps = ne;
            *cap = nc;
        }
        Experiment *ex = &cfg->exps[cfg->n_exps];
        init_experiment(ex, m, ei);
        if (pipeline) {
            ex->steps = xcalloc(n_steps, sizeof *ex->steps);
            ex->n_steps = n_steps;
            for (size_t k = 0; k < n_steps; k++) {
                init_experiment(&ex->steps[k], smeth[k], ei);
                ex->steps[k].is_step = 1;
                ex->steps[k].step = k;
            }
        }
        cfg->n_exps++;   /* counted now, so config_free releases its steps if a check below fails */
        /* mixed-radix decode of r, the last axis varying fastest */
        size_t rest = r;
        for (size_t a = n_axes; a-- > 0;) {
            Experiment *tgt = pipeline ? &ex->steps[axes[a].step] : ex;
            size_t k = rest % axes[a].n;
            rest /= axes[a].n;
            const cJSON *v = axes[a].is_list ? cJSON_GetArrayItem(axes[a].node, (int)k) : axes[a].node;
            long val = 0;
            double num = 0;
            int vrc = param_value(c, &tgt->method->params[axes[a].param], v, "", &val, &num);
            (void)vrc; /* validated above */
            tgt->p[axes[a].param] = val;
            tgt->num[axes[a].param] = num;
            tgt->pos[axes[a].param] = axes[a].is_list ? (int)k : POS_SCALAR;
        }
        if (m->check && m->check(ex, &cfg->dims)) {
            /* prefix the file name: method checks know only the JSON path */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kvc_errmsg());
            rc = kvc_fail("%s: %s", c->file, msg);
            break;
        }
        if (label) {
            if (fill_label(c, lpath, label, ex, &ex->label)) rc = -1;
        } else {
            ex->label = default_label(ex, axes, n_axes);
        }
    }
    if (rc == 0 && label)
        note_duplicate_labels(c, cfg, lpath, label->valuestring, cfg->exps + cfg->n_exps - rows, rows, axes, n_axes);
    free(axes);
    free(smeth);
    return rc;
}

int grid_expand(const JsonCtx *c, Config *cfg, const cJSON *list)
{
    if (!list) return json_bad(c, "experiments", NULL, "missing required list of experiments");
    if (!cJSON_IsArray(list)) return json_bad(c, "experiments", list, "must be a list of experiment objects");
    if (!list->child) return json_bad(c, "experiments", list, "the list of experiments is empty");
    cfg->dims.kv_heads = cfg->kv_heads;   /* what method checks may know beyond T and D */
    cfg->dims.n_obs = cfg->observe.n;
    size_t cap = 0, i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++)
        if (expand_experiment(c, cfg, e, i, &cap)) return -1;
    return 0;
}
