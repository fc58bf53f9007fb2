#!/bin/sh
# tests/valgrind.sh [KVC]: valgrind memcheck of kvc (default ./kvc) on the lesson and practice runs, in every
# output format, on the multi-head path (--per-head, --out), kvc merge, kvc synth and data.source "files", and on
# rejected configs, data and files (the error paths must free what they allocated too).
# Each run must report no memory errors and no leaks (definite, indirect or possible). Part of make sanitize
# (about a minute); not part of make test, because valgrind is not among the packages bootstrap.sh installs.
# Protocol: "PASS <name>" / "FAIL <name>: <why>" per run; exits non-zero on any failure.
# Skips (one note on stderr, exit 0) when valgrind is not installed.
KVC=${1:-./kvc}
if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind.sh: valgrind is not installed; skipped (apt-get install valgrind)" >&2
    exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
"$KVC" run configs/practice.json --format csv >"$tmp/practice.csv" 2>/dev/null
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
# the real-shaped data path (multi-head, RoPE, attention shaping, observation queries), per head, to a file
small="--set data.tokens=128 --set data.recent.tokens=32 --set experiments.2.window=64 --set experiments.3.window=60
       --set experiments.4.budget=64 --set data.layers=1 --set data.kv_heads=2 --set data.q_heads=4"
# shellcheck disable=SC2086
check realistic-small-per-head 0 run configs/realistic.json $small --per-head --format jsonl
# shellcheck disable=SC2086
check realistic-small-out 0 run configs/realistic.json $small --out "$tmp/rows.csv" -q
check merge 0 merge --config configs/practice.json "$tmp/practice.csv"
check rejected-data 2 run configs/practice.json --set data.keys.outliers.0.scale=1e308
# data.source "files": kvc synth writes .safetensors, kvc run reads them back
check synth 0 synth configs/practice.json -o "$tmp/syn" --format safetensors
check run-files 0 run "$tmp/syn/files.json" --format csv
check rejected-file 2 run configs/practice.json --set 'data={"source": "files", "files": {"keys": "no-such.npy"}}'
exit $fail
