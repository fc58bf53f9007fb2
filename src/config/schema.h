/* schema: the "seed", "data" and "metrics" blocks of a config -> the data fields of Config (internal to
 * src/config/; README "Config reference" is the user's manual, config.h says what each field means).
 *
 * Owns the rules of the data block: which keys each generator allows (an unknown key names the nearest),
 * ranges, defaults, and the size limits of config.h, checked before anything is allocated. Order matters to
 * what the later checks may know: the sizes first (T, D, layers, kv_heads, q_heads), then keys, values,
 * queries, observation queries, RoPE and the attention shaping, each checked against the sizes; with
 * "source": "files" the sizes come from the files' headers (files.h) instead, and only rope and
 * outlier_channels may be given beside them. metrics needs T. grid.c then checks the experiments against all
 * of this.
 *
 * May include: config/json.h, config/files.h, base/, cJSON. Used by config.c.
 */
#ifndef KVC_CONFIG_SCHEMA_H
#define KVC_CONFIG_SCHEMA_H

#include "config/config.h"
#include "config/json.h"

/* Each validates its node (NULL: absent; "seed" defaults to 0, "metrics" to its defaults, "data" is required)
 * into cfg. 0, or -1 with kvc_fail set (what was allocated stays in cfg, for config_free). */
int schema_seed(const JsonCtx *c, Config *cfg, const cJSON *node);
int schema_data(const JsonCtx *c, Config *cfg, const cJSON *data);
int schema_metrics(const JsonCtx *c, Config *cfg, const cJSON *m);

#endif
