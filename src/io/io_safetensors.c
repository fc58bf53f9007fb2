/* io_safetensors: .safetensors reading (cJSON for the header, strict checks on the chosen tensor) and
 * writing. See io_safetensors.h for what is accepted. */
#define _FILE_OFFSET_BITS 64
#include "io/io_safetensors.h"
#include "base/jsongot.h"

#include "base/util.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define MAX_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact in cJSON's double */

/* ---- reading ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}


static int get_uint(const cJSON *v, size_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > MAX_INT ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    double d = v->valuedouble;
    if (d > (double)SIZE_MAX) return -1;
    *out = (size_t)d;
    return 0;
}

/* "'a', 'b', 'c'" (at most ~600 characters) and the nearest name to `want` (or NULL). */
static void list_names(char *buf, size_t cap, const char *const *names, size_t n, const char *want,
                       const char **nearest)
{
    size_t len = 0, best = (size_t)-1;
    buf[0] = '\0';
    *nearest = NULL;
    for (size_t k = 0; k < n; k++) {
        if (len + strlen(names[k]) + 40 < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\"", k ? ", " : "", names[k]);
        else if (len + 20 < cap) {
            snprintf(buf + len, cap - len, ", ... (%zu more)", n - k);
            len = cap;
        }
        if (want) {
            size_t d = edit_distance(want, names[k]);
            if (d < best) best = d, *nearest = names[k];
        }
    }
    if (*nearest && best > 3) *nearest = NULL;
}

/* The data_offsets [begin, end] of tensor entry e, checked on their own: integers, begin <= end <= data_len. */
static int entry_offsets(const char *where, const cJSON *e, uint64_t data_len, size_t *begin, size_t *end)
{
    const char *name = e->string;
    const cJSON *offsets = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "data_offsets") : NULL;
    char got[128];
    json_got(got, sizeof got, offsets);
    if (!offsets) {
        json_got(got, sizeof got, e);
        return kvc_fail("%s: tensor \"%s\": entry must be an object with dtype, shape and data_offsets (got %s)",
                        where, name, got);
    }
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || get_uint(offsets->child, begin) < 0 ||
        get_uint(offsets->child->next, end) < 0)
        return kvc_fail("%s: tensor \"%s\": data_offsets must be [begin, end], integers 0..2^53 (got %s)", where,
                        name, got);
    if (*begin > *end)
        return kvc_fail("%s: tensor \"%s\": data_offsets begin after they end (got %s)", where, name, got);
    if (*end > data_len)
        return kvc_fail("%s: tensor \"%s\": data_offsets run past the end of the data buffer, which holds %llu bytes "
                        "(got %s)", where, name, (unsigned long long)data_len, got);
    return 0;
}

typedef struct Span {
    size_t begin, end;
    const char *name;
} Span;

static int by_offsets(const void *a, const void *b)
{
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The data buffer is the tensors' data, back to back: sorted by offsets, each tensor begins where the one
 * before ends, the first at 0 and the last ends at the buffer's end (the format's rule; the reference
 * implementation refuses the rest too). Overlaps, holes and bytes no tensor indexes are refused, naming the
 * tensors. Every tensor's data_offsets are checked here, also those of tensors kvc does not read. */
static int check_layout(const char *where, const cJSON *root, uint64_t data_len)
{
    size_t n = 0, at = 0;
    for (const cJSON *it = root->child; it; it = it->next) n += strcmp(it->string, "__metadata__") != 0;
    Span *sp = xmalloc(n * sizeof *sp);
    int rc = 0;
    n = 0;
    for (const cJSON *it = root->child; it && rc == 0; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) continue;
        sp[n].name = it->string;
        rc = entry_offsets(where, it, data_len, &sp[n].begin, &sp[n].end);
        n++;
    }
    if (rc == 0) qsort(sp, n, sizeof *sp, by_offsets);
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (sp[k].begin < at)
            rc = kvc_fail("%s: tensors \"%s\" and \"%s\" overlap in the data buffer; the format forbids it (got "
                          "[%zu, %zu] and [%zu, %zu])", where, sp[k - 1].name, sp[k].name, sp[k - 1].begin,
                          sp[k - 1].end, sp[k].begin, sp[k].end);
        else if (sp[k].begin > at && k == 0)
            rc = kvc_fail("%s: %zu bytes of the data buffer before tensor \"%s\" belong to no tensor; the format "
                          "forbids holes (got data_offsets [%zu, %zu])", where, sp[k].begin, sp[k].name, sp[k].begin,
                          sp[k].end);
        else if (sp[k].begin > at)
            rc = kvc_fail("%s: %zu bytes between tensors \"%s\" and \"%s\" belong to no tensor; the format forbids "
                          "holes (got [%zu, %zu] and [%zu, %zu])", where, sp[k].begin - at, sp[k - 1].name, sp[k].name,
                          sp[k - 1].begin, sp[k - 1].end, sp[k].begin, sp[k].end);
        at = sp[k].end;
    }
    if (rc == 0 && at != data_len)
        rc = kvc_fail("%s: %llu bytes at the end of the data buffer, after tensor \"%s\", belong to no tensor; the "
                      "format forbids them (got a buffer of %llu bytes, indexed up to %zu)", where,
                      (unsigned long long)(data_len - at), n ? sp[n - 1].name : "", (unsigned long long)data_len, at);
    free(sp);
    return rc;
}

