#!/usr/bin/python3
"""Independent numpy oracle of kvc's quantizers: quantize, kivi, cast, ggml, with rotate "hadamard" and outliers.

Written from README.md ("Methods", "Quantizers", "How bytes are counted") and ../shared/reference/ggml-formats.md
(through tests/ggml_ref.py); shares no code with kvc. tests/oracle.py calls compress() for these methods.

compress(method, p, K, V, seed, layer_K=None, layer_V=None, head=0) -> (K' or None, V' or None, None, bytes)
for one (layer, KV head); layer_K / layer_V (H, T, D) are the layer's heads (cast's per-layer scale), head is
this head's index among them.
"""
import math

import numpy as np

import ggml_ref

METHODS = ("quantize", "kivi", "cast", "ggml")
HADAMARD_WORD = 0x48414441
FLT_MAX = float(np.finfo(np.float32).max)


class ConfigError(ValueError):
    pass


def _int(p, name, default):
    v = p.get(name, default)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError("parameter %r must be an integer, got %r" % (name, v))
    return v


def _choice(p, name, default, choices):
    v = p.get(name, default)
    if v not in choices:
        raise ConfigError("parameter %r must be one of %s, got %r" % (name, choices, v))
    return v


def _num(p, name, default, lo, hi):
    v = p.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ConfigError("parameter %r must be a number in %g..%g, got %r" % (name, lo, hi, v))
    return float(v)


def _apply_to(p, has_v):
    a = _choice(p, "apply_to", "kv", ("k", "v", "kv"))
    if "v" in a and not has_v:
        raise ConfigError("apply_to %r needs values" % a)
    return a


# ---------------------------------------------------------------- rotation: R = diag(s) H / sqrt(D)

def hadamard_signs(seed, D):
    u = np.random.default_rng([seed, HADAMARD_WORD]).random(D)
    return np.where(u < 0.5, -1.0, 1.0)


