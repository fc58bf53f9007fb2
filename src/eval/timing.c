/* timing: decode_ns / decode_speedup of kvc run (see timing.h). */
#include "eval/timing.h"
#include "base/util.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct Timing {
    const Data *d;
    int threads, repeat;   /* repeat 0: adaptive rounds within TIMING_BUDGET */
    float *q;              /* (L, Hq, D) one query per query head */
    double base_ns;        /* the FP16 reference's median step; 0 until it is timed (at the first measurement) */
    struct Measured {      /* every form measured so far: one measurement per distinct form and run */
        DecodeForm f;
        double ns, mad;
    } *done;
    size_t n_done, cap_done;
    void (*hook)(void *ctx, const char *what);
    void *hook_ctx;
    TimingLast last;
    char note[384];        /* timing_note; "" when none */
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
    timing_cache_init(tc, d->L, d->H);
    for (size_t l = 0; l < d->L; l++)
        for (size_t h = 0; h < d->H; h++) {
            DataLayer dl;
            data_heads(&dl, d, l, h, 1);   /* streamed data: made a head at a time */
            MethodStored s;
            memset(&s, 0, sizeof s);
            method_store_f16(&s.K, dl.K, NULL, d->T, d->D);
            if (dl.V) method_store_f16(&s.V, dl.V, NULL, d->T, d->D);
            timing_cache_add(tc, &s);
            data_layer_free(&dl);
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
    DataLayer dl = {0};
    for (size_t i = 0; i < L * Hq; i++) {
        if (!(d->Q && N) && i % G == 0) {   /* no queries: the last key of each KV head (streamed: that head made) */
            data_layer_free(&dl);
            data_heads(&dl, d, i / Hq, (i % Hq) / G, 1);
        }
        const double *x = d->Q && N ? d->Q + i * N * D : dl.K + (T - 1) * D;
        for (size_t j = 0; j < D; j++) tm->q[i * D + j] = (float)x[j];
    }
    data_layer_free(&dl);
    return tm;
}

void timing_free(Timing *tm)
{
    if (!tm) return;
    free(tm->done);
    free(tm->q);
    free(tm);
}

void timing_set_hook(Timing *tm, void (*hook)(void *ctx, const char *what), void *ctx)
{
    tm->hook = hook;
    tm->hook_ctx = ctx;
}

const TimingLast *timing_last(const Timing *tm)
{
    return &tm->last;
}

const char *timing_note(const Timing *tm)
{
    return tm->note[0] ? tm->note : NULL;
}

static void phase(const Timing *tm, const char *what)
{
    if (tm->hook) tm->hook(tm->hook_ctx, what);
}

/* Times steps of the cache c: one untimed step, then rounds (tm->repeat, or adaptive within TIMING_BUDGET).
 * *ns = the median step, *mad the median absolute deviation of the steps from it (both in ns); *rounds,
 * *seconds (warm-up included); *tiled = decoder_tiled. 0, or -1 with kvc_fail. */
static int time_steps(const Timing *tm, const DecodeCache *c, double *ns, double *mad, size_t *rounds,
                      double *seconds, unsigned *tiled)
{
    const Data *d = tm->d;
    DecodeMode mode = data_has_values(d) ? DECODE_FULL : DECODE_KEYS;
    Decoder *dec = decoder_create(c, d->Hq, tm->threads, DECODE_FUSED);
    if (!dec) return -1;
    *tiled = decoder_tiled(dec);
    size_t cap = tm->repeat > 0 ? (size_t)tm->repeat : TIMING_MAX_ROUNDS, r = 0;
    double *t = xmalloc(cap * sizeof *t);
    float *out = xmalloc(d->L * d->Hq * d->D * sizeof *out);
    double t0 = decode_now();
    decoder_step(dec, out, tm->q, mode);   /* warm-up: first touch of the scratch, threads started */
    double start = decode_now();
    while (r < cap) {
        double a = decode_now();
        decoder_step(dec, out, tm->q, mode);
        double b = decode_now();
        t[r++] = b - a;
        if (tm->repeat == 0 && r >= TIMING_MIN_ROUNDS && b - start >= TIMING_BUDGET) break;
    }
    *seconds = decode_now() - t0;
    *rounds = r;
    *ns = 1e9 * median(t, r);
    for (size_t k = 0; k < r; k++) t[k] = fabs(1e9 * t[k] - *ns);   /* median() reordered t: no matter */
    *mad = median(t, r);
    free(out);
    free(t);
    decoder_free(dec);
    return 0;
}

