/* test_model: unit checks of the Llama engine (src/model/llama.h), and the helper of tests/test_model_torch.py.
 *
 * No arguments: writes a small random Llama model (GQA 3:1, head_dim 12, untied head) into a temporary
 * directory and checks, printing PASS/FAIL lines (exit 1 on any failure):
 *   loading (config values, tied and untied), determinism of prefill and continuation (same bits twice),
 *   the uncompressed-reference contract (continuation over the captured cache and over copies of it, moved
 *   through double at other addresses, give identical bits; positions given or not, identical bits),
 *   continuation against one prefill of context + continuation (float32 rounding apart), an empty context
 *   against a plain prefill, the captured K/V/Q layout, the last-token logits, log_softmax, and every
 *   run-time input error (token ids, positions, rows, non-finite rows).
 * Helper modes (used by test_model_torch.py, which holds the independent PyTorch oracle):
 *   --load DIR                        load; print the config as "key value" lines; or "kvc: <message>" on
 *                                     stderr and exit 2
 *   --run DIR TOKENS.npy C OUT [MASK.npy K.npy V.npy]
 *                                     prefill tokens[0..C) (TOKENS: float .npy of ids) capturing everything,
 *                                     write OUT/logits.npy (C, V), K.npy V.npy (L, Hkv, C, D), Q.npy (L, Hq, C, D);
 *                                     when TOKENS holds more than C ids, continue with the rest over the captured
 *                                     cache, or over the rows of K.npy / V.npy (L, Hkv, C, D) where MASK.npy
 *                                     (L, Hkv, C) is nonzero, writing cont_logits.npy (N, V), cont_Q.npy,
 *                                     cont_K.npy, cont_V.npy
 *   --bench DIR C [N]                 prefill C pseudo-random tokens (and continue N): tokens/s and sgemm GFLOP/s
 */
#include "base/linalg.h"
#include "base/util.h"
#include "io/io_npy.h"
#include "io/io_safetensors.h"
#include "model/llama.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ---- */

static uint64_t rng_state = 12345;
static double rnd(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        num = d > num ? d : num;
        den = m > den ? m : den;
    }
    return den > 0 ? num / den : num;
}

/* ---- a random model on disk ---- */

typedef struct Spec {
    size_t E, L, Hq, Hkv, D, I, V, max_pos;
    int tied;
} Spec;

static void put_tensor(SafetensorsEntry *e, Tensor *t, size_t *k, const char *name, size_t d0, size_t d1, double amp,
                       double base)
{
    Tensor *x = &t[*k];
    memset(x, 0, sizeof *x);
    x->ndim = d1 ? 2 : 1;
    x->shape[0] = d0;
    x->shape[1] = d1;
    size_t n = d0 * (d1 ? d1 : 1);
    x->data = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x->data[i] = base + amp * rnd();
    e[*k] = (SafetensorsEntry){xstrdup(name), x};
    (*k)++;
}

