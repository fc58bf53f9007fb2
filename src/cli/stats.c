/* stats: `kvc stats CONFIG.json`, what the data of a config looks like per (layer, KV head): key outlier ratio,
 * attention mass on the sinks and on the recent tokens, effective rank of K (the work is src/eval/stats.h). */
#include "cli/cli.h"
#include "base/memlimit.h"
#include "base/util.h"
#include "config/config.h"
#include "data/load.h"
#include "data/synth.h"
#include "eval/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cmd_stats_usage[] =
    "usage: kvc stats CONFIG.json [--set PATH=JSON]... [--format table|csv|json]\n"
    "\n"
    "Makes the data of CONFIG.json exactly as kvc run does (no experiment is run) and prints, for each\n"
    "(layer, KV head) and then as the mean, min and max over all of them:\n"
    "  outlier_ratio  m_c = mean over tokens of |K[t, c]| per channel c; max_c m_c / median_c m_c\n"
    "  sink_mass      mean over the evaluation queries reading the head of the attention weight\n"
    "                 softmax(q K^T / sqrt(head_dim)) on the first 4 tokens (query head hq reads\n"
    "                 KV head hq / (q_heads / kv_heads), as kvc run)\n"
    "  recent_mass    the same on the last ceil(tokens / 10) tokens\n"
    "  erank          effective rank of K (Roy & Vetterli 2007): exp of the entropy of the singular\n"
    "                 values normalised to sum 1\n"
    "  rank90         the least rank whose singular values hold 90 % of the energy (sum of squares)\n"
    "K is the (tokens, head_dim) key block as attention reads it (rotated first when the cache holds\n"
    "pre-RoPE keys). Without evaluation queries (no data.query) sink_mass and recent_mass are empty\n"
    "(\"-\" in the table, null in JSON) and a note says so on stderr; the same for an outlier_ratio whose\n"
    "median is 0 and the erank of an all-zero K. The aggregates skip empty values.\n"
    "\n"
    "  --set PATH=JSON   override a config value first, as for kvc run (repeatable)\n"
    "  --format FORMAT   table (default), csv (exact digits; aggregates have layer \"all\" and\n"
    "                    kv_head \"mean\", \"min\", \"max\") or json (one object)\n"
    "  -h, --help        this help\n";

enum { STATS_OPT_SET, STATS_OPT_FORMAT };
const OptSpec cmd_stats_opts[] = {
    [STATS_OPT_SET] = {"--set", NULL, 1},
    [STATS_OPT_FORMAT] = {"--format", NULL, 1},
    {NULL, NULL, 0},
};

enum { OUT_TABLE, OUT_CSV, OUT_JSON };

/* an exact number, or `empty` for NaN; rank90 (an integer in a head row) as an integer */
static void num(char *buf, size_t cap, double x, const char *empty)
{
    if (isnan(x)) snprintf(buf, cap, "%s", empty);
    else fmt_double(buf, cap, x);
}

static void table_row(const char *a, const char *b, const StatsRow *r)
{
    printf("%-5s  %-7s", a, b);
    for (int k = 0; k < STATS_NCOLS; k++) {
        int w = (int)strlen(stats_columns[k]);
        if (isnan(r->v[k])) printf("  %*s", w, "-");
        else if (k == STATS_RANK90) printf("  %*.1f", w, r->v[k]);
        else printf("  %*.4f", w, r->v[k]);
    }
    printf("\n");
}

static void csv_row(const char *a, const char *b, const StatsRow *r)
{
    printf("%s,%s", a, b);
    for (int k = 0; k < STATS_NCOLS; k++) {
        char buf[40];
        num(buf, sizeof buf, r->v[k], "");
        printf(",%s", buf);
    }
    printf("\n");
}

static void json_obj(const StatsRow *r)
{
    for (int k = 0; k < STATS_NCOLS; k++) {
        char buf[40];
        num(buf, sizeof buf, r->v[k], "null");
        printf("%s\"%s\": %s", k ? ", " : "", stats_columns[k], buf);
    }
}

