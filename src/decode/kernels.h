/* kernels: the one interface of the fused decode kernels, the per-format building blocks of a decode step.
 * Internal to src/decode/.
 *
 * A KernelSet has one slot per stored type (StoreType): scores[type] (the key side) and vacc[type] (the value
 * side), plus the format-independent pieces (max, exp_sum, read_sum) and how the set reads columns (col_order,
 * raw_scale). Three sets fill every slot:
 *   decode_kernels_ref     kernels_ref.c: portable scalar C, the `_ref` twin of every slot.
 *   decode_kernels_avx2()  AVX2 + FMA + F16C: kernels_avx2.c (f32 .. q4_0), kernels_ggml_avx2.c (q4_1, q5_0,
 *                          q5_1, iq4_nl: kernels_ggml.h), kernels_kivi_avx2.c (STORE_INTN, the grouped integer
 *                          format of KIVI and the method library: kernels_kivi.h). Those three files alone are
 *                          compiled with -mavx2 -mfma -mf16c and share avx2_common.h (helpers, the head-group
 *                          driver, the value-side tile path); decode.c calls them only after a runtime CPU check.
 *   decode_kernels_avx512() the AVX2 set with the int4, q4_0, int8, q8_0, f16, e4m3 and STORE_INTN slots (and
 *                          col_order, max, exp_sum) replaced by AVX-512F/BW/VL kernels (kernels_avx512.c, the
 *                          only file built with -mavx512f -mavx512bw -mavx512vl), which hand the shapes they do
 *                          not take to the AVX2 slots (its bf16 key slot: the AVX2 one but for AMX-BF16 shapes,
 *                          decode_avx512_amx_bf16); decode.c uses it when cpuid and xgetbv report AVX-512F,
 *                          BW, VL and the ZMM state (KVC_ISA=avx2 keeps the AVX2 set). Where cpuid also reports
 *                          AVX512_VNNI its int8, q8_0, int4 and q4_0 key slots (any number of heads; int8 at 2 to 8
 *                          heads, int4 at 5 to 8, through AMX tiles where the CPU has AMX-INT8) take exact
 *                          integer dot products (vpdpbusd) with the query in three 8-bit digits (2^-24 of its
 *                          largest element; KVC_ISA=avx512-novnni keeps the float32 kernels), and its int8, int4
 *                          and q4_0 value slots of one head exact integer sums with the weights in three digits
 *                          (int8 and int4 values of 2 to 8 heads too, as AMX tile products, where the CPU has
 *                          AMX-INT8 and AVX512-VBMI: each head's sums those of the one-head kernel, bit for bit).
 * decode.c picks one slot per stored tensor when the decoder is created (a residual segment, e.g. KIVI's FP16
 * window, is just more tensors with their own slot) and calls it for every block of tokens.
 *
 * What the kernels read (KRows, filled by decode.c from a StoreTensor): every type f32 .. iq4_nl, full rank or
 * low-rank coefficients (W = rank), any W (the ggml types W % 32 == 0, store_check); STORE_INTN when full rank,
 * 2 / 4 / 8 bits, FP16 or FP32 parameters, W % 8 == 0 and groups of a multiple of 8 (or one group per row /
 * column; groups may cross blocks, the last may be shorter). Any other tensor (intN with 3 / 5 / 6 / 7 bits,
 * other groups, W % 8 != 0, low-rank intN) has no slot: decode.c dequantizes it in small tiles
 * (store_dequantize_rows_f32) and runs the f32 slot over them.
 *
 * G query heads share one KV head; W stored columns per token; rows are read straight from the stored bytes (no
 * dequantized copy). A kernel set may read columns in its own order (kernel order): the caller permutes the
 * prepared query into that order and the accumulated output back (col_order); the intN kernels read natural
 * order at their interface (they permute inside).
 *
 * Numerics (both sets): products and sums in float32; scores are dot products over W with several float32
 * partial sums; p = exp(s - max) in float32 (AVX2: a degree-6 polynomial after range reduction, within 2 ulp
 * of expf); the weighted V sum is accumulated in float32 per token block. Per-token FP16 scales multiply the
 * finished dot product (keys) or the weight (values). Each element is read as its exact stored value
 * (src/store/elem.h). The summation order depends only on W, n, G (and intN's group), never on the thread count.
 * Pure: no allocation, no I/O; the caller supplies every buffer (scr: DECODE_SCRATCH floats).
 *
 * Adding a kernel: write it with the ScoresFn / VaccFn signature (AVX2: in the file of its family, with
 * avx2_common.h's helpers and HEAD_GROUPS driver), put it in its slot of kernels_avx2.c's table, give it a
 * scalar twin in kernels_ref.c's table, and extend tests/test_decode.c's format list.
 */
