/* elem: the values of stored elements, read one element or one ggml block at a time, defined once for every
 * reader of store.h's formats (the dequantizers of store.c, the decode kernels of src/decode/). Header only:
 * static inline functions of the stored bytes, nothing else. The byte layouts are store.h's (every
 * multi-byte value little-endian, read with memcpy on a little-endian host).
 *
 * What each reader gives back (exact in float32 for every format, as store.h states):
 *   elem_value        element j of a row of f32 .. iq4_nl (not intN): the stored float (f32 / f16 / bf16 /
 *                     e4m3 / e5m2), the integer code (int8 / int4 / int2: the per-token or per-channel FP16
 *                     scale is NOT applied), or the ggml block value with its block scale (and min) applied.
 *   elem_int_code     the code of an int8 / int4 / int2 element (int4 and int2 have their offset removed).
 *   elem_block_values the 32 values of one ggml block (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl).
 *   elem_intn_code    a b-bit code of intN's bit stream at any bit offset (b = 1..8; it may cross a byte).
 *   elem_param        an intN group parameter (scale or min), FP16 or FP32.
 * Value formulas (store.h): q8_0 qs * d, q4_0 (n - 8) * d, q4_1 / q5_1 n * d + m (the product is exact, so one
 * rounding), q5_0 (n - 16) * d, iq4_nl d * K[n]; intN code * s + m (the caller combines code and parameters).
 * Pure: no allocation, no I/O, no failure (the caller checks the format and index; a type these readers do
 * not cover is an assert).
 */
#ifndef KVC_STORE_ELEM_H
#define KVC_STORE_ELEM_H

#include "store/store.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t elem_u16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The FP16 value at p, as float (exact). */
static inline float elem_f16(const uint8_t *p) { return store_f16_to_f32(elem_u16(p)); }

/* q5_0 / q5_1: the high bits qh[4] as the little-endian u32 whose bit i is bit 4 of element i. */
static inline uint32_t elem_qh(const uint8_t *qh)
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* Code of element j of an int8 / int4 / int2 row (int4 stores code + 8 in a nibble, int2 code + 2 in 2 bits). */
static inline int elem_int_code(StoreType t, const uint8_t *row, size_t j)
{
    switch (t) {
    case STORE_INT8: return (int8_t)row[j];
    case STORE_INT4: return ((row[j / 2] >> (4 * (j % 2))) & 0xF) - 8;
    case STORE_INT2: return ((row[j / 4] >> (2 * (j % 4))) & 0x3) - 2;
    default: assert(0 && "elem_int_code: int8, int4 or int2");
    }
    return 0;
}

/* Bytes of one ggml block of type t (q8_0 .. iq4_nl); 0 for a type without blocks. */
static inline size_t elem_block_bytes(StoreType t)
{
    switch (t) {
    case STORE_Q8_0: return sizeof(StoreBlockQ8_0);
    case STORE_Q4_0: return sizeof(StoreBlockQ4_0);
    case STORE_Q4_1: return sizeof(StoreBlockQ4_1);
    case STORE_Q5_0: return sizeof(StoreBlockQ5_0);
    case STORE_Q5_1: return sizeof(StoreBlockQ5_1);
    case STORE_IQ4_NL: return sizeof(StoreBlockIQ4_NL);
    default: return 0;
    }
}

/* 4- or 5-bit code i (0..31) of a nibble block: low nibbles are elements 0..15, high nibbles 16..31; qh (q5_*)
 * adds bit 4. */
static inline int elem_nibble(const uint8_t *qs, uint32_t qh, size_t i)
{
    int n = i < STORE_QK / 2 ? qs[i] & 0xF : qs[i - STORE_QK / 2] >> 4;
    return n | (int)((qh >> i) & 1u) << 4;
}

