/* policy.h — KV-cache eviction policies: observe each layer of a prefill, then select keep-sets per budget.
 *
 * The paper's scoring → aggregation → allocation framework. Each policy is one descriptor in its own file
 * policies/<name>.c, which the build lists for policies/registry.c; nothing else knows them (docs/policies.md). A
 * PolicyState keeps per-layer scores between policy_observe and policy_select, so cross-layer policies (CAKE,
 * Layer-DefensiveKV) work from the same single prefill, and one state serves every budget. Behaviour matches the
 * reference press code: docs/spec/policies.md. */
#ifndef KVBENCH_POLICY_H
#define KVBENCH_POLICY_H

#include "../engine/err.h"
#include "../engine/kvcache.h"
#include "../engine/observation.h"
#include "duo.h"

/* How scores are aggregated over the window queries and the query heads of a group (the paper's ablation;
 * what each value means per policy family is documented at the top of policies/score.c).
 * AGG_DEFAULT resolves to the policy's own (mean for SnapKV-family and CAKE, max+prior for DefensiveKV);
 * it stays AGG_DEFAULT, named "none", for the policies that aggregate nothing (full, streamingllm, knorm, ...). */
typedef enum { AGG_DEFAULT = 0, AGG_MEAN = 1, AGG_MAX = 2, AGG_MAX_PRIOR = 3 } Aggregation;

/* The steps from Ada-CriticalKV to DefensiveKV (docs/ladder.md), for the value-weighted policies only (those
 * whose descriptor sets its own steps: criticalkv, defensivekv, layer-defensivekv); each policy's own setting of
 * every step reproduces it.
 *   pooling     window: the window statistic pooled once (CriticalKV, SnapKV scores); rows: each query row
 *               pooled and its prefix mass restored (DefensiveKV Step A)
 *   group       how the G query heads of a group fold: mean or max (by default as the aggregation: mean for
 *               mean, max for max and max+prior)
 *   forced      the entries kept whatever their value-weighted score: topk (CriticalKV stage 1, the top
 *               first_stage_ratio of each head's budget by score), mass (DefensiveKV Step D, cumulative mass
 *               of the unpooled mean attention), none
 *   safeguard   the top alpha_safeguard of each head's average budget kept (AdaKV's per-head minimum)
 *   weighting   critical: (score + epsilon) * nu; defensive: score * nu / sum over kv-heads of nu
 *   allocation  head: AdaKV head budgets from the score, then each head's own top (K*int(L*f) a layer);
 *               layer: one top int(L*f*K) over the layer, window and forced set at the layer max;
 *               global: one top int(L*f*K*N) over every layer (Layer-DefensiveKV) */
typedef enum { LADDER_POOL_WINDOW = 1, LADDER_POOL_ROWS } LadderPooling;
typedef enum { LADDER_GROUP_MEAN = 1, LADDER_GROUP_MAX } LadderGroup;
typedef enum { LADDER_FORCED_TOPK = 1, LADDER_FORCED_MASS, LADDER_FORCED_NONE } LadderForced;
typedef enum { LADDER_WEIGHT_CRITICAL = 1, LADDER_WEIGHT_DEFENSIVE } LadderWeighting;
typedef enum { LADDER_ALLOC_HEAD = 1, LADDER_ALLOC_LAYER, LADDER_ALLOC_GLOBAL } LadderAllocation;

typedef struct {
    int enabled;                 /* 1 for the value-weighted policies, 0 (every field 0) for the others */
    LadderPooling pooling;
    LadderGroup group;
    LadderForced forced;
    int safeguard;               /* 1 on, 0 off */
    LadderWeighting weighting;
    LadderAllocation allocation;
} LadderParams;

/* What a policy is in a study: a baseline, the method the paper proposes, or the reference every method is
 * measured against (the full cache). */
typedef enum { POLICY_BASELINE, POLICY_PROPOSED, POLICY_REFERENCE } PolicyRole;