static int write_model(const char *dir, const Spec *s)
{
    char path[512], name[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %zu, "
               "\"num_hidden_layers\": %zu, \"num_attention_heads\": %zu, \"num_key_value_heads\": %zu, "
               "\"head_dim\": %zu, \"intermediate_size\": %zu, \"vocab_size\": %zu, \"max_position_embeddings\": %zu, "
               "\"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"rope_scaling\": null, \"tie_word_embeddings\": %s, "
               "\"hidden_act\": \"silu\", \"torch_dtype\": \"float32\"}\n",
            s->E, s->L, s->Hq, s->Hkv, s->D, s->I, s->V, s->max_pos, s->tied ? "true" : "false");
    if (fclose(f) != 0) return -1;
    size_t cap = 9 * s->L + 3, k = 0;
    SafetensorsEntry *e = xcalloc(cap, sizeof *e);
    Tensor *t = xcalloc(cap, sizeof *t);
    double wa = 1.0 / sqrt((double)s->E), wi = 1.0 / sqrt((double)s->I);
    put_tensor(e, t, &k, "model.embed_tokens.weight", s->V, s->E, 1.0, 0);
    for (size_t l = 0; l < s->L; l++) {
#define NAME(fmt) (snprintf(name, sizeof name, fmt, l), name)
        put_tensor(e, t, &k, NAME("model.layers.%zu.input_layernorm.weight"), s->E, 0, 0.2, 1.0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.self_attn.q_proj.weight"), s->Hq * s->D, s->E, 2 * wa, 0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.self_attn.k_proj.weight"), s->Hkv * s->D, s->E, 2 * wa, 0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.self_attn.v_proj.weight"), s->Hkv * s->D, s->E, wa, 0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.self_attn.o_proj.weight"), s->E, s->Hq * s->D, wa, 0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.post_attention_layernorm.weight"), s->E, 0, 0.2, 1.0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.mlp.gate_proj.weight"), s->I, s->E, wa, 0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.mlp.up_proj.weight"), s->I, s->E, wa, 0);
        put_tensor(e, t, &k, NAME("model.layers.%zu.mlp.down_proj.weight"), s->E, s->I, wi, 0);
#undef NAME
    }
    put_tensor(e, t, &k, "model.norm.weight", s->E, 0, 0.2, 1.0);
    if (!s->tied) put_tensor(e, t, &k, "lm_head.weight", s->V, s->E, wa, 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = safetensors_write(path, e, k, TENSOR_F32);
    for (size_t i = 0; i < k; i++) {
        free((char *)e[i].name);
        tensor_free(&t[i]);
    }
    free(e);
    free(t);
    return rc;
}

/* ---- unit checks ---- */

