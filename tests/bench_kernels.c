/* bench_kernels: where a fused decode step's time goes, per cache format and query heads per KV head (G). For the
 * kernel set kvc uses on this machine (decode_isa), the key kernel (scores of G heads) and the value kernel (the
 * weighted sum for G heads) are timed in ns per cached row, twice:
 *   L2:  on 2048 rows that stay in the L2 cache (best of 200 calls): the kernel's own work, what the cores cost;
 *   mem: on a cache of MiB (default 256) per side, every row read once per pass in calls of 2048 rows, as a decode
 *        step reads it (best of 3 passes): the work plus whatever of the memory time it does not hide.
 * beside the memory floor: the row's bytes (codes and per-token scale) at the read bandwidth this run measures
 * (decode_read_times, one thread, median of 5). A kernel whose mem time is near max(L2, floor) overlaps its work
 * with the memory; near L2 + floor, it does not. The rows are a quantized block of 2048 N(0, 1) rows repeated
 * (the kernels' cost does not depend on the values; the bytes are read from memory all the same).
 *
 * Not a test (no PASS lines; tests/run.sh does not run it): scripts/bench.sh (make bench) writes its table to
 * results/bench-kernels.txt. Usage: bench_kernels [MiB [FORMAT [G]]] (FORMAT, G: that row alone; G any of 1..64). */
#include "base/rng.h"
#include "base/util.h"
#include "decode/decode.h"
#include "decode/kernels.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2048, W = 128 };

