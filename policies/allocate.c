/* allocate.c — from per-layer scores to a keep-set for one budget (spec policies.md §1.6, §2).
 *
 * Every allocation marks kept entries in one byte mask [N][K][L] and the mask becomes the KeepSet, so the
 * policies differ only in how they choose. Selections use one total order — score descending, then index
 * ascending — so ties go to the lower position (flattened indices are layer-major, then head-major, as in
 * the reference's reshape), and the result never depends on an unstable top-k. Budget integers are the
 * reference's: double arithmetic, evaluated left to right, truncated toward zero.
 * Shape legend: N layers, K kv-heads, L context length, w window, P = L - w. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy_internal.h"

typedef struct {
    float score;
    int index;
} Ranked;

static int ranks_before(const Ranked *a, const Ranked *b) {
    return a->score > b->score || (a->score == b->score && a->index < b->index);
}

static int cmp_ranked(const void *pa, const void *pb) {
    const Ranked *a = pa, *b = pb;
    return ranks_before(a, b) ? -1 : ranks_before(b, a) ? 1 : 0;
}

/* NaN would break the total order; it ranks last. */
static Ranked *ranked_load(const float *score, int n, KvErr *err) {
    Ranked *r = kv_malloc(sizeof(Ranked) * (size_t)n, err);
    if (!r) return NULL;
    for (int i = 0; i < n; i++) r[i] = (Ranked){isnan(score[i]) ? -INFINITY : score[i], i};
    return r;
}

int sort_desc_stable(const float *score, int n, int *order, KvErr *err) {
    Ranked *r = ranked_load(score, n, err);
    if (!r) return -1;
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
    for (int i = 0; i < n; i++) order[i] = r[i].index;
    free(r);
    return 0;
}

