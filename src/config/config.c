/* config: parse, override, validate and expand a kvc experiment config (format v1, see README.md).
 *
 * This file is the only user of cJSON. Validation walks the JSON tree with the JSON path of every node
 * in hand, so each message names where the problem is. Paths use the same dotted form as --set
 * ("experiments.0.bits"), so a user can paste a path from an error into --set.
 */
#include "config/config.h"
#include "data/load.h"
#include "base/util.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Ctx {
    const char *file;    /* for messages */
} Ctx;

/* ---- messages ---- */

/* Compact JSON of a node, shortened to about 60 characters for a message. */
static void describe(char *buf, size_t cap, const cJSON *node)
{
    if (!node) {
        snprintf(buf, cap, "nothing");
        return;
    }
    if (cJSON_IsNumber(node)) { /* cJSON prints 15 digits when they are "close enough"; print the exact value */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, cap, "%.*g", prec, node->valuedouble);
            if (strtod(buf, NULL) == node->valuedouble) break;
        }
        return;
    }
    char *s = cJSON_PrintUnformatted(node);
    if (!s) {
        snprintf(buf, cap, "?");
        return;
    }
    if (strlen(s) > 60)
        snprintf(buf, cap, "%.57s...", s);
    else
        snprintf(buf, cap, "%s", s);
    cJSON_free(s);
}

static int bad(const Ctx *c, const char *path, const cJSON *got, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int bad(const Ctx *c, const char *path, const cJSON *got, const char *fmt, ...)
{
    char what[512], val[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    describe(val, sizeof val, got);
    return kvc_fail("%s: %s: %s (got %s)", c->file, path, what, val);
}

static const char *nearest(const char *word, const char *const *choices)
{
    const char *best = choices[0];
    size_t bd = (size_t)-1;
    for (size_t i = 0; choices[i]; i++) {
        size_t d = edit_distance(word, choices[i]);
        if (d < bd) { bd = d; best = choices[i]; }
    }
    return best;
}

static void join_path(char *out, size_t cap, const char *parent, const char *key)
{
    if (parent[0])
        snprintf(out, cap, "%s.%s", parent, key);
    else
        snprintf(out, cap, "%s", key);
}

/* Every key of obj must be in allowed; no key may appear twice. */
static int check_keys(const Ctx *c, const cJSON *obj, const char *path, const char *const *allowed)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        char p[256];
        join_path(p, sizeof p, path, it->string);
        int ok = 0;
        for (size_t i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], it->string) == 0) ok = 1;
        if (!ok) {
            cJSON name = {0};
            name.type = cJSON_String;
            name.valuestring = it->string;
            return bad(c, p, &name, "unknown key; did you mean \"%s\"?", nearest(it->string, allowed));
        }
        for (const cJSON *jt = it->next; jt; jt = jt->next)
            if (strcmp(jt->string, it->string) == 0)
                return bad(c, p, jt, "key appears twice in the same object");
    }
    return 0;
}

/* ---- typed getters: node may be NULL (absent) ---- */

static int get_int(const Ctx *c, const cJSON *node, const char *path, long lo, long hi, long *out)
{
    if (!cJSON_IsNumber(node)) return bad(c, path, node, "must be an integer in %ld..%ld", lo, hi);
    double v = node->valuedouble;
    if (!isfinite(v) || v != floor(v)) return bad(c, path, node, "must be an integer in %ld..%ld", lo, hi);
    if (v < (double)lo || v > (double)hi) return bad(c, path, node, "must be in %ld..%ld", lo, hi);
    *out = (long)v;
    return 0;
}

static int get_num(const Ctx *c, const cJSON *node, const char *path, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(node) || !isfinite(node->valuedouble))
        return bad(c, path, node, "must be a finite number");
    if (node->valuedouble < lo || node->valuedouble > hi) return bad(c, path, node, "must be in %g..%g", lo, hi);
    *out = node->valuedouble;
    return 0;
}

static int get_choice(const Ctx *c, const cJSON *node, const char *path, const char *const *choices, long *out)
{
    char list[256] = "";
    for (size_t i = 0; choices[i]; i++) {
        strncat(list, i ? ", \"" : "\"", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
        strncat(list, "\"", sizeof list - strlen(list) - 1);
    }
    if (!cJSON_IsString(node)) return bad(c, path, node, "must be one of %s", list);
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(node->valuestring, choices[i]) == 0) {
            *out = (long)i;
            return 0;
        }
    return bad(c, path, node, "must be one of %s; did you mean \"%s\"?", list, nearest(node->valuestring, choices));
}

static const cJSON *member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int need_object(const Ctx *c, const cJSON *node, const char *path)
{
    if (!cJSON_IsObject(node)) return bad(c, path, node, node ? "must be an object" : "missing required object");
    return 0;
}

/* Optional number with a default. */
static int opt_num(const Ctx *c, const cJSON *obj, const char *path, const char *key, double lo, double hi,
                   double def, double *out)
{
    const cJSON *n = member(obj, key);
    if (!n) {
        *out = def;
        return 0;
    }
    char p[256];
    join_path(p, sizeof p, path, key);
    return get_num(c, n, p, lo, hi, out);
}

static int req_int(const Ctx *c, const cJSON *obj, const char *path, const char *key, long lo, long hi, long *out)
{
    char p[256];
    join_path(p, sizeof p, path, key);
    const cJSON *n = member(obj, key);
    if (!n) return bad(c, p, NULL, "missing required key (an integer in %ld..%ld)", lo, hi);
    return get_int(c, n, p, lo, hi, out);
}

/* ---- seed ---- */

