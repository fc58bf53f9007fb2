/* bench: the decode-speed measurement (see bench.h). L layers, Hkv KV heads, Hq query heads, T tokens, D head
 * dim. */
#include "eval/bench.h"
#include "base/attention.h"
#include "base/rng.h"
#include "base/util.h"
#include "decode/decode.h"
#include "decode/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- formats ------------------------------------------------------------------------------------------------- */

int bench_format_parse(BenchFormat *f, const char *s, const char *where)
{
    memset(f, 0, sizeof *f);
    if (strlen(s) >= sizeof f->name) return kvc_fail("%s: format name too long (got \"%s\")", where, s);
    strcpy(f->name, s);
    if (strcmp(s, "kivi2") == 0 || strcmp(s, "kivi4") == 0 || strcmp(s, "kivi8") == 0) {
        int b = s[4] - '0';
        f->k = store_intn_format(b, 1, STORE_AXIS_CHANNEL, BENCH_KIVI_GROUP, STORE_SCALE_F16);
        f->v = store_intn_format(b, 1, STORE_AXIS_TOKEN, BENCH_KIVI_GROUP, STORE_SCALE_F16);
        f->resid = BENCH_KIVI_RESIDUAL;
        return 0;
    }
    if (strncmp(s, "kivi", 4) == 0)
        return kvc_fail("%s: KIVI's formats are kivi2, kivi4 and kivi8, for keys and values together (got \"%s\")",
                        where, s);
    char kname[64];
    strcpy(kname, s);
    char *slash = strchr(kname, '/');
    if (slash) *slash = '\0';
    if (store_format_parse(&f->k, kname, where) || store_format_parse(&f->v, slash ? slash + 1 : kname, where))
        return -1;
    return 0;
}

void bench_format_names(char *kf, char *vf, size_t cap, const BenchFormat *f, size_t T)
{
    store_format_name(kf, cap, f->k);
    store_format_name(vf, cap, f->v);
    if (f->resid && T > f->resid) {   /* kivi: asymmetric intN groups, then the FP16 residual */
        snprintf(kf, cap, "int%da-ch-g%d+f16r%zu", f->k.bits, BENCH_KIVI_GROUP, f->resid);
        snprintf(vf, cap, "int%da-g%d+f16r%zu", f->v.bits, BENCH_KIVI_GROUP, f->resid);
    } else if (f->resid) {   /* kivi with T <= the residual: every token in FP16 */
        snprintf(kf, cap, "f16");
        snprintf(vf, cap, "f16");
    }
}

/* ---- machine ------------------------------------------------------------------------------------------------- */

long bench_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

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
size_t bench_llc_bytes(void)
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

void bench_cpu_model(char *buf, size_t cap)
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

void bench_caches(char *buf, size_t cap)
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

void bench_isa_flags(char *buf, size_t cap)
{
    unsigned f = decode_cpu_features();
    snprintf(buf, cap, "%s%s%s%s%s", f & DECODE_CPU_AVX2 ? "avx2 " : "", f & DECODE_CPU_FMA ? "fma " : "",
             f & DECODE_CPU_F16C ? "f16c " : "", f & DECODE_CPU_AVX512F ? "avx512f" : "(no avx512f)",
             f & DECODE_CPU_AVX512VNNI ? " avx512_vnni" : "");
}

/* ---- measurements -------------------------------------------------------------------------------------------- */

/* The eviction read before a timed step (BenchPlan.evict_mib): the fused kernels' streaming read, its sum kept. */
typedef struct Evict {
    const float *buf;
    size_t n;        /* floats; 0: none */
} Evict;

/* The buffers of a stored tensor (codes, scales, group parameters, low-rank basis) appended to buf / bytes: what a
 * row's floor reads (decode_read_cold). */
static void tensor_buffers(const StoreTensor *st, const void **buf, size_t *bytes, size_t *nb)
{
    const void *b[4] = {st->codes, st->scales, st->params, st->basis};
    size_t n[4] = {st->row_bytes ? st->T * st->row_bytes : st->code_bytes, 2 * st->n_scales, st->param_bytes,
                   st->basis ? 2 * st->fmt.rank * st->D : 0};
    for (int i = 0; i < 4; i++)
        if (b[i] && n[i]) buf[*nb] = b[i], bytes[(*nb)++] = n[i];
}
static volatile float evict_sink;

