/* tokens: token ids from .npy (int32/int64) or the bytes of a text file. See tokens.h. */
#include "model/tokens.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct NpyIds {
    size_t rows, n, item, offset;   /* sequences, ids per sequence, bytes per id (4 or 8; 1 for text), where
                                       the data starts */
    int big;                  /* big-endian */
} NpyIds;

/* The value text after 'key': in an npy header dict, or NULL. */
static const char *npy_field(const char *h, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p) return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static int npy_header(NpyIds *ids, FILE *f, const char *path, size_t fsize)
{
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return kvc_fail("%s: not an .npy file (no \\x93NUMPY magic) (got %zu bytes)", path, fsize);
    size_t hlen, start;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        start = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) return kvc_fail("%s: truncated .npy header (got %zu bytes)", path, fsize);
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        start = 12;
    } else {
        return kvc_fail("%s: unsupported .npy version (got %u)", path, (unsigned)pre[6]);
    }
    if (hlen > 65536 || start + hlen > fsize) return kvc_fail("%s: truncated .npy header (got %zu bytes)", path, fsize);
    char *h = xmalloc(hlen + 1);
    int rc = 0;
    if (fread(h, 1, hlen, f) != hlen) rc = kvc_fail("%s: truncated .npy header (got %zu bytes)", path, fsize);
    h[hlen] = '\0';
    const char *d = rc ? NULL : npy_field(h, "descr"), *fo = rc ? NULL : npy_field(h, "fortran_order"),
               *sh = rc ? NULL : npy_field(h, "shape");
    if (!rc && (!d || !fo || !sh))
        rc = kvc_fail("%s: .npy header without descr, fortran_order and shape (got %.80s)", path, h);
    if (!rc) {
        char descr[16] = {0};
        if (sscanf(d, "'%15[^']'", descr) != 1) descr[0] = '\0';
        if (!strcmp(descr, "<i4")) *ids = (NpyIds){1, 0, 4, 0, 0};
        else if (!strcmp(descr, "<i8")) *ids = (NpyIds){1, 0, 8, 0, 0};
        else if (!strcmp(descr, ">i4")) *ids = (NpyIds){1, 0, 4, 0, 1};
        else if (!strcmp(descr, ">i8")) *ids = (NpyIds){1, 0, 8, 0, 1};
        else rc = kvc_fail("%s: token ids must be int32 or int64 (got dtype '%s')", path, descr);
    }
    if (!rc) {
        unsigned long long a = 0, b = 0;
        char close = 0;
        if (sscanf(sh, "(%llu, %llu%c", &a, &b, &close) == 3 && close == ')') {
            ids->rows = (size_t)a;
            ids->n = (size_t)b;
        } else if (sscanf(sh, "(%llu,%c", &a, &close) == 2 && close == ')') {
            ids->n = (size_t)a;
        } else {
            const char *e = strchr(sh, ')');
            rc = kvc_fail("%s: token ids must have shape (n,) or (sequences, n) (got %.*s)", path, e ? (int)(e - sh + 1) : 40,
                          sh);
        }
    }
    if (!rc) {
        ids->offset = start + hlen;
        size_t need;
        if (size_mul(ids->n, ids->item, &need) || size_mul(need, ids->rows, &need) ||
            size_add(need, ids->offset, &need) || need > fsize)
            rc = kvc_fail("%s: file shorter than its header says: %zu x %zu ids need more data (got %zu bytes of "
                          "data)", path, ids->rows, ids->n, fsize - ids->offset);
    }
    if (!rc && (ids->n == 0 || ids->rows == 0))
        rc = kvc_fail("%s: no token ids (got %zu sequences of %zu)", path, ids->rows, ids->n);
    free(h);
    return rc;
}

static FILE *open_sized(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f) {
        kvc_fail("%s: cannot open (got %s)", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        fclose(f);
        kvc_fail("%s: not a regular file (got a directory or device)", path);
        return NULL;
    }
    *size = (size_t)st.st_size;
    return f;
}

int tokens_info(size_t *rows, size_t *n, const char *path, TokensKind kind)
{
    size_t size;
    FILE *f = open_sized(path, &size);
    if (!f) return -1;
    int rc = 0;
    *rows = 1;
    if (kind == TOKENS_TEXT) {
        *n = size;
        if (size == 0) rc = kvc_fail("%s: the text is empty (got 0 bytes)", path);
    } else {
        NpyIds ids;
        rc = npy_header(&ids, f, path, size);
        if (!rc) {
            *rows = ids.rows;
            *n = ids.n;
        }
    }
    fclose(f);
    return rc;
}

int tokens_read(int32_t *out, size_t count, size_t row, const char *path, TokensKind kind, size_t vocab)
{
    size_t size;
    FILE *f = open_sized(path, &size);
    if (!f) return -1;
    NpyIds ids = {1, size, 1, 0, 0};
    int rc = kind == TOKENS_NPY ? npy_header(&ids, f, path, size) : 0;
    if (!rc && (count > ids.n || row >= ids.rows))
        rc = kvc_fail("%s: the file changed after the config was read: %zu tokens of sequence %zu needed (got %zu "
                      "sequences of %zu)", path, count, row, ids.rows, ids.n);
    unsigned char *buf = NULL;
    if (!rc) {
        buf = xmalloc(count * ids.item + 1);
        if (fseek(f, (long)(ids.offset + row * ids.n * ids.item), SEEK_SET) || fread(buf, ids.item, count, f) != count)
            rc = kvc_fail("%s: read failed (got %s)", path, ferror(f) ? strerror(errno) : "end of file");
    }
    for (size_t i = 0; !rc && i < count; i++) {
        const unsigned char *p = buf + i * ids.item;
        uint64_t u = 0;
        for (size_t k = 0; k < ids.item; k++) u |= (uint64_t)p[ids.big ? ids.item - 1 - k : k] << (8 * k);
        int64_t v = ids.item == 8 ? (int64_t)u : ids.item == 4 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
        if (v < 0 || (uint64_t)v >= vocab)
            rc = ids.rows > 1 ? kvc_fail("%s: token %zu of sequence %zu is outside the model's vocabulary 0..%zu "
                                         "(got %lld)", path, i, row, vocab - 1, (long long)v)
                              : kvc_fail("%s: token %zu is outside the model's vocabulary 0..%zu (got %lld)", path, i,
                                         vocab - 1, (long long)v);
        else
            out[i] = (int32_t)v;
    }
    free(buf);
    fclose(f);
    return rc;
}
