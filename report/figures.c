/* figures.c — gnuplot figures of a report: for each figure a data file (.dat) and a script (.gp) that renders
 * it as PNG and SVG, then gnuplot is run on the script in the output folder. The scripts name their files
 * relative to that folder and stay next to the images, so a figure can be restyled by editing and re-running
 * `gnuplot NAME.gp` there.
 *
 * Every method keeps one look in every figure: its colour from the policy name (report_policy_colour), its dash
 * type, point type and bar pattern from the aggregation. Figures per section: the average score against the
 * budget and the score as % of the full cache against the budget (the paper's Figure 4), both with 95% error
 * bars; per-task bars per budget with error bars (a score of exactly 0 marked ×); needle heatmaps as one panel
 * of small multiples per budget, the score written in each cell; aggregation-ablation bars where a policy ran
 * with several aggregations. Per model: the cross-domain change at the budget nearest 20% (the paper's Figure 2
 * style, crossdomain.c). The fragility figures of traces.c go through the same plumbing, the kit in plot.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../policies/policy.h"
#include "writers.h"

/* ---------------------------------------------------------------- the figures */

/* Said in every title with error bars (%d: min_n). */
#define NO_BAR "none from fewer than %d samples: too few samples)"

/* Lines against the budget, one per method at its policy's default aggregation (the ablation variants have their
 * own figure, plot_aggregation), with 95% error bars: the average score (ratio = 0) or the score as a percentage
 * of the full cache (ratio = 1, the paper's Figure 4). */
