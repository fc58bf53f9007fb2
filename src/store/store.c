/* store: stored KV-cache formats (see store.h for the definitions). Scalar, portable C; the speed path
 * lives in src/decode/. T tokens, D head dim, W stored columns per token (D, or R for low rank).
 * Every per-type decision goes through the type table (type_traits below). */
#include "store/store.h"
#include "base/half.h"
#include "base/linalg.h"
#include "base/util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- FP8 element conversions (the 16-bit ones are src/base/half.c's) ---------------------------------- */

uint8_t store_e4m3_from_f64(double x)
{
    if (isnan(x)) return 0x7F;
    unsigned sign = signbit(x) ? 0x80u : 0u;
    double v = half_round_mag(fabs(x), 3, -6);       /* infinities round to infinity, then saturate */
    if (v > 448.0) return (uint8_t)(sign | 0x7Eu);
    return (uint8_t)(sign | half_encode_mag(v, 3, -6, 7));
}

uint8_t store_e5m2_from_f64(double x)
{
    if (isnan(x)) return 0x7F;
    unsigned sign = signbit(x) ? 0x80u : 0u;
    double v = half_round_mag(fabs(x), 2, -14);
    if (v > 57344.0) return (uint8_t)(sign | 0x7Bu);
    return (uint8_t)(sign | half_encode_mag(v, 2, -14, 15));
}

/* E4M3 is FP16 with the exponent field one bit shorter: shift the code into FP16 position and scale by
 * 2^(15 - 7) = 256. S.1111.111 is NaN. */
float store_e4m3_to_f32(uint8_t c)
{
    if ((c & 0x7Fu) == 0x7Fu) return (c & 0x80u) ? -NAN : NAN;
    uint16_t h = (uint16_t)(((c & 0x80u) << 8) | ((c & 0x7Fu) << 7));
    return half_to_float(h) * 256.0f;
}

/* E5M2 is the top byte of an FP16. */
float store_e5m2_to_f32(uint8_t c) { return half_to_float((uint16_t)(c << 8)); }

/* ---- ggml reference block quantizers ---------------------------------------------------------------- */

void store_quantize_row_q8_0(StoreBlockQ8_0 *y, const float *x, size_t n)
{
    assert(n % STORE_QK == 0);
    for (size_t b = 0; b < n / STORE_QK; b++, x += STORE_QK) {
        float amax = 0.0f;
        for (int j = 0; j < STORE_QK; j++) {
            float v = fabsf(x[j]);
            if (v > amax) amax = v;      /* fmaxf in ggml; same for non-NaN input */
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = half_from_float(d);
        for (int j = 0; j < STORE_QK; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void store_quantize_row_q4_0(StoreBlockQ4_0 *y, const float *x, size_t n)
{
    assert(n % STORE_QK == 0);
    for (size_t b = 0; b < n / STORE_QK; b++, x += STORE_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < STORE_QK; j++) {
            const float v = x[j];
            if (amax < fabsf(v)) {       /* the first element with the largest |x| */
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = half_from_float(d);
        for (int j = 0; j < STORE_QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[STORE_QK / 2 + j] * id;
            int q0 = (int8_t)(x0 + 8.5f), q1 = (int8_t)(x1 + 8.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* The first smallest and the first largest element of a block (ggml starts from +-FLT_MAX). */
static void block_min_max(const float *x, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < STORE_QK; j++) {
        const float v = x[j];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    *mn = lo;
    *mx = hi;
}

/* The first element with the largest |x| (0 for an all-zero block). */
static float block_signed_max(const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < STORE_QK; j++) {
        const float v = x[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    return max;
}

void store_quantize_row_q4_1(StoreBlockQ4_1 *y, const float *x, size_t n)
{
    assert(n % STORE_QK == 0);
    for (size_t b = 0; b < n / STORE_QK; b++, x += STORE_QK) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = half_from_float(d);
        y[b].m = half_from_float(min);
        for (int j = 0; j < STORE_QK / 2; j++) {
            const float x0 = (x[j] - min) * id, x1 = (x[STORE_QK / 2 + j] - min) * id;
            int q0 = (int8_t)(x0 + 0.5f), q1 = (int8_t)(x1 + 0.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void put_qh(uint8_t qh[4], uint32_t v)
{
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(v >> (8 * k));
}

static uint32_t get_qh(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void store_quantize_row_q5_0(StoreBlockQ5_0 *y, const float *x, size_t n)
{
    assert(n % STORE_QK == 0);
    for (size_t b = 0; b < n / STORE_QK; b++, x += STORE_QK) {
        const float max = block_signed_max(x);
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = half_from_float(d);
        uint32_t qh = 0;
        for (int j = 0; j < STORE_QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[STORE_QK / 2 + j] * id;
            int q0 = (int8_t)(x0 + 16.5f), q1 = (int8_t)(x1 + 16.5f);
            if (q0 > 31) q0 = 31;
            if (q1 > 31) q1 = 31;
            y[b].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 & 0x10) >> 4) << j;
            qh |= (uint32_t)((q1 & 0x10) >> 4) << (j + STORE_QK / 2);
        }
        put_qh(y[b].qh, qh);
    }
}

void store_quantize_row_q5_1(StoreBlockQ5_1 *y, const float *x, size_t n)
{
    assert(n % STORE_QK == 0);
    for (size_t b = 0; b < n / STORE_QK; b++, x += STORE_QK) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = half_from_float(d);
        y[b].m = half_from_float(min);
        uint32_t qh = 0;
        for (int j = 0; j < STORE_QK / 2; j++) {
            const float x0 = (x[j] - min) * id, x1 = (x[STORE_QK / 2 + j] - min) * id;
            const unsigned q0 = (uint8_t)(x0 + 0.5f), q1 = (uint8_t)(x1 + 0.5f);   /* no clamp, as ggml */
            y[b].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + STORE_QK / 2);
        }
        put_qh(y[b].qh, qh);
    }
}

const int8_t store_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Index of the code book entry nearest a: binary search for K[lo] <= a < K[lo + 1], then the lower one only
 * when strictly nearer (float32 differences); ties go up. */
static int iq4nl_index(float a)
{
    const int8_t *K = store_iq4nl_values;
    if (a <= K[0]) return 0;
    if (a >= K[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (a < K[mid]) hi = mid;
        else lo = mid;
    }
    return a - (float)K[hi - 1] < (float)K[hi] - a ? hi - 1 : hi;
}

void store_quantize_row_iq4_nl(StoreBlockIQ4_NL *y, const float *x, size_t n)
{
    assert(n % STORE_QK == 0);
    uint8_t L[STORE_QK] = {0};   /* indices of the last quantized block of this row (ggml: of this call) */
    for (size_t b = 0; b < n / STORE_QK; b++, x += STORE_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < STORE_QK; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax < 1e-15f) {
            y[b].d = 0;
        } else {
            const float d0 = max / -127.0f;
            const float id = 1.0f / d0;
            float sumqx = 0.0f, sumq2 = 0.0f;
            for (int j = 0; j < STORE_QK; j++) {
                const float a = id * x[j];
                const int l = iq4nl_index(a);
                L[j] = (uint8_t)l;
                const float q = (float)store_iq4nl_values[l];
                const float w = x[j] * x[j];
                const float wq = w * q;
                sumqx += wq * x[j];
                sumq2 += wq * q;
            }
            y[b].d = half_from_float(sumqx / sumq2);
        }
        for (int j = 0; j < STORE_QK / 2; j++) y[b].qs[j] = (uint8_t)(L[j] | (L[j + STORE_QK / 2] << 4));
    }
}

/* ---- the per-type functions of the table ---------------------------------------------------------------- */

/* Element i of an input given in double or float (exactly one set), as double (float input is exact in it). */
static inline double at(const double *xd, const float *xf, size_t i) { return xd ? xd[i] : (double)xf[i]; }

static uint8_t *row_of(const StoreTensor *st, size_t t) { return st->codes + t * st->row_bytes; }

static uint16_t load16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* plain types: the value itself */

static void f32_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) {
        float v = xd ? (float)xd[j] : xf[j];
        memcpy(row + 4 * j, &v, 4);
    }
}

static void f32_read(float *y, const StoreTensor *st, size_t t) { memcpy(y, row_of(st, t), st->W * sizeof *y); }

static void f16_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) {
        uint16_t h = xd ? half_from_double(xd[j]) : half_from_float(xf[j]);
        memcpy(row + 2 * j, &h, 2);
    }
}

static void f16_read(float *y, const StoreTensor *st, size_t t)
{
    const uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) y[j] = half_to_float(load16(row + 2 * j));
}

static void bf16_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) {
        uint16_t h = xd ? bf16_from_double(xd[j]) : bf16_from_float(xf[j]);
        memcpy(row + 2 * j, &h, 2);
    }
}

static void bf16_read(float *y, const StoreTensor *st, size_t t)
{
    const uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) y[j] = bf16_to_float(load16(row + 2 * j));
}

static void e4m3_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) row[j] = store_e4m3_from_f64(at(xd, xf, j));
}

