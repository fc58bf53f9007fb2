/* schema: validate the seed, data and metrics blocks into Config (see schema.h). */
#include "config/schema.h"
#include "config/files.h"
#include "config/model_cfg.h"
#include "config/shapes.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- seed ---- */

int schema_seed(const JsonCtx *c, Config *cfg, const cJSON *node)
{
    if (!node) {
        cfg->seed = xstrdup("0");
        return 0;
    }
    if (cJSON_IsNumber(node)) {
        double v = node->valuedouble;
        if (v == 0 && signbit(v)) return json_bad(c, "seed", node, "an integer must not be written -0; write 0");
        /* 2^53 is excluded: 2^53 + 1 parses to the same double, so it would silently become another seed */
        if (!isfinite(v) || v != floor(v) || v < 0 || v >= 9007199254740992.0)
            return json_bad(c, "seed", node,
                       "must be an integer in 0..2^53-1 as a JSON number, or a decimal string for larger seeds");
        char buf[32];
        snprintf(buf, sizeof buf, "%.0f", v);
        cfg->seed = xstrdup(buf);
        return 0;
    }
    if (cJSON_IsString(node)) {
        const char *s = node->valuestring;
        int ok = s[0] != '\0';
        for (const char *p = s; *p; p++)
            if (*p < '0' || *p > '9') ok = 0;
        if (!ok) return json_bad(c, "seed", node, "a seed string must be a non-negative decimal integer");
        cfg->seed = xstrdup(s);
        return 0;
    }
    return json_bad(c, "seed", node, "must be a non-negative integer (number or decimal string)");
}

/* ---- data ---- */

static int parse_outliers(const JsonCtx *c, Config *cfg, const cJSON *node)
{
    const char *path = "data.keys.outliers";
    if (!cJSON_IsArray(node)) return json_bad(c, path, node, "must be a list of {\"channel\": c, \"scale\": s}");
    size_t n = (size_t)cJSON_GetArraySize(node);
    cfg->outliers = xcalloc(n, sizeof *cfg->outliers);
    static const char *const keys[] = {"channel", "scale", NULL};
    size_t i = 0;
    for (const cJSON *it = node->child; it; it = it->next, i++) {
        char p[64];
        snprintf(p, sizeof p, "%s.%zu", path, i);
        if (json_need_object(c, it, p) || json_check_keys(c, it, p, keys)) return -1;
        long ch;
        if (json_req_int(c, it, p, "channel", 0, (long)cfg->dims.D - 1, &ch)) return -1;
        for (size_t j = 0; j < i; j++)
            if (cfg->outliers[j].channel == (size_t)ch) {
                char pc[96];
                json_join(pc, sizeof pc, p, "channel");
                return json_bad(c, pc, json_member(it, "channel"), "channel already listed at %s.%zu", path, j);
            }
        char ps[96];
        json_join(ps, sizeof ps, p, "scale");
        if (!json_member(it, "scale")) return json_bad(c, ps, NULL, "missing required key (a finite number)");
        if (json_num(c, json_member(it, "scale"), ps, -HUGE_VAL, HUGE_VAL, &cfg->outliers[i].scale)) return -1;
        cfg->outliers[i].channel = (size_t)ch;
        cfg->n_outliers = i + 1;
    }
    return 0;
}
/* A number strictly between 0 and 1 (a share of attention). */
static int req_share(const JsonCtx *c, const cJSON *obj, const char *path, const char *key, double *out)
{
    char p[256];
    json_join(p, sizeof p, path, key);
    const cJSON *n = json_member(obj, key);
    if (!n) return json_bad(c, p, NULL, "missing required key (a share of attention, strictly between 0 and 1)");
    if (!cJSON_IsNumber(n) || !isfinite(n->valuedouble) || n->valuedouble <= 0 || n->valuedouble >= 1)
        return json_bad(c, p, n, "must be a number strictly between 0 and 1");
    *out = n->valuedouble;
    return 0;
}

