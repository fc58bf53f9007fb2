/* bench: `kvc bench`, the decode-speed benchmark. For each cache format it builds a synthetic stored
 * cache (L layers x Hkv KV heads x T tokens x D, keys and values N(0, 1) from the numpy-compatible
 * generator), times decode steps with the fused kernels (src/decode/), the key side alone and the naive
 * dequantize-then-attend path, measures the read bandwidth in the same run (a STREAM-style read of a buffer
 * at least 4x the last-level cache), and checks the output against attention in double over the
 * dequantized cache. Table (with the machine at the top) or CSV on stdout; progress on stderr.
 * README.md, "Decode speed", documents the columns.
 */
#ifndef KVC_BENCH_H
#define KVC_BENCH_H

#define BENCH_USAGE                                                                                              \
    "usage: kvc bench [--tokens T] [--layers L] [--kv-heads H] [--q-heads LIST] [--head-dim D]\n"               \
    "                 [--formats LIST] [--threads LIST] [--repeat N] [--naive-repeat N] [--bw-mib N]\n"         \
    "                 [--seed N] [--format table|csv] [--csv-file PATH]\n"                                       \
    "\n"                                                                                                         \
    "Times one decode step (every query head attends over T cached tokens) per cache format, with kvc's\n"     \
    "fused kernels reading the stored format directly, against the memory-bandwidth floor measured in the\n"    \
    "same run and against the naive path (dequantize the whole cache to float32, then attend).\n"              \
    "\n"                                                                                                         \
    "  --tokens T        cached tokens per head (default 65536)\n"                                             \
    "  --layers L        layers (default 1)\n"                                                                 \
    "  --kv-heads H      KV heads per layer (default 8)\n"                                                     \
    "  --q-heads LIST    query heads, each a multiple of H; comma list (default 8)\n"                          \
    "  --head-dim D      head dimension (default 128)\n"                                                       \
    "  --formats LIST    comma list of cache formats; FMT for K and V, or KFMT/VFMT; FMT is f32 f16 bf16\n"    \
    "                    e4m3 (fp8) e5m2 int8 int4 int2 (scale per token; int8ch.. per channel) q8_0 q4_0\n"   \
    "                    q4_1 q5_0 q5_1 iq4_nl (the ggml types: blocks of 32 along the row), or lrR /\n"     \
    "                    lrR:FMT (rank-R coefficients + FP16 basis); or kivi2 kivi4 kivi8 alone\n"            \
    "                    (KIVI: asymmetric B-bit keys per channel and values per token in groups of 32,\n"    \
    "                    FP16 scales and mins, the last 128 tokens in FP16). Default:\n"                      \
    "                    f32,f16,bf16,e4m3,e5m2,int8,int4,int2,int8ch/int8,int4ch/int4,q8_0,q4_0,q4_1,\n"     \
    "                    q5_0,q5_1,iq4_nl,lr32/f16,kivi4,kivi2\n"                                              \
    "  --threads LIST    thread counts, comma list (default 1 and the number of CPUs)\n"                       \
    "  --repeat N        timed steps per measurement after one warm-up (default 10)\n"                          \
    "  --naive-repeat N  timed naive steps (default 3; 0 skips the naive path)\n"                              \
    "  --bw-mib N        bandwidth probe buffer in MiB (default max(128, 4 x last-level cache))\n"             \
    "  --seed N          generator seed (default 0)\n"                                                         \
    "  --format FORMAT   table (default; machine description at the top) or csv\n"                             \
    "  --csv-file PATH   also write the CSV to PATH (make bench: one run, table and CSV)\n"                     \
    "  -h, --help        this help\n"

/* argv[0] is "bench". Returns 0, 1 on a runtime failure (message printed), or -1 with kvc_fail set for
 * bad arguments (main prints it and exits 2). */
int bench_command(int argc, char **argv);

#endif
