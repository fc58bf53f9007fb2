/* test_units.c: unit tests of util, linalg, attention, the methods (through the registry), config and report.
 *
 * Prints "PASS name" or "FAIL name: why" per check (expected vs got on failure); exits 1 if any check failed.
 * Run from anywhere (no data files). Expected values are derived independently of src/: by hand, by a
 * separate implementation here, or hard-coded from numpy 1.24.2 (noted where used).
 */
#include <cJSON.h>
#include <math.h>
#include <float.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/attention.h"
#include "config/config.h"
#include "eval/evaluate.h"
#include "base/linalg.h"
#include "base/pool.h"
#include "methods/methods.h"
#include "methods/svdcache.h"
#include "report/report.h"
#include "base/util.h"
#include "check.h"

static int same_bits(double a, double b) { return dbits(a) == dbits(b); }

/* Deterministic test data: a small LCG mapped to [-1, 1). */
static uint64_t lcg_state;
static double lcg(void)
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* The text a stream got, NUL-terminated (caller frees). */
static char *slurp(FILE *f)
{
    long n = ftell(f);
    rewind(f);
    char *s = xmalloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    return s;
}

/* ================================================================ util */

static void test_size_arith(void)
{
    size_t r = 12345;
    check(size_mul(SIZE_MAX, 2, &r) == -1 && r == 12345, "size_mul_overflow",
          "expected -1 and the output untouched, got r=%zu", r);
    check(size_mul((size_t)1 << 32, (size_t)1 << 32, &r) == -1, "size_mul_overflow_2^64", "expected -1");
    int rc = size_mul((size_t)1 << 31, (size_t)1 << 32, &r);
    check(rc == 0 && r == (size_t)1 << 63, "size_mul_2^63", "expected 0 and 2^63, got rc=%d r=%zu", rc, r);
    rc = size_mul(SIZE_MAX, 1, &r);
    check(rc == 0 && r == SIZE_MAX, "size_mul_max_times_1", "got rc=%d r=%zu", rc, r);
    rc = size_mul(0, SIZE_MAX, &r);
    check(rc == 0 && r == 0, "size_mul_zero", "expected 0 and 0, got rc=%d r=%zu", rc, r);
    rc = size_mul(SIZE_MAX, 0, &r);
    check(rc == 0 && r == 0, "size_mul_zero_rhs", "expected 0 and 0, got rc=%d r=%zu", rc, r);
    rc = size_mul(SIZE_MAX / 3, 3, &r);
    check(rc == 0 && r == SIZE_MAX / 3 * 3, "size_mul_exact_fit", "got rc=%d r=%zu", rc, r);
    check(size_mul(SIZE_MAX / 3 + 1, 3, &r) == -1, "size_mul_just_over", "expected -1");

    rc = size_add(SIZE_MAX - 1, 1, &r);
    check(rc == 0 && r == SIZE_MAX, "size_add_max", "expected 0 and SIZE_MAX, got rc=%d r=%zu", rc, r);
    r = 7;
    check(size_add(SIZE_MAX, 1, &r) == -1 && r == 7, "size_add_overflow", "expected -1 and r untouched, got r=%zu", r);
    check(size_add(1, SIZE_MAX, &r) == -1, "size_add_overflow_lhs_small", "expected -1");
    check(size_add(SIZE_MAX / 2 + 1, SIZE_MAX / 2 + 1, &r) == -1, "size_add_overflow_halves", "expected -1");
    rc = size_add(2, 3, &r);
    check(rc == 0 && r == 5, "size_add_small", "got rc=%d r=%zu", rc, r);
}

static void test_fmt_double(void)
{
    /* expected: the shortest decimal (Python's repr digits) in C's %g notation */
    static const struct { double x; const char *want; } cases[] = {
        {0.1, "0.1"},
        {1.0 / 3.0, "0.3333333333333333"},
        {2.0 / 3.0, "0.6666666666666666"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1e-300, "1e-300"},
        {1e308, "1e+308"},
        {-0.0, "-0"},
        {0.0, "0"},
        {1.0, "1"},
        {-2.5, "-2.5"},
        {100.0, "100"},
        {123456789012345.0, "123456789012345"},
        {1e16, "1e+16"},
        {DBL_MAX, "1.7976931348623157e+308"},
        {DBL_MIN, "2.2250738585072014e-308"},
        {7.485470860550345, "7.485470860550345"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        fmt_double(buf, sizeof buf, cases[i].x);
        snprintf(name, sizeof name, "fmt_double_shortest_%s", cases[i].want);
        check(strcmp(buf, cases[i].want) == 0, name, "expected \"%s\", got \"%s\"", cases[i].want, buf);
    }
    /* round trip, bit for bit (sign of zero included) */
    const double rt[] = {0.1, 1.0 / 3.0, 1e-300, 5e-324, 1e308, -0.0, DBL_MAX, DBL_MIN, 2.2250738585072009e-308,
                         -1.0 / 7.0, 0x1p-24, 0x1p-1017, 12345.678901234567, -5e-324};
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) {
        char name[64];
        fmt_double(buf, sizeof buf, rt[i]);
        double back = strtod(buf, NULL);
        snprintf(name, sizeof name, "fmt_double_roundtrip_%a", rt[i]);
        check(same_bits(back, rt[i]), name, "%a printed as \"%s\" reads back as %a", rt[i], buf, back);
    }
    /* many pseudo-random doubles of every magnitude round-trip, with at most 17 significant digits */
    lcg_state = 99;
    int bad = 0;
    char first[160] = "";
    for (int i = 0; i < 20000; i++) {
        lcg();
        uint64_t b = lcg_state;
        double x;
        memcpy(&x, &b, sizeof x);
        if (!isfinite(x)) continue;
        fmt_double(buf, sizeof buf, x);
        if (!same_bits(strtod(buf, NULL), x)) {
            if (!bad++) snprintf(first, sizeof first, "%a -> \"%s\"", x, buf);
        }
    }
    check(bad == 0, "fmt_double_roundtrip_random", "%d of 20000 did not round-trip, first %s", bad, first);
    fmt_double(buf, sizeof buf, 5e-324);
    check(strtod(buf, NULL) == 5e-324 && strlen(buf) <= 21, "fmt_double_denormal_min",
          "expected a round-trip string of at most 15 digits, got \"%s\"", buf);
}

static void test_edit_distance(void)
{
    static const struct { const char *a, *b; size_t d; } cases[] = {
        {"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0}, {"kitten", "sitting", 3},
        {"flaw", "lawn", 2}, {"bits", "bitz", 1}, {"axis", "axes", 1}, {"ab", "ba", 2}, {"chanel", "channel", 1},
        {"token", "channel", 6}, {"apply_to", "aply_to", 1}, {"sinks", "window", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "edit_distance_%s_%s", cases[i].a[0] ? cases[i].a : "empty",
                 cases[i].b[0] ? cases[i].b : "empty");
        size_t d1 = edit_distance(cases[i].a, cases[i].b), d2 = edit_distance(cases[i].b, cases[i].a);
        check(d1 == cases[i].d && d2 == cases[i].d, name, "expected %zu both ways, got %zu and %zu", cases[i].d, d1,
              d2);
    }
    char a64[65], b64[65];
    memset(a64, 'a', 64);
    a64[64] = '\0';
    memcpy(b64, a64, 65);
    b64[0] = 'b';
    b64[63] = 'b';
    size_t d = edit_distance(a64, b64);
    check(d == 2, "edit_distance_64_chars", "expected 2, got %zu", d);
}

/* ================================================================ linalg */

/* numpy's pairwise_sum (numpy/core/src/umath/loops_utils.h.src), written out again for the test. */
static double ref_pairwise(const double *x, size_t n)
{
    if (n < 8) {
        double s = 0.0;
        for (size_t i = 0; i < n; i++) s = s + x[i];
        return s;
    }
    if (n <= 128) {
        double r0 = x[0], r1 = x[1], r2 = x[2], r3 = x[3], r4 = x[4], r5 = x[5], r6 = x[6], r7 = x[7];
        size_t i = 8, stop = n - n % 8;
        while (i < stop) {
            r0 += x[i]; r1 += x[i + 1]; r2 += x[i + 2]; r3 += x[i + 3];
            r4 += x[i + 4]; r5 += x[i + 5]; r6 += x[i + 6]; r7 += x[i + 7];
            i += 8;
        }
        double s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
        while (i < n) s += x[i++];
        return s;
    }
    size_t half = n / 2;
    half -= half % 8;
    return ref_pairwise(x, half) + ref_pairwise(x + half, n - half);
}

/* np.sum of a contiguous float64 vector: the reduction starts from 0.0 and the iterator hands the add loop
 * blocks of the ufunc buffer size (8192), each summed pairwise (checked against numpy 1.24.2 below). */
static double ref_np_sum(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t lo = 0; lo < n; lo += 8192) s += ref_pairwise(x + lo, n - lo < 8192 ? n - lo : 8192);
    return s;
}

/* x[i] as the Python expression ((i*2654435761) % 1000003) / 997.0 * (1 if i%3 else -1) + 1.0/(i+1) */
static void gen_sum_data(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (double)((uint64_t)i * 2654435761ULL % 1000003ULL) / 997.0 * (i % 3 ? 1.0 : -1.0) + 1.0 / (double)(i + 1);
}

static void test_la_sum(void)
{
    double *x = xmalloc(200000 * sizeof *x);
    for (size_t i = 0; i < 1000; i++) x[i] = (double)(i + 1);
    double s = la_sum(x, 1000);
    check(s == 500500.0, "la_sum_1_to_1000", "expected 500500, got %.17g", s);
    s = la_sum(x, 0);
    check(same_bits(s, 0.0), "la_sum_empty", "expected +0, got %a", s);
    s = la_sum(x, 1);
    check(s == 1.0, "la_sum_one", "expected 1, got %.17g", s);
    s = la_sum(x, 7);
    check(s == 28.0, "la_sum_7", "expected 28, got %.17g", s);

    /* values from numpy 1.24.2 */
    for (size_t i = 0; i < 1000; i++) x[i] = 0.1;
    s = la_sum(x, 10);
    check(s == 1.0, "la_sum_numpy_0.1x10", "expected 1.0 (numpy; naive gives 0.9999999999999999), got %.17g", s);
    s = la_sum(x, 1000);
    check(s == 0x1.9000000000001p+6, "la_sum_numpy_0.1x1000", "expected 100.00000000000001, got %.17g", s);
    for (size_t i = 0; i < 1000; i++) x[i] = 1.0 / (double)(i + 1);
    s = la_sum(x, 1000);
    check(s == 0x1.df11f45f4e61ap+2, "la_sum_numpy_harmonic_1000", "expected %a, got %a", 0x1.df11f45f4e61ap+2, s);
    for (size_t i = 0; i < 16; i++) x[i] = (double[]){1e16, 1.0, -1e16, 1.0}[i % 4];
    s = la_sum(x, 16);
    check(s == 0.0, "la_sum_numpy_cancel_16", "expected 0.0 (numpy; naive gives 1.0), got %.17g", s);
    for (size_t i = 0; i < 8; i++) x[i] = -0.0;
    s = la_sum(x, 8);
    check(same_bits(s, 0.0), "la_sum_numpy_negzero_8", "expected +0.0 as np.sum(np.full(8, -0.0)), got %a", s);
    for (size_t i = 0; i < 100000; i++) x[i] = 0.1;
    s = la_sum(x, 100000);
    check(s == 0x1.3880000000001p+13, "la_sum_numpy_0.1x100000", "expected %a, got %a", 0x1.3880000000001p+13, s);

    static const struct { size_t n; double want; } np_sums[] = {
        {16, 0x1.e11b867d97365p+11},  {129, 0x1.69f3a219b832ap+14}, {1000, 0x1.4be223d241964p+17},
        {8192, 0x1.4f27aa5366a4dp+20}, {8193, 0x1.4f4831a54c0d7p+20}, {10000, 0x1.9884248ba7ba4p+20},
        {20000, 0x1.9857135f55f73p+21}, {100003, 0x1.fe4bdcaa726f3p+23},
    };
    gen_sum_data(x, 200000);
    for (size_t k = 0; k < sizeof np_sums / sizeof np_sums[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "la_sum_numpy_gen_%zu", np_sums[k].n);
        s = la_sum(x, np_sums[k].n);
        check(same_bits(s, np_sums[k].want), name, "expected %a (numpy 1.24.2), got %a", np_sums[k].want, s);
        double r = ref_np_sum(x, np_sums[k].n);
        snprintf(name, sizeof name, "ref_sum_matches_numpy_%zu", np_sums[k].n);
        check(same_bits(r, np_sums[k].want), name, "the test's reference is wrong: expected %a, got %a",
              np_sums[k].want, r);
    }
    /* every length 0..600 and a spread of larger ones against the independent implementation */
    int bad = 0;
    size_t first = 0;
    double fw = 0, fg = 0;
    for (size_t n = 0; n <= 600 || n < 200000; n = n <= 600 ? n + 1 : n * 3 / 2 + 7) {
        if (n > 200000) break;
        double want = ref_np_sum(x, n), got = la_sum(x, n);
        if (!same_bits(want, got) && !bad++) { first = n; fw = want; fg = got; }
    }
    check(bad == 0, "la_sum_matches_reference_all_lengths", "%d lengths differ; first n=%zu expected %a got %a", bad,
          first, fw, fg);
    free(x);
}

