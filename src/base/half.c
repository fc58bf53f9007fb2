/* half: binary16 and bfloat16 conversions (see half.h). */
#include "base/half.h"

#include <math.h>
#include <string.h>

double half_round_mag(double a, int M, int emin)
{
    if (a == 0.0 || isinf(a)) return a;
    int e;
    (void)frexp(a, &e);           /* a = f * 2^e, f in [0.5, 1): the unbiased exponent is e - 1 */
    int ex = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, ex - M);
    return rint(a / quantum) * quantum;
}

unsigned half_encode_mag(double v, int M, int emin, int bias)
{
    if (v == 0.0) return 0;
    int e;
    (void)frexp(v, &e);
    int ex = e - 1;
    if (ex < emin) return (unsigned)(v / ldexp(1.0, emin - M));
    return ((unsigned)(ex + bias) << M) | (unsigned)(v / ldexp(1.0, ex - M) - ldexp(1.0, M));
}

static float float_of_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint32_t bits_of_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

/* A NaN of a 16-bit format as a double: sign and payload (frac, fbits bits) at the top of the mantissa. */
static double nan_to_double(unsigned sign, uint64_t frac, unsigned fbits)
{
    uint64_t u = (uint64_t)sign << 63 | (uint64_t)0x7ff << 52 | frac << (52 - fbits);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* ---- binary16 ---- */

/* The same rounding as half_round_mag(|x|, 10, -14) + half_encode_mag done on the bits of the double (as
 * half_from_float does on a float's); tests/test_store.c checks the two agree. */
uint16_t half_from_double(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    uint64_t ax = u & 0x7FFFFFFFFFFFFFFFu;
    if (ax > 0x7FF0000000000000u) return (uint16_t)(sign | 0x7E00u);    /* NaN */
    if (ax >= 0x40EFFE0000000000u) return (uint16_t)(sign | 0x7C00u);   /* >= 65520 rounds to inf; inf */
    if (ax < 0x3F10000000000000u) {                                      /* below 2^-14: subnormal or zero */
        double a;
        memcpy(&a, &ax, sizeof a);
        return (uint16_t)(sign | (uint16_t)rint(a * 16777216.0));      /* a * 2^24 is exact */
    }
    uint64_t m = ax + 0x1FFFFFFFFFFu + ((ax >> 42) & 1u);               /* round the 42 dropped bits, ties to even */
    return (uint16_t)(sign | (uint16_t)((m >> 42) - ((uint64_t)(1023 - 15) << 10)));   /* rebias 1023 -> 15 */
}

uint16_t half_from_float(float f)
{
    uint32_t x = bits_of_float(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);   /* NaN */
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  /* >= 65520 rounds to inf; inf */
    if (ax < 0x38800000u)                                      /* below 2^-14: subnormal or zero */
        return (uint16_t)(sign | (uint32_t)rint((double)float_of_bits(ax) * 16777216.0));
    uint32_t m = ax + 0xFFFu + ((ax >> 13) & 1u);              /* round the 13 dropped bits, ties to even */
    return (uint16_t)(sign | ((m - 0x38000000u) >> 13));       /* rebias 127 -> 15 */
}

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return float_of_bits(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));  /* inf, NaN */
    if (e) return float_of_bits(sign | ((e + 112u) << 23) | (m << 13));
    float v = (float)m * 0x1p-24f;                                                               /* subnormal */
    return sign ? -v : v;
}

double half_to_double(uint16_t h)
{
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) return nan_to_double(h >> 15, h & 0x3FFu, 10);
    return half_to_float(h);
}

/* ---- bfloat16 ---- */

uint16_t bf16_from_double(double x)
{
    unsigned sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | 0x7FC0u);
    double v = half_round_mag(fabs(x), 7, -126);
    if (v > 0x1.FEp127) return (uint16_t)(sign | 0x7F80u);
    return (uint16_t)(sign | half_encode_mag(v, 7, -126, 127));
}

uint16_t bf16_from_float(float f)
{
    uint32_t x = bits_of_float(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t b) { return float_of_bits((uint32_t)b << 16); }

double bf16_to_double(uint16_t b)
{
    if ((b & 0x7F80u) == 0x7F80u && (b & 0x7Fu)) return nan_to_double(b >> 15, b & 0x7Fu, 7);
    return bf16_to_float(b);
}
