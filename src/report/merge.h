/* merge: `kvc merge` (options in src/cli/merge.c), one results file from the CSV or JSONL files of shards or
 * resumed runs.
 *
 * Every input must be a complete kvc results file of one format (CSV with this kvc's header, or JSONL;
 * results.h); a torn last line is refused (finish that run with --resume first). No id may appear twice.
 * With --config CONFIG.json (and the --set values the runs used) merge knows the grid: every row must be
 * an experiment of it with the same label, every experiment must have its row, and the output is in grid
 * order, so merged shards are byte for byte the unsharded run. Without --config only duplicates are
 * checked and rows keep the order of the inputs (a note on stderr says so). Inputs must be regular files
 * (base/fileio.h: a FIFO is refused, never waited on). The output goes to stdout, or whole to --out FILE
 * (temporary file, then rename; FILE may be one of the inputs), opened, checked and locked (base/fileio.h)
 * before any input is read.
 * --per-head files (every input alike) hold data.layers x data.kv_heads rows per experiment, layer slowest.
 */
#ifndef KVC_MERGE_H
#define KVC_MERGE_H

#include <stddef.h>

typedef struct MergeArgs {
    const char *config;          /* --config CONFIG.json, or NULL */
    char *const *sets;           /* the --set values the runs used (only with config) */
    size_t n_sets;
    const char *out;             /* --out FILE, or NULL for stdout */
    int quiet;                   /* -q: no notes on stderr */
    const char *const *files;    /* the inputs, at least one */
    size_t n_files;
} MergeArgs;

/* Returns EXIT_OK, or EXIT_USAGE / EXIT_RUNTIME with kvc_fail set. */
int merge_files(const MergeArgs *args);

#endif
