#!/bin/sh
# bench-quality.sh: the quality path (kvc run) against numpy on the same work (part of `make bench`; never in make
# test). Writes results/bench-quality.txt.
# The run: kvc run configs/lesson.json --set data.tokens=$TOKENS --set data.head_dim=$HEAD_DIM --no-timing (the
# lesson's eight experiments on one 65536 x 128 head: quantize K,V to INT8/4/2, two evictions, low-rank keys at
# ranks 32/16/8), and scripts/bench-quality.py, the same computation in numpy, in two forms: one SVD of K for the
# three ranks (the lesson's own code) and one SVD per rank (what kvc did before it shared its decompositions).
# One untimed warm-up run of each program (the first run after other work measured up to 2x slower, kvc 1.05 s
# against 0.57 on the AMD Zen 4 VM, the extra in system time), then ROUNDS rounds (default 3), the programs
# alternating within each; wall time, CPU time (user + sys) and peak RSS
# from /usr/bin/time (GNU time, getrusage of the child); medians; ratios numpy / kvc. Every numpy run's numbers are
# checked against kvc's (scripts/bench-quality.py --compare) and the largest relative difference is printed.
# Both run under scripts/numeric-env.sh (the AVX2 OpenBLAS kernels, as make test and make results); kvc pins
# OpenBLAS to one thread, numpy uses its default threads. BENCH_NOTE, when set, is printed in the header (say there
# what else the machine was doing).
set -eu
cd "$(dirname "$0")/.."
KVC=${KVC:-./kvc}
PY=${PY:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}
TOKENS=${TOKENS:-65536}
HEAD_DIM=${HEAD_DIM:-128}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bench-quality.sh: needs GNU time at $TIME (apt-get install time)" >&2; exit 1; }
. scripts/numeric-env.sh
mkdir -p results
out=results/bench-quality.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# run NAME CMD...: one timed run, stdout to $tmp/NAME.csv, "wall cpu rss_kb" appended to $tmp/NAME.t
run() {
    name=$1; shift
    "$TIME" -f '%e %U %S %M' -o "$tmp/time" "$@" > "$tmp/$name.csv"
    read -r e u s m < "$tmp/time"
    awk -v e="$e" -v u="$u" -v s="$s" -v m="$m" 'BEGIN { printf "%s %.2f %s\n", e, u + s, m }' >> "$tmp/$name.t"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "warm-up" >&2
"$KVC" run configs/lesson.json --set data.tokens="$TOKENS" --set data.head_dim="$HEAD_DIM" --no-timing --format csv >/dev/null
for v in once per-rank; do "$PY" scripts/bench-quality.py --svd "$v" "$TOKENS" "$HEAD_DIM" >/dev/null; done
: > "$tmp/agree"
for i in $(seq "$ROUNDS"); do
    echo "round $i/$ROUNDS" >&2
    run kvc "$KVC" run configs/lesson.json --set data.tokens="$TOKENS" --set data.head_dim="$HEAD_DIM" --no-timing \
        --format csv
    run once "$PY" scripts/bench-quality.py --svd once "$TOKENS" "$HEAD_DIM"
    run perrank "$PY" scripts/bench-quality.py --svd per-rank "$TOKENS" "$HEAD_DIM"
    for v in once perrank; do
        "$PY" scripts/bench-quality.py --compare "$tmp/kvc.csv" "$tmp/$v.csv" | sed "s/^/$v: /" >> "$tmp/agree"
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# median COLUMN FILE: the median of column COLUMN (1 wall, 2 cpu, 3 rss) over the rounds
median() { cut -d' ' -f"$1" "$2" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
row() {  # row LABEL NAME
    printf '%-36s %-22s %7.2f  %-22s %7.2f  %-20s %6.0f\n' "$1" "$(cut -d' ' -f1 "$tmp/$2.t" | tr '\n' ' ')" \
        "$(median 1 "$tmp/$2.t")" "$(cut -d' ' -f2 "$tmp/$2.t" | tr '\n' ' ')" "$(median 2 "$tmp/$2.t")" \
        "$(awk '{ printf "%.0f ", $3 / 1024 }' "$tmp/$2.t")" "$(median 3 "$tmp/$2.t" | awk '{ print $1 / 1024 }')"
}
ratio() { awk -v a="$(median "$1" "$tmp/$2.t")" -v b="$(median "$1" "$tmp/$3.t")" 'BEGIN { printf "%.2f", a / b }'; }
{
    echo "# kvc quality path vs numpy on the same work, $(date -u +%Y-%m-%d); cpu:$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || echo ' unknown')"
    echo "# $(nproc 2>/dev/null || echo '?') logical CPUs; kvc $($KVC --version | head -n 1 | cut -d' ' -f2) ($($KVC --version | sed -n 's/^commit: *//p')); numpy $("$PY" -c 'import numpy; print(numpy.__version__)'); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
    [ -z "${BENCH_NOTE:-}" ] || echo "# note: $BENCH_NOTE"
    echo "# load average (1, 5, 15 min) before: $load_before, after: $load_after. On a machine shared with other"
    echo "# work the wall times stretch with the load; CPU time (user + sys) is the steadier number to compare."
    echo "# kvc run configs/lesson.json --set data.tokens=$TOKENS --set data.head_dim=$HEAD_DIM --no-timing --format csv"
    echo "# numpy: $PY scripts/bench-quality.py --svd once|per-rank $TOKENS $HEAD_DIM"
    echo "# one untimed warm-up run of each, then $ROUNDS rounds, the three programs alternating in each; medians"
    echo
    printf '%-36s %-22s %7s  %-22s %7s  %-20s %6s\n' program "wall s (rounds)" median "cpu s (rounds)" median \
        "peak RSS MiB" median
    row "kvc" kvc
    row "numpy, one SVD for the three ranks" once
    row "numpy, one SVD per rank" perrank
    echo
    echo "numpy / kvc, wall:  $(ratio 1 once kvc)x (one SVD), $(ratio 1 perrank kvc)x (SVD per rank)"
    echo "numpy / kvc, cpu:   $(ratio 2 once kvc)x (one SVD), $(ratio 2 perrank kvc)x (SVD per rank)"
    echo "kvc / numpy, peak RSS: $(ratio 3 kvc once) (one SVD), $(ratio 3 kvc perrank) (SVD per rank)"
    echo
    echo "# the same numbers? kvc's CSV against each numpy run (every float numpy prints, rows by label):"
    sort "$tmp/agree" | uniq -c | sed 's/^ */# /'
} > "$tmp/out"
mv "$tmp/out" "$out"
echo "wrote $out" >&2
