/* evaluate: run a method per (layer, KV head), run the shared attention kernel over what it keeps for every
 * evaluation query, and measure (see evaluate.h and README.md "Output columns").
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H, T tokens, D head dim, N evaluation queries per
 * (layer, query head); query i = (l * Hq + hq) * N + n reads KV head b = l * H + hq / G.
 */
#include "eval/evaluate.h"
#include "base/attention.h"
#include "base/linalg.h"
#include "base/memlimit.h"
#include "base/util.h"
#include "methods/svdcache.h"
#include "data/model_source.h"
#include "base/pool.h"
#include "eval/normacc.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

const char *const column_names[NCOLS] = {
    "attn_error",     "k_error",        "v_error",        "k_error_ordinary", "k_zeroed_ordinary",
    "bytes",          "baseline_bytes", "ratio",          "attn_error_p50",   "attn_error_p95",
    "attn_error_max", "attn_kl",        "retained_mass",  "topk_recall",    "decode_ns",
    "decode_speedup", "decode_ns_mad",  "lm_kl",          "lm_nll",         "lm_nll_delta",     "lm_top1",
    "recall_acc",
};

int column_is_integer(Column c)
{
    return c == COL_BYTES || c == COL_BASELINE_BYTES || c == COL_DECODE_NS || c == COL_DECODE_NS_MAD;
}

/* The reference's work on one layer (reference_layer). */
typedef struct RefWork {
    double *out, *w, *s, *wsum, *Katt;
    const Data *d;
    size_t l, h0;        /* the layer, and the first KV head that dl and the outputs hold */
    const DataLayer *dl;
} RefWork;

/* KV head h0 + h of the layer: its rotated keys, then its G query heads' queries in order (wsum: their sum in
 * order); h indexes the chunk's arrays */
static void reference_head(void *arg, size_t h, int tid)
{
    (void)tid;
    const RefWork *r = arg;
    const Data *d = r->d;
    size_t H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, N = d->N, m = T * D;
    if (r->Katt) {
        memcpy(r->Katt + h * m, r->dl->K + h * m, m * sizeof *r->Katt);
        rope_apply(&d->rope, r->Katt + h * m, NULL, T, 0);
    }
    if (!d->Q || N == 0) return;
    const double *Ka = r->Katt ? r->Katt : r->dl->K;
    const double *Q = d->Q + (r->l * Hq + r->h0 * G) * N * D;
    for (size_t i = h * G * N; i < (h + 1) * G * N; i++) {
        attn_forward_scores(r->out + i * D, r->w + i * T, r->s + i * T, Q + i * D, Ka + h * m,
                            r->dl->V ? r->dl->V + h * m : NULL, T, D);
        double *ws = r->wsum + h * T;
        for (size_t t = 0; t < T; t++) ws[t] = ws[t] + r->w[i * T + t];
    }
}

/* The exact attention of the evaluation queries of KV heads [h0, h0 + nh) of layer l over their data dl: out
 * (nh G, N, D), w and s (nh G, N, T), wsum (nh, T) per KV head the sum of w over its G query heads, then queries
 * (zeroed by the caller); with RoPE-cached-pre Katt (nh, T, D), the keys attention reads (else NULL: dl->K). KV
 * heads at once on pool (NULL: in turn). */
static void reference_heads(double *out, double *w, double *s, double *wsum, double *Katt, const Data *d, size_t l,
                            size_t h0, size_t nh, const DataLayer *dl, Pool *pool)
{
    RefWork r = {out, w, s, wsum, Katt, d, l, h0, dl};
    if (pool && nh > 1) pool_run(pool, reference_head, &r, nh);
    else
        for (size_t h = 0; h < nh; h++) reference_head(&r, h, 0);
}

void eval_reference(Reference *ref, const Data *d)
{
    int nthreads = eval_threads();
    Pool *pool = nthreads > 1 && d->H > 1 && !d->stream ? pool_create(nthreads) : NULL;
    memset(ref, 0, sizeof *ref);
    ref->svd = svdcache_new();
    size_t L = d->L, H = d->H, Hq = d->Hq, T = d->T, D = d->D, N = d->N, m = T * D;
    int queries = d->Q && N > 0;
    if (queries) ref->nq = L * Hq * N;
    if (d->stream) return;   /* streamed data: each layer's reference is made with the layer (evaluate) */
    if (d->rope.dims > 0) ref->Katt = xmalloc(L * H * m * sizeof *ref->Katt);
    if (queries) {
        ref->out = xmalloc(ref->nq * D * sizeof *ref->out);
        ref->w = xmalloc(ref->nq * T * sizeof *ref->w);
        ref->s = xmalloc(ref->nq * T * sizeof *ref->s);
        ref->wsum = xcalloc(L * H * T, sizeof *ref->wsum);
    }
    for (size_t l = 0; l < L; l++) {
        DataLayer dl;
        data_layer(&dl, d, l);
        size_t q0 = l * Hq * N;
        reference_heads(queries ? ref->out + q0 * D : NULL, queries ? ref->w + q0 * T : NULL,
                        queries ? ref->s + q0 * T : NULL, queries ? ref->wsum + l * H * T : NULL,
                        ref->Katt ? ref->Katt + l * H * m : NULL, d, l, 0, H, &dl, pool);
        data_layer_free(&dl);
    }
    pool_free(pool);
}

