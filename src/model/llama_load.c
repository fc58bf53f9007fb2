/* llama_load: config.json and the safetensors weights of a Hugging Face Llama directory (see llama.h).
 * Everything is checked before any weight is read: the config's sizes, then every tensor's presence, dtype
 * and shape; only then are the values read, once, into one float32 arena. */
#include "model/llama.h"
#include "base/jsongot.h"

#include "base/util.h"
#include "io/st_index.h"
#include "io/tensorio.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 2147483647.0     /* every integer in config.json */
#define MAX_CONFIG (16u << 20)   /* bytes of config.json / the index file */
#define PI 3.141592653589793

/* ---- config.json ---- */


/* A whole small text file, NUL-terminated (xmalloc'd), or NULL with kvc_fail set. */
static char *read_text(const char *path)
{
    FILE *f;
    uint64_t size;
    if (tensorio_open(&f, &size, path) < 0) return NULL;
    if (size > MAX_CONFIG) {
        fclose(f);
        kvc_fail("%s: too large for a JSON file kvc reads (got %llu bytes; at most %u)", path,
                 (unsigned long long)size, MAX_CONFIG);
        return NULL;
    }
    char *text = xmalloc((size_t)size + 1);
    int rc = tensorio_read_exact(f, text, (size_t)size, path, "the file");
    fclose(f);
    if (rc < 0) {
        free(text);
        return NULL;
    }
    text[size] = '\0';
    return text;
}

static cJSON *read_json(const char *path)
{
    char *text = read_text(path);
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        char got[40];
        snprintf(got, sizeof got, "%.24s", root ? "not an object" : text + (at < strlen(text) ? at : 0));
        cJSON_Delete(root);
        free(text);
        kvc_fail("%s: not a JSON object%s (got \"%s\")", path, root ? "" : ": parse error", got);
        return NULL;
    }
    free(text);
    return root;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer 1..2^31-1; absent or null: dflt (0 = required). */
static int get_size(const cJSON *o, const char *path, const char *key, size_t dflt, size_t *out)
{
    const cJSON *v = item(o, key);
    char got[64];
    if (!v) {
        if (!dflt) return kvc_fail("%s: \"%s\" is missing (got no such key)", path, key);
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1) || v->valuedouble > MAX_DIM ||
        v->valuedouble != floor(v->valuedouble)) {
        json_got(got, sizeof got, v);
        return kvc_fail("%s: \"%s\" must be an integer in 1..2147483647 (got %s)", path, key, got);
    }
    *out = (size_t)v->valuedouble;
    return 0;
}

/* A finite number > 0 (or >= 0 with zero_ok); absent or null: dflt (NAN = required). */
static int get_pos(const cJSON *o, const char *path, const char *where, const char *key, double dflt, int zero_ok,
                   double *out)
{
    const cJSON *v = item(o, key);
    char got[64];
    if (!v) {
        if (isnan(dflt)) return kvc_fail("%s: \"%s%s\" is missing (got no such key)", path, where, key);
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 || (!zero_ok && v->valuedouble == 0)) {
        json_got(got, sizeof got, v);
        return kvc_fail("%s: \"%s%s\" must be a finite number %s 0 (got %s)", path, where, key, zero_ok ? ">=" : ">",
                        got);
    }
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *path, const char *key, int dflt, int *out)
{
    const cJSON *v = item(o, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) {
        char got[64];
        json_got(got, sizeof got, v);
        return kvc_fail("%s: \"%s\" must be true or false (got %s)", path, key, got);
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

static int check_arch(const cJSON *root, const char *path)
{
    const cJSON *arch = item(root, "architectures"), *mt = item(root, "model_type");
    char got[200];
    if (!arch) {
        if (cJSON_IsString(mt) && !strcmp(mt->valuestring, "llama")) return 0;
        json_got(got, sizeof got, mt);
        return kvc_fail("%s: no \"architectures\" and \"model_type\" is not \"llama\": kvc runs LlamaForCausalLM "
                        "models (got \"model_type\": %s)", path, got);
    }
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) == 1 && cJSON_IsString(arch->child) &&
        !strcmp(arch->child->valuestring, "LlamaForCausalLM"))
        return 0;
    json_got(got, sizeof got, arch);
    return kvc_fail("%s: \"architectures\": %s is not supported: kvc runs [\"LlamaForCausalLM\"] (got %s)", path, got,
                    got);
}

