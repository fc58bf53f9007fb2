/* pool: workers sleep on a condition variable until the generation counter moves, take items from an
 * atomic counter, and report completion through a second counter (see pool.h). */
#include "base/pool.h"
#include "base/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct Pool {
    int n;                    /* threads, the caller included */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long gen;        /* bumped once per pool_run */
    int busy;                 /* workers still running the current generation */
    int quit;
    PoolFn fn;
    void *arg;
    size_t n_items;
    atomic_size_t next;
};

typedef struct Worker {
    Pool *p;
    int tid;
} Worker;

static void drain(Pool *p, int tid)
{
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_items) return;
        p->fn(p->arg, i, tid);
    }
}

static void *worker_main(void *argp)
{
    Worker w = *(Worker *)argp;
    free(argp);
    Pool *p = w.p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        drain(p, w.tid);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

Pool *pool_create(int nthreads)
{
    Pool *p = xcalloc(1, sizeof *p);
    p->n = nthreads < 1 ? 1 : nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    p->th = xcalloc((size_t)p->n, sizeof *p->th);
    for (int i = 1; i < p->n; i++) {
        Worker *w = xmalloc(sizeof *w);
        w->p = p;
        w->tid = i;
        int rc = pthread_create(&p->th[i], NULL, worker_main, w);
        if (rc != 0) {
            free(w);
            p->n = i;
            pool_free(p);
            kvc_fail("threads: cannot start thread %d (got %s)", i + 1, strerror(rc));
            return NULL;
        }
    }
    return p;
}

int pool_threads(const Pool *p) { return p->n; }

void pool_run(Pool *p, PoolFn fn, void *arg, size_t n_items)
{
    if (p->n == 1) {
        for (size_t i = 0; i < n_items; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_items = n_items;
    atomic_store(&p->next, 0);
    p->busy = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void pool_free(Pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}