static int plot_budget_lines(FigureCtx *c, const ReportSection *s, int ratio) {
    char name[300], dat_path[1200];
    FILE *dat, *gp;
    double lo = INFINITY, hi = -INFINITY;
    for (int b = 0; b < s->n_budgets; b++)
        if (s->budgets[b].keep_fraction > 0) {
            lo = fmin(lo, 100 * s->budgets[b].keep_fraction);
            hi = fmax(hi, 100 * s->budgets[b].keep_fraction);
        }
    int any = 0;
    for (int m = 0; m < s->n_methods; m++)
        for (int b = 0; b < s->n_budgets && report_is_published(&s->methods[m]); b++)
            any |= report_has_scores(s, report_cell(s, m, b));
    if (isinf(lo) || !any || (ratio && !report_has_scores(s, &s->full))) return 0;
    double span = hi > lo ? hi - lo : 20, pad = span * 0.08;
    snprintf(name, sizeof name, "%s_%s", s->stem, ratio ? "fig4_ratio" : "budget");
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    fputs("# one block per method: budget_percent value lo hi (95% bootstrap interval)\n", dat);
    int n_shown = 0;
    for (int m = 0; m < s->n_methods; m++) n_shown += report_is_published(&s->methods[m]);
    for (int m = 0, k = 0; m < s->n_methods; m++) {
        if (!report_is_published(&s->methods[m])) continue;
        report_put_dat_comment(dat, s->methods[m].label);
        /* a small sideways offset per method keeps overlapping error bars apart */
        double dx = span * 0.006 * (k++ - (n_shown - 1) / 2.0);
        for (int b = 0; b < s->n_budgets; b++) {
            const ReportCell *x = report_cell(s, m, b);
            if (s->budgets[b].keep_fraction <= 0 || !report_has_scores(s, x)) continue;
            fprintf(dat, "%.4f", 100.0 * s->budgets[b].keep_fraction + dx);
            report_put_ci(dat, ratio ? &x->ratio : &x->domain[s->n_domains], c->min_n);
            fputc('\n', dat);
        }
        fputs("\n\n", dat);
    }
    const char *dagger = report_has_substitute(s, -1) ? " († includes a substituted task)" : "";
    char title[800];
    snprintf(title, sizeof title, "%s — %s: %s against the KV budget\neach policy at its default aggregation "
             "(its other aggregations: the ablation figure)\n95%% %sbootstrap intervals (" NO_BAR "%s", s->model, s->suite,
             ratio ? "score as % of the full cache" : "average score", ratio ? "paired " : "", c->min_n, dagger);
    fputs("set title ", gp);
    report_put_gp_string(gp, title);
    fprintf(gp, "\nset ylabel '%s'\n", ratio ? "average score / full-cache average (%)" : "average score");
    /* the y axis up to the highest interval bound (gnuplot's autoscale leaves error bars out) */
    double ymax = ratio ? 100 : s->full.domain[s->n_domains].value;
    for (int m = 0; m < s->n_methods; m++)
        for (int b = 0; b < s->n_budgets && report_is_published(&s->methods[m]); b++) {
            const ReportCell *x = report_cell(s, m, b);
            if (s->budgets[b].keep_fraction <= 0 || !report_has_scores(s, x)) continue;
            const StatsInterval *ci = ratio ? &x->ratio : &x->domain[s->n_domains];
            if (!isnan(ci->hi)) ymax = isnan(ymax) ? ci->hi : fmax(ymax, ci->hi);
            if (!isnan(ci->value)) ymax = isnan(ymax) ? ci->value : fmax(ymax, ci->value);
        }
    fprintf(gp, "set xlabel 'KV cache budget (%% of the context)'\nset grid\nset key outside right top\n"
                "set xrange [%g:%g]\nset yrange [0:%g]\nset xtics (", lo - pad, hi + pad,
            isnan(ymax) || ymax <= 0 ? 100 : ceil(ymax * 1.05));
    int first = 1;
    for (int b = 0; b < s->n_budgets; b++)
        if (s->budgets[b].keep_fraction > 0) {
            fputs(first ? "" : ", ", gp);
            report_put_gp_tic(gp, s->budgets[b].label);
            fprintf(gp, " %.4f", 100 * s->budgets[b].keep_fraction);
            first = 0;
        }
    fputs(")\nplot ", gp);
    double full = s->full.domain[s->n_domains].value;
    if (ratio) fputs("100 with lines dt 2 lw 2 lc rgb 'black' title 'full cache (100%)'", gp);
    else if (!isnan(full)) fprintf(gp, "%.4f with lines dt 2 lw 2 lc rgb 'black' title 'full cache'", full);
    else fputs("NaN notitle", gp);
    for (int m = 0, k = 0; m < s->n_methods; m++) {
        const ReportMethod *x = &s->methods[m];
        const char *colour = report_policy_colour(x->policy);
        if (!report_is_published(x)) continue;
        /* thin interval lines under the method's line */
        fputs(", \\\n  ", gp);
        report_put_gp_string(gp, dat_path);
        fprintf(gp, " index %d using 1:3:(0):($4 - $3) with vectors nohead lw 1 lc rgb '%s' notitle", k, colour);
        fprintf(gp, ", \\\n  '' index %d using 1:2 with linespoints lw 2 ps 1.2 lc rgb '%s' dt %d pt %d title ", k++,
                colour, report_agg_dash(x->aggregation), report_agg_point(x->aggregation));
        report_put_gp_string(gp, x->label);
    }
    fputc('\n', gp);
    return report_figure_close(c, dat, gp);
}

typedef struct {
    const char *label, *policy, *aggregation;
    const StatsInterval *values; /* one per group, `stride` apart */
    size_t stride;
} BarSeries;

/* Clustered bars with 95% error bars: one cluster per group, one bar per series in the series' colour and
 * pattern; a value of exactly 0 gets a × so it does not read as missing. A reference value (not NaN) is drawn
 * as a dashed black line across the plot, titled ref_title. */
