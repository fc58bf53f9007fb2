/* share.h: the pooling of share_heads, shared with pipeline.c; private to src/methods/. */
#ifndef KVC_METHODS_SHARE_H
#define KVC_METHODS_SHARE_H

#include "methods/methods.h"

/* out (n,) = the mean of x[0..g) (n,) each: acc = x[0]; acc = acc + x[k] in order; acc / g. */
void share_pool(double *out, const double *const *x, size_t g, size_t n);

#endif
