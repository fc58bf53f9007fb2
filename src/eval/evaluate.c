/* evaluate: run a method per (layer, KV head), run the shared attention kernel over what it keeps for every
 * evaluation query, and measure (see evaluate.h and README.md "Output columns").
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H, T tokens, D head dim, N evaluation queries per
 * (layer, query head); query i = (l * Hq + hq) * N + n reads KV head b = l * H + hq / G.
 */
#include "eval/evaluate.h"
#include "base/attention.h"
#include "base/linalg.h"
#include "base/util.h"
#include "methods/svdcache.h"
#include "data/model_source.h"

#include <math.h>
#include <stdio.h>
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

void eval_reference(Reference *ref, const Data *d)
{
    memset(ref, 0, sizeof *ref);
    ref->svd = svdcache_new();
    size_t L = d->L, H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, N = d->N, m = T * D;
    if (d->rope.dims > 0) {
        ref->Katt = xmalloc(L * H * m * sizeof *ref->Katt);
        memcpy(ref->Katt, d->K, L * H * m * sizeof *ref->Katt);
        for (size_t b = 0; b < L * H; b++) rope_apply(&d->rope, ref->Katt + b * m, NULL, T, 0);
    }
    if (!d->Q || N == 0) return;
    const double *Ka = ref->Katt ? ref->Katt : d->K;
    ref->nq = L * Hq * N;
    ref->out = xmalloc(ref->nq * D * sizeof *ref->out);
    ref->w = xmalloc(ref->nq * T * sizeof *ref->w);
    ref->s = xmalloc(ref->nq * T * sizeof *ref->s);
    ref->wsum = xcalloc(L * H * T, sizeof *ref->wsum);
    for (size_t i = 0; i < ref->nq; i++) {
        size_t b = (i / N / Hq) * H + (i / N % Hq) / G;
        attn_forward_scores(ref->out + i * D, ref->w + i * T, ref->s + i * T, d->Q + i * D, Ka + b * m, d->V + b * m,
                            T, D);
        double *ws = ref->wsum + b * T;
        for (size_t t = 0; t < T; t++) ws[t] = ws[t] + ref->w[i * T + t];
    }
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
 * an error, never NaN in a row (README "Numerical edge cases"). */
static int check_finite(const Compressed *c, size_t T, size_t D, size_t layer, size_t head)
{
    for (int v = 0; v < 2; v++) {
        const double *x = v ? c->V : c->K;
        for (size_t i = 0; x && i < T * D; i++)
            if (!isfinite(x[i]))
                return kvc_fail("layer %zu, KV head %zu: the stored format cannot hold data this large and "
                                "reconstructs a value that is not finite; lower data.keys.scale or the outlier "
                                "scales (got %g at %s[%zu, %zu])", layer, head, x[i], v ? "V" : "K", i / D, i % D);
    }
    return 0;
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

typedef struct Eval {
    const Data *d;
    const Reference *ref;
    size_t m;                      /* T * D */
    double *dK, *dV;               /* (L, H, T, D) K' - K and V' - V, or NULL when no head rewrote it */
    double *Kc_ord;                /* (L, H, T, D) K' where a head rewrote K (for k_zeroed_ordinary), or NULL
                                      without outlier channels */
    unsigned char *hasK, *hasV, *evicts;   /* per head */
    uint64_t *bytes;               /* per head */
    double *err, *kl, *ret, *rec;  /* per evaluation query */
} Eval;

/* Attention of the evaluation queries of KV head b over what compressed cache c keeps. */
static void head_attention(Eval *e, size_t b, const Compressed *c, const double *Kc, const double *Vc, size_t k_recall)
{
    const Data *d = e->d;
    const Reference *ref = e->ref;
    size_t Hq = d->Hq, H = d->H, G = Hq / H, T = d->T, D = d->D, N = d->N, l = b / H, h = b % H;
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
    for (size_t i = (l * Hq + h * G) * N; i < (l * Hq + (h + 1) * G) * N; i++) {
        attn_forward_scores(out, wc, terms, d->Q + i * D, Ks, Vs, nk, D);
        e->err[i] = rel_error(out, ref->out + i * D, D);
        const double *p = ref->w + i * T, *s = ref->s + i * T;
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

/* Fills row from heads [b0, b0 + nb) and their evaluation queries [q0, q0 + nq). */
static void fill_row(Row *row, const Eval *e, size_t b0, size_t nb, size_t q0, size_t nq)
{
    const Data *d = e->d;
    size_t m = e->m, D = d->D, T = d->T;
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
        set(row, COL_K_ERROR, ratio_of_norms(la_norm(e->dK + b0 * m, nb * m), la_norm(d->K + b0 * m, nb * m)));
        if (d->outlier_mask) {
            size_t cap = nb * m, k = 0, zeros = 0;
            double *a = xmalloc(cap * sizeof *a), *r = xmalloc(cap * sizeof *r);
            for (size_t b = b0; b < b0 + nb; b++) {
                const unsigned char *mask = d->outlier_mask + (b / d->H) * D;
                for (size_t t = 0; t < T; t++)
                    for (size_t j = 0; j < D; j++) {
                        if (mask[j]) continue;
                        size_t x = b * m + t * D + j;
                        a[k] = e->dK[x];
                        r[k] = d->K[x];
                        zeros += e->Kc_ord[x] == 0.0;
                        k++;
                    }
            }
            if (k > 0) {
                set(row, COL_K_ERROR_ORDINARY, ratio_of_norms(la_norm(a, k), la_norm(r, k)));
                set(row, COL_K_ZEROED_ORDINARY, (double)zeros / (double)k);
            }
            free(a);
            free(r);
        }
    }
    if (anyV) set(row, COL_V_ERROR, ratio_of_norms(la_norm(e->dV + b0 * m, nb * m), la_norm(d->V + b0 * m, nb * m)));
    uint64_t baseline = 2 * (uint64_t)m * (d->V ? 2 : 1) * nb;
    set(row, COL_BYTES, (double)bytes);
    set(row, COL_BASELINE_BYTES, (double)baseline);
    set(row, COL_RATIO, (double)baseline / (double)bytes);
}

static void eval_free(Eval *e)
{
    free(e->dK); free(e->dV); free(e->Kc_ord);
    free(e->hasK); free(e->hasV); free(e->evicts); free(e->bytes);
    free(e->err); free(e->kl); free(e->ret); free(e->rec);
}

/* *x' = *x' - x (m numbers) in place, then stored as head b of the (nh, m) difference *dst: with nh == 1 the
 * buffer itself becomes *dst (and *x' is NULL), else it is copied into *dst (zeros where no head rewrote it). */
static void take_difference(double **dst, double **xc, const double *x, size_t b, size_t nh, size_t m)
{
    double *y = *xc;
    for (size_t i = 0; i < m; i++) y[i] = y[i] - x[i];
    if (nh == 1) {
        *dst = y;
        *xc = NULL;
        return;
    }
    if (!*dst) *dst = xcalloc(nh * m, sizeof **dst);
    memcpy(*dst + b * m, y, m * sizeof *y);
}

/* Runs the method on every head; fills the aggregate row and/or the per-head rows. */
static int evaluate(Row *agg, Row *heads, const Experiment *ex, const Config *cfg, const Data *d, const Reference *ref,
                    Timing *tm)
{
    size_t L = d->L, H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, m = T * D, nh = L * H;
    Eval e = {d, ref, m, NULL, NULL, NULL, xcalloc(nh, 1), xcalloc(nh, 1), xcalloc(nh, 1),
              xcalloc(nh, sizeof(uint64_t)), NULL, NULL, NULL, NULL};
    if (ref->nq) {
        e.err = xmalloc(ref->nq * sizeof *e.err);
        e.kl = xmalloc(ref->nq * sizeof *e.kl);
        e.ret = xmalloc(ref->nq * sizeof *e.ret);
        e.rec = xmalloc(ref->nq * sizeof *e.rec);
    }
    size_t k_recall = cfg->recall_k < T ? cfg->recall_k : T;
    if (k_recall == 0) k_recall = T < 32 ? T : 32;
    MethodInput *ins = xcalloc(H, sizeof *ins);
    Compressed *cs = xcalloc(H, sizeof *cs);
    int timed = tm && agg;   /* the heads' stored forms are gathered into one cache and timed at the end */
    TimedCache stored;
    timing_cache_init(&stored, L, H);
    LlamaRows *lm_rows = d->model && agg ? xcalloc(nh, sizeof *lm_rows) : NULL;   /* the model's compressed cache */
    for (size_t b = 0; b < nh; b++) {
        const double *K = d->K + b * m, *V = d->V ? d->V + b * m : NULL;
        if (b % H == 0) {   /* run the method on the layer's heads: per head, or once for the layer */
            int rc = 0;
            for (size_t h = 0; h < H; h++) {
                size_t bb = b + h;
                MethodInput *in = &ins[h];
                *in = (MethodInput){.T = T, .D = D, .K = d->K + bb * m, .V = d->V ? d->V + bb * m : NULL,
                                    .w_ref = ref->wsum ? ref->wsum + bb * T : NULL,
                                    .K_att = ref->Katt ? ref->Katt + bb * m : NULL, .layer = bb / H, .head = h,
                                    .seed = cfg->seed, .svd = ref->svd};
                if (d->O) {
                    in->Q_obs = d->O + (bb / H * Hq + h * G) * d->W * D;
                    in->obs_pos = d->obs_pos;
                    in->n_obs_heads = G;
                    in->n_obs = d->W;
                }
            }
            rc = method_run(cs, ex, ins, H, timed);
            for (size_t h = 0; rc == 0 && h < H; h++) rc = check_finite(&cs[h], T, D, b / H, h);
            if (rc) {
                for (size_t h = 0; h < H; h++) compressed_free(&cs[h]);
                free(ins);
                free(cs);
                timing_cache_free(&stored);
                eval_free(&e);
                model_rows_free(lm_rows, nh);
                free(lm_rows);
                return -1;
            }
        }
        Compressed c = cs[b % H];
        memset(&cs[b % H], 0, sizeof c);
        if (c.K) {
            if (d->outlier_mask) {   /* read only for k_zeroed_ordinary */
                if (!e.Kc_ord) {
                    e.Kc_ord = xmalloc(nh * m * sizeof *e.Kc_ord);
                    memcpy(e.Kc_ord, d->K, nh * m * sizeof *e.Kc_ord);
                }
                memcpy(e.Kc_ord + b * m, c.K, m * sizeof *c.K);
            }
            e.hasK[b] = 1;
        }
        e.hasV[b] = c.V != NULL;
        e.evicts[b] = c.kept != NULL;
        e.bytes[b] = c.bytes;
        if (timed) timing_cache_add(&stored, &c.stored);
        if (ref->nq) head_attention(&e, b, &c, c.K ? c.K : K, c.V ? c.V : V, k_recall);
        if (lm_rows) model_rows_set(&lm_rows[b], c.K ? c.K : K, c.V ? c.V : V, c.kept, c.n_kept, T, D);
        /* K' - K and V' - V, computed in place in K' and V' once the attention has read them; with one head the
         * buffer itself is kept (no copy) */
        if (c.K) take_difference(&e.dK, &c.K, K, b, nh, m);
        if (c.V) take_difference(&e.dV, &c.V, V, b, nh, m);
        compressed_free(&c);
    }
    free(ins);
    free(cs);
    if (agg) {
        memset(agg, 0, sizeof *agg);
        agg->ex = ex;
        fill_row(agg, &e, 0, nh, 0, ref->nq);
        if (timed && stored.none) {
            agg->no_timing = stored.none;
        } else if (timed) {
            double ns, sp;
            if (timing_measure(tm, &stored, &ns, &sp)) {   /* the quality numbers stand; the note says why */
                snprintf(agg->no_timing_buf, sizeof agg->no_timing_buf, "%s", kvc_errmsg());
                agg->no_timing = agg->no_timing_buf;
            } else {
                set(agg, COL_DECODE_NS, ns);
                set(agg, COL_DECODE_SPEEDUP, sp);
                set(agg, COL_DECODE_NS_MAD, timing_last_mad(tm));
            }
        }
        timing_cache_free(&stored);
        if (lm_rows) {
            double lm[5];
            int rc = model_source_score(lm, d->model, lm_rows);
            model_rows_free(lm_rows, nh);
            free(lm_rows);
            if (rc) {
                eval_free(&e);
                return -1;
            }
            for (int k = 0; k < 4; k++) set(agg, (Column)(COL_LM_KL + k), lm[k]);
            if (d->model->n_answers) set(agg, COL_RECALL_ACC, lm[4]);
        }
    }
    for (size_t b = 0; heads && b < nh; b++) {
        Row *row = &heads[b];
        memset(row, 0, sizeof *row);
        row->ex = ex;
        row->per_head = 1;
        row->layer = b / H;
        row->head = b % H;
        size_t gq = G * d->N;
        fill_row(row, &e, b, 1, ref->nq ? (b / H * Hq + b % H * G) * d->N : 0, ref->nq ? gq : 0);
    }
    eval_free(&e);
    return 0;
}

int eval_experiment(Row *row, const Experiment *ex, const Config *cfg, const Data *d, const Reference *ref,
                    Timing *tm)
{
    return evaluate(row, NULL, ex, cfg, d, ref, tm);
}

int eval_experiment_per_head(Row *rows, const Experiment *ex, const Config *cfg, const Data *d,
                             const Reference *ref)
{
    return evaluate(NULL, rows, ex, cfg, d, ref, NULL);
}
