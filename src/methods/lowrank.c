/* lowrank: keep the top `rank` singular triplets of K and/or V (truncated SVD, LAPACK dgesdd).
 *
 * X (T, D) = U S Vt; X' = (U[:, :r] * S[:r]) @ Vt[:r]. Stored: the coefficients U S (T, r) and the basis
 * Vt (r, D), both FP16: 2 * (T*r + r*D) bytes per covered tensor; tensors it does not cover stay FP16.
 */
#include "methods/methods.h"
#include "linalg.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static const ParamDesc params[] = {
    {.name = "rank", .kind = PARAM_INT, .def = PARAM_REQUIRED, .lo = 1, .hi = 65536, .help = "singular triplets kept, 1..min(tokens, head_dim) (required)"},
    {.name = "apply_to", .kind = PARAM_ENUM, .def = APPLY_K, .choices = apply_to_choices, .help = "which tensors are stored low-rank"},
};

static int check(const Experiment *ex, const Dims *d)
{
    long r = exp_param(ex, "rank");
    size_t rmax = d->T < d->D ? d->T : d->D;
    if (r < 1 || (size_t)r > rmax)
        return kvc_fail("%s: rank must be in 1..min(tokens, head_dim) = %zu (got %ld)",
                        exp_param_path(ex, "rank"), rmax, r);
    return apply_to_check(ex, d);
}

/* out (T, D) = rank-r reconstruction of x (T, D). */
static int lowrank_tensor(double *out, const double *x, size_t T, size_t D, size_t r)
{
    size_t R = T < D ? T : D;
    double *U = xmalloc(T * R * sizeof *U), *S = xmalloc(R * sizeof *S), *Vt = xmalloc(R * D * sizeof *Vt);
    double *US = xmalloc(T * r * sizeof *US);
    int rc = la_svd(U, S, Vt, x, T, D);
    if (rc == 0) {
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < r; j++) US[t * r + j] = U[t * R + j] * S[j];
        la_matmul(out, US, Vt, T, r, D);   /* Vt[:r] is its first r rows, contiguous */
    }
    free(U); free(S); free(Vt); free(US);
    return rc;
}

static int apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t r = (size_t)exp_param(ex, "rank");
    long to = exp_param(ex, "apply_to");
    size_t n = in->T * in->D;
    uint64_t fp16 = 2 * (uint64_t)n, stored = 2 * ((uint64_t)in->T * r + (uint64_t)r * in->D);

    memset(out, 0, sizeof *out);
    if (to == APPLY_K || to == APPLY_KV) {
        out->K = xmalloc(n * sizeof(double));
        if (lowrank_tensor(out->K, in->K, in->T, in->D, r)) return -1;
        out->bytes += stored;
    } else {
        out->bytes += fp16;
    }
    if (in->V) {
        if (to == APPLY_V || to == APPLY_KV) {
            out->V = xmalloc(n * sizeof(double));
            if (lowrank_tensor(out->V, in->V, in->T, in->D, r)) return -1;
            out->bytes += stored;
        } else {
            out->bytes += fp16;
        }
    }
    return 0;
}

const MethodDesc method_lowrank = {
    .name = "lowrank",
    .factor = "per-token dimension",
    .summary = "truncated SVD: store FP16 coefficients (T x rank) and basis (rank x D)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = apply,
};