/* The reference of a chunk of KV heads [h0, h0 + nh) of a layer: pointers into ref, or (streamed data) made now
 * and owned. q0: the flat index of its first evaluation query, (l Hq + h0 G) N. */
typedef struct RefLayer {
    const double *out, *w, *s, *wsum, *Katt;   /* (nh G, N, D), (nh G, N, T) x 2, (nh, T), (nh, T, D) or NULL */
    size_t q0;
    double *own[5];
} RefLayer;

static void ref_chunk(RefLayer *rl, const Reference *ref, const Data *d, size_t l, size_t h0, size_t nh,
                      const DataLayer *dl, Pool *pool)
{
    memset(rl, 0, sizeof *rl);
    size_t H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, N = d->N, m = T * D, q0 = (l * Hq + h0 * G) * N;
    rl->q0 = q0;
    if (!d->stream) {
        if (ref->nq) {
            rl->out = ref->out + q0 * D;
            rl->w = ref->w + q0 * T;
            rl->s = ref->s + q0 * T;
            rl->wsum = ref->wsum + (l * H + h0) * T;
        }
        rl->Katt = ref->Katt ? ref->Katt + (l * H + h0) * m : NULL;
        return;
    }
    size_t nq = ref->nq ? nh * G * N : 0;
    if (nq) {
        rl->out = rl->own[0] = xmalloc(nq * D * sizeof *rl->own[0]);
        rl->w = rl->own[1] = xmalloc(nq * T * sizeof *rl->own[1]);
        rl->s = rl->own[2] = xmalloc(nq * T * sizeof *rl->own[2]);
        rl->wsum = rl->own[3] = xcalloc(nh * T, sizeof *rl->own[3]);
    }
    if (d->rope.dims > 0) rl->Katt = rl->own[4] = xmalloc(nh * m * sizeof *rl->own[4]);
    reference_heads(rl->own[0], rl->own[1], rl->own[2], rl->own[3], rl->own[4], d, l, h0, nh, dl, pool);
}

static void ref_layer_free(RefLayer *rl)
{
    for (int k = 0; k < 5; k++) free(rl->own[k]);
    memset(rl, 0, sizeof *rl);
}

void reference_free(Reference *ref)
{
    if (!ref) return;
    free(ref->out);
    free(ref->w);
    free(ref->s);
    free(ref->wsum);
    free(ref->Katt);
    svdcache_free(ref->svd);
    memset(ref, 0, sizeof *ref);
}

/* ---- small helpers ---- */

/* ||a - b|| / ||b||; 0 when both are zero, +inf when only the reference is zero. */
static double rel_error(const double *a, const double *b, size_t n)
{
    double *diff = xmalloc(n * sizeof *diff);
    for (size_t i = 0; i < n; i++) diff[i] = a[i] - b[i];
    double num = la_norm(diff, n), den = la_norm(b, n);
    free(diff);
    if (den == 0) return num == 0 ? 0.0 : INFINITY;
    return num / den;
}

/* A reconstruction that is not finite (a stored format, e.g. FP16 scales, overflowing for data this large) is
 * an error, never NaN in a row (README "Numerical edge cases"). head_norms finds it (x[i], tensor K or V). */
static int not_finite(size_t layer, size_t head, int isv, const double *x, size_t i, size_t D)
{
    return kvc_fail("layer %zu, KV head %zu: the stored format cannot hold data this large and reconstructs a value "
                    "that is not finite; lower data.keys.scale or the outlier scales (got %g at %s[%zu, %zu])", layer,
                    head, x[i], isv ? "V" : "K", i / D, i % D);
}

/* num / den for norms, with rel_error's conventions. */
static double ratio_of_norms(double num, double den)
{
    if (den == 0) return num == 0 ? 0.0 : INFINITY;
    return num / den;
}

static void set(Row *row, Column c, double v)
{
    row->v[c] = v;
    row->has[c] = 1;
}

/* Copies rows `idx` of x (T, D) into a new (n, D) matrix. */
static double *gather_rows(const double *x, const size_t *idx, size_t n, size_t D)
{
    double *out = xmalloc(n * D * sizeof *out);
    for (size_t i = 0; i < n; i++) memcpy(out + i * D, x + idx[i] * D, D * sizeof *out);
    return out;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);   /* NaN last, as np.sort */
    return (x > y) - (x < y);
}

