/* avx2_common: what the AVX2 kernel files share (kernels_avx2.c, kernels_ggml_avx2.c, kernels_kivi_avx2.c), and
 * only them: they include it inside their `#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)`, as
 * the only files compiled with -mavx2 -mfma -mf16c. Everything here is static, almost all of it always-inline
 * (the kernels instantiate it with their formats and head-group sizes); internal to src/decode/.
 *   - Helpers: UNROLL, INLINE, PF_AHEAD / prefetch_range (rows are read in address order with a software
 *     prefetch PF_AHEAD bytes ahead), load8, f16_bcast, h8 (FP16 loads), hsum, reduce8 / reduce (horizontal
 *     sums of 8 vectors at once).
 *   - HEAD_GROUPS: the head-group driver every kernel uses (query heads in groups of 8, 4, 2, 1).
 *   - The value side of the "unit" formats (vacc_all): a format describes its unit (Unit: a few stored bytes
 *     that expand to 1..4 vectors of 8 floats by its converter) and gets the whole weighted V sum: one head
 *     (vacc_one), register accumulators for formats of at most one byte per value (vacc_direct), and the GQA
 *     tile path (tile_convert into an L1 scratch, then tile_fma). kernels_avx2.c (f32 .. q4_0) and
 *     kernels_ggml_avx2.c (q4_1 .. iq4_nl, with their block converter) use it; the intN kernels have their own
 *     value tiles (groups and centring).
 * The summation order depends only on W, n and G, never on the thread count.
 */
#ifndef KVC_DECODE_AVX2_COMMON_H
#define KVC_DECODE_AVX2_COMMON_H

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "avx2_common.h is for the files compiled with -mavx2 -mfma -mf16c"
#endif

#include "decode/kernels.h"
#include "store/elem.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL _Pragma("GCC unroll 16")
#define INLINE static inline __attribute__((always_inline))

#ifndef KVC_PF_AHEAD
#define KVC_PF_AHEAD 2048
#endif
enum { PF_AHEAD = KVC_PF_AHEAD };   /* software prefetch distance in bytes: rows are read in address order */

INLINE void prefetch_range(const uint8_t *p, size_t n)
{
#pragma GCC unroll 4
    for (size_t off = 0; off < n; off += 64) _mm_prefetch((const char *)(p + off), _MM_HINT_T0);
}

INLINE __m128i load8(const uint8_t *p) { return _mm_loadl_epi64((const __m128i *)(const void *)p); }
/* The FP16 value at p, in all 8 lanes. */
INLINE __m256 f16_bcast(const uint8_t *p) { return _mm256_cvtph_ps(_mm_set1_epi16((short)elem_u16(p))); }
/* 8 FP16 values. */
INLINE __m256 h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }

