/* decode: a decode step over the stored cache (see decode.h): query preparation, the parallel block items,
 * the ordered merge, the naive dequantize-then-attend path, and the kernel dispatch.
 * L layers, Hkv KV heads, Hq query heads, G = Hq / Hkv, T tokens, D head dim, WK / WV stored columns of
 * K / V (D, or the rank), nb = ceil(T / DECODE_BLOCK) blocks. */
#include "decode/decode.h"
#include "decode/kernels.h"
#include "decode/pool.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct Decoder {
    DecodeCache c;
    size_t Hq, G, nb, WK, WV;
    DecodeImpl impl;
    const KernelSet *ks;
    Pool *pool;
    const StoreTensor *K, *V;   /* what the kernels read: the cache, or its float32 copy (naive) */
    size_t *permK, *permV;      /* kernel column order */
    float *qp;                  /* (L*Hq, WK) prepared queries */
    float *slots;               /* (L*Hq, nb, 2 + WV): m_b, l_b, acc_b */
    float **S, **acc;           /* per thread: (G, DECODE_BLOCK) scores, (G, WV) accumulators */
    float **tile;               /* per thread: rows of a format without a kernel, dequantized (generic path) */
    size_t tile_rows;
    double **num;               /* per thread: (2 * max(WV, D)) merge scratch */
    /* naive path */
    float *Kf, *Vf;
    StoreTensor *Kn, *Vn;
    float **lr;                 /* per thread: low-rank reconstruction scratch */
    /* the current step */
    float *out;
    const float *q;
    DecodeMode mode;
};

double decode_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU features from cpuid, and whether the OS saves the AVX state (xgetbv): portable across gcc and clang
 * (clang 14's __builtin_cpu_supports does not know "f16c"). */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static unsigned cpu_features(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (c & (1u << 12)) f |= DECODE_CPU_FMA;
    if (c & (1u << 29)) f |= DECODE_CPU_F16C;
    unsigned xlo = 0, xhi = 0;
    if (osxsave) __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    int ymm_ok = osxsave && avx && (xlo & 6u) == 6u;
    if (!ymm_ok) f &= ~(unsigned)(DECODE_CPU_FMA | DECODE_CPU_F16C);
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if (ymm_ok && (b & (1u << 5))) f |= DECODE_CPU_AVX2;
        if (ymm_ok && (b & (1u << 16)) && (xlo & 0xE6u) == 0xE6u) f |= DECODE_CPU_AVX512F;
    }
    return f;
}
#else
static unsigned cpu_features(void) { return 0; }
#endif

unsigned decode_cpu_features(void) { return cpu_features(); }

static const KernelSet *fused_kernels(void)
{
    static const KernelSet *best;
    if (best) return best;
    const KernelSet *k = &decode_kernels_ref;
    const char *env = getenv("KVC_ISA");
    unsigned need = DECODE_CPU_AVX2 | DECODE_CPU_FMA | DECODE_CPU_F16C;
    if (!(env && strcmp(env, "scalar") == 0) && decode_kernels_avx2() && (cpu_features() & need) == need)
        k = decode_kernels_avx2();
    best = k;
    return k;
}

const char *decode_isa(void) { return fused_kernels()->name; }

static KRows rows_of(const StoreTensor *st)
{
    KRows r = {st->fmt.type, st->codes, st->row_bytes,
               store_type_is_int(st->fmt.type) && st->fmt.axis == STORE_AXIS_TOKEN ? st->scales : NULL, st->W};
    return r;
}

static int same_format(StoreFormat a, StoreFormat b)
{
    return a.type == b.type && a.axis == b.axis && a.rank == b.rank && a.bits == b.bits && a.asym == b.asym &&
           a.group == b.group && a.scale_type == b.scale_type;
}

static float **per_thread(int n, size_t count)
{
    float **p = xcalloc((size_t)n, sizeof *p);
    for (int i = 0; i < n; i++) p[i] = xcalloc(count ? count : 1, sizeof **p);
    return p;
}

static void free_per_thread(void **p, int n)
{
    if (!p) return;
    for (int i = 0; i < n; i++) free(p[i]);
    free(p);
}

