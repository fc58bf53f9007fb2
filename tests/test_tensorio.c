/* test_tensorio.c: unit tests of src/io/io_npy.c, src/io/io_safetensors.c, src/io/tensorio.c and src/base/half.c with
 * hand-built files in a fresh temporary directory: every header version and dtype, Fortran order, byte
 * order, and every bad case the readers must refuse (each must fail with a one-line message that names the
 * file and leaves the Tensor zeroed). Writers: round trips, atomicity (nothing left behind on failure).
 * Prints "PASS name" or "FAIL name: why" per check; exits 1 if any check failed.
 *
 * Helper modes for tests/test_tensorio_numpy.py (errors: the message on stderr, exit 2):
 *   test_tensorio --dump FILE [NAME]           "shape d0 d1 ...\n" then the values as little-endian float64
 *   test_tensorio --write-npy IN OUT [NAME]    reads IN (either format), writes OUT with npy_write
 *   test_tensorio --write-st IN OUT F32|F64 [NAME]   reads IN, writes OUT with safetensors_write (tensor "t")
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/half.h"
#include "io/io_npy.h"
#include "io/io_safetensors.h"
#include "io/tensorio.h"
#include "base/util.h"
#include "check.h"

static char dir[64];

static const char *tmp(const char *name)
{
    static char path[2][256];
    static int which;
    which ^= 1;
    snprintf(path[which], sizeof path[which], "%s/%s", dir, name);
    return path[which];
}

static void write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "test_tensorio: cannot write %s\n", path);
        exit(1);
    }
}

/* Number of entries in the temporary directory (to check that failed writes leave nothing behind). */
static int dir_entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* ---- byte builders ---- */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} Buf;

static void put(Buf *b, const void *p, size_t n)
{
    if (n == 0) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->b = realloc(b->b, b->cap);
        if (!b->b) abort();
    }
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put_le(Buf *b, uint64_t v, size_t size)
{
    for (size_t k = 0; k < size; k++) {
        unsigned char c = (unsigned char)(v >> (8 * k));
        put(b, &c, 1);
    }
}

static void put_f64(Buf *b, double x) { put_le(b, dbits(x), 8); }

static void put_f32(Buf *b, float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    put_le(b, u, 4);
}

/* A .npy preamble + dict, padded with spaces and '\n' to 64 bytes as numpy does (pad = 0: no padding, no
 * newline), for version major.0 (major 1: u16 length, else u32). */
static void npy_head(Buf *b, int major, const char *dict, int pad)
{
    size_t pre = major == 1 ? 10 : 12, len = strlen(dict), total = len;
    if (pad) total = len + 1 + (64 - (pre + len + 1) % 64) % 64;
    put(b, "\x93NUMPY", 6);
    unsigned char v[2] = {(unsigned char)major, 0};
    put(b, v, 2);
    put_le(b, total, pre - 8);
    put(b, dict, len);
    for (size_t k = len; pad && k + 1 < total; k++) put(b, " ", 1);
    if (pad) put(b, "\n", 1);
}

/* An 8-byte length + JSON header (padded with spaces to a multiple of 8). */
static void st_head(Buf *b, const char *json)
{
    size_t len = strlen(json), total = (len + 7) / 8 * 8;
    put_le(b, total, 8);
    put(b, json, len);
    for (size_t k = len; k < total; k++) put(b, " ", 1);
}

/* ---- checking helpers ---- */

static int zeroed(const Tensor *t)
{
    if (t->data || t->ndim) return 0;
    for (int k = 0; k < TENSOR_MAX_DIM; k++)
        if (t->shape[k]) return 0;
    return 1;
}

/* Reads file `path` (format by extension, tensor `tname`) and compares with the expected shape and values. */
static void expect_ok(const char *name, const char *path, const char *tname, size_t ndim, const size_t *shape,
                      const double *want)
{
    Tensor t;
    if (tensor_read(&t, path, tname, TENSOR_NO_LIMIT) < 0) {
        check(0, name, "read failed: %s", kvc_errmsg());
        return;
    }
    int ok = t.ndim == ndim;
    for (size_t k = 0; ok && k < ndim; k++) ok = t.shape[k] == shape[k];
    if (!ok) {
        check(0, name, "shape mismatch (ndim %zu, shape[0] %zu)", t.ndim, t.shape[0]);
    } else {
        size_t n = tensor_count(&t), bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (dbits(t.data[i]) != dbits(want[i])) bad = i;
        if (bad < n) check(0, name, "value %zu is %a, want %a", bad, t.data[bad], want[bad]);
        else check(1, name, NULL);
    }
    tensor_free(&t);
}

/* The read must fail with a message that starts with the path, contains `needle`, is one line, and leaves
 * the Tensor zeroed. */
static void expect_fail(const char *name, const char *path, const char *tname, const char *needle)
{
    Tensor t;
    memset(&t, 0x55, sizeof t);
    int rc = tensor_read(&t, path, tname, TENSOR_NO_LIMIT);
    const char *msg = kvc_errmsg();
    if (rc == 0) {
        check(0, name, "read succeeded (shape[0] %zu), want an error containing \"%s\"", t.shape[0], needle);
        tensor_free(&t);
    } else if (strncmp(msg, path, strlen(path)) != 0 || msg[strlen(path)] != ':') {
        check(0, name, "message does not start with the path: %s", msg);
    } else if (!strstr(msg, needle)) {
        check(0, name, "message lacks \"%s\": %s", needle, msg);
    } else if (strchr(msg, '\n')) {
        check(0, name, "message has several lines: %s", msg);
    } else if (!zeroed(&t)) {
        check(0, name, "Tensor not zeroed after failure");
    } else {
        check(1, name, NULL);
    }
    if (getenv("TENSORIO_SHOW")) fprintf(stderr, "  %s -> %s\n", name, msg);
}

