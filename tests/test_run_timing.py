#!/usr/bin/env python3
"""kvc run's decode_ns / decode_speedup columns from the outside (README "Decode timing in kvc run"): which rows
get them, --no-timing, --per-head, --threads, --timing-repeat, the stderr note for a form the decode path cannot
read and the one for a form without fused kernels (once per form), one FP16 reference for every row of a run, and
that timing changes nothing else in a row. No speed is asserted (timing targets live in make bench).
Prints PASS/FAIL lines; exits 1 on any failure."""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
TIMING = ("decode_ns", "decode_speedup", "decode_ns_mad")


def run(args):
    p = subprocess.run([KVC] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def rows_of(out):
    return list(csv.DictReader(io.StringIO(out)))


CFG = {
    "seed": 3,
    "data": {"tokens": 256, "head_dim": 64, "layers": 2, "kv_heads": 2, "q_heads": 4,
             "keys": {"generator": "normal"}, "values": {"generator": "normal"},
             "query": {"generator": "look_back", "token": 100},
             "observe": {"window": 16, "weight": 0.5, "noise": 0.5}},
    "experiments": [
        {"method": "quantize", "bits": [8, 4, 2]},
        {"method": "quantize", "bits": 4, "group_size": 16, "symmetric": False},
        {"method": "kivi", "k_bits": 4, "v_bits": 4, "residual": 64},
        {"method": "cast", "format": "fp8_e4m3"},
        {"method": "ggml", "type": ["q8_0", "q4_1"]},
        {"method": "window", "budget": 64},
        {"method": "knorm", "budget": 64},
        {"method": "lowrank", "rank": 16, "apply_to": "kv"},
        {"method": "share_heads", "group": 2},
        {"method": "pipeline", "steps": [{"method": "snapkv", "budget": 128}, {"method": "kivi", "residual": 32}]},
        {"method": "quantize", "bits": 4, "outliers": 0.01, "label": "with outliers"},
        {"method": "quantize", "bits": 4, "label": "int4 again"},
    ],
}


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-timing-")
    path = os.path.join(tmp, "t.json")
    with open(path, "w") as fh:
        json.dump(CFG, fh)
    n_rows = 15

    rc, out, err = run(["run", path, "--format", "csv", "--timing-repeat", "3"])
    rows = rows_of(out) if rc == 0 else []
    timed = [r for r in rows if r["label"] != "with outliers"]
    report("every-form-timed", None if rc == 0 and len(rows) == n_rows and all(
        int(r["decode_ns"]) > 0 and float(r["decode_speedup"]) > 0 for r in timed)
        else "exit %d, rows %r, stderr %s" % (rc, [(r["label"], r["decode_ns"]) for r in rows], err[-300:]))
    out_row = [r for r in rows if r["label"] == "with outliers"]
    report("outliers-not-timed", None if out_row and out_row[0]["decode_ns"] == "" and
           out_row[0]["decode_speedup"] == "" else "row %r" % out_row)
    by_label = {r["label"]: r for r in rows}
    same = [("window budget=64", "knorm budget=64"), ("quantize bits=4", "int4 again")]
    report("same-form-same-timing", None if all(
        a in by_label and b in by_label and by_label[a]["decode_ns"] == by_label[b]["decode_ns"] and
        by_label[a]["decode_speedup"] == by_label[b]["decode_speedup"] for a, b in same)
        else "rows %r" % [(r["label"], r["decode_ns"]) for r in rows])
    # one FP16 reference per run: decode_speedup x decode_ns is the same number in every row (decode_ns is printed
    # rounded to a nanosecond, so up to that)
    base = [float(r["decode_speedup"]) * int(r["decode_ns"]) for r in timed if r["decode_ns"]]
    report("one-fp16-reference", None if base and max(base) - min(base) <= 2e-3 * min(base) else
           "speedup x ns %r" % base)
    note = "kvc: note: experiments.10 (with outliers): no decode timing: its outlier records"
    report("note-on-stderr", None if err.count("\n") == 1 and err.startswith(note) else "stderr %r" % err)
    rc2, _, err2 = run(["run", path, "--format", "csv", "--timing-repeat", "1", "-q"])
    report("quiet-silences-note", None if rc2 == 0 and err2 == "" else "exit %d stderr %r" % (rc2, err2))

    rc, out_nt, err = run(["run", path, "--format", "csv", "--no-timing"])
    nt = rows_of(out_nt) if rc == 0 else []
    report("no-timing-empty-cells", None if rc == 0 and err == "" and len(nt) == n_rows and
           all(r[c] == "" for r in nt for c in TIMING) else "exit %d stderr %r" % (rc, err))
    same = rc == 0 and len(nt) == len(rows) and all(
        {k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}
        for a, b in zip(rows, nt))
    report("timing-changes-nothing-else", None if same else "rows differ outside the timing columns")

    rc, table, err = run(["run", path, "--no-timing"])
    head = table.split("\n", 1)[0].split()
    report("no-timing-table-omits-columns", None if rc == 0 and not any(c in head for c in TIMING)
           else "header %r" % head)
    rc, table, err = run(["run", path, "--timing-repeat", "1"])
    head = table.split("\n", 1)[0].split()
    report("table-shows-timing", None if rc == 0 and head[-3:] == list(TIMING) else "header %r" % head)

    rc, out, err = run(["run", path, "--format", "jsonl", "--timing-repeat", "1", "--threads", "2"])
    objs = [json.loads(x) for x in out.splitlines()] if rc == 0 else []
    ok = len(objs) == n_rows and all(
        (o["decode_ns"] is None) == (o["label"] == "with outliers") for o in objs) and \
        all(isinstance(o["decode_ns"], (int, float)) for o in objs if o["label"] != "with outliers") and \
        list(objs[0].keys())[-9:-5] == ["decode_ns", "decode_speedup", "decode_ns_mad", "lm_kl"]
    report("jsonl-threads-2", None if ok else "exit %d stderr %r first %r" % (rc, err[-200:], objs[:1]))

    rc, out, err = run(["run", path, "--format", "csv", "--per-head"])
    ph = rows_of(out) if rc == 0 else []
    report("per-head-rows-untimed", None if rc == 0 and len(ph) == n_rows * 4 and
           all(r[c] == "" for r in ph for c in TIMING) else "exit %d stderr %r" % (rc, err[-200:]))

    rc, out, err = run(["run", "configs/practice.json", "--format", "csv", "--timing-repeat", "1"])
    pr = rows_of(out) if rc == 0 else []
    report("keys-only-config-timed", None if rc == 0 and len(pr) == 2 and all(int(r["decode_ns"]) > 0 for r in pr)
           else "exit %d stderr %r" % (rc, err[-200:]))
    # a form without a fused kernel (3-bit groups) is timed through the generic tile path: noted once per form,
    # at its first row; a fused form is not noted
    gen = {"seed": 1, "data": {"tokens": 128, "head_dim": 32, "keys": {"generator": "normal"},
                               "values": {"generator": "normal"}},
           "experiments": [{"method": "quantize", "bits": 3, "symmetric": False, "group_size": 16},
                           {"method": "quantize", "bits": 4},
                           {"method": "quantize", "bits": 3, "symmetric": False, "group_size": 16, "label": "again"}]}
    gpath = os.path.join(tmp, "g.json")
    with open(gpath, "w") as fh:
        json.dump(gen, fh)
    rc, out, err = run(["run", gpath, "--format", "csv"])
    rows = rows_of(out) if rc == 0 else []
    want = ("kvc: note: experiments.0 (quantize bits=3 symmetric=false group_size=16): decode timing: no fused "
            "kernel for K and V (intN 3-bit asymmetric, groups of 16 channels): decoded through the generic tile path")
    report("generic-path-note-once", None if rc == 0 and len(rows) == 3 and all(int(r["decode_ns"]) > 0 for r in rows)
           and err.count("\n") == 1 and err.startswith(want) else "exit %d stderr %r" % (rc, err))
    rc, out, err = run(["run", gpath, "--format", "csv", "-q"])
    report("generic-path-note-quiet", None if rc == 0 and err == "" else "exit %d stderr %r" % (rc, err))
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
