/* traces.c — the fragility part of a report (the paper's retained-importance figure), from the `traces` table
 * written by `kvbench trace`: a table of mean R, worst R and outlier steps per (model, task, policy,
 * aggregation, budget, window) as Markdown and CSV, and gnuplot figures — R_t over the decode steps with one
 * line per aggregation and the outlier steps (mean R_t < 0.5) marked as points, and the histogram of R_t.
 *
 * A figure holds one policy at one budget and window, so the aggregations (the paper's comparison: mean vs
 * max vs max+prior) share its axes. Samples are drawn one after the other along x, in the order they ran. */
#include <stdlib.h>
#include <string.h>

#include "../metrics/fragility.h"
#include "report_internal.h"

#define HIST_BINS 40

/* Per (model, task, policy, aggregation, params, budget, window): the summary the table shows. */
static const char *SUMMARY_QUERY =
    "SELECT s.model, s.task, t.policy, t.aggregation, t.params, t.budget, t.window, COUNT(DISTINCT t.sample_id),"
    "       COUNT(*), AVG(t.mean_r), MIN(t.min_r), SUM(t.mean_r < ?1)"
    " FROM traces t JOIN samples s ON s.id = t.sample_id"
    " GROUP BY s.model, s.task, t.policy, t.aggregation, t.params, t.budget, t.window"
    " ORDER BY s.model, s.task, t.window, t.budget, MIN(t.id)";
enum { Q_MODEL, Q_TASK, Q_POLICY, Q_AGG, Q_PARAMS, Q_BUDGET, Q_WINDOW, Q_SAMPLES, Q_STEPS, Q_MEAN, Q_WORST, Q_OUT };

static const char *col(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

static int db_fail(sqlite3 *db, KvErr *err) { return kv_fail(err, "reading the traces: %s", sqlite3_errmsg(db)); }

int report_has_traces(sqlite3 *db) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM traces LIMIT 1", -1, &st, NULL) != SQLITE_OK) return 0;
    int any = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return any;
}

int report_trace_tables(sqlite3 *db, const char *out_dir, FILE *log, KvErr *err) {
    char md_path[1200], csv_path[1200], last[600] = "";
    sqlite3_stmt *st;
    if (!report_has_traces(db)) return 0;
    if (sqlite3_prepare_v2(db, SUMMARY_QUERY, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err);
    sqlite3_bind_double(st, 1, FRAGILITY_OUTLIER);
    FILE *md = report_open_out(out_dir, "fragility.md", md_path, sizeof md_path, err);
    FILE *csv = md ? report_open_out(out_dir, "fragility.csv", csv_path, sizeof csv_path, err) : NULL;
    if (!csv) {
        if (md) fclose(md);
        sqlite3_finalize(st);
        return -1;
    }
    fprintf(md, "# kvbench fragility report\n\nRetained importance R_t of each keep-set along a full-cache greedy "
                "decode (README \"Fragility\"): mean R is the mean over steps of the per-step mean over (layer, "
                "kv-head); worst R the smallest R_t(l, k) of any step; an outlier step has a mean R_t below %.2f.\n",
            FRAGILITY_OUTLIER);
    fputs("model,task,policy,aggregation,params,budget,window,samples,steps,mean_r,worst_r,outlier_steps\n", csv);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char section[600];
        snprintf(section, sizeof section, "%s — %s", col(st, Q_MODEL), col(st, Q_TASK));
        if (strcmp(section, last)) {
            fprintf(md, "\n## %s\n\n| policy | aggregation | budget | window | samples | steps | mean R | worst R | "
                        "outlier steps |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n", section);
            snprintf(last, sizeof last, "%s", section);
        }
        int steps = sqlite3_column_int(st, Q_STEPS), outliers = sqlite3_column_int(st, Q_OUT);
        double mean = sqlite3_column_double(st, Q_MEAN), worst = sqlite3_column_double(st, Q_WORST);
        fprintf(md, "| %s | %s | %s | %d | %d | %d | %.4f | %.4f | %d (%.1f%%) |\n", col(st, Q_POLICY), col(st, Q_AGG),
                col(st, Q_BUDGET), sqlite3_column_int(st, Q_WINDOW), sqlite3_column_int(st, Q_SAMPLES), steps, mean,
                worst, outliers, steps ? 100.0 * outliers / steps : 0.0);
        for (int i = Q_MODEL; i <= Q_BUDGET; i++) {
            report_put_csv(csv, col(st, i));
            fputc(',', csv);
        }
        fprintf(csv, "%d,%d,%d,%.6f,%.6f,%d\n", sqlite3_column_int(st, Q_WINDOW), sqlite3_column_int(st, Q_SAMPLES),
                steps, mean, worst, outliers);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        fclose(md);
        fclose(csv);
        return db_fail(db, err);
    }
    if (report_close_out(md, md_path, log, err)) {
        fclose(csv);
        return -1;
    }
    return report_close_out(csv, csv_path, log, err);
}