static void test_products(void)
{
    const double A[6] = {1, 2, 3, 4, 5, 6};          /* 2x3 */
    const double B[6] = {7, 8, 9, 10, 11, 12};       /* 3x2 */
    double C[4];
    la_matmul(C, A, B, 2, 3, 2);
    const double Cw[4] = {58, 64, 139, 154};
    check(memcmp(C, Cw, sizeof C) == 0, "la_matmul_2x3x2", "expected [58 64; 139 154], got [%g %g; %g %g]", C[0], C[1],
          C[2], C[3]);
    double C2[9];
    la_matmul(C2, B, A, 3, 2, 3);                     /* 3x2 @ 2x3 */
    const double C2w[9] = {39, 54, 69, 49, 68, 87, 59, 82, 105};
    check(memcmp(C2, C2w, sizeof C2) == 0, "la_matmul_3x2x3", "got [%g %g %g; %g %g %g; %g %g %g]", C2[0], C2[1],
          C2[2], C2[3], C2[4], C2[5], C2[6], C2[7], C2[8]);
    double Z[4] = {1, 1, 1, 1};
    la_matmul(Z, A, B, 2, 0, 2);
    check(Z[0] == 0 && Z[1] == 0 && Z[2] == 0 && Z[3] == 0, "la_matmul_K0_zeros", "expected zeros, got %g %g %g %g",
          Z[0], Z[1], Z[2], Z[3]);

    const double x3[3] = {1, -1, 2};
    double y[3];
    la_matvec(y, A, x3, 2, 3);                        /* [1-2+6, 4-5+12] */
    check(y[0] == 5 && y[1] == 11, "la_matvec_2x3", "expected [5 11], got [%g %g]", y[0], y[1]);
    const double x2[2] = {2, -1};
    la_vecmat(y, x2, A, 2, 3);                        /* [2-4, 4-5, 6-6] */
    check(y[0] == -2 && y[1] == -1 && y[2] == 0, "la_vecmat_2x3", "expected [-2 -1 0], got [%g %g %g]", y[0], y[1],
          y[2]);
    double y1[2] = {9, 9};
    la_matvec(y1, A, x3, 2, 0);
    check(y1[0] == 0 && y1[1] == 0, "la_matvec_N0_zeros", "got [%g %g]", y1[0], y1[1]);
    double y3[3] = {9, 9, 9};
    la_vecmat(y3, x2, A, 0, 3);
    check(y3[0] == 0 && y3[1] == 0 && y3[2] == 0, "la_vecmat_M0_zeros", "got [%g %g %g]", y3[0], y3[1], y3[2]);

    const double v[2] = {3, 4};
    double n = la_norm(v, 2);
    check(n == 5.0, "la_norm_3_4", "expected 5, got %.17g", n);
    const double v4[4] = {1, 1, 1, 1};
    n = la_norm(v4, 4);
    check(n == 2.0, "la_norm_ones4", "expected 2, got %.17g", n);
    n = la_norm(v, 0);
    check(n == 0.0, "la_norm_empty", "expected 0, got %g", n);
    const double vn[3] = {-2, 0, 0};
    n = la_norm(vn, 3);
    check(n == 2.0, "la_norm_negative", "expected 2, got %g", n);
}

/* Checks the thin SVD of A (M, N): reconstruction, S descending and non-negative, orthonormal U and Vt. */
static void svd_case(const char *tag, const double *A, size_t M, size_t N)
{
    size_t R = M < N ? M : N;
    double *U = xmalloc(M * R * sizeof *U), *S = xmalloc(R * sizeof *S), *Vt = xmalloc(R * N * sizeof *Vt);
    double *Acopy = xmalloc(M * N * sizeof *Acopy);
    memcpy(Acopy, A, M * N * sizeof *A);
    char name[96];
    int rc = la_svd(U, S, Vt, A, M, N);
    snprintf(name, sizeof name, "la_svd_%s_rc", tag);
    check(rc == 0, name, "expected 0, got %d (%s)", rc, kvc_errmsg());
    snprintf(name, sizeof name, "la_svd_%s_input_untouched", tag);
    check(memcmp(Acopy, A, M * N * sizeof *A) == 0, name, "A was modified");
    double worst = 0;
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double a = 0;
            for (size_t k = 0; k < R; k++) a += U[i * R + k] * S[k] * Vt[k * N + j];
            if (fabs(a - A[i * N + j]) > worst) worst = fabs(a - A[i * N + j]);
        }
    snprintf(name, sizeof name, "la_svd_%s_reconstructs", tag);
    check(worst <= 1e-12, name, "max |U S Vt - A| = %g > 1e-12", worst);
    int desc = 1;
    for (size_t k = 0; k < R; k++) {
        if (S[k] < 0) desc = 0;
        if (k && S[k] > S[k - 1]) desc = 0;
    }
    snprintf(name, sizeof name, "la_svd_%s_S_descending", tag);
    check(desc, name, "S = [%g %g %g ...] not descending non-negative", S[0], R > 1 ? S[1] : 0, R > 2 ? S[2] : 0);
    double wu = 0, wv = 0;
    for (size_t a = 0; a < R; a++)
        for (size_t b = 0; b < R; b++) {
            double du = 0, dv = 0;
            for (size_t i = 0; i < M; i++) du += U[i * R + a] * U[i * R + b];
            for (size_t j = 0; j < N; j++) dv += Vt[a * N + j] * Vt[b * N + j];
            double e = a == b ? 1.0 : 0.0;
            if (fabs(du - e) > wu) wu = fabs(du - e);
            if (fabs(dv - e) > wv) wv = fabs(dv - e);
        }
    snprintf(name, sizeof name, "la_svd_%s_U_orthonormal", tag);
    check(wu <= 1e-12, name, "max |U^T U - I| = %g", wu);
    snprintf(name, sizeof name, "la_svd_%s_Vt_orthonormal", tag);
    check(wv <= 1e-12, name, "max |Vt Vt^T - I| = %g", wv);
    free(U); free(S); free(Vt); free(Acopy);
}

static void test_svd(void)
{
    double A[60];
    lcg_state = 7;
    for (int i = 0; i < 60; i++) A[i] = lcg() * 3.0;
    svd_case("tall_6x4", A, 6, 4);
    svd_case("wide_3x5", A, 3, 5);
    svd_case("square_5x5", A, 5, 5);
    svd_case("row_1x4", A, 1, 4);
    /* known singular values */
    const double Dg[6] = {3, 0, 0, 4, 0, 0};   /* 3x2: [[3,0],[0,4],[0,0]] */
    double U[6], S[2], Vt[4];
    int rc = la_svd(U, S, Vt, Dg, 3, 2);
    check(rc == 0 && fabs(S[0] - 4) < 1e-15 && fabs(S[1] - 3) < 1e-15, "la_svd_known_values",
          "expected S = [4 3], got rc=%d [%.17g %.17g]", rc, S[0], S[1]);
    const double rank1[6] = {1, 2, 3, 2, 4, 6};   /* [1 2 3] outer [1 2]: S = [sqrt(14)*sqrt(5), 0] */
    double S1[2], U1[4], Vt1[6];
    rc = la_svd(U1, S1, Vt1, rank1, 2, 3);
    check(rc == 0 && fabs(S1[0] - sqrt(70.0)) < 1e-13 && fabs(S1[1]) < 1e-13, "la_svd_rank1",
          "expected S = [sqrt(70) 0], got [%.17g %.17g]", S1[0], S1[1]);
}

/* la_svd_right (the QR route of lowrank): S and the row space as la_svd's, the signs of Vt as numpy's (dgesdd's),
 * the same bits however the rows are split into blocks, and the cache handing back what it computed once. */
