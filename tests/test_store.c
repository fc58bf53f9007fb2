/* test_store: unit checks of the stored formats (src/store/store.h), and a helper for tests/test_store.py.
 *
 * No arguments: runs the C checks (PASS/FAIL lines, exit 1 on any failure):
 *   byte counts against the packed buffer sizes, all-zero groups (scale 0, zeros back, no NaN),
 *   float and double entry points agreeing, f16/bf16 fast paths against the exact double path,
 *   round trips of every FP16 / FP8 code, integer codes in range and within half a step, the type table's rows,
 *   intN tensors re-expressed as int8/int4/int2 and stored rows made low rank without touching their codes.
 * Helper modes (read stdin, write stdout; used by test_store.py, which holds the independent oracle):
 *   --decode-fp8              256 lines "code e4m3 e5m2" with the values as C99 hex floats
 *   --encode                  per input line (a double as hex float): "f16 bf16 e4m3 e5m2" codes in hex
 *   --quantize FMT T W        float32 (T, W) little-endian on stdin -> codes, then scales (raw bytes)
 */
#include "store/store.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double lcg_normal(uint64_t *s)
{
    /* Box-Muller on a 64-bit LCG: test data only, not numpy's stream. */
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u1 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u2 = (double)(*s >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static const char *const all_formats[] = {"f32", "f16", "bf16", "e4m3", "e5m2", "int8", "int4", "int2",
                                          "int8ch", "int4ch", "int2ch", "q8_0", "q4_0", "lr8", "lr16:int4"};
#define NFMT (sizeof all_formats / sizeof all_formats[0])

/* Bytes of a (T, D) tensor written out from the format's definition, independently of store_bytes. */
static uint64_t expected_bytes(StoreFormat f, size_t T, size_t D)
{
    uint64_t W = f.rank ? f.rank : D, codes;
    switch (f.type) {
    case STORE_F32: codes = 4 * W * T; break;
    case STORE_F16:
    case STORE_BF16: codes = 2 * W * T; break;
    case STORE_INT4: codes = T * ((W * 4 + 7) / 8); break;
    case STORE_INT2: codes = T * ((W * 2 + 7) / 8); break;
    case STORE_Q8_0: codes = T * (W / 32) * (2 + 32); break;
    case STORE_Q4_0: codes = T * (W / 32) * (2 + 16); break;
    default: codes = W * T; break;
    }
    if (store_type_is_int(f.type)) codes += 2 * (f.axis == STORE_AXIS_TOKEN ? T : W);
    if (f.rank) codes += 2 * f.rank * D;
    return codes;
}

static void test_bytes(void)
{
    static const size_t shapes[][2] = {{1, 32}, {7, 64}, {33, 96}, {5, 128}, {3, 256}, {9, 33}, {4, 35}};
    int ok = 1;
    char why[256] = "";
    for (size_t i = 0; i < NFMT; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            StoreFormat f;
            if (store_format_parse(&f, all_formats[i], "test")) {
                ok = 0;
                snprintf(why, sizeof why, "%s", kvc_errmsg());
                continue;
            }
            size_t T = shapes[s][0], D = shapes[s][1];
            if (store_check(f, T, D, "test")) continue;   /* q formats with D % 32 != 0 */
            StoreTensor st;
            store_alloc(&st, f, T, D);
            uint64_t got = store_bytes(&st), want = expected_bytes(f, T, D);
            uint64_t buf = (uint64_t)st.T * st.row_bytes + 2 * st.n_scales + (st.basis ? 2 * f.rank * D : 0);
            if (got != want || got != buf) {
                ok = 0;
                snprintf(why, sizeof why, "%s T=%zu D=%zu: store_bytes %llu, definition %llu, buffers %llu",
                         all_formats[i], T, D, (unsigned long long)got, (unsigned long long)want,
                         (unsigned long long)buf);
            }
            store_free(&st);
        }
    check(ok, "store-bytes-match-buffers", "%s", why);
    /* q formats reject a head dim that is not a multiple of 32 */
    StoreFormat f;
    store_format_parse(&f, "q4_0", "test");
    check(store_check(f, 4, 48, "k") == -1 && strstr(kvc_errmsg(), "multiple of 32"), "store-q-needs-32",
          "%s", kvc_errmsg());
    check(store_format_parse(&f, "int5", "--formats") == -1 && strstr(kvc_errmsg(), "unknown format"),
          "store-parse-unknown", "%s", kvc_errmsg());
    check(store_format_parse(&f, "f16ch", "--formats") == -1, "store-parse-ch-only-int", "f16ch accepted");
}

/* All-zero tensors and groups: scale 0, zeros back, never NaN. */
static void test_zero_groups(void)
{
    int ok = 1;
    char why[256] = "";
    size_t T = 5, D = 64;
    double *x = xcalloc(T * D, sizeof *x), *y = xmalloc(T * D * sizeof *y);
    for (size_t j = 0; j < D; j++) x[2 * D + j] = (double)j - 20.0;   /* one non-zero token; others all zero */
    for (size_t i = 0; i < NFMT; i++) {
        StoreFormat f;
        store_format_parse(&f, all_formats[i], "test");
        if (f.rank) continue;
        StoreTensor st;
        store_alloc(&st, f, T, D);
        store_quantize_f64(&st, x);
        store_dequantize_f64(y, &st);
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < D; j++) {
                double v = y[t * D + j];
                int zero_row = t != 2, zero_col = j == 20;
                if (isnan(v) || ((zero_row || (f.axis == STORE_AXIS_TOKEN && zero_col)) && v != 0.0)) {
                    ok = 0;
                    snprintf(why, sizeof why, "%s: (%zu,%zu) reads back %g", all_formats[i], t, j, v);
                }
            }
        if (f.type == STORE_INT8 && f.axis == STORE_AXIS_TOKEN && st.scales[0] != 0) {
            ok = 0;
            snprintf(why, sizeof why, "int8: all-zero token has scale 0x%04x", st.scales[0]);
        }
        store_free(&st);
    }
    check(ok, "store-all-zero-groups", "%s", why);
    free(x);
    free(y);
}

/* The float and double entry points give the same bytes; dequantize f32 == f64. */
static void test_f32_f64(void)
{
    int ok = 1;
    char why[256] = "";
    size_t T = 17, D = 96;
    uint64_t seed = 7;
    double *xd = xmalloc(T * D * sizeof *xd), *yd = xmalloc(T * D * sizeof *yd);
    float *xf = xmalloc(T * D * sizeof *xf), *yf = xmalloc(T * D * sizeof *yf);
    for (size_t i = 0; i < T * D; i++) {
        xf[i] = (float)(lcg_normal(&seed) * (i % 7 == 0 ? 30.0 : 1.0));
        xd[i] = xf[i];
    }
    for (size_t i = 0; i < NFMT; i++) {
        StoreFormat f;
        store_format_parse(&f, all_formats[i], "test");
        if (f.rank) continue;
        StoreTensor a, b;
        store_alloc(&a, f, T, D);
        store_alloc(&b, f, T, D);
        store_quantize_f64(&a, xd);
        store_quantize_f32(&b, xf);
        if (memcmp(a.codes, b.codes, T * a.row_bytes) != 0 ||
            (a.n_scales && memcmp(a.scales, b.scales, a.n_scales * 2) != 0)) {
            ok = 0;
            snprintf(why, sizeof why, "%s: float and double input give different bytes", all_formats[i]);
        }
        store_dequantize_f64(yd, &a);
        store_dequantize_f32(yf, &a);
        for (size_t k = 0; k < T * D; k++)
            if ((double)yf[k] != yd[k]) {
                ok = 0;
                snprintf(why, sizeof why, "%s: dequantize f32 %g != f64 %g at %zu", all_formats[i], (double)yf[k],
                         yd[k], k);
                break;
            }
        store_free(&a);
        store_free(&b);
    }
    check(ok, "store-f32-f64-agree", "%s", why);
    free(xd);
    free(yd);
    free(xf);
    free(yf);
}

static int same_bits16(uint16_t a, uint16_t b) { return a == b; }

static void test_half_paths(void)
{
    /* The fast float paths equal the exact double path on a strided sweep of all float bit patterns
     * (every 1021st pattern, plus the neighbours of every FP16 / BF16 rounding boundary below). */
    int ok16 = 1, okbf = 1;
    char why[256] = "";
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 1021) {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        if (isnan(f)) continue;
        if (!same_bits16(store_f16_from_f32(f), store_f16_from_f64(f)) && ok16) {
            ok16 = 0;
            snprintf(why, sizeof why, "f16 of %a: fast 0x%04x exact 0x%04x", (double)f, store_f16_from_f32(f),
                     store_f16_from_f64(f));
        }
        if (!same_bits16(store_bf16_from_f32(f), store_bf16_from_f64(f)) && okbf) {
            okbf = 0;
            snprintf(why, sizeof why, "bf16 of %a: fast 0x%04x exact 0x%04x", (double)f, store_bf16_from_f32(f),
                     store_bf16_from_f64(f));
        }
    }
    /* every FP16 midpoint and its float neighbours */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        double lo = store_f16_to_f32((uint16_t)h), hi = h + 1 == 0x7C00 ? 65536.0 : store_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);   /* exact: at most 12 significant bits */
        float cand[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++)
            for (int s = 0; s < 2; s++) {
                float v = s ? -cand[k] : cand[k];
                if (store_f16_from_f32(v) != store_f16_from_f64(v) && ok16) {
                    ok16 = 0;
                    snprintf(why, sizeof why, "f16 of %a: fast 0x%04x exact 0x%04x", (double)v,
                             store_f16_from_f32(v), store_f16_from_f64(v));
                }
            }
    }
    check(ok16, "store-f16-fast-equals-exact", "%s", why);
    check(okbf, "store-bf16-fast-equals-exact", "%s", why);

    int ok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = store_f16_to_f32((uint16_t)h);
        if (isnan(v)) continue;
        if (store_f16_from_f32(v) != h || store_f16_from_f64(v) != h) ok = 0;
    }
    check(ok, "store-f16-roundtrip-all-codes", "a code did not survive decode + encode");
    ok = 1;
    for (uint32_t c = 0; c < 256; c++) {
        float a = store_e4m3_to_f32((uint8_t)c), b = store_e5m2_to_f32((uint8_t)c);
        if (!isnan(a) && store_e4m3_from_f64(a) != c) ok = 0;
        if (!isnan(b) && !isinf(b) && store_e5m2_from_f64(b) != c) ok = 0;
    }
    check(ok, "store-fp8-roundtrip-all-codes", "a code did not survive decode + encode");
    check(store_e4m3_from_f64(NAN) == 0x7F && store_e5m2_from_f64(-NAN) == 0x7F &&
              store_e4m3_from_f64(INFINITY) == 0x7E && store_e4m3_from_f64(-INFINITY) == 0xFE &&
              store_e5m2_from_f64(INFINITY) == 0x7B && store_e4m3_from_f64(-0.0) == 0x80 &&
              store_e4m3_from_f64(-1e-30) == 0x80,
          "store-fp8-specials", "NaN, inf, -0 or underflow encoded wrongly");
    check(store_f16_from_f64(65520.0) == 0x7C00 && store_f16_from_f64(65519.99) == 0x7BFF &&
              store_f16_from_f64(-INFINITY) == 0xFC00 && (store_f16_from_f64(NAN) & 0x7FFF) == 0x7E00 &&
              store_bf16_from_f32(NAN) == 0x7FC0,
          "store-half-specials", "overflow, inf or NaN encoded wrongly");
}

