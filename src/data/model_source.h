/* model_source: data.source "model" -- the data a real model makes, and the model-level metrics (README "A real
 * model in the loop").
 *
 * Making the data (once per config): the model (llama_load) runs the context tokens x[0..C) at full precision
 * (llama_prefill); its post-RoPE K and V, (L, Hkv, C, D), become the Data's K and V (float32 -> double, exact),
 * the post-RoPE queries of the last W context positions its observation queries O (L, Hq, W, D). Then the N
 * continuation tokens x[C..C+N) are decoded teacher-forced over the uncompressed cache (llama_continue over
 * llama_cache_full): their post-RoPE queries become the evaluation queries Q (L, Hq, N, D), and their next-token
 * distributions (the one after x[C+j] predicts x[C+j+1]) the reference of the metrics, kept as log-probabilities.
 *
 * Scoring one experiment (model_source_score): the context cache as a method stored it -- per (layer, KV head)
 * the reconstructed K'/V' rows (rounded to float32, what the model computes in), for an eviction only the kept
 * rows with their positions -- replaces the model's context cache; the N continuation tokens are decoded again,
 * each attending over that compressed context plus the exact K/V of the continuation so far. Per token j:
 *   KL_j   = sum_v p_ref(v) (log p_ref(v) - log p(v))   (>= 0; rounding below 0 is clamped to 0)
 *   NLL_j  = -log p(x[C+j+1])
 *   top1_j = 1 if argmax p == argmax p_ref (the first index on ties)
 * lm_kl, lm_nll and lm_top1 are their means over j; lm_nll_delta = lm_nll - the reference's mean NLL.
 * recall_acc (only with data.answers): the fraction of the answers x[C+a] (a in answers) that are the argmax of
 * the distribution that predicts them (the one after x[C+a-1]), against the text itself, not the reference. The same
 * rows as the reference's (an identity method) give the same bits: lm_kl 0, lm_nll_delta 0, lm_top1 1 exactly.
 *
 * Failure: -1 with kvc_fail: the model's own messages (llama.h: files, architecture, tensors, non-finite
 * weights), the token reader's (model/tokens.h: a token id outside the vocabulary), and data_check's.
 */
#ifndef KVC_MODEL_SOURCE_H
#define KVC_MODEL_SOURCE_H

#include "config/config.h"
#include "data/synth.h"
#include "model/llama.h"

typedef struct ModelSource {
    LlamaModel model;
    int32_t *tokens;     /* (C + N + 1) x[0..C+N] */
    size_t C, N, V;
    double *ref_logp;    /* (N, V) reference next-token log-probabilities */
    size_t *ref_top1;    /* (N) their argmax */
    double ref_nll;      /* mean reference NLL of the targets x[C+1..C+N] */
    size_t *answers;     /* (n_answers) continuation offsets j of the answers x[C+j] (data.answers), or NULL */
    size_t n_answers;
    LlamaStats prefill;  /* the prefill of the context (kvc run's note: tokens/s, sgemm GFLOP/s) */
    LlamaStats decode;   /* the reference decode of the continuation */
} ModelSource;

/* Fills d from cfg (cfg->from_model) as above, with d->model owning the ModelSource. 0, or -1 with kvc_fail set
 * and d zeroed. */
int model_source_make(Data *d, const Config *cfg);
/* Frees what model_source_make allocated in ms (not ms itself); safe on a zeroed one. */
void model_source_free(ModelSource *ms);

/* The model-level metrics of one compressed cache: rows[l * Hkv + h] (see llama.h, LlamaRows). out: lm_kl,
 * lm_nll, lm_nll_delta, lm_top1, recall_acc (0 without answers). 0, or -1 with kvc_fail set (llama_continue's
 * checks). */
int model_source_score(double out[5], const ModelSource *ms, const LlamaRows *rows);

/* One head's rows for the model: n = kept ? n_kept : T rows of K'/V' (T, D), gathered when kept is given,
 * rounded to float32, with their positions (kept, or 0..T-1); allocated, freed by model_rows_free. */
void model_rows_set(LlamaRows *r, const double *K, const double *V, const size_t *kept, size_t n_kept, size_t T,
                    size_t D);
void model_rows_free(LlamaRows *rows, size_t n);   /* n entries; safe on zeroed entries */

/* One line for a user (no newline): "prefill C tokens in S s (R tokens/s, sgemm G GFLOP/s); reference decode N
 * tokens in S s (R tokens/s)", measured when the data was made. */
void model_source_speed(char *buf, size_t size, const ModelSource *ms);

#endif
