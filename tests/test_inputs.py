#!/usr/bin/python3
"""test_inputs.py: inputs that used to crash, hang or spoil the output (issue 15 F01 F02 F05, issue 13 s3),
checked as a black box. The one-line refusals of bad input are in the bad-input catalogue; these need more
than one run, a memory limit or a look at the whole output.

- F05 labels with control characters: the table shows them escaped, one line per row; CSV and JSONL carry
  them exactly.
- issue 13: a grid whose rows share a label gets a note naming the parameter to add (none with -q).
- F01 memory: a config within the documented limits (tokens 2^24 x head_dim 8) under `ulimit -v` or `ulimit -d`
  is refused at once (exit 2, the estimate named, nothing on stdout), --list still works under the same limit;
  the estimate (build/tests/test_limits --estimate) is not below the measured peak (max RSS) of a few methods.
- F02 OpenBLAS under `ulimit -v 300000` (it used to spin forever): kvc runs the lesson with the same rows as
  without a limit, also with OPENBLAS_NUM_THREADS=2 in the environment, and kvc synth too; under a limit too
  small for OpenBLAS's buffer it exits 2 with a message. Every run has a timeout, so a hang fails the check.
The limits are set in the child (resource.setrlimit); a binary that cannot start under them (a sanitizer
build reserves terabytes of address space) skips those checks visibly.

Run from the project root: /usr/bin/python3 tests/test_inputs.py (KVC, KVC_TESTBIN as for the other tests).
Prints PASS/FAIL/SKIP lines; exits 1 if a check failed. Writes only inside a mktemp directory.
"""
import csv
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import report, skip  # noqa: E402

KVC = os.environ.get("KVC", "./kvc")
ESTIMATE = os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_limits")
TMP = tempfile.mkdtemp(prefix="kvc-test-inputs-")

SMALL = {
    "seed": 2,
    "data": {"tokens": 32, "head_dim": 8, "keys": {"generator": "normal"}, "values": {"generator": "normal"},
             "query": {"generator": "look_back", "token": 5}},
    "experiments": [{"method": "quantize", "bits": [4, 8]}],
}
# the example: within every documented limit, about 8.4 GB at its peak
BIG = {
    "seed": 1,
    "data": {"tokens": 16777216, "head_dim": 8, "keys": {"generator": "normal"}, "values": {"generator": "normal"},
             "query": {"generator": "look_back", "token": 5}},
    "experiments": [{"label": "int4", "method": "quantize", "bits": 4}],
}


def short(s, n=240):
    s = repr(s)
    return s if len(s) <= n else s[:n] + "..."


def write(name, obj):
    path = os.path.join(TMP, name)
    with open(path, "w") as fh:
        json.dump(obj, fh)
    return path


def run(args, limit=None, env=None, timeout=60):
    """(rc, stdout, stderr, seconds); limit = (resource, bytes) set in the child; rc -1 on a timeout."""
    def pre():
        if limit:
            resource.setrlimit(limit[0], (limit[1], limit[1]))
    t0 = time.monotonic()
    try:
        p = subprocess.run([KVC] + args, capture_output=True, timeout=timeout, preexec_fn=pre,
                           env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after %d s (a hang)" % timeout, timeout
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), \
        time.monotonic() - t0


def one_line_refusal(rc, out, err, *needles):
    """None when kvc exited 2 with one 'kvc: ...' line holding every needle and nothing on stdout, else why."""
    lines = err.splitlines()
    if rc != 2 or out or len(lines) != 1 or not lines[0].startswith("kvc: ") or " (got " not in lines[0]:
        return "exit %d, stdout %s, stderr %s" % (rc, short(out), short(err))
    missing = [n for n in needles if n not in lines[0]]
    return "stderr lacks %s: %s" % (missing, short(err)) if missing else None


# ---------------------------------------------------------------- F05: labels with control characters

