"""tests/checks.py: the PASS/FAIL protocol of the Python tests (docs/HACKING.md, tests/run.sh) in one place,
the twin of tests/check.h. report(name, why) prints "PASS <name>" when why is None, else "FAIL <name>: <why>"
and counts the failure in checks.failed; a test ends with `sys.exit(checks.status())` or returns it.
skip(name, why) prints "SKIP <name>: <why>" for a check this machine cannot run (no terminal device, say):
tests/run.sh counts and shows it; it is never a way around a missing build or feature (that is a FAIL)."""

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
