/* provenance: the build, the machine and the sidecar FILE.meta.json (see provenance.h). */
#include "cli/provenance.h"
#include "base/util.h"
#include "decode/decode.h"
#include "eval/bench.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifndef KVC_COMMIT
#define KVC_COMMIT "unknown"
#endif
#ifndef KVC_BUILD_FLAGS
#define KVC_BUILD_FLAGS "(unknown)"
#endif

int prov_argc;
char **prov_argv;

const char *prov_commit(void) { return KVC_COMMIT[0] ? KVC_COMMIT : "unknown"; }
const char *prov_build_flags(void) { return KVC_BUILD_FLAGS; }

const char *prov_compiler(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

/* OpenBLAS's strings, without a trailing space or newline */
static const char *trimmed(char *buf, size_t cap, const char *s)
{
    snprintf(buf, cap, "%s", s ? s : "unknown");
    for (size_t n = strlen(buf); n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n'); n--) buf[n - 1] = '\0';
    return buf;
}

const char *prov_blas(void)
{
    static char buf[256];
    return trimmed(buf, sizeof buf, openblas_get_config());
}

const char *prov_blas_core(void)
{
    static char buf[64];
    return trimmed(buf, sizeof buf, openblas_get_corename());
}

/* ---- SHA-256 (FIPS 180-4) ---------------------------------------------------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void prov_sha256_hex(char out[65], const void *data, size_t n)
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) sha256_block(h, p + i);
    unsigned char last[128] = {0};
    size_t r = n - i, len = r + 9 <= 64 ? 64 : 128;   /* the rest, 0x80, zeros, the length in bits (64-bit BE) */
    if (r) memcpy(last, p + i, r);
    last[r] = 0x80;
    uint64_t bits = (uint64_t)n * 8;
    for (int b = 0; b < 8; b++) last[len - 1 - b] = (unsigned char)(bits >> (8 * b));
    for (size_t j = 0; j < len; j += 64) sha256_block(h, last + j);
    for (int j = 0; j < 8; j++) snprintf(out + 8 * j, 9, "%08x", (unsigned)h[j]);
}

/* ---- records ----------------------------------------------------------------------------------------------- */

/* The whole file, or NULL with kvc_fail set. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return kvc_fail("%s: cannot read (got %s)", path, strerror(errno)), NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *bigger = xmalloc(cap * 2);
            memcpy(bigger, buf, n);
            free(buf);
            buf = bigger, cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return kvc_fail("%s: cannot read (got a read error)", path), NULL;
    }
    *len = n;
    return buf;
}

cJSON *prov_file(const char *path)
{
    size_t n;
    char *buf = slurp(path, &n);
    if (!buf) return NULL;
    char hex[65];
    prov_sha256_hex(hex, buf, n);
    free(buf);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "sha256", hex);
    cJSON_AddNumberToObject(o, "bytes", (double)n);
    return o;
}

static void now_utc(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(buf, cap, "unknown");
}

cJSON *prov_run_new(void)
{
    cJSON *run = cJSON_CreateObject();
    cJSON *cmd = cJSON_AddArrayToObject(run, "command");
    for (int i = 0; i < prov_argc; i++) cJSON_AddItemToArray(cmd, cJSON_CreateString(prov_argv[i]));
    char date[32];
    now_utc(date, sizeof date);
    cJSON_AddStringToObject(run, "started", date);
    cJSON_AddNullToObject(run, "finished");
    cJSON_AddNullToObject(run, "exit_status");
    cJSON *k = cJSON_AddObjectToObject(run, "kvc");
    cJSON_AddStringToObject(k, "version", KVC_VERSION);
    cJSON_AddStringToObject(k, "commit", prov_commit());
    cJSON_AddStringToObject(k, "compiler", prov_compiler());
    cJSON_AddStringToObject(k, "build_flags", prov_build_flags());
    cJSON_AddStringToObject(k, "blas", prov_blas());
    cJSON_AddStringToObject(k, "blas_core", prov_blas_core());
    cJSON_AddStringToObject(k, "decode_isa", decode_isa());
    cJSON *m = cJSON_AddObjectToObject(run, "machine");
    char cpu[256], os[512];
    bench_cpu_model(cpu, sizeof cpu);
    cJSON_AddStringToObject(m, "cpu", cpu);
    cJSON_AddNumberToObject(m, "logical_cpus", (double)bench_cpu_count());
    struct utsname u;
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    else snprintf(os, sizeof os, "unknown");
    cJSON_AddStringToObject(m, "os", os);
    return run;
}

void prov_run_finish(cJSON *run, int exit_status)
{
    char date[32];
    now_utc(date, sizeof date);
    cJSON_ReplaceItemInObjectCaseSensitive(run, "finished", cJSON_CreateString(date));
    cJSON_ReplaceItemInObjectCaseSensitive(run, "exit_status", cJSON_CreateNumber(exit_status));
}

static char *sidecar_name(const char *file)
{
    size_t n = strlen(file) + sizeof ".meta.json";
    char *name = xmalloc(n);
    snprintf(name, n, "%s.meta.json", file);
    return name;
}

cJSON *prov_sidecar_runs(const char *file)
{
    char *name = sidecar_name(file);
    size_t n;
    FILE *probe = fopen(name, "rb");
    char *text = NULL;
    if (probe) {
        fclose(probe);
        text = slurp(name, &n);
    }
    free(name);
    if (!text) return NULL;
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
    cJSON *copy = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "kvc_provenance")) && cJSON_IsArray(runs)
                      ? cJSON_Duplicate(runs, 1)
                      : NULL;
    cJSON_Delete(root);
    return copy;
}

int prov_sidecar(const char *file, const cJSON *before, const cJSON *run)
{
    struct stat st;
    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    cJSON *runs = before ? cJSON_Duplicate(before, 1) : cJSON_CreateArray();
    cJSON_AddItemToArray(runs, cJSON_Duplicate(run, 1));
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "kvc_provenance", 1);
    cJSON_AddStringToObject(root, "file", file);
    cJSON_AddItemToObject(root, "runs", runs);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        xalloc_context("provenance");
        xalloc_die(0);   /* exit 1, as xmalloc */
    }
    char *name = sidecar_name(file);
    size_t tn = strlen(name) + 16;
    char *tmp = xmalloc(tn);
    snprintf(tmp, tn, "%s.tmp.XXXXXX", name);
    int rc = 0, fd = mkstemp(tmp);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        rc = kvc_fail("%s: cannot write the provenance file (got %s)", name, strerror(errno));
        if (fd >= 0) close(fd), unlink(tmp);
    } else {
        mode_t um = umask(0);
        umask(um);
        int bad = fchmod(fd, 0666 & ~um) != 0;
        bad |= fputs(text, f) == EOF || fputc('\n', f) == EOF;
        bad |= fclose(f) != 0;
        if (bad || rename(tmp, name) != 0) {
            rc = kvc_fail("%s: cannot write the provenance file (got %s)", name, strerror(errno));
            unlink(tmp);
        }
    }
    free(tmp);
    free(name);
    cJSON_free(text);
    return rc;
}
