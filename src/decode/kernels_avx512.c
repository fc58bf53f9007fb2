/* kernels_avx512: the AVX-512 KernelSet (kernels.h): the AVX2 set (kernels_avx2.c) with the slots of int4, q4_0,
 * int8, q8_0, f16, e4m3 and STORE_INTN (KIVI's 4-bit shape) and the softmax pieces (max, exp_sum) replaced by
 * AVX-512F/BW/VL kernels; a second set (the VNNI set) also replaces the int8, q8_0, int4 and q4_0 key slots by
 * integer dot products at any number of heads (int8 keys of 2 to 8 heads and int4 keys of 5 to 8 through AMX tiles
 * where the CPU has AMX-INT8), and the int8, int4 and q4_0 value slots of one head by integer sums (int8 and int4
 * values of 2 to 8 heads through AMX tiles, amx_vals). Both sets take e4m3 and bf16 keys of 2 to 8 heads as
 * AMX-BF16 tile products where the CPU has AMX-BF16 (amxb_scores; the bf16 key slot is otherwise the AVX2 set's).
 * This file alone is compiled with -mavx512f
 * -mavx512bw -mavx512vl (and the AVX2 flags; the VNNI functions carry target("avx512vnni")); decode.c calls it
 * only after cpuid and
 * xgetbv say the CPU and OS have them (the ZMM and opmask state), the VNNI set only where cpuid reports
 * AVX512_VNNI. Its scalar twins are kernels_ref.c's (and
 * kernels_kivi's), like the AVX2 kernels'. Shapes a slot does not take go to the AVX2 slot (see each slot).
 *
 * Why: with several query heads per KV head (GQA) the kernels are bound by float work per cached row (G x W
 * products on each side), not by memory. 512-bit FMAs halve the instruction count of the products, and the
 * conversion of the codes, done once per row for all G heads, becomes for 4 bits 4 instructions per 32 values:
 * one zero extension of 16 bytes to 16 lanes, one shift, and two vpermps lookups in a 16-entry table of the
 * code values (the low 4 bits of each lane are the index: the low nibble directly, the high one after the
 * shift). The table holds n - 8 (KIVI: n for keys, n - 7.5 for values), so no subtraction is needed; q8_0 values
 * are then multiplied by the block's FP16 scale d, q4_0's table is (exact in float32: 11 x 4 or 8 significant
 * bits). E4M3 codes are read as float32 bits (a sign extension, a shift and a mask: 2^-120 of the value, e4m3_f32),
 * the query or the weights lifted by 2^112, so that the results are the AVX2 set's (1/256 of the value: its
 * raw_scale, 256, which this set keeps).
 *
 * Measured on the development machine (Xeon, AVX-512, one thread, rows in L2): about 6 G zmm FMAs/s when an FMA
 * needs at most half a load, 5 G when each needs one; at 4 and 8 heads the kernels run at 70-85 % of what the
 * zmm ports allow (conversion + FMAs + reduction uops / 2 per cycle), so the layouts below are chosen to save
 * loads and shuffles per row, not just FMAs.
 *
 * Column order: natural, except int4 (W % 32 == 0) in units of 32 columns (16 bytes): positions 0..15 the low
 * nibbles (columns 0, 2, .., 30), 16..31 the high ones (1, 3, .., 31); int4 rows with W % 32 != 0 go to the
 * AVX2 kernels, in the AVX2 order (col_order decides by W). KIVI's slots read natural order at the interface.
 *
 * Keys: tiles of 16 rows; query heads in groups of GC = 8, 4, 2, 1 (HEAD_GROUPS), each unit of codes converted
 * once for the group; rows in fours (GC = 8: pairs), each query vector loaded once for them (fours measured 5-12 %
 * faster than pairs at 2 and 4 heads: the loads, not only the FMAs, bound these loops); one float32
 * accumulator of 16 lanes per (row, head) (two when there would be fewer than 8 independent chains). The 16
 * rows' accumulators of a head are reduced together by a shuffle tree to one vector of 16 scores, times the
 * 16 token scales, one (masked) store. 4-bit keys of two or more heads with W % 128 == 0: transposed tiles
 * (key_tile_t), no horizontal sums, two tiles (32 rows) per broadcast query element (the loads bound them too);
 * the same for int8 / e4m3 keys of 8 heads with W % 64 == 0 (key_tile_t8, one byte column = one value) and f16
 * keys of 8 heads with W % 32 == 0 (key_tile_t16, transposed by words; the FMAs read the query elements).
 * Values: tiles of up to 32 tokens; the weights w = p x the token scale (int4, int8) formed once per tile;
 * columns in groups whose GC x group accumulators (16 vectors) stay in registers over the tile's tokens; each
 * unit converted once per group of heads; at 8 heads the FMAs read the weights themselves.
 * With AVX512_VNNI (the VNNI set): int8, q8_0, int4 and q4_0 keys of any number of heads as exact
 * integer dot products with the query in three 8-bit digits (vpdpbusd over transposed dword tiles; see "keys
 * with AVX-512 VNNI" below); int8, int4 and q4_0 values of one head as exact integer sums over the weights in
 * three 8-bit digits (vpdpbusd over 4-token groups; see "values of one query head with AVX-512 VNNI"). The rounded-query sets (decode_kernels_avx512_rounded, a user's choice, never the
 * default): the same key kernels with the query in two or one digits, at any number of heads ("rounded-query
 * sets" below).
 * Softmax pieces: max and exp_sum in 16 lanes, the AVX2 set's exp polynomial lane by lane (the same values), the
 * sum grouped by 16 lanes.
 * Numerics: float32 products and sums like the AVX2 kernels (different grouping of the same kind of sums); the
 * summation order depends only on W, n and G (and KIVI's group), never on the thread count.
 */
#define _DEFAULT_SOURCE   /* syscall: Linux's arch_prctl, which grants the AMX tile state */
#include "decode/decode.h"
#include "decode/kernels.h"
#include "decode/kernels_kivi.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX2__) &&                \
    defined(__FMA__) && defined(__F16C__)
#include "store/elem.h"

#include <float.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define UNROLL _Pragma("GCC unroll 16")
#define INLINE static inline __attribute__((always_inline))

enum { PF_AHEAD = 2048, KT = 16, VT = 32 };   /* prefetch distance (bytes), key tile rows, value tile tokens */
enum { KV_MAXW = 512 };   /* the widest rows of KIVI's kernels and of val_heads' per-tile block scales */
/* The formats of this file; F_KIVI: 4-bit grouped intN codes (KIVI's), read as int4's bytes (values 0..15 on the
 * key side, n - 7.5 on the value side). */
enum { F_INT4, F_Q4_0, F_INT8, F_Q8_0, F_F16, F_KIVI, F_E4M3, F_E4M3H };
/* F_E4M3 reads E4M3 codes as float32 bits (e4m3_f32), F_E4M3H as FP16 (e4m3_f16, tune_intel): the same bytes. */
INLINE int is_e4m3(const int F) { return F == F_E4M3 || F == F_E4M3H; }

/* The kernel choices that were measured to differ between machines (kernels.h, decode_avx512_tune): tune_intel 1 =
 * Intel's (Intel Sapphire Rapids VMs), 0 = AMD's (an AMD Zen 5 VM; with tune_zen4, an AMD Zen 4 VM's): how E4M3 is
 * read (e4m3_f16 on Intel), one query head per KV head (tune_zen4's f16 keys and q8_0 values, DEFINE_FORMAT), the
 * VNNI key tiles' height at four or more heads (vn_scores), the key tiles' prefetch distance (pf_cap) and where
 * some kernels prefetch (pf_hint: the L2 on Intel). Set once with the set (cpuid's vendor and family, or KVC_TUNE),
 * or by decode_avx512_tune_set. */
static int tune_intel = 1, tune_zen4 = 0;

/* Where a software prefetch puts its line: L2 = 0, the L1 (prefetcht0); L2 = 1, on Intel (tune_intel),
 * the L2 only (prefetcht1; why it helps these kernels and not others, these VMs' missing counters cannot say: perhaps
 * it leaves the L1's fill buffers to the demand loads). Measured on the Sapphire Rapids VM
 * (bench_kernels, streamed 256 MiB a side, of which the VM's 480 MiB L3 may hold some, medians of 7-9 alternating
 * runs, ns a row, T0 -> T1): f16 values G = 1 / 2 24.4 / 25.6
 * -> 17.4 / 18.7, f16 keys G = 1 / 4 16.1 / 26.0 -> 15.1 / 21.9, e4m3 values G = 1 10.1 -> 8.6, int8 values (AMX
 * tiles) G = 4 / 8 11.5 / 14.5 -> 10.2 / 11.9, int8 / int4 values G = 1 (VNNI) 9.4 / 5.8 -> 8.9 / 5.5; kvc bench
 * (65536 tokens x 8 KV heads, medians of 3 alternating rounds, ms) f16 8 / 32 query heads 26.4 / 24.8 -> 18.3 /
 * 23.5, int8 32 / 64 12.0 / 14.5 -> 11.1 / 13.7. Where it measured the same or slower it is not used: f16 values
 * at G = 4 (17.3 -> 21.1), q8_0 values at G = 1 (8.3 -> 9.3), e4m3 keys at G = 1 (8.1 -> 8.5), q4_0 values at G = 1,
 * the f16 key tiles of 8 heads, the AMX int8 keys (4.9 -> 6.7 in L2, the same streamed), the AMX-BF16 e4m3 keys
 * (G = 2 / 4 9.3 / 9.9 -> 11.2 / 11.5), every compute-bound kernel (int4 / q4_0 / q8_0 / KIVI keys and values at
 * G >= 4); the ninth session's T1 everywhere measured no better than T0. The test of tune_intel costs about 6
 * instructions a row (count_insns: f16 keys G = 4 120.7 -> 127.9, f16 values G = 1 38.6 -> 44.8, int8 values G = 4
 * 44.6 -> 49.0), in kernels the memory bounds. AMD's tunings keep prefetcht0 everywhere: not measured there. */
INLINE void pf_hint(const void *p, const int L2)
{
    if (L2 && tune_intel) _mm_prefetch((const char *)p, _MM_HINT_T1);
    else _mm_prefetch((const char *)p, _MM_HINT_T0);
}
INLINE void prefetch_range(const uint8_t *p, size_t n, const int L2)
{
#pragma GCC unroll 4
    for (size_t off = 0; off < n; off += 64) pf_hint(p + off, L2);
}

/* The lines of one row of rb bytes at p: its first and last byte's and every 64 bytes between, without a loop for
 * rows of up to 256 bytes (prefetch_range's loop took 15 instructions for a 128-byte row, its set-up included, in
 * the value kernels: tests/count_insns). */
INLINE void prefetch_row(const uint8_t *p, size_t rb, const int L2)
{
    pf_hint(p, L2);
    if (rb > 64) {
        pf_hint(p + 64, L2);
        if (rb > 128) {
            pf_hint(p + 128, L2);
            if (rb > 192) {
                pf_hint(p + 192, L2);
                if (rb > 256) prefetch_range(p + 256, rb - 256, L2);
            }
        }
    }
    pf_hint(p + rb - 1, L2);
}
/* which kernels prefetch to the L2 (above) */
#define KEY_L2(F) ((F) == F_F16)
#define VAL_L2(F, GC) (((F) == F_F16 && (GC) <= 2) || ((GC) == 1 && is_e4m3(F)))

/* A key tile's software prefetch, spread over its work: the bytes of the tile two tiles ahead, a few lines per step
 * of the tile's loop instead of one burst at its start. Bursts overlapped poorly with the work on an AMD EPYC
 * (Zen 5) VM: bench_kernels, keys streamed from memory at G = 4, ns a row, burst PF_AHEAD bytes ahead -> spread one
 * tile ahead -> spread two tiles ahead: int8 10.7 -> 7.7 -> 6.3, f16 13.2 -> 9.4 -> 7.8, e4m3 (G = 8) 22.0 -> 13.9
 * -> 12.3 (in L2: 5.3-5.5, 6.0-6.2, 11.5-11.9); three tiles ahead measured the same as two. On an AMD Zen 4 VM
 * the distance is capped at 4 KiB (pf_cap; bench_kernels, keys streamed, medians of 3 alternating runs, ns a row,
 * two tiles -> at most 4 KiB -> at most 2 KiB: int8 G = 1 6.4 -> 4.7 -> 7.0, q8_0 G = 1 10.2 -> 7.7 -> 9.3, f16
 * G = 4 14.9 -> 13.8 -> 13.9, int8 G = 4 11.1 -> 10.8 -> 13.0). The value kernels spread theirs for the same
 * reason (val_cols). */
typedef struct {
    const char *p;          /* the first line */
    size_t lines, per;      /* lines; lines per step */
} Prefetch;
INLINE Prefetch pf_spread(const uint8_t *p, size_t n, size_t steps)
{
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)63;
    const size_t lines = ((uintptr_t)p + n - a + 63) / 64;
    return (Prefetch){.p = (const char *)a, .lines = lines, .per = (lines + steps - 1) / steps};
}
static size_t pf_cap = (size_t)-1;   /* the tuning's largest distance (tune_set) */
INLINE size_t pf_dist(size_t tile_bytes) { return 2 * tile_bytes < pf_cap ? 2 * tile_bytes : pf_cap; }
/* step j of the tile's loop: its share of the lines */
INLINE void pf_step(const Prefetch *c, size_t j, const int L2)
{
    /* as addresses, not line numbers: a loop over lines l took 9 instructions to set up and 5 a line (f16 keys of 4
     * heads, 36 instructions a row for 4 lines: tests/count_insns) */
    const uintptr_t a = (uintptr_t)c->p, end = a + 64 * c->lines, stride = 64 * c->per;
    uintptr_t q = a + j * stride, e = q + stride;
    if (e > end) e = end;
    for (; q < e; q += 64) pf_hint((const void *)q, L2);
}
/* one line per step j (loops whose steps must stay light; pf_rest issues what is left) */
INLINE void pf_line(const Prefetch *c, size_t j)
{
    if (j < c->lines) pf_hint(c->p + 64 * j, 0);
}
INLINE void pf_rest(const Prefetch *c, size_t from)
{
    for (size_t l = from; l < c->lines; l++) pf_hint(c->p + 64 * l, 0);
}

/* The 16 rows r0.. of a tile of nr rows from token t: *mk their mask (rows below nr), and their FP16 token scales
 * (1 where the rows have none). */
INLINE __m512 tile_scale(const KRows *k, size_t t, size_t r0, size_t nr, __mmask16 *mk)
{
    const size_t left = nr > r0 ? nr - r0 : 0;
    *mk = (__mmask16)(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
    return k->rscale ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(*mk, k->rscale + t + r0)) : _mm512_set1_ps(1.0f);
}

/* The row pointers of TT transposed tiles of 16 rows from base (rows past nr repeat row nr - 1, their scores are
 * not stored); the prefetch of the rows two tiles ahead, spread over steps (pf_spread). */
INLINE Prefetch tile_rows(const uint8_t *rp[2][16], const uint8_t *base, size_t rb, size_t nr, const int TT, size_t steps)
{
    UNROLL for (int T = 0; T < TT; T++)
        UNROLL for (int r = 0; r < 16; r++) {
            const size_t row = (size_t)(16 * T + r);
            rp[T][r] = base + (row < nr ? row : nr - 1) * rb;
        }
    return pf_spread(base + pf_dist(16 * (size_t)TT * rb), nr * rb, steps);
}

/* The table of code values n - 8, n = 0..15 (both formats). */
INLINE __m512 lut_centred(void)
{
    return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
}

/* 16 E4M3 codes as float32 lanes holding 2^-112 / 256 of their value, exactly (E4M3_LIFT): the sign-extended
 * byte << 20 puts the exponent and mantissa bits (6..0) at float32's bits 26..20 and the sign at bit 31 (bits 27..30,
 * copies of the sign, are cleared). Exponent field e = 1..15 then reads 2^(e - 127) (1 + m / 8), the code's value
 * 2^(e - 7) (1 + m / 8) times 2^-120; e = 0 a subnormal m 2^-129, the code's m 2^-9 times 2^-120. Three
 * instructions that run beside the FMAs; the FP16 reading (a shift to FP16 position, then vcvtph2ps) took 2 cycles
 * a vector in vcvtph2ps alone on an AMD Zen 4 VM (measured: 0.48 ns against 0.28 for an FMA). There, bench_kernels
 * (medians of 5 alternating runs, keys + values in L2, ns a row, FP16 reading -> this): G = 1 7.9 + 7.8 -> 6.1 +
 * 5.5, G = 4 13.5 + 14.8 -> 11.6 + 12.4, G = 8 27.2 + 24.4 -> 24.9 + 22.1; kvc bench (65536 tokens x 8 KV heads,
 * medians of 3) G = 1 9.0 -> 7.8 ms, G = 4 20.3 -> 15.6 ms. */
INLINE __m512 e4m3_f32(__m128i b)
{
    const __m512i x = _mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20);
    return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0x87F00000u)));
}
/* What the E4M3 kernels multiply the query (keys) or the weights (values) by, so that the results are in the AVX2
 * set's units (1/256 of the value: raw_scale 256): each product is the same float32 as with the FP16 reading (the
 * factors are powers of two), and the products and sums stay normal floats as they were. A query element of E4M3_QMAX or more, or one not finite, takes
 * the AVX2 set's kernel instead (lifted, it would overflow); so does a weight. */
#define E4M3_LIFT 0x1p112f
#define E4M3_QMAX 32768.0f
/* The reading e4m3_f32 replaced, kept for Intel (tune_intel): there an E4M3 subnormal (|x| < 2^-6), which e4m3_f32
 * makes a float32 subnormal, costs a microcode assist in every FMA that reads it. On an Intel Sapphire Rapids VM
 * kvc bench's e4m3 step took 85 ms at G = 1 and 328 ms at G = 4 (about 1 % of the codes are subnormal, so most
 * vectors hold one), against 10.7 and 16.0 ms with this reading on an earlier VM of that kind (results/bench.txt
 * at commit d75580a), and 17.1 / 42.6 ms against 134.5 / 479.6 in one A/B run on the later VM. The
 * sign-extended byte << 7 puts exponent and mantissa in FP16 position and the sign in bits 14 and 15; bit 14
 * cleared (0xBFFF is -16385): 1/256 of the value, exact, no lift (vcvtph2ps widens FP16 subnormals to normal
 * floats). */
INLINE __m512 e4m3_f16(__m128i b)
{
    __m256i w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
    return _mm512_cvtph_ps(_mm256_and_si256(w, _mm256_set1_epi16(-16385)));
}

/* Stored bytes of a unit of 32 values. */
/* KIVI's codes: n on the key side (its query is scaled per group, its min goes into an offset), n - 7.5 (centred,
 * exact) on the value side. */
INLINE __m512 lut_raw(void) { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
INLINE __m512 lut_half(void)
{
    return _mm512_setr_ps(-7.5f, -6.5f, -5.5f, -4.5f, -3.5f, -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f,
                          6.5f, 7.5f);
}

INLINE size_t unit_bytes(const int F)
{
    return F == F_INT4 || F == F_KIVI ? 16 : F == F_Q4_0 ? sizeof(StoreBlockQ4_0) : F == F_INT8 || is_e4m3(F) ? 32
         : F == F_Q8_0 ? sizeof(StoreBlockQ8_0) : 64;
}
INLINE int is_block(const int F) { return F == F_Q4_0 || F == F_Q8_0; }

/* The block scale of the unit at p as 16 float lanes: *ds when the caller converted it already (block_scales),
 * else the FP16 value at p (a word broadcast and a conversion: 3 of the vector ports' operations). */
INLINE __m512 unit_scale(const uint8_t *p, const float *ds)
{
    return ds ? _mm512_set1_ps(*ds) : _mm512_cvtph_ps(_mm256_set1_epi16((short)elem_u16(p)));
}

/* The 32 values of the unit at p in kernel order, x[0] positions 0..15 and x[1] 16..31. 4 bits: the low
 * nibbles, then the high ones, through the table; int8 / q8_0: bytes 0..15, 16..31; f16: natural. Block
 * formats: times the block's FP16 scale (exact: at most 11 x 8 significant bits; ds: that scale as a float, or
 * NULL); q4_0 with LD: the table is scaled instead (one product per block, the same exact values; measured faster
 * except for 8 heads' keys, where the 16 accumulators leave no room for the scaled table). */
INLINE void cvt32(const int F, const int LD, const uint8_t *p, const float *ds, __m512 lut, __m512 *x)
{
    const uint8_t *c = is_block(F) ? p + 2 : p;
    if (F == F_Q4_0 && LD) {   /* the table times d: one product per block (exact, as (n - 8) d is) */
        const __m512 d = unit_scale(p, ds);
        const __m512 ld = _mm512_mul_ps(lut, d);
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
        x[0] = _mm512_permutexvar_ps(b, ld);
        x[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), ld);
        return;
    }
    if (F == F_INT4 || F == F_Q4_0 || F == F_KIVI) {
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
        x[0] = _mm512_permutexvar_ps(b, lut);
        x[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
    } else if (F == F_INT8 || F == F_Q8_0) {
        x[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c)));
        x[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(c + 16))));
    } else if (F == F_E4M3) {
        x[0] = e4m3_f32(_mm_loadu_si128((const __m128i *)(const void *)c));
        x[1] = e4m3_f32(_mm_loadu_si128((const __m128i *)(const void *)(c + 16)));
    } else if (F == F_E4M3H) {
        x[0] = e4m3_f16(_mm_loadu_si128((const __m128i *)(const void *)c));
        x[1] = e4m3_f16(_mm_loadu_si128((const __m128i *)(const void *)(c + 16)));
    } else {
        x[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)c));
        x[1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(c + 32)));
    }
    if (is_block(F)) {
        const __m512 d = unit_scale(p, ds);
        x[0] = _mm512_mul_ps(x[0], d);
        x[1] = _mm512_mul_ps(x[1], d);
    }
}

/* ---- scores ----------------------------------------------------------------------------------------------- */

/* Lane r of the result = the horizontal sum of v[r * st], r < 16: a tree of 128-bit, then 32-bit shuffles and
 * adds (pairs of vectors at each level), then one permutation to row order. */
INLINE __m512 tree16(const __m512 *v, size_t st)
{
    __m512 t[8], w[4], y[2];
    UNROLL for (int i = 0; i < 8; i++) {   /* chunks: row 2i (two halves), row 2i+1 (two halves) */
        __m512 a = v[(size_t)(2 * i) * st], b = v[(size_t)(2 * i + 1) * st];
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    UNROLL for (int j = 0; j < 4; j++)   /* chunk c: row 4j + c, 4 partial sums */
        w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xDD));
    UNROLL for (int k = 0; k < 2; k++)   /* chunk c: rows 8k + c (lanes 0, 1) and 8k + 4 + c (lanes 2, 3) */
        y[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0xEE));
    /* lane 4c + l: row c + 4l */
    __m512 f = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, f);
}

