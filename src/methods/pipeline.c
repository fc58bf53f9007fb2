/* pipeline: several methods applied in order to one cache ("method": "pipeline", "steps": [...]); the bytes are
 * those of the final stored form. README "Composition" is the specification; this is its implementation.
 *
 * Per layer, the cache is a set of stored heads (the H KV heads, or H / group pooled heads after share_heads).
 * A stored head holds n rows (ascending token positions pos), and per tensor (K, and V when the cache holds
 * values) its stored rows S (n, W) as they read back, with W = D, or W = r and a basis B (r, D) when a step
 * stored the tensor low rank (X' = S @ B). Steps, in the order they must come:
 *   1. share_heads (first step only): pools the layer's heads (share.c); observation queries of the group's
 *      query heads all read the pooled head; attention-space keys are the mean of the group's; w_ref (oracle
 *      weights) is the sum of the group's.
 *   2. eviction steps (MethodDesc.evicts): run on the stored rows (dense, W = D) with their positions; keep a
 *      subset. Index bytes: the first eviction step's own (0 for a positional one); after several, 0 if every
 *      one was positional, else int32 per kept row.
 *   3. steps that rewrite values (every other method): run on the stored rows S (n, W), i.e. on the low-rank
 *      coefficients after a low-rank step (its basis stays FP16); a step that returns a factored form (lowrank)
 *      makes the tensor low rank (a second basis is multiplied into the first). Untouched tensors keep their
 *      stored form and bytes. K and V of different widths are run separately (K alone; V with a same-width copy
 *      of itself in the K role, its bytes the difference of two runs).
 * Bytes of a stored head: index bytes + per tensor its rows' bytes (the last step that rewrote it, or FP16) +
 * its basis (2 x r x D, once per layer when shared); split over the heads that read it (method_split_bytes).
 * Output per original head: kept = the positions (when a step evicted), K'/V' = the reconstructed rows at their
 * positions (evicted rows keep their exact values), NULL for a tensor no step changed.
 * Stored form (Compressed.stored) of a stored head, per tensor: the tensors the last step that rewrote it stored
 * for its role (a second segment too: KIVI's FP16 window), made low rank with the FP16 basis when the tensor is
 * (store_set_lowrank_f64: the step stored coefficients); a tensor no step rewrote is its rows in FP16. The first
 * head of a group holds it, the others read it (MethodStored.reads_first). Not timed (MethodStored.none): a
 * step's stored form the decode path does not read, low-rank coefficients in a grouped integer format, and one
 * tensor with KIVI's window and one without (a step after kivi that rewrites one tensor only).
 */
#include "methods/methods.h"
#include "methods/share.h"
#include "base/linalg.h"
#include "base/util.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct StepTensor {
    size_t W;               /* stored columns per row */
    double *S;              /* (n, W) */
    double *B;              /* (W, D) basis of a low-rank form, or NULL */
    uint64_t rows_bytes;    /* bytes of the stored rows (codes, scales) */
    int basis_shared;       /* the basis is stored once per layer */
    int touched;            /* the values differ from the exact cache */
    StoreTensor st, str;    /* the rows as the last step that rewrote them stored them, without the pipeline's
                               basis (str: a second segment after them, or empty); empty until a step rewrites */
    const char *none;       /* that step's stored form has no decode path, and why */
} StepTensor;

typedef struct Stored {
    size_t n, *pos;         /* rows and their positions */
    int evicted;
    uint64_t idx_bytes;
    StepTensor X[2];            /* K, V */
    double *Katt;           /* (n, D) attention-space keys when they differ from S_K (pre-RoPE cache), or NULL */
    double *w_ref;          /* (n,) oracle weights, or NULL */
    MethodInput base;       /* observation queries, layer, head, seed */
    size_t h0, nh;          /* original heads h0 .. h0 + nh - 1 read it */
} Stored;

static int is_share(const Experiment *st) { return st->method == &method_share_heads; }

