/* normacc: la_norm of a vector fed in pieces (see normacc.h). */
#include "eval/normacc.h"

#include "decode/decode.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NORMACC_X86 1
#endif

#define NORMACC_TINY 0x1p-900   /* la_norm's LA_NORM_TINY */
/* The fallback cannot be needed while every magnitude lies in [LO, HI]: a square of at least 2^-898 keeps the
 * rounded sum of squares >= TINY (rounding to nearest is monotone, the summands are >= 0), and squares of at most
 * 2^960 summed over fewer than 2^40 elements stay far below DBL_MAX. */
#define NORMACC_LO 0x1p-449
#define NORMACC_HI 0x1p+480

void normacc_init(NormAcc *a)
{
    memset(a, 0, sizeof *a);
    a->e = INT_MIN;
    a->fb_live = 1;
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

/* ng groups of 16 from x into the 16 accumulators (accumulator k: the elements i = k mod 16); returns the largest
 * magnitude read (a NaN may be skipped: the sum is NaN then, and the fallback is never asked). */
static double groups_ref(double *acc, const double *x, size_t ng)
{
    double m = 0.0;
    for (size_t g = 0; g < ng; g++, x += 16)
        for (int k = 0; k < 16; k++) {
            acc[k] = fma(x[k], x[k], acc[k]);
            double v = fabs(x[k]);
            m = v > m ? v : m;
        }
    return m;
}

#ifdef NORMACC_X86
/* The same with AVX2 + FMA: register j holds accumulators 4j..4j+3, as OpenBLAS's kernel does. fma rounds once
 * either way, so both give the same bits. */
__attribute__((target("avx2,fma"))) static double groups_avx2(double *acc, const double *x, size_t ng)
{
    __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4), a2 = _mm256_loadu_pd(acc + 8),
            a3 = _mm256_loadu_pd(acc + 12);
    const __m256d sign = _mm256_set1_pd(-0.0);
    __m256d m0 = _mm256_setzero_pd(), m1 = _mm256_setzero_pd();
    for (size_t g = 0; g < ng; g++, x += 16) {
        __m256d x0 = _mm256_loadu_pd(x), x1 = _mm256_loadu_pd(x + 4), x2 = _mm256_loadu_pd(x + 8),
                x3 = _mm256_loadu_pd(x + 12);
        a0 = _mm256_fmadd_pd(x0, x0, a0);
        a1 = _mm256_fmadd_pd(x1, x1, a1);
        a2 = _mm256_fmadd_pd(x2, x2, a2);
        a3 = _mm256_fmadd_pd(x3, x3, a3);
        m0 = _mm256_max_pd(m0, _mm256_max_pd(_mm256_andnot_pd(sign, x0), _mm256_andnot_pd(sign, x1)));
        m1 = _mm256_max_pd(m1, _mm256_max_pd(_mm256_andnot_pd(sign, x2), _mm256_andnot_pd(sign, x3)));
    }
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    _mm256_storeu_pd(acc + 8, a2);
    _mm256_storeu_pd(acc + 12, a3);
    double mm[4];
    _mm256_storeu_pd(mm, _mm256_max_pd(m0, m1));
    double m = mm[0];
    for (int l = 1; l < 4; l++) m = mm[l] > m ? mm[l] : m;
    return m;
}
#endif

static double groups(double *acc, const double *x, size_t ng)
{
#ifdef NORMACC_X86
    static int have = -1;   /* benign race: every thread computes the same value */
    if (have < 0) {
        unsigned f = decode_cpu_features();
        have = (f & DECODE_CPU_AVX2) && (f & DECODE_CPU_FMA);
    }
    if (have) return groups_avx2(acc, x, ng);
#endif
    return groups_ref(acc, x, ng);
}

/* The kernel's sum of everything fed so far (accumulators reduced, then the pending elements one at a time). */
static double dot_so_far(const NormAcc *a)
{
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
    return dot;
}

void normacc_add(NormAcc *a, const double *x, size_t n)
{
    NormAcc before;
    int lost_possible = !a->fb_live;
    if (lost_possible) memcpy(&before, a, sizeof before);
    double m = 0.0;
    size_t i = 0;
    if (a->npend) {
        while (i < n && a->npend < 16) {
            double v = fabs(x[i]);
            m = v > m ? v : m;
            a->pend[a->npend++] = x[i++];
        }
        if (a->npend == 16) {
            groups_ref(a->acc, a->pend, 1);
            a->npend = 0;
        }
    }
    size_t ng = (n - i) / 16;
    if (ng) {
        double mg = groups(a->acc, x + i, ng);
        m = mg > m ? mg : m;
        i += 16 * ng;
    }
    while (i < n) {
        double v = fabs(x[i]);
        m = v > m ? v : m;
        a->pend[a->npend++] = x[i++];
    }
    a->n += n;
    double top = m > a->top ? m : a->top;
    a->top = top;
    if (a->fb_live) {   /* the fallback's sum is kept only while it may be needed */
        if (top >= NORMACC_LO && top <= NORMACC_HI) a->fb_live = 0;
        else fallback_add(a, x, n);
    } else if (!(top <= NORMACC_HI)) {
        /* a magnitude above HI after the sum was dropped: start it again from the kernel's sum of what came
         * before, scaled by the power of two of its largest magnitude (not the sequential order la_norm uses:
         * within a few ulp of it; see normacc.h) */
        double prev = dot_so_far(&before);
        a->amax = before.top;
        if (a->amax > 0.0) {
            frexp(a->amax, &a->e);
            a->scale = ldexp(1.0, -a->e);
            a->s = ldexp(prev, -2 * a->e);
        }
        a->fb_live = 1;
        a->approx = 1;
        fallback_add(a, x, n);
    }
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
        groups_ref(a->acc, a->pend, 1);
        n -= fill;
    }
    a->npend = n % 16;
    memset(a->pend, 0, a->npend * sizeof *a->pend);
}

double normacc_norm(const NormAcc *a)
{
    if (a->n == 0) return 0.0;
    double dot = dot_so_far(a);
    if (dot >= NORMACC_TINY && dot <= DBL_MAX) return sqrt(dot);
    if (isnan(dot)) return dot;
    if (a->amax == 0.0 || isinf(a->amax)) return a->amax;
    return ldexp(sqrt(a->s), a->e);
}