/* Rows t..t+nr (nr <= 16; s columns i..i+nr) for GC heads (qp: their queries, W floats each, kernel order). */
INLINE void key_tile(const int F, const int GC, float *s, size_t ls, const float *qp, const float *cadd,
                     const KRows *k, size_t t, size_t i, size_t nr)
{
    const size_t W = k->W, nu = W / 32, rb = k->row_bytes, UB = unit_bytes(F);
    const int R = GC <= 4 ? 4 : 2, A = GC * R >= 8 ? 1 : 2;   /* R rows per round */
    const __m512 lut = F == F_KIVI ? lut_raw() : lut_centred();
    __m512 buf[KT * 8];   /* buf[r * GC + g]: the accumulator of row r, head g */
    const uint8_t *base = k->codes + t * rb;
    Prefetch pf = pf_spread(base + pf_dist(KT * rb), nr * rb, KT / (size_t)R * nu);
    for (size_t r0 = 0; r0 < KT; r0 += (size_t)R) {
        if (r0 >= nr) {
            UNROLL for (int m = 0; m < R * GC; m++) buf[r0 * (size_t)GC + (size_t)m] = _mm512_setzero_ps();
            continue;
        }
        const uint8_t *rp[4];
        UNROLL for (int r = 0; r < R; r++) rp[r] = base + (r0 + (size_t)r < nr ? r0 + (size_t)r : r0) * rb;
        __m512 a[16];
        UNROLL for (int m = 0; m < R * GC * A; m++) a[m] = _mm512_setzero_ps();
        for (size_t u = 0; u < nu; u++) {
            __m512 x[4][2];
            pf_step(&pf, r0 / (size_t)R * nu + u, KEY_L2(F));
            UNROLL for (int r = 0; r < R; r++) cvt32(F, GC < 8, rp[r] + u * UB, NULL, lut, x[r]);
            UNROLL for (int g = 0; g < GC; g++) {
                __m512 q0 = _mm512_loadu_ps(qp + (size_t)g * W + 32 * u);
                __m512 q1 = _mm512_loadu_ps(qp + (size_t)g * W + 32 * u + 16);
                __asm__("" : "+v"(q0), "+v"(q1));   /* one load for the R rows (not one per FMA) */
                UNROLL for (int r = 0; r < R; r++) {
                    const int m = (r * GC + g) * A;
                    a[m] = _mm512_fmadd_ps(q0, x[r][0], a[m]);
                    a[m + A - 1] = _mm512_fmadd_ps(q1, x[r][1], a[m + A - 1]);
                }
            }
        }
        UNROLL for (int m = 0; m < R * GC; m++)
            buf[r0 * (size_t)GC + (size_t)m] = A == 2 ? _mm512_add_ps(a[2 * m], a[2 * m + 1]) : a[m];
    }
    pf_rest(&pf, (nr + (size_t)R - 1) / (size_t)R * nu * pf.per);   /* rounds past nr take no steps */
    __mmask16 mk;
    const __m512 sc = tile_scale(k, t, 0, nr, &mk);
    UNROLL for (int g = 0; g < GC; g++) {
        __m512 v = tree16(buf + g, (size_t)GC);
        if (k->rscale) v = _mm512_mul_ps(v, sc);
        if (F == F_KIVI) v = _mm512_add_ps(v, _mm512_set1_ps(cadd[g]));
        _mm512_mask_storeu_ps(s + (size_t)g * ls + i, mk, v);
    }
}

/* ---- 4-bit keys with W % 128 == 0: transposed tiles ------------------------------------------------------- */

/* 16 rows x 64 bytes (row r at rp[r] + off) transposed in 4 unpack stages (bytes, words, dwords, qwords, each
 * within 128-bit lanes): tb[64 y + 16 c + r] = byte 16 c + y of row r (y < 16, lane c < 4). */
INLINE void transpose16x64(const uint8_t *const *rp, size_t off, uint8_t *tb)
{
    __m512i r[16], a[16], b[16], c[16];
    UNROLL for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512((const void *)(rp[i] + off));
    UNROLL for (int i = 0; i < 8; i++) {   /* a[2i]: bytes 0..7 of rows 2i, 2i+1 interleaved; a[2i+1]: 8..15 */
        a[2 * i] = _mm512_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
    }
    UNROLL for (int k = 0; k < 4; k++) {   /* b[4k + m]: bytes 4m..4m+3 of rows 4k..4k+3 */
        b[4 * k] = _mm512_unpacklo_epi16(a[4 * k], a[4 * k + 2]);
        b[4 * k + 1] = _mm512_unpackhi_epi16(a[4 * k], a[4 * k + 2]);
        b[4 * k + 2] = _mm512_unpacklo_epi16(a[4 * k + 1], a[4 * k + 3]);
        b[4 * k + 3] = _mm512_unpackhi_epi16(a[4 * k + 1], a[4 * k + 3]);
    }
    UNROLL for (int h = 0; h < 2; h++)   /* c[8h + 2m + e]: bytes 4m + 2e, 4m + 2e + 1 of rows 8h..8h+7 */
        UNROLL for (int m = 0; m < 4; m++) {
            c[8 * h + 2 * m] = _mm512_unpacklo_epi32(b[8 * h + m], b[8 * h + 4 + m]);
            c[8 * h + 2 * m + 1] = _mm512_unpackhi_epi32(b[8 * h + m], b[8 * h + 4 + m]);
        }
    UNROLL for (int x = 0; x < 8; x++) {   /* byte 2x, then 2x + 1, of the 16 rows */
        _mm512_store_si512((void *)(tb + 64 * (2 * x)), _mm512_unpacklo_epi64(c[x], c[8 + x]));
        _mm512_store_si512((void *)(tb + 64 * (2 * x + 1)), _mm512_unpackhi_epi64(c[x], c[8 + x]));
    }
}

/* Transposed order of a 4-bit row of W % 128 == 0 columns: position 2P + h (P = 64z + 4y + c: chunk z of 64
 * bytes, byte y of lane c) is natural column 2 (64z + 16c + y) + h. */
INLINE size_t tpos_col(size_t p)
{
    const size_t P = p / 2, h = p % 2, z = P / 64, y = P % 64 / 4, c = P % 4;
    return 2 * (64 * z + 16 * c + y) + h;
}

/* Rows t..t+nr (nr <= 16) of 4-bit keys for GC heads: the tile's codes transposed (tb: 16 rows per byte), then
 * per byte column its low and high nibbles as 16 rows each (table lookups), one FMA per head with the query
 * element broadcast: the 16 scores of a head build up in lanes, no horizontal sums. qt: the heads' queries in
 * transposed order (W floats each); cadd: per-head offsets (KIVI) or NULL. */
INLINE void key_tile_t(const int F, const int GC, const int TT, float *s, size_t ls, const float *qt,
                       const float *cadd, const KRows *k, size_t t, size_t i, size_t nr)
{
    const size_t W = k->W, nz = W / 128, rb = k->row_bytes;
    const int A = GC >= 8 ? 1 : GC == 4 ? 2 : 4;   /* accumulators per head and tile: 8 chains (one head: 4) */
    const __m512 lut = F == F_KIVI ? lut_raw() : lut_centred();
    uint8_t tb[2][16 * 64] __attribute__((aligned(64)));
    const uint8_t *rp[2][16];
    Prefetch pf = tile_rows(rp, k->codes + t * rb, rb, nr, TT, nz * 32);
    __m512 a[2][8];
    UNROLL for (int T = 0; T < TT; T++) UNROLL for (int m = 0; m < 8; m++) a[T][m] = _mm512_setzero_ps();
    for (size_t z = 0; z < nz; z++) {
        UNROLL for (int T = 0; T < TT; T++) transpose16x64(rp[T], 64 * z, tb[T]);
        const float *qz = qt + 128 * z;
        for (size_t P = 0; P < 64; P += 2) {   /* two byte columns per round: 2A chains per head when A > 1 */
            __m512 lo[2][2], hi[2][2];
            pf_step(&pf, 32 * z + P / 2, 0);
            UNROLL for (int T = 0; T < TT; T++)
                UNROLL for (int e = 0; e < 2; e++) {
                    __m512i b = _mm512_cvtepu8_epi32(
                        _mm_load_si128((const __m128i *)(const void *)(tb[T] + 16 * (P + (size_t)e))));
                    lo[T][e] = _mm512_permutexvar_ps(b, lut);
                    hi[T][e] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
                }
            UNROLL for (int g = 0; g < GC; g++) {
                const float *qg = qz + (size_t)g * W + 2 * P;
                UNROLL for (int e = 0; e < 2; e++) {   /* A = 1: one chain; 2: low / high; 4: by e too */
                    const int m0 = g * A + (A == 4 ? 2 * e : 0), m1 = g * A + (A == 1 ? 0 : A == 2 ? 1 : 2 * e + 1);
                    const __m512 ql = _mm512_set1_ps(qg[2 * e]), qh = _mm512_set1_ps(qg[2 * e + 1]);
                    UNROLL for (int T = 0; T < TT; T++) {   /* each broadcast query element serves TT tiles */
                        a[T][m0] = _mm512_fmadd_ps(ql, lo[T][e], a[T][m0]);
                        a[T][m1] = _mm512_fmadd_ps(qh, hi[T][e], a[T][m1]);
                    }
                }
            }
        }
    }
    UNROLL for (int T = 0; T < TT; T++) {
        const size_t r0 = 16 * (size_t)T;
        __mmask16 mk;
        const __m512 sc = tile_scale(k, t, r0, nr, &mk);
        UNROLL for (int g = 0; g < GC; g++) {
            __m512 *ag = a[T] + g * A;
            if (A >= 4) UNROLL for (int m = 0; m < 2; m++) ag[m] = _mm512_add_ps(ag[m], ag[m + 2]);
            if (A >= 2) ag[0] = _mm512_add_ps(ag[0], ag[1]);
            __m512 v = ag[0];
            if (k->rscale) v = _mm512_mul_ps(v, sc);
            if (F == F_KIVI) v = _mm512_add_ps(v, _mm512_set1_ps(cadd[g]));
            _mm512_mask_storeu_ps(s + (size_t)g * ls + i + r0, mk, v);
        }
    }
}

/* Rows t..t+n in transposed tiles of 32 rows (a last part of at most 16: one tile). */
INLINE void key_tiles_t(const int F, const int GC, float *s, size_t ls, const float *qt, const float *cadd,
                        const KRows *k, size_t t, size_t i, size_t n)
{
    for (size_t r = 0; r < n; r += 32) {
        const size_t nr = n - r < 32 ? n - r : 32;
        if (nr > 16) key_tile_t(F, GC, 2, s, ls, qt, cadd, k, t + r, i + r, nr);
        else key_tile_t(F, GC, 1, s, ls, qt, cadd, k, t + r, i + r, nr);
    }
}

/* idx[p] = where the query element of transposed position p sits in a query of W columns in the order `from`
 * (0: natural, 1: this file's int4 order, units of 32 with the even columns first). */
static void tpos_index(int32_t *idx, size_t W, int from)
{
    for (size_t p = 0; p < W; p++) {
        size_t j = tpos_col(p), u = j / 32, o = j % 32;
        idx[p] = (int32_t)(from ? 32 * u + (o % 2 ? 16 + o / 2 : o / 2) : j);
    }
}

/* dst[p] = src[idx[p]], p < W (W % 16 == 0). */
INLINE void gather_w(float *dst, const float *src, const int32_t *idx, size_t W)
{
    for (size_t p = 0; p < W; p += 16)
        _mm512_storeu_ps(dst + p, _mm512_i32gather_ps(_mm512_loadu_si512((const void *)(idx + p)), src, 4));
}

/* ---- 8-bit keys (int8, e4m3) of 8 heads with W % 64 == 0: transposed tiles ------------------------------------ */

/* Byte column P (< 64) of a transposed chunk (transpose16x64) holds column 16 (P % 4) + P / 4 of the chunk's 64. */
INLINE size_t t8_col(size_t p) { return p / 64 * 64 + 16 * (p % 64 % 4) + p % 64 / 4; }

/* The 16 rows' values of one transposed byte column: int8 as is, e4m3 lifted (e4m3_f32) or as FP16 (e4m3_f16). */
INLINE __m512 cvt_col8(const int F, const uint8_t *p)
{
    const __m128i b = _mm_load_si128((const __m128i *)(const void *)p);
    if (F == F_INT8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    return F == F_E4M3H ? e4m3_f16(b) : e4m3_f32(b);
}

/* Rows t..t+nr (nr <= 32) of 8-bit keys for 8 heads: per chunk of 64 bytes the two 16-row tiles' codes transposed,
 * then per byte column the rows converted once and one FMA per head and tile with the query element broadcast
 * (once for both tiles): lanes = rows, no horizontal sums. qt: the heads' queries in t8_col order, W floats each. */
INLINE void key_tile_t8(const int F, const int TT, float *s, size_t ls, const float *qt, const KRows *k, size_t t,
                        size_t nr)
{
    const size_t W = k->W, nz = W / 64, rb = k->row_bytes;
    uint8_t tb[2][16 * 64] __attribute__((aligned(64)));
    const uint8_t *rp[2][16];
    Prefetch pf = tile_rows(rp, k->codes + t * rb, rb, nr, TT, nz * 64);
    __m512 a[2][8];
    UNROLL for (int T = 0; T < TT; T++) UNROLL for (int g = 0; g < 8; g++) a[T][g] = _mm512_setzero_ps();
    for (size_t z = 0; z < nz; z++) {
        UNROLL for (int T = 0; T < TT; T++) transpose16x64(rp[T], 64 * z, tb[T]);
        const float *qz = qt + 64 * z;
        for (size_t P = 0; P < 64; P++) {
            __m512 x[2];
            pf_step(&pf, 64 * z + P, 0);
            UNROLL for (int T = 0; T < TT; T++) x[T] = cvt_col8(F, tb[T] + 16 * P);
            UNROLL for (int g = 0; g < 8; g++) {
                const __m512 q = _mm512_set1_ps(qz[(size_t)g * W + P]);
                UNROLL for (int T = 0; T < TT; T++) a[T][g] = _mm512_fmadd_ps(q, x[T], a[T][g]);
            }
        }
    }
    UNROLL for (int T = 0; T < TT; T++) {
        const size_t r0 = 16 * (size_t)T;
        __mmask16 mk;
        const __m512 sc = tile_scale(k, t, r0, nr, &mk);
        UNROLL for (int g = 0; g < 8; g++) {
            __m512 v = a[T][g];
            if (k->rscale) v = _mm512_mul_ps(v, sc);
            _mm512_mask_storeu_ps(s + (size_t)g * ls + r0, mk, v);
        }
    }
}

/* ---- f16 keys of 8 heads with W % 32 == 0: transposed tiles ------------------------------------------------- */

/* Position p (< 32) of a transposed chunk (transpose16x32w) holds column 8 (p % 4) + p / 4 of the chunk's 32. */
INLINE size_t t16_col(size_t p) { return p / 32 * 32 + 8 * (p % 32 % 4) + p % 32 / 4; }

/* 16 rows x 32 FP16 values (row r at rp[r] + off) transposed in three unpack stages (words, dwords, qwords, within
 * 128-bit lanes) and one vpermt2q per pair of registers: tb[16 p + r] = value t16_col(p) of row r. */
INLINE void transpose16x32w(const uint8_t *const *rp, size_t off, uint16_t *tb)
{
    __m512i r[16], a[16], b[16], c[2][8];
    UNROLL for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512((const void *)(rp[i] + off));
    UNROLL for (int i = 0; i < 8; i++) {   /* a[2i]: words 0..3 of each lane, rows 2i, 2i+1 paired; a[2i+1]: 4..7 */
        a[2 * i] = _mm512_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    UNROLL for (int k = 0; k < 4; k++) {   /* b[4k + m]: words 2m, 2m + 1 of each lane, rows 4k..4k+3 */
        b[4 * k] = _mm512_unpacklo_epi32(a[4 * k], a[4 * k + 2]);
        b[4 * k + 1] = _mm512_unpackhi_epi32(a[4 * k], a[4 * k + 2]);
        b[4 * k + 2] = _mm512_unpacklo_epi32(a[4 * k + 1], a[4 * k + 3]);
        b[4 * k + 3] = _mm512_unpackhi_epi32(a[4 * k + 1], a[4 * k + 3]);
    }
    UNROLL for (int h = 0; h < 2; h++)   /* c[h][j], lane L: rows 8h..8h+7 of word 8 L + j */
        UNROLL for (int m = 0; m < 4; m++) {
            c[h][2 * m] = _mm512_unpacklo_epi64(b[8 * h + m], b[8 * h + 4 + m]);
            c[h][2 * m + 1] = _mm512_unpackhi_epi64(b[8 * h + m], b[8 * h + 4 + m]);
        }
    const __m512i i01 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i i23 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    UNROLL for (int j = 0; j < 8; j++) {   /* positions 4j..4j+3: words j, 8 + j, 16 + j, 24 + j of the 16 rows */
        _mm512_store_si512((void *)(tb + 16 * (4 * j)), _mm512_permutex2var_epi64(c[0][j], i01, c[1][j]));
        _mm512_store_si512((void *)(tb + 16 * (4 * j + 2)), _mm512_permutex2var_epi64(c[0][j], i23, c[1][j]));
    }
}

/* acc += the float at p broadcast x x (the FMA reads p itself: no broadcast register, no copies) */
INLINE __m512 fma_bcast(__m512 acc, __m512 x, const float *p)
{
    __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*p));
    return acc;
}

/* Rows t..t+nr (nr <= 32) of f16 keys for GC heads (scores_gc takes it for 8; 4 works but measured slower), as
 * key_tile_t8: per chunk of 32 columns the two 16-row tiles transposed, then per column the 16 rows converted once
 * and one FMA per head and tile that reads the query element itself (embedded broadcast): lanes = rows, no
 * horizontal sums. qt: the queries interleaved, qt[GC p + g] = head g's element at position p (t16_col order).
 * The prefetch: 4 lines of the rows two tiles ahead (pf_dist) every 4 columns, a pointer compare and no loop (the
 * rows' lines are 4 per 4 columns for 32 rows of 128 columns; fewer columns or rows issue what is left after the
 * last chunk). Measured on the Sapphire Rapids VM (bench_kernels f16 keys, medians of 5 alternating runs, ns a row
 * in L2 / streamed, key_tile -> this): G = 8 36.6 / 42.2 -> 29.1 / 31.6, a second run 41.6 / 47.8 -> 28.6 / 29.0;
 * tests/count_insns 220 -> 132 instructions a row. At 4 heads 18.1 / 27.0 -> 20.6 / 28.3 (94 instructions against
 * 119, but the 16 shuffles a row share the FMAs' ports), so 4 heads keep key_tile. */
INLINE void key_tile_t16(const int GC, const int TT, float *s, size_t ls, const float *qt, const KRows *k, size_t t,
                         size_t nr)
{
    const size_t W = k->W, nz = W / 32, rb = k->row_bytes;
    uint16_t tb[2][16 * 32] __attribute__((aligned(64)));
    const uint8_t *rp[2][16];
    const Prefetch pf = tile_rows(rp, k->codes + t * rb, rb, nr, TT, nz * 8);
    const char *pp = pf.p, *pe = pf.p + 64 * pf.lines;
    __m512 a[2][8];
    UNROLL for (int T = 0; T < TT; T++) UNROLL for (int g = 0; g < GC; g++) a[T][g] = _mm512_setzero_ps();
    for (size_t z = 0; z < nz; z++) {
        UNROLL for (int T = 0; T < TT; T++) transpose16x32w(rp[T], 64 * z, tb[T]);
        const float *qz = qt + 32 * (size_t)GC * z;
        for (size_t P = 0; P < 32; P += 4) {
            if (pp + 192 < pe) {
                UNROLL for (int l = 0; l < 4; l++) pf_hint(pp + 64 * l, 0);
                pp += 256;
            }
            UNROLL for (int e = 0; e < 4; e++) {
                __m512 x[2];
                const size_t c = P + (size_t)e;
                UNROLL for (int T = 0; T < TT; T++)
                    x[T] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(tb[T] + 16 * c)));
                const float *qe = qz + (size_t)GC * c;
                UNROLL for (int g = 0; g < GC; g++)
                    UNROLL for (int T = 0; T < TT; T++) a[T][g] = fma_bcast(a[T][g], x[T], qe + g);
            }
        }
    }
    for (; pp < pe; pp += 64) pf_hint(pp, 0);
    UNROLL for (int T = 0; T < TT; T++) {   /* f16 rows have no token scale: only tile_scale's mask is used */
        const size_t r0 = 16 * (size_t)T;
        __mmask16 mk;
        (void)tile_scale(k, t, r0, nr, &mk);
        UNROLL for (int g = 0; g < GC; g++) _mm512_mask_storeu_ps(s + (size_t)g * ls + r0, mk, a[T][g]);
    }
}

INLINE void scores_gc(const int F, const int GC, float *s, size_t ls, const float *qp, const KRows *k, size_t t0,
                      size_t n, float *scr)
{
    if ((F == F_INT8 || is_e4m3(F)) && GC == 8 && k->W % 64 == 0) {   /* scr: the queries, t8_col order */
        const size_t W = k->W;
        for (size_t h = 0; h < 8; h++)
            for (size_t p = 0; p < W; p++) scr[h * W + p] = qp[h * W + t8_col(p)];
        for (size_t r = 0; r < n; r += 32) {
            const size_t nr = n - r < 32 ? n - r : 32;
            if (nr > 16) key_tile_t8(F, 2, s + r, ls, scr, k, t0 + r, nr);
            else key_tile_t8(F, 1, s + r, ls, scr, k, t0 + r, nr);
        }
        return;
    }
    if (F == F_F16 && GC == 8 && k->W % 32 == 0) {   /* scr: the queries, t16_col order, interleaved */
        const size_t W = k->W;
        for (size_t p = 0; p < W; p++)
            for (size_t h = 0; h < (size_t)GC; h++) scr[(size_t)GC * p + h] = qp[h * W + t16_col(p)];
        for (size_t r = 0; r < n; r += 32) {
            const size_t nr = n - r < 32 ? n - r : 32;
            if (nr > 16) key_tile_t16(GC, 2, s + r, ls, scr, k, t0 + r, nr);
            else key_tile_t16(GC, 1, s + r, ls, scr, k, t0 + r, nr);
        }
        return;
    }
    for (size_t i = 0; i < n; i += KT) key_tile(F, GC, s, ls, qp, NULL, k, t0 + i, i, n - i < KT ? n - i : KT);
}

/* The query heads of one KV head in groups of 8, 4, 2, 1 (largest first). */
#define HEAD_GROUPS(G, h, CALL)                                                                                  \
    for (size_t h = 0; h < (G);) {                                                                               \
        const size_t left_ = (G) - h;                                                                            \
        if (left_ >= 8) {                                                                                        \
            enum { GC = 8 };                                                                                     \
            CALL;                                                                                                \
            h += 8;                                                                                              \
        } else if (left_ >= 4) {                                                                                 \
            enum { GC = 4 };                                                                                     \
            CALL;                                                                                                \
            h += 4;                                                                                              \
        } else if (left_ >= 2) {                                                                                 \
            enum { GC = 2 };                                                                                     \
            CALL;                                                                                                \
            h += 2;                                                                                              \
        } else {                                                                                                 \
            enum { GC = 1 };                                                                                     \
            CALL;                                                                                                \
            h += 1;                                                                                              \
        }                                                                                                        \
    }

