#!/usr/bin/python3
"""ggml's KV-cache block formats in numpy, written from the published block definitions
(../shared/reference/ggml-formats.md: ggml-common.h and the reference quantizers quantize_row_*_ref), not from
kvc's C. Used by tests/oracle.py (method `ggml`) and tests/test_ggml.py (bit-exactness of codes and scales).

Every float operation the C performs in float32 is one numpy float32 operation here, in the same order (numpy
never fuses a multiply and an add). Blocks of 32 along a row; a row is one quantizer call.

quantize(kind, x) -> bytes of the blocks of x (rows, n) float32, n % 32 == 0, row-major, as ggml lays them out.
dequantize(kind, raw, rows, n) -> (rows, n) float32 values read back.
BLOCK_BYTES[kind]: bytes per 32 values.
"""
import numpy as np

F32 = np.float32
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "iq4_nl": 18, "f16": 64, "bf16": 64}
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def fp16_bits(v):
    """float32 array -> uint16 IEEE binary16 bits, round to nearest even (numpy's conversion is exact RNE)."""
    with np.errstate(over="ignore"):
        return np.asarray(v, dtype=np.float32).astype(np.float16).view(np.uint16)


def fp16_value(bits):
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32)


def bf16_bits(v):
    """float32 -> bfloat16: add 0x7FFF + bit 16 to the bits, keep the top 16 (NaN not handled: not tested)."""
    b = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def _blocks(x):
    x = np.asarray(x, dtype=np.float32)
    rows, n = x.shape
    assert n % 32 == 0
    return x.reshape(rows, n // 32, 32)


def _first_max_abs(b):
    """The first element of largest |x| per block (0 for an all-zero block)."""
    a = np.abs(b)
    i = np.argmax(a, axis=-1)
    m = np.take_along_axis(b, i[..., None], axis=-1)[..., 0]
    return np.where(np.max(a, axis=-1) == 0, F32(0), m).astype(np.float32)   # the scan starts from +0.0


def _safe_inv(d):
    """1/d in float32 where d != 0, else 0."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(np.float32)


def _nibbles(q):
    """(..., 32) codes 0..15 -> (..., 16) bytes: element j low nibble, element j + 16 high nibble."""
    q = q.astype(np.uint8)
    return (q[..., :16] & 0xF) | ((q[..., 16:] & 0xF) << 4)


def _qh(q):
    """(..., 32) 5-bit codes -> (..., 4) little-endian bytes of the u32 with bit j = bit 4 of element j."""
    bits = ((q.astype(np.uint32) >> 4) & 1) << np.arange(32, dtype=np.uint32)
    word = bits.sum(axis=-1, dtype=np.uint64).astype(np.uint32)
    return word[..., None].view(np.uint8).reshape(word.shape + (4,))


def _le16(v):
    return v.astype("<u2")[..., None].view(np.uint8).reshape(v.shape + (2,))


def _q8_0(b):
    amax = np.max(np.abs(b), axis=-1)
    d = (amax / F32(127)).astype(np.float32)
    idv = _safe_inv(d)
    y = (b * idv[..., None]).astype(np.float32).astype(np.float64)
    q = np.sign(y) * np.floor(np.abs(y) + 0.5)             # roundf: half away from zero (exact in double)
    return [_le16(fp16_bits(d)), q.astype(np.int64).astype(np.int8).view(np.uint8)]


def _qx_0(b, B):
    mx = _first_max_abs(b)
    d = (mx / F32(-B)).astype(np.float32)
    idv = _safe_inv(d)
    s = ((b * idv[..., None]).astype(np.float32) + F32(B + 0.5)).astype(np.float32)
    q = np.minimum(2 * B - 1, np.trunc(s).astype(np.int64))
    return d, q


def _qx_1(b, S):
    # the first smallest and first largest element (a scan from +-FLT_MAX replacing on strict comparisons)
    lo = np.take_along_axis(b, np.argmin(b, axis=-1)[..., None], axis=-1)[..., 0]
    hi = np.take_along_axis(b, np.argmax(b, axis=-1)[..., None], axis=-1)[..., 0]
    d = ((hi - lo) / F32(S)).astype(np.float32)
    idv = _safe_inv(d)
    s = (((b - lo[..., None]).astype(np.float32) * idv[..., None]).astype(np.float32) + F32(0.5)).astype(np.float32)
    q = np.trunc(s).astype(np.int64)
    return d, lo, q


def _iq4_nl(b):
    rows, nb, _ = b.shape
    ax = np.abs(b)
    i = np.argmax(ax, axis=-1)
    amax = np.take_along_axis(ax, i[..., None], axis=-1)[..., 0]
    mx = np.take_along_axis(b, i[..., None], axis=-1)[..., 0]
    zero = amax < F32(1e-15)
    d0 = (mx / F32(-127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        idv = (F32(1) / np.where(zero, F32(1), d0)).astype(np.float32)
        a = (idv[..., None] * b).astype(np.float32)
    hi = np.clip(np.searchsorted(KVALUES, a, side="right"), 1, 15)     # K[hi - 1] <= a < K[hi] inside the range
    lo = hi - 1
    klo, khi = KVALUES[lo], KVALUES[hi]
    pick_lo = (a - klo).astype(np.float32) < (khi - a).astype(np.float32)
    idx = np.where(pick_lo, lo, hi)
    idx = np.where(a <= KVALUES[0], 0, np.where(a >= KVALUES[15], 15, idx))
    q = KVALUES[idx]
    w = (b * b).astype(np.float32)
    sumqx = np.zeros((rows, nb), dtype=np.float32)
    sumq2 = np.zeros((rows, nb), dtype=np.float32)
    for j in range(32):
        wq = (w[..., j] * q[..., j]).astype(np.float32)
        sumqx = (sumqx + (wq * b[..., j]).astype(np.float32)).astype(np.float32)
        sumq2 = (sumq2 + (wq * q[..., j]).astype(np.float32)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(zero, F32(0), (sumqx / np.where(zero, F32(1), sumq2)).astype(np.float32)).astype(np.float32)
    # an all-zero block writes no indices: its nibbles stay those of the previous block of the row (first: 0)
    idx = idx.copy()
    for r in range(rows):
        prev = np.zeros(32, dtype=np.int64)
        for k in range(nb):
            if zero[r, k]:
                idx[r, k] = prev
            else:
                prev = idx[r, k]
    return d, idx


def quantize(kind, x):
    x = np.asarray(x, dtype=np.float32)
    if kind == "f16":
        return fp16_bits(x).astype("<u2").tobytes()
    if kind == "bf16":
        return bf16_bits(x).astype("<u2").tobytes()
    b = _blocks(x)
    if kind == "q8_0":
        parts = _q8_0(b)
    elif kind == "q4_0":
        d, q = _qx_0(b, 8)
        parts = [_le16(fp16_bits(d)), _nibbles(q)]
    elif kind == "q5_0":
        d, q = _qx_0(b, 16)
        parts = [_le16(fp16_bits(d)), _qh(q), _nibbles(q)]
    elif kind == "q4_1":
        d, lo, q = _qx_1(b, 15)
        parts = [_le16(fp16_bits(d)), _le16(fp16_bits(lo)), _nibbles(np.minimum(q, 15))]
    elif kind == "q5_1":
        d, lo, q = _qx_1(b, 31)
        parts = [_le16(fp16_bits(d)), _le16(fp16_bits(lo)), _qh(q), _nibbles(q)]
    elif kind == "iq4_nl":
        d, idx = _iq4_nl(b)
        parts = [_le16(fp16_bits(d)), _nibbles(idx)]
    else:
        raise ValueError("unknown ggml type %r" % kind)
    return np.concatenate([p.astype(np.uint8) for p in parts], axis=-1).tobytes()


def dequantize(kind, raw, rows, n):
    """The values ggml reads back, float32 (rows, n)."""
    a = np.frombuffer(raw, dtype=np.uint8)
    if kind == "f16":
        return fp16_value(a.view("<u2")).reshape(rows, n)
    if kind == "bf16":
        return (a.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(rows, n)
    bs = BLOCK_BYTES[kind]
    blk = a.reshape(rows, n // 32, bs)
    d = fp16_value(blk[..., 0:2].copy().view("<u2")[..., 0])[..., None]

    def nib(qs):
        return np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int64)

    def high(qh):
        word = qh.copy().view("<u4")[..., 0].astype(np.uint64)
        return ((word[..., None] >> np.arange(32, dtype=np.uint64)) & 1).astype(np.int64)

    if kind == "q8_0":
        v = blk[..., 2:].view(np.int8).astype(np.float32) * d
    elif kind == "q4_0":
        v = (nib(blk[..., 2:]) - 8).astype(np.float32) * d
    elif kind == "q4_1":
        m = fp16_value(blk[..., 2:4].copy().view("<u2")[..., 0])[..., None]
        v = (nib(blk[..., 4:]).astype(np.float32) * d).astype(np.float32) + m
    elif kind == "q5_0":
        v = (nib(blk[..., 6:]) + 16 * high(blk[..., 2:6]) - 16).astype(np.float32) * d
    elif kind == "q5_1":
        m = fp16_value(blk[..., 2:4].copy().view("<u2")[..., 0])[..., None]
        v = ((nib(blk[..., 8:]) + 16 * high(blk[..., 4:8])).astype(np.float32) * d).astype(np.float32) + m
    elif kind == "iq4_nl":
        v = d * KVALUES[nib(blk[..., 2:])]
    else:
        raise ValueError("unknown ggml type %r" % kind)
    return v.astype(np.float32).reshape(rows, n)


def roundtrip(kind, x):
    """x (rows, n) float64 -> the float64 values a ggml cache of this type reads back (input rounded to float32)."""
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    rows, n = x32.shape
    return dequantize(kind, quantize(kind, x32), rows, n).astype(np.float64)
