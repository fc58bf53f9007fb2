/* quantize: symmetric integer quantization with one FP16 scale per group (a token row or a channel column).
 *
 * T tokens, D head dim. Per group g: qmax = 2^(bits-1) - 1, scale = max|x| / qmax,
 * q = clip(rint(x / scale), -qmax, qmax), x' = q * scale. An all-zero group has scale 0 and gives zeros.
 * Stored bytes per quantized tensor: ceil(T*D*bits / 8) packed codes + 2 bytes per scale; tensors it does
 * not cover stay FP16 (2 bytes per number). The quality path reconstructs with the double-precision scale.
 */
#include "methods/methods.h"
#include "util.h"

#include <math.h>
#include <string.h>

static const char *const axis_choices[] = {"token", "channel", NULL};
enum { AXIS_TOKEN = 0, AXIS_CHANNEL = 1 };

static const ParamDesc params[] = {
    {.name = "bits", .kind = PARAM_INT, .def = 8, .lo = 2, .hi = 8, .help = "bits per code; codes are -qmax..qmax, qmax = 2^(bits-1)-1"},
    {.name = "axis", .kind = PARAM_ENUM, .def = AXIS_TOKEN, .choices = axis_choices, .help = "one scale per token (row) or per channel (column)"},
    {.name = "apply_to", .kind = PARAM_ENUM, .def = APPLY_KV, .choices = apply_to_choices, .help = "which tensors are quantized"},
};

/* out[i*stride] = quantized x[i*stride] for one group of n numbers. */
static void quantize_group(double *out, const double *x, size_t n, size_t stride, double qmax)
{
    double amax = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs(x[i * stride]);
        if (a > amax) amax = a;
    }
    double scale = amax / qmax;
    for (size_t i = 0; i < n; i++) {
        if (scale == 0.0) {
            out[i * stride] = 0.0;
            continue;
        }
        double q = rint(x[i * stride] / scale);
        if (q > qmax) q = qmax;
        if (q < -qmax) q = -qmax;
        out[i * stride] = q * scale;
    }
}

/* Quantizes a (T, D) tensor; returns the bytes it occupies when stored. */
static uint64_t quantize_tensor(double *out, const double *x, size_t T, size_t D, int bits, int axis)
{
    double qmax = (double)((1L << (bits - 1)) - 1);
    uint64_t n_scales;
    if (axis == AXIS_TOKEN) {
        for (size_t t = 0; t < T; t++) quantize_group(out + t * D, x + t * D, D, 1, qmax);
        n_scales = T;
    } else {
        for (size_t c = 0; c < D; c++) quantize_group(out + c, x + c, T, D, qmax);
        n_scales = D;
    }
    uint64_t payload_bits = (uint64_t)T * D * (uint64_t)bits;
    return (payload_bits + 7) / 8 + 2 * n_scales;
}

static int apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    int bits = (int)exp_param(ex, "bits");
    int axis = (int)exp_param(ex, "axis");
    long to = exp_param(ex, "apply_to");
    uint64_t fp16 = 2 * (uint64_t)in->T * in->D;
    size_t n = in->T * in->D;

    memset(out, 0, sizeof *out);
    if (to == APPLY_K || to == APPLY_KV) {
        out->K = xmalloc(n * sizeof(double));
        out->bytes += quantize_tensor(out->K, in->K, in->T, in->D, bits, axis);
    } else {
        out->bytes += fp16;
    }
    if (in->V) {
        if (to == APPLY_V || to == APPLY_KV) {
            out->V = xmalloc(n * sizeof(double));
            out->bytes += quantize_tensor(out->V, in->V, in->T, in->D, bits, axis);
        } else {
            out->bytes += fp16;
        }
    }
    return 0;
}

const MethodDesc method_quantize = {
    .name = "quantize",
    .factor = "bytes per number",
    .summary = "symmetric INT2..INT8 with one FP16 scale per token or per channel (the lesson's quantizer)",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = apply_to_check,
    .apply = apply,
};
