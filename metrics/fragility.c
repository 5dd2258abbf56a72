/* fragility.c — retained importance R_t of keep-sets during a full-cache decode. See fragility.h. */
#include "fragility.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *importance_name(Importance imp) {
    return imp == IMPORTANCE_VALUE_WEIGHTED ? "value_weighted" : "attention";
}

int importance_parse(const char *text, Importance *out, KvErr *err) {
    if (!strcmp(text, "attention")) *out = IMPORTANCE_ATTENTION;
    else if (!strcmp(text, "value_weighted")) *out = IMPORTANCE_VALUE_WEIGHTED;
    else return kv_fail(err, "unknown importance '%s' (known: attention, value_weighted)", text);
    return 0;
}

int fragility_init(FragilityTrace *ft, int n_layers, int n_heads, int n_kv_heads, int context_len,
                   const KeepSet *sets, int n_sets, const float *value_norm, KvErr *err) {
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
    ft->value_norm = value_norm;
    ft->abar = kv_calloc((size_t)n_kv_heads * context_len, sizeof(float), err);
    ft->step_r = ft->abar ? kv_calloc((size_t)n_sets * n_layers * n_kv_heads, sizeof(float), err) : NULL;
    if (!ft->step_r) {
        fragility_free(ft);
        return -1;
    }
    return 0;
}

static int push_step(FragilityTrace *ft, KvErr *err) {
    size_t pairs = (size_t)ft->n_layers * ft->n_kv_heads;
    if (ft->n_steps == ft->cap_steps) {
        int cap = ft->cap_steps ? 2 * ft->cap_steps : 64;
        float *r = realloc(ft->r_heads, sizeof(float) * cap * ft->n_sets * pairs);
        if (!r) return kv_fail(err, "fragility: out of memory");
        ft->r_heads = r;
        double *m = realloc(ft->mean_r, sizeof(double) * cap * ft->n_sets);
        if (!m) return kv_fail(err, "fragility: out of memory");
        ft->mean_r = m;
        double *n = realloc(ft->min_r, sizeof(double) * cap * ft->n_sets);
        if (!n) return kv_fail(err, "fragility: out of memory");
        ft->min_r = n;
        ft->cap_steps = cap;
    }
    size_t row = (size_t)ft->n_steps * ft->n_sets;
    memcpy(ft->r_heads + row * pairs, ft->step_r, sizeof(float) * ft->n_sets * pairs);
    for (int s = 0; s < ft->n_sets; s++) {
        const float *r = ft->step_r + s * pairs;
        double sum = 0.0, min = DBL_MAX;
        for (size_t i = 0; i < pairs; i++) {
            sum += r[i];
            if (r[i] < min) min = r[i];
        }
        ft->mean_r[row + s] = sum / pairs;
        ft->min_r[row + s] = min;
    }
    ft->n_steps++;
    return 0;
}

/* All heads of a layer are in: R_t(l, k) for every keep-set. value_weighted weighs ā by ν and
 * renormalises over the context, so the full keep-set still retains exactly 1. */
static void close_layer(FragilityTrace *ft, int l) {
    int K = ft->n_kv_heads, L = ft->context_len;
    if (ft->value_norm)
        for (int k = 0; k < K; k++) {
            float *abar = ft->abar + (size_t)k * L;
            const float *nu = ft->value_norm + ((size_t)l * K + k) * L;
            double total = 0.0;
            for (int j = 0; j < L; j++) total += (double)abar[j] * nu[j];
            for (int j = 0; j < L; j++) abar[j] = total > 0.0 ? (float)(abar[j] * nu[j] / total) : 0.0f;
        }
    for (int s = 0; s < ft->n_sets; s++) {
        const KeepSet *ks = &ft->sets[s];
        for (int k = 0; k < K; k++) {
            const int *pos = ks->positions + ks->offsets[l * K + k];
            const float *abar = ft->abar + (size_t)k * L;
            double r = 0.0;
            for (int i = 0; i < ks->counts[l * K + k]; i++)
                if (pos[i] >= 0 && pos[i] < L) r += abar[pos[i]];
            ft->step_r[((size_t)s * ft->n_layers + l) * K + k] = (float)r;
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

void fragility_free(FragilityTrace *ft) {
    free(ft->r_heads);
    free(ft->mean_r);
    free(ft->min_r);
    free(ft->abar);
    free(ft->step_r);
    memset(ft, 0, sizeof *ft);
}

/* ---------------------------------------------------------------- statistics */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double percentile(const float *sorted, int n, double q) {
    double pos = q * (n - 1);
    int lo = (int)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    return sorted[lo] + (pos - lo) * ((double)sorted[lo + 1] - sorted[lo]);
}

void fragility_step_stats(const float *r, int n, double threshold, float *scratch, FragilityStep *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        sum += r[i];
        out->n_below += r[i] < threshold;
    }
    memcpy(scratch, r, sizeof(float) * (size_t)n);
    qsort(scratch, (size_t)n, sizeof(float), cmp_float);
    out->mean = sum / n;
    out->min = scratch[0];
    out->p5 = percentile(scratch, n, 0.05);
    out->p50 = percentile(scratch, n, 0.5);
}

void fragility_summary_begin(FragilitySummary *s, double threshold) {
    memset(s, 0, sizeof *s);
    s->threshold = threshold;
    s->worst_step_r = DBL_MAX;
    s->worst_head_r = DBL_MAX;
}

void fragility_summary_add(FragilitySummary *s, const FragilityStep *step, int n_heads) {
    s->n_steps++;
    s->n_head_values += n_heads;
    s->mean_r += step->mean;
    s->mean_p5 += step->p5;
    if (step->mean < s->worst_step_r) s->worst_step_r = step->mean;
    if (step->min < s->worst_head_r) s->worst_head_r = step->min;
    s->step_outliers += step->mean < s->threshold;
    s->head_outliers += step->n_below;
    s->steps_any_head += step->n_below > 0;
}

void fragility_summary_finish(FragilitySummary *s) {
    if (s->n_steps) {
        s->mean_r /= s->n_steps;
        s->mean_p5 /= s->n_steps;
    } else {
        s->worst_step_r = s->worst_head_r = 0.0;
    }
}

int fragility_summary(const FragilityTrace *ft, int set, double threshold, FragilitySummary *out, KvErr *err) {
    int pairs = ft->n_layers * ft->n_kv_heads;
    float *scratch = kv_malloc(sizeof(float) * (size_t)pairs, err);
    if (!scratch) return -1;
    fragility_summary_begin(out, threshold);
    for (int t = 0; t < ft->n_steps; t++) {
        FragilityStep st;
        fragility_step_stats(ft->r_heads + ((size_t)t * ft->n_sets + set) * pairs, pairs, threshold, scratch, &st);
        fragility_summary_add(out, &st, pairs);
    }
    fragility_summary_finish(out);
    free(scratch);
    return 0;
}
