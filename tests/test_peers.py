#!/usr/bin/python3
"""The peer-exact variants of README "Methods" ("What the peers do") against numpy transcriptions of the peers'
own code, not of kvc's spec:

  kivi residual_rule "kivi"   jy-yuan/KIVI models/llama_kivi.py, LlamaFlashAttention_KIVI.forward (prefill
                              branch: key_states_full / value_states_full) and quant/new_pack.py,
                              triton_quantize_and_pack_along_last_dim (min, max, scale, clamp, round) and
                              unpack_and_dequant_*cache (q * scale + mn)
  tova heads "layer"          schwartz-lab-NLP/TOVA src/tova_cache.py, TOVACache.reduce
  h2o normalize, recent 0     NVIDIA/kvpress kvpress/presses/observed_attention_press.py, ObservedAttentionPress.score
  snapkv avg, window 64       kvpress/presses/snapkv_press.py, SnapKVPress.score and compute_window_attention;
                              FasterDecoding/SnapKV snapkv/monkeypatch/snapkv_utils.py, SnapKVCluster.update_kv
  compression_ratio           kvpress/presses/scorer_press.py, ScorerPress.compress (knorm_press.py,
                              streaming_llm_press.py for knorm and sink_window)

Each check writes one config, computes what the peer would keep (or read back) on the same data (tests/oracle.py's
make_data, which is kvc's data bit for bit), lets the oracle measure every column on that (oracle.run_config's
layer_fn), and compares with ./kvc run --format csv within the tolerances of tests/difftools.py (bytes exact,
the rest relative 1e-9). Controls: kvc's default variant must differ from the peer's on the same data (else the
check could not tell the two apart). torch is not needed: the peers' tensor code is written out in numpy, each
step in the peer's order (topk ties, which torch leaves unspecified, go to the earlier token). Also the messages
for bad values of the new parameters (ERRORS).

Run from the project root: /usr/bin/python3 tests/test_peers.py
Prints "PASS peers-<name>" / "FAIL peers-<name>: ..." per check; exits 1 on any failure (configs kept in a temp dir).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402  (tests/checks.py: PASS/FAIL lines)
import difftools  # noqa: E402
import oracle  # noqa: E402
from checks import report  # noqa: E402

DATA = {"layers": 2, "kv_heads": 4, "q_heads": 8, "tokens": 96, "head_dim": 16,
        "keys": {"generator": "lowrank", "rank": 6, "scale": 0.5, "noise": 0.1},
        "values": {"generator": "normal"}, "head_correlation": {"rho": 0.6},
        "query": {"generator": "look_back", "count": 3, "weight": 0.5, "noise": 0.5},
        "observe": {"window": 12, "noise": 0.3}}


# ---------------------------------------------------------------- torch helpers, in numpy

def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def topk_indices(scores, k):
    """torch.topk(scores, k, dim=-1).indices, ties to the earlier index (torch leaves them unspecified)."""
    return np.argsort(-scores, axis=-1, kind="stable")[..., :k]


def avg_pool1d(x, k):
    """F.avg_pool1d(x, kernel_size=k, padding=k // 2, stride=1) (count_include_pad: zeros count)."""
    h = k // 2
    xp = np.concatenate([np.zeros(x.shape[:-1] + (h,)), x, np.zeros(x.shape[:-1] + (h,))], axis=-1)
    return np.stack([xp[..., t:t + k].sum(axis=-1) / k for t in range(x.shape[-1])], axis=-1)


def max_pool1d(x, k):
    """F.max_pool1d(x, kernel_size=k, padding=k // 2, stride=1) (padding is -inf)."""
    h = k // 2
    pad = np.full(x.shape[:-1] + (h,), -np.inf)
    xp = np.concatenate([pad, x, pad], axis=-1)
    return np.stack([xp[..., t:t + k].max(axis=-1) for t in range(x.shape[-1])], axis=-1)


def repeat_kv(x, n_rep):
    """transformers' repeat_kv on (num_key_value_heads, T, D): each KV head n_rep times in a row."""
    return np.repeat(x, n_rep, axis=0)


def window_attention(d, l, Ka, window):
    """kvpress SnapKVPress.compute_window_attention: the last `window` queries (here the observation queries,
    post-RoPE like kvpress's) against every key, causal mask triu(-inf, diagonal=k_len - window + 1), softmax.
    (num_heads, window, k_len), before kvpress drops the window's own columns."""
    H, T, D = Ka[l].shape
    G = d.Hq // H
    q = d.O[l][:, -window:, :]
    k = repeat_kv(Ka[l], G)
    s = np.einsum("hwd,htd->hwt", q, k) / math.sqrt(D)
    mask = np.triu(np.full((window, T), -np.inf), k=T - window + 1)
    return softmax(s + mask)


# ---------------------------------------------------------------- the peers

def kvpress_n_kept(k_len, compression_ratio):
    """ScorerPress.compress: n_kept = int(k_len * (1 - self.compression_ratio))."""
    return int(k_len * (1 - compression_ratio))


def scorer_compress(scores, compression_ratio):
    """ScorerPress.compress: per KV head, the n_kept tokens with the largest scores."""
    n_kept = kvpress_n_kept(scores.shape[-1], compression_ratio)
    return [np.sort(i) for i in topk_indices(scores, n_kept)]


def observed_attention_score(attentions, H):
    """ObservedAttentionPress.score: attentions (num_heads, n_tokens, n_tokens), every query of the prefill."""
    scores = attentions.sum(1)
    n_tokens = attentions.shape[-1]
    n_tokens_in_sum = np.arange(n_tokens, 0, -1).astype(np.float64)
    scores = scores / n_tokens_in_sum
    return scores.reshape(H, -1, n_tokens).mean(1)


def snapkv_press_score(attentions, H, window_size, kernel_size):
    """SnapKVPress.score: attentions (num_heads, window_size, k_len) of the window's queries."""
    k_len = attentions.shape[-1]
    attn_weights = attentions[..., -window_size:, :-window_size]
    scores = attn_weights.mean(-2)
    scores = avg_pool1d(scores, kernel_size)
    scores = scores.reshape(H, -1, k_len - window_size).mean(1)
    return np.concatenate([scores, np.full((H, window_size), scores.max() + 1)], axis=-1)


def snapkv_cluster_kept(attn, window_size, max_capacity_prompt, kernel_size, pooling):
    """SnapKVCluster.update_kv on one head (after repeat_kv): attn (window_size, q_len) of the window's queries."""
    q_len = attn.shape[-1]
    attn_weights_sum = attn[-window_size:, :-window_size].sum(-2)
    pool = avg_pool1d if pooling == "avgpool" else max_pool1d
    attn_cache = pool(attn_weights_sum[None], kernel_size)[0]
    indices = topk_indices(attn_cache, max_capacity_prompt - window_size)
    return np.sort(np.concatenate([indices, np.arange(q_len - window_size, q_len)]))


def tova_reduce(attn_weights, cache_size):
    """TOVACache.reduce: attn_weights (num_heads, q_len, num_keys); one index set for every KV head."""
    mean_attn_weights = attn_weights[:, -1, :].mean(0)
    ind = topk_indices(mean_attn_weights, cache_size)
    return np.sort(ind)


def streaming_llm_score(H, k_len, compression_ratio, n_sink):
    """StreamingLLMPress.score."""
    n_pruned = k_len - int(k_len * (1 - compression_ratio))
    scores = np.ones((H, k_len))
    scores[:, n_sink:n_sink + n_pruned] = 0
    return scores


def kivi_quantize_last_dim(data, group_size, bit):
    """triton_quantize_and_pack_along_last_dim, then unpack_and_dequant: (rows, T) in groups of group_size
    along the last dim; returns the read-back values and the bytes (int32 codes, scale and mn in FP16)."""
    rows, T = data.shape
    assert T % group_size == 0
    g = data.reshape(rows, T // group_size, group_size)
    mn, mx = g.min(-1), g.max(-1)
    scale = (mx - mn) / (2 ** bit - 1)
    q = np.round(np.clip((g - mn[..., None]) / scale[..., None], 0, 2 ** bit - 1))
    feat_per_int = 32 // bit
    assert T % feat_per_int == 0
    nbytes = 4 * rows * (T // feat_per_int) + 2 * 2 * rows * (T // group_size)
    return (q * scale[..., None] + mn[..., None]).reshape(rows, T), nbytes


def kivi_prefill(key_states, value_states, residual_length, group_size, k_bits, v_bits):
    """LlamaFlashAttention_KIVI.forward, prefill branch, on one head (T, D): K' and V' as the cache reads them
    back (the full-precision tokens in the model's FP16) and the bytes of what it holds."""
    T, D = key_states.shape
    f16 = lambda x: x.astype(np.float16).astype(np.float64)  # noqa: E731
    if T % residual_length != 0:
        if T < residual_length:
            key_states_quant, key_states_full = None, key_states
        else:
            key_states_quant = key_states[:-(T % residual_length)]
            key_states_full = key_states[-(T % residual_length):]
    else:
        key_states_quant, key_states_full = key_states, None
    parts, nbytes = [], 0
    if key_states_quant is not None:
        kq, b = kivi_quantize_last_dim(key_states_quant.T, group_size, k_bits)   # .transpose(2, 3)
        parts.append(kq.T)
        nbytes += b
    if key_states_full is not None:
        parts.append(f16(key_states_full))
        nbytes += 2 * key_states_full.size
    Kp = np.concatenate(parts)
    if T <= residual_length:
        Vp = f16(value_states)
        nbytes += 2 * value_states.size
    else:
        vq, b = kivi_quantize_last_dim(value_states[:-residual_length], group_size, v_bits)
        Vp = np.concatenate([vq, f16(value_states[-residual_length:])])
        nbytes += b + 2 * residual_length * D
    return Kp, Vp, nbytes


# ---------------------------------------------------------------- kvc's side: settings and bytes

def evicted(d, kept_per_head, index_bytes=None):
    """Per KV head (None, None, kept, bytes): kept rows in FP16 (README "How bytes are counted") plus int32
    indices (index_bytes[h] when given, None: none stored)."""
    nt = 2 if d.V is not None else 1
    out = []
    for h, kept in enumerate(kept_per_head):
        extra = 0 if index_bytes is None else index_bytes[h]
        out.append((None, None, np.asarray(kept, dtype=np.intp), 2 * len(kept) * d.D * nt + extra))
    return out


def peer_kivi(p, d, l, Ka):
    out = []
    for h in range(d.H):
        Kp, Vp, nb = kivi_prefill(d.K[l, h], d.V[l, h], p["residual"], p["group_size"], p["k_bits"], p["v_bits"])
        out.append((Kp, Vp, None, nb))
    return out


def peer_tova(p, d, l, Ka):
    attn = window_attention(d, l, Ka, 1)
    kept = tova_reduce(attn, p["budget"])
    n = len(kept)
    return evicted(d, [kept] * d.H, [4 * n // d.H + (h < 4 * n % d.H) for h in range(d.H)])


def peer_observed(p, d, l, Ka):
    assert d.O.shape[2] == d.T, "ObservedAttentionPress sees every query of the prefill: observe.window = tokens"
    attn = window_attention(d, l, Ka, d.T)
    kept = scorer_compress(observed_attention_score(attn, d.H), p["compression_ratio"])
    return evicted(d, kept, [4 * len(k) for k in kept])


def peer_snapkv_press(p, d, l, Ka):
    ws = p["window_size"]
    attn = window_attention(d, l, Ka, ws)
    kept = scorer_compress(snapkv_press_score(attn, d.H, ws, p.get("kernel_size", 5)), p["compression_ratio"])
    return evicted(d, kept, [4 * len(k) for k in kept])


def peer_snapkv_cluster(p, d, l, Ka):
    assert d.Hq == d.H, "SnapKVCluster selects per query head (after repeat_kv): one query head per KV head here"
    ws = p["window_size"]
    attn = window_attention(d, l, Ka, ws)
    pooling = {"avg": "avgpool", "max": "maxpool"}[p["pooling"]]
    kept = [snapkv_cluster_kept(attn[h], ws, p["budget"], p.get("kernel_size", 5), pooling) for h in range(d.H)]
    return evicted(d, kept, [4 * len(k) for k in kept])


def peer_knorm(p, d, l, Ka):
    scores = -np.linalg.norm(Ka[l], axis=-1)   # KnormPress.score: -keys.norm(dim=-1), the cache's keys
    kept = scorer_compress(scores, p["compression_ratio"])
    return evicted(d, kept, [4 * len(k) for k in kept])


def peer_streaming(p, d, l, Ka):
    scores = streaming_llm_score(d.H, d.T, p["compression_ratio"], p.get("sinks", 4))
    return evicted(d, scorer_compress(scores, p["compression_ratio"]))   # positional: no index bytes


# ---------------------------------------------------------------- checks

def config(data_change, exps, seed=21):
    data = dict(DATA, **data_change)
    for k in [k for k, v in data.items() if v is None]:
        del data[k]
    return {"seed": seed, "data": data, "metrics": {"topk_recall_k": 8}, "experiments": exps}


CHECKS = [
    # (name, config, peer, per_head, control experiments: kvc's defaults that must differ from the peer)
    ("kivi-rule", config({"head_dim": 32, "tokens": 100},
                         [{"method": "kivi", "residual_rule": "kivi", "scale_dtype": "fp16", "group_size": 8,
                           "residual": 16, "k_bits": [2, 4], "v_bits": [2, 8]}]),
     peer_kivi, True, [{"residual_rule": "kvc"}]),
    ("kivi-rule-whole-blocks", config({"head_dim": 32, "tokens": 96},
                                      [{"method": "kivi", "residual_rule": "kivi", "scale_dtype": "fp16",
                                        "group_size": 16, "residual": 32, "k_bits": 4, "v_bits": 4}]),
     peer_kivi, False, [{"residual_rule": "kvc"}]),
    ("kivi-rule-short", config({"head_dim": 32, "tokens": 12},
                               [{"method": "kivi", "residual_rule": "kivi", "scale_dtype": "fp16", "group_size": 8,
                                 "residual": 16, "k_bits": 2, "v_bits": 2}]),
     peer_kivi, False, []),
    ("tova-layer", config({}, [{"method": "tova", "heads": "layer", "budget": [1, 20, 96]}]),
     peer_tova, True, [{"heads": "group"}]),
    ("tova-layer-mha-kg", config({"q_heads": 4, "observe": {"window": 5, "generator": "key_gaussian"}},
                                 [{"method": "tova", "heads": "layer", "budget": 30}]),
     peer_tova, False, [{"heads": "group"}]),
    ("h2o-observed-attention", config({"tokens": 64, "observe": {"window": 64, "noise": 0.3}},
                                      [{"method": "h2o", "normalize": True, "recent_ratio": 0,
                                        "compression_ratio": [0.25, 0.5, 0.9]}]),
     peer_observed, True, [{"normalize": False}, {"recent_ratio": 0.5}]),
    ("snapkv-kvpress-defaults", config({"tokens": 160, "observe": {"window": 64, "noise": 0.3}},
                                       [{"method": "snapkv", "pooling": "avg", "window_size": 64,
                                         "compression_ratio": [0.3, 0.55]}]),
     peer_snapkv_press, True, [{"pooling": "max", "window_size": 0}]),
    ("snapkv-kvpress-kernel", config({"observe": {"window": 12, "noise": 0.3}},
                                     [{"method": "snapkv", "pooling": "avg", "window_size": 8, "kernel_size": 7,
                                       "compression_ratio": 0.5}]),
     peer_snapkv_press, False, [{"pooling": "max"}]),
    ("snapkv-own-code", config({"q_heads": 4, "tokens": 128, "observe": {"window": 32, "noise": 0.3}},
                               [{"method": "snapkv", "window_size": 32, "budget": 64, "pooling": ["avg", "max"]}]),
     peer_snapkv_cluster, True, []),
    ("knorm-compression-ratio", config({"tokens": 100},
                                       [{"method": "knorm", "compression_ratio": [0.1, 0.5, 0.9, 0.97]}]),
     peer_knorm, True, []),
    ("streaming-llm-compression-ratio", config({}, [{"method": "sink_window", "sinks": [0, 4],
                                                     "compression_ratio": [0.2, 0.75]}]),
     peer_streaming, True, []),
]


def run_check(tmp, name, cfg, peer, per_head, controls):
    def layer_fn(method, p, d, l, Ka, seed):
        return peer(p, d, l, Ka)
    try:
        orows = oracle.run_config(cfg, per_head, layer_fn=layer_fn)
    except Exception as e:  # noqa: BLE001
        report(name, "the peer's formula raised %s: %s" % (type(e).__name__, e))
        return
    why, n = difftools.check_config(tmp, name, cfg, per_head, orows=orows)
    report("%s (%d rows)" % (name, n) if why is None else name, why)
    cols = [c for c in (oracle.PER_HEAD_COLUMNS if per_head else oracle.COLUMNS) if c not in ("label", "method")]
    for i, change in enumerate(controls):
        cname = "%s-control-%d" % (name, i)
        ctl = dict(cfg, experiments=[dict(e, **change) for e in cfg["experiments"]])
        path = os.path.join(tmp, cname + ".json")
        with open(path, "w") as fh:
            json.dump(ctl, fh, indent=1)
        got, err = difftools.kvc_csv(path, per_head)
        if err:
            report(cname, "%s; config %s" % (err, path))
            continue
        same = not difftools.compare(got[1], got[0], orows, cols)
        report(cname, "kvc with %s matches the peer's formula too, so the check cannot tell the variants apart; "
               "config %s" % (json.dumps(change), path) if same else None)


ERRORS = [
    # (name, experiment, exit status, what stderr says)
    ("three-budgets", {"method": "knorm", "budget": 5, "compression_ratio": 0.5}, 2,
     "experiments.0.compression_ratio: give one of budget, keep_ratio and compression_ratio"),
    ("ratio-one", {"method": "h2o", "compression_ratio": 1}, 2, "must be below 1 (got 1)"),
    ("ratio-keeps-none", {"method": "tova", "compression_ratio": 0.99}, 2,
     "keeps int(tokens x (1 - compression_ratio)) = int(50 x 0.01) = 0 tokens"),
    ("no-budget", {"method": "random"}, 2, "budget (tokens kept, 1..tokens = 50) or keep_ratio (the fraction kept) "
     "or compression_ratio (the fraction removed, as kvpress) (got nothing)"),
    ("sink-window-both", {"method": "sink_window", "window": 4, "compression_ratio": 0.5}, 2,
     "give window or compression_ratio, not both"),
    ("sink-window-none", {"method": "sink_window"}, 2,
     "experiments.0.window: missing required parameter of sink_window"),
    ("sink-window-sinks", {"method": "sink_window", "sinks": 40, "compression_ratio": 0.7}, 2,
     "= 15 tokens, fewer than sinks (always kept)"),
    ("kivi-rule-residual-0", {"method": "kivi", "residual": 0, "residual_rule": "kivi"}, 2,
     "experiments.0.residual: residual_rule \"kivi\" keeps the last tokens mod residual"),
    ("tova-layer-after-per-head-eviction",
     {"method": "pipeline", "steps": [{"method": "knorm", "budget": 40}, {"method": "tova", "heads": "layer",
                                                                          "budget": 10}]}, 1,
     "heads \"layer\" keeps one set of tokens for every KV head of the layer, but KV head 1 holds other tokens"),
]


def error_checks(tmp):
    data = {"layers": 1, "kv_heads": 2, "q_heads": 4, "tokens": 50, "head_dim": 16,
            "keys": {"generator": "normal"}, "values": {"generator": "normal"},
            "query": {"generator": "look_back", "count": 2}, "observe": {"window": 8}}
    for name, exp, status, what in ERRORS:
        path = os.path.join(tmp, "error-%s.json" % name)
        with open(path, "w") as fh:
            json.dump({"seed": 1, "data": data, "experiments": [exp]}, fh)
        p = subprocess.run([difftools.KVC, "run", path, "--no-timing"], capture_output=True, text=True, timeout=60)
        ok = p.returncode == status and what in p.stderr
        report("peers-error-" + name, None if ok else "status %d (want %d), stderr %r lacks %r; config %s"
               % (p.returncode, status, p.stderr[-300:], what, path))


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-peers-")
    for name, cfg, peer, per_head, controls in CHECKS:
        run_check(tmp, "peers-" + name, cfg, peer, per_head, controls)
    error_checks(tmp)
    return difftools.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
