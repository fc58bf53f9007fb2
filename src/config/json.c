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
        if (!ok) {
            cJSON name = {0};
            name.type = cJSON_String;
            name.valuestring = it->string;
            return json_bad(c, p, &name, "unknown key; did you mean \"%s\"?", json_nearest(it->string, allowed));
        }
        for (const cJSON *jt = it->next; jt; jt = jt->next)
            if (strcmp(jt->string, it->string) == 0)
                return json_bad(c, p, jt, "key appears twice in the same object");
    }
    return 0;
}

/* ---- getters: node may be NULL (absent) ---- */

int json_int(const JsonCtx *c, const cJSON *node, const char *path, long lo, long hi, long *out)
{
    if (!cJSON_IsNumber(node)) return json_bad(c, path, node, "must be an integer in %ld..%ld", lo, hi);
    double v = node->valuedouble;
    if (!isfinite(v) || v != floor(v)) return json_bad(c, path, node, "must be an integer in %ld..%ld", lo, hi);
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
    if (!n) return json_bad(c, p, NULL, "missing required key (an integer in %ld..%ld)", lo, hi);
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
        for (;;) {
            int r;
            if (ch == '{') {
                js_ws(j);
                if (j->i >= j->n || j->s[j->i] != '"') return js_fail(j);
                if ((r = js_value(j, depth + 1)) != JSON_OK) return r;
                js_ws(j);
                if (j->i >= j->n || j->s[j->i] != ':') return js_fail(j);
                j->i++;
            }
            if ((r = js_value(j, depth + 1)) != JSON_OK) return r;
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
    if (ch == '"') {
        for (j->i++; j->i < j->n; j->i++) {
            unsigned char c = (unsigned char)j->s[j->i];
            if (c == '"') {
                j->i++;
                return JSON_OK;
            }
            if (c < 0x20) return JSON_BAD;
            if (c == '\\') {
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
                } else if (!strchr("\"\\/bfnrt", j->s[j->i])) {
                    j->i--; /* point at the backslash */
                    return JSON_BAD;
                }
            }
        }
        return JSON_EOF;
    }
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

int json_scan(const char *text, size_t len, size_t *off)
{
    JsonScan j = {text, len, 0};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) j.i = 3; /* a UTF-8 byte order mark, as cJSON skips it */
    int r = js_value(&j, 0);
    if (r == JSON_OK) {
        js_ws(&j);
        if (j.i < len) r = JSON_TRAILING;
    }
    *off = j.i < len ? j.i : len;
    return r;
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