/* ---- int8 / q8_0 / int4 / q4_0 keys with AVX-512 VNNI: integer dot products over transposed tiles ---------- */

/* Used for any number of heads, W <= VN_MAXW and W % 64 == 0
 * (8 bits) or W % 128 == 0 (4 bits), in
 * the VNNI set (decode_kernels_avx512(1) when cpuid reports AVX512_VNNI; KVC_ISA=avx512-novnni keeps the float32 kernels).
 *
 * The query, exactly enough: per head a float32 scale sq = max|q| / VN_QMAX and the integer v = round(q / sq),
 * |v| <= VN_QMAX < 2^23, written in three balanced base-256 digits, v = 65536 d0 + 256 d1 + d2, each in
 * [-128, 127] (d2 = v mod 256 taken into [-128, 127], then d1 the same of (v - d2) / 256, d0 = the rest: |d0| <=
 * (VN_QMAX / 256 + 128.5) / 256 < 128). The only rounding is v's: |q - sq v| <= sq / 2 = max|q| 2^-24 (about
 * 6e-8 of the largest element), the size of float32's own rounding of the products the float kernels sum. (A
 * query rounded to 16 bits would move the scores by about 2.6e-5 of their spread: over the 1e-5 rule.)
 *
 * Keys: vpdpbusd multiplies unsigned by signed bytes (4 products per int32 lane), so an int8 / q8_0 code k is
 * read as k + 128 (the sign bit flipped, one XOR per 64 bytes) and a 4-bit code as its stored n = value + 8;
 * each digit's accumulator starts at -off sum_j d (off = 128 or 8; per head and digit, per block of 32 for
 * q8_0 / q4_0), which makes it sum_j value_j d_j exactly: an int32 sum whose partial values stay below
 * 255 x 128 x W < 2^31 (W <= VN_MAXW). Lanes are rows: a tile's 16 rows are transposed in dwords (16 x 64 bytes
 * per chunk, four shuffle stages; 4 bits: the packed bytes, each word then split into its low and high nibbles),
 * so one vpdpbusd takes 4 columns of 16 rows against one head's digit of those 4 columns (broadcast from memory
 * by the instruction); no horizontal sums. Per row of 128 int8 codes: 2 XORs + 8 shuffles for all heads, then
 * 6 vpdpbusd per head (the float kernel: 16 conversions for all heads, then 8 FMAs and ~3 reduction shuffles
 * per head); a 512-bit vpdpbusd issues at 2 per cycle like the FMAs on the development machine's Sapphire
 * Rapids cores (measured: 12 independent chains, 0.16 ns each for both).
 *
 * The three exact digit sums D0, D1, D2 become the score as float32: (D0 65536 + D1 256) + D2 (two roundings,
 * each relative 2^-24 of a partial result whose size is at most sum_j |value_j| |v_j|), then times sq and the
 * token scale (int8, int4) or, per block of 32, times the block's FP16 scale d, summed over the blocks in
 * float32 (q8_0, q4_0). tests/test_decode.c compares the scores with and without VNNI against double (worst
 * seen: about 1e-7 of sum_j |q_j k_j|, 1e-6 for a query with an outlier channel 100x the rest; float32 kernels
 * 1e-7 and 7e-7) and the whole step against attention in double like every other kernel (DECODE_TOL).
 * Measured (one thread, the slot called on 2048 rows in L2, W = 128, best of 300, ns per row, VNNI vs float32
 * kernels): int8 G = 2 / 4 / 8 4.7 / 7.2 / 11.7 vs 7.0 / 10.4 / 16.3; q8_0 6.3 / 9.4 / 15.7 vs 8.6 / 12.7 /
 * 24.8; int4 4.2 / 7.0 / 12.1 vs 6.2 / 8.4 / 14.4; q4_0 5.4 / 8.4 / 14.4 vs 7.7 / 11.6 / 23.5. */
enum { VN_MAXW = 512 };
#define VN_QMAX 8355000.0   /* < 127 * 65536 + 127 * 256 + 128, with room for float32's rounding of sq */

/* The rounded-query sets (decode_kernels_avx512_rounded, DECODE_FUSED_INT16Q / _INT8Q): the same kernels with ND =
 * 2 or 1 digits instead of 3, for any number of heads: v = round(q / sq), |v| <= vn_qmax(ND) (2 digits: 32383,
 * so that |d0| <= (32383 + 128) / 256 < 127; 1 digit: 127, v itself, as ggml rounds its query to q8_0). The
 * scores then carry the query's rounding, |q - sq v| <= max|q| / (2 vn_qmax): about 2e-5 (int16) or 5e-3
 * (int8) of the largest score, measured and printed by kvc bench beside the speed. With one digit the heads'
 * sums are split over two accumulators (even and odd column words, added exactly at the end), so that four
 * heads still give 8-16 independent chains. */
INLINE double vn_qmax(const int ND) { return ND == 1 ? 127.0 : ND == 2 ? 32383.0 : VN_QMAX; }
INLINE int vn_nacc(const int ND) { return ND == 1 ? 2 : ND; }   /* accumulators per (tile, head) */

#define VNNI_INLINE static inline __attribute__((always_inline, target("avx512vnni")))

INLINE int vn_4bit(const int F) { return F == F_INT4 || F == F_Q4_0; }

/* The prepared query's position (kernel order) of byte 0 of column word w (vn_transpose's layout; bytes 1..3 follow
 * it): 8 bits: column 4w; int4 (chunks of 64 packed bytes; words 2c / 2c + 1 = the low / high nibbles of packed
 * word c): natural columns 2 (64 z + 4 c + i) + h, i < 4, which in this file's int4 order (units of 32, even
 * columns first) sit at 32 (4 z + c / 4) + 16 h + 4 (c % 4) + i; q4_0 (chunks of 4 blocks; packed word c = bytes
 * 4 (c % 4).. of block c / 4, low nibble = column j, high = j + 16; natural order): the same positions. Each block
 * of 32 columns thus fills the words 8b..8b+7 (q8_0, q4_0). */
INLINE size_t vn_wpos(const int F, size_t w)
{
    if (!vn_4bit(F)) return 4 * w;
    const size_t z = w / 32, c = w % 32 / 2, h = w % 2;
    return 32 * (4 * z + c / 4) + 16 * h + 4 * (c % 4);
}

/* The G prepared queries (qp: W floats each, kernel order) as ND digit words and offsets: qd[(w G + h) ND + e] =
 * the 4 bytes of digit e (most significant first: 3 digits 65536s, 256s, units; 2: 256s, units; 1: v) of column
 * word w of head h (vn_wpos); cor[(b G + h) ND + e] = -off x the sum of digit e over block b (32 columns for
 * q8_0 / q4_0, all W else; off = 128 for the sign-flipped 8-bit codes, 8 for the 4-bit codes n = value + 8);
 * sq[h] the scales. dg: scratch of ND W bytes.
 * Returns 0, or -1 when a query holds a value that is not finite or is too small for a normal scale (the caller
 * then takes the float kernel). */
INLINE int vn_prep(const int F, const int ND, int32_t *qd, int32_t *cor, float *sq, int8_t *dg, const float *qp,
                   size_t G, size_t W)
{
    const double qmax = vn_qmax(ND);
    const size_t nw = W / 4, bc = is_block(F) ? 32 : W;   /* columns per offset block */
    const int32_t off = vn_4bit(F) ? 8 : 128;
    for (size_t h = 0; h < G; h++) {
        const float *q = qp + h * W;
        __m512 mx = _mm512_setzero_ps();
        __mmask16 nan = 0;   /* a running max can lose a NaN to a later lane value: looked for on its own */
        for (size_t j = 0; j < W; j += 16) {
            const __m512 x = _mm512_loadu_ps(q + j);
            nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            mx = _mm512_max_ps(mx, _mm512_abs_ps(x));
        }
        const float m = _mm512_reduce_max_ps(mx);
        if (nan || !(m <= FLT_MAX)) return -1;
        const float sc = m > 0.0f ? (float)(m / qmax) : 1.0f;
        if (!(sc >= FLT_MIN)) return -1;   /* a query below 1e-31: its scale would not be a normal float */
        sq[h] = sc;
        const __m512d inv = _mm512_set1_pd(1.0 / (double)sc), lim = _mm512_set1_pd(qmax);
        const __m512i c128 = _mm512_set1_epi32(128), c255 = _mm512_set1_epi32(255);
        __m512i sum[3] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};   /* per digit */
        for (size_t j = 0; j < W; j += 16) {   /* the digits in kernel order: dg[e W + j] */
            const __m512 x = _mm512_loadu_ps(q + j);
            __m512d lo = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), inv);
            __m512d hi = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), inv);
            lo = _mm512_max_pd(_mm512_min_pd(lo, lim), _mm512_sub_pd(_mm512_setzero_pd(), lim));
            hi = _mm512_max_pd(_mm512_min_pd(hi, lim), _mm512_sub_pd(_mm512_setzero_pd(), lim));
            const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtpd_epi32(lo)), _mm512_cvtpd_epi32(hi), 1);
            /* balanced digits, least significant first: u = v mod 256 in [-128, 127], v <- (v - u) / 256 (exact);
             * the last digit is what is left */
            __m512i d[3], r = v;
            for (int e = ND - 1; e > 0; e--) {
                d[e] = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(r, c128), c255), c128);
                r = _mm512_srai_epi32(_mm512_sub_epi32(r, d[e]), 8);
            }
            d[0] = r;
            for (int e = 0; e < ND; e++) {
                _mm_storeu_si128((__m128i *)(void *)(dg + e * W + j), _mm512_cvtepi32_epi8(d[e]));
                sum[e] = _mm512_add_epi32(sum[e], d[e]);
            }
            if ((j + 16) % bc == 0)
                for (int e = 0; e < ND; e++) {
                    cor[(j / bc * G + h) * (size_t)ND + (size_t)e] = -off * _mm512_reduce_add_epi32(sum[e]);
                    sum[e] = _mm512_setzero_si512();
                }
        }
        for (size_t w = 0; w < nw; w++)
            for (int e = 0; e < ND; e++) memcpy(qd + (w * G + h) * (size_t)ND + (size_t)e, dg + (size_t)e * W + vn_wpos(F, w), 4);
    }
    return 0;
}

/* Word permutations of a block chunk's first 64 bytes (words 0..31) and the next 4 or 8 (32..): q8_0 (2 blocks of
 * 34 bytes) the codes are words 1..16 and 18..33, the scales words 0 and 17; q4_0 (4 blocks of 18) the codes words
 * 9 b + 1 .. 9 b + 8, the scales words 0, 9, 18, 27. */
INLINE __m512i vn_code_words(const int F)
{
    if (F == F_Q8_0)
        return _mm512_set_epi16(33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 16, 15, 14, 13, 12, 11,
                                10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    return _mm512_set_epi16(35, 34, 33, 32, 31, 30, 29, 28, 26, 25, 24, 23, 22, 21, 20, 19, 17, 16, 15, 14, 13, 12, 11,
                            10, 8, 7, 6, 5, 4, 3, 2, 1);
}
/* lanes 0..15 <- the scale of block 2h, 16..31 <- block 2h + 1 (of the chunk) */
INLINE __m512i vn_scale_words(const int F, int h)
{
    const short s0 = F == F_Q8_0 ? 0 : (short)(18 * h), s1 = F == F_Q8_0 ? 17 : (short)(18 * h + 9);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(s0)), _mm256_set1_epi16(s1), 1);
}

/* 16 rows of a chunk z in dwords, transposed: 8 bits: 64 codes (int8 bytes 64z..64z+63; q8_0 the codes of blocks
 * 2z and 2z+1), the sign bit flipped: o[c] lane r = codes 4c..4c+3 of row r (c < 16); 4 bits: 64 packed bytes
 * (int4 bytes 64z..; q4_0 the codes of blocks 4z..4z+3), o[c] lane r = packed word c of row r. With d (q8_0, q4_0):
 * each row's chunk is read as its first 64 bytes and the 4 or 8 after, the codes gathered by one word permutation
 * and the block scales put into row lanes by two masked ones (d[k] = block k of the chunk, 16 rows), instead of
 * 16- or 32-byte loads joined by inserts and a separate read of the scales, two word permutations a row per 4
 * blocks (bench_kernels keys in L2, medians of 5-7, ns a row: q8_0 G = 4 11.9-13.0 -> 11.3, q4_0 G = 4 10.2 ->
 * 9.5, G = 2 6.4 -> 5.7; one head within the noise, q4_0 4.9-5.8 -> 5.1, q8_0 6.0-6.1 -> 6.2). vn_tile (3, 5-8
 * heads) reads them this way too since the fifteenth session: tests/count_insns G = 8 q4_0 160.6 -> 150.9, q8_0
 * 176.5 -> 164.6 instructions a row; on the Sapphire Rapids VM (bench_kernels keys, medians of 7, 9 and 11
 * alternating runs, ns a row in L2 / streamed) q4_0 G = 8 29.3 / 27.3 -> 22.2 / 20.7, 26.6 / 30.7 -> 28.5 / 30.5
 * and 23.0 / 28.2 -> 22.2 / 23.7, q8_0 G = 8 23.0 / 23.1 -> 22.6 / 23.3 and 23.0 / 28.7 -> 23.3 / 24.5: within
 * this VM's noise in L2, no worse streamed. */
VNNI_INLINE void vn_words(const int F, const uint8_t *const *rp, size_t z, __m512i *o, __m512 *d)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i r[16], a[16], b[16], sx[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    UNROLL for (int i = 0; i < 16; i++) {
        __m512i x;
        if (is_block(F) && d) {   /* the chunk's first 64 bytes and the 4 or 8 after: codes by one word permutation */
            const size_t CB = F == F_Q8_0 ? 2 * sizeof(StoreBlockQ8_0) : 4 * sizeof(StoreBlockQ4_0);
            const uint8_t *p = rp[i] + z * CB;
            const __m512i lo = _mm512_loadu_si512((const void *)p);
            const __m512i hi = _mm512_maskz_loadu_epi16((__mmask32)(F == F_Q8_0 ? 0x3 : 0xF), p + 64);
            x = _mm512_permutex2var_epi16(lo, vn_code_words(F), hi);
            /* the block scales: words 0, 17 (q8_0) or 0, 9 | 18, 27 (q4_0) of the chunk into lanes i and 16 + i */
            const __mmask32 mr = (__mmask32)((1u << i) | (1u << (16 + i)));
            sx[0] = _mm512_mask_permutexvar_epi16(sx[0], mr, vn_scale_words(F, 0), lo);
            if (F == F_Q4_0) sx[1] = _mm512_mask_permutexvar_epi16(sx[1], mr, vn_scale_words(F, 1), lo);
        } else if (F == F_Q8_0) {
            const uint8_t *p = rp[i] + 2 * z * sizeof(StoreBlockQ8_0) + 2;
            x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)p)),
                                   _mm256_loadu_si256((const __m256i *)(const void *)(p + sizeof(StoreBlockQ8_0))), 1);
        } else if (F == F_Q4_0) {
            const uint8_t *p = rp[i] + 4 * z * sizeof(StoreBlockQ4_0) + 2;
            const size_t B = sizeof(StoreBlockQ4_0);
            __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p)),
                                                 _mm_loadu_si128((const __m128i *)(const void *)(p + B)), 1);
            __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * B))),
                                                 _mm_loadu_si128((const __m128i *)(const void *)(p + 3 * B)), 1);
            x = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        } else {
            x = _mm512_loadu_si512((const void *)(rp[i] + 64 * z));
        }
        r[i] = vn_4bit(F) ? x : _mm512_xor_si512(x, flip);
    }
    UNROLL for (int i = 0; i < 8; i++) {   /* per 128-bit lane: a[2i] dwords 0, 1 of rows 2i, 2i+1; a[2i+1] 2, 3 */
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    UNROLL for (int k = 0; k < 4; k++) {   /* b[4k + m], lane L: dword 4L + m of rows 4k..4k+3 */
        b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
        b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
    }
    UNROLL for (int m = 0; m < 4; m++) {   /* lane L of the four row groups' b[4k + m] -> dword 4L + m, rows 0..15 */
        const __m512i e0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x88), e1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xDD);
        const __m512i f0 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x88);
        const __m512i f1 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xDD);
        o[m] = _mm512_shuffle_i32x4(e0, f0, 0x88);
        o[4 + m] = _mm512_shuffle_i32x4(e1, f1, 0x88);
        o[8 + m] = _mm512_shuffle_i32x4(e0, f0, 0xDD);
        o[12 + m] = _mm512_shuffle_i32x4(e1, f1, 0xDD);
    }
    if (is_block(F) && d) {   /* d[k]: the chunk's block k, 16 rows */
        d[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(sx[0]));
        d[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sx[0], 1));
        if (F == F_Q4_0) {
            d[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(sx[1]));
            d[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sx[1], 1));
        }
    }
}

/* 16 rows of a chunk z in dwords, transposed (vn_words), stored: 8 bits: tb[16 c + r] = codes 4c..4c+3 of row r
 * (c < 16); 4 bits: packed word c split into tb[16 (2c) + r] (low nibbles) and tb[16 (2c + 1) + r] (high
 * nibbles), each a byte 0..15. */
VNNI_INLINE void vn_transpose(const int F, const uint8_t *const *rp, size_t z, int32_t *tb, __m512 *d)
{
    __m512i o[16];
    vn_words(F, rp, z, o, d);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL for (int c = 0; c < 16; c++) {
        if (vn_4bit(F)) {
            _mm512_store_si512((void *)(tb + 16 * (2 * c)), _mm512_and_si512(o[c], m4));
            _mm512_store_si512((void *)(tb + 16 * (2 * c + 1)), _mm512_and_si512(_mm512_srli_epi16(o[c], 4), m4));
        } else {
            _mm512_store_si512((void *)(tb + 16 * c), o[c]);
        }
    }
}

/* acc + the 16 lanes' 4-byte dot products of x (unsigned) with the 4 signed bytes at p, broadcast from memory in
 * the instruction itself (gcc keeps _mm512_set1_epi32 as a separate vpbroadcastd: twice the instructions). */
VNNI_INLINE __m512i vn_dp_bcast(__m512i acc, __m512i x, const int32_t *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*p));
    return acc;
}

/* The same with 64 signed bytes at p, read by the instruction (no register held for them). */
VNNI_INLINE __m512i vn_dp_mem(__m512i acc, __m512i x, const __m512i *p)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "m"(*p));
    return acc;
}

/* The score of the exact digit sums a[0..ND) (float32, see above; one digit: its two accumulators, added exactly). */
VNNI_INLINE __m512 vn_combine(const int ND, const __m512i *a)
{
    if (ND == 1) return _mm512_cvtepi32_ps(_mm512_add_epi32(a[0], a[1]));
    if (ND == 2) return _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[0]), _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(a[1]));
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a[0]), _mm512_set1_ps(65536.0f));
    v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[1]), _mm512_set1_ps(256.0f), v);
    return _mm512_add_ps(v, _mm512_cvtepi32_ps(a[2]));
}

/* The same for one accumulator per digit (one digit: a[0] alone). */
VNNI_INLINE __m512 vn_combine1(const int ND, const __m512i *a)
{
    if (ND == 1) return _mm512_cvtepi32_ps(a[0]);
    return vn_combine(ND, a);
}

/* GC heads (qd, cor, sq at the first; GN = ND G words per column word) over TT transposed tiles tb (W / 4 words
 * of 16 rows each) of rows t.., scores at s + i; q8_0: dsc[T][b] the 16 rows' scales of block b. */
VNNI_INLINE void vn_heads(const int F, const int ND, const int GC, const int TT, float *s, size_t ls, const int32_t *qd,
                          const int32_t *cor, const float *sq, size_t GN, const int32_t *tb, const __m512 *dsc,
                          const KRows *k, size_t t, size_t i, size_t nr, const Prefetch *pf)
{
    const size_t W = k->W, nw = W / 4, bw = is_block(F) ? 8 : nw;   /* column words per block */
    const int NA = vn_nacc(ND);
    __m512i a[2][4][3];
    __m512 f[2][4];
    UNROLL for (int T = 0; T < TT; T++) UNROLL for (int g = 0; g < GC; g++) f[T][g] = _mm512_setzero_ps();
    size_t c0 = 0, blk = 0;
    do {   /* nw >= bw: at least one block */
        UNROLL for (int T = 0; T < TT; T++)   /* the accumulators start at -off x the digit sums */
            UNROLL for (int g = 0; g < GC; g++)
                UNROLL for (int e = 0; e < NA; e++)
                    a[T][g][e] = e < ND ? _mm512_set1_epi32(cor[blk * GN + (size_t)(g * ND + e)]) : _mm512_setzero_si512();
        for (size_t c = c0; c < c0 + bw; c += 8)
            UNROLL for (int cc = 0; cc < 8; cc++) {
                __m512i x[2];
                UNROLL for (int T = 0; T < TT; T++)
                    x[T] = _mm512_load_si512((const void *)(tb + ((size_t)T * nw + c + (size_t)cc) * 16));
                const int32_t *qc = qd + (c + (size_t)cc) * GN;
                if (pf) UNROLL for (int T = 0; T < TT; T++) pf_line(pf, (size_t)TT * (c + (size_t)cc) + (size_t)T);
                UNROLL for (int g = 0; g < GC; g++)
                    UNROLL for (int e = 0; e < ND; e++) {
                        const int A = ND == 1 ? cc % 2 : e;   /* one digit: even / odd column words */
                        if (TT == 1) {
                            a[0][g][A] = vn_dp_bcast(a[0][g][A], x[0], qc + g * ND + e);
                        } else {   /* one broadcast for both tiles */
                            __m512i qv = _mm512_set1_epi32(qc[g * ND + e]);
                            __asm__("" : "+v"(qv));
                            UNROLL for (int T = 0; T < TT; T++) a[T][g][A] = _mm512_dpbusd_epi32(a[T][g][A], x[T], qv);
                        }
                    }
            }
        if (is_block(F))   /* the block's sums times its FP16 scales */
            UNROLL for (int T = 0; T < TT; T++)
                UNROLL for (int g = 0; g < GC; g++) f[T][g] = _mm512_fmadd_ps(vn_combine(ND, a[T][g]), dsc[T * 16 + (int)blk], f[T][g]);
        c0 += bw, blk++;
    } while (c0 < nw);
    UNROLL for (int T = 0; T < TT; T++) {
        const size_t r0 = 16 * (size_t)T;
        __mmask16 mk;
        const __m512 sc = tile_scale(k, t, r0, nr, &mk);
        UNROLL for (int g = 0; g < GC; g++) {
            __m512 v = is_block(F) ? f[T][g] : vn_combine(ND, a[T][g]);
            v = _mm512_mul_ps(v, _mm512_set1_ps(sq[g]));
            if (k->rscale) v = _mm512_mul_ps(v, sc);
            _mm512_mask_storeu_ps(s + (size_t)g * ls + i + r0, mk, v);
        }
    }
}

