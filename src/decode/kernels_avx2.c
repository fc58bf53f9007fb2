/* kernels_avx2: the AVX2 + FMA + F16C KernelSet (kernels.h): the slots of f32 .. q4_0 here, q4_1 .. iq4_nl from
 * kernels_ggml_avx2.c and STORE_INTN from kernels_kivi_avx2.c, plus the format-independent pieces. This file
 * alone (with those two) is compiled with -mavx2 -mfma -mf16c; decode.c calls it only after cpuid and xgetbv
 * say the CPU and OS have all three. Its scalar twins are in kernels_ref.c; the helpers, the head-group driver
 * and the value side are avx2_common.h's.
 *
 * Every format is read in "units" (avx2_common.h's Unit): a few stored bytes that expand to 1..4 vectors of 8
 * floats (cvt_unit). f32/f16/bf16/e5m2/int8: 8 values; e4m3: 16 values; int4: 8 bytes = 16 values (low nibbles,
 * then high nibbles: kernel order, see col_order); int2: 8 bytes = 32 values; q8_0/q4_0: one 32-value block with
 * its FP16 scale. E4M3 is widened to FP16 by a shift (its value is that FP16 times 256; the caller folds the 256
 * into the query and the output); E5M2 is the top byte of an FP16.
 *
 * Memory is read in address order (measured: interleaving several rows' streams, or revisiting a tile
 * column group by column group, cost a third of the bandwidth on the development machine), with a
 * software prefetch PF_AHEAD bytes ahead.
 * Scores: one row after the other, GC query heads at a time (HEAD_GROUPS: 4, 2, 1); each unit is converted once
 * for all GC heads (the GQA saving); 8 / GC float32 accumulators of 8 lanes per head (4 for one head:
 * independent FMA chains, rows overlap), block formats keep a per-block partial sum scaled once by the block's
 * FP16 scale (one head; two or more heads read q8_0 / q4_0 blocks already scaled, d n, exact in float32, once
 * for the group, and sum them like an elementwise format); 8 / GC rows' vectors are reduced together (GC >= 2 without column tails: 8 rows, then one
 * reduce8v, offset, token scales and store per head, scores_rows8). With GC >= 2 each query vector is loaded
 * once for a row pair. Offsets moved out of the conversion (same float32 products and sums, regrouped): q4_0
 * keys of one head read the codes as 0..15 and subtract 8 x the block's query sum (per lane) from the block's
 * partial sum; int4 keys on the float path (GQA) subtract 8 x the query's sum from each dot product. int4 keys of fewer
 * than 4 heads with W = 64/128/256 are exact integer dot products (see "int4 keys in integer arithmetic").
 * Values: avx2_common.h's vacc_all with this file's units (one head: tokens in pairs, the W accumulators in L1;
 * GQA: register accumulators for codes of at most one byte per value, else the tile path; q4_0's tiles are
 * converted as fmsub(d, n, 8 d), the same floats as d (n - 8)).
 * The summation order depends only on W, n and G, never on the thread count.
 */
#include "decode/kernels.h"
#include "decode/kernels_ggml.h"
#include "decode/kernels_kivi.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "decode/avx2_common.h"

#include <math.h>

/* Q4_0 keys of one query head read without the -8 (codes 0..15); the caller subtracts 8 x the block's query sum
 * (a kernel-internal pseudo type: scores_all, one head) */
#define Q4_0_RAW ((StoreType)(STORE_NTYPES + 1))
/* int4 keys read without the -8 (GQA float path); the caller subtracts 8 x the query sum from each dot product */
#define INT4_RAW ((StoreType)(STORE_NTYPES + 2))
/* Q4_0 values already scaled, d (n - 8) as fmsub(d, n, 8 d) (the same float32 as d times n - 8: d n - 8 d is
 * exact before its one rounding), for the GQA value tiles (convert_q4_0): one multiply per block instead of 4
 * integer subtractions */
#define Q4_0_VAL ((StoreType)(STORE_NTYPES + 3))
/* Q8_0 read already scaled, d n (exact in float32: 11 x 8 significant bits), for the keys of two or more heads
 * (the scale multiplies each block once for all the heads, not each head's partial sum) */
#define Q8_0_VAL ((StoreType)(STORE_NTYPES + 4))
INLINE int is_block(StoreType t) { return t == STORE_Q8_0 || t == STORE_Q4_0 || t == Q4_0_RAW; }
INLINE int is_scaled(StoreType t) { return t == Q4_0_VAL || t == Q8_0_VAL; }   /* blocks read as d n */
INLINE size_t unit_of(StoreType t)
{
    return (t == STORE_INT4 || t == INT4_RAW || t == STORE_E4M3) ? 16
           : (t == STORE_INT2 || is_block(t) || is_scaled(t))    ? 32
                                                                 : 8;
}
INLINE int nv_of(StoreType t) { return (int)(unit_of(t) / 8); }
INLINE size_t ub_of(StoreType t)   /* bytes of one unit */
{
    if (t == Q4_0_RAW || t == Q4_0_VAL) return sizeof(StoreBlockQ4_0);
    if (t == Q8_0_VAL) return sizeof(StoreBlockQ8_0);
    switch (t) {
    case STORE_F32: return 32;
    case STORE_F16:
    case STORE_BF16:
    case STORE_E4M3: return 16;
    case STORE_Q8_0: return sizeof(StoreBlockQ8_0);
    case STORE_Q4_0: return sizeof(StoreBlockQ4_0);
    default: return 8;
    }
}

