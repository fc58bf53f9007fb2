/* decode: a decode step over the stored cache (see decode.h): query preparation, the parallel block items,
 * the ordered merge, the naive dequantize-then-attend path, and the kernel dispatch.
 * L layers, Hkv KV heads, Hq query heads, G = Hq / Hkv, T tokens, D head dim, WK / WV stored columns of
 * K / V (D, or the rank), nb = the blocks of DECODE_BLOCK tokens of both segments (main, then residual). */
#include "decode/decode.h"
#include "decode/kernels.h"
#include "decode/kernels_kivi.h"
#include "decode/pool.h"
#include "base/util.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One segment of the cache: the T main tokens (0) or the Tr residual tokens (1). */
typedef struct Seg {
    size_t T, nb, b0;            /* tokens, blocks, index of its first block in the slot order */
    const StoreTensor *K, *V;    /* the caller's tensors (V NULL: keys only) */
    const StoreTensor *Kk, *Vk;  /* what the kernels read: the cache, or its float32 copy (naive) */
    size_t WK, WV;               /* stored columns (WV 0 when keys only) */
    size_t *permK, *permV;       /* kernel column order */
    float *qp;                   /* (L*Hq, WK) prepared queries */
    int kivi_k, kivi_v;          /* read by the KIVI kernels */
    int tile_k, tile_v;          /* read through dequantized tiles (no kernel) */
    float *bK, *bV;              /* low rank: the FP16 bases of Kk / Vk in float, (L*Hkv, rank, D); else NULL */
    /* naive path */
    float *Kf, *Vf;
    StoreTensor *Kn, *Vn;
} Seg;