/* Rows t..t+nr (nr <= 16 TT) of int8 / q8_0 / int4 / q4_0 keys for the G heads: the TT tiles transposed once (and
 * the block scales read with the codes, vn_words), then the heads in groups of 4, 2, 1 (3 digits: 12, or with two tiles 12 and 6,
 * accumulation chains; 2 digits 8-16; 1 digit, two accumulators per head, 8-16: vpdpbusd's latency is 5 cycles
 * at 2 per cycle). */
VNNI_INLINE void vn_tile(const int F, const int ND, const int TT, float *s, size_t ls, const int32_t *qd,
                         const int32_t *cor, const float *sq, size_t G, const KRows *k, size_t t, size_t i, size_t nr)
{
    const size_t W = k->W, cw = vn_4bit(F) ? 32 : 16, nz = W / (4 * cw), rb = k->row_bytes, nw = W / 4, GN = (size_t)ND * G;
    int32_t tb[2 * VN_MAXW / 4 * 16] __attribute__((aligned(64)));
    __m512 dsc[2 * 16];   /* q8_0 / q4_0: W / 32 <= 16 blocks */
    const uint8_t *rp[2][16];
    Prefetch pf = tile_rows(rp, k->codes + t * rb, rb, nr, TT, nw), *pp = &pf;   /* over the first heads' words */
    /* block formats: the 16 rows' FP16 block scales, per block as 16 lanes (rows past nr repeat row nr - 1), read
     * with the codes (vn_words) */
    const size_t CBK = F == F_Q4_0 ? 4 : 2;   /* blocks a chunk */
    UNROLL for (int T = 0; T < TT; T++)
        for (size_t z = 0; z < nz; z++)
            vn_transpose(F, rp[T], z, tb + ((size_t)T * nw + cw * z) * 16, is_block(F) ? dsc + T * 16 + CBK * z : NULL);
    size_t h = 0, N = (size_t)ND;
    for (; h + 4 <= G; h += 4, pp = NULL)
        vn_heads(F, ND, 4, TT, s + h * ls, ls, qd + N * h, cor + N * h, sq + h, GN, tb, dsc, k, t, i, nr, pp);
    if (h + 2 <= G) {
        vn_heads(F, ND, 2, TT, s + h * ls, ls, qd + N * h, cor + N * h, sq + h, GN, tb, dsc, k, t, i, nr, pp);
        h += 2, pp = NULL;
    }
    if (h < G) vn_heads(F, ND, 1, TT, s + h * ls, ls, qd + N * h, cor + N * h, sq + h, GN, tb, dsc, k, t, i, nr, pp);
    pf_rest(&pf, (size_t)TT * nw);
}

/* GC = 1, 2 or 4 heads (G = GC: qd's words hold G heads), rows t..t+nr (nr <= 16): each chunk's transposed words
 * (vn_words) go straight into the digits' vpdpbusd, not through the tile buffer (which only more head groups
 * would share). Blocks in order (q4_0: words 4b..4b+3 of a chunk, q8_0: 8b..8b+7), each (head, digit) in 4 / GC
 * chains by word index, added (exact) before vn_combine. AMD Zen 4 VM, bench_kernels, one head, keys, medians of
 * 5 alternating runs, ns a row in L2 / streamed, through the buffer -> here: one head int4 3.9 / 4.5 -> 2.9 /
 * 3.3, q4_0 5.4 / 6.0 -> 4.7 / 5.1, q8_0 6.2 / 8.0 -> 5.6 / 6.6, int8 4.0 / 5.3 -> 3.4 / 5.4; four heads int8
 * 12.0 / 11.5 -> 8.2 / 9.5, q8_0 14.8 / 14.3 -> 11.9 / 12.9, int4 12.7 / 14.3 -> 8.3 / 8.8, q4_0 12.1 / 13.3 ->
 * 10.2 / 11.0; two heads int8 6.8 / 8.6 -> 4.8 / 6.2, q4_0 7.7 / 9.4 -> 6.4 / 7.0. kvc bench (65536 tokens x 8
 * KV heads, medians of 3-5): int4 one head 5.6 -> 3.8 ms; four heads int8 17.6 -> 12.7, q8_0 19.2 -> 15.4,
 * q4_0 17.6 -> 14.2, int4 14.6 -> 13.5. Eight heads of int8 / int4 run as two groups of four, each transposing
 * again (keys in L2 / streamed, medians of 7: int8 17.6 / 19.3 -> 16.3 / 16.9, int4 18.1 / 19.0 -> 16.4 / 16.9;
 * kvc bench G = 8, medians of 5: int8 25.8 -> 24.4 ms, int4 23.3 -> 22.2); q8_0 and q4_0 keep the buffer there
 * (transposing again: 23.6 -> 29.7 and 21.1 -> 24.6 in L2). */
VNNI_INLINE void vn_tiled(const int F, const int ND, const int GC, float *s, size_t ls, const int32_t *qd,
                          const int32_t *cor, const float *sq, size_t G, const KRows *k, size_t t, size_t i, size_t nr)
{
    const size_t W = k->W, cw = vn_4bit(F) ? 32 : 16, nz = W / (4 * cw), rb = k->row_bytes, GN = (size_t)ND * G;
    const int NB = F == F_Q4_0 ? 4 : F == F_Q8_0 ? 2 : 1, WB = 16 / NB, NCH = 4 / GC;   /* blocks, their words */
    const uint8_t *rp[2][16];
    Prefetch pf = tile_rows(rp, k->codes + t * rb, rb, nr, 1, nz * 16);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 f[4];
    __m512i a[4][4][3];   /* [chain][head][digit] */
    UNROLL for (int g = 0; g < 4; g++) f[g] = _mm512_setzero_ps();
    UNROLL for (int ch = 0; ch < 4; ch++)
        UNROLL for (int g = 0; g < 4; g++) UNROLL for (int e = 0; e < 3; e++) a[ch][g][e] = _mm512_setzero_si512();
    for (size_t z = 0; z < nz; z++) {
        __m512i o[16];
        __m512 dsc[4];   /* block formats: the chunk's block scales (vn_words) */
        vn_words(F, rp[0], z, o, dsc);
        UNROLL for (int b = 0; b < NB; b++) {
            if (is_block(F) || z == 0)   /* chain 0 starts at the block's offset */
                UNROLL for (int ch = 0; ch < NCH; ch++)
                    UNROLL for (int g = 0; g < GC; g++)
                        UNROLL for (int e = 0; e < ND; e++)
                            a[ch][g][e] = ch ? _mm512_setzero_si512()
                                             : _mm512_set1_epi32(cor[(((size_t)NB * z + (size_t)b) * G + (size_t)g) * (size_t)ND + (size_t)e]);
            UNROLL for (int cc = 0; cc < WB; cc++) {
                const int c = WB * b + cc, ch = cc % NCH;
                pf_line(&pf, 16 * z + (size_t)c);
                if (vn_4bit(F)) {
                    const __m512i lo = _mm512_and_si512(o[c], m4), hi = _mm512_and_si512(_mm512_srli_epi16(o[c], 4), m4);
                    const int32_t *q0 = qd + (cw * z + 2 * (size_t)c) * GN, *q1 = q0 + GN;
                    UNROLL for (int g = 0; g < GC; g++)
                        UNROLL for (int e = 0; e < ND; e++) {
                            a[ch][g][e] = vn_dp_bcast(a[ch][g][e], lo, q0 + g * ND + e);
                            a[ch][g][e] = vn_dp_bcast(a[ch][g][e], hi, q1 + g * ND + e);
                        }
                } else {
                    const int32_t *q0 = qd + (cw * z + (size_t)c) * GN;
                    UNROLL for (int g = 0; g < GC; g++)
                        UNROLL for (int e = 0; e < ND; e++) a[ch][g][e] = vn_dp_bcast(a[ch][g][e], o[c], q0 + g * ND + e);
                }
            }
            if (is_block(F))
                UNROLL for (int g = 0; g < GC; g++) {
                    __m512i sum[3];
                    UNROLL for (int e = 0; e < ND; e++) {
                        sum[e] = a[0][g][e];
                        UNROLL for (int ch = 1; ch < NCH; ch++) sum[e] = _mm512_add_epi32(sum[e], a[ch][g][e]);
                    }
                    f[g] = _mm512_fmadd_ps(vn_combine1(ND, sum), dsc[b], f[g]);
                }
        }
    }
    pf_rest(&pf, nz * 16);
    __mmask16 mk;
    const __m512 sc = tile_scale(k, t, 0, nr, &mk);
    UNROLL for (int g = 0; g < GC; g++) {
        if (!is_block(F)) {
            __m512i sum[3];
            UNROLL for (int e = 0; e < ND; e++) {
                sum[e] = a[0][g][e];
                UNROLL for (int ch = 1; ch < NCH; ch++) sum[e] = _mm512_add_epi32(sum[e], a[ch][g][e]);
            }
            f[g] = vn_combine1(ND, sum);
        }
        __m512 v = _mm512_mul_ps(f[g], _mm512_set1_ps(sq[g]));
        if (k->rscale) v = _mm512_mul_ps(v, sc);
        _mm512_mask_storeu_ps(s + (size_t)g * ls + i, mk, v);
    }
}

/* ---- int8 / int4 keys of two (int4: five) to eight heads with AMX (Intel's tile matrix unit) --------------------

 * Where cpuid reports AMX-TILE and AMX-INT8, the OS enables the tile state (XCR0 bits 17, 18) and grants this
 * process its use (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once when the set is made; amx_on), int8 keys of 2 to
 * 8 heads with W = 64 or 128 (the VNNI set, three digits) are one tile product per 16 rows and 64 columns: A = the
 * 16 rows' codes as they are stored (signed bytes, read by tileloadd with the row stride: no transposition, no
 * sign flip, no offset; int4 keys of 5 to 8 heads with W = 128: unpacked first, amx_unpack4), B = the query digits
 * of up to four heads (vn_prep's words, column 4 h + e for head h and digit e, column 4 h + 3 zero), C += A B by
 * tdpbssd (signed x signed, exact int32 sums, as vpdpbusd's). The 16 x 16 sums are stored, and one shuffle tree per
 * group of four heads turns rows of (head, digit) into each head's 16 scores: lanes times 65536, 256, 1, 0 (exact),
 * pairs added ((D0 65536 + D1 256) + (D2 + 0): the VNNI kernels' vn_combine, the same two roundings), then a 4 x 4
 * transposition of 128-bit lanes. The scores are the VNNI kernels' bits (tests/test_decode.c checks that, and
 * against double). The tile registers: tmm0 A, tmm1 / tmm2 the two head groups' C, tmm3 + 2 z + grp the B of chunk
 * z and group grp (loaded once per call). KVC_ISA=avx512-noamx keeps the VNNI kernels. */
/* AMX int8 / int4 keys usable and chosen (decode_kernels_avx512; decode_avx512_amx_set for tests) */
static int amx_on;

typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} AmxConfig;

#define AMX_FN static __attribute__((noinline, target("avx512vnni,amx-tile,amx-int8")))
#define AMX_INLINE static inline __attribute__((always_inline, target("avx512vnni,amx-tile,amx-int8")))

/* 16 rows of four heads' four sums (r[i]: head h's in 128-bit lane h) -> o[h]: the 16 rows of head h, each (sum 0 +
 * sum 1) + (sum 2 + sum 3): one shuffle tree (amx_post, amxb_post). */
INLINE void lane_sums(const __m512 r[16], __m512 o[4])
{
    __m512 P[8], Q[4];
    UNROLL for (int i = 0; i < 8; i++)   /* rows 2i, 2i + 1: [sum 0 + sum 1, sum 2 + sum 3, same of the next row] */
        P[i] = _mm512_add_ps(_mm512_shuffle_ps(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    UNROLL for (int k = 0; k < 4; k++)   /* rows 4k..4k+3 of each head: its 128-bit lane */
        Q[k] = _mm512_add_ps(_mm512_shuffle_ps(P[2 * k], P[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(P[2 * k], P[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 t0 = _mm512_shuffle_f32x4(Q[0], Q[1], 0x44), t1 = _mm512_shuffle_f32x4(Q[0], Q[1], 0xEE);
    const __m512 t2 = _mm512_shuffle_f32x4(Q[2], Q[3], 0x44), t3 = _mm512_shuffle_f32x4(Q[2], Q[3], 0xEE);
    o[0] = _mm512_shuffle_f32x4(t0, t2, 0x88), o[1] = _mm512_shuffle_f32x4(t0, t2, 0xDD);
    o[2] = _mm512_shuffle_f32x4(t1, t3, 0x88), o[3] = _mm512_shuffle_f32x4(t1, t3, 0xDD);
}

/* The C sums of 16 rows for four heads (cb: 16 rows of 16 int32, column 4 h + e) -> the scores of heads 0..gh-1 at
 * s + h ls (mk: the rows to store; sc: the token scales): per head D0 65536 + D1 256 + D2 (lane_sums). */
INLINE void amx_post(const int32_t *cb, float *s, size_t ls, const float *sq, size_t gh, int scaled, __m512 sc,
                     __mmask16 mk)
{
    const __m512 wv = _mm512_setr_ps(65536.0f, 256.0f, 1.0f, 0.0f, 65536.0f, 256.0f, 1.0f, 0.0f, 65536.0f, 256.0f,
                                     1.0f, 0.0f, 65536.0f, 256.0f, 1.0f, 0.0f);
    __m512 r[16], o[4];
    UNROLL for (int i = 0; i < 16; i++) r[i] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 16 * i))), wv);
    lane_sums(r, o);
    UNROLL for (int h = 0; h < 4; h++) {
        if ((size_t)h >= gh) break;
        __m512 v = _mm512_mul_ps(o[h], _mm512_set1_ps(sq[h]));
        if (scaled) v = _mm512_mul_ps(v, sc);
        _mm512_mask_storeu_ps(s + (size_t)h * ls, mk, v);
    }
}

/* int4 (W = 128): each row's 64 packed bytes unpacked into 128 signed bytes in this file's int4 order (per 16-byte
 * unit: its low nibbles, then its high ones; n - 8), ab[i * 128 ..] for row i of rp. */
INLINE void amx_unpack4(int8_t *ab, const uint8_t *const *rp)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), c8 = _mm512_set1_epi8(8);
    const __m512i i0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), i1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    UNROLL for (int i = 0; i < 16; i++) {
        const __m512i x = _mm512_loadu_si512((const void *)rp[i]);
        const __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
        _mm512_store_si512((void *)(ab + 128 * i), _mm512_sub_epi8(_mm512_permutex2var_epi64(lo, i0, hi), c8));
        _mm512_store_si512((void *)(ab + 128 * i + 64), _mm512_sub_epi8(_mm512_permutex2var_epi64(lo, i1, hi), c8));
    }
}

/* 16 rows from row t (nr of them real) of chunk z into tmm0: int8 straight from the cache, or (nr < 16, and int4
 * always) from ab (int8: the rows copied, the last repeated, never reading past the tensor). */
#define AMX_LOAD_A(z)                                                                                             \
    do {                                                                                                           \
        if (F == F_INT8 && nr == 16) _tile_loadd(0, k->codes + t * rb + 64 * (z), (long)rb);                       \
        else _tile_loadd(0, ab + 64 * (z), (long)W);                                                               \
    } while (0)

/* G (2..8) heads of int8 (W 64 or 128) or int4 (W 128) keys, rows t0..t0+n: the digit words qd (vn_prep, three
 * digits; word w holds kernel positions vn_wpos(F, w)..+3, which is chunk m / 16, B row m % 16, m = vn_wpos / 4). */
AMX_INLINE void amx_scores(const int F, float *s, size_t ls, const int32_t *qd, const float *sq, size_t G,
                           const KRows *k, size_t t0, size_t n)
{
    const size_t W = k->W, nz = W / 64, ng = (G + 3) / 4, rb = k->row_bytes;
    int32_t bt[4][256] __attribute__((aligned(64)));   /* B of chunk z, group grp at bt[2 z + grp] */
    int32_t cb[2][256] __attribute__((aligned(64)));
    int8_t ab[16 * 128] __attribute__((aligned(64)));
    memset(bt, 0, sizeof bt);
    for (size_t w = 0; w < W / 4; w++) {
        const size_t m = vn_wpos(F, w) / 4, z = m / 16, kr = m % 16;
        for (size_t h = 0; h < G; h++)
            for (size_t e = 0; e < 3; e++) bt[2 * z + h / 4][16 * kr + 4 * (h % 4) + e] = qd[(w * G + h) * 3 + e];
    }
    AmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 7; i++) cfg.colsb[i] = 64, cfg.rows[i] = 16;
    _tile_loadconfig(&cfg);
    _tile_loadd(3, bt[0], 64);
    if (ng > 1) _tile_loadd(4, bt[1], 64);
    if (nz > 1) {
        _tile_loadd(5, bt[2], 64);
        if (ng > 1) _tile_loadd(6, bt[3], 64);
    }
    for (size_t r = 0; r < n; r += 16) {
        const size_t nr = n - r < 16 ? n - r : 16, t = t0 + r;
        if (F == F_INT4 || nr < 16) {   /* the 16 rows, the last real one repeated (tile_rows; its prefetch unused) */
            const uint8_t *rp[2][16];
            (void)tile_rows(rp, k->codes + t * rb, rb, nr, 1, 1);
            if (F == F_INT4) amx_unpack4(ab, rp[0]);
            else
                for (size_t i = 0; i < 16; i++) memcpy(ab + i * W, rp[0][i], W);
        }
        if (nr == 16 && r + 48 <= n)   /* the rows two tiles ahead */
            for (size_t i = 0; i < 16; i++) prefetch_range(k->codes + (t + 32 + i) * rb, F == F_INT4 ? W / 2 : W, 0);
        _tile_zero(1);
        if (ng > 1) _tile_zero(2);
        AMX_LOAD_A(0);   /* the register numbers must be literals: C of group grp = grp + 1, B = 3 + 2 z + grp */
        _tile_dpbssd(1, 0, 3);
        if (ng > 1) _tile_dpbssd(2, 0, 4);
        if (nz > 1) {
            AMX_LOAD_A(1);
            _tile_dpbssd(1, 0, 5);
            if (ng > 1) _tile_dpbssd(2, 0, 6);
        }
        _tile_stored(1, cb[0], 64);
        if (ng > 1) _tile_stored(2, cb[1], 64);
        __mmask16 mk;
        const __m512 sc = tile_scale(k, t, 0, nr, &mk);
        for (size_t grp = 0; grp < ng; grp++)
            amx_post(cb[grp], s + 4 * grp * ls + r, ls, sq + 4 * grp, G - 4 * grp < 4 ? G - 4 * grp : 4, k->rscale != NULL, sc, mk);
    }
    _tile_release();
}
#undef AMX_LOAD_A
AMX_FN void amx_int8_scores(float *s, size_t ls, const int32_t *qd, const float *sq, size_t G, const KRows *k, size_t t0,
                            size_t n)
{
    amx_scores(F_INT8, s, ls, qd, sq, G, k, t0, n);
}
AMX_FN void amx_int4_scores(float *s, size_t ls, const int32_t *qd, const float *sq, size_t G, const KRows *k, size_t t0,
                            size_t n)
{
    amx_scores(F_INT4, s, ls, qd, sq, G, k, t0, n);
}

/* amx_scores takes these shapes (three digits only: the rounded-query sets keep their VNNI kernels); int4 from 5
 * heads: its unpacking costs about what the VNNI kernels spend on 2 to 4 heads (Sapphire Rapids VM, bench_kernels
 * int4 keys, medians of 5 alternating runs, ns a row in L2 / streamed, VNNI -> AMX: G = 2 5.9 / 7.2 -> 6.8 / 7.7,
 * G = 4 9.3 / 9.6 -> 8.7 / 10.0, G = 8 20.8 / 22.6 -> 12.7 / 14.7). */
INLINE int amx_takes(const int F, const int ND, size_t G, size_t W)
{
    return amx_on && ND == 3 && G >= 2 && G <= 8 &&
           ((F == F_INT8 && (W == 64 || W == 128)) || (F == F_INT4 && W == 128 && G >= 5));
}

/* scr: the digit words (G W / 4 x ND int32), the offsets (G nb x ND int32), the scales (G floats), the digits (ND
 * W bytes). One, two or four heads, and eight of int8 / int4: vn_tiled, 16 rows at a time; otherwise three
 * digits: tiles of 16 rows for four or more heads, else 32; fewer digits: 32 (more chains). */
VNNI_INLINE int vn_scores(const int F, const int ND, float *s, size_t ls, const float *qp, size_t G, const KRows *k,
                          size_t t0, size_t n, float *scr)
{
    const size_t W = k->W, nb = is_block(F) ? W / 32 : 1, N = (size_t)ND;
    int32_t *qd = (int32_t *)(void *)scr, *cor = qd + G * W / 4 * N;
    float *sq = (float *)(void *)(cor + G * nb * N);
    int8_t *dg = (int8_t *)(void *)(sq + G);
    if (vn_prep(F, ND, qd, cor, sq, dg, qp, G, W)) return -1;
    if (amx_takes(F, ND, G, W)) {   /* int8 / int4, 2..8 heads: AMX tile products */
        if (F == F_INT8) amx_int8_scores(s, ls, qd, sq, G, k, t0, n);
        else amx_int4_scores(s, ls, qd, sq, G, k, t0, n);
        return 0;
    }
    if (G == 1 || G == 2 || G == 4) {   /* one head group: no tile buffer (vn_tiled) */
        for (size_t r = 0; r < n; r += 16) {
            const size_t nr = n - r < 16 ? n - r : 16;
            if (G == 1) vn_tiled(F, ND, 1, s, ls, qd, cor, sq, G, k, t0 + r, r, nr);
            else if (G == 2) vn_tiled(F, ND, 2, s, ls, qd, cor, sq, G, k, t0 + r, r, nr);
            else vn_tiled(F, ND, 4, s, ls, qd, cor, sq, G, k, t0 + r, r, nr);
        }
        return 0;
    }
    if (G == 8 && !is_block(F)) {   /* int8 / int4: two groups of four, each transposing again (vn_tiled) */
        for (size_t r = 0; r < n; r += 16) {
            const size_t nr = n - r < 16 ? n - r : 16;
            for (size_t h = 0; h < G; h += 4)
                vn_tiled(F, ND, 4, s + h * ls, ls, qd + (size_t)ND * h, cor + (size_t)ND * h, sq + h, G, k, t0 + r, r, nr);
        }
        return 0;
    }
    /* three digits at four or more heads: one tile of 16 rows (tune_intel: two tiles measured 10-15 % slower on the
     * Intel VM) or two (the AMD Zen 5 VM, bench_kernels keys in L2, medians of 4 alternating runs, ns a row, one ->
     * two tiles: q8_0 G = 4 8.3 -> 7.2, G = 8 13.1 -> 11.6; q4_0 G = 8 13.4 -> 11.2; int8 G = 8 10.0 -> 9.3) */
    const size_t step = ND == 3 && G >= 4 && tune_intel ? 16 : 32;
    for (size_t r = 0; r < n; r += step) {
        const size_t nr = n - r < step ? n - r : step;
        if (nr > 16) vn_tile(F, ND, 2, s, ls, qd, cor, sq, G, k, t0 + r, r, nr);
        else vn_tile(F, ND, 1, s, ls, qd, cor, sq, G, k, t0 + r, r, nr);
    }
    return 0;
}

