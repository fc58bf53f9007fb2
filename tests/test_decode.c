/* test_decode: the decode kernels (src/decode/) against the quality path and against each other.
 *
 * For every stored format (f32 ... q4_0, per-token and per-channel int scales, low-rank keys and values)
 * and odd shapes (T = 1, a block boundary +- 1, T not a multiple of any unit; D = 64 / 128 / 256 and
 * a D that is not a multiple of 8 or 16; G = 1, 2, 3, 4, 9 query heads per KV head; all-zero tokens and
 * channels), each implementation's output is compared with attention in double over the dequantized
 * cache (attn_forward, the quality path): relative error below DECODE_TOL. Also: fused vs. the scalar
 * `_ref` twins, bit-identical output for 1, 2 and 3 threads, and the key-side mode's max score. Formats
 * without a fused kernel (q4_1, q5_0, q5_1, iq4_nl, intN) go through the generic dequantized-tile path.
 * The worst relative errors seen are printed as a comment line.
 * Prints PASS/FAIL lines and exits 1 on any failure.
 */
#include "attention.h"
#include "decode/decode.h"
#include "linalg.h"
#include "rng.h"
#include "store.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int ok, const char *name, const char *why)
{
    if (ok) printf("PASS %s\n", name);
    else {
        printf("FAIL %s: %s\n", name, why);
        failures++;
    }
}

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
    DecodeCache dc = {c->L, c->Hkv, c->T, c->D, c->K, c->V};
    Decoder *d = decoder_create(&dc, c->Hkv * c->G, threads, impl);
    if (!d) {
        printf("FAIL decoder-create: %s\n", kvc_errmsg());
        failures++;
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
        snprintf(name, sizeof name, "decode-%s-%s/%s-T%zu-D%zu-G%zu-vs-double", impl_name[impl], kname, vname, T, D, G);
        snprintf(why, sizeof why, "relative error %.3g > %g", e, DECODE_TOL);
        check(e < DECODE_TOL, name, why);
    }
    if (o[0] && o[1]) {
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            num += ((double)o[0][i] - o[1][i]) * ((double)o[0][i] - o[1][i]);
            den += (double)o[1][i] * o[1][i];
        }
        double e = den == 0 ? sqrt(num) : sqrt(num / den);
        snprintf(name, sizeof name, "decode-fused-vs-ref-%s/%s-T%zu-D%zu-G%zu", kname, vname, T, D, G);
        snprintf(why, sizeof why, "relative difference %.3g > %g", e, DECODE_TOL);
        check(e < DECODE_TOL, name, why);
    }
    if (threads_check && o[0]) {
        int same = 1;
        for (int th = 2; th <= 3; th++) {
            float *ot = run(&c, DECODE_FUSED, th, DECODE_FULL);
            if (!ot || memcmp(ot, o[0], n * sizeof *ot) != 0) same = 0;
            free(ot);
        }
        snprintf(name, sizeof name, "decode-threads-1-2-3-identical-%s/%s-T%zu-D%zu-G%zu", kname, vname, T, D, G);
        check(same, name, "the output changed with the thread count");
        float *ok = run(&c, DECODE_FUSED, 2, DECODE_KEYS);
        double worst = 0;
        for (size_t i = 0; ok && i < L * Hkv * G; i++) {
            double e = fabs(ok[i * D] - c.ref_max[i]) / (1.0 + fabs(c.ref_max[i]));
            if (!(e <= worst)) worst = e;
        }
        snprintf(name, sizeof name, "decode-keys-mode-max-score-%s-T%zu-D%zu-G%zu", kname, T, D, G);
        snprintf(why, sizeof why, "max score off by %.3g", worst);
        check(ok && worst < DECODE_TOL, name, why);
        free(ok);
    }
    for (int impl = 0; impl < 3; impl++) free(o[impl]);
    case_free(&c);
}

int main(void)
{
    la_init();
    static const char *const fmts[] = {"f32", "f16", "bf16", "e4m3", "e5m2", "int8", "int4", "int2",
                                       "int8ch", "int4ch", "int2ch", "q8_0", "q4_0"};
    size_t nf = sizeof fmts / sizeof fmts[0];
    /* every format at D = 128 with GQA, T crossing a block boundary */
    for (size_t i = 0; i < nf; i++) run_case(fmts[i], fmts[i], 1, 2, 4, 2049, 128, 1);
    /* odd sizes: one token, T = 37, D = 64 / 256, G = 1 / 3 / 9 */
    for (size_t i = 0; i < nf; i++) {
        run_case(fmts[i], fmts[i], 1, 1, 1, 1, 64, 0);
        run_case(fmts[i], fmts[i], 2, 1, 3, 37, 256, 0);
        run_case(fmts[i], fmts[i], 1, 1, 9, 100, 64, 0);
    }
    /* D not a multiple of 8/16/32 (not for q8_0 / q4_0): column tails */
    for (size_t i = 0; i < nf - 2; i++) run_case(fmts[i], fmts[i], 1, 2, 2, 45, 37, 0);
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
    /* int4 keys in float with the codes read as 0..15 (the query sum subtracted): widths that are not a multiple
     * of 64, column tails, G = 1 / 2 / 5 */
    run_case("int4", "int4", 1, 1, 5, 50, 72, 0);
    run_case("int4", "f16", 1, 2, 2, 41, 80, 0);
    run_case("int4ch", "f16", 1, 1, 1, 20, 80, 0);
    run_case("int4", "int4ch", 1, 1, 2, 45, 64, 0);
    /* formats without a fused kernel (the method library's): the generic dequantized-tile path */
    run_case("q4_1", "q5_0", 1, 2, 2, 2100, 64, 1);
    run_case("iq4_nl", "q5_1", 1, 1, 3, 77, 128, 0);
    run_case("int3g16", "f16", 1, 1, 1, 40, 64, 0);
    /* bad input */
    Case c;
    case_init(&c, "f16", "f16", 1, 2, 1, 4, 64, 1);
    DecodeCache dc = {1, 2, 4, 64, c.K, c.V};
    check(decoder_create(&dc, 3, 1, DECODE_FUSED) == NULL && strstr(kvc_errmsg(), "multiple of the 2 KV heads"),
          "decode-rejects-hq-not-multiple", kvc_errmsg());
    check(decoder_create(&dc, 2, 0, DECODE_FUSED) == NULL, "decode-rejects-zero-threads", kvc_errmsg());
    double ns = -1;
    check(decode_time_ns(&ns, &dc, 2, c.q, 2, 3) == 0 && ns > 0, "decode-time-ns", "no positive time");
    check(decode_time_ns(&ns, &dc, 3, c.q, 1, 3) == -1, "decode-time-ns-rejects-bad-heads", "accepted Hq = 3");
    case_free(&c);
    printf("# fused kernels: %s; worst relative error vs double: fused %.2g, ref %.2g, naive %.2g (tolerance %g)\n",
           decode_isa(), worst_err[0], worst_err[1], worst_err[2], DECODE_TOL);
    return failures ? 1 : 0;
}
