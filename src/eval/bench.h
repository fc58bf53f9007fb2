/* bench: the decode-speed measurement behind `kvc bench` (src/cli/bench.c holds only its options and printing).
 *
 * For each cache format it builds a synthetic stored cache (L layers x Hkv KV heads x T tokens x D, keys and
 * values N(0, 1) from the numpy-compatible generator), times decode steps with the fused kernels (src/decode/),
 * the key side alone and the naive dequantize-then-attend path, measures the read bandwidth in the same run (a
 * STREAM-style read of a buffer at least 4x the last-level cache, before and after the formats), and checks the
 * output against attention in double over the dequantized cache. README.md, "Decode speed", documents the numbers.
 *
 * Why here and not in src/cli/: it is a measurement like timing.h (the decode_ns of kvc run), and everything but
 * src/cli/ is the library that tests and benchmarks link, so a C test can run a plan at a tiny shape and check
 * accuracy and thread invariance without going through argv or parsing CSV. The command adds the options, the
 * machine header and the table/CSV writers.
 *
 * Shapes: L layers, Hkv KV heads, Hq query heads (a multiple of Hkv), T tokens, D head dim.
 */
#ifndef KVC_BENCH_H
#define KVC_BENCH_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { BENCH_KIVI_GROUP = 32, BENCH_KIVI_RESIDUAL = 128 };   /* KIVI's defaults (src/methods/kivi.c) */

/* One cache format: FMT for keys and values, KFMT/VFMT, or KIVI's kivi2 / kivi4 / kivi8 (asymmetric B-bit keys
 * per channel and values per token in groups of 32, FP16 scales and mins, the last 128 tokens in FP16). */
typedef struct BenchFormat {
    char name[64];       /* as given: "int8ch/int8" */
    StoreFormat k, v;
    size_t resid;        /* kiviB: the last `resid` tokens in FP16 (a second segment), else 0 */
} BenchFormat;

/* Reads s (store_format_parse names, "K/V", or kivi2/4/8). Returns 0, or -1 with kvc_fail("<where>: ...") */
int bench_format_parse(BenchFormat *f, const char *s, const char *where);
/* The stored formats of keys and values at T tokens, for the CSV (KIVI: "int4a-ch-g32+f16r128", or "f16" when
 * T <= the residual). */
void bench_format_names(char *kf, char *vf, size_t cap, const BenchFormat *f, size_t T);

/* How the fused step takes the query (decode.h's DECODE_FUSED, _INT16Q, _INT8Q): f32, the default (within
 * DECODE_TOL), or rounded to int16 / int8 for int8, q8_0, int4 and q4_0 keys (faster, less accurate). */
typedef enum BenchQuery { BENCH_QUERY_F32, BENCH_QUERY_INT16, BENCH_QUERY_INT8 } BenchQuery;
const char *bench_query_name(BenchQuery q);   /* "f32", "int16", "int8" */

typedef struct BenchPlan {
    size_t T, L, Hkv, D;          /* L * Hkv * T * D <= 2^31 */
    const size_t *hq;             /* query head counts, each a positive multiple of Hkv */
    size_t n_hq;
    const int *threads;           /* thread counts, 1..1024 */
    size_t n_threads;
    const BenchFormat *formats;   /* each passes store_check at (T, D) */
    size_t n_formats;
    const BenchQuery *query;      /* query modes; n_query == 0: f32 only. Rounded modes need decode_vnni() */
    size_t n_query;
    int repeat;                   /* timed steps per measurement after one warm-up, >= 1 */
    int naive_repeat;             /* timed naive steps; 0 skips the naive path */
    size_t bw_mib;                /* bandwidth probe buffer in MiB */
    size_t evict_mib;             /* MiB of other memory read (untimed) before every timed step, so that a step does
                                   * not find the cache it read last in the last-level cache; 0: back to back */
    uint64_t seed;
    int interleave;               /* 0: the rows one after another; 1: the rows of a format with the same thread
                                   * count timed in turn, step by step (time_rows in bench.c), so that ratios between
                                   * them are measured side by side */
} BenchPlan;

/* The timed steps of one measurement, as hyperfine summarizes a command: the median and the range, the median
 * absolute deviation (MAD) as the spread, and the outliers: steps whose modified Z-score 0.6745 |t - med| / MAD
 * exceeds BENCH_OUTLIER_Z (hyperfine's rule and threshold; none when MAD is 0, a spread below the clock's). */
#define BENCH_OUTLIER_Z 14.0
typedef struct BenchStat {
    double med, min, max;         /* seconds per step */
    double mad;                   /* seconds: median of |t - med| */
    int outliers;                 /* steps with a modified Z-score above BENCH_OUTLIER_Z */
} BenchStat;

typedef struct BenchResult {
    const BenchFormat *format;
    size_t hq;
    BenchQuery query;
    int threads;
    uint64_t bytes;               /* the stored cache */
    BenchStat fused, keys, naive; /* the fused step, its key side alone, the naive path (when has_naive) */
    int has_naive;
    double bw, bw_max;            /* the row's floor, GB/s: bytes / the time of a read of exactly the cache's
                                   * bytes on the row's threads, after the same eviction as a step (decode_read_cold),
                                   * BENCH_ROW_PROBES reads right before and right after its steps: median, max */
    double rel;                   /* ||out - ref|| / ||ref||, ref in double over the dequantized cache */
    int same_threads;             /* output identical to the first thread count's */
} BenchResult;

enum { BENCH_ROW_PROBES = 2 };

/* Runs the plan: res[0 .. n_formats x n_hq x max(n_query, 1) x n_threads) in that order (threads fastest; the
 * naive path only for f32 rows), bw_med[k] and bw_max[k] the bandwidth at threads[k] (GB/s: the whole run's,
 * before and after the formats; each row has its own, bw). Progress lines ("kvc bench: ...") go to `progress`
 * unless NULL. Returns 0, or -1 with kvc_fail set (threads that cannot start); res is then incomplete. */
int bench_run(BenchResult *res, double *bw_med, double *bw_max, const BenchPlan *plan, FILE *progress);

/* The machine: logical CPUs online (>= 1), bytes of cpu0's largest cache (sysfs; 32 MiB when unknown), the CPU
 * model, cpu0's data and unified caches ("L1d 48K, L2 2048K, ..."), the vector extensions the kernels use. */
long bench_cpu_count(void);
size_t bench_llc_bytes(void);
void bench_cpu_model(char *buf, size_t cap);
void bench_caches(char *buf, size_t cap);
void bench_isa_flags(char *buf, size_t cap);

#endif
