/* crossdomain.c — the cross-domain change at one budget, per model (the style of the paper's Figure 2).
 *
 * The paper aggregates its quality loss over 7 domains (18 datasets) whose exact grouping it does not publish,
 * so this is our grouping, not the paper's definition: LongBench's six task families as LongBench's own
 * dataset table assigns them (single-doc QA, multi-doc QA, summarization, few-shot, synthetic, code; the domain
 * each LongBench sample carries), plus one domain "synthetic retrieval (RULER, needle)" holding every RULER and
 * needle task; a task of any other suite keeps its own domain, prefixed with the suite. Per domain, the change
 * is 100 × (avg(method) / avg(full) − 1) with avg the unweighted mean of the domain's task averages over the
 * tasks both scored; the figure's value is the unweighted mean of the per-domain changes. The budget is the
 * fractional budget nearest 20%. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "writers.h"

#define RETRIEVAL_DOMAIN "synthetic retrieval (RULER, needle)"

static void domain_of(const ReportSection *s, int t, char *out, size_t n) {
    if (!strcmp(s->suite, "longbench")) snprintf(out, n, "%s", s->domains[s->task_domain[t]]);
    else if (!strcmp(s->suite, "ruler") || !strcmp(s->suite, "niah")) snprintf(out, n, "%s", RETRIEVAL_DOMAIN);
    else snprintf(out, n, "%s: %s", s->suite, s->domains[s->task_domain[t]]);
}

/* The sections one model's cross-domain figure covers, from its first section on: every suite of the model once,
 * in the first setup it appears with (datasets may differ in setup, e.g. the needle in the chat template; a
 * suite run again under another setup is not counted twice). */
static int covers(const ReportData *d, int first, int i) {
    const ReportSection *s = &d->sections[i];
    if (strcmp(s->model, d->sections[first].model)) return 0;
    for (int j = first; j < i; j++)
        if (!strcmp(d->sections[j].model, s->model) && !strcmp(d->sections[j].suite, s->suite)) return 0;
    return 1;
}

static int same_method(const ReportMethod *a, const ReportMethod *b) {
    return !strcmp(a->policy, b->policy) && !strcmp(a->aggregation, b->aggregation) && !strcmp(a->params, b->params);
}

static int find_string(char list[][160], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], name)) return i;
    return -1;
}

void report_crossdomain_free(CrossDomain *x) {
    free(x->change);
    free(x->mean);
    free(x->n_used);
    free(x->domains);
    free(x->methods);
    free(x->domain_substitute);
    memset(x, 0, sizeof *x);
}

