/* kernels_avx512: the AVX-512 KernelSet (kernels.h): the AVX2 set (kernels_avx2.c) with the slots of the 4-bit
 * formats int4 and q4_0 replaced by AVX-512F/BW/VL kernels. This file alone is compiled with -mavx512f
 * -mavx512bw -mavx512vl (and the AVX2 flags); decode.c calls it only after cpuid and xgetbv say the CPU and OS
 * have them (the ZMM and opmask state). Its scalar twins are kernels_ref.c's, like the AVX2 kernels'.
 *
 * Why: with several query heads per KV head (GQA) the 4-bit kernels are bound by float work per cached row
 * (G x W products on each side), not by memory. 512-bit FMAs halve the instruction count of the products, and
 * the conversion of the codes, done once per row for all G heads, becomes 4 instructions per 32 values: one
 * zero extension of 16 bytes to 16 lanes, one shift, and two vpermps lookups in a 16-entry table of the code
 * values (the low 4 bits of each lane are the index: the low nibble directly, the high one after the shift).
 * The table holds n - 8, so no subtraction is needed; q4_0's values are then multiplied by the block's FP16
 * scale d (d (n - 8) is exact in float32: 11 x 4 significant bits).
 *
 * Column order: q4_0 natural (a block's low nibbles are its columns 0..15, the high ones 16..31). int4 in units
 * of 32 columns (16 bytes): positions 0..15 the low nibbles (columns 0, 2, .., 30), 16..31 the high ones
 * (1, 3, .., 31). int4 rows with W % 32 != 0 go to the AVX2 kernels, in the AVX2 order (col_order decides by W).
 *
 * Keys: tiles of 16 rows; query heads in groups of GC = 8, 4, 2, 1 (HEAD_GROUPS), each unit of codes converted
 * once for the group; rows in pairs (GC = 1: fours), each query vector loaded once for them; one float32
 * accumulator of 16 lanes per (row, head) (two when there would be fewer than 8 independent chains). The 16
 * rows' accumulators of a head are reduced together by a shuffle tree to one vector of 16 scores, times the
 * 16 token scales, one (masked) store.
 * Values: tiles of up to 32 tokens; the weights w = p x the token scale (int4) formed once per tile; columns in
 * groups whose GC x group accumulators (16 vectors) stay in registers over the tile's tokens; each unit converted
 * once per group of heads.
 * Numerics: float32 products and sums like the AVX2 kernels (different grouping of the same kind of sums); the
 * summation order depends only on W, n and G, never on the thread count.
 */
#include "decode/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX2__) &&                \
    defined(__FMA__) && defined(__F16C__)
#include "store/elem.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL _Pragma("GCC unroll 16")
#define INLINE static inline __attribute__((always_inline))

enum { PF_AHEAD = 2048, KT = 16, VT = 32 };   /* prefetch distance (bytes), key tile rows, value tile tokens */
enum { F_INT4 = 0, F_Q4_0 = 1 };              /* the formats of this file */

INLINE void prefetch_range(const uint8_t *p, size_t n)
{
#pragma GCC unroll 4
    for (size_t off = 0; off < n; off += 64) _mm_prefetch((const char *)(p + off), _MM_HINT_T0);
}

/* The table of code values n - 8, n = 0..15 (both formats). */
INLINE __m512 lut_centred(void)
{
    return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
}

INLINE size_t unit_bytes(const int F) { return F == F_INT4 ? 16 : sizeof(StoreBlockQ4_0); }

/* The 32 values of the unit at p in kernel order: x[0] positions 0..15 (low nibbles), x[1] 16..31 (high
 * nibbles); q4_0: times the block's scale (exact). */
INLINE void cvt32(const int F, const uint8_t *p, __m512 lut, __m512 *x)
{
    const uint8_t *c = F == F_INT4 ? p : p + 2;
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
    x[0] = _mm512_permutexvar_ps(b, lut);
    x[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
    if (F == F_Q4_0) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(elem_u16(p)));
        x[0] = _mm512_mul_ps(x[0], d);
        x[1] = _mm512_mul_ps(x[1], d);
    }
}

