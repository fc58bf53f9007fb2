/* kernels_ref: the scalar KernelSet (kernels.h), the portable `_ref` twin of every slot: f32 .. iq4_nl and the
 * grouped intN format (kernels_kivi.h). Natural column order, no raw factor. Each row is read in chunks of up
 * to 256 elements into float32 (exact: the stored values, src/store/elem.h) and consumed one token at a time,
 * once for all G query heads, with one float32 accumulator per dot product (a sequential sum over the
 * columns). Two drivers serve every format: dots (the key side) and axpys (the value side), each given the
 * format's chunk reader.
 */
#include "decode/kernels.h"
#include "store/elem.h"

#include <math.h>
#include <string.h>

enum { CHUNK = 256 };   /* a multiple of STORE_QK: ggml blocks never straddle two chunks */

/* buf[c] = value(t, j0 + c), c < nj: row t's stored values in natural order (int8 / int4 / int2 without their
 * per-token scale; intN keys per channel: the codes, whose scales are in the prepared query). */
typedef void (*ChunkFn)(float *buf, const KRows *r, size_t t, size_t j0, size_t nj);

static inline float rowscale(const KRows *k, size_t t) { return k->rscale ? store_f16_to_f32(k->rscale[t]) : 1.0f; }

/* s[g*ls + i] = rowscale(t0+i) * sum_j q[g*W + j] * value(t0+i, j) (the chunk reader's values). */
static inline void dots(ChunkFn chunk, float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0,
                        size_t n)
{
    size_t W = k->W;
    float buf[CHUNK];
    for (size_t i = 0; i < n; i++) {
        for (size_t g = 0; g < G; g++) s[g * ls + i] = 0.0f;
        for (size_t j0 = 0; j0 < W; j0 += CHUNK) {
            size_t nj = W - j0 < CHUNK ? W - j0 : CHUNK;
            chunk(buf, k, t0 + i, j0, nj);
            for (size_t g = 0; g < G; g++) {
                float acc = s[g * ls + i];
                const float *qg = q + g * W + j0;
                for (size_t c = 0; c < nj; c++) acc += qg[c] * buf[c];
                s[g * ls + i] = acc;
            }
        }
        float rs = rowscale(k, t0 + i);
        for (size_t g = 0; g < G; g++) s[g * ls + i] *= rs;
    }
}

/* acc[g*W + j] += sum_i p[g*lp + i] * rowscale(t0+i) * value(t0+i, j). */
static inline void axpys(ChunkFn chunk, float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0,
                         size_t n)
{
    size_t W = v->W;
    float buf[CHUNK];
    for (size_t i = 0; i < n; i++) {
        float rs = rowscale(v, t0 + i);
        for (size_t j0 = 0; j0 < W; j0 += CHUNK) {
            size_t nj = W - j0 < CHUNK ? W - j0 : CHUNK;
            chunk(buf, v, t0 + i, j0, nj);
            for (size_t g = 0; g < G; g++) {
                float w = p[g * lp + i] * rs, *a = acc + g * W + j0;
                for (size_t c = 0; c < nj; c++) a[c] += w * buf[c];
            }
        }
    }
}

/* ---- f32 .. iq4_nl ------------------------------------------------------------------------------------------ */

/* The type switch stays outside the element loops. */
static void row_values(float *buf, const KRows *r, size_t t, size_t j0, size_t nj)
{
    const uint8_t *row = r->codes + t * r->row_bytes;
    size_t bb = elem_block_bytes(r->type);
    switch (r->type) {
    case STORE_F32: memcpy(buf, row + 4 * j0, nj * sizeof *buf); return;
    case STORE_INT8:
        for (size_t c = 0; c < nj; c++) buf[c] = (float)(int8_t)row[j0 + c];
        return;
    case STORE_INT4:
        for (size_t c = 0; c < nj; c++) buf[c] = (float)elem_int_code(STORE_INT4, row, j0 + c);
        return;
    default:
        if (bb) {   /* ggml blocks: W % 32 == 0, and chunks start on a block */
            for (size_t c = 0; c < nj; c += STORE_QK) elem_block_values(buf + c, r->type, row + (j0 + c) / STORE_QK * bb);
            return;
        }
        for (size_t c = 0; c < nj; c++) buf[c] = elem_value(r->type, row, j0 + c);
        return;
    }
}

static void scores_ref(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n, float *scr)
{
    (void)scr;
    dots(row_values, s, ls, qp, G, k, t0, n);
}