/* data.keys.outlier_channels: {"count": n, "scale": s | [lo, hi]} */
static int parse_outlier_channels(const JsonCtx *c, Config *cfg, const cJSON *node)
{
    const char *path = "data.keys.outlier_channels";
    static const char *const keys[] = {"count", "scale", NULL};
    if (json_need_object(c, node, path) || json_check_keys(c, node, path, keys)) return -1;
    long n;
    if (json_req_int(c, node, path, "count", 1, (long)cfg->dims.D, &n)) return -1;
    const cJSON *s = json_member(node, "scale");
    const char *sp = "data.keys.outlier_channels.scale";
    const char *what = "must be a number > 0 or a list [lo, hi] with 0 < lo <= hi (multiples of the median |K|)";
    if (!s) return json_bad(c, sp, NULL, "missing required key (a number > 0, or a list [lo, hi])");
    double lo, hi;
    if (cJSON_IsNumber(s)) {
        lo = hi = s->valuedouble;
    } else if (cJSON_IsArray(s) && cJSON_GetArraySize(s) == 2 && cJSON_IsNumber(s->child) &&
               cJSON_IsNumber(s->child->next)) {
        lo = s->child->valuedouble;
        hi = s->child->next->valuedouble;
    } else {
        return json_bad(c, sp, s, "%s", what);
    }
    if (!isfinite(lo) || !isfinite(hi) || !(lo > 0) || !(hi >= lo)) return json_bad(c, sp, s, "%s", what);
    cfg->oc_count = (size_t)n;
    cfg->oc_lo = lo;
    cfg->oc_hi = hi;
    return 0;
}

static int parse_keys(const JsonCtx *c, Config *cfg, const cJSON *keys)
{
    static const char *const normal_keys[] = {"generator", "outliers", "outlier_channels", NULL};
    static const char *const lowrank_keys[] = {"generator", "rank", "scale", "noise", "outliers", "outlier_channels",
                                               NULL};
    static const char *const gens[] = {"normal", "lowrank", NULL};
    if (json_need_object(c, keys, "data.keys")) return -1;
    const cJSON *g = json_member(keys, "generator");
    if (!g) return json_missing(c, keys, "data.keys", "generator", "(\"normal\" or \"lowrank\")");
    long gi;
    if (json_choice(c, g, "data.keys.generator", gens, &gi)) return -1;
    cfg->keys_gen = gi == 0 ? KEYS_NORMAL : KEYS_LOWRANK;
    if (json_check_keys(c, keys, "data.keys", gi == 0 ? normal_keys : lowrank_keys)) return -1;
    if (cfg->keys_gen == KEYS_LOWRANK) {
        long r;
        if (json_req_int(c, keys, "data.keys", "rank", 1, (long)CONFIG_MAX_HEAD_DIM, &r)) return -1;
        size_t n;   /* per KV head, as the keys themselves */
        if (size_mul(cfg->dims.T, (size_t)r, &n) || n > CONFIG_MAX_NUMBERS ||
            size_mul((size_t)r, cfg->dims.D, &n) || n > CONFIG_MAX_NUMBERS)
            return json_bad(c, "data.keys.rank", json_member(keys, "rank"),
                       "tokens x rank and rank x head_dim must each be at most %lu numbers (per KV head)",
                       CONFIG_MAX_NUMBERS);
        cfg->keys_rank = (size_t)r;
        if (json_opt_num(c, keys, "data.keys", "scale", -HUGE_VAL, HUGE_VAL, 1.0, &cfg->keys_scale)) return -1;
        if (json_opt_num(c, keys, "data.keys", "noise", 0.0, HUGE_VAL, 0.0, &cfg->keys_noise)) return -1;
    }
    const cJSON *o = json_member(keys, "outliers");
    if (o && parse_outliers(c, cfg, o)) return -1;
    const cJSON *oc = json_member(keys, "outlier_channels");
    if (oc && parse_outlier_channels(c, cfg, oc)) return -1;
    return 0;
}

/* The bound on queries: H_q x n x max(T, D) numbers per layer (a layer's queries and their attention weights, made
 * a layer at a time for streamed data), and L x H_q x n x D (the queries, held whole). */
