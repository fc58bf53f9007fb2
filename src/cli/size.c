/* size: `kvc size`, the lesson's KV-cache size arithmetic: the options here, the arithmetic in src/eval/size.h. */
#include "cli/cli.h"
#include "base/util.h"
#include "eval/size.h"

#include <string.h>

const char cmd_size_usage[] =
    "usage: kvc size --head-dim D [--layers L] [--kv-heads H] [--tokens T] [--batch B]\n"
    "                [--k-bits N] [--v-bits N] [--k-rank R] [--v-rank R] [--format table|csv]\n"
    "\n"
    "KV cache size = layers x kv_heads x tokens x batch x (k_rank x k_bits + v_rank x v_bits) / 8 bytes.\n"
    "Defaults: layers 1, kv-heads 1, tokens 1, batch 1, 16 bits (FP16), full rank (rank = head-dim).\n"
    "Low-rank bases and quantization scales are not counted here (kvc run counts them).\n"
    "\n"
    "  --head-dim D      numbers per key (and per value) per head, 1..65536 (required)\n"
    "  --layers L --kv-heads H --tokens T --batch B   positive integers\n"
    "  --k-bits N --v-bits N    bits per stored number, 1..64 (16 = FP16, 8 = FP8/INT8, 4 = INT4)\n"
    "  --k-rank R --v-rank R    numbers stored per token per head, 1..head-dim\n"
    "  --format FORMAT   table (default) or csv\n"
    "  -h, --help        this help\n";

/* In the order of the CSV columns (size.h). */
enum {
    SIZE_LAYERS, SIZE_KV_HEADS, SIZE_HEAD_DIM, SIZE_TOKENS, SIZE_BATCH, SIZE_K_BITS, SIZE_V_BITS, SIZE_K_RANK,
    SIZE_V_RANK, SIZE_FORMAT
};
const OptSpec cmd_size_opts[] = {
    [SIZE_LAYERS] = {"--layers", NULL, 1},
    [SIZE_KV_HEADS] = {"--kv-heads", NULL, 1},
    [SIZE_HEAD_DIM] = {"--head-dim", NULL, 1},
    [SIZE_TOKENS] = {"--tokens", NULL, 1},
    [SIZE_BATCH] = {"--batch", NULL, 1},
    [SIZE_K_BITS] = {"--k-bits", NULL, 1},
    [SIZE_V_BITS] = {"--v-bits", NULL, 1},
    [SIZE_K_RANK] = {"--k-rank", NULL, 1},
    [SIZE_V_RANK] = {"--v-rank", NULL, 1},
    [SIZE_FORMAT] = {"--format", NULL, 1},
    {NULL, NULL, 0},
};

int cmd_size(int argc, char **argv)
{
    /* each value's largest (the smallest is 1) and its default (0: not given; the ranks then default to head-dim) */
    static const uint64_t hi[] = {1u << 20, 1u << 20, 65536, 1ULL << 40, 1u << 30, 64, 64, 65536, 65536};
    uint64_t v[] = {1, 1, 0, 1, 1, 16, 16, 0, 0};
    int csv = 0;
    OptParser p;
    opt_init(&p, "size", argc, argv, cmd_size_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        if (k == OPT_ERROR) return cmd_fail(EXIT_USAGE);
        if (k == OPT_ARG) {
            kvc_fail("size: unknown option; see kvc size --help (got \"%s\")", p.value);
            return cmd_fail(EXIT_USAGE);
        }
        if (k == SIZE_FORMAT) {
            if (strcmp(p.value, "csv") == 0) csv = 1;
            else if (strcmp(p.value, "table") == 0) csv = 0;
            else {
                kvc_fail("size: --format: must be table or csv (got \"%s\")", p.value);
                return cmd_fail(EXIT_USAGE);
            }
        } else if (opt_uint(p.value, p.where, 1, hi[k], &v[k])) {
            return cmd_fail(EXIT_USAGE);
        }
    }
    if (v[SIZE_HEAD_DIM] == 0) {
        kvc_fail("size: --head-dim is required (got nothing)");
        return cmd_fail(EXIT_USAGE);
    }
    for (int k = SIZE_K_RANK; k <= SIZE_V_RANK; k++) {
        if (v[k] == 0) v[k] = v[SIZE_HEAD_DIM];
        if (v[k] > v[SIZE_HEAD_DIM]) {
            kvc_fail("size: %s: must be in 1..head-dim = %llu (got %llu)", cmd_size_opts[k].name,
                     (unsigned long long)v[SIZE_HEAD_DIM], (unsigned long long)v[k]);
            return cmd_fail(EXIT_USAGE);
        }
    }
    SizeQuery q = {v[SIZE_LAYERS], v[SIZE_KV_HEADS], v[SIZE_HEAD_DIM], v[SIZE_TOKENS], v[SIZE_BATCH],
                   v[SIZE_K_BITS],  v[SIZE_V_BITS],   v[SIZE_K_RANK],   v[SIZE_V_RANK], csv};
    return size_print(&q) ? cmd_fail(EXIT_USAGE) : EXIT_OK;
}
