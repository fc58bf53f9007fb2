"""plotlib: what scripts/plot-pareto.sh, scripts/plot-sweep.sh and scripts/plot-attn-kl.sh share.

- reading kvc's results (CSV or JSON lines) and their numbers;
- the method families: which family each method belongs to (FAMILIES, the one table to extend when kvc gains a
  method; tests/test_plot_style.py fails when `kvc methods` lists a method it does not know), one hue per
  family, one marker per method within its family, one shade of the family hue per series (Styler);
- legends that name only what varies (flat_params, varying, describe);
- axes: ranges clipped to the data, tick labels in KiB/MiB/GiB, "4x", or 1-2-5 steps on a log axis, at least
  four of them (Axis);
- the gnuplot script: its common head, data as inline datablocks, and running gnuplot in a scratch directory so
  that OUT.png appears whole or not at all (gnuplot writes OUT.png.part, renamed on success); --dump-script
  writes the same script, which runs on its own.

Not a plotting library: each script reads its own input and builds its own plot commands.
The scripts run Python from a here-document and find this file through $KVC_SCRIPTS (the scripts directory).
"""
import contextlib
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------------------------------------------------
# Method families. Order matters: the legend follows it, and a method's marker is its place in its family.
# Hues from Okabe & Ito's colour-blind-safe palette; the oracle is dark grey and drawn dashed (a bound).
FAMILIES = [
    ("quantization", "#0072b2", ["quantize", "kivi", "cast", "ggml"]),
    ("eviction", "#d55e00", ["sink_window", "window", "h2o", "snapkv", "tova", "knorm", "random"]),
    ("low rank", "#009e73", ["lowrank"]),
    ("sharing", "#cc79a7", ["share_heads"]),
    ("composition", "#6a3d9a", ["pipeline"]),
    ("oracle", "#404040", ["topk_attention"]),
    ("reference", "#56b4e9", ["none"]),
]
OTHER = ("other", "#8a8a8a")     # a method this table does not know yet (noted on stderr)
ORACLE = "oracle"
# gnuplot point types: filled circle, square, triangle up, triangle down, diamond, pentagon, then the open
# ones, then plus, cross, star
MARKERS = [7, 5, 9, 11, 13, 15, 6, 4, 8, 10, 12, 14, 1, 2, 3]

_FAMILY_OF = {m: (name, i, j) for i, (name, _, ms) in enumerate(FAMILIES) for j, m in enumerate(ms)}
_COLOUR_OF = dict((name, c) for name, c, _ in FAMILIES)
_COLOUR_OF[OTHER[0]] = OTHER[1]
_unknown = []


def family_of(method):
    """The family name of a method; "other" (with a note on stderr, once) for a method not in FAMILIES."""
    if method in _FAMILY_OF:
        return _FAMILY_OF[method][0]
    if method not in _unknown:
        _unknown.append(method)
        sys.stderr.write("plot: method %s is not in scripts/plotlib.py's FAMILIES; drawn grey as \"other\"\n"
                         % method)
    return OTHER[0]


def family_colour(family):
    return _COLOUR_OF[family]


def _order(method):
    """Sort key: family order, then the method's place in its family, unknown methods last by name."""
    if method in _FAMILY_OF:
        _, i, j = _FAMILY_OF[method]
        return (i, j, "")
    return (len(FAMILIES), 0, method)


def marker_of(method):
    if method in _FAMILY_OF:
        return MARKERS[_FAMILY_OF[method][2] % len(MARKERS)]
    family_of(method)
    return MARKERS[_unknown.index(method) % len(MARKERS)]


def shade(colour, t):
    """colour mixed with black (t < 0) or white (t > 0) by |t|; keeps the hue."""
    rgb = [int(colour[k:k + 2], 16) for k in (1, 3, 5)]
    if t < 0:
        rgb = [c * (1 + t) for c in rgb]
    else:
        rgb = [c + (255 - c) * t for c in rgb]
    return "#%02x%02x%02x" % tuple(int(round(c)) for c in rgb)


def shades(n):
    """n mixing amounts from dark to light, spread wider the more there are (one series: the hue itself)."""
    if n <= 1:
        return [0.0]
    span = min(0.8, 0.25 * (n - 1))
    lo = -0.45 * span / 0.8
    return [lo + span * k / (n - 1) for k in range(n)]


