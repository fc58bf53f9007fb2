/* opts: the option parser every command shares (see opts.h). */
#include "cli/opts.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SUGGEST_MAX = 3 };   /* the largest edit distance a "did you mean" suggestion may have */

void opt_init(OptParser *p, const char *cmd, int argc, char **argv, const OptSpec *spec)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd, p->argc = argc, p->argv = argv, p->spec = spec, p->i = 0;
}

/* The spec entry spelt like word[0..n) (its name or alias), or -1. */
static int find(const OptSpec *spec, const char *word, size_t n)
{
    for (int k = 0; spec[k].name; k++) {
        const char *names[2] = {spec[k].name, spec[k].alias};
        for (int j = 0; j < 2; j++)
            if (names[j] && strlen(names[j]) == n && strncmp(names[j], word, n) == 0) return k;
    }
    return -1;
}

/* "<cmd>: unknown option; [did you mean "--x"? ]see kvc <cmd> --help (got "<word>")": the suggestion is the
 * long option (or --help) nearest to the word's name part, when the word is a long option and one is close. */
static int unknown(const OptParser *p, const char *word, size_t n)
{
    const char *longs[64];
    size_t m = 0;
    for (int k = 0; p->spec[k].name && m < 63; k++) {
        const char *names[2] = {p->spec[k].name, p->spec[k].alias};
        for (int j = 0; j < 2 && m < 63; j++)
            if (names[j] && strncmp(names[j], "--", 2) == 0) longs[m++] = names[j];
    }
    longs[m++] = "--help";
    const char *near = NULL;
    char name[72];
    if (n > 2 && n < sizeof name && strncmp(word, "--", 2) == 0) {
        memcpy(name, word, n);
        name[n] = '\0';
        size_t typed = n - 2;   /* a suggestion must be nearer than half the word's length ("--bogus" is not "--out") */
        near = opt_nearest(name, longs, m, typed / 2 < SUGGEST_MAX ? typed / 2 : SUGGEST_MAX);
        /* or the shortest option that contains the word ("--heads" -> "--kv-heads") */
        for (size_t i = 0; !near && typed >= 3 && i < m; i++)
            if (strstr(longs[i] + 2, name + 2) && (!near || strlen(longs[i]) < strlen(near))) near = longs[i];
    }
    if (near)
        return kvc_fail("%s: unknown option; did you mean \"%s\"? see kvc %s --help (got \"%s\")", p->cmd, near,
                        p->cmd, word);
    return kvc_fail("%s: unknown option; see kvc %s --help (got \"%s\")", p->cmd, p->cmd, word);
}

