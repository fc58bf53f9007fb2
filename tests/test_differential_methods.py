#!/usr/bin/python3
"""Differential test of the methods of README "Methods" that issue 4 added -- eviction (window, h2o, snapkv, tova,
knorm, random), sharing (share_heads), low rank by energy and with a joint basis, and pipelines ("Composition") --
against the numpy oracle (tests/oracle.py), on fixed configs that pin each method and rule and on random multi-head
configs (every data generator, GQA, RoPE with post- and pre-RoPE caches, observation queries) drawn from a
fixed-seed random.Random(2026), with and without --per-head.

Also kvc against itself: a pipeline of one step gives the numbers of that method alone; and `random` with a seed
above 2^64 against the oracle.

Run from the project root: /usr/bin/python3 tests/test_differential_methods.py
Prints "PASS <name>" / "FAIL <name>: ..." per check; exits 1 on any failure (configs kept in a temp dir).
Tolerances: those of tests/difftools.py (bytes exact, other numbers within relative 1e-9).
"""
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402  (tests/checks.py: PASS/FAIL lines)
import difftools  # noqa: E402
import oracle  # noqa: E402
from checks import report  # noqa: E402
import test_differential_multi as tdm  # noqa: E402

N_RANDOM = 30

BASE = {"layers": 2, "kv_heads": 4, "q_heads": 8, "tokens": 96, "head_dim": 16,
        "keys": {"generator": "lowrank", "rank": 6, "scale": 0.5, "noise": 0.1},
        "values": {"generator": "normal"}, "head_correlation": {"rho": 0.6},
        "query": {"generator": "look_back", "count": 3, "weight": 0.5, "noise": 0.5, "bias": 0.5},
        "observe": {"window": 12, "noise": 0.3}}


