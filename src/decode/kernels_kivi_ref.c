/* kernels_kivi_ref: the portable scalar twins of the KIVI kernels (see kernels_kivi.h). Natural column order,
 * one float32 accumulator per dot product (a sequential sum over the columns); each row is decoded in chunks of
 * 256 codes into float32 (exact) once for all G query heads. */
#include "decode/kernels_kivi.h"

enum { CHUNK = 256 };

/* buf[c] = code j0 + c of a row, c < nj (the bit width is a constant in each loop). */
static void codes_chunk(float *buf, const uint8_t *row, size_t j0, size_t nj, int b)
{
    if (b == 8)
        for (size_t c = 0; c < nj; c++) buf[c] = (float)row[j0 + c];
    else if (b == 4)
        for (size_t c = 0; c < nj; c++) buf[c] = (float)kivi_code(row, j0 + c, 4);
    else
        for (size_t c = 0; c < nj; c++) buf[c] = (float)kivi_code(row, j0 + c, 2);
}

static void scores_channel(float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0, size_t n,
                            float *scr)
{
    size_t W = k->W, g = k->g;
    float *qs = scr, *c = scr + G * W;   /* q' (G, W), c_G (G) */
    for (size_t i = 0; i < n;) {
        size_t t = t0 + i, grp = t / g, end = (grp + 1) * g - t0;   /* this token group's rows: i .. end */
        if (end > n) end = n;
        size_t p0 = grp * k->per;
        for (size_t h = 0; h < G; h++) {
            float a = 0.0f;
            for (size_t j = 0; j < W; j++) {
                qs[h * W + j] = q[h * W + j] * kivi_scale(k, p0 + j);
                a += q[h * W + j] * kivi_min(k, p0 + j);
            }
            c[h] = a;
        }
        for (; i < end; i++) {
            const uint8_t *row = k->codes + (t0 + i) * k->row_bytes;
            float buf[CHUNK];
            for (size_t h = 0; h < G; h++) s[h * ls + i] = 0.0f;
            for (size_t j0 = 0; j0 < W; j0 += CHUNK) {
                size_t nj = W - j0 < CHUNK ? W - j0 : CHUNK;
                codes_chunk(buf, row, j0, nj, k->bits);
                for (size_t h = 0; h < G; h++) {
                    float a = s[h * ls + i];
                    const float *qh = qs + h * W + j0;
                    for (size_t j = 0; j < nj; j++) a += qh[j] * buf[j];
                    s[h * ls + i] = a;
                }
            }
            for (size_t h = 0; h < G; h++) s[h * ls + i] += c[h];
        }
    }
}

static void vacc_token(float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0, size_t n,
                          float *scr)
{
    (void)scr;
    size_t W = v->W, g = v->g;
    for (size_t i = 0; i < n; i++) {
        size_t t = t0 + i;
        const uint8_t *row = v->codes + t * v->row_bytes;
        float buf[CHUNK];
        for (size_t c0 = 0; c0 < W; c0 += CHUNK) {
            size_t nc = W - c0 < CHUNK ? W - c0 : CHUNK;
            codes_chunk(buf, row, c0, nc, v->bits);
            for (size_t j = c0; j < c0 + nc;) {   /* runs of one group */
                size_t k = j / g, j1 = (k + 1) * g < c0 + nc ? (k + 1) * g : c0 + nc;
                float s = kivi_scale(v, t * v->per + k), m = kivi_min(v, t * v->per + k);
                for (; j < j1; j++) buf[j - c0] = buf[j - c0] * s + m;   /* exact: the stored value */
            }
            for (size_t h = 0; h < G; h++) {
                float ph = p[h * lp + i], *a = acc + h * W + c0;
                for (size_t j = 0; j < nc; j++) a[j] += ph * buf[j];
            }
        }
    }
}

/* buf[c] = value(t, j0 + c), c < nj: the codes with their group's scale and min (n * s + m, float32). */
static void values_chunk(float *buf, const KiviRows *r, size_t t, size_t j0, size_t nj)
{
    codes_chunk(buf, r->codes + t * r->row_bytes, j0, nj, r->bits);
    for (size_t c = 0; c < nj; c++) {
        size_t j = j0 + c, i = r->axis == STORE_AXIS_TOKEN ? t * r->per + j / r->g : t / r->g * r->W + j;
        buf[c] = buf[c] * kivi_scale(r, i) + kivi_min(r, i);
    }
}

/* Keys with groups along the row: s = q . value(t) over the values of each row (one float32 sum per head). */
static void scores_token(float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0, size_t n)
{
    size_t W = k->W;
    for (size_t i = 0; i < n; i++) {
        float buf[CHUNK];
        for (size_t h = 0; h < G; h++) s[h * ls + i] = 0.0f;
        for (size_t j0 = 0; j0 < W; j0 += CHUNK) {
            size_t nj = W - j0 < CHUNK ? W - j0 : CHUNK;
            values_chunk(buf, k, t0 + i, j0, nj);
            for (size_t h = 0; h < G; h++) {
                float a = s[h * ls + i];
                const float *qh = q + h * W + j0;
                for (size_t j = 0; j < nj; j++) a += qh[j] * buf[j];
                s[h * ls + i] = a;
            }
        }
    }
}

/* Values with groups along the column: acc += p_t value(t) (the exact value, row by row). */
static void vacc_channel(float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0, size_t n)
{
    size_t W = v->W;
    for (size_t i = 0; i < n; i++) {
        float buf[CHUNK];
        for (size_t c0 = 0; c0 < W; c0 += CHUNK) {
            size_t nc = W - c0 < CHUNK ? W - c0 : CHUNK;
            values_chunk(buf, v, t0 + i, c0, nc);
            for (size_t h = 0; h < G; h++) {
                float ph = p[h * lp + i], *a = acc + h * W + c0;
                for (size_t j = 0; j < nc; j++) a[j] += ph * buf[j];
            }
        }
    }
}

static void kivi_scores_ref(float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0, size_t n,
                            float *scr)
{
    if (k->axis == STORE_AXIS_CHANNEL) scores_channel(s, ls, q, G, k, t0, n, scr);
    else scores_token(s, ls, q, G, k, t0, n);
}

static void kivi_vacc_ref(float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0, size_t n,
                          float *scr)
{
    if (v->axis == STORE_AXIS_TOKEN) vacc_token(acc, p, lp, G, v, t0, n, scr);
    else vacc_channel(acc, p, lp, G, v, t0, n);
}

const KiviKernels decode_kivi_ref = {"scalar", kivi_scores_ref, kivi_vacc_ref};
