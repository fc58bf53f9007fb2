#!/usr/bin/python3
"""test_lesson.py: golden tests of kvc's own output against the lesson's printed numbers.

The expected numbers are the lesson's (compress_kv.expected, practice_outlier_channels.expected and the
size arithmetic of "Common mistakes"), copied below; where the lesson's files are present
(../shared/lesson next to the checkout, or $KVC_LESSON_DIR) the copies are checked against them too; a file
that is not there is a SKIP line. The lesson's "Now change it" variants are run with --set alone and compared
with the independent numpy oracle (tests/oracle.py, run_config) and with byte counts computed here from the
lesson's formula.

Run from the project root: /usr/bin/python3 tests/test_lesson.py   (KVC=path overrides ./kvc)
Prints "PASS <name>" / "FAIL <name>: <why>" per check; exits 1 if any check failed.
"""
import copy
import csv
import io
import json
import os
import re
import subprocess
import sys

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

KVC = os.environ.get("KVC", "./kvc")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))    # the checkout
LESSON_DIR = os.environ.get("KVC_LESSON_DIR", os.path.normpath(os.path.join(ROOT, "..", "shared", "lesson")))
LESSON = "configs/lesson.json"
PRACTICE = "configs/practice.json"
COLUMNS = ["label", "method", "attn_error", "k_error", "v_error", "k_error_ordinary", "k_zeroed_ordinary",
           "bytes", "baseline_bytes", "ratio"]
INT_COLUMNS = ("bytes", "baseline_bytes")

# compress_kv.expected: "label: error X" per row
LESSON_ROWS = [("quantize K,V to INT8", "0.007"), ("quantize K,V to INT4", "0.102"),
               ("quantize K,V to INT2", "0.878"), ("evict: sinks + recent 128", "1.568"),
               ("evict: top-128 by score", "0.645"), ("low-rank keys, rank 32", "0.041"),
               ("low-rank keys, rank 16", "0.052"), ("low-rank keys, rank 8", "0.345")]
# practice_outlier_channels.expected: error(all), error(ordinary), zeroed, bytes; FP16 bytes 6400
PRACTICE_ROWS = [("per-token", "0.119", "0.674", "69%", 2000), ("per-channel", "0.108", "0.123", "17%", 1632)]
PRACTICE_FP16 = 6400


def short(s, n=300):
    s = repr(s)
    return s if len(s) <= n else s[:n] + "..."


