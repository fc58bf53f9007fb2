/* bench_kernels: where a fused decode step's time goes, per cache format and query heads per KV head (G). For the
 * kernel set kvc uses on this machine (decode_isa), the key kernel (scores of G heads) and the value kernel (the
 * weighted sum for G heads) are timed in ns per cached row, twice:
 *   L2:  on 2048 rows that stay in the L2 cache (best of 200 calls): the kernel's own work, what the cores cost;
 *   mem: on a cache of MiB (default 256) per side, every row read once per pass in calls of 2048 rows, as a decode
 *        step reads it (best of 3 passes): the work plus whatever of the memory time it does not hide.
 * beside the memory floor: the row's bytes (codes and per-token scale) at the read bandwidth this run measures
 * (decode_read_times, one thread, median of 5). A kernel whose mem time is near max(L2, floor) overlaps its work
 * with the memory; near L2 + floor, it does not. The rows are a quantized block of 2048 N(0, 1) rows repeated
 * (the kernels' cost does not depend on the values; the bytes are read from memory all the same). kivi4 is kvc
 * bench's KIVI cache without its FP16 residual: keys 4-bit per channel, values per token, groups of 32, FP16 scales
 * and mins (their bytes count in the floor: 16 a row on each side at W = 128).
 *
 * Not a test (no PASS lines; tests/run.sh does not run it): scripts/bench.sh (make bench) writes its table to
 * results/bench-kernels.txt. Usage: bench_kernels [MiB [FORMAT [G]]] (FORMAT, G: that row alone; G any of 1..64). */
#include "base/rng.h"
#include "base/util.h"
#include "decode/decode.h"
#include "decode/kernels.h"
#include "eval/bench.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2048, W = 128 };

static double best_of(double a, double b) { return a < b ? a : b; }

/* One side's rows: N quantized rows repeated to T (kivi4: its FP16 scales and mins too), and the bytes a row reads. */
typedef struct Side {
    StoreTensor st;
    KRows k;
    uint8_t *codes;
    uint16_t *par;      /* kivi4: the scales, then the mins, repeated */
    double row_bytes;   /* codes + per-token scale (int) or the row's share of the group parameters (kivi4) */
} Side;

static int side_make(Side *sd, StoreFormat f, const double *x, size_t T)
{
    memset(sd, 0, sizeof *sd);
    store_alloc(&sd->st, f, N, W);
    store_quantize_f64(&sd->st, x);
    if (!decode_rows(&sd->k, &sd->st)) {
        fprintf(stderr, "bench_kernels: no kernel slot reads the format\n");
        return -1;
    }
    const size_t rb = sd->st.row_bytes;
    sd->codes = xalloc64(T * rb);
    for (size_t b = 0; b < T / N; b++) memcpy(sd->codes + b * N * rb, sd->st.codes, N * rb);
    sd->k.codes = sd->codes;
    sd->row_bytes = (double)rb;
    if (sd->k.type == STORE_INTN) {   /* group parameters: (N / g) x W per channel, N x per per token */
        const int ch = sd->k.axis == STORE_AXIS_CHANNEL;
        const size_t np = ch ? N / sd->k.g * W : N * sd->k.per, nb = T / N;
        const uint16_t *sc = sd->k.scale, *mn = sd->k.min;
        sd->par = xmalloc(2 * np * nb * sizeof *sd->par);
        for (size_t b = 0; b < nb; b++) {
            memcpy(sd->par + b * np, sc, np * sizeof *sd->par);
            memcpy(sd->par + (nb + b) * np, mn, np * sizeof *sd->par);
        }
        sd->k.scale = sd->par, sd->k.min = sd->par + nb * np;
        sd->row_bytes += 2.0 * (double)(np * sizeof *sd->par) / N;
    } else if (sd->k.rscale) {   /* a FP16 scale per token */
        uint16_t *rs = xmalloc(T * sizeof *rs);
        for (size_t b = 0; b < T / N; b++) memcpy(rs + b * N, sd->st.scales, N * sizeof *rs);
        sd->k.rscale = rs, sd->par = rs;
        sd->row_bytes += 2;
    }
    return 0;
}

