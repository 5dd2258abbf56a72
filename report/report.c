/* report.c — loads the task averages of a results database into ReportSections and drives the renderers.
 *
 * Everything comes from the task_scores view (runs/store.c), so the report and ad-hoc SQL agree. Tasks are
 * ordered as they were run (first sample id), which follows the config and hence the paper's task order;
 * methods likewise (first result id); budgets by keep fraction. */
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../metrics/fragility.h"
#include "../metrics/metrics.h"
#include "../runs/store.h"
#include "../runs/util.h"
#include "report_internal.h"

static char *dup_or_empty(const unsigned char *s, KvErr *err) {
    const char *t = s ? (const char *)s : "";
    size_t n = strlen(t) + 1;
    char *d = kv_malloc(n, err);
    if (d) memcpy(d, t, n);
    return d;
}

/* Index of name in list[n], appending it when absent (list grows by one); -1 on allocation failure. */
static int intern(char ***list, int *n, const char *name, KvErr *err) {
    for (int i = 0; i < *n; i++)
        if (!strcmp((*list)[i], name)) return i;
    char **grown = realloc(*list, (size_t)(*n + 1) * sizeof *grown);
    if (!grown) return kv_fail(err, "out of memory");
    *list = grown;
    if (!(grown[*n] = dup_or_empty((const unsigned char *)name, err))) return -1;
    return (*n)++;
}

double *report_cell(const ReportSection *s, int method, int budget) {
    return s->score + ((size_t)method * s->n_budgets + budget) * s->n_tasks;
}

double report_mean(const ReportSection *s, const double *task_scores, int domain) {
    double sum = 0;
    int n = 0;
    for (int t = 0; t < s->n_tasks; t++)
        if ((domain < 0 || s->task_domain[t] == domain) && !isnan(task_scores[t])) {
            sum += task_scores[t];
            n++;
        }
    return n ? sum / n : NAN;
}

/* One row of the task_scores query, in column order. */
enum { C_MODEL, C_SETUP, C_SUITE, C_TASK, C_DOMAIN, C_POLICY, C_AGG, C_PARAMS, C_BUDGET, C_KEEP, C_SCORE, C_FAILED };

static const char *QUERY =
    "SELECT t.model, t.setup, t.suite, t.task, t.domain, t.policy, t.aggregation, t.params, t.budget, "
    "       t.keep_fraction, t.score, t.n_failed,"
    "  (SELECT MIN(s.id) FROM samples s WHERE s.model = t.model AND s.setup = t.setup AND s.suite = t.suite"
    "     AND s.task = t.task) AS task_first,"
    "  (SELECT MIN(r.id) FROM results r WHERE r.policy = t.policy AND r.aggregation = t.aggregation"
    "     AND r.params = t.params) AS method_first "
    "FROM task_scores t ORDER BY task_first, method_first";

static int section_index(ReportData *d, sqlite3_stmt *st, KvErr *err) {
    const char *model = (const char *)sqlite3_column_text(st, C_MODEL);
    const char *setup = (const char *)sqlite3_column_text(st, C_SETUP);
    const char *suite = (const char *)sqlite3_column_text(st, C_SUITE);
    for (int i = 0; i < d->n_sections; i++) {
        ReportSection *s = &d->sections[i];
        if (!strcmp(s->model, model) && !strcmp(s->setup, setup) && !strcmp(s->suite, suite)) return i;
    }
    ReportSection *grown = realloc(d->sections, (size_t)(d->n_sections + 1) * sizeof *grown);
    if (!grown) return kv_fail(err, "out of memory");
    d->sections = grown;
    ReportSection *s = &grown[d->n_sections];
    memset(s, 0, sizeof *s);
    d->n_sections++;
    if (!(s->model = dup_or_empty((const unsigned char *)model, err)) ||
        !(s->setup = dup_or_empty((const unsigned char *)setup, err)) ||
        !(s->suite = dup_or_empty((const unsigned char *)suite, err)))
        return -1;
    return d->n_sections - 1;
}