INLINE float hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* Lane m = the horizontal sum of v[m], m < 8. */
INLINE __m256 reduce8v(const __m256 *v)
{
    __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
INLINE void reduce8(const __m256 *v, float *out) { _mm256_storeu_ps(out, reduce8v(v)); }

/* out[m] = horizontal sum of acc[m], m < M (M = 8, 4, or fewer). */
INLINE void reduce(const int M, const __m256 *acc, float *out)
{
    if (M == 8) {
        reduce8(acc, out);
    } else if (M == 4) {
        __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
        _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
    } else {
        UNROLL for (int m = 0; m < M; m++) out[m] = hsum(acc[m]);
    }
}

/* ---- the head-group driver ---------------------------------------------------------------------------------- */

/* The G query heads of one KV head in groups of GC = 8, 4, 2 or 1 heads, largest first, so that each unit of
 * codes a kernel converts serves the GC heads of a group. The statement(s) after CAN run once per group, with h
 * (size_t) its first head and GC an int constant expression (an enum in scope), for the group sizes the
 * expression CAN (in GC) allows; GC = 1 always runs. Example (scores for groups of at most 4 heads):
 *     HEAD_GROUPS(G, h, GC <= 4, scores_gc(T, GC, s + h * ls, ls, qp + h * W, k, t0, n));
 * (An if / else chain, like the hand-written loops it replaces: the compiler lays it out the same way.)
 */
#define HEAD_GROUPS(G, h, CAN, ...)                                                                               \
    for (size_t h = 0; h < (G);) {                                                                                \
        const size_t hg_left_ = (G) - h;                                                                          \
        int hg8_, hg4_, hg2_;                                                                                     \
        HEAD_GROUP_CAN_(hg8_, 8, CAN);                                                                            \
        HEAD_GROUP_CAN_(hg4_, 4, CAN);                                                                            \
        HEAD_GROUP_CAN_(hg2_, 2, CAN);                                                                            \
        if (hg8_ && hg_left_ >= 8) {                                                                              \
            HEAD_GROUP_RUN_(8, h, __VA_ARGS__)                                                                    \
        } else if (hg4_ && hg_left_ >= 4) {                                                                       \
            HEAD_GROUP_RUN_(4, h, __VA_ARGS__)                                                                    \
        } else if (hg2_ && hg_left_ >= 2) {                                                                       \
            HEAD_GROUP_RUN_(2, h, __VA_ARGS__)                                                                    \
        } else {                                                                                                  \
            HEAD_GROUP_RUN_(1, h, __VA_ARGS__)                                                                    \
        }                                                                                                         \
    }
#define HEAD_GROUP_CAN_(var, N, CAN)                                                                              \
    {                                                                                                             \
        enum { GC = N };                                                                                          \
        var = (CAN);                                                                                              \
    }
#define HEAD_GROUP_RUN_(N, h, ...)                                                                                \
    {                                                                                                             \
        enum { GC = N };                                                                                          \
        __VA_ARGS__;                                                                                              \
        h += GC;                                                                                                  \
    }

/* ---- the value side of unit formats ------------------------------------------------------------------------- */

/* x[0..nv) = the unit at p in kernel order; *d = its block scale (scaled formats; left alone otherwise). */
typedef void (*UnitCvtFn)(StoreType t, const uint8_t *p, __m256 *x, __m256 *d);

/* A format read in units: `bytes` stored bytes expand to nv vectors of 8 floats (`values` = 8 nv columns) by
 * cvt(type, ...); scaled: the values are the vectors times the unit's block scale d. Columns past the last full
 * unit are read one by one (tail_elem). Built by each kernel file from compile-time constants, so that the
 * always-inline functions below compile to that format's code. */
typedef struct Unit {
    StoreType type;
    size_t values, bytes;
    int nv, scaled;
    UnitCvtFn cvt;
} Unit;

/* A column past the last full unit, as the AVX2 kernels read it (E4M3: 1/256 of its value, exact). */
INLINE float tail_elem(const StoreType t, const uint8_t *row, size_t j)
{
    float v = elem_value(t, row, j);
    return t == STORE_E4M3 ? v * 0x1p-8f : v;
}

enum { SCR = 4096, VT_MAX = 32 };   /* GQA tile scratch: floats (16 KiB, stays in L1); tokens per tile */

/* The weights of tokens t..t+nt for GC heads: p itself (stride lp) or, with per-token FP16 scales,
 * p times the scales in buf (stride VT_MAX). Returns the pointer; *lw is its stride. */
INLINE const float *tile_weights(const int GC, float *buf, size_t *lw, const float *p, size_t lp, const KRows *v,
                                 size_t t, size_t i0, size_t nt)
{
    if (!v->rscale) {
        *lw = lp;
        return p + i0;
    }
    for (int g = 0; g < GC; g++) {
        const float *pg = p + (size_t)g * lp + i0;
        float *o = buf + (size_t)g * VT_MAX;
        size_t i = 0;
        for (; i + 8 <= nt; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(pg + i), h8(v->rscale + t + i)));
        for (; i < nt; i++) o[i] = pg[i] * _cvtsh_ss(v->rscale[t + i]);
    }
    *lw = VT_MAX;
    return buf;
}

/* Column tails (W % unit) of a tile, scalar. */
INLINE void tail_columns(const Unit U, const int GC, float *acc, const float *pw, size_t lw, const KRows *v, size_t t,
                         size_t nt)
{
    const size_t W = v->W, j0 = W / U.values * U.values;
    if (j0 == W) return;
    for (size_t i = 0; i < nt; i++) {
        const uint8_t *row = v->codes + (t + i) * v->row_bytes;
        for (int g = 0; g < GC; g++) {
            float w = pw[(size_t)g * lw + i];
            for (size_t j = j0; j < W; j++) acc[(size_t)g * W + j] += w * tail_elem(U.type, row, j);
        }
    }
}

