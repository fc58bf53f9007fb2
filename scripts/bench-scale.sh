#!/bin/sh
# bench-scale.sh: memory and time of a Llama-3-8B-shaped cache streamed a few KV heads at a time (issue 14's scale
# target; README "Large caches, a few heads at a time"). Not part of make test; a 32768-token run takes minutes.
#
# The config: configs/sweep-llama.json's data block (head dim 128, the realistic generators) with LAYERS layers
# (default 32), KV_HEADS KV heads (default 8; 4 query heads each) and each of TOKENS (default "4096 32768") tokens,
# and four experiments: INT8 and INT4 per-token quantization of K and V, sinks + a window of a quarter of the
# tokens, SnapKV keeping a quarter, rank-32 keys. Each run is `kvc run CFG --no-timing -q --format csv -j J` for
# each J of JOBS (default "1 2"), streamed (KVC_DATA_STREAM=1, as kvc run streams such a cache anyway), timed by
# GNU time: peak RSS, user and wall seconds. The CSV of every J must be the same bytes (checked). Prints a table;
# BENCH_NOTE, when set, goes in its header (say what else the machine was doing).
set -eu
cd "$(dirname "$0")/.."
KVC=${KVC:-./kvc}
LAYERS=${LAYERS:-32}
KV_HEADS=${KV_HEADS:-8}
TOKENS=${TOKENS:-4096 32768}
JOBS=${JOBS:-1 2}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bench-scale.sh: needs GNU time at $TIME (apt-get install time)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

echo "# kvc run of a Llama-3-8B-shaped cache, streamed; $(date -u +%Y-%m-%d); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# $(nproc) logical CPUs; $($KVC --version | head -1); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "${BENCH_NOTE:-}" ] && echo "# $BENCH_NOTE"
echo "# $LAYERS layers x $KV_HEADS KV heads ($((4 * KV_HEADS)) query heads) x D 128; INT8, INT4, sinks + window T/4, SnapKV 1/4, rank-32 K"
printf '%-8s %-4s %12s %10s %10s %s\n' tokens jobs "peak_RSS_MB" user_s wall_s csv
for T in $TOKENS; do
    W=$((T / 4 - 4))
    cat > "$tmp/cfg.json" <<EOF
{"seed": 7,
 "data": {"layers": $LAYERS, "kv_heads": $KV_HEADS, "q_heads": $((4 * KV_HEADS)), "head_dim": 128, "tokens": $T,
  "keys": {"generator": "lowrank", "rank": 32, "scale": 0.18, "noise": 0.1, "outlier_channels": {"count": 4, "scale": [10, 100]}},
  "values": {"generator": "normal"},
  "head_correlation": {"rho": 0.5, "group": 2},
  "rope": {"base": 500000, "dims": 128, "cache": "post"},
  "sinks": {"tokens": 4, "share": 0.4},
  "recent": {"tokens": 512, "share": 0.5},
  "heavy_hitters": {"count": 32, "share": 0.2, "spread": 1.0},
  "query": {"generator": "look_back", "count": 2, "weight": 0.5, "noise": 0.5, "head_correlation": 0.5, "bias": 1.0},
  "observe": {"window": 32, "weight": 0.5, "noise": 0.5}},
 "experiments": [
  {"label": "INT{bits} K,V", "method": "quantize", "bits": [8, 4], "apply_to": "kv"},
  {"label": "sinks + window", "method": "sink_window", "sinks": 4, "window": $W},
  {"label": "SnapKV 1/4", "method": "snapkv", "keep_ratio": 0.25},
  {"label": "rank-32 K", "method": "lowrank", "rank": 32, "apply_to": "k"}]}
EOF
    first=
    for J in $JOBS; do
        KVC_DATA_STREAM=1 $TIME -f '%M %U %e' -o "$tmp/t" "$KVC" run "$tmp/cfg.json" --no-timing -q --format csv -j "$J" > "$tmp/$J.csv"
        read -r rss user wall < "$tmp/t"
        same=first
        if [ -n "$first" ]; then
            if cmp -s "$tmp/$first.csv" "$tmp/$J.csv"; then same="same as -j $first"; else same=DIFFERENT; fi
        else
            first=$J
        fi
        printf '%-8s %-4s %12d %10s %10s %s\n' "$T" "$J" $((rss / 1024)) "$user" "$wall" "$same"
        if [ "$same" = DIFFERENT ]; then echo "bench-scale.sh: -j $J gave other rows than -j $first" >&2; exit 1; fi
    done
done