static int read_rope(LlamaConfig *c, const cJSON *root, const char *path)
{
    const cJSON *params = item(root, "rope_parameters"); /* transformers 5 */
    const cJSON *rs = params ? params : item(root, "rope_scaling");
    const char *where = params ? "rope_parameters." : "rope_scaling.";
    char got[200];
    int in_params = params && item(params, "rope_theta");
    if (get_pos(in_params ? params : root, path, in_params ? where : "", "rope_theta", 10000.0, 0, &c->rope_theta) < 0)
        return -1;
    int interleaved;
    if (get_bool(root, path, "rope_interleaved", 0, &interleaved) < 0) return -1;
    if (interleaved)
        return kvc_fail("%s: \"rope_interleaved\": true is not supported: kvc runs HF's half-split RoPE (got true)",
                        path);
    c->rope_type = LLAMA_ROPE_DEFAULT;
    if (!rs) return 0;
    if (!cJSON_IsObject(rs)) {
        json_got(got, sizeof got, rs);
        return kvc_fail("%s: \"%s\" must be null or an object (got %s)", path, params ? "rope_parameters" :
                        "rope_scaling", got);
    }
    const cJSON *type = item(rs, "rope_type");
    if (!type) type = item(rs, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : type ? "" : "default";
    if (!strcmp(t, "default")) return 0;
    if (!strcmp(t, "linear")) {
        c->rope_type = LLAMA_ROPE_LINEAR;
        return get_pos(rs, path, where, "factor", NAN, 0, &c->rope_factor);
    }
    if (!strcmp(t, "llama3")) {
        c->rope_type = LLAMA_ROPE_LLAMA3;
        if (get_pos(rs, path, where, "factor", NAN, 0, &c->rope_factor) < 0 ||
            get_pos(rs, path, where, "low_freq_factor", NAN, 0, &c->rope_low_freq_factor) < 0 ||
            get_pos(rs, path, where, "high_freq_factor", NAN, 0, &c->rope_high_freq_factor) < 0 ||
            get_pos(rs, path, where, "original_max_position_embeddings", NAN, 0, &c->rope_original_max_pos) < 0)
            return -1;
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
            return kvc_fail("%s: \"%shigh_freq_factor\" must be greater than low_freq_factor (got %g and %g)", path,
                            where, c->rope_high_freq_factor, c->rope_low_freq_factor);
        return 0;
    }
    json_got(got, sizeof got, type);
    return kvc_fail("%s: rope scaling type %s is not supported: kvc knows \"default\", \"linear\" and \"llama3\" "
                    "(got %s)", path, got, got);
}

static int parse_config(LlamaConfig *c, const cJSON *root, const char *path)
{
    memset(c, 0, sizeof *c);
    if (check_arch(root, path) < 0) return -1;
    if (get_size(root, path, "hidden_size", 0, &c->hidden) < 0 ||
        get_size(root, path, "num_hidden_layers", 0, &c->layers) < 0 ||
        get_size(root, path, "num_attention_heads", 0, &c->heads) < 0 ||
        get_size(root, path, "num_key_value_heads", c->heads, &c->kv_heads) < 0 ||
        get_size(root, path, "intermediate_size", 0, &c->inter) < 0 ||
        get_size(root, path, "vocab_size", 0, &c->vocab) < 0 ||
        get_size(root, path, "max_position_embeddings", 2048, &c->max_pos) < 0)
        return -1;
    if (item(root, "head_dim")) {
        if (get_size(root, path, "head_dim", 0, &c->head_dim) < 0) return -1;
    } else {
        if (c->hidden % c->heads)
            return kvc_fail("%s: hidden_size must be divisible by num_attention_heads when there is no head_dim (got "
                            "hidden_size %zu, num_attention_heads %zu)", path, c->hidden, c->heads);
        c->head_dim = c->hidden / c->heads;
    }
    if (c->head_dim % 2)
        return kvc_fail("%s: head_dim must be even for RoPE (got %zu)", path, c->head_dim);
    if (c->heads % c->kv_heads)
        return kvc_fail("%s: num_key_value_heads must divide num_attention_heads (got %zu KV heads for %zu query "
                        "heads)", path, c->kv_heads, c->heads);
    double eps;
    if (get_pos(root, path, "", "rms_norm_eps", 1e-6, 1, &eps) < 0) return -1;
    c->rms_eps = (float)eps;
    if (get_bool(root, path, "tie_word_embeddings", 0, &c->tied) < 0) return -1;
    const cJSON *act = item(root, "hidden_act");
    if (act && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu"))) {
        char got[64];
        json_got(got, sizeof got, act);
        return kvc_fail("%s: \"hidden_act\" must be \"silu\" (got %s)", path, got);
    }
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (size_t k = 0; k < 2; k++) {
        int b;
        if (get_bool(root, path, biases[k], 0, &b) < 0) return -1;
        if (b) return kvc_fail("%s: \"%s\": true is not supported: kvc runs Llama without biases (got true)", path,
                               biases[k]);
    }
    return read_rope(c, root, path);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = xmalloc(n);
    snprintf(s, n, "%s/%s", dir, name);
    return s;
}

int llama_read_config(LlamaConfig *cfg, const char *dir)
{
    char *path = join(dir, "config.json");
    cJSON *root = read_json(path);
    int rc = root ? parse_config(cfg, root, path) : -1;
    cJSON_Delete(root);
    free(path);
    if (rc < 0) memset(cfg, 0, sizeof *cfg);
    return rc;
}

/* ---- the weights: one file or an index of shards ---- */

typedef struct Weights {
    char *where;             /* the file messages name: model.safetensors or the index */
    StFile *files;           /* opened on demand */
    char **names;            /* shard file names (index) */
    size_t n;
    cJSON *map;              /* "weight_map" (index), or NULL */
    cJSON *index;
    const char *dir;
} Weights;

static void weights_free(Weights *w)
{
    for (size_t k = 0; k < w->n; k++) {
        st_index_free(&w->files[k]);
        free(w->names[k]);
    }
    free(w->files);
    free(w->names);
    cJSON_Delete(w->index);
    free(w->where);
    memset(w, 0, sizeof *w);
}

static int file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int weights_open(Weights *w, const char *dir)
{
    memset(w, 0, sizeof *w);
    w->dir = dir;
    char *single = join(dir, "model.safetensors");
    char *index = join(dir, "model.safetensors.index.json");
    if (file_exists(single) || !file_exists(index)) {
        free(index);
        w->where = single;
        w->files = xcalloc(1, sizeof *w->files);
        w->names = xcalloc(1, sizeof *w->names);
        if (!file_exists(single)) {
            char *bin = join(dir, "pytorch_model.bin");
            int has_bin = file_exists(bin);
            free(bin);
            return kvc_fail("%s: no weights: kvc reads model.safetensors or model.safetensors.index.json (got %s)",
                            dir, has_bin ? "only pytorch_model.bin, which kvc does not read" : "neither");
        }
        w->names[0] = xstrdup("model.safetensors");
        w->n = 1;
        return st_index_open(&w->files[0], single);
    }
    free(single);
    w->where = index;
    if (!(w->index = read_json(index))) return -1;
    w->map = cJSON_GetObjectItemCaseSensitive(w->index, "weight_map");
    if (!cJSON_IsObject(w->map)) {
        char got[64];
        json_got(got, sizeof got, w->map);
        return kvc_fail("%s: \"weight_map\" must be an object of tensor name -> file (got %s)", index, got);
    }
    size_t cap = (size_t)cJSON_GetArraySize(w->map) + 1;
    w->files = xcalloc(cap, sizeof *w->files);
    w->names = xcalloc(cap, sizeof *w->names);
    return 0;
}

/* The file and entry holding tensor `name`; 0, or -1 with kvc_fail naming the tensor. */
static int weights_find(Weights *w, const char *name, StFile **file, const StEntry **e)
{
    size_t k = 0;
    if (w->map) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(w->map, name);
        if (!s)
            return kvc_fail("%s: tensor \"%s\" is missing from \"weight_map\" (got %d other tensors)", w->where, name,
                            cJSON_GetArraySize(w->map));
        if (!cJSON_IsString(s) || !s->valuestring[0] || strchr(s->valuestring, '/') ||
            !strcmp(s->valuestring, "..")) {
            char got[80];
            json_got(got, sizeof got, s);
            return kvc_fail("%s: tensor \"%s\": the shard must be a file name in the model directory (got %s)",
                            w->where, name, got);
        }
        for (k = 0; k < w->n && strcmp(w->names[k], s->valuestring); k++) {}
        if (k == w->n) {
            char *path = join(w->dir, s->valuestring);
            int rc = st_index_open(&w->files[k], path);
            free(path);
            if (rc < 0) return -1;
            w->names[w->n++] = xstrdup(s->valuestring);
        }
    }
    *file = &w->files[k];
    *e = st_index_find(*file, name);
    if (!*e)
        return kvc_fail("%s: tensor \"%s\" is missing (got %zu tensors, none of that name)%s", (*file)->path, name,
                        (*file)->n, w->map ? " although the index names this shard" : "");
    return 0;
}

