/* load: data.source "files" -- K, V and the queries read from .npy / .safetensors files -- and the way back,
 * `kvc synth`, which writes the data kvc measures as files plus a config that loads them (README "Data from
 * files").
 *
 * Shapes (every tensor C order; readers: src/io/io_npy.h, src/io/io_safetensors.h; any of F16, BF16, F32, F64 is
 * converted exactly to double). A shape is read right-aligned, missing leading dimensions being 1:
 *   keys, values     (T, D), (H, T, D) or (L, H, T, D)          values: the same L, H, T, D as the keys
 *   queries          (D,), (N, D), (Hq, N, D) or (L, Hq, N, D)    L and D as the keys, Hq a multiple of H
 *   observe          (D,), (W, D), (Hq, W, D) or (L, Hq, W, D)    L, D as the keys, Hq as the queries, W <= T
 * (D,) is one query (N = 1). Observation query j is the query of position T - W + j. Limits as for synthetic
 * data (config.h): T <= 16777216, D <= 65536, L and H <= 4096, Hq <= 65536, at most 2^27 values per tensor,
 * L x Hq x N x max(T, D) <= 2^27 (the same for W); every dimension >= 1.
 *
 * Errors: a file the readers refuse gives their message ("<file>: <what> (got ...)"); shapes that break the
 * rules above give "<config>: data.files.<role>: shape (..) disagrees with data.files.keys (..): head_dim 3
 * != 4 (got \"<file>\")" or a similar one-line message. All return -1 with kvc_fail set.
 */
#ifndef KVC_LOAD_H
#define KVC_LOAD_H

#include "config/config.h"
#include "data/synth.h"

/* Called by config_parse for data.source "files" once cfg->files[].path/.name are set: reads every given file
 * into cfg->files[].t, checks the shapes and fills cfg->dims.T, .D, layers, kv_heads, q_heads, query.n and
 * observe.n. `cfgname` prefixes the messages. 0 or -1 (the tensors read so far stay in cfg, for config_free). */
int load_files(Config *cfg, const char *cfgname);

/* The data of a config: synth_data, or for data.source "files" the tensors of cfg->files[] moved into *d
 * (cfg keeps their shapes but no longer their values), with RoPE for pre-RoPE keys (data.rope), the outlier
 * mask (data.outlier_channels) and data_check. 0 or -1 with kvc_fail set (d then zeroed). */
int data_make(Data *d, Config *cfg);

typedef enum { SAVE_NPY, SAVE_SAFETENSORS } SaveFormat;

/* kvc synth: writes d (as data_make made it from the config at cfg_path with the --set values sets) into
 * directory dir (created if missing, one level): keys.npy, values.npy, queries.npy, observe.npy (those that
 * exist; float64, 4-D: (L, H, T, D), (L, Hq, N, D), (L, Hq, W, D)) or one cache.safetensors (F64, tensors
 * "keys", "values", "queries", "observe"), then files.json: the config with its data block replaced by one
 * that loads these files (plus data.rope for pre-RoPE keys and data.outlier_channels for declared outliers),
 * seed, metrics and experiments kept. Every file is written into a temporary directory inside dir and the set
 * is moved in at the end, files.json last (io/dirwrite.h): a failure never leaves dir mixing two data sets.
 * Returns 0, -1 with kvc_fail set for bad input (the directory cannot be created: exit 2), or 1 with
 * kvc_fail set when writing failed (exit 1). */
int load_save(const char *dir, SaveFormat fmt, const Data *d, const Config *cfg, const char *cfg_path,
              char *const *sets, size_t n_sets);

#endif
