/* synth: the data generators, in the documented draw order (README.md "Draw order"; see synth.h).
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H, T tokens, D head dim, N evaluation and W observation
 * queries per (layer, query head). "U(n)" is numpy's rng.random(n), "N(n)" rng.normal(size=n).
 */
#include "data/synth.h"
#include "data/model_source.h"
#include "base/linalg.h"
#include "base/rng.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double *normal(rng *r, size_t n)
{
    double *x = xmalloc(n * sizeof *x);
    rng_normal_fill(r, x, n);
    return x;
}

static double *uniform(rng *r, size_t n)
{
    double *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = rng_next_double(r);
    return x;
}

/* Keys by the keys recipe, (L, Hx, T, D): normal N; lowrank (A @ B) * scale (+ noise * N). */
static double *keys_content(rng *r, const Config *cfg, size_t Hx)
{
    size_t B = cfg->layers * Hx, T = cfg->dims.T, D = cfg->dims.D, n = B * T * D;
    if (cfg->keys_gen == KEYS_NORMAL) return normal(r, n);
    size_t R = cfg->keys_rank;
    double *A = normal(r, B * T * R), *Bm = normal(r, B * R * D), *K = xmalloc(n * sizeof *K);
    for (size_t b = 0; b < B; b++) la_matmul(K + b * T * D, A + b * T * R, Bm + b * R * D, T, R, D);
    for (size_t i = 0; i < n; i++) K[i] = K[i] * cfg->keys_scale;
    free(A);
    free(Bm);
    if (cfg->keys_noise > 0) {
        double *E = normal(r, n);
        for (size_t i = 0; i < n; i++) K[i] = K[i] + cfg->keys_noise * E[i];
        free(E);
    }
    return K;
}

/* x[l, h] = sqrt(1 - rho) x[l, h] + sqrt(rho) c[l, h / g]; x is (L, H, m), c is (L, H / g, m). */
static void mix_heads(double *x, const double *c, size_t L, size_t H, size_t g, size_t m, double rho)
{
    double a = sqrt(1 - rho), b = sqrt(rho);
    for (size_t l = 0; l < L; l++)
        for (size_t h = 0; h < H; h++) {
            double *xp = x + (l * H + h) * m;
            const double *cp = c + (l * (H / g) + h / g) * m;
            for (size_t i = 0; i < m; i++) xp[i] = a * xp[i] + b * cp[i];
        }
}

/* One set of queries, (L, nh, n, D). Head j of the set reads KV head j / per of Kq (L, H, T, D).
 * pos NULL: evaluation queries (targets in 0..T-1); else query k sits at pos[k] and sees tokens 0..pos[k]. */
static double *make_queries(rng *r, const QuerySpec *qs, const double *Kq, size_t L, size_t H, size_t T, size_t D,
                            size_t nh, size_t per, size_t n, const size_t *pos)
{
    size_t nq = L * nh * n;
    double *q = xmalloc(nq * D * sizeof *q);
    if (qs->gen == QUERY_LOOK_BACK) {
        size_t *tgt = xmalloc(nq * sizeof *tgt);
        if (qs->tokens) {
            for (size_t i = 0; i < nq; i++) tgt[i] = qs->tokens[i % n];
        } else {
            double *u = uniform(r, nq);
            for (size_t i = 0; i < nq; i++) {
                size_t range = pos ? pos[i % n] + 1 : T, t = (size_t)(u[i] * (double)range);
                tgt[i] = t < range ? t : range - 1;
            }
            free(u);
        }
        for (size_t l = 0; l < L; l++)
            for (size_t j = 0; j < nh; j++)
                for (size_t k = 0; k < n; k++) {
                    size_t i = (l * nh + j) * n + k;
                    const double *key = Kq + ((l * H + j / per) * T + tgt[i]) * D;
                    for (size_t c = 0; c < D; c++) q[i * D + c] = key[c] * qs->weight;
                }
        free(tgt);
    } else {
        double *a = normal(r, nq * T);
        if (pos)
            for (size_t i = 0; i < nq; i++)
                for (size_t t = pos[i % n] + 1; t < T; t++) a[i * T + t] = 0.0;
        for (size_t l = 0; l < L; l++)
            for (size_t j = 0; j < nh; j++) {
                size_t b = l * nh + j;
                la_matmul(q + b * n * D, a + b * n * T, Kq + (l * H + j / per) * T * D, n, T, D);
            }
        for (size_t i = 0; i < nq; i++) {
            double root = sqrt((double)(pos ? pos[i % n] + 1 : T));
            for (size_t c = 0; c < D; c++) q[i * D + c] = q[i * D + c] / root * qs->weight;
        }
        free(a);
    }
    if (qs->noise > 0) {
        double *z = normal(r, nq * D);
        for (size_t i = 0; i < nq * D; i++) q[i] = q[i] + qs->noise * z[i];
        free(z);
    }
    return q;
}

