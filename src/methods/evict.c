/* evict: token eviction. The cache keeps a subset of the T tokens in FP16; attention runs over the kept rows.
 * The methods that score tokens by the attention of observation queries (h2o, snapkv, tova) are in
 * evict_attn.c; the shared helpers are declared in evict.h.
 *
 * sink_window      keep the first `sinks` tokens and the last `window` (StreamingLLM). Positions are implied by
 *                  the two numbers, so no index bytes are stored. With `compression_ratio` c instead of `window`,
 *                  as kvpress's StreamingLLMPress (n_sink = sinks): the first `sinks` and the last
 *                  int(T x (1 - c)) - sinks tokens.
 * window           keep the last `budget` tokens (a sliding window without sinks); no index bytes.
 * topk_attention   keep the `budget` tokens with the largest exact attention weight for the evaluated queries
 *                  (an oracle: no real cache can know the future query). Per (layer, KV head) the weight of a
 *                  token is w_ref, the sum over the evaluation queries of the query heads that read this KV
 *                  head (one query: its own weights). Ties go to the earlier token.
 * knorm            keep the tokens whose keys (as attention reads them) have the smallest L2 norm (Devoto et al.,
 *                  2024); norm = sqrt(k . k) (ddot), ties to the earlier token.
 * random           keep `budget` tokens drawn uniformly without replacement, from a stream of its own:
 *                  rng = np.random.default_rng([seed, 0x72616e64, draw, layer, head]), u = rng.random(T), the
 *                  tokens with the smallest u (ties to the earlier token). The data draws are untouched.
 * Budgets: `budget` tokens, `keep_ratio` of them or kvpress's `compression_ratio` (evict.h). Kept-token indices
 * are stored as int32, 4 bytes per kept token per head, except for the positional sink_window and window.
 * Stored bytes: 2 * kept * D for K, and again for V when the cache holds values, plus the index bytes.
 */
#include "methods/evict.h"
#include "base/linalg.h"
#include "base/rng.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t evict_kept_bytes(size_t n, const MethodInput *in)
{
    uint64_t per_tensor = 2 * (uint64_t)n * in->D;
    return in->V ? 2 * per_tensor : per_tensor;
}

uint64_t evict_indexed_bytes(size_t n, const MethodInput *in) { return evict_kept_bytes(n, in) + 4 * (uint64_t)n; }

/* ---- budgets ---- */

size_t evict_kvpress_kept(double compression_ratio, size_t T)
{
    double f = (double)T * (1.0 - compression_ratio);
    return f < 1 ? 0 : (size_t)f;
}

size_t evict_budget(const Experiment *ex, size_t T)
{
    long b = exp_param(ex, "budget");
    double c = exp_param_num(ex, "compression_ratio");
    size_t n;
    if (b > 0) {
        n = (size_t)b;
    } else if (c > 0) {
        n = evict_kvpress_kept(c, T);
    } else {
        double f = floor(exp_param_num(ex, "keep_ratio") * (double)T);
        n = f < 1 ? 1 : (size_t)f;
    }
    return n < T ? n : T;
}

const char *evict_budget_name(const Experiment *ex)
{
    if (exp_param(ex, "budget") > 0) return "budget";
    return exp_param_num(ex, "compression_ratio") > 0 ? "compression_ratio" : "keep_ratio";
}

/* compression_ratio (given, > 0): below 1, and keeping at least `least` tokens of T. */
static int kvpress_ratio_check(const Experiment *ex, size_t T, size_t least, const char *what)
{
    double c = exp_param_num(ex, "compression_ratio");
    if (c >= 1)
        return kvc_fail("%s: compression_ratio is the fraction removed, as kvpress, and must be below 1 (got %g)",
                        exp_param_path(ex, "compression_ratio"), c);
    size_t n = evict_kvpress_kept(c, T);
    if (n < least)
        return kvc_fail("%s: compression_ratio %g keeps int(tokens x (1 - compression_ratio)) = int(%zu x %g) = %zu "
                        "tokens, fewer than %s (got %g)", exp_param_path(ex, "compression_ratio"), c, T, 1.0 - c, n,
                        what, c);
    return 0;
}

