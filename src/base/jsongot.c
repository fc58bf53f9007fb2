/* jsongot: see jsongot.h. */
#include "base/jsongot.h"

#include <stdio.h>
#include <string.h>

void json_got(char *buf, size_t cap, const cJSON *v)
{
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    if (!s) {
        snprintf(buf, cap, "%s", v ? "?" : "nothing");
        return;
    }
    if (strlen(s) + 1 > cap && cap > 4) snprintf(buf, cap, "%.*s...", (int)(cap - 4), s);
    else snprintf(buf, cap, "%s", s);
    cJSON_free(s);
}
