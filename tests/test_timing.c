/* test_timing.c: kvc run's decode timing (src/eval/timing.h): every method family hands the decode path the stored
 * form it counts in its bytes. For each case the method runs on a small hand-made layer, the form is built into
 * the cache that would be timed, and its bytes are compared with what the method reports (minus the parts a
 * decode step does not read: index bytes of an eviction, a cast's per-head scale); forms the decode path cannot
 * read say why; every buildable form is then timed side by side with FP16 (positive medians).
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

/* Runs the experiment of `json` on the layer; fills out[H], returns the bytes of all heads, or UINT64_MAX. */
static uint64_t run_method(Compressed *out, Config *cfg, const char *json, const Data *d)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"data\": {\"tokens\": %d, \"head_dim\": %d, \"kv_heads\": %d, \"q_heads\": %d, \"keys\": {\"generator\": \"normal\"}, \"values\": {\"generator\": "
             "\"normal\"}}, \"experiments\": [%s]}",
             T, D, H, HQ, json);
    if (config_parse(cfg, "mem.json", text, strlen(text), NULL, 0)) return UINT64_MAX;
    const Experiment *ex = &cfg->exps[0];
    MethodInput in[H];
    for (size_t h = 0; h < H; h++)
        in[h] = (MethodInput){.T = T, .D = D, .K = d->K + h * T * D, .V = d->V ? d->V + h * T * D : NULL, .head = h,
                              .seed = "0"};
    memset(out, 0, H * sizeof *out);
    int rc = ex->method->apply_layer ? ex->method->apply_layer(out, ex, in, H) : 0;
    for (size_t h = 0; !ex->method->apply_layer && rc == 0 && h < H; h++) rc = ex->method->apply(&out[h], ex, &in[h]);
    if (rc) return UINT64_MAX;
    uint64_t b = 0;
    for (size_t h = 0; h < H; h++) b += out[h].bytes;
    return b;
}

typedef struct Case {
    const char *name, *json;
    int values;
    long extra;          /* bytes the method counts that the decode step does not read (negative: the timed cache
                            holds more, e.g. one low-rank basis per head where joint stores one per layer) */
    StoreType ktype;     /* the type the decode path reads for K (after timing_decode_format) */
    size_t T, Tr, share;
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
        config_free(&cfg);
        return;
    }
    DecodeForm f = timing_form(&cfg.exps[0], d, &out[0]);
    int same = 1;
    for (size_t h = 1; h < H; h++) {
        DecodeForm g = timing_form(&cfg.exps[0], d, &out[h]);
        same &= timing_same_form(&f, &g);
    }
    snprintf(nm, sizeof nm, "timing_%s_form", c->name);
    check(same && !f.none && !timing_unsupported(&f, d) && f.T == c->T && f.Tr == c->Tr && f.share == c->share, nm,
          "none \"%s\", T %zu Tr %zu share %zu, heads alike %d", f.none ? f.none : "", f.T, f.Tr, f.share, same);
    TimedCache tc;
    int rc = f.none ? -1 : timing_build(&tc, d, &f);
    snprintf(nm, sizeof nm, "timing_%s_bytes", c->name);
    check(rc == 0 && tc.bytes + (uint64_t)c->extra == bytes && tc.K[0].fmt.type == c->ktype, nm,
          "timed %llu + %ld vs method %llu bytes, K type %s", rc ? 0ULL : (unsigned long long)tc.bytes, c->extra,
          (unsigned long long)bytes, rc ? "-" : store_type_name(tc.K[0].fmt.type));
    if (rc == 0) timing_cache_free(&tc);
    double ns = 0, sp = 0;
    rc = f.none ? -1 : timing_measure(tms[c->values], &f, &ns, &sp);
    snprintf(nm, sizeof nm, "timing_%s_measured", c->name);
    check(rc == 0 && ns > 0 && sp > 0 && isfinite(sp), nm, "rc %d ns %g speedup %g: %s", rc, ns, sp,
          rc ? kvc_errmsg() : "");
    for (size_t h = 0; h < H; h++) compressed_free(&out[h]);
    config_free(&cfg);
}

