/* store: the stored formats of a KV cache, defined once. The quantizers write exactly what a cache would
 * hold (codes packed to their bit width, FP16 scales, ggml blocks, a low-rank basis); the dequantizers give
 * back K'/V' for the quality path (double) and the naive decode path (float); the fused decode kernels
 * (src/decode/) read the same bytes directly. Byte counts come from the buffers (store_bytes).
 *
 * One StoreTensor is one head's K or V: T tokens, D head dim, row-major, token t's codes at
 * codes + t * row_bytes. With R > 0 (low rank) the stored rows are the R coefficients of each token and
 * the tensor is X' = C' B' with C' the dequantized (T, R) coefficients and B' the FP16 basis (R, D).
 * W = (R ? R : D) is the number of stored columns per token.
 *
 * Formats (per stored element unless said otherwise; every multi-byte value is little-endian):
 *   f32    IEEE binary32, 4 bytes.
 *   f16    IEEE binary16, round to nearest even from the exact input (float or double, one rounding);
 *          |x| >= 65520 gives +-inf, subnormals are kept, NaN gives sign|0x7E00 (src/base/half.h, the one
 *          implementation of the 16-bit conversions).
 *   bf16   bfloat16, round to nearest even (overflow carries to +-inf, subnormals kept); NaN gives
 *          sign|0x7FC0 (float input: the payload's top bits with the quiet bit). For float input this is
 *          ggml's ((bits + 0x7FFF + lsb) >> 16) (src/base/half.h).
 *   e4m3   OCP FP8 E4M3FN: bias 7, max 448 (0x7E), S.1111.111 is NaN, no infinity.
 *   e5m2   FP8 E5M2: bias 15, max 57344 (0x7B), 0x7C inf, 0x7D-0x7F NaN.
 *          FP8 encoding: the input widened to double is rounded once to nearest even, the sign is kept
 *          on zero and underflow, overflow (and +-inf) saturates to +-max, NaN gives 0x7F.
 *   int8 / int4 / int2   symmetric integer codes, qmax = 2^(bits-1) - 1 (127, 7, 1), one FP16 scale per
 *          group: a token row (axis token, T scales) or a stored column (axis channel, W scales).
 *          scale = fp16(max|x| / qmax) (computed in double, saturated to 65504); codes are
 *          clip(rint(x / scale), -qmax, qmax) against that stored scale; value = code * scale.
 *          A group whose max is 0 (or whose scale underflows FP16 to 0) stores scale 0 and codes 0.
 *          A NaN input element gets code 0. Packing, per token row, starting on a byte boundary
 *          (row_bytes = ceil(W * bits / 8)): int8 one two's-complement byte per code; int4 stores
 *          n = code + 8 (1..15), element j in the low nibble of byte j/2 when j is even, the high nibble
 *          when odd; int2 stores n = code + 2 (1..3), element j in bits 2*(j%4) of byte j/4.
 *   q8_0   ggml block of 32 along the row: {fp16 d; int8 qs[32]}, 34 bytes; value qs[i] * d.
 *   q4_0   ggml block of 32: {fp16 d; u8 qs[16]}, 18 bytes, element i in the low nibble of qs[i], element
 *          i + 16 in the high nibble; value (n - 8) * d.
 *          Both are bit-exact with ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref (float32 arithmetic,
 *          no FMA): double input is first rounded to float32, as ggml only takes float32. W % 32 == 0.
 *   q4_1   {fp16 d; fp16 m; u8 qs[16]}, 20 bytes; value n * d + m (float32).
 *   q5_0   {fp16 d; u8 qh[4]; u8 qs[16]}, 22 bytes: the low 4 bits of element i as q4_0's nibbles, bit 4 of
 *          element i in bit i of qh (a little-endian u32); value (n - 16) * d.
 *   q5_1   {fp16 d; fp16 m; u8 qh[4]; u8 qs[16]}, 24 bytes; value n * d + m (float32).
 *   iq4_nl {fp16 d; u8 qs[16]}, 18 bytes, nibbles as q4_0; value d * K[n] with the code book
 *          K = store_iq4nl_values. An all-zero block (max |x| < 1e-15) stores d = 0 and repeats the nibbles of
 *          the previous block of the row (ggml leaves them as they were; for the first block of a row, where
 *          ggml's are undefined, kvc writes 0); it reads back 0 either way.
 *          All four are bit-exact with ggml's quantize_row_*_ref (../shared/reference/ggml-formats.md); one row
 *          of W values is one ggml call.
 *   intN   (STORE_INTN, the method library's grouped integer format; not accepted by store_format_parse)
 *          b = fmt.bits-bit codes in groups with their own scale (and min). Axis token: groups of
 *          g = fmt.group consecutive columns within a token row, ceil(W / g) per row, ordered by token then
 *          column; axis channel: groups of g consecutive tokens within a column, ceil(T / g) per column,
 *          ordered by token group then column (a new group of tokens appends its W groups). g = 0 means the
 *          whole row (column); the last group of a row (column) may be shorter.
 *          Symmetric: qmax = 2^(b-1) - 1, scale = max|x| / qmax, code = clip(rint(x / s), -qmax, qmax)
 *          stored as n = code + 2^(b-1); value = code * s. Asymmetric (fmt.asym): scale = (max x - min x) /
 *          (2^b - 1), code = clip(rint((x - m) / s), 0, 2^b - 1) stored as n = code; value = code * s + m.
 *          s and m are the scale and min rounded to fmt.scale_type (FP16 by store_f16_from_f64, FP32 by C's
 *          conversion; both saturate to the largest finite value), and the codes are computed against these
 *          stored values; a group whose stored scale is 0 (max|x| = 0, or all x equal when asymmetric, or an
 *          underflow) stores codes 0. Values are computed in double (store_dequantize_f64) or as that double
 *          rounded to float (the f32 entry points).
 *          Codes: the whole tensor, element (t, j) at bit offset (t * W + j) * b of one little-endian bit
 *          stream (bit k is bit k % 8 of byte k / 8), ceil(T * W * b / 8) bytes; rows start on a byte boundary
 *          only when W * b % 8 == 0 (then row_bytes = W * b / 8, else 0). Params: n_groups scales, then
 *          (asymmetric) n_groups mins, 2 (FP16) or 4 (FP32) bytes each, little-endian.
 *          store_quantize_intn_unrounded_f64 is the lesson's simplification (README "How bytes are counted"):
 *          the codes are computed against the unrounded double scale and min, which the caller keeps for
 *          store_dequantize_intn_unrounded_f64; the buffers hold the same codes and the rounded parameters.
 *   low rank (R > 0)   the coefficients in any of the formats above (W = R columns), plus the basis
 *          B' (R, D) in FP16, 2 * R * D bytes.
 *
 * Bytes (store_bytes): T * row_bytes (intN: code_bytes) + 2 * (number of scales) + param_bytes + 2 * R * D.
 *
 * Dequantized values: every format's value is exact in float32 (codes of at most 8 bits times an FP16
 * scale), so the double and float dequantizers agree exactly for full-rank tensors; low rank multiplies
 * C' B' in double through BLAS dgemm (store_dequantize_f64) or in float (store_dequantize_f32).
 *
 * Ownership: store_alloc allocates every buffer (64-byte aligned); store_free releases them (NULL-safe,
 * idempotent). No function prints. Bad shapes or names return -1 with kvc_fail set; a broken invariant
 * (quantizing into an unallocated tensor) is an assert.
 *
 * The type table (store_type_traits, in the spirit of ggml's type_traits): one row per StoreType with its
 * name, code bits, block size and bytes, layout (where its scales live), and the three functions every generic
 * entry point goes through: the scale pass over the whole input, quantize_row and to_float_row. store_type_name,
 * store_type_bits, store_row_bytes, store_check, store_alloc, store_format_parse (and its messages),
 * store_quantize_* and store_dequantize_* read the table instead of switching on the type. Adding a format: a
 * StoreType value (before STORE_NTYPES), its row in store.c's table with its functions (a block type: its block
 * struct above too), its definition in the list above, and its checks in tests/test_store.c (and an oracle in
 * tests/test_store.py); it is then parsed, allocated, quantized, read back and counted everywhere, and decoded
 * (src/decode/decode.h) through tiles of to_float_row until src/decode/ has a fused kernel for it: decode keeps
 * its own per-type kernel table indexed by StoreType beside this one (as ggml-cpu's type_traits_cpu sits beside
 * ggml's type_traits) and may pick a kernel family by the row's layout.
 *
 * Hook for the method library: a method fills a StoreTensor per head and tensor with exactly what it stores
 * (store_alloc + store_quantize_*, store_quantize_intn_unrounded_f64 or writing the codes itself), counts
 * store_bytes, reconstructs its K'/V' with store_dequantize_f64, and returns the tensors with its result
 * (src/methods/methods.h MethodStored); kvc run times a decode step over those very tensors (src/eval/timing.h,
 * src/decode/decode.h). store_intn_to_int and store_set_lowrank_f64 re-express a stored tensor without
 * touching its codes.
 */