def fixed_configs():
    """(name, config, per_head): one or a few configs per method and per pipeline rule."""
    ev = [{"method": "window", "budget": [1, 24], "label": "w{budget}"},
          {"method": "window", "keep_ratio": [0.25, 1.0]},
          {"method": "h2o", "budget": 24, "recent_ratio": [0, 0.5, 1]},
          {"method": "h2o", "keep_ratio": 0.3},
          {"method": "snapkv", "budget": [12, 30], "kernel_size": [1, 3, 7], "pooling": ["max", "avg"]},
          {"method": "snapkv", "keep_ratio": 0.25, "window_size": [1, 5]},
          {"method": "tova", "budget": [1, 20, 96]},
          {"method": "knorm", "budget": 20},
          {"method": "knorm", "keep_ratio": 0.5},
          {"method": "random", "budget": [1, 20], "draw": [0, 7]}]
    share = [{"method": "share_heads", "group": [1, 2, 4]}]
    lowr = [{"method": "lowrank", "energy": [0.5, 0.9, 1.0], "apply_to": ["k", "kv"]},
            {"method": "lowrank", "rank": 3, "joint": True, "apply_to": ["v", "kv"]},
            {"method": "lowrank", "energy": 0.8, "joint": True}]
    pipes = [
        {"method": "pipeline", "label": "share{group} snap q{bits}",
         "steps": [{"method": "share_heads", "group": [2, 4]}, {"method": "snapkv", "budget": 24},
                   {"method": "quantize", "bits": [4, 8]}]},
        {"method": "pipeline", "steps": [{"method": "lowrank", "rank": 4},
                                         {"method": "quantize", "bits": 8, "axis": ["token", "channel"]}]},
        {"method": "pipeline", "steps": [{"method": "lowrank", "rank": 4, "apply_to": "kv"},
                                         {"method": "quantize", "bits": 4, "axis": "channel", "apply_to": "kv"},
                                         {"method": "quantize", "bits": 2, "apply_to": "v"}]},
        {"method": "pipeline", "steps": [{"method": "lowrank", "energy": 0.7, "apply_to": "kv"},
                                         {"method": "quantize", "bits": 6}]},
        {"method": "pipeline", "steps": [{"method": "lowrank", "rank": 6, "joint": True, "apply_to": "kv"},
                                         {"method": "lowrank", "energy": 0.9},
                                         {"method": "quantize", "bits": 8, "apply_to": "k"}]},
        {"method": "pipeline", "label": "{steps.0.budget} then {steps.1.budget}",
         "steps": [{"method": "window", "budget": 60}, {"method": "window", "budget": 30}]},
        {"method": "pipeline", "steps": [{"method": "sink_window", "sinks": 4, "window": 40},
                                         {"method": "h2o", "budget": 20}]},
        {"method": "pipeline", "steps": [{"method": "h2o", "budget": 40}, {"method": "window", "budget": 12},
                                         {"method": "lowrank", "rank": 2}]},
        {"method": "pipeline", "steps": [{"method": "share_heads", "group": 2}, {"method": "topk_attention", "budget": 30},
                                         {"method": "tova", "budget": 15}, {"method": "random", "budget": 10}]},
        {"method": "pipeline", "steps": [{"method": "share_heads", "group": 4},
                                         {"method": "lowrank", "energy": 0.95, "joint": True, "apply_to": "kv"}]},
        {"method": "pipeline", "steps": [{"method": "knorm", "keep_ratio": 0.5},
                                         {"method": "snapkv", "budget": 24, "window_size": 4, "pooling": "avg"}]},
    ]
    out = []

    def cfg(data_change, exps, seed=21):
        data = json.loads(json.dumps(BASE))
        data.update(data_change)
        for k in [k for k, v in data.items() if v is None]:
            del data[k]
        return {"seed": seed, "data": data, "metrics": {"topk_recall_k": 8}, "experiments": exps}

    out.append(("fixed-evict", cfg({}, ev), False))
    out.append(("fixed-evict-heads", cfg({}, ev[2:5]), True))
    out.append(("fixed-evict-rope-pre", cfg({"rope": {"cache": "pre", "base": 500}, "sinks": {"tokens": 3, "share": 0.4},
                                             "heavy_hitters": {"count": 4, "share": 0.3, "spread": 1.0}},
                                            ev[2:]), False))
    out.append(("fixed-evict-rope-post-kg", cfg({"rope": {"style": "interleaved"}, "recent": {"tokens": 10, "share": 0.4},
                                                 "observe": {"generator": "key_gaussian", "window": 10}}, ev), False))
    out.append(("fixed-share", cfg({}, share + [{"method": "share_heads", "group": 2}]), False))
    out.append(("fixed-share-small", cfg({"tokens": 33, "head_dim": 6}, share), True))
    out.append(("fixed-share-rope-pre", cfg({"rope": {"cache": "pre"}, "q_heads": 4}, share), False))
    out.append(("fixed-lowrank", cfg({}, lowr), False))
    out.append(("fixed-lowrank-small", cfg({"tokens": 10, "head_dim": 12, "observe": None}, lowr), True))
    out.append(("fixed-pipelines", cfg({}, pipes), False))
    out.append(("fixed-pipelines-rope-pre", cfg({"layers": 1, "rope": {"cache": "pre"}}, pipes), True))
    out.append(("fixed-pipelines-outliers", cfg({"keys": dict(BASE["keys"], outlier_channels={"count": 2, "scale": 20}),
                                                  "sinks": {"tokens": 2, "share": 0.5}}, pipes[:5]), False))
    quant = [{"method": "pipeline", "steps": [{"method": "share_heads", "group": 2},
                                              {"method": "cast", "format": ["fp8_e4m3", "bf16"],
                                               "scale": ["tensor", "token"]}]},
             {"method": "pipeline", "steps": [{"method": "snapkv", "budget": 40},
                                              {"method": "kivi", "k_bits": 4, "v_bits": 2, "group_size": 8,
                                               "residual": 8}]},
             {"method": "pipeline", "steps": [{"method": "lowrank", "rank": 4, "apply_to": "kv"},
                                              {"method": "cast", "format": "fp8_e5m2", "scale": "tensor"}]},
             {"method": "pipeline", "steps": [{"method": "lowrank", "rank": 8},
                                              {"method": "quantize", "bits": 4, "rotate": "hadamard",
                                               "symmetric": False, "axis": "channel"}]},
             {"method": "pipeline", "steps": [{"method": "h2o", "keep_ratio": 0.5},
                                              {"method": "ggml", "type": ["q4_0", "q8_0"], "apply_to": "v"}]}]
    out.append(("fixed-pipelines-quant", cfg({"head_dim": 32, "rope": {"cache": "pre"}}, quant), False))
    out.append(("fixed-pipelines-quant-heads", cfg({"layers": 1, "head_dim": 32}, quant[:3]), True))
    keys_only = cfg({"values": None, "query": None, "observe": None},
                    [{"method": "window", "budget": 10}, {"method": "knorm", "budget": 10},
                     {"method": "random", "keep_ratio": 0.5},
                     {"method": "share_heads", "group": [2, 4]}, {"method": "lowrank", "energy": 0.9, "joint": True},
                     {"method": "pipeline", "steps": [{"method": "share_heads", "group": 2},
                                                      {"method": "knorm", "budget": 30},
                                                      {"method": "lowrank", "rank": 3},
                                                      {"method": "quantize", "bits": 4, "apply_to": "k"}]}], seed=3)
    out.append(("fixed-keys-only", keys_only, False))
    # the peer-exact variants (README "What the peers do"; tests/test_peers.py checks them against the peers' code)
    peers = [{"method": "h2o", "normalize": True, "recent_ratio": [0, 0.25], "budget": 24},
             {"method": "h2o", "normalize": True, "compression_ratio": [0.5, 0.9]},
             {"method": "tova", "heads": "layer", "budget": [1, 20]},
             {"method": "tova", "heads": "layer", "compression_ratio": 0.7},
             {"method": "snapkv", "compression_ratio": 0.6, "window_size": 4, "pooling": "avg"},
             {"method": "window", "compression_ratio": 0.75},
             {"method": "random", "compression_ratio": 0.5, "draw": 3},
             {"method": "sink_window", "sinks": [0, 2], "compression_ratio": [0.3, 0.9]},
             {"method": "pipeline", "steps": [{"method": "share_heads", "group": 2},
                                              {"method": "tova", "heads": "layer", "keep_ratio": 0.5}]},
             {"method": "pipeline", "steps": [{"method": "sink_window", "sinks": 4, "compression_ratio": 0.5},
                                              {"method": "tova", "heads": "layer", "budget": 20},
                                              {"method": "h2o", "normalize": True, "budget": 10}]}]
    out.append(("fixed-peers", cfg({}, peers), False))
    out.append(("fixed-peers-heads", cfg({"rope": {"cache": "pre"}, "observe": {"window": 30, "noise": 0.3}},
                                         peers), True))
    values_no_query = cfg({"query": None, "observe": None},
                          [{"method": "share_heads", "group": 4}, {"method": "window", "budget": 5},
                           {"method": "pipeline", "steps": [{"method": "random", "budget": 50},
                                                            {"method": "quantize", "bits": 3}]}], seed=4)
    out.append(("fixed-values-no-query", values_no_query, True))
    return out


