/* test_metrics.c: unit tests of the pieces of the multi-head data path that are easiest to pin down alone:
 * eval_percentile against numpy's np.percentile (values printed by numpy 1.24.2), the RoPE rotation (known
 * angles, inverse, interleaved pairs, channels past dims untouched), attn_log_softmax and attn_forward_scores.
 * Run from the project root. Prints "PASS name" or "FAIL name: why" per check; exits 1 if any check failed. */
#include "base/attention.h"
#include "eval/evaluate.h"
#include "base/linalg.h"
#include "data/rope.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int near(double a, double b, double tol) { return fabs(a - b) <= tol * (fabs(b) > 1 ? fabs(b) : 1); }

static void test_percentile(void)
{
    /* np.percentile(a, [50, 95]) */
    static const struct { double x[8]; size_t n; double p50, p95; } cases[] = {
        {{3, 1, 4, 1, 5, 9, 2, 6}, 8, 3.5, 7.95},
        {{2.5}, 1, 2.5, 2.5},
        {{1, 2}, 2, 1.5, 1.95},
        {{0.1, 0.7, 0.3, 0.9, 0.5, 0.2, 0.8}, 7, 0.5, 0.87},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double a[8], b[8];
        memcpy(a, cases[k].x, sizeof a);
        memcpy(b, cases[k].x, sizeof b);
        double p50 = eval_percentile(a, cases[k].n, 50), p95 = eval_percentile(b, cases[k].n, 95);
        char name[64];
        snprintf(name, sizeof name, "percentile_numpy_case_%zu", k);
        check(near(p50, cases[k].p50, 1e-15) && near(p95, cases[k].p95, 1e-15), name, "got %.17g %.17g, want %g %g",
              p50, p95, cases[k].p50, cases[k].p95);
    }
    double one[1] = {0.123456789};
    check(eval_percentile(one, 1, 95) == 0.123456789, "percentile_single_value_exact", "got %.17g", one[0]);
    double withnan[3] = {1, NAN, 2};
    check(isnan(eval_percentile(withnan, 3, 50)), "percentile_nan_propagates", "expected NaN, as numpy");
}

static void test_rope(void)
{
    Rope r;
    rope_init(&r, 10000.0, 8, 0, 4, 10);   /* D = 10, dims 8: channels 8, 9 pass through */
    double x[10], y[10];
    for (int i = 0; i < 10; i++) x[i] = i + 1;
    memcpy(y, x, sizeof y);
    size_t p1 = 1;
    rope_apply(&r, y, &p1, 1, 0);
    /* pair 0 (channels 0 and 4), inv_freq 1: angle 1 */
    double c = cos(1.0), s = sin(1.0);
    check(y[0] == 1 * c - 5 * s && y[4] == 5 * c + 1 * s, "rope_half_pair0_angle1", "got %.17g %.17g", y[0], y[4]);
    /* pair 1 (channels 1 and 5): inv_freq = 1 / 10000^(2/8) = 0.1 */
    double c1 = cos(0.1), s1 = sin(0.1);
    check(near(y[1], 2 * c1 - 6 * s1, 1e-15) && near(y[5], 6 * c1 + 2 * s1, 1e-15), "rope_half_pair1_freq",
          "got %.17g %.17g", y[1], y[5]);
    check(y[8] == 9 && y[9] == 10, "rope_channels_past_dims_untouched", "got %g %g", y[8], y[9]);
    rope_apply(&r, y, &p1, 1, 1);
    int ok = 1;
    for (int i = 0; i < 10; i++) ok &= near(y[i], x[i], 1e-15);
    check(ok, "rope_inverse_undoes", "got %.17g %.17g ...", y[0], y[1]);
    double z[20];
    for (int i = 0; i < 20; i++) z[i] = 1.0;
    rope_apply(&r, z, NULL, 2, 0);   /* row 0 at position 0: unchanged */
    ok = 1;
    for (int i = 0; i < 10; i++) ok &= z[i] == 1.0;
    check(ok && z[10] != 1.0, "rope_position_0_identity", "row 0 changed or row 1 did not");
    rope_free(&r);
    rope_free(&r);

    rope_init(&r, 10000.0, 4, 1, 3, 4);   /* interleaved: pairs (0, 1), (2, 3) */
    double w[4] = {1, 2, 3, 4};
    size_t p2 = 2;
    rope_apply(&r, w, &p2, 1, 0);
    check(w[0] == 1 * cos(2.0) - 2 * sin(2.0) && w[1] == 2 * cos(2.0) + 1 * sin(2.0), "rope_interleaved_pairs",
          "got %.17g %.17g", w[0], w[1]);
    rope_free(&r);
}

static void test_attention_parts(void)
{
    const double K[6] = {1, 0, 0, 1, 1, 1}, V[6] = {1, 2, 3, 4, 5, 6}, q[2] = {0.5, -1};
    double out[2], w[3], s[3], s2[3], ls[3], tmp[3];
    attn_forward_scores(out, w, s, q, K, V, 3, 2);
    attn_scores(s2, q, K, 3, 2);
    check(memcmp(s, s2, sizeof s) == 0 && s[0] == 0.5 / sqrt(2.0), "attn_forward_scores_copies_scores",
          "got %.17g %.17g %.17g", s[0], s[1], s[2]);
    double out2[2], w2[3];
    attn_forward(out2, w2, q, K, V, 3, 2);
    check(memcmp(out, out2, sizeof out) == 0 && memcmp(w, w2, sizeof w) == 0, "attn_forward_scores_same_output",
          "outputs differ");
    attn_log_softmax(ls, s, tmp, 3);
    int ok = 1;
    for (int t = 0; t < 3; t++) ok &= near(exp(ls[t]), w[t], 1e-15);
    check(ok, "attn_log_softmax_matches_weights", "exp(ls) %.17g vs w %.17g", exp(ls[0]), w[0]);
    const double big[2] = {0, -2000};
    attn_log_softmax(ls, big, tmp, 2);
    check(ls[0] == 0 && ls[1] == -2000 && isfinite(ls[1]), "attn_log_softmax_finite_where_weight_underflows",
          "got %g %g", ls[0], ls[1]);
}

int main(void)
{
    la_init();
    test_percentile();
    test_rope();
    test_attention_parts();
    return check_failures ? 1 : 0;
}
