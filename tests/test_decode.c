/* test_decode: the decode kernels (src/decode/) against the quality path and against each other.
 *
 * For every stored format (f32 ... iq4_nl, per-token and per-channel int scales, low-rank keys and values)
 * and odd shapes (T = 1, a block boundary +- 1, T not a multiple of any unit; D = 64 / 128 / 256 and
 * a D that is not a multiple of 8 or 16; G = 1, 2, 3, 4, 9 query heads per KV head; all-zero tokens and
 * channels), each implementation's output is compared with attention in double over the dequantized
 * cache (attn_forward, the quality path): relative error below DECODE_TOL. Also: fused vs. the scalar
 * `_ref` twins, bit-identical output for 1, 2 and 3 threads, and the key-side mode's max score. Formats
 * without a fused kernel (intN with 3 / 5 bits, groups of 12, W % 8 != 0) go through the generic
 * dequantized-tile path. ggml q4_1 / q5_0 / q5_1 / iq4_nl: all of the above (but D % 32 == 0), G = 1 / 2 / 4 / 8 /
 * 10, rows wider than the V tile, low-rank coefficients, and an all-zero block after a non-zero one.
 * KIVI caches (asymmetric intN keys per channel, values per token, 2 / 4 / 8 bits, FP16 parameters) with and
 * without a residual segment (f16 or another format), keys-only caches, and decode_time_pair. The other grouped
 * intN shapes (keys per token, values per channel, and KIVI's axes), symmetric and asymmetric, FP16 and FP32
 * parameters, 2 / 4 / 8 bits, g = 8 / 16 / 24 / 32 / 40 / whole row, with offsets in K and V.
 * The kernel interface: every slot of the scalar and the AVX2 KernelSet is filled. The element readers the kernels
 * use (src/store/elem.h) give store_dequantize_rows_f32's values for every type, element by element and block by
 * block (intN: code, scale and min combined in double, as store.c does).
 * The worst relative errors seen are printed as a comment line.
 * Prints PASS/FAIL lines and exits 1 on any failure.
 */
#include "base/attention.h"
#include "decode/decode.h"
#include "decode/kernels.h"
#include "base/linalg.h"
#include "base/rng.h"
#include "store/elem.h"
#include "store/store.h"
#include "base/util.h"
#include "check.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Case {
    size_t L, Hkv, G, T, D;
    StoreFormat kf, vf;
    StoreTensor *K, *V;
    float *q;        /* (L, Hq, D) */
    double *ref;     /* (L, Hq, D) attention over the dequantized cache, in double */
    double *ref_max; /* (L, Hq) max score */
} Case;

/* A format by name: store_format_parse's names, the method library's types by their type name
 * ("q4_1", "q5_0", "q5_1", "iq4_nl"), or "int3g16" = intN, 3 bits, asymmetric, groups of 16 along the row. */
static int parse_any(StoreFormat *f, const char *name)
{
    if (store_format_parse(f, name, "test") == 0) return 0;
    memset(f, 0, sizeof *f);
    if (strcmp(name, "int3g16") == 0) {
        f->type = STORE_INTN, f->bits = 3, f->asym = 1, f->group = 16;
        return 0;
    }
    for (int t = 0; t < STORE_NTYPES; t++)
        if (store_type_name((StoreType)t) && strcmp(store_type_name((StoreType)t), name) == 0) {
            f->type = (StoreType)t;
            return 0;
        }
    return -1;
}

/* K, V: N(0, 1) with token 1 and channel 2 all zero (when they exist); low rank: random factors. */
static void case_init(Case *c, const char *kname, const char *vname, size_t L, size_t Hkv, size_t G, size_t T,
                      size_t D, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->L = L, c->Hkv = Hkv, c->G = G, c->T = T, c->D = D;
    if (parse_any(&c->kf, kname) || parse_any(&c->vf, vname) || store_check(c->kf, T, D, kname) ||
        store_check(c->vf, T, D, vname)) {
        printf("FAIL decode-format-%s/%s: %s\n", kname, vname, kvc_errmsg());
        exit(1);
    }
    size_t n = L * Hkv, Hq = Hkv * G;
    rng r;
    rng_seed_u64(&r, seed);
    c->K = xcalloc(n, sizeof *c->K);
    c->V = xcalloc(n, sizeof *c->V);
    double *x = xmalloc(T * D * sizeof *x), *B = xmalloc(D * D * sizeof *B);
    for (size_t i = 0; i < n; i++)
        for (int kv = 0; kv < 2; kv++) {
            StoreFormat f = kv ? c->vf : c->kf;
            StoreTensor *st = kv ? &c->V[i] : &c->K[i];
            size_t W = f.rank ? f.rank : D;
            rng_normal_fill(&r, x, T * W);
            for (size_t t = 0; t < T; t++) {
                if (t == 1)
                    for (size_t j = 0; j < W; j++) x[t * W + j] = 0.0;
                if (W > 2) x[t * W + 2] = 0.0;
            }
            /* q4_1 ... iq4_nl: an all-zero block after a non-zero one (iq4_nl repeats the nibbles, d = 0) */
            if (f.type >= STORE_Q4_1 && f.type <= STORE_IQ4_NL && T > 3 && W >= 64)
                for (size_t j = 32; j < 64; j++) x[3 * W + j] = 0.0;
            store_alloc(st, f, T, D);
            store_quantize_f64(st, x);
            if (f.rank) {
                rng_normal_fill(&r, B, f.rank * D);
                for (size_t k = 0; k < f.rank * D; k++) B[k] /= sqrt((double)f.rank);
                store_set_basis_f64(st, B);
            }
        }
    c->q = xmalloc(L * Hq * D * sizeof *c->q);
    rng_normal_fill(&r, x, L * Hq * D < T * D ? L * Hq * D : T * D);
    for (size_t i = 0; i < L * Hq * D; i++) c->q[i] = (float)(i < T * D ? x[i] * 1.5 : 0.1 * (double)(i % 7));
    /* the reference */
    c->ref = xmalloc(L * Hq * D * sizeof *c->ref);
    c->ref_max = xmalloc(L * Hq * sizeof *c->ref_max);
    double *Kd = xmalloc(T * D * sizeof *Kd), *Vd = xmalloc(T * D * sizeof *Vd), *w = xmalloc(T * sizeof *w);
    double *qd = xmalloc(D * sizeof *qd), *s = xmalloc(T * sizeof *s);
    for (size_t l = 0; l < L; l++)
        for (size_t h = 0; h < Hkv; h++) {
            store_dequantize_f64(Kd, &c->K[l * Hkv + h]);
            store_dequantize_f64(Vd, &c->V[l * Hkv + h]);
            for (size_t g = 0; g < G; g++) {
                size_t qi = l * Hq + h * G + g;
                for (size_t j = 0; j < D; j++) qd[j] = c->q[qi * D + j];
                attn_forward(c->ref + qi * D, w, qd, Kd, Vd, T, D);
                double mx = -INFINITY;
                for (size_t t = 0; t < T; t++) {
                    double a = 0;
                    for (size_t j = 0; j < D; j++) a += Kd[t * D + j] * qd[j];
                    s[t] = a / sqrt((double)D);
                    if (s[t] > mx) mx = s[t];
                }
                c->ref_max[qi] = mx;
            }
        }
    free(x), free(B), free(Kd), free(Vd), free(w), free(qd), free(s);
}

static void case_free(Case *c)
{
    for (size_t i = 0; i < c->L * c->Hkv; i++) {
        store_free(&c->K[i]);
        store_free(&c->V[i]);
    }
    free(c->K), free(c->V), free(c->q), free(c->ref), free(c->ref_max);
}

static float *run(const Case *c, DecodeImpl impl, int threads, DecodeMode mode)
{
    DecodeCache dc = {c->L, c->Hkv, c->T, c->D, c->K, c->V, 0, NULL, NULL};
    Decoder *d = decoder_create(&dc, c->Hkv * c->G, threads, impl);
    if (!d) {
        printf("FAIL decoder-create: %s\n", kvc_errmsg());
        check_failures++;
        return NULL;
    }
    size_t n = c->L * c->Hkv * c->G * c->D;
    float *out = xmalloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    decoder_step(d, out, c->q, mode);
    decoder_free(d);
    return out;
}

static double rel_err(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i];
        num += e * e;
        den += b[i] * b[i];
        if (isnan(a[i])) return INFINITY;
    }
    return den == 0 ? sqrt(num) : sqrt(num / den);
}

static const char *const impl_name[] = {"fused", "ref", "naive"};
static double worst_err[3];
static const char *case_tag = "";   /* appended to run_case's check names (the other tuning's re-run) */
static double worst_int_keys;   /* fused, int8 / q8_0 / int4 / q4_0 keys, G >= 2 (AVX-512 VNNI's shapes; G = 1 too
                                 * where decode_avx512_tune() is not DECODE_TUNE_INTEL) */

/* One format pair and shape: every implementation vs. double; fused vs ref; thread invariance. */
static void run_case(const char *kname, const char *vname, size_t L, size_t Hkv, size_t G, size_t T, size_t D,
                     int threads_check)
{
    Case c;
    case_init(&c, kname, vname, L, Hkv, G, T, D, 1000 + T + D + G);
    size_t n = L * Hkv * G * D;
    char name[160], why[256];
    float *o[3];
    for (int impl = 0; impl < 3; impl++) {
        o[impl] = run(&c, (DecodeImpl)impl, 1, DECODE_FULL);
        if (!o[impl]) continue;
        double e = rel_err(o[impl], c.ref, n);
        if (e > worst_err[impl]) worst_err[impl] = e;
        if (impl == 0 && G >= 2 && e > worst_int_keys &&
            (!strcmp(kname, "int8") || !strcmp(kname, "q8_0") || !strcmp(kname, "int4") || !strcmp(kname, "q4_0")))
            worst_int_keys = e;
        snprintf(name, sizeof name, "decode-%s-%s/%s-T%zu-D%zu-G%zu-vs-double%s", impl_name[impl], kname, vname, T, D, G,
                 case_tag);
        snprintf(why, sizeof why, "relative error %.3g > %g", e, DECODE_TOL);
        check(e < DECODE_TOL, name, "%s", why);
    }
    if (o[0] && o[1]) {
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            num += ((double)o[0][i] - o[1][i]) * ((double)o[0][i] - o[1][i]);
            den += (double)o[1][i] * o[1][i];
        }
        double e = den == 0 ? sqrt(num) : sqrt(num / den);
        snprintf(name, sizeof name, "decode-fused-vs-ref-%s/%s-T%zu-D%zu-G%zu%s", kname, vname, T, D, G, case_tag);
        snprintf(why, sizeof why, "relative difference %.3g > %g", e, DECODE_TOL);
        check(e < DECODE_TOL, name, "%s", why);
    }
    if (threads_check && o[0]) {
        int same = 1;
        for (int th = 2; th <= 3; th++) {
            float *ot = run(&c, DECODE_FUSED, th, DECODE_FULL);
            if (!ot || memcmp(ot, o[0], n * sizeof *ot) != 0) same = 0;
            free(ot);
        }
        snprintf(name, sizeof name, "decode-threads-1-2-3-identical-%s/%s-T%zu-D%zu-G%zu%s", kname, vname, T, D, G,
                 case_tag);
        check(same, name, "the output changed with the thread count");
        float *ok = run(&c, DECODE_FUSED, 2, DECODE_KEYS);
        double worst = 0;
        for (size_t i = 0; ok && i < L * Hkv * G; i++) {
            double e = fabs(ok[i * D] - c.ref_max[i]) / (1.0 + fabs(c.ref_max[i]));
            if (!(e <= worst)) worst = e;
        }
        snprintf(name, sizeof name, "decode-keys-mode-max-score-%s-T%zu-D%zu-G%zu%s", kname, T, D, G, case_tag);
        snprintf(why, sizeof why, "max score off by %.3g", worst);
        check(ok && worst < DECODE_TOL, name, "%s", why);
        free(ok);
    }
    for (int impl = 0; impl < 3; impl++) free(o[impl]);
    case_free(&c);
}

