/* test_methods.c: unit tests of the method contract that issue 4 added (apply_layer, split bytes, PARAM_BOOL,
 * ids of parameters added later) and of the eviction, sharing, low-rank and pipeline rules on small hand-made
 * inputs whose answers are worked out here. tests/test_differential_methods.py checks the same methods against
 * the numpy oracle on generated data.
 *
 * Prints "PASS name" or "FAIL name: why" per check; exits 1 if any check failed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/expid.h"
#include "methods/methods.h"
#include "base/util.h"
#include "check.h"

static int parse(Config *cfg, const char *text)
{
    return config_parse(cfg, "mem.json", text, strlen(text), NULL, 0);
}

#define DATA(T, D, H) "\"data\": {\"tokens\": " #T ", \"head_dim\": " #D ", \"kv_heads\": " #H \
    ", \"keys\": {\"generator\": \"normal\"}, \"values\": {\"generator\": \"normal\"}}"

static void test_split_bytes(void)
{
    int ok = 1;
    for (uint64_t total = 0; total < 40; total++)
        for (size_t n = 1; n <= 7; n++) {
            uint64_t sum = 0, lo = UINT64_MAX, hi = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t b = method_split_bytes(total, n, i);
                sum += b;
                lo = b < lo ? b : lo;
                hi = b > hi ? b : hi;
                if (i > 0 && b > method_split_bytes(total, n, i - 1)) ok = 0;   /* the first heads get the extra */
            }
            if (sum != total || hi - lo > 1) ok = 0;
        }
    check(ok, "split_bytes_sum_and_spread", "shares must sum to the total and differ by at most 1, first heads first");
}

/* Runs method m (a config experiment) on one layer of H heads of (T, D) K, V as kvc run does (method_run, stored
 * forms completed); out[H] filled. */
static int run_layer(Compressed *out, const Experiment *ex, const double *K, const double *V, size_t H, size_t T,
                     size_t D, const size_t *pos_unused)
{
    (void)pos_unused;
    MethodInput *in = xcalloc(H, sizeof *in);
    for (size_t h = 0; h < H; h++)
        in[h] = (MethodInput){.T = T, .D = D, .K = K + h * T * D, .V = V ? V + h * T * D : NULL, .head = h,
                              .seed = "0"};
    int rc = method_run(out, ex, in, H, 1);
    free(in);
    return rc;
}

static void test_share_heads(void)
{
    enum { H = 4, T = 3, D = 2 };
    double K[H * T * D], V[H * T * D];
    for (int i = 0; i < H * T * D; i++) {
        K[i] = (double)(i % 7) - 3.0 + (double)(i / (T * D));
        V[i] = 0.25 * (double)i;
    }
    Config cfg;
    int rc = parse(&cfg, "{" DATA(3, 2, 4) ", \"experiments\": [{\"method\": \"share_heads\", \"group\": 2}, "
                         "{\"method\": \"share_heads\", \"group\": 3}]}");
    check(rc == -1 && strstr(kvc_errmsg(), "experiments.1.group: group must divide kv_heads = 4"),
          "share_heads_group_must_divide", "got %d \"%s\"", rc, kvc_errmsg());
    config_free(&cfg);
    rc = parse(&cfg, "{" DATA(3, 2, 4) ", \"experiments\": [{\"method\": \"share_heads\", \"group\": 2}]}");
    Compressed c[H];
    rc = rc ? rc : run_layer(c, &cfg.exps[0], K, V, H, T, D, NULL);
    int ok = rc == 0;
    uint64_t sum = 0;
    for (int h = 0; ok && h < H; h++) {
        int h0 = h / 2 * 2;
        for (int i = 0; i < T * D; i++)
            ok &= c[h].K[i] == (K[h0 * T * D + i] + K[(h0 + 1) * T * D + i]) / 2 &&
                  c[h].V[i] == (V[h0 * T * D + i] + V[(h0 + 1) * T * D + i]) / 2;
        sum += c[h].bytes;
    }
    check(ok, "share_heads_mean_of_group", "every head of a group reads the mean of its K and of its V");
    check(sum == 2 * (2 * T * D * 2), "share_heads_bytes", "expected 2 pooled heads x K,V in FP16 = %d, got %llu",
          2 * (2 * T * D * 2), (unsigned long long)sum);
    /* stored form: the pooled head in FP16, held by the first head of each group, read by the second */
    ok = rc == 0;
    for (int h = 0; ok && h < H; h++) {
        const MethodStored *s = &c[h].stored;
        ok = s->share == 2 && s->reads_first == (h % 2) && !s->none && (h % 2 ? !s->K.codes && !s->V.codes :
             s->K.fmt.type == STORE_F16 && s->K.T == T && s->V.T == T && store_bytes(&s->K) + store_bytes(&s->V) == 2 * T * D * 2);
        for (int i = 0; ok && !(h % 2) && i < T * D; i++)
            ok = store_f16_to_f32(((const uint16_t *)(const void *)s->K.codes)[i]) == (float)store_f16_to_f32(store_f16_from_f64(c[h].K[i]));
    }
    check(ok, "share_heads_stored_form", "the first head of a group holds the pooled FP16 head, the second reads it");
    for (int h = 0; h < H; h++) compressed_free(&c[h]);
    config_free(&cfg);
}

