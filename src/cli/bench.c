/* bench: `kvc bench` (see bench.h). L layers, Hkv KV heads, Hq query heads, T tokens, D head dim. */
#include "cli/bench.h"
#include "base/attention.h"
#include "decode/decode.h"
#include "base/linalg.h"
#include "base/rng.h"
#include "store/store.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 32

typedef struct Spec {
    char name[64];
    StoreFormat k, v;
    size_t resid;   /* kiviB: the last `resid` tokens in FP16 (a second segment), else 0 */
} Spec;

enum { KIVI_GROUP = 32, KIVI_RESIDUAL = 128 };   /* KIVI's defaults (src/methods/kivi.c) */

typedef struct Opts {
    size_t T, L, Hkv, D;
    size_t hq[MAX_LIST], n_hq;
    int threads[MAX_LIST];
    size_t n_threads;
    Spec *specs;
    size_t n_specs;
    int repeat, naive_repeat;
    size_t bw_mib;
    uint64_t seed;
    int csv;
    const char *csv_file;
} Opts;

static const char *const default_formats =
    "f32,f16,bf16,e4m3,e5m2,int8,int4,int2,int8ch/int8,int4ch/int4,q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,lr32/f16,kivi4,kivi2";

/* ---- arguments ----------------------------------------------------------------------------------------------- */

static int parse_size(const char *s, const char *opt, size_t lo, size_t hi, size_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return kvc_fail("bench: %s: expected an integer in %zu..%zu (got \"%s\")", opt, lo, hi, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return kvc_fail("bench: %s: expected an integer in %zu..%zu (got \"%s\")", opt, lo, hi, s);
    *out = (size_t)v;
    return 0;
}

/* A comma list of integers. */
static int parse_list(const char *s, const char *opt, size_t lo, size_t hi, size_t *out, size_t *n)
{
    char buf[512];
    if (strlen(s) >= sizeof buf) return kvc_fail("bench: %s: list too long (got \"%.40s...\")", opt, s);
    strcpy(buf, s);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= MAX_LIST) return kvc_fail("bench: %s: at most %d values (got \"%s\")", opt, MAX_LIST, s);
        if (parse_size(tok, opt, lo, hi, &out[*n])) return -1;
        (*n)++;
    }
    if (*n == 0) return kvc_fail("bench: %s: empty list (got \"%s\")", opt, s);
    return 0;
}

static int parse_specs(Opts *o, const char *s)
{
    size_t len = strlen(s);
    char *buf = xmalloc(len + 1);
    memcpy(buf, s, len + 1);
    o->specs = xcalloc(len / 2 + 1, sizeof *o->specs);
    o->n_specs = 0;
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        Spec *sp = &o->specs[o->n_specs];
        if (strlen(tok) >= sizeof sp->name) {
            rc = kvc_fail("bench: --formats: format name too long (got \"%s\")", tok);
            break;
        }
        strcpy(sp->name, tok);
        if (strcmp(tok, "kivi2") == 0 || strcmp(tok, "kivi4") == 0 || strcmp(tok, "kivi8") == 0) {
            int b = tok[4] - '0';
            sp->k = store_intn_format(b, 1, STORE_AXIS_CHANNEL, KIVI_GROUP, STORE_SCALE_F16);
            sp->v = store_intn_format(b, 1, STORE_AXIS_TOKEN, KIVI_GROUP, STORE_SCALE_F16);
            sp->resid = KIVI_RESIDUAL;
            o->n_specs++;
            continue;
        }
        if (strncmp(tok, "kivi", 4) == 0) {
            rc = kvc_fail("bench: --formats: KIVI's formats are kivi2, kivi4 and kivi8, for keys and values together "
                          "(got \"%s\")", tok);
            break;
        }
        char *slash = strchr(tok, '/');
        if (slash) *slash = '\0';
        if (store_format_parse(&sp->k, tok, "bench: --formats") ||
            store_format_parse(&sp->v, slash ? slash + 1 : tok, "bench: --formats"))
            rc = -1;
        o->n_specs++;
    }
    if (!rc && o->n_specs == 0) rc = kvc_fail("bench: --formats: empty list (got \"%s\")", s);
    free(buf);
    return rc;
}