static int check_query_count(const JsonCtx *c, const Config *cfg, const char *path, const cJSON *node, size_t n)
{
    size_t x, y, m = cfg->dims.T > cfg->dims.D ? cfg->dims.T : cfg->dims.D;
    if (size_mul(cfg->q_heads, n, &x) || size_mul(x, m, &y) || y > CONFIG_MAX_NUMBERS ||
        size_mul(x, cfg->layers, &x) || size_mul(x, cfg->dims.D, &x) || x > CONFIG_MAX_NUMBERS)
        return json_bad(c, path, node, "q_heads x queries x max(tokens, head_dim) per layer and layers x q_heads x "
                        "queries x head_dim must each be at most %lu numbers", CONFIG_MAX_NUMBERS);
    return 0;
}

/* data.query: evaluation queries. */
static int parse_query(const JsonCtx *c, Config *cfg, const cJSON *q, int has_values)
{
    static const char *const lb_keys[] = {"generator", "token", "tokens", "count", "weight", "noise",
                                          "head_correlation", "bias", NULL};
    static const char *const kg_keys[] = {"generator", "count", "weight", "noise", "head_correlation", "bias", NULL};
    static const char *const gens[] = {"look_back", "key_gaussian", NULL};
    const char *path = "data.query";
    QuerySpec *qs = &cfg->query;
    long gi;
    if (json_need_object(c, q, path)) return -1;
    if (!json_member(q, "generator"))
        return json_missing(c, q, path, "generator", "(\"look_back\" or \"key_gaussian\")");
    if (json_choice(c, json_member(q, "generator"), "data.query.generator", gens, &gi)) return -1;
    qs->gen = gi == 0 ? QUERY_LOOK_BACK : QUERY_KEY_GAUSSIAN;
    if (json_check_keys(c, q, path, gi == 0 ? lb_keys : kg_keys)) return -1;
    if (!has_values) return json_bad(c, path, q, "a query needs data.values (attention reads V)");
    long T = (long)cfg->dims.T;
    const cJSON *tok = json_member(q, "token"), *toks = json_member(q, "tokens"), *cnt = json_member(q, "count");
    if (qs->gen == QUERY_LOOK_BACK && (!!tok + !!toks + !!cnt) != 1) {
        if (!tok && !toks && !cnt)
            return json_bad(c, "data.query.token", NULL,
                       "missing required key (an integer in 0..%ld); or give \"tokens\" (a list) or \"count\" "
                       "(targets drawn uniformly)", T - 1);
        return json_bad(c, path, q, "give exactly one of \"token\", \"tokens\" and \"count\"");
    }
    if (tok) {
        long t;
        if (json_int(c, tok, "data.query.token", 0, T - 1, &t)) return -1;
        qs->n = 1;
        qs->tokens = xmalloc(sizeof *qs->tokens);
        qs->tokens[0] = (size_t)t;
        cfg->q_token = (size_t)t;
    } else if (toks) {
        if (!cJSON_IsArray(toks) || !toks->child)
            return json_bad(c, "data.query.tokens", toks, "must be a non-empty list of integers in 0..%ld", T - 1);
        size_t n = (size_t)cJSON_GetArraySize(toks), i = 0;
        if (check_query_count(c, cfg, "data.query.tokens", toks, n)) return -1;
        qs->tokens = xcalloc(n, sizeof *qs->tokens);
        for (const cJSON *it = toks->child; it; it = it->next, i++) {
            char p[64];
            long t;
            snprintf(p, sizeof p, "data.query.tokens.%zu", i);
            if (json_int(c, it, p, 0, T - 1, &t)) return -1;
            qs->tokens[i] = (size_t)t;
        }
        qs->n = n;
    } else {
        long n;
        if (json_opt_int(c, q, path, "count", 1, (long)CONFIG_MAX_NUMBERS, 1, &n)) return -1;
        if (check_query_count(c, cfg, "data.query.count", json_member(q, "count"), (size_t)n)) return -1;
        qs->n = (size_t)n;
    }
    if (json_opt_num(c, q, path, "weight", -HUGE_VAL, HUGE_VAL, 1.0, &qs->weight)) return -1;
    if (json_opt_num(c, q, path, "noise", 0.0, HUGE_VAL, 0.0, &qs->noise)) return -1;
    if (json_opt_num(c, q, path, "head_correlation", 0.0, 1.0, 0.0, &qs->head_correlation)) return -1;
    if (json_opt_num(c, q, path, "bias", 0.0, HUGE_VAL, 0.0, &cfg->q_bias)) return -1;
    cfg->q_weight = qs->weight;
    cfg->q_noise = qs->noise;
    cfg->dims.has_query = 1;
    return 0;
}

