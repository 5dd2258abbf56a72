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
#include <stdint.h>
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

/* defensive_layer_scores, also marking what it raised to M in prot[K][L] (when not NULL). */
static void defensive_marked(const LayerScores *ls, int K, int L, int w, double f, float *out, unsigned char *prot) {
    const int P = L - w;
    for (int k = 0; k < K; k++) {
        float *row = out + (size_t)k * L;
        unsigned char *pr = prot ? prot + (size_t)k * L : NULL;
        memcpy(row, ls->score + (size_t)k * L, sizeof(float) * (size_t)P);
        int n = ls->n_mass ? defensive_forced_count(ls, k, P, w, f) : 0;
        for (int t = 0; t < n; t++) {
            int j = ls->mass_order[(size_t)k * P + t];
            row[j] = ls->layer_max;
            if (pr) pr[j] = 1;
        }
        for (int j = P; j < L; j++) {
            row[j] = ls->layer_max;
            if (pr) pr[j] = 1;
        }
    }
}

void defensive_layer_scores(const LayerScores *ls, int K, int L, int w, double f, float *out) {
    defensive_marked(ls, K, L, w, f, out, NULL);
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

/* One layer of a value-weighted policy at keep fraction f (docs/ladder.md): out[K][L] the scores its top-k
 * ranks, prot[K][L] (zeroed by the caller, or NULL) its protected entries. Head allocation (Ada-CriticalKV
 * §2.5): the safeguarded base score gives AdaKV's head budgets head_budgets[K], then each head's forced set
 * (top first_stage_ratio of its budget by that score, or DefensiveKV's mass set) goes to FLT_MAX above the
 * value-weighted score; the window is an entry like any other at its padded score. Layer and global
 * allocation (§2.7 Step E): the value-weighted score with the window and the forced set at the layer max M,
 * and the safeguard and the top-k forced set (each head's top int(n*alpha) and int(n*ratio) by the base score)
 * at M too. work and idx have room for K*L. */
static int ladder_layer(const PolicyConfig *cfg, const LayerScores *ls, int K, int L, double f, float *out,
                        unsigned char *prot, int *head_budgets, float *work, int *idx, KvErr *err) {
    const LadderParams *lp = &cfg->ladder;
    const LadderConstants lc = ladder_constants();
    const int w = cfg->window, P = L - w, n = (int)(L * f);
    if (lp->allocation != LADDER_ALLOC_HEAD) {
        defensive_marked(ls, K, L, w, f, out, prot);
        int n_safe = lp->safeguard ? (int)(n * lc.alpha_safeguard) : 0;
        int n_top = lp->forced == LADDER_FORCED_TOPK ? (int)(n * lc.first_stage_ratio) : 0;
        int m = n_safe > n_top ? n_safe : n_top;
        for (int k = 0; m > 0 && k < K; k++) { /* base is kept only when m > 0 (ladder_needs_base) */
            if (topk_stable(ls->base + (size_t)k * L, L, m, idx, err)) return -1;
            for (int t = 0; t < m; t++) {
                out[(size_t)k * L + idx[t]] = ls->layer_max;
                if (prot) prot[(size_t)k * L + idx[t]] = 1;
            }
        }
        return 0;
    }
    memcpy(work, ls->base, sizeof(float) * (size_t)K * L);
    if (adaptive_layer(work, K, L, n, lp->safeguard ? lc.alpha_safeguard : 0.0, idx, NULL, head_budgets, err))
        return -1;
    for (int k = 0; k < K; k++) {
        float *s = work + (size_t)k * L;
        if (lp->forced == LADDER_FORCED_TOPK) {
            int b1 = (int)(head_budgets[k] * lc.first_stage_ratio);
            if (topk_stable(s, L, b1, idx, err)) return -1;
            for (int t = 0; t < b1; t++) s[idx[t]] = FLT_MAX;
        } else if (lp->forced == LADDER_FORCED_MASS) {
            int n1 = defensive_forced_count(ls, k, P, w, f);
            for (int t = 0; t < n1; t++) s[ls->mass_order[(size_t)k * P + t]] = FLT_MAX;
        }
        /* The reference's stage 2 ranks (BIG + eps) * nu here, which stays above every unprotected score */
        for (int j = 0; j < L; j++) {
            int is_prot = s[j] == FLT_MAX;
            out[(size_t)k * L + j] = is_prot ? FLT_MAX : ls->score[(size_t)k * L + j];
            if (prot) prot[(size_t)k * L + j] = (unsigned char)is_prot;
        }
    }
    return 0;
}

/* ChunkKVPress.compress on one layer: score[K][L] summed over the kv-heads and averaged per chunk (in double,
 * rounded once; kvpress sums in float32, so chunk scores within a few ulps can rank either way), the top
 * max(1, int(n_chunks * f)) chunks kept in every head. With no whole chunk kvpress hands the layer to the scorer's
 * own selection: each head its top n. chunk_score holds L floats. */
static int chunk_layer(int chunk, const float *score, int K, int L, double f, int n, float *chunk_score, int *idx,
                       unsigned char *keep, KvErr *err) {
    const int n_chunks = (L + chunk - 1) / chunk;
    if (L < chunk) {
        for (int k = 0; k < K; k++)
            if (mark_top(score + (size_t)k * L, L, n, idx, keep + (size_t)k * L, err)) return -1;
        return 0;
    }
    for (int c = 0; c < n_chunks; c++) {
        const int start = c * chunk, end = start + chunk < L ? start + chunk : L;
        double sum = 0.0;
        for (int j = start; j < end; j++)
            for (int k = 0; k < K; k++) sum += score[(size_t)k * L + j];
        chunk_score[c] = (float)(sum / (end - start));
    }
    int n_kept = (int)(n_chunks * f);
    n_kept = n_kept < 1 ? 1 : n_kept;
    if (topk_stable(chunk_score, n_chunks, n_kept, idx, err)) return -1;
    for (int i = 0; i < n_kept; i++)
        for (int j = idx[i] * chunk; j < (idx[i] + 1) * chunk && j < L; j++)
            for (int k = 0; k < K; k++) keep[(size_t)k * L + j] = 1;
    return 0;
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

/* KVzipPress.compress_post over every layer's score[K][L]: the sinks at the largest score plus 1, then the top
 * numel - int(numel * (1 - f)) kept (kvpress: the bottom int(numel * compression_ratio) dropped). work and idx hold
 * N*K*L. */
static int prune_global(const PolicyRow *row, const LayerScores *layers, int N, int K, int L, double f, float *work,
                        int *idx, unsigned char *keep, KvErr *err) {
    const size_t layer_size = (size_t)K * L, numel = (size_t)N * layer_size;
    if (numel > (size_t)INT32_MAX)
        return kv_fail(err, "policy %s: %zu entries are too many to rank at once", row->name, numel);
    float top = -INFINITY;
    for (int l = 0; l < N; l++) {
        memcpy(work + (size_t)l * layer_size, layers[l].score, sizeof(float) * layer_size);
        for (size_t e = 0; e < layer_size; e++) top = layers[l].score[e] > top ? layers[l].score[e] : top;
    }
    const int sinks = row->n_sink < L ? row->n_sink : L;
    for (size_t s = 0; s < (size_t)N * K; s++)
        for (int j = 0; j < sinks; j++) work[s * L + j] = top + 1.0f;
    const long long n_pruned = (long long)((double)numel * (1.0 - f));
    return mark_top(work, (int)numel, (int)(numel - n_pruned), idx, keep, err);
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
    size_t work_size = cfg->ladder.allocation == LADDER_ALLOC_GLOBAL || row->allocation == ALLOC_PRUNE_GLOBAL
                           ? (size_t)N * layer_size : layer_size;
    float *work = keep ? kv_malloc(sizeof(float) * work_size, err) : NULL;
    float *head_work = work && cfg->ladder.allocation == LADDER_ALLOC_HEAD
                           ? kv_malloc(sizeof(float) * layer_size, err) : NULL;
    int *idx = work && (head_work || cfg->ladder.allocation != LADDER_ALLOC_HEAD)
                   ? kv_malloc(sizeof(int) * work_size, err) : NULL;
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
        case ALLOC_UNIFORM: {
            int n_layer = row->layer_budget ? row->layer_budget(l, N, L, w, f) : n;
            n_layer = n_layer < 1 ? 1 : n_layer > L ? L : n_layer;
            for (int k = 0; !rc && k < K; k++)
                rc = mark_top(ls->score + (size_t)k * L, L, n_layer, idx, lk + (size_t)k * L, err);
            break;
        }
        case ALLOC_TWO_STAGE: {
            /* kvpress scatters float max into the stage-1 entries of the weighted score, then takes its top n. */
            int n_first = (int)(L * f * row->first_stage_ratio);
            n_first = n_first < 1 ? 1 : n_first;
            for (int k = 0; !rc && k < K; k++) {
                memcpy(work, ls->score + (size_t)k * L, sizeof(float) * (size_t)L);
                rc = topk_stable(ls->base + (size_t)k * L, L, n_first, idx, err);
                for (int i = 0; !rc && i < n_first; i++) work[idx[i]] = FLT_MAX;
                if (!rc) rc = mark_top(work, L, n, idx, lk + (size_t)k * L, err);
            }
            break;
        }
        case ALLOC_CHUNKS:
            rc = chunk_layer(row->chunk_length, ls->score, K, L, f, n, work, idx, lk, err);
            break;
        case ALLOC_ADAPTIVE:
            memcpy(work, ls->score, sizeof(float) * layer_size);
            rc = adaptive_layer(work, K, L, n, row->alpha_safeguard, idx, lk, head_budgets, err);
            break;
        case ALLOC_CAKE:
            for (int k = 0; !rc && k < K; k++) {
                rc = mark_top(ls->score + (size_t)k * P, P, cake_budgets[l], idx, lk + (size_t)k * L, err);
                for (int j = P; j < L; j++) lk[(size_t)k * L + j] = 1;
            }
            break;
        case ALLOC_LADDER: {
            const LadderAllocation a = cfg->ladder.allocation;
            float *lw = work + (a == LADDER_ALLOC_GLOBAL ? (size_t)l * layer_size : 0);
            rc = ladder_layer(cfg, ls, K, L, f, lw, NULL, head_budgets, head_work, idx, err);
            for (int k = 0; !rc && a == LADDER_ALLOC_HEAD && k < K; k++)
                rc = mark_top(lw + (size_t)k * L, L, head_budgets[k], idx, lk + (size_t)k * L, err);
            if (!rc && a == LADDER_ALLOC_LAYER) rc = mark_top(lw, K * L, (int)(L * f * K), idx, lk, err);
            if (!rc && a == LADDER_ALLOC_GLOBAL && l == N - 1)
                rc = mark_top(work, N * K * L, (int)(L * f * K * N), idx, keep, err);
            break;
        }
        case ALLOC_PRUNE_GLOBAL:
            if (l == N - 1) rc = prune_global(row, layers, N, K, L, f, work, idx, keep, err);
            break;
        case ALLOC_ALL: break;
        case ALLOC_DUO: break; /* policy_select hands DuoAttention to duo_keepset */
        }
    }
    if (!rc) rc = keepset_from_mask(keep, N, K, L, out, err);
    free(keep);
    free(work);
    free(head_work);
    free(idx);
    free(head_budgets);
    free(cake_budgets);
    return rc;
}

