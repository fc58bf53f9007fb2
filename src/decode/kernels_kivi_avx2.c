/* kernels_kivi_avx2: the KIVI kernels (see kernels_kivi.h) with AVX2 + FMA + F16C intrinsics. This file alone
 * is compiled with -mavx2 -mfma -mf16c (like kernels_avx2.c); decode.c calls it only after cpuid and xgetbv say
 * the CPU and OS have all three. Its scalar twins are in kernels_kivi_ref.c.
 *
 * Codes are read 8 columns at a time in natural order: 4 bits: one 32-bit broadcast load, a variable shift per
 * lane (vpsrlvd) and a mask; 2 bits: the same from 16 bits; 8 bits: a zero extension. Memory is read in address
 * order with a software prefetch PF_AHEAD bytes ahead.
 * Keys: per token group the prepared queries q' = q * s (and c = q . m) are formed once in the scratch; rows are
 * scored GC = 4, 2 or 1 heads at a time (each code vector converted once for the GC heads), 8 / GC rows per
 * tile with their partial-sum vectors reduced together. Values: rows in pairs, each code vector converted once
 * for the GC heads, the W accumulators of each head in L1 (load, two FMAs, store); the weight of a (token,
 * group) is p * s, and the mins' share sum_t p_t m_tk is accumulated per group and added once per call.
 * The summation order depends only on W, g, n and G, never on the thread count.
 */
#include "decode/kernels_kivi.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#define UNROLL _Pragma("GCC unroll 16")
#define INLINE static inline __attribute__((always_inline))

enum { PF_AHEAD = 2048 };

INLINE void prefetch_range(const uint8_t *p, size_t n)
{
#pragma GCC unroll 4
    for (size_t off = 0; off < n; off += 64) _mm_prefetch((const char *)(p + off), _MM_HINT_T0);
}

/* The centre of B-bit codes, (2^B - 1) / 2: values are read as s (n - C) + (m + C s), the group's midpoint, so
 * that the two parts do not cancel in the float32 sums (with n and m, sum_t p_t s n and sum_t p_t m are each far
 * larger than their sum for zero-mean data). n - C is exact in float32. */
#define CENTRE(B) ((float)((1 << (B)) - 1) * 0.5f)

/* Codes 8u .. 8u+7 of a row minus CENTRE(B), as floats (natural order); B = bits. */
INLINE __m256 cvt8(const int B, const uint8_t *row, size_t u)
{
    const uint8_t *p = row + u * (size_t)B;   /* 8 codes take B bytes */
    const __m256 c = _mm256_set1_ps(CENTRE(B));
    if (B == 8)
        return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p))), c);
    uint32_t w;
    if (B == 4) {
        memcpy(&w, p, 4);
    } else {
        uint16_t h;
        memcpy(&h, p, 2);
        w = h;
    }
    const __m256i sh = B == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28) : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m256i x = _mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh);
    return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32((1 << B) - 1))), c);
}

INLINE __m256 h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }

INLINE float hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* out[m] = horizontal sum of v[m], m < 8. */
INLINE void reduce8(const __m256 *v, float *out)
{
    __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
}

/* ---- keys ---------------------------------------------------------------------------------------------------- */

/* One row against GC prepared queries (qs, stride W): out[h] = 8 partial sums, with 4 / GC accumulators per
 * head (independent FMA chains). */
INLINE void key_row(const int B, const int GC, __m256 *out, const float *qs, size_t W, const uint8_t *row)
{
    const int A = GC == 1 ? 4 : GC == 2 ? 2 : 1;
    const size_t nu = W / 8;
    __m256 a[4];
    UNROLL for (int m = 0; m < GC * A; m++) a[m] = _mm256_setzero_ps();
    size_t u = 0;
    for (; u + (size_t)A <= nu; u += (size_t)A) {
        UNROLL for (int k = 0; k < A; k++) {
            __m256 x = cvt8(B, row, u + (size_t)k);
            UNROLL for (int h = 0; h < GC; h++)
                a[h * A + k] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + (size_t)h * W + 8 * (u + (size_t)k)), x, a[h * A + k]);
        }
    }
    for (; u < nu; u++) {
        __m256 x = cvt8(B, row, u);
        UNROLL for (int h = 0; h < GC; h++) a[h * A] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + (size_t)h * W + 8 * u), x, a[h * A]);
    }
    UNROLL for (int h = 0; h < GC; h++) {
        __m256 *ah = a + h * A;
        if (A == 4) {
            ah[0] = _mm256_add_ps(ah[0], ah[2]);
            ah[1] = _mm256_add_ps(ah[1], ah[3]);
        }
        if (A >= 2) ah[0] = _mm256_add_ps(ah[0], ah[1]);
        out[h] = ah[0];
    }
}

