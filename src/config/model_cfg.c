/* model_cfg: data.source "model" at parse time (see model_cfg.h). */
#include "config/model_cfg.h"
#include "model/llama.h"
#include "model/tokens.h"
#include "base/util.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#define BYTE_VOCAB 256
#define MAX_SPECIALS 256

/* path resolved against the directory of the config file `cfgname` (unless absolute) */
static char *resolve(const char *cfgname, const char *path)
{
    const char *slash = strrchr(cfgname, '/');
    if (path[0] == '/' || !slash) return xstrdup(path);
    size_t dl = (size_t)(slash - cfgname) + 1, n = dl + strlen(path) + 1;
    char *out = xmalloc(n);
    memcpy(out, cfgname, dl);
    memcpy(out + dl, path, strlen(path) + 1);
    return out;
}

/* A message of a lower layer, prefixed with the config and the key it came from. */
static int wrap(const JsonCtx *c, const char *key)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kvc_errmsg());
    return kvc_fail("%s: %s: %s", c->file, key, msg);
}

static int req_string(const JsonCtx *c, const cJSON *data, const char *key, const char **out)
{
    char p[64];
    json_join(p, sizeof p, "data", key);
    const cJSON *n = json_member(data, key);
    if (!n) return json_bad(c, p, NULL, "missing required key with \"source\": \"model\"");
    if (!cJSON_IsString(n) || !n->valuestring[0]) return json_bad(c, p, n, "must be a non-empty path");
    *out = n->valuestring;
    return 0;
}

/* data.answers: [j, ...] continuation offsets (1..N, strictly increasing), or {"start": a, "step": s}: a, a + s,
 * ... up to N */
static int parse_answers(const JsonCtx *c, ModelSpec *ms, const cJSON *node)
{
    size_t N = ms->continuation;
    if (cJSON_IsObject(node)) {
        static const char *const keys[] = {"start", "step", NULL};
        long a, s;
        if (json_check_keys(c, node, "data.answers", keys)) return -1;
        if (json_req_int(c, node, "data.answers", "start", 1, (long)N, &a)) return -1;
        if (json_req_int(c, node, "data.answers", "step", 1, (long)N, &s)) return -1;
        ms->n_answers = (N - (size_t)a) / (size_t)s + 1;
        ms->answers = xmalloc(ms->n_answers * sizeof *ms->answers);
        for (size_t i = 0; i < ms->n_answers; i++) ms->answers[i] = (size_t)a + i * (size_t)s;
        return 0;
    }
    if (!cJSON_IsArray(node) || cJSON_GetArraySize(node) == 0)
        return json_bad(c, "data.answers", node, "must be a non-empty list of continuation offsets (1..%zu: x[context "
                        "+ j] is an answer) or {\"start\": j, \"step\": s}", N);
    ms->n_answers = (size_t)cJSON_GetArraySize(node);
    ms->answers = xmalloc(ms->n_answers * sizeof *ms->answers);
    size_t i = 0;
    for (const cJSON *it = node->child; it; it = it->next, i++) {
        char p[48];
        long j;
        snprintf(p, sizeof p, "data.answers.%zu", i);
        if (json_int(c, it, p, 1, (long)N, &j)) return -1;
        if (i > 0 && (size_t)j <= ms->answers[i - 1])
            return json_bad(c, p, it, "offsets must be strictly increasing (the one before is %zu)", ms->answers[i - 1]);
        ms->answers[i] = (size_t)j;
    }
    return 0;
}

