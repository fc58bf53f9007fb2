/* memory: what a `kvc run` will allocate, estimated from its Config before any data exists, and the check that
 * refuses a run that cannot fit (README "Reliability"). No allocation of data here, no I/O but /proc.
 *
 * L layers, H KV heads, Hq query heads (G = Hq / H per KV head), T tokens, D head dim, N evaluation and W
 * observation queries per query head; n = L x H x T x D numbers per tensor, a layer = H x T x D of them, v = 1
 * with values (else 0); sizes in bytes, 8 per double. "Streamed": synthetic data that kvc run makes a few KV
 * heads at a time (synth_stream_wanted, src/data/synth.h): K and V are then never held whole. U: the KV heads in
 * flight, min(H, -j threads) for streamed data (H when an experiment that runs is layer-wide, methods.h
 * method_layer_wide), else H.
 *   data        K, V, Q, O as the run holds them: 8 (n (1 + v) + L Hq (N + W) D); streamed, 8 L Hq (N + W) D
 *   making it   while it is made, U KV heads at a time: their K and V, 8 (1 + v) U T D (not when the data is
 *               a single layer held whole: its arrays become the data's), a second copy of their tensor,
 *               8 U T D (lowrank keys, RoPE, head correlation, outlier channels, values read from a file), and
 *               8 U G (N + W') T for the draws of their queries (W' = W for key_gaussian observation queries,
 *               which draw a number per token each, else 0); freed before the experiments
 *   reference   8 (L Hq N (D + 2 T) + L H T), plus n when the keys are cached before RoPE (the rotated copy);
 *               streamed, nothing (each layer's reference is part of the experiment)
 *   experiment  the largest over the experiments that run: 8 x (4 numbers per evaluation query + 2 T D for one
 *               head's scratch), and for a method that rewrites keys or values the outputs of U heads,
 *               8 (1 + v) U T D (twice for a method that takes a whole layer: cast, lowrank, share_heads,
 *               pipeline), with outlier channels 8 x 2 T D for k_error_ordinary's copies of one head; lowrank adds
 *               its SVD copies (8 x 2 T D, or 8 x 2 H T D for a joint basis), also as a pipeline step. Errors over
 *               every head are norms fed head by head (src/eval/normacc.h), never tensors. Streamed, also the
 *               U heads made for the experiment (their K and V, a second copy and their queries' draws, as in
 *               "making it") and their reference, 8 (U G N (D + 2 T) + U T) (+ 8 U T D for keys cached before
 *               RoPE); without timing the experiments then run together U heads at a time (eval_experiments), and
 *               each other one keeps its numbers meanwhile: 8 (4 L Hq N + 8 L H)
 *   timing      the FP16 cache and the stored form of the timed decode step: 4 n (1 + v) (not with --per-head
 *               or --no-timing): decode timing holds every layer (streamed data makes its FP16 cache a KV head
 *               at a time, within the experiment's making)
 *   (limits)    under `ulimit -v` or `ulimit -d` also the OpenBLAS buffer (memlimit.h) and 8 MB of stack per
 *               --threads thread: address space that counts against the limits, not against physical memory
 *   rows        the rows kept for the output (by kvc run, and again for a table): 2 x experiments x (L H with
 *               --per-head, else 1) x sizeof(Row)
 *   overhead    MEMORY_OVERHEAD for what a run touches besides (libraries, allocator slack)
 * total = data + max(making it, reference + experiment + timing) + rows + overhead. It is meant as an upper
 * estimate, the same on every machine: the peaks measured for 13 methods on 5 shapes (max RSS above a tiny
 * run's) lay 5-55 % below it, evictions lowest (README "Reliability"). Keep it in step with src/eval/evaluate.c,
 * timing.c and src/data/synth.c when they change what they allocate.
 */
#ifndef KVC_MEMORY_H
#define KVC_MEMORY_H

#include "config/config.h"

#include <stdint.h>

#define MEMORY_OVERHEAD ((uint64_t)32 << 20)

typedef struct MemEstimate {
    uint64_t data, making, reference, experiment, timing, rows, total;   /* bytes, as above */
    size_t largest;                  /* the experiment whose working set is `experiment` */
    uint64_t limits_only;            /* address space on top of total: thread stacks, the OpenBLAS buffer */
} MemEstimate;

typedef struct MemRun {
    int per_head;                    /* --per-head */
    int timing;                      /* decode timing on (not --no-timing, not --per-head) */
    size_t threads;                  /* --threads */
    const unsigned char *runs;       /* runs[i]: experiment i runs (its shard); NULL: all of them */
} MemRun;

void memory_estimate(MemEstimate *e, const Config *cfg, const MemRun *r);

/* Refuses a run whose estimate does not fit the room physical memory, a cgroup limit, `ulimit -v` or
 * `ulimit -d` leave (src/base/memlimit.h): -1 with kvc_fail("<cfg_name>: the run needs about X of memory
 * (...) but <bound> leaves Y; ... (got an estimate of N bytes)"); else 0. */
int memory_check(const Config *cfg, const char *cfg_name, const MemRun *r);

#endif