/* One timed step after the eviction read (none: ev->n 0): seconds. */
static double timed_step(Decoder *d, float *out, const float *q, DecodeMode mode, const Evict *ev)
{
    if (ev->n) evict_sink += decode_fused_kernels()->read_sum(ev->buf, ev->n);
    double t0 = decode_now();
    decoder_step(d, out, q, mode);
    return decode_now() - t0;
}

/* The summary of `repeat` step times (t is rearranged). */
static BenchStat step_stat(double *t, int repeat)
{
    BenchStat s = {0, t[0], t[0], 0, 0};
    for (int r = 0; r < repeat; r++) {
        if (t[r] < s.min) s.min = t[r];
        if (t[r] > s.max) s.max = t[r];
    }
    s.med = median(t, (size_t)repeat);   /* rearranges t; the deviations below do not need the order */
    double *dev = xmalloc((size_t)repeat * sizeof *dev);
    for (int r = 0; r < repeat; r++) dev[r] = fabs(t[r] - s.med);
    s.mad = median(dev, (size_t)repeat);
    for (int r = 0; r < repeat && s.mad > 0; r++) s.outliers += 0.6745 * fabs(t[r] - s.med) / s.mad > BENCH_OUTLIER_Z;
    free(dev);
    return s;
}

/* Times `repeat` steps after one untimed warm-up, each after the eviction read; the last output stays in out. */
static BenchStat time_steps(Decoder *d, float *out, const float *q, DecodeMode mode, int repeat, const Evict *ev)
{
    double *t = xmalloc((size_t)repeat * sizeof *t);
    decoder_step(d, out, q, mode);
    for (int r = 0; r < repeat; r++) t[r] = timed_step(d, out, q, mode, ev);
    BenchStat s = step_stat(t, repeat);
    free(t);
    return s;
}

/* Read bandwidth in GB/s on each thread count: `repeat` timed passes over the buffer; samples appended. */
static int probe_bandwidth(const BenchPlan *p, const float *buf, size_t n, double **samples, size_t *n_samples)
{
    double *t = xmalloc((size_t)p->repeat * sizeof *t);
    for (size_t k = 0; k < p->n_threads; k++) {
        if (decode_read_times(t, p->repeat, buf, n, p->threads[k])) {
            free(t);
            return -1;
        }
        for (int r = 0; r < p->repeat; r++) samples[k][n_samples[k]++] = (double)n * sizeof(float) / t[r] / 1e9;
    }
    free(t);
    return 0;
}


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

