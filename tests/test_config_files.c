/* test_config_files.c: data.source "files" read in two stages -- the headers at parse time (tensor_read_info,
 * src/config/files.c), the values when the data is made (data_make, src/data/load.c) -- and a Config that
 * carries everything the later stages need (Config.canon, Config.json) so that nothing reads the config again.
 *
 * Checks: tensor_read_info gives tensor_read's shape and the stored dtype for .npy and .safetensors, refuses
 * what tensor_read refuses before the values with the same message, and accepts a file whose values are not
 * finite (tensor_read refuses it); config_parse of a files config fills the sizes from the headers and holds no
 * values; data_make reads them (twice from one Config: it no longer takes them from it), refuses a non-finite
 * value, and refuses a file whose shape changed after the config was read; config_files_json works from the
 * Config alone. Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. */
#include "config/config.h"
#include "config/expid.h"
#include "data/load.h"
#include "io/io_npy.h"
#include "io/io_safetensors.h"
#include "io/tensorio.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/kvc-test-config-files-XXXXXX";

static const char *tmp(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A (d0, d1) tensor of values 0.25 * i (or NaN at flat index nan_at, if below the count). */
static Tensor make(size_t d0, size_t d1, size_t nan_at)
{
    Tensor t = {2, {d0, d1}, xmalloc(d0 * d1 * sizeof(double))};
    for (size_t i = 0; i < d0 * d1; i++) t.data[i] = i == nan_at ? NAN : 0.25 * (double)i;
    return t;
}

/* Writes t to path in the .npy format; a NaN is written bit for bit (npy_write refuses it, so this writes the
 * file itself: version 1.0, '<f8', C order). */
static void write_npy_raw(const char *path, const Tensor *t)
{
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu, %zu), }", t->shape[0],
                     t->shape[1]);
    int pad = 64 - (10 + n + 1) % 64;
    FILE *f = fopen(path, "wb");
    unsigned short len = (unsigned short)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(len & 0xff, f);
    fputc(len >> 8, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(t->data, sizeof(double), tensor_count(t), f);   /* x86: little-endian */
    fclose(f);
}

static void test_info(void)
{
    Tensor k = make(6, 4, (size_t)-1), got;
    TensorInfo info;
    npy_write(tmp("k.npy"), &k);
    int rc = tensor_read_info(&info, tmp("k.npy"), NULL, CONFIG_MAX_NUMBERS);
    check(rc == 0 && info.ndim == 2 && info.shape[0] == 6 && info.shape[1] == 4 && info.shape[2] == 0 &&
              info.dtype == TENSOR_F64,
          "info_npy_shape_dtype", "rc %d ndim %zu shape (%zu, %zu) dtype %d: %s", rc, info.ndim, info.shape[0],
          info.shape[1], (int)info.dtype, rc ? kvc_errmsg() : "");

    SafetensorsEntry e[2] = {{"keys", &k}, {"other", &k}};
    safetensors_write(tmp("c.safetensors"), e, 2, TENSOR_F32);
    rc = tensor_read_info(&info, tmp("c.safetensors"), "keys", CONFIG_MAX_NUMBERS);
    check(rc == 0 && info.ndim == 2 && info.shape[0] == 6 && info.shape[1] == 4 && info.dtype == TENSOR_F32,
          "info_safetensors_shape_dtype", "rc %d ndim %zu dtype %d: %s", rc, info.ndim, (int)info.dtype,
          rc ? kvc_errmsg() : "");

    /* the same refusals, with the same messages, as the full reader */
    char full[1024];
    rc = tensor_read(&got, tmp("c.safetensors"), "kyes", CONFIG_MAX_NUMBERS);
    snprintf(full, sizeof full, "%s", kvc_errmsg());
    int rci = tensor_read_info(&info, tmp("c.safetensors"), "kyes", CONFIG_MAX_NUMBERS);
    check(rc == -1 && rci == -1 && strcmp(full, kvc_errmsg()) == 0 && info.ndim == 0, "info_same_refusal_name",
          "read %d info %d: \"%s\" vs \"%s\"", rc, rci, full, kvc_errmsg());
    rc = tensor_read(&got, tmp("k.npy"), NULL, 23);
    snprintf(full, sizeof full, "%s", kvc_errmsg());
    rci = tensor_read_info(&info, tmp("k.npy"), NULL, 23);
    check(rc == -1 && rci == -1 && strcmp(full, kvc_errmsg()) == 0 && strstr(full, "tensor too large"),
          "info_same_refusal_limit", "read %d info %d: \"%s\" vs \"%s\"", rc, rci, full, kvc_errmsg());
    if (truncate(tmp("k.npy"), 128 + 8 * 23) == 0) {
        rc = tensor_read(&got, tmp("k.npy"), NULL, CONFIG_MAX_NUMBERS);
        snprintf(full, sizeof full, "%s", kvc_errmsg());
        rci = tensor_read_info(&info, tmp("k.npy"), NULL, CONFIG_MAX_NUMBERS);
        check(rc == -1 && rci == -1 && strcmp(full, kvc_errmsg()) == 0 && strstr(full, "truncated"),
              "info_same_refusal_truncated", "read %d info %d: \"%s\" vs \"%s\"", rc, rci, full, kvc_errmsg());
    }

    /* values are not the header's business */
    Tensor bad = make(6, 4, 17);
    write_npy_raw(tmp("nan.npy"), &bad);
    rci = tensor_read_info(&info, tmp("nan.npy"), NULL, CONFIG_MAX_NUMBERS);
    rc = tensor_read(&got, tmp("nan.npy"), NULL, CONFIG_MAX_NUMBERS);
    check(rci == 0 && info.shape[0] == 6 && rc == -1 && strstr(kvc_errmsg(), "flat index 17"),
          "info_reads_no_values", "info %d read %d: %s", rci, rc, kvc_errmsg());
    tensor_free(&bad);
    tensor_free(&k);
}

