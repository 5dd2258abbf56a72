/* policy.c — configuration from the descriptors, budgets, and the observe/select life cycle.
 *
 * A policy is its descriptor (policy_internal.h) in policies/<name>.c, listed by registry.c; nothing here names
 * one. The shared scorers live in score.c, budget allocation in allocate.c. */
#include "policy.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_internal.h"
#include "../engine/num.h"

#define DEFAULT_WINDOW 32
#define DEFAULT_POOL_KERNEL 5

struct PolicyState {
    PolicyConfig cfg;
    const PolicyRow *row;
    int n_layers, n_kv_heads, context_len;
    int observed;         /* layers observed so far */
    LayerScores *layers;  /* [N] */
    int *recon_end;       /* [N] NEEDS_RECONSTRUCTION: the end of the last chunk each layer was reconstructed to
                           * (policy_observe_reconstruction), -1 before the first; NULL for other policies */
};

const PolicyRow *policy_row(const char *name) {
    int n;
    const PolicyRow *const *all = policy_registry(&n);
    for (int i = 0; name && i < n; i++)
        if (!strcmp(name, all[i]->name) || !strcmp(name, all[i]->press_name)) return all[i];
    return NULL;
}

/* The canonical names of the registry's policies (those that take the ladder's steps when ladder_only),
 * comma-separated into out[size]. */
static void list_names(char *out, size_t size, int ladder_only) {
    int n;
    const PolicyRow *const *all = policy_registry(&n);
    out[0] = 0;
    for (int i = 0; i < n; i++)
        if (!ladder_only || all[i]->ladder.enabled)
            snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? ", " : "", all[i]->name);
}

const char *policy_names(void) {
    static char names[1024];
    if (!names[0]) list_names(names, sizeof names, 0);
    return names;
}

LadderConstants ladder_constants(void) {
    return (LadderConstants){POLICY_CRITICALKV.alpha_safeguard, POLICY_CRITICALKV.first_stage_ratio,
                             POLICY_CRITICALKV.epsilon, POLICY_DEFENSIVEKV.mass_threshold};
}

int ladder_needs_base(const LadderParams *lp) {
    return lp->enabled && (lp->allocation == LADDER_ALLOC_HEAD || lp->safeguard || lp->forced == LADDER_FORCED_TOPK);
}

/* A value-weighted policy's own steps, as its descriptor sets them, with the group folding as the aggregation.
 * Zero for the other policies. */