/* ---------------------------------------------------------------- figures */

/* A figure: one (model, task, policy, params, budget, window), its aggregations as series. */
typedef struct {
    char *model, *task, *policy, *params, *budget;
    int window;
    char **aggs;
    int n_aggs;
} TraceFigure;

/* Letters, digits, '.', '-' kept; '%' becomes "pct"; anything else '_' (the stem is a file name). */
static void put_stem_part(char *out, size_t n, const char *s) {
    size_t k = strlen(out);
    for (; *s && k + 4 < n; s++) {
        if (*s == '%') k += (size_t)snprintf(out + k, n - k, "pct");
        else out[k++] = (char)((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                                       *s == '.' || *s == '-' ? *s : '_');
    }
    out[k] = 0;
}

static void figure_stem(const TraceFigure *f, const char *kind, char *out, size_t n) {
    const char *parts[] = {f->model, f->task, f->policy, f->budget};
    snprintf(out, n, "fragility");
    for (int i = 0; i < 4; i++) {
        strncat(out, "_", n - strlen(out) - 1);
        put_stem_part(out, n, parts[i]);
    }
    size_t k = strlen(out);
    snprintf(out + k, n - k, "_w%d_%s", f->window, kind);
}

static char *dup_text(const char *s, KvErr *err) {
    char *d = kv_malloc(strlen(s) + 1, err);
    if (d) strcpy(d, s);
    return d;
}

static void figures_free(TraceFigure *f, int n) {
    for (int i = 0; i < n; i++) {
        free(f[i].model);
        free(f[i].task);
        free(f[i].policy);
        free(f[i].params);
        free(f[i].budget);
        for (int a = 0; a < f[i].n_aggs; a++) free(f[i].aggs[a]);
        free(f[i].aggs);
    }
    free(f);
}

/* The figures to draw, from the summary query's groups (the full cache, R = 1 by definition, has none). */
static int list_figures(sqlite3 *db, TraceFigure **out, int *n_out, KvErr *err) {
    sqlite3_stmt *st;
    TraceFigure *figs = NULL;
    int n = 0, rc;
    *out = NULL;
    *n_out = 0;
    if (sqlite3_prepare_v2(db, SUMMARY_QUERY, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err);
    sqlite3_bind_double(st, 1, FRAGILITY_OUTLIER);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!strcmp(col(st, Q_POLICY), "full")) continue;
        int i;
        for (i = 0; i < n; i++)
            if (!strcmp(figs[i].model, col(st, Q_MODEL)) && !strcmp(figs[i].task, col(st, Q_TASK)) &&
                !strcmp(figs[i].policy, col(st, Q_POLICY)) && !strcmp(figs[i].params, col(st, Q_PARAMS)) &&
                !strcmp(figs[i].budget, col(st, Q_BUDGET)) && figs[i].window == sqlite3_column_int(st, Q_WINDOW))
                break;
        if (i == n) {
            TraceFigure *grown = realloc(figs, (size_t)(n + 1) * sizeof *grown);
            if (!grown) goto oom;
            figs = grown;
            memset(&figs[n], 0, sizeof figs[n]);
            n++;
            figs[i].window = sqlite3_column_int(st, Q_WINDOW);
            if (!(figs[i].model = dup_text(col(st, Q_MODEL), err)) || !(figs[i].task = dup_text(col(st, Q_TASK), err)) ||
                !(figs[i].policy = dup_text(col(st, Q_POLICY), err)) ||
                !(figs[i].params = dup_text(col(st, Q_PARAMS), err)) ||
                !(figs[i].budget = dup_text(col(st, Q_BUDGET), err)))
                goto fail;
        }
        char **aggs = realloc(figs[i].aggs, (size_t)(figs[i].n_aggs + 1) * sizeof *aggs);
        if (!aggs) goto oom;
        figs[i].aggs = aggs;
        if (!(aggs[figs[i].n_aggs] = dup_text(col(st, Q_AGG), err))) goto fail;
        figs[i].n_aggs++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        figures_free(figs, n);
        return db_fail(db, err);
    }
    *out = figs;
    *n_out = n;
    return 0;
oom:
    kv_fail(err, "out of memory listing the trace figures");
fail:
    sqlite3_finalize(st);
    figures_free(figs, n);
    return -1;
}