static void unit_checks(void)
{
    char dir[] = "/tmp/kvc-test-model-XXXXXX";
    if (!mkdtemp(dir)) {
        check(0, "model-tempdir", "mkdtemp failed");
        return;
    }
    Spec s = {.E = 40, .L = 2, .Hq = 6, .Hkv = 2, .D = 12, .I = 56, .V = 50, .max_pos = 64, .tied = 0};
    LlamaModel m;
    int rc = write_model(dir, &s);
    check(rc == 0, "model-write-random", "%s", kvc_errmsg());
    rc = llama_load(&m, dir);
    check(rc == 0, "model-load", "%s", kvc_errmsg());
    if (rc) return;
    const LlamaConfig *c = &m.cfg;
    check(c->hidden == 40 && c->layers == 2 && c->heads == 6 && c->kv_heads == 2 && c->head_dim == 12 &&
              c->inter == 56 && c->vocab == 50 && c->max_pos == 64 && !c->tied && fabsf(c->rms_eps - 1e-5f) == 0 &&
              m.lm_head != m.embed,
          "model-load-config", "config read back differently");

    enum { C = 23, N = 9 };
    size_t L = c->layers, Hq = c->heads, Hkv = c->kv_heads, D = c->head_dim, V = c->vocab;
    int32_t tok[C + N];
    for (size_t i = 0; i < C + N; i++) tok[i] = (int32_t)((i * 17 + 5) % V);
    size_t kvn = L * Hkv * C * D, qn = L * Hq * C * D;
    float *K = xmalloc(kvn * 4), *Vv = xmalloc(kvn * 4), *Q = xmalloc(qn * 4), *lg = xmalloc(C * V * 4);
    float *K2 = xmalloc(kvn * 4), *V2 = xmalloc(kvn * 4), *Q2 = xmalloc(qn * 4), *lg2 = xmalloc(C * V * 4);
    float *last = xmalloc(V * 4);
    LlamaCapture cap = {K, Vv, Q, 0}, cap2 = {K2, V2, Q2, 0};
    LlamaStats st = {0};
    rc = llama_prefill(&m, tok, C, &cap, lg, 1, &st) | llama_prefill(&m, tok, C, &cap2, lg2, 1, NULL);
    check(rc == 0 && same_bits(K, K2, kvn) && same_bits(Vv, V2, kvn) && same_bits(Q, Q2, qn) &&
              same_bits(lg, lg2, C * V),
          "model-prefill-deterministic", "two prefills differ (rc %d)", rc);
    check(st.tokens == C && st.sgemm_flops > 0 && st.seconds > 0, "model-stats", "tokens %zu flops %g", st.tokens,
          st.sgemm_flops);
    rc = llama_prefill(&m, tok, C, NULL, last, 0, NULL);
    check(rc == 0 && rel_err(last, lg + (C - 1) * V, V) < 1e-6, "model-prefill-last-logits", "rel %g",
          rel_err(last, lg + (C - 1) * V, V));

    /* queries captured from q_first: the tail of the full capture */
    float *Qt = xmalloc(L * Hq * 5 * D * 4);
    LlamaCapture capq = {NULL, NULL, Qt, C - 5};
    rc = llama_prefill(&m, tok, C, &capq, NULL, 0, NULL);
    int ok = rc == 0;
    for (size_t lh = 0; ok && lh < L * Hq; lh++) ok = same_bits(Qt + lh * 5 * D, Q + (lh * C + C - 5) * D, 5 * D);
    check(ok, "model-capture-q-first", "queries from q_first differ from the full capture's tail");
    free(Qt);

    /* continuation over the captured cache: the reference */
    LlamaRows *rows = xmalloc(L * Hkv * sizeof *rows), *rows2 = xmalloc(L * Hkv * sizeof *rows2);
    llama_cache_full(rows, c, K, Vv, C);
    LlamaCache cache = {C, rows};
    float *cl = xmalloc(N * V * 4), *cl2 = xmalloc(N * V * 4);
    rc = llama_continue(&m, &cache, tok + C, N, cl, NULL, NULL);
    check(rc == 0, "model-continue", "%s", kvc_errmsg());
    rc = llama_continue(&m, &cache, tok + C, N, cl2, NULL, NULL);
    check(rc == 0 && same_bits(cl, cl2, N * V), "model-continue-deterministic", "two continuations differ");

    /* the identity method: the same values through double, at other (unaligned) addresses -> same bits */
    float *Kb = xmalloc((kvn + 3) * 4), *Vb = xmalloc((kvn + 5) * 4);
    size_t *pos = xmalloc(C * sizeof *pos);
    for (size_t i = 0; i < C; i++) pos[i] = i;
    for (size_t i = 0; i < kvn; i++) {
        double k = K[i], v = Vv[i];
        Kb[i + 3] = (float)k;
        Vb[i + 5] = (float)v;
    }
    for (size_t k = 0; k < L * Hkv; k++) rows2[k] = (LlamaRows){C, Kb + 3 + k * C * D, Vb + 5 + k * C * D, pos};
    LlamaCache cache2 = {C, rows2};
    rc = llama_continue(&m, &cache2, tok + C, N, cl2, NULL, NULL);
    check(rc == 0 && same_bits(cl, cl2, N * V), "model-continue-identity-bits",
          "logits over copied rows differ (rel %g)", rel_err(cl2, cl, N * V));

    /* against one prefill of context + continuation: float32 rounding apart */
    float *full = xmalloc((C + N) * V * 4);
    rc = llama_prefill(&m, tok, C + N, NULL, full, 1, NULL);
    double r = rel_err(cl, full + C * V, N * V);
    check(rc == 0 && r < 1e-5, "model-continue-vs-prefill", "rel %g", r);

    /* continuation's own capture equals the full prefill's capture at positions C.. */
    size_t kvf = L * Hkv * (C + N) * D;
    float *Kf = xmalloc(kvf * 4), *Vf = xmalloc(kvf * 4), *Kc = xmalloc(L * Hkv * N * D * 4);
    float *Vc = xmalloc(L * Hkv * N * D * 4);
    LlamaCapture capf = {Kf, Vf, NULL, 0}, capc = {Kc, Vc, NULL, 0};
    rc = llama_prefill(&m, tok, C + N, &capf, NULL, 0, NULL) | llama_continue(&m, &cache, tok + C, N, cl2, &capc, NULL);
    double rk = 0;
    for (size_t lh = 0; lh < L * Hkv; lh++) {
        double a = rel_err(Kc + lh * N * D, Kf + (lh * (C + N) + C) * D, N * D);
        double b = rel_err(Vc + lh * N * D, Vf + (lh * (C + N) + C) * D, N * D);
        rk = a > rk ? a : rk;
        rk = b > rk ? b : rk;
    }
    /* layer 0's continuation K sees no attention yet: the same products of the same rows (other sgemm shapes) */
    r = rel_err(Kc, Kf + C * D, N * D);
    check(rc == 0 && r < 1e-6, "model-capture-layout", "layer 0 head 0 K: rel %g", r);
    check(rc == 0 && rk < 1e-5, "model-continue-capture", "rel %g", rk);
    free(Kf), free(Vf), free(Kc), free(Vc);

    /* an empty context (no rows) from position 0 is a plain prefill */
    LlamaRows *none = xcalloc(L * Hkv, sizeof *none);
    LlamaCache empty = {0, none};
    float *pl = xmalloc(N * V * 4);
    rc = llama_continue(&m, &empty, tok, N, cl2, NULL, NULL) | llama_prefill(&m, tok, N, NULL, pl, 1, NULL);
    check(rc == 0 && same_bits(cl2, pl, N * V), "model-continue-empty-context", "rel %g", rel_err(cl2, pl, N * V));

    /* eviction: a head with no rows, a head with only the odd positions */
    for (size_t k = 0; k < L * Hkv; k++) rows2[k] = rows[k];
    float *Ko = xmalloc(C * D * 4), *Vo = xmalloc(C * D * 4);
    size_t *po = xmalloc(C * sizeof *po), no = 0;
    for (size_t i = 1; i < C; i += 2, no++) {
        memcpy(Ko + no * D, K + (1 * C + i) * D, D * 4);
        memcpy(Vo + no * D, Vv + (1 * C + i) * D, D * 4);
        po[no] = i;
    }
    rows2[0].n = 0;
    rows2[1] = (LlamaRows){no, Ko, Vo, po};
    rc = llama_continue(&m, &cache2, tok + C, N, cl2, NULL, NULL);
    check(rc == 0 && !same_bits(cl, cl2, N * V) && rel_err(cl2, cl, N * V) < 10, "model-continue-evicted",
          "rc %d", rc);

    /* log_softmax */
    double *ls = xmalloc(V * sizeof *ls), sum = 0;
    llama_log_softmax(ls, cl, V);
    for (size_t j = 0; j < V; j++) sum += exp(ls[j]);
    check(fabs(sum - 1) < 1e-12, "model-log-softmax", "sum %.17g", sum);

    /* run-time input errors */
    int32_t bad[2] = {3, (int32_t)V};
    check(llama_prefill(&m, bad, 2, NULL, NULL, 0, NULL) < 0 && strstr(kvc_errmsg(), "outside the vocabulary"),
          "model-bad-token", "%s", kvc_errmsg());
    bad[1] = -1;
    check(llama_continue(&m, &cache, bad, 2, cl2, NULL, NULL) < 0 && strstr(kvc_errmsg(), "(got -1)"),
          "model-bad-token-negative", "%s", kvc_errmsg());
    int32_t *many = xcalloc(65, sizeof *many);
    check(llama_prefill(&m, many, 65, NULL, NULL, 0, NULL) < 0 && strstr(kvc_errmsg(), "max_position_embeddings"),
          "model-too-long", "%s", kvc_errmsg());
    check(llama_continue(&m, &cache, many, 64 - C + 1, cl2, NULL, NULL) < 0 &&
              strstr(kvc_errmsg(), "max_position_embeddings"),
          "model-continue-too-long", "%s", kvc_errmsg());
    free(many);
    LlamaCache shorter = {C - 1, rows};
    check(llama_continue(&m, &shorter, tok + C, N, cl2, NULL, NULL) < 0 && strstr(kvc_errmsg(), "more rows"),
          "model-rows-beyond-context", "%s", kvc_errmsg());
    size_t swap = po[2];
    po[2] = po[1];
    check(llama_continue(&m, &cache2, tok + C, N, cl2, NULL, NULL) < 0 && strstr(kvc_errmsg(), "increase"),
          "model-rows-positions", "%s", kvc_errmsg());
    po[2] = swap;
    Vo[7] = NAN;
    check(llama_continue(&m, &cache2, tok + C, N, cl2, NULL, NULL) < 0 && strstr(kvc_errmsg(), "not finite"),
          "model-rows-nonfinite", "%s", kvc_errmsg());
    LlamaCapture badq = {NULL, NULL, Q, C + 1};
    check(llama_prefill(&m, tok, C, &badq, NULL, 0, NULL) < 0, "model-bad-q-first", "accepted q_first > C");

    free(ls), free(Ko), free(Vo), free(po), free(none), free(pl), free(full), free(Kb), free(Vb), free(pos);
    free(cl), free(cl2), free(rows), free(rows2), free(K), free(Vv), free(Q), free(lg), free(K2), free(V2), free(Q2);
    free(lg2), free(last);
    llama_free(&m);

    /* tied embeddings: no lm_head.weight needed, the embedding is the head */
    s.tied = 1;
    rc = write_model(dir, &s) | llama_load(&m, dir);
    check(rc == 0 && m.lm_head == m.embed && m.cfg.tied, "model-load-tied", "%s", kvc_errmsg());
    llama_free(&m);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- helper modes ---- */

static int write_f32(const char *dir, const char *name, const float *x, const size_t *shape, size_t ndim)
{
    Tensor t = {0};
    t.ndim = ndim;
    size_t n = 1;
    for (size_t k = 0; k < ndim; k++) n *= (t.shape[k] = shape[k]);
    t.data = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) t.data[i] = x[i];
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = npy_write(path, &t);
    tensor_free(&t);
    return rc;
}