/* The chosen entry: its shape into out->ndim, out->shape, checked against its offsets, and the layout of the whole
 * buffer (check_layout); then its values, or with header_only != NULL only the max_values limit, storing the dtype
 * in *header_only. */
static int read_entry(Tensor *out, FILE *f, const char *where, const cJSON *e, const cJSON *root, uint64_t data_start,
                      uint64_t data_len, size_t max_values, TensorDtype *header_only)
{
    const char *name = e->string;
    char got[128];
    if (!cJSON_IsObject(e)) {
        json_got(got, sizeof got, e);
        return kvc_fail("%s: tensor \"%s\": entry must be an object with dtype, shape and data_offsets (got %s)",
                        where, name, got);
    }
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *it = e->child; it; it = it->next) {
        const cJSON **slot = !strcmp(it->string, "dtype") ? &dtype : !strcmp(it->string, "shape") ? &shape
                           : !strcmp(it->string, "data_offsets") ? &offsets : NULL;
        if (!slot)
            return kvc_fail("%s: tensor \"%s\": unknown key (got \"%s\"; expected dtype, shape and data_offsets)",
                            where, name, it->string);
        if (*slot) return kvc_fail("%s: tensor \"%s\": key appears twice (got \"%s\" again)", where, name, it->string);
        *slot = it;
    }
    if (!dtype || !shape || !offsets)
        return kvc_fail("%s: tensor \"%s\": key is missing (got no \"%s\")", where, name,
                        !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    TensorDtype dt;
    const char *ds = cJSON_IsString(dtype) ? dtype->valuestring : "";
    if (!strcmp(ds, "F16")) dt = TENSOR_F16;
    else if (!strcmp(ds, "BF16")) dt = TENSOR_BF16;
    else if (!strcmp(ds, "F32")) dt = TENSOR_F32;
    else if (!strcmp(ds, "F64")) dt = TENSOR_F64;
    else {
        json_got(got, sizeof got, dtype);
        return kvc_fail("%s: tensor \"%s\": unsupported dtype (got %s; expected \"F16\", \"BF16\", \"F32\" or "
                        "\"F64\")", where, name, got);
    }

    int ndim = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    json_got(got, sizeof got, shape);
    if (ndim < 0) return kvc_fail("%s: tensor \"%s\": shape must be a list of integers (got %s)", where, name, got);
    if (ndim == 0)
        return kvc_fail("%s: tensor \"%s\": unsupported shape: 0-dimensional (scalar) tensors are not "
                        "supported (got [])", where, name);
    if (ndim > TENSOR_MAX_DIM)
        return kvc_fail("%s: tensor \"%s\": unsupported shape: more than %d dimensions (got %s)", where, name,
                        TENSOR_MAX_DIM, got);
    out->ndim = (size_t)ndim;
    size_t k = 0;
    for (const cJSON *it = shape->child; it; it = it->next, k++)
        if (get_uint(it, &out->shape[k]) < 0)
            return kvc_fail("%s: tensor \"%s\": shape must hold integers 0..2^53 (got %s)", where, name, got);

    size_t begin, end, count, bytes;
    json_got(got, sizeof got, offsets);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || get_uint(offsets->child, &begin) < 0 ||
        get_uint(offsets->child->next, &end) < 0)
        return kvc_fail("%s: tensor \"%s\": data_offsets must be [begin, end], integers 0..2^53 (got %s)", where,
                        name, got);
    if (begin > end)
        return kvc_fail("%s: tensor \"%s\": data_offsets begin after they end (got %s)", where, name, got);
    if (end > data_len)
        return kvc_fail("%s: tensor \"%s\": data_offsets run past the end of the data buffer, which holds %llu bytes "
                        "(got %s)", where, name, (unsigned long long)data_len, got);
    char tw[512]; /* "<path>: tensor "<name>"" for messages from tensorio */
    snprintf(tw, sizeof tw, "%s: tensor \"%.300s\"", where, name);
    if (tensorio_shape_bytes(out->shape, out->ndim, tensorio_dtype_size(dt), tw, &count, &bytes) < 0) return -1;
    if (end - begin != bytes) {
        char s[128];
        tensorio_shape_str(s, sizeof s, out->shape, out->ndim);
        return kvc_fail("%s: tensor \"%s\": size mismatch: shape %s of %s = %zu values needs %zu bytes but "
                        "data_offsets span %zu (got %s)", where, name, s, ds, count, bytes, end - begin, got);
    }
    if (check_layout(where, root, data_len) < 0) return -1;
    if (header_only) {
        *header_only = dt;
        return tensorio_check_count(out->shape, out->ndim, tw, max_values);
    }
    if (fseeko(f, (off_t)(data_start + begin), SEEK_SET) != 0)
        return kvc_fail("%s: cannot seek to the data of tensor \"%s\" (got %s)", where, name, strerror(errno));
    return tensorio_read_values(out, f, tw, dt, 0, 0, max_values);
}

