/* kernels: the per-format building blocks of a decode step, in two implementations with one interface:
 * kernels_ref.c (portable scalar C, the `_ref` twins) and kernels_avx2.c (AVX2 + FMA + F16C, compiled with
 * those flags alone and only called after a runtime CPU check). Internal to src/decode/.
 *
 * G query heads share one KV head; W stored columns per token; rows are read straight from the stored
 * bytes (no dequantized copy). A kernel set may read columns in its own order (kernel order): the caller
 * permutes the prepared query into that order and the accumulated output back (col_order).
 *
 * Numerics (both implementations): products and sums in float32; scores are dot products over W with
 * several float32 partial sums; p = exp(s - max) in float32 (AVX2: a degree-6 polynomial after range
 * reduction, within 2 ulp of expf); the weighted V sum is accumulated in float32 per token block.
 * Per-token FP16 scales multiply the finished dot product (keys) or the weight (values).
 * Pure: no allocation, no I/O; the caller supplies every buffer.
 */
#ifndef KVC_DECODE_KERNELS_H
#define KVC_DECODE_KERNELS_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The stored rows a kernel reads: one head's K or V (or its float32 copy on the naive path). */
typedef struct KRows {
    StoreType type;
    const uint8_t *codes;    /* row t at codes + t * row_bytes */
    size_t row_bytes;
    const uint16_t *rscale;  /* FP16 scale per token (int types, axis token), else NULL */
    size_t W;                /* stored columns */
} KRows;

/* s[g*ls + i] = rowscale(t0+i) * sum_j qp[g*W + j] * code(t0+i, j), for g < G, i < n.
 * qp: G prepared queries of W floats, in kernel order. */
typedef void (*ScoresFn)(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n);
/* acc[g*W + j] += sum_i p[g*lp + i] * rowscale(t0+i) * code(t0+i, j), for g < G, j < W (kernel order). */
typedef void (*VaccFn)(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n);

typedef struct KernelSet {
    const char *name;                     /* "ref" or "avx2" */
    ScoresFn scores[STORE_NTYPES];
    VaccFn vacc[STORE_NTYPES];
    /* NULL for a type without a kernel: decode.c then dequantizes small tiles with store_dequantize_rows_f32
     * and runs the f32 kernels (so every stored format decodes; only these are fused) */
    /* true value = raw_scale[type] * what the kernels read, 0 meaning 1 (AVX2 reads E4M3 as FP16: 1/256 of its
     * value); the caller folds it into the prepared query and the output */
    float raw_scale[STORE_NTYPES];
    /* perm[p] = the natural column read at kernel position p, p < W */
    void (*col_order)(size_t *perm, StoreType t, size_t W);
    float (*max)(const float *s, size_t n);                  /* n >= 1 */
    float (*exp_sum)(float *s, size_t n, float m);           /* s[i] = exp(s[i] - m); returns the sum */
    /* the sum of n floats, read once: the STREAM-style read-bandwidth probe of kvc bench */
    float (*read_sum)(const float *x, size_t n);
} KernelSet;

/* Value of stored element j (natural order) of a row, without the per-token scale; exact in float32. */
static inline float decode_elem(StoreType t, const uint8_t *row, size_t j)
{
    uint16_t h;
    float f;
    switch (t) {
    case STORE_F32: memcpy(&f, row + 4 * j, 4); return f;
    case STORE_F16: memcpy(&h, row + 2 * j, 2); return store_f16_to_f32(h);
    case STORE_BF16: memcpy(&h, row + 2 * j, 2); return store_bf16_to_f32(h);
    case STORE_E4M3: return store_e4m3_to_f32(row[j]);
    case STORE_E5M2: return store_e5m2_to_f32(row[j]);
    case STORE_INT8: return (float)(int8_t)row[j];
    case STORE_INT4: return (float)(((row[j / 2] >> (4 * (j % 2))) & 0xF) - 8);
    case STORE_INT2: return (float)(((row[j / 4] >> (2 * (j % 4))) & 0x3) - 2);
    case STORE_Q8_0: {
        const StoreBlockQ8_0 *b = (const StoreBlockQ8_0 *)(const void *)row + j / STORE_QK;
        return (float)b->qs[j % STORE_QK] * store_f16_to_f32(b->d);
    }
    case STORE_Q4_0: {
        const StoreBlockQ4_0 *b = (const StoreBlockQ4_0 *)(const void *)row + j / STORE_QK;
        size_t i = j % STORE_QK;
        int n = i < 16 ? b->qs[i] & 0xF : b->qs[i - 16] >> 4;
        return (float)(n - 8) * store_f16_to_f32(b->d);
    }
    default: break;   /* q4_1 ... iq4_nl: kernels_ggml.h; intN: kernels_kivi.h or decode.c's tile path */
    }
    return 0.0f;
}

extern const KernelSet decode_kernels_ref;
/* NULL when kvc was built without the AVX2 translation unit (non-x86 targets). */
const KernelSet *decode_kernels_avx2(void);

#endif
