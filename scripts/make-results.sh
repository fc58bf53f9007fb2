#!/bin/sh
# make-results.sh: regenerates every file under results/ from ./kvc (run by `make results`).
# What is committed in results/ is exactly what these commands print; tests/test_results.sh checks it.
set -eu
cd "$(dirname "$0")/.."
KVC=${KVC:-./kvc}
# the digits do not depend on the CPU: the same OpenBLAS kernels everywhere (see the script)
. scripts/numeric-env.sh
mkdir -p results

write() {  # write FILE CMD...: the command's stdout, replaced atomically
    out=$1; shift
    "$@" > "$out.tmp"
    mv "$out.tmp" "$out"
    echo "wrote $out" >&2
}

# The lesson's size arithmetic (kv-cache-compression-lesson.txt, "What is the real saving?" and the running example).
sizes() {
    echo "# 32 layers x 32 KV heads x head dim 128, FP16: bytes per token"
    $KVC size --layers 32 --kv-heads 32 --head-dim 128
    echo
    echo "# the legal-document assistant: 60,000 tokens"
    $KVC size --layers 32 --kv-heads 32 --head-dim 128 --tokens 60000
    echo
    echo "# 8 KV heads (GQA) and an FP8 cache"
    $KVC size --layers 32 --kv-heads 8 --head-dim 128 --tokens 60000 --k-bits 8 --v-bits 8
    echo
    echo "# one head at d = 64: FP16 baseline, rank-32 keys, INT8 values, INT8 both, rank-16 keys"
    $KVC size --head-dim 64 --format csv
    $KVC size --head-dim 64 --k-rank 32 --format csv | tail -n 1
    $KVC size --head-dim 64 --v-bits 8 --format csv | tail -n 1
    $KVC size --head-dim 64 --k-bits 8 --v-bits 8 --format csv | tail -n 1
    $KVC size --head-dim 64 --k-rank 16 --format csv | tail -n 1
}
if [ "${1:-}" = "--print-size" ]; then sizes; exit 0; fi   # used by tests/test_results.sh
write results/lesson.txt     $KVC run configs/lesson.json --no-timing
write results/lesson.csv     $KVC run configs/lesson.json --no-timing --format csv
write results/practice.txt   $KVC run configs/practice.json --no-timing
write results/practice.csv   $KVC run configs/practice.json --no-timing --format csv
write results/realistic.txt  $KVC run configs/realistic.json --no-timing
write results/methods.txt    $KVC run configs/methods.json --no-timing
write results/legal_assistant.txt $KVC run configs/legal_assistant.json --no-timing
write results/size.txt sizes

# The sweep over every method family (configs/sweep-pareto.json) and its pictures (gnuplot-nox).
write results/pareto.csv     $KVC run configs/sweep-pareto.json --no-timing --format csv
scripts/plot-pareto.sh results/pareto.csv results/pareto.png \
    --title "KV-cache compression: attention error vs bytes (configs/sweep-pareto.json)"
echo "wrote results/pareto.png" >&2
# A real model in the loop: models/lm (scripts/train_lm.py) over 2048 tokens of held-out text, 128 decoded; every
# row's attention error against its lm_kl (results/attn-vs-kl.png, the rank correlations in results/attn-vs-kl.txt).
write results/model-lm.txt $KVC run configs/model-lm.json --no-timing -q
write results/model-lm.csv $KVC run configs/model-lm.json --no-timing -q --format csv
scripts/plot-attn-kl.sh results/model-lm.csv results/attn-vs-kl.png --stats results/attn-vs-kl.txt \
    --title "models/lm, configs/model-lm.json: attention error vs the model's KL divergence, per method"
echo "wrote results/attn-vs-kl.png and results/attn-vs-kl.txt" >&2
# A Llama-3-8B-shaped cache (data.shape, 32 layers, 8 KV / 32 query heads, D 128) at 4096 tokens: every family at
# about 2x/4x/8x (configs/sweep-llama.json). The largest run here: about 75 s (2.1 minutes of CPU) and 254 MB on 2 cores;
# KVC_RESULTS_QUICK=1 leaves it and the retrieval table out.
if [ -z "${KVC_RESULTS_QUICK:-}" ]; then
    write results/pareto-llama.csv $KVC run configs/sweep-llama.json --no-timing --format csv -q
    scripts/plot-pareto.sh results/pareto-llama.csv results/pareto-llama.png \
        --title "Llama-3-8B shape (32 layers, 8 KV / 32 query heads, D 128), T 4096: attention error vs bytes"
    echo "wrote results/pareto-llama.png" >&2
    # The retrieval model models/recall (scripts/train_recall.py): recall_acc per method at contexts 512, 1024 and
    # 2048, 16 sequences each (48 runs of configs/model-recall.json, about 1.5 minutes here).
    write results/model-recall.txt scripts/model-recall.sh configs/model-recall.json
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$KVC run configs/sweep-pareto.json --no-timing --out "$tmp/pareto.jsonl" -q
scripts/plot-sweep.sh "$tmp/pareto.jsonl" results/sweep-bits.png bits \
    --title "quantization: attention error vs bits (configs/sweep-pareto.json)"
echo "wrote results/sweep-bits.png" >&2