static void vacc_ref(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n, float *scr)
{
    (void)scr;
    axpys(row_values, acc, p, lp, G, v, t0, n);
}

/* ---- intN (kernels_kivi.h) ---------------------------------------------------------------------------------- */

static inline float intn_scale(const KRows *r, size_t i) { return elem_param(r->scale, i, r->f32); }
/* The min of parameter i (symmetric: -2^(b-1) s, exact). */
static inline float intn_min(const KRows *r, size_t i)
{
    return r->min ? elem_param(r->min, i, r->f32) : -(float)(1 << (r->bits - 1)) * intn_scale(r, i);
}

/* The stored codes n as floats (the bit width a constant in each loop; rows are byte-aligned). */
static void intn_codes(float *buf, const KRows *r, size_t t, size_t j0, size_t nj)
{
    const uint8_t *row = r->codes + t * r->row_bytes;
    if (r->bits == 8)
        for (size_t c = 0; c < nj; c++) buf[c] = (float)row[j0 + c];
    else if (r->bits == 4)
        for (size_t c = 0; c < nj; c++) buf[c] = (float)elem_intn_code(row, (j0 + c) * 4, 4);
    else
        for (size_t c = 0; c < nj; c++) buf[c] = (float)elem_intn_code(row, (j0 + c) * 2, 2);
}

/* The values n * s + m with each element's group parameters (float32, exact). */
static void intn_values(float *buf, const KRows *r, size_t t, size_t j0, size_t nj)
{
    intn_codes(buf, r, t, j0, nj);
    for (size_t c = 0; c < nj; c++) {
        size_t j = j0 + c, i = r->axis == STORE_AXIS_TOKEN ? t * r->per + j / r->g : t / r->g * r->W + j;
        buf[c] = buf[c] * intn_scale(r, i) + intn_min(r, i);
    }
}

/* Keys per channel (groups of g tokens): per token group q' = q * s and c = q . m (scratch: q' (G, W), c (G)),
 * then s_t = q' . n_t + c. Keys per token: q . value(t). */
static void scores_intn_ref(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n,
                            float *scr)
{
    if (k->axis == STORE_AXIS_TOKEN) {
        dots(intn_values, s, ls, q, G, k, t0, n);
        return;
    }
    size_t W = k->W, g = k->g;
    float *qs = scr, *c = scr + G * W;
    for (size_t i = 0; i < n;) {
        size_t t = t0 + i, grp = t / g, end = (grp + 1) * g - t0;   /* this token group's rows: i .. end */
        if (end > n) end = n;
        size_t p0 = grp * k->per;
        for (size_t h = 0; h < G; h++) {
            float a = 0.0f;
            for (size_t j = 0; j < W; j++) {
                qs[h * W + j] = q[h * W + j] * intn_scale(k, p0 + j);
                a += q[h * W + j] * intn_min(k, p0 + j);
            }
            c[h] = a;
        }
        dots(intn_codes, s + i, ls, qs, G, k, t, end - i);
        for (size_t h = 0; h < G; h++)
            for (size_t r = i; r < end; r++) s[h * ls + r] += c[h];
        i = end;
    }
}

/* Values along either axis: acc += p_t value(t) (the exact values). */
static void vacc_intn_ref(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                          float *scr)
{
    (void)scr;
    axpys(intn_values, acc, p, lp, G, v, t0, n);
}

/* ---- format-independent pieces ------------------------------------------------------------------------------ */

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
               [STORE_Q4_1] = scores_ref, [STORE_Q5_0] = scores_ref, [STORE_Q5_1] = scores_ref,
               [STORE_IQ4_NL] = scores_ref, [STORE_INTN] = scores_intn_ref},
    .vacc = {[STORE_F32] = vacc_ref, [STORE_F16] = vacc_ref, [STORE_BF16] = vacc_ref, [STORE_E4M3] = vacc_ref,
             [STORE_E5M2] = vacc_ref, [STORE_INT8] = vacc_ref, [STORE_INT4] = vacc_ref, [STORE_INT2] = vacc_ref,
             [STORE_Q8_0] = vacc_ref, [STORE_Q4_0] = vacc_ref, [STORE_Q4_1] = vacc_ref, [STORE_Q5_0] = vacc_ref,
             [STORE_Q5_1] = vacc_ref, [STORE_IQ4_NL] = vacc_ref, [STORE_INTN] = vacc_intn_ref},
    .raw_scale = {0},
    .col_order = col_order_ref,
    .max = max_ref,
    .exp_sum = exp_sum_ref,
    .read_sum = read_sum_ref,
};
