/* methods: the registry of compression methods and the contract each one follows.
 *
 * A method takes the exact cache (K, V: (T, D), row-major double) and produces what the compressed cache
 * would hold, described once: the tensors it stores (StoreTensors of src/store/store.h, in Compressed.stored),
 * and from them what the quality path needs: reconstructed K'/V' (same shape) or the indices of the kept tokens
 * (eviction), and the byte count (store_bytes of the stored tensors, plus what a decode step does not read:
 * index bytes, outlier records, a cast's FP32 scales). kvc run's decode timing (src/eval/timing.h) times a decode
 * step over exactly those stored tensors. Methods never compute attention; the shared kernel in attention.c does
 * that for every method. Adding a method is one file plus one row in registry.c; `kvc methods`, config
 * validation and the README's method table come from these rows. Its apply stores each tensor it rewrites with
 * src/store/store.h (a format of the type table, or STORE_INTN), keeps those StoreTensors in out->stored,
 * reconstructs K'/V' from them and counts their store_bytes; a form no decode path reads sets stored.none with
 * the reason. tests/test_timing.c then checks its stored form against its bytes, tests/test_methods.c its rules.
 */
#ifndef KVC_METHODS_H
#define KVC_METHODS_H

#include "store/store.h"

#include <stddef.h>
#include <limits.h>
#include <stdint.h>

#define METHOD_MAX_PARAMS 12
#define PARAM_REQUIRED LONG_MIN   /* ParamDesc.def of a parameter that has no default */

/* PARAM_BOOL: JSON true/false, stored in Experiment.p as 1/0, written "true"/"false" (labels, ids, JSONL). */
typedef enum { PARAM_INT, PARAM_ENUM, PARAM_NUM, PARAM_BOOL } ParamKind;

typedef struct ParamDesc {
    const char *name;
    ParamKind kind;
    long def;                    /* default: the integer, or the index into choices */
    long lo, hi;                 /* static range for PARAM_INT (dims-dependent limits are in check()) */
    const char *const *choices;  /* PARAM_ENUM: NULL-terminated */
    const char *help;
    double num_def, num_lo, num_hi;  /* PARAM_NUM: default (unless def == PARAM_REQUIRED) and closed range */
    /* 1: the parameter appears in row ids and JSONL "params" only when its value differs from the default.
     * For parameters added to a method after its first version: ids of rows written before stay valid. */
    int id_when_set;
} ParamDesc;

struct MethodDesc;

/* One row of the expanded experiment grid. */
typedef struct Experiment {
    char *label;
    const struct MethodDesc *method;
    long p[METHOD_MAX_PARAMS];          /* value of each of method->params, in table order (PARAM_INT, PARAM_ENUM) */
    double num[METHOD_MAX_PARAMS];      /* value of each PARAM_NUM parameter, same index */
    size_t src;                         /* index of the experiment object in the config */
    int pos[METHOD_MAX_PARAMS];         /* where each value came from: list position, or POS_SCALAR / POS_DEFAULT */
    /* method "pipeline": its steps, each a full Experiment of one method (no label, no steps of its own) */
    struct Experiment *steps;
    size_t n_steps;
    int is_step;                        /* 1: this is steps[step] of a pipeline (messages say experiments.N.steps.S) */
    size_t step;
} Experiment;
enum { POS_SCALAR = -1, POS_DEFAULT = -2 };

/* What a method may know about the data before it runs. */
typedef struct Dims {
    size_t T, D;          /* tokens, head dim */
    int has_values;       /* V is part of the cache */
    int has_query;        /* evaluation queries exist */
    size_t kv_heads;      /* H, KV heads per layer (0: unknown, checks then assume 1) */
    size_t n_obs;         /* W, observation queries per query head (0: none) */
} Dims;

/* Inputs of a method for one (layer, KV head): the exact cache of that head and what the method may look at.
 * Methods run once per (layer, KV head) and know nothing of the others (except those with apply_layer, which
 * get the inputs of a layer's heads together); the bytes of all heads are summed.
 * Inside a pipeline a step gets the rows a previous step kept (T of them, positions in pos) and, after a low-rank
 * step, the stored coefficients (D = the rank), as if they were the cache (README "Composition").
 * G = H_q / H_kv query heads read this KV head (GQA). */
