/* config: JSON experiment config -> validated Config. The only user of cJSON.
 *
 * Steps: read the file (or take text), parse JSON (errors give line and column), apply --set PATH=JSON
 * overrides, validate every key and value (unknown keys name the nearest valid one), fill defaults, and
 * expand list-valued method parameters into one Experiment per grid point (last key varies fastest),
 * filling `{name}` placeholders in labels. Every error is one line, "<file>: <json path>: <what> (got <value>)",
 * set with kvc_fail(); the functions then return -1 and leave nothing to free but the Config itself.
 *
 * Limits (checked before any allocation): tokens <= 16777216, head_dim <= 65536, layers and kv_heads <= 4096,
 * q_heads <= 65536; layers x kv_heads x tokens x head_dim <= 2^27 numbers per tensor, and the same bound for
 * the queries (layers x q_heads x queries x head_dim) and their attention weights (x tokens);
 * at most 1000000 expanded experiments.
 *
 * data.source "files" (README "Data from files"): the data block names tensor files instead of generators;
 * config_parse reads them (src/data/load.c, load_files) before the rest is validated, so the sizes come from their
 * shapes and every check that needs T or D (metrics, method parameters) runs against the loaded data with the
 * usual message. The tensors stay in cfg->files[].t until data_make (load.h) moves them into a Data.
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
typedef struct FileSpec {
    char *path;                   /* resolved against the config file's directory; NULL: not given */
    char *name;                   /* tensor name in a .safetensors file, or NULL */
    Tensor t;                     /* the tensor as read (src/data/load.c); moved into Data by data_make */
} FileSpec;

typedef struct Config {
    char *seed;                   /* the seed as a decimal integer string (any size) */
    int from_files;               /* data.source "files": K, V, Q, O come from files[], dims from their shapes */
    FileSpec files[CONFIG_N_FILES];
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
} Config;

/* Loads and validates `path` with the --set overrides sets[0..n_sets) ("PATH=JSON"). */
int config_load(Config *cfg, const char *path, char *const *sets, size_t n_sets);
/* The text of the config file `path` (at most 64 MiB) in *text[0..*len) (caller frees), as config_load reads
 * it; for those that read it again (src/config/expid.c, src/data/load.c). Returns 0, or -1 with kvc_fail and *text NULL. */
int config_read(char **text, size_t *len, const char *path);
/* Same from text in memory; `name` is used in messages in place of the file name. */
int config_parse(Config *cfg, const char *name, const char *text, size_t len, char *const *sets, size_t n_sets);
void config_free(Config *cfg);   /* safe on a zeroed or partly filled Config */

/* For experiment ids (src/config/expid.c): the config text[0..len) after the --set values, without "seed" and
 * "experiments", as canonical compact JSON (object keys sorted, numbers in shortest round-trip form) in *out
 * (caller frees). Call after config_parse accepted the same text and sets. Returns 0 or -1 with kvc_fail. */
int config_canonical_data(char **out, const char *name, const char *text, size_t len, char *const *sets,
                          size_t n_sets);

/* For kvc synth (src/data/load.c): the config text[0..len) after the --set values, with its "data" replaced by the
 * JSON object text data_json (seed, metrics and experiments as they are), as indented JSON in *out (caller
 * frees). Call after config_parse accepted the same text and sets. Returns 0 or -1 with kvc_fail. */
int config_files_json(char **out, const char *name, const char *text, size_t len, char *const *sets,
                      size_t n_sets, const char *data_json);

#endif