/* One step of fmt keys and values (2 KV heads x G, T = 300, D = 128) under the AVX-512 tunings t1 and t2: 1 when
 * the output bits are the same, 0 when they differ, -1 when a run fails. Leaves the tuning as it found it. */
static int tune_same_bits(const char *fmt, size_t G, uint64_t seed, int t1, int t2)
{
    const int now = decode_avx512_tune();
    Case c;
    case_init(&c, fmt, fmt, 1, 2, G, 300, 128, seed);
    decode_avx512_tune_set(t1);
    float *a = run(&c, DECODE_FUSED, 1, DECODE_FULL);
    decode_avx512_tune_set(t2);
    float *b = run(&c, DECODE_FUSED, 1, DECODE_FULL);
    decode_avx512_tune_set(now);
    const int r = !a || !b ? -1 : memcmp(a, b, 2 * G * 128 * sizeof *a) == 0;
    free(a), free(b);
    case_free(&c);
    return r;
}

/* ---- KIVI caches and the residual segment ---------------------------------------------------------------- */

typedef struct KCase {
    size_t L, Hkv, G, T, Tr, D;
    StoreTensor *K, *V, *Kr, *Vr;
    float *q;
    double *ref, *ref_max;
} KCase;

/* KIVI's stored form: keys intN `bits` asymmetric per channel in groups of g tokens, values per token in groups
 * of g channels, FP16 parameters; then Tr residual tokens in format rname (K and V). Keys have a per-channel
 * offset (like real keys; the mins are then far from 0), token 1 is all zero (zero value groups) and channel 3
 * of the first key group is zero (a zero key group). */
static void kcase_init(KCase *c, StoreFormat kf, StoreFormat vf, size_t L, size_t Hkv, size_t G, size_t T, size_t D,
                       size_t Tr, const char *rname, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->L = L, c->Hkv = Hkv, c->G = G, c->T = T, c->Tr = Tr, c->D = D;
    size_t n = L * Hkv, Hq = Hkv * G, Ta = T + Tr, g = kf.group;
    int kivi = kf.asym && vf.asym && kf.axis == STORE_AXIS_CHANNEL && vf.axis == STORE_AXIS_TOKEN;
    StoreFormat rf;
    if (Tr && (parse_any(&rf, rname) || store_check(rf, Tr, D, rname))) {
        printf("FAIL decode-kivi-format-%s: %s\n", rname, kvc_errmsg());
        exit(1);
    }
    rng r;
    rng_seed_u64(&r, seed);
    c->K = xcalloc(n, sizeof *c->K), c->V = xcalloc(n, sizeof *c->V);
    if (Tr) c->Kr = xcalloc(n, sizeof *c->Kr), c->Vr = xcalloc(n, sizeof *c->Vr);
    double *x = xmalloc(Ta * D * sizeof *x);
    for (size_t i = 0; i < n; i++)
        for (int kv = 0; kv < 2; kv++) {
            rng_normal_fill(&r, x, Ta * D);
            for (size_t t = 0; t < Ta; t++)
                for (size_t j = 0; j < D; j++) {
                    if (!kv) x[t * D + j] += 0.7 * (double)(j % 5) - 1.2;
                    if (kv && !kivi) x[t * D + j] += 0.9 * (double)(j % 3) - 0.6;   /* offsets in V too */
                    if (t == 1 || ((!kv || !kivi) && j == 3 && t < (g ? g : T))) x[t * D + j] = 0.0;
                }
            StoreTensor *st = kv ? &c->V[i] : &c->K[i];
            store_alloc(st, kv ? vf : kf, T, D);
            store_quantize_f64(st, x);
            if (Tr) {
                StoreTensor *rt = kv ? &c->Vr[i] : &c->Kr[i];
                store_alloc(rt, rf, Tr, D);
                store_quantize_f64(rt, x + T * D);
            }
        }
    c->q = xmalloc(L * Hq * D * sizeof *c->q);
    double *qd = xmalloc(D * sizeof *qd);
    for (size_t i = 0; i < L * Hq * D; i++) {
        rng_normal_fill(&r, qd, 1);
        c->q[i] = (float)(qd[0] * 1.5);
    }
    c->ref = xmalloc(L * Hq * D * sizeof *c->ref);
    c->ref_max = xmalloc(L * Hq * sizeof *c->ref_max);
    double *Kd = xmalloc(Ta * D * sizeof *Kd), *Vd = xmalloc(Ta * D * sizeof *Vd), *w = xmalloc(Ta * sizeof *w);
    for (size_t l = 0; l < L; l++)
        for (size_t h = 0; h < Hkv; h++) {
            store_dequantize_f64(Kd, &c->K[l * Hkv + h]);
            store_dequantize_f64(Vd, &c->V[l * Hkv + h]);
            if (Tr) {
                store_dequantize_f64(Kd + T * D, &c->Kr[l * Hkv + h]);
                store_dequantize_f64(Vd + T * D, &c->Vr[l * Hkv + h]);
            }
            for (size_t gq = 0; gq < G; gq++) {
                size_t qi = l * Hq + h * G + gq;
                for (size_t j = 0; j < D; j++) qd[j] = c->q[qi * D + j];
                attn_forward(c->ref + qi * D, w, qd, Kd, Vd, Ta, D);
                double mx = -INFINITY;
                for (size_t t = 0; t < Ta; t++) {
                    double a = 0;
                    for (size_t j = 0; j < D; j++) a += Kd[t * D + j] * qd[j];
                    if (a / sqrt((double)D) > mx) mx = a / sqrt((double)D);
                }
                c->ref_max[qi] = mx;
            }
        }
    free(x), free(qd), free(Kd), free(Vd), free(w);
}

static void kcase_free(KCase *c)
{
    for (size_t i = 0; i < c->L * c->Hkv; i++) {
        store_free(&c->K[i]);
        store_free(&c->V[i]);
        if (c->Tr) {
            store_free(&c->Kr[i]);
            store_free(&c->Vr[i]);
        }
    }
    free(c->K), free(c->V), free(c->Kr), free(c->Vr), free(c->q), free(c->ref), free(c->ref_max);
}

static DecodeCache kcache(const KCase *c, int keys_only)
{
    DecodeCache dc = {.L = c->L, .Hkv = c->Hkv, .T = c->T, .D = c->D, .K = c->K, .V = keys_only ? NULL : c->V,
                      .Tr = c->Tr, .Kr = c->Kr, .Vr = keys_only ? NULL : c->Vr};
    return dc;
}

static float *krun(const KCase *c, DecodeImpl impl, int threads, DecodeMode mode, int keys_only)
{
    DecodeCache dc = kcache(c, keys_only);
    Decoder *d = decoder_create(&dc, c->Hkv * c->G, threads, impl);
    if (!d) {
        printf("FAIL decoder-create-kivi: %s\n", kvc_errmsg());
        check_failures++;
        return NULL;
    }
    size_t n = c->L * c->Hkv * c->G * c->D;
    float *out = xmalloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    decoder_step(d, out, c->q, mode);
    decoder_free(d);
    return out;
}

static double max_err(const float *o, const KCase *c)
{
    double worst = 0;
    for (size_t i = 0; o && i < c->L * c->Hkv * c->G; i++) {
        double e = fabs(o[i * c->D] - c->ref_max[i]) / (1.0 + fabs(c->ref_max[i]));
        if (!(e <= worst)) worst = e;
    }
    return o ? worst : INFINITY;
}

/* One KIVI case: every implementation vs. double, fused vs. ref; with `more`: threads 1 / 2 bit-identical, the
 * key-side mode, and the keys-only cache (V = NULL) in DECODE_KEYS mode. */
static void run_intn(const char *what, StoreFormat kf, StoreFormat vf, size_t L, size_t Hkv, size_t G, size_t T,
                     size_t D, size_t Tr, const char *rname, int more)
{
    KCase c;
    kcase_init(&c, kf, vf, L, Hkv, G, T, D, Tr, rname,
               7000 + (uint64_t)kf.bits + T + D + Tr + kf.group + 100 * (uint64_t)(kf.axis + 2 * vf.axis + 4 * kf.asym));
    size_t n = L * Hkv * G * D;
    char tag[160], name[240], why[256];
    snprintf(tag, sizeof tag, "%s%d-g%zu-T%zu-D%zu-G%zu-Tr%zu%s%s", what, kf.bits, kf.group, T, D, G, Tr, Tr ? "-" : "",
             Tr ? rname : "");
    float *o[3];
    for (int impl = 0; impl < 3; impl++) {
        o[impl] = krun(&c, (DecodeImpl)impl, 1, DECODE_FULL, 0);
        double e = o[impl] ? rel_err(o[impl], c.ref, n) : INFINITY;
        if (e > worst_err[impl]) worst_err[impl] = e;
        snprintf(name, sizeof name, "decode-%s-%s-vs-double", impl_name[impl], tag);
        snprintf(why, sizeof why, "relative error %.3g > %g", e, DECODE_TOL);
        check(e < DECODE_TOL, name, "%s", why);
    }
    if (o[0] && o[1]) {
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            num += ((double)o[0][i] - o[1][i]) * ((double)o[0][i] - o[1][i]);
            den += (double)o[1][i] * o[1][i];
        }
        double e = den == 0 ? sqrt(num) : sqrt(num / den);
        snprintf(name, sizeof name, "decode-fused-vs-ref-%s", tag);
        snprintf(why, sizeof why, "relative difference %.3g > %g", e, DECODE_TOL);
        check(e < DECODE_TOL, name, "%s", why);
    }
    if (more && o[0]) {
        float *o2 = krun(&c, DECODE_FUSED, 2, DECODE_FULL, 0);
        snprintf(name, sizeof name, "decode-threads-1-2-identical-%s", tag);
        check(o2 && memcmp(o2, o[0], n * sizeof *o2) == 0, name, "the output changed with the thread count");
        free(o2);
        float *k1 = krun(&c, DECODE_FUSED, 1, DECODE_KEYS, 0), *k2 = krun(&c, DECODE_FUSED, 2, DECODE_KEYS, 1);
        float *k3 = krun(&c, DECODE_REF, 1, DECODE_KEYS, 1);
        double e1 = max_err(k1, &c), e2 = max_err(k2, &c), e3 = max_err(k3, &c);
        snprintf(name, sizeof name, "decode-keys-mode-max-score-%s", tag);
        snprintf(why, sizeof why, "max score off by %.3g (full cache), %.3g (keys only), %.3g (keys only, ref)", e1,
                 e2, e3);
        check(e1 < DECODE_TOL && e2 < DECODE_TOL && e3 < DECODE_TOL, name, "%s", why);
        snprintf(name, sizeof name, "decode-keys-only-cache-same-max-%s", tag);
        check(k1 && k2 && memcmp(k1, k2, n * sizeof *k1) == 0, name, "keys-only cache's key mode differs from the full cache's");
        free(k1), free(k2), free(k3);
    }
    for (int impl = 0; impl < 3; impl++) free(o[impl]);
    kcase_free(&c);
}

