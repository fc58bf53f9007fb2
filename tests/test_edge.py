#!/usr/bin/python3
"""test_edge.py: numerical edge cases through kvc run (README "Numerical edge cases").

Degenerate shapes and data (all-zero keys, a zeroed channel, T = 1, D = 1, rank = D, rank = T,
budget = T, sinks + window = T) are compared against the numpy oracle (tests/oracle.py, relative 1e-9, as
test_differential does) and checked for the exact values the README promises (0 where nothing is lost, 0
when both norms are 0). Extreme magnitudes (keys and outlier scales 1e-200 .. 1e140) must give finite
numbers; the K/V errors must not depend on the scale (relative 1e-12, absolute 1e-14), which needs the scaled norm where
numpy's sqrt(ddot) overflows or underflows. Scales at which an attention score could overflow, or the
keys themselves, are errors (exit 2, one line), never NaN. No output cell is ever nan.

Run from the project root: /usr/bin/python3 tests/test_edge.py   (KVC=path overrides ./kvc)
Prints "PASS <name>" / "FAIL <name>: <why>" per check; exits 1 if any check failed. About 2 s.
"""
import copy
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
TMP = tempfile.mkdtemp(prefix="kvc-edge-")
ERR_RE = re.compile(r"^kvc: (.+): (.+) \(got (.*)\)\n$")
FLOAT_COLS = ["attn_error", "k_error", "v_error", "k_error_ordinary", "k_zeroed_ordinary", "ratio",
              "attn_error_p50", "attn_error_p95", "attn_error_max", "attn_kl", "retained_mass", "topk_recall"]


