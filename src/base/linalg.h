/* linalg: the double-precision building blocks of the quality path, called the way numpy calls them.
 *
 * All matrices are row-major (C order) and contiguous. M, N, K name the dimensions of each product.
 * Products go through OpenBLAS (cblas_dgemm / cblas_dgemv) and the SVD through LAPACKE_dgesdd, because
 * numpy uses the same calls; norms are sqrt(cblas_ddot), as np.linalg.norm; sums of a vector follow numpy's
 * pairwise summation (np.sum / ndarray.sum). No function here allocates except la_svd and la_svd_right, which
 * own and free their scratch.
 */
#ifndef KVC_LINALG_H
#define KVC_LINALG_H

#include <stddef.h>

/* Pins OpenBLAS to one thread: results then do not depend on the machine's core count. */
void la_init(void);

/* C (M, N) = A (M, K) @ B (K, N) */
void la_matmul(double *C, const double *A, const double *B, size_t M, size_t K, size_t N);
/* C (M, N) = A (M, K) @ B (N, K).T, as numpy's A @ B.T (one cblas_dgemm with B transposed) */
void la_matmul_bt(double *C, const double *A, const double *B, size_t M, size_t K, size_t N);
/* y (M,) = A (M, N) @ x (N,) */
void la_matvec(double *y, const double *A, const double *x, size_t M, size_t N);
/* y (N,) = x (M,) @ A (M, N) */
void la_vecmat(double *y, const double *x, const double *A, size_t M, size_t N);
/* sqrt(x . x) with cblas_ddot, as np.linalg.norm of a contiguous array, bit for bit, whenever x . x lies in
 * [2^-900, DBL_MAX]. Outside that range (elements above ~1e154 overflow the squares to inf, elements all below
 * ~1e-135 lose digits to underflow), where numpy returns inf or an inaccurate value, the norm is computed on x
 * scaled by a power of two instead: finite and accurate for every finite x. NaN in, NaN out; inf in, inf out. */
double la_norm(const double *x, size_t n);
/* np.sum of x[0..n): numpy's pairwise sum over blocks of 8192 (its buffer size), blocks added in order */
double la_sum(const double *x, size_t n);

/* Thin SVD, as np.linalg.svd(A, full_matrices=False): A (M, N) = U (M, R) diag(S) Vt (R, N), R = min(M, N),
 * S descending. A is not modified. Returns 0, or -1 with kvc_fail() set when LAPACK reports failure. */
int la_svd(double *U, double *S, double *Vt, const double *A, size_t M, size_t N);

/* The singular values S (N,), descending, and right singular vectors Vt (N, N) of the tall matrix A (M, N), M >= N
 * >= 1, whose rows are those of the n blocks x[0..n) (rows[k] rows each, row-major) stacked in order; no U. Not
 * numpy's call: A's Householder QR is taken over blocks of LA_QR_ROWS rows (LAPACK dgeqrt on the first, then
 * dtpqrt folds each next block into the triangular factor R (N, N)), R's rows get the signs LAPACK's dgeqrf would
 * give them (recovered from the top block of Q), and R = U' S Vt by dgesdd, so A = (Q U') S Vt. That is what
 * dgesdd does itself for M >= 11/6 N after its own QR, so S and Vt are la_svd's up to rounding (about 1e-15
 * relative), the signs of the singular vectors included, except for singular values at rounding level, whose
 * vectors are rounding noise either way. The work is in cache-sized blocks, where la_svd's dgesdd runs an unblocked
 * QR over the whole matrix for N <= 128 (one pass over memory per column): about 10x faster at 65536 x 128. The
 * blocks are fixed, so the result depends on the stacked A alone, not on how it is split into x[k]. From
 * LA_QR_SPLIT_BLOCKS blocks on, the rows are folded in two halves (the first a whole number of blocks), each into
 * its own R, and dtpqrt combines the two: the halves run at once on pool's threads when pool is not NULL (it must
 * not be running anything), in turn otherwise; the result depends on M and N only, never on the pool. Returns 0,
 * or -1 with kvc_fail() set when LAPACK reports failure (a NaN in A, for one). */
#define LA_QR_ROWS 1024
#define LA_QR_SPLIT_BLOCKS 16
struct Pool;
int la_svd_right(double *S, double *Vt, const double *const *x, const size_t *rows, size_t n, size_t N,
                 struct Pool *pool);

#endif
