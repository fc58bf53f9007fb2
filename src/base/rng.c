/* rng.c: numpy 1.24.2-compatible SeedSequence -> PCG64 -> Generator.random/normal, written from the
 * kvc reference numpy-rng.md (section numbers below refer to it). Portable C11: the 128-bit PCG
 * arithmetic is emulated with 64-bit halves. See rng.h for the API. */
#include "base/rng.h"

#include <math.h>
#include <stdlib.h>

#include "base/rng_tables.h"

/* 2.1 SeedSequence constants. */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L  0xca01f9ddu
#define SS_MIX_R  0x4973f715u

/* 3.1 PCG64 multiplier, 128 bits. */
#define PCG_MULT_HI 0x2360ED051FC65DA4ULL
#define PCG_MULT_LO 0x4385DF649FCCF645ULL

/* 4.1 ziggurat_nor_r and ziggurat_nor_inv_r as numpy's doubles. */
#define ZIG_R     0x1.d3bb48209ad33p+1
#define ZIG_INV_R 0x1.183aa6c20e8c1p-2

/* 2.3 hashmix: the multiplier h is advanced before it is used. */
static uint32_t hashmix(uint32_t value, uint32_t *h)
{
    value ^= *h;
    *h *= SS_MULT_A;
    value *= *h;
    return value ^ (value >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> 16);
}

/* 2.4 mix_entropy. An empty entropy hashes like [0]. */
void rng_seedseq_pool(const uint32_t *words, size_t n, uint32_t pool[4])
{
    uint32_t h = SS_INIT_A;
    for (size_t i = 0; i < 4; i++)
        pool[i] = hashmix(i < n ? words[i] : 0u, &h);
    for (size_t src = 0; src < 4; src++)
        for (size_t dst = 0; dst < 4; dst++)
            if (src != dst)
                pool[dst] = mix(pool[dst], hashmix(pool[src], &h));
    for (size_t src = 4; src < n; src++)
        for (size_t dst = 0; dst < 4; dst++)
            pool[dst] = mix(pool[dst], hashmix(words[src], &h));
}

/* 2.5 generate_state: the pool is cycled. */
void rng_seedseq_generate_u32(const uint32_t pool[4], uint32_t *out, size_t n32)
{
    uint32_t h = SS_INIT_B;
    for (size_t i = 0; i < n32; i++) {
        uint32_t v = pool[i % 4] ^ h;
        h *= SS_MULT_B;
        v *= h;
        out[i] = v ^ (v >> 16);
    }
}

/* Full 128-bit product of two 64-bit values (one instruction where the compiler has a 128-bit type). */
static inline void mul_64x64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
#ifdef __SIZEOF_INT128__
    __extension__ unsigned __int128 p = (unsigned __int128)a * b;
    *hi = (uint64_t)(p >> 64);
    *lo = (uint64_t)p;
#else
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (mid << 32) | (p00 & 0xffffffffu);
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* 3.2 step: state = state * MULT + inc (mod 2^128), per 3.6. */
static inline void pcg_step(rng *r)
{
    uint64_t hi, lo;
    mul_64x64(r->state_lo, PCG_MULT_LO, &hi, &lo);
    hi += r->state_hi * PCG_MULT_LO + r->state_lo * PCG_MULT_HI;
    lo += r->inc_lo;
    hi += r->inc_hi + (lo < r->inc_lo);
    r->state_hi = hi;
    r->state_lo = lo;
}

/* 3.2 srandom from generate_state(4, uint64): initstate = w0:w1, initseq = w2:w3. */
void rng_seed_words(rng *r, const uint32_t *words, size_t n)
{
    static const uint32_t zero = 0;
    uint32_t pool[4], s[8];
    uint64_t w[4];
    if (n == 0) {
        words = &zero;
        n = 1;
    }
    rng_seedseq_pool(words, n, pool);
    rng_seedseq_generate_u32(pool, s, 8);
    for (int k = 0; k < 4; k++)
        w[k] = (uint64_t)s[2 * k] | (uint64_t)s[2 * k + 1] << 32;

    r->inc_hi = w[2] << 1 | w[3] >> 63;
    r->inc_lo = w[3] << 1 | 1u;
    r->state_hi = r->state_lo = 0;
    pcg_step(r);
    r->state_lo += w[1];
    r->state_hi += w[0] + (r->state_lo < w[1]);
    pcg_step(r);
}

