/* test_limits.c: the input and memory limits of issue 15 that are best seen from inside.
 *
 * Checks: utf8_check on well-formed and broken UTF-8 (RFC 3629's table: overlong forms, surrogates, code points
 * above U+10FFFF, cut sequences, lone continuation bytes); json_scan_at's kinds, offsets and JSON paths for a
 * \u0000 and for bytes that are not UTF-8 (in values, keys, lists, at the top level); xmalloc under a small
 * RLIMIT_AS exits 1 with "kvc: <context>: out of memory (got a request for N bytes)" (a child process);
 * memlimit_check names `ulimit -v` when the request does not fit (a child process; both skipped, visibly,
 * under AddressSanitizer, which cannot run under RLIMIT_AS); memory_estimate of a parsed
 * config equals the formula of src/eval/memory.h worked out by hand.
 * Helper mode: `test_limits --estimate CONFIG [--per-head] [--no-timing]` prints the estimate's parts and total
 * in bytes, one "name value" line each (tests/test_inputs.py compares it with measured peaks).
 * Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. */
#include "base/memlimit.h"
#include "base/util.h"
#include "config/config.h"
#include "config/json.h"
#include "eval/evaluate.h"
#include "eval/memory.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void check_utf8(void)
{
    static const struct {
        const char *s;
        size_t bad;   /* expected result; (size_t)-1: strlen(s) */
    } v[] = {
        {"plain ascii", (size_t)-1},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", (size_t)-1},   /* 2, 3 and 4 bytes */
        {"\xf4\x8f\xbf\xbf", (size_t)-1},                               /* U+10FFFF, the largest */
        {"\xed\x9f\xbf\xee\x80\x80", (size_t)-1},                       /* U+D7FF and U+E000 around the surrogates */
        {"ab\xff", 2},
        {"ab\xc0\xaf", 2},                                              /* overlong '/' */
        {"\xc1\xbf", 0},
        {"\xe0\x80\xaf", 0},                                            /* overlong, 3 bytes */
        {"\xf0\x80\x80\xaf", 0},                                        /* overlong, 4 bytes */
        {"x\xed\xa0\x80", 1},                                           /* U+D800 */
        {"\xf4\x90\x80\x80", 0},                                        /* U+110000 */
        {"\xf5\x80\x80\x80", 0},
        {"ok\x80", 2},                                                  /* a lone continuation byte */
        {"\xe2\x82", 0},                                                /* cut at the end */
        {"\xe2\x82z", 0},                                               /* cut inside */
        {"\xc3\xa9\xe2", 2},
    };
    int ok = 1;
    char why[128] = "";
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t n = strlen(v[i].s), want = v[i].bad == (size_t)-1 ? n : v[i].bad, got = utf8_check(v[i].s, n);
        if (got != want && ok) {
            ok = 0;
            snprintf(why, sizeof why, "vector %zu: got %zu, want %zu", i, got, want);
        }
    }
    check(ok, "utf8-check-vectors", "%s", why);
}

static void check_scan(void)
{
    static const struct {
        const char *text;
        int kind;
        size_t off;
        const char *path;
    } v[] = {
        {"{\"a\": {\"b\": [1, \"x\\u0000y\"]}}", JSON_NUL_CHAR, 18, "a.b.1"},
        {"{\"experiments\": [{\"method\": \"q\\u0000\"}]}", JSON_NUL_CHAR, 30, "experiments.0.method"},
        {"{\"lab\\u0000el\": 1}", JSON_NUL_CHAR, 5, "lab"},
        {"\"top\\u0000\"", JSON_NUL_CHAR, 4, ""},
        {"{\"a\": \"\\\\u0000\"}", JSON_OK, 0, ""},                         /* an escaped backslash, then text */
        {"{\"a\": \"\\u0001\\u00e9\"}", JSON_OK, 0, ""},                    /* other escapes are fine */
        {"{\"a\": [\"ok\", \"b\xff\"]}", JSON_BAD_UTF8, 15, "a.1"},
        {"{\"k\\u0041\xc3\": 1}", JSON_BAD_UTF8, 9, "kA"},                   /* a key, cut at the bad byte */
        {"{\"a\": \"\xe2\x82\"}", JSON_BAD_UTF8, 7, "a"},
        {"{\"caf\xc3\xa9\": \"\xf0\x9f\x98\x80\"}", JSON_OK, 0, ""},
        {"{\"caf\xc3\xa9\": {\"x\\u0000\": 1}}", JSON_NUL_CHAR, 13, "caf\xc3\xa9.x"},   /* UTF-8 keys as they are */
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char path[256], name[64];
        size_t off = 0, str_off = 0;
        int kind = json_scan_at(v[i].text, strlen(v[i].text), &off, path, sizeof path, &str_off);
        snprintf(name, sizeof name, "json-scan-strings-%zu", i);
        int ok = kind == v[i].kind && (kind == JSON_OK || (off == v[i].off && strcmp(path, v[i].path) == 0));
        check(ok, name, "kind %d off %zu path \"%s\", want kind %d off %zu path \"%s\"", kind, off, path, v[i].kind,
              v[i].off, v[i].path);
    }
}

