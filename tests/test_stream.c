/* test_stream: the pieces that let kvc run hold one layer at a time (README "Limits").
 * - normacc (src/eval/normacc.h): the norm of a vector fed in pieces equals la_norm of the whole vector bit for bit,
 *   whatever the pieces (random lengths, zeros fed as normacc_zeros, tails of every length mod 16), and on la_norm's
 *   overflow/underflow fallback. Bit equality holds where OpenBLAS runs its AVX2 dot kernel (scripts/numeric-env.sh
 *   pins it; tests/run.sh sources that script), so the check is skipped when OPENBLAS_CORETYPE is not Haswell/Zen.
 * - synth_data_stream (src/data/synth.h): every layer data_layer makes, and every run of KV heads data_heads makes,
 *   equals that part of synth_data bit for bit,
 *   and Q, O and the outlier mask are the same, for configs that use every generator feature (lowrank keys with
 *   noise, head correlation, outliers and outlier channels, RoPE pre and post, look_back and key_gaussian queries with
 *   head correlation and bias, observation queries, sinks, recent tokens, heavy hitters, spread, no values).
 */
#include "check.h"
#include "base/linalg.h"
#include "base/util.h"
#include "config/config.h"
#include "data/synth.h"
#include "eval/normacc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 88172645463325252ULL;
static double urand(void)
{
    lcg ^= lcg << 13;
    lcg ^= lcg >> 7;
    lcg ^= lcg << 17;
    return (double)(lcg >> 11) * 0x1p-53;
}

static void test_normacc(void)
{
    const char *core = getenv("OPENBLAS_CORETYPE");
    if (!core || (strcmp(core, "Haswell") != 0 && strcmp(core, "Zen") != 0)) {
        printf("SKIP normacc_equals_la_norm: OPENBLAS_CORETYPE is not Haswell or Zen (source scripts/numeric-env.sh)\n");
        return;
    }
    int bad = 0, trials = 0;
    double scales[] = {1.0, 1e-3, 1e5, 1e200, 1e-200, 1e-160, 1e160};
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
        for (int trial = 0; trial < 150; trial++, trials++) {
            size_t n = trial % 5 == 0 ? 1 + (size_t)(urand() * 40) : 1 + (size_t)(urand() * 3000);
            double *x = xmalloc(n * sizeof *x);
            int zeros = trial % 3 == 0;
            for (size_t i = 0; i < n; i++) x[i] = (urand() - 0.5) * scales[si] * (urand() < 0.01 ? 1000 : 1);
            if (zeros)   /* runs of zeros, fed as normacc_zeros */
                for (size_t i = n / 3; i < n / 3 + n / 4; i++) x[i] = 0.0;
            NormAcc a;
            normacc_init(&a);
            for (size_t i = 0; i < n;) {
                size_t k = (size_t)(urand() * 50);
                if (k > n - i) k = n - i;
                if (zeros && i == n / 3 && n / 4 > 0) k = n / 4;
                int allz = k > 0;
                for (size_t j = i; j < i + k; j++) allz &= x[j] == 0.0;
                if (allz && zeros) normacc_zeros(&a, k);
                else normacc_add(&a, x + i, k);
                i += k;
            }
            double want = la_norm(x, n), got = normacc_norm(&a);
            if (dbits(want) != dbits(got)) {
                if (bad < 3) printf("# n %zu scale %g: la_norm %.17g normacc %.17g\n", n, scales[si], want, got);
                bad++;
            }
            free(x);
        }
    check(bad == 0, "normacc_equals_la_norm", "%d of %d vectors differ", bad, trials);
    /* regimes: tiny, then ordinary (the sequential sum is dropped: bit for bit); ordinary, then one above 2^480
     * after the sum was dropped (restarted from the kernel's sum: within a few ulp, flagged); ordinary only (the
     * sequential sum is never kept) */
    {
        enum { NX = 4000 };
        double *x = xmalloc(NX * sizeof *x);
        for (int c = 0; c < 3; c++) {
            for (size_t i = 0; i < NX; i++) x[i] = (urand() - 0.5) * (c == 0 && i < NX / 2 ? 1e-160 : 1.0);
            if (c == 1) x[NX - 7] = 3e200;
            NormAcc b;
            normacc_init(&b);
            for (size_t i = 0; i < NX; i += 500) normacc_add(&b, x + i, 500);
            double want = la_norm(x, NX), got = normacc_norm(&b);
            double rel = fabs(got - want) / want;
            if (c == 1)
                check(b.approx && rel < 1e-14, "normacc_restarted_sum", "approx %d rel %.3g (la_norm %.17g, normacc %.17g)",
                      b.approx, rel, want, got);
            else
                check(!b.approx && !b.fb_live && dbits(want) == dbits(got), c ? "normacc_ordinary_drops_fallback" :
                      "normacc_tiny_then_ordinary", "approx %d live %d: la_norm %.17g normacc %.17g", b.approx, b.fb_live,
                      want, got);
        }
        free(x);
    }
    NormAcc a;
    normacc_init(&a);
    check(normacc_norm(&a) == 0.0, "normacc_empty", "got %g", normacc_norm(&a));
    double inf[3] = {1.0, INFINITY, 2.0};
    normacc_add(&a, inf, 3);
    check(isinf(normacc_norm(&a)), "normacc_inf", "got %g", normacc_norm(&a));
}