int ladder_protected_counts(const PolicyConfig *cfg, const LayerScores *layers, int N, int K, int L, double f,
                            const KeepSet *ks, int *protected_counts, KvErr *err) {
    const size_t layer_size = (size_t)K * L;
    float *out = kv_malloc(sizeof(float) * layer_size, err);
    float *work = out ? kv_malloc(sizeof(float) * layer_size, err) : NULL;
    int *idx = work ? kv_malloc(sizeof(int) * layer_size, err) : NULL;
    int *head_budgets = idx ? kv_malloc(sizeof(int) * (size_t)K, err) : NULL;
    unsigned char *prot = head_budgets ? kv_malloc(layer_size, err) : NULL;
    int rc = prot ? 0 : -1;
    for (int l = 0; !rc && l < N; l++) {
        memset(prot, 0, layer_size);
        rc = ladder_layer(cfg, &layers[l], K, L, f, out, prot, head_budgets, work, idx, err);
        for (int k = 0; !rc && k < K; k++) {
            const int s = l * K + k, *pos = ks->positions + ks->offsets[s];
            protected_counts[s] = 0;
            for (int i = 0; i < ks->counts[s]; i++) protected_counts[s] += prot[(size_t)k * L + pos[i]];
        }
    }
    free(out);
    free(work);
    free(idx);
    free(head_budgets);
    free(prot);
    return rc;
}