static int parse_seed(const Ctx *c, Config *cfg, const cJSON *node)
{
    if (!node) {
        cfg->seed = xstrdup("0");
        return 0;
    }
    if (cJSON_IsNumber(node)) {
        double v = node->valuedouble;
        /* 2^53 is excluded: 2^53 + 1 parses to the same double, so it would silently become another seed */
        if (!isfinite(v) || v != floor(v) || v < 0 || v >= 9007199254740992.0)
            return bad(c, "seed", node,
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
        if (!ok) return bad(c, "seed", node, "a seed string must be a non-negative decimal integer");
        cfg->seed = xstrdup(s);
        return 0;
    }
    return bad(c, "seed", node, "must be a non-negative integer (number or decimal string)");
}

/* ---- data ---- */

static int parse_outliers(const Ctx *c, Config *cfg, const cJSON *node)
{
    const char *path = "data.keys.outliers";
    if (!cJSON_IsArray(node)) return bad(c, path, node, "must be a list of {\"channel\": c, \"scale\": s}");
    size_t n = (size_t)cJSON_GetArraySize(node);
    cfg->outliers = xcalloc(n, sizeof *cfg->outliers);
    static const char *const keys[] = {"channel", "scale", NULL};
    size_t i = 0;
    for (const cJSON *it = node->child; it; it = it->next, i++) {
        char p[64];
        snprintf(p, sizeof p, "%s.%zu", path, i);
        if (need_object(c, it, p) || check_keys(c, it, p, keys)) return -1;
        long ch;
        if (req_int(c, it, p, "channel", 0, (long)cfg->dims.D - 1, &ch)) return -1;
        for (size_t j = 0; j < i; j++)
            if (cfg->outliers[j].channel == (size_t)ch) {
                char pc[96];
                join_path(pc, sizeof pc, p, "channel");
                return bad(c, pc, member(it, "channel"), "channel already listed at %s.%zu", path, j);
            }
        char ps[96];
        join_path(ps, sizeof ps, p, "scale");
        if (!member(it, "scale")) return bad(c, ps, NULL, "missing required key (a finite number)");
        if (get_num(c, member(it, "scale"), ps, -HUGE_VAL, HUGE_VAL, &cfg->outliers[i].scale)) return -1;
        cfg->outliers[i].channel = (size_t)ch;
        cfg->n_outliers = i + 1;
    }
    return 0;
}

/* Optional integer with a default. */
static int opt_int(const Ctx *c, const cJSON *obj, const char *path, const char *key, long lo, long hi, long def,
                   long *out)
{
    const cJSON *n = member(obj, key);
    if (!n) {
        *out = def;
        return 0;
    }
    char p[256];
    join_path(p, sizeof p, path, key);
    return get_int(c, n, p, lo, hi, out);
}

/* A number strictly between 0 and 1 (a share of attention). */
static int req_share(const Ctx *c, const cJSON *obj, const char *path, const char *key, double *out)
{
    char p[256];
    join_path(p, sizeof p, path, key);
    const cJSON *n = member(obj, key);
    if (!n) return bad(c, p, NULL, "missing required key (a share of attention, strictly between 0 and 1)");
    if (!cJSON_IsNumber(n) || !isfinite(n->valuedouble) || n->valuedouble <= 0 || n->valuedouble >= 1)
        return bad(c, p, n, "must be a number strictly between 0 and 1");
    *out = n->valuedouble;
    return 0;
}

/* data.keys.outlier_channels: {"count": n, "scale": s | [lo, hi]} */
static int parse_outlier_channels(const Ctx *c, Config *cfg, const cJSON *node)
{
    const char *path = "data.keys.outlier_channels";
    static const char *const keys[] = {"count", "scale", NULL};
    if (need_object(c, node, path) || check_keys(c, node, path, keys)) return -1;
    long n;
    if (req_int(c, node, path, "count", 1, (long)cfg->dims.D, &n)) return -1;
    const cJSON *s = member(node, "scale");
    const char *sp = "data.keys.outlier_channels.scale";
    const char *what = "must be a number > 0 or a list [lo, hi] with 0 < lo <= hi (multiples of the median |K|)";
    if (!s) return bad(c, sp, NULL, "missing required key (a number > 0, or a list [lo, hi])");
    double lo, hi;
    if (cJSON_IsNumber(s)) {
        lo = hi = s->valuedouble;
    } else if (cJSON_IsArray(s) && cJSON_GetArraySize(s) == 2 && cJSON_IsNumber(s->child) &&
               cJSON_IsNumber(s->child->next)) {
        lo = s->child->valuedouble;
        hi = s->child->next->valuedouble;
    } else {
        return bad(c, sp, s, "%s", what);
    }
    if (!isfinite(lo) || !isfinite(hi) || !(lo > 0) || !(hi >= lo)) return bad(c, sp, s, "%s", what);
    cfg->oc_count = (size_t)n;
    cfg->oc_lo = lo;
    cfg->oc_hi = hi;
    return 0;
}

static int parse_keys(const Ctx *c, Config *cfg, const cJSON *keys)
{
    static const char *const normal_keys[] = {"generator", "outliers", "outlier_channels", NULL};
    static const char *const lowrank_keys[] = {"generator", "rank", "scale", "noise", "outliers", "outlier_channels",
                                               NULL};
    static const char *const gens[] = {"normal", "lowrank", NULL};
    if (need_object(c, keys, "data.keys")) return -1;
    const cJSON *g = member(keys, "generator");
    if (!g) return bad(c, "data.keys.generator", NULL, "missing required key (\"normal\" or \"lowrank\")");
    long gi;
    if (get_choice(c, g, "data.keys.generator", gens, &gi)) return -1;
    cfg->keys_gen = gi == 0 ? KEYS_NORMAL : KEYS_LOWRANK;
    if (check_keys(c, keys, "data.keys", gi == 0 ? normal_keys : lowrank_keys)) return -1;
    if (cfg->keys_gen == KEYS_LOWRANK) {
        long r;
        if (req_int(c, keys, "data.keys", "rank", 1, (long)CONFIG_MAX_HEAD_DIM, &r)) return -1;
        size_t n, heads = cfg->layers * cfg->kv_heads;
        if (size_mul(cfg->dims.T, (size_t)r, &n) || size_mul(n, heads, &n) || n > CONFIG_MAX_NUMBERS ||
            size_mul((size_t)r, cfg->dims.D, &n) || size_mul(n, heads, &n) || n > CONFIG_MAX_NUMBERS)
            return bad(c, "data.keys.rank", member(keys, "rank"),
                       "layers x kv_heads x tokens x rank and layers x kv_heads x rank x head_dim must each be at "
                       "most %lu numbers", CONFIG_MAX_NUMBERS);
        cfg->keys_rank = (size_t)r;
        if (opt_num(c, keys, "data.keys", "scale", -HUGE_VAL, HUGE_VAL, 1.0, &cfg->keys_scale)) return -1;
        if (opt_num(c, keys, "data.keys", "noise", 0.0, HUGE_VAL, 0.0, &cfg->keys_noise)) return -1;
    }
    const cJSON *o = member(keys, "outliers");
    if (o && parse_outliers(c, cfg, o)) return -1;
    const cJSON *oc = member(keys, "outlier_channels");
    if (oc && parse_outlier_channels(c, cfg, oc)) return -1;
    return 0;
}

/* The bound on queries: L x H_q x n x max(T, D) numbers (the queries and their attention weights). */
static int check_query_count(const Ctx *c, const Config *cfg, const char *path, const cJSON *node, size_t n)
{
    size_t x, m = cfg->dims.T > cfg->dims.D ? cfg->dims.T : cfg->dims.D;
    if (size_mul(cfg->layers, cfg->q_heads, &x) || size_mul(x, n, &x) || size_mul(x, m, &x) ||
        x > CONFIG_MAX_NUMBERS)
        return bad(c, path, node, "layers x q_heads x queries x max(tokens, head_dim) must be at most %lu numbers",
                   CONFIG_MAX_NUMBERS);
    return 0;
}

/* data.query: evaluation queries. */
static int parse_query(const Ctx *c, Config *cfg, const cJSON *q, int has_values)
{
    static const char *const lb_keys[] = {"generator", "token", "tokens", "count", "weight", "noise",
                                          "head_correlation", "bias", NULL};
    static const char *const kg_keys[] = {"generator", "count", "weight", "noise", "head_correlation", "bias", NULL};
    static const char *const gens[] = {"look_back", "key_gaussian", NULL};
    const char *path = "data.query";
    QuerySpec *qs = &cfg->query;
    long gi;
    if (need_object(c, q, path)) return -1;
    if (!member(q, "generator"))
        return bad(c, "data.query.generator", NULL, "missing required key (\"look_back\" or \"key_gaussian\")");
    if (get_choice(c, member(q, "generator"), "data.query.generator", gens, &gi)) return -1;
    qs->gen = gi == 0 ? QUERY_LOOK_BACK : QUERY_KEY_GAUSSIAN;
    if (check_keys(c, q, path, gi == 0 ? lb_keys : kg_keys)) return -1;
    if (!has_values) return bad(c, path, q, "a query needs data.values (attention reads V)");
    long T = (long)cfg->dims.T;
    const cJSON *tok = member(q, "token"), *toks = member(q, "tokens"), *cnt = member(q, "count");
    if (qs->gen == QUERY_LOOK_BACK && (!!tok + !!toks + !!cnt) != 1) {
        if (!tok && !toks && !cnt)
            return bad(c, "data.query.token", NULL,
                       "missing required key (an integer in 0..%ld); or give \"tokens\" (a list) or \"count\" "
                       "(targets drawn uniformly)", T - 1);
        return bad(c, path, q, "give exactly one of \"token\", \"tokens\" and \"count\"");
    }
    if (tok) {
        long t;
        if (get_int(c, tok, "data.query.token", 0, T - 1, &t)) return -1;
        qs->n = 1;
        qs->tokens = xmalloc(sizeof *qs->tokens);
        qs->tokens[0] = (size_t)t;
        cfg->q_token = (size_t)t;
    } else if (toks) {
        if (!cJSON_IsArray(toks) || !toks->child)
            return bad(c, "data.query.tokens", toks, "must be a non-empty list of integers in 0..%ld", T - 1);
        size_t n = (size_t)cJSON_GetArraySize(toks), i = 0;
        if (check_query_count(c, cfg, "data.query.tokens", toks, n)) return -1;
        qs->tokens = xcalloc(n, sizeof *qs->tokens);
        for (const cJSON *it = toks->child; it; it = it->next, i++) {
            char p[64];
            long t;
            snprintf(p, sizeof p, "data.query.tokens.%zu", i);
            if (get_int(c, it, p, 0, T - 1, &t)) return -1;
            qs->tokens[i] = (size_t)t;
        }
        qs->n = n;
    } else {
        long n;
        if (opt_int(c, q, path, "count", 1, (long)CONFIG_MAX_NUMBERS, 1, &n)) return -1;
        if (check_query_count(c, cfg, "data.query.count", member(q, "count"), (size_t)n)) return -1;
        qs->n = (size_t)n;
    }
    if (opt_num(c, q, path, "weight", -HUGE_VAL, HUGE_VAL, 1.0, &qs->weight)) return -1;
    if (opt_num(c, q, path, "noise", 0.0, HUGE_VAL, 0.0, &qs->noise)) return -1;
    if (opt_num(c, q, path, "head_correlation", 0.0, 1.0, 0.0, &qs->head_correlation)) return -1;
    if (opt_num(c, q, path, "bias", 0.0, HUGE_VAL, 0.0, &cfg->q_bias)) return -1;
    cfg->q_weight = qs->weight;
    cfg->q_noise = qs->noise;
    cfg->dims.has_query = 1;
    return 0;
}

/* data.observe: observation queries at the last `window` positions of the cache (causal). */
static int parse_observe(const Ctx *c, Config *cfg, const cJSON *o)
{
    static const char *const keys[] = {"generator", "window", "weight", "noise", NULL};
    static const char *const gens[] = {"look_back", "key_gaussian", NULL};
    const char *path = "data.observe";
    QuerySpec *qs = &cfg->observe;
    if (need_object(c, o, path) || check_keys(c, o, path, keys)) return -1;
    long gi = 0, w;
    if (member(o, "generator") && get_choice(c, member(o, "generator"), "data.observe.generator", gens, &gi))
        return -1;
    qs->gen = gi == 0 ? QUERY_LOOK_BACK : QUERY_KEY_GAUSSIAN;
    long T = (long)cfg->dims.T;
    if (opt_int(c, o, path, "window", 1, T, T < 32 ? T : 32, &w)) return -1;
    if (check_query_count(c, cfg, "data.observe.window", member(o, "window"), (size_t)w)) return -1;
    qs->n = (size_t)w;
    if (opt_num(c, o, path, "weight", -HUGE_VAL, HUGE_VAL, 1.0, &qs->weight)) return -1;
    if (opt_num(c, o, path, "noise", 0.0, HUGE_VAL, 0.0, &qs->noise)) return -1;
    return 0;
}

/* data.head_correlation: {"rho": r, "group": g} */
static int parse_head_correlation(const Ctx *c, Config *cfg, const cJSON *node)
{
    static const char *const keys[] = {"rho", "group", NULL};
    const char *path = "data.head_correlation";
    if (need_object(c, node, path) || check_keys(c, node, path, keys)) return -1;
    if (!member(node, "rho")) return bad(c, "data.head_correlation.rho", NULL, "missing required key (a number in 0..1)");
    if (get_num(c, member(node, "rho"), "data.head_correlation.rho", 0.0, 1.0, &cfg->head_rho)) return -1;
    long H = (long)cfg->kv_heads, g;
    if (opt_int(c, node, path, "group", 1, H, H, &g)) return -1;
    if (H % g != 0) return bad(c, "data.head_correlation.group", member(node, "group"), "must divide kv_heads = %ld", H);
    cfg->head_group = (size_t)g;
    return 0;
}

/* data.rope: {"base": b, "dims": d, "style": "half" | "interleaved", "cache": "post" | "pre"} */
static int parse_rope(const Ctx *c, Config *cfg, const cJSON *node)
{
    static const char *const keys[] = {"base", "dims", "style", "cache", NULL};
    static const char *const styles[] = {"half", "interleaved", NULL};
    static const char *const caches[] = {"post", "pre", NULL};
    const char *path = "data.rope";
    if (need_object(c, node, path) || check_keys(c, node, path, keys)) return -1;
    const cJSON *b = member(node, "base");
    cfg->rope_base = 10000.0;
    if (b && (!cJSON_IsNumber(b) || !isfinite(b->valuedouble) || !(b->valuedouble > 1)))
        return bad(c, "data.rope.base", b, "must be a finite number > 1");
    if (b) cfg->rope_base = b->valuedouble;
    long D = (long)cfg->dims.D, dims, st = ROPE_HALF, ca = 0;
    const char *dp = "data.rope.dims";
    if (opt_int(c, node, path, "dims", 2, D, D, &dims)) return -1;
    if (dims % 2 != 0 && member(node, "dims"))
        return bad(c, dp, member(node, "dims"), "must be even (RoPE rotates channel pairs), 2..head_dim = %ld", D);
    if (dims % 2 != 0)
        return bad(c, dp, NULL, "defaults to head_dim = %ld, which is odd; give an even dims (RoPE rotates channel "
                   "pairs)", D);
    if (member(node, "style") && get_choice(c, member(node, "style"), "data.rope.style", styles, &st)) return -1;
    if (member(node, "cache") && get_choice(c, member(node, "cache"), "data.rope.cache", caches, &ca)) return -1;
    cfg->has_rope = 1;
    cfg->rope_dims = (size_t)dims;
    cfg->rope_style = st == 0 ? ROPE_HALF : ROPE_INTERLEAVED;
    cfg->rope_cache_pre = ca == 1;
    return 0;
}

/* data.sinks, data.recent and data.heavy_hitters: shape attention relative to the mean evaluation query. */
static int parse_shaping(const Ctx *c, Config *cfg, const cJSON *sinks, const cJSON *recent, const cJSON *hh)
{
    long T = (long)cfg->dims.T;
    if (sinks) {
        static const char *const keys[] = {"tokens", "share", NULL};
        long n;
        if (need_object(c, sinks, "data.sinks") || check_keys(c, sinks, "data.sinks", keys)) return -1;
        if (!cfg->dims.has_query)
            return bad(c, "data.sinks", sinks, "sinks are aligned with the mean evaluation query; add data.query");
        if (T < 2) return bad(c, "data.sinks", sinks, "needs at least 2 tokens (some must be left to share with)");
        if (opt_int(c, sinks, "data.sinks", "tokens", 1, T - 1, T - 1 < 4 ? T - 1 : 4, &n)) return -1;
        if (req_share(c, sinks, "data.sinks", "share", &cfg->sink_share)) return -1;
        cfg->sink_tokens = (size_t)n;
    }
    if (recent) {
        static const char *const keys[] = {"tokens", "share", NULL};
        long n, room = T - 1 - (long)cfg->sink_tokens;
        if (need_object(c, recent, "data.recent") || check_keys(c, recent, "data.recent", keys)) return -1;
        if (!cfg->dims.has_query)
            return bad(c, "data.recent", recent, "recent tokens are aligned with the mean evaluation query; add data.query");
        if (room < 1)
            return bad(c, "data.recent", recent, "needs tokens beyond the sinks and one more (got tokens = %ld)", T);
        if (req_int(c, recent, "data.recent", "tokens", 1, room, &n)) return -1;
        if (req_share(c, recent, "data.recent", "share", &cfg->recent_share)) return -1;
        cfg->recent_tokens = (size_t)n;
    }
    if (hh) {
        static const char *const keys[] = {"count", "share", "spread", NULL};
        long n;
        if (need_object(c, hh, "data.heavy_hitters") || check_keys(c, hh, "data.heavy_hitters", keys)) return -1;
        if (!cfg->dims.has_query)
            return bad(c, "data.heavy_hitters", hh,
                       "heavy hitters are aligned with the mean evaluation query; add data.query");
        long room = T - 1 - (long)cfg->sink_tokens;
        if (opt_int(c, hh, "data.heavy_hitters", "count", 0, room < 0 ? 0 : room, 0, &n)) return -1;
        cfg->hh_count = (size_t)n;
        if (n > 0 && req_share(c, hh, "data.heavy_hitters", "share", &cfg->hh_share)) return -1;
        if (n == 0 && member(hh, "share"))
            return bad(c, "data.heavy_hitters.share", member(hh, "share"), "needs count >= 1");
        if (opt_num(c, hh, "data.heavy_hitters", "spread", 0.0, HUGE_VAL, 0.0, &cfg->hh_spread)) return -1;
    }
    return 0;
}

/* ---- data.source "files" (README "Data from files"; the tensors are read by src/data/load.c) ---- */

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
static int parse_file_spec(const Ctx *c, FileSpec *fs, const cJSON *node, const char *path)
{
    static const char *const keys[] = {"path", "name", NULL};
    const char *what = "must be a file name, or {\"path\": file, \"name\": tensor} for a .safetensors file";
    const cJSON *p = node, *nm = NULL;
    char pp[96], np[96];
    snprintf(pp, sizeof pp, "%s", path);
    if (cJSON_IsObject(node)) {
        if (check_keys(c, node, path, keys)) return -1;
        p = member(node, "path");
        nm = member(node, "name");
        join_path(pp, sizeof pp, path, "path");
        join_path(np, sizeof np, path, "name");
        if (!p) return bad(c, pp, NULL, "missing required key (the tensor file)");
        if (nm && (!cJSON_IsString(nm) || !nm->valuestring[0]))
            return bad(c, np, nm, "must be a non-empty tensor name");
    } else if (!cJSON_IsString(node)) {
        return bad(c, path, node, "%s", what);
    }
    if (!cJSON_IsString(p) || !p->valuestring[0]) return bad(c, pp, p, "must be a non-empty file name");
    fs->path = resolve_path(c->file, p->valuestring);
    fs->name = nm ? xstrdup(nm->valuestring) : NULL;
    return 0;
}

/* data.outlier_channels (files only): [c, ...] for every layer, or [[c, ...], ...] one list per layer */
static int parse_file_outliers(const Ctx *c, Config *cfg, const cJSON *node)
{
    const char *path = "data.outlier_channels";
    size_t L = cfg->layers, D = cfg->dims.D, any = 0;
    if (!cJSON_IsArray(node))
        return bad(c, path, node, "must be a list of channels (the same in every layer) or a list of %zu lists, one "
                   "per layer", L);
    int nested = node->child && cJSON_IsArray(node->child);
    if (nested && (size_t)cJSON_GetArraySize(node) != L)
        return bad(c, path, node, "a list of lists needs one list of channels per layer (%zu layers)", L);
    cfg->file_outliers = xcalloc(L * D, 1);
    size_t l = 0;
    for (const cJSON *lst = nested ? node->child : node; lst; lst = nested ? lst->next : NULL, l++) {
        char p[64];
        if (nested) snprintf(p, sizeof p, "%s.%zu", path, l);
        else snprintf(p, sizeof p, "%s", path);
        if (!cJSON_IsArray(lst)) return bad(c, p, lst, "must be a list of channels");
        size_t i = 0;
        for (const cJSON *it = lst->child; it; it = it->next, i++) {
            char pi[96];
            long ch;
            snprintf(pi, sizeof pi, "%s.%zu", p, i);
            if (get_int(c, it, pi, 0, (long)D - 1, &ch)) return -1;
            if (cfg->file_outliers[(nested ? l : 0) * D + (size_t)ch]) return bad(c, pi, it, "channel listed twice");
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

static int parse_data_files(const Ctx *c, Config *cfg, const cJSON *data)
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
        join_path(p, sizeof p, "data", it->string);
        return bad(c, p, &name, "unknown key with \"source\": \"files\" (sizes and data come from the files; "
                   "allowed: source, files, rope, outlier_channels); did you mean \"%s\"?", nearest(it->string, keys));
    }
    if (check_keys(c, data, "data", keys)) return -1;   /* a key given twice */
    const cJSON *files = member(data, "files");
    if (!files)
        return bad(c, "data.files", NULL, "missing required object with \"source\": \"files\", e.g. {\"keys\": "
                   "\"k.npy\", \"values\": \"v.npy\", \"queries\": \"q.npy\"}");
    if (need_object(c, files, "data.files") || check_keys(c, files, "data.files", roles)) return -1;
    if (!member(files, "keys")) return bad(c, "data.files.keys", NULL, "missing required key (the keys file)");
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        char p[64];
        join_path(p, sizeof p, "data.files", roles[r]);
        const cJSON *n = member(files, roles[r]);
        if (n && parse_file_spec(c, &cfg->files[r], n, p)) return -1;
    }
    if (member(files, "queries") && !member(files, "values"))
        return bad(c, "data.files.queries", member(files, "queries"),
                   "evaluation queries need data.files.values (attention reads V)");
    cfg->from_files = 1;
    if (load_files(cfg, c->file)) return -1;
    const cJSON *r = member(data, "rope");
    if (r) {
        if (parse_rope(c, cfg, r)) return -1;
        if (!cfg->rope_cache_pre)
            return bad(c, "data.rope.cache", member(r, "cache"), "with \"source\": \"files\" a rope block says that "
                       "the keys file holds pre-RoPE keys, which attention rotates: give \"cache\": \"pre\" (keys "
                       "saved after RoPE need no rope block)");
    }
    const cJSON *o = member(data, "outlier_channels");
    if (o && parse_file_outliers(c, cfg, o)) return -1;
    return 0;
}

static int parse_data(const Ctx *c, Config *cfg, const cJSON *data)
{
    static const char *const keys[] = {"source", "tokens", "head_dim", "layers", "kv_heads", "q_heads", "keys",
                                       "values", "query", "observe", "head_correlation", "rope", "sinks", "recent",
                                       "heavy_hitters",
                                       NULL};
    static const char *const sources[] = {"synthetic", "files", NULL};
    long src = 0;
    if (need_object(c, data, "data")) return -1;
    if (member(data, "source") && get_choice(c, member(data, "source"), "data.source", sources, &src)) return -1;
    if (src == 1) return parse_data_files(c, cfg, data);
    if (check_keys(c, data, "data", keys)) return -1;
    long T, D, L, H, Hq;
    if (req_int(c, data, "data", "tokens", 1, (long)CONFIG_MAX_TOKENS, &T)) return -1;
    if (req_int(c, data, "data", "head_dim", 1, (long)CONFIG_MAX_HEAD_DIM, &D)) return -1;
    if ((unsigned long)T * (unsigned long)D > CONFIG_MAX_NUMBERS)
        return bad(c, "data.tokens", member(data, "tokens"),
                   "tokens x head_dim = %ld x %ld exceeds the limit of %lu numbers per tensor", T, D,
                   CONFIG_MAX_NUMBERS);
    if (opt_int(c, data, "data", "layers", 1, (long)CONFIG_MAX_HEADS, 1, &L)) return -1;
    if (opt_int(c, data, "data", "kv_heads", 1, (long)CONFIG_MAX_HEADS, 1, &H)) return -1;
    if (opt_int(c, data, "data", "q_heads", 1, (long)CONFIG_MAX_Q_HEADS, H, &Hq)) return -1;
    if (Hq % H != 0)
        return bad(c, "data.q_heads", member(data, "q_heads"), "must be a multiple of kv_heads = %ld (GQA groups)", H);
    if ((unsigned long)L * (unsigned long)H * (unsigned long)T * (unsigned long)D > CONFIG_MAX_NUMBERS)
        return bad(c, member(data, "layers") ? "data.layers" : "data.kv_heads",
                   member(data, "layers") ? member(data, "layers") : member(data, "kv_heads"),
                   "layers x kv_heads x tokens x head_dim = %ld x %ld x %ld x %ld exceeds the limit of %lu numbers "
                   "per tensor", L, H, T, D, CONFIG_MAX_NUMBERS);
    cfg->dims.T = (size_t)T;
    cfg->dims.D = (size_t)D;
    cfg->layers = (size_t)L;
    cfg->kv_heads = (size_t)H;
    cfg->q_heads = (size_t)Hq;

    const cJSON *hc = member(data, "head_correlation");
    if (hc && parse_head_correlation(c, cfg, hc)) return -1;
    if (parse_keys(c, cfg, member(data, "keys"))) return -1;

    const cJSON *v = member(data, "values");
    if (v) {
        static const char *const vkeys[] = {"generator", NULL};
        static const char *const gens[] = {"normal", NULL};
        long gi;
        if (need_object(c, v, "data.values") || check_keys(c, v, "data.values", vkeys)) return -1;
        if (!member(v, "generator")) return bad(c, "data.values.generator", NULL, "missing required key (\"normal\")");
        if (get_choice(c, member(v, "generator"), "data.values.generator", gens, &gi)) return -1;
        cfg->dims.has_values = 1;
    }

    const cJSON *q = member(data, "query");
    if (q && parse_query(c, cfg, q, v != NULL)) return -1;
    const cJSON *o = member(data, "observe");
    if (o && parse_observe(c, cfg, o)) return -1;
    const cJSON *r = member(data, "rope");
    if (r && parse_rope(c, cfg, r)) return -1;
    if (parse_shaping(c, cfg, member(data, "sinks"), member(data, "recent"), member(data, "heavy_hitters"))) return -1;
    return 0;
}

/* metrics: {"topk_recall_k": k} */
static int parse_metrics(const Ctx *c, Config *cfg, const cJSON *m)
{
    static const char *const keys[] = {"topk_recall_k", NULL};
    long T = (long)cfg->dims.T, k;
    if (m && (need_object(c, m, "metrics") || check_keys(c, m, "metrics", keys))) return -1;
    if (opt_int(c, m, "metrics", "topk_recall_k", 1, T, T < 32 ? T : 32, &k)) return -1;
    cfg->recall_k = (size_t)k;
    return 0;
}

/* ---- experiments ---- */

/* One method parameter of an experiment object (or of a pipeline step): its values (a scalar is a list of one). */
typedef struct Axis {
    int param;            /* index in method->params */
    const cJSON *node;    /* the value or the list */
    int is_list;
    size_t n;
    size_t step;          /* pipelines: the step it belongs to */
} Axis;

/* Validates one value of a parameter; PARAM_NUM values go to *num, the others to *out. */
static int param_value(const Ctx *c, const ParamDesc *pd, const cJSON *v, const char *path, long *out, double *num)
{
    if (pd->kind == PARAM_ENUM) return get_choice(c, v, path, pd->choices, out);
    if (pd->kind == PARAM_NUM) return get_num(c, v, path, pd->num_lo, pd->num_hi, num);
    if (pd->kind == PARAM_BOOL) {
        if (!cJSON_IsBool(v)) return bad(c, path, v, "must be true or false");
        *out = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    }
    return get_int(c, v, path, pd->lo, pd->hi, out);
}

/* A pipeline placeholder: "steps.S.param", or "param" when exactly one step's method has that parameter.
 * Writes the value into val and returns 0, or returns -1 with the reason in why. */
static int step_placeholder(char *val, size_t cap, const Experiment *ex, const char *name, char *why, size_t wcap)
{
    unsigned long s;
    char pname[64];
    int used;
    if (sscanf(name, "steps.%lu.%63[A-Za-z0-9_]%n", &s, pname, &used) == 2 && name[used] == '\0' &&
        strncmp(name, "steps.", 6) == 0 && name[6] >= '0' && name[6] <= '9') {
        if (s >= ex->n_steps) {
            snprintf(why, wcap, "unknown placeholder {%s}; the pipeline has steps 0..%zu", name, ex->n_steps - 1);
            return -1;
        }
        int pi = method_param_index(ex->steps[s].method, pname);
        if (pi < 0) {
            snprintf(why, wcap, "unknown placeholder {%s}; step %lu (%s) has no parameter %s", name, s,
                     ex->steps[s].method->name, pname);
            return -1;
        }
        exp_param_text(val, cap, &ex->steps[s], (size_t)pi);
        return 0;
    }
    size_t found = 0, at = 0;
    int pi = -1;
    for (size_t k = 0; k < ex->n_steps; k++) {
        int i = method_param_index(ex->steps[k].method, name);
        if (i >= 0) {
            if (found++ == 0) {
                at = k;
                pi = i;
            }
        }
    }
    if (found == 1) {
        exp_param_text(val, cap, &ex->steps[at], (size_t)pi);
        return 0;
    }
    if (found > 1)
        snprintf(why, wcap, "placeholder {%s} is a parameter of %zu steps; name one, e.g. {steps.%zu.%s}", name,
                 found, at, name);
    else
        snprintf(why, wcap, "unknown placeholder {%s}; no step has that parameter (write {steps.N.param} or "
                 "{param} for a parameter of one step)", name);
    return -1;
}

/* Fills `{name}` placeholders of tmpl with the experiment's values (pipelines: `{steps.S.name}` or `{name}`). */
static int fill_label(const Ctx *c, const char *path, const cJSON *label_node, const Experiment *ex, char **out)
{
    const char *tmpl = label_node->valuestring;
    int pipeline = ex->n_steps > 0;
    size_t len = 0, cap = strlen(tmpl) + 16;
    char *buf = xmalloc(cap);
    buf[0] = '\0';
    for (const char *p = tmpl; *p;) {
        const char *close = p[0] == '{' ? strchr(p, '}') : NULL;
        if (close) {
            char name[64];
            size_t n = (size_t)(close - p - 1);
            int ident = n > 0 && n < sizeof name;
            for (size_t i = 0; ident && i < n; i++) {
                char ch = p[1 + i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      (pipeline && ch == '.')))
                    ident = 0;
            }
            if (ident) {
                memcpy(name, p + 1, n);
                name[n] = '\0';
                char val[64];
                if (pipeline) {
                    char why[256];
                    if (step_placeholder(val, sizeof val, ex, name, why, sizeof why)) {
                        free(buf);
                        return bad(c, path, label_node, "%s", why);
                    }
                } else {
                    int pi = method_param_index(ex->method, name);
                    if (pi < 0) {
                        const char *names[METHOD_MAX_PARAMS + 1];
                        for (size_t i = 0; i < ex->method->n_params; i++) names[i] = ex->method->params[i].name;
                        names[ex->method->n_params] = NULL;
                        free(buf);
                        return bad(c, path, label_node, "unknown placeholder {%s}; %s has %s%s%s", name,
                                   ex->method->name, names[0] ? "{" : "no parameters",
                                   names[0] ? nearest(name, names) : "", names[0] ? "}, ..." : "");
                    }
                    exp_param_text(val, sizeof val, ex, (size_t)pi);
                }
                str_append(&buf, &len, &cap, val, strlen(val));
                p = close + 1;
                continue;
            }
        }
        str_append(&buf, &len, &cap, p, 1);
        p++;
    }
    *out = buf;
    return 0;
}