/* The VNNI key slots of the four formats: vn_scores for F with ND digits, compiled for AVX512_VNNI. */
#define VN_SCORES(NAME, F, ND)                                                                                   \
    __attribute__((target("avx512vnni"))) static int NAME(float *s, size_t ls, const float *qp, size_t G,      \
                                                          const KRows *k, size_t t0, size_t n, float *scr)     \
    {                                                                                                          \
        return vn_scores(F, ND, s, ls, qp, G, k, t0, n, scr);                                                  \
    }
#define VN_FORMATS(SFX, ND)                                                                                      \
    VN_SCORES(scores_int8_vnni##SFX, F_INT8, ND)                                                                 \
    VN_SCORES(scores_int4_vnni##SFX, F_INT4, ND)                                                                 \
    VN_SCORES(scores_q4_0_vnni##SFX, F_Q4_0, ND)                                                                 \
    VN_SCORES(scores_q8_0_vnni##SFX, F_Q8_0, ND)
VN_FORMATS(, 3)   /* the VNNI set: exact enough for DECODE_TOL */
VN_FORMATS(2, 2)  /* the rounded-query sets */
VN_FORMATS(1, 1)
#undef VN_FORMATS
#undef VN_SCORES

/* ---- values ----------------------------------------------------------------------------------------------- */

/* Units u..u+CU of the tile's nt rows for GC heads: acc[g*W + 32(u+c) + ..] += sum_i w * value, with the weight
 * w = wb[g*ws + i*per + k] of the unit's group k = (u+c) / gu (plain formats: per 1, one group). PF (the first
 * column group, val_units): each row also prefetches the whole row pfd bytes ahead, so the next tile's prefetches
 * are spread over this tile's work. (They were one burst per tile, and the kernels' work and the memory then
 * overlapped poorly, for reasons not pinned down on this VM (no cycle counters); spread, the value side at 4 heads per KV head took 8.8 instead of
 * 11.0 ms (q8_0) and 8.8 instead of 10.7 ms (e4m3), kvc bench, 65536 tokens x 8 KV heads, medians of 3
 * alternating runs.) */
INLINE void val_cols(const int F, const int GC, const int CU, const int PF, float *acc, size_t W, const float *wb,
                     size_t ws, size_t per, size_t gu, const float *ds, const uint8_t *row, size_t rb, size_t nt,
                     size_t u, size_t pfd)
{
    const size_t UB = unit_bytes(F), nb = W / 32;   /* ds: nb block scales a row */
    const __m512 lut = F == F_KIVI ? lut_half() : lut_centred();
    size_t kc[4];
    UNROLL for (int c = 0; c < CU; c++) kc[c] = F == F_KIVI ? (u + (size_t)c) / gu : 0;   /* else one group */
    __m512 a[16];
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < 2 * CU; c++) a[g * 2 * CU + c] = _mm512_loadu_ps(acc + (size_t)g * W + 32 * u + 16 * (size_t)c);
    row += u * UB;
    for (size_t i = 0; i < nt; i++, row += rb) {
        if (PF) prefetch_row(row + pfd, rb, VAL_L2(F, GC));
        __m512 x[4][2];
        UNROLL for (int c = 0; c < CU; c++)
            cvt32(F, 1, row + (size_t)c * UB, ds ? ds + i * nb + u + (size_t)c : NULL, lut, x[c]);
        UNROLL for (int g = 0; g < GC; g++)
            UNROLL for (int c = 0; c < CU; c++) {
                const float *wp = wb + (size_t)g * ws + i * per + kc[c];
                /* 8 heads: the weight read by both FMAs (fma_bcast), no broadcast register. f16 values of 8 heads,
                 * bench_kernels as key_tile_t16: 25.5 / 40.0 -> 20.1 / 34.5 ns a row, 159 -> 113 instructions; at 4
                 * heads, where a weight feeds 4 FMAs, about 1 ns a row slower in L2 (f16 12.7 -> 13.9, q8_0 17.7 ->
                 * 18.6, e4m3 17.3 -> 18.3), so there the broadcast stays */
                if (CU == 1) {
                    a[g * 2] = fma_bcast(a[g * 2], x[0][0], wp);
                    a[g * 2 + 1] = fma_bcast(a[g * 2 + 1], x[0][1], wp);
                    continue;
                }
                const __m512 w = _mm512_set1_ps(*wp);
                a[g * 2 * CU + 2 * c] = _mm512_fmadd_ps(w, x[c][0], a[g * 2 * CU + 2 * c]);
                a[g * 2 * CU + 2 * c + 1] = _mm512_fmadd_ps(w, x[c][1], a[g * 2 * CU + 2 * c + 1]);
            }
    }
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < 2 * CU; c++) _mm512_storeu_ps(acc + (size_t)g * W + 32 * u + 16 * (size_t)c, a[g * 2 * CU + c]);
}

/* Every unit of the tile's rows, CU at a time (the last ones one at a time); the first call also prefetches the
 * rows pfd bytes ahead. */
INLINE void val_units(const int F, const int GC, const int CU, float *acc, size_t W, const float *wb, size_t ws,
                      size_t per, size_t gu, const float *ds, const uint8_t *row, size_t rb, size_t nt, size_t nu,
                      size_t pfd)
{
    size_t u;
    if (nu >= (size_t)CU) {
        val_cols(F, GC, CU, 1, acc, W, wb, ws, per, gu, ds, row, rb, nt, 0, pfd);
        for (u = (size_t)CU; u + (size_t)CU <= nu; u += (size_t)CU)
            val_cols(F, GC, CU, 0, acc, W, wb, ws, per, gu, ds, row, rb, nt, u, 0);
    } else {
        val_cols(F, GC, 1, 1, acc, W, wb, ws, per, gu, ds, row, rb, nt, 0, pfd);
        u = 1;
    }
    for (; u < nu; u++) val_cols(F, GC, 1, 0, acc, W, wb, ws, per, gu, ds, row, rb, nt, u, 0);
}

/* ds[i nb + b] = the FP16 scale of block b of row i (nt rows of rb bytes from row; nb blocks of q4_0) as float32,
 * converted once per tile instead of once per block and column pass in val_cols (a word broadcast and a
 * two-operation conversion each). W = 128 (nb = 4): per row one masked word permutation puts its 4 scales (words
 * 0, 9, 18, 27) into lanes 4 r .. 4 r + 3 of 8 rows, then one conversion per 4 rows; other widths one scale at a
 * time. bench_kernels q4_0 values (Sapphire Rapids VM, medians of 5, 7 and 9 alternating runs, ns a row in L2 /
 * streamed): G = 4 18.9 / 19.9 -> 15.6 / 17.0, 16.3 / 18.0 -> 15.2 / 17.5 and 14.9 / 16.8 -> 13.8 / 15.1; G = 8
 * 27.2 / 31.6 -> 25.1 / 28.3, 28.2 / 35.5 -> 26.3 / 32.3 and 27.4 / 32.4 -> 25.8 / 31.1; tests/count_insns G = 4
 * 95.7 -> 89.2 (conversions 8 -> 4.25). q8_0 (two permutations a row, its scales past the first 64 bytes)
 * measured no faster and keeps val_cols' conversion. */
INLINE void block_scales(float *ds, const uint8_t *row, size_t rb, size_t nt, size_t nb)
{
    const size_t UB = sizeof(StoreBlockQ4_0);
    if (nb != 4) {
        for (size_t i = 0; i < nt; i++)
            for (size_t b = 0; b < nb; b++) ds[i * nb + b] = _cvtsh_ss(elem_u16(row + i * rb + b * UB));
        return;
    }
    const __m512i ix = _mm512_set4_epi32(27 << 16 | 18, 9 << 16 | 0, 27 << 16 | 18, 9 << 16 | 0);   /* 4 r + b: 9 b */
    for (size_t i = 0; i < nt; i += 8) {
        __m512i x = _mm512_setzero_si512();
        if (i + 8 <= nt) {   /* constant masks, no test a row (one unrolled loop testing i + r < nt: 89.2 -> 90.4
                              * instructions a row at G = 4) */
            UNROLL for (int r = 0; r < 8; r++)
                x = _mm512_mask_permutexvar_epi16(x, (__mmask32)0xF << (4 * r), ix,
                                                  _mm512_loadu_si512((const void *)(row + (i + (size_t)r) * rb)));
        } else {
            for (size_t r = 0; i + r < nt; r++)
                x = _mm512_mask_permutexvar_epi16(x, (__mmask32)0xF << (4 * r), ix,
                                                  _mm512_loadu_si512((const void *)(row + (i + r) * rb)));
        }
        _mm512_storeu_ps(ds + 4 * i, _mm512_cvtph_ps(_mm512_castsi512_si256(x)));
        if (i + 4 < nt) _mm512_storeu_ps(ds + 4 * i + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1)));
    }
}

/* GC heads (acc, p at the first): tiles of up to VT tokens; weights w = p times the token scale (int4). DS (q4_0,
 * W <= KV_MAXW): the tile's block scales converted first (block_scales). */
INLINE void val_tiles(const int F, const int GC, const int DS, float *acc, const float *p, size_t lp, const KRows *v,
                      size_t t0, size_t n)
{
    const size_t W = v->W, nu = W / 32, rb = v->row_bytes;
    const int CU = GC >= 8 ? 1 : GC == 4 ? 2 : 4;   /* units per column group: GC * 2 * CU <= 16 accumulators */
    float wb[8 * VT] __attribute__((aligned(64)));
    float ds[DS ? VT * KV_MAXW / 32 : 1];
    float *const dsp = DS ? ds : NULL;
    for (size_t i0 = 0; i0 < n; i0 += VT) {
        const size_t nt = n - i0 < VT ? n - i0 : VT, t = t0 + i0;
        const __mmask16 m0 = (__mmask16)(nt >= 16 ? 0xFFFFu : (1u << nt) - 1u);
        const __mmask16 m1 = (__mmask16)(nt >= 32 ? 0xFFFFu : nt > 16 ? (1u << (nt - 16)) - 1u : 0u);
        __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0;
        if (v->rscale) {
            s0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, v->rscale + t));
            s1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, v->rscale + t + 16));
        }
        UNROLL for (int g = 0; g < GC; g++) {
            const float *pg = p + (size_t)g * lp + i0;
            __m512 w0 = _mm512_maskz_loadu_ps(m0, pg), w1 = _mm512_maskz_loadu_ps(m1, pg + 16);
            if (v->rscale) w0 = _mm512_mul_ps(w0, s0), w1 = _mm512_mul_ps(w1, s1);
            if (F == F_E4M3) w0 = _mm512_mul_ps(w0, _mm512_set1_ps(E4M3_LIFT)), w1 = _mm512_mul_ps(w1, _mm512_set1_ps(E4M3_LIFT));
            _mm512_store_ps(wb + (size_t)g * VT, w0);
            _mm512_store_ps(wb + (size_t)g * VT + 16, w1);
        }
        const uint8_t *row = v->codes + t * rb;
        const size_t pfd = nt * rb > PF_AHEAD ? nt * rb : PF_AHEAD;
        if (DS) block_scales(ds, row, rb, nt, nu);
        val_units(F, GC, CU, acc, W, wb, VT, 1, nu, dsp, row, rb, nt, nu, pfd);
    }
}

INLINE void val_heads(const int F, const int GC, float *acc, const float *p, size_t lp, const KRows *v, size_t t0,
                      size_t n)
{
    if (F == F_Q4_0 && v->W <= KV_MAXW) val_tiles(F, GC, 1, acc, p, lp, v, t0, n);
    else val_tiles(F, GC, 0, acc, p, lp, v, t0, n);
}

/* ---- int8 / int4 values of one query head with AVX-512 VNNI: integer sums over 4-token groups -------------- */

/* Used for one query head per KV head (the VNNI set), W % 128 == 0 and W <= VN_MAXW, int8 and int4 rows (token
 * scale or none). The weights, exactly enough: per tile of VV_T tokens the float32 weights w = p x the token
 * scale (as the float kernel forms them) become integers v = round(w / sw), sw the power of two with max|w| / sw
 * in (VN_QMAX / 2, VN_QMAX], in three balanced base-256 digits like the VNNI keys' query (|w - sw v| <= sw / 2,
 * about max|w| 2^-23: float32's own rounding of the largest product, within a factor 2; the power of two makes
 * w / sw exact, one vscalefps, no division, vv_scale). vpdpbusd then sums 4 tokens per int32 lane: the codes of 4 consecutive rows are interleaved
 * by bytes (two unpack stages per 64 bytes: lane j of vector m holds byte 16 (j / 4) + 4 m + j % 4 of the 4
 * rows), read unsigned (int8: the sign bit flipped, k + 128; int4: the stored n = value + 8, each nibble its own
 * vector), against one digit of the 4 tokens' weights broadcast from memory; each digit's accumulator starts at
 * -off x the tile's digit sum, so it ends as the exact sum of digit x value. Per 4 rows of 128 int4 codes: 4
 * loads, 8 shuffles, 12 nibble splits and 24 vpdpbusd (the float kernel: 16 conversions and 8 FMAs per row).
 * Per tile the three exact sums become float32 as in vn_combine, times sw, added to a float32 accumulator in the
 * interleaved column order, put back in kernel order once per call. Partial sums stay below VV_T x 128 x 255 <
 * 2^24, so they convert to float32 exactly. */
/* VV_PF: the prefetch distance, bytes (each group of 4 rows prefetches its rows VV_PF ahead). On the AMD Zen 4 VM
 * (bench_kernels, one head, values streamed, medians of 5 alternating runs, ns a row) int8 took 6.0-6.4 at 2 KiB
 * and 8 KiB and 4.9 at 4 KiB (the float32 kernel 5.3); int4 3.1 at all three (5.5). */
enum { VV_T = 64, VV_PF = 4096 };

/* The tile's weight scale from the running max |w| (mx) and the lanes found NaN: -1 for a weight that is not
 * finite (the caller takes the float kernel), 0 for zero or subnormal weights (*sw = 0: nothing to add), else 1
 * with *sw = 2^k, the smallest power of two with max|w| / 2^k <= VN_QMAX (k = E - 23 or E - 22 for max|w| in
 * [2^(E-1), 2^E)), and *ek = -k in every lane. (A running max loses a NaN to a later lane value, hence nan.) */
VNNI_INLINE int vv_scale(__m512 mx, __mmask16 nan, float *sw, __m512 *ek)
{
    const float m = _mm512_reduce_max_ps(mx);
    if (nan || !(m <= FLT_MAX)) return -1;
    if (!(m >= FLT_MIN)) {
        *sw = 0.0f;
        return 0;
    }
    uint32_t u;
    memcpy(&u, &m, sizeof u);
    /* m / 2^(e - 149) = the significand 1.f times 2^22, e the biased exponent: at most VN_QMAX, or one step more */
    const int k = (int)(u >> 23) - 149 + (((u & 0x7FFFFFu) | 0x800000u) > (uint32_t)(2.0 * VN_QMAX));
    const uint32_t b = k >= -126 ? (uint32_t)(k + 127) << 23 : 1u << (k + 149);   /* 2^k, subnormal below 2^-126 */
    memcpy(sw, &b, sizeof b);
    *ek = _mm512_set1_ps((float)-k);
    return 1;
}

/* 16 weights x as the integers round(x / 2^k) (exact: a scaling by a power of two, then the nearest integer;
 * |.| <= VN_QMAX < 0x808080) in three balanced base-256 digits: bytes 0..2 of each dword, the least significant
 * first, as signed bytes (bytes 0..2 of v + 0x808080 are the digits + 128; the XOR makes them signed); sum[e] +=
 * digit e of each dword. ek: -k in every lane (vv_scale). */
VNNI_INLINE __m512i vv_digits(__m512 x, __m512 ek, __m512i *sum)
{
    const __m512i bias = _mm512_set1_epi32(0x808080);
    const __m512i v = _mm512_cvtps_epi32(_mm512_scalef_ps(x, ek));
    const __m512i d = _mm512_xor_si512(_mm512_add_epi32(v, bias), bias);
    UNROLL for (int e = 0; e < 3; e++) sum[e] = _mm512_add_epi32(sum[e], _mm512_srai_epi32(_mm512_slli_epi32(d, 24 - 8 * e), 24));
    return d;
}

/* The vpshufb control that puts byte e of the 4 dwords of each 128-bit lane (4 tokens' digit e) in each of its
 * dwords. */
INLINE __m512i vv_pick(const int e) { return _mm512_set1_epi32(0x0C080400 + 0x01010101 * e); }

/* The tile's weights: wd[e * VV_T / 4 + c] = digit e (0: the least significant) of tokens 4c..4c+3 as 4 signed
 * bytes, cor[e] = -off x the digit's sum over the tile, *sw the scale (0 for a tile of zero weights). Tokens past
 * nt weigh 0. Returns -1 for a weight that is not finite. */
VNNI_INLINE int vv_weights(const float *p, const uint16_t *rs, size_t nt, int32_t off, int32_t *wd, int32_t *cor,
                           float *sw)
{
    float w[VV_T] __attribute__((aligned(64)));
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;   /* as in vn_prep */
    for (size_t i = 0; i < VV_T; i += 16) {
        const __mmask16 m = (__mmask16)(nt >= i + 16 ? 0xFFFFu : nt > i ? (1u << (nt - i)) - 1u : 0u);
        __m512 x = _mm512_maskz_loadu_ps(m, p + i);
        if (rs) x = _mm512_mul_ps(x, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, rs + i)));
        _mm512_store_ps(w + i, x);
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(x));
    }
    __m512 ek;
    const int r = vv_scale(mx, nan, sw, &ek);
    if (r <= 0) return r;
    const __m512i lane0 = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);   /* dword 0 of each lane */
    __m512i sum[3] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (size_t i = 0; i < VV_T; i += 16) {
        const __m512i d = vv_digits(_mm512_load_ps(w + i), ek, sum);
        UNROLL for (int e = 0; e < 3; e++) {
            const __m512i g = _mm512_permutexvar_epi32(lane0, _mm512_shuffle_epi8(d, vv_pick(e)));
            _mm_storeu_si128((__m128i *)(void *)(wd + (size_t)e * (VV_T / 4) + i / 4), _mm512_castsi512_si128(g));
        }
    }
    UNROLL for (int e = 0; e < 3; e++) cor[e] = -off * _mm512_reduce_add_epi32(sum[e]);
    return 0;
}

/* 4 rows' 64 bytes x interleaved: y[m] lane j = byte 16 (j / 4) + 4 m + j % 4 of rows 0..3. */
VNNI_INLINE void vv_interleave4(const __m512i *x, __m512i *y)
{
    const __m512i al = _mm512_unpacklo_epi8(x[0], x[1]), ah = _mm512_unpackhi_epi8(x[0], x[1]);
    const __m512i bl = _mm512_unpacklo_epi8(x[2], x[3]), bh = _mm512_unpackhi_epi8(x[2], x[3]);
    y[0] = _mm512_unpacklo_epi16(al, bl), y[1] = _mm512_unpackhi_epi16(al, bl);
    y[2] = _mm512_unpacklo_epi16(ah, bh), y[3] = _mm512_unpackhi_epi16(ah, bh);
}
/* the same for the 64 bytes at offset off of rows r[0..4) */
VNNI_INLINE void vv_interleave(const uint8_t *const *r, size_t off, __m512i *y)
{
    __m512i x[4];
    UNROLL for (int i = 0; i < 4; i++) x[i] = _mm512_loadu_si512((const void *)(r[i] + off));
    vv_interleave4(x, y);
}

/* fp[16 v ..] += sw x the exact digit sums a[v] (the least significant digit first) of a pass's 8 accumulators. */
VNNI_INLINE void vv_flush(__m512i a[8][3], float sw, float *fp)
{
    const __m512 s = _mm512_set1_ps(sw);
    UNROLL for (int v = 0; v < 8; v++) {
        const __m512i d[3] = {a[v][2], a[v][1], a[v][0]};   /* vn_combine's order: the most significant first */
        _mm512_storeu_ps(fp + 16 * v, _mm512_fmadd_ps(vn_combine(3, d), s, _mm512_loadu_ps(fp + 16 * v)));
    }
}

/* One tile (nt <= VV_T rows from row0) over the 128 columns of pass z: fp[16 a + j] += sw x the exact sums of
 * accumulator a (int4: a = 2 m + h, h the nibble; int8: a = 4 c + m, c the 64-byte chunk). pfd: prefetch distance
 * (0: none). */
VNNI_INLINE void vv_pass(const int F, const uint8_t *row0, size_t rb, size_t nt, size_t z, const int32_t *wd,
                         const int32_t *cor, float sw, float *fp, size_t pfd)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
    __m512i a[8][3];
    UNROLL for (int v = 0; v < 8; v++) UNROLL for (int e = 0; e < 3; e++) a[v][e] = _mm512_set1_epi32(cor[e]);
    const size_t cb = F == F_INT4 ? 64 : 128;   /* bytes of the pass */
    for (size_t g = 0; g < nt; g += 4) {
        const uint8_t *r[4];
        UNROLL for (int i = 0; i < 4; i++) r[i] = row0 + (g + (size_t)i < nt ? g + (size_t)i : nt - 1) * rb + cb * z;
        if (pfd) prefetch_range(row0 + g * rb + pfd, 4 * rb, 1);
        const int32_t *wg = wd + g / 4;
        const int NC = F == F_INT4 ? 1 : 2;   /* 64-byte chunks of the pass */
        UNROLL for (int c = 0; c < NC; c++) {
            __m512i y[4];
            vv_interleave(r, 64 * (size_t)c, y);
            UNROLL for (int m = 0; m < 4; m++) {
                if (F == F_INT4) {
                    const __m512i lo = _mm512_and_si512(y[m], m4), hi = _mm512_and_si512(_mm512_srli_epi16(y[m], 4), m4);
                    UNROLL for (int e = 0; e < 3; e++) {
                        a[2 * m][e] = vn_dp_bcast(a[2 * m][e], lo, wg + e * (VV_T / 4));
                        a[2 * m + 1][e] = vn_dp_bcast(a[2 * m + 1][e], hi, wg + e * (VV_T / 4));
                    }
                } else {
                    const __m512i u = _mm512_xor_si512(y[m], flip);
                    UNROLL for (int e = 0; e < 3; e++) a[4 * c + m][e] = vn_dp_bcast(a[4 * c + m][e], u, wg + e * (VV_T / 4));
                }
            }
        }
    }
    vv_flush(a, sw, fp);
}