/* K rows with given norms along channel 0 (D = 2). */
static void test_evict_rules(void)
{
    enum { T = 8, D = 2 };
    double K[T * D], V[T * D];
    const double norms[T] = {3, 1, 2, 1, 5, 1, 0.5, 4};
    for (int t = 0; t < T; t++) {
        K[t * D] = norms[t];
        K[t * D + 1] = 0;
        V[t * D] = V[t * D + 1] = t;
    }
    Config cfg;
    int rc = parse(&cfg, "{" DATA(8, 2, 1) ", \"experiments\": [{\"method\": \"knorm\", \"budget\": 3}, "
                         "{\"method\": \"window\", \"keep_ratio\": 0.3}, {\"method\": \"random\", \"budget\": 8}, "
                         "{\"method\": \"knorm\", \"keep_ratio\": 0.01}]}");
    check(rc == 0 && cfg.n_exps == 4, "evict_config", "got %d \"%s\"", rc, kvc_errmsg());
    if (rc) return;
    Compressed c;
    /* smallest norms: 0.5 (t6), then three 1s (t1, t3, t5): the ties go to the earlier tokens */
    rc = run_layer(&c, &cfg.exps[0], K, V, 1, T, D, NULL);
    check(rc == 0 && c.n_kept == 3 && c.kept[0] == 1 && c.kept[1] == 3 && c.kept[2] == 6 && !c.K && !c.V,
          "knorm_ties_to_earlier", "expected kept 1 3 6, got %zu: %zu %zu %zu", c.n_kept, c.kept ? c.kept[0] : 0,
          c.kept && c.n_kept > 1 ? c.kept[1] : 0, c.kept && c.n_kept > 2 ? c.kept[2] : 0);
    check(c.bytes == 3 * 2 * D * 2 + 3 * 4, "knorm_bytes", "FP16 K,V of 3 tokens + 3 int32, got %llu",
          (unsigned long long)c.bytes);
    /* stored form: the kept rows in FP16 (method_run); the index bytes are not a tensor */
    int okst = rc == 0 && c.stored.K.T == 3 && c.stored.V.T == 3 && c.stored.K.fmt.type == STORE_F16 &&
               store_bytes(&c.stored.K) + store_bytes(&c.stored.V) + 3 * 4 == c.bytes;
    for (size_t i = 0; okst && i < 3; i++)
        okst = ((const uint16_t *)(const void *)c.stored.K.codes)[i * D] == store_f16_from_f64(K[c.kept[i] * D]) &&
               ((const uint16_t *)(const void *)c.stored.V.codes)[i * D + 1] == store_f16_from_f64(V[c.kept[i] * D + 1]);
    check(okst, "knorm_stored_kept_rows_fp16", "the stored K and V are not the kept rows in FP16");
    compressed_free(&c);
    /* keep_ratio 0.3 of 8 = floor(2.4) = 2: the last two; no index bytes */
    rc = run_layer(&c, &cfg.exps[1], K, V, 1, T, D, NULL);
    check(rc == 0 && c.n_kept == 2 && c.kept[0] == 6 && c.kept[1] == 7 && c.bytes == 2 * 2 * D * 2,
          "window_keep_ratio_floor", "got %zu kept, bytes %llu", c.n_kept, (unsigned long long)c.bytes);
    compressed_free(&c);
    rc = run_layer(&c, &cfg.exps[2], K, V, 1, T, D, NULL);
    int ok = rc == 0 && c.n_kept == T;
    for (size_t i = 0; ok && i < T; i++) ok = c.kept[i] == i;
    check(ok, "random_full_budget_keeps_all_ascending", "expected 0..7");
    compressed_free(&c);
    rc = run_layer(&c, &cfg.exps[3], K, V, 1, T, D, NULL);
    check(rc == 0 && c.n_kept == 1 && c.kept[0] == 6, "keep_ratio_at_least_one", "max(1, floor(0.08)) = 1 token");
    compressed_free(&c);
    config_free(&cfg);

    const char *bad[][2] = {
        {"{\"method\": \"knorm\"}", "experiments.0.budget: missing required parameter of knorm: budget"},
        {"{\"method\": \"knorm\", \"budget\": 2, \"keep_ratio\": 0.5}", "experiments.0.keep_ratio: give budget or keep_ratio, not both"},
        {"{\"method\": \"window\", \"budget\": 9}", "experiments.0.budget: budget must be in 1..tokens = 8 (got 9)"},
        {"{\"method\": \"h2o\", \"budget\": 2}", "experiments.0.method: h2o scores tokens by the attention of observation queries"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512], name[64];
        snprintf(text, sizeof text, "{" DATA(8, 2, 1) ", \"experiments\": [%s]}", bad[i][0]);
        rc = parse(&cfg, text);
        snprintf(name, sizeof name, "evict_bad_config_%zu", i);
        check(rc == -1 && strstr(kvc_errmsg(), bad[i][1]), name, "expected \"%s\", got \"%s\"", bad[i][1], kvc_errmsg());
        config_free(&cfg);
    }
}