int report_crossdomain(const ReportData *d, int first_section, double keep, int exact, CrossDomain *x, KvErr *err) {
    memset(x, 0, sizeof *x);
    x->min_n = d->min_n;
    x->resamples = d->resamples;
    const ReportSection *s0 = &d->sections[first_section];
    x->model = s0->model;
    for (int i = first_section; i < d->n_sections; i++) {
        if (!covers(d, first_section, i)) continue;
        size_t k = strlen(x->setup);
        snprintf(x->setup + k, sizeof x->setup - k, "%s%s: %s", k ? "; " : "", d->sections[i].suite,
                 d->sections[i].setup);
    }
    /* the budget nearest `keep` over the model's sections */
    double best = INFINITY;
    for (int i = first_section; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        if (!covers(d, first_section, i) || !report_has_scores(s, &s->full)) continue;
        for (int b = 0; b < s->n_budgets; b++) {
            double k = s->budgets[b].keep_fraction;
            if (k > 0 && (fabs(k - keep) < best - 1e-12)) {
                best = fabs(k - keep);
                snprintf(x->budget, sizeof x->budget, "%s", s->budgets[b].label);
            }
        }
    }
    if (isinf(best) || (exact && best > 1e-9)) {
        x->budget[0] = 0;
        return 0;
    }
    /* the axes: domains and methods (by policy, aggregation, params) */
    int cap = 0;
    for (int i = first_section; i < d->n_sections; i++)
        if (covers(d, first_section, i)) cap += d->sections[i].n_tasks + d->sections[i].n_methods;
    x->domains = kv_calloc((size_t)cap + 1, sizeof *x->domains, err);
    x->domain_substitute = kv_calloc((size_t)cap + 1, sizeof *x->domain_substitute, err);
    x->methods = kv_calloc((size_t)cap + 1, sizeof *x->methods, err);
    if (!x->domains || !x->domain_substitute || !x->methods) return -1;
    char name[160];
    for (int i = first_section; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        if (!covers(d, first_section, i) || !report_has_scores(s, &s->full)) continue;
        for (int t = 0; t < s->n_tasks; t++) {
            domain_of(s, t, name, sizeof name);
            int k = find_string(x->domains, x->n_domains, name);
            if (k < 0) snprintf(x->domains[k = x->n_domains++], sizeof x->domains[0], "%s", name);
            x->domain_substitute[k] |= s->task_substitute[t];
        }
        for (int m = 0; m < s->n_methods; m++) {
            int k;
            for (k = 0; k < x->n_methods && !same_method(&x->methods[k], &s->methods[m]); k++) {}
            if (k == x->n_methods) x->methods[x->n_methods++] = s->methods[m];
        }
    }
    /* the covered sections' samples side by side: task t of the model is group t, in domain task_domain[t] */
    int n_samples = 0, n_tasks = 0;
    for (int i = first_section; i < d->n_sections; i++)
        if (covers(d, first_section, i) && report_has_scores(&d->sections[i], &d->sections[i].full))
            n_samples += d->sections[i].n_samples, n_tasks += d->sections[i].n_tasks;
    size_t MD = (size_t)x->n_methods * x->n_domains;
    double *xs = kv_malloc(((size_t)n_samples + 1) * sizeof *xs, err), *ys = kv_malloc(((size_t)n_samples + 1) * sizeof *ys, err);
    int *group = kv_malloc(((size_t)n_samples + 1) * sizeof *group, err);
    int *task_domain = kv_malloc(((size_t)n_tasks + 1) * sizeof *task_domain, err);
    int *one_domain = kv_malloc(((size_t)n_tasks + 1) * sizeof *one_domain, err);
    x->change = kv_malloc((MD + 1) * sizeof *x->change, err);
    x->mean = kv_malloc(((size_t)x->n_methods + 1) * sizeof *x->mean, err);
    x->n_used = kv_calloc((size_t)x->n_methods + 1, sizeof *x->n_used, err);
    int rc = -1;
    if (!xs || !ys || !group || !task_domain || !one_domain || !x->change || !x->mean || !x->n_used) goto done;
    for (int k = 0; k < x->n_methods; k++) {
        int at = 0, t0 = 0;
        for (int i = first_section; i < d->n_sections; i++) {
            const ReportSection *s = &d->sections[i];
            if (!covers(d, first_section, i) || !report_has_scores(s, &s->full)) continue;
            int b, m;
            for (b = 0; b < s->n_budgets && strcmp(s->budgets[b].label, x->budget); b++) {}
            for (m = 0; m < s->n_methods && !same_method(&x->methods[k], &s->methods[m]); m++) {}
            const ReportCell *c = b < s->n_budgets && m < s->n_methods ? report_cell(s, m, b) : NULL;
            for (int j = 0; j < s->n_samples; j++, at++) {
                xs[at] = c && c->ran ? c->x[j] : NAN;
                ys[at] = s->full.x[j];
                group[at] = t0 + s->sample_task[j];
            }
            for (int t = 0; t < s->n_tasks; t++) {
                domain_of(s, t, name, sizeof name);
                task_domain[t0 + t] = find_string(x->domains, x->n_domains, name);
            }
            t0 += s->n_tasks;
        }
        if (stats_bootstrap_domains(STATS_DOMAIN_CHANGE, xs, ys, group, n_samples, n_tasks, task_domain,
                                    x->n_domains, x->resamples, STATS_SEED, &x->mean[k], err))
            goto done;
        for (int j = 0; j < x->n_domains; j++) {
            for (int t = 0; t < n_tasks; t++) one_domain[t] = task_domain[t] == j ? 0 : -1;
            StatsInterval *ci = &x->change[(size_t)k * x->n_domains + j];
            if (stats_bootstrap_domains(STATS_DOMAIN_CHANGE, xs, ys, group, n_samples, n_tasks, one_domain, 1,
                                        x->resamples, STATS_SEED, ci, err))
                goto done;
            x->n_used[k] += !isnan(ci->value);
        }
    }
    rc = 0;
done:
    free(xs), free(ys), free(group), free(task_domain), free(one_domain);
    return rc;
}