int evict_budget_check(const Experiment *ex, const Dims *d)
{
    long b = exp_param(ex, "budget");
    double r = exp_param_num(ex, "keep_ratio"), c = exp_param_num(ex, "compression_ratio");
    if (b == 0 && r == 0 && c == 0)
        return kvc_fail("%s: missing required parameter of %s: budget (tokens kept, 1..tokens = %zu) or keep_ratio "
                        "(the fraction kept) or compression_ratio (the fraction removed, as kvpress) (got nothing)",
                        exp_path(ex, "budget"), ex->method->name, d->T);
    if (b > 0 && r > 0)
        return kvc_fail("%s: give budget or keep_ratio, not both (got budget %ld and keep_ratio %g)",
                        exp_param_path(ex, "keep_ratio"), b, r);
    if (c > 0 && (b > 0 || r > 0))
        return kvc_fail("%s: give one of budget, keep_ratio and compression_ratio (got %s %g and compression_ratio %g)",
                        exp_param_path(ex, "compression_ratio"), b > 0 ? "budget" : "keep_ratio",
                        b > 0 ? (double)b : r, c);
    if (c > 0 && kvpress_ratio_check(ex, d->T, 1, "one")) return -1;
    if (b > 0 && (unsigned long)b > d->T)
        return kvc_fail("%s: budget must be in 1..tokens = %zu (got %ld)", exp_param_path(ex, "budget"), d->T, b);
    return 0;
}

size_t evict_kept_tokens(const Experiment *ex, const Dims *d) { return evict_budget(ex, d->T); }

/* ---- selection ---- */

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

void evict_select(Compressed *out, const double *score, const unsigned char *forced, size_t T, size_t k)
{
    Scored *s = xmalloc(T * sizeof *s);
    size_t n = 0, nf = 0;
    for (size_t t = 0; t < T; t++) {
        if (forced && forced[t]) nf++;
        else s[n++] = (Scored){score[t], t};
    }
    if (k > n) k = n;
    qsort(s, n, sizeof *s, by_weight_desc);
    out->n_kept = nf + k;
    out->kept = xmalloc((out->n_kept ? out->n_kept : 1) * sizeof *out->kept);
    size_t m = 0;
    for (size_t t = 0; forced && t < T; t++)
        if (forced[t]) out->kept[m++] = t;
    for (size_t i = 0; i < k; i++) out->kept[m++] = s[i].i;
    qsort(out->kept, out->n_kept, sizeof *out->kept, by_index);
    free(s);
}

/* ---- sink_window ---- */

static const ParamDesc sw_params[] = {
    {.name = "sinks", .kind = PARAM_INT, .def = 4, .lo = 0, .hi = 1L << 40, .help = "first tokens always kept (attention sinks)"},
    {.name = "window", .kind = PARAM_INT, .def = -1, .lo = 0, .hi = 1L << 40, .id_when_set = 1,
     .help = "most recent tokens kept (required, unless compression_ratio)"},
    EVICT_COMPRESSION_RATIO_PARAM,
};

/* The most recent tokens kept: `window`, or with compression_ratio kvpress's StreamingLLMPress
 * (kvpress/presses/streaming_llm_press.py, score): int(T x (1 - ratio)) - sinks. */
static size_t sw_window(const Experiment *ex, size_t T)
{
    double c = exp_param_num(ex, "compression_ratio");
    if (c == 0) return (size_t)exp_param(ex, "window");
    return evict_kvpress_kept(c, T) - (size_t)exp_param(ex, "sinks");
}

static int sw_check(const Experiment *ex, const Dims *d)
{
    long s = exp_param(ex, "sinks"), w = exp_param(ex, "window");
    double c = exp_param_num(ex, "compression_ratio");
    if (w < 0 && c == 0)
        return kvc_fail("%s: missing required parameter of sink_window: window (most recent tokens kept) or "
                        "compression_ratio (the fraction removed, as kvpress) (got nothing)", exp_path(ex, "window"));
    if (w >= 0 && c > 0)
        return kvc_fail("%s: give window or compression_ratio, not both (got window %ld and compression_ratio %g)",
                        exp_param_path(ex, "compression_ratio"), w, c);
    if (c > 0) return kvpress_ratio_check(ex, d->T, s > 0 ? (size_t)s : 1, s > 0 ? "sinks (always kept)" : "one");
    if (s + w < 1)
        return kvc_fail("%s: sinks + window must keep at least one token (got %ld + %ld)",
                        exp_param_path(ex, "window"), s, w);
    if ((unsigned long)(s + w) > d->T)
        return kvc_fail("%s: sinks + window must not exceed tokens = %zu (got %ld + %ld)",
                        exp_param_path(ex, "window"), d->T, s, w);
    return 0;
}

static size_t sw_kept_tokens(const Experiment *ex, const Dims *d)
{
    return (size_t)exp_param(ex, "sinks") + sw_window(ex, d->T);
}

static int sw_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t s = (size_t)exp_param(ex, "sinks"), w = sw_window(ex, in->T);
    memset(out, 0, sizeof *out);
    out->n_kept = s + w;
    out->kept = xmalloc(out->n_kept * sizeof *out->kept);
    for (size_t i = 0; i < s; i++) out->kept[i] = i;
    for (size_t i = 0; i < w; i++) out->kept[s + i] = in->T - w + i;
    out->bytes = evict_kept_bytes(out->n_kept, in);
    return 0;
}

