/* sizes.c — the paper's ordering and the ablations, model beside model (model.h, ReportSizes).
 *
 * Whether a link changes with model size is a question about the same samples at every size, so each link is
 * computed over the samples every model of the group scored on both sides, matched by sample key (the generated
 * task instance: the same seed, task and index; between models of one tokenizer the very same tokens). Each
 * model's difference is paired by sample as in its own section; the change from one model to the next pairs each
 * sample's two differences, so what the two models share in a sample's difficulty cancels. Pairing by key is
 * fixed by design, not by outcome, so the paired interval stays valid where the models read other filler text.
 * The sign verdict needs both differences resolved (stats_significant): "changes sign" only when two models
 * each exclude 0 on opposite sides. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

void report_sizes_free(ReportSizes *x, int n) {
    for (int i = 0; x && i < n; i++) {
        for (int k = 0; k < x[i].n_links; k++) {
            free(x[i].links[k].diff);
            free(x[i].links[k].change);
            free(x[i].links[k].change_verdict);
        }
        free(x[i].links);
        free(x[i].section);
    }
    free(x);
}

static int find_key(const ReportSection *s, const char *key) {
    for (int i = 0; i < s->n_samples; i++)
        if (!strcmp(s->sample_key[i], key)) return i;
    return -1;
}

static int find_budget(const ReportSection *s, const char *label) {
    for (int b = 0; b < s->n_budgets; b++)
        if (!strcmp(s->budgets[b].label, label)) return b;
    return -1;
}

static int find_method(const ReportSection *s, const ReportMethod *m) {
    for (int k = 0; k < s->n_methods; k++) {
        const ReportMethod *x = &s->methods[k];
        if (!strcmp(x->policy, m->policy) && !strcmp(x->aggregation, m->aggregation) && !strcmp(x->params, m->params))
            return k;
    }
    return -1;
}

/* The group's shared shape: per model its section, and for every sample of the first section its index in each
 * model's section (-1 where the model lacks it). */
typedef struct {
    const ReportData *d;
    const int *section;
    int n_models;
    const int *index;   /* [n_models][S0] */
} Group;

/* The left and right methods of link l in model i (-1 where absent) and the budget's index in model i. */
static void link_methods(const Group *g, const ReportSizes *x, const SizeLink *l, int i, int *left, int *right,
                         int *budget) {
    const ReportSection *s0 = &g->d->sections[g->section[0]], *s = &g->d->sections[g->section[i]];
    *left = *right = -1;
    *budget = find_budget(s, s0->budgets[x->budget].label);
    if (*budget < 0) return;
    if (l->order >= 0) {
        const OrderRelation *o = &s->order[(size_t)*budget * REPORT_N_ORDER + l->order];
        *left = o->method_a, *right = o->method_b;
        return;
    }
    const ReportSection *owner = &g->d->sections[g->section[l->pair_model]];
    const AblationPair *p = &owner->pairs[l->pair];
    *left = find_method(s, &owner->methods[p->left]);
    *right = find_method(s, &owner->methods[p->right]);
}

