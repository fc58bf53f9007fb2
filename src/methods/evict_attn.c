/* evict_attn: eviction scored by the attention of the observation queries (MethodInput.Q_obs), never by the
 * evaluation queries (only the oracle topk_attention sees those).
 *
 * G' query heads read this KV head (n_obs_heads: G, or group x G after share_heads), W observation queries each,
 * query j at position obs_pos[j]. a[g, j, t]: the attention weight of observation query (g, j) on row t, a
 * softmax over the rows it may see (position <= obs_pos[j], causal) of s = (K_att[t] . q) / sqrt(D); 0 for the
 * rows after it. GQA: scores are summed over the G' query heads (in order g = 0, 1, ...), so one selection
 * serves the whole group. Every sum below runs in the order written, from 0.0.
 *
 * h2o     acc[t] = sum over g, then j of a[g, j, t] (accumulated attention, heavy hitters). Keeps the last
 *         n_recent = floor(recent_ratio x budget) rows and the budget - n_recent others with the largest acc.
 *         normalize (kvpress's ObservedAttentionPress, kvpress/presses/observed_attention_press.py, score): per g,
 *         s_g[t] = (sum over j of a[g, j, t]) / n[t], n[t] = the observation queries that see row t (position
 *         obs_pos[j] >= that of t; a row none sees scores 0); acc[t] = (sum over g of s_g[t]) / G'.
 * snapkv  the observation window: the last `window_size` queries (0: all W), and the rows at or after the first
 *         of them (always kept). Per g: v[t] = sum over the window's queries of a[g, j, t] on the rows before
 *         it (the prefix, P rows); pooled over the prefix with `kernel_size` k (odd), h = k // 2:
 *         max: max(v[t-h .. t+h] within the prefix); avg: sum(v[t-h .. t+h] within the prefix) / k (padding counts
 *         as zeros, PyTorch's count_include_pad). score[t] = sum over g of the pooled v. Keeps the window rows and
 *         the budget - (rows in the window) prefix rows with the largest score.
 * tova    heads "group": score[t] = sum over g of a[g, W-1, t] (the last observation query); keeps the `budget`
 *         largest. heads "layer" (TOVA's own, schwartz-lab-NLP/TOVA src/tova_cache.py, TOVACache.reduce; kvpress's
 *         TOVAPress): the mean over every query head of the layer (KV head h in order, then g) of a[g, W-1, t],
 *         one selection kept by every KV head of the layer (MethodDesc.apply_layer); the heads must hold the same
 *         rows (not after a per-head eviction in a pipeline). Its int32 index is stored once per layer.
 * Ties go to the earlier row. Index bytes: int32 per kept token. See evict.c for budgets and bytes.
 */
#include "methods/evict.h"
#include "base/attention.h"
#include "base/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows observation query j sees: the prefix of rows whose position is <= obs_pos[j]. */
static size_t visible_rows(const MethodInput *in, size_t j)
{
    size_t p = in->obs_pos[j], c = 0;
    while (c < in->T && evict_pos(in, c) <= p) c++;
    return c;
}

/* w (T,) = attention weights of observation query (g, j) over the rows it sees, 0 elsewhere. */
static void obs_weights(double *w, const MethodInput *in, size_t g, size_t j)
{
    const double *Ka = in->K_att ? in->K_att : in->K;
    size_t c = visible_rows(in, j), D = in->D;
    memset(w, 0, in->T * sizeof *w);
    if (c == 0) return;
    attn_scores(w, in->Q_obs + (g * in->n_obs + j) * D, Ka, c, D);
    attn_softmax(w, c);
}

static int observe_check(const Experiment *ex, const Dims *d)
{
    if (d->n_obs == 0)
        return kvc_fail("%s: %s scores tokens by the attention of observation queries; add data.observe (got \"%s\")",
                        exp_path(ex, "method"), ex->method->name, ex->method->name);
    return evict_budget_check(ex, d);
}

