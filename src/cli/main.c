/* main: the command table. Parse arguments -> run -> report -> exit code (0 ok, 1 runtime failure,
 * 2 usage or input error). stdout carries data only; messages go to stderr as "kvc: <where>: <what>".
 * stdout is flushed and checked before exit, so a full disk does not look like success.
 * Each command is one file in src/cli/ with its usage text and options (cli.h); -h/--help is answered here.
 */
#include "cli/cli.h"
#include "base/linalg.h"
#include "cli/provenance.h"
#include "base/memlimit.h"
#include "base/util.h"

#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <string.h>

const Command cmd_table[] = {
    {"run", cmd_run, cmd_run_opts, cmd_run_usage,
     "run the experiments of a JSON config and print one row per experiment"},
    {"size", cmd_size, cmd_size_opts, cmd_size_usage,
     "KV-cache size arithmetic (bytes per token and in total, ratio to FP16)"},
    {"methods", cmd_methods, cmd_methods_opts, cmd_methods_usage,
     "list the compression methods, their parameters, defaults and ranges"},
    {"bench", cmd_bench, cmd_bench_opts, cmd_bench_usage,
     "decode-speed benchmark: fused kernels per cache format vs. the memory bandwidth"},
    {"merge", cmd_merge, cmd_merge_opts, cmd_merge_usage,
     "combine the CSV or JSONL files of shards or resumed runs, checked against the grid"},
    {"synth", cmd_synth, cmd_synth_opts, cmd_synth_usage,
     "write the data a config measures (K, V, queries) as .npy or .safetensors files"},
    {"stats", cmd_stats, cmd_stats_opts, cmd_stats_usage,
     "what a config's data looks like: key outliers, sink and recent attention mass, effective rank of K"},
    {"help", cmd_help, cmd_help_opts, cmd_help_usage, "show help for kvc or for one command"},
};
const size_t cmd_count = sizeof cmd_table / sizeof cmd_table[0];

const Command *cmd_find(const char *name)
{
    for (size_t i = 0; i < cmd_count; i++)
        if (strcmp(cmd_table[i].name, name) == 0) return &cmd_table[i];
    return NULL;
}

int cmd_fail(int rc)
{
    fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    return rc;
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
#ifdef __GLIBC__
    /* Every experiment allocates and frees tensors of tens of MiB; glibc would map each one fresh (and fault in
     * its pages again) and unmap it on free. Keeping them in the heap, never trimmed, lets the next experiment
     * reuse pages already faulted in: the kvc run of README's quality benchmark spends 0.2 s in the kernel
     * instead of 0.75 s, with the same peak RSS. */
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
    memlimit_blas_reexec(argv);   /* under ulimit -v/-d: again without OpenBLAS's idle threads (memlimit.h) */
    la_init();
    prov_argc = argc, prov_argv = argv;
    if (argc < 2) {
        cmd_usage_main(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) return finish(cmd_version());
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        cmd_usage_main(stdout);
        return finish(EXIT_OK);
    }
    if (strcmp(name, "__complete") == 0) return finish(cmd_complete(argc - 1, argv + 1));   /* hidden: complete.c */
    const Command *c = cmd_find(name);
    if (!c) {
        const char *names[16];
        size_t n = 0;
        for (; n < cmd_count && n < 16; n++) names[n] = cmd_table[n].name;
        fprintf(stderr, "kvc: unknown command; did you mean \"%s\"? see kvc --help (got \"%s\")\n",
                opt_nearest(name, names, n, (size_t)-1), name);
        return EXIT_USAGE;
    }
    if (opt_help_asked(argc - 1, argv + 1, c->opts)) {   /* kvc CMD ... --help: the command's usage */
        fputs(c->usage, stdout);
        return finish(EXIT_OK);
    }
    return finish(c->fn(argc - 1, argv + 1));
}
