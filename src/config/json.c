/* json: path-aware JSON getters and messages, and the strict RFC 8259 scanner of src/config/ (see json.h). */
#include "config/json.h"
#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ---- */

/* Compact JSON of a node, shortened to about 60 characters for a message. */
static void describe(char *buf, size_t cap, const cJSON *node)
{
    if (!node) {
        snprintf(buf, cap, "nothing");
        return;
    }
    if (cJSON_IsNumber(node)) { /* cJSON prints 15 digits when they are "close enough"; print the exact value */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, cap, "%.*g", prec, node->valuedouble);
            if (strtod(buf, NULL) == node->valuedouble) break;
        }
        return;
    }
    char *s = cJSON_PrintUnformatted(node);
    if (!s) {
        snprintf(buf, cap, "?");
        return;
    }
    if (strlen(s) > 60)
        snprintf(buf, cap, "%.57s...", s);
    else
        snprintf(buf, cap, "%s", s);
    cJSON_free(s);
}

int json_bad(const JsonCtx *c, const char *path, const cJSON *got, const char *fmt, ...)
{
    char what[512], val[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    describe(val, sizeof val, got);
    return kvc_fail("%s: %s: %s (got %s)", c->file, path, what, val);
}

const char *json_nearest(const char *word, const char *const *choices)
{
    const char *best = choices[0];
    size_t bd = (size_t)-1;
    for (size_t i = 0; choices[i]; i++) {
        size_t d = edit_distance(word, choices[i]);
        if (d < bd) { bd = d; best = choices[i]; }
    }
    return best;
}

void json_join(char *out, size_t cap, const char *parent, const char *key)
{
    if (parent[0])
        snprintf(out, cap, "%s.%s", parent, key);
    else
        snprintf(out, cap, "%s", key);
}

/* The --set argument (the last one, as later ones win) whose PATH is `path` or a prefix of it, component by
 * component (list indices compared as numbers: "experiments.00" is experiments.0); NULL when none is. */
static const char *set_of_path(const JsonCtx *c, const char *path)
{
    for (size_t k = c->n_sets; k-- > 0;) {
        const char *a = c->sets[k], *p = path;
        const char *eq = strchr(a, '=');
        if (!eq) continue;
        int match = 1;
        while (match && a < eq) {   /* one component of the --set path against one of `path` */
            size_t la = strcspn(a, ".="), lp = strcspn(p, ".");
            int num = la > 0 && lp > 0 && strspn(a, "0123456789") >= la && strspn(p, "0123456789") >= lp;
            if (num) {
                while (la > 1 && *a == '0') a++, la--;
                while (lp > 1 && *p == '0') p++, lp--;
            }
            if (la != lp || memcmp(a, p, la) != 0) match = 0;
            a += la;
            p += lp;
            if (*a == '.') a++;
            if (a < eq) {
                if (*p != '.') match = 0;
                else p++;
            }
        }
        if (match && (*p == '\0' || *p == '.')) return c->sets[k];
    }
    return NULL;
}

int json_unknown_key(const JsonCtx *c, const char *path, const char *key, const char *fmt, ...)
{
    char p[256], what[512];
    json_join(p, sizeof p, path, key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *set = set_of_path(c, p);
    cJSON name = {0};
    name.type = cJSON_String;
    name.valuestring = (char *)key;
    char val[128];
    describe(val, sizeof val, &name);
    if (set) {
        size_t n = strlen(set);
        return kvc_fail("--set %.*s%s: %s: %s (got %s)", (int)(n > 60 ? 60 : n), set, n > 60 ? "..." : "", p, what,
                        val);
    }
    return kvc_fail("%s: %s: %s (got %s)", c->file, p, what, val);
}

/* Every key of obj must be in allowed; no key may appear twice. */
void (*json_keys_watch)(const cJSON *obj, const char *path, const char *const *allowed);

int json_check_keys(const JsonCtx *c, const cJSON *obj, const char *path, const char *const *allowed)
{
    if (json_keys_watch) json_keys_watch(obj, path, allowed);
    for (const cJSON *it = obj->child; it; it = it->next) {
        char p[256];
        json_join(p, sizeof p, path, it->string);
        int ok = 0;
        for (size_t i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], it->string) == 0) ok = 1;
        if (!ok)
            return json_unknown_key(c, path, it->string, "unknown key; did you mean \"%s\"?",
                                    json_nearest(it->string, allowed));
        for (const cJSON *jt = it->next; jt; jt = jt->next)
            if (strcmp(jt->string, it->string) == 0)
                return json_bad(c, p, jt, "key appears twice in the same object");
    }
    return 0;
}