int report_first_of_model(const ReportData *d, int i) {
    for (int j = 0; j < i; j++)
        if (!strcmp(d->sections[j].model, d->sections[i].model)) return 0;
    return 1;
}

/* A horizontal chart's axes, one row per method (row k at y = k, top down), x over [lo, hi] padded, a black line
 * at x = `reference`; then "plot ". */
static void put_method_axes(FILE *gp, const char *xlabel, double lo, double hi, double reference,
                            const ReportMethod *methods, int n_methods, const char *key) {
    double pad = (hi - lo) * 0.08 + 1;
    fputs("set xlabel ", gp);
    report_put_gp_string(gp, xlabel);
    fprintf(gp, "\nset xrange [%g:%g]\nset yrange [%d.6:-0.6]\nset grid x\nset key %s\nset ytics (",
            lo - pad, hi + pad, n_methods - 1, key);
    for (int k = 0; k < n_methods; k++) {
        fputs(k ? ", " : "", gp);
        report_put_gp_tic(gp, methods[k].label);
        fprintf(gp, " %d", k);
    }
    fprintf(gp, ") scale 0\nset arrow from %g, graph 0 to %g, graph 1 nohead lc rgb 'black' lw 1.5\nplot ", reference,
            reference);
}

static int plot_crossdomain(FigureCtx *c, const CrossDomain *x) {
    char name[300], dat_path[1200];
    FILE *dat, *gp;
    int any = 0;
    for (int k = 0; k < x->n_methods; k++) any |= !isnan(x->mean[k].value);
    if (!any) return 0;
    snprintf(name, sizeof name, "%s_fig2_crossdomain_%s", x->model, x->budget);
    /* room for the title (4 lines), a row per method and the key above the plot (a line per domain; below, it
     * overlapped the axis label) */
    if (report_figure_open_sized(c, name, 1000, 230 + 42 * x->n_methods + 20 * x->n_domains, &dat, &gp, dat_path,
                                 sizeof dat_path))
        return -1;
    /* blocks 0..M-1: "row mean lo hi n_domains" per method; blocks M..M+D-1: "row change" per method, one per
     * domain */
    fputs("# blocks 0..M-1: row mean_change_pct lo hi (95% paired bootstrap, one per method) domains_behind_the_mean; "
          "blocks M..M+D-1: row change_pct, one block per domain\n", dat);
    double lo = 0, hi = 0;
    for (int k = 0; k < x->n_methods; k++) {
        report_put_dat_comment(dat, x->methods[k].label);
        fprintf(dat, "%d", k);
        report_put_ci(dat, &x->mean[k], x->min_n);
        fprintf(dat, " %d\n\n\n", x->n_used[k]);
        if (!isnan(x->mean[k].lo) && !stats_too_few(&x->mean[k], x->min_n))
            lo = fmin(lo, x->mean[k].lo), hi = fmax(hi, x->mean[k].hi);
    }
    for (int j = 0; j < x->n_domains; j++) {
        report_put_dat_comment(dat, x->domains[j]);
        fputs("NaN NaN\n", dat); /* a block with no value still counts as one, so indices stay aligned */
        for (int k = 0; k < x->n_methods; k++) {
            double v = x->change[(size_t)k * x->n_domains + j].value;
            if (isnan(v)) continue;
            /* each domain's dot a little above or below the row, so the dots of one row do not hide each other */
            fprintf(dat, "%.4f", k + 0.5 * ((j + 1.0) / (x->n_domains + 1.0) - 0.5));
            report_put_value(dat, v);
            fputc('\n', dat);
            lo = fmin(lo, v), hi = fmax(hi, v);
        }
        fputs("\n\n", dat);
    }
    int sub = 0;
    for (int j = 0; j < x->n_domains; j++) sub |= x->domain_substitute[j];
    /* the title in lines short enough for the canvas; a method that ran in fewer domains says so at its bar */
    char title[1200];
    snprintf(title, sizeof title, "%s: change vs the full cache at %s, per method the mean over the domains it ran in\n"
             "(bar: that mean with its 95%% paired bootstrap interval, none with fewer than %d samples in a domain;\n"
             "marker: each domain). Domains: LongBench's task families + synthetic retrieval (RULER, needle)%s;\n"
             "our grouping, not the paper's 7 domains", x->model, x->budget, x->min_n,
             sub ? ", with a substituted task" : "");
    fputs("set title ", gp);
    report_put_gp_string(gp, title);
    fputc('\n', gp);
    fputs("set rmargin 24\n", gp); /* room for the labels right of the bars, "+16.7 (2 of 3 domains)" */
    put_method_axes(gp, "change = 100 × (avg / avg(full) − 1), %", lo, hi, 0, x->methods, x->n_methods,
                    "above");
    for (int k = 0; k < x->n_methods; k++) {
        const ReportMethod *m = &x->methods[k];
        fputs(k ? ", \\\n  " : "", gp);
        report_put_gp_string(gp, dat_path);
        fprintf(gp, " index %d using ($2 / 2):1:(abs($2) / 2):(0.35) with boxxyerror lc rgb '%s' ", k,
                report_policy_colour(m->policy));
        report_put_fill(gp, m->aggregation);
        fputs(" notitle", gp);
        fprintf(gp, ", \\\n  '' index %d using 3:1:($4 - $3):(0) with vectors nohead lc rgb 'black' lw 1 notitle", k);
        /* valid(4): without an interval the label is still drawn (a NaN column would drop the point) */
        fprintf(gp, ", \\\n  '' index %d using ((valid(4) ? $4 : $2) > 0 ? (valid(4) ? $4 : $2) : 0):1:(sprintf('%%+.1f%%s', "
                    "$2, $5 < %d ? sprintf(' (%%d of %d domains)', $5) : '')) with labels left offset char 0.6,0 "
                    "font ',9' notitle", k, x->n_domains, x->n_domains);
        fprintf(gp, ", \\\n  '' index %d using ($2 == 0 ? 0 : NaN):1 with points pt 2 ps 1.5 lw 2 lc rgb '%s' notitle", k,
                report_policy_colour(m->policy));
    }
    /* the domains told apart by point type and colour (from a palette apart from the policies'), each named in
     * the key */
    static const char *DOMAIN_COLOURS[] = {"#000000", "#e7298a", "#1b9e77", "#7570b3", "#e6ab02", "#666666",
                                           "#a6cee3", "#fb9a99"};
    static const int DOMAIN_POINTS[] = {5, 7, 9, 11, 13, 15, 4, 6, 8, 10, 12, 14};
    for (int j = 0; j < x->n_domains; j++) {
        fprintf(gp, ", \\\n  '' index %d using 2:1 with points pt %d ps 0.9 lc rgb '%s' title ", x->n_methods + j,
                DOMAIN_POINTS[j % 12], DOMAIN_COLOURS[j % 8]);
        char t[200];
        snprintf(t, sizeof t, "%s%s", x->domains[j], x->domain_substitute[j] ? " (substituted task)" : "");
        report_put_gp_string(gp, t);
    }
    fputc('\n', gp);
    return report_figure_close(c, dat, gp);
}

