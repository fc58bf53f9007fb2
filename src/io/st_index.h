/* st_index: the tensor table of one .safetensors file, and any one tensor's values read as float32.
 *
 * io_safetensors reads one tensor into a double Tensor; a model's weights need less: their names, dtypes and
 * shapes first (to check them against a config before reading anything), then each tensor's values once, as
 * float32, half the memory of doubles. This module is that reader. It does not write.
 *
 * Layout (the format's own definition): an 8-byte little-endian header length N, N bytes of JSON (an object;
 * trailing whitespace allowed), then the data buffer. Each member but "__metadata__" is a tensor
 *     "name": {"dtype": "...", "shape": [d0, ...], "data_offsets": [begin, end]}
 * with begin/end relative to the data buffer. st_index_open checks, for EVERY tensor: the three keys, a
 * dtype string, a shape of 0 to 8 integers (each 0..2^53), begin <= end <= buffer size, and for the dtypes
 * whose item size is known (F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2) that
 * end - begin == product(shape) * itemsize, overflow-checked. Names are unique. The header is at most
 * 100,000,000 bytes (the format's limit).
 *
 * st_index_read_f32 converts F32, F16 and BF16 exactly to float (any other dtype is an error naming it) and
 * refuses a value that is not finite, naming the tensor, its flat index and the value.
 *
 * Ownership: st_index_open fills *f (it keeps the file open until st_index_free; freeing a zeroed StFile is
 * safe). Entries and their names belong to *f.
 * Errors: -1 with kvc_fail("<path>: <what> (got <value>)"); *f is left zeroed (nothing to free).
 */
#ifndef KVC_ST_INDEX_H
#define KVC_ST_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ST_INDEX_MAX_DIM 8

typedef struct StEntry {
    char *name;
    char dtype[16];                  /* as in the file: "F32", "BF16", ... */
    size_t itemsize;                 /* 0 for a dtype this module does not know */
    size_t ndim;                     /* 0..ST_INDEX_MAX_DIM (0: a scalar) */
    size_t shape[ST_INDEX_MAX_DIM];
    size_t count;                    /* product(shape) */
    uint64_t offset;                 /* absolute byte offset of the data in the file */
    uint64_t bytes;                  /* end - begin */
} StEntry;

typedef struct StFile {
    char *path;
    FILE *fp;
    StEntry *entries;                /* in header order */
    size_t n;
} StFile;

/* Reads and checks the header of the .safetensors file at path. 0 or -1. */
int st_index_open(StFile *f, const char *path);
void st_index_free(StFile *f);
/* The entry named name, or NULL. */
const StEntry *st_index_find(const StFile *f, const char *name);
/* Reads e's values (e->count of them) into out as float32 (F32 / F16 / BF16 only; every value finite). */
int st_index_read_f32(float *out, const StFile *f, const StEntry *e);
/* "(3, 4)" ("(3,)" for one dimension, "()" for none), as Python writes shapes. */
void st_index_shape_str(char *buf, size_t cap, const size_t *shape, size_t ndim);

#endif
