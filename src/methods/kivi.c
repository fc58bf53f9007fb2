/* kivi: KIVI (Liu et al., 2024): asymmetric low-bit keys per channel and values per token, with the most recent
 * tokens in FP16.
 *
 * T tokens, D head dim, R = `residual`. The first Tq rows of a tensor are quantized, the last T - Tq are stored in
 * FP16 (KIVI's streaming residual); `residual_rule` sets Tq:
 *   "kvc" (default)  Tq = max(T - R, 0) for K and for V: both keep the last min(T, R) tokens in FP16.
 *   "kivi"           KIVI's own rule (jy-yuan/KIVI models/llama_kivi.py, LlamaFlashAttention_KIVI.forward, the
 *                    prefill branch, which the decode branch keeps): keys keep the last T mod R tokens in FP16
 *                    (key_states_full; the rest is quantized in whole blocks of R), Tq_K = T - (T mod R); values
 *                    keep the last min(T, R) (value_states_full), Tq_V = max(T - R, 0). Needs R >= 1.
 * Keys: rows [0, Tq) asymmetric `k_bits` codes with a scale and a min per channel and group of `group_size`
 * consecutive tokens; values: rows [0, Tq) asymmetric `v_bits` codes with a scale and a min per token and group of
 * `group_size` consecutive channels. The last group of a column or row may be shorter here; KIVI asserts whole
 * groups instead (quant/new_pack.py, triton_quantize_and_pack_along_last_dim: Tq_K and D divisible by group_size;
 * its decode branch asserts R divisible by group_size). Stored forms: STORE_INTN (src/store/store.h) for the
 * quantized rows and STORE_F16 for the residual, returned as the main segment and the second segment
 * (MethodStored.K / Kr, V / Vr; every token in the main segment in FP16 when none is quantized); bytes are theirs
 * (store_bytes) plus the outlier records. With the "kivi" rule K and V usually split at different rows, which the
 * decode path does not read (MethodStored.none). scale_dtype as for quantize, but fp16_exact by default (KIVI
 * stores FP16 scales and mins). rotate and outliers: src/methods/qprep.h (outliers among the quantized rows only).
 */
#include "methods/methods.h"
#include "methods/qprep.h"
#include "store/store.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static const char *const rule_choices[] = {"kvc", "kivi", NULL};
enum { RULE_KVC = 0, RULE_KIVI = 1 };

static const ParamDesc params[] = {
    {.name = "k_bits", .kind = PARAM_INT, .def = 2, .lo = 2, .hi = 8, .help = "bits per key code: 2, 4 or 8"},
    {.name = "v_bits", .kind = PARAM_INT, .def = 2, .lo = 2, .hi = 8, .help = "bits per value code: 2, 4 or 8"},
    {.name = "group_size", .kind = PARAM_INT, .def = 32, .lo = 1, .hi = 16777216,
     .help = "tokens per key group (per channel), channels per value group (per token)"},
    {.name = "residual", .kind = PARAM_INT, .def = 128, .lo = 0, .hi = 16777216,
     .help = "the most recent tokens, kept in FP16 (all of them when tokens <= residual)"},
    {.name = "scale_dtype", .kind = PARAM_ENUM, .def = SCALE_FP16_EXACT, .choices = qprep_scale_choices,
     .help = "scales and mins: fp16_exact (as stored), fp16 (applied unrounded, as the lesson's quantizer), fp32"},
    QPREP_ROTATE_PARAM(),
    {.name = "outliers", .kind = PARAM_NUM, .num_def = 0.0, .num_lo = 0.0, .num_hi = 0.5,
     .help = "fraction of the largest |x| of the quantized tokens kept in FP16 with int32 indices (6 bytes each)"},
    {.name = "residual_rule", .kind = PARAM_ENUM, .def = RULE_KVC, .choices = rule_choices, .id_when_set = 1,
     .help = "FP16 tokens: kvc: the last min(T, residual) of K and V; kivi: KIVI's own, keys the last T mod "
             "residual, values the last min(T, residual)"},
};

