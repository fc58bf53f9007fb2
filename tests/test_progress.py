#!/usr/bin/env python3
"""kvc run's progress line on a terminal (README "Progress", src/report/sweep.h), driven through a pseudo-terminal
(the pty module: kvc gets it as its controlling terminal and stderr; stdout goes to a file):
  - the line is redrawn on a clock, at least twice a second, during a row that takes seconds (a decode step through
    the generic tile path, timed 1000 times), and names every phase: making data, reference, row k/N with its
    label, timing the FP16 reference, timing;
  - Ctrl-C (the terminal's interrupt character) ends the line with a newline and kvc dies of SIGINT: nothing follows
    the last newline, where the shell's prompt goes;
  - SIGTERM does the same and removes the temporary file of a table --out (base/fileio's handler, one handler);
  - a run that finishes leaves its summary line, ended; a run that fails ends the line before its error message.
Where no pseudo-terminal can be opened each check prints "SKIP <name>: <why>". Prints PASS/FAIL lines; exits 1 on
any failure."""
import json
import os
import pty
import re
import select
import signal
import sys
import tempfile
import time

import checks  # tests/checks.py: PASS/FAIL/SKIP lines
from checks import report

KVC = os.path.abspath(os.environ.get("KVC", "./kvc"))
NAMES = ["progress-phases", "progress-clock", "progress-sigint-ends-line", "progress-sigint-exit",
         "progress-sigterm-ends-line", "progress-sigterm-removes-temporary", "progress-finished-line",
         "progress-error-ends-line"]

# one row whose decode step goes through the generic tile path (3-bit asymmetric groups): tens of ms a step on a
# 4096-token cache, so --timing-repeat 1000 keeps it in its timing step far longer than the checks watch it
SLOW = {"seed": 5, "data": {"tokens": 4096, "head_dim": 64, "layers": 2, "kv_heads": 2, "q_heads": 4,
                            "keys": {"generator": "normal"}, "values": {"generator": "normal"}},
        "experiments": [{"method": "quantize", "bits": 3, "symmetric": False, "group_size": 32,
                         "label": "slow int3"}]}
SMALL = {"seed": 5, "data": {"tokens": 64, "head_dim": 16, "keys": {"generator": "normal"},
                             "values": {"generator": "normal"}},
         "experiments": [{"method": "quantize", "bits": [8, 4]}]}