/* Rows i .. i+n (all in one token group) for GC heads: qs, c are the group's prepared queries and offsets. */
INLINE void key_rows(const int B, const int GC, float *s, size_t ls, const float *qs, const float *c, const KiviRows *k,
                     size_t t0, size_t i, size_t n)
{
    const size_t R = (size_t)(8 / GC), W = k->W, rb = k->row_bytes;
    for (size_t e = i + n; i < e; i += R) {
        size_t nr = e - i < R ? e - i : R;
        const uint8_t *base = k->codes + (t0 + i) * rb;
        prefetch_range(base + PF_AHEAD, nr * rb);
        __m256 rs[8];
        for (size_t r = 0; r < nr; r++) key_row(B, GC, rs + r * (size_t)GC, qs, W, base + r * rb);
        for (size_t m = nr * (size_t)GC; m < 8; m++) rs[m] = _mm256_setzero_ps();
        float out[8];
        reduce8(rs, out);
        for (size_t r = 0; r < nr; r++)
            UNROLL for (int h = 0; h < GC; h++) s[(size_t)h * ls + i + r] = out[r * (size_t)GC + (size_t)h] + c[h];
    }
}

INLINE void kivi_scores_b(const int B, float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0,
                          size_t n, float *scr)
{
    const size_t W = k->W, g = k->g, nu = W / 8;
    const __m256 half = _mm256_set1_ps(CENTRE(B));
    float *qs = scr, *c = scr + G * W;
    for (size_t i = 0; i < n;) {
        size_t t = t0 + i, grp = t / g, end = (grp + 1) * g - t0;
        if (end > n) end = n;
        const uint16_t *sc = k->scale + grp * k->per, *mn = k->min + grp * k->per;
        for (size_t h = 0; h < G; h++) {   /* q' = q * s, c = q . (m + C s) (centred codes) */
            const float *qh = q + h * W;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0;
            size_t u = 0;
            for (; u + 2 <= nu; u += 2) {
                __m256 x0 = _mm256_loadu_ps(qh + 8 * u), x1 = _mm256_loadu_ps(qh + 8 * u + 8);
                _mm256_storeu_ps(qs + h * W + 8 * u, _mm256_mul_ps(x0, h8(sc + 8 * u)));
                _mm256_storeu_ps(qs + h * W + 8 * u + 8, _mm256_mul_ps(x1, h8(sc + 8 * u + 8)));
                a0 = _mm256_fmadd_ps(x0, _mm256_fmadd_ps(half, h8(sc + 8 * u), h8(mn + 8 * u)), a0);
                a1 = _mm256_fmadd_ps(x1, _mm256_fmadd_ps(half, h8(sc + 8 * u + 8), h8(mn + 8 * u + 8)), a1);
            }
            for (; u < nu; u++) {
                __m256 x0 = _mm256_loadu_ps(qh + 8 * u);
                _mm256_storeu_ps(qs + h * W + 8 * u, _mm256_mul_ps(x0, h8(sc + 8 * u)));
                a0 = _mm256_fmadd_ps(x0, _mm256_fmadd_ps(half, h8(sc + 8 * u), h8(mn + 8 * u)), a0);
            }
            c[h] = hsum(_mm256_add_ps(a0, a1));
        }
        for (size_t h = 0; h < G;) {   /* heads in groups of 4, 2, 1 */
            size_t left = G - h;
            if (left >= 4) {
                key_rows(B, 4, s + h * ls, ls, qs + h * W, c + h, k, t0, i, end - i);
                h += 4;
            } else if (left >= 2) {
                key_rows(B, 2, s + h * ls, ls, qs + h * W, c + h, k, t0, i, end - i);
                h += 2;
            } else {
                key_rows(B, 1, s + h * ls, ls, qs + h * W, c + h, k, t0, i, end - i);
                h += 1;
            }
        }
        i = end;
    }
}

static void kivi_scores_avx2(float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0, size_t n,
                             float *scr)
{
    if (k->bits == 4) kivi_scores_b(4, s, ls, q, G, k, t0, n, scr);
    else if (k->bits == 2) kivi_scores_b(2, s, ls, q, G, k, t0, n, scr);
    else kivi_scores_b(8, s, ls, q, G, k, t0, n, scr);
}

