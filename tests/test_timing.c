/* test_timing.c: kvc run's decode timing (src/eval/timing.h): every method family returns the tensors it stores
 * (src/methods/methods.h MethodStored) and the timed cache is exactly those tensors. For each case the method runs
 * on a small hand-made layer (method_run, as kvc run does), its stored forms are gathered into the cache that is
 * timed, and its bytes are compared with what the method reports (minus the parts a decode step does not read:
 * index bytes of an eviction, a cast's per-head scale); where the method's K' is its stored tensor read back, the
 * timed tensor is checked to read back to K' bit for bit; forms the decode path cannot read say why; every
 * timeable form is then timed (positive medians). The rules of timing_cache_add are checked on hand-made stored
 * forms; the rounds (within the time budget, or a fixed count), the one FP16 reference per Timing, the note for a
 * form on the generic tile path and the progress hook on real ones.
 *
 * Prints "PASS name" or "FAIL name: why" per check; exits 1 if any check failed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "methods/methods.h"
#include "data/synth.h"
#include "eval/timing.h"
#include "base/util.h"
#include "check.h"

enum { L = 1, H = 2, HQ = 4, T = 96, D = 64 };

static double K[L * H * T * D], V[L * H * T * D];

static Data make_data(int values)
{
    Data d;
    memset(&d, 0, sizeof d);
    d.L = L, d.H = H, d.Hq = HQ, d.T = T, d.D = D;
    for (size_t i = 0; i < L * H * T * D; i++) {
        K[i] = sin(0.37 * (double)i) * (1.0 + (double)(i % D == 3) * 9.0);
        V[i] = cos(0.11 * (double)i + 0.5);
    }
    d.K = K;
    d.V = values ? V : NULL;
    return d;
}

/* Runs the experiment of `json` on the layer (method_run, stored forms completed); fills out[H], returns the bytes
 * of all heads, or UINT64_MAX. */
static uint64_t run_method(Compressed *out, Config *cfg, const char *json, const Data *d)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"data\": {\"tokens\": %d, \"head_dim\": %d, \"kv_heads\": %d, \"q_heads\": %d, \"keys\": {\"generator\": \"normal\"}, \"values\": {\"generator\": "
             "\"normal\"}}, \"experiments\": [%s]}",
             T, D, H, HQ, json);
    memset(out, 0, H * sizeof *out);
    if (config_parse(cfg, "mem.json", text, strlen(text), NULL, 0)) return UINT64_MAX;
    const Experiment *ex = &cfg->exps[0];
    MethodInput in[H];
    for (size_t h = 0; h < H; h++)
        in[h] = (MethodInput){.T = T, .D = D, .K = d->K + h * T * D, .V = d->V ? d->V + h * T * D : NULL, .head = h,
                              .seed = "0"};
    if (method_run(out, ex, in, H, 1)) return UINT64_MAX;
    uint64_t b = 0;
    for (size_t h = 0; h < H; h++) b += out[h].bytes;
    return b;
}

/* The stored forms of out[0..H) gathered as kvc run gathers them (the tensors move into tc). */
static void gather(TimedCache *tc, Compressed *out)
{
    timing_cache_init(tc, L, H);
    for (size_t h = 0; h < H; h++) timing_cache_add(tc, &out[h].stored);
}

typedef struct Case {
    const char *name, *json;
    int values;
    long extra;          /* bytes the method counts that the decode step does not read (negative: the timed cache
                            holds more, e.g. one low-rank basis per head where joint stores one per layer) */
    StoreType ktype;     /* the type of the stored K */
    size_t T, Tr, share;
    int readback;        /* 1: the method's K' is its stored K read back (store_dequantize_f64), bit for bit */
} Case;

