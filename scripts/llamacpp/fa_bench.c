/* fa_bench.c: time llama.cpp's CPU flash-attention decode step (ggml_flash_attn_ext, one new
 * query per head) over a KV cache of T tokens, for several cache types, and check its output
 * against attention in double over the dequantized cache.  Built and run by
 * scripts/bench-llamacpp.sh against a static ggml build; not part of kvc or of make test.
 *
 * The graph is the one llama.cpp builds for a decode step with flash attention on
 * (src/llama-graph.cpp build_attn_mha, src/llama-kv-cache.cpp get_k/get_v):
 *   K cache  [D*Hkv, T] (type), viewed as [D, Hkv, T, 1] and permuted (0,2,1,3) -> [D, T, Hkv, 1]
 *   V cache  the same (flash attention: V not transposed)
 *   q        [D, Hq, 1] f32 viewed/permuted (0,2,1,3) -> [D, 1, Hq, 1]
 *   mask     f16 [T, 1, 1, 1], all zeros (every cell in use; T is a multiple of llama's n_kv pad 256)
 *   out      ggml_flash_attn_ext(q, k, v, mask, 1/sqrt(D), 0, 0), ggml_prec_set_acc(out, F32)
 * `--layout heads` instead stores each head's T rows contiguously (test-backend-ops' layout);
 * `--thp` puts the buffers in transparent huge pages (llama.cpp's CPU buffers do not ask for them).
 * Not timed (outside the attention op in llama.cpp too): projections, RoPE, the KV write, and the
 * Hadamard rotation llama.cpp applies to q and the output when the cache is quantized.
 * Data: K, V, q ~ N(0, 1), K/V stored with ggml_quantize_chunk (ggml's reference quantizers).
 * Timing: one warm-up, then --repeat ggml_graph_compute calls on a ggml threadpool of N threads; with
 * --evict-mib N, each timed call after an untimed read of N MiB of other memory (as kvc bench --evict-mib), so
 * that the cache is read from memory and not from the last-level cache.
 */
#define _GNU_SOURCE /* clock_gettime, posix_memalign, madvise(MADV_HUGEPAGE) */
#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

static uint64_t rng_state;
static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return ((rng_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static void rng_normal(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(rng_unit())), t = 6.283185307179586 * rng_unit();
        x[i] = (float)(r * cos(t));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(t));
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* fill a [ne0 = n_per_row, nrows] tensor of `type` from N(0,1) floats, in chunks */
static void fill_random(struct ggml_tensor *t, int64_t n_per_row, int64_t nrows) {
    const int64_t chunk = 4096;
    float *buf = malloc(sizeof(float) * n_per_row * chunk);
    if (!buf) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int64_t r = 0; r < nrows; r += chunk) {
        int64_t n = nrows - r < chunk ? nrows - r : chunk;
        rng_normal(buf, n * n_per_row);
        ggml_quantize_chunk(t->type, buf, (char *)t->data + r * ggml_row_size(t->type, n_per_row), 0, n, n_per_row, NULL);
    }
    free(buf);
}

/* out[h*D + d] = softmax(scale * q_h . k_h^T) v_h, in double over the dequantized cache */
static void reference(const struct ggml_tensor *k, const struct ggml_tensor *v, const float *q,
                      int64_t D, int64_t T, int64_t Hkv, int64_t Hq, float scale, double *out) {
    ggml_to_float_t kf = ggml_get_type_traits(k->type)->to_float;
    ggml_to_float_t vf = ggml_get_type_traits(v->type)->to_float;
    float *row = malloc(sizeof(float) * D);
    double *s = malloc(sizeof(double) * T);
    for (int64_t h = 0; h < Hq; h++) {
        int64_t hk = h / (Hq / Hkv);
        const float *qh = q + h * D;
        double m = -INFINITY, sum = 0;
        for (int64_t t = 0; t < T; t++) {
            kf((const char *)k->data + t * k->nb[1] + hk * k->nb[2], row, D);
            double acc = 0;
            for (int64_t d = 0; d < D; d++) acc += (double)qh[d] * row[d];
            s[t] = acc * scale;
            if (s[t] > m) m = s[t];
        }
        double *o = out + h * D;
        for (int64_t d = 0; d < D; d++) o[d] = 0;
        for (int64_t t = 0; t < T; t++) {
            double p = exp(s[t] - m);
            sum += p;
            vf((const char *)v->data + t * v->nb[1] + hk * v->nb[2], row, D);
            for (int64_t d = 0; d < D; d++) o[d] += p * row[d];
        }
        for (int64_t d = 0; d < D; d++) o[d] /= sum;
    }
    free(row);
    free(s);
}

