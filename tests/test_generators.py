#!/usr/bin/python3
"""test_generators.py: what the realistic generators and the multi-head data path promise (README.md, "Many
layers, heads and queries", "Realistic generators", "Output columns"), checked two ways:

- on the numpy oracle's data (tests/oracle.py make_data): the semantic promises of each generator (shares of
  attention, constant outlier offsets, head correlation, causal observation queries, pre- vs post-RoPE caches);
  the differential tests then tie kvc to the oracle;
- on ./kvc as a black box: --per-head rows against the aggregate, the table's column rule, the CSV header,
  explicit default geometry equal to none, and the config errors of the new keys (exit 2, one line,
  "kvc: <file>: <json path>: <what> (got <value>)", nothing on stdout).

Run from the project root: /usr/bin/python3 tests/test_generators.py   (KVC=path overrides ./kvc)
Prints "PASS <name>" / "FAIL <name>: <why>" per check; exits 1 if any check failed.
"""
import atexit
import copy
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
TMP = tempfile.mkdtemp(prefix="kvc-test-gen-")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def check(name, fn):
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001
        why = "%s: %s" % (type(e).__name__, e)
    report(name, why)


def base(**data):
    d = {"layers": 2, "kv_heads": 2, "q_heads": 4, "tokens": 128, "head_dim": 16,
         "keys": {"generator": "normal"}, "values": {"generator": "normal"},
         "query": {"generator": "look_back", "count": 4, "weight": 0.5, "noise": 0.5, "bias": 1.0}}
    d.update(data)
    return {"seed": 5, "data": d, "experiments": [{"method": "quantize", "bits": 4}]}


def mean_query(d, l, h):
    G = d.Hq // d.H
    acc = np.zeros(d.D)
    for row in d.Q[l, h * G:(h + 1) * G].reshape(-1, d.D):
        acc = acc + row
    return acc / (G * d.N)


def share_of(d, Ka, l, h, idx):
    qbar = mean_query(d, l, h)
    s = Ka[l, h] @ qbar / np.sqrt(d.D)
    w = np.exp(s - s.max())
    w = w / w.sum()
    return w[idx].sum()


# ---------------------------------------------------------------- generator semantics (oracle data)

def sinks_share():
    d = oracle.make_data(base(sinks={"tokens": 3, "share": 0.4},
                              heavy_hitters={"count": 5, "share": 0.2, "spread": 1.0}))
    for l in range(d.L):
        for h in range(d.H):
            got = share_of(d, d.K, l, h, np.arange(3))
            if abs(got - 0.4) > 1e-9:
                return "layer %d head %d: sinks get %.12f of the mean query's attention, want 0.4" % (l, h, got)
    return None


def recent_share():
    d = oracle.make_data(base(recent={"tokens": 16, "share": 0.6}))
    got = share_of(d, d.K, 1, 1, np.arange(112, 128))
    return None if abs(got - 0.6) < 1e-9 else "recent tokens get %.12f, want 0.6" % got


def shaping_pre_equals_post():
    cfg = base(rope={"base": 100, "cache": "post"}, sinks={"tokens": 2, "share": 0.5},
               heavy_hitters={"count": 4, "share": 0.3, "spread": 0.5},
               keys={"generator": "normal", "outlier_channels": {"count": 2, "scale": [10, 20]}})
    post = oracle.make_data(cfg)
    cfg["data"]["rope"]["cache"] = "pre"
    pre = oracle.make_data(cfg)
    rotated = pre.rope.apply(pre.K)
    err = np.abs(rotated - post.K).max() / np.abs(post.K).max()
    if err > 1e-12:
        return "RoPE(pre-RoPE cache) differs from the post-RoPE cache by %g" % err
    if post.rope is not None or pre.rope is None:
        return "rope kept for the wrong cache"
    return None


def outlier_offsets():
    cfg = base(keys={"generator": "normal"})
    del cfg["data"]["query"]["bias"]
    plain = oracle.make_data(cfg)
    cfg["data"]["keys"]["outlier_channels"] = {"count": 3, "scale": [10, 100]}
    with_oc = oracle.make_data(cfg)
    diff = with_oc.K - plain.K
    if not np.array_equal(with_oc.Q, plain.Q):
        return "outlier channels changed the queries (they are drawn after them)"
    for l in range(plain.L):
        chans = np.flatnonzero(np.abs(diff[l]).max(axis=(0, 1)) > 0)
        if len(chans) != 3 or not with_oc.outlier_mask[l, chans].all() or with_oc.outlier_mask[l].sum() != 3:
            return "layer %d: offset channels %r, mask %r" % (l, chans, np.flatnonzero(with_oc.outlier_mask[l]))
        for h in range(plain.H):
            med = np.median(np.abs(plain.K[l, h]))
            for c in chans:
                col = diff[l, h, :, c]
                if np.ptp(col) > 1e-12 * np.abs(col).max():
                    return "layer %d head %d channel %d: the offset is not constant across tokens" % (l, h, c)
                ratio = abs(col[0]) / med
                if not 10 - 1e-9 <= ratio <= 100 + 1e-9:
                    return "offset %.3f x median |K|, want 10..100" % ratio
    return None