/* ---- config-time checks ---- */

static int pl_check(const Experiment *ex, const Dims *d)
{
    Dims dd = *d;
    int rewrote = 0;
    for (size_t k = 0; k < ex->n_steps; k++) {
        const Experiment *st = &ex->steps[k];
        const MethodDesc *m = st->method;
        char where[96];
        snprintf(where, sizeof where, "experiments.%zu.steps.%zu.method", ex->src, k);
        if (m == &method_pipeline)
            return kvc_fail("%s: a pipeline cannot be a step of a pipeline; list its steps here (got \"pipeline\")",
                            where);
        if (is_share(st) && k > 0)
            return kvc_fail("%s: share_heads pools whole heads and must be the first step (got step %zu)", where, k);
        if (m->evicts && rewrote)
            return kvc_fail("%s: eviction steps come before the steps that rewrite values (a quantizer after an "
                            "eviction stores the kept tokens only) (got %s after %s)", where, m->name,
                            ex->steps[k - 1].method->name);
        if (m->needs_query && !d->has_query)
            return kvc_fail("%s: this method looks at the query's attention; add data.query (got \"%s\")", where,
                            m->name);
        if (m->check && m->check(st, &dd)) return -1;
        if (is_share(st)) {
            dd.kv_heads = (dd.kv_heads ? dd.kv_heads : 1) / (size_t)exp_param(st, "group");
        } else if (m->evicts) {
            if (m->kept_tokens) dd.T = m->kept_tokens(st, &dd);
        } else {
            rewrote = 1;
        }
    }
    return 0;
}

/* ---- state ---- */

static void stored_free(Stored *s)
{
    free(s->pos);
    free(s->Katt);
    free(s->w_ref);
    for (int x = 0; x < 2; x++) {
        free(s->X[x].S);
        free(s->X[x].B);
        store_free(&s->X[x].st);
        store_free(&s->X[x].str);
    }
}

static double *dup(const double *x, size_t n)
{
    double *y = xmalloc((n ? n : 1) * sizeof *y);
    if (n) memcpy(y, x, n * sizeof *y);
    return y;
}

/* Stored heads of a layer before any step, or after share_heads with groups of g. */
static void init_stored(Stored *st, const MethodInput *in, size_t H, size_t g)
{
    size_t T = in[0].T, D = in[0].D, m = T * D;
    int has_v = in[0].V != NULL;
    for (size_t s = 0; s < H / g; s++) {
        Stored *p = &st[s];
        const MethodInput *a = &in[s * g];
        memset(p, 0, sizeof *p);
        p->h0 = s * g;
        p->nh = g;
        p->n = T;
        p->pos = xmalloc(T * sizeof *p->pos);
        for (size_t t = 0; t < T; t++) p->pos[t] = t;
        p->base = *a;
        p->base.svd = NULL;   /* steps see the pipeline's own rows, never the data tensors the cache is keyed on */
        p->base.head = s;
        p->base.n_obs_heads = a->n_obs_heads * g;
        for (int x = 0; x < 1 + has_v; x++) {
            StepTensor *X = &p->X[x];
            X->W = D;
            X->rows_bytes = 2 * (uint64_t)m;
            const double **src = xmalloc(g * sizeof *src);
            for (size_t k = 0; k < g; k++) src[k] = x ? a[k].V : a[k].K;
            X->S = xmalloc(m * sizeof *X->S);
            share_pool(X->S, src, g, m);   /* g = 1: a copy */
            free(src);
            X->touched = g > 1;
        }
        if (a->K_att) {
            const double **src = xmalloc(g * sizeof *src);
            for (size_t k = 0; k < g; k++) src[k] = a[k].K_att;
            p->Katt = xmalloc(m * sizeof *p->Katt);
            share_pool(p->Katt, src, g, m);
            free(src);
        }
        if (a->w_ref) {
            p->w_ref = dup(a->w_ref, T);
            for (size_t k = 1; k < g; k++)
                for (size_t t = 0; t < T; t++) p->w_ref[t] = p->w_ref[t] + a[k].w_ref[t];
        }
    }
}

