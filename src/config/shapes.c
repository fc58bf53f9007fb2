/* shapes: the model shape table (see shapes.h; README "Model shapes" cites each config.json). */
#include "config/shapes.h"
#include "base/util.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* name, repository of the config.json, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim */
const ModelShape model_shapes[] = {
    {"llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 32, 32, 128},
    {"llama-2-13b", "meta-llama/Llama-2-13b-hf", 40, 40, 40, 128},
    {"llama-2-70b", "meta-llama/Llama-2-70b-hf", 80, 64, 8, 128},
    {"llama-3-8b", "meta-llama/Meta-Llama-3-8B", 32, 32, 8, 128},
    {"llama-3-70b", "meta-llama/Meta-Llama-3-70B", 80, 64, 8, 128},
    {"llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 32, 8, 128},
    {"llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 64, 8, 128},
    {"llama-3.2-1b", "meta-llama/Llama-3.2-1B", 16, 32, 8, 64},
    {"llama-3.2-3b", "meta-llama/Llama-3.2-3B", 28, 24, 8, 128},
    {"mistral-7b", "mistralai/Mistral-7B-v0.1", 32, 32, 8, 128},
    {"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 32, 8, 128},
    {"qwen2.5-7b", "Qwen/Qwen2.5-7B", 28, 28, 4, 128},
    {"qwen2.5-72b", "Qwen/Qwen2.5-72B", 80, 64, 8, 128},
    {"gemma-2-9b", "google/gemma-2-9b", 42, 16, 8, 256},
};
const size_t model_shape_count = sizeof model_shapes / sizeof model_shapes[0];

/* s in lower case into buf (cut to cap - 1 bytes) */
static void lower(char *buf, size_t cap, const char *s)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) buf[i] = (char)tolower((unsigned char)s[i]);
    buf[i] = '\0';
}

const ModelShape *model_shape_find(const char *name)
{
    char low[64];
    if (strlen(name) >= sizeof low) return NULL;
    lower(low, sizeof low, name);
    for (size_t i = 0; i < model_shape_count; i++)
        if (strcmp(model_shapes[i].name, low) == 0) return &model_shapes[i];
    return NULL;
}

const char *model_shape_nearest(const char *name)
{
    char low[72];
    lower(low, sizeof low, name);
    const char *best = model_shapes[0].name;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < model_shape_count; i++) {
        size_t d = edit_distance(low, model_shapes[i].name);
        if (d < bd) bd = d, best = model_shapes[i].name;
    }
    return best;
}

const char *model_shape_names(void)
{
    static char buf[512];
    buf[0] = '\0';
    for (size_t i = 0; i < model_shape_count; i++) {
        strncat(buf, i ? ", " : "", sizeof buf - strlen(buf) - 1);
        strncat(buf, model_shapes[i].name, sizeof buf - strlen(buf) - 1);
    }
    return buf;
}