/* A float32 (T, D) tensor viewing buf (the naive path's dequantized copy). */
static StoreTensor f32_view(float *buf, size_t T, size_t D)
{
    StoreTensor st;
    memset(&st, 0, sizeof st);
    st.fmt.type = STORE_F32;
    st.T = T;
    st.D = D;
    st.W = D;
    st.row_bytes = 4 * D;
    st.codes = (uint8_t *)buf;
    return st;
}

Decoder *decoder_create(const DecodeCache *c, size_t Hq, int threads, DecodeImpl impl)
{
    size_t n_kv, n_q, nbytes;
    if (c->L < 1 || c->Hkv < 1 || c->T < 1 || c->D < 1) {
        kvc_fail("decode: empty cache (got L=%zu Hkv=%zu T=%zu D=%zu)", c->L, c->Hkv, c->T, c->D);
        return NULL;
    }
    if (Hq < 1 || Hq % c->Hkv != 0) {
        kvc_fail("decode: query heads must be a positive multiple of the %zu KV heads (got %zu)", c->Hkv, Hq);
        return NULL;
    }
    if (threads < 1 || threads > 1024) {
        kvc_fail("decode: threads must be in 1..1024 (got %d)", threads);
        return NULL;
    }
    if (size_mul(c->L, c->Hkv, &n_kv) || size_mul(c->L, Hq, &n_q) || size_mul(n_q, c->D, &nbytes)) {
        kvc_fail("decode: too many heads (got L=%zu Hq=%zu)", c->L, Hq);
        return NULL;
    }
    for (size_t i = 0; i < n_kv; i++) {
        const StoreTensor *k = &c->K[i], *v = &c->V[i];
        if (k->T != c->T || v->T != c->T || k->D != c->D || v->D != c->D || !same_format(k->fmt, c->K[0].fmt) ||
            !same_format(v->fmt, c->V[0].fmt)) {
            kvc_fail("decode: every K (and every V) tensor must have one format and shape (%zu, %zu) (got tensor %zu: "
                     "(%zu, %zu) and (%zu, %zu))", c->T, c->D, i, k->T, k->D, v->T, v->D);
            return NULL;
        }
    }
    Decoder *d = xcalloc(1, sizeof *d);
    d->c = *c;
    d->Hq = Hq;
    d->G = Hq / c->Hkv;
    d->nb = (c->T + DECODE_BLOCK - 1) / DECODE_BLOCK;
    d->impl = impl;
    d->ks = impl == DECODE_REF ? &decode_kernels_ref : fused_kernels();
    d->pool = pool_create(threads);
    if (!d->pool) {
        free(d);
        return NULL;
    }
    d->K = c->K;
    d->V = c->V;
    if (impl == DECODE_NAIVE) {
        size_t per = c->T * c->D;
        d->Kf = xmalloc(n_kv * per * sizeof *d->Kf);
        d->Vf = xmalloc(n_kv * per * sizeof *d->Vf);
        d->Kn = xcalloc(n_kv, sizeof *d->Kn);
        d->Vn = xcalloc(n_kv, sizeof *d->Vn);
        for (size_t i = 0; i < n_kv; i++) {
            d->Kn[i] = f32_view(d->Kf + i * per, c->T, c->D);
            d->Vn[i] = f32_view(d->Vf + i * per, c->T, c->D);
        }
        d->K = d->Kn;
        d->V = d->Vn;
        size_t rmax = c->K[0].fmt.rank > c->V[0].fmt.rank ? c->K[0].fmt.rank : c->V[0].fmt.rank;
        d->lr = per_thread(threads, rmax * (DECODE_BLOCK + c->D));
    }
    d->WK = d->K[0].W;
    d->WV = d->V[0].W;
    d->permK = xmalloc(d->WK * sizeof *d->permK);
    d->permV = xmalloc(d->WV * sizeof *d->permV);
    d->ks->col_order(d->permK, d->K[0].fmt.type, d->WK);
    d->ks->col_order(d->permV, d->V[0].fmt.type, d->WV);
    d->qp = xmalloc(n_q * d->WK * sizeof *d->qp);
    d->slots = xmalloc(n_q * d->nb * (2 + d->WV) * sizeof *d->slots);
    d->S = per_thread(threads, d->G * DECODE_BLOCK);
    size_t wmaxkv = d->WK > d->WV ? d->WK : d->WV;
    d->tile_rows = ((size_t)1 << 16) / wmaxkv;
    if (d->tile_rows < 1) d->tile_rows = 1;
    if (d->tile_rows > 256) d->tile_rows = 256;
    if (!d->ks->scores[d->K[0].fmt.type] || !d->ks->vacc[d->V[0].fmt.type])
        d->tile = per_thread(threads, d->tile_rows * wmaxkv);
    d->acc = per_thread(threads, d->G * d->WV);
    size_t wmax = (d->WV > c->D ? d->WV : c->D) + d->WK;
    d->num = xcalloc((size_t)threads, sizeof *d->num);
    for (int i = 0; i < threads; i++) d->num[i] = xcalloc(2 * wmax, sizeof **d->num);
    return d;
}

