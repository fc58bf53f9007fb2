/* normacc: la_norm of a vector fed in pieces (see normacc.h). */
#include "eval/normacc.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define NORMACC_TINY 0x1p-900   /* la_norm's LA_NORM_TINY */

void normacc_init(NormAcc *a)
{
    memset(a, 0, sizeof *a);
    a->e = INT_MIN;
}


/* The fallback's running sum of scaled squares (la_norm's loop with the final exponent, see normacc.h). */
static void fallback_add(NormAcc *a, const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double m = fabs(x[i]);
        if (m > a->amax) {
            a->amax = m;
            if (isinf(m)) continue;   /* the norm is inf: the sum no longer matters */
            int e;
            frexp(m, &e);
            if (a->e == INT_MIN || e > a->e) {
                if (a->e != INT_MIN) a->s = ldexp(a->s, 2 * (a->e - e));
                a->e = e;
                a->scale = ldexp(1.0, -e);
            }
        }
        if (a->e == INT_MIN || isinf(a->amax)) continue;   /* zeros so far add zero */
        /* x * 2^-e rounds once, as ldexp(x, -e) does, while 2^-e is a normal number */
        double y = a->e > -1000 && a->e < 1000 ? x[i] * a->scale : ldexp(x[i], -a->e);
        a->s = a->s + y * y;
    }
}

static void group(NormAcc *a, const double *x)
{
    for (int k = 0; k < 16; k++) a->acc[k] = fma(x[k], x[k], a->acc[k]);
}

void normacc_add(NormAcc *a, const double *x, size_t n)
{
    fallback_add(a, x, n);
    a->n += n;
    size_t i = 0;
    if (a->npend) {
        while (i < n && a->npend < 16) a->pend[a->npend++] = x[i++];
        if (a->npend < 16) return;
        group(a, a->pend);
        a->npend = 0;
    }
    for (; i + 16 <= n; i += 16) group(a, x + i);
    while (i < n) a->pend[a->npend++] = x[i++];
}

void normacc_zeros(NormAcc *a, size_t n)
{
    /* a zero adds +0 to a non-negative accumulator and to the fallback sum: only the group position moves */
    a->n += n;
    size_t fill = a->npend ? 16 - a->npend : 0;
    if (n < fill) {
        memset(a->pend + a->npend, 0, n * sizeof *a->pend);
        a->npend += n;
        return;
    }
    if (fill) {
        memset(a->pend + a->npend, 0, fill * sizeof *a->pend);
        group(a, a->pend);
        n -= fill;
    }
    a->npend = n % 16;
    memset(a->pend, 0, a->npend * sizeof *a->pend);
}

double normacc_norm(const NormAcc *a)
{
    if (a->n == 0) return 0.0;
    double dot = 0.0;
    if (a->n >= 16) {   /* the kernel's reduction: halves of each register, then registers pairwise, then lanes */
        double r[4][2];
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 2; l++) r[j][l] = a->acc[4 * j + l] + a->acc[4 * j + l + 2];
        double s0 = (r[0][0] + r[1][0]) + (r[2][0] + r[3][0]);
        double s1 = (r[0][1] + r[1][1]) + (r[2][1] + r[3][1]);
        dot = s0 + s1;
    }
    for (size_t i = 0; i < a->npend; i++) dot = dot + a->pend[i] * a->pend[i];
    if (dot >= NORMACC_TINY && dot <= DBL_MAX) return sqrt(dot);
    if (isnan(dot)) return dot;
    if (a->amax == 0.0 || isinf(a->amax)) return a->amax;
    return ldexp(sqrt(a->s), a->e);
}
