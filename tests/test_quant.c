/* test_quant: unit checks of the quantizers' stored formats (intN, q4_1, q5_0, q5_1, iq4_nl in src/store/store.h), the
 * Hadamard rotation (src/methods/hadamard.h), dense-and-sparse outliers (src/methods/qprep.h) and the methods quantize,
 * kivi, cast, ggml; and a helper for tests/test_ggml.py and tests/test_quant.py, which hold the independent
 * Python implementations.
 *
 * No arguments: the C checks (PASS/FAIL lines, exit 1 on any failure).
 * Helper modes (binary little-endian on stdin and stdout):
 *   --quantize TYPE T W    float32 (T, W) -> the stored codes (T * row_bytes), then the values read back (float32)
 *                          TYPE: q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl f16 bf16
 *   --intn BITS ASYM AXIS GROUP SCALE T W   float64 (T, W) -> codes, then params, then the values (float64);
 *                          AXIS token|channel, SCALE f16|f32
 *   --apply METHOD T D HASV [NAME=VALUE]...  float64 K (T, D) [and V] -> u64 bytes, K' [and V'] (float64; a
 *                          tensor the method leaves alone is written as it came); seed "7"
 */
#include "methods/hadamard.h"
#include "methods/methods.h"
#include "methods/qprep.h"
#include "store/store.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double lcg_normal(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u1 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u2 = (double)(*s >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- intN: bytes, packing, zero groups, the lesson's arithmetic ---- */

static void test_intn_bytes(void)
{
    static const size_t shapes[][2] = {{1, 1}, {7, 64}, {33, 96}, {5, 37}, {3, 6}, {100, 128}};
    static const size_t groups[] = {0, 1, 5, 32, 1000};
    int ok = 1;
    char why[256] = "";
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int bits = 1; bits <= 8; bits++)
            for (int asym = 0; asym < 2; asym++)
                for (int axis = 0; axis < 2; axis++)
                    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                        for (int sc = 0; sc < 2; sc++) {
                            size_t T = shapes[s][0], W = shapes[s][1], g = groups[gi];
                            StoreFormat f = store_intn_format(bits, asym, (StoreAxis)axis, g, (StoreScaleType)sc);
                            if (store_check(f, T, W, "t")) {
                                if (!asym && bits == 1) continue;
                                ok = 0;
                                snprintf(why, sizeof why, "rejected: %s", kvc_errmsg());
                                continue;
                            }
                            StoreTensor st;
                            store_alloc(&st, f, T, W);
                            size_t ext = axis ? T : W, gg = g && g < ext ? g : ext, per = (ext + gg - 1) / gg;
                            uint64_t ng = axis ? per * W : T * per;
                            uint64_t want = (T * W * (uint64_t)bits + 7) / 8 + ng * (asym ? 2 : 1) * (sc ? 4 : 2);
                            uint64_t buf = st.code_bytes + st.param_bytes;
                            if (store_bytes(&st) != want || buf != want || st.n_groups != ng) {
                                ok = 0;
                                snprintf(why, sizeof why, "T=%zu W=%zu bits=%d asym=%d axis=%d g=%zu sc=%d: store_bytes "
                                         "%llu buffers %llu definition %llu", T, W, bits, asym, axis, g, sc,
                                         (unsigned long long)store_bytes(&st), (unsigned long long)buf,
                                         (unsigned long long)want);
                            }
                            store_free(&st);
                        }
    check(ok, "intn-bytes-match-buffers", "%s", why);
    StoreFormat f = store_intn_format(1, 0, STORE_AXIS_TOKEN, 0, STORE_SCALE_F16);
    check(store_check(f, 2, 2, "k") == -1 && strstr(kvc_errmsg(), "2..8"), "intn-symmetric-needs-2-bits", "%s",
          kvc_errmsg());

    /* the other new types: blocks of 32 along the row */
    static const char *const names[] = {"q4_1", "q5_0", "q5_1", "iq4_nl"};
    static const size_t bs[] = {20, 22, 24, 18};
    ok = 1;
    for (int i = 0; i < 4; i++) {
        StoreType t;
        memset(&f, 0, sizeof f);
        if (store_type_from_name(&t, names[i])) {
            ok = 0;
            continue;
        }
        f.type = t;
        StoreTensor st;
        store_alloc(&st, f, 3, 64);
        if (store_bytes(&st) != 3 * 2 * bs[i] || st.row_bytes != 2 * bs[i]) ok = 0;
        store_free(&st);
        if (store_check(f, 3, 48, "k") != -1 || !strstr(kvc_errmsg(), "multiple of 32")) ok = 0;
        StoreFormat g2;   /* a decode format (kvc bench --formats), without the "ch" suffix */
        char chname[16];
        snprintf(chname, sizeof chname, "%sch", names[i]);
        if (store_format_parse(&g2, names[i], "--formats") != 0 || g2.type != t || g2.rank != 0 ||
            store_format_parse(&g2, chname, "--formats") != -1)
            ok = 0;
    }
    check(ok, "ggml-new-types-bytes-and-32", "block sizes 20/22/24/18, W %% 32, store_format_parse reads the names");
}