static void run_kivi(int bits, size_t g, size_t L, size_t Hkv, size_t G, size_t T, size_t D, size_t Tr,
                     const char *rname, int more)
{
    run_intn("kivi", store_intn_format(bits, 1, STORE_AXIS_CHANNEL, g, STORE_SCALE_F16),
             store_intn_format(bits, 1, STORE_AXIS_TOKEN, g, STORE_SCALE_F16), L, Hkv, G, T, D, Tr, rname, more);
}

/* The method library's other intN shapes: keys and values with the same axis (keys per token: groups along the
 * row; values per channel: groups along the column), symmetric and asymmetric, FP16 and FP32 parameters. */
static void run_shape(int bits, int asym, StoreAxis kaxis, StoreAxis vaxis, StoreScaleType st, size_t g, size_t G,
                      size_t T, size_t D, int more)
{
    char what[64];
    snprintf(what, sizeof what, "intn-k%s-v%s-%s-%s-", kaxis == STORE_AXIS_TOKEN ? "tok" : "ch",
             vaxis == STORE_AXIS_TOKEN ? "tok" : "ch", asym ? "asym" : "sym", st == STORE_SCALE_F32 ? "f32" : "f16");
    run_intn(what, store_intn_format(bits, asym, kaxis, g, st), store_intn_format(bits, asym, vaxis, g, st), 1, 2, G, T,
             D, 0, "", more);
}

static void intn_tests(void)
{
    static const int bits[] = {2, 4, 8};
    for (int b = 0; b < 3; b++)
        for (int asym = 0; asym < 2; asym++)
            for (int st = 0; st < 2; st++) {
                StoreScaleType sc = st ? STORE_SCALE_F32 : STORE_SCALE_F16;
                /* the new shapes: keys per token, values per channel */
                run_shape(bits[b], asym, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, sc, 32, 4, 2100, 128, b == 1);
                run_shape(bits[b], asym, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, sc, 8, 1, 77, 64, 0);
                run_shape(bits[b], asym, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, sc, 0, 3, 300, 256, 0);
                run_shape(bits[b], asym, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, sc, 32, 2, 1, 64, 0);
                /* KIVI's axes, symmetric or FP32 */
                if (!asym || st) run_shape(bits[b], asym, STORE_AXIS_CHANNEL, STORE_AXIS_TOKEN, sc, 32, 4, 2100, 128, 0);
                /* both per token, both per channel */
                run_shape(bits[b], asym, STORE_AXIS_TOKEN, STORE_AXIS_TOKEN, sc, 16, 1, 300, 128, 0);
                run_shape(bits[b], asym, STORE_AXIS_CHANNEL, STORE_AXIS_CHANNEL, sc, 8, 2, 301, 64, 0);
            }
    /* groups that are not a multiple of a 16 / 32-column unit (4 / 2 bits: 8 natural columns at a time), a
     * W not a multiple of the unit, GQA 4 with threads, one group per row with W % 16 != 0 */
    run_shape(4, 1, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F16, 8, 4, 2300, 128, 1);
    run_shape(2, 0, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F32, 16, 4, 4100, 128, 1);
    run_shape(2, 1, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F16, 24, 2, 90, 72, 0);
    run_shape(4, 0, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F16, 0, 5, 130, 72, 0);
    run_shape(8, 1, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F32, 40, 2, 2049, 120, 0);
    /* still the tile path: 3 and 5 bits, groups of 12, W % 8 != 0 */
    run_shape(3, 1, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F16, 32, 2, 300, 128, 0);
    run_shape(5, 0, STORE_AXIS_CHANNEL, STORE_AXIS_TOKEN, STORE_SCALE_F32, 32, 2, 300, 128, 0);
    run_shape(4, 1, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F16, 12, 2, 300, 128, 0);
    run_shape(4, 0, STORE_AXIS_TOKEN, STORE_AXIS_CHANNEL, STORE_SCALE_F16, 8, 2, 100, 44, 0);
}

static void kivi_tests(void)
{
    static const int bits[] = {2, 4, 8};
    /* bits 2 / 4 / 8; T not a multiple of g nor of the block; the FP16 residual; GQA */
    for (int b = 0; b < 3; b++) {
        run_kivi(bits[b], 32, 1, 2, 4, 2100, 128, 0, "", 1);
        run_kivi(bits[b], 32, 1, 2, 1, 2100, 128, 128, "f16", 1);
        run_kivi(bits[b], 32, 2, 1, 3, 77, 64, 20, "f16", 0);
        run_kivi(bits[b], 0, 1, 1, 2, 300, 256, 5, "f16", 0);   /* one group per column / row */
        run_kivi(bits[b], 32, 1, 1, 1, 1, 64, 0, "", 0);        /* T = 1 */
    }
    /* 4-bit keys of 3, 6 and 8 heads at D = 128: two head groups (G = 6, 8), groups of 48 tokens (tiles cut at group
     * ends) and of 64 */
    run_kivi(4, 32, 1, 1, 8, 300, 128, 0, "", 0);
    run_kivi(4, 48, 1, 2, 3, 2100, 128, 0, "", 1);
    run_kivi(4, 64, 1, 1, 6, 333, 128, 5, "f16", 0);
    /* a group crossing the block boundary (2048 % 48 != 0), D = 256, G = 9 */
    run_kivi(4, 48, 1, 1, 9, 2200, 256, 0, "", 1);
    run_kivi(2, 16, 1, 2, 2, 4097, 64, 3, "f16", 1);
    /* an odd group: not fused, the generic tile path */
    run_kivi(4, 5, 1, 2, 2, 300, 128, 7, "f16", 1);
    run_kivi(4, 32, 1, 1, 2, 100, 40, 0, "", 0);   /* W % 8 != 0: tile path too */
    /* value groups not a multiple of the AVX2 unit (natural-order units), more groups per row than 8 (scalar
     * weights), rows not a multiple of the unit (natural-order tail columns) */
    run_kivi(4, 8, 1, 1, 2, 300, 128, 0, "", 0);
    run_kivi(2, 16, 1, 2, 2, 301, 128, 0, "", 0);
    run_kivi(2, 8, 1, 1, 5, 100, 40, 0, "", 0);
    run_kivi(4, 0, 1, 1, 3, 90, 72, 9, "f16", 0);
    run_kivi(2, 24, 1, 1, 1, 90, 72, 0, "", 0);
    run_kivi(8, 0, 1, 1, 4, 70, 72, 0, "", 0);
    /* residual in another format; residual-heavy (T small, Tr large, two residual blocks) */
    run_kivi(4, 32, 1, 2, 2, 200, 128, 300, "int8", 1);
    run_kivi(2, 32, 1, 1, 4, 3, 128, 2100, "q8_0", 1);
    run_kivi(8, 32, 1, 1, 1, 1, 128, 2050, "f16", 1);
    /* bad input: a residual without tensors, a residual of the wrong shape, Vr without V */
    KCase c;
    kcase_init(&c, store_intn_format(4, 1, STORE_AXIS_CHANNEL, 32, STORE_SCALE_F16),
               store_intn_format(4, 1, STORE_AXIS_TOKEN, 32, STORE_SCALE_F16), 1, 1, 1, 40, 64, 10, "f16", 1);
    DecodeCache dc = kcache(&c, 0);
    dc.Kr = NULL;
    check(decoder_create(&dc, 1, 1, DECODE_FUSED) == NULL && strstr(kvc_errmsg(), "residual"), "decode-rejects-residual-without-kr",
          "%s", kvc_errmsg());
    dc = kcache(&c, 0);
    dc.Tr = 11;
    check(decoder_create(&dc, 1, 1, DECODE_FUSED) == NULL && strstr(kvc_errmsg(), "Kr"), "decode-rejects-residual-bad-shape",
          "%s", kvc_errmsg());
    dc = kcache(&c, 1);
    dc.Vr = c.Vr;
    check(decoder_create(&dc, 1, 1, DECODE_FUSED) == NULL, "decode-rejects-vr-without-v", "accepted");
    /* decode_time_pair: a KIVI cache with its residual against f16 tensors of another shape */
    Case f;
    case_init(&f, "f16", "f16", 1, 1, 1, 64, 64, 1);
    DecodeCache a = kcache(&c, 0), b = {.L = 1, .Hkv = 1, .T = 64, .D = 64, .K = f.K, .V = f.V};
    double na = -1, nb = -1;
    check(decode_time_pair(&na, &nb, &a, &b, 1, c.q, 2, 3, DECODE_FULL) == 0 && na > 0 && nb > 0, "decode-time-pair",
          "no positive times");
    DecodeCache ak = kcache(&c, 1), bk = b;
    bk.V = NULL;
    na = nb = -1;
    check(decode_time_pair(&na, &nb, &ak, &bk, 1, c.q, 1, 2, DECODE_KEYS) == 0 && na > 0 && nb > 0,
          "decode-time-pair-keys-only", "no positive times");
    check(decode_time_pair(&na, &nb, &ak, &b, 1, c.q, 1, 2, DECODE_FULL) == -1 && strstr(kvc_errmsg(), "keys-only"),
          "decode-time-pair-rejects-full-on-keys-only", "%s", kvc_errmsg());
    check(decode_time_pair(&na, &nb, &a, &b, 0, c.q, 1, 3, DECODE_FULL) == -1, "decode-time-pair-rejects-bad-heads",
          "accepted Hq = 0");
    b.Tr = 5;
    check(decode_time_pair(&na, &nb, &a, &b, 1, c.q, 1, 3, DECODE_FULL) == -1, "decode-time-pair-rejects-bad-cache",
          "accepted a residual without tensors");
    case_free(&f);
    kcase_free(&c);
}

/* Every slot of a kernel set is filled (decode.c calls them without a check). */
static void slot_tests(void)
{
    const KernelSet *sets[3] = {&decode_kernels_ref, decode_kernels_avx2(), decode_kernels_avx512(1)};
    for (int i = 0; i < 3; i++) {
        const KernelSet *ks = sets[i];
        if (!ks) continue;
        char name[64], why[64] = "";
        for (int t = 0; t < STORE_NTYPES; t++)
            if (!ks->scores[t] || !ks->vacc[t]) snprintf(why, sizeof why, "no kernel for type %d", t);
        if (!ks->col_order || !ks->max || !ks->exp_sum || !ks->read_sum) snprintf(why, sizeof why, "a missing piece");
        snprintf(name, sizeof name, "decode-kernel-slots-%s", ks->name);
        check(why[0] == 0, name, why);
    }
}

/* T x W rows of N(0, 1) stored as fmt (f, st), their kernel view k, the rows dequantized (deq, T x W floats) and,
 * given a kernel set ks, its column order (perm: kernel position -> natural column; else NULL). int_rows_free frees
 * them. */
typedef struct IntRows {
    StoreFormat f;
    StoreTensor st;
    KRows k;
    float *deq;
    size_t *perm;
} IntRows;

static void int_rows(IntRows *x, const char *fmt, size_t T, size_t W, rng *r, const KernelSet *ks)
{
    parse_any(&x->f, fmt);
    store_alloc(&x->st, x->f, T, W);
    double *v = xmalloc(T * W * sizeof *v);
    rng_normal_fill(r, v, T * W);
    store_quantize_f64(&x->st, v);
    free(v);
    x->deq = xmalloc(T * W * sizeof *x->deq);
    store_dequantize_rows_f32(x->deq, &x->st, 0, T);
    memset(&x->k, 0, sizeof x->k);
    x->k.type = x->f.type, x->k.codes = x->st.codes, x->k.row_bytes = x->st.row_bytes, x->k.W = W;
    x->k.rscale = store_type_is_int(x->f.type) && x->f.axis == STORE_AXIS_TOKEN ? x->st.scales : NULL;
    x->perm = NULL;
    if (ks) {
        x->perm = xmalloc(W * sizeof *x->perm);
        ks->col_order(x->perm, x->f.type, W);
    }
}