def budget_or_ratio(r, T, lo=1):
    if r.random() < 0.5:
        return {"budget": r.randint(max(lo, 1), T)}
    while True:
        ratio = r.choice([0.05, 0.1, 0.25, 0.5, 0.75, 1.0])
        if max(1, int(ratio * T)) >= lo:
            return {"keep_ratio": ratio}


def gen_eviction(r, T, W, has_q, for_pipeline=False):
    names = ["window", "knorm", "random", "sink_window"] if for_pipeline else ["window", "knorm", "random"]
    if W:
        names += ["h2o", "snapkv", "tova"]
    if has_q:
        names.append("topk_attention")
    m = r.choice(names)
    e = {"method": m}
    if m == "sink_window":
        s = r.randint(0, min(4, T))
        e.update(sinks=s, window=r.randint(1 if s == 0 else 0, T - s))
    elif m == "topk_attention":
        e["budget"] = r.randint(1, T)
    elif m == "snapkv":
        ws = r.choice([0, r.randint(1, W)])
        e.update(budget_or_ratio(r, T, lo=ws or W))
        if ws:
            e["window_size"] = ws
        e["kernel_size"] = r.choice([1, 3, 5, 7])
        e["pooling"] = r.choice(["max", "avg"])
    else:
        e.update(budget_or_ratio(r, T))
        if m == "h2o" and r.random() < 0.5:
            e["recent_ratio"] = r.choice([0, 0.25, 0.5, 1])
        if m == "random" and r.random() < 0.5:
            e["draw"] = r.randint(0, 5)
    return e


def kept_after(e, T):
    if e["method"] == "sink_window":
        return e["sinks"] + e["window"]
    if "budget" in e:
        return min(e["budget"], T)
    return max(1, int(e["keep_ratio"] * T))


def gen_pipeline(r, T, D, H, W, has_v, has_q):
    steps = []
    if r.random() < 0.4:
        steps.append({"method": "share_heads", "group": r.choice([g for g in range(1, H + 1) if H % g == 0])})
    n = T
    for _ in range(r.choice([0, 1, 1, 2])):
        e = gen_eviction(r, n, W if n >= W else 0, has_q, for_pipeline=True)
        steps.append(e)
        n = kept_after(e, n)
    lowranks = 0
    for _ in range(r.choice([0, 1, 1, 2])):
        if r.random() < 0.5:
            e = {"method": "quantize", "bits": r.randint(2, 8), "axis": r.choice(["token", "channel"])}
            if has_v:
                e["apply_to"] = r.choice(["k", "v", "kv"])
            else:
                e["apply_to"] = "k"
        else:
            e = {"method": "lowrank"}
            if lowranks == 0 and r.random() < 0.5:
                e["rank"] = r.randint(1, min(n, D))
            else:
                e["energy"] = r.choice([0.5, 0.8, 0.95, 1.0])
            if has_v:
                e["apply_to"] = r.choice(["k", "v", "kv"])
            if r.random() < 0.3:
                e["joint"] = True
            lowranks += 1
        steps.append(e)
    if not steps:
        steps.append({"method": "window", "budget": r.randint(1, T)})
    return {"method": "pipeline", "steps": steps}


