/* kernels_ref: the portable scalar twins of the decode kernels (see kernels.h). Natural column order;
 * each row is decoded in chunks of 256 elements into float32 (exact: code times scale) and consumed one
 * token at a time, with one float32 accumulator per dot product (a sequential sum over the columns). */
#include "decode/kernels.h"
#include "decode/kernels_ggml.h"

#include <math.h>
#include <string.h>

static inline float rowscale(const KRows *k, size_t t) { return k->rscale ? store_f16_to_f32(k->rscale[t]) : 1.0f; }

/* buf[c] = element j0 + c of a row, c < nj (the type switch stays outside the element loop). */
static void row_chunk(float *buf, StoreType t, const uint8_t *row, size_t j0, size_t nj)
{
    switch (t) {
    case STORE_F32: memcpy(buf, row + 4 * j0, nj * sizeof *buf); return;
    case STORE_INT8:
        for (size_t c = 0; c < nj; c++) buf[c] = (float)(int8_t)row[j0 + c];
        return;
    case STORE_INT4:
        for (size_t c = 0, j = j0; c < nj; c++, j++) buf[c] = (float)(((row[j / 2] >> (4 * (j % 2))) & 0xF) - 8);
        return;
    default:
        for (size_t c = 0; c < nj; c++) buf[c] = decode_elem(t, row, j0 + c);
        return;
    }
}

enum { CHUNK = 256 };

static void scores_ref(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n)
{
    size_t W = k->W;
    float buf[CHUNK];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *row = k->codes + (t0 + i) * k->row_bytes;
        for (size_t g = 0; g < G; g++) s[g * ls + i] = 0.0f;
        for (size_t j0 = 0; j0 < W; j0 += CHUNK) {
            size_t nj = W - j0 < CHUNK ? W - j0 : CHUNK;
            row_chunk(buf, k->type, row, j0, nj);
            for (size_t g = 0; g < G; g++) {
                float acc = s[g * ls + i];
                const float *q = qp + g * W + j0;
                for (size_t c = 0; c < nj; c++) acc += q[c] * buf[c];
                s[g * ls + i] = acc;
            }
        }
        float rs = rowscale(k, t0 + i);
        for (size_t g = 0; g < G; g++) s[g * ls + i] *= rs;
    }
}

static void vacc_ref(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n)
{
    size_t W = v->W;
    float buf[CHUNK];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *row = v->codes + (t0 + i) * v->row_bytes;
        float rs = rowscale(v, t0 + i);
        for (size_t j0 = 0; j0 < W; j0 += CHUNK) {
            size_t nj = W - j0 < CHUNK ? W - j0 : CHUNK;
            row_chunk(buf, v->type, row, j0, nj);
            for (size_t g = 0; g < G; g++) {
                float w = p[g * lp + i] * rs, *a = acc + g * W + j0;
                for (size_t c = 0; c < nj; c++) a[c] += w * buf[c];
            }
        }
    }
}

static void col_order_ref(size_t *perm, StoreType t, size_t W)
{
    (void)t;
    for (size_t p = 0; p < W; p++) perm[p] = p;
}

static float max_ref(const float *s, size_t n)
{
    float m = s[0];
    for (size_t i = 1; i < n; i++)
        if (s[i] > m) m = s[i];
    return m;
}

static float exp_sum_ref(float *s, size_t n, float m)
{
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        s[i] = expf(s[i] - m);
        sum += s[i];
    }
    return sum;
}

static float read_sum_ref(const float *x, size_t n)
{
    float a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += x[i + (size_t)k];
    for (; i < n; i++) a[0] += x[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

const KernelSet decode_kernels_ref = {
    .name = "scalar",
    .scores = {[STORE_F32] = scores_ref, [STORE_F16] = scores_ref, [STORE_BF16] = scores_ref, [STORE_E4M3] = scores_ref,
               [STORE_E5M2] = scores_ref, [STORE_INT8] = scores_ref, [STORE_INT4] = scores_ref,
               [STORE_INT2] = scores_ref, [STORE_Q8_0] = scores_ref, [STORE_Q4_0] = scores_ref,
               [STORE_Q4_1] = decode_ggml_scores_ref,
               [STORE_Q5_0] = decode_ggml_scores_ref,
               [STORE_Q5_1] = decode_ggml_scores_ref,
               [STORE_IQ4_NL] = decode_ggml_scores_ref},
    .vacc = {[STORE_F32] = vacc_ref, [STORE_F16] = vacc_ref, [STORE_BF16] = vacc_ref, [STORE_E4M3] = vacc_ref,
             [STORE_E5M2] = vacc_ref, [STORE_INT8] = vacc_ref, [STORE_INT4] = vacc_ref, [STORE_INT2] = vacc_ref,
             [STORE_Q8_0] = vacc_ref, [STORE_Q4_0] = vacc_ref,
             [STORE_Q4_1] = decode_ggml_vacc_ref,
             [STORE_Q5_0] = decode_ggml_vacc_ref,
             [STORE_Q5_1] = decode_ggml_vacc_ref,
             [STORE_IQ4_NL] = decode_ggml_vacc_ref},
    .raw_scale = {0},
    .col_order = col_order_ref,
    .max = max_ref,
    .exp_sum = exp_sum_ref,
    .read_sum = read_sum_ref,
};
