/* fragility.h — retained importance of keep-sets along a full-cache decode (the paper's fragility analysis).
 *
 * Definition (README "Fragility"): decode greedily with the FULL cache. At step t, for layer l and query head
 * h, a_t(h, j) is the attention of the step-t query over the context entries j < L, renormalised to sum to 1
 * over the context. ā_t(k, j) is its mean over the query heads of kv-head k's group. For a keep-set S(l, k)
 * chosen at prefill, R_t(l, k) = Σ_{j ∈ S(l,k)} ā_t(k, j). Per step we record the mean and the minimum of
 * R_t over all (l, k); a step is an outlier when its mean is below FRAGILITY_OUTLIER (0.5).
 * Fed by the engine's TraceHook, one query head at a time, so every keep-set of a sweep is measured in the
 * same decoding pass. Shape legend: N layers, H heads, K kv-heads, G = H/K, L context length, S keep-sets. */
#ifndef KVBENCH_FRAGILITY_H
#define KVBENCH_FRAGILITY_H

#include "../engine/err.h"
#include "../engine/kvcache.h"

#define FRAGILITY_OUTLIER 0.5

typedef struct {
    int n_layers, n_heads, n_kv_heads, context_len;  /* N, H, K, L */
    int n_sets;                                       /* S */
    const KeepSet *sets;                              /* [S], not owned */
    int n_steps, cap_steps;
    double *mean_r;     /* [n_steps][S] */
    double *min_r;      /* [n_steps][S] */
    /* Per-step scratch: */
    float *abar;        /* [K][L] ā_t of the current layer */
    int heads_seen;     /* query heads received for the current layer */
    int next_layer;     /* the layer whose heads come next */
    double *step_sum;   /* [S] Σ over (l,k) of R_t */
    double *step_min;   /* [S] */
} FragilityTrace;

int fragility_init(FragilityTrace *ft, int n_layers, int n_heads, int n_kv_heads, int context_len,
                   const KeepSet *sets, int n_sets, KvErr *err);
/* One query head's softmax over its (full) cache at the current step; positions[i] is entry i's position.
 * Heads of a layer may come in any order; layers in order 0..N-1 for each step. */
int fragility_add_head(FragilityTrace *ft, int layer, int head, const float *probs, const int *positions,
                       int n_keys, KvErr *err);
void fragility_free(FragilityTrace *ft);

/* Summary of one keep-set over all recorded steps. */
typedef struct {
    double mean_r;     /* mean over steps of the per-step mean */
    double worst_r;    /* min over steps of the per-step min */
    int n_outliers;    /* steps whose mean is below FRAGILITY_OUTLIER */
} FragilitySummary;

void fragility_summary(const FragilityTrace *ft, int set, FragilitySummary *out);

#endif
