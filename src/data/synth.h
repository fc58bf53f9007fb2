/* synth: synthesize K, V and the queries from a Config with the numpy-compatible generator.
 *
 * L layers, H KV heads, Hq query heads, G = Hq / H (query heads per KV head, GQA: query head hq reads KV head
 * hq / G), T tokens, D head dim, N evaluation queries and W observation queries per (layer, query head).
 * Every tensor is C order (row-major), the last axis fastest. The exact draw order, which makes a config
 * reproducible in numpy, is README.md "Draw order"; tests/oracle.py implements it independently. With none
 * of the multi-head keys it is the v1 order: keys, values, query.
 *
 * Streamed data (synth_data_stream): K and V are NULL and data_heads makes some KV heads of one layer on demand,
 * bit for bit what synth_data holds for them: the generator's state is recorded at the start of each piece of
 * each layer's part of every block of draws in one pass, and any heads are made again from those states. Q, O,
 * obs_pos and outlier_mask are whole (they are small: (L, Hq, N + W, D)). Memory then holds the heads in flight
 * instead of L x H; they are made again each time they are asked for.
 *
 * A Data can also be filled from tensors on disk (the hook for data.source "files"): set the sizes, point K,
 * V, Q (and O with obs_pos) at xmalloc'ed arrays of the shapes below, leave rope zeroed (the keys are then
 * what attention reads) and outlier_mask NULL; data_free releases it.
 */
#ifndef KVC_SYNTH_H
#define KVC_SYNTH_H

#include "config/config.h"
#include "data/rope.h"

typedef struct Data {
    size_t L, H, Hq, T, D;
    size_t N;                     /* evaluation queries per (layer, query head); 0 without queries */
    size_t W;                     /* observation queries per (layer, query head); 0 without */
    double *K;                    /* (L, H, T, D) the keys the cache holds */
    double *V;                    /* (L, H, T, D), or NULL: the cache holds keys only */
    double *Q;                    /* (L, Hq, N, D) evaluation queries, as attention reads them, or NULL */
    double *O;                    /* (L, Hq, W, D) observation queries, as attention reads them, or NULL */
    size_t *obs_pos;              /* (W,) position of each observation query: T - W + j */
    Rope rope;                    /* rope.dims > 0: K holds pre-RoPE keys; attention reads rope(K) at 0..T-1 */
    unsigned char *outlier_mask;  /* (L, D): 1 for a declared outlier channel of that layer; NULL if none */
    struct DataStream *stream;    /* streamed synthetic data: what data_layer needs to make a layer; else NULL */
    struct ModelSource *model;    /* data.source "model": the model and its reference (data/model_source.h);
                                     NULL for other data */
} Data;

/* Returns 0, or -1 with kvc_fail set (a seed string that is not a decimal integer, or data_check's refusal). */
int synth_data(Data *d, const Config *cfg);
/* The same data, streamed (above): cfg must outlive d. Every head is made once here (data_check, Q, O, the
 * outlier mask), then again by each data_heads. Returns as synth_data. */
int synth_data_stream(Data *d, const Config *cfg);
/* Threads that data may make its layers' parts on once they are recorded (kvc run -j): a layer's part of a block
 * of at least 65536 draws is recorded in about 8 pieces (whole heads, groups or query heads each) and made again
 * from them at once. Streamed data is first made this many KV heads at a time. The numbers do not depend on it.
 * Default 1. */
void synth_set_threads(int n);
/* 1 when kvc run should stream cfg's data: synthetic, more than one layer or KV head, and more than
 * SYNTH_STREAM_NUMBERS numbers per tensor; the environment variable KVC_DATA_STREAM=1 (always) or 0 (never) overrides the size rule
 * (the tests compare both). */
#define SYNTH_STREAM_NUMBERS (1UL << 25)
int synth_stream_wanted(const Config *cfg);

/* KV heads [h0, h0 + nh) of layer l: their keys and values, (nh, T, D) each (V NULL without values): pointers
 * into d->K / d->V for whole data, else made now (ownK / ownV, freed by data_layer_free), bit for bit the same
 * numbers. Streamed data makes only those heads: every block of draws is recorded per piece, and a piece never
 * straddles two KV heads (or groups, or query heads, whichever the block is laid out by). data_layer: all H. */
typedef struct DataLayer {
    const double *K, *V;
    double *ownK, *ownV;
} DataLayer;
void data_heads(DataLayer *dl, const Data *d, size_t l, size_t h0, size_t nh);
void data_layer(DataLayer *dl, const Data *d, size_t l);
/* 1 when the data has values (d->V, or values data_layer makes) */
int data_has_values(const Data *d);
void data_layer_free(DataLayer *dl);
void data_free(Data *d);   /* safe on a zeroed Data */

/* The numerical limits of the quality path (README "Numerical edge cases"): every value of K, V, Q and O
 * finite, and for each (layer, KV head) max |q| x max |k| <= DATA_MAX_SCORE over its keys and the queries
 * that read them, so that no attention score can overflow. synth_data calls it; data loaded from files must
 * be checked the same way. Returns 0, or -1 with kvc_fail("data: ... (got ...)") set. */
#define DATA_MAX_SCORE 1e300
int data_check(const Data *d);

#endif
