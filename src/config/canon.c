/* canon: the canonical compact writer (experiment ids) and the pretty writer (files.json) of a config tree
 * (see canon.h). */
#include "config/canon.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- canonical: keys sorted, shortest round-trip numbers ---- */

static void canon_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static int canon_key_order(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* top: n is the config object, whose "seed" and "experiments" are left out */
static void canon_value(FILE *f, const cJSON *n, int top)
{
    if (cJSON_IsObject(n)) {
        size_t cnt = 0, all = (size_t)cJSON_GetArraySize(n);
        const cJSON **kids = xmalloc((all ? all : 1) * sizeof *kids);
        for (const cJSON *it = n->child; it; it = it->next)
            if (!top || (strcmp(it->string, "seed") != 0 && strcmp(it->string, "experiments") != 0)) kids[cnt++] = it;
        qsort(kids, cnt, sizeof *kids, canon_key_order);
        fputc('{', f);
        for (size_t i = 0; i < cnt; i++) {
            if (i) fputc(',', f);
            canon_string(f, kids[i]->string);
            fputc(':', f);
            canon_value(f, kids[i], 0);
        }
        fputc('}', f);
        free(kids);
    } else if (cJSON_IsArray(n)) {
        fputc('[', f);
        for (const cJSON *it = n->child; it; it = it->next) {
            if (it != n->child) fputc(',', f);
            canon_value(f, it, 0);
        }
        fputc(']', f);
    } else if (cJSON_IsNumber(n)) {
        char buf[40];
        fmt_double(buf, sizeof buf, n->valuedouble);
        fputs(buf, f);
    } else if (cJSON_IsString(n)) {
        canon_string(f, n->valuestring);
    } else {
        fputs(cJSON_IsTrue(n) ? "true" : cJSON_IsFalse(n) ? "false" : "null", f);
    }
}

/* ---- pretty: the config's own key order, indented ---- */

static void pretty_indent(FILE *f, int depth)
{
    fputc('\n', f);
    for (int i = 0; i < depth; i++) fputs("  ", f);
}

/* Indented JSON in the config's own key order: a list of numbers and strings, and an object of those and such
 * lists, on one line, else one member per line; numbers in shortest round-trip form. */
static void pretty_value(FILE *f, const cJSON *n, int depth)
{
    if (cJSON_IsObject(n) || cJSON_IsArray(n)) {
        int obj = cJSON_IsObject(n), flat = 1;
        for (const cJSON *it = n->child; it && flat; it = it->next) {
            flat = !cJSON_IsObject(it) && (!cJSON_IsArray(it) || obj);
            for (const cJSON *jt = cJSON_IsArray(it) ? it->child : NULL; jt && flat; jt = jt->next)
                flat = !cJSON_IsObject(jt) && !cJSON_IsArray(jt);
        }
        fputc(obj ? '{' : '[', f);
        for (const cJSON *it = n->child; it; it = it->next) {
            if (flat) {
                if (it != n->child) fputs(", ", f);
            } else {
                if (it != n->child) fputc(',', f);
                pretty_indent(f, depth + 1);
            }
            if (obj) {
                canon_string(f, it->string);
                fputs(": ", f);
            }
            pretty_value(f, it, depth + 1);
        }
        if (!flat && n->child) pretty_indent(f, depth);
        fputc(obj ? '}' : ']', f);
    } else {
        canon_value(f, n, 0);
    }
}

char *canon_data(const cJSON *root)
{
    char *out = NULL;
    size_t n = 0;
    FILE *f = xmemstream(&out, &n, NULL);
    canon_value(f, root, 1);
    fclose(f);
    return out;
}

char *canon_pretty(const cJSON *root)
{
    char *out = NULL;
    size_t n = 0;
    FILE *f = xmemstream(&out, &n, NULL);
    pretty_value(f, root, 0);
    fclose(f);
    return out;
}
