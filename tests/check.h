/* tests/check.h: the PASS/FAIL protocol of the C unit tests (docs/HACKING.md, tests/run.sh), in one place.
 * check() prints "PASS <name>" when ok, else "FAIL <name>: <why>" with a printf-style why, and counts both;
 * a test's main ends with `return check_failures ? 1 : 0;`. dbits() gives a double's bit pattern, for
 * bit-exact comparisons. Header-only (static inline), so each tests/NAME.c includes it and the Makefile's
 * one-file-per-test rule stays as it is. Not a framework: no registration, no fixtures, no output but these
 * lines; a test that needs more (a helper mode, a temporary directory) keeps it in its own file.
 */
#ifndef KVC_TESTS_CHECK_H
#define KVC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int check_failures, check_passes;

static inline void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static inline void check(int ok, const char *name, const char *fmt, ...)
{
    if (ok) {
        printf("PASS %s\n", name);
        check_passes++;
        return;
    }
    check_failures++;
    printf("FAIL %s: ", name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static inline uint64_t dbits(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

#endif
