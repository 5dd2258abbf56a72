/* model.c — the report's data model (model.h): loads the per-sample scores of a results database into
 * ReportSections and computes their statistics (stats.h); the writers (tables.c, figures.c, traces.c, ...)
 * render from it, report.c drives them.
 *
 * Tasks are ordered as they were run (first sample id), which follows the config and hence the paper's task
 * order; methods likewise (first result id); budgets by keep fraction. A sample is one samples row, i.e. one
 * (model, setup, sample key): the same sample across policies, which is what the paired intervals pair on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../policies/policy.h"
#include "escape.h"
#include "model.h"

static char *dup_or_empty(const unsigned char *s, KvErr *err) {
    const char *t = s ? (const char *)s : "";
    size_t n = strlen(t) + 1;
    char *d = kv_malloc(n, err);
    if (d) memcpy(d, t, n);
    return d;
}

/* Grows an array of *n elements of elem bytes by one zeroed element: returns the new array (the element is at
 * index *n - 1 after the call) or NULL on allocation failure, the old array then unchanged. */
static void *grow(void *base, int *n, size_t elem, KvErr *err) {
    char *grown = realloc(base, (size_t)(*n + 1) * elem);
    if (!grown) {
        kv_fail(err, "out of memory");
        return NULL;
    }
    memset(grown + (size_t)*n * elem, 0, elem);
    (*n)++;
    return grown;
}

static int find_name(char **list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], name)) return i;
    return -1;
}

/* Index of name in list[n], appending it when absent; -1 on allocation failure. */
static int intern(char ***list, int *n, const char *name, KvErr *err) {
    int i = find_name(*list, *n, name);
    if (i >= 0) return i;
    char **grown = grow(*list, n, sizeof *grown, err);
    if (!grown) return -1;
    *list = grown;
    i = *n - 1;
    return (grown[i] = dup_or_empty((const unsigned char *)name, err)) ? i : -1;
}

int report_is_proposed(const char *policy) {
    return policy_role(policy) == POLICY_PROPOSED;
}

ReportCell *report_cell(const ReportSection *s, int method, int budget) {
    return &s->cells[(size_t)method * s->n_budgets + budget];
}

int report_has_scores(const ReportSection *s, const ReportCell *c) {
    return c->ran && c->domain && s->n_domains >= 0 && c->domain[s->n_domains].n > 0;
}

int report_has_substitute(const ReportSection *s, int domain) {
    for (int t = 0; t < s->n_tasks; t++)
        if (s->task_substitute[t] && (domain < 0 || s->task_domain[t] == domain)) return 1;
    return 0;
}

/* One row of the query, in column order. */
enum { C_MODEL, C_SETUP, C_SUITE, C_TASK, C_DOMAIN, C_NOTE, C_SAMPLE, C_POLICY, C_AGG, C_PARAMS, C_BUDGET, C_KEEP,
       C_SCORE, C_ERROR, C_ROW, C_KEY };

static const char *QUERY =
    "SELECT s.model, s.setup, s.suite, s.task, s.domain, s.note, s.id, r.policy, r.aggregation, r.params, r.budget,"
    "       r.keep_fraction, r.score, r.error, r.id, s.sample_key "
    "FROM results r JOIN samples s ON s.id = r.sample_id ORDER BY s.id, r.id";