static void test_intn_packing(void)
{
    /* 3-bit symmetric, one token row of 4: amax 3 -> qmax 3, scale 1 (exact in FP16); codes 3,-1,0,-3 stored
     * as n = code + 4: 7, 3, 4, 1 -> bits 111 110 001 100 (LSB first) = 0b...  */
    double x[4] = {3.0, -1.0, 0.2, -3.0}, y[4];
    StoreFormat f = store_intn_format(3, 0, STORE_AXIS_TOKEN, 0, STORE_SCALE_F16);
    StoreTensor st;
    store_alloc(&st, f, 1, 4);
    store_quantize_f64(&st, x);
    unsigned v = st.codes[0] | (unsigned)st.codes[1] << 8;
    unsigned want = 7u | 3u << 3 | 4u << 6 | 1u << 9;
    uint16_t sc;
    memcpy(&sc, st.params, 2);
    store_dequantize_f64(y, &st);
    check(st.code_bytes == 2 && v == want && sc == 0x3C00 && y[0] == 3 && y[1] == -1 && y[2] == 0 && y[3] == -3,
          "intn-pack-3bit-lsb-first", "codes %#x want %#x, scale %#x, values %g %g %g %g", v, want, sc, y[0], y[1],
          y[2], y[3]);
    store_free(&st);

    /* asymmetric 2-bit FP32 per channel, groups of 2 tokens: column [1, 4 | 2] -> group 0 min 1 scale 1 */
    double c[3] = {1.0, 4.0, 2.0}, d[3];
    f = store_intn_format(2, 1, STORE_AXIS_CHANNEL, 2, STORE_SCALE_F32);
    store_alloc(&st, f, 3, 1);
    store_quantize_f64(&st, c);
    float p[4];
    memcpy(p, st.params, sizeof p);
    store_dequantize_f64(d, &st);
    check(st.n_groups == 2 && p[0] == 1.0f && p[1] == 0.0f && p[2] == 1.0f && p[3] == 2.0f && d[0] == 1 && d[1] == 4 &&
          d[2] == 2 && st.codes[0] == (0u | 3u << 2 | 0u << 4), "intn-asym-channel-groups",
          "params %g %g %g %g codes %#x values %g %g %g", p[0], p[1], p[2], p[3], st.codes[0], d[0], d[1], d[2]);
    store_free(&st);
}