typedef struct MethodInput {
    size_t T, D;
    const double *K;      /* (T, D) what the cache holds (pre-RoPE keys when the config caches them so) */
    const double *V;      /* (T, D), or NULL when the cache holds keys only */
    const double *w_ref;  /* (T,) ORACLE ONLY: total exact attention weight of the evaluation queries of the G
                             query heads (summed over query head, then query); NULL without queries */
    /* For methods that pick tokens from attention (H2O, SnapKV, TOVA, ...): they may look only here. */
    const double *K_att;  /* (T, D) the keys attention reads (post-RoPE); NULL means K */
    const double *Q_obs;  /* (G, W, D) observation queries, attention space, or NULL; query at obs_pos[j] may
                             attend to tokens 0..obs_pos[j] only (causal) */
    const size_t *obs_pos;   /* (W,) ascending token positions of the observation queries */
    size_t n_obs_heads;   /* G, 0 without observation queries */
    size_t n_obs;         /* W */
    size_t layer, head;   /* which (layer, KV head) this is, for messages and seeded draws */
    const size_t *pos;    /* (T,) ascending token positions of the rows, or NULL: row t is token t. Set inside a
                             pipeline after an eviction step; compare with obs_pos through it */
    const char *seed;     /* the config's seed, a decimal integer string (methods that draw: `random`), or NULL */
    struct SvdCache *svd; /* decompositions shared by the run's experiments (src/methods/svdcache.h), or NULL; set
                             only while K and V are the run's data tensors (never on rows a pipeline made) */
    struct Pool *pool;    /* threads the method may split independent work over (base/pool.h; quantize: K and V at
                             once), or NULL: in turn. The evaluation sets it only when nothing else runs on it */
} MethodInput;

/* The stored form of one (layer, KV head): the tensors the compressed cache holds for it, exactly as the method
 * wrote them (src/store/store.h), which a decode step reads (kvc run's decode_ns, src/eval/timing.h). An empty
 * StoreTensor (all zero, codes NULL) is a tensor not stored. What a decode step does not read is counted in
 * Compressed.bytes only: eviction indices, outlier records (a form with them sets none), a cast's per-head or
 * per-layer FP32 scale (one number folded into the query); a basis stored once per layer (lowrank joint) is held
 * by each head's tensor. */
typedef struct MethodStored {
    StoreTensor K, V;     /* the stored rows of the head (every token, or the kept ones), low rank with their basis
                             when stored so; V empty when the cache holds keys only */
    StoreTensor Kr, Vr;   /* a second segment, the tokens after those (KIVI's FP16 residual window), or empty */
    size_t share;         /* KV heads of the layer that read one stored head (share_heads' group); 0 means 1 */
    int reads_first;      /* 1: this head reads the stored head of the first head of its group (share > 1) and
                             holds no tensors */
    const char *none;     /* set: the decode path does not read what the method stores, and why (a static string);
                             the tensors may then be empty */
} MethodStored;

/* Output of a method. Owned by the caller after apply(); free with compressed_free(). */
typedef struct Compressed {
    double *K, *V;        /* reconstructed tensors (T, D), or NULL when the method leaves that tensor exact */
    size_t *kept;         /* eviction: kept token indices, ascending; NULL when every token is kept */
    size_t n_kept;
    uint64_t bytes;       /* bytes of the stored cache: every tensor of the cache (store_bytes of the stored tensors,
                             storage shared by heads split over them), every scale, basis, index */
    /* Optional factored form of a rewritten tensor (low rank), read by pipelines: X' = coef (T, rank) @ basis
     * (rank, D), both stored in FP16. basis_shared: one basis serves every head of an apply_layer call. */
    double *Kcoef, *Kbasis, *Vcoef, *Vbasis;
    size_t k_rank, v_rank;
    int basis_shared;
    /* The tensors the method stored for this head. apply fills the ones it writes (the tensors it rewrites, in
     * the role they have: K in K, Kr; V in V, Vr) or sets none; a tensor it leaves exact, and the kept rows of an
     * eviction, it may leave empty: method_run stores those in FP16. Inside a pipeline, a step's stored
     * tensors of the roles it rewrote become the pipeline's (pipeline.c). */
    MethodStored stored;
} Compressed;

typedef struct MethodDesc {
    const char *name;
    const char *factor;          /* which factor of the size formula it shrinks */
    const char *summary;         /* one line for `kvc methods` */
    const ParamDesc *params;
    size_t n_params;
    int needs_query;             /* an oracle that looks at the evaluated query */
    /* dims-dependent checks; kvc_fail("<exp_param_path>: ...") and -1 on a bad value */
    int (*check)(const Experiment *ex, const Dims *d);
    /* fills *out (see Compressed: K'/V' or kept, bytes, and the stored tensors); returns 0 or -1 with kvc_fail
     * set (e.g. LAPACK failure); out stays freeable either way */
    int (*apply)(Compressed *out, const Experiment *ex, const MethodInput *in);
    /* Optional, for methods that work across the KV heads of a layer (share_heads, lowrank joint, pipeline):
     * when set and the experiment is layer-wide (below), evaluation calls it once per layer instead of once per
     * head (method_run with one head: apply_layer on that head alone). in[0..H) are the layer's KV
     * heads in order (their Q_obs are contiguous: in[h + 1].Q_obs == in[h].Q_obs + G * W * D); out[0..H) are
     * zeroed by the caller and filled per head, bytes split over the heads so that they sum to the layer's
     * (README "How bytes are counted"). Returns 0 or -1 with kvc_fail set; out stays freeable either way. */
    int (*apply_layer)(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H);
    /* Optional, with apply_layer: 1 when this experiment needs every KV head of the layer at once (a joint basis, a
     * per-layer scale), 0 when apply_layer on each head alone gives that head what it gives it in the whole layer
     * (the heads then run on threads, and streamed data is evaluated a few heads at a time). NULL: always 1. */
    int (*layer_wide)(const Experiment *ex);
    /* 1: the method keeps a subset of the tokens (returns kept, no K/V) and counts them in FP16 plus index or
     * state bytes; pipelines run such steps before the steps that rewrite values. */
    int evicts;
    /* evicting methods: tokens kept per head from a cache of d->T tokens (pipelines check later steps with it) */
    size_t (*kept_tokens)(const Experiment *ex, const Dims *d);
} MethodDesc;

