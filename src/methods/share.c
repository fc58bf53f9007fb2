/* share: KV-head sharing after the fact (MHA -> GQA / MQA, the GQA paper's conversion by mean pooling).
 *
 * share_heads  the KV heads of a layer form groups of `group` consecutive heads (H / group groups; `group` = H
 *              gives MQA). Each group stores one head: the mean of its K heads and the mean of its V heads,
 *              acc = X[h0]; acc = acc + X[h] for h = h0 + 1 .. h0 + group - 1; X' = acc / group. Every query head
 *              of the group attends to the pooled head (its K'/V' are the pooled tensors). With a pre-RoPE cache
 *              the pre-RoPE keys are pooled and attention rotates the pooled keys.
 *              Bytes: the pooled head in FP16 (2 x T x D per tensor) once per group, split over the group's
 *              heads with method_split_bytes. Stored form: the pooled head's FP16 tensors, held by the group's
 *              first head (MethodStored.share = group; the others read it: a decode step reads it once for every
 *              query head of the group's KV heads).
 * This is a per-layer method (MethodDesc.apply_layer). In a pipeline it must be the first step (pipeline.c).
 */
#include "methods/share.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

void share_pool(double *out, const double *const *x, size_t g, size_t n)
{
    memcpy(out, x[0], n * sizeof *out);
    for (size_t k = 1; k < g; k++)
        for (size_t i = 0; i < n; i++) out[i] = out[i] + x[k][i];
    for (size_t i = 0; i < n; i++) out[i] = out[i] / (double)g;
}

static const ParamDesc params[] = {
    {.name = "group", .kind = PARAM_INT, .def = PARAM_REQUIRED, .lo = 1, .hi = 65536,
     .help = "consecutive KV heads pooled into one; must divide kv_heads (kv_heads: MQA) (required)"},
};

static int check(const Experiment *ex, const Dims *d)
{
    long g = exp_param(ex, "group");
    size_t H = d->kv_heads ? d->kv_heads : 1;
    if ((size_t)g > H || H % (size_t)g != 0)
        return kvc_fail("%s: group must divide kv_heads = %zu (got %ld)", exp_param_path(ex, "group"), H, g);
    return 0;
}

static double *pool_tensor(const MethodInput *in, size_t h0, size_t g, int values)
{
    size_t n = in[h0].T * in[h0].D;
    const double **x = xmalloc(g * sizeof *x);
    for (size_t k = 0; k < g; k++) x[k] = values ? in[h0 + k].V : in[h0 + k].K;
    double *out = xmalloc(n * sizeof *out);
    share_pool(out, x, g, n);
    free(x);
    return out;
}

static int apply_layer(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H)
{
    size_t g = (size_t)exp_param(ex, "group");
    if (H % g != 0)
        return kvc_fail("%s: group must divide kv_heads = %zu (got %zu)", exp_param_path(ex, "group"), H, g);
    size_t T = in[0].T, D = in[0].D, n = T * D;
    uint64_t stored = 2 * (uint64_t)n * (in[0].V ? 2 : 1);
    for (size_t h0 = 0; h0 < H; h0 += g) {
        double *K = pool_tensor(in, h0, g, 0), *V = in[0].V ? pool_tensor(in, h0, g, 1) : NULL;
        for (size_t k = 0; k < g; k++) {
            Compressed *c = &out[h0 + k];
            c->K = xmalloc(n * sizeof *c->K);
            memcpy(c->K, K, n * sizeof *K);
            if (V) {
                c->V = xmalloc(n * sizeof *c->V);
                memcpy(c->V, V, n * sizeof *V);
            }
            c->bytes = method_split_bytes(stored, g, k);
            c->stored.share = g;   /* the pooled head in FP16, held by the group's first head */
            c->stored.reads_first = k > 0;
            if (k == 0) method_store_f16(&c->stored.K, K, NULL, T, D);
            if (k == 0 && V) method_store_f16(&c->stored.V, V, NULL, T, D);
        }
        free(K);
        free(V);
    }
    return 0;
}

const MethodDesc method_share_heads = {
    .name = "share_heads",
    .factor = "KV heads",
    .summary = "MHA -> GQA/MQA after the fact: mean-pool each group of `group` KV heads into one stored head",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .check = check,
    .apply = method_apply_one_head,
    .apply_layer = apply_layer,
};
