#!/usr/bin/python3
"""test_jobs_run.py: kvc run -j N gives the same bytes for any N.

The evaluation runs each layer's KV heads (method and attention) on a pool of N threads and sums the keys' and
values' error norms on two of them, each over the heads in order (src/eval/evaluate.h, eval_set_threads). The
rows must not depend on N: configs/methods.json (every method family, pipelines, head sharing, joint low rank,
the realistic generators) at 2 layers x 256 tokens, aggregate rows and --per-head rows, data held whole and
streamed; a timed run's quality columns; an experiment that fails midway (the same rows before it, the same
message, whichever head fails first in head order); -j's bad values (exit 2, one line), written apart or attached
("-j2").

Run from the project root after `. scripts/numeric-env.sh`: /usr/bin/python3 tests/test_jobs_run.py
(KVC=path overrides ./kvc). About 15 s of CPU.
"""
import csv
import io
import json
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np

import checks
from checks import report, skip

KVC = os.path.abspath(os.environ.get("KVC", "./kvc"))
TMP = tempfile.mkdtemp(prefix="kvc-jobs-")
TIMING = {"decode_ns", "decode_speedup", "decode_ns_mad"}


def write(name, cfg):
    path = os.path.join(TMP, name)
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return path


def methods_config(cache):
    return checks.methods_config(TMP, cache)


def run(path, jobs, extra, stream=None):
    env = dict(os.environ)
    if stream is not None:
        env["KVC_DATA_STREAM"] = stream
    p = subprocess.run([KVC, "run", path, "--format", "csv", "-q", "-j", str(jobs)] + extra, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=300)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def first_difference(a, b):
    la, lb = a.decode().splitlines(), b.decode().splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return "line %d: -j 1 %r, other %r" % (i + 1, x[:160], y[:160])
    return "%d vs %d lines" % (len(la), len(lb))


def quality_columns(data):
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    keep = [i for i, h in enumerate(rows[0]) if h not in TIMING]
    return [[r[i] for i in keep] for r in rows]


