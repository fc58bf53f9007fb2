/* stats: outlier ratio, sink and recent attention mass, effective rank of K. See stats.h. */
#include "eval/stats.h"
#include "base/attention.h"
#include "base/linalg.h"
#include "base/util.h"
#include "data/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const stats_columns[STATS_NCOLS] = {"outlier_ratio", "sink_mass", "recent_mass", "erank", "rank90"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* max_c m_c / median_c m_c, m_c = mean_t |K[t, c]|; m (D,) is scratch. */
static double outlier_ratio(const double *K, size_t T, size_t D, double *m)
{
    for (size_t c = 0; c < D; c++) m[c] = 0.0;
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < D; c++) m[c] += fabs(K[t * D + c]);
    for (size_t c = 0; c < D; c++) m[c] /= (double)T;
    qsort(m, D, sizeof *m, cmp_double);
    double med = D % 2 ? m[D / 2] : (m[D / 2 - 1] + m[D / 2]) / 2.0;
    return med > 0.0 ? m[D - 1] / med : NAN;
}

/* erank and rank90 from the singular values S (R,), descending. */
static void rank_stats(const double *S, size_t R, double *erank, double *rank90)
{
    double sum = 0.0, energy = 0.0;
    for (size_t i = 0; i < R; i++) sum += S[i], energy += S[i] * S[i];
    if (!(sum > 0.0)) {
        *erank = NAN;
        *rank90 = 0.0;
        return;
    }
    double h = 0.0;
    for (size_t i = 0; i < R; i++) {
        double p = S[i] / sum;
        if (p > 0.0) h -= p * log(p);
    }
    *erank = exp(h);
    double cum = 0.0;
    size_t r = R;
    for (size_t i = 0; i < R; i++) {
        cum += S[i] * S[i];
        if (cum >= 0.9 * energy) {
            r = i + 1;
            break;
        }
    }
    *rank90 = (double)r;
}

static void aggregate(Stats *s)
{
    size_t n = s->L * s->H;
    for (int k = 0; k < STATS_NCOLS; k++) {
        double sum = 0.0, lo = NAN, hi = NAN;
        size_t cnt = 0;
        for (size_t b = 0; b < n; b++) {
            double x = s->heads[b].v[k];
            if (isnan(x)) continue;
            sum += x;
            lo = cnt == 0 || x < lo ? x : lo;
            hi = cnt == 0 || x > hi ? x : hi;
            cnt++;
        }
        s->mean.v[k] = cnt ? sum / (double)cnt : NAN;
        s->min.v[k] = lo;
        s->max.v[k] = hi;
    }
}

int stats_compute(Stats *s, const Data *d)
{
    memset(s, 0, sizeof *s);
    size_t L = d->L, H = d->H, Hq = d->Hq, G = Hq / H, T = d->T, D = d->D, N = d->Q ? d->N : 0, m = T * D;
    size_t R = T < D ? T : D;
    s->L = L, s->H = H, s->Hq = Hq, s->T = T, s->D = D, s->N = N;
    s->sink_tokens = T < STATS_SINK_TOKENS ? T : STATS_SINK_TOKENS;
    s->recent_tokens = (T + 9) / 10;
    s->heads = xcalloc(L * H, sizeof *s->heads);
    double *Kb = d->rope.dims > 0 ? xmalloc(m * sizeof *Kb) : NULL;
    double *mc = xmalloc(D * sizeof *mc), *w = xmalloc(T * sizeof *w), *S = xmalloc(R * sizeof *S);
    /* T >= D: la_svd_right (no U, blocked QR); T < D: la_svd with its small (T, T) U */
    double *U = T < D ? xmalloc(T * R * sizeof *U) : NULL, *Vt = xmalloc(R * D * sizeof *Vt);
    int rc = 0;
    for (size_t b = 0; b < L * H && rc == 0; b++) {
        const double *K = d->K + b * m;
        if (Kb) {
            memcpy(Kb, K, m * sizeof *Kb);
            rope_apply(&d->rope, Kb, NULL, T, 0);
            K = Kb;
        }
        StatsRow *row = &s->heads[b];
        row->v[STATS_OUTLIER] = outlier_ratio(K, T, D, mc);
        if (N > 0) {
            size_t l = b / H, h = b % H;
            double sink = 0.0, recent = 0.0;
            for (size_t hq = h * G; hq < (h + 1) * G; hq++)
                for (size_t n = 0; n < N; n++) {
                    attn_scores(w, d->Q + ((l * Hq + hq) * N + n) * D, K, T, D);
                    attn_softmax(w, T);
                    double a = 0.0, c = 0.0;
                    for (size_t t = 0; t < s->sink_tokens; t++) a += w[t];
                    for (size_t t = T - s->recent_tokens; t < T; t++) c += w[t];
                    sink += a, recent += c;
                }
            row->v[STATS_SINK] = sink / (double)(G * N);
            row->v[STATS_RECENT] = recent / (double)(G * N);
        } else {
            row->v[STATS_SINK] = row->v[STATS_RECENT] = NAN;
        }
        if (T < D ? la_svd(U, S, Vt, K, T, D) : la_svd_right(S, Vt, &K, &T, 1, D, NULL)) rc = -1;
        else rank_stats(S, R, &row->v[STATS_ERANK], &row->v[STATS_RANK90]);
    }
    free(Kb), free(mc), free(w), free(S), free(U), free(Vt);
    if (rc) {
        stats_free(s);
        return -1;
    }
    aggregate(s);
    return 0;
}

void stats_free(Stats *s)
{
    if (!s) return;
    free(s->heads);
    memset(s, 0, sizeof *s);
}
