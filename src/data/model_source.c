/* model_source: the data of data.source "model" and the model-level metrics. See model_source.h. */
#include "data/model_source.h"
#include "model/tokens.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_source_free(ModelSource *ms)
{
    if (!ms) return;
    llama_free(&ms->model);
    free(ms->tokens);
    free(ms->ref_logp);
    free(ms->ref_top1);
    free(ms->answers);
    memset(ms, 0, sizeof *ms);
}

static size_t argmax(const double *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static double *to_double(const float *x, size_t n)
{
    double *out = xmalloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = x[i];
    return out;
}

int model_source_make(Data *d, const Config *cfg)
{
    memset(d, 0, sizeof *d);
    const ModelSpec *spec = &cfg->model;
    ModelSource *ms = xcalloc(1, sizeof *ms);
    d->model = ms;
    size_t C = spec->context, N = spec->continuation, W = cfg->observe.n;
    if (llama_load(&ms->model, spec->dir)) goto fail;
    const LlamaConfig *lc = &ms->model.cfg;
    size_t L = lc->layers, H = lc->kv_heads, Hq = lc->heads, D = lc->head_dim, V = lc->vocab;
    if (L != cfg->layers || H != cfg->kv_heads || Hq != cfg->q_heads || D != cfg->dims.D || V != spec->vocab) {
        kvc_fail("data.model: %s/config.json changed after the config was read (got %zu layers, %zu KV heads, %zu "
                 "query heads, head_dim %zu, vocab %zu)", spec->dir, L, H, Hq, D, V);
        goto fail;
    }
    ms->C = C;
    ms->N = N;
    ms->V = V;
    ms->tokens = xmalloc((C + N + 1) * sizeof *ms->tokens);
    if (spec->n_answers) {
        ms->n_answers = spec->n_answers;
        ms->answers = xmalloc(ms->n_answers * sizeof *ms->answers);
        memcpy(ms->answers, spec->answers, ms->n_answers * sizeof *ms->answers);
    }
    if (tokens_read(ms->tokens, C + N + 1, spec->sequence, spec->input, spec->text ? TOKENS_TEXT : TOKENS_NPY, V)) goto fail;

    size_t kv = L * H * C * D;
    float *Kf = xmalloc(kv * sizeof *Kf), *Vf = xmalloc(kv * sizeof *Vf);
    float *Of = W ? xmalloc(L * Hq * W * D * sizeof *Of) : NULL;
    LlamaCapture cap = {Kf, Vf, Of, C - W};
    int rc = llama_prefill(&ms->model, ms->tokens, C, &cap, NULL, 0, &ms->prefill);
    float *Qf = NULL, *logits = NULL;
    LlamaRows *rows = NULL;
    if (rc == 0) {
        rows = xmalloc(L * H * sizeof *rows);
        llama_cache_full(rows, lc, Kf, Vf, C);
        LlamaCache cache = {C, rows};
        Qf = xmalloc(L * Hq * N * D * sizeof *Qf);
        logits = xmalloc(N * V * sizeof *logits);
        LlamaCapture qcap = {NULL, NULL, Qf, 0};
        rc = llama_continue(&ms->model, &cache, ms->tokens + C, N, logits, &qcap, &ms->decode);
    }
    if (rc == 0) {
        d->L = L;
        d->H = H;
        d->Hq = Hq;
        d->T = C;
        d->D = D;
        d->N = N;
        d->W = W;
        d->K = to_double(Kf, kv);
        d->V = to_double(Vf, kv);
        d->Q = to_double(Qf, L * Hq * N * D);
        if (W) {
            d->O = to_double(Of, L * Hq * W * D);
            d->obs_pos = xmalloc(W * sizeof *d->obs_pos);
            for (size_t j = 0; j < W; j++) d->obs_pos[j] = C - W + j;
        }
        ms->ref_logp = xmalloc(N * V * sizeof *ms->ref_logp);
        ms->ref_top1 = xmalloc(N * sizeof *ms->ref_top1);
        double nll = 0;
        for (size_t j = 0; j < N; j++) {
            double *lp = ms->ref_logp + j * V;
            llama_log_softmax(lp, logits + j * V, V);
            ms->ref_top1[j] = argmax(lp, V);
            nll += -lp[ms->tokens[C + j + 1]];
        }
        ms->ref_nll = nll / (double)N;
    }
    free(Kf);
    free(Vf);
    free(Of);
    free(Qf);
    free(logits);
    free(rows);
    if (rc) goto fail;
    if (data_check(d)) goto fail;
    return 0;
fail:
    data_free(d);
    return -1;
}

int model_source_score(double out[5], const ModelSource *ms, const LlamaRows *rows)
{
    size_t N = ms->N, V = ms->V, C = ms->C;
    float *logits = xmalloc(N * V * sizeof *logits);
    LlamaCache cache = {C, rows};
    if (llama_continue(&ms->model, &cache, ms->tokens + C, N, logits, NULL, NULL)) {
        free(logits);
        return -1;
    }
    double *lp = xmalloc(V * sizeof *lp), kl = 0, nll = 0, top1 = 0, hits = 0;
    size_t a = 0;   /* the next answer: x[C + answers[a]] is predicted by distribution answers[a] - 1 */
    for (size_t j = 0; j < N; j++) {
        const double *ref = ms->ref_logp + j * V;
        llama_log_softmax(lp, logits + j * V, V);
        double k = 0;
        for (size_t v = 0; v < V; v++) k += exp(ref[v]) * (ref[v] - lp[v]);
        kl += k > 0 ? k : 0.0;
        nll += -lp[ms->tokens[C + j + 1]];
        size_t best = argmax(lp, V);
        top1 += best == ms->ref_top1[j];
        if (a < ms->n_answers && ms->answers[a] == j + 1) {
            hits += best == (size_t)ms->tokens[C + j + 1];
            a++;
        }
    }
    free(lp);
    free(logits);
    out[0] = kl / (double)N;
    out[1] = nll / (double)N;
    out[2] = out[1] - ms->ref_nll;
    out[3] = top1 / (double)N;
    out[4] = ms->n_answers ? hits / (double)ms->n_answers : 0.0;
    return 0;
}

void model_rows_set(LlamaRows *r, const double *K, const double *V, const size_t *kept, size_t n_kept, size_t T,
                    size_t D)
{
    size_t n = kept ? n_kept : T;
    float *Kf = xmalloc((n ? n : 1) * D * sizeof *Kf), *Vf = xmalloc((n ? n : 1) * D * sizeof *Vf);
    size_t *pos = xmalloc((n ? n : 1) * sizeof *pos);
    for (size_t i = 0; i < n; i++) {
        size_t t = kept ? kept[i] : i;
        pos[i] = t;
        for (size_t j = 0; j < D; j++) {
            Kf[i * D + j] = (float)K[t * D + j];
            Vf[i * D + j] = (float)V[t * D + j];
        }
    }
    *r = (LlamaRows){n, Kf, Vf, pos};
}

void model_rows_free(LlamaRows *rows, size_t n)
{
    for (size_t i = 0; rows && i < n; i++) {
        free((void *)rows[i].K);
        free((void *)rows[i].V);
        free((void *)rows[i].pos);
    }
}

static double per_second(double x, double seconds) { return seconds > 0 ? x / seconds : 0; }

void model_source_speed(char *buf, size_t size, const ModelSource *ms)
{
    const LlamaStats *p = &ms->prefill, *d = &ms->decode;
    snprintf(buf, size, "prefill %zu tokens in %.3f s (%.0f tokens/s, sgemm %.1f GFLOP/s); reference decode %zu "
             "tokens in %.3f s (%.0f tokens/s)", p->tokens, p->seconds, per_second((double)p->tokens, p->seconds),
             per_second(p->sgemm_flops, p->sgemm_seconds) / 1e9, d->tokens, d->seconds,
             per_second((double)d->tokens, d->seconds));
}
