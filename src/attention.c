/* attention: scores, stable softmax, weighted sum (see attention.h). */
#include "attention.h"
#include "linalg.h"

#include <math.h>

void attn_forward(double *out, double *w, const double *q, const double *K, const double *V, size_t T, size_t D)
{
    la_matvec(w, K, q, T, D);
    double root = sqrt((double)D), m = -INFINITY;
    for (size_t t = 0; t < T; t++) {
        w[t] = w[t] / root;
        if (w[t] > m) m = w[t];
    }
    for (size_t t = 0; t < T; t++) w[t] = exp(w[t] - m);
    double sum = la_sum(w, T);
    for (size_t t = 0; t < T; t++) w[t] = w[t] / sum;
    la_vecmat(out, w, V, T, D);
}
