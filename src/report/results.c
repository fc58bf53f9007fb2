/* results: strict readers of kvc's own CSV and JSONL output (see results.h). */
#include "report/results.h"
#include "eval/evaluate.h"
#include "config/expid.h"
#include "base/util.h"

#include <assert.h>
#include <errno.h>
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
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        xalloc_die(0);
    }
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

/* ---- CSV ---- */

enum { REC_OK, REC_TORN, REC_BAD };

typedef struct CsvRec {
    size_t nfields;
    char *first;                 /* field 0, decoded */
    size_t last_off, last_len;   /* raw bytes of the last field (unquoted) */
    int last_quoted;
} CsvRec;

/* One RFC 4180 record starting at *p; on REC_OK *p is past its '\n'. */
static int csv_record(const char *t, size_t len, size_t *p, CsvRec *r, const char **why)
{
    size_t i = *p;
    Str first = {0};
    memset(r, 0, sizeof *r);
    for (;;) {
        size_t start = i;
        int quoted = 0;
        if (i < len && t[i] == '"') {
            quoted = 1;
            for (i++;; i++) {
                if (i >= len) goto torn;
                if (t[i] == '"') {
                    if (i + 1 < len && t[i + 1] == '"') {
                        if (r->nfields == 0) str_put(&first, '"');
                        i++;
                        continue;
                    }
                    i++;
                    break;
                }
                if (t[i] == '\0') {
                    *why = "a NUL byte";
                    goto bad;
                }
                if (r->nfields == 0) str_put(&first, t[i]);
            }
            if (i >= len) goto torn;
            if (t[i] != ',' && t[i] != '\n') {
                *why = "text after a closing quote";
                goto bad;
            }
        } else {
            for (; i < len && t[i] != ',' && t[i] != '\n'; i++) {
                if (t[i] == '"' || t[i] == '\r' || t[i] == '\0') {
                    *why = t[i] == '"' ? "a quote inside an unquoted field" : "a control character";
                    goto bad;
                }
                if (r->nfields == 0) str_put(&first, t[i]);
            }
            if (i >= len) goto torn;
        }
        r->nfields++;
        r->last_off = start;
        r->last_len = i - start;
        r->last_quoted = quoted;
        if (t[i++] == '\n') break;
    }
    r->first = str_take(&first);
    *p = i;
    return REC_OK;
torn:
    free(first.s);
    return REC_TORN;
bad:
    free(first.s);
    return REC_BAD;
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

static int parse_csv(ResultFile *rf, const char *name, const char *t, size_t len, int per_head)
{
    const char *nl = len ? memchr(t, '\n', len) : NULL;
    if (per_head < 0) { /* detect: the per-head header, or else the other one */
        char *ph = results_csv_header(1);
        per_head = nl && (size_t)(nl - t) + 1 == strlen(ph) && memcmp(t, ph, strlen(ph)) == 0;
        free(ph);
    }
    rf->per_head = per_head;
    char *header = results_csv_header(per_head);
    size_t hlen = strlen(header), cap = 0, line = 1, p = 0;
    int rc = 0;
    if (len == 0) goto done;
    if (!nl) { /* a torn header: the file holds nothing yet */
        rf->torn = len;
        goto done;
    }
    if ((size_t)(nl - t) + 1 != hlen || memcmp(t, header, hlen) != 0) {
        rc = kvc_fail("%s:1: the CSV header differs from the one this kvc writes%s (another kvc version, or not "
                      "a kvc results file?) (got \"%.*s\")", name, per_head ? " with --per-head" : " without --per-head",
                      (int)((size_t)(nl - t) > 120 ? 120 : (size_t)(nl - t)), t);
        goto done;
    }
    size_t ncols = 1;
    for (size_t i = 0; i < hlen; i++) ncols += header[i] == ',';
    rf->header_len = p = hlen;
    line = 2;
    rf->complete = p;
    while (p < len) {
        CsvRec r;
        const char *why = "";
        size_t start = p;
        int k = csv_record(t, len, &p, &r, &why);
        /* no newline left: the record cannot be complete, whatever its bytes (a kill, or zeros after a crash) */
        if (k == REC_TORN || (k == REC_BAD && !memchr(t + start, '\n', len - start))) {
            rf->torn = len - start;
            break;
        }
        if (k == REC_BAD) {
            rc = kvc_fail("%s:%zu: not a row kvc wrote: %s (got \"%.*s\")", name, line, why, clip40(len - start), t + start);
            goto done;
        }
        ResultRow row = {start, p - start, line, 0, r.first};
        if (r.nfields != ncols || r.last_quoted || expid_parse(t + r.last_off, r.last_len, &row.id)) {
            free(r.first);
            if (r.nfields != ncols)
                rc = kvc_fail("%s:%zu: not a row kvc wrote: %zu fields where the header has %zu (got \"%.*s\")", name,
                              line, r.nfields, ncols, clip40(len - start), t + start);
            else
                rc = kvc_fail("%s:%zu: not a row kvc wrote: the last field is not a 16-hex-digit id (got \"%.*s\")",
                              name, line, (int)(r.last_len > 40 ? 40 : r.last_len), t + r.last_off);
            goto done;
        }
        push_row(rf, &cap, &row);
        line += count_lines(t, start, p);
        rf->complete = p;
    }
done:
    free(header);
    return rc;
}

/* ---- JSONL ---- */

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

static int hex4(const char *s, size_t i, size_t end, unsigned long *out)
{
    unsigned long v = 0;
    if (i + 4 > end) return -1;
    for (size_t k = i; k < i + 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (unsigned long)d;
    }
    *out = v;
    return 0;
}

/* A JSON string at *p (at the opening quote); decoded into out when out is not NULL. */
static int json_str(const char *s, size_t *p, size_t end, Str *out)
{
    size_t i = *p;
    if (i >= end || s[i] != '"') return -1;
    for (i++; i < end; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') {
            *p = i + 1;
            return 0;
        }
        if (c < 0x20) return -1;
        if (c != '\\') {
            if (out) str_put(out, (char)c);
            continue;
        }
        if (++i >= end) return -1;
        char e = s[i];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, e);
        if (e != 'u' && (!k || e == '\0')) return -1;
        if (e != 'u') {
            if (out) str_put(out, to[k - from]);
            continue;
        }
        unsigned long u, lo;
        if (hex4(s, i + 1, end, &u)) return -1;
        i += 4;
        if (u >= 0xD800 && u < 0xDC00) {
            if (i + 2 >= end || s[i + 1] != '\\' || s[i + 2] != 'u' || hex4(s, i + 3, end, &lo) || lo < 0xDC00 ||
                lo >= 0xE000)
                return -1;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        } else if (u >= 0xDC00 && u < 0xE000) {
            return -1;
        }
        if (out) put_utf8(out, u);
    }
    return -1;
}

