/* decode: one decode step over a stored KV cache, the speed path of kvc. L layers, Hkv KV heads, Hq query
 * heads (a multiple of Hkv: G = Hq / Hkv query heads share each KV head), T tokens, D head dim.
 *
 * A step: for every layer l and query head h (KV head h / G), over the T cached tokens,
 *     s_t = (q . k_t) / sqrt(D),  p_t = exp(s_t - max s),  out = sum_t p_t v_t / sum_t p_t
 * where k_t, v_t are the values the stored format reads back (store.h), read directly from the packed
 * bytes by the fused kernels (src/decode/kernels*.c): no dequantized copy of the cache is made.
 * The kernels have one interface (src/decode/kernels.h, the manual for kernel authors): a KernelSet with one
 * slot per stored type; decoder_create picks the slot of every stored tensor once (each segment's K and V).
 *   - Residual segment (DecodeCache.Tr > 0): the step attends over the T main tokens followed by the Tr tokens
 *     of Kr / Vr, one softmax over T + Tr (e.g. KIVI: the quantized tokens, then the FP16 residual window).
 *     Each segment has its own formats (every Kr one format, every Vr one format), its own prepared queries
 *     and folded factors; its blocks follow the main segment's in the fixed item and merge order.
 *   - Keys-only cache (V = NULL, then Vr = NULL too): only DECODE_KEYS steps (DECODE_FULL asserts).
 *   - Per-channel key scales, 1/sqrt(D), the kernels' column order and raw-value factor (AVX2 reads E4M3 as
 *     FP16, 1/256 of its value) are folded into q once per step; per-channel value scales and the
 *     factor into the output once per step.
 *   - GQA: each KV head's rows are converted once for all G query heads of its group.
 *   - Low-rank keys (rank R): q' = B q once per step (in double, rounded to float), then s_t = c_t . q'
 *     over the R stored coefficients. Low-rank values: the R-dim weighted sum times B at the end.
 *   - An evicted cache is a cache with fewer tokens: pass the compacted kept rows.
 *   - Fused kernels exist for f32, f16, bf16, e4m3, e5m2, int8/int4/int2, the ggml types q8_0/q4_0/q4_1/
 *     q5_0/q5_1/iq4_nl (kernels_ggml.h for the last four), and for the grouped intN format (KIVI's and the
 *     method library's; the STORE_INTN slot, src/decode/kernels_kivi.h): 2 / 4 / 8 bits, symmetric or asymmetric, FP16 or FP32
 *     scales and mins, groups along either axis, with W % 8 == 0 and g % 8 == 0 (or one group per column / row;
 *     groups may cross blocks, the last may be shorter). Keys per channel (groups of g tokens): per token group
 *     q'_j = q_j s_Gj and c_G = q . m_G once, then s_t = q' . n_t + c_G; keys per token (groups of g channels):
 *     each vector of codes becomes its values n s_tk + m_tk by one FMA, then s_t = q . k_t;
 *     values per token: acc_j += p_t (s_tk n_tj + m_tk); values per channel (groups of g tokens): per token
 *     group y = sum_t p_t (n_t - C), then acc += s_G y + (m_G + C s_G) sum_t p_t. Symmetric is the asymmetric
 *     form with m = -2^(b-1) s. Any other stored format (intN with 3 / 5 / 6 / 7 bits, other group sizes,
 *     W % 8 != 0, low-rank intN coefficients) is decoded through small tiles of up to 256 rows dequantized with
 *     store_dequantize_rows_f32 and the f32 kernels (correct, not fused).
 * Work is split into fixed items (layer, KV head, block of DECODE_BLOCK tokens, halved down to 64 while G x the block
 * passes 2^22 floats of a thread's scores); each item computes the
 * block's scores, its max m_b, p = exp(s - m_b), l_b = sum p and acc_b = sum p v in float32, written to its
 * own slot. Blocks are merged in block order in double: out = sum_b e^(m_b - m) acc_b / sum_b e^(m_b - m) l_b.
 * The partition does not depend on the thread count, so the output is bit-identical for any --threads.
 *
 * Implementations: DECODE_FUSED (the AVX-512 KernelSet - the AVX2 set with AVX-512F/BW/VL kernels for int4 and
 * q4_0 - when the CPU and OS have AVX-512F, BW and VL; else the AVX2+FMA+F16C KernelSet when they have those;
 * checked with cpuid and xgetbv at the first decoder_create; else the scalar set), DECODE_REF (the scalar `_ref`
 * KernelSet, always), DECODE_NAIVE (every step first dequantizes the whole cache to float32 with the portable
 * store_dequantize_rows_f32 - low rank: C'B' in float - then runs the fused f32 kernels over it: the cost
 * of a compressed cache without kernel support). Setting the environment variable KVC_ISA=scalar makes
 * DECODE_FUSED use the scalar kernels, KVC_ISA=avx2 the AVX2 set even where AVX-512 is available,
 * KVC_ISA=avx512-novnni the AVX-512 set without its integer (AVX512_VNNI) key kernels, KVC_ISA=avx512-noamx
 * the AVX-512 set without its AMX int8 / int4 key and value kernels (decode_amx, decode_amx_values).
 * DECODE_FUSED_INT16Q and DECODE_FUSED_INT8Q (only where DECODE_FUSED has the VNNI set; decoder_create fails
 * elsewhere): the same, except that int8, q8_0, int4 and q4_0 keys take the query rounded per head to an int16
 * (2 bytes: |q - q'| <= max|q| / 64766) or an int8 (|q - q'| <= max|q| / 254, ggml's precision) at any number
 * of heads (kernels_avx512.c, "rounded-query sets"). Fewer integer products per key row, and an error above
 * DECODE_TOL: a speed-versus-accuracy option that kvc bench measures with its error (--query), never a default.
 *
 * Accuracy: float32 products and accumulation (per block of DECODE_BLOCK tokens), blocks merged in double
 * (both segments' blocks, in order; each segment's weighted sum is taken back to natural order and its
 * factors before the two are added, in double). intN: q' and c_G rounded to float32 once per token group;
 * the AVX2 value kernel sums s (n - C) per tile of 8 tokens (C = (2^b - 1) / 2) and the midpoints m + C s
 * per group, so that sum p s n and sum p m (each far larger than their sum) do not cancel in float32; values
 * per channel centre the codes the same way (C = 2^(b-1) symmetric, (2^b - 1) / 2 asymmetric).
 * Against attention over the dequantized cache in double (attn_forward), the relative error of the
 * output is below DECODE_TOL for every format (tests/test_decode.c; kvc bench reports it).
 *
 * Ownership: the decoder keeps pointers to the caller's tensors (which must outlive it) and owns its
 * threads and scratch. Not thread-safe per decoder.
 */