static void e4m3_read(float *y, const StoreTensor *st, size_t t)
{
    const uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) y[j] = store_e4m3_to_f32(row[j]);
}

static void e5m2_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) row[j] = store_e5m2_from_f64(at(xd, xf, j));
}

static void e5m2_read(float *y, const StoreTensor *st, size_t t)
{
    const uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++) y[j] = store_e5m2_to_f32(row[j]);
}

/* int8 / int4 / int2: symmetric codes, one FP16 scale per token row or per column */

static int qmax_of(StoreType t) { return t == STORE_INT8 ? 127 : t == STORE_INT4 ? 7 : 1; }

/* The FP16 scale of a group whose max |x| is amax. */
static uint16_t group_scale(double amax, int qmax)
{
    if (!(amax > 0.0)) return 0;
    uint16_t h = half_from_double(amax / qmax);
    if ((h & 0x7C00u) == 0x7C00u) h = 0x7BFF;   /* saturate: an infinite scale would read back NaN */
    return h;
}

static int int_code(double x, double scale, int qmax)
{
    if (scale == 0.0 || isnan(x)) return 0;
    double q = rint(x / scale);
    if (q > qmax) q = qmax;
    if (q < -qmax) q = -qmax;
    return (int)q;
}

static void put_code(uint8_t *row, StoreType t, size_t j, int code)
{
    if (t == STORE_INT8) row[j] = (uint8_t)(int8_t)code;
    else if (t == STORE_INT4) row[j / 2] |= (uint8_t)((code + 8) << (4 * (j % 2)));
    else row[j / 4] |= (uint8_t)((code + 2) << (2 * (j % 4)));
}

static int get_code(const uint8_t *row, StoreType t, size_t j)
{
    if (t == STORE_INT8) return (int8_t)row[j];
    if (t == STORE_INT4) return ((row[j / 2] >> (4 * (j % 2))) & 0xF) - 8;
    return ((row[j / 4] >> (2 * (j % 4))) & 0x3) - 2;
}

/* The scale of element (t, j): its row's (axis token) or its column's (axis channel). */
static uint16_t int_scale_of(const StoreTensor *st, size_t t, size_t j)
{
    return st->fmt.axis == STORE_AXIS_TOKEN ? st->scales[t] : st->scales[j];
}

static void int_scales(StoreTensor *st, const double *xd, const float *xf)
{
    size_t T = st->T, W = st->W, n = st->n_scales;
    int qmax = qmax_of(st->fmt.type), row = st->fmt.axis == STORE_AXIS_TOKEN;
    double *amax = xcalloc(n, sizeof *amax);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < W; j++) {
            double a = fabs(at(xd, xf, t * W + j));
            size_t g = row ? t : j;
            if (a > amax[g]) amax[g] = a;
        }
    for (size_t g = 0; g < n; g++) st->scales[g] = group_scale(amax[g], qmax);
    free(amax);
}

static void int_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    uint8_t *row = row_of(st, t);
    StoreType ty = st->fmt.type;
    int qmax = qmax_of(ty);
    for (size_t j = 0; j < st->W; j++)
        put_code(row, ty, j, int_code(at(xd, xf, j), half_to_float(int_scale_of(st, t, j)), qmax));
}

static void int_read(float *y, const StoreTensor *st, size_t t)
{
    const uint8_t *row = row_of(st, t);
    for (size_t j = 0; j < st->W; j++)
        y[j] = (float)get_code(row, st->fmt.type, j) * half_to_float(int_scale_of(st, t, j));
}

/* ggml blocks: the published row quantizers (float32 input) and their read-back */

/* one row = one call of ggml's published quantizer, on the float32 input */
#define GGML_ROW(name, Block)                                                                    \
    static void name##_row(StoreTensor *st, size_t t, const double *xd, const float *xf)         \
    {                                                                                            \
        (void)xd;                                                                                \
        store_quantize_row_##name((StoreBlock##Block *)(void *)row_of(st, t), xf, st->W);        \
    }
GGML_ROW(q8_0, Q8_0)
GGML_ROW(q4_0, Q4_0)
GGML_ROW(q4_1, Q4_1)
GGML_ROW(q5_0, Q5_0)
GGML_ROW(q5_1, Q5_1)
GGML_ROW(iq4_nl, IQ4_NL)
#undef GGML_ROW

static void q8_0_read(float *y, const StoreTensor *st, size_t t)
{
    const StoreBlockQ8_0 *b = (const StoreBlockQ8_0 *)(const void *)row_of(st, t);
    for (size_t k = 0; k < st->W / STORE_QK; k++) {
        float d = half_to_float(b[k].d);
        for (int j = 0; j < STORE_QK; j++) y[k * STORE_QK + (size_t)j] = (float)b[k].qs[j] * d;
    }
}

static void q4_0_read(float *y, const StoreTensor *st, size_t t)
{
    const StoreBlockQ4_0 *b = (const StoreBlockQ4_0 *)(const void *)row_of(st, t);
    for (size_t k = 0; k < st->W / STORE_QK; k++) {
        float d = half_to_float(b[k].d);
        for (int j = 0; j < STORE_QK / 2; j++) {
            y[k * STORE_QK + (size_t)j] = (float)((b[k].qs[j] & 0xF) - 8) * d;
            y[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)((b[k].qs[j] >> 4) - 8) * d;
        }
    }
}

static void q4_1_read(float *y, const StoreTensor *st, size_t t)
{
    const StoreBlockQ4_1 *b = (const StoreBlockQ4_1 *)(const void *)row_of(st, t);
    for (size_t k = 0; k < st->W / STORE_QK; k++) {
        float d = half_to_float(b[k].d), m = half_to_float(b[k].m);
        for (int j = 0; j < STORE_QK / 2; j++) {
            y[k * STORE_QK + (size_t)j] = (float)(b[k].qs[j] & 0xF) * d + m;
            y[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)(b[k].qs[j] >> 4) * d + m;
        }
    }
}