/* x[0..nv) = the unit at p in kernel order; *d = the block scale (block formats). */
INLINE void cvt_unit(const StoreType t, const uint8_t *p, __m256 *x, __m256 *d)
{
    if (t == INT4_RAW) {   /* codes 0..15, in int4's kernel order */
        __m256i b = _mm256_cvtepu8_epi32(load8(p));
        x[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15)));
        x[1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
        return;
    }
    if (t == Q4_0_VAL) {
        const __m256 dv = f16_bcast(p), d8 = _mm256_mul_ps(dv, _mm256_set1_ps(8.0f));
        __m256i b0 = _mm256_cvtepu8_epi32(load8(p + 2)), b1 = _mm256_cvtepu8_epi32(load8(p + 10));
        __m256i m = _mm256_set1_epi32(15);
        x[0] = _mm256_fmsub_ps(dv, _mm256_cvtepi32_ps(_mm256_and_si256(b0, m)), d8);
        x[1] = _mm256_fmsub_ps(dv, _mm256_cvtepi32_ps(_mm256_and_si256(b1, m)), d8);
        x[2] = _mm256_fmsub_ps(dv, _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), d8);
        x[3] = _mm256_fmsub_ps(dv, _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), d8);
        return;
    }
    if (t == Q8_0_VAL) {
        const __m256 dv = f16_bcast(p);
        UNROLL for (int c = 0; c < 4; c++) x[c] = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(p + 2 + 8 * c))));
        return;
    }
    if (t == Q4_0_RAW) {   /* codes 0..15, in Q4_0's order */
        *d = f16_bcast(p);
        __m256i b0 = _mm256_cvtepu8_epi32(load8(p + 2)), b1 = _mm256_cvtepu8_epi32(load8(p + 10));
        __m256i m = _mm256_set1_epi32(15);
        x[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, m));
        x[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, m));
        x[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
        x[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
        return;
    }
    switch (t) {
    case STORE_F32: x[0] = _mm256_loadu_ps((const float *)(const void *)p); break;
    case STORE_F16: x[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); break;
    case STORE_BF16:
        x[0] = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
        break;
    case STORE_E4M3: {
        /* 16 codes: sign-extended byte << 7 puts exponent and mantissa in FP16 position and the sign in bits
         * 14 and 15; clear bit 14 (0xBFFF as int16 is -16385) */
        __m256i w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p)), 7);
        w = _mm256_and_si256(w, _mm256_set1_epi16(-16385));
        x[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(w));
        x[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(w, 1));
        break;
    }
    case STORE_E5M2: x[0] = _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), load8(p))); break;
    case STORE_INT8: x[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(p))); break;
    case STORE_INT4: {
        __m256i b = _mm256_cvtepu8_epi32(load8(p)), m = _mm256_set1_epi32(15), o = _mm256_set1_epi32(8);
        x[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, m), o));
        x[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), o));
        break;
    }
    case STORE_INT2: {
        __m256i b = _mm256_cvtepu8_epi32(load8(p)), m = _mm256_set1_epi32(3), o = _mm256_set1_epi32(2);
        x[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, m), o));
        x[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(b, 2), m), o));
        x[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(b, 4), m), o));
        x[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 6), o));
        break;
    }
    case STORE_Q8_0: {
        *d = f16_bcast(p);
        UNROLL for (int c = 0; c < 4; c++) x[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(p + 2 + 8 * c)));
        break;
    }
    case STORE_Q4_0: {
        *d = f16_bcast(p);
        __m256i b0 = _mm256_cvtepu8_epi32(load8(p + 2)), b1 = _mm256_cvtepu8_epi32(load8(p + 10));
        __m256i m = _mm256_set1_epi32(15), o = _mm256_set1_epi32(8);
        x[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b0, m), o));   /* values 0..7 */
        x[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b1, m), o));   /* 8..15 */
        x[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b0, 4), o));  /* 16..23 */
        x[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b1, 4), o));  /* 24..31 */
        break;
    }
    default: break;
    }
}

/* A key column past the last full unit (int4 tails keep the -8). */
INLINE float key_tail(const StoreType t, const uint8_t *row, size_t j)
{
    return tail_elem(t == INT4_RAW ? STORE_INT4 : t == Q8_0_VAL ? STORE_Q8_0 : t == Q4_0_VAL ? STORE_Q4_0 : t, row, j);
}

/* The value side's description of a unit (avx2_common.h). */
INLINE Unit unit_desc(StoreType t) { return (Unit){t, unit_of(t), ub_of(t), nv_of(t), is_block(t), cvt_unit}; }

/* ---- scores ---------------------------------------------------------------------------------------------- */

/* K units u..u+K of R rows (R <= 2, rows rb bytes apart) into A accumulators per (row, head),
 * a[(r*GC + g)*A + k]: elementwise formats send vector v of the group to accumulator v % A; block formats
 * form each block's partial sum, scaled by its FP16 scale into accumulator (unit % A). Each query vector
 * is loaded once for the R rows. */