static int runtime_observe(const Experiment *ex, const MethodInput *in)
{
    if (!in->Q_obs || in->n_obs == 0 || in->n_obs_heads == 0)
        return kvc_fail("%s (layer %zu, head %zu): no observation queries to score tokens with (got none)",
                        ex->method->name, in->layer, in->head);
    return 0;
}

/* ---- h2o ---- */

static const ParamDesc h2o_params[] = {
    EVICT_BUDGET_PARAMS,
    {.name = "recent_ratio", .kind = PARAM_NUM, .def = 0, .num_def = 0.5, .num_lo = 0, .num_hi = 1,
     .help = "share of the budget given to the most recent tokens: floor(recent_ratio x budget); the rest are heavy hitters"},
    {.name = "normalize", .kind = PARAM_BOOL, .def = 0, .id_when_set = 1,
     .help = "divide each token's accumulated attention by the observation queries that saw it, then average over "
             "the query heads (kvpress's ObservedAttentionPress; with recent_ratio 0)"},
};

static int h2o_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    memset(out, 0, sizeof *out);
    if (runtime_observe(ex, in)) return -1;
    size_t T = in->T, budget = evict_budget(ex, T);
    size_t recent = (size_t)floor(exp_param_num(ex, "recent_ratio") * (double)budget);
    int normalize = exp_param(ex, "normalize") != 0;
    double *acc = xcalloc(T, sizeof *acc), *w = xmalloc(T * sizeof *w), *s = NULL, *seen = NULL;
    if (normalize) {   /* seen[t]: observation queries at or after row t's position */
        s = xmalloc(T * sizeof *s);
        seen = xcalloc(T, sizeof *seen);
        for (size_t j = 0; j < in->n_obs; j++)
            for (size_t t = 0, c = visible_rows(in, j); t < c; t++) seen[t] = seen[t] + 1.0;
    }
    for (size_t g = 0; g < in->n_obs_heads; g++) {
        double *sum = normalize ? s : acc;
        if (normalize) memset(s, 0, T * sizeof *s);
        for (size_t j = 0; j < in->n_obs; j++) {
            obs_weights(w, in, g, j);
            for (size_t t = 0; t < T; t++) sum[t] = sum[t] + w[t];
        }
        if (normalize)
            for (size_t t = 0; t < T; t++) acc[t] = acc[t] + (seen[t] > 0 ? s[t] / seen[t] : 0.0);
    }
    if (normalize)
        for (size_t t = 0; t < T; t++) acc[t] = acc[t] / (double)in->n_obs_heads;
    unsigned char *forced = xcalloc(T, 1);
    for (size_t t = T - recent; t < T; t++) forced[t] = 1;
    evict_select(out, acc, forced, T, budget - recent);
    free(acc); free(w); free(s); free(seen); free(forced);
    out->bytes = evict_indexed_bytes(out->n_kept, in);
    return 0;
}

const MethodDesc method_h2o = {
    .name = "h2o",
    .factor = "tokens",
    .summary = "heavy hitters by accumulated attention of the observation queries + a recent window (H2O; normalize: "
               "kvpress's ObservedAttentionPress); int32 indices",
    .params = h2o_params,
    .n_params = sizeof h2o_params / sizeof h2o_params[0],
    .check = observe_check,
    .apply = h2o_apply,
    .evicts = 1,
    .kept_tokens = evict_kept_tokens,
};

/* ---- snapkv ---- */

static const char *const pooling_choices[] = {"max", "avg", NULL};
enum { POOL_MAX = 0, POOL_AVG = 1 };

static const ParamDesc snap_params[] = {
    EVICT_BUDGET_PARAMS,
    {.name = "window_size", .kind = PARAM_INT, .def = 0, .lo = 0, .hi = 1L << 40,
     .help = "observation window: the last window_size observation queries, 1..observe.window; 0: all of them"},
    {.name = "kernel_size", .kind = PARAM_INT, .def = 5, .lo = 1, .hi = 1L << 20,
     .help = "pooling kernel over neighbouring tokens, odd"},
    {.name = "pooling", .kind = PARAM_ENUM, .def = POOL_MAX, .choices = pooling_choices,
     .help = "how the kernel pools the prefix scores"},
};

