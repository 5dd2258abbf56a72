/* policy_internal.h — the pieces behind policy.h, shared by policy.c, score.c and allocate.c and by the
 * tests that check each intermediate against the reference (tests/test_policy_golden.c).
 *
 * A policy is one row of the table in policy.c: how it scores a layer (Scoring), how it turns scores into
 * a keep-set for a budget (Allocation), its default aggregation and its constants. Scores are computed once
 * per layer in policy_observe and kept in a LayerScores; everything that depends on the budget happens in
 * allocate_keepset, so one prefill serves every budget.
 * Shape legend: N layers, L context length, w window, P = L - w prefix, H heads, K kv-heads, G = H/K. */
#ifndef KVBENCH_POLICY_INTERNAL_H
#define KVBENCH_POLICY_INTERNAL_H

#include "policy.h"

typedef enum {
    SCORE_NONE,       /* full: nothing to score */
    SCORE_SINKS,      /* StreamingLLM: position only */
    SCORE_SNAPKV,     /* window attention, pooled, aggregated; window padded with the layer max (§2.2) */
    SCORE_CAKE,       /* mean + gamma * variance, pooled, aggregated; layer preference (§2.6) */
    SCORE_DEFENSIVE   /* per-query pooled, defensive aggregation, value weighting, stage-1 mass (§2.7) */
} Scoring;

typedef enum {
    ALLOC_ALL,        /* keep everything */
    ALLOC_UNIFORM,    /* top int(L*f) per head */
    ALLOC_ADAPTIVE,   /* AdaKV: safeguard per head, then top K*int(L*f) over the layer (§2.3) */
    ALLOC_CRITICAL,   /* Ada-CriticalKV: AdaKV head budgets, two stages within each head (§2.5) */
    ALLOC_CAKE,       /* layer budgets from preferences, uniform over heads, plus the window (§2.6) */
    ALLOC_LAYER,      /* DefensiveKV: forced entries, then top int(L*f*K) over the layer (§2.7) */
    ALLOC_GLOBAL,     /* Layer-DefensiveKV: top int(L*f*K*N) over every layer (§2.8) */
    ALLOC_DUO         /* DuoAttention: streaming heads from the model's head pattern (duo.h) */
} Allocation;

typedef struct {
    const char *name;               /* canonical kvbench name */
    const char *press_name;         /* the reference's evaluate.py name */
    Scoring scoring;
    Allocation allocation;
    Aggregation default_aggregation;/* AGG_DEFAULT for the policies that do not aggregate */
    int needs_value_norm;
    int n_sink;                     /* StreamingLLM sink tokens */
    double alpha_safeguard;         /* AdaKV / Ada-CriticalKV per-head minimum, as a share of int(L*f) */
    double epsilon;                 /* Ada-CriticalKV: (s + epsilon) * nu */
    double first_stage_ratio;       /* Ada-CriticalKV: stage-1 share of each head budget */
    double tau1, tau2, gamma;       /* CAKE: preference exponents, variance weight */
    double mass_threshold;          /* DefensiveKV stage 1: cumulative mass 0.9 - window_bias */
} PolicyRow;

/* The row of a canonical or press name; NULL when unknown. */
const PolicyRow *policy_row(const char *name);

/* The constants of the ladder's steps (policy.h LadderParams), from the policy that publishes each step: the
 * safeguard's alpha, the top-k share and epsilon from Ada-CriticalKV, the mass threshold from DefensiveKV. */
typedef struct {
    double alpha_safeguard, first_stage_ratio, epsilon, mass_threshold;
} LadderConstants;
LadderConstants ladder_constants(void);
/* Whether selection reads LayerScores.base: head allocation, the safeguard, or the top-k forced set. */
int ladder_needs_base(const LadderParams *lp);