void decoder_free(Decoder *d)
{
    if (!d) return;
    int n = pool_threads(d->pool);
    pool_free(d->pool);
    free(d->permK);
    free(d->permV);
    free(d->qp);
    free(d->slots);
    free_per_thread((void **)d->S, n);
    free_per_thread((void **)d->acc, n);
    free_per_thread((void **)d->num, n);
    free_per_thread((void **)d->lr, n);
    free_per_thread((void **)d->tile, n);
    free(d->Kf);
    free(d->Vf);
    free(d->Kn);
    free(d->Vn);
    free(d);
}

/* ---- step phases ------------------------------------------------------------------------------------------ */

/* Naive path, item = (tensor, chunk of DECODE_BLOCK tokens): dequantize into the float32 copy. */
static void naive_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t n_kv = d->c.L * d->c.Hkv, T = d->c.T, D = d->c.D;
    size_t tensor = item / d->nb, b = item % d->nb, t0 = b * DECODE_BLOCK;
    size_t n = T - t0 < DECODE_BLOCK ? T - t0 : DECODE_BLOCK;
    const StoreTensor *st = tensor < n_kv ? &d->c.K[tensor] : &d->c.V[tensor - n_kv];
    float *dst = (tensor < n_kv ? d->Kf + tensor * T * D : d->Vf + (tensor - n_kv) * T * D) + t0 * D;
    size_t R = st->fmt.rank;
    if (!R) {
        store_dequantize_rows_f32(dst, st, t0, n);
        return;
    }
    float *C = d->lr[tid], *B = C + DECODE_BLOCK * R;   /* C (n, R), then B (R, D) */
    store_dequantize_rows_f32(C, st, t0, n);
    for (size_t i = 0; i < R * D; i++) B[i] = store_f16_to_f32(st->basis[i]);
    for (size_t t = 0; t < n; t++) {
        float *o = dst + t * D;
        for (size_t j = 0; j < D; j++) o[j] = 0.0f;
        for (size_t r = 0; r < R; r++) {
            float cr = C[t * R + r];
            const float *br = B + r * D;
            for (size_t j = 0; j < D; j++) o[j] += cr * br[j];
        }
    }
}

/* q for query head qh of layer l -> the kernels' prepared query (kernel order). */
static void prepare_query(Decoder *d, size_t l, size_t qh, double *x, double *y)
{
    size_t D = d->c.D, W = d->WK;
    const StoreTensor *K = &d->K[l * d->c.Hkv + qh / d->G];
    const float *q = d->q + (l * d->Hq + qh) * D;
    double inv = 1.0 / sqrt((double)D);
    for (size_t j = 0; j < D; j++) x[j] = (double)q[j] * inv;
    if (K->fmt.rank) {   /* q' = B q */
        for (size_t r = 0; r < W; r++) {
            double a = 0.0;
            for (size_t j = 0; j < D; j++) a += (double)store_f16_to_f32(K->basis[r * D + j]) * x[j];
            y[r] = a;
        }
    } else {
        memcpy(y, x, D * sizeof *y);
    }
    if (store_type_is_int(K->fmt.type) && K->fmt.axis == STORE_AXIS_CHANNEL)
        for (size_t j = 0; j < W; j++) y[j] *= store_f16_to_f32(K->scales[j]);
    double f = d->ks->raw_scale[K->fmt.type] != 0 ? d->ks->raw_scale[K->fmt.type] : 1.0;
    if (f != 1.0)
        for (size_t j = 0; j < W; j++) y[j] *= f;
    float *o = d->qp + (l * d->Hq + qh) * W;
    for (size_t p = 0; p < W; p++) o[p] = (float)y[d->permK[p]];
}

