/* reference.c — the decoder forward written for reading, in the spirit of llama2.c's `forward`: one token at
 * a time through every layer, a plain KV cache, loops that say what they compute. It shares no code with the
 * backend's kernels (its own matmul, norm, RoPE, softmax with libm's expf, SwiGLU), so agreeing with it is
 * evidence, not an identity. f32 storage, double accumulators in the dot products and sums. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* out[N] = W[N][K] x[K] (+ bias). */
static void matvec(float *out, const float *w, const float *x, const float *bias, int N, int K) {
    for (int n = 0; n < N; n++) {
        double s = bias ? bias[n] : 0.0;
        for (int k = 0; k < K; k++) s += (double)w[(size_t)n * K + k] * x[k];
        out[n] = (float)s;
    }
}

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

/* Rotate-half RoPE of one head at position pos. */
static void rope(float *x, int d, int pos, const float *inv_freq) {
    for (int i = 0; i < d / 2; i++) {
        double angle = (double)pos * inv_freq[i];
        float c = (float)cos(angle), s = (float)sin(angle), a = x[i], b = x[i + d / 2];
        x[i] = a * c - b * s;
        x[i + d / 2] = b * c + a * s;
    }
}

static void softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / sum);
}

int cpu_reference_forward(const Model *m, const int *tokens, int n, float *logits, KvErr *err) {
    const ModelConfig *c = &m->cfg;
    if (!m->has_host_weights)
        return kv_fail(err, "reference forward: %s was loaded without its f32 weights (use model_load)", m->source);
    if (n < 1) return kv_fail(err, "reference forward: no tokens");
    int D = c->d_model, H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, F = c->d_ff, G = H / K;
    size_t kd = (size_t)K * d;
    float *x = malloc(sizeof(float) * D), *xn = malloc(sizeof(float) * D), *q = malloc(sizeof(float) * H * d),
          *att = malloc(sizeof(float) * H * d), *tmp = malloc(sizeof(float) * D), *gate = malloc(sizeof(float) * F),
          *up = malloc(sizeof(float) * F), *scores = malloc(sizeof(float) * n),
          *kcache = malloc(sizeof(float) * c->n_layers * n * kd), *vcache = malloc(sizeof(float) * c->n_layers * n * kd);
    int ok = x && xn && q && att && tmp && gate && up && scores && kcache && vcache;
    for (int t = 0; ok && t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size) {
            ok = 0;
            kv_fail(err, "reference forward: token %d outside the vocabulary of %d", tokens[t], c->vocab_size);
            break;
        }
        memcpy(x, m->tok_embd + (size_t)tokens[t] * D, sizeof(float) * D);
        for (int l = 0; l < c->n_layers; l++) {
            const LayerWeights *w = &m->layers[l];
            float *kt = kcache + ((size_t)l * n + t) * kd, *vt = vcache + ((size_t)l * n + t) * kd;
            /* attention: q, k, v of this token; k and v join the cache */
            rmsnorm(xn, x, w->attn_norm, D, c->rms_eps);
            matvec(q, w->wq, xn, w->bq, H * d, D);
            matvec(kt, w->wk, xn, w->bk, (int)kd, D);
            matvec(vt, w->wv, xn, w->bv, (int)kd, D);
            for (int h = 0; h < H; h++) rope(q + (size_t)h * d, d, t, m->rope_inv_freq);
            for (int h = 0; h < K; h++) rope(kt + (size_t)h * d, d, t, m->rope_inv_freq);
            /* each query head over its kv-head's keys 0..t: softmax(q.k / sqrt(d)) . v */
            for (int h = 0; h < H; h++) {
                const float *qh = q + (size_t)h * d;
                int kh = h / G;
                for (int j = 0; j <= t; j++) {
                    const float *kj = kcache + ((size_t)l * n + j) * kd + (size_t)kh * d;
                    double s = 0;
                    for (int i = 0; i < d; i++) s += (double)qh[i] * kj[i];
                    scores[j] = (float)(s / sqrt((double)d));
                }
                softmax(scores, t + 1);
                for (int i = 0; i < d; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++) s += (double)scores[j] * vcache[((size_t)l * n + j) * kd + (size_t)kh * d + i];
                    att[(size_t)h * d + i] = (float)s;
                }
            }
            matvec(tmp, w->wo, att, NULL, D, H * d);
            for (int i = 0; i < D; i++) x[i] += tmp[i];
            /* feed-forward: down(silu(gate(x)) * up(x)) */
            rmsnorm(xn, x, w->ffn_norm, D, c->rms_eps);
            matvec(gate, w->w_gate, xn, NULL, F, D);
            matvec(up, w->w_up, xn, NULL, F, D);
            for (int i = 0; i < F; i++) gate[i] = (float)(gate[i] / (1.0 + exp(-(double)gate[i])) * up[i]);
            matvec(tmp, w->w_down, gate, NULL, D, F);
            for (int i = 0; i < D; i++) x[i] += tmp[i];
        }
    }
    if (ok) {
        rmsnorm(xn, x, m->out_norm, D, c->rms_eps);
        matvec(logits, m->lm_head, xn, NULL, c->vocab_size, D);
    } else if (!err->msg[0]) {
        kv_fail(err, "reference forward: out of memory for a context of %d tokens", n);
    }
    free(x), free(xn), free(q), free(att), free(tmp), free(gate), free(up), free(scores), free(kcache), free(vcache);
    return ok ? 0 : -1;
}
