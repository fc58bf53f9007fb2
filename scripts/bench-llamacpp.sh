#!/bin/sh
# bench-llamacpp.sh: llama.cpp's CPU flash-attention decode step next to `kvc bench`, on this machine.
#
# NOT part of `make test`, `make bench` or CI: it needs npm (to fetch llama.cpp's source), git, cmake and a
# C/C++ compiler, about 1 GB of disk outside the repo and several minutes (the ggml build dominates).
#
# 1. fetches llama.cpp's source as the npm package node-llama-cpp@3.22.1 ships it (package/llama/
#    gitRelease.bundle, a git bundle of ggml-org/llama.cpp at the tag in package/llama/llama.cpp.info.json);
# 2. builds ggml's CPU backend only (static, Release, GGML_NATIVE=ON) with cmake;
# 3. builds scripts/llamacpp/fa_bench.c against it (the decode graph llama.cpp builds: ggml_flash_attn_ext
#    over a token-major KV cache view, f16 zero mask, F32 precision; see the comment at its top);
# 4. builds kvc (make) if needed, then runs fa_bench and `kvc bench` alternately, ROUNDS times each, at the
#    issue's shape (T = 65536, 8 KV heads, 8 query heads, D = 128, one layer, 1 and 2 threads);
# 5. writes results/bench-llamacpp.txt: machine, versions, flags, a llama.cpp vs kvc table, the raw outputs.
#
# Environment: KVC_LLAMACPP_DIR (work dir, default ${TMPDIR:-/tmp}/kvc-llamacpp; kept between runs, the
# fetch and the build are skipped when already there), REPEAT (timed steps per measurement, default 10),
# ROUNDS (default 3), OUT (default results/bench-llamacpp.txt), JOBS (build jobs, default 2), SHAPE (the
# fa_bench/kvc bench shape options; default the issue's; with --q-heads 32, G = 4), EXTRA (llama.cpp's other KV
# types, one run each; empty: none), EVICT (MiB read, untimed, before every timed step of both programs, so that
# neither finds its cache in the last-level cache; default: kvc bench's own --evict-mib default, read from its
# plan; 0: steps back to back, as before 2026-12-02).
set -eu
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${KVC_LLAMACPP_DIR:-${TMPDIR:-/tmp}/kvc-llamacpp}
PKG=node-llama-cpp@3.22.1
REPEAT=${REPEAT:-10}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$REPO/results/bench-llamacpp.txt}
JOBS=${JOBS:-2}
SHAPE=${SHAPE:-"--tokens 65536 --kv-heads 8 --q-heads 8 --head-dim 128"}
FORMATS=f16,q8_0,q4_0
EXTRA=${EXTRA-q4_1,q5_0,q5_1,iq4_nl,bf16}
QH=$(echo "$SHAPE" | sed -n 's/.*--q-heads \([0-9][0-9]*\).*/\1/p'); QH=${QH:-8}   # kvc bench's rows name it
mkdir -p "$WORK"

# 1. source
if [ ! -d "$WORK/llama.cpp/.git" ]; then
    (cd "$WORK" && rm -rf package node-llama-cpp-*.tgz && npm pack --silent "$PKG" >/dev/null &&
        tar xzf node-llama-cpp-*.tgz package/llama && git -c advice.detachedHead=false clone -q package/llama/gitRelease.bundle llama.cpp)
fi
TAG=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$WORK/package/llama/llama.cpp.info.json")
COMMIT=$(git -C "$WORK/llama.cpp" rev-parse HEAD)

# 2. ggml, CPU backend only
CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF"
GEN=; command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"
if [ ! -f "$WORK/build/ggml/src/libggml-cpu.a" ]; then
    # shellcheck disable=SC2086
    cmake -S "$WORK/llama.cpp" -B "$WORK/build" $GEN $CMAKE_FLAGS > "$WORK/cmake.log" 2>&1 || { tail -20 "$WORK/cmake.log"; exit 1; }
    cmake --build "$WORK/build" -j "$JOBS" --target ggml-base ggml-cpu > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