/* ---- values -------------------------------------------------------------------------------------------------- */

/* GC heads (acc, p at the first of them); msum (GC, per) scratch. R = 2 or 1 rows (i, i+1). */
INLINE void val_rows(const int B, const int GC, const int R, float *acc, const float *p, size_t lp, const KiviRows *v,
                     size_t t0, size_t i, float *msum)
{
    const size_t W = v->W, g = v->g, per = v->per, rb = v->row_bytes, t = t0 + i;
    const uint8_t *row = v->codes + t * rb;
    prefetch_range(row + PF_AHEAD, (size_t)R * rb);
    const uint16_t *sc = v->scale + t * per, *mn = v->min + t * per;
    for (size_t k = 0, j0 = 0; k < per; k++, j0 += g) {
        size_t u1 = (j0 + g < W ? j0 + g : W) / 8;
        __m256 w[2][4];
        UNROLL for (int r = 0; r < R; r++) {
            float s = _cvtsh_ss(sc[(size_t)r * per + k]);
            float m = _cvtsh_ss(mn[(size_t)r * per + k]) + CENTRE(B) * s;   /* the midpoint */
            UNROLL for (int h = 0; h < GC; h++) {
                float ph = p[(size_t)h * lp + i + (size_t)r];
                w[r][h] = _mm256_set1_ps(ph * s);
                msum[(size_t)h * per + k] += ph * m;
            }
        }
        for (size_t u = j0 / 8; u < u1; u++) {
            __m256 x0 = cvt8(B, row, u), x1 = R == 2 ? cvt8(B, row + rb, u) : x0;
            UNROLL for (int h = 0; h < GC; h++) {
                float *a = acc + (size_t)h * W + 8 * u;
                __m256 y = _mm256_fmadd_ps(w[0][h], x0, _mm256_loadu_ps(a));
                if (R == 2) y = _mm256_fmadd_ps(w[1][h], x1, y);
                _mm256_storeu_ps(a, y);
            }
        }
    }
}

INLINE void val_heads(const int B, const int GC, float *acc, const float *p, size_t lp, const KiviRows *v, size_t t0,
                      size_t n, float *msum)
{
    const size_t W = v->W, g = v->g, per = v->per;
    memset(msum, 0, (size_t)GC * per * sizeof *msum);
    size_t i = 0;
    for (; i + 2 <= n; i += 2) val_rows(B, GC, 2, acc, p, lp, v, t0, i, msum);
    if (i < n) val_rows(B, GC, 1, acc, p, lp, v, t0, i, msum);
    UNROLL for (int h = 0; h < GC; h++)
        for (size_t k = 0, j0 = 0; k < per; k++, j0 += g) {
            __m256 m = _mm256_set1_ps(msum[(size_t)h * per + k]);
            size_t j1 = j0 + g < W ? j0 + g : W;
            for (size_t j = j0; j < j1; j += 8) {
                float *a = acc + (size_t)h * W + j;
                _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), m));
            }
        }
}

INLINE void kivi_vacc_b(const int B, float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0,
                        size_t n, float *scr)
{
    const size_t W = v->W;
    for (size_t h = 0; h < G;) {
        size_t left = G - h;
        if (left >= 4) {
            val_heads(B, 4, acc + h * W, p + h * lp, lp, v, t0, n, scr);
            h += 4;
        } else if (left >= 2) {
            val_heads(B, 2, acc + h * W, p + h * lp, lp, v, t0, n, scr);
            h += 2;
        } else {
            val_heads(B, 1, acc + h * W, p + h * lp, lp, v, t0, n, scr);
            h += 1;
        }
    }
}

static void kivi_vacc_avx2(float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0, size_t n,
                           float *scr)
{
    if (v->bits == 4) kivi_vacc_b(4, acc, p, lp, G, v, t0, n, scr);
    else if (v->bits == 2) kivi_vacc_b(2, acc, p, lp, G, v, t0, n, scr);
    else kivi_vacc_b(8, acc, p, lp, G, v, t0, n, scr);
}

static const KiviKernels kivi_avx2 = {"avx2", kivi_scores_avx2, kivi_vacc_avx2};

const KiviKernels *decode_kivi_avx2(void) { return &kivi_avx2; }

#else
/* Built without -mavx2 -mfma -mf16c (a non-x86 target): no AVX2 kernels. */
const KiviKernels *decode_kivi_avx2(void) { return NULL; }
#endif
