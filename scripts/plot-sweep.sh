#!/bin/sh
# plot-sweep.sh: error against one method parameter (bits, budget, rank, window, ...) of a kvc sweep, as a
# PNG drawn with gnuplot (Debian gnuplot-nox). One line per method and setting of its other parameters,
# e.g. "quantize axis=token apply_to=kv" over bits 2..8; error on a log scale.
#
#   scripts/plot-sweep.sh RESULTS.jsonl OUT.png PARAM [options]
#
#   --y COLUMN          error column: attn_error (default), k_error, v_error, k_error_ordinary
#   --size WxH          image size in pixels (default 1200x800)
#   --title TEXT        title (default: the column, the parameter and the file name)
#
# The input is JSON lines (kvc run --format jsonl, or --out FILE.jsonl): only they carry the parameters
# ("params"); a CSV has labels only. Rows without PARAM (other methods) are left out; rows whose error is
# empty, zero or not finite are counted on stderr and left out. What it shares with plot-pareto.sh (--size,
# quoting, running gnuplot) is in scripts/plotlib.py.
exec /usr/bin/env KVC_SCRIPTS="$(dirname -- "$0")" python3 - "$@" <<'PY'
import json, math, os, sys
sys.path.insert(0, os.environ["KVC_SCRIPTS"])
import plotlib
from plotlib import quote as q

def die(msg):
    sys.stderr.write("plot-sweep: %s\n" % msg)
    sys.exit(2)

args = sys.argv[1:]
opts = {"y": "attn_error", "size": "1200x800", "title": None}
pos = []
i = 0
while i < len(args):
    a = args[i]
    if a in ("--y", "--size", "--title"):
        if i + 1 >= len(args):
            die("missing value after " + a)
        opts[a[2:]] = args[i + 1]
        i += 2
        continue
    if a in ("-h", "--help"):
        sys.stderr.write("usage: scripts/plot-sweep.sh RESULTS.jsonl OUT.png PARAM [--y COLUMN] [--size WxH] "
                         "[--title TEXT]\n")
        sys.exit(2)
    if a.startswith("-"):
        die("unknown option " + a)
    pos.append(a)
    i += 1
if len(pos) != 3:
    die("need RESULTS.jsonl, OUT.png and PARAM (e.g. bits); see --help")
src, out, param = pos
w, h = plotlib.parse_size(opts["size"], die)
try:
    with open(src) as f:
        lines = f.read().splitlines()
except OSError as e:
    die("cannot read %s: %s" % (src, e.strerror))
rows = []
for n, line in enumerate(lines, 1):
    if not line.strip():
        continue
    try:
        r = json.loads(line)
    except ValueError:
        die("%s:%d: not JSON; plot-sweep reads JSON lines (kvc run --format jsonl), a CSV has no parameters" % (src, n))
    if not isinstance(r, dict) or "params" not in r:
        die("%s:%d: no \"params\"; plot-sweep reads kvc's JSON lines" % (src, n))
    rows.append(r)

series, skipped, used = {}, 0, 0
for r in rows:
    p = r["params"]
    if param not in p:
        continue
    x = p[param]
    if not isinstance(x, (int, float)):
        die("parameter %s is not a number (got %r); plot a numeric one such as bits, budget, rank" % (param, x))
    y = r.get(opts["y"])
    if not isinstance(y, (int, float)) or not math.isfinite(y) or y <= 0:
        skipped += 1
        continue
    key = r["method"] + "".join(" %s=%s" % (k, v) for k, v in p.items() if k != param)
    series.setdefault(key, []).append((x, y))
    used += 1
if skipped:
    sys.stderr.write("plot-sweep: left out %d rows with no positive finite %s\n" % (skipped, opts["y"]))
if not used:
    die("no row of %s has parameter %s and a positive %s" % (src, param, opts["y"]))

palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
with plotlib.scratch() as tmp:
    data = os.path.join(tmp, "data")
    with open(data, "w") as f:
        for pts in series.values():
            for x, y in sorted(pts):
                f.write("%r %r\n" % (x, y))
            f.write("\n\n")
    xs = sorted({x for pts in series.values() for x, _ in pts})
    part = out + ".part"
    title = opts["title"] or "%s vs %s: %s" % (opts["y"], param, os.path.basename(src))
    g = plotlib.head(w, h, part, title, param, opts["y"]) + [
        "set grid xtics ytics mytics lc rgb '#dddddd'",
        "set key inside right top box opaque",
        "set offsets graph 0.03, graph 0.03, 0, 0"]
    if len(xs) <= 16 and all(float(x).is_integer() for x in xs):
        g.append("set xtics (%s)" % ", ".join("%s %r" % (q(int(x)), x) for x in xs))
    plots = ["%s index %d using 1:2 with linespoints lw 2 pt 7 ps 1.3 lc rgb '%s' title %s"
             % (q(data), k, palette[k % len(palette)], q(name)) for k, name in enumerate(series)]
    g.append("plot " + ", \\\n     ".join(plots))
    plotlib.run_gnuplot(tmp, g, part, out, die)
PY
