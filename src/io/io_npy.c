/* io_npy: .npy reading (a strict grammar for the header dict, never an eval) and writing (np.save's exact
 * bytes for float64). See io_npy.h for what is accepted. */
#define _FILE_OFFSET_BITS 64
#include "io/io_npy.h"

#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[6] = "\x93NUMPY";

/* ---- the header dict ---- */

typedef struct {
    const char *s;     /* header text, n bytes (not NUL-terminated in general) */
    size_t n, i;
    const char *where; /* path, for messages */
    int py2_long;      /* accept Python 2's "3L" (versions 1.0 and 2.0) */
} Parser;

typedef struct {
    TensorDtype dtype;
    int big_endian;
    int fortran;
    size_t ndim;
    size_t shape[TENSOR_MAX_DIM];
    char descr[16];
} Header;

/* The text at p->i, quoted and made printable, for "(got ...)". */
static void snippet(char *buf, size_t cap, const Parser *p)
{
    if (p->i >= p->n) {
        snprintf(buf, cap, "the end of the header");
        return;
    }
    size_t len = 0, k;
    buf[len++] = '"';
    for (k = p->i; k < p->n && k < p->i + 16 && len + 6 < cap; k++) {
        unsigned char c = (unsigned char)p->s[k];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') buf[len++] = (char)c;
        else len += (size_t)snprintf(buf + len, cap - len, "\\x%02x", c);
    }
    if (k < p->n && len + 4 < cap) buf[len++] = '.', buf[len++] = '.', buf[len++] = '.';
    buf[len++] = '"';
    buf[len] = '\0';
}

static int syntax(const Parser *p, const char *expected)
{
    char got[96];
    snippet(got, sizeof got, p);
    return kvc_fail("%s: .npy header is not a valid dict literal: expected %s at byte %zu of the header (got %s)",
                    p->where, expected, p->i, got);
}