#ifndef KVC_DECODE_KERNELS_H
#define KVC_DECODE_KERNELS_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

/* The stored rows a kernel reads: one head's K or V (or its float32 copy on the naive path). */
typedef struct KRows {
    StoreType type;
    const uint8_t *codes;    /* row t at codes + t * row_bytes */
    size_t row_bytes;
    const uint16_t *rscale;  /* FP16 scale per token (int8 / int4 / int2, axis token), else NULL */
    size_t W;                /* stored columns */
    /* STORE_INTN only (zero otherwise): the grouped integer parameters (store.h's intN) */
    int bits;                /* 2, 4 or 8 */
    StoreAxis axis;          /* STORE_AXIS_CHANNEL: groups of g tokens per column; TOKEN: g channels per row */
    size_t g;                /* group extent, resolved: axis channel tokens per group (T: one group), token channels (W) */
    size_t per;              /* parameters per group row: axis channel W (index G * W + j), token ceil(W / g) (t * per + k) */
    const void *scale;       /* scales in store.h's group order, FP16 or FP32 (f32) */
    const void *min;         /* mins, same order; NULL: symmetric (m = -2^(bits-1) s, codes stored as n = code + 2^(bits-1)) */
    int f32;                 /* 1: FP32 parameters, 0: FP16 */
} KRows;

/* *r = the kernels' view of the stored tensor st (decode.c, which builds every slot's rows with it; tests/count_insns
 * too). Returns 1 when the slot of st's type reads it: every type but STORE_INTN, and intN when full rank, 2 / 4 / 8
 * bits, FP16 or FP32 parameters, W % 8 == 0 and groups of a multiple of 8 (or one group per row / column); else 0
 * (decode.c then takes the generic tile path). */
int decode_rows(KRows *r, const StoreTensor *st);

/* Floats of scratch (scr) a kernel call needs for G query heads over rows of W columns (the intN kernels' prepared
 * queries, parameters and accumulators; the other kernels use none). */
#define DECODE_SCRATCH(G, W) ((G) * (4 * (W) + 16) + 8 * (W) + 64)

/* s[g*ls + i] = rowscale(t0+i) * sum_j qp[g*W + j] * value(t0+i, j), for g < G, i < n.
 * qp: G prepared queries of W floats, in kernel order. */
typedef void (*ScoresFn)(float *s, size_t ls, const float *qp, size_t G, const KRows *k, size_t t0, size_t n,
                         float *scr);
/* acc[g*W + j] += sum_i p[g*lp + i] * rowscale(t0+i) * value(t0+i, j), for g < G, j < W (kernel order). */
typedef void (*VaccFn)(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                       float *scr);

/* exp(x) for x <= 0 in both fused sets (Cephes expf): x clamped at EXP_MIN, n = round(x log2 e), r = x - n ln 2
 * in two steps (LN2_HI + LN2_LO), a degree-6 polynomial P5..P0 in r, times 2^n. One set of constants, so the
 * AVX2 and AVX-512 lanes give the same values. */
#define DECODE_EXP_MIN (-87.33654f)
#define DECODE_EXP_LOG2E 1.44269504088896341f
#define DECODE_EXP_LN2_HI 0.693359375f
#define DECODE_EXP_LN2_LO (-2.12194440e-4f)
#define DECODE_EXP_P5 1.9875691500e-4f
#define DECODE_EXP_P4 1.3981999507e-3f
#define DECODE_EXP_P3 8.3334519073e-3f
#define DECODE_EXP_P2 4.1665795894e-2f
#define DECODE_EXP_P1 1.6666665459e-1f
#define DECODE_EXP_P0 5.0000001201e-1f

typedef struct KernelSet {
    const char *name;                     /* "scalar", "avx2" or "avx512" */
    ScoresFn scores[STORE_NTYPES];        /* one slot per stored type; every set fills all of them */
    VaccFn vacc[STORE_NTYPES];
    /* true value = raw_scale[type] * what the kernels read, 0 meaning 1 (AVX2 reads E4M3 as FP16: 1/256 of its
     * value); the caller folds it into the prepared query and the output */
    float raw_scale[STORE_NTYPES];
    /* perm[p] = the natural column read at kernel position p, p < W */
    void (*col_order)(size_t *perm, StoreType t, size_t W);
    float (*max)(const float *s, size_t n);                  /* n >= 1 */
    float (*exp_sum)(float *s, size_t n, float m);           /* s[i] = exp(s[i] - m); returns the sum */
    /* the sum of n floats, read once: the STREAM-style read-bandwidth probe of kvc bench */
    float (*read_sum)(const float *x, size_t n);
} KernelSet;