void rng_seed_u64(rng *r, uint64_t seed)
{
    uint32_t w[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    rng_seed_words(r, w, w[1] ? 2 : 1);
}

/* 2.2: decimal string -> 32-bit words, least significant first, no high zero words. */
size_t rng_decimal_words(uint32_t *w, const char *digits)
{
    size_t n = 1;
    w[0] = 0;
    for (const char *d = digits; *d; d++) {
        uint64_t carry = (uint64_t)(*d - '0');
        for (size_t k = 0; k < n; k++) {
            uint64_t t = (uint64_t)w[k] * 10u + carry;
            w[k] = (uint32_t)t;
            carry = t >> 32;
        }
        if (carry)
            w[n++] = (uint32_t)carry;
    }
    while (n > 1 && w[n - 1] == 0)
        n--;
    return n;
}

int rng_seed_decimal(rng *r, const char *digits)
{
    size_t len = 0;
    while (digits[len] >= '0' && digits[len] <= '9')
        len++;
    if (len == 0 || digits[len] != '\0')
        return -1;
    /* 9 decimal digits < 2^30, so len/9 + 1 words suffice; one more for slack. */
    uint32_t *w = calloc(len / 9 + 2, sizeof *w);
    if (!w)
        return -1;
    rng_seed_words(r, w, rng_decimal_words(w, digits));
    free(w);
    return 0;
}

/* 3.3 XSL-RR: advance first, then output from the new state. */
uint64_t rng_next_u64(rng *r)
{
    pcg_step(r);
    uint64_t x = r->state_hi ^ r->state_lo;
    unsigned rot = (unsigned)(r->state_hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

/* 3.5 */
double rng_next_double(rng *r)
{
    return (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* 4.2 numpy's random_standard_normal. */
/* The rest of one ziggurat draw whose fast test failed (idx, rabs, x as rng_standard_normal made them): the tail
 * or the wedge; NAN when the draw is rejected (the caller draws again). */
static double normal_slow(rng *r, size_t idx, uint64_t rabs, double x)
{
    if (idx == 0) {
        /* Tail beyond r. The sign is bit 8 of rabs, not `negative`. */
        for (;;) {
            double xx = -ZIG_INV_R * log1p(-rng_next_double(r));
            double yy = -log1p(-rng_next_double(r));
            if (yy + yy > xx * xx)
                return ((rabs >> 8) & 1) ? -(ZIG_R + xx) : ZIG_R + xx;
        }
    }
    /* Wedge: one subtract, multiply, add (no FMA; -ffp-contract=off). */
    double f0 = rng_fi_double[idx - 1], f1 = rng_fi_double[idx];
    if ((f0 - f1) * rng_next_double(r) + f1 < exp(-0.5 * x * x))
        return x;
    return NAN;
}

double rng_standard_normal(rng *r)
{
    for (;;) {
        uint64_t u = rng_next_u64(r);
        size_t idx = (size_t)(u & 0xff);
        u >>= 8;
        int negative = (int)(u & 1);
        uint64_t rabs = (u >> 1) & 0x000fffffffffffffULL;
        double x = (double)rabs * rng_wi_double[idx];
        if (negative)
            x = -x;
        if (rabs < rng_ki_double[idx])
            return x; /* fast path */
        double z = normal_slow(r, idx, rabs, x);
        if (!isnan(z)) return z;
    }
}

/* 4.3 Generator.normal(0.0, 1.0, size=n): loc + scale * z, kept literal for the sign of zero. */
void rng_normal_fill(rng *r, double *out, size_t n)
{
    const double loc = 0.0, scale = 1.0;
    rng s = *r;   /* the state in registers: rng_standard_normal's fast path inline, the rest through normal_slow */
    for (size_t i = 0; i < n; i++) {
        double z;
        for (;;) {
            pcg_step(&s);
            uint64_t x = s.state_hi ^ s.state_lo;
            unsigned rot = (unsigned)(s.state_hi >> 58);
            uint64_t u = (x >> rot) | (x << ((64u - rot) & 63u));
            size_t idx = (size_t)(u & 0xff);
            u >>= 8;
            uint64_t rabs = (u >> 1) & 0x000fffffffffffffULL;
            z = (double)rabs * rng_wi_double[idx];
            if (u & 1) z = -z;
            if (rabs < rng_ki_double[idx]) break;
            z = normal_slow(&s, idx, rabs, z);
            if (!isnan(z)) break;
        }
        out[i] = loc + scale * z;
    }
    *r = s;
}
