#!/usr/bin/python3
"""test_store.py: the stored formats of src/store/store.h against an independent numpy implementation.

Written from the published definitions (../shared/reference/ggml-formats.md, the OCP FP8 spec, the int
formats as README.md / store.h define them), not from kvc's C. The C side is driven through the helper
modes of build/tests/test_store (--decode-fp8, --encode, --quantize).

  * FP8 E4M3FN / E5M2: all 256 codes decoded from sign/exponent/mantissa; encoding by exhaustive nearest
    search over the code table (ties to the even mantissa, rounding before the overflow test, saturation),
    at every tie, one ulp either side of every tie, beyond the max, zeros, subnormals, inf, NaN.
  * f16 (numpy float16, round to nearest even from double) and bf16 (exact Fraction rounding).
  * ggml q8_0 / q4_0: codes and FP16 scales, float32 arithmetic one operation at a time; tie grids,
    first-largest ties, all-zero blocks, random blocks.
  * int8 / int4 / int2, per token and per channel, codes, packing and FP16 scales.
Prints PASS/FAIL lines; exits 1 on any failure.
"""
import bisect
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

HELPER = os.environ.get("STORE_HELPER", os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_store"))


def run(args, data=None):
    r = subprocess.run([HELPER] + args, input=data, capture_output=True, check=True)
    return r.stdout


# ---- FP8 from the spec -----------------------------------------------------------------------------------

def fp8_decode(code, ebits, mbits, bias, kind):
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    if kind == "e4m3" and e == 15 and m == 7:
        return float("nan")
    if kind == "e5m2" and e == 31:
        return s * float("inf") if m == 0 else float("nan")
    if e == 0:
        return s * m * 2.0 ** (1 - bias - mbits)
    return s * (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias)


SPECS = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15)}
TABLE = {k: [fp8_decode(c, *v, k) for c in range(256)] for k, v in SPECS.items()}


def _fp8_grid(kind):
    ebits, mbits, bias = SPECS[kind]
    pos = [(c, v) for c, v in enumerate(TABLE[kind][:128]) if np.isfinite(v)]
    maxc, maxv = pos[-1]
    # the next grid point above max: max + one quantum of the top binade (a value rounding there overflows)
    over = maxv + 2.0 ** (int(np.floor(np.log2(maxv))) - mbits)
    grid = pos + [(-1, over)]
    return grid, [v for _, v in grid], maxc, over


GRIDS = {k: _fp8_grid(k) for k in SPECS}


def fp8_encode(x, kind):
    """Nearest finite code of the spec's table: the two grid points around |x| compared exactly, ties to
    the even mantissa, rounding before the overflow test, overflow and inf saturate, NaN -> 0x7F."""
    if np.isnan(x):
        return 0x7F
    sign = 0x80 if np.signbit(x) else 0
    a = abs(x)
    grid, values, maxc, over = GRIDS[kind]
    if a == float("inf") or a > over:
        return sign | maxc
    i = bisect.bisect_left(values, a)
    fa = Fraction(a)
    best = None
    for c, v in grid[max(0, i - 1):i + 1]:
        dist = abs(fa - Fraction(v))
        even = ((c if c >= 0 else maxc + 1) & 1) == 0   # the overflow point's mantissa is (max code + 1)'s
        key = (dist, 0 if even else 1)
        if best is None or key < best[0]:
            best = (key, c)
    c = best[1]
    if c < 0:
        c = maxc                      # rounding overflowed: saturate (satfinite)
    return sign | c


def bf16_encode(x):
    """Round to nearest even with 8 significant bits, min normal 2^-126, gradual underflow; overflow -> inf."""
    if np.isnan(x):
        return (0x8000 if np.signbit(x) else 0) | 0x7FC0
    sign = 0x8000 if np.signbit(x) else 0
    a = Fraction(abs(x)) if np.isfinite(x) else None
    if a is None:
        return sign | 0x7F80
    if a == 0:
        return sign
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)
    q = Fraction(2) ** (e - 7)
    n = a / q
    r = int(n)                          # floor
    rem = n - r
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and r % 2 == 1):
        r += 1
    v = r * q
    if v > (2 - Fraction(1, 128)) * Fraction(2) ** 127:
        return sign | 0x7F80
    if v < Fraction(2) ** -126:
        return sign | int(v / Fraction(2) ** -133)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    m = int(v / Fraction(2) ** (e - 7)) - 128
    return sign | ((e + 127) << 7) | m