/* np.percentile's linear method on sorted x: h = (n - 1) * p / 100, then numpy's _lerp. */
static double percentile_sorted(const double *x, size_t n, double p)
{
    if (isnan(x[n - 1])) return NAN;
    double q = p / 100.0, vi = (double)(n - 1) * q;
    if (vi >= (double)(n - 1)) return x[n - 1];
    if (vi < 0) return x[0];
    size_t i = (size_t)floor(vi);
    double g = vi - (double)i, a = x[i], b = x[i + 1], diff = b - a;
    return g >= 0.5 ? b - diff * (1 - g) : a + diff * g;
}

double eval_percentile(double *x, size_t n, double p)
{
    qsort(x, n, sizeof *x, cmp_double);
    return percentile_sorted(x, n, p);
}

static double mean(const double *x, size_t n) { return la_sum(x, n) / (double)n; }

/* ---- one experiment ---- */

/* The norms of the errors over some heads: K' - K and K (k_error), V' - V and V (v_error), and over the channels
 * that are not outliers (k_error_ordinary; zeros counts K' == 0 there, nord the numbers). */
typedef struct Norms {
    double kd, kr, vd, vr, od, orr;
    size_t zeros, nord;
} Norms;

typedef struct Eval {
    const Data *d;
    const Reference *ref;
    size_t m;                      /* T * D */
    unsigned char *hasK, *hasV, *evicts;   /* per head */
    uint64_t *bytes;               /* per head */
    Norms *hn;                     /* per head (--per-head rows), or NULL */
    NormAcc kd, vd, od, orr;       /* the aggregate row's norms, fed head by head in order */
    const NormAcc *kr, *vr;        /* ||K|| and ||V|| over every head: the same for every experiment (evaluate's) */
    const double *hkr, *hvr;       /* per head, when per-head rows are wanted (evaluate's) */
    size_t zeros, nord;
    double *err, *kl, *ret, *rec;  /* per evaluation query */
} Eval;

/* Attention of the evaluation queries of KV head h of layer l over what compressed cache c keeps. */
static void head_attention(Eval *e, const RefLayer *rl, size_t l, size_t h, const Compressed *c, const double *Kc,
                           const double *Vc, size_t k_recall)
{
    const Data *d = e->d;
    size_t Hq = d->Hq, H = d->H, G = Hq / H, T = d->T, D = d->D, N = d->N;
    size_t nk = c->kept ? c->n_kept : T;
    double *Kg = NULL, *Vg = NULL;
    const double *Ks = Kc, *Vs = Vc;
    if (c->kept) {
        Ks = Kg = gather_rows(Kc, c->kept, nk, D);
        Vs = Vg = gather_rows(Vc, c->kept, nk, D);
    }
    if (d->rope.dims > 0) {
        if (!Kg) {
            Kg = xmalloc(nk * D * sizeof *Kg);
            memcpy(Kg, Kc, nk * D * sizeof *Kg);
        }
        rope_apply(&d->rope, Kg, c->kept, nk, 0);
        Ks = Kg;
    }
    double *out = xmalloc(D * sizeof *out), *wc = xmalloc(nk * sizeof *wc), *ph = xmalloc(nk * sizeof *ph);
    double *terms = xmalloc(nk * sizeof *terms), *lp = xmalloc(nk * sizeof *lp), *lq = xmalloc(nk * sizeof *lq);
    unsigned char *kept = NULL;
    Ranked *rk = NULL;
    if (c->kept) {
        kept = xcalloc(T, 1);
        for (size_t j = 0; j < nk; j++) kept[c->kept[j]] = 1;
        rk = xmalloc(T * sizeof *rk);
    }
    size_t q0 = rl->q0;   /* the chunk's first query */
    for (size_t i = (l * Hq + h * G) * N; i < (l * Hq + (h + 1) * G) * N; i++) {
        attn_forward_scores(out, wc, terms, d->Q + i * D, Ks, Vs, nk, D);
        e->err[i] = rel_error(out, rl->out + (i - q0) * D, D);
        const double *p = rl->w + (i - q0) * T, *s = rl->s + (i - q0) * T;
        /* KL over the kept tokens from log-softmaxes of the scores: finite even where a weight underflows */
        attn_log_softmax(lq, terms, ph, nk);
        if (c->kept) {
            for (size_t j = 0; j < nk; j++) terms[j] = s[c->kept[j]];
            attn_log_softmax(lp, terms, ph, nk);
            for (size_t j = 0; j < nk; j++) ph[j] = p[c->kept[j]];
            e->ret[i] = la_sum(ph, nk);
            for (size_t t = 0; t < T; t++) rk[t] = (Ranked){p[t], t};   /* larger exact weight first, then earlier */
            select_top(rk, T, k_recall);
            size_t hit = 0;
            for (size_t j = 0; j < k_recall; j++) hit += kept[rk[j].i];
            e->rec[i] = (double)hit / (double)k_recall;
        } else {
            attn_log_softmax(lp, s, ph, T);
            e->ret[i] = 1.0;
            e->rec[i] = 1.0;
        }
        for (size_t j = 0; j < nk; j++) terms[j] = exp(lp[j]) * (lp[j] - lq[j]);
        double kl = la_sum(terms, nk);
        e->kl[i] = kl > 0 ? kl : 0.0;   /* KL >= 0; rounding can give -1e-17 when nothing changed */
    }
    free(out); free(wc); free(ph); free(terms); free(lp); free(lq); free(kept); free(rk); free(Kg); free(Vg);
}