int opt_next(OptParser *p)
{
    if (++p->i >= p->argc) return OPT_END;
    const char *a = p->argv[p->i];
    p->value = a;
    p->where[0] = '\0';
    if (p->args_only || a[0] != '-' || a[1] == '\0') return OPT_ARG;
    if (strcmp(a, "--") == 0) {
        p->args_only = 1;
        return opt_next(p);
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return OPT_HELP;
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    int k = find(p->spec, a, n);
    if (k < 0 && a[1] != '-' && a[2] != '\0') {   /* "-j4": a short option with its value attached */
        int s = find(p->spec, a, 2);
        if (s >= 0 && p->spec[s].has_value) {
            const OptSpec *o = &p->spec[s];
            snprintf(p->where, sizeof p->where, "%s: %s", p->cmd, o->name);
            p->value = a + 2;
            return s;
        }
    }
    if (k < 0) return unknown(p, a, n), OPT_ERROR;
    const OptSpec *o = &p->spec[k];
    snprintf(p->where, sizeof p->where, "%s: %s", p->cmd, o->name);
    if (!o->has_value) {
        p->value = NULL;
        if (eq) return kvc_fail("%s: takes no value (got \"%s\")", p->where, eq + 1), OPT_ERROR;
        return k;
    }
    if (eq) {
        p->value = eq + 1;
        return k;
    }
    if (p->i + 1 >= p->argc) return kvc_fail("%s: missing value after %s (got nothing)", p->cmd, a), OPT_ERROR;
    p->value = p->argv[++p->i];
    return k;
}

int opt_help_asked(int argc, char **argv, const OptSpec *spec)
{
    OptParser p;
    opt_init(&p, "", argc, argv, spec);
    for (int k; (k = opt_next(&p)) != OPT_END;)
        if (k == OPT_HELP) return 1;
    return 0;
}

int opt_uint(const char *s, const char *where, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
    if (*s < '0' || *s > '9' || errno || *end || v < lo || v > hi)
        return kvc_fail("%s: must be an integer in %llu..%llu (got \"%s\")", where, (unsigned long long)lo,
                        (unsigned long long)hi, s);
    *out = v;
    return 0;
}

int opt_count(const char *s, const char *where, uint64_t lo, uint64_t hi, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},       {"k", 1000ULL},  {"M", 1000000ULL}, {"G", 1000000000ULL}, {"T", 1000000000000ULL},
                 {"Ki", 1ULL << 10}, {"Mi", 1ULL << 20}, {"Gi", 1ULL << 30}, {"Ti", 1ULL << 40}};
    size_t digits = 0;
    while (s[digits] >= '0' && s[digits] <= '9') digits++;
    int unit = -1;
    for (int u = 0; digits > 0 && u < (int)(sizeof units / sizeof units[0]); u++)
        if (strcmp(s + digits, units[u].suffix) == 0) unit = u;
    unsigned long long v = 0;
    char *end = NULL;
    errno = 0;
    if (unit >= 0) v = strtoull(s, &end, 10);
    if (unit < 0 || errno || end != s + digits || (v != 0 && units[unit].mult > UINT64_MAX / v) ||
        v * units[unit].mult < lo || v * units[unit].mult > hi)
        return kvc_fail("%s: must be an integer in %llu..%llu, optionally with a suffix k M G T (x 1000^n) or "
                        "Ki Mi Gi Ti (x 1024^n) (got \"%s\")", where, (unsigned long long)lo,
                        (unsigned long long)hi, s);
    *out = v * units[unit].mult;
    return 0;
}

int opt_size(const char *s, const char *where, size_t lo, size_t hi, size_t *out)
{
    uint64_t v;
    if (opt_uint(s, where, lo, hi, &v)) return -1;
    *out = (size_t)v;
    return 0;
}

int opt_split(char *buf, const char *where, char **items, size_t max, size_t *n)
{
    size_t len = strlen(buf);
    if (len == 0) return kvc_fail("%s: empty list (got \"\")", where);
    *n = 0;
    for (char *s = buf;;) {
        char *comma = strchr(s, ',');
        if (comma == s || *s == '\0') {
            for (size_t i = 0; i < len; i++) buf[i] = buf[i] ? buf[i] : ',';   /* the list as given, for the message */
            return kvc_fail("%s: an empty item in the comma list (got \"%s\")", where, buf);
        }
        if (*n == max) {
            for (size_t i = 0; i < len; i++) buf[i] = buf[i] ? buf[i] : ',';
            return kvc_fail("%s: at most %zu values (got \"%s\")", where, max, buf);
        }
        items[(*n)++] = s;
        if (!comma) return 0;
        *comma = '\0';
        s = comma + 1;
    }
}

int opt_uint_list(const char *s, const char *where, size_t lo, size_t hi, size_t *out, size_t max, size_t *n)
{
    char *buf = xstrdup(s);
    char **items = xmalloc(max * sizeof *items);
    int rc = opt_split(buf, where, items, max, n);
    for (size_t k = 0; rc == 0 && k < *n; k++) rc = opt_size(items[k], where, lo, hi, &out[k]);
    free(items);
    free(buf);
    return rc;
}

const char *opt_nearest(const char *word, const char *const *names, size_t n, size_t max_dist)
{
    const char *best = n ? names[0] : NULL;
    size_t bd = (size_t)-1;   /* edit_distance gives (size_t)-1 for words over 64 characters */
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, names[i]);
        if (d < bd) bd = d, best = names[i];
    }
    return bd <= max_dist ? best : NULL;
}

int opt_config_path(const char *cmd, const char *v, const char **path)
{
    if (*path) return kvc_fail("%s: only one config file is accepted (got \"%s\" after \"%s\")", cmd, v, *path);
    *path = v;
    return 0;
}
