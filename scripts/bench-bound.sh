#!/bin/sh
# bench-bound.sh KERNELS_TXT GQA_CSV: issue 14's one-thread targets beside what the kernels' own work allows.
# KERNELS_TXT is tests/bench_kernels' table (results/bench-kernels.txt: per format and G, the key and value
# kernels' ns a row in L2, the floor, and `bound`, the %floor a step would reach with work and memory wholly
# overlapped); GQA_CSV is kvc bench's CSV of the grouped-query rows (results/bench-gqa.csv). For each target:
#   %bw at G = 4 (f16, int8, e4m3, q8_0: 75; int4, q4_0, kivi4: 60) and at G = 1 (80; 70) against the bound;
#   time(G = 8) / time(G = 4) (at most 1.3) against the G = 8 kernels' work alone, 2 floor / bound per row times
#   the step's rows (tokens x KV heads x layers), over the measured G = 4 step.
# A target beyond that is "ruled out by the work": no prefetch or overlap reaches it on this machine, only fewer
# instructions a row. scripts/bench.sh (make bench) appends this to results/bench.txt. Exit 2 when a file is
# missing or holds none of the rows.
set -eu
if [ $# -ne 2 ] || [ ! -r "$1" ] || [ ! -r "$2" ]; then
    echo "bench-bound.sh: usage: bench-bound.sh KERNELS_TXT GQA_CSV (both readable files)" >&2
    exit 2
fi
awk -F, '
FNR == 1 { file++ }
file == 1 {   # the kernels table: format G row_B floor keys_L2 keys_mem vals_L2 vals_mem step %floor overlap bound
    n = split($0, w, " ")
    if (w[1] ~ /^#/ || w[1] == "format" || n != 12) next
    fl[w[1] "|" w[2]] = w[4]; bd[w[1] "|" w[2]] = w[12] + 0; nk++
    next
}
FNR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
col["query"] && $col["query"] != "f32" { next }
$col["threads"] == 1 {
    key = $col["format"] "|" $col["q_heads"] / $col["kv_heads"]
    pct[key] = $col["pct_bw"]; ms[key] = $col["ms_median"]
    rows[key] = $col["tokens"] * $col["kv_heads"] * $col["layers"]; nr++
}
function verdict(ok, within) { return ok ? "met" : within ? "MISSED, within the work" : "MISSED, ruled out by the work" }
END {
    if (!nk || !nr) {
        print "bench-bound.sh: no kernel rows or no 1-thread kvc bench rows in the files" > "/dev/stderr"
        exit 2
    }
    print ""
    print "# issue 14 targets (1 thread) against the work of the kernels (bound: bench_kernels, tests/bench_kernels.c):"
    print "#   %bw against bound, the %floor the key and value kernels reach with work and memory wholly overlapped;"
    print "#   G8/G4 against the work of the G = 8 kernels alone (2 floor / bound a row) over the measured G = 4 step"
    printf "  %-6s %-8s %9s %9s %9s   %s\n", "format", "target", "measured", "wanted", "work", "verdict"
    nf = split("f16 int8 e4m3 q8_0 int4 q4_0 kivi4", f, " ")
    for (i = 1; i <= nf; i++) {
        four = (f[i] == "int4" || f[i] == "q4_0" || f[i] == "kivi4")
        for (j = 1; j <= 2; j++) {
            g = j == 1 ? 4 : 1; want = g == 4 ? (four ? 60 : 75) : (four ? 70 : 80); k = f[i] "|" g
            if (pct[k] == "" || bd[k] == "") continue
            printf "  %-6s %-8s %9.1f %9s %9.1f   %s\n", f[i], "G=" g " %bw", pct[k], ">= " want, bd[k], \
                   verdict(pct[k] + 0 >= want, bd[k] >= want)
        }
        k4 = f[i] "|4"; k8 = f[i] "|8"
        if (ms[k4] != "" && ms[k8] != "" && bd[k8] > 0 && ms[k4] > 0) {
            lo = 2 * fl[k8] / (bd[k8] / 100) * rows[k8] / 1e6 / ms[k4]   # ns a row x rows -> ms, over G = 4 ms
            printf "  %-6s %-8s %9.2f %9s %9.2f   %s\n", f[i], "G8/G4", ms[k8] / ms[k4], "<= 1.3", lo, \
                   verdict(ms[k8] / ms[k4] <= 1.3, lo <= 1.3)
        }
    }
}' "$1" "$2"