fi
LIBDIR="$WORK/build/ggml/src"
OMP=; nm "$LIBDIR/libggml-cpu.a" 2>/dev/null | grep -q 'GOMP_' && OMP=-fopenmp

# 3. the harness
CC=${CC:-cc}
$CC -O2 -std=c11 -Wall -Wextra -I"$WORK/llama.cpp/ggml/include" "$REPO/scripts/llamacpp/fa_bench.c" \
    "$LIBDIR/libggml-cpu.a" "$LIBDIR/libggml-base.a" $OMP -lstdc++ -lm -lpthread -o "$WORK/fa_bench"

# 4. kvc, then the runs: per round llama.cpp (llama's token-major KV cache), kvc, llama.cpp (head-major)
[ -x "$REPO/kvc" ] || make -C "$REPO" -j "$JOBS" kvc >/dev/null
if [ -z "${EVICT:-}" ]; then   # kvc bench's own default --evict-mib, from the plan of a one-step run
    EVICT=$("$REPO/kvc" bench --tokens 64 --kv-heads 1 --head-dim 32 --formats f16 --threads 1 --repeat 1 \
        --naive-repeat 0 --bw-mib 1 --format json 2>/dev/null | sed -n 's/.*"evict_mib":[[:space:]]*\([0-9][0-9]*\).*/\1/p')
    [ -n "$EVICT" ] || { echo "bench-llamacpp.sh: could not read kvc bench's --evict-mib default" >&2; exit 1; }
fi
RAW="$WORK/raw"; rm -rf "$RAW"; mkdir -p "$RAW"
LLAMA_CMD="fa_bench $SHAPE --types $FORMATS --threads 1,2 --repeat $REPEAT --evict-mib $EVICT"
KVC_CMD="kvc bench $SHAPE --threads 1,2 --formats $FORMATS --repeat $REPEAT --evict-mib $EVICT --naive-repeat 0"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    CHECK=; [ "$r" -gt 1 ] && CHECK=--no-check   # the accuracy check (a few seconds per type) runs once
    echo "round $r/$ROUNDS: llama.cpp, token-major cache" >&2
    # shellcheck disable=SC2086
    "$WORK/fa_bench" $SHAPE --types $FORMATS --threads 1,2 --repeat "$REPEAT" --evict-mib "$EVICT" $CHECK > "$RAW/llama.$r"
    echo "round $r/$ROUNDS: kvc" >&2
    # shellcheck disable=SC2086
    "$REPO/kvc" bench $SHAPE --threads 1,2 --formats $FORMATS --repeat "$REPEAT" --evict-mib "$EVICT" --naive-repeat 0 > "$RAW/kvc.$r" 2>/dev/null
    echo "round $r/$ROUNDS: llama.cpp, head-major" >&2
    # shellcheck disable=SC2086
    "$WORK/fa_bench" $SHAPE --types $FORMATS --threads 1,2 --repeat "$REPEAT" --evict-mib "$EVICT" --layout heads $CHECK > "$RAW/heads.$r"
    r=$((r + 1))
done
echo "extra: llama.cpp's other KV types; the token-major cache in transparent huge pages" >&2
# shellcheck disable=SC2086
if [ -n "$EXTRA" ]; then   # EXTRA= (empty) leaves them out
    # shellcheck disable=SC2086
    "$WORK/fa_bench" $SHAPE --types $EXTRA --threads 1,2 --repeat "$REPEAT" --evict-mib "$EVICT" > "$RAW/extra.cache"
    # shellcheck disable=SC2086
    "$WORK/fa_bench" $SHAPE --types $EXTRA --threads 1,2 --repeat "$REPEAT" --evict-mib "$EVICT" --layout heads --no-check > "$RAW/extra.heads"
else
    : > "$RAW/extra.cache"; : > "$RAW/extra.heads"