static void npy_case_fail(const char *name, Buf *b, const char *needle)
{
    const char *path = tmp("case.npy");
    write_file(path, b->b, b->n);
    expect_fail(name, path, NULL, needle);
    unlink(path);
    free(b->b);
    memset(b, 0, sizeof *b);
}

static void npy_case_ok(const char *name, Buf *b, size_t ndim, const size_t *shape, const double *want)
{
    const char *path = tmp("case.npy");
    write_file(path, b->b, b->n);
    expect_ok(name, path, NULL, ndim, shape, want);
    unlink(path);
    free(b->b);
    memset(b, 0, sizeof *b);
}

static void st_case_fail(const char *name, Buf *b, const char *tname, const char *needle)
{
    const char *path = tmp("case.safetensors");
    write_file(path, b->b, b->n);
    expect_fail(name, path, tname, needle);
    unlink(path);
    free(b->b);
    memset(b, 0, sizeof *b);
}

static void st_case_ok(const char *name, Buf *b, const char *tname, size_t ndim, const size_t *shape,
                       const double *want)
{
    const char *path = tmp("case.safetensors");
    write_file(path, b->b, b->n);
    expect_ok(name, path, tname, ndim, shape, want);
    unlink(path);
    free(b->b);
    memset(b, 0, sizeof *b);
}

/* ---- half ---- */

static void test_half(void)
{
    static const struct { uint16_t h; double want; } f16[] = {
        {0x0000, 0.0}, {0x3c00, 1.0}, {0xc000, -2.0}, {0x3555, 0x1.554p-2}, {0x7bff, 65504.0},
        {0x0400, 0x1p-14}, {0x0001, 0x1p-24}, {0x03ff, 0x1.ff8p-15}, {0x8001, -0x1p-24}, {0x0200, 0x1p-15},
        {0x7c00, INFINITY}, {0xfc00, -INFINITY},
    };
    static const struct { uint16_t h; double want; } b16[] = {
        {0x3f80, 1.0}, {0xc000, -2.0}, {0x7f7f, 0x1.fep127}, {0x0080, 0x1p-126}, {0x0001, 0x1p-133},
        {0x007f, 0x1.fcp-127}, {0x8000, -0.0}, {0x7f80, INFINITY}, {0xff80, -INFINITY}, {0x3e2b, 0x1.56p-3},
    };
    int ok = 1;
    for (size_t k = 0; k < sizeof f16 / sizeof *f16; k++)
        if (dbits(half_to_double(f16[k].h)) != dbits(f16[k].want)) {
            check(0, "half_to_double_table", "0x%04x -> %a, want %a", f16[k].h, half_to_double(f16[k].h), f16[k].want);
            ok = 0;
        }
    if (ok) check(1, "half_to_double_table", NULL);
    ok = dbits(half_to_double(0x8000)) == dbits(-0.0) && isnan(half_to_double(0x7e00)) &&
         isnan(half_to_double(0xfc01)) && signbit(half_to_double(0xfe00)) &&
         dbits(half_to_double(0x7e01)) == 0x7ff8040000000000ULL; /* payload kept, as numpy's cast does */
    check(ok, "half_to_double_signed_zero_nan", "0x7e01 -> 0x%016llx", (unsigned long long)dbits(half_to_double(0x7e01)));
    ok = 1;
    for (size_t k = 0; k < sizeof b16 / sizeof *b16; k++)
        if (dbits(bf16_to_double(b16[k].h)) != dbits(b16[k].want)) {
            check(0, "bf16_to_double_table", "0x%04x -> %a, want %a", b16[k].h, bf16_to_double(b16[k].h), b16[k].want);
            ok = 0;
        }
    if (ok) check(1, "bf16_to_double_table", NULL);
    check(isnan(bf16_to_double(0x7fc0)) && isnan(bf16_to_double(0xffc1)), "bf16_to_double_nan", "not NaN");

    /* Every finite pattern against an independent formula: (-1)^s * m * 2^e. */
    int bad16 = -1, badb = -1;
    for (uint32_t h = 0; h < 65536; h++) {
        unsigned s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        if (e != 31) {
            double want = e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
            if (s) want = -want;
            if (dbits(half_to_double((uint16_t)h)) != dbits(want) && bad16 < 0) bad16 = (int)h;
        }
        e = (h >> 7) & 255, m = h & 127;
        if (e != 255) {
            double want = e ? ldexp(128 + m, (int)e - 134) : ldexp(m, -133);
            if (s) want = -want;
            if (dbits(bf16_to_double((uint16_t)h)) != dbits(want) && badb < 0) badb = (int)h;
        }
    }
    check(bad16 < 0, "half_to_double_all_finite", "first mismatch at 0x%04x", bad16);
    check(badb < 0, "bf16_to_double_all_finite", "first mismatch at 0x%04x", badb);
}

/* ---- .npy reading ---- */