/* Kernel-order position of lane j of accumulator a in a pass (see vv_pass). */
INLINE size_t vv_pos(const int F, size_t a, size_t j)
{
    const size_t L = j / 4, k = j % 4;
    if (F == F_INT4 || F == F_Q4_0) return 32 * L + 16 * (a % 2) + 4 * (a / 2) + k;   /* lane L: unit (block) L */
    return 64 * (a / 4) + 16 * L + 4 * (a % 4) + k;
}

/* acc[0..128 nz) (kernel order) += the nz passes' interleaved accumulators fp. */
INLINE void vv_unpermute(const int F, float *acc, const float *fp, size_t nz)
{
    for (size_t z = 0; z < nz; z++)
        for (size_t a = 0; a < 8; a++)
            for (size_t j = 0; j < 16; j++) acc[128 * z + vv_pos(F, a, j)] += fp[128 * z + 16 * a + j];
}

/* acc[0..W) += the n rows' values weighted by p (one head). scr: W floats of interleaved accumulators, then the
 * digits. Returns -1 (nothing added) for a weight that is not finite: the caller takes the float kernel. */
VNNI_INLINE int vv_head(const int F, float *acc, const float *p, const KRows *v, size_t t0, size_t n, float *scr)
{
    const size_t W = v->W, rb = v->row_bytes, nz = W / 128;
    float *fp = scr;
    int32_t *wd = (int32_t *)(void *)(scr + W), cor[3];
    const int32_t off = F == F_INT4 ? 8 : 128;
    memset(fp, 0, W * sizeof *fp);
    for (size_t i0 = 0; i0 < n; i0 += VV_T) {
        const size_t nt = n - i0 < VV_T ? n - i0 : VV_T, t = t0 + i0;
        float sw;
        if (vv_weights(p + i0, v->rscale ? v->rscale + t : NULL, nt, off, wd, cor, &sw)) return -1;
        if (sw == 0.0f) continue;
        const uint8_t *row0 = v->codes + t * rb;
        for (size_t z = 0; z < nz; z++) vv_pass(F, row0, rb, nt, z, wd, cor, sw, fp + 128 * z, z ? 0 : VV_PF);
    }
    vv_unpermute(F, acc, fp, nz);
    return 0;
}

/* ---- int8 / int4 values of two to eight heads with AMX: vv_head's integer sums, all heads in one pass -------- */

/* Where amx_on (and the CPU has AVX512-VBMI, as every AMX CPU does): the G heads' weights become vv_head's digits
 * (per head and tile of VV_T = 64 tokens, vv_weights' arithmetic, av_weights), and one tile product per 16 columns
 * gives every head's exact digit sums at once: A = the digits, row 3 h + e holding digit e of head h for the 64
 * tokens, 4 tokens a dword (vv_weights' wd: already the tile's layout); B = 16 columns of the 64 rows, built once
 * for all heads by vv_pass's interleave (B row k = group k of 4 rows; int8 codes as stored, signed; int4 the stored
 * nibbles n = value + 8, the offset added back as -8 x the digit sums); C = tdpbssd (signed x signed, exact int32
 * sums). Heads 0..4 are one A tile (15 rows at most), 6 to 8 heads two (4 and G - 4). Each C is stored and flushed
 * as vv_flush does (vn_combine, x sw, added to the interleaved accumulators), so every head's result is vv_head's,
 * bit for bit (tests/test_decode.c checks that). Tile registers: tmm0 / tmm1 the head groups' A; two accumulators
 * at a time (their products overlap): tmm2 / tmm5 their B, tmm3 / tmm6 group 0's C, tmm4 / tmm7 group 1's. */
#define AMXV_FN static __attribute__((noinline, target("avx512vnni,avx512vbmi,amx-tile,amx-int8")))
#define AMXV_INLINE static inline __attribute__((always_inline, target("avx512vnni,avx512vbmi,amx-tile,amx-int8")))
/* AMX values usable: amx_on and the CPU reports AVX512-VBMI (av_weights' byte permutation) */
static int vbmi_on;

/* The tile's weights of the G heads (p + h lp, nt tokens, rs: their FP16 scales or NULL) as vv_weights makes them for
 * each head: wd + 48 h its digits (row e = 16 dwords), cor[h] its offsets (int4), sw[h] its scale, 0 for a head of
 * zero weights (its digits then 0). Returns -1 for a weight that is not finite, else 1 when some head weighs. */
AMXV_INLINE int av_weights(const int F, const float *p, size_t lp, size_t G, const uint16_t *rs, size_t nt,
                           int32_t *wd, int32_t (*cor)[3], float *sw)
{
    __mmask16 mk[4];
    __m512 sc[4];
    UNROLL for (int c = 0; c < 4; c++) {
        const size_t i = 16 * (size_t)c;
        mk[c] = (__mmask16)(nt >= i + 16 ? 0xFFFFu : nt > i ? (1u << (nt - i)) - 1u : 0u);
        sc[c] = rs ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk[c], rs + i)) : _mm512_set1_ps(1.0f);
    }
    /* byte 16 L + k of the result = byte L of dword k: lane L holds digit L of the 16 tokens */
    const __m512i idx = _mm512_set_epi8(63, 59, 55, 51, 47, 43, 39, 35, 31, 27, 23, 19, 15, 11, 7, 3,
                                        62, 58, 54, 50, 46, 42, 38, 34, 30, 26, 22, 18, 14, 10, 6, 2,
                                        61, 57, 53, 49, 45, 41, 37, 33, 29, 25, 21, 17, 13, 9, 5, 1,
                                        60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
    /* in three passes over the heads, so that each pass's per-head chains (the max, its reduction and the power of two,
     * the digits) are independent and overlap */
    float w[8][VV_T] __attribute__((aligned(64)));
    __m512 mx[8];
    __mmask16 nan[8];
    for (size_t h = 0; h < G; h++) {
        mx[h] = _mm512_setzero_ps(), nan[h] = 0;
        UNROLL for (int c = 0; c < 4; c++) {
            __m512 x = _mm512_maskz_loadu_ps(mk[c], p + h * lp + 16 * (size_t)c);
            if (rs) x = _mm512_mul_ps(x, sc[c]);
            _mm512_store_ps(w[h] + 16 * c, x);
            nan[h] |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            mx[h] = _mm512_max_ps(mx[h], _mm512_abs_ps(x));
        }
    }
    __m512 ek[8];
    int any = 0, r[8];
    for (size_t h = 0; h < G; h++) {
        r[h] = vv_scale(mx[h], nan[h], &sw[h], &ek[h]);
        if (r[h] < 0) return -1;
        any |= r[h];
    }
    for (size_t h = 0; h < G; h++) {
        int32_t *wh = wd + 48 * h;
        if (r[h] == 0) {
            memset(wh, 0, 48 * sizeof *wh);
            continue;
        }
        __m512i sum[3] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        UNROLL for (int c = 0; c < 4; c++) {
            const __m512i b = _mm512_permutexvar_epi8(idx, vv_digits(_mm512_load_ps(w[h] + 16 * c), ek[h], sum));
            _mm_store_si128((__m128i *)(void *)(wh + 4 * c), _mm512_castsi512_si128(b));
            _mm_store_si128((__m128i *)(void *)(wh + 16 + 4 * c), _mm512_extracti32x4_epi32(b, 1));
            _mm_store_si128((__m128i *)(void *)(wh + 32 + 4 * c), _mm512_extracti32x4_epi32(b, 2));
        }
        if (F == F_INT4)
            UNROLL for (int e = 0; e < 3; e++) cor[h][e] = -8 * _mm512_reduce_add_epi32(sum[e]);
    }
    return any;
}

/* B of group g (rows r[0..4)) for every accumulator: bt[a] + 64 g. */
AMXV_INLINE void av_group(const int F, int8_t (*bt)[1024], const uint8_t *const *r, size_t g, size_t nz)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (size_t z = 0; z < nz; z++) {
        __m512i y[4];
        if (F == F_INT4) {
            vv_interleave(r, 64 * z, y);
            UNROLL for (int m = 0; m < 4; m++) {
                _mm512_store_si512((void *)(bt[8 * z + 2 * (size_t)m] + 64 * g), _mm512_and_si512(y[m], m4));
                _mm512_store_si512((void *)(bt[8 * z + 2 * (size_t)m + 1] + 64 * g), _mm512_and_si512(_mm512_srli_epi16(y[m], 4), m4));
            }
        } else
            UNROLL for (int c = 0; c < 2; c++) {
                vv_interleave(r, 128 * z + 64 * (size_t)c, y);
                UNROLL for (int m = 0; m < 4; m++) _mm512_store_si512((void *)(bt[8 * z + 4 * (size_t)c + (size_t)m] + 64 * g), y[m]);
            }
    }
}

/* The next tile's rows are prefetched over this one's work, half while B is built (rb / 32 lines a group), half
 * while the sums are flushed (a burst would leave the memory idle for the rest of the tile; and a version that
 * built the next tile's B between this one's products and sums, so that the rows are read at an even pace, measured
 * slower: int8 at 4 heads 12.7 against 9.5 ns a row in L2, 21.2 against 17.6 streamed). scr: G W floats of
 * interleaved accumulators, then G x 48 digit dwords. Returns -1 (nothing added) for a weight that is not finite. */
AMXV_INLINE int amx_vals(const int F, float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0,
                         size_t n, float *scr)
{
    const size_t W = v->W, rb = v->row_bytes, nz = W / 128, na = 8 * nz;
    const size_t g0 = G <= 5 ? G : 4, g1 = G - g0, pb = rb / 32, pa = VV_T * rb / 64 / na;
    float *fp = scr, sw[8];
    int32_t *wd = (int32_t *)(void *)(scr + G * W), cor[8][3] = {{0}};
    int8_t bt[VN_MAXW / 16][1024] __attribute__((aligned(64)));   /* B of accumulator a (16 columns) */
    int32_t cb[4][256] __attribute__((aligned(64)));              /* C: [2 k + group] for accumulator a + k */
    const int32_t *crow[8];                                       /* head h's digit rows in its group's C */
    for (size_t h = 0; h < G; h++) crow[h] = cb[h >= g0] + 48 * (h >= g0 ? h - g0 : h);
    memset(fp, 0, G * W * sizeof *fp);
    AmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = cfg.rows[3] = cfg.rows[6] = (uint8_t)(3 * g0);
    cfg.rows[1] = cfg.rows[4] = cfg.rows[7] = (uint8_t)(g1 ? 3 * g1 : 1);
    cfg.rows[2] = cfg.rows[5] = 16;
    for (int i = 0; i < 8; i++) cfg.colsb[i] = 64;
    int configured = 0;
    for (size_t i0 = 0; i0 < n; i0 += VV_T) {
        const size_t nt = n - i0 < VV_T ? n - i0 : VV_T, t = t0 + i0;
        const int any = av_weights(F, p + i0, lp, G, v->rscale ? v->rscale + t : NULL, nt, wd, cor, sw);
        if (any < 0) {
            if (configured) _tile_release();
            return -1;
        }
        if (!any) continue;
        const uint8_t *row0 = v->codes + t * rb, *pf = row0 + nt * rb;   /* past the tensor: a prefetch does not fault */
        for (size_t g = 0; g < VV_T / 4; g++) {   /* B: group g of 4 rows (past nt: the last row again, weight 0) */
            const uint8_t *r[4];
            if (nt == VV_T) UNROLL for (int i = 0; i < 4; i++) r[i] = row0 + (4 * g + (size_t)i) * rb;
            else UNROLL for (int i = 0; i < 4; i++) r[i] = row0 + (4 * g + (size_t)i < nt ? 4 * g + (size_t)i : nt - 1) * rb;
            for (size_t j = 0; j < pb; j++, pf += 64) pf_hint(pf, 1);
            av_group(F, bt, r, g, nz);
        }
        if (!configured) _tile_loadconfig(&cfg), configured = 1;
        _tile_loadd(0, wd, 64);
        if (g1) _tile_loadd(1, wd + 48 * g0, 64);
        for (size_t a = 0; a < na; a += 2) {
            _tile_loadd(2, bt[a], 64);
            _tile_loadd(5, bt[a + 1], 64);
            _tile_zero(3);
            _tile_zero(6);
            _tile_dpbssd(3, 0, 2);
            _tile_dpbssd(6, 0, 5);
            if (g1) {
                _tile_zero(4);
                _tile_zero(7);
                _tile_dpbssd(4, 1, 2);
                _tile_dpbssd(7, 1, 5);
            }
            _tile_stored(3, cb[0], 64);
            _tile_stored(6, cb[2], 64);
            if (g1) {
                _tile_stored(4, cb[1], 64);
                _tile_stored(7, cb[3], 64);
            }
            for (size_t j = 0; j < pa; j++, pf += 64) pf_hint(pf, 1);
            for (size_t h = 0; h < G; h++) {
                if (sw[h] == 0.0f) continue;
                const __m512 s = _mm512_set1_ps(sw[h]);
                UNROLL for (int k = 0; k < 2; k++) {
                    const int32_t *c = crow[h] + 512 * k;
                    __m512i d[3];
                    UNROLL for (int e = 0; e < 3; e++) {   /* vn_combine's order: the most significant digit first */
                        d[e] = _mm512_load_si512((const void *)(c + 16 * (2 - e)));
                        if (F == F_INT4) d[e] = _mm512_add_epi32(d[e], _mm512_set1_epi32(cor[h][2 - e]));
                    }
                    float *f = fp + h * W + 16 * (a + (size_t)k);
                    _mm512_storeu_ps(f, _mm512_fmadd_ps(vn_combine(3, d), s, _mm512_loadu_ps(f)));
                }
            }
        }
    }
    if (configured) _tile_release();
    for (size_t h = 0; h < G; h++) vv_unpermute(F, acc + h * W, fp + h * W, nz);
    return 0;
}
AMXV_FN int amx_int8_vals(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n, float *scr)
{
    return amx_vals(F_INT8, acc, p, lp, G, v, t0, n, scr);
}
AMXV_FN int amx_int4_vals(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n, float *scr)
{
    return amx_vals(F_INT4, acc, p, lp, G, v, t0, n, scr);
}

/* ---- E4M3 and BF16 keys of two to eight heads with AMX-BF16 ------------------------------------------------------- */

/* Every E4M3 value is a BF16 exactly (4 significant bits, 2^-9 .. 448), and so is 1/256 of it, the unit the E4M3 slots
 * answer in (raw_scale 256). Where amx_on and the CPU reports AMX-BF16 and AVX512-VBMI, the key slot of two to eight
 * heads with W 64 or 128 takes tile products (tdpbf16ps: each product of two BF16 exact in float32, the sums
 * float32):
 *   - the codes become BF16 through two 128-entry byte tables (amxb_lo, amxb_hi: the low and high byte of |value| /
 *     256, vpermi2b; the sign is the code's bit 7), 64 codes in 8 instructions (e4m3_bf16);
 *   - the query is split into three BF16 parts, each the top 16 bits of what is left (amxb_split): hi + mid + lo is
 *     the float32 exactly (8 + 8 + 8 significant bits), so the only rounding is the float32 sums', as in the float32
 *     kernels;
 *   - A = 16 rows of BF16 values (32 columns a tile), B = the heads' parts (column 4 h + e: part e of head h, e = mid,
 *     lo, hi, 0), so C row t holds each head's three partial scores in its 128-bit lane, which amxb_post adds ((mid
 *     + lo) + hi) and transposes into the heads' score rows.
 * BF16 keys (amxb_bf16_scores) take the same products with A loaded from the cache rows (row stride), no conversion;
 * AMX reads a BF16 subnormal key (below 2^-126) as zero.
 * A query with an element that is not finite or passes 2^100 takes the float32 kernels (the sums could overflow),
 * and so does one whose largest element is below 2^-90 (but not zero): AMX reads BF16 subnormals as zero, so parts
 * below 2^-126 count as zero, at most 2^-36 of the largest element when it is 2^-90 or more.
 * Measured (Sapphire Rapids VM, bench_kernels e4m3 keys, medians of 5 alternating runs, ns a row in L2 / streamed,
 * float32 FP16 reading -> AMX): G = 2 16.6 / 20.5 -> 11.7 / 21.0, G = 4 23.1 / 32.2 -> 13.5 / 25.0, G = 8 38.7 / 45.0
 * -> 12.6 / 30.0; tests/count_insns 134 -> 40 instructions a row at G = 4. One head: 13.7 / 18.6 -> 11.9 / 22.4, so
 * G = 1 keeps the float32 kernel. The values stay on the float32 kernels: the same scheme for them (A = the weights'
 * parts, B = two rows' values interleaved, flushed every 64 or 128 tokens) measured 19.5-30 ns a row in L2 against
 * 19.0. On that VM a tile product took about 8 ns (24 cycles), a tile load of 1 KiB about 5 ns and a tile store
 * about 10 ns, and the values' tile traffic (16 B tiles loaded and 8 C stored per 64 tokens), added to their
 * conversion, did not overlap. */
#define AMXB_FN static __attribute__((noinline, target("avx512vbmi,amx-tile,amx-bf16")))
#define AMXB_INLINE static inline __attribute__((always_inline, target("avx512vbmi,amx-tile,amx-bf16")))
#define AMXB_MAX 0x1p100f
#define AMXB_MIN 0x1p-90f
static int amxb_cpu;   /* the CPU reports AMX-BF16 and AVX512-VBMI (decode_kernels_avx512) */
/* |value| / 256 of the codes 0..127 as BF16: its low and high bytes (amxb_tables) */
static uint8_t amxb_lo[128] __attribute__((aligned(64))), amxb_hi[128] __attribute__((aligned(64)));

__attribute__((target("no-avx512f"))) static void amxb_tables(void)
{
    for (unsigned c = 0; c < 128; c++) {
        const float x = store_e4m3_to_f32((uint8_t)c) / 256.0f;   /* exact; code 127 NaN */
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        amxb_lo[c] = (uint8_t)(u >> 16), amxb_hi[c] = (uint8_t)(u >> 24);
    }
}

/* The tables in four registers. */
typedef struct {
    __m512i lo0, lo1, hi0, hi1;
} AmxbLut;
INLINE AmxbLut amxb_lut(void)
{
    return (AmxbLut){_mm512_load_si512((const void *)amxb_lo), _mm512_load_si512((const void *)(amxb_lo + 64)),
                     _mm512_load_si512((const void *)amxb_hi), _mm512_load_si512((const void *)(amxb_hi + 64))};
}

/* 64 E4M3 codes x -> 64 BF16 values / 256: w[0] the codes of bytes 16 L + 0..7 of each 128-bit lane L (words 8 L ..),
 * w[1] of bytes 16 L + 8..15. */
AMXB_INLINE void e4m3_bf16(__m512i x, const AmxbLut *t, __m512i w[2])
{
    const __m512i lo = _mm512_permutex2var_epi8(t->lo0, x, t->lo1);   /* index bits 0..6; bit 7 (the sign) ignored */
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->hi0, x, t->hi1), x,
                                                 _mm512_set1_epi8((char)0x80), 0xF8);   /* hi | (x & 0x80) */
    w[0] = _mm512_unpacklo_epi8(lo, hi);
    w[1] = _mm512_unpackhi_epi8(lo, hi);
}

/* The three parts of 16 floats as BF16 bits in the high halves of 32-bit lanes (low halves zero): x = p[0] + p[1] +
 * p[2] exactly, p[0] its top 16 bits (hi), p[1] those of the rest (mid), p[2] the rest (lo). */
INLINE void amxb_split(__m512 x, __m512i p[3])
{
    const __m512i m = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i h = _mm512_and_si512(_mm512_castps_si512(x), m);
    const __m512 r1 = _mm512_sub_ps(x, _mm512_castsi512_ps(h));
    const __m512i md = _mm512_and_si512(_mm512_castps_si512(r1), m);
    const __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(md));
    p[0] = h, p[1] = md, p[2] = _mm512_and_si512(_mm512_castps_si512(r2), m);
}

/* 1 when the n floats at x (n % 16 == 0) are finite, the largest magnitude below AMXB_MAX and at least AMXB_MIN (or
 * every one zero): then the parts that AMX reads as zero (below 2^-126) weigh at most 2^-36 of the largest. */
INLINE int amxb_fits(const float *x, size_t n)
{
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (size_t j = 0; j < n; j += 16) {
        const __m512 v = _mm512_abs_ps(_mm512_loadu_ps(x + j));
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, v);
    }
    const float m = _mm512_reduce_max_ps(mx);
    return !nan && m < AMXB_MAX && (m >= AMXB_MIN || m == 0.0f);
}

/* The AMX key slots take G heads of W columns. */
INLINE int amxb_takes(size_t G, size_t W) { return amx_on && amxb_cpu && G >= 2 && G <= 8 && (W == 64 || W == 128); }

/* The natural column at key position P of a converted row (chunks of 64 codes: w[0] then w[1], e4m3_bf16). */
INLINE size_t amxb_kcol(size_t P)
{
    const size_t o = P % 64;
    return P - o + 16 * (o % 32 / 8) + 8 * (o / 32) + o % 8;
}

/* C of 16 rows (cb: row i at cb + 16 i, column 4 h + e) -> heads 0..gh-1's scores at s + h ls (mk: the rows): per
 * head (mid + lo) + (hi + 0) (lane_sums). */
INLINE void amxb_post(const float *cb, float *s, size_t ls, size_t gh, __mmask16 mk)
{
    __m512 r[16], o[4];
    UNROLL for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(cb + 16 * i);
    lane_sums(r, o);
    UNROLL for (int h = 0; h < 4; h++) {
        if ((size_t)h >= gh) break;
        _mm512_mask_storeu_ps(s + (size_t)h * ls, mk, o[h]);
    }
}

/* 16 rows of E4M3 codes (row i at base + i rb; rows nr.. repeat row nr - 1) -> ab as BF16 (row i at ab + W i). */
AMXB_INLINE void amxb_rows(uint16_t *ab, const uint8_t *base, size_t rb, size_t nr, const size_t W, const AmxbLut *lut)
{
    UNROLL for (int i = 0; i < 16; i++) {
        const uint8_t *row = base + ((size_t)i < nr ? (size_t)i : nr - 1) * rb;
        UNROLL for (size_t c = 0; c < W / 64; c++) {
            __m512i w[2];
            e4m3_bf16(_mm512_loadu_si512((const void *)(row + 64 * c)), lut, w);
            _mm512_store_si512((void *)(ab + W * (size_t)i + 64 * c), w[0]);
            _mm512_store_si512((void *)(ab + W * (size_t)i + 64 * c + 32), w[1]);
        }
    }
}

