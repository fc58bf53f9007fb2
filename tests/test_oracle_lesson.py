#!/usr/bin/python3
"""Checks the numpy oracle (tests/oracle.py) against the lesson's printed numbers (those of
../shared/lesson/*.expected, copied below), using configs/lesson.json and configs/practice.json.
Run from the project root: /usr/bin/python3 tests/test_oracle_lesson.py"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402  (tests/checks.py: PASS/FAIL lines)
import oracle  # noqa: E402
from checks import report  # noqa: E402


def load(path):
    with open(path) as fh:
        return json.load(fh)


def f3(x):
    return "-" if x is None else "%.3f" % x


# ---- lesson: attention error per row, in row order
try:
    rows = oracle.run_config(load("configs/lesson.json"))
    got = [f3(r["attn_error"]) for r in rows]
    want = "0.007 0.102 0.878 1.568 0.645 0.041 0.052 0.345".split()
    report("oracle-lesson-rows",
           None if len(rows) == len(want) else "expected %d rows, got %d" % (len(want), len(rows)))
    report("oracle-lesson-attn-error", None if got == want else "got %s, want %s" % (" ".join(got), " ".join(want)))
    labels = [r["label"] for r in rows]
    want_labels = ["quantize K,V to INT8", "quantize K,V to INT4", "quantize K,V to INT2",
                   "evict: sinks + recent 128", "evict: top-128 by score",
                   "low-rank keys, rank 32", "low-rank keys, rank 16", "low-rank keys, rank 8"]
    report("oracle-lesson-labels", None if labels == want_labels else "got %r" % labels)
except Exception as e:  # noqa: BLE001
    report("oracle-lesson", "%s: %s" % (type(e).__name__, e))

# ---- practice: outlier channels, per-token vs per-channel INT4 keys
try:
    rows = oracle.run_config(load("configs/practice.json"))
    got = [(f3(r["k_error"]), f3(r["k_error_ordinary"]),
            "-" if r["k_zeroed_ordinary"] is None else "%.0f%%" % (100 * r["k_zeroed_ordinary"]),
            r["bytes"]) for r in rows]
    want = [("0.119", "0.674", "69%", 2000), ("0.108", "0.123", "17%", 1632)]
    report("oracle-practice-metrics", None if got == want else "got %r, want %r" % (got, want))
    bl = [r["baseline_bytes"] for r in rows]
    report("oracle-practice-baseline", None if bl == [6400, 6400] else "got %r, want [6400, 6400]" % bl)
    na = [(r["attn_error"], r["v_error"]) for r in rows]
    report("oracle-practice-na", None if na == [(None, None)] * 2
           else "attn_error/v_error should not apply without values/query, got %r" % na)
except Exception as e:  # noqa: BLE001
    report("oracle-practice", "%s: %s" % (type(e).__name__, e))

sys.exit(checks.status())