/* Integer codes: within +-qmax, |x - x'| <= scale/2 unless clipped, scale = fp16(amax/qmax). */
static void test_int_codes(void)
{
    int ok = 1;
    char why[256] = "";
    size_t T = 9, D = 37;
    uint64_t seed = 11;
    double *x = xmalloc(T * D * sizeof *x), *y = xmalloc(T * D * sizeof *y);
    for (size_t i = 0; i < T * D; i++) x[i] = lcg_normal(&seed);
    const char *names[] = {"int8", "int4", "int2", "int8ch", "int4ch", "int2ch"};
    for (size_t i = 0; i < 6; i++) {
        StoreFormat f;
        store_format_parse(&f, names[i], "test");
        StoreTensor st;
        store_alloc(&st, f, T, D);
        store_quantize_f64(&st, x);
        store_dequantize_f64(y, &st);
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < D; j++) {
                double sc = store_f16_to_f32(st.scales[f.axis == STORE_AXIS_TOKEN ? t : j]);
                double qmax = f.type == STORE_INT8 ? 127 : f.type == STORE_INT4 ? 7 : 1;
                double code = y[t * D + j] / sc, err = fabs(x[t * D + j] - y[t * D + j]);
                if (fabs(code) > qmax || code != rint(code) || (err > sc / 2 * (1 + 1e-12) && fabs(code) < qmax)) {
                    ok = 0;
                    snprintf(why, sizeof why, "%s (%zu,%zu): x %g -> %g, scale %g", names[i], t, j, x[t * D + j],
                             y[t * D + j], sc);
                }
            }
        store_free(&st);
    }
    check(ok, "store-int-codes-in-range", "%s", why);
    free(x);
    free(y);
}

