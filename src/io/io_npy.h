/* io_npy: strict reader and atomic writer for numpy's .npy format.
 *
 * Reads format versions 1.0, 2.0 and 3.0: the magic "\x93NUMPY", two version bytes, the header length
 * (u16 little-endian for 1.0, u32 for 2.0/3.0), then a Python dict literal with exactly the keys 'descr',
 * 'fortran_order' and 'shape' (any order, each once; a trailing comma and space/newline padding as numpy
 * writes them), then the raw data. The dict is parsed as a tiny grammar, never evaluated:
 *   descr          a quoted string: an optional byte-order mark '<' (little), '>' (big), '=' or '|' (this
 *                  machine's order), then f2, f4 or f8 (float16/32/64). Anything else is refused by name
 *                  ('<i4', '<c16', '<f16', structured dtypes, ...). Big-endian data is converted.
 *   fortran_order  True or False. True (column-major) data is transposed into the C order of the Tensor.
 *   shape          a tuple of 1 to 4 non-negative decimal integers ("(3,)", "(2, 3)", "(2, 3,)"; Python 2's
 *                  "3L" suffix is accepted in 1.0/2.0 headers as numpy does). A scalar "()" is refused.
 * Headers longer than 65536 bytes are refused. The shape product is overflow-checked, and the file size must
 * equal preamble + header + product * itemsize exactly: shorter is "truncated", longer is "trailing bytes".
 * Every value must be finite: the first NaN/Inf is an error naming its flat (C-order) index.
 *
 * Errors: return -1 with kvc_fail("<path>: <what> (got <value>)") set and *out zeroed; nothing to free.
 */
#ifndef KVC_IO_NPY_H
#define KVC_IO_NPY_H

#include "io/tensorio.h"

#include <stdio.h>

#define NPY_MAX_HEADER 65536

/* Reads the .npy file at path into *out (free with tensor_free). */
int npy_read(Tensor *out, const char *path);
/* The same from an open, seekable stream positioned anywhere (it seeks to 0; a regular file, or fmemopen for
 * fuzzing); where names it in messages; more than max_values values (TENSOR_NO_LIMIT: none) are refused
 * before allocating. The stream is not closed. */
int npy_fread(Tensor *out, FILE *f, const char *where, size_t max_values);
/* The header only (tensor_read_info): every check of npy_fread but the finiteness of the values, which are
 * not read. 0, or -1 with kvc_fail set and *out zeroed. */
int npy_fread_info(TensorInfo *out, FILE *f, const char *where, size_t max_values);

/* Writes t as a version 1.0 '<f8' C-order .npy file, byte for byte what np.save writes for that float64
 * array (header padded to 64 bytes, same spacing). The file appears complete or not at all: it is written
 * to a temporary beside path and renamed. t must have 1..4 dimensions and finite values. 0 or -1. */
int npy_write(const char *path, const Tensor *t);

#endif
