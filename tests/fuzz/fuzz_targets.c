/* fuzz_targets: the bodies of kvc's libFuzzer targets, shared by the fuzzers (tests/fuzz/fuzz_<target>.c, built
 * by `make fuzz`) and by the regression test tests/test_fuzz_regress.c (in `make test`), which runs every
 * committed seed and crasher under tests/fuzz/<target>/ through the same functions. Included as a source file
 * by both, so the Makefile needs no extra rule for it.
 *
 * Targets (each returns 0; a property violation prints what it saw and aborts, which libFuzzer reports):
 *   config       config_parse, including --set and grid expansion. Input layout: everything before the first
 *                NUL byte is a list of --set arguments ("PATH=JSON", one per line, at most 16); the rest is the
 *                config text. Without a NUL byte the whole input is the config and there are no --set arguments.
 *   npy          npy_fread on the input as a file (fmemopen).
 *   safetensors  safetensors_fread on the input, once taking the only tensor and once the tensor named "k".
 *   results      results_parse (the reader of --resume and kvc merge) on the input as a CSV and as a JSONL
 *                file, with --per-head detected, off and on.
 * Properties checked besides memory safety and undefined behaviour: a rejected input leaves one error line
 * of the form "<where>: <what> (got <value>)"; an accepted config has 1..CONFIG_MAX_ROWS experiments whose
 * parameters lie in the method's range and a label; an accepted tensor has 1..4 dimensions and finite values.
 * An accepted results file: rows lie back to back after the header, a torn tail covers exactly the rest of the
 * input, and its complete part parses again to the same rows with nothing torn. The config text and the
 * results text are passed in buffers of exactly their length (no terminating NUL), so reads past the end are
 * caught by ASan.
 */
#include "config/config.h"
#include "io/io_npy.h"
#include "io/io_safetensors.h"
#include "report/results.h"
#include "base/util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fuzz_config(const uint8_t *data, size_t size);
int fuzz_npy(const uint8_t *data, size_t size);
int fuzz_safetensors(const uint8_t *data, size_t size);
int fuzz_results(const uint8_t *data, size_t size);

static void fuzz_violation(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz property violated: %s: %s\n", what, detail ? detail : "");
    abort();
}

/* The message kvc_fail left: one line, non-empty, "... (got ...)" at its end, and naming `where` first. */
static void fuzz_check_error(const char *where, const char *where2)
{
    const char *m = kvc_errmsg();
    size_t n = strlen(m);
    if (n == 0) fuzz_violation("empty error message", NULL);
    if (strchr(m, '\n') || strchr(m, '\r')) fuzz_violation("error message has a line break", m);
    if (!strstr(m, " (got ") || m[n - 1] != ')') fuzz_violation("error message lacks \"(got ...)\" at its end", m);
    if (strncmp(m, where, strlen(where)) != 0 && !(where2 && strncmp(m, where2, strlen(where2)) == 0))
        fuzz_violation("error message does not start with where it happened", m);
}

int fuzz_config(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    const uint8_t *text = nul ? nul + 1 : data;
    size_t len = size - (size_t)(text - data);
    char *sets[16];
    size_t n_sets = 0;
    char *setbuf = NULL;
    if (nul) {
        size_t sl = (size_t)(nul - data);
        setbuf = xmalloc(sl + 1);
        memcpy(setbuf, data, sl);
        setbuf[sl] = '\0';
        for (char *p = setbuf; n_sets < 16;) {
            sets[n_sets++] = p;
            char *nl = strchr(p, '\n');
            if (!nl) break;
            *nl = '\0';
            p = nl + 1;
        }
    }
    char *copy = xmalloc(len);   /* exactly len bytes: no terminator to lean on */
    if (len) memcpy(copy, text, len);

    Config cfg;
    int rc = config_parse(&cfg, "fuzz.json", copy, len, sets, n_sets);
    if (rc != 0) {
        fuzz_check_error("fuzz.json", "--set ");
    } else {
        char buf[160];
        if (cfg.n_exps < 1 || cfg.n_exps > CONFIG_MAX_ROWS) fuzz_violation("experiment count out of range", NULL);
        if (!cfg.seed || !cfg.seed[0]) fuzz_violation("no seed", NULL);
        if (cfg.dims.T < 1 || cfg.dims.T > CONFIG_MAX_TOKENS || cfg.dims.D < 1 || cfg.dims.D > CONFIG_MAX_HEAD_DIM)
            fuzz_violation("tokens or head_dim out of range", NULL);
        for (size_t i = 0; i < cfg.n_exps; i++) {
            const Experiment *ex = &cfg.exps[i];
            if (!ex->label || !ex->method) fuzz_violation("experiment without label or method", NULL);
            for (size_t j = 0; j < ex->method->n_params; j++) {
                const ParamDesc *p = &ex->method->params[j];
                long v = ex->p[j], hi = p->hi;
                int ok;
                if (p->kind == PARAM_ENUM) {
                    for (hi = 0; p->choices[hi]; hi++) continue;
                    ok = v >= 0 && v < hi;
                } else if (p->kind == PARAM_NUM) {
                    ok = isfinite(ex->num[j]) && ex->num[j] >= p->num_lo && ex->num[j] <= p->num_hi;
                } else {
                    ok = v >= p->lo && v <= p->hi;
                }
                if (!ok) {
                    snprintf(buf, sizeof buf, "experiment %zu %s=%ld (%g)", i, p->name, v, ex->num[j]);
                    fuzz_violation("parameter out of range", buf);
                }
            }
        }
    }
    config_free(&cfg);
    config_free(&cfg);   /* freeing twice is safe: config_free zeroes */
    free(copy);
    free(setbuf);
    return 0;
}