extern const KernelSet decode_kernels_ref;
/* NULL when kvc was built without the AVX2 translation units (non-x86 targets). */
const KernelSet *decode_kernels_avx2(void);
/* The AVX2 set with slots replaced by AVX-512F/BW/VL kernels (kernels_avx512.c); with vnni != 0 and a CPU that
 * reports AVX512_VNNI, the int8, q8_0, int4 and q4_0 key slots take integer dot products (vpdpbusd; int8 at 2 to 8
 * heads, int4 at 5 to 8, AMX tile products where available, decode_avx512_amx) for any number of heads, and the
 * int8, int4 and q4_0 value slots integer sums for one head (D % 128 == 0, D <= 512; int8 and int4 values of 2 to 8
 * heads too with AMX and AVX512-VBMI).
 * NULL when built without that translation unit, or when cpuid and xgetbv do not report AVX-512F, BW and VL
 * besides the AVX2 set's features (safe to call on any CPU). */
const KernelSet *decode_kernels_avx512(int vnni);
/* The AVX-512 sets' kernel choices that measured differently by machine: DECODE_TUNE_INTEL (Intel Sapphire Rapids
 * VMs), DECODE_TUNE_AMD (an AMD Zen 5 VM), DECODE_TUNE_ZEN4 (an AMD Zen 4 VM). E4M3: read through FP16 (INTEL: there
 * the float32 reading's subnormals cost microcode assists) or as float32 bits, the same results. One query head per
 * KV head (G = 1): the set's own kernels (int8, q8_0 and int4 keys on the VNNI kernels), but f16 keys and q8_0
 * values on the AVX2 set's (ZEN4); the VNNI keys at four or more heads: tiles of 16 rows (INTEL) or 32; the key
 * tiles' prefetch: two tiles ahead, at most 4 KiB on ZEN4. Default: cpuid's vendor and family (AMD family 19h: ZEN4,
 * other AMD: AMD, else INTEL); KVC_TUNE=intel, amd or zen4 chooses. decode_avx512_tune_set, for tests, changes it
 * for the calls that follow (not while a decoder runs). */
enum { DECODE_TUNE_AMD = 0, DECODE_TUNE_INTEL = 1, DECODE_TUNE_ZEN4 = 2 };
/* 1 when the VNNI set's int8 key slot takes 2 to 8 heads (W 64 or 128), and its int4 slot 5 to 8 (W 128), as AMX
 * tile products (kernels_avx512.c, amx_scores: the same scores as its VNNI kernels, bit for bit), and (where the
 * CPU also has AVX512-VBMI) its int8 and int4 value slots 2 to 8 heads (W % 128 == 0, W <= 512; amx_vals: each
 * head's sums the one-head kernel's, bit for bit): cpuid reports AMX-INT8, the OS saves the
 * tile state, Linux granted it, and KVC_ISA is not avx512-noamx. decode_avx512_amx_set, for tests and
 * bench_kernels, turns it off (0) or back on (1, where available) for the calls that follow; returns the old value. */
int decode_avx512_amx(void);
int decode_avx512_amx_set(int on);
/* 1 when amx_on and the CPU also reports AMX-BF16 and AVX512-VBMI: the AVX-512 sets' E4M3 and BF16 key slots then
 * take 2 to 8 heads with W 64 or 128 as BF16 tile products (kernels_avx512.c, amxb_scores: the query in three BF16
 * parts whose sum is the float32 exactly, so the scores are within float32 rounding of the other kernels', not their
 * bits).
 * Follows decode_avx512_amx_set. */
int decode_avx512_amx_bf16(void);
int decode_avx512_tune(void);
void decode_avx512_tune_set(int tune);
/* The VNNI set with the int8, q8_0, int4 and q4_0 key slots taking the query rounded to `digits` 8-bit digits
 * (2: an int16 query, 1: an int8 query, as ggml's q8_0) at any number of heads: faster, and less accurate than
 * DECODE_TOL (kernels_avx512.c, "rounded-query sets"). Other slots as the VNNI set. NULL for other digit counts,
 * or where the VNNI set is not available. */
const KernelSet *decode_kernels_avx512_rounded(int digits);
/* The set DECODE_FUSED uses on this machine (decode.c's choice, KVC_ISA honoured): for tools that time its slots. */
const KernelSet *decode_fused_kernels(void);

#endif
