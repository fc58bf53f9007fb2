/* evict: token eviction. The cache keeps a subset of the T tokens in FP16; attention runs over the kept rows.
 *
 * sink_window      keep the first `sinks` tokens and the last `window` (StreamingLLM). Positions are implied by
 *                  the two numbers, so no index bytes are stored.
 * topk_attention   keep the `budget` tokens with the largest exact attention weight for the evaluated queries
 *                  (an oracle: no real cache can know the future query). Per (layer, KV head) the weight of a
 *                  token is w_ref, the sum over the evaluation queries of the query heads that read this KV
 *                  head (one query: its own weights). Ties go to the earlier token.
 *                  Kept-token indices are stored as int32: 4 bytes per kept token.
 * Stored bytes: 2 * kept * D for K, and again for V when the cache holds values, plus the index bytes.
 */
#include "methods/methods.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static uint64_t kept_bytes(size_t n_kept, const MethodInput *in)
{
    uint64_t per_tensor = 2 * (uint64_t)n_kept * in->D;
    return in->V ? 2 * per_tensor : per_tensor;
}

/* ---- sink_window ---- */

static const ParamDesc sw_params[] = {
    {.name = "sinks", .kind = PARAM_INT, .def = 4, .lo = 0, .hi = 1L << 40, .help = "first tokens always kept (attention sinks)"},
    {.name = "window", .kind = PARAM_INT, .def = PARAM_REQUIRED, .lo = 0, .hi = 1L << 40, .help = "most recent tokens kept (required)"},
};

static int sw_check(const Experiment *ex, const Dims *d)
{
    long s = exp_param(ex, "sinks"), w = exp_param(ex, "window");
    if (s + w < 1)
        return kvc_fail("%s: sinks + window must keep at least one token (got %ld + %ld)",
                        exp_param_path(ex, "window"), s, w);
    if ((unsigned long)(s + w) > d->T)
        return kvc_fail("%s: sinks + window must not exceed tokens = %zu (got %ld + %ld)",
                        exp_param_path(ex, "window"), d->T, s, w);
    return 0;
}

static int sw_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t s = (size_t)exp_param(ex, "sinks"), w = (size_t)exp_param(ex, "window");
    memset(out, 0, sizeof *out);
    out->n_kept = s + w;
    out->kept = xmalloc(out->n_kept * sizeof *out->kept);
    for (size_t i = 0; i < s; i++) out->kept[i] = i;
    for (size_t i = 0; i < w; i++) out->kept[s + i] = in->T - w + i;
    out->bytes = kept_bytes(out->n_kept, in);
    return 0;
}

const MethodDesc method_sink_window = {
    .name = "sink_window",
    .factor = "tokens",
    .summary = "keep the first `sinks` and the last `window` tokens (StreamingLLM)",
    .params = sw_params,
    .n_params = sizeof sw_params / sizeof sw_params[0],
    .needs_query = 0,
    .check = sw_check,
    .apply = sw_apply,
};

/* ---- topk_attention ---- */

static const ParamDesc tk_params[] = {
    {.name = "budget", .kind = PARAM_INT, .def = PARAM_REQUIRED, .lo = 1, .hi = 1L << 40, .help = "tokens kept, 1..tokens (required)"},
};

static int tk_check(const Experiment *ex, const Dims *d)
{
    long b = exp_param(ex, "budget");
    if ((unsigned long)b > d->T)
        return kvc_fail("%s: budget must be in 1..tokens = %zu (got %ld)",
                        exp_param_path(ex, "budget"), d->T, b);
    return 0;
}

typedef struct { double w; size_t i; } Scored;

static int by_weight_desc(const void *a, const void *b)
{
    const Scored *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int by_index(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static int tk_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t budget = (size_t)exp_param(ex, "budget");
    Scored *s = xmalloc(in->T * sizeof *s);
    for (size_t i = 0; i < in->T; i++) s[i] = (Scored){in->w_ref[i], i};
    qsort(s, in->T, sizeof *s, by_weight_desc);
    memset(out, 0, sizeof *out);
    out->n_kept = budget;
    out->kept = xmalloc(budget * sizeof *out->kept);
    for (size_t i = 0; i < budget; i++) out->kept[i] = s[i].i;
    qsort(out->kept, budget, sizeof *out->kept, by_index);
    free(s);
    out->bytes = kept_bytes(budget, in) + 4 * (uint64_t)budget;
    return 0;
}

const MethodDesc method_topk_attention = {
    .name = "topk_attention",
    .factor = "tokens",
    .summary = "ORACLE: per KV head, keep the `budget` tokens with the largest exact attention weight summed over "
               "the evaluation queries that read it",
    .params = tk_params,
    .n_params = sizeof tk_params / sizeof tk_params[0],
    .needs_query = 1,
    .check = tk_check,
    .apply = tk_apply,
};
