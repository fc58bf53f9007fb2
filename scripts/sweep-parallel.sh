#!/bin/bash
# sweep-parallel.sh: run a kvc sweep as N shards with GNU parallel (Debian package `parallel`), on this
# machine or across hosts, then merge the shards into one results file checked against the grid.
#
#   scripts/sweep-parallel.sh [options] CONFIG.json OUT.csv|OUT.jsonl [--set PATH=JSON]...
#
#   -j, --jobs JOBS       shards running at once (GNU parallel's -j: 4, 100%, ...; default: one per CPU)
#   -n, --shards N        slices of the grid (default: JOBS when it is a number, else the number of CPUs)
#   -S, --sshlogin LOGINS run shards on these hosts too (GNU parallel's --sshlogin, e.g. ":,node1,4/node2");
#                         every host must see the same paths (a shared filesystem) and have kvc there
#   --kvc PATH            the kvc binary (default: $KVC, else ../kvc next to this script, else kvc on PATH)
#   --clean               remove the shard files after a successful merge (default: keep them)
#   -q, --quiet           no progress bar and no notes
#   --set PATH=JSON       config overrides, passed to every shard and to the merge (repeatable)
#   --per-head            one row per (layer, KV head): kvc run --per-head (the merge finds out by itself)
#
# Shard i of N is `kvc run CONFIG --shard i/N --resume --out OUT.shards/shard-i-of-N.EXT -q`; the merge is
# `kvc merge --config CONFIG --out OUT OUT.shards/shard-*-of-N.EXT`. Rerunning the same command after an
# interruption or a failed shard resumes every shard where it stopped. GNU parallel's job log is
# OUT.shards/joblog. Exit status: 0 when every shard ran and the merge succeeded, else non-zero.
set -euo pipefail

die() { echo "sweep-parallel: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
. "$here/sweep-lib.sh"   # sweep_args, sweep_find_kvc, abs
jobs="" shards="" sshlogin="" kvc="${KVC:-}" clean=0 quiet=0
sets=() pos=() runopts=()
while [ $# -gt 0 ]; do
    case "$1" in
        -j|--jobs) [ $# -ge 2 ] || die "missing value after $1"; jobs=$2; shift 2 ;;
        -n|--shards) [ $# -ge 2 ] || die "missing value after $1"; shards=$2; shift 2 ;;
        -S|--sshlogin) [ $# -ge 2 ] || die "missing value after $1"; sshlogin=$2; shift 2 ;;
        --kvc) [ $# -ge 2 ] || die "missing value after $1"; kvc=$2; shift 2 ;;
        --set) [ $# -ge 2 ] || die "missing value after $1"; sets+=(--set "$2"); shift 2 ;;
        --set=*) sets+=(--set "${1#--set=}"); shift ;;
        --per-head) runopts+=(--per-head); shift ;;
        --clean) clean=1; shift ;;
        -q|--quiet) quiet=1; shift ;;
        -h|--help) usage ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) pos+=("$1"); shift ;;
    esac
done
sweep_args "${pos[@]}"
command -v parallel >/dev/null 2>&1 || die "GNU parallel is not installed (Debian: apt-get install parallel)"

sweep_find_kvc "$here"
kvc=$(abs "$kvc") config=$(abs "$config")
[ -x "$kvc" ] || die "kvc is not executable: $kvc"
ncpu=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
[ -n "$jobs" ] || jobs=$ncpu
if [ -z "$shards" ]; then
    case "$jobs" in *[!0-9]*|'') shards=$ncpu ;; *) shards=$jobs ;; esac
fi
case "$shards" in *[!0-9]*|''|0) die "--shards must be a positive integer (got $shards)" ;; esac

mkdir -p "$(dirname "$out")"
dir=$(abs "$out").shards
mkdir -p "$dir"
files=()
for i in $(seq 1 "$shards"); do files+=("$dir/shard-$i-of-$shards.$ext"); done

popts=(--will-cite --halt soon,fail=1 --joblog "$dir/joblog" -j "$jobs")
[ -n "$sshlogin" ] && popts+=(--sshlogin "$sshlogin" --workdir .)
[ "$quiet" -eq 0 ] && [ -t 2 ] && popts+=(--bar)
[ "$quiet" -eq 0 ] && echo "sweep-parallel: $shards shards of $config, $jobs at a time, into $dir" >&2

# -q: GNU parallel quotes every word, so --set values keep their quotes and spaces
if ! parallel "${popts[@]}" -q "$kvc" run "$config" "${sets[@]}" "${runopts[@]}" --shard "{}/$shards" --resume -q \
        --out "$dir/shard-{}-of-$shards.$ext" ::: $(seq 1 "$shards"); then
    echo "sweep-parallel: a shard failed (see $dir/joblog); run the same command again to resume" >&2
    exit 1
fi
"$kvc" merge --config "$config" "${sets[@]}" --out "$out" "${files[@]}"
[ "$quiet" -eq 0 ] && echo "sweep-parallel: wrote $out" >&2
if [ "$clean" -eq 1 ]; then rm -rf "$dir"; fi
exit 0
