/* policy.c — the table of policies, their configuration, budgets, and the observe/select life cycle.
 *
 * POLICIES below is the one place that names a policy and holds its constants (spec policies.md §3).
 * Scoring lives in score.c, budget allocation in allocate.c. */
#include "policy.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_internal.h"
#include "../engine/num.h"

/* name, press, scoring, allocation, default aggregation, value norm, n_sink, alpha, epsilon,
 * first-stage ratio, tau1, tau2, gamma, mass threshold */
static const PolicyRow POLICIES[] = {
    {"full", "fullkv", SCORE_NONE, ALLOC_ALL, AGG_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"streamingllm", "streaming_llm", SCORE_SINKS, ALLOC_UNIFORM, AGG_DEFAULT, 0, 4, 0, 0, 0, 0, 0, 0, 0},
    {"snapkv", "snapkv", SCORE_SNAPKV, ALLOC_UNIFORM, AGG_MEAN, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"adakv", "adasnapkv", SCORE_SNAPKV, ALLOC_ADAPTIVE, AGG_MEAN, 0, 0, 0.2, 0, 0, 0, 0, 0, 0},
    {"cake", "cake_global", SCORE_CAKE, ALLOC_CAKE, AGG_MEAN, 0, 0, 0, 0, 0, 1.6, 0.6, 200.0, 0},
    {"criticalkv", "criti_adasnapkv", SCORE_SNAPKV, ALLOC_CRITICAL, AGG_MEAN, 1, 0, 0.2, 1e-4, 0.5, 0, 0, 0, 0},
    {"defensivekv", "efficient_defensivekv", SCORE_DEFENSIVE, ALLOC_LAYER, AGG_MAX_PRIOR, 1, 0, 0, 0, 0, 0, 0, 0, 0.9},
    {"layer-defensivekv", "efficient_layer_defensivekv", SCORE_DEFENSIVE, ALLOC_GLOBAL, AGG_MAX_PRIOR, 1, 0, 0, 0, 0,
     0, 0, 0, 0.9},
    {"duoattention", "duo_attention", SCORE_NONE, ALLOC_DUO, AGG_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};
#define N_POLICIES (int)(sizeof POLICIES / sizeof POLICIES[0])

#define DEFAULT_WINDOW 32
#define DEFAULT_POOL_KERNEL 5

struct PolicyState {
    PolicyConfig cfg;
    const PolicyRow *row;
    int n_layers, n_kv_heads, context_len;
    int observed;         /* layers observed so far */
    LayerScores *layers;  /* [N] */
};

const PolicyRow *policy_row(const char *name) {
    for (int i = 0; name && i < N_POLICIES; i++)
        if (!strcmp(name, POLICIES[i].name) || !strcmp(name, POLICIES[i].press_name)) return &POLICIES[i];
    return NULL;
}

const char *policy_names(void) {
    static char names[256];
    if (!names[0])
        for (int i = 0; i < N_POLICIES; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", POLICIES[i].name);
    return names;
}

LadderConstants ladder_constants(void) {
    const PolicyRow *critical = policy_row("criticalkv"), *defensive = policy_row("defensivekv");
    return (LadderConstants){critical->alpha_safeguard, critical->first_stage_ratio, critical->epsilon,
                             defensive->mass_threshold};
}

int ladder_needs_base(const LadderParams *lp) {
    return lp->enabled && (lp->allocation == LADDER_ALLOC_HEAD || lp->safeguard || lp->forced == LADDER_FORCED_TOPK);
}

/* A value-weighted policy's own steps: Ada-CriticalKV's (its row allocates ALLOC_CRITICAL) or DefensiveKV's
 * (ALLOC_LAYER, and ALLOC_GLOBAL for Layer-DefensiveKV); the group folds as the aggregation. Zero for the
 * other policies. */
static LadderParams ladder_defaults(const PolicyRow *row, Aggregation aggregation) {
    if (!row->needs_value_norm) return (LadderParams){0};
    LadderGroup group = aggregation == AGG_MEAN ? LADDER_GROUP_MEAN : LADDER_GROUP_MAX;
    if (row->allocation == ALLOC_CRITICAL)
        return (LadderParams){1, LADDER_POOL_WINDOW, group, LADDER_FORCED_TOPK, 1, LADDER_WEIGHT_CRITICAL,
                              LADDER_ALLOC_HEAD};
    return (LadderParams){1, LADDER_POOL_ROWS, group, LADDER_FORCED_MASS, 0, LADDER_WEIGHT_DEFENSIVE,
                          row->allocation == ALLOC_GLOBAL ? LADDER_ALLOC_GLOBAL : LADDER_ALLOC_LAYER};
}

/* The ladder's parameters: key, the values in enum order (value i is enum value i + 1; the safeguard's
 * off/on are 0/1), and where each lives in LadderParams. */
static const struct {
    const char *key;
    const char *values[4];
    size_t offset;
} LADDER_KEYS[] = {
    {"pooling", {"window", "rows"}, offsetof(LadderParams, pooling)},
    {"group", {"mean", "max"}, offsetof(LadderParams, group)},
    {"forced", {"topk", "mass", "none"}, offsetof(LadderParams, forced)},
    {"safeguard", {"off", "on"}, offsetof(LadderParams, safeguard)},
    {"weighting", {"critical", "defensive"}, offsetof(LadderParams, weighting)},
    {"allocation", {"head", "layer", "global"}, offsetof(LadderParams, allocation)},
};
#define N_LADDER_KEYS (int)(sizeof LADDER_KEYS / sizeof LADDER_KEYS[0])

/* Every field is an int-sized enum or int (the static asserts keep it so). */
static int *ladder_field(LadderParams *lp, int key) { return (int *)((char *)lp + LADDER_KEYS[key].offset); }
_Static_assert(sizeof(LadderPooling) == sizeof(int) && sizeof(LadderForced) == sizeof(int) &&
                   sizeof(LadderAllocation) == sizeof(int), "ladder fields are ints");

/* The text of value v of key (the safeguard counts from 0, the enums from 1). */
static const char *ladder_value_name(int key, int v) {
    int i = strcmp(LADDER_KEYS[key].key, "safeguard") ? v - 1 : v;
    return i >= 0 && i < 4 ? LADDER_KEYS[key].values[i] : NULL;
}

int policy_set_param(PolicyConfig *cfg, const char *key, const char *value, KvErr *err) {
    if (!cfg->ladder.enabled)
        return kv_fail(err, "policy %s takes no parameter '%s' (only criticalkv, defensivekv and layer-defensivekv "
                            "take the ladder's steps, docs/ladder.md)", cfg->name, key ? key : "");
    for (int k = 0; key && k < N_LADDER_KEYS; k++) {
        if (strcmp(key, LADDER_KEYS[k].key)) continue;
        char known[64] = "";
        for (int v = 0; v < 4 && LADDER_KEYS[k].values[v]; v++) {
            int code = strcmp(key, "safeguard") ? v + 1 : v;
            if (value && !strcmp(value, LADDER_KEYS[k].values[v])) {
                *ladder_field(&cfg->ladder, k) = code;
                return 0;
            }
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", v ? ", " : "",
                     LADDER_KEYS[k].values[v]);
        }
        return kv_fail(err, "policy %s: %s '%s' is not one of %s", cfg->name, key, value ? value : "", known);
    }
    return kv_fail(err, "policy %s: unknown parameter '%s' (known: pooling, group, forced, safeguard, weighting, "
                        "allocation)", cfg->name, key ? key : "");
}

int policy_params_text(const PolicyConfig *cfg, char *out, size_t n) {
    if (n) out[0] = 0;
    const PolicyRow *row = policy_row(cfg->name);
    if (!row || !cfg->ladder.enabled) return 0;
    LadderParams own = ladder_defaults(row, cfg->aggregation), set = cfg->ladder;
    size_t used = 0;
    for (int k = 0; k < N_LADDER_KEYS; k++) {
        int v = *ladder_field(&set, k);
        if (v == *ladder_field(&own, k)) continue;
        int wrote = snprintf(out + used, n - used, ",%s=%s", LADDER_KEYS[k].key, ladder_value_name(k, v));
        if (wrote < 0 || (size_t)wrote >= n - used) return -1;
        used += (size_t)wrote;
    }
    return 0;
}

static int ladders_equal(const LadderParams *a, const LadderParams *b) {
    return a->enabled == b->enabled && a->pooling == b->pooling && a->group == b->group && a->forced == b->forced &&
           a->safeguard == b->safeguard && a->weighting == b->weighting && a->allocation == b->allocation;
}

int policy_configs_equal(const PolicyConfig *a, const PolicyConfig *b) {
    return !strcmp(a->name, b->name) && a->aggregation == b->aggregation && a->window == b->window &&
           a->pool_kernel == b->pool_kernel && a->intended_window_bias == b->intended_window_bias &&
           a->ties_by_unclamped == b->ties_by_unclamped && ladders_equal(&a->ladder, &b->ladder);
}

const char *aggregation_name(Aggregation a) {
    switch (a) {
    case AGG_MEAN: return "mean";
    case AGG_MAX: return "max";
    case AGG_MAX_PRIOR: return "max+prior";
    default: return "none";
    }
}

int policy_config(PolicyConfig *out, const char *name, const char *aggregation, KvErr *err) {
    const PolicyRow *row = policy_row(name);
    if (!row) return kv_fail(err, "unknown policy '%s' (known: %s)", name ? name : "", policy_names());
    *out = (PolicyConfig){.name = row->name, .aggregation = row->default_aggregation, .window = DEFAULT_WINDOW,
                          .pool_kernel = DEFAULT_POOL_KERNEL, .ladder = ladder_defaults(row, row->default_aggregation)};
    if (!aggregation || !strcmp(aggregation, "default")) return 0;
    Aggregation a = !strcmp(aggregation, "mean") ? AGG_MEAN
                    : !strcmp(aggregation, "max") ? AGG_MAX
                    : !strcmp(aggregation, "max+prior") || !strcmp(aggregation, "maxprior") ? AGG_MAX_PRIOR
                    : AGG_DEFAULT;
    if (a == AGG_DEFAULT)
        return kv_fail(err, "unknown aggregation '%s' (known: default, mean, max, max+prior)", aggregation);
    if (row->default_aggregation == AGG_DEFAULT)
        return kv_fail(err, "policy %s does not aggregate scores, so it takes no aggregation (got '%s')", row->name,
                       aggregation);
    out->aggregation = a;
    out->ladder = ladder_defaults(row, a);
    return 0;
}

int policy_needs_value_norm(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row && row->needs_value_norm;
}

int policy_needs_attention(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row && row->scoring != SCORE_NONE && row->scoring != SCORE_SINKS;
}

int policy_needs_duo_pattern(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row && row->allocation == ALLOC_DUO;
}

/* ---- budgets ---- */

int budget_parse(const char *text, Budget *out, KvErr *err) {
    *out = (Budget){0};
    if (!text || !*text) return kv_fail(err, "empty budget (expected e.g. 0.2, 20%% or 512tok)");
    char *end;
    double v = strtod(text, &end);  /* an overflow (ERANGE, +-HUGE_VAL) is refused by the range checks below */
    if (end == text)
        return kv_fail(err, "budget '%s': not a number (expected e.g. 0.2, 20%% or 512tok)", text);
    while (isspace((unsigned char)*end)) end++;
    if (!strcmp(end, "tok") || !strcmp(end, "tokens") || !strcmp(end, "token")) {
        long long tokens = 0;
        NumCheck r = num_integer(v, 1, 1e9, &tokens);
        if (r == NUM_OUT_OF_RANGE)
            return kv_fail(err, "budget '%s': a token budget of %g is out of range [1, 1e9]", text, v);
        if (r) return kv_fail(err, "budget '%s': a token budget must be a whole number of at least 1", text);
        out->tokens = (int)tokens;
        return 0;
    }
    if (!strcmp(end, "%")) v /= 100.0;
    else if (*end) return kv_fail(err, "budget '%s': unexpected '%s' (expected e.g. 0.2, 20%% or 512tok)", text, end);
    if (!(v > 0.0 && v <= 1.0)) return kv_fail(err, "budget '%s': the keep fraction must be in (0, 1]", text);
    out->keep_fraction = v;
    return 0;
}

/* A fraction budget goes through the reference's double arithmetic, f = 1 - (1 - keep_fraction), so 20%
 * keeps int(L * 0.19999999999999996) per head like the reference at compression ratio 0.8. A token budget
 * keeps exactly `tokens` per head: f = tokens / L, nudged up to the next double where L * f would truncate
 * below `tokens`. */
double budget_keep_fraction(const Budget *b, int context_len) {
    if (b->tokens > 0) {
        double f = (double)b->tokens / context_len;
        while ((int)(context_len * f) < b->tokens) f = nextafter(f, 2.0);
        return f;
    }
    return 1.0 - (1.0 - b->keep_fraction);
}

double budget_compression_ratio(const Budget *b, int context_len) {
    return b->tokens > 0 ? 1.0 - budget_keep_fraction(b, context_len) : 1.0 - b->keep_fraction;
}

/* ---- life cycle ---- */

int policy_begin(PolicyState **out, const PolicyConfig *cfg, int n_layers, int n_kv_heads, int context_len,
                 KvErr *err) {
    *out = NULL;
    const PolicyRow *row = policy_row(cfg->name);
    if (!row) return kv_fail(err, "unknown policy '%s' (known: %s)", cfg->name ? cfg->name : "", policy_names());
    if (n_layers <= 0 || n_kv_heads <= 0 || context_len <= 0)
        return kv_fail(err, "policy %s: invalid shape (%d layers, %d kv-heads, %d tokens)", row->name, n_layers,
                       n_kv_heads, context_len);
    if (row->allocation == ALLOC_DUO) {
        if (!cfg->duo_pattern)
            return kv_fail(err, "policy %s: no DuoAttention head pattern for this model (give the model entry "
                                "\"duo_attention_patterns\": FOLDER; shipped in %s)", row->name, duo_patterns_dir());
        if (cfg->duo_pattern->n_layers != n_layers || cfg->duo_pattern->n_kv_heads != n_kv_heads)
            return kv_fail(err, "policy %s: the pattern %s has %d layers x %d kv-heads, the model %d x %d", row->name,
                           cfg->duo_pattern->source, cfg->duo_pattern->n_layers, cfg->duo_pattern->n_kv_heads,
                           n_layers, n_kv_heads);
    }
    if (row->scoring != SCORE_NONE && row->scoring != SCORE_SINKS) {
        if (cfg->window < 1)
            return kv_fail(err, "policy %s: window %d must be at least 1", row->name, cfg->window);
        /* SnapKVPress asserts q_len > window_size; every attention-based press inherits it. */
        if (context_len <= cfg->window)
            return kv_fail(err, "policy %s: the context (%d tokens) must be longer than the window (%d tokens)",
                           row->name, context_len, cfg->window);
        if (cfg->pool_kernel < 1 || cfg->pool_kernel % 2 == 0)
            return kv_fail(err, "policy %s: pooling kernel %d must be odd and at least 1", row->name,
                           cfg->pool_kernel);
        if (cfg->aggregation == AGG_DEFAULT)
            return kv_fail(err, "policy %s: configuration was not resolved by policy_config", row->name);
    }
    PolicyState *st = kv_calloc(1, sizeof *st, err);
    if (!st) return -1;
    st->layers = kv_calloc((size_t)n_layers, sizeof *st->layers, err);
    if (!st->layers) {
        free(st);
        return -1;
    }
    st->cfg = *cfg;
    st->cfg.name = row->name;
    st->row = row;
    st->n_layers = n_layers;
    st->n_kv_heads = n_kv_heads;
    st->context_len = context_len;
    *out = st;
    return 0;
}

/* What every observed layer must satisfy for st. */
static int check_observation(const PolicyState *st, const Observation *obs, KvErr *err) {
    const char *name = st->row->name;
    if (st->observed >= st->n_layers)
        return kv_fail(err, "policy %s: layer %d observed after all %d layers", name, obs->layer, st->n_layers);
    if (obs->layer != st->observed)
        return kv_fail(err, "policy %s: layer %d observed, expected layer %d (layers come in order)", name, obs->layer,
                       st->observed);
    if (obs->L != st->context_len || obs->K != st->n_kv_heads)
        return kv_fail(err, "policy %s: layer %d has L=%d K=%d, the policy began with L=%d K=%d", name, obs->layer,
                       obs->L, obs->K, st->context_len, st->n_kv_heads);
    if (obs->H < obs->K || obs->H % obs->K)
        return kv_fail(err, "policy %s: layer %d has %d query heads, not a multiple of its %d kv-heads", name,
                       obs->layer, obs->H, obs->K);
    if (policy_needs_attention(&st->cfg) && obs->w != st->cfg.window)
        return kv_fail(err, "policy %s: layer %d was observed with a %d-token window, the policy uses %d", name,
                       obs->layer, obs->w, st->cfg.window);
    return 0;
}

int policy_observe(PolicyState *st, const Observation *obs, KvErr *err) {
    if (check_observation(st, obs, err) || score_layer(st->row, &st->cfg, obs, &st->layers[st->observed], err))
        return -1;
    layer_scores_trim(&st->layers[st->observed], &st->cfg);
    st->observed++;
    return 0;
}

/* Scores depend on every step but the allocation, and what a layer keeps on whether selection reads base. */
static int ladders_score_equal(const LadderParams *a, const LadderParams *b) {
    return a->enabled == b->enabled && a->pooling == b->pooling && a->group == b->group && a->forced == b->forced &&
           a->weighting == b->weighting && ladder_needs_base(a) == ladder_needs_base(b);
}

static int rows_score_equal(const PolicyRow *x, const PolicyRow *y, const PolicyConfig *p, const PolicyConfig *q) {
    return x && y && x->scoring == y->scoring &&
           (x->scoring == SCORE_SNAPKV || x->scoring == SCORE_CAKE || x->scoring == SCORE_DEFENSIVE) &&
           x->needs_value_norm == y->needs_value_norm && x->gamma == y->gamma && x->tau1 == y->tau1 &&
           x->tau2 == y->tau2 && x->mass_threshold == y->mass_threshold && p->aggregation == q->aggregation &&
           p->window == q->window && p->pool_kernel == q->pool_kernel &&
           p->intended_window_bias == q->intended_window_bias && p->ties_by_unclamped == q->ties_by_unclamped &&
           ladders_score_equal(&p->ladder, &q->ladder);
}

int policy_configs_score_equal(const PolicyConfig *a, const PolicyConfig *b) {
    return rows_score_equal(policy_row(a->name), policy_row(b->name), a, b);
}

int policy_scores_equal(const PolicyState *a, const PolicyState *b) {
    return rows_score_equal(a->row, b->row, &a->cfg, &b->cfg) && a->n_layers == b->n_layers &&
           a->n_kv_heads == b->n_kv_heads && a->context_len == b->context_len;
}

int policy_observe_copy(PolicyState *st, const PolicyState *from, const Observation *obs, KvErr *err) {
    if (check_observation(st, obs, err)) return -1;
    if (!policy_scores_equal(st, from))
        return kv_fail(err, "policy %s: cannot take the scores of %s, which scores differently", st->row->name,
                       from->row->name);
    if (from->observed != st->observed + 1)
        return kv_fail(err, "policy %s: layer %d copied from %s, which has observed %d layers", st->row->name,
                       obs->layer, from->row->name, from->observed);
    if (layer_scores_copy(st->row, &from->layers[st->observed], st->n_kv_heads, st->context_len, obs->w,
                          &st->layers[st->observed], err))
        return -1;
    st->observed++;
    return 0;
}

int policy_select(PolicyState *st, const Budget *budget, KeepSet *out, KvErr *err) {
    const char *name = st->row->name;
    const int L = st->context_len;
    *out = (KeepSet){0};
    if (policy_needs_attention(&st->cfg) && st->observed != st->n_layers)
        return kv_fail(err, "policy %s: select after %d of %d layers were observed", name, st->observed, st->n_layers);
    if (budget->tokens > 0) {
        if (budget->tokens > L)
            return kv_fail(err, "policy %s: budget of %d tokens is more than the context (%d tokens)", name,
                           budget->tokens, L);
    } else if (!(budget->keep_fraction > 0.0 && budget->keep_fraction <= 1.0)) {
        return kv_fail(err, "policy %s: keep fraction %g is outside (0, 1]", name, budget->keep_fraction);
    }
    double f = budget_keep_fraction(budget, L);
    /* A compression ratio of 0 leaves the cache alone in every press. */
    if (f >= 1.0) return keepset_full(out, st->n_layers, st->n_kv_heads, L, err);
    /* DuoAttention reads the compression ratio the reference is given, not a token count per head. */
    if (st->row->allocation == ALLOC_DUO)
        return duo_keepset(st->cfg.duo_pattern, st->n_layers, st->n_kv_heads, L, budget_compression_ratio(budget, L),
                           out, err);
    if ((int)(L * f) < 1)
        return kv_fail(err, "policy %s: budget %g of a %d-token context keeps no token per head", name, f, L);
    return allocate_keepset(st->row, &st->cfg, st->layers, st->n_layers, st->n_kv_heads, L, f, out, err);
}

void policy_end(PolicyState *st) {
    if (!st) return;
    for (int l = 0; l < st->n_layers; l++) layer_scores_free(&st->layers[l]);
    free(st->layers);
    free(st);
}

void policy_clamped_kept(const PolicyState *st, const KeepSet *ks, long long *clamped_kept, long long *kept) {
    const int K = st->n_kv_heads, P = st->context_len - st->cfg.window;
    *kept = ks->total;
    *clamped_kept = st->cfg.aggregation == AGG_MAX_PRIOR && st->layers && st->layers[0].clamped ? 0 : -1;
    for (int l = 0; l < st->n_layers && *clamped_kept >= 0 && l < ks->n_layers; l++)
        for (int k = 0; k < K; k++) {
            const int *pos = ks->positions + ks->offsets[l * K + k];
            for (int i = 0; i < ks->counts[l * K + k]; i++)
                if (pos[i] >= 0 && pos[i] < P) *clamped_kept += st->layers[l].clamped[(size_t)k * P + pos[i]];
        }
}

int policy_protected_kept(const PolicyState *st, const Budget *b, const KeepSet *ks, int *protected_counts,
                          KvErr *err) {
    if (!st->cfg.ladder.enabled) return 1;
    const int L = st->context_len;
    double f = budget_keep_fraction(b, L);
    if (ks->n_layers != st->n_layers || ks->n_kv_heads != st->n_kv_heads)
        return kv_fail(err, "policy %s: a keep-set of %d x %d heads, the policy has %d x %d", st->row->name,
                       ks->n_layers, ks->n_kv_heads, st->n_layers, st->n_kv_heads);
    if (f >= 1.0) {
        for (int s = 0; s < st->n_layers * st->n_kv_heads; s++) protected_counts[s] = 0;
        return 0;
    }
    return ladder_protected_counts(&st->cfg, st->layers, st->n_layers, st->n_kv_heads, L, f, ks, protected_counts,
                                   err);
}
