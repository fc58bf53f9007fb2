/* test_edge: numerical edge cases of the quality path through the C API (README "Numerical edge cases").
 *
 * la_norm: numpy's sqrt(ddot) bit for bit in the normal range, the scaled fallback (finite, accurate) where the
 * squares overflow or underflow; the attention kernel on all-zero, constant, one-token, one-channel and huge
 * (finite) inputs: weights sum to 1, nothing is NaN; quantize and lowrank on all-zero, constant, extreme and
 * degenerate tensors: zeros stay zeros, no NaN; data_check refuses what could overflow.
 * Prints "PASS <name>" / "FAIL <name>: <why>"; exits 1 on any failure.
 */
#include "base/attention.h"
#include "base/linalg.h"
#include "methods/methods.h"
#include "data/synth.h"
#include "base/util.h"
#include "check.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg_state = 7;
static double lcg(void)   /* [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int all_finite(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static double rel(double a, double b) { return b == 0 ? fabs(a) : fabs(a - b) / fabs(b); }

/* ---------------------------------------------------------------- la_norm */

static void test_norm(void)
{
    enum { N = 1000 };
    static double x[N], y[N];
    for (size_t i = 0; i < N; i++) x[i] = lcg() * 3;
    double plain = sqrt(cblas_ddot(N, x, 1, x, 1)), n1 = la_norm(x, N);
    check(memcmp(&plain, &n1, sizeof plain) == 0, "norm_plain_is_sqrt_ddot", "%.17g vs %.17g", n1, plain);

    static const double scales[] = {1e-300, 1e-200, 1e-160, 1e-140, 1e-30, 1e30, 1e140, 1e160, 1e200, 1e300};
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        for (size_t i = 0; i < N; i++) y[i] = x[i] * scales[k];
        double got = la_norm(y, N), want = n1 * scales[k];
        char name[64];
        snprintf(name, sizeof name, "norm_scaled_%g", scales[k]);
        check(isfinite(got) && rel(got, want) < 1e-13, name, "got %.17g, want %.17g (rel %g)", got, want,
              rel(got, want));
    }
    /* subnormal elements */
    for (size_t i = 0; i < N; i++) y[i] = x[i] * 1e-310;
    double got = la_norm(y, N);
    check(got > 0 && rel(got, n1 * 1e-310) < 1e-9, "norm_subnormal", "got %.17g, want about %.17g", got, n1 * 1e-310);
    double one[1] = {DBL_MAX};
    check(la_norm(one, 1) == DBL_MAX, "norm_dbl_max", "got %.17g", la_norm(one, 1));
    double two[2] = {DBL_MAX, DBL_MAX};
    check(isinf(la_norm(two, 2)), "norm_beyond_dbl_max_is_inf", "got %.17g (the true norm is not representable)",
          la_norm(two, 2));
    double z[4] = {0, -0.0, 0, 0};
    check(la_norm(z, 4) == 0, "norm_zero", "got %g", la_norm(z, 4));
    check(la_norm(z, 0) == 0, "norm_empty", "got %g", la_norm(z, 0));
    double nan4[4] = {1, NAN, 2, 3}, inf4[4] = {1, INFINITY, 1e300, 3};
    check(isnan(la_norm(nan4, 4)), "norm_nan_in_nan_out", "got %g", la_norm(nan4, 4));
    check(isinf(la_norm(inf4, 4)), "norm_inf_in_inf_out", "got %g", la_norm(inf4, 4));
    /* one huge element among small ones: dominated by it */
    double mix[3] = {1e200, 1, -1e-200};
    check(la_norm(mix, 3) == 1e200, "norm_mixed_magnitudes", "got %.17g", la_norm(mix, 3));
}

/* ---------------------------------------------------------------- attention */