/* The offset of the first \u0000 escape inside a JSON string of t[0..n), or n. */
static size_t escaped_nul(const char *t, size_t n)
{
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '"') in_str = !in_str;
        else if (in_str && t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u' && i + 5 < n && memcmp(t + i + 2, "0000", 4) == 0) return i;
            i++;   /* the escaped character */
        }
    }
    return n;
}

static int read_st(Tensor *out, FILE *f, uint64_t size, const char *where, const char *name, size_t max_values,
                   TensorDtype *header_only)
{
    unsigned char len8[8];
    if (size < 8)
        return kvc_fail("%s: file is truncated: too short for the 8-byte .safetensors header length (got %llu bytes)",
                        where, (unsigned long long)size);
    if (tensorio_read_exact(f, len8, 8, where, "the header length") < 0) return -1;
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)len8[k] << (8 * k);
    if (n > size - 8)
        return kvc_fail("%s: header length runs past the end of the file: only %llu bytes follow the 8-byte length "
                        "(got a header length of %llu)", where, (unsigned long long)(size - 8), (unsigned long long)n);
    if (n > SAFETENSORS_MAX_HEADER)
        return kvc_fail("%s: .safetensors header is too long (got %llu bytes; at most %u accepted)", where,
                        (unsigned long long)n, SAFETENSORS_MAX_HEADER);
    char *text = xmalloc((size_t)n + 1);
    if (tensorio_read_exact(f, text, (size_t)n, where, "the header") < 0) {
        free(text);
        return -1;
    }
    text[n] = '\0';
    const char *nul = memchr(text, 0, (size_t)n);
    if (nul) {
        size_t at = (size_t)(nul - text);
        free(text);
        return kvc_fail("%s: .safetensors header is not valid JSON: NUL byte at byte %zu of the header (got \\x00)",
                        where, at);
    }
    /* tensor names are C strings in kvc and go into messages: well-formed UTF-8 and no escaped \u0000 */
    size_t bad = utf8_check(text, (size_t)n), esc = escaped_nul(text, (size_t)n);
    if (bad < n || esc < n) {
        char got[48];
        size_t at = bad < esc ? bad : esc, k = 0;
        for (size_t i = at; i < n && i < at + 12 && k + 6 < sizeof got; i++) {
            unsigned char c = (unsigned char)text[i];
            if (c >= 0x20 && c < 0x7f && c != '"') got[k++] = (char)c;
            else k += (size_t)snprintf(got + k, sizeof got - k, "\\x%02x", c);
        }
        got[k] = '\0';
        free(text);
        return kvc_fail(bad < esc ? "%s: .safetensors header is not valid UTF-8 at byte %zu of the header (got \"%s\")"
                                  : "%s: .safetensors header holds \\u0000 (NUL) in a string at byte %zu of the "
                                    "header; tensor names must not (got \"%s\")", where, at, got);
    }
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n, &stop, 0);
    if (root) {
        while (stop && stop < text + n && (*stop == ' ' || *stop == '\t' || *stop == '\n' || *stop == '\r')) stop++;
        if (stop != text + n) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root) {
        size_t at = stop && stop >= text && stop <= text + n ? (size_t)(stop - text) : 0;
        char got[64];
        size_t len = 0;
        for (size_t k = at; k < n && k < at + 16 && len + 6 < sizeof got; k++) {
            unsigned char c = (unsigned char)text[k];
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') got[len++] = (char)c;
            else len += (size_t)snprintf(got + len, sizeof got - len, "\\x%02x", c);
        }
        got[len] = '\0';
        free(text);
        if (n == 0) return kvc_fail("%s: .safetensors header is not valid JSON: it is empty (got a header length of 0)",
                                    where);
        if (at >= n)
            return kvc_fail("%s: .safetensors header is not valid JSON: it ends early (got %llu bytes)", where,
                            (unsigned long long)n);
        return kvc_fail("%s: .safetensors header is not valid JSON at byte %zu of the header (got \"%s\")", where, at,
                        got);
    }
    free(text);

    int rc = -1;
    size_t count = 0;
    const char **names = NULL;
    const cJSON *chosen = NULL;
    char got[128];
    if (!cJSON_IsObject(root)) {
        json_got(got, sizeof got, root);
        kvc_fail("%s: .safetensors header must be a JSON object (got %s)", where, got);
        goto done;
    }
    int members = cJSON_GetArraySize(root);
    names = xmalloc((size_t)(members > 0 ? members : 1) * sizeof *names);
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            if (!cJSON_IsObject(it)) {
                json_got(got, sizeof got, it);
                kvc_fail("%s: \"__metadata__\" must be an object of strings (got %s)", where, got);
                goto done;
            }
            continue;
        }
        names[count++] = it->string;
        if (name ? !strcmp(it->string, name) : count == 1) chosen = it;
    }
    qsort(names, count, sizeof *names, cmp_str);
    for (size_t k = 1; k < count; k++)
        if (!strcmp(names[k - 1], names[k])) {
            kvc_fail("%s: tensor name appears twice in the header (got \"%s\")", where, names[k]);
            goto done;
        }
    if (count == 0) {
        kvc_fail("%s: the file holds no tensors (got a header with %s)", where,
                 members ? "only __metadata__" : "no entries");
        goto done;
    }
    if (!name && count > 1) {
        char list[700];
        const char *near;
        list_names(list, sizeof list, names, count, NULL, &near);
        kvc_fail("%s: the file holds %zu tensors; choose one by name (got none; available: %s)", where, count, list);
        goto done;
    }
    if (!chosen) {
        char list[700];
        const char *near;
        list_names(list, sizeof list, names, count, name, &near);
        if (near)
            kvc_fail("%s: no tensor named \"%s\"; did you mean \"%s\"? (got \"%s\"; available: %s)", where, name, near,
                     name, list);
        else
            kvc_fail("%s: no tensor named \"%s\" (got \"%s\"; available: %s)", where, name, name, list);
        goto done;
    }
    rc = read_entry(out, f, where, chosen, root, 8 + n, size - 8 - n, max_values, header_only);
