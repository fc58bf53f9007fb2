/* stats: what a cache looks like, per (layer, KV head): the numbers that tell a synthetic generator from a
 * captured cache (kvc stats, README "What the data looks like").
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H (query head hq reads KV head hq / G, as kvc run does), T tokens,
 * D head dim, N evaluation queries per (layer, query head). K below is the (T, D) block of one (layer, KV head) as
 * attention reads it: the cache's keys, rotated to positions 0..T-1 first when the cache holds pre-RoPE keys
 * (data.rope.cache "pre"), otherwise as they are. The statistics of one (layer, KV head):
 *
 *   outlier_ratio  m_c = mean over tokens of |K[t, c]| for each channel c; max_c m_c / median_c m_c (the median of
 *                  an even count is the mean of the two middle values). NaN when the median is 0.
 *   sink_mass      the mean, over the G * N evaluation queries that read this KV head, of the attention weight on
 *                  the first min(4, T) tokens, with w = softmax(q K^T / sqrt(D)) (base/attention.h). NaN without
 *                  evaluation queries (N == 0).
 *   recent_mass    the same on the last ceil(T / 10) tokens (computed as (T + 9) / 10). NaN without queries.
 *   erank          the effective rank of K (Roy & Vetterli 2007): s_1..s_R the singular values of K (R = min(T, D);
 *                  base/linalg.h: la_svd_right for T >= D, which needs no (T, D) U, else la_svd),
 *                  p_i = s_i / sum_j s_j, erank = exp(-sum_{p_i > 0} p_i ln p_i). NaN when K is all zero.
 *   rank90         the least r such that s_1^2 + ... + s_r^2 >= 0.9 * sum_i s_i^2 (the rank holding 90 % of the
 *                  energy, squared Frobenius norm); 0 when K is all zero.
 *
 * Aggregates: mean, min and max of each statistic over all L * H (layer, KV head) pairs (mean = sum in (layer,
 * head) order / count); NaN values are skipped, and an aggregate with no defined value is NaN.
 */
#ifndef KVC_STATS_H
#define KVC_STATS_H

#include "data/synth.h"

#include <stddef.h>

#define STATS_SINK_TOKENS 4
#define STATS_NCOLS 5

/* The statistics in column order; stats_columns names them. */
typedef struct StatsRow {
    double v[STATS_NCOLS];   /* outlier_ratio, sink_mass, recent_mass, erank, rank90 */
} StatsRow;
extern const char *const stats_columns[STATS_NCOLS];
enum { STATS_OUTLIER, STATS_SINK, STATS_RECENT, STATS_ERANK, STATS_RANK90 };

typedef struct Stats {
    size_t L, H, Hq, T, D, N;
    size_t sink_tokens;      /* min(4, T) */
    size_t recent_tokens;    /* ceil(T / 10) */
    StatsRow *heads;         /* (L * H): head (l, h) at l * H + h */
    StatsRow mean, min, max;
} Stats;

/* Fills *s from d (data_make's Data; d is not changed). Returns 0, or -1 with kvc_fail set when LAPACK's SVD
 * fails (*s is then zeroed). stats_free releases it (safe on a zeroed Stats). */
int stats_compute(Stats *s, const Data *d);
void stats_free(Stats *s);

#endif
