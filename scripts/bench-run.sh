#!/bin/sh
# bench-run.sh: the decode timing of `kvc run` on the realistic configs (part of `make bench`; never in make test).
# Writes results/run-timing.txt: configs/realistic.json and configs/methods.json with decode_ns (median step over
# the cache as each method stores it) and decode_speedup (the FP16 cache's median step, timed once per run, /
# decode_ns), then the notes kvc printed (experiments it could not time, forms on the generic tile path).
set -eu
cd "$(dirname "$0")/.."
KVC=${KVC:-./kvc}
REPEAT=${REPEAT:-31}
mkdir -p results
out=results/run-timing.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
{
    echo "# kvc run decode timing, $(date -u +%Y-%m-%d); cpu:$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || echo ' unknown')"
    echo "# $(nproc 2>/dev/null || echo '?') logical CPUs; kvc $($KVC --version | cut -d' ' -f2); --timing-repeat $REPEAT, --threads 1"
    for cfg in realistic methods; do
        echo
        echo "# kvc run configs/$cfg.json --timing-repeat $REPEAT"
        $KVC run "configs/$cfg.json" --timing-repeat "$REPEAT" 2> "$tmp/notes"
        sed 's/^/# /' "$tmp/notes"
    done
} > "$tmp/out"
mv "$tmp/out" "$out"
echo "wrote $out" >&2
