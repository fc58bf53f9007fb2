/* lowrank: keep the top singular triplets of K and/or V (truncated SVD, LAPACK dgesdd).
 *
 * X (T, D) = U S Vt; X' = (U[:, :r] * S[:r]) @ Vt[:r]. Stored: the coefficients U S (T, r) and the basis
 * Vt (r, D), both FP16: 2 * (T*r + r*D) bytes per covered tensor; tensors it does not cover stay FP16.
 * The rank is `rank`, or with `energy` the smallest r whose leading squared singular values reach that fraction
 * of their total: c = cumsum(S^2) (in order, from 0.0), r = the first r with c[r-1] >= energy * c[R-1].
 * `joint`: one basis for the KV heads of a layer, from the SVD of their rows stacked head after head
 * (H*T, D); each head stores its own coefficients (T, r), the layer the basis once (2*r*D bytes per tensor,
 * split over the heads with method_split_bytes). The rank then comes from the stacked spectrum.
 * Two routes to the factors, by size. Under LOWRANK_QR_MIN numbers (8 MiB) the call is numpy's (la_svd, dgesdd:
 * U, S, Vt; coefficients U[:, :r] * S[:r]), so the digits are numpy's bit for bit. A matrix of at least that many
 * numbers and twice as many rows as columns takes the QR route instead: S and Vt from la_svd_right (a blocked QR,
 * then the SVD of the small factor R; no U; numpy's signs), the coefficients X @ Vt[:r].T; the same numbers to about
 * 1e-13, about 10x faster at 65536 x 128, where dgesdd's column-by-column QR streams the whole matrix from memory
 * once per column. On this route the decomposition of a data tensor is computed once per run and shared through
 * MethodInput.svd (svdcache.h) by every experiment on it: ranks 32, 16 and 8 of one tensor cost one decomposition.
 * The factored form (coefficients, basis) is also returned in Compressed.Kcoef/Kbasis/Vcoef/Vbasis, which
 * pipelines read (e.g. to quantize the coefficients). The stored form (Compressed.stored) is the rank-r FP16
 * tensor of src/store/store.h (coefficients and basis; a decode step scores through them: q' = B q once, then
 * c_t . q'); with joint each head's tensor holds a copy of the layer's basis.
 */
#include "methods/methods.h"
#include "base/pool.h"
#include "methods/svdcache.h"
#include "base/linalg.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static const ParamDesc params[] = {
    {.name = "rank", .kind = PARAM_INT, .def = 0, .lo = 1, .hi = 65536,
     .help = "singular triplets kept, 1..min(tokens, head_dim); required unless energy is given"},
    {.name = "apply_to", .kind = PARAM_ENUM, .def = APPLY_K, .choices = apply_to_choices, .help = "which tensors are stored low-rank"},
    {.name = "energy", .kind = PARAM_NUM, .def = 0, .num_def = 0, .num_lo = 0, .num_hi = 1, .id_when_set = 1,
     .help = "smallest rank keeping this fraction of the squared singular values; 0: use rank"},
    {.name = "joint", .kind = PARAM_BOOL, .def = 0, .id_when_set = 1,
     .help = "one basis shared by the KV heads of a layer (SVD of their stacked rows)"},
};

static int check(const Experiment *ex, const Dims *d)
{
    long r = exp_param(ex, "rank");
    double e = exp_param_num(ex, "energy");
    int joint = exp_param(ex, "joint") != 0;
    size_t rows = joint ? d->T * (d->kv_heads ? d->kv_heads : 1) : d->T;
    size_t rmax = rows < d->D ? rows : d->D;
    if (r == 0 && e == 0)
        return kvc_fail("%s: missing required parameter of lowrank: rank (1..min(tokens, head_dim) = %zu) or energy "
                        "(a fraction in (0, 1]) (got nothing)", exp_path(ex, "rank"), rmax);
    if (r > 0 && e > 0)
        return kvc_fail("%s: give rank or energy, not both (got rank %ld and energy %g)", exp_param_path(ex, "energy"),
                        r, e);
    if (r > 0 && (size_t)r > rmax)
        return kvc_fail("%s: rank must be in 1..min(%s, head_dim) = %zu (got %ld)", exp_param_path(ex, "rank"),
                        joint ? "kv_heads x tokens" : "tokens", rmax, r);
    return apply_to_check(ex, d);
}

