/* linalg: thin wrappers over OpenBLAS and LAPACKE that reproduce numpy's choices of routine. */
#include "base/linalg.h"
#include "base/pool.h"
#include "base/util.h"

#include <cblas.h>
#include <lapacke.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

static int to_int(size_t n)
{
    /* Sizes reach here only after the config checks (tokens x head_dim bounded), so this holds. */
    return n > INT_MAX ? INT_MAX : (int)n;
}

void la_init(void) { openblas_set_num_threads(1); }

void la_matmul(double *C, const double *A, const double *B, size_t M, size_t K, size_t N)
{
    if (M == 0 || N == 0) return;
    if (K == 0) { memset(C, 0, M * N * sizeof *C); return; }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, to_int(M), to_int(N), to_int(K), 1.0,
                A, to_int(K), B, to_int(N), 0.0, C, to_int(N));
}

void la_matmul_bt(double *C, const double *A, const double *B, size_t M, size_t K, size_t N)
{
    if (M == 0 || N == 0) return;
    if (K == 0) { memset(C, 0, M * N * sizeof *C); return; }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, to_int(M), to_int(N), to_int(K), 1.0,
                A, to_int(K), B, to_int(K), 0.0, C, to_int(N));
}

void la_matvec(double *y, const double *A, const double *x, size_t M, size_t N)
{
    if (M == 0) return;
    if (N == 0) { memset(y, 0, M * sizeof *y); return; }
    cblas_dgemv(CblasRowMajor, CblasNoTrans, to_int(M), to_int(N), 1.0, A, to_int(N), x, 1, 0.0, y, 1);
}

void la_vecmat(double *y, const double *x, const double *A, size_t M, size_t N)
{
    if (N == 0) return;
    if (M == 0) { memset(y, 0, N * sizeof *y); return; }
    cblas_dgemv(CblasRowMajor, CblasTrans, to_int(M), to_int(N), 1.0, A, to_int(N), x, 1, 0.0, y, 1);
}

/* Below this sum of squares, squares under DBL_MIN may have lost digits (each at most 2^-1075 absolutely), so
 * the plain result is not trusted; 2^-900 leaves a margin of 2^122 over n x 2^-1075 for any n kvc can hold. */
#define LA_NORM_TINY 0x1p-900

double la_norm(const double *x, size_t n)
{
    if (n == 0) return 0.0;
    double ss = cblas_ddot(to_int(n), x, 1, x, 1);
    if (ss >= LA_NORM_TINY && ss <= DBL_MAX) return sqrt(ss);   /* numpy's np.linalg.norm, bit for bit */
    if (isnan(ss)) return ss;
    /* The squares overflowed (an element above ~1e154) or may have underflowed (all below ~1e-135): scale by
     * the power of two nearest the largest magnitude (exact), sum the scaled squares, scale back. */
    double amax = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > amax) amax = fabs(x[i]);
    if (amax == 0.0 || isinf(amax)) return amax;
    int e;
    frexp(amax, &e);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double y = ldexp(x[i], -e);
        s += y * y;
    }
    return ldexp(sqrt(s), e);
}

