#!/bin/sh
# test_plot_attn_kl.sh: scripts/plot-attn-kl.sh draws attention error against lm_kl from a real model run
# (./kvc on the shipped models/lm, a small grid written here), and the Spearman rank correlations it prints
# (overall and per family) equal an independent numpy computation from the same rows (ranks counted with
# broadcasting, ties averaged; np.corrcoef) to 1e-12, on the model's rows and on a hand-made CSV with ties, a
# constant family and rows that cannot sit on a log axis. Bad input exits 2 with one line and no picture.
# Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. Run from the project root.
KVC=${KVC:-./kvc}
PY=${PY:-/usr/bin/python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "PASS $1"; }
no() { echo "FAIL $1: $2"; fail=1; }
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "FAIL plot-attn-kl: gnuplot is not installed (scripts/bootstrap.sh --deps installs gnuplot-nox)"
    exit 1
fi
# png NAME FILE W H: a PNG whose IHDR says W x H, not empty
png() {
    sig=$(od -An -tx1 -N8 "$2" 2>/dev/null | tr -d ' \n')
    dims=$(od -An -tu1 -j16 -N8 "$2" 2>/dev/null | awk '{print $1*16777216+$2*65536+$3*256+$4 "x" $5*16777216+$6*65536+$7*256+$8}')
    size=$(wc -c < "$2" 2>/dev/null || echo 0)
    if [ "$sig" = "89504e470d0a1a0a" ] && [ "$dims" = "$3x$4" ] && [ "$size" -gt 0 ]; then ok "$1"
    else no "$1" "wanted a $3x$4 PNG, got signature $sig, size $dims, $size bytes"; fi
}
# rho NAME CSV STATS X Y FAMILIES: the stats file's lines ("GROUP: rho=R n=N") against numpy on the rows
# of CSV whose X and Y are positive and finite; FAMILIES maps method=family (the groups of >= 3 rows)
rho() {
    "$PY" - "$2" "$3" "$4" "$5" "$6" <<'EOF' && ok "$1" || { no "$1" "see above"; }
import csv, math, sys
import numpy as np
src, stats, xcol, ycol, fams = sys.argv[1:]
family = dict(f.split("=") for f in fams.split(","))
def num(v):
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) and x > 0 else None
rows = [(r["method"], num(r[xcol]), num(r[ycol])) for r in csv.DictReader(open(src))]
rows = [r for r in rows if r[1] is not None and r[2] is not None]
def ranks(v):
    v = np.asarray(v)
    return (v[None, :] < v[:, None]).sum(1) + ((v[None, :] == v[:, None]).sum(1) + 1) / 2.0
def spearman(rs):
    rx, ry = ranks([r[1] for r in rs]), ranks([r[2] for r in rs])
    if rx.std() == 0 or ry.std() == 0:
        return None
    return np.corrcoef(rx, ry)[0, 1]
want = {"all": (spearman(rows), len(rows))}
for fam in sorted(set(family.values())):
    rs = [r for r in rows if family[r[0]] == fam]
    if len(rs) >= 3:
        want[fam] = (spearman(rs), len(rs))
got = {}
for line in open(stats).read().splitlines()[1:]:
    name, rest = line.split(": ")
    r, n = rest.split(" ")
    r = r[len("rho="):]
    got[name] = (None if r == "undefined" else float(r), int(n[len("n="):]))
bad = 0
if set(got) != set(want):
    print("groups: got %s, numpy %s" % (sorted(got), sorted(want)))
    bad = 1
for name in want:
    if name not in got:
        continue
    (a, n), (b, m) = got[name], want[name]
    if n != m or (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-12):
        print("%s: got rho %r n %d, numpy rho %r n %d" % (name, a, n, b, m))
        bad = 1
sys.exit(bad)
EOF
}

# a small grid on the shipped byte-level model: 1 + 4 + 2 + 3 + 3 + 3 + 3 rows
cat > "$tmp/model.json" <<EOF
{
  "seed": 7,
  "data": {"source": "model", "model": "$PWD/models/lm", "text": "$PWD/configs/data/lm-heldout.txt",
           "context": 128, "continuation": 15, "observe": {"window": 8}},
  "experiments": [
    {"label": "none", "method": "none"},
    {"label": "INT{bits} per token", "method": "quantize", "bits": [8, 4, 3, 2]},
    {"label": "KIVI-4", "method": "kivi", "k_bits": 4, "v_bits": 4, "residual": 32},
    {"label": "KIVI-2", "method": "kivi", "k_bits": 2, "v_bits": 2, "residual": 32},
    {"label": "window, keep {keep_ratio}", "method": "window", "keep_ratio": [0.5, 0.25, 0.125]},
    {"label": "SnapKV, keep {keep_ratio}", "method": "snapkv", "keep_ratio": [0.5, 0.25, 0.125]},
    {"label": "low-rank K,V, rank {rank}", "method": "lowrank", "rank": [16, 8, 4], "apply_to": "kv"},
    {"label": "top-k attention (oracle), {budget}", "method": "topk_attention", "budget": [64, 32, 16]}
  ]
}
EOF
FAMS=none=reference,quantize=quantization,kivi=quantization,window=eviction,snapkv=eviction,lowrank=lowrank,topk_attention=oracle
FAMS=$(echo "$FAMS" | sed 's/=lowrank/=low rank/')
if "$KVC" run "$tmp/model.json" --no-timing --format csv > "$tmp/m.csv" 2>"$tmp/err" && [ "$(wc -l < "$tmp/m.csv")" -eq 20 ]
then ok plot-attn-kl-model-run
else no plot-attn-kl-model-run "kvc run: $(cat "$tmp/err")"; fi

