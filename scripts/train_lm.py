#!/usr/bin/python3
"""train_lm.py: trains kvc's shipped byte-level language model `lm` (Llama architecture) on CPU.

  scripts/train_lm.py [--out models/lm] [--seed 1] [--threads 2] [--smoke] [options below]

Data: "The Debian Administrator's Handbook" by Raphael Hertzog and Roland Mas, as Debian ships it in the package
debian-handbook (section doc, main; licence GPL-2.0+ or CC-BY-SA-3.0, dual). Its English HTML pages
(/usr/share/doc/debian-handbook/html/en-US/*.html) are turned into plain UTF-8 text (navigation removed,
whitespace collapsed outside <pre>) in file-name order, about 1.2 MB. The package is read where installed, or
fetched with `apt-get download debian-handbook` into --data-dir. The last 5 % of the bytes are held out.

Model: vocab 256 (token = byte), hidden 256, 4 layers, 8 query heads / 2 KV heads (head_dim 32), intermediate
688, RoPE theta 10000, max_position_embeddings 2304, untied head (about 2.9 M parameters).
Training: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warm-up then cosine to a tenth of the
peak, gradient clipping 1.0; phase A at 512 tokens x 8 sequences, phase B at 2304 tokens x 2 sequences (each
layer recomputed in the backward pass) so that every position up to 2304 is trained (kvc runs 2048 + 128).
Batches are random windows of the training text drawn with numpy's PCG64 seeded by --seed; torch is seeded too
and limited to --threads cores. The loop stops early, and says so, if it would pass --time-limit minutes.
Budget: --time-limit (27 minutes) bounds the loop; phase A ends early when less than --reserve-b (8) minutes of
it are left, so that the long-sequence phase B always runs (positions past seq-a are trained only there).
README.md and train.log say how many steps of each phase ran.

Output (HF layout, loadable by kvc's engine and by transformers): OUT/config.json, OUT/model.safetensors (F16
unless --dtype F32), OUT/train.log (every line printed), OUT/README.md (data, licence, command, seed, result).
The held-out bits per byte are measured with the saved (F16-rounded) weights over non-overlapping 2304-byte
windows of the held-out text (the windows that fit whole).
"""
import argparse
import hashlib
import html.parser
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402

PACKAGE = "debian-handbook"
HTML_DIR = "usr/share/doc/debian-handbook/html/en-US"
BLOCK = {"p", "div", "br", "h1", "h2", "h3", "h4", "h5", "li", "pre", "tr", "dt", "dd", "title", "table"}