/* q5_0 and q5_1: the same bit layout, q5_1 with a min after the scale. */
static void q5_read(float *y, const StoreTensor *st, size_t t)
{
    const int m1 = st->fmt.type == STORE_Q5_1;
    const size_t bs = m1 ? sizeof(StoreBlockQ5_1) : sizeof(StoreBlockQ5_0);
    const uint8_t *row = row_of(st, t);
    for (size_t k = 0; k < st->W / STORE_QK; k++) {
        const uint8_t *blk = row + k * bs;
        const uint8_t *qh4 = blk + (m1 ? 4 : 2), *qs = qh4 + 4;
        uint32_t qh = get_qh(qh4);
        float d = half_to_float(load16(blk)), m = half_to_float(m1 ? load16(blk + 2) : 0);
        for (int j = 0; j < STORE_QK / 2; j++) {
            int n0 = (qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int n1 = (qs[j] >> 4) | (int)(((qh >> (j + STORE_QK / 2)) & 1u) << 4);
            if (m1) {
                y[k * STORE_QK + (size_t)j] = (float)n0 * d + m;
                y[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)n1 * d + m;
            } else {
                y[k * STORE_QK + (size_t)j] = (float)(n0 - 16) * d;
                y[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)(n1 - 16) * d;
            }
        }
    }
}

static void iq4_nl_read(float *y, const StoreTensor *st, size_t t)
{
    const StoreBlockIQ4_NL *b = (const StoreBlockIQ4_NL *)(const void *)row_of(st, t);
    for (size_t k = 0; k < st->W / STORE_QK; k++) {
        float d = half_to_float(b[k].d);
        for (int j = 0; j < STORE_QK / 2; j++) {
            y[k * STORE_QK + (size_t)j] = d * (float)store_iq4nl_values[b[k].qs[j] & 0xF];
            y[k * STORE_QK + (size_t)j + STORE_QK / 2] = d * (float)store_iq4nl_values[b[k].qs[j] >> 4];
        }
    }
}

/* intN: grouped integer codes in one bit stream */

/* Groups of a STORE_INTN tensor: per row (axis token) or per column (axis channel), and in all. */
static size_t intn_extent(const StoreTensor *st) { return st->fmt.axis == STORE_AXIS_TOKEN ? st->W : st->T; }
static size_t intn_g(const StoreTensor *st)
{
    size_t e = intn_extent(st);
    return st->fmt.group && st->fmt.group < e ? st->fmt.group : e;
}
static size_t intn_per(const StoreTensor *st) { return (intn_extent(st) + intn_g(st) - 1) / intn_g(st); }

static size_t intn_group_of(const StoreTensor *st, size_t t, size_t j, size_t g, size_t per)
{
    return st->fmt.axis == STORE_AXIS_TOKEN ? t * per + j / g : t / g * st->W + j;
}

/* v rounded to the parameter type, saturated to its largest finite value */
static double intn_round_param(double v, StoreScaleType ty)
{
    if (ty == STORE_SCALE_F16) {
        uint16_t h = half_from_double(v);
        if ((h & 0x7FFFu) == 0x7C00u) h = (uint16_t)((h & 0x8000u) | 0x7BFFu);
        return half_to_float(h);
    }
    if (fabs(v) > FLT_MAX) return v > 0 ? FLT_MAX : -FLT_MAX;
    return (float)v;
}

static void intn_put_param(StoreTensor *st, size_t k, double v)
{
    if (st->fmt.scale_type == STORE_SCALE_F16) {
        uint16_t h = half_from_double(v);
        memcpy(st->params + 2 * k, &h, 2);
    } else {
        float f = (float)v;
        memcpy(st->params + 4 * k, &f, 4);
    }
}

static double intn_get_param(const StoreTensor *st, size_t k)
{
    if (st->fmt.scale_type == STORE_SCALE_F16) return half_to_float(load16(st->params + 2 * k));
    float f;
    memcpy(&f, st->params + 4 * k, 4);
    return f;
}

static void intn_put(uint8_t *buf, size_t off, unsigned v, int b)
{
    unsigned sh = (unsigned)(off % 8);
    buf[off / 8] |= (uint8_t)(v << sh);
    if (sh + (unsigned)b > 8) buf[off / 8 + 1] |= (uint8_t)(v >> (8 - sh));
}

static unsigned intn_get(const uint8_t *buf, size_t off, int b)
{
    unsigned sh = (unsigned)(off % 8), v = buf[off / 8] >> sh;
    if (sh + (unsigned)b > 8) v |= (unsigned)buf[off / 8 + 1] << (8 - sh);
    return v & ((1u << b) - 1u);
}

/* The group scales (and mins) of the input into st->params; exact != NULL: also the unrounded ones, exact[2k]
 * the scale and exact[2k + 1] the min of group k (the lesson's simplification, see store.h). */
static void intn_params_generic(StoreTensor *st, const double *xd, const float *xf, double *exact)
{
    size_t T = st->T, W = st->W, g = intn_g(st), per = intn_per(st), ng = st->n_groups;
    int b = st->fmt.bits, asym = st->fmt.asym;
    double levels = asym ? (double)((1u << b) - 1u) : (double)((1u << (b - 1)) - 1u);
    double *lo = xmalloc(ng * sizeof *lo), *hi = xmalloc(ng * sizeof *hi);
    for (size_t k = 0; k < ng; k++) {
        lo[k] = asym ? HUGE_VAL : 0.0;
        hi[k] = asym ? -HUGE_VAL : 0.0;
    }
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < W; j++) {
            size_t k = intn_group_of(st, t, j, g, per);
            double x = at(xd, xf, t * W + j);
            if (asym) {
                if (x < lo[k]) lo[k] = x;
                if (x > hi[k]) hi[k] = x;
            } else if (fabs(x) > hi[k]) {
                hi[k] = fabs(x);
            }
        }
    for (size_t k = 0; k < ng; k++) {
        double scale = asym ? (hi[k] >= lo[k] ? (hi[k] - lo[k]) / levels : 0.0) : hi[k] / levels;
        double m = asym && hi[k] >= lo[k] ? lo[k] : 0.0;
        intn_put_param(st, k, intn_round_param(scale, st->fmt.scale_type));
        if (asym) intn_put_param(st, ng + k, intn_round_param(m, st->fmt.scale_type));
        if (exact) {
            exact[2 * k] = scale;
            exact[2 * k + 1] = m;
        }
    }
    free(lo);
    free(hi);
}

/* Codes of row t against the stored parameters, or the exact ones (unrounded mode). */
static void intn_code_row_generic(StoreTensor *st, size_t t, const double *xd, const float *xf, const double *exact)
{
    size_t W = st->W, g = intn_g(st), per = intn_per(st), ng = st->n_groups;
    int b = st->fmt.bits, asym = st->fmt.asym;
    double levels = asym ? (double)((1u << b) - 1u) : (double)((1u << (b - 1)) - 1u);
    unsigned off = asym ? 0u : 1u << (b - 1);
    for (size_t j = 0; j < W; j++) {
        size_t k = intn_group_of(st, t, j, g, per);
        double sc = exact ? exact[2 * k] : intn_get_param(st, k);
        double mn = !asym ? 0.0 : exact ? exact[2 * k + 1] : intn_get_param(st, ng + k);
        double x = at(xd, xf, j), q = 0.0;
        if (sc != 0.0 && !isnan(x)) {
            q = rint(asym ? (x - mn) / sc : x / sc);
            if (q > levels) q = levels;
            if (q < (asym ? 0.0 : -levels)) q = asym ? 0.0 : -levels;
        }
        intn_put(st->codes, (t * W + j) * (size_t)b, (unsigned)((int)q + (int)off), b);
    }
}

/* x (t0..t0+n rows, W) = the values of st: the stored parameters, or exact ones (unrounded mode) */
static void intn_dequantize_generic(double *x, const StoreTensor *st, const double *exact, size_t t0, size_t n)
{
    size_t W = st->W, g = intn_g(st), per = intn_per(st), ng = st->n_groups;
    int b = st->fmt.bits, asym = st->fmt.asym;
    int off = asym ? 0 : 1 << (b - 1);
    for (size_t i = 0; i < n; i++) {
        size_t t = t0 + i;
        for (size_t j = 0; j < W; j++) {
            size_t k = intn_group_of(st, t, j, g, per);
            double code = (double)((int)intn_get(st->codes, (t * W + j) * (size_t)b, b) - off);
            double sc = exact ? exact[2 * k] : intn_get_param(st, k);
            if (asym) x[i * W + j] = code * sc + (exact ? exact[2 * k + 1] : intn_get_param(st, ng + k));
            else x[i * W + j] = code * sc;
        }
    }
}