static int read_f32(float **out, const char *path, size_t want)
{
    Tensor t;
    if (npy_read(&t, path) < 0) return -1;
    if (tensor_count(&t) != want) {
        tensor_free(&t);
        return kvc_fail("%s: expected %zu values (got %zu)", path, want, tensor_count(&t));
    }
    *out = xmalloc(want * sizeof **out);
    for (size_t i = 0; i < want; i++) (*out)[i] = (float)t.data[i];
    tensor_free(&t);
    return 0;
}

static int fail_exit(void)
{
    fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    return 2;
}

static int mode_load(const char *dir)
{
    LlamaModel m;
    if (llama_load(&m, dir) < 0) return fail_exit();
    const LlamaConfig *c = &m.cfg;
    printf("hidden %zu\nlayers %zu\nheads %zu\nkv_heads %zu\nhead_dim %zu\ninter %zu\nvocab %zu\nmax_pos %zu\n"
           "tied %d\nrope_type %d\nparams %zu\n",
           c->hidden, c->layers, c->heads, c->kv_heads, c->head_dim, c->inter, c->vocab, c->max_pos, c->tied,
           (int)c->rope_type, m.n_params);
    for (size_t j = 0; j < c->head_dim / 2; j++) printf("inv_freq %zu %.9g\n", j, (double)m.inv_freq[j]);
    llama_free(&m);
    return 0;
}

