/* main: the command table. Parse arguments -> run -> report -> exit code (0 ok, 1 runtime failure,
 * 2 usage or input error). stdout carries data only; messages go to stderr as "kvc: <where>: <what>".
 * stdout is flushed and checked before exit, so a full disk does not look like success.
 */
#include "cli/bench.h"
#include "config/config.h"
#include "eval/evaluate.h"
#include "base/linalg.h"
#include "data/load.h"
#include "report/merge.h"
#include "report/report.h"
#include "eval/size.h"
#include "report/sweep.h"
#include "data/synth.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
    const char *usage;
} Command;

static int cmd_run(int argc, char **argv);
static int cmd_size_main(int argc, char **argv);
static int cmd_methods(int argc, char **argv);
static int cmd_bench(int argc, char **argv);
static int cmd_merge(int argc, char **argv);
static int cmd_synth(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const Command commands[] = {
    {"run", cmd_run, "run the experiments of a JSON config and print one row per experiment",
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
     "  -h, --help        this help\n"},
    {"size", cmd_size_main, "KV-cache size arithmetic (bytes per token and in total, ratio to FP16)",
     "usage: kvc size --head-dim D [--layers L] [--kv-heads H] [--tokens T] [--batch B]\n"
     "                [--k-bits N] [--v-bits N] [--k-rank R] [--v-rank R] [--format table|csv]\n"
     "\n"
     "KV cache size = layers x kv_heads x tokens x batch x (k_rank x k_bits + v_rank x v_bits) / 8 bytes.\n"
     "Defaults: layers 1, kv-heads 1, tokens 1, batch 1, 16 bits (FP16), full rank (rank = head-dim).\n"
     "Low-rank bases and quantization scales are not counted here (kvc run counts them).\n"
     "\n"
     "  --head-dim D      numbers per key (and per value) per head, 1..65536 (required)\n"
     "  --layers L --kv-heads H --tokens T --batch B   positive integers\n"
     "  --k-bits N --v-bits N    bits per stored number, 1..64 (16 = FP16, 8 = FP8/INT8, 4 = INT4)\n"
     "  --k-rank R --v-rank R    numbers stored per token per head, 1..head-dim\n"
     "  --format FORMAT   table (default) or csv\n"
     "  -h, --help        this help\n"},
    {"methods", cmd_methods, "list the compression methods, their parameters, defaults and ranges",
     "usage: kvc methods\n"
     "\n"
     "Every method runs once per (layer, KV head) on that head's (tokens, head_dim) cache; the bytes of all\n"
     "heads are summed. A method marked [oracle] looks at the exact attention of the evaluation queries,\n"
     "which no real cache can know: it is a bound, not a method to deploy.\n"},
    {"bench", cmd_bench, "decode-speed benchmark: fused kernels per cache format vs. the memory bandwidth",
     BENCH_USAGE},
    {"merge", cmd_merge, "combine the CSV or JSONL files of shards or resumed runs, checked against the grid",
     MERGE_USAGE},
    {"synth", cmd_synth, "write the data a config measures (K, V, queries) as .npy or .safetensors files",
     "usage: kvc synth CONFIG.json -o DIR [--set PATH=JSON]... [--format npy|safetensors]\n"
     "\n"
     "Makes the data of CONFIG.json exactly as kvc run measures it and writes it into DIR (created if\n"
     "missing): keys.npy, values.npy, queries.npy and observe.npy (those the config has; float64, shapes\n"
     "(layers, kv_heads, tokens, head_dim) and (layers, q_heads, queries, head_dim)), or with --format\n"
     "safetensors one cache.safetensors holding tensors \"keys\", \"values\", \"queries\", \"observe\".\n"
     "Keys are written as the cache holds them: post-RoPE, or pre-RoPE with data.rope.cache \"pre\"; queries\n"
     "as attention reads them. DIR/files.json is the config with a data block that loads these files\n"
     "(data.source \"files\"): kvc run DIR/files.json prints the same numbers as kvc run CONFIG.json (the\n"
     "row ids differ: the config differs).\n"
     "\n"
     "  -o, --out DIR     the output directory (required)\n"
     "  --set PATH=JSON   override a config value first, as for kvc run (repeatable)\n"
     "  --format FORMAT   npy (default) or safetensors\n"
     "  -h, --help        this help\n"},
    {"help", cmd_help, "show help for kvc or for one command", "usage: kvc help [COMMAND]\n"},
};
static const size_t n_commands = sizeof commands / sizeof commands[0];

static void usage_main(FILE *f)
{
    fprintf(f, "kvc %s: a laboratory for KV-cache compression\n\n", KVC_VERSION);
    fprintf(f, "usage: kvc COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < n_commands; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n  kvc --version     print the version\n"
               "  kvc help COMMAND  help for one command (also: kvc COMMAND --help)\n\n"
               "exit status: 0 ok, 1 runtime failure (e.g. a write error), 2 usage or input error\n");
}

static const Command *find_command(const char *name)
{
    for (size_t i = 0; i < n_commands; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static int usage_error(void)
{
    fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    return EXIT_USAGE;
}

/* The one positional argument of run and synth, CONFIG.json: after the options, so anything else starting with
 * '-' is an unknown option, and a second file is refused. Returns 0, or -1 with kvc_fail. */
static int take_config_path(const char *cmd, const char *arg, const char **path)
{
    if (arg[0] == '-' && arg[1] != '\0')
        return kvc_fail("%s: unknown option; see kvc %s --help (got \"%s\")", cmd, cmd, arg);
    if (*path) return kvc_fail("%s: only one config file is accepted (got \"%s\" after \"%s\")", cmd, arg, *path);
    *path = arg;
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    const char *path = NULL, *val;
    Format fmt = FORMAT_TABLE;
    int fmt_given = 0;
    SweepOpts so = {0};   /* --out, --resume, --shard, --list, -q (sweep.h) */
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    int rc = EXIT_USAGE, r, per_head = 0, timing = 1;
    const char *timing_opt = NULL;   /* --threads or --timing-repeat, when given */
    size_t threads = 1, repeat = TIMING_REPEAT;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(commands[0].usage, stdout);
            free(sets);
            return EXIT_OK;
        }
        if ((r = opt_value(argc, argv, &i, "--set", &val)) != 0) {
            if (r < 0) goto usage;
            sets[n_sets++] = (char *)val;
        } else if ((r = opt_value(argc, argv, &i, "--format", &val)) != 0) {
            if (r < 0) goto usage;
            if (report_format_parse(val, &fmt)) {
                kvc_fail("run: --format: must be table, csv or jsonl (got \"%s\")", val);
                goto usage;
            }
            fmt_given = 1;
        } else if (strcmp(argv[i], "--per-head") == 0) {
            per_head = 1;
        } else if (strcmp(argv[i], "--no-timing") == 0) {
            timing = 0;
        } else if ((r = opt_value(argc, argv, &i, "--threads", &val)) != 0) {
            if (r < 0 || opt_size(val, "run: --threads", 1, 1024, &threads)) goto usage;
            timing_opt = "--threads";
        } else if ((r = opt_value(argc, argv, &i, "--timing-repeat", &val)) != 0) {
            if (r < 0 || opt_size(val, "run: --timing-repeat", 1, 100000, &repeat)) goto usage;
            timing_opt = "--timing-repeat";
        } else if ((r = sweep_option(&so, argc, argv, &i)) != 0) {
            if (r < 0) goto usage;
        } else if (take_config_path("run", argv[i], &path)) {
            goto usage;
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
    if (config_load(&cfg, path, sets, n_sets)) {
        config_free(&cfg);
        goto usage;
    }
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
    Data d;
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
    eval_reference(&ref, &d);
    /* --per-head rows carry no timing (a decode step is over every head) */
    Timing *tm = timing && !per_head ? timing_create(&d, (int)threads, (int)repeat) : NULL;
    size_t per = per_head ? d.L * d.H : 1;   /* rows per experiment */
    Row *rows = xcalloc(cfg.n_exps * per, sizeof *rows);
    rc = EXIT_OK;
    for (size_t i = 0; i < cfg.n_exps; i++) {
        if (!sweep_wants(sw, i)) continue;
        Row *ri = &rows[i * per];
        if (per_head ? eval_experiment_per_head(ri, &cfg.exps[i], &cfg, &d, &ref)
                     : eval_experiment(ri, &cfg.exps[i], &cfg, &d, &ref, tm)) {
            sweep_message(sw);
            fprintf(stderr, "kvc: %s: experiments.%zu (%s): %s\n", path, cfg.exps[i].src, cfg.exps[i].label,
                    kvc_errmsg());
            rc = EXIT_RUNTIME;
            break;
        }
        if (ri->no_timing && !so.quiet) {
            sweep_message(sw);
            fprintf(stderr, "kvc: note: experiments.%zu (%s): no decode timing: %s\n", cfg.exps[i].src,
                    cfg.exps[i].label, ri->no_timing);
        }
        if (sweep_rows(sw, ri, per, i)) {
            sweep_message(sw);
            fprintf(stderr, "kvc: %s\n", kvc_errmsg());
            rc = EXIT_RUNTIME;
            break;
        }
    }
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
    return usage_error();
}

static int cmd_size_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(commands[1].usage, stdout);
            return EXIT_OK;
        }
    return size_command(argc, argv) ? usage_error() : EXIT_OK;
}

static int cmd_methods(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(commands[2].usage, stdout);
        return EXIT_OK;
    }
    if (argc > 1) {
        kvc_fail("methods: takes no arguments (got \"%s\")", argv[1]);
        return usage_error();
    }
    for (size_t i = 0; i < method_count; i++) {
        const MethodDesc *m = method_registry[i];
        printf("%s%s\n  shrinks: %s\n  %s\n", m->name, m->needs_query ? "  [oracle: sees the evaluation queries]" : "",
               m->factor, m->summary);
        /* columns sized to this method's longest name, range and default */
        int wn = 0, wr = 0, wd = 0;
        char def[METHOD_MAX_PARAMS][64], range[METHOD_MAX_PARAMS][128];
        for (size_t j = 0; j < m->n_params; j++) {
            const ParamDesc *p = &m->params[j];
            param_default_text(def[j], sizeof def[j], p);
            param_range_text(range[j], sizeof range[j], p);
            if ((int)strlen(p->name) > wn) wn = (int)strlen(p->name);
            if ((int)strlen(range[j]) > wr) wr = (int)strlen(range[j]);
            if ((int)strlen(def[j]) > wd) wd = (int)strlen(def[j]);
        }
        for (size_t j = 0; j < m->n_params; j++)
            printf("    %-*s  %-*s  %-*s  %s\n", wn, m->params[j].name, wr, range[j], wd, def[j], m->params[j].help);
        printf("\n");
    }
    return EXIT_OK;
}

