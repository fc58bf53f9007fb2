/* config: JSON experiment config -> validated Config. The room of src/config/ and its manual: the rest of kvc
 * includes this header (and expid.h) only.
 *
 * Steps: read the file once (or take text), check the JSON syntax strictly and parse it (errors give line and
 * column), apply --set PATH=JSON overrides, validate every key and value (unknown keys name the nearest valid
 * one), fill defaults, and expand list-valued method parameters into one Experiment per grid point (last key
 * varies fastest), filling `{name}` placeholders in labels. Every error is one line, "<file>: <json path>:
 * <what> (got <value>)", set with kvc_fail(); the functions then return -1 and leave nothing to free but the
 * Config itself.
 *
 * Read once: config_load reads the file a single time (a pipe, /dev/stdin, <(...) or a FIFO works), and the
 * Config keeps all that later stages need from the text: the canonical data text of the experiment ids
 * (Config.canon, expid.h) and the tree after the --set values (for kvc synth's files.json). Nothing reads the
 * config file again, so a file that changes after kvc read it cannot mix two configs in one run.
 *
 * Limits (checked before any allocation): tokens <= 16777216, head_dim <= 65536, layers and kv_heads <= 4096,
 * q_heads <= 65536; tokens x head_dim <= 2^27 numbers per KV head of a tensor (kvc run makes larger synthetic
 * data a few KV heads at a time; data held whole stays within 2^27 per tensor, src/data/load.h), and the same
 * bound for the queries (layers x q_heads x queries x head_dim) and a layer's attention weights (q_heads x queries
 * x max(tokens, head_dim));
 * at most 1000000 expanded experiments.
 *
 * data.source "files" (README "Data from files"): the data block names tensor files instead of generators;
 * config_parse reads only their headers (shape and dtype, src/io/tensorio.h tensor_read_info), so the sizes
 * come from their shapes and every check that needs T or D (metrics, method parameters) runs with the usual
 * message, while no value is read: a Config never holds tensors. Their values are read when the data is made
 * (src/data/load.h, data_make), which also refuses a value that is not finite.
 *
 * The parts (each file's header says what it owns; all but config.c are internal to src/config/):
 *   json.c       path-aware JSON getters and messages; the strict syntax scanner
 *   overrides.c  --set PATH=JSON on the parsed tree
 *   schema.c     the seed, data and metrics blocks (what keys, ranges, defaults, limits)
 *   files.c      data.source "files": the tensor headers and the shape rules
 *   grid.c       the experiments: grid expansion, method checks, labels and their {param} placeholders
 *   canon.c      the canonical text of the ids and the pretty writer of files.json
 *   config.c     config_load, config_parse, config_free, config_files_json: the order of the steps above
 *   expid.c      experiment ids from a parsed Config (expid.h)
 * config/ includes io/, methods/ and base/, never data/ or anything above it.
 */
#ifndef KVC_CONFIG_H
#define KVC_CONFIG_H

#include "methods/methods.h"
#include "io/tensorio.h"

#include <stddef.h>

#define CONFIG_MAX_TOKENS   16777216UL
#define CONFIG_MAX_HEAD_DIM 65536UL
#define CONFIG_MAX_NUMBERS  (1UL << 27)
#define CONFIG_MAX_ROWS     1000000UL
#define CONFIG_MAX_HEADS    4096UL     /* layers, kv_heads */
#define CONFIG_MAX_Q_HEADS  65536UL
#define CONFIG_MAX_LABEL    1024       /* bytes of a label (given, and once its placeholders are filled) */

typedef enum { KEYS_NORMAL, KEYS_LOWRANK } KeysGenerator;
typedef enum { QUERY_LOOK_BACK, QUERY_KEY_GAUSSIAN } QueryGenerator;
typedef enum { ROPE_HALF, ROPE_INTERLEAVED } RopeStyle;

typedef struct Outlier {
    size_t channel;
    double scale;
} Outlier;

/* data.query (evaluation queries) or data.observe (observation queries). */
typedef struct QuerySpec {
    QueryGenerator gen;
    size_t n;                     /* queries per (layer, query head): count, len(tokens), 1 for token, window */
    size_t *tokens;               /* look_back with given targets (n of them), or NULL: drawn uniformly */
    double weight, noise;
    double head_correlation;      /* evaluation queries: blend with a query shared by the GQA group (0: none) */
} QuerySpec;

/* data.source "files": one tensor file (data.files.keys, .values, .queries, .observe). */
typedef enum { FILE_KEYS, FILE_VALUES, FILE_QUERIES, FILE_OBSERVE, CONFIG_N_FILES } FileRole;
extern const char *const config_file_roles[CONFIG_N_FILES];   /* "keys", "values", "queries", "observe" */
typedef struct FileSpec {
    char *path;                   /* resolved against the config file's directory; NULL: not given */
    char *name;                   /* tensor name in a .safetensors file, or NULL */
    TensorInfo info;              /* its header: shape and dtype (the values are read by data_make) */
} FileSpec;

