"""test_plot_style.py: what the plot scripts draw, read from the gnuplot script they write (--dump-script):
every method of `kvc methods` has a family in scripts/plotlib.py's table (and the one its "shrinks:" line
implies), every series has its own (colour, marker) in its family's hue, the oracle is a dashed bound off the
Pareto front and --no-oracle leaves it out, tick labels are in KiB/MiB/GiB (at least four per axis, ranges
clipped to the data), guide lines mark FP16 and 2x/4x/8x, and legends name only the parameters that vary.
Data: tests/data/sweep/families.json (every method, run here with ./kvc), fixture.csv, and rows made here.
Prints PASS/FAIL lines (tests/checks.py). Run from the project root."""
import colorsys
import csv
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, "scripts")
sys.path.insert(0, "tests")
import plotlib  # noqa: E402
from checks import report, status  # noqa: E402

KVC = os.environ.get("KVC", "./kvc")
F = "tests/data/sweep"
tmp = tempfile.mkdtemp(prefix="kvc-test-plot-")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def parse_script(path):
    """The parts of a dumped gnuplot script the checks need."""
    text = open(path).read()
    blocks = {}
    for m in re.finditer(r"^\$(\w+) << EOD\n(.*?)^EOD$", text, re.M | re.S):
        blocks[m.group(1)] = [tuple(float(v) for v in line.split()) for line in m.group(2).splitlines()]
    tics = {}
    for axis in "xy":
        m = re.search(r"^set %stics \((.*)\)$" % axis, text, re.M)
        tics[axis] = re.findall(r'"((?:[^"\\]|\\.)*)" ([-0-9.e+]+)', m.group(1)) if m else []
        tics[axis] = [(label, float(v)) for label, v in tics[axis]]
    ranges = {a: tuple(float(v) for v in re.search(r"^set %srange \[([^:]+):([^\]]+)\]" % a, text, re.M).groups())
              for a in "xy"}
    plot = text[text.index("\nplot ") + 1:]
    elements = [e.strip() for e in re.split(r", \\\n", plot[len("plot "):].strip())]
    series, headers = [], []
    for e in elements:
        title = re.search(r'title "((?:[^"\\]|\\.)*)"', e)
        colour = re.search(r"(?:lc|fc) rgb '(#[0-9a-f]{6})'", e)
        if e.startswith("keyentry"):
            headers.append((title.group(1), colour.group(1)))
            continue
        if "notitle" in e:
            continue
        series.append({"block": re.match(r"\$(\w+)", e).group(1), "title": title.group(1).strip(),
                       "colour": colour.group(1) if colour else None,
                       "marker": int(re.search(r"\bpt (\d+)", e).group(1)) if re.search(r"\bpt \d+", e) else None,
                       "dash": int(re.search(r"\bdt (\d+)", e).group(1)) if re.search(r"\bdt \d+", e) else 1,
                       "style": re.search(r"with (\w+)", e).group(1)})
    arrows = [float(v) for v in re.findall(r"^set arrow \d+ from ([-0-9.e+]+), graph 0", text, re.M)]
    guide_labels = re.findall(r'^set label \d+ "([^"]*)" at [-0-9.e+]+, graph 1', text, re.M)
    return {"text": text, "blocks": blocks, "tics": tics, "ranges": ranges, "series": series,
            "headers": headers, "arrows": arrows, "guide_labels": guide_labels}