int json_missing(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, const char *what)
{
    size_t lk = strlen(key), allow = lk >= 6 ? 2 : 1;
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
        size_t d = edit_distance(it->string, key);
        if (d > 0 && d <= allow)
            return json_unknown_key(c, path, it->string, "unknown key; did you mean \"%s\"? (the required key)",
                                    key);
    }
    char p[256];
    json_join(p, sizeof p, path, key);
    return json_bad(c, p, NULL, "missing required key %s", what);
}

/* ---- getters: node may be NULL (absent) ---- */

int json_int(const JsonCtx *c, const cJSON *node, const char *path, long lo, long hi, long *out)
{
    if (!cJSON_IsNumber(node)) return json_bad(c, path, node, "must be an integer in %ld..%ld", lo, hi);
    double v = node->valuedouble;
    if (!isfinite(v) || v != floor(v)) return json_bad(c, path, node, "must be an integer in %ld..%ld", lo, hi);
    if (v == 0 && signbit(v)) return json_bad(c, path, node, "an integer must not be written -0; write 0");
    if (v < (double)lo || v > (double)hi) return json_bad(c, path, node, "must be in %ld..%ld", lo, hi);
    *out = (long)v;
    return 0;
}

int json_num(const JsonCtx *c, const cJSON *node, const char *path, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(node) || !isfinite(node->valuedouble))
        return json_bad(c, path, node, "must be a finite number");
    if (node->valuedouble < lo || node->valuedouble > hi) return json_bad(c, path, node, "must be in %g..%g", lo, hi);
    *out = node->valuedouble;
    return 0;
}

int json_choice(const JsonCtx *c, const cJSON *node, const char *path, const char *const *choices, long *out)
{
    char list[256] = "";
    for (size_t i = 0; choices[i]; i++) {
        strncat(list, i ? ", \"" : "\"", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
        strncat(list, "\"", sizeof list - strlen(list) - 1);
    }
    if (!cJSON_IsString(node)) return json_bad(c, path, node, "must be one of %s", list);
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(node->valuestring, choices[i]) == 0) {
            *out = (long)i;
            return 0;
        }
    return json_bad(c, path, node, "must be one of %s; did you mean \"%s\"?", list, json_nearest(node->valuestring,
                                                                                                 choices));
}

const cJSON *json_member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

int json_need_object(const JsonCtx *c, const cJSON *node, const char *path)
{
    if (!cJSON_IsObject(node)) return json_bad(c, path, node, node ? "must be an object" : "missing required object");
    return 0;
}

/* Optional number with a default. */
int json_opt_num(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, double lo, double hi,
                   double def, double *out)
{
    const cJSON *n = json_member(obj, key);
    if (!n) {
        *out = def;
        return 0;
    }
    char p[256];
    json_join(p, sizeof p, path, key);
    return json_num(c, n, p, lo, hi, out);
}

int json_req_int(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, long lo, long hi, long *out)
{
    char p[256];
    json_join(p, sizeof p, path, key);
    const cJSON *n = json_member(obj, key);
    if (!n) {
        char what[96];
        snprintf(what, sizeof what, "(an integer in %ld..%ld)", lo, hi);
        return json_missing(c, obj, path, key, what);
    }
    return json_int(c, n, p, lo, hi, out);
}

/* Optional integer with a default. */
int json_opt_int(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, long lo, long hi, long def,
                   long *out)
{
    const cJSON *n = json_member(obj, key);
    if (!n) {
        *out = def;
        return 0;
    }
    char p[256];
    json_join(p, sizeof p, path, key);
    return json_int(c, n, p, lo, hi, out);
}

