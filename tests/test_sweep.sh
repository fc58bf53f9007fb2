#!/bin/sh
# test_sweep.sh: kvc run --out/--resume/--shard/--list, kvc merge, scripts/sweep-parallel.sh (GNU parallel),
# scripts/sweep-slurm.sh (syntax, and a whole run against a stand-in sbatch) and the progress line.
# Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. Run from the project root. The progress
# checks need a terminal device (script(1) opens a pseudo-terminal): where none can be opened they print
# "SKIP name: why" instead (tests/run.sh counts them).
KVC=${KVC:-./kvc}
KVC=$(cd "$(dirname "$KVC")" && pwd)/$(basename "$KVC")
G=tests/data/sweep/grid.json      # 23 rows, labels with commas, quotes and a newline
SLOW=tests/data/sweep/slow.json   # 32 rows of about 60 ms each
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
# Rows are compared byte for byte across runs, so every `kvc run` here (and in the sweep scripts) leaves out the
# one thing that differs between runs, the decode timing; the timed-resume checks at the end use the real kvc.
REAL_KVC=$KVC
printf '#!/bin/sh\nif [ "$1" = run ]; then shift; exec "%s" run --no-timing "$@"; fi\nexec "%s" "$@"\n' \
    "$REAL_KVC" "$REAL_KVC" > "$tmp/kvc"
chmod +x "$tmp/kvc"
KVC=$tmp/kvc
pass() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; fail=1; }
check() { # check NAME COND-COMMAND... : PASS when the command succeeds
    name=$1; shift
    if "$@"; then pass "$name"; else bad "$name" "\`$*\` failed"; fi
}
# expect NAME STATUS STDERR-SUBSTRING CMD...: exit status and a piece of stderr
expect() {
    name=$1 want=$2 msg=$3; shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
    if [ "$got" -ne "$want" ]; then bad "$name" "exit $got, wanted $want: $(head -c 300 "$tmp/err")"
    elif ! grep -qF -- "$msg" "$tmp/err"; then bad "$name" "stderr lacks \"$msg\": $(head -c 300 "$tmp/err")"
    else pass "$name"; fi
}
rows() { tail -n +2 "$1" | wc -l | tr -d ' '; }   # data lines of a CSV without multi-line labels

# ---- reference outputs ----
"$KVC" run $G --format csv > "$tmp/g.csv" && "$KVC" run $G --format jsonl > "$tmp/g.jsonl" || bad sweep-reference "kvc run failed"
"$KVC" run $G --out "$tmp/o.csv" && cmp -s "$tmp/o.csv" "$tmp/g.csv"; check out-csv-equals-stdout [ $? -eq 0 ]
"$KVC" run $G --out "$tmp/o.jsonl" && cmp -s "$tmp/o.jsonl" "$tmp/g.jsonl"; check out-jsonl-by-extension [ $? -eq 0 ]
"$KVC" run $G --out "$tmp/o.data" --format jsonl && cmp -s "$tmp/o.data" "$tmp/g.jsonl"; check out-format-flag [ $? -eq 0 ]
"$KVC" run $G > "$tmp/t1.txt"; "$KVC" run $G --out "$tmp/t2.txt" && cmp -s "$tmp/t1.txt" "$tmp/t2.txt" &&
    [ -z "$(ls "$tmp" | grep '\.tmp\.')" ]; check out-table-renamed-whole [ $? -eq 0 ]
"$KVC" run $G --out "$tmp/o.csv" --resume > "$tmp/out" 2>"$tmp/err" && cmp -s "$tmp/o.csv" "$tmp/g.csv" && [ ! -s "$tmp/out" ] &&
    [ "$(cat "$tmp/err")" = "kvc: $tmp/o.csv: 23 rows already there; running the other 0" ]
check resume-complete-file-is-a-no-op [ $? -eq 0 ]

