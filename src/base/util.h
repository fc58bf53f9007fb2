/* util: the small things every module needs.
 *
 * Errors: bad input is reported by returning a status (-1) after kvc_fail() has formatted the one-line
 * message "<where>: <what> (got <value>)" into a static buffer; only main prints it (as "kvc: ...")
 * and turns it into exit code 2. Broken invariants are assert()s. Out of memory goes through xmalloc,
 * which prints "kvc: <what was being done>: out of memory (got a request for N bytes)" and exits 1
 * (xalloc_context names what was being done; kvc run refuses a run that would not fit before it starts,
 * src/eval/memory.h, so this is the rare case the estimate missed). Blocks of 4 MiB or more are advised to be
 * backed by transparent huge pages (madvise MADV_HUGEPAGE, as numpy does for its arrays): first touching a
 * 64 MiB tensor then takes 32 page faults instead of 16384 (measured in this VM: 45 ms per 256 MiB against
 * 135 ms); where THP is off the advice is ignored.
 *
 * Text: utf8_check finds the first byte of s[0..n) that is not part of well-formed UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF); config strings and tensor names must pass it.
 *
 * Numbers: fmt_double prints the first of %.15g, %.16g, %.17g that reads back to the same double
 * (round-trip exact; the shortest such form for all but a few powers of two and subnormals).
 * Sizes: size_mul/size_add are overflow-checked.
 * Small shared pieces: a growing string (str_append), "the k largest" selection (select_top), the median.
 * (Command-line options are parsed in src/cli/opts.h.)
 */
#ifndef KVC_UTIL_H
#define KVC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KVC_VERSION "0.1.0"

/* Exit codes (documented in README and man/kvc.1). */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

void *xmalloc(size_t n);               /* never returns NULL; n == 0 allocates 1 byte */
void *xcalloc(size_t count, size_t size);
/* n zeroed bytes on a 64-byte boundary (free with free; n == 0 allocates 64): the stored tensors and the decode
 * kernels' buffers, whose vector loads then never straddle a cache line more often than the layout makes them. */
void *xalloc64(size_t n);
char *xstrdup(const char *s);
/* open_memstream(buf, len) that never returns NULL: when it fails, the out-of-memory exit of xmalloc, naming
 * `what` (NULL: the context xalloc_context set). */
FILE *xmemstream(char **buf, size_t *len, const char *what);
/* What the next allocations are for, named in the out-of-memory message ("cfg.json: experiments.3 (int4)");
 * printf-style, copied (at most 255 bytes); NULL clears it. Single-threaded callers only (main's thread). */
void xalloc_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the out-of-memory message for a request of n bytes (with the context) and exits 1. For allocators
 * other than xmalloc (open_memstream, cJSON) that returned NULL. */
_Noreturn void xalloc_die(size_t n);

/* The offset of the first byte of s[0..n) that is not well-formed UTF-8, or n when all of it is. */
size_t utf8_check(const char *s, size_t n);

/* Formats the current error message; always returns -1 so callers can `return kvc_fail(...)`. */
int kvc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *kvc_errmsg(void);

/* Overflow-checked size arithmetic: return 0 and store the result, or -1 on overflow. */
int size_mul(size_t a, size_t b, size_t *out);
int size_add(size_t a, size_t b, size_t *out);

/* Shortest round-trip decimal of x ("%.15g", "%.16g" or "%.17g", whichever reads back exactly). */
void fmt_double(char *buf, size_t cap, double x);

/* Levenshtein distance, for "did you mean" suggestions. */
size_t edit_distance(const char *a, const char *b);

/* Appends s[0..n) to the string *buf (xmalloc'd, *cap > 0 bytes, *len of them used before the NUL), growing the
 * buffer to twice what it then needs when it is full. */
void str_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* A value with its index, ranked for "the k largest": larger v first, ties to the lower i. */
typedef struct Ranked {
    double v;
    size_t i;
} Ranked;
/* Rearranges r[0..n) so that r[0..k) are the k first in rank, in no particular order among themselves
 * (quickselect, three-way partition; no allocation); 1 <= k <= n. */
void select_top(Ranked *r, size_t n, size_t k);

/* The median of v[0..n), n >= 1, as numpy's np.median: the middle value, or the mean of the two middle values
 * when n is even. Rearranges v (quickselect with a three-way partition: O(n), no allocation); v holds no NaN. */
double median(double *v, size_t n);

#endif
