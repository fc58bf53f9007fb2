#!/bin/bash
# sweep-parallel.sh: run a kvc sweep as N shards with GNU parallel (Debian package `parallel`), on this
# machine or across hosts, then merge the shards into one results file checked against the grid.
#
#   scripts/sweep-parallel.sh [options] CONFIG.json OUT.csv|OUT.jsonl [kvc run options] [-- kvc run options]
#
#   -j, --jobs JOBS       shards running at once (GNU parallel's -j: 4, 100%, ...; default: one per CPU)
#   -n, --shards N        slices of the grid (default: JOBS when it is a number, else the number of CPUs)
#   -S, --sshlogin LOGINS run shards on these hosts too (GNU parallel's --sshlogin, e.g. ":,node1,4/node2");
#                         every host must see the same paths (a shared filesystem) and have kvc there
#   --kvc PATH            the kvc binary (default: $KVC, else ../kvc next to this script, else kvc on PATH)
#   --clean               remove the shard files and logs after a successful merge (default: keep them)
#   -q, --quiet           no progress bar and no notes of this script (kvc's notes stay in the shard logs)
#   --set PATH=JSON       config overrides, passed to every shard and to the merge (repeatable)
#   any other option      goes to every `kvc run` as it is: --no-timing, --per-head, --timing-repeat=5, ...
#                         (an option with a separate value word goes after --)
#   -- ARGS...            everything after it goes to every `kvc run` (--set still to the merge too)
#
# The options are checked first (kvc run CONFIG ... --list). Shard i of N is
#   kvc run CONFIG [options] --shard i/N --resume --out OUT.shards/shard-i-of-N.EXT
# with its stderr (kvc's notes and errors) in OUT.shards/shard-i-of-N.log, and the merge is
#   kvc merge --config CONFIG --out OUT OUT.shards/shard-*-of-N.EXT
# --out, --format, --shard, --resume and --list are the script's and refused. Rerunning the same command after
# an interruption or a failed shard resumes every shard where it stopped. GNU parallel's job log is
# OUT.shards/joblog. Exit status: 0 when every shard ran and the merge succeeded, 1 when a shard failed (the
# message names it), 2 for a usage error.
set -euo pipefail

die() { echo "sweep-parallel: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
. "$here/sweep-lib.sh"   # sweep_run_opt, sweep_after_dashdash, sweep_args, sweep_find_kvc, sweep_check_run, abs
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
        --clean) clean=1; shift ;;
        -q|--quiet) quiet=1; shift ;;
        -h|--help) usage ;;
        --) shift; sweep_after_dashdash "$@"; break ;;
        -?*) sweep_run_opt "$1"; shift ;;
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
sweep_check_run

mkdir -p "$(dirname "$out")"
dir=$(abs "$out").shards
mkdir -p "$dir"

# One shell command line per shard, every word single-quoted, given to GNU parallel as input (NUL-separated)
# rather than as a command template: no word of a --set value can be taken for a replacement string ({},
# {#}, {1}, ...), and each shard's stderr goes to its own log.
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
base=""
for w in "$kvc" run "$config" "${sets[@]}" "${runopts[@]}"; do base+="$(q "$w") "; done
files=() cmds=()
for i in $(seq 1 "$shards"); do
    f=$dir/shard-$i-of-$shards
    files+=("$f.$ext")
    cmds+=("${base}--shard $i/$shards --resume --out $(q "$f.$ext") >$(q "$f.log") 2>&1")
done

popts=(--will-cite -0 --halt soon,fail=1 --joblog "$dir/joblog" -j "$jobs")
[ -n "$sshlogin" ] && popts+=(--sshlogin "$sshlogin" --workdir .)
[ "$quiet" -eq 0 ] && [ -t 2 ] && popts+=(--bar)
[ "$quiet" -eq 0 ] && echo "sweep-parallel: $shards shards of $config, $jobs at a time, into $dir" >&2

if ! printf '%s\0' "${cmds[@]}" | parallel "${popts[@]}"; then
    # the job log: Seq Host Starttime JobRuntime Send Receive Exitval Signal Command; job k ran shard k
    while IFS=$'\t' read -r seq _ _ _ _ _ exitval signal _; do
        [ "$seq" = Seq ] && continue
        [ "$exitval" = 0 ] && [ "$signal" = 0 ] && continue
        how="exit status $exitval"; [ "$signal" = 0 ] || how="signal $signal"
        echo "sweep-parallel: shard $seq/$shards failed ($how); its log $dir/shard-$seq-of-$shards.log ends:" >&2
        tail -n 3 "$dir/shard-$seq-of-$shards.log" 2>/dev/null | sed 's/^/    /' >&2
    done < "$dir/joblog"
    echo "sweep-parallel: not merged; run the same command again to resume (job log: $dir/joblog)" >&2
    exit 1
fi
"$kvc" merge --config "$config" "${sets[@]}" --out "$out" "${files[@]}"
[ "$quiet" -eq 0 ] && echo "sweep-parallel: wrote $out (kvc's notes of each shard: $dir/shard-*-of-$shards.log)" >&2
if [ "$clean" -eq 1 ]; then rm -rf "$dir"; fi
exit 0