def main():
    for cache, name, extra in (("post", "rows", ["--no-timing"]), ("pre", "per-head", ["--per-head"])):
        path = methods_config(cache)
        for stream in ("0", "1"):
            rc1, one, err1 = run(path, 1, extra, stream)
            for jobs in (2, 3):
                rc, out, err = run(path, jobs, extra, stream)
                ok = rc1 == 0 and rc == 0 and out == one and len(one.splitlines()) > 10
                report("jobs-same-bytes-%s-%s-stream%s-j%d" % (cache, name, stream, jobs), None if ok else
                       "exit %d/%d %s %s; %s" % (rc1, rc, err1[-200:], err[-200:], first_difference(one, out)))
    path = methods_config("post")
    r1, r2 = run(path, 1, ["--timing-repeat", "1"]), run(path, 2, ["--timing-repeat", "1"])
    report("jobs-timed-same-quality-columns", None if r1[0] == 0 and r2[0] == 0 and
           quality_columns(r1[1]) == quality_columns(r2[1]) else "exit %d/%d %s" % (r1[0], r2[0], r2[2][-300:]))
    # failures midway (FP16 cannot hold the data): the rows before the failing experiment and its message, the
    # same for any -j. Outliers in every head's keys: head 0's keys fail first. Large values only: head 0's values
    # fail before head 1's keys (the head order, keys before values, that a single thread meets).
    base = {"seed": 3, "data": {"layers": 3, "kv_heads": 4, "q_heads": 8, "tokens": 64, "head_dim": 16,
                                "keys": {"generator": "normal"}, "values": {"generator": "normal"},
                                "query": {"generator": "look_back", "count": 2, "weight": 1e-9}},
            "experiments": [{"method": "quantize", "bits": 8}, {"method": "cast", "format": "f16"},
                            {"method": "quantize", "bits": 4}]}
    keys = json.loads(json.dumps(base))
    keys["data"]["keys"]["outliers"] = [{"channel": 1, "scale": 1e6}]
    rng = np.random.default_rng(5)
    K, V = rng.normal(size=(3, 4, 64, 16)), rng.normal(size=(3, 4, 64, 16))
    V[1, 0, 10, 3] = 1e6   # layer 1: head 0's values, then head 1's keys
    K[1, 1, 20, 5] = 1e6
    np.save(os.path.join(TMP, "k.npy"), K)
    np.save(os.path.join(TMP, "v.npy"), V)
    vals = {"data": {"source": "files", "files": {"keys": "k.npy", "values": "v.npy"}},
            "experiments": base["experiments"]}
    for name, cfg, want in (("keys", keys, "at K["), ("values", vals, "at V[")):
        path = write("fail-%s.json" % name, cfg)
        r1 = run(path, 1, ["--no-timing"])
        same = all(run(path, j, ["--no-timing"]) == r1 for j in (2, 4))
        if name == "keys":   # streamed: 1, 2 or 3 KV heads at a time; the same rows and message
            same = same and all(run(path, j, ["--no-timing"], "1") == r1 for j in (1, 2, 3))
        report("jobs-failure-same-%s" % name, None if same and r1[0] != 0 and len(r1[1].splitlines()) == 2 and
               "experiments.1" in r1[2] and "KV head 0" in r1[2] and want in r1[2] and
               ("layer 1," in r1[2]) == (name == "values") else
               "-j 1 gave %r; same for -j 2, 4: %s" % (r1, same))
    # under a finite ulimit -v the evaluation runs on one thread (OpenBLAS's buffer per computing thread): a note,
    # the same rows
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    p1 = subprocess.run([KVC, "run", "configs/lesson.json", "--format", "csv", "--no-timing", "-j", "1"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    p2 = subprocess.run([KVC, "run", "configs/lesson.json", "--format", "csv", "--no-timing", "-j", "2"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, preexec_fn=limited)
    err = p2.stderr.decode()
    probe = subprocess.run([KVC, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           preexec_fn=limited)
    if probe.returncode != 0:   # ASan reserves terabytes of address space: a sanitizer build cannot start so
        skip("jobs-one-thread-under-ulimit", "%s cannot start under ulimit -v 4 GB (a sanitizer build?)" % KVC)
    else:
        report("jobs-one-thread-under-ulimit", None if p1.returncode == 0 and p2.returncode == 0 and
               p1.stdout == p2.stdout and "kvc: note: -j 2: the evaluation runs on one thread under a finite ulimit"
               in err else "exit %d/%d, same rows %s, stderr %r" % (p1.returncode, p2.returncode,
                                                                    p1.stdout == p2.stdout, err[-300:]))
    # "-j2" as make spells it: the value attached to the one-letter option, the same rows as "-j 2"
    p3 = subprocess.run([KVC, "run", "configs/lesson.json", "--format", "csv", "--no-timing", "-j2"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    report("jobs-attached-value", None if p3.returncode == 0 and p3.stdout == p1.stdout and p1.stdout else
           "exit %d, same rows as -j 1: %s, stderr %r" % (p3.returncode, p3.stdout == p1.stdout, p3.stderr[-300:]))
    for bad in ("0", "65", "x", "1.5", ""):
        for words in (["-j", bad], ["-j" + bad] if bad else None):
            if words is None:
                continue
            p = subprocess.run([KVC, "run", "configs/lesson.json"] + words, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60)
            lines = p.stderr.decode().splitlines()
            report("jobs-bad-value-%s%s" % (bad or "empty", "-attached" if len(words) == 1 else ""),
                   None if p.returncode == 2 and not p.stdout and len(lines) == 1 and
                   lines[0].startswith("kvc: run: -j: ") and '(got "%s")' % bad in lines[0] else
                   "exit %d, stdout %r, stderr %r" % (p.returncode, p.stdout[:80], p.stderr[:300]))
    # a flag is never read as a flag with a value: "-qq" stays an unknown option
    p = subprocess.run([KVC, "run", "configs/lesson.json", "-qq"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    report("jobs-flag-not-attached", None if p.returncode == 2 and not p.stdout and
           p.stderr.decode().startswith("kvc: run: unknown option") else
           "exit %d, stderr %r" % (p.returncode, p.stderr[:300]))
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
