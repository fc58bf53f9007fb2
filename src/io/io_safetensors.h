/* io_safetensors: strict reader and atomic writer for the .safetensors format (Hugging Face).
 *
 * Layout: an 8-byte little-endian unsigned header length N, then N bytes of JSON (an object; trailing
 * whitespace allowed), then the data buffer (the rest of the file). Each member of the object but the
 * optional "__metadata__" (which must be an object and is otherwise ignored) is a tensor:
 *     "name": {"dtype": "F16" | "BF16" | "F32" | "F64", "shape": [d0, ...], "data_offsets": [begin, end]}
 * with exactly those three keys. Offsets are relative to the start of the data buffer, little-endian values,
 * C order. Checks, for the tensor chosen: N within the file and at most 100,000,000 (the format's own
 * limit); valid JSON without NUL bytes; unique tensor names; shape of 1 to 4 integers (each 0..2^53);
 * begin <= end <= buffer size; end - begin == product(shape) * itemsize (overflow-checked); every value
 * finite (the first NaN/Inf is an error naming its flat index). The data buffer must be exactly the tensors'
 * data: sorted by data_offsets, every tensor begins where the previous one ends, the first at 0, the last at
 * the end of the file; overlapping offsets, holes between tensors and bytes after the last one are refused,
 * naming the tensors (the format's rule, as the reference implementation checks it). For that every tensor's
 * data_offsets are checked; tensors other than the chosen one are not validated beyond their names and
 * offsets (a file may hold integer tensors kvc never reads). Entries may be listed in any order.
 *
 * Choosing: name != NULL takes that tensor (unknown names are an error listing the available ones and the
 * nearest); name == NULL takes the only tensor and is an error (listing them) when there are several.
 *
 * Errors: return -1 with kvc_fail("<path>: <what> (got <value>)") set and *out zeroed; nothing to free.
 */
#ifndef KVC_IO_SAFETENSORS_H
#define KVC_IO_SAFETENSORS_H

#include "io/tensorio.h"

#include <stdio.h>

#define SAFETENSORS_MAX_HEADER 100000000u

/* Reads tensor `name` (or the only tensor, name == NULL) of the file at path into *out. */
int safetensors_read(Tensor *out, const char *path, const char *name);
/* The same from an open, seekable stream (it seeks to 0; a regular file, or fmemopen for fuzzing); where
 * names it; more than max_values values (TENSOR_NO_LIMIT: none) are refused before allocating. */
int safetensors_fread(Tensor *out, FILE *f, const char *where, const char *name, size_t max_values);
/* The header only (tensor_read_info): every check of safetensors_fread on the chosen tensor but the finiteness
 * of its values, which are not read. 0, or -1 with kvc_fail set and *out zeroed. */
int safetensors_fread_info(TensorInfo *out, FILE *f, const char *where, const char *name, size_t max_values);

typedef struct SafetensorsEntry {
    const char *name;      /* non-empty, not "__metadata__", unique within the file */
    const Tensor *tensor;  /* 1..4 dimensions, finite values */
} SafetensorsEntry;

/* Writes n tensors to path as dtype TENSOR_F32 or TENSOR_F64 (F32: rounded to nearest; a value beyond
 * float32's range is an error), in the given order, the header padded with spaces to a multiple of 8 bytes
 * as the reference implementation does. Written to a temporary beside path, then renamed. 0 or -1. */
int safetensors_write(const char *path, const SafetensorsEntry *entries, size_t n, TensorDtype dtype);

#endif