static void test_npy_ok(void)
{
    Buf b = {0};
    const double v6[6] = {1.5, -2.25, 0x1p-1074, 1e300, -0.0, 3.0};
    size_t s23[2] = {2, 3}, s3[1] = {3}, s22[2] = {2, 2};

    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 1);
    for (int i = 0; i < 6; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_v1_f8", &b, 2, s23, v6);

    const double f3[3] = {1.0, -0.1f, 0x1p-149};
    npy_head(&b, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) put_f32(&b, (float)f3[i]);
    npy_case_ok("npy_v2_f4", &b, 1, s3, f3);

    const double h4[4] = {1.0, -2.0, 0x1p-24, 65504.0};
    const uint16_t hb[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    npy_head(&b, 3, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }", 1);
    for (int i = 0; i < 4; i++) put_le(&b, hb[i], 2);
    npy_case_ok("npy_v3_f2", &b, 2, s22, h4);

    npy_head(&b, 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) {
        uint64_t u = dbits(v6[i]);
        for (int k = 7; k >= 0; k--) put(&b, (unsigned char[]){(unsigned char)(u >> (8 * k))}, 1);
    }
    npy_case_ok("npy_big_endian_f8", &b, 1, s3, v6);

    npy_head(&b, 1, "{'descr': '>f2', 'fortran_order': False, 'shape': (2, 2), }", 1);
    for (int i = 0; i < 4; i++) put(&b, (unsigned char[]){(unsigned char)(hb[i] >> 8), (unsigned char)hb[i]}, 2);
    npy_case_ok("npy_big_endian_f2", &b, 2, s22, h4);

    npy_head(&b, 1, "{'descr': '|f8', 'fortran_order': False, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_native_order_bar", &b, 1, s3, v6);

    npy_head(&b, 1, "{'descr': '=f4', 'fortran_order': False, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) put_f32(&b, (float)f3[i]);
    npy_case_ok("npy_native_order_eq", &b, 1, s3, f3);

    npy_head(&b, 1, "{'descr': 'f8', 'fortran_order': False, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_no_order_mark", &b, 1, s3, v6);

    /* Keys in another order, double quotes, no trailing comma, extra spaces, no padding at all. */
    npy_head(&b, 1, "{ \"shape\" :(2,3) ,'descr':\"<f8\",\n 'fortran_order':False}", 0);
    for (int i = 0; i < 6; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_dict_any_order_no_padding", &b, 2, s23, v6);

    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3,), }", 1);
    for (int i = 0; i < 6; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_shape_trailing_comma", &b, 2, s23, v6);

    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }", 1);
    for (int i = 0; i < 6; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_python2_long_suffix", &b, 2, s23, v6);

    /* Fortran order: the file lists column by column. */
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", 1);
    const double fo[6] = {1, 4, 2, 5, 3, 6}, c23[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 6; i++) put_f64(&b, fo[i]);
    npy_case_ok("npy_fortran_2d", &b, 2, s23, c23);

    size_t s234[3] = {2, 3, 4}, s2345[4] = {2, 3, 4, 5};
    double want3[24];
    npy_head(&b, 2, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", 1);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++) put_f32(&b, (float)(100 * i + 10 * j + k));
    for (int i = 0; i < 24; i++) want3[i] = 100 * (i / 12) + 10 * (i / 4 % 3) + i % 4;
    npy_case_ok("npy_fortran_3d", &b, 3, s234, want3);

    double want4[120];
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4, 5), }", 1);
    for (int l = 0; l < 5; l++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3; j++)
                for (int i = 0; i < 2; i++) put_f64(&b, 1000 * i + 100 * j + 10 * k + l);
    for (int i = 0; i < 120; i++) want4[i] = 1000 * (i / 60) + 100 * (i / 20 % 3) + 10 * (i / 5 % 4) + i % 5;
    npy_case_ok("npy_fortran_4d", &b, 4, s2345, want4);

    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) put_f64(&b, v6[i]);
    npy_case_ok("npy_fortran_1d", &b, 1, s3, v6);

    size_t s03[2] = {0, 3};
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 3), }", 1);
    npy_case_ok("npy_empty_dimension", &b, 2, s03, v6);

    /* A big chunked read (more than one 64 KiB chunk), checking the seam. */
    size_t sbig[2] = {3000, 7};
    double *big = malloc(21000 * sizeof *big);
    npy_head(&b, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3000, 7), }", 1);
    for (int j = 0; j < 7; j++)
        for (int i = 0; i < 3000; i++) put_f32(&b, (float)(i * 7 + j));
    for (int i = 0; i < 21000; i++) big[i] = i;
    npy_case_ok("npy_fortran_multi_chunk", &b, 2, sbig, big);
    free(big);

    /* npy_fread from memory (what a fuzzer does). */
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 1);
    for (int i = 0; i < 6; i++) put_f64(&b, v6[i]);
    FILE *f = fmemopen(b.b, b.n, "rb");
    Tensor t;
    int rc = npy_fread(&t, f, "mem", TENSOR_NO_LIMIT);
    fclose(f);
    check(rc == 0 && t.ndim == 2 && t.shape[1] == 3 && dbits(t.data[2]) == dbits(v6[2]), "npy_fread_memory", "%s",
          rc ? kvc_errmsg() : "wrong values");
    tensor_free(&t);
    tensor_free(&t); /* freeing twice is safe */
    free(b.b);
}

