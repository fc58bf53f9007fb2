/* timing: decode_ns / decode_speedup of kvc run (see timing.h). */
#include "eval/timing.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

struct Timing {
    const Data *d;
    int threads, repeat;
    float *q;              /* (L, Hq, D) one query per query head */
    TimedCache base;       /* FP16, every token of every KV head; built at the first measurement */
    int have_base;
    struct Measured {      /* every form measured so far: one measurement per distinct form and run */
        DecodeForm f;
        double ns, speedup, mad;
    } *done;
    size_t n_done, cap_done;
    double last_mad;       /* the MAD of the form timing_measure measured (or found) last */
};

double timing_last_mad(const Timing *tm) { return tm->last_mad; }

StoreFormat timing_decode_format(StoreFormat f, size_t T, size_t W)
{
    if (f.type != STORE_INTN || f.asym || f.scale_type != STORE_SCALE_F16) return f;
    if (f.bits != 8 && f.bits != 4 && f.bits != 2) return f;
    if (W * (size_t)f.bits % 8 != 0) return f;
    size_t whole = f.axis == STORE_AXIS_TOKEN ? W : T;
    if (f.group != 0 && f.group < whole) return f;
    StoreFormat g;
    memset(&g, 0, sizeof g);
    g.type = f.bits == 8 ? STORE_INT8 : f.bits == 4 ? STORE_INT4 : STORE_INT2;
    g.axis = f.axis;
    g.rank = f.rank;
    return g;
}

DecodeForm timing_form(const Experiment *ex, const Data *d, const Compressed *c)
{
    DecodeForm f;
    memset(&f, 0, sizeof f);
    f.k.type = f.v.type = STORE_F16;
    f.T = c->kept ? c->n_kept : d->T;
    f.share = 1;
    Dims dm = {d->T, d->D, d->V != NULL, d->Q != NULL, d->H, d->W};
    if (ex->method->decode_form) ex->method->decode_form(&f, ex, &dm, c);
    else if (!ex->method->evicts) f.none = "the method has no decode form";
    return f;
}

int timing_same_form(const DecodeForm *a, const DecodeForm *b)
{
    return a->T == b->T && a->Tr == b->Tr && a->share == b->share && store_format_equal(a->k, b->k) &&
           store_format_equal(a->v, b->v) && (a->none == NULL) == (b->none == NULL);
}

const char *timing_unsupported(const DecodeForm *f, const Data *d)
{
    for (int v = 0; v < 2; v++) {
        StoreFormat x = v ? f->v : f->k;
        if (v && !d->V) break;
        if (x.rank && timing_decode_format(x, f->T, x.rank).type == STORE_INTN)
            return "low-rank coefficients in a grouped integer format have no decode path";
    }
    return NULL;
}

/* One (T, D) tensor of format f from the rows x (T, D) of the data (low rank: the first W columns as the
 * coefficients, unit rows as the basis); adds its bytes to *bytes. */
static int make_tensor(StoreTensor *st, uint64_t *bytes, StoreFormat f, const double *x, size_t T, size_t D)
{
    size_t R = f.rank, W = R ? R : D;
    f = timing_decode_format(f, T, W);
    if (store_check(f, T, D, "decode timing")) return -1;
    store_alloc(st, f, T, D);
    if (!R) {
        store_quantize_f64(st, x);
        *bytes += store_bytes(st);
        return 0;
    }
    double *c = xmalloc(T * R * sizeof *c), *B = xcalloc(R * D, sizeof *B);
    for (size_t t = 0; t < T; t++) memcpy(c + t * R, x + t * D, R * sizeof *c);
    for (size_t r = 0; r < R; r++) B[r * D + r] = 1.0;
    store_quantize_f64(st, c);
    store_set_basis_f64(st, B);
    free(c);
    free(B);
    *bytes += store_bytes(st);
    return 0;
}

void timing_cache_free(TimedCache *tc)
{
    if (!tc) return;
    StoreTensor *all[4] = {tc->K, tc->V, tc->Kr, tc->Vr};
    for (int a = 0; a < 4; a++) {
        for (size_t i = 0; all[a] && i < tc->n; i++) store_free(&all[a][i]);
        free(all[a]);
    }
    memset(tc, 0, sizeof *tc);
}

