/* bench: `kvc bench`, the decode-speed benchmark: its usage, its options and its output (the table with the
 * machine at the top, or CSV). The measuring is src/eval/bench.h, in the library. */
#include "cli/cli.h"
#include "base/util.h"
#include "cli/provenance.h"
#include "base/fileio.h"
#include "report/results.h"
#include "decode/decode.h"
#include "eval/bench.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char cmd_bench_usage[] =
    "usage: kvc bench [--tokens T] [--layers L] [--kv-heads H] [--q-heads LIST] [--head-dim D]\n"
    "                 [--formats LIST] [--threads LIST] [--repeat N] [--naive-repeat N] [--bw-mib N]\n"
    "                 [--evict-mib N] [--interleave]"
     " [--query LIST] [--seed N] [--format table|csv|json|jsonl]\n"
    "                 [--csv-file PATH]\n"
    "\n"
    "Times one decode step (every query head attends over T cached tokens) per cache format, with kvc's\n"
    "fused kernels reading the stored format directly, against the memory-bandwidth floor measured in the\n"
    "same run and against the naive path (dequantize the whole cache to float32, then attend).\n"
    "\n"
    "  --tokens T        cached tokens per head (default 65536); a suffix k M (x 1000^n) or Ki Mi\n"
    "                    (x 1024^n) is read: 64Ki = 65536\n"
    "  --layers L        layers (default 1)\n"
    "  --kv-heads H      KV heads per layer (default 8)\n"
    "  --q-heads LIST    query heads, each a multiple of H; comma list (default 8)\n"
    "  --head-dim D      head dimension (default 128)\n"
    "  --formats LIST    comma list of cache formats; FMT for K and V, or KFMT/VFMT; FMT is f32 f16 bf16\n"
    "                    e4m3 (fp8) e5m2 int8 int4 int2 (scale per token; int8ch.. per channel) q8_0 q4_0\n"
    "                    q4_1 q5_0 q5_1 iq4_nl (the ggml types: blocks of 32 along the row), or lrR /\n"
    "                    lrR:FMT (rank-R coefficients + FP16 basis); or kivi2 kivi4 kivi8 alone\n"
    "                    (KIVI: asymmetric B-bit keys per channel and values per token in groups of 32,\n"
    "                    FP16 scales and mins, the last 128 tokens in FP16). Default:\n"
    "                    f32,f16,bf16,e4m3,e5m2,int8,int4,int2,int8ch/int8,int4ch/int4,q8_0,q4_0,q4_1,\n"
    "                    q5_0,q5_1,iq4_nl,lr32/f16,kivi4,kivi2\n"
    "  --threads LIST    thread counts, comma list (default 1 and the number of CPUs)\n"
    "  --repeat N        timed steps per measurement after one warm-up (default 10)\n"
    "  --naive-repeat N  timed naive steps (default 3; 0 skips the naive path)\n"
    "  --bw-mib N        bandwidth probe buffer in MiB (default max(128, 4 x last-level cache));\n"
    "                    this and --evict-mib: at most half of the machine's memory\n"
    "  --evict-mib N     before every timed step, read N MiB of other memory, untimed, so that the step\n"
    "                    does not find the cache it read last in the last-level cache, as a model's\n"
    "                    decode comes back to a layer's cache only after the other layers' (default:\n"
    "                    the last-level cache's size, at least 32; 0: steps back to back)\n"
    "  --interleave      time the rows of a format that run on the same threads (its query head counts\n"
    "                    and query modes) in turn, one step of each row after another, instead of each\n"
    "                    row's steps together: a slow drift of the machine then falls on every row\n"
    "                    alike, so that ratios between them (64 query heads against 32) are measured\n"
    "                    side by side. Each row keeps its warm-ups, its --repeat key and full steps and\n"
    "                    its own floor; thread counts and the naive path stay one after another\n"
    "  --query LIST      how the fused step takes the query; comma list of f32 (default: float32, within\n"
    "                    the 1e-5 rule), int16 and int8 (rounded per head to 16 or 8 bits for int8,\n"
    "                    int4, q8_0 and q4_0 keys, as ggml rounds it to q8_0: faster, and less\n"
    "                    accurate: compare rel_err). The rounded modes need AVX512_VNNI and formats\n"
    "                    whose keys are int8, int8ch, int4, int4ch, q8_0 or q4_0; no naive path\n"
    "  --seed N          generator seed (default 0)\n"
    "  --format FORMAT   table (default; machine description at the top), csv, json (one object: the\n"
    "                    provenance, the bandwidth, the rows) or jsonl (one row per line); JSON rows add\n"
    "                    ms_mad and outliers to the CSV's columns\n"
    "  --csv-file PATH   also write the CSV to PATH, and PATH.meta.json (what made it: README\n"
    "                    \"Provenance\"); make bench: one run, table and CSV. PATH is replaced\n"
    "                    when the bench is done (a failed or interrupted one leaves it as it was)\n"
    "\n"
    "Outliers, as hyperfine flags them: a timed step whose modified Z-score 0.6745 |t - median| / MAD is\n"
    "above 14. The table's outl column counts them per row (fused steps); rows with any are listed after\n"
    "the table and on stderr: rerun on a quieter machine or with a larger --repeat.\n"
    "  -h, --help        this help\n";

