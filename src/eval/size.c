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

/* One output field: its name (the CSV column and JSON key), and its value as CSV/JSON text (NULL: JSON null,
 * an empty CSV cell); str: a JSON string. */
typedef struct Field {
    const char *name;
    char val[64];
    int is_null, str;
} Field;

static void set_u(Field *f, const char *name, uint64_t v)
{
    f->name = name, f->is_null = 0, f->str = 0;
    snprintf(f->val, sizeof f->val, "%llu", (unsigned long long)v);
}

static void set_s(Field *f, const char *name, const char *v)
{
    f->name = name, f->is_null = v == NULL, f->str = 1;
    snprintf(f->val, sizeof f->val, "%s", v ? v : "");
}

static void set_num(Field *f, const char *name, const char *text)   /* a number already written as text */
{
    set_s(f, name, text);
    f->str = 0;
}

static void set_ratio(Field *f, const char *name, double r)
{
    char t[40];
    fmt_double(t, sizeof t, r);
    set_num(f, name, t);
}

static void print_json(const Field *f, size_t n, int pretty)
{
    printf("{");
    for (size_t i = 0; i < n; i++) {
        printf("%s%s\"%s\":%s", i ? "," : "", pretty ? "\n  " : "", f[i].name, pretty ? " " : "");
        if (f[i].is_null) printf("null");
        else if (f[i].str) printf("\"%s\"", f[i].val);   /* names and repositories from shapes.c: no escapes */
        else printf("%s", f[i].val);
    }
    printf("%s}\n", pretty ? "\n" : "");
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
    /* the baseline: another geometry in FP16 at full rank, or the FP16 cache itself */
    uint64_t bL = q->layers, bH = q->kv_heads, bD = D, base_bits = fp16_total_bits, b_heads;
    if (q->has_baseline) {
        bL = q->base_layers, bH = q->base_kv_heads, bD = q->base_head_dim;
        if (mul(bL, bH, &b_heads) || mul(b_heads, 2 * bD * 16, &base_bits) || mul(base_bits, count, &base_bits))
            return kvc_fail("size: the baseline cache size overflows 64-bit arithmetic (got %llu layers x %llu heads "
                            "x %llu tokens x %llu batch)", (unsigned long long)bL, (unsigned long long)bH,
                            (unsigned long long)q->tokens, (unsigned long long)q->batch);
    }
    double ratio = (double)fp16_head_bits / (double)head_bits;
    double base_ratio = (double)base_bits / (double)total_bits;
    char b1[64], b2[64], b3[64], b4[64], b5[64], h2[32], h3[32], h4[32], h5[32];
    bytes_str(b1, sizeof b1, head_bits);
    bytes_str(b2, sizeof b2, token_bits);
    bytes_str(b3, sizeof b3, total_bits);
    bytes_str(b4, sizeof b4, fp16_total_bits);
    bytes_str(b5, sizeof b5, base_bits);
    int extra = q->model != NULL || q->has_baseline;   /* the seven columns after ratio (size.h) */
    if (q->format != SIZE_TABLE) {
        Field f[24];
        size_t n = 0;
        if (q->format != SIZE_CSV) set_s(&f[n++], "model", q->model), set_s(&f[n++], "model_source", q->model_source);
        const char *const names[] = {"layers", "kv_heads", "head_dim", "tokens", "batch",
                                     "k_bits", "v_bits",   "k_rank",   "v_rank"};
        const uint64_t v[] = {q->layers, q->kv_heads, D, q->tokens, q->batch, q->k_bits, q->v_bits, q->k_rank, q->v_rank};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) set_u(&f[n++], names[k], v[k]);
        set_num(&f[n++], "bytes_per_token_per_head", b1);
        set_num(&f[n++], "bytes_per_token", b2);
        set_num(&f[n++], "total_bytes", b3);
        set_num(&f[n++], "fp16_total_bytes", b4);
        set_ratio(&f[n++], "ratio", ratio);
        if (q->format == SIZE_CSV && extra) set_s(&f[n++], "model", q->model);
        if (q->format != SIZE_CSV || extra) {
            set_u(&f[n], "q_heads", q->q_heads);
            f[n++].is_null = q->q_heads == 0;
            if (q->format != SIZE_CSV) set_s(&f[n++], "baseline_model", q->base_model);
            set_u(&f[n++], "baseline_layers", bL);
            set_u(&f[n++], "baseline_kv_heads", bH);
            set_u(&f[n++], "baseline_head_dim", bD);
            set_num(&f[n++], "baseline_total_bytes", b5);
            set_ratio(&f[n++], "baseline_ratio", base_ratio);
        }
        if (q->format == SIZE_CSV) {
            for (size_t i = 0; i < n; i++) printf("%s%s", i ? "," : "", f[i].name);
            printf("\n");
            for (size_t i = 0; i < n; i++) printf("%s%s", i ? "," : "", f[i].is_null ? "" : f[i].val);
            printf("\n");
        } else {
            print_json(f, n, q->format == SIZE_JSON);
        }
        return 0;
    }
    human(h2, sizeof h2, (double)token_bits / 8);
    human(h3, sizeof h3, (double)total_bits / 8);
    human(h4, sizeof h4, (double)fp16_total_bits / 8);
    human(h5, sizeof h5, (double)base_bits / 8);
    if (q->model)
        printf("model: %s (%s): %llu query heads%s\n", q->model, q->model_source, (unsigned long long)q->q_heads,
               q->q_heads == q->kv_heads ? ", one KV head each" : " share the KV heads (GQA)");
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
    if (q->has_baseline) {
        printf("baseline: %s%s%llu layers x %llu kv heads x head dim %llu in FP16, the same tokens and batch\n",
               q->base_model ? q->base_model : "", q->base_model ? ", " : "", (unsigned long long)bL,
               (unsigned long long)bH, (unsigned long long)bD);
        printf("%-24s %20s B  (%s)\n", "baseline total", b5, h5);
        printf("%-24s %20.2fx\n", "ratio to baseline", base_ratio);
    }
    return 0;
}
