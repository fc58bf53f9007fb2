#!/bin/sh
# plot-pareto.sh: the accuracy/size trade-off of a kvc sweep as a PNG, drawn with gnuplot (Debian
# gnuplot-nox). Error (log scale) against bytes or compression ratio, one colour per method family,
# the Pareto front as a black staircase with its points labelled.
#
#   scripts/plot-pareto.sh RESULTS.csv|RESULTS.jsonl OUT.png [options]
#
#   --x bytes|ratio     x axis: bytes stored (default; smaller is better) or baseline_bytes/bytes (larger)
#   --y COLUMN          error column: attn_error (default), k_error, v_error, k_error_ordinary
#   --logx              logarithmic x axis
#   --size WxH          image size in pixels (default 1200x800)
#   --title TEXT        title (default: the column names and the file name)
#   --no-labels         do not label the points of the front
#
# Rows whose error is empty, zero or not finite cannot sit on a log axis; they are counted on stderr and
# left out. The input is read with Python's csv/json modules (labels may hold commas and quotes).
# What it shares with plot-sweep.sh (--size, quoting, running gnuplot) is in scripts/plotlib.py.
exec /usr/bin/env KVC_SCRIPTS="$(dirname -- "$0")" python3 - "$@" <<'PY'
import csv, json, math, os, sys
sys.path.insert(0, os.environ["KVC_SCRIPTS"])
import plotlib
from plotlib import quote as q

def die(msg):
    sys.stderr.write("plot-pareto: %s\n" % msg)
    sys.exit(2)

args = sys.argv[1:]
opts = {"x": "bytes", "y": "attn_error", "size": "1200x800", "title": None, "logx": False, "labels": True}
pos = []
i = 0
while i < len(args):
    a = args[i]
    if a in ("--x", "--y", "--size", "--title"):
        if i + 1 >= len(args):
            die("missing value after " + a)
        opts[a[2:]] = args[i + 1]
        i += 2
        continue
    if a == "--logx":
        opts["logx"] = True
    elif a == "--no-labels":
        opts["labels"] = False
    elif a in ("-h", "--help"):
        sys.stderr.write("usage: scripts/plot-pareto.sh RESULTS.csv|RESULTS.jsonl OUT.png [--x bytes|ratio] "
                         "[--y COLUMN] [--logx] [--size WxH] [--title TEXT] [--no-labels]\n")
        sys.exit(2)
    elif a.startswith("-"):
        die("unknown option " + a)
    else:
        pos.append(a)
    i += 1
if len(pos) != 2:
    die("need RESULTS.csv (or .jsonl) and OUT.png; see --help")
src, out = pos
if opts["x"] not in ("bytes", "ratio"):
    die("--x must be bytes or ratio (got %s)" % opts["x"])
w, h = plotlib.parse_size(opts["size"], die)