/* What a policy reads from each observed layer (Observation): bits of PolicyRow.needs. */
enum {
    NEEDS_ATTENTION = 1u << 0,    /* attn: the window queries' attention (and so the window) */
    NEEDS_VALUE_NORM = 1u << 1,   /* value_norm */
    NEEDS_KEYS = 1u << 2,         /* keys, after RoPE */
    NEEDS_DUO_PATTERN = 1u << 3,  /* no observation, but the model's DuoAttention head pattern */
    NEEDS_VALUES = 1u << 4,       /* values (a backend hands them with the keys: policy_needs_keys) */
    NEEDS_ATTENTION_SUMS = 1u << 5, /* attn_sums: every prefill query's attention, summed per key (opt-in: a
                                     * backend that observes OBSERVES_ATTENTION_SUMS) */
    NEEDS_QUERY_STATS = 1u << 6,    /* query_stats from the descriptor's n_sink and rope_inv_freq (opt-in: a
                                     * backend that observes OBSERVES_QUERY_STATS) */
    NEEDS_RECONSTRUCTION = 1u << 7  /* nothing from the prefill but its layers' count: a reconstruction pass after
                                     * it (policy_reconstruction; a backend that observes OBSERVES_RECONSTRUCTION) */
};

typedef struct {
    const char *name;          /* canonical policy name, e.g. "defensivekv" */
    Aggregation aggregation;   /* resolved by policy_config (AGG_DEFAULT only for a policy without aggregations) */
    int window;                /* observation window w (default 32) */
    int pool_kernel;           /* average-pooling kernel (default 5) */
    int intended_window_bias;  /* opt-in: DefensiveKV's window bias over the window columns themselves instead
                                * of the reference's last w prefix columns (spec §2.7 Step D, §6.1) */
    int ties_by_unclamped;     /* opt-in ablation, max+prior only: the entries the prior raised to the head's mean
                                * are ordered among themselves by their unclamped score instead of by position
                                * (the reference's tie order; policies/score.c clamp_at_mean) */
    LadderParams ladder;       /* resolved by policy_config to the policy's own; policy_set_param changes one */
    const DuoPattern *duo_pattern; /* duoattention: the model's head pattern (borrowed; required by
                                    * policy_begin), NULL for every other policy */
} PolicyConfig;

/* A budget: a keep fraction of the context (0.2 = "20% cache", i.e. compression ratio 0.8, with the
 * reference's double arithmetic f = 1 - (1 - 0.2) = 0.19999999999999996), or a token count per kv-head on
 * average (kept exactly: no float quirk). */
typedef struct {
    double keep_fraction;  /* in (0, 1]; used when tokens == 0 */
    int tokens;            /* > 0: keep this many entries per head on average */
} Budget;

/* Parses "0.2", "20%" or "512tok"/"512 tokens". Errors name the text and the valid range. */
int budget_parse(const char *text, Budget *out, KvErr *err);
/* The compression ratio the reference code would be given for this budget at context length L. */
double budget_compression_ratio(const Budget *b, int context_len);
/* The keep fraction f every budget formula uses (spec §1.6): 1 - (1 - keep_fraction) in double, or for a
 * token budget tokens / L nudged up so that int(L * f) == tokens. */
double budget_keep_fraction(const Budget *b, int context_len);

/* name: one of policy_names() (reference press names such as "efficient_defensivekv" are accepted too);
 * aggregation: NULL/"default", "mean", "max", "max+prior". An unknown name or an aggregation the policy cannot
 * take is an error. */
int policy_config(PolicyConfig *out, const char *name, const char *aggregation, KvErr *err);
const char *aggregation_name(Aggregation a);
/* Sets one ladder step of a configured value-weighted policy (after policy_config, which fixes the aggregation
 * the group default follows): key pooling|group|forced|safeguard|weighting|allocation, value as in
 * LadderParams ("on"/"off" for the safeguard). Errors name the policy, the parameter and the known values. */
int policy_set_param(PolicyConfig *cfg, const char *key, const char *value, KvErr *err);
/* The ladder steps that differ from the policy's own, as ",key=value" in the order of LadderParams (empty when
 * none): the canonical text a row's params carry, so equal settings give equal text. -1 when n is too small. */
