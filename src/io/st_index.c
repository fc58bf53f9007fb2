/* st_index: a .safetensors file's tensor table (cJSON for the header) and float32 reads of its tensors.
 * See st_index.h for what is checked. */
#define _FILE_OFFSET_BITS 64
#include "io/st_index.h"
#include "base/jsongot.h"

#include "base/half.h"
#include "base/util.h"
#include "io/tensorio.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define MAX_HEADER 100000000u
#define MAX_INT 9007199254740992.0 /* 2^53 */
#define CHUNK 65536                /* bytes read per fread while converting */

void st_index_shape_str(char *buf, size_t cap, const size_t *shape, size_t ndim)
{
    size_t len = (size_t)snprintf(buf, cap, "(");
    for (size_t k = 0; k < ndim && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, k ? ", %zu" : "%zu", shape[k]);
    if (len < cap) snprintf(buf + len, cap - len, ndim == 1 ? ",)" : ")");
}

static size_t dtype_size(const char *d)
{
    static const struct { const char *name; size_t size; } table[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
        if (!strcmp(d, table[k].name)) return table[k].size;
    return 0;
}


static int get_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > MAX_INT ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

static int parse_entry(StEntry *e, const cJSON *j, const char *path, uint64_t data_start, uint64_t data_len)
{
    const char *name = j->string;
    char got[160];
    if (!cJSON_IsObject(j)) {
        json_got(got, sizeof got, j);
        return kvc_fail("%s: tensor \"%s\": entry must be an object with dtype, shape and data_offsets (got %s)",
                        path, name, got);
    }
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!dtype || !shape || !offs)
        return kvc_fail("%s: tensor \"%s\": key is missing (got no \"%s\")", path, name,
                        !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype) || strlen(dtype->valuestring) >= sizeof e->dtype || !dtype->valuestring[0]) {
        json_got(got, sizeof got, dtype);
        return kvc_fail("%s: tensor \"%s\": dtype must be a short string such as \"F32\" (got %s)", path, name, got);
    }
    e->name = xstrdup(name);
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype->valuestring);
    e->itemsize = dtype_size(e->dtype);

    json_got(got, sizeof got, shape);
    int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (nd < 0 || nd > ST_INDEX_MAX_DIM)
        return kvc_fail("%s: tensor \"%s\": shape must be a list of at most %d integers (got %s)", path, name,
                        ST_INDEX_MAX_DIM, got);
    e->ndim = (size_t)nd;
    e->count = 1;
    size_t k = 0;
    for (const cJSON *it = shape->child; it; it = it->next, k++) {
        uint64_t d;
        if (get_uint(it, &d) < 0 || d > SIZE_MAX)
            return kvc_fail("%s: tensor \"%s\": shape must hold integers 0..2^53 (got %s)", path, name, got);
        e->shape[k] = (size_t)d;
        if (size_mul(e->count, e->shape[k], &e->count) < 0)
            return kvc_fail("%s: tensor \"%s\": shape has more values than fit in memory (got %s)", path, name, got);
    }
    uint64_t begin, end;
    json_got(got, sizeof got, offs);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || get_uint(offs->child, &begin) < 0 ||
        get_uint(offs->child->next, &end) < 0)
        return kvc_fail("%s: tensor \"%s\": data_offsets must be [begin, end], integers 0..2^53 (got %s)", path,
                        name, got);
    if (begin > end)
        return kvc_fail("%s: tensor \"%s\": data_offsets begin after they end (got %s)", path, name, got);
    if (end > data_len)
        return kvc_fail("%s: tensor \"%s\": data_offsets run past the end of the data buffer, which holds %llu "
                        "bytes (got %s)", path, name, (unsigned long long)data_len, got);
    e->offset = data_start + begin;
    e->bytes = end - begin;
    size_t need;
    if (e->itemsize && (size_mul(e->count, e->itemsize, &need) < 0 || (uint64_t)need != e->bytes)) {
        char s[128];
        st_index_shape_str(s, sizeof s, e->shape, e->ndim);
        return kvc_fail("%s: tensor \"%s\": size mismatch: shape %s of %s needs %zu x %zu bytes but data_offsets "
                        "span %llu (got %s)", path, name, s, e->dtype, e->count, e->itemsize,
                        (unsigned long long)e->bytes, got);
    }
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int parse_header(StFile *f, const char *text, size_t n, uint64_t size)
{
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &stop, 0);
    if (root && stop) {
        while (stop < text + n && (*stop == ' ' || *stop == '\t' || *stop == '\n' || *stop == '\r')) stop++;
        if (stop != text + n) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kvc_fail("%s: .safetensors header is not a JSON object (got %zu bytes that do not parse as one)",
                        f->path, n);
    }
    int rc = -1;
    size_t members = (size_t)cJSON_GetArraySize(root);
    f->entries = xcalloc(members ? members : 1, sizeof *f->entries);
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) continue;
        if (parse_entry(&f->entries[f->n], it, f->path, 8 + (uint64_t)n, size - 8 - n) < 0) {
            free(f->entries[f->n].name);
            goto done;
        }
        f->n++;
    }
    if (f->n == 0) {
        kvc_fail("%s: the file holds no tensors (got a header with %zu entries)", f->path, members);
        goto done;
    }
    const char **names = xmalloc(f->n * sizeof *names);
    for (size_t k = 0; k < f->n; k++) names[k] = f->entries[k].name;
    qsort(names, f->n, sizeof *names, cmp_name);
    for (size_t k = 1; k < f->n; k++)
        if (!strcmp(names[k - 1], names[k])) {
            kvc_fail("%s: tensor name appears twice in the header (got \"%s\")", f->path, names[k]);
            free(names);
            goto done;
        }
    free(names);
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int st_index_open(StFile *f, const char *path)
{
    uint64_t size;
    memset(f, 0, sizeof *f);
    FILE *fp;
    if (tensorio_open(&fp, &size, path) < 0) return -1;
    f->path = xstrdup(path);
    f->fp = fp;
    unsigned char len8[8];
    char *text = NULL;
    if (size < 8) {
        kvc_fail("%s: file is truncated: too short for the 8-byte .safetensors header length (got %llu bytes)",
                 path, (unsigned long long)size);
        goto fail;
    }
    if (tensorio_read_exact(fp, len8, 8, path, "the header length") < 0) goto fail;
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)len8[k] << (8 * k);
    if (n > size - 8 || n > MAX_HEADER) {
        kvc_fail("%s: .safetensors header length is impossible: %llu bytes follow it and at most %u are accepted "
                 "(got %llu)", path, (unsigned long long)(size - 8), MAX_HEADER, (unsigned long long)n);
        goto fail;
    }
    text = xmalloc((size_t)n + 1);
    if (tensorio_read_exact(fp, text, (size_t)n, path, "the header") < 0) goto fail;
    text[n] = '\0';
    if (memchr(text, 0, (size_t)n)) {
        kvc_fail("%s: .safetensors header is not valid JSON: it holds a NUL byte (got \\x00)", path);
        goto fail;
    }
    if (parse_header(f, text, (size_t)n, size) < 0) goto fail;
    free(text);
    return 0;
