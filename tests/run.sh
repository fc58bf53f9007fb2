#!/bin/sh
# tests/run.sh: runs every kvc test and prints "N passed, N failed" as its last line.
# Protocol: each test program prints one line per check, "PASS <name>" or "FAIL <name>: <why>",
# and exits non-zero when any check failed. A program that exits non-zero without printing a
# FAIL line counts as one failure. Programs: build/tests/* (C unit tests), tests/test_*.sh, tests/test_*.py.
# Run from the project root (make test does).
PY=${PY:-/usr/bin/python3}
export PY
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

for t in build/tests/*; do
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
