/* hadamard: randomized orthonormal Walsh-Hadamard rotation (see hadamard.h). D head dim, T rows. */
#include "methods/hadamard.h"
#include "base/rng.h"
#include "base/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int hadamard_ok(size_t D) { return D >= 1 && (D & (D - 1)) == 0; }

int hadamard_signs(double *s, size_t D, const char *seed)
{
    const char *digits = seed ? seed : "0";
    size_t len = strlen(digits);
    for (size_t i = 0; i < len; i++)
        if (digits[i] < '0' || digits[i] > '9') return kvc_fail("rotate: the seed must be a decimal integer (got \"%s\")", digits);
    if (len == 0) return kvc_fail("rotate: the seed must be a decimal integer (got \"\")");
    /* the seed's 32-bit words, least significant first (numpy's _int_to_uint32_array), then the stream's word */
    uint32_t *w = xcalloc(len / 9 + 3, sizeof *w);
    size_t n = rng_decimal_words(w, digits);
    w[n++] = HADAMARD_SEED_WORD;
    rng r;
    rng_seed_words(&r, w, n);
    free(w);
    for (size_t i = 0; i < D; i++) s[i] = rng_next_double(&r) < 0.5 ? -1.0 : 1.0;
    return 0;
}

/* x (D,) = x H, the butterfly of hadamard.h */
static void wht(double *x, size_t D)
{
    for (size_t h = 1; h < D; h *= 2)
        for (size_t i = 0; i < D; i += 2 * h)
            for (size_t j = i; j < i + h; j++) {
                double a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

void hadamard_rotate(double *x, size_t T, size_t D, const double *s)
{
    double r = sqrt((double)D);
    for (size_t t = 0; t < T; t++) {
        double *row = x + t * D;
        for (size_t j = 0; j < D; j++) row[j] = row[j] * s[j];
        wht(row, D);
        for (size_t j = 0; j < D; j++) row[j] = row[j] / r;
    }
}

void hadamard_unrotate(double *x, size_t T, size_t D, const double *s)
{
    double r = sqrt((double)D);
    for (size_t t = 0; t < T; t++) {
        double *row = x + t * D;
        wht(row, D);
        for (size_t j = 0; j < D; j++) row[j] = row[j] / r * s[j];
    }
}
