/* expid: canonical text and FNV-1a id of each expanded experiment (see expid.h for the text format). */
#include "config/expid.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t expid_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void expid_format(char out[EXPID_HEX + 1], uint64_t id)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = EXPID_HEX - 1; i >= 0; i--) {
        out[i] = hex[id & 15];
        id >>= 4;
    }
    out[EXPID_HEX] = '\0';
}

int expid_parse(const char *s, size_t n, uint64_t *id)
{
    if (n != EXPID_HEX) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d;
        if (s[i] >= '0' && s[i] <= '9') d = s[i] - '0';
        else if (s[i] >= 'a' && s[i] <= 'f') d = s[i] - 'a' + 10;
        else return -1;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return 0;
}

/* seed and the rest of the config; the same for every experiment of a config */
static void data_text(FILE *f, const Config *cfg)
{
    const char *seed = cfg->seed;
    while (seed[0] == '0' && seed[1] != '\0') seed++;
    fprintf(f, "kvc-experiment v1\nseed=%s\nconfig=%s\n", seed, cfg->canon);
}

/* "method=M\n" and "param=value\n" per listed parameter, each line after `prefix` (a pipeline step: "steps.S.") */
static void method_text(FILE *f, const Experiment *ex, const char *prefix)
{
    const MethodDesc *m = ex->method;
    fprintf(f, "%smethod=%s\n", prefix, m->name);
    for (size_t i = 0; i < m->n_params; i++) {
        const ParamDesc *pd = &m->params[i];
        char v[64];
        if (!exp_param_listed(ex, i)) continue;
        exp_param_text(v, sizeof v, ex, i);
        fprintf(f, "%s%s=%s\n", prefix, pd->name, v);
    }
}

static void exp_text(FILE *f, const Experiment *ex)
{
    method_text(f, ex, "");
    for (size_t s = 0; s < ex->n_steps; s++) {
        char prefix[40];
        snprintf(prefix, sizeof prefix, "steps.%zu.", s);
        method_text(f, &ex->steps[s], prefix);
    }
}

static void close_text(FILE *f)
{
    if (fclose(f) != 0) {
        xalloc_die(0);
    }
}

char *expid_text(const Config *cfg, size_t i)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = xmemstream(&buf, &len, NULL);
    data_text(f, cfg);
    exp_text(f, &cfg->exps[i]);
    close_text(f);
    return buf;
}

typedef struct Key {
    uint64_t h;
    size_t i;
} Key;

static int by_hash(const void *a, const void *b)
{
    const Key *x = a, *y = b;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

int expid_all(uint64_t *ids, const Config *cfg)
{
    size_t n = cfg->n_exps;
    char *dbuf = NULL;
    size_t dlen = 0;
    FILE *f = xmemstream(&dbuf, &dlen, NULL);
    data_text(f, cfg);
    close_text(f);
    uint64_t base = expid_fnv1a(EXPID_FNV_BASIS, dbuf, dlen);
    free(dbuf);

    Key *k = xmalloc(n * sizeof *k);
    for (size_t i = 0; i < n; i++) {
        char *ebuf = NULL;
        size_t elen = 0;
        f = xmemstream(&ebuf, &elen, NULL);
        exp_text(f, &cfg->exps[i]);
        close_text(f);
        ids[i] = expid_fnv1a(base, ebuf, elen);
        free(ebuf);
        k[i].h = ids[i];
        k[i].i = i;
    }
    /* equal hashes: a repeated experiment (same text) gets "repeat=k"; different texts are a collision */
    qsort(k, n, sizeof *k, by_hash);
    int rc = 0;
    for (size_t a = 0; a < n && rc == 0;) {
        size_t b = a + 1;
        while (b < n && k[b].h == k[a].h) b++;
        if (b - a > 1) {
            char *first = expid_text(cfg, k[a].i);
            for (size_t j = a + 1; j < b; j++) {
                char *t = expid_text(cfg, k[j].i), line[48];
                if (strcmp(t, first) != 0)
                    rc = kvc_fail("experiment id: experiments %zu and %zu hash to one id (got a 64-bit collision)",
                                  cfg->exps[k[a].i].src, cfg->exps[k[j].i].src);
                int ln = snprintf(line, sizeof line, "repeat=%zu\n", j - a);
                ids[k[j].i] = expid_fnv1a(k[j].h, line, (size_t)ln);
                free(t);
            }
            free(first);
        }
        a = b;
    }
    /* and the final ids must be distinct */
    for (size_t i = 0; i < n && rc == 0; i++) {
        k[i].h = ids[i];
        k[i].i = i;
    }
    if (rc == 0) qsort(k, n, sizeof *k, by_hash);
    for (size_t i = 1; i < n && rc == 0; i++)
        if (k[i].h == k[i - 1].h)
            rc = kvc_fail("experiment id: experiments %zu and %zu hash to one id (got a 64-bit collision)",
                          cfg->exps[k[i - 1].i].src, cfg->exps[k[i].i].src);
    free(k);
    return rc;
}

uint64_t expid_row(uint64_t id, size_t layer, size_t head)
{
    char line[64];
    int n = snprintf(line, sizeof line, "layer=%zu\nhead=%zu\n", layer, head);
    return expid_fnv1a(id, line, (size_t)n);
}