/* Fast paths for double input and codes of 2, 4 or 8 bits (they never straddle a byte): each group's
 * parameters are fetched once and its elements run in a plain loop. The codes, parameters and values are
 * the generic functions' above, bit for bit (same operations in the same order; round_even is rint). */

/* rint(y) in the default rounding mode without a libm call: below 2^52, adding and subtracting 2^52 rounds
 * to the nearest integer, ties to even, exactly; above, y is an integer already (or not finite). */
static inline double round_even(double y)
{
    double a = fabs(y);
    if (a < 0x1p52) a = (a + 0x1p52) - 0x1p52;
    return copysign(a, y);
}

static int intn_fast(const StoreTensor *st, const float *xf)
{
    return !xf && (st->fmt.bits == 2 || st->fmt.bits == 4 || st->fmt.bits == 8);
}

/* Scale and min of group k, as the code and value loops use them. */
static void intn_group_params(const StoreTensor *st, const double *exact, size_t k, double *sc, double *mn)
{
    *sc = exact ? exact[2 * k] : intn_get_param(st, k);
    *mn = !st->fmt.asym ? 0.0 : exact ? exact[2 * k + 1] : intn_get_param(st, st->n_groups + k);
}

/* The shifted codes q + off of x[0..n) for one scale and min: q = rint((x - mn) / sc) clamped to [lo, levels],
 * 0 for NaN (mn = 0 when symmetric: x - 0 is x exactly, so the symmetric codes are rint(x / sc)).
 * Division is the cost (a divpd per two numbers), so two lanes at a time with SSE2 (x86-64 always has it) first
 * try y' = (x - mn) * (1 / sc): y' is within 2^-52 |y| of y = (x - mn) / sc (two roundings), so below 2^20
 * they round to the same integer unless y' lies within 2.4e-10 of a half-integer. A pair with a lane within
 * 1e-9 of one (a tie of y included), or not below 2^20 in magnitude (NaN, infinity), is divided exactly as the
 * scalar loop does. Every code is the scalar loop's: tests/test_store.c checks ties and near-ties. */
static void intn_code_values(uint8_t *out, const double *x, size_t n, double sc, double mn, double lo,
                             double levels, int off)
{
    size_t j = 0;
#ifdef __SSE2__
    const __m128d vsc = _mm_set1_pd(sc), vmn = _mm_set1_pd(mn), vlo = _mm_set1_pd(lo), vhi = _mm_set1_pd(levels);
    const __m128d big = _mm_set1_pd(0x1p52), sign = _mm_set1_pd(-0.0), rcp = _mm_set1_pd(1.0 / sc);
    const __m128d half = _mm_set1_pd(0.5), near = _mm_set1_pd(1e-9), safe = _mm_set1_pd(0x1p20);
    for (; j + 2 <= n; j += 2) {
        __m128d d = _mm_sub_pd(_mm_loadu_pd(x + j), vmn);
        __m128d y = _mm_mul_pd(d, rcp);
        __m128d a = _mm_andnot_pd(sign, y);
        __m128d r = _mm_sub_pd(_mm_add_pd(a, big), big);                 /* rint(|y|), |y| < 2^20 here */
        __m128d frac = _mm_andnot_pd(sign, _mm_sub_pd(_mm_andnot_pd(sign, _mm_sub_pd(a, r)), half));
        __m128d sure = _mm_and_pd(_mm_cmplt_pd(a, safe), _mm_cmpge_pd(frac, near));
        if (_mm_movemask_pd(sure) != 3) {   /* a near-tie, a large or a non-finite value: divide */
            y = _mm_div_pd(d, vsc);
            a = _mm_andnot_pd(sign, y);
            r = _mm_sub_pd(_mm_add_pd(a, big), big);
            __m128d small = _mm_cmplt_pd(a, big);
            r = _mm_or_pd(_mm_and_pd(small, r), _mm_andnot_pd(small, a));
        }
        __m128d q = _mm_or_pd(r, _mm_and_pd(sign, y));                   /* copysign(rint|y|, y) */
        q = _mm_min_pd(_mm_max_pd(q, vlo), vhi);                         /* NaN lanes: masked below */
        q = _mm_and_pd(q, _mm_cmpord_pd(y, y));
        __m128i c = _mm_cvttpd_epi32(q);
        out[j] = (uint8_t)(_mm_cvtsi128_si32(c) + off);
        out[j + 1] = (uint8_t)(_mm_cvtsi128_si32(_mm_srli_si128(c, 4)) + off);
    }
#endif
    for (; j < n; j++) {
        double y = (x[j] - mn) / sc, q = 0.0;
        if (!isnan(y)) {
            q = round_even(y);
            if (q > levels) q = levels;
            if (q < lo) q = lo;
        }
        out[j] = (uint8_t)((int)q + off);
    }
}

#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#include <stdatomic.h>
/* cpuid's AVX2 and the OS's saved YMM state (KVC_ISA=scalar keeps the SSE2 loop), checked once */
static int intn_have_avx2(void)
{
    static atomic_int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        const char *isa = getenv("KVC_ISA");
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") && !(isa && strcmp(isa, "scalar") == 0);
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
/* intn_code_values four lanes at a time with AVX2 (the same operations per lane as its SSE2 loop, so the same
 * codes); the last n mod 4 through intn_code_values. */
__attribute__((target("avx2"))) static void intn_code_values_avx2(uint8_t *out, const double *x, size_t n, double sc,
                                                                 double mn, double lo, double levels, int off)
{
    size_t j = 0;
    const __m256d vsc = _mm256_set1_pd(sc), vmn = _mm256_set1_pd(mn), vlo = _mm256_set1_pd(lo);
    const __m256d vhi = _mm256_set1_pd(levels), big = _mm256_set1_pd(0x1p52), sign = _mm256_set1_pd(-0.0);
    const __m256d rcp = _mm256_set1_pd(1.0 / sc), half = _mm256_set1_pd(0.5), near = _mm256_set1_pd(1e-9);
    const __m256d safe = _mm256_set1_pd(0x1p20);
    const __m128i voff = _mm_set1_epi32(off), low = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                                   -1, -1);
    for (; j + 4 <= n; j += 4) {
        __m256d d = _mm256_sub_pd(_mm256_loadu_pd(x + j), vmn);
        __m256d y = _mm256_mul_pd(d, rcp);
        __m256d a = _mm256_andnot_pd(sign, y);
        __m256d r = _mm256_sub_pd(_mm256_add_pd(a, big), big);                /* rint(|y|), |y| < 2^20 here */
        __m256d frac = _mm256_andnot_pd(sign, _mm256_sub_pd(_mm256_andnot_pd(sign, _mm256_sub_pd(a, r)), half));
        __m256d sure = _mm256_and_pd(_mm256_cmp_pd(a, safe, _CMP_LT_OQ), _mm256_cmp_pd(frac, near, _CMP_GE_OQ));
        if (_mm256_movemask_pd(sure) != 15) {   /* a near-tie, a large or a non-finite value: divide */
            y = _mm256_div_pd(d, vsc);
            a = _mm256_andnot_pd(sign, y);
            r = _mm256_sub_pd(_mm256_add_pd(a, big), big);
            __m256d small = _mm256_cmp_pd(a, big, _CMP_LT_OQ);
            r = _mm256_or_pd(_mm256_and_pd(small, r), _mm256_andnot_pd(small, a));
        }
        __m256d q = _mm256_or_pd(r, _mm256_and_pd(sign, y));                  /* copysign(rint|y|, y) */
        q = _mm256_min_pd(_mm256_max_pd(q, vlo), vhi);                        /* NaN lanes: masked below */
        q = _mm256_and_pd(q, _mm256_cmp_pd(y, y, _CMP_ORD_Q));
        __m128i c = _mm_add_epi32(_mm256_cvttpd_epi32(q), voff);
        uint32_t four = (uint32_t)_mm_cvtsi128_si32(_mm_shuffle_epi8(c, low));
        memcpy(out + j, &four, 4);
    }
    if (j < n) intn_code_values(out + j, x + j, n - j, sc, mn, lo, levels, off);
}
#endif