static void int_rows_free(IntRows *x)
{
    free(x->deq), free(x->perm);
    store_free(&x->st);
}

/* The AVX-512 set's int8 / q8_0 / int4 / q4_0 key kernels with and without VNNI (integer dot products over the query in three
 * base-256 digits) against scores in double over the dequantized rows: W = 64 .. 576 (past the VNNI width limit),
 * G = 1 / 2 / 4 (vn_tiled: no tile buffer) / 3 / 5 / 8 (the buffer), n not a multiple of the 16-row tile, t0 > 0; a query of N(0, 1), one with an outlier
 * channel 100 x the rest, an all-zero one and one of 1e-35 x N(0, 1) (too small for the integer scale: the float32
 * kernel instead). Error: max_i |s_i - ref_i| / max_i sum_j |q_j k_ij| per head (the
 * size of the products, as cancelling sums make |ref| itself arbitrarily small); the worst printed. */
static void vnni_score_tests(void)
{
    const KernelSet *sets[2] = {decode_kernels_avx512(1), decode_kernels_avx512(0)};
    if (!sets[0] || !sets[1]) return;
    const int have_vnni = (decode_cpu_features() & DECODE_CPU_AVX512VNNI) != 0;
    static const size_t Ws[] = {64, 128, 192, 512, 576}, Gs[] = {1, 2, 3, 4, 5, 8}, ns[] = {1, 17, 40};
    static const char *const fmts[] = {"int8", "q8_0", "int4", "q4_0"};
    double worst[4][2][2] = {{{0}}};   /* [format][vnni, float][plain query, outlier query] */
    size_t amx_checked = 0;
    rng r;
    rng_seed_u64(&r, 11);
    for (size_t fi = 0; fi < 4; fi++)
        for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++) {
            const size_t W = Ws[wi], T = 64, t0 = 5;
            IntRows x;
            int_rows(&x, fmts[fi], T, W, &r, sets[0]);
            for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (int qk = 0; qk < 4; qk++) {   /* N(0, 1), outlier, zero, 1e-35 x N(0, 1) */
                        const size_t G = Gs[gi], n = ns[ni];
                        float *q = xmalloc(G * W * sizeof *q), *s = xmalloc(G * 64 * sizeof *s);
                        float *qo = xmalloc(G * W * sizeof *qo);   /* q in the kernels' column order */
                        float *scr = xmalloc(DECODE_SCRATCH(G, W) * sizeof *scr);
                        double *qd = xmalloc(G * W * sizeof *qd);
                        rng_normal_fill(&r, qd, G * W);
                        for (size_t i = 0; i < G * W; i++) q[i] = qk == 2 ? 0.0f : (float)(qd[i] * (qk == 3 ? 1e-35 : 1.0));
                        if (qk == 1)
                            for (size_t g = 0; g < G; g++) q[g * W + 3 * g % W] = 100.0f;
                        for (size_t g = 0; g < G; g++)
                            for (size_t j = 0; j < W; j++) qo[g * W + j] = q[g * W + x.perm[j]];
                        for (int si = 0; si < 2; si++) {
                            sets[si]->scores[x.f.type](s, 64, qo, G, &x.k, t0, n, scr);
                            double e = 0;
                            for (size_t g = 0; g < G; g++) {
                                double mx = 0, de = 0;
                                for (size_t i = 0; i < n; i++) {
                                    double ref = 0, mag = 0;
                                    for (size_t j = 0; j < W; j++) {
                                        const double pj = (double)q[g * W + j] * x.deq[(t0 + i) * W + j];
                                        ref += pj, mag += fabs(pj);
                                    }
                                    if (mag > mx) mx = mag;
                                    double d = fabs(s[g * 64 + i] - ref);
                                    if (!(d <= de)) de = d;
                                }
                                double eg = mx > 0 ? de / mx : de;
                                if (!(eg <= e)) e = eg;
                            }
                            double *w = &worst[fi][si][qk == 1];
                            if (!(e <= *w)) *w = e;
                            char name[128];
                            snprintf(name, sizeof name, "decode-avx512%s-scores-%s-W%zu-G%zu-n%zu-q%d%s", si ? "" : "-vnni",
                                     fmts[fi], W, G, n, qk, case_tag);
                            check(e < DECODE_TOL, name, "max |s - ref| / max sum |q k| = %.3g", e);
                        }
                        if ((fi == 0 || fi == 2) && decode_avx512_amx()) {   /* int8 / int4: AMX tiles, the VNNI kernels' bits */
                            float *s2 = xmalloc(G * 64 * sizeof *s2);
                            for (size_t i = 0; i < G * 64; i++) s[i] = s2[i] = -7.0f;
                            sets[0]->scores[x.f.type](s, 64, qo, G, &x.k, t0, n, scr);
                            decode_avx512_amx_set(0);
                            sets[0]->scores[x.f.type](s2, 64, qo, G, &x.k, t0, n, scr);
                            decode_avx512_amx_set(1);
                            char name[128];
                            snprintf(name, sizeof name, "decode-avx512-amx-scores-%s-W%zu-G%zu-n%zu-q%d%s", fmts[fi], W, G, n, qk, case_tag);
                            check(memcmp(s, s2, G * 64 * sizeof *s) == 0, name, "AMX and VNNI scores differ");
                            /* the shapes amx_takes accepts (the rest compare the VNNI kernels with themselves) */
                            if (G >= 2 && G <= 8 && (fi == 0 ? W == 64 || W == 128 : W == 128 && G >= 5)) amx_checked++;
                            free(s2);
                        }
                        free(q), free(qo), free(s), free(scr), free(qd);
                    }
            int_rows_free(&x);
        }
    for (int si = 0; si < 2; si++)
        printf("# avx512 %s key scores%s vs double (max |s - ref| / max sum |q k|; outlier query in brackets): int8 %.2g "
               "(%.2g), q8_0 %.2g (%.2g), int4 %.2g (%.2g), q4_0 %.2g (%.2g)\n",
               si ? "float32" : have_vnni ? "VNNI" : "(no VNNI on this CPU: float32)", case_tag, worst[0][si][0], worst[0][si][1],
               worst[1][si][0], worst[1][si][1], worst[2][si][0], worst[2][si][1], worst[3][si][0], worst[3][si][1]);
    if (decode_avx512_amx())
        printf("# avx512 int8 / int4 key scores with AMX tile products: the VNNI kernels' bits in %zu cases of AMX shapes%s\n",
               amx_checked, case_tag);
    else
        printf("# avx512 int8 / int4 key scores with AMX: not available on this CPU or OS (or KVC_ISA=avx512-noamx); skipped%s\n", case_tag);
}

/* The VNNI set's int8 / int4 / q4_0 value slots (integer sums over the weights in three base-256 digits, per tile of 64
 * tokens) against the weighted sums in double over the dequantized rows, and against the float32 set: W = 64 ..
 * 576 (64 and 576: not taken, the float kernels), G = 1, 2, 5, 6, 8, 9 heads (2-8 of int8 / int4 with AMX: each head the one-head kernel's bits), n = 1 .. 200 (tails of the 4-token groups and
 * of the tiles), t0 > 0, acc not zero on entry (the slot adds); weights uniform in [0, 1), exp(8 N(0, 1)) (a wide
 * range), all zero, one 1 among 1e-30s, signed in [-1, 1), and one +inf in the last head (not finite: the float32
 * kernel, the same bits as the float32 set; so too two or more heads). Error per head: max_j |acc_j - ref_j| / max_j sum_i |w_i v_ij| (the
 * size of the products); the worst is printed. */
static void vnni_value_tests(void)
{
    const KernelSet *sets[2] = {decode_kernels_avx512(1), decode_kernels_avx512(0)};
    if (!sets[0] || !sets[1]) return;
    const int have_vnni = (decode_cpu_features() & DECODE_CPU_AVX512VNNI) != 0;
    static const size_t Ws[] = {64, 128, 256, 384, 512, 576}, ns[] = {1, 3, 4, 17, 64, 65, 200}, Gs[] = {1, 2, 5, 6, 8, 9};
    static const char *const fmts[] = {"int8", "int4", "q4_0"};
    double worst[3][2] = {{0}};   /* [format][vnni set, float32 set] */
    size_t amx_vals_checked = 0;
    rng r;
    rng_seed_u64(&r, 13);
    for (size_t fi = 0; fi < 3; fi++)
        for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++) {
            const size_t W = Ws[wi], T = 210, t0 = 5;
            IntRows x;
            int_rows(&x, fmts[fi], T, W, &r, sets[0]);
            for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (int wk = 0; wk < 6; wk++) {
                        const size_t n = ns[ni], G = Gs[gi], lp = n + 3;
                        float *p = xmalloc(G * lp * sizeof *p), *acc[2], *scr = xmalloc(DECODE_SCRATCH(G, W) * sizeof *scr);
                        float *a0 = xmalloc(G * W * sizeof *a0);
                        for (size_t i = 0; i < G * lp; i++) {
                            const double u = rng_next_double(&r);
                            p[i] = wk == 0 ? (float)u : wk == 1 ? (float)exp(8.0 * rng_standard_normal(&r) - 40.0)
                                 : wk == 2 ? 0.0f : wk == 3 ? (i % lp == n / 2 ? 1.0f : 1e-30f) : (float)(2.0 * u - 1.0);
                        }
                        if (wk == 5) p[(G - 1) * lp + n - 1] = INFINITY;
                        for (size_t j = 0; j < G * W; j++) a0[j] = (float)rng_standard_normal(&r);
                        for (int si = 0; si < 2; si++) {
                            acc[si] = xmalloc(G * W * sizeof *acc[si]);
                            memcpy(acc[si], a0, G * W * sizeof *a0);
                            sets[si]->vacc[x.f.type](acc[si], p, lp, G, &x.k, t0, n, scr);
                        }
                        char name[128];
                        /* two to eight heads of int8 / int4 with AMX: each head's sums are the one-head kernel's, bit for bit */
                        const int amx_vals = decode_avx512_amx() && (decode_cpu_features() & DECODE_CPU_AVX512VBMI) && fi < 2 && G >= 2 && G <= 8 && W % 128 == 0 && W <= 512;
                        if (amx_vals && wk != 5) {
                            float *a1 = xmalloc(G * W * sizeof *a1);
                            memcpy(a1, a0, G * W * sizeof *a0);
                            for (size_t g = 0; g < G; g++) sets[0]->vacc[x.f.type](a1 + g * W, p + g * lp, lp, 1, &x.k, t0, n, scr);
                            snprintf(name, sizeof name, "decode-avx512-amx-values-%s-W%zu-G%zu-n%zu-w%d%s", fmts[fi], W, G, n, wk,
                                     case_tag);
                            check(memcmp(acc[0], a1, G * W * sizeof *a0) == 0, name, "the heads' sums differ from the one-head kernel's");
                            amx_vals_checked++;
                            free(a1);
                        } else if (wk == 5 || G > 1) {   /* not taken: the float32 kernel's bits (two or more heads without AMX: measured slower) */
                            snprintf(name, sizeof name, "decode-avx512-vnni-values-%s-W%zu-G%zu-n%zu-w%d-as-float32%s", fmts[fi],
                                     W, G, n, wk, case_tag);
                            check(memcmp(acc[0], acc[1], G * W * sizeof *a0) == 0, name,
                                  "the VNNI set's sums differ from the float32 set's");
                            free(p), free(scr), free(a0), free(acc[0]), free(acc[1]);
                            continue;
                        }
                        if (have_vnni && W % 128 == 0 && W <= 512 && wk == 0 && n == 200 && (G == 1 || amx_vals)) {   /* the integer sums are taken */
                            snprintf(name, sizeof name, "decode-avx512-vnni-values-taken-%s-W%zu-G%zu%s", fmts[fi], W, G, case_tag);
                            check(memcmp(acc[0], acc[1], G * W * sizeof *a0) != 0, name, "the same bits as the float32 set");
                        }
                        for (int si = 0; si < 2; si++) {
                            double e = 0;
                            for (size_t g = 0; g < G; g++) {
                                double de = 0, mx = 0;
                                for (size_t j = 0; j < W; j++) {   /* kernel position j holds column perm[j] */
                                    double ref = a0[g * W + j], mag = fabs(a0[g * W + j]);
                                    for (size_t i = 0; i < n; i++) {
                                        const double pv = (double)p[g * lp + i] * x.deq[(t0 + i) * W + x.perm[j]];
                                        ref += pv, mag += fabs(pv);
                                    }
                                    if (mag > mx) mx = mag;
                                    const double d = fabs(acc[si][g * W + j] - ref);
                                    if (!(d <= de)) de = d;
                                }
                                const double eg = mx > 0 ? de / mx : de;
                                if (!(eg <= e)) e = eg;
                            }
                            if (!(e <= worst[fi][si])) worst[fi][si] = e;
                            snprintf(name, sizeof name, "decode-avx512%s-values-%s-W%zu-G%zu-n%zu-w%d%s", si ? "" : "-vnni",
                                     fmts[fi], W, G, n, wk, case_tag);
                            check(e < 2e-6, name, "max |acc - ref| / max sum |w v| = %.3g", e);
                        }
                        free(p), free(scr), free(a0), free(acc[0]), free(acc[1]);
                    }
            int_rows_free(&x);
        }
    printf("# avx512 int8 / int4 / q4_0 values vs double (max |acc - ref| / max sum |w v|): %s %.2g / %.2g / %.2g, float32 "
           "%.2g / %.2g / %.2g\n", have_vnni ? "VNNI" : "(no VNNI on this CPU: float32)", worst[0][0], worst[1][0], worst[2][0],
           worst[0][1], worst[1][1], worst[2][1]);
    if (decode_avx512_amx())
        printf("# avx512 int8 / int4 values of 2 to 8 heads with AMX tile products: the one-head kernel's bits in %zu cases%s\n",
               amx_vals_checked, case_tag);
    else
        printf("# avx512 int8 / int4 values with AMX: not available on this CPU or OS (or KVC_ISA=avx512-noamx); skipped%s\n", case_tag);
}

