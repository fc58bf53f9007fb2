/* files: the headers of data.source "files" and the rules their shapes follow (see files.h). */
#include "config/files.h"
#include "io/tensorio.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

const char *const config_file_roles[CONFIG_N_FILES] = {"keys", "values", "queries", "observe"};
static const char *const dim_name[4] = {"layers", "kv_heads", "tokens", "head_dim"};

/* The shape right-aligned to four dimensions, missing leading ones being 1. */
static void shape4(size_t out[4], const TensorInfo *t)
{
    for (size_t k = 0; k < 4; k++) out[k] = 1;
    for (size_t k = 0; k < t->ndim; k++) out[4 - t->ndim + k] = t->shape[k];
}

static void shape_text(char *buf, size_t cap, const TensorInfo *t)
{
    tensorio_shape_str(buf, cap, t->shape, t->ndim);
}

/* "<cfg>: data.files.<role>: shape S disagrees with data.files.<other> S': <why> (got "<path>")" */
static int disagree(const char *cfgname, const Config *cfg, int role, int other, const char *why)
{
    char s[128], o[128];
    shape_text(s, sizeof s, &cfg->files[role].info);
    shape_text(o, sizeof o, &cfg->files[other].info);
    return kvc_fail("%s: data.files.%s: shape %s disagrees with data.files.%s %s: %s (got \"%s\")", cfgname,
                    config_file_roles[role], s, config_file_roles[other], o, why, cfg->files[role].path);
}

/* A shape problem of one tensor on its own. */
static int bad_shape(const char *cfgname, const Config *cfg, int role, const char *why)
{
    char s[128];
    shape_text(s, sizeof s, &cfg->files[role].info);
    return kvc_fail("%s: data.files.%s: shape %s %s (got \"%s\")", cfgname, config_file_roles[role], s, why,
                    cfg->files[role].path);
}

/* Dimensions >= 1 and the tensor's own dimension limits. */
static int check_dims(const char *cfgname, const Config *cfg, int role)
{
    const TensorInfo *t = &cfg->files[role].info;
    int kv = role == FILE_KEYS || role == FILE_VALUES;
    char why[256];
    if (kv && t->ndim < 2)
        return bad_shape(cfgname, cfg, role, "has 1 dimension; keys and values are (tokens, head_dim), (kv_heads, "
                         "tokens, head_dim) or (layers, kv_heads, tokens, head_dim)");
    for (size_t k = 0; k < t->ndim; k++)
        if (t->shape[k] == 0) return bad_shape(cfgname, cfg, role, "has a dimension of 0; every dimension must be >= 1");
    size_t s[4];
    shape4(s, t);
    const char *names[4] = {"layers", kv ? "kv_heads" : "q_heads", kv ? "tokens" : "queries", "head_dim"};
    const unsigned long lim[4] = {CONFIG_MAX_HEADS, kv ? CONFIG_MAX_HEADS : CONFIG_MAX_Q_HEADS,
                                  kv ? CONFIG_MAX_TOKENS : CONFIG_MAX_NUMBERS, CONFIG_MAX_HEAD_DIM};
    for (size_t k = 0; k < 4; k++)
        if (s[k] > lim[k]) {
            snprintf(why, sizeof why, "has %s = %zu, more than the limit of %lu", names[k], s[k], lim[k]);
            return bad_shape(cfgname, cfg, role, why);
        }
    return 0;
}

int files_read_headers(Config *cfg, const char *cfgname)
{
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        FileSpec *f = &cfg->files[r];
        if (!f->path) continue;
        if (tensor_read_info(&f->info, f->path, f->name, CONFIG_MAX_NUMBERS)) return -1;
        if (check_dims(cfgname, cfg, r)) return -1;
    }
    size_t k[4], s[4];
    char why[256];
    shape4(k, &cfg->files[FILE_KEYS].info);
    size_t L = k[0], H = k[1], T = k[2], D = k[3], Hq = H;
    if (cfg->files[FILE_VALUES].path) {
        shape4(s, &cfg->files[FILE_VALUES].info);
        for (size_t i = 0; i < 4; i++)
            if (s[i] != k[i]) {
                snprintf(why, sizeof why, "%s %zu != %zu", dim_name[i], s[i], k[i]);
                return disagree(cfgname, cfg, FILE_VALUES, FILE_KEYS, why);
            }
    }
    size_t n[CONFIG_N_FILES] = {0};
    int q_role = -1;   /* the queries that fixed Hq */
    for (int r = FILE_QUERIES; r <= FILE_OBSERVE; r++) {
        if (!cfg->files[r].path) continue;
        shape4(s, &cfg->files[r].info);
        if (s[0] != L) {
            snprintf(why, sizeof why, "layers %zu != %zu", s[0], L);
            return disagree(cfgname, cfg, r, FILE_KEYS, why);
        }
        if (s[3] != D) {
            snprintf(why, sizeof why, "head_dim %zu != %zu", s[3], D);
            return disagree(cfgname, cfg, r, FILE_KEYS, why);
        }
        if (q_role >= 0 && s[1] != Hq) {
            snprintf(why, sizeof why, "q_heads %zu != %zu", s[1], Hq);
            return disagree(cfgname, cfg, r, q_role, why);
        }
        if (s[1] % H != 0) {
            snprintf(why, sizeof why, "q_heads %zu is not a multiple of kv_heads %zu (query head hq reads KV head "
                     "hq / (q_heads / kv_heads))", s[1], H);
            return disagree(cfgname, cfg, r, FILE_KEYS, why);
        }
        if (r == FILE_OBSERVE && s[2] > T) {
            snprintf(why, sizeof why, "%zu observation queries but %zu tokens (they are the queries of the last W "
                     "positions)", s[2], T);
            return disagree(cfgname, cfg, r, FILE_KEYS, why);
        }
        size_t x, m = T > D ? T : D;
        if (size_mul(L, s[1], &x) || size_mul(x, s[2], &x) || size_mul(x, m, &x) || x > CONFIG_MAX_NUMBERS) {
            snprintf(why, sizeof why, "with %zu tokens: layers x q_heads x queries x max(tokens, head_dim) must be at "
                     "most %lu numbers", T, CONFIG_MAX_NUMBERS);
            return bad_shape(cfgname, cfg, r, why);
        }
        Hq = s[1];
        q_role = r;
        n[r] = s[2];
    }
    cfg->layers = L;
    cfg->kv_heads = H;
    cfg->q_heads = Hq;
    cfg->dims.T = T;
    cfg->dims.D = D;
    cfg->dims.has_values = cfg->files[FILE_VALUES].path != NULL;
    cfg->dims.has_query = cfg->files[FILE_QUERIES].path != NULL;
    cfg->query.n = n[FILE_QUERIES];
    cfg->observe.n = n[FILE_OBSERVE];
    return 0;
}
