/* run: `kvc run CONFIG.json`: every experiment of a config, one row each (or one per layer and KV head). The
 * config (src/config/), the data (src/data/), the reference and the experiments (src/eval/); where the rows go
 * and which of them run (src/report/sweep.h). */
#include "cli/cli.h"
#include "base/memlimit.h"
#include "base/util.h"
#include "config/config.h"
#include "data/load.h"
#include "data/synth.h"
#include "eval/evaluate.h"
#include "eval/memory.h"
#include "eval/timing.h"
#include "report/report.h"
#include "report/sweep.h"

#include <stdio.h>
#include <stdlib.h>

const char cmd_run_usage[] =
    "usage: kvc run CONFIG.json [--set PATH=JSON]... [--format table|csv|jsonl] [--per-head]\n"
    "               [--out FILE [--resume]] [--shard I/N] [--list] [-q]\n"
    "               [--no-timing] [--threads N] [--timing-repeat N]\n"
    "\n"
    "Reads CONFIG.json (format: README.md, \"Config reference\"), synthesizes K, V and the query with\n"
    "numpy's generator (or reads them from .npy/.safetensors files: data.source \"files\"), runs every\n"
    "expanded experiment through the shared attention kernel and prints one row per experiment. CSV and\n"
    "JSONL rows end in an id: a hash of the config values that define the row (data, seed, method,\n"
    "parameters), the key of --resume and kvc merge.\n"
    "\n"
    "  --set PATH=JSON   override a config value before expansion (repeatable, applied in order);\n"
    "                    PATH is dotted with list indices: seed, data.tokens, experiments.0.bits;\n"
    "                    JSON strings need quotes: --set experiments.0.axis='\"channel\"'\n"
    "  --format FORMAT   table (default: aligned, 3 decimals), csv (round-trip exact numbers),\n"
    "                    jsonl (one JSON object per row)\n"
    "  --per-head        one row per (layer, KV head) instead of the aggregate; adds layer, head;\n"
    "                    no decode timing (a decode step covers every head)\n"
    "  --out FILE        write the rows to FILE instead of stdout, format from --format or the name\n"
    "                    (.csv, .jsonl, .txt); CSV and JSONL rows are appended as they finish (a killed\n"
    "                    run keeps every finished row), a table is written whole at the end\n"
    "  --resume          keep the rows already in FILE (matched by id; a torn last line is removed)\n"
    "                    and run only the others; refused if FILE holds rows of another config\n"
    "  --shard I/N       run only grid positions p with p mod N = I-1 (1 <= I <= N); combine the\n"
    "                    shard files with kvc merge\n"
    "  --list            print the rows this run would compute (grid position, id, experiments.N,\n"
    "                    label; tab-separated) and compute nothing\n"
    "  -q, --quiet       no progress line (on stderr when it is a terminal and the run takes more\n"
    "                    than a second: rows done/total, rate, ETA) and no notes\n"
    "  --no-timing       leave decode_ns and decode_speedup empty (they are the only columns that\n"
    "                    differ between two runs of one config; the table then omits them)\n"
    "  --threads N       threads of the timed decode steps, 1..1024 (default 1)\n"
    "  --timing-repeat N timed rounds per experiment, 1..100000 (default 15): each round is one decode\n"
    "                    step over the method's stored cache and one over the FP16 cache; decode_ns is\n"
    "                    the method's median in nanoseconds, decode_speedup the FP16 median over it\n"
    "                    (README \"Decode timing\"; a stored form the decode path cannot read leaves\n"
    "                    them empty, with a note on stderr)\n"
    "  -h, --help        this help\n";

