/* pool: a fixed set of threads that run numbered work items (pthreads).
 *
 * pool_run(p, fn, arg, n) calls fn(arg, item, tid) once for every item in 0..n-1, spread over the pool's
 * threads (the caller is thread 0; items are handed out by an atomic counter), and returns when all are
 * done. Items must be independent; results that must not depend on the thread count are written to
 * per-item slots and combined by the caller in item order. One pool_run at a time per pool.
 * pool_create(1) starts no thread. Failure to start a thread is a runtime failure: pool_create returns
 * NULL with kvc_fail set.
 */
#ifndef KVC_BASE_POOL_H
#define KVC_BASE_POOL_H

#include <stddef.h>

typedef struct Pool Pool;
typedef void (*PoolFn)(void *arg, size_t item, int tid);

Pool *pool_create(int nthreads);
int pool_threads(const Pool *p);
void pool_run(Pool *p, PoolFn fn, void *arg, size_t n_items);
void pool_free(Pool *p);

#endif