/* Steps of one series in sample order: mean_r and sample_id per step. */
static int series_query(sqlite3 *db, const TraceFigure *f, const char *agg, sqlite3_stmt **st, KvErr *err) {
    if (sqlite3_prepare_v2(db,
                           "SELECT t.mean_r, t.sample_id FROM traces t JOIN samples s ON s.id = t.sample_id"
                           " WHERE s.model = ? AND s.task = ? AND t.policy = ? AND t.params = ? AND t.budget = ?"
                           " AND t.window = ? AND t.aggregation = ? ORDER BY t.sample_id, t.step",
                           -1, st, NULL) != SQLITE_OK)
        return db_fail(db, err);
    const char *text[] = {f->model, f->task, f->policy, f->params, f->budget};
    for (int i = 0; i < 5; i++) sqlite3_bind_text(*st, i + 1, text[i], -1, SQLITE_STATIC);
    sqlite3_bind_int(*st, 6, f->window);
    sqlite3_bind_text(*st, 7, agg, -1, SQLITE_STATIC);
    return 0;
}

/* R_t over the steps: one data block per aggregation (x = step counted over the samples, mean R_t). */
static int plot_trace(FigureCtx *c, sqlite3 *db, const TraceFigure *f) {
    char name[600], dat_path[1200];
    FILE *dat, *gp;
    figure_stem(f, "trace", name, sizeof name);
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    for (int a = 0; a < f->n_aggs; a++) {
        sqlite3_stmt *st;
        if (series_query(db, f, f->aggs[a], &st, c->err)) {
            fclose(dat);
            fclose(gp);
            return -1;
        }
        fprintf(dat, "# aggregation %s\nstep mean_r\n", f->aggs[a]);
        long long sample = -1;
        for (int x = 0; sqlite3_step(st) == SQLITE_ROW; x++) {
            fprintf(dat, "%d %.6f\n", x, sqlite3_column_double(st, 0));
            /* a grey line where the next sample starts */
            if (a == 0 && x > 0 && sqlite3_column_int64(st, 1) != sample)
                fprintf(gp, "set arrow from %g, graph 0 to %g, graph 1 nohead lc rgb 'gray70'\n", x - 0.5, x - 0.5);
            sample = sqlite3_column_int64(st, 1);
        }
        sqlite3_finalize(st);
        fputs("\n\n", dat);
    }
    fprintf(gp, "set title '%s — %s: retained importance of %s at %s, window %d (points: outlier steps)'\n",
            f->model, f->task, f->policy, f->budget, f->window);
    fprintf(gp, "set xlabel 'decode step (samples one after another, grey lines between them)'\nset ylabel 'mean retained importance R_t'\n"
                "set yrange [0:1.05]\nset grid\nset key outside right top\n"
                "plot %.2f with lines dt 2 lc rgb 'black' title 'outlier threshold'", FRAGILITY_OUTLIER);
    for (int a = 0; a < f->n_aggs; a++) {
        fprintf(gp, ", \\\n  '%s' index %d using 1:2 with lines lw 1.5 lc %d title ", dat_path, a, a + 1);
        report_put_quoted(gp, f->aggs[a]);
        fprintf(gp, ", \\\n  '%s' index %d using 1:($2 < %.2f ? $2 : 1/0) with points pt 7 ps 0.8 lc %d notitle",
                dat_path, a, FRAGILITY_OUTLIER, a + 1);
    }
    fputc('\n', gp);
    return report_figure_close(c, name, dat, gp);
}