#ifndef KVC_STORE_H
#define KVC_STORE_H

#include "base/half.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

typedef enum StoreType {
    STORE_F32,
    STORE_F16,
    STORE_BF16,
    STORE_E4M3,
    STORE_E5M2,
    STORE_INT8,
    STORE_INT4,
    STORE_INT2,
    STORE_Q8_0,
    STORE_Q4_0,
    /* Added for the method library (quantize, kivi, ggml). store_format_parse reads the four ggml names; it does
     * not read intN (the methods set StoreFormat themselves). */
    STORE_Q4_1,
    STORE_Q5_0,
    STORE_Q5_1,
    STORE_IQ4_NL,
    STORE_INTN,
    STORE_NTYPES
} StoreType;

typedef enum StoreAxis { STORE_AXIS_TOKEN = 0, STORE_AXIS_CHANNEL = 1 } StoreAxis;

typedef enum StoreScaleType { STORE_SCALE_F16 = 0, STORE_SCALE_F32 = 1 } StoreScaleType;

/* A tensor format: element type, scale axis (integer types only), rank (0 = full). The fields after rank are
 * for STORE_INTN only (zero otherwise). */
typedef struct StoreFormat {
    StoreType type;
    StoreAxis axis;
    size_t rank;
    int bits;                  /* STORE_INTN: bits per code, 2..8 (symmetric) or 1..8 (asymmetric) */
    int asym;                  /* STORE_INTN: 1 = a scale and a min per group, 0 = a scale only */
    size_t group;              /* STORE_INTN: group extent along the group axis; 0 = the whole row / column */
    StoreScaleType scale_type; /* STORE_INTN: how scales and mins are stored */
} StoreFormat;