static void test_svd_right(void)
{
    enum { M = 2500, N = 24 };   /* more than LA_QR_ROWS rows: three blocks, the last one short */
    double *A = xmalloc(M * N * sizeof *A), *U = xmalloc(M * N * sizeof *U), S[N], Vt[N * N], S2[N], Vt2[N * N];
    lcg_state = 11;
    for (size_t i = 0; i < M; i++)   /* rank 6 plus small noise: singular values from ~60 down to ~0.3 */
        for (size_t j = 0; j < N; j++) A[i * N + j] = 0.3 * lcg();
    for (size_t k = 0; k < 6; k++) {
        double a[N];
        for (size_t j = 0; j < N; j++) a[j] = lcg();
        for (size_t i = 0; i < M; i++) {
            double c = lcg();
            for (size_t j = 0; j < N; j++) A[i * N + j] += c * a[j];
        }
    }
    const double *one[1] = {A};
    const size_t rows1[1] = {M};
    int rc = la_svd_right(S2, Vt2, one, rows1, 1, N, NULL);
    check(rc == 0, "la_svd_right_rc", "expected 0, got %d (%s)", rc, kvc_errmsg());
    la_svd(U, S, Vt, A, M, N);
    double ds = 0, dv = 0;
    for (size_t k = 0; k < N; k++) {
        ds = fmax(ds, fabs(S2[k] - S[k]) / S[0]);
        double dot = 0;
        for (size_t j = 0; j < N; j++) dot += Vt[k * N + j] * Vt2[k * N + j];
        dv = fmax(dv, fabs(dot - 1));   /* the same vector with the same sign: dot = 1 */
    }
    check(ds <= 1e-14, "la_svd_right_S_as_la_svd", "max |S - S_numpy| / S[0] = %g", ds);
    check(dv <= 1e-12, "la_svd_right_Vt_as_la_svd_signs_too", "max |v_k . v_k,numpy - 1| = %g", dv);
    const double *three[3] = {A, A + 7 * N, A + 1100 * N};
    const size_t rows3[3] = {7, 1093, M - 1100};
    rc = la_svd_right(S, Vt, three, rows3, 3, N, NULL);
    check(rc == 0 && memcmp(S, S2, sizeof S) == 0 && memcmp(Vt, Vt2, sizeof Vt) == 0, "la_svd_right_split_invariant",
          "rc %d; S or Vt differ when the rows come in 3 pieces", rc);
    rc = la_svd_right(S, Vt, one, (const size_t[]){N - 1}, 1, N, NULL);
    check(rc == -1 && strstr(kvc_errmsg(), "23 x 24"), "la_svd_right_wide_fails", "expected -1 naming 23 x 24, got %d %s",
          rc, kvc_errmsg());

    SvdCache *c = svdcache_new();
    const double *cs, *cv, *cs2, *cv2;
    int owned = 1, owned2 = 1;
    rc = svdcache_get(c, three, rows3, 3, N, &cs, &cv, &owned, NULL);
    int rc2 = svdcache_get(c, three, rows3, 3, N, &cs2, &cv2, &owned2, NULL);
    check(rc == 0 && rc2 == 0 && !owned && !owned2 && cs == cs2 && cv == cv2 && memcmp(cs, S2, sizeof S2) == 0,
          "svdcache_computes_once", "rc %d %d, owned %d %d, same arrays %d", rc, rc2, owned, owned2, cs == cs2);
    rc = svdcache_get(c, one, rows1, 1, N, &cs2, &cv2, &owned2, NULL);   /* another key (one block): a new entry */
    check(rc == 0 && cs2 != cs && memcmp(cs2, S2, sizeof S2) == 0, "svdcache_keyed_by_blocks", "rc %d", rc);
    rc = svdcache_get(NULL, one, rows1, 1, N, &cs2, &cv2, &owned2, NULL);
    check(rc == 0 && owned2 && memcmp(cv2, Vt2, sizeof Vt2) == 0, "svdcache_none_gives_owned", "rc %d owned %d", rc,
          owned2);
    if (rc == 0) {
        free((double *)cs2);
        free((double *)cv2);
    }
    svdcache_free(c);
    free(A);
    free(U);

    /* From LA_QR_SPLIT_BLOCKS blocks on the rows are folded in two halves: still la_svd's S and signs, and the same
     * bits with the halves on two threads as in turn, and however the rows come in pieces */
    enum { M2 = LA_QR_SPLIT_BLOCKS * LA_QR_ROWS + 777, N2 = 16 };
    double *B = xmalloc((size_t)M2 * N2 * sizeof *B), *U2 = xmalloc((size_t)M2 * N2 * sizeof *U2);
    double Sa[N2], Va[N2 * N2], Sb[N2], Vb[N2 * N2], Sc[N2], Vc[N2 * N2], Sn[N2], Vn[N2 * N2];
    for (size_t i = 0; i < (size_t)M2 * N2; i++) B[i] = 0.1 * lcg();
    for (size_t k = 0; k < 5; k++) {
        double a[N2];
        for (size_t j = 0; j < N2; j++) a[j] = lcg();
        for (size_t i = 0; i < M2; i++) {
            double cc = lcg();
            for (size_t j = 0; j < N2; j++) B[i * N2 + j] += cc * a[j];
        }
    }
    const double *b1[1] = {B}, *b2[2] = {B, B + 9000 * N2};
    const size_t r1[1] = {M2}, r2[2] = {9000, M2 - 9000};
    Pool *pool = pool_create(2);
    int ra = la_svd_right(Sa, Va, b1, r1, 1, N2, NULL), rb = la_svd_right(Sb, Vb, b1, r1, 1, N2, pool);
    int rcc = la_svd_right(Sc, Vc, b2, r2, 2, N2, pool);
    pool_free(pool);
    check(ra == 0 && rb == 0 && rcc == 0 && !memcmp(Sa, Sb, sizeof Sa) && !memcmp(Va, Vb, sizeof Va) &&
          !memcmp(Sa, Sc, sizeof Sa) && !memcmp(Va, Vc, sizeof Va), "la_svd_right_halves_same_bits_any_pool",
          "rc %d %d %d; S or Vt differ between no pool, a pool of 2, rows in 2 pieces", ra, rb, rcc);
    la_svd(U2, Sn, Vn, B, M2, N2);
    ds = dv = 0;
    for (size_t k = 0; k < N2; k++) {
        ds = fmax(ds, fabs(Sa[k] - Sn[k]) / Sn[0]);
        double dot = 0;
        for (size_t j = 0; j < N2; j++) dot += Vn[k * N2 + j] * Va[k * N2 + j];
        if (Sn[k] > 1e-8 * Sn[0]) dv = fmax(dv, fabs(dot - 1));
    }
    check(ds <= 1e-13 && dv <= 1e-10, "la_svd_right_halves_as_la_svd", "S %g, vectors and signs %g", ds, dv);
    free(B);
    free(U2);

    const double P[6] = {1, 2, 3, 4, 5, 6}, Q[6] = {1, 0, -1, 2, 1, 0};   /* (2, 3) @ (2, 3).T */
    double C[4];
    la_matmul_bt(C, P, Q, 2, 3, 2);
    check(C[0] == -2 && C[1] == 4 && C[2] == -2 && C[3] == 13, "la_matmul_bt_2x3x2", "expected [-2 4; -2 13], got "
          "[%g %g; %g %g]", C[0], C[1], C[2], C[3]);
}

/* ================================================================ attention */

static void test_attention(void)
{
    enum { T = 40, D = 8 };
    double K[T * D], V[T * D], q[D], w[T], out[D];
    lcg_state = 3;
    for (int i = 0; i < T * D; i++) K[i] = 3 * lcg();
    for (int i = 0; i < T * D; i++) V[i] = lcg();
    for (int i = 0; i < D; i++) q[i] = 2 * lcg();

    static const size_t Ts[] = {1, 2, 7, 16, 40};
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        size_t t = Ts[k];
        attn_forward(out, w, q, K, V, t, D);
        long double sum = 0;
        int pos = 1;
        for (size_t i = 0; i < t; i++) {
            sum += w[i];
            if (!(w[i] > 0)) pos = 0;
        }
        char name[64];
        snprintf(name, sizeof name, "attn_weights_sum_to_1_T%zu", t);
        check(fabsl(sum - 1.0L) <= 1e-15L && pos, name, "sum(w) - 1 = %Lg (positive: %d)", sum - 1.0L, pos);
    }

    /* out and w against a straightforward softmax computed here */
    attn_forward(out, w, q, K, V, T, D);
    double s[T], m = -INFINITY, z = 0, wo = 0, oo = 0;
    for (int t = 0; t < T; t++) {
        s[t] = 0;
        for (int j = 0; j < D; j++) s[t] += K[t * D + j] * q[j];
        s[t] /= sqrt((double)D);
        if (s[t] > m) m = s[t];
    }
    for (int t = 0; t < T; t++) z += exp(s[t] - m);
    for (int t = 0; t < T; t++) {
        double e = fabs(exp(s[t] - m) / z - w[t]);
        if (e > wo) wo = e;
    }
    for (int j = 0; j < D; j++) {
        double a = 0;
        for (int t = 0; t < T; t++) a += exp(s[t] - m) / z * V[t * D + j];
        if (fabs(a - out[j]) > oo) oo = fabs(a - out[j]);
    }
    check(wo < 1e-14 && oo < 1e-14, "attn_matches_plain_softmax", "max |dw| = %g, max |dout| = %g", wo, oo);

    /* all-equal scores: identical keys -> uniform weights exactly 1/T, out = mean of V */
    double Ke[5 * 4], Ve[5 * 4], qe[4] = {0.3, -1.2, 2.0, 0.7}, we[5], oe[4];
    for (int t = 0; t < 5; t++)
        for (int j = 0; j < 4; j++) {
            Ke[t * 4 + j] = (double)(j + 1) * 0.5;
            Ve[t * 4 + j] = (double)(t * 4 + j);
        }
    attn_forward(oe, we, qe, Ke, Ve, 5, 4);
    int uni = 1;
    for (int t = 0; t < 5; t++) uni &= we[t] == 1.0 / 5.0;
    check(uni, "attn_equal_scores_uniform", "expected every w = 0.2, got [%.17g %.17g %.17g %.17g %.17g]", we[0], we[1],
          we[2], we[3], we[4]);
    double mo = 0;
    for (int j = 0; j < 4; j++) mo = fmax(mo, fabs(oe[j] - (8.0 + (double)j)));
    check(mo < 1e-14, "attn_equal_scores_mean_of_V", "expected [8 9 10 11], got [%g %g %g %g]", oe[0], oe[1], oe[2],
          oe[3]);

    /* huge scores: stable softmax gives one-hot, no NaN */
    const double Kh[3 * 2] = {1e300, 0, 0, 0, -1e300, 0}, Vh[3 * 2] = {1, 2, 3, 4, 5, 6}, qh[2] = {1, 0};
    double wh[3], oh[2];
    attn_forward(oh, wh, qh, Kh, Vh, 3, 2);
    check(wh[0] == 1 && wh[1] == 0 && wh[2] == 0 && oh[0] == 1 && oh[1] == 2, "attn_huge_scores_no_nan",
          "expected w = [1 0 0], out = [1 2], got w = [%g %g %g], out = [%g %g]", wh[0], wh[1], wh[2], oh[0], oh[1]);
    const double Kh2[3 * 2] = {1e300, 1, 1e300, 2, 1e300, 3};
    attn_forward(oh, wh, qh, Kh2, Vh, 3, 2);
    int fin = isfinite(wh[0]) && isfinite(wh[1]) && isfinite(wh[2]) && isfinite(oh[0]) && isfinite(oh[1]);
    check(fin && wh[0] == 1.0 / 3.0 && wh[1] == 1.0 / 3.0, "attn_huge_equal_scores_uniform",
          "expected w = 1/3 each, got [%g %g %g] out [%g %g]", wh[0], wh[1], wh[2], oh[0], oh[1]);
    const double Kn[2 * 2] = {-1e300, 0, -1e300, 0};
    attn_forward(oh, wh, qh, Kn, Vh, 2, 2);
    check(wh[0] == 0.5 && wh[1] == 0.5 && oh[0] == 2 && oh[1] == 3, "attn_huge_negative_scores",
          "expected w = [0.5 0.5] out = [2 3], got [%g %g] [%g %g]", wh[0], wh[1], oh[0], oh[1]);

    /* 2 tokens by hand: D = 4 (sqrt = 2), s = [ln 3, 0] -> w = [3/4, 1/4] */
    const double K2[2 * 4] = {1, 0, 0, 0, 0, 0, 0, 0}, V2[2 * 4] = {4, 0, 8, -4, 0, 4, 0, 4};
    const double q2[4] = {2 * log(3.0), 5, -7, 1};
    double w2[2], o2[4];
    attn_forward(o2, w2, q2, K2, V2, 2, 4);
    check(fabs(w2[0] - 0.75) < 1e-15 && fabs(w2[1] - 0.25) < 1e-15, "attn_2token_weights",
          "expected [0.75 0.25], got [%.17g %.17g]", w2[0], w2[1]);
    const double o2w[4] = {3, 1, 6, -2};
    double e2 = 0;
    for (int j = 0; j < 4; j++) e2 = fmax(e2, fabs(o2[j] - o2w[j]));
    check(e2 < 1e-14, "attn_2token_out", "expected [3 1 6 -2], got [%.17g %.17g %.17g %.17g]", o2[0], o2[1], o2[2],
          o2[3]);
    /* single token: weight 1, out = V row */
    attn_forward(o2, w2, q2, K2, V2, 1, 4);
    check(w2[0] == 1 && memcmp(o2, V2, sizeof o2) == 0, "attn_single_token", "expected w=1 and out=V[0], got w=%g", w2[0]);
}

/* ================================================================ methods */

static char test_label[] = "t";

static void exp_init(Experiment *ex, const char *method)
{
    memset(ex, 0, sizeof *ex);
    ex->method = method_find(method);
    if (!ex->method) {
        printf("FAIL method_find_%s: not in the registry\n", method);
        exit(1);
    }
    ex->label = test_label;
    for (size_t i = 0; i < ex->method->n_params; i++) {
        ex->p[i] = ex->method->params[i].def == PARAM_REQUIRED ? 0 : ex->method->params[i].def;
        ex->pos[i] = POS_DEFAULT;
    }
}

static void exp_set(Experiment *ex, const char *name, long v, int pos)
{
    int i = method_param_index(ex->method, name);
    if (i < 0) {
        printf("FAIL param_%s_%s: no such parameter\n", ex->method->name, name);
        exit(1);
    }
    ex->p[i] = v;
    ex->pos[i] = pos;
}

