/* timing: the decode_ns and decode_speedup columns of `kvc run`: how long one decode step takes over the cache
 * as a method stores it, next to the same step over the FP16 cache, measured side by side in the same run.
 *
 * For each experiment evaluate.c asks the method for its DecodeForm (src/methods/methods.h): per (layer, stored
 * KV head) the format of K and V, the tokens kept, an FP16 residual window (KIVI) and head sharing. timing builds
 * that cache from the config's data (every stored head alike: each (layer, stored head) takes the rows of its
 * first KV head, the first T (+ Tr) tokens, quantized into the form's formats with src/store/store.h; a low-rank
 * tensor stores the first `rank` columns as its coefficients and unit rows as its basis) and times fused decode
 * steps over it (src/decode/decode.h) against the FP16 cache of all T tokens of every KV head: one query per
 * query head (the first evaluation query, or else the head's last key), `repeat` rounds of one step of each,
 * after one untimed step of each; the columns are the method's median step time in nanoseconds and the FP16
 * median divided by it. The timed cache has exactly the formats and token counts of the stored form; its codes
 * are the data quantized without the method's extras (the Hadamard rotation of the query is not timed); its
 * bytes are those of the stored form without index bytes (a decode step does not read token positions).
 *
 * The method library's intN tensors that are symmetric with one FP16 scale per token row (or per channel column)
 * at 8, 4 or 2 bits are the int8/int4/int2 formats of store.h (same bytes) and are timed with those fused kernels;
 * the other intN shapes with 8, 4 or 2 bits, W % 8 == 0 and groups of a multiple of 8 (KIVI's among them) have the
 * grouped intN kernels (src/decode/kernels_kivi.h); any other intN shape (3 / 5 / 6 / 7 bits, other group sizes) goes
 * through the decode path's generic tiles (correct, not fused). Every ggml type (q8_0 ... iq4_nl) has a fused kernel.
 * Caches without values (data.values false) time the key side only (scores and their max).
 *
 * Ownership: a Timing keeps a pointer to the Data (which must outlive it) and owns the baseline cache.
 */
#ifndef KVC_TIMING_H
#define KVC_TIMING_H

#include "decode/decode.h"
#include "methods/methods.h"
#include "data/synth.h"

#include <stddef.h>
#include <stdint.h>

#define TIMING_REPEAT 15   /* default rounds of timed steps */

typedef struct Timing Timing;

/* threads 1..1024, repeat 1..100000 (checked by the caller). Builds nothing yet. */
Timing *timing_create(const Data *d, int threads, int repeat);
void timing_free(Timing *tm);   /* NULL-safe */

/* Times the stored form f (f->none must be NULL) side by side with the FP16 cache: *ns = the form's median step
 * in nanoseconds, *speedup = FP16 median / *ns. A form equal to one measured before by this Timing
 * (timing_same_form: the cache built would be the same) gets that measurement again, so experiments that store
 * the same cache (evictions at one budget, a quantizer with and without rotation) show the same numbers. Returns 0, or -1 with kvc_fail set (a form the decode path
 * cannot hold, e.g. a q8_0 row that is not a multiple of 32; threads that cannot start; a median of 0 ns);
 * kvc run then leaves the cells empty with that message as its note. */
int timing_measure(Timing *tm, const DecodeForm *f, double *ns, double *speedup);
/* The spread of the *ns timing_measure gave last: the median absolute deviation of the form's step times from
 * their median, in nanoseconds (kvc run's decode_ns_mad). */
double timing_last_mad(const Timing *tm);

/* The stored form of one (layer, KV head) whose method output is c: the default of methods.h DecodeForm, then
 * the method's decode_form ("the method has no decode form" in none for a method without one that does not
 * evict). */
DecodeForm timing_form(const Experiment *ex, const Data *d, const Compressed *c);
/* 1 when a and b are the same form (every head of an experiment must store the same one to be timed). */
int timing_same_form(const DecodeForm *a, const DecodeForm *b);

/* NULL when timing_measure can time form f over data d, else why not (a static string): low-rank coefficients
 * in an intN format that is not int8/int4/int2 (timing_decode_format), which store.h does not hold. */
const char *timing_unsupported(const DecodeForm *f, const Data *d);

/* The cache of form f built from d, as timing_measure times it (for tests). */
typedef struct TimedCache {
    size_t n;                       /* tensors per role: L * stored heads */
    StoreTensor *K, *V, *Kr, *Vr;   /* V NULL without values; Kr/Vr NULL without a residual */
    DecodeCache c;
    uint64_t bytes;                 /* store_bytes of every tensor */
} TimedCache;
int timing_build(TimedCache *tc, const Data *d, const DecodeForm *f);
void timing_cache_free(TimedCache *tc);   /* safe on a zeroed TimedCache */

/* The format the decode path reads for f over a (T, W) tensor: a symmetric intN with one FP16 scale per row
 * (axis token) or per column (axis channel) at 8/4/2 bits and byte-aligned rows becomes int8/int4/int2 with
 * that axis; any other format is returned as it is. */
StoreFormat timing_decode_format(StoreFormat f, size_t T, size_t W);

#endif