/* A NaN in a query (keys) or a weight (values) of the integer slots: the float32 kernel's result, NaN throughout
 * the head, wherever the NaN sits (here in the first 16 lanes read, which a running max over later chunks would
 * lose); the AVX2 set's exact int4 keys (one head, W = 128) with a NaN and with an inf. */
static void vnni_nan_tests(void)
{
    const KernelSet *a2 = decode_kernels_avx2();
    if (a2) {
        rng r;
        rng_seed_u64(&r, 15);
        IntRows x;
        int_rows(&x, "int4", 100, 128, &r, NULL);
        float q[128], s[100];
        for (int bad = 0; bad < 2; bad++) {
            for (size_t j = 0; j < 128; j++) q[j] = (float)rng_standard_normal(&r);
            q[5] = bad ? INFINITY : NAN;
            a2->scores[STORE_INT4](s, 100, q, 1, &x.k, 0, 100, NULL);
            int ok = 1;   /* NaN: every score NaN; inf: every score inf, -inf or NaN (inf x 0 codes) */
            for (size_t i = 0; i < 100; i++) ok &= bad ? !isfinite(s[i]) : isnan(s[i]) != 0;
            check(ok, bad ? "decode-avx2-int4-inf-query" : "decode-avx2-int4-nan-query", "a score is finite");
        }
        int_rows_free(&x);
    }
    const KernelSet *sets[2] = {decode_kernels_avx512(1), decode_kernels_avx512(0)};
    if (!sets[0] || !sets[1]) return;
    static const char *const kf[] = {"int8", "q8_0", "int4", "q4_0"}, *const vf[] = {"int8", "int4", "q4_0"};
    const size_t W = 128, T = 100;
    rng r;
    rng_seed_u64(&r, 14);
    for (size_t fi = 0; fi < 4; fi++)
        for (size_t G = 1; G <= 4; G += 3) {
            IntRows x;
            int_rows(&x, kf[fi], T, W, &r, NULL);
            float *q = xmalloc(G * W * sizeof *q), *s = xmalloc(G * T * sizeof *s);
            float *scr = xmalloc(DECODE_SCRATCH(G, W) * sizeof *scr);
            for (size_t i = 0; i < G * W; i++) q[i] = (float)rng_standard_normal(&r);
            q[1] = NAN;
            int all = 1;
            for (int si = 0; si < 2; si++) {
                sets[si]->scores[x.f.type](s, T, q, G, &x.k, 0, T, scr);
                for (size_t i = 0; i < T; i++) all &= isnan(s[i]) != 0;
            }
            char name[96];
            snprintf(name, sizeof name, "decode-avx512-vnni-nan-query-%s-G%zu", kf[fi], G);
            check(all, name, "a score of the head with a NaN query is not NaN");
            free(q), free(s), free(scr);
            int_rows_free(&x);
        }
    for (size_t fi = 0; fi < 3; fi++) {
        IntRows x;
        int_rows(&x, vf[fi], T, W, &r, NULL);
        float *p = xmalloc(T * sizeof *p), *acc = xmalloc(W * sizeof *acc), *scr = xmalloc(DECODE_SCRATCH(1, W) * sizeof *scr);
        for (size_t i = 0; i < T; i++) p[i] = (float)rng_next_double(&r);
        p[2] = NAN;
        int all = 1;
        for (int si = 0; si < 2; si++) {
            memset(acc, 0, W * sizeof *acc);
            sets[si]->vacc[x.f.type](acc, p, T, 1, &x.k, 0, T, scr);
            for (size_t j = 0; j < W; j++) all &= isnan(acc[j]) != 0;
        }
        char name[96];
        snprintf(name, sizeof name, "decode-avx512-vnni-nan-weight-%s", vf[fi]);
        check(all, name, "a sum with a NaN weight is not NaN");
        free(p), free(acc), free(scr);
        int_rows_free(&x);
    }
}

/* An E4M3 code's value, read independently of the store: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent
 * 0 subnormal. */
static double e4m3_value(uint8_t b)
{
    const int e = b >> 3 & 15, m = b & 7;
    const double v = e == 0 ? m / 8.0 * ldexp(1.0, -6) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return b & 0x80 ? -v : v;
}

/* T rows of W E4M3 codes running through every code but the two NaNs (both signs, subnormals, the largest). */
static uint8_t *e4m3_codes(size_t T, size_t W)
{
    uint8_t *codes = xmalloc(T * W);
    for (size_t i = 0; i < T * W; i++) {
        const uint8_t b = (uint8_t)(i * 37 + i / 256);
        codes[i] = (b & 0x7F) == 0x7F ? (uint8_t)(b - 1) : b;
    }
    return codes;
}

/* The AVX-512 set's E4M3 kernels read each code as float32 bits (2^-120 of its value) and lift the query or the
 * weights by 2^112 instead (tunings other than INTEL), or read it as FP16 (INTEL: e4m3_f16, where float32
 * subnormals cost microcode assists): rows holding every code but the two NaNs (subnormals, both signs, the
 * largest), W = 64 / 128 / 160 (and 48: the AVX2 set's kernels), G = 1 / 4 / 8, n = 90 from t0 = 3, against
 * double over the codes' values (times the raw_scale, 256, the sets agree on), under both readings; with the
 * lift, a query element of 40000 or a weight of 1e5 (lifted, they would pass float32's range) must give the AVX2
 * set's result, bit for bit (the FP16 reading takes them itself, and must still match double). */
static void e4m3_lift_tests(void)
{
    const KernelSet *x5 = decode_kernels_avx512(0), *x2 = decode_kernels_avx2();
    if (!x5 || !x2) return;
    const int was = decode_avx512_tune(), amx_was = decode_avx512_amx_set(0);   /* the float32 kernels (amx_bf16_tests) */
    for (int rd = 0; rd < 2; rd++) {   /* 0: the lifted float32 reading (ZEN4), 1: FP16 (INTEL) */
        decode_avx512_tune_set(rd ? DECODE_TUNE_INTEL : DECODE_TUNE_ZEN4);
        const char *rname = rd ? "fp16" : "lift";
        static const size_t Ws[] = {64, 128, 160, 48}, Gs[] = {1, 4, 8};
        const size_t T = 100, t0 = 3, n = 90;
        rng r;
        rng_seed_u64(&r, 21);
        double worst[2] = {0, 0};
        for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++) {
            const size_t W = Ws[wi];
            uint8_t *codes = e4m3_codes(T, W);
            const KRows k = {.type = STORE_E4M3, .codes = codes, .row_bytes = W, .W = W};
            for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++) {
                const size_t G = Gs[gi];
                float *q = xmalloc(G * W * sizeof *q), *s5 = xmalloc(G * T * sizeof *s5), *s2 = xmalloc(G * T * sizeof *s2);
                float *p = xmalloc(G * T * sizeof *p), *a5 = xmalloc(G * W * sizeof *a5), *a2 = xmalloc(G * W * sizeof *a2);
                float *scr = xmalloc(DECODE_SCRATCH(G, W) * sizeof *scr);
                for (int big = 0; big < 2; big++) {
                    for (size_t i = 0; i < G * W; i++) q[i] = (float)(3.0 * rng_standard_normal(&r));
                    for (size_t i = 0; i < G * T; i++) p[i] = (float)rng_next_double(&r);
                    if (big) q[G * W - 2] = 40000.0f, p[(G - 1) * T + t0 + 7] = 1e5f;   /* the last head's */
                    x5->scores[STORE_E4M3](s5, T, q, G, &k, t0, n, scr);
                    x2->scores[STORE_E4M3](s2, T, q, G, &k, t0, n, scr);
                    memset(a5, 0, G * W * sizeof *a5);
                    memset(a2, 0, G * W * sizeof *a2);
                    x5->vacc[STORE_E4M3](a5, p + t0, T, G, &k, t0, n, scr);
                    x2->vacc[STORE_E4M3](a2, p + t0, T, G, &k, t0, n, scr);
                    double es = 0, ev = 0;
                    for (size_t g = 0; g < G; g++) {
                        double mx = 0, de = 0;
                        for (size_t i = 0; i < n; i++) {
                            double ref = 0, mag = 0;
                            for (size_t j = 0; j < W; j++) {
                                const double pj = (double)q[g * W + j] * e4m3_value(codes[(t0 + i) * W + j]);
                                ref += pj, mag += fabs(pj);
                            }
                            if (mag > mx) mx = mag;
                            const double d = fabs(256.0 * s5[g * T + i] - ref);
                            if (!(d <= de)) de = d;
                        }
                        if (!(de / mx <= es)) es = de / mx;
                        for (size_t j = 0; j < W; j++) {
                            double ref = 0, mag = 0;
                            for (size_t i = 0; i < n; i++) {
                                const double pj = (double)p[g * T + t0 + i] * e4m3_value(codes[(t0 + i) * W + j]);
                                ref += pj, mag += fabs(pj);
                            }
                            const double d = fabs(256.0 * a5[g * W + j] - ref) / (mag > 0 ? mag : 1);
                            if (!(d <= ev)) ev = d;
                        }
                    }
                    char name[96];
                    snprintf(name, sizeof name, "decode-avx512-e4m3-%s-W%zu-G%zu%s", rname, W, G, big ? "-big" : "");
                    check(es < 1e-6 && ev < 1e-6, name, "scores %.3g, values %.3g of sum |products|", es, ev);
                    if ((big && !rd) || W % 32 != 0) {   /* the AVX2 set's kernels: its bits */
                        snprintf(name, sizeof name, "decode-avx512-e4m3-%s-avx2-bits-W%zu-G%zu%s", rname, W, G, big ? "-big" : "");
                        const int same_s = memcmp(s5 + (G - 1) * T, s2 + (G - 1) * T, n * sizeof *s5) == 0;
                        const int same_v = memcmp(a5, a2, G * W * sizeof *a5) == 0;
                        check(same_s && same_v, name, "scores %s, values %s", same_s ? "same" : "differ", same_v ? "same" : "differ");
                    }
                    if (es > worst[0]) worst[0] = es;
                    if (ev > worst[1]) worst[1] = ev;
                }
                free(q), free(s5), free(s2), free(p), free(a5), free(a2), free(scr);
            }
            free(codes);
        }
        printf("# avx512 e4m3 (%s reading) vs double, every code: scores %.2g, values %.2g of sum |products|\n",
               rd ? "FP16" : "lifted float32", worst[0], worst[1]);
    }
    decode_avx512_tune_set(was);
    decode_avx512_amx_set(amx_was);
}

