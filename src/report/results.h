/* results: read back the CSV and JSONL files that kvc writes (the reader twin of report.c), for
 * --resume and kvc merge. No computation, no output.
 *
 * A file is accepted only as kvc writes it: CSV with exactly this kvc's header line and one record per row
 * (RFC 4180; a quoted label may hold commas, quotes and newlines) whose last field is the id; JSONL with one
 * object per line whose keys are, in order, label, method, params, (layer, head with --per-head,) every
 * column, id. Every cell is checked: method a registered name (unquoted in CSV), layer and head integers
 * 0..4095, the counts (bytes, baseline_bytes, decode_ns) non-negative integers up to 2^53, the other columns
 * empty (JSONL null) or a finite number spelled exactly as kvc prints it (fmt_double: "0.5", never "0.50",
 * "5e-1", "nan" or "1e999"), JSONL values of the right type (a string "192" is not a number), params a strict
 * JSON object with finite numbers, the id 16 lowercase hex digits. Anything else in a complete line is an
 * error naming the file, the line and (for a cell) the column: "<name>:<line>: column 8 (bytes): ...".
 *
 * A torn last line (the file does not end with the newline that closes a record: a write cut short by a
 * kill, a full disk or a crash) is not an error here when it is the beginning of a row kvc writes (every
 * cell so far valid, the last one a valid prefix), possibly followed by NUL bytes (a crash can leave them):
 * it is reported in `torn` (with its label so far, torn_label) and left out of `rows`, and the caller decides
 * (--resume truncates it away if the label fits the config; merge refuses the file). A last line that is not
 * the beginning of a kvc row, a CSV file that does not begin with kvc's header (or a prefix of it) and a
 * file of NUL bytes only are errors: kvc never drops what it did not write.
 */
#ifndef KVC_RESULTS_H
#define KVC_RESULTS_H

#include "report/report.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ResultRow {
    size_t off, len;   /* the row's bytes in the text, the final '\n' included */
    size_t line;       /* 1-based line number where it starts */
    uint64_t id;
    char *label;       /* decoded */
} ResultRow;

typedef struct ResultFile {
    Format fmt;          /* FORMAT_CSV or FORMAT_JSONL */
    int per_head;        /* the rows are --per-head rows (layer and head columns) */
    size_t header_len;   /* csv: bytes of the header line ('\n' included); 0 when it is not (fully) there */
    ResultRow *rows;
    size_t n;
    size_t complete;     /* bytes up to the end of the last complete line */
    size_t torn;         /* bytes of a torn last line after `complete` (0: none) */
    size_t torn_line;    /* its line number */
    char *torn_label;    /* the label the torn line begins with, decoded as far as it goes (NULL: none) */
    int torn_label_whole;/* that label cell is complete (the torn line goes on after it) */
} ResultFile;

/* The format a file name asks for: .csv, .jsonl or .ndjson, .txt (table). Returns 0, or -1 for any other
 * name (no kvc_fail). */
int results_format_of_name(const char *path, Format *fmt);

/* Parses text[0..len) of a file called `name` (for messages) written in `fmt` (CSV or JSONL) with
 * --per-head (per_head 1) or without (0); per_head -1 takes it from the CSV header or the first JSON line.
 * Returns 0, or -1 with kvc_fail("<name>:<line>: ...") on a complete line kvc did not write. */
int results_parse(ResultFile *rf, const char *name, const char *text, size_t len, Format fmt, int per_head);
void results_free(ResultFile *rf);   /* safe on a zeroed ResultFile */

/* What results_read_fd reads at most: kvc's rows are far shorter (a label is at most CONFIG_MAX_LABEL bytes)
 * and a run far smaller; anything larger is refused before it fills the memory (kvc merge /dev/zero). */
#define RESULTS_MAX_LINE  (1u << 20)                     /* bytes of one line */
#define RESULTS_MAX_BYTES (4ULL << 30)                   /* bytes of one file */

/* Reads a whole open file from offset 0 (the caller frees *text). Returns 0, or -1 with kvc_fail
 * ("<name>:<line>: a line longer than ..." or "<name>: larger than ...") beyond the limits above. */
int results_read_fd(int fd, const char *name, char **text, size_t *len);

/* The CSV header line this kvc writes, with or without --per-head, '\n' included (caller frees). */
char *results_csv_header(int per_head);

/* Writes buf[0..n) to fd whole (retrying short writes). 0, or -1 with kvc_fail("<name>: write error (got ...)"). */
int results_write_all(int fd, const char *name, const char *buf, size_t n);

#endif