INLINE void dot_units(const StoreType T, const int GC, const int R, const int A, const int K, __m256 *a,
                      const float *qp, size_t W, const uint8_t *row, size_t rb, size_t u)
{
    const size_t UNIT = unit_of(T), UB = ub_of(T);
    const int NV = nv_of(T);
    UNROLL for (int k = 0; k < K; k++) {
        const float *qu = qp + (u + (size_t)k) * UNIT;
        __m256 x[2][4], d[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        UNROLL for (int r = 0; r < R; r++) cvt_unit(T, row + (size_t)r * rb + (u + (size_t)k) * UB, x[r], &d[r]);
        UNROLL for (int g = 0; g < GC; g++) {
            if (is_block(T)) {
                __m256 part[2];
                __m256 q0 = _mm256_loadu_ps(qu + (size_t)g * W);
                if (R > 1) __asm__("" : "+x"(q0));
                UNROLL for (int r = 0; r < R; r++) part[r] = _mm256_mul_ps(q0, x[r][0]);
                UNROLL for (int c = 1; c < NV; c++) {
                    __m256 qc = _mm256_loadu_ps(qu + (size_t)g * W + 8 * (size_t)c);
                    if (R > 1) __asm__("" : "+x"(qc));
                    UNROLL for (int r = 0; r < R; r++) part[r] = _mm256_fmadd_ps(qc, x[r][c], part[r]);
                }
                if (T == Q4_0_RAW)   /* 8 x the block's query, summed lane-wise, after the W query floats */
                    UNROLL for (int r = 0; r < R; r++)
                        part[r] = _mm256_sub_ps(part[r], _mm256_loadu_ps(qp + W + (u + (size_t)k) * 8));
                UNROLL for (int r = 0; r < R; r++) {
                    const int ai = (r * GC + g) * A + k % A;
                    a[ai] = _mm256_fmadd_ps(d[r], part[r], a[ai]);
                }
            } else {
                UNROLL for (int c = 0; c < NV; c++) {
                    __m256 qc = _mm256_loadu_ps(qu + (size_t)g * W + 8 * (size_t)c);
                    if (R > 1) __asm__("" : "+x"(qc));   /* one load for the R rows (not one per FMA) */
                    UNROLL for (int r = 0; r < R; r++) {
                        const int ai = (r * GC + g) * A + (k * NV + c) % A;
                        a[ai] = _mm256_fmadd_ps(qc, x[r][c], a[ai]);
                    }
                }
            }
        }
    }
}

/* The GC dot products of R rows (R <= 2) as vectors of 8 partial sums, out[r*GC + g], with 8 / (R*GC)
 * independent accumulators per (row, head), so the FMA units stay busy while memory is read in address
 * order (at most two rows' streams at once). Units that do not fill a round go into a second, small set. */
INLINE void row_dots(const StoreType T, const int GC, const int R, __m256 *out, const float *qp, size_t W,
                     const uint8_t *row, size_t rb, size_t nu)
{
    /* one row and head: 4 accumulators (8 cost more zeroing and summing than they gain; rows overlap anyway) */
    const int A = GC * R == 1 ? 4 : 8 / (GC * R) > 1 ? 8 / (GC * R) : 1, NV = nv_of(T);
    const int UP = is_block(T) ? A : (A / NV > 1 ? A / NV : 1);   /* units per full round over the accumulators */
    __m256 a[8];
    UNROLL for (int k = 0; k < R * GC * A; k++) a[k] = _mm256_setzero_ps();
    size_t u = 0;
    for (; u + (size_t)UP <= nu; u += (size_t)UP) dot_units(T, GC, R, A, UP, a, qp, W, row, rb, u);
    UNROLL for (int m = 0; m < R * GC; m++) {   /* pairwise, constant indices (keeps a[] in registers) */
        __m256 *am = a + m * A;
        if (A >= 8) UNROLL for (int k = 0; k < 4; k++) am[k] = _mm256_add_ps(am[k], am[k + 4]);
        if (A >= 4) UNROLL for (int k = 0; k < 2; k++) am[k] = _mm256_add_ps(am[k], am[k + 2]);
        if (A >= 2) am[0] = _mm256_add_ps(am[0], am[1]);
        out[m] = am[0];
    }
    if (u < nu) {
        __m256 b[8];
        UNROLL for (int m = 0; m < R * GC; m++) b[m] = _mm256_setzero_ps();
        for (; u < nu; u++) dot_units(T, GC, R, 1, 1, b, qp, W, row, rb, u);
        UNROLL for (int m = 0; m < R * GC; m++) out[m] = _mm256_add_ps(out[m], b[m]);
    }
}

/* Rows t..t+R (R <= 8 / GC; s columns i..i+R) for GC heads (qp at the first of them). Rows are read one
 * after the other, in address order; their partial-sum vectors are reduced together. */
INLINE void scores_tile(const StoreType T, const int GC, size_t R, float *s, size_t ls, const float *qp,
                        const KRows *k, size_t t, size_t i)
{
    const size_t W = k->W, UNIT = unit_of(T), nu = W / UNIT, rb = k->row_bytes, j0 = nu * UNIT;
    const uint8_t *base = k->codes + t * rb;
    prefetch_range(base + PF_AHEAD, R * rb);
    __m256 rs[16];
    if (GC >= 2) {   /* row pairs: each query vector serves two rows; an odd last row is paired with itself */
        for (size_t r0 = 0; r0 < R; r0 += 2)
            row_dots(T, GC, 2, rs + r0 * (size_t)GC, qp, W, base + r0 * rb, r0 + 1 < R ? rb : 0, nu);
    } else {
        for (size_t r0 = 0; r0 < R; r0++) row_dots(T, GC, 1, rs + r0 * (size_t)GC, qp, W, base + r0 * rb, rb, nu);
    }
    for (size_t m = R * (size_t)GC; m < 8; m++) rs[m] = _mm256_setzero_ps();
    if (GC == 1 && R == 8 && j0 == W) {   /* the common case: 8 consecutive scores, one store */
        __m256 v = reduce8v(rs);
        if (T == INT4_RAW) v = _mm256_sub_ps(v, _mm256_broadcast_ss(qp + W));   /* 8 x the query sum, after it */
        if (k->rscale) v = _mm256_mul_ps(v, h8(k->rscale + t));
        _mm256_storeu_ps(s + i, v);
        return;
    }
    float out[8];
    reduce(8, rs, out);
    for (size_t r = 0; r < R; r++) {
        const uint8_t *row = base + r * rb;
        float rsc = k->rscale ? _cvtsh_ss(k->rscale[t + r]) : 1.0f;
        UNROLL for (int g = 0; g < GC; g++) {
            float v = out[r * (size_t)GC + (size_t)g];
            if (T == INT4_RAW) v -= qp[(size_t)GC * W + (size_t)g];
            for (size_t j = j0; j < W; j++) v += qp[(size_t)g * W + j] * key_tail(T, row, j);
            s[(size_t)g * ls + i + r] = v * rsc;
        }
    }
}

/* Narrow rows (fewer vectors per row than accumulators per head, e.g. a rank-32 low-rank key): 8 / GC
 * consecutive rows interleaved, one accumulator per (row, head); the rows share a few cache lines. */
INLINE void scores_tile_narrow(const StoreType T, const int GC, float *s, size_t ls, const float *qp, const KRows *k,
                               size_t t, size_t i)
{
    const int R = 8 / GC, NV = nv_of(T);
    const size_t W = k->W, UNIT = unit_of(T), UB = ub_of(T), nu = W / UNIT, rb = k->row_bytes, j0 = nu * UNIT;
    const uint8_t *base = k->codes + t * rb;
    prefetch_range(base + PF_AHEAD, (size_t)R * rb);
    __m256 acc[8];
    UNROLL for (int m = 0; m < 8; m++) acc[m] = _mm256_setzero_ps();
    for (size_t u = 0; u < nu; u++) {
        const float *qu = qp + u * UNIT;
        UNROLL for (int r = 0; r < R; r++) {
            __m256 x[4], d = _mm256_setzero_ps();
            cvt_unit(T, base + (size_t)r * rb + u * UB, x, &d);
            UNROLL for (int g = 0; g < GC; g++) {
                __m256 part = _mm256_mul_ps(_mm256_loadu_ps(qu + (size_t)g * W), x[0]);
                UNROLL for (int c = 1; c < NV; c++)
                    part = _mm256_fmadd_ps(_mm256_loadu_ps(qu + (size_t)g * W + 8 * (size_t)c), x[c], part);
                acc[r * GC + g] = is_block(T) ? _mm256_fmadd_ps(d, part, acc[r * GC + g])
                                              : _mm256_add_ps(part, acc[r * GC + g]);
            }
        }
    }
    float out[8];
    reduce(8, acc, out);
    for (size_t r = 0; r < (size_t)R; r++) {
        const uint8_t *row = base + r * rb;
        float rsc = k->rscale ? _cvtsh_ss(k->rscale[t + r]) : 1.0f;
        UNROLL for (int g = 0; g < GC; g++) {
            float v = out[r * (size_t)GC + (size_t)g];
            for (size_t j = j0; j < W; j++) v += qp[(size_t)g * W + j] * key_tail(T, row, j);
            s[(size_t)g * ls + i + r] = v * rsc;
        }
    }
}

/* GC >= 2 heads, 8 rows t..t+8 without column tails: the rows in pairs (as scores_tile), then per head one
 * reduce8v of its 8 rows' vectors, the offset and the 8 token scales as vectors, one store. The same float32
 * operations on every score as scores_tile's scalar epilogue (each vector's horizontal sum has the same tree
 * wherever it sits in reduce8v), without the per-score scalar work. */
INLINE void scores_rows8(const StoreType T, const int GC, float *s, size_t ls, const float *qp, const KRows *k,
                         size_t t, size_t i)
{
    const size_t W = k->W, nu = W / unit_of(T), rb = k->row_bytes;
    const uint8_t *base = k->codes + t * rb;
    prefetch_range(base + PF_AHEAD, 8 * rb);
    __m256 rs[8 * 4];
    for (size_t r0 = 0; r0 < 8; r0 += 2) row_dots(T, GC, 2, rs + r0 * (size_t)GC, qp, W, base + r0 * rb, rb, nu);
    const __m256 sc = k->rscale ? h8(k->rscale + t) : _mm256_set1_ps(1.0f);
    UNROLL for (int g = 0; g < GC; g++) {
        __m256 v8[8];
        UNROLL for (int r = 0; r < 8; r++) v8[r] = rs[r * GC + g];
        __m256 v = reduce8v(v8);
        if (T == INT4_RAW) v = _mm256_sub_ps(v, _mm256_broadcast_ss(qp + (size_t)GC * W + (size_t)g));
        if (k->rscale) v = _mm256_mul_ps(v, sc);
        _mm256_storeu_ps(s + (size_t)g * ls + i, v);
    }
}

INLINE void scores_gc(const StoreType T, const int GC, float *s, size_t ls, const float *qp, const KRows *k,
                      size_t t0, size_t n)
{
    const size_t R = (size_t)(8 / GC), nvec = k->W / unit_of(T) * (size_t)nv_of(T);
    size_t i = 0;
    if (nvec < R)   /* narrow rows */
        for (; i + R <= n; i += R) scores_tile_narrow(T, GC, s, ls, qp, k, t0 + i, i);
    else if (GC >= 2 && k->W % unit_of(T) == 0)
        for (; i + 8 <= n; i += 8) scores_rows8(T, GC, s, ls, qp, k, t0 + i, i);
    for (; i < n; i += R) scores_tile(T, GC, n - i < R ? n - i : R, s, ls, qp, k, t0 + i, i);
}

/* q4_0 keys of one head (W % 32 == 0, 64 <= W <= 1024): codes without the -8 (4 subtractions fewer per block),
 * minus 8 x the block's query sum (one subtraction), lane-wise: part_b = sum_c q_c n_c - 8 sum_c q_c over the
 * block's 4 vectors. */
INLINE void scores_q4_0_one(float *s, size_t ls, const float *q, const KRows *k, size_t t0, size_t n)
{
    const size_t W = k->W;
    float qb[1024 + 256];
    memcpy(qb, q, W * sizeof *qb);
    for (size_t b = 0; b < W / 32; b++)
        for (int l = 0; l < 8; l++)
            qb[W + 8 * b + (size_t)l] =
                8.0f * ((q[32 * b + (size_t)l] + q[32 * b + 8 + (size_t)l]) + (q[32 * b + 16 + (size_t)l] + q[32 * b + 24 + (size_t)l]));
    scores_gc(Q4_0_RAW, 1, s, ls, qb, k, t0, n);
}

/* Heads in groups of 4, 2, 1 (each unit converted once per group; two or more heads read q8_0 / q4_0 scaled). */
INLINE void scores_all(const StoreType T, float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0,
                       size_t n)
{
    const size_t W = k->W;
    const int q4_0_one = T == STORE_Q4_0 && W % 32 == 0 && W >= 64 && W <= 1024;
    /* two or more heads: q8_0 / q4_0 blocks read scaled (d n, exact), once for the group */
    const StoreType TS = T == STORE_Q8_0 ? Q8_0_VAL : T == STORE_Q4_0 ? Q4_0_VAL : T;
    HEAD_GROUPS(G, h, GC <= 4,
                if (GC == 1 && q4_0_one) scores_q4_0_one(s + h * ls, ls, qp + h * W, k, t0, n);
                else if (GC == 1) scores_gc(T, GC, s + h * ls, ls, qp + h * W, k, t0, n);
                else scores_gc(TS, GC, s + h * ls, ls, qp + h * W, k, t0, n));
}


/* ---- int4 keys in integer arithmetic ------------------------------------------------------------------------ */

/* For int4 keys with W = 64, 128 or 256 the dot products are computed exactly in integers: the
 * prepared query of each head is rounded to integers Q_j = rint(q_j / sq), |Q_j| <= Qmax, sq = max|q| / Qmax,
 * and Q is split into three balanced base-128 digits (Q = 2^14 d0 + 2^7 d1 + d2, each in [-64, 64]); each digit
 * vector meets the stored nibbles n (0..15) in vpmaddubsw (u8 x s8 -> s16: each lane gains at most
 * 2 * 15 * 64 = 1920 per 32 codes, so a row of W <= 256 stays below 2^14), vpmaddwd sums to int32, and the
 * three are combined as 2^14 P0 + 2^7 P1 + P2.
 * sum_j Q_j (n_j - 8) = N - 8 sum_j Q_j is exact in int32 because Qmax * 15 * W < 2^31. The only rounding is
 * Q (relative 2^-20 of max|q| for W = 128) and the final float conversion, so the result agrees with the
 * float path to ~1e-6. Codes are read 32 bytes (64 values) at a time: low nibbles are the even columns, high
 * nibbles the odd ones, in the order of the bytes. */
enum { I4_MAXW = 256 };

typedef struct I4Query {
    int8_t d[3][I4_MAXW];   /* digit k of Q at code position: chunk c of 64 columns, even columns then odd */
    int32_t off;            /* 8 * sum_j Q_j */
    float sq;               /* scale: q_j ~= sq * Q_j */
} I4Query;

/* qp: one head's prepared query in the float kernels' order (col_order_avx2: units of 16, even then odd). */
static void i4_prepare(I4Query *iq, const float *qp, size_t W)
{
    double m = 0.0;
    for (size_t j = 0; j < W; j++) m = fmax(m, fabs((double)qp[j]));
    long qmax = (long)((2147483647.0 - 1.0) / (15.0 * (double)W));
    if (qmax > 1048575) qmax = 1048575;   /* three digits in [-64, 64] */
    double sq = m > 0 ? m / (double)qmax : 0.0;
    long sum = 0;
    for (size_t p = 0; p < W; p++) {
        size_t base = p / 16 * 16, o = p % 16, e = base + (o < 8 ? 2 * o : 2 * (o - 8) + 1);   /* natural column */
        long Q = sq > 0 ? lrint((double)qp[p] / sq) : 0;
        if (Q > qmax) Q = qmax;
        if (Q < -qmax) Q = -qmax;
        sum += Q;
        long d2 = Q - 128 * (long)floor(((double)Q + 64.0) / 128.0);
        long r1 = (Q - d2) / 128;
        long d1 = r1 - 128 * (long)floor(((double)r1 + 64.0) / 128.0);
        long d0 = (r1 - d1) / 128;
        size_t c = e / 64, w = e % 64, pos = c * 64 + (w % 2 ? 32 + w / 2 : w / 2);
        iq->d[0][pos] = (int8_t)d0;
        iq->d[1][pos] = (int8_t)d1;
        iq->d[2][pos] = (int8_t)d2;
    }
    iq->off = (int32_t)(8 * sum);
    iq->sq = (float)sq;
}

/* One row's int32 lane sums N (8 lanes) for GC heads: out[g]. NC chunks of 64 columns (a compile-time
 * constant: the codes stay in registers and the 3 x 2NC multiply-adds form independent chains). */
INLINE void i4_row(const int GC, const int NC, __m256i *out, const I4Query *iq, const uint8_t *row)
{
    const __m256i m = _mm256_set1_epi8(15);
    __m256i cv[8];
    UNROLL for (int c = 0; c < NC; c++) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(row + 32 * c));
        cv[2 * c] = _mm256_and_si256(b, m);
        cv[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), m);
    }
    UNROLL for (int g = 0; g < GC; g++) {
        __m256i P[3];
        UNROLL for (int k = 0; k < 3; k++) {
            const int8_t *dk = iq[g].d[k];
            __m256i t[8];
            UNROLL for (int v = 0; v < 2 * NC; v++)
                t[v] = _mm256_maddubs_epi16(cv[v], _mm256_loadu_si256((const __m256i *)(const void *)(dk + 32 * v)));
            if (2 * NC >= 8) UNROLL for (int v = 0; v < 4; v++) t[v] = _mm256_add_epi16(t[v], t[v + 4]);   /* pairwise */
            if (2 * NC >= 4) UNROLL for (int v = 0; v < 2; v++) t[v] = _mm256_add_epi16(t[v], t[v + 2]);
            t[0] = _mm256_add_epi16(t[0], t[1]);
            /* pairs to int32, times the digit's weight 2^14, 2^7, 1 (|t| <= 2^14: no overflow) */
            P[k] = _mm256_madd_epi16(t[0], _mm256_set1_epi16((short)(k == 0 ? 1 << 14 : k == 1 ? 1 << 7 : 1)));
        }
        out[g] = _mm256_add_epi32(_mm256_add_epi32(P[0], P[1]), P[2]);
    }
}