/* Default label: "method key=value ..." for the keys the experiment object gives; a pipeline joins its steps'
 * default labels with " | ". */
static char *default_label(const Experiment *ex, const Axis *axes, size_t n_axes)
{
    size_t len = 0, cap = 64;
    char *buf = xmalloc(cap);
    buf[0] = '\0';
    size_t nsteps = ex->n_steps ? ex->n_steps : 1;
    for (size_t s = 0; s < nsteps; s++) {
        const Experiment *e = ex->n_steps ? &ex->steps[s] : ex;
        if (s) str_append(&buf, &len, &cap, " | ", 3);
        str_append(&buf, &len, &cap, e->method->name, strlen(e->method->name));
        for (size_t a = 0; a < n_axes; a++) {
            if (ex->n_steps && axes[a].step != s) continue;
            const ParamDesc *pd = &e->method->params[axes[a].param];
            char part[128], val[64];
            exp_param_text(val, sizeof val, e, (size_t)axes[a].param);
            snprintf(part, sizeof part, " %s=%s", pd->name, val);
            str_append(&buf, &len, &cap, part, strlen(part));
        }
    }
    return buf;
}

/* The method named by node `mnode` at mpath (a string from the registry). */
static int method_of(const Ctx *c, const cJSON *mnode, const char *mpath, const MethodDesc **out)
{
    const char *names[64];
    size_t nn = 0;
    for (size_t i = 0; i < method_count && nn < 63; i++) names[nn++] = method_registry[i]->name;
    names[nn] = NULL;
    if (!mnode) return bad(c, mpath, NULL, "missing required key (a method name; see `kvc methods`)");
    if (!cJSON_IsString(mnode)) return bad(c, mpath, mnode, "must be a method name string (see `kvc methods`)");
    *out = method_find(mnode->valuestring);
    if (!*out)
        return bad(c, mpath, mnode, "unknown method; did you mean \"%s\"? (see `kvc methods`)",
                   nearest(mnode->valuestring, names));
    return 0;
}

