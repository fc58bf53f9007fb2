/* sweep: where the rows of `kvc run` go, and which rows run. The options --out, --resume, --shard and -q,
 * and the progress line. No computation: main evaluates; this module selects, writes and reports progress.
 *
 * Output. Without --out, rows go to stdout as before. With --out FILE the format comes from --format or the
 * name (.csv, .jsonl/.ndjson, .txt = table; a contradiction is an error). CSV and JSONL are appended one
 * row at a time, each row one write(2) of a complete line, so a killed run (even SIGKILL) leaves every
 * finished row; the file is fsync'ed about once a second and at the end. A table needs every row, so it is
 * written to a temporary file next to FILE and renamed over FILE at the end: FILE is old or whole, never
 * half. How FILE is opened (symlinks, devices and FIFOs, directories refused), locked against every other kvc
 * writer, and how a signal removes the table's temporary: base/fileio.h.
 *
 * Resume. With --resume an existing FILE is read back (results.h): its rows are matched by id (expid.h) to
 * the expanded grid and skipped; the others run and are appended, in grid order. With --per-head an
 * experiment runs again when any of its (layer, head) rows is missing, and only the missing rows are written. A row whose id is not in
 * this config (or shard), or whose label differs, is refused: the config changed since FILE was written.
 * A torn last line (no final newline: a write cut short) is truncated away with a note on stderr, when it is
 * the beginning of a kvc row whose label begins one of the config's (results.h checks its cells); any other
 * last line is refused. A missing or empty FILE starts fresh, so one command line serves the first run and
 * every rerun.
 *
 * Shards. --shard I/N (1 <= I <= N) keeps the rows at grid positions p (0-based) with p mod N = I-1:
 * deterministic, interleaved so that slow and fast parameter values spread over the shards.
 *
 * List. --list prints the rows of this run (its shard) to stdout, one per line: grid position, id,
 * experiments.N (the experiment object it expands from), label, separated by tabs; nothing is computed, no
 * data is made and no file is written (--out and --resume are refused with it). It validates a config in an
 * instant, whatever the size of its data: rows are selected (sweep_open) before the data exists, the output is
 * opened (sweep_start) after.
 *
 * Progress. When stderr is a terminal and -q is not given, one line on stderr tells where the run is, redrawn
 * every 0.2 s by a thread (so it keeps time during a long row) once the run has taken KVC_PROGRESS_DELAY seconds
 * (default 1): elapsed time and the phase, "making data", "reference", or "row k/N (p%, ETA t)" with the row's
 * label and its step ("timing", "timing the FP16 reference"). At the end it is replaced by a summary (rows
 * done/total, rate, time) and a newline; after an error the line is ended as it stood; on SIGINT, SIGTERM or
 * SIGHUP a hook in base/fileio's handler ends it with a newline before the process dies of the signal, so the
 * shell's prompt starts on a line of its own. Notes (sweep_note) and rows written to stdout on the same terminal
 * take the line's place and it is drawn again below them.
 */
#ifndef KVC_SWEEP_H
#define KVC_SWEEP_H

#include "config/config.h"
#include "eval/evaluate.h"
#include "report/report.h"

#include <stddef.h>

/* What the options of kvc run (src/cli/run.c) ask for. */
typedef struct SweepOpts {
    const char *out;            /* --out FILE, or NULL for stdout */
    int resume;                 /* --resume */
    size_t shard_i, shard_n;    /* --shard I/N, 1-based; 0 when not given */
    int quiet;                  /* -q, --quiet: no progress line, no notes */
    int list;                   /* --list: print the rows this run would compute, compute nothing */
} SweepOpts;

/* Parses "I/N" (1 <= I <= N <= 1000000). Returns 0 or -1 (no kvc_fail). */
int sweep_parse_shard(const char *s, size_t *i, size_t *n);

typedef struct Sweep Sweep;

/* What main knows about the run. */
typedef struct SweepInput {
    const Config *cfg;           /* its ids come from cfg->canon (expid.h): the config file is not read again */
    const char *path;            /* the config file, for messages */
    Format fmt;                  /* --format, or the default */
    int fmt_given;               /* --format was given (else the --out name decides) */
    int per_head;                /* --per-head: each experiment gives layers x kv_heads rows, (layer, head), layer
                                  * slowest */
} SweepInput;

/* Selects the rows of the run before any data exists: resolves the format, computes the ids, selects the
 * shard, and with --list prints the rows (then the Sweep has nothing left to do but sweep_close). Touches no
 * file. Returns NULL with kvc_fail set on a usage or input error (exit 2). */
Sweep *sweep_open(const SweepOpts *o, const SweepInput *in);

/* Opens the output (call it once the data exists, so that a run refused for its data leaves FILE as it was):
 * --out FILE is locked and truncated (or, with --resume, read and checked, and its rows left out), a table's
 * temporary file is created, and the progress clock starts. Returns 0, or -1 with kvc_fail set on a usage or
 * input error (exit 2; nothing is left open, and sweep_close then only frees). */
int sweep_start(Sweep *s);

int sweep_wants(const Sweep *s, size_t i);   /* experiment i is in this shard and not yet (all) in FILE */

/* Writes rows[0..n) of experiment i (n = 1, or L x H with --per-head; rows already in FILE are left out)
 * in one write(2); a table keeps them for the end. Updates the progress line. Returns 0, or -1 with
 * kvc_fail on a write error (exit 1). */
int sweep_rows(Sweep *s, const Row *rows, size_t n, size_t i);

/* Progress (see above). sweep_phase: a phase before the rows ("making data", "reference"; a static string); the
 * first call starts the clock (else sweep_start does). sweep_row: experiment i is being run now. sweep_step: a
 * step of that row (a static string, e.g. "timing"), NULL when it is over. Safe on NULL; nothing after --list. */
void sweep_phase(Sweep *s, const char *phase);
void sweep_row(Sweep *s, size_t i);
void sweep_step(Sweep *s, const char *step);

/* Writes one line (printf format, without its newline) on stderr, where the progress line makes way for it. */
void sweep_note(Sweep *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Stops the progress line and ends it where it stands (before an error message). Safe on NULL. */
void sweep_stop(Sweep *s);

/* Finishes and frees: ok != 0 writes the table (stdout, or FILE by rename); ok == 0 drops a table's temporary
 * file and keeps every CSV/JSONL row written so far. fsyncs FILE. After --list, or without a successful
 * sweep_start, it only frees. Returns 0, or -1 with kvc_fail on a write error (exit 1). Safe on NULL. */
int sweep_close(Sweep *s, int ok);

#endif