/* ---- scores ----------------------------------------------------------------------------------------------- */

/* Lane r of the result = the horizontal sum of v[r * st], r < 16: a tree of 128-bit, then 32-bit shuffles and
 * adds (pairs of vectors at each level), then one permutation to row order. */
INLINE __m512 tree16(const __m512 *v, size_t st)
{
    __m512 t[8], w[4], y[2];
    UNROLL for (int i = 0; i < 8; i++) {   /* chunks: row 2i (two halves), row 2i+1 (two halves) */
        __m512 a = v[(size_t)(2 * i) * st], b = v[(size_t)(2 * i + 1) * st];
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    UNROLL for (int j = 0; j < 4; j++)   /* chunk c: row 4j + c, 4 partial sums */
        w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xDD));
    UNROLL for (int k = 0; k < 2; k++)   /* chunk c: rows 8k + c (lanes 0, 1) and 8k + 4 + c (lanes 2, 3) */
        y[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0xEE));
    /* lane 4c + l: row c + 4l */
    __m512 f = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, f);
}

/* Rows t..t+nr (nr <= 16; s columns i..i+nr) for GC heads (qp: their queries, W floats each, kernel order). */
INLINE void key_tile(const int F, const int GC, float *s, size_t ls, const float *qp, const KRows *k, size_t t,
                     size_t i, size_t nr)
{
    const size_t W = k->W, nu = W / 32, rb = k->row_bytes, UB = unit_bytes(F);
    const int R = GC == 1 ? 4 : 2, A = GC * R >= 8 ? 1 : 2;
    const __m512 lut = lut_centred();
    __m512 buf[KT * 8];   /* buf[r * GC + g]: the accumulator of row r, head g */
    const uint8_t *base = k->codes + t * rb;
    prefetch_range(base + PF_AHEAD, nr * rb);
    for (size_t r0 = 0; r0 < KT; r0 += (size_t)R) {
        if (r0 >= nr) {
            UNROLL for (int m = 0; m < R * GC; m++) buf[r0 * (size_t)GC + (size_t)m] = _mm512_setzero_ps();
            continue;
        }
        const uint8_t *rp[4];
        UNROLL for (int r = 0; r < R; r++) rp[r] = base + (r0 + (size_t)r < nr ? r0 + (size_t)r : r0) * rb;
        __m512 a[16];
        UNROLL for (int m = 0; m < R * GC * A; m++) a[m] = _mm512_setzero_ps();
        for (size_t u = 0; u < nu; u++) {
            __m512 x[4][2];
            UNROLL for (int r = 0; r < R; r++) cvt32(F, rp[r] + u * UB, lut, x[r]);
            UNROLL for (int g = 0; g < GC; g++) {
                __m512 q0 = _mm512_loadu_ps(qp + (size_t)g * W + 32 * u);
                __m512 q1 = _mm512_loadu_ps(qp + (size_t)g * W + 32 * u + 16);
                __asm__("" : "+v"(q0), "+v"(q1));   /* one load for the R rows (not one per FMA) */
                UNROLL for (int r = 0; r < R; r++) {
                    const int m = (r * GC + g) * A;
                    a[m] = _mm512_fmadd_ps(q0, x[r][0], a[m]);
                    a[m + A - 1] = _mm512_fmadd_ps(q1, x[r][1], a[m + A - 1]);
                }
            }
        }
        UNROLL for (int m = 0; m < R * GC; m++)
            buf[r0 * (size_t)GC + (size_t)m] = A == 2 ? _mm512_add_ps(a[2 * m], a[2 * m + 1]) : a[m];
    }
    const __mmask16 mk = (__mmask16)(nr >= 16 ? 0xFFFFu : (1u << nr) - 1u);
    __m512 sc = _mm512_set1_ps(1.0f);
    if (k->rscale) sc = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, k->rscale + t));
    UNROLL for (int g = 0; g < GC; g++) {
        __m512 v = tree16(buf + g, (size_t)GC);
        if (k->rscale) v = _mm512_mul_ps(v, sc);
        _mm512_mask_storeu_ps(s + (size_t)g * ls + i, mk, v);
    }
}