/* Collects the grid axes of the parameters of method m in object e (path `path`), in key order, validating every
 * value once, and checks that the required parameters are there. Appends to axes[*n_axes]; *rows *= sizes. */
static int collect_axes(const Ctx *c, const cJSON *e, const char *path, const MethodDesc *m, size_t step,
                        Axis *axes, size_t *n_axes, size_t *rows)
{
    size_t first = *n_axes;
    for (const cJSON *it = e->child; it; it = it->next) {
        int pi = method_param_index(m, it->string);
        if (pi < 0) continue;
        Axis *ax = &axes[(*n_axes)++];
        ax->param = pi;
        ax->node = it;
        ax->is_list = cJSON_IsArray(it);
        ax->n = ax->is_list ? (size_t)cJSON_GetArraySize(it) : 1;
        ax->step = step;
        char ppath[160];
        join_path(ppath, sizeof ppath, path, it->string);
        if (ax->is_list && ax->n == 0) return bad(c, ppath, it, "a list of values must not be empty");
        size_t k = 0;
        for (const cJSON *v = ax->is_list ? it->child : it; v; v = ax->is_list ? v->next : NULL, k++) {
            char vpath[192];
            if (ax->is_list)
                snprintf(vpath, sizeof vpath, "%s.%zu", ppath, k);
            else
                snprintf(vpath, sizeof vpath, "%s", ppath);
            long tmp;
            double dtmp;
            if (cJSON_IsArray(v)) return bad(c, vpath, v, "lists of lists are not allowed");
            if (param_value(c, &m->params[pi], v, vpath, &tmp, &dtmp)) return -1;
        }
        if (size_mul(*rows, ax->n, rows) || *rows > CONFIG_MAX_ROWS)
            return bad(c, ppath, it, "the experiment grid would exceed %lu rows", CONFIG_MAX_ROWS);
    }
    for (size_t i = 0; i < m->n_params; i++) {
        int given = 0;
        for (size_t a = first; a < *n_axes; a++) given |= axes[a].param == (int)i;
        if (!given && m->params[i].def == PARAM_REQUIRED) {
            char ppath[160];
            join_path(ppath, sizeof ppath, path, m->params[i].name);
            return bad(c, ppath, NULL, "missing required parameter of %s: %s", m->name, m->params[i].help);
        }
    }
    return 0;
}