enum {
    BENCH_TOKENS, BENCH_LAYERS, BENCH_KV_HEADS, BENCH_Q_HEADS, BENCH_HEAD_DIM, BENCH_FORMATS, BENCH_THREADS,
    BENCH_REPEAT, BENCH_NAIVE_REPEAT, BENCH_BW_MIB, BENCH_SEED, BENCH_FORMAT, BENCH_CSV_FILE, BENCH_QUERY,
    BENCH_EVICT_MIB, BENCH_INTERLEAVE
};
const OptSpec cmd_bench_opts[] = {
    [BENCH_TOKENS] = {"--tokens", NULL, 1},
    [BENCH_LAYERS] = {"--layers", NULL, 1},
    [BENCH_KV_HEADS] = {"--kv-heads", NULL, 1},
    [BENCH_Q_HEADS] = {"--q-heads", NULL, 1},
    [BENCH_HEAD_DIM] = {"--head-dim", NULL, 1},
    [BENCH_FORMATS] = {"--formats", NULL, 1},
    [BENCH_THREADS] = {"--threads", NULL, 1},
    [BENCH_REPEAT] = {"--repeat", NULL, 1},
    [BENCH_NAIVE_REPEAT] = {"--naive-repeat", NULL, 1},
    [BENCH_BW_MIB] = {"--bw-mib", NULL, 1},
    [BENCH_SEED] = {"--seed", NULL, 1},
    [BENCH_FORMAT] = {"--format", NULL, 1},
    [BENCH_CSV_FILE] = {"--csv-file", NULL, 1},
    [BENCH_QUERY] = {"--query", NULL, 1},
    [BENCH_EVICT_MIB] = {"--evict-mib", NULL, 1},
    [BENCH_INTERLEAVE] = {"--interleave", NULL, 0},
    {NULL, NULL, 0},
};

#ifndef KVC_BUILD_FLAGS
#define KVC_BUILD_FLAGS "(unknown)"
#endif

#define MAX_LIST 32   /* query head counts, thread counts */

static const char *const default_formats = "f32,f16,bf16,e4m3,e5m2,int8,int4,int2,int8ch/int8,int4ch/int4,"
                                           "q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,lr32/f16,kivi4,kivi2";

typedef struct Args {
    BenchPlan plan;
    size_t hq[MAX_LIST];
    int threads[MAX_LIST];
    BenchQuery query[3];
    BenchFormat *formats;
    int format;                 /* BENCH_OUT_TABLE .. BENCH_OUT_JSONL */
    const char *csv_file;
} Args;

enum { BENCH_OUT_TABLE, BENCH_OUT_CSV, BENCH_OUT_JSON, BENCH_OUT_JSONL };

