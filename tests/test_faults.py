#!/usr/bin/python3
"""test_faults.py: kvc under faults, as a black box: FIFOs, devices, symbolic links and directories where files
are expected, concurrent writers, signals, a full disk, foreign and damaged results files (README "Reliability").

Each check names the failure class of the outside attack it guards (issue 15: F07 ... F15) or the property that
already held (SIGPIPE, kill -9, full disk). Every kvc run has a timeout, so a regression that blocks (a FIFO
opened for reading) fails its check instead of hanging `make test`. The full disk is an RLIMIT_FSIZE (what an
unprivileged CI can do); the character device is a node made with mknod when kvc runs as root (else /dev/null,
which a fixed kvc never replaces). Checks that cannot run here say so on a "SKIP <name>: why" line.

Run from the project root: /usr/bin/python3 tests/test_faults.py (KVC overrides ./kvc). Prints "PASS <name>" /
"FAIL <name>: <why>"; exits 1 if any check failed. Works in a mktemp directory, removed at the end.
"""
import fcntl
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import report  # noqa: E402

KVC = os.path.abspath(os.environ.get("KVC", "./kvc"))
GRID = os.path.abspath("tests/data/sweep/grid.json")    # 23 rows in a moment
SLOW = os.path.abspath("tests/data/sweep/slow.json")    # 32 rows of about 60 ms each
TMP = tempfile.mkdtemp(prefix="kvc-faults-")
ERR_RE = re.compile(r"^kvc: (.+): (.+) \(got (.*)\)$")