int report_crossdomain_figures(FigureCtx *c, const ReportData *d) {
    for (int i = 0; i < d->n_sections; i++) {
        if (!report_first_of_model(d, i)) continue;
        CrossDomain x;
        if (report_crossdomain(d, i, REPORT_FIG2_KEEP, 0, &x, c->err)) {
            report_crossdomain_free(&x);
            return -1;
        }
        int rc = x.n_methods ? plot_crossdomain(c, &x) : 0;
        report_crossdomain_free(&x);
        if (rc) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- several models side by side */

void report_crossmodels_free(CrossModel *x, int n) {
    for (int i = 0; x && i < n; i++) {
        free(x[i].models);
        free(x[i].n_domains);
        free(x[i].methods);
        free(x[i].pct);
    }
    free(x);
}

static int cmp_double(const void *a, const void *b) {
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

/* One budget: every model's cross-domain mean change at exactly that keep fraction, shifted by 100. */
static int crossmodel_at(const ReportData *d, const int *first, int n_models, int cap, CrossModel *x, KvErr *err) {
    x->models = kv_calloc((size_t)n_models, sizeof *x->models, err);
    x->n_domains = kv_calloc((size_t)n_models, sizeof *x->n_domains, err);
    x->methods = kv_calloc((size_t)cap + 1, sizeof *x->methods, err);
    x->pct = kv_malloc(((size_t)cap * n_models + 1) * sizeof *x->pct, err);
    if (!x->models || !x->n_domains || !x->methods || !x->pct) return -1;
    for (size_t j = 0; j < (size_t)cap * n_models; j++) x->pct[j] = STATS_NONE;
    x->n_models = n_models;
    x->min_n = d->min_n;
    for (int i = 0; i < n_models; i++) {
        CrossDomain cd;
        x->models[i] = d->sections[first[i]].model;
        if (report_crossdomain(d, first[i], x->keep_fraction, 1, &cd, err)) {
            report_crossdomain_free(&cd);
            return -1;
        }
        x->n_domains[i] = cd.n_domains;
        if (cd.budget[0] && !x->budget[0]) snprintf(x->budget, sizeof x->budget, "%s", cd.budget);
        for (int m = 0; m < cd.n_methods; m++) {
            int k;
            for (k = 0; k < x->n_methods && !same_method(&x->methods[k], &cd.methods[m]); k++) {}
            if (k == x->n_methods) x->methods[x->n_methods++] = cd.methods[m]; /* cap counts every section's */
            StatsInterval ci = cd.mean[m];
            ci.value += 100, ci.lo += 100, ci.hi += 100;
            x->pct[(size_t)k * n_models + i] = ci;
        }
        report_crossdomain_free(&cd);
    }
    return 0;
}

int report_crossmodels(const ReportData *d, CrossModel **out, int *n, KvErr *err) {
    *out = NULL;
    *n = 0;
    int n_models = 0, cap = 0, n_keeps = 0, n_budgets = 0;
    for (int i = 0; i < d->n_sections; i++) n_budgets += d->sections[i].n_budgets;
    int *first = kv_calloc((size_t)d->n_sections + 1, sizeof *first, err);
    double *keeps = kv_calloc((size_t)n_budgets + 1, sizeof *keeps, err);
    if (!first || !keeps) goto fail;
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        if (report_first_of_model(d, i)) first[n_models++] = i;
        cap += s->n_methods;
        if (!report_has_scores(s, &s->full)) continue;
        for (int b = 0; b < s->n_budgets; b++) {
            double k = s->budgets[b].keep_fraction;
            int seen = 0;
            for (int j = 0; j < n_keeps; j++) seen |= fabs(keeps[j] - k) <= 1e-9;
            if (k > 0 && !seen) keeps[n_keeps++] = k;
        }
    }
    if (n_models < 2 || n_keeps == 0) {
        free(first);
        free(keeps);
        return 0;
    }
    qsort(keeps, (size_t)n_keeps, sizeof *keeps, cmp_double);
    if (!(*out = kv_calloc((size_t)n_keeps, sizeof **out, err))) goto fail;
    for (int j = 0; j < n_keeps; j++) {
        (*out)[j].keep_fraction = keeps[j];
        *n = j + 1;
        if (crossmodel_at(d, first, n_models, cap, &(*out)[j], err)) goto fail;
    }
    free(first);
    free(keeps);
    return 0;
fail:
    report_crossmodels_free(*out, *n);
    *out = NULL;
    *n = 0;
    free(first);
    free(keeps);
    return -1;
}

static int plot_crossmodel(FigureCtx *c, const CrossModel *x) {
    static const char *MODEL_COLOURS[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
    char name[300], dat_path[1200], title[600];
    FILE *dat, *gp;
    double lo = 0, hi = 100;
    int any = 0;
    for (size_t j = 0; j < (size_t)x->n_methods * x->n_models; j++) any |= !isnan(x->pct[j].value);
    if (!any) return 0;
    snprintf(name, sizeof name, "crossmodel_%s", x->budget);
    if (report_figure_open_sized(c, name, 1000, 220 + 26 * x->n_methods * x->n_models, &dat, &gp, dat_path,
                                 sizeof dat_path))
        return -1;
    double h = 0.8 / x->n_models; /* each model's bar within its method's row */
    fputs("# one block per model: row pct_of_own_full_cache lo hi (95% paired bootstrap; NaN bounds from fewer than "
          "min_n samples)\n", dat);
    for (int i = 0; i < x->n_models; i++) {
        report_put_dat_comment(dat, x->models[i]);
        for (int k = 0; k < x->n_methods; k++) {
            const StatsInterval *ci = &x->pct[(size_t)k * x->n_models + i];
            if (isnan(ci->value)) continue;
            fprintf(dat, "%.4f", k + (i - (x->n_models - 1) / 2.0) * h);
            report_put_ci(dat, ci, x->min_n);
            fputc('\n', dat);
            lo = fmin(lo, ci->value), hi = fmax(hi, ci->value);
            if (!isnan(ci->lo) && !stats_too_few(ci, x->min_n)) lo = fmin(lo, ci->lo), hi = fmax(hi, ci->hi);
        }
        fputs("\n\n", dat);
    }
    snprintf(title, sizeof title, "Each model's score as %% of its own full cache at %s (mean over its domains)\n"
             "95%% paired bootstrap intervals, none from fewer than %d samples; models are never averaged together",
             x->budget, x->min_n);
    fputs("set title ", gp);
    report_put_gp_string(gp, title);
    fputc('\n', gp);
    put_method_axes(gp, "% of the model's own full cache", lo, hi, 100, x->methods, x->n_methods,
                    "outside right top");
    for (int i = 0; i < x->n_models; i++) {
        fputs(i ? ", \\\n  " : "", gp);
        report_put_gp_string(gp, dat_path);
        fprintf(gp, " index %d using ($2 / 2):1:($2 / 2):(%g) with boxxyerror fs solid 0.7 lc rgb '%s' title ", i,
                h / 2 * 0.9, MODEL_COLOURS[i % 6]);
        report_put_gp_string(gp, x->models[i]);
        fprintf(gp, ", \\\n  '' index %d using 3:1:($4 - $3):(0) with vectors nohead lc rgb 'black' lw 1 notitle", i);
    }
    fputc('\n', gp);
    return report_figure_close(c, dat, gp);
}

int report_crossmodel_figures(FigureCtx *c, const ReportData *d) {
    for (int j = 0; j < d->n_crossmodels; j++)
        if (plot_crossmodel(c, &d->crossmodels[j])) return -1;
    return 0;
}