/* --query: a comma list of f32, int16, int8, each at most once. */
static int parse_query(Args *a, const char *s, const char *where)
{
    char *buf = xstrdup(s), *items[4];
    size_t n = 0;
    int rc = opt_split(buf, where, items, 4, &n);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        BenchQuery q = BENCH_QUERY_F32;
        if (!strcmp(items[k], "int16")) q = BENCH_QUERY_INT16;
        else if (!strcmp(items[k], "int8")) q = BENCH_QUERY_INT8;
        else if (strcmp(items[k], "f32")) rc = kvc_fail("%s: must be f32, int16 or int8 (got \"%s\")", where, items[k]);
        for (size_t j = 0; rc == 0 && j < k; j++)
            if (a->query[j] == q) rc = kvc_fail("%s: %s is listed twice (got \"%s\")", where, items[k], s);
        if (rc == 0) a->query[k] = q;
    }
    if (rc == 0 && n > 3) rc = kvc_fail("%s: at most three modes (got \"%s\")", where, s);
    a->plan.query = a->query;
    a->plan.n_query = n;
    free(buf);
    return rc;
}

/* --formats: a comma list of bench_format_parse names. */
static int parse_formats(Args *a, const char *s)
{
    char *buf = xstrdup(s);
    size_t cap = strlen(s) / 2 + 1, n = 0;
    char **items = xmalloc(cap * sizeof *items);
    a->formats = xcalloc(cap, sizeof *a->formats);
    int rc = opt_split(buf, "bench: --formats", items, cap, &n);
    for (size_t k = 0; rc == 0 && k < n; k++) rc = bench_format_parse(&a->formats[k], items[k], "bench: --formats");
    a->plan.formats = a->formats;
    a->plan.n_formats = n;
    free(items);
    free(buf);
    return rc;
}

