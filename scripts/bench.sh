#!/bin/sh
# bench.sh: the decode-speed benchmark at full size (`make bench`; arguments are passed to kvc bench).
# Writes results/bench.csv (every row) and results/bench.txt (the machine at the top, the table, then the
# issue's targets checked against the rows), then the grouped-query rows (results/bench-gqa.csv) and their targets. Timing targets live here, never in `make test`.
# The shape is issue 5's: T = 65536 tokens, 8 KV heads, D = 128, one layer; 8 and 32 query heads (GQA);
# 1 and 2 threads. Formats: kvc bench's default list (f32 ... lr32/f16, kivi4, kivi2). Some caches fit a large
# last-level cache (f16: 268 MB; int2: 36 MB; this project's Xeon VM reports 480 MiB), so kvc bench reads its
# default --evict-mib (the last-level cache's size) of other memory before every timed step: a step reads its cache
# from memory, as a model's decode does when it comes back to a layer.
set -eu
cd "$(dirname "$0")/.."
KVC=${KVC:-./kvc}
mkdir -p results
$KVC bench --tokens 65536 --layers 1 --kv-heads 8 --q-heads 8,32 --head-dim 128 --threads 1,2 --repeat 10 \
    --csv-file results/bench.csv.tmp "$@" > results/bench.txt.tmp
# Targets (issue 5, section 3), computed from the CSV rows of this run.
awk -F, '
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
{
    key = $col["format"] "|" $col["q_heads"] "|" $col["threads"]
    pct[key] = $col["pct_bw"]; best[key] = $col["pct_bw_best"]; ms[key] = $col["ms_median"]; kms[key] = $col["k_ms"]
    if ($col["threads"] > maxthr) maxthr = $col["threads"]
    thr[$col["threads"]] = 1
}
function show(name, got, want, cmp, extra,   ok) {
    if (got == "") { printf "  %-46s %10s   (not measured)\n", name, "-"; return }
    ok = (cmp == ">=") ? (got + 0 >= want) : (got + 0 <= want)
    printf "  %-46s %10.2f   target %s %-6g %-6s %s\n", name, got, cmp, want, ok ? "met" : "MISSED", extra
}
function bw(name, f, t, want) { show(name " %bw (median)", pct[f "|8|" t], want, ">=", "best-case " best[f "|8|" t] "%") }
END {
    print ""
    print "# targets (issue 5): percent of the read bandwidth measured in this run, 8 query heads"
    for (t = 1; t <= maxthr; t++) {
        if (!(t in thr)) continue
        printf "threads %s:\n", t
        bw("f16", "f16", t, 85)
        bw("int8", "int8", t, 80)
        bw("e4m3 (fp8)", "e4m3", t, 80)
        bw("q8_0", "q8_0", t, 80)
        bw("int4", "int4", t, 70)
        bw("q4_0", "q4_0", t, 70)
        bw("kivi4 (KIVI, 4-bit + FP16 residual)", "kivi4", t, 70)
        if (ms["f16|8|" t] != "" && ms["f16|32|" t] != "")
            show("GQA f16: time(32 q heads) / time(8 q heads)", ms["f16|32|" t] / ms["f16|8|" t], 1.3, "<=")
        if (ms["q8_0|8|" t] != "" && ms["q8_0|32|" t] != "")
            show("GQA q8_0: time(32 q heads) / time(8 q heads)", ms["q8_0|32|" t] / ms["q8_0|8|" t], 1.3, "<=")
        if (kms["f16|8|" t] != "" && kms["lr32/f16|8|" t] != "")
            show("low rank r=32: key-side time / f16 key-side", kms["lr32/f16|8|" t] / kms["f16|8|" t], 0.4, "<=")
        if (t == 1) {
            printf "  llama.cpp CPU flash-attention decode, 1 thread, on a 38 GB/s machine (issue 5): f16 9.65 ms,\n"
            printf "  q8_0 13.8 ms, q4_0 32.5 ms; here: f16 %s ms, q8_0 %s ms, q4_0 %s ms (this machine'"'"'s bandwidth is above)\n", \
                   ms["f16|8|1"], ms["q8_0|8|1"], ms["q4_0|8|1"]
        }
    }
}' results/bench.csv.tmp >> results/bench.txt.tmp

