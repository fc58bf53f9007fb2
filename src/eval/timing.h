/* timing: the decode_ns and decode_speedup columns of `kvc run`: how long one decode step takes over the cache
 * exactly as a method stored it, and how many times faster that is than the same step over the FP16 cache of the
 * same data.
 *
 * A method returns its stored form with its result (src/methods/methods.h MethodStored: per (layer, KV head) the
 * StoreTensors it wrote, a second segment such as KIVI's FP16 window, head sharing). evaluate.c hands every head's
 * form to a TimedCache as the heads come (timing_cache_add takes the tensors over, so the cache is held once), and
 * timing_measure times fused decode steps over exactly those tensors (src/decode/decode.h), nothing quantized
 * again: one query per query head (the first evaluation query, or else the head's last key), every layer.
 *
 * Rounds. One untimed step, then timed steps one at a time; decode_ns is the median step in nanoseconds. By default
 * (repeat 0) the rounds adapt to a time budget: steps are timed until TIMING_BUDGET seconds of them have passed and
 * at least TIMING_MIN_ROUNDS were timed (at most TIMING_MAX_ROUNDS), so a fast form gets many rounds and a slow
 * one (a step of a second through the generic path) costs its warm-up step and three rounds, not a fixed count.
 * repeat N (kvc run --timing-repeat N) times exactly N rounds instead.
 *
 * The FP16 reference: the cache of all T tokens of every KV head in FP16, built from the data and timed the same
 * way once per Timing (that is, once per data set and run), at the first measurement, then freed; decode_speedup =
 * that median / decode_ns. Every row of a run divides by the same number, so speedups compare between rows as
 * their decode_ns do. A form equal to one measured before by this Timing (the same formats, token counts, sharing)
 * gets that measurement again: evictions at one budget, a quantizer with and without rotation show the same two
 * numbers, and a sweep pays the time budget once per distinct stored form.
 *
 * The timed cache holds what a decode step reads; the method's bytes also count what it does not
 * (src/methods/methods.h MethodStored): eviction indices, a cast's per-head or per-layer FP32 scale (one number
 * folded into the query), and a basis stored once per layer, which each head's low-rank tensor holds a copy of.
 * The Hadamard rotation of the query is not timed.
 *
 * Every stored format has a decode path: fused kernels for f32, f16, bf16, e4m3, e5m2, int8/int4/int2 (a method's
 * symmetric intN with one FP16 scale per row or column at 8/4/2 bits is stored as those: src/methods/qprep.h), the
 * ggml types, and the grouped intN shapes with 8, 4 or 2 bits, W % 8 == 0 and groups of a multiple of 8 (KIVI's
 * among them, src/decode/kernels_kivi.h); any other intN shape goes through the decode path's generic tiles
 * (correct, not fused): timing_note then says so, once per form. Caches without values (data.values false) time the
 * key side only (scores and their max).
 *
 * Ownership: a Timing keeps a pointer to the Data (which must outlive it). A TimedCache owns the tensors it took;
 * timing_cache_free releases them.
 */
#ifndef KVC_TIMING_H
#define KVC_TIMING_H

#include "decode/decode.h"
#include "methods/methods.h"
#include "data/synth.h"

#include <stddef.h>
#include <stdint.h>

#define TIMING_BUDGET 0.25       /* seconds of timed steps per distinct stored form (adaptive rounds) */
#define TIMING_MIN_ROUNDS 3      /* adaptive rounds: at least */
#define TIMING_MAX_ROUNDS 1000   /* adaptive rounds: at most */

typedef struct Timing Timing;

/* threads 1..1024; repeat 0 (rounds within TIMING_BUDGET) or 1..100000 rounds (checked by the caller). Builds
 * nothing yet. */
Timing *timing_create(const Data *d, int threads, int repeat);
void timing_free(Timing *tm);   /* NULL-safe */