/* First pass: the axes of each section (tasks, domains, methods, budgets). */
static int collect_axes(ReportSection *s, sqlite3_stmt *st, KvErr *err) {
    const char *task = (const char *)sqlite3_column_text(st, C_TASK);
    const char *domain = sqlite3_column_text(st, C_DOMAIN) ? (const char *)sqlite3_column_text(st, C_DOMAIN) : "-";
    const char *policy = (const char *)sqlite3_column_text(st, C_POLICY);
    const char *budget = (const char *)sqlite3_column_text(st, C_BUDGET);
    int before = s->n_tasks;
    int t = intern(&s->tasks, &s->n_tasks, task, err);
    if (t < 0) return -1;
    if (s->n_tasks > before) {
        int dom = intern(&s->domains, &s->n_domains, domain, err);
        int *grown = realloc(s->task_domain, (size_t)s->n_tasks * sizeof *grown);
        if (dom < 0 || !grown) return kv_fail(err, "out of memory");
        s->task_domain = grown;
        grown[t] = dom;
    }
    if (!strcmp(policy, "full")) return 0;
    const char *agg = (const char *)sqlite3_column_text(st, C_AGG);
    const char *params = (const char *)sqlite3_column_text(st, C_PARAMS);
    int m;
    for (m = 0; m < s->n_methods; m++) {
        ReportMethod *x = &s->methods[m];
        if (!strcmp(x->policy, policy) && !strcmp(x->aggregation, agg) && !strcmp(x->params, params)) break;
    }
    if (m == s->n_methods) {
        ReportMethod *grown = realloc(s->methods, (size_t)(m + 1) * sizeof *grown);
        if (!grown) return kv_fail(err, "out of memory");
        s->methods = grown;
        memset(&grown[m], 0, sizeof grown[m]);
        s->n_methods++;
        if (!(grown[m].policy = dup_or_empty((const unsigned char *)policy, err)) ||
            !(grown[m].aggregation = dup_or_empty((const unsigned char *)agg, err)) ||
            !(grown[m].params = dup_or_empty((const unsigned char *)params, err)))
            return -1;
    }
    int b;
    for (b = 0; b < s->n_budgets; b++)
        if (!strcmp(s->budgets[b].label, budget)) break;
    if (b == s->n_budgets) {
        ReportBudget *grown = realloc(s->budgets, (size_t)(b + 1) * sizeof *grown);
        if (!grown) return kv_fail(err, "out of memory");
        s->budgets = grown;
        s->n_budgets++;
        grown[b].keep_fraction = sqlite3_column_double(st, C_KEEP);
        if (!(grown[b].label = dup_or_empty((const unsigned char *)budget, err))) return -1;
    }
    return 0;
}

static int cmp_budget(const void *a, const void *b) {
    const ReportBudget *x = a, *y = b;
    double kx = x->keep_fraction > 0 ? x->keep_fraction : 2, ky = y->keep_fraction > 0 ? y->keep_fraction : 2;
    if (kx != ky) return kx < ky ? -1 : 1;
    return strcmp(x->label, y->label);
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

static int find_method(const ReportSection *s, sqlite3_stmt *st) {
    for (int m = 0; m < s->n_methods; m++) {
        const ReportMethod *x = &s->methods[m];
        if (!strcmp(x->policy, (const char *)sqlite3_column_text(st, C_POLICY)) &&
            !strcmp(x->aggregation, (const char *)sqlite3_column_text(st, C_AGG)) &&
            !strcmp(x->params, (const char *)sqlite3_column_text(st, C_PARAMS)))
            return m;
    }
    return -1;
}

static int find_name(char **list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], name)) return i;
    return -1;
}

/* Second pass: the scores. */
static void fill_scores(ReportSection *s, sqlite3_stmt *st) {
    int t = find_name(s->tasks, s->n_tasks, (const char *)sqlite3_column_text(st, C_TASK));
    /* Task scores rounded to 2 decimals as the references report them; domain averages are means of these. */
    double score =
        sqlite3_column_type(st, C_SCORE) == SQLITE_NULL ? NAN : metric_round2(sqlite3_column_double(st, C_SCORE));
    if (!strcmp((const char *)sqlite3_column_text(st, C_POLICY), "full")) {
        s->full[t] = score;
        return;
    }
    int m = find_method(s, st), b;
    for (b = 0; b < s->n_budgets; b++)
        if (!strcmp(s->budgets[b].label, (const char *)sqlite3_column_text(st, C_BUDGET))) break;
    report_cell(s, m, b)[t] = score;
    s->n_failed[((size_t)m * s->n_budgets + b) * s->n_tasks + t] = sqlite3_column_int(st, C_FAILED);
}