static int check(const Experiment *ex, const Dims *d)
{
    static const char *const names[] = {"k_bits", "v_bits"};
    for (int i = 0; i < 2; i++) {
        long b = exp_param(ex, names[i]);
        if (b != 2 && b != 4 && b != 8)
            return kvc_fail("%s: KIVI codes have 2, 4 or 8 bits (got %ld)", exp_param_path(ex, names[i]), b);
    }
    if (exp_param(ex, "residual_rule") == RULE_KIVI && exp_param(ex, "residual") == 0)
        return kvc_fail("%s: residual_rule \"kivi\" keeps the last tokens mod residual of the keys in FP16, so "
                        "residual must be at least 1 (got 0)", exp_param_path(ex, "residual"));
    return qprep_check(ex, d);
}

/* Rows of a tensor that are quantized (the first ones); the others are the FP16 residual. */
static size_t quantized_rows(const Experiment *ex, size_t T, int values)
{
    size_t R = (size_t)exp_param(ex, "residual");
    if (exp_param(ex, "residual_rule") == RULE_KIVI && !values) return T - T % R;
    return T > R ? T - R : 0;
}

/* main, resid = x as KIVI stores it (the quantized rows, then the FP16 window; every row in FP16 in main when
 * none is quantized), out (T, D) = x read back; adds the bytes. */
static int kivi_tensor(StoreTensor *main_rows, StoreTensor *resid, double *out, uint64_t *bytes, const double *x,
                       int bits, StoreAxis axis, const Experiment *ex, const MethodInput *in)
{
    size_t T = in->T, D = in->D, Tq = quantized_rows(ex, T, axis == STORE_AXIS_TOKEN);
    long sd = exp_param(ex, "scale_dtype");
    QPrep q;
    if (qprep_init(&q, x, T, D, Tq, (int)exp_param(ex, "rotate"), exp_param_num(ex, "outliers"), in->seed)) return -1;
    if (Tq > 0) {
        StoreFormat f = store_intn_format(bits, 1, axis, (size_t)exp_param(ex, "group_size"),
                                          sd == SCALE_FP32 ? STORE_SCALE_F32 : STORE_SCALE_F16);
        qprep_intn(main_rows, out, q.x, Tq, D, f, sd == SCALE_FP16);
        *bytes += store_bytes(main_rows);
    }
    if (T > Tq) {
        StoreTensor *st = Tq > 0 ? resid : main_rows;
        method_store_f16(st, q.x + Tq * D, NULL, T - Tq, D);
        store_dequantize_f64(out + Tq * D, st);
        *bytes += store_bytes(st);
    }
    *bytes += qprep_bytes(&q);
    qprep_finish(out, &q);
    qprep_free(&q);
    return 0;
}

static int apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t n = in->T * in->D;
    memset(out, 0, sizeof *out);
    MethodStored *s = &out->stored;
    out->K = xmalloc(n * sizeof(double));
    if (kivi_tensor(&s->K, &s->Kr, out->K, &out->bytes, in->K, (int)exp_param(ex, "k_bits"), STORE_AXIS_CHANNEL, ex,
                    in))
        return -1;
    if (in->V) {
        out->V = xmalloc(n * sizeof(double));
        if (kivi_tensor(&s->V, &s->Vr, out->V, &out->bytes, in->V, (int)exp_param(ex, "v_bits"), STORE_AXIS_TOKEN, ex,
                        in))
            return -1;
    }
    /* outliers only ever come from the quantized rows */
    size_t qk = quantized_rows(ex, in->T, 0), qv = quantized_rows(ex, in->T, 1);
    if ((qk > 0 || (in->V && qv > 0)) && (s->none = qprep_no_decode(ex)) != NULL) method_stored_free(s);
    else if (in->V && qk != qv) {
        s->none = "residual_rule \"kivi\": K and V keep different FP16 windows (tokens mod residual and "
                  "min(tokens, residual)); a decode step reads one split";
        method_stored_free(s);
    }
    return 0;
}

const MethodDesc method_kivi = {
    .name = "kivi",
    .factor = "bytes per number",
    .summary = "KIVI: asymmetric keys per channel and values per token in groups, the last `residual` tokens in FP16 "
               "(residual_rule \"kivi\": KIVI's own windows)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = apply,
};
