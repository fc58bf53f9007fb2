#!/usr/bin/python3
"""Differential test of the real-shaped data path: ./kvc run CFG --format csv [--per-head] against the numpy
oracle (tests/oracle.py) on random configs with several layers, KV heads, GQA query heads and queries, and
every generator of README.md "Realistic generators" (head correlation, outlier channels per layer, RoPE with
post- and pre-RoPE caches, query bias and GQA query correlation, key_gaussian queries, observation queries,
spread, heavy hitters, recent tokens, sinks), drawn from a fixed-seed random.Random(2025). A few fixed configs
pin each generator alone. The experiments come from test_differential.gen_experiment.

Run from the project root: /usr/bin/python3 tests/test_differential_multi.py
Prints "PASS multi-<i>" / "FAIL multi-<i>: ..." per config; exits 1 on any failure (configs kept in a temp dir).

Tolerances (tests/difftools.py): same rows, identical label/method/layer/head and empty cells, bytes exact, every other number
within relative 1e-9 of the oracle (absolute 1e-12 below 1e-12; equal infinities). Configs whose metrics
other than attn_kl fall in (1e-12, 1e-6) are redrawn, as in test_differential.py.
"""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402  (tests/checks.py: PASS/FAIL lines)
import difftools  # noqa: E402
import oracle  # noqa: E402
from checks import report  # noqa: E402
import test_differential as td  # noqa: E402

N_RANDOM = 24


def share(r):
    return r.choice([0.1, 0.25, 0.4, 0.6, 0.9])