# ---- kill -9 in the middle, then --resume: the same rows as an uninterrupted run ----
"$KVC" run $SLOW --out "$tmp/full.csv" -q
total=$(rows "$tmp/full.csv")
"$KVC" run $SLOW --out "$tmp/k.csv" -q & pid=$!
i=0
while [ "$(rows "$tmp/k.csv" 2>/dev/null || echo 0)" -lt 4 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; st=$?
killed=$(rows "$tmp/k.csv")
if [ "$st" -ne 137 ] || [ "$killed" -ge "$total" ]; then
    bad sweep-kill-resume "the run was not killed in the middle (status $st, $killed of $total rows)"
else
    tail -c 1 "$tmp/k.csv" | od -c | grep -q '\\n'; check kill-leaves-whole-lines [ $? -eq 0 ]
    "$KVC" run $SLOW --out "$tmp/k.csv" --resume 2>"$tmp/err"
    if cmp -s "$tmp/k.csv" "$tmp/full.csv"; then
        echo "PASS sweep-kill-resume (SIGKILL after $killed of $total rows; resumed file equals the uninterrupted run)"
    else bad sweep-kill-resume "resumed file differs from the uninterrupted run: $(diff "$tmp/k.csv" "$tmp/full.csv" | head -5)"; fi
    grep -q "$killed rows already there; running the other $((total - killed))" "$tmp/err"
    check resume-note [ $? -eq 0 ]
fi

# ---- torn last lines (a write cut short): removed on --resume ----
for fmt in csv jsonl; do
    size=$(wc -c < "$tmp/g.$fmt")
    for cut in 300 1000 $((size - 3)); do
        head -c $cut "$tmp/g.$fmt" > "$tmp/torn.$fmt"
        "$KVC" run $G --out "$tmp/torn.$fmt" --resume 2>"$tmp/err"
        if cmp -s "$tmp/torn.$fmt" "$tmp/g.$fmt" && grep -q "removed a torn last line" "$tmp/err"; then pass "resume-torn-$fmt-$cut"
        else bad "resume-torn-$fmt-$cut" "$(cat "$tmp/err")"; fi
    done
done
# cut inside the quoted label that holds a newline (CSV line 15 is "keep 0 +\n16")
off=$(grep -b -m1 '^"keep 0 +$' "$tmp/g.csv" | cut -d: -f1)
head -c $((off + 10)) "$tmp/g.csv" > "$tmp/torn2.csv"
"$KVC" run $G --out "$tmp/torn2.csv" --resume -q && cmp -s "$tmp/torn2.csv" "$tmp/g.csv"
check resume-torn-inside-quoted-newline [ $? -eq 0 ]
head -c 20 "$tmp/g.csv" > "$tmp/torn3.csv"   # even the header was cut
"$KVC" run $G --out "$tmp/torn3.csv" --resume -q && cmp -s "$tmp/torn3.csv" "$tmp/g.csv"
check resume-torn-header [ $? -eq 0 ]
: > "$tmp/empty.csv"; "$KVC" run $G --out "$tmp/empty.csv" --resume -q && cmp -s "$tmp/empty.csv" "$tmp/g.csv"
check resume-empty-file [ $? -eq 0 ]
"$KVC" run $G --out "$tmp/new.csv" --resume -q && cmp -s "$tmp/new.csv" "$tmp/g.csv"
check resume-missing-file [ $? -eq 0 ]

# ---- --resume refuses another config; a grown config only appends ----
head -n 5 "$tmp/g.csv" > "$tmp/part.csv"; cp "$tmp/part.csv" "$tmp/part0.csv"
expect resume-refuses-changed-seed 2 "changed since the file was written" "$KVC" run $G --set seed=12 --out "$tmp/part.csv" --resume
expect resume-refuses-changed-data 2 "is not an experiment of" "$KVC" run $G --set data.query.noise=0.4 --out "$tmp/part.csv" --resume
expect resume-refuses-changed-label 2 "labels changed" "$KVC" run $G --set 'experiments.0.label="q{bits}"' --out "$tmp/part.csv" --resume
cmp -s "$tmp/part.csv" "$tmp/part0.csv"; check resume-refusal-leaves-file [ $? -eq 0 ]
"$KVC" run $G --set 'experiments.0.bits=[2, 3, 4, 8, 6]' --out "$tmp/part.csv" --resume -q &&
    "$KVC" merge -q --config $G --set 'experiments.0.bits=[2, 3, 4, 8, 6]' "$tmp/part.csv" > "$tmp/grown.csv" &&
    "$KVC" run $G --set 'experiments.0.bits=[2, 3, 4, 8, 6]' --format csv | cmp -s - "$tmp/grown.csv"
check resume-grown-config-then-merge-sorts [ $? -eq 0 ]
printf 'label,method\n' > "$tmp/foreign.csv"
expect resume-refuses-foreign-header 2 "header differs" "$KVC" run $G --out "$tmp/foreign.csv" --resume
{ head -n 3 "$tmp/g.csv"; sed -n 3p "$tmp/g.csv"; } > "$tmp/dup.csv"
expect resume-refuses-duplicate 2 "twice" "$KVC" run $G --out "$tmp/dup.csv" --resume
{ head -n 3 "$tmp/g.csv"; echo 'x,quantize,1,,,,,,,,1,2'; } > "$tmp/garbage.csv"
expect resume-refuses-garbage 2 "garbage.csv:4: not a row kvc wrote" "$KVC" run $G --out "$tmp/garbage.csv" --resume

# ---- option errors ----
expect resume-needs-out 2 "--resume needs --out" "$KVC" run $G --resume
expect resume-not-table 2 "--resume needs a CSV or JSONL" "$KVC" run $G --out "$tmp/x.txt" --resume
expect out-unknown-extension 2 "cannot tell the format" "$KVC" run $G --out "$tmp/x.dat"
expect out-format-contradiction 2 "contradicts" "$KVC" run $G --out "$tmp/x.csv" --format jsonl
for s in 0/3 4/3 1/0 a/3 1/ 1/3x -1/3; do
    expect "shard-bad-$s" 2 "--shard: must be I/N" "$KVC" run $G --shard "$s"
done
expect list-without-out 2 "--list writes no file" "$KVC" run $G --list --out "$tmp/l.csv"
expect out-write-error 1 "write error" "$KVC" run $G --out /dev/full --format csv
PY=${PY:-/usr/bin/python3}
# a second writer of the same file is refused
"$PY" -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(5)' "$tmp/l.csv" > "$tmp/lock" &
lp=$!; i=0; while [ ! -s "$tmp/lock" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i + 1)); done
expect out-locked-by-another 2 "another kvc is writing this file" "$KVC" run $G --out "$tmp/l.csv"
kill $lp 2>/dev/null; wait $lp 2>/dev/null