static double rel_err(const float *y, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static int parse_list(const char *s, char items[][16], int max) {
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= 16) { fprintf(stderr, "bad list: %s\n", s); exit(2); }
        memcpy(items[n], p, len);
        items[n++][len] = 0;
        p = e ? e + 1 : p + len;
    }
    return n;
}

/* the eviction read: N MiB of other memory, its XOR kept so that the loads stay */
static volatile uint64_t evict_sink;
static void evict(const uint64_t *b, size_t n) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) a0 ^= b[i], a1 ^= b[i + 1], a2 ^= b[i + 2], a3 ^= b[i + 3];
    evict_sink += a0 ^ a1 ^ a2 ^ a3;
}

int main(int argc, char **argv) {
    int64_t T = 65536, Hkv = 8, Hq = 8, D = 128;
    int repeat = 10, heads_layout = 0, check = 1, thp = 0;
    size_t evict_mib = 0;
    uint64_t seed = 0;
    const char *types_s = "f16,q8_0,q4_0", *threads_s = "1,2";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-check")) { check = 0; continue; }
        if (!strcmp(a, "--thp")) { thp = 1; continue; }
        if (!v) { fprintf(stderr, "missing value for %s\n", a); return 2; }
        if (!strcmp(a, "--tokens")) T = atoll(v);
        else if (!strcmp(a, "--kv-heads")) Hkv = atoll(v);
        else if (!strcmp(a, "--q-heads")) Hq = atoll(v);
        else if (!strcmp(a, "--head-dim")) D = atoll(v);
        else if (!strcmp(a, "--types")) types_s = v;
        else if (!strcmp(a, "--threads")) threads_s = v;
        else if (!strcmp(a, "--repeat")) repeat = atoi(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--evict-mib")) evict_mib = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--layout")) heads_layout = !strcmp(v, "heads");
        else {
            fprintf(stderr, "usage: fa_bench [--tokens T] [--kv-heads H] [--q-heads HQ] [--head-dim D]"
                            " [--types f16,q8_0,...] [--threads 1,2] [--repeat N] [--seed N]"
                            " [--layout cache|heads] [--evict-mib N] [--thp] [--no-check]\n");
            return 2;
        }
        i++;
    }
    if (T < 1 || Hkv < 1 || Hq < Hkv || Hq % Hkv || D < 1 || repeat < 1) {
        fprintf(stderr, "bad shape\n");
        return 2;
    }
    char types[16][16], thr_s[16][16];
    int ntypes = parse_list(types_s, types, 16), nthr = parse_list(threads_s, thr_s, 16);

    ggml_cpu_init();
    printf("# fa_bench: ggml %s (commit %s), ggml_flash_attn_ext decode step, prec F32\n", ggml_version(), ggml_commit());
    printf("# shape: tokens %lld, kv heads %lld, q heads %lld, head dim %lld, layout %s; repeat %d after 1 warm-up\n",
           (long long)T, (long long)Hkv, (long long)Hq, (long long)D,
           heads_layout ? "heads (head-major, like test-backend-ops)" : "cache (token-major, like llama's KV cache)", repeat);
    if (thp) printf("# --thp: K/V buffers madvise(MADV_HUGEPAGE)\n");
    size_t ev_n = evict_mib << 17;   /* 64-bit words */
    uint64_t *ev = ev_n ? malloc(ev_n * sizeof *ev) : NULL;
    if (ev_n && !ev) { fprintf(stderr, "out of memory for --evict-mib\n"); return 1; }
    for (size_t i = 0; i < ev_n; i++) ev[i] = i;
    if (ev_n) printf("# steps: each timed step after an untimed read of %zu MiB of other memory (--evict-mib)\n", evict_mib);
    else printf("# steps: back to back\n");
    printf("# rel_err = ||out - ref|| / ||ref||, ref = attention in double over the dequantized cache;\n"
           "# rel_err_q: the same with q rounded to K's vec_dot type first, as the kernel does\n");
    printf("%-8s %3s %9s %9s %9s %9s %8s %10s %10s\n", "type", "thr", "MB", "ms", "ms_min", "ms_max", "GB/s", "rel_err", "rel_err_q");
    fflush(stdout);

    for (int it = 0; it < ntypes; it++) {
        enum ggml_type type = GGML_TYPE_COUNT;
        for (int t = 0; t < GGML_TYPE_COUNT; t++) {
            const char *name = ggml_type_name((enum ggml_type)t);
            if (name && !strcmp(name, types[it]) && ggml_get_type_traits((enum ggml_type)t)->blck_size > 0) type = (enum ggml_type)t;
        }
        if (type == GGML_TYPE_COUNT || D % ggml_blck_size(type)) {
            printf("%-8s unsupported type or head dim not a multiple of its block\n", types[it]);
            continue;
        }
        rng_state = seed * 0x2545F4914F6CDD1Dull + 1;
        size_t kv_bytes = ggml_row_size(type, D) * Hkv * T;
        struct ggml_init_params ip = {
            .mem_size = 2 * kv_bytes + (size_t)T * 2 + (size_t)(2 * Hq * D) * 4 + 64 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20),
            .mem_buffer = NULL, .no_alloc = false,
        };
        void *thp_buf = NULL;
        if (thp) { /* --thp: the cache in transparent huge pages (llama.cpp's CPU buffers use plain posix_memalign) */
            ip.mem_size = (ip.mem_size + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
            if (posix_memalign(&thp_buf, 2u << 20, ip.mem_size) || madvise(thp_buf, ip.mem_size, MADV_HUGEPAGE)) {
                fprintf(stderr, "--thp: posix_memalign/madvise failed\n");
                return 1;
            }
            ip.mem_buffer = thp_buf;
        }
        struct ggml_context *ctx = ggml_init(ip);
        if (!ctx) { fprintf(stderr, "ggml_init failed (%zu bytes)\n", ip.mem_size); return 1; }

        struct ggml_tensor *k, *v, *kst, *vst;
        if (!heads_layout) { /* llama KV cache: row = one token's n_embd_k_gqa = D*Hkv values */
            kst = ggml_new_tensor_2d(ctx, type, D * Hkv, T);
            vst = ggml_new_tensor_2d(ctx, type, D * Hkv, T);
            fill_random(kst, D * Hkv, T);
            fill_random(vst, D * Hkv, T);
            k = ggml_view_4d(ctx, kst, D, Hkv, T, 1, ggml_row_size(type, D), ggml_row_size(type, D * Hkv), kst->nb[2], 0);
            v = ggml_view_4d(ctx, vst, D, Hkv, T, 1, ggml_row_size(type, D), ggml_row_size(type, D * Hkv), vst->nb[2], 0);
            k = ggml_permute(ctx, k, 0, 2, 1, 3);
            v = ggml_permute(ctx, v, 0, 2, 1, 3);
        } else {
            kst = k = ggml_new_tensor_4d(ctx, type, D, T, Hkv, 1);
            vst = v = ggml_new_tensor_4d(ctx, type, D, T, Hkv, 1);
            fill_random(kst, D, T * Hkv);
            fill_random(vst, D, T * Hkv);
        }
        struct ggml_tensor *qst = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, Hq, 1);
        rng_normal((float *)qst->data, D * Hq);
        struct ggml_tensor *q = ggml_permute(ctx, qst, 0, 2, 1, 3);
        struct ggml_tensor *m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, T, 1, 1, 1);
        memset(m->data, 0, ggml_nbytes(m)); /* f16 +0.0 */
        const float scale = 1.0f / sqrtf((float)D);
        struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0f, 0.0f);
        ggml_prec_set_acc(out, GGML_PREC_F32);
        struct ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);

        /* references: ref over q as given, ref_q over q rounded to K's vec_dot type (what the kernel multiplies) */
        double *ref = NULL, *ref_q = NULL;
        if (check) {
            ref = malloc(sizeof(double) * Hq * D);
            ref_q = malloc(sizeof(double) * Hq * D);
            float *qr = malloc(sizeof(float) * Hq * D);
            reference(k, v, (const float *)qst->data, D, T, Hkv, Hq, scale, ref);
            enum ggml_type vdt = ggml_get_type_traits_cpu(type)->vec_dot_type;
            void *qq = malloc(ggml_row_size(vdt, D) + 64);
            for (int64_t h = 0; h < Hq; h++) {
                ggml_get_type_traits_cpu(vdt)->from_float((const float *)qst->data + h * D, qq, D);
                if (vdt == GGML_TYPE_Q8_1) { /* no to_float in ggml: blocks {f16 d, f16 s, int8 qs[32]} */
                    const uint8_t *b = qq;
                    const size_t bs = ggml_type_size(vdt), hdr = bs - 32;
                    for (int64_t i = 0; i < D; i++) {
                        const uint8_t *blk = b + (i / 32) * bs;
                        ggml_fp16_t d16;
                        memcpy(&d16, blk, 2);
                        qr[h * D + i] = ggml_fp16_to_fp32(d16) * (float)(int8_t)blk[hdr + i % 32];
                    }
                } else {
                    ggml_get_type_traits(vdt)->to_float(qq, qr + h * D, D);
                }
            }
            reference(k, v, qr, D, T, Hkv, Hq, scale, ref_q);
            free(qq); free(qr);
        }

        for (int ith = 0; ith < nthr; ith++) {
            int nt = atoi(thr_s[ith]);
            struct ggml_threadpool_params tpp = ggml_threadpool_params_default(nt);
            struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
            struct ggml_cplan cp = ggml_graph_plan(gf, nt, tp);
            cp.work_data = malloc(cp.work_size + 1);
            double *ms = malloc(sizeof(double) * repeat);
            ggml_graph_compute(gf, &cp); /* warm-up */
            for (int r = 0; r < repeat; r++) {
                if (ev_n) evict(ev, ev_n);
                double t0 = now_ms();
                if (ggml_graph_compute(gf, &cp) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); return 1; }
                ms[r] = now_ms() - t0;
            }
            qsort(ms, repeat, sizeof(double), cmp_d);
            double med = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
            double bytes = (double)(ggml_nbytes(kst) + ggml_nbytes(vst));
            /* the last timed step's output (every step computes the same thing) */
            double err = check ? rel_err((const float *)out->data, ref, Hq * D) : NAN;
            double err_q = check ? rel_err((const float *)out->data, ref_q, Hq * D) : NAN;
            printf("%-8s %3d %9.2f %9.3f %9.3f %9.3f %8.2f %10.2e %10.2e\n", types[it], nt, bytes / 1e6, med, ms[0],
                   ms[repeat - 1], bytes / (med * 1e6), err, err_q);
            fflush(stdout);
            free(ms);
            free(cp.work_data);
            ggml_threadpool_free(tp);
        }
        free(ref); free(ref_q);
        ggml_free(ctx);
        free(thp_buf);
    }
    return 0;
}