static int take(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) return kvc_fail("bench: missing value after %s (got nothing)", name);
    *val = argv[++*i];
    return 1;
}

static long cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

static size_t llc_bytes(void);

static int parse_args(Opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->T = 65536, o->L = 1, o->Hkv = 8, o->D = 128, o->repeat = 10, o->naive_repeat = 3;
    o->hq[0] = 8, o->n_hq = 1;
    o->threads[0] = 1, o->n_threads = 1;
    if (cpu_count() > 1) o->threads[o->n_threads++] = (int)(cpu_count() > 1024 ? 1024 : cpu_count());
    size_t llc_mib = (llc_bytes() + (1u << 20) - 1) >> 20;
    o->bw_mib = 4 * llc_mib > 128 ? 4 * llc_mib : 128;
    const char *formats = default_formats, *q_heads = NULL, *v;
    size_t tmp[MAX_LIST], n;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = take(argc, argv, &i, "--tokens", &v))) {
            if (r < 0 || parse_size(v, "--tokens", 1, (size_t)1 << 24, &o->T)) return -1;
        } else if ((r = take(argc, argv, &i, "--layers", &v))) {
            if (r < 0 || parse_size(v, "--layers", 1, 1024, &o->L)) return -1;
        } else if ((r = take(argc, argv, &i, "--kv-heads", &v))) {
            if (r < 0 || parse_size(v, "--kv-heads", 1, 1024, &o->Hkv)) return -1;
        } else if ((r = take(argc, argv, &i, "--q-heads", &v))) {
            if (r < 0) return -1;
            q_heads = v;
        } else if ((r = take(argc, argv, &i, "--head-dim", &v))) {
            if (r < 0 || parse_size(v, "--head-dim", 1, 65536, &o->D)) return -1;
        } else if ((r = take(argc, argv, &i, "--formats", &v))) {
            if (r < 0) return -1;
            formats = v;
        } else if ((r = take(argc, argv, &i, "--threads", &v))) {
            if (r < 0 || parse_list(v, "--threads", 1, 1024, tmp, &n)) return -1;
            for (size_t k = 0; k < n; k++) o->threads[k] = (int)tmp[k];
            o->n_threads = n;
        } else if ((r = take(argc, argv, &i, "--repeat", &v))) {
            if (r < 0 || parse_size(v, "--repeat", 1, 100000, &n)) return -1;
            o->repeat = (int)n;
        } else if ((r = take(argc, argv, &i, "--naive-repeat", &v))) {
            if (r < 0 || parse_size(v, "--naive-repeat", 0, 100000, &n)) return -1;
            o->naive_repeat = (int)n;
        } else if ((r = take(argc, argv, &i, "--bw-mib", &v))) {
            if (r < 0 || parse_size(v, "--bw-mib", 1, 65536, &o->bw_mib)) return -1;
        } else if ((r = take(argc, argv, &i, "--seed", &v))) {
            if (r < 0 || parse_size(v, "--seed", 0, SIZE_MAX, &n)) return -1;
            o->seed = n;
        } else if ((r = take(argc, argv, &i, "--csv-file", &v))) {
            if (r < 0) return -1;
            if (!*v) return kvc_fail("bench: --csv-file: empty path (got \"\")");
            o->csv_file = v;
        } else if ((r = take(argc, argv, &i, "--format", &v))) {
            if (r < 0) return -1;
            if (strcmp(v, "csv") == 0) o->csv = 1;
            else if (strcmp(v, "table") == 0) o->csv = 0;
            else return kvc_fail("bench: --format: must be table or csv (got \"%s\")", v);
        } else {
            return kvc_fail("bench: unknown argument; see kvc bench --help (got \"%s\")", argv[i]);
        }
    }
    if (q_heads) {
        if (parse_list(q_heads, "--q-heads", 1, 65536, o->hq, &o->n_hq)) return -1;
    } else {
        o->hq[0] = o->Hkv;
    }
    for (size_t k = 0; k < o->n_hq; k++)
        if (o->hq[k] % o->Hkv != 0)
            return kvc_fail("bench: --q-heads: must be a multiple of --kv-heads %zu (got %zu)", o->Hkv, o->hq[k]);
    size_t cells;
    if (size_mul(o->T, o->D, &cells) || size_mul(cells, o->L * o->Hkv, &cells) || cells > ((size_t)1 << 31))
        return kvc_fail("bench: the cache is too large: layers x kv-heads x tokens x head-dim must be at most 2^31 "
                        "(got %zu x %zu x %zu x %zu)", o->L, o->Hkv, o->T, o->D);
    if (parse_specs(o, formats)) return -1;
    for (size_t k = 0; k < o->n_specs; k++)
        if (store_check(o->specs[k].k, o->T, o->D, "bench: --formats") ||
            store_check(o->specs[k].v, o->T, o->D, "bench: --formats"))
            return -1;
    return 0;
}