/* ggml blocks (ggml-common.h): 32 values along the row, an FP16 scale first. */
#define STORE_QK 32
typedef struct StoreBlockQ8_0 {
    uint16_t d;
    int8_t qs[STORE_QK];
} StoreBlockQ8_0;
typedef struct StoreBlockQ4_0 {
    uint16_t d;
    uint8_t qs[STORE_QK / 2];
} StoreBlockQ4_0;
typedef struct StoreBlockQ4_1 {
    uint16_t d, m;
    uint8_t qs[STORE_QK / 2];
} StoreBlockQ4_1;
typedef struct StoreBlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];             /* bit j (little-endian u32): bit 4 of element j */
    uint8_t qs[STORE_QK / 2];
} StoreBlockQ5_0;
typedef struct StoreBlockQ5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[STORE_QK / 2];
} StoreBlockQ5_1;
typedef struct StoreBlockIQ4_NL {
    uint16_t d;
    uint8_t qs[STORE_QK / 2];  /* indices into store_iq4nl_values */
} StoreBlockIQ4_NL;
static_assert(sizeof(StoreBlockQ8_0) == 34, "q8_0 block is 34 bytes");
static_assert(sizeof(StoreBlockQ4_0) == 18, "q4_0 block is 18 bytes");
static_assert(sizeof(StoreBlockQ4_1) == 20, "q4_1 block is 20 bytes");
static_assert(sizeof(StoreBlockQ5_0) == 22, "q5_0 block is 22 bytes");
static_assert(sizeof(StoreBlockQ5_1) == 24, "q5_1 block is 24 bytes");
static_assert(sizeof(StoreBlockIQ4_NL) == 18, "iq4_nl block is 18 bytes");
/* iq4_nl's non-linear code book K[16] */
extern const int8_t store_iq4nl_values[16];

