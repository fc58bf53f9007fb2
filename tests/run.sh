#!/bin/sh
# tests/run.sh [-j N] [TEST...]: runs kvc's tests, N at a time, and prints "N passed, N failed" as its last line
# (", K skipped" added when a check was skipped); exits non-zero on any failure. Run from the project root
# (make test does: `make test TEST_JOBS=N`). TEST...: only these (names as in the manifest), e.g. test_cli.py.
#
# THE MANIFEST (MANIFEST below) names every test, one line each: a C test tests/NAME.c (run as $KVC_TESTBIN/NAME),
# a tests/test_*.sh (run with sh) or a tests/test_*.py (run with $PY). Adding a test is adding its one line.
# run.sh fails, naming the file, when:
#   - a tests/test_*.c, test_*.sh or test_*.py is not in the manifest ("add the line ... to MANIFEST"),
#   - a manifest line names a file that does not exist, or a C test that is not built,
#   - $KVC_TESTBIN holds a test binary whose tests/NAME.c is gone (a deleted test's stale build is never run),
#   - a test prints no PASS line, or exits non-zero without a FAIL line.
# EARLY lists tests started first (the slowest, so the workers finish together); a test not in it still runs.
#
# Protocol (tests/README.md): each test prints one line per check, "PASS <name>", "FAIL <name>: <why>" or
# "SKIP <name>: <why>" (only for a check this machine cannot run, e.g. no terminal device), and exits non-zero
# when a check failed. A test's lines are kept together and printed in manifest order, whatever order they end in.
#
# Environment: KVC (default ./kvc) is the binary the black-box tests run, KVC_TESTBIN (default build/tests) the
# directory of C unit-test binaries, PY (default /usr/bin/python3) the Python; make sanitize points KVC and
# KVC_TESTBIN at build-san/. KVC_TEST_JOBS: the default for -j (else the number of CPUs).

MANIFEST='
test_config_files.c
test_decode.c
test_edge.c
test_expid.c
test_fuzz_regress.c
test_limits.c
test_methods.c
test_metrics.c
test_model.c
test_quant.c
test_rng.c
test_store.c
test_stream.c
test_tensorio.c
test_timing.c
test_units.c
test_completion.sh
test_count_insns.sh
test_decode_bench.sh
test_layout.sh
test_plot.sh
test_plot_attn_kl.sh
test_results.sh
test_sweep.sh
test_slurm.sh
test_bad_input.py
test_cli.py
test_progress.py
test_faults.py
test_config_once.py
test_determinism.py
test_differential.py
test_differential_methods.py
test_differential_multi.py
test_differential_quant.py
test_edge.py
test_expid.py
test_files.py
test_stats.py
test_stream_run.py
test_jobs_run.py
test_generators.py
test_ggml.py
test_inputs.py
test_lesson.py
test_lowrank_qr.py
test_model_run.py
test_model_recall.py
test_model_torch.py
test_oracle_lesson.py
test_peers.py
test_plot_style.py
test_quant.py
test_rng_numpy.py
test_run_timing.py
test_store.py
test_tensorio_numpy.py
'
EARLY='test_results.sh test_differential_methods.py test_decode.c test_sweep.sh test_bad_input.py test_determinism.py
test_quant.py test_differential_quant.py test_cli.py test_differential_multi.py test_plot.sh test_stream_run.py test_jobs_run.py'

PY=${PY:-/usr/bin/python3}
KVC=${KVC:-./kvc}
KVC_TESTBIN=${KVC_TESTBIN:-build/tests}
export PY KVC KVC_TESTBIN

# ---- one test (run.sh --one NAME DIR, by the workers below): its lines in DIR/NAME.out, status and seconds after
if [ "${1:-}" = --one ]; then
    name=$2 dir=$3
    case "$name" in
        *.c) set -- "$KVC_TESTBIN/${name%.c}" ;;
        *.sh) set -- sh "tests/$name" ;;
        *.py) set -- "$PY" "tests/$name" ;;
    esac
    t0=$(date +%s.%N)
    "$@" >"$dir/$name.out" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    echo "$rc $t0 $t1" >"$dir/$name.tmp" && mv "$dir/$name.tmp" "$dir/$name.done"
    exit 0
