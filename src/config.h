/* config: JSON experiment config -> validated Config. The only user of cJSON.
 *
 * Steps: read the file (or take text), parse JSON (errors give line and column), apply --set PATH=JSON
 * overrides, validate every key and value (unknown keys name the nearest valid one), fill defaults, and
 * expand list-valued method parameters into one Experiment per grid point (last key varies fastest),
 * filling `{name}` placeholders in labels. Every error is one line, "<file>: <json path>: <what> (got <value>)",
 * set with kvc_fail(); the functions then return -1 and leave nothing to free but the Config itself.
 *
 * Limits (checked before any allocation): tokens <= 16777216, head_dim <= 65536, tokens*head_dim <= 2^27
 * numbers per tensor, at most 1000000 expanded experiments.
 */
#ifndef KVC_CONFIG_H
#define KVC_CONFIG_H

#include "methods/methods.h"

#include <stddef.h>

#define CONFIG_MAX_TOKENS   16777216UL
#define CONFIG_MAX_HEAD_DIM 65536UL
#define CONFIG_MAX_NUMBERS  (1UL << 27)
#define CONFIG_MAX_ROWS     1000000UL

typedef enum { KEYS_NORMAL, KEYS_LOWRANK } KeysGenerator;

typedef struct Outlier {
    size_t channel;
    double scale;
} Outlier;

typedef struct Config {
    char *seed;                   /* the seed as a decimal integer string (any size) */
    Dims dims;                    /* T, D, whether values and a query exist */
    KeysGenerator keys_gen;
    size_t keys_rank;             /* lowrank generator */
    double keys_scale, keys_noise;
    Outlier *outliers;            /* keys.outliers, in config order */
    size_t n_outliers;
    size_t q_token;               /* query look_back */
    double q_weight, q_noise;
    Experiment *exps;             /* the expanded grid, in order */
    size_t n_exps;
} Config;

/* Loads and validates `path` with the --set overrides sets[0..n_sets) ("PATH=JSON"). */
int config_load(Config *cfg, const char *path, char *const *sets, size_t n_sets);
/* Same from text in memory; `name` is used in messages in place of the file name. */
int config_parse(Config *cfg, const char *name, const char *text, size_t len, char *const *sets, size_t n_sets);
void config_free(Config *cfg);   /* safe on a zeroed or partly filled Config */

#endif