# Grouped-query decode (issue 14): the formats people run, at G = 1, 4 and 8 query heads per KV head (8, 32 and 64
# query heads on 8 KV heads), 1 and 2 threads, no naive path, the rows of a format on the same threads timed in turn
# (--interleave: the ratio G = 8 / G = 4 side by side); its rows go to results/bench-gqa.csv, its table and the
# issue's targets to the end of results/bench.txt.
$KVC bench --tokens 65536 --layers 1 --kv-heads 8 --q-heads 8,32,64 --head-dim 128 --threads 1,2 --repeat 10 \
    --naive-repeat 0 --interleave --formats f16,int8,e4m3,q8_0,int4,q4_0,kivi4 --csv-file results/bench-gqa.csv.tmp "$@" \
    > results/bench-gqa.txt.tmp
{
    echo
    echo "# grouped-query decode (issue 14): 8 KV heads x 8, 32, 64 query heads (G = 1, 4, 8); same shape otherwise;"
    echo "#   a format's rows on the same threads timed in turn, one step of each after another (kvc bench --interleave)"
    grep -e '^# bandwidth' -e '^[^#]' results/bench-gqa.txt.tmp
    awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
        key = $col["format"] "|" $col["q_heads"] / $col["kv_heads"] "|" $col["threads"]
        pct[key] = $col["pct_bw"]; ms[key] = $col["ms_median"]; gb[key] = $col["gbps"]; bw[key] = $col["bw_gbps"]
    }
    function show(name, got, want, cmp,   ok) {
        if (got == "") { printf "  %-52s %10s   (not measured)\n", name, "-"; return }
        ok = (cmp == ">=") ? (got + 0 >= want) : (got + 0 <= want)
        printf "  %-52s %10.2f   target %s %-6g %s\n", name, got, cmp, want, ok ? "met" : "MISSED"
    }
    END {
        n = split("f16 int8 e4m3 q8_0 int4 q4_0 kivi4", f, " ")
        print ""
        print "# targets (issue 14), 1 thread: percent of the read bandwidth measured in this run"
        for (i = 1; i <= n; i++) {
            four = (f[i] == "int4" || f[i] == "q4_0" || f[i] == "kivi4")
            show(f[i] " G=4 %bw", pct[f[i] "|4|1"], four ? 60 : 75, ">=")
            show(f[i] " G=1 %bw", pct[f[i] "|1|1"], four ? 70 : 80, ">=")
            if (ms[f[i] "|8|1"] != "" && ms[f[i] "|4|1"] != "")
                show(f[i] " time(G=8) / time(G=4)", ms[f[i] "|8|1"] / ms[f[i] "|4|1"], 1.3, "<=")
        }
        print "# 2 threads: speed-up over 1 thread where 1 thread reads below 60 % of the 2-thread bandwidth"
        for (i = 1; i <= n; i++)
            for (g = 1; g <= 8; g *= (g == 1 ? 4 : 2))
                if (gb[f[i] "|" g "|1"] != "" && ms[f[i] "|" g "|2"] != "" && gb[f[i] "|" g "|1"] < 0.6 * bw[f[i] "|" g "|2"])
                    show(f[i] " G=" g " time(1 thread) / time(2 threads)", ms[f[i] "|" g "|1"] / ms[f[i] "|" g "|2"], 1.7, ">=")
    }' results/bench-gqa.csv.tmp
} >> results/bench.txt.tmp
# The rounded-query modes (issue 14: a faster mode that needs more error than 1e-5 is an option with its measured
# error beside its speed): int8 / q8_0 / int4 / q4_0 keys with the query as float32, int16 and int8, at G = 1, 4
# and 8, 1 thread; results/bench-query.csv, and its table and the 1-thread targets per mode in results/bench.txt.
# Needs the AVX512_VNNI kernels: elsewhere kvc bench refuses --query int16 / int8 and the section says so.
if $KVC bench --tokens 64 --kv-heads 1 --head-dim 64 --formats int8 --query int8 --threads 1 --repeat 1 \
        --naive-repeat 0 --bw-mib 1 --evict-mib 0 > /dev/null 2>results/bench-query.err.tmp; then
    $KVC bench --tokens 65536 --layers 1 --kv-heads 8 --q-heads 8,32,64 --head-dim 128 --threads 1 --repeat 10 \
        --naive-repeat 0 --interleave --formats int8,q8_0,int4,q4_0 --query f32,int16,int8 --csv-file results/bench-query.csv.tmp \
        "$@" > results/bench-query.txt.tmp
    {
        echo
        echo "# rounded query (kvc bench --query f32,int16,int8): int8 / q8_0 / int4 / q4_0 keys, G = 1, 4, 8, 1 thread;"
        echo "#   rel_err beside the speed: the rounded modes are options above the 1e-5 rule (ok = NO), never the default;"
        echo "#   a format's rows timed in turn (kvc bench --interleave)"
        grep -e '^# bandwidth' -e '^[^#]' results/bench-query.txt.tmp
        awk -F, '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        {
            key = $col["format"] "|" $col["q_heads"] / $col["kv_heads"] "|" $col["query"]
            pct[key] = $col["pct_bw"]; ms[key] = $col["ms_median"]; err[key] = $col["rel_err"]
        }
        END {
            n = split("int8 q8_0 int4 q4_0", f, " "); split("f32 int16 int8", m, " ")
            print ""
            print "# issue 14 targets, 1 thread, per query mode: %bw (target), time(G=8) / time(G=4) (target 1.3), rel_err at G=4"
            printf "  %-6s %-6s %16s %16s %14s %10s\n", "format", "query", "G=4 %bw", "G=1 %bw", "G8/G4", "rel_err"
            for (i = 1; i <= n; i++)
                for (j = 1; j <= 3; j++) {
                    four = (f[i] == "int4" || f[i] == "q4_0"); k4 = f[i] "|4|" m[j]; k1 = f[i] "|1|" m[j]; k8 = f[i] "|8|" m[j]
                    if (pct[k4] == "") continue
                    t4 = four ? 60 : 75; t1 = four ? 70 : 80
                    r = (ms[k8] != "") ? ms[k8] / ms[k4] : -1
                    printf "  %-6s %-6s %7.1f (%2d) %-4s %7.1f (%2d) %-4s %5.2f %-6s %10s\n", f[i], m[j], pct[k4], t4, \
                           (pct[k4] >= t4) ? "met" : "MISS", pct[k1], t1, (pct[k1] >= t1) ? "met" : "MISS", r, \
                           (r >= 0 && r <= 1.3) ? "met" : "MISS", err[k4]
                }
        }' results/bench-query.csv.tmp
    } >> results/bench.txt.tmp
    rm -f results/bench-query.txt.tmp results/bench-query.csv.tmp.meta.json
    mv results/bench-query.csv.tmp results/bench-query.csv