/* item = (layer, KV head, block): scores, softmax pieces and the weighted V sum of one token block. */
static void block_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t nb = d->nb, b = item % nb, lh = item / nb, l = lh / d->c.Hkv, kvh = lh % d->c.Hkv, G = d->G;
    size_t t0 = b * DECODE_BLOCK, n = d->c.T - t0 < DECODE_BLOCK ? d->c.T - t0 : DECODE_BLOCK, WV = d->WV;
    KRows kr = rows_of(&d->K[lh]), vr = rows_of(&d->V[lh]);
    float *S = d->S[tid], *acc = d->acc[tid];
    size_t q0 = l * d->Hq + kvh * G;
    if (d->ks->scores[kr.type]) {
        d->ks->scores[kr.type](S, DECODE_BLOCK, d->qp + q0 * d->WK, G, &kr, t0, n);
    } else {   /* a format without a kernel: small dequantized tiles through the f32 kernel */
        for (size_t i = 0; i < n; i += d->tile_rows) {
            size_t nr = n - i < d->tile_rows ? n - i : d->tile_rows;
            store_dequantize_rows_f32(d->tile[tid], &d->K[lh], t0 + i, nr);
            KRows tr = {STORE_F32, (const uint8_t *)d->tile[tid], 4 * d->WK, NULL, d->WK};
            d->ks->scores[STORE_F32](S + i, DECODE_BLOCK, d->qp + q0 * d->WK, G, &tr, 0, nr);
        }
    }
    float m[256], lsum[256];
    for (size_t g0 = 0; g0 < G; g0 += 256) {
        size_t gn = G - g0 < 256 ? G - g0 : 256;
        for (size_t g = 0; g < gn; g++) m[g] = d->ks->max(S + (g0 + g) * DECODE_BLOCK, n);
        if (d->mode == DECODE_FULL)
            for (size_t g = 0; g < gn; g++) lsum[g] = d->ks->exp_sum(S + (g0 + g) * DECODE_BLOCK, n, m[g]);
        for (size_t g = 0; g < gn; g++) {
            float *slot = d->slots + ((q0 + g0 + g) * nb + b) * (2 + WV);
            slot[0] = m[g];
            slot[1] = d->mode == DECODE_FULL ? lsum[g] : 0.0f;
        }
    }
    if (d->mode != DECODE_FULL) return;
    memset(acc, 0, G * WV * sizeof *acc);
    if (d->ks->vacc[vr.type]) {
        d->ks->vacc[vr.type](acc, S, DECODE_BLOCK, G, &vr, t0, n);
    } else {
        for (size_t i = 0; i < n; i += d->tile_rows) {
            size_t nr = n - i < d->tile_rows ? n - i : d->tile_rows;
            store_dequantize_rows_f32(d->tile[tid], &d->V[lh], t0 + i, nr);
            KRows tr = {STORE_F32, (const uint8_t *)d->tile[tid], 4 * WV, NULL, WV};
            d->ks->vacc[STORE_F32](acc, S + i, DECODE_BLOCK, G, &tr, 0, nr);
        }
    }
    for (size_t g = 0; g < G; g++)
        memcpy(d->slots + ((q0 + g) * nb + b) * (2 + WV) + 2, acc + g * WV, WV * sizeof *acc);
}

/* item = (layer, query head): merge the blocks in order, in double; undo the kernel order and the folded
 * factors; apply a low-rank value basis. */
