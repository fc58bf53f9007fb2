/* kernels_kivi_avx2: the grouped intN (KIVI) kernels (see kernels_kivi.h), the STORE_INTN slot of the AVX2
 * KernelSet, with AVX2 + FMA + F16C intrinsics. This file alone (with kernels_avx2.c and kernels_ggml_avx2.c) is
 * compiled with -mavx2 -mfma -mf16c; decode.c calls it only after cpuid and xgetbv say the CPU and OS have all
 * three. Its scalar twins are kernels_ref.c's intN part; the helpers and the head-group driver are
 * avx2_common.h's.
 *
 * Codes are read in units of 8 bytes (pmovzxbd, then masks and shifts: 16 columns of 4 bits, 32 of 2 bits, 8 of
 * 8 bits) in kernel order (U_OF); columns after the last full unit 8 at a time in natural order (a 32- or 16-bit
 * broadcast and vpsrlvd). Memory is read in address order with a software prefetch PF_AHEAD bytes ahead.
 * Keys: per token group the prepared queries q' = q * s (permuted to kernel order) and c = q . m are formed
 * once in the scratch; rows are scored GC = 4, 2 or 1 heads at a time, in tiles of 8 / GC rows (2 bits: 4 / GC)
 * read unit by unit, so each query vector is loaded once per tile and each code vector converted once for the
 * GC heads; the tile's partial-sum vectors are reduced together.
 * Values: tiles of 8 tokens; per unit and head the accumulator vectors stay in registers over the tile (two
 * chains for even and odd rows when registers allow) and start at -C sum_r w_r (w = p * s, the tile's
 * centring); the midpoints' share sum_t p_t (m + C s) is kept per group and added once per call, with the
 * kernel-order accumulators taken back to natural order. The weights of a tile are computed 8 at a time when
 * the groups per row divide 8 (permutevar of the 8 weights p), else in scalar code.
 * Keys per token (groups of g channels along the row): as the key tiles above, each code vector first made its
 * values by one FMA with the row's group scale and min (converted to float for 32 rows at a time).
 * Values per channel (groups of g tokens along the column): the value tile with one weight p per row (centred,
 * per token group), folded per token group with the group's scales and midpoints (kernel order).
 * Parameters are FP16 or FP32; a symmetric format's min is -2^(b-1) s.
 * The summation order depends only on W, g, n and G, never on the thread count.
 */
#include "decode/kernels_kivi.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "decode/avx2_common.h"

/* The centre of B-bit codes, (2^B - 1) / 2: values are accumulated as s (n - C) + (m + C s), the group's
 * midpoint, so that the two parts do not cancel in the float32 sums over tokens (with n and m, sum_t p_t s n and
 * sum_t p_t m are each far larger than their sum for zero-mean data). n - C is exact in float32. */
#define CENTRE(B) ((float)((1 << (B)) - 1) * 0.5f)

/* A unit: 8 bytes of codes, U(B) = 64 / B columns, NV(B) = 8 / B vectors of 8, in kernel order: 4 bits:
 * positions 0..7 the low nibbles (even columns), 8..15 the high ones (odd columns); 2 bits: position 8k + i
 * is column 4i + k; 8 bits: natural. Columns after the last full unit are read 8 at a time in natural order
 * (cvt8). */
#define U_OF(B) ((size_t)(64 / (B)))
#define NV_OF(B) (8 / (B))

/* Kernel position p of a row of W columns -> natural column. */
static size_t kpos_col(int B, size_t W, size_t p)
{
    size_t U = U_OF(B), base = p / U * U, o = p % U;
    if (B == 8 || base + U > W) return p;
    if (B == 4) return base + (o < 8 ? 2 * o : 2 * (o - 8) + 1);
    return base + 4 * (o % 8) + o / 8;
}

INLINE __m256 centred(const int CEN, __m256i n, __m256 cen)
{
    return CEN ? _mm256_sub_ps(_mm256_cvtepi32_ps(n), cen) : _mm256_cvtepi32_ps(n);
}

/* The unit at p as NV(B) vectors (codes as floats; CEN: minus cen). */
INLINE void cvt_unit(const int B, const int CEN, const uint8_t *p, __m256 *x, __m256 cen)
{
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    if (B == 8) {
        x[0] = centred(CEN, b, cen);
    } else if (B == 4) {
        x[0] = centred(CEN, _mm256_and_si256(b, _mm256_set1_epi32(15)), cen);
        x[1] = centred(CEN, _mm256_srli_epi32(b, 4), cen);
    } else {
        const __m256i m = _mm256_set1_epi32(3);
        x[0] = centred(CEN, _mm256_and_si256(b, m), cen);
        x[1] = centred(CEN, _mm256_and_si256(_mm256_srli_epi32(b, 2), m), cen);
        x[2] = centred(CEN, _mm256_and_si256(_mm256_srli_epi32(b, 4), m), cen);
        x[3] = centred(CEN, _mm256_srli_epi32(b, 6), cen);
    }
}