/* The error norms of head b, one side of it (isv 0: keys, and k_error_ordinary; 1: values): K, V its data, Kc,
 * Vc what the method made (NULL: left exact). With per-head rows Kc (Vc) becomes Kc - K (Vc - V). Feeds the
 * aggregate (agg) and fills that side of e->hn[b] (when per-head rows are wanted). The two sides touch disjoint
 * state, so they may run at once. Returns 0, or -1 with kvc_fail set when the side's tensor holds a value that is
 * not finite. */
static int head_norms(Eval *e, size_t b, int agg, int isv, const double *K, const double *V, double *Kc, double *Vc)
{
    const Data *d = e->d;
    size_t m = e->m, T = d->T, D = d->D;
    Norms *hn = e->hn ? &e->hn[b] : NULL;
    if (!isv && d->outlier_mask) {   /* k_error_ordinary: the channels that are not outliers, before Kc - K */
        const unsigned char *mask = d->outlier_mask + (b / d->H) * D;
        double *a = xmalloc(m * sizeof *a), *r = xmalloc(m * sizeof *r);
        size_t k = 0, zeros = 0;
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < D; j++) {
                if (mask[j]) continue;
                size_t x = t * D + j;
                a[k] = Kc ? Kc[x] - K[x] : 0.0;
                r[k] = K[x];
                zeros += (Kc ? Kc[x] : K[x]) == 0.0;
                k++;
            }
        if (agg) {
            normacc_add(&e->od, a, k);
            normacc_add(&e->orr, r, k);
            e->zeros += zeros;
            e->nord += k;
        }
        if (hn) {
            hn->od = la_norm(a, k);
            hn->orr = la_norm(r, k);
            hn->zeros = zeros;
            hn->nord = k;
        }
        free(a);
        free(r);
    }
    /* one pass: check K', make K' - K (kept in place for the per-head norm) and feed the aggregate */
    double *c = isv ? Vc : Kc;
    const double *x = isv ? V : K;
    NormAcc *acc = isv ? &e->vd : &e->kd;
    if (c) {
        size_t bad = m;
        if (agg) {
            bad = normacc_add_diff(acc, c, x, m, hn != NULL);
        } else {
            for (size_t i = 0; i < m && bad == m; i++)
                if (!isfinite(c[i])) bad = i;
            for (size_t i = 0; bad == m && i < m; i++) c[i] = c[i] - x[i];
        }
        if (bad < m) return not_finite(b / d->H, b % d->H, isv, c, bad, D);
    } else if (agg && x) {
        normacc_zeros(acc, m);
    }
    if (hn && !isv) {
        hn->kd = Kc ? la_norm(Kc, m) : 0.0;
        hn->kr = e->hkr[b];
    }
    if (hn && isv) {
        hn->vd = Vc ? la_norm(Vc, m) : 0.0;
        hn->vr = V ? e->hvr[b] : 0.0;
    }
    return 0;
}

static void fill_row(Row *row, const Eval *e, size_t b0, size_t nb, size_t q0, size_t nq, const Norms *nm)
{
    const Data *d = e->d;
    size_t m = e->m;
    int anyK = 0, anyV = 0, anyEvict = 0;
    uint64_t bytes = 0;
    for (size_t b = b0; b < b0 + nb; b++) {
        anyK |= e->hasK[b];
        anyV |= e->hasV[b];
        anyEvict |= e->evicts[b];
        bytes += e->bytes[b];
    }
    if (nq > 0) {
        double *s = xmalloc(nq * sizeof *s);
        memcpy(s, e->err + q0, nq * sizeof *s);
        set(row, COL_ATTN_ERROR, mean(s, nq));
        qsort(s, nq, sizeof *s, cmp_double);
        set(row, COL_ATTN_ERROR_P50, percentile_sorted(s, nq, 50));
        set(row, COL_ATTN_ERROR_P95, percentile_sorted(s, nq, 95));
        set(row, COL_ATTN_ERROR_MAX, s[nq - 1]);   /* NaN sorts last, so a NaN wins, as in np.max */
        set(row, COL_ATTN_KL, mean(e->kl + q0, nq));
        if (anyEvict) {
            set(row, COL_RETAINED_MASS, mean(e->ret + q0, nq));
            set(row, COL_TOPK_RECALL, mean(e->rec + q0, nq));
        }
        free(s);
        if (e->ref->nq <= 1)
            for (int c = COL_ATTN_ERROR_P50; c <= COL_TOPK_RECALL; c++) row->hide[c] = 1;
    }
    if (anyK) {
        set(row, COL_K_ERROR, ratio_of_norms(nm->kd, nm->kr));
        if (d->outlier_mask && nm->nord > 0) {
            set(row, COL_K_ERROR_ORDINARY, ratio_of_norms(nm->od, nm->orr));
            set(row, COL_K_ZEROED_ORDINARY, (double)nm->zeros / (double)nm->nord);
        }
    }
    if (anyV) set(row, COL_V_ERROR, ratio_of_norms(nm->vd, nm->vr));
    uint64_t baseline = 2 * (uint64_t)m * (data_has_values(d) ? 2 : 1) * nb;
    set(row, COL_BYTES, (double)bytes);
    set(row, COL_BASELINE_BYTES, (double)baseline);
    set(row, COL_RATIO, (double)baseline / (double)bytes);
}

