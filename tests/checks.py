"""tests/checks.py: the PASS/FAIL protocol of the Python tests (docs/HACKING.md, tests/run.sh) in one place,
the twin of tests/check.h. report(name, why) prints "PASS <name>" when why is None, else "FAIL <name>: <why>"
and counts the failure in checks.failed; a test ends with `sys.exit(checks.status())` or returns it."""

failed = 0


def report(name, why):
    global failed
    if why is None:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def status():
    """The exit status so far: 1 if any check failed, else 0."""
    return 1 if failed else 0