/* One link's differences per model and changes from model to model. */
static int link_stats(const Group *g, const ReportSizes *x, SizeLink *l, KvErr *err) {
    const ReportSection *s0 = &g->d->sections[g->section[0]];
    int N = g->n_models, S0 = s0->n_samples;
    l->diff = kv_malloc(sizeof *l->diff * (size_t)N, err);
    l->change = kv_malloc(sizeof *l->change * (size_t)N, err);
    l->change_verdict = kv_calloc((size_t)N, sizeof *l->change_verdict, err);
    double *xa = kv_malloc(sizeof *xa * ((size_t)N * S0 + 1), err), *xb = kv_malloc(sizeof *xb * ((size_t)N * S0 + 1), err);
    int *group = kv_malloc(sizeof *group * ((size_t)S0 + 1), err);
    int rc = -1;
    if (!l->diff || !l->change || !l->change_verdict || !xa || !xb || !group) goto done;
    for (int i = 0; i < N; i++) l->diff[i] = STATS_NONE, l->change[i] = STATS_NONE;
    l->sign = "not run";
    const ReportCell *ca[64], *cb[64];
    for (int i = 0; i < N; i++) {
        int a, b, budget;
        link_methods(g, x, l, i, &a, &b, &budget);
        const ReportSection *s = &g->d->sections[g->section[i]];
        ca[i] = a >= 0 && budget >= 0 ? report_cell(s, a, budget) : NULL;
        cb[i] = b >= 0 && budget >= 0 ? report_cell(s, b, budget) : NULL;
        if (!ca[i] || !cb[i] || !ca[i]->ran || !cb[i]->ran) {
            rc = 0;
            goto done;
        }
    }
    /* the common samples: scored on both sides by every model */
    int n = 0;
    for (int j = 0; j < S0; j++) {
        int common = 1;
        for (int i = 0; i < N && common; i++) {
            int k = g->index[(size_t)i * S0 + j];
            common = k >= 0 && !isnan(ca[i]->x[k]) && !isnan(cb[i]->x[k]);
        }
        if (!common) continue;
        for (int i = 0; i < N; i++) {
            int k = g->index[(size_t)i * S0 + j];
            xa[(size_t)i * S0 + n] = ca[i]->x[k];
            xb[(size_t)i * S0 + n] = cb[i]->x[k];
        }
        group[n++] = s0->sample_task[j];
    }
    for (int i = 0; i < N; i++)
        if (stats_bootstrap(STATS_DIFF, xa + (size_t)i * S0, xb + (size_t)i * S0, group, n, s0->n_tasks,
                            s0->resamples, STATS_SEED, &l->diff[i], err))
            goto done;
    /* the change, model i to i + 1: each sample's difference, later minus earlier (overwrites xa with them) */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < n; j++) xa[(size_t)i * S0 + j] -= xb[(size_t)i * S0 + j];
    for (int i = 0; i + 1 < N; i++) {
        if (stats_bootstrap(STATS_DIFF, xa + (size_t)(i + 1) * S0, xa + (size_t)i * S0, group, n, s0->n_tasks,
                            s0->resamples, STATS_SEED, &l->change[i], err))
            goto done;
        l->change_verdict[i] = report_diff_verdict(&l->change[i], x->min_n);
    }
    int changes = 0, all_same = 1;
    for (int i = 0; i < N; i++) {
        int si = stats_significant(&l->diff[i], 0, x->min_n), up = l->diff[i].value > 0;
        all_same &= si && up == (l->diff[0].value > 0);
        for (int j = i + 1; j < N; j++)
            changes |= si && stats_significant(&l->diff[j], 0, x->min_n) && up != (l->diff[j].value > 0);
    }
    l->sign = n == 0 ? "not compared (no sample common to the models)"
              : changes ? "changes sign"
              : all_same ? "the same sign in every model"
                         : "not resolved";
    rc = 0;
done:
    free(xa);
    free(xb);
    free(group);
    return rc;
}

static int same_method(const ReportMethod *a, const ReportMethod *b) {
    return !strcmp(a->policy, b->policy) && !strcmp(a->aggregation, b->aggregation) && !strcmp(a->params, b->params);
}

/* Whether pair k of model i's section is one of the links already listed (the same two methods). */
static int listed(const Group *g, const ReportSizes *x, int i, int k) {
    const ReportSection *s = &g->d->sections[g->section[i]];
    const AblationPair *p = &s->pairs[k];
    for (int j = 0; j < x->n_links; j++) {
        const SizeLink *l = &x->links[j];
        if (l->order >= 0) continue;
        const ReportSection *o = &g->d->sections[g->section[l->pair_model]];
        const AblationPair *q = &o->pairs[l->pair];
        if (same_method(&s->methods[p->left], &o->methods[q->left]) &&
            same_method(&s->methods[p->right], &o->methods[q->right]))
            return 1;
    }
    return 0;
}

/* The links of a group at one budget: the paper's ordering, then every model's ablation pairs there, each once
 * (the first model's first: a pair one model lacks is listed, "not run"). */