static void test_npy_bad(void)
{
    Buf b = {0};
    put(&b, "PK\x03\x04 not numpy at all", 21);
    npy_case_fail("npy_wrong_magic", &b, "not a .npy file");
    put(&b, "", 0);
    npy_case_fail("npy_empty_file", &b, "not a .npy file: it does not start with the magic \\x93NUMPY (got an empty file)");
    put(&b, "\x93NUM", 4);
    npy_case_fail("npy_truncated_magic", &b, "truncated");
    put(&b, "\x93NUMPY\x02\x00\x10", 9);
    npy_case_fail("npy_truncated_length_field", &b, "truncated");
    put(&b, "\x93NUMPY\x04\x00\x10\x00", 10);
    npy_case_fail("npy_version_4", &b, "unsupported .npy format version (got 4.0");
    put(&b, "\x93NUMPY\x01\x01\x10\x00", 10);
    npy_case_fail("npy_version_1_1", &b, "unsupported .npy format version (got 1.1");

    /* Header length beyond the file. */
    put(&b, "\x93NUMPY\x01\x00\x00\x10{'descr': '<f8'", 25);
    npy_case_fail("npy_header_length_beyond_file", &b, "header length runs past the end of the file");
    put(&b, "\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14);
    npy_case_fail("npy_header_length_u32_beyond_file", &b, "header length runs past the end of the file");

    /* Header within the file but longer than the cap. */
    {
        size_t n = NPY_MAX_HEADER + 100;
        char *dict = malloc(n + 1);
        memset(dict, ' ', n);
        memcpy(dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }", 57);
        dict[n] = '\0';
        npy_head(&b, 2, dict, 0);
        free(dict);
        npy_case_fail("npy_header_too_long", &b, "header is too long");
    }

    static const struct { const char *name, *dict, *needle; } bad[] = {
        {"npy_dtype_i4", "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype (got '<i4'"},
        {"npy_dtype_c16", "{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype (got '<c16'"},
        {"npy_dtype_f16_quad", "{'descr': '<f16', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype"},
        {"npy_dtype_name", "{'descr': 'float64', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype"},
        {"npy_dtype_unicode", "{'descr': '<U10', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype"},
        {"npy_dtype_structured", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
         "structured"},
        {"npy_dtype_not_string", "{'descr': 8, 'fortran_order': False, 'shape': (2,), }", "expected a dtype string"},
        {"npy_shape_overflow", "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }",
         "more values than fit in memory"},
        {"npy_shape_bytes_overflow", "{'descr': '<f2', 'fortran_order': False, 'shape': (4611686018427387904,), }",
         "more values than fit in memory"},
        {"npy_shape_huge_no_overflow", "{'descr': '<f2', 'fortran_order': False, 'shape': (1099511627776, 1048576), }",
         "truncated"},
        {"npy_dim_too_large", "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
         "dimension too large"},
        {"npy_dim_negative", "{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 3), }", "negative dimension"},
        {"npy_dim_leading_zero", "{'descr': '<f8', 'fortran_order': False, 'shape': (03,), }", "leading zeros"},
        {"npy_dim_hex", "{'descr': '<f8', 'fortran_order': False, 'shape': (0x3,), }", "decimal integer"},
        {"npy_dim_float", "{'descr': '<f8', 'fortran_order': False, 'shape': (3.0,), }", "decimal integer"},
        {"npy_shape_not_tuple", "{'descr': '<f8', 'fortran_order': False, 'shape': (3), }", "one-element tuple"},
        {"npy_shape_list", "{'descr': '<f8', 'fortran_order': False, 'shape': [2, 3], }", "a tuple"},
        {"npy_shape_scalar", "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", "0-dimensional"},
        {"npy_shape_5d", "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }",
         "more than 4 dimensions (got (1, 1, 1, 1, 1))"},
        {"npy_shape_unclosed", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3 }", "',' or ')'"},
        {"npy_long_suffix_v3_is_python2_only", NULL, NULL},
        {"npy_unknown_key", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1, }",
         "unknown key at byte"},
        {"npy_duplicate_key", "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
         "appears twice"},
        {"npy_missing_key", "{'descr': '<f8', 'fortran_order': False, }", "key 'shape' is missing"},
        {"npy_fortran_not_bool", "{'descr': '<f8', 'fortran_order': true, 'shape': (2,), }", "True or False"},
        {"npy_fortran_int", "{'descr': '<f8', 'fortran_order': 0, 'shape': (2,), }", "True or False"},
        {"npy_colon_missing", "{'descr' = '<f8', 'fortran_order': False, 'shape': (2,), }", "expected ':'"},
        {"npy_unquoted_key", "{descr: '<f8', 'fortran_order': False, 'shape': (2,), }", "quoted key"},
        {"npy_no_brace", "'descr': '<f8', 'fortran_order': False, 'shape': (2,)", "expected '{'"},
        {"npy_unclosed_dict", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,)", "',' or '}'"},
        {"npy_double_comma", "{'descr': '<f8',, 'fortran_order': False, 'shape': (2,), }", "quoted key"},
        {"npy_text_after_dict", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), } x", "after the closing"},
        {"npy_empty_header", "", "expected '{'"},
        {"npy_unterminated_string", "{'descr: '<f8', 'fortran_order': False, 'shape': (2,), }", "unknown key"},
        {"npy_backslash", "{'descr': '<f\\x38', 'fortran_order': False, 'shape': (2,), }", "dtype string"},
        {"npy_non_ascii", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), \xc3\xa9}", "\\xc3\\xa9"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        if (!bad[k].dict) {
            npy_head(&b, 3, "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }", 1);
            put_f64(&b, 1.0), put_f64(&b, 2.0);
            npy_case_fail(bad[k].name, &b, "decimal integer");
            continue;
        }
        npy_head(&b, 1, bad[k].dict, 1);
        put_f64(&b, 1.0), put_f64(&b, 2.0);
        npy_case_fail(bad[k].name, &b, bad[k].needle);
    }

    /* Header with a NUL byte (the dict itself is otherwise fine). */
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 1);
    b.b[b.n - 2] = '\0';
    put_f64(&b, 1.0);
    npy_case_fail("npy_nul_in_header", &b, "\\x00");

    npy_head(&b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 100), }", 1);
    for (int i = 0; i < 999; i++) put_f32(&b, 1.0f);
    npy_case_fail("npy_truncated_data", &b, "file is truncated: header says shape (10, 100) of <f4 = 1000 values "
                                            "(4000 bytes) but only 3996 bytes of data follow the header");
    npy_head(&b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 100), }", 1);
    for (int i = 0; i < 1001; i++) put_f32(&b, 1.0f);
    npy_case_fail("npy_trailing_bytes", &b, "trailing bytes after the data");
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 1);
    put_f64(&b, 1.0), put(&b, "\n", 1);
    npy_case_fail("npy_one_trailing_byte", &b, "got 1 extra bytes");

    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 1);
    for (int i = 0; i < 6; i++) put_f64(&b, i == 4 ? NAN : 1.0);
    npy_case_fail("npy_nan_f8", &b, "value at flat index 4 (index [1, 1]) is not finite (got nan)");
    npy_head(&b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 1);
    for (int i = 0; i < 3; i++) put_f32(&b, i == 2 ? INFINITY : 1.0f);
    npy_case_fail("npy_inf_f4", &b, "flat index 2 (index [2]) is not finite (got inf)");
    npy_head(&b, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", 1);
    put_le(&b, 0xfc00, 2), put_le(&b, 0x7e00, 2);
    npy_case_fail("npy_neg_inf_f2", &b, "flat index 0 (index [0]) is not finite (got -inf)");
    /* Fortran order: the index is reported in C order. File position 1 is [1, 0] = flat 3. */
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", 1);
    for (int i = 0; i < 6; i++) put_f64(&b, i == 1 ? NAN : 1.0);
    npy_case_fail("npy_nan_fortran_index", &b, "flat index 3 (index [1, 0])");

    expect_fail("npy_missing_file", tmp("nope.npy"), NULL, "cannot open (got No such file or directory)");
    expect_fail("npy_directory", dir, NULL, "not a regular file (got a directory)");
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 1);
    put_f64(&b, 1.0);
    write_file(tmp("named.npy"), b.b, b.n);
    free(b.b);
    expect_fail("npy_with_tensor_name", tmp("named.npy"), "k", "tensor names are for .safetensors");
    unlink(tmp("named.npy"));
}