/* ---- running one step on every stored head ---- */

/* Runs step st on mi[0..n) (apply_layer once, or apply per head) after its check on each input's sizes;
 * has_v: the cache holds values (a run on K alone to tell the bytes apart still checks as the cache is). */
static int call_step(Compressed *c, const Experiment *st, const MethodInput *mi, size_t n, int has_v)
{
    memset(c, 0, n * sizeof *c);
    for (size_t s = 0; s < n; s++) {
        Dims d = {.T = mi[s].T, .D = mi[s].D, .has_values = has_v, .has_query = mi[s].w_ref != NULL,
                  .kv_heads = n, .n_obs = mi[s].n_obs};
        if (st->method->check && st->method->check(st, &d)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kvc_errmsg());
            return kvc_fail("%s; in the pipeline at layer %zu, stored head %zu, this step sees %zu rows of width %zu",
                            msg, mi[s].layer, mi[s].head, mi[s].T, mi[s].D);
        }
    }
    if (st->method->apply_layer) return st->method->apply_layer(c, st, mi, n);
    for (size_t s = 0; s < n; s++)
        if (st->method->apply(&c[s], st, &mi[s])) return -1;
    return 0;
}

static void free_all(Compressed *c, size_t n)
{
    for (size_t s = 0; s < n; s++) compressed_free(&c[s]);
}

static double *gather(const double *x, const size_t *idx, size_t n, size_t w)
{
    double *y = xmalloc(n * w * sizeof *y);
    for (size_t i = 0; i < n; i++) memcpy(y + i * w, x + idx[i] * w, w * sizeof *y);
    return y;
}

static int evict_step(Stored *st, size_t nst, const Experiment *step, int has_v)
{
    MethodInput *mi = xcalloc(nst, sizeof *mi);
    Compressed *c = xcalloc(nst, sizeof *c);
    for (size_t s = 0; s < nst; s++) {
        Stored *p = &st[s];
        assert(!p->X[0].B && (!has_v || !p->X[1].B));   /* evictions come before rewrites (pl_check) */
        mi[s] = p->base;
        mi[s].T = p->n;
        mi[s].D = p->X[0].W;
        mi[s].K = p->X[0].S;
        mi[s].V = has_v ? p->X[1].S : NULL;
        mi[s].K_att = p->Katt;
        mi[s].w_ref = p->w_ref;
        mi[s].pos = p->pos;
    }
    int rc = call_step(c, step, mi, nst, has_v);
    for (size_t s = 0; rc == 0 && s < nst; s++) {
        Stored *p = &st[s];
        Compressed *r = &c[s];
        assert(r->kept && !r->K && !r->V);
        size_t n = r->n_kept, D = p->X[0].W;
        uint64_t fp16 = 2 * (uint64_t)n * D * (has_v ? 2 : 1);
        assert(r->bytes >= fp16);
        uint64_t extra = r->bytes - fp16;
        if (!p->evicted) p->idx_bytes = extra;
        else p->idx_bytes = p->idx_bytes == 0 && extra == 0 ? 0 : 4 * (uint64_t)n;
        p->evicted = 1;
        size_t *pos = xmalloc((n ? n : 1) * sizeof *pos);
        for (size_t i = 0; i < n; i++) pos[i] = p->pos[r->kept[i]];
        free(p->pos);
        p->pos = pos;
        for (int x = 0; x < 1 + has_v; x++) {
            double *S = gather(p->X[x].S, r->kept, n, p->X[x].W);
            free(p->X[x].S);
            p->X[x].S = S;
            p->X[x].rows_bytes = 2 * (uint64_t)n * p->X[x].W;
        }
        if (p->Katt) {
            double *Ka = gather(p->Katt, r->kept, n, D);
            free(p->Katt);
            p->Katt = Ka;
        }
        if (p->w_ref) {
            double *w = xmalloc((n ? n : 1) * sizeof *w);
            for (size_t i = 0; i < n; i++) w[i] = p->w_ref[r->kept[i]];
            free(p->w_ref);
            p->w_ref = w;
        }
        p->n = n;
    }
    free_all(c, nst);
    free(c);
    free(mi);
    return rc;
}

