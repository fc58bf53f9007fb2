#!/usr/bin/python3
"""Independent numpy oracle for kvc.

Usage:  /usr/bin/python3 tests/oracle.py CONFIG.json
Prints one CSV row per expanded experiment with the header
    label,method,attn_error,k_error,v_error,k_error_ordinary,k_zeroed_ordinary,bytes,baseline_bytes,ratio
Empty cell where a metric does not apply; floats are printed with repr().

Importable: run_config(cfg) -> list of dicts (None where a metric does not apply).

Written from the public config spec only (it does not share code with kvc).
"""
import csv
import itertools
import json
import sys

import numpy as np

COLUMNS = ["label", "method", "attn_error", "k_error", "v_error",
           "k_error_ordinary", "k_zeroed_ordinary", "bytes", "baseline_bytes", "ratio"]

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
    s = cfg.get("seed")
    if isinstance(s, str):
        if not s.isdigit():
            raise ConfigError("seed string must be a non-negative decimal integer")
        return int(s)
    if isinstance(s, float) and s.is_integer():
        s = int(s)
    if not _is_int(s) or s < 0:
        raise ConfigError("seed must be a non-negative integer")
    return s


# ---------------------------------------------------------------- data

def make_data(cfg):
    """Returns (K, V or None, q or None, outlier_channels list or None)."""
    data = cfg["data"]
    T = data["tokens"]
    D = data["head_dim"]
    if not (_is_int(T) and _is_int(D) and T >= 1 and D >= 1):
        raise ConfigError("tokens and head_dim must be positive integers")
    rng = np.random.default_rng(int(_seed(cfg)))

    kb = data.get("keys")
    if not isinstance(kb, dict):
        raise ConfigError("data.keys is required")
    gen = kb.get("generator")
    if gen == "normal":
        K = rng.normal(size=(T, D))
    elif gen == "lowrank":
        R = _int_param(kb, "rank")
        if R < 1:
            raise ConfigError("keys rank must be >= 1")
        scale = _num(kb, "scale", 1.0)
        noise = _num(kb, "noise", 0.0)
        A = rng.normal(size=(T, R))
        B = rng.normal(size=(R, D))
        K = (A @ B) * scale
        if noise > 0:
            K = K + noise * rng.normal(size=(T, D))
    else:
        raise ConfigError("unknown keys generator %r" % (gen,))

    outliers = kb.get("outliers")
    out_channels = None
    if outliers is not None:
        if not isinstance(outliers, list):
            raise ConfigError("keys.outliers must be a list")
        out_channels = []
        for o in outliers:
            c = _int_param(o, "channel")
            if not 0 <= c < D:
                raise ConfigError("outlier channel %d out of range" % c)
            K[:, c] *= _num(o, "scale", None)
            out_channels.append(c)

    V = None
    vb = data.get("values")
    if vb is not None:
        if vb.get("generator") != "normal":
            raise ConfigError("unknown values generator %r" % (vb.get("generator"),))
        V = rng.normal(size=(T, D))

    q = None
    qb = data.get("query")
    if qb is not None:
        if V is None:
            raise ConfigError("a query needs values")
        if qb.get("generator") != "look_back":
            raise ConfigError("unknown query generator %r" % (qb.get("generator"),))
        t = _int_param(qb, "token")
        if not 0 <= t < T:
            raise ConfigError("query token out of range")
        weight = _num(qb, "weight", 1.0)
        noise = _num(qb, "noise", 0.0)
        if noise > 0:
            q = K[t] * weight + noise * rng.normal(size=D)
        else:
            q = K[t] * weight
    return K, V, q, out_channels


