/* synth: the generators of config format v1, in the documented draw order (see synth.h). */
#include "synth.h"
#include "linalg.h"
#include "rng.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static double *normal(rng *r, size_t n)
{
    double *x = xmalloc(n * sizeof *x);
    rng_normal_fill(r, x, n);
    return x;
}

int synth_data(Data *d, const Config *cfg)
{
    memset(d, 0, sizeof *d);
    size_t T = cfg->dims.T, D = cfg->dims.D, n = T * D;
    rng r;
    if (rng_seed_decimal(&r, cfg->seed)) return kvc_fail("seed: not a decimal integer (got \"%s\")", cfg->seed);
    d->T = T;
    d->D = D;

    if (cfg->keys_gen == KEYS_NORMAL) {
        d->K = normal(&r, n);
    } else {
        size_t R = cfg->keys_rank;
        double *A = normal(&r, T * R), *B = normal(&r, R * D);
        d->K = xmalloc(n * sizeof *d->K);
        la_matmul(d->K, A, B, T, R, D);
        for (size_t i = 0; i < n; i++) d->K[i] = d->K[i] * cfg->keys_scale;
        free(A);
        free(B);
        if (cfg->keys_noise > 0) {
            double *E = normal(&r, n);
            for (size_t i = 0; i < n; i++) d->K[i] = d->K[i] + cfg->keys_noise * E[i];
            free(E);
        }
    }
    for (size_t o = 0; o < cfg->n_outliers; o++)
        for (size_t t = 0; t < T; t++) d->K[t * D + cfg->outliers[o].channel] *= cfg->outliers[o].scale;

    if (cfg->dims.has_values) d->V = normal(&r, n);

    if (cfg->dims.has_query) {
        d->q = xmalloc(D * sizeof *d->q);
        const double *k = d->K + cfg->q_token * D;
        for (size_t j = 0; j < D; j++) d->q[j] = k[j] * cfg->q_weight;
        if (cfg->q_noise > 0) {
            double *z = normal(&r, D);
            for (size_t j = 0; j < D; j++) d->q[j] = d->q[j] + cfg->q_noise * z[j];
            free(z);
        }
    }
    return 0;
}

void data_free(Data *d)
{
    if (!d) return;
    free(d->K);
    free(d->V);
    free(d->q);
    memset(d, 0, sizeof *d);
}