typedef struct StoreTensor {
    StoreFormat fmt;
    size_t T, D;         /* logical shape: T tokens, D head dim */
    size_t W;            /* stored columns per token: D, or fmt.rank when low rank */
    size_t row_bytes;    /* bytes of one token's codes */
    uint8_t *codes;      /* (T, row_bytes) */
    uint16_t *scales;    /* FP16; n_scales = T (axis token) or W (axis channel) for int types, else 0 */
    size_t n_scales;
    uint16_t *basis;     /* FP16 (rank, D) when fmt.rank > 0, else NULL */
    /* STORE_INTN (zero for the other types): */
    size_t code_bytes;   /* bytes of codes: ceil(T * W * bits / 8) (row_bytes is 0 unless W * bits % 8 == 0) */
    uint8_t *params;     /* n_groups scales, then (asym) n_groups mins, each FP16 or FP32 (fmt.scale_type) */
    size_t n_groups;
    size_t param_bytes;
} StoreTensor;

/* Where a type's scales live: what a reader of the bytes (a decode kernel) must know besides the code bits. */
typedef enum StoreLayout {
    STORE_LAYOUT_PLAIN,    /* one code per element, the value itself, no scales: f32 f16 bf16 e4m3 e5m2 */
    STORE_LAYOUT_SCALED,   /* integer codes packed in the row, times one FP16 scale per token row (axis token) or
                              per stored column (axis channel) kept in StoreTensor.scales: int8 int4 int2 */
    STORE_LAYOUT_BLOCK,    /* blocks of block_size elements along the row, each with its scale (and min) inside
                              the block: the ggml types */
    STORE_LAYOUT_STREAM,   /* the tensor's codes in one bit stream, the group scales (and mins) in
                              StoreTensor.params: intN; rows are not addressable in general */
} StoreLayout;

/* One row of the type table. Rows of a token are row_bytes = block_size > 1 ? W / block_size * block_bytes :
 * ceil(W * bits / 8) bytes (STORE_LAYOUT_STREAM: see intN above). The functions take the whole input x (T, W)
 * row-major in double (xd) or float (xf), exactly one of them set, or its row t (W values). */
typedef struct StoreTypeTraits {
    const char *name;        /* store_type_name */
    const char *alias;       /* a second name store_format_parse reads ("fp8" for e4m3), or NULL */
    int parsed;              /* 1: store_format_parse reads the name (0: intN, whose fields the methods set) */
    int bits;                /* bits of one code, scales not included; 0: per tensor (intN: fmt.bits) */
    size_t block_size;       /* elements per block along a row: 32 for the ggml types (rows hold whole blocks,
                                W % 32 == 0), 1 for the others */
    size_t block_bytes;      /* bytes of one block (its codes and scales) when block_size > 1; else 0 */
    StoreLayout layout;      /* per-group scales: every layout but STORE_LAYOUT_PLAIN */
    int f32_rows;            /* 1: quantize_row computes in float32 (ggml's definition): the generic entry points
                                round double input to float32 first and pass xf */
    /* The scale pass before the rows, over the whole input: writes the group scales (and mins) into st.
     * NULL: every row stands alone. */
    void (*scales)(StoreTensor *st, const double *xd, const float *xf);
    /* Row t (xd or xf: its W values) into st's codes, against the scales the scale pass wrote. The codes of
     * the row are zero before the call. */
    void (*quantize_row)(StoreTensor *st, size_t t, const double *xd, const float *xf);
    /* y (W) = stored row t as it reads back, in natural column order, without the low-rank basis. */
    void (*to_float_row)(float *y, const StoreTensor *st, size_t t);
} StoreTypeTraits;