static int group_at(const Group *g, int budget, ReportSizes *x, KvErr *err) {
    const ReportSection *s0 = &g->d->sections[g->section[0]];
    int cap = REPORT_N_ORDER;
    for (int i = 0; i < g->n_models; i++) cap += g->d->sections[g->section[i]].n_pairs;
    *x = (ReportSizes){g->n_models, kv_malloc(sizeof *x->section * (size_t)g->n_models, err), budget, NULL, 0,
                       g->d->min_n};
    x->links = kv_calloc((size_t)cap + 1, sizeof *x->links, err);
    if (!x->section || !x->links) return -1;
    memcpy(x->section, g->section, sizeof *x->section * (size_t)g->n_models);
    for (int k = 0; k < REPORT_N_ORDER; k++) {
        SizeLink *l = &x->links[x->n_links++];
        *l = (SizeLink){k, -1, 0, NULL, NULL, NULL, NULL};
        if (link_stats(g, x, l, err)) return -1;
    }
    for (int i = 0; i < g->n_models; i++) {
        const ReportSection *s = &g->d->sections[g->section[i]];
        int b = find_budget(s, s0->budgets[budget].label);
        for (int k = 0; k < s->n_pairs; k++) {
            if (s->pairs[k].budget != b || listed(g, x, i, k)) continue;
            SizeLink *l = &x->links[x->n_links++];
            *l = (SizeLink){-1, k, i, NULL, NULL, NULL, NULL};
            if (link_stats(g, x, l, err)) return -1;
        }
    }
    return 0;
}

/* Whether section j is its model's first of its suite (a suite run again in another setup counts once). */
static int first_of(const ReportData *d, int j) {
    for (int i = 0; i < j; i++)
        if (!strcmp(d->sections[i].model, d->sections[j].model) && !strcmp(d->sections[i].suite, d->sections[j].suite))
            return 0;
    return 1;
}

static int shares_key(const ReportSection *a, const ReportSection *b) {
    for (int i = 0; i < a->n_samples; i++)
        if (find_key(b, a->sample_key[i]) >= 0) return 1;
    return 0;
}

int report_sizes(const ReportData *d, ReportSizes **out, int *n_out, KvErr *err) {
    *out = NULL, *n_out = 0;
    int S = d->n_sections;
    int *grouped = kv_calloc((size_t)S + 1, sizeof *grouped, err), *section = kv_malloc(sizeof *section * ((size_t)S + 1), err);
    int *index = NULL, rc = -1, cap = 0;
    if (!grouped || !section) goto done;
    for (int first = 0; first < S; first++) {
        const ReportSection *s0 = &d->sections[first];
        if (grouped[first] || !first_of(d, first)) continue;
        int N = 0;
        section[N++] = first;
        for (int j = first + 1; j < S && N < 64; j++) {
            const ReportSection *s = &d->sections[j];
            if (grouped[j] || strcmp(s->suite, s0->suite) || !first_of(d, j) || !shares_key(s0, s)) continue;
            grouped[j] = 1;
            section[N++] = j;
        }
        if (N < 2) continue;
        free(index);
        if (!(index = kv_malloc(sizeof *index * ((size_t)N * s0->n_samples + 1), err))) goto done;
        for (int i = 0; i < N; i++)
            for (int k = 0; k < s0->n_samples; k++)
                index[(size_t)i * s0->n_samples + k] = find_key(&d->sections[section[i]], s0->sample_key[k]);
        Group g = {d, section, N, index};
        for (int b = 0; b < s0->n_budgets; b++) {
            int everywhere = 1;
            for (int i = 1; i < N; i++) everywhere &= find_budget(&d->sections[section[i]], s0->budgets[b].label) >= 0;
            if (!everywhere) continue;
            if (*n_out == cap) {
                ReportSizes *grown = realloc(*out, sizeof *grown * (size_t)(cap = cap * 2 + 4));
                if (!grown) {
                    kv_fail(err, "out of memory");
                    goto done;
                }
                *out = grown;
            }
            ReportSizes *x = &(*out)[(*n_out)++];
            if (group_at(&g, b, x, err)) goto done;
        }
    }
    rc = 0;
done:
    if (rc) {
        report_sizes_free(*out, *n_out);
        *out = NULL, *n_out = 0;
    }
    free(grouped);
    free(section);
    free(index);
    return rc;
}
