/* store: stored KV-cache formats (see store.h for the definitions). Scalar, portable C; the speed path
 * lives in src/decode/. T tokens, D head dim, W stored columns per token (D, or R for low rank). */
#include "store.h"
#include "linalg.h"
#include "util.h"

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

/* ---- names, shapes, allocation ------------------------------------------------------------------------ */

static const char *const type_names[STORE_NTYPES] = {
    "f32", "f16", "bf16", "e4m3", "e5m2", "int8", "int4", "int2", "q8_0", "q4_0",
};

const char *store_type_name(StoreType t) { return (unsigned)t < STORE_NTYPES ? type_names[t] : NULL; }

int store_type_bits(StoreType t)
{
    static const int bits[STORE_NTYPES] = {32, 16, 16, 8, 8, 8, 4, 2, 8, 4};
    assert((unsigned)t < STORE_NTYPES);
    return bits[t];
}

int store_type_is_int(StoreType t) { return t == STORE_INT8 || t == STORE_INT4 || t == STORE_INT2; }

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
        for (int t = 0; t < STORE_NTYPES; t++)
            if (strlen(type_names[t]) == n && strncmp(s, type_names[t], n) == 0) {
                f->type = (StoreType)t;
                found = 1;
            }
        if (!found)
            return kvc_fail("%s: unknown format; expected f32, f16, bf16, e4m3, e5m2, int8, int4, int2 (+ch), "
                            "q8_0, q4_0 or lrR[:TYPE] (got \"%s\")", what, whole);
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
    if ((f.type == STORE_Q8_0 || f.type == STORE_Q4_0) && W % STORE_QK != 0)
        return kvc_fail("%s: %s stores blocks of 32 along the row; %s %zu is not a multiple of 32 (got %zu)",
                        what, store_type_name(f.type), f.rank ? "rank" : "head dim", W, W);
    if (size_mul(T, store_row_bytes(f.type, W), &n) || n > ((size_t)1 << 46) || size_mul(T, D, &n) ||
        size_mul(n, sizeof(double), &n))
        return kvc_fail("%s: tensor too large (got %zu x %zu)", what, T, D);
    return 0;
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
}

void store_free(StoreTensor *st)
{
    if (!st) return;
    free(st->codes);
    free(st->scales);
    free(st->basis);
    memset(st, 0, sizeof *st);
}

uint64_t store_bytes(const StoreTensor *st)
{
    return (uint64_t)st->T * st->row_bytes + 2u * (uint64_t)st->n_scales +
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

static void quantize(StoreTensor *st, const Src *s)
{
    assert(st->codes);
    size_t T = st->T, W = st->W;
    StoreType ty = st->fmt.type;
    if (store_type_is_int(ty)) {
        quantize_int(st, s);
        return;
    }
    float *tmp = (ty == STORE_Q8_0 || ty == STORE_Q4_0) ? xmalloc(W * sizeof *tmp) : NULL;
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
        case STORE_Q4_0: {
            const float *x = s->f ? s->f + t * W : tmp;
            if (!s->f)
                for (size_t j = 0; j < W; j++) tmp[j] = (float)s->d[t * W + j];
            if (ty == STORE_Q8_0) store_quantize_row_q8_0((StoreBlockQ8_0 *)(void *)row, x, W);
            else store_quantize_row_q4_0((StoreBlockQ4_0 *)(void *)row, x, W);
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