/* E4M3 (bf 0) or BF16 (bf 1) keys of G (2..8) heads, W 64 or 128: heads 0..3 one C (tmm1) with its B of chunk z
 * resident (tmm3 + z), heads 4.. a second C (tmm2) whose B is loaded for each chunk (tmm7); A (tmm0) the chunk's 32
 * columns of 16 rows (BF16: from the cache, but for a last tile of fewer rows). E4M3: in program order a tile's
 * products come first, then the next tile's conversion (into the other of two A buffers), then this tile's sums
 * (amxb_post), so that the tile unit's work, its stores and the conversion overlap. */
AMXB_INLINE void amxb_scores(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                             const size_t W, const int bf)
{
    const size_t nz = W / 32, rb = k->row_bytes, ng = G > 4 ? 2 : 1;
    uint16_t bt[2][4][512] __attribute__((aligned(64)));   /* B of group grp, chunk z: row r = 32 words */
    uint16_t ab[2][16 * 128] __attribute__((aligned(64)));  /* A: 16 rows of W BF16, two tiles */
    float cb[2][256] __attribute__((aligned(64)));
    memset(bt, 0, sizeof bt);
    for (size_t h = 0; h < G; h++) {   /* B word (r, 4 hh + e, i) = part e of column amxb_kcol(32 z + 2 r + i) */
        uint32_t pw[3][128] __attribute__((aligned(64)));
        for (size_t j = 0; j < W; j += 16) {
            __m512i x[3];
            amxb_split(_mm512_loadu_ps(qp + h * W + j), x);
            UNROLL for (int e = 0; e < 3; e++) _mm512_store_si512((void *)(pw[e] + j), x[e]);
        }
        for (size_t P = 0; P < W; P++) {
            const size_t c = bf ? P : amxb_kcol(P);
            uint16_t *w = bt[h / 4][P / 32] + 32 * (P % 32 / 2) + 8 * (h % 4) + P % 2;
            w[0] = (uint16_t)(pw[1][c] >> 16);   /* e 0: mid */
            w[2] = (uint16_t)(pw[2][c] >> 16);   /* e 1: lo */
            w[4] = (uint16_t)(pw[0][c] >> 16);   /* e 2: hi */
        }
    }
    AmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.colsb[i] = 64, cfg.rows[i] = 16;
    _tile_loadconfig(&cfg);
    _tile_loadd(3, bt[0][0], 64);
    _tile_loadd(4, bt[0][1], 64);
    if (nz > 2) {
        _tile_loadd(5, bt[0][2], 64);
        _tile_loadd(6, bt[0][3], 64);
    }
    const AmxbLut lut = amxb_lut();
    const uint8_t *codes = k->codes + t0 * rb;
    if (!bf) amxb_rows(ab[0], codes, rb, n < 16 ? n : 16, W, &lut);
    for (size_t r = 0, it = 0; r < n; r += 16, it ^= 1) {
        const size_t nr = n - r < 16 ? n - r : 16;
        const uint16_t *a = ab[it];
        long as = (long)(2 * W);   /* A's row stride */
        if (bf && nr == 16) {   /* BF16 rows straight from the cache */
            a = (const uint16_t *)(const void *)(codes + r * rb), as = (long)rb;
            if (r + 48 <= n) prefetch_range(codes + (r + 32) * rb, 16 * rb, 0);
        } else if (bf) {   /* the last rows, the last one repeated */
            for (size_t i = 0; i < 16; i++) memcpy(ab[it] + W * i, codes + (r + (i < nr ? i : nr - 1)) * rb, 2 * W);
        }
        _tile_zero(1);
        if (ng > 1) _tile_zero(2);
#define AMXB_CHUNK(z, BT)                                                                                              \
    do {                                                                                                               \
        _tile_loadd(0, a + 32 * (z), as);                                                                              \
        _tile_dpbf16ps(1, 0, BT);                                                                                      \
        if (ng > 1) {                                                                                                  \
            _tile_loadd(7, bt[1][z], 64);                                                                              \
            _tile_dpbf16ps(2, 0, 7);                                                                                   \
        }                                                                                                              \
    } while (0)
        AMXB_CHUNK(0, 3);
        AMXB_CHUNK(1, 4);
        if (nz > 2) {
            AMXB_CHUNK(2, 5);
            AMXB_CHUNK(3, 6);
        }
#undef AMXB_CHUNK
        _tile_stored(1, cb[0], 64);
        if (ng > 1) _tile_stored(2, cb[1], 64);
        if (!bf && r + 16 < n) {   /* the next tile, and the rows two tiles ahead */
            const size_t nn = n - r - 16;
            if (nn > 32) prefetch_range(codes + (r + 48) * rb, 16 * rb, 0);
            amxb_rows(ab[it ^ 1], codes + (r + 16) * rb, rb, nn < 16 ? nn : 16, W, &lut);
        }
        const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFFu : (1u << nr) - 1u);
        amxb_post(cb[0], s + r, ls, G < 4 ? G : 4, mk);
        if (ng > 1) amxb_post(cb[1], s + 4 * ls + r, ls, G - 4, mk);
    }
    _tile_release();
}
AMXB_FN void amxb_e4m3_scores(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n)
{
    if (n == 0) return;
    if (k->W == 64) amxb_scores(s, ls, qp, G, k, t0, n, 64, 0);
    else amxb_scores(s, ls, qp, G, k, t0, n, 128, 0);
}
AMXB_FN void amxb_bf16_scores(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n)
{
    if (n == 0) return;
    if (k->W == 64) amxb_scores(s, ls, qp, G, k, t0, n, 64, 1);
    else amxb_scores(s, ls, qp, G, k, t0, n, 128, 1);
}

/* q4_0 values of one head: as int4's (vv_pass), with a weight per token and block, p x d: per tile of VV_T tokens
 * and pass of 4 blocks (128 columns) one scale sw (vv_scale's power of two for max|p d|); each group of 4 rows gets per digit one
 * vector whose 128-bit lane L holds the 4 rows' digits for block 4 z + L (the codes' lane L is block L too), so
 * vpdpbusd reads it whole instead of broadcast; the offsets (-8 x the digit sums) are per lane as well. Measured
 * on the AMD Zen 4 VM (bench_kernels, one head, medians of 5 alternating runs, ns a row, float32 -> this): in L2
 * 7.1 -> 5.9, streamed 7.3 -> 7.1 (the scales' reading and the weights' digits take about a third of the work). */
VNNI_INLINE int vq_weights(const float *p, const uint8_t *row0, size_t rb, size_t nt, size_t z, __m512i *wq,
                           __m512i *corq, float *sw)
{
    const size_t BB = sizeof(StoreBlockQ4_0);
    __m512 w[VV_T / 4];
    __m512 mx = _mm512_setzero_ps();
    /* word 4 L + k of the gathered scales: block L's d (word 9 L of the pass's first 56 bytes) of row k */
    __mmask16 nan = 0;   /* as in vn_prep */
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 27, 27, 18, 18, 18, 18,
                                         9, 9, 9, 9, 0, 0, 0, 0);
    const size_t ng = (nt + 3) / 4;
    for (size_t g = 0; g < ng; g++) {
        __m512i d = _mm512_setzero_si512();
        UNROLL for (int k = 0; k < 4; k++) {
            const size_t t = 4 * g + (size_t)k < nt ? 4 * g + (size_t)k : nt - 1;
            /* 64 of the pass's 72 bytes, a plain load (a masked load of the 56 needed measured slower on the Zen 4
             * VM: values in L2 6.2 against 5.9 ns a row) */
            const __m512i x = _mm512_loadu_si512((const void *)(row0 + t * rb + 4 * BB * z));
            d = _mm512_mask_permutexvar_epi16(d, (__mmask32)(0x1111u << k), idx, x);
        }
        const size_t left = nt - 4 * g;
        const __m128 p4 = _mm_maskz_loadu_ps((__mmask8)(left >= 4 ? 0xF : (1u << left) - 1u), p + 4 * g);
        w[g] = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(d)), _mm512_broadcast_f32x4(p4));
        nan |= _mm512_cmp_ps_mask(w[g], w[g], _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(w[g]));
    }
    __m512 ek;
    const int r = vv_scale(mx, nan, sw, &ek);
    if (r <= 0) return r;
    __m512i sum[3] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (size_t g = 0; g < ng; g++) {
        const __m512i dg = vv_digits(w[g], ek, sum);
        UNROLL for (int e = 0; e < 3; e++) _mm512_store_si512((void *)(wq + 3 * g + (size_t)e), _mm512_shuffle_epi8(dg, vv_pick(e)));
    }
    UNROLL for (int e = 0; e < 3; e++) {   /* each lane's 4 dwords: that lane's (block's) sum, times -8 */
        __m512i s = _mm512_add_epi32(sum[e], _mm512_shuffle_epi32(sum[e], (_MM_PERM_ENUM)0x4E));
        s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, (_MM_PERM_ENUM)0xB1));
        corq[e] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 3));
    }
    return 0;
}

/* One tile of q4_0 rows over pass z (blocks 4 z .. 4 z + 3): fp as in vv_pass (int4's accumulator order). VB (the
 * CPU has AVX512-VBMI): each row's four blocks of codes are gathered by one vpermt2b from two 64-byte loads of the
 * pass's 72 bytes (bytes 0..63 and 8..71: nothing past the row), instead of four 16-byte loads and three inserts. */
VNNI_INLINE void vq_pass(const int VB, const uint8_t *row0, size_t rb, size_t nt, size_t z, const __m512i *wq,
                         const __m512i *corq, float sw, float *fp, size_t pfd)
{
    const size_t BB = sizeof(StoreBlockQ4_0);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* byte 16 L + k: pass byte v = 18 L + 2 + k (block L's code byte k), from the first load (v < 64) or the second
     * (v - 8, table bit 6 set: v + 56) */
    static const int8_t gix[64] __attribute__((aligned(64))) = {
        2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
        20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,
        38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53,
        56, 57, 58, 59, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127};
    const __m512i gidx = _mm512_load_si512((const void *)gix);
    __m512i a[8][3];
    UNROLL for (int v = 0; v < 8; v++) UNROLL for (int e = 0; e < 3; e++) a[v][e] = corq[e];
    for (size_t g = 0; g < nt; g += 4) {
        __m512i x[4], y[4];
        UNROLL for (int i = 0; i < 4; i++) {   /* lane L: the codes of block 4 z + L */
            const uint8_t *c = row0 + (g + (size_t)i < nt ? g + (size_t)i : nt - 1) * rb + 4 * BB * z + 2;
            if (VB) {
                __m512i t1 = _mm512_loadu_si512((const void *)(c - 2));
                const __m512i t2 = _mm512_loadu_si512((const void *)(c + 6));
                __asm__("vpermt2b %2, %1, %0" : "+v"(t1) : "v"(gidx), "v"(t2));
                x[i] = t1;
                continue;
            }
            const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)c)),
                                                       _mm_loadu_si128((const __m128i *)(const void *)(c + BB)), 1);
            const __m256i hi = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(c + 2 * BB))),
                _mm_loadu_si128((const __m128i *)(const void *)(c + 3 * BB)), 1);
            x[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        if (pfd) prefetch_range(row0 + g * rb + pfd, 4 * rb, 0);
        vv_interleave4(x, y);
        const __m512i *wg = wq + 3 * (g / 4);
        UNROLL for (int m = 0; m < 4; m++) {
            const __m512i u[2] = {_mm512_and_si512(y[m], m4), _mm512_and_si512(_mm512_srli_epi16(y[m], 4), m4)};
            UNROLL for (int h = 0; h < 2; h++)
                UNROLL for (int e = 0; e < 3; e++) a[2 * m + h][e] = vn_dp_mem(a[2 * m + h][e], u[h], wg + e);
        }
    }
    vv_flush(a, sw, fp);
}

/* acc[0..W) += the n q4_0 rows' values weighted by p (one head); -1 (nothing added) for a weight p d that is not
 * finite. scr: W floats. */
VNNI_INLINE int vq_head(const int VB, float *acc, const float *p, const KRows *v, size_t t0, size_t n, float *scr)
{
    const size_t W = v->W, rb = v->row_bytes, nz = W / 128;
    float *fp = scr;
    __m512i wq[VN_MAXW / 128][3 * VV_T / 4], corq[VN_MAXW / 128][3];
    float sw[VN_MAXW / 128];
    memset(fp, 0, W * sizeof *fp);
    for (size_t i0 = 0; i0 < n; i0 += VV_T) {
        const size_t nt = n - i0 < VV_T ? n - i0 : VV_T;
        const uint8_t *row0 = v->codes + (t0 + i0) * rb;
        for (size_t z = 0; z < nz; z++)   /* every pass's weights first: a weight that is not finite adds nothing */
            if (vq_weights(p + i0, row0, rb, nt, z, wq[z], corq[z], sw + z)) return -1;
        for (size_t z = 0; z < nz; z++)
            if (sw[z] != 0.0f) vq_pass(VB, row0, rb, nt, z, wq[z], corq[z], sw[z], fp + 128 * z, z ? 0 : VV_PF);
    }
    vv_unpermute(F_Q4_0, acc, fp, nz);
    return 0;
}

/* ---- KIVI: 4-bit grouped intN, keys per channel, values per token ------------------------------------------ */

/* KIVI's kernels here read 4-bit codes with FP16 scales and mins (asymmetric), W % 32 == 0 and W <= KV_MAXW;
 * keys per channel (any group of tokens), values per token in groups of a multiple of 32 channels with
 * ceil(W / g) dividing 16. Other intN shapes go to the AVX2 kernels (kernels_kivi_avx2.c). The interface is in
 * natural column order; inside, units of 32 columns in int4's order here (even columns, then odd). */

/* 32 natural-order floats (a, b) -> kernel order (the even ones, then the odd ones), and back. */
INLINE void deinterleave(__m512 a, __m512 b, __m512 *e, __m512 *o)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *e = _mm512_permutex2var_ps(a, ie, b);
    *o = _mm512_permutex2var_ps(a, io, b);
}
INLINE void interleave(__m512 e, __m512 o, __m512 *a, __m512 *b)
{
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *a = _mm512_permutex2var_ps(e, il, o);
    *b = _mm512_permutex2var_ps(e, ih, o);
}
INLINE __m512 h16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p)); }

static int kivi_keys_ok(const KRows *k)
{
    return k->bits == 4 && k->axis == STORE_AXIS_CHANNEL && !k->f32 && k->min && k->W % 32 == 0 && k->W <= KV_MAXW;
}
static int kivi_vals_ok(const KRows *v)
{
    return v->bits == 4 && v->axis == STORE_AXIS_TOKEN && !v->f32 && v->min && v->W % 32 == 0 && v->W <= KV_MAXW &&
           v->g % 32 == 0 && 16 % v->per == 0;
}

/* Keys: per token group met, q' = q s (kernel order) and c = q . m for the G heads (float32, like the AVX2
 * kernel), then the 16-row tiles score q' . n + c. */
static void kivi_scores(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n, float *scr)
{
    const size_t W = k->W, g = k->g, nu = W / 32;
    /* transposed tiles for two or more heads (q' in their order), else 16-row tiles (int4's order) */
    const int tr = W % 128 == 0 && G >= 2;
    /* scratch: qt (G, W) the queries in transposed order, qs (G, W) q', c (G), st (W) the scales, idx (W) */
    float *qt = scr, *qs = qt + G * W, *c = qs + G * W, *st = c + G;
    int32_t *idx = (int32_t *)(void *)(st + W);
    float tmp[KV_MAXW] __attribute__((aligned(64)));
    if (tr) {
        tpos_index(idx, W, 0);
        for (size_t h = 0; h < G; h++) gather_w(qt + h * W, q + h * W, idx, W);
    }
    const uint16_t *sc = k->scale, *mn = k->min;
    for (size_t i = 0; i < n;) {
        const size_t t = t0 + i, grp = t / g, p0 = grp * k->per;
        size_t end = (grp + 1) * g - t0;
        if (end > n) end = n;
        if (tr) {   /* the group's scales in transposed order, once for the G heads */
            for (size_t j = 0; j < W; j += 16) _mm512_store_ps(tmp + j, h16(sc + p0 + j));
            gather_w(st, tmp, idx, W);
        }
        for (size_t h = 0; h < G; h++) {
            const float *qh = q + h * W;
            __m512 a = _mm512_setzero_ps();
            for (size_t u = 0; u < nu; u++) {
                __m512 x0 = _mm512_loadu_ps(qh + 32 * u), x1 = _mm512_loadu_ps(qh + 32 * u + 16);
                if (tr) {
                    _mm512_storeu_ps(qs + h * W + 32 * u, _mm512_mul_ps(_mm512_loadu_ps(qt + h * W + 32 * u), _mm512_loadu_ps(st + 32 * u)));
                    _mm512_storeu_ps(qs + h * W + 32 * u + 16,
                                     _mm512_mul_ps(_mm512_loadu_ps(qt + h * W + 32 * u + 16), _mm512_loadu_ps(st + 32 * u + 16)));
                } else {
                    __m512 e, o;
                    deinterleave(_mm512_mul_ps(x0, h16(sc + p0 + 32 * u)), _mm512_mul_ps(x1, h16(sc + p0 + 32 * u + 16)), &e, &o);
                    _mm512_storeu_ps(qs + h * W + 32 * u, e);
                    _mm512_storeu_ps(qs + h * W + 32 * u + 16, o);
                }
                a = _mm512_fmadd_ps(x0, h16(mn + p0 + 32 * u), a);
                a = _mm512_fmadd_ps(x1, h16(mn + p0 + 32 * u + 16), a);
            }
            c[h] = _mm512_reduce_add_ps(a);
        }
        if (tr) {
            HEAD_GROUPS(G, h, key_tiles_t(F_KIVI, GC, s + h * ls, ls, qs + h * W, c + h, k, t0 + i, i, end - i));
        } else {
            HEAD_GROUPS(G, h, for (size_t r = i; r < end; r += KT) key_tile(F_KIVI, GC, s + h * ls, ls, qs + h * W,
                                                                            c + h, k, t0 + r, r,
                                                                            end - r < KT ? end - r : KT));
        }
        i = end;
    }
}

/* Values: per tile of up to VT tokens, the weights w = p s (per token and group) for the GC heads and the
 * midpoints' share sum_t p (m + 7.5 s) per group (in lanes, folded at the end); the codes are read centred
 * (n - 7.5), so acc = sum_t w (n - 7.5) + sum_t p (m + 7.5 s) is the value's s n + m split into two sums that
 * do not cancel. Kernel-order accumulators ak, back to natural order at the end. */
INLINE void kivi_val_heads(const int GC, float *acc, const float *p, size_t lp, const KRows *v, size_t t0, size_t n)
{
    const size_t W = v->W, nu = W / 32, rb = v->row_bytes, per = v->per, gu = v->g / 32, ws = VT * per;
    const int CU = GC >= 8 ? 1 : GC == 4 ? 2 : 4;
    float wb[8 * VT * 16] __attribute__((aligned(64))), ak[8 * KV_MAXW] __attribute__((aligned(64)));
    const uint16_t *sc = v->scale, *mn = v->min;
    memset(ak, 0, (size_t)GC * W * sizeof *ak);
    __m512 msum[8];
    UNROLL for (int g = 0; g < GC; g++) msum[g] = _mm512_setzero_ps();
    __m512i pidx = _mm512_setzero_si512();   /* lane l: token l / per of the chunk */
    {
        int32_t ix[16];
        for (int l = 0; l < 16; l++) ix[l] = (int32_t)((size_t)l / per);
        pidx = _mm512_loadu_si512(ix);
    }
    const __m512 cen = _mm512_set1_ps(7.5f);
    for (size_t i0 = 0; i0 < n; i0 += VT) {
        const size_t nt = n - i0 < VT ? n - i0 : VT, t = t0 + i0, ne = nt * per;
        for (size_t e = 0; e < ne; e += 16) {   /* 16 / per tokens x per groups */
            const size_t left = ne - e, tl = (left + per - 1) / per;
            const __mmask16 mk = (__mmask16)(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
            const __mmask16 mt = (__mmask16)(tl >= 16 ? 0xFFFFu : (1u << tl) - 1u);
            const __m512 sv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, sc + t * per + e));
            const __m512 mid = _mm512_fmadd_ps(cen, sv, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, mn + t * per + e)));
            UNROLL for (int g = 0; g < GC; g++) {
                __m512 pv = _mm512_maskz_loadu_ps(mt, p + (size_t)g * lp + i0 + e / per);
                __m512 pp = _mm512_maskz_permutexvar_ps(mk, pidx, pv);
                _mm512_store_ps(wb + (size_t)g * ws + e, _mm512_mul_ps(pp, sv));
                msum[g] = _mm512_fmadd_ps(pp, mid, msum[g]);
            }
        }
        const uint8_t *row = v->codes + t * rb;
        const size_t pfd = nt * rb > PF_AHEAD ? nt * rb : PF_AHEAD;
        val_units(F_KIVI, GC, CU, ak, W, wb, ws, per, gu, NULL, row, rb, nt, nu, pfd);
    }
    UNROLL for (int g = 0; g < GC; g++) {
        float ml[16], m[16];
        _mm512_storeu_ps(ml, msum[g]);
        for (size_t kk = 0; kk < per; kk++) {
            float a = 0.0f;
            for (size_t l = kk; l < 16; l += per) a += ml[l];
            m[kk] = a;
        }
        float *o = acc + (size_t)g * W;
        const float *kg = ak + (size_t)g * W;
        for (size_t u = 0; u < nu; u++) {
            __m512 a, b;
            interleave(_mm512_load_ps(kg + 32 * u), _mm512_load_ps(kg + 32 * u + 16), &a, &b);
            const __m512 mk = _mm512_set1_ps(m[u / gu]);
            _mm512_storeu_ps(o + 32 * u, _mm512_add_ps(_mm512_loadu_ps(o + 32 * u), _mm512_add_ps(a, mk)));
            _mm512_storeu_ps(o + 32 * u + 16, _mm512_add_ps(_mm512_loadu_ps(o + 32 * u + 16), _mm512_add_ps(b, mk)));
        }
    }
}

static void kivi_scores_slot(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n,
                             float *scr)
{
    if (!kivi_keys_ok(k)) {
        decode_kivi_scores_avx2(s, ls, q, G, k, t0, n, scr);
        return;
    }
    kivi_scores(s, ls, q, G, k, t0, n, scr);
}

static void kivi_vacc_slot(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                           float *scr)
{
    if (!kivi_vals_ok(v)) {
        decode_kivi_vacc_avx2(acc, p, lp, G, v, t0, n, scr);
        return;
    }
    const size_t W = v->W;
    HEAD_GROUPS(G, h, kivi_val_heads(GC, acc + h * W, p + h * lp, lp, v, t0, n));
}

/* ---- softmax pieces ---------------------------------------------------------------------------------------- */

static float max_avx512(const float *s, size_t n)
{
    __m512 v = _mm512_set1_ps(s[0]);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) v = _mm512_max_ps(v, _mm512_loadu_ps(s + i));
    if (i < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1u);
        v = _mm512_mask_max_ps(v, mk, v, _mm512_maskz_loadu_ps(mk, s + i));
    }
    return _mm512_reduce_max_ps(v);
}