/* data.observe: observation queries at the last `window` positions of the cache (causal). */
static int parse_observe(const JsonCtx *c, Config *cfg, const cJSON *o)
{
    static const char *const keys[] = {"generator", "window", "weight", "noise", NULL};
    static const char *const gens[] = {"look_back", "key_gaussian", NULL};
    const char *path = "data.observe";
    QuerySpec *qs = &cfg->observe;
    if (json_need_object(c, o, path) || json_check_keys(c, o, path, keys)) return -1;
    long gi = 0, w;
    if (json_member(o, "generator") && json_choice(c, json_member(o, "generator"), "data.observe.generator", gens, &gi))
        return -1;
    qs->gen = gi == 0 ? QUERY_LOOK_BACK : QUERY_KEY_GAUSSIAN;
    long T = (long)cfg->dims.T;
    if (json_opt_int(c, o, path, "window", 1, T, T < 32 ? T : 32, &w)) return -1;
    if (check_query_count(c, cfg, "data.observe.window", json_member(o, "window"), (size_t)w)) return -1;
    qs->n = (size_t)w;
    if (json_opt_num(c, o, path, "weight", -HUGE_VAL, HUGE_VAL, 1.0, &qs->weight)) return -1;
    if (json_opt_num(c, o, path, "noise", 0.0, HUGE_VAL, 0.0, &qs->noise)) return -1;
    return 0;
}

/* data.head_correlation: {"rho": r, "group": g} */
static int parse_head_correlation(const JsonCtx *c, Config *cfg, const cJSON *node)
{
    static const char *const keys[] = {"rho", "group", NULL};
    const char *path = "data.head_correlation";
    if (json_need_object(c, node, path) || json_check_keys(c, node, path, keys)) return -1;
    if (!json_member(node, "rho")) return json_bad(c, "data.head_correlation.rho", NULL,
                                                   "missing required key (a number in 0..1)");
    if (json_num(c, json_member(node, "rho"), "data.head_correlation.rho", 0.0, 1.0, &cfg->head_rho)) return -1;
    long H = (long)cfg->kv_heads, g;
    if (json_opt_int(c, node, path, "group", 1, H, H, &g)) return -1;
    if (H % g != 0) return json_bad(c, "data.head_correlation.group", json_member(node, "group"),
                                    "must divide kv_heads = %ld", H);
    cfg->head_group = (size_t)g;
    return 0;
}

/* data.rope: {"base": b, "dims": d, "style": "half" | "interleaved", "cache": "post" | "pre"} */
static int parse_rope(const JsonCtx *c, Config *cfg, const cJSON *node)
{
    static const char *const keys[] = {"base", "dims", "style", "cache", NULL};
    static const char *const styles[] = {"half", "interleaved", NULL};
    static const char *const caches[] = {"post", "pre", NULL};
    const char *path = "data.rope";
    if (json_need_object(c, node, path) || json_check_keys(c, node, path, keys)) return -1;
    const cJSON *b = json_member(node, "base");
    cfg->rope_base = 10000.0;
    if (b && (!cJSON_IsNumber(b) || !isfinite(b->valuedouble) || !(b->valuedouble > 1)))
        return json_bad(c, "data.rope.base", b, "must be a finite number > 1");
    if (b) cfg->rope_base = b->valuedouble;
    long D = (long)cfg->dims.D, dims, st = ROPE_HALF, ca = 0;
    const char *dp = "data.rope.dims";
    if (json_opt_int(c, node, path, "dims", 2, D, D, &dims)) return -1;
    if (dims % 2 != 0 && json_member(node, "dims"))
        return json_bad(c, dp, json_member(node, "dims"),
                        "must be even (RoPE rotates channel pairs), 2..head_dim = %ld", D);
    if (dims % 2 != 0)
        return json_bad(c, dp, NULL,
                        "defaults to head_dim = %ld, which is odd; give an even dims (RoPE rotates channel "
                   "pairs)", D);
    const cJSON *style = json_member(node, "style"), *cache = json_member(node, "cache");
    if (style && json_choice(c, style, "data.rope.style", styles, &st)) return -1;
    if (cache && json_choice(c, cache, "data.rope.cache", caches, &ca)) return -1;
    cfg->has_rope = 1;
    cfg->rope_dims = (size_t)dims;
    cfg->rope_style = st == 0 ? ROPE_HALF : ROPE_INTERLEAVED;
    cfg->rope_cache_pre = ca == 1;
    return 0;
}

