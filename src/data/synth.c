/* synth: the data generators, in the documented draw order (README.md "Draw order"; see synth.h).
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H, T tokens, D head dim, N evaluation and W observation
 * queries per (layer, query head). "U(n)" is numpy's rng.random(n), "N(n)" rng.normal(size=n).
 */
#include "data/synth.h"
#include "data/model_source.h"
#include "base/linalg.h"
#include "base/pool.h"
#include "base/rng.h"
#include "base/util.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the draws, one layer at a time ----
 *
 * Every draw of the data is a block of L x c numbers whose layer-l part is the c numbers at l x c (the blocks are
 * C order with the layer axis first). A Gen hands out layer l's part of each block in turn. The record pass
 * (record = 1) runs the generator once through every block, keeps the generator's state at the start of each
 * layer's part and returns layer 0's part; afterwards any layer's part of any block is made from its state, in any
 * order, without the others. The rng state is the whole state (no pending normal), so this is exact. */
typedef struct Gen {
    rng r;          /* record pass: the running generator */
    int record;
    size_t L, l;    /* layers; the layer made (0 in the record pass) */
    size_t k;       /* the next block */
    rng *states;    /* (nblocks, L, GEN_PIECES): the state at the start of each piece of layer l's part of block k */
    size_t nblocks, cap;
    Pool *pool;     /* replay: pieces on these threads (NULL: in turn) */
} Gen;

/* A layer's part of a block of at least GEN_PIECE_MIN draws is made in GEN_PIECES pieces, the state at each
 * piece's start recorded, so that a replay makes the pieces at once on threads. The pieces depend on the part's
 * size only: the numbers are the same whether made in one go, in pieces, in turn or at once. */
enum { GEN_PIECES = 8, GEN_PIECE_MIN = 65536 };

static size_t gen_pieces(size_t c) { return c >= GEN_PIECE_MIN ? GEN_PIECES : 1; }

/* The states of layer l's part of the next block (a new block in the record pass). */
static rng *gen_block(Gen *g)
{
    if (g->record) {
        if (g->nblocks == g->cap) {
            size_t cap = g->cap ? 2 * g->cap : 16;
            rng *st = xmalloc(cap * g->L * GEN_PIECES * sizeof *st);
            if (g->nblocks) memcpy(st, g->states, g->nblocks * g->L * GEN_PIECES * sizeof *st);
            free(g->states);
            g->states = st;
            g->cap = cap;
        }
        g->nblocks++;
    }
    assert(g->k < g->nblocks);
    return &g->states[(g->k++ * g->L + g->l) * GEN_PIECES];
}

static void draw(rng *r, double *x, size_t n, int gauss)
{
    if (gauss) rng_normal_fill(r, x, n);
    else
        for (size_t i = 0; i < n; i++) x[i] = rng_next_double(r);
}

typedef struct Pieces {
    const rng *s;
    double *x;
    size_t c, P;
    int gauss;
} Pieces;

static void piece(void *arg, size_t p, int tid)
{
    (void)tid;
    const Pieces *w = arg;
    size_t a = w->c * p / w->P, b = w->c * (p + 1) / w->P;
    rng r = w->s[p];
    draw(&r, w->x + a, b - a, w->gauss);
}

/* Layer g->l's part of the next block: c draws of next(). The record pass draws the whole block. */
static void gen_fill(Gen *g, double *x, size_t c, int gauss)
{
    rng *s = gen_block(g);
    size_t P = gen_pieces(c);
    if (!g->record) {
        Pieces w = {s, x, c, P, gauss};
        if (g->pool && P > 1) pool_run(g->pool, piece, &w, P);
        else
            for (size_t p = 0; p < P; p++) piece(&w, p, 0);
        return;
    }
    double skip[1024];
    for (size_t l = 0; l < g->L; l++)
        for (size_t p = 0; p < P; p++) {
            size_t a = c * p / P, b = c * (p + 1) / P;
            s[l * GEN_PIECES + p] = g->r;
            for (size_t i = a; i < b;) {
                size_t n = l == 0 ? b - a : (b - i < 1024 ? b - i : 1024);
                draw(&g->r, l == 0 ? x + a : skip, n, gauss);
                i += n;
            }
        }
}

