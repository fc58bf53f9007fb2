#!/usr/bin/python3
"""test_quant.py: the quantizers element by element against the independent numpy implementation
(tests/oracle_quant.py, written from README.md), through build/tests/test_quant's helper modes.

  * intN stored form (--intn): the bit stream of codes and the FP16/FP32 scales and mins, packed here from the
    definition (element (t, j) at bit (t * W + j) * b, LSB first), for every bit width, both kinds, both axes,
    groups that divide and do not divide, and the values read back.
  * methods (--apply): every element of K' and V' and the bytes, bit for bit, for quantize (every option),
    kivi, cast and ggml, with rotate "hadamard" and outliers.
  * cast FP8 / FP16 / BF16 with scale "none" on data made of every code value, every tie between adjacent
    codes, one double ulp either side of each tie, values beyond the largest (saturation) and zeros.
Prints PASS/FAIL lines; exits 1 on any failure.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402  (tests/checks.py: PASS/FAIL lines)
import oracle_quant as oq  # noqa: E402
from checks import report  # noqa: E402

HELPER = os.environ.get("QUANT_HELPER", os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_quant"))
SEED = 7          # the helper's seed for rotate "hadamard"


# ---------------------------------------------------------------- intN packing

def pack_intn(x, bits, asym, axis, group, scale):
    """codes bit stream + params, from the definition in README.md / store.h."""
    T, W = x.shape
    ext = W if axis == "token" else T
    g = ext if group == 0 or group > ext else group
    L = 2 ** bits - 1 if asym else 2 ** (bits - 1) - 1
    sd = "fp16_exact" if scale == "f16" else "fp32"
    codes = np.zeros((T, W), dtype=np.int64)
    scales, mins = [], []
    for c in range(0, ext, g):
        blk = x[:, c:c + g] if axis == "token" else x[c:c + g, :]
        ax = 1 if axis == "token" else 0
        if asym:
            s, m = (blk.max(axis=ax) - blk.min(axis=ax)) / L, blk.min(axis=ax)
        else:
            s, m = np.abs(blk).max(axis=ax) / L, np.zeros(blk.shape[1 - ax])
        s = oq.round_fp16(s) if sd == "fp16_exact" else oq.round_fp32(s)
        m = oq.round_fp16(m) if sd == "fp16_exact" else oq.round_fp32(m)
        sk = s[:, None] if axis == "token" else s[None, :]
        mk = m[:, None] if axis == "token" else m[None, :]
        safe = np.where(sk == 0, 1.0, sk)
        if asym:
            q = np.where(sk == 0, 0, np.clip(np.rint((blk - mk) / safe), 0, L))
        else:
            q = np.where(sk == 0, 0, np.clip(np.rint(blk / safe), -L, L)) + 2 ** (bits - 1)
        if axis == "token":
            codes[:, c:c + g] = q
        else:
            codes[c:c + g, :] = q
        scales.append(s)
        mins.append(m)
    # group order: axis token (t, column group); axis channel (token group, column)
    if axis == "token":
        S = np.stack(scales, axis=1).ravel()
        M = np.stack(mins, axis=1).ravel()
    else:
        S = np.concatenate(scales)
        M = np.concatenate(mins)
    nbits = T * W * bits
    stream = np.zeros(nbits, dtype=np.uint8)
    for k in range(bits):
        stream[np.arange(T * W) * bits + k] = (codes.ravel() >> k) & 1
    raw = np.packbits(np.concatenate([stream, np.zeros(-nbits % 8, dtype=np.uint8)]), bitorder="little").tobytes()
    dt = "<f2" if scale == "f16" else "<f4"
    params = S.astype(dt).tobytes() + (M.astype(dt).tobytes() if asym else b"")
    return raw, params


def test_intn():
    rng = np.random.default_rng(31)
    bad = []
    n = 0
    for T, W in ((7, 16), (33, 5)):
        x = rng.normal(size=(T, W)) * rng.choice([1, 20], size=(T, W))
        x[1] = 0.0
        x[:, 2] = 1.25
        for bits in range(1, 9):
            for asym in (0, 1):
                if bits == 1 and not asym:
                    continue
                for axis in ("token", "channel"):
                    for group, scale in ((0, "f16"), (3, "f32"), (4, "f16"), (100, "f32")):
                        if True:
                            n += 1
                            args = [HELPER, "--intn", str(bits), str(asym), axis, str(group), scale, str(T), str(W)]
                            out = subprocess.run(args, input=x.astype("<f8").tobytes(), capture_output=True,
                                                 check=True).stdout
                            raw, params = pack_intn(x, bits, asym, axis, group, scale)
                            vals, _ = oq.intn(x, bits, bool(asym), axis, group,
                                              "fp16_exact" if scale == "f16" else "fp32")
                            got_v = np.frombuffer(out[len(raw) + len(params):], dtype="<f8").reshape(T, W)
                            if out[:len(raw)] != raw or out[len(raw):len(raw) + len(params)] != params or \
                                    not np.array_equal(got_v, vals):
                                bad.append(f"T{T} W{W} bits{bits} asym{asym} {axis} g{group} {scale}")
    report(f"intn-codes-params-values-{n}-formats", None if not bad else "; ".join(bad[:4]))


# ---------------------------------------------------------------- methods, element by element

def apply_c(method, K, V, params):
    T, D = K.shape
    args = [HELPER, "--apply", method, str(T), str(D), "1" if V is not None else "0"]
    args += ["%s=%s" % (k, ("true" if v else "false") if isinstance(v, bool) else v) for k, v in params.items()]
    data = K.astype("<f8").tobytes() + (V.astype("<f8").tobytes() if V is not None else b"")
    r = subprocess.run(args, input=data, capture_output=True)
    if r.returncode:
        raise RuntimeError(r.stderr.decode().strip())
    nb = int.from_bytes(r.stdout[:8], "little")
    arr = np.frombuffer(r.stdout[8:], dtype="<f8")
    Kc = arr[:T * D].reshape(T, D)
    Vc = arr[T * D:].reshape(T, D) if V is not None else None
    return Kc, Vc, nb


def compare(name, method, K, V, params):
    try:
        Kc, Vc, nb = apply_c(method, K, V, params)
    except RuntimeError as e:
        return f"{name}: kvc failed: {e}"
    Ko, Vo, _, nbo = oq.compress(method, params, K, V, SEED)
    Ko = K if Ko is None else Ko
    Vo = V if Vo is None else Vo
    if nb != nbo:
        return f"{name}: bytes kvc {nb} oracle {nbo}"
    for what, a, b in (("K", Kc, Ko), ("V", Vc, Vo)):
        if a is None:
            continue
        if not np.array_equal(a, b):
            i = np.argwhere(a != b)[0]
            return f"{name}: {what}{tuple(i)} kvc {a[tuple(i)]!r} oracle {b[tuple(i)]!r}"
    return None


def test_methods():
    rng = np.random.default_rng(32)
    T, D = 45, 32
    K = rng.normal(size=(T, D)) * 0.7
    K[:, 3] += 12.0                               # an outlier channel
    K[5] = 0.0                                    # an all-zero token
    V = rng.normal(size=(T, D))
    cases = []
    k = 0
    for bits in (2, 3, 4, 8):
        for axis in ("token", "channel"):
            for sym in (True, False):
                for group in (0, 8, 7):
                    sd = ("fp16", "fp16_exact", "fp32")[k % 3]
                    k += 1
                    cases.append(("quantize", dict(bits=bits, axis=axis, symmetric=sym, group_size=group,
                                                   scale_dtype=sd)))
    for rot in ("none", "hadamard"):
        for out in (0, 0.01, 0.3):
            cases.append(("quantize", dict(bits=4, rotate=rot, outliers=out, apply_to="kv")))
            cases.append(("kivi", dict(k_bits=2, v_bits=4, group_size=8, residual=13, rotate=rot, outliers=out)))
            cases.append(("cast", dict(format="fp8_e4m3", scale="token", rotate=rot, outliers=out)))
            cases.append(("ggml", dict(type="iq4_nl", rotate=rot, outliers=out)))
    for kb in (2, 4, 8):
        for R in (0, 10, 45, 100):
            for g in (1, 16, 32, 64):
                sd = ("fp16", "fp16_exact", "fp32")[k % 3]
                k += 1
                cases.append(("kivi", dict(k_bits=kb, v_bits={2: 4, 4: 8, 8: 2}[kb], group_size=g, residual=R,
                                           scale_dtype=sd)))
    for fmt in ("f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8"):
        for sc in ("none", "head", "token", "tensor"):
            for to in ("k", "v", "kv"):
                cases.append(("cast", dict(format=fmt, scale=sc, apply_to=to)))
    for ty in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "f16", "bf16"):
        for to in ("k", "kv"):
            cases.append(("ggml", dict(type=ty, apply_to=to)))
    bad = []
    for i, (m, p) in enumerate(cases):
        why = compare(f"{m} {p}", m, K, V, p)
        if why:
            bad.append(why)
    report(f"methods-bit-exact-{len(cases)}-cases", None if not bad else "; ".join(bad[:3]))
    # keys only
    bad = [w for w in (compare("kivi keys only", "kivi", K, None, dict(residual=5)),
                       compare("quantize keys only", "quantize", K, None, dict(apply_to="k", bits=5)))
           if w]
    report("methods-keys-only", None if not bad else "; ".join(bad))


def tie_values(kind):
    """Every positive finite code value, every midpoint between adjacent ones (and to the next value past the
    largest), one double ulp either side of each midpoint, values far beyond; with both signs and zeros."""
    if kind in oq.FP8:
        grid = list(oq.FP8[kind])
    elif kind == "f16":
        grid = list(np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64))
    else:
        b = np.concatenate([np.arange(0, 0x0200), np.arange(0x3F00, 0x4100), np.arange(0x7E00, 0x7F80)])
        grid = list((b.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    top = grid[-1]
    step = top - grid[-2] if kind in oq.FP8 or kind == "f16" else 2.0 ** (127 - 7)
    ext = grid + [top + step, top + 2 * step]
    vals = list(grid)
    for lo, hi in zip(ext, ext[1:]):
        mid = (lo + hi) / 2
        vals += [mid, float(np.nextafter(mid, 0)), float(np.nextafter(mid, np.inf))]
    vals += [top * 4, 1e300 if kind != "bf16" else 1e300]
    v = np.array(vals)
    v = np.concatenate([v, -v])
    n = -(-len(v) // 32) * 32
    v = np.concatenate([v, np.zeros(n - len(v))])
    return v.reshape(-1, 32)


def test_cast_ties():
    for fmt in ("fp8_e4m3", "fp8_e5m2", "f16", "bf16"):
        X = tie_values(fmt)
        if fmt == "f16":
            X = X[np.all(np.abs(X) < 65520, axis=1)]   # f16 overflows to infinity, which attention can't take
        why = compare(f"cast {fmt}", "cast", X, None, dict(format=fmt, scale="none", apply_to="k"))
        report(f"cast-{fmt}-every-code-and-tie-{X.size}-values", why)
    # the oracle's FP8 table itself: 256 codes decoded from sign/exponent/mantissa, 127 finite positive each
    report("cast-fp8-code-table",
           None if len(oq.FP8["fp8_e4m3"]) == 127 and oq.FP8["fp8_e4m3"][-1] == 448.0 and
           len(oq.FP8["fp8_e5m2"]) == 124 and oq.FP8["fp8_e5m2"][-1] == 57344.0
           else "e4m3: 127 finite positive codes up to 448; e5m2: 124 up to 57344")


def test_hadamard_oracle():
    """The oracle's butterfly is x @ H (Sylvester) and R = diag(s) H / sqrt(D) is orthonormal."""
    ok = True
    for D in (1, 2, 8, 64):
        H = oq.sylvester(D)
        ok = ok and np.array_equal(oq.wht(np.eye(D)), H)
        s = oq.hadamard_signs(SEED, D)
        R = (s[:, None] * H) / np.sqrt(D)
        ok = ok and np.allclose(R @ R.T, np.eye(D), atol=1e-15)
    report("hadamard-oracle-is-sylvester-orthonormal", None if ok else "wht(I) != H or R R^T != I")


if __name__ == "__main__":
    if not os.path.exists(HELPER):
        report("quant-helper", f"{HELPER} not built (run make)")
        sys.exit(checks.status())
    test_intn()
    test_methods()
    test_cast_ties()
    test_hadamard_oracle()
    sys.exit(checks.status())
