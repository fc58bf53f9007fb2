#!/usr/bin/python3
"""Independent numpy oracle for kvc.

Usage:  /usr/bin/python3 tests/oracle.py CONFIG.json [--per-head]
Prints one CSV row per expanded experiment (or per (experiment, layer, KV head) with --per-head) with the
header of COLUMNS (per-head: layer,head after method). Empty cell where a metric does not apply; floats
are printed with repr().

Importable: run_config(cfg, per_head=False) -> list of dicts (None where a metric does not apply);
make_data(cfg) -> Data; data_from_arrays(K, V, Q, O, rope, outlier_channels) -> Data from loaded arrays and
run_arrays(K, V, Q, experiments, ...) -> rows on them. A config with data.source "files" is loaded with
np.load and a small .safetensors reader (README "Data from files").

Written from the public spec in README.md ("Config reference", "Draw order", "Output columns") only; it
shares no code with kvc. Shapes: L layers, H KV heads, Hq query heads, G = Hq // H (query head hq reads KV
head hq // G), T tokens, D head dim, N evaluation queries, W observation queries per (layer, query head).
"""
import csv
import itertools
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_quant  # noqa: E402  (quantize, kivi, cast, ggml: tests/oracle_quant.py)

COLUMNS = ["label", "method", "attn_error", "k_error", "v_error",
           "k_error_ordinary", "k_zeroed_ordinary", "bytes", "baseline_bytes", "ratio",
           "attn_error_p50", "attn_error_p95", "attn_error_max", "attn_kl", "retained_mass", "topk_recall"]
PER_HEAD_COLUMNS = COLUMNS[:2] + ["layer", "head"] + COLUMNS[2:]

METHODS = ("quantize", "sink_window", "topk_attention", "lowrank", "window", "h2o", "snapkv", "tova", "knorm",
           "random", "share_heads", "pipeline")


class ConfigError(ValueError):
    pass


oracle_quant.ConfigError = ConfigError


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _int_param(p, name, default=None):
    v = p.get(name, default)
    if v is None:
        raise ConfigError("missing parameter %r" % name)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not _is_int(v):
        raise ConfigError("parameter %r must be an integer, got %r" % (name, v))
    return v


def _num(block, name, default):
    v = block.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError("%r must be a number, got %r" % (name, v))
    return float(v)


def _seed(cfg):
    s = cfg.get("seed", 0)
    if isinstance(s, str):
        if not s.isdigit():
            raise ConfigError("seed string must be a non-negative decimal integer")
        return int(s)
    if isinstance(s, float) and s.is_integer():
        s = int(s)
    if not _is_int(s) or s < 0:
        raise ConfigError("seed must be a non-negative integer")
    return s


# ---------------------------------------------------------------- RoPE

class Rope:
    """inv_freq = 1 / base ** (arange(0, dims, 2) / dims); angle = position * inv_freq."""

    def __init__(self, block, T, D):
        self.base = _num(block, "base", 10000.0)
        self.dims = _int_param(block, "dims", D)
        self.style = block.get("style", "half")
        self.cache = block.get("cache", "post")
        if self.dims % 2 or not 2 <= self.dims <= D or self.style not in ("half", "interleaved") \
                or self.cache not in ("post", "pre"):
            raise ConfigError("bad rope block")
        inv = 1.0 / self.base ** (np.arange(0, self.dims, 2) / self.dims)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        self.cos = np.cos(ang)
        self.sin = np.sin(ang)

    def apply(self, x, pos=None, inverse=False):
        """x (..., n, D): row i rotated by position pos[i] (default i). Returns a new array."""
        n = x.shape[-2]
        pos = np.arange(n) if pos is None else np.asarray(pos)
        c, s = self.cos[pos], self.sin[pos]
        h = self.dims // 2
        if self.style == "half":
            i1, i2 = np.arange(h), np.arange(h, self.dims)
        else:
            i1, i2 = np.arange(0, self.dims, 2), np.arange(1, self.dims, 2)
        x1, x2 = x[..., i1], x[..., i2]
        y = x.copy()
        if inverse:
            y[..., i1] = x1 * c + x2 * s
            y[..., i2] = x2 * c - x1 * s
        else:
            y[..., i1] = x1 * c - x2 * s
            y[..., i2] = x2 * c + x1 * s
        return y


# ---------------------------------------------------------------- data

class Data:
    """K, V: (L, H, T, D) as the cache holds them; Q: (L, Hq, N, D) and O: (L, Hq, W, D) as attention reads
    them; rope: a Rope when the cache holds pre-RoPE keys (attention rotates them), else None;
    outlier_mask: (L, D) bool or None."""


def _keys_recipe(rng, kb, L, Hx, T, D):
    gen = kb.get("generator")
    if gen == "normal":
        return rng.normal(size=(L, Hx, T, D))
    if gen == "lowrank":
        R = _int_param(kb, "rank")
        if R < 1:
            raise ConfigError("keys rank must be >= 1")
        scale = _num(kb, "scale", 1.0)
        noise = _num(kb, "noise", 0.0)
        A = rng.normal(size=(L, Hx, T, R))
        B = rng.normal(size=(L, Hx, R, D))
        K = (A @ B) * scale
        if noise > 0:
            K = K + noise * rng.normal(size=(L, Hx, T, D))
        return K
    raise ConfigError("unknown keys generator %r" % (gen,))


def _query_set(rng, qb, Kr, nh, per, n, positions=None, tokens=None):
    """(L, nh, n, D): head j reads KV head j // per of Kr (L, H, T, D). positions None: evaluation queries
    (targets in 0..T-1); else query k sits at positions[k] and looks at tokens 0..positions[k]."""
    L, H, T, D = Kr.shape
    gen = qb.get("generator", "look_back")
    weight = _num(qb, "weight", 1.0)
    noise = _num(qb, "noise", 0.0)
    kv = np.arange(nh) // per
    span = np.full(n, T) if positions is None else np.asarray(positions) + 1
    if gen == "look_back":
        if tokens is not None:
            tgt = np.broadcast_to(np.asarray(tokens, dtype=np.int64), (L, nh, n))
        else:
            u = rng.random(size=(L, nh, n))
            tgt = np.minimum((u * span).astype(np.int64), span - 1)
        q = np.empty((L, nh, n, D))
        for l in range(L):
            for j in range(nh):
                q[l, j] = Kr[l, kv[j]][tgt[l, j]] * weight
    elif gen == "key_gaussian":
        a = rng.normal(size=(L, nh, n, T))
        if positions is not None:
            mask = np.arange(T)[None, :] >= span[:, None]       # (n, T): tokens after the query
            a[..., mask] = 0.0
        q = (a @ Kr[:, kv]) / np.sqrt(span.astype(np.float64))[:, None] * weight
    else:
        raise ConfigError("unknown query generator %r" % (gen,))
    if noise > 0:
        q = q + noise * rng.normal(size=(L, nh, n, D))
    return q


