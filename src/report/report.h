/* report: rows -> aligned table, CSV or JSON lines on a stream. No computation here.
 *
 * table  label first, then method and every column that has a value in some row; errors and fractions with
 *        3 decimals, bytes as integers; needs all rows, so it is written at the end.
 * csv    fixed header (column_names, in order, after label and method), one row per experiment as it
 *        finishes; numbers round-trip exact (shortest repr), empty cell where a metric does not apply;
 *        RFC 4180 quoting.
 * jsonl  one object per row: label, method, params {name: value}, then every column (null when n/a).
 * Both end in the row's id (expid.h, 16 hex digits; a JSON string): --resume and kvc merge key rows by it.
 * --per-head rows (Row.per_head) carry layer and head right after method (CSV, table) or params (JSONL).
 * A column whose Row.hide is set in every row that has it stays out of the table (CSV/JSONL still carry it).
 * Labels: CSV and JSONL carry a label exactly (quoted, escaped). The table, one line per row, shows the control
 * characters of a label (a newline, a tab, ...) as C escapes (\n, \r, \t, \xNN; report_label_text), so that a
 * label can never split its row; messages on stderr show labels the same way.
 */
#ifndef KVC_REPORT_H
#define KVC_REPORT_H

#include "eval/row.h"

#include <stdio.h>

typedef enum { FORMAT_TABLE, FORMAT_CSV, FORMAT_JSONL } Format;

/* Parses "table", "csv" or "jsonl"; returns -1 on anything else. */
int report_format_parse(const char *s, Format *out);

void report_header(FILE *f, Format fmt);                 /* csv: the header line; others: nothing */
void report_header_per_head(FILE *f, Format fmt);        /* the same with layer,head after method */
/* csv, jsonl: one line ending in the id `id` (16 hex digits); table: nothing. Flushes f. */
void report_row(FILE *f, Format fmt, const Row *row, const char *id);
void report_table(FILE *f, const Row *rows, size_t n);   /* the whole aligned table */
/* label as the table shows it: bytes below 0x20 and 0x7f as \n, \r, \t or \xNN, the rest as is. A new string
 * (caller frees). */
char *report_label_text(const char *label);

#endif