fi

jobs=${KVC_TEST_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
while [ $# -gt 0 ]; do
    case "$1" in
        -j) jobs=${2:-}; shift; [ $# -gt 0 ] && shift ;;
        -j*) jobs=${1#-j}; shift ;;
        -*) echo "usage: tests/run.sh [-j N] [TEST...]" >&2; exit 2 ;;
        *) break ;;
    esac
done
case "$jobs" in ''|*[!0-9]*|0) echo "tests/run.sh: -j wants a positive number (got \"$jobs\")" >&2; exit 2 ;; esac

# the same BLAS kernels and numpy exp/log on every x86 CPU (see the script)
. scripts/numeric-env.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
pass=0 fail=0 skip=0
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
listed() { printf '%s\n' $MANIFEST | grep -qxF "$1"; }

# ---- the manifest against the files
for f in tests/test_*.c tests/test_*.sh tests/test_*.py; do
    [ -e "$f" ] || continue
    listed "${f#tests/}" || bad manifest "$f is not in the manifest: add the line '${f#tests/}' to MANIFEST in tests/run.sh"
done
for t in $MANIFEST; do
    [ -f "tests/$t" ] || bad manifest "tests/run.sh lists $t but tests/$t does not exist (remove its line from MANIFEST)"
done
for b in "$KVC_TESTBIN"/*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    [ -f "tests/${b##*/}.c" ] || bad stale-binary "$b has no tests/${b##*/}.c (a deleted test's build?); not run: remove it"
done

# ---- what to run: the TEST... asked for, or the manifest; EARLY ones first
if [ $# -gt 0 ]; then
    want=
    for t in "$@"; do
        if listed "$t"; then want="$want $t"; else bad "$t" "not a test in the manifest of tests/run.sh"; fi
    done
else
    want=$MANIFEST
fi
todo=
for t in $want; do
    [ -f "tests/$t" ] || continue          # said above
    case "$t" in
        *.c) if [ ! -x "$KVC_TESTBIN/${t%.c}" ]; then
                 bad "$t" "$KVC_TESTBIN/${t%.c} is not built (make testbin)"; continue
             fi ;;
        *.sh|*.py) ;;
        *) bad manifest "$t: a manifest line must name a .c, .sh or .py file"; continue ;;
    esac
    todo="$todo $t"
done
order=
for t in $EARLY; do case " $todo " in *" $t "*) order="$order $t" ;; esac; done
for t in $todo; do case " $order " in *" $t "*) ;; *) order="$order $t" ;; esac; done

# ---- run: `jobs` workers take the tests in `order`; results are printed in manifest order as they complete
printf '%s\n' $order | xargs -r -P "$jobs" -I{} sh "$0" --one {} "$dir" &
workers=$!
for t in $todo; do
    while [ ! -e "$dir/$t.done" ] && kill -0 "$workers" 2>/dev/null; do sleep 0.1; done
    if [ ! -e "$dir/$t.done" ]; then bad "$t" "did not run (tests/run.sh worker failed)"; continue; fi
    read -r rc t0 t1 <"$dir/$t.done"
    out=$dir/$t.out
    p=$(grep -c '^PASS ' "$out")
    f=$(grep -c '^FAIL ' "$out")
    s=$(grep -c '^SKIP ' "$out")
    grep '^FAIL \|^SKIP ' "$out"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $t: exited with status $rc"
        tail -n 20 "$out" | sed 's/^/    /'
        f=1
    elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $t: printed no PASS line (exit status $rc)"
        tail -n 20 "$out" | sed 's/^/    /'
        f=1
    fi
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    echo "$t: $p passed, $f failed$([ "$s" -gt 0 ] && echo ", $s skipped") ($secs s)"
    pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
done
wait "$workers"
echo "$pass passed, $fail failed$([ "$skip" -gt 0 ] && echo ", $skip skipped")"
[ "$fail" -eq 0 ]
