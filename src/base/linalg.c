/* linalg: thin wrappers over OpenBLAS and LAPACKE that reproduce numpy's choices of routine. */
#include "base/linalg.h"
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