/* ---- .safetensors reading ---- */

static void test_st_ok(void)
{
    Buf b = {0};
    size_t s23[2] = {2, 3}, s3[1] = {3}, s22[2] = {2, 2}, s2[1] = {2};
    const double v6[6] = {1.5, -2.25, 0x1p-1074, 1e300, -0.0, 3.0};

    st_head(&b, "{\"x\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,48]}}");
    for (int i = 0; i < 6; i++) put_f64(&b, v6[i]);
    st_case_ok("st_f64_only_tensor", &b, NULL, 2, s23, v6);

    const double f3[3] = {1.0, -0.1f, 0x1p-149};
    st_head(&b, "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}");
    for (int i = 0; i < 3; i++) put_f32(&b, (float)f3[i]);
    st_case_ok("st_f32_with_metadata", &b, "x", 1, s3, f3);

    const double h4[4] = {1.0, -2.0, 0x1p-24, 65504.0};
    st_head(&b, "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}");
    put_le(&b, 0x3c00, 2), put_le(&b, 0xc000, 2), put_le(&b, 0x0001, 2), put_le(&b, 0x7bff, 2);
    st_case_ok("st_f16", &b, "h", 2, s22, h4);

    const double bf4[4] = {1.0, -2.0, 0x1p-133, 0x1.fep127};
    st_head(&b, "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}");
    put_le(&b, 0x3f80, 2), put_le(&b, 0xc000, 2), put_le(&b, 0x0001, 2), put_le(&b, 0x7f7f, 2);
    st_case_ok("st_bf16", &b, NULL, 2, s22, bf4);

    /* Several tensors listed out of order, an integer tensor never read: the buffer is their data back to back. */
    const char *multi = "{\"v\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[16,32]},"
                        "\"k\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                        "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[32,40]}}";
    const double kk[2] = {1, 2}, vv[2] = {3, 4};
    st_head(&b, multi);
    for (int i = 1; i <= 5; i++) put_f64(&b, i);
    st_case_ok("st_choose_k", &b, "k", 1, s2, kk);
    st_head(&b, multi);
    for (int i = 1; i <= 5; i++) put_f64(&b, i);
    st_case_ok("st_choose_v_unordered", &b, "v", 1, s2, vv);
    /* the format forbids overlaps, holes and unindexed bytes (once allowed here): each names the tensors */
    st_head(&b, "{\"v\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]},"
                "\"k\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}");
    for (int i = 1; i <= 3; i++) put_f64(&b, i);
    st_case_fail("st_overlapping_offsets", &b, "k", "tensors \"k\" and \"v\" overlap");
    st_head(&b, "{\"k\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]}}");
    for (int i = 1; i <= 4; i++) put_f64(&b, i);
    st_case_fail("st_hole_between_tensors", &b, "k", "8 bytes between tensors \"k\" and \"ids\"");
    st_head(&b, "{\"k\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]}}");
    for (int i = 1; i <= 3; i++) put_f64(&b, i);
    st_case_fail("st_hole_before_first", &b, NULL, "8 bytes of the data buffer before tensor \"k\"");
    st_head(&b, "{\"k\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}");
    for (int i = 1; i <= 3; i++) put_f64(&b, i);
    st_case_fail("st_unindexed_trailing_bytes", &b, NULL, "8 bytes at the end of the data buffer, after tensor \"k\"");
    st_head(&b, "{\"k\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},\"x\":5}");
    for (int i = 1; i <= 2; i++) put_f64(&b, i);
    st_case_fail("st_other_entry_without_offsets", &b, "k", "tensor \"x\": entry must be an object");

    size_t s1111[4] = {1, 1, 1, 1};
    st_head(&b, "{\"x\":{\"data_offsets\":[0,8],\"shape\":[1,1,1,1],\"dtype\":\"F64\"}}\n\t ");
    put_f64(&b, 42.0);
    const double v42[1] = {42.0};
    st_case_ok("st_4d_keys_any_order_trailing_ws", &b, NULL, 4, s1111, v42);

    size_t s05[2] = {0, 5};
    st_head(&b, "{\"x\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]}}");
    st_case_ok("st_empty_tensor", &b, NULL, 2, s05, v6);

    st_head(&b, "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}");
    put_f64(&b, 1.0), put_f64(&b, 2.0);
    FILE *f = fmemopen(b.b, b.n, "rb");
    Tensor t;
    int rc = safetensors_fread(&t, f, "mem", "x", TENSOR_NO_LIMIT);
    fclose(f);
    check(rc == 0 && t.shape[0] == 2 && t.data[1] == 2.0, "st_fread_memory", "%s", rc ? kvc_errmsg() : "wrong values");
    tensor_free(&t);
    free(b.b);
}

