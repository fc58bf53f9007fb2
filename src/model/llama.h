/* llama: a Llama-architecture transformer in float32 (OpenBLAS), read from a Hugging Face model directory as it
 * is, so that kvc can capture a real model's K, V and Q and measure what a compressed cache does to its
 * predictions. It runs a model; it does not tokenize, sample or train.
 *
 * Dimensions: E hidden_size, L layers, Hq query heads, Hkv KV heads (G = Hq / Hkv query heads share one KV
 * head: query head h reads KV head h / G, as HF's repeat_kv), D head_dim, I intermediate_size, V vocab_size,
 * C context tokens, N continuation tokens. Weight matrices are HF's nn.Linear layout, (out, in), row-major.
 *
 * ---- Reading a model (llama_load.c) ----
 * DIR/config.json (cJSON): "architectures" must be ["LlamaForCausalLM"] (when absent, "model_type" must be
 * "llama"); hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size are required
 * integers; num_key_value_heads (default: num_attention_heads), head_dim (default and when null:
 * hidden_size / num_attention_heads, which must then divide), max_position_embeddings (default 2048),
 * rms_norm_eps (default 1e-6), rope_theta (default 10000), tie_word_embeddings (default false); rope_scaling
 * null, or {"rope_type" (or "type"): "default" | "linear" (factor) | "llama3" (factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings)}; transformers 5's "rope_parameters" object is read the
 * same way (its rope_theta too). Any other rope type, hidden_act other than "silu", attention_bias, mlp_bias or
 * rope_interleaved true are refused by name. Integers are 1..2^31-1 (Hq*D too: BLAS takes int), D even, Hkv
 * dividing Hq; the weights' sizes are overflow-checked before anything is allocated (activations, at most
 * 2^31 rows of at most 2^31 floats, fit a 64-bit size_t).
 * Weights: DIR/model.safetensors, else DIR/model.safetensors.index.json ("weight_map": tensor name -> shard
 * file in DIR). Tensors, by HF name: model.embed_tokens.weight (V, E); per layer N,
 * model.layers.N.input_layernorm.weight (E), self_attn.q_proj.weight (Hq*D, E), k_proj / v_proj (Hkv*D, E),
 * o_proj (E, Hq*D), post_attention_layernorm.weight (E), mlp.gate_proj / up_proj (I, E), down_proj (E, I);
 * model.norm.weight (E); lm_head.weight (V, E) unless tie_word_embeddings (then the embedding is the head).
 * Other tensors in the files are ignored. F32, F16 and BF16 are converted exactly to float32, once, into one
 * allocation; every value must be finite.
 * Failure: -1 with kvc_fail naming the file (or the tensor and its file) and the value: a missing file, an
 * unsupported architecture ("architectures": ["GPT2LMHeadModel"] is not supported), a missing tensor, a
 * misshaped one (both shapes), a size that does not divide or overflows, a non-finite weight.
 *
 * ---- Running it (llama.c) ----
 * One forward pass serves both entry points: embedding; per layer x += o_proj(attn(rope(q), rope(k), v)) with
 * RMSNorm before it (HF: x * rsqrt(mean(x^2) + eps), times the weight, in float32), then
 * x += down(silu(gate(h)) * up(h)) with RMSNorm before it; final RMSNorm; LM head. RoPE is HF's half-split
 * layout (rotate_half: dimension i pairs with i + D/2) with inv_freq[i] = theta^(-2i/D) (after rope_scaling),
 * angle = position * inv_freq[i] in float32 as HF computes it. Attention: softmax(q.k * D^-0.5) over the visible
 * rows (causal), times V. Projections and the LM head go through cblas_sgemm on all the tokens of a call at once.
 * Attention over the tokens of the call itself goes through cblas_sgemm too (in tiles of query rows, the upper
 * triangle skipped); attention over caller-supplied context rows uses plain loops in a fixed order, so the
 * result depends only on the rows' values, not on where they lie in memory.
 *
 * llama_prefill runs the context, positions 0..C-1, and can capture each layer's post-RoPE K and V,
 * (L, Hkv, C, D), and post-RoPE queries, (L, Hq, C - q_first, D) for positions q_first..C-1.
 *
 * llama_continue is the model-level metric's decode: the context's cache is REPLACED by caller-supplied rows
 * per (layer, KV head) (possibly fewer rows than C, with different counts per head, the values possibly
 * reconstructed from a compressed form), then the N continuation tokens, at positions C..C+N-1 whatever the
 * number of rows kept, are decoded teacher-forced: token j attends over its head's context rows plus the
 * full-precision K/V of continuation tokens 0..j. This is the one-token-at-a-time decode, computed for the N
 * tokens in one pass (same mathematics; the continuation's own rows are exact, computed here).
 * logits row j is the next-token distribution after token j (it predicts token j+1 of the text).
 * The uncompressed reference is llama_continue over llama_cache_full(the prefill's capture): the same function
 * on the same row values gives the same bits (identity method -> lm_kl exactly 0), while a prefill of all
 * C + N tokens agrees with it to float32 rounding only (different sgemm shapes).
 *
 * Determinism: the same model, inputs and OpenBLAS thread count give the same bits (kvc pins OpenBLAS to one
 * thread, la_init). Scratch is allocated per call (64-byte aligned) and freed before returning.
 * Failure of the run functions: -1 with kvc_fail: a token id outside 0..V-1, positions reaching
 * max_position_embeddings, supplied rows that are more than C, positions not strictly increasing below C, or
 * values not finite (naming layer, head and row).
 */