static void print_stats(const Stats *s, int fmt)
{
    const StatsRow *agg[3] = {&s->mean, &s->min, &s->max};
    const char *aggname[3] = {"mean", "min", "max"};
    char a[32], b[32];
    if (fmt == OUT_JSON) {
        printf("{\"layers\": %zu, \"kv_heads\": %zu, \"q_heads\": %zu, \"tokens\": %zu, \"head_dim\": %zu, "
               "\"queries\": %zu, \"sink_tokens\": %zu, \"recent_tokens\": %zu,\n \"heads\": [",
               s->L, s->H, s->Hq, s->T, s->D, s->N, s->sink_tokens, s->recent_tokens);
        for (size_t i = 0; i < s->L * s->H; i++) {
            printf("%s\n  {\"layer\": %zu, \"kv_head\": %zu, ", i ? "," : "", i / s->H, i % s->H);
            json_obj(&s->heads[i]);
            printf("}");
        }
        printf("]");
        for (int j = 0; j < 3; j++) {
            printf(",\n \"%s\": {", aggname[j]);
            json_obj(agg[j]);
            printf("}");
        }
        printf("}\n");
        return;
    }
    if (fmt == OUT_CSV) {
        printf("layer,kv_head");
        for (int k = 0; k < STATS_NCOLS; k++) printf(",%s", stats_columns[k]);
        printf("\n");
    } else {
        printf("%zu layers x %zu KV heads (%zu query heads), %zu tokens, head_dim %zu, %zu evaluation queries per "
               "query head; sinks: first %zu tokens, recent: last %zu tokens\n",
               s->L, s->H, s->Hq, s->T, s->D, s->N, s->sink_tokens, s->recent_tokens);
        printf("%-5s  %-7s", "layer", "kv_head");
        for (int k = 0; k < STATS_NCOLS; k++) printf("  %s", stats_columns[k]);
        printf("\n");
    }
    for (size_t i = 0; i < s->L * s->H; i++) {
        snprintf(a, sizeof a, "%zu", i / s->H);
        snprintf(b, sizeof b, "%zu", i % s->H);
        if (fmt == OUT_CSV) csv_row(a, b, &s->heads[i]);
        else table_row(a, b, &s->heads[i]);
    }
    for (int j = 0; j < 3; j++) {
        if (fmt == OUT_CSV) csv_row("all", aggname[j], agg[j]);
        else table_row("all", aggname[j], agg[j]);
    }
}

int cmd_stats(int argc, char **argv)
{
    const char *path = NULL;
    int fmt = OUT_TABLE;
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    OptParser p;
    opt_init(&p, "stats", argc, argv, cmd_stats_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        const char *v = p.value;
        switch (k) {
        case OPT_ERROR:
            goto usage;
        case OPT_ARG:
            if (opt_config_path("stats", v, &path)) goto usage;
            break;
        case STATS_OPT_SET:
            sets[n_sets++] = (char *)v;
            break;
        case STATS_OPT_FORMAT:
            if (strcmp(v, "table") == 0) fmt = OUT_TABLE;
            else if (strcmp(v, "csv") == 0) fmt = OUT_CSV;
            else if (strcmp(v, "json") == 0) fmt = OUT_JSON;
            else {
                kvc_fail("stats: --format: must be table, csv or json (got \"%s\")", v);
                goto usage;
            }
            break;
        }
    }
    if (!path) {
        kvc_fail("stats: missing the config file; usage: kvc stats CONFIG.json (got nothing)");
        goto usage;
    }
    Config cfg;
    Data d;
    Stats s;
    if (config_load(&cfg, path, sets, n_sets)) {
        config_free(&cfg);
        goto usage;
    }
    if (memlimit_blas_reserve() || data_make(&d, &cfg)) {   /* no OpenBLAS hang under ulimit: memlimit.h */
        config_free(&cfg);
        goto usage;
    }
    int r = stats_compute(&s, &d);
    data_free(&d);
    config_free(&cfg);
    free(sets);
    if (r) return cmd_fail(EXIT_RUNTIME);
    if (s.N == 0)
        fprintf(stderr, "kvc: note: the data has no evaluation queries (data.query): sink_mass and recent_mass are "
                        "empty\n");
    print_stats(&s, fmt);
    stats_free(&s);
    return EXIT_OK;
usage:
    free(sets);
    return cmd_fail(EXIT_USAGE);
}
