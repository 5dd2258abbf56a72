/* policy_internal.h — the pieces behind policy.h, shared by policy.c, score.c, allocate.c, the descriptors and the
 * tests that check each intermediate against the reference (tests/test_policy_golden.c).
 *
 * A policy is one descriptor (PolicyRow) in its own file: how it scores a layer (ScoreFn), how it turns scores
 * into a keep-set for a budget (Allocation), its aggregations and its constants. Scores are computed once
 * per layer in policy_observe and kept in a LayerScores; everything that depends on the budget happens in
 * allocate_keepset, so one prefill serves every budget.
 * Shape legend: N layers, L context length, w window, P = L - w prefix, H heads, K kv-heads, G = H/K. */
#ifndef KVBENCH_POLICY_INTERNAL_H
#define KVBENCH_POLICY_INTERNAL_H

#include "policy.h"

typedef struct PolicyRow PolicyRow;
typedef struct LayerScores LayerScores;

/* How a policy scores one observed layer into out (NULL in the descriptor: it scores nothing). The scorers
 * several policies share live in score.c; a policy of its own kind keeps its scorer in its own file. */
typedef int (*ScoreFn)(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
                       KvErr *err);

/* What LayerScores.score covers: the prefix [K][P] (the allocation handles the window), or every context
 * position [K][L]. */
typedef enum { SPAN_PREFIX, SPAN_CONTEXT } ScoreSpan;

typedef enum {
    ALLOC_ALL,        /* keep everything */
    ALLOC_SINKS,      /* StreamingLLM: the first n_sink and the last int(L*f) - n_sink positions of every head */
    ALLOC_UNIFORM,    /* top int(L*f) per head of the SPAN_CONTEXT scores (row->layer_budget's count when set) */
    ALLOC_TWO_STAGE,  /* kvpress's CriticalKVPress: per head the top max(1, int(L*f*first_stage_ratio)) of base,
                       * then the rest of int(L*f) from score (both SPAN_CONTEXT [K][L]) */
    ALLOC_CHUNKS,     /* kvpress's ChunkKVPress: the layer's positions in chunks of row->chunk_length (the last one
                       * shorter), each scored by the mean over its positions of the SPAN_CONTEXT score summed over
                       * kv-heads; the top max(1, int(n_chunks*f)) chunks kept in every head */
    ALLOC_ADAPTIVE,   /* AdaKV: safeguard per head, then top K*int(L*f) over the layer (§2.3) */
    ALLOC_CAKE,       /* layer budgets from preferences, uniform over heads, plus the window (§2.6) */
    ALLOC_LADDER,     /* the value-weighted policies: per head (Ada-CriticalKV §2.5), per layer (DefensiveKV §2.7)
                       * or over every layer (Layer-DefensiveKV §2.8) as cfg->ladder.allocation (docs/ladder.md) */
    ALLOC_DUO,        /* DuoAttention: streaming heads from the model's head pattern (duo.h) */
    ALLOC_PRUNE_GLOBAL /* kvpress's KVzipPress: the first n_sink positions of every head at the largest score of
                        * every layer plus 1, then the bottom int(N*K*L*(1 - f)) entries over every layer, kv-head
                        * and position of the SPAN_CONTEXT scores dropped (kvpress counts each layer's share of them
                        * and drops that many of the layer's bottom: the same entries, save ties) */
} Allocation;

/* The aggregations a policy takes, as a set of bits AGG_BIT(AGG_MEAN) | ...; 0 for a policy without any. */
#define AGG_BIT(a) (1u << (a))
#define AGG_ALL (AGG_BIT(AGG_MEAN) | AGG_BIT(AGG_MAX) | AGG_BIT(AGG_MAX_PRIOR))

/* A policy's descriptor: everything kvbench knows about it, in one file policies/<name>.c (docs/policies.md,
 * "Your own policy"). The registry (registry.c) lists the descriptors the build finds; the life cycle (policy.c),
 * runs/ and report/ read them and know no policy by name. */
