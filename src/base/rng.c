/* rng.c: numpy 1.24.2-compatible SeedSequence -> PCG64 -> Generator.random/normal, written from the
 * kvc reference numpy-rng.md (section numbers below refer to it). Portable C11: the 128-bit PCG
 * arithmetic is emulated with 64-bit halves (unsigned __int128 for the products where the compiler has one).
 * See rng.h for the API. */
#include "base/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
 * or the wedge; NAN when the draw is rejected (the caller draws again). Its uniforms come from next(src):
 * rng_next_double on an rng, or the block of rng_normal_fill, which hands out the same sequence. */
static inline double normal_slow(double (*next)(void *), void *src, size_t idx, uint64_t rabs, double x)
{
    if (idx == 0) {
        /* Tail beyond r. The sign is bit 8 of rabs, not `negative`. */
        for (;;) {
            double xx = -ZIG_INV_R * log1p(-next(src));
            double yy = -log1p(-next(src));
            if (yy + yy > xx * xx)
                return ((rabs >> 8) & 1) ? -(ZIG_R + xx) : ZIG_R + xx;
        }
    }
    /* Wedge: one subtract, multiply, add (no FMA; -ffp-contract=off). */
    double f0 = rng_fi_double[idx - 1], f1 = rng_fi_double[idx];
    if ((f0 - f1) * next(src) + f1 < exp(-0.5 * x * x))
        return x;
    return NAN;
}

static double next_double_rng(void *r)
{
    return rng_next_double(r);
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
        double z = normal_slow(next_double_rng, r, idx, rabs, x);
        if (!isnan(z)) return z;
    }
}

/* rng_normal_fill draws the raw outputs ahead, a block at a time, from four interleaved copies of the LCG
 * (each jumps 4 steps: s_{k+4} = A4 s_k + C4), so the 128-bit multiply chains overlap; the ziggurat then
 * reads the block in order. A block never holds more outputs than normals are still to come (each normal takes
 * at least one), so none is drawn and thrown away: the state after the fill is the state after its last
 * output, as with rng_standard_normal in a loop. */
#define FILL_BLOCK 256

typedef struct normal_block {
    uint64_t hi, lo;         /* the state after buf's last output */
    uint64_t a4_hi, a4_lo, c4_hi, c4_lo; /* the 4-step jump */
    uint64_t inc_hi, inc_lo;
    size_t pos, cnt;         /* buf[pos..cnt) not yet used */
    size_t left;             /* normals still to come, the one being drawn included */
    uint64_t buf[FILL_BLOCK];
} normal_block;

/* Low 128 bits of (ahi:alo) * (bhi:blo). */
static inline void mul_128(uint64_t ahi, uint64_t alo, uint64_t bhi, uint64_t blo, uint64_t *hi, uint64_t *lo)
{
    mul_64x64(alo, blo, hi, lo);
    *hi += ahi * blo + alo * bhi;
}

/* s = s * a + c (mod 2^128). */
static inline void lcg_jump(uint64_t *shi, uint64_t *slo, uint64_t ahi, uint64_t alo, uint64_t chi, uint64_t clo)
{
#ifdef __SIZEOF_INT128__
    __extension__ typedef unsigned __int128 u128;
    u128 s = ((u128)*shi << 64 | *slo) * ((u128)ahi << 64 | alo) + ((u128)chi << 64 | clo);
    *shi = (uint64_t)(s >> 64);
    *slo = (uint64_t)s;
#else
    uint64_t hi, lo;
    mul_128(*shi, *slo, ahi, alo, &hi, &lo);
    lo += clo;
    hi += chi + (lo < clo);
    *shi = hi;
    *slo = lo;
#endif
}