INLINE void i4_tree(const __m256i *v, int32_t *out)
{
    __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    __m256i r = _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256((__m256i *)(void *)out, r);
}

INLINE void i4_scores_gc(const int GC, const int NC, float *s, size_t ls, const I4Query *iq, const KRows *k, size_t t0,
                         size_t n)
{
    const size_t R = (size_t)(8 / GC), rb = k->row_bytes;
    for (size_t i = 0; i < n; i += R) {
        size_t nr = n - i < R ? n - i : R;
        const uint8_t *base = k->codes + (t0 + i) * rb;
        prefetch_range(base + PF_AHEAD, nr * rb);
        __m256i rs[8];
        for (size_t r = 0; r < nr; r++) i4_row(GC, NC, rs + r * (size_t)GC, iq, base + r * rb);
        for (size_t m = nr * (size_t)GC; m < 8; m++) rs[m] = _mm256_setzero_si256();
        int32_t N[8];
        i4_tree(rs, N);
        if (GC == 1 && nr == 8) {   /* 8 consecutive scores: one vector */
            __m256i nv = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(const void *)N), _mm256_set1_epi32(iq[0].off));
            __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(nv), _mm256_set1_ps(iq[0].sq));
            if (k->rscale)
                v = _mm256_mul_ps(v, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(k->rscale + t0 + i))));
            _mm256_storeu_ps(s + i, v);
            continue;
        }
        for (size_t r = 0; r < nr; r++) {
            float rsc = k->rscale ? _cvtsh_ss(k->rscale[t0 + i + r]) : 1.0f;
            for (int g = 0; g < GC; g++) {
                int32_t v = (int32_t)((uint32_t)N[r * (size_t)GC + (size_t)g] - (uint32_t)iq[g].off);
                s[(size_t)g * ls + i + r] = (float)v * iq[g].sq * rsc;
            }
        }
    }
}

