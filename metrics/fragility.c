/* fragility.c — retained importance R_t of keep-sets during a full-cache decode. See fragility.h. */
#include "fragility.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

int fragility_init(FragilityTrace *ft, int n_layers, int n_heads, int n_kv_heads, int context_len,
                   const KeepSet *sets, int n_sets, KvErr *err) {
    memset(ft, 0, sizeof *ft);
    if (n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads || context_len <= 0 || n_sets <= 0)
        return kv_fail(err, "fragility: invalid shape (N=%d H=%d K=%d L=%d sets=%d)", n_layers, n_heads, n_kv_heads,
                       context_len, n_sets);
    for (int s = 0; s < n_sets; s++)
        if (sets[s].n_layers != n_layers || sets[s].n_kv_heads != n_kv_heads)
            return kv_fail(err, "fragility: keep-set %d has shape %dx%d, the model %dx%d", s, sets[s].n_layers,
                           sets[s].n_kv_heads, n_layers, n_kv_heads);
    ft->n_layers = n_layers;
    ft->n_heads = n_heads;
    ft->n_kv_heads = n_kv_heads;
    ft->context_len = context_len;
    ft->sets = sets;
    ft->n_sets = n_sets;
    ft->abar = kv_calloc((size_t)n_kv_heads * context_len, sizeof(float), err);
    ft->step_sum = kv_calloc(n_sets, sizeof(double), err);
    ft->step_min = kv_calloc(n_sets, sizeof(double), err);
    if (!ft->abar || !ft->step_sum || !ft->step_min) {
        fragility_free(ft);
        return -1;
    }
    return 0;
}

static int push_step(FragilityTrace *ft, KvErr *err) {
    if (ft->n_steps == ft->cap_steps) {
        int cap = ft->cap_steps ? 2 * ft->cap_steps : 64;
        double *m = realloc(ft->mean_r, sizeof(double) * cap * ft->n_sets);
        if (!m) return kv_fail(err, "fragility: out of memory");
        ft->mean_r = m;
        double *n = realloc(ft->min_r, sizeof(double) * cap * ft->n_sets);
        if (!n) return kv_fail(err, "fragility: out of memory");
        ft->min_r = n;
        ft->cap_steps = cap;
    }
    int n_pairs = ft->n_layers * ft->n_kv_heads;
    for (int s = 0; s < ft->n_sets; s++) {
        ft->mean_r[(size_t)ft->n_steps * ft->n_sets + s] = ft->step_sum[s] / n_pairs;
        ft->min_r[(size_t)ft->n_steps * ft->n_sets + s] = ft->step_min[s];
    }
    ft->n_steps++;
    return 0;
}

/* All heads of a layer are in: R_t(l, k) for every keep-set. */
static void close_layer(FragilityTrace *ft, int l) {
    int K = ft->n_kv_heads, L = ft->context_len;
    for (int s = 0; s < ft->n_sets; s++) {
        const KeepSet *ks = &ft->sets[s];
        for (int k = 0; k < K; k++) {
            const int *pos = ks->positions + ks->offsets[l * K + k];
            const float *abar = ft->abar + (size_t)k * L;
            double r = 0.0;
            for (int i = 0; i < ks->counts[l * K + k]; i++)
                if (pos[i] >= 0 && pos[i] < L) r += abar[pos[i]];
            ft->step_sum[s] += r;
            if (r < ft->step_min[s]) ft->step_min[s] = r;
        }
    }
}

int fragility_add_head(FragilityTrace *ft, int layer, int head, const float *probs, const int *positions,
                       int n_keys, KvErr *err) {
    int L = ft->context_len, G = ft->n_heads / ft->n_kv_heads;
    if (layer < 0 || layer >= ft->n_layers || head < 0 || head >= ft->n_heads)
        return kv_fail(err, "fragility: layer %d head %d out of range", layer, head);
    if (ft->heads_seen == 0) {
        if (layer != ft->next_layer)
            return kv_fail(err, "fragility: layer %d arrived out of order (expected %d)", layer, ft->next_layer);
        if (layer == 0)
            for (int s = 0; s < ft->n_sets; s++) {
                ft->step_sum[s] = 0.0;
                ft->step_min[s] = DBL_MAX;
            }
        memset(ft->abar, 0, sizeof(float) * (size_t)ft->n_kv_heads * L);
    } else if (layer != ft->next_layer) {
        return kv_fail(err, "fragility: layer %d started before layer %d had all %d heads", layer, ft->next_layer,
                       ft->n_heads);
    }
    double context_mass = 0.0;
    for (int i = 0; i < n_keys; i++)
        if (positions[i] < L) context_mass += probs[i];
    if (context_mass > 0.0) {
        float *abar = ft->abar + (size_t)(head / G) * L;
        float scale = (float)(1.0 / (context_mass * G));
        for (int i = 0; i < n_keys; i++)
            if (positions[i] >= 0 && positions[i] < L) abar[positions[i]] += probs[i] * scale;
    }
    if (++ft->heads_seen == ft->n_heads) {
        ft->heads_seen = 0;
        close_layer(ft, layer);
        ft->next_layer = (layer + 1) % ft->n_layers;
        if (layer == ft->n_layers - 1) return push_step(ft, err);
    }
    return 0;
}

void fragility_summary(const FragilityTrace *ft, int set, FragilitySummary *out) {
    out->mean_r = 0.0;
    out->worst_r = ft->n_steps ? DBL_MAX : 0.0;
    out->n_outliers = 0;
    for (int t = 0; t < ft->n_steps; t++) {
        double m = ft->mean_r[(size_t)t * ft->n_sets + set], w = ft->min_r[(size_t)t * ft->n_sets + set];
        out->mean_r += m;
        if (w < out->worst_r) out->worst_r = w;
        if (m < FRAGILITY_OUTLIER) out->n_outliers++;
    }
    if (ft->n_steps) out->mean_r /= ft->n_steps;
}

void fragility_free(FragilityTrace *ft) {
    free(ft->mean_r);
    free(ft->min_r);
    free(ft->abar);
    free(ft->step_sum);
    free(ft->step_min);
    memset(ft, 0, sizeof *ft);
}