/* kvc bench: src/cli/bench.c parses its own arguments (and --help). */
static int cmd_bench(int argc, char **argv)
{
    int rc = bench_command(argc, argv);
    return rc < 0 ? usage_error() : rc;
}

static int cmd_merge(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(MERGE_USAGE, stdout);
            return EXIT_OK;
        }
    int rc = merge_command(argc, argv);
    if (rc != EXIT_OK) fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    return rc;
}

static int cmd_synth(int argc, char **argv)
{
    const char *path = NULL, *dir = NULL, *val;
    SaveFormat fmt = SAVE_NPY;
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    int r;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(find_command("synth")->usage, stdout);
            free(sets);
            return EXIT_OK;
        }
        if ((r = opt_value(argc, argv, &i, "--set", &val)) != 0) {
            if (r < 0) goto usage;
            sets[n_sets++] = (char *)val;
        } else if ((r = opt_value(argc, argv, &i, "--format", &val)) != 0) {
            if (r < 0) goto usage;
            if (strcmp(val, "npy") == 0) fmt = SAVE_NPY;
            else if (strcmp(val, "safetensors") == 0) fmt = SAVE_SAFETENSORS;
            else {
                kvc_fail("synth: --format: must be npy or safetensors (got \"%s\")", val);
                goto usage;
            }
        } else if ((r = opt_value(argc, argv, &i, "--out", &val)) != 0 ||
                   (r = opt_value(argc, argv, &i, "-o", &val)) != 0) {
            if (r < 0) goto usage;
            dir = val;
        } else if (take_config_path("synth", argv[i], &path)) {
            goto usage;
        }
    }
    if (!path) {
        kvc_fail("synth: missing the config file; usage: kvc synth CONFIG.json -o DIR (got nothing)");
        goto usage;
    }
    if (!dir) {
        kvc_fail("synth: missing the output directory; usage: kvc synth CONFIG.json -o DIR (got nothing)");
        goto usage;
    }
    Config cfg;
    Data d;
    if (config_load(&cfg, path, sets, n_sets)) {
        config_free(&cfg);
        goto usage;
    }
    if (data_make(&d, &cfg)) {
        config_free(&cfg);
        goto usage;
    }
    r = load_save(dir, fmt, &d, &cfg);
    data_free(&d);
    config_free(&cfg);
    free(sets);
    if (r != 0) {
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
        return r < 0 ? EXIT_USAGE : EXIT_RUNTIME;
    }
    return EXIT_OK;
