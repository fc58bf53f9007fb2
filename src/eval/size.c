/* size: a cache geometry -> sizes. Exact integer arithmetic in bits (overflow-checked), printed in bytes and IEC
 * units. */
#include "eval/size.h"
#include "base/util.h"

#include <assert.h>
#include <stdio.h>

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

int size_print(const SizeQuery *q)
{
    uint64_t D = q->head_dim;
    assert(q->k_rank >= 1 && q->k_rank <= D && q->v_rank >= 1 && q->v_rank <= D);
    uint64_t head_bits = q->k_rank * q->k_bits + q->v_rank * q->v_bits;
    uint64_t fp16_head_bits = 2 * D * 16, heads, token_bits, fp16_token_bits, count, total_bits, fp16_total_bits;
    if (mul(q->layers, q->kv_heads, &heads) || mul(heads, head_bits, &token_bits) ||
        mul(heads, fp16_head_bits, &fp16_token_bits) || mul(q->tokens, q->batch, &count) ||
        mul(count, token_bits, &total_bits) || mul(count, fp16_token_bits, &fp16_total_bits))
        return kvc_fail("size: the cache size overflows 64-bit arithmetic (got %llu layers x %llu heads x %llu tokens"
                        " x %llu batch)", (unsigned long long)q->layers,
                        (unsigned long long)q->kv_heads, (unsigned long long)q->tokens,
                        (unsigned long long)q->batch);
    double ratio = (double)fp16_head_bits / (double)head_bits;
    char b1[64], b2[64], b3[64], b4[64], h2[32], h3[32], h4[32];
    bytes_str(b1, sizeof b1, head_bits);
    bytes_str(b2, sizeof b2, token_bits);
    bytes_str(b3, sizeof b3, total_bits);
    bytes_str(b4, sizeof b4, fp16_total_bits);
    if (q->csv) {
        printf("layers,kv_heads,head_dim,tokens,batch,k_bits,v_bits,k_rank,v_rank,"
               "bytes_per_token_per_head,bytes_per_token,total_bytes,fp16_total_bytes,ratio\n");
        const uint64_t v[] = {q->layers, q->kv_heads, D,           q->tokens, q->batch,
                              q->k_bits, q->v_bits,   q->k_rank, q->v_rank};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) printf("%llu,", (unsigned long long)v[k]);
        char r[40];
        fmt_double(r, sizeof r, ratio);
        printf("%s,%s,%s,%s,%s\n", b1, b2, b3, b4, r);
        return 0;
    }
    human(h2, sizeof h2, (double)token_bits / 8);
    human(h3, sizeof h3, (double)total_bits / 8);
    human(h4, sizeof h4, (double)fp16_total_bits / 8);
    printf("cache: %llu layers x %llu kv heads x head dim %llu, %llu tokens x batch %llu\n",
           (unsigned long long)q->layers, (unsigned long long)q->kv_heads, (unsigned long long)D,
           (unsigned long long)q->tokens, (unsigned long long)q->batch);
    printf("keys: %llu numbers x %llu bits; values: %llu numbers x %llu bits (per token per head)\n",
           (unsigned long long)q->k_rank, (unsigned long long)q->k_bits,
           (unsigned long long)q->v_rank, (unsigned long long)q->v_bits);
    printf("%-24s %20s B\n", "bytes per token per head", b1);
    printf("%-24s %20s B  (%s)\n", "bytes per token", b2, h2);
    printf("%-24s %20s B  (%s)\n", "total", b3, h3);
    printf("%-24s %20s B  (%s)\n", "FP16 total", b4, h4);
    printf("%-24s %20.2fx\n", "ratio to FP16", ratio);
    return 0;
}