#define I4_NC(GC, NC, ...)                                                                                        \
    ((NC) == 1 ? i4_scores_gc(GC, 1, __VA_ARGS__) : (NC) == 2 ? i4_scores_gc(GC, 2, __VA_ARGS__) : i4_scores_gc(GC, 4, __VA_ARGS__))

static void scores_int4_float(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n);

static void scores_int4(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n, float *scr)
{
    (void)scr;
    const size_t W = k->W, nc = W / 64;
    /* W = 64, 128 or 256, and fewer than 4 query heads per KV head (with 4 or more, vpmaddubsw's 3 digits
     * per head cost as much as the float FMAs: measured 63 vs 62 cycles per row at G = 4, 19 vs 29 at G = 1) */
    int finite = 1;   /* a query that is not finite takes the float path too (its NaN or inf, not a rounding) */
    for (size_t j = 0; j < G * W && finite; j++) finite = isfinite(qp[j]) != 0;
    if (W % 64 != 0 || (nc != 1 && nc != 2 && nc != 4) || G >= 4 || !finite) {
        scores_int4_float(s, ls, qp, G, k, t0, n);
        return;
    }
    I4Query iq[2];
    HEAD_GROUPS(G, h, GC <= 2, for (size_t x = 0; x < GC; x++) i4_prepare(&iq[x], qp + (h + x) * W, W);
                I4_NC(GC, nc, s + h * ls, ls, iq, k, t0, n));
}

