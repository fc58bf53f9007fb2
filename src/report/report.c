/* report: table, CSV and JSON-lines writers (see report.h). */
#include "report/report.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int report_format_parse(const char *s, Format *out)
{
    if (strcmp(s, "table") == 0) *out = FORMAT_TABLE;
    else if (strcmp(s, "csv") == 0) *out = FORMAT_CSV;
    else if (strcmp(s, "jsonl") == 0) *out = FORMAT_JSONL;
    else return -1;
    return 0;
}

static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* The listed parameters of ex as JSON members ("name":value), each preceded by a comma unless it is the first
 * and `comma` is 0. */
static void json_params(FILE *f, const Experiment *ex, int comma)
{
    for (size_t i = 0; i < ex->method->n_params; i++) {
        const ParamDesc *pd = &ex->method->params[i];
        if (!exp_param_listed(ex, i)) continue;
        fprintf(f, "%s\"%s\":", comma ? "," : "", pd->name);
        comma = 1;
        char v[64];
        exp_param_text(v, sizeof v, ex, i);
        if (pd->kind == PARAM_ENUM) json_string(f, v);
        else fputs(v, f);
    }
}

static void number(char *buf, size_t cap, const Row *row, Column c)
{
    if (column_is_integer(c))
        snprintf(buf, cap, "%.0f", row->v[c]);
    else
        fmt_double(buf, cap, row->v[c]);
}

void report_header(FILE *f, Format fmt)
{
    if (fmt != FORMAT_CSV) return;
    fputs("label,method", f);
    for (int c = 0; c < NCOLS; c++) fprintf(f, ",%s", column_names[c]);
    fputs(",id\n", f);
}

void report_header_per_head(FILE *f, Format fmt)
{
    if (fmt != FORMAT_CSV) return;
    fputs("label,method,layer,head", f);
    for (int c = 0; c < NCOLS; c++) fprintf(f, ",%s", column_names[c]);
    fputs(",id\n", f);
}

void report_row(FILE *f, Format fmt, const Row *row, const char *id)
{
    const Experiment *ex = row->ex;
    char buf[64];
    if (fmt == FORMAT_CSV) {
        csv_field(f, ex->label);
        fputc(',', f);
        csv_field(f, ex->method->name);
        if (row->per_head) fprintf(f, ",%zu,%zu", row->layer, row->head);
        for (int c = 0; c < NCOLS; c++) {
            fputc(',', f);
            if (row->has[c]) {
                number(buf, sizeof buf, row, (Column)c);
                fputs(buf, f);
            }
        }
        fprintf(f, ",%s\n", id);
    } else if (fmt == FORMAT_JSONL) {
        fputs("{\"label\":", f);
        json_string(f, ex->label);
        fputs(",\"method\":", f);
        json_string(f, ex->method->name);
        fputs(",\"params\":{", f);
        if (ex->n_steps) {
            fputs("\"steps\":[", f);
            for (size_t s = 0; s < ex->n_steps; s++) {
                fputs(s ? ",{\"method\":" : "{\"method\":", f);
                json_string(f, ex->steps[s].method->name);
                json_params(f, &ex->steps[s], 1);
                fputc('}', f);
            }
            fputc(']', f);
        }
        json_params(f, ex, 0);
        fputc('}', f);
        if (row->per_head) fprintf(f, ",\"layer\":%zu,\"head\":%zu", row->layer, row->head);
        for (int c = 0; c < NCOLS; c++) {
            fprintf(f, ",\"%s\":", column_names[c]);
            if (row->has[c] && isfinite(row->v[c])) {
                number(buf, sizeof buf, row, (Column)c);
                fputs(buf, f);
            } else {
                fputs("null", f);
            }
        }
        fprintf(f, ",\"id\":\"%s\"}\n", id);
    }
    fflush(f);
}

/* Table cell text of column c (3 decimals, or an integer), or "" when n/a. */
static void cell(char *buf, size_t cap, const Row *row, int c)
{
    if (!row->has[c]) buf[0] = '\0';
    else if (column_is_integer((Column)c)) snprintf(buf, cap, "%.0f", row->v[c]);
    else snprintf(buf, cap, "%.3f", row->v[c]);
}

/* Display width of a UTF-8 string (code points; no wide characters assumed). */
static size_t width(const char *s)
{
    size_t w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

char *report_label_text(const char *label)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)label; *p; p++)
        n += *p == '\n' || *p == '\r' || *p == '\t' ? 2 : *p < 0x20 || *p == 0x7f ? 4 : 1;
    char *out = xmalloc(n + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)label; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t') {
            *o++ = '\\';
            *o++ = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(o, 5, "\\x%02x", *p);
            o += 4;
        } else {
            *o++ = (char)*p;
        }
    }
    *o = '\0';
    return out;
}

void report_table(FILE *f, const Row *rows, size_t n)
{
    size_t wl = strlen("label"), wm = strlen("method"), wc[NCOLS], wlay = strlen("layer"), whead = strlen("head");
    int show[NCOLS], per_head = 0;
    char buf[64];
    for (int c = 0; c < NCOLS; c++) {
        show[c] = 0;
        wc[c] = strlen(column_names[c]);
    }
    for (size_t i = 0; i < n; i++) {
        char *label = report_label_text(rows[i].ex->label);
        if (width(label) > wl) wl = width(label);
        free(label);
        if (strlen(rows[i].ex->method->name) > wm) wm = strlen(rows[i].ex->method->name);
        if (rows[i].per_head) {
            per_head = 1;
            int a = snprintf(buf, sizeof buf, "%zu", rows[i].layer), b = snprintf(buf, sizeof buf, "%zu", rows[i].head);
            if ((size_t)a > wlay) wlay = (size_t)a;
            if ((size_t)b > whead) whead = (size_t)b;
        }
        for (int c = 0; c < NCOLS; c++) {
            if (!rows[i].has[c] || rows[i].hide[c]) continue;   /* hide: CSV/JSONL only (evaluate.h) */
            show[c] = 1;
            cell(buf, sizeof buf, &rows[i], c);
            if (strlen(buf) > wc[c]) wc[c] = strlen(buf);
        }
    }
    fprintf(f, "%-*s  %-*s", (int)wl, "label", (int)wm, "method");
    if (per_head) fprintf(f, "  %*s  %*s", (int)wlay, "layer", (int)whead, "head");
    for (int c = 0; c < NCOLS; c++)
        if (show[c]) fprintf(f, "  %*s", (int)wc[c], column_names[c]);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        char *label = report_label_text(rows[i].ex->label);
        fprintf(f, "%s%*s  %-*s", label, (int)(wl - width(label)), "", (int)wm, rows[i].ex->method->name);
        free(label);
        if (per_head) fprintf(f, "  %*zu  %*zu", (int)wlay, rows[i].layer, (int)whead, rows[i].head);
        for (int c = 0; c < NCOLS; c++) {
            if (!show[c]) continue;
            cell(buf, sizeof buf, &rows[i], c);
            fprintf(f, "  %*s", (int)wc[c], buf);
        }
        fputc('\n', f);
    }
    fflush(f);
}
