/* evaluate: run a method, run the shared attention kernel over what it keeps, and measure. */
#include "evaluate.h"
#include "attention.h"
#include "linalg.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const column_names[NCOLS] = {
    "attn_error", "k_error", "v_error", "k_error_ordinary", "k_zeroed_ordinary", "bytes", "baseline_bytes", "ratio",
};

int column_is_integer(Column c) { return c == COL_BYTES || c == COL_BASELINE_BYTES; }

void eval_reference(Reference *ref, const Data *d)
{
    memset(ref, 0, sizeof *ref);
    if (!d->q) return;
    ref->out = xmalloc(d->D * sizeof *ref->out);
    ref->w = xmalloc(d->T * sizeof *ref->w);
    attn_forward(ref->out, ref->w, d->q, d->K, d->V, d->T, d->D);
}

void reference_free(Reference *ref)
{
    if (!ref) return;
    free(ref->out);
    free(ref->w);
    memset(ref, 0, sizeof *ref);
}

/* ||a - b|| / ||b||; 0 when both are zero, +inf when only the reference is zero. */
static double rel_error(const double *a, const double *b, size_t n)
{
    double *diff = xmalloc(n * sizeof *diff);
    for (size_t i = 0; i < n; i++) diff[i] = a[i] - b[i];
    double num = la_norm(diff, n), den = la_norm(b, n);
    free(diff);
    if (den == 0) return num == 0 ? 0.0 : INFINITY;
    return num / den;
}

static void set(Row *row, Column c, double v)
{
    row->v[c] = v;
    row->has[c] = 1;
}

/* Copies rows `idx` of x (T, D) into a new (n, D) matrix. */
static double *gather_rows(const double *x, const size_t *idx, size_t n, size_t D)
{
    double *out = xmalloc(n * D * sizeof *out);
    for (size_t i = 0; i < n; i++) memcpy(out + i * D, x + idx[i] * D, D * sizeof *out);
    return out;
}

/* k_error_ordinary and k_zeroed_ordinary: over the channels not declared as outliers. */
static void ordinary_metrics(Row *row, const Config *cfg, const double *Kc, const double *K, size_t T, size_t D)
{
    unsigned char *is_out = xcalloc(D, 1);
    for (size_t o = 0; o < cfg->n_outliers; o++) is_out[cfg->outliers[o].channel] = 1;
    size_t nord = 0;
    for (size_t j = 0; j < D; j++) nord += !is_out[j];
    if (nord > 0) {
        double *a = xmalloc(T * nord * sizeof *a), *b = xmalloc(T * nord * sizeof *b);
        size_t k = 0, zeros = 0;
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < D; j++)
                if (!is_out[j]) {
                    a[k] = Kc[t * D + j];
                    b[k] = K[t * D + j];
                    zeros += a[k] == 0.0;
                    k++;
                }
        set(row, COL_K_ERROR_ORDINARY, rel_error(a, b, k));
        set(row, COL_K_ZEROED_ORDINARY, (double)zeros / (double)k);
        free(a);
        free(b);
    }
    free(is_out);
}

int eval_experiment(Row *row, const Experiment *ex, const Config *cfg, const Data *d, const Reference *ref)
{
    memset(row, 0, sizeof *row);
    row->ex = ex;
    size_t T = d->T, D = d->D;
    MethodInput in = {T, D, d->K, d->V, ref->w};
    Compressed c;
    if (ex->method->apply(&c, ex, &in)) {
        compressed_free(&c);
        return -1;
    }
    const double *Kc = c.K ? c.K : d->K;
    const double *Vc = c.V ? c.V : d->V;

    if (d->q) {
        double *out = xmalloc(D * sizeof *out);
        if (c.kept) {
            double *Kk = gather_rows(Kc, c.kept, c.n_kept, D), *Vk = gather_rows(Vc, c.kept, c.n_kept, D);
            double *w = xmalloc(c.n_kept * sizeof *w);
            attn_forward(out, w, d->q, Kk, Vk, c.n_kept, D);
            free(Kk); free(Vk); free(w);
        } else {
            double *w = xmalloc(T * sizeof *w);
            attn_forward(out, w, d->q, Kc, Vc, T, D);
            free(w);
        }
        set(row, COL_ATTN_ERROR, rel_error(out, ref->out, D));
        free(out);
    }
    if (c.K) {
        set(row, COL_K_ERROR, rel_error(c.K, d->K, T * D));
        if (cfg->n_outliers > 0) ordinary_metrics(row, cfg, c.K, d->K, T, D);
    }
    if (c.V) set(row, COL_V_ERROR, rel_error(c.V, d->V, T * D));

    uint64_t baseline = 2 * (uint64_t)T * D * (d->V ? 2 : 1);
    set(row, COL_BYTES, (double)c.bytes);
    set(row, COL_BASELINE_BYTES, (double)baseline);
    set(row, COL_RATIO, (double)baseline / (double)c.bytes);
    compressed_free(&c);
    return 0;
}