/* A BF16 code's value. */
static double bf16_value(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The AVX-512 sets' E4M3 and BF16 key slots on AMX-BF16 tiles (2 to 8 heads, W 64 / 128; kernels_avx512.c,
 * amxb_scores): E4M3 rows holding every code but the two NaNs, BF16 rows of normal draws (magnitudes 2^-30 .. 2^30),
 * n = 1 .. 90 rows from t0 = 3 (tiles of 16 and a part), G = 2 .. 8 (one and two head groups), against double over
 * the codes' values (E4M3: times 256, the raw_scale) within 1e-6 of sum |products|; with AMX off (the float32
 * kernels) within the same bound. A query with an element of 1e31 (above 2^100), a NaN, or whose largest element is
 * 2^-100 (below 2^-90) takes the float32 kernels: their bits. One head, W 96 and 9 heads keep the float32 kernels
 * too. */
static void amx_bf16_tests(void)
{
    const KernelSet *x5 = decode_kernels_avx512(0);
    if (!x5 || !decode_avx512_amx_bf16()) {
        printf("# e4m3 / bf16 keys on AMX-BF16 tiles: not on this CPU (or KVC_ISA=avx512-noamx), skipped\n");
        return;
    }
    static const size_t Ws[] = {64, 128, 96}, Gs[] = {2, 3, 4, 5, 7, 8, 1, 9}, ns[] = {90, 1, 16, 17, 33};
    const size_t T = 100, t0 = 3;
    rng r;
    rng_seed_u64(&r, 23);
    for (int bf = 0; bf < 2; bf++) {
        const StoreType type = bf ? STORE_BF16 : STORE_E4M3;
        const double unit = bf ? 1.0 : 256.0;
        double worst = 0;
        size_t cases = 0;
        for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++) {
            const size_t W = Ws[wi];
            uint8_t *codes = bf ? xmalloc(T * W * 2) : e4m3_codes(T, W);
            if (bf)
                for (size_t i = 0; i < T * W; i++) {
                    const float f = (float)ldexp(rng_standard_normal(&r), (int)(i % 61) - 30);
                    uint32_t u;
                    memcpy(&u, &f, sizeof u);
                    const uint16_t h = (uint16_t)(u >> 16);
                    memcpy(codes + 2 * i, &h, 2);
                }
            const KRows k = {.type = type, .codes = codes, .row_bytes = bf ? 2 * W : W, .W = W};
            for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++) {
                const size_t G = Gs[gi];
                float *q = xmalloc(G * W * sizeof *q), *sa = xmalloc(G * T * sizeof *sa), *sf = xmalloc(G * T * sizeof *sf);
                float *scr = xmalloc(DECODE_SCRATCH(G, W) * sizeof *scr);
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const size_t n = ns[ni];
                    for (int kind = 0; kind < 4; kind++) {   /* 0 plain, 1 an element 1e31, 2 a NaN, 3 all below 2^-90 */
                        for (size_t i = 0; i < G * W; i++) q[i] = (float)(3.0 * rng_standard_normal(&r));
                        if (kind == 1) q[G * W / 2 + 1] = 1e31f;
                        if (kind == 2) q[G * W - 5] = NAN;
                        if (kind == 3)
                            for (size_t i = 0; i < G * W; i++) q[i] = ldexpf(q[i] / 16.0f, -100);
                        memset(sa, 0, G * T * sizeof *sa), memset(sf, 0, G * T * sizeof *sf);
                        x5->scores[type](sa, T, q, G, &k, t0, n, scr);
                        decode_avx512_amx_set(0);
                        x5->scores[type](sf, T, q, G, &k, t0, n, scr);
                        decode_avx512_amx_set(1);
                        char name[96];
                        if (kind || G == 1 || G > 8 || W == 96) {   /* the float32 kernels either way */
                            snprintf(name, sizeof name, "decode-avx512-%s-amx-falls-back-W%zu-G%zu-n%zu-%s", bf ? "bf16" : "e4m3",
                                     W, G, n, kind == 1 ? "1e31" : kind == 2 ? "nan" : kind == 3 ? "tiny" : "shape");
                            check(memcmp(sa, sf, G * T * sizeof *sa) == 0, name, "scores differ from the float32 kernels'");
                            continue;
                        }
                        double e[2] = {0, 0};
                        for (size_t g = 0; g < G; g++)
                            for (size_t i = 0; i < n; i++) {
                                double ref = 0, mag = 0;
                                for (size_t j = 0; j < W; j++) {
                                    const size_t c = (t0 + i) * W + j;
                                    uint16_t h;
                                    if (bf) memcpy(&h, codes + 2 * c, 2);
                                    const double pj = (double)q[g * W + j] * (bf ? bf16_value(h) : e4m3_value(codes[c]));
                                    ref += pj, mag += fabs(pj);
                                }
                                const double da = fabs(unit * sa[g * T + i] - ref) / mag, df = fabs(unit * sf[g * T + i] - ref) / mag;
                                if (!(da <= e[0])) e[0] = da;
                                if (!(df <= e[1])) e[1] = df;
                            }
                        snprintf(name, sizeof name, "decode-avx512-%s-amx-W%zu-G%zu-n%zu", bf ? "bf16" : "e4m3", W, G, n);
                        check(e[0] < 1e-6 && e[1] < 1e-6, name, "AMX %.3g, float32 %.3g of sum |products|", e[0], e[1]);
                        if (e[0] > worst) worst = e[0];
                        cases++;
                    }
                }
                free(q), free(sa), free(sf), free(scr);
            }
            free(codes);
        }
        printf("# avx512 %s keys on AMX-BF16 tiles vs double, %zu cases: %.2g of sum |products|\n", bf ? "bf16" : "e4m3",
               cases, worst);
    }
}

/* The rounded-query sets (decode_kernels_avx512_rounded: 2 digits, an int16 query; 1 digit, an int8 query) on the
 * vnni_score_tests shapes, against an independent reading of what they promise: per head sq = (float)(max|q| /
 * qmax) (qmax 32383 or 127), v_j = q_j / sq rounded to the nearest integer (ties to even) and clamped to +-qmax,
 * score = sq sum_j v_j k_j, in double over the dequantized rows, within 1e-6 of sum_j |sq v_j k_j|; and the
 * promised bound against the unrounded query, |s - q.k| <= sq / 2 sum_j |k_j| (+ 1e-6 of the products). Shapes
 * the integer kernels do not take (W > 512, W % 128 != 0 for 4 bits, a query too small for a normal scale: 1e-35
 * x N(0, 1) is one for 2 digits, not for 1) must
 * give the float32 kernels' scores: the unrounded query's, within DECODE_TOL. */
static void rounded_score_tests(void)
{
    if (!decode_kernels_avx512_rounded(1) || !decode_kernels_avx512_rounded(2)) {
        check(!(decode_cpu_features() & DECODE_CPU_AVX512VNNI), "decode-rounded-sets-present-with-vnni",
              "decode_kernels_avx512_rounded returned NULL on a CPU with AVX512_VNNI");
        printf("# rounded-query sets: not available on this CPU (no AVX512_VNNI); skipped\n");
        return;
    }
    check(decode_kernels_avx512_rounded(0) == NULL && decode_kernels_avx512_rounded(3) == NULL,
          "decode-rounded-sets-only-1-2-digits", "a set for 0 or 3 digits");
    static const size_t Ws[] = {64, 128, 192, 512, 576}, Gs[] = {1, 2, 3, 4, 5, 8}, ns[] = {1, 17, 40};
    static const char *const fmts[] = {"int8", "q8_0", "int4", "q4_0"};
    double worst[2][2] = {{0}};   /* [digits - 1][vs rounded reference, vs exact query / bound] */
    rng r;
    rng_seed_u64(&r, 12);
    for (int nd = 1; nd <= 2; nd++) {
        const KernelSet *ks = decode_kernels_avx512_rounded(nd);
        const double qmax = nd == 1 ? 127.0 : 32383.0;
        for (size_t fi = 0; fi < 4; fi++)
            for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++) {
                const size_t W = Ws[wi], T = 64, t0 = 5;
                const int four = fi >= 2, takes = W <= 512 && W % (four ? 128 : 64) == 0;
                IntRows x;
                int_rows(&x, fmts[fi], T, W, &r, ks);
                for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
                    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                        for (int qk = 0; qk < 4; qk++) {   /* N(0, 1), outlier, zero, 1e-35 x N(0, 1) */
                            const size_t G = Gs[gi], n = ns[ni];
                            float *q = xmalloc(G * W * sizeof *q), *s = xmalloc(G * 64 * sizeof *s);
                            float *qo = xmalloc(G * W * sizeof *qo);
                            float *scr = xmalloc(DECODE_SCRATCH(G, W) * sizeof *scr);
                            double *qd = xmalloc(G * W * sizeof *qd), *v = xmalloc(G * W * sizeof *v);
                            float *sqh = xmalloc(G * sizeof *sqh);
                            rng_normal_fill(&r, qd, G * W);
                            for (size_t i = 0; i < G * W; i++)
                                q[i] = qk == 2 ? 0.0f : (float)(qd[i] * (qk == 3 ? 1e-35 : 1.0));
                            if (qk == 1)
                                for (size_t g = 0; g < G; g++) q[g * W + 3 * g % W] = 100.0f;
                            for (size_t g = 0; g < G; g++)
                                for (size_t j = 0; j < W; j++) qo[g * W + j] = q[g * W + x.perm[j]];
                            for (size_t i = 0; i < G * 64; i++) s[i] = NAN;
                            ks->scores[x.f.type](s, 64, qo, G, &x.k, t0, n, scr);
                            /* each head's scale; a head whose scale is not a normal float: all heads fall back */
                            int rounded = takes;
                            for (size_t g = 0; g < G; g++) {
                                float m = 0.0f;
                                for (size_t j = 0; j < W; j++)
                                    if (fabsf(q[g * W + j]) > m) m = fabsf(q[g * W + j]);
                                sqh[g] = m > 0.0f ? (float)((double)m / qmax) : 1.0f;
                                if (!(sqh[g] >= FLT_MIN)) rounded = 0;
                            }
                            double e_round = 0, e_exact = 0;
                            for (size_t g = 0; g < G; g++) {
                                const float sq = sqh[g];
                                for (size_t j = 0; j < W; j++) {
                                    double t = nearbyint((double)q[g * W + j] / (double)sq);
                                    v[g * W + j] = t > qmax ? qmax : t < -qmax ? -qmax : t;
                                }
                                double mx = 0, der = 0, dex = 0, slack = 0;
                                for (size_t i = 0; i < n; i++) {
                                    double ref = 0, refx = 0, mag = 0, ak = 0;
                                    for (size_t j = 0; j < W; j++) {
                                        const double kj = x.deq[(t0 + i) * W + j];
                                        ref += (double)sq * v[g * W + j] * kj;
                                        refx += (double)q[g * W + j] * kj;
                                        mag += fabs((double)sq * v[g * W + j] * kj) + fabs((double)q[g * W + j] * kj);
                                        ak += fabs(kj);
                                    }
                                    if (mag > mx) mx = mag;
                                    const double got = s[g * 64 + i];
                                    if (!(fabs(got - ref) <= der)) der = fabs(got - ref);
                                    /* past the promised bound, in units of the products */
                                    const double over = fabs(got - refx) - (rounded ? sq / 2.0 * ak : 0.0);
                                    if (!(over <= slack)) slack = over;
                                    if (!(fabs(got - refx) <= dex)) dex = fabs(got - refx);
                                }
                                const double er = mx > 0 ? der / mx : der, ex = mx > 0 ? slack / mx : slack;
                                if (!(er <= e_round)) e_round = er;
                                if (!(ex <= e_exact)) e_exact = ex;
                                if (rounded && qk == 0) {
                                    double rx = mx > 0 ? dex / mx : dex;
                                    if (rx > worst[nd - 1][1]) worst[nd - 1][1] = rx;
                                }
                            }
                            char name[128];
                            snprintf(name, sizeof name, "decode-int%dq-scores-%s-W%zu-G%zu-n%zu-q%d", 8 * nd, fmts[fi],
                                     W, G, n, qk);
                            if (rounded) {
                                if (e_round > worst[nd - 1][0]) worst[nd - 1][0] = e_round;
                                check(e_round < 1e-6 && e_exact < 1e-6, name,
                                      "vs the rounded query %.3g (< 1e-6), past the rounding bound %.3g (< 1e-6)",
                                      e_round, e_exact);
                            } else {
                                check(e_exact < DECODE_TOL, name, "float32 fallback: vs the query %.3g", e_exact);
                            }
                            free(q), free(qo), free(s), free(scr), free(qd), free(v), free(sqh);
                        }
                int_rows_free(&x);
            }
    }
    printf("# rounded-query key scores (max |s - ref| / max sum |q k|): int16 query %.2g vs its rounding, %.2g vs "
           "the float query; int8 query %.2g, %.2g\n", worst[1][0], worst[1][1], worst[0][0], worst[0][1]);
}