/* An accepted tensor: 1..4 dimensions, finite values (count values checked, so ASan sees the whole buffer). */
static void fuzz_check_tensor(const Tensor *t)
{
    if (t->ndim < 1 || t->ndim > TENSOR_MAX_DIM) fuzz_violation("tensor rank out of range", NULL);
    size_t n = tensor_count(t);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(t->data[i])) fuzz_violation("accepted a tensor with a value that is not finite", NULL);
}

/* fmemopen of an empty buffer is refused by some C libraries: give it a one-byte buffer of length 0. */
static FILE *fuzz_open(const uint8_t *data, size_t size)
{
    static char empty[1];
    FILE *f = fmemopen(size ? (void *)data : empty, size, "rb");
    if (!f) fuzz_violation("fmemopen failed", NULL);
    return f;
}

int fuzz_npy(const uint8_t *data, size_t size)
{
    FILE *f = fuzz_open(data, size);
    Tensor t;
    if (npy_fread(&t, f, "fuzz.npy", CONFIG_MAX_NUMBERS) == 0) {
        fuzz_check_tensor(&t);
        tensor_free(&t);
    } else {
        fuzz_check_error("fuzz.npy", NULL);
        if (t.data || t.ndim) fuzz_violation("a failed read left the tensor filled", NULL);
    }
    tensor_free(&t);
    fclose(f);
    return 0;
}

int fuzz_safetensors(const uint8_t *data, size_t size)
{
    static const char *const names[2] = {NULL, "k"};
    for (int k = 0; k < 2; k++) {
        FILE *f = fuzz_open(data, size);
        Tensor t;
        if (safetensors_fread(&t, f, "fuzz.safetensors", names[k], CONFIG_MAX_NUMBERS) == 0) {
            fuzz_check_tensor(&t);
        } else {
            fuzz_check_error("fuzz.safetensors", NULL);
            if (t.data || t.ndim) fuzz_violation("a failed read left the tensor filled", NULL);
        }
        tensor_free(&t);
        fclose(f);
    }
    return 0;
}

/* The rows of an accepted results file: back to back from the end of the header to `complete`, and the torn
 * tail exactly the rest. */
static void fuzz_check_rows(const ResultFile *rf, size_t size)
{
    size_t at = rf->header_len;
    if (rf->complete > size || rf->complete + rf->torn != size) fuzz_violation("complete + torn != the input", NULL);
    for (size_t i = 0; i < rf->n; i++) {
        const ResultRow *r = &rf->rows[i];
        if (r->off != at || r->len == 0 || !r->label) fuzz_violation("rows not back to back, or without a label", NULL);
        at += r->len;
    }
    if (at != rf->complete && !(rf->n == 0 && rf->complete == 0)) fuzz_violation("rows do not end at `complete`", NULL);
}

int fuzz_results(const uint8_t *data, size_t size)
{
    char *text = xmalloc(size);   /* exactly size bytes: no terminator to lean on */
    if (size) memcpy(text, data, size);
    for (int fmt = 0; fmt < 2; fmt++)
        for (int ph = -1; ph <= 1; ph++) {
            Format f = fmt ? FORMAT_JSONL : FORMAT_CSV;
            ResultFile rf, again;
            if (results_parse(&rf, "fuzz.results", text, size, f, ph) != 0) {
                fuzz_check_error("fuzz.results", NULL);
                results_free(&rf);
                continue;
            }
            fuzz_check_rows(&rf, size);
            /* the complete part alone: the same rows, nothing torn */
            if (results_parse(&again, "fuzz.results", text, rf.complete, f, rf.per_head) != 0)
                fuzz_violation("the complete part of an accepted file is refused", kvc_errmsg());
            if (again.n != rf.n || again.torn != 0 || again.per_head != rf.per_head)
                fuzz_violation("the complete part parses to other rows", NULL);
            for (size_t i = 0; i < rf.n; i++)
                if (again.rows[i].id != rf.rows[i].id || strcmp(again.rows[i].label, rf.rows[i].label) != 0)
                    fuzz_violation("the complete part parses to other ids or labels", NULL);
            results_free(&again);
            results_free(&rf);
        }
    free(text);
    return 0;
}