def head_correlation():
    cfg = base(kv_heads=4, q_heads=4, tokens=2000, head_dim=32, head_correlation={"rho": 0.64, "group": 2})
    d = oracle.make_data(cfg)
    K = d.K[0]
    same = np.corrcoef(K[0].ravel(), K[1].ravel())[0, 1]
    other = np.corrcoef(K[0].ravel(), K[2].ravel())[0, 1]
    vsame = np.corrcoef(d.V[0, 2].ravel(), d.V[0, 3].ravel())[0, 1]
    if abs(same - 0.64) > 0.02 or abs(vsame - 0.64) > 0.02 or abs(other) > 0.02:
        return "correlations: same group K %.3f V %.3f, other group %.3f; want 0.64, 0.64, 0" % (same, vsame, other)
    return None


def query_group_identical():
    cfg = base(query={"generator": "look_back", "count": 3, "noise": 0.5, "head_correlation": 1.0})
    d = oracle.make_data(cfg)
    if not (np.array_equal(d.Q[:, 0], d.Q[:, 1]) and not np.array_equal(d.Q[:, 1], d.Q[:, 2])):
        return "with head_correlation 1 the query heads of a GQA group must be equal, and differ across groups"
    return None


def observe_causal():
    cfg = base(observe={"window": 8, "weight": 1.0}, query={"generator": "look_back", "token": 3})
    d = oracle.make_data(cfg)
    G = d.Hq // d.H
    for l in range(d.L):
        for hq in range(d.Hq):
            for j, p in enumerate(d.obs_pos):
                dist = np.abs(d.K[l, hq // G] - d.O[l, hq, j]).max(axis=1)
                t = int(np.argmin(dist))
                if dist[t] != 0 or t > p:
                    return "observation query at %d looks at token %d (distance %g)" % (p, t, dist[t])
    return None


def key_gaussian_covariance():
    cfg = base(kv_heads=1, q_heads=1, layers=1, tokens=64, head_dim=4,
               query={"generator": "key_gaussian", "count": 20000})
    d = oracle.make_data(cfg)
    Q = d.Q[0, 0]
    emp = Q.T @ Q / len(Q)
    want = d.K[0, 0].T @ d.K[0, 0] / d.T
    err = np.abs(emp - want).max() / np.abs(want).max()
    return None if err < 0.05 else "query covariance differs from K^T K / T by %.3f" % err


for name, fn in [("gen-sinks-share-exact", sinks_share), ("gen-recent-share-exact", recent_share),
                 ("gen-pre-rope-cache-rotates-to-post", shaping_pre_equals_post),
                 ("gen-outlier-channels-constant-offsets", outlier_offsets),
                 ("gen-head-correlation-rho", head_correlation),
                 ("gen-query-head-correlation-1", query_group_identical),
                 ("gen-observe-causal", observe_causal),
                 ("gen-key-gaussian-covariance", key_gaussian_covariance)]:
    check(name, fn)


# ---------------------------------------------------------------- kvc black box

def write(name, cfg):
    path = os.path.join(TMP, name)
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return path


def run(args):
    p = subprocess.run([KVC] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def csv_of(args):
    rc, out, err = run(args + ["--format", "csv"])
    if rc != 0:
        raise RuntimeError("exit %d: %s" % (rc, err.strip()))
    r = list(csv.DictReader(io.StringIO(out)))
    return r, out.split("\n", 1)[0].split(",")


MULTI = base(keys={"generator": "lowrank", "rank": 4, "outlier_channels": {"count": 2, "scale": 20}},
             sinks={"tokens": 2, "share": 0.3})
MULTI["experiments"] = [{"method": "quantize", "bits": [4, 8], "axis": ["token", "channel"]},
                        {"method": "sink_window", "sinks": [0, 2], "window": 30},
                        {"method": "topk_attention", "budget": 32}]
multi = write("multi.json", MULTI)


def per_head_vs_aggregate():
    agg, hdr = csv_of(["run", multi])
    ph, phdr = csv_of(["run", multi, "--per-head"])
    if phdr[:4] != ["label", "method", "layer", "head"] or phdr[4:] != hdr[2:]:
        return "per-head header %r" % phdr
    heads = 2 * 2
    if len(ph) != heads * len(agg):
        return "%d per-head rows for %d aggregate rows" % (len(ph), len(agg))
    for i, a in enumerate(agg):
        rows = ph[i * heads:(i + 1) * heads]
        if [(int(r["layer"]), int(r["head"])) for r in rows] != [(0, 0), (0, 1), (1, 0), (1, 1)]:
            return "layer/head order %r" % [(r["layer"], r["head"]) for r in rows]
        for c in ("bytes", "baseline_bytes"):
            if sum(int(r[c]) for r in rows) != int(a[c]):
                return "%s: per-head sum %d != aggregate %s" % (c, sum(int(r[c]) for r in rows), a[c])
        for c in ("attn_error", "attn_kl", "retained_mass", "topk_recall"):
            if a[c] == "":
                continue
            m = sum(float(r[c]) for r in rows) / heads     # every head has the same number of queries
            if abs(m - float(a[c])) > 1e-12 * max(1.0, abs(m)):
                return "%s row %d: mean of per-head %r != aggregate %s" % (c, i, m, a[c])
        mx = max(float(r["attn_error_max"]) for r in rows)
        if mx != float(a["attn_error_max"]):
            return "attn_error_max: %r != %s" % (mx, a["attn_error_max"])
    return None


def csv_header():
    _, hdr = csv_of(["run", multi])
    want = ["label", "method", "attn_error", "k_error", "v_error", "k_error_ordinary", "k_zeroed_ordinary",
            "bytes", "baseline_bytes", "ratio", "attn_error_p50", "attn_error_p95", "attn_error_max", "attn_kl",
            "retained_mass", "topk_recall", "decode_ns", "decode_speedup", "decode_ns_mad", "lm_kl", "lm_nll",
            "lm_nll_delta", "lm_top1", "recall_acc", "id"]
    return None if hdr == want else "header %r" % hdr


def table_columns():
    rc, out, err = run(["run", multi])
    head = out.split("\n", 1)[0].split()
    if rc != 0 or "attn_error_p95" not in head or "retained_mass" not in head:
        return "multi-query table lacks the new columns: %r" % head
    one = copy.deepcopy(MULTI)
    one["data"].update(layers=1, kv_heads=1, q_heads=1, query={"generator": "look_back", "token": 5})
    one["data"].pop("sinks")
    rc, out, err = run(["run", write("one.json", one)])
    head = out.split("\n", 1)[0].split()
    if rc != 0 or any(c in head for c in ("attn_error_p50", "attn_kl", "retained_mass", "topk_recall")):
        return "single-query table shows the appended columns: %r" % head
    rows, _ = csv_of(["run", write("one.json", one)])
    if any(r["attn_error_p50"] != r["attn_error"] or r["attn_error_max"] != r["attn_error"] for r in rows):
        return "one query: p50 and max must equal attn_error"
    return None


def defaults_are_v1():
    lesson = json.load(open("configs/lesson.json"))
    explicit = copy.deepcopy(lesson)
    explicit["data"].update(layers=1, kv_heads=1, q_heads=1)
    explicit["metrics"] = {"topk_recall_k": 32}
    for fmt in ("table", "csv"):
        a = run(["run", "configs/lesson.json", "--format", fmt, "--no-timing"])
        b = run(["run", write("explicit.json", explicit), "--format", fmt, "--no-timing"])
        if fmt == "csv":   # the id column hashes the config as written (README "Row ids"): compare the rest
            a, b = ([line.rsplit(",", 1)[0] for line in r[1].splitlines()] for r in (a, b))
        if a != b:
            return "explicit default geometry changes the %s output" % fmt
    return None


def per_head_jsonl():
    rc, out, err = run(["run", multi, "--per-head", "--format", "jsonl"])
    o = json.loads(out.split("\n", 1)[0])
    keys = list(o)
    if keys[:5] != ["label", "method", "params", "layer", "head"] or o["layer"] != 0 or o["head"] != 0:
        return "first keys %r" % keys[:6]
    return None


for name, fn in [("kvc-per-head-vs-aggregate", per_head_vs_aggregate), ("kvc-csv-header-appended", csv_header),
                 ("kvc-table-columns-rule", table_columns), ("kvc-explicit-defaults-equal-v1", defaults_are_v1),
                 ("kvc-per-head-jsonl", per_head_jsonl)]:
    check(name, fn)

ERR_RE = re.compile(r"^kvc: (.+): (.+) \(got (.*)\)\n$")
BAD = [  # name, JSON path to set (dotted), value, expected path in the message, words, got
    ("q-heads-not-multiple", "data.q_heads", 5, "data.q_heads", "multiple of kv_heads = 2", "5"),
    ("layers-zero", "data.layers", 0, "data.layers", "1..4096", "0"),
    ("head-corr-rho", "data.head_correlation", {"rho": 1.5}, "data.head_correlation.rho", "0..1", "1.5"),
    ("head-corr-group", "data.head_correlation", {"rho": 0.5, "group": 3}, "data.head_correlation.group",
     "1..2", "3"),
    ("head-corr-group-divides", {"data.kv_heads": 6, "data.q_heads": 6, "data.head_correlation": {"rho": 0.5,
     "group": 4}}, None, "data.head_correlation.group", "divide kv_heads = 6", "4"),
    ("head-corr-typo", "data.head_correlation", {"rh": 0.5}, "data.head_correlation.rh", 'did you mean "rho"',
     '"rh"'),
    ("rope-odd-dims", "data.rope", {"dims": 5}, "data.rope.dims", "even", "5"),
    ("rope-base", "data.rope", {"base": 0.5}, "data.rope.base", "> 1", "0.5"),
    ("rope-cache", "data.rope", {"cache": "both"}, "data.rope.cache", '"post", "pre"', '"both"'),
    ("sinks-share-1", "data.sinks", {"tokens": 2, "share": 1}, "data.sinks.share", "strictly between 0 and 1", "1"),
    ("sinks-all-tokens", "data.sinks", {"tokens": 128, "share": 0.5}, "data.sinks.tokens", "1..127", "128"),
    ("recent-missing-share", "data.recent", {"tokens": 8}, "data.recent.share", "missing required", "nothing"),
    ("hh-share-without-count", "data.heavy_hitters", {"share": 0.2}, "data.heavy_hitters.share", "count >= 1",
     "0.2"),
    ("hh-spread-negative", "data.heavy_hitters", {"spread": -1}, "data.heavy_hitters.spread", "0..", "-1"),
    ("query-two-forms", "data.query", {"generator": "look_back", "token": 1, "count": 2}, "data.query",
     "exactly one of", '{"generator":"look_back","token":1,"count":2}'),
    ("query-tokens-range", "data.query", {"generator": "look_back", "tokens": [1, 128]}, "data.query.tokens.1",
     "0..127", "128"),
    ("query-gaussian-token", "data.query", {"generator": "key_gaussian", "token": 1}, "data.query.token",
     "unknown key", '"token"'),
    ("query-bias-negative", "data.query.bias", -1, "data.query.bias", "0..", "-1"),
    ("observe-window", "data.observe", {"window": 129}, "data.observe.window", "1..128", "129"),
    ("outlier-channels-count", "data.keys.outlier_channels", {"count": 17, "scale": 10},
     "data.keys.outlier_channels.count", "1..16", "17"),
    ("outlier-channels-scale", "data.keys.outlier_channels", {"count": 2, "scale": [50, 10]},
     "data.keys.outlier_channels.scale", "0 < lo <= hi", "[50,10]"),
    ("metrics-recall-k", "metrics", {"topk_recall_k": 0}, "metrics.topk_recall_k", "1..128", "0"),
    ("metrics-unknown", "metrics", {"recall": 3}, "metrics.recall", 'did you mean "topk_recall_k"', '"recall"'),
    ("tensor-too-large", {"data.tokens": 1 << 24, "data.head_dim": 16},
     None, "data.tokens", "exceeds the limit of 134217728 numbers per tensor", str(1 << 24)),
    ("queries-too-many", "data.query", {"generator": "key_gaussian", "count": 1 << 24}, "data.query.count",
     "at most 134217728", str(1 << 24)),
]


def bad_case(path_set, value, where, words, got):
    def body():
        cfg = copy.deepcopy(MULTI)
        for ps, v in (path_set.items() if isinstance(path_set, dict) else [(path_set, value)]):
            node = cfg
            parts = ps.split(".")
            for p in parts[:-1]:
                node = node[p]
            node[parts[-1]] = v
        path = write("bad.json", cfg)
        rc, out, err = run(["run", path])
        m = ERR_RE.match(err)
        if rc != 2 or out != "" or not m:
            return "exit %d, stdout %r, stderr %r" % (rc, out[:80], err)
        if m.group(1) != "%s: %s" % (path, where) or words not in m.group(2) or m.group(3) != got:
            return "stderr %r; want where %r, %r in what, got %r" % (err, where, words, got)
        return None
    return body


for name, p, v, where, words, got in BAD:
    check("bad-" + name, bad_case(p, v, where, words, got))

sys.exit(checks.status())
