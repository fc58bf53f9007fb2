/* kernels_ggml: the AVX2 kernels of the ggml block types the method library stores (store.h): q4_1, q5_0, q5_1,
 * iq4_nl (q8_0 and q4_0 are in kernels_avx2.c). They fill those types' slots of the AVX2 KernelSet (kernels.h);
 * their scalar twins are kernels_ref.c's, which read every block type through src/store/elem.h. Internal to
 * src/decode/; kernels_ggml_avx2.c is compiled with -mavx2 -mfma -mf16c and called only after decode.c's
 * runtime CPU check.
 *
 * Rows are W / 32 blocks (W % 32 == 0, store_check), read in natural column order (no permutation, no raw
 * factor) and without per-token scales (KRows.rscale is NULL for these types).
 * Numerics: float32, like kernels.h. Each element is read as its exact stored value: q4_1 / q5_1 n * d + m
 * rounded once to float32 (n * d is exact, so this is store_dequantize_rows_f32's value; AVX2 forms it with one
 * FMA), q5_0 (n - 16) * d and iq4_nl d * K[n] (exact). The AVX2 kernels keep d out of the block for q5_0 and
 * iq4_nl (d times the block's partial dot product or weight, like q4_0) and look K[n] up with vpshufb.
 * Scores: float32 dot products over W; values: acc_j += p * value_j (avx2_common.h's value path).
 */
#ifndef KVC_DECODE_KERNELS_GGML_H
#define KVC_DECODE_KERNELS_GGML_H

#include "decode/kernels.h"

/* AVX2 (kernels_ggml_avx2.c; defined only when that file is built with -mavx2 -mfma -mf16c). */
void decode_ggml_scores_q4_1_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                                  float *scr);
void decode_ggml_scores_q5_0_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                                  float *scr);
void decode_ggml_scores_q5_1_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                                  float *scr);
void decode_ggml_scores_iq4_nl_avx2(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0,
                                    size_t n, float *scr);
void decode_ggml_vacc_q4_1_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                                float *scr);
void decode_ggml_vacc_q5_0_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                                float *scr);
void decode_ggml_vacc_q5_1_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                                float *scr);
void decode_ggml_vacc_iq4_nl_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0,
                                  size_t n, float *scr);

#endif