static int parse_args(Args *a, int argc, char **argv)
{
    BenchPlan *o = &a->plan;
    memset(a, 0, sizeof *a);
    o->T = 65536, o->L = 1, o->Hkv = 8, o->D = 128, o->repeat = 10, o->naive_repeat = 3;
    o->hq = a->hq, o->threads = a->threads;
    a->threads[0] = 1, o->n_threads = 1;
    long cpus = bench_cpu_count();
    if (cpus > 1) a->threads[o->n_threads++] = (int)(cpus > 1024 ? 1024 : cpus);
    size_t llc_mib = (bench_llc_bytes() + (1u << 20) - 1) >> 20;
    o->bw_mib = 4 * llc_mib > 128 ? 4 * llc_mib : 128;
    o->evict_mib = llc_mib > 32 ? llc_mib : 32;
    /* the probe's and the eviction's buffer is filled, every page touched: at most half of the memory (the
     * defaults are cut to it; a larger value given is refused below) */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t half_mib = pages > 0 && psz > 0 ? (size_t)((double)pages * (double)psz / 2.0 / 1048576.0) : SIZE_MAX;
    if (o->bw_mib > half_mib) o->bw_mib = half_mib;
    if (o->evict_mib > half_mib) o->evict_mib = half_mib;
    const char *formats = default_formats, *q_heads = NULL;
    size_t tmp[MAX_LIST], n;
    OptParser p;
    opt_init(&p, "bench", argc, argv, cmd_bench_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        const char *v = p.value, *w = p.where;
        switch (k) {
        case OPT_ERROR:
            return -1;
        case OPT_ARG:
            return kvc_fail("bench: unknown argument; see kvc bench --help (got \"%s\")", v);
        case BENCH_TOKENS: {
            uint64_t t;
            if (opt_count(v, w, 1, (uint64_t)1 << 24, &t)) return -1;
            o->T = (size_t)t;
            break;
        }
        case BENCH_LAYERS:
            if (opt_size(v, w, 1, 1024, &o->L)) return -1;
            break;
        case BENCH_KV_HEADS:
            if (opt_size(v, w, 1, 1024, &o->Hkv)) return -1;
            break;
        case BENCH_Q_HEADS:   /* read after the loop: it needs --kv-heads */
            q_heads = v;
            break;
        case BENCH_HEAD_DIM:
            if (opt_size(v, w, 1, 65536, &o->D)) return -1;
            break;
        case BENCH_FORMATS:   /* read after the loop: store_check needs the shape */
            formats = v;
            break;
        case BENCH_THREADS:
            if (opt_uint_list(v, w, 1, 1024, tmp, MAX_LIST, &n)) return -1;
            for (size_t j = 0; j < n; j++) a->threads[j] = (int)tmp[j];
            o->n_threads = n;
            break;
        case BENCH_REPEAT:
            if (opt_size(v, w, 1, 100000, &n)) return -1;
            o->repeat = (int)n;
            break;
        case BENCH_NAIVE_REPEAT:
            if (opt_size(v, w, 0, 100000, &n)) return -1;
            o->naive_repeat = (int)n;
            break;
        case BENCH_BW_MIB:
            if (opt_size(v, w, 1, 65536, &o->bw_mib)) return -1;
            break;
        case BENCH_SEED:
            if (opt_uint(v, w, 0, UINT64_MAX, &o->seed)) return -1;
            break;
        case BENCH_EVICT_MIB:
            if (opt_size(v, w, 0, 65536, &o->evict_mib)) return -1;
            break;
        case BENCH_QUERY:
            if (parse_query(a, v, w)) return -1;
            break;
        case BENCH_INTERLEAVE:
            o->interleave = 1;
            break;
        case BENCH_CSV_FILE:
            if (!*v) return kvc_fail("bench: --csv-file: empty path (got \"\")");
            a->csv_file = v;
            break;
        case BENCH_FORMAT: {
            static const char *const names[] = {"table", "csv", "json", "jsonl"};   /* BENCH_OUT_* order */
            a->format = -1;
            for (int f = 0; f < 4; f++)
                if (strcmp(v, names[f]) == 0) a->format = f;
            if (a->format < 0) return kvc_fail("bench: --format: must be table, csv, json or jsonl (got \"%s\")", v);
            break;
        }
        }
    }
    if (q_heads) {
        if (opt_uint_list(q_heads, "bench: --q-heads", 1, 65536, a->hq, MAX_LIST, &o->n_hq)) return -1;
    } else {
        a->hq[0] = o->Hkv, o->n_hq = 1;
    }
    for (size_t k = 0; k < o->n_hq; k++)
        if (a->hq[k] % o->Hkv != 0)
            return kvc_fail("bench: --q-heads: must be a multiple of --kv-heads %zu (got %zu)", o->Hkv, a->hq[k]);
    size_t cells;
    if (size_mul(o->T, o->D, &cells) || size_mul(cells, o->L * o->Hkv, &cells) || cells > ((size_t)1 << 31))
        return kvc_fail("bench: the cache is too large: layers x kv-heads x tokens x head-dim must be at most 2^31 "
                        "(got %zu x %zu x %zu x %zu)", o->L, o->Hkv, o->T, o->D);
    if (parse_formats(a, formats)) return -1;
    for (size_t k = 0; k < o->n_formats; k++)
        if (store_check(a->formats[k].k, o->T, o->D, "bench: --formats") ||
            store_check(a->formats[k].v, o->T, o->D, "bench: --formats"))
            return -1;
    if (o->bw_mib > half_mib)
        return kvc_fail("bench: --bw-mib: more than half of this machine's %zu MiB of memory (got %zu)", 2 * half_mib,
                        o->bw_mib);
    if (o->evict_mib > half_mib)
        return kvc_fail("bench: --evict-mib: more than half of this machine's %zu MiB of memory (got %zu)",
                        2 * half_mib, o->evict_mib);
    for (size_t m = 0; m < o->n_query; m++) {   /* the rounded modes: where they change something, and can run */
        if (o->query[m] == BENCH_QUERY_F32) continue;
        for (size_t k = 0; k < o->n_formats; k++) {
            const BenchFormat *f = &a->formats[k];
            StoreType t = f->k.type;
            if (f->resid || f->k.rank || (t != STORE_INT8 && t != STORE_INT4 && t != STORE_Q8_0 && t != STORE_Q4_0))
                return kvc_fail("bench: --query %s: rounds the query only for int8, int4, q8_0 and q4_0 keys; drop "
                                "the other formats from --formats (got %s)", bench_query_name(o->query[m]), f->name);
        }
        if (!decode_vnni())
            return kvc_fail("bench: --query %s: needs the AVX512_VNNI kernels (got this machine's fused kernels: %s%s)",
                            bench_query_name(o->query[m]), decode_isa(),
                            !strcmp(decode_isa(), "avx512") ? " without VNNI" : "");
    }
    return 0;
}

/* ---- output -------------------------------------------------------------------------------------------------- */