/* numpy's pairwise_sum: blocks of up to 128 summed with 8 accumulators, halves above that. */
static double pairwise_sum(const double *x, size_t n)
{
    if (n < 8) {
        double s = 0.0;
        for (size_t i = 0; i < n; i++) s += x[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = x[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += x[i + (size_t)j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) s += x[i];
        return s;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(x, n2) + pairwise_sum(x + n2, n - n2);
}

/* np.sum / ndarray.sum of a contiguous float64 vector: the reduction starts from 0.0 and numpy's iterator
 * hands the add loop blocks of the ufunc buffer size (8192 elements, np.getbufsize()), each summed pairwise
 * and added in order. So for n > 8192 the result is not one pairwise sum over all n (checked against numpy
 * 1.24.2 in tests/test_units.c). */
#define NUMPY_BUFSIZE 8192
double la_sum(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t lo = 0; lo < n; lo += NUMPY_BUFSIZE)
        s += pairwise_sum(x + lo, n - lo < NUMPY_BUFSIZE ? n - lo : NUMPY_BUFSIZE);
    return s;
}

int la_svd(double *U, double *S, double *Vt, const double *A, size_t M, size_t N)
{
    size_t R = M < N ? M : N;
    double *work = xmalloc(M * N * sizeof *work);
    memcpy(work, A, M * N * sizeof *work);
    lapack_int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', (lapack_int)M, (lapack_int)N, work, (lapack_int)N,
                                     S, U, (lapack_int)R, Vt, (lapack_int)N);
    free(work);
    if (info != 0)
        return kvc_fail("svd: LAPACKE_dgesdd failed on a %zu x %zu matrix (got info %d)", M, N, (int)info);
    return 0;
}

/* Column-major copy (ld = b) of b stacked rows of width N, starting at row t of block *k; advances (*k, t). */
static void gather_block(double *blk, size_t b, size_t N, const double *const *x, const size_t *rows, size_t *k,
                         size_t *t)
{
    for (size_t i = 0; i < b; i++) {
        while (*t == rows[*k]) { ++*k; *t = 0; }
        const double *row = x[*k] + *t * N;
        for (size_t j = 0; j < N; j++) blk[j * b + i] = row[j];
        ++*t;
    }
}

/* Makes R (N, N, column-major, upper) the triangular factor LAPACK's Householder QR (dgeqrf: H = I - tau v v^T with
 * dlarfg's beta = -sign(alpha) |x|) gives for A = Q R, A's first N rows A1 in x: that factor is D R for a diagonal D
 * of signs, and D follows from the top block Q1 = A1 R^-1 of the thin Q. The reflectors' Q_hh = Q D = I - V T V^T,
 * so Q1 - D = V1 (-T V1^T D): an LU factorization without pivoting whose pivots are -d_j tau_j, tau_j in [1, 2];
 * with w_j the (j, j) entry of the Schur complement of Q1 at step j, the pivot w_j - d_j has that size only for
 * d_j = -sign(w_j) (Ballard et al., "Reconstructing Householder vectors from tall-skinny QR", 2014). The signs of
 * dgesdd's singular vectors follow from those of R (dgesdd of a tall A reduces it with dgeqrf first), so they come
 * out as numpy's. A w_j at rounding level (A rank deficient there) leaves d_j to chance, as it leaves LAPACK's own
 * sign; such rows of R are at rounding level too. */
static void householder_signs(double *R, const double *const *x, const size_t *rows, size_t N)
{
    double *W = xmalloc(N * N * sizeof *W);   /* column-major Q1 = A1 R^-1, then its LU in place */
    size_t k = 0, t = 0;
    for (size_t i = 0; i < N; i++) {
        while (t == rows[k]) { k++; t = 0; }
        for (size_t j = 0; j < N; j++) W[j * N + i] = x[k][t * N + j];
        t++;
    }
    cblas_dtrsm(CblasColMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, to_int(N), to_int(N), 1.0, R,
                to_int(N), W, to_int(N));
    for (size_t j = 0; j < N; j++) {
        double d = W[j * N + j] >= 0 ? -1.0 : 1.0;
        W[j * N + j] -= d;
        for (size_t c = j; c < N; c++) R[c * N + j] *= d;   /* row j of R */
        double p = W[j * N + j];
        for (size_t i = j + 1; i < N; i++) W[j * N + i] /= p;
        for (size_t c = j + 1; c < N; c++) {
            double u = W[c * N + j];
            for (size_t i = j + 1; i < N; i++) W[c * N + i] -= W[j * N + i] * u;
        }
    }
    free(W);
}

/* One part of the blocked QR: rows [r0, r1) of the stacked matrix folded into the upper triangle R (N, N,
 * column-major, zero below). */
typedef struct QrPart {
    const double *const *x;
    const size_t *rows;
    size_t N, r0, r1;
    double *R;
    lapack_int info;
} QrPart;

static void qr_part(void *arg, size_t p, int tid)
{
    (void)tid;
    QrPart *q = (QrPart *)arg + p;
    size_t N = q->N, b = N > LA_QR_ROWS ? N : LA_QR_ROWS;   /* rows per block: the first one holds at least N */
    lapack_int nb = N < 32 ? (lapack_int)N : 32, Ni = (lapack_int)N, info = 0;
    double *blk = xmalloc(b * N * sizeof *blk);
    double *T = xmalloc((size_t)nb * N * sizeof *T), *work = xmalloc((size_t)nb * N * sizeof *work);
    size_t k = 0, t = q->r0;
    while (t >= q->rows[k]) t -= q->rows[k++];   /* the cursor at row r0 */
    for (size_t o = q->r0; o < q->r1 && info == 0; o += b) {
        size_t m = q->r1 - o < b ? q->r1 - o : b;
        gather_block(blk, m, N, q->x, q->rows, &k, &t);
        lapack_int mi = (lapack_int)m;
        if (o == q->r0) {   /* the first block's QR; R = its upper triangle */
            info = LAPACKE_dgeqrt_work(LAPACK_COL_MAJOR, mi, Ni, nb, blk, mi, T, nb, work);
            for (size_t j = 0; j < N; j++) memcpy(q->R + j * N, blk + j * m, (j + 1) * sizeof *q->R);
        } else {        /* QR of [R; block]: R updated in place */
            info = LAPACKE_dtpqrt_work(LAPACK_COL_MAJOR, mi, Ni, 0, nb, q->R, Ni, blk, mi, T, nb, work);
        }
    }
    free(blk); free(T); free(work);
    q->info = info;
}

int la_svd_right(double *S, double *Vt, const double *const *x, const size_t *rows, size_t n, size_t N,
                 struct Pool *pool)
{
    size_t M = 0;
    for (size_t k = 0; k < n; k++) M += rows[k];
    if (N == 0 || M < N) return kvc_fail("svd: la_svd_right needs a tall matrix, rows >= columns >= 1 (got %zu x %zu)",
                                         M, N);
    size_t b = N > LA_QR_ROWS ? N : LA_QR_ROWS;
    lapack_int nb = N < 32 ? (lapack_int)N : 32, Ni = (lapack_int)N, info = 0;
    /* two halves, each folded on its own, then the one R of both: fixed by M and N, whatever the pool */
    int two = M >= LA_QR_SPLIT_BLOCKS * b;
    size_t half = two ? M / 2 / b * b : M;
    double *R = xcalloc(N * N, sizeof *R), *R2 = two ? xcalloc(N * N, sizeof *R2) : NULL;
    QrPart parts[2] = {{x, rows, N, 0, half, R, 0}, {x, rows, N, half, M, R2, 0}};
    if (two && pool) pool_run(pool, qr_part, parts, 2);
    else
        for (size_t p = 0; p < (two ? 2u : 1u); p++) qr_part(parts, p, 0);
    info = parts[0].info ? parts[0].info : two ? parts[1].info : 0;
    if (two && info == 0) {   /* QR of [R; R2], R2 upper triangular (dtpqrt's l = N) */
        double *T = xmalloc((size_t)nb * N * sizeof *T), *work = xmalloc((size_t)nb * N * sizeof *work);
        info = LAPACKE_dtpqrt_work(LAPACK_COL_MAJOR, Ni, Ni, Ni, nb, R, Ni, R2, Ni, T, nb, work);
        free(T); free(work);
    }
    free(R2);
    if (info == 0) householder_signs(R, x, rows, N);
    if (info != 0) {
        free(R);
        return kvc_fail("svd: the blocked QR (LAPACK dgeqrt/dtpqrt) failed on a %zu x %zu matrix (got info %d)", M, N,
                        (int)info);
    }
    double *U = xmalloc(N * N * sizeof *U), *Vc = xmalloc(N * N * sizeof *Vc);
    info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', Ni, Ni, R, Ni, S, U, Ni, Vc, Ni);
    for (size_t i = 0; info == 0 && i < N; i++)   /* column-major Vt to row-major */
        for (size_t j = 0; j < N; j++) Vt[i * N + j] = Vc[j * N + i];
    free(R); free(U); free(Vc);
    if (info != 0)
        return kvc_fail("svd: LAPACKE_dgesdd failed on the %zu x %zu factor R of a %zu x %zu matrix (got info %d)", N, N,
                        M, N, (int)info);
    return 0;
}