static void exp_set_enum(Experiment *ex, const char *name, const char *choice, int pos)
{
    int i = method_param_index(ex->method, name);
    if (i < 0 || ex->method->params[i].kind != PARAM_ENUM) {
        printf("FAIL param_%s_%s: no such enum parameter\n", ex->method->name, name);
        exit(1);
    }
    for (long k = 0; ex->method->params[i].choices[k]; k++)
        if (strcmp(ex->method->params[i].choices[k], choice) == 0) {
            ex->p[i] = k;
            ex->pos[i] = pos;
            return;
        }
    printf("FAIL param_%s_%s_%s: no such choice\n", ex->method->name, name, choice);
    exit(1);
}

static void test_registry(void)
{
    static const char *const names[] = {"quantize", "sink_window", "topk_attention", "lowrank"};
    for (size_t i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "method_find_%s", names[i]);
        const MethodDesc *m = method_find(names[i]);
        check(m && strcmp(m->name, names[i]) == 0 && m->apply && m->n_params <= METHOD_MAX_PARAMS, name,
              "not found or incomplete");
    }
    check(method_find("quantise") == NULL && method_find("") == NULL, "method_find_unknown", "expected NULL");
    const MethodDesc *q = method_find("quantize");
    check(method_param_index(q, "bits") == 0 && method_param_index(q, "nope") == -1, "method_param_index",
          "got bits=%d nope=%d", method_param_index(q, "bits"), method_param_index(q, "nope"));
    Experiment ex;
    exp_init(&ex, "quantize");
    exp_set(&ex, "bits", 4, 2);
    ex.src = 5;
    const char *p = exp_param_path(&ex, "bits");
    check(strcmp(p, "experiments.5.bits.2") == 0, "exp_param_path_list", "expected experiments.5.bits.2, got %s", p);
    exp_set(&ex, "bits", 4, POS_SCALAR);
    p = exp_param_path(&ex, "bits");
    check(strcmp(p, "experiments.5.bits") == 0, "exp_param_path_scalar", "expected experiments.5.bits, got %s", p);
    p = exp_param_path(&ex, "axis");
    check(strcmp(p, "experiments.5.axis (default)") == 0, "exp_param_path_default",
          "expected \"experiments.5.axis (default)\", got %s", p);
    const char *s = exp_param_str(&ex, "apply_to");
    check(strcmp(s, "kv") == 0, "exp_param_str_default_apply_to", "expected kv, got %s", s);
}

/* Runs ex on (K, V) of T x D; the caller frees *c. */
static int run_method(Compressed *c, const Experiment *ex, const double *K, const double *V, const double *w, size_t T,
                      size_t D)
{
    MethodInput in = {.T = T, .D = D, .K = K, .V = V, .w_ref = w};
    memset(c, 0, sizeof *c);
    return ex->method->apply(c, ex, &in);
}

static void test_quantize(void)
{
    Experiment ex;
    Compressed c;
    exp_init(&ex, "quantize");

    /* bits 3: qmax 3; row amax 3 -> scale 1; x/scale exactly .5, 1.5, 2.5 -> round half to even */
    const double K1[8] = {0.5, 1.5, 2.5, 3.0, -0.5, -1.5, -2.5, -3.0};
    exp_set(&ex, "bits", 3, POS_SCALAR);
    exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
    int rc = run_method(&c, &ex, K1, NULL, NULL, 1, 8);
    const double want1[8] = {0, 2, 2, 3, -0.0, -2, -2, -3};
    int ok = rc == 0 && c.K;
    for (int i = 0; ok && i < 8; i++) ok = c.K[i] == want1[i];
    check(ok, "quantize_round_half_even", "expected [0 2 2 3 -0 -2 -2 -3], got [%g %g %g %g %g %g %g %g]",
          c.K ? c.K[0] : NAN, c.K ? c.K[1] : NAN, c.K ? c.K[2] : NAN, c.K ? c.K[3] : NAN, c.K ? c.K[4] : NAN,
          c.K ? c.K[5] : NAN, c.K ? c.K[6] : NAN, c.K ? c.K[7] : NAN);
    check(c.V == NULL && c.kept == NULL, "quantize_k_only_no_V", "expected V and kept NULL");
    /* 1 x 8 x 3 bits = 24 bits = 3 bytes, + 2 bytes for the single token scale */
    check(c.bytes == 5, "quantize_bytes_1x8_bits3", "expected 3 + 2 = 5, got %llu", (unsigned long long)c.bytes);
    compressed_free(&c);
    check(c.K == NULL && c.V == NULL && c.kept == NULL, "compressed_free_zeroes", "pointers not reset");

    /* same on the channel axis: (8, 1) tensor, one scale for the one channel */
    exp_set_enum(&ex, "axis", "channel", POS_SCALAR);
    rc = run_method(&c, &ex, K1, NULL, NULL, 8, 1);
    ok = rc == 0 && c.K;
    for (int i = 0; ok && i < 8; i++) ok = c.K[i] == want1[i];
    check(ok, "quantize_round_half_even_channel", "channel axis gave a different rounding");
    compressed_free(&c);

    /* bits 8 (qmax 127): scale = 1 when amax = 127; .5 ties and range */
    const double K8[6] = {127, 0.5, 1.5, -126.5, 125.5, -127};
    exp_init(&ex, "quantize");
    exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
    rc = run_method(&c, &ex, K8, NULL, NULL, 1, 6);
    const double want8[6] = {127, 0, 2, -126, 126, -127};
    ok = rc == 0 && c.K;
    for (int i = 0; ok && i < 6; i++) ok = c.K[i] == want8[i];
    check(ok, "quantize_bits8_default_ties", "expected [127 0 2 -126 126 -127], got [%g %g %g %g %g %g]",
          c.K ? c.K[0] : NAN, c.K ? c.K[1] : NAN, c.K ? c.K[2] : NAN, c.K ? c.K[3] : NAN, c.K ? c.K[4] : NAN,
          c.K ? c.K[5] : NAN);
    compressed_free(&c);

    /* codes stay in -qmax..qmax and are integers; the group max is reproduced to within an ulp */
    enum { T = 12, D = 9 };
    double K[T * D];
    lcg_state = 11;
    for (int i = 0; i < T * D; i++) K[i] = lcg() * pow(10.0, (double)(i % 7) - 3.0);
    for (int bits = 2; bits <= 8; bits++)
        for (int axis = 0; axis < 2; axis++) {
            exp_init(&ex, "quantize");
            exp_set(&ex, "bits", bits, POS_SCALAR);
            exp_set_enum(&ex, "axis", axis ? "channel" : "token", POS_SCALAR);
            exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
            rc = run_method(&c, &ex, K, NULL, NULL, T, D);
            double qmax = (double)((1 << (bits - 1)) - 1);
            int good = rc == 0 && c.K != NULL;
            char why[160] = "";
            size_t ng = axis ? D : T, len = axis ? T : D, stride = axis ? D : 1;
            for (size_t g = 0; good && g < ng; g++) {
                size_t base = axis ? g : g * D;
                double amax = 0;
                for (size_t i = 0; i < len; i++) amax = fmax(amax, fabs(K[base + i * stride]));
                double scale = amax / qmax;
                for (size_t i = 0; good && i < len; i++) {
                    double x = c.K[base + i * stride], code = x / scale;
                    if (fabs(code) > qmax * (1 + 1e-15) || fabs(code - rint(code)) > 1e-9 ||
                        fabs(x - K[base + i * stride]) > scale * 0.5 * (1 + 1e-12)) {
                        good = 0;
                        snprintf(why, sizeof why, "group %zu item %zu: x=%g x'=%g scale=%g code=%.17g", g, i,
                                 K[base + i * stride], x, scale, code);
                    }
                }
            }
            char name[64];
            snprintf(name, sizeof name, "quantize_codes_in_range_bits%d_%s", bits, axis ? "channel" : "token");
            check(good, name, "%s", why[0] ? why : "apply failed");
            compressed_free(&c);
        }

    /* all-zero row and all-zero column give zeros, not NaN */
    const double Kz[3 * 3] = {0, 0, 0, 1, 0, -2, 4, 0, 0.5};
    for (int axis = 0; axis < 2; axis++) {
        exp_init(&ex, "quantize");
        exp_set(&ex, "bits", 4, POS_SCALAR);
        exp_set_enum(&ex, "axis", axis ? "channel" : "token", POS_SCALAR);
        exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
        rc = run_method(&c, &ex, Kz, NULL, NULL, 3, 3);
        ok = rc == 0 && c.K;
        for (int i = 0; ok && i < 9; i++) ok = !isnan(c.K[i]);
        if (ok) ok = axis ? (c.K[1] == 0 && c.K[4] == 0 && c.K[7] == 0) : (c.K[0] == 0 && c.K[1] == 0 && c.K[2] == 0);
        check(ok, axis ? "quantize_zero_column_gives_zeros" : "quantize_zero_row_gives_zeros", "got [%g %g %g; %g %g %g]",
              c.K ? c.K[0] : NAN, c.K ? c.K[1] : NAN, c.K ? c.K[2] : NAN, c.K ? c.K[3] : NAN, c.K ? c.K[4] : NAN,
              c.K ? c.K[5] : NAN);
        compressed_free(&c);
    }
    const double Kall0[4] = {0, 0, 0, 0};
    exp_init(&ex, "quantize");
    exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
    rc = run_method(&c, &ex, Kall0, NULL, NULL, 2, 2);
    check(rc == 0 && c.K && c.K[0] == 0 && c.K[3] == 0 && !signbit(c.K[0]), "quantize_all_zero_tensor",
          "expected +0 everywhere");
    compressed_free(&c);

    /* bytes: T=3, D=5 (T*D = 15, odd), bits 3 -> 45 bits -> ceil = 6 bytes; + 2 per scale */
    double K35[15], V35[15];
    for (int i = 0; i < 15; i++) { K35[i] = i - 7.0; V35[i] = 0.25 * i; }
    static const struct { const char *axis, *to; int hasv; uint64_t bytes; int k, v; } bc[] = {
        {"token", "k", 0, 6 + 2 * 3, 1, 0},
        {"channel", "k", 0, 6 + 2 * 5, 1, 0},
        {"token", "k", 1, 6 + 2 * 3 + 2 * 15, 1, 0},     /* V stays FP16 */
        {"channel", "k", 1, 6 + 2 * 5 + 2 * 15, 1, 0},
        {"token", "v", 1, 2 * 15 + 6 + 2 * 3, 0, 1},     /* K stays FP16 */
        {"token", "kv", 1, 2 * (6 + 2 * 3), 1, 1},
        {"channel", "kv", 1, 2 * (6 + 2 * 5), 1, 1},
    };
    for (size_t k = 0; k < sizeof bc / sizeof bc[0]; k++) {
        exp_init(&ex, "quantize");
        exp_set(&ex, "bits", 3, POS_SCALAR);
        exp_set_enum(&ex, "axis", bc[k].axis, POS_SCALAR);
        exp_set_enum(&ex, "apply_to", bc[k].to, POS_SCALAR);
        rc = run_method(&c, &ex, K35, bc[k].hasv ? V35 : NULL, NULL, 3, 5);
        char name[96];
        snprintf(name, sizeof name, "quantize_bytes_bits3_3x5_%s_%s%s", bc[k].axis, bc[k].to, bc[k].hasv ? "_withV" : "");
        check(rc == 0 && c.bytes == bc[k].bytes && (c.K != NULL) == bc[k].k && (c.V != NULL) == bc[k].v, name,
              "expected bytes %llu, K %s, V %s; got bytes %llu, K %s, V %s", (unsigned long long)bc[k].bytes,
              bc[k].k ? "set" : "NULL", bc[k].v ? "set" : "NULL", (unsigned long long)c.bytes, c.K ? "set" : "NULL",
              c.V ? "set" : "NULL");
        compressed_free(&c);
    }
    /* bits 8 on 4 x 6: 24 bytes of codes + 8 (token) or 12 (channel) */
    double K46[24];
    for (int i = 0; i < 24; i++) K46[i] = (double)i;
    exp_init(&ex, "quantize");
    exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
    run_method(&c, &ex, K46, NULL, NULL, 4, 6);
    uint64_t bt = c.bytes;
    compressed_free(&c);
    exp_set_enum(&ex, "axis", "channel", POS_SCALAR);
    run_method(&c, &ex, K46, NULL, NULL, 4, 6);
    check(bt == 24 + 8 && c.bytes == 24 + 12, "quantize_bytes_token_vs_channel_scales",
          "expected 32 (token) and 36 (channel), got %llu and %llu", (unsigned long long)bt, (unsigned long long)c.bytes);
    compressed_free(&c);

    /* check(): apply_to v or kv needs values */
    Dims dn = {.T = 4, .D = 6}, dv = {.T = 4, .D = 6, .has_values = 1};
    exp_init(&ex, "quantize");
    ex.src = 2;
    exp_set_enum(&ex, "apply_to", "kv", 1);
    rc = ex.method->check(&ex, &dn);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.2.apply_to.1"), "quantize_check_kv_needs_values",
          "expected -1 with experiments.2.apply_to.1, got %d \"%s\"", rc, kvc_errmsg());
    exp_init(&ex, "quantize");
    rc = ex.method->check(&ex, &dn);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.0.apply_to (default)"), "quantize_check_default_kv_needs_values",
          "expected -1 naming the default, got %d \"%s\"", rc, kvc_errmsg());
    rc = ex.method->check(&ex, &dv);
    check(rc == 0, "quantize_check_kv_with_values", "expected 0, got %d \"%s\"", rc, kvc_errmsg());
    exp_set_enum(&ex, "apply_to", "k", POS_SCALAR);
    rc = ex.method->check(&ex, &dn);
    check(rc == 0, "quantize_check_k_without_values", "expected 0, got %d", rc);
}