/* Units u0..u0+NU of nt rows for GC heads (GC * NU * nv <= 8 register accumulators):
 * acc[g*W + j] += sum_i pw[g*lw + i] * row_i[j]. Each unit is converted once for the GC heads. */
INLINE void vacc_cols(const Unit U, const int GC, const int NU, float *acc, size_t W, const float *pw, size_t lw,
                      const uint8_t *row, size_t rb, size_t nt, size_t u0)
{
    const int NV = U.nv, NA = NU * NV;
    __m256 a[8];
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < NA; c++) a[g * NA + c] = _mm256_loadu_ps(acc + (size_t)g * W + u0 * U.values + 8 * (size_t)c);
    row += u0 * U.bytes;
    for (size_t i = 0; i < nt; i++, row += rb) {
        __m256 w[8];
        UNROLL for (int g = 0; g < GC; g++) w[g] = _mm256_broadcast_ss(pw + (size_t)g * lw + i);
        UNROLL for (int k = 0; k < NU; k++) {   /* one unit at a time: few live registers */
            __m256 x[4], d = _mm256_setzero_ps();
            U.cvt(U.type, row + (size_t)k * U.bytes, x, &d);
            UNROLL for (int g = 0; g < GC; g++) {
                __m256 wk = U.scaled ? _mm256_mul_ps(w[g], d) : w[g];
                UNROLL for (int c = 0; c < NV; c++)
                    a[g * NA + k * NV + c] = _mm256_fmadd_ps(wk, x[c], a[g * NA + k * NV + c]);
            }
        }
    }
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < NA; c++) _mm256_storeu_ps(acc + (size_t)g * W + u0 * U.values + 8 * (size_t)c, a[g * NA + c]);
}

/* GC = 2 or 4 heads (GC * nv <= 8), register accumulators: per tile of about PF_AHEAD bytes (4..VT_MAX tokens),
 * column groups of 8 / GC vectors over the tile's rows (the first group brings the rows into L1). */
INLINE void vacc_direct(const Unit U, const int GC, float *acc, const float *p, size_t lp, const KRows *v, size_t t0,
                        size_t n)
{
    const size_t W = v->W, rb = v->row_bytes, nu = W / U.values;
    const int NU = 8 / (GC * U.nv);
    float buf[8 * VT_MAX];
    /* the next tile is prefetched whole (in address order) while this one is read column group by column group */
    size_t vt = PF_AHEAD / (rb ? rb : 1);
    vt = vt < 4 ? 4 : vt > VT_MAX ? VT_MAX : vt;
    for (size_t i0 = 0; i0 < n; i0 += vt) {
        size_t nt = n - i0 < vt ? n - i0 : vt, t = t0 + i0, lw;
        const float *pw = tile_weights(GC, buf, &lw, p, lp, v, t, i0, nt);
        const uint8_t *row = v->codes + t * rb;
        prefetch_range(row + (nt * rb > PF_AHEAD ? nt * rb : PF_AHEAD), nt * rb);
        size_t u = 0;
        for (; u + (size_t)NU <= nu; u += (size_t)NU) vacc_cols(U, GC, NU, acc, W, pw, lw, row, rb, nt, u);
        for (; u < nu; u++) vacc_cols(U, GC, 1, acc, W, pw, lw, row, rb, nt, u);   /* NU >= 2: the rest */
        tail_columns(U, GC, acc, pw, lw, v, t, nt);
    }
}