/* "intN 3-bit asymmetric, groups of 32 channels" and the like, for the note. */
static void describe(char *buf, size_t cap, StoreFormat f)
{
    if (f.type != STORE_INTN) {
        store_format_name(buf, cap, f);
        return;
    }
    const char *along = f.axis == STORE_AXIS_CHANNEL ? "tokens" : "channels";
    char g[48];
    if (f.group) snprintf(g, sizeof g, "groups of %zu %s", f.group, along);
    else snprintf(g, sizeof g, "one group per %s", f.axis == STORE_AXIS_CHANNEL ? "channel" : "token");
    snprintf(buf, cap, "intN %d-bit %s, %s%s", f.bits, f.asym ? "asymmetric" : "symmetric", g,
             f.scale_type == STORE_SCALE_F32 ? ", FP32 scales" : "");
}

/* The note for a form that some tensor of decodes through the generic tiles. */
static void note_tiled(Timing *tm, const DecodeForm *f, unsigned tiled)
{
    static const char *const names[4] = {"K", "V", "the residual's K", "the residual's V"};
    const StoreFormat fmts[4] = {f->k, f->v, f->kr, f->vr};
    size_t n = (size_t)snprintf(tm->note, sizeof tm->note, "no fused kernel for");
    int first = 1;
    for (int i = 0; i < 4 && n < sizeof tm->note; i++) {
        if (!(tiled & (1u << i))) continue;
        char desc[96];
        describe(desc, sizeof desc, fmts[i]);
        /* K and V of one format are named together */
        int with_v = i % 2 == 0 && (tiled & (2u << i)) && store_format_equal(fmts[i], fmts[i + 1]);
        n += (size_t)snprintf(tm->note + n, sizeof tm->note - n, "%s %s%s (%s)", first ? "" : ",", names[i],
                              with_v ? " and V" : "", desc);
        if (with_v) i++;
        first = 0;
    }
    if (n < sizeof tm->note)
        snprintf(tm->note + n, sizeof tm->note - n, ": decoded through the generic tile path (rows dequantized to "
                 "float32 in tiles, then the float32 kernels)");
}

int timing_measure(Timing *tm, TimedCache *tc, double *ns, double *speedup)
{
    const Data *d = tm->d;
    tm->last.fresh = 0;
    tm->note[0] = '\0';
    if (tc->none || tc->added != d->L * d->H || tc->L != d->L || tc->H != d->H)
        return kvc_fail("decode timing: the stored cache is not complete (got %zu of %zu heads%s%s)", tc->added,
                        d->L * d->H, tc->none ? ": " : "", tc->none ? tc->none : "");
    if (tc->form.values != data_has_values(d))
        return kvc_fail("decode timing: the stored cache %s values and the data %s (got %d)",
                        tc->form.values ? "holds" : "has no", data_has_values(d) ? "has" : "has none", tc->form.values);
    for (size_t i = 0; i < tm->n_done; i++)
        if (same_form(&tm->done[i].f, &tc->form)) {   /* the same formats and sizes: the same step */
            *ns = tm->done[i].ns;
            tm->last_mad = tm->done[i].mad;
            *speedup = tm->base_ns / *ns;
            return 0;
        }
    int rc = 0;
    if (!(tm->base_ns > 0)) {   /* the FP16 reference, once per Timing */
        phase(tm, "timing the FP16 reference");
        TimedCache base;
        build_base(&base, d);
        DecodeCache b = cache_of(&base);
        double sec, bns = 0;
        unsigned tiled;
        double bmad;
        rc = time_steps(tm, &b, &bns, &bmad, &tm->last.base_rounds, &sec, &tiled);
        timing_cache_free(&base);
        if (rc == 0 && !(bns > 0))
            rc = kvc_fail("decode timing: the clock did not resolve a decode step of the FP16 cache (got %g ns)", bns);
        if (rc == 0) tm->base_ns = tm->last.base_ns = bns;
    }
    if (rc == 0) {
        phase(tm, "timing");
        DecodeCache c = cache_of(tc);
        rc = time_steps(tm, &c, ns, &tm->last_mad, &tm->last.rounds, &tm->last.seconds, &tm->last.tiled);
        if (rc == 0 && !(*ns > 0))
            rc = kvc_fail("decode timing: the clock did not resolve a decode step (got %g ns)", *ns);
    }
    phase(tm, NULL);
    if (rc) return -1;
    *speedup = tm->base_ns / *ns;
    tm->last.fresh = 1;
    if (tm->last.tiled) note_tiled(tm, &tc->form, tm->last.tiled);
    if (tm->n_done == tm->cap_done) {
        tm->cap_done = tm->cap_done ? 2 * tm->cap_done : 16;
        struct Measured *m = xmalloc(tm->cap_done * sizeof *m);
        if (tm->n_done) memcpy(m, tm->done, tm->n_done * sizeof *m);
        free(tm->done);
        tm->done = m;
    }
    tm->done[tm->n_done++] = (struct Measured){tc->form, *ns, tm->last_mad};
    return 0;
}