static int plot_bars(FigureCtx *c, const char *name, const char *title, int n_groups, char *const *groups,
                     const BarSeries *series, int n_series, double reference, const char *ref_title) {
    char dat_path[1200];
    FILE *dat, *gp;
    int width = 1000 + (n_groups * n_series > 60 ? 8 * (n_groups * n_series - 60) : 0);
    if (report_figure_open_sized(c, name, width > 2400 ? 2400 : width, 620, &dat, &gp, dat_path, sizeof dat_path))
        return -1;
    double w = 0.8 / n_series;
    fputs("# one block per series: x value lo hi (95% bootstrap interval)\n", dat);
    for (int j = 0; j < n_series; j++) {
        report_put_dat_comment(dat, series[j].label);
        for (int g = 0; g < n_groups; g++) {
            fprintf(dat, "%.4f", g + (j - (n_series - 1) / 2.0) * w);
            report_put_ci(dat, &series[j].values[(size_t)g * series[j].stride], c->min_n);
            fputc('\n', dat);
        }
        fputs("\n\n", dat);
    }
    fputs("set title ", gp);
    report_put_gp_string(gp, title);
    fprintf(gp, "\nset ylabel 'score'\nset yrange [0:*]\nset offsets 0, 0, graph 0.06, 0\nset xrange [-0.6:%d.6]\nset grid y\nset key outside right top\n"
                "set boxwidth %.4f absolute\nset xtics rotate by -35 scale 0 (", n_groups - 1, w * 0.95);
    for (int g = 0; g < n_groups; g++) {
        fputs(g ? ", " : "", gp);
        report_put_gp_tic(gp, groups[g]);
        fprintf(gp, " %d", g);
    }
    fputs(")\nplot ", gp);
    if (!isnan(reference)) {
        fprintf(gp, "%.4f with lines dt 2 lw 2 lc rgb 'black' title ", reference);
        report_put_gp_string(gp, ref_title);
        fputs(", \\\n  ", gp);
    }
    for (int j = 0; j < n_series; j++) {
        const char *colour = report_policy_colour(series[j].policy);
        fputs(j ? ", \\\n  " : "", gp);
        report_put_gp_string(gp, dat_path);
        fprintf(gp, " index %d using 1:2 with boxes lc rgb '%s' ", j, colour);
        report_put_fill(gp, series[j].aggregation);
        fputs(" title ", gp);
        report_put_gp_string(gp, series[j].label);
        /* the interval as a thin black line (inside a black bar only its part above the bar shows) */
        fprintf(gp, ", \\\n  '' index %d using 1:3:(0):($4 - $3) with vectors nohead lc rgb 'black' lw 1 notitle"
                    ", \\\n  '' index %d using 1:($2 == 0 ? 0 : NaN) with points pt 2 ps 1.5 lw 2 lc rgb '%s' notitle",
                j, j, colour);
    }
    fputs(", \\\n  NaN with points pt 2 ps 1.5 lw 2 lc rgb 'black' title '× = score 0'\n", gp);
    return report_figure_close(c, dat, gp);
}

static int plot_task_bars(FigureCtx *c, const ReportSection *s, int b) {
    char name[300], title[600], *groups[514];
    BarSeries series[256];
    int n = 0, nt = s->n_tasks < 512 ? s->n_tasks : 512;
    if (report_has_scores(s, &s->full))
        series[n++] = (BarSeries){"full", "full", "", s->full.task, 1};
    for (int m = 0; m < s->n_methods && n < 256; m++) {
        const ReportCell *x = report_cell(s, m, b);
        if (report_has_scores(s, x))
            series[n++] = (BarSeries){s->methods[m].label, s->methods[m].policy, s->methods[m].aggregation, x->task, 1};
    }
    if (!n) return 0;
    char names[512][160];
    for (int t = 0; t < nt; t++) {
        snprintf(names[t], sizeof names[t], "%s%s", s->tasks[t], s->task_substitute[t] ? "†" : "");
        groups[t] = names[t];
    }
    snprintf(name, sizeof name, "%s_tasks_%s", s->stem, s->budgets[b].label);
    snprintf(title, sizeof title, "%s — %s: task scores at budget %s\n(95%% bootstrap intervals; " NO_BAR "%s", s->model,
             s->suite, s->budgets[b].label, c->min_n, report_has_substitute(s, -1) ? "\n† substituted task" : "");
    return plot_bars(c, name, title, nt, groups, series, n, NAN, NULL);
}

/* The ablation figure: bars of the average score of every policy that ran with several aggregations (and of any
 * method away from its default aggregation, which Figure 4 leaves out), clustered by budget, the full cache's
 * average as a reference line. */
