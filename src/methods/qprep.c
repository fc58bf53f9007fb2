/* qprep: rotation and dense-and-sparse outliers around a quantizer's stored form (see qprep.h). */
#include "methods/qprep.h"
#include "methods/hadamard.h"
#include "store/store.h"
#include "base/half.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const qprep_rotate_choices[] = {"none", "hadamard", NULL};

static int by_index(const void *a, const void *b)
{
    size_t x = ((const Ranked *)a)->i, y = ((const Ranked *)b)->i;
    return (x > y) - (x < y);
}

int qprep_init(QPrep *q, const double *x, size_t T, size_t D, size_t rows, int rotate, double p, const char *seed)
{
    memset(q, 0, sizeof *q);
    q->T = T;
    q->D = D;
    size_t n = rows * D, k = p > 0 ? (size_t)floor(p * (double)n) : 0;
    q->x = x;
    if (rotate != ROTATE_HADAMARD && k == 0) return 0;   /* read in place */
    q->own = xmalloc(T * D * sizeof *q->own);
    memcpy(q->own, x, T * D * sizeof *q->own);
    q->x = q->own;
    if (rotate == ROTATE_HADAMARD) {
        q->signs = xmalloc(D * sizeof *q->signs);
        if (hadamard_signs(q->signs, D, seed)) {
            qprep_free(q);
            return -1;
        }
        hadamard_rotate(q->own, T, D, q->signs);
    }
    if (k == 0) return 0;
    Ranked *m = xmalloc(n * sizeof *m);   /* the outliers: larger |x| first, then the lower index */
    for (size_t i = 0; i < n; i++) m[i] = (Ranked){fabs(q->x[i]), i};
    select_top(m, n, k);
    qsort(m, k, sizeof *m, by_index);
    q->n_out = k;
    q->sparse = xmalloc(6 * k);
    for (size_t r = 0; r < k; r++) {
        uint32_t idx = (uint32_t)m[r].i;
        uint16_t h = half_from_double(q->x[m[r].i]);
        for (int b = 0; b < 4; b++) q->sparse[6 * r + (size_t)b] = (uint8_t)(idx >> (8 * b));
        q->sparse[6 * r + 4] = (uint8_t)h;
        q->sparse[6 * r + 5] = (uint8_t)(h >> 8);
        q->own[m[r].i] = 0.0;
    }
    free(m);
    return 0;
}

void qprep_finish(double *y, const QPrep *q)
{
    for (size_t r = 0; r < q->n_out; r++) {
        const uint8_t *rec = q->sparse + 6 * r;
        uint32_t idx = (uint32_t)rec[0] | (uint32_t)rec[1] << 8 | (uint32_t)rec[2] << 16 | (uint32_t)rec[3] << 24;
        y[idx] = half_to_float((uint16_t)(rec[4] | rec[5] << 8));
    }
    if (q->signs) hadamard_unrotate(y, q->T, q->D, q->signs);
}

const char *const qprep_scale_choices[] = {"fp16", "fp16_exact", "fp32", NULL};

void qprep_intn(StoreTensor *st, double *out, const double *x, size_t T, size_t D, StoreFormat f, int unrounded)
{
    store_alloc(st, f, T, D);
    if (unrounded) {
        double *exact = xmalloc(2 * st->n_groups * sizeof *exact);
        store_quantize_intn_unrounded_f64(st, x, exact);
        store_dequantize_intn_unrounded_f64(out, st, exact);
        free(exact);
    } else {
        store_quantize_f64(st, x);
        store_dequantize_f64(out, st);
    }
    (void)store_intn_to_int(st);
}

uint64_t qprep_bytes(const QPrep *q) { return 6u * (uint64_t)q->n_out; }

void qprep_free(QPrep *q)
{
    if (!q) return;
    free(q->own);
    free(q->signs);
    free(q->sparse);
    memset(q, 0, sizeof *q);
}

const char *qprep_no_decode(const Experiment *ex)
{
    return exp_param_num(ex, "outliers") > 0 ? "its outlier records (dense-and-sparse) have no decode kernel" : NULL;
}

int qprep_check(const Experiment *ex, const Dims *d)
{
    int i = method_param_index(ex->method, "rotate");
    if (i >= 0 && ex->p[i] == ROTATE_HADAMARD && !hadamard_ok(d->D))
        return kvc_fail("%s: the Hadamard rotation needs a head dim that is a power of two (got head_dim %zu)",
                        exp_param_path(ex, "rotate"), d->D);
    return 0;
}
