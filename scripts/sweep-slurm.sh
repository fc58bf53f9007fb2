#!/bin/bash
# sweep-slurm.sh: run a kvc sweep on a Slurm cluster as a job array (one shard per array task), then merge
# the shards in a job that starts when every task has ended and merges only when every shard succeeded.
#
#   scripts/sweep-slurm.sh [options] CONFIG.json OUT.csv|OUT.jsonl [kvc run options] [-- kvc run options]
#
#   -n, --shards N        array tasks, one shard each (default 16)
#   --max-running M       at most M tasks at once (sbatch --array=1-N%M)
#   --kvc PATH            the kvc binary (default: $KVC, else ../kvc next to this script, else kvc on PATH);
#                         the compute nodes must see it, the config and OUT's directory at the same paths
#   --sbatch ARG          one more sbatch option for both jobs, e.g. --sbatch --partition=short
#                         --sbatch --time=01:00:00 (repeatable); SBATCH_* environment variables work too
#   --set PATH=JSON       config overrides, passed to every shard and to the merge (repeatable)
#   any other option      goes to every `kvc run` as it is: --no-timing, --per-head, --timing-repeat=5, ...
#                         (an option with a separate value word goes after --)
#   -- ARGS...            everything after it goes to every `kvc run` (--set still to the merge too)
#
# Run it on the login node: it checks the options (kvc run CONFIG ... --list), submits the two jobs with
# sbatch and prints their ids. Task i runs
#   kvc run CONFIG [options] --shard i/N --resume --out OUT.shards/shard-i-of-N.EXT
# (--out, --format, --shard, --resume and --list are the script's and refused) and records its exit status in
# OUT.shards/shard-i-of-N.status. The merge job waits for the whole array (--dependency=afterany, with
# --kill-on-invalid-dep=yes), so it never waits forever: when every shard succeeded it runs
#   kvc merge --config CONFIG --out OUT OUT.shards/shard-*-of-N.EXT
# and otherwise names each failed shard (kvc's exit status, or that the task ended without finishing:
# cancelled, killed, out of time) with the end of its log, and fails. Logs: OUT.shards/slurm-JOB_TASK.out
# (kvc's notes, e.g. a torn last line removed), the merge's OUT.shards/slurm-MERGEJOB.out. A failed, requeued
# or preempted task resumes its shard when it runs again: submit the same command again (finished shards
# return at once).
set -euo pipefail