static LadderParams ladder_defaults(const PolicyRow *row, Aggregation aggregation) {
    if (!row->ladder.enabled) return (LadderParams){0};
    LadderParams own = row->ladder;
    own.group = aggregation == AGG_MEAN ? LADDER_GROUP_MEAN : LADDER_GROUP_MAX;
    return own;
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
    if (!cfg->ladder.enabled) {
        char names[256];
        list_names(names, sizeof names, 1);
        return kv_fail(err, "policy %s takes no parameter '%s' (only %s take the ladder's steps, docs/ladder.md)",
                       cfg->name, key ? key : "", names);
    }
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

int policy_row_params_text(const PolicyConfig *cfg, char *out, size_t n) {
    if (n) out[0] = 0;
    if (!policy_needs_attention(cfg)) return policy_params_text(cfg, out, n);
    char ladder[160];
    if (policy_params_text(cfg, ladder, sizeof ladder)) return -1;
    int wrote = snprintf(out, n, "w=%d,k=%d%s%s%s", cfg->window, cfg->pool_kernel,
                         cfg->intended_window_bias ? ",intended" : "", cfg->ties_by_unclamped ? ",ties=unclamped" : "",
                         ladder);
    return wrote < 0 || (size_t)wrote >= n ? -1 : 0;
}

/* A positive int in [1, 1 << 20] from text, or -1. */
static int small_int(const char *text) {
    char *end;
    long v = strtol(text, &end, 10);
    return *text && !*end && v >= 1 && v <= (1 << 20) ? (int)v : -1;
}

int policy_apply_row_params(PolicyConfig *cfg, const char *params, KvErr *err) {
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", params) >= (int)sizeof buf)
        return kv_fail(err, "policy %s: params '%.40s...' too long", cfg->name, params);
    char *rest = NULL;
    for (char *item = strtok_r(buf, ",", &rest); item; item = strtok_r(NULL, ",", &rest)) {
        char *eq = strchr(item, '=');
        if (eq) *eq = 0;
        const char *value = eq ? eq + 1 : NULL;
        if (!strcmp(item, "intended") && !value) {
            cfg->intended_window_bias = 1;
        } else if (!strcmp(item, "ties") && value && !strcmp(value, "unclamped")) {
            cfg->ties_by_unclamped = 1;
        } else if ((!strcmp(item, "w") || !strcmp(item, "k")) && value) {
            int v = small_int(value);
            if (v < 0) return kv_fail(err, "policy %s: params: %s '%s' is not a positive count", cfg->name, item, value);
            *(item[0] == 'w' ? &cfg->window : &cfg->pool_kernel) = v;
        } else if (policy_set_param(cfg, item, value, err)) {
            return -1;
        }
    }
    return 0;
}

/* Which side of a step is the farther from Ada-CriticalKV: the later value in LADDER_KEYS' list (rows, max,
 * mass before topk and none after mass, defensive, layer and then global), save the safeguard, where off is. */
static int farther_side(int key, int a, int b) {
    return strcmp(LADDER_KEYS[key].key, "safeguard") ? a > b : a < b;
}

int policy_ladder_step(const PolicyConfig *a, const PolicyConfig *b, int *step, char *out, size_t n) {
    if (n) out[0] = 0;
    *step = 0;
    if (!a->ladder.enabled || !b->ladder.enabled || a->window != b->window || a->pool_kernel != b->pool_kernel ||
        a->intended_window_bias != b->intended_window_bias || a->ties_by_unclamped != b->ties_by_unclamped)
        return 0;
    int differ = a->aggregation != b->aggregation, side = a->aggregation > b->aggregation ? 1 : -1;
    if (differ)
        snprintf(out, n, "aggregation %s − %s", aggregation_name(side > 0 ? a->aggregation : b->aggregation),
                 aggregation_name(side > 0 ? b->aggregation : a->aggregation));
    LadderParams la = a->ladder, lb = b->ladder;
    for (int k = 0; k < N_LADDER_KEYS; k++) {
        int va = *ladder_field(&la, k), vb = *ladder_field(&lb, k);
        if (va == vb) continue;
        if (differ++) return 0;
        side = farther_side(k, va, vb) ? 1 : -1;
        *step = 1 + k;
        snprintf(out, n, "%s %s − %s", LADDER_KEYS[k].key, ladder_value_name(k, side > 0 ? va : vb),
                 ladder_value_name(k, side > 0 ? vb : va));
    }
    return differ == 1 ? side : 0;
}

static int ladders_equal(const LadderParams *a, const LadderParams *b) {
    return a->enabled == b->enabled && a->pooling == b->pooling && a->group == b->group && a->forced == b->forced &&
           a->safeguard == b->safeguard && a->weighting == b->weighting && a->allocation == b->allocation;
}

int policy_configs_equal(const PolicyConfig *a, const PolicyConfig *b) {
    return policy_row(a->name) == policy_row(b->name) && a->aggregation == b->aggregation &&
           a->window == b->window && a->pool_kernel == b->pool_kernel &&
           a->intended_window_bias == b->intended_window_bias && a->ties_by_unclamped == b->ties_by_unclamped &&
           ladders_equal(&a->ladder, &b->ladder);
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
    if (!row->aggregations)
        return kv_fail(err, "policy %s does not aggregate scores, so it takes no aggregation (got '%s')", row->name,
                       aggregation);
    if (!(row->aggregations & AGG_BIT(a)))
        return kv_fail(err, "policy %s does not take the aggregation '%s'", row->name, aggregation);
    out->aggregation = a;
    out->ladder = ladder_defaults(row, a);
    return 0;
}

static unsigned needs(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row ? row->needs : 0;
}

int policy_needs_value_norm(const PolicyConfig *cfg) { return !!(needs(cfg) & NEEDS_VALUE_NORM); }
int policy_needs_attention(const PolicyConfig *cfg) { return !!(needs(cfg) & NEEDS_ATTENTION); }
int policy_needs_duo_pattern(const PolicyConfig *cfg) { return !!(needs(cfg) & NEEDS_DUO_PATTERN); }
int policy_needs_keys(const PolicyConfig *cfg) { return !!(needs(cfg) & (NEEDS_KEYS | NEEDS_VALUES)); }
int policy_needs_attention_sums(const PolicyConfig *cfg) { return !!(needs(cfg) & NEEDS_ATTENTION_SUMS); }
int policy_query_stats_from(const PolicyConfig *cfg) {
    return needs(cfg) & NEEDS_QUERY_STATS ? policy_row(cfg->name)->n_sink : -1;
}

const char *policy_missing_observation(const PolicyConfig *cfg, unsigned observes) {
    if (policy_needs_attention_sums(cfg) && !(observes & OBSERVES_ATTENTION_SUMS))
        return "the attention sums of every prefill query";
    if (policy_query_stats_from(cfg) >= 0 && !(observes & OBSERVES_QUERY_STATS))
        return "the mean and covariance of the prefill's queries before RoPE";
    if ((needs(cfg) & NEEDS_RECONSTRUCTION) && !(observes & OBSERVES_RECONSTRUCTION))
        return "a reconstruction pass over the context (an observed forward on top of its cache)";
    return NULL;
}

int policy_reconstruction(const PolicyConfig *cfg, ReconstructionSpec *out) {
    if (!(needs(cfg) & NEEDS_RECONSTRUCTION)) return 0;
    const PolicyRow *row = policy_row(cfg->name);
    *out = (ReconstructionSpec){row->chunk_length, row->first_prompt, row->next_prompt, row->next_tail};
    return 1;
}

int policy_observes(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row && row->score;
}

int policy_aggregates(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row && row->aggregations;
}

int policy_keeps_all(const PolicyConfig *cfg) {
    const PolicyRow *row = policy_row(cfg->name);
    return row && row->allocation == ALLOC_ALL;
}

int policy_budget_tokens(const PolicyConfig *cfg, const Budget *b, int context_len) {
    if (policy_keeps_all(cfg)) return context_len;
    return b->tokens > 0 ? b->tokens : (int)(context_len * budget_keep_fraction(b, context_len));
}

double policy_keep_share(const PolicyConfig *cfg, const Budget *b, int context_len) {
    if (policy_keeps_all(cfg)) return 1.0;
    if (b->tokens <= 0) return b->keep_fraction;
    return context_len > 0 ? fmin(1.0, (double)b->tokens / context_len) : 0.0;
}

PolicyRole policy_role(const char *name) {
    const PolicyRow *row = policy_row(name);
    return row ? row->role : POLICY_BASELINE;
}

const char *policy_colour(const char *name) {
    const PolicyRow *row = policy_row(name);
    return row ? row->colour : NULL;
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
                                "\"duo_attention_patterns\": FOLDER; shipped in " DUO_PATTERNS_SHIPPED ")", row->name);
        if (cfg->duo_pattern->n_layers != n_layers || cfg->duo_pattern->n_kv_heads != n_kv_heads)
            return kv_fail(err, "policy %s: the pattern %s has %d layers x %d kv-heads, the model %d x %d", row->name,
                           cfg->duo_pattern->source, cfg->duo_pattern->n_layers, cfg->duo_pattern->n_kv_heads,
                           n_layers, n_kv_heads);
    }
    if (row->needs & NEEDS_ATTENTION) {
        if (cfg->window < 1)
            return kv_fail(err, "policy %s: window %d must be at least 1", row->name, cfg->window);
        /* SnapKVPress asserts q_len > window_size; every attention-based press inherits it. */
        if (context_len <= cfg->window)
            return kv_fail(err, "policy %s: the context (%d tokens) must be longer than the window (%d tokens)",
                           row->name, context_len, cfg->window);
        if (cfg->pool_kernel < 1 || cfg->pool_kernel % 2 == 0)
            return kv_fail(err, "policy %s: pooling kernel %d must be odd and at least 1", row->name,
                           cfg->pool_kernel);
    }
    if (row->aggregations && cfg->aggregation == AGG_DEFAULT)
        return kv_fail(err, "policy %s: configuration was not resolved by policy_config", row->name);
    PolicyState *st = kv_calloc(1, sizeof *st, err);
    if (!st) return -1;
    st->layers = kv_calloc((size_t)n_layers, sizeof *st->layers, err);
    if (st->layers && (row->needs & NEEDS_RECONSTRUCTION) &&
        (st->recon_end = kv_malloc(sizeof(int) * (size_t)n_layers, err)))
        for (int l = 0; l < n_layers; l++) st->recon_end[l] = -1;
    if (!st->layers || ((row->needs & NEEDS_RECONSTRUCTION) && !st->recon_end)) {
        free(st->layers);
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

int policy_observe_reconstruction(PolicyState *st, const Observation *obs, int chunk_start, int chunk_end,
                                  KvErr *err) {
    const char *name = st->row->name;
    const int l = obs->layer, L = st->context_len;
    if (!st->recon_end)
        return kv_fail(err, "policy %s reads no reconstruction pass", name);
    if (st->observed != st->n_layers)
        return kv_fail(err, "policy %s: a reconstruction pass after %d of the prefill's %d layers", name, st->observed,
                       st->n_layers);
    if (l < 0 || l >= st->n_layers || obs->K != st->n_kv_heads || obs->H < obs->K || obs->H % obs->K)
        return kv_fail(err, "policy %s: a reconstruction of layer %d with %d query heads and %d kv-heads (the policy "
                            "began with %d layers and %d kv-heads)", name, l, obs->H, obs->K, st->n_layers,
                       st->n_kv_heads);
    /* in order: every layer of a chunk before the next chunk, the chunks back to back */
    int expected = st->recon_end[l] < 0 ? chunk_start : st->recon_end[l];
    int previous = l == 0 ? -2 : st->recon_end[l - 1];
    if (chunk_start != expected || chunk_start < 0 || chunk_end <= chunk_start || chunk_end > L ||
        (l > 0 && previous != chunk_end))
        return kv_fail(err, "policy %s: layer %d reconstructs context positions [%d, %d) out of order (it has "
                            "reached %d of %d)", name, l, chunk_start, chunk_end, st->recon_end[l], L);
    if (obs->w < 1 || obs->L != L + obs->w || !obs->q_win || !obs->keys)
        return kv_fail(err, "policy %s: layer %d's reconstruction holds %d keys and %d new queries%s, expected the "
                            "%d context keys and the new ones", name, l, obs->L, obs->w,
                       obs->q_win && obs->keys ? "" : " (without queries or keys)", L);
    if (st->row->reconstruct(st->row, obs, chunk_start, chunk_end, L, st->layers[l].score, err)) return -1;
    st->recon_end[l] = chunk_end;
    return 0;
}

/* Scores depend on every step but the allocation, and what a layer keeps on whether selection reads base. */
static int ladders_score_equal(const LadderParams *a, const LadderParams *b) {
    return a->enabled == b->enabled && a->pooling == b->pooling && a->group == b->group && a->forced == b->forced &&
           a->weighting == b->weighting && ladder_needs_base(a) == ladder_needs_base(b);
}

/* The same scorer with the same constants (CAKE's; the value-weighted pipeline's are the ladder's, one set) under
 * the same settings. */
static int rows_score_equal(const PolicyRow *x, const PolicyRow *y, const PolicyConfig *p, const PolicyConfig *q) {
    /* a reconstruction policy's layers are only scored by its own pass */
    return x && y && x->score && x->score == y->score && !(x->needs & NEEDS_RECONSTRUCTION) && x->gamma == y->gamma &&
           x->tau1 == y->tau1 && x->tau2 == y->tau2 && p->aggregation == q->aggregation &&
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
    if (st->row->score && st->observed != st->n_layers)
        return kv_fail(err, "policy %s: select after %d of %d layers were observed", name, st->observed, st->n_layers);
    for (int l = 0; st->recon_end && l < st->n_layers; l++)
        if (st->recon_end[l] != L)
            return kv_fail(err, "policy %s: select before the reconstruction pass reached the context's end (layer "
                                "%d: %d of %d positions)", name, l, st->recon_end[l] < 0 ? 0 : st->recon_end[l], L);
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
    free(st->recon_end);
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