/* The value kernel of a format (avx2_common.h's vacc_all with this file's unit) and its tile converter. */
#define DEFINE_VACC(NAME, TYPE)                                                                                  \
    static void convert_##NAME(float *scr, size_t ld, const KRows *v, size_t t, size_t nt)                      \
    {                                                                                                           \
        tile_convert(unit_desc(TYPE), scr, ld, v, t, nt);                                                       \
    }                                                                                                           \
    static void vacc_##NAME(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n, \
                            float *scr)                                                                         \
    {                                                                                                           \
        (void)scr;                                                                                              \
        vacc_all(unit_desc(TYPE), convert_##NAME, acc, p, lp, G, v, t0, n);                                     \
    }
/* Both kernels of a format. */
#define DEFINE_FORMAT(NAME, TYPE)                                                                                \
    static void scores_##NAME(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0,       \
                              size_t n, float *scr)                                                             \
    {                                                                                                           \
        (void)scr;                                                                                              \
        scores_all(TYPE, s, ls, qp, G, k, t0, n);                                                               \
    }                                                                                                           \
    DEFINE_VACC(NAME, TYPE)

DEFINE_FORMAT(f32, STORE_F32)
DEFINE_FORMAT(f16, STORE_F16)
DEFINE_FORMAT(bf16, STORE_BF16)
DEFINE_FORMAT(e4m3, STORE_E4M3)
DEFINE_FORMAT(e5m2, STORE_E5M2)
DEFINE_FORMAT(int8, STORE_INT8)
/* GC heads of int4 keys with the codes read as 0..15 (2 subtractions fewer per 16 values, shared by the heads):
 * qb = the GC queries, then 8 x each one's sum over the full units (in double, rounded once), which every dot
 * product subtracts before the token's scale. */
