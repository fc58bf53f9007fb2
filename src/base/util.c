/* util: allocation that cannot fail silently, the error buffer, checked sizes, number formatting, a growing
 * string, a top-k selection and the median. */
#define _DEFAULT_SOURCE   /* madvise's MADV_HUGEPAGE */
#include "base/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

static _Thread_local char errbuf[1024];   /* per thread: evaluation workers fail independently */
static char alloc_ctx[256];

void xalloc_context(const char *fmt, ...)
{
    if (!fmt) {
        alloc_ctx[0] = '\0';
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(alloc_ctx, sizeof alloc_ctx, fmt, ap);
    va_end(ap);
    for (char *p = alloc_ctx; *p; p++)   /* one line, whatever a label held */
        if ((unsigned char)*p < 0x20) *p = ' ';
}

_Noreturn void xalloc_die(size_t n)
{
    /* no allocation here: stderr is unbuffered and fprintf of numbers needs no heap */
    if (n)
        fprintf(stderr, "kvc: %s%sout of memory (got a request for %zu bytes)\n", alloc_ctx, alloc_ctx[0] ? ": " : "",
                n);
    else
        fprintf(stderr, "kvc: %s%sout of memory (got a failed allocation)\n", alloc_ctx, alloc_ctx[0] ? ": " : "");
    exit(EXIT_RUNTIME);
}

/* Large blocks: ask for transparent huge pages (one fault per 2 MiB instead of 512) over the 2 MiB-aligned part
 * of [p, p + n); the advice is only advice (a kernel without THP refuses it, nothing changes). */
static void *big_advise(void *p, size_t n)
{
    if (p && n >= HUGE_MIN) {
        uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_PAGE - 1);
        if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);
    }
    return p;
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) xalloc_die(n);
    return big_advise(p, n);
}

void *xalloc64(size_t n)
{
    size_t m = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, m ? m : 64);
    if (!p) xalloc_die(n);
    big_advise(p, m);
    memset(p, 0, m ? m : 64);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        size_t n;
        xalloc_die(size_mul(count, size, &n) ? SIZE_MAX : n);
    }
    return big_advise(p, count * size);
}

FILE *xmemstream(char **buf, size_t *len, const char *what)
{
    FILE *f = open_memstream(buf, len);
    if (!f) {
        if (what) xalloc_context("%s", what);
        xalloc_die(0);
    }
    return f;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

int kvc_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof errbuf) { /* cut: keep the "<where>: <what> (got <value>)" shape (fuzzing found this) */
        static const char cut[] = "... (got a message longer than 1023 bytes, cut)";
        memcpy(errbuf + sizeof errbuf - sizeof cut, cut, sizeof cut);
    }
    /* The message is one line whatever the input contained. */
    for (char *p = errbuf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return -1;
}

const char *kvc_errmsg(void) { return errbuf; }

int size_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int size_add(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}

void fmt_double(char *buf, size_t cap, double x)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            if (up + 1 < best) best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

void str_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t want = (*len + n + 1) * 2;
        char *b = xmalloc(want);
        memcpy(b, *buf, *len);
        free(*buf);
        *buf = b;
        *cap = want;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
}

size_t utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;   /* the allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;        /* overlong */
            if (c == 0xED) hi = 0x9F;        /* surrogates U+D800..U+DFFF */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;        /* overlong */
            if (c == 0xF4) hi = 0x8F;        /* above U+10FFFF */
        } else {
            return i;                        /* a continuation byte, C0, C1 or F5..FF */
        }
        if (n - i < len) return i;
        if (u[i + 1] < lo || u[i + 1] > hi) return i;
        for (size_t k = 2; k < len; k++)
            if (u[i + k] < 0x80 || u[i + k] > 0xBF) return i;
        i += len;
    }
    return n;
}

static int ranks_before(const Ranked *a, const Ranked *b) { return a->v != b->v ? a->v > b->v : a->i < b->i; }

static void swap_ranked(Ranked *a, Ranked *b)
{
    Ranked t = *a;
    *a = *b;
    *b = t;
}

void select_top(Ranked *r, size_t n, size_t k)
{
    size_t lo = 0, hi = n, kk = k - 1;
    while (hi - lo > 1) {
        Ranked p = r[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi;   /* [lo, lt) rank before p, [gt, hi) after */
        while (i < gt) {
            if (ranks_before(&r[i], &p)) swap_ranked(&r[lt++], &r[i++]);
            else if (ranks_before(&p, &r[i])) swap_ranked(&r[i], &r[--gt]);
            else i++;
        }
        if (kk < lt) hi = lt;
        else if (kk >= gt) lo = gt;
        else return;
    }
}

static void swap_double(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k-th smallest of x[0..n) to x[k], smaller or equal ones before it, larger or equal ones after it. */
static void select_kth(double *x, size_t n, size_t k)
{
    size_t lo = 0, hi = n;   /* the answer is in x[lo..hi) */
    while (hi - lo > 1) {
        double p = x[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi;   /* [lo, lt) < p, [lt, i) == p, [gt, hi) > p */
        while (i < gt) {
            if (x[i] < p) swap_double(&x[lt++], &x[i++]);
            else if (x[i] > p) swap_double(&x[i], &x[--gt]);
            else i++;
        }
        if (k < lt) hi = lt;
        else if (k >= gt) lo = gt;
        else return;
    }
}

double median(double *v, size_t n)
{
    size_t k = n / 2;
    select_kth(v, n, k);
    if (n % 2) return v[k];
    double below = v[0];   /* the largest of v[0..k), all <= v[k] */
    for (size_t i = 1; i < k; i++)
        if (v[i] > below) below = v[i];
    return (below + v[k]) / 2.0;
}
