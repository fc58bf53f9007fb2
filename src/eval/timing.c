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

static const char *const DIFFERENT = "its KV heads store different forms";

static int same_form(const DecodeForm *a, const DecodeForm *b)
{
    return a->T == b->T && a->Tr == b->Tr && a->share == b->share && a->values == b->values &&
           store_format_equal(a->k, b->k) && store_format_equal(a->v, b->v) && store_format_equal(a->kr, b->kr) &&
           store_format_equal(a->vr, b->vr);
}

/* The form of a stored head that holds its tensors; NULL, or why a decode step cannot read them. */
static const char *form_of(DecodeForm *f, const MethodStored *s, size_t share)
{
    memset(f, 0, sizeof *f);
    if (!s->K.codes) return "the method stores no keys";
    f->k = s->K.fmt;
    f->T = s->K.T;
    f->share = share;
    f->values = s->V.codes != NULL;
    if (s->Kr.codes) {
        f->kr = s->Kr.fmt;
        f->Tr = s->Kr.T;
    }
    if (!f->values) return NULL;
    f->v = s->V.fmt;
    if (s->Vr.codes) f->vr = s->Vr.fmt;
    if (s->V.T != f->T || (s->Vr.codes ? s->Vr.T : 0) != f->Tr) return "its K and V are stored over different tokens";
    return NULL;
}

void timing_cache_init(TimedCache *tc, size_t L, size_t H)
{
    memset(tc, 0, sizeof *tc);
    tc->L = L;
    tc->H = H;
}

void timing_cache_free(TimedCache *tc)
{
    if (!tc) return;
    StoreTensor *all[4] = {tc->K, tc->V, tc->Kr, tc->Vr};
    for (int a = 0; a < 4; a++) {
        for (size_t i = 0; all[a] && i < tc->n; i++) store_free(&all[a][i]);
        free(all[a]);
    }
    timing_cache_init(tc, tc->L, tc->H);
}

static void take(StoreTensor *dst, StoreTensor *src, uint64_t *bytes)
{
    *dst = *src;
    memset(src, 0, sizeof *src);
    *bytes += store_bytes(dst);
}

/* Adds head i (layer-major) of s; NULL, or why the cache cannot be timed. */
static const char *add_head(TimedCache *tc, MethodStored *s, size_t i)
{
    if (s->none) return s->none;
    size_t share = s->share ? s->share : 1;
    int owner = (i % tc->H) % share == 0;   /* the first head of its group holds the group's stored head */
    DecodeForm f;
    if (i == 0) {
        const char *why = tc->H % share ? DIFFERENT : s->reads_first ? DIFFERENT : form_of(&f, s, share);
        if (why) return why;
        tc->form = f;
        tc->n = tc->L * (tc->H / share);
        tc->K = xcalloc(tc->n, sizeof *tc->K);
        if (f.values) tc->V = xcalloc(tc->n, sizeof *tc->V);
        if (f.Tr) tc->Kr = xcalloc(tc->n, sizeof *tc->Kr);
        if (f.Tr && f.values) tc->Vr = xcalloc(tc->n, sizeof *tc->Vr);
    }
    if (share != tc->form.share || s->reads_first == owner) return DIFFERENT;
    if (!owner) return NULL;
    const char *why = form_of(&f, s, share);
    if (why) return why;
    if (!same_form(&f, &tc->form)) return DIFFERENT;
    size_t k = i / share;   /* layer i / H, stored head (i % H) / share */
    take(&tc->K[k], &s->K, &tc->bytes);
    if (tc->V) take(&tc->V[k], &s->V, &tc->bytes);
    if (tc->Kr) take(&tc->Kr[k], &s->Kr, &tc->bytes);
    if (tc->Vr) take(&tc->Vr[k], &s->Vr, &tc->bytes);
    return NULL;
}

void timing_cache_add(TimedCache *tc, MethodStored *s)
{
    size_t i = tc->added++;
    const char *why = tc->none ? NULL : add_head(tc, s, i);
    if (why) {
        timing_cache_free(tc);
        tc->added = i + 1;
        tc->none = why;
    }
    method_stored_free(s);   /* what was not taken */
}

static DecodeCache cache_of(const TimedCache *tc)
{
    return (DecodeCache){.L = tc->L, .Hkv = tc->H / tc->form.share, .T = tc->form.T, .D = tc->K[0].D, .K = tc->K,
                         .V = tc->V, .Tr = tc->form.Tr, .Kr = tc->Kr, .Vr = tc->Vr};
}

/* The FP16 cache of every token of every KV head of the data. */
static void build_base(TimedCache *tc, const Data *d)
{
    size_t m = d->T * d->D;
    timing_cache_init(tc, d->L, d->H);
    for (size_t i = 0; i < d->L * d->H; i++) {
        MethodStored s;
        memset(&s, 0, sizeof s);
        method_store_f16(&s.K, d->K + i * m, NULL, d->T, d->D);
        if (d->V) method_store_f16(&s.V, d->V + i * m, NULL, d->T, d->D);
        timing_cache_add(tc, &s);
    }
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

int timing_measure(Timing *tm, TimedCache *tc, double *ns, double *speedup)
{
    const Data *d = tm->d;
    if (tc->none || tc->added != d->L * d->H || tc->L != d->L || tc->H != d->H)
        return kvc_fail("decode timing: the stored cache is not complete (got %zu of %zu heads%s%s)", tc->added,
                        d->L * d->H, tc->none ? ": " : "", tc->none ? tc->none : "");
    if (tc->form.values != (d->V != NULL))
        return kvc_fail("decode timing: the stored cache %s values and the data %s (got %d)",
                        tc->form.values ? "holds" : "has no", d->V ? "has" : "has none", tc->form.values);
    for (size_t i = 0; i < tm->n_done; i++)
        if (same_form(&tm->done[i].f, &tc->form)) {   /* the same formats and sizes: the same step */
            *ns = tm->done[i].ns;
            *speedup = tm->done[i].speedup;
            tm->last_mad = tm->done[i].mad;
            return 0;
        }
    if (!tm->have_base) {
        build_base(&tm->base, d);
        tm->have_base = 1;
    }
    DecodeCache c = cache_of(tc), b = cache_of(&tm->base);
    double ns_base = 0.0;
    if (decode_time_pair_mad(ns, &ns_base, &tm->last_mad, &c, &b, d->Hq, tm->q, tm->threads, tm->repeat,
                             d->V ? DECODE_FULL : DECODE_KEYS))
        return -1;
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
    tm->done[tm->n_done++] = (struct Measured){tc->form, *ns, *speedup, tm->last_mad};
    return 0;
}