/* data.sinks, data.recent and data.heavy_hitters: shape attention relative to the mean evaluation query. */
static int parse_shaping(const JsonCtx *c, Config *cfg, const cJSON *sinks, const cJSON *recent, const cJSON *hh)
{
    long T = (long)cfg->dims.T;
    if (sinks) {
        static const char *const keys[] = {"tokens", "share", NULL};
        long n;
        if (json_need_object(c, sinks, "data.sinks") || json_check_keys(c, sinks, "data.sinks", keys)) return -1;
        if (!cfg->dims.has_query)
            return json_bad(c, "data.sinks", sinks, "sinks are aligned with the mean evaluation query; add data.query");
        if (T < 2) return json_bad(c, "data.sinks", sinks, "needs at least 2 tokens (some must be left to share with)");
        if (json_opt_int(c, sinks, "data.sinks", "tokens", 1, T - 1, T - 1 < 4 ? T - 1 : 4, &n)) return -1;
        if (req_share(c, sinks, "data.sinks", "share", &cfg->sink_share)) return -1;
        cfg->sink_tokens = (size_t)n;
    }
    if (recent) {
        static const char *const keys[] = {"tokens", "share", NULL};
        long n, room = T - 1 - (long)cfg->sink_tokens;
        if (json_need_object(c, recent, "data.recent") || json_check_keys(c, recent, "data.recent", keys)) return -1;
        if (!cfg->dims.has_query)
            return json_bad(c, "data.recent", recent,
                            "recent tokens are aligned with the mean evaluation query; add data.query");
        if (room < 1)
            return json_bad(c, "data.recent", recent,
                            "needs tokens beyond the sinks and one more (got tokens = %ld)", T);
        if (json_req_int(c, recent, "data.recent", "tokens", 1, room, &n)) return -1;
        if (req_share(c, recent, "data.recent", "share", &cfg->recent_share)) return -1;
        cfg->recent_tokens = (size_t)n;
    }
    if (hh) {
        static const char *const keys[] = {"count", "share", "spread", NULL};
        long n;
        if (json_need_object(c, hh, "data.heavy_hitters") || json_check_keys(c, hh, "data.heavy_hitters", keys))
            return -1;
        if (!cfg->dims.has_query)
            return json_bad(c, "data.heavy_hitters", hh,
                       "heavy hitters are aligned with the mean evaluation query; add data.query");
        long room = T - 1 - (long)cfg->sink_tokens;
        if (json_opt_int(c, hh, "data.heavy_hitters", "count", 0, room < 0 ? 0 : room, 0, &n)) return -1;
        cfg->hh_count = (size_t)n;
        if (n > 0 && req_share(c, hh, "data.heavy_hitters", "share", &cfg->hh_share)) return -1;
        if (n == 0 && json_member(hh, "share"))
            return json_bad(c, "data.heavy_hitters.share", json_member(hh, "share"), "needs count >= 1");
        if (json_opt_num(c, hh, "data.heavy_hitters", "spread", 0.0, HUGE_VAL, 0.0, &cfg->hh_spread)) return -1;
    }
    return 0;
}

/* ---- data.source "files" (README "Data from files"; the headers are read by files.c, the values by
 * src/data/load.c when the data is made) ---- */

/* path resolved against the directory of the config file `cfgname` (unless absolute) */
static char *resolve_path(const char *cfgname, const char *path)
{
    const char *slash = strrchr(cfgname, '/');
    if (path[0] == '/' || !slash) return xstrdup(path);
    size_t dl = (size_t)(slash - cfgname) + 1, n = dl + strlen(path) + 1;
    char *out = xmalloc(n);
    memcpy(out, cfgname, dl);
    memcpy(out + dl, path, strlen(path) + 1);
    return out;
}