static void one_case(Timing **tms, const Data *dv, const Data *dk, const Case *c)
{
    const Data *d = c->values ? dv : dk;
    Config cfg;
    Compressed out[H];
    uint64_t bytes = run_method(out, &cfg, c->json, d);
    char nm[128];
    snprintf(nm, sizeof nm, "timing_%s_method_runs", c->name);
    check(bytes != UINT64_MAX, nm, "%s", kvc_errmsg());
    if (bytes == UINT64_MAX) {
        for (size_t h = 0; h < H; h++) compressed_free(&out[h]);
        config_free(&cfg);
        return;
    }
    TimedCache tc;
    gather(&tc, out);
    const DecodeForm *f = &tc.form;
    snprintf(nm, sizeof nm, "timing_%s_form", c->name);
    check(!tc.none && f->T == c->T && f->Tr == c->Tr && f->share == c->share && f->values == c->values, nm,
          "none \"%s\", T %zu Tr %zu share %zu values %d", tc.none ? tc.none : "", f->T, f->Tr, f->share, f->values);
    snprintf(nm, sizeof nm, "timing_%s_bytes", c->name);
    check(!tc.none && tc.bytes + (uint64_t)c->extra == bytes && tc.K[0].fmt.type == c->ktype, nm,
          "timed %llu + %ld vs method %llu bytes, K type %s", (unsigned long long)tc.bytes, c->extra,
          (unsigned long long)bytes, tc.none ? "-" : store_type_name(tc.K[0].fmt.type));
    if (c->readback && !tc.none) {
        double *x = xmalloc((size_t)T * D * sizeof *x);
        int same = 1;
        for (size_t h = 0; h < H; h++) {
            store_dequantize_f64(x, &tc.K[h]);
            for (size_t i = 0; i < (size_t)T * D; i++) same &= dbits(x[i]) == dbits(out[h].K[i]);
        }
        free(x);
        snprintf(nm, sizeof nm, "timing_%s_timed_is_stored", c->name);
        check(same, nm, "the timed K does not read back to the method's K'");
    }
    double ns = 0, sp = 0;
    int rc = tc.none ? -1 : timing_measure(tms[c->values], &tc, &ns, &sp);
    snprintf(nm, sizeof nm, "timing_%s_measured", c->name);
    check(rc == 0 && ns > 0 && sp > 0 && isfinite(sp), nm, "rc %d ns %g speedup %g: %s", rc, ns, sp,
          rc ? kvc_errmsg() : "");
    timing_cache_free(&tc);
    for (size_t h = 0; h < H; h++) compressed_free(&out[h]);
    config_free(&cfg);
}

/* A form the decode path cannot read: the reason is given, nothing is timed. */
static void none_case(const Data *d, const char *name, const char *json, const char *why)
{
    Config cfg;
    Compressed out[H];
    uint64_t bytes = run_method(out, &cfg, json, d);
    TimedCache tc;
    gather(&tc, out);
    char nm[128];
    snprintf(nm, sizeof nm, "timing_%s_not_timed", name);
    check(bytes != UINT64_MAX && tc.none && strstr(tc.none, why) && !tc.K, nm, "got \"%s\" (%s)",
          tc.none ? tc.none : "(timed)", kvc_errmsg());
    timing_cache_free(&tc);
    for (size_t h = 0; h < H; h++) compressed_free(&out[h]);
    config_free(&cfg);
}

/* Inside a pipeline lowrank energy picks a rank per head: timed when the heads agree, else "different forms". */
static void test_pipeline_energy(const Data *d)
{
    Config cfg;
    Compressed out[H];
    uint64_t bytes = run_method(out, &cfg, "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", "
                                "\"budget\": 40}, {\"method\": \"lowrank\", \"energy\": 0.5}]}", d);
    size_t r0 = bytes != UINT64_MAX ? out[0].stored.K.fmt.rank : 0, r1 = bytes != UINT64_MAX ? out[1].stored.K.fmt.rank : 0;
    TimedCache tc;
    gather(&tc, out);
    check(bytes != UINT64_MAX && r0 > 0 && r1 > 0 &&
          (r0 == r1 ? !tc.none && tc.form.k.rank == r0 : tc.none && strstr(tc.none, "different forms")),
          "timing_pipeline_energy_ranks", "ranks %zu and %zu, none \"%s\"", r0, r1, tc.none ? tc.none : "");
    timing_cache_free(&tc);
    for (size_t h = 0; h < H; h++) compressed_free(&out[h]);
    config_free(&cfg);
}