/* A form the decode path cannot read: the reason is given, nothing is timed. */
static void none_case(const Data *d, const char *name, const char *json, const char *why)
{
    Config cfg;
    Compressed out[H];
    uint64_t bytes = run_method(out, &cfg, json, d);
    const char *got = NULL;
    if (bytes != UINT64_MAX) {
        DecodeForm f = timing_form(&cfg.exps[0], d, &out[0]);
        got = f.none ? f.none : timing_unsupported(&f, d);
    }
    char nm[128];
    snprintf(nm, sizeof nm, "timing_%s_not_timed", name);
    check(got && strstr(got, why), nm, "got \"%s\" (%s)", got ? got : "(timed)", kvc_errmsg());
    for (size_t h = 0; bytes != UINT64_MAX && h < H; h++) compressed_free(&out[h]);
    config_free(&cfg);
}

static void test_decode_format(void)
{
    StoreFormat f = store_intn_format(4, 0, STORE_AXIS_TOKEN, 0, STORE_SCALE_F16);
    check(timing_decode_format(f, T, D).type == STORE_INT4, "decode_format_int4_row", "a whole-row int4 is int4");
    f = store_intn_format(8, 0, STORE_AXIS_TOKEN, D, STORE_SCALE_F16);
    check(timing_decode_format(f, T, D).type == STORE_INT8, "decode_format_group_is_row", "group = W is a row");
    f = store_intn_format(2, 0, STORE_AXIS_CHANNEL, 0, STORE_SCALE_F16);
    StoreFormat g = timing_decode_format(f, T, D);
    check(g.type == STORE_INT2 && g.axis == STORE_AXIS_CHANNEL, "decode_format_int2_channel", "axis kept");
    static const struct { int bits, asym; size_t group; StoreScaleType st; size_t W; } keep[] = {
        {4, 1, 0, STORE_SCALE_F16, D},    /* asymmetric: a min per group */
        {4, 0, 32, STORE_SCALE_F16, D},   /* groups within the row */
        {4, 0, 0, STORE_SCALE_F32, D},    /* FP32 scales */
        {3, 0, 0, STORE_SCALE_F16, D},    /* no int3 kernel */
        {4, 0, 0, STORE_SCALE_F16, 7},    /* rows not byte-aligned */
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        f = store_intn_format(keep[i].bits, keep[i].asym, STORE_AXIS_TOKEN, keep[i].group, keep[i].st);
        ok &= timing_decode_format(f, T, keep[i].W).type == STORE_INTN;
    }
    check(ok, "decode_format_keeps_other_intn", "an intN without an int8/4/2 twin was converted");
}

