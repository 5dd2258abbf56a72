/* fragility.h — retained importance of keep-sets along a full-cache decode (the paper's fragility analysis).
 *
 * Definition (docs/fragility.md): decode greedily with the FULL cache. At step t, for layer l and query head
 * h, a_t(h, j) is the attention of the step-t query over the context entries j < L, renormalised to sum to 1
 * over the context; ā_t(k, j) is its mean over the query heads of kv-head k's group. The importance I_t(l,k,j)
 * is, by Importance:
 *   attention       I = ā_t(k, j)
 *   value_weighted  I = ā_t(k, j)·ν(l, k, j) / Σ_{j'<L} ā_t(k, j')·ν(l, k, j'), ν the projected value norm
 *                   (1/G) Σ_g ||v_j · W_O^(kG+g)||_1 of the prefill (spec policies.md §1.4, CriticalKV's ν)
 * and for a keep-set S(l, k) chosen at prefill R_t(l, k) = Σ_{j ∈ S(l,k)} I_t(l, k, j), in [0, 1].
 * Every R_t(l, k) is kept (r_heads), so both outlier notions can be counted later at any threshold: a step
 * outlier has the model average of R_t below it, a head outlier is one (step, layer, kv-head) below it.
 * Fed by the engine's TraceHook, one query head at a time, so every keep-set of a sweep is measured in the
 * same decoding pass. Shape legend: N layers, H heads, K kv-heads, G = H/K, L context length, S keep-sets. */
#ifndef KVBENCH_FRAGILITY_H
#define KVBENCH_FRAGILITY_H

#include "../engine/err.h"
#include "../engine/kvcache.h"

#define FRAGILITY_OUTLIER 0.5  /* the default outlier threshold (the paper's "less than half") */

typedef enum { IMPORTANCE_ATTENTION = 0, IMPORTANCE_VALUE_WEIGHTED = 1 } Importance;

const char *importance_name(Importance imp);
/* "attention" or "value_weighted"; anything else is an error naming the known values. */
int importance_parse(const char *text, Importance *out, KvErr *err);

typedef struct {
    int n_layers, n_heads, n_kv_heads, context_len;  /* N, H, K, L */
    int n_sets;                                       /* S */
    const KeepSet *sets;                              /* [S], not owned */
    const float *value_norm;                          /* [N][K][L] ν (value_weighted), NULL for attention; not owned */
    int n_steps, cap_steps;
    float *r_heads;     /* [n_steps][S][N*K] R_t(l, k), index l*K + k */
    double *mean_r;     /* [n_steps][S] mean of R_t over (l, k) */
    double *min_r;      /* [n_steps][S] minimum of R_t over (l, k) */
    /* Per-step scratch: */
    float *abar;        /* [K][L] ā_t of the current layer */
    float *step_r;      /* [S][N*K] R_t of the current step */
    int heads_seen;     /* query heads received for the current layer */
    int next_layer;     /* the layer whose heads come next */
} FragilityTrace;

/* value_norm selects the importance: NULL for attention, ν [N][K][L] for value_weighted. */
int fragility_init(FragilityTrace *ft, int n_layers, int n_heads, int n_kv_heads, int context_len,
                   const KeepSet *sets, int n_sets, const float *value_norm, KvErr *err);
/* One query head's softmax over its (full) cache at the current step; positions[i] is entry i's position.
 * Heads of a layer may come in any order; layers in order 0..N-1 for each step. */
int fragility_add_head(FragilityTrace *ft, int layer, int head, const float *probs, const int *positions,
                       int n_keys, KvErr *err);
void fragility_free(FragilityTrace *ft);

/* One step of one keep-set, over its n (layer, kv-head) values. Percentiles interpolate linearly between
 * order statistics (numpy's default): p_q = x_(lo) + (q(n-1) - lo)(x_(lo+1) - x_(lo)), lo = floor(q(n-1)). */
typedef struct {
    double mean, min, p5, p50;
    int n_below;        /* heads with R_t below the threshold */
} FragilityStep;

/* scratch[n] receives the sorted values. */
void fragility_step_stats(const float *r, int n, double threshold, float *scratch, FragilityStep *out);

/* A keep-set over many steps (and samples): accumulate steps, then finish. */
typedef struct {
    double threshold;
    int n_steps;
    long long n_head_values;
    double mean_r;          /* mean over steps of the per-step mean */
    double mean_p5;         /* mean over steps of the per-step 5th percentile over heads */
    double worst_step_r;    /* smallest per-step mean */
    double worst_head_r;    /* smallest R_t(l, k) of any step */
    int step_outliers;      /* steps whose mean is below the threshold (the model-average notion) */
    long long head_outliers;/* (step, layer, kv-head) triples below the threshold */
    int steps_any_head;     /* steps with at least one head below the threshold */
} FragilitySummary;

void fragility_summary_begin(FragilitySummary *s, double threshold);
void fragility_summary_add(FragilitySummary *s, const FragilityStep *step, int n_heads);
void fragility_summary_finish(FragilitySummary *s);
/* Summary of keep-set `set` over all steps recorded in ft. */
int fragility_summary(const FragilityTrace *ft, int set, double threshold, FragilitySummary *out, KvErr *err);

#endif
