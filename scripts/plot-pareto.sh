#!/bin/sh
# plot-pareto.sh: the accuracy/size trade-off of a kvc sweep as a PNG, drawn with gnuplot (Debian
# gnuplot-nox): error (log scale) against bytes or compression ratio, to answer "which family wins at this
# ratio". Each method family (quantization, eviction, low rank, sharing, composition) has its own hue, each
# method its own marker and shade of that hue, and the legend groups methods under their family. The Pareto
# front of the real methods is a black staircase with its points labelled; the oracle (topk_attention, which
# sees the evaluation queries) is a dashed grey line, a bound and not part of the front. Dotted vertical lines
# mark the FP16 baseline and 2x/4x/8x compression (from the rows' baseline_bytes; 16x, 32x, ... too on a log
# axis). Bytes read in B/KiB/MiB/GiB; both axes are clipped to the data (and the FP16 baseline).
#
#   scripts/plot-pareto.sh RESULTS.csv|RESULTS.jsonl OUT.png [options]
#
#   --x bytes|ratio     x axis: bytes stored (default; smaller is better) or baseline_bytes/bytes (larger)
#   --y COLUMN          error column: attn_error (default), k_error, v_error, k_error_ordinary
#   --logx              logarithmic x axis
#   --size WxH          image size in pixels (default 1200x800)
#   --title TEXT        title (default: the column names and the file name)
#   --no-labels         do not label the points of the front
#   --no-oracle         leave the oracle's rows out
#   --no-guides         no FP16 and 2x/4x/8x lines
#   --dump-script FILE  also write the gnuplot script (data inline; `gnuplot FILE` redraws OUT.png.part)
#
# Rows whose error is empty, zero or not finite cannot sit on a log axis; they are counted on stderr and
# left out. The input is read with Python's csv/json modules (labels may hold commas and quotes). A method
# that scripts/plotlib.py's family table does not know is drawn grey, with a note on stderr. What it shares
# with plot-sweep.sh (families and styles, axes and units, running gnuplot) is in scripts/plotlib.py.
exec /usr/bin/env KVC_SCRIPTS="$(dirname -- "$0")" python3 - "$@" <<'PY'
import math, os, sys
sys.path.insert(0, os.environ["KVC_SCRIPTS"])
import plotlib
from plotlib import quote as q

def die(msg):
    sys.stderr.write("plot-pareto: %s\n" % msg)
    sys.exit(2)

def note(msg):
    sys.stderr.write("plot-pareto: %s\n" % msg)

USAGE = ("usage: scripts/plot-pareto.sh RESULTS.csv|RESULTS.jsonl OUT.png [--x bytes|ratio] [--y COLUMN] "
         "[--logx] [--size WxH] [--title TEXT] [--no-labels] [--no-oracle] [--no-guides] [--dump-script FILE]\n")
args = sys.argv[1:]
opts = {"x": "bytes", "y": "attn_error", "size": "1200x800", "title": None, "logx": False, "labels": True,
        "oracle": True, "guides": True, "dump-script": None}
flags = {"--logx": ("logx", True), "--no-labels": ("labels", False), "--no-oracle": ("oracle", False),
         "--no-guides": ("guides", False)}
pos = plotlib.parse_args(args, opts, ("--x", "--y", "--size", "--title", "--dump-script"), flags, USAGE, die)
if len(pos) != 2:
    die("need RESULTS.csv (or .jsonl) and OUT.png; see --help")
src, out = pos
if opts["x"] not in ("bytes", "ratio"):
    die("--x must be bytes or ratio (got %s)" % opts["x"])
w, h = plotlib.parse_size(opts["size"], die)
x_ratio = opts["x"] == "ratio"

rows = plotlib.read_rows(src, die)
if not rows:
    die("%s holds no rows" % src)
for col in ("label", "method", opts["y"], opts["x"]):
    if col not in rows[0]:
        die("%s has no column %s" % (src, col))