static const char *const csv_header =
    "format,k_format,v_format,layers,kv_heads,q_heads,tokens,head_dim,threads,isa,bytes,ms_median,ms_min,ms_max,"
    "gbps,bw_gbps,pct_bw,pct_bw_best,k_ms,naive_ms,naive_over_fused,rel_err,tol,ok,threads_identical,query";

static void print_csv_row(FILE *f, const BenchPlan *o, const BenchResult *r)
{
    char kf[64], vf[64];
    bench_format_names(kf, vf, sizeof kf, r->format, o->T);
    double gbps = (double)r->bytes / r->fused.med / 1e9;
    fprintf(f, "%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%d,%s,%llu,%.4f,%.4f,%.4f,%.2f,%.2f,%.1f,%.1f,%.4f,", r->format->name, kf, vf,
            o->L, o->Hkv, r->hq, o->T, o->D, r->threads, decode_isa(), (unsigned long long)r->bytes, r->fused.med * 1e3,
            r->fused.min * 1e3, r->fused.max * 1e3, gbps, r->bw, 100.0 * gbps / r->bw,
            100.0 * (double)r->bytes / r->fused.min / 1e9 / r->bw_max, r->keys.med * 1e3);
    if (r->has_naive) fprintf(f, "%.3f,%.2f,", r->naive.med * 1e3, r->naive.med / r->fused.med);
    else fprintf(f, ",,");
    fprintf(f, "%.3g,%g,%s,%s,%s\n", r->rel, DECODE_TOL, r->rel < DECODE_TOL ? "yes" : "no", r->same_threads ? "yes" : "no",
            bench_query_name(r->query));
}

static void print_table(const BenchResult *res, size_t n)
{
    printf("%-14s %4s %5s %3s %9s %9s %9s %9s %7s %6s %6s %8s %9s %7s %9s %3s %4s\n", "format", "qh", "query", "thr", "MB", "ms",
           "ms_min", "ms_max", "GB/s", "%bw", "%best", "k_ms", "naive_ms", "naive_x", "rel_err", "ok", "outl");
    for (size_t i = 0; i < n; i++) {
        const BenchResult *r = &res[i];
        double gbps = (double)r->bytes / r->fused.med / 1e9;
        char naive[32] = "", nx[32] = "";
        if (r->has_naive) {
            snprintf(naive, sizeof naive, "%.2f", r->naive.med * 1e3);
            snprintf(nx, sizeof nx, "%.1f", r->naive.med / r->fused.med);
        }
        printf("%-14s %4zu %5s %3d %9.2f %9.3f %9.3f %9.3f %7.2f %5.1f%% %5.1f%% %8.3f %9s %7s %9.2e %3s %4d\n",
               r->format->name, r->hq, bench_query_name(r->query), r->threads, (double)r->bytes / 1e6, r->fused.med * 1e3, r->fused.min * 1e3,
               r->fused.max * 1e3, gbps, 100.0 * gbps / r->bw, 100.0 * (double)r->bytes / r->fused.min / 1e9 / r->bw_max,
               r->keys.med * 1e3, naive, nx, r->rel, r->rel < DECODE_TOL ? "yes" : "NO", r->fused.outliers);
    }
}

/* Rows whose fused steps had outliers (hyperfine's warning): a "#" line per row after the table (table = 1) or
 * one note on stderr. */
static void print_outliers(FILE *f, const BenchResult *res, size_t n, int repeat, int table)
{
    size_t rows = 0;
    for (size_t i = 0; i < n; i++) rows += res[i].fused.outliers > 0;
    if (rows == 0) return;
    if (!table) {
        fprintf(f, "kvc: note: bench: statistical outliers in %zu of %zu rows (steps more than 14 MADs from the median, "
                   "as hyperfine flags them): rerun on a quieter machine or with a larger --repeat\n", rows, n);
        return;
    }
    fprintf(f, "\n# outliers (outl: timed steps with 0.6745 |t - median| / MAD > %g, of %d):\n", BENCH_OUTLIER_Z, repeat);
    for (size_t i = 0; i < n; i++)
        if (res[i].fused.outliers)
            fprintf(f, "#   %s, %zu query heads, %s query, %d thread%s: %d (median %.3f ms, MAD %.4f ms, max %.3f ms)\n",
                    res[i].format->name, res[i].hq, bench_query_name(res[i].query), res[i].threads, res[i].threads > 1 ? "s" : "", res[i].fused.outliers,
                    res[i].fused.med * 1e3, res[i].fused.mad * 1e3, res[i].fused.max * 1e3);
    fprintf(f, "# rerun on a quieter machine or with a larger --repeat\n");
}

