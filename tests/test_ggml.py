#!/usr/bin/python3
"""test_ggml.py: kvc's ggml block formats (src/store/store.c) bit for bit against tests/ggml_ref.py, an independent
numpy implementation of the published block definitions (../shared/reference/ggml-formats.md).

For q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, f16 and bf16: the stored bytes (codes and FP16 scales / mins, qh
bits) and the float32 values read back, on random rows and on edge inputs: all-zero blocks (first in a row and
after a non-zero block: iq4_nl repeats the previous nibbles), rounding ties of every quantizer, the largest
magnitude negative vs positive and equal in both signs (the first wins), tiny blocks near iq4_nl's 1e-15
threshold, FP16-subnormal scales, large values. The C side is build/tests/test_quant --quantize.
Prints PASS/FAIL lines; exits 1 on any failure.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402  (tests/checks.py: PASS/FAIL lines)
import ggml_ref  # noqa: E402
from checks import report  # noqa: E402

HELPER = os.environ.get("QUANT_HELPER", os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_quant"))
TYPES = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "f16", "bf16")


def block_rows():
    """Rows of 64 (two blocks) float32 exercising every rule of the definitions."""
    rng = np.random.default_rng(44)
    W = 64
    rows = []
    rows += list(rng.normal(size=(60, W)))
    rows += list(rng.normal(size=(10, W)) * 1e3)
    rows += list(rng.standard_cauchy(size=(10, W)))
    rows += list(rng.normal(size=(10, W)) + 5.0)                       # all positive: min far from 0
    rows += list(rng.uniform(-1, 1, size=(10, W)) * rng.choice([1e-3, 1e2], size=(10, 1)))
    z = np.zeros(W)
    rows.append(z)                                                       # two all-zero blocks
    r = rng.normal(size=W)
    r[32:] = 0
    rows.append(r)                                                       # zero block after a non-zero one
    r = rng.normal(size=W)
    r[:32] = 0
    rows.append(r)                                                       # zero block first
    # q8_0 ties: amax 127 -> d 1, x = k + 0.5
    t = np.concatenate([[127.0], np.arange(-63, 0) + 0.5])
    rows += [np.resize(t, W), np.resize(-t, W)]
    # q4_0 / q5_0 grids: max -B -> d 1, x + B + 0.5 hits integers and halves
    for B in (8, 16):
        g = np.concatenate([[-float(B)], np.arange(-B, B, B / 16.0)[:31]])
        rows += [np.resize(g, W), np.resize(-g, W)]
    # q4_1 / q5_1 grids: min 0, max S -> d 1; x = k + 0.5 and k exactly
    for S in (15, 31):
        g = np.concatenate([[0.0, float(S)], np.arange(0, S, 0.5)[:30]])
        rows += [np.resize(g, W), np.resize(g - 7.25, W)]
    # iq4_nl: M = -127 -> d0 = 1, id = 1, a = x: the midpoints between code book entries (ties go up) and the
    # entries themselves, and the same mirrored (M = +127 -> d0 = -1)
    K = ggml_ref.KVALUES.astype(np.float64)
    mids = (K[:-1] + K[1:]) / 2
    g = np.concatenate([[-127.0], mids, K[1:], [-130.0, 120.0]])[:32]
    rows += [np.resize(g, W), np.resize(-g, W)]
    # the largest |x| in both signs: the first one wins (q4_0, q5_0, iq4_nl)
    for first in (1.0, -1.0):
        r = rng.normal(size=W)
        r[5], r[9], r[40], r[33] = 7 * first, -7 * first, -7 * first, 7 * first
        rows.append(r)
    # largest magnitude negative vs positive
    r = rng.normal(size=W)
    r[3], r[35] = -9.0, 9.0
    rows.append(r)
    # iq4_nl's threshold: a block of |x| < 1e-15 is all-zero, one of 2e-15 is not; FP16-subnormal scales
    rows.append(np.concatenate([rng.normal(size=32) * 1e-16, rng.normal(size=32) * 2e-15]))
    rows.append(rng.normal(size=W) * 1e-6)
    rows.append(rng.normal(size=W) * 3e-5)
    return np.array(rows, dtype=np.float32)


def run_c(kind, x):
    T, W = x.shape
    r = subprocess.run([HELPER, "--quantize", kind, str(T), str(W)], input=x.astype("<f4").tobytes(),
                       capture_output=True, check=True)
    nb = T * W // 32 * ggml_ref.BLOCK_BYTES[kind]
    return r.stdout[:nb], np.frombuffer(r.stdout[nb:], dtype="<f4").reshape(T, W)


def first_diff(a, b, bs):
    for i in range(0, min(len(a), len(b)), bs):
        if a[i:i + bs] != b[i:i + bs]:
            return i // bs, a[i:i + bs].hex(), b[i:i + bs].hex()
    return None


def main():
    if not os.path.exists(HELPER):
        report("ggml-helper", f"{HELPER} not built (run make)")
        return checks.status()
    x = block_rows()
    T, W = x.shape
    for kind in TYPES:
        got, vals = run_c(kind, x)
        want = ggml_ref.quantize(kind, x)
        bs = ggml_ref.BLOCK_BYTES[kind] if kind not in ("f16", "bf16") else 2
        d = first_diff(got, want, bs)
        why = "" if d is None else "block %d: kvc %s, definition %s" % d
        if len(got) != len(want):
            why = f"kvc wrote {len(got)} bytes, definition {len(want)}"
        report(f"ggml-{kind}-bytes-{T}x{W}", None if got == want else why)
        back = ggml_ref.dequantize(kind, want, T, W)
        same = np.array_equal(vals.view(np.uint32), back.view(np.uint32))
        bad = np.argwhere(vals.view(np.uint32) != back.view(np.uint32))
        report(f"ggml-{kind}-read-back", None if same else f"first at {bad[0]}: {vals[tuple(bad[0])]!r} "
                                                            f"vs {back[tuple(bad[0])]!r}")
    # the iq4_nl rule for all-zero blocks, directly: d = 0 and the previous block's nibbles (first: 0)
    raw = ggml_ref.quantize("iq4_nl", x)
    blk = np.frombuffer(raw, dtype=np.uint8).reshape(T, 2, 18)
    zi = [i for i in range(T) if not np.any(x[i, 32:])]
    ok = all(blk[i, 1, 0] == 0 and blk[i, 1, 1] == 0 and (blk[i, 1, 2:] == blk[i, 0, 2:]).all() for i in zi)
    report("ggml-iq4_nl-zero-block-repeats-nibbles", None if ok and len(zi) >= 2 else f"rows {zi}")
    # q4_0 all-zero block stores d = -0.0 (0x8000), q4_1 d = 0 and m = 0
    zrow = [i for i in range(T) if not np.any(x[i])][0]
    q4 = np.frombuffer(ggml_ref.quantize("q4_0", x[zrow:zrow + 1]), dtype=np.uint8)
    report("ggml-q4_0-zero-block-negative-zero-scale",
           None if q4[0] == 0x00 and q4[1] == 0x80 else q4[:2].tobytes().hex())
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