# points: (method, x, y, label); the oracle's rows apart (a bound, not on the front)
points, oracle, skipped, hidden = [], [], 0, 0
for r in rows:
    x, y = plotlib.number(r[opts["x"]]), plotlib.number(r[opts["y"]])
    if x is None or y is None or y <= 0 or x <= 0:
        skipped += 1
        continue
    p = (str(r["method"]), x, y, str(r["label"]))
    if plotlib.family_of(p[0]) == plotlib.ORACLE:
        if opts["oracle"]:
            oracle.append(p)
        else:
            hidden += 1
    else:
        points.append(p)
if skipped:
    note("left out %d of %d rows with no positive finite %s" % (skipped, len(rows), opts["y"]))
if hidden:
    note("left out %d oracle rows (--no-oracle)" % hidden)
if not points and not oracle:
    die("no row of %s has a positive finite %s to plot" % (src, opts["y"]))
baseline = plotlib.baseline_of(rows, note) if opts["guides"] else None

# Pareto front of the real methods: no other point has both a smaller error and a better x (fewer bytes,
# or a higher ratio)
order = sorted(points, key=lambda p: (-p[1] if x_ratio else p[1], p[2]))
front, best = [], math.inf
for p in order:
    if p[2] < best:
        front.append(p)
        best = p[2]
front.sort(key=lambda p: p[1])

# axes: clipped to the data (and the FP16 baseline), room on the right for the labels of the front
allp = points + oracle
if baseline is not None:
    extra = [1.0] if x_ratio else [baseline]
else:
    extra = []
xaxis = plotlib.Axis(opts["x"], opts["logx"], [p[1] for p in allp], extra=extra, zero=not opts["logx"] and not x_ratio,
                     pad_hi=0.12 if opts["labels"] and front else 0.0)
yaxis = plotlib.Axis("plain", True, [p[2] for p in allp])
guides = []
if baseline is not None:
    for r in plotlib.guide_ratios(xaxis, x_ratio):
        gx = float(r) if x_ratio else baseline / r
        if xaxis.lo <= gx <= xaxis.hi:
            guides.append((gx, "FP16" if r == 1 else "%dx" % r))

methods = plotlib.ordered({p[0] for p in points})
style = plotlib.Styler([(m, m) for m in methods])

def place_labels(front, w, h):
    """`set label` commands for the front's points: each label takes the first of a few positions around
    its point that overlaps no label placed before, no point and no step of the front, and sits nearer to
    its own point than to any other (positions estimated in pixels)."""
    # the plot area, roughly: the y tick labels and label (85 px), the key outside on the right (about 8.2 px
    # a character of its longest entry, plus the sample and margins), title, guide labels and x labels
    pw, ph = w - 215.0 - 8.2 * max(len(t) for t in key_titles), h - 135.0
    px = lambda p: (xaxis.fraction(p[1]) * pw, yaxis.fraction(p[2]) * ph)
    cw, chh = 8.0, 16.0             # one character of the 12 pt font, the unit of `offset`
    lw, lh = 6.2, 12.0              # width of one character and height of a 9 pt label
    fpx = [px(p) for p in front]
    boxes = [(x - 9, y - 9, x + 9, y + 9) for x, y in fpx]
    boxes += [(x - 5, y - 5, x + 5, y + 5) for x, y in map(px, allp)]
    for (ax, ay), (bx, by) in zip(fpx, fpx[1:]):   # the staircase: steps (bytes) or fsteps (ratio)
        cx, cy = (bx, ay) if not x_ratio else (ax, by)
        for (u, v), (u2, v2) in (((ax, ay), (cx, cy)), ((cx, cy), (bx, by))):
            boxes.append((min(u, u2) - 2, min(v, v2) - 2, max(u, u2) + 2, max(v, v2) + 2))
    for (ax, ay), (bx, by) in zip(map(px, oracle), list(map(px, oracle))[1:]):   # the oracle's dashed line
        boxes.append((min(ax, bx) - 2, min(ay, by) - 2, max(ax, bx) + 2, max(ay, by) + 2))
    res = []
    cands = [(1.3, 0.7), (1.3, -0.7), (1.3, 0), (-1.3, 0), (-1.3, 0.7), (-1.3, -0.7),
             (1.3, 1.5), (1.3, -1.5), (-1.3, 1.5), (-1.3, -1.5)]
    for k, p in enumerate(front):
        x, y = fpx[k]
        text = p[3].replace("\n", " ")
        tw = lw * len(text)
        best = None
        for dx, dy in cands:
            bx = x + dx * cw if dx > 0 else x + dx * cw - tw
            by = y + dy * chh - lh / 2
            box = (bx, by, bx + tw, by + lh)
            over = sum(max(0, min(box[2], b[2]) - max(box[0], b[0])) * max(0, min(box[3], b[3]) - max(box[1], b[1]))
                       for b in boxes)
            if box[2] > pw - 8 or box[0] < 8 or box[1] < 0 or box[3] > ph:
                over += 1e6          # would leave the plot
            # the end of the label next to its point must be nearer to that point than to any other
            ex, ey = (box[0] if dx > 0 else box[2]), by + lh / 2
            own = math.hypot(ex - x, ey - y)
            if any(math.hypot(ex - u, ey - v) < own for j, (u, v) in enumerate(fpx) if j != k):
                over += 500
            if best is None or over < best[0]:
                best = (over, dx, dy, box)
            if over == 0:
                break
        _, dx, dy, box = best
        boxes.append(box)
        res.append("set label %d %s at %r, %r %s offset %g,%g font ',9' front"
                   % (k + 1, q(text), p[1], p[2], "left" if dx > 0 else "right", dx, dy))
    return res

