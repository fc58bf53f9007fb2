/* evaluate: one experiment -> one row of metrics. The "method" and "metrics" steps of the data path.
 *
 * The reference (exact attention for the query) is computed once per config (eval_reference) and shared.
 * For each experiment the method produces its Compressed form; the shared attention kernel runs over what
 * the cache keeps; errors and bytes are measured against the exact data. See README.md, "Output columns".
 */
#ifndef KVC_EVALUATE_H
#define KVC_EVALUATE_H

#include "config.h"
#include "synth.h"

typedef enum {
    COL_ATTN_ERROR,
    COL_K_ERROR,
    COL_V_ERROR,
    COL_K_ERROR_ORDINARY,
    COL_K_ZEROED_ORDINARY,
    COL_BYTES,
    COL_BASELINE_BYTES,
    COL_RATIO,
    NCOLS
} Column;

extern const char *const column_names[NCOLS];
int column_is_integer(Column c);

typedef struct Row {
    const Experiment *ex;   /* label, method and parameters */
    double v[NCOLS];
    unsigned char has[NCOLS];   /* 0: the metric does not apply (empty cell) */
} Row;

typedef struct Reference {
    double *out;   /* (D,) exact attention output, or NULL without a query */
    double *w;     /* (T,) exact attention weights, or NULL */
} Reference;

void eval_reference(Reference *ref, const Data *d);
void reference_free(Reference *ref);

/* Returns 0, or -1 with kvc_fail set when the method failed (e.g. LAPACK). */
int eval_experiment(Row *row, const Experiment *ex, const Config *cfg, const Data *d, const Reference *ref);

#endif