/* ---- machine ------------------------------------------------------------------------------------------------- */

static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *ok = fgets(buf, (int)cap, f);
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* Bytes of a cache size string like "32768K" or "32M". */
static size_t parse_cache_size(const char *s)
{
    char *end;
    size_t v = (size_t)strtoull(s, &end, 10);
    if (*end == 'K') v <<= 10;
    else if (*end == 'M') v <<= 20;
    return v;
}

/* The largest cache of cpu0 (sysfs), or 32 MiB when unknown. */
static size_t llc_bytes(void)
{
    size_t best = 0;
    char path[128], buf[64];
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (read_line(path, buf, sizeof buf)) continue;
        size_t v = parse_cache_size(buf);
        if (v > best) best = v;
    }
    return best ? best : (size_t)32 << 20;
}

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                p[strcspn(p, "\n")] = '\0';
                snprintf(buf, cap, "%s", p);
            }
            break;
        }
    fclose(f);
}

static void caches(char *buf, size_t cap)
{
    buf[0] = '\0';
    char path[128], lvl[16], type[32], size[32];
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_line(path, lvl, sizeof lvl)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (read_line(path, type, sizeof type)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (read_line(path, size, sizeof size)) continue;
        if (strcmp(type, "Instruction") == 0) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%sL%s%s %s", n ? ", " : "", lvl, strcmp(type, "Data") == 0 ? "d" : "", size);
    }
    if (!buf[0]) snprintf(buf, cap, "unknown");
}

static void isa_flags(char *buf, size_t cap)
{
    unsigned f = decode_cpu_features();
    snprintf(buf, cap, "%s%s%s%s", f & DECODE_CPU_AVX2 ? "avx2 " : "", f & DECODE_CPU_FMA ? "fma " : "",
             f & DECODE_CPU_F16C ? "f16c " : "", f & DECODE_CPU_AVX512F ? "avx512f" : "(no avx512f)");
}

#ifndef KVC_BUILD_FLAGS
#define KVC_BUILD_FLAGS "(unknown)"
#endif

/* ---- measurements -------------------------------------------------------------------------------------------- */

typedef struct Stat {
    double med, min, max;
} Stat;

/* Times `repeat` steps after one untimed warm-up; the last output stays in out. */
static Stat time_steps(Decoder *d, float *out, const float *q, DecodeMode mode, int repeat)
{
    double *t = xmalloc((size_t)repeat * sizeof *t);
    decoder_step(d, out, q, mode);
    for (int r = 0; r < repeat; r++) {
        double t0 = decode_now();
        decoder_step(d, out, q, mode);
        t[r] = decode_now() - t0;
    }
    Stat s = {0, t[0], t[0]};
    for (int r = 0; r < repeat; r++) {
        if (t[r] < s.min) s.min = t[r];
        if (t[r] > s.max) s.max = t[r];
    }
    s.med = median(t, (size_t)repeat);
    free(t);
    return s;
}

/* Read bandwidth in GB/s on each thread count: `repeat` timed passes over bw_mib MiB; samples appended. */
static int probe_bandwidth(const Opts *o, const float *buf, size_t n, double **samples, size_t *n_samples)
{
    double *t = xmalloc((size_t)o->repeat * sizeof *t);
    for (size_t k = 0; k < o->n_threads; k++) {
        if (decode_read_times(t, o->repeat, buf, n, o->threads[k])) {
            free(t);
            return -1;
        }
        for (int r = 0; r < o->repeat; r++) samples[k][n_samples[k]++] = (double)n * sizeof(float) / t[r] / 1e9;
    }
    free(t);
    return 0;
}

/* ---- the synthetic cache ----------------------------------------------------------------------------------- */

