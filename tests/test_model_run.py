#!/usr/bin/python3
"""test_model_run.py: `kvc run` on data.source "model" (README "A real model in the loop") against PyTorch.

A small random Llama model (tests/test_model_torch.py writes it in Hugging Face's layout; its forward pass,
`oracle`, is written from the Llama definition, not from kvc) runs the protocol independently here:
  prefill the C context tokens -> post-RoPE K, V (L, Hkv, C, D); the method's cache (quantize: the numpy oracle's
  per-token quantizer of tests/oracle.py, rounded to float32; window: the last `budget` rows at their positions)
  replaces the context cache; the N continuation tokens x[C..C+N) are decoded over it (torch attends over the
  context rows plus the continuation's own causal rows), and their next-token distributions are compared with
  those over the uncompressed cache: KL(ref || method), NLL of x[C+1..C+N], top-1 agreement.
Checks:
  * lm_kl, lm_nll, lm_nll_delta, lm_top1 of `none`, `quantize bits=4` and `window budget=...` match torch
    (KL within 2% relative + 1e-6, NLL within 1e-4, top-1 exactly), for data.text and for data.token_ids (one
    sequence of three), there with recall_acc over data.answers (exactly; empty without answers);
  * the identity (method none): lm_kl "0", lm_nll_delta "0", lm_top1 "1" exactly;
  * kvc synth -o DIR writes the captured K, V, queries and observation queries (checked against torch), and a
    run of the written files.json gives the same attention columns with empty lm_* columns;
  * synthetic data leaves the lm_* columns empty.
Skipped (no lines) when torch is not installed.
"""
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import checks

try:
    import torch
except ImportError:
    print("test_model_run.py: python3-torch is not installed; skipped", file=sys.stderr)
    sys.exit(0)

import oracle as orc
import test_model_torch as tm

KVC = os.environ.get("KVC", "./kvc")
LM = ["lm_kl", "lm_nll", "lm_nll_delta", "lm_top1", "recall_acc"]
C, N, WIN, BUDGET = 40, 12, 8, 20


