/* llama: the float32 forward pass (see llama.h). One function, forward(), runs n tokens at positions
 * pos0..pos0+n-1 layer by layer: the prefill calls it with no context rows, the continuation with the
 * caller's rows. Projections through cblas_sgemm on all n tokens; attention per query head in tiles of query
 * rows: the scores against the call's own rows by cblas_sgemm, against the context rows by fixed-order loops.
 * Dimensions as in llama.h (I is FF here: cblas.h defines I as complex.h does); ld* are row strides in floats. */
#include "model/llama.h"

#include "base/util.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TILE 128 /* query rows per attention tile */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 64-byte aligned scratch, so that OpenBLAS sees the same alignment on every call. */
static float *falloc(size_t n)
{
    void *p = NULL;
    size_t bytes;
    if (size_mul(n ? n : 1, sizeof(float), &bytes) < 0 || posix_memalign(&p, 64, bytes) != 0) {
        xalloc_context("the model's buffers");
        xalloc_die(n > SIZE_MAX / sizeof(float) ? SIZE_MAX : n * sizeof(float));   /* exit 1, as xmalloc */
    }
    return p;
}

/* C (M, N) = alpha * A (M, K) @ op(B) + beta * C; op(B) = B^T with B (N, K) when bt, else B (K, N). */
static void mm(LlamaStats *st, int bt, size_t M, size_t N, size_t K, float alpha, const float *A, size_t lda,
               const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (M == 0 || N == 0) return;
    double t0 = st ? now() : 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                (int)lda, B, (int)ldb, beta, C, (int)ldc);
    if (st) {
        st->sgemm_seconds += now() - t0;
        st->sgemm_flops += 2.0 * (double)M * (double)N * (double)K;
    }
}

/* out rows (n, E) = RMSNorm(x rows) * w, as HF: w * (x * rsqrt(mean(x^2) + eps)), float32 but the mean's sum. */
static void rmsnorm(float *out, const float *x, const float *w, size_t n, size_t E, float eps)
{
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + i * E;
        float *oi = out + i * E;
        double ss = 0;
        for (size_t e = 0; e < E; e++) ss += (double)(xi[e] * xi[e]);
        float r = 1.0f / sqrtf((float)(ss / (double)E) + eps);
        for (size_t e = 0; e < E; e++) oi[e] = w[e] * (xi[e] * r);
    }
}

/* x (n rows of H heads of D at stride ld) rotated in place: HF's q * cos + rotate_half(q) * sin. */
static void rope(float *x, size_t n, size_t H, size_t D, size_t ld, const float *cs, const float *sn)
{
    size_t half = D / 2;
    for (size_t i = 0; i < n; i++)
        for (size_t h = 0; h < H; h++) {
            float *v = x + i * ld + h * D;
            const float *c = cs + i * half, *s = sn + i * half;
            for (size_t j = 0; j < half; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] - b * s[j];
                v[j + half] = b * c[j] + a * s[j];
            }
        }
}