typedef struct Source {
    float *K, *V;    /* (L*Hkv, T, D) */
    float *B;        /* (D, D) a basis for low-rank formats: N(0, 1/R) is drawn per rank on use */
} Source;

static void fill_normal(rng *r, float *x, size_t n)
{
    double buf[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t m = n - i < 4096 ? n - i : 4096;
        rng_normal_fill(r, buf, m);
        for (size_t k = 0; k < m; k++) x[i + k] = (float)buf[k];
    }
}

/* Stores one tensor of the source in format f. Low rank: coefficients are the first R columns of each
 * source row, the basis is the first R rows of src->B scaled by 1/sqrt(R) (decode speed does not depend
 * on the values; accuracy is checked against the stored tensor itself). */
static void build_tensor(StoreTensor *st, StoreFormat f, const float *x, const Source *src, size_t T, size_t D)
{
    store_alloc(st, f, T, D);
    if (!f.rank) {
        store_quantize_f32(st, x);
        return;
    }
    size_t R = f.rank;
    float *c = xmalloc(T * R * sizeof *c), *B = xmalloc(R * D * sizeof *B);
    for (size_t t = 0; t < T; t++) memcpy(c + t * R, x + t * D, R * sizeof *c);
    for (size_t i = 0; i < R * D; i++) B[i] = src->B[i] / sqrtf((float)R);
    store_quantize_f32(st, c);
    store_set_basis_f32(st, B);
    free(c);
    free(B);
}

/* Attention over the dequantized cache (main tokens, then the residual) in double (the quality path), for every
 * query head. */
static void reference(double *ref, const DecodeCache *c, const float *q, size_t Hq)
{
    size_t T = c->T + c->Tr, D = c->D, G = Hq / c->Hkv;
    double *Kd = xmalloc(T * D * sizeof *Kd), *Vd = xmalloc(T * D * sizeof *Vd), *w = xmalloc(T * sizeof *w);
    double *qd = xmalloc(D * sizeof *qd);
    for (size_t l = 0; l < c->L; l++)
        for (size_t h = 0; h < c->Hkv; h++) {
            store_dequantize_f64(Kd, &c->K[l * c->Hkv + h]);
            store_dequantize_f64(Vd, &c->V[l * c->Hkv + h]);
            if (c->Tr) {
                store_dequantize_f64(Kd + c->T * D, &c->Kr[l * c->Hkv + h]);
                store_dequantize_f64(Vd + c->T * D, &c->Vr[l * c->Hkv + h]);
            }
            for (size_t g = 0; g < G; g++) {
                size_t qi = l * Hq + h * G + g;
                for (size_t j = 0; j < D; j++) qd[j] = q[qi * D + j];
                attn_forward(ref + qi * D, w, qd, Kd, Vd, T, D);
            }
        }
    free(Kd), free(Vd), free(w), free(qd);
}

static double rel_error(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i];
        num += e * e;
        den += b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

/* ---- output -------------------------------------------------------------------------------------------------- */

typedef struct Result {
    const Spec *spec;
    size_t hq;
    int threads;
    uint64_t bytes;
    Stat fused, keys, naive;
    int has_naive;
    double bw, bw_max, rel;
    int same_threads;   /* output identical to the first thread count's */
} Result;

static const char *const csv_header =
    "format,k_format,v_format,layers,kv_heads,q_heads,tokens,head_dim,threads,isa,bytes,ms_median,ms_min,ms_max,"
    "gbps,bw_gbps,pct_bw,pct_bw_best,k_ms,naive_ms,naive_over_fused,rel_err,tol,ok,threads_identical";