static int plot_aggregation(FigureCtx *c, const ReportSection *s) {
    BarSeries series[256];
    char *groups[256], name[300], title[600];
    int n = 0;
    for (int m = 0; m < s->n_methods && n < 256; m++) {
        int several = !report_is_published(&s->methods[m]);
        for (int o = 0; o < s->n_methods; o++)
            several |= !strcmp(s->methods[o].policy, s->methods[m].policy) &&
                       strcmp(s->methods[o].aggregation, s->methods[m].aggregation);
        if (several)
            series[n++] = (BarSeries){s->methods[m].label, s->methods[m].policy, s->methods[m].aggregation,
                                      &report_cell(s, m, 0)->domain[s->n_domains], 0};
    }
    if (!n || s->n_budgets == 0) return 0;
    /* the average of cell (m, b) is cells[m * B + b].domain[D]: index by budget through a per-series array */
    StatsInterval *vals = kv_malloc((size_t)n * s->n_budgets * sizeof *vals, c->err);
    if (!vals) return -1;
    /* the budgets where one of them ran */
    int used[256], n_used = 0;
    for (int b = 0; b < s->n_budgets && n_used < 256; b++) {
        int ran = 0;
        for (int m = 0; m < s->n_methods; m++)
            for (int j = 0; j < n; j++) ran |= series[j].label == s->methods[m].label && report_cell(s, m, b)->ran;
        if (ran) groups[n_used] = s->budgets[b].label, used[n_used++] = b;
    }
    for (int j = 0, m = 0; m < s->n_methods; m++) {
        if (j >= n || series[j].label != s->methods[m].label) continue;
        for (int u = 0; u < n_used; u++) {
            const ReportCell *x = report_cell(s, m, used[u]);
            vals[(size_t)j * s->n_budgets + u] = x->ran ? x->domain[s->n_domains] : STATS_NONE;
        }
        series[j].values = vals + (size_t)j * s->n_budgets;
        series[j].stride = 1;
        j++;
    }
    snprintf(name, sizeof name, "%s_aggregation", s->stem);
    snprintf(title, sizeof title, "%s — %s: aggregation ablation, average score per budget\n(95%% bootstrap "
             "intervals; " NO_BAR "\ncolour = policy, fill = aggregation; dashed: the full cache", s->model, s->suite,
             c->min_n);
    double full = report_has_scores(s, &s->full) ? s->full.domain[s->n_domains].value : NAN;
    char ref[64];
    snprintf(ref, sizeof ref, "full cache (%.2f)", full);
    int rc = plot_bars(c, name, title, n_used, groups, series, n, full, ref);
    free(vals);
    return rc;
}

/* ---------------------------------------------------------------- needle heatmaps */

enum { NEEDLE_AXIS = 64 }; /* lengths or depths beyond this are left out of a heatmap */

typedef struct {
    int lengths[NEEDLE_AXIS], n_len;
    double depths[NEEDLE_AXIS];
    int n_dep;
} NeedleAxes;

static int needle_axes(sqlite3 *db, const ReportSection *s, NeedleAxes *a, KvErr *err) {
    sqlite3_stmt *st;
    a->n_len = a->n_dep = 0;
    if (sqlite3_prepare_v2(db, "SELECT DISTINCT target_tokens, depth_percent FROM samples WHERE model = ? AND "
                               "setup = ? AND suite = ? AND depth_percent IS NOT NULL ORDER BY 1, 2", -1, &st,
                           NULL) != SQLITE_OK)
        return kv_fail(err, "reading needle samples: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, s->model, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, s->setup, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, s->suite, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int len = sqlite3_column_int(st, 0), i;
        double dep = sqlite3_column_double(st, 1);
        for (i = 0; i < a->n_len && a->lengths[i] != len; i++) {}
        if (i == a->n_len && a->n_len < NEEDLE_AXIS) a->lengths[a->n_len++] = len;
        for (i = 0; i < a->n_dep && a->depths[i] != dep; i++) {}
        if (i == a->n_dep && a->n_dep < NEEDLE_AXIS) a->depths[a->n_dep++] = dep;
    }
    sqlite3_finalize(st);
    for (int i = 1; i < a->n_dep; i++) /* depths sorted (lengths come sorted) */
        for (int j = i; j > 0 && a->depths[j - 1] > a->depths[j]; j--) {
            double t = a->depths[j];
            a->depths[j] = a->depths[j - 1];
            a->depths[j - 1] = t;
        }
    return 0;
}