static void skip_ws(Parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int peek(const Parser *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* A quoted Python string without escapes, 1..cap-1 printable ASCII characters. */
static int parse_string(Parser *p, char *out, size_t cap, const char *what)
{
    int q = peek(p);
    if (q != '\'' && q != '"') return syntax(p, what);
    size_t start = p->i++, len = 0;
    for (;;) {
        int c = peek(p);
        if (c == q) break;
        if (c < 0x20 || c >= 0x7f || c == '\\' || len + 1 >= cap) {
            p->i = start;
            return syntax(p, what);
        }
        out[len++] = (char)c;
        p->i++;
    }
    p->i++;
    out[len] = '\0';
    if (len == 0) {
        p->i = start;
        return syntax(p, what);
    }
    return 0;
}

static int parse_descr(Parser *p, Header *h)
{
    if (peek(p) == '[' || peek(p) == '(')
        return kvc_fail("%s: unsupported dtype: structured and sub-array dtypes are not supported (got a %s in "
                        "'descr'; expected '<f2', '<f4' or '<f8')", p->where, peek(p) == '[' ? "list" : "tuple");
    if (parse_string(p, h->descr, sizeof h->descr, "a dtype string such as '<f4' for 'descr'") < 0) return -1;
    const char *d = h->descr;
    uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    int native_big = first == 0;
    h->big_endian = native_big;
    if (*d == '<' || *d == '>' || *d == '=' || *d == '|') {
        if (*d == '<') h->big_endian = 0;
        if (*d == '>') h->big_endian = 1;
        d++;
    }
    if (!strcmp(d, "f2")) h->dtype = TENSOR_F16;
    else if (!strcmp(d, "f4")) h->dtype = TENSOR_F32;
    else if (!strcmp(d, "f8")) h->dtype = TENSOR_F64;
    else
        return kvc_fail("%s: unsupported dtype (got '%s'; expected float16, float32 or float64: '<f2', '<f4' or "
                        "'<f8', or '>' for big-endian)", p->where, h->descr);
    return 0;
}

static int parse_bool(Parser *p, int *out)
{
    size_t start = p->i;
    while (p->i < p->n && isalpha((unsigned char)p->s[p->i])) p->i++;
    size_t len = p->i - start;
    if (len == 4 && !memcmp(p->s + start, "True", 4)) *out = 1;
    else if (len == 5 && !memcmp(p->s + start, "False", 5)) *out = 0;
    else {
        p->i = start;
        return syntax(p, "True or False for 'fortran_order'");
    }
    return 0;
}

static int parse_dim(Parser *p, size_t *out)
{
    size_t start = p->i, v = 0;
    if (peek(p) == '-') {
        char got[96];
        snippet(got, sizeof got, p);
        return kvc_fail("%s: .npy header: negative dimension in 'shape' (got %s)", p->where, got);
    }
    if (peek(p) < '0' || peek(p) > '9') return syntax(p, "a dimension (a decimal integer) in 'shape'");
    if (peek(p) == '0' && p->i + 1 < p->n && isdigit((unsigned char)p->s[p->i + 1]))
        return syntax(p, "a decimal integer without leading zeros in 'shape'");
    while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) {
        unsigned d = (unsigned)(p->s[p->i] - '0');
        if (v > (SIZE_MAX - d) / 10) {
            size_t e = p->i;
            while (e < p->n && isdigit((unsigned char)p->s[e])) e++;
            return kvc_fail("%s: .npy header: dimension too large for this machine (got %.*s)", p->where,
                            (int)(e - start < 40 ? e - start : 40), p->s + start);
        }
        v = v * 10 + d;
        p->i++;
    }
    if (p->py2_long && peek(p) == 'L') p->i++;
    if (peek(p) >= 0 && (isalnum(peek(p)) || peek(p) == '_' || peek(p) == '.'))
        return syntax(p, "a decimal integer in 'shape'");
    *out = v;
    return 0;
}

static int parse_shape(Parser *p, Header *h)
{
    size_t start = p->i, n = 0;
    int trailing_comma = 0;
    if (peek(p) != '(') return syntax(p, "a tuple such as (3, 4) for 'shape'");
    p->i++;
    skip_ws(p);
    while (peek(p) != ')') {
        size_t dim = 0;
        if (parse_dim(p, &dim) < 0) return -1;
        if (n == TENSOR_MAX_DIM) {
            while (p->i < p->n && p->s[p->i] != ')') p->i++;
            return kvc_fail("%s: unsupported shape: more than %d dimensions (got %.*s)", p->where, TENSOR_MAX_DIM,
                            (int)(p->i + 1 - start < 200 ? p->i + 1 - start : 200), p->s + start);
        }
        h->shape[n++] = dim;
        skip_ws(p);
        trailing_comma = 0;
        if (peek(p) == ',') {
            p->i++;
            trailing_comma = 1;
            skip_ws(p);
        } else if (peek(p) != ')') {
            return syntax(p, "',' or ')' in 'shape'");
        }
    }
    p->i++;
    if (n == 1 && !trailing_comma) {
        p->i = start;
        return syntax(p, "a tuple for 'shape' (a one-element tuple is written (3,))");
    }
    if (n == 0)
        return kvc_fail("%s: unsupported shape: 0-dimensional (scalar) arrays are not supported (got ())", p->where);
    h->ndim = n;
    return 0;
}

static int parse_header(Parser *p, Header *h)
{
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    int seen[3] = {0, 0, 0};
    skip_ws(p);
    if (peek(p) != '{') return syntax(p, "'{'");
    p->i++;
    for (;;) {
        char key[32];
        int k;
        skip_ws(p);
        if (peek(p) == '}') break;
        size_t key_at = p->i;
        if (parse_string(p, key, sizeof key, "a quoted key or '}'") < 0) return -1;
        for (k = 0; k < 3 && strcmp(key, keys[k]) != 0; k++) {}
        if (k == 3)
            return kvc_fail("%s: .npy header: unknown key at byte %zu (got '%s'; expected 'descr', 'fortran_order' "
                            "and 'shape')", p->where, key_at, key);
        if (seen[k]) return kvc_fail("%s: .npy header: key '%s' appears twice (got a second one at byte %zu)",
                                     p->where, key, key_at);
        seen[k] = 1;
        skip_ws(p);
        if (peek(p) != ':') return syntax(p, "':' after the key");
        p->i++;
        skip_ws(p);
        int rc = k == 0 ? parse_descr(p, h) : k == 1 ? parse_bool(p, &h->fortran) : parse_shape(p, h);
        if (rc < 0) return -1;
        skip_ws(p);
        if (peek(p) == ',') p->i++;
        else if (peek(p) != '}') return syntax(p, "',' or '}'");
    }
    p->i++;
    skip_ws(p);
    if (p->i != p->n) return syntax(p, "only spaces and a newline after the closing '}'");
    for (int k = 0; k < 3; k++)
        if (!seen[k]) {
            char got[64] = "";
            for (int j = 0; j < 3; j++)
                if (seen[j]) snprintf(got + strlen(got), sizeof got - strlen(got), "%s'%s'", *got ? ", " : "", keys[j]);
            return kvc_fail("%s: .npy header: key '%s' is missing (got %s)", p->where, keys[k], *got ? got : "none");
        }
    return 0;
}

/* ---- reading ---- */

/* Reads the header into out->ndim, out->shape and checks the file size; then the values, or with header_only
 * != NULL only the max_values limit, storing the dtype in *header_only (out->data stays NULL). */
static int read_npy(Tensor *out, FILE *f, uint64_t size, const char *where, size_t max_values,
                    TensorDtype *header_only)
{
    unsigned char pre[12];
    char got[64];
    size_t have = size < 8 ? (size_t)size : 8;
    if (tensorio_read_exact(f, pre, have, where, "the magic string") < 0) return -1;
    if (have < 8 || memcmp(pre, MAGIC, 6) != 0) {
        size_t len = 0;
        for (size_t k = 0; k < have && k < 6; k++)
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%02x", k ? " " : "", pre[k]);
        if (have == 0)
            return kvc_fail("%s: not a .npy file: it does not start with the magic \\x93NUMPY (got an empty file)",
                            where);
        if (have < 8 && memcmp(pre, MAGIC, have < 6 ? have : 6) == 0)
            return kvc_fail("%s: file is truncated: too short for a .npy preamble (got %zu bytes)", where, have);
        return kvc_fail("%s: not a .npy file: it does not start with the magic \\x93NUMPY (got bytes %s)", where, got);
    }
    unsigned major = pre[6], minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return kvc_fail("%s: unsupported .npy format version (got %u.%u; expected 1.0, 2.0 or 3.0)", where, major,
                        minor);
    size_t lenbytes = major == 1 ? 2 : 4, preamble = 8 + lenbytes;
    if (size < preamble)
        return kvc_fail("%s: file is truncated: it ends inside the header length field (got %llu bytes)", where,
                        (unsigned long long)size);
    if (tensorio_read_exact(f, pre + 8, lenbytes, where, "the header length") < 0) return -1;
    uint32_t hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    if (lenbytes == 4) hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    if (hlen > size - preamble)
        return kvc_fail("%s: header length runs past the end of the file: only %llu bytes follow the %zu-byte "
                        "preamble (got a header length of %lu)", where, (unsigned long long)(size - preamble),
                        preamble, (unsigned long)hlen);
    if (hlen > NPY_MAX_HEADER)
        return kvc_fail("%s: .npy header is too long (got %lu bytes; at most %d accepted)", where,
                        (unsigned long)hlen, NPY_MAX_HEADER);
    char *text = xmalloc(hlen);
    if (tensorio_read_exact(f, text, hlen, where, "the header") < 0) {
        free(text);
        return -1;
    }
    Header h = {0};
    Parser p = {text, hlen, 0, where, major <= 2};
    int rc = parse_header(&p, &h);
    free(text);
    if (rc < 0) return -1;

    size_t count, bytes;
    char shape[128];
    if (tensorio_shape_bytes(h.shape, h.ndim, tensorio_dtype_size(h.dtype), where, &count, &bytes) < 0) return -1;
    uint64_t data = size - preamble - hlen;
    if (data != bytes) {
        tensorio_shape_str(shape, sizeof shape, h.shape, h.ndim);
        if (data < bytes)
            return kvc_fail("%s: file is truncated: header says shape %s of %s = %zu values (%zu bytes) but only %llu "
                            "bytes of data follow the header (got %llu)", where, shape, h.descr, count, bytes,
                            (unsigned long long)data, (unsigned long long)data);
        return kvc_fail("%s: trailing bytes after the data: header says shape %s of %s = %zu values (%zu bytes) but "
                        "%llu bytes follow the header (got %llu extra bytes)", where, shape, h.descr, count, bytes,
                        (unsigned long long)data, (unsigned long long)(data - bytes));
    }
    out->ndim = h.ndim;
    memcpy(out->shape, h.shape, sizeof h.shape);
    if (header_only) {
        *header_only = h.dtype;
        return tensorio_check_count(out->shape, out->ndim, where, max_values);
    }
    if (tensorio_read_values(out, f, where, h.dtype, h.big_endian, h.fortran, max_values) < 0) return -1;
    return 0;
}

int npy_fread(Tensor *out, FILE *f, const char *where, size_t max_values)
{
    uint64_t size;
    memset(out, 0, sizeof *out);
    if (tensorio_stream_size(f, where, &size) < 0) return -1;
    if (read_npy(out, f, size, where, max_values, NULL) < 0) {
        tensor_free(out);
        return -1;
    }
    return 0;
}

int npy_fread_info(TensorInfo *out, FILE *f, const char *where, size_t max_values)
{
    uint64_t size;
    Tensor t = {0};
    TensorDtype dt = TENSOR_F64;
    memset(out, 0, sizeof *out);
    if (tensorio_stream_size(f, where, &size) < 0 || read_npy(&t, f, size, where, max_values, &dt) < 0) return -1;
    out->ndim = t.ndim;
    memcpy(out->shape, t.shape, sizeof t.shape);
    out->dtype = dt;
    return 0;
}

int npy_read(Tensor *out, const char *path)
{
    FILE *f;
    uint64_t size;
    memset(out, 0, sizeof *out);
    if (tensorio_open(&f, &size, path) < 0) return -1;
    int rc = read_npy(out, f, size, path, TENSOR_NO_LIMIT, NULL);
    fclose(f);
    if (rc < 0) tensor_free(out);
    return rc;
}

/* ---- writing ---- */

int npy_write(const char *path, const Tensor *t)
{
    size_t count, bytes;
    if (t->ndim < 1 || t->ndim > TENSOR_MAX_DIM)
        return kvc_fail("%s: cannot write a tensor with %zu dimensions (expected 1 to %d)", path, t->ndim,
                        TENSOR_MAX_DIM);
    if (tensorio_shape_bytes(t->shape, t->ndim, 8, path, &count, &bytes) < 0) return -1;
    for (size_t i = 0; i < count; i++)
        if (!isfinite(t->data[i]))
            return kvc_fail("%s: refusing to write a value that is not finite at flat index %zu (got %s)", path, i,
                            isnan(t->data[i]) ? "nan" : t->data[i] > 0 ? "inf" : "-inf");

    /* numpy 1.24 _write_array_header + _wrap_header, version (1, 0). */
    char dict[512], shape[128];
    tensorio_shape_str(shape, sizeof shape, t->shape, t->ndim);
    int len = snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }", shape);
    char first[32];
    int growth = 21 - snprintf(first, sizeof first, "%zu", t->shape[0]);
    for (int k = 0; k < growth; k++) dict[len++] = ' ';
    size_t hlen = (size_t)len + 1;
    size_t pad = 64 - (10 + hlen) % 64;
    char pre[10 + sizeof dict + 64];
    memcpy(pre, MAGIC, 6);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (char)((hlen + pad) & 0xff);
    pre[9] = (char)((hlen + pad) >> 8);
    memcpy(pre + 10, dict, (size_t)len);
    memset(pre + 10 + len, ' ', pad);
    pre[10 + hlen + pad - 1] = '\n';

    TensorioOut o;
    if (tensorio_create(&o, path) < 0) return -1;
    if (fwrite(pre, 1, 10 + hlen + pad, o.f) != 10 + hlen + pad) {
        kvc_fail("%s: write failed (got %s)", path, strerror(errno));
        tensorio_abort(&o);
        return -1;
    }
    if (tensorio_write_values(o.f, t, TENSOR_F64, path) < 0) {
        tensorio_abort(&o);
        return -1;
    }
    return tensorio_commit(&o);
}