struct PolicyRow {
    const char *name;               /* canonical kvbench name */
    const char *press_name;         /* the reference's evaluate.py or kvpress's name (accepted as well) */
    const char *source;             /* where it comes from: the paper, or the reference press it matches */
    PolicyRole role;
    unsigned aggregations;          /* AGG_BIT set of the aggregations it takes; 0: it aggregates nothing */
    Aggregation default_aggregation;/* AGG_DEFAULT exactly when aggregations is 0 */
    unsigned needs;                 /* NEEDS_* (policy.h): what it reads from the observation */
    ScoreFn score;                  /* NULL: scores nothing */
    ScoreSpan span;                 /* what score covers */
    Allocation allocation;
    const char *colour;             /* "#rrggbb" in every figure; NULL: picked from the name */
    int n_sink;                     /* StreamingLLM's, LagKV's and ExpectedAttention's sink tokens */
    double alpha_safeguard;         /* AdaKV / Ada-CriticalKV per-head minimum, as a share of int(L*f) */
    double epsilon;                 /* Ada-CriticalKV: (s + epsilon) * nu */
    double first_stage_ratio;       /* Ada-CriticalKV: stage-1 share of each head budget */
    double tau1, tau2, gamma;       /* CAKE: preference exponents, variance weight */
    double mass_threshold;          /* DefensiveKV stage 1: cumulative mass 0.9 - window_bias */
    LadderParams ladder;            /* a value-weighted policy's own steps (enabled 1; group left 0: it follows the
                                     * aggregation, policy_config); zero for every other policy */
    /* ALLOC_UNIFORM's keep per head in layer `layer` of n_layers at keep fraction f, window w (NULL: int(L*f) in
     * every layer); PyramidKV's pyramid. */
    int (*layer_budget)(int layer, int n_layers, int context_len, int window, double f);
    int chunk_length;               /* ALLOC_CHUNKS: tokens per chunk; NEEDS_RECONSTRUCTION: context tokens per
                                     * reconstruction chunk (ReconstructionSpec.chunk) */
    /* NEEDS_RECONSTRUCTION: the chunks' prompts and tail (ReconstructionSpec), and what one layer of one chunk's
     * reconstruction forward adds to the layer's scores score[K][context_len] (policy_observe_reconstruction's
     * obs, chunk_start, chunk_end) */
    const char *first_prompt, *next_prompt;
    int next_tail;
    int (*reconstruct)(const PolicyRow *row, const Observation *obs, int chunk_start, int chunk_end, int context_len,
                       float *score, KvErr *err);
    int lag_size;                   /* LagKV: tokens per partition */
    int n_future;                   /* ExpectedAttention: the positions after the context its rotation averages */
};

/* Defines the descriptor POLICY_<ID> of policies/<id>.c, ID its file name in capitals (layer_defensivekv.c:
 * LAYER_DEFENSIVEKV). Written at the start of a line, `POLICY_DESCRIPTOR(ID) = { ... };`, it is also the marker the
 * Makefile finds: every file of policies/ with one is listed in $(BUILD)/policies/policy_list.h, which registry.c
 * includes, so a new policy is its file and nothing else. */
#define POLICY_DESCRIPTOR(id) const PolicyRow POLICY_##id

/* The registry: every descriptor, in the order of their file names (help texts list them so); n is set to their
 * count. */
const PolicyRow *const *policy_registry(int *n);

/* The row of a canonical or press name; NULL when unknown. */
const PolicyRow *policy_row(const char *name);

/* The scorers several policies share (score.c). */
int score_snapkv(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
                 KvErr *err);
/* SnapKV's scores as kvpress 0.5.5's SnapKVPress gives them [K][L]: score_snapkv's, with the window at the layer
 * max plus 1 (the reference's SnapKV pads at the max), so no prefix entry ties with the window. */
int score_snapkv_kvpress(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
                         KvErr *err);
int score_cake(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
               KvErr *err);
/* The value-weighted policies' one pipeline (criticalkv, defensivekv, layer-defensivekv), its steps as
 * cfg->ladder. */
int score_value_weighted(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
                         KvErr *err);

/* The constants of the ladder's steps (policy.h LadderParams), from the policy that publishes each step: the
 * safeguard's alpha, the top-k share and epsilon from Ada-CriticalKV (POLICY_CRITICALKV), the mass threshold
 * from DefensiveKV (POLICY_DEFENSIVEKV). */
extern const PolicyRow POLICY_CRITICALKV, POLICY_DEFENSIVEKV;
typedef struct {
    double alpha_safeguard, first_stage_ratio, epsilon, mass_threshold;
} LadderConstants;
LadderConstants ladder_constants(void);
/* Whether selection reads LayerScores.base: head allocation, the safeguard, or the top-k forced set. */
int ladder_needs_base(const LadderParams *lp);

/* One layer's budget-independent scores, kept between policy_observe and policy_select. */
struct LayerScores {
    float *score;        /* [K][L] or [K][P] as the descriptor's span says. score_snapkv [K][L] (window padded);
                          * score_cake [K][P] token scores; score_value_weighted [K][L] the value-weighted score:
                          * prefix c (critical: (s+eps)*nu, defensive: delta*nuhat), window (s_max+eps)*nu
                          * (critical) or M (defensive) */
    float *base;         /* value-weighted policies [K][L]: the aggregated score, window padded with its layer max
                          * (SnapKV's); kept only where ladder_needs_base. ALLOC_TWO_STAGE [K][L]: the stage-1
                          * score */
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
};

/* Scores one observed layer with row->score, after checking that obs holds what row->needs. */
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