/* Inputs of a rewrite call: tensor k in the K role and tensor v (or none, -1) in the V role. */
static void rewrite_inputs(MethodInput *mi, const Stored *st, size_t nst, int k, int v)
{
    for (size_t s = 0; s < nst; s++) {
        const Stored *p = &st[s];
        memset(&mi[s], 0, sizeof mi[s]);
        mi[s].T = p->n;
        mi[s].D = p->X[k].W;
        mi[s].K = p->X[k].S;
        mi[s].V = v >= 0 ? p->X[v].S : NULL;
        mi[s].pos = p->pos;
        mi[s].layer = p->base.layer;
        mi[s].head = p->base.head;
        mi[s].seed = p->base.seed;
    }
}

/* StepTensor X takes the rewritten rows (or factored form) of result r for its role (0: K, 1: V), with rows bytes b,
 * and the tensors the step stored for that role. */
static void take(StepTensor *X, Compressed *r, int role, uint64_t b, size_t n, size_t D)
{
    MethodStored *ms = &r->stored;
    StoreTensor *sm = role ? &ms->V : &ms->K, *sr = role ? &ms->Vr : &ms->Kr;
    store_free(&X->st);
    store_free(&X->str);
    X->st = *sm;
    X->str = *sr;
    memset(sm, 0, sizeof *sm);
    memset(sr, 0, sizeof *sr);
    X->none = ms->none ? ms->none : !X->st.codes ? "a step has no stored form" : NULL;
    double **coef = role ? &r->Vcoef : &r->Kcoef, **basis = role ? &r->Vbasis : &r->Kbasis;
    double **rows = role ? &r->V : &r->K;
    size_t rank = role ? r->v_rank : r->k_rank;
    if (*coef) {
        double *B = *basis;
        if (X->B) {   /* X' = coef @ basis @ B: the new basis is basis @ B */
            B = xmalloc(rank * D * sizeof *B);
            la_matmul(B, *basis, X->B, rank, X->W, D);
            free(*basis);
        }
        free(X->B);
        free(X->S);
        X->S = *coef;
        X->B = B;
        X->W = rank;
        X->rows_bytes = 2 * (uint64_t)n * rank;
        X->basis_shared = r->basis_shared;
        *coef = NULL;
        *basis = NULL;
    } else {
        free(X->S);
        X->S = *rows;
        *rows = NULL;
        X->rows_bytes = b;
    }
    X->touched = 1;
}

