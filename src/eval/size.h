/* size: the lesson's KV-cache size arithmetic behind `kvc size` (src/cli/size.c reads the options).
 *
 * bytes = layers x kv_heads x tokens x batch x (k_rank x k_bits + v_rank x v_bits) / 8, compared with the
 * same cache in FP16 at full rank (2 x head_dim x 16 bits per token per head). Scales and low-rank bases are
 * not counted (kvc run counts them). Exact integer arithmetic in bits, overflow-checked.
 */
#ifndef KVC_SIZE_H
#define KVC_SIZE_H

#include <stdint.h>

typedef struct SizeQuery {
    uint64_t layers, kv_heads, head_dim, tokens, batch;   /* each >= 1 */
    uint64_t k_bits, v_bits;                              /* bits per stored number, >= 1 */
    uint64_t k_rank, v_rank;                              /* numbers per token per head, 1..head_dim */
    int csv;                                              /* CSV (a header and one row) instead of the table */
} SizeQuery;

/* Prints the sizes on stdout. Returns 0, or -1 with kvc_fail set when a size overflows 64-bit arithmetic. */
int size_print(const SizeQuery *q);

#endif