class Styler:
    """Styles for the series of one plot. series: (method, key) pairs; each key gets its family's hue in its
    own shade (spread over the family's series in this plot) and its method's marker, so that no two series
    share (colour, marker). dash: 1 for the first series of a method, 2, 3, ... for the next ones."""

    def __init__(self, series):
        self.style = {}
        by_family = {}
        for method, key in sorted(series, key=lambda s: _order(s[0])):
            by_family.setdefault(family_of(method), []).append((method, key))
        for fam, members in by_family.items():
            amounts = shades(len(members))
            seen = {}
            for (method, key), t in zip(members, amounts):
                seen[method] = seen.get(method, 0) + 1
                self.style[key] = {"family": fam, "colour": shade(family_colour(fam), t),
                                   "marker": marker_of(method), "dash": 1 + (seen[method] - 1) % 5}

    def __getitem__(self, key):
        return self.style[key]


def ordered(methods):
    """Methods in legend order: by family, then by their place in the family."""
    return sorted(methods, key=_order)


# ---------------------------------------------------------------------------------------------------------
# Input

def read_rows(path, die):
    """The rows of a kvc result file: JSON lines (.jsonl, .ndjson, or text starting with "{") or CSV."""
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
                    r = json.loads(line)
                except ValueError:
                    die("%s:%d: not JSON" % (path, n))
                if not isinstance(r, dict):
                    die("%s:%d: not a JSON object" % (path, n))
                rows.append(r)
        return rows
    return list(csv.DictReader(text.splitlines(keepends=True)))


def number(v):
    """A finite float from a CSV cell or a JSON value; None for empty, null, text, NaN or infinity."""
    if v is None or v == "" or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def flat_params(params):
    """A row's "params" as one level: nested objects and lists by their path ("steps.1.bits"); a pipeline's
    steps also as "steps" = the chain of their methods ("snapkv+kivi")."""
    out = {}

    def walk(prefix, v):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(prefix + "." + k if prefix else k, x)
        elif isinstance(v, list):
            if v and all(isinstance(s, dict) and "method" in s for s in v):
                out[prefix] = "+".join(str(s["method"]) for s in v)
                for i, s in enumerate(v):
                    walk("%s.%d" % (prefix, i), {k: x for k, x in s.items() if k != "method"})
            else:
                out[prefix] = v
        else:
            out[prefix] = v
    walk("", params or {})
    return out