/* data.source "model" (README "A real model in the loop"; src/config/model_cfg.c): a Llama model directory and
 * its input. config_parse reads the model's config.json and the input's header only; the sizes follow from
 * them: layers, kv_heads, q_heads, head_dim from the model, tokens = context, queries = continuation. */
typedef struct ModelSpec {
    char *dir;                    /* data.model, resolved against the config file's directory */
    char *input;                  /* data.text or data.token_ids, resolved */
    int text;                     /* 1: data.text, a byte-level model reads the file's bytes as token ids */
    size_t context, continuation; /* C tokens prefilled and compressed, N tokens decoded after them */
    size_t sequence;              /* data.sequence: the row of a (B, n) token_ids file (0 otherwise) */
    size_t *answers;              /* data.answers: continuation offsets j (1..N, increasing) whose token x[C+j] is
                                     an answer (recall_acc), or NULL */
    size_t n_answers;
    size_t vocab;                 /* the model's vocab_size */
} ModelSpec;

struct cJSON;

typedef struct Config {
    char *seed;                   /* the seed as a decimal integer string (any size) */
    int from_files;               /* data.source "files": K, V, Q, O come from files[], dims from their shapes */
    FileSpec files[CONFIG_N_FILES];
    int from_model;               /* data.source "model": K, V, Q, O from running the model (ModelSpec) */
    ModelSpec model;
    unsigned char *file_outliers; /* (layers, D) data.outlier_channels with files (1: outlier), or NULL */
    Dims dims;                    /* T, D (of one head), whether values and evaluation queries exist */
    size_t layers, kv_heads, q_heads;   /* L, H_kv, H_q (a multiple of H_kv) */
    KeysGenerator keys_gen;
    size_t keys_rank;             /* lowrank generator */
    double keys_scale, keys_noise;
    Outlier *outliers;            /* keys.outliers, in config order */
    size_t n_outliers;
    size_t oc_count;              /* keys.outlier_channels: channels per layer (0: none) */
    double oc_lo, oc_hi;          /* their offset, as a multiple of the head's median |K|: log-uniform in [lo, hi] */
    double head_rho;              /* data.head_correlation.rho (0: independent heads) */
    size_t head_group;            /* data.head_correlation.group: consecutive KV heads sharing a component */
    size_t q_token;               /* query look_back with a single "token" (kept for the v1 form) */
    double q_weight, q_noise;     /* = query.weight, query.noise */
    QuerySpec query;              /* when dims.has_query */
    double q_bias;                /* query.bias: every query of KV head (l, h) gets + bias * u[l, h] (0: none) */
    QuerySpec observe;            /* observation queries when observe.n > 0 (n = window) */
    int has_rope;                 /* data.rope */
    double rope_base;
    size_t rope_dims;             /* rotated channels (even, <= D) */
    RopeStyle rope_style;
    int rope_cache_pre;           /* the cache holds pre-RoPE keys (evaluation rotates them) */
    size_t sink_tokens;           /* data.sinks.tokens (0: none) */
    double sink_share;
    size_t recent_tokens;         /* data.recent.tokens (0: none) */
    double recent_share;
    size_t hh_count;              /* data.heavy_hitters */
    double hh_share, hh_spread;
    size_t recall_k;              /* metrics.topk_recall_k (default min(32, T)) */
    Experiment *exps;             /* the expanded grid, in order */
    size_t n_exps;
    char *canon;                  /* the canonical data text of the experiment ids (expid.h; canon.h) */
    char *notes;                  /* notes for stderr, one "kvc: note: ..." line each (rows that share a label), or
                                   * NULL; kvc run prints them unless -q */
    struct cJSON *json;           /* the config as parsed, after the --set values (config_files_json reads it) */
} Config;

/* Reads `path` once (any readable file: a regular file, a pipe, /dev/stdin, a FIFO; at most 64 MiB) and
 * parses it with the --set overrides sets[0..n_sets) ("PATH=JSON"), as config_parse. */
int config_load(Config *cfg, const char *path, char *const *sets, size_t n_sets);
/* Same from text[0..len) in memory (NUL bytes refused, no terminator needed); `name` is used in messages in
 * place of the file name, and data files are resolved against its directory. */
int config_parse(Config *cfg, const char *name, const char *text, size_t len, char *const *sets, size_t n_sets);
void config_free(Config *cfg);   /* safe on a zeroed or partly filled Config */

/* For kvc synth (src/data/load.c): the parsed config (after the --set values) with its "data" replaced by the
 * JSON object text data_json (seed, metrics and experiments as they are), as indented JSON in *out (caller
 * frees; canon.h says how it is laid out). Returns 0 or -1 with kvc_fail (data_json is not a JSON object). */
int config_files_json(char **out, const Config *cfg, const char *data_json);

#endif
