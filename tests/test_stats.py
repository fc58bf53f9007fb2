#!/usr/bin/python3
"""test_stats.py: `kvc stats` against an independent numpy implementation (README "What the data looks like").

For each config below, `kvc synth CFG -o DIR` writes the exact data kvc makes (keys, queries); this file then
computes the statistics from those arrays with numpy, from their definitions in README (not from kvc's code):
  outlier ratio   max_c mean_t |K[t, c]| / median_c mean_t |K[t, c]|
  sink mass       mean over the evaluation queries of sum(softmax(q K^T / sqrt(D))[:4]), query head hq -> KV
                  head hq // (Hq / H)
  recent mass     the same over the last ceil(T / 10) tokens
  erank           exp(entropy(s / sum(s))), s = np.linalg.svd(K, compute_uv=False)
  rank90          the least r with cumsum(s^2)[r-1] >= 0.9 * sum(s^2)
with K the keys as attention reads them (RoPE applied here, half style, when the cache holds pre-RoPE keys), on
synthetic configs (GQA 3:1, odd T, pre-RoPE keys, T < 4 < D) and on the captured cache of a small random Llama
model (data.source "model"; skipped without python3-torch).
`kvc stats CFG --format json` and `--format csv` must agree with it to relative 1e-9 per (layer, KV head) and in
the mean/min/max rows. Then: a config without evaluation queries (sink/recent mass null/empty, one note on
stderr, exit 0), the table format, and bad arguments (exit 2, one "kvc:" line, nothing on stdout).

Run from the project root: /usr/bin/python3 tests/test_stats.py  (KVC=path overrides ./kvc).
"""
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import report  # noqa: E402

KVC = os.environ.get("KVC", "./kvc")
TMP = tempfile.mkdtemp(prefix="kvc-stats-")
COLS = ["outlier_ratio", "sink_mass", "recent_mass", "erank", "rank90"]

GQA = {
    "seed": 11,
    "data": {
        "layers": 2, "kv_heads": 2, "q_heads": 6, "tokens": 97, "head_dim": 12,
        "keys": {"generator": "lowrank", "rank": 5, "scale": 0.6, "noise": 0.1,
                 "outlier_channels": {"count": 2, "scale": [10, 50]}},
        "values": {"generator": "normal"},
        "rope": {"base": 10000, "cache": "post"},
        "sinks": {"tokens": 3, "share": 0.3},
        "recent": {"tokens": 12, "share": 0.3},
        "query": {"generator": "look_back", "count": 5, "weight": 0.5, "noise": 0.5},
    },
    "experiments": [{"method": "quantize", "bits": 8}],
}
PRE = json.loads(json.dumps(GQA))
PRE["seed"] = 12
PRE["data"]["rope"] = {"base": 10000, "cache": "pre"}
PRE["data"]["tokens"] = 40
PRE["data"]["head_dim"] = 16
SMALL = {   # T < 4 sink tokens, T < D (rank limited by T), plain normal keys, one head
    "seed": 3,
    "data": {"tokens": 3, "head_dim": 8, "keys": {"generator": "normal"}, "values": {"generator": "normal"}, "query": {"generator": "key_gaussian", "count": 2}},
    "experiments": [{"method": "quantize", "bits": 8}],
}
NOQ = {"seed": 5, "data": {"tokens": 30, "head_dim": 8, "keys": {"generator": "normal"}, "values": {"generator": "normal"}},
       "experiments": [{"method": "quantize", "bits": 8}]}