def value_text(v):
    """A parameter value as kvc's configs write it: true/false, null, bare strings, numbers as %g."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return "%g" % v
    if isinstance(v, (int, str)):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def varying(param_dicts, skip=()):
    """The keys whose values differ between the dicts (a key missing from some counts as varying), in the
    order they first appear."""
    keys = []
    for d in param_dicts:
        for k in d:
            if k not in keys and k not in skip:
                keys.append(k)
    return [k for k in keys
            if len({json.dumps(d[k], sort_keys=True) if k in d else None for d in param_dicts}) > 1]


def describe(method, params, keys):
    """A legend entry: the method and only the given (varying) parameters."""
    return method + "".join(" %s=%s" % (k, value_text(params[k])) for k in keys if k in params)


# ---------------------------------------------------------------------------------------------------------
# Axes

UNITS = [(2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB"), (1, "B")]


def bytes_unit(v):
    for size, name in UNITS:
        if abs(v) >= size:
            return size, name
    return 1, "B"


def bytes_text(v, unit=None):
    """1536 -> "1.5 KiB"; unit (size, name) fixes the unit; 0 -> "0"."""
    if v == 0:
        return "0"
    size, name = unit or bytes_unit(v)
    return "%s %s" % (_g(v / size), name)


def _g(x):
    """A tick number without float noise: 0.30000000000000004 -> 0.3, 2.0 -> 2."""
    return "%g" % float("%.6g" % x)


def _nice_steps(lo, hi, at_least):
    """Tick values k x step in [lo, hi], step 1, 2 or 5 x 10^e, the largest step that gives >= at_least."""
    span = hi - lo
    if span <= 0:
        return [lo]
    e = math.floor(math.log10(span)) + 1
    best = None
    for _ in range(40):
        for m in (5, 2, 1):
            step = m * 10.0 ** e
            first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
            vals = [k * step for k in range(first, last + 1)]
            if len(vals) >= at_least:
                return vals
            best = vals
        e -= 1
    return best


def _pow2_linear(lo, hi, at_least):
    """Tick values k x step in [lo, hi], step a power of two (..., 0.25, 0.5, 1, 2, 4, ...), the largest step
    that gives >= at_least: binary sizes in one unit (0, 32, 64, 96, 128 KiB) fall on the 2x/4x/8x lines."""
    span = hi - lo
    if span <= 0:
        return [lo]
    e = math.ceil(math.log2(span))
    for _ in range(80):
        step = 2.0 ** e
        first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
        if last - first + 1 >= at_least:
            return [k * step for k in range(first, last + 1)]
        e -= 1
    return [lo, hi]


def _log_steps(lo, hi, at_least, most=12):
    """Tick values on a log axis in [lo, hi]: powers of ten, then 1-2-5, 1-2-3-5, 1..9 steps per decade,
    the first set with >= at_least values (powers of ten thinned to <= most); a range narrower than that
    gets linear steps."""
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for ms in ([1], [1, 2, 5], [1, 2, 3, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]):
        vals = [m * 10.0 ** e for e in range(e0, e1 + 1) for m in ms if lo * (1 - 1e-9) <= m * 10.0 ** e <= hi * (1 + 1e-9)]
        if len(vals) >= at_least:
            if len(vals) > most and ms == [1]:
                k = math.ceil(len(vals) / most)
                vals = vals[::k]
            return vals
    return [v for v in _nice_steps(lo, hi, at_least) if v > 0]


def _pow2_steps(lo, hi, at_least, most=12):
    """Tick values on a log axis of bytes or ratios: powers of two (every 2nd, 3rd, ... when more than most),
    with 3 x 2^k added when too few; a range narrower than that gets linear steps."""
    k0, k1 = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    inside = lambda v: lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)
    vals = [2.0 ** k for k in range(k0, k1 + 1) if inside(2.0 ** k)]
    if len(vals) > most:
        step = math.ceil(len(vals) / most)
        vals = [v for v in vals if round(math.log2(v)) % step == 0]
    if len(vals) < at_least:
        vals = sorted(vals + [3 * 2.0 ** (k - 1) for k in range(k0, k1 + 2) if inside(3 * 2.0 ** (k - 1))])
    if len(vals) < at_least:
        vals = [v for v in _nice_steps(lo, hi, at_least) if v > 0]
    return vals


class Axis:
    """One axis: its range (clipped to the data, padded a little) and its tick labels.
    kind: "bytes" (KiB/MiB/GiB), "ratio" (2x, 4x), or "plain" (%g). log: logarithmic.
    values: the data; extra: values to keep in range too (the FP16 baseline); zero: a linear axis from 0;
    pad_hi: extra room on the high side as a fraction of the span (for labels)."""

    def __init__(self, kind, log, values, extra=(), zero=False, pad=0.04, pad_hi=0.0, at_least=4):
        self.kind, self.log = kind, log
        vs = [v for v in list(values) + list(extra) if v is not None and (v > 0 or not log)]
        lo, hi = min(vs), max(vs)
        if log:
            a, b = math.log10(lo), math.log10(hi)
            p = max((b - a) * pad, 0.03)
            self.lo, self.hi = 10 ** (a - p), 10 ** (b + p + (b - a) * pad_hi)
            ticks = (_pow2_steps if kind in ("bytes", "ratio") else _log_steps)(self.lo, self.hi, at_least)
        else:
            if zero:
                lo = min(lo, 0.0)
            span = (hi - lo) or abs(hi) or 1.0
            self.lo = lo if zero else lo - span * pad
            self.hi = hi + span * (pad + pad_hi)
            if kind == "bytes":
                unit = bytes_unit(self.hi)
                ticks = [t * unit[0] for t in _pow2_linear(self.lo / unit[0], self.hi / unit[0], at_least)]
            else:
                ticks = _nice_steps(self.lo, self.hi, at_least)
        self.ticks = ticks
        unit = bytes_unit(max(abs(t) for t in ticks) or 1) if kind == "bytes" and not log else None
        self.labels = [self.text(t, unit) for t in ticks]

    def text(self, v, unit=None):
        if self.kind == "bytes":
            return bytes_text(v, unit)
        if self.kind == "ratio":
            return _g(v) + "x"
        return _g(v)

    def fraction(self, v):
        """Where v sits along the axis, 0 at lo and 1 at hi."""
        if self.log:
            return (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def commands(self, name):
        """gnuplot commands for axis `name` ("x" or "y"): range, log scale, and the tick labels."""
        g = ["set %srange [%r:%r]" % (name, self.lo, self.hi)]
        if self.log:
            g.append("set logscale %s" % name)
        g.append("set %stics (%s)" % (name, ", ".join("%s %r" % (quote(l), t) for l, t in zip(self.labels, self.ticks))))
        g.append("set m%stics %s" % (name, "default" if self.log else "2"))
        return g


def guide_ratios(axis, x_is_ratio):
    """The compression ratios (1 = FP16 baseline, 2, 4, 8, then 16, 32, ... on a log axis) whose guide lines
    fall inside the x axis."""
    rs = [1, 2, 4, 8] + ([2 ** k for k in range(4, 21)] if axis.log else [])
    return [r for r in rs if axis.lo <= r <= axis.hi] if x_is_ratio else rs


def baseline_of(rows, die_quiet):
    """The FP16 bytes of the rows (column baseline_bytes), or None with a note when absent or not one value."""
    vals = {number(r.get("baseline_bytes")) for r in rows}
    vals.discard(None)
    if len(vals) == 1:
        return vals.pop()
    if vals:
        die_quiet("rows have %d different baseline_bytes (several data sets); no FP16 or 2x/4x/8x guide lines"
                  % len(vals))
    return None


# ---------------------------------------------------------------------------------------------------------
# gnuplot

def parse_args(args, opts, valued, flags, usage, die):
    """The command line of a plot script: each option in `valued` (e.g. "--size") sets opts[name without the
    dashes] from the next argument; each flag in `flags` ({"--logx": ("logx", True)}) sets its opts entry;
    -h/--help prints `usage` and exits 2; another "-..." is an unknown option (die). Returns the positional
    arguments, in order."""
    pos = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in valued:
            if i + 1 >= len(args):
                die("missing value after " + a)
            opts[a[2:]] = args[i + 1]
            i += 2
            continue
        if a in flags:
            opts[flags[a][0]] = flags[a][1]
        elif a in ("-h", "--help"):
            sys.stderr.write(usage)
            sys.exit(2)
        elif a.startswith("-"):
            die("unknown option " + a)
        else:
            pos.append(a)
        i += 1
    return pos


def parse_size(text, die):
    """--size WxH -> (w, h), each 100..10000 pixels; die(message) otherwise."""
    try:
        w, h = (int(v) for v in text.split("x"))
        assert 100 <= w <= 10000 and 100 <= h <= 10000
    except Exception:
        die("--size must be WxH in pixels, 100..10000 (got %s)" % text)
    return w, h


def quote(s):
    """A gnuplot double-quoted string (one line)."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def head(w, h, part, title, xlabel, ylabel):
    """The first lines of the gnuplot script: a w x h PNG into `part`, titles, the error on a log y axis."""
    return ["set terminal pngcairo size %d,%d noenhanced font 'DejaVu Sans,12'" % (w, h),
            "set output %s" % quote(part),
            "set title %s font ',14'" % quote(title),
            "set xlabel %s" % quote(xlabel),
            "set ylabel %s" % quote("%s (log scale)" % ylabel),
            "set grid xtics ytics lc rgb '#e4e4e4'",
            "set border lc rgb '#404040'"]