/* One layer's budget-independent scores, kept between policy_observe and policy_select. */
typedef struct {
    float *score;        /* SNAPKV [K][L] (window padded); CAKE [K][P] token scores; the value-weighted policies
                          * (cfg->ladder.enabled) [K][L] the value-weighted score: prefix c (critical: (s+eps)*nu,
                          * defensive: delta*nuhat), window (s_max+eps)*nu (critical) or M (defensive) */
    float *base;         /* value-weighted policies [K][L]: the aggregated score, window padded with its layer max
                          * (SnapKV's); kept only where ladder_needs_base */
    double entropy;      /* CAKE: -sum A ln(A + 1e-10) over heads, window queries, prefix keys */
    double variance_sum; /* CAKE: sum over heads and prefix keys of the window-query variance */
    double preference;   /* CAKE: entropy^(1/tau1) * variance_sum^(1/tau2) */
    float *abar;         /* DEFENSIVE [K][P] mean over group and window queries of the unpooled A */
    float *delta;        /* value-weighted policies [K][P] aggregated score before value weighting */
    float *nu_prefix;    /* DEFENSIVE [K][P] value norms of the prefix (before normalisation over heads) */
    int *mass_order;     /* forced set "mass" [K][P] prefix positions by descending abar share (else NULL) */
    int *n_mass;         /* forced set "mass" [K] tokens before the cumulative share reaches the threshold */
    float layer_max;     /* value-weighted policies: M, the max of c over the layer's prefix */
    double window_bias;  /* DEFENSIVE: beta */
    double threshold;    /* DEFENSIVE: mass_threshold - beta */
    unsigned char *clamped; /* max+prior [K][P]: 1 where the prior raised the prefix score (policy_clamped_kept) */
} LayerScores;

/* Scores one observed layer (obs->attn, and obs->value_norm when row->needs_value_norm). */
int score_layer(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
                KvErr *err);
/* Drops the intermediates selection under cfg does not read (abar, delta, nu_prefix, and base unless
 * ladder_needs_base): a PolicyState keeps every layer until the last budget is selected. */
void layer_scores_trim(LayerScores *ls, const PolicyConfig *cfg);
/* A deep copy of trimmed scores of one layer of K kv-heads, L context tokens and window w, as `row` scores. */
int layer_scores_copy(const PolicyRow *row, const LayerScores *src, int K, int L, int w, LayerScores *dst,
                      KvErr *err);
void layer_scores_free(LayerScores *ls);

/* The k largest of score[0..n) under the order (score desc, index asc), written to out[0..k) in no
 * particular order. Deterministic: ties go to the lower index (the golden data's tie-low rule). */
int topk_stable(const float *score, int n, int k, int *out, KvErr *err);

/* All of score[0..n) in that order: order[0] is the highest. */
int sort_desc_stable(const float *score, int n, int *order, KvErr *err);

/* CAKE's layer budgets: raw shares pref_l / sum(pref) * total, then the reference adjust_budgets
 * (truncate and cap at `cap`, spread the excess, make the sum exactly `total`, cap again). When no layer
 * has a positive preference the shares are even. */
void cake_layer_budgets(const double *preference, int n_layers, int total, int cap, double *raw, int *budgets);

/* DefensiveKV's stage-1 forced count of head k at keep fraction f: min(n_mass, int(P*f - w)), with
 * Python's slicing of a negative count (all but the last |count| tokens). */
int defensive_forced_count(const LayerScores *ls, int k, int prefix_len, int window, double f);

/* DefensiveKV's final score of one layer at keep fraction f, out[K][L] (§2.7 Step E): c, with the forced
 * set (when the scores have one: forced "mass") and the window at the layer max M. This is what the layer's
 * (or the global) top-k ranks, before the ladder's safeguard or top-k forced set raise more entries to M. */
void defensive_layer_scores(const LayerScores *ls, int n_kv_heads, int context_len, int window, double f,
                            float *out);

/* Of the keep-set ks a value-weighted policy selected at keep fraction f: per (layer, kv-head) how many kept
 * entries its allocation protects (policy_protected_kept). */
int ladder_protected_counts(const PolicyConfig *cfg, const LayerScores *layers, int n_layers, int n_kv_heads,
                            int context_len, double f, const KeepSet *ks, int *protected_counts, KvErr *err);

/* The keep-set of every observed layer for keep fraction f (0 < f < 1). */
int allocate_keepset(const PolicyRow *row, const PolicyConfig *cfg, const LayerScores *layers, int n_layers,
                     int n_kv_heads, int context_len, double f, KeepSet *out, KvErr *err);

#endif