def run(args):
    p = subprocess.run([KVC] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def write(name, cfg):
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def rope_half(K, base, dims):
    """K (T, D) rotated to positions 0..T-1, Hugging Face's rotate_half pairing (i, i + dims/2)."""
    T, D = K.shape
    h = dims // 2
    inv = 1.0 / base ** (np.arange(h) * 2.0 / dims)
    ang = np.arange(T)[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    out = K.copy()
    x1, x2 = K[:, :h], K[:, h:dims]
    out[:, :h] = x1 * c - x2 * s
    out[:, h:dims] = x2 * c + x1 * s
    return out


def oracle(d, rope):
    """The statistics from the synth files in directory d: (per-head list of dicts, {mean,min,max})."""
    K = np.load(os.path.join(d, "keys.npy"))
    qp = os.path.join(d, "queries.npy")
    Q = np.load(qp) if os.path.exists(qp) else None
    L, H, T, D = K.shape
    heads = []
    for l in range(L):
        for h in range(H):
            k = K[l, h]
            if rope:
                k = rope_half(k, rope["base"], rope.get("dims", D))
            m = np.abs(k).mean(axis=0)
            med = np.median(m)
            r = {"outlier_ratio": m.max() / med if med > 0 else None}
            if Q is not None and Q.shape[2] > 0:
                G = Q.shape[1] // H
                qs = Q[l, h * G:(h + 1) * G].reshape(-1, D)
                sc = qs @ k.T / math.sqrt(D)
                w = np.exp(sc - sc.max(axis=1, keepdims=True))
                w /= w.sum(axis=1, keepdims=True)
                r["sink_mass"] = w[:, :min(4, T)].sum(axis=1).mean()
                r["recent_mass"] = w[:, T - math.ceil(T / 10):].sum(axis=1).mean()
            else:
                r["sink_mass"] = r["recent_mass"] = None
            s = np.linalg.svd(k, compute_uv=False)
            p = s / s.sum()
            p = p[p > 0]
            r["erank"] = float(np.exp(-(p * np.log(p)).sum()))
            e = np.cumsum(s ** 2)
            r["rank90"] = float(np.argmax(e >= 0.9 * e[-1]) + 1)
            heads.append(r)
    agg = {}
    for name, fn in (("mean", np.mean), ("min", np.min), ("max", np.max)):
        agg[name] = {}
        for c in COLS:
            vals = [r[c] for r in heads if r[c] is not None]
            agg[name][c] = float(fn(vals)) if vals else None
    return heads, agg


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-9 * max(abs(b), 1e-300)


def compare(name, got_heads, got_agg, want_heads, want_agg):
    if len(got_heads) != len(want_heads):
        return report(name, "%d head rows, expected %d" % (len(got_heads), len(want_heads)))
    for i, (g, w) in enumerate(zip(got_heads, want_heads)):
        for c in COLS:
            if not close(g[c], w[c]):
                return report(name, "head %d %s: kvc %r, numpy %r" % (i, c, g[c], w[c]))
    for a in ("mean", "min", "max"):
        for c in COLS:
            if not close(got_agg[a][c], want_agg[a][c]):
                return report(name, "%s %s: kvc %r, numpy %r" % (a, c, got_agg[a][c], want_agg[a][c]))
    report(name, None)


def check_config(tag, cfg):
    path = write(tag, cfg)
    d = os.path.join(TMP, tag)
    rc, out, err = run(["synth", path, "-o", d])
    if rc != 0:
        return report("stats-%s" % tag, "kvc synth exit %d: %s" % (rc, err.strip()))
    rope = cfg["data"].get("rope") if cfg["data"].get("rope", {}).get("cache") == "pre" else None
    want_heads, want_agg = oracle(d, rope)
    rc, out, err = run(["stats", path, "--format", "json"])
    if rc != 0:
        return report("stats-%s-json" % tag, "exit %d: %s" % (rc, err.strip()))
    j = json.loads(out)
    compare("stats-%s-json" % tag, j["heads"], {a: j[a] for a in ("mean", "min", "max")}, want_heads, want_agg)
    rc, out, err = run(["stats", path, "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(out)))
    num = lambda r: {c: (float(r[c]) if r[c] != "" else None) for c in COLS}  # noqa: E731
    heads = [num(r) for r in rows if r["layer"] != "all"]
    agg = {r["kv_head"]: num(r) for r in rows if r["layer"] == "all"}
    if rc != 0 or set(agg) != {"mean", "min", "max"}:
        return report("stats-%s-csv" % tag, "exit %d, aggregates %s: %s" % (rc, sorted(agg), err.strip()))
    compare("stats-%s-csv" % tag, heads, agg, want_heads, want_agg)
    return j


def main():
    for tag, cfg in (("gqa", GQA), ("pre-rope", PRE), ("small", SMALL)):
        check_config(tag, cfg)

    # a captured cache: a small random Llama model (tests/test_model_torch.py writes it; needs python3-torch)
    try:
        import test_model_torch as tm
    except ImportError:
        tm = None
        checks.skip("stats-model", "python3-torch is not installed")
    if tm is not None:
        mcfg = dict(architectures=["LlamaForCausalLM"], hidden_size=64, num_hidden_layers=2, num_attention_heads=6,
                    num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=256,
                    max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
        tm.write_model(os.path.join(TMP, "model"), mcfg, tm.random_model(mcfg, 9))
        with open(os.path.join(TMP, "m.txt"), "wb") as f:
            f.write(b"What a captured cache looks like, head by head: sinks, outliers, rank. " * 2)
        check_config("model", {"data": {"source": "model", "model": "model", "text": "m.txt", "context": 41,
                                        "continuation": 9, "observe": {"window": 5}},
                               "experiments": [{"method": "none"}]})

    # all-zero keys from files: outlier_ratio and erank empty, rank90 0, uniform attention (4/8 and 1/8)
    np.save(os.path.join(TMP, "zk.npy"), np.zeros((1, 1, 8, 4)))
    np.save(os.path.join(TMP, "zv.npy"), np.ones((1, 1, 8, 4)))
    np.save(os.path.join(TMP, "zq.npy"), np.ones((1, 2, 3, 4)))
    zcfg = {"data": {"source": "files", "files": {"keys": "zk.npy", "values": "zv.npy", "queries": "zq.npy"}},
            "experiments": [{"method": "none"}]}
    rc, out, err = run(["stats", write("zeros", zcfg), "--format", "json"])
    try:
        j = json.loads(out)
        h, a = j["heads"][0], j["mean"]
        ok = (rc == 0 and h["outlier_ratio"] is None and h["erank"] is None and h["rank90"] == 0
              and h["sink_mass"] == 0.5 and h["recent_mass"] == 0.125 and a["erank"] is None and a["rank90"] == 0)
    except ValueError:
        ok = False
    report("stats-zero-keys", None if ok else "exit %d: %s %s" % (rc, out, err.strip()))

    # the same data through data.source "files" (synth's files.json) gives the same numbers
    rc, out1, _ = run(["stats", write("gqa2", GQA), "--format", "csv"])
    rc2, out2, err2 = run(["stats", os.path.join(TMP, "gqa", "files.json"), "--format", "csv"])
    report("stats-files-same", None if rc == 0 and rc2 == 0 and out1 == out2 else "differs: %s" % err2.strip())

    # no evaluation queries: the key statistics, sink/recent empty, one note, exit 0
    j = check_config("no-queries", NOQ)
    if j is not None:
        rc, out, err = run(["stats", write("noq", NOQ), "--format", "json"])
        ok = (rc == 0 and j["heads"][0]["sink_mass"] is None and j["mean"]["recent_mass"] is None
              and err.count("\n") == 1 and err.startswith("kvc: note:") and "no evaluation queries" in err)
        report("stats-no-queries-note", None if ok else "exit %d, stderr %r" % (rc, err))
        rc, out, err = run(["stats", write("noq", NOQ)])
        line = [ln for ln in out.splitlines() if ln.startswith("all") and "mean" in ln]
        report("stats-no-queries-table", None if rc == 0 and line and line[0].split()[3:5] == ["-", "-"]
               else "table %r" % out)

    # the table: one line per (layer, KV head) plus mean/min/max, under a header naming the columns
    rc, out, err = run(["stats", write("gqa3", GQA)])
    lines = out.splitlines()
    ok = rc == 0 and lines[1].split() == ["layer", "kv_head"] + COLS and len(lines) == 2 + 4 + 3
    report("stats-table", None if ok else "exit %d: %r" % (rc, out))

    # bad arguments: exit 2, one kvc: line, no stdout
    for name, args, want in (
        ("stats-bad-format", ["stats", write("g4", GQA), "--format", "jsonl"], "kvc: stats: --format: must be"),
        ("stats-no-config", ["stats"], "kvc: stats: missing the config file"),
        ("stats-two-configs", ["stats", write("g5", GQA), write("g6", GQA)], "kvc: stats: only one config"),
        ("stats-unknown-option", ["stats", write("g7", GQA), "--formt", "csv"], "kvc: stats: unknown option"),
        ("stats-bad-set", ["stats", write("g8", GQA), "--set", "data.tokens=0"], "kvc: "),
    ):
        rc, out, err = run(args)
        ok = rc == 2 and out == "" and err.count("\n") == 1 and err.startswith(want)
        report(name, None if ok else "exit %d, stdout %r, stderr %r" % (rc, out[:80], err))

    rc, out, err = run(["stats", "--help"])
    report("stats-help", None if rc == 0 and "Roy & Vetterli" in out and "usage: kvc stats" in out else out)


try:
    main()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(checks.status())