#ifndef KVC_DECODE_H
#define KVC_DECODE_H

#include "store/store.h"

#include <stddef.h>

#define DECODE_BLOCK 8192     /* tokens per work item (decoder_create's default, halved for G > 512; decode_set_block) */
#define DECODE_TOL 1e-5       /* relative error bound of a step's output vs. double precision */

typedef enum DecodeImpl {
    DECODE_FUSED = 0, DECODE_REF = 1, DECODE_NAIVE = 2,
    DECODE_FUSED_INT16Q = 3,   /* DECODE_FUSED with the query rounded to int16 for int8/q8_0/int4/q4_0 keys */
    DECODE_FUSED_INT8Q = 4,    /* ... to int8, as ggml's q8_0 query: both faster and above DECODE_TOL, see below */
} DecodeImpl;

typedef enum DecodeMode {
    DECODE_FULL = 0,   /* attention output */
    DECODE_KEYS = 1,   /* key side only: scores and their max; out[(l*Hq + h)*D] = max_t s_t, rest 0 */
} DecodeMode;

/* Initialize with designated initializers (or all seven fields): a positional initializer that stops after V
 * is valid C (Tr = 0) but -Wextra's missing-field-initializers warns about it. */
typedef struct DecodeCache {
    size_t L, Hkv, T, D;
    const StoreTensor *K;   /* L * Hkv tensors, index l * Hkv + h, each (T, D) (low rank allowed) */
    const StoreTensor *V;   /* same; NULL: a keys-only cache (only DECODE_KEYS steps) */
    size_t Tr;                    /* tokens of a second segment after the T main tokens (0: none) */
    const StoreTensor *Kr, *Vr;   /* L*Hkv tensors (Tr, D) each, e.g. KIVI's FP16 residual; NULL when Tr == 0 */
} DecodeCache;

typedef struct Decoder Decoder;

/* Checks the cache (every tensor (T, D), Hq a positive multiple of Hkv, threads in 1..1024) and starts
 * the threads. Returns NULL with kvc_fail set on bad input. */
Decoder *decoder_create(const DecodeCache *c, size_t Hq, int threads, DecodeImpl impl);
/* The tokens per work item of the decoders created after this call: a multiple of 64 from 64 to 65536; any other
 * value (0 included) restores DECODE_BLOCK. For tests, which run the merge of many blocks at small T with it. Not
 * thread-safe; returns the previous value. */
size_t decode_set_block(size_t tokens);
/* q is (L, Hq, D), out is (L, Hq, D), both row-major float. */
void decoder_step(Decoder *d, float *out, const float *q, DecodeMode mode);
void decoder_free(Decoder *d);   /* NULL-safe */
/* Which tensors of the cache this decoder reads through the generic tiles (a format without a fused kernel, see
 * above): DECODE_TILED_K | _V (main segment) | _KR | _VR (residual); 0 when a fused kernel reads every one. */
