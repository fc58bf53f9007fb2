"""llama_torch: what scripts/train_lm.py and scripts/train_recall.py share: a small Llama in PyTorch whose
parameter names and layouts are Hugging Face's (so its state_dict is an HF checkpoint), the writer of an
HF-layout model directory (config.json + model.safetensors), the training log, and the CPU/seed set-up.

Not a library for anything else: the test oracle of the C engine (tests/test_model_torch.py) is written
separately from the definition, so that these scripts and kvc are checked by a third party.

Architecture (LlamaForCausalLM): token embedding; per layer x += o_proj(attn(rope(q), rope(k), v)) after an
RMSNorm, x += down_proj(silu(gate_proj(h)) * up_proj(h)) after an RMSNorm; final RMSNorm; LM head (untied).
RoPE: half-split (rotate_half), inv_freq = theta^(-2i/D). No biases. Weights initialised N(0, 0.02) as HF does.
"""
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def setup_cpu(threads, seed):
    """Limits torch to `threads` cores and fixes every random seed the scripts use."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (a second call in one process)
        pass
    torch.manual_seed(seed)


def hf_config(vocab, hidden, layers, heads, kv_heads, inter, max_pos, theta=10000.0, eps=1e-5):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads, "intermediate_size": inter, "max_position_embeddings": max_pos,
        "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": None, "tie_word_embeddings": False,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "bos_token_id": None,
        "eos_token_id": None, "torch_dtype": "float32",
    }


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, self.hq, self.hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c["head_dim"]
        self.q_proj = nn.Linear(E, self.hq * self.d, bias=False)
        self.k_proj = nn.Linear(E, self.hkv * self.d, bias=False)
        self.v_proj = nn.Linear(E, self.hkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.hq * self.d, E, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.hq, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        g = self.hq // self.hkv
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        s = (q @ k.transpose(-1, -2)) * self.d ** -0.5
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.hq * self.d))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(E, I, bias=False)
        self.up_proj = nn.Linear(E, I, bias=False)
        self.down_proj = nn.Linear(I, E, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """model.* and lm_head.* parameters, named as Hugging Face names them."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Body(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        D = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
        self.register_buffer("inv_freq", inv, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids, checkpointing=False):
        """ids (B, T) -> logits (B, T, V). checkpointing: recompute each layer in the backward pass."""
        T = ids.shape[1]
        freqs = torch.arange(T, dtype=torch.int64).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            if checkpointing and self.training:
                x = checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))


def lr_at(step, total, peak, warmup):
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def save_safetensors(path, tensors, dtype):
    """tensors: name -> torch tensor; dtype "F32" or "F16". Written to a temporary, then renamed."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        b = (t.numpy().astype("<f4") if dtype == "F32" else t.to(torch.float16).numpy().astype("<f2")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def save_model(out, model, dtype, extra_files=None):
    """Writes out/config.json and out/model.safetensors (dtype F32 or F16); returns the saved weights as float32
    (rounded through dtype), loaded back into model so that every later evaluation sees what was saved."""
    os.makedirs(out, exist_ok=True)
    cfg = dict(model.config, torch_dtype="float16" if dtype == "F16" else "float32")
    state = {k: v for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(out, "model.safetensors"), state, dtype)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for name, text in (extra_files or {}).items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    if dtype == "F16":
        model.load_state_dict({k: v.to(torch.float16).to(torch.float32) for k, v in state.items()})


class Log:
    """Lines to stdout and to a log file, each with the seconds since the start."""

    def __init__(self, path):
        self.t0 = time.time()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.f = open(path, "w")

    def __call__(self, msg):
        line = "[%7.1fs] %s" % (time.time() - self.t0, msg)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()

    def elapsed(self):
        return time.time() - self.t0


def command_line():
    return " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