/* An experiment (or step) of method m with every parameter at its default. */
static void init_experiment(Experiment *ex, const MethodDesc *m, size_t ei)
{
    memset(ex, 0, sizeof *ex);
    ex->method = m;
    ex->src = ei;
    for (size_t i = 0; i < m->n_params; i++) {
        ex->p[i] = m->params[i].def;
        ex->num[i] = m->params[i].num_def;
        ex->pos[i] = POS_DEFAULT;
    }
}

/* Validates experiment object `e` (index ei) and appends its grid points to cfg->exps. A pipeline's "steps" are
 * method objects without labels; their parameters form one grid, in step order and key order. */
static int expand_experiment(const Ctx *c, Config *cfg, const cJSON *e, size_t ei, size_t *cap)
{
    char path[64];
    snprintf(path, sizeof path, "experiments.%zu", ei);
    if (need_object(c, e, path)) return -1;

    char mpath[96];
    join_path(mpath, sizeof mpath, path, "method");
    const cJSON *mnode = member(e, "method");
    const MethodDesc *m;
    if (method_of(c, mnode, mpath, &m)) return -1;
    int pipeline = m == &method_pipeline;

    /* allowed keys: label, method and the method's parameters (a pipeline: steps) */
    const char *allowed[METHOD_MAX_PARAMS + 3];
    size_t na = 0;
    allowed[na++] = "label";
    allowed[na++] = "method";
    if (pipeline) allowed[na++] = "steps";
    for (size_t i = 0; i < m->n_params; i++) allowed[na++] = m->params[i].name;
    allowed[na] = NULL;
    if (check_keys(c, e, path, allowed)) return -1;

    const cJSON *label = member(e, "label");
    char lpath[96];
    join_path(lpath, sizeof lpath, path, "label");
    if (label && !cJSON_IsString(label)) return bad(c, lpath, label, "must be a string");

    /* the grid axes, in the object's key order (a pipeline: its steps' keys, step by step); values are validated
     * here, once each */
    size_t n_steps = 0, rows = 1, n_axes = 0, max_axes = METHOD_MAX_PARAMS;
    const MethodDesc **smeth = NULL;
    const cJSON *steps = NULL;
    if (pipeline) {
        char spath[96];
        join_path(spath, sizeof spath, path, "steps");
        steps = member(e, "steps");
        if (!steps) return bad(c, spath, NULL, "missing required list of steps, e.g. [{\"method\": \"share_heads\", "
                               "\"group\": 4}, {\"method\": \"quantize\", \"bits\": 8}]");
        if (!cJSON_IsArray(steps) || !steps->child)
            return bad(c, spath, steps, "must be a non-empty list of method objects");
        n_steps = (size_t)cJSON_GetArraySize(steps);
        if (n_steps > 64) return bad(c, spath, steps, "at most 64 steps");
        max_axes = n_steps * METHOD_MAX_PARAMS;
    }
    Axis *axes = xcalloc(max_axes, sizeof *axes);
    int rc = 0;
    if (pipeline) {
        smeth = xcalloc(n_steps, sizeof *smeth);
        size_t k = 0;
        for (const cJSON *s = steps->child; s && rc == 0; s = s->next, k++) {
            char spath[96], smpath[112];
            snprintf(spath, sizeof spath, "%s.steps.%zu", path, k);
            join_path(smpath, sizeof smpath, spath, "method");
            if (need_object(c, s, spath) || method_of(c, member(s, "method"), smpath, &smeth[k])) {
                rc = -1;
                break;
            }
            if (smeth[k] == &method_pipeline) {
                rc = bad(c, smpath, member(s, "method"), "a pipeline cannot be a step of a pipeline; list its steps "
                         "here");
                break;
            }
            const char *sallowed[METHOD_MAX_PARAMS + 2];
            size_t sa = 0;
            sallowed[sa++] = "method";
            for (size_t i = 0; i < smeth[k]->n_params; i++) sallowed[sa++] = smeth[k]->params[i].name;
            sallowed[sa] = NULL;
            if (check_keys(c, s, spath, sallowed) ||
                collect_axes(c, s, spath, smeth[k], k, axes, &n_axes, &rows))
                rc = -1;
            if (rc == 0 && smeth[k]->needs_query && !cfg->dims.has_query)
                rc = bad(c, smpath, member(s, "method"), "this method looks at the query's attention; add data.query");
        }
    } else {
        rc = collect_axes(c, e, path, m, 0, axes, &n_axes, &rows);
        if (rc == 0 && m->needs_query && !cfg->dims.has_query)
            rc = bad(c, mpath, mnode, "this method looks at the query's attention; add data.query");
    }
    size_t total;
    if (rc == 0 && (size_add(cfg->n_exps, rows, &total) || total > CONFIG_MAX_ROWS))
        rc = bad(c, path, NULL, "the expanded experiments would exceed %lu rows", CONFIG_MAX_ROWS);

    for (size_t r = 0; rc == 0 && r < rows; r++) {
        if (cfg->n_exps == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            Experiment *ne = xcalloc(nc, sizeof *ne);
            if (cfg->n_exps) memcpy(ne, cfg->exps, cfg->n_exps * sizeof *ne);
            free(cfg->exps);
            cfg->exps = ne;
            *cap = nc;
        }
        Experiment *ex = &cfg->exps[cfg->n_exps];
        init_experiment(ex, m, ei);
        if (pipeline) {
            ex->steps = xcalloc(n_steps, sizeof *ex->steps);
            ex->n_steps = n_steps;
            for (size_t k = 0; k < n_steps; k++) {
                init_experiment(&ex->steps[k], smeth[k], ei);
                ex->steps[k].is_step = 1;
                ex->steps[k].step = k;
            }
        }
        cfg->n_exps++;   /* counted now, so config_free releases its steps if a check below fails */
        /* mixed-radix decode of r, the last axis varying fastest */
        size_t rest = r;
        for (size_t a = n_axes; a-- > 0;) {
            Experiment *tgt = pipeline ? &ex->steps[axes[a].step] : ex;
            size_t k = rest % axes[a].n;
            rest /= axes[a].n;
            const cJSON *v = axes[a].is_list ? cJSON_GetArrayItem(axes[a].node, (int)k) : axes[a].node;
            long val = 0;
            double num = 0;
            int vrc = param_value(c, &tgt->method->params[axes[a].param], v, "", &val, &num);
            (void)vrc; /* validated above */
            tgt->p[axes[a].param] = val;
            tgt->num[axes[a].param] = num;
            tgt->pos[axes[a].param] = axes[a].is_list ? (int)k : POS_SCALAR;
        }
        if (m->check && m->check(ex, &cfg->dims)) {
            /* prefix the file name: method checks know only the JSON path */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kvc_errmsg());
            rc = kvc_fail("%s: %s", c->file, msg);
            break;
        }
        if (label) {
            if (fill_label(c, lpath, label, ex, &ex->label)) rc = -1;
        } else {
            ex->label = default_label(ex, axes, n_axes);
        }
    }
    free(axes);
    free(smeth);
    return rc;
}