/* lowrank energy on K = diag(3, 2, 1) (T = D = 3): c = [9, 13, 14]. */
static void test_lowrank_energy(void)
{
    const double K[9] = {3, 0, 0, 0, 2, 0, 0, 0, 1};
    const char *energies[] = {"0.5", "0.642857142857143", "0.93", "1"};
    const size_t want[] = {1, 2, 3, 3};
    for (size_t i = 0; i < 4; i++) {
        char text[512], name[64];
        snprintf(text, sizeof text, "{\"data\": {\"tokens\": 3, \"head_dim\": 3, \"keys\": {\"generator\": \"normal\"}}, "
                 "\"experiments\": [{\"method\": \"lowrank\", \"energy\": %s}]}", energies[i]);
        Config cfg;
        int rc = parse(&cfg, text);
        Compressed c;
        if (rc == 0) rc = run_layer(&c, &cfg.exps[0], K, NULL, 1, 3, 3, NULL);
        snprintf(name, sizeof name, "lowrank_energy_%s", energies[i]);
        check(rc == 0 && c.k_rank == want[i] && c.bytes == 2 * (3 * want[i] + want[i] * 3), name,
              "expected rank %zu, got %zu (bytes %llu)", want[i], rc == 0 ? c.k_rank : 0,
              rc == 0 ? (unsigned long long)c.bytes : 0ULL);
        if (rc == 0) compressed_free(&c);
        config_free(&cfg);
    }
}

static void test_pipeline_config(void)
{
    Config cfg;
    int rc = parse(&cfg, "{" DATA(16, 4, 4) ", \"experiments\": [{\"method\": \"pipeline\", "
                         "\"label\": \"g{group} w{steps.1.budget} q{bits}\", "
                         "\"steps\": [{\"method\": \"share_heads\", \"group\": [2, 4]}, {\"method\": \"window\", "
                         "\"budget\": 8}, {\"method\": \"quantize\", \"bits\": [4, 8]}]}, "
                         "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"lowrank\", \"rank\": 2, \"joint\": true}]}]}");
    check(rc == 0 && cfg.n_exps == 5, "pipeline_grid_rows", "expected 2 x 2 + 1 rows, got %d %zu \"%s\"", rc,
          cfg.n_exps, kvc_errmsg());
    if (rc) return;
    const char *labels[] = {"g2 w8 q4", "g2 w8 q8", "g4 w8 q4", "g4 w8 q8", "lowrank rank=2 joint=true"};
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= strcmp(cfg.exps[i].label, labels[i]) == 0;
    check(ok, "pipeline_labels_last_fastest", "got \"%s\", \"%s\", ..., \"%s\"", cfg.exps[0].label, cfg.exps[1].label,
          cfg.exps[4].label);
    check(cfg.exps[1].n_steps == 3 && cfg.exps[1].steps[2].is_step && cfg.exps[1].steps[2].step == 2 &&
              strcmp(exp_param_path(&cfg.exps[1].steps[2], "bits"), "experiments.0.steps.2.bits.1") == 0,
          "pipeline_step_paths", "got %s", exp_param_path(&cfg.exps[1].steps[2], "bits"));
    char *text = expid_text(&cfg, 4);
    check(strstr(text, "method=pipeline\nsteps.0.method=lowrank\nsteps.0.rank=2\nsteps.0.apply_to=k\n"
                       "steps.0.joint=true\n") != NULL,
          "pipeline_id_text", "got \"%s\"", text);
    free(text);
    config_free(&cfg);
    rc = parse(&cfg, "{" DATA(16, 4, 4) ", \"experiments\": [{\"method\": \"lowrank\", \"rank\": 2}]}");
    text = rc ? NULL : expid_text(&cfg, 0);
    check(text && strstr(text, "method=lowrank\nrank=2\napply_to=k\n") && !strstr(text, "energy") &&
              !strstr(text, "joint"),
          "id_omits_later_params_at_default", "got \"%s\"", text ? text : kvc_errmsg());
    free(text);
    config_free(&cfg);
}

