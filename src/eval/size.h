/* size: the lesson's KV-cache size arithmetic behind `kvc size` (src/cli/size.c reads the options).
 *
 * bytes = layers x kv_heads x tokens x batch x (k_rank x k_bits + v_rank x v_bits) / 8, compared with the
 * same cache in FP16 at full rank (2 x head_dim x 16 bits per token per head) and with a baseline: another
 * geometry (layers', kv_heads', head_dim') in FP16 at full rank, the same tokens and batch; without one the
 * baseline is the FP16 cache itself. Scales and low-rank bases are not counted (kvc run counts them). Exact
 * integer arithmetic in bits, overflow-checked.
 *
 * Output (stdout): an aligned table; CSV (a header and one row: the geometry, the bits and ranks, the bytes and
 * the ratio to FP16, and when a model or a baseline was asked for, seven more columns after them: model, q_heads,
 * baseline_layers, baseline_kv_heads, baseline_head_dim, baseline_total_bytes, baseline_ratio); JSON (one object,
 * indented) or JSONL (the same object on one line), whose keys are all of those columns plus model_source and
 * baseline_model (null when there is none). Byte counts are exact decimals ("0.125" when the bits do not fill a
 * byte); ratios are the shortest round-trip form in CSV and JSON, two decimals in the table.
 */
#ifndef KVC_SIZE_H
#define KVC_SIZE_H

#include <stdint.h>

enum { SIZE_TABLE, SIZE_CSV, SIZE_JSON, SIZE_JSONL };

typedef struct SizeQuery {
    uint64_t layers, kv_heads, head_dim, tokens, batch;   /* each >= 1 */
    uint64_t k_bits, v_bits;                              /* bits per stored number, >= 1 */
    uint64_t k_rank, v_rank;                              /* numbers per token per head, 1..head_dim */
    const char *model, *model_source;                     /* the model shape named (shapes.h), or NULL */
    uint64_t q_heads;                                     /* the model's query heads; 0 when unknown */
    int has_baseline;                                     /* 1: base_* below were asked for */
    const char *base_model;                               /* the baseline's model shape, or NULL */
    uint64_t base_layers, base_kv_heads, base_head_dim;   /* each >= 1 when has_baseline */
    int format;                                           /* SIZE_TABLE, SIZE_CSV, SIZE_JSON or SIZE_JSONL */
} SizeQuery;

/* Prints the sizes on stdout. Returns 0, or -1 with kvc_fail set when a size overflows 64-bit arithmetic. */
int size_print(const SizeQuery *q);

#endif
