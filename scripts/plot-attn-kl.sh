#!/bin/sh
# plot-attn-kl.sh: does the lesson's metric predict what the model suffers? One point per row of a kvc run on
# a model (data.source "model", e.g. configs/model-lm.json): the attention error of the compressed cache
# against the KL divergence of the model's next-token distribution (lm_kl), both on log axes, drawn with
# gnuplot (Debian gnuplot-nox). Colour is the method family, marker the method (as in plot-pareto.sh), and
# short labels (the part of a row's label that differs from its method's other rows, after the method name)
# sit next to the points where they fit without overlapping: first each family's extremes, then the rest;
# the others are left unlabelled (counted on stderr).
#
#   scripts/plot-attn-kl.sh RESULTS.csv|RESULTS.jsonl OUT.png [options]
#
#   --x COLUMN          x axis (default attn_error)
#   --y COLUMN          y axis (default lm_kl; lm_nll is another choice)
#   --size WxH          image size in pixels (default 1200x800)
#   --title TEXT        title (default: the column names and the file name)
#   --no-labels         no labels next to the points
#   --dump-script FILE  also write the gnuplot script (data inline; `gnuplot FILE` redraws OUT.png.part)
#   --stats FILE        also write the rank correlations (below) to FILE, plain text
#
# Spearman's rank correlation of x and y (Pearson's correlation of the ranks; tied values share their average
# rank) over all plotted rows, and within each family of at least 3 plotted rows, is printed on stderr (one
# line each: "GROUP: rho=R n=N", R with 17 significant digits, "undefined" when x or y is constant) and
# shown in the legend: the overall value on its first line, a family's after its name. Rows whose x or y is
# empty, zero, negative or not finite cannot sit on a log axis (the uncompressed cache's lm_kl is 0): they
# are counted on stderr and left out of the plot and of the correlations. What it shares with plot-pareto.sh
# (families and styles, reading results, axes, running gnuplot) is in scripts/plotlib.py. Errors: one line
# "plot-attn-kl: ..." on stderr and exit status 2.
exec /usr/bin/env KVC_SCRIPTS="$(dirname -- "$0")" python3 - "$@" <<'PY'
import math, os, sys
sys.path.insert(0, os.environ["KVC_SCRIPTS"])
import plotlib
from plotlib import quote as q

def die(msg):
    sys.stderr.write("plot-attn-kl: %s\n" % msg)
    sys.exit(2)

def note(msg):
    sys.stderr.write("plot-attn-kl: %s\n" % msg)

USAGE = ("usage: scripts/plot-attn-kl.sh RESULTS.csv|RESULTS.jsonl OUT.png [--x COLUMN] [--y COLUMN] "
         "[--size WxH] [--title TEXT] [--no-labels] [--dump-script FILE] [--stats FILE]\n")
args = sys.argv[1:]
opts = {"x": "attn_error", "y": "lm_kl", "size": "1200x800", "title": None, "labels": True,
        "dump-script": None, "stats": None}
pos = plotlib.parse_args(args, opts, ("--x", "--y", "--size", "--title", "--dump-script", "--stats"),
                         {"--no-labels": ("labels", False)}, USAGE, die)
if len(pos) != 2:
    die("need RESULTS.csv (or .jsonl) and OUT.png; see --help")
src, out = pos
xcol, ycol = opts["x"], opts["y"]
w, h = plotlib.parse_size(opts["size"], die)

rows = plotlib.read_rows(src, die)
if not rows:
    die("%s holds no rows" % src)
for col in ("method", xcol, ycol):
    if col not in rows[0]:
        die("%s has no column %s" % (src, col))


def short_labels(rows):
    """A short label per row: the words of its label that differ from its method's other rows, after the
    method's name ("window, keep 0.125" -> "window 0.125"); the whole label when nothing is shared or the
    method has one row; the method's name when there is no label column."""
    words, res = {}, []
    for r in rows:
        words.setdefault(str(r["method"]), []).append(str(r.get("label") or "").split())
    for r in rows:
        m, ws = str(r["method"]), str(r.get("label") or "").split()
        same = words[m]
        if not ws:
            res.append(m)
            continue
        if len(same) < 2:
            res.append(" ".join(ws))
            continue
        a = 0
        while all(len(s) > a and s[a] == ws[a] for s in same):
            a += 1
        b = 0
        while all(len(s) > a + b and s[len(s) - 1 - b] == ws[len(ws) - 1 - b] for s in same):
            b += 1
        rest = ws[a:len(ws) - b]
        res.append(" ".join([m] + rest).rstrip(",") if (a or b) and rest else " ".join(ws))
    return res