/* ---- strict syntax (RFC 8259): json_scan, run before cJSON builds the tree (why: json.h) ---- */

typedef struct JsonScan {
    const char *s;
    size_t n, i;
    char *path;          /* the dotted path of the value being scanned (NULL: not tracked) */
    size_t cap, plen;
    size_t str_off;      /* the opening quote of the last string scanned */
} JsonScan;

static void js_ws(JsonScan *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r'))
        j->i++;
}

/* error kind at j->i: the end of the input or a bad byte */
static int js_fail(const JsonScan *j)
{
    return j->i >= j->n ? JSON_EOF : JSON_BAD;
}

static int js_digits(JsonScan *j)
{
    if (j->i >= j->n || j->s[j->i] < '0' || j->s[j->i] > '9') return js_fail(j);
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return JSON_OK;
}

/* Appends "." (unless the path is empty) and the key s[0..n) to the path, as it reads: escapes of printable ASCII
 * decoded (\", \\, \/, \u0041), other escapes as written. s is well-formed UTF-8 (js_string checked it, up to an
 * error that ends it), so its other bytes are copied as they are. */
static void js_path_push(JsonScan *j, const char *s, size_t n)
{
    if (!j->path) return;
    size_t k = j->plen;
    if (k && k + 1 < j->cap) j->path[k++] = '.';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xC0) != 0x80 && k + 6 > j->cap) break;   /* room for a whole character (at most 4 bytes) */
        if (c == '\\' && i + 1 < n && strchr("\"\\/", s[i + 1])) {
            j->path[k++] = s[++i];
        } else if (c == '\\' && i + 5 < n && s[i + 1] == 'u') {
            unsigned v = 0;
            for (size_t h = i + 2; h < i + 6; h++)
                v = v * 16 + (unsigned)(s[h] <= '9' ? s[h] - '0' : (s[h] | 0x20) - 'a' + 10);
            if (v >= 0x20 && v < 0x7f) {
                j->path[k++] = (char)v;
                i += 5;
            } else {
                j->path[k++] = '\\';
            }
        } else {
            j->path[k++] = (char)c;
        }
    }
    j->path[k] = '\0';
    j->plen = k;
}

/* A string at j->i (the opening quote): RFC 8259, plus no \u0000 (cJSON would cut the string there) and
 * well-formed UTF-8 (utf8_check). Leaves j->i after the closing quote, or at the error. */
static int js_string(JsonScan *j)
{
    j->str_off = j->i;
    for (j->i++; j->i < j->n; j->i++) {
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') {
            j->i++;
            return JSON_OK;
        }
        if (c < 0x20) return JSON_BAD;
        if (c >= 0x80) {   /* one character: utf8_check of its bytes (at most 4) passes its first */
            if (utf8_check(j->s + j->i, j->n - j->i < 4 ? j->n - j->i : 4) == 0) return JSON_BAD_UTF8;
            j->i += (size_t)(c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2) - 1;
            continue;
        }
        if (c == '\\') {
            size_t at = j->i;
            j->i++;
            if (j->i >= j->n) return JSON_EOF;
            if (j->s[j->i] == 'u') {
                for (int k = 0; k < 4; k++) {
                    j->i++;
                    if (j->i >= j->n) return JSON_EOF;
                    char h = j->s[j->i];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                        return JSON_BAD;
                }
                if (memcmp(j->s + at + 2, "0000", 4) == 0) {
                    j->i = at;
                    return JSON_NUL_CHAR;
                }
            } else if (!strchr("\"\\/bfnrt", j->s[j->i])) {
                j->i--; /* point at the backslash */
                return JSON_BAD;
            }
        }
    }
    return JSON_EOF;
}