# ---- shards: disjoint, complete, merged equal the unsharded run ----
for i in 1 2 3 4; do "$KVC" run $G --shard $i/4 --out "$tmp/s$i.csv"; "$KVC" run $G --shard $i/4 --out "$tmp/s$i.jsonl"; done
n=0; for i in 1 2 3 4; do n=$((n + $(grep -c ',[0-9a-f]\{16\}$' "$tmp/s$i.csv"))); done
check shards-cover-the-grid [ "$n" -eq 23 ]
"$KVC" merge --config $G "$tmp/s3.csv" "$tmp/s1.csv" "$tmp/s4.csv" "$tmp/s2.csv" > "$tmp/m.csv" && cmp -s "$tmp/m.csv" "$tmp/g.csv"
check merge-shards-equal-unsharded-csv [ $? -eq 0 ]
"$KVC" merge --config $G --out "$tmp/m.jsonl" "$tmp"/s?.jsonl && cmp -s "$tmp/m.jsonl" "$tmp/g.jsonl"
check merge-shards-equal-unsharded-jsonl [ $? -eq 0 ]
"$KVC" run $G --shard 2/4 --list | cut -f2 > "$tmp/l2"; grep -o '[0-9a-f]\{16\}$' "$tmp/s2.csv" | cmp -s - "$tmp/l2"
check list-shows-the-shard [ $? -eq 0 ]
expect merge-missing 2 "are missing, the first at grid position" "$KVC" merge --config $G "$tmp/s1.csv" "$tmp/s2.csv" "$tmp/s4.csv"
expect merge-duplicate 2 "hold the same row" "$KVC" merge --config $G "$tmp"/s?.csv "$tmp/s2.csv"
expect merge-other-config 2 "is not an experiment of" "$KVC" merge --config $G --set seed=3 "$tmp"/s?.csv
expect merge-mixed-formats 2 "one format" "$KVC" merge "$tmp/s1.csv" "$tmp/s2.jsonl"
head -c 200 "$tmp/s1.csv" > "$tmp/st.csv"
expect merge-torn 2 "torn line" "$KVC" merge "$tmp/st.csv" "$tmp/s2.csv"
expect merge-set-needs-config 2 "--set needs --config" "$KVC" merge --set seed=3 "$tmp/s1.csv"
"$KVC" merge "$tmp/s1.csv" "$tmp/s2.csv" > "$tmp/m12.csv" 2>"$tmp/err"
{ cat "$tmp/s1.csv"; tail -n +2 "$tmp/s2.csv"; } | cmp -s - "$tmp/m12.csv" && grep -q "no --config" "$tmp/err"
check merge-without-config-concatenates [ $? -eq 0 ]
cp "$tmp/s1.csv" "$tmp/inplace.csv"
"$KVC" merge -q --out "$tmp/inplace.csv" "$tmp/inplace.csv" "$tmp/s2.csv" && cmp -s "$tmp/inplace.csv" "$tmp/m12.csv"
check merge-out-may-be-an-input [ $? -eq 0 ]