/* One query head: tokens in pairs, in address order; the W accumulators stay in L1 (load, two FMAs, store). */
INLINE void vacc_one(const Unit U, float *restrict acc, const float *p, const KRows *v, size_t t0, size_t n)
{
    const size_t W = v->W, rb = v->row_bytes, nu = W / U.values;
    const int NV = U.nv;
    float buf[VT_MAX];
    for (size_t i0 = 0; i0 < n; i0 += VT_MAX) {
        size_t nt = n - i0 < VT_MAX ? n - i0 : VT_MAX, t = t0 + i0, lw;
        const float *pw = tile_weights(1, buf, &lw, p, 0, v, t, i0, nt);
        const uint8_t *row = v->codes + t * rb;
        size_t i = 0;
        for (; i + 2 <= nt; i += 2, row += 2 * rb) {
            prefetch_range(row + PF_AHEAD, 2 * rb);
            __m256 w0 = _mm256_broadcast_ss(pw + i), w1 = _mm256_broadcast_ss(pw + i + 1);
#pragma GCC unroll 4
            for (size_t u = 0; u < nu; u++) {
                __m256 x0[4], x1[4], d0 = _mm256_setzero_ps(), d1 = d0;
                U.cvt(U.type, row + u * U.bytes, x0, &d0);
                U.cvt(U.type, row + rb + u * U.bytes, x1, &d1);
                __m256 a0 = U.scaled ? _mm256_mul_ps(w0, d0) : w0, a1 = U.scaled ? _mm256_mul_ps(w1, d1) : w1;
                float *ac = acc + u * U.values;
                UNROLL for (int c = 0; c < NV; c++)
                    _mm256_storeu_ps(ac + 8 * c,
                                     _mm256_fmadd_ps(a1, x1[c], _mm256_fmadd_ps(a0, x0[c], _mm256_loadu_ps(ac + 8 * c))));
            }
        }
        for (; i < nt; i++, row += rb) {
            __m256 w0 = _mm256_broadcast_ss(pw + i);
            for (size_t u = 0; u < nu; u++) {
                __m256 x0[4], d0 = _mm256_setzero_ps();
                U.cvt(U.type, row + u * U.bytes, x0, &d0);
                __m256 a0 = U.scaled ? _mm256_mul_ps(w0, d0) : w0;
                float *ac = acc + u * U.values;
                UNROLL for (int c = 0; c < NV; c++)
                    _mm256_storeu_ps(ac + 8 * c, _mm256_fmadd_ps(a0, x0[c], _mm256_loadu_ps(ac + 8 * c)));
            }
        }
        tail_columns(U, 1, acc, pw, lw, v, t, nt);
    }
}

/* GQA: the tile's rows (full units only) converted to float32 in scr (nt rows of ld floats; exact values, block
 * scales applied). */
INLINE void tile_convert(const Unit U, float *scr, size_t ld, const KRows *v, size_t t, size_t nt)
{
    const size_t rb = v->row_bytes, nu = v->W / U.values;
    const uint8_t *row = v->codes + t * rb;
    for (size_t i = 0; i < nt; i++, row += rb) {
        prefetch_range(row + PF_AHEAD, rb);
        float *o = scr + i * ld;
        for (size_t u = 0; u < nu; u++) {
            __m256 x[4], d = _mm256_setzero_ps();
            U.cvt(U.type, row + u * U.bytes, x, &d);
            UNROLL for (int c = 0; c < U.nv; c++)
                _mm256_store_ps(o + u * U.values + 8 * (size_t)c, U.scaled ? _mm256_mul_ps(d, x[c]) : x[c]);
        }
    }
}

/* A format's tile_convert, as a function (one call per tile of the GQA path). */
typedef void (*TileConvertFn)(float *scr, size_t ld, const KRows *v, size_t t, size_t nt);

/* acc[g*W + 8*(v0+c)] += sum_i pw[g*lw + i] * scr[i*ld + 8*(v0+c)], c < NA, g < GC: GC * NA register
 * accumulators over the tile (format-independent). */
INLINE void tile_fma(const int GC, const int NA, float *acc, size_t W, const float *pw, size_t lw, const float *scr,
                     size_t ld, size_t nt, size_t v0)
{
    __m256 a[8];
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < NA; c++) a[g * NA + c] = _mm256_loadu_ps(acc + (size_t)g * W + 8 * (v0 + (size_t)c));
    for (size_t i = 0; i < nt; i++) {
        const float *x = scr + i * ld + 8 * v0;
        UNROLL for (int g = 0; g < GC; g++) {
            __m256 w = _mm256_broadcast_ss(pw + (size_t)g * lw + i);
            UNROLL for (int c = 0; c < NA; c++) a[g * NA + c] = _mm256_fmadd_ps(w, _mm256_load_ps(x + 8 * c), a[g * NA + c]);
        }
    }
    UNROLL for (int g = 0; g < GC; g++)
        UNROLL for (int c = 0; c < NA; c++) _mm256_storeu_ps(acc + (size_t)g * W + 8 * (v0 + (size_t)c), a[g * NA + c]);
}

/* GC >= 2 heads, any format: per tile of up to VT_MAX tokens, convert once into scr (the format's converter),
 * then accumulate column groups in registers; column tails (past the last full unit of `unit` columns) are
 * scalar. */