static void eval_free(Eval *e)
{
    free(e->hasK); free(e->hasV); free(e->evicts); free(e->bytes); free(e->hn);
    free(e->err); free(e->kl); free(e->ret); free(e->rec);
}

/* One experiment being evaluated: its rows, what it has measured so far, its stored forms (timing) and its model
 * rows. */
typedef struct Job {
    const Experiment *ex;
    Row *agg, *heads;
    Eval e;
    int timed;               /* the heads' stored forms are gathered into one cache and timed at the end */
    TimedCache stored;
    LlamaRows *lm_rows;      /* the model's compressed cache, or NULL */
} Job;

static void job_init(Job *j, Row *agg, Row *heads, const Experiment *ex, const Data *d, const Reference *ref,
                     const Timing *tm)
{
    size_t nh = d->L * d->H;
    memset(j, 0, sizeof *j);
    j->ex = ex;
    j->agg = agg;
    j->heads = heads;
    Eval *e = &j->e;
    e->d = d;
    e->ref = ref;
    e->m = d->T * d->D;
    e->hasK = xcalloc(nh, 1);
    e->hasV = xcalloc(nh, 1);
    e->evicts = xcalloc(nh, 1);
    e->bytes = xcalloc(nh, sizeof *e->bytes);
    if (heads) e->hn = xcalloc(nh, sizeof *e->hn);
    normacc_init(&e->kd);
    normacc_init(&e->vd);
    normacc_init(&e->od);
    normacc_init(&e->orr);
    if (ref->nq) {
        e->err = xmalloc(ref->nq * sizeof *e->err);
        e->kl = xmalloc(ref->nq * sizeof *e->kl);
        e->ret = xmalloc(ref->nq * sizeof *e->ret);
        e->rec = xmalloc(ref->nq * sizeof *e->rec);
    }
    j->timed = tm && agg;
    timing_cache_init(&j->stored, d->L, d->H);
    j->lm_rows = d->model && agg ? xcalloc(nh, sizeof *j->lm_rows) : NULL;
}

static void job_free(Job *j)
{
    timing_cache_free(&j->stored);
    eval_free(&j->e);
    if (j->lm_rows) model_rows_free(j->lm_rows, j->e.d ? j->e.d->L * j->e.d->H : 0);
    free(j->lm_rows);
    memset(j, 0, sizeof *j);
}

/* The KV heads in flight, [h0, h0 + nh) of layer l (all H of it, or a few of streamed data): their data,
 * reference and inputs. Arrays are indexed by the head's place in the chunk. */
typedef struct Layer {
    size_t l, h0, nh;
    DataLayer dl;
    RefLayer rl;
    MethodInput *ins;    /* (nh,) */
    Compressed *cs;      /* (nh,) */
    size_t k_recall;
} Layer;

/* Job j's work on chunk y, in three steps of independent items run on the pool (the items write disjoint slots,
 * so the rows are the same for any thread count): the method per KV head (or once for the chunk when layer-wide);
 * the attention of each head's queries; the aggregate norms, keys and values as two items that each feed their
 * heads in order. An item that fails keeps its message; the first head in order that fails is reported (its
 * method before its keys before its values), so the message does not depend on how the heads are chunked. */
typedef struct LayerWork {
    Job *j;
    const Layer *y;
    const Data *d;
    size_t upto;         /* steps 2 and 3 run heads [0, upto): those before the first whose method failed */
    int *rc;             /* (2 nh,): a failure per slot: step 1 head h, step 3 2 h + side (read through stop) */
    char (*msg)[1024];   /* (2 nh,) their messages */
    size_t *stop;        /* step 3: the head where side 0 / 1 stopped (upto: none) */
} LayerWork;

static void keep_error(LayerWork *w, size_t slot)
{
    w->rc[slot] = -1;
    snprintf(w->msg[slot], sizeof w->msg[slot], "%s", kvc_errmsg());
}

static void step_method(void *arg, size_t h, int tid)
{
    (void)tid;
    LayerWork *w = arg;
    if (method_run(&w->y->cs[h], w->j->ex, &w->y->ins[h], 1, w->j->timed)) keep_error(w, h);
}