static void test_attention(void)
{
    enum { T = 9, D = 4 };
    double K[T * D], V[T * D], q[D], out[D], w[T], s[T];
    /* all zero: uniform weights, zero output */
    memset(K, 0, sizeof K);
    memset(V, 0, sizeof V);
    memset(q, 0, sizeof q);
    attn_forward(out, w, q, K, V, T, D);
    int ok = 1;
    for (int t = 0; t < T; t++) ok &= w[t] == 1.0 / T;
    for (int j = 0; j < D; j++) ok &= out[j] == 0;
    check(ok, "attn_all_zero_uniform", "w[0] = %.17g, out[0] = %g", w[0], out[0]);
    /* constant keys, any query: uniform weights; the output is the mean of V */
    for (int i = 0; i < T * D; i++) { K[i] = 2.5; V[i] = lcg(); }
    for (int j = 0; j < D; j++) q[j] = lcg() * 10;
    attn_forward(out, w, q, K, V, T, D);
    ok = 1;
    for (int t = 0; t < T; t++) ok &= w[t] == 1.0 / T;
    check(ok && all_finite(out, D), "attn_constant_keys_uniform", "w[0] = %.17g", w[0]);
    /* huge but finite scores: one-hot, no NaN */
    for (int i = 0; i < T * D; i++) K[i] = lcg() * 1e150;
    for (int j = 0; j < D; j++) q[j] = K[3 * D + j];
    attn_forward_scores(out, w, s, q, K, V, T, D);
    double sum = 0;
    for (int t = 0; t < T; t++) sum += w[t];
    check(all_finite(s, T) && all_finite(w, T) && all_finite(out, D) && fabs(sum - 1) < 1e-15, "attn_huge_scores",
          "sum of w %.17g", sum);
    /* tiny scores (underflow towards 0): uniform, no NaN */
    for (int i = 0; i < T * D; i++) K[i] = lcg() * 1e-200;
    for (int j = 0; j < D; j++) q[j] = K[3 * D + j];
    attn_forward(out, w, q, K, V, T, D);
    ok = 1;
    for (int t = 0; t < T; t++) ok &= w[t] == 1.0 / T;
    check(ok && all_finite(out, D), "attn_tiny_scores_uniform", "w[0] = %.17g", w[0]);
    /* D = 1 and T = 1 */
    double k1[3] = {1, -2, 3}, v1[3] = {4, 5, 6}, q1 = 0.5, o1, w1[3];
    attn_forward(&o1, w1, &q1, k1, v1, 3, 1);
    check(isfinite(o1) && fabs(w1[0] + w1[1] + w1[2] - 1) < 1e-15 && w1[2] > w1[0] && w1[0] > w1[1], "attn_D_1",
          "w = %g %g %g", w1[0], w1[1], w1[2]);
    attn_forward(&o1, w1, &q1, k1, v1, 1, 1);
    check(w1[0] == 1 && o1 == 4, "attn_T_1_D_1", "w %g out %g", w1[0], o1);
    double ls[3], tmp[3], sc[3] = {-1e300, 0, 1e300};
    attn_log_softmax(ls, sc, tmp, 3);
    check(ls[2] == 0 && ls[1] == -1e300 && ls[0] == -2e300, "log_softmax_extreme_scores",
          "got %g %g %g", ls[0], ls[1], ls[2]);
}

/* ---------------------------------------------------------------- methods */

static char label[] = "edge";

static void exp_init(Experiment *ex, const char *method)
{
    memset(ex, 0, sizeof *ex);
    ex->method = method_find(method);
    if (!ex->method) {
        printf("FAIL method_find_%s: not in the registry\n", method);
        exit(1);
    }
    ex->label = label;
    for (size_t i = 0; i < ex->method->n_params; i++) {
        ex->p[i] = ex->method->params[i].def == PARAM_REQUIRED ? 0 : ex->method->params[i].def;
        ex->num[i] = ex->method->params[i].num_def;
        ex->pos[i] = POS_DEFAULT;
    }
}

static void exp_set(Experiment *ex, const char *name, long v)
{
    int i = method_param_index(ex->method, name);
    if (i < 0) {
        printf("FAIL param_%s_%s: no such parameter\n", ex->method->name, name);
        exit(1);
    }
    ex->p[i] = v;
    ex->pos[i] = POS_SCALAR;
}

static int run(Compressed *c, const Experiment *ex, const double *K, const double *V, const double *w, size_t T, size_t D)
{
    MethodInput in = {.T = T, .D = D, .K = K, .V = V, .w_ref = w};
    memset(c, 0, sizeof *c);
    return ex->method->apply(c, ex, &in);
}