def test_fp8():
    out = run(["--decode-fp8"]).decode().split("\n")
    bad = []
    for line in out:
        if not line:
            continue
        c, a, b = line.split()
        c = int(c)
        for kind, got in (("e4m3", float.fromhex(a)), ("e5m2", float.fromhex(b))):
            want = TABLE[kind][c]
            if not ((np.isnan(want) and np.isnan(got)) or want == got and np.signbit(want) == np.signbit(got)):
                bad.append(f"{kind} code {c:#04x}: C {got!r} spec {want!r}")
    report("store-fp8-decode-256-codes", None if not bad and len(out) >= 256 else "; ".join(bad[:5]))

    # encoding: every tie between adjacent codes, one double ulp either side, codes themselves, beyond max
    vals = set([0.0, -0.0, float("inf"), float("-inf"), 1e-30, -1e-30, 1e30, 5e-324])
    for kind in SPECS:
        fin = sorted(set(v for v in TABLE[kind][:128] if np.isfinite(v)))
        ebits, mbits, bias = SPECS[kind]
        quantum = 2.0 ** (int(np.floor(np.log2(fin[-1]))) - mbits)
        fin_ext = fin + [fin[-1] + quantum, fin[-1] + 2 * quantum]
        for lo, hi in zip(fin_ext, fin_ext[1:]):
            mid = (lo + hi) / 2
            for v in (lo, mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf), hi):
                vals.add(float(v))
        # below the smallest subnormal: half of it ties to zero
        vals.add(fin[1] / 2)
        vals.add(float(np.nextafter(fin[1] / 2, 1)))
    rng = np.random.default_rng(5)
    # f16 and bf16 ties: midpoints of random adjacent codes (normal and subnormal), and one double ulp off
    h = np.concatenate([rng.integers(0, 0x7BFF, 500), np.arange(0, 40), [0x7BFE]]).astype(np.uint16)
    a, b = h.view(np.float16).astype(np.float64), (h + 1).view(np.float16).astype(np.float64)
    bb = rng.integers(0, 0x7F7F, 500).astype(np.uint32)
    c, d = (bb << 16).view(np.float32).astype(np.float64), ((bb + 1) << 16).view(np.float32).astype(np.float64)
    for lo, hi in list(zip(a, b)) + list(zip(c, d)) + [(65504.0, 65536.0)]:
        mid = (lo + hi) / 2
        vals.update((float(mid), float(np.nextafter(mid, 0)), float(np.nextafter(mid, np.inf))))
    vals.update(float(v) for v in rng.normal(size=400) * 100)
    vals.update(float(v) for v in rng.normal(size=400) * 0.01)
    vals = sorted(vals, key=lambda v: (abs(v), np.signbit(v)))
    vals = vals + [-v for v in vals if v != 0] + [float("nan")]
    text = "".join(float(v).hex() + "\n" for v in vals).encode()
    got = run(["--encode"], text).decode().split("\n")
    bad = {"e4m3": [], "e5m2": [], "f16": [], "bf16": []}
    for v, line in zip(vals, got):
        f16, bf16, e4, e5 = (int(t, 16) for t in line.split())
        if fp8_encode(v, "e4m3") != e4:
            bad["e4m3"].append(f"{v!r}: C {e4:#04x} spec {fp8_encode(v, 'e4m3'):#04x}")
        if fp8_encode(v, "e5m2") != e5:
            bad["e5m2"].append(f"{v!r}: C {e5:#04x} spec {fp8_encode(v, 'e5m2'):#04x}")
        if not np.isnan(v):
            with np.errstate(over="ignore"):
                want16 = int(np.array([v], dtype=np.float64).astype(np.float16).view(np.uint16)[0])
            if want16 != f16:
                bad["f16"].append(f"{v!r}: C {f16:#06x} numpy {want16:#06x}")
        if bf16_encode(v) != bf16:
            bad["bf16"].append(f"{v!r}: C {bf16:#06x} spec {bf16_encode(v):#06x}")
    n = len(vals)
    for kind in ("e4m3", "e5m2"):
        report(f"store-{kind}-encode-ties-{n}-values", None if not bad[kind] else "; ".join(bad[kind][:5]))
    report(f"store-f16-encode-{n}-values", None if not bad["f16"] else "; ".join(bad["f16"][:5]))
    report(f"store-bf16-encode-{n}-values", None if not bad["bf16"] else "; ".join(bad["bf16"][:5]))


# ---- ggml blocks from the published definition -----------------------------------------------------------

F32 = np.float32