#define FILES_CONFIG(keys) \
    "{\"data\": {\"source\": \"files\", \"files\": {\"keys\": \"" keys "\", \"values\": \"v.npy\", \"queries\": " \
    "\"q.npy\"}}, \"experiments\": [{\"method\": \"quantize\", \"bits\": [4, 8]}]}"

static int parse(Config *cfg, const char *text)
{
    return config_parse(cfg, tmp("c.json"), text, strlen(text), NULL, 0);
}

static void test_two_stages(void)
{
    Tensor k = make(16, 4, (size_t)-1), q = make(3, 4, (size_t)-1);
    npy_write(tmp("k.npy"), &k);
    npy_write(tmp("v.npy"), &k);
    npy_write(tmp("q.npy"), &q);
    Config cfg;
    int rc = parse(&cfg, FILES_CONFIG("k.npy"));
    check(rc == 0 && cfg.from_files && cfg.dims.T == 16 && cfg.dims.D == 4 && cfg.query.n == 3 && cfg.n_exps == 2 &&
              cfg.files[FILE_KEYS].info.ndim == 2 && cfg.files[FILE_KEYS].info.shape[0] == 16,
          "parse_sizes_from_headers", "rc %d T %zu D %zu N %zu: %s", rc, cfg.dims.T, cfg.dims.D, cfg.query.n,
          rc ? kvc_errmsg() : "");
    if (rc) {
        config_free(&cfg);
        return;
    }
    check(cfg.canon && strstr(cfg.canon, "\"source\":\"files\"") && !strstr(cfg.canon, "experiments"),
          "config_keeps_canonical_text", "got %s", cfg.canon ? cfg.canon : "NULL");
    uint64_t ids[2];
    check(expid_all(ids, &cfg) == 0 && ids[0] != ids[1], "ids_from_config_alone", "%s", kvc_errmsg());

    Data d1, d2;
    int r1 = data_make(&d1, &cfg), r2 = r1 ? -1 : data_make(&d2, &cfg);
    check(r1 == 0 && r2 == 0 && d1.T == 16 && d1.N == 3 && d1.K[5] == 1.25 && d2.K[5] == 1.25 && d1.K != d2.K &&
              d1.Q[11] == 2.75,
          "data_make_reads_values_twice", "rc %d %d: %s", r1, r2, kvc_errmsg());
    if (r1 == 0) data_free(&d1);
    if (r2 == 0) data_free(&d2);

    /* a shape that changed after parsing */
    Tensor k2 = make(8, 4, (size_t)-1);
    npy_write(tmp("k.npy"), &k2);
    rc = data_make(&d1, &cfg);
    check(rc == -1 && strstr(kvc_errmsg(), "data.files.keys: the file changed after the config was read: its shape "
                                           "is (8, 4) now, (16, 4) then (got \"") == kvc_errmsg(),
          "data_make_shape_changed", "rc %d: %s", rc, kvc_errmsg());
    if (rc == 0) data_free(&d1);
    npy_write(tmp("k.npy"), &k);

    /* files.json from the Config alone */
    char *json = NULL;
    rc = config_files_json(&json, &cfg, "{\"source\": \"files\", \"files\": {\"keys\": \"keys.npy\"}}");
    check(rc == 0 && json && strstr(json, "\"keys\": \"keys.npy\"") && strstr(json, "\"experiments\": [") &&
              !strstr(json, "k.npy"),
          "files_json_from_config", "rc %d: %s", rc, json ? json : kvc_errmsg());
    free(json);
    config_free(&cfg);

    /* a value that is not finite: the config parses (headers only), data_make refuses */
    Tensor bad = make(16, 4, 9);
    write_npy_raw(tmp("nan.npy"), &bad);
    rc = parse(&cfg, FILES_CONFIG("nan.npy"));
    r1 = rc ? -1 : data_make(&d1, &cfg);
    check(rc == 0 && r1 == -1 && strstr(kvc_errmsg(), "nan.npy: value at flat index 9 (index [2, 1]) is not finite "
                                                      "(got nan)"),
          "nan_refused_when_data_is_made", "parse %d make %d: %s", rc, r1, kvc_errmsg());
    config_free(&cfg);
    tensor_free(&bad);
    tensor_free(&k);
    tensor_free(&k2);
    tensor_free(&q);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        check(0, "mkdtemp", "cannot create %s", dir);
        return 1;
    }
    test_info();
    test_two_stages();
    const char *names[] = {"k.npy", "v.npy", "q.npy", "nan.npy", "c.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp(names[i]));
    rmdir(dir);
    return check_failures ? 1 : 0;
}