/* Codes 8 columns from column j (natural order) as floats (CEN: minus cen). */
INLINE __m256 cvt8(const int B, const int CEN, const uint8_t *row, size_t j, __m256 cen)
{
    const uint8_t *p = row + j * (size_t)B / 8;   /* 8 codes take B bytes */
    if (B == 8) return centred(CEN, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)), cen);
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
    return centred(CEN, _mm256_and_si256(x, _mm256_set1_epi32((1 << B) - 1)), cen);
}

/* Parameters (store.h's group order) as floats: FP16 or FP32, the min of a symmetric format -2^(b-1) s. */
INLINE __m256 par8(const KRows *r, const void *base, size_t i)
{
    return r->f32 ? _mm256_loadu_ps((const float *)base + i) : h8((const uint16_t *)base + i);
}
INLINE __m256 scale8(const KRows *r, size_t i) { return par8(r, r->scale, i); }
INLINE __m256 min8(const KRows *r, size_t i)
{
    return r->min ? par8(r, r->min, i) : _mm256_mul_ps(_mm256_set1_ps(-(float)(1 << (r->bits - 1))), scale8(r, i));
}
INLINE float scale1(const KRows *r, size_t i)
{
    return r->f32 ? ((const float *)r->scale)[i] : _cvtsh_ss(((const uint16_t *)r->scale)[i]);
}
INLINE float min1(const KRows *r, size_t i)
{
    if (!r->min) return -(float)(1 << (r->bits - 1)) * scale1(r, i);
    return r->f32 ? ((const float *)r->min)[i] : _cvtsh_ss(((const uint16_t *)r->min)[i]);
}
/* The same with P = 1 known at compile time to mean FP16 scales and mins (KIVI's own form: no branches in the
 * hot loops); P = 0 reads the KRows flags. */
#define SCALE8(P, r, i) ((P) ? h8((const uint16_t *)(r)->scale + (i)) : scale8(r, i))
#define MIN8(P, r, i) ((P) ? h8((const uint16_t *)(r)->min + (i)) : min8(r, i))
#define SCALE1(P, r, i) ((P) ? _cvtsh_ss(((const uint16_t *)(r)->scale)[i]) : scale1(r, i))
#define MIN1(P, r, i) ((P) ? _cvtsh_ss(((const uint16_t *)(r)->min)[i]) : min1(r, i))
/* Bytes of one parameter. */
INLINE size_t par_bytes(const KRows *r) { return r->f32 ? 4 : 2; }

/* ---- keys ---------------------------------------------------------------------------------------------------- */

/* Rows per key tile for GC heads: 8 / GC, 4 / GC for 2 bits (its 4 vectors per unit and their 4 query vectors
 * would not fit the 16 registers next to 8 accumulators). */
#define KR_OF(B, GC) (((B) == 2 ? 4 : 8) / (GC))
/* The value kernels' head groups: GC, but 2 for a group of 4 with 2 bits (a size HEAD_GROUPS never runs there:
 * 4 heads x 4 vectors per unit would not fit the 8 accumulators; this keeps it from being compiled at all). */
#define GC_OF(B, GC) ((B) == 2 && (GC) == 4 ? 2 : (GC))

/* R consecutive rows (R * GC <= 8) for GC heads, rows interleaved unit by unit (each query vector loaded once
 * for the R rows; 8 / (R * GC) independent accumulators per row and head): out[r*GC + h] = q'_h . n_{row r},
 * uncentred codes. */
INLINE void key_tile(const int B, const int GC, const int R, float *out, const float *qs, size_t W,
                     const uint8_t *base, size_t rb)
{
    const size_t U = U_OF(B), nfu = W / U;
    const int NV = NV_OF(B), A = 8 / (R * GC) >= 2 ? 2 : 1;
    const __m256 zero = _mm256_setzero_ps();
    __m256 a[8];
    UNROLL for (int m = 0; m < 8; m++) a[m] = zero;
    for (size_t u = 0; u < nfu; u++) {
        const float *qu = qs + u * U;
        UNROLL for (int r = 0; r < R; r++) {
            __m256 x[4];
            cvt_unit(B, 0, base + (size_t)r * rb + 8 * u, x, zero);
            UNROLL for (int h = 0; h < GC; h++)
                UNROLL for (int c = 0; c < NV; c++) {
                    const int ai = (r * GC + h) * A + c % A;
                    a[ai] = _mm256_fmadd_ps(x[c], _mm256_loadu_ps(qu + (size_t)h * W + 8 * (size_t)c), a[ai]);
                }
        }
    }
    for (size_t j = nfu * U; j < W; j += 8)
        UNROLL for (int r = 0; r < R; r++) {
            __m256 x = cvt8(B, 0, base + (size_t)r * rb, j, zero);
            UNROLL for (int h = 0; h < GC; h++)
                a[(r * GC + h) * A] = _mm256_fmadd_ps(x, _mm256_loadu_ps(qs + (size_t)h * W + j), a[(r * GC + h) * A]);
        }
    if (A == 2)
        UNROLL for (int m = 0; m < R * GC; m++) a[m] = _mm256_add_ps(a[2 * m], a[2 * m + 1]);
    UNROLL for (int m = R * GC; m < 8; m++) a[m] = zero;
    reduce8(a, out);
}

/* Rows i .. i+n (all in one token group) for GC heads: qs (kernel order), c are the group's prepared queries
 * and offsets. */