/* A whole step with the rounded-query decoders: their error against attention in double is what they promise
 * (int16 query: below 1e-4; int8: below 3e-2; both measured by kvc bench at full size), their output is identical
 * for 1 and 2 threads; elsewhere (no VNNI set) decoder_create refuses with a message. */
static void rounded_step_tests(void)
{
    static const char *const fmts[] = {"int8", "q8_0", "int4", "q4_0"};
    for (int qi = 0; qi < 2; qi++) {
        const DecodeImpl impl = qi ? DECODE_FUSED_INT8Q : DECODE_FUSED_INT16Q;
        const double bound = qi ? 3e-2 : 1e-4;
        for (size_t fi = 0; fi < 4; fi++)
            for (size_t G = 1; G <= 4; G *= 4) {
                Case c;
                case_init(&c, fmts[fi], fmts[fi], 1, 2, G, 3000, 128, 77 + G + fi);
                char name[128];
                snprintf(name, sizeof name, "decode-%sq-step-%s-G%zu", qi ? "int8" : "int16", fmts[fi], G);
                float *o1 = NULL, *o2 = NULL;
                if (!decode_vnni()) {
                    DecodeCache dc = {.L = 1, .Hkv = 2, .T = 3000, .D = 128, .K = c.K, .V = c.V};
                    Decoder *d = decoder_create(&dc, 2 * G, 1, impl);
                    check(!d && strstr(kvc_errmsg(), "need the AVX512_VNNI kernel set"), name, "got %s",
                          d ? "a decoder" : kvc_errmsg());
                    decoder_free(d);
                } else {
                    o1 = run(&c, impl, 1, DECODE_FULL), o2 = run(&c, impl, 2, DECODE_FULL);
                    const size_t n = 2 * G * 128;
                    double e = o1 ? rel_err(o1, c.ref, n) : INFINITY;
                    check(o1 && o2 && e < bound && memcmp(o1, o2, n * sizeof *o1) == 0, name,
                          "relative error %.3g (bound %g), threads identical %d", e, bound,
                          o1 && o2 && memcmp(o1, o2, n * sizeof *o1) == 0);
                    if (!qi && fi == 0 && G == 4) printf("# int16-query step error (int8, G 4): %.3g\n", e);
                    if (qi && fi == 0 && G == 4) printf("# int8-query step error (int8, G 4): %.3g\n", e);
                }
                free(o1), free(o2);
                case_free(&c);
            }
    }
    Case c;
    case_init(&c, "f16", "f16", 1, 2, 1, 4, 64, 1);
    DecodeCache dc = {.L = 1, .Hkv = 2, .T = 4, .D = 64, .K = c.K, .V = c.V};
    check(decoder_create(&dc, 2, 1, (DecodeImpl)7) == NULL && strstr(kvc_errmsg(), "unknown implementation"),
          "decode-rejects-unknown-impl", "%s", kvc_errmsg());
    case_free(&c);
}

/* elem.h's readers vs store_dequantize_rows_f32 on random rows of every type (W = 64, and 45 where allowed). */
static void elem_tests(void)
{
    rng r;
    rng_seed_u64(&r, 7);
    size_t T = 5;
    for (int ty = 0; ty < STORE_NTYPES; ty++)
        for (int wi = 0; wi < 2; wi++) {
            size_t W = wi ? 45 : 64;
            StoreFormat f;
            memset(&f, 0, sizeof f);
            f.type = (StoreType)ty;
            if (ty == STORE_INTN) f = store_intn_format(wi ? 3 : 4, wi, STORE_AXIS_TOKEN, 16, (StoreScaleType)wi);
            if (store_check(f, T, W, "elem")) continue;
            StoreTensor st;
            store_alloc(&st, f, T, W);
            double *x = xmalloc(T * W * sizeof *x);
            float *ref = xmalloc(T * W * sizeof *ref), blk[STORE_QK];
            rng_normal_fill(&r, x, T * W);
            for (size_t j = 32; j < W && j < 64; j++) x[2 * W + j] = 0.0;   /* an all-zero block */
            store_quantize_f64(&st, x);
            store_dequantize_rows_f32(ref, &st, 0, T);
            size_t bad = 0, bb = elem_block_bytes(f.type), g = 16, per = (W + g - 1) / g;
            for (size_t t = 0; t < T; t++) {
                const uint8_t *row = st.codes + t * st.row_bytes;
                for (size_t j = 0; j < W; j++) {
                    float v;
                    if (ty == STORE_INTN) {
                        int b = f.bits;
                        size_t k = t * per + j / g;
                        double code = (double)elem_intn_code(st.codes, (t * W + j) * (size_t)b, b);
                        double sc = elem_param(st.params, k, (int)f.scale_type);
                        double m = f.asym ? elem_param(st.params, st.n_groups + k, (int)f.scale_type) : 0.0;
                        v = (float)(f.asym ? code * sc + m : (code - (double)(1 << (b - 1))) * sc);
                    } else {
                        v = elem_value(f.type, row, j);
                        if (store_type_is_int(f.type)) v *= store_f16_to_f32(st.scales[t]);
                        if (bb && j % STORE_QK == 0) {
                            elem_block_values(blk, f.type, row + j / STORE_QK * bb);
                            for (size_t i = 0; i < STORE_QK; i++) bad += blk[i] != ref[t * W + j + i];
                        }
                    }
                    bad += v != ref[t * W + j];
                }
            }
            char name[64], why[64];
            snprintf(name, sizeof name, "elem-readers-%s-w%zu", store_type_name(f.type), W);
            snprintf(why, sizeof why, "%zu values differ from store_dequantize_rows_f32", bad);
            check(bad == 0, name, why);
            store_free(&st);
            free(x);
            free(ref);
        }
}