const MethodDesc method_sink_window = {
    .name = "sink_window",
    .factor = "tokens",
    .summary = "keep the first `sinks` and the last `window` tokens (StreamingLLM; or kvpress's compression_ratio)",
    .params = sw_params,
    .n_params = sizeof sw_params / sizeof sw_params[0],
    .needs_query = 0,
    .check = sw_check,
    .apply = sw_apply,
    .evicts = 1,
    .kept_tokens = sw_kept_tokens,
};

/* ---- window ---- */

static const ParamDesc budget_params[] = {EVICT_BUDGET_PARAMS};

static int win_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t n = evict_budget(ex, in->T);
    memset(out, 0, sizeof *out);
    out->n_kept = n;
    out->kept = xmalloc(n * sizeof *out->kept);
    for (size_t i = 0; i < n; i++) out->kept[i] = in->T - n + i;
    out->bytes = evict_kept_bytes(n, in);
    return 0;
}

const MethodDesc method_window = {
    .name = "window",
    .factor = "tokens",
    .summary = "keep the last `budget` tokens (a sliding window without sinks); positions implied, no index bytes",
    .params = budget_params,
    .n_params = sizeof budget_params / sizeof budget_params[0],
    .check = evict_budget_check,
    .apply = win_apply,
    .evicts = 1,
    .kept_tokens = evict_kept_tokens,
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

static size_t tk_kept_tokens(const Experiment *ex, const Dims *d)
{
    (void)d;
    return (size_t)exp_param(ex, "budget");
}

static int tk_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    size_t budget = (size_t)exp_param(ex, "budget");
    memset(out, 0, sizeof *out);
    evict_select(out, in->w_ref, NULL, in->T, budget);
    out->bytes = evict_indexed_bytes(out->n_kept, in);
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
    .evicts = 1,
    .kept_tokens = tk_kept_tokens,
};

/* ---- knorm ---- */

static int kn_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    const double *Ka = in->K_att ? in->K_att : in->K;
    double *score = xmalloc(in->T * sizeof *score);
    for (size_t t = 0; t < in->T; t++) score[t] = -la_norm(Ka + t * in->D, in->D);
    memset(out, 0, sizeof *out);
    evict_select(out, score, NULL, in->T, evict_budget(ex, in->T));
    free(score);
    out->bytes = evict_indexed_bytes(out->n_kept, in);
    return 0;
}

const MethodDesc method_knorm = {
    .name = "knorm",
    .factor = "tokens",
    .summary = "keep the tokens whose keys have the smallest L2 norm (no queries needed); int32 indices",
    .params = budget_params,
    .n_params = sizeof budget_params / sizeof budget_params[0],
    .check = evict_budget_check,
    .apply = kn_apply,
    .evicts = 1,
    .kept_tokens = evict_kept_tokens,
};

/* ---- random ---- */

#define RANDOM_STREAM_TAG 0x72616e64u   /* "rand": the method's stream is not the data's */

static const ParamDesc rnd_params[] = {
    EVICT_BUDGET_PARAMS,
    {.name = "draw", .kind = PARAM_INT, .def = 0, .lo = 0, .hi = 4294967295L,
     .help = "which draw: another value, another random subset"},
};

/* Appends numpy's words of a non-negative integer < 2^64. */
static size_t u64_words(uint32_t *w, uint64_t x)
{
    w[0] = (uint32_t)x;
    if (x >> 32) {
        w[1] = (uint32_t)(x >> 32);
        return 2;
    }
    return 1;
}

static int rnd_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    const char *seed = in->seed ? in->seed : "0";
    size_t len = strlen(seed), n;
    uint32_t *w = xmalloc((len / 9 + 2 + 8) * sizeof *w);
    n = rng_decimal_words(w, seed);
    n += u64_words(w + n, RANDOM_STREAM_TAG);
    n += u64_words(w + n, (uint64_t)exp_param(ex, "draw"));
    n += u64_words(w + n, in->layer);
    n += u64_words(w + n, in->head);
    rng r;
    rng_seed_words(&r, w, n);
    free(w);
    double *score = xmalloc(in->T * sizeof *score);
    for (size_t t = 0; t < in->T; t++) score[t] = -rng_next_double(&r);
    memset(out, 0, sizeof *out);
    evict_select(out, score, NULL, in->T, evict_budget(ex, in->T));
    free(score);
    out->bytes = evict_indexed_bytes(out->n_kept, in);
    return 0;
}

const MethodDesc method_random = {
    .name = "random",
    .factor = "tokens",
    .summary = "keep `budget` tokens drawn uniformly per head from the seed's own stream (a baseline); int32 indices",
    .params = rnd_params,
    .n_params = sizeof rnd_params / sizeof rnd_params[0],
    .check = evict_budget_check,
    .apply = rnd_apply,
    .evicts = 1,
    .kept_tokens = evict_kept_tokens,
};