struct Decoder {
    DecodeCache c;
    size_t Hq, G, nb, SW;       /* nb: blocks of both segments; SW: slot width 2 + max WV */
    size_t ns;                  /* segments: 1, or 2 with a residual */
    Seg seg[2];
    int keys_only;
    DecodeImpl impl;
    const KernelSet *ks;
    const KiviKernels *kk;
    Pool *pool;
    float *slots;               /* (L*Hq, nb, SW): m_b, l_b, acc_b */
    float **S, **acc;           /* per thread: (G, DECODE_BLOCK) scores, (G, max WV) accumulators */
    float **tile;               /* per thread: rows of a format without a kernel, dequantized (generic path) */
    size_t tile_rows;
    float **kscr;               /* per thread: KIVI kernel scratch */
    double **num;               /* per thread: (4 D + 16) merge and query scratch */
    float **lr;                 /* per thread (naive): low-rank reconstruction scratch */
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

/* A grouped integer tensor the intN kernels (kernels_kivi.h) read: fills r and returns 1 for STORE_INTN, full
 * rank, 2 / 4 / 8 bits, symmetric or asymmetric, FP16 or FP32 parameters, groups along either axis, W % 8 == 0 and
 * groups of a multiple of 8 (or one group per row / column); else 0 (the generic tile path). */
static int kivi_rows(KiviRows *r, const StoreTensor *st)
{
    StoreFormat f = st->fmt;
    if (f.type != STORE_INTN || f.rank || (f.bits != 2 && f.bits != 4 && f.bits != 8) || st->W % 8 != 0 ||
        !st->params || (f.scale_type != STORE_SCALE_F16 && f.scale_type != STORE_SCALE_F32) ||
        (f.axis != STORE_AXIS_TOKEN && f.axis != STORE_AXIS_CHANNEL))
        return 0;
    size_t ext = f.axis == STORE_AXIS_TOKEN ? st->W : st->T, g = f.group && f.group < ext ? f.group : ext;
    if (g != ext && g % 8 != 0) return 0;
    size_t pb = f.scale_type == STORE_SCALE_F32 ? 4 : 2;
    r->codes = st->codes;
    r->row_bytes = st->W * (size_t)f.bits / 8;
    r->W = st->W;
    r->bits = f.bits;
    r->axis = f.axis;
    r->g = g;
    r->per = f.axis == STORE_AXIS_TOKEN ? (st->W + g - 1) / g : st->W;
    r->scale = st->params;
    r->min = f.asym ? st->params + st->n_groups * pb : NULL;
    r->f32 = f.scale_type == STORE_SCALE_F32;
    return 1;
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

/* Every tensor of K (and V) has shape (T, D) and the format of the first. */
static int check_tensors(const StoreTensor *K, const StoreTensor *V, size_t n_kv, size_t T, size_t D, const char *what)
{
    for (size_t i = 0; i < n_kv; i++) {
        const StoreTensor *k = &K[i], *v = V ? &V[i] : &K[i];
        if (k->T != T || v->T != T || k->D != D || v->D != D || !store_format_equal(k->fmt, K[0].fmt) ||
            (V && !store_format_equal(v->fmt, V[0].fmt))) {
            kvc_fail("decode: every %s tensor must have one format and shape (%zu, %zu) (got tensor %zu: "
                     "(%zu, %zu) and (%zu, %zu))", what, T, D, i, k->T, k->D, v->T, v->D);
            return -1;
        }
    }
    return 0;
}

/* The FP16 bases (rank, D) of n low-rank tensors converted to float once (each step reads them for every query
 * head); NULL when the tensors are full rank. */
static float *float_bases(const StoreTensor *t, size_t n, size_t D)
{
    size_t R = t[0].fmt.rank;
    if (!R) return NULL;
    float *b = xmalloc(n * R * D * sizeof *b);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < R * D; k++) b[i * R * D + k] = store_f16_to_f32(t[i].basis[k]);
    return b;
}

static void seg_init(Decoder *d, Seg *sg, size_t T, const StoreTensor *K, const StoreTensor *V, size_t b0)
{
    size_t n_kv = d->c.L * d->c.Hkv, D = d->c.D, n_q = d->c.L * d->Hq;
    KiviRows kr;
    sg->T = T;
    sg->nb = (T + DECODE_BLOCK - 1) / DECODE_BLOCK;
    sg->b0 = b0;
    sg->K = sg->Kk = K;
    sg->V = sg->Vk = V;
    if (d->impl == DECODE_NAIVE) {
        size_t per = T * D;
        sg->Kf = xmalloc(n_kv * per * sizeof *sg->Kf);
        sg->Kn = xcalloc(n_kv, sizeof *sg->Kn);
        for (size_t i = 0; i < n_kv; i++) sg->Kn[i] = f32_view(sg->Kf + i * per, T, D);
        sg->Kk = sg->Kn;
        if (V) {
            sg->Vf = xmalloc(n_kv * per * sizeof *sg->Vf);
            sg->Vn = xcalloc(n_kv, sizeof *sg->Vn);
            for (size_t i = 0; i < n_kv; i++) sg->Vn[i] = f32_view(sg->Vf + i * per, T, D);
            sg->Vk = sg->Vn;
        }
    }
    sg->WK = sg->Kk[0].W;
    sg->WV = V ? sg->Vk[0].W : 0;
    sg->permK = xmalloc(sg->WK * sizeof *sg->permK);
    d->ks->col_order(sg->permK, sg->Kk[0].fmt.type, sg->WK);
    if (V) {
        sg->permV = xmalloc(sg->WV * sizeof *sg->permV);
        d->ks->col_order(sg->permV, sg->Vk[0].fmt.type, sg->WV);
    }
    sg->qp = xmalloc(n_q * sg->WK * sizeof *sg->qp);
    sg->kivi_k = kivi_rows(&kr, &sg->Kk[0]);
    sg->kivi_v = V && kivi_rows(&kr, &sg->Vk[0]);
    if (sg->kivi_k) {   /* natural order, no factor: the KIVI kernels read codes as they are stored */
        for (size_t p = 0; p < sg->WK; p++) sg->permK[p] = p;
    }
    if (sg->kivi_v)
        for (size_t p = 0; p < sg->WV; p++) sg->permV[p] = p;
    sg->tile_k = !sg->kivi_k && !d->ks->scores[sg->Kk[0].fmt.type];
    sg->tile_v = V && !sg->kivi_v && !d->ks->vacc[sg->Vk[0].fmt.type];
    sg->bK = float_bases(sg->Kk, n_kv, D);
    sg->bV = V ? float_bases(sg->Vk, n_kv, D) : NULL;
}

static void seg_free(Seg *sg)
{
    free(sg->bK);
    free(sg->bV);
    free(sg->permK);
    free(sg->permV);
    free(sg->qp);
    free(sg->Kf);
    free(sg->Vf);
    free(sg->Kn);
    free(sg->Vn);
}

static const KiviKernels *kivi_kernels(const KernelSet *ks)
{
    const KernelSet *avx2 = decode_kernels_avx2();
    return avx2 && ks == avx2 && decode_kivi_avx2() ? decode_kivi_avx2() : &decode_kivi_ref;
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
    if (!c->K) {
        kvc_fail("decode: no key tensors (got K = NULL)");
        return NULL;
    }
    if (c->Tr > 0 && (!c->Kr || !c->Vr != !c->V)) {
        kvc_fail("decode: a residual of %zu tokens needs Kr, and Vr exactly when V is set (got Kr %s, V %s, Vr %s)",
                 c->Tr, c->Kr ? "set" : "NULL", c->V ? "set" : "NULL", c->Vr ? "set" : "NULL");
        return NULL;
    }
    if (check_tensors(c->K, c->V, n_kv, c->T, c->D, c->V ? "K (and every V)" : "K") ||
        (c->Tr > 0 && check_tensors(c->Kr, c->Vr, n_kv, c->Tr, c->D, c->Vr ? "Kr (and every Vr)" : "Kr")))
        return NULL;
    Decoder *d = xcalloc(1, sizeof *d);
    d->c = *c;
    d->Hq = Hq;
    d->G = Hq / c->Hkv;
    d->impl = impl;
    d->keys_only = c->V == NULL;
    d->ks = impl == DECODE_REF ? &decode_kernels_ref : fused_kernels();
    d->kk = kivi_kernels(d->ks);
    d->pool = pool_create(threads);
    if (!d->pool) {
        free(d);
        return NULL;
    }
    d->ns = c->Tr > 0 ? 2 : 1;
    seg_init(d, &d->seg[0], c->T, c->K, c->V, 0);
    if (d->ns == 2) seg_init(d, &d->seg[1], c->Tr, c->Kr, c->Vr, d->seg[0].nb);
    d->nb = d->seg[0].nb + (d->ns == 2 ? d->seg[1].nb : 0);
    size_t wk = 0, wv = 0, rmax = 0;
    int tiles = 0, kivi = 0;
    for (size_t s = 0; s < d->ns; s++) {
        const Seg *sg = &d->seg[s];
        if (sg->WK > wk) wk = sg->WK;
        if (sg->WV > wv) wv = sg->WV;
        if (sg->K[0].fmt.rank > rmax) rmax = sg->K[0].fmt.rank;
        if (sg->V && sg->V[0].fmt.rank > rmax) rmax = sg->V[0].fmt.rank;
        tiles |= sg->tile_k || sg->tile_v;
        kivi |= sg->kivi_k || sg->kivi_v;
    }
    if (impl == DECODE_NAIVE) d->lr = per_thread(threads, rmax * (DECODE_BLOCK + c->D));
    d->SW = 2 + wv;
    d->slots = xmalloc(n_q * d->nb * d->SW * sizeof *d->slots);
    d->S = per_thread(threads, d->G * DECODE_BLOCK);
    size_t wmaxkv = wk > wv ? wk : wv;
    d->tile_rows = ((size_t)1 << 16) / wmaxkv;
    if (d->tile_rows < 1) d->tile_rows = 1;
    if (d->tile_rows > 256) d->tile_rows = 256;
    if (tiles) d->tile = per_thread(threads, d->tile_rows * wmaxkv);
    if (kivi) d->kscr = per_thread(threads, KIVI_SCRATCH(d->G, wmaxkv));
    d->acc = per_thread(threads, d->G * wv);
    d->num = xcalloc((size_t)threads, sizeof *d->num);
    for (int i = 0; i < threads; i++) d->num[i] = xcalloc(4 * c->D + 16, sizeof **d->num);
    return d;
}

unsigned decoder_tiled(const Decoder *d)
{
    unsigned t = 0;
    for (size_t s = 0; s < d->ns; s++)
        t |= (d->seg[s].tile_k ? DECODE_TILED_K : 0u) << (2 * s) | (d->seg[s].tile_v ? DECODE_TILED_V : 0u) << (2 * s);
    return t;
}

void decoder_free(Decoder *d)
{
    if (!d) return;
    int n = pool_threads(d->pool);
    pool_free(d->pool);
    for (size_t s = 0; s < d->ns; s++) seg_free(&d->seg[s]);
    free(d->slots);
    free_per_thread((void **)d->S, n);
    free_per_thread((void **)d->acc, n);
    free_per_thread((void **)d->num, n);
    free_per_thread((void **)d->lr, n);
    free_per_thread((void **)d->tile, n);
    free_per_thread((void **)d->kscr, n);
    free(d);
}

/* ---- step phases ------------------------------------------------------------------------------------------ */

/* Naive path, item = (segment, tensor, chunk of DECODE_BLOCK tokens): dequantize into the float32 copy. */
static void naive_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t n_kv = d->c.L * d->c.Hkv, D = d->c.D;
    const Seg *sg = &d->seg[0];
    size_t nt = n_kv * (d->keys_only ? 1 : 2);   /* tensors per segment */
    if (item >= nt * sg->nb) {
        item -= nt * sg->nb;
        sg = &d->seg[1];
    }
    size_t T = sg->T, tensor = item / sg->nb, b = item % sg->nb, t0 = b * DECODE_BLOCK;
    size_t n = T - t0 < DECODE_BLOCK ? T - t0 : DECODE_BLOCK;
    const StoreTensor *st = tensor < n_kv ? &sg->K[tensor] : &sg->V[tensor - n_kv];
    float *dst = (tensor < n_kv ? sg->Kf + tensor * T * D : sg->Vf + (tensor - n_kv) * T * D) + t0 * D;
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

/* q for query head qh of layer l -> segment sg's prepared query (kernel order). */
static void prepare_query(Decoder *d, Seg *sg, size_t l, size_t qh, double *x, double *y)
{
    size_t D = d->c.D, W = sg->WK, kv = l * d->c.Hkv + qh / d->G;
    const StoreTensor *K = &sg->Kk[kv];
    const float *q = d->q + (l * d->Hq + qh) * D;
    double inv = 1.0 / sqrt((double)D);
    for (size_t j = 0; j < D; j++) x[j] = (double)q[j] * inv;
    if (K->fmt.rank) {   /* q' = B q */
        const float *B = sg->bK + kv * W * D;
        for (size_t r = 0; r < W; r++) {
            double a = 0.0;
            for (size_t j = 0; j < D; j++) a += (double)B[r * D + j] * x[j];
            y[r] = a;
        }
    } else {
        memcpy(y, x, D * sizeof *y);
    }
    if (store_type_is_int(K->fmt.type) && K->fmt.axis == STORE_AXIS_CHANNEL)
        for (size_t j = 0; j < W; j++) y[j] *= store_f16_to_f32(K->scales[j]);
    double f = !sg->kivi_k && d->ks->raw_scale[K->fmt.type] != 0 ? d->ks->raw_scale[K->fmt.type] : 1.0;
    if (f != 1.0)
        for (size_t j = 0; j < W; j++) y[j] *= f;
    float *o = sg->qp + (l * d->Hq + qh) * W;
    for (size_t p = 0; p < W; p++) o[p] = (float)y[sg->permK[p]];
}

/* item = (layer, KV head, block of either segment): scores, softmax pieces and the weighted V sum of one token
 * block. */
static void block_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t nb = d->nb, bb = item % nb, lh = item / nb, l = lh / d->c.Hkv, kvh = lh % d->c.Hkv, G = d->G;
    const Seg *sg = d->ns == 2 && bb >= d->seg[1].b0 ? &d->seg[1] : &d->seg[0];
    size_t b = bb - sg->b0, t0 = b * DECODE_BLOCK, n = sg->T - t0 < DECODE_BLOCK ? sg->T - t0 : DECODE_BLOCK;
    size_t WK = sg->WK, WV = sg->WV, SW = d->SW;
    const StoreTensor *K = &sg->Kk[lh];
    float *S = d->S[tid], *acc = d->acc[tid];
    size_t q0 = l * d->Hq + kvh * G;
    const float *qp = sg->qp + q0 * WK;
    if (sg->kivi_k) {
        KiviRows kr;
        kivi_rows(&kr, K);
        d->kk->scores(S, DECODE_BLOCK, qp, G, &kr, t0, n, d->kscr[tid]);
    } else if (!sg->tile_k) {
        KRows kr = rows_of(K);
        d->ks->scores[kr.type](S, DECODE_BLOCK, qp, G, &kr, t0, n);
    } else {   /* a format without a kernel: small dequantized tiles through the f32 kernel */
        for (size_t i = 0; i < n; i += d->tile_rows) {
            size_t nr = n - i < d->tile_rows ? n - i : d->tile_rows;
            store_dequantize_rows_f32(d->tile[tid], K, t0 + i, nr);
            KRows tr = {STORE_F32, (const uint8_t *)d->tile[tid], 4 * WK, NULL, WK};
            d->ks->scores[STORE_F32](S + i, DECODE_BLOCK, qp, G, &tr, 0, nr);
        }
    }
    float m[256], lsum[256];
    for (size_t g0 = 0; g0 < G; g0 += 256) {
        size_t gn = G - g0 < 256 ? G - g0 : 256;
        for (size_t g = 0; g < gn; g++) m[g] = d->ks->max(S + (g0 + g) * DECODE_BLOCK, n);
        if (d->mode == DECODE_FULL)
            for (size_t g = 0; g < gn; g++) lsum[g] = d->ks->exp_sum(S + (g0 + g) * DECODE_BLOCK, n, m[g]);
        for (size_t g = 0; g < gn; g++) {
            float *slot = d->slots + ((q0 + g0 + g) * nb + bb) * SW;
            slot[0] = m[g];
            slot[1] = d->mode == DECODE_FULL ? lsum[g] : 0.0f;
        }
    }
    if (d->mode != DECODE_FULL) return;
    const StoreTensor *V = &sg->Vk[lh];
    memset(acc, 0, G * WV * sizeof *acc);
    if (sg->kivi_v) {
        KiviRows vr;
        kivi_rows(&vr, V);
        d->kk->vacc(acc, S, DECODE_BLOCK, G, &vr, t0, n, d->kscr[tid]);
    } else if (!sg->tile_v) {
        KRows vr = rows_of(V);
        d->ks->vacc[vr.type](acc, S, DECODE_BLOCK, G, &vr, t0, n);
    } else {
        for (size_t i = 0; i < n; i += d->tile_rows) {
            size_t nr = n - i < d->tile_rows ? n - i : d->tile_rows;
            store_dequantize_rows_f32(d->tile[tid], V, t0 + i, nr);
            KRows tr = {STORE_F32, (const uint8_t *)d->tile[tid], 4 * WV, NULL, WV};
            d->ks->vacc[STORE_F32](acc, S + i, DECODE_BLOCK, G, &tr, 0, nr);
        }
    }
    for (size_t g = 0; g < G; g++)
        memcpy(d->slots + ((q0 + g) * nb + bb) * SW + 2, acc + g * WV, WV * sizeof *acc);
}