/* intN codes at and next to rounding ties: the coder's fast path (store.c intn_code_values multiplies by 1 / sc
 * and divides only near a half-integer) must give exactly rint((x - mn) / sc) clamped, the scalar definition,
 * computed here with the division. Rows: for several scales, x = mn + (k + 1/2) sc and its two neighbours
 * (nextafter) for every pair of neighbouring levels k, k + 1, plus a NaN (code 0; the parameters skip it). */
static void test_intn_near_ties(void)
{
    const double scales[] = {0.1, 1.0 / 3.0, 0.0123, 7.77e-3, 1e5, 3e-200, 1.0, 0.75};
    int ok = 1;
    char why[256] = "";
    for (int asym = 0; asym < 2; asym++)
        for (int bits = 2; bits <= 8; bits++)
            for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
                double levels = asym ? (double)((1 << bits) - 1) : (double)((1 << (bits - 1)) - 1);
                double lo = asym ? 0.0 : -levels, s0 = scales[si], base = asym ? -5.25 * s0 : 0.0;
                size_t W = 0, cap = 3 * (size_t)(2 * levels + 3) + 8;
                double *x = xmalloc(cap * sizeof *x);
                x[W++] = base + levels * s0;               /* sets the max (and with base, the min) */
                if (asym) x[W++] = base;
                /* the scale and min the coder will use, computed as store.c's parameter pass does */
                double hi = asym ? x[0] : fabs(x[0]), mn = asym ? base : 0.0;
                double sc = asym ? (hi - mn) / levels : hi / levels;
                for (double k = lo; k < levels; k++) {   /* inside [min, max]: the parameters stay */
                    double t = mn + (k + 0.5) * sc;
                    x[W++] = t;
                    x[W++] = nextafter(t, INFINITY);
                    x[W++] = nextafter(t, -INFINITY);
                }
                x[W++] = NAN;
                StoreTensor st;
                store_alloc(&st, store_intn_format(bits, asym, STORE_AXIS_TOKEN, 0, STORE_SCALE_F32), 1, W);
                double exact[2];
                store_quantize_intn_unrounded_f64(&st, x, exact);
                if (exact[0] != sc || (asym && exact[1] != mn)) {
                    ok = 0;
                    snprintf(why, sizeof why, "bits %d asym %d scale %g: parameters %.17g %.17g, expected %.17g %.17g",
                             bits, asym, s0, exact[0], exact[1], sc, mn);
                }
                int off = asym ? 0 : 1 << (bits - 1);
                for (size_t j = 0; j < W && ok; j++) {
                    double y = (x[j] - mn) / sc, q = 0.0;
                    if (!isnan(y)) q = fmin(fmax(rint(y), lo), levels);
                    size_t o = j * (size_t)bits;
                    unsigned w = st.codes[o / 8] | (o / 8 + 1 < st.code_bytes ? (unsigned)st.codes[o / 8 + 1] << 8 : 0u);
                    unsigned got = (w >> (o % 8)) & ((1u << bits) - 1u);
                    if (got != (unsigned)((int)q + off)) {
                        ok = 0;
                        snprintf(why, sizeof why, "bits %d asym %d scale %g: x[%zu] = %.17g gave code %u, expected %d",
                                 bits, asym, s0, j, x[j], got, (int)q + off);
                    }
                }
                store_free(&st);
                free(x);
            }
    check(ok, "store-intn-codes-near-ties", "%s", why);
}