/* One row as a JSON object: the CSV's columns (numbers unrounded; naive_ms and naive_over_fused null without the
 * naive path) and the spread of the fused steps, ms_mad and outliers. */
static cJSON *row_json(const BenchPlan *o, const BenchResult *r)
{
    char kf[64], vf[64];
    bench_format_names(kf, vf, sizeof kf, r->format, o->T);
    double gbps = (double)r->bytes / r->fused.med / 1e9;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", r->format->name);
    cJSON_AddStringToObject(j, "k_format", kf);
    cJSON_AddStringToObject(j, "v_format", vf);
    cJSON_AddNumberToObject(j, "layers", (double)o->L);
    cJSON_AddNumberToObject(j, "kv_heads", (double)o->Hkv);
    cJSON_AddNumberToObject(j, "q_heads", (double)r->hq);
    cJSON_AddNumberToObject(j, "tokens", (double)o->T);
    cJSON_AddNumberToObject(j, "head_dim", (double)o->D);
    cJSON_AddNumberToObject(j, "threads", r->threads);
    cJSON_AddStringToObject(j, "isa", decode_isa());
    cJSON_AddNumberToObject(j, "bytes", (double)r->bytes);
    cJSON_AddNumberToObject(j, "ms_median", r->fused.med * 1e3);
    cJSON_AddNumberToObject(j, "ms_min", r->fused.min * 1e3);
    cJSON_AddNumberToObject(j, "ms_max", r->fused.max * 1e3);
    cJSON_AddNumberToObject(j, "ms_mad", r->fused.mad * 1e3);
    cJSON_AddNumberToObject(j, "outliers", r->fused.outliers);
    cJSON_AddNumberToObject(j, "gbps", gbps);
    cJSON_AddNumberToObject(j, "bw_gbps", r->bw);
    cJSON_AddNumberToObject(j, "pct_bw", 100.0 * gbps / r->bw);
    cJSON_AddNumberToObject(j, "pct_bw_best", 100.0 * (double)r->bytes / r->fused.min / 1e9 / r->bw_max);
    cJSON_AddNumberToObject(j, "k_ms", r->keys.med * 1e3);
    if (r->has_naive) {
        cJSON_AddNumberToObject(j, "naive_ms", r->naive.med * 1e3);
        cJSON_AddNumberToObject(j, "naive_over_fused", r->naive.med / r->fused.med);
    } else {
        cJSON_AddNullToObject(j, "naive_ms");
        cJSON_AddNullToObject(j, "naive_over_fused");
    }
    cJSON_AddNumberToObject(j, "rel_err", r->rel);
    cJSON_AddNumberToObject(j, "tol", DECODE_TOL);
    cJSON_AddBoolToObject(j, "ok", r->rel < DECODE_TOL);
    cJSON_AddBoolToObject(j, "threads_identical", r->same_threads);
    cJSON_AddStringToObject(j, "query", bench_query_name(r->query));
    return j;
}

