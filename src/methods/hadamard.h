/* hadamard: the randomized orthonormal Walsh-Hadamard rotation of the quantizers' `rotate: "hadamard"`.
 *
 * D head dim (a power of two), T rows. R = diag(s) H / sqrt(D), H the Sylvester Hadamard matrix of order D
 * (H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]]), s in {-1, +1}^D the random signs. R is orthonormal, so
 * (x R) . (y R) = x . y: attention scores are the same whether q and every key are rotated or neither is.
 * A row x (1, D) rotates to y = x R and back to x = y R^T.
 *
 * Arithmetic (the order is part of the definition, tests/oracle.py follows it): rotate y = wht(x * s) / sqrt(D),
 * unrotate x = wht(y) / sqrt(D) * s, where wht is the in-place butterfly for h = 1, 2, 4, ..., D/2: for every
 * block of 2h entries starting at i (i = 0, 2h, 4h, ...) and j in [i, i + h): (a, b) = (x[j], x[j + h]) ->
 * (a + b, a - b); that computes x H.
 *
 * Signs: s[i] = -1 if u[i] < 0.5 else +1 with u = np.random.default_rng([seed, 0x48414441]).random(D): a
 * stream of its own (SeedSequence of the seed's 32-bit words, least significant first, then the word
 * 0x48414441, "HADA"), so the data draws are unchanged; the same s for every layer, head, K and V.
 * Pure functions; no allocation but hadamard_signs' parse of the seed.
 */
#ifndef KVC_HADAMARD_H
#define KVC_HADAMARD_H

#include <stddef.h>

#define HADAMARD_SEED_WORD 0x48414441u

/* 1 when D is a power of two (1, 2, 4, ...). */
int hadamard_ok(size_t D);
/* s (D,) = the signs for the config seed (decimal digits; NULL means "0"). Returns 0, or -1 with kvc_fail set
 * when seed is not a decimal integer. */
int hadamard_signs(double *s, size_t D, const char *seed);
/* Every row of x (T, D), in place: x = x R (rotate) or x = x R^T (unrotate). D a power of two. */
void hadamard_rotate(double *x, size_t T, size_t D, const double *s);
void hadamard_unrotate(double *x, size_t T, size_t D, const double *s);

#endif
