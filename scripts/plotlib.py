"""plotlib: what scripts/plot-pareto.sh and scripts/plot-sweep.sh share: the --size option, gnuplot string
quoting, the common head of the gnuplot script (a PNG with a log-scale error axis), and running gnuplot in a
scratch directory so that OUT.png appears whole or not at all (gnuplot writes OUT.png.part, renamed on success).
Not a plotting library: each script reads its own input and builds its own plot command.

The scripts run Python from a here-document and find this file through $KVC_SCRIPTS (the scripts directory).
"""
import contextlib
import os
import subprocess
import tempfile


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
            "set logscale y",
            "set format y '%g'"]


@contextlib.contextmanager
def scratch():
    """A temporary directory for the data and the gnuplot script, removed afterwards."""
    tmp = tempfile.mkdtemp(prefix="kvc-plot-")
    try:
        yield tmp
    finally:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)


def run_gnuplot(tmp, lines, part, out, die):
    """Writes the script `lines` into tmp and runs gnuplot; its PNG `part` becomes `out`, or die(message)."""
    script = os.path.join(tmp, "plot.gp")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        r = subprocess.run(["gnuplot", script])
    except FileNotFoundError:
        die("gnuplot is not installed (Debian: apt-get install gnuplot-nox)")
    if r.returncode != 0 or not os.path.exists(part):
        if os.path.exists(part):
            os.unlink(part)
        die("gnuplot failed (exit %d)" % r.returncode)
    os.replace(part, out)