/* z[0..D) += segment sg's share of the output: num (its merged weighted sum, kernel order, WV columns) / den,
 * with the kernel order and the folded factors undone and a low-rank value basis applied. y: scratch (D). */
static void add_segment(const Decoder *d, const Seg *sg, size_t l, size_t qh, double *z, const double *num, double den,
                        double *y)
{
    size_t WV = sg->WV, D = d->c.D, kv = l * d->c.Hkv + qh / d->G;
    const StoreTensor *V = &sg->Vk[kv];
    for (size_t p = 0; p < WV; p++) y[sg->permV[p]] = num[p] / den;
    if (store_type_is_int(V->fmt.type) && V->fmt.axis == STORE_AXIS_CHANNEL)
        for (size_t j = 0; j < WV; j++) y[j] *= store_f16_to_f32(V->scales[j]);
    double f = !sg->kivi_v && d->ks->raw_scale[V->fmt.type] != 0 ? d->ks->raw_scale[V->fmt.type] : 1.0;
    if (f != 1.0)
        for (size_t j = 0; j < WV; j++) y[j] *= f;
    if (!V->fmt.rank) {
        for (size_t j = 0; j < D; j++) z[j] += y[j];
        return;
    }
    const float *B = sg->bV + kv * WV * D;
    for (size_t j = 0; j < D; j++) {
        double a = 0.0;
        for (size_t r = 0; r < WV; r++) a += y[r] * (double)B[r * D + j];
        z[j] += a;
    }
}

