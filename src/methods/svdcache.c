/* svdcache: decompositions of the data tensors, one per tensor and run (see svdcache.h). A list searched from the
 * newest entry: a run holds one entry per (layer, KV head, tensor) that a low-rank experiment covers. */
#include "methods/svdcache.h"
#include "base/linalg.h"
#include "base/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct Entry {
    struct Entry *next;
    size_t n, D;
    const double **x;    /* the key: n addresses and their row counts */
    size_t *rows;
    double *S, *Vt;      /* (D,), (D, D) */
} Entry;

struct SvdCache {
    Entry *head;
    pthread_mutex_t mu;   /* guards the list; decompositions run outside it */
};

SvdCache *svdcache_new(void)
{
    SvdCache *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void svdcache_free(SvdCache *c)
{
    if (!c) return;
    for (Entry *e = c->head, *next; e; e = next) {
        next = e->next;
        free(e->x); free(e->rows); free(e->S); free(e->Vt); free(e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int same_key(const Entry *e, const double *const *x, const size_t *rows, size_t n, size_t D)
{
    if (e->n != n || e->D != D) return 0;
    for (size_t k = 0; k < n; k++)
        if (e->x[k] != x[k] || e->rows[k] != rows[k]) return 0;
    return 1;
}

static const Entry *find(const SvdCache *c, const double *const *x, const size_t *rows, size_t n, size_t D)
{
    for (const Entry *e = c->head; e; e = e->next)
        if (same_key(e, x, rows, n, D)) return e;
    return NULL;
}

int svdcache_get(SvdCache *c, const double *const *x, const size_t *rows, size_t n, size_t D, const double **S,
                 const double **Vt, int *owned, struct Pool *pool)
{
    if (c) {
        pthread_mutex_lock(&c->mu);
        const Entry *e = find(c, x, rows, n, D);
        pthread_mutex_unlock(&c->mu);
        if (e) {
            *S = e->S;
            *Vt = e->Vt;
            *owned = 0;
            return 0;
        }
    }
    double *s = xmalloc(D * sizeof *s), *vt = xmalloc(D * D * sizeof *vt);
    if (la_svd_right(s, vt, x, rows, n, D, pool)) {
        free(s);
        free(vt);
        return -1;
    }
    *S = s;
    *Vt = vt;
    *owned = c == NULL;
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    const Entry *other = find(c, x, rows, n, D);
    if (other) {   /* another thread made the same decomposition meanwhile (the same bits): use the cache's */
        pthread_mutex_unlock(&c->mu);
        free(s);
        free(vt);
        *S = other->S;
        *Vt = other->Vt;
        return 0;
    }
    Entry *e = xmalloc(sizeof *e);
    e->n = n;
    e->D = D;
    e->x = xmalloc(n * sizeof *e->x);
    e->rows = xmalloc(n * sizeof *e->rows);
    memcpy(e->x, x, n * sizeof *e->x);
    memcpy(e->rows, rows, n * sizeof *e->rows);
    e->S = s;
    e->Vt = vt;
    e->next = c->head;
    c->head = e;
    pthread_mutex_unlock(&c->mu);
    return 0;
}