INLINE void scores_gc(const int F, const int GC, float *s, size_t ls, const float *qp, const KRows *k, size_t t0,
                      size_t n)
{
    for (size_t i = 0; i < n; i += KT) key_tile(F, GC, s, ls, qp, k, t0 + i, i, n - i < KT ? n - i : KT);
}

/* The query heads of one KV head in groups of 8, 4, 2, 1 (largest first). */
#define HEAD_GROUPS(G, h, CALL)                                                                                  \
    for (size_t h = 0; h < (G);) {                                                                               \
        const size_t left_ = (G) - h;                                                                            \
        if (left_ >= 8) {                                                                                        \
            enum { GC = 8 };                                                                                     \
            CALL;                                                                                                \
            h += 8;                                                                                              \
        } else if (left_ >= 4) {                                                                                 \
            enum { GC = 4 };                                                                                     \
            CALL;                                                                                                \
            h += 4;                                                                                              \
        } else if (left_ >= 2) {                                                                                 \
            enum { GC = 2 };                                                                                     \
            CALL;                                                                                                \
            h += 2;                                                                                              \
        } else {                                                                                                 \
            enum { GC = 1 };                                                                                     \
            CALL;                                                                                                \
            h += 1;                                                                                              \
        }                                                                                                        \
    }

/* ---- values ----------------------------------------------------------------------------------------------- */

/* Units u..u+CU of the tile's nt rows for GC heads: acc[g*W + 32(u+c) + ..] += sum_i wb[g*VT + i] * value. */
INLINE void val_cols(const int F, const int GC, const int CU, float *acc, size_t W, const float *wb,
                     const uint8_t *row, size_t rb, size_t nt, size_t u)
{
    const size_t UB = unit_bytes(F);
    const __m512 lut = lut_centred();
    __m512 a[16];
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < 2 * CU; c++) a[g * 2 * CU + c] = _mm512_loadu_ps(acc + (size_t)g * W + 32 * u + 16 * (size_t)c);
    row += u * UB;
    for (size_t i = 0; i < nt; i++, row += rb) {
        __m512 x[4][2];
        UNROLL for (int c = 0; c < CU; c++) cvt32(F, row + (size_t)c * UB, lut, x[c]);
        UNROLL for (int g = 0; g < GC; g++) {
            const __m512 w = _mm512_set1_ps(wb[(size_t)g * VT + i]);
            UNROLL for (int c = 0; c < CU; c++) {
                a[g * 2 * CU + 2 * c] = _mm512_fmadd_ps(w, x[c][0], a[g * 2 * CU + 2 * c]);
                a[g * 2 * CU + 2 * c + 1] = _mm512_fmadd_ps(w, x[c][1], a[g * 2 * CU + 2 * c + 1]);
            }
        }
    }
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < 2 * CU; c++) _mm512_storeu_ps(acc + (size_t)g * W + 32 * u + 16 * (size_t)c, a[g * 2 * CU + c]);
}

