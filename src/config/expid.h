/* expid: the stable id of an expanded experiment (and of a --per-head row), the key of --resume, --shard
 * and kvc merge.
 *
 * An id is the 64-bit FNV-1a hash of a canonical text, printed as 16 lowercase hex digits. The text is
 *
 *   kvc-experiment v1\n
 *   seed=42\n                        the seed as a decimal integer without leading zeros (42, "42", "042")
 *   config={"data":{...}}\n          everything else the config says but the experiments, after the --set
 *                                    values: compact JSON, object keys sorted, numbers in shortest
 *                                    round-trip form (Config.canon, written once by config_parse:
 *                                    src/config/canon.h)
 *   method=quantize\n                the method, then every parameter of the method in registry order,
 *   bits=8\naxis=token\napply_to=kv\n  defaults included (so "bits": 8 written or left out is one id)
 *   repeat=1\n                       only for the 2nd, 3rd, ... copy of an identical experiment in a config
 *
 * Parameters marked ParamDesc.id_when_set (added to a method after its first version) appear only when they
 * differ from their default. A pipeline ("method=pipeline\n") continues with its steps' lines, each prefixed
 * "steps.S." (S from 0): "steps.0.method=share_heads\nsteps.0.group=4\nsteps.1.method=quantize\n...".
 *
 * A --per-head row continues the hash of its experiment's id with "layer=L\nhead=H\n" (expid_row).
 *
 * What is not in the text does not change the id: the label (kvc checks labels separately), the position
 * of the experiment in the config, how a parameter value was given (scalar, list item, default), the
 * spelling of a number (0.5, 5e-1), JSON key order and whitespace. Everything else in the data block does,
 * even a data default written out explicitly: an id may change where the numbers would not, never the
 * other way round. An id names the experiment, not the kvc version that computed it.
 */
#ifndef KVC_EXPID_H
#define KVC_EXPID_H

#include "config/config.h"

#include <stddef.h>
#include <stdint.h>

#define EXPID_HEX 16   /* digits of a printed id */

/* The canonical text of experiment i of cfg (its data text is cfg->canon), without a repeat line (caller
 * frees). */
char *expid_text(const Config *cfg, size_t i);

/* Fills ids[0..cfg->n_exps) from a Config that config_parse accepted. Returns 0, or -1 with kvc_fail set when
 * two different experiments hash to one id (a 64-bit collision: never seen in practice). */
int expid_all(uint64_t *ids, const Config *cfg);

/* The id of the --per-head row (layer, head) of the experiment with id `id`. */
uint64_t expid_row(uint64_t id, size_t layer, size_t head);

/* FNV-1a 64 of n bytes, continuing from h (start with EXPID_FNV_BASIS). */
#define EXPID_FNV_BASIS 0xcbf29ce484222325ULL
uint64_t expid_fnv1a(uint64_t h, const void *p, size_t n);

void expid_format(char out[EXPID_HEX + 1], uint64_t id);   /* 16 lowercase hex digits */
/* Parses exactly 16 lowercase hex digits from s[0..n); returns 0 or -1. */
int expid_parse(const char *s, size_t n, uint64_t *id);

#endif