INLINE void vacc_group(const int GC, TileConvertFn convert, StoreType T, size_t unit, float *acc, const float *p,
                       size_t lp, const KRows *v, size_t t0, size_t n)
{
    const size_t W = v->W, Wp = W / unit * unit;
    size_t vt = SCR / (Wp ? Wp : 1);
    if (vt > VT_MAX) vt = VT_MAX;
    float scr[SCR] __attribute__((aligned(32)));
    float buf[8 * VT_MAX];
    for (size_t i0 = 0; i0 < n; i0 += vt) {
        size_t nt = n - i0 < vt ? n - i0 : vt, t = t0 + i0, lw;
        const float *pw = tile_weights(GC, buf, &lw, p, lp, v, t, i0, nt);
        if (Wp) {
            convert(scr, Wp, v, t, nt);
            size_t nvec = Wp / 8, c = 0;
            for (; c + (size_t)(8 / GC) <= nvec; c += (size_t)(8 / GC)) tile_fma(GC, 8 / GC, acc, W, pw, lw, scr, Wp, nt, c);
            for (; c < nvec; c++) tile_fma(GC, 1, acc, W, pw, lw, scr, Wp, nt, c);
        }
        if (Wp < W)
            for (size_t i = 0; i < nt; i++) {
                const uint8_t *row = v->codes + (t + i) * v->row_bytes;
                for (int g = 0; g < GC; g++) {
                    float w = pw[(size_t)g * lw + i];
                    for (size_t j = Wp; j < W; j++) acc[(size_t)g * W + j] += w * tail_elem(T, row, j);
                }
            }
    }
}

/* vacc_group for GC = 2, 4, 8: one copy per group size, shared by every format of a file (the converter is a
 * call per tile). */
#define VACC_GROUP_GC_(GC)                                                                                       \
    static __attribute__((noinline, unused)) void vacc_group_##GC(TileConvertFn convert, StoreType T, size_t unit, \
                                                                  float *acc, const float *p, size_t lp,         \
                                                                  const KRows *v, size_t t0, size_t n)           \
    {                                                                                                            \
        vacc_group(GC, convert, T, unit, acc, p, lp, v, t0, n);                                                  \
    }
VACC_GROUP_GC_(2)
VACC_GROUP_GC_(4)
VACC_GROUP_GC_(8)

/* The weighted V sum of a unit format (a VaccFn's body; convert: its tile_convert). Per head group: 8 heads
 * through the tile path unless the codes take one byte per value, one vector per unit (int8, e5m2: then groups
 * of 4 in registers, int8 at G = 8 measured 1.15-1.2x faster in L2; int4 the same or slower); 4 or 2 heads in
 * registers when the codes take at most one byte per value (e4m3, e5m2, int8, int4: no scratch round trip), else
 * through the tile path (f32 / f16 / bf16: the column-group reads of
 * wide rows cost bandwidth; 32-value block units); one head in L1 (register accumulators per column group,
 * vacc_direct with GC = 1, measured 1.1-1.2x faster in cache but 0.9x when streaming from memory). Rows wider
 * than an eighth of the tile scratch go head by head. */
INLINE void vacc_all(const Unit U, TileConvertFn convert, float *acc, const float *p, size_t lp, size_t G,
                     const KRows *v, size_t t0, size_t n)
{
    const size_t W = v->W;
    const int direct = U.nv <= 2 && U.bytes <= U.values;   /* register path: codes of <= 1 byte */
    const int tiles = W / U.values * U.values * 8 <= SCR;   /* at least 8 rows of the stored width in the scratch */
    HEAD_GROUPS(G, h, GC == 8 ? tiles && !(direct && U.nv == 1) : direct || tiles,
                if (GC == 1) vacc_one(U, acc + h * W, p + h * lp, v, t0, n);
                else if (GC <= 4 && direct) vacc_direct(U, GC, acc + h * W, p + h * lp, lp, v, t0, n);
                else if (GC == 8) vacc_group_8(convert, U.type, U.values, acc + h * W, p + h * lp, lp, v, t0, n);
                else if (GC == 4) vacc_group_4(convert, U.type, U.values, acc + h * W, p + h * lp, lp, v, t0, n);
                else vacc_group_2(convert, U.type, U.values, acc + h * W, p + h * lp, lp, v, t0, n));
}

#endif
