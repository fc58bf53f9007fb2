#!/usr/bin/python3
"""bench-quality.py: configs/lesson.json computed in plain numpy, the baseline of scripts/bench-quality.sh.

Usage: /usr/bin/python3 scripts/bench-quality.py [--svd once|per-rank] [TOKENS [HEAD_DIM]]
       (defaults: --svd once, 65536 tokens, head dim 128)
       /usr/bin/python3 scripts/bench-quality.py --compare KVC.csv NUMPY.csv

The lesson's run (`kvc run configs/lesson.json --set data.tokens=T --set data.head_dim=D --no-timing`) written
the way a numpy user writes it, from README.md's "Draw order" and "Output columns": one head, keys of rank 16
plus noise, normal values, one look-back query; quantize K,V to INT8/4/2 (one scale per token), keep sinks +
recent 128, keep the top 128 by attention, low-rank keys at ranks 32/16/8: from one SVD of K shared by the three
ranks (--svd once, as the lesson's compress_kv.py does) or a full SVD per rank (--svd per-rank, as kvc did before
it shared its decompositions). Prints one CSV row per experiment with kvc's column names (the quality columns
only), floats as repr(), so scripts/bench-quality.sh can check that both programs did the same work. Shares no
code with kvc or tests/oracle.py.
--compare: the largest relative difference between kvc's CSV (`kvc run ... --format csv`) and this script's, over
every number this script prints (rows matched by label); exits 1 when a label or an empty cell disagrees.
"""
import csv
import sys

import numpy as np

SEED = 42


def attention(q, K, V):
    s = (K @ q) / np.sqrt(K.shape[1])
    w = np.exp(s - s.max())
    w = w / w.sum()
    return w @ V, w


def log_softmax(s):
    a = s - s.max()
    return a - np.log(np.exp(a).sum())


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def quantize(x, bits):
    """Symmetric, one scale per token (row); the scales kept in double."""
    qmax = 2 ** (bits - 1) - 1
    scale = np.abs(x).max(axis=1, keepdims=True) / qmax
    safe = np.where(scale == 0, 1.0, scale)
    q = np.where(scale == 0, 0.0, np.clip(np.rint(x / safe), -qmax, qmax))
    return q * scale, -(-(x.size * bits) // 8) + 2 * x.shape[0]


def compare(kvc_path, np_path):
    with open(kvc_path) as fh:
        kvc = {r["label"]: r for r in csv.DictReader(fh)}
    worst, n = 0.0, 0
    with open(np_path) as fh:
        for r in csv.DictReader(fh):
            k = kvc.get(r["label"])
            if k is None:
                print("no kvc row %r" % r["label"])
                return 1
            for c, v in r.items():
                if c in ("label", "method"):
                    continue
                if (v == "") != (k[c] == ""):
                    print("%s %s: kvc %r numpy %r" % (r["label"], c, k[c], v))
                    return 1
                if v != "":
                    a, b = float(k[c]), float(v)
                    worst = max(worst, abs(a - b) / abs(b) if b else abs(a))
                    n += 1
    print("%d numbers, largest relative difference %.2g" % (n, worst))
    return 0


def main(argv):
    args = argv[1:]
    if args[:1] == ["--compare"] and len(args) == 3:
        return compare(args[1], args[2])
    once = True
    if args[:1] == ["--svd"] and len(args) > 1 and args[1] in ("once", "per-rank"):
        once = args[1] == "once"
        args = args[2:]
    T = int(args[0]) if len(args) > 0 else 65536
    D = int(args[1]) if len(args) > 1 else 128
    rng = np.random.default_rng(SEED)
    A = rng.normal(size=(T, 16))
    B = rng.normal(size=(16, D))
    K = (A @ B) * 0.25
    K = K + 0.1 * rng.normal(size=(T, D))
    V = rng.normal(size=(T, D))
    q = K[200] * 0.5
    q = q + 0.5 * rng.normal(size=D)
    del A, B

    ref_out, ref_w = attention(q, K, V)
    ref_s = (K @ q) / np.sqrt(D)
    baseline = 2 * T * D * 2
    top32 = np.argsort(-ref_w, kind="stable")[:min(32, T)]

    def row(label, method, Kc, Vc, nbytes, kept=None, kerr=None, verr=None):
        if kept is not None:
            Kc, Vc = Kc[kept], Vc[kept]
        out, _ = attention(q, Kc, Vc)
        lp = log_softmax(ref_s if kept is None else ref_s[kept])
        lq = log_softmax((Kc @ q) / np.sqrt(D))
        kl = max(float((np.exp(lp) * (lp - lq)).sum()), 0.0)
        cells = [label, method, rel(out, ref_out), kerr, verr, nbytes, baseline, baseline / nbytes, kl]
        if kept is not None:
            cells += [float(ref_w[kept].sum()), float(np.isin(top32, kept).sum() / len(top32))]
        else:
            cells += [None, None]
        print(",".join('"%s"' % c if isinstance(c, str) and "," in c else "" if c is None else
                       c if isinstance(c, str) else repr(c) for c in cells), flush=True)

    print("label,method,attn_error,k_error,v_error,bytes,baseline_bytes,ratio,attn_kl,retained_mass,topk_recall")
    for bits in (8, 4, 2):
        Kq, kb = quantize(K, bits)
        Vq, vb = quantize(V, bits)
        row("quantize K,V to INT%d" % bits, "quantize", Kq, Vq, kb + vb, kerr=rel(Kq, K), verr=rel(Vq, V))
        del Kq, Vq
    kept = np.r_[np.arange(0, 4), np.arange(T - 124, T)]
    row("evict: sinks + recent 128", "sink_window", K, V, 2 * len(kept) * D * 2, kept=kept)
    kept = np.sort(np.argsort(-ref_w, kind="stable")[:128])
    row("evict: top-128 by score", "topk_attention", K, V, 2 * len(kept) * D * 2 + 4 * len(kept), kept=kept)
    svd = np.linalg.svd(K, full_matrices=False) if once else None
    for r in (32, 16, 8):
        U, S, Vt = svd if once else np.linalg.svd(K, full_matrices=False)
        Kr = (U[:, :r] * S[:r]) @ Vt[:r]
        del U, S, Vt
        row("low-rank keys, rank %d" % r, "lowrank", Kr, V, 2 * (T * r + r * D) + 2 * T * D, kerr=rel(Kr, K))
        del Kr
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