INLINE void key_rows(const int B, const int GC, float *s, size_t ls, const float *qs, const float *c, const KRows *k,
                     size_t t0, size_t i, size_t n)
{
    const int R = KR_OF(B, GC);
    const size_t W = k->W, rb = k->row_bytes;
    float out[8];
    size_t e = i + n;
    for (; i + (size_t)R <= e; i += (size_t)R) {
        const uint8_t *base = k->codes + (t0 + i) * rb;
        prefetch_range(base + PF_AHEAD, (size_t)R * rb);
        key_tile(B, GC, R, out, qs, W, base, rb);
        UNROLL for (int r = 0; r < R; r++)
            UNROLL for (int h = 0; h < GC; h++) s[(size_t)h * ls + i + (size_t)r] = out[r * GC + h] + c[h];
    }
    for (; i < e; i++) {
        key_tile(B, GC, 1, out, qs, W, k->codes + (t0 + i) * rb, rb);
        UNROLL for (int h = 0; h < GC; h++) s[(size_t)h * ls + i] = out[h] + c[h];
    }
}

/* o = x (W floats, natural order) in kernel order (see U_OF). */
INLINE void to_kernel_order(const int B, float *o, const float *x, size_t W)
{
    const size_t U = U_OF(B), nfu = B == 8 ? 0 : W / U;
    for (size_t u = 0; u < nfu; u++) {
        const float *xu = x + u * U;
        float *ou = o + u * U;
        if (B == 4) {   /* even columns, then odd ones */
            __m256 v0 = _mm256_loadu_ps(xu), v1 = _mm256_loadu_ps(xu + 8);
            __m256 e = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)), d = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
            _mm256_storeu_ps(ou, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
            _mm256_storeu_ps(ou + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(d), 0xD8)));
        } else {   /* position 8k + i = column 4i + k: pairs (k, k+4) of each vector, then a 4x4 transpose of pairs */
            const __m256i pi = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            __m256d v[4];
            UNROLL for (int i = 0; i < 4; i++)
                v[i] = _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_loadu_ps(xu + 8 * i), pi));
            __m256d t0 = _mm256_unpacklo_pd(v[0], v[1]), t1 = _mm256_unpackhi_pd(v[0], v[1]);
            __m256d t2 = _mm256_unpacklo_pd(v[2], v[3]), t3 = _mm256_unpackhi_pd(v[2], v[3]);
            _mm256_storeu_ps(ou, _mm256_castpd_ps(_mm256_permute2f128_pd(t0, t2, 0x20)));
            _mm256_storeu_ps(ou + 8, _mm256_castpd_ps(_mm256_permute2f128_pd(t1, t3, 0x20)));
            _mm256_storeu_ps(ou + 16, _mm256_castpd_ps(_mm256_permute2f128_pd(t0, t2, 0x31)));
            _mm256_storeu_ps(ou + 24, _mm256_castpd_ps(_mm256_permute2f128_pd(t1, t3, 0x31)));
        }
    }
    memcpy(o + nfu * U, x + nfu * U, (W - nfu * U) * sizeof *o);
}

INLINE void kivi_scores_b(const int B, const int P, float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0,
                          size_t n, float *scr)
{
    const size_t W = k->W, g = k->g, nu = W / 8;
    float *qs = scr, *c = scr + G * W, *tmp = c + G;   /* q' (G, W) kernel order, c (G), q' natural (W) */
    for (size_t i = 0; i < n;) {
        size_t t = t0 + i, grp = t / g, end = (grp + 1) * g - t0;
        if (end > n) end = n;
        const size_t p0 = grp * k->per, pb = par_bytes(k);
        prefetch_range((const uint8_t *)k->scale + (p0 + 2 * k->per) * pb, pb * W);   /* the group after next */
        if (k->min) prefetch_range((const uint8_t *)k->min + (p0 + 2 * k->per) * pb, pb * W);
        for (size_t h = 0; h < G; h++) {   /* q' = q * s, c = q . m */
            const float *qh = q + h * W;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0;
            size_t u = 0;
            for (; u + 2 <= nu; u += 2) {
                __m256 x0 = _mm256_loadu_ps(qh + 8 * u), x1 = _mm256_loadu_ps(qh + 8 * u + 8);
                _mm256_storeu_ps(tmp + 8 * u, _mm256_mul_ps(x0, SCALE8(P, k, p0 + 8 * u)));
                _mm256_storeu_ps(tmp + 8 * u + 8, _mm256_mul_ps(x1, SCALE8(P, k, p0 + 8 * u + 8)));
                a0 = _mm256_fmadd_ps(x0, MIN8(P, k, p0 + 8 * u), a0);
                a1 = _mm256_fmadd_ps(x1, MIN8(P, k, p0 + 8 * u + 8), a1);
            }
            for (; u < nu; u++) {
                __m256 x0 = _mm256_loadu_ps(qh + 8 * u);
                _mm256_storeu_ps(tmp + 8 * u, _mm256_mul_ps(x0, SCALE8(P, k, p0 + 8 * u)));
                a0 = _mm256_fmadd_ps(x0, MIN8(P, k, p0 + 8 * u), a0);
            }
            c[h] = hsum(_mm256_add_ps(a0, a1));
            to_kernel_order(B, qs + h * W, tmp, W);
        }
        HEAD_GROUPS(G, h, GC <= 4, key_rows(B, GC, s + h * ls, ls, qs + h * W, c + h, k, t0, i, end - i));
        i = end;
    }
}