static void int4_raw_group(const int GC, float *s, size_t ls, const float *qp, const KRows *k, size_t t0, size_t n)
{
    const size_t W = k->W, j0 = W / 16 * 16;
    float qb[4 * 1024 + 4];
    memcpy(qb, qp, (size_t)GC * W * sizeof *qb);
    for (int g = 0; g < GC; g++) {
        double sum = 0.0;
        for (size_t j = 0; j < j0; j++) sum += (double)qp[(size_t)g * W + j];
        qb[(size_t)GC * W + (size_t)g] = (float)(8.0 * sum);
    }
    if (GC == 4) scores_gc(INT4_RAW, 4, s, ls, qb, k, t0, n);
    else if (GC == 2) scores_gc(INT4_RAW, 2, s, ls, qb, k, t0, n);
    else scores_gc(INT4_RAW, 1, s, ls, qb, k, t0, n);
}

static void scores_int4_float(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n)
{
    const size_t W = k->W;
    if (W < 64 || W > 1024) {   /* narrow rows (interleaved tiles) and very wide ones: the codes minus 8 */
        scores_all(STORE_INT4, s, ls, qp, G, k, t0, n);
        return;
    }
    HEAD_GROUPS(G, h, GC <= 4, int4_raw_group(GC, s + h * ls, ls, qp + h * W, k, t0, n));
}
DEFINE_VACC(int4, STORE_INT4)
DEFINE_FORMAT(int2, STORE_INT2)
DEFINE_FORMAT(q8_0, STORE_Q8_0)
static void scores_q4_0(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n, float *scr)
{
    (void)scr;
    scores_all(STORE_Q4_0, s, ls, qp, G, k, t0, n);
}
static void convert_q4_0(float *scr, size_t ld, const KRows *v, size_t t, size_t nt)
{
    tile_convert((Unit){Q4_0_VAL, 32, sizeof(StoreBlockQ4_0), 4, 0, cvt_unit}, scr, ld, v, t, nt);
}
static void vacc_q4_0(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n, float *scr)
{
    (void)scr;
    vacc_all(unit_desc(STORE_Q4_0), convert_q4_0, acc, p, lp, G, v, t0, n);
}

