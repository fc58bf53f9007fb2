/* merge: `kvc merge`, one results file from the CSV or JSONL files of shards or resumed runs.
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

#define MERGE_USAGE                                                                                          \
    "usage: kvc merge [--config CONFIG.json [--set PATH=JSON]...] [--out FILE] [-q] FILE...\n"               \
    "\n"                                                                                                     \
    "Combines the CSV (or JSONL) files of kvc run --shard or --resume into one, keyed by the id column.\n"   \
    "Refuses a torn last line, a row that appears twice and mixed formats. With --config (and the same\n"   \
    "--set values as the runs) it also refuses rows that are not in the config's grid, labels that\n"        \
    "changed and missing rows, and writes the rows in grid order: merged shards equal the unsharded run.\n"  \
    "\n"                                                                                                     \
    "  --config CONFIG.json  the config the files were run from; without it missing rows go unnoticed\n"    \
    "  --set PATH=JSON       the overrides the runs used (repeatable, needs --config)\n"                     \
    "  --out FILE            write FILE whole (temporary file, then rename) instead of stdout\n"             \
    "  -q, --quiet           no notes on stderr\n"                                                           \
    "  -h, --help            this help\n"

/* argv[0] is "merge". Returns EXIT_OK, or EXIT_USAGE / EXIT_RUNTIME with kvc_fail set. */
int merge_command(int argc, char **argv);

#endif