static void step_attention(void *arg, size_t h, int tid)
{
    (void)tid;
    LayerWork *w = arg;
    Job *j = w->j;
    const Data *d = w->d;
    size_t m = d->T * d->D, b = w->y->l * d->H + w->y->h0 + h;
    const double *K = w->y->dl.K + h * m, *V = w->y->dl.V ? w->y->dl.V + h * m : NULL;
    const Compressed *c = &w->y->cs[h];
    if (j->e.ref->nq)
        head_attention(&j->e, &w->y->rl, w->y->l, w->y->h0 + h, c, c->K ? c->K : K, c->V ? c->V : V, w->y->k_recall);
    if (j->lm_rows) model_rows_set(&j->lm_rows[b], c->K ? c->K : K, c->V ? c->V : V, c->kept, c->n_kept, d->T, d->D);
}

static void step_norms(void *arg, size_t isv, int tid)
{
    (void)tid;
    LayerWork *w = arg;
    const Data *d = w->d;
    size_t H = d->H, m = d->T * d->D;
    w->stop[isv] = w->upto;
    for (size_t h = 0; h < w->upto; h++) {
        const double *K = w->y->dl.K + h * m, *V = w->y->dl.V ? w->y->dl.V + h * m : NULL;
        Compressed *c = &w->y->cs[h];
        if (head_norms(&w->j->e, w->y->l * H + w->y->h0 + h, w->j->agg != NULL, (int)isv, K, V, c->K, c->V)) {
            keep_error(w, 2 * h + isv);
            w->stop[isv] = h;
            return;
        }
    }
}

/* The data's own norms over a chunk, fed head by head in order: item 0 the keys, item 1 the values. */
typedef struct DataNorms {
    const Layer *y;
    const Data *d;
    NormAcc *acc[2];        /* ||K||, ||V|| over every head (aggregate rows), or NULL */
    double *per_head[2];    /* (L, H): each head's, for per-head rows, or NULL */
} DataNorms;

static void step_data_norms(void *arg, size_t isv, int tid)
{
    (void)tid;
    const DataNorms *w = arg;
    const Data *d = w->d;
    size_t m = d->T * d->D;
    const double *x = isv ? w->y->dl.V : w->y->dl.K;
    if (!x) return;
    for (size_t i = 0; i < w->y->nh; i++) {
        if (w->acc[isv]) normacc_add(w->acc[isv], x + i * m, m);
        if (w->per_head[isv]) w->per_head[isv][w->y->l * d->H + w->y->h0 + i] = la_norm(x + i * m, m);
    }
}

/* Items [0, upto) the attention of each head, then the two sides of the norms (step_norms). */
static void step_measure(void *arg, size_t i, int tid)
{
    LayerWork *w = arg;
    if (i < w->upto) step_attention(arg, i, tid);
    else step_norms(arg, i - w->upto, tid);
}

static void run_items(Pool *pool, PoolFn fn, void *arg, size_t n)
{
    if (pool && n > 1) pool_run(pool, fn, arg, n);
    else
        for (size_t i = 0; i < n; i++) fn(arg, i, 0);
}

/* Runs job j's method on chunk y and measures its heads. 0, or -1 with kvc_fail set. */
static int job_layer(Job *j, const Layer *y, const Data *d, Pool *pool)
{
    size_t H = d->H, nh = y->nh, b0 = y->l * H + y->h0;
    Compressed *cs = y->cs;
    Eval *e = &j->e;
    LayerWork w = {.j = j, .y = y, .d = d, .upto = nh, .rc = xcalloc(2 * nh, sizeof *w.rc),
                   .msg = xcalloc(2 * nh, sizeof *w.msg), .stop = xcalloc(2, sizeof *w.stop)};
    int rc = 0;
    char method_msg[1024] = "";
    if (method_layer_wide(j->ex)) {   /* the chunk's heads at once; a failure is the chunk's, before any head */
        if (method_run(cs, j->ex, y->ins, nh, j->timed)) {
            rc = -1;
            w.upto = 0;
            snprintf(method_msg, sizeof method_msg, "%s", kvc_errmsg());
        }
    } else {
        memset(cs, 0, nh * sizeof *cs);
        run_items(pool, step_method, &w, nh);
        for (size_t h = 0; h < nh; h++)
            if (w.rc[h]) {   /* the heads before it are still measured: one of them may fail first */
                rc = -1;
                w.upto = h;
                snprintf(method_msg, sizeof method_msg, "%s", w.msg[h]);
                break;
            }
    }
    for (size_t h = 0; h < w.upto; h++) {
        size_t b = b0 + h;
        e->hasK[b] = cs[h].K != NULL;
        e->hasV[b] = cs[h].V != NULL;
        e->evicts[b] = cs[h].kept != NULL;
        e->bytes[b] = cs[h].bytes;
    }
    if (j->heads) {   /* per-head rows: the norms turn K' into K' - K in place, after the attention read it */
        run_items(pool, step_attention, &w, w.upto);
        run_items(pool, step_norms, &w, 2);
    } else {          /* the norms only read: both steps at once (the lesson's single head keeps 2 threads busy) */
        run_items(pool, step_measure, &w, w.upto + 2);
    }
    /* the first failure in head order: a head's keys before its values, and any of the heads before the first
     * whose method failed before that method */
    size_t first = w.stop[0] <= w.stop[1] ? 2 * w.stop[0] : 2 * w.stop[1] + 1;
    if (first < 2 * w.upto) rc = kvc_fail("%s", w.msg[first]);
    else if (rc) kvc_fail("%s", method_msg);
    for (size_t h = 0; h < nh; h++) {
        if (rc == 0 && j->timed) timing_cache_add(&j->stored, &cs[h].stored);
        compressed_free(&cs[h]);
    }
    free(w.rc);
    free(w.msg);
    free(w.stop);
    return rc;
}

