/* evict.h: helpers shared by the eviction methods (evict.c, evict_attn.c); private to src/methods/.
 *
 * T rows (tokens of the cache, or the rows a pipeline still keeps: their positions are in->pos), D head dim.
 * An eviction method fills Compressed.kept (ascending row indices) and counts the kept rows in FP16 (K, and V
 * when the cache holds values) plus its index or state bytes. It stores no tensor itself: method_run stores the
 * kept rows in FP16 (its stored form; the index bytes are not read by a decode step).
 */
#ifndef KVC_METHODS_EVICT_H
#define KVC_METHODS_EVICT_H

#include "methods/methods.h"

/* The three budget parameters every budgeted eviction method starts with (params[0..2]); exactly one is given.
 * compression_ratio is kvpress's (kvpress/presses/scorer_press.py, ScorerPress.compress: n_kept =
 * int(k_len * (1 - compression_ratio))), added after the first version: in row ids only when set. */
#define EVICT_BUDGET_PARAMS                                                                                       \
    {.name = "budget", .kind = PARAM_INT, .def = 0, .lo = 0, .hi = 1L << 40,                                      \
     .help = "tokens kept per KV head, 1..tokens; 0: use keep_ratio or compression_ratio"},                       \
    {.name = "keep_ratio", .kind = PARAM_NUM, .def = 0, .num_def = 0, .num_lo = 0, .num_hi = 1,                   \
     .help = "fraction kept: max(1, floor(keep_ratio x tokens)); 0: use budget or compression_ratio"},            \
    EVICT_COMPRESSION_RATIO_PARAM
#define EVICT_COMPRESSION_RATIO_PARAM                                                                             \
    {.name = "compression_ratio", .kind = PARAM_NUM, .def = 0, .num_def = 0, .num_lo = 0, .num_hi = 1,            \
     .id_when_set = 1,                                                                                            \
     .help = "fraction removed, as kvpress: int(tokens x (1 - compression_ratio)) kept, below 1; 0: not given"}

/* Tokens kept out of T: `budget`, max(1, floor(keep_ratio * T)) or int(T * (1 - compression_ratio)), at most T. */
size_t evict_budget(const Experiment *ex, size_t T);
/* check(): exactly one of budget / keep_ratio / compression_ratio is given (non-zero), budget <= tokens, and
 * compression_ratio < 1 keeps at least one token. */
int evict_budget_check(const Experiment *ex, const Dims *d);
/* MethodDesc.kept_tokens of a budgeted method. */
size_t evict_kept_tokens(const Experiment *ex, const Dims *d);
/* int(T * (1 - compression_ratio)) as kvpress computes it (Python's int() of a double: toward zero). */
size_t evict_kvpress_kept(double compression_ratio, size_t T);
/* The parameter a message about the budget names: the one of budget / keep_ratio / compression_ratio given. */
const char *evict_budget_name(const Experiment *ex);

/* FP16 bytes of n kept rows of every tensor the cache holds. */
uint64_t evict_kept_bytes(size_t n, const MethodInput *in);
/* The same plus the int32 index of each kept row: the bytes of a method that stores which rows it kept. */
uint64_t evict_indexed_bytes(size_t n, const MethodInput *in);

/* Fills out->kept with the rows where forced[t] is set plus the k best of the others by score (larger first, ties
 * to the earlier row), ascending; forced may be NULL. out->n_kept is the count; bytes are the caller's. */
void evict_select(Compressed *out, const double *score, const unsigned char *forced, size_t T, size_t k);

/* Position of row t (in->pos or t itself). */
static inline size_t evict_pos(const MethodInput *in, size_t t) { return in->pos ? in->pos[t] : t; }

#endif
