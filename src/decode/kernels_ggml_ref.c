/* kernels_ggml_ref: the portable scalar twins of the ggml block kernels (see kernels_ggml.h). Each block is
 * decoded into its 32 exact float32 values and consumed one token at a time, with one float32 accumulator per
 * dot product (a sequential sum over the columns), like kernels_ref.c. */
#include "decode/kernels_ggml.h"

static size_t block_bytes(StoreType t)
{
    switch (t) {
    case STORE_Q4_1: return sizeof(StoreBlockQ4_1);
    case STORE_Q5_0: return sizeof(StoreBlockQ5_0);
    case STORE_Q5_1: return sizeof(StoreBlockQ5_1);
    default: return sizeof(StoreBlockIQ4_NL);
    }
}

void decode_ggml_scores_ref(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n)
{
    const size_t W = k->W, bb = block_bytes(k->type);
    float buf[STORE_QK];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *row = k->codes + (t0 + i) * k->row_bytes;
        for (size_t g = 0; g < G; g++) s[g * ls + i] = 0.0f;
        for (size_t j0 = 0; j0 < W; j0 += STORE_QK) {
            ggml_block_values(buf, k->type, row + j0 / STORE_QK * bb);
            for (size_t g = 0; g < G; g++) {
                float acc = s[g * ls + i];
                const float *q = qp + g * W + j0;
                for (size_t c = 0; c < STORE_QK; c++) acc += q[c] * buf[c];
                s[g * ls + i] = acc;
            }
        }
    }
}

void decode_ggml_vacc_ref(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n)
{
    const size_t W = v->W, bb = block_bytes(v->type);
    float buf[STORE_QK];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *row = v->codes + (t0 + i) * v->row_bytes;
        for (size_t j0 = 0; j0 < W; j0 += STORE_QK) {
            ggml_block_values(buf, v->type, row + j0 / STORE_QK * bb);
            for (size_t g = 0; g < G; g++) {
                float w = p[g * lp + i], *a = acc + g * W + j0;
                for (size_t c = 0; c < STORE_QK; c++) a[c] += w * buf[c];
            }
        }
    }
}
