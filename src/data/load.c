/* load: data.source "files" (read, check shapes, hand over to a Data) and kvc synth (write them back). See load.h. */
#include "data/load.h"
#include "io/io_npy.h"
#include "io/io_safetensors.h"
#include "io/dirwrite.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

static const char *const role_key[CONFIG_N_FILES] = {"keys", "values", "queries", "observe"};
static const char *const dim_name[4] = {"layers", "kv_heads", "tokens", "head_dim"};

/* The shape right-aligned to four dimensions, missing leading ones being 1. */
static void shape4(size_t out[4], const Tensor *t)
{
    for (size_t k = 0; k < 4; k++) out[k] = 1;
    for (size_t k = 0; k < t->ndim; k++) out[4 - t->ndim + k] = t->shape[k];
}

static void shape_text(char *buf, size_t cap, const Tensor *t)
{
    tensorio_shape_str(buf, cap, t->shape, t->ndim);
}

/* "<cfg>: data.files.<role>: shape S disagrees with data.files.<other> S': <why> (got "<path>")" */
static int disagree(const char *cfgname, const Config *cfg, int role, int other, const char *why)
{
    char s[128], o[128];
    shape_text(s, sizeof s, &cfg->files[role].t);
    shape_text(o, sizeof o, &cfg->files[other].t);
    return kvc_fail("%s: data.files.%s: shape %s disagrees with data.files.%s %s: %s (got \"%s\")", cfgname,
                    role_key[role], s, role_key[other], o, why, cfg->files[role].path);
}

/* A shape problem of one tensor on its own. */
static int bad_shape(const char *cfgname, const Config *cfg, int role, const char *why)
{
    char s[128];
    shape_text(s, sizeof s, &cfg->files[role].t);
    return kvc_fail("%s: data.files.%s: shape %s %s (got \"%s\")", cfgname, role_key[role], s, why,
                    cfg->files[role].path);
}