/* data.files.<role>: "file" or {"path": "file", "name": "tensor"} */
static int parse_file_spec(const JsonCtx *c, FileSpec *fs, const cJSON *node, const char *path)
{
    static const char *const keys[] = {"path", "name", NULL};
    const char *what = "must be a file name, or {\"path\": file, \"name\": tensor} for a .safetensors file";
    const cJSON *p = node, *nm = NULL;
    char pp[96], np[96];
    snprintf(pp, sizeof pp, "%s", path);
    if (cJSON_IsObject(node)) {
        if (json_check_keys(c, node, path, keys)) return -1;
        p = json_member(node, "path");
        nm = json_member(node, "name");
        json_join(pp, sizeof pp, path, "path");
        json_join(np, sizeof np, path, "name");
        if (!p) return json_bad(c, pp, NULL, "missing required key (the tensor file)");
        if (nm && (!cJSON_IsString(nm) || !nm->valuestring[0]))
            return json_bad(c, np, nm, "must be a non-empty tensor name");
    } else if (!cJSON_IsString(node)) {
        return json_bad(c, path, node, "%s", what);
    }
    if (!cJSON_IsString(p) || !p->valuestring[0]) return json_bad(c, pp, p, "must be a non-empty file name");
    fs->path = resolve_path(c->file, p->valuestring);
    fs->name = nm ? xstrdup(nm->valuestring) : NULL;
    return 0;
}

/* data.outlier_channels (files only): [c, ...] for every layer, or [[c, ...], ...] one list per layer */
static int parse_file_outliers(const JsonCtx *c, Config *cfg, const cJSON *node)
{
    const char *path = "data.outlier_channels";
    size_t L = cfg->layers, D = cfg->dims.D, any = 0;
    if (!cJSON_IsArray(node))
        return json_bad(c, path, node,
                        "must be a list of channels (the same in every layer) or a list of %zu lists, one "
                   "per layer", L);
    int nested = node->child && cJSON_IsArray(node->child);
    if (nested && (size_t)cJSON_GetArraySize(node) != L)
        return json_bad(c, path, node, "a list of lists needs one list of channels per layer (%zu layers)", L);
    cfg->file_outliers = xcalloc(L * D, 1);
    size_t l = 0;
    for (const cJSON *lst = nested ? node->child : node; lst; lst = nested ? lst->next : NULL, l++) {
        char p[64];
        if (nested) snprintf(p, sizeof p, "%s.%zu", path, l);
        else snprintf(p, sizeof p, "%s", path);
        if (!cJSON_IsArray(lst)) return json_bad(c, p, lst, "must be a list of channels");
        size_t i = 0;
        for (const cJSON *it = lst->child; it; it = it->next, i++) {
            char pi[96];
            long ch;
            snprintf(pi, sizeof pi, "%s.%zu", p, i);
            if (json_int(c, it, pi, 0, (long)D - 1, &ch)) return -1;
            if (cfg->file_outliers[(nested ? l : 0) * D + (size_t)ch])
                return json_bad(c, pi, it, "channel listed twice");
            for (size_t k = nested ? l : 0; k < (nested ? l + 1 : L); k++) cfg->file_outliers[k * D + (size_t)ch] = 1;
            any++;
        }
    }
    if (!any) {
        free(cfg->file_outliers);
        cfg->file_outliers = NULL;
    }
    return 0;
}

