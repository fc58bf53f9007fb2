/* half: exact conversions from the 16-bit float formats to double.
 *
 * half_to_double: IEEE 754 binary16 (numpy float16, safetensors F16): 1 sign, 5 exponent, 10 mantissa bits.
 * bf16_to_double: bfloat16 (safetensors BF16): the top 16 bits of an IEEE binary32.
 * Both are exact for every input: zeros keep their sign, subnormals are scaled exactly, infinities stay
 * infinite, NaNs stay NaN (the sign and payload are kept, moved to the top of the double's mantissa, as
 * numpy's float16 -> float64 cast does). Pure functions of the bit pattern: no host endianness, no FP state
 * (flush-to-zero modes are not used by kvc).
 */
#ifndef KVC_HALF_H
#define KVC_HALF_H

#include <stdint.h>

double half_to_double(uint16_t h);
double bf16_to_double(uint16_t b);

#endif