static size_t snap_window(const Experiment *ex, size_t W)
{
    long ws = exp_param(ex, "window_size");
    return ws == 0 ? W : (size_t)ws;
}

static int snap_check(const Experiment *ex, const Dims *d)
{
    if (observe_check(ex, d)) return -1;
    long ws = exp_param(ex, "window_size"), k = exp_param(ex, "kernel_size");
    if ((unsigned long)ws > d->n_obs)
        return kvc_fail("%s: window_size must be in 0..observe.window = %zu (got %ld)",
                        exp_param_path(ex, "window_size"), d->n_obs, ws);
    if (k % 2 == 0)
        return kvc_fail("%s: kernel_size must be odd, so the pooled scores line up with the tokens (got %ld)",
                        exp_param_path(ex, "kernel_size"), k);
    size_t w = snap_window(ex, d->n_obs), b = evict_budget(ex, d->T);
    if (b < w)
        return kvc_fail("%s: the budget (%zu tokens) must hold the observation window of %zu tokens, which is "
                        "always kept (got budget %zu)", exp_param_path(ex, evict_budget_name(ex)), b, w, b);
    return 0;
}

static int snap_apply(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    memset(out, 0, sizeof *out);
    if (runtime_observe(ex, in)) return -1;
    size_t T = in->T, W = in->n_obs, ws = snap_window(ex, W), budget = evict_budget(ex, T);
    if (ws > W) ws = W;
    size_t k = (size_t)exp_param(ex, "kernel_size"), h = k / 2;
    long pool = exp_param(ex, "pooling");
    size_t first = W - ws, P = 0;   /* the window's first query; P prefix rows before its position */
    while (P < T && evict_pos(in, P) < in->obs_pos[first]) P++;
    double *score = xcalloc(T, sizeof *score), *v = xmalloc(T * sizeof *v), *w = xmalloc(T * sizeof *w);
    for (size_t g = 0; g < in->n_obs_heads; g++) {
        memset(v, 0, T * sizeof *v);
        for (size_t j = first; j < W; j++) {
            obs_weights(w, in, g, j);
            for (size_t t = 0; t < P; t++) v[t] = v[t] + w[t];
        }
        for (size_t t = 0; t < P; t++) {
            size_t lo = t >= h ? t - h : 0, hi = t + h < P ? t + h : P - 1;
            double x = pool == POOL_MAX ? v[lo] : 0.0;
            for (size_t u = lo; u <= hi; u++) {
                if (pool == POOL_MAX) x = v[u] > x ? v[u] : x;
                else x = x + v[u];
            }
            if (pool == POOL_AVG) x = x / (double)k;
            score[t] = score[t] + x;
        }
    }
    unsigned char *forced = xcalloc(T, 1);
    for (size_t t = P; t < T; t++) forced[t] = 1;
    size_t nw = T - P;
    evict_select(out, score, forced, T, budget > nw ? budget - nw : 0);
    free(score); free(v); free(w); free(forced);
    out->bytes = evict_indexed_bytes(out->n_kept, in);
    return 0;
}

const MethodDesc method_snapkv = {
    .name = "snapkv",
    .factor = "tokens",
    .summary = "prefix tokens by the pooled attention of the last observation queries, plus that window (SnapKV); "
               "int32 indices",
    .params = snap_params,
    .n_params = sizeof snap_params / sizeof snap_params[0],
    .check = snap_check,
    .apply = snap_apply,
    .evicts = 1,
    .kept_tokens = evict_kept_tokens,
};

/* ---- tova ---- */

static const char *const heads_choices[] = {"group", "layer", NULL};
enum { HEADS_GROUP = 0, HEADS_LAYER = 1 };

