/* normacc: the norm of a long vector fed in pieces, equal bit for bit to la_norm (base/linalg.h) of the whole
 * vector, so that an aggregate error over every (layer, head) needs only the head in flight.
 *
 * la_norm is sqrt(cblas_ddot(x, x)). OpenBLAS 0.3.x's double dot on its AVX2 kernels (Haswell, Zen; the ones
 * scripts/numeric-env.sh pins) runs the first n & -16 elements through 16 accumulators, accumulator k holding
 * fma(x[i], x[i], .) over the elements i = k mod 16, reduces them as ((a0..3 + a8..11) + ...) in its fixed
 * pattern, then adds the last n mod 16 products one at a time. normacc keeps those 16 accumulators and the
 * pending partial group between pieces, so the pieces' boundaries do not matter. la_norm's fallback for sums of
 * squares outside [2^-900, DBL_MAX] (a sequential sum of squares scaled by the power of two of the largest
 * magnitude) is kept too, with a running scale: rescaling by a power of two is exact, so it gives la_norm's value
 * except where the scaled squares reach the subnormal range, below any digit of the result. That sequential sum costs
 * a dependent add per element, so it is kept only while it may be needed: while every magnitude so far is below
 * 2^-449 (the sum of squares may end below 2^-900) or some is above 2^480 (it may overflow); in between the
 * kernel's sum is in range whatever comes later, short of a magnitude above 2^480. When one arrives after the
 * sequential sum was dropped, the sum restarts from the kernel's sum of the earlier elements, scaled: within a
 * few ulp of la_norm instead of bit for bit (approx is set). The 16 accumulators run on AVX2 + FMA when the CPU
 * has them (fma rounds once either way: the same bits).
 * On a CPU whose OpenBLAS picks another dot kernel (AVX-512 ones, without the numeric-env pin), normacc still
 * gives the Haswell kernel's sum: the last bits may differ from a whole-vector la_norm there.
 */
#ifndef KVC_NORMACC_H
#define KVC_NORMACC_H

#include <stddef.h>

typedef struct NormAcc {
    double acc[16];      /* the kernel's accumulators */
    double pend[16];     /* the elements of the group not yet complete */
    size_t npend;
    size_t n;            /* elements fed so far */
    int e;               /* fallback: the exponent of the largest magnitude so far (frexp), INT_MIN for none */
    double amax;         /* fallback: the largest magnitude so far */
    double s;            /* fallback: sum of (x / 2^e)^2 in order, at the running e */
    double scale;        /* 2^-e */
    double top;          /* the largest magnitude fed so far */
    int fb_live;         /* 1: the fallback's sum covers everything fed; 0: dropped (not needed so far) */
    int approx;          /* the fallback's sum was restarted from the kernel's sum (see above) */
} NormAcc;

void normacc_init(NormAcc *a);
/* Feeds x[0..n) (after everything fed before). */
void normacc_add(NormAcc *a, const double *x, size_t n);
/* Feeds c[i] - x[i], i < n, in one pass that also checks c: returns the index of the first c[i] that is not finite
 * (the accumulator is then of no further use), else n. store: c[i] becomes c[i] - x[i] (not when one is not
 * finite: c is left as it was). */
size_t normacc_add_diff(NormAcc *a, double *c, const double *x, size_t n, int store);
/* Feeds n zeros (a head that did not rewrite its tensor: its difference is zero). */
void normacc_zeros(NormAcc *a, size_t n);
/* la_norm of everything fed, in order. */
double normacc_norm(const NormAcc *a);

#endif