/* Dimensions >= 1 and the tensor's own dimension limits. */
static int check_dims(const char *cfgname, const Config *cfg, int role)
{
    const Tensor *t = &cfg->files[role].t;
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

int load_files(Config *cfg, const char *cfgname)
{
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        FileSpec *f = &cfg->files[r];
        if (!f->path) continue;
        if (tensor_read(&f->t, f->path, f->name, CONFIG_MAX_NUMBERS)) return -1;
        if (check_dims(cfgname, cfg, r)) return -1;
    }
    size_t k[4], s[4];
    char why[256];
    shape4(k, &cfg->files[FILE_KEYS].t);
    size_t L = k[0], H = k[1], T = k[2], D = k[3], Hq = H;
    if (cfg->files[FILE_VALUES].path) {
        shape4(s, &cfg->files[FILE_VALUES].t);
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
        shape4(s, &cfg->files[r].t);
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

static double *take(Tensor *t)
{
    double *x = t->data;
    t->data = NULL;
    return x;
}

int data_make(Data *d, Config *cfg)
{
    if (!cfg->from_files) return synth_data(d, cfg);
    memset(d, 0, sizeof *d);
    d->L = cfg->layers;
    d->H = cfg->kv_heads;
    d->Hq = cfg->q_heads;
    d->T = cfg->dims.T;
    d->D = cfg->dims.D;
    d->N = cfg->query.n;
    d->W = cfg->observe.n;
    d->K = take(&cfg->files[FILE_KEYS].t);
    d->V = take(&cfg->files[FILE_VALUES].t);
    d->Q = take(&cfg->files[FILE_QUERIES].t);
    d->O = take(&cfg->files[FILE_OBSERVE].t);
    if (!d->K) return kvc_fail("data: the tensors of data.files were already handed over (got a second data_make)");
    if (d->W > 0) {
        d->obs_pos = xmalloc(d->W * sizeof *d->obs_pos);
        for (size_t j = 0; j < d->W; j++) d->obs_pos[j] = d->T - d->W + j;
    }
    if (cfg->has_rope)
        rope_init(&d->rope, cfg->rope_base, cfg->rope_dims, cfg->rope_style == ROPE_INTERLEAVED, d->T, d->D);
    if (cfg->file_outliers) {
        d->outlier_mask = xmalloc(d->L * d->D);
        memcpy(d->outlier_mask, cfg->file_outliers, d->L * d->D);
    }
    if (data_check(d)) {   /* its advice speaks of generator settings: keep what is wrong and the values */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kvc_errmsg());
        char *body = strncmp(msg, "data: ", 6) == 0 ? msg + 6 : msg, *advice = strstr(body, "; lower "),
             *got = strstr(body, " (got ");
        if (advice && got && advice < got) memmove(advice, got, strlen(got) + 1);
        kvc_fail("data.files: %s", body);
        data_free(d);
        return -1;
    }
    return 0;
}

/* ---- kvc synth ---- */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

/* data.outlier_channels of files.json: one list when every layer has the same channels, else one per layer. */
static void outlier_json(FILE *f, const unsigned char *mask, size_t L, size_t D)
{
    int same = 1;
    for (size_t l = 1; l < L && same; l++) same = memcmp(mask, mask + l * D, D) == 0;
    fputs(", \"outlier_channels\": [", f);
    for (size_t l = 0; l < (same ? 1 : L); l++) {
        if (!same) fputs(l ? ", [" : "[", f);
        int first = 1;
        for (size_t c = 0; c < D; c++)
            if (mask[l * D + c]) {
                fprintf(f, first ? "%zu" : ", %zu", c);
                first = 0;
            }
        if (!same) fputs("]", f);
    }
    fputs("]", f);
}

int load_save(const char *dir, SaveFormat fmt, const Data *d, const Config *cfg, const char *cfg_path,
              char *const *sets, size_t n_sets)
{
    /* every file goes to a temporary directory inside DIR first, then all are moved in (io/dirwrite.h) */
    static const char *const set[] = {"keys.npy", "values.npy", "queries.npy", "observe.npy", "cache.safetensors",
                                      "files.json"};
    DirWrite w;
    if (dirwrite_begin(&w, dir, set, sizeof set / sizeof set[0])) return -1;
    dir = w.tmp;

    const double *src[CONFIG_N_FILES] = {d->K, d->V, d->Q, d->O};
    size_t second[CONFIG_N_FILES] = {d->H, d->H, d->Hq, d->Hq}, third[CONFIG_N_FILES] = {d->T, d->T, d->N, d->W};
    Tensor t[CONFIG_N_FILES];
    SafetensorsEntry entries[CONFIG_N_FILES];
    size_t ne = 0;
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        t[r] = (Tensor){4, {d->L, second[r], third[r], d->D}, (double *)src[r]};
        if (src[r]) entries[ne++] = (SafetensorsEntry){role_key[r], &t[r]};
    }

    /* the data block of files.json; file names are plain ASCII, so they need no JSON escaping */
    char *djson = NULL;
    size_t dlen = 0;
    FILE *dj = open_memstream(&djson, &dlen);
    if (!dj) {
        fprintf(stderr, "kvc: out of memory (files.json)\n");
        abort();
    }
    fputs("{\"source\": \"files\", \"files\": {", dj);
    int rc = 0, first = 1;
    for (int r = 0; r < CONFIG_N_FILES && rc == 0; r++) {
        if (!src[r]) continue;
        fprintf(dj, "%s\"%s\": ", first ? "" : ", ", role_key[r]);
        first = 0;
        if (fmt == SAVE_SAFETENSORS) {
            fprintf(dj, "{\"path\": \"cache.safetensors\", \"name\": \"%s\"}", role_key[r]);
        } else {
            char name[32];
            snprintf(name, sizeof name, "%s.npy", role_key[r]);
            fprintf(dj, "\"%s\"", name);
            char *p = join(dir, name);
            if (npy_write(p, &t[r])) rc = 1;
            free(p);
        }
    }
    fputs("}", dj);
    if (d->rope.dims > 0) {
        char base[40];
        fmt_double(base, sizeof base, cfg->rope_base);
        fprintf(dj, ", \"rope\": {\"base\": %s, \"dims\": %zu, \"style\": \"%s\", \"cache\": \"pre\"}", base,
                d->rope.dims, d->rope.interleaved ? "interleaved" : "half");
    }
    if (d->outlier_mask) outlier_json(dj, d->outlier_mask, d->L, d->D);
    fputs("}", dj);
    fclose(dj);

    if (rc == 0 && fmt == SAVE_SAFETENSORS) {
        char *p = join(dir, "cache.safetensors");
        if (safetensors_write(p, entries, ne, TENSOR_F64)) rc = 1;
        free(p);
    }
    char *text = NULL, *json = NULL;
    size_t len = 0;
    if (rc == 0 && (config_read(&text, &len, cfg_path) ||
                    config_files_json(&json, cfg_path, text, len, sets, n_sets, djson)))
        rc = -1;
    if (rc == 0) {
        char *p = join(dir, "files.json");
        TensorioOut o;
        if (tensorio_create(&o, p)) {
            rc = 1;
        } else if (fputs(json, o.f) < 0 || fputc('\n', o.f) < 0) {
            kvc_fail("%s: write failed (got %s)", p, strerror(errno));
            tensorio_abort(&o);
            rc = 1;
        } else if (tensorio_commit(&o)) {
            rc = 1;
        }
        free(p);
    }
    free(text);
    free(json);
    free(djson);
    return dirwrite_end(&w, rc);
}
