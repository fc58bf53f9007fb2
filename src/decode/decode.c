/* decode: a decode step over the stored cache (see decode.h): query preparation, the parallel block items,
 * the ordered merge, the naive dequantize-then-attend path, and the kernel dispatch (one KernelSet slot per
 * stored tensor, chosen when the decoder is created: kernels.h).
 * L layers, Hkv KV heads, Hq query heads, G = Hq / Hkv, T tokens, D head dim, W stored columns of a side
 * (K or V: D, or the rank), nb = the blocks of blk tokens of both segments (main, then residual). */
#include "decode/decode.h"
#include "decode/kernels.h"
#include "base/pool.h"
#include "base/util.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One side (K or V) of a segment and how the kernels read it, decided once when the decoder is created. */
typedef struct Side {
    const StoreTensor *st;   /* the caller's L*Hkv tensors; NULL: no such side (V of a keys-only cache) */
    const StoreTensor *rd;   /* what the kernels read: st, or its float32 copy (naive path) */
    KRows *rows;             /* (L*Hkv) the kernels' view of rd */
    size_t W;                /* stored columns (0 when absent) */
    ScoresFn scores;         /* the slot of rd's type (K side); NULL: dequantized tiles through the f32 slot */
    VaccFn vacc;             /* the same for the V side */
    size_t *perm;            /* kernel column order */
    double factor;           /* the set's raw factor of what it reads (1: none) */
    float *basis;            /* low rank: the FP16 bases of rd in float, (L*Hkv, rank, D); else NULL */
    float *f32;              /* naive path: the float32 copy (L*Hkv, T, D) and its tensors */
    StoreTensor *f32t;
} Side;

/* One segment of the cache: the T main tokens (0) or the Tr residual tokens (1). */
typedef struct Seg {
    size_t T, nb, b0;            /* tokens, blocks, index of its first block in the slot order */
    Side k, v;
    float *qp;                   /* (L*Hq, k.W) prepared queries */
} Seg;

struct Decoder {
    DecodeCache c;
    size_t Hq, G, nb, SW;       /* nb: blocks of both segments; SW: slot width 2 + max WV */
    size_t blk;                 /* tokens per block (work item) */
    size_t ns;                  /* segments: 1, or 2 with a residual */
    Seg seg[2];
    int keys_only;
    DecodeImpl impl;
    const KernelSet *ks;
    Pool *pool;
    float *slots;               /* (L*Hq, nb, SW): m_b, l_b, acc_b */
    float **S, **acc;           /* per thread: (G, blk) scores, (G, max WV) accumulators */
    float **tile;               /* per thread: rows of a tensor without a slot, dequantized (generic path) */
    size_t tile_rows;
    float **scr;                /* per thread: kernel scratch (DECODE_SCRATCH) */
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
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    const int amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;   /* "AuthenticAMD" */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (amd) f |= DECODE_CPU_AMD;
    const unsigned family = (a >> 8 & 0xFu) == 0xFu ? 0xFu + (a >> 20 & 0xFFu) : a >> 8 & 0xFu;
    if (amd && family == 0x19u) f |= DECODE_CPU_AMD_F19;
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
        int zmm_ok = ymm_ok && (xlo & 0xE6u) == 0xE6u;   /* opmask, upper ZMM halves and ZMM16..31 saved */
        if (zmm_ok && (b & (1u << 16))) f |= DECODE_CPU_AVX512F;
        if (zmm_ok && (b & (1u << 30))) f |= DECODE_CPU_AVX512BW;
        if (zmm_ok && (b & (1u << 31))) f |= DECODE_CPU_AVX512VL;
        if (zmm_ok && (c & (1u << 11))) f |= DECODE_CPU_AVX512VNNI;
        if (zmm_ok && (c & (1u << 1))) f |= DECODE_CPU_AVX512VBMI;
        /* AMX-TILE (EDX bit 24) with the tile state enabled (XCR0 bits 17, 18); then AMX-INT8 (25), AMX-BF16 (22) */
        const int tile_ok = zmm_ok && (xlo & 0x60000u) == 0x60000u && (d & (1u << 24));
        if (tile_ok && (d & (1u << 25))) f |= DECODE_CPU_AMX_INT8;
        if (tile_ok && (d & (1u << 22))) f |= DECODE_CPU_AMX_BF16;
    }
    return f;
}
#else
static unsigned cpu_features(void) { return 0; }
#endif