static void merge_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t nb = d->nb, WV = d->WV, D = d->c.D, l = item / d->Hq, qh = item % d->Hq;
    const float *slot = d->slots + item * nb * (2 + WV);
    float *out = d->out + item * D;
    double mx = -INFINITY;
    for (size_t b = 0; b < nb; b++)
        if (slot[b * (2 + WV)] > mx) mx = slot[b * (2 + WV)];
    if (d->mode == DECODE_KEYS) {
        memset(out, 0, D * sizeof *out);
        out[0] = (float)mx;
        return;
    }
    double *num = d->num[tid], *y = num + WV, den = 0.0;
    memset(num, 0, WV * sizeof *num);
    for (size_t b = 0; b < nb; b++) {
        const float *s = slot + b * (2 + WV);
        double e = exp((double)s[0] - mx);
        den += e * s[1];
        for (size_t p = 0; p < WV; p++) num[p] += e * s[2 + p];
    }
    const StoreTensor *V = &d->V[l * d->c.Hkv + qh / d->G];
    for (size_t p = 0; p < WV; p++) y[d->permV[p]] = num[p] / den;
    if (store_type_is_int(V->fmt.type) && V->fmt.axis == STORE_AXIS_CHANNEL)
        for (size_t j = 0; j < WV; j++) y[j] *= store_f16_to_f32(V->scales[j]);
    double f = d->ks->raw_scale[V->fmt.type] != 0 ? d->ks->raw_scale[V->fmt.type] : 1.0;
    if (f != 1.0)
        for (size_t j = 0; j < WV; j++) y[j] *= f;
    if (!V->fmt.rank) {
        for (size_t j = 0; j < D; j++) out[j] = (float)y[j];
        return;
    }
    for (size_t j = 0; j < D; j++) {
        double a = 0.0;
        for (size_t r = 0; r < WV; r++) a += y[r] * store_f16_to_f32(V->basis[r * D + j]);
        out[j] = (float)a;
    }
}

void decoder_step(Decoder *d, float *out, const float *q, DecodeMode mode)
{
    size_t n_kv = d->c.L * d->c.Hkv, n_q = d->c.L * d->Hq;
    d->out = out;
    d->q = q;
    d->mode = mode;
    if (d->impl == DECODE_NAIVE) pool_run(d->pool, naive_item, d, 2 * n_kv * d->nb);
    double *x = d->num[0], *y = x + d->c.D;
    for (size_t i = 0; i < n_q; i++) prepare_query(d, i / d->Hq, i % d->Hq, x, y);
    pool_run(d->pool, block_item, d, n_kv * d->nb);
    pool_run(d->pool, merge_item, d, n_q);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int decode_time_ns(double *ns, const DecodeCache *c, size_t Hq, const float *q, int threads, int repeat)
{
    if (repeat < 1) return kvc_fail("decode: repeat must be at least 1 (got %d)", repeat);
    Decoder *d = decoder_create(c, Hq, threads, DECODE_FUSED);
    if (!d) return -1;
    float *out = xmalloc(c->L * Hq * c->D * sizeof *out);
    double *t = xmalloc((size_t)repeat * sizeof *t);
    decoder_step(d, out, q, DECODE_FULL);
    for (int r = 0; r < repeat; r++) {
        double t0 = decode_now();
        decoder_step(d, out, q, DECODE_FULL);
        t[r] = decode_now() - t0;
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    *ns = 1e9 * (repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]));
    free(t);
    free(out);
    decoder_free(d);
    return 0;
}

/* ---- bandwidth probe --------------------------------------------------------------------------------------- */

typedef struct Probe {
    const float *x;
    size_t n, chunk;
    float *sums;
    const KernelSet *ks;
} Probe;

static void probe_item(void *arg, size_t item, int tid)
{
    (void)tid;
    Probe *p = arg;
    size_t a = item * p->chunk, m = p->n - a < p->chunk ? p->n - a : p->chunk;
    p->sums[item] = p->ks->read_sum(p->x + a, m);
}

int decode_read_times(double *sec, int repeat, const float *x, size_t n, int threads)
{
    Pool *pool = pool_create(threads);
    if (!pool) return -1;
    Probe p = {x, n, (size_t)1 << 18, NULL, fused_kernels()};   /* 1 MiB per item */
    size_t items = (n + p.chunk - 1) / p.chunk;
    p.sums = xcalloc(items, sizeof *p.sums);
    pool_run(pool, probe_item, &p, items);
    for (int r = 0; r < repeat; r++) {
        double t = decode_now();
        pool_run(pool, probe_item, &p, items);
        sec[r] = decode_now() - t;
    }
    volatile float sink = 0.0f;
    for (size_t i = 0; i < items; i++) sink += p.sums[i];
    (void)sink;
    free(p.sums);
    pool_free(pool);
    return 0;
}