/* Low rank: dequantize = C' B' for f16 coefficients. */
static void test_lowrank(void)
{
    size_t T = 6, D = 40, R = 3;
    uint64_t seed = 3;
    double *C = xmalloc(T * R * sizeof *C), *B = xmalloc(R * D * sizeof *B), *y = xmalloc(T * D * sizeof *y);
    for (size_t i = 0; i < T * R; i++) C[i] = lcg_normal(&seed);
    for (size_t i = 0; i < R * D; i++) B[i] = lcg_normal(&seed);
    StoreFormat f;
    store_format_parse(&f, "lr3", "test");
    StoreTensor st;
    store_alloc(&st, f, T, D);
    store_quantize_f64(&st, C);
    store_set_basis_f64(&st, B);
    store_dequantize_f64(y, &st);
    double maxerr = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < D; j++) {
            double want = 0;
            for (size_t r = 0; r < R; r++) {
                uint16_t c;
                memcpy(&c, st.codes + t * st.row_bytes + 2 * r, 2);
                want += (double)store_f16_to_f32(c) * store_f16_to_f32(st.basis[r * D + j]);
            }
            maxerr = fmax(maxerr, fabs(want - y[t * D + j]));
        }
    char why[128];
    snprintf(why, sizeof why, "max |C'B' - dequantized| = %g", maxerr);
    check(maxerr < 1e-12, "store-lowrank-dequantize", "%s", why);
    store_free(&st);
    free(C);
    free(B);
    free(y);
}