/* quantize every (bits, axis) on x; returns the largest |x' - x| / max|x| (0 for x = 0), or -1 on NaN/failure */
static double quantize_err(const double *x, size_t T, size_t D, long bits, long axis)
{
    Experiment ex;
    Compressed c;
    exp_init(&ex, "quantize");
    exp_set(&ex, "bits", bits);
    exp_set(&ex, "axis", axis);
    exp_set(&ex, "apply_to", APPLY_K);
    if (run(&c, &ex, x, NULL, NULL, T, D) != 0 || !c.K || !all_finite(c.K, T * D)) {
        compressed_free(&c);
        return -1;
    }
    double amax = 0, e = 0;
    for (size_t i = 0; i < T * D; i++) {
        if (fabs(x[i]) > amax) amax = fabs(x[i]);
        if (fabs(c.K[i] - x[i]) > e) e = fabs(c.K[i] - x[i]);
    }
    compressed_free(&c);
    return amax == 0 ? e : e / amax;
}

static void test_quantize(void)
{
    enum { T = 6, D = 5 };
    double x[T * D];
    char name[80];
    for (long axis = 0; axis < 2; axis++)
        for (long bits = 2; bits <= 8; bits++) {
            memset(x, 0, sizeof x);
            double e = quantize_err(x, T, D, bits, axis);
            snprintf(name, sizeof name, "quantize_all_zero_b%ld_%s", bits, axis ? "channel" : "token");
            check(e == 0, name, "max error %g (want exactly 0, no NaN)", e);
            for (int i = 0; i < T * D; i++) x[i] = -7.25;
            e = quantize_err(x, T, D, bits, axis);
            snprintf(name, sizeof name, "quantize_constant_b%ld_%s", bits, axis ? "channel" : "token");
            check(e >= 0 && e <= 4 * DBL_EPSILON, name, "max relative error %g", e);
        }
    /* extreme magnitudes: the relative error does not depend on the scale */
    static const double scales[] = {1e-300, 1e-30, 1e30, 1e300};
    for (int i = 0; i < T * D; i++) x[i] = lcg();
    double base = quantize_err(x, T, D, 4, 0);
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        double y[T * D];
        for (int i = 0; i < T * D; i++) y[i] = x[i] * scales[k];
        double e = quantize_err(y, T, D, 4, 0);
        snprintf(name, sizeof name, "quantize_scale_%g", scales[k]);
        check(e >= 0 && fabs(e - base) <= 1e-12, name, "relative error %.17g vs %.17g at scale 1", e, base);
    }
    /* a row of zeros among others, and subnormal values */
    for (int i = 0; i < T * D; i++) x[i] = i < D ? 0 : lcg() * 1e-310;
    check(quantize_err(x, T, D, 8, 0) >= 0, "quantize_subnormal_and_zero_row", "NaN or failure");
}

static void test_lowrank(void)
{
    enum { T = 6, D = 4 };
    double x[T * D];
    Experiment ex;
    Compressed c;
    memset(x, 0, sizeof x);
    for (long r = 1; r <= D; r++) {
        exp_init(&ex, "lowrank");
        exp_set(&ex, "rank", r);
        int rc = run(&c, &ex, x, NULL, NULL, T, D);
        int ok = rc == 0 && c.K && all_finite(c.K, T * D);
        for (int i = 0; ok && i < T * D; i++) ok = c.K[i] == 0;
        char name[64];
        snprintf(name, sizeof name, "lowrank_all_zero_rank%ld", r);
        check(ok, name, "rc %d, K' not all zero", rc);
        compressed_free(&c);
    }
    /* T = 1 and D = 1 at full rank reconstruct; extreme magnitudes stay finite and scale-invariant */
    double row[D] = {1, -2, 3, 0.5}, col[T] = {1, 2, -1, 0, 4, -3};
    exp_init(&ex, "lowrank");
    exp_set(&ex, "rank", 1);
    int rc = run(&c, &ex, row, NULL, NULL, 1, D);
    double e = 0;
    for (int j = 0; rc == 0 && j < D; j++) e = fmax(e, fabs(c.K[j] - row[j]));
    check(rc == 0 && e < 1e-14, "lowrank_T_1", "max error %g", e);
    compressed_free(&c);
    rc = run(&c, &ex, col, NULL, NULL, T, 1);
    e = 0;
    for (int t = 0; rc == 0 && t < T; t++) e = fmax(e, fabs(c.K[t] - col[t]));
    check(rc == 0 && e < 1e-14, "lowrank_D_1", "max error %g", e);
    compressed_free(&c);
    for (int i = 0; i < T * D; i++) x[i] = lcg();
    static const double scales[] = {1e-300, 1e300};
    for (size_t k = 0; k < 2; k++) {
        double y[T * D];
        for (int i = 0; i < T * D; i++) y[i] = x[i] * scales[k];
        exp_set(&ex, "rank", 2);
        rc = run(&c, &ex, y, NULL, NULL, T, D);
        char name[64];
        snprintf(name, sizeof name, "lowrank_scale_%g_finite", scales[k]);
        check(rc == 0 && c.K && all_finite(c.K, T * D), name, "rc %d or a value not finite", rc);
        compressed_free(&c);
    }
}