def gen_config(r, i):
    """A random multi-head config; i picks a few fixed shapes first."""
    T = r.choice([2, 3, 16, 33, 64, 100, 128, 200, 257])
    D = r.choice([2, 4, 8, 16, 32, 64])
    L, H, G = r.randint(1, 3), r.randint(1, 4), r.randint(1, 4)
    data = {"layers": L, "kv_heads": H, "tokens": T, "head_dim": D}
    if G > 1 or r.random() < 0.3:
        data["q_heads"] = H * G
    keys = {"generator": r.choice(["normal", "lowrank"])}
    if keys["generator"] == "lowrank":
        keys.update(rank=r.randint(1, 12), scale=r.choice([0.25, 0.5, 1.0]), noise=r.choice([0.0, 0.1, 0.5]))
    if r.random() < 0.3:
        keys["outliers"] = [{"channel": c, "scale": r.choice([20, 8, -3, 0.5])} for c in r.sample(range(D), 1)]
    if r.random() < 0.5:
        n = r.randint(1, min(4, D))
        keys["outlier_channels"] = {"count": n, "scale": r.choice([5, [10, 100], [2.5, 3.5], 50])}
    data["keys"] = keys
    if r.random() < 0.4:
        divisors = [g for g in range(1, H + 1) if H % g == 0]
        hc = {"rho": r.choice([0.3, 0.8, 1.0, 0.0])}
        if r.random() < 0.7:
            hc["group"] = r.choice(divisors)
        data["head_correlation"] = hc
    has_q = True
    has_v = r.random() < 0.9
    if has_v:
        data["values"] = {"generator": "normal"}
    else:
        has_q = False
    if has_q:
        gen = r.choice(["look_back", "look_back", "key_gaussian"])
        q = {"generator": gen}
        if gen == "look_back":
            form = r.choice(["token", "tokens", "count"])
            if form == "token":
                q["token"] = r.randrange(T)
            elif form == "tokens":
                q["tokens"] = [r.randrange(T) for _ in range(r.randint(1, 5))]
            else:
                q["count"] = r.randint(1, 6)
        else:
            q["count"] = r.randint(1, 6)
        if r.random() < 0.8:
            q["weight"] = r.choice([0.25, 0.5, 1.0, 2.0])
        if r.random() < 0.7:
            q["noise"] = r.choice([0.0, 0.1, 0.5, 1.0])
        if r.random() < 0.4:
            q["head_correlation"] = r.choice([0.0, 0.5, 1.0])
        if r.random() < 0.4:
            q["bias"] = r.choice([0.5, 1.0, 2.0])
        data["query"] = q
    if r.random() < 0.4:
        o = {"window": r.randint(1, min(T, 16))}
        if r.random() < 0.5:
            o["generator"] = r.choice(["look_back", "key_gaussian"])
        if r.random() < 0.5:
            o["weight"] = r.choice([0.5, 1.0])
        if r.random() < 0.5:
            o["noise"] = r.choice([0.0, 0.5])
        data["observe"] = o
    if D >= 2 and r.random() < 0.5:
        rope = {}
        if r.random() < 0.7:
            rope["base"] = r.choice([10000, 500000, 100.0])
        if r.random() < 0.5:
            rope["dims"] = 2 * r.randint(1, D // 2)
        if r.random() < 0.5:
            rope["style"] = r.choice(["half", "interleaved"])
        if r.random() < 0.6:
            rope["cache"] = r.choice(["post", "pre"])
        data["rope"] = rope
    ns = 0
    if has_q and T >= 2 and r.random() < 0.5:
        ns = r.randint(1, min(4, T - 1))
        data["sinks"] = {"tokens": ns, "share": share(r)}
    if has_q and T - 1 - ns >= 1 and r.random() < 0.4:
        data["recent"] = {"tokens": r.randint(1, min(T - 1 - ns, 32)), "share": share(r)}
    if has_q and r.random() < 0.5:
        hh = {}
        if T - 1 - ns >= 1 and r.random() < 0.7:
            hh["count"] = r.randint(1, min(T - 1 - ns, 8))
            hh["share"] = share(r)
        if r.random() < 0.6:
            hh["spread"] = r.choice([0.5, 1.0, 2.0])
        data["heavy_hitters"] = hh
    cfg = {"seed": r.randrange(0, 2 ** 40), "data": data}
    if r.random() < 0.3:
        cfg["metrics"] = {"topk_recall_k": r.randint(1, T)}
    cfg["experiments"] = [td.gen_experiment(r, T, D, has_v, has_q) for _ in range(r.randint(2, 4))]
    return cfg


def fixed_configs():
    """One config per generator (and the GQA/multi-query basics), each alone on a small multi-head shape."""
    base = {"layers": 2, "kv_heads": 2, "q_heads": 4, "tokens": 96, "head_dim": 16,
            "keys": {"generator": "lowrank", "rank": 6, "scale": 0.5, "noise": 0.1},
            "values": {"generator": "normal"},
            "query": {"generator": "look_back", "count": 3, "weight": 0.5, "noise": 0.5}}
    exps = [{"method": "quantize", "bits": [4, 8], "axis": ["token", "channel"]},
            {"method": "sink_window", "sinks": [0, 4], "window": 24},
            {"method": "topk_attention", "budget": [1, 16]},
            {"method": "lowrank", "rank": 4, "apply_to": ["k", "kv"]}]
    variants = [
        ("gqa", {}),
        ("outlier-channels", {"keys": dict(base["keys"], outlier_channels={"count": 3, "scale": [10, 100]})}),
        ("head-correlation", {"head_correlation": {"rho": 0.7, "group": 2}}),
        ("rope-post", {"rope": {"base": 10000}}),
        ("rope-pre-interleaved", {"rope": {"base": 500, "dims": 8, "style": "interleaved", "cache": "pre"}}),
        ("sinks", {"sinks": {"tokens": 4, "share": 0.5}}),
        ("recent", {"recent": {"tokens": 24, "share": 0.5}}),
        ("heavy-hitters", {"heavy_hitters": {"count": 5, "share": 0.3, "spread": 1.0}}),
        ("shaping-pre-rope", {"rope": {"cache": "pre"}, "sinks": {"tokens": 2, "share": 0.3},
                              "heavy_hitters": {"count": 3, "share": 0.2, "spread": 0.5}}),
        ("key-gaussian", {"query": {"generator": "key_gaussian", "count": 4, "weight": 2.0, "noise": 0.1}}),
        ("query-tokens-corr-bias", {"query": {"generator": "look_back", "tokens": [5, 90, 40], "weight": 0.5,
                                              "noise": 0.5, "head_correlation": 0.5, "bias": 1.0}}),
        ("observe", {"observe": {"generator": "key_gaussian", "window": 8, "noise": 0.5},
                     "query": dict(base["query"], bias=1.0)}),
    ]
    out = []
    for name, change in variants:
        data = dict(base)
        data.update(change)
        out.append(("fixed-" + name, {"seed": 11, "data": data, "metrics": {"topk_recall_k": 8},
                                      "experiments": exps}, name in ("gqa", "rope-pre-interleaved")))
    return out


def ill_conditioned(rows):
    """The redraw rule of this test and of test_differential_methods.py: attn_kl is left out."""
    return difftools.ill_conditioned(rows, oracle.COLUMNS[2:], skip=("attn_kl",))


def make_configs():
    r = random.Random(2025)
    out = fixed_configs()
    for i in range(N_RANDOM):
        for _attempt in range(50):
            cfg = gen_config(r, i)
            per_head = r.random() < 0.3
            rows = oracle.run_config(cfg, per_head)
            if not ill_conditioned(rows):
                break
        out.append(("multi-%d" % i, cfg, per_head))
    return out


def main():
    try:
        configs = make_configs()
    except Exception as e:  # noqa: BLE001
        report("multi-generate", "oracle raised %s: %s" % (type(e).__name__, e))
        return checks.status()
    tmp = tempfile.mkdtemp(prefix="kvc-multi-")
    difftools.check_all(tmp, configs)
    return difftools.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