/* The provenance record of a bench run (provenance.h) with the plan and the bandwidth measured. */
static void bench_provenance(cJSON *run, const BenchPlan *o, const double *bw_med, const double *bw_max)
{
    char cache[256], isa[128];
    bench_caches(cache, sizeof cache);
    bench_isa_flags(isa, sizeof isa);
    cJSON *m = cJSON_GetObjectItemCaseSensitive(run, "machine");
    cJSON_AddStringToObject(m, "caches", cache);
    cJSON_AddStringToObject(m, "isa_flags", isa);
    if (decode_tune()[0]) cJSON_AddStringToObject(m, "tune", decode_tune());
    cJSON_AddBoolToObject(m, "amx_keys", decode_amx());
    cJSON_AddBoolToObject(m, "amx_values", decode_amx_values());
    cJSON_AddBoolToObject(m, "amx_bf16_keys", decode_amx_bf16());
    cJSON *p = cJSON_AddObjectToObject(run, "plan");
    cJSON_AddNumberToObject(p, "layers", (double)o->L);
    cJSON_AddNumberToObject(p, "kv_heads", (double)o->Hkv);
    cJSON_AddNumberToObject(p, "tokens", (double)o->T);
    cJSON_AddNumberToObject(p, "head_dim", (double)o->D);
    cJSON_AddNumberToObject(p, "repeat", o->repeat);
    cJSON_AddNumberToObject(p, "naive_repeat", o->naive_repeat);
    cJSON_AddNumberToObject(p, "bw_mib", (double)o->bw_mib);
    cJSON_AddNumberToObject(p, "evict_mib", (double)o->evict_mib);
    cJSON_AddBoolToObject(p, "interleave", o->interleave);
    cJSON *qa = cJSON_AddArrayToObject(p, "query");
    for (size_t k = 0; k < (o->n_query ? o->n_query : 1); k++)
        cJSON_AddItemToArray(qa, cJSON_CreateString(bench_query_name(o->n_query ? o->query[k] : BENCH_QUERY_F32)));
    if (o->seed <= (1ULL << 53)) {
        cJSON_AddNumberToObject(p, "seed", (double)o->seed);
    } else {   /* beyond exact doubles: the decimal string */
        char seed[24];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
        cJSON_AddStringToObject(p, "seed", seed);
    }
    cJSON *bw = cJSON_AddArrayToObject(run, "bandwidth");
    for (size_t k = 0; k < o->n_threads; k++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "threads", o->threads[k]);
        cJSON_AddNumberToObject(b, "median_gbps", bw_med[k]);
        cJSON_AddNumberToObject(b, "max_gbps", bw_max[k]);
        cJSON_AddItemToArray(bw, b);
    }
}

static void print_machine(const BenchPlan *o, const double *bw_med, const double *bw_max)
{
    char model[256], cache[256], isa[128];
    bench_cpu_model(model, sizeof model);
    bench_caches(cache, sizeof cache);
    bench_isa_flags(isa, sizeof isa);
    printf("# kvc %s (commit %s) bench\n", KVC_VERSION, prov_commit());
    printf("# cpu:      %s, %ld logical CPUs; caches (cpu0): %s\n", model, bench_cpu_count(), cache);
    printf("# isa:      %s; fused kernels: %s%s%s%s%s (runtime dispatch; src/decode/kernels*_avx2.c built with "
           "-mavx2 -mfma -mf16c)\n", isa, decode_isa(),
           decode_kernels_note(),
           decode_tune()[0] ? ", tuned for " : "", decode_tune(), decode_tune()[0] ? " (KVC_TUNE)" : "");
    printf("# build:    gcc %s, %s\n", __VERSION__, KVC_BUILD_FLAGS);
    printf("# shape:    layers %zu, kv heads %zu, tokens %zu, head dim %zu; repeat %d (median of timed steps after "
           "1 warm-up)\n", o->L, o->Hkv, o->T, o->D, o->repeat);
    if (o->interleave)
        printf("# order:    --interleave: the rows of a format on the same threads timed in turn, one step of each row "
               "after another\n");
    if (o->evict_mib)
        printf("# steps:    each timed step after an untimed read of %zu MiB of other memory (--evict-mib), so that "
               "it reads the cache\n#           from memory, not from the last-level cache\n", o->evict_mib);
    else
        printf("# steps:    back to back (--evict-mib 0): a cache that fits the last-level cache is read from it\n");
    printf("# bandwidth (read %zu MiB, %s, before and after the formats):", o->bw_mib, "median / max");
    for (size_t k = 0; k < o->n_threads; k++)
        printf("%s %d thread%s %.2f / %.2f GB/s", k ? ";" : "", o->threads[k], o->threads[k] > 1 ? "s" : "", bw_med[k],
               bw_max[k]);
    printf("\n");
    printf("# accumulators: float32 products and sums per %d-token block (halved above 512 query heads per KV head), blocks\n"
           "#   merged in double; rel_err = "
           "||out - ref|| / ||ref||,\n#   ref = attention in double over the dequantized cache; ok: rel_err < %g.\n"
           "# %%bw = (bytes / median ms) / the row's floor: bytes / the median time of a plain read of the cache's own "
           "bytes on the\n#   row's threads, after the same eviction as a step (%d reads right before its steps, %d "
           "right after; CSV bw_gbps);\n#   %%best = (bytes / min ms) / the fastest of those reads. The bandwidth line "
           "above is a separate %zu MiB read.\n", DECODE_BLOCK, DECODE_TOL, BENCH_ROW_PROBES, BENCH_ROW_PROBES,
           o->bw_mib);
    printf("# k_ms: key side only (scores and their max). naive: dequantize the whole cache to float32 every step, "
           "then attend.\n\n");
}