enum { DECODE_TILED_K = 1, DECODE_TILED_V = 2, DECODE_TILED_KR = 4, DECODE_TILED_VR = 8 };
unsigned decoder_tiled(const Decoder *d);

/* Times fused steps of two caches side by side: one untimed warm-up step each, then `repeat` rounds of
 * (one step of a, one step of b); *ns_a, *ns_b = the median step time of each in nanoseconds. Both caches
 * have the same L and D and Hq query heads; q is (L, Hq, D). mode DECODE_KEYS for keys-only caches.
 * Returns 0, or -1 with kvc_fail set (bad cache).
 * a and b may differ in Hkv, T, formats and residual (an eviction's kept rows, T = kept; KIVI's quantized rows
 * plus its FP16 residual). Alternating the steps exposes both to the same machine noise. (kvc run's decode_ns
 * columns do not use it: src/eval/timing.c times each stored form on its own within a time budget and the FP16
 * cache once per run.) */
int decode_time_pair(double *ns_a, double *ns_b, const DecodeCache *a, const DecodeCache *b, size_t Hq,
                     const float *q, int threads, int repeat, DecodeMode mode);

/* CPU features (cpuid, with the OS's AVX state checked through xgetbv); 0 on other architectures. */
enum { DECODE_CPU_AVX2 = 1, DECODE_CPU_FMA = 2, DECODE_CPU_F16C = 4, DECODE_CPU_AVX512F = 8, DECODE_CPU_AVX512BW = 16,
       DECODE_CPU_AVX512VL = 32, DECODE_CPU_AVX512VNNI = 64,
       DECODE_CPU_AMD = 128,    /* the vendor: the AVX-512 sets' tuning (kernels.h) */
       DECODE_CPU_AMD_F19 = 256, /* AMD family 19h (with AVX-512: Zen 4) */
       DECODE_CPU_AMX_INT8 = 512, /* AMX-TILE and AMX-INT8, with the tile state enabled by the OS (XCR0 bits 17, 18) */
       DECODE_CPU_AVX512VBMI = 1024,
       DECODE_CPU_AMX_BF16 = 2048 /* AMX-TILE and AMX-BF16, the tile state enabled by the OS */ };
unsigned decode_cpu_features(void);

/* The kernel set DECODE_FUSED uses on this machine: "avx512", "avx2" or "scalar". */
const char *decode_isa(void);
/* 1 when that set is "avx512" with its AVX512_VNNI integer key kernels (not KVC_ISA=avx512-novnni), else 0. */
int decode_vnni(void);
/* 1 when that set's int8 key slot also takes 2 to 8 heads (D 64 or 128), and its int4 slot 5 to 8 (D 128), as AMX
 * tile products (Intel AMX-INT8, granted by the OS; not KVC_ISA=avx512-noamx or avx512-novnni): the VNNI kernels'
 * scores, bit for bit, faster. */
int decode_amx(void);
/* 1 when decode_amx and the CPU also reports AVX512-VBMI: the int8 and int4 value slots then take 2 to 8 heads (D %
 * 128 == 0, D <= 512) as AMX tile products too, each head's sums the one-head integer kernel's, bit for bit. */
int decode_amx_values(void);
/* 1 when that set is "avx512" and the CPU reports AMX-BF16 and AVX512-VBMI (AMX granted, not KVC_ISA=avx512-noamx):
 * its E4M3 and BF16 key slots then take 2 to 8 query heads per KV head (D 64 or 128) as BF16 tile products. */
int decode_amx_bf16(void);
/* What the fused set adds to its name, for headers: " with VNNI integer keys (AMX tiles: ...)", or "". */
const char *decode_kernels_note(void);
/* The tuning of that set when it is "avx512" (kernels.h, KVC_TUNE): "intel", "amd" or "zen4"; "" for the other sets. */
const char *decode_tune(void);
/* The read-bandwidth probe of kvc bench: after one untimed pass, reads the n floats of x `repeat` times
 * with the fused kernels' loads on `threads` threads (contiguous equal shares) and stores the seconds of
 * each pass in sec[0..repeat). Returns 0, or -1 with kvc_fail set if the threads cannot start. */
int decode_read_times(double *sec, int repeat, const float *x, size_t n, int threads);
/* The floor of one cache: `repeat` timed reads of nbuf buffers (bytes[b] each; the last 0-3 bytes of a buffer
 * are not read, nor is a buffer below 4 bytes) with the fused kernels' loads on `threads` threads, each read
 * after an untimed read of evict_n floats of evict (0: none), so that the buffers come from memory; sec[r] the
 * seconds of read r. Buffers must be 4-byte aligned. Returns 0, or -1 with kvc_fail set if the threads cannot
 * start. */
int decode_read_cold(double *sec, int repeat, const void *const *buf, const size_t *bytes, size_t nbuf,
                     const float *evict, size_t evict_n, int threads);
/* Monotonic clock in seconds. */
double decode_now(void);

#endif
