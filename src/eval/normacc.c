/* normacc: la_norm of a vector fed in pieces (see normacc.h). */
#include "eval/normacc.h"

#include "decode/decode.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
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

/* ng groups of 16 of the values v[i] = c[i] - x[i] (x NULL: c[i]) into the 16 accumulators (accumulator k: the
 * elements i = k mod 16); dst (may be NULL, may be c) gets the values. Returns the largest magnitude read (a NaN
 * may be skipped: the sum is NaN then, and the fallback is never asked); *bad becomes 1 when some c[i] is not
 * finite. */
static double groups_ref(double *acc, const double *c, const double *x, double *dst, size_t ng, int *bad)
{
    double m = 0.0;
    for (size_t g = 0; g < 16 * ng; g += 16)
        for (int k = 0; k < 16; k++) {
            double v = x ? c[g + k] - x[g + k] : c[g + k];
            *bad |= !isfinite(c[g + k]);
            if (dst) dst[g + k] = v;
            acc[k] = fma(v, v, acc[k]);
            double a = fabs(v);
            m = a > m ? a : m;
        }
    return m;
}

#ifdef NORMACC_X86
/* The same with AVX2 + FMA: register j holds accumulators 4j..4j+3, as OpenBLAS's kernel does. fma rounds once
 * either way, so both give the same bits. One body per (subtrahend, destination) case, the accumulators in
 * registers. */
#define NORMACC_LOAD(k) (x ? _mm256_sub_pd(_mm256_loadu_pd(c + g + (k)), _mm256_loadu_pd(x + g + (k))) \
                           : _mm256_loadu_pd(c + g + (k)))
static inline __attribute__((always_inline, target("avx2,fma"))) double
groups_avx2_body(double *acc, const double *c, const double *x, double *dst, size_t ng, int *bad)
{
    __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4), a2 = _mm256_loadu_pd(acc + 8),
            a3 = _mm256_loadu_pd(acc + 12);
    __m256d m0 = _mm256_setzero_pd(), m1 = _mm256_setzero_pd(), nf = _mm256_setzero_pd();
    const __m256d sign = _mm256_set1_pd(-0.0);
    for (size_t g = 0; g < 16 * ng; g += 16) {
        __m256d v0 = NORMACC_LOAD(0), v1 = NORMACC_LOAD(4), v2 = NORMACC_LOAD(8), v3 = NORMACC_LOAD(12);
        if (x) {   /* c itself must be finite (c - c is 0 then, NaN otherwise) */
            __m256d c0 = _mm256_loadu_pd(c + g), c1 = _mm256_loadu_pd(c + g + 4), c2 = _mm256_loadu_pd(c + g + 8),
                    c3 = _mm256_loadu_pd(c + g + 12);
            __m256d z = _mm256_add_pd(_mm256_add_pd(_mm256_sub_pd(c0, c0), _mm256_sub_pd(c1, c1)),
                                      _mm256_add_pd(_mm256_sub_pd(c2, c2), _mm256_sub_pd(c3, c3)));
            nf = _mm256_or_pd(nf, _mm256_cmp_pd(z, z, _CMP_UNORD_Q));
        } else {
            __m256d z = _mm256_add_pd(_mm256_add_pd(_mm256_sub_pd(v0, v0), _mm256_sub_pd(v1, v1)),
                                      _mm256_add_pd(_mm256_sub_pd(v2, v2), _mm256_sub_pd(v3, v3)));
            nf = _mm256_or_pd(nf, _mm256_cmp_pd(z, z, _CMP_UNORD_Q));
        }
        if (dst) {
            _mm256_storeu_pd(dst + g, v0);
            _mm256_storeu_pd(dst + g + 4, v1);
            _mm256_storeu_pd(dst + g + 8, v2);
            _mm256_storeu_pd(dst + g + 12, v3);
        }
        a0 = _mm256_fmadd_pd(v0, v0, a0);
        a1 = _mm256_fmadd_pd(v1, v1, a1);
        a2 = _mm256_fmadd_pd(v2, v2, a2);
        a3 = _mm256_fmadd_pd(v3, v3, a3);
        m0 = _mm256_max_pd(m0, _mm256_max_pd(_mm256_andnot_pd(sign, v0), _mm256_andnot_pd(sign, v1)));
        m1 = _mm256_max_pd(m1, _mm256_max_pd(_mm256_andnot_pd(sign, v2), _mm256_andnot_pd(sign, v3)));
    }
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    _mm256_storeu_pd(acc + 8, a2);
    _mm256_storeu_pd(acc + 12, a3);
    *bad |= _mm256_movemask_pd(nf) != 0;
    double mm[4];
    _mm256_storeu_pd(mm, _mm256_max_pd(m0, m1));
    double m = mm[0];
    for (int l = 1; l < 4; l++) m = mm[l] > m ? mm[l] : m;
    return m;
}
#undef NORMACC_LOAD

