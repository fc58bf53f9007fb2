/* run: `kvc run CONFIG.json`: every experiment of a config, one row each (or one per layer and KV head). The
 * config (src/config/), the data (src/data/), the reference and the experiments (src/eval/); where the rows go
 * and which of them run (src/report/sweep.h). */
#include "cli/cli.h"
#include "base/memlimit.h"
#include "base/util.h"
#include "cli/provenance.h"
#include "config/config.h"
#include "data/load.h"
#include "data/model_source.h"
#include "data/synth.h"
#include "eval/evaluate.h"
#include "eval/memory.h"
#include "eval/timing.h"
#include "report/report.h"
#include "report/results.h"
#include "report/sweep.h"

#include <stdio.h>
#include <stdlib.h>

const char cmd_run_usage[] =
    "usage: kvc run CONFIG.json [--set PATH=JSON]... [--format table|csv|jsonl] [--per-head]\n"
    "               [--out FILE [--resume]] [--shard I/N] [--list] [-q] [-j N]\n"
    "               [--no-timing] [--threads N] [--timing-repeat N]\n"
    "\n"
    "Reads CONFIG.json (format: README.md, \"Config reference\"), synthesizes K, V and the query with\n"
    "numpy's generator (or reads them from .npy/.safetensors files: data.source \"files\", or captures\n"
    "them from a Llama model run on a text or token ids: data.source \"model\"), runs every expanded\n"
    "experiment through the shared attention kernel and prints one row per experiment. With a model, the\n"
    "model also decodes the continuation over each compressed cache: lm_kl, lm_nll, lm_nll_delta, lm_top1\n"
    "(and recall_acc with data.answers) say what the compression did to its predictions (README \"A real\n"
    "model in the loop\"), and a note on stderr its prefill tokens/s and sgemm GFLOP/s. CSV and JSONL\n"
    "rows end in an id: a hash of the config values that define the row (data, seed, method,\n"
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
    "                    run keeps every finished row), a table is written whole at the end; and\n"
    "                    FILE.meta.json, what made the rows: kvc version and commit, config path and\n"
    "                    sha256, --set values, options, dates, CPU, BLAS (README \"Provenance\")\n"
    "  --resume          keep the rows already in FILE (matched by id; a torn last line is removed)\n"
    "                    and run only the others; refused if FILE holds rows of another config\n"
    "  --shard I/N       run only grid positions p with p mod N = I-1 (1 <= I <= N); combine the\n"
    "                    shard files with kvc merge\n"
    "  --list            print the rows this run would compute (grid position, id, experiments.N,\n"
    "                    label; tab-separated) and compute nothing\n"
    "  -q, --quiet       no progress line (on stderr when it is a terminal and the run takes more\n"
    "                    than a second: elapsed time, phase, row k/N, ETA) and no notes\n"
    "  -j, --jobs N      threads for the evaluation, 1..64 (default: the CPUs online; 1 under a finite\n"
    "                    ulimit -v or -d): a layer's KV heads run their method and attention on them,\n"
    "                    the keys' and values' error norms are summed on two; every row is the same\n"
    "                    for any N\n"
    "  --no-timing       leave decode_ns, decode_speedup and decode_ns_mad empty (the only columns\n"
    "                    that differ between two runs of one config; the table then omits them)\n"
    "  --threads N       threads of the timed decode steps, 1..1024 (default 1)\n"
    "  --timing-repeat N time exactly N rounds (1..100000) per distinct stored form; by default the\n"
    "                    rounds fit a budget of 0.25 s per form (at least 3). decode_ns is the median\n"
    "                    decode step over the method's stored cache in nanoseconds, decode_speedup the\n"
    "                    median step over the FP16 cache (timed once per run) divided by it,\n"
    "                    decode_ns_mad the spread of decode_ns (median absolute deviation, ns) (README\n"
    "                    \"Decode timing\"; a stored form the decode path cannot read leaves them\n"
    "                    empty, and one without fused kernels is noted, both on stderr)\n"
    "  -h, --help        this help\n";