scripts/plot-attn-kl.sh "$tmp/m.csv" "$tmp/a.png" --stats "$tmp/a.txt" --dump-script "$tmp/a.gp" 2>"$tmp/err"
png plot-attn-kl-png "$tmp/a.png" 1200 800
grep -q "^plot-attn-kl: left out 1 of 19 rows .*(none)$" "$tmp/err" && ok plot-attn-kl-leaves-out-none ||
    no plot-attn-kl-leaves-out-none "$(cat "$tmp/err")"
rho plot-attn-kl-spearman-model "$tmp/m.csv" "$tmp/a.txt" attn_error lm_kl "$FAMS"
# stderr carries the same lines as --stats; the legend's first line carries rho and n
if grep '^plot-attn-kl: ' "$tmp/err" | sed 's/^plot-attn-kl: //' | grep -qxF "$(sed -n 2p "$tmp/a.txt")"; then
    ok plot-attn-kl-stderr-stats
else no plot-attn-kl-stderr-stats "$(cat "$tmp/err")"; fi
key=$("$PY" -c 'import sys; l=open(sys.argv[1]).read().splitlines()[1]; r=l.split("rho=")[1].split()[0]; print("Spearman rho %.3f, n 18" % float(r))' "$tmp/a.txt")
grep -q "^plot keyentry with lines lt nodraw title \"$key\"" "$tmp/a.gp" && ok plot-attn-kl-key-line ||
    no plot-attn-kl-key-line "no key line \"$key\" in the script"
grep -q '^set logscale x' "$tmp/a.gp" && grep -q '^set logscale y' "$tmp/a.gp" && grep -q '^set label ' "$tmp/a.gp" &&
    ok plot-attn-kl-log-axes-labels || no plot-attn-kl-log-axes-labels "no log axes or no labels in the script"
scripts/plot-attn-kl.sh "$tmp/m.csv" "$tmp/b.png" --no-labels --size 800x600 --title 'a "quoted" title' \
    --dump-script "$tmp/b.gp" 2>/dev/null
png plot-attn-kl-size "$tmp/b.png" 800 600
grep -q '^set label ' "$tmp/b.gp" && no plot-attn-kl-no-labels "labels in the script" || ok plot-attn-kl-no-labels
# other columns, the same checks
scripts/plot-attn-kl.sh "$tmp/m.csv" "$tmp/c.png" --x k_error --y lm_nll --stats "$tmp/c.txt" 2>/dev/null
rho plot-attn-kl-spearman-columns "$tmp/m.csv" "$tmp/c.txt" k_error lm_nll "$FAMS"

# ties (average ranks), a family with a constant x (undefined), rows with no positive finite value
cat > "$tmp/t.csv" <<'EOF'
label,method,attn_error,lm_kl
a,quantize,0.1,0.01
b,kivi,0.1,0.02
c,quantize,0.2,0.02
d,window,0.3,0.02
e,snapkv,0.3,0.05
"f, ""quoted""",window,0.4,0.05
g,window,0.5,0.04
h,lowrank,0.2,0.001
i,lowrank,0.2,0.003
j,lowrank,0.2,0.002
k,window,nan,0.1
l,window,0.5,inf
m,window,-0.5,0.1
n,window,,0.1
o,none,0,0
EOF
scripts/plot-attn-kl.sh "$tmp/t.csv" "$tmp/t.png" --stats "$tmp/t.txt" 2>"$tmp/err"
png plot-attn-kl-ties-png "$tmp/t.png" 1200 800
rho plot-attn-kl-spearman-ties "$tmp/t.csv" "$tmp/t.txt" attn_error lm_kl "$FAMS"
grep -q "left out 5 of 15 rows" "$tmp/err" && grep -qx "low rank: rho=undefined n=3" "$tmp/t.txt" &&
    ok plot-attn-kl-left-out-undefined || no plot-attn-kl-left-out-undefined "$(cat "$tmp/err")"
ls "$tmp" | grep -q part && no plot-attn-kl-no-partial-files "$(ls "$tmp")" || ok plot-attn-kl-no-partial-files

# bad input: exit 2, one line "plot-attn-kl: ...", no picture
head -2 "$tmp/m.csv" > "$tmp/none.csv"
: > "$tmp/empty.csv"
while read -r name args; do
    eval "scripts/plot-attn-kl.sh $args" >/dev/null 2>"$tmp/err"; st=$?
    if [ $st -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q '^plot-attn-kl: ' "$tmp/err" && [ ! -e "$tmp/e.png" ]
    then ok "plot-attn-kl-rejects-$name"
    else no "plot-attn-kl-rejects-$name" "exit $st, stderr: $(cat "$tmp/err")"; fi
done <<EOT
missing-file $tmp/missing.csv $tmp/e.png
missing-column $tmp/m.csv $tmp/e.png --y nosuch
missing-x-column $tmp/m.csv $tmp/e.png --x nosuch
no-plottable-rows $tmp/none.csv $tmp/e.png
empty-file $tmp/empty.csv $tmp/e.png
bad-option $tmp/m.csv $tmp/e.png --labels
missing-value $tmp/m.csv $tmp/e.png --stats
bad-size $tmp/m.csv $tmp/e.png --size 12
one-file $tmp/m.csv
stats-unwritable $tmp/m.csv $tmp/e.png --stats $tmp/nodir/s.txt
EOT
exit $fail
