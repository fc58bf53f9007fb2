#!/bin/sh
# tests/valgrind.sh [KVC]: valgrind memcheck of kvc (default ./kvc) on the lesson and practice runs, in every
# output format, and on one rejected config (the error path must free what it allocated too).
# Each run must report no memory errors and no leaks (definite, indirect or possible). Part of make sanitize
# (about 15 s); not part of make test, because valgrind is not among the packages bootstrap.sh installs.
# Protocol: "PASS <name>" / "FAIL <name>: <why>" per run; exits non-zero on any failure.
# Skips (one note on stderr, exit 0) when valgrind is not installed.
KVC=${1:-./kvc}
if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind.sh: valgrind is not installed; skipped (apt-get install valgrind)" >&2
    exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME WANT_RC ARGS...
    name=$1; want=$2; shift 2
    valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
        --errors-for-leak-kinds=definite,indirect,possible "$KVC" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL valgrind-$name: exit $rc, want $want"
        head -n 30 "$tmp/err" | sed 's/^/    /'
        fail=1
    elif grep -q '^==[0-9]*==' "$tmp/err"; then
        echo "FAIL valgrind-$name: valgrind reported something"
        head -n 30 "$tmp/err" | sed 's/^/    /'
        fail=1
    else
        echo "PASS valgrind-$name"
    fi
}
check lesson 0 run configs/lesson.json
check practice 0 run configs/practice.json
check practice-csv 0 run configs/practice.json --format csv
check practice-jsonl 0 run configs/practice.json --format jsonl
check practice-set 0 run configs/practice.json --set experiments.0.bits='[2,8]' --set data.tokens=20
check rejected-config 2 run configs/practice.json --set experiments.0.bits=9
check rejected-set 2 run configs/practice.json --set data.nokey.x=1
check size 0 size --head-dim 128 --layers 32 --kv-heads 8 --tokens 60000
exit $fail