usage:
    free(sets);
    return usage_error();
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage_main(stdout);
        return EXIT_OK;
    }
    if (argc > 2) {
        kvc_fail("help: one command at most; see kvc help (got \"%s\" after \"%s\")", argv[2], argv[1]);
        return usage_error();
    }
    const Command *c = find_command(argv[1]);
    if (!c) {
        kvc_fail("help: unknown command; see kvc help (got \"%s\")", argv[1]);
        return usage_error();
    }
    fputs(c->usage, stdout);
    return EXIT_OK;
}

/* A full disk or a closed pipe must not look like success. */
static int finish(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (rc == EXIT_OK) fprintf(stderr, "kvc: stdout: write error (got %s)\n", strerror(errno));
        return rc == EXIT_OK ? EXIT_RUNTIME : rc;   /* else the failing command has said why */
    }
    return rc;
}

int main(int argc, char **argv)
{
    la_init();
    if (argc < 2) {
        usage_main(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("kvc %s\n", KVC_VERSION);
        return finish(EXIT_OK);
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage_main(stdout);
        return finish(EXIT_OK);
    }
    const Command *c = find_command(name);
    if (!c) {
        const char *names[16];
        size_t best = 0, bd = (size_t)-1;
        for (size_t i = 0; i < n_commands && i < 16; i++) {
            names[i] = commands[i].name;
            size_t dd = edit_distance(name, names[i]);
            if (dd < bd) { bd = dd; best = i; }
        }
        fprintf(stderr, "kvc: unknown command; did you mean \"%s\"? see kvc --help (got \"%s\")\n", names[best], name);
        return EXIT_USAGE;
    }
    return finish(c->fn(argc - 1, argv + 1));
}