/* item = (layer, query head): merge the blocks of both segments in order, in double. */
static void merge_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t nb = d->nb, SW = d->SW, D = d->c.D, l = item / d->Hq, qh = item % d->Hq;
    const float *slot = d->slots + item * nb * SW;
    float *out = d->out + item * D;
    double mx = -INFINITY;
    for (size_t b = 0; b < nb; b++)
        if (slot[b * SW] > mx) mx = slot[b * SW];
    if (d->mode == DECODE_KEYS) {
        memset(out, 0, D * sizeof *out);
        out[0] = (float)mx;
        return;
    }
    double *num = d->num[tid], *y = num + D, *z = y + D, den = 0.0;
    for (size_t b = 0; b < nb; b++) den += exp((double)slot[b * SW] - mx) * slot[b * SW + 1];
    memset(z, 0, D * sizeof *z);
    for (size_t s = 0; s < d->ns; s++) {
        const Seg *sg = &d->seg[s];
        memset(num, 0, sg->WV * sizeof *num);
        for (size_t b = sg->b0; b < sg->b0 + sg->nb; b++) {
            const float *sb = slot + b * SW;
            double e = exp((double)sb[0] - mx);
            for (size_t p = 0; p < sg->WV; p++) num[p] += e * sb[2 + p];
        }
        add_segment(d, sg, l, qh, z, num, den, y);
    }
    for (size_t j = 0; j < D; j++) out[j] = (float)z[j];
}