static void test_intn_zero_and_lesson(void)
{
    size_t T = 6, W = 10;
    double *x = xcalloc(T * W, sizeof *x), *y = xmalloc(T * W * sizeof *y), *e = xmalloc(2 * T * W * sizeof *e);
    uint64_t s = 3;
    for (size_t j = 0; j < W; j++) x[2 * W + j] = lcg_normal(&s);
    for (size_t t = 0; t < T; t++) x[t * W + 4] = 2.5;   /* a constant column */
    int ok = 1;
    for (int asym = 0; asym < 2; asym++)
        for (int axis = 0; axis < 2; axis++)
            for (int sc = 0; sc < 2; sc++) {
                StoreTensor st;
                store_alloc(&st, store_intn_format(4, asym, (StoreAxis)axis, 3, (StoreScaleType)sc), T, W);
                store_quantize_f64(&st, x);
                store_dequantize_f64(y, &st);
                for (size_t i = 0; i < T * W; i++) ok = ok && !isnan(y[i]);
                for (size_t j = 0; j < W; j++) ok = ok && (axis || j == 4 || y[W + j] == 0.0);   /* zero row groups */
                if (asym && axis == 1 && y[4] != 2.5) ok = 0;   /* a constant group reads back exactly */
                memset(y, 0xFF, T * W * sizeof *y);
                double *z = xcalloc(T * W, sizeof *z);
                store_quantize_f64(&st, z);
                store_dequantize_f64(y, &st);
                for (size_t i = 0; i < T * W; i++) ok = ok && y[i] == 0.0;
                free(z);
                store_free(&st);
            }
    check(ok, "intn-zero-groups-give-zeros", "a zero group read back non-zero or NaN");

    /* the lesson's arithmetic: codes rint(x / scale) against the unrounded scale, x' = q * scale */
    ok = 1;
    for (size_t i = 0; i < T * W; i++) x[i] = lcg_normal(&s) * (i % 7 == 0 ? 30 : 1);
    for (int bits = 2; bits <= 8; bits++)
        for (int axis = 0; axis < 2; axis++) {
            StoreTensor st;
            store_alloc(&st, store_intn_format(bits, 0, (StoreAxis)axis, 0, STORE_SCALE_F16), T, W);
            store_quantize_intn_unrounded_f64(&st, x, e);
            store_dequantize_intn_unrounded_f64(y, &st, e);
            double qmax = (double)((1 << (bits - 1)) - 1);
            for (size_t t = 0; t < T; t++)
                for (size_t j = 0; j < W; j++) {
                    double amax = 0;
                    for (size_t k = 0; k < (axis ? T : W); k++) {
                        double a = fabs(axis ? x[k * W + j] : x[t * W + k]);
                        if (a > amax) amax = a;
                    }
                    double scale = amax / qmax, q = rint(x[t * W + j] / scale);
                    if (q > qmax) q = qmax;
                    if (q < -qmax) q = -qmax;
                    if (y[t * W + j] != q * scale) ok = 0;
                }
            store_free(&st);
        }
    check(ok, "intn-unrounded-is-the-lesson-quantizer", "values differ from q * (max|x| / qmax)");
    free(x);
    free(y);
    free(e);
}

/* ---- Hadamard ---- */

static void test_hadamard(void)
{
    /* numpy: np.where(np.random.default_rng([seed, 0x48414441]).random(16) < 0.5, -1, 1) */
    static const struct {
        const char *seed;
        int s[16];
    } want[] = {
        {"42", {-1, 1, 1, -1, 1, 1, 1, 1, -1, 1, -1, 1, -1, 1, -1, 1}},
        {"1180591620717411303429", {1, 1, 1, 1, 1, 1, -1, 1, -1, -1, -1, -1, -1, 1, -1, -1}},
        {"0", {-1, -1, 1, -1, -1, -1, -1, 1, 1, -1, -1, -1, 1, 1, -1, -1}},
    };
    int ok = 1;
    char why[200] = "";
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        double s[16];
        hadamard_signs(s, 16, want[k].seed);
        for (int i = 0; i < 16; i++)
            if (s[i] != want[k].s[i]) {
                ok = 0;
                snprintf(why, sizeof why, "seed %s sign %d: %g", want[k].seed, i, s[i]);
            }
    }
    check(ok, "hadamard-signs-numpy-stream", "%s", why);
    double s[8];
    check(hadamard_signs(s, 8, "4x") == -1, "hadamard-signs-bad-seed", "accepted \"4x\"");
    check(hadamard_ok(1) && hadamard_ok(64) && !hadamard_ok(0) && !hadamard_ok(96), "hadamard-power-of-two", "wrong");

    /* rows of R = diag(s) H / sqrt(D): e_i R = s_i H[i] / sqrt(D); R R^T = I; round trip */
    size_t D = 32;
    double sg[32], x[32 * 32], y[32 * 32];
    hadamard_signs(sg, D, "9");
    memset(x, 0, sizeof x);
    for (size_t i = 0; i < D; i++) x[i * D + i] = 1.0;
    hadamard_rotate(x, D, D, sg);
    ok = 1;
    for (size_t i = 0; i < D; i++)
        for (size_t j = 0; j < D; j++) {
            int h = __builtin_popcountll(i & j) % 2 ? -1 : 1;   /* Sylvester: H[i][j] = (-1)^popcount(i & j) */
            if (fabs(x[i * D + j] - sg[i] * h / sqrt((double)D)) > 1e-15) ok = 0;
        }
    check(ok, "hadamard-rows-are-signed-sylvester", "e_i R != s_i H[i] / sqrt(D)");
    uint64_t st = 5;
    for (size_t i = 0; i < D * D; i++) y[i] = x[i] = lcg_normal(&st);
    hadamard_rotate(y, D, D, sg);
    double n0 = 0, n1 = 0, err = 0;
    for (size_t i = 0; i < D * D; i++) {
        n0 += x[i] * x[i];
        n1 += y[i] * y[i];
    }
    hadamard_unrotate(y, D, D, sg);
    for (size_t i = 0; i < D * D; i++) err = fmax(err, fabs(y[i] - x[i]));
    check(fabs(n0 - n1) < 1e-12 * n0 && err < 1e-14, "hadamard-orthonormal-round-trip", "norms %g %g, max error %g", n0,
          n1, err);
}

