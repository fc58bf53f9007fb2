#!/usr/bin/python3
"""Independent numpy oracle for kvc.

Usage:  /usr/bin/python3 tests/oracle.py CONFIG.json [--per-head]
Prints one CSV row per expanded experiment (or per (experiment, layer, KV head) with --per-head) with the
header of COLUMNS (per-head: layer,head after method). Empty cell where a metric does not apply; floats
are printed with repr().

Importable: run_config(cfg, per_head=False) -> list of dicts (None where a metric does not apply);
make_data(cfg) -> Data.

Written from the public spec in README.md ("Config reference", "Draw order", "Output columns") only; it
shares no code with kvc. Shapes: L layers, H KV heads, Hq query heads, G = Hq // H (query head hq reads KV
head hq // G), T tokens, D head dim, N evaluation queries, W observation queries per (layer, query head).
"""
import csv
import itertools
import json
import math
import sys

import numpy as np

COLUMNS = ["label", "method", "attn_error", "k_error", "v_error",
           "k_error_ordinary", "k_zeroed_ordinary", "bytes", "baseline_bytes", "ratio",
           "attn_error_p50", "attn_error_p95", "attn_error_max", "attn_kl", "retained_mass", "topk_recall"]
PER_HEAD_COLUMNS = COLUMNS[:2] + ["layer", "head"] + COLUMNS[2:]

METHODS = ("quantize", "sink_window", "topk_attention", "lowrank")


class ConfigError(ValueError):
    pass


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


def make_data(cfg):
    data = cfg["data"]
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
        return repr(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def expand(exp):
    """Grid-expands one experiment object into a list of (label, method, params dict)."""
    if not isinstance(exp, dict) or "method" not in exp:
        raise ConfigError("experiment needs a method")
    method = exp["method"]
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


def _compress(method, p, K, V, wsum):
    """One (layer, KV head): returns (K' or None, V' or None, kept indices or None, bytes)."""
    T, D = K.shape
    has_v = V is not None
    n_tensors = 2 if has_v else 1
    if method == "quantize":
        bits = _int_param(p, "bits", 8)
        if not 2 <= bits <= 8:
            raise ConfigError("bits must be 2..8")
        axis = p.get("axis", "token")
        if axis not in ("token", "channel"):
            raise ConfigError("axis must be token or channel")
        to = _apply_to(p, "kv", has_v)
        qbytes = -(-(T * D * bits) // 8) + 2 * (T if axis == "token" else D)
        Kp = quantize(K, bits, axis) if "k" in to else None
        Vp = quantize(V, bits, axis) if has_v and "v" in to else None
        nbytes = (qbytes if Kp is not None else 2 * T * D) + \
            ((qbytes if Vp is not None else 2 * T * D) if has_v else 0)
        return Kp, Vp, None, nbytes
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
        sinks = _int_param(p, "sinks", 4)
        window = _int_param(p, "window")
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


def run_config(cfg, per_head=False):
    d = make_data(cfg)
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
                for h in range(H):
                    K, V = d.K[l, h], None if d.V is None else d.V[l, h]
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
        rows = run_config(cfg, per_head)
    except (ConfigError, KeyError, TypeError) as e:
        sys.stderr.write("oracle: %s: %s\n" % (args[0], e))
        return 1
    write_csv(rows, sys.stdout, per_head)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
