/* none: the cache as it is -- nothing compressed, K and V left exact, counted as the FP16 baseline's bytes (and
 * stored in FP16 for the decode timing, as every tensor a method leaves exact). The reference row of a table,
 * and the identity of the model-level metrics: with data.source "model" it gives lm_kl 0, lm_nll_delta 0 and
 * lm_top1 1 exactly (README "A real model in the loop"). */
#include "methods/methods.h"

static int none_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    (void)ex;
    out->bytes = 2 * (uint64_t)in->T * in->D * (in->V ? 2 : 1);
    return 0;
}

const MethodDesc method_none = {
    .name = "none",
    .factor = "nothing",
    .summary = "the cache as it is: K and V exact, counted as FP16 (the baseline; the identity for lm_* columns)",
    .params = NULL,
    .n_params = 0,
    .apply = none_apply,
};
