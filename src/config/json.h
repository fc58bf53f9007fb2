/* json: what every part of src/config/ reads JSON with (internal to the config room; the rest of kvc includes
 * config.h only).
 *
 * Owns two things:
 * - Path-aware getters. Validation walks the cJSON tree with the JSON path of every node in hand, so each
 *   message names where the problem is; paths use the dotted form of --set ("experiments.0.bits"), so a user
 *   can paste a path from an error into --set. Every getter that refuses a value returns -1 after
 *   kvc_fail("<file>: <path>: <what> (got <value>)") (json_bad), <value> being the node as compact JSON (numbers
 *   exact, anything longer than 60 characters cut to 57 and "..."), or "nothing" for an absent node.
 * - The strict syntax scanner (RFC 8259). cJSON is lenient ("1.", "01", "-.5", garbage after a --set value) and
 *   its error pointer is imprecise (one byte late after a bad string, the last byte for a truncated file).
 *   json_scan runs first and finds the exact offset of the first syntax error; cJSON then only builds the tree.
 *
 * May include: base/ and cJSON. Included by schema.c, grid.c, overrides.c and config.c.
 */
#ifndef KVC_CONFIG_JSON_H
#define KVC_CONFIG_JSON_H

#include <cJSON.h>
#include <stddef.h>

typedef struct JsonCtx {
    const char *file;    /* the config's name, the first part of every message */
    char *const *sets;   /* the --set PATH=JSON arguments applied to the tree, in order (an unknown key that one of
                          * them brought in is named by it, not by the file) */
    size_t n_sets;
} JsonCtx;

/* ---- messages ---- */

/* kvc_fail("<file>: <path>: <what> (got <got as JSON>)"); returns -1. got may be NULL ("nothing"). */
int json_bad(const JsonCtx *c, const char *path, const cJSON *got, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The choice (choices: NULL-terminated, at least one) with the smallest edit distance to word. */
const char *json_nearest(const char *word, const char *const *choices);
/* out = "parent.key", or "key" when parent is "". */
void json_join(char *out, size_t cap, const char *parent, const char *key);

/* ---- getters: node may be NULL (absent); each returns 0 or -1 with kvc_fail set ---- */

const cJSON *json_member(const cJSON *obj, const char *key);   /* case-sensitive; NULL when absent */
/* Every key of obj is in allowed (NULL-terminated; an unknown one names the nearest) and none appears twice.
 * An unknown key that a --set brought in (its PATH is the key's path or a prefix of it) is reported as
 * "--set PATH=JSON: <path>: unknown key ...". */
int json_check_keys(const JsonCtx *c, const cJSON *obj, const char *path, const char *const *allowed);
/* NULL, or a watcher that json_check_keys calls first with the object, its path and the keys it allows: shell
 * completion learns the schema from the parser itself this way (config/keys.h sets it). */
extern void (*json_keys_watch)(const cJSON *obj, const char *path, const char *const *allowed);
/* The unknown key `key` of obj at path (its object's path) with `what` as the message: the --set that brought it
 * in, or the file, as json_check_keys names it. Returns -1. */
int json_unknown_key(const JsonCtx *c, const char *path, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A required key of obj is missing. When obj has a key within a small edit distance of it (a misspelling:
 * "generatr" for "generator"), that key is reported as unknown with the suggestion instead; else
 * "<path>.<key>: missing required key <what>". Returns -1. */
int json_missing(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, const char *what);
int json_need_object(const JsonCtx *c, const cJSON *node, const char *path);
int json_int(const JsonCtx *c, const cJSON *node, const char *path, long lo, long hi, long *out);
int json_num(const JsonCtx *c, const cJSON *node, const char *path, double lo, double hi, double *out); /* finite */
/* A string among choices (NULL-terminated); *out is its index. */
int json_choice(const JsonCtx *c, const cJSON *node, const char *path, const char *const *choices, long *out);
/* Member `key` of obj (path: obj's path): optional with a default, or required. */
int json_opt_num(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, double lo, double hi,
                 double def, double *out);
int json_opt_int(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, long lo, long hi, long def,
                 long *out);
int json_req_int(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, long lo, long hi, long *out);

/* ---- strict syntax ---- */

enum { JSON_OK, JSON_BAD, JSON_EOF, JSON_TRAILING, JSON_DEEP, JSON_NUL_CHAR, JSON_BAD_UTF8 };
#define JSON_MAX_DEPTH 1000

/* Checks that text[0..len) is exactly one JSON value (with optional whitespace around it; a UTF-8 byte order
 * mark is skipped, as cJSON skips it). Returns JSON_OK or an error kind (JSON_BAD: a wrong byte, JSON_EOF: the
 * input ended early, JSON_TRAILING: something after the value, JSON_DEEP: nested deeper than JSON_MAX_DEPTH),
 * with *off the offset of the error (len for the end of the input). No message is set.
 * Strings are held to more than RFC 8259 asks, because kvc copies them into C strings and into its CSV and
 * JSONL output: JSON_NUL_CHAR is a \u0000 escape (*off at its backslash; cJSON would end the string there,
 * so "sink_window\u0000x" would read as "sink_window"), JSON_BAD_UTF8 a byte that is not part of well-formed
 * UTF-8 (*off at it; utf8_check). */
int json_scan(const char *text, size_t len, size_t *off);
/* json_scan that also tracks where it is: on any error, path[0..cap) holds the dotted path of the value (or
 * object key) being scanned ("" for the top level; a key is cut at the error), and *str_off the offset of the
 * opening quote of the last string scanned (for JSON_NUL_CHAR and JSON_BAD_UTF8: the bad string's). */
int json_scan_at(const char *text, size_t len, size_t *off, char *path, size_t cap, size_t *str_off);
/* The string of text[0..len) that opens at str_off, for a message: in double quotes, bytes from 0x80 up and
 * control bytes as \xNN, cut to about 50 bytes around offset bad ("..." where cut). */
void json_show_string(char *buf, size_t cap, const char *text, size_t len, size_t str_off, size_t bad);
/* The 1-based line and column (in bytes) of text[offset] (text: NUL-free up to offset). */
void json_position(const char *text, size_t offset, int *line, int *col);

#endif
