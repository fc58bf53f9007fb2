/* evaluate: one experiment -> rows of metrics. The "method" and "metrics" steps of the data path.
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H, T tokens, D head dim, N evaluation queries per
 * (layer, query head). The reference (exact attention of every evaluation query) is computed once per config
 * (eval_reference) and shared. For each experiment the method runs once per (layer, KV head) on that head's
 * (T, D) cache (or, with MethodDesc.apply_layer, once per layer on all of its KV heads: share_heads, lowrank joint,
 * pipeline); the shared attention kernel runs every evaluation query of the G query heads that read the head
 * over what the cache keeps (rotated by RoPE first when the cache holds pre-RoPE keys); errors and bytes are
 * measured against the exact data and aggregated over (layer, head, query). See README.md, "Output columns".
 */
#ifndef KVC_EVALUATE_H
#define KVC_EVALUATE_H

#include "config/config.h"
#include "data/synth.h"
#include "eval/timing.h"

/* The v1 columns come first, in this order (a public interface); later columns are appended after them. */
typedef enum {
    COL_ATTN_ERROR,
    COL_K_ERROR,
    COL_V_ERROR,
    COL_K_ERROR_ORDINARY,
    COL_K_ZEROED_ORDINARY,
    COL_BYTES,
    COL_BASELINE_BYTES,
    COL_RATIO,
    COL_ATTN_ERROR_P50,
    COL_ATTN_ERROR_P95,
    COL_ATTN_ERROR_MAX,
    COL_ATTN_KL,
    COL_RETAINED_MASS,
    COL_TOPK_RECALL,
    COL_DECODE_NS,        /* timing.h: median decode step over the stored form, nanoseconds */
    COL_DECODE_SPEEDUP,   /* the FP16 reference's median (once per run) / COL_DECODE_NS */
    COL_DECODE_NS_MAD,    /* the spread of COL_DECODE_NS: median absolute deviation of the steps, nanoseconds */
    COL_LM_KL,            /* data.source "model" only (data/model_source.h): mean KL of the next-token distribution */
    COL_LM_NLL,           /* mean NLL of the continuation's next tokens, nats */
    COL_LM_NLL_DELTA,     /* COL_LM_NLL minus the uncompressed cache's */
    COL_LM_TOP1,          /* fraction of tokens whose most likely next token is unchanged */
    COL_RECALL_ACC,       /* with data.answers: fraction of the answers that are the most likely next token */
    NCOLS
} Column;
#define NCOLS_V1 8   /* attn_error .. ratio */

extern const char *const column_names[NCOLS];
int column_is_integer(Column c);

typedef struct Row {
    const Experiment *ex;   /* label, method and parameters */
    double v[NCOLS];
    unsigned char has[NCOLS];    /* 0: the metric does not apply (empty cell) */
    unsigned char hide[NCOLS];   /* 1: has a value, but the table leaves the column out (CSV/JSONL keep it) */
    int per_head;                /* 1: a --per-head row for (layer, head); 0: the aggregate over all heads */
    size_t layer, head;          /* KV head */
    const char *no_timing;       /* timing was asked for but the decode path cannot read the stored form (or
                                    the timing failed): why; points to a static string or to no_timing_buf */
    char no_timing_buf[192];
} Row;

typedef struct Reference {
    size_t nq;       /* L * Hq * N evaluation queries (0 without) */
    double *out;     /* (L, Hq, N, D) exact attention outputs, or NULL */
    double *w;       /* (L, Hq, N, T) exact attention weights, or NULL */
    double *s;       /* (L, Hq, N, T) exact attention scores (q . k / sqrt(D)), or NULL */
    double *wsum;    /* (L, H, T) per KV head: sum of w over its G query heads, then its N queries; or NULL */
    double *Katt;    /* (L, H, T, D) the keys attention reads when d->K is pre-RoPE, else NULL */
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

/* numpy's np.percentile(x, p) with the default linear method; sorts x[0..n) in place; n >= 1. */
double eval_percentile(double *x, size_t n, double p);

#endif