static int parse_experiments(const Ctx *c, Config *cfg, const cJSON *list)
{
    if (!list) return bad(c, "experiments", NULL, "missing required list of experiments");
    if (!cJSON_IsArray(list)) return bad(c, "experiments", list, "must be a list of experiment objects");
    if (!list->child) return bad(c, "experiments", list, "the list of experiments is empty");
    cfg->dims.kv_heads = cfg->kv_heads;   /* what method checks may know beyond T and D */
    cfg->dims.n_obs = cfg->observe.n;
    size_t cap = 0, i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++)
        if (expand_experiment(c, cfg, e, i, &cap)) return -1;
    return 0;
}

/* ---- strict JSON syntax check (RFC 8259) ----
 * cJSON is lenient ("1.", "01", "-.5", garbage after a --set value) and its error pointer is imprecise
 * (one byte late after a bad string, the last byte for a truncated file). This check runs first and
 * finds the exact offset of the first syntax error; cJSON then only builds the tree.
 */

enum { JSON_OK, JSON_BAD, JSON_EOF, JSON_TRAILING, JSON_DEEP };
#define JSON_MAX_DEPTH 1000

typedef struct JsonScan {
    const char *s;
    size_t n, i;
} JsonScan;

static void js_ws(JsonScan *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r'))
        j->i++;
}

