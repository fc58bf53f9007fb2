/* kernels_ggml: fused decode kernels for the ggml block types the method library stores (store.h): q4_1,
 * q5_0, q5_1, iq4_nl (q8_0 and q4_0 are in kernels_ref.c / kernels_avx2.c). Same interface as kernels.h
 * (ScoresFn, VaccFn), registered in the KernelSet tables of kernels_ref.c and kernels_avx2.c; internal to
 * src/decode/. Two implementations: kernels_ggml_ref.c (portable scalar, the `_ref` twins) and
 * kernels_ggml_avx2.c (AVX2 + FMA + F16C, compiled with those flags alone, called only after decode.c's
 * runtime CPU check).
 *
 * Rows are W / 32 blocks (W % 32 == 0, store_check), read in natural column order (no permutation, no raw
 * factor) and without per-token scales (KRows.rscale is NULL for these types).
 * Numerics: float32, like kernels.h. Each element is read as its exact stored value: q4_1 / q5_1
 * n * d + m rounded once to float32 (n * d is exact, so this is store_dequantize_rows_f32's value; AVX2
 * forms it with one FMA), q5_0 (n - 16) * d and iq4_nl d * K[n] (exact). The AVX2 kernels keep d out of the
 * block for q5_0 and iq4_nl (d times the block's partial dot product or weight, like q4_0) and look K[n] up
 * with vpshufb. Scores: float32 dot products over W; values: acc_j += p * value_j.
 */
#ifndef KVC_DECODE_KERNELS_GGML_H
#define KVC_DECODE_KERNELS_GGML_H

#include "decode/kernels.h"

/* out[0..32) = the values of the block at blk (type t: q4_1, q5_0, q5_1 or iq4_nl), exact in float32. */
static inline void ggml_block_values(float *out, StoreType t, const uint8_t *blk)
{
    uint16_t dh, mh = 0;
    memcpy(&dh, blk, 2);
    int has_m = t == STORE_Q4_1 || t == STORE_Q5_1, five = t == STORE_Q5_0 || t == STORE_Q5_1;
    if (has_m) memcpy(&mh, blk + 2, 2);
    const uint8_t *qh4 = blk + (has_m ? 4 : 2), *qs = five ? qh4 + 4 : qh4;
    uint32_t qh = five ? (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24 : 0;
    float d = store_f16_to_f32(dh), m = store_f16_to_f32(mh);
    for (int j = 0; j < STORE_QK; j++) {
        int n = j < STORE_QK / 2 ? qs[j] & 0xF : qs[j - STORE_QK / 2] >> 4;
        n |= (int)((qh >> j) & 1u) << 4;
        float v;
        switch (t) {
        case STORE_Q4_1:
        case STORE_Q5_1: v = (float)n * d + m; break;
        case STORE_Q5_0: v = (float)(n - 16) * d; break;
        default: v = d * (float)store_iq4nl_values[n]; break;   /* STORE_IQ4_NL */
        }
        out[j] = v;
    }
}

/* Scalar twins (kernels_ggml_ref.c): any of the four types (k->type). */
void decode_ggml_scores_ref(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n);
void decode_ggml_vacc_ref(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n);

/* AVX2 (kernels_ggml_avx2.c; defined only when that file is built with -mavx2 -mfma -mf16c). */
void decode_ggml_scores_q4_1_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n);
void decode_ggml_scores_q5_0_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n);
void decode_ggml_scores_q5_1_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n);
void decode_ggml_scores_iq4_nl_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0,
                                    size_t n);
void decode_ggml_vacc_q4_1_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n);
void decode_ggml_vacc_q5_0_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n);
void decode_ggml_vacc_q5_1_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n);
void decode_ggml_vacc_iq4_nl_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0,
                                  size_t n);

#endif
