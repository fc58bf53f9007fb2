/* row: one output row of kvc run: its columns (a public interface: the v1 columns first, in this order, later
 * ones appended) and the Row the evaluation fills and the writers (report/) print. Defined apart from evaluate.h so
 * that the writers and readers of rows need not include the evaluation. column_names and column_is_integer are
 * defined in evaluate.c. */
#ifndef KVC_ROW_H
#define KVC_ROW_H

#include "config/config.h"

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

#endif