/* Value i (0..31) of the ggml block at blk (type q8_0 .. iq4_nl), exact in float32. */
static inline float elem_block_value(StoreType t, const uint8_t *blk, size_t i)
{
    float d = elem_f16(blk);
    switch (t) {
    case STORE_Q8_0: return (float)(int8_t)blk[2 + i] * d;
    case STORE_Q4_0: return (float)(elem_nibble(blk + 2, 0, i) - 8) * d;
    case STORE_Q4_1: return (float)elem_nibble(blk + 4, 0, i) * d + elem_f16(blk + 2);
    case STORE_Q5_0: return (float)(elem_nibble(blk + 6, elem_qh(blk + 2), i) - 16) * d;
    case STORE_Q5_1: return (float)elem_nibble(blk + 8, elem_qh(blk + 4), i) * d + elem_f16(blk + 2);
    case STORE_IQ4_NL: return d * (float)store_iq4nl_values[elem_nibble(blk + 2, 0, i)];
    default: assert(0 && "elem_block_value: a ggml block type");
    }
    return 0.0f;
}

/* out[0..32) = the values of the ggml block at blk (type q8_0 .. iq4_nl), exact in float32. */
static inline void elem_block_values(float *out, StoreType t, const uint8_t *blk)
{
    const int has_m = t == STORE_Q4_1 || t == STORE_Q5_1, five = t == STORE_Q5_0 || t == STORE_Q5_1;
    const uint8_t *qh = blk + (has_m ? 4 : 2), *qs = five ? qh + 4 : qh;
    const float d = elem_f16(blk), m = has_m ? elem_f16(blk + 2) : 0.0f;
    const uint32_t h = five ? elem_qh(qh) : 0;
    assert(elem_block_bytes(t) != 0 && "elem_block_values: a ggml block type");
    if (t == STORE_Q8_0) {
        for (size_t i = 0; i < STORE_QK; i++) out[i] = (float)(int8_t)blk[2 + i] * d;
        return;
    }
    for (size_t i = 0; i < STORE_QK; i++) {
        int n = elem_nibble(qs, h, i);
        switch (t) {
        case STORE_Q4_0: out[i] = (float)(n - 8) * d; break;
        case STORE_Q4_1:
        case STORE_Q5_1: out[i] = (float)n * d + m; break;
        case STORE_Q5_0: out[i] = (float)(n - 16) * d; break;
        default: out[i] = d * (float)store_iq4nl_values[n]; break;   /* STORE_IQ4_NL */
        }
    }
}

/* Element j of a row of type t (f32 .. iq4_nl, not intN), natural column order; int types without their
 * group scale. Exact in float32. */
static inline float elem_value(StoreType t, const uint8_t *row, size_t j)
{
    float f;
    switch (t) {
    case STORE_F32: memcpy(&f, row + 4 * j, 4); return f;
    case STORE_F16: return elem_f16(row + 2 * j);
    case STORE_BF16: return store_bf16_to_f32(elem_u16(row + 2 * j));
    case STORE_E4M3: return store_e4m3_to_f32(row[j]);
    case STORE_E5M2: return store_e5m2_to_f32(row[j]);
    case STORE_INT8:
    case STORE_INT4:
    case STORE_INT2: return (float)elem_int_code(t, row, j);
    default: return elem_block_value(t, row + j / STORE_QK * elem_block_bytes(t), j % STORE_QK);
    }
}

/* intN: the b-bit code (1 <= b <= 8) at bit offset off of the bit stream buf (bit k is bit k % 8 of byte
 * k / 8), as stored (symmetric formats store code + 2^(b-1)). */
static inline unsigned elem_intn_code(const uint8_t *buf, size_t off, int b)
{
    unsigned sh = (unsigned)(off % 8), v = buf[off / 8] >> sh;
    if (sh + (unsigned)b > 8) v |= (unsigned)buf[off / 8 + 1] << (8 - sh);
    return v & ((1u << b) - 1u);
}

/* intN: parameter i of an array of FP32 (f32 = 1) or FP16 (f32 = 0) values, as float (exact). */
static inline float elem_param(const void *params, size_t i, int f32)
{
    const uint8_t *p = params;
    if (f32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    return elem_f16(p + 2 * i);
}

#endif