def read_rows(path):
    try:
        with open(path, newline="") as f:
            text = f.read()
    except OSError as e:
        die("cannot read %s: %s" % (path, e.strerror))
    if path.endswith((".jsonl", ".ndjson")) or text.lstrip().startswith("{"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    die("%s:%d: not JSON" % (path, n))
        return rows
    return list(csv.DictReader(text.splitlines(keepends=True)))

def number(v):
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None

rows = read_rows(src)
if not rows:
    die("%s holds no rows" % src)
for col in ("label", "method", opts["y"], opts["x"]):
    if col not in rows[0]:
        die("%s has no column %s" % (src, col))

points, skipped = [], 0
for r in rows:
    x, y = number(r[opts["x"]]), number(r[opts["y"]])
    if x is None or y is None or y <= 0 or x <= 0:
        skipped += 1
        continue
    points.append((r["method"], x, y, r["label"]))
if skipped:
    sys.stderr.write("plot-pareto: left out %d of %d rows with no positive finite %s\n" % (skipped, len(rows), opts["y"]))
if not points:
    die("no row of %s has a positive finite %s to plot" % (src, opts["y"]))

# Pareto front: no other point has both a smaller error and a better x (fewer bytes, or a higher ratio)
bigger_better = opts["x"] == "ratio"
order = sorted(points, key=lambda p: (-p[1] if bigger_better else p[1], p[2]))
front, best = [], math.inf
for p in order:
    if p[2] < best:
        front.append(p)
        best = p[2]
front.sort(key=lambda p: p[1])

# one colour per method family, fixed for the families of today, then a cycle
palette = {"quantize": "#1f77b4", "sink_window": "#ff7f0e", "topk_attention": "#2ca02c", "lowrank": "#d62728"}
spare = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
methods = []
for p in points:
    if p[0] not in methods:
        methods.append(p[0])
colour = {}
for m in methods:
    colour[m] = palette.get(m) or spare[len([c for c in colour if c not in palette]) % len(spare)]

def place_labels(front, w, h):
    """`set label` commands for the front's points: each label takes the first of a few positions around
    its point that overlaps no label placed before, no point and no step of the front, and sits nearer to
    its own point than to any other (positions estimated in pixels)."""
    xs = [p[1] for p in points]
    ys = [math.log10(p[2]) for p in points]
    tx = (lambda v: math.log10(v)) if opts["logx"] else (lambda v: v)
    x0, x1 = tx(min(xs)), tx(max(xs))
    pad = (x1 - x0) or 1.0
    x0, x1 = x0 - 0.02 * pad, x1 + 0.14 * pad
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    if y1 <= y0:
        y1 = y0 + 1
    pw, ph = w - 330.0, h - 130.0   # the plot area, roughly: margins, title and the key outside
    px = lambda p: ((tx(p[1]) - x0) / (x1 - x0) * pw, (math.log10(p[2]) - y0) / (y1 - y0) * ph)
    cw, chh = 8.0, 16.0             # one character of the 12 pt font, the unit of `offset`
    lw, lh = 5.6, 12.0              # width of one character and height of a 9 pt label
    fpx = [px(p) for p in front]
    boxes = [(x - 9, y - 9, x + 9, y + 9) for x, y in fpx]
    boxes += [(x - 5, y - 5, x + 5, y + 5) for x, y in map(px, points)]
    for (ax, ay), (bx, by) in zip(fpx, fpx[1:]):   # the staircase: steps (bytes) or fsteps (ratio)
        cx, cy = (bx, ay) if not bigger_better else (ax, by)
        for (u, v), (u2, v2) in (((ax, ay), (cx, cy)), ((cx, cy), (bx, by))):
            boxes.append((min(u, u2) - 2, min(v, v2) - 2, max(u, u2) + 2, max(v, v2) + 2))
    out = []
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
            if box[2] > pw + 60 or box[0] < -10:
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
        out.append("set label %d %s at %r, %r %s offset %g,%g font ',9' front"
                   % (k + 1, q(text), p[1], p[2], "left" if dx > 0 else "right", dx, dy))
    return out

with plotlib.scratch() as tmp:
    data = os.path.join(tmp, "data")
    with open(data, "w") as f:
        for m in methods:
            for p in points:
                if p[0] == m:
                    f.write("%r %r\n" % (p[1], p[2]))
            f.write("\n\n")
        for p in front:
            f.write("%r %r\n" % (p[1], p[2]))
    xlabel = ("bytes stored (whole cache, codes + scales + bases + indices)" if opts["x"] == "bytes"
              else "compression ratio (FP16 bytes / bytes stored)")
    title = opts["title"] or "%s vs %s: %s" % (opts["y"], opts["x"], os.path.basename(src))
    part = out + ".part"
    g = plotlib.head(w, h, part, title, xlabel, opts["y"])
    if opts["logx"]:
        g.append("set logscale x")
    g.append("set grid xtics ytics mytics lc rgb '#dddddd'")
    g.append("set key outside right top box opaque")
    g.append("set offsets graph 0.02, graph 0.14, 0, 0")
    plots = []
    for k, m in enumerate(methods):
        plots.append("%s index %d using 1:2 with points pt 7 ps 1.4 lc rgb '%s' title %s" % (q(data), k, colour[m], q(m)))
    plots.append("%s index %d using 1:2 with %s lw 2 dt 2 lc rgb 'black' title 'Pareto front'"
                 % (q(data), len(methods), "fsteps" if bigger_better else "steps"))
    plots.append("%s index %d using 1:2 with points pt 6 ps 2.2 lw 1.5 lc rgb 'black' notitle" % (q(data), len(methods)))
    if opts["labels"]:
        g.extend(place_labels(front, w, h))
    g.append("plot " + ", \\\n     ".join(plots))
    plotlib.run_gnuplot(tmp, g, part, out, die)
PY