fail:
    free(text);
    st_index_free(f);
    return -1;
}

void st_index_free(StFile *f)
{
    if (!f) return;
    for (size_t k = 0; k < f->n; k++) free(f->entries[k].name);
    free(f->entries);
    if (f->fp) fclose(f->fp);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const StEntry *st_index_find(const StFile *f, const char *name)
{
    for (size_t k = 0; k < f->n; k++)
        if (!strcmp(f->entries[k].name, name)) return &f->entries[k];
    return NULL;
}

static float decode(const unsigned char *p, int kind)
{
    if (kind == 0) { /* F32, little-endian */
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        float x;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return (float)(kind == 1 ? half_to_double(h) : bf16_to_double(h)); /* exact: both fit in float */
}

int st_index_read_f32(float *out, const StFile *f, const StEntry *e)
{
    int kind = !strcmp(e->dtype, "F32") ? 0 : !strcmp(e->dtype, "F16") ? 1 : !strcmp(e->dtype, "BF16") ? 2 : -1;
    if (kind < 0)
        return kvc_fail("%s: tensor \"%s\": unsupported dtype for weights (got \"%s\"; expected \"F32\", \"F16\" or "
                        "\"BF16\")", f->path, e->name, e->dtype);
    if (fseeko(f->fp, (off_t)e->offset, SEEK_SET) != 0)
        return kvc_fail("%s: cannot seek to tensor \"%s\" (got %s)", f->path, e->name, strerror(errno));
    unsigned char *buf = xmalloc(CHUNK);
    size_t per = CHUNK / e->itemsize, done = 0;
    char what[400];
    snprintf(what, sizeof what, "tensor \"%.300s\"", e->name);
    while (done < e->count) {
        size_t m = e->count - done < per ? e->count - done : per;
        if (tensorio_read_exact(f->fp, buf, m * e->itemsize, f->path, what) < 0) {
            free(buf);
            return -1;
        }
        for (size_t i = 0; i < m; i++) {
            float x = decode(buf + i * e->itemsize, kind);
            if (!isfinite(x)) {
                free(buf);
                return kvc_fail("%s: tensor \"%s\": value at flat index %zu is not finite (got %s)", f->path,
                                e->name, done + i, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
            }
            out[done + i] = x;
        }
        done += m;
    }
    free(buf);
    return 0;
}
