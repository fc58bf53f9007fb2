/* store: stored KV-cache formats (see store.h for the definitions). Scalar, portable C; the speed path
 * lives in src/decode/. T tokens, D head dim, W stored columns per token (D, or R for low rank). */
#include "store/store.h"
#include "base/linalg.h"
#include "base/util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- element conversions ---------------------------------------------------------------------------- */

/* Rounds a >= 0 to nearest even in a binary format with M explicit mantissa bits whose smallest normal
 * exponent is emin (gradual underflow below), with no upper limit. Exact: scaling by powers of two and
 * rint (round half to even in the default rounding mode). */
static double round_mag(double a, int M, int emin)
{
    if (a == 0.0) return 0.0;
    int e;
    (void)frexp(a, &e);           /* a = f * 2^e, f in [0.5, 1): the unbiased exponent is e - 1 */
    int ex = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, ex - M);
    return rint(a / quantum) * quantum;
}

/* Bits (exponent code and mantissa, no sign) of a representable magnitude v. */
static unsigned encode_mag(double v, int M, int emin, int bias)
{
    if (v == 0.0) return 0;
    int e;
    (void)frexp(v, &e);
    int ex = e - 1;
    if (ex < emin) return (unsigned)(v / ldexp(1.0, emin - M));
    return ((unsigned)(ex + bias) << M) | (unsigned)(v / ldexp(1.0, ex - M) - ldexp(1.0, M));
}

uint16_t store_f16_from_f64(double x)
{
    unsigned sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | 0x7E00u);
    double v = round_mag(fabs(x), 10, -14);
    if (v > 65504.0) return (uint16_t)(sign | 0x7C00u);
    return (uint16_t)(sign | encode_mag(v, 10, -14, 15));
}

uint16_t store_f16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);   /* NaN */
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  /* >= 65520 rounds to inf; inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        float a;
        memcpy(&a, &ax, sizeof a);
        return (uint16_t)(sign | (uint32_t)rint((double)a * 16777216.0));
    }
    uint32_t m = ax + 0xFFFu + ((ax >> 13) & 1u);              /* round the 13 dropped bits, ties to even */
    return (uint16_t)(sign | ((m - 0x38000000u) >> 13));       /* rebias 127 -> 15 */
}

float store_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, x;
    if (e == 0x1F) {
        x = sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u);  /* inf, or NaN with the quiet bit */
    } else if (e) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        float v = (float)m * 0x1p-24f;                              /* subnormal: exact */
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t store_bf16_from_f64(double x)
{
    unsigned sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | 0x7FC0u);
    double v = round_mag(fabs(x), 7, -126);
    if (v > 0x1.FEp127) return (uint16_t)(sign | 0x7F80u);
    return (uint16_t)(sign | encode_mag(v, 7, -126, 127));
}

uint16_t store_bf16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float store_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint8_t store_e4m3_from_f64(double x)
{
    if (isnan(x)) return 0x7F;
    unsigned sign = signbit(x) ? 0x80u : 0u;
    double v = round_mag(fabs(x), 3, -6);       /* infinities round to infinity, then saturate */
    if (v > 448.0) return (uint8_t)(sign | 0x7Eu);
    return (uint8_t)(sign | encode_mag(v, 3, -6, 7));
}

uint8_t store_e5m2_from_f64(double x)
{
    if (isnan(x)) return 0x7F;
    unsigned sign = signbit(x) ? 0x80u : 0u;
    double v = round_mag(fabs(x), 2, -14);
    if (v > 57344.0) return (uint8_t)(sign | 0x7Bu);
    return (uint8_t)(sign | encode_mag(v, 2, -14, 15));
}

/* E4M3 is FP16 with the exponent field one bit shorter: shift the code into FP16 position and scale by
 * 2^(15 - 7) = 256. S.1111.111 is NaN. */
float store_e4m3_to_f32(uint8_t c)
{
    if ((c & 0x7Fu) == 0x7Fu) return (c & 0x80u) ? -NAN : NAN;
    uint16_t h = (uint16_t)(((c & 0x80u) << 8) | ((c & 0x7Fu) << 7));
    return store_f16_to_f32(h) * 256.0f;
}