class Text(html.parser.HTMLParser):
    """Visible text of one page: blocks separated by blank lines, whitespace collapsed outside <pre>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.pre = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in BLOCK:
            self.parts.append("\n\n")
        self.pre += tag == "pre"

    def handle_endtag(self, tag):
        if tag in BLOCK:
            self.parts.append("\n\n")
        self.pre -= tag == "pre"

    def handle_data(self, data):
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def page_text(raw):
    for pat in (r"<head>.*?</head>", r'<div id="banner">.*?</div>', r'<p id="title">.*?</p>',
                r'<ul class="docnav[^"]*">.*?</ul>'):
        raw = re.sub(pat, "", raw, flags=re.S)
    p = Text()
    p.feed(raw)
    text = "".join(p.parts)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n[ \t]+(?=\S)", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def fetch_package(data_dir, log):
    """The en-US HTML directory and the package version: the installed package, else a downloaded .deb."""
    installed = os.path.join("/", HTML_DIR)
    if os.path.isdir(installed):
        v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True)
        return installed, v.stdout.strip() or "installed (version unknown)"
    os.makedirs(data_dir, exist_ok=True)
    debs = sorted(f for f in os.listdir(data_dir) if f.startswith(PACKAGE + "_") and f.endswith(".deb"))
    if not debs:
        log("downloading the Debian package %s with apt-get download into %s" % (PACKAGE, data_dir))
        r = subprocess.run(["apt-get", "download", PACKAGE], cwd=data_dir, capture_output=True, text=True)
        debs = sorted(f for f in os.listdir(data_dir) if f.startswith(PACKAGE + "_") and f.endswith(".deb"))
        if not debs:
            sys.exit("train_lm.py: apt-get download %s failed (run apt-get update first?): %s" %
                     (PACKAGE, r.stderr.strip()))
    deb = os.path.join(data_dir, debs[-1])
    root = os.path.join(data_dir, "extracted")
    if not os.path.isdir(os.path.join(root, HTML_DIR)):
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    v = subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True, check=True)
    return os.path.join(root, HTML_DIR), v.stdout.strip()


def corpus(data_dir, log):
    html_dir, version = fetch_package(data_dir, log)
    pages = sorted(f for f in os.listdir(html_dir) if f.endswith(".html") and f != "index.html")
    text = "".join(page_text(open(os.path.join(html_dir, f), encoding="utf-8").read()) for f in pages)
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    sha = hashlib.sha256(data.tobytes()).hexdigest()
    log("data: %s %s, %d pages of %s, %d bytes of UTF-8 text, sha256 %s" % (PACKAGE, version, len(pages),
                                                                            html_dir, len(data), sha))
    return data, version, sha


@torch.no_grad()
def bits_per_byte(model, data, window, max_windows=None, batch=4):
    """Mean next-byte loss in bits over the non-overlapping windows of window + 1 bytes that fit (each predicts
    its bytes 1..window from those before it in the window)."""
    model.eval()
    n = (len(data) - 1) // window
    if max_windows:
        n = min(n, max_windows)
    total = 0.0
    for s in range(0, n, batch):
        w = np.stack([data[i * window:i * window + window + 1] for i in range(s, min(n, s + batch))])
        w = torch.from_numpy(w.astype(np.int64))
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").item()
    model.train()
    return total / (n * window) / math.log(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/lm")
    ap.add_argument("--data-dir", default="build/data")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps-a", type=int, default=300, help="steps of phase A (short sequences)")
    ap.add_argument("--steps-b", type=int, default=40, help="steps of phase B (full-length sequences)")
    ap.add_argument("--seq-a", type=int, default=512)
    ap.add_argument("--batch-a", type=int, default=8)
    ap.add_argument("--seq-b", type=int, default=2304, help="also max_position_embeddings")
    ap.add_argument("--batch-b", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=688)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dtype", choices=("F16", "F32"), default="F16")
    ap.add_argument("--time-limit", type=float, default=27.0, help="minutes; the loop stops early past it")
    ap.add_argument("--reserve-b", type=float, default=8.0,
                    help="minutes of --time-limit kept for phase B: phase A ends early past time-limit - reserve-b")
    ap.add_argument("--smoke", action="store_true", help="a tiny configuration that runs in seconds (for tests)")
    a = ap.parse_args()
    if a.smoke:
        a.steps_a, a.steps_b, a.seq_a, a.batch_a, a.seq_b, a.batch_b = 4, 2, 64, 2, 160, 1
        a.hidden, a.layers, a.heads, a.kv_heads, a.inter = 64, 2, 4, 2, 96

    lt.setup_cpu(a.threads, a.seed)
    log = lt.Log(os.path.join(a.out, "train.log"))
    log("command: %s" % lt.command_line())
    log("torch %s, %d threads, seed %d" % (torch.__version__, torch.get_num_threads(), a.seed))
    data, version, sha = corpus(a.data_dir, log)
    split = int(len(data) * 0.95)
    train, held = data[:split], data[split:]
    log("train %d bytes, held-out %d bytes (the last 5 %%)" % (len(train), len(held)))

    cfg = lt.hf_config(256, a.hidden, a.layers, a.heads, a.kv_heads, a.inter, a.seq_b)
    model = lt.Llama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log("model: %s, %d parameters" % ({k: cfg[k] for k in ("hidden_size", "num_hidden_layers",
                                                              "num_attention_heads", "num_key_value_heads",
                                                              "head_dim", "intermediate_size",
                                                              "max_position_embeddings")}, n_params))
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.Generator(np.random.PCG64(a.seed))
    total = a.steps_a + a.steps_b
    warmup = max(1, min(100, total // 10))
    stopped, done_a = None, a.steps_a
    seen = 0
    step = 0
    while step < total:
        if log.elapsed() > a.time_limit * 60:
            stopped = step
            log("time limit of %.1f minutes reached: stopping after %d of %d steps" % (a.time_limit, step, total))
            break
        if step < a.steps_a and a.steps_b and log.elapsed() > (a.time_limit - a.reserve_b) * 60:
            done_a = step
            log("phase A ends after %d of %d steps: %.1f minutes of the limit are kept for phase B (the learning "
                "rate schedule goes on from step %d)" % (step, a.steps_a, a.reserve_b, a.steps_a))
            step = a.steps_a
            continue
        T, B = (a.seq_a, a.batch_a) if step < a.steps_a else (a.seq_b, a.batch_b)
        starts = rng.integers(0, len(train) - T - 1, size=B)
        batch = torch.from_numpy(np.stack([train[s:s + T + 1] for s in starts]).astype(np.int64))
        lr = lt.lr_at(step, total, a.lr, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(batch[:, :-1], checkpointing=T > 1024)
        loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        seen += B * T
        if step % 25 == 0 or step == total - 1 or step == a.steps_a:
            log("step %d/%d seq %d batch %d lr %.2e loss %.4f (%.3f bits/byte) grad-norm %.3f, %d bytes seen" %
                (step, total, T, B, lr, loss.item(), loss.item() / math.log(2), gnorm, seen))
        if (step + 1) % 100 == 0:
            log("step %d: held-out %.4f bits/byte (first 8 windows of %d)" %
                (step + 1, bits_per_byte(model, held, a.seq_b, 8), a.seq_b))
        step += 1

    readme_tail = []
    lt.save_model(a.out, model, a.dtype)
    bpb = bits_per_byte(model, held, a.seq_b)
    bpb_train = bits_per_byte(model, train, a.seq_b, max(1, len(held) // a.seq_b))
    log("saved %s/model.safetensors (%s) and config.json" % (a.out, a.dtype))
    log("held-out: %.4f bits/byte over %d bytes (saved weights); train sample: %.4f bits/byte" %
        (bpb, len(held), bpb_train))
    done_b = max(0, (total if stopped is None else stopped) - a.steps_a)
    if stopped is not None and stopped < a.steps_a:
        done_a, done_b = stopped, 0
    log("training time %.1f minutes: %d phase-A steps, %d phase-B steps%s" % (
        log.elapsed() / 60, done_a, done_b, "" if stopped is None else ", stopped by the time limit"))
    readme = """# lm: kvc's byte-level Llama language model

