#!/bin/bash
# sweep-slurm.sh: run a kvc sweep on a Slurm cluster as a job array (one shard per array task), then merge
# the shards in a job that starts when every task has succeeded (--dependency=afterok).
#
#   scripts/sweep-slurm.sh [options] CONFIG.json OUT.csv|OUT.jsonl [--set PATH=JSON]...
#
#   -n, --shards N        array tasks, one shard each (default 16)
#   --max-running M       at most M tasks at once (sbatch --array=1-N%M)
#   --kvc PATH            the kvc binary (default: $KVC, else ../kvc next to this script, else kvc on PATH);
#                         the compute nodes must see it, the config and OUT's directory at the same paths
#   --sbatch ARG          one more sbatch option for both jobs, e.g. --sbatch --partition=short
#                         --sbatch --time=01:00:00 (repeatable); SBATCH_* environment variables work too
#   --set PATH=JSON       config overrides, passed to every shard and to the merge (repeatable)
#   --per-head            one row per (layer, KV head): kvc run --per-head (the merge finds out by itself)
#
# Run it on the login node: it submits the two jobs with sbatch and prints their ids. Task i runs
#   kvc run CONFIG --shard i/N --resume -q --out OUT.shards/shard-i-of-N.EXT
# and the merge job runs
#   kvc merge --config CONFIG --out OUT OUT.shards/shard-*-of-N.EXT
# Logs: OUT.shards/slurm-JOB_TASK.out. A requeued, preempted or failed task resumes where it stopped when
# it runs again: resubmit the same command (finished shards return at once) or `scontrol requeue` the task.
set -euo pipefail

die() { echo "sweep-slurm: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

# ---- inside the jobs: "sweep-slurm.sh --task|--merge KVC CONFIG OUT N EXT PER_HEAD [--set ...]" ----
if [ "${1:-}" = "--task" ] || [ "${1:-}" = "--merge" ]; then
    mode=$1 kvc=$2 config=$3 out=$4 n=$5 ext=$6 per_head=$7
    shift 7
    dir=$out.shards
    if [ "$mode" = "--task" ]; then
        i=${SLURM_ARRAY_TASK_ID:?--task runs inside a Slurm array task}
        [ "$per_head" = 1 ] && set -- "$@" --per-head
        exec "$kvc" run "$config" "$@" --shard "$i/$n" --resume -q --out "$dir/shard-$i-of-$n.$ext"
    fi
    files=()
    for i in $(seq 1 "$n"); do files+=("$dir/shard-$i-of-$n.$ext"); done
    exec "$kvc" merge --config "$config" "$@" --out "$out" "${files[@]}"
fi

# ---- on the login node: submit ----
here=$(cd "$(dirname "$0")" && pwd)
. "$here/sweep-lib.sh"   # sweep_args, sweep_find_kvc, abs
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
        --per-head) runopts+=(--per-head); shift ;;
        -h|--help) usage ;;
        -*) die "unknown option $1 (see --help)" ;;
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
# the config must be valid before anything is queued
"$kvc" run "$config" "${sets[@]}" --list >/dev/null || exit 2
dir=$out.shards
mkdir -p "$dir"
per_head=0
[ ${#runopts[@]} -gt 0 ] && per_head=1

array=1-$shards${max:+%$max}
jid=$(sbatch --parsable --job-name=kvc-sweep --array="$array" --output="$dir/slurm-%A_%a.out" \
      "${sbatch_opts[@]}" "$self" --task "$kvc" "$config" "$out" "$shards" "$ext" "$per_head" "${sets[@]}")
jid=${jid%%;*}
mid=$(sbatch --parsable --job-name=kvc-merge --dependency="afterok:$jid" --output="$dir/slurm-%j.out" \
      "${sbatch_opts[@]}" "$self" --merge "$kvc" "$config" "$out" "$shards" "$ext" "$per_head" "${sets[@]}")
mid=${mid%%;*}
echo "sweep-slurm: array job $jid ($shards shards of $config), merge job $mid -> $out" >&2
echo "sweep-slurm: watch with: squeue -j $jid,$mid; logs in $dir" >&2
echo "$jid $mid"
