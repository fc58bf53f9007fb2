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

/* ---- the draws, a chunk of heads of one layer at a time ----
 *
 * Every draw of the data is a block of L x c numbers whose layer-l part is the c numbers at l x c (the blocks are
 * C order with the layer axis first). A layer's part is itself made of `nparts` equal parts, one per KV head, per
 * head group, per query head, or one shared part (the block's second axis, README "Draw order"). A Gen hands out
 * the parts a chunk of KV heads needs of each block in turn. The record pass (record = 1) runs the generator once
 * through every block, keeps the generator's state at the start of each piece of each layer's part (pieces never
 * straddle a part) and returns the first chunk's parts of layer 0; afterwards any parts of any layer's part of any
 * block are made from their states, in any order, without the others. The rng state is the whole state (no pending
 * normal), so this is exact. */
typedef struct GenBlock {
    size_t off;     /* its first state in Gen.states: (L, P) states, layer-major */
    size_t P;       /* pieces of a layer's part: nparts x per part */
} GenBlock;

typedef struct Gen {
    rng r;          /* record pass: the running generator */
    int record;
    size_t L, l;    /* layers; the layer made (0 in the record pass) */
    size_t k;       /* the next block */
    GenBlock *blocks;
    size_t nblocks, bcap;
    rng *states;
    size_t nstates, scap;
    Pool *pool;     /* replay: pieces on these threads (NULL: in turn) */
} Gen;

/* A part of at least GEN_PIECE_MIN draws is made in pieces, about GEN_PIECES to a layer's part, the state at each
 * piece's start recorded, so that a replay makes the pieces at once on threads. The pieces depend on the sizes
 * only: the numbers are the same whether made in one go, in pieces, in turn or at once. */
enum { GEN_PIECES = 8, GEN_PIECE_MIN = 65536 };

static size_t gen_per_part(size_t c, size_t nparts)
{
    return c >= GEN_PIECE_MIN ? (GEN_PIECES + nparts - 1) / nparts : 1;
}

/* The next block, with nparts parts of c / nparts draws per layer (a new block in the record pass). */
static const GenBlock *gen_block(Gen *g, size_t c, size_t nparts)
{
    if (g->record) {
        size_t P = nparts * gen_per_part(c, nparts);
        if (g->nblocks == g->bcap) {
            g->bcap = g->bcap ? 2 * g->bcap : 16;
            GenBlock *b = xmalloc(g->bcap * sizeof *b);
            if (g->nblocks) memcpy(b, g->blocks, g->nblocks * sizeof *b);
            free(g->blocks);
            g->blocks = b;
        }
        size_t need = g->nstates + g->L * P;
        if (need > g->scap) {
            size_t cap = g->scap ? 2 * g->scap : 256;
            while (cap < need) cap *= 2;
            rng *s = xmalloc(cap * sizeof *s);
            if (g->nstates) memcpy(s, g->states, g->nstates * sizeof *s);
            free(g->states);
            g->states = s;
            g->scap = cap;
        }
        g->blocks[g->nblocks++] = (GenBlock){g->nstates, P};
        g->nstates = need;
    }
    assert(g->k < g->nblocks);
    return &g->blocks[g->k++];
}

static void draw(rng *r, double *x, size_t n, int gauss)
{
    if (gauss) rng_normal_fill(r, x, n);
    else
        for (size_t i = 0; i < n; i++) x[i] = rng_next_double(r);
}

typedef struct Pieces {
    const rng *s;   /* the states of pieces p0.. */
    double *x;      /* the draws of piece p0 start here */
    size_t c, P, p0;
    int gauss;
} Pieces;

static void piece(void *arg, size_t i, int tid)
{
    (void)tid;
    const Pieces *w = arg;
    size_t p = w->p0 + i, a = w->c * p / w->P, b = w->c * (p + 1) / w->P, x0 = w->c * w->p0 / w->P;
    rng r = w->s[i];
    draw(&r, w->x + (a - x0), b - a, w->gauss);
}

/* Parts [p0, p0 + np) of layer g->l's part of the next block, c draws in nparts parts: np c / nparts numbers into
 * x. The record pass draws the whole block and keeps layer 0's parts. */