/* 3.3 XSL-RR output of a state. */
static inline uint64_t xsl_rr(uint64_t hi, uint64_t lo)
{
    uint64_t x = hi ^ lo;
    unsigned rot = (unsigned)(hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

/* Refills b->buf with the next min(b->left, FILL_BLOCK) outputs (b->left >= 1). */
static void block_fill(normal_block *b)
{
    size_t cnt = b->left < FILL_BLOCK ? b->left : FILL_BLOCK;
    const uint64_t ahi = b->a4_hi, alo = b->a4_lo, chi = b->c4_hi, clo = b->c4_lo;
    const uint64_t mh = PCG_MULT_HI, ml = PCG_MULT_LO, ih = b->inc_hi, il = b->inc_lo;
    /* Chain k holds s_{j+k+1}, the state of output j + k. */
    uint64_t h0 = b->hi, l0 = b->lo;
    lcg_jump(&h0, &l0, mh, ml, ih, il);
    uint64_t h1 = h0, l1 = l0;
    lcg_jump(&h1, &l1, mh, ml, ih, il);
    uint64_t h2 = h1, l2 = l1;
    lcg_jump(&h2, &l2, mh, ml, ih, il);
    uint64_t h3 = h2, l3 = l2;
    lcg_jump(&h3, &l3, mh, ml, ih, il);
    uint64_t *buf = b->buf;
    size_t j = 0;
    for (; j + 4 < cnt; j += 4) {
        buf[j] = xsl_rr(h0, l0);
        buf[j + 1] = xsl_rr(h1, l1);
        buf[j + 2] = xsl_rr(h2, l2);
        buf[j + 3] = xsl_rr(h3, l3);
        lcg_jump(&h0, &l0, ahi, alo, chi, clo);
        lcg_jump(&h1, &l1, ahi, alo, chi, clo);
        lcg_jump(&h2, &l2, ahi, alo, chi, clo);
        lcg_jump(&h3, &l3, ahi, alo, chi, clo);
    }
    /* 1 to 4 outputs left; the last one's state is the new state. */
    const uint64_t hs[4] = { h0, h1, h2, h3 }, ls[4] = { l0, l1, l2, l3 };
    size_t r = cnt - j;
    for (size_t k = 0; k < r; k++)
        buf[j + k] = xsl_rr(hs[k], ls[k]);
    b->hi = hs[r - 1];
    b->lo = ls[r - 1];
    b->pos = 0;
    b->cnt = cnt;
}

/* rng_next_double on the block's sequence (normal_slow's draws). */
static double next_double_block(void *src)
{
    normal_block *b = src;
    if (b->pos == b->cnt)
        block_fill(b);
    return (double)(b->buf[b->pos++] >> 11) * (1.0 / 9007199254740992.0);
}

/* x with its sign bit flipped when bit 8 of u is set (numpy's `negative`), without a branch. */
static inline double flip_sign(double x, uint64_t u)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits ^= (u & 0x100u) << 55;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* The ziggurat's fast path over buf[p..cnt) until an output fails it: o[k - p] = 0.0 + 1.0 * z for each output
 * k that passes. Returns the index of the output that failed, or cnt. No calls, so the loop keeps everything in
 * registers. */
static inline size_t fast_run(const uint64_t *buf, size_t p, size_t cnt, double *o)
{
    const double loc = 0.0, scale = 1.0;
    const size_t p0 = p;
    for (; p < cnt; p++) {
        uint64_t u = buf[p];
        size_t idx = (size_t)(u & 0xff);
        uint64_t rabs = (u >> 9) & 0x000fffffffffffffULL;
        double z = flip_sign((double)rabs * rng_wi_double[idx], u);
        if (rabs >= rng_ki_double[idx])
            break;
        o[p - p0] = loc + scale * z;
    }
    return p;
}

/* 4.3 Generator.normal(0.0, 1.0, size=n): loc + scale * z, kept literal for the sign of zero. The same
 * draws as rng_standard_normal in a loop (its fast path below, the rest through normal_slow). */
void rng_normal_fill(rng *r, double *out, size_t n)
{
    const double loc = 0.0, scale = 1.0;
    if (n == 0)
        return;
    normal_block b;
    b.hi = r->state_hi;
    b.lo = r->state_lo;
    b.inc_hi = r->inc_hi;
    b.inc_lo = r->inc_lo;
    /* (A2, C2) = (M^2, M inc + inc), then (A4, C4) = (A2^2, A2 C2 + C2). */
    uint64_t a2h, a2l, c2h = r->inc_hi, c2l = r->inc_lo;
    mul_128(PCG_MULT_HI, PCG_MULT_LO, PCG_MULT_HI, PCG_MULT_LO, &a2h, &a2l);
    lcg_jump(&c2h, &c2l, PCG_MULT_HI, PCG_MULT_LO, r->inc_hi, r->inc_lo);
    mul_128(a2h, a2l, a2h, a2l, &b.a4_hi, &b.a4_lo);
    b.c4_hi = c2h;
    b.c4_lo = c2l;
    lcg_jump(&b.c4_hi, &b.c4_lo, a2h, a2l, c2h, c2l);
    b.pos = b.cnt = 0;

    size_t i = 0;
    while (i < n) {
        b.left = n - i;
        block_fill(&b);
        size_t p = 0;
        for (;;) {
            /* The fast path up to the first output that fails it (or the end of the block). */
            size_t q = fast_run(b.buf, p, b.cnt, out + i);
            i += q - p;
            if (q == b.cnt)
                break;
            uint64_t u = b.buf[q];
            size_t idx = (size_t)(u & 0xff);
            uint64_t rabs = (u >> 9) & 0x000fffffffffffffULL;
            double z = flip_sign((double)rabs * rng_wi_double[idx], u);
            b.pos = q + 1;
            b.left = n - i;
            z = normal_slow(next_double_block, &b, idx, rabs, z);
            if (!isnan(z))
                out[i++] = loc + scale * z;
            p = b.pos; /* the slow path may have refilled the block */
        }
    }
    r->state_hi = b.hi;
    r->state_lo = b.lo;
}