void decoder_step(Decoder *d, float *out, const float *q, DecodeMode mode)
{
    assert(mode == DECODE_KEYS || !d->keys_only);   /* a keys-only cache has no attention output */
    size_t n_kv = d->c.L * d->c.Hkv, n_q = d->c.L * d->Hq;
    d->out = out;
    d->q = q;
    d->mode = mode;
    if (d->impl == DECODE_NAIVE) {
        size_t nt = n_kv * (d->keys_only ? 1 : 2), items = 0;
        for (size_t s = 0; s < d->ns; s++) items += nt * d->seg[s].nb;
        pool_run(d->pool, naive_item, d, items);
    }
    double *x = d->num[0], *y = x + d->c.D;
    for (size_t s = 0; s < d->ns; s++)
        for (size_t i = 0; i < n_q; i++) prepare_query(d, &d->seg[s], i / d->Hq, i % d->Hq, x, y);
    pool_run(d->pool, block_item, d, n_kv * d->nb);
    pool_run(d->pool, merge_item, d, n_q);
}

int decode_time_pair(double *ns_a, double *ns_b, const DecodeCache *a, const DecodeCache *b, size_t Hq,
                     const float *q, int threads, int repeat, DecodeMode mode)
{
    double mad;
    return decode_time_pair_mad(ns_a, ns_b, &mad, a, b, Hq, q, threads, repeat, mode);
}