#ifndef KVC_LLAMA_H
#define KVC_LLAMA_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LLAMA_ROPE_DEFAULT, LLAMA_ROPE_LINEAR, LLAMA_ROPE_LLAMA3 } LlamaRopeType;

typedef struct LlamaConfig {
    size_t hidden;      /* E */
    size_t layers;      /* L */
    size_t heads;       /* Hq */
    size_t kv_heads;    /* Hkv */
    size_t head_dim;    /* D */
    size_t inter;       /* I */
    size_t vocab;       /* V */
    size_t max_pos;     /* max_position_embeddings: positions 0..max_pos-1 are accepted */
    float rms_eps;
    double rope_theta;
    LlamaRopeType rope_type;
    double rope_factor;          /* linear, llama3 */
    double rope_low_freq_factor; /* llama3 */
    double rope_high_freq_factor;
    double rope_original_max_pos;
    int tied;           /* tie_word_embeddings */
} LlamaConfig;

typedef struct LlamaLayer {
    const float *attn_norm;        /* (E) */
    const float *wq;               /* (Hq*D, E) */
    const float *wk, *wv;          /* (Hkv*D, E) */
    const float *wo;               /* (E, Hq*D) */
    const float *mlp_norm;         /* (E) */
    const float *w_gate, *w_up;    /* (I, E) */
    const float *w_down;           /* (E, I) */
} LlamaLayer;

typedef struct LlamaModel {
    LlamaConfig cfg;
    const float *embed;            /* (V, E) */
    const float *norm;             /* (E) */
    const float *lm_head;          /* (V, E); == embed when tied */
    LlamaLayer *layer;             /* (L); owned */
    float *inv_freq;               /* (D/2) RoPE frequencies, rope_scaling applied; owned */
    float *arena;                  /* every weight, one allocation; owned */
    size_t n_params;               /* floats in the arena */
    char *weights_path;            /* model.safetensors or the index file, for messages; owned */
} LlamaModel;

/* Reads DIR/config.json only (no weights): for checking a configuration early. 0 or -1. */
int llama_read_config(LlamaConfig *cfg, const char *dir);
/* Reads config and weights. On failure *m is zeroed (nothing to free). */
int llama_load(LlamaModel *m, const char *dir);
/* Frees what llama_load allocated; freeing a zeroed model is safe. */
void llama_free(LlamaModel *m);

/* Captured tensors of one call; any pointer may be NULL (not captured). */
typedef struct LlamaCapture {
    float *K, *V;                  /* (L, Hkv, T, D) post-RoPE; T = the call's token count */
    float *Q;                      /* (L, Hq, T - q_first, D) post-RoPE queries of tokens q_first..T-1 */
    size_t q_first;                /* 0..T */
} LlamaCapture;

/* Optional counters, accumulated over calls (zero it first). */
typedef struct LlamaStats {
    size_t tokens;                 /* tokens run */
    double seconds;                /* wall time of the calls */
    double sgemm_flops;            /* 2*M*N*K summed over the cblas_sgemm calls */
    double sgemm_seconds;          /* wall time inside them */
} LlamaStats;

/* Runs tokens[0..C) (ids in 0..V-1, C >= 1, C <= max_pos). cap: NULL or what to capture (T = C).
 * logits: NULL, or (V) for the last token, or (C, V) for every token when all_logits. 0 or -1. */
int llama_prefill(const LlamaModel *m, const int32_t *tokens, size_t C, const LlamaCapture *cap, float *logits,
                  int all_logits, LlamaStats *stats);

/* One (layer, KV head)'s context rows: n rows of K and V, (n, D) each, post-RoPE, float32, contiguous; pos:
 * their token positions (n), strictly increasing, < the context length, or NULL (then 0..n-1). n may be 0. */
typedef struct LlamaRows {
    size_t n;
    const float *K, *V;
    const size_t *pos;
} LlamaRows;

/* The context cache llama_continue attends over: rows[l * Hkv + h] for layer l, KV head h. */
typedef struct LlamaCache {
    size_t context_len;            /* C: the continuation starts at position C */
    const LlamaRows *rows;         /* (L * Hkv) */
} LlamaCache;

/* Points rows[0 .. L*Hkv) at a prefill's capture K, V (L, Hkv, C, D): the uncompressed cache. */
void llama_cache_full(LlamaRows *rows, const LlamaConfig *cfg, const float *K, const float *V, size_t C);

/* Decodes tokens[0..N) teacher-forced after the cache (see above). logits: (N, V), required. cap: NULL or the
 * continuation's own K, V, Q (T = N). 0 or -1. */
int llama_continue(const LlamaModel *m, const LlamaCache *cache, const int32_t *tokens, size_t N, float *logits,
                   const LlamaCapture *cap, LlamaStats *stats);

/* out (V) = log_softmax(logits (V)) in double: logits - max - log(sum(exp(logits - max))). */
void llama_log_softmax(double *out, const float *logits, size_t V);

#endif
