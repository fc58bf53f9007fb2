#!/usr/bin/python3
"""Differential test of the quantizers: ./kvc run CFG --format csv [--per-head] against the numpy oracle
(tests/oracle.py, which runs tests/oracle_quant.py for quantize, kivi, cast and ggml).

Fixed configs pin every option (quantize's symmetric / group_size / scale_dtype, kivi's groups and residual,
cast's formats and scales, every ggml type, rotate "hadamard", outliers) on the lesson's single head and on a
multi-layer GQA cache with pre-RoPE keys and outlier channels; random configs (random.Random(2026)) draw the data
from test_differential_multi.gen_config and the experiments from gen_quant below.

Run from the project root: /usr/bin/python3 tests/test_differential_quant.py
Prints "PASS quant-<name>" / "FAIL quant-<name>: ..." per config; exits 1 on any failure (configs kept in a temp
dir). Tolerances of tests/difftools.py: bytes exact, every other number within relative 1e-9; random
configs with a metric in (1e-12, 1e-6), attn_kl included, are redrawn.
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
import test_differential_multi as tdm  # noqa: E402

N_RANDOM = 8


def maybe(r, values, p_list=0.4):
    values = list(values)
    if len(values) >= 2 and r.random() < p_list:
        return r.sample(values, 2)
    return r.choice(values)


def gen_quant(r, T, D, has_v):
    """One experiment of a quantizer with random options valid for (T, D)."""
    pow2 = D & (D - 1) == 0
    method = r.choice(["quantize", "quantize", "kivi", "cast", "ggml"])
    p = {}
    if r.random() < 0.3 and pow2:
        p["rotate"] = "hadamard"
    if r.random() < 0.3:
        p["outliers"] = r.choice([0.001, 0.02, 0.1])
    if method == "quantize":
        p["bits"] = maybe(r, range(2, 9))
        p["axis"] = r.choice(["token", "channel"])
        if r.random() < 0.6:
            p["symmetric"] = r.choice([True, False])
        if r.random() < 0.6:
            p["group_size"] = maybe(r, [0, 1, 3, 8, 16, 32])
        if r.random() < 0.6:
            p["scale_dtype"] = maybe(r, ["fp16", "fp16_exact", "fp32"])
        p["apply_to"] = r.choice(["k", "v", "kv"] if has_v else ["k"])
    elif method == "kivi":
        p["k_bits"] = maybe(r, [2, 4, 8])
        p["v_bits"] = r.choice([2, 4, 8])
        p["group_size"] = r.choice([1, 4, 16, 32])
        p["residual"] = maybe(r, sorted({0, 1, T // 3, T, T + 5}))
        if r.random() < 0.5:
            p["scale_dtype"] = r.choice(["fp16", "fp16_exact", "fp32"])
    elif method == "cast":
        p["format"] = maybe(r, ["f16", "bf16", "fp8_e4m3", "fp8_e5m2"])
        p["scale"] = maybe(r, ["none", "tensor", "head", "token"])
        p["apply_to"] = r.choice(["k", "v", "kv"] if has_v else ["k"])
    else:
        p["type"] = maybe(r, ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "f16", "bf16"]
                          if D % 32 == 0 else ["f16", "bf16"])
        p["apply_to"] = r.choice(["k", "kv"] if has_v else ["k"])
    exp = {"method": method}
    exp.update(p)
    if r.random() < 0.5:
        exp["label"] = method + " " + " ".join("%s={%s}" % (k, k) for k in p)
    return exp


LESSON = {"tokens": 512, "head_dim": 64,
          "keys": {"generator": "lowrank", "rank": 16, "scale": 0.25, "noise": 0.1},
          "values": {"generator": "normal"},
          "query": {"generator": "look_back", "token": 200, "weight": 0.5, "noise": 0.5}}
MULTI = {"layers": 2, "kv_heads": 2, "q_heads": 4, "tokens": 70, "head_dim": 32,
         "keys": {"generator": "lowrank", "rank": 6, "scale": 0.5, "noise": 0.1,
                  "outlier_channels": {"count": 2, "scale": [10, 100]}},
         "values": {"generator": "normal"},
         "rope": {"cache": "pre"},
         "query": {"generator": "look_back", "count": 3, "weight": 0.5, "noise": 0.5}}


def fixed_configs():
    quantize = [
        {"label": "lesson INT{bits}", "method": "quantize", "bits": [8, 4, 2]},
        {"method": "quantize", "bits": [3, 4], "axis": ["token", "channel"], "symmetric": [True, False],
         "group_size": [0, 16], "scale_dtype": ["fp16", "fp16_exact", "fp32"]},
        {"method": "quantize", "bits": 4, "group_size": 7, "axis": "channel", "apply_to": "v"},
        {"method": "quantize", "bits": 2, "rotate": ["none", "hadamard"], "outliers": [0, 0.005, 0.05]},
    ]
    others = [
        {"method": "kivi", "k_bits": [2, 4, 8], "v_bits": [2, 8], "group_size": [16, 32], "residual": [0, 20, 128]},
        {"method": "kivi", "residual": 32, "scale_dtype": ["fp16", "fp32"], "rotate": "hadamard", "outliers": 0.01},
        {"method": "cast", "format": ["f16", "bf16", "fp8_e4m3", "fp8_e5m2"], "scale": ["none", "tensor", "head",
                                                                                         "token"]},
        {"method": "cast", "scale": "tensor", "apply_to": ["k", "v"], "rotate": "hadamard", "outliers": 0.02},
        {"method": "ggml", "type": ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "f16", "bf16"],
         "apply_to": ["k", "kv"]},
        {"method": "ggml", "type": ["q4_0", "iq4_nl"], "rotate": "hadamard", "outliers": [0, 0.01]},
    ]
    small_lesson = dict(LESSON, tokens=256)
    return [
        ("lesson-quantize", {"seed": 42, "data": LESSON, "experiments": quantize}, False),
        ("lesson-others", {"seed": 42, "data": small_lesson, "experiments": others}, False),
        ("multi-gqa-pre-rope", {"seed": "18446744073709551617", "data": MULTI,
                                "experiments": quantize[1:] + others}, False),
        ("multi-per-head", {"seed": 5, "data": dict(MULTI, kv_heads=3, q_heads=3),
                            "experiments": [others[2], others[3], quantize[3]]}, True),
        ("keys-only", {"seed": 3, "data": {"tokens": 40, "head_dim": 32, "keys": {"generator": "normal"}},
                       "experiments": [{"method": "kivi", "residual": 8, "group_size": 8},
                                       {"method": "quantize", "symmetric": False, "apply_to": "k"},
                                       {"method": "cast", "scale": "tensor", "apply_to": "k"},
                                       {"method": "ggml", "type": "q5_1", "apply_to": "k"}]}, False),
    ]


def ill_conditioned(rows):
    """Metrics in (1e-12, 1e-6), attn_kl included: a near-lossless cast (f16) gives an attn_kl of 1e-8 whose
    last digits are rounding noise of two correct implementations."""
    return difftools.ill_conditioned(rows, oracle.COLUMNS[2:])


def random_configs():
    r = random.Random(2026)
    out = []
    for i in range(N_RANDOM):
        for _attempt in range(50):
            cfg = tdm.gen_config(r, i)
            data = cfg["data"]
            has_v = "values" in data
            cfg["experiments"] = [gen_quant(r, data["tokens"], data["head_dim"], has_v) for _ in range(r.randint(2, 3))]
            per_head = r.random() < 0.3
            rows = oracle.run_config(cfg, per_head)
            if not ill_conditioned(rows):
                break
        out.append(("random-%d" % i, cfg, per_head))
    return out


def main():
    try:
        configs = fixed_configs() + random_configs()
    except Exception as e:  # noqa: BLE001
        report("quant-generate", "oracle raised %s: %s" % (type(e).__name__, e))
        return checks.status()
    tmp = tempfile.mkdtemp(prefix="kvc-quant-")
    difftools.check_all(tmp, configs, prefix="quant-", per_head_suffix=False, show_rows=True, timeout=300)
    return difftools.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
