#!/usr/bin/python3
"""The id column of kvc's CSV/JSONL output against an independent implementation of its specification
(README.md, "Sweeps", "Row ids"): FNV-1a 64 of the canonical text, 16 lowercase hex digits.

The canonical text is built here from the config JSON itself, and the method parameters from the JSONL
"params" object (every parameter in registry order). Run from the project root. Prints "PASS name" /
"FAIL name: why"; exits 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")


def fnv1a(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def num(x) -> str:
    """Shortest of %.15g, %.16g, %.17g that reads back to the same double."""
    x = float(x)
    for prec in (15, 16, 17):
        s = "%.*g" % (prec, x)
        if float(s) == x:
            return s
    return s


def canon_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out) + '"'


def canon(v) -> str:
    """Compact JSON, object keys sorted by their UTF-8 bytes, numbers as num()."""
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode())
        return "{" + ",".join(canon_str(k) + ":" + canon(v[k]) for k in keys) + "}"
    if isinstance(v, list):
        return "[" + ",".join(canon(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return num(v)
    return canon_str(v)


def data_text(cfg) -> str:
    seed = str(cfg.get("seed", 0)).lstrip("0") or "0"
    rest = {k: v for k, v in cfg.items() if k not in ("seed", "experiments")}
    return f"kvc-experiment v1\nseed={seed}\nconfig={canon(rest)}\n"


def value_text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return num(v)
    return str(v)


def params_text(params, prefix) -> str:
    """Every listed parameter as "name=value" lines; a pipeline's steps as "steps.S.method=..." and
    "steps.S.name=value" lines after the method line (README "Row ids")."""
    out = []
    for k, v in params.items():
        if k == "steps":
            for s, step in enumerate(v):
                out.append(f"steps.{s}.method={step['method']}\n")
                out.append(params_text({a: b for a, b in step.items() if a != "method"}, f"steps.{s}."))
        else:
            out.append(f"{prefix}{k}={value_text(v)}\n")
    return "".join(out)


def expected_ids(cfg, rows):
    base = data_text(cfg)
    seen = {}
    out = []
    for r in rows:
        text = base + f"method={r['method']}\n" + params_text(r["params"], "")
        n = seen.get(text, 0)
        seen[text] = n + 1
        if n:
            text += f"repeat={n}\n"
        out.append("%016x" % fnv1a(text.encode()))
    return out


def check(name, cfg):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
        path = f.name
    try:
        p = subprocess.run([KVC, "run", path, "--format", "jsonl"], capture_output=True, text=True)
        if p.returncode != 0:
            report(name, f"exit {p.returncode}: {p.stderr.strip()}")
            return
        rows = [json.loads(line) for line in p.stdout.splitlines()]
        want = expected_ids(cfg, rows)
        got = [r["id"] for r in rows]
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        report(name, None if not bad and len(got) == len(want) else f"first mismatches (row, kvc, oracle): {bad[:3]}")
        csv_ids = subprocess.run([KVC, "run", path, "--format", "csv"], capture_output=True, text=True).stdout
        csv_ids = [line.rsplit(",", 1)[1] for line in csv_ids.splitlines()[1:]]
        report(name + "-csv-equals-jsonl", None if csv_ids == got else f"{csv_ids[:2]} vs {got[:2]}")
        # --per-head rows: the experiment's id, its FNV state continued with "layer=L\nhead=H\n"
        p = subprocess.run([KVC, "run", path, "--format", "jsonl", "--per-head"], capture_output=True, text=True)
        heads = [json.loads(line) for line in p.stdout.splitlines()]
        per = len(heads) // max(len(rows), 1)
        want_h = ["%016x" % fnv1a(f"layer={r['layer']}\nhead={r['head']}\n".encode(), int(want[k // per], 16))
                  for k, r in enumerate(heads)]
        report(name + "-per-head", None if p.returncode == 0 and heads and [r["id"] for r in heads] == want_h
               else f"exit {p.returncode} {p.stderr.strip()[:200]}")
    finally:
        os.unlink(path)


for conf in ("configs/lesson.json", "configs/practice.json"):
    with open(conf) as f:
        check("expid-" + os.path.basename(conf)[:-5], json.load(f))

check("expid-mixed", {
    "seed": "0007",
    "data": {"tokens": 40, "head_dim": 6,
             "keys": {"generator": "lowrank", "rank": 3, "scale": 0.3, "noise": 1e-5,
                      "outliers": [{"channel": 4, "scale": 12.5}, {"channel": 0, "scale": -3}]},
             "layers": 2, "kv_heads": 2, "q_heads": 4,
             "values": {"generator": "normal"},
             "query": {"generator": "look_back", "token": 39}},
    "experiments": [
        {"method": "quantize", "bits": [2, 8, 2], "axis": ["channel", "token"]},
        {"method": "lowrank", "rank": [1, 6], "apply_to": "kv", "label": "r{rank}"},
        {"method": "topk_attention", "budget": 5},
        {"method": "sink_window", "sinks": 0, "window": 40},
        {"method": "quantize", "bits": 2, "axis": "channel"},
    ]})
check("expid-methods", {
    "seed": 5,
    "data": {"tokens": 48, "head_dim": 8, "layers": 1, "kv_heads": 4, "q_heads": 8,
             "keys": {"generator": "normal"}, "values": {"generator": "normal"},
             "query": {"generator": "look_back", "count": 2}, "observe": {"window": 8}},
    "experiments": [
        {"method": "lowrank", "energy": [0.5, 0.9], "joint": [False, True]},
        {"method": "lowrank", "rank": 2, "energy": 0, "joint": False},
        {"method": "snapkv", "keep_ratio": 0.25, "pooling": "avg"},
        {"method": "random", "budget": 8},
        {"method": "pipeline", "steps": [{"method": "share_heads", "group": 2},
                                         {"method": "h2o", "budget": [8, 16]},
                                         {"method": "quantize", "bits": 4}]},
        {"method": "pipeline", "label": "lr{rank} int{bits}",
         "steps": [{"method": "lowrank", "rank": 4}, {"method": "quantize", "bits": [4, 8], "axis": "channel"}]},
    ]})
check("expid-keys-only", {"data": {"tokens": 9, "head_dim": 2, "keys": {"generator": "normal"}},
                          "experiments": [{"method": "quantize", "apply_to": "k"}]})
sys.exit(checks.status())