static const ParamDesc tova_params[] = {
    EVICT_BUDGET_PARAMS,
    {.name = "heads", .kind = PARAM_ENUM, .def = HEADS_GROUP, .choices = heads_choices, .id_when_set = 1,
     .help = "group: each KV head sums its query heads; layer: TOVA's own, the mean over the layer's query heads, "
             "one selection for every KV head of the layer"},
};

/* heads "group": one KV head. */
static int tova_group(Compressed *out, const Experiment *ex, const MethodInput *in)
{
    memset(out, 0, sizeof *out);
    if (runtime_observe(ex, in)) return -1;
    size_t T = in->T;
    double *score = xcalloc(T, sizeof *score), *w = xmalloc(T * sizeof *w);
    for (size_t g = 0; g < in->n_obs_heads; g++) {
        obs_weights(w, in, g, in->n_obs - 1);
        for (size_t t = 0; t < T; t++) score[t] = score[t] + w[t];
    }
    evict_select(out, score, NULL, T, evict_budget(ex, T));
    free(score); free(w);
    out->bytes = evict_indexed_bytes(out->n_kept, in);
    return 0;
}

/* The first row at which KV heads a and b hold different tokens (positions), or SIZE_MAX: the same rows. */
static size_t first_other_row(const MethodInput *a, const MethodInput *b)
{
    size_t n = a->T < b->T ? a->T : b->T;
    for (size_t t = 0; t < n; t++)
        if (evict_pos(a, t) != evict_pos(b, t)) return t;
    return a->T == b->T ? SIZE_MAX : n;
}

static int tova_layer(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H)
{
    if (exp_param(ex, "heads") == HEADS_GROUP) {
        for (size_t h = 0; h < H; h++)
            if (tova_group(&out[h], ex, &in[h])) return -1;
        return 0;
    }
    size_t T = in[0].T, n_q = 0;
    for (size_t h = 0; h < H; h++) {
        if (runtime_observe(ex, &in[h])) return -1;
        size_t r = first_other_row(&in[0], &in[h]);
        if (r != SIZE_MAX)
            return kvc_fail("%s (layer %zu): heads \"layer\" keeps one set of tokens for every KV head of the layer, "
                            "but KV head %zu holds other tokens than KV head 0 (an earlier pipeline step evicted per "
                            "head) (got %zu and %zu rows, the first difference at row %zu)", ex->method->name,
                            in[0].layer, h, T, in[h].T, r);
    }
    double *score = xcalloc(T, sizeof *score), *w = xmalloc(T * sizeof *w);
    for (size_t h = 0; h < H; h++)
        for (size_t g = 0; g < in[h].n_obs_heads; g++, n_q++) {
            obs_weights(w, &in[h], g, in[h].n_obs - 1);
            for (size_t t = 0; t < T; t++) score[t] = score[t] + w[t];
        }
    for (size_t t = 0; t < T; t++) score[t] = score[t] / (double)n_q;
    evict_select(&out[0], score, NULL, T, evict_budget(ex, T));
    free(score); free(w);
    size_t n = out[0].n_kept;
    for (size_t h = 0; h < H; h++) {
        if (h > 0) {
            out[h].n_kept = n;
            out[h].kept = xmalloc((n ? n : 1) * sizeof *out[h].kept);
            memcpy(out[h].kept, out[0].kept, n * sizeof *out[h].kept);
        }
        out[h].bytes = evict_kept_bytes(n, &in[h]) + method_split_bytes(4 * (uint64_t)n, H, h);
    }
    return 0;
}

const MethodDesc method_tova = {
    .name = "tova",
    .factor = "tokens",
    .summary = "keep the tokens the last observation query attends to most (TOVA; heads \"layer\": one selection "
               "per layer, as TOVA's own code); int32 indices",
    .params = tova_params,
    .n_params = sizeof tova_params / sizeof tova_params[0],
    .check = observe_check,
    .apply = method_apply_one_head,
    .apply_layer = tova_layer,
    .evicts = 1,
    .kept_tokens = evict_kept_tokens,
};