static void gen_fill(Gen *g, double *x, size_t c, size_t nparts, size_t p0, size_t np, int gauss)
{
    assert(c % nparts == 0 && p0 + np <= nparts);
    const GenBlock *bk = gen_block(g, c, nparts);
    size_t P = bk->P, sp = P / nparts, q0 = p0 * sp, nq = np * sp;
    rng *s = g->states + bk->off;
    if (!g->record) {
        Pieces w = {s + g->l * P + q0, x, c, P, q0, gauss};
        if (g->pool && nq > 1) pool_run(g->pool, piece, &w, nq);
        else
            for (size_t i = 0; i < nq; i++) piece(&w, i, 0);
        return;
    }
    double skip[1024];
    size_t x0 = c * q0 / P;
    for (size_t l = 0; l < g->L; l++)
        for (size_t p = 0; p < P; p++) {
            size_t a = c * p / P, b = c * (p + 1) / P;
            int keep = l == 0 && p >= q0 && p < q0 + nq;
            s[l * P + p] = g->r;
            for (size_t i = a; i < b;) {
                size_t n = keep ? b - a : (b - i < 1024 ? b - i : 1024);
                draw(&g->r, keep ? x + (a - x0) : skip, n, gauss);
                i += n;
            }
        }
}

/* The KV heads [h0, h0 + nh) of a layer, and the parts of a block they need. */
typedef struct Chunk {
    size_t h0, nh;
} Chunk;

typedef enum { PART_ONE, PART_HEAD, PART_GROUP, PART_QHEAD } PartKind;

static size_t part_count(const Config *cfg, PartKind kind)
{
    size_t H = cfg->kv_heads;
    return kind == PART_HEAD ? H : kind == PART_GROUP ? H / cfg->head_group : kind == PART_QHEAD ? cfg->q_heads : 1;
}

/* The parts [*p0, *p0 + *np) of a block of `kind` that chunk ch reads. */
static void chunk_parts(const Config *cfg, Chunk ch, PartKind kind, size_t *p0, size_t *np)
{
    size_t g = cfg->head_group, G = cfg->q_heads / cfg->kv_heads;
    switch (kind) {
    case PART_HEAD: *p0 = ch.h0; *np = ch.nh; return;
    case PART_GROUP: *p0 = ch.h0 / g; *np = (ch.h0 + ch.nh - 1) / g + 1 - *p0; return;
    case PART_QHEAD: *p0 = ch.h0 * G; *np = ch.nh * G; return;
    case PART_ONE: *p0 = 0; *np = 1; return;
    }
}

/* Chunk ch's parts of the next block of c draws laid out by `kind`: a new array of (its parts) x c / nparts. */
static double *gen_parts(Gen *g, const Config *cfg, Chunk ch, PartKind kind, size_t c, int gauss)
{
    size_t nparts = part_count(cfg, kind), p0, np;
    chunk_parts(cfg, ch, kind, &p0, &np);
    double *x = xmalloc(np * (c / nparts) * sizeof *x);
    gen_fill(g, x, c, nparts, p0, np, gauss);
    return x;
}

static double *normal(Gen *g, const Config *cfg, Chunk ch, PartKind kind, size_t c)
{
    return gen_parts(g, cfg, ch, kind, c, 1);
}

static double *uniform(Gen *g, const Config *cfg, Chunk ch, PartKind kind, size_t c)
{
    return gen_parts(g, cfg, ch, kind, c, 0);
}

/* Chunk ch's keys by the keys recipe, one array per part of `kind` it reads ((nh, T, D) for PART_HEAD, its groups
 * for PART_GROUP): normal N; lowrank (A @ B) * scale (+ noise * N). */
static double *keys_content(Gen *r, const Config *cfg, Chunk ch, PartKind kind)
{
    size_t B = part_count(cfg, kind), T = cfg->dims.T, D = cfg->dims.D, p0, np;
    chunk_parts(cfg, ch, kind, &p0, &np);
    size_t n = np * T * D;
    if (cfg->keys_gen == KEYS_NORMAL) return normal(r, cfg, ch, kind, B * T * D);
    size_t R = cfg->keys_rank;
    double *A = normal(r, cfg, ch, kind, B * T * R), *Bm = normal(r, cfg, ch, kind, B * R * D);
    double *K = xmalloc(n * sizeof *K);
    for (size_t b = 0; b < np; b++) la_matmul(K + b * T * D, A + b * T * R, Bm + b * R * D, T, R, D);
    for (size_t i = 0; i < n; i++) K[i] = K[i] * cfg->keys_scale;
    free(A);
    free(Bm);
    if (cfg->keys_noise > 0) {
        double *E = normal(r, cfg, ch, kind, B * T * D);
        for (size_t i = 0; i < n; i++) K[i] = K[i] + cfg->keys_noise * E[i];
        free(E);
    }
    return K;
}