/* The table row of type t; NULL for an invalid type. */
const StoreTypeTraits *store_type_traits(StoreType t);
/* Name of a type ("f16", "int4", "q8_0", ...); NULL for an invalid type. */
const char *store_type_name(StoreType t);
/* Bits of one stored code (32, 16, 8, 4, 2; q8_0 8, q4_0 4, q4_1 4, q5_* 5, iq4_nl 4; intN 0: see fmt.bits),
 * block and group scales not included. */
int store_type_bits(StoreType t);
int store_type_is_int(StoreType t);   /* int8 / int4 / int2 (STORE_LAYOUT_SCALED): FP16 scales per row or column */

/* Parses one tensor format: TYPE[ch] or lrR[:TYPE[ch]]:
 *   f32 f16 bf16 e4m3 (alias fp8) e5m2 int8 int4 int2 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl (not intN); an int
 *   type with suffix "ch" has one scale per channel ("int4ch"), without it one per token; "lr32" is rank-32
 *   low rank with f16 coefficients, "lr32:int8" with int8 coefficients. Returns 0, or -1 with kvc_fail("<what>: ...") set. */
int store_format_parse(StoreFormat *f, const char *name, const char *what);
/* 1 when a and b are the same format, compared field by field (padding bytes of the struct are unspecified). */
int store_format_equal(StoreFormat a, StoreFormat b);
/* Writes the canonical name of f (as store_format_parse reads it) into buf. */
void store_format_name(char *buf, size_t cap, StoreFormat f);

/* Checks that format f can store a (T, D) tensor (ranges, q formats need W % 32 == 0, rank <= D) and
 * that its sizes fit in size_t. Returns 0 or -1 with kvc_fail set ("<what>: ..."). */
int store_check(StoreFormat f, size_t T, size_t D, const char *what);
/* Bytes the codes of one row of W stored columns take. */
size_t store_row_bytes(StoreType t, size_t W);

/* Allocates a tensor of format f for (T, D) (store_check must pass; asserted). Codes, scales and basis
 * are zeroed. */
void store_alloc(StoreTensor *st, StoreFormat f, size_t T, size_t D);
void store_free(StoreTensor *st);

/* Quantizes x (T, W) row-major into st (pack). For low rank, x holds the coefficients (T, R); set the
 * basis with store_set_basis. The float and double entry points give identical bytes for equal values
 * (float input is widened exactly), except q8_0 / q4_0, whose definition is float32 arithmetic on
 * the input rounded to float32 (for float input: on the input itself). */
void store_quantize_f64(StoreTensor *st, const double *x);
void store_quantize_f32(StoreTensor *st, const float *x);
/* Rounds B (R, D) to FP16 into st->basis. */
void store_set_basis_f64(StoreTensor *st, const double *B);
void store_set_basis_f32(StoreTensor *st, const float *B);

/* The tensor the cache holds, (T, D): the values read back (low rank: C' B'). */
void store_dequantize_f64(double *x, const StoreTensor *st);
void store_dequantize_f32(float *x, const StoreTensor *st);
/* Stored rows only, (T, W), in natural column order (no basis applied). */
void store_dequantize_rows_f32(float *x, const StoreTensor *st, size_t t0, size_t n);

/* Bytes the tensor occupies, computed from its buffers: T*row_bytes + 2*n_scales + 2*rank*D. */
uint64_t store_bytes(const StoreTensor *st);

/* Element conversions (exact round to nearest even, see above). Codes are the raw bit patterns. The 16-bit
 * ones are src/base/half.h's, under the names the store's callers use. */
