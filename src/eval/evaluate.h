/* evaluate: one experiment -> rows of metrics. The "method" and "metrics" steps of the data path.
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H, T tokens, D head dim, N evaluation queries per
 * (layer, query head). The reference (exact attention of every evaluation query) is computed once per config
 * (eval_reference) and shared; for streamed data (data/synth.h) each chunk's is computed with the chunk, and the
 * Reference holds only nq and the SVD cache. The evaluation runs a chunk of KV heads at a time: a whole layer, or,
 * for streamed data, as many heads as threads unless an experiment needs the layer's heads at once
 * (method_layer_wide); the chunk's data (data_heads) and its reference serve the method of every experiment
 * evaluated at once; aggregate norms are fed head by head in order (eval/normacc.h), so no tensor over every head
 * is held beside the data and the rows do not depend on the chunks. For each experiment the method runs once per
 * (layer, KV head) on that head's (T, D) cache (or, with MethodDesc.apply_layer, once per chunk on all of its KV
 * heads: share_heads, lowrank joint, pipeline); the shared attention kernel runs every evaluation query of the G
 * query heads that read the head
 * over what the cache keeps (rotated by RoPE first when the cache holds pre-RoPE keys); errors and bytes are
 * measured against the exact data and aggregated over (layer, head, query). See README.md, "Output columns".
 */
#ifndef KVC_EVALUATE_H
#define KVC_EVALUATE_H

#include "config/config.h"
#include "data/synth.h"
#include "eval/row.h"
#include "eval/timing.h"

typedef struct Reference {
    size_t nq;       /* L * Hq * N evaluation queries (0 without) */
    double *out;     /* (L, Hq, N, D) exact attention outputs, or NULL */
    double *w;       /* (L, Hq, N, T) exact attention weights, or NULL */
    double *s;       /* (L, Hq, N, T) exact attention scores (q . k / sqrt(D)), or NULL */
    double *wsum;    /* (L, H, T) per KV head: sum of w over its G query heads, then its N queries; or NULL */
    double *Katt;    /* (L, H, T, D) the keys attention reads when d->K is pre-RoPE, else NULL
                        (out, w, s, wsum and Katt are NULL for streamed data) */
    struct SvdCache *svd;   /* the decompositions of d's tensors the experiments share (methods/svdcache.h) */
} Reference;

/* ref holds what the experiments on d share, so d must outlive it (reference_free first). */
void eval_reference(Reference *ref, const Data *d);
void reference_free(Reference *ref);   /* safe on a zeroed Reference */

/* The aggregate row over every (layer, KV head) and query; for data.source "model" also lm_kl, lm_nll,
 * lm_nll_delta, lm_top1 (and recall_acc with data.answers): the model decodes its continuation over the cache as the method stored it (every head's
 * K'/V', an eviction's kept rows at their positions; model_source_score). Per-head rows leave them empty. With tm (not NULL) the row also gets decode_ns and
 * decode_speedup (timing.h), or row->no_timing says why not. Returns 0, or -1 with kvc_fail set when the
 * method failed (e.g. LAPACK). */
int eval_experiment(Row *row, const Experiment *ex, const Config *cfg, const Data *d, const Reference *ref,
                    Timing *tm);
/* --per-head: d->L * d->H rows, (layer, KV head) in order; each aggregates the G query heads of its head. */
int eval_experiment_per_head(Row *rows, const Experiment *ex, const Config *cfg, const Data *d,
                             const Reference *ref);

/* Experiments exs[0..n) at once, without decode timing, layer by layer: each layer of the data (made once for all
 * of them when the data is streamed, data/synth.h) and its reference serve every experiment before the next, so
 * streamed data is made once instead of once per experiment. rows[k] gets experiment k's aggregate row, or with
 * per_head its d->L * d->H per-head rows; the same rows as eval_experiment / eval_experiment_per_head one at a
 * time. When experiment k fails, the ones after it are not run and the ones before it finish: -1 with kvc_fail
 * set (experiment k's error) and *failed = k; else 0. Memory: one experiment's working set at a time, plus what
 * each keeps until the end (its per-query errors and per-head numbers). */
int eval_experiments(Row *const *rows, const Experiment *const *exs, size_t n, int per_head, const Config *cfg,
                     const Data *d, const Reference *ref, size_t *failed);

/* Threads for the evaluation (kvc run -j): each layer's KV heads run their method and attention on them, and the
 * keys' and values' error norms are summed on two of them, each over the heads in order; the rows are the same
 * bytes for any count. n <= 0: the CPUs online (the default), at most 64. eval_threads: the count in force, 1 under
 * a finite ulimit -v or -d (each thread that computes would need its own OpenBLAS buffer, base/memlimit.h). */
void eval_set_threads(int n);
int eval_threads(void);

/* numpy's np.percentile(x, p) with the default linear method; sorts x[0..n) in place; n >= 1. */
double eval_percentile(double *x, size_t n, double p);

#endif
