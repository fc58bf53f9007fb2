/* half: the 16-bit floating-point formats, IEEE 754 binary16 ("half", numpy float16, safetensors F16) and
 * bfloat16 (the top 16 bits of an IEEE binary32; safetensors BF16), converted exactly. The one implementation
 * of these conversions: the tensor readers (src/io/) and the stored formats (src/store/, whose FP8 encoders use
 * the rounding core below) both call it. Codes are the raw bit patterns; no host endianness, no FP state
 * (flush-to-zero modes are not used by kvc). Pure functions.
 *
 * Encoding (from double or float): round to nearest even from the exact input, one rounding.
 *   binary16: |x| >= 65520 gives +-inf (65504 is the largest finite), subnormals are kept, NaN gives sign|0x7E00.
 *             half_from_float(x) == half_from_double((double)x) for every float x.
 *   bfloat16: overflow carries to +-inf, subnormals are kept; bf16_from_double's NaN gives sign|0x7FC0,
 *             bf16_from_float's keeps the payload's top bits and sets the quiet bit ((bits >> 16) | 0x0040);
 *             for other floats bf16_from_float is ggml's ((bits + 0x7FFF + lsb) >> 16), equal to
 *             bf16_from_double((double)x).
 * Decoding: exact for every input: zeros keep their sign, subnormals are scaled exactly, infinities stay
 * infinite.
 *   half_to_float: a NaN comes back quiet (the quiet bit set, the payload kept below it), as F16C's VCVTPH2PS.
 *   bf16_to_float: the code as the top 16 bits of a float32, bit for bit (a signaling NaN stays signaling).
 *   half_to_double / bf16_to_double: a NaN keeps its sign and payload, moved to the top of the double's
 *             mantissa without setting the quiet bit, as numpy's float16 -> float64 cast does; every other
 *             value equals the float result widened.
 */
#ifndef KVC_HALF_H
#define KVC_HALF_H

#include <stdint.h>

uint16_t half_from_double(double x);
uint16_t half_from_float(float x);
float half_to_float(uint16_t h);
double half_to_double(uint16_t h);

uint16_t bf16_from_double(double x);
uint16_t bf16_from_float(float x);
float bf16_to_float(uint16_t b);
double bf16_to_double(uint16_t b);

/* The rounding core of every narrow binary format (bfloat16 here, FP8 E4M3 / E5M2 in store.c; half_from_double
 * is the same rounding done on the double's bits, which tests/test_store.c checks against this core).
 * half_round_mag: a >= 0 rounded to nearest even in a format with M explicit mantissa bits whose smallest
 * normal exponent is emin (gradual underflow below it), with no upper limit; exact (scaling by powers of two and
 * rint in the default rounding mode); infinity stays infinity. The caller handles overflow.
 * half_encode_mag: the bits (biased exponent field, then the M mantissa bits; no sign) of a finite magnitude v
 * that the format represents (a result of half_round_mag with the same M and emin, emin = 1 - bias). */
double half_round_mag(double a, int M, int emin);
unsigned half_encode_mag(double v, int M, int emin, int bias);

#endif
