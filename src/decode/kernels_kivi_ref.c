/* kernels_kivi_ref: the portable scalar twins of the KIVI kernels (see kernels_kivi.h). Natural column order,
 * one float32 accumulator per dot product (a sequential sum over the columns). */
#include "decode/kernels_kivi.h"

static void kivi_scores_ref(float *s, size_t ls, const float *q, size_t G, const KiviRows *k, size_t t0, size_t n,
                            float *scr)
{
    size_t W = k->W, g = k->g;
    float *qs = scr, *c = scr + G * W;   /* q' (G, W), c_G (G) */
    for (size_t i = 0; i < n;) {
        size_t t = t0 + i, grp = t / g, end = (grp + 1) * g - t0;   /* this token group's rows: i .. end */
        if (end > n) end = n;
        const uint16_t *sc = k->scale + grp * k->per, *mn = k->min + grp * k->per;
        for (size_t h = 0; h < G; h++) {
            float a = 0.0f;
            for (size_t j = 0; j < W; j++) {
                qs[h * W + j] = q[h * W + j] * store_f16_to_f32(sc[j]);
                a += q[h * W + j] * store_f16_to_f32(mn[j]);
            }
            c[h] = a;
        }
        for (; i < end; i++) {
            const uint8_t *row = k->codes + (t0 + i) * k->row_bytes;
            for (size_t h = 0; h < G; h++) {
                float a = 0.0f;
                const float *qh = qs + h * W;
                for (size_t j = 0; j < W; j++) a += qh[j] * (float)kivi_code(row, j, k->bits);
                s[h * ls + i] = a + c[h];
            }
        }
    }
}

static void kivi_vacc_ref(float *acc, const float *p, size_t lp, size_t G, const KiviRows *v, size_t t0, size_t n,
                          float *scr)
{
    (void)scr;
    size_t W = v->W, g = v->g;
    for (size_t i = 0; i < n; i++) {
        size_t t = t0 + i;
        const uint8_t *row = v->codes + t * v->row_bytes;
        for (size_t j0 = 0, k = 0; j0 < W; j0 += g, k++) {
            size_t j1 = j0 + g < W ? j0 + g : W;
            float s = store_f16_to_f32(v->scale[t * v->per + k]), m = store_f16_to_f32(v->min[t * v->per + k]);
            for (size_t j = j0; j < j1; j++) {
                float x = (float)kivi_code(row, j, v->bits) * s + m;   /* exact: the stored value */
                for (size_t h = 0; h < G; h++) acc[h * W + j] += p[h * lp + i] * x;
            }
        }
    }
}

const KiviKernels decode_kivi_ref = {"scalar", kivi_scores_ref, kivi_vacc_ref};