static void test_st_bad(void)
{
    Buf b = {0};
    put(&b, "\x10\x00\x00", 3);
    st_case_fail("st_shorter_than_length", &b, NULL, "too short for the 8-byte");
    put_le(&b, 1000, 8), put(&b, "{}", 2);
    st_case_fail("st_header_length_beyond_file", &b, NULL, "header length runs past the end of the file");
    put_le(&b, UINT64_MAX, 8), put(&b, "{}", 2);
    st_case_fail("st_header_length_u64_max", &b, NULL, "header length runs past the end of the file");
    put_le(&b, 0, 8);
    st_case_fail("st_header_length_zero", &b, NULL, "it is empty");

    static const struct { const char *name, *json, *tname, *needle; } bad[] = {
        {"st_bad_json", "{\"x\":{\"dtype\":\"F64\",,}}", NULL, "not valid JSON at byte"},
        {"st_json_cut", "{\"x\":{\"dtype\":\"F64\"", NULL, "not valid JSON"},
        {"st_json_trailing_garbage", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}} x", NULL,
         "not valid JSON at byte"},
        {"st_root_array", "[1, 2]", NULL, "must be a JSON object (got [1,2])"},
        {"st_no_tensors", "{}", NULL, "holds no tensors"},
        {"st_only_metadata", "{\"__metadata__\":{}}", NULL, "only __metadata__"},
        {"st_metadata_not_object", "{\"__metadata__\":3,\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
         "x", "\"__metadata__\" must be an object"},
        {"st_offsets_outside_buffer", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]}}", NULL,
         "run past the end of the data buffer, which holds 16 bytes (got [8,24])"},
        {"st_offsets_reversed", "{\"x\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[16,0]}}", NULL,
         "begin after they end"},
        {"st_offsets_three", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8,16]}}", NULL,
         "must be [begin, end]"},
        {"st_offsets_negative", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[-8,8]}}", NULL,
         "must be [begin, end]"},
        {"st_offsets_huge", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,1e30]}}", NULL,
         "must be [begin, end]"},
        {"st_size_mismatch", "{\"x\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,16]}}", NULL,
         "size mismatch: shape (3,) of F64 = 3 values needs 24 bytes but data_offsets span 16"},
        {"st_unknown_dtype", "{\"x\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}", NULL,
         "unsupported dtype (got \"I32\""},
        {"st_dtype_f8_e4m3", "{\"x\":{\"dtype\":\"F8_E4M3\",\"shape\":[16],\"data_offsets\":[0,16]}}", NULL,
         "unsupported dtype"},
        {"st_dtype_not_string", "{\"x\":{\"dtype\":64,\"shape\":[2],\"data_offsets\":[0,16]}}", NULL,
         "unsupported dtype (got 64"},
        {"st_shape_negative", "{\"x\":{\"dtype\":\"F64\",\"shape\":[-2],\"data_offsets\":[0,16]}}", NULL,
         "shape must hold integers"},
        {"st_shape_fraction", "{\"x\":{\"dtype\":\"F64\",\"shape\":[1.5],\"data_offsets\":[0,16]}}", NULL,
         "shape must hold integers"},
        {"st_shape_string", "{\"x\":{\"dtype\":\"F64\",\"shape\":\"2\",\"data_offsets\":[0,16]}}", NULL,
         "shape must be a list"},
        {"st_shape_scalar", "{\"x\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", NULL, "0-dimensional"},
        {"st_shape_5d", "{\"x\":{\"dtype\":\"F64\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,16]}}", NULL,
         "more than 4 dimensions"},
        {"st_shape_overflow", "{\"x\":{\"dtype\":\"F64\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,16]}}",
         NULL, "more values than fit in memory"},
        {"st_shape_beyond_2_53", "{\"x\":{\"dtype\":\"F64\",\"shape\":[18014398509481984],\"data_offsets\":[0,16]}}",
         NULL, "shape must hold integers 0..2^53"},
        {"st_unknown_key", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16],\"stride\":[1]}}", NULL,
         "unknown key (got \"stride\""},
        {"st_missing_key", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2]}}", NULL, "got no \"data_offsets\""},
        {"st_duplicate_entry_key", "{\"x\":{\"dtype\":\"F64\",\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
         NULL, "key appears twice"},
        {"st_entry_not_object", "{\"x\":[1,2]}", NULL, "entry must be an object"},
        {"st_duplicate_tensor", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                                "\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", "x",
         "tensor name appears twice in the header (got \"x\")"},
        {"st_missing_name_suggest", "{\"keys\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                                    "\"values\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", "key",
         "no tensor named \"key\"; did you mean \"keys\"? (got \"key\"; available: \"keys\", \"values\")"},
        {"st_missing_name_far", "{\"keys\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", "query",
         "no tensor named \"query\" (got \"query\"; available: \"keys\")"},
        {"st_no_name_several", "{\"b\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                               "\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", NULL,
         "holds 2 tensors; choose one by name (got none; available: \"a\", \"b\")"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        st_head(&b, bad[k].json);
        put_f64(&b, 1.0), put_f64(&b, 2.0);
        st_case_fail(bad[k].name, &b, bad[k].tname, bad[k].needle);
    }

    put_le(&b, 8, 8), put(&b, "{\"a\":\0}   ", 8), put_f64(&b, 1.0);
    st_case_fail("st_nul_in_header", &b, NULL, "NUL byte at byte 5");
    st_head(&b, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}");
    put_f32(&b, 1), put_f32(&b, 2), put_f32(&b, 3), put_f32(&b, NAN);
    st_case_fail("st_nan", &b, NULL, "value at flat index 3 (index [1, 1]) is not finite (got nan)");
    st_head(&b, "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}");
    put_le(&b, 0x3f80, 2), put_le(&b, 0xff80, 2);
    st_case_fail("st_bf16_neg_inf", &b, NULL, "flat index 1 (index [1]) is not finite (got -inf)");
    expect_fail("st_missing_file", tmp("nope.safetensors"), NULL, "cannot open");
}