enum {
    RUN_SET, RUN_FORMAT, RUN_PER_HEAD, RUN_NO_TIMING, RUN_THREADS, RUN_TIMING_REPEAT, RUN_OUT, RUN_RESUME, RUN_SHARD,
    RUN_LIST, RUN_QUIET
};
const OptSpec cmd_run_opts[] = {
    [RUN_SET] = {"--set", NULL, 1},
    [RUN_FORMAT] = {"--format", NULL, 1},
    [RUN_PER_HEAD] = {"--per-head", NULL, 0},
    [RUN_NO_TIMING] = {"--no-timing", NULL, 0},
    [RUN_THREADS] = {"--threads", NULL, 1},
    [RUN_TIMING_REPEAT] = {"--timing-repeat", NULL, 1},
    [RUN_OUT] = {"--out", NULL, 1},
    [RUN_RESUME] = {"--resume", NULL, 0},
    [RUN_SHARD] = {"--shard", NULL, 1},
    [RUN_LIST] = {"--list", NULL, 0},
    [RUN_QUIET] = {"-q", "--quiet", 0},
    {NULL, NULL, 0},
};

/* memory_check over the experiments this run computes (its shard). 0, or -1 with kvc_fail set. */
static int check_memory(const Sweep *sw, const Config *cfg, const char *path, int per_head, int timing,
                        size_t threads)
{
    unsigned char *runs = xcalloc(cfg->n_exps, 1);
    for (size_t i = 0; i < cfg->n_exps; i++) runs[i] = (unsigned char)sweep_wants(sw, i);
    MemRun mr = {per_head, timing, threads, runs};
    int rc = memory_check(cfg, path, &mr);
    free(runs);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    const char *path = NULL;
    Format fmt = FORMAT_TABLE;
    int fmt_given = 0;
    SweepOpts so = {0};   /* --out, --resume, --shard, --list, -q (sweep.h) */
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    int rc = EXIT_USAGE, per_head = 0, timing = 1;
    const char *timing_opt = NULL;   /* --threads or --timing-repeat, when given */
    size_t threads = 1, repeat = TIMING_REPEAT;
    OptParser p;
    opt_init(&p, "run", argc, argv, cmd_run_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        const char *v = p.value;
        switch (k) {
        case OPT_ERROR:
            goto usage;
        case OPT_ARG:   /* CONFIG.json */
            if (path) {
                kvc_fail("run: only one config file is accepted (got \"%s\" after \"%s\")", v, path);
                goto usage;
            }
            path = v;
            break;
        case RUN_SET:
            sets[n_sets++] = (char *)v;
            break;
        case RUN_FORMAT:
            if (report_format_parse(v, &fmt)) {
                kvc_fail("run: --format: must be table, csv or jsonl (got \"%s\")", v);
                goto usage;
            }
            fmt_given = 1;
            break;
        case RUN_PER_HEAD:
            per_head = 1;
            break;
        case RUN_NO_TIMING:
            timing = 0;
            break;
        case RUN_THREADS:
            if (opt_size(v, p.where, 1, 1024, &threads)) goto usage;
            timing_opt = "--threads";
            break;
        case RUN_TIMING_REPEAT:
            if (opt_size(v, p.where, 1, 100000, &repeat)) goto usage;
            timing_opt = "--timing-repeat";
            break;
        case RUN_OUT:
            if (v[0] == '\0') {
                kvc_fail("run: --out: needs a file name (got \"\")");
                goto usage;
            }
            so.out = v;
            break;
        case RUN_RESUME:
            so.resume = 1;
            break;
        case RUN_SHARD:
            if (sweep_parse_shard(v, &so.shard_i, &so.shard_n)) {
                kvc_fail("run: --shard: must be I/N with 1 <= I <= N <= %lu, e.g. 2/8 (got \"%s\")",
                         CONFIG_MAX_ROWS, v);
                goto usage;
            }
            break;
        case RUN_LIST:
            so.list = 1;
            break;
        case RUN_QUIET:
            so.quiet = 1;
            break;
        }
    }
    if (!path) {
        kvc_fail("run: missing the config file; usage: kvc run CONFIG.json (got nothing)");
        goto usage;
    }
    if (timing_opt && (!timing || per_head)) {
        kvc_fail("run: %s sets up the decode timing, which %s turns off; leave one of them out (got both)",
                 timing_opt, timing ? "--per-head" : "--no-timing");
        goto usage;
    }

    Config cfg;
    xalloc_context("%s: reading the config", path);
    if (config_load(&cfg, path, sets, n_sets)) {
        config_free(&cfg);
        goto usage;
    }
    if (cfg.notes && !so.quiet) fputs(cfg.notes, stderr);
    /* which rows run (--shard; --list prints them) is chosen before any data exists: sweep.h */
    SweepInput si = {&cfg, path, fmt, fmt_given, per_head};
    Sweep *sw = sweep_open(&so, &si);
    if (!sw) {
        config_free(&cfg);
        goto usage;
    }
    if (so.list) {
        sweep_close(sw, 1);
        config_free(&cfg);
        free(sets);
        return EXIT_OK;
    }
    /* a run that cannot fit is refused before it starts (eval/memory.h); OpenBLAS's buffer is taken now */
    if (check_memory(sw, &cfg, path, per_head, timing && !per_head, threads) || memlimit_blas_reserve()) {
        sweep_close(sw, 0);
        config_free(&cfg);
        goto usage;
    }
    Data d;
    xalloc_context("%s: making the data", path);
    if (data_make(&d, &cfg)) {
        sweep_close(sw, 0);
        config_free(&cfg);
        goto usage;
    }
    /* where rows go (--out, --resume) and the progress line, once the data exists */
    if (sweep_start(sw)) {
        sweep_close(sw, 0);
        data_free(&d);
        config_free(&cfg);
        goto usage;
    }
    Reference ref;
    xalloc_context("%s: the exact attention of the reference", path);
    eval_reference(&ref, &d);
    /* --per-head rows carry no timing (a decode step is over every head) */
    Timing *tm = timing && !per_head ? timing_create(&d, (int)threads, (int)repeat) : NULL;
    size_t per = per_head ? d.L * d.H : 1;   /* rows per experiment */
    Row *rows = xcalloc(cfg.n_exps * per, sizeof *rows);
    rc = EXIT_OK;
    for (size_t i = 0; i < cfg.n_exps; i++) {
        if (!sweep_wants(sw, i)) continue;
        Row *ri = &rows[i * per];
        char *label = report_label_text(cfg.exps[i].label);   /* messages are one line whatever a label holds */
        xalloc_context("%s: experiments.%zu (%s)", path, cfg.exps[i].src, label);
        if (per_head ? eval_experiment_per_head(ri, &cfg.exps[i], &cfg, &d, &ref)
                     : eval_experiment(ri, &cfg.exps[i], &cfg, &d, &ref, tm)) {
            sweep_message(sw);
            fprintf(stderr, "kvc: %s: experiments.%zu (%s): %s\n", path, cfg.exps[i].src, label, kvc_errmsg());
            free(label);
            rc = EXIT_RUNTIME;
            break;
        }
        if (ri->no_timing && !so.quiet) {
            sweep_message(sw);
            fprintf(stderr, "kvc: note: experiments.%zu (%s): no decode timing: %s\n", cfg.exps[i].src, label,
                    ri->no_timing);
        }
        free(label);
        if (sweep_rows(sw, ri, per, i)) {
            sweep_message(sw);
            fprintf(stderr, "kvc: %s\n", kvc_errmsg());
            rc = EXIT_RUNTIME;
            break;
        }
    }
    xalloc_context("%s: writing the rows", path);
    if (sweep_close(sw, rc == EXIT_OK)) {   /* the table, rename, fsync */
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
        rc = EXIT_RUNTIME;
    }
    free(rows);
    timing_free(tm);
    reference_free(&ref);
    data_free(&d);
    config_free(&cfg);
    free(sets);
    return rc;
usage:
    free(sets);
    return cmd_fail(EXIT_USAGE);
}
