#!/bin/sh
# tests/run.sh: runs every kvc test and prints "N passed, N failed" as its last line.
# Protocol: each test program prints one line per check, "PASS <name>" or "FAIL <name>: <why>",
# and exits non-zero when any check failed. A program that exits non-zero without printing a
# FAIL line counts as one failure. Programs: $KVC_TESTBIN/* (C unit tests), tests/test_*.sh, tests/test_*.py.
# Run from the project root (make test does).
# Environment: KVC (default ./kvc) is the binary the black-box tests run, KVC_TESTBIN (default build/tests)
# the directory of C unit-test binaries; make sanitize points them at build-san/.
PY=${PY:-/usr/bin/python3}
KVC=${KVC:-./kvc}
KVC_TESTBIN=${KVC_TESTBIN:-build/tests}
export PY KVC KVC_TESTBIN
# the same BLAS kernels and numpy exp/log on every x86 CPU (see the script)
. scripts/numeric-env.sh
pass=0
fail=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

run_one() {
    name=$1; shift
    "$@" >"$tmp" 2>&1
    rc=$?
    p=$(grep -c '^PASS ' "$tmp")
    f=$(grep -c '^FAIL ' "$tmp")
    grep '^FAIL ' "$tmp"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exited with status $rc"
        tail -n 20 "$tmp" | sed 's/^/    /'
        f=1
    fi
    echo "$name: $p passed, $f failed"
    pass=$((pass + p)); fail=$((fail + f))
}

for t in "$KVC_TESTBIN"/*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    run_one "$t" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] && run_one "$t" sh "$t"
done
for t in tests/test_*.py; do
    [ -f "$t" ] && run_one "$t" "$PY" "$t"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