int policy_params_text(const PolicyConfig *cfg, char *out, size_t n);
/* The whole params text of a row (the key resume, merge and the report keep variants apart by):
 * "w=32,k=5[,intended][,ties=unclamped]" and the ladder's steps for a policy with a window, the ladder's steps
 * alone (mostly empty) for the others. -1 when n is too small. */
int policy_row_params_text(const PolicyConfig *cfg, char *out, size_t n);
/* The inverse: sets a configured policy's window, kernel, options and ladder steps from a row's params text. An
 * unknown item is an error naming the policy and the item. */
int policy_apply_row_params(PolicyConfig *cfg, const char *params, KvErr *err);
/* Whether a and b (value-weighted policies, by either name) differ in exactly one step of the ladder, the
 * aggregation counted as one (docs/ladder.md), all else equal: 1 when a is on the side farther from
 * Ada-CriticalKV (max+prior over max over mean; rows, max, mass, safeguard off, defensive, layer; none after
 * mass, global after layer), -1 when b is, 0 when they are not one step apart. *step gets the step's place in
 * the ladder (0 the aggregation, then pooling, group, forced, safeguard, weighting, allocation: 1..6), out its
 * text, the farther value first: "forced mass − topk". */
int policy_ladder_step(const PolicyConfig *a, const PolicyConfig *b, int *step, char *out, size_t n);
/* 1 when a and b are the same policy (by either name) with the same parameters (aggregation, window, pooling,
 * options, ladder), so one state serves both. */
int policy_configs_equal(const PolicyConfig *a, const PolicyConfig *b);
/* Comma-separated names, for help and error messages. */
const char *policy_names(void);
/* Whether policy_observe needs obs->value_norm (so the runner prepares it once per layer). */
int policy_needs_value_norm(const PolicyConfig *cfg);
/* Whether the policy reads the window attention (and so has a window). */
int policy_needs_attention(const PolicyConfig *cfg);
/* Whether it reads obs->keys or obs->values (so a backend must hand the raw tensors over, not only attn and
 * value_norm). */
int policy_needs_keys(const PolicyConfig *cfg);
/* Whether it reads obs->attn_sums (so the prefill's hook asks the backend for them: ObserveHook.attention_sums). */
int policy_needs_attention_sums(const PolicyConfig *cfg);
/* The first position of the pre-RoPE query statistics the policy reads (ObserveHook.query_stats_from, its sinks
 * left out), or -1 when it reads none. */
int policy_query_stats_from(const PolicyConfig *cfg);
/* What the policy reads that a backend observing only `observes` (OBSERVES_* bits, backend_observes) cannot give,
 * in words for an error line ("the attention sums of every prefill query"); NULL when it can give everything. */
const char *policy_missing_observation(const PolicyConfig *cfg, unsigned observes);
/* KVzip's reconstruction pass, for a policy with NEEDS_RECONSTRUCTION: after the prefill, the context after the chat
 * template's prefix is cut into chunks of `chunk` tokens (the last one shorter), and each chunk's input — the ids
 * of `first_prompt` (the first chunk) or of `next_prompt` and the previous chunk's last `next_tail` ids (a later
 * one), then the chat template's suffix ids, then the chunk's own ids — runs through the model on top of the
 * context cache (positions after the context), observed at every layer (policy_observe_reconstruction), its
 * entries dropped before the next chunk. Without a chat template the prefix is empty and the suffix "\n". */
typedef struct {
    int chunk;
    const char *first_prompt, *next_prompt;
    int next_tail;
} ReconstructionSpec;
/* 1 with *out set when the policy reads a reconstruction pass, else 0. */
int policy_reconstruction(const PolicyConfig *cfg, ReconstructionSpec *out);
/* Whether the policy needs a DuoAttention head pattern of the model (cfg->duo_pattern). */
int policy_needs_duo_pattern(const PolicyConfig *cfg);
/* Whether the policy needs to observe the prefill at all (full, streamingllm and duoattention do not). */
int policy_observes(const PolicyConfig *cfg);
/* Whether it takes an aggregation (so a config's aggregations expand it into one variant each). */
int policy_aggregates(const PolicyConfig *cfg);
/* Whether it keeps the whole cache at every budget (the full cache: it takes no budget). */
int policy_keeps_all(const PolicyConfig *cfg);
/* Entries per head on average that the budget allows over a context_len-token context: context_len for a
 * policy that keeps all, the tokens of a token budget, else int(context_len * budget_keep_fraction). */
