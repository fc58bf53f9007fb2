#!/bin/sh
# tests/fuzz/run.sh SECONDS TARGET...: runs each libFuzzer target built by `make fuzz` for SECONDS.
# New coverage-increasing inputs go to build-fuzz/corpus/<target>/ (scratch, not committed), starting from the
# committed seeds in tests/fuzz/<target>/corpus/ and the crashers kept in tests/fuzz/<target>/crashers/.
# A crash, leak, timeout or property violation is written to tests/fuzz/<target>/crashers/ (libFuzzer's
# -artifact_prefix) and stops that target; commit it: tests/test_fuzz_regress.c replays every crasher in
# make test. Exits non-zero if any target found something. Run from the project root.
# FUZZ_JOBS (default 1) runs that many fuzzing processes per target in parallel (libFuzzer -fork).
secs=${1:-60}; shift
jobs=${FUZZ_JOBS:-1}
status=0
for t in "$@"; do
    bin=build-fuzz/fuzz/fuzz_$t
    mkdir -p "build-fuzz/corpus/$t" "tests/fuzz/$t/crashers"
    dict=
    [ -f "tests/fuzz/$t/dict" ] && dict="-dict=tests/fuzz/$t/dict"
    fork=
    [ "$jobs" -gt 1 ] && fork="-fork=$jobs"
    echo "== fuzz $t for ${secs}s"
    # rss 4 GiB: a valid config may expand to 10^6 experiments; -timeout 10 s per input
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="tests/fuzz/$t/crashers/" $dict $fork \
        "build-fuzz/corpus/$t" "tests/fuzz/$t/corpus" "tests/fuzz/$t/crashers" \
        >"build-fuzz/fuzz-$t.log" 2>&1
    rc=$?
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)|^#[0-9]+ +DONE' \
        "build-fuzz/fuzz-$t.log"
    if [ "$rc" -ne 0 ]; then
        echo "FAIL fuzz-$t: libFuzzer exited with $rc; log: build-fuzz/fuzz-$t.log; crashers:"
        ls -1 "tests/fuzz/$t/crashers/"
        grep -E 'ERROR|SUMMARY|violated|runtime error' "build-fuzz/fuzz-$t.log" | head -n 10
        status=1
    else
        echo "PASS fuzz-$t"
    fi
done
exit $status