int model_cfg_parse(const JsonCtx *c, Config *cfg, const cJSON *data)
{
    static const char *const keys[] = {"source", "model", "text", "token_ids", "context", "continuation", "observe",
                                       "sequence", "answers", NULL};
    if (json_check_keys(c, data, "data", keys)) return -1;
    ModelSpec *ms = &cfg->model;
    const char *dir, *input;
    if (req_string(c, data, "model", &dir)) return -1;
    const cJSON *text = json_member(data, "text"), *ids = json_member(data, "token_ids");
    if (text && ids)
        return json_bad(c, "data.token_ids", ids, "give data.text (a byte-level model) or data.token_ids, not both");
    if (!text && !ids)
        return json_bad(c, "data.text", NULL, "missing: the input is data.text (a UTF-8 file, for a byte-level model) "
                        "or data.token_ids (an .npy of int32/int64 ids)");
    if (req_string(c, data, text ? "text" : "token_ids", &input)) return -1;
    ms->dir = resolve(c->file, dir);
    ms->input = resolve(c->file, input);
    ms->text = text != NULL;
    cfg->from_model = 1;

    LlamaConfig lc;
    if (llama_read_config(&lc, ms->dir)) return wrap(c, "data.model");
    ms->vocab = lc.vocab;
    if (ms->text && (lc.vocab < BYTE_VOCAB || lc.vocab > BYTE_VOCAB + MAX_SPECIALS))
        return json_bad(c, "data.text", text, "a text is read as bytes (token id = byte), which needs a byte-level "
                        "model (vocab_size 256, or 256 plus at most %d special ids), but %s/config.json has "
                        "vocab_size %zu; give data.token_ids made by the model's tokenizer", MAX_SPECIALS, ms->dir,
                        lc.vocab);
    if (lc.layers > CONFIG_MAX_HEADS || lc.kv_heads > CONFIG_MAX_HEADS || lc.heads > CONFIG_MAX_Q_HEADS ||
        lc.head_dim > CONFIG_MAX_HEAD_DIM)
        return json_bad(c, "data.model", json_member(data, "model"), "the model has %zu layers, %zu KV heads, %zu "
                        "query heads, head_dim %zu: above kvc's limits (%lu, %lu, %lu, %lu)", lc.layers,
                        lc.kv_heads, lc.heads, lc.head_dim, CONFIG_MAX_HEADS, CONFIG_MAX_HEADS, CONFIG_MAX_Q_HEADS,
                        CONFIG_MAX_HEAD_DIM);
    long C, N;
    if (json_req_int(c, data, "data", "context", 1, (long)CONFIG_MAX_TOKENS, &C)) return -1;
    if (json_req_int(c, data, "data", "continuation", 1, (long)CONFIG_MAX_TOKENS, &N)) return -1;
    if ((size_t)C + (size_t)N > lc.max_pos)
        return json_bad(c, "data.continuation", json_member(data, "continuation"), "context + continuation = %ld + %ld "
                        "= %ld tokens, more than the model's max_position_embeddings %zu", C, N, C + N, lc.max_pos);
    size_t x, m = (size_t)C > lc.head_dim ? (size_t)C : lc.head_dim;
    if (size_mul(lc.layers, lc.kv_heads, &x) || size_mul(x, (size_t)C, &x) || size_mul(x, lc.head_dim, &x) ||
        x > CONFIG_MAX_NUMBERS)
        return json_bad(c, "data.context", json_member(data, "context"), "layers x kv_heads x context x head_dim "
                        "must be at most %lu numbers per tensor", CONFIG_MAX_NUMBERS);
    if (size_mul(lc.layers, lc.heads, &x) || size_mul(x, (size_t)N, &x) || size_mul(x, m, &x) ||
        x > CONFIG_MAX_NUMBERS)
        return json_bad(c, "data.continuation", json_member(data, "continuation"), "layers x q_heads x continuation "
                        "x max(context, head_dim) must be at most %lu numbers", CONFIG_MAX_NUMBERS);
    size_t have, rows;
    if (tokens_info(&rows, &have, ms->input, ms->text ? TOKENS_TEXT : TOKENS_NPY))
        return wrap(c, text ? "data.text" : "data.token_ids");
    const cJSON *seq = json_member(data, "sequence");
    if (rows > 1 && !seq)
        return json_bad(c, "data.sequence", NULL, "missing: data.token_ids holds %zu sequences; say which one "
                        "(0..%zu)", rows, rows - 1);
    if (seq) {
        long sq;
        if (json_int(c, seq, "data.sequence", 0, (long)rows - 1, &sq)) return -1;
        ms->sequence = (size_t)sq;
    }
    if (have < (size_t)C + (size_t)N + 1)
        return json_bad(c, text ? "data.text" : "data.token_ids", text ? text : ids, "holds %zu tokens, fewer than "
                        "context + continuation + 1 = %ld (the last continuation token's next token is its target)",
                        have, C + N + 1);
    ms->context = (size_t)C;
    ms->continuation = (size_t)N;
    const cJSON *ans = json_member(data, "answers");
    if (ans && parse_answers(c, ms, ans)) return -1;
    cfg->layers = lc.layers;
    cfg->kv_heads = lc.kv_heads;
    cfg->q_heads = lc.heads;
    cfg->dims.T = (size_t)C;
    cfg->dims.D = lc.head_dim;
    cfg->dims.has_values = 1;
    cfg->dims.has_query = 1;
    cfg->query.n = (size_t)N;
    const cJSON *o = json_member(data, "observe");
    if (o) {
        static const char *const okeys[] = {"window", NULL};
        long w;
        if (json_need_object(c, o, "data.observe") || json_check_keys(c, o, "data.observe", okeys)) return -1;
        if (json_req_int(c, o, "data.observe", "window", 1, C, &w)) return -1;
        if (size_mul(lc.layers, lc.heads, &x) || size_mul(x, (size_t)w, &x) || size_mul(x, m, &x) ||
            x > CONFIG_MAX_NUMBERS)
            return json_bad(c, "data.observe.window", json_member(o, "window"), "layers x q_heads x window x "
                            "max(context, head_dim) must be at most %lu numbers", CONFIG_MAX_NUMBERS);
        cfg->observe.n = (size_t)w;
    }
    return 0;
}