static void json_ws(const char *s, size_t *p, size_t end)
{
    while (*p < end && (s[*p] == ' ' || s[*p] == '\t')) (*p)++;
}

/* Skips one JSON value (string, object, array, number or literal) at *p. */
static int json_skip(const char *s, size_t *p, size_t end, int depth)
{
    json_ws(s, p, end);
    if (*p >= end || depth > 64) return -1;
    char c = s[*p];
    if (c == '"') return json_str(s, p, end, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        (*p)++;
        json_ws(s, p, end);
        if (*p < end && s[*p] == close) {
            (*p)++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                json_ws(s, p, end);
                if (json_str(s, p, end, NULL)) return -1;
                json_ws(s, p, end);
                if (*p >= end || s[*p] != ':') return -1;
                (*p)++;
            }
            if (json_skip(s, p, end, depth + 1)) return -1;
            json_ws(s, p, end);
            if (*p >= end) return -1;
            if (s[*p] == close) {
                (*p)++;
                return 0;
            }
            if (s[*p] != ',') return -1;
            (*p)++;
        }
    }
    size_t start = *p;
    while (*p < end && strchr("+-.0123456789eEtruefalsn", s[*p])) (*p)++;
    return *p > start ? 0 : -1;
}

/* The key at position k of a line: label, method, params, (layer, head,) the columns, id; NULL past the end. */
static const char *jsonl_key(size_t k, int per_head)
{
    static const char *const lead[] = {"label", "method", "params", "layer", "head"};
    size_t nl = per_head ? 5 : 3;
    if (k < nl) return lead[k];
    if (k < nl + NCOLS) return column_names[k - nl];
    return k == nl + NCOLS ? "id" : NULL;
}

