/* tensorio: the Tensor that the .npy and .safetensors readers return, and what the two share.
 *
 * A Tensor is an owned, C-ordered (row-major) array of doubles with 1 to 4 dimensions, whatever the file
 * stored (float16, bfloat16, float32 or float64; little- or big-endian; C or Fortran order): the readers
 * convert every value exactly to double. Shapes kvc uses: K/V (T, D), (H, T, D) or (L, H, T, D); checking
 * which shape a caller accepts is the caller's job (io_npy / io_safetensors accept any 1..4-D shape,
 * including dimensions of 0).
 *
 * Ownership: a reader fills *out and the caller frees it with tensor_free (freeing a zeroed or already-freed
 * Tensor is safe). On failure a reader returns -1 with kvc_fail() set and leaves *out zeroed.
 *
 * tensor_read picks the format from the file name: ".npy" -> npy_read, ".safetensors" -> safetensors_read
 * (a NULL name takes the only tensor); any other name is sniffed (the .npy magic "\x93NUMPY" or else
 * safetensors). A name given for a .npy file is an error. tensor_read_info does the same for the header
 * alone (shape and dtype, a TensorInfo), reading no values.
 *
 * The tensorio_* functions below the line are the shared machinery of io_npy.c and io_safetensors.c (file
 * size, overflow-checked shape arithmetic, chunked decoding with the finiteness check, write-to-temp-then-
 * rename); other modules need not use them.
 */
#ifndef KVC_TENSORIO_H
#define KVC_TENSORIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TENSOR_MAX_DIM 4

typedef struct Tensor {
    size_t ndim;                   /* 1..TENSOR_MAX_DIM */
    size_t shape[TENSOR_MAX_DIM];  /* shape[ndim..] are 0 */
    double *data;                  /* product(shape) values, C order; owned */
} Tensor;

/* Element types the readers understand. Files store them little-endian unless a .npy header says '>'. */
typedef enum { TENSOR_F16, TENSOR_BF16, TENSOR_F32, TENSOR_F64 } TensorDtype;

/* What a file's header says about one tensor, without its values (tensor_read_info). */
typedef struct TensorInfo {
    size_t ndim;                   /* 1..TENSOR_MAX_DIM */
    size_t shape[TENSOR_MAX_DIM];  /* shape[ndim..] are 0 */
    TensorDtype dtype;             /* as stored in the file */
} TensorInfo;

void tensor_free(Tensor *t);
/* product(shape[0..ndim)); the shape must have been validated (the readers do). */
size_t tensor_count(const Tensor *t);
/* Reads a .npy or .safetensors file (see above). A tensor with more than max_values values is refused
 * before anything is allocated (TENSOR_NO_LIMIT: no limit but memory). Returns 0, or -1 with kvc_fail set. */
#define TENSOR_NO_LIMIT ((size_t)-1)
int tensor_read(Tensor *out, const char *path, const char *name, size_t max_values);
/* The header only: every check tensor_read makes but those on the values themselves (each finite), and
 * nothing allocated for them: the preamble, the header, the chosen tensor, its shape, the file size that
 * shape needs, and the max_values limit, with tensor_read's messages. So tensor_read of the same unchanged
 * file then fails only on a value that is not finite or on a read error. Returns 0, or -1 with kvc_fail set
 * and *out zeroed. (src/config/ reads data files this way: shapes at parse time, values when data is made.) */
int tensor_read_info(TensorInfo *out, const char *path, const char *name, size_t max_values);

/* ---- shared by io_npy.c and io_safetensors.c ---- */

size_t tensorio_dtype_size(TensorDtype dt);

/* Opens path for reading and gets its size; it must be a regular file, which is checked before reading
 * (base/fileio.h: opened non-blocking, so a FIFO is refused at once instead of blocking). 0 or -1 with kvc_fail. */
int tensorio_open(FILE **f, uint64_t *size, const char *path);
/* Size of an open, seekable stream (e.g. fmemopen); leaves the position at 0. 0 or -1 with kvc_fail set. */
int tensorio_stream_size(FILE *f, const char *where, uint64_t *size);
/* Reads exactly n bytes or fails with "<where>: file ended early while reading <what>". */
int tensorio_read_exact(FILE *f, void *buf, size_t n, const char *where, const char *what);

/* "(3, 4)" ("(3,)" for one dimension, as Python writes tuples). */
void tensorio_shape_str(char *buf, size_t cap, const size_t *shape, size_t ndim);
/* Number of values and of file bytes (values * itemsize) of a shape, overflow-checked, also checking that
 * values * sizeof(double) fits in size_t. -1 with "<where>: shape ... has more values than fit in memory". */
int tensorio_shape_bytes(const size_t *shape, size_t ndim, size_t itemsize, const char *where, size_t *count,
                         size_t *bytes);

/* The max_values check of tensorio_read_values on its own (for the header readers): 0, or -1 with
 * "<where>: tensor too large: shape ... has N values, more than the M accepted (got N)". */
int tensorio_check_count(const size_t *shape, size_t ndim, const char *where, size_t max_values);
/* Reads t's values (t->ndim, t->shape set and validated by tensorio_shape_bytes) from f at its current
 * position, converting dt to double; big_endian: the file's byte order; fortran: the file lists the values
 * in Fortran (column-major) order and they are transposed into C order. Refuses more than max_values values
 * before allocating. Allocates t->data. Fails (freeing t->data) on a short read or on the first value that is
 * NaN or infinite, naming its C-order flat index and multi-index. */
int tensorio_read_values(Tensor *t, FILE *f, const char *where, TensorDtype dt, int big_endian, int fortran,
                         size_t max_values);

/* Atomic output: tensorio_create opens "<path>.<pid>.<n>.tmp" beside path (mode 0666 & ~umask);
 * tensorio_commit flushes, fsyncs, closes and renames it onto path; tensorio_abort closes and removes it.
 * After a failed commit the temporary is removed too, and SIGINT, SIGTERM or SIGHUP remove it while it exists
 * (base/fileio.h). Both return 0 or -1 with kvc_fail set. */
typedef struct TensorioOut {
    FILE *f;
    char *tmp;
    const char *path;
} TensorioOut;
int tensorio_create(TensorioOut *o, const char *path);
int tensorio_commit(TensorioOut *o);
void tensorio_abort(TensorioOut *o);
/* Writes t's values little-endian as dt (TENSOR_F32 or TENSOR_F64; a finite value that overflows float32
 * is an error naming its index). 0 or -1 with kvc_fail set. */
int tensorio_write_values(FILE *f, const Tensor *t, TensorDtype dt, const char *where);

#endif