/* ---- tensor_read: format by extension, else by content ---- */

static void test_dispatch(void)
{
    Buf b = {0};
    size_t s2[1] = {2};
    const double v2[2] = {1.0, 2.0};
    npy_head(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 1);
    put_f64(&b, 1.0), put_f64(&b, 2.0);
    write_file(tmp("npy_content.bin"), b.b, b.n);
    expect_ok("dispatch_sniff_npy", tmp("npy_content.bin"), NULL, 1, s2, v2);
    write_file(tmp("npy_content.safetensors"), b.b, b.n);
    expect_fail("dispatch_extension_wins", tmp("npy_content.safetensors"), NULL, "header length runs past the end");
    unlink(tmp("npy_content.bin"));
    unlink(tmp("npy_content.safetensors"));
    free(b.b);
    memset(&b, 0, sizeof b);
    st_head(&b, "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}");
    put_f64(&b, 1.0), put_f64(&b, 2.0);
    write_file(tmp("st_content"), b.b, b.n);
    expect_ok("dispatch_sniff_safetensors", tmp("st_content"), "x", 1, s2, v2);
    unlink(tmp("st_content"));
    free(b.b);
    expect_fail("dispatch_missing_file", tmp("nothing.bin"), NULL, "cannot open");

    /* max_values: refused before allocating, for both formats; exactly the limit is fine. */
    double d6[6] = {1, 2, 3, 4, 5, 6};
    Tensor t6 = {2, {2, 3}, d6}, t;
    SafetensorsEntry e = {"x", &t6};
    int ok = npy_write(tmp("l.npy"), &t6) == 0 && safetensors_write(tmp("l.safetensors"), &e, 1, TENSOR_F64) == 0;
    for (int k = 0; ok && k < 2; k++) {
        const char *path = tmp(k ? "l.safetensors" : "l.npy");
        int rc = tensor_read(&t, path, NULL, 5);
        ok = rc < 0 && zeroed(&t) && strstr(kvc_errmsg(), "tensor too large: shape (2, 3) has 6 values, more than the 5 "
                                                        "accepted");
        if (ok) ok = tensor_read(&t, path, NULL, 6) == 0 && t.data[5] == 6.0;
        tensor_free(&t);
    }
    check(ok, "max_values_limit", "%s", kvc_errmsg());
    unlink(tmp("l.npy"));
    unlink(tmp("l.safetensors"));
}

/* ---- writers ---- */