int decode_time_pair_mad(double *ns_a, double *ns_b, double *mad_a, const DecodeCache *a, const DecodeCache *b,
                         size_t Hq, const float *q, int threads, int repeat, DecodeMode mode)
{
    if (repeat < 1) return kvc_fail("decode: repeat must be at least 1 (got %d)", repeat);
    if (a->L != b->L || a->D != b->D)
        return kvc_fail("decode: the two caches must have the same layers and head dim (got L %zu / %zu, D %zu / %zu)",
                        a->L, b->L, a->D, b->D);
    if (mode == DECODE_FULL && (!a->V || !b->V))
        return kvc_fail("decode: a keys-only cache (V = NULL) is timed with DECODE_KEYS (got DECODE_FULL)");
    Decoder *da = decoder_create(a, Hq, threads, DECODE_FUSED);
    if (!da) return -1;
    Decoder *db = decoder_create(b, Hq, threads, DECODE_FUSED);
    if (!db) {
        decoder_free(da);
        return -1;
    }
    float *out = xmalloc(a->L * Hq * a->D * sizeof *out);
    double *ta = xmalloc((size_t)repeat * sizeof *ta), *tb = xmalloc((size_t)repeat * sizeof *tb);
    decoder_step(da, out, q, mode);
    decoder_step(db, out, q, mode);
    for (int r = 0; r < repeat; r++) {
        double t0 = decode_now();
        decoder_step(da, out, q, mode);
        double t1 = decode_now();
        decoder_step(db, out, q, mode);
        ta[r] = t1 - t0;
        tb[r] = decode_now() - t1;
    }
    *ns_a = 1e9 * median(ta, (size_t)repeat);
    *ns_b = 1e9 * median(tb, (size_t)repeat);
    for (int r = 0; r < repeat; r++) ta[r] = fabs(1e9 * ta[r] - *ns_a);   /* median() reordered ta: no matter */
    *mad_a = median(ta, (size_t)repeat);
    free(ta);
    free(tb);
    free(out);
    decoder_free(da);
    decoder_free(db);
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