# points: (method, x, y, short label); rows that cannot sit on log axes counted and left out
points, skipped = [], []
for r, label in zip(rows, short_labels(rows)):
    x, y = plotlib.number(r[xcol]), plotlib.number(r[ycol])
    if x is None or y is None or x <= 0 or y <= 0:
        skipped.append(str(r["method"]))
        continue
    points.append((str(r["method"]), x, y, label))
if not points:
    die("no row of %s has a positive finite %s and %s to plot (%d rows)" % (src, xcol, ycol, len(rows)))


def ranks(v):
    """1-based ranks of v; tied values share the average of the ranks they span."""
    order = sorted(range(len(v)), key=lambda k: v[k])
    r = [0.0] * len(v)
    a = 0
    while a < len(order):
        b = a
        while b + 1 < len(order) and v[order[b + 1]] == v[order[a]]:
            b += 1
        for k in order[a:b + 1]:
            r[k] = (a + b) / 2.0 + 1.0
        a = b + 1
    return r


def spearman(xs, ys):
    """Spearman's rho: Pearson's correlation of the ranks; None when fewer than 2 values or a constant."""
    n = len(xs)
    if n < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


# the points of each family (indices into points), in the order of plotlib's FAMILIES
fam_order = [name for name, _, _ in plotlib.FAMILIES] + [plotlib.OTHER[0]]
by_family = {}
for k, p in enumerate(points):
    by_family.setdefault(plotlib.family_of(p[0]), []).append(k)
by_family = dict(sorted(by_family.items(), key=lambda f: fam_order.index(f[0])))
groups = [("all", points)] + [(fam, [points[k] for k in idx]) for fam, idx in by_family.items() if len(idx) >= 3]
rho = {}
lines = ["Spearman rank correlation of %s and %s (ties: average ranks), plotted rows of %s"
         % (xcol, ycol, src)]
for name, members in groups:
    r = spearman([p[1] for p in members], [p[2] for p in members])
    rho[name] = (r, len(members))
    lines.append("%s: rho=%s n=%d" % (name, "undefined" if r is None else "%.17g" % r, len(members)))
if opts["stats"]:
    try:
        with open(opts["stats"], "w") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as e:
        die("cannot write %s: %s" % (opts["stats"], e.strerror))
if skipped:
    note("left out %d of %d rows whose %s or %s is empty, zero, negative or not finite (%s)"
         % (len(skipped), len(rows), xcol, ycol, ", ".join(plotlib.ordered(set(skipped)))))
for line in lines:
    note(line)


def rho_text(name):
    r, n = rho[name]
    return "rho %s, n %d" % ("undefined" if r is None else "%.3f" % r, n)


methods = plotlib.ordered({p[0] for p in points})
style = plotlib.Styler([(m, m) for m in methods])
xaxis = plotlib.Axis("plain", True, [p[1] for p in points])
yaxis = plotlib.Axis("plain", True, [p[2] for p in points])

# the legend: the overall correlation, then each family (with its correlation) over its methods
overall = "Spearman %s" % rho_text("all")
key_titles = [overall]
for m in methods:
    fam = style[m]["family"]
    head = fam + ("  (%s)" % rho_text(fam) if fam in rho else "")
    if head not in key_titles:
        key_titles.append(head)
    key_titles.append("  " + m)


# the key's font: 12 pt (a line about 20.5 px high), smaller when its lines would not fit the height
key_font = max(6, min(12, int((h - 120) / (len(key_titles) * 20.5 / 12))))