enum {
    RUN_SET, RUN_FORMAT, RUN_PER_HEAD, RUN_NO_TIMING, RUN_THREADS, RUN_TIMING_REPEAT, RUN_OUT, RUN_RESUME, RUN_SHARD,
    RUN_LIST, RUN_QUIET, RUN_JOBS
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
    [RUN_JOBS] = {"-j", "--jobs", 1},
    {NULL, NULL, 0},
};

/* The RUN record of the sidecar: the common part, the config file as read with the --set values, the options. */
static cJSON *run_provenance(const char *path, char **sets, size_t n_sets, Format fmt, int fmt_given, int per_head,
                             int timing, size_t threads, size_t repeat, const SweepOpts *so)
{
    cJSON *run = prov_run_new();
    cJSON *file = prov_file(path);
    cJSON *cfg = file ? file : cJSON_CreateObject();
    if (!file) cJSON_AddStringToObject(cfg, "path", path);   /* read once already; gone or unreadable since */
    cJSON *set = cJSON_AddArrayToObject(cfg, "sets");
    for (size_t i = 0; i < n_sets; i++) cJSON_AddItemToArray(set, cJSON_CreateString(sets[i]));
    cJSON_AddItemToObject(run, "config", cfg);
    cJSON *o = cJSON_AddObjectToObject(run, "options");
    static const char *const names[] = {"table", "csv", "jsonl"};
    if (!fmt_given) results_format_of_name(so->out, &fmt);   /* sweep_open has checked that it names one */
    cJSON_AddStringToObject(o, "format", names[fmt]);
    cJSON_AddBoolToObject(o, "per_head", per_head);
    cJSON_AddBoolToObject(o, "timing", timing && !per_head);
    cJSON_AddNumberToObject(o, "threads", (double)threads);
    cJSON_AddNumberToObject(o, "jobs", (double)eval_threads());   /* -j: the rows do not depend on it */
    if (repeat) cJSON_AddNumberToObject(o, "timing_repeat", (double)repeat);
    else cJSON_AddStringToObject(o, "timing_repeat", "budget");   /* rounds within 0.25 s per form (timing.h) */
    cJSON_AddBoolToObject(o, "resume", so->resume);
    if (so->shard_n) {
        char sh[48];
        snprintf(sh, sizeof sh, "%zu/%zu", so->shard_i, so->shard_n);
        cJSON_AddStringToObject(o, "shard", sh);
    } else {
        cJSON_AddNullToObject(o, "shard");
    }
    return run;
}