die() { echo "sweep-slurm: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

# ---- inside the jobs (sbatch runs a copy of this file, so nothing here may depend on where it lies) ----
#   sweep-slurm.sh --task  DIR N EXT KVC CONFIG [kvc run args...]
#   sweep-slurm.sh --merge DIR N EXT KVC CONFIG OUT ARRAYJOB [--set PATH=JSON]...
if [ "${1:-}" = "--task" ]; then
    dir=$2 n=$3 ext=$4 kvc=$5 config=$6
    shift 6
    i=${SLURM_ARRAY_TASK_ID:?--task runs inside a Slurm array task}
    status=$dir/shard-$i-of-$n.status
    rm -f "$status"
    echo "sweep-slurm: shard $i/$n, job ${SLURM_ARRAY_JOB_ID:-?}_$i on $(hostname)" >&2
    rc=0
    "$kvc" run "$config" "$@" --shard "$i/$n" --resume --out "$dir/shard-$i-of-$n.$ext" || rc=$?
    echo "$rc" > "$status.tmp" && mv -f "$status.tmp" "$status"
    [ "$rc" -eq 0 ] || echo "sweep-slurm: shard $i/$n failed: kvc exited with status $rc" >&2
    exit "$rc"
fi
if [ "${1:-}" = "--merge" ]; then
    dir=$2 n=$3 ext=$4 kvc=$5 config=$6 out=$7 aid=$8
    shift 8
    files=() failed=0
    for i in $(seq 1 "$n"); do
        files+=("$dir/shard-$i-of-$n.$ext")
        st=$(cat "$dir/shard-$i-of-$n.status" 2>/dev/null || echo none)
        [ "$st" = 0 ] && continue
        failed=$((failed + 1))
        log=$dir/slurm-${aid}_$i.out
        if [ "$st" = none ]; then why="task ${aid}_$i ended without finishing (cancelled, killed, out of time, or never started)"
        else why="kvc exited with status $st in task ${aid}_$i"; fi
        echo "sweep-slurm: shard $i/$n failed: $why; its log $log ends:" >&2
        tail -n 3 "$log" 2>/dev/null | sed 's/^/    /' >&2
    done
    if [ "$failed" -gt 0 ]; then
        echo "sweep-slurm: $failed of $n shards failed; not merged. Submit the same command again: finished shards return at once, the others resume" >&2
        exit 1
    fi
    echo "sweep-slurm: all $n shards succeeded; merging them into $out" >&2
    exec "$kvc" merge --config "$config" "$@" --out "$out" "${files[@]}"
fi

# ---- on the login node: submit ----
here=$(cd "$(dirname "$0")" && pwd)
. "$here/sweep-lib.sh"   # sweep_run_opt, sweep_after_dashdash, sweep_args, sweep_find_kvc, sweep_check_run, abs
shards=16 max="" kvc="${KVC:-}"
sets=() pos=() sbatch_opts=() runopts=()
while [ $# -gt 0 ]; do
    case "$1" in
        -n|--shards) [ $# -ge 2 ] || die "missing value after $1"; shards=$2; shift 2 ;;
        --max-running) [ $# -ge 2 ] || die "missing value after $1"; max=$2; shift 2 ;;
        --kvc) [ $# -ge 2 ] || die "missing value after $1"; kvc=$2; shift 2 ;;
        --sbatch) [ $# -ge 2 ] || die "missing value after $1"; sbatch_opts+=("$2"); shift 2 ;;
        --sbatch=*) sbatch_opts+=("${1#--sbatch=}"); shift ;;
        --set) [ $# -ge 2 ] || die "missing value after $1"; sets+=(--set "$2"); shift 2 ;;
        --set=*) sets+=(--set "${1#--set=}"); shift ;;
        -h|--help) usage ;;
        --) shift; sweep_after_dashdash "$@"; break ;;
        -?*) sweep_run_opt "$1"; shift ;;
        *) pos+=("$1"); shift ;;
    esac
done
sweep_args "${pos[@]}"
case "$shards" in *[!0-9]*|''|0) die "--shards must be a positive integer (got $shards)" ;; esac
case "$max" in *[!0-9]*) die "--max-running must be a positive integer (got $max)" ;; esac
command -v sbatch >/dev/null 2>&1 || die "sbatch not found: run this on a Slurm login node"
sweep_find_kvc "$here"
mkdir -p "$(dirname "$out")"
kvc=$(abs "$kvc") config=$(abs "$config") out=$(abs "$out") self=$(abs "$0")
[ -x "$kvc" ] || die "kvc is not executable: $kvc"
sweep_check_run   # nothing is queued for a config or an option kvc refuses
dir=$out.shards
mkdir -p "$dir"
for i in $(seq 1 "$shards"); do rm -f "$dir/shard-$i-of-$shards.status"; done   # a former submission's

array=1-$shards${max:+%$max}
jid=$(sbatch --parsable --job-name=kvc-sweep --array="$array" --output="$dir/slurm-%A_%a.out" \
      "${sbatch_opts[@]}" "$self" --task "$dir" "$shards" "$ext" "$kvc" "$config" "${sets[@]}" "${runopts[@]}")
jid=${jid%%;*}
mid=$(sbatch --parsable --job-name=kvc-merge --dependency="afterany:$jid" --kill-on-invalid-dep=yes \
      --output="$dir/slurm-%j.out" "${sbatch_opts[@]}" \
      "$self" --merge "$dir" "$shards" "$ext" "$kvc" "$config" "$out" "$jid" "${sets[@]}")
mid=${mid%%;*}
echo "sweep-slurm: array job $jid ($shards shards of $config), merge job $mid -> $out" >&2
echo "sweep-slurm: watch with: squeue -j $jid,$mid; logs in $dir (the merge's: slurm-$mid.out)" >&2
echo "$jid $mid"
