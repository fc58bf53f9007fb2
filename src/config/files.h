/* files: data.source "files" at parse time -- the header of every tensor file the data block names (shape and
 * dtype, no values) and the rules their shapes must follow (internal to src/config/; README "Data from files"
 * is the user's manual). The values are read later, when the data is made (src/data/load.c, data_make).
 *
 * Shapes (every tensor C order; any of F16, BF16, F32, F64). A shape is read right-aligned, missing leading
 * dimensions being 1:
 *   keys, values     (T, D), (H, T, D) or (L, H, T, D)          values: the same L, H, T, D as the keys
 *   queries          (D,), (N, D), (Hq, N, D) or (L, Hq, N, D)    L and D as the keys, Hq a multiple of H
 *   observe          (D,), (W, D), (Hq, W, D) or (L, Hq, W, D)    L, D as the keys, Hq as the queries, W <= T
 * (D,) is one query (N = 1). Observation query j is the query of position T - W + j. Limits as for synthetic
 * data (config.h): T <= 16777216, D <= 65536, L and H <= 4096, Hq <= 65536, at most 2^27 values per tensor,
 * L x Hq x N x max(T, D) <= 2^27 (the same for W); every dimension >= 1.
 *
 * Errors: a file the readers refuse gives their message ("<file>: <what> (got ...)", src/io/tensorio.h); shapes
 * that break the rules above give "<config>: data.files.<role>: shape (..) disagrees with data.files.keys (..):
 * head_dim 3 != 4 (got \"<file>\")" or a similar one-line message.
 *
 * May include: config/config.h, io/, base/. Used by schema.c.
 */
#ifndef KVC_CONFIG_FILES_H
#define KVC_CONFIG_FILES_H

#include "config/config.h"

/* Once cfg->files[].path/.name are set: reads the header of every given file into cfg->files[].info, checks the
 * shapes and fills cfg->dims.T, .D, .has_values, .has_query, layers, kv_heads, q_heads, query.n and observe.n.
 * `cfgname` prefixes the messages. 0, or -1 with kvc_fail set. */
int files_read_headers(Config *cfg, const char *cfgname);

#endif
