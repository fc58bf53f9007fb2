/* half: binary16 and bfloat16 to double by assembling the double's bits (see half.h). */
#include "base/half.h"

#include <string.h>

static double from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* sign: 0 or 1; e: the unbiased exponent of a normal double; frac52: the 52 fraction bits. */
static double make_double(uint64_t sign, int e, uint64_t frac52)
{
    return from_bits(sign << 63 | (uint64_t)(e + 1023) << 52 | frac52);
}

/* A float with `fbits` fraction bits, biased exponent field `exp` (0 .. emax_field), exponent bias `bias`. */
static double small_float_to_double(uint64_t sign, unsigned exp, uint64_t frac, unsigned fbits, unsigned emax_field,
                                    int bias)
{
    if (exp == emax_field) /* inf (frac == 0) or NaN: keep the payload in the top fraction bits */
        return from_bits(sign << 63 | (uint64_t)0x7ff << 52 | frac << (52 - fbits));
    if (exp != 0)
        return make_double(sign, (int)exp - bias, frac << (52 - fbits));
    if (frac == 0)
        return from_bits(sign << 63);
    /* Subnormal: frac * 2^(1 - bias - fbits); normalize so the leading 1 becomes implicit. */
    int e = 1 - bias;
    while (!(frac & ((uint64_t)1 << fbits))) {
        frac <<= 1;
        e--;
    }
    frac &= ((uint64_t)1 << fbits) - 1;
    return make_double(sign, e, frac << (52 - fbits));
}

double half_to_double(uint16_t h)
{
    return small_float_to_double((uint64_t)(h >> 15), (unsigned)(h >> 10) & 0x1f, h & 0x3ffu, 10, 0x1f, 15);
}

double bf16_to_double(uint16_t b)
{
    return small_float_to_double((uint64_t)(b >> 15), (unsigned)(b >> 7) & 0xff, b & 0x7fu, 7, 0xff, 127);
}