static void print_csv_row(FILE *f, const Opts *o, const Result *r)
{
    char kf[64], vf[64];
    store_format_name(kf, sizeof kf, r->spec->k);
    store_format_name(vf, sizeof vf, r->spec->v);
    if (r->spec->resid && o->T > r->spec->resid) {   /* kivi: asymmetric intN groups, then the FP16 residual */
        snprintf(kf, sizeof kf, "int%da-ch-g%d+f16r%zu", r->spec->k.bits, KIVI_GROUP, r->spec->resid);
        snprintf(vf, sizeof vf, "int%da-g%d+f16r%zu", r->spec->v.bits, KIVI_GROUP, r->spec->resid);
    } else if (r->spec->resid) {   /* kivi with T <= the residual: every token in FP16 */
        snprintf(kf, sizeof kf, "f16");
        snprintf(vf, sizeof vf, "f16");
    }
    double gbps = (double)r->bytes / r->fused.med / 1e9;
    fprintf(f, "%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%d,%s,%llu,%.4f,%.4f,%.4f,%.2f,%.2f,%.1f,%.1f,%.4f,", r->spec->name, kf, vf,
            o->L, o->Hkv, r->hq, o->T, o->D, r->threads, decode_isa(), (unsigned long long)r->bytes, r->fused.med * 1e3,
            r->fused.min * 1e3, r->fused.max * 1e3, gbps, r->bw, 100.0 * gbps / r->bw,
            100.0 * (double)r->bytes / r->fused.min / 1e9 / r->bw_max, r->keys.med * 1e3);
    if (r->has_naive) fprintf(f, "%.3f,%.2f,", r->naive.med * 1e3, r->naive.med / r->fused.med);
    else fprintf(f, ",,");
    fprintf(f, "%.3g,%g,%s,%s\n", r->rel, DECODE_TOL, r->rel < DECODE_TOL ? "yes" : "no", r->same_threads ? "yes" : "no");
}

static void print_table(const Opts *o, const Result *res, size_t n)
{
    printf("%-14s %4s %3s %9s %9s %9s %9s %7s %6s %6s %8s %9s %7s %9s %3s\n", "format", "qh", "thr", "MB", "ms", "ms_min",
           "ms_max", "GB/s", "%bw", "%best", "k_ms", "naive_ms", "naive_x", "rel_err", "ok");
    for (size_t i = 0; i < n; i++) {
        const Result *r = &res[i];
        double gbps = (double)r->bytes / r->fused.med / 1e9;
        char naive[32] = "", nx[32] = "";
        if (r->has_naive) {
            snprintf(naive, sizeof naive, "%.2f", r->naive.med * 1e3);
            snprintf(nx, sizeof nx, "%.1f", r->naive.med / r->fused.med);
        }
        printf("%-14s %4zu %3d %9.2f %9.3f %9.3f %9.3f %7.2f %5.1f%% %5.1f%% %8.3f %9s %7s %9.2e %3s\n", r->spec->name,
               r->hq, r->threads, (double)r->bytes / 1e6, r->fused.med * 1e3, r->fused.min * 1e3, r->fused.max * 1e3,
               gbps, 100.0 * gbps / r->bw, 100.0 * (double)r->bytes / r->fused.min / 1e9 / r->bw_max, r->keys.med * 1e3,
               naive, nx, r->rel, r->rel < DECODE_TOL ? "yes" : "NO");
    }
    (void)o;
}

static void print_machine(const Opts *o, const double *bw_med, const double *bw_max)
{
    char model[256], cache[256], isa[128];
    cpu_model(model, sizeof model);
    caches(cache, sizeof cache);
    isa_flags(isa, sizeof isa);
    printf("# kvc %s bench\n", KVC_VERSION);
    printf("# cpu:      %s, %ld logical CPUs; caches (cpu0): %s\n", model, cpu_count(), cache);
    printf("# isa:      %s; fused kernels: %s (runtime dispatch; src/decode/kernels*_avx2.c built with -mavx2 -mfma "
           "-mf16c)\n", isa, decode_isa());
    printf("# build:    gcc %s, %s\n", __VERSION__, KVC_BUILD_FLAGS);
    printf("# shape:    layers %zu, kv heads %zu, tokens %zu, head dim %zu; repeat %d (median of timed steps after "
           "1 warm-up)\n", o->L, o->Hkv, o->T, o->D, o->repeat);
    printf("# bandwidth (read %zu MiB, %s, before and after the formats):", o->bw_mib, "median / max");
    for (size_t k = 0; k < o->n_threads; k++)
        printf("%s %d thread%s %.2f / %.2f GB/s", k ? ";" : "", o->threads[k], o->threads[k] > 1 ? "s" : "", bw_med[k],
               bw_max[k]);
    printf("\n");
    printf("# accumulators: float32 products and sums per %d-token block, blocks merged in double; rel_err = "
           "||out - ref|| / ||ref||,\n#   ref = attention in double over the dequantized cache; ok: rel_err < %g.\n"
           "# %%bw = (bytes / median ms) / median bandwidth; %%best = (bytes / min ms) / max bandwidth (the least "
           "disturbed samples).\n", DECODE_BLOCK, DECODE_TOL);
    printf("# k_ms: key side only (scores and their max). naive: dequantize the whole cache to float32 every step, "
           "then attend.\n\n");
}

