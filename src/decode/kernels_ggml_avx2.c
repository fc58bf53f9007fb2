/* kernels_ggml_avx2: the ggml block kernels (q4_1, q5_0, q5_1, iq4_nl) with AVX2 + FMA + F16C intrinsics
 * (see kernels_ggml.h). This file alone (with kernels_avx2.c and kernels_kivi_avx2.c) is compiled with
 * -mavx2 -mfma -mf16c; decode.c calls it only after cpuid and xgetbv say the CPU and OS have all three. Its
 * scalar twins are kernels_ref.c's; the helpers, the head-group driver and the value side are avx2_common.h's.
 *
 * A block of 32 expands to 4 vectors of 8 floats in natural column order (cvt_block): the 16 code bytes are
 * widened to 32-bit lanes (two vpmovzxbd), the low nibbles give elements 0..15 and the high nibbles 16..31;
 * q5_0 / q5_1 add bit e of qh, moved to bit 4 of element e's lane by a variable shift (vpsrlvd); iq4_nl looks
 * its nibbles up in the 16-entry code book with vpshufb on each lane's low byte. q4_1 / q5_1 give the values
 * n * d + m (one FMA: n * d is exact, so this is the stored value); q5_0 / iq4_nl give the codes (n - 16,
 * K[n]) and the block's FP16 scale d, which multiplies the block's partial dot product (keys) or the weight
 * (values).
 * Scores: 8 / GC rows at a time for GC = 4, 2, 1 query heads (each block converted once for the GC heads),
 * one float32 accumulator of 8 lanes per (row, head), the 8 vectors reduced together; rows past the last
 * full group of 8 / GC one by one. Rows are short (W * 5 / 8 to W * 3 / 4 bytes), so the 8 / GC rows of a
 * group lie in a few consecutive cache lines; a software prefetch runs PF_AHEAD bytes ahead.
 * Values: avx2_common.h's vacc_all with a block as the unit: one query head: tokens in pairs, the W
 * accumulators in L1 (load, 2 FMAs, store); GC = 2, 4, 8 heads (GQA): a tile of up to 32 tokens is converted
 * once to float32 values in a 16 KiB scratch, then column groups are accumulated in GC x (8 / GC) registers
 * (rows wider than 512 columns: head by head).
 * The summation order depends only on W, n and G, never on the thread count.
 */
#include "decode/kernels_ggml.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "decode/avx2_common.h"

/* codes times a block scale (q5_0, iq4_nl), else values (q4_1, q5_1) */
INLINE int scaled(StoreType t) { return t == STORE_Q5_0 || t == STORE_IQ4_NL; }

/* x[0..4) = the block at p in natural order (values, or codes with *d the block scale; see the top). */
INLINE void cvt_block(const StoreType T, const uint8_t *p, __m256 *x, __m256 *d)
{
    switch (T) {
    case STORE_Q4_1: {
        __m256 dd = f16_bcast(p), mm = f16_bcast(p + 2);
        __m256i b0 = _mm256_cvtepu8_epi32(load8(p + 4)), b1 = _mm256_cvtepu8_epi32(load8(p + 12));
        __m256i m = _mm256_set1_epi32(15);
        x[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, m)), dd, mm);   /* elements 0..7 */
        x[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, m)), dd, mm);   /* 8..15 */
        x[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), dd, mm);  /* 16..23 */
        x[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), dd, mm);  /* 24..31 */
        break;
    }
    case STORE_Q5_0:
    case STORE_Q5_1: {
        /* nibbles widened to 32-bit lanes (as q4_1); bit e of qh moved to bit 4 of element e's lane */
        const int m1 = T == STORE_Q5_1;
        const uint8_t *qh = p + (m1 ? 4 : 2), *qs = qh + 4;
        uint32_t h;
        memcpy(&h, qh, 4);
        const __m256i hv = _mm256_set1_epi32((int)h), m = _mm256_set1_epi32(15), b4 = _mm256_set1_epi32(16);
        __m256i b0 = _mm256_cvtepu8_epi32(load8(qs)), b1 = _mm256_cvtepu8_epi32(load8(qs + 8));
        __m256i n[4] = {_mm256_and_si256(b0, m), _mm256_and_si256(b1, m), _mm256_srli_epi32(b0, 4),
                        _mm256_srli_epi32(b1, 4)};
        /* element 8c + i: vector 0 shifts bit i left to 4 or right (i > 4); vectors 1..3 right by 8c + i - 4 */
        const __m256i l0 = _mm256_setr_epi32(4, 3, 2, 1, 0, 0, 0, 0), r0 = _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3);
        n[0] = _mm256_or_si256(n[0], _mm256_and_si256(_mm256_srlv_epi32(_mm256_sllv_epi32(hv, l0), r0), b4));
        UNROLL for (int c = 1; c < 4; c++) {
            const __m256i rc = _mm256_add_epi32(_mm256_setr_epi32(4, 5, 6, 7, 8, 9, 10, 11), _mm256_set1_epi32(8 * c - 8));
            n[c] = _mm256_or_si256(n[c], _mm256_and_si256(_mm256_srlv_epi32(hv, rc), b4));
        }
        if (m1) {
            __m256 dd = f16_bcast(p), mm = f16_bcast(p + 2);
            UNROLL for (int c = 0; c < 4; c++) x[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(n[c]), dd, mm);
        } else {
            *d = f16_bcast(p);
            UNROLL for (int c = 0; c < 4; c++) x[c] = _mm256_cvtepi32_ps(_mm256_sub_epi32(n[c], b4));
        }
        break;
    }
    default: {   /* STORE_IQ4_NL: K[n] by vpshufb on the low byte of each 32-bit lane, then sign-extended */
        const __m256i tbl =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)store_iq4nl_values));
        const __m256i m = _mm256_set1_epi32(15);
        *d = f16_bcast(p);
        __m256i b0 = _mm256_cvtepu8_epi32(load8(p + 2)), b1 = _mm256_cvtepu8_epi32(load8(p + 10));
        __m256i n[4] = {_mm256_and_si256(b0, m), _mm256_and_si256(b1, m), _mm256_srli_epi32(b0, 4),
                        _mm256_srli_epi32(b1, 4)};
        UNROLL for (int c = 0; c < 4; c++)
            x[c] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(_mm256_shuffle_epi8(tbl, n[c]), 24), 24));
        break;
    }
    }
}