def kvc(args):
    """Runs kvc; returns stdout text, or raises RuntimeError with the exit status and stderr."""
    p = subprocess.run([KVC] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    if p.returncode != 0 or p.stderr:
        raise RuntimeError("kvc %s: exit %d, stderr %s" % (" ".join(args), p.returncode,
                                                           short(p.stderr.decode("utf-8", "replace"))))
    return p.stdout.decode("utf-8")


def check(name, fn):
    """Runs fn() -> None (pass) or a reason string; an exception is a failure too."""
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001
        why = "%s: %s" % (type(e).__name__, e)
    report(name, why)


def csv_rows(text):
    r = csv.reader(io.StringIO(text))
    header = next(r)
    if header[:len(COLUMNS)] != COLUMNS:   # the v1 columns first; later columns may follow
        raise ValueError("CSV header %r, want %r" % (header, COLUMNS))
    rows = []
    for rec in r:
        row = {}
        for k, v in zip(header, rec):
            if k in ("label", "method", "id"):   # id: the row's stable id, 16 hex digits
                row[k] = v
            elif v == "":
                row[k] = None
            elif k in INT_COLUMNS:
                row[k] = int(v)
            else:
                row[k] = float(v)
        rows.append(row)
    return rows


def f3(x):
    return "-" if x is None else "%.3f" % x


def pct(x):
    return "-" if x is None else "%.0f%%" % (100 * x)


def load(path):
    with open(path) as fh:
        return json.load(fh)


def close(x, y):
    """Same rule as tests/test_differential.py: relative 1e-9, absolute 1e-12 near zero."""
    if x is None or y is None:
        return x is None and y is None
    if abs(y) < 1e-12:
        return abs(x - y) <= 1e-12
    return abs(x - y) <= 1e-9 * abs(y)


def compare_oracle(got, want):
    """None if kvc's rows equal the oracle's (labels exact, ints exact, floats within 1e-9), else why."""
    if len(got) != len(want):
        return "kvc has %d rows, the oracle %d" % (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        for k in COLUMNS:
            if k in ("label", "method") + INT_COLUMNS:
                if g[k] != w[k]:
                    return "row %d %s: kvc %r, oracle %r" % (i, k, g[k], w[k])
            elif not close(g[k], w[k]):
                return "row %d %s: kvc %r, oracle %r" % (i, k, g[k], w[k])
    return None


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make (run from the project root)" % KVC)
        return 1
    try:
        import oracle  # numpy; an independent implementation of the config spec
    except Exception as e:  # noqa: BLE001
        oracle = None
        report("oracle-import", "cannot import tests/oracle.py: %s: %s" % (type(e).__name__, e))

    # ---- the copies above agree with the lesson's own files, where those are present
    exp = os.path.join(LESSON_DIR, "compress_kv.expected")
    if not os.path.exists(exp):
        checks.skip("lesson-expected-file", "%s is not there (KVC_LESSON_DIR=DIR names the lesson directory)" % exp)
    else:
        def lesson_file():
            got = []
            for ln in open(exp).read().splitlines():
                m = re.match(r"^(.*):\s+error (\d+\.\d+)$", ln)
                if m:
                    got.append((" ".join(m.group(1).split()), m.group(2)))
            return None if got == LESSON_ROWS else "compress_kv.expected has %r" % got
        check("lesson-expected-file", lesson_file)
    exp = os.path.join(LESSON_DIR, "practice_outlier_channels.expected")
    if not os.path.exists(exp):
        checks.skip("practice-expected-file", "%s is not there (KVC_LESSON_DIR=DIR names the lesson directory)" % exp)
    else:
        def practice_file():
            text = open(exp).read()
            got = [(m.group(1), m.group(2), m.group(3), m.group(4), int(m.group(5))) for m in re.finditer(
                r"^(\S+)\s+error\(all\)=(\S+)\s+error\(ordinary\)=(\S+)\s+zeroed=(\S+)\s+bytes=(\d+)$", text, re.M)]
            m = re.search(r"^FP16 bytes: (\d+)$", text, re.M)
            fp16 = int(m.group(1)) if m else None
            return None if got == PRACTICE_ROWS and fp16 == PRACTICE_FP16 else \
                "practice_outlier_channels.expected has %r, FP16 %r" % (got, fp16)
        check("practice-expected-file", practice_file)

    # ---- lesson.json: attention error per row
    lesson_csv = {}

    def lesson_csv_check():
        out = kvc(["run", LESSON, "--format", "csv"])
        lesson_csv["text"] = out
        rows = csv_rows(out)
        lesson_csv["rows"] = rows
        got = [f3(r["attn_error"]) for r in rows]
        want = [e for _, e in LESSON_ROWS]
        return None if got == want else "attn_error %s, want %s" % (" ".join(got), " ".join(want))
    check("lesson-csv-attn-error", lesson_csv_check)

    def lesson_labels():
        got = [r["label"] for r in lesson_csv["rows"]]
        want = [lb for lb, _ in LESSON_ROWS]
        return None if got == want else "labels %r" % got
    check("lesson-csv-labels", lesson_labels)

    def lesson_methods():
        got = [r["method"] for r in lesson_csv["rows"]]
        want = ["quantize"] * 3 + ["sink_window", "topk_attention"] + ["lowrank"] * 3
        return None if got == want else "methods %r" % got
    check("lesson-csv-methods", lesson_methods)

    def lesson_table():
        out = kvc(["run", LESSON])
        lines = out.rstrip("\n").split("\n")
        header = re.split(r"\s{2,}", lines[0].strip())
        if "attn_error" not in header:
            return "table header %r has no attn_error" % lines[0]
        col = header.index("attn_error")
        if len(lines) != 1 + len(LESSON_ROWS):
            return "table has %d lines, want %d" % (len(lines), 1 + len(LESSON_ROWS))
        for ln, (label, err) in zip(lines[1:], LESSON_ROWS):
            cells = re.split(r"\s{2,}", ln.strip())
            if cells[0] != label or cells[col] != err:
                return "table row %r, want label %r and attn_error %s" % (ln, label, err)
            if not re.search(r"(^|\s)%s(\s|$)" % re.escape(err), ln):
                return "table row %r lacks %s" % (ln, err)
        return None
    check("lesson-table-attn-error", lesson_table)

    def lesson_oracle():
        if oracle is None:
            return "no oracle"
        return compare_oracle(lesson_csv["rows"], oracle.run_config(load(LESSON)))
    check("lesson-csv-equals-oracle", lesson_oracle)

    # ---- practice.json: outlier channels, per-token vs per-channel INT4 keys
    practice = {}

    def practice_check():
        rows = csv_rows(kvc(["run", PRACTICE, "--format", "csv"]))
        practice["rows"] = rows
        got = [(r["label"].split(", ")[1].split()[0], f3(r["k_error"]),
                f3(r["k_error_ordinary"]), pct(r["k_zeroed_ordinary"]), r["bytes"]) for r in rows]
        want = [(a, b, c, d, e) for a, b, c, d, e in PRACTICE_ROWS]
        return None if got == want else "got %r, want %r" % (got, want)
    check("practice-csv-metrics", practice_check)

    def practice_rest():
        rows = practice["rows"]
        if [r["baseline_bytes"] for r in rows] != [PRACTICE_FP16] * 2:
            return "baseline_bytes %r, want 6400 twice" % [r["baseline_bytes"] for r in rows]
        if any(r["attn_error"] is not None or r["v_error"] is not None for r in rows):
            return "attn_error/v_error should be empty (no values, no query)"
        if [r["label"] for r in rows] != ["INT4 keys, per-token scales", "INT4 keys, per-channel scales"]:
            return "labels %r" % [r["label"] for r in rows]
        for r in rows:
            if r["ratio"] != r["baseline_bytes"] / r["bytes"]:
                return "ratio %r != baseline/bytes" % r["ratio"]
        return None
    check("practice-csv-baseline-labels-ratio", practice_rest)

    def practice_table():
        out = kvc(["run", PRACTICE])
        for _, kerr, kord, _, nbytes in PRACTICE_ROWS:
            for s in (kerr, kord, str(nbytes)):
                if not re.search(r"(^|\s)%s(\s|$)" % re.escape(s), out):
                    return "table lacks %s: %s" % (s, short(out))
        return None if "6400" in out else "table lacks 6400"
    check("practice-table", practice_table)

    # ---- "Now change it" 1: BITS = 8
    def variant(name, sets, fn):
        def body():
            rows = csv_rows(kvc(["run", PRACTICE, "--format", "csv"] + sum((["--set", s] for s in sets), [])))
            cfg = load(PRACTICE)
            for s in sets:      # the same override, applied to the oracle's config by hand
                path, value = s.split("=", 1)
                node = cfg
                parts = path.split(".")
                for p in parts[:-1]:
                    node = node[int(p)] if isinstance(node, list) else node[p]
                last = parts[-1]
                node[int(last) if isinstance(node, list) else last] = json.loads(value)
            want = oracle.run_config(cfg) if oracle else None
            return fn(rows, want)
        check(name, body)

    def bits8(rows, want):
        if [r["label"] for r in rows] != ["INT8 keys, per-token scales", "INT8 keys, per-channel scales"]:
            return "labels %r" % [r["label"] for r in rows]
        z8, z4 = rows[0]["k_zeroed_ordinary"], practice["rows"][0]["k_zeroed_ordinary"]
        if not (z8 < z4 and z8 < 0.2 and z8 * 5 < z4):
            return "per-token zeroed at INT8 %r should drop far below INT4's %r" % (z8, z4)
        if rows[0]["k_error_ordinary"] >= practice["rows"][0]["k_error_ordinary"]:
            return "INT8 ordinary error %r not below INT4's" % rows[0]["k_error_ordinary"]
        # bytes: T*D*bits/8 + scales*2 with T=200, D=16
        nb = [200 * 16 * 8 // 8 + 200 * 2, 200 * 16 * 8 // 8 + 16 * 2]
        if [r["bytes"] for r in rows] != nb:
            return "bytes %r, want %r" % ([r["bytes"] for r in rows], nb)
        return compare_oracle(rows, want) if want else "no oracle"
    variant("variant-bits-8", ["experiments.0.bits=8"], bits8)

    # ---- "Now change it" 2: no outlier channels
    def no_outliers(rows, want):
        if any(r["k_error_ordinary"] is not None or r["k_zeroed_ordinary"] is not None for r in rows):
            return "k_error_ordinary/k_zeroed_ordinary should be empty without outliers: %r" % rows
        if not want:
            return "no oracle"
        why = compare_oracle(rows, want)
        if why:
            return why
        kvc_token_wins = rows[0]["k_error"] < rows[1]["k_error"]
        oracle_token_wins = want[0]["k_error"] < want[1]["k_error"]
        if kvc_token_wins != oracle_token_wins:
            return "kvc and the oracle disagree on which grouping wins: %r vs %r" % (rows, want)
        # with the outliers gone, per-token k_error must fall below its outlier value (0.119)
        if not rows[0]["k_error"] < practice["rows"][0]["k_error"]:
            return "per-token k_error %r without outliers, not below %r" % (
                rows[0]["k_error"], practice["rows"][0]["k_error"])
        return None
    variant("variant-no-outliers", ["data.keys.outliers=[]"], no_outliers)

    # ---- "Now change it" 3: T = 20
    def tokens20(rows, want):
        T, D, bits = 20, 16, 4
        nb = [T * D * bits // 8 + T * 2, T * D * bits // 8 + D * 2]   # 200, 192
        if [r["bytes"] for r in rows] != nb:
            return "bytes %r, want %r" % ([r["bytes"] for r in rows], nb)
        if nb != [200, 192]:
            return "formula gives %r, the brief's 200 and 192" % nb
        if [r["baseline_bytes"] for r in rows] != [T * D * 2] * 2:
            return "baseline_bytes %r, want %d" % ([r["baseline_bytes"] for r in rows], T * D * 2)
        if not rows[0]["bytes"] > rows[1]["bytes"]:
            return "per-token should store more bytes than per-channel at T=20"
        return compare_oracle(rows, want) if want else "no oracle"
    variant("variant-tokens-20", ["data.tokens=20"], tokens20)

    def scale_overhead_growth():
        # the per-token overhead grows with T, the per-channel one does not
        over = {}
        for T in (20, 200, 2000):
            rows = csv_rows(kvc(["run", PRACTICE, "--format", "csv", "--set", "data.tokens=%d" % T]))
            packed = T * 16 * 4 // 8
            over[T] = (rows[0]["bytes"] - packed, rows[1]["bytes"] - packed)
        want = {T: (2 * T, 2 * 16) for T in over}
        return None if over == want else "scale bytes %r, want %r" % (over, want)
    check("variant-scale-overhead-vs-tokens", scale_overhead_growth)

    # ---- JSONL: same rows as CSV, one JSON object per line
    def jsonl_check():
        out = kvc(["run", LESSON, "--format", "jsonl"])
        lines = out.split("\n")
        if lines[-1] != "":
            return "output does not end with a newline"
        objs = [json.loads(ln) for ln in lines[:-1]]
        want_keys = ["label", "method", "params"] + COLUMNS[2:]
        rows = lesson_csv["rows"]
        if len(objs) != len(rows):
            return "%d JSONL lines, %d CSV rows" % (len(objs), len(rows))
        for i, (o, r) in enumerate(zip(objs, rows)):
            if list(o)[:len(want_keys)] != want_keys:   # the v1 columns first; later columns may follow
                return "line %d keys %r, want %r" % (i, list(o), want_keys)
            for k in COLUMNS:
                if o[k] != r[k] or (k in INT_COLUMNS and not isinstance(o[k], int)):
                    return "line %d %s: jsonl %r, csv %r" % (i, k, o[k], r[k])
        params = [o["params"] for o in objs]
        want = [{"bits": b, "axis": "token", "apply_to": "kv"} for b in (8, 4, 2)] + \
               [{"sinks": 4, "window": 124}, {"budget": 128}] + \
               [{"rank": r, "apply_to": "k"} for r in (32, 16, 8)]
        return None if params == want else "params %r, want %r" % (params, want)
    check("lesson-jsonl-equals-csv", jsonl_check)

    def jsonl_practice():
        objs = [json.loads(ln) for ln in kvc(["run", PRACTICE, "--format", "jsonl"]).splitlines()]
        rows = practice["rows"]
        for o, r in zip(objs, rows):
            for k in COLUMNS:
                if o[k] != r[k]:
                    return "%s: jsonl %r, csv %r" % (k, o[k], r[k])
        return None if len(objs) == 2 else "%d lines" % len(objs)
    check("practice-jsonl-equals-csv", jsonl_practice)

    # ---- kvc size: the lesson's arithmetic
    def size_csv(args):
        out = kvc(["size", "--format", "csv"] + args)
        rows = list(csv.DictReader(io.StringIO(out)))
        if len(rows) != 1:
            raise ValueError("size CSV has %d rows" % len(rows))
        return rows[0]

    SIZE_COLS = ["layers", "kv_heads", "head_dim", "tokens", "batch", "k_bits", "v_bits", "k_rank", "v_rank",
                 "bytes_per_token_per_head", "bytes_per_token", "total_bytes", "fp16_total_bytes", "ratio"]

    def size_case(name, args, L, H, D, T=1, kb=16, vb=16, kr=None, vr=None, table=()):
        def body():
            kr_, vr_ = kr or D, vr or D
            head = (kr_ * kb + vr_ * vb) // 8
            tok = L * H * head
            total = tok * T
            fp16 = L * H * D * 2 * 2 * T
            r = size_csv(args)
            if list(r) != SIZE_COLS:
                return "columns %r" % list(r)
            want = {"layers": L, "kv_heads": H, "head_dim": D, "tokens": T, "batch": 1, "k_bits": kb,
                    "v_bits": vb, "k_rank": kr_, "v_rank": vr_, "bytes_per_token_per_head": head,
                    "bytes_per_token": tok, "total_bytes": total, "fp16_total_bytes": fp16}
            for k, v in want.items():
                if r[k] != str(v):
                    return "%s = %s, want %s" % (k, r[k], v)
            if float(r["ratio"]) != (2 * D * 16) / (kr_ * kb + vr_ * vb):
                return "ratio %s, want %r" % (r["ratio"], (2 * D * 16) / (kr_ * kb + vr_ * vb))
            out = kvc(["size"] + args)
            for s in table:
                if s not in out:
                    return "table lacks %r: %s" % (s, short(out))
            return None
        check(name, body)

    size_case("size-32x32x128-per-token", ["--layers", "32", "--kv-heads", "32", "--head-dim", "128"],
              32, 32, 128, table=("524288 B  (512.00 KiB)", "1.00x"))
    size_case("size-32x32x128-60000-tokens",
              ["--layers", "32", "--kv-heads", "32", "--head-dim", "128", "--tokens", "60000"],
              32, 32, 128, T=60000, table=("31457280000 B  (29.30 GiB)", "524288 B  (512.00 KiB)"))
    size_case("size-gqa8-int8-60000-tokens",
              ["--kv-heads", "8", "--k-bits", "8", "--v-bits", "8", "--tokens", "60000", "--layers", "32",
               "--head-dim", "128"], 32, 8, 128, T=60000, kb=8, vb=8,
              table=("3932160000 B  (3.66 GiB)", "7864320000 B  (7.32 GiB)", "2.00x"))
    size_case("size-head64-baseline", ["--head-dim", "64"], 1, 1, 64, table=("256 B", "1.00x"))
    size_case("size-head64-k-rank-32", ["--head-dim", "64", "--k-rank", "32"], 1, 1, 64, kr=32,
              table=("192 B", "1.33x"))
    size_case("size-head64-v-int8", ["--head-dim", "64", "--v-bits", "8"], 1, 1, 64, vb=8,
              table=("192 B", "1.33x"))
    size_case("size-head64-kv-int8", ["--head-dim", "64", "--k-bits", "8", "--v-bits", "8"], 1, 1, 64,
              kb=8, vb=8, table=("128 B", "2.00x"))
    size_case("size-head64-k-rank-16", ["--head-dim", "64", "--k-rank", "16"], 1, 1, 64, kr=16,
              table=("160 B", "1.60x"))

    def size_lesson_numbers():
        # the lesson's own numbers, independent of the formula above
        got = [(size_csv(a)["bytes_per_token_per_head"], "%.2f" % float(size_csv(a)["ratio"])) for a in (
            ["--head-dim", "64"], ["--head-dim", "64", "--k-rank", "32"], ["--head-dim", "64", "--v-bits", "8"],
            ["--head-dim", "64", "--k-bits", "8", "--v-bits", "8"], ["--head-dim", "64", "--k-rank", "16"])]
        want = [("256", "1.00"), ("192", "1.33"), ("192", "1.33"), ("128", "2.00"), ("160", "1.60")]
        if got != want:
            return "got %r, want %r" % (got, want)
        r = size_csv(["--layers", "32", "--kv-heads", "32", "--head-dim", "128", "--tokens", "60000"])
        if r["bytes_per_token"] != "524288" or "%.2f" % (int(r["total_bytes"]) / 2 ** 30) != "29.30":
            return "32x32x128: %r" % r
        r = size_csv(["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "60000",
                      "--k-bits", "8", "--v-bits", "8"])
        return None if "%.2f" % (int(r["total_bytes"]) / 2 ** 30) == "3.66" else "GQA INT8: %r" % r
    check("size-lesson-numbers", size_lesson_numbers)

    def size_fractional_bytes():
        r = size_csv(["--head-dim", "3", "--k-bits", "3", "--v-bits", "16"])   # 9 + 48 bits = 7.125 bytes
        return None if r["bytes_per_token_per_head"] == "7.125" else "got %r" % r
    check("size-fractional-bytes", size_fractional_bytes)

    # ---- determinism (the decode timing aside: tests/test_determinism.py covers runs with it)
    def determinism():
        for fmt in ("csv", "jsonl", "table"):
            a = kvc(["run", LESSON, "--format", fmt, "--no-timing"])
            b = kvc(["run", LESSON, "--format", fmt, "--no-timing"])
            if a != b:
                return "two runs of lesson.json differ in %s" % fmt
        def untimed(text):   # the CSV without its decode_ns / decode_speedup cells
            rows = list(csv.reader(io.StringIO(text)))
            keep = [i for i, h in enumerate(rows[0]) if h not in ("decode_ns", "decode_speedup", "decode_ns_mad")]
            return [[r[i] for i in keep] for r in rows]
        timed = lesson_csv.get("text") or ""
        if not timed or any(r["decode_ns"] == "" or r["decode_speedup"] == "" for r in lesson_csv["rows"]):
            return "the first (timed) CSV run lacks decode_ns / decode_speedup"
        return None if untimed(timed) == untimed(kvc(["run", LESSON, "--format", "csv", "--no-timing"])) else \
            "the timed CSV differs from a --no-timing run in other columns"
    check("lesson-deterministic", determinism)
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
