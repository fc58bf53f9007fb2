#!/usr/bin/python3
"""test_config_once.py: kvc reads its config once, and selects rows before any data exists (src/config/config.h,
src/report/sweep.h), black box.

1. One read: a config given as a pipe (`kvc run /dev/stdin`, `kvc run <(cat c.json)`, i.e. /dev/fd/N) or as a
   FIFO gives exactly the CSV (ids included) of the same config as a regular file, for run (with --set),
   --resume, synth (the same files.json) and merge --config.
2. --list and --shard before the data: a 32-layer config whose data needs 2 GiB (keys and values at the limit
   of 2^27 numbers each) lists its rows, whole and one shard, under a 400 MB address-space limit that the run
   itself cannot pass, and well under 2 s. The same for a data.source "files" config whose keys file holds
   1 GiB (a sparse file): parsing reads only the headers.
3. Headers at parse time, values with the data: a keys file with a NaN lists fine; the run refuses it (exit 2,
   one line naming the file and the index) and creates no --out file.

Run from the project root: /usr/bin/python3 tests/test_config_once.py  (KVC=path overrides ./kvc). Prints
"PASS <name>" / "FAIL <name>: <why>" (and "SKIP <name>: <why>" for a check this machine cannot make); exits 1
on any failure. Writes only inside a temporary directory. Standard library only.
"""
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
TMP = tempfile.mkdtemp(prefix="kvc-config-once-")
LIMIT = 400 * 1000 * 1000   # bytes of address space for the no-data checks

TINY = {
    "seed": 3,
    "data": {"tokens": 48, "head_dim": 8, "layers": 2, "kv_heads": 2, "q_heads": 4,
             "keys": {"generator": "normal"}, "values": {"generator": "normal"},
             "query": {"generator": "look_back", "count": 2}},
    "experiments": [{"method": "quantize", "bits": [4, 8]}, {"method": "window", "budget": 16}],
}

# 32 layers x 8 KV heads x 65536 tokens x 128 = 2^31 numbers per tensor: 16 GiB of keys; kvc run makes it a layer
# at a time, and one layer (512 MiB of keys) is still more than the limit
BIG = {
    "seed": 1,
    "data": {"tokens": 65536, "head_dim": 128, "layers": 32, "kv_heads": 8, "q_heads": 32,
             "keys": {"generator": "normal"}, "values": {"generator": "normal"},
             "query": {"generator": "look_back", "count": 1}},
    "experiments": [{"method": "quantize", "bits": [2, 4, 8]}, {"method": "window", "budget": 256}],
}


def path(name):
    return os.path.join(TMP, name)


def write(name, content):
    p = path(name)
    with open(p, "wb") as fh:
        fh.write(content if isinstance(content, bytes) else json.dumps(content, indent=2).encode() + b"\n")
    return p


