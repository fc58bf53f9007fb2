#!/usr/bin/python3
"""test_stream_run.py: kvc run gives the same bytes whether the data is held whole or made a layer at a time.

KVC_DATA_STREAM=1 makes kvc run stream synthetic data (src/data/synth.h: each layer made again from recorded
generator states, with its reference, for each experiment; the aggregate norms fed head by head, eval/normacc.h),
KVC_DATA_STREAM=0 holds it whole. For configs/methods.json (every method family, pipelines, head sharing, joint
low rank, the realistic generators) at 256 tokens, the CSV must be the same bytes both ways: the aggregate rows
with RoPE cached after rotation, --per-head rows with RoPE cached before. With decode timing on, the streamed run
(the FP16 baseline and the timing queries built a layer at a time) must time the same rows as the whole run, and
its other columns must equal the whole run's. An experiment that fails midway gives the same rows before it and
the same message.

Run from the project root after `. scripts/numeric-env.sh` (the streamed norms follow OpenBLAS's AVX2 dot kernel,
which that script pins): /usr/bin/python3 tests/test_stream_run.py   (KVC=path overrides ./kvc). About 13 s of CPU.
"""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import report

KVC = os.path.abspath(os.environ.get("KVC", "./kvc"))
TMP = tempfile.mkdtemp(prefix="kvc-stream-")
TIMING = {"decode_ns", "decode_speedup", "decode_ns_mad"}


def config(cache):
    return checks.methods_config(TMP, cache)


def run(path, stream, extra):
    env = dict(os.environ, KVC_DATA_STREAM=stream)
    p = subprocess.run([KVC, "run", path, "--format", "csv", "-q"] + extra, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=300)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def without_timing(data):
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    keep = [i for i, h in enumerate(rows[0]) if h not in TIMING]
    return [[r[i] for i in keep] for r in rows], [[r[i] for i, h in enumerate(rows[0]) if h == "decode_ns"]
                                                  for r in rows[1:]]


def first_difference(a, b):
    la, lb = a.decode().splitlines(), b.decode().splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return "line %d: whole %r, streamed %r" % (i + 1, x[:160], y[:160])
    return "%d vs %d lines" % (len(la), len(lb))


def main():
    for cache, name, extra in (("post", "rows", ["--no-timing"]), ("pre", "per-head", ["--per-head"])):
        path = config(cache)
        rc0, whole, err0 = run(path, "0", extra)
        rc1, streamed, err1 = run(path, "1", extra)
        ok = rc0 == 0 and rc1 == 0 and whole == streamed and len(whole) > 0
        report("stream-same-bytes-%s-%s" % (cache, name), None if ok else
               "exit %d/%d %s %s; %s" % (rc0, rc1, err0[-200:], err1[-200:], first_difference(whole, streamed)))
    path = config("post")
    rc0, whole, err0 = run(path, "0", ["--timing-repeat", "1"])
    rc1, timed, err1 = run(path, "1", ["--timing-repeat", "1"])
    if rc0 or rc1:
        report("stream-timed", "exit %d/%d %s %s" % (rc0, rc1, err0[-300:], err1[-300:]))
    else:
        w, wns = without_timing(whole)
        t, ns = without_timing(timed)
        report("stream-timed-same-quality-columns", None if w == t else "the columns other than timing differ")
        timed_rows = [i for i, x in enumerate(ns) if x and x[0]]
        report("stream-timed-same-rows-timed", None if timed_rows == [i for i, x in enumerate(wns) if x and x[0]]
               and timed_rows else "rows with decode_ns: streamed %s, whole %s" % (timed_rows[:30], wns[:30]))
    # an experiment that fails in the middle (FP16 cannot hold the keys): the rows before it, then its error,
    # whether the experiments ran one at a time or together a layer at a time
    fail = {"seed": 3, "data": {"layers": 3, "kv_heads": 2, "q_heads": 4, "tokens": 64, "head_dim": 16,
                                "keys": {"generator": "normal", "outliers": [{"channel": 1, "scale": 1e6}]},
                                "values": {"generator": "normal"},
                                "query": {"generator": "look_back", "count": 2, "weight": 1e-9}},
            "experiments": [{"method": "quantize", "bits": 8}, {"method": "cast", "format": "f16"},
                            {"method": "quantize", "bits": 4}]}
    path = os.path.join(TMP, "fail.json")
    with open(path, "w") as fh:
        json.dump(fail, fh)
    r0, r1 = run(path, "0", ["--no-timing"]), run(path, "1", ["--no-timing"])
    report("stream-failure-same", None if r0 == r1 and r0[0] == 1 and len(r0[1].splitlines()) == 2 and
           "experiments.1" in r0[2] else "whole %r, streamed %r" % (r0, r1))
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