static int parse_data_files(const JsonCtx *c, Config *cfg, const cJSON *data)
{
    static const char *const keys[] = {"source", "files", "rope", "outlier_channels", NULL};
    static const char *const roles[] = {"keys", "values", "queries", "observe", NULL};
    for (const cJSON *it = data->child; it; it = it->next) {
        int ok = 0;
        for (size_t i = 0; keys[i]; i++) ok |= strcmp(keys[i], it->string) == 0;
        if (ok) continue;
        char p[256];
        cJSON name = {0};
        name.type = cJSON_String;
        name.valuestring = it->string;
        json_join(p, sizeof p, "data", it->string);
        return json_bad(c, p, &name, "unknown key with \"source\": \"files\" (sizes and data come from the files; "
                        "allowed: source, files, rope, outlier_channels); did you mean \"%s\"?",
                        json_nearest(it->string, keys));
    }
    if (json_check_keys(c, data, "data", keys)) return -1;   /* a key given twice */
    const cJSON *files = json_member(data, "files");
    if (!files)
        return json_bad(c, "data.files", NULL, "missing required object with \"source\": \"files\", e.g. {\"keys\": "
                   "\"k.npy\", \"values\": \"v.npy\", \"queries\": \"q.npy\"}");
    if (json_need_object(c, files, "data.files") || json_check_keys(c, files, "data.files", roles)) return -1;
    if (!json_member(files, "keys")) return json_bad(c, "data.files.keys", NULL,
                                                     "missing required key (the keys file)");
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        char p[64];
        json_join(p, sizeof p, "data.files", roles[r]);
        const cJSON *n = json_member(files, roles[r]);
        if (n && parse_file_spec(c, &cfg->files[r], n, p)) return -1;
    }
    if (json_member(files, "queries") && !json_member(files, "values"))
        return json_bad(c, "data.files.queries", json_member(files, "queries"),
                   "evaluation queries need data.files.values (attention reads V)");
    cfg->from_files = 1;
    if (files_read_headers(cfg, c->file)) return -1;
    const cJSON *r = json_member(data, "rope");
    if (r) {
        if (parse_rope(c, cfg, r)) return -1;
        if (!cfg->rope_cache_pre)
            return json_bad(c, "data.rope.cache", json_member(r, "cache"),
                            "with \"source\": \"files\" a rope block says that "
                       "the keys file holds pre-RoPE keys, which attention rotates: give \"cache\": \"pre\" (keys "
                       "saved after RoPE need no rope block)");
    }
    const cJSON *o = json_member(data, "outlier_channels");
    if (o && parse_file_outliers(c, cfg, o)) return -1;
    return 0;
}

/* data.shape: a model's geometry by name (shapes.h); *ms stays NULL when the key is absent. */
static int parse_shape(const JsonCtx *c, const cJSON *data, const ModelShape **ms)
{
    const cJSON *s = json_member(data, "shape");
    if (!s) return 0;
    if (!cJSON_IsString(s))
        return json_bad(c, "data.shape", s, "must be a model name string, one of %s", model_shape_names());
    if (!(*ms = model_shape_find(s->valuestring)))
        return json_bad(c, "data.shape", s, "unknown model shape; did you mean \"%s\"? see kvc size --help",
                        model_shape_nearest(s->valuestring));
    return 0;
}

/* A size key given beside data.shape must agree with it: a differing one is refused, not silently preferred. */
static int shape_conflicts(const JsonCtx *c, const cJSON *data, const ModelShape *ms, long D, long L, long H, long Hq)
{
    const char *const keys[] = {"head_dim", "layers", "kv_heads", "q_heads"};
    const long got[] = {D, L, H, Hq};
    const long want[] = {(long)ms->head_dim, (long)ms->layers, (long)ms->kv_heads, (long)ms->q_heads};
    for (int k = 0; k < 4; k++)
        if (json_member(data, keys[k]) && got[k] != want[k]) {
            char p[32];
            json_join(p, sizeof p, "data", keys[k]);
            return json_bad(c, p, json_member(data, keys[k]),
                            "contradicts data.shape \"%s\" (%s %ld); leave out one of the two", ms->name, keys[k],
                            want[k]);
        }
    return 0;
}

