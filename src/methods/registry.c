/* registry: the table of methods, and the helpers every method shares. */
#include "methods/methods.h"
#include "base/util.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const MethodDesc *const method_registry[] = {
    &method_quantize,
    &method_kivi,
    &method_cast,
    &method_ggml,
    &method_sink_window,
    &method_topk_attention,
    &method_lowrank,
    &method_window,
    &method_h2o,
    &method_snapkv,
    &method_tova,
    &method_knorm,
    &method_random,
    &method_share_heads,
    &method_pipeline,
    &method_none,
};
const size_t method_count = sizeof method_registry / sizeof method_registry[0];

const char *const apply_to_choices[] = {"k", "v", "kv", NULL};

const MethodDesc *method_find(const char *name)
{
    for (size_t i = 0; i < method_count; i++)
        if (strcmp(method_registry[i]->name, name) == 0) return method_registry[i];
    return NULL;
}

int method_param_index(const MethodDesc *m, const char *name)
{
    for (size_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return (int)i;
    return -1;
}

long exp_param(const Experiment *ex, const char *name)
{
    int i = method_param_index(ex->method, name);
    assert(i >= 0);
    return ex->p[i];
}

const char *exp_param_str(const Experiment *ex, const char *name)
{
    int i = method_param_index(ex->method, name);
    assert(i >= 0 && ex->method->params[i].kind == PARAM_ENUM);
    return ex->method->params[i].choices[ex->p[i]];
}

double exp_param_num(const Experiment *ex, const char *name)
{
    int i = method_param_index(ex->method, name);
    assert(i >= 0 && ex->method->params[i].kind == PARAM_NUM);
    return ex->num[i];
}

void exp_param_text(char *buf, size_t cap, const Experiment *ex, size_t i)
{
    const ParamDesc *pd = &ex->method->params[i];
    if (pd->kind == PARAM_ENUM) snprintf(buf, cap, "%s", pd->choices[ex->p[i]]);
    else if (pd->kind == PARAM_NUM) fmt_double(buf, cap, ex->num[i]);
    else if (pd->kind == PARAM_BOOL) snprintf(buf, cap, "%s", ex->p[i] ? "true" : "false");
    else snprintf(buf, cap, "%ld", ex->p[i]);
}

void param_default_text(char *buf, size_t cap, const ParamDesc *p)
{
    char v[64];
    if (p->def == PARAM_REQUIRED) {
        snprintf(buf, cap, "required");
        return;
    }
    if (p->kind == PARAM_INT && (p->def < p->lo || p->def > p->hi)) snprintf(buf, cap, "optional");
    else if (p->kind == PARAM_ENUM) snprintf(buf, cap, "default \"%s\"", p->choices[p->def]);
    else if (p->kind == PARAM_BOOL) snprintf(buf, cap, "default %s", p->def ? "true" : "false");
    else if (p->kind == PARAM_NUM) { fmt_double(v, sizeof v, p->num_def); snprintf(buf, cap, "default %s", v); }
    else snprintf(buf, cap, "default %ld", p->def);
}

void param_range_text(char *buf, size_t cap, const ParamDesc *p)
{
    buf[0] = '\0';
    if (p->kind == PARAM_ENUM) {
        size_t len = 0;
        for (size_t k = 0; p->choices[k] && len < cap; k++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", k ? "|" : "", p->choices[k]);
    } else if (p->kind == PARAM_BOOL) {
        snprintf(buf, cap, "false|true");
    } else if (p->kind == PARAM_NUM) {
        char lo[40], hi[40];
        fmt_double(lo, sizeof lo, p->num_lo);
        fmt_double(hi, sizeof hi, p->num_hi);
        snprintf(buf, cap, "%s..%s", lo, hi);
    } else {
        snprintf(buf, cap, "%ld..%ld", p->lo, p->hi);
    }
}

int exp_param_listed(const Experiment *ex, size_t i)
{
    const ParamDesc *pd = &ex->method->params[i];
    if (!pd->id_when_set) return 1;
    if (pd->kind == PARAM_NUM) return ex->num[i] != pd->num_def;
    return ex->p[i] != pd->def;
}

const char *exp_path(const Experiment *ex, const char *key)
{
    static _Thread_local char buf[128];
    if (ex->is_step) snprintf(buf, sizeof buf, "experiments.%zu.steps.%zu.%s", ex->src, ex->step, key);
    else snprintf(buf, sizeof buf, "experiments.%zu.%s", ex->src, key);
    return buf;
}

const char *exp_param_path(const Experiment *ex, const char *name)
{
    static _Thread_local char buf[160];
    int i = method_param_index(ex->method, name);
    assert(i >= 0);
    const char *where = exp_path(ex, name);
    if (ex->pos[i] >= 0)
        snprintf(buf, sizeof buf, "%s.%d", where, ex->pos[i]);
    else
        snprintf(buf, sizeof buf, "%s%s", where, ex->pos[i] == POS_DEFAULT ? " (default)" : "");
    return buf;
}

int apply_to_check(const Experiment *ex, const Dims *d)
{
    int i = method_param_index(ex->method, "apply_to");
    assert(i >= 0);
    if (ex->p[i] != APPLY_K && !d->has_values)
        return kvc_fail("%s: needs values in the cache; add data.values or use \"k\" (got \"%s\")",
                        exp_param_path(ex, "apply_to"), apply_to_choices[ex->p[i]]);
    return 0;
}

void method_stored_free(MethodStored *s)
{
    store_free(&s->K);
    store_free(&s->V);
    store_free(&s->Kr);
    store_free(&s->Vr);
}

void compressed_free(Compressed *c)
{
    if (!c) return;
    method_stored_free(&c->stored);
    free(c->K);
    free(c->V);
    free(c->kept);
    free(c->Kcoef);
    free(c->Kbasis);
    free(c->Vcoef);
    free(c->Vbasis);
    memset(c, 0, sizeof *c);
}

int method_layer_wide(const Experiment *ex)
{
    const MethodDesc *m = ex->method;
    if (!m->apply_layer) return 0;
    return m->layer_wide ? m->layer_wide(ex) : 1;
}

uint64_t method_split_bytes(uint64_t total, size_t n, size_t i)
{
    assert(n > 0 && i < n);
    return total / n + (i < total % n ? 1 : 0);
}

int method_apply_one_head(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    memset(out, 0, sizeof *out);
    return ex->method->apply_layer(out, ex, in, 1);
}

void method_store_f16(StoreTensor *st, const double *x, const size_t *rows, size_t n, size_t D)
{
    StoreFormat f;
    memset(&f, 0, sizeof f);
    f.type = STORE_F16;
    store_alloc(st, f, n, D);
    if (!rows) {
        store_quantize_f64(st, x);
        return;
    }
    double *y = xmalloc(n * D * sizeof *y);
    for (size_t i = 0; i < n; i++) memcpy(y + i * D, x + rows[i] * D, D * sizeof *y);
    store_quantize_f64(st, y);
    free(y);
}

/* The FP16 tensors of the cache that the method left to the default: the exact rows the head keeps. */
static void complete_stored(Compressed *c, const MethodInput *in)
{
    MethodStored *s = &c->stored;
    if (s->none || s->reads_first) return;
    for (int v = 0; v < 2; v++) {
        const double *x = v ? in->V : in->K;
        StoreTensor *st = v ? &s->V : &s->K;
        if (!x || st->codes) continue;
        size_t n = c->kept ? c->n_kept : in->T;
        if (v ? c->V : c->K) {   /* rewritten without a stored tensor */
            s->none = "the method has no stored form";
            return;
        }
        if (n == 0) {
            s->none = "the head keeps no tokens";
            return;
        }
        method_store_f16(st, x, c->kept, n, in->D);
    }
}

int method_run(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H, int stored)
{
    const MethodDesc *m = ex->method;
    memset(out, 0, H * sizeof *out);
    int rc = m->apply_layer ? m->apply_layer(out, ex, in, H) : 0;
    for (size_t h = 0; !m->apply_layer && rc == 0 && h < H; h++) rc = m->apply(&out[h], ex, &in[h]);
    if (rc) return -1;
    for (size_t h = 0; h < H; h++) {
        if (stored) complete_stored(&out[h], &in[h]);
        else method_stored_free(&out[h].stored);
    }
    return 0;
}
