/* synth: `kvc synth CONFIG.json -o DIR`, the data a config measures written as .npy or .safetensors files (the
 * writer is src/data/load.h). */
#include "cli/cli.h"
#include "base/memlimit.h"
#include "base/util.h"
#include "config/config.h"
#include "data/load.h"
#include "data/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cmd_synth_usage[] =
    "usage: kvc synth CONFIG.json -o DIR [--set PATH=JSON]... [--format npy|safetensors]\n"
    "\n"
    "Makes the data of CONFIG.json exactly as kvc run measures it and writes it into DIR (created if\n"
    "missing): keys.npy, values.npy, queries.npy and observe.npy (those the config has; float64, shapes\n"
    "(layers, kv_heads, tokens, head_dim) and (layers, q_heads, queries, head_dim)), or with --format\n"
    "safetensors one cache.safetensors holding tensors \"keys\", \"values\", \"queries\", \"observe\".\n"
    "Keys are written as the cache holds them: post-RoPE, or pre-RoPE with data.rope.cache \"pre\"; queries\n"
    "as attention reads them. DIR/files.json is the config with a data block that loads these files\n"
    "(data.source \"files\"): kvc run DIR/files.json prints the same numbers as kvc run CONFIG.json (the\n"
    "row ids differ: the config differs).\n"
    "\n"
    "  -o, --out DIR     the output directory (required)\n"
    "  --set PATH=JSON   override a config value first, as for kvc run (repeatable)\n"
    "  --format FORMAT   npy (default) or safetensors\n"
    "  -h, --help        this help\n";

enum { SYNTH_OUT, SYNTH_SET, SYNTH_FORMAT };
const OptSpec cmd_synth_opts[] = {
    [SYNTH_OUT] = {"--out", "-o", 1},
    [SYNTH_SET] = {"--set", NULL, 1},
    [SYNTH_FORMAT] = {"--format", NULL, 1},
    {NULL, NULL, 0},
};

int cmd_synth(int argc, char **argv)
{
    const char *path = NULL, *dir = NULL;
    SaveFormat fmt = SAVE_NPY;
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    int r;
    OptParser p;
    opt_init(&p, "synth", argc, argv, cmd_synth_opts);
    for (int k; (k = opt_next(&p)) != OPT_END;) {
        const char *v = p.value;
        switch (k) {
        case OPT_ERROR:
            goto usage;
        case OPT_ARG:   /* CONFIG.json */
            if (opt_config_path("synth", v, &path)) goto usage;
            break;
        case SYNTH_SET:
            sets[n_sets++] = (char *)v;
            break;
        case SYNTH_FORMAT:
            if (strcmp(v, "npy") == 0) fmt = SAVE_NPY;
            else if (strcmp(v, "safetensors") == 0) fmt = SAVE_SAFETENSORS;
            else {
                kvc_fail("synth: --format: must be npy or safetensors (got \"%s\")", v);
                goto usage;
            }
            break;
        case SYNTH_OUT:
            dir = v;
            break;
        }
    }
    if (!path) {
        kvc_fail("synth: missing the config file; usage: kvc synth CONFIG.json -o DIR (got nothing)");
        goto usage;
    }
    if (!dir) {
        kvc_fail("synth: missing the output directory; usage: kvc synth CONFIG.json -o DIR (got nothing)");
        goto usage;
    }
    Config cfg;
    Data d;
    if (config_load(&cfg, path, sets, n_sets)) {
        config_free(&cfg);
        goto usage;
    }
    if (memlimit_blas_reserve() || data_make(&d, &cfg)) {   /* no OpenBLAS hang under ulimit: memlimit.h */
        config_free(&cfg);
        goto usage;
    }
    r = load_save(dir, fmt, &d, &cfg);
    data_free(&d);
    config_free(&cfg);
    free(sets);
    if (r != 0) {
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
        return r < 0 ? EXIT_USAGE : EXIT_RUNTIME;
    }
    return EXIT_OK;
usage:
    free(sets);
    return cmd_fail(EXIT_USAGE);
}