static void scores_token(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n,
                         float *scr);

/* One function per bit width and parameter form (each its own code, not one large function). */
#define KSCORES(B, P)                                                                                               \
    static __attribute__((noinline)) void kscores_##B##_##P(float *s, size_t ls, const float *q, size_t G,            \
                                                            const KRows *k, size_t t0, size_t n, float *scr)      \
    {                                                                                                               \
        kivi_scores_b(B, P, s, ls, q, G, k, t0, n, scr);                                                            \
    }
KSCORES(2, 0)
KSCORES(4, 0)
KSCORES(8, 0)
KSCORES(2, 1)
KSCORES(4, 1)
KSCORES(8, 1)

void decode_kivi_scores_avx2(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n,
                             float *scr)
{
    if (k->axis == STORE_AXIS_TOKEN) {
        scores_token(s, ls, q, G, k, t0, n, scr);
        return;
    }
    static const ScoresFn fn[2][3] = {{kscores_2_0, kscores_4_0, kscores_8_0}, {kscores_2_1, kscores_4_1, kscores_8_1}};
    fn[!k->f32 && k->min][k->bits == 2 ? 0 : k->bits == 4 ? 1 : 2](s, ls, q, G, k, t0, n, scr);
}

/* ---- values -------------------------------------------------------------------------------------------------- */

enum { VR = 8 };   /* rows per value tile */

/* Rows i .. i+R (R = VR or 1) for GC heads into the kernel-order accumulators ak (GC, W). Per unit and head the
 * NV accumulator vectors get one tile sum each: t = -C sum_r w_r + sum_r w_r n_r (uncentred codes; the tile's
 * centring is subtracted once, so t stays small and nothing cancels across tiles), then ak += t.
 * wt[(h*VR + r)*per + k] = p * s of row r, head h, group k; wc[h*per + k] = C sum_r wt. KO: kernel-order units
 * (each inside one group); else 8 natural columns at a time. */
INLINE void val_tile(const int B, const int GC, const int KO, const int R, float *ak, const float *wt, const float *wc,
                     size_t W, size_t g, size_t per, const uint8_t *base, size_t rb)
{
    const size_t U = KO ? U_OF(B) : 8, nfu = KO ? W / U : 0;
    const int NV = NV_OF(B), A = GC * NV <= 4 && R > 1 ? 2 : 1;   /* A: chains per vector (even / odd rows) */
    const __m256 zero = _mm256_setzero_ps();
    size_t k = 0, kend = g;   /* the group of the current columns, and where it ends */
    for (size_t u = 0; u < nfu; u++) {
        while (u * U >= kend) k++, kend += g;
        __m256 a[8];
        UNROLL for (int h = 0; h < GC; h++) {
            __m256 c0 = _mm256_sub_ps(zero, _mm256_broadcast_ss(wc + (size_t)h * per + k));
            UNROLL for (int c = 0; c < NV; c++) {
                a[(h * NV + c) * A] = c0;
                if (A == 2) a[(h * NV + c) * A + 1] = zero;
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            __m256 x[4];
            cvt_unit(B, 0, base + (size_t)r * rb + 8 * u, x, zero);
            UNROLL for (int h = 0; h < GC; h++) {
                __m256 w = _mm256_broadcast_ss(wt + ((size_t)h * VR + (size_t)r) * per + k);
                UNROLL for (int c = 0; c < NV; c++) {
                    const int ai = (h * NV + c) * A + r % A;
                    a[ai] = _mm256_fmadd_ps(w, x[c], a[ai]);
                }
            }
        }
        UNROLL for (int h = 0; h < GC; h++)
            UNROLL for (int c = 0; c < NV; c++) {
                float *o = ak + (size_t)h * W + u * U + 8 * (size_t)c;
                __m256 t = A == 2 ? _mm256_add_ps(a[(h * NV + c) * A], a[(h * NV + c) * A + 1]) : a[h * NV + c];
                _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), t));
            }
    }
    for (size_t j = nfu * U; j < W; j += 8) {
        while (j >= kend) k++, kend += g;
        __m256 a[4];
        UNROLL for (int h = 0; h < GC; h++) a[h] = _mm256_sub_ps(zero, _mm256_broadcast_ss(wc + (size_t)h * per + k));
        UNROLL for (int r = 0; r < R; r++) {
            __m256 x = cvt8(B, 0, base + (size_t)r * rb, j, zero);
            UNROLL for (int h = 0; h < GC; h++)
                a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(wt + ((size_t)h * VR + (size_t)r) * per + k), x, a[h]);
        }
        UNROLL for (int h = 0; h < GC; h++) {
            float *o = ak + (size_t)h * W + j;
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), a[h]));
        }
    }
}

/* The weights of rows i .. i+nr (nr <= VR) for GC heads, scalar: wt, wc (see val_tile) and msum[h*per + k] +=
 * sum_r p * (m + C s), the midpoints' share. */