def datablock(name, points):
    """An inline gnuplot datablock $name of (x, y) points."""
    return ["$%s << EOD" % name] + ["%r %r" % (x, y) for x, y in points] + ["EOD"]


@contextlib.contextmanager
def scratch():
    """A temporary directory for the gnuplot script, removed afterwards."""
    tmp = tempfile.mkdtemp(prefix="kvc-plot-")
    try:
        yield tmp
    finally:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)


def run_gnuplot(lines, part, out, die, dump=None):
    """Writes the script `lines` (also into `dump` when given) and runs gnuplot; its PNG `part` becomes
    `out`, or die(message)."""
    text = "\n".join(lines) + "\n"
    if dump:
        try:
            with open(dump, "w") as f:
                f.write(text)
        except OSError as e:
            die("cannot write %s: %s" % (dump, e.strerror))
    with scratch() as tmp:
        script = os.path.join(tmp, "plot.gp")
        with open(script, "w") as f:
            f.write(text)
        try:
            r = subprocess.run(["gnuplot", script])
        except FileNotFoundError:
            die("gnuplot is not installed (Debian: apt-get install gnuplot-nox)")
    if r.returncode != 0 or not os.path.exists(part):
        if os.path.exists(part):
            os.unlink(part)
        die("gnuplot failed (exit %d)" % r.returncode)
    os.replace(part, out)