/* ---- outliers ---- */

static void test_outliers(void)
{
    size_t T = 4, D = 5;
    double x[20];
    for (size_t i = 0; i < 20; i++) x[i] = (double)i * 0.1;
    x[7] = -9.0;
    x[3] = 9.0;       /* tie with x[7] in |x|: the lower index first */
    x[12] = 60000.0;  /* large, still finite in FP16 */
    QPrep q;
    int rc = qprep_init(&q, x, T, D, T, ROTATE_NONE, 0.15, NULL);   /* floor(0.15 * 20) = 3 */
    int ok = rc == 0 && q.n_out == 3 && qprep_bytes(&q) == 18 && q.x[3] == 0 && q.x[7] == 0 && q.x[12] == 0 &&
             q.x[19] == x[19];
    unsigned i0 = q.sparse[0], i1 = q.sparse[6], i2 = q.sparse[12];
    ok = ok && i0 == 3 && i1 == 7 && i2 == 12;
    double y[20] = {0};
    qprep_finish(y, &q);
    ok = ok && y[3] == 9.0 && y[7] == -9.0 && y[12] == 60000.0 && y[0] == 0;
    check(ok, "outliers-largest-ties-lower-index", "rc %d n %zu idx %u %u %u", rc, q.n_out, i0, i1, i2);
    qprep_free(&q);
    rc = qprep_init(&q, x, T, D, 2, ROTATE_NONE, 0.5, NULL);   /* rows 0..1 only: floor(0.5 * 10) = 5 */
    ok = rc == 0 && q.n_out == 5;
    for (size_t r = 0; r < q.n_out; r++) ok = ok && q.sparse[6 * r] < 10;
    check(ok, "outliers-only-quantized-rows", "n %zu", q.n_out);
    qprep_free(&q);
    rc = qprep_init(&q, x, T, D, T, ROTATE_NONE, 0.04, NULL);   /* floor(0.8) = 0 */
    check(rc == 0 && q.n_out == 0 && qprep_bytes(&q) == 0, "outliers-floor", "n %zu", q.n_out);
    qprep_free(&q);
}

/* ---- methods ---- */

static void exp_init(Experiment *ex, const char *method)
{
    memset(ex, 0, sizeof *ex);
    ex->method = method_find(method);
    if (!ex->method) {
        printf("FAIL method_find_%s: not in the registry\n", method);
        exit(1);
    }
    ex->label = (char *)"t";
    for (size_t i = 0; i < ex->method->n_params; i++) {
        ex->p[i] = ex->method->params[i].def == PARAM_REQUIRED ? 0 : ex->method->params[i].def;
        ex->num[i] = ex->method->params[i].num_def;
        ex->pos[i] = POS_SCALAR;
    }
}

/* name=value: an integer, a choice, true/false or a number, by the parameter's kind */
static int exp_set(Experiment *ex, const char *nv)
{
    const char *eq = strchr(nv, '=');
    if (!eq) return -1;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(eq - nv), nv);
    int i = method_param_index(ex->method, name);
    if (i < 0) return -1;
    const ParamDesc *p = &ex->method->params[i];
    const char *v = eq + 1;
    if (p->kind == PARAM_ENUM) {
        for (long k = 0; p->choices[k]; k++)
            if (strcmp(p->choices[k], v) == 0) {
                ex->p[i] = k;
                return 0;
            }
        return -1;
    }
    if (p->kind == PARAM_BOOL) ex->p[i] = strcmp(v, "true") == 0;
    else if (p->kind == PARAM_NUM) ex->num[i] = strtod(v, NULL);
    else ex->p[i] = strtol(v, NULL, 10);
    return 0;
}