INLINE void val_weights_scalar(const int B, const int P, const int GC, float *wt, float *wc, float *msum, const float *p, size_t lp,
                               const KRows *v, size_t t, size_t i, size_t nr)
{
    const size_t per = v->per;
    const float cen = CENTRE(B);
    for (size_t h = 0; h < (size_t)GC; h++)
        for (size_t k = 0; k < per; k++) {
            float ws = 0.0f;
            for (size_t r = 0; r < nr; r++) {
                float sc = SCALE1(P, v, (t + r) * per + k), mid = MIN1(P, v, (t + r) * per + k) + cen * sc;
                float ph = p[h * lp + i + r], w = ph * sc;
                wt[(h * VR + r) * per + k] = w;
                ws += w;
                msum[h * per + k] += ph * mid;
            }
            wc[h * per + k] = cen * ws;
        }
}

/* The same for a full tile of VR rows when per divides 8: the tile's per * VR FP16 scales and mins are
 * contiguous; lane e of a vector is row e / per, group e % per (pidx: e / per, precomputed). msv[h] collects
 * p * mid per lane (folded by group at the end). */
INLINE void val_weights_vec(const int B, const int P, const int GC, float *wt, float *wc, __m256 *msv, const float *p, size_t lp,
                            const KRows *v, size_t t, size_t i, const int32_t *pidx)
{
    const size_t per = v->per, ne = VR * per;
    const __m256 cen = _mm256_set1_ps(CENTRE(B));
    UNROLL for (int h = 0; h < GC; h++) {
        __m256 p8 = _mm256_loadu_ps(p + (size_t)h * lp + i), ws = _mm256_setzero_ps();
        for (size_t e = 0; e < ne; e += 8) {
            __m256 sv = SCALE8(P, v, t * per + e), mid = _mm256_fmadd_ps(cen, sv, MIN8(P, v, t * per + e));
            __m256 pp = _mm256_permutevar8x32_ps(p8, _mm256_loadu_si256((const __m256i *)(const void *)(pidx + e)));
            __m256 w = _mm256_mul_ps(pp, sv);
            _mm256_storeu_ps(wt + (size_t)h * ne + e, w);
            ws = _mm256_add_ps(ws, w);
            msv[h] = _mm256_fmadd_ps(pp, mid, msv[h]);
        }
        float f[8];
        _mm256_storeu_ps(f, ws);
        for (size_t k = 0; k < per; k++) {
            float a = 0.0f;
            for (size_t l = k; l < 8; l += per) a += f[l];
            wc[(size_t)h * per + k] = CENTRE(B) * a;
        }
    }
}

/* GC heads (acc, p at the first of them). Scratch: ak (GC, W) kernel-order accumulators, msum (GC, per), wc
 * (GC, per), wt (GC, VR, per), pidx (8 per). */
INLINE void val_heads(const int B, const int P, const int GC, const int KO, float *acc, const float *p, size_t lp, const KRows *v,
                      size_t t0, size_t n, float *scr)
{
    const size_t W = v->W, g = v->g, per = v->per, rb = v->row_bytes;
    float *ak = scr, *msum = ak + (size_t)GC * W, *wc = msum + (size_t)GC * per, *wt = wc + (size_t)GC * per;
    int32_t *pidx = (int32_t *)(void *)(wt + (size_t)GC * VR * per);
    memset(ak, 0, ((size_t)GC * W + (size_t)GC * per) * sizeof *ak);
    const int vec = 8 % per == 0;
    __m256 msv[4];
    UNROLL for (int h = 0; h < GC; h++) msv[h] = _mm256_setzero_ps();
    if (vec)
        for (size_t e = 0; e < VR * per; e++) pidx[e] = (int32_t)(e / per);
    size_t i = 0;
    for (; i + VR <= n; i += VR) {
        size_t t = t0 + i;
        const uint8_t *base = v->codes + t * rb;
        prefetch_range(base + PF_AHEAD, VR * rb);
        _mm_prefetch((const char *)v->scale + (t + 64) * per * par_bytes(v), _MM_HINT_T0);   /* the parameter streams */
        if (v->min) _mm_prefetch((const char *)v->min + (t + 64) * per * par_bytes(v), _MM_HINT_T0);
        if (vec) val_weights_vec(B, P, GC, wt, wc, msv, p, lp, v, t, i, pidx);
        else val_weights_scalar(B, P, GC, wt, wc, msum, p, lp, v, t, i, VR);
        val_tile(B, GC, KO, VR, ak, wt, wc, W, g, per, base, rb);
    }
    for (; i < n; i++) {
        val_weights_scalar(B, P, GC, wt, wc, msum, p, lp, v, t0 + i, i, 1);
        val_tile(B, GC, KO, 1, ak, wt, wc, W, g, per, v->codes + (t0 + i) * rb, rb);
    }
    UNROLL for (int h = 0; h < GC; h++) {   /* back to natural order, plus the midpoints' share */
        float *a = acc + (size_t)h * W, f[8];
        float *mh = msum + (size_t)h * per;
        const float *kh = ak + (size_t)h * W;
        _mm256_storeu_ps(f, msv[h]);
        if (vec)
            for (size_t l = 0; l < 8; l++) mh[l % per] += f[l];
        for (size_t q = 0; q < W; q++) {
            size_t j = KO ? kpos_col(B, W, q) : q;
            a[j] += kh[q] + mh[j / g];
        }
    }
}

