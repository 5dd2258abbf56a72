/* ordering.c — whether the paper's ordering of the methods holds in a section (model.h).
 *
 * The paper's tables at 20% rank Layer-DefensiveKV >= DefensiveKV > CriticalKV > AdaKV ~ CAKE > SnapKV >
 * StreamingLLM. Each link of that chain is one paired comparison, avg(a) - avg(b) over the samples both scored,
 * with its stratified bootstrap interval (stats.h), each policy as published: its own default aggregation and ladder steps (the paper's
 * configuration; an ablation's other aggregations are not what the paper ranks). The verdict reads the interval:
 * a ">" holds only when the interval lies above 0, a ">=" fails only when it lies below 0, a "~" holds while
 * the interval includes 0. AdaKV ~ CAKE > SnapKV is two links to SnapKV, one from each. No verdict at all comes
 * from fewer than min_n pairs ("too few samples") or from a zero-width interval (stats_resolved). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../policies/policy.h"
#include "model.h"

static const struct {
    const char *a, *b;
    OrderKind kind;
} CHAIN[REPORT_N_ORDER] = {
    {"layer-defensivekv", "defensivekv", ORDER_GE}, {"defensivekv", "criticalkv", ORDER_GT},
    {"criticalkv", "adakv", ORDER_GT},              {"adakv", "cake", ORDER_APPROX},
    {"adakv", "snapkv", ORDER_GT},                  {"cake", "snapkv", ORDER_GT},
    {"snapkv", "streamingllm", ORDER_GT},
};

const char *report_order_symbol(OrderKind kind) {
    return kind == ORDER_GE ? "≥" : kind == ORDER_GT ? ">" : "≈";
}

int report_is_published(const ReportMethod *m) {
    PolicyConfig cfg;
    KvErr err;
    if (policy_config(&cfg, m->policy, NULL, &err)) return 0;
    if (strcmp(m->aggregation, aggregation_name(cfg.aggregation)) && strcmp(m->aggregation, "default") &&
        strcmp(m->aggregation, "none"))
        return 0;
    /* a step of DefensiveKV's ladder set away from the policy's own makes an ablation variant too (a row from
     * another kvbench whose params do not parse keeps the aggregation's answer) */
    char steps[192];
    if (policy_apply_row_params(&cfg, m->params, &err) || policy_params_text(&cfg, steps, sizeof steps)) return 1;
    return steps[0] == 0;
}

/* The section's method for a policy as published (report_is_published): its index, -1 when absent, -2 when it ran with
 * several parameter sets (which one the paper means is not ours to pick). */
static int default_method(const ReportSection *s, const char *policy) {
    int found = -1;
    for (int m = 0; m < s->n_methods; m++) {
        const ReportMethod *x = &s->methods[m];
        if (strcmp(x->policy, policy) || !report_is_published(x)) continue;
        if (found >= 0) return -2;
        found = m;
    }
    return found;
}

/* Why a paired difference carries no verdict, or NULL when it can carry one: no pair, fewer than min_n pairs, a
 * zero-width interval (stats_resolved). */
static const char *unresolved(const StatsInterval *d, int min_n) {
    if (d->n == 0) return "not compared (no sample scored by both)";
    if (stats_too_few(d, min_n)) return "too few samples";
    if (!stats_resolved(d, min_n)) return "not resolved (zero-width interval: the samples do not vary)";
    return NULL;
}

const char *report_diff_verdict(const StatsInterval *d, int min_n) {
    const char *why = unresolved(d, min_n);
    if (why) return why;
    return !stats_excludes(d, 0) ? "not resolved (the interval includes 0)" : d->lo > 0 ? "higher" : "lower";
}

/* The verdict of a link. */
static const char *verdict(OrderKind kind, const StatsInterval *d, int min_n) {
    const char *why = unresolved(d, min_n);
    if (why) return why;
    int above = stats_significant(d, 0, min_n) && d->lo > 0, below = stats_significant(d, 0, min_n) && d->hi < 0;
    switch (kind) {
    case ORDER_GT: return above ? "holds" : below ? "reversed" : "not resolved (the interval includes 0)";
    case ORDER_GE: return above ? "holds (strictly)" : below ? "fails (reversed)" : "holds (equal within the interval)";
    default: return above || below ? "fails (they differ)" : "holds (no difference resolved)";
    }
}