static void side_free(Side *sd)
{
    free(sd->codes), free(sd->par);
    store_free(&sd->st);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256;
    if (mib < 16 || mib > 65536) {
        fprintf(stderr, "bench_kernels: MiB must be 16..65536 (got %s)\n", argv[1]);
        return 2;
    }
    const char *only_f = argc > 2 ? argv[2] : NULL;
    const size_t only_g = argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 0;
    static const char *const fmts[] = {"f16", "int8", "e4m3", "q8_0", "int4", "q4_0", "kivi4"};
    static const size_t Gs[] = {1, 4, 8};
    int known_f = !only_f, known_g = !only_g;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) known_f |= only_f && !strcmp(only_f, fmts[i]);
    known_g |= only_g >= 1 && only_g <= 64;   /* with FORMAT: any G of 1..64 */
    if (!known_f || !known_g || argc > 4) {
        fprintf(stderr, "bench_kernels: usage: bench_kernels [MiB [FORMAT [G]]], FORMAT one of f16 int8 e4m3 q8_0 int4 "
                        "q4_0 kivi4, G 1..64\n");
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
    printf("# read bandwidth %.2f GB/s (median of 5 reads of %zu MiB); floor = a row's bytes (codes, and a token scale or\n"
           "# its share of KIVI's group scales and mins) / bandwidth\n", gbps, mib);
    printf("# ns per cached row: L2 = rows in L2 (the kernel's work), mem = a %zu MiB cache streamed once per pass;\n"
           "# step = keys mem + values mem (the kernels only: no softmax); %%floor = both sides' floor / step;\n"
           "# overlap = (L2 + floor - mem) / min(L2, floor), the mean of the two sides: 1 when the smaller of work\n"
           "# and memory time is hidden, 0 when they add up (above 1: faster than the bandwidth probe);\n"
           "# bound = both sides' floor / (max(keys_L2, keys floor) + max(vals_L2, vals floor)): the %%floor a step\n"
           "# would reach if each side's work and memory time overlapped wholly; below 100 %%, the kernels' own work\n"
           "# is longer than the memory time, and no overlap takes the row past it\n", mib);
    printf("%-6s %3s %6s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n", "format", "G", "row_B", "floor", "keys_L2", "keys_mem",
           "vals_L2", "vals_mem", "step", "%floor", "overlap", "bound");
    rng r;
    rng_seed_u64(&r, 5);
    double *x = xmalloc((size_t)N * W * sizeof *x);
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        if (only_f && strcmp(only_f, fmts[fi]) != 0) continue;
        StoreFormat fk, fv;
        if (!strcmp(fmts[fi], "kivi4")) {
            fk = store_intn_format(4, 1, STORE_AXIS_CHANNEL, BENCH_KIVI_GROUP, STORE_SCALE_F16);
            fv = store_intn_format(4, 1, STORE_AXIS_TOKEN, BENCH_KIVI_GROUP, STORE_SCALE_F16);
        } else {
            if (store_format_parse(&fk, fmts[fi], "format")) return 1;
            fv = fk;
        }
        Side sk, sv;   /* keys, values: each its own N(0, 1) rows */
        StoreTensor probe;
        store_alloc(&probe, fk, N, W);
        const size_t T = (mib << 20) / probe.row_bytes / N * N;
        store_free(&probe);
        rng_normal_fill(&r, x, (size_t)N * W);
        if (side_make(&sk, fk, x, T)) return 1;
        rng_normal_fill(&r, x, (size_t)N * W);
        if (side_make(&sv, fv, x, T)) return 1;
        const KRows *k = &sk.k, *v = &sv.k;
        const StoreType type = fk.type;
        const size_t rb = sk.st.row_bytes;
        const double floor_k = sk.row_bytes / gbps, floor_v = sv.row_bytes / gbps, floor_ns = (floor_k + floor_v) / 2;
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
                ks->scores[type](s, N, q, G, k, 0, N, scr);
                double t1 = decode_now();
                ks->vacc[type](acc, p, N, G, v, 0, N, scr);
                double t2 = decode_now();
                kl2 = best_of(kl2, t1 - t0), vl2 = best_of(vl2, t2 - t1);
            }
            for (int rep = 0; rep < 3; rep++) {
                double a = 0, b = 0;
                for (size_t t0 = 0; t0 < T; t0 += N) {
                    double t1 = decode_now();
                    ks->scores[type](s, N, q, G, k, t0, N, scr);
                    a += decode_now() - t1;
                }
                for (size_t t0 = 0; t0 < T; t0 += N) {
                    double t1 = decode_now();
                    ks->vacc[type](acc, p, N, G, v, t0, N, scr);
                    b += decode_now() - t1;
                }
                km = best_of(km, a), vm = best_of(vm, b);
            }
            kl2 = kl2 / N * 1e9, vl2 = vl2 / N * 1e9, km = km / (double)T * 1e9, vm = vm / (double)T * 1e9;
            const double step = km + vm, ov_k = (kl2 + floor_k - km) / (kl2 < floor_k ? kl2 : floor_k);
            const double ov_v = (vl2 + floor_v - vm) / (vl2 < floor_v ? vl2 : floor_v);
            const double bound = (floor_k + floor_v) / ((kl2 > floor_k ? kl2 : floor_k) + (vl2 > floor_v ? vl2 : floor_v));
            printf("%-6s %3zu %6zu %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %7.1f%% %8.2f %6.1f%%\n", fmts[fi], G, rb, floor_ns, kl2,
                   km, vl2, vm, step, 100.0 * (floor_k + floor_v) / step, (ov_k + ov_v) / 2, 100.0 * bound);
            fflush(stdout);
            free(q), free(s), free(p), free(acc), free(scr);
        }
        side_free(&sk), side_free(&sv);
    }
    free(x);
    return 0;
}