INLINE void kivi_vacc_b(const int B, const int P, const int KO, float *acc, const float *p, size_t lp, size_t G, const KRows *v,
                        size_t t0, size_t n, float *scr)
{
    const size_t W = v->W;
    /* heads in groups of 4 (not 2 bits: GC * NV <= 8 accumulators), 2, 1 (GC_OF keeps GC = 4 with 2 bits from
     * being compiled at all) */
    HEAD_GROUPS(G, h, GC <= 4 && (GC < 4 || B != 2), val_heads(B, P, GC_OF(B, GC), KO, acc + h * W, p + h * lp, lp, v, t0, n, scr));
}

static void vacc_channel(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                         float *scr);

#define KVACC(B, P, KO)                                                                                             \
    static __attribute__((noinline)) void kvacc_##B##_##P##_##KO(float *acc, const float *p, size_t lp, size_t G,     \
                                                                 const KRows *v, size_t t0, size_t n, float *scr) \
    {                                                                                                               \
        kivi_vacc_b(B, P, KO, acc, p, lp, G, v, t0, n, scr);                                                        \
    }
KVACC(2, 0, 0)
KVACC(4, 0, 0)
KVACC(2, 0, 1)
KVACC(4, 0, 1)
KVACC(8, 0, 1)
KVACC(2, 1, 0)
KVACC(4, 1, 0)
KVACC(2, 1, 1)
KVACC(4, 1, 1)
KVACC(8, 1, 1)

void decode_kivi_vacc_avx2(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                           float *scr)
{
    if (v->axis == STORE_AXIS_CHANNEL) {
        vacc_channel(acc, p, lp, G, v, t0, n, scr);
        return;
    }
    /* kernel-order units need every unit inside one group */
    int ko = v->g % U_OF(v->bits) == 0 || v->g == v->W;
    static const VaccFn fn[2][2][3] = {
        {{kvacc_2_0_0, kvacc_4_0_0, kvacc_8_0_1}, {kvacc_2_0_1, kvacc_4_0_1, kvacc_8_0_1}},
        {{kvacc_2_1_0, kvacc_4_1_0, kvacc_8_1_1}, {kvacc_2_1_1, kvacc_4_1_1, kvacc_8_1_1}}};
    fn[!v->f32 && v->min][ko][v->bits == 2 ? 0 : v->bits == 4 ? 1 : 2](acc, p, lp, G, v, t0, n, scr);
}

/* ---- keys with groups along the row, values with groups along the column (the method library's shapes) ------ */

/* The centre of the codes: symmetric 2^(B-1) (then the midpoint m + C s is 0: value = s (n - C)), asymmetric
 * (2^B - 1) / 2. */
INLINE float centre_of(const KRows *r)
{
    return r->min ? (float)((1 << r->bits) - 1) * 0.5f : (float)(1 << (r->bits - 1));
}

/* dst[c] = parameter i0 + c, c < cnt: the scale (what 0), the min (1) or the midpoint m + C s (2). */
static void params_f32(float *dst, const KRows *r, size_t i0, size_t cnt, int what)
{
    const float cen = centre_of(r);
    size_t c = 0;
    for (; c + 8 <= cnt; c += 8)
        _mm256_storeu_ps(dst + c, what == 0   ? scale8(r, i0 + c)
                                  : what == 1 ? min8(r, i0 + c)
                                              : _mm256_fmadd_ps(_mm256_set1_ps(cen), scale8(r, i0 + c), min8(r, i0 + c)));
    for (; c < cnt; c++)
        dst[c] = what == 0 ? scale1(r, i0 + c) : what == 1 ? min1(r, i0 + c) : min1(r, i0 + c) + cen * scale1(r, i0 + c);
}

/* R rows of keys with g channels per group (axis token) for GC heads (R * GC <= 8), as key_tile but each code
 * vector is first turned into its values n s + m (one FMA with the row's group scale sf[r*per + k] and min
 * mf[r*per + k], shared by the GC heads): out[r*GC + h] = q_h . value(row r). The exact values are summed, so
 * nothing cancels. KO: full units in kernel order (g % U == 0 or one group); else 8 natural columns at a time. */