static inline uint16_t store_f16_from_f64(double x) { return half_from_double(x); }
static inline uint16_t store_f16_from_f32(float x) { return half_from_float(x); }  /* = store_f16_from_f64(x) */
static inline float store_f16_to_f32(uint16_t h) { return half_to_float(h); }
static inline uint16_t store_bf16_from_f64(double x) { return bf16_from_double(x); }
static inline uint16_t store_bf16_from_f32(float x) { return bf16_from_float(x); }
static inline float store_bf16_to_f32(uint16_t h) { return bf16_to_float(h); }
uint8_t store_e4m3_from_f64(double x);
uint8_t store_e5m2_from_f64(double x);
float store_e4m3_to_f32(uint8_t c);
float store_e5m2_to_f32(uint8_t c);

/* ggml reference block quantizers on one row of n floats (n % 32 == 0), exactly as published. */
void store_quantize_row_q8_0(StoreBlockQ8_0 *y, const float *x, size_t n);
void store_quantize_row_q4_0(StoreBlockQ4_0 *y, const float *x, size_t n);
void store_quantize_row_q4_1(StoreBlockQ4_1 *y, const float *x, size_t n);
void store_quantize_row_q5_0(StoreBlockQ5_0 *y, const float *x, size_t n);
void store_quantize_row_q5_1(StoreBlockQ5_1 *y, const float *x, size_t n);
void store_quantize_row_iq4_nl(StoreBlockIQ4_NL *y, const float *x, size_t n);

/* STORE_INTN: the format of f for a b-bit grouped integer tensor (type STORE_INTN, rank 0). */
StoreFormat store_intn_format(int bits, int asym, StoreAxis axis, size_t group, StoreScaleType scale_type);
/* STORE_INTN, the lesson's simplification (see intN above): quantizes x (T, W) into st with the codes computed
 * against the unrounded group parameters, written to exact[2 * g] (scale) and exact[2 * g + 1] (min; 0 when
 * symmetric), g < st->n_groups; the stored parameters are their rounded values. */
void store_quantize_intn_unrounded_f64(StoreTensor *st, const double *x, double *exact);
/* x (T, W) = the codes of st read with the parameters `exact` of store_quantize_intn_unrounded_f64. */
void store_dequantize_intn_unrounded_f64(double *x, const StoreTensor *st, const double *exact);
/* A name for a type valid in any StoreFormat ("q4_1", "intN", ...): sets *t and returns 0, or returns -1; for the
 * tests' helpers. */
int store_type_from_name(StoreType *t, const char *name);

/* STORE_INTN formats that are int8 / int4 / int2 byte for byte: symmetric, FP16 scales, 8, 4 or 2 bits,
 * W * bits % 8 == 0 (rows start on a byte), one group per token row (axis token, group 0 or >= W) or per column
 * (axis channel, group 0 or >= T). Returns that format (type int8/int4/int2, the same axis and rank); any other
 * format is returned as it is. */
StoreFormat store_intn_int_format(StoreFormat f, size_t T, size_t W);
/* When st is a STORE_INTN tensor whose format store_intn_int_format turns into an int type, rewrites st in place
 * as that type: the same codes (int8: code + 128 becomes the code's two's-complement byte; int4 and int2 rows
 * are the same bytes) and its group scales as StoreTensor.scales. store_bytes and every value read back stay
 * the same. Returns 1 when st was rewritten, 0 when it is left as it was. */
int store_intn_to_int(StoreTensor *st);
/* Makes the stored rows of st (T, W) the coefficients of a rank-W tensor (T, D): fmt.rank = W, the basis B
 * (W, D) rounded to FP16 (replacing the basis st had when it was low rank already). The codes and scales stay.
 * Returns 0, or -1 with kvc_fail("<what>: ...") set when the format cannot store that (store_check: an intN
 * tensor, W > D); st is unchanged then. */
int store_set_lowrank_f64(StoreTensor *st, size_t D, const double *B, const char *what);

#endif