static double best_of(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256;
    if (mib < 16 || mib > 65536) {
        fprintf(stderr, "bench_kernels: MiB must be 16..65536 (got %s)\n", argv[1]);
        return 2;
    }
    const char *only_f = argc > 2 ? argv[2] : NULL;
    const size_t only_g = argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 0;
    static const char *const fmts[] = {"f16", "int8", "e4m3", "q8_0", "int4", "q4_0"};
    static const size_t Gs[] = {1, 4, 8};
    int known_f = !only_f, known_g = !only_g;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) known_f |= only_f && !strcmp(only_f, fmts[i]);
    known_g |= only_g >= 1 && only_g <= 64;   /* with FORMAT: any G of 1..64 */
    if (!known_f || !known_g || argc > 4) {
        fprintf(stderr, "bench_kernels: usage: bench_kernels [MiB [FORMAT [G]]], FORMAT one of f16 int8 e4m3 q8_0 int4 "
                        "q4_0, G 1..64\n");
        return 2;
    }
    const KernelSet *ks = decode_fused_kernels();
    /* the read bandwidth, as kvc bench's probe measures it */
    size_t nf = mib << 18;
    float *buf = xalloc64(nf * sizeof *buf);
    for (size_t i = 0; i < nf; i++) buf[i] = 1.0f;
    double sec[5];
    if (decode_read_times(sec, 5, buf, nf, 1)) {
        fprintf(stderr, "bench_kernels: %s\n", kvc_errmsg());
        return 1;
    }
    const double gbps = (double)nf * sizeof *buf / median(sec, 5) / 1e9;
    free(buf);
    printf("# bench_kernels (tests/bench_kernels.c): kernel set %s%s%s%s; W = %d columns; one thread\n", ks->name,
           decode_kernels_note(),
           decode_tune()[0] ? ", tuned for " : "", decode_tune(), W);
    printf("# read bandwidth %.2f GB/s (median of 5 reads of %zu MiB); floor = row bytes / bandwidth\n", gbps, mib);
    printf("# ns per cached row: L2 = rows in L2 (the kernel's work), mem = a %zu MiB cache streamed once per pass;\n"
           "# step = keys mem + values mem (the kernels only: no softmax); %%floor = both sides' floor / step;\n"
           "# overlap = (L2 + floor - mem) / min(L2, floor), the mean of the two sides: 1 when the smaller of work\n"
           "# and memory time is hidden, 0 when they add up (above 1: faster than the bandwidth probe)\n", mib);
    printf("%-6s %3s %6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "format", "G", "row_B", "floor", "keys_L2", "keys_mem",
           "vals_L2", "vals_mem", "step", "%floor", "overlap");
    rng r;
    rng_seed_u64(&r, 5);
    double *x = xmalloc((size_t)N * W * sizeof *x);
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        if (only_f && strcmp(only_f, fmts[fi]) != 0) continue;
        StoreFormat f;
        if (store_format_parse(&f, fmts[fi], "format")) return 1;
        StoreTensor st;
        rng_normal_fill(&r, x, (size_t)N * W);
        store_alloc(&st, f, N, W);
        store_quantize_f64(&st, x);
        const size_t rb = st.row_bytes, T = (mib << 20) / rb / N * N;
        const int scaled = store_type_is_int(f.type) && f.axis == STORE_AXIS_TOKEN;
        uint8_t *codes = xalloc64(T * rb);
        uint16_t *rs = scaled ? xmalloc(T * sizeof *rs) : NULL;
        for (size_t b = 0; b < T / N; b++) {
            memcpy(codes + b * N * rb, st.codes, N * rb);
            if (rs) memcpy(rs + b * N, st.scales, N * sizeof *rs);
        }
        const KRows k = {.type = f.type, .codes = codes, .row_bytes = rb, .rscale = rs, .W = W};
        const double floor_ns = (double)(rb + (scaled ? 2 : 0)) / gbps;
        const size_t *gl = only_g ? &only_g : Gs, ng = only_g ? 1 : sizeof Gs / sizeof Gs[0];
        for (size_t gi = 0; gi < ng; gi++) {
            const size_t G = gl[gi];
            float *q = xmalloc(G * W * sizeof *q), *s = xmalloc(G * N * sizeof *s), *p = xmalloc(G * N * sizeof *p);
            float *acc = xcalloc(G * W, sizeof *acc), *scr = xalloc64(DECODE_SCRATCH(G, W) * sizeof *scr);
            for (size_t i = 0; i < G * W; i++) q[i] = (float)rng_standard_normal(&r);
            for (size_t i = 0; i < G * N; i++) p[i] = (float)rng_next_double(&r);
            double kl2 = 1e30, vl2 = 1e30, km = 1e30, vm = 1e30;
            for (int rep = 0; rep < 200; rep++) {
                double t0 = decode_now();
                ks->scores[f.type](s, N, q, G, &k, 0, N, scr);
                double t1 = decode_now();
                ks->vacc[f.type](acc, p, N, G, &k, 0, N, scr);
                double t2 = decode_now();
                kl2 = best_of(kl2, t1 - t0), vl2 = best_of(vl2, t2 - t1);
            }
            for (int rep = 0; rep < 3; rep++) {
                double a = 0, b = 0;
                for (size_t t0 = 0; t0 < T; t0 += N) {
                    double t1 = decode_now();
                    ks->scores[f.type](s, N, q, G, &k, t0, N, scr);
                    a += decode_now() - t1;
                }
                for (size_t t0 = 0; t0 < T; t0 += N) {
                    double t1 = decode_now();
                    ks->vacc[f.type](acc, p, N, G, &k, t0, N, scr);
                    b += decode_now() - t1;
                }
                km = best_of(km, a), vm = best_of(vm, b);
            }
            kl2 = kl2 / N * 1e9, vl2 = vl2 / N * 1e9, km = km / (double)T * 1e9, vm = vm / (double)T * 1e9;
            const double step = km + vm, ov_k = (kl2 + floor_ns - km) / (kl2 < floor_ns ? kl2 : floor_ns);
            const double ov_v = (vl2 + floor_ns - vm) / (vl2 < floor_ns ? vl2 : floor_ns);
            printf("%-6s %3zu %6zu %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %7.1f%% %8.2f\n", fmts[fi], G, rb, floor_ns, kl2, km,
                   vl2, vm, step, 100.0 * 2 * floor_ns / step, (ov_k + ov_v) / 2);
            fflush(stdout);
            free(q), free(s), free(p), free(acc), free(scr);
        }
        free(codes), free(rs);
        store_free(&st);
    }
    free(x);
    return 0;
}
