#!/usr/bin/python3
"""test_determinism.py: the same config gives byte-identical CSV and JSONL, whatever the run around it.

For each config (the lesson, the practice, a small multi-head config with RoPE, sinks, observation queries and
--per-head rows, and configs/sweep-pareto.json with every method family), kvc's output must be the same bytes
  - across repeated runs,
  - with OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) = 1 and = 2 (kvc pins OpenBLAS to one thread; this checks
    that the environment cannot change a result), and with kvc run --threads 1 and 2,
  - with stdout a pipe, stdout a regular file, and rows written by --out,
  - in another working directory and under another locale (LC_ALL=C.UTF-8).
Timing columns are not part of the contract: columns named decode_ns, decode_speedup or decode_ns_mad (CSV) and keys of those
names (JSONL) are dropped before comparing, if present. The id column is compared (it must be stable too).

Run from the project root: /usr/bin/python3 tests/test_determinism.py   (KVC=path overrides ./kvc)
Prints "PASS <name>" / "FAIL <name>: <why>" per check; exits 1 if any check failed. About 5 s.
"""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.path.abspath(os.environ.get("KVC", "./kvc"))
ROOT = os.getcwd()
TIMING = {"decode_ns", "decode_speedup", "decode_ns_mad"}
TMP = tempfile.mkdtemp(prefix="kvc-determinism-")

# a small real-shaped config: 2 layers x 2 KV heads x 4 query heads, RoPE, sinks, observation window
MULTI = {
    "seed": 11,
    "data": {"layers": 2, "kv_heads": 2, "q_heads": 4, "tokens": 96, "head_dim": 16,
             "keys": {"generator": "lowrank", "rank": 4, "scale": 0.3, "noise": 0.1,
                      "outlier_channels": {"count": 2, "scale": [5, 20]}},
             "values": {"generator": "normal"},
             "head_correlation": {"rho": 0.5, "group": 2},
             "rope": {"base": 10000, "dims": 16},
             "sinks": {"tokens": 2, "share": 0.3},
             "recent": {"tokens": 16, "share": 0.3},
             "query": {"generator": "look_back", "count": 4, "weight": 0.5, "noise": 0.5},
             "observe": {"window": 8}},
    "experiments": [
        {"method": "quantize", "bits": [2, 4, 8], "axis": ["token", "channel"], "apply_to": "kv"},
        {"method": "sink_window", "sinks": 2, "window": [16, 32]},
        {"method": "topk_attention", "budget": [8, 48]},
        {"method": "lowrank", "rank": [2, 8], "apply_to": "kv"},
    ],
}


def run(args, env_extra=None, stdout_file=None, cwd=None):
    """Runs kvc; returns (rc, stdout bytes, stderr text). stdout goes to a pipe, or to stdout_file (a path)."""
    env = dict(os.environ)
    env.update(env_extra or {})
    if stdout_file:
        with open(stdout_file, "wb") as fh:
            p = subprocess.run([KVC] + args, stdout=fh, stderr=subprocess.PIPE, env=env, cwd=cwd, timeout=120)
        with open(stdout_file, "rb") as fh:
            out = fh.read()
    else:
        p = subprocess.run([KVC] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                           timeout=120)
        out = p.stdout
    return p.returncode, out, p.stderr.decode("utf-8", "replace")


def strip_timing(fmt, data):
    """The output without timing columns, as text."""
    text = data.decode("utf-8")
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        if not rows:
            return text
        keep = [i for i, h in enumerate(rows[0]) if h not in TIMING]
        if len(keep) == len(rows[0]):
            return text
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for r in rows:
            w.writerow([r[i] for i in keep if i < len(r)])
        return buf.getvalue()
    if fmt == "jsonl":
        lines = []
        for ln in text.splitlines():
            obj = json.loads(ln)
            for k in TIMING:
                obj.pop(k, None)
            lines.append(json.dumps(obj, sort_keys=False))
        return "\n".join(lines) + "\n"
    lines = text.splitlines(True)
    if lines and "decode_ns" in lines[0].split():
        # the table's last two columns; every column is aligned, so one character offset cuts them off every line
        cut = len(lines[0][:lines[0].index(" decode_ns")].rstrip())
        return "".join(ln[:cut].rstrip() + "\n" for ln in lines)
    return text


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return "line %d: %r vs %r" % (i + 1, x[:160], y[:160])
    return "lengths %d vs %d" % (len(a), len(b))


def check_config(name, cfg, fmt, extra, out_option, threads_option=False):
    args = ["run", cfg, "--format", fmt] + extra
    rc, ref, err = run(args)
    if rc != 0 or not ref:
        report("%s-%s-runs" % (name, fmt), "exit %d, stderr %r" % (rc, err[:300]))
        return
    want = strip_timing(fmt, ref)
    variants = [
        ("repeat", {}, None, None),
        ("repeat-2", {}, None, None),
        ("openblas-1-thread", {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}, None, None),
        ("openblas-2-threads", {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}, None, None),
        ("stdout-file", {}, os.path.join(TMP, "%s-%s.out" % (name, fmt)), None),
        ("locale-C.UTF-8", {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}, None, None),
        ("other-cwd", {}, None, TMP),
    ]
    if threads_option:             # kvc run --threads N: 1 and 2 threads give the same bytes
        variants += [("threads-1", {}, None, None, ["--threads", "1"]),
                     ("threads-2", {}, None, None, ["--threads", "2"])]
    for variant in variants:
        vname, env, path, cwd = variant[:4]
        a = list(args) + (variant[4] if len(variant) > 4 else [])
        if cwd:
            a = [x if not x.endswith(".json") or os.path.isabs(x) else os.path.join(ROOT, x) for x in a]
        rc, out, err = run(a, env, path, cwd)
        got = strip_timing(fmt, out) if rc == 0 else None
        report("%s-%s-%s" % (name, fmt, vname),
               None if rc == 0 and got == want
               else ("exit %d, stderr %r" % (rc, err[:300]) if rc != 0 else first_difference(want, got)))
    if out_option and fmt in ("csv", "jsonl"):
        path = os.path.join(TMP, "%s-%s-out.%s" % (name, "".join(extra).strip("-"), fmt))
        rc, out, err = run(args + ["--out", path, "-q"])
        got = None
        if rc == 0 and os.path.exists(path):
            with open(path, "rb") as fh:
                got = strip_timing(fmt, fh.read())
        report("%s-%s-out-file" % (name, fmt),
               None if rc == 0 and out == b"" and got == want
               else "exit %d, stdout %d bytes, stderr %r, %s" % (rc, len(out), err[:200],
                                                                 first_difference(want, got or "")))


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make (run from the project root)" % KVC)
        return 1
    multi = os.path.join(TMP, "multi.json")
    with open(multi, "w") as fh:
        json.dump(MULTI, fh)
    check_config("lesson", "configs/lesson.json", "csv", [], True, True)
    check_config("practice", "configs/practice.json", "jsonl", [], True, True)
    check_config("multi", multi, "csv", [], True, True)
    check_config("multi-per-head", multi, "jsonl", ["--per-head"], True)   # no timing: no --threads
    check_config("lesson-table", "configs/lesson.json", "table", [], False)
    check_config("sweep-pareto", "configs/sweep-pareto.json", "csv", [], True, True)   # every method family
    return checks.status()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
