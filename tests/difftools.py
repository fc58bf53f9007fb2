"""What the differential tests (tests/test_differential*.py) share: run ./kvc on a config, compare its CSV with
the numpy oracle's rows (tests/oracle.py) within one set of tolerances, and keep failing configs for a look.
Not a test itself (tests/run.sh runs only tests/test_*.py) and no config generators: each test draws its own.

Tolerances (compare): the same row count; label and method identical; a cell empty exactly where the oracle has
no value; bytes, baseline_bytes, layer and head exact; every other number within relative 1e-9 of the oracle
(absolute 1e-12 where the oracle value is below 1e-12 in magnitude); NaN only against NaN, an infinity only
against the same infinity. ill_conditioned() names the configs to redraw: a relative 1e-9 is below what two
correct float64 implementations agree to on values in (1e-12, 1e-6).

Import from a test with sys.path.insert(0, <this directory>); kvc is $KVC (default ./kvc; make sanitize points
it at build-san/kvc).
"""
import csv
import io
import json
import math
import os
import shutil
import subprocess

import checks
import oracle

KVC = os.environ.get("KVC", "./kvc")
INT_COLS = ("bytes", "baseline_bytes", "layer", "head")
MAX_SHOWN = 4


def close(x, y):
    """x (kvc) within the tolerance of y (the oracle)."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    if abs(y) < 1e-12:
        return abs(x - y) <= 1e-12
    return abs(x - y) <= 1e-9 * abs(y)


def compare(kvc_rows, header, orows, cols):
    """kvc's CSV rows (dicts of strings) against the oracle's over the columns `cols`; a list of mismatches."""
    missing = [c for c in cols if c not in header]
    if missing:
        return ["kvc CSV header lacks column(s) %s (header: %s)" % (", ".join(missing), ",".join(header))]
    bad = []
    if len(kvc_rows) != len(orows):
        bad.append("row count kvc=%d oracle=%d" % (len(kvc_rows), len(orows)))
    for n, (kr, orow) in enumerate(zip(kvc_rows, orows)):
        where = "row %d %r" % (n, orow["label"])
        for c in cols:
            kc, ov = kr.get(c) or "", orow.get(c)
            if c in ("label", "method"):
                if kc != ov:
                    bad.append("%s %s kvc=%r oracle=%r" % (where, c, kc, ov))
                continue
            if ov is None or kc.strip() == "":
                if not (ov is None and kc.strip() == ""):
                    bad.append("%s %s kvc=%r oracle=%s" % (where, c, kc, "" if ov is None else repr(ov)))
                continue
            try:
                kv = float(kc)
            except ValueError:
                bad.append("%s %s kvc=%r oracle=%r (not a number)" % (where, c, kc, ov))
                continue
            if not (kv == ov if c in INT_COLS else close(kv, ov)):
                bad.append("%s %s kvc=%s oracle=%r" % (where, c, kc, ov))
    return bad


def ill_conditioned(rows, cols, skip=()):
    """Whether an oracle row has a number in [1e-12, 1e-6) in one of `cols` (those in `skip` aside)."""
    for row in rows:
        for c in cols:
            v = row.get(c)
            if c not in skip and isinstance(v, float) and 1e-12 <= abs(v) < 1e-6:
                return True
    return False


def kvc_csv(path, per_head=False, timeout=120):
    """./kvc run PATH --format csv [--per-head] -> ((header, rows), None), or (None, why) when it fails."""
    if not (os.path.isfile(KVC) and os.access(KVC, os.X_OK)):
        return None, "%s not found or not executable (build it with make)" % KVC
    args = [KVC, "run", path, "--format", "csv"] + (["--per-head"] if per_head else [])
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "kvc timed out after %d s" % timeout
    if p.returncode != 0:
        err = " ".join(p.stderr.strip().splitlines()[-3:])[-300:] or "(no stderr)"
        return None, "kvc exited with status %d: %s" % (p.returncode, err)
    try:
        reader = csv.DictReader(io.StringIO(p.stdout))
        return (reader.fieldnames or [], list(reader)), None
    except csv.Error as e:
        return None, "cannot parse kvc CSV (%s)" % e


def check_config(tmp, name, cfg, per_head=False, orows=None, timeout=120):
    """Writes cfg to TMP/NAME.json, runs the oracle (unless its rows are given) and kvc on it and compares them.
    Returns (None, number of rows) when they agree, else (why, None), the why ending in "; config PATH"."""
    path = os.path.join(tmp, "%s.json" % name)
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
        fh.write("\n")
    if orows is None:
        try:
            orows = oracle.run_config(cfg, per_head)
        except Exception as e:  # noqa: BLE001
            return "oracle raised %s: %s; config %s" % (type(e).__name__, e, path), None
    got, err = kvc_csv(path, per_head, timeout)
    if err:
        return "%s; config %s" % (err, path), None
    header, rows = got
    bad = compare(rows, header, orows, oracle.PER_HEAD_COLUMNS if per_head else oracle.COLUMNS)
    if bad:
        more = "" if len(bad) <= MAX_SHOWN else "; ... (%d more)" % (len(bad) - MAX_SHOWN)
        return "%s%s; config %s" % ("; ".join(bad[:MAX_SHOWN]), more, path), None
    return None, len(rows)


def check_all(tmp, configs, prefix="", per_head_suffix=True, show_rows=False, timeout=120):
    """check_config for each (name, cfg, per_head): one PASS/FAIL line each (tests/checks.py), named PREFIX + name
    (+ "-per-head" for per-head configs when per_head_suffix), with the row count on PASS when show_rows."""
    for name, cfg, per_head in configs:
        test = prefix + name + ("-per-head" if per_head and per_head_suffix else "")
        why, n_rows = check_config(tmp, name, cfg, per_head, timeout=timeout)
        checks.report("%s (%d rows)" % (test, n_rows) if show_rows and why is None else test, why)


def finish(tmp):
    """Keeps the configs (and says where) when a check failed, else removes them; the exit status."""
    if checks.failed:
        print("configs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.status()
