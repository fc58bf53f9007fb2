/* svdcache: the singular values and right singular vectors of the run's data tensors, computed once and shared by
 * every experiment that needs them (lowrank at several ranks, energies, apply_to; --per-head and aggregate rows).
 *
 * An entry is la_svd_right (src/base/linalg.h) of the rows of n tensors x[0..n) stacked (one head's K or V, or the
 * heads of a layer for lowrank's joint basis), keyed by the tensors' addresses and row counts and the width D: the
 * key is the tensor's identity, so a cache may only be handed tensors that stay alive and unchanged as long as the
 * cache lives. The evaluation owns one per data set (eval/evaluate.h, Reference.svd) and passes it to the methods
 * in MethodInput.svd for the data tensors; inputs a pipeline builds (copies it frees) get none. Thread-safe: a
 * lock guards the list, decompositions run outside it (two threads asking for the same one at once may both make
 * it; the cache keeps the first). An entry holds (D + 1) x D doubles.
 */
#ifndef KVC_SVDCACHE_H
#define KVC_SVDCACHE_H

#include <stddef.h>

typedef struct SvdCache SvdCache;

SvdCache *svdcache_new(void);
void svdcache_free(SvdCache *c);   /* NULL is fine */

/* S (D,) and Vt (D, D) of the stacked rows of x[0..n) (rows[k] each, sum >= D >= 1): from the cache c, or computed
 * with la_svd_right and kept there (c NULL: computed into fresh arrays the caller owns). With c, *S and *Vt belong
 * to the cache (valid until svdcache_free); *owned says which (1: free them). Returns 0, or -1 with kvc_fail set. */
struct Pool;
/* pool: threads la_svd_right may use (NULL: none). */
int svdcache_get(SvdCache *c, const double *const *x, const size_t *rows, size_t n, size_t D, const double **S,
                 const double **Vt, int *owned, struct Pool *pool);

#endif