/* Evaluation queries (L, Hq, N, D), with the GQA-group blend when query.head_correlation > 0. */
static double *eval_queries(rng *r, const Config *cfg, const double *Kq)
{
    const QuerySpec *qs = &cfg->query;
    size_t L = cfg->layers, H = cfg->kv_heads, Hq = cfg->q_heads, G = Hq / H;
    size_t T = cfg->dims.T, D = cfg->dims.D, N = qs->n;
    double rho = qs->head_correlation;
    if (rho == 0) return make_queries(r, qs, Kq, L, H, T, D, Hq, G, N, NULL);
    double *shared = make_queries(r, qs, Kq, L, H, T, D, H, 1, N, NULL);
    double *own = rho < 1 ? make_queries(r, qs, Kq, L, H, T, D, Hq, G, N, NULL) : NULL;
    double *Q = xmalloc(L * Hq * N * D * sizeof *Q);
    double a = sqrt(rho), b = sqrt(1 - rho);
    for (size_t l = 0; l < L; l++)
        for (size_t hq = 0; hq < Hq; hq++) {
            double *qp = Q + (l * Hq + hq) * N * D;
            const double *sp = shared + (l * H + hq / G) * N * D, *op = own ? own + (l * Hq + hq) * N * D : NULL;
            for (size_t i = 0; i < N * D; i++) qp[i] = op ? a * sp[i] + b * op[i] : sp[i];
        }
    free(shared);
    free(own);
    return Q;
}

/* query.bias: u = N(L, H, D); every evaluation and observation query of KV head (l, h) gets + bias * u[l, h]. */
static void add_bias(rng *r, const Config *cfg, Data *d)
{
    size_t L = d->L, H = d->H, Hq = d->Hq, G = Hq / H, D = d->D;
    double *u = normal(r, L * H * D);
    double *sets[2] = {d->Q, d->O};
    size_t counts[2] = {d->N, d->W};
    for (int k = 0; k < 2; k++) {
        if (!sets[k]) continue;
        for (size_t l = 0; l < L; l++)
            for (size_t hq = 0; hq < Hq; hq++)
                for (size_t n = 0; n < counts[k]; n++) {
                    double *q = sets[k] + ((l * Hq + hq) * counts[k] + n) * D;
                    const double *up = u + (l * H + hq / G) * D;
                    for (size_t j = 0; j < D; j++) q[j] = q[j] + cfg->q_bias * up[j];
                }
    }
    free(u);
}

/* ---- outlier channels per layer ---- */

/* np.median(np.abs(x)) of x[0..n), n >= 1. */
static double median_abs(const double *x, size_t n)
{
    double *a = xmalloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = fabs(x[i]);
    double m = median(a, n);
    free(a);
    return m;
}

typedef struct {
    double key;
    size_t i;
} Keyed;

