/* size: flags -> sizes. Exact integer arithmetic in bits (overflow-checked), printed in bytes and IEC units. */
#include "eval/size.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Flag {
    const char *name;
    uint64_t value;
    uint64_t lo, hi;
    int given;
} Flag;

enum { F_LAYERS, F_KV_HEADS, F_HEAD_DIM, F_TOKENS, F_BATCH, F_K_BITS, F_V_BITS, F_K_RANK, F_V_RANK, NFLAGS };

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    if (s[0] < '0' || s[0] > '9') return kvc_fail("size: %s: must be an integer in %llu..%llu (got \"%s\")", flag,
                                                  (unsigned long long)lo, (unsigned long long)hi, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return kvc_fail("size: %s: must be an integer in %llu..%llu (got \"%s\")", flag, (unsigned long long)lo,
                        (unsigned long long)hi, s);
    *out = v;
    return 0;
}

/* a * b with overflow check */
static int mul(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a) return -1;
    *out = a * b;
    return 0;
}

static void human(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) {
        bytes /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%.0f B", bytes);
    else snprintf(buf, cap, "%.2f %s", bytes, units[u]);
}

/* bits -> "N" bytes, with a fraction when bits is not a multiple of 8 */
static void bytes_str(char *buf, size_t cap, uint64_t bits)
{
    if (bits % 8 == 0) snprintf(buf, cap, "%llu", (unsigned long long)(bits / 8));
    else snprintf(buf, cap, "%llu.%03llu", (unsigned long long)(bits / 8), (unsigned long long)(bits % 8 * 125));
}

int size_command(int argc, char **argv)
{
    const uint64_t big = 1ULL << 40;
    Flag f[NFLAGS] = {
        {"--layers", 1, 1, 1u << 20, 0},   {"--kv-heads", 1, 1, 1u << 20, 0}, {"--head-dim", 0, 1, 65536, 0},
        {"--tokens", 1, 1, big, 0},        {"--batch", 1, 1, 1u << 30, 0},    {"--k-bits", 16, 1, 64, 0},
        {"--v-bits", 16, 1, 64, 0},        {"--k-rank", 0, 1, 65536, 0},      {"--v-rank", 0, 1, 65536, 0},
    };
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (strncmp(a, "--format", n) == 0 && n == 8) {
            val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!val) return kvc_fail("size: missing value after --format (got nothing)");
            if (strcmp(val, "csv") == 0) csv = 1;
            else if (strcmp(val, "table") == 0) csv = 0;
            else return kvc_fail("size: --format: must be table or csv (got \"%s\")", val);
            continue;
        }
        int k;
        for (k = 0; k < NFLAGS; k++)
            if (strlen(f[k].name) == n && strncmp(a, f[k].name, n) == 0) break;
        if (k == NFLAGS) return kvc_fail("size: unknown option; see kvc size --help (got \"%s\")", a);
        val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) return kvc_fail("size: missing value after %s (got nothing)", f[k].name);
        if (parse_u64(f[k].name, val, f[k].lo, f[k].hi, &f[k].value)) return -1;
        f[k].given = 1;
    }
    if (!f[F_HEAD_DIM].given) return kvc_fail("size: --head-dim is required (got nothing)");
    uint64_t D = f[F_HEAD_DIM].value;
    for (int k = F_K_RANK; k <= F_V_RANK; k++) {
        if (!f[k].given) f[k].value = D;
        if (f[k].value > D)
            return kvc_fail("size: %s: must be in 1..head-dim = %llu (got %llu)", f[k].name, (unsigned long long)D,
                            (unsigned long long)f[k].value);
    }
    uint64_t head_bits = f[F_K_RANK].value * f[F_K_BITS].value + f[F_V_RANK].value * f[F_V_BITS].value;
    uint64_t fp16_head_bits = 2 * D * 16, heads, token_bits, fp16_token_bits, count, total_bits, fp16_total_bits;
    if (mul(f[F_LAYERS].value, f[F_KV_HEADS].value, &heads) || mul(heads, head_bits, &token_bits) ||
        mul(heads, fp16_head_bits, &fp16_token_bits) || mul(f[F_TOKENS].value, f[F_BATCH].value, &count) ||
        mul(count, token_bits, &total_bits) || mul(count, fp16_token_bits, &fp16_total_bits))
        return kvc_fail("size: the cache size overflows 64-bit arithmetic (got %llu layers x %llu heads x %llu tokens"
                        " x %llu batch)", (unsigned long long)f[F_LAYERS].value,
                        (unsigned long long)f[F_KV_HEADS].value, (unsigned long long)f[F_TOKENS].value,
                        (unsigned long long)f[F_BATCH].value);
    double ratio = (double)fp16_head_bits / (double)head_bits;
    char b1[64], b2[64], b3[64], b4[64], h2[32], h3[32], h4[32];
    bytes_str(b1, sizeof b1, head_bits);
    bytes_str(b2, sizeof b2, token_bits);
    bytes_str(b3, sizeof b3, total_bits);
    bytes_str(b4, sizeof b4, fp16_total_bits);
    if (csv) {
        printf("layers,kv_heads,head_dim,tokens,batch,k_bits,v_bits,k_rank,v_rank,"
               "bytes_per_token_per_head,bytes_per_token,total_bytes,fp16_total_bytes,ratio\n");
        for (int k = 0; k < NFLAGS; k++) printf("%llu,", (unsigned long long)f[k].value);
        char r[40];
        fmt_double(r, sizeof r, ratio);
        printf("%s,%s,%s,%s,%s\n", b1, b2, b3, b4, r);
        return 0;
    }
    human(h2, sizeof h2, (double)token_bits / 8);
    human(h3, sizeof h3, (double)total_bits / 8);
    human(h4, sizeof h4, (double)fp16_total_bits / 8);
    printf("cache: %llu layers x %llu kv heads x head dim %llu, %llu tokens x batch %llu\n",
           (unsigned long long)f[F_LAYERS].value, (unsigned long long)f[F_KV_HEADS].value, (unsigned long long)D,
           (unsigned long long)f[F_TOKENS].value, (unsigned long long)f[F_BATCH].value);
    printf("keys: %llu numbers x %llu bits; values: %llu numbers x %llu bits (per token per head)\n",
           (unsigned long long)f[F_K_RANK].value, (unsigned long long)f[F_K_BITS].value,
           (unsigned long long)f[F_V_RANK].value, (unsigned long long)f[F_V_BITS].value);
    printf("%-24s %20s B\n", "bytes per token per head", b1);
    printf("%-24s %20s B  (%s)\n", "bytes per token", b2, h2);
    printf("%-24s %20s B  (%s)\n", "total", b3, h3);
    printf("%-24s %20s B  (%s)\n", "FP16 total", b4, h4);
    printf("%-24s %20.2fx\n", "ratio to FP16", ratio);
    return 0;
}