# ---- --per-head: (layer, head) rows, resumed and merged per row ----
PH="--set data.layers=2 --set data.kv_heads=2 --per-head"
"$KVC" run $G $PH --format csv > "$tmp/ph.csv"
check per-head-reference [ "$(grep -c ',[0-9a-f]\{16\}$' "$tmp/ph.csv")" -eq 92 ]
{ head -n 1 "$tmp/ph.csv"; grep ',[0-9a-f]\{16\}$' "$tmp/ph.csv" | head -n 6; } > "$tmp/ph-part.csv"   # 1.5 experiments
"$KVC" run $G $PH --out "$tmp/ph-part.csv" --resume 2>"$tmp/err" && cmp -s "$tmp/ph-part.csv" "$tmp/ph.csv" &&
    grep -q "1 experiments already there; running the other 22" "$tmp/err"
check per-head-resume-half-experiment [ $? -eq 0 ]
for i in 1 2 3; do "$KVC" run $G $PH --shard $i/3 --out "$tmp/ph$i.jsonl"; done
"$KVC" run $G $PH --format jsonl > "$tmp/ph.jsonl"
"$KVC" merge --config $G --set data.layers=2 --set data.kv_heads=2 "$tmp"/ph?.jsonl | cmp -s - "$tmp/ph.jsonl"
check per-head-merge-equals-unsharded [ $? -eq 0 ]
expect per-head-resume-refuses-aggregate-file 2 "header differs" "$KVC" run $G $PH --out "$tmp/o.csv" --resume
expect per-head-merge-refuses-mixed 2 "not a row kvc wrote" "$KVC" merge "$tmp/ph1.jsonl" "$tmp/s1.jsonl"

# ---- scripts/sweep-parallel.sh with GNU parallel: the real kvc, its run options passed through ----
# a kvc that fails on shard 2 of 3 (and runs the others)
printf '#!/bin/sh\ncase " $* " in *" --shard 2/3 "*) echo "kvc-fails: shard 2 on purpose" >&2; exit 3 ;; esac\nexec "%s" "$@"\n' \
    "$KVC" > "$tmp/kvc-fails"; chmod +x "$tmp/kvc-fails"