def attention(q, K, V):
    D = K.shape[1]
    s = (K @ q) / np.sqrt(D)
    w = np.exp(s - s.max())
    w = w / w.sum()
    return w @ V, w


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
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run_config(cfg):
    K, V, q, out_channels = make_data(cfg)
    T, D = K.shape
    has_v = V is not None
    n_tensors = 2 if has_v else 1
    baseline = 2 * T * D * n_tensors
    ref = w_ref = None
    if q is not None:
        ref, w_ref = attention(q, K, V)
    ordinary = None
    if out_channels:
        listed = set(out_channels)
        ordinary = [c for c in range(D) if c not in listed]

    exps = cfg.get("experiments")
    if not isinstance(exps, list):
        raise ConfigError("experiments must be a list")
    rows = []
    for exp in exps:
        for label, method, p in expand(exp):
            row = dict.fromkeys(COLUMNS)
            row["label"] = label
            row["method"] = method
            Kp, Vp = K, V
            modified = ""
            if method == "quantize":
                bits = _int_param(p, "bits")
                if not 2 <= bits <= 8:
                    raise ConfigError("bits must be 2..8")
                axis = p.get("axis", "token")
                if axis not in ("token", "channel"):
                    raise ConfigError("axis must be token or channel")
                modified = _apply_to(p, "kv", has_v)
                n_scales = T if axis == "token" else D
                qbytes = -(-(T * D * bits) // 8) + 2 * n_scales
                nbytes = 0
                if "k" in modified:
                    Kp = quantize(K, bits, axis)
                    nbytes += qbytes
                else:
                    nbytes += 2 * T * D
                if has_v:
                    if "v" in modified:
                        Vp = quantize(V, bits, axis)
                        nbytes += qbytes
                    else:
                        nbytes += 2 * T * D
            elif method == "lowrank":
                rank = _int_param(p, "rank")
                if not 1 <= rank <= min(T, D):
                    raise ConfigError("rank must be 1..min(T, D)")
                modified = _apply_to(p, "k", has_v)
                lbytes = 2 * (T * rank + rank * D)
                nbytes = 0
                if "k" in modified:
                    Kp = lowrank_approx(K, rank)
                    nbytes += lbytes
                else:
                    nbytes += 2 * T * D
                if has_v:
                    if "v" in modified:
                        Vp = lowrank_approx(V, rank)
                        nbytes += lbytes
                    else:
                        nbytes += 2 * T * D
            elif method == "sink_window":
                sinks = _int_param(p, "sinks")
                window = _int_param(p, "window")
                if sinks < 0 or window < 0 or sinks + window > T or sinks + window < 1:
                    raise ConfigError("need sinks, window >= 0 and 1 <= sinks + window <= T")
                kept = np.r_[np.arange(0, sinks), np.arange(T - window, T)].astype(np.intp)
                Kp = K[kept]
                Vp = V[kept] if has_v else None
                nbytes = 2 * len(kept) * D * n_tensors
            elif method == "topk_attention":
                if q is None:
                    raise ConfigError("topk_attention needs a query")
                budget = _int_param(p, "budget")
                if not 1 <= budget <= T:
                    raise ConfigError("budget must be 1..T")
                kept = np.sort(np.argsort(-w_ref, kind="stable")[:budget])
                Kp = K[kept]
                Vp = V[kept]
                nbytes = 2 * len(kept) * D * n_tensors + 4 * len(kept)
            else:
                raise ConfigError("unknown method %r" % (method,))

            if q is not None:
                out, _ = attention(q, Kp, Vp)
                row["attn_error"] = _rel(out, ref)
            if "k" in modified:
                row["k_error"] = _rel(Kp, K)
                if ordinary is not None:
                    row["k_error_ordinary"] = _rel(Kp[:, ordinary], K[:, ordinary])
                    row["k_zeroed_ordinary"] = float(np.mean(Kp[:, ordinary] == 0))
            if "v" in modified:
                row["v_error"] = _rel(Vp, V)
            row["bytes"] = int(nbytes)
            row["baseline_bytes"] = int(baseline)
            row["ratio"] = baseline / nbytes
            rows.append(row)
    return rows


def format_cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(rows, fh):
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([format_cell(r[c]) for c in COLUMNS])


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: oracle.py CONFIG.json\n")
        return 2
    with open(argv[1]) as fh:
        cfg = json.load(fh)
    try:
        rows = run_config(cfg)
    except (ConfigError, KeyError, TypeError) as e:
        sys.stderr.write("oracle: %s: %s\n" % (argv[1], e))
        return 1
    write_csv(rows, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
