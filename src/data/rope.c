/* rope: the rotation table and the in-place rotation (see rope.h). */
#include "data/rope.h"
#include "base/util.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void rope_init(Rope *r, double base, size_t dims, int interleaved, size_t T, size_t D)
{
    assert(dims % 2 == 0 && dims <= D);
    memset(r, 0, sizeof *r);
    r->D = D;
    r->dims = dims;
    r->T = T;
    r->interleaved = interleaved;
    size_t h = dims / 2;
    r->cos = xmalloc(T * h * sizeof *r->cos);
    r->sin = xmalloc(T * h * sizeof *r->sin);
    double *inv = xmalloc(h * sizeof *inv);
    for (size_t i = 0; i < h; i++) inv[i] = 1.0 / pow(base, (double)(2 * i) / (double)dims);
    for (size_t p = 0; p < T; p++)
        for (size_t i = 0; i < h; i++) {
            double a = (double)p * inv[i];
            r->cos[p * h + i] = cos(a);
            r->sin[p * h + i] = sin(a);
        }
    free(inv);
}

void rope_free(Rope *r)
{
    if (!r) return;
    free(r->cos);
    free(r->sin);
    memset(r, 0, sizeof *r);
}

void rope_apply(const Rope *r, double *x, const size_t *pos, size_t n, int inverse)
{
    if (r->dims == 0) return;
    size_t h = r->dims / 2, D = r->D;
    size_t step = r->interleaved ? 2 : 1, off = r->interleaved ? 1 : h;
    for (size_t k = 0; k < n; k++) {
        size_t p = pos ? pos[k] : k;
        assert(p < r->T);
        const double *c = r->cos + p * h, *s = r->sin + p * h;
        double *row = x + k * D;
        for (size_t i = 0; i < h; i++) {
            double *a = row + i * step, *b = a + off;
            double x1 = *a, x2 = *b;
            if (inverse) {
                *a = x1 * c[i] + x2 * s[i];
                *b = x2 * c[i] - x1 * s[i];
            } else {
                *a = x1 * c[i] - x2 * s[i];
                *b = x2 * c[i] + x1 * s[i];
            }
        }
    }
}