__attribute__((target("avx2,fma"))) static double groups_avx2(double *acc, const double *c, const double *x,
                                                             double *dst, size_t ng, int *bad)
{
    if (!x) return groups_avx2_body(acc, c, NULL, NULL, ng, bad);
    if (!dst) return groups_avx2_body(acc, c, x, NULL, ng, bad);
    return groups_avx2_body(acc, c, x, dst, ng, bad);
}
#endif

static double groups(double *acc, const double *c, const double *x, double *dst, size_t ng, int *bad)
{
#ifdef NORMACC_X86
    static atomic_int have = -1;   /* every thread that finds -1 computes the same value */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        unsigned f = decode_cpu_features();
        h = (f & DECODE_CPU_AVX2) && (f & DECODE_CPU_FMA);
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    if (h) return groups_avx2(acc, c, x, dst, ng, bad);
#endif
    return groups_ref(acc, c, x, dst, ng, bad);
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

/* k < 16 values into the pending group (the caller completes it). */
static void groups_tail(NormAcc *a, const double *c, const double *x, double *dst, size_t k, double *m, int *bad)
{
    for (size_t j = 0; j < k; j++) {
        double v = x ? c[j] - x[j] : c[j];
        *bad |= !isfinite(c[j]);
        if (dst) dst[j] = v;
        double av = fabs(v);
        *m = av > *m ? av : *m;
        a->pend[a->npend++] = v;
    }
}

/* la_norm's fallback over the values c[i] - x[i] (x NULL: c[i]), made in pieces when they are not stored. */
static void fallback_values(NormAcc *a, const double *c, const double *x, size_t n)
{
    if (!x) {
        fallback_add(a, c, n);
        return;
    }
    double buf[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        for (size_t j = 0; j < k; j++) buf[j] = c[i + j] - x[i + j];
        fallback_add(a, buf, k);
    }
}

/* Feeds v[i] = c[i] - x[i] (x NULL: c[i]), writing them to dst when not NULL; see normacc_add_diff. */
static int feed(NormAcc *a, const double *c, const double *x, double *dst, size_t n)
{
    NormAcc before;
    if (!a->fb_live) memcpy(&before, a, sizeof before);
    double m = 0.0;
    int bad = 0;
    size_t i = 0;
    if (a->npend) {
        size_t k = 16 - a->npend < n ? 16 - a->npend : n;
        groups_tail(a, c, x, dst, k, &m, &bad);
        i = k;
        if (a->npend == 16) {
            int b2 = 0;
            groups_ref(a->acc, a->pend, NULL, NULL, 1, &b2);
            a->npend = 0;
        }
    }
    size_t ng = (n - i) / 16;
    if (ng) {
        double mg = groups(a->acc, c + i, x ? x + i : NULL, dst ? dst + i : NULL, ng, &bad);
        m = mg > m ? mg : m;
        i += 16 * ng;
    }
    if (i < n) groups_tail(a, c + i, x ? x + i : NULL, dst ? dst + i : NULL, n - i, &m, &bad);
    a->n += n;
    double top = m > a->top ? m : a->top;
    a->top = top;
    const double *v = dst ? dst : c, *vx = dst ? NULL : x;
    if (a->fb_live) {   /* the fallback's sum is kept only while it may be needed */
        if (top >= NORMACC_LO && top <= NORMACC_HI) a->fb_live = 0;
        else fallback_values(a, v, vx, n);
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
        fallback_values(a, v, vx, n);
    }
    return bad;
}

void normacc_add(NormAcc *a, const double *x, size_t n)
{
    feed(a, x, NULL, NULL, n);
}

static size_t first_not_finite(const double *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(c[i])) return i;
    return n;
}

size_t normacc_add_diff(NormAcc *a, double *c, const double *x, size_t n, int store)
{
    if (store) {   /* c is overwritten: look first */
        size_t i = first_not_finite(c, n);
        if (i < n) return i;
        feed(a, c, x, c, n);
        return n;
    }
    return feed(a, c, x, NULL, n) ? first_not_finite(c, n) : n;
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
        { int b2 = 0; groups_ref(a->acc, a->pend, NULL, NULL, 1, &b2); }
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