static int rewrite_step(Stored *st, size_t nst, const Experiment *step, int has_v, int last)
{
    MethodInput *mi = xcalloc(nst, sizeof *mi);
    Compressed *c = xcalloc(nst, sizeof *c), *c2 = xcalloc(nst, sizeof *c2), *c3 = xcalloc(nst, sizeof *c3);
    size_t D = st[0].base.D;
    int rc, same = !has_v || st[0].X[0].W == st[0].X[1].W;
    for (size_t s = 1; same && has_v && s < nst; s++) same = st[s].X[0].W == st[s].X[1].W;
    if (same) {
        rewrite_inputs(mi, st, nst, 0, has_v ? 1 : -1);
        rc = call_step(c, step, mi, nst, has_v);
        int split = 0;   /* both tensors rewritten into rows whose bytes must be told apart */
        for (size_t s = 0; rc == 0 && s < nst; s++)
            split |= c[s].K && c[s].V && !(c[s].Kcoef && c[s].Vcoef) && (!last || c[s].Kcoef || c[s].Vcoef);
        if (rc == 0 && split) {   /* split the bytes: K alone */
            rewrite_inputs(mi, st, nst, 0, -1);
            rc = call_step(c2, step, mi, nst, has_v);
        }
        for (size_t s = 0; rc == 0 && s < nst; s++) {
            Stored *p = &st[s];
            Compressed *r = &c[s];
            assert(!r->kept);
            size_t n = p->n;
            uint64_t other = has_v ? 2 * (uint64_t)n * p->X[1].W : 0;
            if ((r->K || r->Kcoef) && (r->V || r->Vcoef)) {
                /* without a split (the last step, rows only): all of the bytes are counted on K */
                uint64_t bk = split ? c2[s].bytes : r->bytes, bv = r->bytes - bk;
                take(&p->X[0], r, 0, bk, n, D);
                take(&p->X[1], r, 1, bv, n, D);
            } else if (r->K || r->Kcoef) {
                take(&p->X[0], r, 0, r->bytes - other, n, D);
            } else if (r->V || r->Vcoef) {
                take(&p->X[1], r, 1, r->bytes - 2 * (uint64_t)n * p->X[0].W, n, D);
            }
        }
    } else {
        rewrite_inputs(mi, st, nst, 0, -1);
        rc = call_step(c, step, mi, nst, has_v);   /* K alone */
        for (size_t s = 0; rc == 0 && s < nst; s++)
            if (c[s].K || c[s].Kcoef) take(&st[s].X[0], &c[s], 0, c[s].bytes, st[s].n, D);
        if (rc == 0) {
            rewrite_inputs(mi, st, nst, 1, 1);   /* V in both roles, then V alone in the K role */
            rc = call_step(c2, step, mi, nst, has_v);
            if (rc == 0) {
                rewrite_inputs(mi, st, nst, 1, -1);
                rc = call_step(c3, step, mi, nst, has_v);
            }
        }
        for (size_t s = 0; rc == 0 && s < nst; s++)
            if (c2[s].V || c2[s].Vcoef) take(&st[s].X[1], &c2[s], 1, c2[s].bytes - c3[s].bytes, st[s].n, D);
    }
    free_all(c, nst);
    free_all(c2, nst);
    free_all(c3, nst);
    free(c); free(c2); free(c3); free(mi);
    return rc;
}

/* ---- output ---- */

static uint64_t stored_bytes(const Stored *p, int has_v, size_t D)
{
    uint64_t b = p->idx_bytes;
    for (int x = 0; x < 1 + has_v; x++) {
        b += p->X[x].rows_bytes;
        if (p->X[x].B && !p->X[x].basis_shared) b += 2 * (uint64_t)p->X[x].W * D;
    }
    return b;
}

/* The stored form of stored head p, complete (see the top); NULL, or why the decode path does not read it. */
static const char *finish_stored(Stored *p, int has_v, size_t D)
{
    for (int x = 0; x < 1 + has_v; x++) {
        StepTensor *X = &p->X[x];
        if (X->none) return X->none;
        if (!X->st.codes) method_store_f16(&X->st, X->S, NULL, p->n, X->W);   /* no step rewrote it: W = D */
        if (X->B && (store_set_lowrank_f64(&X->st, D, X->B, "pipeline") ||
                     (X->str.codes && store_set_lowrank_f64(&X->str, D, X->B, "pipeline"))))
            return "low-rank coefficients in a grouped integer format have no decode path";
    }
    if (has_v && p->X[0].str.T != p->X[1].str.T)
        return "a step after kivi rewrites KIVI's FP16 window in one tensor only";
    return NULL;
}

