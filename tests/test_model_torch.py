#!/usr/bin/python3
"""test_model_torch.py: kvc's Llama engine (src/model/llama.h) against a PyTorch forward pass.

The oracle below is written from the Llama definition (Touvron et al. 2023 and Hugging Face's modeling_llama /
modeling_rope_utils as documented), not from kvc's C: RMSNorm w * (x * rsqrt(mean(x^2) + eps)), RoPE with
rotate_half (dimension i pairs with i + D/2) and inv_freq = theta^(-2i/D) (linear and llama3 scaling),
grouped-query attention with a causal mask, SwiGLU MLP, final norm, LM head; float32 throughout. The random
models are written here in Hugging Face's layout (config.json + model.safetensors or a sharded index; F32, F16,
BF16) and run through the C helper build/tests/test_model (--run / --load).

Checks (relative error = max |kvc - torch| / max |torch|, limit 1e-4 for logits and for every layer's K, V, Q):
  * odd sizes: GQA 3:1, head_dim 48 (with hidden_size != heads * head_dim), untied head, vocab 300, 2 layers;
    in F32, F16 and BF16 (the oracle runs on the same rounded weights);
  * no head_dim key (hidden / heads), tied head, llama3 rope scaling; linear rope scaling; a sharded index;
    theta and scaling in transformers 5's "rope_parameters";
  * the continuation (llama_continue) over the captured cache against torch on the whole sequence, and over
    an evicted (random per-head subsets, one head empty) and perturbed cache against torch attending over the
    same rows;
  * the model of the training scripts (scripts/llama_torch.py) against the oracle;
  * the shipped models (models/lm, models/recall, when present) and any model directories named in
    $KVC_TEST_MODELS (colon-separated), on their own kind of input;
  * bad model directories: exit 2, one "kvc:" line on stderr naming the problem, nothing on stdout.
Skipped (no lines) when torch is not installed.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

import checks

try:
    import torch
except ImportError:
    print("test_model_torch.py: python3-torch is not installed; skipped", file=sys.stderr)
    sys.exit(0)

torch.set_num_threads(1)
HELPER = os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_model")
TOL = 1e-4

# ---- models in Hugging Face's layout ------------------------------------------------------------------------


def save_safetensors(path, tensors, dtype):
    """tensors: name -> float32 torch tensor; dtype "F32" | "F16" | "BF16"."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        if dtype == "F32":
            b = t.to(torch.float32).numpy().astype("<f4").tobytes()
        elif dtype == "F16":
            b = t.to(torch.float16).numpy().astype("<f2").tobytes()
        else:
            b = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def rounded(t, dtype):
    """The float32 values a reader gets back from t stored as dtype."""
    return t if dtype == "F32" else t.to(torch.float16 if dtype == "F16" else torch.bfloat16).to(torch.float32)