int policy_budget_tokens(const PolicyConfig *cfg, const Budget *b, int context_len);
/* The share of a context_len-token context kept: 1 for a policy that keeps all, the keep fraction of a
 * fraction budget, tokens / context_len (at most 1) of a token budget, or 0 for a token budget where
 * context_len is 0 (a fixed count is no share of a length not known). */
double policy_keep_share(const PolicyConfig *cfg, const Budget *b, int context_len);

/* By name, for rows read back from a database: the role (a name this build does not know is a baseline) and the
 * colour in figures ("#rrggbb"; NULL for an unknown name or a policy without one). */
PolicyRole policy_role(const char *name);
const char *policy_colour(const char *name);

typedef struct PolicyState PolicyState;

int policy_begin(PolicyState **out, const PolicyConfig *cfg, int n_layers, int n_kv_heads, int context_len,
                 KvErr *err);
/* obs has been through observation_prepare (attn, and value_norm when needed). Layers come in order, and
 * obs->w must equal cfg->window. policy_begin fails for a context not longer than the window (SnapKVPress
 * asserts q_len > window_size) and for an even pooling kernel. */
int policy_observe(PolicyState *st, const Observation *obs, KvErr *err);
/* One layer of one chunk's reconstruction forward, after policy_observe saw every layer of the prefill: obs->L the
 * context and the n new tokens of the chunk's input (obs->w = n, q_win their queries after RoPE, keys the whole
 * cache), the chunk the context positions [chunk_start, chunk_end). Chunks come in order, each through every layer
 * in order, from the first after the prefix to the context's end. */
int policy_observe_reconstruction(PolicyState *st, const Observation *obs, int chunk_start, int chunk_end,
                                  KvErr *err);
/* After every layer was observed (full, streamingllm and duoattention need no observation). May be called for several
 * budgets. A budget outside (0, 1], more tokens
 * than the context, or one that keeps no token per head is an error; a budget of 1 keeps everything. */
int policy_select(PolicyState *st, const Budget *budget, KeepSet *out, KvErr *err);
/* 1 when policies configured as a and b compute the same layer scores from the same observation: the same
 * scoring and its constants, aggregation, window, pooling and options (defensivekv and layer-defensivekv, snapkv
 * and adakv differ only in how they allocate). 0 for policies that score nothing. */
int policy_configs_score_equal(const PolicyConfig *a, const PolicyConfig *b);
/* The same for two begun policies, over the same shape. A sweep then scores a layer once and copies it. */
int policy_scores_equal(const PolicyState *a, const PolicyState *b);
/* The layer `from` has just observed (obs), copied into st instead of scored again: the same bits as
 * policy_observe(st, obs). st and from must be policy_scores_equal, and from one layer ahead of st. */
int policy_observe_copy(PolicyState *st, const PolicyState *from, const Observation *obs, KvErr *err);
void policy_end(PolicyState *st);
/* Of the keep-set ks that st selected: *kept entries in all, *clamped_kept of them prefix entries whose
 * aggregated score the max+prior prior raised to their head's mean (ties there are ordered by position, or by
 * the unclamped score under ties_by_unclamped). *clamped_kept is -1 for any other aggregation. */
void policy_clamped_kept(const PolicyState *st, const KeepSet *ks, long long *clamped_kept, long long *kept);
/* Of the keep-set ks that st selected for budget b: protected[l*K + k], the entries of (layer l, kv-head k) kept
 * whatever their value-weighted score (the safeguard, the forced set, and the window where the allocation
 * protects it; docs/ladder.md). Returns 0, or 1 when the policy protects nothing by name (not value-weighted:
 * protected is left alone), -1 on error. */
int policy_protected_kept(const PolicyState *st, const Budget *b, const KeepSet *ks, int *protected_counts,
                          KvErr *err);

#endif