/* x[h] = sqrt(1 - rho) x[h] + sqrt(rho) c[h / g] for the chunk's heads: x is (nh, m), c its groups' (., m). */
static void mix_heads(double *x, const double *c, Chunk ch, size_t g, size_t m, double rho)
{
    double a = sqrt(1 - rho), b = sqrt(rho);
    for (size_t i = 0; i < ch.nh; i++) {
        double *xp = x + i * m;
        const double *cp = c + ((ch.h0 + i) / g - ch.h0 / g) * m;
        for (size_t t = 0; t < m; t++) xp[t] = a * xp[t] + b * cp[t];
    }
}

/* Chunk ch's part of one layer's set of queries: the set has one head per part of `kind` (PART_HEAD: per = 1,
 * PART_QHEAD: per = G) and n queries per head; set head j reads KV head j / per, which Kq (nh, T, D) holds from
 * ch.h0 on. Returns (the chunk's set heads, n, D). pos NULL: evaluation queries (targets in 0..T-1); else query k
 * sits at pos[k] and sees tokens 0..pos[k]. */
static double *make_queries(Gen *r, const Config *cfg, const QuerySpec *qs, const double *Kq, Chunk ch,
                            PartKind kind, size_t per, size_t n, const size_t *pos)
{
    size_t T = cfg->dims.T, D = cfg->dims.D, nh = part_count(cfg, kind), j0, nj;
    chunk_parts(cfg, ch, kind, &j0, &nj);
    size_t nq = nj * n;   /* the chunk's queries; the set has nh * n */
    double *q = xmalloc(nq * D * sizeof *q);
    if (qs->gen == QUERY_LOOK_BACK) {
        size_t *tgt = xmalloc(nq * sizeof *tgt);
        if (qs->tokens) {
            for (size_t i = 0; i < nq; i++) tgt[i] = qs->tokens[i % n];
        } else {
            double *u = uniform(r, cfg, ch, kind, nh * n);
            for (size_t i = 0; i < nq; i++) {
                size_t range = pos ? pos[i % n] + 1 : T, t = (size_t)(u[i] * (double)range);
                tgt[i] = t < range ? t : range - 1;
            }
            free(u);
        }
        for (size_t j = 0; j < nj; j++)
            for (size_t k = 0; k < n; k++) {
                size_t i = j * n + k;
                const double *key = Kq + (((j0 + j) / per - ch.h0) * T + tgt[i]) * D;
                for (size_t c = 0; c < D; c++) q[i * D + c] = key[c] * qs->weight;
            }
        free(tgt);
    } else {
        double *a = normal(r, cfg, ch, kind, nh * n * T);
        if (pos)
            for (size_t i = 0; i < nq; i++)
                for (size_t t = pos[i % n] + 1; t < T; t++) a[i * T + t] = 0.0;
        for (size_t j = 0; j < nj; j++)
            la_matmul(q + j * n * D, a + j * n * T, Kq + ((j0 + j) / per - ch.h0) * T * D, n, T, D);
        for (size_t i = 0; i < nq; i++) {
            double root = sqrt((double)(pos ? pos[i % n] + 1 : T));
            for (size_t c = 0; c < D; c++) q[i * D + c] = q[i * D + c] / root * qs->weight;
        }
        free(a);
    }
    if (qs->noise > 0) {
        double *z = normal(r, cfg, ch, kind, nh * n * D);
        for (size_t i = 0; i < nq * D; i++) q[i] = q[i] + qs->noise * z[i];
        free(z);
    }
    return q;
}

/* The chunk's evaluation queries (nh G, N, D), with the GQA-group blend when query.head_correlation > 0. */
static double *eval_queries(Gen *r, const Config *cfg, const double *Kq, Chunk ch)
{
    const QuerySpec *qs = &cfg->query;
    size_t G = cfg->q_heads / cfg->kv_heads, N = qs->n, D = cfg->dims.D, nq = ch.nh * G;
    double rho = qs->head_correlation;
    if (rho == 0) return make_queries(r, cfg, qs, Kq, ch, PART_QHEAD, G, N, NULL);
    double *shared = make_queries(r, cfg, qs, Kq, ch, PART_HEAD, 1, N, NULL);
    double *own = rho < 1 ? make_queries(r, cfg, qs, Kq, ch, PART_QHEAD, G, N, NULL) : NULL;
    double *Q = xmalloc(nq * N * D * sizeof *Q);
    double a = sqrt(rho), b = sqrt(1 - rho);
    for (size_t hq = 0; hq < nq; hq++) {
        double *qp = Q + hq * N * D;
        const double *sp = shared + (hq / G) * N * D, *op = own ? own + hq * N * D : NULL;
        for (size_t i = 0; i < N * D; i++) qp[i] = op ? a * sp[i] + b * op[i] : sp[i];
    }
    free(shared);
    free(own);
    return Q;
}