/* One data block: length_index depth_index score for the cells of a method (policy "full": the full cache). */
static int needle_block(FILE *dat, sqlite3 *db, const ReportSection *s, const NeedleAxes *a, const char *policy,
                        const char *agg, const char *params, const char *budget, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT s.target_tokens, s.depth_percent, 100.0 * AVG(r.score) FROM results r JOIN samples s "
                           "ON s.id = r.sample_id WHERE s.model = ? AND s.setup = ? AND s.suite = ? AND r.policy = ? "
                           "AND (? IS NULL OR (r.aggregation = ? AND r.params = ? AND r.budget = ?)) "
                           "AND s.depth_percent IS NOT NULL AND r.error IS NULL GROUP BY 1, 2",
                           -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "reading needle scores: %s", sqlite3_errmsg(db));
    const char *binds[] = {s->model, s->setup, s->suite, policy, agg, agg, params, budget};
    for (int i = 0; i < 8; i++) sqlite3_bind_text(st, i + 1, binds[i], -1, SQLITE_STATIC);
    if (!agg) sqlite3_bind_null(st, 5);
    double cells[NEEDLE_AXIS][NEEDLE_AXIS];
    for (int i = 0; i < NEEDLE_AXIS; i++)
        for (int j = 0; j < NEEDLE_AXIS; j++) cells[i][j] = NAN;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int len = sqlite3_column_int(st, 0), li, di;
        double dep = sqlite3_column_double(st, 1);
        for (li = 0; li < a->n_len && a->lengths[li] != len; li++) {}
        for (di = 0; di < a->n_dep && a->depths[di] != dep; di++) {}
        if (li < a->n_len && di < a->n_dep && sqlite3_column_type(st, 2) != SQLITE_NULL)
            cells[li][di] = sqlite3_column_double(st, 2);
    }
    sqlite3_finalize(st);
    for (int l = 0; l < a->n_len; l++)
        for (int d = 0; d < a->n_dep; d++) {
            fprintf(dat, "%d %d", l, d);
            report_put_value(dat, cells[l][d]);
            fputc('\n', dat);
        }
    fputs("\n\n", dat);
    return 0;
}