extern const MethodDesc *const method_registry[];
extern const size_t method_count;

const MethodDesc *method_find(const char *name);
/* index of a parameter in m->params, or -1 */
int method_param_index(const MethodDesc *m, const char *name);
/* value of a named parameter of an experiment (asserts that the parameter exists) */
long exp_param(const Experiment *ex, const char *name);
const char *exp_param_str(const Experiment *ex, const char *name);  /* PARAM_ENUM as its string */
double exp_param_num(const Experiment *ex, const char *name);       /* PARAM_NUM */
/* parameter i as text: the integer, the choice, or the shortest round-trip number (labels, ids, output) */
void exp_param_text(char *buf, size_t cap, const Experiment *ex, size_t i);
/* a parameter's default as text ("required" when it has none), and its range ("2..8", "token|channel") */
void param_default_text(char *buf, size_t cap, const ParamDesc *p);
void param_range_text(char *buf, size_t cap, const ParamDesc *p);
/* 1 when parameter i appears in row ids and JSONL "params" (always, unless ParamDesc.id_when_set) */
int exp_param_listed(const Experiment *ex, size_t i);
/* JSON path a parameter's value came from, e.g. "experiments.0.bits.1" or "experiments.2.steps.1.bits"
 * (static buffer, for messages) */
const char *exp_param_path(const Experiment *ex, const char *name);
/* JSON path of a key of the experiment or pipeline step itself, e.g. "experiments.0.method" or
 * "experiments.2.steps.1.budget" (a parameter that was not given); a static buffer of its own, for messages */
const char *exp_path(const Experiment *ex, const char *key);

void compressed_free(Compressed *c);   /* its stored tensors too */
void method_stored_free(MethodStored *s);   /* store_free of its four tensors; s is left empty (none kept) */

/* Runs experiment ex on the KV heads in[0..H) of a layer into out[0..H) (zeroed first): apply_layer once, or
 * apply per head. stored 1: then completes each head's stored form: a tensor of the cache the method left empty
 * (and that it did not mark none, nor a head that reads its group's first) is stored in FP16 over the rows the
 * head keeps (every row, or out->kept); stored 0: the stored tensors are freed (a run without decode timing).
 * Returns 0, or -1 with kvc_fail set (out stays freeable). */
int method_run(Compressed *out, const Experiment *ex, const MethodInput *in, size_t H, int stored);
/* st = rows[0..n) of x (T, D) (rows NULL: the first n rows) in FP16, allocated. */
void method_store_f16(StoreTensor *st, const double *x, const size_t *rows, size_t n, size_t D);

/* Share i (0..n-1) of `total` bytes stored once for n heads: floor(total / n), plus one for the first
 * total mod n heads, so that the shares sum to total (--per-head rows of shared storage). */
uint64_t method_split_bytes(uint64_t total, size_t n, size_t i);
/* 1 when experiment ex must see the KV heads of a layer at once (MethodDesc.layer_wide), else 0. */
int method_layer_wide(const Experiment *ex);
/* apply() of a method that has apply_layer: apply_layer on a layer of one head. */
int method_apply_one_head(Compressed *out, const Experiment *ex, const MethodInput *in);

/* apply_to choices shared by several methods: "k", "v", "kv" */
extern const char *const apply_to_choices[];
enum { APPLY_K = 0, APPLY_V = 1, APPLY_KV = 2 };
int apply_to_check(const Experiment *ex, const Dims *d);   /* "v"/"kv" need data.values */

/* The method families, one file each. */
extern const MethodDesc method_quantize, method_sink_window, method_topk_attention, method_lowrank;
extern const MethodDesc method_window, method_h2o, method_snapkv, method_tova, method_knorm, method_random;
extern const MethodDesc method_share_heads, method_pipeline, method_none;   /* none.c: the identity */
extern const MethodDesc method_kivi, method_cast, method_ggml;   /* quantizers: kivi.c, cast.c, ggml.c */

#endif