fi
# shellcheck disable=SC2086
"$WORK/fa_bench" $SHAPE --types $FORMATS --threads 1,2 --repeat "$REPEAT" --evict-mib "$EVICT" --thp --no-check > "$RAW/thp"

# 5. report
med() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# ms column of rows (format $1, threads $2) in files $3... (fa_bench: type thr MB ms; kvc: format qh thr MB ms)
# (kvc bench's table: format qh query thr MB ms; its f32 rows)
col() { f=$1; t=$2; shift 2; for x in "$@"; do awk -v f="$f" -v t="$t" -v qh="$QH" '$1 == f && (($2 == t && $3 ~ /\./) ? 1 : ($2 == qh && $3 == "f32" && $4 == t)) { print ($3 ~ /\./) ? $4 : $6 }' "$x"; done; }
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
ISA=$(grep -m1 -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|avxvnni' /proc/cpuinfo 2>/dev/null | sort -u | tr '\n' ' ')
CCLINE=$( (cd "$WORK/build" && ninja -t commands ggml-cpu 2>/dev/null | grep -m1 'ops.cpp') | tr ' ' '\n' | grep -E '^-(O|m|f)' | sort -u | tr '\n' ' ')
{
    echo "# llama.cpp CPU flash-attention decode vs kvc bench (scripts/bench-llamacpp.sh), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# machine:  ${CPU:-unknown CPU}, $(nproc) logical CPUs; isa: $ISA; $(uname -sr); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# llama.cpp: ggml-org/llama.cpp tag $TAG (from $PKG), bundle commit $COMMIT; $(sed -n 1p "$RAW/llama.1" | sed 's/^# fa_bench: //')"
    echo "# ggml build: cmake $CMAKE_FLAGS; $($CC --version | head -1)${CCLINE:+; ggml-cpu compiled with $CCLINE}"
    echo "# harness:  $CC -O2 -std=c11 scripts/llamacpp/fa_bench.c libggml-cpu.a libggml-base.a $OMP; one ggml_graph_compute per step, ggml threadpool"
    echo "# kvc:      $(sed -n 's/^# build: *//p' "$RAW/kvc.1"); $(sed -n 's/^# bandwidth/bandwidth/p' "$RAW/kvc.1")"
    echo "# commands, $ROUNDS rounds, each: llama.cpp token-major, kvc, llama.cpp head-major:"
    echo "#   $LLAMA_CMD                    (llama's KV cache layout)"
    echo "#   $KVC_CMD"
    echo "#   $LLAMA_CMD --layout heads     (test-backend-ops' layout)"
    echo "# shape: $SHAPE (cached tokens, KV heads, query heads, head dim), one layer, one query per head."
    echo "# token-major: llama.cpp's KV cache, one row of 8 heads x 128 per token (src/llama-kv-cache.cpp get_k/get_v),"
    echo "#   so a head's rows are strided; head-major: each head's T rows contiguous (tests/test-backend-ops.cpp)."
    echo "# ms = median of $REPEAT timed steps after a warm-up, per round; the table shows the median over rounds"
    echo "# and each round's median; x = llama.cpp ms / kvc ms (above 1: kvc faster). Other jobs share this machine: noisy."
    if [ "$EVICT" -gt 0 ]; then
        echo "# steps: each timed step of both programs after an untimed read of $EVICT MiB of other memory (EVICT), so that"
        echo "# neither reads its cache from the last-level cache (a model's decode returns to a layer's cache after the others')"
    else
        echo "# steps: back to back (EVICT=0): a cache that fits the last-level cache is partly read from it"
    fi
    echo "# For reference, issue 5 quotes llama.cpp's CPU flash-attention decode, 1 thread, on another (38 GB/s) machine:"
    echo "# f16 9.65 ms, q8_0 13.8 ms, q4_0 32.5 ms."
    echo
    printf '%-6s %3s %7s  %-36s %-36s %-34s %6s %6s\n' format thr MB "llama.cpp token-major ms" "llama.cpp head-major ms" "kvc ms" "x tok" "x head"
    for f in $(echo "$FORMATS" | tr , ' '); do
        for t in 1 2; do
            L=$(col "$f" "$t" "$RAW"/llama.[0-9]*); H=$(col "$f" "$t" "$RAW"/heads.[0-9]*); K=$(col "$f" "$t" "$RAW"/kvc.[0-9]*)
            LM=$(echo "$L" | med); HM=$(echo "$H" | med); KM=$(echo "$K" | med)
            MB=$(awk -v f="$f" -v t="$t" '$1 == f && $2 == t { print $3 }' "$RAW/llama.1")
            printf '%-6s %3s %7s  %-36s %-36s %-34s %6.2f %6.2f\n' "$f" "$t" "$MB" "$LM ($(echo "$L" | paste -sd/))" \
                "$HM ($(echo "$H" | paste -sd/))" "$KM ($(echo "$K" | paste -sd/))" \
                "$(awk -v a="$LM" -v b="$KM" 'BEGIN { print a / b }')" "$(awk -v a="$HM" -v b="$KM" 'BEGIN { print a / b }')"
        done
    done
    echo
    echo "# other llama.cpp KV types (one run each; kvc bench has no fused kernel for them), ms median:"
    printf '#   %-7s %3s %8s %12s %12s\n' type thr MB token-major head-major
    for f in $(echo "$EXTRA" | tr , ' '); do
        for t in 1 2; do
            printf '#   %-7s %3s %8s %12s %12s\n' "$f" "$t" "$(awk -v f="$f" -v t="$t" '$1 == f && $2 == t { print $3 }' "$RAW/extra.cache")" \
                "$(col "$f" "$t" "$RAW/extra.cache")" "$(col "$f" "$t" "$RAW/extra.heads")"
        done
    done
    echo
    echo "# accuracy of llama.cpp's output (round 1): rel_err = ||out - ref|| / ||ref||, ref = attention in double over"
    echo "# the dequantized cache; rel_err_q: the same with q first rounded to K's vec_dot type, as the kernel does"
    echo "# (q8_0 for q8_0/q4_0/q5_0/iq4_nl keys, q8_1 for q4_1/q5_1, f16 for f16, bf16 for bf16). kvc: rel_err column."
    echo "# Quantized and bf16 keys: the error is q's rounding (rel_err_q ~1e-5 or below: the kernel is otherwise exact;"
    echo "# q8_1 keeps its block sum in f16). f16: ggml's CPU kernel accumulates softmax x V in an FP16 vector"
    echo "# (ggml_vec_mad_f16 into VKQ16) even with GGML_PREC_F32, so the error grows like sqrt(T); 2 threads split T in two."
    for x in llama.1:token-major heads.1:head-major extra.cache:token-major; do
        awk -v lab="${x#*:}" '$1 !~ /^#/ && $2 ~ /^[0-9]+$/ && $8 != "nan" {
            printf "#   %-7s %s thr %-12s rel_err %s  rel_err_q %s\n", $1, $2, lab, $8, $9 }' "$RAW/${x%%:*}"
    done
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        echo; echo "## raw, round $r: $LLAMA_CMD"; cat "$RAW/llama.$r"
        echo; echo "## raw, round $r: $KVC_CMD"; cat "$RAW/kvc.$r"
        echo; echo "## raw, round $r: $LLAMA_CMD --layout heads"; cat "$RAW/heads.$r"
        r=$((r + 1))
    done
    echo; echo "## raw, other KV types: fa_bench $SHAPE --types $EXTRA --threads 1,2 --repeat $REPEAT --evict-mib $EVICT"; cat "$RAW/extra.cache"
    echo; echo "## raw, other KV types: ... --layout heads --no-check"; cat "$RAW/extra.heads"
    echo; echo "## raw, token-major cache in transparent huge pages (is it the TLB?): $LLAMA_CMD --thp --no-check"; cat "$RAW/thp"
} > "$OUT"
echo "wrote $OUT" >&2
