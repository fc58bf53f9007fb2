/* qprep: what every quantizer (quantize, kivi, cast, ggml) does around its stored form: the optional Hadamard
 * rotation (rotate: "hadamard", src/methods/hadamard.h) and dense-and-sparse outliers (outliers: p, as KVQuant).
 *
 * For one tensor x (T, D) of one (layer, KV head):
 *   1. rotate: x = x R (every row), R = diag(s) H / sqrt(D) with the config's signs;
 *   2. outliers: of the first `rows` rows (the rows the quantizer quantizes), the n_out = floor(p * rows * D)
 *      entries of largest |x| (ties: the lower row-major index t * D + j) are kept apart: stored as records of
 *      a little-endian int32 index t * D + j and the FP16 value (6 bytes each, ascending index), and set to 0
 *      in the dense tensor the quantizer stores;
 *   3. the quantizer stores the dense tensor and reads it back (its own format);
 *   4. finish: the outlier entries are overwritten with their FP16 values, then every row is rotated back
 *      (x R^T), so K' and V' are in the original basis. Rotating the read-back keys back is the same as
 *      rotating the queries too (R is orthonormal, scores are unchanged), and rotating the read-back values
 *      back is rotating the attention output back.
 * qprep_bytes is the size of the outlier records; the rotation costs no bytes (the signs follow from the seed).
 */
#ifndef KVC_METHODS_QPREP_H
#define KVC_METHODS_QPREP_H

#include "methods/methods.h"
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct QPrep {
    size_t T, D;
    const double *x;    /* (T, D) the dense tensor to quantize: the input itself when there is nothing to rotate or
                           take out, else own */
    double *own;        /* the rotated copy with its outliers taken out, or NULL */
    double *signs;      /* (D,) rotation signs, or NULL without rotation */
    size_t n_out;       /* outliers */
    uint8_t *sparse;    /* n_out records of 6 bytes (int32 index, FP16 value), or NULL */
} QPrep;

/* rotate choices shared by the quantizers: "none", "hadamard" */
extern const char *const qprep_rotate_choices[];
enum { ROTATE_NONE = 0, ROTATE_HADAMARD = 1 };

/* The parameter rows "rotate" and "outliers" of a quantizer's table (what qprep_init's rotate and p come from).
 * More designated initializers may be given in the parentheses (quantize: .id_when_set = 1). */
#define QPREP_ROTATE_PARAM(...)                                                                                   \
    {.name = "rotate", .kind = PARAM_ENUM, .def = ROTATE_NONE, .choices = qprep_rotate_choices,                   \
     .help = "hadamard: random-sign Walsh-Hadamard rotation along D first (D a power of two)", __VA_ARGS__}
#define QPREP_OUTLIERS_PARAM(...)                                                                                 \
    {.name = "outliers", .kind = PARAM_NUM, .num_def = 0.0, .num_lo = 0.0, .num_hi = 0.5,                         \
     .help = "fraction of the largest |x| kept in FP16 with int32 indices (6 bytes each; dense-and-sparse)",      \
     __VA_ARGS__}

/* Steps 1-2 on x (T, D); rows <= T. seed: the config's seed (NULL: "0"). Returns 0 or -1 with kvc_fail set. */
int qprep_init(QPrep *q, const double *x, size_t T, size_t D, size_t rows, int rotate, double p, const char *seed);
/* Step 4 on y (T, D), the quantizer's read-back of q->x (rows it did not quantize hold what it kept). */
void qprep_finish(double *y, const QPrep *q);
uint64_t qprep_bytes(const QPrep *q);
void qprep_free(QPrep *q);   /* NULL-safe */

/* Stores x (T, D) into st (allocated) in the STORE_INTN format f and reads it back into out (T, D). unrounded:
 * the lesson's simplification (store_quantize_intn_unrounded_f64): the codes and the read-back use the unrounded
 * double scales and mins; the buffers hold those codes and the rounded parameters. Then st is re-expressed as
 * int8/int4/int2 when its format is one of those byte for byte (store_intn_to_int), the form the decode path's
 * row- and column-scaled kernels read; store_bytes(st) is the same either way. */
void qprep_intn(StoreTensor *st, double *out, const double *x, size_t T, size_t D, StoreFormat f, int unrounded);

/* scale_dtype choices of the integer quantizers: "fp16" (counted as FP16, applied unrounded: the lesson's
 * simplification), "fp16_exact" (rounded to FP16 and applied as stored), "fp32" (rounded to FP32, 4 bytes) */
extern const char *const qprep_scale_choices[];
enum { SCALE_FP16 = 0, SCALE_FP16_EXACT = 1, SCALE_FP32 = 2 };

/* Outlier records have no decode kernel, so the stored form of a quantizer with outliers > 0 is not timed: the
 * reason for MethodStored.none, or NULL without outliers. */
const char *qprep_no_decode(const Experiment *ex);

/* check() helper: "rotate" (when the method has it) needs a head dim that is a power of two. */
int qprep_check(const Experiment *ex, const Dims *d);

#endif
