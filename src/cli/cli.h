/* cli: kvc's commands, the top layer (nothing below src/cli/ includes it; the tests link everything else).
 *
 * main.c is the command table: name, function, options, usage text, one-line summary. Each command lives in its
 * own file with its usage text and its option table: run.c, merge.c, size.c, methods.c, bench.c, synth.c, stats.c
 * and help.c (kvc help, kvc --help, kvc --version); complete.c is the hidden `kvc __complete` of the shell
 * completion, provenance.h what made a result file (kvc --version, FILE.meta.json). Every command reads its arguments with the one option parser,
 * opts.h; main.c answers -h/--help for all of them before the command runs.
 *
 * A command gets argv[0] = its name and returns the exit status: EXIT_OK, EXIT_RUNTIME (1) or EXIT_USAGE (2),
 * having printed its one-line "kvc: <where>: <what> (got <value>)" message (cmd_fail). main.c then flushes and
 * checks stdout.
 */
#ifndef KVC_CLI_H
#define KVC_CLI_H

#include "cli/opts.h"

#include <stddef.h>
#include <stdio.h>

typedef struct Command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const OptSpec *opts;   /* its options: -h/--help detection and "did you mean" */
    const char *usage;     /* kvc help NAME, kvc NAME --help */
    const char *summary;   /* one line in kvc --help */
} Command;

extern const Command cmd_table[];
extern const size_t cmd_count;
const Command *cmd_find(const char *name);   /* NULL when there is none of that name */

/* Prints "kvc: " and the kvc_fail message on stderr; returns rc. */
int cmd_fail(int rc);

/* The commands (argv[0] is the command's name), their options and usage texts. */
int cmd_run(int argc, char **argv);
int cmd_size(int argc, char **argv);
int cmd_methods(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_help(int argc, char **argv);
/* kvc __complete ...: the hidden helper of scripts/kvc-completion.bash (complete.c); not in the table. */
int cmd_complete(int argc, char **argv);
extern const OptSpec cmd_run_opts[], cmd_size_opts[], cmd_methods_opts[], cmd_bench_opts[], cmd_merge_opts[],
    cmd_synth_opts[], cmd_stats_opts[], cmd_help_opts[];
extern const char cmd_run_usage[], cmd_size_usage[], cmd_methods_usage[], cmd_bench_usage[], cmd_merge_usage[],
    cmd_synth_usage[], cmd_stats_usage[], cmd_help_usage[];

/* kvc --help (and kvc alone, on stderr): the version line, the commands and their summaries, the exit codes. */
void cmd_usage_main(FILE *f);
/* kvc --version */
int cmd_version(void);

#endif