static const char *col(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

static int section_index(ReportData *d, sqlite3_stmt *st, KvErr *err) {
    for (int i = 0; i < d->n_sections; i++) {
        ReportSection *s = &d->sections[i];
        if (!strcmp(s->model, col(st, C_MODEL)) && !strcmp(s->setup, col(st, C_SETUP)) &&
            !strcmp(s->suite, col(st, C_SUITE)))
            return i;
    }
    ReportSection *grown = grow(d->sections, &d->n_sections, sizeof *grown, err);
    if (!grown) return -1;
    d->sections = grown;
    int i = d->n_sections - 1;
    ReportSection *s = &d->sections[i];
    if (!(s->model = dup_or_empty(sqlite3_column_text(st, C_MODEL), err)) ||
        !(s->setup = dup_or_empty(sqlite3_column_text(st, C_SETUP), err)) ||
        !(s->suite = dup_or_empty(sqlite3_column_text(st, C_SUITE), err)))
        return -1;
    return i;
}

static int find_method(const ReportSection *s, sqlite3_stmt *st) {
    for (int m = 0; m < s->n_methods; m++) {
        const ReportMethod *x = &s->methods[m];
        if (!strcmp(x->policy, col(st, C_POLICY)) && !strcmp(x->aggregation, col(st, C_AGG)) &&
            !strcmp(x->params, col(st, C_PARAMS)))
            return m;
    }
    return -1;
}

static int find_budget(const ReportSection *s, const char *label) {
    for (int b = 0; b < s->n_budgets; b++)
        if (!strcmp(s->budgets[b].label, label)) return b;
    return -1;
}

/* First pass: the axes of each section (samples, tasks, domains, methods, budgets). */
static int collect_axes(ReportSection *s, sqlite3_stmt *st, KvErr *err) {
    long long sample = sqlite3_column_int64(st, C_SAMPLE);
    if (!s->n_samples || s->sample_id[s->n_samples - 1] != sample) {
        int before = s->n_tasks;
        const char *task = col(st, C_TASK);
        int t = intern(&s->tasks, &s->n_tasks, task, err);
        if (t < 0) return -1;
        if (s->n_tasks > before) {
            const char *domain = sqlite3_column_text(st, C_DOMAIN) ? col(st, C_DOMAIN) : "-";
            int dom = intern(&s->domains, &s->n_domains, domain, err);
            int *td = realloc(s->task_domain, (size_t)s->n_tasks * sizeof *td);
            if (td) s->task_domain = td;
            int *tn = realloc(s->task_samples, (size_t)s->n_tasks * sizeof *tn);
            if (tn) s->task_samples = tn;
            unsigned char *sub = realloc(s->task_substitute, (size_t)s->n_tasks);
            if (sub) s->task_substitute = sub;
            if (dom < 0 || !td || !tn || !sub) return kv_fail(err, "out of memory");
            td[t] = dom;
            tn[t] = 0;
            size_t len = strlen(task);
            sub[t] = len > 11 && !strcmp(task + len - 11, "_substitute");
        }
        if (strstr(col(st, C_NOTE), "substitute")) s->task_substitute[t] = 1;
        s->task_samples[t]++;
        int n = s->n_samples;
        int *tasks = realloc(s->sample_task, (size_t)(n + 1) * sizeof *tasks);
        if (tasks) s->sample_task = tasks;
        long long *ids = realloc(s->sample_id, (size_t)(n + 1) * sizeof *ids);
        if (ids) s->sample_id = ids;
        char **keys = realloc(s->sample_key, (size_t)(n + 1) * sizeof *keys);
        if (keys) s->sample_key = keys;
        if (!tasks || !ids || !keys) return kv_fail(err, "out of memory");
        tasks[n] = t;
        ids[n] = sample;
        if (!(keys[n] = dup_or_empty(sqlite3_column_text(st, C_KEY), err))) return -1;
        s->n_samples++;
    }
    if (policy_role(col(st, C_POLICY)) == POLICY_REFERENCE) return 0;
    int m = find_method(s, st);
    if (m < 0) {
        ReportMethod *grown = grow(s->methods, &s->n_methods, sizeof *grown, err);
        if (!grown) return -1;
        s->methods = grown;
        m = s->n_methods - 1;
        ReportMethod *x = &s->methods[m];
        x->first_row = sqlite3_column_int64(st, C_ROW);
        if (!(x->policy = dup_or_empty(sqlite3_column_text(st, C_POLICY), err)) ||
            !(x->aggregation = dup_or_empty(sqlite3_column_text(st, C_AGG), err)) ||
            !(x->params = dup_or_empty(sqlite3_column_text(st, C_PARAMS), err)))
            return -1;
    } else if (sqlite3_column_int64(st, C_ROW) < s->methods[m].first_row) {
        s->methods[m].first_row = sqlite3_column_int64(st, C_ROW);
    }
    if (find_budget(s, col(st, C_BUDGET)) < 0) {
        ReportBudget *grown = grow(s->budgets, &s->n_budgets, sizeof *grown, err);
        if (!grown) return -1;
        s->budgets = grown;
        int b = s->n_budgets - 1;
        s->budgets[b].keep_fraction = sqlite3_column_double(st, C_KEEP);
        if (!(s->budgets[b].label = dup_or_empty(sqlite3_column_text(st, C_BUDGET), err))) return -1;
    }
    return 0;
}

static int cmp_budget(const void *a, const void *b) {
    const ReportBudget *x = a, *y = b;
    double kx = x->keep_fraction > 0 ? x->keep_fraction : 2, ky = y->keep_fraction > 0 ? y->keep_fraction : 2;
    if (kx != ky) return kx < ky ? -1 : 1;
    return strcmp(x->label, y->label);
}

static int cmp_method(const void *a, const void *b) {
    const ReportMethod *x = a, *y = b;
    return x->first_row < y->first_row ? -1 : x->first_row > y->first_row;
}

/* Labels: the policy name, qualified by aggregation / params only where the section has several. */
static void label_methods(ReportSection *s) {
    for (int m = 0; m < s->n_methods; m++) {
        ReportMethod *x = &s->methods[m];
        int other_agg = 0, other_params = 0;
        for (int o = 0; o < s->n_methods; o++) {
            if (strcmp(s->methods[o].policy, x->policy)) continue;
            other_agg |= strcmp(s->methods[o].aggregation, x->aggregation) != 0;
            other_params |= strcmp(s->methods[o].params, x->params) != 0;
        }
        int k = snprintf(x->label, sizeof x->label, "%s", x->policy);
        if (other_agg) k += snprintf(x->label + k, sizeof x->label - (size_t)k, " (%s)", x->aggregation);
        if (other_params) snprintf(x->label + k, sizeof x->label - (size_t)k, " [%s]", x->params);
    }
}

static int cell_alloc(ReportCell *c, const ReportSection *s, KvErr *err) {
    c->x = kv_malloc(((size_t)s->n_samples + 1) * sizeof *c->x, err);
    c->n_failed = kv_calloc((size_t)s->n_tasks + 1, sizeof *c->n_failed, err);
    c->n_missing = kv_calloc((size_t)s->n_tasks + 1, sizeof *c->n_missing, err);
    c->task = kv_calloc((size_t)s->n_tasks + 1, sizeof *c->task, err);
    c->domain = kv_calloc((size_t)s->n_domains + 1, sizeof *c->domain, err);
    if (!c->x || !c->n_failed || !c->n_missing || !c->task || !c->domain) return -1;
    for (int i = 0; i < s->n_samples; i++) c->x[i] = NAN;
    return 0;
}

static void cell_free(ReportCell *c) {
    free(c->x);
    free(c->n_failed);
    free(c->n_missing);
    free(c->task);
    free(c->domain);
}

static int sample_index(const ReportSection *s, long long id) {
    int lo = 0, hi = s->n_samples - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (s->sample_id[mid] == id) return mid;
        if (s->sample_id[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static int add_failure(ReportSection *s, int m, int b, const char *error, KvErr *err) {
    for (int i = 0; i < s->n_failures; i++) {
        ReportFailure *f = &s->failures[i];
        if (f->method == m && f->budget == b && !strcmp(f->error, error)) {
            f->count++;
            return 0;
        }
    }
    ReportFailure *grown = grow(s->failures, &s->n_failures, sizeof *grown, err);
    if (!grown) return -1;
    s->failures = grown;
    int i = s->n_failures - 1;
    s->failures[i] = (ReportFailure){m, b, dup_or_empty((const unsigned char *)error, err), 1};
    return s->failures[i].error ? 0 : -1;
}

/* Second pass: the per-sample scores; n_missing counts rows here and becomes the samples without one later. */
static int fill_scores(ReportData *d, ReportSection *s, sqlite3_stmt *st, KvErr *err) {
    int i = sample_index(s, sqlite3_column_int64(st, C_SAMPLE)), t = s->sample_task[i];
    int full = policy_role(col(st, C_POLICY)) == POLICY_REFERENCE;
    int m = full ? -1 : find_method(s, st), b = full ? -1 : find_budget(s, col(st, C_BUDGET));
    ReportCell *c = full ? &s->full : report_cell(s, m, b);
    c->ran = 1;
    c->n_missing[t]++;
    s->n_rows++;
    d->n_rows++;
    if (sqlite3_column_type(st, C_ERROR) != SQLITE_NULL) {
        c->n_failed[t]++;
        s->n_failed_rows++;
        d->n_failed_rows++;
        return add_failure(s, m, b, col(st, C_ERROR), err);
    }
    if (sqlite3_column_type(st, C_SCORE) != SQLITE_NULL) c->x[i] = 100.0 * sqlite3_column_double(st, C_SCORE);
    return 0;
}

static int run_pass(ReportData *d, sqlite3 *db, const char *db_path, int pass, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, QUERY, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "%s: reading results: %s", db_path, sqlite3_errmsg(db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int i = section_index(d, st, err);
        if (i < 0 || (pass == 0 ? collect_axes(&d->sections[i], st, err) : fill_scores(d, &d->sections[i], st, err))) {
            sqlite3_finalize(st);
            return -1;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : kv_fail(err, "%s: reading results: %s", db_path, sqlite3_errmsg(db));
}

static int setups_differ(const ReportData *d) {
    for (int i = 1; i < d->n_sections; i++)
        if (strcmp(d->sections[i].setup, d->sections[0].setup)) return 1;
    return 0;
}

/* Group arrays for the bootstrap: per task (only its samples), per domain, and every sample. */
typedef struct {
    int *task, *domain, *all; /* [T][S], [D][S], [S] */
} Groups;

static int groups_make(Groups *g, const ReportSection *s, KvErr *err) {
    size_t S = (size_t)s->n_samples + 1;
    g->task = kv_malloc(S * ((size_t)s->n_tasks + 1) * sizeof *g->task, err);
    g->domain = kv_malloc(S * ((size_t)s->n_domains + 1) * sizeof *g->domain, err);
    g->all = kv_malloc(S * sizeof *g->all, err);
    if (!g->task || !g->domain || !g->all) return -1;
    for (int i = 0; i < s->n_samples; i++) {
        int t = s->sample_task[i];
        g->all[i] = t;
        for (int u = 0; u < s->n_tasks; u++) g->task[(size_t)u * S + i] = u == t ? 0 : -1;
        for (int k = 0; k < s->n_domains; k++) g->domain[(size_t)k * S + i] = s->task_domain[t] == k ? t : -1;
    }
    return 0;
}

static void groups_free(Groups *g) {
    free(g->task);
    free(g->domain);
    free(g->all);
}

static int boot(StatsKind kind, const double *x, const double *y, const int *group, const ReportSection *s,
                int n_groups, StatsInterval *out, KvErr *err) {
    return stats_bootstrap(kind, x, y, group, s->n_samples, n_groups, s->resamples, STATS_SEED, out, err);
}

/* Task and domain intervals of one cell, and (for a method) its paired comparisons with the full cache. */
static int cell_stats(ReportSection *s, ReportCell *c, const Groups *g, int with_full, KvErr *err) {
    size_t S = (size_t)s->n_samples + 1;
    for (int t = 0; t < s->n_tasks; t++) {
        if (c->ran) c->n_missing[t] = s->task_samples[t] - c->n_missing[t];
        if (boot(STATS_MEAN, c->x, NULL, g->task + (size_t)t * S, s, 1, &c->task[t], err)) return -1;
    }
    for (int k = 0; k < s->n_domains; k++)
        if (boot(STATS_MEAN, c->x, NULL, g->domain + (size_t)k * S, s, s->n_tasks, &c->domain[k], err)) return -1;
    if (boot(STATS_MEAN, c->x, NULL, g->all, s, s->n_tasks, &c->domain[s->n_domains], err)) return -1;
    c->diff_best = STATS_NONE;
    if (!with_full) {
        c->ratio = c->diff_full = c->diff_best;
        return 0;
    }
    return boot(STATS_RATIO, c->x, s->full.x, g->all, s, s->n_tasks, &c->ratio, err) ||
           boot(STATS_DIFF, c->x, s->full.x, g->all, s, s->n_tasks, &c->diff_full, err);
}

static int section_stats(ReportSection *s, KvErr *err) {
    Groups g = {0};
    int rc = -1;
    if (groups_make(&g, s, err) || cell_stats(s, &s->full, &g, 0, err)) goto done;
    for (int c = 0; c < s->n_methods * s->n_budgets; c++)
        if (cell_stats(s, &s->cells[c], &g, s->full.ran, err)) goto done;
    /* The best baseline per budget: the highest overall average among the methods the paper does not propose,
     * each at its policy's default aggregation (an ablation variant is no baseline, and is not compared with one).
     * The highest average is only a pick, not a verdict: the comparisons with it carry their own intervals. */
    for (int b = 0; b < s->n_budgets; b++) {
        int best = -1;
        for (int m = 0; m < s->n_methods; m++) {
            const ReportCell *c = report_cell(s, m, b);
            if (report_is_proposed(s->methods[m].policy) || !report_is_published(&s->methods[m]) ||
                !report_has_scores(s, c))
                continue;
            if (best < 0 || c->domain[s->n_domains].value > report_cell(s, best, b)->domain[s->n_domains].value)
                best = m;
        }
        s->best_baseline[b] = best;
        for (int m = 0; best >= 0 && m < s->n_methods; m++) {
            ReportCell *c = report_cell(s, m, b);
            if (m != best && c->ran && report_is_published(&s->methods[m]) &&
                boot(STATS_DIFF, c->x, report_cell(s, best, b)->x, g.all, s, s->n_tasks, &c->diff_best, err))
                goto done;
        }
    }
    s->order = kv_calloc((size_t)s->n_budgets * REPORT_N_ORDER + 1, sizeof *s->order, err);
    if (!s->order) goto done;
    for (int b = 0; b < s->n_budgets; b++)
        if (report_ordering(s, b, s->order + (size_t)b * REPORT_N_ORDER, err)) goto done;
    if (report_ablation_pairs(s, err)) goto done;
    rc = 0;
done:
    groups_free(&g);
    return rc;
}

static int section_setup(ReportSection *s, int with_setup, KvErr *err) {
    /* a section whose rows all lack a budget or a method has no array to sort (NULL) */
    if (s->n_budgets) qsort(s->budgets, (size_t)s->n_budgets, sizeof *s->budgets, cmp_budget);
    if (s->n_methods) qsort(s->methods, (size_t)s->n_methods, sizeof *s->methods, cmp_method);
    label_methods(s);
    size_t cells = (size_t)s->n_methods * s->n_budgets;
    s->cells = kv_calloc(cells + 1, sizeof *s->cells, err);
    s->best_baseline = kv_calloc((size_t)s->n_budgets + 1, sizeof *s->best_baseline, err);
    if (!s->cells || !s->best_baseline || cell_alloc(&s->full, s, err)) return -1;
    for (size_t c = 0; c < cells; c++)
        if (cell_alloc(&s->cells[c], s, err)) return -1;
    char name[sizeof s->stem];
    snprintf(name, sizeof name, "%s_%s%s%s", s->model, s->suite, with_setup ? "_" : "", with_setup ? s->setup : "");
    report_file_stem(s->stem, sizeof s->stem, name); /* the one mapping of every file name */
    return 0;
}

static int count_needle(ReportSection *s, sqlite3 *db, const char *db_path, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM samples WHERE model = ? AND setup = ? AND suite = ? "
                           "AND depth_percent IS NOT NULL",
                           -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "%s: %s", db_path, sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, s->model, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, s->setup, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, s->suite, -1, SQLITE_STATIC);
    s->has_needle = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    return 0;
}

int report_load(ReportData *d, sqlite3 *db, const char *db_path, int min_n, int resamples, KvErr *err) {
    memset(d, 0, sizeof *d);
    d->min_n = min_n > 0 ? min_n : STATS_MIN_N;
    d->resamples = resamples > 0 ? resamples : STATS_RESAMPLES;
    if (run_pass(d, db, db_path, 0, err)) goto fail;
    int with_setup = setups_differ(d);
    for (int i = 0; i < d->n_sections; i++) {
        d->sections[i].min_n = d->min_n;
        d->sections[i].resamples = d->resamples;
        if (section_setup(&d->sections[i], with_setup, err)) goto fail;
    }
    if (run_pass(d, db, db_path, 1, err)) goto fail;
    for (int i = 0; i < d->n_sections; i++)
        if (section_stats(&d->sections[i], err) || count_needle(&d->sections[i], db, db_path, err)) goto fail;
    if (report_crossmodels(d, &d->crossmodels, &d->n_crossmodels, err) ||
        report_sizes(d, &d->sizes, &d->n_sizes, err))
        goto fail;
    return 0;
fail:
    report_data_free(d);
    return -1;
}

void report_data_free(ReportData *d) {
    for (int i = 0; i < d->n_sections; i++) {
        ReportSection *s = &d->sections[i];
        for (int t = 0; t < s->n_tasks; t++) free(s->tasks[t]);
        for (int k = 0; k < s->n_domains; k++) free(s->domains[k]);
        for (int m = 0; m < s->n_methods; m++) {
            free(s->methods[m].policy);
            free(s->methods[m].aggregation);
            free(s->methods[m].params);
        }
        for (int b = 0; b < s->n_budgets; b++) free(s->budgets[b].label);
        if (s->cells)
            for (int c = 0; c < s->n_methods * s->n_budgets; c++) cell_free(&s->cells[c]);
        cell_free(&s->full);
        for (int f = 0; f < s->n_failures; f++) free(s->failures[f].error);
        free(s->failures);
        free(s->cells);
        free(s->best_baseline);
        free(s->order);
        free(s->pairs);
        free(s->tasks);
        free(s->task_domain);
        free(s->task_samples);
        free(s->task_substitute);
        free(s->domains);
        free(s->methods);
        free(s->budgets);
        for (int i = 0; s->sample_key && i < s->n_samples; i++) free(s->sample_key[i]);
        free(s->sample_task);
        free(s->sample_id);
        free(s->sample_key);
        free(s->model);
        free(s->setup);
        free(s->suite);
    }
    free(d->sections);
    report_crossmodels_free(d->crossmodels, d->n_crossmodels);
    report_sizes_free(d->sizes, d->n_sizes);
    memset(d, 0, sizeof *d);
}
