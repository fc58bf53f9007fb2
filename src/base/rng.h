/* rng.h: numpy-compatible random numbers. Reproduces, bit for bit, numpy 1.24.2's
 *     np.random.default_rng(seed)            (SeedSequence(seed) -> PCG64)
 *     .bit_generator.random_raw(), .random(), .standard_normal(), .normal(size=n)
 * for a non-negative integer seed of any size. Pipeline: the seed's 32-bit words (least significant
 * first) are hashed into a 4-word SeedSequence pool, which generates 4 u64 words that seed PCG64
 * (XSL-RR 128/64, 128-bit arithmetic emulated with 64-bit halves). Normals use numpy's 256-strip
 * ziggurat (tables in rng_tables.c) and the C library's exp/log1p.
 *
 * Bit-exactness needs IEEE binary64 without excess precision (x86-64 SSE2), no FMA contraction
 * (the Makefile builds with -ffp-contract=off) and the same libm as numpy (glibc on Debian 12);
 * another libm may rarely differ in the last bit of a tail value. See the kvc reference
 * numpy-rng.md. Not covered: next_uint32/integers(), float32 normals, spawn keys.
 *
 * No function allocates except rng_seed_decimal (temporary buffer) and none prints. An rng is a
 * plain value: copy it to fork a stream, no cleanup needed. Not thread-safe per rng object. */
#ifndef KVC_RNG_H
#define KVC_RNG_H
#include <stddef.h>
#include <stdint.h>

/* PCG64 state: 128-bit state and increment as high/low 64-bit halves (numpy's
 * bit_generator.state['state'] == state_hi * 2^64 + state_lo, likewise inc). */
typedef struct rng {
    uint64_t state_hi, state_lo, inc_hi, inc_lo;
} rng;

/* Seeding. All three give numpy's PCG64(SeedSequence(entropy)) state.
 * rng_seed_words: entropy as 32-bit words, least significant first (numpy's _int_to_uint32_array,
 *   or a uint32 array passed to SeedSequence: words are used as given, so trailing zero words
 *   beyond the 4th change the result); n == 0 is treated as the single word [0]. Never fails.
 * rng_seed_u64: the integer seed (words [lo] or [lo, hi]). Never fails.
 * rng_seed_decimal: a non-negative decimal integer of any size: only '0'-'9', at least one digit,
 *   leading zeros allowed (no sign, space or point). Returns 0 on success; -1 if the string is not
 *   such an integer (or memory for its words cannot be allocated), leaving *r untouched. */
void rng_seed_words(rng *r, const uint32_t *words, size_t n);
void rng_seed_u64(rng *r, uint64_t seed);
int  rng_seed_decimal(rng *r, const char *digits);
/* The words of a decimal integer as numpy's _int_to_uint32_array makes them (least significant first, at
 * least one, no high zero words), for callers that append words of their own before rng_seed_words (a
 * method's own stream). digits: '0'-'9' only, checked by the caller. w has room for strlen(digits) / 9 + 1
 * words (9 digits < 2^30). Returns the count. */
size_t rng_decimal_words(uint32_t *w, const char *digits);

/* Draws. Each advances the stream; successive calls continue it, like numpy's calls on one
 * Generator (nothing is cached between calls).
 * rng_next_u64:        one bit_generator.random_raw() value.
 * rng_next_double:     Generator.random(): (u64 >> 11) / 2^53, in [0, 1).
 * rng_standard_normal: Generator.standard_normal() (ziggurat; 1 or more u64 per value).
 * rng_normal_fill:     Generator.normal(size=n): out[i] = 0.0 + 1.0 * z_i (so -0.0 becomes +0.0). */
uint64_t rng_next_u64(rng *r);
double   rng_next_double(rng *r);
double   rng_standard_normal(rng *r);
void     rng_normal_fill(rng *r, double *out, size_t n);

/* SeedSequence internals, exposed for tests.
 * rng_seedseq_pool: numpy's SeedSequence(entropy).pool (mix_entropy) for n entropy words.
 * rng_seedseq_generate_u32: generate_state(n32, uint32) from a pool; generate_state(k, uint64)
 *   is the same 2k words paired little-endian (out[2i] low, out[2i+1] high). */
void rng_seedseq_pool(const uint32_t *words, size_t n, uint32_t pool[4]);
void rng_seedseq_generate_u32(const uint32_t pool[4], uint32_t *out, size_t n32);

#endif