def model_cfg(vocab):
    return dict(architectures=["LlamaForCausalLM"], hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=vocab,
                max_position_embeddings=C + N, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


def run_csv(path, *extra):
    r = subprocess.run([KVC, "run", path, "--no-timing", "--format", "csv"] + list(extra), capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("kvc run %s: exit %d: %s" % (path, r.returncode, r.stderr.strip()))
    return list(csv.DictReader(io.StringIO(r.stdout)))


def protocol(cfg, W, ids, method, answers=None):
    """lm_kl, lm_nll, lm_nll_delta, lm_top1 (and recall_acc for the continuation offsets `answers`) of one method,
    computed from the definition in torch/numpy."""
    L, Hkv, D = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    with torch.no_grad():
        _, K, V, _ = tm.oracle(cfg, W, ids[:C])
        cont = ids[C:C + N]

        def decode(ctx):
            logits, _, _, _ = tm.oracle(cfg, W, cont, pos0=C, ctx=ctx)
            return torch.log_softmax(logits.double(), dim=-1).numpy()

        full = [[(K[l, h], V[l, h]) for h in range(Hkv)] for l in range(L)]
        ref = decode(full)
        if method == "none":
            ctx = full
        elif method == "quantize":
            q = lambda x: torch.from_numpy(orc.quantize(x.double().numpy(), 4, "token").astype(np.float32))
            ctx = [[(q(K[l, h]), q(V[l, h])) for h in range(Hkv)] for l in range(L)]
        else:   # window: the last BUDGET rows; the continuation's positions stay C.. (torch's RoPE used them)
            ctx = [[(K[l, h, C - BUDGET:], V[l, h, C - BUDGET:]) for h in range(Hkv)] for l in range(L)]
        got = decode(ctx)
    targets = np.array(ids[C + 1:C + N + 1])
    kl = np.maximum((np.exp(ref) * (ref - got)).sum(-1), 0).mean()
    nll = -got[np.arange(N), targets].mean()
    ref_nll = -ref[np.arange(N), targets].mean()
    top1 = (got.argmax(-1) == ref.argmax(-1)).mean()
    out = {"lm_kl": kl, "lm_nll": nll, "lm_nll_delta": nll - ref_nll, "lm_top1": top1}
    if answers:
        out["recall_acc"] = np.mean([got[j - 1].argmax() == ids[C + j] for j in answers])
    return out


EXPS = [{"method": "none"}, {"method": "quantize", "bits": 4}, {"method": "window", "budget": BUDGET}]


def compare(name, tmp, cfg, W, ids, data, answers=None):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump({"data": data, "experiments": EXPS}, f)
    rows = run_csv(path)
    for row in rows:
        m = row["method"]
        want = protocol(cfg, W, ids, m, answers)
        got = {k: float(row[k]) for k in LM if row[k] != ""}
        bad = [] if set(got) == set(want) else ["the non-empty columns"]
        if abs(got["lm_kl"] - want["lm_kl"]) > 0.02 * want["lm_kl"] + 1e-6:
            bad.append("lm_kl")
        for k in ("lm_nll", "lm_nll_delta"):
            if abs(got[k] - want[k]) > 1e-4:
                bad.append(k)
        for k in ("lm_top1", "recall_acc"):
            if got.get(k) != want.get(k):
                bad.append(k)
        checks.report("model-run-%s-%s" % (name, m),
                      "%s differ: kvc %s, torch %s" % (bad, got, want) if bad else None)
        if m == "none":
            exact = row["lm_kl"] == "0" and row["lm_nll_delta"] == "0" and row["lm_top1"] == "1"
            if row["recall_acc"] != ("0.5" if answers else ""):
                exact = False
            checks.report("model-run-%s-identity-exact" % name, None if exact else
                          "want lm_kl 0, lm_nll_delta 0, lm_top1 1 (got %s)" % {k: row[k] for k in LM})
    return path, rows


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-model-run-")
    try:
        rng = np.random.default_rng(11)
        # a byte-level model on a text
        cfg = model_cfg(256)
        W = tm.random_model(cfg, 5)
        tm.write_model(os.path.join(tmp, "byte"), cfg, W)
        text = b"Compression of a cache changes what the model predicts next; measure it. " * 2
        with open(os.path.join(tmp, "t.txt"), "wb") as f:
            f.write(text)
        ids = list(text[:C + N + 1])
        path, rows = compare("text", tmp, cfg, W, ids, {"source": "model", "model": "byte", "text": "t.txt",
                                                       "context": C, "continuation": N, "observe": {"window": WIN}})

        # the note of what the model's run measured: C prefill tokens, N decoded, positive rates; -q silences it
        r = subprocess.run([KVC, "run", path, "--no-timing", "--format", "csv"], capture_output=True, text=True)
        m = re.search(r"model: prefill (\d+) tokens in ([0-9.]+) s \((\d+) tokens/s, sgemm ([0-9.]+) GFLOP/s\); "
                      r"reference decode (\d+) tokens in ([0-9.]+) s \((\d+) tokens/s\)", r.stderr)
        rq = subprocess.run([KVC, "run", path, "--no-timing", "-q"], capture_output=True, text=True)
        checks.report("model-run-speed-note", None if m and int(m.group(1)) == C and int(m.group(5)) == N and
                      float(m.group(4)) > 0 and int(m.group(3)) > 0 and "prefill" not in rq.stderr else
                      "stderr %r, with -q %r" % (r.stderr, rq.stderr))

        # kvc synth -o DIR: the captured tensors, and the files config that studies them without the model
        out = os.path.join(tmp, "captured")
        r = subprocess.run([KVC, "synth", "-o", out, path], capture_output=True, text=True)
        if r.returncode != 0:
            checks.report("model-run-synth", "exit %d: %s" % (r.returncode, r.stderr.strip()))
        else:
            with torch.no_grad():
                _, K, V, Q = tm.oracle(cfg, W, ids[:C])
                full = [[(K[l, h], V[l, h]) for h in range(2)] for l in range(2)]
                _, _, _, Qc = tm.oracle(cfg, W, ids[C:C + N], pos0=C, ctx=full)
            want = {"keys": K, "values": V, "queries": Qc, "observe": Q[:, :, C - WIN:]}
            errs = {k: tm.rel(np.load(os.path.join(out, k + ".npy")), v.numpy()) for k, v in want.items()}
            checks.report("model-run-synth-tensors", None if max(errs.values()) < tm.TOL else
                          "relative errors against torch: %s" % errs)
            frows = run_csv(os.path.join(out, "files.json"))
            same = [a["attn_error"] == b["attn_error"] and a["bytes"] == b["bytes"] and
                    all(b[k] == "" for k in LM) for a, b in zip(rows, frows)]
            checks.report("model-run-synth-files", None if len(frows) == len(rows) and all(same) else
                          "the files config differs: %s vs %s" % (rows, frows))

        # token ids (.npy int64, 3 sequences, the second one used) with a vocabulary that is not byte-level, and
        # recall_acc over every other continuation token (the retrieval model's convention)
        cfg = model_cfg(300)
        W = tm.random_model(cfg, 6)
        tm.write_model(os.path.join(tmp, "ids"), cfg, W)
        seqs = rng.integers(0, 300, size=(3, C + N + 5))
        ids = [int(i) for i in seqs[1]]
        for j in (2, 6, 10):   # these answers are what the model predicts over the full cache: recall 1/2 for none
            with torch.no_grad():
                _, K, V, _ = tm.oracle(cfg, W, ids[:C])
                full = [[(K[l, h], V[l, h]) for h in range(2)] for l in range(2)]
                logits, _, _, _ = tm.oracle(cfg, W, ids[C:C + j], pos0=C, ctx=full)
            ids[C + j] = int(logits[j - 1].argmax())
        seqs[1] = ids
        np.save(os.path.join(tmp, "ids.npy"), seqs.astype(np.int64))
        compare("ids", tmp, cfg, W, ids, {"source": "model", "model": "ids", "token_ids": "ids.npy", "sequence": 1,
                                         "context": C, "continuation": N, "answers": {"start": 2, "step": 2}},
                answers=list(range(2, N + 1, 2)))

        # synthetic data: the lm columns exist and are empty
        syn = os.path.join(tmp, "syn.json")
        with open(syn, "w") as f:
            json.dump({"data": {"tokens": 16, "head_dim": 8, "keys": {"generator": "normal"},
                                "values": {"generator": "normal"}, "query": {"generator": "key_gaussian", "count": 2}},
                       "experiments": [{"method": "none"}]}, f)
        srow = run_csv(syn)[0]
        checks.report("model-run-synthetic-empty", None if all(k in srow and srow[k] == "" for k in LM) else
                      "lm columns of synthetic data: %s" % {k: srow.get(k) for k in LM})
    except RuntimeError as e:
        checks.report("model-run", str(e))
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