unsigned decode_cpu_features(void) { return cpu_features(); }

static int vnni_used;   /* fused_kernels chose the AVX-512 set with its VNNI key slots */

static const KernelSet *fused_kernels(void)
{
    static const KernelSet *best;
    if (best) return best;
    const KernelSet *k = &decode_kernels_ref;
    const char *env = getenv("KVC_ISA");
    unsigned f = cpu_features(), need = DECODE_CPU_AVX2 | DECODE_CPU_FMA | DECODE_CPU_F16C;
    unsigned need512 = need | DECODE_CPU_AVX512F | DECODE_CPU_AVX512BW | DECODE_CPU_AVX512VL;
    int scalar = env && strcmp(env, "scalar") == 0, avx2 = env && strcmp(env, "avx2") == 0;
    int novnni = env && strcmp(env, "avx512-novnni") == 0;   /* the AVX-512 set without its VNNI key kernels */
    /* the CPU test first: decode_kernels_avx512() itself is compiled for AVX-512 (its table copy may use zmm
     * moves), so calling it on a CPU without AVX-512 would be an illegal instruction */
    if (!scalar && (f & need) == need && decode_kernels_avx2()) k = decode_kernels_avx2();
    if (!scalar && !avx2 && (f & need512) == need512 && decode_kernels_avx512(!novnni)) {
        k = decode_kernels_avx512(!novnni);
        vnni_used = !novnni && (f & DECODE_CPU_AVX512VNNI);
    }
    best = k;
    return k;
}

const char *decode_isa(void) { return fused_kernels()->name; }

const KernelSet *decode_fused_kernels(void) { return fused_kernels(); }

const char *decode_tune(void)
{
    static const char *const names[] = {[DECODE_TUNE_AMD] = "amd", [DECODE_TUNE_INTEL] = "intel", [DECODE_TUNE_ZEN4] = "zen4"};
    return strcmp(fused_kernels()->name, "avx512") ? "" : names[decode_avx512_tune()];
}

int decode_vnni(void)
{
    fused_kernels();
    return vnni_used;
}

int decode_amx(void) { return decode_vnni() && decode_avx512_amx(); }
int decode_amx_values(void) { return decode_amx() && (decode_cpu_features() & DECODE_CPU_AVX512VBMI) != 0; }
int decode_amx_bf16(void) { return !strcmp(fused_kernels()->name, "avx512") && decode_avx512_amx_bf16(); }

const char *decode_kernels_note(void)
{
    static char note[192];
    const int ik = decode_amx(), bf = decode_amx_bf16(), iv = decode_amx_values();
    char tiles[160] = "";
    if (ik || bf)
        snprintf(tiles, sizeof tiles, " (AMX tiles: %s%s%s)", ik ? "int8 keys of 2-8 heads, int4 of 5-8" : "",
                 ik && bf ? ", e4m3 and bf16 of 2-8 in BF16" : bf ? "e4m3 and bf16 keys of 2-8 heads in BF16" : "",
                 iv ? "; int8 and int4 values of 2-8" : "");
    snprintf(note, sizeof note, "%s%s", decode_vnni() ? " with VNNI integer keys" : "", tiles);
    return note;
}