/* E5M2 is the top byte of an FP16. */
float store_e5m2_to_f32(uint8_t c) { return store_f16_to_f32((uint16_t)(c << 8)); }

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
        y[b].d = store_f16_from_f32(d);
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
        y[b].d = store_f16_from_f32(d);
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
        y[b].d = store_f16_from_f32(d);
        y[b].m = store_f16_from_f32(min);
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
        y[b].d = store_f16_from_f32(d);
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
        y[b].d = store_f16_from_f32(d);
        y[b].m = store_f16_from_f32(min);
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
            y[b].d = store_f16_from_f32(sumqx / sumq2);
        }
        for (int j = 0; j < STORE_QK / 2; j++) y[b].qs[j] = (uint8_t)(L[j] | (L[j + STORE_QK / 2] << 4));
    }
}

/* ---- names, shapes, allocation ------------------------------------------------------------------------ */

static const char *const type_names[STORE_NTYPES] = {
    "f32", "f16", "bf16", "e4m3", "e5m2", "int8", "int4", "int2", "q8_0", "q4_0",
    "q4_1", "q5_0", "q5_1", "iq4_nl", "intN",
};

const char *store_type_name(StoreType t) { return (unsigned)t < STORE_NTYPES ? type_names[t] : NULL; }

int store_type_bits(StoreType t)
{
    static const int bits[STORE_NTYPES] = {32, 16, 16, 8, 8, 8, 4, 2, 8, 4, 4, 5, 5, 4, 0};
    assert((unsigned)t < STORE_NTYPES);
    return bits[t];
}

int store_type_is_int(StoreType t) { return t == STORE_INT8 || t == STORE_INT4 || t == STORE_INT2; }

/* ggml block formats: 32 values along the row with the block scale inside the row */
static int is_block(StoreType t) { return t >= STORE_Q8_0 && t <= STORE_IQ4_NL; }