def default_signals():
    """The child starts with SIGINT/SIGTERM/SIGHUP at their defaults (a background `make test` ignores SIGINT)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def kvc(*args, timeout=60, preexec=None, stdin=subprocess.DEVNULL):
    """(status, stdout bytes, stderr text); status -999 when it ran past the timeout (and was killed)."""
    try:
        p = subprocess.run([KVC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin,
                           timeout=timeout, preexec_fn=preexec or default_signals, cwd=TMP)
    except subprocess.TimeoutExpired:
        return -999, b"", "timed out after %d s" % timeout
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def one_error(res, status=2, where=None, what=None):
    """None when kvc exited `status` with nothing on stdout and one 'kvc: <where>: <what> (got ...)' line."""
    rc, out, err = res
    lines = err.splitlines()
    if rc != status:
        return "exit %d, wanted %d: %s" % (rc, status, err.strip()[:300])
    if out:
        return "stdout not empty: %r" % out[:100]
    if len(lines) != 1 or not ERR_RE.match(lines[0]):
        return "stderr is not one 'kvc: <where>: <what> (got <value>)' line: %r" % err[:300]
    if where and not lines[0].startswith("kvc: " + where):
        return "message does not start with %r: %r" % (where, lines[0])
    if what and not re.search(what, lines[0]):
        return "message lacks /%s/: %r" % (what, lines[0])
    return None


def path(*names):
    return os.path.join(TMP, *names)


def read(p):
    with open(p, "rb") as fh:
        return fh.read()


def write(p, data):
    with open(p, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode())
    return p


def leftovers(d=TMP):
    return sorted(n for n in os.listdir(d) if ".tmp." in n or n.startswith(".kvc-tmp."))


def check(name, fn):
    try:
        r = fn()
        if r == "skip":
            print("SKIP %s: cannot make a character device node here (root without mknod)" % name)
        else:
            report(name, r)
    except Exception as e:  # a crash of one check is its failure
        report(name, "%s: %s" % (type(e).__name__, e))


# reference outputs (no timing: byte-identical across runs)
TABLE = kvc("run", GRID, "--no-timing")[1]
CSV = kvc("run", GRID, "--no-timing", "--format", "csv")[1]
JSONL = kvc("run", GRID, "--no-timing", "--format", "jsonl")[1]


def run_grid(*args, **kw):
    return kvc("run", GRID, "--no-timing", *args, **kw)


# ---------------------------------------------------------------- F07: a FIFO where a file is read

def f07_fifo_tensor():
    fifo = path("k-fifo.npy")
    os.mkfifo(fifo)
    cfg = write(path("fifo.json"), '{"seed": 0, "data": {"source": "files", "files": {"keys": "%s"}}, '
                '"experiments": [{"method": "quantize", "bits": 4, "apply_to": "k"}]}' % fifo)
    return one_error(kvc("run", cfg, timeout=20), where=fifo, what="not a regular file")


def f07_fifo_merge():
    fifo = path("in-fifo.csv")
    os.mkfifo(fifo)
    return one_error(kvc("merge", fifo, timeout=20), where=fifo, what="not a regular file")


# ---------------------------------------------------------------- F09: what --out names

def is_link_to(p, target):
    return os.path.islink(p) and os.readlink(p) == target


def f09_table_symlink():
    write(path("real.txt"), "old\n")
    os.symlink("real.txt", path("link.txt"))
    rc, out, err = run_grid("--out", path("link.txt"))
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    if not is_link_to(path("link.txt"), "real.txt"):
        return "the symbolic link was replaced by a file"
    return None if read(path("real.txt")) == TABLE else "the link's target does not hold the table"


def f09_merge_symlink():
    write(path("shards.csv"), CSV)
    write(path("mreal.csv"), "old\n")
    os.symlink(path("mreal.csv"), path("mlink.csv"))
    rc, out, err = kvc("merge", "-q", "--config", GRID, "--out", path("mlink.csv"), path("shards.csv"))
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    if not is_link_to(path("mlink.csv"), path("mreal.csv")):
        return "the symbolic link was replaced by a file"
    return None if read(path("mreal.csv")) == CSV else "the link's target does not hold the merged rows"


def f09_csv_symlink():
    os.symlink("creal.csv", path("clink.csv"))
    write(path("creal.csv"), "")
    rc, out, err = run_grid("--out", path("clink.csv"))
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    ok = is_link_to(path("clink.csv"), "creal.csv") and read(path("creal.csv")) == CSV
    return None if ok else "the link or its target is wrong"


def f09_dangling_symlink():
    os.symlink("nowhere.txt", path("dangling.txt"))
    r = one_error(run_grid("--out", path("dangling.txt")), where=path("dangling.txt"), what="does not exist")
    if r:
        return r
    return None if is_link_to(path("dangling.txt"), "nowhere.txt") and not os.path.exists(path("nowhere.txt")) \
        else "the dangling link or its target changed"


def fifo_reader(fifo, result):
    def body():
        with open(fifo, "rb") as fh:
            result.append(fh.read())
    t = threading.Thread(target=body, daemon=True)   # daemon: a regression that never writes cannot hang the test
    t.start()
    return t


def f09_table_fifo():
    fifo = path("table.fifo")
    os.mkfifo(fifo)
    got = []
    t = fifo_reader(fifo, got)
    rc, out, err = run_grid("--out", fifo, "--format", "table", timeout=30)
    t.join(10)
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
        return "the FIFO was replaced by a file"
    return None if got == [TABLE] else "the reader got %r" % (got[:1],)


def f09_merge_fifo():
    fifo = path("merge.fifo")
    os.mkfifo(fifo)
    write(path("shards2.csv"), CSV)
    got = []
    t = fifo_reader(fifo, got)
    rc, out, err = kvc("merge", "-q", "--out", fifo, "--", path("shards2.csv"), timeout=30)
    t.join(10)
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
        return "the FIFO was replaced by a file"
    return None if got == [CSV] else "the reader got %r" % (got[:1],)


_nodes = [0]


def char_device():
    """A character device to write to: a fresh null device node of our own when we may make one (root), else
    /dev/null, which only root could have replaced (a regression of kvc must never touch the real one: as root
    without mknod the check is skipped). None: skip."""
    _nodes[0] += 1
    node = path("null-dev-%d" % _nodes[0])
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        with open(node, "wb") as fh:
            fh.write(b"x")
        return node
    except OSError:
        if os.path.lexists(node):
            os.unlink(node)
        return None if os.geteuid() == 0 else "/dev/null"


def f09_table_device():
    dev = char_device()
    if dev is None:
        return "skip"
    rc, out, err = run_grid("--out", dev, "--format", "table")
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    if not stat.S_ISCHR(os.lstat(dev).st_mode):
        return "%s was replaced by a regular file" % dev
    return None if not leftovers() else "temporary files left: %s" % leftovers()


def f09_merge_device():
    dev = char_device()
    if dev is None:
        return "skip"
    write(path("shards3.csv"), CSV)
    rc, out, err = kvc("merge", "-q", "--out", dev, "--", path("shards3.csv"))
    if rc != 0:
        return "exit %d: %s" % (rc, err)
    return None if stat.S_ISCHR(os.lstat(dev).st_mode) else "%s was replaced by a regular file" % dev


def f09_table_directory():
    d = path("outdir")
    os.mkdir(d)
    t0 = time.time()
    r = one_error(kvc("run", SLOW, "--no-timing", "--out", d, "--format", "table"), where=d, what="a directory")
    if r:
        return r
    if time.time() - t0 > 1.5:
        return "refused only after the work (%.1f s)" % (time.time() - t0)
    return None if not os.listdir(d) and not leftovers() else "files left behind"


# ---------------------------------------------------------------- F13: merge --out DIR, before the work

def f13_merge_out_dir():
    d = path("mergedir")
    os.mkdir(d)
    write(path("in13.csv"), CSV)
    return one_error(kvc("merge", "--out", d, path("in13.csv")), where=d, what="a directory") or \
        (None if not leftovers() and not os.listdir(d) else "files left behind")


# ---------------------------------------------------------------- F10: one lock for every writer

def hold_lock(p):
    """Locks p the way another process would (a POSIX lock, as python's lockf takes it); returns the file."""
    fh = open(p, "a")
    fcntl.lockf(fh, fcntl.LOCK_EX)
    return fh


def f10_merge_refuses_locked():
    target = write(path("locked.csv"), "old row\n")
    write(path("in10.csv"), CSV)
    out = None
    with hold_lock(target):   # in this process, so a child kvc sees it held
        out = one_error(kvc("merge", "--out", target, path("in10.csv")), where=target, what="another kvc is writing")
    return out or (None if read(target) == b"old row\n" else "the locked file was replaced")


def f10_table_refuses_locked():
    target = write(path("locked.txt"), "old table\n")
    with hold_lock(target):
        out = one_error(run_grid("--out", target), where=target, what="another kvc is writing")
    return out or (None if read(target) == b"old table\n" and not leftovers() else "the locked file was replaced")


def wait_for(cond, secs=20):
    end = time.time() + secs
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def f10_merge_vs_running_run():
    """kvc run --out F (CSV, slow) holds F; kvc merge --out F meanwhile is refused, and the run's file stays."""
    f = path("running.csv")
    write(path("in10b.csv"), CSV)
    p = subprocess.Popen([KVC, "run", SLOW, "--no-timing", "-q", "--out", f], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=default_signals)
    try:
        if not wait_for(lambda: os.path.exists(f) and os.path.getsize(f) > 0):
            return "the run did not start writing"
        ino = os.stat(f).st_ino
        res = kvc("merge", "--out", f, path("in10b.csv"))
        rc = p.wait(60)
        r = one_error(res, where=f, what="another kvc is writing")
        if r:
            return r
        if rc != 0 or os.stat(f).st_ino != ino:
            return "the run's file was replaced (run exit %d)" % rc
        rows = read(f).count(b"\n") - 1
        return None if rows == 32 else "the run's file holds %d rows, not 32" % rows
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def f10_table_run_holds_its_file():
    """A table run holds the FILE it will replace: a CSV run on the same FILE meanwhile is refused."""
    f = write(path("held.out"), "old\n")
    p = subprocess.Popen([KVC, "run", SLOW, "--no-timing", "-q", "--out", f, "--format", "table"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=default_signals)
    try:
        if not wait_for(lambda: leftovers()):
            return "the table run made no temporary file"
        res = kvc("run", GRID, "--no-timing", "--format", "csv", "--out", f)
        p.wait(60)
        return one_error(res, where=f, what="another kvc is writing")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ---------------------------------------------------------------- F15: signals during a table --out

def f15_signal(sig):
    def body():
        f = write(path("sig%d.txt" % sig), "old\n")
        p = subprocess.Popen([KVC, "run", SLOW, "--no-timing", "-q", "--out", f], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, preexec_fn=default_signals)
        try:
            if not wait_for(lambda: leftovers()):
                return "no temporary file appeared"
            time.sleep(0.2)
            p.send_signal(sig)
            rc = p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if rc != -sig:
            return "exit %d, wanted death by signal %d" % (rc, sig)
        if leftovers():
            return "left behind: %s" % leftovers()
        return None if read(f) == b"old\n" else "FILE changed"
    return body


# ---------------------------------------------------------------- F11: --resume on files that are not kvc's

def f11_foreign(name, data):
    def body():
        f = write(path(name), data)
        r = one_error(run_grid("--out", f, "--resume"), where=f)
        return r or (None if read(f) == data else "the file was changed")
    return body


def f11_torn_row_then_nuls():
    """What kvc may drop: the beginning of one of its rows, and NUL bytes a crash left after it."""
    lines = CSV.split(b"\n")
    f = write(path("torn-nuls.csv"), b"\n".join(lines[:4]) + b"\n" + lines[4][:25] + b"\0" * 64)
    rc, out, err = run_grid("--out", f, "--resume", "-q")
    return None if rc == 0 and read(f) == CSV else "exit %d: %s" % (rc, err)


# ---------------------------------------------------------------- F12: every cell checked

def mutate_csv(col, value, line=2):
    lines = CSV.split(b"\n")
    header = lines[0].split(b",")
    k = header.index(col.encode())
    # the row's fields from the end (the label may hold commas): id is last, so index from the right
    fields = lines[line - 1].split(b",")
    fields[len(fields) - (len(header) - k)] = value.encode()
    lines[line - 1] = b",".join(fields)
    return b"\n".join(lines)


def mutate_jsonl(col, value, line=2):
    lines = JSONL.split(b"\n")
    lines[line - 1] = re.sub(rb'"%s":[^,}]*' % col.encode(), b'"%s":%s' % (col.encode(), value.encode()),
                             lines[line - 1])
    return b"\n".join(lines)


def f12_cell(fmt, col, value):
    def body():
        data = (mutate_csv if fmt == "csv" else mutate_jsonl)(col, value)
        if data == (CSV if fmt == "csv" else JSONL):
            return "the test did not change the cell"
        f = write(path("cell-%s-%s.%s" % (col, re.sub(r"\W", "_", value), fmt)), data)
        what = r"column \d+ \(%s\)" % col
        r = one_error(kvc("merge", f), where="merge: " + f + ":2", what=what)
        if r:
            return "merge: " + r
        r = one_error(run_grid("--out", f, "--resume"), where=f + ":2", what=what)
        if r:
            return "resume: " + r
        return None if read(f) == data else "--resume changed the file"
    return body


# ---------------------------------------------------------------- F14: kvc synth -o DIR never mixes two sets

SYNTH_CFG = ('{"seed": 1, "data": {"kv_heads": 1, "q_heads": 16, "tokens": 64, "head_dim": 16, '
             '"keys": {"generator": "normal"}, "values": {"generator": "normal"}, '
             '"query": {"generator": "look_back", "count": 64, "weight": 0.5, "noise": 0.5}}, '
             '"experiments": [{"method": "quantize", "bits": 4}]}')


def small_files(limit):
    """RLIMIT_FSIZE = limit bytes, SIGXFSZ ignored: a write past it fails with EFBIG, as on a full disk."""
    def pre():
        default_signals()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def snapshot(d):
    return {n: read(os.path.join(d, n)) for n in sorted(os.listdir(d))}


def f14_synth_full_disk():
    cfg = write(path("synth.json"), SYNTH_CFG)
    d = path("synth-out")
    rc, out, err = kvc("synth", cfg, "-o", d)
    if rc != 0:
        return "first synth: exit %d: %s" % (rc, err)
    before = snapshot(d)
    if not len(before["keys.npy"]) < 40000 < len(before["queries.npy"]):
        return "the sizes do not make queries.npy the one that fails"
    # keys.npy and values.npy fit under the limit, queries.npy does not
    r = one_error(kvc("synth", cfg, "-o", d, "--set", "seed=2", preexec=small_files(40000)), status=1,
                  where=os.path.join(d, "queries.npy"))
    if r:
        return r
    return None if snapshot(d) == before else "DIR now mixes two data sets: %s" % sorted(
        n for n in before if before[n] != snapshot(d).get(n))


def f14_synth_fresh_dir_full_disk():
    cfg = write(path("synth2.json"), SYNTH_CFG)
    d = path("synth-new")
    r = one_error(kvc("synth", cfg, "-o", d, preexec=small_files(40000)), status=1)
    return r or (None if not os.path.exists(d) else "a half-written DIR was left: %s" % os.listdir(d))


# ---------------------------------------------------------------- what already held, kept

def sigpipe_quiet():
    p = subprocess.Popen([KVC, "run", SLOW, "--no-timing", "--format", "csv"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_DFL))
    p.stdout.readline()
    p.stdout.close()
    rc = p.wait(60)
    err = p.stderr.read()
    return None if rc == -signal.SIGPIPE and not err else "exit %d, stderr %r" % (rc, err[:200])


def full_disk_prefix_resumable():
    f = path("full.csv")
    rc, out, err = run_grid("--out", f, "-q", preexec=small_files(3000))
    if rc != 1 or "write error" not in err:
        return "exit %d: %s" % (rc, err)
    got = read(f)
    if not (0 < len(got) <= 3000 and CSV.startswith(got)):
        return "the file is not a prefix of the full output (%d bytes)" % len(got)
    rc, out, err = run_grid("--out", f, "--resume", "-q")
    return None if rc == 0 and read(f) == CSV else "resume: exit %d: %s" % (rc, err)


def second_resume_refused():
    f = path("twice.csv")
    p = subprocess.Popen([KVC, "run", SLOW, "--no-timing", "-q", "--out", f, "--resume"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=default_signals)
    try:
        if not wait_for(lambda: os.path.exists(f) and os.path.getsize(f) > 0):
            return "the first run did not start"
        r = one_error(kvc("run", SLOW, "--no-timing", "--out", f, "--resume"), where=f, what="another kvc")
        p.wait(60)
        return r
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def read_only_dir():
    if os.geteuid() == 0:
        print("SKIP read-only-directory: root ignores directory permissions")
        return "skip"
    d = path("ro")
    os.mkdir(d)
    os.chmod(d, 0o555)
    try:
        return one_error(run_grid("--out", os.path.join(d, "t.txt")), where=os.path.join(d, "t.txt"),
                         what="cannot create a temporary file")
    finally:
        os.chmod(d, 0o755)


def main():
    if not TABLE or not CSV or not JSONL:
        report("faults-reference", "kvc run %s failed" % GRID)
        return 1
    cases = [
        ("F07-fifo-as-tensor-file", f07_fifo_tensor),
        ("F07-fifo-as-merge-input", f07_fifo_merge),
        ("F09-table-out-symlink-followed", f09_table_symlink),
        ("F09-merge-out-symlink-followed", f09_merge_symlink),
        ("F09-csv-out-symlink-followed", f09_csv_symlink),
        ("F09-out-dangling-symlink-refused", f09_dangling_symlink),
        ("F09-table-out-fifo-written-through", f09_table_fifo),
        ("F09-merge-out-fifo-written-through", f09_merge_fifo),
        ("F09-table-out-char-device-written-through", f09_table_device),
        ("F09-merge-out-char-device-written-through", f09_merge_device),
        ("F09-table-out-directory-refused-first", f09_table_directory),
        ("F13-merge-out-directory-refused-first", f13_merge_out_dir),
        ("F10-merge-out-refuses-a-locked-file", f10_merge_refuses_locked),
        ("F10-table-out-refuses-a-locked-file", f10_table_refuses_locked),
        ("F10-merge-out-refused-while-a-run-writes", f10_merge_vs_running_run),
        ("F10-table-run-holds-its-file", f10_table_run_holds_its_file),
        ("F15-sigterm-removes-the-temporary", f15_signal(signal.SIGTERM)),
        ("F15-sigint-removes-the-temporary", f15_signal(signal.SIGINT)),
        ("F15-sighup-removes-the-temporary", f15_signal(signal.SIGHUP)),
        ("F11-resume-refuses-notes-without-newline", f11_foreign("notes.csv", b"my notes, no final newline")),
        ("F11-resume-refuses-a-json-object", f11_foreign("obj.jsonl", b'{"a": 1}')),
        ("F11-resume-refuses-binary-bytes", f11_foreign("bin.csv", bytes(range(1, 200)))),
        ("F11-resume-refuses-a-foreign-last-line", f11_foreign("tail.csv", CSV[:CSV.index(b"\n", 400) + 1]
                                                              + b"my notes")),
        ("F11-resume-refuses-a-foreign-jsonl-last-line", f11_foreign("tail.jsonl", JSONL.split(b"\n")[0]
                                                                    + b'\n{"label":"no such'),),
        ("F11-resume-refuses-nul-bytes-only", f11_foreign("nuls.csv", b"\0" * 100)),
        ("F11-resume-drops-a-torn-row-and-nul-bytes", f11_torn_row_then_nuls),
        ("F12-csv-count-19x2", f12_cell("csv", "bytes", "19x2")),
        ("F12-csv-count-negative", f12_cell("csv", "bytes", "-512")),
        ("F12-csv-nan", f12_cell("csv", "attn_error", "nan")),
        ("F12-csv-1e999", f12_cell("csv", "k_error", "1e999")),
        ("F12-csv-not-kvc-spelling", f12_cell("csv", "ratio", "5.3333333333333330")),
        ("F12-jsonl-string-count", f12_cell("jsonl", "bytes", '"192"')),
        ("F12-jsonl-count-negative", f12_cell("jsonl", "baseline_bytes", "-512")),
        ("F12-jsonl-1e999", f12_cell("jsonl", "attn_error", "1e999")),
        ("F12-jsonl-nan", f12_cell("jsonl", "v_error", "NaN")),
        ("F14-synth-full-disk-keeps-the-old-set", f14_synth_full_disk),
        ("F14-synth-full-disk-leaves-no-new-dir", f14_synth_fresh_dir_full_disk),
        ("sigpipe-exits-141-quietly", sigpipe_quiet),
        ("full-disk-out-exact-prefix-resumable", full_disk_prefix_resumable),
        ("second-concurrent-resume-refused", second_resume_refused),
    ]
    for name, fn in cases:
        check(name, fn)
    r = read_only_dir()
    if r != "skip":
        report("read-only-directory", r)
    return checks.status()


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
