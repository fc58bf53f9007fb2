/* cast: store K and V in a 16- or 8-bit floating-point format, optionally scaled (vLLM's FP8 KV cache).
 *
 * T tokens, D head dim, H KV heads of a layer. Stored form: one code per number in `format` (src/store/store.h:
 * f16 and bf16 round to nearest even from the double, overflow to infinity; fp8_e4m3 (OCP E4M3FN, max 448) and
 * fp8_e5m2 (max 57344) round to nearest even and saturate), of x / s, where s is an FP32 scale: 1 for
 * `scale: "none"` (vLLM's default; nothing stored), else s = float32(amax / format max) (saturated to the
 * largest float) with amax the largest |x| of the layer's tensor (all its KV heads; "tensor", as vLLM's per-layer
 * k_scale / v_scale), of the head ("head") or of the token's row ("token"). Read back: decode(code) * s, in
 * double (exact). A scale of 0 (an all-zero group) stores codes 0 and reads back 0. Bytes: the codes (store_bytes
 * of the code tensor) plus 4 per scale from an FP32 tensor of the scales; a "tensor" scale is stored once per
 * layer, its 4 bytes split over the layer's KV heads (1 byte each to the first 4 of them). rotate and outliers: src/methods/qprep.h (the scale sees the dense part).
 * Stored form (Compressed.stored): the code tensor of each covered tensor; a decode step folds a per-layer or
 * per-head scale into the query, and reads no per-token scales (that form is marked none).
 */
#include "methods/methods.h"
#include "methods/qprep.h"
#include "store/store.h"
#include "base/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "fp8" is fp8_e4m3 (as in store_format_parse) */
static const char *const format_choices[] = {"f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8", NULL};
static const StoreType format_types[] = {STORE_F16, STORE_BF16, STORE_E4M3, STORE_E5M2, STORE_E4M3};
static const double format_max[] = {65504.0, 0x1.FEp127, 448.0, 57344.0, 448.0};
enum { FMT_F16 = 0, FMT_BF16 = 1, FMT_E4M3 = 2, FMT_E5M2 = 3, FMT_FP8 = 4 };
static const char *const scale_choices[] = {"none", "tensor", "head", "token", NULL};
enum { SC_NONE = 0, SC_TENSOR = 1, SC_HEAD = 2, SC_TOKEN = 3 };

static const ParamDesc params[] = {
    {.name = "format", .kind = PARAM_ENUM, .def = FMT_E4M3, .choices = format_choices,
     .help = "f16, bf16 (round to nearest even), fp8_e4m3 (OCP fn, max 448; also \"fp8\"), fp8_e5m2 (max 57344); FP8 saturates"},
    {.name = "scale", .kind = PARAM_ENUM, .def = SC_NONE, .choices = scale_choices,
     .help = "FP32 scale amax / format max per layer (tensor), per head or per token; none = 1 (vLLM's default)"},
    {.name = "apply_to", .kind = PARAM_ENUM, .def = APPLY_KV, .choices = apply_to_choices, .help = "which tensors are cast"},
    QPREP_ROTATE_PARAM(),
    QPREP_OUTLIERS_PARAM(),
};

static int check(const Experiment *ex, const Dims *d)
{
    if (apply_to_check(ex, d) || qprep_check(ex, d)) return -1;
    return 0;
}

/* The FP32 scale for a group whose largest |x| is amax. */
static double scale_of(double amax, double fmax)
{
    double s = amax / fmax;
    return s > FLT_MAX ? FLT_MAX : (double)(float)s;
}

static double max_abs(const double *x, size_t n)
{
    double a = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > a) a = fabs(x[i]);
    return a;
}

/* st = the codes of x / s, out (T, D) = x (T, D) cast and read back; returns the bytes. s_tensor: the layer's
 * scale (SC_TENSOR), whose bytes this head counts: head h of H gets floor(b / H), plus 1 when h < b mod H (README
 * "How bytes are counted": storage shared by heads). */