static int run(Compressed *c, const Experiment *ex, const double *K, const double *V, size_t T, size_t D)
{
    MethodInput in = {.T = T, .D = D, .K = K, .V = V, .seed = "7"};
    memset(c, 0, sizeof *c);
    return ex->method->apply(c, ex, &in);
}

static void test_methods(void)
{
    Dims d = {.T = 10, .D = 48, .has_values = 1};
    Experiment ex;
    exp_init(&ex, "quantize");
    exp_set(&ex, "rotate=hadamard");
    check(ex.method->check(&ex, &d) == -1 && strstr(kvc_errmsg(), "power of two") && strstr(kvc_errmsg(), "48"),
          "quantize-rotate-needs-power-of-two", "%s", kvc_errmsg());
    exp_init(&ex, "ggml");
    exp_set(&ex, "type=iq4_nl");
    d.D = 40;
    check(ex.method->check(&ex, &d) == -1 && strstr(kvc_errmsg(), "multiple of 32"), "ggml-needs-32",
          "%s", kvc_errmsg());
    exp_set(&ex, "type=bf16");
    check(ex.method->check(&ex, &d) == 0, "ggml-bf16-any-d", "%s", kvc_errmsg());
    exp_init(&ex, "kivi");
    exp_set(&ex, "k_bits=3");
    check(ex.method->check(&ex, &d) == -1 && strstr(kvc_errmsg(), "2, 4 or 8"), "kivi-bits-2-4-8", "%s",
          kvc_errmsg());

    /* bytes */
    size_t T = 40, D = 32, n = T * D;
    double *K = xmalloc(n * sizeof *K), *V = xmalloc(n * sizeof *V);
    uint64_t s = 11;
    for (size_t i = 0; i < n; i++) {
        K[i] = lcg_normal(&s);
        V[i] = lcg_normal(&s);
    }
    Compressed c;
    exp_init(&ex, "kivi");
    exp_set(&ex, "residual=100");
    int rc = run(&c, &ex, K, V, T, D);
    check(rc == 0 && c.bytes == 4 * n && c.K[5] == (double)store_f16_to_f32(store_f16_from_f64(K[5])),
          "kivi-all-residual-is-fp16", "bytes %llu", (unsigned long long)c.bytes);
    compressed_free(&c);
    exp_set(&ex, "residual=8");
    exp_set(&ex, "group_size=16");
    run(&c, &ex, K, V, T, D);
    /* K: 32 rows x 32 ch x 2 bits = 256 B + 2 groups x 32 ch x (scale + min) x 2 B = 256; V: 256 + 32 x 2 x 4 = 256 */
    uint64_t want = 2 * (256 + 256) + 2 * (2 * 8 * D);
    check(c.bytes == want, "kivi-bytes", "got %llu want %llu", (unsigned long long)c.bytes, (unsigned long long)want);
    compressed_free(&c);

    exp_init(&ex, "cast");
    static const char *const modes[] = {"scale=none", "scale=tensor", "scale=head", "scale=token"};
    static const uint64_t extra[] = {0, 4, 4, 4 * 40};
    int ok = 1;
    for (int m = 0; m < 4; m++) {
        exp_set(&ex, modes[m]);
        run(&c, &ex, K, V, T, D);
        if (c.bytes != 2 * (n + extra[m])) ok = 0;
        compressed_free(&c);
    }
    check(ok, "cast-fp8-bytes-per-scale-mode", "FP8 codes + 4 bytes per FP32 scale");
    double *Z = xcalloc(n, sizeof *Z);
    exp_set(&ex, "scale=token");
    run(&c, &ex, Z, NULL, T, D);
    ok = c.bytes == n + 4 * T && !c.V;
    for (size_t i = 0; i < n; i++) ok = ok && c.K[i] == 0 && !signbit(c.K[i]);
    check(ok, "cast-zero-scale-gives-zeros", "bytes %llu", (unsigned long long)c.bytes);
    compressed_free(&c);
    free(Z);

    exp_init(&ex, "ggml");
    exp_set(&ex, "type=q5_1");
    exp_set(&ex, "apply_to=k");
    exp_set(&ex, "outliers=0.01");
    run(&c, &ex, K, V, T, D);
    want = T * (D / 32) * 24 + 6 * (uint64_t)floor(0.01 * (double)n) + 2 * n;
    check(c.bytes == want && c.K && !c.V, "ggml-bytes-with-outliers", "got %llu want %llu",
          (unsigned long long)c.bytes, (unsigned long long)want);
    compressed_free(&c);
    free(K);
    free(V);
}

