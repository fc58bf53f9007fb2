/* results: strict readers of kvc's own CSV and JSONL output (see results.h). */
#include "report/results.h"
#include "config/config.h"
#include "config/expid.h"
#include "eval/evaluate.h"
#include "methods/methods.h"
#include "base/util.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

int results_format_of_name(const char *path, Format *fmt)
{
    if (ends_with(path, ".csv")) *fmt = FORMAT_CSV;
    else if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson")) *fmt = FORMAT_JSONL;
    else if (ends_with(path, ".txt")) *fmt = FORMAT_TABLE;
    else return -1;
    return 0;
}

char *results_csv_header(int per_head)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = xmemstream(&buf, &len, NULL);
    if (per_head) report_header_per_head(f, FORMAT_CSV);
    else report_header(f, FORMAT_CSV);
    fclose(f);
    return buf;
}

int results_read_fd(int fd, const char *name, char **text, size_t *len)
{
    size_t cap = 1 << 16, n = 0, line_start = 0, line = 1, scanned = 0;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (unsigned long long)st.st_size > RESULTS_MAX_BYTES)
        return kvc_fail("%s: larger than the %llu bytes kvc reads back; not a kvc results file, or split the run "
                        "with --shard (got %lld bytes)", name, RESULTS_MAX_BYTES, (long long)st.st_size);
    char *buf = xmalloc(cap);
    xalloc_context("reading %s", name);
    for (;;) {
        /* no kvc row comes near these sizes: refuse before memory runs out (/dev/zero, a disk image) */
        for (const char *p = buf + scanned, *e = buf + n; p < e && (p = memchr(p, '\n', (size_t)(e - p)));) {
            line_start = (size_t)(++p - buf);
            line++;
        }
        scanned = n;
        if (n - line_start > RESULTS_MAX_LINE || n > RESULTS_MAX_BYTES) {
            free(buf);
            xalloc_context(NULL);
            if (n > RESULTS_MAX_BYTES)
                return kvc_fail("%s: larger than the %llu bytes kvc reads back; not a kvc results file, or split "
                                "the run with --shard (got more than %zu bytes)", name, RESULTS_MAX_BYTES, n);
            return kvc_fail("%s:%zu: a line longer than %u bytes, which kvc never writes: not a kvc results file "
                            "(got %zu bytes without a newline)", name, line, RESULTS_MAX_LINE, n - line_start);
        }
        if (n + 1 >= cap) {   /* room for a final NUL */
            size_t nc;
            if (size_mul(cap, 2, &nc)) {
                free(buf);
                return kvc_fail("%s: file too large to read (got more than %zu bytes)", name, cap);
            }
            char *nb = xmalloc(nc);
            memcpy(nb, buf, n);
            free(buf);
            buf = nb;
            cap = nc;
        }
        ssize_t got = pread(fd, buf + n, cap - 1 - n, (off_t)n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            free(buf);
            return kvc_fail("%s: read error (got %s)", name, strerror(errno));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    xalloc_context(NULL);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/* ---- a growing string ---- */

typedef struct Str {
    char *s;
    size_t n, cap;
} Str;

static void str_put(Str *b, char c)
{
    if (b->n + 2 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        char *ns = xmalloc(nc);
        if (b->n) memcpy(ns, b->s, b->n);
        free(b->s);
        b->s = ns;
        b->cap = nc;
    }
    b->s[b->n++] = c;
    b->s[b->n] = '\0';
}

static char *str_take(Str *b)
{
    if (!b->s) return xstrdup("");
    char *s = b->s;
    memset(b, 0, sizeof *b);
    return s;
}

/* ---- cells: what kvc writes in each column ---- */

enum { REC_OK, REC_TORN, REC_BAD };

typedef enum { CELL_LABEL, CELL_METHOD, CELL_PARAMS, CELL_INDEX, CELL_INT, CELL_REAL, CELL_ID } CellKind;

/* Cells of a row: CSV label, method, (layer, head,) the columns, id; JSONL the same with params after method. */
static size_t n_cells(int jsonl, int per_head)
{
    return 2 + (size_t)jsonl + 2 * (size_t)per_head + NCOLS + 1;
}

/* Cell k of a row (k < n_cells): its kind and name. */
static CellKind cell_kind(size_t k, int jsonl, int per_head, const char **name)
{
    static const char *const lead[] = {"label", "method", "params", "layer", "head"};
    static const CellKind kinds[] = {CELL_LABEL, CELL_METHOD, CELL_PARAMS, CELL_INDEX, CELL_INDEX};
    size_t at[5], n = 0;
    at[n++] = 0;
    at[n++] = 1;
    if (jsonl) at[n++] = 2;
    if (per_head) {
        at[n++] = 3;
        at[n++] = 4;
    }
    if (k < n) {
        *name = lead[at[k]];
        return kinds[at[k]];
    }
    if (k - n < NCOLS) {
        *name = column_names[k - n];
        return column_is_integer((Column)(k - n)) ? CELL_INT : CELL_REAL;
    }
    *name = "id";
    return CELL_ID;
}

/* The grammar of the numbers kvc writes, -?(0|[1-9][0-9]*)(\.[0-9]+)?(e[+-][0-9]+)? (fmt_double's %g forms;
 * integers: 0|[1-9][0-9]*). REC_OK: s[0..n) is such a number; REC_TORN: a proper prefix of one; else REC_BAD. */
static int number_syntax(const char *s, size_t n, int integer)
{
    enum { START, SIGN, ZERO, INT, DOT, FRAC, EXPO, ESIGN, EXP } st = START;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9';
        switch (st) {
        case START:
        case SIGN:
            if (c == '-' && st == START && !integer) st = SIGN;
            else if (c == '0') st = ZERO;
            else if (d) st = INT;
            else return REC_BAD;
            break;
        case ZERO:
        case INT:
            if (d && st == INT) st = INT;
            else if (c == '.' && !integer) st = DOT;
            else if (c == 'e' && !integer) st = EXPO;
            else return REC_BAD;
            break;
        case DOT:
        case FRAC:
            if (d) st = FRAC;
            else if (c == 'e' && st == FRAC) st = EXPO;
            else return REC_BAD;
            break;
        case EXPO:
            if (c == '+' || c == '-') st = ESIGN;
            else return REC_BAD;
            break;
        case ESIGN:
        case EXP:
            if (d) st = EXP;
            else return REC_BAD;
            break;
        }
    }
    return st == ZERO || st == INT || st == FRAC || st == EXP ? REC_OK : REC_TORN;
}

/* s[0..n) as a number: finite and (exact) exactly the text kvc prints for its value ("%.0f" for integers, which
 * are >= 0 and at most 2^53; fmt_double otherwise). 0, or -1 with *why. */
static int number_value(const char *s, size_t n, int integer, int exact, const char **why)
{
    char buf[400], back[64], *endp;
    if (n < sizeof buf) { /* nan, inf, 1e999: numbers to strtod, never in kvc's output */
        memcpy(buf, s, n);
        buf[n] = '\0';
        double x = strtod(buf, &endp);
        if (n > 0 && endp == buf + n && !isfinite(x)) {
            *why = "not a finite number";
            return -1;
        }
    }
    if (number_syntax(s, n, integer) != REC_OK || n >= sizeof buf) {
        *why = integer ? "not a non-negative integer as kvc writes it" : "not a number as kvc writes it";
        return -1;
    }
    double x = strtod(buf, NULL);
    if (integer && x > 9007199254740992.0) {
        *why = "an integer above 2^53, beyond any count kvc writes";
        return -1;
    }
    if (!exact) return 0;
    if (integer) snprintf(back, sizeof back, "%.0f", x);
    else fmt_double(back, sizeof back, x);
    if (strcmp(back, buf) != 0) {
        *why = "not written as kvc writes this number (its shortest round-trip form)";
        return -1;
    }
    return 0;
}

/* A method name (prefix: the beginning of one). */
static int method_name_ok(const char *s, size_t n, int prefix, const char **why)
{
    for (size_t i = 0; i < method_count; i++) {
        const char *m = method_registry[i]->name;
        size_t len = strlen(m);
        if ((prefix ? len >= n : len == n) && memcmp(m, s, n) == 0) return 0;
    }
    *why = prefix ? "not the beginning of a method name" : "not a method of this kvc (kvc methods lists them)";
    return -1;
}

/* A 16-hex-digit id (prefix: at most 16 lowercase hex digits). */
static int id_ok(const char *s, size_t n, int prefix, uint64_t *id, const char **why)
{
    uint64_t dummy;
    *why = "not a 16-hex-digit id";
    if (!prefix) return expid_parse(s, n, id ? id : &dummy);
    if (n > EXPID_HEX) return -1;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return -1;
    return 0;
}

/* A numeric cell as text (CSV field, JSON number): an index (layer, head), a count or a real. prefix: the
 * text may be cut short (a torn line). */
static int numeric_ok(CellKind kind, const char *s, size_t n, int prefix, const char **why)
{
    int integer = kind != CELL_REAL;
    if (prefix) {
        if (number_syntax(s, n, integer) != REC_BAD) return 0;
        *why = integer ? "not the beginning of a non-negative integer" : "not the beginning of a number";
        return -1;
    }
    if (number_value(s, n, integer, 1, why)) return -1;
    if (kind == CELL_INDEX && strtod(s, NULL) >= (double)CONFIG_MAX_HEADS) {
        *why = "a layer or head index beyond kvc's limit of 4096";
        return -1;
    }
    return 0;
}

/* at most 40 bytes of what is left, for messages */
static int clip40(size_t left)
{
    return left > 40 ? 40 : (int)left;
}

static size_t count_lines(const char *t, size_t from, size_t to)
{
    size_t n = 0;
    for (size_t i = from; i < to; i++) n += t[i] == '\n';
    return n;
}

static void push_row(ResultFile *rf, size_t *cap, const ResultRow *row)
{
    if (rf->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        ResultRow *nr = xmalloc(nc * sizeof *nr);
        if (rf->n) memcpy(nr, rf->rows, rf->n * sizeof *nr);
        free(rf->rows);
        rf->rows = nr;
        *cap = nc;
    }
    rf->rows[rf->n++] = *row;
}

/* The length of t[from..to) without the NUL bytes at its end (a crash can leave zeros after the last write). */
static size_t strip_nuls(const char *t, size_t from, size_t to)
{
    while (to > from && t[to - 1] == '\0') to--;
    return to;
}

static int cell_error(const char *name, size_t line, size_t k, const char *col, const char *why, const char *s,
                      size_t n)
{
    return kvc_fail("%s:%zu: column %zu (%s): %s (got \"%.*s\")", name, line, k + 1, col, why, clip40(n), s);
}

/* ---- CSV ---- */

typedef struct Field {
    size_t off, len;   /* raw bytes; for a quoted field those between the quotes ("" still doubled) */
    int quoted;
} Field;

/* One RFC 4180 record starting at *p: its fields into f[0..*nf) (at most maxf), the first one decoded into
 * *first (REC_OK and REC_TORN; the caller frees). REC_OK: complete, *p past its '\n'. REC_TORN: the text ends
 * inside it (f holds the fields so far, the last one possibly cut short). REC_BAD with *why. */
static int csv_record(const char *t, size_t len, size_t *p, Field *f, size_t maxf, size_t *nf, char **first,
                      const char **why)
{
    size_t i = *p;
    Str dec = {0};
    int rc;
    *nf = 0;
    *first = NULL;
    for (;;) {
        if (*nf == maxf) {
            *why = "more fields than the header has";
            rc = REC_BAD;
            goto out;
        }
        Field *cur = &f[(*nf)++];
        int label = *nf == 1;
        cur->quoted = 0;
        if (i < len && t[i] == '"') {
            cur->quoted = 1;
            cur->off = ++i;
            for (;; i++) {
                if (i >= len || (t[i] == '"' && i + 1 >= len)) { /* a final quote may still be a doubled one */
                    cur->len = i - cur->off;
                    rc = REC_TORN;
                    goto out;
                }
                if (t[i] == '"') {
                    if (t[i + 1] == '"') {
                        if (label) str_put(&dec, '"');
                        i++;
                        continue;
                    }
                    break;
                }
                if (t[i] == '\0') {
                    *why = "a NUL byte";
                    rc = REC_BAD;
                    goto out;
                }
                if (label) str_put(&dec, t[i]);
            }
            cur->len = i - cur->off;
            i++;
            if (t[i] != ',' && t[i] != '\n') {
                *why = "text after a closing quote";
                rc = REC_BAD;
                goto out;
            }
        } else {
            cur->off = i;
            for (; i < len && t[i] != ',' && t[i] != '\n'; i++) {
                if (t[i] == '"' || t[i] == '\r' || t[i] == '\0') {
                    *why = t[i] == '"' ? "a quote inside an unquoted field" : "a control character";
                    rc = REC_BAD;
                    goto out;
                }
                if (label) str_put(&dec, t[i]);
            }
            cur->len = i - cur->off;
            if (i >= len) {
                rc = REC_TORN;
                goto out;
            }
        }
        if (t[i++] == '\n') {
            rc = REC_OK;
            break;
        }
    }
    *first = str_take(&dec);
    *p = i;
    return REC_OK;
out:
    if (rc == REC_TORN) *first = str_take(&dec);
    else free(dec.s);
    return rc;
}

/* Field k of a CSV row (prefix: cut short by the end of a torn line). 0, or -1 with *why. */
static int csv_cell(const char *t, const Field *f, size_t k, int per_head, int prefix, uint64_t *id, const char **why)
{
    const char *col, *s = t + f->off;
    CellKind kind = cell_kind(k, 0, per_head, &col);
    if (kind == CELL_LABEL) return 0;
    if (f->quoted) {
        *why = "a quoted field where kvc writes none";
        return -1;
    }
    switch (kind) {
    case CELL_METHOD: return method_name_ok(s, f->len, prefix, why);
    case CELL_ID: return id_ok(s, f->len, prefix, id, why);
    case CELL_INT:
    case CELL_REAL:
        if (f->len == 0) return 0;   /* the metric does not apply */
        return numeric_ok(kind, s, f->len, prefix, why);
    default:
        if (f->len == 0 && !prefix) {
            *why = "empty where kvc writes an index";
            return -1;
        }
        return numeric_ok(kind, s, f->len, prefix, why);
    }
}

/* Checks the cells of a CSV row f[0..nf) (prefix: the last one is cut short), naming the first bad one. */
static int csv_cells(const char *name, size_t line, const char *t, const Field *f, size_t nf, int per_head, int prefix,
                     uint64_t *id)
{
    for (size_t k = 0; k < nf; k++) {
        const char *why, *col;
        if (csv_cell(t, &f[k], k, per_head, prefix && k + 1 == nf, id, &why)) {
            cell_kind(k, 0, per_head, &col);
            return cell_error(name, line, k, col, why, t + f[k].off, f[k].len);
        }
    }
    return 0;
}

/* The end of a CSV file that has no newline to close it, from `start`: a row cut short (the beginning of one
 * kvc writes, maybe followed by NUL bytes) is torn and may be dropped; anything else is an error. */
static int csv_tail(ResultFile *rf, const char *name, const char *t, size_t start, size_t len, size_t line,
                    Field *f, size_t ncols)
{
    size_t m = strip_nuls(t, start, len), q = start, nf;
    char *label;
    const char *why = "";
    rf->torn = len - start;
    rf->torn_line = line;
    if (m == start) return 0;
    int k = csv_record(t, m, &q, f, ncols, &nf, &label, &why);
    if (k == REC_TORN) {
        rf->torn_label = label;
        rf->torn_label_whole = nf > 1;
    } else {
        free(label);
    }
    if (k != REC_TORN)
        return kvc_fail("%s:%zu: the last line has no final newline and is not the beginning of a row kvc writes: %s "
                        "(got \"%.*s\")", name, line, k == REC_OK ? "a complete record" : why, clip40(m - start),
                        t + start);
    return csv_cells(name, line, t, f, nf, rf->per_head, 1, NULL);
}

static int parse_csv(ResultFile *rf, const char *name, const char *t, size_t len, int per_head)
{
    const char *nl = len ? memchr(t, '\n', len) : NULL;
    char *hs[2] = {results_csv_header(0), results_csv_header(1)};
    if (per_head < 0) { /* detect: the per-head header (whole, or the start of it), or else the other one */
        size_t hl = strlen(hs[1]), n = nl ? (size_t)(nl - t) + 1 : strip_nuls(t, 0, len);
        per_head = nl ? n == hl && memcmp(t, hs[1], hl) == 0
                      : n > strlen("label,method,") && n < hl && memcmp(t, hs[1], n) == 0;
    }
    rf->per_head = per_head;
    const char *header = hs[per_head];
    size_t hlen = strlen(header), ncols = n_cells(0, per_head), line = 1, p = 0, cap = 0;
    Field *f = xmalloc(ncols * sizeof *f);
    int rc = 0;
    if (len == 0) goto done;
    if (!nl) { /* a torn header: the file holds no row yet */
        size_t m = strip_nuls(t, 0, len);
        if (m > 0 && m < hlen && memcmp(t, header, m) == 0) rf->torn = len;
        else if (m == 0)
            rc = kvc_fail("%s:1: not a kvc results file: it holds only NUL bytes (a file a crash left empty?); "
                          "remove it to start again (got %zu NUL bytes)", name, len);
        else
            rc = kvc_fail("%s:1: not a kvc results file: it does not begin with the CSV header this kvc writes%s "
                          "(got \"%.*s\")", name, per_head ? " with --per-head" : "", clip40(len), t);
        goto done;
    }
    if ((size_t)(nl - t) + 1 != hlen || memcmp(t, header, hlen) != 0) {
        rc = kvc_fail("%s:1: the CSV header differs from the one this kvc writes%s (another kvc version, or not "
                      "a kvc results file?) (got \"%.*s\")", name, per_head ? " with --per-head" : " without --per-head",
                      (int)((size_t)(nl - t) > 120 ? 120 : (size_t)(nl - t)), t);
        goto done;
    }
    rf->header_len = p = hlen;
    line = 2;
    rf->complete = p;
    while (p < len) {
        size_t start = p, nf;
        char *label;
        const char *why = "";
        int k = csv_record(t, len, &p, f, ncols, &nf, &label, &why);
        /* no newline left: a row cut short (a kill, a full disk), or zeros after a crash */
        if (k == REC_TORN || (k == REC_BAD && !memchr(t + start, '\n', len - start))) {
            free(label);
            rc = csv_tail(rf, name, t, start, len, line, f, ncols);
            break;
        }
        if (k == REC_BAD) {
            rc = kvc_fail("%s:%zu: not a row kvc wrote: %s (got \"%.*s\")", name, line, why, clip40(len - start), t + start);
            goto done;
        }
        ResultRow row = {start, p - start, line, 0, label};
        if (nf != ncols) {
            free(label);
            rc = kvc_fail("%s:%zu: not a row kvc wrote: %zu fields where the header has %zu (got \"%.*s\")", name,
                          line, nf, ncols, clip40(len - start), t + start);
            goto done;
        }
        if (csv_cells(name, line, t, f, nf, per_head, 0, &row.id)) {
            free(label);
            rc = -1;
            goto done;
        }
        push_row(rf, &cap, &row);
        line += count_lines(t, start, p);
        rf->complete = p;
    }
done:
    free(f);
    free(hs[0]);
    free(hs[1]);
    return rc;
}

/* ---- JSONL ---- */

/* A cursor over one line. A function returns 0, or -1 with torn set (the text ended: the line may be the
 * beginning of a row) or why set (it is not). */
typedef struct Js {
    const char *s;
    size_t i, end;
    int torn;
    const char *why;
} Js;

static int js_torn(Js *j)
{
    j->torn = 1;
    return -1;
}

static int js_bad(Js *j, const char *why)
{
    j->why = why;
    return -1;
}

static void js_ws(Js *j)
{
    while (j->i < j->end && (j->s[j->i] == ' ' || j->s[j->i] == '\t')) j->i++;
}

static int js_char(Js *j, char c, const char *why)
{
    js_ws(j);
    if (j->i >= j->end) return js_torn(j);
    if (j->s[j->i] != c) return js_bad(j, why);
    j->i++;
    return 0;
}

static void put_utf8(Str *b, unsigned long c)
{
    if (c < 0x80) {
        str_put(b, (char)c);
    } else if (c < 0x800) {
        str_put(b, (char)(0xC0 | (c >> 6)));
        str_put(b, (char)(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        str_put(b, (char)(0xE0 | (c >> 12)));
        str_put(b, (char)(0x80 | ((c >> 6) & 0x3F)));
        str_put(b, (char)(0x80 | (c & 0x3F)));
    } else {
        str_put(b, (char)(0xF0 | (c >> 18)));
        str_put(b, (char)(0x80 | ((c >> 12) & 0x3F)));
        str_put(b, (char)(0x80 | ((c >> 6) & 0x3F)));
        str_put(b, (char)(0x80 | (c & 0x3F)));
    }
}

/* Four hex digits at j->i (after "\u"), consumed. */
static int js_hex4(Js *j, unsigned long *out)
{
    unsigned long v = 0;
    for (int k = 0; k < 4; k++, j->i++) {
        if (j->i >= j->end) return js_torn(j);
        char c = j->s[j->i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return js_bad(j, "a bad \\u escape");
        v = v << 4 | (unsigned long)d;
    }
    *out = v;
    return 0;
}

/* A JSON string at j->i, decoded into out when not NULL (when torn, out holds what came before the end). */
static int js_str(Js *j, Str *out)
{
    if (j->i >= j->end) return js_torn(j);
    if (j->s[j->i] != '"') return js_bad(j, "not a JSON string");
    for (j->i++;;) {
        if (j->i >= j->end) return js_torn(j);
        unsigned char c = (unsigned char)j->s[j->i++];
        if (c == '"') return 0;
        if (c < 0x20) return js_bad(j, "a control character inside a string");
        if (c != '\\') {
            if (out) str_put(out, (char)c);
            continue;
        }
        if (j->i >= j->end) return js_torn(j);
        char e = j->s[j->i++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *k = e ? strchr(from, e) : NULL;
        if (k) {
            if (out) str_put(out, to[k - from]);
            continue;
        }
        if (e != 'u') return js_bad(j, "a bad escape in a string");
        unsigned long u, lo;
        if (js_hex4(j, &u)) return -1;
        if (u >= 0xD800 && u < 0xDC00) {
            if (js_char(j, '\\', "a lone surrogate in a string") || js_char(j, 'u', "a lone surrogate in a string") ||
                js_hex4(j, &lo))
                return -1;
            if (lo < 0xDC00 || lo >= 0xE000) return js_bad(j, "a lone surrogate in a string");
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        } else if (u >= 0xDC00 && u < 0xE000) {
            return js_bad(j, "a lone surrogate in a string");
        }
        if (out) put_utf8(out, u);
    }
}

/* A number at j->i as kvc writes it; kind CELL_REAL, CELL_INT or CELL_INDEX (exact: as a cell, printed back
 * the same), or CELL_PARAMS (a parameter value: the syntax and finite). */
static int js_number(Js *j, CellKind kind)
{
    size_t a = j->i;
    while (j->i < j->end && j->s[j->i] && strchr("+-.0123456789eE", j->s[j->i])) j->i++;
    if (j->i >= j->end) { /* the line ends inside (or right after) the number: it may go on */
        if (number_syntax(j->s + a, j->i - a, kind != CELL_REAL && kind != CELL_PARAMS) != REC_BAD) return js_torn(j);
        return js_bad(j, "not a number as kvc writes it");
    }
    const char *why;
    if (kind == CELL_PARAMS) {
        if (number_value(j->s + a, j->i - a, 0, 0, &why)) return js_bad(j, why);
        return 0;
    }
    if (numeric_ok(kind, j->s + a, j->i - a, 0, &why)) return js_bad(j, why);
    return 0;
}

/* One of the literals true, false, null at j->i (`want` NULL: any of them). */
static int js_literal(Js *j, const char *want)
{
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        const char *l = lits[k];
        size_t n = strlen(l), avail = j->end - j->i;
        if (want && strcmp(want, l) != 0) continue;
        if (memcmp(j->s + j->i, l, avail < n ? avail : n) != 0) continue;
        if (avail < n) return js_torn(j);
        j->i += n;
        return 0;
    }
    return js_bad(j, want ? "not a number or null" : "not a JSON value");
}

/* Any JSON value (the params object and what it holds), strictly. */
static int js_value(Js *j, int depth)
{
    js_ws(j);
    if (j->i >= j->end) return js_torn(j);
    if (depth > 64) return js_bad(j, "nested too deeply");
    char c = j->s[j->i];
    if (c == '"') return js_str(j, NULL);
    if (c == '-' || (c >= '0' && c <= '9')) return js_number(j, CELL_PARAMS);
    if (c != '{' && c != '[') return js_literal(j, NULL);
    char close = c == '{' ? '}' : ']';
    j->i++;
    js_ws(j);
    if (j->i >= j->end) return js_torn(j);
    if (j->s[j->i] == close) {
        j->i++;
        return 0;
    }
    for (;;) {
        if (c == '{') {
            js_ws(j);
            if (js_str(j, NULL) || js_char(j, ':', "a key without ':'")) return -1;
        }
        if (js_value(j, depth + 1)) return -1;
        js_ws(j);
        if (j->i >= j->end) return js_torn(j);
        if (j->s[j->i] == close) {
            j->i++;
            return 0;
        }
        if (js_char(j, ',', "a missing ','")) return -1;
    }
}

/* A string cell (label, method, id): decoded into out; a torn one must begin as a method or an id would. */
static int js_string_cell(Js *j, CellKind kind, Str *out, uint64_t *id)
{
    size_t a = j->i;
    int r = js_str(j, out);
    const char *v = out->s ? out->s : "", *why;
    if (r && !j->torn) return -1;
    if (r && kind == CELL_METHOD && method_name_ok(v, out->n, 1, &why)) return js_bad(j, why);
    if (r && kind == CELL_ID && j->i > a && id_ok(j->s + a + 1, j->i - a - 1, 1, NULL, &why)) return js_bad(j, why);
    if (r) return -1;
    if (kind == CELL_METHOD && method_name_ok(v, out->n, 0, &why)) return js_bad(j, why);
    if (kind == CELL_ID && id_ok(j->s + a + 1, j->i - a - 2, 0, id, &why)) return js_bad(j, why);
    return 0;
}

/* A line s[start..end) as kvc writes it: {"label":..,"method":..,"params":{..},("layer":..,"head":..,)
 * "<column>":number|null..., "id":".."}. REC_OK with row->label and row->id set; REC_TORN when the text ends
 * before the line is complete but all of it is the beginning of such a line; REC_BAD with *why and *key (the
 * cell it is in, or -1). */
static int jsonl_line(const char *s, size_t start, size_t end, ResultRow *row, int per_head, const char **why, long *key,
                      int *label_whole, size_t *cell)
{
    Js j = {s, start, end, 0, NULL};
    size_t nkeys = n_cells(1, per_head), k = 0;
    Str name = {0}, label = {0}, text = {0};
    *key = -1;
    *label_whole = 0;
    int rc = js_char(&j, '{', "not a JSON object");
    for (; rc == 0; k++) {
        const char *want;
        CellKind kind = cell_kind(k, 1, per_head, &want);
        name.n = 0;
        if (name.s) name.s[0] = '\0';
        js_ws(&j);
        int r = js_str(&j, &name);
        const char *got = name.s ? name.s : "";
        if (r == 0 ? strcmp(got, want) != 0 : j.torn && strncmp(want, got, name.n) != 0) {
            rc = js_bad(&j, per_head ? "its keys differ from the ones this kvc writes with --per-head (label, method, "
                                       "params, layer, head, the columns, id)"
                                     : "its keys differ from the ones this kvc writes (label, method, params, the "
                                       "columns, id)");
            break;
        }
        if (r || (rc = js_char(&j, ':', "a key without ':'")) != 0) {
            rc = -1;
            break;
        }
        js_ws(&j);
        *key = (long)k;
        *cell = j.i;
        if (kind == CELL_LABEL) {
            rc = js_str(&j, &label);
            *label_whole = rc == 0;
        }
        else if (kind == CELL_METHOD || kind == CELL_ID) {
            text.n = 0;
            if (text.s) text.s[0] = '\0';
            rc = js_string_cell(&j, kind, &text, &row->id);
        } else if (kind == CELL_PARAMS) {
            if (j.i < j.end && j.s[j.i] != '{') rc = js_bad(&j, "not a JSON object");
            else rc = js_value(&j, 0);
        } else if (j.i < j.end && j.s[j.i] == '"') {
            rc = js_bad(&j, kind == CELL_INDEX ? "a string where kvc writes an integer" : "a string where kvc writes a "
                                                                                         "number or null");
        } else if (j.i < j.end && j.s[j.i] == 'n' && kind != CELL_INDEX) {
            rc = js_literal(&j, "null");
        } else if (j.i < j.end && (j.s[j.i] == '-' || (j.s[j.i] >= '0' && j.s[j.i] <= '9'))) {
            rc = js_number(&j, kind);
        } else {
            rc = j.i < j.end ? js_bad(&j, kind == CELL_INDEX ? "not an integer" : "not a number or null") : js_torn(&j);
        }
        if (rc) break;
        *key = -1;
        if (k + 1 == nkeys) {
            rc = js_char(&j, '}', "more keys than this kvc writes");
            break;
        }
        js_ws(&j);
        if (j.i < j.end && j.s[j.i] == '}') rc = js_bad(&j, "it has fewer keys than this kvc writes");
        else rc = js_char(&j, ',', "a missing ','");
    }
    if (rc == 0) {
        js_ws(&j);
        if (j.i != end) rc = js_bad(&j, "text after the object");
    }
    free(name.s);
    free(text.s);
    if (rc) {
        *why = j.why ? j.why : "";
        if (j.torn && !j.why) { /* the label as far as it goes: --resume checks it against the config's */
            row->label = str_take(&label);
            return REC_TORN;
        }
        free(label.s);
        return REC_BAD;
    }
    row->label = str_take(&label);
    return REC_OK;
}

static int jsonl_error(const char *name, size_t line, const char *t, size_t p, size_t len, const char *why, long key,
                       int per_head, int tail, size_t cell)
{
    const char *lead = tail ? "the last line has no final newline and is not the beginning of a row kvc writes"
                            : "not a row kvc wrote";
    if (key < 0) return kvc_fail("%s:%zu: %s: %s (got \"%.*s\")", name, line, lead, why, clip40(len - p), t + p);
    const char *col;
    cell_kind((size_t)key, 1, per_head, &col);
    size_t e = cell;   /* the cell's text: up to the next ',' or '}' (or the line's end) */
    while (e < len && t[e] != '\n' && t[e] != ',' && t[e] != '}') e++;
    return kvc_fail("%s:%zu: column %ld (%s): %s (got \"%.*s\")", name, line, key + 1, col, why, clip40(e - cell),
                    t + cell);
}

static int parse_jsonl(ResultFile *rf, const char *name, const char *t, size_t len, int per_head)
{
    size_t cap = 0, p = 0, line = 1;
    if (per_head < 0) { /* detect: is the 4th key of the first line "layer"? */
        const char *nl = memchr(t, '\n', len), *pat = "},\"layer\":";
        size_t n = nl ? (size_t)(nl - t) : len, m = strlen(pat);
        per_head = 0;
        for (size_t i = 0; i + m <= n && !per_head; i++) per_head = memcmp(t + i, pat, m) == 0;
    }
    rf->per_head = per_head;
    while (p < len) {
        const char *nl = memchr(t + p, '\n', len - p), *why;
        size_t end = nl ? (size_t)(nl - t) : strip_nuls(t, p, len);
        long key;
        int whole;
        size_t cell = p;
        ResultRow row = {p, end + 1 - p, line, 0, NULL};
        if (!nl) { /* the last line has no newline: the beginning of a row may be dropped, nothing else */
            rf->torn = len - p;
            rf->torn_line = line;
            if (end == p && p == 0)
                return kvc_fail("%s:1: not a kvc results file: it holds only NUL bytes (a file a crash left empty?); "
                                "remove it to start again (got %zu NUL bytes)", name, len);
            if (end == p) return 0;
            int k = jsonl_line(t, p, end, &row, per_head, &why, &key, &whole, &cell);
            if (k == REC_BAD) return jsonl_error(name, line, t, p, end, why, key, per_head, 1, cell);
            rf->torn_label = row.label;   /* a row cut short, or a whole one without its newline */
            rf->torn_label_whole = whole;
            return 0;
        }
        int k = jsonl_line(t, p, end, &row, per_head, &why, &key, &whole, &cell);
        if (k != REC_OK) {
            free(row.label);
            if (k == REC_TORN) why = "the line ends before the object does";
            return jsonl_error(name, line, t, p, end, why, key, per_head, 0, cell);
        }
        push_row(rf, &cap, &row);
        p = end + 1;
        rf->complete = p;
        line++;
    }
    return 0;
}

int results_parse(ResultFile *rf, const char *name, const char *text, size_t len, Format fmt, int per_head)
{
    memset(rf, 0, sizeof *rf);
    rf->fmt = fmt;
    assert(fmt == FORMAT_CSV || fmt == FORMAT_JSONL);
    return fmt == FORMAT_CSV ? parse_csv(rf, name, text, len, per_head) : parse_jsonl(rf, name, text, len, per_head);
}

void results_free(ResultFile *rf)
{
    if (!rf) return;
    for (size_t i = 0; i < rf->n; i++) free(rf->rows[i].label);
    free(rf->rows);
    free(rf->torn_label);
    memset(rf, 0, sizeof *rf);
}

int results_write_all(int fd, const char *name, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return kvc_fail("%s: write error (got %s)", name, strerror(w < 0 ? errno : EIO));
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}
