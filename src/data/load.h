/* load: data.source "files" -- K, V and the queries read from .npy / .safetensors files -- and the way back,
 * `kvc synth`, which writes the data kvc measures as files plus a config that loads them (README "Data from
 * files").
 *
 * The config stage has read the files' headers and checked their shapes (src/config/files.h holds the shape
 * rules and their messages), so a Config knows every size but holds no values. data_make reads the values
 * (any of F16, BF16, F32, F64 converted exactly to double; the readers are src/io/io_npy.h and
 * src/io/io_safetensors.h): a value that is not finite gives the reader's message ("<file>: value at flat
 * index ... is not finite (got nan)"), a file whose shape differs from the header read at parse time gives
 * "data.files.<role>: the file changed after the config was read: ...". All return -1 with kvc_fail set.
 */
#ifndef KVC_LOAD_H
#define KVC_LOAD_H

#include "config/config.h"
#include "data/synth.h"

/* The data of a config: synth_data, for data.source "model" model_source_make (data/model_source.h: the model
 * is run once), or for data.source "files" the values of cfg->files[] read into *d, with
 * RoPE for pre-RoPE keys (data.rope), the outlier mask (data.outlier_channels) and data_check. cfg is not
 * changed: data_make may be called again. Synthetic data is held whole, so it must have at most CONFIG_MAX_NUMBERS
 * numbers per tensor (the config's own limit is per KV head). 0 or -1 with kvc_fail set (d then zeroed). */
int data_make(Data *d, const Config *cfg);

/* data_make for kvc run: synthetic data that synth_stream_wanted picks is streamed (synth_data_stream: K and V
 * made a layer at a time by data_layer; cfg must outlive d); anything else as data_make. */
int data_make_run(Data *d, const Config *cfg);

typedef enum { SAVE_NPY, SAVE_SAFETENSORS } SaveFormat;

/* kvc synth: writes d (as data_make made it from cfg) into directory dir (created if missing, one level):
 * keys.npy, values.npy, queries.npy, observe.npy (those that exist; float64, 4-D: (L, H, T, D), (L, Hq, N, D),
 * (L, Hq, W, D)) or one cache.safetensors (F64, tensors "keys", "values", "queries", "observe"), then
 * files.json: the config as parsed (after its --set values, config_files_json) with its data block replaced by
 * one that loads these files (plus data.rope for pre-RoPE keys and data.outlier_channels for declared
 * outliers), seed, metrics and experiments kept. Every file is written into a temporary directory inside dir and
 * the set is moved in at the end, files.json last (io/dirwrite.h): a failure never leaves dir mixing two data sets.
 * Returns 0, -1 with kvc_fail set for bad input (the directory cannot be created: exit 2), or 1 with
 * kvc_fail set when writing failed (exit 1). */
int load_save(const char *dir, SaveFormat fmt, const Data *d, const Config *cfg);

#endif