/* error kind at j->i: the end of the input or a bad byte */
static int js_fail(const JsonScan *j)
{
    return j->i >= j->n ? JSON_EOF : JSON_BAD;
}

static int js_digits(JsonScan *j)
{
    if (j->i >= j->n || j->s[j->i] < '0' || j->s[j->i] > '9') return js_fail(j);
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return JSON_OK;
}

static int js_value(JsonScan *j, int depth)
{
    js_ws(j);
    if (j->i >= j->n) return JSON_EOF;
    char ch = j->s[j->i];
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH) return JSON_DEEP;
        j->i++;
        js_ws(j);
        if (j->i < j->n && j->s[j->i] == close) {
            j->i++;
            return JSON_OK;
        }
        for (;;) {
            int r;
            if (ch == '{') {
                js_ws(j);
                if (j->i >= j->n || j->s[j->i] != '"') return js_fail(j);
                if ((r = js_value(j, depth + 1)) != JSON_OK) return r;
                js_ws(j);
                if (j->i >= j->n || j->s[j->i] != ':') return js_fail(j);
                j->i++;
            }
            if ((r = js_value(j, depth + 1)) != JSON_OK) return r;
            js_ws(j);
            if (j->i >= j->n) return JSON_EOF;
            if (j->s[j->i] == close) {
                j->i++;
                return JSON_OK;
            }
            if (j->s[j->i] != ',') return JSON_BAD;
            j->i++;
        }
    }
    if (ch == '"') {
        for (j->i++; j->i < j->n; j->i++) {
            unsigned char c = (unsigned char)j->s[j->i];
            if (c == '"') {
                j->i++;
                return JSON_OK;
            }
            if (c < 0x20) return JSON_BAD;
            if (c == '\\') {
                j->i++;
                if (j->i >= j->n) return JSON_EOF;
                if (j->s[j->i] == 'u') {
                    for (int k = 0; k < 4; k++) {
                        j->i++;
                        if (j->i >= j->n) return JSON_EOF;
                        char h = j->s[j->i];
                        if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                            return JSON_BAD;
                    }
                } else if (!strchr("\"\\/bfnrt", j->s[j->i])) {
                    j->i--; /* point at the backslash */
                    return JSON_BAD;
                }
            }
        }
        return JSON_EOF;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        int r;
        if (ch == '-') j->i++;
        if (j->i < j->n && j->s[j->i] == '0') j->i++;
        else if ((r = js_digits(j)) != JSON_OK) return r;
        if (j->i < j->n && j->s[j->i] == '.') {
            j->i++;
            if ((r = js_digits(j)) != JSON_OK) return r;
        }
        if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
            j->i++;
            if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
            if ((r = js_digits(j)) != JSON_OK) return r;
        }
        return JSON_OK;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t w = 0; w < 3; w++) {
        size_t wl = strlen(words[w]);
        if (ch != words[w][0]) continue;
        for (size_t k = 0; k < wl; k++) {
            if (j->i + k >= j->n) {
                j->i = j->n;
                return JSON_EOF;
            }
            if (j->s[j->i + k] != words[w][k]) return JSON_BAD; /* at the start of the word */
        }
        j->i += wl;
        return JSON_OK;
    }
    return JSON_BAD;
}

/* Checks that text[0..len) is exactly one JSON value (with optional whitespace around it).
 * Returns JSON_OK or an error kind, with *off the offset of the error (len for the end of the input). */
static int json_check(const char *text, size_t len, size_t *off)
{
    JsonScan j = {text, len, 0};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) j.i = 3; /* a UTF-8 byte order mark, as cJSON skips it */
    int r = js_value(&j, 0);
    if (r == JSON_OK) {
        js_ws(&j);
        if (j.i < len) r = JSON_TRAILING;
    }
    *off = j.i < len ? j.i : len;
    return r;
}

/* ---- --set PATH=JSON ---- */

/* s for a message: at most 60 bytes of it, then "..." (an argument may be as long as the command line). */
static const char *clip(char *buf, size_t cap, const char *s, size_t n)
{
    if (n > 60) snprintf(buf, cap, "%.60s...", s);
    else snprintf(buf, cap, "%.*s", (int)n, s);
    return buf;
}

static int apply_set(cJSON *root, const char *arg)
{
    char where[128], sarg[80], sseg[80];
    snprintf(where, sizeof where, "--set %s", clip(sarg, sizeof sarg, arg, strlen(arg)));
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return kvc_fail("%s: expected PATH=JSON, e.g. --set data.tokens=20 (got \"%s\")", where, sarg);
    size_t plen = (size_t)(eq - arg);
    char *path = xmalloc(plen + 1);
    memcpy(path, arg, plen);
    path[plen] = '\0';
    size_t bad_at;
    cJSON *value = json_check(eq + 1, strlen(eq + 1), &bad_at) == JSON_OK ? cJSON_Parse(eq + 1) : NULL;
    if (!value) {
        free(path);
        return kvc_fail("%s: the value is not valid JSON; strings need quotes, e.g. '\"channel\"' (got %s)", where,
                        clip(sseg, sizeof sseg, eq + 1, strlen(eq + 1)));
    }
    cJSON *node = root;
    char *seg = path, *next;
    int rc = 0;
    for (;; seg = next + 1) {
        next = strchr(seg, '.');
        if (next) *next = '\0';
        if (!*seg) {
            rc = kvc_fail("%s: empty component in the path (got \"%s\")", where, clip(sseg, sizeof sseg, arg, plen));
            break;
        }
        cJSON *child;
        clip(sseg, sizeof sseg, seg, strlen(seg));
        if (cJSON_IsArray(node)) {
            char *end;
            errno = 0;
            unsigned long idx = strtoul(seg, &end, 10);
            int size = cJSON_GetArraySize(node);
            if (*end || seg[0] < '0' || seg[0] > '9' || errno || idx >= (unsigned long)size) {
                rc = kvc_fail("%s: %s is not an index of a list of %d (got \"%s\")", where, sseg, size, sseg);
                break;
            }
            if (!next) {
                cJSON_ReplaceItemInArray(node, (int)idx, value);
                value = NULL;
                break;
            }
            child = cJSON_GetArrayItem(node, (int)idx);
        } else if (cJSON_IsObject(node)) {
            child = cJSON_GetObjectItemCaseSensitive(node, seg);
            if (!next) {
                if (child)
                    cJSON_ReplaceItemInObjectCaseSensitive(node, seg, value);
                else
                    cJSON_AddItemToObject(node, seg, value);
                value = NULL;
                break;
            }
            if (!child) {
                const char *keys[256];
                size_t n = 0;
                for (cJSON *it = node->child; it && n < 255; it = it->next) keys[n++] = it->string;
                keys[n] = NULL;
                if (n)
                    rc = kvc_fail("%s: no key \"%s\" here; did you mean \"%s\"? (got \"%s\")", where, sseg,
                                  nearest(seg, keys), sseg);
                else
                    rc = kvc_fail("%s: no key \"%s\" here, the object is empty (got \"%s\")", where, sseg, sseg);
                break;
            }
        } else {
            rc = kvc_fail("%s: cannot descend into a number, string or null at \"%s\" (got \"%s\")", where, sseg,
                          sseg);
            break;
        }
        node = child;
    }
    cJSON_Delete(value);
    free(path);
    return rc;
}

/* ---- entry points ---- */