/* ---- the model ---- */

typedef struct Need {
    char name[96];
    size_t shape[2], ndim;
    float **dst;
    size_t count;
    StFile *file;
    const StEntry *e;
} Need;

static void need(Need *n, size_t *k, float **dst, size_t d0, size_t d1, const char *fmt, size_t layer)
{
    Need *x = &n[(*k)++];
    snprintf(x->name, sizeof x->name, fmt, layer);
    x->shape[0] = d0;
    x->shape[1] = d1;
    x->ndim = d1 ? 2 : 1;
    x->dst = dst;
}

/* inv_freq[i] = theta^(-2i/D) in float32 (HF's _compute_default_rope_parameters), then the scaling. */
static void rope_frequencies(float *inv, const LlamaConfig *c)
{
    size_t half = c->head_dim / 2;
    for (size_t i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)c->head_dim;
        float f = 1.0f / powf((float)c->rope_theta, e);
        if (c->rope_type == LLAMA_ROPE_LINEAR) f = (float)(f / c->rope_factor);
        if (c->rope_type == LLAMA_ROPE_LLAMA3) { /* HF's _compute_llama3_parameters */
            double old = c->rope_original_max_pos, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
            double fac = c->rope_factor, wavelen = 2 * PI / f;
            double low_wl = old / lo, high_wl = old / hi, g = f;
            if (wavelen > low_wl) g = f / fac;
            else if (!(wavelen < high_wl)) {
                double s = (old / wavelen - lo) / (hi - lo);
                g = (1 - s) * f / fac + s * f;
            }
            f = (float)g;
        }
        inv[i] = f;
    }
}

