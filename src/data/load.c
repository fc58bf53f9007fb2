/* load: data.source "files" (read the values, hand them to a Data) and kvc synth (write them back). See load.h. */
#include "data/load.h"
#include "data/model_source.h"
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

/* Reads the values of data.files.<role> (its header was read by config_parse) and checks that the header
 * still says what it said then. 0, or -1 with kvc_fail set and *t zeroed. */
static int read_values(Tensor *t, const Config *cfg, int role)
{
    const FileSpec *f = &cfg->files[role];
    if (tensor_read(t, f->path, f->name, CONFIG_MAX_NUMBERS)) return -1;
    if (t->ndim != f->info.ndim || memcmp(t->shape, f->info.shape, sizeof t->shape) != 0) {
        char now[128], then[128];
        tensorio_shape_str(now, sizeof now, t->shape, t->ndim);
        tensorio_shape_str(then, sizeof then, f->info.shape, f->info.ndim);
        tensor_free(t);
        return kvc_fail("data.files.%s: the file changed after the config was read: its shape is %s now, %s then "
                        "(got \"%s\")", config_file_roles[role], now, then, f->path);
    }
    return 0;
}

int data_make_run(Data *d, const Config *cfg)
{
    if (synth_stream_wanted(cfg)) return synth_data_stream(d, cfg);
    return data_make(d, cfg);
}

int data_make(Data *d, const Config *cfg)
{
    if (cfg->from_model) return model_source_make(d, cfg);
    if (!cfg->from_files) {
        /* the config's limit is per KV head (kvc run streams a larger data set); held whole, per tensor */
        size_t n = cfg->layers * cfg->kv_heads * cfg->dims.T * cfg->dims.D;
        if (n > CONFIG_MAX_NUMBERS) {
            memset(d, 0, sizeof *d);
            return kvc_fail("data: layers x kv_heads x tokens x head_dim = %zu x %zu x %zu x %zu exceeds the limit of "
                            "%lu numbers per tensor for data held whole (kvc synth, kvc stats; kvc run makes such data "
                            "a few KV heads at a time unless KVC_DATA_STREAM=0) (got %zu)", cfg->layers, cfg->kv_heads,
                            cfg->dims.T, cfg->dims.D, CONFIG_MAX_NUMBERS, n);
        }
        return synth_data(d, cfg);
    }
    memset(d, 0, sizeof *d);
    d->L = cfg->layers;
    d->H = cfg->kv_heads;
    d->Hq = cfg->q_heads;
    d->T = cfg->dims.T;
    d->D = cfg->dims.D;
    d->N = cfg->query.n;
    d->W = cfg->observe.n;
    double **dest[CONFIG_N_FILES] = {&d->K, &d->V, &d->Q, &d->O};
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        Tensor t;
        if (!cfg->files[r].path) continue;
        if (read_values(&t, cfg, r)) {
            data_free(d);
            return -1;
        }
        *dest[r] = t.data;   /* the Data owns the values now */
    }
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

int load_save(const char *dir, SaveFormat fmt, const Data *d, const Config *cfg)
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
        if (src[r]) entries[ne++] = (SafetensorsEntry){config_file_roles[r], &t[r]};
    }

    /* the data block of files.json; file names are plain ASCII, so they need no JSON escaping */
    char *djson = NULL;
    size_t dlen = 0;
    FILE *dj = xmemstream(&djson, &dlen, "files.json");
    fputs("{\"source\": \"files\", \"files\": {", dj);
    int rc = 0, first = 1;
    for (int r = 0; r < CONFIG_N_FILES && rc == 0; r++) {
        if (!src[r]) continue;
        fprintf(dj, "%s\"%s\": ", first ? "" : ", ", config_file_roles[r]);
        first = 0;
        if (fmt == SAVE_SAFETENSORS) {
            fprintf(dj, "{\"path\": \"cache.safetensors\", \"name\": \"%s\"}", config_file_roles[r]);
        } else {
            char name[32];
            snprintf(name, sizeof name, "%s.npy", config_file_roles[r]);
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
    char *json = NULL;
    if (rc == 0 && config_files_json(&json, cfg, djson)) rc = -1;
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
    free(json);
    free(djson);
    return dirwrite_end(&w, rc);
}