static void test_writers(void)
{
    double d6[6] = {1.0, -0.1, 0x1p-1074, 1e300, -0.0, 1.0 / 3};
    Tensor t = {2, {2, 3}, d6};
    const char *p = tmp("w.npy");
    int rc = npy_write(p, &t);
    check(rc == 0, "npy_write_ok", "%s", kvc_errmsg());
    expect_ok("npy_write_round_trip", p, NULL, 2, t.shape, d6);

    /* The exact bytes np.save writes for np.zeros((2, 3)) headers: 128 bytes, 21 - len("2") growth spaces. */
    FILE *f = fopen(p, "rb");
    char head[128];
    struct stat st;
    int ok = f && fread(head, 1, 128, f) == 128 && stat(p, &st) == 0 && st.st_size == 128 + 48;
    if (f) fclose(f);
    static const char want[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
    size_t wl = sizeof want - 1;
    ok = ok && memcmp(head, want, wl) == 0 && head[127] == '\n';
    for (size_t k = wl; ok && k < 127; k++) ok = head[k] == ' ';
    check(ok, "npy_write_header_bytes", "header differs from np.save's");

    /* Overwrite an existing file; 1-D and 4-D shapes. */
    Tensor t1 = {1, {6}, d6};
    check(npy_write(p, &t1) == 0, "npy_write_overwrite", "%s", kvc_errmsg());
    expect_ok("npy_write_1d_round_trip", p, NULL, 1, t1.shape, d6);
    Tensor t4 = {4, {1, 2, 1, 3}, d6};
    check(npy_write(p, &t4) == 0, "npy_write_4d", "%s", kvc_errmsg());
    expect_ok("npy_write_4d_round_trip", p, NULL, 4, t4.shape, d6);
    unlink(p);

    /* Failures leave nothing behind. */
    int before = dir_entries();
    d6[5] = NAN;
    rc = npy_write(p, &t);
    check(rc < 0 && strstr(kvc_errmsg(), "not finite at flat index 5") && dir_entries() == before,
          "npy_write_refuses_nan", "rc %d, %d entries (was %d): %s", rc, dir_entries(), before, kvc_errmsg());
    d6[5] = 1.0 / 3;
    rc = npy_write(tmp("no/such/dir.npy"), &t);
    check(rc < 0 && strstr(kvc_errmsg(), "cannot create") && dir_entries() == before, "npy_write_missing_dir", "%s",
          kvc_errmsg());
    Tensor t0 = {0, {0}, d6};
    check(npy_write(p, &t0) < 0 && dir_entries() == before, "npy_write_refuses_0d", "%s", kvc_errmsg());
    mkdir(tmp("sub"), 0700);
    rc = npy_write(tmp("sub"), &t); /* rename onto a directory fails; the temporary must go */
    check(rc < 0 && dir_entries() == before + 1, "npy_write_onto_directory", "rc %d, %d entries: %s", rc,
          dir_entries(), kvc_errmsg());
    rmdir(tmp("sub"));

    /* safetensors_write: two tensors, F64 and F32, read back by name. */
    double k4[4] = {1, 2, 3, 4}, q2[2] = {0.1, -7.5};
    Tensor tk = {2, {2, 2}, k4}, tq = {1, {2}, q2};
    SafetensorsEntry e[2] = {{"k", &tk}, {"q\"uoted\\", &tq}};
    const char *s = tmp("w.safetensors");
    check(safetensors_write(s, e, 2, TENSOR_F64) == 0, "st_write_f64", "%s", kvc_errmsg());
    expect_ok("st_write_f64_read_k", s, "k", 2, tk.shape, k4);
    expect_ok("st_write_f64_read_escaped_name", s, "q\"uoted\\", 1, tq.shape, q2);
    check(safetensors_write(s, e, 2, TENSOR_F32) == 0, "st_write_f32", "%s", kvc_errmsg());
    double q2f[2] = {(float)0.1, -7.5};
    expect_ok("st_write_f32_read_q", s, "q\"uoted\\", 1, tq.shape, q2f);
    f = fopen(s, "rb");
    unsigned char len8[8];
    ok = f && fread(len8, 1, 8, f) == 8 && len8[0] % 8 == 0;
    if (f) fclose(f);
    check(ok, "st_write_header_padded_to_8", "header length %u", len8[0]);
    unlink(s);

    before = dir_entries();
    double big[1] = {1e300};
    Tensor tb = {1, {1}, big};
    SafetensorsEntry eb[2] = {{"k", &tk}, {"big", &tb}};
    rc = safetensors_write(s, eb, 2, TENSOR_F32);
    check(rc < 0 && strstr(kvc_errmsg(), "does not fit in float32") && dir_entries() == before,
          "st_write_f32_overflow_leaves_nothing", "rc %d: %s", rc, kvc_errmsg());
    SafetensorsEntry ed[2] = {{"k", &tk}, {"k", &tq}};
    check(safetensors_write(s, ed, 2, TENSOR_F64) < 0 && strstr(kvc_errmsg(), "given twice") &&
              dir_entries() == before, "st_write_duplicate_name", "%s", kvc_errmsg());
    SafetensorsEntry em[1] = {{"__metadata__", &tk}};
    check(safetensors_write(s, em, 1, TENSOR_F64) < 0 && dir_entries() == before, "st_write_metadata_name", "%s",
          kvc_errmsg());
    check(safetensors_write(s, e, 2, TENSOR_F16) < 0, "st_write_f16_refused", "%s", kvc_errmsg());
}

/* ---- helper modes ---- */

static int dump(const char *path, const char *name)
{
    Tensor t;
    if (tensor_read(&t, path, name, TENSOR_NO_LIMIT) < 0) {
        fprintf(stderr, "%s\n", kvc_errmsg());
        return 2;
    }
    printf("shape");
    for (size_t k = 0; k < t.ndim; k++) printf(" %zu", t.shape[k]);
    printf("\n");
    size_t n = tensor_count(&t);
    for (size_t i = 0; i < n; i++) {
        unsigned char b[8];
        uint64_t u = dbits(t.data[i]);
        for (int k = 0; k < 8; k++) b[k] = (unsigned char)(u >> (8 * k));
        fwrite(b, 1, 8, stdout);
    }
    tensor_free(&t);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

static int convert(const char *in, const char *out, const char *dtype, const char *name)
{
    Tensor t;
    int rc;
    if (tensor_read(&t, in, name, TENSOR_NO_LIMIT) < 0) {
        fprintf(stderr, "%s\n", kvc_errmsg());
        return 2;
    }
    if (!dtype) {
        rc = npy_write(out, &t);
    } else {
        SafetensorsEntry e = {"t", &t};
        rc = safetensors_write(out, &e, 1, !strcmp(dtype, "F32") ? TENSOR_F32 : TENSOR_F64);
    }
    tensor_free(&t);
    if (rc < 0) fprintf(stderr, "%s\n", kvc_errmsg());
    return rc < 0 ? 2 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "--dump")) return dump(argv[2], argc == 4 ? argv[3] : NULL);
    if (argc >= 4 && argc <= 5 && !strcmp(argv[1], "--write-npy"))
        return convert(argv[2], argv[3], NULL, argc == 5 ? argv[4] : NULL);
    if (argc >= 5 && argc <= 6 && !strcmp(argv[1], "--write-st") &&
        (!strcmp(argv[4], "F32") || !strcmp(argv[4], "F64")))
        return convert(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : NULL);
    if (argc != 1) {
        fprintf(stderr, "usage: test_tensorio [--dump FILE [NAME] | --write-npy IN OUT [NAME] | "
                        "--write-st IN OUT F32|F64 [NAME]]\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "/tmp/kvc_tensorio_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("test_tensorio: mkdtemp");
        return 1;
    }
    test_half();
    test_npy_ok();
    test_npy_bad();
    test_st_ok();
    test_st_bad();
    test_dispatch();
    test_writers();
    int left = dir_entries();
    check(left == 0, "no_files_left_behind", "%d entries left in %s", left, dir);
    if (rmdir(dir) != 0) fprintf(stderr, "test_tensorio: could not remove %s\n", dir);
    return check_failures ? 1 : 0;
}