/* Hoare quickselect under the total order (keys are distinct, so it ends with r[0..k) the top k). */
static void select_top(Ranked *r, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        Ranked a = r[lo], b = r[lo + (hi - lo) / 2], c = r[hi], pivot;
        if (ranks_before(&a, &b)) pivot = ranks_before(&b, &c) ? b : ranks_before(&a, &c) ? c : a;
        else pivot = ranks_before(&a, &c) ? a : ranks_before(&b, &c) ? c : b;
        int i = lo, j = hi;
        while (i <= j) {
            while (ranks_before(&r[i], &pivot)) i++;
            while (ranks_before(&pivot, &r[j])) j--;
            if (i <= j) {
                Ranked t = r[i];
                r[i++] = r[j];
                r[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

int topk_stable(const float *score, int n, int k, int *out, KvErr *err) {
    if (k < 0 || k > n) return kv_fail(err, "top-k: k=%d outside 0..%d", k, n);
    if (k == 0) return 0;
    Ranked *r = ranked_load(score, n, err);
    if (!r) return -1;
    if (k < n) select_top(r, n, k);
    for (int i = 0; i < k; i++) out[i] = r[i].index;
    free(r);
    return 0;
}

/* Marks the top k of score[0..n) in keep[0..n). idx has room for n. */
static int mark_top(const float *score, int n, int k, int *idx, unsigned char *keep, KvErr *err) {
    if (topk_stable(score, n, k, idx, err)) return -1;
    for (int i = 0; i < k; i++) keep[idx[i]] = 1;
    return 0;
}

void cake_layer_budgets(const double *preference, int n_layers, int total, int cap, double *raw, int *budgets) {
    double pref_sum = 0.0;
    for (int l = 0; l < n_layers; l++) pref_sum += preference[l];
    /* Without any preference (every layer's window variance 0) the reference divides 0 by 0; split evenly. */
    int even = !(pref_sum > 0.0 && isfinite(pref_sum));
    long excess = 0;
    for (int l = 0; l < n_layers; l++) {
        raw[l] = even ? (double)total / n_layers : preference[l] / pref_sum * total;
        budgets[l] = (int)raw[l];
        if (budgets[l] > cap) {
            excess += budgets[l] - cap;
            budgets[l] = cap;
        }
    }
    /* a. the excess over the cap goes evenly to the uncapped layers, the remainder to the first ones. */
    int n_valid = 0;
    for (int l = 0; l < n_layers; l++) n_valid += budgets[l] < cap;
    if (excess > 0 && n_valid > 0) {
        long per = excess / n_valid, rem = excess % n_valid;
        for (int l = 0; l < n_layers; l++)
            if (budgets[l] < cap) budgets[l] += (int)(per + (rem-- > 0));
    }
    /* b. make the sum exactly `total`: add to layers below the cap, or take from layers above 1. */
    long sum = 0;
    for (int l = 0; l < n_layers; l++) sum += budgets[l];
    long diff = total - sum;
    if (diff != 0) {
        n_valid = 0;
        for (int l = 0; l < n_layers; l++) n_valid += diff > 0 ? budgets[l] < cap : budgets[l] > 1;
        if (n_valid > 0) {
            long mag = labs(diff), per = mag / n_valid, rem = mag % n_valid;
            int sign = diff > 0 ? 1 : -1;
            unsigned char valid[n_layers];
            for (int l = 0; l < n_layers; l++) valid[l] = diff > 0 ? budgets[l] < cap : budgets[l] > 1;
            for (int l = 0; l < n_layers; l++)
                if (valid[l]) budgets[l] += sign * (int)(per + (rem-- > 0));
        }
    }
    /* c. cap again. */
    for (int l = 0; l < n_layers; l++) budgets[l] = budgets[l] > cap ? cap : budgets[l];
}

int defensive_forced_count(const LayerScores *ls, int k, int prefix_len, int window, double f) {
    int cap = (int)(prefix_len * f - window);
    int n = ls->n_mass[k] < cap ? ls->n_mass[k] : cap;
    if (n >= 0) return n;
    return prefix_len + n > 0 ? prefix_len + n : 0;  /* sorted[:n] with n < 0 drops the last |n| */
}

void defensive_layer_scores(const LayerScores *ls, int K, int L, int w, double f, float *out) {
    const int P = L - w;
    for (int k = 0; k < K; k++) {
        float *row = out + (size_t)k * L;
        memcpy(row, ls->score + (size_t)k * P, sizeof(float) * (size_t)P);
        int n = defensive_forced_count(ls, k, P, w, f);
        for (int t = 0; t < n; t++) row[ls->mass_order[(size_t)k * P + t]] = ls->layer_max;
        for (int j = P; j < L; j++) row[j] = ls->layer_max;
    }
}

/* AdaKV's per-layer part (§2.3): safeguard the top n_safe of each head with BIG in s (in place), then the
 * top K*n of the whole layer; head_budgets[k] counts how many fell in head k. */
static int adaptive_layer(float *s, int K, int L, int n, double alpha, int *idx, unsigned char *keep,
                          int *head_budgets, KvErr *err) {
    int n_safe = (int)(n * alpha);
    for (int k = 0; k < K; k++) {
        if (topk_stable(s + (size_t)k * L, L, n_safe, idx, err)) return -1;
        for (int t = 0; t < n_safe; t++) s[(size_t)k * L + idx[t]] = FLT_MAX;
    }
    if (topk_stable(s, K * L, K * n, idx, err)) return -1;
    for (int k = 0; k < K; k++) head_budgets[k] = 0;
    for (int t = 0; t < K * n; t++) {
        head_budgets[idx[t] / L]++;
        if (keep) keep[idx[t]] = 1;
    }
    return 0;
}

/* Ada-CriticalKV's two stages within head k (§2.5 steps 3-4): s is the safeguarded score row. */
static int critical_head(float *s, const float *nu, int L, int budget, const PolicyRow *row, int *idx,
                         unsigned char *keep, KvErr *err) {
    int b1 = (int)(budget * row->first_stage_ratio);
    if (topk_stable(s, L, b1, idx, err)) return -1;
    for (int t = 0; t < b1; t++) s[idx[t]] = FLT_MAX;
    const float eps = (float)row->epsilon;
    for (int j = 0; j < L; j++) s[j] = (s[j] + eps) * nu[j];  /* BIG * nu may overflow to inf: still on top */
    return mark_top(s, L, budget, idx, keep, err);
}

/* CAKE's prefix budget per layer (§2.6 step 3): T = int((L*f - w)*N) split by the layer preferences. */
static int cake_allocation(const PolicyRow *row, const LayerScores *layers, int N, int L, int w, double f,
                           int *budgets, KvErr *err) {
    double total = (L * f - w) * N;
    if (total < 0)
        return kv_fail(err, "policy %s: the budget keeps %.1f tokens per head, fewer than the %d-token window",
                       row->name, L * f, w);
    double *pref = kv_malloc(sizeof(double) * 2 * (size_t)N, err);
    if (!pref) return -1;
    for (int l = 0; l < N; l++) pref[l] = layers[l].preference;
    cake_layer_budgets(pref, N, (int)total, L - w, pref + N, budgets);
    free(pref);
    return 0;
}

static int keepset_from_mask(const unsigned char *keep, int N, int K, int L, KeepSet *out, KvErr *err) {
    int *counts = kv_calloc((size_t)N * K, sizeof(int), err);
    if (!counts) return -1;
    for (size_t s = 0; s < (size_t)N * K; s++)
        for (int j = 0; j < L; j++) counts[s] += keep[s * L + j];
    int rc = keepset_init(out, N, K, counts, err);
    free(counts);
    if (rc) return -1;
    int *pos = out->positions;
    for (size_t s = 0; s < (size_t)N * K; s++)
        for (int j = 0; j < L; j++)
            if (keep[s * L + j]) *pos++ = j;
    return 0;
}

int allocate_keepset(const PolicyRow *row, const PolicyConfig *cfg, const LayerScores *layers, int N, int K, int L,
                     double f, KeepSet *out, KvErr *err) {
    const int w = cfg->window, P = L - w;
    const size_t layer_size = (size_t)K * L;
    if (row->allocation == ALLOC_ALL) return keepset_full(out, N, K, L, err);
    unsigned char *keep = kv_calloc((size_t)N * layer_size, 1, err);
    size_t work_size = row->allocation == ALLOC_GLOBAL ? (size_t)N * layer_size : layer_size;
    float *work = keep ? kv_malloc(sizeof(float) * work_size, err) : NULL;
    int *idx = work ? kv_malloc(sizeof(int) * work_size, err) : NULL;
    int *head_budgets = idx ? kv_malloc(sizeof(int) * (size_t)K, err) : NULL;
    int *cake_budgets = head_budgets ? kv_malloc(sizeof(int) * (size_t)N, err) : NULL;
    int rc = cake_budgets ? 0 : -1;
    if (!rc && row->allocation == ALLOC_CAKE) rc = cake_allocation(row, layers, N, L, w, f, cake_budgets, err);
    const int n = (int)(L * f);  /* per-head keep of the uniform and mask-Ada methods */
    for (int l = 0; !rc && l < N; l++) {
        const LayerScores *ls = &layers[l];
        unsigned char *lk = keep + (size_t)l * layer_size;
        switch (row->allocation) {
        case ALLOC_SINKS:
            /* StreamingLLM (no scores): 0 on [n_sink, n_sink + L - n), 1 elsewhere. */
            for (int j = 0; j < L; j++) work[j] = j >= row->n_sink && j < row->n_sink + L - n ? 0.0f : 1.0f;
            for (int k = 0; !rc && k < K; k++) rc = mark_top(work, L, n, idx, lk + (size_t)k * L, err);
            break;
        case ALLOC_UNIFORM:
            for (int k = 0; !rc && k < K; k++)
                rc = mark_top(ls->score + (size_t)k * L, L, n, idx, lk + (size_t)k * L, err);
            break;
        case ALLOC_ADAPTIVE:
        case ALLOC_CRITICAL:
            memcpy(work, ls->score, sizeof(float) * layer_size);
            rc = adaptive_layer(work, K, L, n, row->alpha_safeguard, idx,
                                row->allocation == ALLOC_ADAPTIVE ? lk : NULL, head_budgets, err);
            for (int k = 0; !rc && row->allocation == ALLOC_CRITICAL && k < K; k++)
                rc = critical_head(work + (size_t)k * L, ls->value_norm + (size_t)k * L, L, head_budgets[k], row,
                                   idx, lk + (size_t)k * L, err);
            break;
        case ALLOC_CAKE:
            for (int k = 0; !rc && k < K; k++) {
                rc = mark_top(ls->score + (size_t)k * P, P, cake_budgets[l], idx, lk + (size_t)k * L, err);
                for (int j = P; j < L; j++) lk[(size_t)k * L + j] = 1;
            }
            break;
        case ALLOC_LAYER:
            defensive_layer_scores(ls, K, L, w, f, work);
            rc = mark_top(work, K * L, (int)(L * f * K), idx, lk, err);
            break;
        case ALLOC_GLOBAL:
            defensive_layer_scores(ls, K, L, w, f, work + (size_t)l * layer_size);
            if (l == N - 1) rc = mark_top(work, N * K * L, (int)(L * f * K * N), idx, keep, err);
            break;
        case ALLOC_ALL: break;
        case ALLOC_DUO: break; /* policy_select hands DuoAttention to duo_keepset */
        }
    }
    if (!rc) rc = keepset_from_mask(keep, N, K, L, out, err);
    free(keep);
    free(work);
    free(idx);
    free(head_budgets);
    free(cake_budgets);
    return rc;
}