int llama_load(LlamaModel *m, const char *dir)
{
    memset(m, 0, sizeof *m);
    if (llama_read_config(&m->cfg, dir) < 0) return -1;
    const LlamaConfig *c = &m->cfg;
    size_t E = c->hidden, L = c->layers, q = 0, kv = 0;
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    /* every size used later, overflow-checked once here */
    size_t ve, qe, kve, ie, per_layer = 0, total = 0;
    if (size_mul(c->heads, c->head_dim, &q) < 0 || size_mul(c->kv_heads, c->head_dim, &kv) < 0 ||
        size_mul(c->vocab, E, &ve) < 0 || size_mul(q, E, &qe) < 0 || size_mul(kv, E, &kve) < 0 ||
        size_mul(c->inter, E, &ie) < 0 || size_add(per_layer, 2 * E, &per_layer) < 0 ||
        size_add(per_layer, qe, &per_layer) < 0 || size_add(per_layer, qe, &per_layer) < 0 ||
        size_add(per_layer, kve, &per_layer) < 0 || size_add(per_layer, kve, &per_layer) < 0 ||
        size_add(per_layer, ie, &per_layer) < 0 || size_add(per_layer, ie, &per_layer) < 0 ||
        size_add(per_layer, ie, &per_layer) < 0 || size_mul(per_layer, L, &total) < 0 ||
        size_add(total, ve, &total) < 0 || size_add(total, E, &total) < 0 ||
        (!c->tied && size_add(total, ve, &total) < 0) || size_mul(total, sizeof(float), &(size_t){0}) < 0)
        return kvc_fail("%s: the model's sizes overflow memory arithmetic (got hidden_size %zu, %zu layers, "
                        "vocab_size %zu, intermediate_size %zu, head_dim %zu, max_position_embeddings %zu)", cpath,
                        E, L, c->vocab, c->inter, c->head_dim, c->max_pos);

    if (q > INT_MAX || kv > INT_MAX)
        return kvc_fail("%s: heads x head_dim exceed the 2^31-1 that BLAS takes (got %zu query and %zu KV columns)",
                        cpath, q, kv);
    size_t nn = 9 * L + 3, k = 0;
    Need *n = xcalloc(nn, sizeof *n);
    m->layer = xcalloc(L, sizeof *m->layer);
    float *embed = NULL, *norm = NULL, *head = NULL;
    float **lp = xcalloc(9 * L, sizeof *lp);
    need(n, &k, &embed, c->vocab, E, "model.embed_tokens.weight", 0);
    for (size_t l = 0; l < L; l++) {
        float **p = lp + 9 * l;
        need(n, &k, &p[0], E, 0, "model.layers.%zu.input_layernorm.weight", l);
        need(n, &k, &p[1], q, E, "model.layers.%zu.self_attn.q_proj.weight", l);
        need(n, &k, &p[2], kv, E, "model.layers.%zu.self_attn.k_proj.weight", l);
        need(n, &k, &p[3], kv, E, "model.layers.%zu.self_attn.v_proj.weight", l);
        need(n, &k, &p[4], E, q, "model.layers.%zu.self_attn.o_proj.weight", l);
        need(n, &k, &p[5], E, 0, "model.layers.%zu.post_attention_layernorm.weight", l);
        need(n, &k, &p[6], c->inter, E, "model.layers.%zu.mlp.gate_proj.weight", l);
        need(n, &k, &p[7], c->inter, E, "model.layers.%zu.mlp.up_proj.weight", l);
        need(n, &k, &p[8], E, c->inter, "model.layers.%zu.mlp.down_proj.weight", l);
    }
    need(n, &k, &norm, E, 0, "model.norm.weight", 0);
    if (!c->tied) need(n, &k, &head, c->vocab, E, "lm_head.weight", 0);
    nn = k;

    Weights w;
    int rc = weights_open(&w, dir);
    for (k = 0; rc == 0 && k < nn; k++) { /* presence, dtype and shape of everything first */
        Need *x = &n[k];
        if ((rc = weights_find(&w, x->name, &x->file, &x->e)) < 0) break;
        const StEntry *e = x->e;
        if (e->ndim != x->ndim || e->shape[0] != x->shape[0] || (x->ndim == 2 && e->shape[1] != x->shape[1])) {
            char want[64], got[200];
            st_index_shape_str(want, sizeof want, x->shape, x->ndim);
            st_index_shape_str(got, sizeof got, e->shape, e->ndim);
            rc = kvc_fail("%s: tensor \"%s\": config.json implies shape %s (got %s)", x->file->path, x->name, want,
                          got);
            break;
        }
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16")) {
            rc = kvc_fail("%s: tensor \"%s\": unsupported dtype for weights (got \"%s\"; expected \"F32\", \"F16\" "
                          "or \"BF16\")", x->file->path, x->name, e->dtype);
            break;
        }
        x->count = e->count;
    }
    if (rc == 0) {
        m->arena = xmalloc(total * sizeof(float));
        m->n_params = total;
        size_t off = 0;
        for (k = 0; rc == 0 && k < nn; k++) {
            *n[k].dst = m->arena + off;
            rc = st_index_read_f32(m->arena + off, n[k].file, n[k].e);
            off += n[k].count;
        }
        if (rc == 0 && off != total) rc = kvc_fail("%s: internal size mismatch (got %zu of %zu)", dir, off, total);
    }
    if (rc == 0) {
        m->weights_path = xstrdup(w.where);
        m->embed = embed;
        m->norm = norm;
        m->lm_head = c->tied ? embed : head;
        for (size_t l = 0; l < L; l++) {
            float **p = lp + 9 * l;
            m->layer[l] = (LlamaLayer){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]};
        }
        m->inv_freq = xmalloc(c->head_dim / 2 * sizeof(float));
        rope_frequencies(m->inv_freq, c);
    }
    weights_free(&w);
    free(lp);
    free(n);
    if (rc < 0) llama_free(m);
    return rc;
}

void llama_free(LlamaModel *m)
{
    if (!m) return;
    free(m->layer);
    free(m->inv_freq);
    free(m->arena);
    free(m->weights_path);
    memset(m, 0, sizeof *m);
}