def _median_abs(x):
    return float(np.median(np.abs(x)))


# ---------------------------------------------------------------- data from arrays or files

def _as4(a, what, vector_ok):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1 and vector_ok:
        a = a[None, :]
    if not 2 <= a.ndim <= 4 or 0 in a.shape:
        raise ConfigError("%s: shape %s not accepted" % (what, a.shape))
    return a.reshape((1,) * (4 - a.ndim) + a.shape)


def data_from_arrays(K, V=None, Q=None, O=None, rope=None, outlier_channels=None):
    """Data from arrays, by README "Data from files": K, V (T, D), (H, T, D) or (L, H, T, D); Q and O (D,),
    (N, D), (Hq, N, D) or (L, Hq, N, D), missing leading dimensions being 1; O holds the queries of positions
    T - W .. T - 1. rope: a data.rope block (the keys are pre-RoPE) or None; outlier_channels: a list of
    channels or a list of one list per layer, or None."""
    K = _as4(K, "keys", False)
    L, H, T, D = K.shape
    d = Data()
    d.K = K
    d.V = None if V is None else _as4(V, "values", False)
    if d.V is not None and d.V.shape != K.shape:
        raise ConfigError("values shape %s != keys %s" % (d.V.shape, K.shape))
    d.Q = None if Q is None else _as4(Q, "queries", True)
    d.O = None if O is None else _as4(O, "observe", True)
    Hq = H
    for name, x in (("queries", d.Q), ("observe", d.O)):
        if x is None:
            continue
        if x.shape[0] != L or x.shape[3] != D or x.shape[1] % H:
            raise ConfigError("%s shape %s does not fit keys %s" % (name, x.shape, K.shape))
        Hq = x.shape[1]
    if d.Q is not None and d.O is not None and d.Q.shape[1] != d.O.shape[1]:
        raise ConfigError("queries and observe have different q_heads")
    if d.Q is not None and d.V is None:
        raise ConfigError("queries need values")
    d.L, d.H, d.Hq, d.T, d.D = L, H, Hq, T, D
    d.N = 0 if d.Q is None else d.Q.shape[2]
    d.W = 0 if d.O is None else d.O.shape[2]
    if d.W > T:
        raise ConfigError("more observation queries than tokens")
    d.obs_pos = np.arange(T - d.W, T)
    d.rope = None
    if rope is not None:
        d.rope = Rope(rope, T, D)
        if d.rope.cache != "pre":
            raise ConfigError("a rope block with files must say \"cache\": \"pre\"")
    d.outlier_mask = None
    if outlier_channels:
        mask = np.zeros((L, D), dtype=bool)
        per_layer = isinstance(outlier_channels[0], list)
        if per_layer and len(outlier_channels) != L:
            raise ConfigError("outlier_channels: one list per layer")
        for l in range(L):
            chans = outlier_channels[l] if per_layer else outlier_channels
            if len(set(chans)) != len(chans) or not all(_is_int(c) and 0 <= c < D for c in chans):
                raise ConfigError("outlier_channels: bad channel list")
            mask[l, chans] = True
        if mask.any():
            d.outlier_mask = mask
    return d


_ST_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}


def read_safetensors(path, name=None):
    """One tensor of a .safetensors file (8-byte little-endian header length, JSON header, data) as float64."""
    with open(path, "rb") as fh:
        raw = fh.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    if name is None:
        if len(header) != 1:
            raise ConfigError("%s holds %d tensors; give a name" % (path, len(header)))
        name = next(iter(header))
    e = header[name]
    begin, end = e["data_offsets"]
    buf = raw[8 + n + begin:8 + n + end]
    if e["dtype"] == "BF16":
        x = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        x = np.frombuffer(buf, dtype=_ST_DTYPES[e["dtype"]])
    return x.astype(np.float64).reshape(e["shape"])


def _load_file(cfg_dir, spec):
    path, name = (spec, None) if isinstance(spec, str) else (spec["path"], spec.get("name"))
    if not path.startswith("/"):
        path = cfg_dir + "/" + path if cfg_dir else path
    if path.endswith(".npy"):
        return np.load(path).astype(np.float64)
    return read_safetensors(path, name)


