/* main: the command table. Parse arguments -> run -> report -> exit code (0 ok, 1 runtime failure,
 * 2 usage or input error). stdout carries data only; messages go to stderr as "kvc: <where>: <what>".
 * stdout is flushed and checked before exit, so a full disk does not look like success.
 */
#include "config.h"
#include "evaluate.h"
#include "linalg.h"
#include "report.h"
#include "size.h"
#include "synth.h"
#include "util.h"

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
static int cmd_help(int argc, char **argv);

static const Command commands[] = {
    {"run", cmd_run, "run the experiments of a JSON config and print one row per experiment",
     "usage: kvc run CONFIG.json [--set PATH=JSON]... [--format table|csv|jsonl]\n"
     "\n"
     "Reads CONFIG.json (format: README.md, \"Config reference\"), synthesizes K, V and the query with\n"
     "numpy's generator, runs every expanded experiment through the shared attention kernel and prints\n"
     "one row per experiment.\n"
     "\n"
     "  --set PATH=JSON   override a config value before expansion (repeatable, applied in order);\n"
     "                    PATH is dotted with list indices: seed, data.tokens, experiments.0.bits;\n"
     "                    JSON strings need quotes: --set experiments.0.axis='\"channel\"'\n"
     "  --format FORMAT   table (default: aligned, 3 decimals), csv (round-trip exact numbers),\n"
     "                    jsonl (one JSON object per row)\n"
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
     "usage: kvc methods\n"},
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

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i]; returns 1 and sets *val, 0 if no match, -1 on error. */
static int take_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) return kvc_fail("%s: missing value after %s (got nothing)", argv[0], name);
    *val = argv[++*i];
    return 1;
}

static int cmd_run(int argc, char **argv)
{
    const char *path = NULL, *val;
    Format fmt = FORMAT_TABLE;
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    int rc = EXIT_USAGE, r;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(commands[0].usage, stdout);
            free(sets);
            return EXIT_OK;
        }
        if ((r = take_value(argc, argv, &i, "--set", &val)) != 0) {
            if (r < 0) goto usage;
            sets[n_sets++] = (char *)val;
        } else if ((r = take_value(argc, argv, &i, "--format", &val)) != 0) {
            if (r < 0) goto usage;
            if (report_format_parse(val, &fmt)) {
                kvc_fail("run: --format: must be table, csv or jsonl (got \"%s\")", val);
                goto usage;
            }
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            kvc_fail("run: unknown option; see kvc run --help (got \"%s\")", argv[i]);
            goto usage;
        } else if (path) {
            kvc_fail("run: only one config file is accepted (got \"%s\" after \"%s\")", argv[i], path);
            goto usage;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        kvc_fail("run: missing the config file; usage: kvc run CONFIG.json (got nothing)");
        goto usage;
    }

    Config cfg;
    if (config_load(&cfg, path, sets, n_sets)) {
        config_free(&cfg);
        goto usage;
    }
    Data d;
    if (synth_data(&d, &cfg)) {
        config_free(&cfg);
        goto usage;
    }
    Reference ref;
    eval_reference(&ref, &d);
    Row *rows = xcalloc(cfg.n_exps, sizeof *rows);
    rc = EXIT_OK;
    report_header(stdout, fmt);
    for (size_t i = 0; i < cfg.n_exps; i++) {
        if (eval_experiment(&rows[i], &cfg.exps[i], &cfg, &d, &ref)) {
            fprintf(stderr, "kvc: %s: experiments.%zu (%s): %s\n", path, cfg.exps[i].src, cfg.exps[i].label,
                    kvc_errmsg());
            rc = EXIT_RUNTIME;
            break;
        }
        report_row(stdout, fmt, &rows[i]);
    }
    if (rc == EXIT_OK && fmt == FORMAT_TABLE) report_table(stdout, rows, cfg.n_exps);
    free(rows);
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
        printf("%s%s\n  shrinks: %s\n  %s\n", m->name, m->needs_query ? "  [oracle: sees the evaluated query]" : "",
               m->factor, m->summary);
        for (size_t j = 0; j < m->n_params; j++) {
            const ParamDesc *p = &m->params[j];
            char def[64], range[128] = "";
            if (p->def == PARAM_REQUIRED) snprintf(def, sizeof def, "required");
            else if (p->kind == PARAM_ENUM) snprintf(def, sizeof def, "default \"%s\"", p->choices[p->def]);
            else snprintf(def, sizeof def, "default %ld", p->def);
            if (p->kind == PARAM_ENUM) {
                for (size_t k = 0; p->choices[k]; k++) {
                    strncat(range, k ? "|" : "", sizeof range - strlen(range) - 1);
                    strncat(range, p->choices[k], sizeof range - strlen(range) - 1);
                }
            } else {
                snprintf(range, sizeof range, "%ld..%ld", p->lo, p->hi);
            }
            printf("    %-9s %-16s %-14s %s\n", p->name, range, def, p->help);
        }
        printf("\n");
    }
    return EXIT_OK;
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage_main(stdout);
        return EXIT_OK;
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
        fprintf(stderr, "kvc: stdout: write error (got %s)\n", strerror(errno));
        return rc == EXIT_OK ? EXIT_RUNTIME : rc;
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