/* query.bias: u = N(H, D) per layer; every evaluation and observation query of KV head h gets + bias * u[h]. */
static void add_bias(Gen *r, const Config *cfg, Chunk ch, double *Q, double *O)
{
    size_t H = cfg->kv_heads, G = cfg->q_heads / H, D = cfg->dims.D;
    double *u = normal(r, cfg, ch, PART_HEAD, H * D);
    double *sets[2] = {Q, O};
    size_t counts[2] = {Q ? cfg->query.n : 0, O ? cfg->observe.n : 0};
    for (int k = 0; k < 2; k++) {
        if (!sets[k]) continue;
        for (size_t hq = 0; hq < ch.nh * G; hq++)
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

/* keys.outlier_channels, one layer's chunk: `count` channels get a constant offset sign * m * median|K[h]| (K is
 * the chunk's (nh, T, D)). med (H,): the layer's medians, computed here for the chunk's heads and kept (known 0),
 * or known from an earlier making of the layer (1). */
static void outlier_channels(Gen *r, const Config *cfg, Chunk ch, double *K, unsigned char *mask, double *med,
                             int known)
{
    size_t H = cfg->kv_heads, T = cfg->dims.T, D = cfg->dims.D, n = cfg->oc_count;
    double *u = uniform(r, cfg, ch, PART_ONE, D), *mu = uniform(r, cfg, ch, PART_HEAD, H * n);
    double *su = uniform(r, cfg, ch, PART_HEAD, H * n);
    size_t *chan = xmalloc(n * sizeof *chan);
    smallest_k(chan, u, D, n, 0);
    for (size_t k = 0; k < n; k++) mask[chan[k]] = 1;
    for (size_t h = 0; h < ch.nh; h++) {
        double *Kh = K + h * T * D;
        if (!known) med[ch.h0 + h] = median_abs(Kh, T * D);
        for (size_t k = 0; k < n; k++) {
            size_t i = h * n + k;
            double m = cfg->oc_lo * pow(cfg->oc_hi / cfg->oc_lo, mu[i]);
            double off = (su[i] < 0.5 ? -1.0 : 1.0) * m * med[ch.h0 + h];
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

/* One layer's chunk: Ka (nh, T, D) the attention-space keys, Kp the pre-RoPE cache keys or NULL, Q (nh G, N, D). */
static void shape_attention(Gen *r, const Config *cfg, Chunk ch, const Rope *rope, const double *Q, double *Ka,
                            double *Kp)
{
    size_t H = cfg->kv_heads, G = cfg->q_heads / H, T = cfg->dims.T, D = cfg->dims.D;
    size_t N = Q ? cfg->query.n : 0, ns = cfg->sink_tokens;
    double *z = cfg->hh_spread > 0 ? normal(r, cfg, ch, PART_HEAD, H * T) : NULL;
    double *u = cfg->hh_count > 0 ? uniform(r, cfg, ch, PART_HEAD, H * (T - ns)) : NULL;
    double *qbar = xmalloc(D * sizeof *qbar), *row = xmalloc(D * sizeof *row);
    size_t *set = xmalloc(T * sizeof *set);
    for (size_t h = 0; h < ch.nh; h++) {
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

/* ---- one chunk of heads of one layer of the data ---- */

typedef struct LayerOut {
    double *K, *V, *Q, *O;      /* (nh, T, D), (nh, T, D) or NULL, (nh G, N, D) or NULL, (nh G, W, D) or NULL */
} LayerOut;

/* KV heads ch of layer g->l of the data (and the queries of their query heads), in the draw order (README "Draw
 * order") restricted to them. rope: the table (dims 0 without RoPE); mask: (D,) the layer's outlier mask, set
 * here, or NULL when there is none; med: the layer's (H,) outlier-channel medians. */
static void make_chunk(Gen *r, const Config *cfg, Chunk ch, const Rope *rope, const size_t *obs_pos,
                       unsigned char *mask, double *med, int med_known, LayerOut *o)
{
    size_t H = cfg->kv_heads, Hq = cfg->q_heads, T = cfg->dims.T, D = cfg->dims.D;
    size_t g = cfg->head_group, m = T * D, n = ch.nh * m;
    memset(o, 0, sizeof *o);

    /* 1. keys, 2. their head correlation, 3. keys.outliers */
    double *K = keys_content(r, cfg, ch, PART_HEAD);
    if (cfg->head_rho > 0) {
        double *C = keys_content(r, cfg, ch, PART_GROUP);
        mix_heads(K, C, ch, g, m, cfg->head_rho);
        free(C);
    }
    for (size_t oi = 0; oi < cfg->n_outliers; oi++)
        for (size_t row = 0; row < ch.nh * T; row++)
            K[row * D + cfg->outliers[oi].channel] *= cfg->outliers[oi].scale;
    for (size_t oi = 0; mask && oi < cfg->n_outliers; oi++) mask[cfg->outliers[oi].channel] = 1;

    /* 4. values and their head correlation */
    if (cfg->dims.has_values) {
        o->V = normal(r, cfg, ch, PART_HEAD, H * m);
        if (cfg->head_rho > 0) {
            double *C = normal(r, cfg, ch, PART_GROUP, (H / g) * m);
            mix_heads(o->V, C, ch, g, m, cfg->head_rho);
            free(C);
        }
    }

    /* 5. evaluation queries, 6. observation queries: they look at the keys so far, as attention reads them */
    if (cfg->dims.has_query || cfg->observe.n > 0) {
        double *Kq = K;
        if (cfg->has_rope) {
            Kq = xmalloc(n * sizeof *Kq);
            memcpy(Kq, K, n * sizeof *Kq);
            for (size_t h = 0; h < ch.nh; h++) rope_apply(rope, Kq + h * m, NULL, T, 0);
        }
        if (cfg->dims.has_query) o->Q = eval_queries(r, cfg, Kq, ch);
        if (cfg->observe.n > 0)
            o->O = make_queries(r, cfg, &cfg->observe, Kq, ch, PART_QHEAD, Hq / H, cfg->observe.n, obs_pos);
        if (Kq != K) free(Kq);
        if (cfg->q_bias > 0) add_bias(r, cfg, ch, o->Q, o->O);
    }

    /* 7. outlier channels per layer (pre-RoPE) */
    if (cfg->oc_count > 0) outlier_channels(r, cfg, ch, K, mask, med, med_known);

    /* 8. RoPE, 9. spread, heavy hitters, recent tokens and sinks in attention space */
    double *Ka = K;
    if (cfg->has_rope) {
        Ka = xmalloc(n * sizeof *Ka);
        memcpy(Ka, K, n * sizeof *Ka);
        for (size_t h = 0; h < ch.nh; h++) rope_apply(rope, Ka + h * m, NULL, T, 0);
    }
    if (cfg->hh_spread > 0 || cfg->hh_count > 0 || cfg->recent_tokens > 0 || cfg->sink_tokens > 0)
        shape_attention(r, cfg, ch, rope, o->Q, Ka, cfg->has_rope && cfg->rope_cache_pre ? K : NULL);

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

/* Chunk ch of layer l: K, V (nh, T, D), Q (nh G, N, D), O (nh G, W, D), each NULL if absent. */
static void check_chunk(Check *c, const Data *d, size_t l, Chunk ch, const double *K, const double *V,
                        const double *Q, const double *O)
{
    size_t m = d->T * d->D, G = d->H ? d->Hq / d->H : 1, at;
    const double *x[4] = {K, V, Q, O};
    size_t n[4] = {ch.nh * m, ch.nh * m, ch.nh * G * d->N * d->D, ch.nh * G * d->W * d->D};
    size_t per_layer[4] = {d->H * m, d->H * m, d->Hq * d->N * d->D, d->Hq * d->W * d->D};
    size_t first[4] = {ch.h0 * m, ch.h0 * m, ch.h0 * G * d->N * d->D, ch.h0 * G * d->W * d->D};
    for (int i = 0; i < 4; i++)
        if (!c->bad[i] && first_not_finite(x[i], n[i], &at) == 0) {
            c->bad[i] = 1;
            c->at[i] = l * per_layer[i] + first[i] + at;
            c->val[i] = x[i][at];
        }
    if (c->bad[0] || c->bad[1] || c->bad[2] || c->bad[3] || c->score) return;
    /* |q . k| <= |q| |k| (RoPE rotates keys, norms unchanged): refuse what could overflow a score */
    for (size_t h = 0; h < ch.nh; h++) {
        double kmax = max_row_norm(K + h * m, d->T, d->D), qmax = 0.0;
        for (size_t g = 0; g < G; g++) {
            size_t hq = h * G + g;
            double a = Q ? max_row_norm(Q + hq * d->N * d->D, d->N, d->D) : 0.0;
            double o = O ? max_row_norm(O + hq * d->W * d->D, d->W, d->D) : 0.0;
            if (a > qmax) qmax = a;
            if (o > qmax) qmax = o;
        }
        if (kmax > 0 && qmax > DATA_MAX_SCORE / kmax) {
            *c = (Check){.score = 1, .sl = l, .sh = ch.h0 + h, .qmax = qmax, .kmax = kmax};
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
    return (cfg->layers > 1 || cfg->kv_heads > 1) && n > SYNTH_STREAM_NUMBERS;
}

static void gen_state_free(DataStream *st)
{
    rope_free(&st->rope);
    pool_free(st->gen.pool);
    free(st->gen.blocks);
    free(st->gen.states);
    free(st->med);
    free(st);
}

/* The KV heads made at once when streamed data is made again (data_heads' callers choose theirs; this is the
 * first making's): as many as threads, so that memory holds the heads in flight only. */
static size_t stream_chunk(const Config *cfg)
{
    size_t H = cfg->kv_heads, n = (size_t)synth_threads;
    return n < H ? n : H;
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
    size_t G = d->Hq / H;
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
    /* the record pass makes the first chunk while it draws every block; then every other chunk from the recorded
     * states. Held whole, a layer is one chunk; streamed, a chunk is the heads in flight. */
    size_t step = stream ? stream_chunk(cfg) : H;
    g->L = L;
    g->record = 1;
    if (synth_threads > 1 && (L > 1 || stream)) g->pool = pool_create(synth_threads);   /* NULL: in turn */
    Check c = {0};
    for (size_t l = 0; l < L; l++)
        for (size_t h0 = 0; h0 < H; h0 += step) {
            Chunk ch = {h0, H - h0 < step ? H - h0 : step};
            LayerOut o;
            g->l = l;
            g->k = 0;
            make_chunk(g, cfg, ch, &st->rope, d->obs_pos, d->outlier_mask ? d->outlier_mask + l * D : NULL,
                       st->med + l * H, 0, &o);
            g->record = 0;
            check_chunk(&c, d, l, ch, o.K, o.V, o.Q, o.O);
            size_t qc = ch.nh * G * d->N * D, oc = ch.nh * G * d->W * D;
            if (o.Q) memcpy(d->Q + l * nq + h0 * G * d->N * D, o.Q, qc * sizeof *o.Q);
            if (o.O) memcpy(d->O + l * no + h0 * G * d->W * D, o.O, oc * sizeof *o.O);
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
        gen_state_free(st);
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

void data_heads(DataLayer *dl, const Data *d, size_t l, size_t h0, size_t nh)
{
    memset(dl, 0, sizeof *dl);
    size_t m = d->T * d->D;
    assert(nh >= 1 && h0 + nh <= d->H);
    if (!d->stream) {
        dl->K = d->K + (l * d->H + h0) * m;
        dl->V = d->V ? d->V + (l * d->H + h0) * m : NULL;
        return;
    }
    DataStream *st = d->stream;
    Gen g = st->gen;
    g.l = l;
    g.k = 0;
    unsigned char *mask = d->outlier_mask ? xcalloc(d->D, 1) : NULL;
    LayerOut o;
    make_chunk(&g, st->cfg, (Chunk){h0, nh}, &st->rope, d->obs_pos, mask, st->med + l * d->H, 1, &o);
    free(mask);
    free(o.Q);
    free(o.O);
    dl->K = dl->ownK = o.K;
    dl->V = dl->ownV = o.V;
}

void data_layer(DataLayer *dl, const Data *d, size_t l)
{
    data_heads(dl, d, l, 0, d->H);
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
    if (d->stream) gen_state_free(d->stream);
    model_source_free(d->model);
    free(d->model);
    memset(d, 0, sizeof *d);
}