def check_labels():
    labels = ["two\nlines", "crlf\r\nend", "tab\there", "esc\x1b[31mred", "plain"]
    cfg = dict(SMALL, experiments=[{"label": l, "method": "quantize", "bits": 4} for l in labels])
    path = write("labels.json", cfg)
    rc, out, err, _ = run(["run", path, "--no-timing"])
    lines = out.split("\n")
    want = ["two\\nlines", "crlf\\r\\nend", "tab\\there", "esc\\x1b[31mred", "plain"]
    ok = rc == 0 and len(lines) == len(labels) + 2 and lines[-1] == "" and all(
        lines[1 + i].startswith(w + " ") for i, w in enumerate(want)) and len({len(x) for x in lines[:-1]}) == 1
    report("table-escapes-control-characters", None if ok else "exit %d, table %s, stderr %s"
           % (rc, short(out, 600), short(err)))
    rc, out, err, _ = run(["run", path, "--no-timing", "--format", "csv"])
    got = [r[0] for r in csv.reader(io.StringIO(out, newline=""))][1:] if rc == 0 else None
    report("csv-keeps-labels-exactly", None if got == labels else "exit %d, labels %s" % (rc, short(got)))
    rc, out, err, _ = run(["run", path, "--no-timing", "--format", "jsonl"])
    try:
        got = [json.loads(x)["label"] for x in out.splitlines()]
    except ValueError as e:
        got = "not JSON: %s" % e
    report("jsonl-keeps-labels-exactly", None if got == labels else "exit %d, labels %s" % (rc, short(got)))
    # a message that names an experiment shows its label on one line too (FP16 cannot hold keys of 1e6)
    bad = dict(SMALL, experiments=[{"label": "x\ny", "method": "cast", "format": "f16"}])
    bad["data"] = dict(SMALL["data"], keys={"generator": "normal", "outliers": [{"channel": 0, "scale": 1e6}]})
    rc, out, err, _ = run(["run", write("label-msg.json", bad), "--no-timing"])
    report("messages-show-labels-on-one-line", None if rc == 1 and len(err.splitlines()) == 1 and
           "experiments.0 (x\\ny): " in err else "exit %d, stderr %s" % (rc, short(err)))


# ---------------------------------------------------------------- issue 13: rows that share a label

def check_duplicate_labels():
    cfg = dict(SMALL, experiments=[{"label": "q", "method": "quantize", "bits": [4, 8], "axis": ["token", "channel"]},
                                   {"label": "k{bits}", "method": "quantize", "bits": [4, 8], "axis": "token"}])
    path = write("dup.json", cfg)
    rc, out, err, _ = run(["run", path, "--no-timing", "--format", "csv"])
    notes = [x for x in err.splitlines() if x.startswith("kvc: note: ")]
    ok = rc == 0 and len(notes) == 1 and "experiments.0.label" in notes[0] and "4 rows share the label \"q\"" in \
        notes[0] and "add {bits} and {axis} to the label" in notes[0] and len(err.splitlines()) == 1
    report("duplicate-labels-note-names-the-parameters", None if ok else "exit %d, stderr %s" % (rc, short(err)))
    rc, out2, err, _ = run(["run", path, "--no-timing", "--format", "csv", "-q"])
    report("duplicate-labels-note-quiet", None if rc == 0 and err == "" and out2 == out else
           "exit %d, stderr %s" % (rc, short(err)))
    pipe = dict(SMALL, experiments=[{"label": "p", "method": "pipeline", "steps": [
        {"method": "window", "budget": [8, 16]}, {"method": "quantize", "bits": 4}]}])
    rc, _, err, _ = run(["run", write("dup-pipe.json", pipe), "--no-timing"])
    report("duplicate-labels-note-pipeline", None if rc == 0 and "add {budget} to the label" in err else
           "exit %d, stderr %s" % (rc, short(err)))


# ---------------------------------------------------------------- F01: the memory estimate

def can_start(limit):
    rc, out, err, _ = run(["run", "--list", write("small.json", SMALL)], limit=limit, timeout=30)
    return rc == 0, err


def check_memory():
    big = write("big.json", BIG)
    for name, res, lim in (("ulimit-v", resource.RLIMIT_AS, 2 * 10**9), ("ulimit-d", resource.RLIMIT_DATA, 2 * 10**9)):
        ok, err = can_start((res, lim))
        if not ok:
            skip("memory-estimate-" + name, "kvc cannot start under a 2 GB %s here (%s)" % (name, short(err, 120)))
            continue
        rc, out, err, sec = run(["run", big], limit=(res, lim), timeout=60)
        why = one_line_refusal(rc, out, err, "%s: the run needs about " % big, "(%s)" % name.replace("-", " -"),
                               "experiments.0 \"int4\"", "(got an estimate of ")
        if why is None and sec > 10:
            why = "took %.1f s (the refusal comes before any data is made)" % sec
        report("memory-estimate-refuses-" + name, why)
        rc, out, err, _ = run(["run", "--list", big], limit=(res, lim), timeout=60)
        report("memory-estimate-list-still-works-" + name, None if rc == 0 and len(out.splitlines()) == 1 else
               "exit %d, stdout %s, stderr %s" % (rc, short(out), short(err)))
    # --out: a refused run leaves no file
    if can_start((resource.RLIMIT_AS, 2 * 10**9))[0]:
        outf = os.path.join(TMP, "big.csv")
        rc, out, err, _ = run(["run", big, "--out", outf], limit=(resource.RLIMIT_AS, 2 * 10**9))
        report("memory-estimate-out-untouched", None if rc == 2 and not os.path.exists(outf) else
               "exit %d, %s exists: %s, stderr %s" % (rc, outf, os.path.exists(outf), short(err)))