/* The rank for singular values S[0..R): `rank`, or the energy rule (at most R). */
static size_t pick_rank(const Experiment *ex, const double *S, size_t R)
{
    long r = exp_param(ex, "rank");
    if (r > 0) return (size_t)r < R ? (size_t)r : R;
    double *c = xmalloc(R * sizeof *c), acc = 0.0;
    for (size_t i = 0; i < R; i++) c[i] = acc = acc + S[i] * S[i];
    double target = exp_param_num(ex, "energy") * c[R - 1];
    size_t k = 0;
    while (k < R - 1 && !(c[k] >= target)) k++;
    free(c);
    return k + 1;
}

/* Matrices of at least this many numbers and twice as many rows as columns take the QR route (the top of this file;
 * dgesdd itself starts with a QR from 11/6 rows per column on, so the singular vectors' signs can follow it). */
#define LOWRANK_QR_MIN ((size_t)1 << 20)

/* Rows [a, b) of one tensor's projection (project). */
typedef struct ProjPart {
    double *out, *coef;
    const double *basis, *x;
    size_t r, D, a, b;
} ProjPart;

static void proj_part(void *arg, size_t p, int tid)
{
    (void)tid;
    const ProjPart *q = (const ProjPart *)arg + p;
    size_t m = q->b - q->a;
    la_matmul_bt(q->coef + q->a * q->r, q->x + q->a * q->D, q->basis, m, q->D, q->r);
    la_matmul(q->out + q->a * q->D, q->coef + q->a * q->r, q->basis, m, q->r, q->D);
}

/* Per tensor its coefficients coef[k] = x[k] @ basis.T (rows[k], r) and reconstruction out[k] = coef[k] @ basis. A
 * tensor of at least 2 LA_QR_ROWS rows is done in two halves (the first a whole number of LA_QR_ROWS rows: fixed
 * by the size), at once on pool's threads when there is one. */
static void project(double **out, double **coef, const double *basis, size_t r, const double *const *x,
                    const size_t *rows, size_t n, size_t D, Pool *pool)
{
    for (size_t k = 0; k < n; k++) {
        coef[k] = xmalloc(rows[k] * r * sizeof *coef[k]);
        out[k] = xmalloc(rows[k] * D * sizeof *out[k]);
        size_t half = rows[k] >= 2 * LA_QR_ROWS ? rows[k] / 2 / LA_QR_ROWS * LA_QR_ROWS : rows[k];
        ProjPart parts[2] = {{out[k], coef[k], basis, x[k], r, D, 0, half},
                             {out[k], coef[k], basis, x[k], r, D, half, rows[k]}};
        size_t np = half < rows[k] ? 2 : 1;
        if (pool && np == 2) pool_run(pool, proj_part, parts, 2);
        else
            for (size_t p = 0; p < np; p++) proj_part(parts, p, 0);
    }
}

/* Truncated SVD of the rows of n tensors x[0..n), rows[k] rows each, stacked (sum of rows, D): per tensor its
 * coefficients coef[k] (rows[k], r) and reconstruction out[k] (rows[k], D); the basis (r, D) in *basis. cache: the
 * run's decompositions of the data tensors (QR route), or NULL. */
static int factor(double **out, double **coef, double **basis, size_t *rank, const double *const *x,
                  const size_t *rows, size_t n, size_t D, const Experiment *ex, SvdCache *cache, struct Pool *pool)
{
    size_t M = 0;
    for (size_t k = 0; k < n; k++) M += rows[k];
    size_t R = M < D ? M : D;
    if (M >= 2 * D && M * D >= LOWRANK_QR_MIN) {   /* the QR route: S and Vt only, shared by the run */
        const double *S, *Vt;
        int owned;
        if (svdcache_get(cache, x, rows, n, D, &S, &Vt, &owned, pool)) return -1;
        size_t r = pick_rank(ex, S, R);
        *rank = r;
        *basis = xmalloc(r * D * sizeof **basis);
        memcpy(*basis, Vt, r * D * sizeof **basis);   /* Vt[:r] is its first r rows */
        project(out, coef, *basis, r, x, rows, n, D, pool);
        if (owned) {
            free((double *)S);
            free((double *)Vt);
        }
        return 0;
    }
    double *A = xmalloc(M * D * sizeof *A);
    for (size_t k = 0, o = 0; k < n; o += rows[k] * D, k++) memcpy(A + o, x[k], rows[k] * D * sizeof *A);
    double *U = xmalloc(M * R * sizeof *U), *S = xmalloc(R * sizeof *S), *Vt = xmalloc(R * D * sizeof *Vt);
    int rc = la_svd(U, S, Vt, A, M, D);
    free(A);
    if (rc == 0) {
        size_t r = pick_rank(ex, S, R);
        *rank = r;
        *basis = xmalloc(r * D * sizeof **basis);
        memcpy(*basis, Vt, r * D * sizeof **basis);   /* Vt[:r] is its first r rows */
        for (size_t k = 0, o = 0; k < n; o += rows[k], k++) {
            coef[k] = xmalloc(rows[k] * r * sizeof *coef[k]);
            for (size_t t = 0; t < rows[k]; t++)
                for (size_t j = 0; j < r; j++) coef[k][t * r + j] = U[(o + t) * R + j] * S[j];
            out[k] = xmalloc(rows[k] * D * sizeof *out[k]);
            la_matmul(out[k], coef[k], *basis, rows[k], r, D);
        }
    }
    free(U); free(S); free(Vt);
    return rc;
}