/* FP16 (n, D) rows of the data, as a stored tensor. */
static StoreTensor f16_rows(const double *x, size_t n)
{
    StoreTensor st;
    method_store_f16(&st, x, NULL, n, D);
    return st;
}

/* timing_cache_add's rules on hand-made stored forms (L = 1, H = 2). */
static void test_cache_rules(void)
{
    MethodStored s[H];
    TimedCache tc;
    /* two heads in FP16: timed as one cache of two heads */
    memset(s, 0, sizeof s);
    for (size_t h = 0; h < H; h++) s[h].K = f16_rows(K + h * T * D, T), s[h].V = f16_rows(V + h * T * D, T);
    timing_cache_init(&tc, L, H);
    for (size_t h = 0; h < H; h++) timing_cache_add(&tc, &s[h]);
    check(!tc.none && tc.n == 2 && tc.bytes == 2 * 2 * 2 * (uint64_t)T * D && !s[0].K.codes && !s[1].V.codes,
          "timing_cache_takes_tensors", "none \"%s\", n %zu bytes %llu", tc.none ? tc.none : "", tc.n,
          (unsigned long long)tc.bytes);
    timing_cache_free(&tc);
    /* the second head keeps fewer tokens: different forms, nothing held */
    memset(s, 0, sizeof s);
    s[0].K = f16_rows(K, T), s[0].V = f16_rows(V, T);
    s[1].K = f16_rows(K, T - 1), s[1].V = f16_rows(V, T - 1);
    timing_cache_init(&tc, L, H);
    for (size_t h = 0; h < H; h++) timing_cache_add(&tc, &s[h]);
    check(tc.none && strstr(tc.none, "different forms") && !tc.K && !s[1].K.codes, "timing_cache_different_forms",
          "none \"%s\"", tc.none ? tc.none : "");
    timing_cache_free(&tc);
    /* K and V over different tokens */
    memset(s, 0, sizeof s);
    s[0].K = f16_rows(K, T), s[0].V = f16_rows(V, T - 2);
    timing_cache_init(&tc, L, H);
    timing_cache_add(&tc, &s[0]);
    check(tc.none && strstr(tc.none, "different tokens"), "timing_cache_kv_tokens", "none \"%s\"",
          tc.none ? tc.none : "");
    timing_cache_free(&tc);
    /* sharing: the first head holds the pair's stored head, the second reads it; the wrong way round is refused */
    memset(s, 0, sizeof s);
    s[0].K = f16_rows(K, T), s[0].share = 2;
    s[1].share = 2, s[1].reads_first = 1;
    timing_cache_init(&tc, L, H);
    for (size_t h = 0; h < H; h++) timing_cache_add(&tc, &s[h]);
    check(!tc.none && tc.n == 1 && tc.form.share == 2, "timing_cache_shared_head", "none \"%s\", n %zu",
          tc.none ? tc.none : "", tc.n);
    timing_cache_free(&tc);
    memset(s, 0, sizeof s);
    s[0].K = f16_rows(K, T), s[0].share = 2;
    s[1].K = f16_rows(K, T), s[1].share = 2;   /* holds tensors where it should read the first head's */
    timing_cache_init(&tc, L, H);
    for (size_t h = 0; h < H; h++) timing_cache_add(&tc, &s[h]);
    check(tc.none && strstr(tc.none, "different forms") && !s[1].K.codes, "timing_cache_shared_head_holds_none",
          "none \"%s\"", tc.none ? tc.none : "");
    timing_cache_free(&tc);
    /* a head's none wins and frees what was held */
    memset(s, 0, sizeof s);
    s[0].K = f16_rows(K, T);
    s[1].none = "a reason";
    timing_cache_init(&tc, L, H);
    for (size_t h = 0; h < H; h++) timing_cache_add(&tc, &s[h]);
    check(tc.none && strcmp(tc.none, "a reason") == 0 && !tc.K && tc.added == 2, "timing_cache_none", "none \"%s\"",
          tc.none ? tc.none : "");
    timing_cache_free(&tc);
}

