/* kivi: KIVI (Liu et al., 2024): asymmetric low-bit keys per channel and values per token, with the most recent
 * tokens in FP16.
 *
 * T tokens, D head dim, R = `residual`, Tq = max(T - R, 0) quantized tokens (the first ones). Keys: rows
 * [0, Tq) asymmetric `k_bits` codes with a scale and a min per channel and group of `group_size` consecutive
 * tokens (the last group may be shorter); values: rows [0, Tq) asymmetric `v_bits` codes with a scale and a min
 * per token and group of `group_size` consecutive channels. Rows [Tq, T) of K and V are stored in FP16 (KIVI's
 * streaming residual). Stored forms: STORE_INTN (src/store/store.h) for the quantized rows and STORE_F16 for the
 * residual, returned as the main segment and the second segment (MethodStored.K / Kr, V / Vr; every token in the
 * main segment in FP16 when tokens <= residual); bytes are theirs (store_bytes) plus the outlier records. KIVI keeps the T mod group_size tokens
 * after the last full key group in full precision as well; kvc quantizes a shorter last group instead (set
 * `residual` to keep them). scale_dtype as for quantize, but fp16_exact by default (KIVI stores FP16 scales
 * and mins). rotate and outliers: src/methods/qprep.h (outliers among the quantized rows only).
 */
#include "methods/methods.h"
#include "methods/qprep.h"
#include "store/store.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

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
};

static int check(const Experiment *ex, const Dims *d)
{
    static const char *const names[] = {"k_bits", "v_bits"};
    for (int i = 0; i < 2; i++) {
        long b = exp_param(ex, names[i]);
        if (b != 2 && b != 4 && b != 8)
            return kvc_fail("%s: KIVI codes have 2, 4 or 8 bits (got %ld)", exp_param_path(ex, names[i]), b);
    }
    return qprep_check(ex, d);
}

/* main, resid = x as KIVI stores it (the quantized rows, then the FP16 window; every row in FP16 in main when
 * none is quantized), out (T, D) = x read back; adds the bytes. */
static int kivi_tensor(StoreTensor *main_rows, StoreTensor *resid, double *out, uint64_t *bytes, const double *x,
                       int bits, StoreAxis axis, const Experiment *ex, const MethodInput *in)
{
    size_t T = in->T, D = in->D, R = (size_t)exp_param(ex, "residual"), Tq = T > R ? T - R : 0;
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
    if (in->T > (size_t)exp_param(ex, "residual") && (s->none = qprep_no_decode(ex)) != NULL) method_stored_free(s);
    return 0;
}

const MethodDesc method_kivi = {
    .name = "kivi",
    .factor = "bytes per number",
    .summary = "KIVI: asymmetric keys per channel and values per token in groups, the last `residual` tokens in FP16",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = apply,
};