/* Codes of x[0..n) with one scale and min, ORed into the stream from bit `bit0` (b bits each). */
static void intn_code_span(uint8_t *codes, size_t bit0, const double *x, size_t n, double sc, double mn, int asym,
                           int b)
{
    double levels = asym ? (double)((1u << b) - 1u) : (double)((1u << (b - 1)) - 1u), lo = asym ? 0.0 : -levels;
    int off = asym ? 0 : 1 << (b - 1);
    if (sc == 0.0) {   /* every code is q = 0 */
        for (size_t j = 0, o = bit0; j < n; j++, o += (size_t)b) codes[o / 8] |= (uint8_t)(off << (o % 8));
        return;
    }
    uint8_t q[256];
    for (size_t j0 = 0; j0 < n; j0 += sizeof q) {
        size_t m = n - j0 < sizeof q ? n - j0 : sizeof q;
#if defined(__x86_64__) && defined(__SSE2__)
        if (m >= 8 && intn_have_avx2()) intn_code_values_avx2(q, x + j0, m, sc, asym ? mn : 0.0, lo, levels, off);
        else
#endif
            intn_code_values(q, x + j0, m, sc, asym ? mn : 0.0, lo, levels, off);
        size_t o = bit0 + j0 * (size_t)b;
        if (b == 8) {
            for (size_t j = 0; j < m; j++) codes[o / 8 + j] |= q[j];
        } else if (b == 4 && o % 8 == 0 && m % 2 == 0) {   /* whole bytes: two codes each, low nibble first */
            uint8_t *c = codes + o / 8;
            for (size_t k = 0; k < m / 2; k++) c[k] |= (uint8_t)(q[2 * k] | q[2 * k + 1] << 4);
        } else if (b == 2 && o % 8 == 0 && m % 4 == 0) {   /* four codes a byte, lowest bits first */
            uint8_t *c = codes + o / 8;
            for (size_t k = 0; k < m / 4; k++)
                c[k] |= (uint8_t)(q[4 * k] | q[4 * k + 1] << 2 | q[4 * k + 2] << 4 | q[4 * k + 3] << 6);
        } else {
            for (size_t j = 0; j < m; j++, o += (size_t)b) codes[o / 8] |= (uint8_t)(q[j] << (o % 8));
        }
    }
}

/* max(h, the largest |x[j]|) for j < n, as the loop "if (fabs(x[j]) > h) h = fabs(x[j])" finds it (a NaN never
 * wins): maxpd(|x|, h) is that comparison lane by lane, and the maximum of numbers >= +0 does not depend on the
 * order they are met in, so lanes may be combined in any order. */
static double span_absmax_ref(const double *x, size_t n, double h)
{
    for (size_t j = 0; j < n; j++)
        if (fabs(x[j]) > h) h = fabs(x[j]);
    return h;
}

#if defined(__x86_64__) && defined(__SSE2__)
__attribute__((target("avx2"))) static double span_absmax_avx2(const double *x, size_t n, double h)
{
    const __m256d sign = _mm256_set1_pd(-0.0);
    __m256d a = _mm256_set1_pd(h), b = a;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        a = _mm256_max_pd(_mm256_andnot_pd(sign, _mm256_loadu_pd(x + j)), a);
        b = _mm256_max_pd(_mm256_andnot_pd(sign, _mm256_loadu_pd(x + j + 4)), b);
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_max_pd(a, b));
    for (int k = 0; k < 4; k++)
        if (l[k] > h) h = l[k];
    return span_absmax_ref(x + j, n - j, h);
}
#endif

static double span_absmax(const double *x, size_t n, double h)
{
#if defined(__x86_64__) && defined(__SSE2__)
    if (n >= 8 && intn_have_avx2()) return span_absmax_avx2(x, n, h);
#endif
    return span_absmax_ref(x, n, h);
}

static void intn_params(StoreTensor *st, const double *xd, const float *xf, double *exact)
{
    if (!intn_fast(st, xf)) {
        intn_params_generic(st, xd, xf, exact);
        return;
    }
    size_t T = st->T, W = st->W, g = intn_g(st), per = intn_per(st), ng = st->n_groups;
    int b = st->fmt.bits, asym = st->fmt.asym;
    double levels = asym ? (double)((1u << b) - 1u) : (double)((1u << (b - 1)) - 1u);
    double *lo = xmalloc(ng * sizeof *lo), *hi = xmalloc(ng * sizeof *hi);
    for (size_t k = 0; k < ng; k++) {
        lo[k] = asym ? HUGE_VAL : 0.0;
        hi[k] = asym ? -HUGE_VAL : 0.0;
    }
    for (size_t t = 0; t < T; t++) {
        const double *x = xd + t * W;
        if (st->fmt.axis == STORE_AXIS_TOKEN) {   /* group k = t * per + j / g: spans of the row, each seen once */
            for (size_t q = 0; q < per; q++) {
                size_t j0 = q * g, j1 = j0 + g < W ? j0 + g : W, k = t * per + q;
                double l = lo[k], h = hi[k];
                if (asym) {
                    for (size_t j = j0; j < j1; j++) {
                        if (x[j] < l) l = x[j];
                        if (x[j] > h) h = x[j];
                    }
                } else {
                    h = span_absmax(x + j0, j1 - j0, h);
                }
                lo[k] = l;
                hi[k] = h;
            }
        } else {   /* group k = t / g * W + j */
            double *l = lo + t / g * W, *h = hi + t / g * W;
            if (asym) {
                for (size_t j = 0; j < W; j++) {
                    if (x[j] < l[j]) l[j] = x[j];
                    if (x[j] > h[j]) h[j] = x[j];
                }
            } else {
                for (size_t j = 0; j < W; j++)
                    if (fabs(x[j]) > h[j]) h[j] = fabs(x[j]);
            }
        }
    }
    for (size_t k = 0; k < ng; k++) {
        double scale = asym ? (hi[k] >= lo[k] ? (hi[k] - lo[k]) / levels : 0.0) : hi[k] / levels;
        double m = asym && hi[k] >= lo[k] ? lo[k] : 0.0;
        intn_put_param(st, k, intn_round_param(scale, st->fmt.scale_type));
        if (asym) intn_put_param(st, ng + k, intn_round_param(m, st->fmt.scale_type));
        if (exact) {
            exact[2 * k] = scale;
            exact[2 * k + 1] = m;
        }
    }
    free(lo);
    free(hi);
}

static void intn_code_row(StoreTensor *st, size_t t, const double *xd, const float *xf, const double *exact)
{
    if (!intn_fast(st, xf)) {
        intn_code_row_generic(st, t, xd, xf, exact);
        return;
    }
    size_t W = st->W, g = intn_g(st), per = intn_per(st), b = (size_t)st->fmt.bits, bit0 = t * W * b;
    double sc, mn;
    if (st->fmt.axis == STORE_AXIS_TOKEN) {
        for (size_t q = 0; q < per; q++) {
            size_t j0 = q * g, j1 = j0 + g < W ? j0 + g : W;
            intn_group_params(st, exact, t * per + q, &sc, &mn);
            intn_code_span(st->codes, bit0 + j0 * b, xd + j0, j1 - j0, sc, mn, st->fmt.asym, (int)b);
        }
    } else {
        for (size_t j = 0; j < W; j++) {
            intn_group_params(st, exact, t / g * W + j, &sc, &mn);
            intn_code_span(st->codes, bit0 + j * b, xd + j, 1, sc, mn, st->fmt.asym, (int)b);
        }
    }
}