/* One figure per budget (b < 0: the full cache alone): a panel per method, the score written in each cell. */
static int plot_needle_panel(FigureCtx *c, sqlite3 *db, const ReportSection *s, const NeedleAxes *a, int b) {
    char name[300], dat_path[1200];
    const char *labels[257], *policies[257], *aggs[257], *params[257];
    int n = 0;
    if (report_has_scores(s, &s->full)) {
        labels[n] = "full", policies[n] = "full", aggs[n] = NULL, params[n++] = NULL;
    }
    for (int m = 0; b >= 0 && m < s->n_methods && n < 257; m++)
        if (report_cell(s, m, b)->ran) {
            labels[n] = s->methods[m].label, policies[n] = s->methods[m].policy;
            aggs[n] = s->methods[m].aggregation, params[n++] = s->methods[m].params;
        }
    if (!n || !a->n_len) return 0;
    int cols = n < 4 ? n : 4, rows = (n + cols - 1) / cols;
    int pw = 90 + 60 * a->n_len, ph = 90 + 34 * a->n_dep;
    pw = pw < 300 ? 300 : pw, ph = ph < 240 ? 240 : ph;
    /* the panels on a grid with fixed pixel margins, the colour key in a strip on the right */
    int key_w = 110, width = cols * pw + key_w, height = rows * (ph + 25) + 80;
    snprintf(name, sizeof name, "%s_needle_%s", s->stem, b < 0 ? "full" : s->budgets[b].label);
    FILE *dat, *gp;
    if (report_figure_open_sized(c, name, width, height, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    fputs("# one block per panel: length_index depth_index score (lengths and depths in the tics of the .gp)\n", dat);
    for (int i = 0; i < n; i++) {
        report_put_dat_comment(dat, labels[i]);
        if (needle_block(dat, db, s, a, policies[i], aggs[i], params[i], b < 0 ? NULL : s->budgets[b].label, c->err)) {
            fclose(dat);
            fclose(gp);
            return -1;
        }
    }
    fputs("set xlabel 'context length (tokens)'\nset ylabel 'needle depth (%)'\nset cbrange [0:100]\n"
          "set palette defined (0 '#F0496E', 50 '#EBB839', 100 '#0CD79F')\nset tics scale 0\nset xtics (",
          gp);
    for (int l = 0; l < a->n_len; l++) fprintf(gp, "%s'%d' %d", l ? ", " : "", a->lengths[l], l);
    fputs(")\nset ytics (", gp);
    for (int d = 0; d < a->n_dep; d++) fprintf(gp, "%s'%g' %d", d ? ", " : "", a->depths[d], d);
    /* depth 0 at the top, as in the needle papers */
    fprintf(gp, ")\nset xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\nset style fill solid 1.0 noborder\n", a->n_len - 1,
            a->n_dep - 1);
    c->own_svg = 1;
    fputs("do for [out = 1:2] {\n  if (out == 2) { ", gp);
    report_put_svg_terminal(c, gp);
    fprintf(gp, " }\n  set colorbox vertical user origin screen %.4f, screen %.4f size screen %.4f, screen %.4f\n"
                "  set cbtics 0, 25, 100 scale 0.5\n  set cblabel 'score (%%)'\n"
                "  set multiplot layout %d,%d margins %.4f, %.4f, %.4f, %.4f spacing %.4f, %.4f title ",
            1.0 - (key_w - 25.0) / width, 0.2, 18.0 / width, 0.6, rows, cols, 75.0 / width, 1.0 - (double)key_w / width,
            45.0 / height, 1.0 - 70.0 / height, 85.0 / width, 100.0 / height);
    char title[400];
    snprintf(title, sizeof title, "%s — needle score (%%) per context length and depth, %s", s->model,
             b < 0 ? "full cache" : s->budgets[b].label);
    report_put_gp_string(gp, title);
    fputc('\n', gp);
    for (int i = 0; i < n; i++) {
        fputs("  set title ", gp);
        report_put_gp_string(gp, labels[i]);
        fputs("\n  plot ", gp);
        report_put_gp_string(gp, dat_path);
        fprintf(gp, " index %d using 1:2:(0.5):(0.5):3 with boxxyerror lc palette notitle, \\\n"
                    "    '' index %d using 1:2:($3 == $3 ? sprintf('%%.0f', $3) : '') with labels font ',9' notitle\n",
                i, i);
        if (i == 0) fputs("  unset colorbox\n", gp); /* one key for every panel, drawn with the first */
    }
    fputs("  unset multiplot\n}\n", gp);
    return report_figure_close(c, dat, gp);
}

int report_figures(const ReportData *d, sqlite3 *db, const char *out_dir, const char *gnuplot, FILE *log,
                   KvErr *err) {
    FigureCtx c = {.dir = out_dir, .gnuplot = gnuplot, .log = log, .have_gnuplot = -1, .err = err, .min_n = d->min_n,
                   .resamples = d->resamples};
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        if (plot_budget_lines(&c, s, 0) || plot_budget_lines(&c, s, 1) || plot_aggregation(&c, s)) return -1;
        for (int b = 0; b < s->n_budgets; b++)
            if (plot_task_bars(&c, s, b)) return -1;
        if (!s->has_needle) continue;
        NeedleAxes a;
        if (needle_axes(db, s, &a, err)) return -1;
        if (s->n_budgets == 0 && plot_needle_panel(&c, db, s, &a, -1)) return -1;
        for (int b = 0; b < s->n_budgets; b++)
            if (plot_needle_panel(&c, db, s, &a, b)) return -1;
    }
    if (report_crossdomain_figures(&c, d) || report_crossmodel_figures(&c, d) || report_trace_figures(&c, db, d->outlier))
        return -1;
    if (c.have_gnuplot == 0)
        return kv_fail(err, "gnuplot not found ('%s'; Debian: apt-get install gnuplot-nox): tables written, figure "
                            "scripts (.gp/.dat) written to %s but not rendered", gnuplot, out_dir);
    if (c.n_failed)
        return kv_fail(err, "gnuplot failed on %d of %d figures in %s (see its messages above)", c.n_failed,
                       c.n_failed + c.n_rendered, out_dir);
    return 0;
}