int report_ordering(const ReportSection *s, int budget, OrderRelation out[REPORT_N_ORDER], KvErr *err) {
    for (int i = 0; i < REPORT_N_ORDER; i++) {
        OrderRelation *r = &out[i];
        *r = (OrderRelation){CHAIN[i].a, CHAIN[i].b, CHAIN[i].kind, default_method(s, CHAIN[i].a),
                             default_method(s, CHAIN[i].b), STATS_NONE, NULL};
        if (r->method_a == -2 || r->method_b == -2) {
            r->verdict = "not compared (a policy ran with several parameter sets)";
            continue;
        }
        const ReportCell *a = r->method_a >= 0 ? report_cell(s, r->method_a, budget) : NULL;
        const ReportCell *b = r->method_b >= 0 ? report_cell(s, r->method_b, budget) : NULL;
        if (!a || !b || !a->ran || !b->ran) {
            r->verdict = "not run";
            continue;
        }
        if (stats_bootstrap(STATS_DIFF, a->x, b->x, s->sample_task, s->n_samples, s->n_tasks, s->resamples,
                            STATS_SEED, &r->diff, err))
            return -1;
        r->verdict = verdict(r->kind, &r->diff, s->min_n);
    }
    return 0;
}

/* ---------------------------------------------------------------- the aggregation ablation, paired */

int report_agg_rank(const char *aggregation) {
    const char *a = aggregation;
    return !strcmp(a, "mean") ? 0 : !strcmp(a, "max") ? 1 : !strcmp(a, "max+prior") ? 2 : 3;
}

/* Appends the pair avg(l) − avg(r) at budget b, with its interval and verdict. */
static AblationPair *add_pair(ReportSection *s, int l, int r, int b, KvErr *err) {
    const ReportCell *a = report_cell(s, l, b), *c = report_cell(s, r, b);
    AblationPair *grown = realloc(s->pairs, (size_t)(s->n_pairs + 1) * sizeof *grown);
    if (!grown) {
        kv_fail(err, "out of memory");
        return NULL;
    }
    s->pairs = grown;
    AblationPair *p = &s->pairs[s->n_pairs++];
    *p = (AblationPair){l, r, b, STATS_NONE, NULL, -1, ""};
    if (stats_bootstrap(STATS_DIFF, a->x, c->x, s->sample_task, s->n_samples, s->n_tasks, s->resamples, STATS_SEED,
                        &p->diff, err))
        return NULL;
    p->verdict = report_diff_verdict(&p->diff, s->min_n);
    return p;
}

/* A method's policy as its row configured it; -1 when the row's policy or params do not parse (a database from
 * another kvbench), so the method takes no part in the ladder. */
static int method_config(const ReportMethod *m, PolicyConfig *cfg) {
    KvErr err;
    return policy_config(cfg, m->policy, m->aggregation, &err) || policy_apply_row_params(cfg, m->params, &err) ? -1
                                                                                                                  : 0;
}

static int ladder_order(const void *x, const void *y) {
    const AblationPair *a = x, *b = y;
    if (a->step_rank != b->step_rank) return a->step_rank - b->step_rank;
    if (a->right != b->right) return a->right - b->right;
    if (a->left != b->left) return a->left - b->left;
    return a->budget - b->budget;
}

/* The ladder's steps: every two value-weighted variants that differ in one step (policy_ladder_step), save the
 * aggregation pairs of one policy and params above, at each budget where both ran. */
static int ladder_pairs(ReportSection *s, KvErr *err) {
    int first = s->n_pairs;
    for (int l = 0; l < s->n_methods; l++)
        for (int r = l + 1; r < s->n_methods; r++) {
            const ReportMethod *x = &s->methods[l], *y = &s->methods[r];
            PolicyConfig cx, cy;
            if ((!strcmp(x->policy, y->policy) && !strcmp(x->params, y->params)) || method_config(x, &cx) ||
                method_config(y, &cy))
                continue;
            int rank;
            char step[64];
            int side = policy_ladder_step(&cx, &cy, &rank, step, sizeof step);
            if (!side) continue;
            for (int b = 0; b < s->n_budgets; b++) {
                int left = side > 0 ? l : r, right = side > 0 ? r : l;
                if (!report_cell(s, left, b)->ran || !report_cell(s, right, b)->ran) continue;
                AblationPair *p = add_pair(s, left, right, b, err);
                if (!p) return -1;
                p->step_rank = rank;
                snprintf(p->step, sizeof p->step, "%s", step);
            }
        }
    if (s->n_pairs > first) qsort(s->pairs + first, (size_t)(s->n_pairs - first), sizeof *s->pairs, ladder_order);
    return 0;
}

int report_ablation_pairs(ReportSection *s, KvErr *err) {
    for (int b = 0; b < s->n_budgets; b++)
        for (int l = 0; l < s->n_methods; l++)
            for (int r = 0; r < s->n_methods; r++) {
                const ReportMethod *x = &s->methods[l], *y = &s->methods[r];
                int kl = report_agg_rank(x->aggregation), kr = report_agg_rank(y->aggregation);
                if (l == r || strcmp(x->policy, y->policy) || strcmp(x->params, y->params) ||
                    !(kl > kr || (kl == kr && strcmp(x->aggregation, y->aggregation) > 0)))
                    continue;
                if (!report_cell(s, l, b)->ran || !report_cell(s, r, b)->ran) continue;
                if (!add_pair(s, l, r, b, err)) return -1;
            }
    return ladder_pairs(s, err);
}