/* binary16 by the rounding core of src/base/half.h: the definition half_from_double computes on the bits. */
static uint16_t f16_core(double x)
{
    unsigned sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | 0x7E00u);
    double v = half_round_mag(fabs(x), 10, -14);
    if (v > 65504.0) return (uint16_t)(sign | 0x7C00u);
    return (uint16_t)(sign | half_encode_mag(v, 10, -14, 15));
}

/* half_from_double against the core: every FP16 value, its neighbours in double, the midpoints between codes and
 * their neighbours (both signs), and random doubles over the whole range. */
static void test_half_double_bits(void)
{
    int ok = 1;
    char why[160] = "";
    for (unsigned h = 0; h < 0x7C00u && ok; h++) {
        double v = half_to_double((uint16_t)h), w = half_to_double((uint16_t)(h + 1)), mid = v + (w - v) / 2;
        const double xs[] = {v, nextafter(v, 0.0), nextafter(v, INFINITY), mid, nextafter(mid, 0.0),
                             nextafter(mid, INFINITY)};
        for (size_t k = 0; k < sizeof xs / sizeof xs[0] && ok; k++)
            for (int sg = 0; sg < 2 && ok; sg++) {
                double x = sg ? -xs[k] : xs[k];
                ok = half_from_double(x) == f16_core(x);
                if (!ok) snprintf(why, sizeof why, "%a: 0x%04x, core 0x%04x", x, half_from_double(x), f16_core(x));
            }
    }
    uint64_t seed = 17;
    for (int i = 0; i < 2000000 && ok; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        double x = ldexp((double)(seed >> 11) / 9007199254740992.0, (int)(seed % 80) - 50);
        if (seed & 1024) x = -x;
        ok = half_from_double(x) == f16_core(x);
        if (!ok) snprintf(why, sizeof why, "%a: 0x%04x, core 0x%04x", x, half_from_double(x), f16_core(x));
    }
    const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 65504.0, 65519.99, 65520.0, 1e300, 0x1p-1074,
                         0x1p-25, 0x1.8p-25, 0x1p-24, 0x1.0000000000001p-25};
    for (size_t k = 0; k < sizeof sp / sizeof sp[0] && ok; k++) {
        ok = half_from_double(sp[k]) == f16_core(sp[k]);
        if (!ok) snprintf(why, sizeof why, "%a: 0x%04x, core 0x%04x", sp[k], half_from_double(sp[k]), f16_core(sp[k]));
    }
    check(ok, "half-from-double-equals-core", why);
}

/* The type table: every row complete and consistent with the entry points that read it. */
static void test_traits(void)
{
    char why[256] = "";
    int ok = store_type_traits(STORE_NTYPES) == NULL && store_type_name(STORE_NTYPES) == NULL;
    for (int i = 0; i < STORE_NTYPES && ok; i++) {
        StoreType t = (StoreType)i, back;
        const StoreTypeTraits *tr = store_type_traits(t);
        StoreFormat f;
        size_t W = 64;
        ok = tr && tr->name && tr->quantize_row && tr->to_float_row && store_type_from_name(&back, tr->name) == 0 &&
             back == t && store_type_bits(t) == tr->bits && store_type_is_int(t) == (tr->layout == STORE_LAYOUT_SCALED) &&
             (tr->scales != NULL) == (tr->layout == STORE_LAYOUT_SCALED || tr->layout == STORE_LAYOUT_STREAM) &&
             (tr->block_size > 1) == (tr->layout == STORE_LAYOUT_BLOCK) && (tr->block_size > 1) == (tr->block_bytes > 0);
        if (ok && tr->layout == STORE_LAYOUT_BLOCK)
            ok = store_row_bytes(t, W) == W / tr->block_size * tr->block_bytes && tr->f32_rows;
        else if (ok && tr->layout != STORE_LAYOUT_STREAM)
            ok = store_row_bytes(t, W) == W * (size_t)tr->bits / 8 && store_row_bytes(t, 3) == (3 * (size_t)tr->bits + 7) / 8;
        if (ok && tr->parsed) ok = store_format_parse(&f, tr->name, "test") == 0 && f.type == t && !f.rank;
        if (ok && tr->alias) ok = store_format_parse(&f, tr->alias, "test") == 0 && f.type == t;
        if (ok && !tr->parsed) ok = store_format_parse(&f, tr->name, "test") == -1;
        if (!ok) snprintf(why, sizeof why, "row %d (%s) is inconsistent", i, tr && tr->name ? tr->name : "?");
    }
    check(ok, "store-traits-rows", why);
    check(store_row_bytes(STORE_Q8_0, 64) == 2 * sizeof(StoreBlockQ8_0) && store_row_bytes(STORE_INT4, 7) == 4 &&
              store_row_bytes(STORE_INT2, 5) == 2 && store_row_bytes(STORE_E4M3, 5) == 5 && store_row_bytes(STORE_INTN, 64) == 0,
          "store-traits-row-bytes", "row bytes differ from the formats' definitions");
}