def short(s, n=300):
    s = repr(s)
    return s if len(s) <= n else s[:n] + "..."


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def run(args, stdin=None, pass_fds=(), limited=False, timeout=120):
    """Runs kvc; returns (rc, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run([KVC] + args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           pass_fds=pass_fds, timeout=timeout, preexec_fn=limit_memory if limited else None)
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after %d s" % timeout, timeout
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), \
        time.monotonic() - t0


def feed(fd_or_path, data):
    """Writes data into a pipe fd (then closes it) or a FIFO path, from a thread; returns the thread."""
    def go():
        if isinstance(fd_or_path, int):
            with os.fdopen(fd_or_path, "wb") as fh:
                fh.write(data)
        else:
            with open(fd_or_path, "wb") as fh:
                fh.write(data)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def via(kind, cfg_bytes, args_before, args_after=()):
    """Runs kvc ARGS_BEFORE <config as KIND> ARGS_AFTER, KIND one of file, stdin, devfd, fifo."""
    if kind == "file":
        return run(args_before + [write("c.json", cfg_bytes)] + list(args_after))
    if kind == "stdin":
        return run(args_before + ["/dev/stdin"] + list(args_after), stdin=cfg_bytes)
    if kind == "devfd":   # what the shell's <(cat c.json) passes
        r, w = os.pipe()
        feed(w, cfg_bytes)
        try:
            return run(args_before + ["/dev/fd/%d" % r] + list(args_after), pass_fds=(r,))
        finally:
            os.close(r)
    fifo = path("c.fifo")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    t = feed(fifo, cfg_bytes)
    out = run(args_before + [fifo] + list(args_after), timeout=20)
    t.join(timeout=2)   # a writer that kvc read from is done (or about to be)
    if t.is_alive():   # kvc never opened it: the writer waits in open(); unblock it without blocking ourselves
        # (a blocking open for reading here, after the writer had just closed, waited forever for a writer)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            deadline = time.monotonic() + 5
            while t.is_alive() and time.monotonic() < deadline:
                try:
                    if not os.read(fd, 65536):
                        time.sleep(0.01)
                except BlockingIOError:
                    time.sleep(0.01)
        finally:
            os.close(fd)
    return out


def check_one_read():
    cfg = json.dumps(TINY).encode()
    args = ["run", "--no-timing", "--format", "csv", "--set", "data.query.count=3"]
    rc, want, err, _ = via("file", cfg, args)
    if rc != 0 or not want.startswith("label,"):
        report("read-once-file", "exit %d, stderr %s" % (rc, short(err)))
        return
    for kind in ("stdin", "devfd", "fifo"):
        rc, out, err, _ = via(kind, cfg, args)
        why = None
        if rc != 0:
            why = "exit %d, stderr %s" % (rc, short(err))
        elif out != want:
            why = "CSV differs from the regular file's: %s" % short(out)
        report("read-once-run-%s" % kind, why)

    # --resume from a pipe: the rows written from the file (shard 1/2: rows 0 and 2) are recognised by their ids
    csv_path = path("rows.csv")
    rc, _, err, _ = via("file", cfg, ["run", "--no-timing", "--shard", "1/2", "--out", csv_path, "-q"])
    rc2, _, err2, _ = via("stdin", cfg, ["run", "--no-timing", "--out", csv_path, "--resume"])
    with open(csv_path) as fh:
        got = fh.read()
    report("read-once-resume-stdin", None if rc == 0 and rc2 == 0 and "2 rows already there; running the other 1"
           in err2 and got.count("\n") == 4 else "exit %d/%d, stderr %s %s, file %s" %
           (rc, rc2, short(err), short(err2), short(got)))

    # kvc synth from stdin: the same files.json as from the file
    d_file, d_pipe = path("synth-file"), path("synth-pipe")
    rc1, _, e1, _ = via("file", cfg, ["synth", "-o", d_file, "--set", "seed=5"])
    rc2, _, e2, _ = via("stdin", cfg, ["synth", "-o", d_pipe, "--set", "seed=5"])
    why = None
    if rc1 != 0 or rc2 != 0:
        why = "exit %d/%d: %s %s" % (rc1, rc2, short(e1), short(e2))
    else:
        with open(os.path.join(d_file, "files.json")) as a, open(os.path.join(d_pipe, "files.json")) as b:
            fa, fb = a.read(), b.read()
        if fa != fb or '"seed": 5' not in fa:
            why = "files.json differs: %s vs %s" % (short(fa), short(fb))
    report("read-once-synth-stdin", why)

    # kvc merge --config from a FIFO: the resumed file in grid order, as one run of the file writes it
    rc0, whole, err0, _ = via("file", cfg, ["run", "--no-timing", "--format", "csv"])
    rc, out, err, _ = via("fifo", cfg, ["merge", "--config"], [csv_path])
    report("read-once-merge-fifo", None if rc0 == 0 and rc == 0 and out == whole else "exit %d/%d, stderr %s, out %s"
           % (rc0, rc, short(err0 + err), short(out)))


def check_list_without_data():
    big = write("big.json", BIG)
    # the control: the run itself does not fit under the limit (else the checks below prove nothing)
    rc, out, err, _ = run(["run", big, "--no-timing"], limited=True, timeout=120)
    if rc == 0:
        print("SKIP list-no-data: the data of big.json fits under the %d MB limit on this machine" % (LIMIT // 10**6))
        return
    rc, out, err, sec = run(["run", "--list", big], limited=True)
    if rc != 0 and "out of memory" not in err:   # e.g. a sanitizer build that reserves more than the limit
        rc0, _, err0, _ = run(["run", "--list", write("tiny.json", TINY)], limited=True)
        if rc0 != 0:
            print("SKIP list-no-data: kvc cannot start under a %d MB limit here (%s)" % (LIMIT // 10**6,
                                                                                       short(err0, 120)))
            return
    lines = out.splitlines()
    report("list-makes-no-data", None if rc == 0 and len(lines) == 4 and lines[3].split("\t")[3] == "window budget=256"
           else "exit %d, stdout %s, stderr %s" % (rc, short(out), short(err)))
    report("list-is-instant", None if rc == 0 and sec < 2 else "exit %d after %.2f s" % (rc, sec))
    rc, out, err, sec = run(["run", "--list", "--shard", "2/2", big], limited=True)
    lines = out.splitlines()
    report("list-shard-makes-no-data", None if rc == 0 and [ln.split("\t")[0] for ln in lines] == ["1", "3"] and
           sec < 2 else "exit %d after %.2f s, stdout %s, stderr %s" % (rc, sec, short(out), short(err)))

    # data.source "files" with a 1 GiB keys file: the config parses from the header alone
    shape = (32, 8, 4096, 128)
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % (shape,)
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    keys = path("big-keys.npy")
    with open(keys, "wb") as fh:
        fh.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        fh.truncate(fh.tell() + 8 * shape[0] * shape[1] * shape[2] * shape[3])   # a hole: no disk used
    files = write("big-files.json", {"data": {"source": "files", "files": {"keys": "big-keys.npy"}},
                                     "experiments": [{"method": "window", "budget": [64, 128]}]})
    rc, out, err, sec = run(["run", "--list", files], limited=True)
    report("list-files-reads-headers-only", None if rc == 0 and len(out.splitlines()) == 2 and sec < 2 else
           "exit %d after %.2f s, stdout %s, stderr %s" % (rc, sec, short(out), short(err)))


def check_values_with_the_data():
    # keys (16, 4) with a NaN at flat index 6, written by hand (kvc's writers refuse NaN)
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (16, 4), }"
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    vals = [0.5 * i for i in range(64)]
    vals[6] = float("nan")
    with open(path("nan-keys.npy"), "wb") as fh:
        fh.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<64d", *vals))
    cfg = write("nan.json", {"data": {"source": "files", "files": {"keys": "nan-keys.npy"}},
                             "experiments": [{"method": "window", "budget": 8}]})
    rc, out, err, _ = run(["run", "--list", cfg])
    report("nan-file-lists", None if rc == 0 and out.count("\n") == 1 else "exit %d, stderr %s" % (rc, short(err)))
    out_csv = path("never.csv")
    rc, out, err, _ = run(["run", cfg, "--out", out_csv])
    want = "kvc: %s: value at flat index 6 (index [1, 2]) is not finite (got nan)\n" % path("nan-keys.npy")
    report("nan-file-run-refused", None if rc == 2 and out == "" and err == want and not os.path.exists(out_csv)
           else "exit %d, stdout %s, stderr %s, --out file %s" % (rc, short(out), short(err),
                                                                  "exists" if os.path.exists(out_csv) else "absent"))


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make (run from the project root)" % KVC)
        return 1
    check_one_read()
    check_list_without_data()
    check_values_with_the_data()
    return checks.status()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