/* Runs fn in a child under RLIMIT_AS = limit bytes; returns its exit status (or 128 + signal) and its stderr. */
static int in_child(void (*fn)(void), rlim_t limit, char *err, size_t cap)
{
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        struct rlimit r = {limit, limit};
        setrlimit(RLIMIT_AS, &r);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fd[0], err + n, cap - 1 - n)) > 0) n += (size_t)got;
    err[n] = '\0';
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void oom_child(void)
{
    xalloc_context("cfg.json: experiments.%d (%s)", 3, "int4\nlabel");
    volatile char *p = xmalloc((size_t)1 << 33);
    p[0] = 1;
}

static void limit_child(void)
{
    MemBound b;
    int big = memlimit_check((uint64_t)1 << 33, 0, &b);
    fprintf(stderr, "%d %s\n", big, big ? b.name : "-");
    int small = memlimit_check(1 << 20, 0, &b);
    fprintf(stderr, "%d\n", small);
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static void check_oom(void)
{
#ifdef UNDER_ASAN   /* ASan reserves terabytes of address space: no RLIMIT_AS child can run, and its allocator
                     * reports out of memory itself */
    printf("SKIP xmalloc-out-of-memory-exit-1-with-where: built with AddressSanitizer\n");
    printf("SKIP memlimit-check-names-ulimit-v: built with AddressSanitizer\n");
    return;
#endif
    char err[512];
    rlim_t lim = (rlim_t)1 << 30;
    int rc = in_child(oom_child, lim, err, sizeof err);
    const char *want = "kvc: cfg.json: experiments.3 (int4 label): out of memory (got a request for 8589934592 bytes)\n";
    check(rc == 1 && strcmp(err, want) == 0, "xmalloc-out-of-memory-exit-1-with-where",
          "exit %d, stderr \"%s\", want exit 1 and \"%s\"", rc, err, want);
    rc = in_child(limit_child, lim, err, sizeof err);
    check(rc == 0 && strcmp(err, "-1 the address-space limit (ulimit -v)\n0\n") == 0, "memlimit-check-names-ulimit-v",
          "exit %d, stderr \"%s\"", rc, err);
}

/* The estimate of one config against the formula of memory.h, by hand:
 * L = 2, H = 2, Hq = 4, T = 1000, D = 64, values, N = 3 queries, W = 5 observation queries; n = 256000, a layer
 * 128000 (held whole: n is below SYNTH_STREAM_NUMBERS).
 * data = 8 (2n + L Hq (N + W) D) + 8 W = 8 (512000 + 4096) + 40 = 4128808
 * making = 8 (2 x 128000 (a layer's K and V) + Hq N T) (normal keys: no second copy) = 8 x 268000 = 2144000
 * reference = 8 (L Hq N (D + 2 T) + L H T) = 8 (24 x 2064 + 4000) = 428288
 * experiment: quantize (rewrites): 8 (4 nq + 2 T D + 2 H T D) = 8 (96 + 128000 + 256000) = 3072768;
 *             lowrank joint (a whole layer): + 8 x 2 H T D for the layer's input, + 8 x 2 H T D for the SVD
 *             = 3072768 + 2 x 2048000 = 7168768 (the largest; experiments.1)
 *             h2o (evicts): 8 (4 nq + 2 T D) = 8 (96 + 128000) = 1024768
 * timing = 4 (2n) + 4 L Hq D = 2048000 + 2048 = 2050048
 * rows = 2 x 3 x sizeof(Row)
 * total = data + max(making, reference + experiment + timing) + rows + 32 MiB */
static void check_estimate(void)
{
    const char *text =
        "{\"data\": {\"tokens\": 1000, \"head_dim\": 64, \"layers\": 2, \"kv_heads\": 2, \"q_heads\": 4,"
        " \"keys\": {\"generator\": \"normal\"}, \"values\": {\"generator\": \"normal\"},"
        " \"query\": {\"generator\": \"look_back\", \"count\": 3}, \"observe\": {\"window\": 5}},"
        " \"experiments\": [{\"method\": \"quantize\", \"bits\": 4},"
        " {\"method\": \"lowrank\", \"rank\": 4, \"joint\": true},"
        " {\"method\": \"h2o\", \"budget\": 100}]}";
    Config cfg;
    if (config_parse(&cfg, "est.json", text, strlen(text), NULL, 0)) {
        check(0, "memory-estimate-formula", "config_parse: %s", kvc_errmsg());
        return;
    }
    MemRun r = {0, 1, 1, NULL};
    MemEstimate e;
    memory_estimate(&e, &cfg, &r);
    uint64_t rows = 2 * 3 * sizeof(Row);
    uint64_t want = 4128808 + (428288 + 7168768 + 2050048) + rows + MEMORY_OVERHEAD;
    check(e.data == 4128808 && e.making == 2144000 && e.reference == 428288 && e.experiment == 7168768 &&
          e.largest == 1 && e.timing == 2050048 && e.rows == rows && e.total == want, "memory-estimate-formula",
          "data %llu making %llu reference %llu experiment %llu (experiments.%zu) timing %llu rows %llu total %llu, "
          "want total %llu", (unsigned long long)e.data, (unsigned long long)e.making,
          (unsigned long long)e.reference, (unsigned long long)e.experiment, e.largest, (unsigned long long)e.timing,
          (unsigned long long)e.rows, (unsigned long long)e.total, (unsigned long long)want);
    unsigned char runs[3] = {0, 0, 1};   /* a shard with h2o alone: its working set, and no timing */
    MemRun r2 = {0, 0, 1, runs};
    memory_estimate(&e, &cfg, &r2);
    check(e.experiment == 1024768 && e.largest == 2 && e.timing == 0 && e.total == 4128808 + 2144000 + rows + MEMORY_OVERHEAD,
          "memory-estimate-shard-and-no-timing", "experiment %llu (experiments.%zu), timing %llu, total %llu",
          (unsigned long long)e.experiment, e.largest, (unsigned long long)e.timing, (unsigned long long)e.total);
    config_free(&cfg);
}

static int print_estimate(int argc, char **argv)
{
    Config cfg;
    if (config_load(&cfg, argv[2], NULL, 0)) {
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
        return 2;
    }
    MemRun r = {0, 1, 1, NULL};
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--per-head") == 0) r.per_head = 1, r.timing = 0;
        if (strcmp(argv[i], "--no-timing") == 0) r.timing = 0;
        if (strcmp(argv[i], "-j") == 0 && i + 1 < argc) eval_set_threads(atoi(argv[++i]));   /* kvc run -j */
    }
    MemEstimate e;
    memory_estimate(&e, &cfg, &r);
    printf("data %llu\nmaking %llu\nreference %llu\nexperiment %llu\ntiming %llu\nrows %llu\ntotal %llu\n",
           (unsigned long long)e.data, (unsigned long long)e.making, (unsigned long long)e.reference,
           (unsigned long long)e.experiment, (unsigned long long)e.timing, (unsigned long long)e.rows,
           (unsigned long long)e.total);
    config_free(&cfg);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--estimate") == 0) return print_estimate(argc, argv);
    check_utf8();
    check_scan();
    check_oom();
    check_estimate();
    return check_failures ? 1 : 0;
}