/* x[0..n) = the values of codes from bit `bit0` with one scale and min */
static void intn_value_span(double *x, const uint8_t *codes, size_t bit0, size_t n, double sc, double mn, int asym,
                            int b)
{
    int off = asym ? 0 : 1 << (b - 1);
    unsigned mask = (1u << b) - 1u;
    if (bit0 % 8 == 0 && n % (8 / (size_t)b) == 0) {   /* whole bytes, low bits first: the same values, plain loops */
        const uint8_t *c = codes + bit0 / 8;
        if (b == 8 && !asym) {
            for (size_t j = 0; j < n; j++) x[j] = (double)((int)c[j] - off) * sc;
        } else if (b == 8) {
            for (size_t j = 0; j < n; j++) x[j] = (double)((int)c[j] - off) * sc + mn;
        } else if (b == 4) {
            for (size_t k = 0; k < n / 2; k++) {
                double lo = (double)((int)(c[k] & 15u) - off), hi = (double)((int)(c[k] >> 4) - off);
                x[2 * k] = asym ? lo * sc + mn : lo * sc;
                x[2 * k + 1] = asym ? hi * sc + mn : hi * sc;
            }
        } else {
            for (size_t k = 0; k < n / 4; k++)
                for (unsigned i = 0; i < 4; i++) {
                    double code = (double)((int)((c[k] >> (2 * i)) & 3u) - off);
                    x[4 * k + i] = asym ? code * sc + mn : code * sc;
                }
        }
        return;
    }
    for (size_t j = 0; j < n; j++) {
        size_t o = bit0 + j * (size_t)b;
        double code = (double)((int)((codes[o / 8] >> (o % 8)) & mask) - off);
        x[j] = asym ? code * sc + mn : code * sc;
    }
}

static void intn_dequantize(double *x, const StoreTensor *st, const double *exact, size_t t0, size_t n)
{
    if (!intn_fast(st, NULL)) {
        intn_dequantize_generic(x, st, exact, t0, n);
        return;
    }
    size_t W = st->W, g = intn_g(st), per = intn_per(st), b = (size_t)st->fmt.bits;
    double sc, mn;
    for (size_t i = 0; i < n; i++) {
        size_t t = t0 + i, bit0 = t * W * b;
        double *y = x + i * W;
        if (st->fmt.axis == STORE_AXIS_TOKEN) {
            for (size_t q = 0; q < per; q++) {
                size_t j0 = q * g, j1 = j0 + g < W ? j0 + g : W;
                intn_group_params(st, exact, t * per + q, &sc, &mn);
                intn_value_span(y + j0, st->codes, bit0 + j0 * b, j1 - j0, sc, mn, st->fmt.asym, (int)b);
            }
        } else {
            for (size_t j = 0; j < W; j++) {
                intn_group_params(st, exact, t / g * W + j, &sc, &mn);
                intn_value_span(y + j, st->codes, bit0 + j * b, 1, sc, mn, st->fmt.asym, (int)b);
            }
        }
    }
}

static void intn_scales(StoreTensor *st, const double *xd, const float *xf) { intn_params(st, xd, xf, NULL); }

static void intn_row(StoreTensor *st, size_t t, const double *xd, const float *xf)
{
    intn_code_row(st, t, xd, xf, NULL);
}

static void intn_read(float *y, const StoreTensor *st, size_t t)
{
    double *tmp = xmalloc(st->W * sizeof *tmp);
    intn_dequantize(tmp, st, NULL, t, 1);
    for (size_t j = 0; j < st->W; j++) y[j] = (float)tmp[j];
    free(tmp);
}

/* ---- the type table ------------------------------------------------------------------------------------ */

#define QK STORE_QK
static const StoreTypeTraits type_traits[STORE_NTYPES] = {
    /*              name      alias  parsed bits block  block bytes                 layout               f32  scales       quantize_row to_float_row */
    [STORE_F32]    = {"f32",    NULL,  1, 32, 1,  0,                        STORE_LAYOUT_PLAIN,  0, NULL,        f32_row,    f32_read},
    [STORE_F16]    = {"f16",    NULL,  1, 16, 1,  0,                        STORE_LAYOUT_PLAIN,  0, NULL,        f16_row,    f16_read},
    [STORE_BF16]   = {"bf16",   NULL,  1, 16, 1,  0,                        STORE_LAYOUT_PLAIN,  0, NULL,        bf16_row,   bf16_read},
    [STORE_E4M3]   = {"e4m3",   "fp8", 1, 8,  1,  0,                        STORE_LAYOUT_PLAIN,  0, NULL,        e4m3_row,   e4m3_read},
    [STORE_E5M2]   = {"e5m2",   NULL,  1, 8,  1,  0,                        STORE_LAYOUT_PLAIN,  0, NULL,        e5m2_row,   e5m2_read},
    [STORE_INT8]   = {"int8",   NULL,  1, 8,  1,  0,                        STORE_LAYOUT_SCALED, 0, int_scales,  int_row,    int_read},
    [STORE_INT4]   = {"int4",   NULL,  1, 4,  1,  0,                        STORE_LAYOUT_SCALED, 0, int_scales,  int_row,    int_read},
    [STORE_INT2]   = {"int2",   NULL,  1, 2,  1,  0,                        STORE_LAYOUT_SCALED, 0, int_scales,  int_row,    int_read},
    [STORE_Q8_0]   = {"q8_0",   NULL,  1, 8,  QK, sizeof(StoreBlockQ8_0),   STORE_LAYOUT_BLOCK,  1, NULL,        q8_0_row,   q8_0_read},
    [STORE_Q4_0]   = {"q4_0",   NULL,  1, 4,  QK, sizeof(StoreBlockQ4_0),   STORE_LAYOUT_BLOCK,  1, NULL,        q4_0_row,   q4_0_read},
    [STORE_Q4_1]   = {"q4_1",   NULL,  1, 4,  QK, sizeof(StoreBlockQ4_1),   STORE_LAYOUT_BLOCK,  1, NULL,        q4_1_row,   q4_1_read},
    [STORE_Q5_0]   = {"q5_0",   NULL,  1, 5,  QK, sizeof(StoreBlockQ5_0),   STORE_LAYOUT_BLOCK,  1, NULL,        q5_0_row,   q5_read},
    [STORE_Q5_1]   = {"q5_1",   NULL,  1, 5,  QK, sizeof(StoreBlockQ5_1),   STORE_LAYOUT_BLOCK,  1, NULL,        q5_1_row,   q5_read},
    [STORE_IQ4_NL] = {"iq4_nl", NULL,  1, 4,  QK, sizeof(StoreBlockIQ4_NL), STORE_LAYOUT_BLOCK,  1, NULL,        iq4_nl_row, iq4_nl_read},
    [STORE_INTN]   = {"intN",   NULL,  0, 0,  1,  0,                        STORE_LAYOUT_STREAM, 0, intn_scales, intn_row,   intn_read},
};
#undef QK

const StoreTypeTraits *store_type_traits(StoreType t) { return (unsigned)t < STORE_NTYPES ? &type_traits[t] : NULL; }

static const StoreTypeTraits *traits_of(StoreType t)
{
    assert((unsigned)t < STORE_NTYPES && "bad store type");
    return &type_traits[t];
}

/* ---- names, shapes, allocation ------------------------------------------------------------------------ */

const char *store_type_name(StoreType t) { return (unsigned)t < STORE_NTYPES ? type_traits[t].name : NULL; }

int store_type_bits(StoreType t) { return traits_of(t)->bits; }

int store_type_is_int(StoreType t) { return (unsigned)t < STORE_NTYPES && type_traits[t].layout == STORE_LAYOUT_SCALED; }

int store_type_from_name(StoreType *t, const char *name)
{
    for (int i = 0; i < STORE_NTYPES; i++)
        if (strcmp(name, type_traits[i].name) == 0) {
            *t = (StoreType)i;
            return 0;
        }
    return -1;
}

StoreFormat store_intn_format(int bits, int asym, StoreAxis axis, size_t group, StoreScaleType scale_type)
{
    StoreFormat f;
    memset(&f, 0, sizeof f);
    f.type = STORE_INTN;
    f.axis = axis;
    f.bits = bits;
    f.asym = asym;
    f.group = group;
    f.scale_type = scale_type;
    return f;
}

