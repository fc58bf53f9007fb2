/* kernels_kivi: fused decode kernels for the grouped integer format STORE_INTN (store.h, intN) of KIVI's cache
 * (src/methods/kivi.c) and the method library's quantize: 2 / 4 / 8-bit codes, asymmetric or symmetric (read as
 * the asymmetric form with m = -2^(b-1) s: stored n = code + 2^(b-1)), FP16 or FP32 scales and mins, groups along
 * either axis for keys and values. Two implementations with one interface:
 * kernels_kivi_ref.c (portable scalar, the `_ref` twins) and kernels_kivi_avx2.c (AVX2 + FMA + F16C, compiled
 * with those flags alone, called only after decode.c's runtime CPU check). Internal to src/decode/.
 *
 * Keys (axis channel): token group G (g consecutive tokens), column j: scale s_Gj, min m_Gj, value n * s + m.
 * Per token group and query head the kernel forms q'_j = q_j * s_Gj and c_G = sum_j q_j * m_Gj (once per group
 * met in the call), then score_t = q' . n_t + c_G.
 * Values (axis token): token t, channel group k (g consecutive channels): value n * s_tk + m_tk. The scalar
 * twin adds p_t * (s_tk n_tj + m_tk) (the exact value) directly. The AVX2 kernel writes the value as
 * s (n - C) + (m + C s) with C = (2^b - 1) / 2: per tile of 8 tokens it sums sum_t (p_t s_tk) n_tj - C sum_t
 * p_t s_tk (small: the centring is subtracted inside the tile) into its accumulators, and per group the
 * midpoints' share M_k = sum_t p_t (m_tk + C s_tk), added to the group's columns at the end of the call. Summing
 * p s n and p m separately over a block would cancel in float32 (each is far larger than the result).
 * Keys (axis token): token t, channel group k: the AVX2 kernel turns each vector of 8 codes into its values
 * fma(n, s_tk, m_tk) (once for the query heads of the tile) and dots them with q; the scalar twin dots q with
 * n s + m (a product and a sum). No split into n s and m parts, so nothing cancels.
 * Values (axis channel): token group G, column j: per token group y_j = sum_t p_t (n_tj - C) (the AVX2 value tile
 * with one weight per row), then acc_j += s_Gj y_j + (m_Gj + C s_Gj) sum_t p_t; the scalar twin adds p_t times
 * the exact values. Here C = 2^(b-1) when symmetric (the midpoint term is then exactly 0), else (2^b - 1) / 2.
 *
 * Codes: element (t, j) at bit (t W + j) b of one little-endian bit stream; the kernels need byte-aligned rows
 * (row_bytes = W b / 8) and W % 8 == 0 and g % 8 == 0 (or one group for the whole column / row); decode.c
 * checks this (kivi_rows) and sends every other intN shape (3 / 5 / 6 / 7 bits, other groups, W % 8 != 0, low rank)
 * through the generic dequantized-tile path. The
 * interface is in natural column order both ways; the AVX2 kernels read 8 bytes at a time in their own order
 * (4 bits: even then odd columns of 16; 2 bits: column 4i + k at 8k + i of 32) and permute q' and the
 * accumulators themselves.
 *
 * Numerics: float32 products and sums, like kernels.h (q' and c_G rounded to float32 once per group).
 * Pure: no allocation; the caller supplies the scratch (KIVI_SCRATCH floats).
 */
#ifndef KVC_DECODE_KERNELS_KIVI_H
#define KVC_DECODE_KERNELS_KIVI_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct KiviRows {
    const uint8_t *codes;    /* row t at codes + t * row_bytes */
    size_t row_bytes;        /* W * bits / 8 */
    size_t W;                /* columns (W % 8 == 0) */
    int bits;                /* 2, 4 or 8 */
    StoreAxis axis;          /* STORE_AXIS_CHANNEL: groups of g tokens per column; TOKEN: g channels per row */
    size_t g;                /* group extent, resolved: axis channel tokens per group (T: one group), axis token channels (W) */
    size_t per;              /* parameters per group row: axis channel W (index G * W + j), token ceil(W / g) (t * per + k) */
    const void *scale;       /* scales in store.h's group order, FP16 or FP32 (f32) */
    const void *min;         /* mins, same order; NULL: symmetric (m = -2^(bits-1) s, codes stored as n = code + 2^(bits-1)) */
    int f32;                 /* 1: FP32 parameters, 0: FP16 */
} KiviRows;

/* Parameter i (store.h's group order) as float: the scale, and the min (symmetric: -2^(b-1) s, exact). */
static inline float kivi_scale(const KiviRows *r, size_t i)
{
    if (r->f32) {
        float f;
        memcpy(&f, (const uint8_t *)r->scale + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)r->scale + 2 * i, 2);
    return store_f16_to_f32(h);
}
static inline float kivi_min(const KiviRows *r, size_t i)
{
    if (!r->min) return -(float)(1 << (r->bits - 1)) * kivi_scale(r, i);
    if (r->f32) {
        float f;
        memcpy(&f, (const uint8_t *)r->min + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)r->min + 2 * i, 2);
    return store_f16_to_f32(h);
}

/* Floats of scratch a kernel call needs for G query heads over rows of W columns. */
/* (keys: q' in kernel order, c, q' natural, or per token: q', 2 x 32 rows of parameters; values per group of <= 4
 * heads: accumulators, M, wc, wt, indices, or per channel: 2 accumulators, scales, mids, weights) */
#define KIVI_SCRATCH(G, W) ((G) * (4 * (W) + 16) + 8 * (W) + 64)

/* s[h*ls + i] = sum_j q[h*W + j] * value(t0+i, j), h < G, i < n; q: G queries of W floats (natural order). */
typedef void (*KiviScoresFn)(float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0, size_t n,
                             float *scr);
/* acc[h*W + j] += sum_i p[h*lp + i] * value(t0+i, j), h < G, j < W. */
typedef void (*KiviVaccFn)(float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0, size_t n,
                           float *scr);

typedef struct KiviKernels {
    const char *name;   /* "scalar" or "avx2" */
    KiviScoresFn scores;
    KiviVaccFn vacc;
} KiviKernels;

extern const KiviKernels decode_kivi_ref;
/* NULL when kvc was built without the AVX2 translation unit (non-x86 targets). */
const KiviKernels *decode_kivi_avx2(void);

/* Code j of a row (natural order), b = 2, 4 or 8 (row byte-aligned). */
static inline unsigned kivi_code(const uint8_t *row, size_t j, int b)
{
    size_t bit = j * (size_t)b;
    return (unsigned)(row[bit / 8] >> (bit % 8)) & ((1u << b) - 1u);
}

#endif