def gen_experiment(r, T, D, H, W, has_v, has_q):
    kind = r.choice(["evict", "evict", "share", "lowrank", "pipeline", "pipeline", "pipeline"])
    if kind == "evict":
        e = gen_eviction(r, T, W, has_q)
    elif kind == "share":
        e = {"method": "share_heads", "group": r.choice([g for g in range(1, H + 1) if H % g == 0])}
    elif kind == "lowrank":
        e = {"method": "lowrank", "energy": r.choice([0.3, 0.6, 0.9, 0.99])}
        if has_v:
            e["apply_to"] = r.choice(["k", "v", "kv"])
        if r.random() < 0.5:
            e["joint"] = True
    else:
        e = gen_pipeline(r, T, D, H, W, has_v, has_q)
    return e


def gen_config(r, i):
    cfg = tdm.gen_config(r, i)
    data = cfg["data"]
    T, D, H = data["tokens"], data["head_dim"], data.get("kv_heads", 1)
    has_v, has_q = "values" in data, "query" in data
    if r.random() < 0.8:
        data["observe"] = dict(data.get("observe", {}), window=r.randint(1, min(T, 16)))
    W = data["observe"]["window"] if "observe" in data else 0
    cfg["experiments"] = [gen_experiment(r, T, D, H, W, has_v, has_q) for _ in range(r.randint(2, 4))]
    return cfg


def make_configs():
    r = random.Random(2026)
    out = fixed_configs()
    for i in range(N_RANDOM):
        for _attempt in range(50):
            cfg = gen_config(r, i)
            per_head = r.random() < 0.3
            rows = oracle.run_config(cfg, per_head)
            if not tdm.ill_conditioned(rows):
                break
        out.append(("methods-%d" % i, cfg, per_head))
    return out


def self_checks(tmp):
    """kvc against itself: one-step pipelines equal their method; random's draws nest across budgets."""
    single = [{"method": "window", "keep_ratio": 0.3}, {"method": "h2o", "budget": 20}, {"method": "snapkv", "budget": 20},
              {"method": "tova", "budget": 20}, {"method": "knorm", "budget": 20}, {"method": "random", "budget": 20},
              {"method": "topk_attention", "budget": 20}, {"method": "sink_window", "window": 20},
              {"method": "share_heads", "group": 2}, {"method": "lowrank", "rank": 5, "apply_to": "kv"},
              {"method": "lowrank", "energy": 0.9, "joint": True, "apply_to": "kv"},
              {"method": "quantize", "bits": 4, "axis": "channel"}]
    exps = []
    for e in single:
        exps.append(dict(e, label=e["method"]))
        step = {k: v for k, v in e.items()}
        exps.append({"method": "pipeline", "label": e["method"], "steps": [step]})
    cfg = {"seed": 9, "data": BASE, "experiments": exps}
    path = os.path.join(tmp, "self.json")
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    for per_head in (False, True):
        got, err = difftools.kvc_csv(path, per_head)
        name = "pipeline-one-step-equals-method" + ("-per-head" if per_head else "")
        if err:
            report(name, err)
            continue
        header, rows = got
        cols = [c for c in header if c not in ("method", "id", "decode_ns", "decode_speedup", "decode_ns_mad")]   # timing varies
        per = len(rows) // len(exps)
        bad = []
        for k in range(0, len(exps), 2):
            for j in range(per):
                a, b = rows[k * per + j], rows[(k + 1) * per + j]
                bad += ["%s %s: %s vs %s" % (a["label"], c, a[c], b[c]) for c in cols if a[c] != b[c]]
        report(name, "; ".join(bad[:difftools.MAX_SHOWN]) if bad else None)
    # random with a seed above 2^64 (its words start the method's own SeedSequence entropy)
    data = dict(BASE, layers=1, kv_heads=2, q_heads=2, tokens=40)
    p = os.path.join(tmp, "random.json")
    ok = True
    for b in (5, 17, 40):
        c = {"seed": "12345678901234567890", "data": data, "experiments": [{"method": "random", "budget": b}]}
        with open(p, "w") as fh:
            json.dump(c, fh)
        got, err = difftools.kvc_csv(p, True)
        orows = oracle.run_config(dict(c, seed=12345678901234567890), True)
        if err or difftools.compare(got[1], got[0], orows, oracle.PER_HEAD_COLUMNS):
            ok = False
    report("random-big-seed", None if ok else "kvc and the oracle disagree for a seed above 2^64")


def main():
    try:
        configs = make_configs()
    except Exception as e:  # noqa: BLE001
        report("methods-generate", "oracle raised %s: %s" % (type(e).__name__, e))
        return checks.status()
    tmp = tempfile.mkdtemp(prefix="kvc-methods-")
    difftools.check_all(tmp, configs, show_rows=True)
    self_checks(tmp)
    return difftools.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
