/* rope: rotary position embedding (RoPE) on rows of keys or queries.
 *
 * D head dim, d = dims rotated channels (even, <= D; channels d..D-1 pass through), h = d / 2 pairs,
 * T positions in the table. Frequencies inv_freq[i] = 1 / base^(2i / d), angle(p, i) = p * inv_freq[i],
 * c = cos(angle), s = sin(angle). A pair (x1, x2) rotates to (x1 c - x2 s, x2 c + x1 s); the inverse
 * rotation is (x1 c + x2 s, x2 c - x1 s). Pairs: "half" style (Llama in Hugging Face, rotate_half)
 * pairs channel i with i + h; "interleaved" (GPT-J) pairs 2i with 2i + 1.
 *
 * rope_init computes the (T, h) cos/sin table with libm pow, cos and sin; rope_free releases it (safe on
 * a zeroed Rope). rope_apply is pure: it rotates rows in place and allocates nothing.
 */
#ifndef KVC_ROPE_H
#define KVC_ROPE_H

#include <stddef.h>

typedef struct Rope {
    size_t D, dims, T;    /* dims == 0: no rotation (a zeroed Rope is the identity) */
    int interleaved;
    double *cos, *sin;    /* (T, dims / 2) */
} Rope;

void rope_init(Rope *r, double base, size_t dims, int interleaved, size_t T, size_t D);
void rope_free(Rope *r);

/* x (n, D): row i is rotated by its position pos[i] (pos NULL: position i); inverse != 0 un-rotates.
 * Every position must be < r->T. */
void rope_apply(const Rope *r, double *x, const size_t *pos, size_t n, int inverse);

#endif
