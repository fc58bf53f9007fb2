/* grid: the "experiments" list of a config -> Config.exps, one Experiment per grid point (internal to
 * src/config/; README "Config reference" and "Parameter grids" are the user's manual).
 *
 * Each experiment object names a method of the registry (src/methods/methods.h) and gives its parameters; a
 * parameter given as a list is a grid axis. Axes are taken in the object's key order and the last one varies
 * fastest; a pipeline's steps (method objects without labels) form one grid, in step order and key order.
 * Every value is validated once per object (ParamDesc ranges and choices), required parameters must be there,
 * and each expanded experiment passes its method's check against Config.dims (T, D, kv_heads, n_obs), the
 * message then prefixed with the file name. Labels: `{param}` placeholders are filled with the point's values
 * (pipelines: `{steps.S.param}`, or `{param}` when one step has it); without a label the default is
 * "method key=value ..." over the keys the object gives (a pipeline joins its steps' with " | ").
 * Limits: at most 64 steps, at most CONFIG_MAX_ROWS experiments in all.
 *
 * May include: config/json.h, methods/, base/, cJSON. Used by config.c, after the data block is validated.
 */
#ifndef KVC_CONFIG_GRID_H
#define KVC_CONFIG_GRID_H

#include "config/config.h"
#include "config/json.h"

/* Validates the list at "experiments" (NULL: absent) and appends its grid points to cfg->exps. 0, or -1 with
 * kvc_fail set (experiments expanded so far stay in cfg, for config_free). */
int grid_expand(const JsonCtx *c, Config *cfg, const cJSON *list);

#endif