static void test_evict_all(void)
{
    enum { T = 5, D = 2 };
    double K[T * D] = {0}, V[T * D] = {0}, w[T] = {0.2, 0.2, 0.2, 0.2, 0.2};
    Experiment ex;
    Compressed c;
    exp_init(&ex, "topk_attention");
    exp_set(&ex, "budget", T);
    int rc = run(&c, &ex, K, V, w, T, D);
    check(rc == 0 && (c.kept == NULL || c.n_kept == T), "topk_budget_T_keeps_all", "kept %zu", c.n_kept);
    compressed_free(&c);
    exp_init(&ex, "sink_window");
    exp_set(&ex, "sinks", 2);
    exp_set(&ex, "window", 3);
    rc = run(&c, &ex, K, V, NULL, T, D);
    check(rc == 0 && (c.kept == NULL || c.n_kept == T), "sink_window_sinks_plus_window_T_keeps_all", "kept %zu",
          c.n_kept);
    compressed_free(&c);
}

/* ---------------------------------------------------------------- data_check */

static void test_data_check(void)
{
    enum { T = 4, D = 2 };
    double K[T * D], V[T * D], Q[D];
    for (int i = 0; i < T * D; i++) { K[i] = lcg(); V[i] = lcg(); }
    Q[0] = 1;
    Q[1] = -1;
    Data d = {.L = 1, .H = 1, .Hq = 1, .T = T, .D = D, .N = 1, .K = K, .V = V, .Q = Q};
    check(data_check(&d) == 0, "data_check_ok", "%s", kvc_errmsg());
    K[5] = NAN;
    int rc = data_check(&d);
    check(rc == -1 && strstr(kvc_errmsg(), "keys") && strstr(kvc_errmsg(), "(got nan at flat index 5)"),
          "data_check_nan_keys", "rc %d: %s", rc, kvc_errmsg());
    K[5] = 1e200;
    Q[0] = 1e120;
    rc = data_check(&d);
    check(rc == -1 && strstr(kvc_errmsg(), "could overflow"), "data_check_score_bound", "rc %d: %s", rc, kvc_errmsg());
    Q[0] = 1e90;   /* |q| |k| = 1e290: allowed */
    check(data_check(&d) == 0, "data_check_score_bound_ok", "%s", kvc_errmsg());
    d.Q = NULL;
    d.N = 0;
    K[5] = 1e300;   /* keys only: no score to overflow */
    check(data_check(&d) == 0, "data_check_keys_only_huge_ok", "%s", kvc_errmsg());
    V[0] = -INFINITY;
    rc = data_check(&d);
    check(rc == -1 && strstr(kvc_errmsg(), "values"), "data_check_inf_values", "rc %d: %s", rc, kvc_errmsg());
}

int main(void)
{
    la_init();
    test_norm();
    test_attention();
    test_quantize();
    test_lowrank();
    test_evict_all();
    test_data_check();
    return check_failures ? 1 : 0;
}
