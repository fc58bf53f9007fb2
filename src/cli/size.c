/* size: `kvc size`, the lesson's KV-cache size arithmetic: the options here, the arithmetic in src/eval/size.h,
 * the model shapes in src/config/shapes.h. */
#include "cli/cli.h"
#include "base/util.h"
#include "config/shapes.h"
#include "eval/size.h"

#include <stdio.h>
#include <string.h>

const char cmd_size_usage[] =
    "usage: kvc size (--head-dim D | --model NAME) [--layers L] [--kv-heads H] [--tokens T] [--batch B]\n"
    "                [--k-bits N] [--v-bits N] [--k-rank R] [--v-rank R]\n"
    "                [--baseline-kv-heads H | --baseline-model NAME] [--format table|csv|json|jsonl]\n"
    "\n"
    "KV cache size = layers x kv_heads x tokens x batch x (k_rank x k_bits + v_rank x v_bits) / 8 bytes,\n"
    "compared with the same cache in FP16 and, when asked, with another geometry in FP16.\n"
    "Defaults: layers 1, kv-heads 1, tokens 1, batch 1, 16 bits (FP16), full rank (rank = head-dim).\n"
    "Low-rank bases and quantization scales are not counted here (kvc run counts them).\n"
    "\n"
    "  --model NAME      a published model's layers, KV heads and head dim (its query heads are shown);\n"
    "                    --layers, --kv-heads or --head-dim that contradict it are refused. Names:\n"
    "                    llama-2-7b llama-2-13b llama-2-70b llama-3-8b llama-3-70b llama-3.1-8b\n"
    "                    llama-3.1-70b llama-3.2-1b llama-3.2-3b mistral-7b mixtral-8x7b qwen2.5-7b\n"
    "                    qwen2.5-72b gemma-2-9b (README \"Model shapes\" cites each config.json)\n"
    "  --head-dim D      numbers per key (and per value) per head, 1..65536 (required without --model)\n"
    "  --layers L --kv-heads H   positive integers\n"
    "  --tokens T --batch B      positive integers; a suffix k M G T multiplies by 1000^n (60k = 60000),\n"
    "                    Ki Mi Gi Ti by 1024^n (64Ki = 65536)\n"
    "  --k-bits N --v-bits N    bits per stored number, 1..64 (16 = FP16, 8 = FP8/INT8, 4 = INT4)\n"
    "  --k-rank R --v-rank R    numbers stored per token per head, 1..head-dim\n"
    "  --baseline-kv-heads H    also compare with this geometry but H KV heads, in FP16 (e.g. the model\n"
    "                    before GQA)\n"
    "  --baseline-model NAME    also compare with that model's geometry in FP16, the same tokens and batch\n"
    "  --format FORMAT   table (default), csv, json (one object) or jsonl (the object on one line); with\n"
    "                    --model or a baseline, CSV has 7 more columns after ratio (README \"kvc size\")\n"
    "  -h, --help        this help\n"
    "\n"
    "The lesson's legal assistant, 60,000 tokens of a Llama-3-8B-shaped model with an FP8 cache against the\n"
    "same model with 32 KV heads in FP16 (29.30 GiB -> 3.66 GiB, 8x):\n"
    "  kvc size --model llama-3-8b --tokens 60k --k-bits 8 --v-bits 8 --baseline-kv-heads 32\n";

/* In the order of the CSV columns (size.h), then the others. */
enum {
    SIZE_LAYERS, SIZE_KV_HEADS, SIZE_HEAD_DIM, SIZE_TOKENS, SIZE_BATCH, SIZE_K_BITS, SIZE_V_BITS, SIZE_K_RANK,
    SIZE_V_RANK, SIZE_BASE_KV_HEADS, SIZE_NUMBERS, /* the options above take integers */
    SIZE_FORMAT = SIZE_NUMBERS, SIZE_MODEL, SIZE_BASE_MODEL
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
    [SIZE_BASE_KV_HEADS] = {"--baseline-kv-heads", NULL, 1},
    [SIZE_FORMAT] = {"--format", NULL, 1},
    [SIZE_MODEL] = {"--model", NULL, 1},
    [SIZE_BASE_MODEL] = {"--baseline-model", NULL, 1},
    {NULL, NULL, 0},
};

/* The shape named s, or NULL after kvc_fail naming the nearest. */
static const ModelShape *shape_arg(const char *s, const char *where)
{
    const ModelShape *m = model_shape_find(s);
    if (!m)
        kvc_fail("%s: unknown model; did you mean \"%s\"? see kvc size --help (got \"%s\")", where,
                 model_shape_nearest(s), s);
    return m;
}