def wht(x):
    """x @ H (Sylvester) on the last axis by the butterfly h = 1, 2, 4, ...: (a, b) -> (a + b, a - b)."""
    x = np.array(x, dtype=np.float64)
    D = x.shape[-1]
    h = 1
    while h < D:
        y = x.reshape(x.shape[:-1] + (D // (2 * h), 2, h))
        a, b = y[..., 0, :].copy(), y[..., 1, :].copy()
        y[..., 0, :] = a + b
        y[..., 1, :] = a - b
        x = y.reshape(x.shape)
        h *= 2
    return x


def sylvester(D):
    H = np.array([[1.0]])
    while H.shape[0] < D:
        H = np.block([[H, H], [H, -H]])
    return H


class Prep:
    """A tensor (T, D) rotated, with its outliers (among the first `rows` rows) taken out in FP16."""

    def __init__(self, x, rows, rotate, p, seed):
        T, D = x.shape
        self.s = None
        x = np.array(x, dtype=np.float64)
        if rotate == "hadamard":
            if D & (D - 1):
                raise ConfigError("rotate hadamard needs a power-of-two head dim")
            self.s = hadamard_signs(seed, D)
            x = wht(x * self.s) / np.sqrt(D)
        n = rows * D
        k = int(math.floor(p * n)) if p > 0 else 0
        flat = x.reshape(-1)
        idx = np.sort(np.argsort(-np.abs(flat[:n]), kind="stable")[:k])
        self.idx = idx
        self.val = flat[idx].astype(np.float16).astype(np.float64)
        flat[idx] = 0.0
        self.x = x
        self.nbytes = 6 * k

    def finish(self, y):
        y = np.array(y, dtype=np.float64)
        y.reshape(-1)[self.idx] = self.val
        if self.s is not None:
            y = wht(y) / np.sqrt(y.shape[1]) * self.s
        return y


# ---------------------------------------------------------------- parameter rounding

def round_fp16(v):
    with np.errstate(over="ignore"):
        h = np.asarray(v, dtype=np.float64).astype(np.float16).astype(np.float64)
    return np.where(np.isinf(h), np.sign(h) * 65504.0, h)


def round_fp32(v):
    v = np.asarray(v, dtype=np.float64)
    v = np.clip(v, -FLT_MAX, FLT_MAX)
    return v.astype(np.float32).astype(np.float64)


# ---------------------------------------------------------------- grouped integer codes

def intn(x, bits, asym, axis, group, sdtype):
    """x (T, W) -> (values read back, bytes). Groups: axis token, `group` consecutive columns of a row; axis
    channel, `group` consecutive rows of a column (0: all); the last group may be shorter."""
    T, W = x.shape
    ext = W if axis == "token" else T
    g = ext if group == 0 or group > ext else group
    out = np.empty_like(x)
    L = 2 ** bits - 1 if asym else 2 ** (bits - 1) - 1
    ngroups = 0
    for c in range(0, ext, g):
        blk = x[:, c:c + g] if axis == "token" else x[c:c + g, :]
        ax = 1 if axis == "token" else 0
        if asym:
            lo, hi = blk.min(axis=ax, keepdims=True), blk.max(axis=ax, keepdims=True)
            scale, m = (hi - lo) / L, lo
        else:
            scale, m = np.abs(blk).max(axis=ax, keepdims=True) / L, np.zeros(1)
        ngroups += scale.size
        if sdtype == "fp16_exact":
            scale, m = round_fp16(scale), round_fp16(m)
        elif sdtype == "fp32":
            scale, m = round_fp32(scale), round_fp32(m)
        safe = np.where(scale == 0, 1.0, scale)
        if asym:
            q = np.where(scale == 0, 0.0, np.clip(np.rint((blk - m) / safe), 0, L))
            v = q * scale + m
        else:
            q = np.where(scale == 0, 0.0, np.clip(np.rint(blk / safe), -L, L))
            v = q * scale
        if axis == "token":
            out[:, c:c + g] = v
        else:
            out[c:c + g, :] = v
    nbytes = -(-(T * W * bits) // 8) + ngroups * (2 if asym else 1) * (4 if sdtype == "fp32" else 2)
    return out, nbytes


# ---------------------------------------------------------------- float formats

def _fp8_grid(ebits, mbits, bias, kind):
    vals = []
    for c in range(128):
        e, m = c >> mbits, c & ((1 << mbits) - 1)
        if kind == "e4m3" and e == 15 and m == 7 or kind == "e5m2" and e == 31:
            break
        vals.append(m * 2.0 ** (1 - bias - mbits) if e == 0 else (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias))
    return np.array(vals)


FP8 = {"fp8_e4m3": _fp8_grid(4, 3, 7, "e4m3"), "fp8_e5m2": _fp8_grid(5, 2, 15, "e5m2")}
FORMAT_MAX = {"f16": 65504.0, "bf16": float.fromhex("0x1.FEp127"), "fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
FORMAT_BYTES = {"f16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


def fp8_round(y, kind):
    """Nearest value of the positive code table (codes 0..max), ties to the even code, |y| above the largest
    value saturates; the sign is kept."""
    grid = FP8[kind]
    a = np.abs(y)
    i = np.clip(np.searchsorted(grid, a), 1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    dlo, dhi = a - lo, hi - a
    pick = np.where(dlo < dhi, i - 1, np.where(dhi < dlo, i, np.where((i - 1) % 2 == 0, i - 1, i)))
    v = grid[pick]
    v = np.where(a >= grid[-1], grid[-1], v)
    return np.copysign(v, y)


def bf16_round(y):
    """Round to 8 significant bits, nearest even, smallest normal exponent -126 (gradual underflow), overflow
    to infinity."""
    a = np.abs(y)
    _, e = np.frexp(a)
    ex = np.maximum(e - 1, -126)
    q = np.ldexp(1.0, ex - 7)
    v = np.rint(a / q) * q
    v = np.where(v > FORMAT_MAX["bf16"], np.inf, v)
    return np.copysign(v, y)


def float_round(y, fmt):
    if fmt == "f16":
        with np.errstate(over="ignore"):
            return y.astype(np.float16).astype(np.float64)
    if fmt == "bf16":
        return bf16_round(y)
    return fp8_round(y, fmt)


def f32_scale(amax, fmt):
    s = amax / FORMAT_MAX[fmt]
    return FLT_MAX if s > FLT_MAX else float(np.float32(s))


def cast_dense(x, fmt, mode, s_tensor, head, nheads):
    T, D = x.shape
    if mode == "none":
        s = np.ones((T, 1))
    elif mode == "tensor":
        s = np.full((T, 1), s_tensor)
    elif mode == "head":
        s = np.full((T, 1), f32_scale(float(np.abs(x).max()), fmt))
    else:
        s = np.array([[f32_scale(float(np.abs(r).max()), fmt)] for r in x]).reshape(T, 1)
    safe = np.where(s == 0, 1.0, s)
    y = np.where(s == 0, 0.0, x / safe)
    v = float_round(y, fmt) * s
    sb = {"none": 0, "tensor": 4 // nheads + (head < 4 % nheads), "head": 4, "token": 4 * T}[mode]
    return v, T * D * FORMAT_BYTES[fmt] + sb


# ---------------------------------------------------------------- methods

def compress(method, p, K, V, seed, layer_K=None, layer_V=None, head=0):
    T, D = K.shape
    has_v = V is not None
    rotate = _choice(p, "rotate", "none", ("none", "hadamard"))
    frac = _num(p, "outliers", 0.0, 0.0, 0.5)
    fp16 = 2 * T * D
    if method == "quantize":
        bits = _int(p, "bits", 8)
        if not 2 <= bits <= 8:
            raise ConfigError("bits must be 2..8")
        axis = _choice(p, "axis", "token", ("token", "channel"))
        to = _apply_to(p, has_v)
        sym = p.get("symmetric", True)
        if not isinstance(sym, bool):
            raise ConfigError("symmetric must be true or false")
        group = _int(p, "group_size", 0)
        sd = _choice(p, "scale_dtype", "fp16", ("fp16", "fp16_exact", "fp32"))

        def one(x):
            pr = Prep(x, T, rotate, frac, seed)
            v, nb = intn(pr.x, bits, not sym, axis, group, sd)
            return pr.finish(v), nb + pr.nbytes
        return _per_tensor(one, to, K, V, fp16)
    if method == "kivi":
        kb, vb = _int(p, "k_bits", 2), _int(p, "v_bits", 2)
        if kb not in (2, 4, 8) or vb not in (2, 4, 8):
            raise ConfigError("k_bits and v_bits must be 2, 4 or 8")
        group = _int(p, "group_size", 32)
        if group < 1:
            raise ConfigError("group_size must be >= 1")
        R = _int(p, "residual", 128)
        sd = _choice(p, "scale_dtype", "fp16_exact", ("fp16", "fp16_exact", "fp32"))
        Tq = max(T - R, 0)

        def one(x, bits, axis):
            pr = Prep(x, Tq, rotate, frac, seed)
            v = np.empty_like(pr.x)
            nb = pr.nbytes
            if Tq:
                v[:Tq], b = intn(pr.x[:Tq], bits, True, axis, group, sd)
                nb += b
            v[Tq:] = pr.x[Tq:].astype(np.float16).astype(np.float64)
            nb += 2 * (T - Tq) * D
            return pr.finish(v), nb
        Kp, nb = one(K, kb, "channel")
        Vp = None
        if has_v:
            Vp, b = one(V, vb, "token")
            nb += b
        return Kp, Vp, None, nb
    if method == "cast":
        fmt = _choice(p, "format", "fp8_e4m3", tuple(FORMAT_MAX) + ("fp8",))
        fmt = "fp8_e4m3" if fmt == "fp8" else fmt
        mode = _choice(p, "scale", "none", ("none", "tensor", "head", "token"))
        to = _apply_to(p, has_v)
        out, nb = [None, None], 0
        for v, (x, layer) in enumerate(((K, layer_K), (V, layer_V))):
            if x is None:
                continue
            if ("v" if v else "k") not in to:
                nb += fp16
                continue
            pr = Prep(x, T, rotate, frac, seed)
            s_tensor = 0.0
            if mode == "tensor":
                heads = layer if layer is not None else x[None]
                amax = max(float(np.abs(Prep(heads[h], T, rotate, frac, seed).x).max()) for h in range(len(heads)))
                s_tensor = f32_scale(amax, fmt)
            y, b = cast_dense(pr.x, fmt, mode, s_tensor, head, 1 if layer is None else len(layer))
            out[v] = pr.finish(y)
            nb += b + pr.nbytes
        return out[0], out[1], None, nb
    if method == "ggml":
        kind = _choice(p, "type", "q8_0", ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "f16", "bf16"))
        if kind not in ("f16", "bf16") and D % 32:
            raise ConfigError("ggml block types need head_dim % 32 == 0")
        to = _apply_to(p, has_v)

        def one(x):
            pr = Prep(x, T, rotate, frac, seed)
            v = ggml_ref.roundtrip(kind, pr.x)
            nb = 2 * T * D if kind in ("f16", "bf16") else T * (D // 32) * ggml_ref.BLOCK_BYTES[kind]
            return pr.finish(v), nb + pr.nbytes
        return _per_tensor(one, to, K, V, fp16)
    raise ConfigError("unknown method %r" % (method,))


def _per_tensor(one, to, K, V, fp16):
    Kp = Vp = None
    nb = 0
    if "k" in to:
        Kp, b = one(K)
        nb += b
    else:
        nb += fp16
    if V is not None:
        if "v" in to:
            Vp, b = one(V)
            nb += b
        else:
            nb += fp16
    return Kp, Vp, None, nb