else
    { echo; echo "# rounded query (kvc bench --query): not measured on this machine: $(cat results/bench-query.err.tmp)"; } \
        >> results/bench.txt.tmp
fi
rm -f results/bench-query.err.tmp
# kvc against llama.cpp's CPU flash attention at G = 1 and G = 4 (issue 14): scripts/bench-llamacpp.sh measures both
# side by side in one run each (it builds llama.cpp, so make bench does not run it); their tables are copied here.
for f in results/bench-llamacpp.txt results/bench-llamacpp-g4.txt; do
    [ -f "$f" ] || continue
    {
        echo
        echo "# kvc vs llama.cpp's flash-attention decode step, from $f (scripts/bench-llamacpp.sh, its own run):"
        awk '/^# llama.cpp CPU flash-attention decode vs kvc bench/ && !d { d = 1; sub(/^.*\), /, ""); print "#   measured " $0 }
             /^# machine: / && !m { m = 1; sub(/^# machine: */, ""); print "#   machine: " $0 }
             /^# shape: --/ && !s { s = 1; sub(/^# shape: */, ""); print "#   shape: " $0 }' "$f"
        echo "#   x tok / x head = llama.cpp ms / kvc ms in llama.cpp's token-major cache / ggml's head-major layout"
        awk '/^format thr/ { on = 1 } on && /^$/ { exit } on' "$f"
    } >> results/bench.txt.tmp
done
# Where the GQA step's time goes (issue 14: what limits a missed target, measured): the key and value kernels per
# cached row, in L2 and streamed from memory, beside the memory floor (tests/bench_kernels.c, built by make bench).
KERNELS=${KVC_BENCH_KERNELS:-build/tests/bench_kernels}
if [ -x "$KERNELS" ]; then
    $KERNELS 1024 > results/bench-kernels.txt.tmp   # 1 GiB per format: past any last-level cache
    mv results/bench-kernels.txt.tmp results/bench-kernels.txt
    { echo; echo "# where the time goes per cached row (results/bench-kernels.txt, tests/bench_kernels.c):"; cat results/bench-kernels.txt; } >> results/bench.txt.tmp
    # ... and which missed targets that work rules out (scripts/bench-bound.sh)
    sh scripts/bench-bound.sh results/bench-kernels.txt results/bench-gqa.csv.tmp >> results/bench.txt.tmp ||
        echo "bench.sh: bench-bound.sh failed; results/bench.txt has no bound section" >&2
else
    echo "bench.sh: $KERNELS is not built (make testbin, or make bench); results/bench-kernels.txt left as it was" >&2
fi
# ... and the instructions each kernel executes per cached row, counted by single-stepping it (tests/count_insns.c;
# no performance counters needed; the same on every run of the same binary and instruction set).
INSNS=${KVC_COUNT_INSNS:-build/tests/count_insns}
if [ -x "$INSNS" ]; then
    if $INSNS > results/bench-insns.txt.tmp 2>results/bench-insns.err; then
        mv results/bench-insns.txt.tmp results/bench-insns.txt
        { echo; echo "# instructions per cached row (results/bench-insns.txt, tests/count_insns.c):"; cat results/bench-insns.txt; } >> results/bench.txt.tmp
    else
        echo "bench.sh: $INSNS could not count here ($(cat results/bench-insns.err)); results/bench-insns.txt left as it was" >&2
    fi
    rm -f results/bench-insns.txt.tmp results/bench-insns.err
else
    echo "bench.sh: $INSNS is not built (make testbin, or make bench); results/bench-insns.txt left as it was" >&2
fi
rm -f results/bench-gqa.txt.tmp results/bench.csv.tmp.meta.json results/bench-gqa.csv.tmp.meta.json  # named after .tmp
mv results/bench-gqa.csv.tmp results/bench-gqa.csv
mv results/bench.csv.tmp results/bench.csv
mv results/bench.txt.tmp results/bench.txt
echo "wrote results/bench.csv, results/bench-gqa.csv, results/bench-query.csv (VNNI machines) and results/bench.txt" >&2
