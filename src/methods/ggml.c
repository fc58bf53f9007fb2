/* ggml: llama.cpp's KV-cache types, bit for bit (../shared/reference/ggml-formats.md).
 *
 * T tokens, D head dim. Each token row (D values, rounded to float32 as ggml takes them) is one call of ggml's
 * reference quantizer quantize_row_<type>_ref: blocks of 32 along D with FP16 block scales (q8_0, q4_0, q4_1,
 * q5_0, q5_1, iq4_nl; D must be a multiple of 32), or ggml's float32 -> f16 / bf16 conversion. Stored form and
 * read-back (float32, as ggml dequantizes): src/store/store.h; bytes are the blocks' (store_bytes), and the tensors
 * are the method's stored form (every ggml type has a fused decode kernel, src/decode/). Note that `ggml`
 * f16 rounds twice (double -> float32 -> f16), as a float32 model feeding a ggml cache does, where `cast` f16
 * rounds the double once. rotate and outliers: src/methods/qprep.h.
 */
#include "methods/methods.h"
#include "methods/qprep.h"
#include "store/store.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static const char *const type_choices[] = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "f16", "bf16", NULL};
static const StoreType type_of[] = {STORE_Q8_0, STORE_Q4_0, STORE_Q4_1, STORE_Q5_0,
                                    STORE_Q5_1, STORE_IQ4_NL, STORE_F16, STORE_BF16};
enum { TYPE_F16 = 6 };

static const ParamDesc params[] = {
    {.name = "type", .kind = PARAM_ENUM, .def = 0, .choices = type_choices,
     .help = "ggml type: 32-value blocks with FP16 scales (q*, iq4_nl; head_dim a multiple of 32), or f16 / bf16"},
    {.name = "apply_to", .kind = PARAM_ENUM, .def = APPLY_KV, .choices = apply_to_choices, .help = "which tensors are stored in the type"},
    QPREP_ROTATE_PARAM(),
    QPREP_OUTLIERS_PARAM(),
};

static int check(const Experiment *ex, const Dims *d)
{
    if (apply_to_check(ex, d) || qprep_check(ex, d)) return -1;
    long t = exp_param(ex, "type");
    if (t < TYPE_F16 && d->D % 32 != 0)
        return kvc_fail("%s: %s stores blocks of 32 values along the head dim; head_dim must be a multiple of 32 "
                        "(got head_dim %zu)", exp_param_path(ex, "type"), type_choices[t], d->D);
    return 0;
}

/* st = x in the ggml type, out (T, D) = x read back; adds the bytes. */
static int ggml_tensor(StoreTensor *st, double *out, uint64_t *bytes, const double *x, const Experiment *ex,
                       const MethodInput *in)
{
    size_t T = in->T, D = in->D;
    QPrep q;
    if (qprep_init(&q, x, T, D, T, (int)exp_param(ex, "rotate"), exp_param_num(ex, "outliers"), in->seed)) return -1;
    float *xf = xmalloc(T * D * sizeof *xf);
    for (size_t i = 0; i < T * D; i++) xf[i] = (float)q.x[i];
    StoreFormat f;
    memset(&f, 0, sizeof f);
    f.type = type_of[exp_param(ex, "type")];
    store_alloc(st, f, T, D);
    store_quantize_f32(st, xf);
    store_dequantize_f64(out, st);
    *bytes += store_bytes(st) + qprep_bytes(&q);
    free(xf);
    qprep_finish(out, &q);
    qprep_free(&q);
    return 0;
}

static int apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    long to = exp_param(ex, "apply_to");
    size_t n = in->T * in->D;
    memset(out, 0, sizeof *out);
    if (to == APPLY_K || to == APPLY_KV) {
        out->K = xmalloc(n * sizeof(double));
        if (ggml_tensor(&out->stored.K, out->K, &out->bytes, in->K, ex, in)) return -1;
    } else {
        out->bytes += 2 * (uint64_t)n;
    }
    if (in->V) {
        if (to == APPLY_V || to == APPLY_KV) {
            out->V = xmalloc(n * sizeof(double));
            if (ggml_tensor(&out->stored.V, out->V, &out->bytes, in->V, ex, in)) return -1;
        } else {
            out->bytes += 2 * (uint64_t)n;
        }
    }
    if ((out->stored.none = qprep_no_decode(ex)) != NULL) method_stored_free(&out->stored);
    return 0;
}

const MethodDesc method_ggml = {
    .name = "ggml",
    .factor = "bytes per number",
    .summary = "llama.cpp's KV-cache types q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, f16, bf16, bit for bit with ggml",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = apply,
};