class Run:
    """kvc with the pty as controlling terminal, stdin and stderr; stdout to a file. Keeps every chunk the
    terminal shows with its arrival time."""

    def __init__(self, args, stdout_path):
        pid, fd = pty.fork()
        if pid == 0:   # the child: default signal dispositions (a test runner may ignore SIGINT), stdout to a file
            try:
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                out = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(out, 1)
                env = dict(os.environ, KVC_PROGRESS_DELAY="0")
                os.execve(KVC, [KVC] + args, env)
            finally:
                os._exit(127)
        self.pid, self.fd, self.chunks, self.status, self.eof = pid, fd, [], None, False

    def read(self, until):
        """Reads what the terminal shows until `until` (a time) or the end."""
        while not self.eof:
            left = until - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([self.fd], [], [], min(left, 0.05))
            if not r:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:   # EIO: the child is gone and the slave side closed
                data = b""
            if not data:
                self.eof = True
            else:
                self.chunks.append((time.monotonic(), data))

    def wait_for(self, text, timeout):
        """Reads until a redraw contains text; returns the time of its chunk, or None."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.eof:
            self.read(min(end, time.monotonic() + 0.1))
            for t, frame in self.frames():
                if text in frame:
                    return t
        return None

    def finish(self, timeout=60):
        self.read(time.monotonic() + timeout)
        if not self.eof:
            os.kill(self.pid, signal.SIGKILL)
        _, self.status = os.waitpid(self.pid, 0)
        os.close(self.fd)

    def raw(self):
        return b"".join(c for _, c in self.chunks)

    def frames(self):
        """(time, text) of every redraw of the line: what follows each carriage return up to the next control
        character other than a space."""
        out = []
        for t, c in self.chunks:
            for part in c.split(b"\r")[1:]:
                m = re.match(rb"[^\r\n\b]*", part)
                text = m.group(0).decode("utf-8", "replace").rstrip()
                if text:
                    out.append((t, text))
        return out


def signalled(status, sig):
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == sig


def ends_line(raw):
    """The terminal's last bytes end a line (the pty turns \\n into \\r\\n) and a line of kvc's is just above."""
    return raw.endswith(b"\n") and b"kvc: " in raw.rstrip(b"\r\n").split(b"\n")[-1]


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-progress-")
    slow, small = os.path.join(tmp, "slow.json"), os.path.join(tmp, "small.json")
    for path, cfg in ((slow, SLOW), (small, SMALL)):
        with open(path, "w") as fh:
            json.dump(cfg, fh)
    out = os.path.join(tmp, "stdout")
    try:
        probe = Run(["--version"], out)
    except OSError as e:   # no pseudo-terminal device on this machine
        for name in NAMES:
            checks.skip(name, "cannot open a pseudo-terminal (%s)" % e)
        return checks.status()
    probe.finish()

    # ---- a slow row: the clock, the phases, then Ctrl-C
    r = Run(["run", slow, "--format", "csv", "--timing-repeat", "1000"], out)
    t0 = r.wait_for("timing: slow int3", 60)
    if t0 is not None:
        r.read(t0 + 2.0)
        os.write(r.fd, b"\x03")   # the terminal's interrupt character: SIGINT to kvc, as Ctrl-C
    r.finish()
    frames = [f for _, f in r.frames()]
    want = ["making data", "reference", "row 1/1", "timing the FP16 reference", "timing: slow int3"]
    missing = [w for w in want if not any(w in f for f in frames)]
    report("progress-phases", None if not missing else "no redraw shows %r; redraws %r" % (missing, frames[:12]))
    if t0 is None:
        report("progress-clock", "never reached the timing step (terminal showed %r)" % r.raw()[-300:])
    else:
        window = [(t, f) for t, f in r.frames() if t0 <= t <= t0 + 2.0 and "timing: slow int3" in f]
        clocks = [f.split()[1] for _, f in window]
        # at least twice a second over 2 s; the elapsed time moves on
        report("progress-clock", None if len(window) >= 4 and len(set(clocks)) >= 3 else
               "%d redraws in 2 s of one row (elapsed %r)" % (len(window), clocks))
    raw = r.raw()
    report("progress-sigint-ends-line", None if t0 is not None and ends_line(raw) else
           "the terminal ends with %r" % raw[-160:])
    report("progress-sigint-exit", None if signalled(r.status, signal.SIGINT) else "wait status %r" % r.status)

    # ---- SIGTERM while a table is being written to --out: the line ends, the temporary goes
    odir = os.path.join(tmp, "o")
    os.mkdir(odir)
    r = Run(["run", slow, "--out", os.path.join(odir, "r.txt"), "--timing-repeat", "1000"], out)
    t0 = r.wait_for("timing: slow int3", 60)
    if t0 is not None:
        os.kill(r.pid, signal.SIGTERM)
    r.finish()
    raw = r.raw()
    report("progress-sigterm-ends-line", None if t0 is not None and ends_line(raw) and
           signalled(r.status, signal.SIGTERM) else "wait status %r, terminal ends with %r" % (r.status, raw[-160:]))
    left = os.listdir(odir)
    report("progress-sigterm-removes-temporary", None if t0 is not None and left == [] else "left %r" % left)

    # ---- a run that finishes: its summary stays, ended
    r = Run(["run", small, "--format", "csv", "--no-timing"], out)
    r.finish()
    raw = r.raw()
    last = raw.rstrip(b"\r\n").split(b"\n")[-1].split(b"\r")[-1].decode("utf-8", "replace")
    report("progress-finished-line", None if os.WIFEXITED(r.status) and os.WEXITSTATUS(r.status) == 0 and
           ends_line(raw) and re.match(r"kvc: 2/2 rows \(100%\), .* rows/s, in ", last) else
           "status %r, last line %r" % (r.status, last))

    # ---- a run that fails in a row (a write error): the line ends before the message
    r = Run(["run", small, "--format", "csv", "--no-timing", "--out", "/dev/full"], out)
    r.finish()
    raw = r.raw()
    at = raw.find(b"kvc: /dev/full: write error")
    report("progress-error-ends-line", None if os.WIFEXITED(r.status) and os.WEXITSTATUS(r.status) == 1 and
           at > 0 and raw[:at].endswith(b"\n") and raw.endswith(b"\n") else
           "status %r, terminal %r" % (r.status, raw[-300:]))

    for root, dirs, files in os.walk(tmp, topdown=False):
        for f in files:
            os.remove(os.path.join(root, f))
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    os.rmdir(tmp)
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