xlabel = ("bytes stored (whole cache, codes + scales + bases + indices)" if not x_ratio
          else "compression ratio (FP16 bytes / bytes stored)")
title = opts["title"] or "%s vs %s: %s" % (opts["y"], opts["x"], os.path.basename(src))
part = out + ".part"
g = plotlib.head(w, h, part, title, xlabel, opts["y"])
g += xaxis.commands("x") + yaxis.commands("y")
g.append("set key outside right top box opaque reverse Left samplen 2 spacing 1.1")
if guides:
    g.append("set tmargin 4")
for k, (gx, text) in enumerate(guides):
    g.append("set arrow %d from %r, graph 0 to %r, graph 1 nohead back lc rgb '%s' dt 3 lw 1.2"
             % (k + 1, gx, gx, "#707070" if text == "FP16" else "#a0a0a0"))
    g.append("set label %d %s at %r, graph 1 center offset 0,0.7 font ',9' tc rgb '#606060'"
             % (len(front) + k + 1, q(text), gx))
key_titles = ["  " + m for m in methods] + ["Pareto front"] + [
    "oracle bound (%s)" % ", ".join(sorted({p[0] for p in oracle}))] * bool(oracle)
if opts["labels"]:
    g.extend(place_labels(front, w, h))
# the data, one datablock per series
for k, m in enumerate(methods):
    g += plotlib.datablock("m%d" % k, [(p[1], p[2]) for p in points if p[0] == m])
if oracle:
    g += plotlib.datablock("oracle", sorted((p[1], p[2]) for p in oracle))
if front:
    g += plotlib.datablock("front", [(p[1], p[2]) for p in front])
plots, fam = [], None
for k, m in enumerate(methods):
    s = style[m]
    if s["family"] != fam:
        fam = s["family"]
        plots.append("keyentry with boxes fs solid 1.0 noborder fc rgb '%s' title %s"
                     % (plotlib.family_colour(fam), q(fam)))
    plots.append("$m%d using 1:2 with points pt %d ps 1.5 lc rgb '%s' title %s"
                 % (k, s["marker"], s["colour"], q("  " + m)))
if oracle:
    plots.append("$oracle using 1:2 with linespoints dt 2 lw 2 pt 6 ps 1.2 lc rgb '%s' title %s"
                 % (plotlib.family_colour(plotlib.ORACLE), q(key_titles[-1])))
if front:
    plots.append("$front using 1:2 with %s lw 1.5 lc rgb 'black' title \"Pareto front\""
                 % ("fsteps" if x_ratio else "steps"))
    plots.append("$front using 1:2 with points pt 6 ps 2.3 lw 1.5 lc rgb 'black' notitle")
g.append("plot " + ", \\\n     ".join(plots))
plotlib.run_gnuplot(g, part, out, die, opts["dump-script"])
PY