/* X' (T, D) of original head h: the exact tensor with the stored rows, reconstructed, at their positions. */
static double *reconstruct(const StepTensor *X, const Stored *p, const double *exact, size_t T, size_t D)
{
    double *out = dup(exact, T * D);
    const double *R = X->S;
    double *tmp = NULL;
    if (X->B) {
        tmp = xmalloc(p->n * D * sizeof *tmp);
        la_matmul(tmp, X->S, X->B, p->n, X->W, D);
        R = tmp;
    }
    for (size_t i = 0; i < p->n; i++) memcpy(out + p->pos[i] * D, R + i * D, D * sizeof *out);
    free(tmp);
    return out;
}

static int pl_apply_layer(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H)
{
    size_t T = in[0].T, D = in[0].D, k0 = 0, g = 1;
    int has_v = in[0].V != NULL, rc = 0;
    if (ex->n_steps > 0 && is_share(&ex->steps[0])) {
        g = (size_t)exp_param(&ex->steps[0], "group");
        if (H % g != 0)
            return kvc_fail("%s: group must divide kv_heads = %zu (got %zu)", exp_param_path(&ex->steps[0], "group"),
                            H, g);
        k0 = 1;
    }
    size_t nst = H / g;
    Stored *st = xcalloc(nst, sizeof *st);
    init_stored(st, in, H, g);
    for (size_t k = k0; rc == 0 && k < ex->n_steps; k++) {
        const Experiment *step = &ex->steps[k];
        assert(!is_share(step));
        if (step->method->evicts) rc = evict_step(st, nst, step, has_v);
        else rc = rewrite_step(st, nst, step, has_v, k + 1 == ex->n_steps);
    }
    if (rc == 0) {
        uint64_t layer_bytes[2] = {0, 0};   /* bases stored once per layer, per tensor */
        for (int x = 0; x < 1 + has_v; x++)
            if (st[0].X[x].B && st[0].X[x].basis_shared) layer_bytes[x] = 2 * (uint64_t)st[0].X[x].W * D;
        for (size_t h = 0; h < H; h++) {
            Stored *p = &st[h / g];
            Compressed *c = &out[h];
            MethodStored *ms = &c->stored;
            ms->share = g;
            if (h == p->h0 && !(ms->none = finish_stored(p, has_v, D))) {   /* the group's first head holds it */
                ms->K = p->X[0].st;
                ms->Kr = p->X[0].str;
                memset(&p->X[0].st, 0, sizeof p->X[0].st);
                memset(&p->X[0].str, 0, sizeof p->X[0].str);
                if (has_v) {
                    ms->V = p->X[1].st;
                    ms->Vr = p->X[1].str;
                    memset(&p->X[1].st, 0, sizeof p->X[1].st);
                    memset(&p->X[1].str, 0, sizeof p->X[1].str);
                }
            } else if (h != p->h0) {
                ms->none = out[p->h0].stored.none;
                ms->reads_first = 1;
            }
            c->bytes = method_split_bytes(stored_bytes(p, has_v, D), p->nh, h - p->h0) +
                       method_split_bytes(layer_bytes[0], H, h) + method_split_bytes(layer_bytes[1], H, h);
            if (p->evicted) {
                c->n_kept = p->n;
                c->kept = xmalloc((p->n ? p->n : 1) * sizeof *c->kept);
                memcpy(c->kept, p->pos, p->n * sizeof *c->kept);
            }
            if (p->X[0].touched) c->K = reconstruct(&p->X[0], p, in[h].K, T, D);
            if (has_v && p->X[1].touched) c->V = reconstruct(&p->X[1], p, in[h].V, T, D);
        }
    }
    for (size_t s = 0; s < nst; s++) stored_free(&st[s]);
    free(st);
    return rc;
}

const MethodDesc method_pipeline = {
    .name = "pipeline",
    .factor = "what its steps shrink",
    .summary = "\"steps\": [{\"method\": ...}, ...] applied in order (share_heads first, then evictions, then "
               "methods that rewrite values); bytes of the final stored form",
    .params = NULL,
    .n_params = 0,
    .check = pl_check,
    .apply = method_apply_one_head,
    .apply_layer = pl_apply_layer,
};
