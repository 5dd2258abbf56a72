/* expected_attention.c — kvpress 0.5.5's ExpectedAttentionPress (Devoto et al. 2025, arXiv 2510.00636, by kvpress's
 * authors): each entry scores the attention that the context's queries, modelled as a Gaussian and rotated as at the
 * next n_future positions, are expected to pay it. Per query head the backend's opt-in statistics
 * (NEEDS_QUERY_STATS) give the mean mu and covariance S of the pre-RoPE queries of positions n_sink..L-1; R, the RoPE
 * rotation averaged over positions L..L+n_future-1, makes them R mu and R S R^T; key j (after RoPE) has the logit
 * k.R mu / sqrt(d) + k^T R S R^T k / (2d), the log of E[exp(q.k / sqrt(d))] for that Gaussian q, softmaxed over
 * the keys after the sinks, averaged over the query heads of its group and weighted by ||v_j||_2 (after adding
 * epsilon, 0). The n_sink first positions score the layer's largest score plus 1, so every head keeps them first;
 * each head keeps its top int(L*f). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy_internal.h"

/* Rotates the pairs (x[i], x[i + d/2]) of n vectors of d entries `step` apart, the vectors `stride` apart, by the
 * averaged rotation (c[i], s[i]) the way RoPE rotates a query (engine/cpu/portable.c cpu_rope): each vector x
 * becomes R x. */
static void rotate_pairs(double *x, int n, size_t stride, size_t step, int d, const double *c, const double *s) {
    const int half = d / 2;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < half; i++) {
            double *a = x + (size_t)r * stride + (size_t)i * step, *b = a + (size_t)half * step;
            double x0 = *a, x1 = *b;
            *a = c[i] * x0 - s[i] * x1;
            *b = s[i] * x0 + c[i] * x1;
        }
}

/* score[k][j], in double and rounded once (kvpress: float32 throughout). */
static int score_expected_attention(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o,
                                    LayerScores *out, KvErr *err) {
    (void)cfg;
    const int L = o->L, H = o->H, K = o->K, d = o->d, G = H / K, half = d / 2, sinks = row->n_sink;
    const int n = L - sinks; /* the scored keys */
    if (n < 1)
        return kv_fail(err, "policy %s: a context of %d tokens holds nothing after its %d sink tokens (kvpress "
                            "asserts more)", row->name, L, sinks);
    const size_t per_head = (size_t)d + (size_t)d * d;
    double *avg = kv_malloc(sizeof(double) * ((size_t)d + per_head * H + (size_t)H * n), err);
    out->score = avg ? kv_malloc(sizeof(float) * (size_t)K * L, err) : NULL;
    if (!out->score) {
        free(avg);
        return -1;
    }
    /* the averaged rotation: the mean cos and sin of each frequency's angle over the future positions, the angles
     * in double as the backend's RoPE takes them */
    double *cos_avg = avg, *sin_avg = avg + half, *stats = avg + d, *prob = stats + per_head * H;
    for (int i = 0; i < half; i++) {
        double c = 0.0, s = 0.0;
        for (int p = L; p < L + row->n_future; p++) {
            c += cos((double)p * o->rope_inv_freq[i]);
            s += sin((double)p * o->rope_inv_freq[i]);
        }
        cos_avg[i] = c / row->n_future;
        sin_avg[i] = s / row->n_future;
    }
    const double scale = 1.0 / sqrt((double)d);
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        /* R mu; R S R^T: S's rows rotated (S R^T), then its columns */
        double *mu = stats + per_head * h, *cov = mu + d, *p = prob + (size_t)h * n;
        memcpy(mu, o->query_stats + per_head * h, sizeof(double) * per_head);
        rotate_pairs(mu, 1, 0, 1, d, cos_avg, sin_avg);
        rotate_pairs(cov, d, d, 1, d, cos_avg, sin_avg);
        rotate_pairs(cov, d, 1, d, d, cos_avg, sin_avg);
        const float *keys = o->keys[h / G];
        double top = -INFINITY, total = 0.0, y[d];
        for (int j = 0; j < n; j++) {
            const float *k = keys + (size_t)(sinks + j) * d;
            /* y = (R S R^T)^T k, a row at a time (no reduction in the inner loop, so it vectorises); k^T A^T k is
             * k^T A k */
            for (int a = 0; a < d; a++) y[a] = 0.0;
            for (int b = 0; b < d; b++) {
                const double *row = cov + (size_t)b * d, kb = k[b];
                for (int a = 0; a < d; a++) y[a] += row[a] * kb;
            }
            double linear = 0.0, quadratic = 0.0;
            for (int a = 0; a < d; a++) {
                linear += mu[a] * k[a];
                quadratic += y[a] * k[a];
            }
            p[j] = linear * scale + quadratic / d / 2;
            top = p[j] > top ? p[j] : top;
        }
        for (int j = 0; j < n; j++) total += (p[j] = exp(p[j] - top));
        for (int j = 0; j < n; j++) p[j] /= total;
    }
    float layer_max = -INFINITY;
    for (int k = 0; k < K; k++)
        for (int j = 0; j < n; j++) {
            const float *v = o->values[k] + (size_t)(sinks + j) * d;
            double mean = 0.0, norm = 0.0;
            for (int g = 0; g < G; g++) mean += prob[(size_t)(k * G + g) * n + j];
            for (int t = 0; t < d; t++) norm += (double)v[t] * v[t];
            float s = (float)((mean / G + row->epsilon) * sqrt(norm));
            out->score[(size_t)k * L + sinks + j] = s;
            layer_max = s > layer_max ? s : layer_max;
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < sinks; j++) out->score[(size_t)k * L + j] = layer_max + 1.0f;
    free(avg);
    return 0;
}

POLICY_DESCRIPTOR(EXPECTED_ATTENTION) = {
    .name = "expected-attention",
    .press_name = "ExpectedAttentionPress",
    .source = "Devoto et al. 2025; kvpress 0.5.5 ExpectedAttentionPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_KEYS | NEEDS_VALUES | NEEDS_QUERY_STATS,
    .score = score_expected_attention,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#c5b0d5",
    .n_sink = 4,
    .n_future = 512,
    .epsilon = 0.0,
};