int cmd_size(int argc, char **argv)
{
    /* each value's largest (the smallest is 1) and its default (0: not given; the ranks then default to head-dim) */
    static const uint64_t hi[] = {1u << 20, 1u << 20, 65536, 1ULL << 40, 1u << 30, 64, 64, 65536, 65536, 1u << 20};
    uint64_t v[SIZE_NUMBERS] = {0, 0, 0, 1, 1, 16, 16, 0, 0, 0};
    int format = SIZE_TABLE;
    const ModelShape *model = NULL, *base_model = NULL;
    OptParser p;
    opt_init(&p, "size", argc, argv, cmd_size_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        if (k == OPT_ERROR) return cmd_fail(EXIT_USAGE);
        if (k == OPT_ARG) {
            kvc_fail("size: unknown option; see kvc size --help (got \"%s\")", p.value);
            return cmd_fail(EXIT_USAGE);
        }
        if (k == SIZE_FORMAT) {
            static const char *const names[] = {"table", "csv", "json", "jsonl"};
            format = -1;
            for (int f = 0; f < 4; f++)
                if (strcmp(p.value, names[f]) == 0) format = f;   /* SIZE_TABLE .. SIZE_JSONL, in that order */
            if (format < 0) {
                kvc_fail("size: --format: must be table, csv, json or jsonl (got \"%s\")", p.value);
                return cmd_fail(EXIT_USAGE);
            }
        } else if (k == SIZE_MODEL || k == SIZE_BASE_MODEL) {
            const ModelShape *m = shape_arg(p.value, p.where);
            if (!m) return cmd_fail(EXIT_USAGE);
            *(k == SIZE_MODEL ? &model : &base_model) = m;
        } else if (k == SIZE_TOKENS || k == SIZE_BATCH ? opt_count(p.value, p.where, 1, hi[k], &v[k])
                                                       : opt_uint(p.value, p.where, 1, hi[k], &v[k])) {
            return cmd_fail(EXIT_USAGE);
        }
    }
    if (model) {   /* the model's geometry; a size option given beside it must agree */
        const int keys[] = {SIZE_LAYERS, SIZE_KV_HEADS, SIZE_HEAD_DIM};
        const uint64_t want[] = {model->layers, model->kv_heads, model->head_dim};
        for (int j = 0; j < 3; j++) {
            if (v[keys[j]] && v[keys[j]] != want[j]) {
                kvc_fail("size: %s: contradicts --model %s (%s %llu); leave out one of the two (got %llu)",
                         cmd_size_opts[keys[j]].name, model->name, cmd_size_opts[keys[j]].name + 2,
                         (unsigned long long)want[j], (unsigned long long)v[keys[j]]);
                return cmd_fail(EXIT_USAGE);
            }
            v[keys[j]] = want[j];
        }
    }
    if (v[SIZE_HEAD_DIM] == 0) {
        kvc_fail("size: --head-dim or --model is required (got nothing)");
        return cmd_fail(EXIT_USAGE);
    }
    for (int k = SIZE_LAYERS; k <= SIZE_KV_HEADS; k++)
        if (v[k] == 0) v[k] = 1;
    for (int k = SIZE_K_RANK; k <= SIZE_V_RANK; k++) {
        if (v[k] == 0) v[k] = v[SIZE_HEAD_DIM];
        if (v[k] > v[SIZE_HEAD_DIM]) {
            kvc_fail("size: %s: must be in 1..head-dim = %llu (got %llu)", cmd_size_opts[k].name,
                     (unsigned long long)v[SIZE_HEAD_DIM], (unsigned long long)v[k]);
            return cmd_fail(EXIT_USAGE);
        }
    }
    if (base_model && v[SIZE_BASE_KV_HEADS]) {
        kvc_fail("size: --baseline-kv-heads and --baseline-model each give the baseline; leave out one of the two "
                 "(got both)");
        return cmd_fail(EXIT_USAGE);
    }
    SizeQuery q = {v[SIZE_LAYERS], v[SIZE_KV_HEADS], v[SIZE_HEAD_DIM], v[SIZE_TOKENS], v[SIZE_BATCH],
                   v[SIZE_K_BITS], v[SIZE_V_BITS], v[SIZE_K_RANK], v[SIZE_V_RANK],
                   model ? model->name : NULL, model ? model->source : NULL, model ? model->q_heads : 0,
                   base_model || v[SIZE_BASE_KV_HEADS], base_model ? base_model->name : NULL,
                   base_model ? base_model->layers : v[SIZE_LAYERS],
                   base_model ? base_model->kv_heads : v[SIZE_BASE_KV_HEADS],
                   base_model ? base_model->head_dim : v[SIZE_HEAD_DIM], format};
    return size_print(&q) ? cmd_fail(EXIT_USAGE) : EXIT_OK;
}
