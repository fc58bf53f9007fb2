/* methods: the registry of compression methods and the contract each one follows.
 *
 * A method takes the exact cache (K, V: (T, D), row-major double) and produces what the compressed cache
 * would hold, as the quality path needs it: reconstructed K'/V' (same shape), or the indices of the kept
 * tokens (eviction), plus the byte count of the stored form. Methods never compute attention; the shared
 * kernel in attention.c does that for every method. Adding a method is one file plus one row in
 * registry.c; `kvc methods`, config validation and the README's method table come from these rows.
 */
#ifndef KVC_METHODS_H
#define KVC_METHODS_H

#include <stddef.h>
#include <limits.h>
#include <stdint.h>

#define METHOD_MAX_PARAMS 12
#define PARAM_REQUIRED LONG_MIN   /* ParamDesc.def of a parameter that has no default */

typedef enum { PARAM_INT, PARAM_ENUM, PARAM_NUM } ParamKind;

typedef struct ParamDesc {
    const char *name;
    ParamKind kind;
    long def;                    /* default: the integer, or the index into choices */
    long lo, hi;                 /* static range for PARAM_INT (dims-dependent limits are in check()) */
    const char *const *choices;  /* PARAM_ENUM: NULL-terminated */
    const char *help;
    double num_def, num_lo, num_hi;  /* PARAM_NUM: default (unless def == PARAM_REQUIRED) and closed range */
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
} Experiment;
enum { POS_SCALAR = -1, POS_DEFAULT = -2 };

/* What a method may know about the data before it runs. */
typedef struct Dims {
    size_t T, D;          /* tokens, head dim */
    int has_values;       /* V is part of the cache */
    int has_query;        /* evaluation queries exist */
} Dims;

/* Inputs of a method for one (layer, KV head): the exact cache of that head and what the method may look at.
 * Methods run once per (layer, KV head) and know nothing of the others; the bytes of all heads are summed.
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
    size_t layer, head;   /* which (layer, KV head) this is, for messages */
} MethodInput;

/* Output of a method. Owned by the caller after apply(); free with compressed_free(). */
typedef struct Compressed {
    double *K, *V;        /* reconstructed tensors (T, D), or NULL when the method leaves that tensor exact */
    size_t *kept;         /* eviction: kept token indices, ascending; NULL when every token is kept */
    size_t n_kept;
    uint64_t bytes;       /* bytes of the stored cache: every tensor of the cache, every scale, basis, index */
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
    /* fills *out; returns 0 or -1 with kvc_fail set (e.g. LAPACK failure) */
    int (*apply)(Compressed *out, const Experiment *ex, const MethodInput *in);
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
/* JSON path a parameter's value came from, e.g. "experiments.0.bits.1" (static buffer, for messages) */
const char *exp_param_path(const Experiment *ex, const char *name);

void compressed_free(Compressed *c);

/* apply_to choices shared by several methods: "k", "v", "kv" */
extern const char *const apply_to_choices[];
enum { APPLY_K = 0, APPLY_V = 1, APPLY_KV = 2 };
int apply_to_check(const Experiment *ex, const Dims *d);   /* "v"/"kv" need data.values */

/* The method families, one file each. */
extern const MethodDesc method_quantize, method_sink_window, method_topk_attention, method_lowrank;

#endif