/* a . b in float32, eight partial sums in a fixed order (the same bits wherever a and b lie). */
static float dot(const float *a, const float *b, size_t D)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= D; i += 8)
        for (size_t k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    for (size_t k = 0; i < D; i++, k++) acc[k] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* o (D) += p * v (D), element by element (the blocks of 8 only help the vectorizer). */
static void axpy(float *restrict o, float p, const float *restrict v, size_t D)
{
    size_t d = 0;
    for (; d + 8 <= D; d += 8)
        for (size_t k = 0; k < 8; k++) o[d + k] += p * v[d + k];
    for (; d < D; d++) o[d] += p * v[d];
}

/* Softmax of row s over its first w entries in place: exp(s - max) in float, their sum in double (four partial
 * sums in a fixed order), times its reciprocal in double, rounded to float. */
static void softmax(float *s, size_t w)
{
    float m[4] = {s[0], s[0], s[0], s[0]};
    size_t j = 0;
    for (; j + 4 <= w; j += 4)
        for (size_t k = 0; k < 4; k++) m[k] = s[j + k] > m[k] ? s[j + k] : m[k];
    for (; j < w; j++) m[0] = s[j] > m[0] ? s[j] : m[0];
    float mx = m[0] > m[1] ? m[0] : m[1], my = m[2] > m[3] ? m[2] : m[3];
    mx = mx > my ? mx : my;
    for (j = 0; j < w; j++) s[j] = expf(s[j] - mx);
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (j = 0; j + 4 <= w; j += 4) {
        a0 += s[j];
        a1 += s[j + 1];
        a2 += s[j + 2];
        a3 += s[j + 3];
    }
    for (; j < w; j++) a0 += s[j];
    double inv = 1.0 / ((a0 + a1) + (a2 + a3));
    for (j = 0; j < w; j++) s[j] = (float)(s[j] * inv);
}

/* One query head's attention for the call's n tokens.
 * out (n, D) at stride ldo (accumulated into: caller zeroes it); Q (n, D) at stride ldq; the call's own rows
 * Kb, Vb (n, D) at stride ldkv, query i seeing rows 0..i; context rows P (P->n rows, contiguous), seen by all.
 * S: scratch of TILE * (P->n + n) floats. */
static void attend(float *out, size_t ldo, const float *Q, size_t ldq, const float *Kb, const float *Vb, size_t ldkv,
                   size_t n, const LlamaRows *P, size_t D, float scale, float *S, LlamaStats *st)
{
    size_t np = P ? P->n : 0;
    for (size_t i0 = 0; i0 < n; i0 += TILE) {
        size_t ti = n - i0 < TILE ? n - i0 : TILE, i1 = i0 + ti, w = np + i1;
        const float *Qt = Q + i0 * ldq;
        for (size_t j = 0; j < np; j++) {
            const float *kj = P->K + j * D;
            for (size_t r = 0; r < ti; r++) S[r * w + j] = dot(Qt + r * ldq, kj, D) * scale;
        }
        mm(st, 1, ti, i1, D, scale, Qt, ldq, Kb, ldkv, 0.0f, S + np, w);
        for (size_t r = 0; r < ti; r++) {
            size_t vis = np + i0 + r + 1;
            softmax(S + r * w, vis);
            memset(S + r * w + vis, 0, (w - vis) * sizeof *S);
        }
        float *Ot = out + i0 * ldo;
        for (size_t j = 0; j < np; j++) {
            const float *vj = P->V + j * D;
            for (size_t r = 0; r < ti; r++) axpy(Ot + r * ldo, S[r * w + j], vj, D);
        }
        mm(st, 0, ti, D, i1, 1.0f, S + np, w, Vb, ldkv, 1.0f, Ot, ldo);
    }
}

static int check_tokens(const LlamaConfig *c, const int32_t *tok, size_t n, size_t pos0, const char *where)
{
    if (pos0 > c->max_pos || n > c->max_pos - pos0)
        return kvc_fail("%s: positions run to %zu but the model's max_position_embeddings is %zu (got %zu tokens "
                        "from position %zu)", where, pos0 + n, c->max_pos, n, pos0);
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || (size_t)tok[i] >= c->vocab)
            return kvc_fail("%s: token id at index %zu is outside the vocabulary 0..%zu (got %d)", where, i,
                            c->vocab - 1, (int)tok[i]);
    return 0;
}

/* Runs tok[0..n) at positions pos0.. with context rows past (L*Hkv, or NULL: none). Captures per cap;
 * logits (n - lfrom, V) for rows lfrom..n-1 when non-NULL. Inputs are validated by the callers. */