INLINE void keyt_tile(const int B, const int GC, const int R, const int KO, float *out, const float *qs,
                      const float *sf, const float *mf, size_t W, size_t g, size_t per, const uint8_t *base, size_t rb)
{
    const size_t U = U_OF(B);
    const int NV = NV_OF(B), A = 8 / (R * GC) >= 2 ? 2 : 1;
    const __m256 zero = _mm256_setzero_ps();
    __m256 a[8];
    UNROLL for (int m = 0; m < 8; m++) a[m] = zero;
    for (size_t k = 0, c = 0; k < per; k++) {
        const size_t ce = (k + 1) * g < W ? (k + 1) * g : W;
        if (KO)
            for (; c + U <= ce; c += U)
                UNROLL for (int r = 0; r < R; r++) {
                    const __m256 sv = _mm256_broadcast_ss(sf + (size_t)r * per + k);
                    const __m256 mv = _mm256_broadcast_ss(mf + (size_t)r * per + k);
                    __m256 x[4];
                    cvt_unit(B, 0, base + (size_t)r * rb + c * (size_t)B / 8, x, zero);
                    UNROLL for (int v = 0; v < NV; v++) x[v] = _mm256_fmadd_ps(x[v], sv, mv);
                    UNROLL for (int h = 0; h < GC; h++)
                        UNROLL for (int v = 0; v < NV; v++) {
                            const int ai = (r * GC + h) * A + v % A;
                            a[ai] = _mm256_fmadd_ps(x[v], _mm256_loadu_ps(qs + (size_t)h * W + c + 8 * (size_t)v), a[ai]);
                        }
                }
        for (; c < ce; c += 8)
            UNROLL for (int r = 0; r < R; r++) {
                __m256 x = cvt8(B, 0, base + (size_t)r * rb, c, zero);
                x = _mm256_fmadd_ps(x, _mm256_broadcast_ss(sf + (size_t)r * per + k), _mm256_broadcast_ss(mf + (size_t)r * per + k));
                UNROLL for (int h = 0; h < GC; h++)
                    a[(r * GC + h) * A] = _mm256_fmadd_ps(x, _mm256_loadu_ps(qs + (size_t)h * W + c), a[(r * GC + h) * A]);
            }
    }
    if (A == 2)
        UNROLL for (int m = 0; m < R * GC; m++) a[m] = _mm256_add_ps(a[2 * m], a[2 * m + 1]);
    UNROLL for (int m = R * GC; m < 8; m++) a[m] = zero;
    reduce8(a, out);
}

enum { KT_CHUNK = 32 };   /* rows whose parameters keyt_rows converts at a time */

/* Rows 0 .. n for GC heads: qs the prepared queries (kernel order when KO); sf, mf scratch (KT_CHUNK * per): the
 * scales and mins of a chunk of rows, converted at once. */
INLINE void keyt_rows(const int B, const int GC, const int KO, float *s, size_t ls, const float *qs, float *sf,
                      float *mf, const KRows *k, size_t t0, size_t n)
{
    const int R = KR_OF(B, GC);
    const size_t W = k->W, rb = k->row_bytes, per = k->per;
    float out[8];
    for (size_t c0 = 0; c0 < n; c0 += KT_CHUNK) {
        const size_t ce = n - c0 < KT_CHUNK ? n : c0 + KT_CHUNK;
        params_f32(sf, k, (t0 + c0) * per, (ce - c0) * per, 0);
        params_f32(mf, k, (t0 + c0) * per, (ce - c0) * per, 1);
        size_t i = c0;
        for (; i + (size_t)R <= ce; i += (size_t)R) {
            const uint8_t *base = k->codes + (t0 + i) * rb;
            prefetch_range(base + PF_AHEAD, (size_t)R * rb);
            keyt_tile(B, GC, R, KO, out, qs, sf + (i - c0) * per, mf + (i - c0) * per, W, k->g, per, base, rb);
            UNROLL for (int r = 0; r < R; r++)
                UNROLL for (int h = 0; h < GC; h++) s[(size_t)h * ls + i + (size_t)r] = out[r * GC + h];
        }
        for (; i < ce; i++) {
            keyt_tile(B, GC, 1, KO, out, qs, sf + (i - c0) * per, mf + (i - c0) * per, W, k->g, per,
                      k->codes + (t0 + i) * rb, rb);
            UNROLL for (int h = 0; h < GC; h++) s[(size_t)h * ls + i] = out[h];
        }
    }
}

INLINE void scores_token_b(const int B, const int KO, float *s, size_t ls, const float *q, size_t G, const KRows *k,
                           size_t t0, size_t n, float *scr)
{
    const size_t W = k->W, per = k->per;
    float *qs = scr, *sf = qs + G * W, *mf = sf + KT_CHUNK * per;
    for (size_t h = 0; h < G; h++) {
        if (KO) to_kernel_order(B, qs + h * W, q + h * W, W);
        else memcpy(qs + h * W, q + h * W, W * sizeof *qs);
    }
    HEAD_GROUPS(G, h, GC <= 4, keyt_rows(B, GC, KO, s + h * ls, ls, qs + h * W, sf, mf, k, t0, n));
}

/* Values with g tokens per group (axis channel), GC heads: per token group the centred sums y_j = sum_t p_t
 * (n_tj - C) (val_tile with one weight per row) in ak, then ao += s_G y + (m_G + C s_G) sum_t p_t in kernel order;
 * ao is taken back to natural order at the end. Scratch: ao, ak (GC, W), sk, mk, tmp (W), wt (GC, VR), wc, P (GC). */