if command -v parallel >/dev/null 2>&1; then
    AX='experiments.0.axis="channel"' QL="experiments.1.label=\"it's {sinks}, \\\"w\\\" {window}\""
    "$KVC" run $G --set "$AX" --set "$QL" --format csv > "$tmp/ax.csv"
    scripts/sweep-parallel.sh --kvc "$REAL_KVC" -q -j 2 -n 3 $G "$tmp/par/r.csv" --no-timing --set "$AX" --set "$QL" 2>"$tmp/err" &&
        cmp -s "$tmp/par/r.csv" "$tmp/ax.csv"
    check sweep-parallel-equals-unsharded [ $? -eq 0 ]
    rm "$tmp/par/r.csv.shards/shard-2-of-3.csv"   # a lost shard is rerun, a torn one cut back, the others resume
    head -c 100 "$tmp/par/r.csv.shards/shard-1-of-3.csv" > "$tmp/t" && cat "$tmp/t" > "$tmp/par/r.csv.shards/shard-1-of-3.csv"
    scripts/sweep-parallel.sh --kvc "$REAL_KVC" -q -j 2 -n 3 -S : $G "$tmp/par/r.csv" --set "$AX" -- --set "$QL" --no-timing 2>>"$tmp/err" &&
        cmp -s "$tmp/par/r.csv" "$tmp/ax.csv"
    check sweep-parallel-rerun-resumes [ $? -eq 0 ]
    grep -q 'removed a torn last line' "$tmp/par/r.csv.shards/shard-1-of-3.log" &&
        grep -q 'rows already there; running the other 0' "$tmp/par/r.csv.shards/shard-3-of-3.log"
    check sweep-parallel-shard-logs-keep-kvc-notes [ $? -eq 0 ]
    # an option with its value after --; timed rows differ from the reference only in decode_ns, decode_speedup
    scripts/sweep-parallel.sh --kvc "$REAL_KVC" -q -j 2 -n 2 $G "$tmp/par/r.jsonl" -- --timing-repeat 1 2>>"$tmp/err" &&
        ${PY:-/usr/bin/python3} -c 'import json, sys
rows = [[json.loads(l) for l in open(f)] for f in sys.argv[1:]]
strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("decode_")} for r in rs]
sys.exit(0 if len(rows[0]) == 23 and strip(rows[0]) == strip(rows[1]) and all(r["decode_ns"] for r in rows[0]) else 1)' \
            "$tmp/par/r.jsonl" "$tmp/g.jsonl"
    check sweep-parallel-jsonl-timed-option-with-a-value [ $? -eq 0 ]
    scripts/sweep-parallel.sh --kvc "$REAL_KVC" -q -j 2 -n 5 $G "$tmp/par/ph.csv" $PH 2>>"$tmp/err" && cmp -s "$tmp/par/ph.csv" "$tmp/ph.csv"
    check sweep-parallel-per-head [ $? -eq 0 ]
    # a failing shard: exit 1, named with its exit status and the end of its log, nothing merged
    expect sweep-parallel-names-the-failed-shard 1 "shard 2/3 failed (exit status 3)" \
        scripts/sweep-parallel.sh --kvc "$tmp/kvc-fails" -q -j 3 -n 3 $G "$tmp/par/f.csv"
    grep -q 'kvc-fails: shard 2 on purpose' "$tmp/err" && grep -q 'run the same command again' "$tmp/err" &&
        [ ! -e "$tmp/par/f.csv" ] && [ -s "$tmp/par/f.csv.shards/shard-1-of-3.csv" ]
    check sweep-parallel-failed-shard-log-shown [ $? -eq 0 ]
    # options: the script's own refused, a bad one refused by kvc before anything runs
    expect sweep-parallel-refuses-shard 2 "--shard: the script sets it" scripts/sweep-parallel.sh -q $G "$tmp/par/x.csv" --shard 1/2
    expect sweep-parallel-refuses-format 2 "--format=csv: the script sets it" scripts/sweep-parallel.sh -q $G "$tmp/par/x.csv" -- --format=csv
    expect sweep-parallel-checks-options-first 2 'unknown option; see kvc run --help (got "--bogus")' \
        scripts/sweep-parallel.sh --kvc "$REAL_KVC" -q $G "$tmp/par/x.csv" --bogus
    expect sweep-parallel-value-needs-equals 2 "written --opt=VALUE or after --" \
        scripts/sweep-parallel.sh -q $G "$tmp/par/x.csv" --timing-repeat 3
    check sweep-parallel-refusals-make-nothing [ ! -e "$tmp/par/x.csv.shards" ]