static double *normal(Gen *g, size_t c)
{
    double *x = xmalloc(c * sizeof *x);
    gen_fill(g, x, c, 1);
    return x;
}

static double *uniform(Gen *g, size_t c)
{
    double *x = xmalloc(c * sizeof *x);
    gen_fill(g, x, c, 0);
    return x;
}

/* One layer's keys by the keys recipe, (Hx, T, D): normal N; lowrank (A @ B) * scale (+ noise * N). */
static double *keys_content(Gen *r, const Config *cfg, size_t Hx)
{
    size_t B = Hx, T = cfg->dims.T, D = cfg->dims.D, n = B * T * D;
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

/* x[h] = sqrt(1 - rho) x[h] + sqrt(rho) c[h / g]; x is (H, m), c is (H / g, m): one layer. */
static void mix_heads(double *x, const double *c, size_t H, size_t g, size_t m, double rho)
{
    double a = sqrt(1 - rho), b = sqrt(rho);
    for (size_t h = 0; h < H; h++) {
        double *xp = x + h * m;
        const double *cp = c + (h / g) * m;
        for (size_t i = 0; i < m; i++) xp[i] = a * xp[i] + b * cp[i];
    }
}

/* One layer's set of queries, (nh, n, D). Head j of the set reads KV head j / per of Kq (H, T, D).
 * pos NULL: evaluation queries (targets in 0..T-1); else query k sits at pos[k] and sees tokens 0..pos[k]. */
static double *make_queries(Gen *r, const QuerySpec *qs, const double *Kq, size_t T, size_t D, size_t nh,
                            size_t per, size_t n, const size_t *pos)
{
    size_t nq = nh * n;
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
        for (size_t j = 0; j < nh; j++)
            for (size_t k = 0; k < n; k++) {
                size_t i = j * n + k;
                const double *key = Kq + ((j / per) * T + tgt[i]) * D;
                for (size_t c = 0; c < D; c++) q[i * D + c] = key[c] * qs->weight;
            }
        free(tgt);
    } else {
        double *a = normal(r, nq * T);
        if (pos)
            for (size_t i = 0; i < nq; i++)
                for (size_t t = pos[i % n] + 1; t < T; t++) a[i * T + t] = 0.0;
        for (size_t j = 0; j < nh; j++) la_matmul(q + j * n * D, a + j * n * T, Kq + (j / per) * T * D, n, T, D);
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

/* One layer's evaluation queries (Hq, N, D), with the GQA-group blend when query.head_correlation > 0. */
static double *eval_queries(Gen *r, const Config *cfg, const double *Kq)
{
    const QuerySpec *qs = &cfg->query;
    size_t H = cfg->kv_heads, Hq = cfg->q_heads, G = Hq / H;
    size_t T = cfg->dims.T, D = cfg->dims.D, N = qs->n;
    double rho = qs->head_correlation;
    if (rho == 0) return make_queries(r, qs, Kq, T, D, Hq, G, N, NULL);
    double *shared = make_queries(r, qs, Kq, T, D, H, 1, N, NULL);
    double *own = rho < 1 ? make_queries(r, qs, Kq, T, D, Hq, G, N, NULL) : NULL;
    double *Q = xmalloc(Hq * N * D * sizeof *Q);
    double a = sqrt(rho), b = sqrt(1 - rho);
    for (size_t hq = 0; hq < Hq; hq++) {
        double *qp = Q + hq * N * D;
        const double *sp = shared + (hq / G) * N * D, *op = own ? own + hq * N * D : NULL;
        for (size_t i = 0; i < N * D; i++) qp[i] = op ? a * sp[i] + b * op[i] : sp[i];
    }
    free(shared);
    free(own);
    return Q;
}

/* query.bias: u = N(H, D) per layer; every evaluation and observation query of KV head h gets + bias * u[h]. */
static void add_bias(Gen *r, const Config *cfg, double *Q, double *O)
{
    size_t H = cfg->kv_heads, Hq = cfg->q_heads, G = Hq / H, D = cfg->dims.D;
    double *u = normal(r, H * D);
    double *sets[2] = {Q, O};
    size_t counts[2] = {Q ? cfg->query.n : 0, O ? cfg->observe.n : 0};
    for (int k = 0; k < 2; k++) {
        if (!sets[k]) continue;
        for (size_t hq = 0; hq < Hq; hq++)
            for (size_t n = 0; n < counts[k]; n++) {
                double *q = sets[k] + (hq * counts[k] + n) * D;
                const double *up = u + (hq / G) * D;
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

/* keys.outlier_channels, one layer: `count` channels get a constant offset sign * m * median|K[h]| (K is (H, T, D)).
 * med (H,): the medians, computed here and kept (known 0), or known from an earlier making of the layer (1). */
static void outlier_channels(Gen *r, const Config *cfg, double *K, unsigned char *mask, double *med, int known)
{
    size_t H = cfg->kv_heads, T = cfg->dims.T, D = cfg->dims.D, n = cfg->oc_count;
    double *u = uniform(r, D), *mu = uniform(r, H * n), *su = uniform(r, H * n);
    size_t *chan = xmalloc(n * sizeof *chan);
    smallest_k(chan, u, D, n, 0);
    for (size_t k = 0; k < n; k++) mask[chan[k]] = 1;
    for (size_t h = 0; h < H; h++) {
        double *Kh = K + h * T * D;
        if (!known) med[h] = median_abs(Kh, T * D);
        for (size_t k = 0; k < n; k++) {
            size_t i = h * n + k;
            double m = cfg->oc_lo * pow(cfg->oc_hi / cfg->oc_lo, mu[i]);
            double off = (su[i] < 0.5 ? -1.0 : 1.0) * m * med[h];
            for (size_t t = 0; t < T; t++) Kh[t * D + chan[k]] = Kh[t * D + chan[k]] + off;
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

/* One layer: Ka (H, T, D) the attention-space keys, Kp the pre-RoPE cache keys or NULL, Q (Hq, N, D). */
static void shape_attention(Gen *r, const Config *cfg, const Rope *rope, const double *Q, double *Ka, double *Kp)
{
    size_t H = cfg->kv_heads, Hq = cfg->q_heads, G = Hq / H, T = cfg->dims.T, D = cfg->dims.D;
    size_t N = Q ? cfg->query.n : 0, ns = cfg->sink_tokens;
    double *z = cfg->hh_spread > 0 ? normal(r, H * T) : NULL;
    double *u = cfg->hh_count > 0 ? uniform(r, H * (T - ns)) : NULL;
    double *qbar = xmalloc(D * sizeof *qbar), *row = xmalloc(D * sizeof *row);
    size_t *set = xmalloc(T * sizeof *set);
    for (size_t h = 0; h < H; h++) {
        for (size_t j = 0; j < D; j++) qbar[j] = 0.0;
        for (size_t i = 0; i < G * N; i++) {
            const double *q = Q + (h * G * N + i) * D;
            for (size_t j = 0; j < D; j++) qbar[j] = qbar[j] + q[j];
        }
        for (size_t j = 0; j < D; j++) qbar[j] = qbar[j] / (double)(G * N);
        double qn = la_norm(qbar, D);
        if (qn == 0) continue;
        Shaper s = {Ka + h * T * D, Kp ? Kp + h * T * D : NULL, rope, qbar, qn * qn, T, D, row};
        if (z) {
            double root = sqrt((double)D);
            for (size_t t = 0; t < T; t++) shift_row(&s, t, cfg->hh_spread * z[h * T + t] * root / s.qq);
        }
        if (u) {
            smallest_k(set, u + h * (T - ns), T - ns, cfg->hh_count, ns);
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

/* ---- one layer of the data ---- */

typedef struct LayerOut {
    double *K, *V, *Q, *O;      /* (H, T, D), (H, T, D) or NULL, (Hq, N, D) or NULL, (Hq, W, D) or NULL */
} LayerOut;

/* Layer g->l of the data, in the draw order (README "Draw order") restricted to that layer. rope: the table
 * (dims 0 without RoPE); mask: (D,) the layer's outlier mask, set here, or NULL when there is none. */
static void make_layer(Gen *r, const Config *cfg, const Rope *rope, const size_t *obs_pos, unsigned char *mask,
                       double *med, int med_known, LayerOut *o)
{
    size_t H = cfg->kv_heads, Hq = cfg->q_heads, T = cfg->dims.T, D = cfg->dims.D;
    size_t g = cfg->head_group, m = T * D, n = H * m;
    memset(o, 0, sizeof *o);

    /* 1. keys, 2. their head correlation, 3. keys.outliers */
    double *K = keys_content(r, cfg, H);
    if (cfg->head_rho > 0) {
        double *C = keys_content(r, cfg, H / g);
        mix_heads(K, C, H, g, m, cfg->head_rho);
        free(C);
    }
    for (size_t oi = 0; oi < cfg->n_outliers; oi++)
        for (size_t row = 0; row < H * T; row++) K[row * D + cfg->outliers[oi].channel] *= cfg->outliers[oi].scale;
    for (size_t oi = 0; mask && oi < cfg->n_outliers; oi++) mask[cfg->outliers[oi].channel] = 1;

    /* 4. values and their head correlation */
    if (cfg->dims.has_values) {
        o->V = normal(r, n);
        if (cfg->head_rho > 0) {
            double *C = normal(r, (H / g) * m);
            mix_heads(o->V, C, H, g, m, cfg->head_rho);
            free(C);
        }
    }

    /* 5. evaluation queries, 6. observation queries: they look at the keys so far, as attention reads them */
    if (cfg->dims.has_query || cfg->observe.n > 0) {
        double *Kq = K;
        if (cfg->has_rope) {
            Kq = xmalloc(n * sizeof *Kq);
            memcpy(Kq, K, n * sizeof *Kq);
            for (size_t h = 0; h < H; h++) rope_apply(rope, Kq + h * m, NULL, T, 0);
        }
        if (cfg->dims.has_query) o->Q = eval_queries(r, cfg, Kq);
        if (cfg->observe.n > 0)
            o->O = make_queries(r, &cfg->observe, Kq, T, D, Hq, Hq / H, cfg->observe.n, obs_pos);
        if (Kq != K) free(Kq);
        if (cfg->q_bias > 0) add_bias(r, cfg, o->Q, o->O);
    }

    /* 7. outlier channels per layer (pre-RoPE) */
    if (cfg->oc_count > 0) outlier_channels(r, cfg, K, mask, med, med_known);

    /* 8. RoPE, 9. spread, heavy hitters, recent tokens and sinks in attention space */
    double *Ka = K;
    if (cfg->has_rope) {
        Ka = xmalloc(n * sizeof *Ka);
        memcpy(Ka, K, n * sizeof *Ka);
        for (size_t h = 0; h < H; h++) rope_apply(rope, Ka + h * m, NULL, T, 0);
    }
    if (cfg->hh_spread > 0 || cfg->hh_count > 0 || cfg->recent_tokens > 0 || cfg->sink_tokens > 0)
        shape_attention(r, cfg, rope, o->Q, Ka, cfg->has_rope && cfg->rope_cache_pre ? K : NULL);

    /* the cache: pre-RoPE keys (attention rotates them) or the keys attention reads */
    if (cfg->has_rope && cfg->rope_cache_pre) {
        free(Ka);
        o->K = K;
    } else {
        if (Ka != K) free(K);
        o->K = Ka;
    }
}

static void layer_free(LayerOut *o)
{
    free(o->K);
    free(o->V);
    free(o->Q);
    free(o->O);
    memset(o, 0, sizeof *o);
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

/* data_check, one layer at a time: the first failure of each kind is kept, and data_check's message is the first
 * kind's (the same message as data_check of the whole tensors). */
typedef struct Check {
    int bad[4];          /* keys, values, evaluation queries, observation queries: a value not finite */
    size_t at[4];        /* its flat index in the whole tensor */
    double val[4];
    int score;           /* a (layer, KV head) whose scores could overflow */
    size_t sl, sh;
    double qmax, kmax;
} Check;

static const char *const check_names[4] = {"keys", "values", "evaluation queries", "observation queries"};

/* Layer l: K, V (H, T, D), Q (Hq, N, D), O (Hq, W, D), each NULL if absent. */
static void check_layer(Check *c, const Data *d, size_t l, const double *K, const double *V, const double *Q,
                        const double *O)
{
    size_t m = d->T * d->D, G = d->H ? d->Hq / d->H : 1, at;
    const double *x[4] = {K, V, Q, O};
    size_t n[4] = {d->H * m, d->H * m, d->Hq * d->N * d->D, d->Hq * d->W * d->D};
    for (int i = 0; i < 4; i++)
        if (!c->bad[i] && first_not_finite(x[i], n[i], &at) == 0) {
            c->bad[i] = 1;
            c->at[i] = l * n[i] + at;
            c->val[i] = x[i][at];
        }
    if (c->bad[0] || c->bad[1] || c->bad[2] || c->bad[3] || c->score) return;
    /* |q . k| <= |q| |k| (RoPE rotates keys, norms unchanged): refuse what could overflow a score */
    for (size_t h = 0; h < d->H; h++) {
        double kmax = max_row_norm(K + h * m, d->T, d->D), qmax = 0.0;
        for (size_t g = 0; g < G; g++) {
            size_t hq = h * G + g;
            double a = Q ? max_row_norm(Q + hq * d->N * d->D, d->N, d->D) : 0.0;
            double o = O ? max_row_norm(O + hq * d->W * d->D, d->W, d->D) : 0.0;
            if (a > qmax) qmax = a;
            if (o > qmax) qmax = o;
        }
        if (kmax > 0 && qmax > DATA_MAX_SCORE / kmax) {
            *c = (Check){.score = 1, .sl = l, .sh = h, .qmax = qmax, .kmax = kmax};
            return;
        }
    }
}

static int check_report(const Check *c)
{
    for (int i = 0; i < 4; i++)
        if (c->bad[i])
            return kvc_fail("data: the %s overflow a double; lower the scale or weight that made them so large "
                            "(got %g at flat index %zu)", check_names[i], c->val[i], c->at[i]);
    if (c->score)
        return kvc_fail("data: attention scores q.k could overflow a double in layer %zu, KV head %zu: the "
                        "largest |q| x |k| exceeds %g; lower data.keys.scale, the outlier scales or the "
                        "query weight (got |q| = %g, |k| = %g)", c->sl, c->sh, DATA_MAX_SCORE, c->qmax, c->kmax);
    return 0;
}

/* ---- the pipeline ---- */

/* What streamed data keeps to make a layer again (synth.h, data_layer). */
typedef struct DataStream {
    const Config *cfg;
    Gen gen;         /* the recorded block states */
    Rope rope;       /* the generator's table (dims 0 without RoPE) */
    double *med;     /* (L, H) outlier channels: median |K| of each head, kept from the first making */
} DataStream;

static int synth_threads = 1;

void synth_set_threads(int n) { synth_threads = n > 1 ? n : 1; }

int synth_stream_wanted(const Config *cfg)
{
    if (cfg->from_files || cfg->from_model) return 0;
    const char *env = getenv("KVC_DATA_STREAM");
    if (env && strcmp(env, "1") == 0) return 1;
    if (env && strcmp(env, "0") == 0) return 0;
    size_t n = cfg->layers * cfg->kv_heads * cfg->dims.T * cfg->dims.D;
    return cfg->layers > 1 && n > SYNTH_STREAM_NUMBERS;
}

static int make_data(Data *d, const Config *cfg, int stream)
{
    memset(d, 0, sizeof *d);
    DataStream *st = xcalloc(1, sizeof *st);
    st->cfg = cfg;
    Gen *g = &st->gen;
    if (rng_seed_decimal(&g->r, cfg->seed)) {
        free(st);
        return kvc_fail("seed: not a decimal integer (got \"%s\")", cfg->seed);
    }
    size_t L = cfg->layers, H = cfg->kv_heads, T = cfg->dims.T, D = cfg->dims.D, m = T * D;
    d->L = L;
    d->H = H;
    d->Hq = cfg->q_heads;
    d->T = T;
    d->D = D;
    d->N = cfg->dims.has_query ? cfg->query.n : 0;
    d->W = cfg->observe.n;
    if (d->W > 0) {
        d->obs_pos = xmalloc(d->W * sizeof *d->obs_pos);
        for (size_t j = 0; j < d->W; j++) d->obs_pos[j] = T - d->W + j;
    }
    st->med = xmalloc(L * H * sizeof *st->med);
    if (cfg->has_rope) rope_init(&st->rope, cfg->rope_base, cfg->rope_dims, cfg->rope_style == ROPE_INTERLEAVED, T, D);
    if (cfg->n_outliers > 0 || cfg->oc_count > 0) d->outlier_mask = xcalloc(L * D, 1);
    size_t nq = d->Hq * d->N * D, no = d->Hq * d->W * D, n = H * m;
    if (d->N) d->Q = xmalloc(L * nq * sizeof *d->Q);
    if (d->W) d->O = xmalloc(L * no * sizeof *d->O);
    if (!stream && L > 1) {   /* one layer: its arrays become the data's */
        d->K = xmalloc(L * n * sizeof *d->K);
        if (cfg->dims.has_values) d->V = xmalloc(L * n * sizeof *d->V);
    }
    /* the record pass makes layer 0 while it draws every block; then every other layer from the recorded states */
    g->L = L;
    g->record = 1;
    if (L > 1 && synth_threads > 1) g->pool = pool_create(synth_threads);   /* NULL (no thread): in turn */
    Check c = {0};
    for (size_t l = 0; l < L; l++) {
        LayerOut o;
        g->l = l;
        g->k = 0;
        make_layer(g, cfg, &st->rope, d->obs_pos, d->outlier_mask ? d->outlier_mask + l * D : NULL,
                   st->med + l * H, 0, &o);
        g->record = 0;
        check_layer(&c, d, l, o.K, o.V, o.Q, o.O);
        if (o.Q) memcpy(d->Q + l * nq, o.Q, nq * sizeof *o.Q);
        if (o.O) memcpy(d->O + l * no, o.O, no * sizeof *o.O);
        if (!stream && L == 1) {
            d->K = o.K;
            d->V = o.V;
            o.K = o.V = NULL;
        } else if (!stream) {
            memcpy(d->K + l * n, o.K, n * sizeof *o.K);
            if (o.V) memcpy(d->V + l * n, o.V, n * sizeof *o.V);
        }
        layer_free(&o);
    }
    if (cfg->has_rope && cfg->rope_cache_pre)   /* attention rotates the cached keys */
        rope_init(&d->rope, cfg->rope_base, cfg->rope_dims, cfg->rope_style == ROPE_INTERLEAVED, T, D);
    if (stream) {
        d->stream = st;
    } else {
        rope_free(&st->rope);
        pool_free(g->pool);
        free(g->states);
        free(st->med);
        free(st);
    }
    if (check_report(&c)) {
        data_free(d);
        return -1;
    }
    return 0;
}

int synth_data(Data *d, const Config *cfg)
{
    return make_data(d, cfg, 0);
}

int synth_data_stream(Data *d, const Config *cfg)
{
    return make_data(d, cfg, 1);
}

void data_layer(DataLayer *dl, const Data *d, size_t l)
{
    memset(dl, 0, sizeof *dl);
    size_t m = d->T * d->D;
    if (!d->stream) {
        dl->K = d->K + l * d->H * m;
        dl->V = d->V ? d->V + l * d->H * m : NULL;
        return;
    }
    DataStream *st = d->stream;
    Gen g = st->gen;
    g.l = l;
    g.k = 0;
    unsigned char *mask = d->outlier_mask ? xcalloc(d->D, 1) : NULL;
    LayerOut o;
    make_layer(&g, st->cfg, &st->rope, d->obs_pos, mask, st->med + l * d->H, 1, &o);
    free(mask);
    free(o.Q);
    free(o.O);
    dl->K = dl->ownK = o.K;
    dl->V = dl->ownV = o.V;
}

int data_has_values(const Data *d)
{
    return d->V != NULL || (d->stream && d->stream->cfg->dims.has_values);
}

void data_layer_free(DataLayer *dl)
{
    free(dl->ownK);
    free(dl->ownV);
    memset(dl, 0, sizeof *dl);
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
    if (d->stream) {
        rope_free(&d->stream->rope);
        pool_free(d->stream->gen.pool);
        free(d->stream->gen.states);
        free(d->stream->med);
        free(d->stream);
    }
    model_source_free(d->model);
    free(d->model);
    memset(d, 0, sizeof *d);
}
