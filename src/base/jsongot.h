/* jsongot: a cJSON value as the short printable text of a "(got ...)" message, for the readers of JSON headers
 * and configs (io/io_safetensors.c, io/st_index.c, model/llama_load.c). */
#ifndef KVC_JSONGOT_H
#define KVC_JSONGOT_H

#include <cJSON.h>
#include <stddef.h>

/* buf (cap bytes) = v printed compactly, cut to cap - 4 characters with "..." when longer; "nothing" for NULL,
 * "?" when cJSON cannot print it. */
void json_got(char *buf, size_t cap, const cJSON *v);

#endif