/* ---- scores ---------------------------------------------------------------------------------------------- */

/* acc[r*GC + g] = 8 partial sums of row r's dot product with head g's query, r < R (rows rb bytes apart). */
INLINE void dots(const StoreType T, const int GC, const int R, __m256 *acc, const float *qp, size_t W,
                 const uint8_t *base, size_t rb)
{
    const size_t nb = W / STORE_QK, BB = elem_block_bytes(T);
    UNROLL for (int m = 0; m < R * GC; m++) acc[m] = _mm256_setzero_ps();
    for (size_t u = 0; u < nb; u++) {
        const float *qu = qp + u * STORE_QK;
        UNROLL for (int r = 0; r < R; r++) {
            __m256 x[4], d = _mm256_setzero_ps();
            cvt_block(T, base + (size_t)r * rb + u * BB, x, &d);
            UNROLL for (int g = 0; g < GC; g++) {
                const float *q = qu + (size_t)g * W;
                __m256 *a = &acc[r * GC + g];
                if (scaled(T)) {
                    __m256 part = _mm256_mul_ps(_mm256_loadu_ps(q), x[0]);
                    UNROLL for (int c = 1; c < 4; c++) part = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), x[c], part);
                    *a = _mm256_fmadd_ps(d, part, *a);
                } else {
                    UNROLL for (int c = 0; c < 4; c++) *a = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), x[c], *a);
                }
            }
        }
    }
}

/* GC heads (qp at the first): groups of 8 / GC rows, then the last rows one by one. */
INLINE void scores_gc(const StoreType T, const int GC, float *s, size_t ls, const float *qp, const KRows *k,
                      size_t t0, size_t n)
{
    const int R = 8 / GC;
    const size_t W = k->W, rb = k->row_bytes;
    size_t i = 0;
    for (; i + (size_t)R <= n; i += (size_t)R) {
        const uint8_t *base = k->codes + (t0 + i) * rb;
        prefetch_range(base + PF_AHEAD, (size_t)R * rb);
        __m256 acc[8];
        float out[8];
        dots(T, GC, R, acc, qp, W, base, rb);
        reduce8(acc, out);
        UNROLL for (int r = 0; r < R; r++)
            UNROLL for (int g = 0; g < GC; g++) s[(size_t)g * ls + i + (size_t)r] = out[r * GC + g];
    }
    for (; i < n; i++) {
        __m256 acc[4];
        dots(T, GC, 1, acc, qp, W, k->codes + (t0 + i) * rb, rb);
        UNROLL for (int g = 0; g < GC; g++) s[(size_t)g * ls + i] = hsum(acc[g]);
    }
}

/* Heads in groups of 4, 2, 1 (each block converted once per group). */
INLINE void scores_all(const StoreType T, float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0,
                       size_t n)
{
    const size_t W = k->W;
    HEAD_GROUPS(G, h, GC <= 4, scores_gc(T, GC, s + h * ls, ls, qp + h * W, k, t0, n));
}

/* The value side (avx2_common.h's vacc_all): a block is one unit of 32 values. */
INLINE Unit block_unit(StoreType t) { return (Unit){t, STORE_QK, elem_block_bytes(t), 4, scaled(t), cvt_block}; }

#define DEFINE_GGML(NAME, TYPE)                                                                                 \
    void decode_ggml_scores_##NAME##_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k,      \
                                          size_t t0, size_t n, float *scr)                                      \
    {                                                                                                           \
        (void)scr;                                                                                              \
        scores_all(TYPE, s, ls, qp, G, k, t0, n);                                                               \
    }                                                                                                           \
    static void convert_##NAME(float *scr, size_t ld, const KRows *v, size_t t, size_t nt)                      \
    {                                                                                                           \
        tile_convert(block_unit(TYPE), scr, ld, v, t, nt);                                                      \
    }                                                                                                           \
    void decode_ggml_vacc_##NAME##_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v,       \
                                        size_t t0, size_t n, float *scr)                                        \
    {                                                                                                           \
        (void)scr;                                                                                              \
        vacc_all(block_unit(TYPE), convert_##NAME, acc, p, lp, G, v, t0, n);                                    \
    }

DEFINE_GGML(q4_1, STORE_Q4_1)
DEFINE_GGML(q5_0, STORE_Q5_0)
DEFINE_GGML(q5_1, STORE_Q5_1)
DEFINE_GGML(iq4_nl, STORE_IQ4_NL)

#else
/* Built without -mavx2 -mfma -mf16c (a non-x86 target): kernels_avx2.c registers none of these. */
typedef int kernels_ggml_avx2_empty;
#endif