static int same(const double *a, const double *b, size_t n)
{
    if (!a || !b) return a == b;
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* threads: synth_set_threads for the streamed data and a second whole copy (the first whole copy: 1) */
static void stream_case(const char *name, const char *json, int threads)
{
    Config cfg;
    if (config_parse(&cfg, name, json, strlen(json), NULL, 0)) {
        check(0, name, "config_parse: %s", kvc_errmsg());
        return;
    }
    Data w, s, w2;
    synth_set_threads(1);
    int rw = synth_data(&w, &cfg);
    synth_set_threads(threads);
    int rs = synth_data_stream(&s, &cfg), rw2 = synth_data(&w2, &cfg);
    synth_set_threads(1);
    if (rw2 == 0) {   /* layers made again from recorded pieces on threads: the same numbers */
        size_t n = w.L * w.H * w.T * w.D;
        char cname[128];
        snprintf(cname, sizeof cname, "%s_whole_same_%s", name, threads > 1 ? "on_threads" : "again");
        check(rw == 0 && same(w.K, w2.K, n) && same(w.V, w2.V, n) && same(w.Q, w2.Q, w.L * w.Hq * w.N * w.D), cname,
              "whole data differs");
        data_free(&w2);
    }
    if (rw || rs) {
        check(0, name, "synth: %d %d %s", rw, rs, kvc_errmsg());
        if (!rw) data_free(&w);
        if (!rs) data_free(&s);
        config_free(&cfg);
        return;
    }
    size_t m = w.H * w.T * w.D;
    int ok = s.stream && !s.K && !s.V && w.K && !w.stream;
    ok &= same(w.Q, s.Q, w.L * w.Hq * w.N * w.D) && same(w.O, s.O, w.L * w.Hq * w.W * w.D);
    ok &= (!w.outlier_mask) == (!s.outlier_mask) &&
          (!w.outlier_mask || memcmp(w.outlier_mask, s.outlier_mask, w.L * w.D) == 0);
    ok &= w.rope.dims == s.rope.dims && data_has_values(&w) == data_has_values(&s);
    size_t order[3] = {w.L - 1, 0, w.L / 2};   /* any order: each layer from its own states */
    for (size_t i = 0; i < 3; i++) {
        size_t l = order[i];
        DataLayer dw, ds;
        data_layer(&dw, &w, l);
        data_layer(&ds, &s, l);
        ok &= same(dw.K, ds.K, m) && same(dw.V, ds.V, m) && !dw.ownK && ds.ownK;
        data_layer_free(&dw);
        data_layer_free(&ds);
    }
    check(ok, name, "a streamed layer differs from the whole data");
    /* any run of KV heads of any layer, made alone (groups and query heads cut anywhere): the whole data's slice */
    int okh = 1;
    size_t hm = w.T * w.D;
    for (size_t l = 0; l < w.L; l++)
        for (size_t h0 = 0; h0 < w.H; h0++)
            for (size_t nh = 1; h0 + nh <= w.H; nh++) {
                DataLayer dw, ds;
                data_heads(&dw, &w, l, h0, nh);
                data_heads(&ds, &s, l, h0, nh);
                okh &= same(dw.K, ds.K, nh * hm) && same(dw.V, ds.V, nh * hm) && dw.K == w.K + (l * w.H + h0) * hm;
                data_layer_free(&dw);
                data_layer_free(&ds);
            }
    char hname[128];
    snprintf(hname, sizeof hname, "%s_heads", name);
    check(okh, hname, "KV heads made alone differ from the whole data");
    data_free(&w);
    data_free(&s);
    config_free(&cfg);
}

int main(void)
{
    la_init();
    test_normacc();
    stream_case("stream_lowrank_rope_post_shaping",
                "{\"seed\": 5, \"data\": {\"layers\": 3, \"kv_heads\": 4, \"q_heads\": 8, \"tokens\": 96, \"head_dim\": 16,"
                " \"keys\": {\"generator\": \"lowrank\", \"rank\": 4, \"scale\": 0.3, \"noise\": 0.1,"
                " \"outliers\": [{\"channel\": 3, \"scale\": 8}], \"outlier_channels\": {\"count\": 2, \"scale\": [5, 20]}},"
                " \"values\": {\"generator\": \"normal\"},"
                " \"head_correlation\": {\"rho\": 0.4, \"group\": 2}, \"rope\": {\"base\": 10000, \"dims\": 16, \"cache\": \"post\"},"
                " \"sinks\": {\"tokens\": 2, \"share\": 0.3}, \"recent\": {\"tokens\": 8, \"share\": 0.4},"
                " \"heavy_hitters\": {\"count\": 4, \"share\": 0.2, \"spread\": 1.0},"
                " \"query\": {\"generator\": \"look_back\", \"count\": 3, \"weight\": 0.5, \"noise\": 0.5,"
                " \"head_correlation\": 0.5, \"bias\": 1.0}, \"observe\": {\"window\": 5, \"weight\": 0.5, \"noise\": 0.5}},"
                " \"experiments\": [{\"method\": \"none\"}]}", 1);
    stream_case("stream_normal_rope_pre",
                "{\"seed\": 11, \"data\": {\"layers\": 4, \"kv_heads\": 2, \"q_heads\": 6, \"tokens\": 64, \"head_dim\": 8,"
                " \"keys\": {\"generator\": \"normal\"}, \"values\": {\"generator\": \"normal\"},"
                " \"head_correlation\": {\"rho\": 1.0},"
                " \"rope\": {\"base\": 10000, \"dims\": 8, \"cache\": \"pre\"}, \"sinks\": {\"tokens\": 1, \"share\": 0.5},"
                " \"heavy_hitters\": {\"count\": 3, \"share\": 0.3},"
                " \"query\": {\"generator\": \"key_gaussian\", \"count\": 2, \"noise\": 0.2, \"head_correlation\": 1.0},"
                " \"observe\": {\"window\": 4, \"generator\": \"key_gaussian\", \"noise\": 0.3}},"
                " \"experiments\": [{\"method\": \"none\"}]}", 2);
    stream_case("stream_keys_only",
                "{\"seed\": 3, \"data\": {\"layers\": 2, \"kv_heads\": 3, \"tokens\": 40, \"head_dim\": 8,"
                " \"keys\": {\"generator\": \"lowrank\", \"rank\": 2}}, \"experiments\": [{\"method\": \"quantize\", \"bits\": 4, \"apply_to\": \"k\"}]}", 1);
    /* parts of 2^17 draws: made again in 8 pieces, here on 3 threads */
    stream_case("stream_pieces_on_threads",
                "{\"seed\": 7, \"data\": {\"layers\": 3, \"kv_heads\": 4, \"q_heads\": 8, \"tokens\": 512, \"head_dim\": 64,"
                " \"keys\": {\"generator\": \"lowrank\", \"rank\": 4, \"scale\": 0.3, \"noise\": 0.1,"
                " \"outlier_channels\": {\"count\": 2, \"scale\": [5, 20]}}, \"values\": {\"generator\": \"normal\"},"
                " \"head_correlation\": {\"rho\": 0.4, \"group\": 2}, \"rope\": {\"base\": 10000, \"dims\": 64, \"cache\": \"post\"},"
                " \"query\": {\"generator\": \"look_back\", \"count\": 2, \"weight\": 0.5, \"noise\": 0.5}},"
                " \"experiments\": [{\"method\": \"none\"}]}", 3);
    return check_failures ? 1 : 0;
}
