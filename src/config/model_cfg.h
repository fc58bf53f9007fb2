/* model_cfg: the data block of data.source "model" (internal to src/config/; README "A real model in the loop"
 * is the user's manual, config.h's ModelSpec says what the fields mean).
 *
 *   {"source": "model", "model": DIR, "text": FILE | "token_ids": FILE.npy, "context": C, "continuation": N,
 *    "observe": {"window": W}, "sequence": i, "answers": [j, ...] | {"start": j, "step": s}}
 *
 * DIR and FILE are resolved against the config file's directory. Only headers are read (DIR/config.json through
 * llama_read_config, the token file's header or the text's size), so `kvc run --list` stays instant; the weights
 * and the ids are read when the data is made (src/data/model_source.c). Checks: exactly one of text and
 * token_ids; text only for a byte-level model (vocab_size 256, or 256 plus at most 256 special ids); the input
 * holds at least C + N + 1 tokens (the last one is only a target); C + N <= max_position_embeddings; the size
 * limits of config.h for (L, kv_heads, C, head_dim) and the queries. Observation queries: the last W context
 * positions (W <= C); none without "observe". "sequence": the row of a (B, n) token_ids file (required when
 * B > 1). "answers": continuation offsets j (1..N) whose token x[C+j] is an answer scored by recall_acc (the
 * retrieval model's convention, scripts/train_recall.py: {"start": 2, "step": 2}).
 *
 * May include: config/json.h, model/, base/. Used by schema.c.
 */
#ifndef KVC_CONFIG_MODEL_CFG_H
#define KVC_CONFIG_MODEL_CFG_H

#include "config/config.h"
#include "config/json.h"

/* Validates data (source "model") into cfg. 0, or -1 with kvc_fail set. */
int model_cfg_parse(const JsonCtx *c, Config *cfg, const cJSON *data);

#endif