static int jsonl_line(const char *s, size_t start, size_t end, ResultRow *row, int per_head, const char **why)
{
    size_t p = start, k = 0, nkeys = (per_head ? 5 : 3) + NCOLS + 1;
    Str key = {0}, label = {0};
    int have_label = 0;
    *why = "not a JSON object";
    json_ws(s, &p, end);
    if (p >= end || s[p] != '{') goto bad;
    p++;
    for (;; k++) {
        json_ws(s, &p, end);
        key.n = 0;
        if (key.s) key.s[0] = '\0';
        if (json_str(s, &p, end, &key)) goto bad;
        const char *want = jsonl_key(k, per_head);
        if (!want || strcmp(key.s ? key.s : "", want) != 0) {
            *why = per_head ? "its keys differ from the ones this kvc writes with --per-head (label, method, params, "
                              "layer, head, the columns, id)"
                            : "its keys differ from the ones this kvc writes (label, method, params, the columns, id)";
            goto bad;
        }
        json_ws(s, &p, end);
        if (p >= end || s[p] != ':') goto bad;
        p++;
        json_ws(s, &p, end);
        if (k == 0) {
            if (json_str(s, &p, end, &label)) goto bad;
            have_label = 1;
        } else if (k == nkeys - 1) {
            size_t q = p;
            if (json_str(s, &p, end, NULL) || expid_parse(s + q + 1, p - q - 2, &row->id)) {
                *why = "the id is not 16 hex digits";
                goto bad;
            }
        } else if (json_skip(s, &p, end, 0)) {
            goto bad;
        }
        json_ws(s, &p, end);
        if (p < end && s[p] == ',') {
            p++;
            continue;
        }
        if (p < end && s[p] == '}') {
            p++;
            break;
        }
        goto bad;
    }
    json_ws(s, &p, end);
    if (k + 1 != nkeys) {
        *why = "it has fewer keys than this kvc writes (label, method, params, the columns, id)";
        goto bad;
    }
    if (p != end) {
        *why = "text after the object";
        goto bad;
    }
    free(key.s);
    row->label = have_label ? str_take(&label) : xstrdup("");
    return 0;
bad:
    free(key.s);
    free(label.s);
    return -1;
}

static int parse_jsonl(ResultFile *rf, const char *name, const char *t, size_t len, int per_head)
{
    size_t cap = 0, p = 0, line = 1;
    if (per_head < 0) { /* detect: is the 4th key of the first line "layer"? */
        const char *nl = memchr(t, '\n', len), *pat = "},\"layer\":";
        size_t n = nl ? (size_t)(nl - t) : 0, m = strlen(pat);
        per_head = 0;
        for (size_t i = 0; i + m <= n && !per_head; i++) per_head = memcmp(t + i, pat, m) == 0;
    }
    rf->per_head = per_head;
    while (p < len) {
        const char *nl = memchr(t + p, '\n', len - p);
        if (!nl) {
            rf->torn = len - p;
            break;
        }
        size_t end = (size_t)(nl - t);
        ResultRow row = {p, end + 1 - p, line, 0, NULL};
        const char *why;
        if (jsonl_line(t, p, end, &row, per_head, &why))
            return kvc_fail("%s:%zu: not a row kvc wrote: %s (got \"%.*s\")", name, line, why, clip40(len - p), t + p);
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
    memset(rf, 0, sizeof *rf);
}

int results_write_atomic(const char *path, const char *buf, size_t n)
{
    size_t pl = strlen(path);
    char *tmp = xmalloc(pl + 16);
    snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return kvc_fail("%s: cannot create a temporary file next to it (got %s)", path, strerror(e));
    }
    mode_t um = umask(0);
    umask(um);
    const char *what = NULL;
    if (fchmod(fd, 0666 & ~um) != 0) what = "chmod";
    for (size_t off = 0; !what && off < n;) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) what = "write error";
        else off += (size_t)w;
    }
    if (!what && fsync(fd) != 0) what = "write error";
    int e = errno;
    if (close(fd) != 0 && !what) {
        what = "write error";
        e = errno;
    }
    if (!what && rename(tmp, path) != 0) {
        what = "cannot rename the finished file onto it";
        e = errno;
    }
    if (what) {
        unlink(tmp);
        free(tmp);
        return kvc_fail("%s: %s (got %s)", path, what, strerror(e));
    }
    free(tmp);
    return 0;
}