static uint64_t cast_dense(StoreTensor *st, double *out, const double *x, size_t T, size_t D, int fmt, int mode,
                           double s_tensor, size_t h, size_t H)
{
    double *s = xmalloc(T * sizeof *s), *y = xmalloc(T * D * sizeof *y);
    size_t ns = mode == SC_TOKEN ? T : mode == SC_NONE ? 0 : 1;
    for (size_t t = 0; t < T; t++)
        s[t] = mode == SC_NONE ? 1.0 : mode == SC_TENSOR ? s_tensor
             : mode == SC_HEAD ? (t ? s[0] : scale_of(max_abs(x, T * D), format_max[fmt]))
             : scale_of(max_abs(x + t * D, D), format_max[fmt]);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < D; j++) y[t * D + j] = s[t] == 0.0 ? 0.0 : x[t * D + j] / s[t];
    StoreFormat f;
    memset(&f, 0, sizeof f);
    f.type = format_types[fmt];
    store_alloc(st, f, T, D);
    store_quantize_f64(st, y);
    store_dequantize_f64(out, st);
    uint64_t bytes = store_bytes(st);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < D; j++) out[t * D + j] = out[t * D + j] * s[t];
    if (ns) {   /* the FP32 scales: counted, not read by a decode step (a per-layer or per-head one is folded into
                   the query; per-token ones have no decode kernel) */
        StoreTensor sc;
        f.type = STORE_F32;
        store_alloc(&sc, f, ns, 1);
        store_quantize_f64(&sc, s);
        uint64_t b = store_bytes(&sc);
        bytes += mode != SC_TENSOR ? b : b / H + (h < b % H);
        store_free(&sc);
    }
    free(s);
    free(y);
    return bytes;
}

/* The layer's KV heads in[0..H) into out[0..H) (zeroed). */
static int apply_layer(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H)
{
    size_t T = in[0].T, D = in[0].D, n = T * D;
    int fmt = (int)exp_param(ex, "format"), mode = (int)exp_param(ex, "scale"), rot = (int)exp_param(ex, "rotate");
    long to = exp_param(ex, "apply_to");
    double p = exp_param_num(ex, "outliers");
    for (int v = 0; v < 2; v++) {
        if (v && !in[0].V) break;
        if (!(to == APPLY_KV || to == (v ? APPLY_V : APPLY_K))) {
            for (size_t h = 0; h < H; h++) out[h].bytes += 2 * (uint64_t)n;
            continue;
        }
        QPrep *q = xcalloc(H, sizeof *q);
        int rc = 0;
        for (size_t h = 0; h < H && !rc; h++) rc = qprep_init(&q[h], v ? in[h].V : in[h].K, T, D, T, rot, p, in[h].seed);
        double s_tensor = 0.0;
        if (!rc && mode == SC_TENSOR) {
            double amax = 0.0;
            for (size_t h = 0; h < H; h++) {
                double a = max_abs(q[h].x, n);
                if (a > amax) amax = a;
            }
            s_tensor = scale_of(amax, format_max[fmt]);
        }
        for (size_t h = 0; h < H && !rc; h++) {
            double *x = xmalloc(n * sizeof *x);
            StoreTensor *st = v ? &out[h].stored.V : &out[h].stored.K;
            out[h].bytes += cast_dense(st, x, q[h].x, T, D, fmt, mode, s_tensor, h, H) + qprep_bytes(&q[h]);
            qprep_finish(x, &q[h]);
            if (v) out[h].V = x;
            else out[h].K = x;
        }
        for (size_t h = 0; h < H; h++) qprep_free(&q[h]);
        free(q);
        if (rc) return -1;
    }
    const char *none = qprep_no_decode(ex);
    if (!none && mode == SC_TOKEN) none = "its per-token FP32 scales have no decode kernel";
    for (size_t h = 0; none && h < H; h++) {
        out[h].stored.none = none;
        method_stored_free(&out[h].stored);
    }
    return 0;
}

/* One head alone: a "tensor" scale is then that head's. */
static int apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    memset(out, 0, sizeof *out);
    return apply_layer(out, ex, in, 1);
}

/* a "tensor" scale is the layer's largest magnitude; the other scales see one head (or token) each */
static int layer_wide(const Experiment *ex) { return exp_param(ex, "scale") == SC_TENSOR; }

const MethodDesc method_cast = {
    .name = "cast",
    .factor = "bytes per number",
    .summary = "FP16, BF16 or FP8 (E4M3, E5M2) codes, round to nearest even, optionally scaled per layer, head or token",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .needs_query = 0,
    .check = check,
    .apply = apply,
    .apply_layer = apply_layer,
    .layer_wide = layer_wide,
};