def hue(colour):
    r, g, b = (int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return colorsys.rgb_to_hsv(r, g, b)[0]


def hue_close(a, b):
    d = abs(hue(a) - hue(b))
    return min(d, 1 - d) < 0.03


UNIT = {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}


def bytes_label_ok(label, value):
    """'0' for 0, else '<number> <unit>' that means value."""
    if label == "0":
        return value == 0
    m = re.fullmatch(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)", label)
    return bool(m) and abs(float(m.group(1)) * UNIT[m.group(2)] - value) <= 1e-3 * max(value, 1)


def front_of(points):
    """(bytes, error) points -> the Pareto front (fewer bytes and less error), sorted by bytes."""
    front, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front


# --- 1. the family table knows every method kvc lists, with the family its "shrinks:" line implies
SHRINKS = {"bytes per number": "quantization", "tokens": "eviction", "per-token dimension": "low rank",
           "KV heads": "sharing", "what its steps shrink": "composition", "nothing": "reference"}
r = run([KVC, "methods"])
listed = re.findall(r"^([a-z0-9_]+)(.*)\n\s+shrinks: (.*)$", r.stdout, re.M)
known = {m for _, _, ms in plotlib.FAMILIES for m in ms}
why = None
if r.returncode != 0 or len(listed) < 10:
    why = "`%s methods` listed %d methods (exit %d)" % (KVC, len(listed), r.returncode)
else:
    for name, rest, shrinks in listed:
        want = "oracle" if "[oracle" in rest else SHRINKS.get(shrinks.strip(), "?")
        if name not in known:
            why = ("`kvc methods` lists %s, which scripts/plotlib.py's FAMILIES does not know: add it to its "
                   "family (%s)" % (name, want))
            break
        if plotlib.family_of(name) != want:
            why = "FAMILIES puts %s in %s, but kvc says it shrinks %s (%s)" % (
                name, plotlib.family_of(name), shrinks.strip(), want)
            break
    stale = known - {n for n, _, _ in listed}
    if why is None and stale:
        why = "FAMILIES names methods kvc does not list: %s" % ", ".join(sorted(stale))
report("plot-family-table-matches-kvc-methods", why)

# --- 2. a Pareto plot of every method (tests/data/sweep/families.json)
fam = os.path.join(tmp, "families.jsonl")
with open(fam, "w") as f:
    r = subprocess.run([KVC, "run", F + "/families.json", "--no-timing", "--format", "jsonl", "-q"], stdout=f)
rows = [json.loads(line) for line in open(fam)]
methods_in_data = {row["method"] for row in rows}
# the reference family (none: the cache as it is, zero error) has no point on a log error axis
plotted = {m for f, _, ms in plotlib.FAMILIES if f != "reference" for m in ms}
report("plot-families-fixture-has-every-method",
       None if r.returncode == 0 and methods_in_data >= plotted else
       "exit %d; missing %s" % (r.returncode, sorted(plotted - methods_in_data)))


def pareto(src, *opts, name="p"):
    png, gp = os.path.join(tmp, name + ".png"), os.path.join(tmp, name + ".gp")
    r = run(["scripts/plot-pareto.sh", src, png] + list(opts) + ["--dump-script", gp])
    if r.returncode != 0 or not os.path.exists(gp):
        return None, r.stderr
    return parse_script(gp), r.stderr


p, err = pareto(fam, name="families")
if p is None:
    report("plot-pareto-families-runs", err)
else:
    report("plot-pareto-families-runs", None)
    plain = [s for s in p["series"] if s["style"] == "points"]
    titles = [s["title"] for s in plain]
    report("plot-pareto-one-series-per-method",
           None if sorted(titles) == sorted(plotted - {"topk_attention"}) else "series %s" % titles)
    pairs = [(s["colour"], s["marker"]) for s in plain]
    report("plot-pareto-series-distinct", None if len(set(pairs)) == len(pairs) and len(pairs) >= 14 else
           "(colour, marker) pairs %s" % pairs)
    wrong = [(s["title"], s["colour"]) for s in plain
             if not hue_close(s["colour"], plotlib.family_colour(plotlib.family_of(s["title"])))]
    report("plot-pareto-colour-is-family-hue", None if not wrong else "off their family's hue: %s" % wrong)
    want_headers = [(n, c) for n, c, ms in plotlib.FAMILIES if n not in ("oracle", "reference")]
    report("plot-pareto-legend-groups-by-family",
           None if p["headers"] == want_headers else "family entries %s, wanted %s" % (p["headers"], want_headers))
    # within one family the markers differ (colours may be shades only)
    clash = [(a["title"], b["title"]) for a in plain for b in plain if a["title"] < b["title"]
             and plotlib.family_of(a["title"]) == plotlib.family_of(b["title"]) and a["marker"] == b["marker"]]
    report("plot-pareto-markers-differ-within-family", None if not clash else "same marker: %s" % clash)
    # the oracle: a dashed line through its rows, none of them on the front
    orc = [s for s in p["series"] if "oracle" in s["title"]]
    topk = sorted((float(r["bytes"]), r["attn_error"]) for r in rows if r["method"] == "topk_attention")
    ok = (len(orc) == 1 and orc[0]["style"] == "linespoints" and orc[0]["dash"] > 1
          and p["blocks"].get(orc[0]["block"]) == topk)
    report("plot-pareto-oracle-dashed-bound", None if ok else "oracle series %s, data %s" % (orc, topk))
    real = [(float(r["bytes"]), r["attn_error"]) for r in rows if r["method"] != "topk_attention"]
    report("plot-pareto-front-without-oracle", None if p["blocks"].get("front") == front_of(real) else
           "front %s, wanted %s" % (p["blocks"].get("front"), front_of(real)))
    # units, ranges, guides
    xt, yt = p["tics"]["x"], p["tics"]["y"]
    bad = [(l, v) for l, v in xt if not bytes_label_ok(l, v)]
    report("plot-pareto-bytes-ticks-in-units", None if len(xt) >= 4 and not bad and "e+" not in p["text"].split("plot ")[0]
           else "x tick labels %s" % xt)
    report("plot-pareto-y-ticks", None if len(yt) >= 4 else "y tick labels %s" % yt)
    base = rows[0]["baseline_bytes"]
    want = {base, base / 2, base / 4, base / 8}
    report("plot-pareto-guides", None if want <= set(p["arrows"]) and
           {"FP16", "2x", "4x", "8x"} <= set(p["guide_labels"]) else
           "arrows at %s, labels %s (baseline %s)" % (p["arrows"], p["guide_labels"], base))
    ys = [r["attn_error"] for r in rows]
    lo, hi = p["ranges"]["y"]
    report("plot-pareto-y-range-clipped", None if min(ys) / 1.5 < lo <= min(ys) and max(ys) <= hi < max(ys) * 1.5
           else "y range [%g, %g] for data %g..%g" % (lo, hi, min(ys), max(ys)))

p, err = pareto(fam, "--no-oracle", "--logx", "--x", "bytes", name="noorc")
ok = p is not None and not any("oracle" in s["title"] or s["title"] == "topk_attention" for s in p["series"])
if ok:
    topk = {(float(r["bytes"]), r["attn_error"]) for r in rows if r["method"] == "topk_attention"}
    ok = not any(pt in topk for b in p["blocks"].values() for pt in b)
report("plot-pareto-no-oracle", None if ok else "oracle still drawn: %s" % (p and p["series"] or err))
if p is not None:
    xs = [float(r["bytes"]) for r in rows if r["method"] != "topk_attention"]
    lo, hi = p["ranges"]["x"]
    base = rows[0]["baseline_bytes"]
    xt = p["tics"]["x"]
    report("plot-pareto-logx-clipped-units",
           None if min(xs) / 1.5 < lo <= min(xs) and base <= hi < base * 1.5 and len(xt) >= 4
           and all(bytes_label_ok(l, v) for l, v in xt) else
           "x range [%g, %g] for data %g..%g (baseline %g), ticks %s" % (lo, hi, min(xs), max(xs), base, xt))

p, err = pareto(F + "/fixture.csv", "--x", "ratio", name="ratio")
if p is not None:
    xt = p["tics"]["x"]
    ok = len(xt) >= 4 and all(re.fullmatch(r"\d+(\.\d+)?x", l) and float(l[:-1]) == v for l, v in xt)
    report("plot-pareto-ratio-ticks", None if ok else "x ticks %s" % xt)
    report("plot-pareto-ratio-guides", None if {1.0, 2.0, 4.0, 8.0} <= set(p["arrows"]) else "arrows %s" % p["arrows"])
    # in this fixture the oracle's top-32 (the highest ratio) would be on the front
    with open(F + "/fixture.csv", newline="") as f:
        topk = [float(r["ratio"]) for r in csv.DictReader(f) if r["method"] == "topk_attention"]
    fx = [x for x, _ in p["blocks"]["front"]]
    report("plot-pareto-csv-front-skips-oracle",
           None if topk and not set(topk) & set(fx) else "front %s, oracle ratios %s" % (fx, topk))
else:
    report("plot-pareto-ratio-ticks", err)

# --- 3. plot-sweep: legends name only what varies; shades per series, the oracle dashed
def sweep(src, param, *opts, name="s"):
    png, gp = os.path.join(tmp, name + ".png"), os.path.join(tmp, name + ".gp")
    r = run(["scripts/plot-sweep.sh", src, png, param] + list(opts) + ["--dump-script", gp])
    if r.returncode != 0 or not os.path.exists(gp):
        return None, r.stderr
    return parse_script(gp), r.stderr


s, err = sweep(fam, "budget", name="budget")
if s is None:
    report("plot-sweep-budget-runs", err)
else:
    titles = [x["title"] for x in s["series"]]
    # each eviction method has one setting of its other parameters here: its legend is its name alone
    want = ["window", "h2o", "snapkv", "tova", "knorm", "random"]
    report("plot-sweep-legend-only-varying",
           None if [t for t in titles if "oracle" not in t] == want else "legend %s, wanted %s" % (titles, want))
    orc = [x for x in s["series"] if "oracle" in x["title"]]
    report("plot-sweep-oracle-dashed", None if len(orc) == 1 and orc[0]["dash"] > 1 else "series %s" % s["series"])
    pairs = [(x["colour"], x["marker"]) for x in s["series"]]
    report("plot-sweep-series-distinct", None if len(set(pairs)) == len(pairs) else "pairs %s" % pairs)
s, err = sweep(fam, "budget", "--no-oracle", "--logx", name="budget2")
report("plot-sweep-no-oracle", None if s is not None and not any("oracle" in x["title"] for x in s["series"])
       else "series %s" % (s and s["series"] or err))

s, err = sweep(fam, "bits", name="bits")
if s is None:
    report("plot-sweep-bits-runs", err)
else:
    titles = [x["title"] for x in s["series"]]
    # kvc writes symmetric only where it is not the default (true); false as JSON writes it, not False
    ok = titles == ["quantize", "quantize symmetric=false"]
    report("plot-sweep-legend-json-values", None if ok else "legend %s" % titles)
    ser = s["series"]
    ok = len(ser) == 2 and ser[0]["marker"] == ser[1]["marker"] and ser[0]["colour"] != ser[1]["colour"] \
        and ser[0]["dash"] != ser[1]["dash"] and all(hue_close(x["colour"], plotlib.family_colour("quantization")) for x in ser)
    report("plot-sweep-shades-within-method", None if ok else "series %s" % ser)

# a pipeline's step parameter, and a constant nested parameter left out of the legend
s, err = sweep(fam, "steps.1.bits", name="steps")
report("plot-sweep-pipeline-step-param",
       None if s is not None and [x["title"] for x in s["series"]] == ["pipeline"]
       and s["blocks"]["s0"] == [(4.0, rows[-2]["attn_error"]), (8.0, rows[-1]["attn_error"])]
       else "series %s" % (s and s["series"] or err))

# a narrow error range (the rank plot that had two tick labels) still gets >= 4 y tick labels
narrow = os.path.join(tmp, "narrow.jsonl")
with open(narrow, "w") as f:
    for k, rank in enumerate([4, 8, 16, 32]):
        f.write(json.dumps({"label": "r%d" % rank, "method": "lowrank",
                            "params": {"rank": rank, "apply_to": "k", "energy": 0, "joint": False},
                            "attn_error": 0.05 - 0.008 * k, "bytes": 1000 * rank, "baseline_bytes": 65536}) + "\n")
    f.write(json.dumps({"label": "x", "method": "newfangled", "params": {"rank": 8},
                        "attn_error": 0.03, "bytes": 9000, "baseline_bytes": 65536}) + "\n")
s, err = sweep(narrow, "rank", name="narrow")
if s is None:
    report("plot-sweep-narrow-y-ticks", err)
else:
    yt = s["tics"]["y"]
    report("plot-sweep-narrow-y-ticks", None if len(yt) >= 4 else "y ticks %s" % yt)
    other = [x for x in s["series"] if x["title"] == "newfangled"]
    report("plot-unknown-method-grey", None if other and other[0]["colour"] == plotlib.OTHER[1]
           and "newfangled" in err and "FAMILIES" in err else "series %s, stderr %s" % (s["series"], err))
    report("plot-sweep-legend-constant-params-left-out",
           None if [x["title"] for x in s["series"]] == ["lowrank", "newfangled"] else "legend %s" % s["series"])

# --- 4. the axis helpers on many ranges: >= 4 ticks inside the range, distinct labels, the unit right
random.seed(7)
why = None
for _ in range(3000):
    kind = random.choice(["bytes", "ratio", "plain"])
    log = random.random() < 0.5
    a = 10 ** random.uniform(-4, 11)
    b = a * 10 ** random.uniform(0.001, 6)
    vals = [a, b] + [random.uniform(a, b) for _ in range(3)]
    ax = plotlib.Axis(kind, log, vals, zero=kind == "bytes" and not log and random.random() < 0.5)
    if len(ax.ticks) < 4 or len(set(ax.labels)) != len(ax.labels) or len(ax.ticks) > 16:
        why = "%s log=%s %g..%g: ticks %s" % (kind, log, a, b, list(zip(ax.labels, ax.ticks)))
    elif any(not (ax.lo * (1 - 1e-9) - 1e-12 <= t <= ax.hi * (1 + 1e-9) + 1e-12) for t in ax.ticks):
        why = "%s log=%s: tick outside [%g, %g]: %s" % (kind, log, ax.lo, ax.hi, ax.ticks)
    elif not (ax.lo <= min(vals) and max(vals) <= ax.hi):
        why = "%s log=%s: range [%g, %g] misses the data %g..%g" % (kind, log, ax.lo, ax.hi, a, b)
    elif kind == "bytes" and not all(bytes_label_ok(l, v) for l, v in zip(ax.labels, ax.ticks)):
        why = "labels %s" % list(zip(ax.labels, ax.ticks))
    elif log and not (math.log10(ax.hi / ax.lo) < 1.3 * math.log10(b / a) + 0.1):
        why = "log range [%g, %g] not clipped to %g..%g" % (ax.lo, ax.hi, a, b)
    if why:
        break
report("plot-axis-ticks-random-ranges", why)
cases = [(0, "0"), (512, "512 B"), (1536, "1.5 KiB"), (8 << 20, "8 MiB"), (29 * 2 ** 30, "29 GiB"), (3 * 2 ** 40, "3 TiB")]
report("plot-bytes-text", None if all(plotlib.bytes_text(v) == t for v, t in cases) else
       [(plotlib.bytes_text(v), t) for v, t in cases])

for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)
sys.exit(status())