/* Low rank of tensor v (0: K, 1: V) of heads in[0..n), one basis per head (joint 0) or one for all (joint 1). */
static int lowrank_tensors(Compressed *out, const Experiment *ex, const MethodInput *in, size_t n, int v, int joint)
{
    size_t groups = joint ? 1 : n, per = joint ? n : 1, D = in[0].D;
    for (size_t g = 0; g < groups; g++) {
        const double **x = xmalloc(per * sizeof *x);
        size_t *rows = xmalloc(per * sizeof *rows), r = 0, M = 0;
        double **rec = xcalloc(per, sizeof *rec), **coef = xcalloc(per, sizeof *coef), *basis = NULL;
        for (size_t k = 0; k < per; k++) {
            x[k] = v ? in[g * per + k].V : in[g * per + k].K;
            rows[k] = in[g * per + k].T;
            M += rows[k];
        }
        int rc = factor(rec, coef, &basis, &r, x, rows, per, D, ex, in[g * per].svd, in[g * per].pool);
        for (size_t k = 0; rc == 0 && k < per; k++) {
            Compressed *c = &out[g * per + k];
            uint64_t b = 2 * (uint64_t)rows[k] * r + method_split_bytes(2 * (uint64_t)r * D, per, k);
            c->bytes += b;
            if (v) {
                c->V = rec[k];
                c->Vcoef = coef[k];
                c->v_rank = r;
                c->Vbasis = xmalloc(r * D * sizeof *basis);
                memcpy(c->Vbasis, basis, r * D * sizeof *basis);
            } else {
                c->K = rec[k];
                c->Kcoef = coef[k];
                c->k_rank = r;
                c->Kbasis = xmalloc(r * D * sizeof *basis);
                memcpy(c->Kbasis, basis, r * D * sizeof *basis);
            }
            c->basis_shared = joint;
            /* the stored form: FP16 coefficients of rank r with the FP16 basis (a joint basis: a copy per head) */
            StoreTensor *st = v ? &c->stored.V : &c->stored.K;
            StoreFormat f;
            memset(&f, 0, sizeof f);
            f.type = STORE_F16;
            f.rank = r;
            store_alloc(st, f, rows[k], D);
            store_quantize_f64(st, coef[k]);
            store_set_basis_f64(st, basis);
        }
        (void)M;
        free(x); free(rows); free(rec); free(coef); free(basis);
        if (rc) return -1;
    }
    return 0;
}

static int apply_layer(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H)
{
    long to = exp_param(ex, "apply_to");
    int joint = exp_param(ex, "joint") != 0;
    for (size_t h = 1; joint && h < H; h++)
        if (in[h].D != in[0].D)
            return kvc_fail("%s: a joint basis needs rows of one width in every head (got %zu and %zu)",
                            exp_param_path(ex, "joint"), in[0].D, in[h].D);
    if (to == APPLY_K || to == APPLY_KV) {
        if (lowrank_tensors(out, ex, in, H, 0, joint)) return -1;
    } else {
        for (size_t h = 0; h < H; h++) out[h].bytes += 2 * (uint64_t)in[h].T * in[h].D;
    }
    if (in[0].V) {
        if (to == APPLY_V || to == APPLY_KV) {
            if (lowrank_tensors(out, ex, in, H, 1, joint)) return -1;
        } else {
            for (size_t h = 0; h < H; h++) out[h].bytes += 2 * (uint64_t)in[h].T * in[h].D;
        }
    }
    return 0;
}

/* a joint basis is the layer's; per-head bases see one head each */
static int layer_wide(const Experiment *ex) { return exp_param(ex, "joint") != 0; }

const MethodDesc method_lowrank = {
    .name = "lowrank",
    .factor = "per-token dimension",
    .summary = "truncated SVD: store FP16 coefficients (T x rank) and basis (rank x D); rank given or by energy, "
               "per head or one basis per layer (joint)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = method_apply_one_head,
    .apply_layer = apply_layer,
    .layer_wide = layer_wide,
};
