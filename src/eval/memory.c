/* memory: the estimate of what a run allocates and the check against the machine's bounds (see memory.h). */
#include "eval/memory.h"
#include "base/memlimit.h"
#include "base/util.h"
#include "data/synth.h"
#include "eval/evaluate.h"

#include <stdio.h>
#include <string.h>

/* a x b, saturating (the estimate of a config within the limits never comes near 2^64, but be safe) */
static uint64_t mul(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

static uint64_t add(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/* Observation queries drawn as key_gaussian draw one number per token each (a = N(.., W, T)); look_back ones a few. */
static uint64_t observe_draws(const Config *cfg)
{
    return cfg->observe.n > 0 && cfg->observe.gen == QUERY_KEY_GAUSSIAN ? cfg->observe.n : 0;
}

/* The KV heads streamed data is evaluated (and first made) at a time: as many as threads (evaluate.c), the
 * layer's H when an experiment that runs needs them at once (method_layer_wide). */
static uint64_t chunk_heads(const Config *cfg, const MemRun *r)
{
    uint64_t H = cfg->kv_heads, n = (uint64_t)eval_threads();
    for (size_t i = 0; i < cfg->n_exps; i++)
        if ((!r->runs || r->runs[i]) && method_layer_wide(&cfg->exps[i])) return H;
    return n < H ? n : H;
}

/* The working set of experiment (or pipeline step) ex beyond the data and the reference, in doubles; U: the KV
 * heads in flight (chunk_heads for streamed data, else H). */
static uint64_t working_set(const Experiment *ex, const Config *cfg, uint64_t nq, int stream, uint64_t U)
{
    uint64_t T = cfg->dims.T, D = cfg->dims.D, H = cfg->kv_heads, v = cfg->dims.has_values != 0;
    uint64_t head = mul(T, D), layer = mul(H, head), chunk = mul(U, head), G = cfg->q_heads / H;
    int rewrites = 0, lowrank = 0, joint = 0, per_layer = ex->method->apply_layer != NULL;
    size_t steps = ex->n_steps ? ex->n_steps : 1;
    for (size_t s = 0; s < steps; s++) {
        const Experiment *e = ex->n_steps ? &ex->steps[s] : ex;
        rewrites |= !e->method->evicts;
        per_layer |= e->method->apply_layer != NULL;
        if (strcmp(e->method->name, "lowrank") == 0) {
            lowrank = 1;
            joint |= exp_param(e, "joint") != 0;
        }
    }
    uint64_t w = add(mul(4, nq), mul(2, head));               /* per-query errors; one head's scratch */
    if (rewrites) {
        w = add(w, mul(per_layer ? 2 : 1, mul(1 + v, chunk)));   /* K', V' of the heads (and the input) */
        int outliers = cfg->oc_count > 0 || cfg->n_outliers > 0 || cfg->file_outliers;
        if (outliers) w = add(w, mul(2, head));               /* k_error_ordinary's copies of one head */
    }
    if (lowrank) w = add(w, mul(2, joint ? layer : head));    /* the SVD's copies */
    if (stream) {   /* the heads made for the experiment, while they are made, and their reference */
        uint64_t Uq = mul(U, G), N = cfg->dims.has_query ? cfg->query.n : 0, Wg = observe_draws(cfg);
        int copies = cfg->has_rope || cfg->keys_gen == KEYS_LOWRANK || cfg->head_rho > 0 || cfg->oc_count > 0;
        w = add(w, add(mul(1 + v, chunk), add(copies ? chunk : 0, mul(mul(Uq, N + Wg), T))));
        w = add(w, add(add(mul(mul(Uq, N), add(D, mul(2, T))), mul(U, T)), cfg->rope_cache_pre ? chunk : 0));
    }
    return w;
}

void memory_estimate(MemEstimate *e, const Config *cfg, const MemRun *r)
{
    memset(e, 0, sizeof *e);
    uint64_t L = cfg->layers, H = cfg->kv_heads, Hq = cfg->q_heads, T = cfg->dims.T, D = cfg->dims.D;
    uint64_t v = cfg->dims.has_values != 0, N = cfg->dims.has_query ? cfg->query.n : 0, W = cfg->observe.n;
    uint64_t n = mul(mul(L, H), mul(T, D)), layer = mul(H, mul(T, D)), nq = mul(mul(L, Hq), N);
    int stream = synth_stream_wanted(cfg);
    uint64_t U = stream ? chunk_heads(cfg, r) : H, chunk = mul(U, mul(T, D));
    e->data = mul(8, add(add(stream ? 0 : mul(1 + v, n), mul(mul(mul(L, Hq), add(N, W)), D)), W));
    /* while the data is made, a layer at a time: the layer's K and V (unless the data is that one layer), a
     * second copy of a layer's tensor (lowrank keys and their noise, RoPE'd keys, head correlation, outlier
     * channels, a file's values) and the draws of the layer's queries (one per token) */
    int copies = cfg->has_rope || cfg->keys_gen == KEYS_LOWRANK || cfg->head_rho > 0 || cfg->oc_count > 0 ||
                 cfg->from_files;
    uint64_t made = stream ? chunk : layer, madeq = stream ? mul(U, Hq / H) : Hq;   /* streamed: U heads at a time */
    e->making = mul(8, add(add(L > 1 || stream ? mul(1 + v, made) : 0, copies ? made : 0),
                           mul(mul(madeq, add(N, observe_draws(cfg))), T)));
    if (!stream)   /* streamed data: each layer's reference is made in the experiment */
        e->reference = mul(8, add(add(mul(nq, add(D, mul(2, T))), mul(mul(L, H), T)), cfg->rope_cache_pre ? n : 0));
    for (size_t i = 0; i < cfg->n_exps; i++) {
        if (r->runs && !r->runs[i]) continue;
        uint64_t w = mul(8, working_set(&cfg->exps[i], cfg, nq, stream, U));
        if (w > e->experiment) {
            e->experiment = w;
            e->largest = i;
        }
    }
    if (stream && !r->timing) {   /* the experiments run together a layer at a time: each keeps its numbers */
        uint64_t runs = 0;
        for (size_t i = 0; i < cfg->n_exps; i++) runs += !r->runs || r->runs[i];
        uint64_t keep = add(mul(4, nq), mul(mul(L, H), 8));   /* per-query errors, per-head numbers */
        e->experiment = add(e->experiment, mul(8, mul(runs ? runs - 1 : 0, keep)));
    }
    if (r->timing) e->timing = add(mul(4, mul(1 + v, n)), mul(4, mul(mul(L, Hq), D)));
    e->rows = mul(mul(2 * cfg->n_exps, r->per_head ? mul(L, H) : 1), sizeof(Row));   /* run's, a table's */
    uint64_t run = add(add(e->reference, e->experiment), e->timing);
    e->total = add(add(add(e->data, e->making > run ? e->making : run), e->rows), MEMORY_OVERHEAD);
    e->limits_only = mul(r->timing ? r->threads : 0, (uint64_t)8 << 20);
    if (memlimit_limited()) e->limits_only = add(e->limits_only, MEMLIMIT_BLAS_BUFFER);   /* mapped at the first call */
}

int memory_check(const Config *cfg, const char *cfg_name, const MemRun *r)
{
    MemEstimate e;
    memory_estimate(&e, cfg, r);
    MemBound b;
    if (memlimit_check(e.total, e.limits_only, &b) == 0) return 0;
    char total[32], room[32], data[32], ref[32], exp[32], tim[32], lim[32];
    memlimit_fmt(total, sizeof total, e.total);
    memlimit_fmt(room, sizeof room, b.used < b.limit ? b.limit - b.used : 0);
    memlimit_fmt(lim, sizeof lim, b.limit);
    memlimit_fmt(data, sizeof data, e.data);
    memlimit_fmt(ref, sizeof ref, e.reference);
    memlimit_fmt(exp, sizeof exp, e.experiment);
    memlimit_fmt(tim, sizeof tim, e.timing);
    char *label = cfg->n_exps ? cfg->exps[e.largest].label : NULL;
    char shown[64] = "";
    if (label) {   /* one line, at most 40 bytes of it */
        size_t k = 0;
        for (const char *p = label; *p && k < 40; p++) shown[k++] = (unsigned char)*p < 0x20 ? ' ' : *p;
        snprintf(shown + k, sizeof shown - k, "%s", strlen(label) > 40 ? "..." : "");
    }
    char extra[96] = "";
    if (strstr(b.name, "ulimit") && e.limits_only) {
        char lo[32];
        memlimit_fmt(lo, sizeof lo, e.limits_only);
        snprintf(extra, sizeof extra, ", and %s of address space for OpenBLAS's buffer and thread stacks", lo);
    }
    return kvc_fail("%s: the run needs about %s of memory (data %s, reference %s, the largest experiment "
                    "experiments.%zu \"%s\" %s, decode timing %s)%s but %s of %s leaves %s; make the data smaller "
                    "(data.tokens, data.layers, data.kv_heads, query counts) or run where more memory is "
                    "available (got an estimate of %llu bytes)", cfg_name, total, data, ref,
                    cfg->n_exps ? cfg->exps[e.largest].src : 0, shown, exp, tim, extra, b.name, lim, room,
                    (unsigned long long)e.total);
}
