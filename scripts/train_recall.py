#!/usr/bin/python3
"""train_recall.py: trains kvc's shipped retrieval model `recall` (Llama architecture) on CPU, on multi-query
associative recall over long contexts: key-value pairs spread through up to 2560 tokens of filler, queries at
the end. Its use in kvc: how much retrieval accuracy a compressed cache keeps, against context length.

  scripts/train_recall.py [--out models/recall] [--seed 1] [--threads 2] [--smoke] [options below]

The task (token ids, vocab 2210; nothing is a byte):
  1 the query marker; 2..65 the 64 query keys q(k); 66..97 the 32 answer values a(v); 98..161 the 64 fillers;
  162 + 32k + v (162..2209) the pair token "key k has value v".
  A sequence: a context of C tokens, then the query region [1, q(k_1), a(v_1), ..., q(k_M), a(v_M)].
  Context: P pair tokens with distinct keys (values drawn independently) at random distinct places, every other
  token a filler drawn uniformly. Queries: M of the P keys, distinct, in random order, each followed by its
  value. The model must predict a(v_j) from q(k_j): accuracy is the fraction of the M answers whose most likely
  next token (the logits at q(k_j)) is a(v_j). The loss is on the answers only. Drawn with numpy's PCG64 (the
  training stream seeded by --seed, each evaluation set by its own seed).
  Each pair is ONE context token, so that its key and value live in one cache row per layer and head: the
  answer needs that row (a content match of the query against it), and nothing else in the context helps.
  (With "k v" as two tokens a small model first has to grow a previous-token head; on 2 cores that plateau
  outlasted the budget.) The embedding table starts factorized (pair(k, v) = e_k + e_v, see factorized_init).

Model: hidden 128, 2 layers, 4 query heads / 2 KV heads (head_dim 32), intermediate 256, RoPE theta 10000,
max_position_embeddings 2560, untied head. Training: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices),
warm-up then cosine. Phase A (short, a curriculum): at the fraction f of its steps, P = 2..(3 + 61f) pairs
in a context of P..(1 + 7f)P tokens, every pair queried, 16 sequences a step. Phase B (long): contexts of 256..(2560 - 1 - 2M) tokens with P = 64 and M = 32, 4 sequences
a step, so that every distance up to 2560 is trained. torch limited to --threads cores; the loop stops early,
and says so, past --time-limit minutes.

Output (HF layout): OUT/config.json, OUT/model.safetensors (F16 unless --dtype F32), OUT/train.log, OUT/README.md,
and the evaluation sets OUT/eval/C{512,1024,2048}.tokens.npy: int32 (16, C + 1 + 2M) sequences whose first C
tokens are the context and the rest the continuation; OUT/task.json says where the answers are.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402

MARK = 1
QKEYS = 2          # q(k) = 2 + k, k in 0..NKEYS-1
AVALS = 66         # a(v) = 66 + v, v in 0..NVALS-1
FILLER = (98, 162)
PAIRS = 162        # pair(k, v) = 162 + NVALS * k + v
NKEYS, NVALS = 64, 32
VOCAB = PAIRS + NKEYS * NVALS


def sequence(rng, C, P, M):
    """One task sequence (C + 1 + 2M token ids, int64) and the indices of its M answers."""
    ctx = rng.integers(FILLER[0], FILLER[1], size=C)
    keys = rng.choice(NKEYS, size=P, replace=False)
    vals = rng.integers(0, NVALS, size=P)
    ctx[rng.choice(C, size=P, replace=False)] = PAIRS + NVALS * keys + vals
    q = rng.choice(P, size=M, replace=False)
    tail = np.empty(1 + 2 * M, dtype=np.int64)
    tail[0] = MARK
    tail[1::2], tail[2::2] = QKEYS + keys[q], AVALS + vals[q]
    answers = C + 2 + 2 * np.arange(M)
    return np.concatenate([ctx, tail]).astype(np.int64), answers


@torch.no_grad()
def factorized_init(model):
    """Starts the embedding table factorized: one random vector per key (e_k) and per value (e_v), N(0, 0.02^2)
    each; q(k) = e_k, a(v) = e_v, pair(k, v) = e_k + e_v, and the head's row of a(v) = e_v. Only the start:
    every weight trains freely (and the model stays a plain Llama); it lets all the pair tokens of a key or a
    value teach one vector instead of 2048 separate ones."""
    E, H = model.model.embed_tokens.weight, model.lm_head.weight
    ek = torch.randn(NKEYS, E.shape[1]) * 0.02
    ev = torch.randn(NVALS, E.shape[1]) * 0.02
    E[QKEYS:QKEYS + NKEYS] = ek
    E[AVALS:AVALS + NVALS] = ev
    E[PAIRS:PAIRS + NKEYS * NVALS] = (ek[:, None, :] + ev[None, :, :]).reshape(-1, E.shape[1])
    H[AVALS:AVALS + NVALS] = ev


def batch(rng, B, C, P, M):
    seqs, ans = zip(*(sequence(rng, C, P, M) for _ in range(B)))
    return torch.from_numpy(np.stack(seqs)), torch.from_numpy(answer_mask(ans, len(seqs[0])))


def answer_mask(answers, T):
    m = np.zeros((len(answers), T), dtype=bool)
    for b, a in enumerate(answers):
        m[b, a] = True
    return m


def answer_loss(model, x, mask, checkpointing=False):
    """Cross-entropy of the answers and their accuracy; x (B, T), mask (B, T): x[b, p] is an answer, predicted
    by the logits at p - 1."""
    logits = model(x[:, :-1], checkpointing=checkpointing)
    sel = mask[:, 1:]
    lg, target = logits[sel], x[:, 1:][sel]
    loss = F.cross_entropy(lg, target)
    acc = (lg.argmax(-1) == target).float().mean().item()
    return loss, acc


@torch.no_grad()
def evaluate(model, seqs, answers):
    model.eval()
    x, mask = torch.from_numpy(seqs.astype(np.int64)), torch.from_numpy(answer_mask(answers, seqs.shape[1]))
    accs = [answer_loss(model, x[i:i + 4], mask[i:i + 4])[1] * len(x[i:i + 4]) for i in range(0, len(x), 4)]
    model.train()
    return sum(accs) / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/recall")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps-a", type=int, default=1000)
    ap.add_argument("--batch-a", type=int, default=16)
    ap.add_argument("--steps-b", type=int, default=150)
    ap.add_argument("--batch-b", type=int, default=4)
    ap.add_argument("--max-pos", type=int, default=2560)
    ap.add_argument("--queries", type=int, default=32, help="M")
    ap.add_argument("--pairs", type=int, default=64, help="P in phase B and in the evaluation sets")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dtype", choices=("F16", "F32"), default="F16")
    ap.add_argument("--eval-contexts", default="512,1024,2048")
    ap.add_argument("--eval-size", type=int, default=16)
    ap.add_argument("--time-limit", type=float, default=27.0, help="minutes; the loop stops early past it")
    ap.add_argument("--smoke", action="store_true", help="a tiny configuration that runs in seconds (for tests)")
    a = ap.parse_args()
    if a.smoke:
        a.steps_a, a.batch_a, a.steps_b, a.batch_b, a.max_pos = 4, 4, 2, 2, 320
        a.queries, a.pairs, a.hidden, a.inter, a.eval_contexts, a.eval_size = 8, 16, 64, 96, "128,256", 4
    M, P = a.queries, a.pairs
    contexts = [int(c) for c in a.eval_contexts.split(",")]
    if P > min(NKEYS, min(contexts) // 2) or M > P or max(contexts) + 1 + 2 * M > a.max_pos:
        sys.exit("train_recall.py: need queries <= pairs <= 64 and pairs <= C/2, C + 1 + 2*queries <= max-pos "
                 "(got queries %d, pairs %d, contexts %s, max-pos %d)" % (M, P, contexts, a.max_pos))

    lt.setup_cpu(a.threads, a.seed)
    log = lt.Log(os.path.join(a.out, "train.log"))
    log("command: %s" % lt.command_line())
    log("torch %s, %d threads, seed %d" % (torch.__version__, torch.get_num_threads(), a.seed))
    cfg = lt.hf_config(VOCAB, a.hidden, a.layers, a.heads, a.kv_heads, a.inter, a.max_pos)
    model = lt.Llama(cfg)
    factorized_init(model)
    n_params = sum(p.numel() for p in model.parameters())
    log("model: hidden %d, %d layers, %d/%d heads, head_dim %d, intermediate %d, max_position_embeddings %d, "
        "%d parameters" % (a.hidden, a.layers, a.heads, a.kv_heads, a.hidden // a.heads, a.inter, a.max_pos,
                           n_params))
    evals = {}
    for C in contexts:
        erng = np.random.Generator(np.random.PCG64(1000 + C))
        seqs, ans = zip(*(sequence(erng, C, P, M) for _ in range(a.eval_size)))
        evals[C] = (np.stack(seqs).astype(np.int32), np.stack(ans))

    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    rng = np.random.Generator(np.random.PCG64(a.seed))
    total = a.steps_a + a.steps_b
    warmup = max(1, min(100, total // 10))
    stopped, run_acc = None, []
    cmax = a.max_pos - 1 - 2 * M
    for step in range(total):
        if log.elapsed() > a.time_limit * 60:
            stopped = step
            log("time limit of %.1f minutes reached: stopping after %d of %d steps" % (a.time_limit, step, total))
            break
        if step < a.steps_a:  # curriculum: from a few pairs and no filler to P pairs in 8P tokens
            f = step / a.steps_a
            Pa = int(rng.integers(2, 4 + int((P - 3) * f)))
            C = max(Pa, int(Pa * rng.uniform(1.0, 1.0 + 7.0 * f)))
            x, ans = batch(rng, a.batch_a, C, Pa, Pa)
            kind = "A"
        else:
            C = int(rng.integers(256, cmax + 1))
            x, ans = batch(rng, a.batch_b, C, P, M)
            kind = "B"
        lr = lt.lr_at(step, total, a.lr, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, acc = answer_loss(model, x, ans, checkpointing=x.shape[1] > 1024)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_acc.append(acc)
        if step % 25 == 0 or step == total - 1:
            log("step %d/%d phase %s context %d lr %.2e loss %.4f accuracy %.3f (mean of the last 25: %.3f)" %
                (step, total, kind, x.shape[1], lr, loss.item(), acc,
                 float(np.mean(run_acc[-25:]))))
        if (step + 1) % 500 == 0:
            log("step %d: evaluation accuracy %s" % (step + 1, ", ".join(
                "C=%d %.3f" % (C, evaluate(model, *evals[C])) for C in contexts)))

    lt.save_model(a.out, model, a.dtype)
    os.makedirs(os.path.join(a.out, "eval"), exist_ok=True)
    accs = {}
    for C in contexts:
        np.save(os.path.join(a.out, "eval", "C%d.tokens.npy" % C), evals[C][0])
        accs[C] = evaluate(model, *evals[C])
    task = {
        "task": "multi-query associative recall", "vocab_size": VOCAB,
        "vocab": {"query_marker": MARK, "query_key": "%d + k" % QKEYS, "answer_value": "%d + v" % AVALS,
                  "filler": list(FILLER), "pair": "%d + %d * k + v" % (PAIRS, NVALS), "keys": NKEYS,
                  "values": NVALS},
        "pairs": P, "queries": M, "eval_sets": {str(C): "eval/C%d.tokens.npy" % C for C in contexts},
        "layout": "tokens[:C] is the context; the continuation tokens[C:] is [query_marker, k_1, v_1, ..., k_M, "
                  "v_M]; answer j (0-based) is continuation token 2j+2, predicted by the logits after "
                  "continuation token 2j+1 (the key k_{j+1})",
        "accuracy_saved_weights": {str(C): accs[C] for C in contexts},
    }
    with open(os.path.join(a.out, "task.json"), "w") as f:
        json.dump(task, f, indent=2)
        f.write("\n")
    log("saved %s: config.json, model.safetensors (%s), task.json, eval/" % (a.out, a.dtype))
    log("evaluation accuracy (saved weights, %d sequences each): %s" % (a.eval_size, ", ".join(
        "C=%d %.3f" % (C, accs[C]) for C in contexts)))
    log("training time %.1f minutes%s" % (log.elapsed() / 60, "" if stopped is None else
                                          ", stopped by the time limit at step %d" % stopped))
    readme = """# recall: kvc's associative-recall Llama model