static void position(const char *text, size_t offset, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int config_parse(Config *cfg, const char *name, const char *text, size_t len, char *const *sets, size_t n_sets)
{
    memset(cfg, 0, sizeof *cfg);
    Ctx c = {name};
    if (memchr(text, '\0', len)) {
        const char *z = memchr(text, '\0', len);
        int line, col;
        position(text, (size_t)(z - text), &line, &col);
        return kvc_fail("%s:%d:%d: malformed JSON: a NUL byte in the file (got byte 0x00)", name, line, col);
    }
    size_t off;
    int kind = json_check(text, len, &off);
    cJSON *root = kind == JSON_OK ? cJSON_ParseWithLengthOpts(text, len, NULL, 0) : NULL;
    if (!root) {
        if (kind == JSON_OK) { /* passed the check but cJSON refused it (e.g. a bad \u surrogate) */
            const char *at = cJSON_GetErrorPtr();
            off = at && at >= text && at < text + len ? (size_t)(at - text) : len;
        }
        int line, col;
        position(text, off, &line, &col);
        char got[40];
        size_t k = 0;
        for (size_t i = off; i < len && k < 20 && text[i] != '\n' && text[i] != '\r'; i++) got[k++] = text[i];
        got[k] = '\0';
        if (kind == JSON_EOF || off >= len)
            return kvc_fail("%s:%d:%d: malformed JSON: unexpected end of file (got end of file)", name, line, col);
        if (kind == JSON_DEEP)
            return kvc_fail("%s:%d:%d: malformed JSON: nested deeper than %d levels (got \"%s\")", name, line, col,
                            JSON_MAX_DEPTH, got);
        return kvc_fail("%s:%d:%d: malformed JSON %s (got \"%s\")", name, line, col,
                        kind == JSON_TRAILING ? "after the end of the document" : "here", got);
    }
    int rc = 0;
    for (size_t i = 0; i < n_sets && rc == 0; i++) rc = apply_set(root, sets[i]);
    if (rc == 0) {
        static const char *const top[] = {"seed", "data", "metrics", "experiments", NULL};
        if (!cJSON_IsObject(root))
            rc = bad(&c, "(top level)", root, "the config must be a JSON object");
        else if (check_keys(&c, root, "", top) || parse_seed(&c, cfg, member(root, "seed")) ||
                 parse_data(&c, cfg, member(root, "data")) || parse_metrics(&c, cfg, member(root, "metrics")) ||
                 parse_experiments(&c, cfg, member(root, "experiments")))
            rc = -1;
    }
    cJSON_Delete(root);
    return rc;
}

int config_read(char **text, size_t *len, const char *path)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kvc_fail("%s: cannot open the config (got %s)", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap >= (64u << 20)) {
                fclose(f);
                free(buf);
                return kvc_fail("%s: the config is larger than 64 MiB (got more than %zu bytes)", path, cap);
            }
            char *nb = xmalloc(cap * 2);
            memcpy(nb, buf, n);
            free(buf);
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return kvc_fail("%s: read error (got %s)", path, strerror(errno));
    }
    *text = buf;
    *len = n;
    return 0;
}

int config_load(Config *cfg, const char *path, char *const *sets, size_t n_sets)
{
    memset(cfg, 0, sizeof *cfg);
    if (!path[0]) return kvc_fail("\"\": cannot open the config: the file name is empty (got \"\")");
    char *buf;
    size_t len;
    if (config_read(&buf, &len, path)) return -1;
    int rc = config_parse(cfg, path, buf, len, sets, n_sets);
    free(buf);
    return rc;
}

void config_free(Config *cfg)
{
    if (!cfg) return;
    free(cfg->seed);
    free(cfg->outliers);
    free(cfg->query.tokens);
    free(cfg->observe.tokens);
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        free(cfg->files[r].path);
        free(cfg->files[r].name);
        tensor_free(&cfg->files[r].t);
    }
    free(cfg->file_outliers);
    for (size_t i = 0; i < cfg->n_exps; i++) {
        free(cfg->exps[i].label);
        free(cfg->exps[i].steps);
    }
    free(cfg->exps);
    memset(cfg, 0, sizeof *cfg);
}

/* ==== canonical text of a config without its experiments (for src/config/expid.c: --resume, --shard, merge) ====
 * Kept apart from the parser above: it only re-reads the JSON tree. The text is the config after the --set
 * values with "seed" and "experiments" removed, compact, object keys sorted (byte order), numbers in
 * shortest round-trip form (fmt_double), strings with only '"', '\' and control characters escaped. */

static void canon_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static int canon_key_order(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static void canon_value(FILE *f, const cJSON *n)
{
    if (cJSON_IsObject(n)) {
        size_t k = 0, cnt = (size_t)cJSON_GetArraySize(n);
        const cJSON **kids = xmalloc(cnt * sizeof *kids);
        for (const cJSON *it = n->child; it; it = it->next) kids[k++] = it;
        qsort(kids, cnt, sizeof *kids, canon_key_order);
        fputc('{', f);
        for (size_t i = 0; i < cnt; i++) {
            if (i) fputc(',', f);
            canon_string(f, kids[i]->string);
            fputc(':', f);
            canon_value(f, kids[i]);
        }
        fputc('}', f);
        free(kids);
    } else if (cJSON_IsArray(n)) {
        fputc('[', f);
        for (const cJSON *it = n->child; it; it = it->next) {
            if (it != n->child) fputc(',', f);
            canon_value(f, it);
        }
        fputc(']', f);
    } else if (cJSON_IsNumber(n)) {
        char buf[40];
        fmt_double(buf, sizeof buf, n->valuedouble);
        fputs(buf, f);
    } else if (cJSON_IsString(n)) {
        canon_string(f, n->valuestring);
    } else {
        fputs(cJSON_IsTrue(n) ? "true" : cJSON_IsFalse(n) ? "false" : "null", f);
    }
}

int config_canonical_data(char **out, const char *name, const char *text, size_t len, char *const *sets,
                          size_t n_sets)
{
    *out = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, NULL, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kvc_fail("%s: not a JSON object (got a config that changed while kvc read it?)", name);
    }
    for (size_t i = 0; i < n_sets; i++)
        if (apply_set(root, sets[i])) {
            cJSON_Delete(root);
            return -1;
        }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "seed");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "experiments");
    size_t n = 0;
    FILE *f = open_memstream(out, &n);
    if (!f) {
        fprintf(stderr, "kvc: out of memory (canonical config text)\n");
        abort();
    }
    canon_value(f, root);
    fclose(f);
    cJSON_Delete(root);
    return 0;
}

/* ==== files.json for kvc synth (src/data/load.c): the config with another data block ==== */

static void pretty_indent(FILE *f, int depth)
{
    fputc('\n', f);
    for (int i = 0; i < depth; i++) fputs("  ", f);
}

/* Indented JSON in the config's own key order: a list of numbers and strings, and an object of those and such
 * lists, on one line, else one member per line; numbers in shortest round-trip form. */
static void pretty_value(FILE *f, const cJSON *n, int depth)
{
    if (cJSON_IsObject(n) || cJSON_IsArray(n)) {
        int obj = cJSON_IsObject(n), flat = 1;
        for (const cJSON *it = n->child; it && flat; it = it->next) {
            flat = !cJSON_IsObject(it) && (!cJSON_IsArray(it) || obj);
            for (const cJSON *jt = cJSON_IsArray(it) ? it->child : NULL; jt && flat; jt = jt->next)
                flat = !cJSON_IsObject(jt) && !cJSON_IsArray(jt);
        }
        fputc(obj ? '{' : '[', f);
        for (const cJSON *it = n->child; it; it = it->next) {
            if (flat) {
                if (it != n->child) fputs(", ", f);
            } else {
                if (it != n->child) fputc(',', f);
                pretty_indent(f, depth + 1);
            }
            if (obj) {
                canon_string(f, it->string);
                fputs(": ", f);
            }
            pretty_value(f, it, depth + 1);
        }
        if (!flat && n->child) pretty_indent(f, depth);
        fputc(obj ? '}' : ']', f);
    } else {
        canon_value(f, n);
    }
}

int config_files_json(char **out, const char *name, const char *text, size_t len, char *const *sets,
                      size_t n_sets, const char *data_json)
{
    *out = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, NULL, 0), *data = cJSON_Parse(data_json);
    int rc = 0;
    if (!root || !cJSON_IsObject(root)) {
        rc = kvc_fail("%s: not a JSON object (got a config that changed while kvc read it?)", name);
    } else if (!data) {
        rc = kvc_fail("%s: internal error: the data block of files.json is not JSON (got %.60s)", name, data_json);
    } else {
        for (size_t i = 0; i < n_sets && rc == 0; i++) rc = apply_set(root, sets[i]);
    }
    if (rc == 0) {
        cJSON_ReplaceItemInObjectCaseSensitive(root, "data", data);
        data = NULL;
        size_t n = 0;
        FILE *f = open_memstream(out, &n);
        if (!f) {
            fprintf(stderr, "kvc: out of memory (files.json)\n");
            abort();
        }
        pretty_value(f, root, 0);
        fclose(f);
    }
    cJSON_Delete(data);
    cJSON_Delete(root);
    return rc;
}