static void forward(const LlamaModel *m, const int32_t *tok, size_t n, size_t pos0, const LlamaRows *past,
                    const LlamaCapture *cap, float *logits, size_t lfrom, LlamaStats *st)
{
    const LlamaConfig *c = &m->cfg;
    size_t E = c->hidden, D = c->head_dim, Hq = c->heads, Hkv = c->kv_heads, G = Hq / Hkv, FF = c->inter;
    size_t QD = Hq * D, KD = Hkv * D, half = D / 2, npmax = 0;
    double t0 = now();
    if (past)
        for (size_t k = 0; k < c->layers * Hkv; k++) npmax = past[k].n > npmax ? past[k].n : npmax;
    float *x = falloc(n * E), *h = falloc(n * E), *t = falloc(n * E), *q = falloc(n * QD), *o = falloc(n * QD);
    float *kb = falloc(n * KD), *vb = falloc(n * KD), *g = falloc(n * FF), *u = falloc(n * FF);
    float *S = falloc(TILE * (npmax + n)), *cs = falloc(n * half), *sn = falloc(n * half);
    float scale = (float)(1.0 / sqrt((double)D));

    for (size_t i = 0; i < n; i++) {
        float p = (float)(pos0 + i);
        for (size_t j = 0; j < half; j++) {
            float a = m->inv_freq[j] * p; /* float32, as HF's inv_freq @ position_ids */
            cs[i * half + j] = (float)cos((double)a);
            sn[i * half + j] = (float)sin((double)a);
        }
        memcpy(x + i * E, m->embed + (size_t)tok[i] * E, E * sizeof *x);
    }
    for (size_t l = 0; l < c->layers; l++) {
        const LlamaLayer *ly = &m->layer[l];
        rmsnorm(h, x, ly->attn_norm, n, E, c->rms_eps);
        mm(st, 1, n, QD, E, 1.0f, h, E, ly->wq, E, 0.0f, q, QD);
        mm(st, 1, n, KD, E, 1.0f, h, E, ly->wk, E, 0.0f, kb, KD);
        mm(st, 1, n, KD, E, 1.0f, h, E, ly->wv, E, 0.0f, vb, KD);
        rope(q, n, Hq, D, QD, cs, sn);
        rope(kb, n, Hkv, D, KD, cs, sn);
        if (cap)
            for (size_t i = 0; i < n; i++) {
                for (size_t hh = 0; hh < Hkv; hh++) {
                    size_t at = ((l * Hkv + hh) * n + i) * D;
                    if (cap->K) memcpy(cap->K + at, kb + i * KD + hh * D, D * sizeof(float));
                    if (cap->V) memcpy(cap->V + at, vb + i * KD + hh * D, D * sizeof(float));
                }
                if (cap->Q && i >= cap->q_first)
                    for (size_t hh = 0; hh < Hq; hh++)
                        memcpy(cap->Q + ((l * Hq + hh) * (n - cap->q_first) + i - cap->q_first) * D,
                               q + i * QD + hh * D, D * sizeof(float));
            }
        memset(o, 0, n * QD * sizeof *o);
        for (size_t hq = 0; hq < Hq; hq++) {
            size_t hk = hq / G;
            attend(o + hq * D, QD, q + hq * D, QD, kb + hk * D, vb + hk * D, KD, n, past ? &past[l * Hkv + hk] : NULL,
                   D, scale, S, st);
        }
        mm(st, 1, n, E, QD, 1.0f, o, QD, ly->wo, QD, 0.0f, t, E);
        for (size_t k = 0; k < n * E; k++) x[k] += t[k];
        rmsnorm(h, x, ly->mlp_norm, n, E, c->rms_eps);
        mm(st, 1, n, FF, E, 1.0f, h, E, ly->w_gate, E, 0.0f, g, FF);
        mm(st, 1, n, FF, E, 1.0f, h, E, ly->w_up, E, 0.0f, u, FF);
        for (size_t k = 0; k < n * FF; k++) g[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
        mm(st, 1, n, E, FF, 1.0f, g, FF, ly->w_down, FF, 0.0f, t, E);
        for (size_t k = 0; k < n * E; k++) x[k] += t[k];
    }
    if (logits) {
        rmsnorm(h, x + lfrom * E, m->norm, n - lfrom, E, c->rms_eps);
        mm(st, 1, n - lfrom, c->vocab, E, 1.0f, h, E, m->lm_head, E, 0.0f, logits, c->vocab);
    }
    free(x), free(h), free(t), free(q), free(o), free(kb), free(vb), free(g), free(u), free(S), free(cs), free(sn);
    if (st) {
        st->tokens += n;
        st->seconds += now() - t0;
    }
}

int llama_prefill(const LlamaModel *m, const int32_t *tokens, size_t C, const LlamaCapture *cap, float *logits,
                  int all_logits, LlamaStats *stats)
{
    if (C == 0) return kvc_fail("llama_prefill: the context needs at least one token (got 0)");
    if (check_tokens(&m->cfg, tokens, C, 0, "context") < 0) return -1;
    if (cap && cap->q_first > C)
        return kvc_fail("llama_prefill: queries captured from token %zu of a %zu-token context (got q_first %zu)",
                        cap->q_first, C, cap->q_first);
    forward(m, tokens, C, 0, NULL, cap, logits, all_logits ? 0 : C - 1, stats);
    return 0;
}

void llama_cache_full(LlamaRows *rows, const LlamaConfig *cfg, const float *K, const float *V, size_t C)
{
    size_t D = cfg->head_dim;
    for (size_t k = 0; k < cfg->layers * cfg->kv_heads; k++)
        rows[k] = (LlamaRows){C, K + k * C * D, V + k * C * D, NULL};
}

static int check_rows(const LlamaConfig *c, const LlamaCache *cache)
{
    size_t D = c->head_dim, C = cache->context_len;
    for (size_t l = 0; l < c->layers; l++)
        for (size_t h = 0; h < c->kv_heads; h++) {
            const LlamaRows *r = &cache->rows[l * c->kv_heads + h];
            if (r->n > C)
                return kvc_fail("context cache: layer %zu, KV head %zu holds more rows than the %zu-token context "
                                "(got %zu)", l, h, C, r->n);
            if (r->n && (!r->K || !r->V))
                return kvc_fail("context cache: layer %zu, KV head %zu: %zu rows without K or V data (got NULL)", l,
                                h, r->n);
            for (size_t i = 0; r->pos && i < r->n; i++)
                if (r->pos[i] >= C || (i && r->pos[i] <= r->pos[i - 1]))
                    return kvc_fail("context cache: layer %zu, KV head %zu: row positions must increase strictly "
                                    "below %zu (got %zu at row %zu)", l, h, C, r->pos[i], i);
            for (size_t i = 0; i < r->n * D; i++)
                if (!isfinite(r->K[i]) || !isfinite(r->V[i]))
                    return kvc_fail("context cache: layer %zu, KV head %zu: row %zu holds a value that is not finite "
                                    "(got %s %g)", l, h, i / D, isfinite(r->K[i]) ? "V" : "K",
                                    (double)(isfinite(r->K[i]) ? r->V[i] : r->K[i]));
        }
    return 0;
}

int llama_continue(const LlamaModel *m, const LlamaCache *cache, const int32_t *tokens, size_t N, float *logits,
                   const LlamaCapture *cap, LlamaStats *stats)
{
    if (N == 0) return kvc_fail("llama_continue: the continuation needs at least one token (got 0)");
    if (check_tokens(&m->cfg, tokens, N, cache->context_len, "continuation") < 0 || check_rows(&m->cfg, cache) < 0)
        return -1;
    if (cap && cap->q_first > N)
        return kvc_fail("llama_continue: queries captured from token %zu of a %zu-token continuation (got q_first "
                        "%zu)", cap->q_first, N, cap->q_first);
    forward(m, tokens, N, cache->context_len, cache->rows, cap, logits, 0, stats);
    return 0;
}

void llama_log_softmax(double *out, const float *logits, size_t V)
{
    double mx = logits[0], sum = 0;
    for (size_t j = 1; j < V; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (size_t j = 0; j < V; j++) sum += exp((double)logits[j] - mx);
    double lse = mx + log(sum);
    for (size_t j = 0; j < V; j++) out[j] = (double)logits[j] - lse;
}