static void test_sink_window(void)
{
    enum { T = 10, D = 3 };
    double K[T * D], V[T * D];
    for (int i = 0; i < T * D; i++) { K[i] = i; V[i] = -i; }
    Experiment ex;
    Compressed c;
    static const struct { long s, w; size_t n; size_t kept[10]; } cases[] = {
        {2, 3, 5, {0, 1, 7, 8, 9}},
        {0, 4, 4, {6, 7, 8, 9}},
        {3, 0, 3, {0, 1, 2}},
        {4, 6, 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
        {1, 1, 2, {0, 9}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int hasv = 0; hasv < 2; hasv++) {
            exp_init(&ex, "sink_window");
            exp_set(&ex, "sinks", cases[k].s, POS_SCALAR);
            exp_set(&ex, "window", cases[k].w, POS_SCALAR);
            int rc = run_method(&c, &ex, K, hasv ? V : NULL, NULL, T, D);
            int ok = rc == 0 && c.n_kept == cases[k].n && c.kept && !c.K && !c.V;
            for (size_t i = 0; ok && i < cases[k].n; i++) ok = c.kept[i] == cases[k].kept[i];
            uint64_t want = 2 * (uint64_t)cases[k].n * D * (hasv ? 2 : 1);
            char name[64];
            snprintf(name, sizeof name, "sink_window_kept_s%ld_w%ld%s", cases[k].s, cases[k].w, hasv ? "_withV" : "");
            check(ok, name, "expected %zu kept starting %zu, got %zu kept starting %zu", cases[k].n, cases[k].kept[0],
                  c.n_kept, c.kept && c.n_kept ? c.kept[0] : (size_t)-1);
            snprintf(name, sizeof name, "sink_window_bytes_s%ld_w%ld%s", cases[k].s, cases[k].w, hasv ? "_withV" : "");
            check(c.bytes == want, name, "expected %llu, got %llu", (unsigned long long)want,
                  (unsigned long long)c.bytes);
            compressed_free(&c);
        }
    }
    exp_init(&ex, "sink_window");
    check(exp_param(&ex, "sinks") == 4, "sink_window_default_sinks_4", "got %ld", exp_param(&ex, "sinks"));

    Dims d = {.T = T, .D = D, .has_values = 1, .has_query = 1};
    exp_init(&ex, "sink_window");
    ex.src = 1;
    exp_set(&ex, "sinks", 4, POS_DEFAULT);
    exp_set(&ex, "window", 7, 2);
    int rc = ex.method->check(&ex, &d);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.1.window.2") && strstr(kvc_errmsg(), "10"),
          "sink_window_check_exceeds_T", "expected -1 naming experiments.1.window.2 and tokens = 10, got %d \"%s\"", rc,
          kvc_errmsg());
    exp_set(&ex, "window", 6, 2);
    rc = ex.method->check(&ex, &d);
    check(rc == 0, "sink_window_check_equal_T_ok", "expected 0 for 4 + 6 = 10, got %d \"%s\"", rc, kvc_errmsg());
    exp_set(&ex, "sinks", 0, POS_SCALAR);
    exp_set(&ex, "window", 0, POS_SCALAR);
    rc = ex.method->check(&ex, &d);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.1.window"), "sink_window_check_keeps_nothing",
          "expected -1, got %d \"%s\"", rc, kvc_errmsg());
}

static void test_topk(void)
{
    enum { T = 6, D = 2 };
    double K[T * D], V[T * D];
    for (int i = 0; i < T * D; i++) { K[i] = i; V[i] = i * 0.5; }
    /* ties: tokens 0, 2, 3 share 0.2; token 4 is largest; token 5 equals token 1 */
    const double w[T] = {0.2, 0.05, 0.2, 0.2, 0.3, 0.05};
    static const struct { long budget; size_t kept[6]; } cases[] = {
        {1, {4}}, {2, {0, 4}}, {3, {0, 2, 4}}, {4, {0, 2, 3, 4}}, {5, {0, 1, 2, 3, 4}}, {6, {0, 1, 2, 3, 4, 5}},
    };
    Experiment ex;
    Compressed c;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int hasv = 0; hasv < 2; hasv++) {
            exp_init(&ex, "topk_attention");
            exp_set(&ex, "budget", cases[k].budget, POS_SCALAR);
            int rc = run_method(&c, &ex, K, hasv ? V : NULL, w, T, D);
            size_t n = (size_t)cases[k].budget;
            int ok = rc == 0 && c.n_kept == n && c.kept && !c.K && !c.V;
            for (size_t i = 0; ok && i < n; i++) ok = c.kept[i] == cases[k].kept[i];
            char name[64], got[64] = "";
            for (size_t i = 0; c.kept && i < c.n_kept && i < 6; i++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%zu ", c.kept[i]);
            snprintf(name, sizeof name, "topk_kept_ties_earlier_ascending_b%ld%s", cases[k].budget, hasv ? "_withV" : "");
            check(ok, name, "expected first of [%zu %zu ...], got [%s]", cases[k].kept[0], n > 1 ? cases[k].kept[1] : 0,
                  got);
            uint64_t want = 2 * (uint64_t)n * D * (hasv ? 2 : 1) + 4 * (uint64_t)n;
            snprintf(name, sizeof name, "topk_bytes_b%ld%s", cases[k].budget, hasv ? "_withV" : "");
            check(c.bytes == want, name, "expected %llu, got %llu", (unsigned long long)want, (unsigned long long)c.bytes);
            compressed_free(&c);
        }
    }
    /* ascending order of indices even when the weights favour later tokens */
    const double w2[T] = {0.01, 0.02, 0.03, 0.04, 0.4, 0.5};
    exp_init(&ex, "topk_attention");
    exp_set(&ex, "budget", 3, POS_SCALAR);
    run_method(&c, &ex, K, V, w2, T, D);
    check(c.kept && c.kept[0] == 3 && c.kept[1] == 4 && c.kept[2] == 5, "topk_kept_sorted_ascending",
          "expected [3 4 5], got [%zu %zu %zu]", c.kept ? c.kept[0] : 0, c.kept ? c.kept[1] : 0, c.kept ? c.kept[2] : 0);
    compressed_free(&c);
    check(method_find("topk_attention")->needs_query == 1, "topk_needs_query", "expected needs_query = 1");

    Dims d = {.T = T, .D = D, .has_values = 1, .has_query = 1};
    exp_init(&ex, "topk_attention");
    ex.src = 3;
    exp_set(&ex, "budget", T + 1, 0);
    int rc = ex.method->check(&ex, &d);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.3.budget.0"), "topk_check_budget_gt_T",
          "expected -1 with experiments.3.budget.0, got %d \"%s\"", rc, kvc_errmsg());
    exp_set(&ex, "budget", T, 0);
    rc = ex.method->check(&ex, &d);
    check(rc == 0, "topk_check_budget_eq_T", "expected 0, got %d \"%s\"", rc, kvc_errmsg());
}

static void test_lowrank(void)
{
    enum { T = 7, D = 5 };
    double K[T * D], V[T * D];
    lcg_state = 21;
    for (int i = 0; i < T * D; i++) K[i] = lcg() * 2;
    for (int i = 0; i < T * D; i++) V[i] = lcg();
    Experiment ex;
    Compressed c;

    /* full rank reconstructs */
    exp_init(&ex, "lowrank");
    check(exp_param(&ex, "apply_to") == APPLY_K, "lowrank_default_apply_to_k", "got %ld", exp_param(&ex, "apply_to"));
    exp_set(&ex, "rank", 5, POS_SCALAR);
    exp_set_enum(&ex, "apply_to", "kv", POS_SCALAR);
    int rc = run_method(&c, &ex, K, V, NULL, T, D);
    double ek = 0, ev = 0;
    for (int i = 0; rc == 0 && c.K && c.V && i < T * D; i++) {
        ek = fmax(ek, fabs(c.K[i] - K[i]));
        ev = fmax(ev, fabs(c.V[i] - V[i]));
    }
    check(rc == 0 && c.K && c.V && ek <= 1e-12 && ev <= 1e-12, "lowrank_full_rank_reconstructs",
          "max error K %g V %g (rc %d)", ek, ev, rc);
    uint64_t stored = 2 * ((uint64_t)T * 5 + 5 * (uint64_t)D);
    check(c.bytes == 2 * stored, "lowrank_bytes_kv_full", "expected %llu, got %llu", (unsigned long long)(2 * stored),
          (unsigned long long)c.bytes);
    compressed_free(&c);

    /* wide matrix: T = 3 < D = 5, full rank 3 */
    exp_init(&ex, "lowrank");
    exp_set(&ex, "rank", 3, POS_SCALAR);
    rc = run_method(&c, &ex, K, NULL, NULL, 3, D);
    ek = 0;
    for (int i = 0; rc == 0 && c.K && i < 3 * D; i++) ek = fmax(ek, fabs(c.K[i] - K[i]));
    check(rc == 0 && c.K && ek <= 1e-12 && !c.V, "lowrank_full_rank_wide", "max error %g", ek);
    check(c.bytes == 2 * (3 * 3 + 3 * D), "lowrank_bytes_wide", "expected %d, got %llu", 2 * (3 * 3 + 3 * D),
          (unsigned long long)c.bytes);
    compressed_free(&c);

    /* truncation error is the tail of the singular values (Eckart-Young), bytes per covered tensor */
    double U[T * D], S[D], Vt[D * D];
    la_svd(U, S, Vt, K, T, D);
    for (long r = 1; r <= 4; r++) {
        exp_init(&ex, "lowrank");
        exp_set(&ex, "rank", r, POS_SCALAR);
        rc = run_method(&c, &ex, K, V, NULL, T, D);
        double err2 = 0, tail2 = 0;
        for (int i = 0; rc == 0 && c.K && i < T * D; i++) err2 += (c.K[i] - K[i]) * (c.K[i] - K[i]);
        for (int k = (int)r; k < D; k++) tail2 += S[k] * S[k];
        char name[64];
        snprintf(name, sizeof name, "lowrank_rank%ld_error_is_sv_tail", r);
        check(rc == 0 && c.K && !c.V && fabs(sqrt(err2) - sqrt(tail2)) < 1e-12, name,
              "expected ||K - K'|| = %.17g, got %.17g", sqrt(tail2), sqrt(err2));
        uint64_t want = 2 * ((uint64_t)T * (uint64_t)r + (uint64_t)r * D) + 2 * (uint64_t)T * D;   /* V in FP16 */
        snprintf(name, sizeof name, "lowrank_bytes_rank%ld_k_withV", r);
        check(c.bytes == want, name, "expected %llu, got %llu", (unsigned long long)want, (unsigned long long)c.bytes);
        compressed_free(&c);
    }
    exp_init(&ex, "lowrank");
    exp_set(&ex, "rank", 2, POS_SCALAR);
    exp_set_enum(&ex, "apply_to", "v", POS_SCALAR);
    rc = run_method(&c, &ex, K, V, NULL, T, D);
    check(rc == 0 && !c.K && c.V && c.bytes == 2 * (uint64_t)T * D + 2 * (T * 2 + 2 * D), "lowrank_apply_v",
          "expected K NULL, V set, bytes %d; got bytes %llu", 2 * T * D + 2 * (T * 2 + 2 * D), (unsigned long long)c.bytes);
    compressed_free(&c);
    exp_init(&ex, "lowrank");
    exp_set(&ex, "rank", 2, POS_SCALAR);
    rc = run_method(&c, &ex, K, NULL, NULL, T, D);
    check(rc == 0 && c.bytes == 2 * (T * 2 + 2 * D), "lowrank_bytes_keys_only", "expected %d, got %llu",
          2 * (T * 2 + 2 * D), (unsigned long long)c.bytes);
    compressed_free(&c);

    /* check(): rank <= min(T, D) */
    Dims d = {.T = T, .D = D, .has_values = 1, .has_query = 1}, dw = {.T = 3, .D = D};
    exp_init(&ex, "lowrank");
    ex.src = 4;
    exp_set(&ex, "rank", 6, 1);
    rc = ex.method->check(&ex, &d);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.4.rank.1") && strstr(kvc_errmsg(), "= 5"),
          "lowrank_check_rank_gt_D", "expected -1 naming experiments.4.rank.1 and min = 5, got %d \"%s\"", rc,
          kvc_errmsg());
    exp_set(&ex, "rank", 4, POS_SCALAR);
    rc = ex.method->check(&ex, &dw);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.4.rank") && strstr(kvc_errmsg(), "= 3"),
          "lowrank_check_rank_gt_T", "expected -1 naming experiments.4.rank and min = 3, got %d \"%s\"", rc,
          kvc_errmsg());
    exp_set(&ex, "rank", 3, POS_SCALAR);
    rc = ex.method->check(&ex, &dw);
    check(rc == 0, "lowrank_check_rank_eq_min", "expected 0, got %d \"%s\"", rc, kvc_errmsg());
    exp_set_enum(&ex, "apply_to", "kv", 0);
    rc = ex.method->check(&ex, &dw);
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.4.apply_to.0"), "lowrank_check_kv_needs_values",
          "expected -1 naming experiments.4.apply_to.0, got %d \"%s\"", rc, kvc_errmsg());
}