int main(void)
{
    la_init();
    static const char *const fmts[] = {"f32", "f16", "bf16", "e4m3", "e5m2", "int8", "int4", "int2",
                                       "int8ch", "int4ch", "int2ch", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"};
    size_t nf = sizeof fmts / sizeof fmts[0], n_block = 6;   /* the last n_block: ggml blocks of 32 */
    /* decoders of the default block (DECODE_BLOCK tokens a work item): T crossing it, G = 1 / 4, two threads */
    static const char *const dflt[] = {"f16", "int8", "q4_0", "e4m3"};
    for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++) {
        run_case(dflt[i], dflt[i], 1, 2, 4, DECODE_BLOCK + 1, 128, 1);
        run_case(dflt[i], dflt[i], 1, 1, 1, 2 * DECODE_BLOCK + 100, 128, 1);
    }
    /* 600 query heads on one KV head: the block halved (600 x 8192 floats of scores would pass 2^22), T crossing it */
    run_case("f16", "int8", 1, 1, 600, DECODE_BLOCK / 2 + 5, 16, 1);
    /* the rest with blocks of 2048 tokens, so that these T cross block boundaries (and the merge of many blocks,
     * their order and thread count run) at a small cost */
    decode_set_block(2048);
    /* every format at D = 128 with GQA, T crossing a block boundary */
    for (size_t i = 0; i < nf; i++) run_case(fmts[i], fmts[i], 1, 2, 4, 2049, 128, 1);
    /* odd sizes: one token, T = 37, D = 64 / 256, G = 1 / 3 / 9 */
    for (size_t i = 0; i < nf; i++) {
        run_case(fmts[i], fmts[i], 1, 1, 1, 1, 64, 0);
        run_case(fmts[i], fmts[i], 2, 1, 3, 37, 256, 0);
        run_case(fmts[i], fmts[i], 1, 1, 9, 100, 64, 0);
    }
    /* D not a multiple of 8/16/32 (not for the ggml blocks): column tails */
    for (size_t i = 0; i < nf - n_block; i++) run_case(fmts[i], fmts[i], 1, 2, 2, 45, 37, 0);
    /* mixed K/V formats, KIVI-like per-channel keys, low rank keys and values */
    run_case("int4ch", "int4", 1, 2, 4, 300, 128, 1);
    run_case("lr32", "f16", 1, 2, 4, 2100, 128, 1);
    run_case("lr16:int8", "q8_0", 1, 1, 3, 77, 64, 0);
    run_case("f16", "lr8", 1, 1, 2, 50, 64, 0);
    run_case("lr5", "lr3:int4", 1, 1, 1, 20, 40, 0);
    run_case("q4_0", "e4m3", 2, 2, 1, 4097, 64, 1);
    /* rows wider than the GQA tile scratch (head by head), and narrow rows (interleaved) */
    run_case("f16", "int4", 1, 1, 4, 70, 544, 0);
    run_case("lr16:int4", "lr32:q8_0", 1, 2, 2, 130, 64, 0);
    /* f16 keys of 8 heads (AVX-512: transposed tiles of 32 rows, chunks of 32 columns): 3 chunks and a last tile of
     * 29 rows; 16 heads (two groups) of one chunk and a last tile of 18; 9 heads over two blocks */
    run_case("f16", "f16", 1, 1, 8, 61, 96, 0);
    run_case("f16", "q8_0", 1, 2, 16, 50, 32, 0);
    run_case("f16", "f16", 2, 1, 9, DECODE_BLOCK + 40, 128, 1);
    /* ggml q4_1 / q5_0 / q5_1 / iq4_nl: one query head per KV head over two blocks (threads), G = 2 and 8 (the
     * V tile groups of 8 and 2), rows wider than the V tile (head by head), mixed, low-rank coefficients */
    for (size_t i = nf - 4; i < nf; i++) {
        run_case(fmts[i], fmts[i], 1, 2, 1, 4097, 128, 1);
        run_case(fmts[i], fmts[i], 1, 1, 2, 300, 256, 0);
    }
    run_case("q4_1", "q5_0", 1, 2, 8, 2100, 64, 1);
    run_case("iq4_nl", "q5_1", 1, 1, 10, 77, 128, 0);
    run_case("q5_1", "iq4_nl", 1, 1, 4, 70, 544, 0);
    run_case("lr32:q4_1", "lr64:q5_0", 1, 2, 4, 130, 64, 0);
    run_case("lr32:iq4_nl", "lr32:q5_1", 1, 1, 1, 50, 128, 0);
    /* the V paths with register accumulators (GQA groups of 4 and 2 for 8/16-value units, one head for the
     * packed formats), T not a multiple of their 32-token tile, D = 64 / 128 / 256; int4 keys in integers
     * (vector epilogue for 8 rows, per-token and per-channel scales) */
    static const char *const direct[] = {"f16", "bf16", "e4m3", "e5m2", "int8", "int4", "int2", "q8_0", "q4_0"};
    for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++) {
        run_case(direct[i], direct[i], 1, 1, 4, 70, 256, 0);
        run_case(direct[i], direct[i], 1, 2, 2, 33, 64, 0);
        run_case(direct[i], direct[i], 1, 1, 1, 77, 256, 0);
    }
    run_case("int4ch", "int4", 1, 2, 1, 300, 128, 1);
    /* q8_0 / q4_0 keys whose block count is not a multiple of 4 (the VNNI tiles read the block scales 4 blocks at a
     * time: 6 and 10 blocks end on a group of 2), and 12 blocks */
    run_case("q8_0", "q8_0", 1, 1, 4, 70, 192, 0);
    run_case("q8_0", "f16", 1, 2, 2, 45, 320, 0);
    run_case("q4_0", "q4_0", 1, 1, 4, 70, 384, 0);
    /* q4_0 values of 2-8 heads: the tile's block scales converted first (8 rows at a time at D = 128: a last tile
     * of 13 rows ends on 5; D = 96 one scale at a time), and rows wider than that buffer (D = 544) without it */
    run_case("f16", "q4_0", 1, 1, 4, 45, 128, 0);
    run_case("f16", "q4_0", 1, 2, 8, 61, 128, 0);
    run_case("f16", "q4_0", 1, 1, 2, 40, 96, 0);
    run_case("f16", "q4_0", 1, 1, 4, 37, 544, 0);
    /* the AVX-512 sets' other tunings (kernels.h, decode_avx512_tune_set: one head per KV head on the AVX2 set's
     * one-head kernels or on the AVX-512 and VNNI kernels; VNNI key tiles of 16 or 32 rows at 4+ heads; the key
     * prefetch distance), those this CPU does not default to */
    const int was = decode_avx512_tune();
    static const int tunes[] = {DECODE_TUNE_INTEL, DECODE_TUNE_AMD, DECODE_TUNE_ZEN4};
    static const char *const tune_tag[] = {[DECODE_TUNE_INTEL] = "-tune-intel", [DECODE_TUNE_AMD] = "-tune-amd",
                                           [DECODE_TUNE_ZEN4] = "-tune-zen4"};
    for (size_t ti = 0; ti < 3 && !strcmp(decode_isa(), "avx512"); ti++) {
        if (tunes[ti] == was) continue;
        decode_avx512_tune_set(tunes[ti]);
        case_tag = tune_tag[tunes[ti]];
        for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++) {
            run_case(direct[i], direct[i], 1, 2, 1, 2049, 128, 1);
            run_case(direct[i], direct[i], 1, 1, 1, 77, 64, 0);
        }
        static const char *const vn[] = {"int8", "q8_0", "int4", "q4_0"};
        for (size_t i = 0; i < sizeof vn / sizeof vn[0]; i++) {
            run_case(vn[i], vn[i], 1, 2, 4, 2049, 128, 1);
            run_case(vn[i], vn[i], 1, 1, 8, 45, 256, 0);
        }
        run_case("f16", "int8", 1, 1, 1, 45, 37, 0);   /* column tails: the AVX2 slot either way */
        vnni_score_tests();   /* the key slots at G = 1 .. 8 under this tuning */
        decode_avx512_tune_set(was);
        case_tag = "";
    }
    if (!strcmp(decode_isa(), "avx512")) {
        /* the one-head choices take effect: the kernels round differently (f16 keys: one shuffle tree per 16 rows or
         * the AVX2 row sums; q8_0 values: the AVX2 or AVX-512 sums); zen4 and amd differ in f16 keys and q8_0
         * values only; intel and amd in e4m3's reading only, which gives the same products (the same bits) */
        static const struct { const char *fmt; int t1, t2, same; } one[] = {
            {"f16", DECODE_TUNE_INTEL, DECODE_TUNE_AMD, 1}, {"int8", DECODE_TUNE_INTEL, DECODE_TUNE_AMD, 1},
            {"q8_0", DECODE_TUNE_INTEL, DECODE_TUNE_AMD, 1}, {"e4m3", DECODE_TUNE_INTEL, DECODE_TUNE_AMD, 1},
            {"f16", DECODE_TUNE_ZEN4, DECODE_TUNE_AMD, 0},
            {"q8_0", DECODE_TUNE_ZEN4, DECODE_TUNE_AMD, 0}, {"int8", DECODE_TUNE_ZEN4, DECODE_TUNE_AMD, 1},
            {"int4", DECODE_TUNE_ZEN4, DECODE_TUNE_AMD, 1}, {"e4m3", DECODE_TUNE_ZEN4, DECODE_TUNE_AMD, 1}};
        for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
            char nm[96];
            snprintf(nm, sizeof nm, "decode-tune-%s-one-head-%s-%s-%s", one[i].same ? "keeps" : "changes", one[i].fmt,
                     tune_tag[one[i].t1] + 6, tune_tag[one[i].t2] + 6);
            check(tune_same_bits(one[i].fmt, 1, 77, one[i].t1, one[i].t2) == one[i].same, nm,
                  one[i].same ? "the output bits differ (or no run)" : "the same output bits (or no run)");
        }
        /* at four heads the tunings differ only in the VNNI tiles' height and the prefetch, and the integer sums are
         * exact: the same bits */
        static const char *const vn[] = {"int8", "q8_0", "int4", "q4_0"};
        for (size_t i = 0; i < sizeof vn / sizeof vn[0]; i++)
            for (int t = 1; t < 3; t++) {
                char nm[96];
                snprintf(nm, sizeof nm, "decode-tune-same-bits-at-G4-%s-%s-amd", vn[i], tune_tag[t] + 6);
                check(tune_same_bits(vn[i], 4, 78, t, DECODE_TUNE_AMD) == 1, nm,
                      "the output bits differ between tunings (or no run)");
            }
    }
    /* int4 keys in float with the codes read as 0..15 (the query sum subtracted): widths that are not a multiple
     * of 64, column tails, G = 1 / 2 / 5 */
    run_case("int4", "int4", 1, 1, 5, 50, 72, 0);
    run_case("int4", "f16", 1, 2, 2, 41, 80, 0);
    run_case("int4ch", "f16", 1, 1, 1, 20, 80, 0);
    run_case("int4", "int4ch", 1, 1, 2, 45, 64, 0);
    /* one head per KV head, int8 / int4 values (the VNNI set's integer sums where there is VNNI): 128 and 384 columns,
     * a token scale or a channel scale (none in the kernel) */
    run_case("int8", "int8", 1, 2, 1, 2049, 128, 1);
    run_case("int4", "int4", 1, 2, 1, 2049, 384, 1);
    run_case("f16", "int8ch", 1, 1, 1, 300, 256, 0);
    run_case("int4ch", "int4ch", 1, 1, 1, 300, 128, 0);
    /* formats without a fused kernel (the method library's): the generic dequantized-tile path */
    run_case("int3g16", "f16", 1, 1, 1, 40, 64, 0);
    /* bad input */
    Case c;
    case_init(&c, "f16", "f16", 1, 2, 1, 4, 64, 1);
    DecodeCache dc = {1, 2, 4, 64, c.K, c.V, 0, NULL, NULL};
    check(decoder_create(&dc, 3, 1, DECODE_FUSED) == NULL && strstr(kvc_errmsg(), "multiple of the 2 KV heads"),
          "decode-rejects-hq-not-multiple", "%s", kvc_errmsg());
    check(decoder_create(&dc, 2, 0, DECODE_FUSED) == NULL, "decode-rejects-zero-threads", "%s", kvc_errmsg());
    case_free(&c);
    kivi_tests();
    intn_tests();
    slot_tests();
    {   /* decode_read_cold: positive times for two buffers on 1 and 2 threads, an eviction read between */
        float *a = xalloc64((1u << 20) * sizeof *a), *e = xalloc64((1u << 20) * sizeof *e);
        uint16_t *h = xmalloc(3000 * sizeof *h);
        for (size_t i = 0; i < (1u << 20); i++) a[i] = 1.0f, e[i] = 2.0f;
        for (size_t i = 0; i < 3000; i++) h[i] = 0x3C00;
        const void *bufs[2] = {a, h};
        const size_t bytes[2] = {(1u << 20) * sizeof *a, 3000 * sizeof *h};
        double sec[4] = {0};
        int rc1 = decode_read_cold(sec, 2, bufs, bytes, 2, e, 1u << 20, 1);
        int rc2 = decode_read_cold(sec + 2, 2, bufs, bytes, 2, NULL, 0, 2);
        check(rc1 == 0 && rc2 == 0 && sec[0] > 0 && sec[1] > 0 && sec[2] > 0 && sec[3] > 0, "decode-read-cold-times",
              "rc %d %d, seconds %g %g %g %g", rc1, rc2, sec[0], sec[1], sec[2], sec[3]);
        free(a), free(e), free(h);
    }
    vnni_score_tests();
    vnni_value_tests();
    vnni_nan_tests();
    e4m3_lift_tests();
    amx_bf16_tests();
    rounded_score_tests();
    rounded_step_tests();
    elem_tests();
    printf("# fused kernels: %s; worst relative error vs double: fused %.2g, ref %.2g, naive %.2g (tolerance %g); "
           "fused with int8 / q8_0 / int4 / q4_0 keys and G >= 2: %.2g\n",
           decode_isa(), worst_err[0], worst_err[1], worst_err[2], DECODE_TOL, worst_int_keys);
    return check_failures ? 1 : 0;
}