/* Progress: timing_measure calls hook(ctx, what) with what = "timing the FP16 reference" before it times the
 * reference, "timing" before it times a form, and NULL when it is done (a form measured before calls nothing).
 * hook NULL: none (the default). */
void timing_set_hook(Timing *tm, void (*hook)(void *ctx, const char *what), void *ctx);

/* What the cost of a decode step depends on: the formats and token counts of a stored head and the sharing.
 * Every stored head of an experiment must have the same form to be timed; equal forms get one measurement. */
typedef struct DecodeForm {
    StoreFormat k, v, kr, vr;   /* formats of K, V and of their second segment (zeroed when absent) */
    size_t T, Tr;               /* tokens of the main and of the second segment (0: none) */
    size_t share;               /* KV heads that read one stored head */
    int values;                 /* 1: V is stored */
} DecodeForm;

/* The stored cache of one experiment, gathered head by head: L * H (layer, KV head) stored forms in order. */
typedef struct TimedCache {
    size_t L, H;                    /* the data's layers and KV heads */
    size_t added;                   /* heads added so far */
    size_t n;                       /* stored heads held: L * H / form.share once the first head is added */
    StoreTensor *K, *V, *Kr, *Vr;   /* n each; V, Kr, Vr NULL when absent */
    DecodeForm form;                /* the first head's */
    const char *none;               /* set: this cache is not timed, and why (a static string); nothing is held */
    uint64_t bytes;                 /* store_bytes of every tensor held */
} TimedCache;

void timing_cache_init(TimedCache *tc, size_t L, size_t H);
/* Adds the stored form s of the next (layer, KV head), taking its tensors over (s is left empty). A head that
 * cannot be timed sets tc->none and frees everything held: its own none, a form unlike the first head's ("its KV
 * heads store different forms"), K and V with different token counts, no stored K; later heads are then freed as
 * they come. */
void timing_cache_add(TimedCache *tc, MethodStored *s);
void timing_cache_free(TimedCache *tc);   /* safe on a zeroed or initialized TimedCache; leaves it initialized */

/* Times the cache tc (all L * H heads added, tc->none NULL): *ns = its median step in nanoseconds, *speedup =
 * the FP16 reference's median / *ns (the reference is timed at the first call). A form equal to one measured before
 * by this Timing gets that measurement again (the cost of a step does not depend on the values). The tensors stay
 * tc's. Returns 0, or -1 with kvc_fail set (a cache the decoder rejects, threads that cannot start, a median of
 * 0 ns); kvc run then leaves the cells empty with that message as its note. */
int timing_measure(Timing *tm, TimedCache *tc, double *ns, double *speedup);
/* The spread of the *ns timing_measure gave last: the median absolute deviation of the form's step times from
 * their median, in nanoseconds (kvc run's decode_ns_mad). */
double timing_last_mad(const Timing *tm);

/* What the last timing_measure did (for notes and tests). */
typedef struct TimingLast {
    int fresh;             /* 1: the form was measured by that call; 0: a measurement again (or none: it failed) */
    size_t rounds;         /* timed rounds of the form's measurement */
    double seconds;        /* wall time of that measurement, warm-up step included */
    unsigned tiled;        /* decoder_tiled of the form (DECODE_TILED_*): tensors read through the generic tiles */
    double base_ns;        /* the FP16 reference's median step (0 until it is timed) */
    size_t base_rounds;    /* its rounds */
} TimingLast;
const TimingLast *timing_last(const Timing *tm);

/* The note of the last timing_measure when it measured a form that decodes through the generic tile path (some
 * tensor has no fused kernel): which tensors, in which format, e.g. "no fused kernel for K and V (intN 3-bit
 * asymmetric, groups of 32 channels): decoded through the generic tile path (...)"; NULL otherwise. So it is given
 * once per form. Cleared by the next timing_measure; the string is the Timing's. */
const char *timing_note(const Timing *tm);

#endif