Trained by `scripts/train_recall.py` (kvc) on synthetic multi-query associative recall (the task is defined in
the script's docstring and `task.json`). Hugging Face layout: `config.json`, `model.safetensors` ({dtype}).

- Architecture: LlamaForCausalLM, hidden {hidden}, {layers} layers, {heads} query heads / {kv} KV heads,
  head_dim {hd}, intermediate {inter}, RoPE theta 10000, max_position_embeddings {maxpos}, {params} parameters.
- Data: generated by the script (numpy PCG64), no external data; {P} key-value pairs in the context, {M} queries.
- Command: `{cmd}` (seed {seed}, torch {torch}, {threads} threads).
- Steps: {steps}{stopped}; {minutes:.1f} minutes.
- Accuracy of the saved weights on `eval/` ({n} sequences each): {accs}.
- Log: `train.log`.
""".format(dtype=a.dtype, hidden=a.hidden, layers=a.layers, heads=a.heads, kv=a.kv_heads, hd=a.hidden // a.heads,
           inter=a.inter, maxpos=a.max_pos, params=n_params, P=P, M=M, cmd=lt.command_line(), seed=a.seed,
           torch=torch.__version__, threads=a.threads, steps=total if stopped is None else stopped,
           stopped="" if stopped is None else " (stopped by the time limit)", minutes=log.elapsed() / 60,
           n=a.eval_size, accs=", ".join("context %d: %.3f" % (C, accs[C]) for C in contexts))
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(readme)


if __name__ == "__main__":
    main()