def config(T=16, D=8, keys=None, values=True, query=True, exps=None, seed=5):
    c = {"seed": seed, "data": {"tokens": T, "head_dim": D,
                                "keys": keys or {"generator": "lowrank", "rank": min(4, T, D), "scale": 1.0,
                                                 "noise": 0.0}}}
    if values:
        c["data"]["values"] = {"generator": "normal"}
    if query:
        c["data"]["query"] = {"generator": "look_back", "token": T // 2, "weight": 0.5, "noise": 0.5}
    c["experiments"] = exps or [
        {"method": "quantize", "bits": [2, 8], "axis": ["token", "channel"], "apply_to": "kv" if values else "k"},
        {"method": "lowrank", "rank": sorted({1, min(T, D)}), "apply_to": "kv" if values else "k"},
    ] + ([{"method": "sink_window", "sinks": 0, "window": [1, T]},
          {"method": "topk_attention", "budget": sorted({1, T})}] if query else [])
    return c


def run_kvc(cfg, name):
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    p = subprocess.run([KVC, "run", path, "--format", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def rows_of(text):
    return list(csv.DictReader(io.StringIO(text)))


def num(cell):
    return None if cell == "" else float(cell)


def no_nan(rows):
    for r in rows:
        for k, v in r.items():
            if v is not None and v.strip().lower() in ("nan", "-nan", "+nan"):
                return "nan in %s of row %r" % (k, r["label"])
    return None


def close(a, b, rel=1e-9, abs_=1e-12):
    if a is None or b is None:
        return a is None and b is None
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(rel * abs(b), abs_)


def against_oracle(name, cfg, extra=None):
    """kvc == oracle (relative 1e-9); then extra(rows) -> None or why."""
    rc, out, err = run_kvc(cfg, name)
    if rc != 0:
        report(name, "exit %d: %s" % (rc, err.strip()[:300]))
        return None
    rows = rows_of(out)
    why = no_nan(rows)
    if why is None:
        want = oracle.run_config(copy.deepcopy(cfg))
        if len(want) != len(rows):
            why = "%d rows, oracle %d" % (len(rows), len(want))
        for r, w in zip(rows, want):
            if why:
                break
            for col in FLOAT_COLS:
                if col not in r or col not in w:
                    continue
                a, b = num(r[col]), w[col]
                if not close(a, b):
                    why = "%s %s: kvc %r, oracle %r" % (r["label"], col, r[col], b)
                    break
    if why is None and extra:
        why = extra(rows)
    report(name, why)
    return rows


def expect(rows, label_re, col, pred, what):
    """pred(value) must hold for col in every row whose label matches label_re."""
    hit = 0
    for r in rows:
        if re.search(label_re, r["label"]):
            hit += 1
            v = num(r[col])
            if not pred(v):
                return "%s of %r is %r, want %s" % (col, r["label"], r[col], what)
    return None if hit else "no row matches %r" % label_re


def all_of(*checks):
    def f(rows):
        for c in checks:
            why = c(rows)
            if why:
                return why
        return None
    return f


def zero(col, label_re):
    return lambda rows: expect(rows, label_re, col, lambda v: v == 0.0, "exactly 0")


def tiny(col, label_re, bound=1e-13):
    return lambda rows: expect(rows, label_re, col, lambda v: v is not None and 0 <= v < bound, "< %g" % bound)


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make (run from the project root)" % KVC)
        return 1

    # ---- all-zero keys (lowrank keys with scale 0): every score 0, uniform attention; K errors 0 (0/0 is 0)
    zk = config(keys={"generator": "lowrank", "rank": 4, "scale": 0.0, "noise": 0.0})
    against_oracle("zero-keys", zk, all_of(zero("k_error", "quantize|lowrank"),
                                           zero("attn_error", "topk_attention budget=16"),
                                           zero("attn_error", "sink_window sinks=0 window=16")))
    zk_only = config(keys={"generator": "lowrank", "rank": 4, "scale": 0.0, "noise": 0.0},
                     exps=[{"method": "quantize", "bits": [2, 8], "apply_to": "k"},
                           {"method": "lowrank", "rank": [1, 8], "apply_to": "k"}])
    against_oracle("zero-keys-k-only", zk_only, all_of(zero("k_error", "."), zero("attn_error", ".")))
    # one channel zeroed by an outlier scale of 0, and a channel scaled by 1e-30
    oc = config(keys={"generator": "normal", "outliers": [{"channel": 2, "scale": 0.0},
                                                          {"channel": 5, "scale": 1e-30}]})
    against_oracle("outlier-scale-0-and-1e-30", oc)
    # constant keys: rank-1 lowrank keys (A @ B with rank 1 is not constant, but all rows are parallel)
    against_oracle("rank-1-keys", config(keys={"generator": "lowrank", "rank": 1, "scale": 3.0, "noise": 0.0}),
                   tiny("k_error", "lowrank rank=1 apply_to=kv", 1e-12))

    # ---- degenerate shapes
    against_oracle("T-1", config(T=1, D=8), all_of(zero("attn_error", "sink_window|topk_attention"),
                                                 tiny("k_error", "lowrank rank=1")))
    against_oracle("D-1", config(T=16, D=1), all_of(tiny("k_error", "lowrank rank=1"),
                                                  tiny("attn_error", "lowrank rank=1", 1e-12)))
    against_oracle("T-1-D-1", config(T=1, D=1), zero("attn_error", "sink_window|topk_attention"))
    against_oracle("rank-eq-D", config(T=16, D=8), all_of(tiny("k_error", "lowrank rank=8"),
                                                        tiny("v_error", "lowrank rank=8"),
                                                        tiny("attn_error", "lowrank rank=8", 1e-12)))
    against_oracle("rank-eq-T", config(T=4, D=8), tiny("k_error", "lowrank rank=4"))
    against_oracle("budget-eq-T-window-eq-T", config(T=16, D=8),
                   all_of(zero("attn_error", "topk_attention budget=16"),
                          zero("attn_error", "sink_window sinks=0 window=16")))

    # ---- extreme magnitudes: K/V errors do not depend on the scale; everything finite
    def keys_cfg(scale, outlier=None, query=True):
        k = {"generator": "lowrank", "rank": 4, "scale": scale, "noise": 0.0}
        if outlier is not None:
            k["outliers"] = [{"channel": 3, "scale": outlier}]
        return config(keys=k, query=query, values=True)

    def kv_errors(rows):
        return [(r["label"], num(r["k_error"]), num(r["v_error"])) for r in rows]

    rc, out, err = run_kvc(keys_cfg(1.0, query=False), "scale-1")
    base = kv_errors(rows_of(out)) if rc == 0 else None
    report("scale-1-runs", None if base else "exit %d: %s" % (rc, err[:300]))
    for scale in (1e-200, 1e-160, 1e-30, 1e30, 1e140, 1e200, 1e300):
        for query in (False, True):
            if query and scale > 1e140:
                continue   # refused below: the scores could overflow
            name = "scale-%g%s" % (scale, "-with-query" if query else "-keys-values")
            rc, out, err = run_kvc(keys_cfg(scale, query=query), name)
            rows = rows_of(out) if rc == 0 else []
            why = "exit %d: %s" % (rc, err[:300]) if rc != 0 else no_nan(rows)
            if why is None:
                for r in rows:
                    for col in FLOAT_COLS:
                        v = num(r.get(col, ""))
                        if v is not None and not math.isfinite(v):
                            why = "%s %s = %r" % (r["label"], col, r[col])
            if why is None and base and not query:
                for (lab, k, v), (lab0, k0, v0) in zip(kv_errors(rows), base):
                    if lab != lab0 or not close(k, k0, 1e-12, 1e-14) or not close(v, v0, 1e-12, 1e-14):
                        why = "%s: k_error %r v_error %r, at scale 1: %r %r" % (lab, k, v, k0, v0)
                        break
            report(name, why)
    # an outlier channel at 1e-30 and 1e30 times the others: finite everywhere, and the same as numpy
    against_oracle("outlier-1e30", keys_cfg(1.0, outlier=1e30))
    against_oracle("outlier-1e-30", keys_cfg(1.0, outlier=1e-30))
    against_oracle("scale-1e30-oracle", keys_cfg(1e30))
    against_oracle("scale-1e-30-oracle", keys_cfg(1e-30))

    # ---- beyond the limits: one-line errors, exit 2, nothing on stdout
    for name, cfg, what in (
            ("score-overflow-keys-scale", keys_cfg(1e160), r"attention scores q\.k could overflow"),
            ("score-overflow-outlier", keys_cfg(1.0, outlier=1e200), r"attention scores q\.k could overflow"),
            ("keys-overflow", keys_cfg(1e308, query=False), r"the keys overflow a double"),
            ("query-overflow", dict(keys_cfg(1.0), data=dict(keys_cfg(1.0)["data"], query={
                "generator": "look_back", "token": 3, "weight": 1e308})), r"overflow")):
        rc, out, err = run_kvc(cfg, name)
        m = ERR_RE.match(err)
        report(name, None if rc == 2 and out == "" and m and re.search(what, err)
               else "exit %d, stdout %r, stderr %r" % (rc, out[:100], err[:300]))
    # a stored format that cannot hold the data (FP16 codes above 65504): an error (exit 1, like every method
    # failure), after the rows already finished; never a NaN row
    f16 = keys_cfg(1e10)
    f16["experiments"] = [{"method": "quantize", "bits": 4}, {"method": "cast", "format": "f16", "apply_to": "k"}]
    rc, out, err = run_kvc(f16, "format-overflow-f16")
    m = ERR_RE.match(err)
    rows = rows_of(out) if out else []
    report("format-overflow-f16", None if rc == 1 and m and "cannot hold data this large" in err and
           len(rows) == 1 and no_nan(rows) is None
           else "exit %d, %d rows, stderr %r" % (rc, len(rows), err[:300]))
    return checks.status()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