else
    bad sweep-parallel "GNU parallel is not installed (scripts/bootstrap.sh --deps installs it)"
fi

# ---- scripts/sweep-slurm.sh: syntax, and a whole run against a stand-in sbatch (tests/test_slurm.sh runs a
#      real Slurm where it can) ----
bash -n scripts/sweep-slurm.sh && bash -n scripts/sweep-parallel.sh; check sweep-scripts-syntax [ $? -eq 0 ]
mkdir -p "$tmp/bin" "$tmp/slurm"
cat > "$tmp/bin/sbatch" <<'EOF2'
#!/bin/bash
# stands in for Slurm's sbatch: runs the job at once (array tasks one after another), prints a job id
n=$(( $(cat "$FAKE_SLURM/count" 2>/dev/null || echo 100) + 1 )); echo $n > "$FAKE_SLURM/count"
array=""
while [ $# -gt 0 ]; do
    case "$1" in
        --array=*) array=${1#--array=}; echo "$1" >> "$FAKE_SLURM/opts"; shift ;;
        --parsable|--job-name=*|--output=*|--dependency=*|--kill-on-invalid-dep=*|--partition=*)
            echo "$1" >> "$FAKE_SLURM/opts"; shift ;;
        -*) echo "sbatch: unexpected option $1" >&2; exit 1 ;;
        *) break ;;
    esac
done
script=$1; shift
if [ -n "$array" ]; then
    range=${array%%\%*}
    for i in $(seq "${range%-*}" "${range#*-}"); do
        SLURM_ARRAY_JOB_ID=$n SLURM_ARRAY_TASK_ID=$i bash "$script" "$@" 2>> "$FAKE_SLURM/log"
    done
else bash "$script" "$@" 2>> "$FAKE_SLURM/log" || echo "job $n failed" >> "$FAKE_SLURM/log"; fi
echo "$n"
EOF2
chmod +x "$tmp/bin/sbatch"
FAKE_SLURM="$tmp/slurm" PATH="$tmp/bin:$PATH" scripts/sweep-slurm.sh --kvc "$REAL_KVC" -n 4 --max-running 2 \
    --sbatch --partition=debug $G "$tmp/sl/r.csv" --set seed=4 -- --no-timing > "$tmp/jobs" 2>"$tmp/err"
"$KVC" run $G --set seed=4 --format csv | cmp -s - "$tmp/sl/r.csv" && [ "$(cat "$tmp/jobs")" = "101 102" ] &&
    grep -qx -- '--array=1-4%2' "$tmp/slurm/opts" && grep -qx -- '--dependency=afterany:101' "$tmp/slurm/opts" &&
    grep -qx -- '--kill-on-invalid-dep=yes' "$tmp/slurm/opts" && grep -qx -- '--partition=debug' "$tmp/slurm/opts"
check sweep-slurm-stand-in-run [ $? -eq 0 ]
FAKE_SLURM="$tmp/slurm" PATH="$tmp/bin:$PATH" scripts/sweep-slurm.sh --kvc "$tmp/kvc-fails" -n 3 $G "$tmp/sl/f.csv" \
    > /dev/null 2>"$tmp/err"