/* int4: in each full unit of 16, positions 0..7 read the even columns, 8..15 the odd ones; int2: position
 * 8k + i of a unit of 32 reads column 4i + k. Columns past the last full unit keep their place. */
static void col_order_avx2(size_t *perm, StoreType t, size_t W)
{
    size_t U = t == STORE_INT4 ? 16 : t == STORE_INT2 ? 32 : 1, full = W / U * U;
    for (size_t p = 0; p < W; p++) {
        size_t base = p / U * U, o = p % U;
        if (p >= full || U == 1) perm[p] = p;
        else if (t == STORE_INT4) perm[p] = base + (o < 8 ? 2 * o : 2 * (o - 8) + 1);
        else perm[p] = base + 4 * (o % 8) + o / 8;
    }
}

static float max_avx2(const float *s, size_t n)
{
    size_t i = 0;
    float m = s[0];
    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(s);
        for (i = 8; i + 8 <= n; i += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + i));
        __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        x = _mm_max_ps(x, _mm_movehl_ps(x, x));
        x = _mm_max_ss(x, _mm_movehdup_ps(x));
        m = _mm_cvtss_f32(x);
    }
    for (; i < n; i++)
        if (s[i] > m) m = s[i];
    return m;
}

/* exp(x) for x <= 0 (Cephes expf): n = round(x log2 e), r = x - n ln 2 in two steps, a degree-6
 * polynomial, times 2^n. Inputs below -87.3 are clamped (the result, ~1e-38, is negligible in a sum of
 * weights that includes exp(0) = 1). */
INLINE __m256 exp256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(DECODE_EXP_MIN));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(DECODE_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(DECODE_EXP_LN2_HI), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(DECODE_EXP_LN2_LO), x);
    __m256 y = _mm256_set1_ps(DECODE_EXP_P5);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(DECODE_EXP_P4));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(DECODE_EXP_P3));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(DECODE_EXP_P2));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(DECODE_EXP_P1));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(DECODE_EXP_P0));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static float exp_sum_avx2(float *s, size_t n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
        _mm256_storeu_ps(s + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = hsum(acc);
    for (; i < n; i++) {
        s[i] = expf(s[i] - m);
        sum += s[i];
    }
    return sum;
}

static float read_sum_avx2(const float *x, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i];
    return sum;
}

static const KernelSet kernels_avx2 = {
    .name = "avx2",
    .scores = {[STORE_F32] = scores_f32, [STORE_F16] = scores_f16, [STORE_BF16] = scores_bf16,
               [STORE_E4M3] = scores_e4m3, [STORE_E5M2] = scores_e5m2, [STORE_INT8] = scores_int8,
               [STORE_INT4] = scores_int4, [STORE_INT2] = scores_int2, [STORE_Q8_0] = scores_q8_0,
               [STORE_Q4_0] = scores_q4_0,
               [STORE_Q4_1] = decode_ggml_scores_q4_1_avx2,
               [STORE_Q5_0] = decode_ggml_scores_q5_0_avx2,
               [STORE_Q5_1] = decode_ggml_scores_q5_1_avx2,
               [STORE_IQ4_NL] = decode_ggml_scores_iq4_nl_avx2,
               [STORE_INTN] = decode_kivi_scores_avx2},
    .vacc = {[STORE_F32] = vacc_f32, [STORE_F16] = vacc_f16, [STORE_BF16] = vacc_bf16, [STORE_E4M3] = vacc_e4m3,
             [STORE_E5M2] = vacc_e5m2, [STORE_INT8] = vacc_int8, [STORE_INT4] = vacc_int4, [STORE_INT2] = vacc_int2,
             [STORE_Q8_0] = vacc_q8_0, [STORE_Q4_0] = vacc_q4_0,
             [STORE_Q4_1] = decode_ggml_vacc_q4_1_avx2,
             [STORE_Q5_0] = decode_ggml_vacc_q5_0_avx2,
             [STORE_Q5_1] = decode_ggml_vacc_q5_1_avx2,
             [STORE_IQ4_NL] = decode_ggml_vacc_iq4_nl_avx2,
             [STORE_INTN] = decode_kivi_vacc_avx2},
    .raw_scale = {[STORE_E4M3] = 256},
    .col_order = col_order_avx2,
    .max = max_avx2,
    .exp_sum = exp_sum_avx2,
    .read_sum = read_sum_avx2,
};

const KernelSet *decode_kernels_avx2(void) { return &kernels_avx2; }

#else
/* Built without -mavx2 -mfma -mf16c (a non-x86 target): no AVX2 kernels. */
const KernelSet *decode_kernels_avx2(void) { return NULL; }
#endif