Trained by `scripts/train_lm.py` (kvc). Hugging Face layout: `config.json`, `model.safetensors` ({dtype}).
A token is a byte of UTF-8 text (vocab 256, no special tokens).

- Architecture: LlamaForCausalLM, hidden {hidden}, {layers} layers, {heads} query heads / {kv} KV heads,
  head_dim {hd}, intermediate {inter}, RoPE theta 10000, max_position_embeddings {maxpos}, {params} parameters.
- Data: "The Debian Administrator's Handbook" (Raphael Hertzog, Roland Mas), Debian package `{pkg}` version
  {version}, licence GPL-2.0+ or CC-BY-SA-3.0; the English HTML pages as plain text ({nbytes} bytes, sha256
  {sha}); the last 5 % held out.
- Command: `{cmd}` (seed {seed}, torch {torch}, {threads} threads).
- Steps: {sa} of the planned {pa} at {seqa} x {ba}, then {sb} of the planned {pb} at {seqb} x {bb}{stopped};
  {minutes:.1f} minutes.
- Held-out: **{bpb:.4f} bits per byte** ({nheld} bytes, windows of {seqb}, saved weights).
- Log: `train.log`.
""".format(dtype=a.dtype, hidden=a.hidden, layers=a.layers, heads=a.heads, kv=a.kv_heads, hd=a.hidden // a.heads,
           inter=a.inter, maxpos=a.seq_b, params=n_params, pkg=PACKAGE, version=version, nbytes=len(data), sha=sha,
           cmd=lt.command_line(), seed=a.seed, torch=torch.__version__, threads=a.threads,
           sa=done_a, pa=a.steps_a, seqa=a.seq_a, ba=a.batch_a, sb=done_b, pb=a.steps_b,
           seqb=a.seq_b, bb=a.batch_b, stopped="" if stopped is None else " (stopped by the time limit)",
           minutes=log.elapsed() / 60, bpb=bpb, nheld=len(held))
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(readme + "".join(readme_tail))


if __name__ == "__main__":
    main()