/* timing.h's progress hook: the step of the row in progress */
static void timing_step(void *sweep, const char *what)
{
    sweep_step(sweep, what);
}

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
    size_t threads = 1, repeat = 0;   /* repeat 0: rounds within the time budget (timing.h) */
    size_t jobs_given = 0;            /* -j */
    OptParser p;
    opt_init(&p, "run", argc, argv, cmd_run_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        const char *v = p.value;
        switch (k) {
        case OPT_ERROR:
            goto usage;
        case OPT_ARG:   /* CONFIG.json */
            if (opt_config_path("run", v, &path)) goto usage;
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
        case RUN_JOBS:
            if (opt_size(v, p.where, 1, 64, &jobs_given)) goto usage;
            eval_set_threads((int)jobs_given);
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
    if (jobs_given > 1 && eval_threads() == 1 && !so.quiet)
        fprintf(stderr, "kvc: note: -j %zu: the evaluation runs on one thread under a finite ulimit -v or -d (OpenBLAS "
                        "would map a 128 MiB buffer for each thread that computes)\n", jobs_given);
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
    sweep_phase(sw, "making data");
    xalloc_context("%s: making the data", path);
    synth_set_threads(eval_threads());
    if (data_make_run(&d, &cfg)) {
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
    if (d.model && !so.quiet) {   /* what the model's own run measured (README "A real model in the loop") */
        char speed[256];
        model_source_speed(speed, sizeof speed, d.model);
        sweep_note(sw, "kvc: note: %s: model: %s", path, speed);
    }
    /* --out FILE: FILE.meta.json says what made the rows (provenance.h), written now and again at the end */
    cJSON *prov = so.out ? run_provenance(path, sets, n_sets, fmt, fmt_given, per_head, timing, threads, repeat, &so)
                         : NULL;
    cJSON *prov_before = prov && so.resume ? prov_sidecar_runs(so.out) : NULL;   /* the runs that wrote FILE */
    if (prov && prov_sidecar(so.out, prov_before, prov)) {
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
        cJSON_Delete(prov);
        cJSON_Delete(prov_before);
        sweep_close(sw, 0);
        data_free(&d);
        config_free(&cfg);
        free(sets);
        return EXIT_RUNTIME;
    }
    Reference ref;
    sweep_phase(sw, "reference");
    xalloc_context("%s: the exact attention of the reference", path);
    eval_reference(&ref, &d);
    /* --per-head rows carry no timing (a decode step is over every head) */
    Timing *tm = timing && !per_head ? timing_create(&d, (int)threads, (int)repeat) : NULL;
    if (tm) timing_set_hook(tm, timing_step, sw);
    size_t per = per_head ? d.L * d.H : 1;   /* rows per experiment */
    Row *rows = xcalloc(cfg.n_exps * per, sizeof *rows);
    rc = EXIT_OK;
    /* streamed data without timing: every experiment in one pass over the layers (each layer made once) */
    int batch = !tm && d.stream;
    size_t batch_failed = SIZE_MAX;
    char *batch_err = NULL;
    if (batch) {
        const Experiment **exs = xcalloc(cfg.n_exps, sizeof *exs);
        Row **rp = xcalloc(cfg.n_exps, sizeof *rp);
        size_t *idx = xcalloc(cfg.n_exps, sizeof *idx), n = 0, f;
        for (size_t i = 0; i < cfg.n_exps; i++)
            if (sweep_wants(sw, i)) exs[n] = &cfg.exps[i], rp[n] = &rows[i * per], idx[n++] = i;
        sweep_phase(sw, "experiments, a layer at a time");
        xalloc_context("%s: the experiments, a layer at a time", path);
        if (n && eval_experiments(rp, exs, n, per_head, &cfg, &d, &ref, &f)) {
            batch_failed = idx[f];
            batch_err = xstrdup(kvc_errmsg());
        }
        free(exs);
        free(rp);
        free(idx);
    }
    for (size_t i = 0; i < cfg.n_exps; i++) {
        if (!sweep_wants(sw, i)) continue;
        Row *ri = &rows[i * per];
        char *label = report_label_text(cfg.exps[i].label);   /* messages are one line whatever a label holds */
        xalloc_context("%s: experiments.%zu (%s)", path, cfg.exps[i].src, label);
        sweep_row(sw, i);
        if (batch ? (i == batch_failed ? kvc_fail("%s", batch_err) : 0)
                  : per_head ? eval_experiment_per_head(ri, &cfg.exps[i], &cfg, &d, &ref)
                             : eval_experiment(ri, &cfg.exps[i], &cfg, &d, &ref, tm)) {
            sweep_stop(sw);
            fprintf(stderr, "kvc: %s: experiments.%zu (%s): %s\n", path, cfg.exps[i].src, label, kvc_errmsg());
            free(label);
            rc = EXIT_RUNTIME;
            break;
        }
        if (ri->no_timing && !so.quiet)
            sweep_note(sw, "kvc: note: experiments.%zu (%s): no decode timing: %s", cfg.exps[i].src, label,
                       ri->no_timing);
        else if (tm && timing_note(tm) && !so.quiet)   /* once per stored form: its first row */
            sweep_note(sw, "kvc: note: experiments.%zu (%s): decode timing: %s", cfg.exps[i].src, label,
                       timing_note(tm));
        free(label);
        if (sweep_rows(sw, ri, per, i)) {
            sweep_stop(sw);
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
    if (prov) {   /* a table exists only now */
        prov_run_finish(prov, rc);
        if (prov_sidecar(so.out, prov_before, prov)) {
            fprintf(stderr, "kvc: %s\n", kvc_errmsg());
            rc = EXIT_RUNTIME;
        }
        cJSON_Delete(prov);
        cJSON_Delete(prov_before);
    }
    free(batch_err);
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