/* The progress hook's calls, in order, joined by '|' ("-" for NULL). */
static char hook_log[256];
static void hook(void *ctx, const char *what)
{
    (void)ctx;
    size_t n = strlen(hook_log);
    snprintf(hook_log + n, sizeof hook_log - n, "%s%s", n ? "|" : "", what ? what : "-");
}

/* Measures the experiment `json` with tm; returns timing_measure's result, *ns and *sp set. */
static int measure(Timing *tm, const Data *d, const char *json, double *ns, double *sp)
{
    Config cfg;
    Compressed out[H];
    uint64_t bytes = run_method(out, &cfg, json, d);
    int rc = -1;
    if (bytes != UINT64_MAX) {
        TimedCache tc;
        gather(&tc, out);
        rc = tc.none ? -1 : timing_measure(tm, &tc, ns, sp);
        timing_cache_free(&tc);
    }
    for (size_t h = 0; h < H; h++) compressed_free(&out[h]);
    config_free(&cfg);
    return rc;
}

/* Rounds within the budget or a fixed count, one FP16 reference per Timing, the note for the generic tile path,
 * the progress hook. No speed is asserted: only what the rules say about rounds and the reference. */
static void test_rounds(const Data *dv)
{
    const char *int8 = "{\"method\": \"quantize\", \"bits\": 8}";
    const char *int4ch = "{\"method\": \"quantize\", \"bits\": 4, \"axis\": \"channel\"}";
    const char *int3 = "{\"method\": \"quantize\", \"bits\": 3, \"symmetric\": false, \"group_size\": 32}";
    Timing *tm = timing_create(dv, 1, 0);
    timing_set_hook(tm, hook, NULL);
    hook_log[0] = '\0';
    double ns = 0, sp = 0, ns2 = 0, sp2 = 0;
    int rc = measure(tm, dv, int8, &ns, &sp);
    TimingLast a = *timing_last(tm);
    check(rc == 0 && a.fresh && a.rounds >= TIMING_MIN_ROUNDS && a.rounds <= TIMING_MAX_ROUNDS &&
              (a.rounds == TIMING_MAX_ROUNDS || a.seconds >= TIMING_BUDGET) && a.base_rounds >= TIMING_MIN_ROUNDS &&
              a.base_ns > 0 && a.tiled == 0 && !timing_note(tm),
          "timing_adaptive_rounds", "rc %d fresh %d rounds %zu in %g s, FP16 %zu rounds, tiled %u, note %s", rc, a.fresh,
          a.rounds, a.seconds, a.base_rounds, a.tiled, timing_note(tm) ? timing_note(tm) : "-");
    check(sp == a.base_ns / ns, "timing_speedup_is_reference_over_ns", "%g vs %g / %g", sp, a.base_ns, ns);
    check(strcmp(hook_log, "timing the FP16 reference|timing|-") == 0, "timing_hook_phases", "got \"%s\"", hook_log);
    hook_log[0] = '\0';
    rc = measure(tm, dv, int8, &ns2, &sp2);
    check(rc == 0 && !timing_last(tm)->fresh && ns2 == ns && sp2 == sp && hook_log[0] == '\0',
          "timing_same_form_measured_once", "rc %d fresh %d ns %g / %g hook \"%s\"", rc, timing_last(tm)->fresh, ns2,
          ns, hook_log);
    hook_log[0] = '\0';
    rc = measure(tm, dv, int4ch, &ns2, &sp2);
    check(rc == 0 && timing_last(tm)->fresh && timing_last(tm)->base_ns == a.base_ns && sp2 == a.base_ns / ns2 &&
              strcmp(hook_log, "timing|-") == 0,
          "timing_one_fp16_reference", "rc %d base %g then %g, speedup %g vs %g, hook \"%s\"", rc, a.base_ns,
          timing_last(tm)->base_ns, sp2, a.base_ns / ns2, hook_log);
    rc = measure(tm, dv, int3, &ns2, &sp2);
    const char *note = timing_note(tm);
    check(rc == 0 && timing_last(tm)->tiled == (DECODE_TILED_K | DECODE_TILED_V) && note &&
              strstr(note, "K and V (intN 3-bit asymmetric, groups of 32 channels)") && strstr(note, "generic tile"),
          "timing_generic_path_note", "rc %d tiled %u note \"%s\"", rc, timing_last(tm)->tiled, note ? note : "-");
    rc = measure(tm, dv, int3, &ns2, &sp2);
    check(rc == 0 && !timing_note(tm), "timing_generic_note_once_per_form", "note \"%s\"",
          timing_note(tm) ? timing_note(tm) : "-");
    timing_free(tm);

    tm = timing_create(dv, 1, 4);   /* --timing-repeat 4: exactly 4 rounds, the reference too */
    rc = measure(tm, dv, int3, &ns, &sp);
    check(rc == 0 && timing_last(tm)->rounds == 4 && timing_last(tm)->base_rounds == 4, "timing_fixed_rounds",
          "rc %d rounds %zu, FP16 %zu", rc, timing_last(tm)->rounds, timing_last(tm)->base_rounds);
    timing_free(tm);
}