int timing_build(TimedCache *tc, const Data *d, const DecodeForm *f)
{
    memset(tc, 0, sizeof *tc);
    size_t H = d->H, share = f->share ? f->share : 1, T = f->T, Tr = f->Tr, D = d->D, m = d->T * D;
    if (share > H || H % share != 0 || T < 1 || T + Tr > d->T)
        return kvc_fail("decode timing: a stored form the data cannot hold (got %zu + %zu tokens of %zu, %zu of %zu "
                        "KV heads shared)", T, Tr, d->T, share, H);
    size_t Hs = H / share;
    tc->n = d->L * Hs;
    tc->K = xcalloc(tc->n, sizeof *tc->K);
    if (d->V) tc->V = xcalloc(tc->n, sizeof *tc->V);
    if (Tr) {
        tc->Kr = xcalloc(tc->n, sizeof *tc->Kr);
        if (d->V) tc->Vr = xcalloc(tc->n, sizeof *tc->Vr);
    }
    StoreFormat rk, rv;   /* the residual window: FP16 rows of the same width */
    memset(&rk, 0, sizeof rk);
    rk.type = STORE_F16;
    rv = rk;
    rk.rank = f->k.rank;
    rv.rank = f->v.rank;
    for (size_t i = 0; i < tc->n; i++) {
        size_t b = (i / Hs) * H + (i % Hs) * share;
        const double *K = d->K + b * m, *V = d->V ? d->V + b * m : NULL;
        uint64_t *by = &tc->bytes;
        if (make_tensor(&tc->K[i], by, f->k, K, T, D) || (V && make_tensor(&tc->V[i], by, f->v, V, T, D)) ||
            (Tr && make_tensor(&tc->Kr[i], by, rk, K + T * D, Tr, D)) ||
            (Tr && V && make_tensor(&tc->Vr[i], by, rv, V + T * D, Tr, D))) {
            timing_cache_free(tc);
            return -1;
        }
    }
    tc->c = (DecodeCache){d->L, Hs, T, D, tc->K, tc->V, Tr, tc->Kr, tc->Vr};
    return 0;
}

Timing *timing_create(const Data *d, int threads, int repeat)
{
    Timing *tm = xcalloc(1, sizeof *tm);
    tm->d = d;
    tm->threads = threads;
    tm->repeat = repeat;
    size_t L = d->L, Hq = d->Hq, G = Hq / d->H, D = d->D, T = d->T, N = d->N;
    tm->q = xmalloc(L * Hq * D * sizeof *tm->q);
    for (size_t i = 0; i < L * Hq; i++) {
        const double *x = d->Q && N ? d->Q + i * N * D
                                    : d->K + (((i / Hq) * d->H + (i % Hq) / G) * T + (T - 1)) * D;
        for (size_t j = 0; j < D; j++) tm->q[i * D + j] = (float)x[j];
    }
    return tm;
}

void timing_free(Timing *tm)
{
    if (!tm) return;
    timing_cache_free(&tm->base);
    free(tm->done);
    free(tm->q);
    free(tm);
}

int timing_measure(Timing *tm, const DecodeForm *f, double *ns, double *speedup)
{
    const Data *d = tm->d;
    for (size_t i = 0; i < tm->n_done; i++)
        if (timing_same_form(&tm->done[i].f, f)) {   /* the same cache: the same step */
            *ns = tm->done[i].ns;
            *speedup = tm->done[i].speedup;
            tm->last_mad = tm->done[i].mad;
            return 0;
        }
    if (!tm->have_base) {
        DecodeForm b;
        memset(&b, 0, sizeof b);
        b.k.type = b.v.type = STORE_F16;
        b.T = d->T;
        b.share = 1;
        if (timing_build(&tm->base, d, &b)) return -1;
        tm->have_base = 1;
    }
    TimedCache c;
    if (timing_build(&c, d, f)) return -1;
    double ns_base = 0.0;
    int rc = decode_time_pair_mad(ns, &ns_base, &tm->last_mad, &c.c, &tm->base.c, d->Hq, tm->q, tm->threads,
                                  tm->repeat, d->V ? DECODE_FULL : DECODE_KEYS);
    timing_cache_free(&c);
    if (rc) return -1;
    if (!(*ns > 0) || !(ns_base > 0))
        return kvc_fail("decode timing: the clock did not resolve a decode step (got %g ns and %g ns for FP16)", *ns,
                        ns_base);
    *speedup = ns_base / *ns;
    if (tm->n_done == tm->cap_done) {
        tm->cap_done = tm->cap_done ? 2 * tm->cap_done : 16;
        struct Measured *m = xmalloc(tm->cap_done * sizeof *m);
        if (tm->n_done) memcpy(m, tm->done, tm->n_done * sizeof *m);
        free(tm->done);
        tm->done = m;
    }
    tm->done[tm->n_done++] = (struct Measured){*f, *ns, *speedup, tm->last_mad};
    return 0;
}