static int run_pass(ReportData *d, sqlite3 *db, const char *db_path, int pass, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, QUERY, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "%s: reading task scores: %s", db_path, sqlite3_errmsg(db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int i = section_index(d, st, err);
        if (i < 0 || (pass == 0 && collect_axes(&d->sections[i], st, err))) {
            sqlite3_finalize(st);
            return -1;
        }
        if (pass == 1) fill_scores(&d->sections[i], st);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : kv_fail(err, "%s: reading task scores: %s", db_path, sqlite3_errmsg(db));
}

static int setups_differ(const ReportData *d) {
    for (int i = 1; i < d->n_sections; i++)
        if (strcmp(d->sections[i].setup, d->sections[0].setup)) return 1;
    return 0;
}

int report_load(ReportData *d, sqlite3 *db, const char *db_path, KvErr *err) {
    memset(d, 0, sizeof *d);
    if (run_pass(d, db, db_path, 0, err)) goto fail;
    int with_setup = setups_differ(d);
    for (int i = 0; i < d->n_sections; i++) {
        ReportSection *s = &d->sections[i];
        size_t cells = (size_t)s->n_methods * s->n_budgets * s->n_tasks;
        qsort(s->budgets, (size_t)s->n_budgets, sizeof *s->budgets, cmp_budget);
        label_methods(s);
        s->full = kv_malloc(((size_t)s->n_tasks + 1) * sizeof *s->full, err);
        s->score = kv_malloc((cells + 1) * sizeof *s->score, err);
        s->n_failed = kv_calloc(cells + 1, sizeof *s->n_failed, err);
        if (!s->full || !s->score || !s->n_failed) goto fail;
        for (int t = 0; t < s->n_tasks; t++) s->full[t] = NAN;
        for (size_t c = 0; c < cells; c++) s->score[c] = NAN;
        int k = snprintf(s->stem, sizeof s->stem, "%s_%s%s%s", s->model, s->suite, with_setup ? "_" : "",
                         with_setup ? s->setup : "");
        for (int c = 0; c < k && c < (int)sizeof s->stem; c++) {
            char ch = s->stem[c];
            int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                     ch == '_' || ch == '.';
            if (!ok) s->stem[c] = '_';
        }
    }
    if (run_pass(d, db, db_path, 1, err)) goto fail;
    sqlite3_stmt *st;
    for (int i = 0; i < d->n_sections; i++) {
        ReportSection *s = &d->sections[i];
        if (sqlite3_prepare_v2(db,
                               "SELECT count(*) FROM samples WHERE model = ? AND setup = ? AND suite = ? "
                               "AND depth_percent IS NOT NULL",
                               -1, &st, NULL) != SQLITE_OK) {
            kv_fail(err, "%s: %s", db_path, sqlite3_errmsg(db));
            goto fail;
        }
        sqlite3_bind_text(st, 1, s->model, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, s->setup, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, s->suite, -1, SQLITE_STATIC);
        s->has_needle = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
        sqlite3_finalize(st);
    }
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
        free(s->tasks);
        free(s->task_domain);
        free(s->domains);
        free(s->methods);
        free(s->budgets);
        free(s->full);
        free(s->score);
        free(s->n_failed);
        free(s->model);
        free(s->setup);
        free(s->suite);
    }
    free(d->sections);
    memset(d, 0, sizeof *d);
}

int report_write(const ReportOptions *opt, KvErr *err) {
    Store *store;
    ReportData data;
    if (store_open(&store, opt->db_path, 1, err)) return -1;
    if (report_load(&data, store_handle(store), opt->db_path, err)) {
        store_close(store);
        return -1;
    }
    sqlite3 *db = store_handle(store);
    data.outlier = opt->outlier > 0.0 ? opt->outlier : FRAGILITY_OUTLIER;
    int rc = 0;
    if (data.n_sections == 0 && !report_has_traces(db))
        rc = kv_fail(err, "%s: no results yet (run `kvbench run CONFIG --db %s` or `kvbench trace CONFIG --db %s` "
                          "first)", opt->db_path, opt->db_path, opt->db_path);
    if (!rc) rc = util_make_dirs(opt->out_dir, err);
    if (!rc && data.n_sections) rc = report_tables(&data, opt->out_dir, opt->log, err);
    if (!rc) rc = report_trace_tables(db, data.outlier, opt->out_dir, opt->log, err);
    if (!rc)
        rc = report_figures(&data, db, opt->out_dir, opt->gnuplot ? opt->gnuplot : "gnuplot",
                            opt->log, err);
    report_data_free(&data);
    store_close(store);
    return rc;
}
