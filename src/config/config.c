/* config: the steps of config_load and config_parse in order -- read once, strict syntax, parse, --set,
 * validate the blocks, expand the grid, keep the canonical text -- and config_free (see config.h). What each
 * step checks lives in its own file: json.c, overrides.c, schema.c (with files.c), grid.c, canon.c. */
#include "config/config.h"
#include "config/canon.h"
#include "config/grid.h"
#include "config/json.h"
#include "config/overrides.h"
#include "config/schema.h"
#include "base/util.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text of the config file `path` (at most 64 MiB) in *text[0..*len) (caller frees), read in one pass from
 * whatever `path` is (a pipe or FIFO can be read once only). 0, or -1 with kvc_fail and *text NULL. */
static int read_text(char **text, size_t *len, const char *path)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kvc_fail("%s: cannot open the config (got %s)", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap >= (64u << 20)) {
                fclose(f);
                free(buf);
                return kvc_fail("%s: the config is larger than 64 MiB (got more than %zu bytes)", path, cap);
            }
            char *nb = xmalloc(cap * 2);
            memcpy(nb, buf, n);
            free(buf);
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return kvc_fail("%s: read error (got %s)", path, strerror(errno));
    }
    *text = buf;
    *len = n;
    return 0;
}

/* A string json_scan refused (a \u0000, or bytes that are not UTF-8) at text[off], inside the string that opens at
 * str_off, at JSON path `path`. */
static int bad_string(const char *name, const char *text, size_t len, int kind, size_t off, const char *path,
                      size_t str_off)
{
    char got[96];
    int line, col;
    json_show_string(got, sizeof got, text, len, str_off, off);
    json_position(text, off, &line, &col);
    if (!path[0]) path = "(top level)";
    if (kind == JSON_NUL_CHAR)
        return kvc_fail("%s: %s: a string must not hold \\u0000 (NUL), which would end it early in kvc (got %s)",
                        name, path, got);
    return kvc_fail("%s: %s: not valid UTF-8: byte 0x%02x at offset %zu (line %d, column %d) does not begin a "
                    "well-formed UTF-8 character (got %s)", name, path, (unsigned char)text[off], off, line, col, got);
}

/* cJSON allocates through xmalloc: out of memory while parsing is exit 1 with a message, not "malformed". */
static void *cjson_malloc(size_t n) { return xmalloc(n); }

int config_parse(Config *cfg, const char *name, const char *text, size_t len, char *const *sets, size_t n_sets)
{
    memset(cfg, 0, sizeof *cfg);
    static cJSON_Hooks hooks = {cjson_malloc, free};
    cJSON_InitHooks(&hooks);
    JsonCtx c = {name, sets, n_sets};
    if (memchr(text, '\0', len)) {
        const char *z = memchr(text, '\0', len);
        int line, col;
        json_position(text, (size_t)(z - text), &line, &col);
        return kvc_fail("%s:%d:%d: malformed JSON: a NUL byte in the file (got byte 0x00)", name, line, col);
    }
    size_t off, str_off;
    char path[256];
    int kind = json_scan_at(text, len, &off, path, sizeof path, &str_off);
    if (kind == JSON_NUL_CHAR || kind == JSON_BAD_UTF8) return bad_string(name, text, len, kind, off, path, str_off);
    cJSON *root = kind == JSON_OK ? cJSON_ParseWithLengthOpts(text, len, NULL, 0) : NULL;
    if (!root) {
        if (kind == JSON_OK) { /* passed the check but cJSON refused it (e.g. a bad \u surrogate) */
            const char *at = cJSON_GetErrorPtr();
            off = at && at >= text && at < text + len ? (size_t)(at - text) : len;
        }
        int line, col;
        json_position(text, off, &line, &col);
        char got[40];
        size_t k = 0;
        for (size_t i = off; i < len && k < 20 && text[i] != '\n' && text[i] != '\r'; i++) got[k++] = text[i];
        got[k] = '\0';
        if (kind == JSON_EOF || off >= len)
            return kvc_fail("%s:%d:%d: malformed JSON: unexpected end of file (got end of file)", name, line, col);
        if (kind == JSON_DEEP)
            return kvc_fail("%s:%d:%d: malformed JSON: nested deeper than %d levels (got \"%s\")", name, line, col,
                            JSON_MAX_DEPTH, got);
        return kvc_fail("%s:%d:%d: malformed JSON %s (got \"%s\")", name, line, col,
                        kind == JSON_TRAILING ? "after the end of the document" : "here", got);
    }
    int rc = 0;
    for (size_t i = 0; i < n_sets && rc == 0; i++) rc = overrides_apply(root, sets[i]);
    if (rc == 0) {
        static const char *const top[] = {"seed", "data", "metrics", "experiments", NULL};
        if (!cJSON_IsObject(root))
            rc = json_bad(&c, "(top level)", root, "the config must be a JSON object");
        else if (json_check_keys(&c, root, "", top) || schema_seed(&c, cfg, json_member(root, "seed")) ||
                 schema_data(&c, cfg, json_member(root, "data")) ||
                 schema_metrics(&c, cfg, json_member(root, "metrics")) ||
                 grid_expand(&c, cfg, json_member(root, "experiments")))
            rc = -1;
    }
    if (rc == 0) {
        cfg->canon = canon_data(root);
        cfg->json = root;
    } else {
        cJSON_Delete(root);
    }
    return rc;
}

int config_load(Config *cfg, const char *path, char *const *sets, size_t n_sets)
{
    memset(cfg, 0, sizeof *cfg);
    if (!path[0]) return kvc_fail("\"\": cannot open the config: the file name is empty (got \"\")");
    char *buf;
    size_t len;
    if (read_text(&buf, &len, path)) return -1;
    int rc = config_parse(cfg, path, buf, len, sets, n_sets);
    free(buf);
    return rc;
}

void config_free(Config *cfg)
{
    if (!cfg) return;
    free(cfg->seed);
    free(cfg->outliers);
    free(cfg->query.tokens);
    free(cfg->observe.tokens);
    for (int r = 0; r < CONFIG_N_FILES; r++) {
        free(cfg->files[r].path);
        free(cfg->files[r].name);
    }
    free(cfg->file_outliers);
    free(cfg->model.dir);
    free(cfg->model.input);
    free(cfg->model.answers);
    for (size_t i = 0; i < cfg->n_exps; i++) {
        free(cfg->exps[i].label);
        free(cfg->exps[i].steps);
    }
    free(cfg->exps);
    free(cfg->canon);
    free(cfg->notes);
    cJSON_Delete(cfg->json);
    memset(cfg, 0, sizeof *cfg);
}

int config_files_json(char **out, const Config *cfg, const char *data_json)
{
    *out = NULL;
    cJSON *data = cJSON_Parse(data_json);
    if (!cJSON_IsObject(data)) {
        cJSON_Delete(data);
        return kvc_fail("files.json: internal error: the data block is not a JSON object (got %.60s)", data_json);
    }
    cJSON *root = cJSON_Duplicate(cfg->json, 1);
    if (!root) xalloc_die(0);   /* cJSON allocates with xmalloc: not reached */
    cJSON_ReplaceItemInObjectCaseSensitive(root, "data", data);
    *out = canon_pretty(root);
    cJSON_Delete(root);
    return 0;
}