/* The continuation's context rows: the captured cache, or (MASK, K, V given) the rows kept by MASK. */
static int supplied_rows(LlamaRows *rows, float **bufs, size_t **pos, char **argv, const LlamaConfig *c, size_t C)
{
    size_t LH = c->layers * c->kv_heads, D = c->head_dim;
    float *mask = NULL, *Ks = NULL, *Vs = NULL;
    int rc = -1;
    if (read_f32(&mask, argv[6], LH * C) < 0 || read_f32(&Ks, argv[7], LH * C * D) < 0 ||
        read_f32(&Vs, argv[8], LH * C * D) < 0)
        goto done;
    bufs[0] = xmalloc(LH * C * D * 4), bufs[1] = xmalloc(LH * C * D * 4), *pos = xmalloc(LH * C * sizeof **pos);
    for (size_t lh = 0; lh < LH; lh++) {
        size_t n = 0;
        for (size_t i = 0; i < C; i++)
            if (mask[lh * C + i] != 0) {
                memcpy(bufs[0] + (lh * C + n) * D, Ks + (lh * C + i) * D, D * 4);
                memcpy(bufs[1] + (lh * C + n) * D, Vs + (lh * C + i) * D, D * 4);
                (*pos)[lh * C + n++] = i;
            }
        rows[lh] = (LlamaRows){n, bufs[0] + lh * C * D, bufs[1] + lh * C * D, *pos + lh * C};
    }
    rc = 0;
done:
    free(mask), free(Ks), free(Vs);
    return rc;
}

