/* tensorio: Tensor ownership, format dispatch, and the machinery io_npy.c and io_safetensors.c share:
 * file size, overflow-checked shapes, chunked decoding (byte order, Fortran order, finiteness) and atomic
 * output. It knows no file format itself. */
#define _FILE_OFFSET_BITS 64
#include "io/tensorio.h"

#include "base/half.h"
#include "io/io_npy.h"
#include "io/io_safetensors.h"
#include "base/fileio.h"
#include "base/util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define CHUNK 65536 /* bytes decoded or encoded per read/write call */

void tensor_free(Tensor *t)
{
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

size_t tensor_count(const Tensor *t)
{
    size_t n = 1;
    for (size_t k = 0; k < t->ndim; k++) n *= t->shape[k];
    return n;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* Opens path and tells which reader it needs: .npy by the name or, for a name that is neither .npy nor
 * .safetensors, by the magic; a tensor name for a .npy file is an error. 0 or -1 with kvc_fail set. */
static int open_tensor_file(FILE **f, int *npy, const char *path, const char *name)
{
    uint64_t size;
    *npy = ends_with(path, ".npy");
    if (tensorio_open(f, &size, path) < 0) return -1;
    if (!*npy && !ends_with(path, ".safetensors")) {
        unsigned char magic[6] = {0};
        *npy = fread(magic, 1, sizeof magic, *f) == sizeof magic && memcmp(magic, "\x93NUMPY", 6) == 0;
    }
    if (*npy && name) {
        fclose(*f);
        *f = NULL;
        return kvc_fail("%s: a .npy file holds one unnamed tensor; tensor names are for .safetensors files "
                        "(got name \"%s\")", path, name);
    }
    return 0;
}

int tensor_read(Tensor *out, const char *path, const char *name, size_t max_values)
{
    FILE *f;
    int npy;
    memset(out, 0, sizeof *out);
    if (open_tensor_file(&f, &npy, path, name) < 0) return -1;
    int rc = npy ? npy_fread(out, f, path, max_values) : safetensors_fread(out, f, path, name, max_values);
    fclose(f);
    return rc;
}

int tensor_read_info(TensorInfo *out, const char *path, const char *name, size_t max_values)
{
    FILE *f;
    int npy;
    memset(out, 0, sizeof *out);
    if (open_tensor_file(&f, &npy, path, name) < 0) return -1;
    int rc = npy ? npy_fread_info(out, f, path, max_values) : safetensors_fread_info(out, f, path, name, max_values);
    fclose(f);
    return rc;
}

size_t tensorio_dtype_size(TensorDtype dt)
{
    switch (dt) {
    case TENSOR_F16:
    case TENSOR_BF16: return 2;
    case TENSOR_F32: return 4;
    case TENSOR_F64: return 8;
    }
    assert(dt == TENSOR_F64 && "unknown TensorDtype");
    return 8;
}

int tensorio_open(FILE **f, uint64_t *size, const char *path)
{
    struct stat st;
    int fd;
    *f = NULL;
    if (!path[0]) return kvc_fail("\"\": cannot open: the file name is empty (got \"\")");
    /* non-blocking open, fstat, regular files only: a FIFO is refused instead of waiting for a writer */
    if (fileio_open_regular(path, &fd) < 0) return -1;
    if (fstat(fd, &st) != 0 || st.st_size < 0) {
        int e = errno;
        close(fd);
        return kvc_fail("%s: cannot stat (got %s)", path, strerror(e));
    }
    *f = fdopen(fd, "rb");
    if (!*f) {
        int e = errno;
        close(fd);
        return kvc_fail("%s: cannot open (got %s)", path, strerror(e));
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

int tensorio_stream_size(FILE *f, const char *where, uint64_t *size)
{
    off_t end;
    if (fseeko(f, 0, SEEK_END) != 0 || (end = ftello(f)) < 0 || fseeko(f, 0, SEEK_SET) != 0)
        return kvc_fail("%s: cannot determine the file size (got %s)", where, strerror(errno));
    *size = (uint64_t)end;
    return 0;
}

int tensorio_read_exact(FILE *f, void *buf, size_t n, const char *where, const char *what)
{
    size_t got = fread(buf, 1, n, f);
    if (got == n) return 0;
    if (ferror(f)) return kvc_fail("%s: read error in %s (got %s)", where, what, strerror(errno));
    return kvc_fail("%s: file ended early while reading %s (got %zu of %zu bytes)", where, what, got, n);
}

void tensorio_shape_str(char *buf, size_t cap, const size_t *shape, size_t ndim)
{
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf, cap, "(");
    for (size_t k = 0; k < ndim && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, k ? ", %zu" : "%zu", shape[k]);
    if (len < cap) snprintf(buf + len, cap - len, ndim == 1 ? ",)" : ")");
}

int tensorio_shape_bytes(const size_t *shape, size_t ndim, size_t itemsize, const char *where, size_t *count,
                         size_t *bytes)
{
    size_t n = 1, b, mem;
    for (size_t k = 0; k < ndim; k++)
        if (size_mul(n, shape[k], &n) < 0) goto overflow;
    if (size_mul(n, itemsize, &b) < 0 || size_mul(n, sizeof(double), &mem) < 0) goto overflow;
    *count = n;
    *bytes = b;
    return 0;
overflow:;
    char s[128];
    tensorio_shape_str(s, sizeof s, shape, ndim);
    return kvc_fail("%s: shape has more values than fit in memory: the product overflows %zu bits (got %s)", where,
                    sizeof(size_t) * 8, s);
}

/* ---- decoding ---- */

static uint64_t load_le(const unsigned char *p, size_t size, int big_endian)
{
    uint64_t u = 0;
    for (size_t i = 0; i < size; i++) u |= (uint64_t)p[big_endian ? size - 1 - i : i] << (8 * i);
    return u;
}

static double decode_one(const unsigned char *p, TensorDtype dt, int big_endian)
{
    switch (dt) {
    case TENSOR_F16: return half_to_double((uint16_t)load_le(p, 2, big_endian));
    case TENSOR_BF16: return bf16_to_double((uint16_t)load_le(p, 2, big_endian));
    case TENSOR_F32: {
        uint32_t u = (uint32_t)load_le(p, 4, big_endian);
        float x;
        memcpy(&x, &u, sizeof x);
        return (double)x;
    }
    case TENSOR_F64: {
        uint64_t u = load_le(p, 8, big_endian);
        double x;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    }
    return 0;
}

static int check_finite(const Tensor *t, size_t n, const char *where)
{
    for (size_t i = 0; i < n; i++) {
        double x = t->data[i];
        if (isfinite(x)) continue;
        size_t idx[TENSOR_MAX_DIM], rest = i;
        for (size_t k = t->ndim; k-- > 0;) {
            idx[k] = rest % t->shape[k];
            rest /= t->shape[k];
        }
        char s[128];
        size_t len = 0;
        for (size_t k = 0; k < t->ndim; k++)
            len += (size_t)snprintf(s + len, sizeof s - len, k ? ", %zu" : "%zu", idx[k]);
        return kvc_fail("%s: value at flat index %zu (index [%s]) is not finite (got %s)", where, i, s,
                        isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
    }
    return 0;
}

int tensorio_check_count(const size_t *shape, size_t ndim, const char *where, size_t max_values)
{
    size_t n = 1;
    for (size_t k = 0; k < ndim; k++) n *= shape[k];   /* validated by tensorio_shape_bytes */
    if (n <= max_values) return 0;
    char s[128];
    tensorio_shape_str(s, sizeof s, shape, ndim);
    return kvc_fail("%s: tensor too large: shape %s has %zu values, more than the %zu accepted (got %zu)", where, s, n,
                    max_values, n);
}

int tensorio_read_values(Tensor *t, FILE *f, const char *where, TensorDtype dt, int big_endian, int fortran,
                         size_t max_values)
{
    size_t n = tensor_count(t), is = tensorio_dtype_size(dt);
    if (tensorio_check_count(t->shape, t->ndim, where, max_values) < 0) return -1;
    size_t per = CHUNK / is, done = 0;
    size_t idx[TENSOR_MAX_DIM] = {0}, cstride[TENSOR_MAX_DIM], dest = 0;
    unsigned char *buf = xmalloc(CHUNK);
    t->data = xmalloc(n * sizeof(double)); /* n * 8 checked by tensorio_shape_bytes */
    for (size_t k = t->ndim; k-- > 0;) cstride[k] = k + 1 < t->ndim ? cstride[k + 1] * t->shape[k + 1] : 1;
    if (t->ndim <= 1) fortran = 0;
    while (done < n) {
        size_t m = n - done < per ? n - done : per;
        if (tensorio_read_exact(f, buf, m * is, where, "the tensor data") < 0) goto fail;
        if (!fortran) {
            for (size_t i = 0; i < m; i++) t->data[done + i] = decode_one(buf + i * is, dt, big_endian);
        } else {
            /* File order: index 0 varies fastest. Odometer over idx, dest = sum idx[k] * cstride[k]. */
            for (size_t i = 0; i < m; i++) {
                t->data[dest] = decode_one(buf + i * is, dt, big_endian);
                size_t k = 0;
                idx[0]++;
                dest += cstride[0];
                while (k + 1 < t->ndim && idx[k] == t->shape[k]) {
                    dest -= idx[k] * cstride[k];
                    idx[k] = 0;
                    k++;
                    idx[k]++;
                    dest += cstride[k];
                }
            }
        }
        done += m;
    }
    free(buf);
    if (check_finite(t, n, where) < 0) {
        free(t->data);
        t->data = NULL;
        return -1;
    }
    return 0;
fail:
    free(buf);
    free(t->data);
    t->data = NULL;
    return -1;
}

/* ---- output ---- */

int tensorio_create(TensorioOut *o, const char *path)
{
    size_t cap = strlen(path) + 64;
    int fd = -1;
    o->f = NULL;
    o->path = path;
    o->tmp = xmalloc(cap);
    for (unsigned n = 0; fd < 0; n++) {
        snprintf(o->tmp, cap, "%s.%ld.%u.tmp", path, (long)getpid(), n);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && (errno != EEXIST || n >= 1000)) {
            int e = errno;
            free(o->tmp);
            o->tmp = NULL;
            return kvc_fail("%s: cannot create a file beside it (got %s)", path, strerror(e));
        }
    }
    fileio_cleanup_add(o->tmp, 0);   /* removed on SIGINT, SIGTERM, SIGHUP */
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        fileio_cleanup_remove(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return kvc_fail("%s: cannot open for writing (got %s)", path, strerror(e));
    }
    return 0;
}

void tensorio_abort(TensorioOut *o)
{
    if (o->f) fclose(o->f);
    if (o->tmp) {
        unlink(o->tmp);
        fileio_cleanup_remove(o->tmp);
        free(o->tmp);
    }
    o->f = NULL;
    o->tmp = NULL;
}

int tensorio_commit(TensorioOut *o)
{
    int e = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) e = errno ? errno : EIO;
    if (!e && fsync(fileno(o->f)) != 0 && errno != EINVAL && errno != EROFS) e = errno;
    int rc = fclose(o->f);
    o->f = NULL;
    if (!e && rc != 0) e = errno;
    if (!e && rename(o->tmp, o->path) != 0) e = errno;
    if (e) unlink(o->tmp);
    fileio_cleanup_remove(o->tmp);
    if (e) {
        free(o->tmp);
        o->tmp = NULL;
        return kvc_fail("%s: write failed (got %s)", o->path, strerror(e));
    }
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

int tensorio_write_values(FILE *f, const Tensor *t, TensorDtype dt, const char *where)
{
    assert(dt == TENSOR_F32 || dt == TENSOR_F64);
    size_t n = tensor_count(t), is = tensorio_dtype_size(dt), per = CHUNK / is;
    unsigned char *buf = xmalloc(CHUNK);
    for (size_t done = 0; done < n;) {
        size_t m = n - done < per ? n - done : per;
        for (size_t i = 0; i < m; i++) {
            double x = t->data[done + i];
            uint64_t u;
            if (dt == TENSOR_F32) {
                float y = (float)x;
                uint32_t v;
                if (isfinite(x) && !isfinite(y)) {
                    free(buf);
                    char s[32];
                    fmt_double(s, sizeof s, x);
                    return kvc_fail("%s: value at flat index %zu does not fit in float32 (got %s)", where,
                                    done + i, s);
                }
                memcpy(&v, &y, sizeof v);
                u = v;
            } else {
                memcpy(&u, &x, sizeof u);
            }
            for (size_t b = 0; b < is; b++) buf[i * is + b] = (unsigned char)(u >> (8 * b));
        }
        if (fwrite(buf, is, m, f) != m) {
            int e = errno;
            free(buf);
            return kvc_fail("%s: write failed (got %s)", where, strerror(e));
        }
        done += m;
    }
    free(buf);
    return 0;
}