def random_model(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    E, L, I, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    Hq = cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", Hq)
    D = cfg.get("head_dim") or E // Hq

    def w(*shape, scale=1.0, base=0.0):
        return base + scale * (2 * torch.rand(*shape, generator=g) - 1)

    t = {"model.embed_tokens.weight": w(V, E)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = w(E, scale=0.2, base=1.0)
        t[p + "self_attn.q_proj.weight"] = w(Hq * D, E, scale=2 / E ** 0.5)
        t[p + "self_attn.k_proj.weight"] = w(Hkv * D, E, scale=2 / E ** 0.5)
        t[p + "self_attn.v_proj.weight"] = w(Hkv * D, E, scale=1 / E ** 0.5)
        t[p + "self_attn.o_proj.weight"] = w(E, Hq * D, scale=1 / (Hq * D) ** 0.5)
        t[p + "post_attention_layernorm.weight"] = w(E, scale=0.2, base=1.0)
        t[p + "mlp.gate_proj.weight"] = w(I, E, scale=1 / E ** 0.5)
        t[p + "mlp.up_proj.weight"] = w(I, E, scale=1 / E ** 0.5)
        t[p + "mlp.down_proj.weight"] = w(E, I, scale=1 / I ** 0.5)
    t["model.norm.weight"] = w(E, scale=0.2, base=1.0)
    if not cfg.get("tie_word_embeddings", False):
        t["lm_head.weight"] = w(V, E, scale=1 / E ** 0.5)
    return t


def write_model(d, cfg, tensors, dtype="F32", shards=0):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if not shards:
        save_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
        return
    names = list(tensors)
    wmap = {}
    for s in range(shards):
        part = names[s::shards]
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        save_safetensors(os.path.join(d, fn), {n: tensors[n] for n in part}, dtype)
        wmap.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f, indent=2)


# ---- the oracle: a Llama forward pass from the definition ---------------------------------------------------


def inv_freq(cfg):
    E, Hq = cfg["hidden_size"], cfg["num_attention_heads"]
    D = cfg.get("head_dim") or E // Hq
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wavelen = 2 * np.pi / inv
        scaled = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def oracle(cfg, W, ids, pos0=0, ctx=None):
    """Runs ids at positions pos0.. . ctx: None, or ctx[l][h] = (K (n, D), V (n, D)) post-RoPE context rows that
    every token sees. Returns logits (T, V) and the post-RoPE K, V (L, Hkv, T, D) and Q (L, Hq, T, D)."""
    E, L, Hq = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", Hq)
    D = cfg.get("head_dim") or E // Hq
    G, eps, T = Hq // Hkv, cfg.get("rms_norm_eps", 1e-6), len(ids)
    pos = torch.arange(pos0, pos0 + T, dtype=torch.int64).float()
    freqs = pos[:, None] * inv_freq(cfg)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    Ks, Vs, Qs = [], [], []
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = "model.layers.%d." % l
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, Hq, D).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        Ks.append(k), Vs.append(v), Qs.append(q)
        heads = []
        for hq in range(Hq):
            kh = hq // G
            keys, vals, vis = k[kh], v[kh], causal
            if ctx is not None:
                ck, cv = ctx[l][kh]
                keys, vals = torch.cat((ck, keys)), torch.cat((cv, vals))
                vis = torch.cat((torch.ones(T, ck.shape[0], dtype=torch.bool), causal), dim=1)
            s = (q[hq] @ keys.T) * D ** -0.5
            s = s.masked_fill(~vis, float("-inf"))
            heads.append(torch.softmax(s, dim=-1) @ vals)
        o = torch.cat(heads, dim=-1)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate = h @ W[p + "mlp.gate_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    logits = rms_norm(x, W["model.norm.weight"], eps) @ head.T
    return logits, torch.stack(Ks), torch.stack(Vs), torch.stack(Qs)


# ---- comparisons --------------------------------------------------------------------------------------------


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    den = np.max(np.abs(b))
    return float(np.max(np.abs(a - b)) / den) if den > 0 else float(np.max(np.abs(a - b)))


def run_helper(args):
    return subprocess.run([HELPER] + args, capture_output=True, text=True)


def compare_run(name, d, cfg, W, ids, C, tmp, mask=None, kv=None):
    """Runs the helper on ids (prefill C, continue the rest) and checks everything against the oracle."""
    out = os.path.join(tmp, "out-" + name)
    os.makedirs(out, exist_ok=True)
    tok = os.path.join(out, "tokens.npy")
    np.save(tok, np.asarray(ids, np.float64))
    args = ["--run", d, tok, str(C), out]
    if mask is not None:
        for fn, a in (("mask.npy", mask), ("Ks.npy", kv[0]), ("Vs.npy", kv[1])):
            np.save(os.path.join(out, fn), np.asarray(a, np.float64))
        args += [os.path.join(out, fn) for fn in ("mask.npy", "Ks.npy", "Vs.npy")]
    r = run_helper(args)
    if r.returncode != 0:
        checks.report(name, "helper exited %d: %s" % (r.returncode, r.stderr.strip()))
        return None
    got = {k: np.load(os.path.join(out, k + ".npy")) for k in ("logits", "K", "V", "Q")}
    with torch.no_grad():
        lg, K, V, Q = oracle(cfg, W, ids[:C])
    errs = {"logits": rel(got["logits"], lg)}
    for l in range(K.shape[0]):
        errs["K%d" % l] = rel(got["K"][l], K[l])
        errs["V%d" % l] = rel(got["V"][l], V[l])
        errs["Q%d" % l] = rel(got["Q"][l], Q[l])
    worst = max(errs, key=errs.get)
    checks.report(name + "-prefill", None if errs[worst] <= TOL else "%s rel %.3g > %g" % (worst, errs[worst], TOL))
    print("  %s: prefill logits rel %.2e, worst K/V/Q %s rel %.2e" % (name, errs["logits"], worst, errs[worst]))
    if len(ids) > C:
        cl = np.load(os.path.join(out, "cont_logits.npy"))
        cq = np.load(os.path.join(out, "cont_Q.npy"))
        with torch.no_grad():
            if mask is None:  # the whole sequence, uncompressed
                full, _, _, Qf = oracle(cfg, W, ids)
                ref, refq = full[C:], Qf[:, :, C:]
            else:  # the continuation over exactly the supplied rows
                L, Hkv = mask.shape[:2]
                ctx = [[(torch.tensor(kv[0][l, h][mask[l, h] != 0]), torch.tensor(kv[1][l, h][mask[l, h] != 0]))
                        for h in range(Hkv)] for l in range(L)]
                ref, _, _, refq = oracle(cfg, W, ids[C:], pos0=C, ctx=ctx)
        e, eq = rel(cl, ref), rel(cq, refq)
        checks.report(name + "-continue", None if max(e, eq) <= TOL else "logits rel %.3g, Q rel %.3g" % (e, eq))
        print("  %s: continuation logits rel %.2e, queries rel %.2e" % (name, e, eq))
    return got


# ---- the cases ----------------------------------------------------------------------------------------------

BASE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 100, "num_hidden_layers": 2,
    "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 48, "intermediate_size": 136,
    "vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "rope_scaling": None, "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
    "torch_dtype": "float32",
}