def peak_rss(args, env=None):
    """(exit status, max RSS in bytes) of kvc args (with env added to the environment), stdout discarded."""
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.execve(KVC, [KVC] + args, dict(os.environ, **(env or {})))
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024


def check_estimate_vs_peak():
    if not os.access(ESTIMATE, os.X_OK):
        report("memory-estimate-above-peak", "%s is missing; build it with make testbin" % ESTIMATE)
        return
    if not can_start((resource.RLIMIT_AS, 4 * 10**9))[0]:   # ASan reserves terabytes and doubles every peak
        skip("memory-estimate-above-peak", "%s cannot start under ulimit -v 4 GB (a sanitizer build?): its peaks "
             "are not kvc's" % KVC)
        return
    rc, base = peak_rss(["run", write("small.json", SMALL), "--no-timing"])   # libraries, stack, OpenBLAS
    data = {"tokens": 16384, "head_dim": 128, "kv_heads": 2, "keys": {"generator": "normal"},
            "values": {"generator": "normal"}, "query": {"generator": "look_back", "count": 4},
            "observe": {"window": 16}}
    worst = []
    for m in ({"method": "quantize", "bits": 4}, {"method": "cast", "scale": "tensor"},
              {"method": "lowrank", "rank": 8, "apply_to": "kv", "joint": True}, {"method": "h2o", "budget": 64}):
        path = write("peak.json", {"seed": 1, "data": data, "experiments": [m]})
        p = subprocess.run([ESTIMATE, "--estimate", path], capture_output=True, text=True, timeout=30)
        est = int(dict(x.split() for x in p.stdout.splitlines()).get("total", 0)) if p.returncode == 0 else 0
        rc, peak = peak_rss(["run", path, "--format", "csv"])
        worst.append((est / max(1, peak - base), m["method"], rc, est, peak - base))
    ratio, method, rc, est, used = min(worst)
    print("# memory estimate / measured peak above the baseline: %s" % ", ".join(
        "%s %.2f" % (w[1], w[0]) for w in worst))
    report("memory-estimate-above-peak", None if all(w[2] == 0 for w in worst) and ratio >= 1.0 else
           "%s: exit %d, estimate %d bytes below the measured %d" % (method, rc, est, used))
    # streamed data (a few KV heads at a time, -j of them; the whole layer for a layer-wide experiment)
    data = dict(data, layers=2, kv_heads=4, q_heads=8)
    stream = {"KVC_DATA_STREAM": "1"}
    worst = []
    for jobs in ("1", "2"):
        for m in ({"method": "quantize", "bits": 4}, {"method": "lowrank", "rank": 8, "apply_to": "kv"},
                  {"method": "cast", "scale": "tensor"}, {"method": "snapkv", "keep_ratio": 0.25}):
            path = write("peak-stream.json", {"seed": 1, "data": dict(data, observe={"window": 16}),
                                              "experiments": [m]})
            p = subprocess.run([ESTIMATE, "--estimate", path, "--no-timing", "-j", jobs], capture_output=True,
                               text=True, timeout=30, env=dict(os.environ, **stream))
            est = int(dict(x.split() for x in p.stdout.splitlines()).get("total", 0)) if p.returncode == 0 else 0
            rc, peak = peak_rss(["run", path, "--format", "csv", "--no-timing", "-j", jobs], env=stream)
            worst.append((est / max(1, peak - base), "%s -j %s" % (m["method"], jobs), rc, est, peak - base))
    # decode timing on (it makes its FP16 cache a head at a time) and key_gaussian observation queries (a number
    # per token each), whole and streamed
    data2 = dict(data, kv_heads=8, q_heads=8, tokens=8192, query={"generator": "look_back", "count": 1},
                 observe={"window": 256, "generator": "key_gaussian", "noise": 0.1})
    for env in ({"KVC_DATA_STREAM": "1"}, {"KVC_DATA_STREAM": "0"}):
        for m, extra in (({"method": "cast", "format": "f16"}, []), ({"method": "quantize", "bits": 4}, ["--no-timing"])):
            path = write("peak-timed.json", {"seed": 1, "data": data2, "experiments": [m]})
            p = subprocess.run([ESTIMATE, "--estimate", path, "-j", "1"] + extra, capture_output=True, text=True,
                               timeout=30, env=dict(os.environ, **env))
            est = int(dict(x.split() for x in p.stdout.splitlines()).get("total", 0)) if p.returncode == 0 else 0
            rc, peak = peak_rss(["run", path, "--format", "csv", "-j", "1"] + (extra or ["--timing-repeat", "1"]),
                                env=env)
            worst.append((est / max(1, peak - base), "%s %s stream %s" % (m["method"], " ".join(extra) or "timed",
                                                                         env["KVC_DATA_STREAM"]), rc, est, peak - base))
    ratio, method, rc, est, used = min(worst)
    print("# streamed: memory estimate / measured peak above the baseline: %s" % ", ".join(
        "%s %.2f" % (w[1], w[0]) for w in worst))
    # limits per KV head: 32 KV heads x 131072 tokens x 128 (2^29 numbers per layer) is accepted, and streamed
    # without timing it is estimated at a head at a time (-j 1), well under what a layer would take (2^32 bytes)
    big = {"seed": 1, "data": {"layers": 2, "kv_heads": 32, "q_heads": 32, "tokens": 131072, "head_dim": 128,
                               "keys": {"generator": "normal"}, "values": {"generator": "normal"},
                               "query": {"generator": "look_back", "count": 1}},
           "experiments": [{"method": "quantize", "bits": 4}]}
    path = write("big-per-head.json", big)
    p = subprocess.run([ESTIMATE, "--estimate", path, "--no-timing", "-j", "1"], capture_output=True, text=True,
                       timeout=30)
    est = int(dict(x.split() for x in p.stdout.splitlines()).get("total", 0)) if p.returncode == 0 else 0
    rc, out, err, sec = run(["run", path, "--list"])
    report("limits-per-head-accepted", None if rc == 0 and len(out.splitlines()) == 1 and 0 < est < 2 * 10**9 else
           "exit %d, %r, estimate %d bytes" % (rc, short(err), est))
    failed = [w for w in worst if w[2] != 0]
    report("memory-estimate-above-peak-streamed", None if not failed and ratio >= 1.0 else
           "%s: exit %d" % (failed[0][1], failed[0][2]) if failed else
           "%s: estimate %d bytes below the measured %d" % (method, est, used))