int schema_data(const JsonCtx *c, Config *cfg, const cJSON *data)
{
    static const char *const keys[] = {"source", "tokens", "head_dim", "layers", "kv_heads", "q_heads", "keys",
                                       "values", "query", "observe", "head_correlation", "rope", "sinks", "recent",
                                       "heavy_hitters", "shape",
                                       NULL};
    static const char *const sources[] = {"synthetic", "files", "model", NULL};
    long src = 0;
    if (json_need_object(c, data, "data")) return -1;
    const cJSON *source = json_member(data, "source");
    if (source && json_choice(c, source, "data.source", sources, &src)) return -1;
    if (src == 1) return parse_data_files(c, cfg, data);
    if (src == 2) return model_cfg_parse(c, cfg, data);
    if (json_check_keys(c, data, "data", keys)) return -1;
    long T, D, L, H, Hq;
    const ModelShape *ms = NULL;
    if (parse_shape(c, data, &ms)) return -1;
    if (json_req_int(c, data, "data", "tokens", 1, (long)CONFIG_MAX_TOKENS, &T)) return -1;
    if (ms ? json_opt_int(c, data, "data", "head_dim", 1, (long)CONFIG_MAX_HEAD_DIM, (long)ms->head_dim, &D)
           : json_req_int(c, data, "data", "head_dim", 1, (long)CONFIG_MAX_HEAD_DIM, &D))
        return -1;
    if ((unsigned long)T * (unsigned long)D > CONFIG_MAX_NUMBERS)
        return json_bad(c, "data.tokens", json_member(data, "tokens"),
                   "tokens x head_dim = %ld x %ld exceeds the limit of %lu numbers per tensor", T, D,
                   CONFIG_MAX_NUMBERS);
    if (json_opt_int(c, data, "data", "layers", 1, (long)CONFIG_MAX_HEADS, ms ? (long)ms->layers : 1, &L)) return -1;
    if (json_opt_int(c, data, "data", "kv_heads", 1, (long)CONFIG_MAX_HEADS, ms ? (long)ms->kv_heads : 1, &H))
        return -1;
    if (json_opt_int(c, data, "data", "q_heads", 1, (long)CONFIG_MAX_Q_HEADS, ms ? (long)ms->q_heads : H, &Hq))
        return -1;
    if (ms && shape_conflicts(c, data, ms, D, L, H, Hq)) return -1;
    if (Hq % H != 0)
        return json_bad(c, "data.q_heads", json_member(data, "q_heads"),
                        "must be a multiple of kv_heads = %ld (GQA groups)", H);
    /* per KV head only (tokens x head_dim, above): kvc run makes large synthetic data a few heads at a time
     * (src/data/synth.h); data held whole is refused beyond the limit per tensor where it is made (data_make) */
    cfg->dims.T = (size_t)T;
    cfg->dims.D = (size_t)D;
    cfg->layers = (size_t)L;
    cfg->kv_heads = (size_t)H;
    cfg->q_heads = (size_t)Hq;

    const cJSON *hc = json_member(data, "head_correlation");
    if (hc && parse_head_correlation(c, cfg, hc)) return -1;
    if (parse_keys(c, cfg, json_member(data, "keys"))) return -1;

    const cJSON *v = json_member(data, "values");
    if (v) {
        static const char *const vkeys[] = {"generator", NULL};
        static const char *const gens[] = {"normal", NULL};
        long gi;
        if (json_need_object(c, v, "data.values") || json_check_keys(c, v, "data.values", vkeys)) return -1;
        if (!json_member(v, "generator")) return json_missing(c, v, "data.values", "generator", "(\"normal\")");
        if (json_choice(c, json_member(v, "generator"), "data.values.generator", gens, &gi)) return -1;
        cfg->dims.has_values = 1;
    }

    const cJSON *q = json_member(data, "query");
    if (q && parse_query(c, cfg, q, v != NULL)) return -1;
    const cJSON *o = json_member(data, "observe");
    if (o && parse_observe(c, cfg, o)) return -1;
    const cJSON *r = json_member(data, "rope");
    if (r && parse_rope(c, cfg, r)) return -1;
    if (parse_shaping(c, cfg, json_member(data, "sinks"), json_member(data, "recent"),
                      json_member(data, "heavy_hitters")))
        return -1;
    return 0;
}

/* metrics: {"topk_recall_k": k} */
int schema_metrics(const JsonCtx *c, Config *cfg, const cJSON *m)
{
    static const char *const keys[] = {"topk_recall_k", NULL};
    long T = (long)cfg->dims.T, k;
    if (m && (json_need_object(c, m, "metrics") || json_check_keys(c, m, "metrics", keys))) return -1;
    if (json_opt_int(c, m, "metrics", "topk_recall_k", 1, T, T < 32 ? T : 32, &k)) return -1;
    cfg->recall_k = (size_t)k;
    return 0;
}