grep -q 'shard 2/3 failed: kvc exited with status 3 in task 103_2' "$tmp/slurm/log" && grep -q 'job 104 failed' "$tmp/slurm/log" &&
    [ ! -e "$tmp/sl/f.csv" ]
check sweep-slurm-stand-in-failed-shard [ $? -eq 0 ]
FAKE_SLURM="$tmp/slurm" PATH="$tmp/bin:$PATH" KVC="$KVC" scripts/sweep-slurm.sh $G "$tmp/sl/x.csv" --set seed=-1 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && [ ! -e "$tmp/sl/x.csv.shards" ]; check sweep-slurm-rejects-bad-config-before-queueing [ $? -eq 0 ]

# ---- the progress line: on a terminal's stderr only, never on stdout or in the file ----
if ! command -v script >/dev/null 2>&1; then
    bad progress "script (bsdutils) is not installed"
elif ! script -qec true /dev/null </dev/null >"$tmp/pty" 2>&1; then   # no terminal device to open
    for name in progress-on-terminal progress-not-on-stdout progress-not-in-out-file progress-quiet \
        progress-not-for-a-short-run; do
        echo "SKIP $name: no terminal device (script -qec true: $(head -n 1 "$tmp/pty" | cut -c1-160))"
    done
else
    KVC_PROGRESS_DELAY=0 script -qec "$KVC run $G --format csv > $tmp/p.csv" /dev/null < /dev/null > "$tmp/tty" 2>&1
    grep -q 'rows/s' "$tmp/tty" && grep -q "23/23 rows (100%)" "$tmp/tty"; check progress-on-terminal [ $? -eq 0 ]
    cmp -s "$tmp/p.csv" "$tmp/g.csv"; check progress-not-on-stdout [ $? -eq 0 ]
    KVC_PROGRESS_DELAY=0 script -qec "$KVC run $G --out $tmp/p2.jsonl" /dev/null < /dev/null > "$tmp/tty2" 2>&1
    grep -q 'rows/s' "$tmp/tty2" && cmp -s "$tmp/p2.jsonl" "$tmp/g.jsonl"; check progress-not-in-out-file [ $? -eq 0 ]
    KVC_PROGRESS_DELAY=0 script -qec "$KVC run $G --out $tmp/p3.csv -q" /dev/null < /dev/null > "$tmp/tty3" 2>&1
    ! grep -q 'rows/s' "$tmp/tty3"; check progress-quiet [ $? -eq 0 ]
    script -qec "$KVC run $G --out $tmp/p4.csv" /dev/null < /dev/null > "$tmp/tty4" 2>&1
    ! grep -q 'rows/s' "$tmp/tty4"; check progress-not-for-a-short-run [ $? -eq 0 ]
fi
KVC_PROGRESS_DELAY=0 "$KVC" run $G --out "$tmp/p5.csv" 2>"$tmp/err5"
! grep -q 'rows/s' "$tmp/err5"; check progress-not-when-stderr-is-a-file [ $? -eq 0 ]

# ---- decode timing (the real kvc): every row timed; --resume keeps the timed rows as they were ----
"$REAL_KVC" run $G --out "$tmp/timed.csv" -q && cp "$tmp/timed.csv" "$tmp/timed0.csv" &&
    "$REAL_KVC" run $G --out "$tmp/timed.csv" --resume -q && cmp -s "$tmp/timed.csv" "$tmp/timed0.csv"
check resume-keeps-timed-rows [ $? -eq 0 ]
${PY:-/usr/bin/python3} -c 'import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
ok = len(rows) == 23 and all(int(r["decode_ns"]) > 0 and float(r["decode_speedup"]) > 0 for r in rows)
sys.exit(0 if ok else 1)' "$tmp/timed.csv"
check timed-rows-have-decode-columns [ $? -eq 0 ]
exit $fail
