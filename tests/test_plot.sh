#!/bin/sh
# test_plot.sh: scripts/plot-pareto.sh and scripts/plot-sweep.sh draw PNGs of the asked size with gnuplot
# from fixture results (tests/data/sweep/fixture.csv, fixture.jsonl), their --dump-script files redraw the
# picture on their own, and they fail cleanly on bad input. What the pictures hold (families, markers, the
# oracle, units, legends) is checked in tests/test_plot_style.py.
# Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. Run from the project root.
F=tests/data/sweep
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
# png NAME FILE W H: a PNG whose IHDR says W x H
png() {
    sig=$(od -An -tx1 -N8 "$2" 2>/dev/null | tr -d ' \n')
    dims=$(od -An -tu1 -j16 -N8 "$2" 2>/dev/null | awk '{print $1*16777216+$2*65536+$3*256+$4 "x" $5*16777216+$6*65536+$7*256+$8}')
    size=$(wc -c < "$2" 2>/dev/null || echo 0)
    if [ "$sig" = "89504e470d0a1a0a" ] && [ "$dims" = "$3x$4" ] && [ "$size" -gt 10000 ]; then echo "PASS $1"
    else echo "FAIL $1: wanted a $3x$4 PNG, got signature $sig, size $dims, $size bytes"; fail=1; fi
}
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "FAIL plot: gnuplot is not installed (scripts/bootstrap.sh --deps installs gnuplot-nox)"
    exit 1
fi
scripts/plot-pareto.sh $F/fixture.csv "$tmp/a.png" 2>"$tmp/err"; png plot-pareto-default-size "$tmp/a.png" 1200 800
grep -q "left out 2 of 11 rows" "$tmp/err" && echo "PASS plot-pareto-skips-empty-and-zero" ||
    { echo "FAIL plot-pareto-skips-empty-and-zero: $(cat "$tmp/err")"; fail=1; }
scripts/plot-pareto.sh $F/fixture.csv "$tmp/b.png" --x ratio --size 640x480 --logx --title 'a "quoted" title' 2>/dev/null
png plot-pareto-ratio-size "$tmp/b.png" 640 480
scripts/plot-pareto.sh $F/fixture.jsonl "$tmp/c.png" --y k_error --no-labels 2>/dev/null; png plot-pareto-jsonl "$tmp/c.png" 1200 800
scripts/plot-sweep.sh $F/fixture.jsonl "$tmp/d.png" bits --size 800x600 2>/dev/null; png plot-sweep-bits "$tmp/d.png" 800 600
scripts/plot-pareto.sh $F/fixture.csv "$tmp/f.png" --no-oracle --no-guides --logx 2>/dev/null
png plot-pareto-no-oracle-no-guides "$tmp/f.png" 1200 800
scripts/plot-sweep.sh $F/fixture.jsonl "$tmp/g.png" bits --no-oracle --logx --dump-script "$tmp/g.gp" 2>/dev/null
png plot-sweep-logx "$tmp/g.png" 1200 800
# the dumped script draws the same picture without the script or its data file (output: OUT.png.part)
scripts/plot-pareto.sh $F/fixture.csv "$tmp/h.png" --dump-script "$tmp/h.gp" 2>/dev/null
(cd / && gnuplot "$tmp/h.gp") && mv "$tmp/h.png.part" "$tmp/h2.png" 2>/dev/null
if cmp -s "$tmp/h.png" "$tmp/h2.png"; then echo "PASS plot-dump-script-redraws"
else echo "FAIL plot-dump-script-redraws: gnuplot $tmp/h.gp did not redraw h.png"; fail=1; fi
ls "$tmp" | grep -q part && { echo "FAIL plot-no-partial-files: $(ls "$tmp")"; fail=1; } || echo "PASS plot-no-partial-files"
# bad input: exit 2, a message, no picture
while read -r name c; do
    eval "scripts/$c" >/dev/null 2>"$tmp/err"; st=$?
    if [ $st -eq 2 ] && [ -s "$tmp/err" ] && [ ! -e "$tmp/e.png" ]; then echo "PASS plot-rejects-$name"
    else echo "FAIL plot-rejects-$name: exit $st, stderr: $(cat "$tmp/err")"; fail=1; fi
done <<EOT
bad-x plot-pareto.sh $F/fixture.csv $tmp/e.png --x speed
bad-y plot-pareto.sh $F/fixture.csv $tmp/e.png --y nosuch
bad-size plot-pareto.sh $F/fixture.csv $tmp/e.png --size 12
missing-file plot-pareto.sh $tmp/missing.csv $tmp/e.png
sweep-csv plot-sweep.sh $F/fixture.csv $tmp/e.png bits
sweep-enum-param plot-sweep.sh $F/fixture.jsonl $tmp/e.png axis
dump-no-value plot-pareto.sh $F/fixture.csv $tmp/e.png --dump-script
sweep-bad-option plot-sweep.sh $F/fixture.jsonl $tmp/e.png bits --labels
sweep-absent-param plot-sweep.sh $F/fixture.jsonl $tmp/e.png rank
EOT
exit $fail