# ---------------------------------------------------------------- F02: OpenBLAS under ulimit -v

def check_openblas():
    lim = (resource.RLIMIT_AS, 300000 * 1024)
    if not can_start(lim)[0]:
        skip("openblas-ulimit-v-300000", "kvc cannot start under ulimit -v 300000 here")
        return
    rc0, want, err0, _ = run(["run", "configs/lesson.json", "--no-timing", "--format", "csv"])
    for env_name, env in (("", None), ("-openblas-threads-2", {"OPENBLAS_NUM_THREADS": "2"})):
        rc, out, err, sec = run(["run", "configs/lesson.json", "--no-timing", "--format", "csv"], limit=lim, env=env,
                                timeout=60)
        report("openblas-ulimit-v-300000-runs" + env_name, None if rc0 == 0 and rc == 0 and out == want else
               "exit %d (unlimited: %d) after %.1f s, stderr %s" % (rc, rc0, sec, short(err)))
    d = os.path.join(TMP, "synth-limited")
    rc, out, err, sec = run(["synth", "configs/lesson.json", "-o", d], limit=lim, timeout=60)
    report("openblas-ulimit-v-300000-synth", None if rc == 0 and os.path.exists(os.path.join(d, "keys.npy")) else
           "exit %d after %.1f s, stderr %s" % (rc, sec, short(err)))
    tight = (resource.RLIMIT_AS, 120000 * 1024)
    if not can_start(tight)[0]:
        skip("openblas-ulimit-v-too-small", "kvc cannot start under ulimit -v 120000 here")
        return
    for cmd in (["run", "configs/lesson.json"], ["synth", "configs/lesson.json", "-o", d + "2"]):
        rc, out, err, sec = run(cmd, limit=tight, timeout=30)
        why = one_line_refusal(rc, out, err, "ulimit -v")
        if why is None and "OpenBLAS" not in err:
            why = "the message does not say that OpenBLAS needs its buffer: %s" % short(err)
        report("openblas-ulimit-v-too-small-" + cmd[0], why)


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make" % KVC)
        return 1
    check_labels()
    check_duplicate_labels()
    check_memory()
    check_estimate_vs_peak()
    check_openblas()
    return checks.status()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