/* kernels.h */
int decode_rows(KRows *r, const StoreTensor *st)
{
    StoreFormat f = st->fmt;
    memset(r, 0, sizeof *r);
    r->type = f.type;
    r->codes = st->codes;
    r->row_bytes = st->row_bytes;
    r->W = st->W;
    r->rscale = store_type_is_int(f.type) && f.axis == STORE_AXIS_TOKEN ? st->scales : NULL;
    if (f.type != STORE_INTN) return 1;
    if (f.rank || (f.bits != 2 && f.bits != 4 && f.bits != 8) || st->W % 8 != 0 || !st->params ||
        (f.scale_type != STORE_SCALE_F16 && f.scale_type != STORE_SCALE_F32) ||
        (f.axis != STORE_AXIS_TOKEN && f.axis != STORE_AXIS_CHANNEL))
        return 0;
    size_t ext = f.axis == STORE_AXIS_TOKEN ? st->W : st->T, g = f.group && f.group < ext ? f.group : ext;
    if (g != ext && g % 8 != 0) return 0;
    size_t pb = f.scale_type == STORE_SCALE_F32 ? 4 : 2;
    r->row_bytes = st->W * (size_t)f.bits / 8;
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
    for (int i = 0; i < n; i++) p[i] = xalloc64((count ? count : 1) * sizeof **p);
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

/* Side of n_kv tensors st (T, D) each (NULL: absent): its float32 copy on the naive path, the kernels' views, the
 * slot that reads them (or the tile path), column order, raw factor and low-rank bases. */
static void side_init(const Decoder *d, Side *sd, const StoreTensor *st, size_t T)
{
    size_t n_kv = d->c.L * d->c.Hkv, D = d->c.D;
    memset(sd, 0, sizeof *sd);
    sd->factor = 1.0;
    if (!st) return;
    sd->st = sd->rd = st;
    if (d->impl == DECODE_NAIVE) {
        sd->f32 = xmalloc(n_kv * T * D * sizeof *sd->f32);
        sd->f32t = xcalloc(n_kv, sizeof *sd->f32t);
        for (size_t i = 0; i < n_kv; i++) sd->f32t[i] = f32_view(sd->f32 + i * T * D, T, D);
        sd->rd = sd->f32t;
    }
    sd->W = sd->rd[0].W;
    sd->rows = xmalloc(n_kv * sizeof *sd->rows);
    int fused = 1;   /* every tensor of a side has one format and shape: one slot for all */
    for (size_t i = 0; i < n_kv; i++)
        if (!decode_rows(&sd->rows[i], &sd->rd[i])) fused = 0;
    StoreType t = fused ? sd->rd[0].fmt.type : STORE_F32;   /* the type the kernels read */
    if (fused) {
        sd->scores = d->ks->scores[t];
        sd->vacc = d->ks->vacc[t];
    }
    sd->perm = xmalloc(sd->W * sizeof *sd->perm);
    d->ks->col_order(sd->perm, t, sd->W);
    if (d->ks->raw_scale[t] != 0) sd->factor = d->ks->raw_scale[t];
    sd->basis = float_bases(sd->rd, n_kv, D);
}

static void side_free(Side *sd)
{
    free(sd->rows);
    free(sd->perm);
    free(sd->basis);
    free(sd->f32);
    free(sd->f32t);
}

static void seg_init(Decoder *d, Seg *sg, size_t T, const StoreTensor *K, const StoreTensor *V, size_t b0)
{
    sg->T = T;
    sg->nb = (T + d->blk - 1) / d->blk;
    sg->b0 = b0;
    side_init(d, &sg->k, K, T);
    side_init(d, &sg->v, V, T);
    sg->qp = xalloc64(d->c.L * d->Hq * sg->k.W * sizeof *sg->qp);
}

static void seg_free(Seg *sg)
{
    side_free(&sg->k);
    side_free(&sg->v);
    free(sg->qp);
}

static size_t block_tokens = DECODE_BLOCK;   /* decode_set_block */
enum { DECODE_SCORES_MAX = 1 << 22 };       /* floats of a thread's scores (G x blk), at most (blk >= 64) */

size_t decode_set_block(size_t tokens)
{
    const size_t was = block_tokens;
    block_tokens = tokens >= 64 && tokens <= 65536 && tokens % 64 == 0 ? tokens : DECODE_BLOCK;
    return was;
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
    if (impl != DECODE_FUSED && impl != DECODE_REF && impl != DECODE_NAIVE && impl != DECODE_FUSED_INT16Q &&
        impl != DECODE_FUSED_INT8Q) {
        kvc_fail("decode: unknown implementation (got %d)", (int)impl);
        return NULL;
    }
    const KernelSet *ks = impl == DECODE_REF ? &decode_kernels_ref : fused_kernels();
    if (impl == DECODE_FUSED_INT16Q || impl == DECODE_FUSED_INT8Q) {
        if (!decode_vnni()) {
            kvc_fail("decode: the %s-query kernels need the AVX512_VNNI kernel set (got this run's fused set: %s%s)",
                     impl == DECODE_FUSED_INT8Q ? "int8" : "int16", ks->name,
                     !strcmp(ks->name, "avx512") ? " without VNNI" : "");
            return NULL;
        }
        ks = decode_kernels_avx512_rounded(impl == DECODE_FUSED_INT8Q ? 1 : 2);
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
    d->blk = block_tokens;   /* halved while a thread's scores (G x blk floats) would pass 16 MiB: large G */
    while (d->blk > 64 && d->G * d->blk > DECODE_SCORES_MAX) d->blk /= 2;
    d->impl = impl;
    d->keys_only = c->V == NULL;
    d->ks = ks;
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
    int tiles = 0;
    for (size_t s = 0; s < d->ns; s++) {
        const Seg *sg = &d->seg[s];
        if (sg->k.W > wk) wk = sg->k.W;
        if (sg->v.W > wv) wv = sg->v.W;
        if (sg->k.st[0].fmt.rank > rmax) rmax = sg->k.st[0].fmt.rank;
        if (sg->v.st && sg->v.st[0].fmt.rank > rmax) rmax = sg->v.st[0].fmt.rank;
        tiles |= !sg->k.scores || (sg->v.st && !sg->v.vacc);
    }
    if (impl == DECODE_NAIVE) d->lr = per_thread(threads, rmax * (d->blk + c->D));
    d->SW = 2 + wv;
    d->slots = xalloc64(n_q * d->nb * d->SW * sizeof *d->slots);
    d->S = per_thread(threads, d->G * d->blk);
    size_t wmaxkv = wk > wv ? wk : wv;
    d->tile_rows = ((size_t)1 << 16) / wmaxkv;
    if (d->tile_rows < 1) d->tile_rows = 1;
    if (d->tile_rows > 256) d->tile_rows = 256;
    if (tiles) d->tile = per_thread(threads, d->tile_rows * wmaxkv);
    d->scr = per_thread(threads, DECODE_SCRATCH(d->G, wmaxkv));
    d->acc = per_thread(threads, d->G * wv);
    d->num = xcalloc((size_t)threads, sizeof *d->num);
    for (int i = 0; i < threads; i++) d->num[i] = xcalloc(4 * c->D + 16, sizeof **d->num);
    return d;
}

unsigned decoder_tiled(const Decoder *d)
{
    unsigned t = 0;
    for (size_t s = 0; s < d->ns; s++)
        t |= (d->seg[s].k.st && !d->seg[s].k.scores ? DECODE_TILED_K : 0u) << (2 * s) |
             (d->seg[s].v.st && !d->seg[s].v.vacc ? DECODE_TILED_V : 0u) << (2 * s);   /* no slot: tiles */
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
    free_per_thread((void **)d->scr, n);
    free(d);
}

/* ---- step phases ------------------------------------------------------------------------------------------ */

/* Naive path, item = (segment, tensor, chunk of blk tokens): dequantize into the float32 copy. */
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
    size_t T = sg->T, tensor = item / sg->nb, b = item % sg->nb, t0 = b * d->blk;
    size_t n = T - t0 < d->blk ? T - t0 : d->blk;
    const Side *sd = tensor < n_kv ? &sg->k : &sg->v;
    size_t i = tensor < n_kv ? tensor : tensor - n_kv;
    const StoreTensor *st = &sd->st[i];
    float *dst = sd->f32 + i * T * D + t0 * D;
    size_t R = st->fmt.rank;
    if (!R) {
        store_dequantize_rows_f32(dst, st, t0, n);
        return;
    }
    float *C = d->lr[tid], *B = C + d->blk * R;   /* C (n, R), then B (R, D) */
    store_dequantize_rows_f32(C, st, t0, n);
    for (size_t k = 0; k < R * D; k++) B[k] = store_f16_to_f32(st->basis[k]);
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
    const Side *sd = &sg->k;
    size_t D = d->c.D, W = sd->W, kv = l * d->c.Hkv + qh / d->G;
    const StoreTensor *K = &sd->rd[kv];
    const float *q = d->q + (l * d->Hq + qh) * D;
    double inv = 1.0 / sqrt((double)D);
    for (size_t j = 0; j < D; j++) x[j] = (double)q[j] * inv;
    if (K->fmt.rank) {   /* q' = B q */
        const float *B = sd->basis + kv * W * D;
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
    if (sd->factor != 1.0)
        for (size_t j = 0; j < W; j++) y[j] *= sd->factor;
    float *o = sg->qp + (l * d->Hq + qh) * W;
    for (size_t p = 0; p < W; p++) o[p] = (float)y[sd->perm[p]];
}

/* S[g*blk + i] = the scores of rows t0..t0+n of tensor lh for the G heads of qp: its slot, or (no slot)
 * small dequantized tiles through the f32 slot. */
static void side_scores(const Decoder *d, const Side *sd, size_t lh, float *S, const float *qp, size_t t0, size_t n,
                        int tid)
{
    if (sd->scores) {
        sd->scores(S, d->blk, qp, d->G, &sd->rows[lh], t0, n, d->scr[tid]);
        return;
    }
    for (size_t i = 0; i < n; i += d->tile_rows) {
        size_t nr = n - i < d->tile_rows ? n - i : d->tile_rows;
        store_dequantize_rows_f32(d->tile[tid], &sd->rd[lh], t0 + i, nr);
        KRows tr = {.type = STORE_F32, .codes = (const uint8_t *)d->tile[tid], .row_bytes = 4 * sd->W, .W = sd->W};
        d->ks->scores[STORE_F32](S + i, d->blk, qp, d->G, &tr, 0, nr, d->scr[tid]);
    }
}

/* acc (G, W) += the weighted sum of rows t0..t0+n of tensor lh with the weights in S, the same way. */
static void side_vacc(const Decoder *d, const Side *sd, size_t lh, float *acc, const float *S, size_t t0, size_t n,
                      int tid)
{
    if (sd->vacc) {
        sd->vacc(acc, S, d->blk, d->G, &sd->rows[lh], t0, n, d->scr[tid]);
        return;
    }
    for (size_t i = 0; i < n; i += d->tile_rows) {
        size_t nr = n - i < d->tile_rows ? n - i : d->tile_rows;
        store_dequantize_rows_f32(d->tile[tid], &sd->rd[lh], t0 + i, nr);
        KRows tr = {.type = STORE_F32, .codes = (const uint8_t *)d->tile[tid], .row_bytes = 4 * sd->W, .W = sd->W};
        d->ks->vacc[STORE_F32](acc, S + i, d->blk, d->G, &tr, 0, nr, d->scr[tid]);
    }
}

/* item = (layer, KV head, block of either segment): scores, softmax pieces and the weighted V sum of one token
 * block. */
static void block_item(void *arg, size_t item, int tid)
{
    Decoder *d = arg;
    size_t nb = d->nb, bb = item % nb, lh = item / nb, l = lh / d->c.Hkv, kvh = lh % d->c.Hkv, G = d->G;
    const Seg *sg = d->ns == 2 && bb >= d->seg[1].b0 ? &d->seg[1] : &d->seg[0];
    size_t b = bb - sg->b0, t0 = b * d->blk, n = sg->T - t0 < d->blk ? sg->T - t0 : d->blk;
    size_t WV = sg->v.W, SW = d->SW;
    float *S = d->S[tid], *acc = d->acc[tid];
    size_t q0 = l * d->Hq + kvh * G;
    side_scores(d, &sg->k, lh, S, sg->qp + q0 * sg->k.W, t0, n, tid);
    float m[256], lsum[256];
    for (size_t g0 = 0; g0 < G; g0 += 256) {
        size_t gn = G - g0 < 256 ? G - g0 : 256;
        for (size_t g = 0; g < gn; g++) m[g] = d->ks->max(S + (g0 + g) * d->blk, n);
        if (d->mode == DECODE_FULL)
            for (size_t g = 0; g < gn; g++) lsum[g] = d->ks->exp_sum(S + (g0 + g) * d->blk, n, m[g]);
        for (size_t g = 0; g < gn; g++) {
            float *slot = d->slots + ((q0 + g0 + g) * nb + bb) * SW;
            slot[0] = m[g];
            slot[1] = d->mode == DECODE_FULL ? lsum[g] : 0.0f;
        }
    }
    if (d->mode != DECODE_FULL) return;
    memset(acc, 0, G * WV * sizeof *acc);
    side_vacc(d, &sg->v, lh, acc, S, t0, n, tid);
    for (size_t g = 0; g < G; g++)
        memcpy(d->slots + ((q0 + g) * nb + bb) * SW + 2, acc + g * WV, WV * sizeof *acc);
}

/* z[0..D) += segment sg's share of the output: num (its merged weighted sum, kernel order, WV columns) / den,
 * with the kernel order and the folded factors undone and a low-rank value basis applied. y: scratch (D). */
static void add_segment(const Decoder *d, const Seg *sg, size_t l, size_t qh, double *z, const double *num, double den,
                        double *y)
{
    const Side *sd = &sg->v;
    size_t WV = sd->W, D = d->c.D, kv = l * d->c.Hkv + qh / d->G;
    const StoreTensor *V = &sd->rd[kv];
    for (size_t p = 0; p < WV; p++) y[sd->perm[p]] = num[p] / den;
    if (store_type_is_int(V->fmt.type) && V->fmt.axis == STORE_AXIS_CHANNEL)
        for (size_t j = 0; j < WV; j++) y[j] *= store_f16_to_f32(V->scales[j]);
    if (sd->factor != 1.0)
        for (size_t j = 0; j < WV; j++) y[j] *= sd->factor;
    if (!V->fmt.rank) {
        for (size_t j = 0; j < D; j++) z[j] += y[j];
        return;
    }
    const float *B = sd->basis + kv * WV * D;
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
        memset(num, 0, sg->v.W * sizeof *num);
        for (size_t b = sg->b0; b < sg->b0 + sg->nb; b++) {
            const float *sb = slot + b * SW;
            double e = exp((double)sb[0] - mx);
            for (size_t p = 0; p < sg->v.W; p++) num[p] += e * sb[2 + p];
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
    free(ta);
    free(tb);
    free(out);
    decoder_free(da);
    decoder_free(db);
    return 0;
}

/* ---- bandwidth probe --------------------------------------------------------------------------------------- */

/* decode_read_cold's items: 1 MiB pieces of the buffers, read with the fused kernels' loads */
typedef struct ColdRead {
    const float **x;
    size_t *n;
    float *sums;
    const KernelSet *ks;
} ColdRead;

static void cold_item(void *arg, size_t item, int tid)
{
    (void)tid;
    ColdRead *c = arg;
    c->sums[item] = c->ks->read_sum(c->x[item], c->n[item]);
}

int decode_read_cold(double *sec, int repeat, const void *const *buf, const size_t *bytes, size_t nbuf,
                     const float *evict, size_t evict_n, int threads)
{
    const size_t chunk = (size_t)1 << 18;   /* floats per item */
    size_t items = 0;
    for (size_t b = 0; b < nbuf; b++) items += (bytes[b] / sizeof(float) + chunk - 1) / chunk;
    Pool *pool = pool_create(threads);
    if (!pool) return -1;
    ColdRead c = {xcalloc(items ? items : 1, sizeof *c.x), xcalloc(items ? items : 1, sizeof *c.n),
                  xcalloc(items ? items : 1, sizeof *c.sums), fused_kernels()};
    size_t k = 0;
    for (size_t b = 0; b < nbuf; b++) {
        const float *x = buf[b];
        size_t n = bytes[b] / sizeof(float);
        for (size_t a = 0; a < n; a += chunk, k++) c.x[k] = x + a, c.n[k] = n - a < chunk ? n - a : chunk;
    }
    volatile float sink = 0.0f;
    for (int r = 0; r < repeat; r++) {
        if (evict_n) sink += c.ks->read_sum(evict, evict_n);
        double t = decode_now();
        pool_run(pool, cold_item, &c, items);
        sec[r] = decode_now() - t;
        for (size_t i = 0; i < items; i++) sink += c.sums[i];
    }
    (void)sink;
    free(c.x), free(c.n), free(c.sums);
    pool_free(pool);
    return 0;
}

int decode_read_times(double *sec, int repeat, const float *x, size_t n, int threads)
{
    const void *buf = x;
    const size_t bytes = n * sizeof *x;
    double warm;   /* the untimed pass */
    if (decode_read_cold(&warm, 1, &buf, &bytes, 1, NULL, 0, threads)) return -1;
    return decode_read_cold(sec, repeat, &buf, &bytes, 1, NULL, 0, threads);
}
