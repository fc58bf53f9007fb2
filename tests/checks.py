"""tests/checks.py: the PASS/FAIL protocol of the Python tests (docs/HACKING.md, tests/run.sh) in one place,
the twin of tests/check.h. report(name, why) prints "PASS <name>" when why is None, else "FAIL <name>: <why>"
and counts the failure in checks.failed; a test ends with `sys.exit(checks.status())` or returns it.
skip(name, why) prints "SKIP <name>: <why>" for a check this machine cannot run (no terminal device, say):
tests/run.sh counts and shows it; it is never a way around a missing build or feature (that is a FAIL).
methods_config(tmp, cache) writes the small every-family config that the tests comparing runs byte for byte share
(test_stream_run.py: whole vs streamed data; test_jobs_run.py: -j 1 vs more)."""

import json
import os

failed = 0


def report(name, why):
    global failed
    if why is None:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def skip(name, why):
    print("SKIP %s: %s" % (name, why))


def status():
    """The exit status so far: 1 if any check failed, else 0."""
    return 1 if failed else 0


def methods_config(tmp, cache):
    """configs/methods.json (every method family, pipelines, head sharing, joint low rank, the realistic generators)
    at 2 layers x 256 tokens, RoPE cached `cache` ("pre" or "post"), written into directory tmp; returns its path.
    Run from the project root."""
    with open("configs/methods.json") as fh:
        cfg = json.load(fh)
    d = cfg["data"]
    d.update({"layers": 2, "tokens": 256})
    d["recent"]["tokens"] = 32
    d["heavy_hitters"]["count"] = 8
    d["rope"]["cache"] = cache
    path = os.path.join(tmp, "methods-%s.json" % cache)
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return path