int store_type_from_name(StoreType *t, const char *name)
{
    for (int i = 0; i < STORE_NTYPES; i++)
        if (strcmp(name, type_names[i]) == 0) {
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

static int parse_type(StoreFormat *f, const char *s, const char *what, const char *whole)
{
    size_t n = strlen(s);
    f->axis = STORE_AXIS_TOKEN;
    if (n > 2 && strcmp(s + n - 2, "ch") == 0) {
        f->axis = STORE_AXIS_CHANNEL;
        n -= 2;
    }
    if (n == 3 && strncmp(s, "fp8", 3) == 0) {
        f->type = STORE_E4M3;
    } else {
        int found = 0;
        for (int t = 0; t <= STORE_IQ4_NL; t++)   /* the formats the decode kernels read (not intN) */
            if (strlen(type_names[t]) == n && strncmp(s, type_names[t], n) == 0) {
                f->type = (StoreType)t;
                found = 1;
            }
        if (!found)
            return kvc_fail("%s: unknown format; expected f32, f16, bf16, e4m3, e5m2, int8, int4, int2 (+ch), "
                            "q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl or lrR[:TYPE] (got \"%s\")", what, whole);
    }
    if (f->axis == STORE_AXIS_CHANNEL && !store_type_is_int(f->type))
        return kvc_fail("%s: only int8, int4 and int2 take the \"ch\" (per-channel scale) suffix (got \"%s\")",
                        what, whole);
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
    switch (t) {
    case STORE_F32: return 4 * W;
    case STORE_F16:
    case STORE_BF16: return 2 * W;
    case STORE_E4M3:
    case STORE_E5M2:
    case STORE_INT8: return W;
    case STORE_INT4: return (W + 1) / 2;
    case STORE_INT2: return (W + 3) / 4;
    case STORE_Q8_0: return W / STORE_QK * sizeof(StoreBlockQ8_0);
    case STORE_Q4_0: return W / STORE_QK * sizeof(StoreBlockQ4_0);
    case STORE_Q4_1: return W / STORE_QK * sizeof(StoreBlockQ4_1);
    case STORE_Q5_0: return W / STORE_QK * sizeof(StoreBlockQ5_0);
    case STORE_Q5_1: return W / STORE_QK * sizeof(StoreBlockQ5_1);
    case STORE_IQ4_NL: return W / STORE_QK * sizeof(StoreBlockIQ4_NL);
    case STORE_INTN: return 0;   /* not row-addressable in general; see store_alloc */
    case STORE_NTYPES: break;
    }
    assert(0 && "bad store type");
    return 0;
}

int store_check(StoreFormat f, size_t T, size_t D, const char *what)
{
    if ((unsigned)f.type >= STORE_NTYPES) return kvc_fail("%s: invalid format (got %d)", what, (int)f.type);
    if (T < 1) return kvc_fail("%s: needs at least one token (got %zu)", what, T);
    if (D < 1 || D > 65536) return kvc_fail("%s: head dim must be in 1..65536 (got %zu)", what, D);
    if (f.rank > D) return kvc_fail("%s: rank must be at most the head dim %zu (got %zu)", what, D, f.rank);
    size_t W = f.rank ? f.rank : D, n;
    if (is_block(f.type) && W % STORE_QK != 0)
        return kvc_fail("%s: %s stores blocks of 32 along the row; %s %zu is not a multiple of 32 (got %zu)",
                        what, store_type_name(f.type), f.rank ? "rank" : "head dim", W, W);
    if (f.type == STORE_INTN) {
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

/* Groups of a STORE_INTN tensor: per row (axis token) or per column (axis channel), and in all. */
static size_t intn_extent(const StoreTensor *st) { return st->fmt.axis == STORE_AXIS_TOKEN ? st->W : st->T; }
static size_t intn_g(const StoreTensor *st)
{
    size_t e = intn_extent(st);
    return st->fmt.group && st->fmt.group < e ? st->fmt.group : e;
}

static void *alloc64(size_t n)
{
    size_t m = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, m ? m : 64);
    if (!p) {
        fprintf(stderr, "kvc: out of memory (allocating %zu bytes)\n", n);
        abort();
    }
    memset(p, 0, m ? m : 64);
    return p;
}

void store_alloc(StoreTensor *st, StoreFormat f, size_t T, size_t D)
{
    int ok = store_check(f, T, D, "store") == 0;
    assert(ok);
    (void)ok;
    memset(st, 0, sizeof *st);
    st->fmt = f;
    st->T = T;
    st->D = D;
    st->W = f.rank ? f.rank : D;
    st->row_bytes = store_row_bytes(f.type, st->W);
    st->codes = alloc64(T * st->row_bytes);
    if (store_type_is_int(f.type)) {
        st->n_scales = f.axis == STORE_AXIS_TOKEN ? T : st->W;
        st->scales = alloc64(st->n_scales * sizeof *st->scales);
    }
    if (f.rank) st->basis = alloc64(f.rank * D * sizeof *st->basis);
    if (f.type == STORE_INTN) {
        free(st->codes);
        st->code_bytes = (T * st->W * (size_t)f.bits + 7) / 8;
        st->row_bytes = st->W * (size_t)f.bits % 8 == 0 ? st->W * (size_t)f.bits / 8 : 0;
        st->codes = alloc64(st->code_bytes);
        size_t g = intn_g(st), per = (intn_extent(st) + g - 1) / g;
        st->n_groups = f.axis == STORE_AXIS_TOKEN ? T * per : per * st->W;
        st->param_bytes = st->n_groups * (f.asym ? 2u : 1u) * (f.scale_type == STORE_SCALE_F32 ? 4u : 2u);
        st->params = alloc64(st->param_bytes);
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

uint64_t store_bytes(const StoreTensor *st)
{
    uint64_t codes = st->fmt.type == STORE_INTN ? (uint64_t)st->code_bytes : (uint64_t)st->T * st->row_bytes;
    return codes + 2u * (uint64_t)st->n_scales + (uint64_t)st->param_bytes +
           (st->basis ? 2u * (uint64_t)st->fmt.rank * st->D : 0u);
}

/* ---- quantize ------------------------------------------------------------------------------------------ */

/* Element (t, j) of the input, as double: the input is either float or double. */
typedef struct Src {
    const double *d;
    const float *f;
    size_t W;
} Src;

static inline double src_at(const Src *s, size_t t, size_t j)
{
    return s->d ? s->d[t * s->W + j] : (double)s->f[t * s->W + j];
}

static int qmax_of(StoreType t) { return t == STORE_INT8 ? 127 : t == STORE_INT4 ? 7 : 1; }

/* The FP16 scale of a group whose max |x| is amax. */
static uint16_t group_scale(double amax, int qmax)
{
    if (!(amax > 0.0)) return 0;
    uint16_t h = store_f16_from_f64(amax / qmax);
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
    switch (t) {
    case STORE_INT8: row[j] = (uint8_t)(int8_t)code; break;
    case STORE_INT4: row[j / 2] |= (uint8_t)((code + 8) << (4 * (j % 2))); break;
    case STORE_INT2: row[j / 4] |= (uint8_t)((code + 2) << (2 * (j % 4))); break;
    default: assert(0);
    }
}

static int get_code(const uint8_t *row, StoreType t, size_t j)
{
    switch (t) {
    case STORE_INT8: return (int8_t)row[j];
    case STORE_INT4: return ((row[j / 2] >> (4 * (j % 2))) & 0xF) - 8;
    case STORE_INT2: return ((row[j / 4] >> (2 * (j % 4))) & 0x3) - 2;
    default: assert(0);
    }
    return 0;
}

static void quantize_int(StoreTensor *st, const Src *s)
{
    StoreType ty = st->fmt.type;
    int qmax = qmax_of(ty);
    size_t T = st->T, W = st->W;
    memset(st->codes, 0, T * st->row_bytes);
    if (st->fmt.axis == STORE_AXIS_TOKEN) {
        for (size_t t = 0; t < T; t++) {
            double amax = 0.0;
            for (size_t j = 0; j < W; j++) {
                double a = fabs(src_at(s, t, j));
                if (a > amax) amax = a;
            }
            st->scales[t] = group_scale(amax, qmax);
            double sc = store_f16_to_f32(st->scales[t]);
            uint8_t *row = st->codes + t * st->row_bytes;
            for (size_t j = 0; j < W; j++) put_code(row, ty, j, int_code(src_at(s, t, j), sc, qmax));
        }
    } else {
        double *amax = xcalloc(W, sizeof *amax), *sc = xmalloc(W * sizeof *sc);
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < W; j++) {
                double a = fabs(src_at(s, t, j));
                if (a > amax[j]) amax[j] = a;
            }
        for (size_t j = 0; j < W; j++) {
            st->scales[j] = group_scale(amax[j], qmax);
            sc[j] = store_f16_to_f32(st->scales[j]);
        }
        for (size_t t = 0; t < T; t++) {
            uint8_t *row = st->codes + t * st->row_bytes;
            for (size_t j = 0; j < W; j++) put_code(row, ty, j, int_code(src_at(s, t, j), sc[j], qmax));
        }
        free(amax);
        free(sc);
    }
}

/* ---- intN: grouped integer codes in one bit stream ----------------------------------------------------- */

static size_t intn_group_of(const StoreTensor *st, size_t t, size_t j, size_t g, size_t per)
{
    return st->fmt.axis == STORE_AXIS_TOKEN ? t * per + j / g : t / g * st->W + j;
}

/* v rounded to the parameter type, saturated to its largest finite value */
static double intn_round_param(double v, StoreScaleType ty)
{
    if (ty == STORE_SCALE_F16) {
        uint16_t h = store_f16_from_f64(v);
        if ((h & 0x7FFFu) == 0x7C00u) h = (uint16_t)((h & 0x8000u) | 0x7BFFu);
        return store_f16_to_f32(h);
    }
    if (fabs(v) > FLT_MAX) return v > 0 ? FLT_MAX : -FLT_MAX;
    return (float)v;
}

static void intn_put_param(StoreTensor *st, size_t k, double v)
{
    if (st->fmt.scale_type == STORE_SCALE_F16) {
        uint16_t h = store_f16_from_f64(v);
        memcpy(st->params + 2 * k, &h, 2);
    } else {
        float f = (float)v;
        memcpy(st->params + 4 * k, &f, 4);
    }
}

static double intn_get_param(const StoreTensor *st, size_t k)
{
    if (st->fmt.scale_type == STORE_SCALE_F16) {
        uint16_t h;
        memcpy(&h, st->params + 2 * k, 2);
        return store_f16_to_f32(h);
    }
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

/* Quantizes into a STORE_INTN tensor; exact != NULL: the lesson's unrounded parameters (see store.h). */
static void intn_quantize(StoreTensor *st, const Src *s, double *exact)
{
    size_t T = st->T, W = st->W, g = intn_g(st), per = (intn_extent(st) + g - 1) / g, ng = st->n_groups;
    int b = st->fmt.bits, asym = st->fmt.asym;
    double levels = asym ? (double)((1u << b) - 1u) : (double)((1u << (b - 1)) - 1u);
    double *lo = xmalloc(ng * sizeof *lo), *hi = xmalloc(ng * sizeof *hi);
    double *sc = xmalloc(ng * sizeof *sc), *mn = xmalloc(ng * sizeof *mn);
    for (size_t k = 0; k < ng; k++) {
        lo[k] = asym ? HUGE_VAL : 0.0;
        hi[k] = asym ? -HUGE_VAL : 0.0;
    }
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < W; j++) {
            size_t k = intn_group_of(st, t, j, g, per);
            double x = src_at(s, t, j);
            if (asym) {
                if (x < lo[k]) lo[k] = x;
                if (x > hi[k]) hi[k] = x;
            } else if (fabs(x) > hi[k]) {
                hi[k] = fabs(x);
            }
        }
    memset(st->codes, 0, st->code_bytes);
    for (size_t k = 0; k < ng; k++) {
        double scale = asym ? (hi[k] >= lo[k] ? (hi[k] - lo[k]) / levels : 0.0) : hi[k] / levels;
        double m = asym && hi[k] >= lo[k] ? lo[k] : 0.0;
        double rs = intn_round_param(scale, st->fmt.scale_type), rm = asym ? intn_round_param(m, st->fmt.scale_type) : 0;
        intn_put_param(st, k, rs);
        if (asym) intn_put_param(st, ng + k, rm);
        if (exact) {
            exact[2 * k] = sc[k] = scale;
            exact[2 * k + 1] = mn[k] = m;
        } else {
            sc[k] = rs;
            mn[k] = rm;
        }
    }
    unsigned off = asym ? 0u : 1u << (b - 1);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < W; j++) {
            size_t k = intn_group_of(st, t, j, g, per);
            double x = src_at(s, t, j), q = 0.0;
            if (sc[k] != 0.0 && !isnan(x)) {
                q = rint(asym ? (x - mn[k]) / sc[k] : x / sc[k]);
                if (q > levels) q = levels;
                if (q < (asym ? 0.0 : -levels)) q = asym ? 0.0 : -levels;
            }
            intn_put(st->codes, (t * W + j) * (size_t)b, (unsigned)((int)q + (int)off), b);
        }
    free(lo);
    free(hi);
    free(sc);
    free(mn);
}

/* x (t0..t0+n rows, W) = the values of st: the stored parameters, or exact ones (unrounded mode) */
static void intn_dequantize(double *x, const StoreTensor *st, const double *exact, size_t t0, size_t n)
{
    size_t W = st->W, g = intn_g(st), per = (intn_extent(st) + g - 1) / g, ng = st->n_groups;
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

void store_quantize_intn_unrounded_f64(StoreTensor *st, const double *x, double *exact)
{
    assert(st->fmt.type == STORE_INTN && st->codes);
    Src s = {x, NULL, st->W};
    intn_quantize(st, &s, exact);
}

void store_dequantize_intn_unrounded_f64(double *x, const StoreTensor *st, const double *exact)
{
    assert(st->fmt.type == STORE_INTN);
    intn_dequantize(x, st, exact, 0, st->T);
}

static void quantize(StoreTensor *st, const Src *s)
{
    assert(st->codes);
    size_t T = st->T, W = st->W;
    StoreType ty = st->fmt.type;
    if (store_type_is_int(ty)) {
        quantize_int(st, s);
        return;
    }
    if (ty == STORE_INTN) {
        intn_quantize(st, s, NULL);
        return;
    }
    float *tmp = is_block(ty) ? xmalloc(W * sizeof *tmp) : NULL;
    for (size_t t = 0; t < T; t++) {
        uint8_t *row = st->codes + t * st->row_bytes;
        switch (ty) {
        case STORE_F32:
            for (size_t j = 0; j < W; j++) {
                float v = (float)src_at(s, t, j);
                memcpy(row + 4 * j, &v, 4);
            }
            break;
        case STORE_F16:
        case STORE_BF16:
            for (size_t j = 0; j < W; j++) {
                uint16_t h;
                if (s->f) h = ty == STORE_F16 ? store_f16_from_f32(s->f[t * W + j]) : store_bf16_from_f32(s->f[t * W + j]);
                else h = ty == STORE_F16 ? store_f16_from_f64(s->d[t * W + j]) : store_bf16_from_f64(s->d[t * W + j]);
                memcpy(row + 2 * j, &h, 2);
            }
            break;
        case STORE_E4M3:
            for (size_t j = 0; j < W; j++) row[j] = store_e4m3_from_f64(src_at(s, t, j));
            break;
        case STORE_E5M2:
            for (size_t j = 0; j < W; j++) row[j] = store_e5m2_from_f64(src_at(s, t, j));
            break;
        case STORE_Q8_0:
        case STORE_Q4_0:
        case STORE_Q4_1:
        case STORE_Q5_0:
        case STORE_Q5_1:
        case STORE_IQ4_NL: {
            const float *x = s->f ? s->f + t * W : tmp;
            void *y = row;
            if (!s->f)
                for (size_t j = 0; j < W; j++) tmp[j] = (float)s->d[t * W + j];
            if (ty == STORE_Q8_0) store_quantize_row_q8_0(y, x, W);
            else if (ty == STORE_Q4_0) store_quantize_row_q4_0(y, x, W);
            else if (ty == STORE_Q4_1) store_quantize_row_q4_1(y, x, W);
            else if (ty == STORE_Q5_0) store_quantize_row_q5_0(y, x, W);
            else if (ty == STORE_Q5_1) store_quantize_row_q5_1(y, x, W);
            else store_quantize_row_iq4_nl(y, x, W);
            break;
        }
        default: assert(0);
        }
    }
    free(tmp);
}

void store_quantize_f64(StoreTensor *st, const double *x)
{
    Src s = {x, NULL, st->W};
    quantize(st, &s);
}

void store_quantize_f32(StoreTensor *st, const float *x)
{
    Src s = {NULL, x, st->W};
    quantize(st, &s);
}

void store_set_basis_f64(StoreTensor *st, const double *B)
{
    assert(st->basis);
    for (size_t i = 0; i < st->fmt.rank * st->D; i++) st->basis[i] = store_f16_from_f64(B[i]);
}

void store_set_basis_f32(StoreTensor *st, const float *B)
{
    assert(st->basis);
    for (size_t i = 0; i < st->fmt.rank * st->D; i++) st->basis[i] = store_f16_from_f32(B[i]);
}

/* ---- dequantize ---------------------------------------------------------------------------------------- */

void store_dequantize_rows_f32(float *x, const StoreTensor *st, size_t t0, size_t n)
{
    size_t W = st->W;
    StoreType ty = st->fmt.type;
    assert(t0 + n <= st->T);
    for (size_t i = 0; i < n; i++) {
        size_t t = t0 + i;
        const uint8_t *row = st->codes + t * st->row_bytes;
        float *o = x + i * W;
        switch (ty) {
        case STORE_F32: memcpy(o, row, W * sizeof *o); break;
        case STORE_F16:
            for (size_t j = 0; j < W; j++) {
                uint16_t h;
                memcpy(&h, row + 2 * j, 2);
                o[j] = store_f16_to_f32(h);
            }
            break;
        case STORE_BF16:
            for (size_t j = 0; j < W; j++) {
                uint16_t h;
                memcpy(&h, row + 2 * j, 2);
                o[j] = store_bf16_to_f32(h);
            }
            break;
        case STORE_E4M3:
            for (size_t j = 0; j < W; j++) o[j] = store_e4m3_to_f32(row[j]);
            break;
        case STORE_E5M2:
            for (size_t j = 0; j < W; j++) o[j] = store_e5m2_to_f32(row[j]);
            break;
        case STORE_INT8:
        case STORE_INT4:
        case STORE_INT2:
            for (size_t j = 0; j < W; j++) {
                uint16_t sh = st->fmt.axis == STORE_AXIS_TOKEN ? st->scales[t] : st->scales[j];
                o[j] = (float)get_code(row, ty, j) * store_f16_to_f32(sh);
            }
            break;
        case STORE_Q8_0: {
            const StoreBlockQ8_0 *b = (const StoreBlockQ8_0 *)(const void *)row;
            for (size_t k = 0; k < W / STORE_QK; k++) {
                float d = store_f16_to_f32(b[k].d);
                for (int j = 0; j < STORE_QK; j++) o[k * STORE_QK + (size_t)j] = (float)b[k].qs[j] * d;
            }
            break;
        }
        case STORE_Q4_0: {
            const StoreBlockQ4_0 *b = (const StoreBlockQ4_0 *)(const void *)row;
            for (size_t k = 0; k < W / STORE_QK; k++) {
                float d = store_f16_to_f32(b[k].d);
                for (int j = 0; j < STORE_QK / 2; j++) {
                    o[k * STORE_QK + (size_t)j] = (float)((b[k].qs[j] & 0xF) - 8) * d;
                    o[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)((b[k].qs[j] >> 4) - 8) * d;
                }
            }
            break;
        }
        case STORE_Q4_1: {
            const StoreBlockQ4_1 *b = (const StoreBlockQ4_1 *)(const void *)row;
            for (size_t k = 0; k < W / STORE_QK; k++) {
                float d = store_f16_to_f32(b[k].d), m = store_f16_to_f32(b[k].m);
                for (int j = 0; j < STORE_QK / 2; j++) {
                    o[k * STORE_QK + (size_t)j] = (float)(b[k].qs[j] & 0xF) * d + m;
                    o[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)(b[k].qs[j] >> 4) * d + m;
                }
            }
            break;
        }
        case STORE_Q5_0:
        case STORE_Q5_1: {
            const int m1 = ty == STORE_Q5_1;
            size_t bs = m1 ? sizeof(StoreBlockQ5_1) : sizeof(StoreBlockQ5_0);
            for (size_t k = 0; k < W / STORE_QK; k++) {
                const uint8_t *blk = row + k * bs;
                uint16_t dh, mh = 0;
                memcpy(&dh, blk, 2);
                if (m1) memcpy(&mh, blk + 2, 2);
                const uint8_t *qh4 = blk + (m1 ? 4 : 2), *qs = qh4 + 4;
                uint32_t qh = get_qh(qh4);
                float d = store_f16_to_f32(dh), m = store_f16_to_f32(mh);
                for (int j = 0; j < STORE_QK / 2; j++) {
                    int n0 = (qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
                    int n1 = (qs[j] >> 4) | (int)(((qh >> (j + STORE_QK / 2)) & 1u) << 4);
                    if (m1) {
                        o[k * STORE_QK + (size_t)j] = (float)n0 * d + m;
                        o[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)n1 * d + m;
                    } else {
                        o[k * STORE_QK + (size_t)j] = (float)(n0 - 16) * d;
                        o[k * STORE_QK + (size_t)j + STORE_QK / 2] = (float)(n1 - 16) * d;
                    }
                }
            }
            break;
        }
        case STORE_IQ4_NL: {
            const StoreBlockIQ4_NL *b = (const StoreBlockIQ4_NL *)(const void *)row;
            for (size_t k = 0; k < W / STORE_QK; k++) {
                float d = store_f16_to_f32(b[k].d);
                for (int j = 0; j < STORE_QK / 2; j++) {
                    o[k * STORE_QK + (size_t)j] = d * (float)store_iq4nl_values[b[k].qs[j] & 0xF];
                    o[k * STORE_QK + (size_t)j + STORE_QK / 2] = d * (float)store_iq4nl_values[b[k].qs[j] >> 4];
                }
            }
            break;
        }
        case STORE_INTN: {
            double *tmp = xmalloc(W * sizeof *tmp);
            intn_dequantize(tmp, st, NULL, t, 1);
            for (size_t j = 0; j < W; j++) o[j] = (float)tmp[j];
            free(tmp);
            break;
        }
        default: assert(0);
        }
    }
}

void store_dequantize_f32(float *x, const StoreTensor *st)
{
    if (!st->fmt.rank) {
        store_dequantize_rows_f32(x, st, 0, st->T);
        return;
    }
    size_t R = st->fmt.rank, D = st->D;
    float *c = xmalloc(R * sizeof *c), *B = xmalloc(R * D * sizeof *B);
    for (size_t i = 0; i < R * D; i++) B[i] = store_f16_to_f32(st->basis[i]);
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
    for (size_t i = 0; i < R * D; i++) B[i] = store_f16_to_f32(st->basis[i]);
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