/* ---- the command --------------------------------------------------------------------------------------------- */

int bench_command(int argc, char **argv)
{
    Opts o;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(BENCH_USAGE, stdout);
            return 0;
        }
    if (parse_args(&o, argc, argv)) {
        free(o.specs);
        return -1;
    }
    FILE *csv_out = NULL;
    if (o.csv_file && !(csv_out = fopen(o.csv_file, "w"))) {
        fprintf(stderr, "kvc: bench: --csv-file: cannot write %s (got %s)\n", o.csv_file, strerror(errno));
        free(o.specs);
        return 1;
    }
    size_t n_kv = o.L * o.Hkv, per = o.T * o.D, hq_max = 0;
    for (size_t k = 0; k < o.n_hq; k++)
        if (o.hq[k] > hq_max) hq_max = o.hq[k];

    /* bandwidth probe buffer, and samples before and after */
    size_t bw_n = o.bw_mib << 18;
    float *bw_buf = xmalloc(bw_n * sizeof *bw_buf);
    for (size_t i = 0; i < bw_n; i++) bw_buf[i] = 1.0f;
    double *samples[MAX_LIST];
    size_t n_samples[MAX_LIST] = {0};
    for (size_t k = 0; k < o.n_threads; k++) samples[k] = xmalloc(2 * (size_t)o.repeat * sizeof **samples);
    fprintf(stderr, "kvc bench: measuring read bandwidth (%zu MiB)\n", o.bw_mib);
    int rc = 0;
    if (probe_bandwidth(&o, bw_buf, bw_n, samples, n_samples)) rc = 1;

    /* the source cache and the queries */
    Source src;
    rng r;
    rng_seed_u64(&r, o.seed);
    fprintf(stderr, "kvc bench: generating %zu x %zu x %zu keys and values\n", n_kv, o.T, o.D);
    src.K = xmalloc(n_kv * per * sizeof *src.K);
    src.V = xmalloc(n_kv * per * sizeof *src.V);
    src.B = xmalloc(o.D * o.D * sizeof *src.B);
    fill_normal(&r, src.K, n_kv * per);
    fill_normal(&r, src.V, n_kv * per);
    fill_normal(&r, src.B, o.D * o.D);
    float *q = xmalloc(o.L * hq_max * o.D * sizeof *q), *out = xmalloc(o.L * hq_max * o.D * sizeof *out);
    float *first = xmalloc(o.L * hq_max * o.D * sizeof *first);
    fill_normal(&r, q, o.L * hq_max * o.D);
    double *ref = xmalloc(o.L * hq_max * o.D * sizeof *ref);

    size_t n_res = o.n_specs * o.n_hq * o.n_threads, nr = 0;
    Result *res = xcalloc(n_res, sizeof *res);
    StoreTensor *K = xcalloc(n_kv, sizeof *K), *V = xcalloc(n_kv, sizeof *V);
    StoreTensor *Kr = xcalloc(n_kv, sizeof *Kr), *Vr = xcalloc(n_kv, sizeof *Vr);
    for (size_t s = 0; s < o.n_specs && !rc; s++) {
        const Spec *sp = &o.specs[s];
        fprintf(stderr, "kvc bench: %s\n", sp->name);
        uint64_t bytes = 0;
        /* kivi: the first T - resid tokens quantized, the rest FP16 (all FP16 when T <= resid) */
        size_t Tr = sp->resid ? (o.T > sp->resid ? sp->resid : 0) : 0, Tm = o.T - Tr;
        StoreFormat f16;
        memset(&f16, 0, sizeof f16);
        f16.type = STORE_F16;
        StoreFormat kf = sp->resid && !Tr ? f16 : sp->k, vf = sp->resid && !Tr ? f16 : sp->v;
        for (size_t i = 0; i < n_kv; i++) {
            build_tensor(&K[i], kf, src.K + i * per, &src, Tm, o.D);
            build_tensor(&V[i], vf, src.V + i * per, &src, Tm, o.D);
            bytes += store_bytes(&K[i]) + store_bytes(&V[i]);
            if (Tr) {
                build_tensor(&Kr[i], f16, src.K + i * per + Tm * o.D, &src, Tr, o.D);
                build_tensor(&Vr[i], f16, src.V + i * per + Tm * o.D, &src, Tr, o.D);
                bytes += store_bytes(&Kr[i]) + store_bytes(&Vr[i]);
            }
        }
        DecodeCache dc = {.L = o.L, .Hkv = o.Hkv, .T = Tm, .D = o.D, .K = K, .V = V, .Tr = Tr, .Kr = Kr, .Vr = Vr};
        for (size_t h = 0; h < o.n_hq && !rc; h++) {
            size_t n_out = o.L * o.hq[h] * o.D;
            reference(ref, &dc, q, o.hq[h]);
            for (size_t k = 0; k < o.n_threads && !rc; k++) {
                Result *re = &res[nr];
                re->spec = sp, re->hq = o.hq[h], re->threads = o.threads[k], re->bytes = bytes;
                Decoder *d = decoder_create(&dc, o.hq[h], o.threads[k], DECODE_FUSED);
                if (!d) {
                    rc = 1;
                    break;
                }
                re->keys = time_steps(d, out, q, DECODE_KEYS, o.repeat);
                re->fused = time_steps(d, out, q, DECODE_FULL, o.repeat);
                decoder_free(d);
                re->rel = rel_error(out, ref, n_out);
                if (k == 0) memcpy(first, out, n_out * sizeof *out);
                re->same_threads = memcmp(first, out, n_out * sizeof *out) == 0;
                if (o.naive_repeat > 0) {
                    Decoder *dn = decoder_create(&dc, o.hq[h], o.threads[k], DECODE_NAIVE);
                    if (!dn) {
                        rc = 1;
                        break;
                    }
                    re->naive = time_steps(dn, out, q, DECODE_FULL, o.naive_repeat);
                    re->has_naive = 1;
                    decoder_free(dn);
                }
                nr++;
            }
        }
        for (size_t i = 0; i < n_kv; i++) {
            store_free(&K[i]);
            store_free(&V[i]);
            store_free(&Kr[i]);
            store_free(&Vr[i]);
        }
    }
    if (!rc && probe_bandwidth(&o, bw_buf, bw_n, samples, n_samples)) rc = 1;
    if (rc) {
        fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    } else {
        double bw_med[MAX_LIST], bw_max[MAX_LIST];
        for (size_t k = 0; k < o.n_threads; k++) {
            bw_max[k] = 0;
            for (size_t i = 0; i < n_samples[k]; i++)
                if (samples[k][i] > bw_max[k]) bw_max[k] = samples[k][i];
            bw_med[k] = median(samples[k], n_samples[k]);
        }
        for (size_t i = 0; i < nr; i++)
            for (size_t k = 0; k < o.n_threads; k++)
                if (res[i].threads == o.threads[k]) res[i].bw = bw_med[k], res[i].bw_max = bw_max[k];
        if (csv_out) {
            fprintf(csv_out, "%s\n", csv_header);
            for (size_t i = 0; i < nr; i++) print_csv_row(csv_out, &o, &res[i]);
            int bad = ferror(csv_out);
            if (fclose(csv_out) != 0 || bad) {
                fprintf(stderr, "kvc: bench: --csv-file: cannot write %s (got %s)\n", o.csv_file, strerror(errno));
                rc = 1;
            }
            csv_out = NULL;
        }
        if (o.csv) {
            printf("%s\n", csv_header);
            for (size_t i = 0; i < nr; i++) print_csv_row(stdout, &o, &res[i]);
        } else {
            print_machine(&o, bw_med, bw_max);
            print_table(&o, res, nr);
        }
    }
    if (csv_out) fclose(csv_out);
    for (size_t k = 0; k < o.n_threads; k++) free(samples[k]);
    free(bw_buf), free(src.K), free(src.V), free(src.B), free(q), free(out), free(first), free(ref), free(res);
    free(K), free(V), free(Kr), free(Vr), free(o.specs);
    return rc;
}