/* The histogram of the per-step mean R_t: share of steps per bin of width 1/HIST_BINS, one column per
 * aggregation. */
static int plot_histogram(FigureCtx *c, sqlite3 *db, const TraceFigure *f) {
    char name[600], dat_path[1200];
    FILE *dat, *gp;
    double *share = kv_calloc((size_t)f->n_aggs * HIST_BINS, sizeof *share, c->err);
    if (!share) return -1;
    for (int a = 0; a < f->n_aggs; a++) {
        sqlite3_stmt *st;
        int n = 0;
        if (series_query(db, f, f->aggs[a], &st, c->err)) {
            free(share);
            return -1;
        }
        while (sqlite3_step(st) == SQLITE_ROW) {
            /* clamped before the conversion: a stored value outside [0, 1] (or NaN) must not overflow an int */
            double x = sqlite3_column_double(st, 0) * HIST_BINS;
            share[a * HIST_BINS + (!(x > 0) ? 0 : x >= HIST_BINS - 1 ? HIST_BINS - 1 : (int)x)] += 1;
            n++;
        }
        sqlite3_finalize(st);
        for (int b = 0; b < HIST_BINS && n; b++) share[a * HIST_BINS + b] /= n;
    }
    figure_stem(f, "hist", name, sizeof name);
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) {
        free(share);
        return -1;
    }
    fputs("bin_center", dat);
    for (int a = 0; a < f->n_aggs; a++) {
        fputc(' ', dat);
        report_put_quoted(dat, f->aggs[a]);
    }
    fputc('\n', dat);
    for (int b = 0; b < HIST_BINS; b++) {
        fprintf(dat, "%.4f", (b + 0.5) / HIST_BINS);
        for (int a = 0; a < f->n_aggs; a++) fprintf(dat, " %.6f", share[a * HIST_BINS + b]);
        fputc('\n', dat);
    }
    free(share);
    fprintf(gp, "set title '%s — %s: histogram of R_t, %s at %s, window %d'\n", f->model, f->task, f->policy,
            f->budget, f->window);
    fprintf(gp, "set xlabel 'mean retained importance R_t'\nset ylabel 'share of decode steps'\nset xrange [0:1]\n"
                "set grid\nset key outside right top\nset style fill transparent solid 0.35 border\n"
                "set arrow from %.2f, graph 0 to %.2f, graph 1 nohead dt 2 lc rgb 'black'\n"
                "plot for [i=2:%d] '%s' using 1:i with boxes title columnheader(i)\n",
            FRAGILITY_OUTLIER, FRAGILITY_OUTLIER, f->n_aggs + 1, dat_path);
    return report_figure_close(c, name, dat, gp);
}

int report_trace_figures(FigureCtx *c, sqlite3 *db) {
    TraceFigure *figs;
    int n;
    if (!report_has_traces(db)) return 0;
    if (list_figures(db, &figs, &n, c->err)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = plot_trace(c, db, &figs[i]) || plot_histogram(c, db, &figs[i]) ? -1 : 0;
    figures_free(figs, n);
    return rc;
}