int main(void)
{
    Data dv = make_data(1), dk = make_data(0);
    test_cache_rules();
    Timing *tms[2] = {timing_create(&dk, 1, 3), timing_create(&dv, 2, 3)};
    const long cast_scale = 2 * 4 * H;   /* one FP32 scale per head and tensor, folded into the query */
    const Case cases[] = {
        {"quantize_int8_token", "{\"method\": \"quantize\", \"bits\": 8}", 1, 0, STORE_INT8, T, 0, 1, 0},
        {"quantize_int4_channel", "{\"method\": \"quantize\", \"bits\": 4, \"axis\": \"channel\"}", 1, 0, STORE_INT4, T, 0, 1, 0},
        {"quantize_int2_keys_only", "{\"method\": \"quantize\", \"bits\": 2, \"apply_to\": \"k\"}", 0, 0, STORE_INT2, T, 0, 1, 0},
        /* scales applied as stored: K' is the int8 / int4 tensor that is timed, read back */
        {"quantize_int8_exact", "{\"method\": \"quantize\", \"bits\": 8, \"scale_dtype\": \"fp16_exact\"}", 1, 0, STORE_INT8, T, 0, 1, 1},
        {"quantize_int4_channel_exact", "{\"method\": \"quantize\", \"bits\": 4, \"axis\": \"channel\", \"scale_dtype\": \"fp16_exact\"}", 1, 0,
         STORE_INT4, T, 0, 1, 1},
        {"quantize_int4_groups", "{\"method\": \"quantize\", \"bits\": 4, \"group_size\": 32}", 1, 0, STORE_INTN, T, 0, 1, 0},
        {"quantize_int3", "{\"method\": \"quantize\", \"bits\": 3, \"symmetric\": false}", 1, 0, STORE_INTN, T, 0, 1, 0},
        {"quantize_v_only", "{\"method\": \"quantize\", \"bits\": 4, \"apply_to\": \"v\"}", 1, 0, STORE_F16, T, 0, 1, 0},
        {"kivi_residual", "{\"method\": \"kivi\", \"k_bits\": 4, \"v_bits\": 2, \"residual\": 32}", 1, 0, STORE_INTN, T - 32, 32, 1, 0},
        {"kivi_all_residual", "{\"method\": \"kivi\", \"residual\": 128}", 1, 0, STORE_F16, T, 0, 1, 0},
        {"kivi_keys_only", "{\"method\": \"kivi\", \"residual\": 16, \"group_size\": 16}", 0, 0, STORE_INTN, T - 16, 16, 1, 0},
        {"cast_e4m3", "{\"method\": \"cast\", \"format\": \"fp8_e4m3\"}", 1, 0, STORE_E4M3, T, 0, 1, 1},
        {"cast_e5m2_head_scale", "{\"method\": \"cast\", \"format\": \"fp8_e5m2\", \"scale\": \"head\"}", 1, cast_scale, STORE_E5M2, T, 0, 1, 0},
        {"ggml_q4_0", "{\"method\": \"ggml\", \"type\": \"q4_0\"}", 1, 0, STORE_Q4_0, T, 0, 1, 1},
        {"ggml_q5_1", "{\"method\": \"ggml\", \"type\": \"q5_1\"}", 1, 0, STORE_Q5_1, T, 0, 1, 1},
        {"lowrank_keys", "{\"method\": \"lowrank\", \"rank\": 8}", 1, 0, STORE_F16, T, 0, 1, 0},
        {"lowrank_energy_kv", "{\"method\": \"lowrank\", \"energy\": 0.9, \"apply_to\": \"kv\"}", 1, 0, STORE_F16, T, 0, 1, 0},
        {"window", "{\"method\": \"window\", \"budget\": 40}", 1, 0, STORE_F16, 40, 0, 1, 0},
        {"share_heads", "{\"method\": \"share_heads\", \"group\": 2}", 1, 0, STORE_F16, T, 0, 2, 0},
        {"pipeline_window_int4", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", \"budget\": 48}, "
                                 "{\"method\": \"quantize\", \"bits\": 4}]}", 1, 0, STORE_INT4, 48, 0, 1, 0},
        {"pipeline_lowrank_q8_0", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"lowrank\", \"rank\": 32, "
                                  "\"apply_to\": \"kv\"}, {\"method\": \"ggml\", \"type\": \"q8_0\"}]}", 1, 0, STORE_Q8_0, T, 0, 1, 0},
        {"pipeline_share_kivi", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"share_heads\", \"group\": 2}, "
                                "{\"method\": \"kivi\", \"residual\": 32}]}", 1, 0, STORE_INTN, T - 32, 32, 2, 0},
        /* a step after kivi rewrites its FP16 window too; kivi keeping every token in FP16 after a quantizer */
        {"pipeline_kivi_then_fp8", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"kivi\", \"residual\": 32}, "
                                   "{\"method\": \"cast\", \"format\": \"fp8_e4m3\"}]}", 1, 0, STORE_E4M3, T, 0, 1, 0},
        {"pipeline_int4_then_kivi_all_fp16", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"quantize\", \"bits\": 4}, "
                                             "{\"method\": \"kivi\", \"residual\": 128}]}", 1, 0, STORE_F16, T, 0, 1, 0},
        /* joint low rank after an eviction: the rank may exceed the kept tokens of one head */
        {"pipeline_window_lowrank_joint", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", \"budget\": 16}, "
                                          "{\"method\": \"lowrank\", \"rank\": 32, \"joint\": true}]}", 1, -2 * 32 * D * (H - 1),
         STORE_F16, 16, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(tms, &dv, &dk, &cases[i]);
    none_case(&dv, "outliers", "{\"method\": \"quantize\", \"bits\": 4, \"outliers\": 0.01}", "outlier");
    none_case(&dv, "cast_token_scale", "{\"method\": \"cast\", \"format\": \"fp8_e4m3\", \"scale\": \"token\"}",
              "per-token");
    none_case(&dv, "lowrank_then_int3", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"lowrank\", \"rank\": 8}, "
              "{\"method\": \"quantize\", \"bits\": 3}]}", "grouped integer");
    none_case(&dv, "kivi_then_keys_only_quantizer", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"kivi\", "
              "\"residual\": 32}, {\"method\": \"quantize\", \"bits\": 8, \"apply_to\": \"k\"}]}", "one tensor only");
    test_pipeline_energy(&dv);
    test_rounds(&dv);
    timing_free(tms[0]);
    timing_free(tms[1]);
    return check_failures ? 1 : 0;
}