/* The names of the parsed types, for messages: "a, b, c (+ch), d" (int types marked; every: all parsed
 * types, else the scaled ones only, "a, b and c"). */
static void type_list(char *buf, size_t cap, int every)
{
    size_t len = 0, n = 0, total = 0;
    for (int t = 0; t < STORE_NTYPES; t++) total += type_traits[t].parsed && (every || store_type_is_int((StoreType)t));
    buf[0] = '\0';
    for (int t = 0; t < STORE_NTYPES && len < cap; t++) {
        const StoreTypeTraits *tr = &type_traits[t];
        if (!tr->parsed || !(every || tr->layout == STORE_LAYOUT_SCALED)) continue;
        const char *sep = n == 0 ? "" : !every && n + 1 == total ? " and " : ", ";
        int ch = every && tr->layout == STORE_LAYOUT_SCALED &&
                 !(t + 1 < STORE_NTYPES && type_traits[t + 1].layout == STORE_LAYOUT_SCALED);
        len += (size_t)snprintf(buf + len, cap - len, "%s%s%s", sep, tr->name, ch ? " (+ch)" : "");
        n++;
    }
}

static int parse_type(StoreFormat *f, const char *s, const char *what, const char *whole)
{
    size_t n = strlen(s);
    char names[256];
    f->axis = STORE_AXIS_TOKEN;
    if (n > 2 && strcmp(s + n - 2, "ch") == 0) {
        f->axis = STORE_AXIS_CHANNEL;
        n -= 2;
    }
    int found = 0;
    for (int t = 0; t < STORE_NTYPES && !found; t++) {   /* the formats the decode kernels read (not intN) */
        const StoreTypeTraits *tr = &type_traits[t];
        if (!tr->parsed) continue;
        found = (strlen(tr->name) == n && strncmp(s, tr->name, n) == 0) ||
                (tr->alias && strlen(tr->alias) == n && strncmp(s, tr->alias, n) == 0);
        if (found) f->type = (StoreType)t;
    }
    if (!found) {
        type_list(names, sizeof names, 1);
        return kvc_fail("%s: unknown format; expected %s or lrR[:TYPE] (got \"%s\")", what, names, whole);
    }
    if (f->axis == STORE_AXIS_CHANNEL && !store_type_is_int(f->type)) {
        type_list(names, sizeof names, 0);
        return kvc_fail("%s: only %s take the \"ch\" (per-channel scale) suffix (got \"%s\")", what, names, whole);
    }
    return 0;
}

int store_format_parse(StoreFormat *f, const char *name, const char *what)
{
    memset(f, 0, sizeof *f);
    if (strncmp(name, "lr", 2) == 0) {
        const char *p = name + 2;
        char *end;
        if (*p < '0' || *p > '9') return kvc_fail("%s: low rank needs a rank, e.g. lr32 (got \"%s\")", what, name);
        unsigned long r = strtoul(p, &end, 10);
        if (r < 1 || r > 65536) return kvc_fail("%s: rank must be in 1..65536 (got \"%s\")", what, name);
        if (*end == '\0') {
            f->type = STORE_F16;
            f->rank = r;
            return 0;
        }
        if (*end != ':') return kvc_fail("%s: expected lrR or lrR:TYPE (got \"%s\")", what, name);
        if (parse_type(f, end + 1, what, name)) return -1;
        f->rank = r;
        return 0;
    }
    return parse_type(f, name, what, name);
}

void store_format_name(char *buf, size_t cap, StoreFormat f)
{
    const char *t = store_type_name(f.type), *ax = f.axis == STORE_AXIS_CHANNEL ? "ch" : "";
    if (!f.rank) snprintf(buf, cap, "%s%s", t, ax);
    else if (f.type == STORE_F16) snprintf(buf, cap, "lr%zu", f.rank);
    else snprintf(buf, cap, "lr%zu:%s%s", f.rank, t, ax);
}

size_t store_row_bytes(StoreType t, size_t W)
{
    const StoreTypeTraits *tr = traits_of(t);
    if (tr->layout == STORE_LAYOUT_STREAM) return 0;   /* not row-addressable in general; see store_alloc */
    if (tr->block_size > 1) return W / tr->block_size * tr->block_bytes;
    return (W * (size_t)tr->bits + 7) / 8;
}

int store_check(StoreFormat f, size_t T, size_t D, const char *what)
{
    if ((unsigned)f.type >= STORE_NTYPES) return kvc_fail("%s: invalid format (got %d)", what, (int)f.type);
    const StoreTypeTraits *tr = &type_traits[f.type];
    if (T < 1) return kvc_fail("%s: needs at least one token (got %zu)", what, T);
    if (D < 1 || D > 65536) return kvc_fail("%s: head dim must be in 1..65536 (got %zu)", what, D);
    if (f.rank > D) return kvc_fail("%s: rank must be at most the head dim %zu (got %zu)", what, D, f.rank);
    size_t W = f.rank ? f.rank : D, n;
    if (tr->block_size > 1 && W % tr->block_size != 0)
        return kvc_fail("%s: %s stores blocks of %zu along the row; %s %zu is not a multiple of %zu (got %zu)", what,
                        tr->name, tr->block_size, f.rank ? "rank" : "head dim", W, tr->block_size, W);
    if (tr->layout == STORE_LAYOUT_STREAM) {
        if (f.rank) return kvc_fail("%s: intN stores full-rank tensors only (got rank %zu)", what, f.rank);
        if (f.bits < (f.asym ? 1 : 2) || f.bits > 8)
            return kvc_fail("%s: intN codes have %s..8 bits (got %d)", what, f.asym ? "1" : "2", f.bits);
        if ((unsigned)f.scale_type > STORE_SCALE_F32 || (unsigned)f.axis > STORE_AXIS_CHANNEL)
            return kvc_fail("%s: invalid intN scale type or axis (got %d, %d)", what, (int)f.scale_type, (int)f.axis);
    }
    if (size_mul(T, store_row_bytes(f.type, W), &n) || n > ((size_t)1 << 46) || size_mul(T, D, &n) ||
        size_mul(n, sizeof(double), &n))
        return kvc_fail("%s: tensor too large (got %zu x %zu)", what, T, D);
    return 0;
}

void store_alloc(StoreTensor *st, StoreFormat f, size_t T, size_t D)
{
    int ok = store_check(f, T, D, "store") == 0;
    assert(ok);
    (void)ok;
    const StoreTypeTraits *tr = &type_traits[f.type];
    memset(st, 0, sizeof *st);
    st->fmt = f;
    st->T = T;
    st->D = D;
    st->W = f.rank ? f.rank : D;
    if (f.rank) st->basis = xalloc64(f.rank * D * sizeof *st->basis);
    if (tr->layout == STORE_LAYOUT_STREAM) {
        st->code_bytes = (T * st->W * (size_t)f.bits + 7) / 8;
        st->row_bytes = st->W * (size_t)f.bits % 8 == 0 ? st->W * (size_t)f.bits / 8 : 0;
        st->codes = xalloc64(st->code_bytes);
        st->n_groups = f.axis == STORE_AXIS_TOKEN ? T * intn_per(st) : intn_per(st) * st->W;
        st->param_bytes = st->n_groups * (f.asym ? 2u : 1u) * (f.scale_type == STORE_SCALE_F32 ? 4u : 2u);
        st->params = xalloc64(st->param_bytes);
        return;
    }
    st->row_bytes = store_row_bytes(f.type, st->W);
    st->codes = xalloc64(T * st->row_bytes);
    if (tr->layout == STORE_LAYOUT_SCALED) {
        st->n_scales = f.axis == STORE_AXIS_TOKEN ? T : st->W;
        st->scales = xalloc64(st->n_scales * sizeof *st->scales);
    }
}

void store_free(StoreTensor *st)
{
    if (!st) return;
    free(st->codes);
    free(st->scales);
    free(st->basis);
    free(st->params);
    memset(st, 0, sizeof *st);
}