/* intN tensors that are int8 / int4 / int2 byte for byte. */
static void test_intn_int_format(void)
{
    size_t T = 96, D = 64;
    StoreFormat f = store_intn_format(4, 0, STORE_AXIS_TOKEN, 0, STORE_SCALE_F16);
    check(store_intn_int_format(f, T, D).type == STORE_INT4, "store-intn-int4-row", "a whole-row int4 is int4");
    f = store_intn_format(8, 0, STORE_AXIS_TOKEN, D, STORE_SCALE_F16);
    check(store_intn_int_format(f, T, D).type == STORE_INT8, "store-intn-group-is-row", "group = W is a row");
    f = store_intn_format(2, 0, STORE_AXIS_CHANNEL, 0, STORE_SCALE_F16);
    StoreFormat g = store_intn_int_format(f, T, D);
    check(g.type == STORE_INT2 && g.axis == STORE_AXIS_CHANNEL, "store-intn-int2-channel", "axis kept");
    static const struct { int bits, asym; size_t group; StoreScaleType st; size_t W; } keep[] = {
        {4, 1, 0, STORE_SCALE_F16, 64},    /* asymmetric: a min per group */
        {4, 0, 32, STORE_SCALE_F16, 64},   /* groups within the row */
        {4, 0, 0, STORE_SCALE_F32, 64},    /* FP32 scales */
        {3, 0, 0, STORE_SCALE_F16, 64},    /* no int3 */
        {4, 0, 0, STORE_SCALE_F16, 7},     /* rows not byte-aligned */
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        f = store_intn_format(keep[i].bits, keep[i].asym, STORE_AXIS_TOKEN, keep[i].group, keep[i].st);
        ok &= store_intn_int_format(f, T, keep[i].W).type == STORE_INTN;
    }
    check(ok, "store-intn-keeps-other-intn", "an intN without an int8/4/2 equal was converted");
}

/* store_intn_to_int: the same bytes, values and buffers as quantizing straight into the int type. */
static void test_intn_to_int(void)
{
    size_t T = 9, W = 24;
    uint64_t seed = 11;
    double *x = xmalloc(T * W * sizeof *x), *a = xmalloc(T * W * sizeof *a), *b = xmalloc(T * W * sizeof *b);
    for (size_t i = 0; i < T * W; i++) x[i] = lcg_normal(&seed) * (i % 7 == 0 ? 30.0 : 1.0);
    x[5] = 0.0;
    for (size_t j = 0; j < W; j++) x[2 * W + j] = 0.0;   /* an all-zero row: scale 0 */
    int ok = 1;
    char why[160] = "";
    for (int bits = 2; bits <= 8 && ok; bits *= 2)
        for (int ax = 0; ax < 2 && ok; ax++) {
            StoreTensor st, ref;
            StoreFormat f = store_intn_format(bits, 0, (StoreAxis)ax, 0, STORE_SCALE_F16);
            store_alloc(&st, f, T, W);
            store_quantize_f64(&st, x);
            store_dequantize_f64(a, &st);
            uint64_t bytes = store_bytes(&st);
            int changed = store_intn_to_int(&st);
            store_dequantize_f64(b, &st);
            store_alloc(&ref, store_intn_int_format(f, T, W), T, W);
            store_quantize_f64(&ref, x);
            ok = changed && st.fmt.type == ref.fmt.type && store_bytes(&st) == bytes && !st.params &&
                 st.n_scales == ref.n_scales && memcmp(st.codes, ref.codes, T * ref.row_bytes) == 0 &&
                 memcmp(st.scales, ref.scales, 2 * ref.n_scales) == 0 && memcmp(a, b, T * W * sizeof *a) == 0;
            if (!ok) snprintf(why, sizeof why, "%d bits, axis %d: changed %d, bytes %llu -> %llu", bits, ax, changed,
                              (unsigned long long)bytes, (unsigned long long)store_bytes(&st));
            store_free(&st);
            store_free(&ref);
        }
    check(ok, "store-intn-to-int-same-bytes", why);
    StoreTensor st;
    store_alloc(&st, store_intn_format(4, 1, STORE_AXIS_TOKEN, 0, STORE_SCALE_F16), T, W);
    store_quantize_f64(&st, x);
    check(store_intn_to_int(&st) == 0 && st.fmt.type == STORE_INTN && st.params, "store-intn-to-int-leaves-asym",
          "an asymmetric intN was converted");
    store_free(&st);
    free(x);
    free(a);
    free(b);
}