/* ---- helper modes ---- */

static void *read_all(size_t n)
{
    void *p = xmalloc(n ? n : 1);
    if (fread(p, 1, n, stdin) != n) {
        fprintf(stderr, "test_quant: short input\n");
        exit(2);
    }
    return p;
}

static int helper_quantize(const char *type, size_t T, size_t W)
{
    StoreFormat f;
    memset(&f, 0, sizeof f);
    if (store_type_from_name(&f.type, type)) return 2;
    float *x = read_all(T * W * sizeof *x), *y = xmalloc(T * W * sizeof *y);
    StoreTensor st;
    store_alloc(&st, f, T, W);
    store_quantize_f32(&st, x);
    store_dequantize_f32(y, &st);
    fwrite(st.codes, 1, T * st.row_bytes, stdout);
    fwrite(y, sizeof *y, T * W, stdout);
    store_free(&st);
    free(x);
    free(y);
    return 0;
}

static int helper_intn(char **a)
{
    int bits = atoi(a[0]), asym = atoi(a[1]);
    StoreAxis axis = strcmp(a[2], "channel") == 0 ? STORE_AXIS_CHANNEL : STORE_AXIS_TOKEN;
    size_t g = (size_t)atol(a[3]), T = (size_t)atol(a[5]), W = (size_t)atol(a[6]);
    StoreFormat f = store_intn_format(bits, asym, axis, g, strcmp(a[4], "f32") == 0 ? STORE_SCALE_F32 : STORE_SCALE_F16);
    if (store_check(f, T, W, "intn")) {
        fprintf(stderr, "%s\n", kvc_errmsg());
        return 2;
    }
    double *x = read_all(T * W * sizeof *x), *y = xmalloc(T * W * sizeof *y);
    StoreTensor st;
    store_alloc(&st, f, T, W);
    store_quantize_f64(&st, x);
    store_dequantize_f64(y, &st);
    fwrite(st.codes, 1, st.code_bytes, stdout);
    fwrite(st.params, 1, st.param_bytes, stdout);
    fwrite(y, sizeof *y, T * W, stdout);
    store_free(&st);
    free(x);
    free(y);
    return 0;
}

static int helper_apply(int argc, char **argv)
{
    Experiment ex;
    exp_init(&ex, argv[2]);
    size_t T = (size_t)atol(argv[3]), D = (size_t)atol(argv[4]);
    int hasv = atoi(argv[5]);
    for (int i = 6; i < argc; i++)
        if (exp_set(&ex, argv[i])) {
            fprintf(stderr, "test_quant: bad parameter %s\n", argv[i]);
            return 2;
        }
    Dims d = {.T = T, .D = D, .has_values = hasv};
    if (ex.method->check && ex.method->check(&ex, &d)) {
        fprintf(stderr, "%s\n", kvc_errmsg());
        return 2;
    }
    double *K = read_all(T * D * sizeof *K), *V = hasv ? read_all(T * D * sizeof *V) : NULL;
    Compressed c;
    if (run(&c, &ex, K, V, T, D)) {
        fprintf(stderr, "%s\n", kvc_errmsg());
        return 1;
    }
    fwrite(&c.bytes, sizeof c.bytes, 1, stdout);
    fwrite(c.K ? c.K : K, sizeof *K, T * D, stdout);
    if (hasv) fwrite(c.V ? c.V : V, sizeof *V, T * D, stdout);
    compressed_free(&c);
    free(K);
    free(V);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--quantize") == 0)
        return helper_quantize(argv[2], (size_t)atol(argv[3]), (size_t)atol(argv[4]));
    if (argc == 9 && strcmp(argv[1], "--intn") == 0) return helper_intn(argv + 2);
    if (argc >= 6 && strcmp(argv[1], "--apply") == 0) return helper_apply(argc, argv);
    if (argc > 1) {
        fprintf(stderr, "usage: test_quant [--quantize TYPE T W | --intn BITS ASYM AXIS GROUP SCALE T W | "
                        "--apply METHOD T D HASV [NAME=VALUE]...]\n");
        return 2;
    }
    test_intn_bytes();
    test_intn_packing();
    test_intn_zero_and_lesson();
    test_hadamard();
    test_outliers();
    test_methods();
    return check_failures ? 1 : 0;
}