int cmd_bench(int argc, char **argv)
{
    Args a;
    if (parse_args(&a, argc, argv)) {
        free(a.formats);
        return cmd_fail(EXIT_USAGE);
    }
    const BenchPlan *o = &a.plan;
    /* --csv-file: checked, locked and its temporary made before any work; renamed onto the path only once the
     * whole CSV is written (fileio.h), so a failed or interrupted bench leaves the old file as it was */
    FileOut csv_out = {0};
    if (a.csv_file && fileio_out_open(&csv_out, a.csv_file, FILEIO_REPLACE)) {
        fprintf(stderr, "kvc: bench: --csv-file: %s\n", kvc_errmsg());
        free(a.formats);
        return EXIT_RUNTIME;
    }
    size_t n_res = o->n_formats * o->n_hq * (o->n_query ? o->n_query : 1) * o->n_threads;
    BenchResult *res = xcalloc(n_res, sizeof *res);
    double bw_med[MAX_LIST], bw_max[MAX_LIST];
    int rc = EXIT_OK;
    cJSON *prov = prov_run_new();   /* started now; the plan and the bandwidth when the run is done */
    if (bench_run(res, bw_med, bw_max, o, stderr)) {
        rc = cmd_fail(EXIT_RUNTIME);
    } else {
        bench_provenance(prov, o, bw_med, bw_max);
        prov_run_finish(prov, EXIT_OK);
        if (csv_out.open) {
            char *buf = NULL;
            size_t len = 0;
            FILE *mf = xmemstream(&buf, &len, "bench: the CSV");
            fprintf(mf, "%s\n", csv_header);
            for (size_t i = 0; i < n_res; i++) print_csv_row(mf, o, &res[i]);
            fclose(mf);
            if (results_write_all(csv_out.fd, a.csv_file, buf, len) || fileio_out_commit(&csv_out)) {
                fprintf(stderr, "kvc: bench: --csv-file: %s\n", kvc_errmsg());
                rc = EXIT_RUNTIME;
            }
            free(buf);
            if (rc == EXIT_OK && prov_sidecar(a.csv_file, NULL, prov)) rc = cmd_fail(EXIT_RUNTIME);
        }
        if (a.format == BENCH_OUT_CSV) {
            printf("%s\n", csv_header);
            for (size_t i = 0; i < n_res; i++) print_csv_row(stdout, o, &res[i]);
        } else if (a.format == BENCH_OUT_JSONL) {
            for (size_t i = 0; i < n_res; i++) {
                cJSON *j = row_json(o, &res[i]);
                char *t = cJSON_PrintUnformatted(j);
                printf("%s\n", t);
                cJSON_free(t);
                cJSON_Delete(j);
            }
        } else if (a.format == BENCH_OUT_JSON) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddItemToObject(root, "provenance", cJSON_Duplicate(prov, 1));
            cJSON *rows = cJSON_AddArrayToObject(root, "results");
            for (size_t i = 0; i < n_res; i++) cJSON_AddItemToArray(rows, row_json(o, &res[i]));
            char *t = cJSON_Print(root);
            printf("%s\n", t);
            cJSON_free(t);
            cJSON_Delete(root);
        } else {
            print_machine(o, bw_med, bw_max);
            print_table(res, n_res);
        }
        print_outliers(a.format == BENCH_OUT_TABLE ? stdout : stderr, res, n_res, o->repeat,
                       a.format == BENCH_OUT_TABLE);
    }
    fileio_out_abort(&csv_out);   /* a failure before the CSV: the temporary goes, the old file stays */
    cJSON_Delete(prov);
    free(res);
    free(a.formats);
    return rc;
}