def f16_bits(x):
    return int(np.array([x], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def q8_0_block(x):
    amax = F32(0)
    for v in x:
        a = F32(abs(v))
        if a > amax:
            amax = a
    d = F32(amax / F32(127))
    idv = F32(F32(1) / d) if d != 0 else F32(0)
    qs = []
    for v in x:
        y = float(F32(v * idv))                            # one float32 product
        q = int(np.floor(abs(y) + 0.5)) * (1 if y >= 0 else -1)   # roundf: half away from zero
        qs.append(q & 0xFF)
    return bytes([f16_bits(d) & 0xFF, f16_bits(d) >> 8] + qs)


def q4_0_block(x):
    amax, mx = F32(0), F32(0)
    for v in x:
        if amax < F32(abs(v)):
            amax, mx = F32(abs(v)), F32(v)
    d = F32(mx / F32(-8))
    idv = F32(F32(1) / d) if d != 0 else F32(0)
    q = []
    for v in x:
        s = F32(F32(v * idv) + F32(8.5))                   # product, then sum, each rounded to float32
        q.append(min(15, int(np.trunc(float(s)))))
    h = f16_bits(d)
    return bytes([h & 0xFF, h >> 8] + [q[j] | (q[j + 16] << 4) for j in range(16)])


def ggml_rows(rows, blockfn):
    return b"".join(blockfn(r[b:b + 32]) for r in rows for b in range(0, len(r), 32))


def ggml_cases():
    rng = np.random.default_rng(1)
    W = 64
    rows = []
    rows += list(rng.normal(size=(40, W)).astype(np.float32))
    rows += list((rng.normal(size=(10, W)) * 1e3).astype(np.float32))
    rows += list((rng.standard_cauchy(size=(10, W))).astype(np.float32))
    rows.append(np.zeros(W, np.float32))                                    # all-zero blocks
    # q8_0 tie grid: amax 127 -> d = 1, id = 1, x*id = k + 0.5 exactly
    t = np.concatenate([[127.0], np.arange(-63, 0) + 0.5]).astype(np.float32)
    rows.append(np.resize(t, W).astype(np.float32))
    rows.append(np.resize(-t, W).astype(np.float32))
    # q4_0 grid: max -8 -> d = 1, id = 1; x + 8.5 lands on integers (trunc boundaries) and halves
    g = np.concatenate([[-8.0], np.arange(-8, 8, 0.5)[:31]]).astype(np.float32)
    rows.append(np.resize(g, W).astype(np.float32))
    rows.append(np.resize(-g, W).astype(np.float32))
    # first-largest ties: +m and -m with equal |x|
    r = rng.normal(size=W).astype(np.float32)
    r[3], r[9], r[35], r[40] = 5, -5, -5, 5
    rows.append(r)
    # tiny values (FP16-subnormal scales; float32-subnormal d is undefined in ggml, not tested)
    rows.append((rng.normal(size=W) * 1e-6).astype(np.float32))
    return np.array(rows, dtype=np.float32)


def test_ggml():
    x = ggml_cases()
    T, W = x.shape
    for name, fn in (("q8_0", q8_0_block), ("q4_0", q4_0_block)):
        got = run(["--quantize", name, str(T), str(W)], x.astype("<f4").tobytes())
        want = ggml_rows(x, fn)
        bs = 34 if name == "q8_0" else 18
        bad = [i for i in range(0, len(want), bs) if got[i:i + bs] != want[i:i + bs]]
        why = f"{len(bad)} of {len(want) // bs} blocks differ; first at block {bad[0] // bs}" if bad else ""
        if len(got) != len(want):
            why = f"C wrote {len(got)} bytes, definition {len(want)}"
        report(f"store-{name}-codes-and-scales-{len(want) // bs}-blocks", None if got == want else why)


# ---- int8 / int4 / int2 --------------------------------------------------------------------------------

def int_pack(x, bits, axis):
    qmax = 2 ** (bits - 1) - 1
    x = x.astype(np.float64)
    T, W = x.shape
    amax = np.abs(x).max(axis=1 if axis == "token" else 0)
    scale16 = np.array(amax / qmax, dtype=np.float64).astype(np.float16)
    scale16[np.isinf(scale16)] = np.float16(65504)
    scale = scale16.astype(np.float64)
    sc = scale[:, None] if axis == "token" else scale[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(sc == 0, 0, np.clip(np.rint(x / sc), -qmax, qmax)).astype(np.int64)
    rowbytes = (W * bits + 7) // 8
    out = bytearray(T * rowbytes)
    per = 8 // bits
    for t in range(T):
        for j in range(W):
            n = int(q[t, j]) + (0 if bits == 8 else 2 ** (bits - 1))
            out[t * rowbytes + j // per] |= (n & (2 ** bits - 1)) << (bits * (j % per))
    return bytes(out) + scale16.view(np.uint16).astype("<u2").tobytes()


def test_int():
    rng = np.random.default_rng(2)
    for T, W in ((7, 64), (5, 37), (3, 6)):
        x = rng.normal(size=(T, W)).astype(np.float32)
        x[1] = 0                                        # an all-zero token
        x[:, 2] = 0                                     # an all-zero channel
        x[2, 3] = 7.0                                   # an outlier
        for bits in (8, 4, 2):
            for axis in ("token", "channel"):
                name = f"int{bits}" + ("ch" if axis == "channel" else "")
                got = run(["--quantize", name, str(T), str(W)], x.astype("<f4").tobytes())
                want = int_pack(x, bits, axis)
                report(f"store-{name}-T{T}-W{W}-codes-scales",
                       None if got == want else f"C {got[:16].hex()}... definition {want[:16].hex()}...")


if __name__ == "__main__":
    if not os.path.exists(HELPER):
        report("store-helper", f"{HELPER} not built (run make)")
        sys.exit(checks.status())
    test_fp8()
    test_ggml()
    test_int()
    sys.exit(checks.status())
