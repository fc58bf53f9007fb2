/* attention: the one attention kernel of the quality path, shared by the reference and every method.
 *
 * T tokens (rows of K and V that take part), D head dim. K is (T, D), V is (T, D), q is (D,), out is (D,),
 * w is (T,). Computes, as numpy would: s = (K @ q) / sqrt(D); w = exp(s - max(s)); w = w / sum(w);
 * out = w @ V. Double precision through OpenBLAS (dgemv), numpy's pairwise sum for sum(w).
 * attn_scores is the first step alone (s, the same numbers attn_forward exponentiates); attn_softmax the
 * second (s -> w in place), for callers that need the weights without the output (src/methods/evict_attn.c).
 * attn_log_softmax: ls = s - max(s) - log(sum(exp(s - max(s)))), for the KL metric.
 * Pure: no allocation; T >= 1.
 */
#ifndef KVC_ATTENTION_H
#define KVC_ATTENTION_H

#include <stddef.h>

void attn_forward(double *out, double *w, const double *q, const double *K, const double *V, size_t T, size_t D);
/* the same, also copying the scores s (T,) (NULL: not wanted) */
void attn_forward_scores(double *out, double *w, double *s, const double *q, const double *K, const double *V,
                         size_t T, size_t D);
void attn_scores(double *s, const double *q, const double *K, size_t T, size_t D);
/* w (T,) = exp(s - max(s)) / sum(exp(s - max(s))), in place (s comes in as w). */
void attn_softmax(double *w, size_t T);
/* ls (T,) from s (T,); tmp (T,) is scratch. */
void attn_log_softmax(double *ls, const double *s, double *tmp, size_t T);

#endif