/* Fills job j's rows once every layer has run. 0, or -1 with kvc_fail set (the model's scoring failed). */
static int job_finish(Job *j, const Data *d, Timing *tm)
{
    Eval *e = &j->e;
    const Reference *ref = e->ref;
    size_t H = d->H, Hq = d->Hq, G = Hq / H, nh = d->L * H;
    Row *agg = j->agg;
    if (agg) {
        memset(agg, 0, sizeof *agg);
        agg->ex = j->ex;
        Norms nm = {normacc_norm(&e->kd), normacc_norm(e->kr), normacc_norm(&e->vd), normacc_norm(e->vr),
                    normacc_norm(&e->od), normacc_norm(&e->orr), e->zeros, e->nord};
        fill_row(agg, e, 0, nh, 0, ref->nq, &nm);
        if (j->timed && j->stored.none) {
            agg->no_timing = j->stored.none;
        } else if (j->timed) {
            double ns, sp;
            if (timing_measure(tm, &j->stored, &ns, &sp)) {   /* the quality numbers stand; the note says why */
                snprintf(agg->no_timing_buf, sizeof agg->no_timing_buf, "%s", kvc_errmsg());
                agg->no_timing = agg->no_timing_buf;
            } else {
                set(agg, COL_DECODE_NS, ns);
                set(agg, COL_DECODE_SPEEDUP, sp);
                set(agg, COL_DECODE_NS_MAD, timing_last_mad(tm));
            }
        }
        timing_cache_free(&j->stored);
        if (j->lm_rows) {
            double lm[5];
            int rc = model_source_score(lm, d->model, j->lm_rows);
            model_rows_free(j->lm_rows, nh);
            free(j->lm_rows);
            j->lm_rows = NULL;
            if (rc) return -1;
            for (int k = 0; k < 4; k++) set(agg, (Column)(COL_LM_KL + k), lm[k]);
            if (d->model->n_answers) set(agg, COL_RECALL_ACC, lm[4]);
        }
    }
    for (size_t b = 0; j->heads && b < nh; b++) {
        Row *row = &j->heads[b];
        memset(row, 0, sizeof *row);
        row->ex = j->ex;
        row->per_head = 1;
        row->layer = b / H;
        row->head = b % H;
        size_t gq = G * d->N;
        fill_row(row, e, b, 1, ref->nq ? (b / H * Hq + b % H * G) * d->N : 0, ref->nq ? gq : 0, &e->hn[b]);
    }
    return 0;
}

/* Runs experiments exs[0..n) layer by layer: each layer (made now when the data is streamed) and its reference
 * serve every experiment before the next layer; fills their aggregate rows aggs[k] and/or per-head rows heads[k]
 * (either array may be NULL). When experiment k fails, the experiments after it are dropped, those before it
 * finish: returns -1 with kvc_fail set and *failed = k; else 0. */