/* GC heads (acc, p at the first): tiles of up to VT tokens; weights w = p times the token scale (int4). */
INLINE void val_heads(const int F, const int GC, float *acc, const float *p, size_t lp, const KRows *v, size_t t0,
                      size_t n)
{
    const size_t W = v->W, nu = W / 32, rb = v->row_bytes;
    const int CU = GC >= 8 ? 1 : GC == 4 ? 2 : 4;   /* units per column group: GC * 2 * CU <= 16 accumulators */
    float wb[8 * VT] __attribute__((aligned(64)));
    for (size_t i0 = 0; i0 < n; i0 += VT) {
        const size_t nt = n - i0 < VT ? n - i0 : VT, t = t0 + i0;
        const __mmask16 m0 = (__mmask16)(nt >= 16 ? 0xFFFFu : (1u << nt) - 1u);
        const __mmask16 m1 = (__mmask16)(nt >= 32 ? 0xFFFFu : nt > 16 ? (1u << (nt - 16)) - 1u : 0u);
        __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0;
        if (v->rscale) {
            s0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, v->rscale + t));
            s1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, v->rscale + t + 16));
        }
        UNROLL for (int g = 0; g < GC; g++) {
            const float *pg = p + (size_t)g * lp + i0;
            __m512 w0 = _mm512_maskz_loadu_ps(m0, pg), w1 = _mm512_maskz_loadu_ps(m1, pg + 16);
            if (v->rscale) w0 = _mm512_mul_ps(w0, s0), w1 = _mm512_mul_ps(w1, s1);
            _mm512_store_ps(wb + (size_t)g * VT, w0);
            _mm512_store_ps(wb + (size_t)g * VT + 16, w1);
        }
        const uint8_t *row = v->codes + t * rb;
        prefetch_range(row + (nt * rb > PF_AHEAD ? nt * rb : PF_AHEAD), nt * rb);
        size_t u = 0;
        for (; u + (size_t)CU <= nu; u += (size_t)CU) val_cols(F, GC, CU, acc, W, wb, row, rb, nt, u);
        for (; u < nu; u++) val_cols(F, GC, 1, acc, W, wb, row, rb, nt, u);
    }
}

/* ---- the slots -------------------------------------------------------------------------------------------- */

static const KernelSet *avx2_set(void) { return decode_kernels_avx2(); }

static void scores_int4(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                        float *scr)
{
    if (k->W % 32 != 0) {
        avx2_set()->scores[STORE_INT4](s, ls, qp, G, k, t0, n, scr);
        return;
    }
    const size_t W = k->W;
    HEAD_GROUPS(G, h, scores_gc(F_INT4, GC, s + h * ls, ls, qp + h * W, k, t0, n));
}

static void scores_q4_0(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                        float *scr)
{
    (void)scr;
    const size_t W = k->W;
    HEAD_GROUPS(G, h, scores_gc(F_Q4_0, GC, s + h * ls, ls, qp + h * W, k, t0, n));
}

static void vacc_int4(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                      float *scr)
{
    if (v->W % 32 != 0) {
        avx2_set()->vacc[STORE_INT4](acc, p, lp, G, v, t0, n, scr);
        return;
    }
    const size_t W = v->W;
    HEAD_GROUPS(G, h, val_heads(F_INT4, GC, acc + h * W, p + h * lp, lp, v, t0, n));
}

static void vacc_q4_0(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                      float *scr)
{
    (void)scr;
    const size_t W = v->W;
    HEAD_GROUPS(G, h, val_heads(F_Q4_0, GC, acc + h * W, p + h * lp, lp, v, t0, n));
}

/* int4 with W % 32 == 0: units of 32 (low nibbles, then high); everything else as the AVX2 set reads it. */
static void col_order_avx512(size_t *perm, StoreType t, size_t W)
{
    if (t != STORE_INT4 || W % 32 != 0) {
        avx2_set()->col_order(perm, t, W);
        return;
    }
    for (size_t p = 0; p < W; p++) {
        size_t base = p / 32 * 32, o = p % 32;
        perm[p] = base + (o < 16 ? 2 * o : 2 * (o - 16) + 1);
    }
}

static KernelSet kernels_avx512;

const KernelSet *decode_kernels_avx512(void)
{
    static int ready;
    if (!ready) {
        const KernelSet *a = avx2_set();
        if (!a) return NULL;
        kernels_avx512 = *a;
        kernels_avx512.name = "avx512";
        kernels_avx512.scores[STORE_INT4] = scores_int4;
        kernels_avx512.scores[STORE_Q4_0] = scores_q4_0;
        kernels_avx512.vacc[STORE_INT4] = vacc_int4;
        kernels_avx512.vacc[STORE_Q4_0] = vacc_q4_0;
        kernels_avx512.col_order = col_order_avx512;
        ready = 1;
    }
    return &kernels_avx512;
}

#else
/* Built without the AVX-512 flags (a non-x86 target): no AVX-512 kernels. */
const KernelSet *decode_kernels_avx512(void) { return NULL; }
#endif