done:
    free(names);
    cJSON_Delete(root);
    return rc;
}

int safetensors_fread(Tensor *out, FILE *f, const char *where, const char *name, size_t max_values)
{
    uint64_t size;
    memset(out, 0, sizeof *out);
    if (tensorio_stream_size(f, where, &size) < 0) return -1;
    if (read_st(out, f, size, where, name, max_values, NULL) < 0) {
        tensor_free(out);
        return -1;
    }
    return 0;
}

int safetensors_fread_info(TensorInfo *out, FILE *f, const char *where, const char *name, size_t max_values)
{
    uint64_t size;
    Tensor t = {0};
    TensorDtype dt = TENSOR_F64;
    memset(out, 0, sizeof *out);
    if (tensorio_stream_size(f, where, &size) < 0 || read_st(&t, f, size, where, name, max_values, &dt) < 0)
        return -1;
    out->ndim = t.ndim;
    memcpy(out->shape, t.shape, sizeof t.shape);
    out->dtype = dt;
    return 0;
}

int safetensors_read(Tensor *out, const char *path, const char *name)
{
    FILE *f;
    uint64_t size;
    memset(out, 0, sizeof *out);
    if (tensorio_open(&f, &size, path) < 0) return -1;
    int rc = read_st(out, f, size, path, name, TENSOR_NO_LIMIT, NULL);
    fclose(f);
    if (rc < 0) tensor_free(out);
    return rc;
}