/* ================================================================ config */

#define DATA_QV "\"data\": {\"tokens\": 16, \"head_dim\": 4, \"keys\": {\"generator\": \"normal\"}, " \
                "\"values\": {\"generator\": \"normal\"}, \"query\": {\"generator\": \"look_back\", \"token\": 3}}"
#define DATA_K "\"data\": {\"tokens\": 16, \"head_dim\": 4, \"keys\": {\"generator\": \"normal\"}}"

static int parse(Config *cfg, const char *text, char *const *sets, size_t n_sets)
{
    return config_parse(cfg, "mem.json", text, strlen(text), sets, n_sets);
}

static const char *param_str(const Experiment *ex, const char *name)
{
    static char buf[64];
    int i = method_param_index(ex->method, name);
    if (i < 0) return "?";
    if (ex->method->params[i].kind == PARAM_ENUM) return ex->method->params[i].choices[ex->p[i]];
    snprintf(buf, sizeof buf, "%ld", ex->p[i]);
    return buf;
}

/* Expects a failed parse whose message starts with `prefix` and contains every one of the NULL-terminated needles. */
static void expect_error(const char *name, const char *text, char *const *sets, size_t n_sets, const char *prefix, ...)
{
    Config cfg;
    int rc = parse(&cfg, text, sets, n_sets);
    const char *msg = kvc_errmsg();
    int ok = rc == -1 && strncmp(msg, prefix, strlen(prefix)) == 0 && !strchr(msg, '\n');
    const char *missing = NULL;
    va_list ap;
    va_start(ap, prefix);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, s) && !missing) missing = s;
    va_end(ap);
    check(ok && !missing, name, "expected rc -1, a message starting \"%s\"%s%s%s; got rc %d \"%s\"", prefix,
          missing ? " containing \"" : "", missing ? missing : "", missing ? "\"" : "", rc, msg);
    config_free(&cfg);   /* safe on a failed parse */
    config_free(&cfg);   /* and idempotent */
}