int main(void)
{
    test_decode_format();
    Data dv = make_data(1), dk = make_data(0);
    Timing *tms[2] = {timing_create(&dk, 1, 3), timing_create(&dv, 2, 3)};
    const long cast_scale = 2 * 4 * H;   /* one FP32 scale per head and tensor, folded into the query */
    const Case cases[] = {
        {"quantize_int8_token", "{\"method\": \"quantize\", \"bits\": 8}", 1, 0, STORE_INT8, T, 0, 1},
        {"quantize_int4_channel", "{\"method\": \"quantize\", \"bits\": 4, \"axis\": \"channel\"}", 1, 0, STORE_INT4, T, 0, 1},
        {"quantize_int2_keys_only", "{\"method\": \"quantize\", \"bits\": 2, \"apply_to\": \"k\"}", 0, 0, STORE_INT2, T, 0, 1},
        {"quantize_int4_groups", "{\"method\": \"quantize\", \"bits\": 4, \"group_size\": 32}", 1, 0, STORE_INTN, T, 0, 1},
        {"quantize_int3", "{\"method\": \"quantize\", \"bits\": 3, \"symmetric\": false}", 1, 0, STORE_INTN, T, 0, 1},
        {"quantize_v_only", "{\"method\": \"quantize\", \"bits\": 4, \"apply_to\": \"v\"}", 1, 0, STORE_F16, T, 0, 1},
        {"kivi_residual", "{\"method\": \"kivi\", \"k_bits\": 4, \"v_bits\": 2, \"residual\": 32}", 1, 0, STORE_INTN, T - 32, 32, 1},
        {"kivi_all_residual", "{\"method\": \"kivi\", \"residual\": 128}", 1, 0, STORE_F16, T, 0, 1},
        {"kivi_keys_only", "{\"method\": \"kivi\", \"residual\": 16, \"group_size\": 16}", 0, 0, STORE_INTN, T - 16, 16, 1},
        {"cast_e4m3", "{\"method\": \"cast\", \"format\": \"fp8_e4m3\"}", 1, 0, STORE_E4M3, T, 0, 1},
        {"cast_e5m2_head_scale", "{\"method\": \"cast\", \"format\": \"fp8_e5m2\", \"scale\": \"head\"}", 1, cast_scale, STORE_E5M2, T, 0, 1},
        {"ggml_q4_0", "{\"method\": \"ggml\", \"type\": \"q4_0\"}", 1, 0, STORE_Q4_0, T, 0, 1},
        {"ggml_q5_1", "{\"method\": \"ggml\", \"type\": \"q5_1\"}", 1, 0, STORE_Q5_1, T, 0, 1},
        {"lowrank_keys", "{\"method\": \"lowrank\", \"rank\": 8}", 1, 0, STORE_F16, T, 0, 1},
        {"lowrank_energy_kv", "{\"method\": \"lowrank\", \"energy\": 0.9, \"apply_to\": \"kv\"}", 1, 0, STORE_F16, T, 0, 1},
        {"window", "{\"method\": \"window\", \"budget\": 40}", 1, 0, STORE_F16, 40, 0, 1},
        {"share_heads", "{\"method\": \"share_heads\", \"group\": 2}", 1, 0, STORE_F16, T, 0, 2},
        {"pipeline_window_int4", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", \"budget\": 48}, "
                                 "{\"method\": \"quantize\", \"bits\": 4}]}", 1, 0, STORE_INT4, 48, 0, 1},
        {"pipeline_lowrank_q8_0", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"lowrank\", \"rank\": 32, "
                                  "\"apply_to\": \"kv\"}, {\"method\": \"ggml\", \"type\": \"q8_0\"}]}", 1, 0, STORE_Q8_0, T, 0, 1},
        {"pipeline_share_kivi", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"share_heads\", \"group\": 2}, "
                                "{\"method\": \"kivi\", \"residual\": 32}]}", 1, 0, STORE_INTN, T - 32, 32, 2},
        /* a step after kivi rewrites its FP16 window too; kivi keeping every token in FP16 after a quantizer */
        {"pipeline_kivi_then_fp8", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"kivi\", \"residual\": 32}, "
                                   "{\"method\": \"cast\", \"format\": \"fp8_e4m3\"}]}", 1, 0, STORE_E4M3, T, 0, 1},
        {"pipeline_int4_then_kivi_all_fp16", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"quantize\", \"bits\": 4}, "
                                             "{\"method\": \"kivi\", \"residual\": 128}]}", 1, 0, STORE_F16, T, 0, 1},
        /* joint low rank after an eviction: the rank may exceed the kept tokens of one head */
        {"pipeline_window_lowrank_joint", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", \"budget\": 16}, "
                                          "{\"method\": \"lowrank\", \"rank\": 32, \"joint\": true}]}", 1, -2 * 32 * D * (H - 1),
         STORE_F16, 16, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(tms, &dv, &dk, &cases[i]);
    none_case(&dv, "outliers", "{\"method\": \"quantize\", \"bits\": 4, \"outliers\": 0.01}", "outlier");
    none_case(&dv, "cast_token_scale", "{\"method\": \"cast\", \"format\": \"fp8_e4m3\", \"scale\": \"token\"}",
              "per-token");
    none_case(&dv, "lowrank_then_int3", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"lowrank\", \"rank\": 8}, "
              "{\"method\": \"quantize\", \"bits\": 3}]}", "grouped integer");
    none_case(&dv, "kivi_then_keys_only_quantizer", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"kivi\", "
              "\"residual\": 32}, {\"method\": \"quantize\", \"bits\": 8, \"apply_to\": \"k\"}]}", "one tensor only");
    none_case(&dv, "pipeline_energy", "{\"method\": \"pipeline\", \"steps\": [{\"method\": \"window\", \"budget\": 40}, "
              "{\"method\": \"lowrank\", \"energy\": 0.5}]}", "energy");
    timing_free(tms[0]);
    timing_free(tms[1]);
    return check_failures ? 1 : 0;
}
