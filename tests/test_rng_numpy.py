"""test_rng_numpy.py: checks src/base/rng.c against live numpy, bit for bit.

For several seeds (small, 2^32+7, 2^53, >= 2^64 and a multi-word one that exercises SeedSequence's
phase 3) it compares 100,000 normals from `build/tests/test_rng --dump SEED 100000` with
np.random.default_rng(SEED).normal(size=100000) as uint64 bit patterns. Run from the project root with
the numpy the reference was taken from (Debian's numpy 1.24.2 at /usr/bin/python3).
Prints "PASS name" / "FAIL name: why" per seed; exits 1 on any failure.
"""
import os
import subprocess
import sys

import numpy as np

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

BIN = os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_rng")   # make sanitize: build-san/tests
N = 100_000
SEEDS = [0, 42, 2**32 + 7, 12345678901234567890123, 2**53,
         31415926535897932384626433832795028841971693993751058209749445923]  # 7 words


def check(seed):
    name = "numpy_normal_%d_seed_%d" % (N, seed)
    proc = subprocess.run([BIN, "--dump", str(seed), str(N)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    if proc.returncode != 0:
        return name, "%s exited %d: %s" % (BIN, proc.returncode, proc.stderr.decode().strip())
    if len(proc.stdout) != 8 * N:
        return name, "got %d bytes from %s, want %d" % (len(proc.stdout), BIN, 8 * N)
    got = np.frombuffer(proc.stdout, dtype="<f8").view(np.uint64)
    want = np.random.default_rng(seed).normal(size=N).view(np.uint64)
    bad = np.flatnonzero(got != want)
    if bad.size:
        i = int(bad[0])
        g, w = (float(np.array([v]).view(np.float64)[0]) for v in (got[i], want[i]))
        return name, "%d mismatches, first at index %d: kvc %s (0x%016x), numpy %s (0x%016x)" % (
            bad.size, i, g.hex(), int(got[i]), w.hex(), int(want[i]))
    return name, None


def main():
    if not os.access(BIN, os.X_OK):
        report("numpy_normal", "%s is missing (build it: make %s; run from the project root)" % (BIN, BIN))
        return checks.status()
    for seed in SEEDS:
        report(*check(seed))
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