static int by_key(const void *a, const void *b)
{
    const Keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int by_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* out[0..k) = offset + the indices of the k smallest of u[0..n) (stable argsort), ascending. */
static void smallest_k(size_t *out, const double *u, size_t n, size_t k, size_t offset)
{
    Keyed *s = xmalloc(n * sizeof *s);
    for (size_t i = 0; i < n; i++) s[i] = (Keyed){u[i], i};
    qsort(s, n, sizeof *s, by_key);
    for (size_t i = 0; i < k; i++) out[i] = offset + s[i].i;
    qsort(out, k, sizeof *out, by_size);
    free(s);
}

/* keys.outlier_channels: per layer `count` channels get a constant offset sign * m * median|K[l, h]|. */
static void outlier_channels(rng *r, const Config *cfg, double *K, unsigned char *mask)
{
    size_t L = cfg->layers, H = cfg->kv_heads, T = cfg->dims.T, D = cfg->dims.D, n = cfg->oc_count;
    double *u = uniform(r, L * D), *mu = uniform(r, L * H * n), *su = uniform(r, L * H * n);
    size_t *chan = xmalloc(n * sizeof *chan);
    for (size_t l = 0; l < L; l++) {
        smallest_k(chan, u + l * D, D, n, 0);
        for (size_t k = 0; k < n; k++) mask[l * D + chan[k]] = 1;
        for (size_t h = 0; h < H; h++) {
            double *Kh = K + (l * H + h) * T * D, med = median_abs(Kh, T * D);
            for (size_t k = 0; k < n; k++) {
                size_t i = (l * H + h) * n + k;
                double m = cfg->oc_lo * pow(cfg->oc_hi / cfg->oc_lo, mu[i]);
                double off = (su[i] < 0.5 ? -1.0 : 1.0) * m * med;
                for (size_t t = 0; t < T; t++) Kh[t * D + chan[k]] = Kh[t * D + chan[k]] + off;
            }
        }
    }
    free(chan);
    free(u);
    free(mu);
    free(su);
}

/* ---- attention shaping: spread, heavy hitters, recent tokens, sinks (relative to the mean evaluation query) ---- */

typedef struct Shaper {
    double *Ka;          /* (T, D) attention-space keys of this head */
    double *Kp;          /* (T, D) pre-RoPE cache keys to keep in step, or NULL */
    const Rope *rope;
    const double *qbar;  /* (D,) mean evaluation query */
    double qq;           /* qbar . qbar */
    size_t T, D;
    double *row;         /* (D,) scratch */
} Shaper;

/* Key t moves by coef * qbar in attention space (and by the inverse rotation of that in Kp). */
static void shift_row(const Shaper *s, size_t t, double coef)
{
    for (size_t j = 0; j < s->D; j++) s->row[j] = coef * s->qbar[j];
    for (size_t j = 0; j < s->D; j++) s->Ka[t * s->D + j] = s->Ka[t * s->D + j] + s->row[j];
    if (!s->Kp) return;
    rope_apply(s->rope, s->row, &t, 1, 1);
    for (size_t j = 0; j < s->D; j++) s->Kp[t * s->D + j] = s->Kp[t * s->D + j] + s->row[j];
}

/* Shifts the tokens set[0..n) (ascending) along qbar so that they get `share` of the mean query's attention. */
static void give_share(const Shaper *s, const size_t *set, size_t n, double share)
{
    size_t T = s->T;
    double *e = xmalloc(T * sizeof *e), *in = xmalloc(T * sizeof *in), *out = xmalloc(T * sizeof *out);
    unsigned char *is_in = xcalloc(T, 1);
    la_matvec(e, s->Ka, s->qbar, T, s->D);
    double root = sqrt((double)s->D), m = -INFINITY;
    for (size_t t = 0; t < T; t++) {
        e[t] = e[t] / root;
        if (e[t] > m) m = e[t];
    }
    for (size_t t = 0; t < T; t++) e[t] = exp(e[t] - m);
    for (size_t k = 0; k < n; k++) is_in[set[k]] = 1;
    size_t ni = 0, no = 0;
    for (size_t t = 0; t < T; t++) {
        if (is_in[t]) in[ni++] = e[t];
        else out[no++] = e[t];
    }
    double s_in = la_sum(in, ni), s_out = la_sum(out, no);
    if (s_in > 0 && s_out > 0) {
        double delta = log(share / (1 - share)) + log(s_out) - log(s_in);
        double coef = delta * root / s->qq;
        for (size_t k = 0; k < n; k++) shift_row(s, set[k], coef);
    }
    free(e);
    free(in);
    free(out);
    free(is_in);
}

static void shape_attention(rng *r, const Config *cfg, Data *d, double *Ka, double *Kp)
{
    size_t L = d->L, H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, N = d->N, ns = cfg->sink_tokens;
    double *z = cfg->hh_spread > 0 ? normal(r, L * H * T) : NULL;
    double *u = cfg->hh_count > 0 ? uniform(r, L * H * (T - ns)) : NULL;
    double *qbar = xmalloc(D * sizeof *qbar), *row = xmalloc(D * sizeof *row);
    size_t *set = xmalloc(T * sizeof *set);
    for (size_t l = 0; l < L; l++)
        for (size_t h = 0; h < H; h++) {
            size_t b = l * H + h;
            for (size_t j = 0; j < D; j++) qbar[j] = 0.0;
            for (size_t i = 0; i < G * N; i++) {
                const double *q = d->Q + ((l * Hq + h * G) * N + i) * D;
                for (size_t j = 0; j < D; j++) qbar[j] = qbar[j] + q[j];
            }
            for (size_t j = 0; j < D; j++) qbar[j] = qbar[j] / (double)(G * N);
            double qn = la_norm(qbar, D);
            if (qn == 0) continue;
            Shaper s = {Ka + b * T * D, Kp ? Kp + b * T * D : NULL, &d->rope, qbar, qn * qn, T, D, row};
            if (z) {
                double root = sqrt((double)D);
                for (size_t t = 0; t < T; t++) shift_row(&s, t, cfg->hh_spread * z[b * T + t] * root / s.qq);
            }
            if (u) {
                smallest_k(set, u + b * (T - ns), T - ns, cfg->hh_count, ns);
                give_share(&s, set, cfg->hh_count, cfg->hh_share);
            }
            if (cfg->recent_tokens > 0) {
                for (size_t t = 0; t < cfg->recent_tokens; t++) set[t] = T - cfg->recent_tokens + t;
                give_share(&s, set, cfg->recent_tokens, cfg->recent_share);
            }
            if (ns > 0) {
                for (size_t t = 0; t < ns; t++) set[t] = t;
                give_share(&s, set, ns, cfg->sink_share);
            }
        }
    free(z);
    free(u);
    free(qbar);
    free(row);
    free(set);
}

/* ---- the pipeline ---- */

int synth_data(Data *d, const Config *cfg)
{
    memset(d, 0, sizeof *d);
    rng r;
    if (rng_seed_decimal(&r, cfg->seed)) return kvc_fail("seed: not a decimal integer (got \"%s\")", cfg->seed);
    size_t L = cfg->layers, H = cfg->kv_heads, T = cfg->dims.T, D = cfg->dims.D;
    size_t g = cfg->head_group, m = T * D, n = L * H * m;
    d->L = L;
    d->H = H;
    d->Hq = cfg->q_heads;
    d->T = T;
    d->D = D;

    /* 1. keys, 2. their head correlation, 3. keys.outliers */
    double *K = keys_content(&r, cfg, H);
    if (cfg->head_rho > 0) {
        double *C = keys_content(&r, cfg, H / g);
        mix_heads(K, C, L, H, g, m, cfg->head_rho);
        free(C);
    }
    for (size_t o = 0; o < cfg->n_outliers; o++)
        for (size_t row = 0; row < L * H * T; row++) K[row * D + cfg->outliers[o].channel] *= cfg->outliers[o].scale;
    if (cfg->n_outliers > 0 || cfg->oc_count > 0) {
        d->outlier_mask = xcalloc(L * D, 1);
        for (size_t l = 0; l < L; l++)
            for (size_t o = 0; o < cfg->n_outliers; o++) d->outlier_mask[l * D + cfg->outliers[o].channel] = 1;
    }

    /* 4. values and their head correlation */
    if (cfg->dims.has_values) {
        d->V = normal(&r, n);
        if (cfg->head_rho > 0) {
            double *C = normal(&r, L * (H / g) * m);
            mix_heads(d->V, C, L, H, g, m, cfg->head_rho);
            free(C);
        }
    }

    /* 5. evaluation queries, 6. observation queries: they look at the keys so far, as attention reads them */
    Rope rope = {0};
    if (cfg->has_rope)
        rope_init(&rope, cfg->rope_base, cfg->rope_dims, cfg->rope_style == ROPE_INTERLEAVED, T, D);
    if (cfg->dims.has_query || cfg->observe.n > 0) {
        double *Kq = K;
        if (cfg->has_rope) {
            Kq = xmalloc(n * sizeof *Kq);
            memcpy(Kq, K, n * sizeof *Kq);
            for (size_t b = 0; b < L * H; b++) rope_apply(&rope, Kq + b * m, NULL, T, 0);
        }
        if (cfg->dims.has_query) {
            d->N = cfg->query.n;
            d->Q = eval_queries(&r, cfg, Kq);
        }
        if (cfg->observe.n > 0) {
            d->W = cfg->observe.n;
            d->obs_pos = xmalloc(d->W * sizeof *d->obs_pos);
            for (size_t j = 0; j < d->W; j++) d->obs_pos[j] = T - d->W + j;
            d->O = make_queries(&r, &cfg->observe, Kq, L, H, T, D, d->Hq, d->Hq / H, d->W, d->obs_pos);
        }
        if (Kq != K) free(Kq);
        if (cfg->q_bias > 0) add_bias(&r, cfg, d);
    }

    /* 7. outlier channels per layer (pre-RoPE) */
    if (cfg->oc_count > 0) outlier_channels(&r, cfg, K, d->outlier_mask);

    /* 8. RoPE, 9. spread, heavy hitters, recent tokens and sinks in attention space */
    double *Ka = K;
    if (cfg->has_rope) {
        Ka = xmalloc(n * sizeof *Ka);
        memcpy(Ka, K, n * sizeof *Ka);
        for (size_t b = 0; b < L * H; b++) rope_apply(&rope, Ka + b * m, NULL, T, 0);
    }
    d->rope = rope;   /* shift_row's inverse rotation reads it */
    if (cfg->hh_spread > 0 || cfg->hh_count > 0 || cfg->recent_tokens > 0 || cfg->sink_tokens > 0)
        shape_attention(&r, cfg, d, Ka, cfg->has_rope && cfg->rope_cache_pre ? K : NULL);

    /* the cache: pre-RoPE keys (attention rotates them) or the keys attention reads */
    if (cfg->has_rope && cfg->rope_cache_pre) {
        free(Ka);
        d->K = K;
    } else {
        if (Ka != K) free(K);
        d->K = Ka;
        rope_free(&d->rope);
    }
    if (data_check(d)) {
        data_free(d);
        return -1;
    }
    return 0;
}

/* The first value of x[0..n) that is not finite: 0 and its index, or -1 if all are finite. */
static int first_not_finite(const double *x, size_t n, size_t *at)
{
    for (size_t i = 0; x && i < n; i++)
        if (!isfinite(x[i])) {
            *at = i;
            return 0;
        }
    return -1;
}

/* max over rows of the norm of each D-long row of x[0..rows) */
static double max_row_norm(const double *x, size_t rows, size_t D)
{
    double m = 0.0;
    for (size_t r = 0; r < rows; r++) {
        double v = la_norm(x + r * D, D);
        if (v > m) m = v;
    }
    return m;
}

int data_check(const Data *d)
{
    size_t m = d->T * d->D, G = d->H ? d->Hq / d->H : 1, at;
    const struct { const char *name; const double *x; size_t n; } t[] = {
        {"keys", d->K, d->L * d->H * m}, {"values", d->V, d->L * d->H * m},
        {"evaluation queries", d->Q, d->L * d->Hq * d->N * d->D},
        {"observation queries", d->O, d->L * d->Hq * d->W * d->D},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (first_not_finite(t[i].x, t[i].n, &at) == 0)
            return kvc_fail("data: the %s overflow a double; lower the scale or weight that made them so large "
                            "(got %g at flat index %zu)", t[i].name, t[i].x[at], at);
    /* |q . k| <= |q| |k| (RoPE rotates keys, norms unchanged): refuse what could overflow a score */
    for (size_t b = 0; b < d->L * d->H; b++) {
        double kmax = max_row_norm(d->K + b * m, d->T, d->D), qmax = 0.0;
        size_t l = b / d->H, h = b % d->H;
        for (size_t g = 0; g < G; g++) {
            size_t hq = l * d->Hq + h * G + g;
            double a = d->Q ? max_row_norm(d->Q + hq * d->N * d->D, d->N, d->D) : 0.0;
            double o = d->O ? max_row_norm(d->O + hq * d->W * d->D, d->W, d->D) : 0.0;
            if (a > qmax) qmax = a;
            if (o > qmax) qmax = o;
        }
        if (kmax > 0 && qmax > DATA_MAX_SCORE / kmax)
            return kvc_fail("data: attention scores q.k could overflow a double in layer %zu, KV head %zu: the "
                            "largest |q| x |k| exceeds %g; lower data.keys.scale, the outlier scales or the "
                            "query weight (got |q| = %g, |k| = %g)", l, h, DATA_MAX_SCORE, qmax, kmax);
    }
    return 0;
}

void data_free(Data *d)
{
    if (!d) return;
    free(d->K);
    free(d->V);
    free(d->Q);
    free(d->O);
    free(d->obs_pos);
    free(d->outlier_mask);
    rope_free(&d->rope);
    model_source_free(d->model);
    free(d->model);
    memset(d, 0, sizeof *d);
}