static int mode_run(int argc, char **argv)
{
    const char *dir = argv[2], *out = argv[5];
    LlamaModel m;
    Tensor tt = {0};
    int32_t *tok = NULL;
    float *K = NULL, *Vv = NULL, *Q = NULL, *lg = NULL, *cl = NULL, *cK = NULL, *cV = NULL, *cQ = NULL;
    float *bufs[2] = {NULL, NULL};
    size_t *pos = NULL;
    LlamaRows *rows = NULL;
    int rc = 2;
    if (llama_load(&m, dir) < 0) return fail_exit();
    if (npy_read(&tt, argv[3]) < 0) goto fail;
    const LlamaConfig *c = &m.cfg;
    size_t T = tensor_count(&tt), C = (size_t)strtoul(argv[4], NULL, 10), N = T - C;
    size_t L = c->layers, Hq = c->heads, Hkv = c->kv_heads, D = c->head_dim, V = c->vocab;
    if (C == 0 || C > T) {
        kvc_fail("--run: C must be 1..%zu (got %s)", T, argv[4]);
        goto fail;
    }
    tok = xmalloc(T * sizeof *tok);
    for (size_t i = 0; i < T; i++) tok[i] = (int32_t)tt.data[i];
    K = xmalloc(L * Hkv * C * D * 4), Vv = xmalloc(L * Hkv * C * D * 4), Q = xmalloc(L * Hq * C * D * 4);
    lg = xmalloc(C * V * 4);
    LlamaCapture cap = {K, Vv, Q, 0};
    size_t skv[4] = {L, Hkv, C, D}, sq[4] = {L, Hq, C, D}, sl[2] = {C, V};
    if (llama_prefill(&m, tok, C, &cap, lg, 1, NULL) < 0 || write_f32(out, "logits.npy", lg, sl, 2) < 0 ||
        write_f32(out, "K.npy", K, skv, 4) < 0 || write_f32(out, "V.npy", Vv, skv, 4) < 0 ||
        write_f32(out, "Q.npy", Q, sq, 4) < 0)
        goto fail;
    if (N > 0) {
        rows = xmalloc(L * Hkv * sizeof *rows);
        llama_cache_full(rows, c, K, Vv, C);
        if (argc > 8 && supplied_rows(rows, bufs, &pos, argv, c, C) < 0) goto fail;
        LlamaCache cache = {C, rows};
        cl = xmalloc(N * V * 4), cK = xmalloc(L * Hkv * N * D * 4), cV = xmalloc(L * Hkv * N * D * 4);
        cQ = xmalloc(L * Hq * N * D * 4);
        LlamaCapture ccap = {cK, cV, cQ, 0};
        size_t ckv[4] = {L, Hkv, N, D}, cq[4] = {L, Hq, N, D}, cls[2] = {N, V};
        if (llama_continue(&m, &cache, tok + C, N, cl, &ccap, NULL) < 0 ||
            write_f32(out, "cont_logits.npy", cl, cls, 2) < 0 || write_f32(out, "cont_K.npy", cK, ckv, 4) < 0 ||
            write_f32(out, "cont_V.npy", cV, ckv, 4) < 0 || write_f32(out, "cont_Q.npy", cQ, cq, 4) < 0)
            goto fail;
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    free(rows), free(bufs[0]), free(bufs[1]), free(pos), free(cl), free(cK), free(cV), free(cQ);
    free(tok), free(K), free(Vv), free(Q), free(lg);
    tensor_free(&tt);
    llama_free(&m);
    return rc;
}

static int mode_bench(const char *dir, size_t C, size_t N)
{
    LlamaModel m;
    if (llama_load(&m, dir) < 0) return fail_exit();
    const LlamaConfig *c = &m.cfg;
    size_t L = c->layers, Hkv = c->kv_heads, D = c->head_dim;
    int32_t *tok = xmalloc((C + N) * sizeof *tok);
    for (size_t i = 0; i < C + N; i++) tok[i] = (int32_t)((i * 2654435761u) % c->vocab);
    float *K = xmalloc(L * Hkv * C * D * 4), *Vv = xmalloc(L * Hkv * C * D * 4), *lg = xmalloc(c->vocab * 4);
    float *cl = xmalloc(N * c->vocab * 4);
    LlamaRows *rows = xmalloc(L * Hkv * sizeof *rows);
    LlamaCapture cap = {K, Vv, NULL, 0};
    LlamaStats st = {0}, cs = {0};
    int rc = llama_prefill(&m, tok, C, &cap, lg, 0, &st);
    if (rc == 0)
        printf("prefill %zu tokens: %.3f s, %.0f tokens/s, sgemm %.2f GFLOP in %.3f s = %.1f GFLOP/s (%.0f%% of "
               "the time)\n", C, st.seconds, (double)C / st.seconds, st.sgemm_flops * 1e-9, st.sgemm_seconds,
               st.sgemm_flops * 1e-9 / st.sgemm_seconds, 100 * st.sgemm_seconds / st.seconds);
    if (rc == 0 && N) {
        llama_cache_full(rows, c, K, Vv, C);
        LlamaCache cache = {C, rows};
        rc = llama_continue(&m, &cache, tok + C, N, cl, NULL, &cs);
        if (rc == 0)
            printf("continue %zu tokens over %zu: %.3f s, %.0f tokens/s, sgemm %.2f GFLOP/s\n", N, C, cs.seconds,
                   (double)N / cs.seconds, cs.sgemm_flops * 1e-9 / cs.sgemm_seconds);
    }
    if (rc) fprintf(stderr, "kvc: %s\n", kvc_errmsg());
    free(tok), free(K), free(Vv), free(lg), free(cl), free(rows);
    llama_free(&m);
    return rc ? 2 : 0;
}

int main(int argc, char **argv)
{
    la_init();
    if (argc == 3 && !strcmp(argv[1], "--load")) return mode_load(argv[2]);
    if ((argc == 6 || argc == 9) && !strcmp(argv[1], "--run")) return mode_run(argc, argv);
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "--bench"))
        return mode_bench(argv[2], (size_t)strtoul(argv[3], NULL, 10),
                          argc == 5 ? (size_t)strtoul(argv[4], NULL, 10) : 0);
    if (argc > 1) {
        fprintf(stderr, "usage: test_model [--load DIR | --run DIR TOKENS.npy C OUT [MASK K V] | --bench DIR C [N]]\n");
        return 2;
    }
    unit_checks();
    return check_failures ? 1 : 0;
}
