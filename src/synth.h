/* synth: synthesize K, V and q from a Config with the numpy-compatible generator.
 *
 * T tokens, D head dim, R generator rank. Draw order (this is what makes a config reproducible in numpy,
 * rng = np.random.default_rng(seed), each N(shape) = rng.normal(size=shape) filled in C order):
 *   keys normal:   K = N(T, D)
 *   keys lowrank:  A = N(T, R); B = N(R, D); K = (A @ B) * scale; if noise > 0: K = K + noise * N(T, D)
 *   outliers:      K[:, c] *= s for each {channel c, scale s}, in list order (no draws)
 *   values:        V = N(T, D)                       (only when data.values exists)
 *   query:         q = K[token] * weight (+ noise * N(D) when noise > 0)   (only when data.query exists)
 */
#ifndef KVC_SYNTH_H
#define KVC_SYNTH_H

#include "config.h"

typedef struct Data {
    size_t T, D;
    double *K;   /* (T, D) */
    double *V;   /* (T, D) or NULL */
    double *q;   /* (D,) or NULL */
} Data;

/* Returns 0, or -1 with kvc_fail set (a seed string that is not a decimal integer). */
int synth_data(Data *d, const Config *cfg);
void data_free(Data *d);

#endif