/* ---- writing ---- */

static void append_json_string(char **buf, size_t *len, size_t *cap, const char *s)
{
    str_append(buf, len, cap, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            str_append(buf, len, cap, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            str_append(buf, len, cap, esc, 6);
        } else {
            str_append(buf, len, cap, s, 1);
        }
    }
    str_append(buf, len, cap, "\"", 1);
}

int safetensors_write(const char *path, const SafetensorsEntry *entries, size_t n, TensorDtype dtype)
{
    if (dtype != TENSOR_F32 && dtype != TENSOR_F64)
        return kvc_fail("%s: safetensors_write supports F32 and F64 only (got dtype %d)", path, (int)dtype);
    if (n == 0) return kvc_fail("%s: refusing to write a .safetensors file without tensors (got 0)", path);
    size_t is = tensorio_dtype_size(dtype), offset = 0, len = 0, cap = 256;
    char *hdr = xmalloc(cap);
    hdr[0] = '\0';
    str_append(&hdr, &len, &cap, "{", 1);
    for (size_t k = 0; k < n; k++) {
        const Tensor *t = entries[k].tensor;
        const char *name = entries[k].name;
        size_t count, bytes;
        if (!name || !*name || !strcmp(name, "__metadata__")) {
            free(hdr);
            return kvc_fail("%s: tensor %zu needs a name other than \"\" and \"__metadata__\" (got \"%s\")", path, k,
                            name ? name : "");
        }
        for (size_t j = 0; j < k; j++)
            if (!strcmp(entries[j].name, name)) {
                free(hdr);
                return kvc_fail("%s: tensor name given twice (got \"%s\")", path, name);
            }
        if (t->ndim < 1 || t->ndim > TENSOR_MAX_DIM) {
            free(hdr);
            return kvc_fail("%s: tensor \"%s\" has %zu dimensions (expected 1 to %d)", path, name, t->ndim,
                            TENSOR_MAX_DIM);
        }
        if (tensorio_shape_bytes(t->shape, t->ndim, is, path, &count, &bytes) < 0 ||
            size_add(offset, bytes, &bytes) < 0) {
            free(hdr);
            return kvc_fail("%s: tensors too large to write (got tensor \"%s\")", path, name);
        }
        for (size_t i = 0; i < count; i++)
            if (!isfinite(t->data[i])) {
                free(hdr);
                return kvc_fail("%s: tensor \"%s\": refusing to write a value that is not finite at flat index %zu "
                                "(got %s)", path, name, i, isnan(t->data[i]) ? "nan" : t->data[i] > 0 ? "inf" : "-inf");
            }
        char num[64];
        if (k) str_append(&hdr, &len, &cap, ",", 1);
        append_json_string(&hdr, &len, &cap, name);
        int m = snprintf(num, sizeof num, ":{\"dtype\":\"%s\",\"shape\":[", dtype == TENSOR_F32 ? "F32" : "F64");
        str_append(&hdr, &len, &cap, num, (size_t)m);
        for (size_t d = 0; d < t->ndim; d++) {
            m = snprintf(num, sizeof num, d ? ",%zu" : "%zu", t->shape[d]);
            str_append(&hdr, &len, &cap, num, (size_t)m);
        }
        m = snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", offset, bytes);
        str_append(&hdr, &len, &cap, num, (size_t)m);
        offset = bytes;
    }
    str_append(&hdr, &len, &cap, "}", 1);
    while (len % 8) str_append(&hdr, &len, &cap, " ", 1);

    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)len >> (8 * k));
    TensorioOut o;
    if (tensorio_create(&o, path) < 0) {
        free(hdr);
        return -1;
    }
    if (fwrite(len8, 1, 8, o.f) != 8 || fwrite(hdr, 1, len, o.f) != len) {
        kvc_fail("%s: write failed (got %s)", path, strerror(errno));
        free(hdr);
        tensorio_abort(&o);
        return -1;
    }
    free(hdr);
    for (size_t k = 0; k < n; k++)
        if (tensorio_write_values(o.f, entries[k].tensor, dtype, path) < 0) {
            tensorio_abort(&o);
            return -1;
        }
    return tensorio_commit(&o);
}