def make_data(cfg, cfg_dir=""):
    data = cfg["data"]
    if data.get("source", "synthetic") == "files":
        f = data["files"]
        arrays = {k: _load_file(cfg_dir, f[k]) if k in f else None for k in ("keys", "values", "queries", "observe")}
        return data_from_arrays(arrays["keys"], arrays["values"], arrays["queries"], arrays["observe"],
                                data.get("rope"), data.get("outlier_channels"))
    T, D = data["tokens"], data["head_dim"]
    L, H = data.get("layers", 1), data.get("kv_heads", 1)
    Hq = data.get("q_heads", H)
    for v in (T, D, L, H, Hq):
        if not (_is_int(v) and v >= 1):
            raise ConfigError("sizes must be positive integers")
    if Hq % H:
        raise ConfigError("q_heads must be a multiple of kv_heads")
    G = Hq // H
    rng = np.random.default_rng(int(_seed(cfg)))
    d = Data()
    d.L, d.H, d.Hq, d.T, d.D = L, H, Hq, T, D

    # 1. keys, 2. head correlation, 3. keys.outliers
    kb = data.get("keys")
    if not isinstance(kb, dict):
        raise ConfigError("data.keys is required")
    K = _keys_recipe(rng, kb, L, H, T, D)
    hc = data.get("head_correlation")
    rho, g = 0.0, H
    if hc is not None:
        rho = _num(hc, "rho", None)
        g = _int_param(hc, "group", H)
        if H % g:
            raise ConfigError("head_correlation.group must divide kv_heads")
    if rho > 0:
        C = _keys_recipe(rng, kb, L, H // g, T, D)
        K = np.sqrt(1 - rho) * K + np.sqrt(rho) * np.repeat(C, g, axis=1)
    mask = np.zeros((L, D), dtype=bool)
    declared = False
    outliers = kb.get("outliers")
    if outliers is not None:
        for o in outliers:
            c = _int_param(o, "channel")
            if not 0 <= c < D:
                raise ConfigError("outlier channel %d out of range" % c)
            K[..., c] *= _num(o, "scale", None)
            mask[:, c] = True
            declared = True

    # 4. values
    V = None
    vb = data.get("values")
    if vb is not None:
        if vb.get("generator") != "normal":
            raise ConfigError("unknown values generator %r" % (vb.get("generator"),))
        V = rng.normal(size=(L, H, T, D))
        if rho > 0:
            V = np.sqrt(1 - rho) * V + np.sqrt(rho) * np.repeat(rng.normal(size=(L, H // g, T, D)), g, axis=1)

    # 5. the keys queries look at: rotated when RoPE is on
    rope = Rope(data["rope"], T, D) if "rope" in data else None
    Kr = rope.apply(K) if rope else K

    # 6. evaluation queries
    Q = None
    qb = data.get("query")
    if qb is not None:
        if V is None:
            raise ConfigError("a query needs values")
        tokens = None
        if "token" in qb:
            tokens, N = [_int_param(qb, "token")], 1
        elif "tokens" in qb:
            tokens = list(qb["tokens"])
            N = len(tokens)
        else:
            N = _int_param(qb, "count", 1)
        if tokens is not None and not all(0 <= t < T for t in tokens):
            raise ConfigError("query token out of range")
        rq = _num(qb, "head_correlation", 0.0)
        if rq == 0:
            Q = _query_set(rng, qb, Kr, Hq, G, N, tokens=tokens)
        else:
            shared = np.repeat(_query_set(rng, qb, Kr, H, 1, N, tokens=tokens), G, axis=1)
            if rq == 1:
                Q = shared
            else:
                own = _query_set(rng, qb, Kr, Hq, G, N, tokens=tokens)
                Q = np.sqrt(rq) * shared + np.sqrt(1 - rq) * own
    # 7. observation queries
    O = None
    ob = data.get("observe")
    W = 0
    if ob is not None:
        W = _int_param(ob, "window", min(32, T))
        d.obs_pos = np.arange(T - W, T)
        O = _query_set(rng, ob, Kr, Hq, G, W, positions=d.obs_pos)
    # 8. query bias
    if qb is not None and _num(qb, "bias", 0.0) > 0:
        bias = _num(qb, "bias", 0.0)
        u = np.repeat(rng.normal(size=(L, H, D)), G, axis=1)[:, :, None, :]
        Q = Q + bias * u
        if O is not None:
            O = O + bias * u

    # 9. outlier channels per layer
    oc = kb.get("outlier_channels")
    if oc is not None:
        n = _int_param(oc, "count")
        sc = oc["scale"]
        lo, hi = (float(sc), float(sc)) if not isinstance(sc, list) else (float(sc[0]), float(sc[1]))
        cu = rng.random(size=(L, D))
        mu = rng.random(size=(L, H, n))
        su = rng.random(size=(L, H, n))
        for l in range(L):
            chans = np.sort(np.argsort(cu[l], kind="stable")[:n])
            mask[l, chans] = True
            declared = True
            for h in range(H):
                med = _median_abs(K[l, h])
                for k, c in enumerate(chans):
                    sign = -1.0 if su[l, h, k] < 0.5 else 1.0
                    off = sign * (lo * (hi / lo) ** mu[l, h, k]) * med
                    K[l, h, :, c] = K[l, h, :, c] + off

    # 10. RoPE; 11. spread, heavy hitters, recent tokens, sinks (attention space)
    Ka = rope.apply(K) if rope else K.copy()
    pre = rope is not None and rope.cache == "pre"
    sinks, recent, hh = data.get("sinks"), data.get("recent"), data.get("heavy_hitters")
    if sinks is not None or recent is not None or hh is not None:
        _shape(rng, Ka, K if pre else None, rope, Q, G, sinks, recent, hh)

    d.K = K if pre else Ka
    d.V, d.Q, d.O, d.W = V, Q, O, W
    d.N = 0 if Q is None else Q.shape[2]
    d.rope = rope if pre else None
    d.outlier_mask = mask if declared else None
    return d


def _shape(rng, Ka, Kp, rope, Q, G, sinks, recent, hh):
    """Moves keys along the mean evaluation query of their KV head (README "Draw order", step 11)."""
    L, H, T, D = Ka.shape
    ns = _int_param(sinks, "tokens", min(4, T - 1)) if sinks is not None else 0
    spread = _num(hh, "spread", 0.0) if hh is not None else 0.0
    count = _int_param(hh, "count", 0) if hh is not None else 0
    z = rng.normal(size=(L, H, T)) if spread > 0 else None
    u = rng.random(size=(L, H, T - ns)) if count > 0 else None
    root = np.sqrt(D)

    for l in range(L):
        for h in range(H):
            qs = Q[l, h * G:(h + 1) * G].reshape(-1, D)
            acc = np.zeros(D)
            for row in qs:
                acc = acc + row
            qbar = acc / qs.shape[0]
            qq = float(qbar @ qbar)
            if qq == 0:
                continue

            def move(t_idx, coef):
                delta = coef[:, None] * qbar[None, :]
                Ka[l, h, t_idx] = Ka[l, h, t_idx] + delta
                if Kp is not None:
                    Kp[l, h, t_idx] = Kp[l, h, t_idx] + rope.apply(delta, pos=t_idx, inverse=True)

            def give(t_idx, share):
                s = (Ka[l, h] @ qbar) / root
                e = np.exp(s - s.max())
                inset = np.zeros(T, dtype=bool)
                inset[t_idx] = True
                s_in, s_out = e[inset].sum(), e[~inset].sum()
                if s_in > 0 and s_out > 0:
                    delta = np.log(share / (1 - share)) + np.log(s_out) - np.log(s_in)
                    move(t_idx, np.full(len(t_idx), delta * root / qq))

            if z is not None:
                move(np.arange(T), spread * z[l, h] * root / qq)
            if u is not None:
                give(np.sort(ns + np.argsort(u[l, h], kind="stable")[:count]), _num(hh, "share", None))
            if recent is not None:
                nr = _int_param(recent, "tokens")
                give(np.arange(T - nr, T), _num(recent, "share", None))
            if ns > 0:
                give(np.arange(ns), _num(sinks, "share", None))


def scores(q, K):
    return (K @ q) / np.sqrt(K.shape[1])


def attention(q, K, V):
    s = scores(q, K)
    w = np.exp(s - s.max())
    w = w / w.sum()
    return w @ V, w


def log_softmax(s):
    a = s - s.max()
    return a - np.log(np.exp(a).sum())


# ---------------------------------------------------------------- experiments

def _fmt_value(v):
    if isinstance(v, float):
        return _num_text(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def expand(exp):
    """Grid-expands one experiment object into a list of (label, method, params dict)."""
    if not isinstance(exp, dict) or "method" not in exp:
        raise ConfigError("experiment needs a method")
    method = exp["method"]
    if method == "pipeline":
        return _expand_pipeline(exp)
    keys = [k for k in exp if k not in ("label", "method")]
    choices = []
    for k in keys:
        v = exp[k]
        if isinstance(v, list):
            if not v:
                raise ConfigError("empty list for parameter %r" % k)
            choices.append(v)
        else:
            choices.append([v])
    out = []
    for combo in itertools.product(*choices):   # last key varies fastest
        params = dict(zip(keys, combo))
        if "label" in exp:
            label = exp["label"]
            for k in keys:
                label = label.replace("{" + k + "}", _fmt_value(params[k]))
        else:
            label = method + "".join(" %s=%s" % (k, _fmt_value(params[k])) for k in keys)
        out.append((label, method, params))
    return out


def quantize(x, bits, axis):
    qmax = 2 ** (bits - 1) - 1
    ax = 1 if axis == "token" else 0
    scale = np.abs(x).max(axis=ax, keepdims=True) / qmax
    zero = scale == 0
    safe = np.where(zero, 1.0, scale)
    xq = np.clip(np.round(x / safe), -qmax, qmax) * safe
    return np.where(zero, 0.0, xq)


def lowrank_approx(x, rank):
    U, S, Vt = np.linalg.svd(x, full_matrices=False)
    return (U[:, :rank] * S[:rank]) @ Vt[:rank]


def _apply_to(params, default, has_v):
    a = params.get("apply_to", default)
    if a not in ("k", "v", "kv"):
        raise ConfigError("apply_to must be k, v or kv")
    if "v" in a and not has_v:
        raise ConfigError("apply_to %r needs data.values" % a)
    return a


def _rel(a, b):
    num, den = np.linalg.norm(a - b), np.linalg.norm(b)
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return float(num / den)


def _compress(method, p, K, V, wsum, seed=0):
    """One (layer, KV head): returns (K' or None, V' or None, kept indices or None, bytes)."""
    T, D = K.shape
    has_v = V is not None
    n_tensors = 2 if has_v else 1
    if method in oracle_quant.METHODS:   # the quantizers (seed: rotate "hadamard"; a "tensor" scale is the head's)
        return oracle_quant.compress(method, p, K, V, seed)
    if method == "lowrank":
        rank = _int_param(p, "rank")
        if not 1 <= rank <= min(T, D):
            raise ConfigError("rank must be 1..min(T, D)")
        to = _apply_to(p, "k", has_v)
        lbytes = 2 * (T * rank + rank * D)
        Kp = lowrank_approx(K, rank) if "k" in to else None
        Vp = lowrank_approx(V, rank) if has_v and "v" in to else None
        nbytes = (lbytes if Kp is not None else 2 * T * D) + \
            ((lbytes if Vp is not None else 2 * T * D) if has_v else 0)
        return Kp, Vp, None, nbytes
    if method == "sink_window":
        sinks, window = _sink_window(p, T)
        if sinks < 0 or window < 0 or sinks + window > T or sinks + window < 1:
            raise ConfigError("need sinks, window >= 0 and 1 <= sinks + window <= T")
        kept = np.r_[np.arange(0, sinks), np.arange(T - window, T)].astype(np.intp)
        return None, None, kept, 2 * len(kept) * D * n_tensors
    if method == "topk_attention":
        if wsum is None:
            raise ConfigError("topk_attention needs a query")
        budget = _int_param(p, "budget")
        if not 1 <= budget <= T:
            raise ConfigError("budget must be 1..T")
        kept = np.sort(np.argsort(-wsum, kind="stable")[:budget])
        return None, None, kept, 2 * len(kept) * D * n_tensors + 4 * len(kept)
    raise ConfigError("unknown method %r" % (method,))


# ---------------------------------------------------------------- eviction, sharing, low rank, pipelines
# README "Methods" (window, h2o, snapkv, tova, knorm, random, share_heads, lowrank energy/joint) and "Composition"
# (pipeline). Everything below works on one layer at a time: _compress_layer returns, per KV head of the layer,
# (K' or None, V' or None, kept positions or None, bytes), or None for the per-head methods of _compress.

EVICTORS = ("sink_window", "window", "topk_attention", "h2o", "snapkv", "tova", "knorm", "random")
RANDOM_TAG = 0x72616E64          # "rand": the random method's own stream


def _num_text(v):
    """A parameter value as kvc writes it: shortest of %.15g/%.16g/%.17g for numbers, true/false, strings."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        for prec in (15, 16, 17):
            s = "%.*g" % (prec, v)
            if float(s) == v:
                return s
        return s
    return str(v)


def _expand_pipeline(exp):
    """Grid of a pipeline: every list of every step, steps in order, keys in order, the last fastest."""
    steps = exp.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ConfigError("pipeline needs a non-empty list of steps")
    axes = []
    for s, st in enumerate(steps):
        if not isinstance(st, dict) or "method" not in st:
            raise ConfigError("a step needs a method")
        for k, v in st.items():
            if k != "method":
                axes.append((s, k, v if isinstance(v, list) else [v]))
    out = []
    for combo in itertools.product(*[a[2] for a in axes]):
        ps = [{"method": st["method"]} for st in steps]
        for (s, k, _), v in zip(axes, combo):
            ps[s][k] = v
        if "label" in exp:
            label = exp["label"]
            for s, k, _ in axes:
                label = label.replace("{steps.%d.%s}" % (s, k), _num_text(ps[s][k]))
            for s, k, _ in axes:
                if sum(k in q for q in ps) == 1:
                    label = label.replace("{%s}" % k, _num_text(ps[s][k]))
        else:
            label = " | ".join(q["method"] + "".join(" %s=%s" % (k, _num_text(v)) for k, v in q.items()
                                                     if k != "method") for q in ps)
        out.append((label, "pipeline", {"steps": ps}))
    return out


def _kvpress_kept(c, T):
    """kvpress's n_kept = int(k_len * (1 - compression_ratio)) (README "Budgets")."""
    return int(T * (1 - c))


def _budget(p, T):
    b = _int_param(p, "budget", 0)
    r = float(p.get("keep_ratio", 0))
    c = float(p.get("compression_ratio", 0))
    if (b > 0) + (r > 0) + (c > 0) != 1:
        raise ConfigError("give one of budget, keep_ratio and compression_ratio")
    if c > 0:
        n = _kvpress_kept(c, T)
        if not c < 1 or n < 1:
            raise ConfigError("compression_ratio must be below 1 and keep a token")
    else:
        n = b if b > 0 else max(1, math.floor(r * T))
    return min(n, T)


def _sink_window(p, T):
    """(sinks, window) of sink_window: `window`, or with compression_ratio kvpress's int(T (1 - c)) - sinks."""
    s = _int_param(p, "sinks", 4)
    c = float(p.get("compression_ratio", 0))
    if c > 0:
        if "window" in p:
            raise ConfigError("give window or compression_ratio")
        n = _kvpress_kept(c, T)
        if not c < 1 or n < max(s, 1):
            raise ConfigError("compression_ratio must keep the sinks and at least one token")
        return s, n - s
    return s, _int_param(p, "window")


def _top(score, k, forced=None):
    """Ascending rows: the forced ones plus the k best others (larger score, ties to the earlier row)."""
    n = len(score)
    idx = np.arange(n)
    cand = idx if forced is None else idx[~forced]
    chosen = cand[np.argsort(-score[cand], kind="stable")][:k]
    return np.sort(chosen if forced is None else np.concatenate([idx[forced], chosen]))


class _Head:
    """One (stored) head as an eviction step sees it: rows K, V (n, D), attention-space keys Ka, positions pos,
    oracle weights w (or None), observation queries O (G', W, D) at obs_pos, and its (layer, head)."""


def _obs_weights(hd, g, j):
    n, D = hd.Ka.shape
    c = int(np.searchsorted(hd.pos, hd.obs_pos[j], side="right"))
    w = np.zeros(n)
    if c:
        s = (hd.Ka[:c] @ hd.O[g, j]) / np.sqrt(D)
        e = np.exp(s - s.max())
        w[:c] = e / e.sum()
    return w


def _evict(method, p, hd, seed):
    """Kept rows (indices into hd's rows) and extra (index) bytes of one eviction step."""
    n = hd.K.shape[0]
    if method == "sink_window":
        s, w = _sink_window(p, n)
        return np.r_[np.arange(0, s), np.arange(n - w, n)].astype(np.intp), 0
    if method == "window":
        b = _budget(p, n)
        return np.arange(n - b, n), 0
    if method == "topk_attention":
        return _top(hd.w, _int_param(p, "budget")), None
    if method == "knorm":
        score = np.array([-np.linalg.norm(hd.Ka[t]) for t in range(n)])
        return _top(score, _budget(p, n)), None
    if method == "random":
        rng = np.random.default_rng([seed, RANDOM_TAG, _int_param(p, "draw", 0), hd.layer, hd.head])
        return _top(-rng.random(n), _budget(p, n)), None
    if hd.O is None or hd.O.shape[1] == 0:
        raise ConfigError("%s needs observation queries" % method)
    G, W = hd.O.shape[0], hd.O.shape[1]
    b = _budget(p, n)
    if method == "h2o":
        acc = np.zeros(n)
        normalize = p.get("normalize", False)
        if not isinstance(normalize, bool):
            raise ConfigError("normalize must be true or false")
        if normalize:   # n[t]: observation queries at or after row t's position
            seen = np.array([float(sum(1 for q in hd.obs_pos if q >= hd.pos[t])) for t in range(n)])
        for g in range(G):
            s = np.zeros(n)
            for j in range(W):
                s = s + _obs_weights(hd, g, j)
            if normalize:
                acc = acc + np.where(seen > 0, s / np.where(seen > 0, seen, 1.0), 0.0)
            else:
                acc = acc + s
        if normalize:
            acc = acc / G
        recent = math.floor(float(p.get("recent_ratio", 0.5)) * b)
        forced = np.zeros(n, dtype=bool)
        forced[n - recent:] = True
        return _top(acc, b - recent, forced), None
    if method == "tova":
        if p.get("heads", "group") != "group":
            raise ConfigError("tova heads \"layer\" runs on the layer (_tova_layer)")
        acc = np.zeros(n)
        for g in range(G):
            acc = acc + _obs_weights(hd, g, W - 1)
        return _top(acc, b), None
    if method == "snapkv":
        ws = _int_param(p, "window_size", 0) or W
        k = _int_param(p, "kernel_size", 5)
        pool = p.get("pooling", "max")
        h = k // 2
        first = W - ws
        P = int(np.searchsorted(hd.pos, hd.obs_pos[first], side="left"))
        score = np.zeros(n)
        for g in range(G):
            v = np.zeros(n)
            for j in range(first, W):
                v[:P] = v[:P] + _obs_weights(hd, g, j)[:P]
            pooled = np.zeros(n)
            for t in range(P):
                lo, hi = max(0, t - h), min(P - 1, t + h)
                if pool == "max":
                    pooled[t] = v[lo:hi + 1].max()
                else:
                    x = 0.0
                    for u in range(lo, hi + 1):
                        x += float(v[u])
                    pooled[t] = x / k
            score = score + pooled
        forced = np.zeros(n, dtype=bool)
        forced[P:] = True
        return _top(score, max(b - (n - P), 0), forced), None
    raise ConfigError("unknown eviction method %r" % method)


def _tova_layer(p, heads):
    """tova with heads "layer" on the _Head of every (stored) KV head of a layer: kept rows (shared) and each head's
    index bytes (4 per kept token once per layer, split over the heads)."""
    n = heads[0].K.shape[0]
    for hd in heads:
        if hd.O is None or hd.O.shape[1] == 0:
            raise ConfigError("tova needs observation queries")
        if not np.array_equal(hd.pos, heads[0].pos):
            raise ConfigError("tova heads \"layer\" needs the layer's heads to hold the same rows")
    acc, nq = np.zeros(n), 0
    for hd in heads:
        for g in range(hd.O.shape[0]):
            acc = acc + _obs_weights(hd, g, hd.O.shape[1] - 1)
            nq += 1
    kept = _top(acc / nq, _budget(p, n))
    return kept, [_split(4 * len(kept), len(heads), i) for i in range(len(heads))]


def _energy_rank(S, p):
    r = _int_param(p, "rank", 0)
    if r > 0:
        return min(r, len(S))
    c = np.cumsum(S * S)
    e = float(p.get("energy", 0))
    hit = np.nonzero(c >= e * c[-1])[0]
    return int(hit[0]) + 1 if len(hit) else len(S)


def _lowrank_factor(xs, p):
    """Truncated SVD of the rows of xs (a list of (n_k, W)) stacked: per block its coefficients and the rank-r
    reconstruction, and the basis (r, W)."""
    A = np.concatenate(xs)
    U, S, Vt = np.linalg.svd(A, full_matrices=False)
    r = _energy_rank(S, p)
    coef_all = U[:, :r] * S[:r]
    basis = Vt[:r]
    coefs, recs, o = [], [], 0
    for x in xs:
        c = coef_all[o:o + len(x)]
        coefs.append(c)
        recs.append(c @ basis)
        o += len(x)
    return coefs, recs, basis, r


def _split(total, n, i):
    return total // n + (1 if i < total % n else 0)


def _pool(xs):
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = acc + x
    return acc / len(xs)


def _lowrank_layer(p, Ks, Vs):
    """lowrank (rank or energy, per head or joint) over one layer's heads: list of (K', V', None, bytes) and the
    factored forms per head: (Kcoef, Kbasis) / (Vcoef, Vbasis) or None, and whether the basis is shared."""
    H = len(Ks)
    has_v = Vs[0] is not None
    to = _apply_to(p, "k", has_v)
    joint = bool(p.get("joint", False))
    res = [[None, None, None, 0] for _ in range(H)]
    fac = [[None, None] for _ in range(H)]
    for x, (name, X) in enumerate((("k", Ks), ("v", Vs))):
        if X[0] is None:
            continue
        if name not in to:
            for h in range(H):
                res[h][3] += 2 * X[h].size
            continue
        groups = [list(range(H))] if joint else [[h] for h in range(H)]
        for grp in groups:
            coefs, recs, basis, r = _lowrank_factor([X[h] for h in grp], p)
            D = basis.shape[1]
            for i, h in enumerate(grp):
                res[h][x] = recs[i]
                res[h][3] += 2 * len(X[h]) * r + _split(2 * r * D, len(grp), i)
                fac[h][x] = (coefs[i], basis)
    return res, fac, joint


def _share_layer(p, Ks, Vs):
    H, g = len(Ks), _int_param(p, "group")
    if H % g:
        raise ConfigError("group must divide kv_heads")
    res = []
    for h0 in range(0, H, g):
        K = _pool(Ks[h0:h0 + g])
        V = None if Vs[0] is None else _pool(Vs[h0:h0 + g])
        stored = 2 * K.size * (2 if V is not None else 1)
        for i in range(g):
            res.append([K.copy(), None if V is None else V.copy(), None, _split(stored, g, i)])
    return res


class _Tensor:
    def __init__(self, S):
        self.S, self.B, self.rows_bytes, self.shared, self.touched = S, None, 2 * S.size, False, False


def _take(X, rows, fac, b, shared):
    """Tensor X takes a step's result: a factored form fac = (coef, basis), or rows with rows-bytes b."""
    if fac is not None:
        coef, basis = fac
        X.B = basis if X.B is None else basis @ X.B
        X.S = coef
        X.rows_bytes = 2 * coef.size
        X.shared = shared
    else:
        X.S = rows
        X.rows_bytes = b
    X.touched = True


def _rewrite(method, p, st, has_v, last, seed):
    """One step that rewrites values, on every stored head of a layer (README "Composition")."""
    if method == "lowrank":
        res, fac, joint = _lowrank_layer(p, [s.X[0].S for s in st], [s.X[1].S if has_v else None for s in st])
        for s, r, f in zip(st, res, fac):
            for x in range(1 + has_v):
                if r[x] is not None:
                    _take(s.X[x], None, f[x], 0, joint)
        return
    Ks = [s.X[0].S for s in st]                     # the layer before this step (cast's per-layer scale)
    Vs = [s.X[1].S for s in st] if has_v else None
    for i, s in enumerate(st):
        K, V = Ks[i], Vs[i] if has_v else None

        def run(k_role, v_role, lk, lv, q=p):
            return _step(method, q, k_role, v_role, seed, lk, lv, i)

        if V is None or K.shape[1] == V.shape[1]:
            Kp, Vp, kept, nb = run(K, V, Ks, Vs)
            if kept is not None:
                raise ConfigError("%s evicts; it must come before the rewriting steps" % method)
            if Kp is not None and Vp is not None:
                bk = _alone(run, p, K, Ks)[3] if not last else nb
                _take(s.X[0], Kp, None, bk, False)
                _take(s.X[1], Vp, None, nb - bk, False)
            elif Kp is not None:
                _take(s.X[0], Kp, None, nb - (2 * V.size if V is not None else 0), False)
            elif Vp is not None:
                _take(s.X[1], Vp, None, nb - 2 * K.size, False)
        else:
            Kp, _, _, nb = _alone(run, p, K, Ks)
            if Kp is not None:
                _take(s.X[0], Kp, None, nb, False)
            _, Vp, _, nb2 = run(V, V, Vs, Vs)
            nb3 = _alone(run, p, V, Vs)[3]
            if Vp is not None:
                _take(s.X[1], Vp, None, nb2 - nb3, False)


class _Stored:
    pass


def _step(method, p, K, V, seed, lk, lv, head):
    """A rewriting step on one stored head (K, V) of a layer whose stored heads are lk, lv."""
    if method in oracle_quant.METHODS:
        return oracle_quant.compress(method, p, K, V, seed, lk, lv, head)
    return _compress(method, p, K, V, None, seed)


def _alone(run, p, X, lx):
    """A rewriting step on X in the K role with no V beside it (to tell a step's K bytes from its V bytes, or to
    run a tensor of another width): the cache has values, so apply_to "kv" means "k" here and "v" leaves X."""
    try:
        return run(X, None, lx, None)
    except ConfigError:
        if p.get("apply_to") == "v":
            return None, None, None, 2 * X.size
        return run(X, None, lx, None, dict(p, apply_to="k"))


def _pipeline_layer(steps, d, l, Ka, wsum, seed):
    H, G, T, D = d.H, d.Hq // d.H, d.T, d.D
    has_v = d.V is not None
    g, k0 = 1, 0
    if steps[0]["method"] == "share_heads":
        g, k0 = _int_param(steps[0], "group"), 1
        if H % g:
            raise ConfigError("group must divide kv_heads")
    st = []
    for s in range(H // g):
        grp = list(range(s * g, s * g + g))
        x = _Stored()
        x.h0, x.nh, x.n = s * g, g, T
        x.pos = np.arange(T)
        x.evicted, x.idx = False, 0
        x.X = [_Tensor(_pool([d.K[l, h] for h in grp]))]
        if has_v:
            x.X.append(_Tensor(_pool([d.V[l, h] for h in grp])))
        for X in x.X:
            X.touched = g > 1
        x.Ka = _pool([Ka[l, h] for h in grp])
        x.w = None
        if wsum is not None:   # the group's sum (not the mean)
            acc = wsum[l, grp[0]].copy()
            for h in grp[1:]:
                acc = acc + wsum[l, h]
            x.w = acc
        x.O = None if d.O is None else d.O[l, s * g * G:(s + 1) * g * G]
        st.append(x)
    for k in range(k0, len(steps)):
        p = steps[k]
        method = p["method"]
        if method == "share_heads":
            raise ConfigError("share_heads must be the first step")
        if method in EVICTORS:
            heads = []
            for s, x in enumerate(st):
                hd = _Head()
                hd.K, hd.V, hd.Ka, hd.pos, hd.w = x.X[0].S, x.X[1].S if has_v else None, x.Ka, x.pos, x.w
                hd.O, hd.obs_pos, hd.layer, hd.head = x.O, getattr(d, "obs_pos", None), l, s
                heads.append(hd)
            if method == "tova" and p.get("heads") == "layer":
                kept_all, extras = _tova_layer(p, heads)
                results = [(kept_all, e) for e in extras]
            else:
                results = [_evict(method, p, hd, seed) for hd in heads]
            for x, (kept, extra) in zip(st, results):
                n = len(kept)
                if extra is None:
                    extra = 4 * n
                x.idx = extra if not x.evicted else (0 if x.idx == 0 and extra == 0 else 4 * n)
                x.evicted = True
                x.pos = x.pos[kept]
                for X in x.X:
                    X.S = X.S[kept]
                    X.rows_bytes = 2 * X.S.size
                x.Ka = x.Ka[kept]
                if x.w is not None:
                    x.w = x.w[kept]
                x.n = n
        else:
            _rewrite(method, p, st, has_v, k + 1 == len(steps), seed)
    layer_bytes = [2 * X.B.shape[0] * D for X in st[0].X if X.B is not None and X.shared]   # per tensor
    out = []
    for h in range(H):
        x = st[h // g]
        b = x.idx + sum(X.rows_bytes + (2 * X.B.shape[0] * D if X.B is not None and not X.shared else 0)
                        for X in x.X)
        nb = _split(b, x.nh, h - x.h0) + sum(_split(lb, H, h) for lb in layer_bytes)
        rec = []
        for xi, X in enumerate(x.X):
            if not X.touched:
                rec.append(None)
                continue
            full = (d.K if xi == 0 else d.V)[l, h].copy()
            full[x.pos] = X.S if X.B is None else X.S @ X.B
            rec.append(full)
        out.append((rec[0], rec[1] if has_v else None, x.pos.copy() if x.evicted else None, nb))
    return out


def _compress_layer(method, p, d, l, Ka, wsum, seed):
    """Per-head results of the methods of this section on layer l, or None (then _compress runs per head)."""
    H = d.H
    if method in oracle_quant.METHODS:   # with the layer: cast's per-layer ("tensor") scale
        Vl = None if d.V is None else d.V[l]
        return [oracle_quant.compress(method, p, d.K[l, h], None if Vl is None else Vl[h], seed, d.K[l], Vl, h)
                for h in range(H)]
    if method == "pipeline":
        return _pipeline_layer(p["steps"], d, l, Ka, wsum, seed)
    if method == "share_heads":
        Vs = [None] * H if d.V is None else [d.V[l, h] for h in range(H)]
        return [tuple(r) for r in _share_layer(p, [d.K[l, h] for h in range(H)], Vs)]
    if method == "lowrank" and (float(p.get("energy", 0)) > 0 or bool(p.get("joint", False))):
        Vs = [None] * H if d.V is None else [d.V[l, h] for h in range(H)]
        res, _, _ = _lowrank_layer(p, [d.K[l, h] for h in range(H)], Vs)
        return [tuple(r) for r in res]
    if method in EVICTORS and method not in ("sink_window", "topk_attention"):
        G = d.Hq // H
        heads = []
        for h in range(H):
            hd = _Head()
            hd.K, hd.V, hd.Ka, hd.pos = d.K[l, h], None if d.V is None else d.V[l, h], Ka[l, h], np.arange(d.T)
            hd.w = None if wsum is None else wsum[l, h]
            hd.O = None if d.O is None else d.O[l, h * G:(h + 1) * G]
            hd.obs_pos, hd.layer, hd.head = getattr(d, "obs_pos", None), l, h
            heads.append(hd)
        if method == "tova" and p.get("heads") == "layer":
            kept, extras = _tova_layer(p, heads)
            results = [(kept, e) for e in extras]
        else:
            results = [_evict(method, p, hd, seed) for hd in heads]
        out = []
        nt = 2 if d.V is not None else 1
        for kept, extra in results:
            out.append((None, None, kept, 2 * len(kept) * d.D * nt + (4 * len(kept) if extra is None else extra)))
        return out
    return None


def _recall_k(cfg, T):
    m = cfg.get("metrics") or {}
    k = _int_param(m, "topk_recall_k", min(32, T))
    if not 1 <= k <= T:
        raise ConfigError("topk_recall_k must be 1..T")
    return k


def _row(label, method, per_query, has_evict, nq_total, d, idx_heads, Kp_all, Vp_all, nbytes):
    """Aggregates per-query metrics and the tensors of heads idx_heads (list of (l, h))."""
    row = dict.fromkeys(COLUMNS)
    row["label"], row["method"] = label, method
    if per_query is not None:
        err, kl, ret, rec = (np.array(x, dtype=np.float64) for x in per_query)
        row["attn_error"] = float(np.mean(err))
        p50, p95 = np.percentile(err, [50, 95])
        row["attn_error_p50"], row["attn_error_p95"] = float(p50), float(p95)
        row["attn_error_max"] = float(np.max(err))
        row["attn_kl"] = float(np.mean(kl))
        if has_evict:
            row["retained_mass"] = float(np.mean(ret))
            row["topk_recall"] = float(np.mean(rec))
    sel = tuple(np.array(x) for x in zip(*idx_heads))
    if Kp_all is not None:
        Kp, K = Kp_all[sel], d.K[sel]         # (heads, T, D) in (layer, head) order
        row["k_error"] = _rel(Kp, K)
        if d.outlier_mask is not None:
            ordinary = np.broadcast_to(~d.outlier_mask[sel[0]][:, None, :], K.shape)
            if ordinary.any():
                row["k_error_ordinary"] = _rel(Kp[ordinary], K[ordinary])
                row["k_zeroed_ordinary"] = float(np.mean(Kp[ordinary] == 0))
    if Vp_all is not None:
        row["v_error"] = _rel(Vp_all[sel], d.V[sel])
    baseline = 2 * d.T * d.D * (2 if d.V is not None else 1) * len(idx_heads)
    row["bytes"] = int(nbytes)
    row["baseline_bytes"] = int(baseline)
    row["ratio"] = float(baseline / nbytes)
    return row


def run_arrays(K, V=None, Q=None, experiments=(), O=None, rope=None, outlier_channels=None, metrics=None,
               per_head=False):
    """run_config on loaded arrays (see data_from_arrays) with these experiments (and metrics block)."""
    cfg = {"experiments": list(experiments)}
    if metrics is not None:
        cfg["metrics"] = metrics
    return run_config(cfg, per_head, data_from_arrays(K, V, Q, O, rope, outlier_channels))


def run_config(cfg, per_head=False, data=None, cfg_dir="", layer_fn=None):
    """Rows of every experiment of cfg, on data (a Data, e.g. from data_from_arrays) or else on make_data(cfg).
    layer_fn(method, p, d, l, Ka, seed), when given, replaces the methods: it returns per KV head of layer l
    (K' or None, V' or None, kept positions or None, bytes), and the metrics are measured on that (tests of other
    formulas, e.g. tests/test_peers.py's reference implementations)."""
    d = make_data(cfg, cfg_dir) if data is None else data
    L, H, Hq, T, D, N = d.L, d.H, d.Hq, d.T, d.D, d.N
    G = Hq // H
    has_v = d.V is not None
    Ka = d.rope.apply(d.K) if d.rope else d.K       # what attention reads
    k_rec = _recall_k(cfg, T)
    ref_out = ref_w = wsum = None
    if d.Q is not None:
        ref_out = np.empty((L, Hq, N, D))
        ref_w = np.empty((L, Hq, N, T))
        wsum = np.zeros((L, H, T))
        for l in range(L):
            for hq in range(Hq):
                for n in range(N):
                    ref_out[l, hq, n], ref_w[l, hq, n] = attention(d.Q[l, hq, n], Ka[l, hq // G], d.V[l, hq // G])
                    wsum[l, hq // G] = wsum[l, hq // G] + ref_w[l, hq, n]

    exps = cfg.get("experiments")
    if not isinstance(exps, list):
        raise ConfigError("experiments must be a list")
    rows = []
    for exp in exps:
        for label, method, p in expand(exp):
            Kp_all = Vp_all = None
            evicts = False
            nbytes = np.zeros((L, H), dtype=np.int64)
            err = np.empty((L, Hq, N))
            kl = np.empty((L, Hq, N))
            ret = np.ones((L, Hq, N))
            rec = np.ones((L, Hq, N))
            for l in range(L):
                if layer_fn is not None:
                    layer = layer_fn(method, p, d, l, Ka, _seed(cfg))
                else:
                    layer = _compress_layer(method, p, d, l, Ka, wsum, _seed(cfg))
                for h in range(H):
                    K, V = d.K[l, h], None if d.V is None else d.V[l, h]
                    if layer is not None:
                        Kp, Vp, kept, nb = layer[h]
                    else:
                        Kp, Vp, kept, nb = _compress(method, p, K, V, None if wsum is None else wsum[l, h])
                    nbytes[l, h] = nb
                    if Kp is not None:
                        if Kp_all is None:
                            Kp_all = d.K.copy()
                        Kp_all[l, h] = Kp
                    if Vp is not None:
                        if Vp_all is None:
                            Vp_all = d.V.copy()
                        Vp_all[l, h] = Vp
                    if d.Q is None:
                        continue
                    Kc = K if Kp is None else Kp
                    Vc = V if Vp is None else Vp
                    pos = np.arange(T) if kept is None else kept
                    Kc, Vc = Kc[pos], Vc[pos]
                    if d.rope:
                        Kc = d.rope.apply(Kc, pos=pos)
                    evicts = evicts or kept is not None
                    for hq in range(h * G, (h + 1) * G):
                        for n in range(N):
                            out, wc = attention(d.Q[l, hq, n], Kc, Vc)
                            err[l, hq, n] = _rel(out, ref_out[l, hq, n])
                            pw = ref_w[l, hq, n]
                            if kept is not None:
                                ret[l, hq, n] = pw[kept].sum()
                                top = np.argsort(-pw, kind="stable")[:k_rec]
                                rec[l, hq, n] = np.isin(top, kept).sum() / k_rec
                            lp = log_softmax(scores(d.Q[l, hq, n], Ka[l, h])[pos])
                            lq = log_softmax(scores(d.Q[l, hq, n], Kc))
                            kl[l, hq, n] = max(float((np.exp(lp) * (lp - lq)).sum()), 0.0)
            if per_head:
                for l in range(L):
                    for h in range(H):
                        sl = (l, slice(h * G, (h + 1) * G))
                        pq = None if d.Q is None else [x[sl].ravel() for x in (err, kl, ret, rec)]
                        row = _row(label, method, pq, evicts, L * Hq * N, d, [(l, h)], Kp_all, Vp_all,
                                   nbytes[l, h])
                        row["layer"], row["head"] = l, h
                        rows.append(row)
            else:
                pq = None if d.Q is None else [x.ravel() for x in (err, kl, ret, rec)]
                heads = [(l, h) for l in range(L) for h in range(H)]
                rows.append(_row(label, method, pq, evicts, L * Hq * N, d, heads, Kp_all, Vp_all,
                                 int(nbytes.sum())))
    return rows


def format_cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(rows, fh, per_head=False):
    cols = PER_HEAD_COLUMNS if per_head else COLUMNS
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([format_cell(r.get(c)) for c in cols])


def main(argv):
    args = [a for a in argv[1:] if a != "--per-head"]
    per_head = len(args) != len(argv) - 1
    if len(args) != 1:
        sys.stderr.write("usage: oracle.py CONFIG.json [--per-head]\n")
        return 2
    with open(args[0]) as fh:
        cfg = json.load(fh)
    try:
        rows = run_config(cfg, per_head, cfg_dir=os.path.dirname(args[0]))
    except (ConfigError, KeyError, TypeError) as e:
        sys.stderr.write("oracle: %s: %s\n" % (args[0], e))
        return 1
    write_csv(rows, sys.stdout, per_head)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
