/* attention: scores, stable softmax, weighted sum (see attention.h). */
#include "base/attention.h"
#include "base/linalg.h"

#include <math.h>
#include <string.h>

void attn_scores(double *s, const double *q, const double *K, size_t T, size_t D)
{
    la_matvec(s, K, q, T, D);
    double root = sqrt((double)D);
    for (size_t t = 0; t < T; t++) s[t] = s[t] / root;
}

void attn_forward(double *out, double *w, const double *q, const double *K, const double *V, size_t T, size_t D)
{
    attn_forward_scores(out, w, NULL, q, K, V, T, D);
}

void attn_forward_scores(double *out, double *w, double *s, const double *q, const double *K, const double *V,
                         size_t T, size_t D)
{
    attn_scores(w, q, K, T, D);
    if (s) memcpy(s, w, T * sizeof *s);
    attn_softmax(w, T);
    la_vecmat(out, w, V, T, D);
}

void attn_softmax(double *w, size_t T)
{
    double m = -INFINITY;
    for (size_t t = 0; t < T; t++)
        if (w[t] > m) m = w[t];
    for (size_t t = 0; t < T; t++) w[t] = exp(w[t] - m);
    double sum = la_sum(w, T);
    for (size_t t = 0; t < T; t++) w[t] = w[t] / sum;
}

void attn_log_softmax(double *ls, const double *s, double *tmp, size_t T)
{
    double m = -INFINITY;
    for (size_t t = 0; t < T; t++)
        if (s[t] > m) m = s[t];
    for (size_t t = 0; t < T; t++) {
        ls[t] = s[t] - m;
        tmp[t] = exp(ls[t]);
    }
    double lz = log(la_sum(tmp, T));
    for (size_t t = 0; t < T; t++) ls[t] = ls[t] - lz;
}
