#!/bin/sh
# plot-sweep.sh: error against one method parameter (bits, budget, rank, window, ...) of a kvc sweep, as a
# PNG drawn with gnuplot (Debian gnuplot-nox). One line per method and setting of its other parameters; the
# legend names only the parameters that vary among that method's rows (e.g. "quantize axis=channel", not
# every default), values written as in a config (false, not False). Lines take their family's hue (as in
# plot-pareto.sh), a marker per method and a shade and dash pattern per line; the oracle (topk_attention)
# is a dashed grey bound. Error on a log scale, clipped to the data, at least four tick labels per axis.
#
#   scripts/plot-sweep.sh RESULTS.jsonl OUT.png PARAM [options]
#
#   PARAM               a numeric parameter; a pipeline's step parameters are steps.N.NAME (steps.1.bits)
#   --y COLUMN          error column: attn_error (default), k_error, v_error, k_error_ordinary
#   --logx              logarithmic x axis (budgets, ranks)
#   --size WxH          image size in pixels (default 1200x800)
#   --title TEXT        title (default: the column, the parameter and the file name)
#   --no-oracle         leave the oracle's rows out
#   --dump-script FILE  also write the gnuplot script (data inline; `gnuplot FILE` redraws OUT.png.part)
#
# The input is JSON lines (kvc run --format jsonl, or --out FILE.jsonl): only they carry the parameters
# ("params"); a CSV has labels only. Rows without PARAM (other methods) are left out; rows whose error is
# empty, zero or not finite are counted on stderr and left out. What it shares with plot-pareto.sh is in
# scripts/plotlib.py.
exec /usr/bin/env KVC_SCRIPTS="$(dirname -- "$0")" python3 - "$@" <<'PY'
import math, os, sys
sys.path.insert(0, os.environ["KVC_SCRIPTS"])
import plotlib
from plotlib import quote as q

def die(msg):
    sys.stderr.write("plot-sweep: %s\n" % msg)
    sys.exit(2)

USAGE = ("usage: scripts/plot-sweep.sh RESULTS.jsonl OUT.png PARAM [--y COLUMN] [--logx] [--size WxH] "
         "[--title TEXT] [--no-oracle] [--dump-script FILE]\n")
args = sys.argv[1:]
opts = {"y": "attn_error", "size": "1200x800", "title": None, "logx": False, "oracle": True, "dump-script": None}
pos = plotlib.parse_args(args, opts, ("--y", "--size", "--title", "--dump-script"),
                         {"--logx": ("logx", True), "--no-oracle": ("oracle", False)}, USAGE, die)
if len(pos) != 3:
    die("need RESULTS.jsonl, OUT.png and PARAM (e.g. bits); see --help")
src, out, param = pos
w, h = plotlib.parse_size(opts["size"], die)
try:
    with open(src) as f:
        first = f.read(1 << 16).lstrip()
except OSError as e:
    die("cannot read %s: %s" % (src, e.strerror))
if first and not first.startswith("{"):
    die("%s: not JSON lines; plot-sweep reads kvc run --format jsonl (a CSV has no parameters)" % src)
rows = plotlib.read_rows(src, die)
for n, r in enumerate(rows, 1):
    if "params" not in r or "method" not in r:
        die("%s: row %d has no \"params\"; plot-sweep reads kvc's JSON lines" % (src, n))

# the rows that have PARAM (a pipeline's step parameters are steps.N.NAME), grouped by method
used, skipped, hidden = [], 0, 0
for r in rows:
    p = plotlib.flat_params(r["params"])
    if param not in p:
        continue
    x = p[param]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        die("parameter %s is not a number (got %s); plot a numeric one such as bits, budget, rank"
            % (param, plotlib.value_text(x)))
    y = plotlib.number(r.get(opts["y"]))
    if y is None or y <= 0 or (opts["logx"] and x <= 0):
        skipped += 1
        continue
    method = str(r["method"])
    if plotlib.family_of(method) == plotlib.ORACLE and not opts["oracle"]:
        hidden += 1
        continue
    used.append((method, p, float(x), y))
if skipped:
    sys.stderr.write("plot-sweep: left out %d rows with no positive finite %s%s\n"
                     % (skipped, opts["y"], " or a non-positive %s (--logx)" % param if opts["logx"] else ""))
if hidden:
    sys.stderr.write("plot-sweep: left out %d oracle rows (--no-oracle)\n" % hidden)
if not used:
    die("no row of %s has parameter %s and a positive %s" % (src, param, opts["y"]))

# one series per method and setting of the parameters that vary among that method's rows (PARAM aside);
# the legend names only those
series, names, methods_of = {}, {}, {}
for m in plotlib.ordered({u[0] for u in used}):
    mine = [u for u in used if u[0] == m]
    keys = plotlib.varying([u[1] for u in mine], skip=(param,))
    for _, p, x, y in mine:
        key = (m,) + tuple(plotlib.value_text(p.get(k)) for k in keys)
        series.setdefault(key, []).append((x, y))
        names[key] = plotlib.describe(m, p, keys)
        methods_of[key] = m
style = plotlib.Styler([(methods_of[k], k) for k in series])

xs = sorted({x for pts in series.values() for x, _ in pts})
xaxis = plotlib.Axis("plain", opts["logx"], xs)
if len(xs) <= 16 and all(x.is_integer() for x in xs):   # the swept values themselves, when few
    xaxis.ticks, xaxis.labels = xs, ["%d" % x for x in xs]
yaxis = plotlib.Axis("plain", True, [y for pts in series.values() for _, y in pts])

part = out + ".part"
title = opts["title"] or "%s vs %s: %s" % (opts["y"], param, os.path.basename(src))
g = plotlib.head(w, h, part, title, param + (" (log scale)" if opts["logx"] else ""), opts["y"])
g += xaxis.commands("x") + yaxis.commands("y")
g.append("set key outside right top box opaque reverse Left samplen 3 spacing 1.1")
for k, key in enumerate(series):
    g += plotlib.datablock("s%d" % k, sorted(series[key]))
plots, fam = [], None
for k, key in enumerate(series):
    s = style[key]
    if s["family"] == plotlib.ORACLE:
        plots.append("$s%d using 1:2 with linespoints dt 2 lw 2 pt 6 ps 1.2 lc rgb '%s' title %s"
                     % (k, s["colour"], q(names[key] + " (oracle bound)")))
        continue
    if s["family"] != fam:
        fam = s["family"]
        plots.append("keyentry with boxes fs solid 1.0 noborder fc rgb '%s' title %s"
                     % (plotlib.family_colour(fam), q(fam)))
    plots.append("$s%d using 1:2 with linespoints dt %d lw 2 pt %d ps 1.3 lc rgb '%s' title %s"
                 % (k, s["dash"], s["marker"], s["colour"], q("  " + names[key])))
g.append("plot " + ", \\\n     ".join(plots))
plotlib.run_gnuplot(g, part, out, die, opts["dump-script"])
PY