def good_models(tmp):
    rng = np.random.default_rng(7)
    ids = [int(i) for i in rng.integers(0, 300, size=96)]
    C = 64
    W32 = random_model(BASE, 1)
    for dtype in ("F32", "F16", "BF16"):
        d = os.path.join(tmp, "odd-" + dtype)
        write_model(d, BASE, W32, dtype)
        W = {k: rounded(v, dtype) for k, v in W32.items()}
        got = compare_run("model-torch-odd-" + dtype.lower(), d, BASE, W, ids, C, tmp)
        if dtype == "F32" and got is not None:
            # evicted and perturbed context rows: random per-head subsets (one head keeps nothing), noise
            L, Hkv = 2, 2
            mask = rng.random((L, Hkv, C)) < 0.6
            mask[1, 0] = False
            mask[0, 1, -1] = True
            noise = lambda a: a + 0.05 * np.std(a) * rng.standard_normal(a.shape)
            Ks = noise(got["K"]).astype(np.float32)
            Vs = noise(got["V"]).astype(np.float32)
            compare_run("model-torch-evicted", d, BASE, W, ids, C, tmp, mask=mask.astype(np.float64), kv=(Ks, Vs))

    cfg = dict(BASE, hidden_size=144, num_attention_heads=3, num_key_value_heads=1, intermediate_size=200,
               tie_word_embeddings=True, rope_theta=50000.0,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64})
    del cfg["head_dim"]
    d = os.path.join(tmp, "tied-llama3")
    W = random_model(cfg, 2)
    write_model(d, cfg, W)
    compare_run("model-torch-tied-llama3", d, cfg, W, ids, C, tmp)
    r = run_helper(["--load", d])
    got = [float(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("inv_freq")]
    want = inv_freq(cfg).numpy()
    e = rel(got, want)
    checks.report("model-torch-llama3-inv-freq", None if e <= 1e-6 else "rel %.3g" % e)

    # transformers 5 keeps theta and the scaling in "rope_parameters"
    cfg5 = {k: v for k, v in BASE.items() if k not in ("rope_theta", "rope_scaling")}
    cfg5["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0}
    d = os.path.join(tmp, "rope-parameters")
    write_model(d, cfg5, random_model(BASE, 6))
    r = run_helper(["--load", d])
    got = [float(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("inv_freq")]
    want = inv_freq(dict(BASE, rope_theta=50000.0, rope_scaling={"type": "linear", "factor": 2.0})).numpy()
    e = rel(got, want)
    checks.report("model-torch-rope-parameters", None if e <= 1e-6 else "rel %.3g (%s)" % (e, r.stderr.strip()))

    cfg = dict(BASE, rope_scaling={"type": "linear", "factor": 4.0}, num_hidden_layers=3)
    d = os.path.join(tmp, "linear-sharded")
    W = random_model(cfg, 3)
    write_model(d, cfg, W, "F32", shards=3)
    compare_run("model-torch-linear-sharded", d, cfg, W, ids[:80], 50, tmp)


def load_safetensors(path):
    """name -> float32 torch tensor, for F32 / F16 / BF16 files (the format's definition, no library)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[b:end]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[e["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


def training_model():
    """scripts/llama_torch.py (the model the training scripts train) computes what the oracle computes."""
    sys.path.insert(0, "scripts")
    import llama_torch
    cfg = dict(BASE, head_dim=24, num_attention_heads=4, num_key_value_heads=2)
    model = llama_torch.Llama(cfg)
    W = random_model(cfg, 5)
    model.load_state_dict(W)
    ids = [int(i) for i in np.random.default_rng(3).integers(0, 300, size=50)]
    with torch.no_grad():
        got = model(torch.tensor([ids]))[0]
        want = oracle(cfg, W, ids)[0]
    e = rel(got, want)
    checks.report("model-torch-training-model", None if e <= 1e-5 else "rel %.3g" % e)


def shipped_models(tmp):
    """The models the project ships (models/*), and any directories named in $KVC_TEST_MODELS (colon-separated):
    each against the oracle on its own kind of input."""
    dirs = [os.path.join("models", d) for d in ("lm", "recall") if os.path.isdir(os.path.join("models", d))]
    dirs += [d for d in os.environ.get("KVC_TEST_MODELS", "").split(":") if d]
    text = np.frombuffer(open("README.md", "rb").read(), np.uint8)
    for d in dirs:
        cfg = json.load(open(os.path.join(d, "config.json")))
        W = load_safetensors(os.path.join(d, "model.safetensors"))
        evals = sorted(f for f in os.listdir(os.path.join(d, "eval"))) if os.path.isdir(os.path.join(d, "eval")) \
            else []
        if evals:  # a recall model: its first evaluation sequence, the context then the queries
            seq = np.load(os.path.join(d, "eval", evals[0]))[0]
            task = json.load(open(os.path.join(d, "task.json")))
            C = len(seq) - 1 - 2 * task["queries"]
            ids = [int(t) for t in seq]
        else:  # a byte-level model: the first bytes of README.md
            C = min(256, cfg["max_position_embeddings"] - 64)
            ids = [int(t) % cfg["vocab_size"] for t in text[:C + 64]]
        compare_run("model-torch-shipped-" + os.path.basename(os.path.normpath(d)), d, cfg, W, ids, C, tmp)


def bad_models(tmp):
    W = random_model(BASE, 4)
    cases = []

    def case(name, want, cfg=None, tensors=None, dtype="F32", shards=0, after=None):
        d = os.path.join(tmp, "bad-" + name)
        write_model(d, cfg if cfg is not None else BASE, tensors if tensors is not None else W, dtype, shards)
        if after:
            after(d)
        cases.append((name, d, want))

    case("no-config", "config.json: cannot open", after=lambda d: os.remove(os.path.join(d, "config.json")))
    case("no-weights", "no weights", after=lambda d: os.remove(os.path.join(d, "model.safetensors")))
    case("gpt2", '"architectures": ["GPT2LMHeadModel"] is not supported',
         cfg=dict(BASE, architectures=["GPT2LMHeadModel"], model_type="gpt2"))
    less = dict(W)
    del less["model.layers.1.mlp.up_proj.weight"]
    case("missing-tensor", 'tensor "model.layers.1.mlp.up_proj.weight" is missing', tensors=less)
    wrong = dict(W, **{"model.layers.0.self_attn.k_proj.weight": W["model.layers.0.self_attn.q_proj.weight"]})
    case("misshaped-tensor", 'tensor "model.layers.0.self_attn.k_proj.weight": config.json implies shape (96, 100) '
         '(got (288, 100))', tensors=wrong)
    nohd = dict(BASE)
    del nohd["head_dim"]
    case("hidden-not-divisible", "hidden_size must be divisible by num_attention_heads", cfg=nohd)
    case("kv-not-dividing", "num_key_value_heads must divide num_attention_heads (got 4 KV heads for 6",
         cfg=dict(BASE, num_key_value_heads=4))
    nan = dict(W, **{"model.norm.weight": W["model.norm.weight"].clone()})
    nan["model.norm.weight"][5] = float("nan")
    case("nonfinite", 'tensor "model.norm.weight": value at flat index 5 is not finite (got nan)', tensors=nan)
    inf = dict(W, **{"model.embed_tokens.weight": W["model.embed_tokens.weight"] * 1e6})
    case("nonfinite-f16", "is not finite (got", tensors=inf, dtype="F16")
    case("overflow", "sizes overflow", cfg=dict(BASE, vocab_size=2147483647, hidden_size=2147483647, head_dim=2,
                                                intermediate_size=2147483647))
    case("rope-yarn", 'rope scaling type "yarn" is not supported',
         cfg=dict(BASE, rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    case("rope-llama3-no-factor", '"rope_scaling.factor" is missing',
         cfg=dict(BASE, rope_scaling={"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64}))
    case("odd-head-dim", "head_dim must be even", cfg=dict(BASE, head_dim=47))
    case("bias", '"attention_bias": true is not supported', cfg=dict(BASE, attention_bias=True))
    case("interleaved", '"rope_interleaved": true is not supported', cfg=dict(BASE, rope_interleaved=True))
    case("activation", '"hidden_act" must be "silu" (got "gelu")', cfg=dict(BASE, hidden_act="gelu"))
    case("missing-required", '"intermediate_size" is missing',
         cfg={k: v for k, v in BASE.items() if k != "intermediate_size"})
    case("negative-size", '"num_hidden_layers" must be an integer in 1..2147483647 (got -2)',
         cfg=dict(BASE, num_hidden_layers=-2))
    case("shard-missing", "model-00002-of-00002.safetensors: cannot open", shards=2,
         after=lambda d: os.remove(os.path.join(d, "model-00002-of-00002.safetensors")))

    def drop_from_map(d):
        p = os.path.join(d, "model.safetensors.index.json")
        idx = json.load(open(p))
        del idx["weight_map"]["model.norm.weight"]
        json.dump(idx, open(p, "w"))
    case("index-missing-tensor", 'tensor "model.norm.weight" is missing from "weight_map"', shards=2,
         after=drop_from_map)

    def truncate(d):
        p = os.path.join(d, "model.safetensors")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 4)
    case("truncated", "data_offsets run past the end", after=truncate)

    for name, d, want in cases:
        r = run_helper(["--load", d])
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 2 and r.stdout == "" and len(lines) == 1 and lines[0].startswith("kvc: ") and \
            want in lines[0]
        checks.report("model-bad-" + name, None if ok else "exit %d, stdout %r, stderr %r (want %r)" %
                      (r.returncode, r.stdout[:80], r.stderr.strip(), want))


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-model-torch-")
    try:
        good_models(tmp)
        training_model()
        shipped_models(tmp)
        bad_models(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