static int js_value(JsonScan *j, int depth)
{
    js_ws(j);
    if (j->i >= j->n) return JSON_EOF;
    char ch = j->s[j->i];
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH) return JSON_DEEP;
        j->i++;
        js_ws(j);
        if (j->i < j->n && j->s[j->i] == close) {
            j->i++;
            return JSON_OK;
        }
        size_t parent = j->plen, index = 0;
        for (;; index++) {
            int r;
            j->plen = parent;
            if (j->path) j->path[parent] = '\0';
            if (ch == '{') {
                js_ws(j);
                if (j->i >= j->n || j->s[j->i] != '"') return js_fail(j);
                size_t k0 = j->i + 1;
                r = js_string(j);
                /* the path names the key: in full when it is sound, up to the error when it is not */
                js_path_push(j, j->s + k0, (r == JSON_OK ? j->i - 1 : j->i) - k0);
                if (r != JSON_OK) return r;
                js_ws(j);
                if (j->i >= j->n || j->s[j->i] != ':') return js_fail(j);
                j->i++;
            } else {
                char num[24];
                js_path_push(j, num, (size_t)snprintf(num, sizeof num, "%zu", index));
            }
            if ((r = js_value(j, depth + 1)) != JSON_OK) return r;
            j->plen = parent;
            if (j->path) j->path[parent] = '\0';
            js_ws(j);
            if (j->i >= j->n) return JSON_EOF;
            if (j->s[j->i] == close) {
                j->i++;
                return JSON_OK;
            }
            if (j->s[j->i] != ',') return JSON_BAD;
            j->i++;
        }
    }
    if (ch == '"') return js_string(j);
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        int r;
        if (ch == '-') j->i++;
        if (j->i < j->n && j->s[j->i] == '0') j->i++;
        else if ((r = js_digits(j)) != JSON_OK) return r;
        if (j->i < j->n && j->s[j->i] == '.') {
            j->i++;
            if ((r = js_digits(j)) != JSON_OK) return r;
        }
        if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
            j->i++;
            if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
            if ((r = js_digits(j)) != JSON_OK) return r;
        }
        return JSON_OK;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t w = 0; w < 3; w++) {
        size_t wl = strlen(words[w]);
        if (ch != words[w][0]) continue;
        for (size_t k = 0; k < wl; k++) {
            if (j->i + k >= j->n) {
                j->i = j->n;
                return JSON_EOF;
            }
            if (j->s[j->i + k] != words[w][k]) return JSON_BAD; /* at the start of the word */
        }
        j->i += wl;
        return JSON_OK;
    }
    return JSON_BAD;
}

int json_scan_at(const char *text, size_t len, size_t *off, char *path, size_t cap, size_t *str_off)
{
    JsonScan j = {text, len, 0, cap ? path : NULL, cap, 0, 0};
    if (j.path) j.path[0] = '\0';
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) j.i = 3; /* a UTF-8 byte order mark, as cJSON skips it */
    int r = js_value(&j, 0);
    if (r == JSON_OK) {
        js_ws(&j);
        if (j.i < len) r = JSON_TRAILING;
    }
    *off = j.i < len ? j.i : len;
    if (str_off) *str_off = j.str_off;
    return r;
}

int json_scan(const char *text, size_t len, size_t *off)
{
    return json_scan_at(text, len, off, NULL, 0, NULL);
}

void json_show_string(char *buf, size_t cap, const char *text, size_t len, size_t str_off, size_t bad)
{
    /* from the opening quote, or from 24 bytes before the bad one when the string is longer */
    size_t from = bad > str_off + 32 ? bad - 24 : str_off, k = 0;
    if (cap < 16) {
        if (cap) buf[0] = '\0';
        return;
    }
    if (from > str_off) k += (size_t)snprintf(buf, cap, "\"...");
    else from = str_off + 1, k += (size_t)snprintf(buf, cap, "\"");
    size_t i = from;
    for (; i < len && i < bad + 24 && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' && !(i > 0 && text[i - 1] == '\\')) break;
        if (c >= 0x80 || c < 0x20) k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
        else buf[k++] = (char)c;
    }
    int closed = i < len && text[i] == '"';
    snprintf(buf + k, cap - k, closed ? "\"" : "...\"");
}

void json_position(const char *text, size_t offset, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}