/* Bytes of the codes buffer. */
static size_t codes_size(const StoreTensor *st)
{
    return st->fmt.type == STORE_INTN ? st->code_bytes : st->T * st->row_bytes;
}

uint64_t store_bytes(const StoreTensor *st)
{
    return (uint64_t)codes_size(st) + 2u * (uint64_t)st->n_scales + (uint64_t)st->param_bytes +
           (st->basis ? 2u * (uint64_t)st->fmt.rank * st->D : 0u);
}

/* ---- quantize ------------------------------------------------------------------------------------------ */

/* The scale pass, then every row, through the type's table row (xd or xf set). */
static void quantize(StoreTensor *st, const double *xd, const float *xf)
{
    assert(st->codes);
    const StoreTypeTraits *tr = traits_of(st->fmt.type);
    size_t T = st->T, W = st->W;
    memset(st->codes, 0, codes_size(st));
    if (tr->scales) tr->scales(st, xd, xf);
    float *tmp = tr->f32_rows && xd ? xmalloc(W * sizeof *tmp) : NULL;
    for (size_t t = 0; t < T; t++) {
        const double *rd = xd ? xd + t * W : NULL;
        const float *rf = xf ? xf + t * W : NULL;
        if (tmp) {   /* float32 arithmetic: the double input rounded to float32 first */
            for (size_t j = 0; j < W; j++) tmp[j] = (float)rd[j];
            rd = NULL;
            rf = tmp;
        }
        tr->quantize_row(st, t, rd, rf);
    }
    free(tmp);
}

void store_quantize_f64(StoreTensor *st, const double *x) { quantize(st, x, NULL); }

void store_quantize_f32(StoreTensor *st, const float *x) { quantize(st, NULL, x); }

void store_quantize_intn_unrounded_f64(StoreTensor *st, const double *x, double *exact)
{
    assert(st->fmt.type == STORE_INTN && st->codes);
    memset(st->codes, 0, st->code_bytes);
    intn_params(st, x, NULL, exact);
    for (size_t t = 0; t < st->T; t++) intn_code_row(st, t, x + t * st->W, NULL, exact);
}

void store_dequantize_intn_unrounded_f64(double *x, const StoreTensor *st, const double *exact)
{
    assert(st->fmt.type == STORE_INTN);
    intn_dequantize(x, st, exact, 0, st->T);
}

void store_set_basis_f64(StoreTensor *st, const double *B)
{
    assert(st->basis);
    for (size_t i = 0; i < st->fmt.rank * st->D; i++) st->basis[i] = half_from_double(B[i]);
}

void store_set_basis_f32(StoreTensor *st, const float *B)
{
    assert(st->basis);
    for (size_t i = 0; i < st->fmt.rank * st->D; i++) st->basis[i] = half_from_float(B[i]);
}

/* ---- dequantize ---------------------------------------------------------------------------------------- */

void store_dequantize_rows_f32(float *x, const StoreTensor *st, size_t t0, size_t n)
{
    const StoreTypeTraits *tr = traits_of(st->fmt.type);
    assert(t0 + n <= st->T);
    for (size_t i = 0; i < n; i++) tr->to_float_row(x + i * st->W, st, t0 + i);
}

void store_dequantize_f32(float *x, const StoreTensor *st)
{
    if (!st->fmt.rank) {
        store_dequantize_rows_f32(x, st, 0, st->T);
        return;
    }
    size_t R = st->fmt.rank, D = st->D;
    float *c = xmalloc(R * sizeof *c), *B = xmalloc(R * D * sizeof *B);
    for (size_t i = 0; i < R * D; i++) B[i] = half_to_float(st->basis[i]);
    for (size_t t = 0; t < st->T; t++) {
        store_dequantize_rows_f32(c, st, t, 1);
        float *o = x + t * D;
        for (size_t j = 0; j < D; j++) o[j] = 0.0f;
        for (size_t r = 0; r < R; r++)
            for (size_t j = 0; j < D; j++) o[j] += c[r] * B[r * D + j];
    }
    free(c);
    free(B);
}

void store_dequantize_f64(double *x, const StoreTensor *st)
{
    size_t W = st->W, D = st->D, R = st->fmt.rank, T = st->T;
    if (st->fmt.type == STORE_INTN) {   /* values in double (see store.h) */
        intn_dequantize(x, st, NULL, 0, T);
        return;
    }
    if (!R) {
        float *row = xmalloc(W * sizeof *row);
        for (size_t t = 0; t < T; t++) {
            store_dequantize_rows_f32(row, st, t, 1);   /* values are exact in float32 */
            for (size_t j = 0; j < D; j++) x[t * D + j] = row[j];
        }
        free(row);
        return;
    }
    /* X' = C' B' in double through BLAS (dgemm), like every product of the quality path. */
    float *row = xmalloc(R * sizeof *row);
    double *C = xmalloc(T * R * sizeof *C), *B = xmalloc(R * D * sizeof *B);
    for (size_t i = 0; i < R * D; i++) B[i] = half_to_float(st->basis[i]);
    for (size_t t = 0; t < T; t++) {
        store_dequantize_rows_f32(row, st, t, 1);
        for (size_t r = 0; r < R; r++) C[t * R + r] = row[r];
    }
    la_matmul(x, C, B, T, R, D);
    free(row);
    free(C);
    free(B);
}

int store_format_equal(StoreFormat a, StoreFormat b)
{
    return a.type == b.type && a.axis == b.axis && a.rank == b.rank && a.bits == b.bits && a.asym == b.asym &&
           a.group == b.group && a.scale_type == b.scale_type;
}

/* ---- re-expressing a stored tensor ---------------------------------------------------------------------- */

StoreFormat store_intn_int_format(StoreFormat f, size_t T, size_t W)
{
    if (f.type != STORE_INTN || f.asym || f.scale_type != STORE_SCALE_F16) return f;
    if (f.bits != 8 && f.bits != 4 && f.bits != 2) return f;
    if (W * (size_t)f.bits % 8 != 0) return f;
    size_t whole = f.axis == STORE_AXIS_TOKEN ? W : T;
    if (f.group != 0 && f.group < whole) return f;
    StoreFormat g;
    memset(&g, 0, sizeof g);
    g.type = f.bits == 8 ? STORE_INT8 : f.bits == 4 ? STORE_INT4 : STORE_INT2;
    g.axis = f.axis;
    g.rank = f.rank;
    return g;
}

int store_intn_to_int(StoreTensor *st)
{
    StoreFormat g = store_intn_int_format(st->fmt, st->T, st->W);
    if (g.type == st->fmt.type) return 0;
    /* one group per row (axis token: group t) or per column (axis channel: group j): the scales in order */
    assert(st->n_groups == (g.axis == STORE_AXIS_TOKEN ? st->T : st->W) && st->row_bytes > 0);
    uint16_t *scales = xalloc64(st->n_groups * sizeof *scales);
    for (size_t k = 0; k < st->n_groups; k++) scales[k] = load16(st->params + 2 * k);
    if (g.type == STORE_INT8)   /* stored n = code + 128 -> the code's two's-complement byte */
        for (size_t i = 0; i < st->code_bytes; i++) st->codes[i] ^= 0x80u;
    free(st->params);
    st->params = NULL;
    st->param_bytes = 0;
    st->n_scales = st->n_groups;
    st->n_groups = 0;
    st->code_bytes = 0;
    st->scales = scales;
    st->fmt = g;
    assert(st->row_bytes == store_row_bytes(g.type, st->W));
    return 1;
}

int store_set_lowrank_f64(StoreTensor *st, size_t D, const double *B, const char *what)
{
    StoreFormat f = st->fmt;
    f.rank = st->W;
    if (store_check(f, st->T, D, what)) return -1;
    free(st->basis);
    st->fmt = f;
    st->D = D;
    st->basis = xalloc64(f.rank * D * sizeof *st->basis);
    store_set_basis_f64(st, B);
    return 0;
}