INLINE void valc_heads(const int B, const int GC, float *acc, const float *p, size_t lp, const KRows *v, size_t t0,
                       size_t n, float *scr)
{
    const size_t W = v->W, g = v->g, rb = v->row_bytes;
    float *ao = scr, *ak = ao + (size_t)GC * W, *sk = ak + (size_t)GC * W, *mk = sk + W, *tmp = mk + W;
    float *wt = tmp + W, *wc = wt + (size_t)GC * VR, *P = wc + GC;
    const float cen = centre_of(v);
    memset(ao, 0, (size_t)GC * W * sizeof *ao);
    for (size_t i = 0; i < n;) {
        size_t grp = (t0 + i) / g, end = (grp + 1) * g - t0;
        if (end > n) end = n;
        memset(ak, 0, (size_t)GC * W * sizeof *ak);
        UNROLL for (int h = 0; h < GC; h++) P[h] = 0.0f;
        for (; i < end;) {
            const size_t R = i + VR <= end ? VR : 1;
            const uint8_t *base = v->codes + (t0 + i) * rb;
            UNROLL for (int h = 0; h < GC; h++) {
                float ws = 0.0f;
                for (size_t r = 0; r < R; r++) {
                    float w = p[(size_t)h * lp + i + r];
                    wt[(size_t)h * VR + r] = w;
                    ws += w;
                }
                wc[h] = cen * ws;
                P[h] += ws;
            }
            if (R == VR) {
                prefetch_range(base + PF_AHEAD, VR * rb);
                val_tile(B, GC, 1, VR, ak, wt, wc, W, W, 1, base, rb);
            } else {
                val_tile(B, GC, 1, 1, ak, wt, wc, W, W, 1, base, rb);
            }
            i += R;
        }
        params_f32(tmp, v, grp * W, W, 0);
        to_kernel_order(B, sk, tmp, W);
        if (v->min) {
            params_f32(tmp, v, grp * W, W, 2);
            to_kernel_order(B, mk, tmp, W);
        }
        UNROLL for (int h = 0; h < GC; h++) {
            float *o = ao + (size_t)h * W;
            const float *y = ak + (size_t)h * W;
            const __m256 pv = _mm256_set1_ps(P[h]);
            for (size_t j = 0; j < W; j += 8) {
                __m256 a = _mm256_fmadd_ps(_mm256_loadu_ps(sk + j), _mm256_loadu_ps(y + j), _mm256_loadu_ps(o + j));
                if (v->min) a = _mm256_fmadd_ps(_mm256_loadu_ps(mk + j), pv, a);
                _mm256_storeu_ps(o + j, a);
            }
        }
    }
    UNROLL for (int h = 0; h < GC; h++)
        for (size_t q = 0; q < W; q++) acc[(size_t)h * W + kpos_col(B, W, q)] += ao[(size_t)h * W + q];
}

INLINE void vacc_channel_b(const int B, float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0,
                           size_t n, float *scr)
{
    const size_t W = v->W;
    /* as kivi_vacc_b: at most 8 accumulator vectors per unit */
    HEAD_GROUPS(G, h, GC <= 4 && (GC < 4 || B != 2), valc_heads(B, GC_OF(B, GC), acc + h * W, p + h * lp, lp, v, t0, n, scr));
}

#define KSCORES_T(B, KO)                                                                                            \
    static __attribute__((noinline)) void kscores_t_##B##_##KO(float *s, size_t ls, const float *q, size_t G,        \
                                                               const KRows *k, size_t t0, size_t n, float *scr)   \
    {                                                                                                               \
        scores_token_b(B, KO, s, ls, q, G, k, t0, n, scr);                                                          \
    }
KSCORES_T(2, 0)
KSCORES_T(2, 1)
KSCORES_T(4, 0)
KSCORES_T(4, 1)
KSCORES_T(8, 1)

static void scores_token(float *s, size_t ls, const float *q, size_t G, const KRows *k, size_t t0, size_t n,
                         float *scr)
{
    static const ScoresFn fn[2][3] = {{kscores_t_2_0, kscores_t_4_0, kscores_t_8_1},
                                          {kscores_t_2_1, kscores_t_4_1, kscores_t_8_1}};
    int ko = k->g % U_OF(k->bits) == 0 || k->g == k->W;
    fn[ko][k->bits == 2 ? 0 : k->bits == 4 ? 1 : 2](s, ls, q, G, k, t0, n, scr);
}

#define KVACC_C(B)                                                                                                  \
    static __attribute__((noinline)) void kvacc_c_##B(float *acc, const float *p, size_t lp, size_t G,                \
                                                      const KRows *v, size_t t0, size_t n, float *scr)            \
    {                                                                                                               \
        vacc_channel_b(B, acc, p, lp, G, v, t0, n, scr);                                                            \
    }
KVACC_C(2)
KVACC_C(4)
KVACC_C(8)

static void vacc_channel(float *acc, const float *p, size_t lp, size_t G, const KRows *v, size_t t0, size_t n,
                         float *scr)
{
    static const VaccFn fn[3] = {kvacc_c_2, kvacc_c_4, kvacc_c_8};
    fn[v->bits == 2 ? 0 : v->bits == 4 ? 1 : 2](acc, p, lp, G, v, t0, n, scr);
}

#else
/* Built without -mavx2 -mfma -mf16c (a non-x86 target): kernels_avx2.c registers none of these. */
typedef int kernels_kivi_avx2_empty;
#endif