static int evaluate(Row *const *aggs, Row *const *heads, const Experiment *const *exs, size_t n, const Config *cfg,
                    const Data *d, const Reference *ref, Timing *tm, size_t *failed)
{
    size_t L = d->L, H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, m = T * D;
    Job *jobs = xcalloc(n, sizeof *jobs);
    /* the norms of the data, which every experiment's errors divide by: fed once here */
    NormAcc kr, vr;
    normacc_init(&kr);
    normacc_init(&vr);
    double *hkr = heads ? xcalloc(L * H, sizeof *hkr) : NULL, *hvr = heads ? xcalloc(L * H, sizeof *hvr) : NULL;
    for (size_t k = 0; k < n; k++) {
        job_init(&jobs[k], aggs ? aggs[k] : NULL, heads ? heads[k] : NULL, exs[k], d, ref, tm);
        jobs[k].e.kr = &kr;
        jobs[k].e.vr = &vr;
        jobs[k].e.hkr = hkr;
        jobs[k].e.hvr = hvr;
    }
    Layer y = {.ins = xcalloc(H, sizeof *y.ins), .cs = xcalloc(H, sizeof *y.cs)};
    int nthreads = eval_threads();
    Pool *pool = nthreads > 1 && (H > 1 || data_has_values(d)) ? pool_create(nthreads) : NULL;   /* NULL: in turn */
    y.k_recall = cfg->recall_k < T ? cfg->recall_k : T;
    if (y.k_recall == 0) y.k_recall = T < 32 ? T : 32;
    size_t live = n;   /* jobs [0, live) still run */
    int rc = 0;
    char msg[1024] = "";
    for (size_t l = 0; l < L && live > 0; l++) {
        /* streamed data: as many KV heads at a time as threads, unless an experiment needs the layer's heads at
         * once (the rows do not depend on it: every head is measured alone, the norms fed in head order) */
        size_t step = H;
        if (d->stream) {
            step = (size_t)nthreads < H ? (size_t)nthreads : H;
            for (size_t k = 0; k < live; k++)
                if (method_layer_wide(jobs[k].ex)) step = H;
        }
        for (size_t h0 = 0; h0 < H && live > 0; h0 += step) {
            size_t nh = H - h0 < step ? H - h0 : step;
            y.l = l;
            y.h0 = h0;
            y.nh = nh;
            data_heads(&y.dl, d, l, h0, nh);
            ref_chunk(&y.rl, ref, d, l, h0, nh, &y.dl, pool);
            /* streamed data is made again at new addresses: its decompositions are the chunk's */
            SvdCache *svd = d->stream ? svdcache_new() : ref->svd;
            DataNorms dn = {&y, d, {aggs ? &kr : NULL, aggs ? &vr : NULL}, {hkr, hvr}};
            run_items(pool, step_data_norms, &dn, 2);
            for (size_t i = 0; i < nh; i++) {
                size_t h = h0 + i;
                const double *K = y.dl.K + i * m, *V = y.dl.V ? y.dl.V + i * m : NULL;
                MethodInput *in = &y.ins[i];
                *in = (MethodInput){.T = T, .D = D, .K = K, .V = V, .w_ref = y.rl.wsum ? y.rl.wsum + i * T : NULL,
                                    .K_att = y.rl.Katt ? y.rl.Katt + i * m : NULL, .layer = l, .head = h,
                                    .seed = cfg->seed, .svd = svd,
                                    .pool = nh == 1 ? pool : NULL};   /* nh > 1: the heads use it */
                if (d->O) {
                    in->Q_obs = d->O + (l * Hq + h * G) * d->W * D;
                    in->obs_pos = d->obs_pos;
                    in->n_obs_heads = G;
                    in->n_obs = d->W;
                }
            }
            for (size_t k = 0; k < live; k++)
                if (job_layer(&jobs[k], &y, d, pool)) {   /* the experiments after k would not have run */
                    snprintf(msg, sizeof msg, "%s", kvc_errmsg());
                    for (size_t x = k; x < live; x++) job_free(&jobs[x]);
                    *failed = k;
                    rc = -1;
                    live = k;
                }
            if (d->stream) svdcache_free(svd);
            ref_layer_free(&y.rl);
            data_layer_free(&y.dl);
        }
    }
    pool_free(pool);
    free(y.ins);
    free(y.cs);
    for (size_t k = 0; k < live; k++)
        if (job_finish(&jobs[k], d, tm) && rc == 0) {   /* only the model's scoring fails here */
            snprintf(msg, sizeof msg, "%s", kvc_errmsg());
            *failed = k;
            rc = -1;
        }
    for (size_t k = 0; k < n; k++) job_free(&jobs[k]);
    free(jobs);
    free(hkr);
    free(hvr);
    if (rc) kvc_fail("%s", msg);
    return rc;
}

static int threads_wanted;   /* eval_set_threads; 0: the CPUs online */

void eval_set_threads(int n) { threads_wanted = n > 0 ? n : 0; }

int eval_threads(void)
{
    if (memlimit_limited()) return 1;   /* OpenBLAS would map a buffer per computing thread (base/memlimit.h) */
    if (threads_wanted > 0) return threads_wanted;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

int eval_experiment(Row *row, const Experiment *ex, const Config *cfg, const Data *d, const Reference *ref,
                    Timing *tm)
{
    size_t failed;
    return evaluate(&row, NULL, &ex, 1, cfg, d, ref, tm, &failed);
}

int eval_experiment_per_head(Row *rows, const Experiment *ex, const Config *cfg, const Data *d,
                             const Reference *ref)
{
    size_t failed;
    return evaluate(NULL, &rows, &ex, 1, cfg, d, ref, NULL, &failed);
}

int eval_experiments(Row *const *rows, const Experiment *const *exs, size_t n, int per_head, const Config *cfg,
                     const Data *d, const Reference *ref, size_t *failed)
{
    return evaluate(per_head ? NULL : rows, per_head ? rows : NULL, exs, n, cfg, d, ref, NULL, failed);
}