/* The AVX2 set's exp (kernels_avx2.c: Cephes expf for x <= 0, the same operations lane by lane, so the same
 * values), 16 lanes; the tail through masks (the AVX2 set's tail calls expf). */
INLINE __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(DECODE_EXP_MIN));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(DECODE_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(DECODE_EXP_LN2_HI), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(DECODE_EXP_LN2_LO), x);
    __m512 y = _mm512_set1_ps(DECODE_EXP_P5);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(DECODE_EXP_P4));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(DECODE_EXP_P3));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(DECODE_EXP_P2));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(DECODE_EXP_P1));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(DECODE_EXP_P0));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

static float exp_sum_avx512(float *s, size_t n, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + i), vm));
        _mm512_storeu_ps(s + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + i), vm));
        _mm512_mask_storeu_ps(s + i, mk, e);
        acc = _mm512_mask_add_ps(acc, mk, acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

/* ---- the slots -------------------------------------------------------------------------------------------- */

static const KernelSet *avx2_set(void) { return decode_kernels_avx2(); }

/* The one-head choice: this file's kernels at one query head per KV head too (VNNI keys from one head, VN_SLOT), but for
 * f16 keys and q8_0 values under tune_zen4 (Z4 / Z4_V below: the AVX2 set's). Measured on an AMD EPYC (Zen 5) VM,
 * bench_kernels, one head, medians of 3, ns a row in L2 / streamed (AVX2 set -> here): f16 keys 5.1 / 8.2 -> 3.4 /
 * 6.8, f16 values 5.6 / 7.9 -> 2.1 / 6.8, int8 keys 4.8 / 5.9 -> VNNI 2.3 / 3.7 (float 3.3 / 4.5), q8_0 keys 5.6 /
 * 6.4 -> VNNI 4.3 / 5.0, q8_0 values 6.2 / 6.7 -> 3.2 / 4.1, int4 keys (float tiles here) 3.3 / 3.9 -> VNNI 2.3 /
 * 3.4; kvc bench, 65536 tokens x 8 KV heads, 1 thread, 3 alternating rounds: f16 9.2 -> 8.1 ms, int8 5.4 -> 4.9,
 * q8_0 6.9 -> 5.2, int4 3.8 -> 3.5. On an AMD Zen 4 VM the AVX2 f16 keys and q8_0 values were faster streamed
 * (bench_kernels, one head, medians of 3 alternating runs, ns a row, here -> AVX2: f16 keys 17.2 -> 13.1 (in L2 5.1
 * -> 7.2), q8_0 values 8.2 -> 6.2) and the rest slower or the same (int8 keys 5.1 -> 8.9, int4 keys 4.4 -> 5.7, f16
 * values 8.6 -> 10.5). An earlier Intel Sapphire Rapids VM, with earlier kernels, measured the AVX2 one-head
 * kernels as fast or faster, and tune_intel took them for q4_0 (without VNNI), int8 and q8_0 keys, q8_0 values and
 * both f16 sides; a later Sapphire Rapids VM with these kernels measured this file's faster (bench_kernels, one
 * head, medians of 5 alternating runs, ns a row in L2 / streamed, AVX2 -> here: int8 keys 11.9 / 18.1 -> 5.6 /
 * 13.1, int4 keys 9.3 / 10.7 -> 5.0 / 7.3, q8_0 keys 14.3 / 17.4 -> 12.2 / 14.3, f16 values 10.5 / 27.3 -> 6.5 /
 * 25.4; kvc bench, 65536 tokens x 8 KV heads, 1 thread, medians of 3 alternating rounds: int4 10.7 -> 8.7 ms, int8
 * 16.6 -> 14.5, q8_0 19.2 -> 15.8, f16 28.7 -> 27.4, q4_0 12.5 -> 12.5), so tune_intel takes them too now. */

/* The two kernels of a format; rows of W % 32 != 0 (int4, int8, f16) go to the AVX2 set's slot, and so does one
 * query head per KV head when Z4 (keys) / Z4_V (values) and tune_zen4 (above). */
#define DEFINE_FORMAT(NAME, F, TYPE, Z4, Z4_V)                                                                  \
    static void scores_##NAME(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0,      \
                              size_t n, float *scr)                                                            \
    {                                                                                                          \
        if (k->W % 32 != 0 || (G == 1 && tune_zen4 && Z4)) {                                                     \
            avx2_set()->scores[TYPE](s, ls, qp, G, k, t0, n, scr);                                             \
            return;                                                                                            \
        }                                                                                                      \
        const size_t W = k->W;                                                                                 \
        HEAD_GROUPS(G, h, scores_gc(F, GC, s + h * ls, ls, qp + h * W, k, t0, n, scr));                             \
    }                                                                                                          \
    static void vacc_##NAME(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0,        \
                            size_t n, float *scr)                                                              \
    {                                                                                                          \
        if (v->W % 32 != 0 || (G == 1 && tune_zen4 && Z4_V)) {                                                 \
            avx2_set()->vacc[TYPE](acc, p, lp, G, v, t0, n, scr);                                              \
            return;                                                                                            \
        }                                                                                                      \
        const size_t W = v->W;                                                                                 \
        HEAD_GROUPS(G, h, val_heads(F, GC, acc + h * W, p + h * lp, lp, v, t0, n));                            \
    }

DEFINE_FORMAT(int4_tiles, F_INT4, STORE_INT4, 0, 0)

/* int4 keys of two or more heads with W % 128 == 0 (W <= KV_MAXW): the transposed tiles, the query taken to
 * their order once per call; other widths and one head: the 16-row tiles above. */
static void scores_int4(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                        float *scr)
{
    const size_t W = k->W;
    if (W % 128 != 0 || W > KV_MAXW || G == 1) {   /* one head: the 16-row tiles (measured faster) */
        scores_int4_tiles(s, ls, qp, G, k, t0, n, scr);
        return;
    }
    int32_t idx[KV_MAXW];
    float qt[8 * KV_MAXW] __attribute__((aligned(64)));
    tpos_index(idx, W, 1);
    for (size_t h0 = 0; h0 < G; h0 += 8) {
        const size_t gn = G - h0 < 8 ? G - h0 : 8;
        for (size_t h = 0; h < gn; h++) gather_w(qt + h * W, qp + (h0 + h) * W, idx, W);
        HEAD_GROUPS(gn, h, key_tiles_t(F_INT4, GC, s + (h0 + h) * ls, ls, qt + h * W, NULL, k, t0, 0, n));
    }
}
#define vacc_int4 vacc_int4_tiles
DEFINE_FORMAT(q4_0_f32, F_Q4_0, STORE_Q4_0, 0, 0)
#define vacc_q4_0 vacc_q4_0_f32
DEFINE_FORMAT(int8_f32, F_INT8, STORE_INT8, 0, 0)
DEFINE_FORMAT(q8_0_f32, F_Q8_0, STORE_Q8_0, 0, 1)
#define vacc_int8 vacc_int8_f32
#define vacc_q8_0 vacc_q8_0_f32

/* int8 / q8_0 (int4, q4_0) keys with W % 64 == 0 (128) and W <= VN_MAXW, at any number of heads: the VNNI kernels
 * (the slots of the VNNI set only), else (and for a query that is not finite) the float32 kernels above. */
static int vn_takes(const KRows *k, size_t unit) { return k->W % unit == 0 && k->W <= VN_MAXW; }
/* slot NAME: VNNI when vn_takes(k, UNIT) and VNNI accepts the query, else FALLBACK. One head too (q4_0:
 * bench_kernels, 65536 x 8 heads x 128, streamed: keys 8.6-9.0 -> 6.6-6.8 ns a row, against the AVX2 one-head
 * kernel; int8, q8_0 and int4: see "The one-head choice", where an earlier Intel VM kept them on the float kernels). */
#define VN_SLOT(NAME, UNIT, VNNI, FALLBACK)                                                                           \
    static void NAME(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n, float *scr) \
    {                                                                                                               \
        if (vn_takes(k, UNIT) && VNNI(s, ls, qp, G, k, t0, n, scr) == 0) return;                                   \
        FALLBACK(s, ls, qp, G, k, t0, n, scr);                                                                      \
    }
VN_SLOT(scores_int8, 64, scores_int8_vnni, scores_int8_f32)
VN_SLOT(scores_q8_0, 64, scores_q8_0_vnni, scores_q8_0_f32)
VN_SLOT(scores_int4_vn, 128, scores_int4_vnni, scores_int4)
VN_SLOT(scores_q4_0_vn, 128, scores_q4_0_vnni, scores_q4_0_f32)
/* the rounded-query sets: the fewer-digit kernels */
#define VN_ROUNDED(ND)                                                                                               \
    VN_SLOT(scores_int8_r##ND, 64, scores_int8_vnni##ND, scores_int8_f32)                                            \
    VN_SLOT(scores_q8_0_r##ND, 64, scores_q8_0_vnni##ND, scores_q8_0_f32)                                            \
    VN_SLOT(scores_int4_r##ND, 128, scores_int4_vnni##ND, scores_int4)                                               \
    VN_SLOT(scores_q4_0_r##ND, 128, scores_q4_0_vnni##ND, scores_q4_0_f32)
VN_ROUNDED(2)
VN_ROUNDED(1)
#undef VN_ROUNDED
#undef VN_SLOT
/* int8 / int4 / q4_0 values of one query head per KV head with W % 128 == 0: the VNNI sums (vv_head, vq_head; the slots of the VNNI
 * sets only), else (and for a weight that is not finite) the float32 kernels above. Two to eight heads of int8 and
 * int4: the AMX tile products (amx_vals) where amx_on and vbmi_on, else the float32 kernels. Without AMX, not for
 * two or more heads: a version that interleaved each tile once and ran the heads' digits over the kept codes measured slower than the
 * float32 kernels, whose conversion is then shared (AMD Zen 4 VM, bench_kernels, values in L2, ns a row, float32 ->
 * VNNI: int8 G = 2 / 4 / 8 7.6 / 11.5 / 23.1 -> 8.8 / 16.8 / 29.1, int4 7.8 / 12.4 / 22.9 -> 8.2 / 13.0 / 24.0;
 * with the kept codes read by the instruction, G = 4: int8 12.8 -> 13.4, int4 12.3 -> 10.9). Three digits take 24
 * vpdpbusd per 4 tokens and head against 32 FMAs, only a quarter fewer (vpdpbusd and the FMA each issue once a
 * cycle there: 0.27 ns, 12 independent chains), and each head's weight digits and the kept codes' loads cost about
 * as much; at one head the gain is the conversion of the codes, which two or more heads share anyway. */
#define VV_SLOT(NAME, HEAD, AMXV, FALLBACK)                                                                             \
    __attribute__((target("avx512vnni"))) static void NAME(float *acc, const float *p, size_t lp, size_t G,       \
                                                           const KRows *v, size_t t0, size_t n, float *scr)       \
    {                                                                                                             \
        if (G == 1 && v->W % 128 == 0 && v->W <= VN_MAXW && HEAD == 0) return;                                   \
        if (G >= 2 && G <= 8 && amx_on && vbmi_on && v->W % 128 == 0 && v->W <= VN_MAXW && AMXV == 0) return;                \
        FALLBACK(acc, p, lp, G, v, t0, n, scr);                                                                   \
    }
VV_SLOT(vacc_int8_vn, vv_head(F_INT8, acc, p, v, t0, n, scr), amx_int8_vals(acc, p, lp, G, v, t0, n, scr), vacc_int8)
VV_SLOT(vacc_int4_vn, vv_head(F_INT4, acc, p, v, t0, n, scr), amx_int4_vals(acc, p, lp, G, v, t0, n, scr), vacc_int4)
VV_SLOT(vacc_q4_0_vn, (vbmi_on ? vq_head(1, acc, p, v, t0, n, scr) : vq_head(0, acc, p, v, t0, n, scr)), -1, vacc_q4_0)
#undef VV_SLOT
DEFINE_FORMAT(f16, F_F16, STORE_F16, 1, 0)
/* E4M3: the kernels above with the query or the weights lifted (e4m3_f32, E4M3_LIFT); the AVX2 set's kernels
 * where that would overflow, and for W % 32 != 0. With tune_intel, the FP16 reading (F_E4M3H, e4m3_f16), which
 * needs no lift. */
INLINE int e4m3_small(const float *x, size_t n)
{
    __mmask16 bad = 0;
    for (size_t j = 0; j < n; j += 16) {   /* |x| >= E4M3_QMAX or NaN, in the lanes below n */
        const __mmask16 m = (__mmask16)(n - j >= 16 ? 0xFFFFu : (1u << (n - j)) - 1u);
        const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + j));
        bad |= _mm512_mask_cmp_ps_mask(m, v, _mm512_set1_ps(E4M3_QMAX), _CMP_NLT_UQ);
    }
    return bad == 0;
}
static void scores_e4m3(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                        float *scr)
{
    const size_t W = k->W;
    if (amxb_takes(G, W) && amxb_fits(qp, G * W)) {
        amxb_e4m3_scores(s, ls, qp, G, k, t0, n);
        return;
    }
    if (W % 32 != 0 || (!tune_intel && !e4m3_small(qp, G * W))) {
        avx2_set()->scores[STORE_E4M3](s, ls, qp, G, k, t0, n, scr);
        return;
    }
    if (tune_intel) {   /* the FP16 reading (e4m3_f16): no lift */
        HEAD_GROUPS(G, h, scores_gc(F_E4M3H, GC, s + h * ls, ls, qp + h * W, k, t0, n, scr));
        return;
    }
    float *ql = scr;   /* the lifted queries; the rest of the scratch (at least 8 W floats) for scores_gc */
    for (size_t j = 0; j < G * W; j += 16) _mm512_storeu_ps(ql + j, _mm512_mul_ps(_mm512_loadu_ps(qp + j), _mm512_set1_ps(E4M3_LIFT)));
    HEAD_GROUPS(G, h, scores_gc(F_E4M3, GC, s + h * ls, ls, ql + h * W, k, t0, n, scr + G * W));
}
/* BF16 keys of 2-8 heads with W 64 or 128: AMX-BF16 tile products straight from the cache where amxb_takes and the
 * query fits (amxb_fits), else the AVX2 set's kernel. */
static void scores_bf16(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                        float *scr)
{
    if (amxb_takes(G, k->W) && amxb_fits(qp, G * k->W)) amxb_bf16_scores(s, ls, qp, G, k, t0, n);
    else avx2_set()->scores[STORE_BF16](s, ls, qp, G, k, t0, n, scr);
}
static void vacc_e4m3(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n, float *scr)
{
    const size_t W = v->W;
    int ok = W % 32 == 0;
    for (size_t h = 0; h < G && ok && !tune_intel; h++) ok = e4m3_small(p + h * lp, n);
    if (!ok) {
        avx2_set()->vacc[STORE_E4M3](acc, p, lp, G, v, t0, n, scr);
        return;
    }
    if (tune_intel) {
        HEAD_GROUPS(G, h, val_heads(F_E4M3H, GC, acc + h * W, p + h * lp, lp, v, t0, n));
    } else {
        HEAD_GROUPS(G, h, val_heads(F_E4M3, GC, acc + h * W, p + h * lp, lp, v, t0, n));
    }
}

/* int4 with W % 32 == 0: units of 32 (low nibbles, then high); everything else as the AVX2 set reads it. */
static void col_order_avx512(size_t *perm, StoreType t, size_t W)
{
    if (t != STORE_INT4 || W % 32 != 0) {
        avx2_set()->col_order(perm, t, W);
        return;
    }
    for (size_t p = 0; p < W; p++) {
        size_t base = p / 32 * 32, o = p % 32;
        perm[p] = base + (o < 16 ? 2 * o : 2 * (o - 16) + 1);
    }
}

static KernelSet kernels_avx512, kernels_avx512_vnni, kernels_avx512_r2, kernels_avx512_r1;

/* *k = the AVX-512 set (kernels_avx512, filled first) with these int8, q8_0, int4 and q4_0 key slots; name NULL:
 * its name. */
__attribute__((target("no-avx512f"))) static void int_keys(KernelSet *k, const char *name, ScoresFn i8, ScoresFn q8,
                                                           ScoresFn i4, ScoresFn q4)
{
    *k = kernels_avx512;
    if (name) k->name = name;
    k->scores[STORE_INT8] = i8;
    k->scores[STORE_Q8_0] = q8;
    k->scores[STORE_INT4] = i4;
    k->scores[STORE_Q4_0] = q4;
    k->vacc[STORE_INT8] = vacc_int8_vn;
    k->vacc[STORE_INT4] = vacc_int4_vn;
    k->vacc[STORE_Q4_0] = vacc_q4_0_vn;
}

/* 1 when the CPU and OS report AMX-INT8 (decode_cpu_features) and Linux grants this process the tile data state
 * (asked once; without the grant the first tile instruction would be an illegal instruction). */
__attribute__((target("no-avx512f"))) static int amx_granted(void)
{
    static int asked, granted;
    if (!asked) {
        asked = 1;
#if defined(__linux__) && defined(SYS_arch_prctl)
        enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        granted = (decode_cpu_features() & DECODE_CPU_AMX_INT8) &&
                  syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
    }
    return granted;
}

/* Safe to call on any x86-64 CPU: the CPU is asked first, and this function alone is compiled without AVX-512
 * (its table copy could otherwise use zmm moves, an illegal instruction where AVX-512 is missing). */
__attribute__((target("no-avx512f"))) const KernelSet *decode_kernels_avx512(int vnni)
{
    static int ready;
    unsigned need = DECODE_CPU_AVX2 | DECODE_CPU_FMA | DECODE_CPU_F16C | DECODE_CPU_AVX512F | DECODE_CPU_AVX512BW |
                    DECODE_CPU_AVX512VL;
    const unsigned f = decode_cpu_features();
    if ((f & need) != need) return NULL;
    if (!ready) {
        const char *tv = getenv("KVC_TUNE");
        decode_avx512_tune_set(tv && strcmp(tv, "intel") == 0  ? DECODE_TUNE_INTEL
                               : tv && strcmp(tv, "amd") == 0  ? DECODE_TUNE_AMD
                               : tv && strcmp(tv, "zen4") == 0 ? DECODE_TUNE_ZEN4
                               : !(f & DECODE_CPU_AMD)         ? DECODE_TUNE_INTEL
                               : f & DECODE_CPU_AMD_F19        ? DECODE_TUNE_ZEN4
                                                               : DECODE_TUNE_AMD);
        const KernelSet *a = avx2_set();
        if (!a) return NULL;
        kernels_avx512 = *a;
        kernels_avx512.name = "avx512";
        kernels_avx512.scores[STORE_INT4] = scores_int4;
        kernels_avx512.scores[STORE_Q4_0] = scores_q4_0_f32;
        kernels_avx512.vacc[STORE_INT4] = vacc_int4;
        kernels_avx512.vacc[STORE_Q4_0] = vacc_q4_0;
        kernels_avx512.scores[STORE_INT8] = scores_int8_f32;
        kernels_avx512.scores[STORE_Q8_0] = scores_q8_0_f32;
        kernels_avx512.scores[STORE_F16] = scores_f16;
        kernels_avx512.vacc[STORE_INT8] = vacc_int8;
        kernels_avx512.vacc[STORE_Q8_0] = vacc_q8_0;
        kernels_avx512.vacc[STORE_F16] = vacc_f16;
        kernels_avx512.scores[STORE_E4M3] = scores_e4m3;   /* results as the AVX2 set's: its raw_scale (256) */
        kernels_avx512.vacc[STORE_E4M3] = vacc_e4m3;
        kernels_avx512.scores[STORE_BF16] = scores_bf16;   /* the AVX2 set's kernel but for AMX-BF16 shapes */
        kernels_avx512.scores[STORE_INTN] = kivi_scores_slot;
        kernels_avx512.vacc[STORE_INTN] = kivi_vacc_slot;
        kernels_avx512.col_order = col_order_avx512;
        kernels_avx512.max = max_avx512;
        kernels_avx512.exp_sum = exp_sum_avx512;
        /* the VNNI set: the same name, the same results up to the key sums' rounding; the rounded-query sets */
        int_keys(&kernels_avx512_vnni, NULL, scores_int8, scores_q8_0, scores_int4_vn, scores_q4_0_vn);
        int_keys(&kernels_avx512_r2, "avx512-int16q", scores_int8_r2, scores_q8_0_r2, scores_int4_r2, scores_q4_0_r2);
        int_keys(&kernels_avx512_r1, "avx512-int8q", scores_int8_r1, scores_q8_0_r1, scores_int4_r1, scores_q4_0_r1);
        const char *isa = getenv("KVC_ISA");
        amx_on = amx_granted() && !(isa && strcmp(isa, "avx512-noamx") == 0);
        vbmi_on = (f & DECODE_CPU_AVX512VBMI) != 0;
        amxb_cpu = vbmi_on && (f & DECODE_CPU_AMX_BF16) != 0;
        if (amxb_cpu) amxb_tables();
        ready = 1;
    }
    return vnni && (f & DECODE_CPU_AVX512VNNI) ? &kernels_avx512_vnni : &kernels_avx512;
}

__attribute__((target("no-avx512f"))) int decode_avx512_amx(void) { return amx_on; }
__attribute__((target("no-avx512f"))) int decode_avx512_amx_bf16(void) { return amx_on && amxb_cpu; }
__attribute__((target("no-avx512f"))) int decode_avx512_amx_set(int on)
{
    const int was = amx_on;
    amx_on = on && amx_granted();
    return was;
}

__attribute__((target("no-avx512f"))) int decode_avx512_tune(void)
{
    return tune_intel ? DECODE_TUNE_INTEL : tune_zen4 ? DECODE_TUNE_ZEN4 : DECODE_TUNE_AMD;
}
__attribute__((target("no-avx512f"))) void decode_avx512_tune_set(int tune)
{
    tune_intel = tune == DECODE_TUNE_INTEL;
    tune_zen4 = tune == DECODE_TUNE_ZEN4;
    pf_cap = tune_zen4 ? 4096 : (size_t)-1;
}

__attribute__((target("no-avx512f"))) const KernelSet *decode_kernels_avx512_rounded(int digits)
{
    if ((digits != 1 && digits != 2) || !decode_kernels_avx512(1) ||
        !(decode_cpu_features() & DECODE_CPU_AVX512VNNI))
        return NULL;
    return digits == 1 ? &kernels_avx512_r1 : &kernels_avx512_r2;
}

#else
/* Built without the AVX-512 flags (a non-x86 target): no AVX-512 kernels. */
int decode_avx512_amx(void) { return 0; }
int decode_avx512_amx_bf16(void) { return 0; }
int decode_avx512_amx_set(int on) { (void)on; return 0; }
int decode_avx512_tune(void) { return DECODE_TUNE_INTEL; }
void decode_avx512_tune_set(int tune) { (void)tune; }
const KernelSet *decode_kernels_avx512(int vnni)
{
    (void)vnni;
    return NULL;
}
const KernelSet *decode_kernels_avx512_rounded(int digits)
{
    (void)digits;
    return NULL;
}
#endif