def place_labels(w, h):
    """`set label` commands: each label takes the first of a few positions around its point that overlaps no
    point and no label placed before and stays inside the plot (estimated in pixels); a label with no such
    position is left out. Each family's points with the smallest and largest x and y come first, then the
    others, the most isolated first."""
    # the plot area, roughly: the y tick labels and label, the key outside on the right (about 8.2 px a
    # character of its longest entry, plus the sample and margins), the title and the x labels
    pw, ph = w - 215.0 - 8.2 * key_font / 12 * max(len(t) for t in key_titles), h - 135.0
    px = [(xaxis.fraction(p[1]) * pw, yaxis.fraction(p[2]) * ph) for p in points]
    cw, chh = 8.0, 16.0             # one character of the 12 pt font, the unit of `offset`
    lw, lh = 6.2, 12.0              # width of one character and height of a 9 pt label
    boxes = [(x - 7, y - 7, x + 7, y + 7) for x, y in px]
    first = []
    for idx in by_family.values():
        for key in (lambda k: px[k][0], lambda k: px[k][1]):
            for k in (min(idx, key=key), max(idx, key=key)):
                if k not in first:
                    first.append(k)

    def isolation(k):
        return min([math.hypot(px[k][0] - u, px[k][1] - v) for j, (u, v) in enumerate(px) if j != k] or [1e9])
    rest = sorted((k for k in range(len(points)) if k not in first), key=lambda k: -isolation(k))
    cands = [(1.0, 0), (-1.0, 0), (0.8, 0.8), (0.8, -0.8), (-0.8, 0.8), (-0.8, -0.8), (0, 1.1), (0, -1.1)]
    res, dropped = [], 0
    for k in first + rest:
        x, y = px[k]
        text = points[k][3]
        tw = lw * len(text)
        for dx, dy in cands:
            if dx > 0:
                bx = x + dx * cw
            elif dx < 0:
                bx = x + dx * cw - tw
            else:
                bx = x - tw / 2
            by = y + dy * chh - lh / 2
            box = (bx, by, bx + tw, by + lh)
            if box[0] < 4 or box[2] > pw - 12 or box[1] < 2 or box[3] > ph - 2:
                continue
            if any(min(box[2], b[2]) > max(box[0], b[0]) and min(box[3], b[3]) > max(box[1], b[1]) for b in boxes):
                continue
            boxes.append(box)
            just = "left" if dx > 0 else "right" if dx < 0 else "center"
            res.append("set label %d %s at %r, %r %s offset %g,%g font ',9' tc rgb '%s' front"
                       % (len(res) + 1, q(text), points[k][1], points[k][2], just, dx, dy,
                          plotlib.shade(style[points[k][0]]["colour"], -0.35)))
            break
        else:
            dropped += 1
    if dropped:
        note("labelled %d of %d points; %d labels would overlap others (--size WxH makes room)"
             % (len(res), len(points), dropped))
    return res


title = opts["title"] or "%s against %s: %s" % (ycol, xcol, os.path.basename(src))
part = out + ".part"
g = plotlib.head(w, h, part, title, "%s (log scale)" % xcol, ycol)
g += xaxis.commands("x") + yaxis.commands("y")
g.append("set key outside right top box opaque reverse Left samplen 2 spacing 1.1 font ',%d' maxrows %d" % (key_font, len(key_titles)))
if opts["labels"]:
    g.extend(place_labels(w, h))
for k, m in enumerate(methods):
    g += plotlib.datablock("m%d" % k, [(p[1], p[2]) for p in points if p[0] == m])
plots, fam = ["keyentry with lines lt nodraw title %s" % q(overall)], None
for k, m in enumerate(methods):
    s = style[m]
    if s["family"] != fam:
        fam = s["family"]
        plots.append("keyentry with boxes fs solid 1.0 noborder fc rgb '%s' title %s"
                     % (plotlib.family_colour(fam), q(fam + ("  (%s)" % rho_text(fam) if fam in rho else ""))))
    plots.append("$m%d using 1:2 with points pt %d ps 1.5 lc rgb '%s' title %s"
                 % (k, s["marker"], s["colour"], q("  " + m)))
g.append("plot " + ", \\\n     ".join(plots))
plotlib.run_gnuplot(g, part, out, die, opts["dump-script"])
PY
