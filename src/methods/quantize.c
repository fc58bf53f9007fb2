/* quantize: integer quantization with a scale (and, asymmetric, a min) per group: the lesson's quantizer and
 * its generalizations (README "Methods", "How bytes are counted").
 *
 * T tokens, D head dim. Stored form: STORE_INTN (src/store/store.h): b-bit codes of the whole (T, D) tensor in one
 * bit stream, ceil(T * D * b / 8) bytes, plus per group a scale (and a min) in FP16 or FP32. Groups: axis
 * token, `group_size` consecutive channels of a token (0: the whole row); axis channel, `group_size`
 * consecutive tokens of a channel (0: the whole column). Symmetric (default): qmax = 2^(b-1) - 1,
 * scale = max|x| / qmax, q = clip(rint(x / scale), -qmax, qmax), x' = q * scale; asymmetric (symmetric: false,
 * as KIVI and q4_1): scale = (max - min) / (2^b - 1), q = clip(rint((x - min) / scale), 0, 2^b - 1),
 * x' = q * scale + min. A group whose scale is 0 gives codes 0. scale_dtype "fp16" (default) is the lesson's
 * simplification: the scales count as FP16 but the codes and K'/V' use the unrounded double scale;
 * "fp16_exact" and "fp32" round the scales (and mins) first and use them as stored. Options shared by the
 * quantizers (src/methods/qprep.h): rotate "hadamard", outliers p. Tensors it does not cover stay FP16.
 * The stored tensors (Compressed.stored) are these STORE_INTN tensors of the rotated, dense part; the symmetric
 * ones with one FP16 scale per row or column at 8/4/2 bits are kept as the int8/int4/int2 tensors they equal
 * byte for byte (qprep_intn). With outliers the stored form is marked none (no decode kernel reads the records).
 */
#include "methods/methods.h"
#include "methods/qprep.h"
#include "store/store.h"
#include "base/pool.h"
#include "base/util.h"

#include <stdio.h>

#include <string.h>

static const char *const axis_choices[] = {"token", "channel", NULL};
enum { AXIS_TOKEN = 0, AXIS_CHANNEL = 1 };

/* The parameters after apply_to came with issue 4: they enter row ids only when set (id_when_set), so the ids
 * of the lesson's rows stay what they were. */
static const ParamDesc params[] = {
    {.name = "bits", .kind = PARAM_INT, .def = 8, .lo = 2, .hi = 8, .help = "bits per code; codes are -qmax..qmax, qmax = 2^(bits-1)-1 (asymmetric: 0..2^bits-1)"},
    {.name = "axis", .kind = PARAM_ENUM, .def = AXIS_TOKEN, .choices = axis_choices, .help = "scale groups along a token (row) or a channel (column)"},
    {.name = "apply_to", .kind = PARAM_ENUM, .def = APPLY_KV, .choices = apply_to_choices, .help = "which tensors are quantized"},
    {.name = "symmetric", .kind = PARAM_BOOL, .def = 1, .lo = 0, .hi = 1, .id_when_set = 1,
     .help = "true: scale = max|x| / qmax; false: a scale and a min per group (KIVI, q4_1)"},
    {.name = "group_size", .kind = PARAM_INT, .def = 0, .lo = 0, .hi = 16777216, .id_when_set = 1,
     .help = "channels (axis token) or tokens (axis channel) per scale group; 0 = the whole row or column"},
    {.name = "scale_dtype", .kind = PARAM_ENUM, .def = SCALE_FP16, .choices = qprep_scale_choices, .id_when_set = 1,
     .help = "fp16: 2 bytes, applied unrounded (the lesson's simplification); fp16_exact: rounded to FP16 as stored; fp32: 4 bytes"},
    QPREP_ROTATE_PARAM(.id_when_set = 1),
    QPREP_OUTLIERS_PARAM(.id_when_set = 1),
};

static int check(const Experiment *ex, const Dims *d)
{
    if (apply_to_check(ex, d) || qprep_check(ex, d)) return -1;
    return 0;
}

/* The stored format of the covered tensors. */
static StoreFormat format_of(const Experiment *ex)
{
    long sd = exp_param(ex, "scale_dtype");
    return store_intn_format((int)exp_param(ex, "bits"), !exp_param(ex, "symmetric"),
                             exp_param(ex, "axis") == AXIS_TOKEN ? STORE_AXIS_TOKEN : STORE_AXIS_CHANNEL,
                             (size_t)exp_param(ex, "group_size"), sd == SCALE_FP32 ? STORE_SCALE_F32 : STORE_SCALE_F16);
}

/* st = x as stored, out (T, D) = x quantized and read back; adds the bytes stored. */
static int quantize_tensor(StoreTensor *st, double *out, uint64_t *bytes, const double *x, const Experiment *ex,
                           const MethodInput *in)
{
    size_t T = in->T, D = in->D;
    QPrep q;
    if (qprep_init(&q, x, T, D, T, (int)exp_param(ex, "rotate"), exp_param_num(ex, "outliers"), in->seed)) return -1;
    qprep_intn(st, out, q.x, T, D, format_of(ex), exp_param(ex, "scale_dtype") == SCALE_FP16);
    *bytes += store_bytes(st) + qprep_bytes(&q);
    qprep_finish(out, &q);
    qprep_free(&q);
    return 0;
}

/* Quantizing K and V: two independent items, on in->pool's threads when there is one. */
typedef struct Pair {
    Compressed *out;
    const Experiment *ex;
    const MethodInput *in;
    uint64_t bytes[2];
    int rc[2];
    char msg[2][1024];
} Pair;

static void pair_item(void *arg, size_t v, int tid)
{
    (void)tid;
    Pair *p = arg;
    StoreTensor *st = v ? &p->out->stored.V : &p->out->stored.K;
    double *y = v ? p->out->V : p->out->K;
    if (quantize_tensor(st, y, &p->bytes[v], v ? p->in->V : p->in->K, p->ex, p->in)) {
        p->rc[v] = -1;
        snprintf(p->msg[v], sizeof p->msg[v], "%s", kvc_errmsg());
    }
}

static int apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    long to = exp_param(ex, "apply_to");
    uint64_t fp16 = 2 * (uint64_t)in->T * in->D;
    size_t n = in->T * in->D;

    memset(out, 0, sizeof *out);
    int doK = to == APPLY_K || to == APPLY_KV, doV = in->V && (to == APPLY_V || to == APPLY_KV);
    if (!doK) out->bytes += fp16;   /* stays FP16 (method_run stores it) */
    if (in->V && !doV) out->bytes += fp16;
    if (doK) out->K = xmalloc(n * sizeof(double));
    if (doV) out->V = xmalloc(n * sizeof(double));
    Pair p = {.out = out, .ex = ex, .in = in};
    if (doK && doV && in->pool) {
        pool_run(in->pool, pair_item, &p, 2);
    } else {
        if (doK) pair_item(&p, 0, 0);
        if (doV && p.rc[0] == 0) pair_item(&p, 1, 0);
    }
    for (int v = 0; v < 2; v++)
        if (p.rc[v]) return kvc_fail("%s", p.msg[v]);
    out->bytes += p.bytes[0] + p.bytes[1];
    if ((out->stored.none = qprep_no_decode(ex)) != NULL) method_stored_free(&out->stored);
    return 0;
}

const MethodDesc method_quantize = {
    .name = "quantize",
    .factor = "bytes per number",
    .summary = "INT2..INT8 with a scale (and a min) per token, channel or group (the lesson's quantizer and its generalizations)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = apply,
};