static void test_config(void)
{
    Config cfg;
    char name[96];

    /* grid order: last key fastest; default labels; defaults filled */
    const char *g1 = "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": [8, 4], "
                     "\"axis\": [\"token\", \"channel\"]}]}";
    int rc = parse(&cfg, g1, NULL, 0);
    check(rc == 0 && cfg.n_exps == 4, "config_grid_count", "expected 4 rows, got rc %d n %zu (%s)", rc, cfg.n_exps,
          rc ? kvc_errmsg() : "");
    static const char *const want_g1[] = {"quantize bits=8 axis=token", "quantize bits=8 axis=channel",
                                          "quantize bits=4 axis=token", "quantize bits=4 axis=channel"};
    for (size_t i = 0; rc == 0 && i < 4 && i < cfg.n_exps; i++) {
        snprintf(name, sizeof name, "config_grid_last_key_fastest_%zu", i);
        check(strcmp(cfg.exps[i].label, want_g1[i]) == 0, name, "expected \"%s\", got \"%s\"", want_g1[i],
              cfg.exps[i].label);
    }
    if (rc == 0 && cfg.n_exps == 4) {
        const Experiment *e = &cfg.exps[3];
        check(exp_param(e, "bits") == 4 && exp_param(e, "axis") == 1 && e->pos[0] == 1 && e->pos[1] == 1 &&
                  e->src == 0,
              "config_grid_values_and_positions", "row 3: bits %ld axis %ld pos %d %d", exp_param(e, "bits"),
              exp_param(e, "axis"), e->pos[0], e->pos[1]);
        check(exp_param(e, "apply_to") == APPLY_KV && e->pos[2] == POS_DEFAULT, "config_default_apply_to_kv",
              "expected kv (default), got %s pos %d", param_str(e, "apply_to"), e->pos[2]);
        check(strcmp(cfg.seed, "0") == 0, "config_default_seed_0", "got %s", cfg.seed);
        check(cfg.dims.T == 16 && cfg.dims.D == 4 && cfg.dims.has_values && cfg.dims.has_query && cfg.q_token == 3 &&
                  cfg.q_weight == 1.0 && cfg.q_noise == 0.0,
              "config_data_fields", "T %zu D %zu values %d query %d token %zu weight %g noise %g", cfg.dims.T,
              cfg.dims.D, cfg.dims.has_values, cfg.dims.has_query, cfg.q_token, cfg.q_weight, cfg.q_noise);
    }
    config_free(&cfg);
    check(cfg.exps == NULL && cfg.n_exps == 0 && cfg.seed == NULL, "config_free_zeroes", "Config not reset");

    /* the object's key order decides which axis is fastest */
    const char *g2 = "{" DATA_QV ", \"experiments\": [{\"axis\": [\"channel\", \"token\"], \"method\": \"quantize\", "
                     "\"bits\": [2, 3, 4]}]}";
    rc = parse(&cfg, g2, NULL, 0);
    int ok = rc == 0 && cfg.n_exps == 6;
    static const char *const want_g2[] = {"quantize axis=channel bits=2", "quantize axis=channel bits=3",
                                          "quantize axis=channel bits=4", "quantize axis=token bits=2",
                                          "quantize axis=token bits=3", "quantize axis=token bits=4"};
    const char *bad = NULL;
    for (size_t i = 0; ok && i < 6; i++)
        if (strcmp(cfg.exps[i].label, want_g2[i]) != 0) { ok = 0; bad = cfg.exps[i].label; }
    check(ok, "config_grid_key_order", "expected \"%s\" ... , got rc %d n %zu mismatch \"%s\" (%s)", want_g2[0], rc,
          cfg.n_exps, bad ? bad : "", rc ? kvc_errmsg() : "");
    config_free(&cfg);

    /* default quantize axis is token; scalar values are "scalar" positions; several experiment objects */
    const char *g3 = "{\"seed\": 7, " DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": 4}, "
                     "{\"method\": \"sink_window\", \"window\": 8}, {\"method\": \"lowrank\", \"rank\": [1, 2]}, "
                     "{\"method\": \"topk_attention\", \"budget\": 5}]}";
    rc = parse(&cfg, g3, NULL, 0);
    ok = rc == 0 && cfg.n_exps == 5;
    check(ok, "config_multi_experiments", "expected 5 rows, got rc %d n %zu (%s)", rc, cfg.n_exps, rc ? kvc_errmsg() : "");
    if (ok) {
        const Experiment *e = &cfg.exps[0];
        check(exp_param(e, "axis") == 0 && e->pos[1] == POS_DEFAULT && e->pos[0] == POS_SCALAR,
              "config_default_axis_token", "got axis %s pos %d bits pos %d", param_str(e, "axis"), e->pos[1], e->pos[0]);
        check(strcmp(e->label, "quantize bits=4") == 0, "config_default_label_scalar", "got \"%s\"", e->label);
        check(exp_param(&cfg.exps[1], "sinks") == 4 && strcmp(cfg.exps[1].label, "sink_window window=8") == 0,
              "config_default_sinks_4", "got sinks %ld label \"%s\"", exp_param(&cfg.exps[1], "sinks"),
              cfg.exps[1].label);
        check(cfg.exps[2].src == 2 && cfg.exps[3].src == 2 && cfg.exps[4].src == 3 &&
                  exp_param(&cfg.exps[3], "rank") == 2 && exp_param(&cfg.exps[2], "apply_to") == APPLY_K,
              "config_src_indices_and_lowrank_defaults", "src %zu %zu %zu", cfg.exps[2].src, cfg.exps[3].src,
              cfg.exps[4].src);
        check(strcmp(cfg.seed, "7") == 0, "config_seed_number", "got %s", cfg.seed);
    }
    config_free(&cfg);

    /* labels: placeholders filled, including defaults; non-placeholders kept literally */
    const char *l1 = "{" DATA_QV ", \"experiments\": [{\"label\": \"INT{bits} per-{axis} {apply_to} {x y} {} {bits\", "
                     "\"method\": \"quantize\", \"bits\": [8, 4], \"axis\": \"channel\"}]}";
    rc = parse(&cfg, l1, NULL, 0);
    ok = rc == 0 && cfg.n_exps == 2;
    check(ok && strcmp(cfg.exps[0].label, "INT8 per-channel kv {x y} {} {bits") == 0 &&
              strcmp(cfg.exps[1].label, "INT4 per-channel kv {x y} {} {bits") == 0,
          "config_label_placeholders", "expected \"INT8 per-channel kv {x y} {} {bits\", got rc %d \"%s\" (%s)", rc,
          ok ? cfg.exps[0].label : "", rc ? kvc_errmsg() : "");
    config_free(&cfg);
    const char *l2 = "{" DATA_QV ", \"experiments\": [{\"label\": \"{rank}{rank}-{apply_to}\", \"method\": \"lowrank\", "
                     "\"rank\": 3, \"apply_to\": \"kv\"}]}";
    rc = parse(&cfg, l2, NULL, 0);
    check(rc == 0 && cfg.n_exps == 1 && strcmp(cfg.exps[0].label, "33-kv") == 0, "config_label_adjacent_placeholders",
          "expected \"33-kv\", got rc %d \"%s\"", rc, rc == 0 && cfg.n_exps ? cfg.exps[0].label : kvc_errmsg());
    config_free(&cfg);

    /* --set: applied in order, dotted path with list index, can add keys */
    char *sets[] = {"experiments.0.bits.1=2", "data.tokens=20", "experiments.0.bits.1=3", "seed=\"123456789012345678901234\"",
                    "experiments.0.axis=\"channel\""};
    const char *s1 = "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": [8, 4]}]}";
    rc = parse(&cfg, s1, sets, 5);
    ok = rc == 0 && cfg.n_exps == 2;
    check(ok && exp_param(&cfg.exps[1], "bits") == 3 && exp_param(&cfg.exps[0], "bits") == 8 && cfg.dims.T == 20,
          "config_set_in_order", "expected bits [8, 3] and tokens 20, got rc %d bits[1] %ld T %zu (%s)", rc,
          ok ? exp_param(&cfg.exps[1], "bits") : -1, cfg.dims.T, rc ? kvc_errmsg() : "");
    check(ok && exp_param(&cfg.exps[0], "axis") == 1 && cfg.seed && strcmp(cfg.seed, "123456789012345678901234") == 0,
          "config_set_adds_key_and_big_seed", "got axis %ld seed %s", ok ? exp_param(&cfg.exps[0], "axis") : -1,
          cfg.seed ? cfg.seed : "(null)");
    config_free(&cfg);

    /* a buffer that is not NUL-terminated: only the first len bytes are the document */
    const char *nt = "{" DATA_K ", \"experiments\": [{\"method\": \"quantize\", \"apply_to\": \"k\"}]}\n   trailing";
    size_t ntlen = strlen(nt) - strlen("   trailing");   /* the document and "\n"; spaces follow outside len */
    char *copy = xmalloc(strlen(nt) + 1);
    memcpy(copy, nt, strlen(nt) + 1);
    rc = config_parse(&cfg, "mem.json", copy, ntlen, NULL, 0);
    check(rc == 0 && cfg.n_exps == 1, "config_parse_reads_only_len_bytes",
          "a valid document followed by a newline (and a space beyond len) gave rc %d \"%s\"", rc,
          rc ? kvc_errmsg() : "");
    config_free(&cfg);
    free(copy);
    rc = config_parse(&cfg, "mem.json", nt, strlen(nt), NULL, 0);
    check(rc == -1 && strncmp(kvc_errmsg(), "mem.json:", 9) == 0 && strstr(kvc_errmsg(), "after the end"),
          "config_trailing_garbage_rejected", "expected an error after the end of the document, got rc %d \"%s\"", rc,
          kvc_errmsg());
    config_free(&cfg);

    /* config_load reads a file the same way */
    char path[] = "/tmp/kvc_test_units_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        const char *ftext = "{" DATA_K ", \"experiments\": [{\"method\": \"lowrank\", \"rank\": [1, 4]}]}\n";
        FILE *f = fdopen(fd, "w");
        fputs(ftext, f);
        fclose(f);
        rc = config_load(&cfg, path, NULL, 0);
        check(rc == 0 && cfg.n_exps == 2 && strcmp(cfg.exps[1].label, "lowrank rank=4") == 0, "config_load_file",
              "got rc %d n %zu (%s)", rc, cfg.n_exps, rc ? kvc_errmsg() : "");
        config_free(&cfg);
        unlink(path);
        rc = config_load(&cfg, path, NULL, 0);
        check(rc == -1 && strncmp(kvc_errmsg(), path, strlen(path)) == 0, "config_load_missing_file",
              "expected an error naming the file, got rc %d \"%s\"", rc, kvc_errmsg());
        config_free(&cfg);
    } else {
        check(0, "config_load_file", "mkstemp failed");
    }

    /* errors: start with the name, name the JSON path */
    expect_error("config_err_bits_list_item", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": [8, 1]}]}",
                 NULL, 0, "mem.json: experiments.0.bits.1: ", "must be in 2..8", "(got 1)", NULL);
    expect_error("config_err_bits_not_integer", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": 4.5}]}",
                 NULL, 0, "mem.json: experiments.0.bits: ", "integer", NULL);
    expect_error("config_err_axis_typo", "{" DATA_QV ", \"experiments\": [{\"method\": \"lowrank\", \"rank\": 2}, "
                 "{\"method\": \"quantize\", \"axis\": [\"token\", \"chanel\"]}]}",
                 NULL, 0, "mem.json: experiments.1.axis.1: ", "did you mean \"channel\"", NULL);
    expect_error("config_err_unknown_key", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bitz\": 4}]}",
                 NULL, 0, "mem.json: experiments.0.bitz: ", "did you mean \"bits\"", NULL);
    expect_error("config_err_unknown_method", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantise\"}]}",
                 NULL, 0, "mem.json: experiments.0.method: ", "quantize", NULL);
    expect_error("config_err_missing_required", "{" DATA_QV ", \"experiments\": [{\"method\": \"sink_window\"}]}",
                 NULL, 0, "mem.json: experiments.0.window: ", "missing", NULL);
    expect_error("config_err_rank_gt_min_dims", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}, "
                 "{\"method\": \"lowrank\", \"rank\": [2, 5]}]}",
                 NULL, 0, "mem.json: experiments.1.rank.1: ", "(got 5)", NULL);
    expect_error("config_err_budget_gt_T", "{" DATA_QV ", \"experiments\": [{\"method\": \"topk_attention\", \"budget\": 17}]}",
                 NULL, 0, "mem.json: experiments.0.budget: ", "16", NULL);
    expect_error("config_err_sinks_window_gt_T", "{" DATA_QV ", \"experiments\": [{\"method\": \"sink_window\", \"window\": 13}]}",
                 NULL, 0, "mem.json: experiments.0.window: ", "4 + 13", NULL);
    expect_error("config_err_topk_needs_query", "{" DATA_K ", \"experiments\": [{\"method\": \"topk_attention\", \"budget\": 2}]}",
                 NULL, 0, "mem.json: experiments.0.method: ", "query", NULL);
    expect_error("config_err_quantize_default_kv_needs_values", "{" DATA_K ", \"experiments\": [{\"method\": \"quantize\"}]}",
                 NULL, 0, "mem.json: experiments.0.apply_to (default): ", "values", NULL);
    expect_error("config_err_unknown_placeholder", "{" DATA_QV ", \"experiments\": [{\"label\": \"x{bitz}\", "
                 "\"method\": \"quantize\"}]}",
                 NULL, 0, "mem.json: experiments.0.label: ", "{bitz}", "{bits}", NULL);
    expect_error("config_err_empty_list", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": []}]}",
                 NULL, 0, "mem.json: experiments.0.bits: ", "empty", NULL);
    expect_error("config_err_nested_list", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": [[4]]}]}",
                 NULL, 0, "mem.json: experiments.0.bits.0: ", "lists of lists", NULL);
    expect_error("config_err_missing_tokens", "{\"data\": {\"head_dim\": 4, \"keys\": {\"generator\": \"normal\"}}, "
                 "\"experiments\": [{\"method\": \"quantize\", \"apply_to\": \"k\"}]}",
                 NULL, 0, "mem.json: data.tokens: ", "missing", NULL);
    expect_error("config_err_outlier_channel", "{\"data\": {\"tokens\": 4, \"head_dim\": 4, \"keys\": {\"generator\": "
                 "\"normal\", \"outliers\": [{\"channel\": 1, \"scale\": 2}, {\"channel\": 4, \"scale\": 2}]}}, "
                 "\"experiments\": [{\"method\": \"quantize\", \"apply_to\": \"k\"}]}",
                 NULL, 0, "mem.json: data.keys.outliers.1.channel: ", "0..3", NULL);
    expect_error("config_err_duplicate_key", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": 4, "
                 "\"bits\": 8}]}",
                 NULL, 0, "mem.json: experiments.0.bits: ", "twice", NULL);
    expect_error("config_err_top_level_key", "{\"sed\": 1, " DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}]}",
                 NULL, 0, "mem.json: sed: ", "did you mean \"seed\"", NULL);
    expect_error("config_err_not_object", "[1, 2]", NULL, 0, "mem.json: ", "object", NULL);
    expect_error("config_err_no_experiments", "{" DATA_QV ", \"experiments\": []}", NULL, 0, "mem.json: experiments: ",
                 "empty", NULL);
    expect_error("config_err_seed_string", "{\"seed\": \"12a\", " DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}]}",
                 NULL, 0, "mem.json: seed: ", "\"12a\"", NULL);
    expect_error("config_err_malformed_json", "{\n  \"data\": {,\n}", NULL, 0, "mem.json:2:", "malformed JSON", NULL);
    expect_error("config_err_truncated_json", "{\"data\": {", NULL, 0, "mem.json:1:", "end of file", NULL);
    expect_error("config_err_unknown_top_key", "{\"a\": 1}", NULL, 0, "mem.json: ", "a: unknown key", NULL);
    /* errors after --set: the rewritten value is validated at its path */
    char *bad_set1[] = {"experiments.0.bits.1=9"};
    expect_error("config_err_after_set", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"bits\": [8, 4]}]}",
                 bad_set1, 1, "mem.json: experiments.0.bits.1: ", "(got 9)", NULL);
    char *bad_set2[] = {"experiments.3.bits=4"};
    expect_error("config_err_set_bad_index", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}]}", bad_set2, 1,
                 "--set experiments.3.bits=4: ", "3", NULL);
    char *bad_set3[] = {"data.tokns.x=4"};
    expect_error("config_err_set_unknown_key", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}]}", bad_set3, 1,
                 "--set data.tokns.x=4: ", "did you mean \"tokens\"", NULL);
    char *bad_set4[] = {"data.tokens=abc"};
    expect_error("config_err_set_bad_json", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}]}", bad_set4, 1,
                 "--set data.tokens=abc: ", "JSON", NULL);
    char *bad_set5[] = {"data..tokens=1"};
    expect_error("config_err_set_empty_component", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\"}]}",
                 bad_set5, 1, "--set data..tokens=1: ", "empty component", NULL);
    /* one-line messages even when a value contains a newline */
    expect_error("config_err_one_line", "{" DATA_QV ", \"experiments\": [{\"method\": \"quantize\", \"axis\": \"a\\nb\"}]}",
                 NULL, 0, "mem.json: experiments.0.axis: ", "must be one of", NULL);

    /* a NUL byte inside the buffer */
    const char withnul[] = "{\"seed\": 1}\0 ";
    rc = config_parse(&cfg, "mem.json", withnul, sizeof withnul - 1, NULL, 0);
    check(rc == -1 && strncmp(kvc_errmsg(), "mem.json:1:12:", 14) == 0 && strstr(kvc_errmsg(), "NUL"),
          "config_err_nul_byte", "expected mem.json:1:12: ... NUL, got rc %d \"%s\"", rc, kvc_errmsg());
    config_free(&cfg);

    /* config_free on a zeroed Config leaves it zeroed (freeing it again is safe), and accepts NULL */
    Config z, zero;
    memset(&z, 0, sizeof z);
    memset(&zero, 0, sizeof zero);
    config_free(&z);
    config_free(&z);
    config_free(NULL);
    check(memcmp(&z, &zero, sizeof z) == 0, "config_free_zeroed_and_null", "%s",
          "config_free changed a zeroed Config");
}

/* ================================================================ report */

static Row make_row(const Experiment *ex, const double *v, const unsigned char *has)
{
    Row r;
    memset(&r, 0, sizeof r);
    r.ex = ex;
    for (int c = 0; c < NCOLS; c++) {
        r.v[c] = v[c];
        r.has[c] = has[c];
    }
    return r;
}