/* Index bytes of chained evictions: positional steps store none; otherwise int32 per kept row. */
static void test_pipeline_bytes(void)
{
    enum { H = 2, T = 16, D = 4 };
    double K[H * T * D], V[H * T * D];
    for (int i = 0; i < H * T * D; i++) {
        K[i] = sin(0.7 * i);
        V[i] = cos(0.3 * i);
    }
    Config cfg;
    int rc = parse(&cfg, "{" DATA(16, 4, 2) ", \"experiments\": ["
                         "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", \"budget\": 12}, "
                         "{\"method\": \"sink_window\", \"sinks\": 2, \"window\": 4}]}, "
                         "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"knorm\", \"budget\": 12}, "
                         "{\"method\": \"window\", \"budget\": 5}]}, "
                         "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"share_heads\", \"group\": 2}, "
                         "{\"method\": \"window\", \"budget\": 5}, {\"method\": \"lowrank\", \"rank\": 2, \"apply_to\": \"kv\"}]}]}");
    check(rc == 0, "pipeline_bytes_config", "\"%s\"", kvc_errmsg());
    if (rc) return;
    Compressed c[H];
    rc = run_layer(c, &cfg.exps[0], K, V, H, T, D, NULL);
    /* window 12 keeps 4..15; sinks 2 + window 4 of those: 4, 5, 12..15 */
    check(rc == 0 && c[0].n_kept == 6 && c[0].kept[0] == 4 && c[0].kept[1] == 5 && c[0].kept[2] == 12 &&
              c[0].bytes == 6 * 2 * D * 2 && !c[0].K,
          "pipeline_positional_evictions_no_index", "got %zu kept, bytes %llu", c[0].n_kept,
          (unsigned long long)c[0].bytes);
    for (int h = 0; h < H; h++) compressed_free(&c[h]);
    rc = run_layer(c, &cfg.exps[1], K, V, H, T, D, NULL);
    check(rc == 0 && c[1].n_kept == 5 && c[1].bytes == 5 * 2 * D * 2 + 5 * 4, "pipeline_scored_then_window_int32",
          "got %zu kept, bytes %llu", c[1].n_kept, (unsigned long long)c[1].bytes);
    for (int h = 0; h < H; h++) compressed_free(&c[h]);
    rc = run_layer(c, &cfg.exps[2], K, V, H, T, D, NULL);
    /* one pooled head, 5 rows, K and V rank 2: 2 x (5 x 2 + 2 x 4) x 2 bytes, split over the 2 heads */
    uint64_t want = 2 * 2 * (5 * 2 + 2 * D);
    int same = rc == 0 && c[0].K && c[1].K && c[0].n_kept == 5;   /* kept rows: the pooled head's; others exact */
    for (size_t i = 0; same && i < c[0].n_kept; i++)
        same = memcmp(c[0].K + c[0].kept[i] * D, c[1].K + c[0].kept[i] * D, D * sizeof(double)) == 0;
    for (size_t t = 0; same && t < T - 5; t++) same = memcmp(c[1].K + t * D, K + (T + t) * D, D * sizeof(double)) == 0;
    check(rc == 0 && c[0].bytes + c[1].bytes == want && c[0].V && same,
          "pipeline_share_window_lowrank", "expected %llu bytes in all, got %llu + %llu", (unsigned long long)want,
          (unsigned long long)c[0].bytes, (unsigned long long)c[1].bytes);
    for (int h = 0; h < H; h++) compressed_free(&c[h]);
    config_free(&cfg);
}

int main(void)
{
    test_split_bytes();
    test_share_heads();
    test_evict_rules();
    test_lowrank_energy();
    test_pipeline_config();
    test_pipeline_bytes();
    return check_failures ? 1 : 0;
}