/* store_set_lowrank_f64: stored rows become coefficients of a basis; intN cannot be low rank. */
static void test_set_lowrank(void)
{
    size_t T = 5, R = 8, D = 24;
    uint64_t seed = 5;
    double *C = xmalloc(T * R * sizeof *C), *B = xmalloc(R * D * sizeof *B), *y = xmalloc(T * D * sizeof *y);
    for (size_t i = 0; i < T * R; i++) C[i] = lcg_normal(&seed);
    for (size_t i = 0; i < R * D; i++) B[i] = lcg_normal(&seed);
    StoreFormat f;
    store_format_parse(&f, "int8ch", "test");
    StoreTensor st;
    store_alloc(&st, f, T, R);
    store_quantize_f64(&st, C);
    uint8_t codes[64];
    memcpy(codes, st.codes, T * st.row_bytes);
    int rc = store_set_lowrank_f64(&st, D, B, "test");
    store_dequantize_f64(y, &st);
    double maxerr = 0;
    for (size_t t = 0; t < T && rc == 0; t++)
        for (size_t j = 0; j < D; j++) {
            double want = 0;
            for (size_t r = 0; r < R; r++)
                want += (double)(int8_t)codes[t * R + r] * store_f16_to_f32(st.scales[r]) *
                        (double)store_f16_to_f32(store_f16_from_f64(B[r * D + j]));
            maxerr = fmax(maxerr, fabs(want - y[t * D + j]));
        }
    char why[128];
    snprintf(why, sizeof why, "rc %d, rank %zu, D %zu, max |C'B' - dequantized| = %g", rc, st.fmt.rank, st.D, maxerr);
    check(rc == 0 && st.fmt.rank == R && st.D == D && st.W == R && maxerr < 1e-12 &&
              store_bytes(&st) == T * R + 2 * R + 2 * R * D, "store-set-lowrank", why);
    store_free(&st);
    store_alloc(&st, store_intn_format(3, 0, STORE_AXIS_TOKEN, 0, STORE_SCALE_F16), T, R);
    store_quantize_f64(&st, C);
    check(store_set_lowrank_f64(&st, D, B, "test") == -1 && strstr(kvc_errmsg(), "full-rank") && !st.fmt.rank,
          "store-set-lowrank-refuses-intn", kvc_errmsg());
    store_free(&st);
    free(C);
    free(B);
    free(y);
}

/* ---- helper modes ------------------------------------------------------------------------------------ */

static int decode_fp8(void)
{
    for (unsigned c = 0; c < 256; c++)
        printf("%u %a %a\n", c, (double)store_e4m3_to_f32((uint8_t)c), (double)store_e5m2_to_f32((uint8_t)c));
    return 0;
}

static int encode(void)
{
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        double x = strtod(line, NULL);
        printf("%04x %04x %02x %02x\n", store_f16_from_f64(x), store_bf16_from_f64(x), store_e4m3_from_f64(x),
               store_e5m2_from_f64(x));
    }
    return 0;
}

static int quantize_mode(const char *fmt, size_t T, size_t W)
{
    StoreFormat f;
    if (store_format_parse(&f, fmt, "--quantize") || store_check(f, T, W, "--quantize")) {
        fprintf(stderr, "%s\n", kvc_errmsg());
        return 2;
    }
    float *x = xmalloc(T * W * sizeof *x);
    if (fread(x, sizeof *x, T * W, stdin) != T * W) {
        fprintf(stderr, "short input\n");
        return 2;
    }
    StoreTensor st;
    store_alloc(&st, f, T, W);
    store_quantize_f32(&st, x);
    fwrite(st.codes, 1, T * st.row_bytes, stdout);
    if (st.n_scales) fwrite(st.scales, 2, st.n_scales, stdout);
    store_free(&st);
    free(x);
    return 0;
}