/* Code points of one line (up to '\n'). */
static size_t line_width(const char *s)
{
    size_t w = 0;
    for (; *s && *s != '\n'; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

static void test_report(void)
{
    Format fmt;
    check(report_format_parse("table", &fmt) == 0 && fmt == FORMAT_TABLE && report_format_parse("csv", &fmt) == 0 &&
              fmt == FORMAT_CSV && report_format_parse("jsonl", &fmt) == 0 && fmt == FORMAT_JSONL,
          "report_format_parse_valid", "a valid name was rejected");
    check(report_format_parse("CSV", &fmt) == -1 && report_format_parse("", &fmt) == -1 &&
              report_format_parse("json", &fmt) == -1,
          "report_format_parse_invalid", "an invalid name was accepted");

    FILE *f = tmpfile();
    report_header(f, FORMAT_CSV);
    char *s = slurp(f);
    /* the ten v1 columns first (a public interface), then the columns added for many heads and queries */
    const char *hdr = "label,method,attn_error,k_error,v_error,k_error_ordinary,k_zeroed_ordinary,bytes,baseline_bytes,ratio,"
                      "attn_error_p50,attn_error_p95,attn_error_max,attn_kl,retained_mass,topk_recall,decode_ns,decode_speedup,decode_ns_mad,"
                      "lm_kl,lm_nll,lm_nll_delta,lm_top1,recall_acc,id\n";
    check(strcmp(s, hdr) == 0, "report_csv_header", "expected \"%s\", got \"%s\"", hdr, s);
    free(s);
    fclose(f);
    f = tmpfile();
    report_header(f, FORMAT_JSONL);
    report_header(f, FORMAT_TABLE);
    check(ftell(f) == 0, "report_header_only_csv", "table/jsonl header wrote %ld bytes", ftell(f));
    fclose(f);

    Experiment ex;
    exp_init(&ex, "quantize");
    exp_set(&ex, "bits", 4, POS_SCALAR);
    char label1[] = "a,b \"c\"";
    ex.label = label1;
    const double v1[NCOLS] = {0.1, 0, 1.0 / 3.0, 0, 0, 1024, 2048, 2};
    const unsigned char h1[NCOLS] = {1, 0, 1, 0, 0, 1, 1, 1};
    Row r1 = make_row(&ex, v1, h1);

    f = tmpfile();
    report_row(f, FORMAT_CSV, &r1, "0123456789abcdef");
    s = slurp(f);
    const char *want = "\"a,b \"\"c\"\"\",quantize,0.1,,0.3333333333333333,,,1024,2048,2,,,,,,,,,,,,,,,0123456789abcdef\n";
    check(strcmp(s, want) == 0, "report_csv_quoting_and_empty_cells", "expected %s got %s", want, s);
    free(s);
    fclose(f);

    static const struct { const char *label, *field; } q[] = {
        {"plain label", "plain label"},
        {"line\nbreak", "\"line\nbreak\""},
        {"cr\rhere", "\"cr\rhere\""},
        {"say \"hi\"", "\"say \"\"hi\"\"\""},
        {"", ""},
    };
    for (size_t k = 0; k < sizeof q / sizeof q[0]; k++) {
        char lb[64], nm[64], w2[128];
        snprintf(lb, sizeof lb, "%s", q[k].label);
        ex.label = lb;
        const double v0[NCOLS] = {0};
        const unsigned char h0[NCOLS] = {0};
        Row r = make_row(&ex, v0, h0);
        f = tmpfile();
        report_row(f, FORMAT_CSV, &r, "0123456789abcdef");
        s = slurp(f);
        snprintf(w2, sizeof w2, "%s,quantize,,,,,,,,,,,,,,,,,,,,,,,0123456789abcdef\n", q[k].field);
        snprintf(nm, sizeof nm, "report_csv_field_%zu", k);
        check(strcmp(s, w2) == 0, nm, "expected [%s] got [%s]", w2, s);
        free(s);
        fclose(f);
    }

    /* JSONL: escapes, params, null for n/a and for non-finite values */
    char label2[] = "q\"uote\\back\nnew\ttab\x01" "ctl\x1f" "end\r";
    ex.label = label2;
    exp_set_enum(&ex, "axis", "channel", POS_SCALAR);
    const double v2[NCOLS] = {0.25, INFINITY, 0, 1e-300, 0, 10, 20, 2};
    const unsigned char h2[NCOLS] = {1, 1, 0, 1, 0, 1, 1, 1};
    Row r2 = make_row(&ex, v2, h2);
    f = tmpfile();
    report_row(f, FORMAT_JSONL, &r2, "0123456789abcdef");
    s = slurp(f);
    const char *wj = "{\"label\":\"q\\\"uote\\\\back\\nnew\\ttab\\u0001ctl\\u001fend\\u000d\",\"method\":\"quantize\","
                     "\"params\":{\"bits\":4,\"axis\":\"channel\",\"apply_to\":\"kv\"},\"attn_error\":0.25,"
                     "\"k_error\":null,\"v_error\":null,\"k_error_ordinary\":1e-300,\"k_zeroed_ordinary\":null,"
                     "\"bytes\":10,\"baseline_bytes\":20,\"ratio\":2,\"attn_error_p50\":null,\"attn_error_p95\":null,"
                     "\"attn_error_max\":null,\"attn_kl\":null,\"retained_mass\":null,\"topk_recall\":null,"
                     "\"decode_ns\":null,\"decode_speedup\":null,\"decode_ns_mad\":null,\"lm_kl\":null,\"lm_nll\":null,"
                     "\"lm_nll_delta\":null,\"lm_top1\":null,\"recall_acc\":null,\"id\":\"0123456789abcdef\"}\n";
    check(strcmp(s, wj) == 0, "report_jsonl_exact", "expected %s got %s", wj, s);
    cJSON *j = cJSON_Parse(s);
    const cJSON *jl = j ? cJSON_GetObjectItemCaseSensitive(j, "label") : NULL;
    check(jl && cJSON_IsString(jl) && strcmp(jl->valuestring, label2) == 0, "report_jsonl_parses_back",
          "the JSON line does not parse back to the same label");
    const cJSON *jr = j ? cJSON_GetObjectItemCaseSensitive(j, "ratio") : NULL;
    check(jr && cJSON_IsNumber(jr) && jr->valuedouble == 2.0 && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "k_error")),
          "report_jsonl_values", "ratio or null k_error wrong");
    cJSON_Delete(j);
    free(s);
    fclose(f);
    /* one JSON line per row, even with a newline in the label */
    f = tmpfile();
    report_row(f, FORMAT_JSONL, &r2, "0123456789abcdef");
    report_row(f, FORMAT_JSONL, &r1, "0123456789abcdef");
    s = slurp(f);
    size_t nl = 0;
    for (char *p = s; *p; p++) nl += *p == '\n';
    check(nl == 2, "report_jsonl_one_line_per_row", "expected 2 lines, got %zu", nl);
    free(s);
    fclose(f);
    /* table format writes nothing per row */
    f = tmpfile();
    report_row(f, FORMAT_TABLE, &r1, "0123456789abcdef");
    check(ftell(f) == 0, "report_row_table_writes_nothing", "wrote %ld bytes", ftell(f));
    fclose(f);

    /* table: columns with a value somewhere, every line the same width */
    Experiment e1, e2, e3;
    exp_init(&e1, "quantize");
    exp_init(&e2, "sink_window");
    exp_init(&e3, "lowrank");
    char la[] = "a", lb2[] = "a longer label, here", lc[] = "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87";   /* "ключ" */
    e1.label = la;
    e2.label = lb2;
    e3.label = lc;
    const double t1[NCOLS] = {0.0123, 0, 0, 0, 0, 100, 200, 2};
    const double t2[NCOLS] = {1.5, 0, 0, 0, 0, 12345, 200, 200.0 / 12345};
    const double t3[NCOLS] = {0, 0.5, 0, 0, 0, 7, 200, 200.0 / 7};
    const unsigned char th1[NCOLS] = {1, 0, 0, 0, 0, 1, 1, 1}, th3[NCOLS] = {0, 1, 0, 0, 0, 1, 1, 1};
    Row rows[3] = {make_row(&e1, t1, th1), make_row(&e2, t2, th1), make_row(&e3, t3, th3)};
    f = tmpfile();
    report_table(f, rows, 3);
    s = slurp(f);
    size_t widths[8], nlines = 0;
    for (char *p = s; *p && nlines < 8;) {
        widths[nlines++] = line_width(p);
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    int same = nlines == 4;
    for (size_t i = 1; same && i < nlines; i++) same = widths[i] == widths[0];
    check(same, "report_table_lines_same_width", "expected 4 lines of equal width, got %zu lines, widths %zu %zu %zu %zu:\n%s",
          nlines, widths[0], nlines > 1 ? widths[1] : 0, nlines > 2 ? widths[2] : 0, nlines > 3 ? widths[3] : 0, s);
    check(strncmp(s, "label               ", 20) == 0 && strstr(s, "attn_error") && strstr(s, "k_error") &&
              !strstr(s, "v_error") && !strstr(s, "k_zeroed") && strstr(s, "baseline_bytes"),
          "report_table_shown_columns", "expected label first and only columns with values, got:\n%s", s);
    check(strstr(s, "0.012") && strstr(s, "12345") && strstr(s, "28.571") && strstr(s, "  2.000\n"),
          "report_table_cells", "expected 3-decimal cells and integer bytes, got:\n%s", s);
    /* right alignment: "bytes" header and its cells end in the same column */
    char *hb = strstr(s, "  bytes"), *l2 = strchr(s, '\n') + 1;
    l2 = strchr(l2, '\n') + 1;   /* third line: the 12345 row */
    char *c12 = strstr(l2, "12345");
    check(hb && c12 && (hb + 7 - s) == (c12 + 5 - l2), "report_table_right_aligned",
          "\"bytes\" ends at %ld, \"12345\" at %ld", hb ? (long)(hb + 7 - s) : -1L, c12 ? (long)(c12 + 5 - l2) : -1L);
    free(s);
    fclose(f);
    /* ASCII-only rows: the same width in bytes */
    f = tmpfile();
    report_table(f, rows, 2);
    s = slurp(f);
    char *nl1 = strchr(s, '\n'), *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL, *nl3 = nl2 ? strchr(nl2 + 1, '\n') : NULL;
    check(nl1 && nl2 && nl3 && nl3[1] == '\0' && nl1 - s == nl2 - nl1 - 1 && nl2 - nl1 == nl3 - nl2,
          "report_table_ascii_equal_bytes", "got:\n%s", s);
    free(s);
    fclose(f);
    /* the label column is as wide as the widest label in code points, not bytes */
    char lu[] = "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87 \xd0\xba\xd0\xbb\xd1\x8e\xd1\x87 \xd0\xba\xd0\xbb\xd1\x8e\xd1\x87";
    e3.label = lu;   /* "ключ ключ ключ": 14 code points, 26 bytes */
    Row urows[2] = {make_row(&e1, t1, th1), make_row(&e3, t3, th3)};
    f = tmpfile();
    report_table(f, urows, 2);
    s = slurp(f);
    check(strncmp(s, "label           method", 22) == 0, "report_table_label_width_code_points",
          "expected \"label\" padded to 14 columns then \"  method\", got:\n%s", s);
    free(s);
    fclose(f);
    /* empty table: the header alone */
    f = tmpfile();
    report_table(f, rows, 0);
    s = slurp(f);
    check(strcmp(s, "label  method\n") == 0, "report_table_empty", "expected \"label  method\\n\", got \"%s\"", s);
    free(s);
    fclose(f);
}

int main(void)
{
    la_init();
    test_size_arith();
    test_fmt_double();
    test_edit_distance();
    test_la_sum();
    test_products();
    test_svd();
    test_svd_right();
    test_attention();
    test_registry();
    test_quantize();
    test_sink_window();
    test_topk();
    test_lowrank();
    test_config();
    test_report();
    printf("# %d passed, %d failed\n", check_passes, check_failures);
    return check_failures ? 1 : 0;
}