const char *bench_query_name(BenchQuery q)
{
    return q == BENCH_QUERY_INT8 ? "int8" : q == BENCH_QUERY_INT16 ? "int16" : "f32";
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

/* ---- the run ------------------------------------------------------------------------------------------------- */

/* A row being timed: its decoder and output. */
typedef struct RowRun {
    Decoder *d;
    float *out;   /* the row's last full step */
} RowRun;

/* Times the n rows re[ix[0..n)] of one cache (their format, query heads, query mode and threads set): each row's
 * floor (BENCH_ROW_PROBES cold reads of the cache's bytes on its threads before its steps and after them), `repeat`
 * key-side steps and `repeat` full steps, each after the eviction read and after one untimed warm-up of each kind.
 * One row (n = 1): its key steps, then its full steps. Several (--interleave: the rows of one thread count): every
 * row's warm-ups, then round by round one key step of every row, then one full step of every row, so that the
 * machine's drift falls on every row alike. */
static int time_rows(BenchResult *re, RowRun *rr, const size_t *ix, size_t n, const DecodeCache *dc,
                     const BenchPlan *p, const float *q, const void **cbuf, const size_t *cbytes, size_t ncb,
                     const Evict *ev)
{
    int rc = 0;
    const int R = p->repeat;
    double *bws = xmalloc(n * 2 * BENCH_ROW_PROBES * sizeof *bws), *t = xmalloc(n * 2 * (size_t)R * sizeof *t);
    for (size_t i = 0; i < n && !rc; i++) {
        const BenchResult *e = &re[ix[i]];
        DecodeImpl impl = e->query == BENCH_QUERY_INT8 ? DECODE_FUSED_INT8Q
                          : e->query == BENCH_QUERY_INT16 ? DECODE_FUSED_INT16Q : DECODE_FUSED;
        rr[ix[i]].d = decoder_create(dc, e->hq, e->threads, impl);
        if (!rr[ix[i]].d) rc = -1;
    }
    for (size_t i = 0; i < n && !rc; i++)   /* the floors before the steps */
        rc = decode_read_cold(bws + i * 2 * BENCH_ROW_PROBES, BENCH_ROW_PROBES, cbuf, cbytes, ncb, ev->buf, ev->n,
                              re[ix[i]].threads);
    static const DecodeMode modes[2] = {DECODE_KEYS, DECODE_FULL};
    if (!rc && n == 1) {
        for (int ph = 0; ph < 2; ph++) {
            decoder_step(rr[ix[0]].d, rr[ix[0]].out, q, modes[ph]);
            for (int r = 0; r < R; r++) t[ph * R + r] = timed_step(rr[ix[0]].d, rr[ix[0]].out, q, modes[ph], ev);
        }
    } else if (!rc) {
        for (size_t i = 0; i < n; i++)
            for (int ph = 0; ph < 2; ph++) decoder_step(rr[ix[i]].d, rr[ix[i]].out, q, modes[ph]);
        for (int r = 0; r < R; r++)
            for (int ph = 0; ph < 2; ph++)
                for (size_t i = 0; i < n; i++) {
                    const RowRun *x = &rr[ix[i]];
                    t[(i * 2 + (size_t)ph) * (size_t)R + (size_t)r] = timed_step(x->d, x->out, q, modes[ph], ev);
                }
    }
    for (size_t i = 0; i < n; i++) {
        decoder_free(rr[ix[i]].d);
        rr[ix[i]].d = NULL;
    }
    for (size_t i = 0; i < n && !rc; i++)   /* the floors after */
        rc = decode_read_cold(bws + i * 2 * BENCH_ROW_PROBES + BENCH_ROW_PROBES, BENCH_ROW_PROBES, cbuf, cbytes, ncb,
                              ev->buf, ev->n, re[ix[i]].threads);
    for (size_t i = 0; i < n && !rc; i++) {
        BenchResult *e = &re[ix[i]];
        double *b = bws + i * 2 * BENCH_ROW_PROBES;
        e->keys = step_stat(t + i * 2 * (size_t)R, R);
        e->fused = step_stat(t + (i * 2 + 1) * (size_t)R, R);
        e->bw_max = 0;
        for (int k = 0; k < 2 * BENCH_ROW_PROBES; k++) {
            b[k] = (double)e->bytes / b[k] / 1e9;
            if (b[k] > e->bw_max) e->bw_max = b[k];
        }
        e->bw = median(b, 2 * BENCH_ROW_PROBES);
    }
    free(bws), free(t);
    return rc;
}

/* Times every query head count and thread count over one format's cache; appends to res from *nr. */
static int run_format(BenchResult *res, size_t *nr, const BenchPlan *p, const BenchFormat *fm, const Source *src,
                      const float *q, float *out, double *ref, StoreTensor *K, StoreTensor *V,
                      StoreTensor *Kr, StoreTensor *Vr, const Evict *ev)
{
    size_t n_kv = p->L * p->Hkv, per = p->T * p->D;
    uint64_t bytes = 0;
    /* kivi: the first T - resid tokens quantized, the rest FP16 (all FP16 when T <= resid) */
    size_t Tr = fm->resid ? (p->T > fm->resid ? fm->resid : 0) : 0, Tm = p->T - Tr;
    StoreFormat f16;
    memset(&f16, 0, sizeof f16);
    f16.type = STORE_F16;
    StoreFormat kf = fm->resid && !Tr ? f16 : fm->k, vf = fm->resid && !Tr ? f16 : fm->v;
    for (size_t i = 0; i < n_kv; i++) {
        build_tensor(&K[i], kf, src->K + i * per, src, Tm, p->D);
        build_tensor(&V[i], vf, src->V + i * per, src, Tm, p->D);
        bytes += store_bytes(&K[i]) + store_bytes(&V[i]);
        if (Tr) {
            build_tensor(&Kr[i], f16, src->K + i * per + Tm * p->D, src, Tr, p->D);
            build_tensor(&Vr[i], f16, src->V + i * per + Tm * p->D, src, Tr, p->D);
            bytes += store_bytes(&Kr[i]) + store_bytes(&Vr[i]);
        }
    }
    DecodeCache dc = {.L = p->L, .Hkv = p->Hkv, .T = Tm, .D = p->D, .K = K, .V = V, .Tr = Tr, .Kr = Kr, .Vr = Vr};
    /* the cache's own bytes: the floor of a row is a cold read of exactly them */
    const void **cbuf = xmalloc(16 * n_kv * sizeof *cbuf);
    size_t *cbytes = xmalloc(16 * n_kv * sizeof *cbytes), ncb = 0;
    for (size_t i = 0; i < n_kv; i++) {
        tensor_buffers(&K[i], cbuf, cbytes, &ncb);
        tensor_buffers(&V[i], cbuf, cbytes, &ncb);
        if (Tr) {
            tensor_buffers(&Kr[i], cbuf, cbytes, &ncb);
            tensor_buffers(&Vr[i], cbuf, cbytes, &ncb);
        }
    }
    int rc = 0;
    static const BenchQuery f32_only = BENCH_QUERY_F32;
    const BenchQuery *qm = p->n_query ? p->query : &f32_only;
    size_t nq = p->n_query ? p->n_query : 1, nrow = p->n_hq * nq * p->n_threads;
    BenchResult *rows = res + *nr;   /* query head counts, then query modes, then thread counts */
    RowRun *rr = xcalloc(nrow, sizeof *rr);
    for (size_t i = 0; i < nrow; i++) {
        size_t h = i / (nq * p->n_threads), m = i / p->n_threads % nq, k = i % p->n_threads;
        BenchResult *re = &rows[i];
        memset(re, 0, sizeof *re);
        re->format = fm, re->hq = p->hq[h], re->query = qm[m], re->threads = p->threads[k], re->bytes = bytes;
        rr[i].out = xmalloc(p->L * p->hq[h] * p->D * sizeof *rr[i].out);
    }
    /* default: one row after another; --interleave: the rows of each thread count in turn (time_rows). Not rows of
     * different thread counts: on this project's 2-vCPU VM, 2-thread steps between 1-thread ones ran slower (int4,
     * 8 KV heads x 65536 tokens, medians of 3 rounds: the 2-thread rows 1.16-1.31x, the 1-thread rows the same;
     * why is not established: the idle second vCPU's wake-up, or the tile state its thread carries) */
    size_t *ix = xmalloc(nrow * sizeof *ix);
    if (p->interleave)
        for (size_t k = 0; k < p->n_threads && !rc; k++) {
            size_t n = 0;
            for (size_t i = k; i < nrow; i += p->n_threads) ix[n++] = i;
            rc = time_rows(rows, rr, ix, n, &dc, p, q, cbuf, cbytes, ncb, ev);
        }
    else
        for (size_t i = 0; i < nrow && !rc; i++) {
            ix[0] = i;
            rc = time_rows(rows, rr, ix, 1, &dc, p, q, cbuf, cbytes, ncb, ev);
        }
    free(ix);
    for (size_t h = 0; h < p->n_hq && !rc; h++) {   /* the check against double, the naive path */
        size_t n_out = p->L * p->hq[h] * p->D, i0 = h * nq * p->n_threads;
        reference(ref, &dc, q, p->hq[h]);
        for (size_t i = i0; i < i0 + nq * p->n_threads && !rc; i++) {
            BenchResult *re = &rows[i];
            re->rel = rel_error(rr[i].out, ref, n_out);
            const float *first = rr[i - i % p->n_threads].out;   /* the first thread count's, same mode */
            re->same_threads = memcmp(first, rr[i].out, n_out * sizeof *first) == 0;
            if (p->naive_repeat > 0 && re->query == BENCH_QUERY_F32) {
                Decoder *dn = decoder_create(&dc, p->hq[h], re->threads, DECODE_NAIVE);
                if (!dn) {
                    rc = -1;
                    break;
                }
                re->naive = time_steps(dn, out, q, DECODE_FULL, p->naive_repeat, ev);
                re->has_naive = 1;
                decoder_free(dn);
            }
        }
    }
    if (!rc) *nr += nrow;
    for (size_t i = 0; i < nrow; i++) free(rr[i].out);
    free(rr);
    for (size_t i = 0; i < n_kv; i++) {
        store_free(&K[i]);
        store_free(&V[i]);
        store_free(&Kr[i]);
        store_free(&Vr[i]);
    }
    free(cbuf), free(cbytes);
    return rc;
}

int bench_run(BenchResult *res, double *bw_med, double *bw_max, const BenchPlan *p, FILE *progress)
{
    size_t n_kv = p->L * p->Hkv, per = p->T * p->D, hq_max = 0;
    for (size_t k = 0; k < p->n_hq; k++)
        if (p->hq[k] > hq_max) hq_max = p->hq[k];

    /* bandwidth probe buffer, and samples before and after */
    size_t bw_n = p->bw_mib << 18, ev_n = p->evict_mib << 18, buf_n = bw_n > ev_n ? bw_n : ev_n;
    float *bw_buf = xmalloc(buf_n * sizeof *bw_buf);   /* the probe's buffer, and the eviction read's */
    for (size_t i = 0; i < buf_n; i++) bw_buf[i] = 1.0f;
    const Evict ev = {bw_buf, ev_n};
    double **samples = xcalloc(p->n_threads, sizeof *samples);
    size_t *n_samples = xcalloc(p->n_threads, sizeof *n_samples);
    for (size_t k = 0; k < p->n_threads; k++) samples[k] = xmalloc(2 * (size_t)p->repeat * sizeof **samples);
    if (progress) fprintf(progress, "kvc bench: measuring read bandwidth (%zu MiB)\n", p->bw_mib);
    int rc = probe_bandwidth(p, bw_buf, bw_n, samples, n_samples);

    /* the source cache and the queries */
    Source src;
    rng r;
    rng_seed_u64(&r, p->seed);
    if (progress) fprintf(progress, "kvc bench: generating %zu x %zu x %zu keys and values\n", n_kv, p->T, p->D);
    src.K = xmalloc(n_kv * per * sizeof *src.K);
    src.V = xmalloc(n_kv * per * sizeof *src.V);
    src.B = xmalloc(p->D * p->D * sizeof *src.B);
    fill_normal(&r, src.K, n_kv * per);
    fill_normal(&r, src.V, n_kv * per);
    fill_normal(&r, src.B, p->D * p->D);
    float *q = xmalloc(p->L * hq_max * p->D * sizeof *q), *out = xmalloc(p->L * hq_max * p->D * sizeof *out);
    fill_normal(&r, q, p->L * hq_max * p->D);
    double *ref = xmalloc(p->L * hq_max * p->D * sizeof *ref);

    size_t nr = 0;
    StoreTensor *K = xcalloc(n_kv, sizeof *K), *V = xcalloc(n_kv, sizeof *V);
    StoreTensor *Kr = xcalloc(n_kv, sizeof *Kr), *Vr = xcalloc(n_kv, sizeof *Vr);
    for (size_t s = 0; s < p->n_formats && !rc; s++) {
        if (progress) fprintf(progress, "kvc bench: %s\n", p->formats[s].name);
        rc = run_format(res, &nr, p, &p->formats[s], &src, q, out, ref, K, V, Kr, Vr, &ev);
    }
    if (!rc) rc = probe_bandwidth(p, bw_buf, bw_n, samples, n_samples);
    if (!rc) {
        for (size_t k = 0; k < p->n_threads; k++) {
            bw_max[k] = 0;
            for (size_t i = 0; i < n_samples[k]; i++)
                if (samples[k][i] > bw_max[k]) bw_max[k] = samples[k][i];
            bw_med[k] = median(samples[k], n_samples[k]);
        }
    }
    for (size_t k = 0; k < p->n_threads; k++) free(samples[k]);
    free(samples), free(n_samples);
    free(bw_buf), free(src.K), free(src.V), free(src.B), free(q), free(out), free(ref);
    free(K), free(V), free(Kr), free(Vr);
    return rc;
}