/* intN with double input takes store.c's fast paths (group scales with an AVX2 abs-max, whole-byte code packing,
 * whole-byte values); float input the generic ones. Both must give the same codes and parameters, and
 * store_dequantize_f64 the values an independent reading of the layout gives: code - off at bit (t W + j) b,
 * times the group's FP32 scale, plus its min (store.h). Odd widths put rows off byte boundaries; zeros, NaN-free. */
static void test_intn_fast_paths(void)
{
    int ok = 1;
    char why[256] = "";
    uint64_t seed = 11;
    size_t Ws[] = {128, 7, 33}, gs[] = {0, 32, 3};
    for (size_t wi = 0; wi < 3; wi++)
        for (int bits = 2; bits <= 8; bits *= 2)
            for (int asym = 0; asym < 2; asym++)
                for (int ax = 0; ax < 2; ax++)
                    for (size_t gi = 0; gi < 3; gi++) {
                        size_t T = 9, W = Ws[wi];
                        StoreAxis axis = ax ? STORE_AXIS_CHANNEL : STORE_AXIS_TOKEN;
                        StoreFormat f = store_intn_format(bits, asym, axis, gs[gi], STORE_SCALE_F32);
                        double *xd = xmalloc(T * W * sizeof *xd), *y = xmalloc(T * W * sizeof *y);
                        float *xf = xmalloc(T * W * sizeof *xf);
                        for (size_t i = 0; i < T * W; i++) {
                            xf[i] = i % 11 == 3 ? 0.0f : (float)(lcg_normal(&seed) * (i % 5 == 0 ? 20.0 : 1.0));
                            xd[i] = xf[i];
                        }
                        StoreTensor a, b;
                        store_alloc(&a, f, T, W);
                        store_alloc(&b, f, T, W);
                        store_quantize_f64(&a, xd);
                        store_quantize_f32(&b, xf);
                        size_t cb = (T * W * (size_t)bits + 7) / 8;
                        if (memcmp(a.codes, b.codes, cb) != 0 || a.param_bytes != b.param_bytes ||
                            memcmp(a.params, b.params, a.param_bytes) != 0) {
                            ok = 0;
                            snprintf(why, sizeof why, "int%d asym %d axis %d W %zu group %zu: double and float input "
                                     "give different codes or parameters", bits, asym, ax, W, gs[gi]);
                        }
                        store_dequantize_f64(y, &a);
                        size_t ext = axis == STORE_AXIS_TOKEN ? W : T;
                        size_t g = gs[gi] && gs[gi] < ext ? gs[gi] : ext, per = (ext + g - 1) / g;
                        int off = asym ? 0 : 1 << (bits - 1);
                        for (size_t t = 0; t < T && ok; t++)
                            for (size_t j = 0; j < W && ok; j++) {
                                size_t o = (t * W + j) * (size_t)bits, k = axis == STORE_AXIS_TOKEN ? t * per + j / g
                                                                                                    : t / g * W + j;
                                unsigned v = a.codes[o / 8] >> (o % 8);
                                if (o % 8 + (size_t)bits > 8) v |= (unsigned)a.codes[o / 8 + 1] << (8 - o % 8);
                                v &= (1u << bits) - 1u;
                                float sc, mn = 0.0f;
                                memcpy(&sc, a.params + 4 * k, 4);
                                if (asym) memcpy(&mn, a.params + 4 * (a.n_groups + k), 4);
                                double code = (double)((int)v - off), want = asym ? code * sc + mn : code * sc;
                                if (y[t * W + j] != want) {
                                    ok = 0;
                                    snprintf(why, sizeof why, "int%d asym %d axis %d W %zu group %zu: value %a at "
                                             "(%zu, %zu), want %a", bits, asym, ax, W, gs[gi], y[t * W + j], t, j,
                                             want);
                                }
                            }
                        store_free(&a);
                        store_free(&b);
                        free(xd);
                        free(xf);
                        free(y);
                    }
    check(ok, "store-intn-fast-paths", "%s", why);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--decode-fp8") == 0) return decode_fp8();
    if (argc > 1 && strcmp(argv[1], "--encode") == 0) return encode();
    if (argc > 4 && strcmp(argv[1], "--quantize") == 0)
        return quantize_mode(argv[2], (size_t)strtoul(argv[3], NULL, 10), (size_t)strtoul(argv[4], NULL, 10));
    test_bytes();
    test_zero_groups();
    test_f32_f64();
    test_half_paths();
    test_int_codes();
    test_intn_near_ties();
    test_intn_fast_paths();
    test_lowrank();
    test_half_double_bits();
    test_traits();
    test_intn_int_format();
    test_intn_to_int();
    test_set_lowrank();
    return check_failures ? 1 : 0;
}
