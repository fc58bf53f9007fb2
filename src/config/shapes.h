/* shapes: the attention geometry of published models, by name: `kvc size --model NAME` and "data": {"shape":
 * NAME} in a config. A shape is what the KV cache of the model looks like, nothing more: layers, query heads,
 * KV heads and head dim (the cache holds layers x kv_heads x tokens x head_dim numbers for K and as many for V).
 *
 * Every value is copied from the model's published config.json on Hugging Face (num_hidden_layers,
 * num_attention_heads, num_key_value_heads, and head_dim where the file gives it, else hidden_size /
 * num_attention_heads); `source` names the repository. README "Model shapes" lists them. Names are lower case;
 * lookups ignore case ("Llama-3-8B" finds "llama-3-8b"). A value once published here does not change: a
 * config's experiment ids (expid.h) hash the shape's name, not its numbers.
 *
 * May include: base/. Used by config/schema.c (data.shape) and cli/size.c (--model, --baseline-model).
 */
#ifndef KVC_CONFIG_SHAPES_H
#define KVC_CONFIG_SHAPES_H

#include <stddef.h>

typedef struct ModelShape {
    const char *name;                           /* "llama-3-8b" */
    const char *source;                         /* "meta-llama/Meta-Llama-3-8B": the config.json's repository */
    unsigned layers, q_heads, kv_heads, head_dim;
} ModelShape;

extern const ModelShape model_shapes[];
extern const size_t model_shape_count;

/* The shape named name (any case), or NULL. */
const ModelShape *model_shape_find(const char *name);
/* The name of the shape nearest to name by edit distance (for "did you mean"). */
const char *model_shape_nearest(const char *name);
/* The names, comma-separated ("llama-2-7b, llama-2-13b, ..."), in a static buffer. */
const char *model_shape_names(void);

#endif
