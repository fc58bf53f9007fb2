/* kernels_kivi: the kernels of the STORE_INTN slot (kernels.h): the grouped integer format (store.h, intN) of
 * KIVI's cache (src/methods/kivi.c) and the method library's quantize: 2 / 4 / 8-bit codes, asymmetric or
 * symmetric (read as the asymmetric form with m = -2^(b-1) s: stored n = code + 2^(b-1)), FP16 or FP32 scales
 * and mins, groups along either axis for keys and values (KRows' intN fields). The scalar twins are in
 * kernels_ref.c (the intN part); kernels_kivi_avx2.c is the AVX2 implementation (compiled with -mavx2 -mfma
 * -mf16c, called only after decode.c's runtime CPU check). Internal to src/decode/.
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
 * checks this (decode_rows) and sends every other intN shape (3 / 5 / 6 / 7 bits, other groups, W % 8 != 0, low rank)
 * through the generic dequantized-tile path. The
 * interface is in natural column order both ways; the AVX2 kernels read 8 bytes at a time in their own order
 * (4 bits: even then odd columns of 16; 2 bits: column 4i + k at 8k + i of 32) and permute q' and the
 * accumulators themselves.
 *
 * Numerics: float32 products and sums, like kernels.h (q' and c_G rounded to float32 once per group).
 * Pure: no allocation; the caller supplies the scratch (DECODE_SCRATCH floats).
 */
#ifndef KVC_DECODE_KERNELS_KIVI_H
#define KVC_DECODE_KERNELS_KIVI_H

#include "decode/kernels.h"

/* AVX2 (kernels_kivi_avx2.c; defined only when that file is built with -mavx2 -mfma -mf16c). */
void decode_kivi_scores_avx2(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n,
                             float *scr);
void decode_kivi_vacc_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                           float *scr);

#endif
