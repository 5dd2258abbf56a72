/* figures.c — gnuplot figures of a report: for each figure a data file (.dat) and a script (.gp) that renders
 * it as PNG and SVG, then gnuplot is run on the script. The scripts stay next to the images so a figure can be
 * restyled by editing and re-running one file.
 *
 * Figures per section: average score against budget (one line per method, the full cache dashed), per-task
 * bars per budget, needle heatmaps (context length × depth, the colours of PyramidKV's visualize.py) per method
 * and budget, and aggregation-ablation bars where a policy ran with several aggregations; the fragility figures
 * of traces.c go through the same plumbing. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "report_internal.h"

extern char **environ;

/* Runs `gnuplot args...` and waits; returns its exit status, or 127 when it could not be started. */
static int run_gnuplot(const char *gnuplot, const char *arg) {
    pid_t pid;
    char *argv[] = {(char *)gnuplot, (char *)arg, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(&pid, gnuplot, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return 127;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void report_put_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void put_value(FILE *f, double v) {
    if (isnan(v)) fputs(" NaN", f);
    else fprintf(f, " %.4f", v);
}

/* Opens DIR/NAME.dat and DIR/NAME.gp; the script starts with the PNG terminal. */
int report_figure_open(FigureCtx *c, const char *name, FILE **dat, FILE **gp, char *dat_path, size_t n) {
    char gp_path[1200];
    snprintf(dat_path, n, "%s/%s.dat", c->dir, name);
    snprintf(gp_path, sizeof gp_path, "%s/%s.gp", c->dir, name);
    *dat = fopen(dat_path, "w");
    *gp = *dat ? fopen(gp_path, "w") : NULL;
    if (!*gp) {
        if (*dat) fclose(*dat);
        return kv_fail(c->err, "%s: cannot write", *dat ? gp_path : dat_path);
    }
    fprintf(*gp, "# %s.gp — rendered by kvbench report; run `gnuplot %s.gp` in %s to redo it\n", name, name, c->dir);
    fprintf(*gp, "set terminal pngcairo size 1000,620 noenhanced font 'sans,10'\nset output '%s/%s.png'\n", c->dir,
            name);
    return 0;
}

/* Finishes the script (the same plot again as SVG), closes both files and renders. */
int report_figure_close(FigureCtx *c, const char *name, FILE *dat, FILE *gp) {
    char gp_path[1200];
    fprintf(gp, "set terminal svg size 1000,620 noenhanced font 'sans,10'\nset output '%s/%s.svg'\nreplot\n", c->dir,
            name);
    int bad = ferror(dat) | ferror(gp);
    bad |= fclose(dat) | fclose(gp);
    snprintf(gp_path, sizeof gp_path, "%s/%s.gp", c->dir, name);
    if (bad) return kv_fail(c->err, "%s: write failed (disk full?)", gp_path);
    if (c->have_gnuplot < 0) c->have_gnuplot = run_gnuplot(c->gnuplot, "--version") == 0;
    if (!c->have_gnuplot) return 0;
    if (run_gnuplot(c->gnuplot, gp_path)) {
        c->n_failed++;
        if (c->log) fprintf(c->log, "gnuplot failed on %s\n", gp_path);
        return 0;
    }
    c->n_rendered++;
    if (c->log) fprintf(c->log, "wrote %s/%s.png and .svg\n", c->dir, name);
    return 0;
}

/* ---------------------------------------------------------------- the figures */

static int plot_budget_curve(FigureCtx *c, const ReportSection *s) {
    char name[300], dat_path[1200];
    FILE *dat, *gp;
    int n_frac = 0;
    for (int b = 0; b < s->n_budgets; b++) n_frac += s->budgets[b].keep_fraction > 0;
    if (n_frac == 0 || s->n_methods == 0) return 0;
    snprintf(name, sizeof name, "%s_budget", s->stem);
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    fputs("budget_percent", dat);
    for (int m = 0; m < s->n_methods; m++) {
        fputc(' ', dat);
        report_put_quoted(dat, s->methods[m].label);
    }
    fputc('\n', dat);
    for (int b = 0; b < s->n_budgets; b++) {
        if (s->budgets[b].keep_fraction <= 0) continue;
        fprintf(dat, "%.4f", 100.0 * s->budgets[b].keep_fraction);
        for (int m = 0; m < s->n_methods; m++) put_value(dat, report_mean(s, report_cell(s, m, b), -1));
        fputc('\n', dat);
    }
    double full = report_mean(s, s->full, -1);
    fprintf(gp, "set title '%s — %s: average score against KV budget'\n", s->model, s->suite);
    fputs("set xlabel 'KV cache budget (% of the context)'\nset ylabel 'average score'\nset grid\n"
          "set key outside right top\nset yrange [0:100]\nset xrange [0:100]\n", gp);
    fprintf(gp, "plot for [i=2:%d] '%s' using 1:i with linespoints lw 2 pt 7 title columnheader(i)", s->n_methods + 1,
            dat_path);
    if (!isnan(full)) fprintf(gp, ", %.4f with lines dt 2 lw 2 lc rgb 'black' title 'full cache'", full);
    fputc('\n', gp);
    return report_figure_close(c, name, dat, gp);
}

static int has_values(const ReportSection *s, const double *task_scores) {
    return !isnan(report_mean(s, task_scores, -1));
}

static int plot_task_bars(FigureCtx *c, const ReportSection *s, int b) {
    char name[300], dat_path[1200];
    FILE *dat, *gp;
    int has_full = has_values(s, s->full), n_cols = has_full;
    snprintf(name, sizeof name, "%s_tasks_%s", s->stem, s->budgets[b].label);
    for (char *p = name; *p; p++)
        if (*p == '%') *p = 'p';
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    /* Methods without a score at this budget get no column (gnuplot refuses an all-NaN histogram column). */
    fputs("task", dat);
    if (has_full) fputs(" \"full\"", dat);
    for (int m = 0; m < s->n_methods; m++) {
        if (!has_values(s, report_cell(s, m, b))) continue;
        fputc(' ', dat);
        report_put_quoted(dat, s->methods[m].label);
        n_cols++;
    }
    fputc('\n', dat);
    for (int t = 0; t < s->n_tasks; t++) {
        report_put_quoted(dat, s->tasks[t]);
        if (has_full) put_value(dat, s->full[t]);
        for (int m = 0; m < s->n_methods; m++)
            if (has_values(s, report_cell(s, m, b))) put_value(dat, report_cell(s, m, b)[t]);
        fputc('\n', dat);
    }
    fprintf(gp, "set title '%s — %s: task scores at budget %s'\n", s->model, s->suite, s->budgets[b].label);
    fputs("set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.85 border -1\n"
          "set boxwidth 0.9\nset xtics rotate by -40 scale 0\nset ylabel 'score'\nset yrange [0:100]\nset grid y\n"
          "set key outside right top\n",
          gp);
    fprintf(gp, "plot for [i=2:%d] '%s' using i:xtic(1) title columnheader(i)\n", n_cols + 1, dat_path);
    return report_figure_close(c, name, dat, gp);
}

enum { NEEDLE_AXIS = 128 }; /* lengths or depths beyond this are left out of a heatmap */

/* Writes and renders one heatmap from its grid: cells[length index][depth index]; sorts the depth axis. */
static int plot_needle_grid(FigureCtx *c, const ReportSection *s, const char *label, const char *budget,
                            const int *lengths, int n_len, double *depths, int n_dep, double (*cells)[NEEDLE_AXIS]) {
    char name[400], dat_path[1200];
    FILE *dat, *gp;
    /* depths came ordered within each length; sort the axis (cells follow). */
    for (int i = 1; i < n_dep; i++)
        for (int j = i; j > 0 && depths[j - 1] > depths[j]; j--) {
            double t = depths[j];
            depths[j] = depths[j - 1];
            depths[j - 1] = t;
            for (int l = 0; l < n_len; l++) {
                double v = cells[l][j];
                cells[l][j] = cells[l][j - 1];
                cells[l][j - 1] = v;
            }
        }
    snprintf(name, sizeof name, "%s_needle_%s%s%s", s->stem, label, budget ? "_" : "", budget ? budget : "");
    for (char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '.'))
            *p = *p == '%' ? 'p' : '_';
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    fputs("# length_index depth_index score (lengths and depths in the tics of the .gp)\n", dat);
    for (int l = 0; l < n_len; l++) {
        for (int d = 0; d < n_dep; d++) {
            fprintf(dat, "%d %d", l, d);
            put_value(dat, cells[l][d]);
            fputc('\n', dat);
        }
        fputc('\n', dat);
    }
    fprintf(gp, "set title '%s — needle: %s%s%s'\n", s->model, label, budget ? " at " : "", budget ? budget : "");
    fputs("set xlabel 'Token Limit'\nset ylabel 'Depth Percent'\nset cbrange [0:100]\nset cblabel 'score'\n"
          "set palette defined (0 '#F0496E', 50 '#EBB839', 100 '#0CD79F')\n"
          "set tics scale 0\nset xtics (",
          gp);
    for (int l = 0; l < n_len; l++) fprintf(gp, "%s'%d' %d", l ? ", " : "", lengths[l], l);
    fputs(")\nset ytics (", gp);
    for (int d = 0; d < n_dep; d++) fprintf(gp, "%s'%g' %d", d ? ", " : "", depths[d], d);
    /* Depth 0 at the top, as in the needle papers: an explicit range runs from high to low. */
    fprintf(gp, ")\nset xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\n", n_len - 1, n_dep - 1);
    /* One filled box per cell (gnuplot's `with image` needs at least a 2 × 2 grid). */
    fprintf(gp, "set style fill solid 1.0 noborder\n"
                "plot '%s' using 1:2:(0.5):(0.5):3 with boxxyerror lc palette notitle\n",
            dat_path);
    return report_figure_close(c, name, dat, gp);
}

/* One heatmap: mean score per (context length, depth) cell of a method (policy == "full" for the full cache). */
static int plot_needle(FigureCtx *c, sqlite3 *db, const ReportSection *s, const char *policy, const char *agg,
                       const char *params, const char *budget, const char *label) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT s.target_tokens, s.depth_percent, 100.0 * AVG(r.score) FROM results r JOIN samples s "
                           "ON s.id = r.sample_id WHERE s.model = ? AND s.setup = ? AND s.suite = ? AND r.policy = ? "
                           "AND (? IS NULL OR (r.aggregation = ? AND r.params = ? AND r.budget = ?)) "
                           "AND s.depth_percent IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
                           -1, &st, NULL) != SQLITE_OK)
        return kv_fail(c->err, "reading needle scores: %s", sqlite3_errmsg(db));
    const char *binds[] = {s->model, s->setup, s->suite, policy, agg, agg, params, budget};
    for (int i = 0; i < 8; i++) sqlite3_bind_text(st, i + 1, binds[i], -1, SQLITE_STATIC);
    if (!agg) sqlite3_bind_null(st, 5);
    int lengths[NEEDLE_AXIS], n_len = 0, n_dep = 0;
    double depths[NEEDLE_AXIS], (*cells)[NEEDLE_AXIS] = malloc(sizeof(double[NEEDLE_AXIS][NEEDLE_AXIS]));
    if (!cells) {
        sqlite3_finalize(st);
        return kv_fail(c->err, "out of memory");
    }
    for (int i = 0; i < NEEDLE_AXIS; i++)
        for (int j = 0; j < NEEDLE_AXIS; j++) cells[i][j] = NAN;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int len = sqlite3_column_int(st, 0), li, di;
        double dep = sqlite3_column_double(st, 1);
        for (li = 0; li < n_len && lengths[li] != len; li++) {}
        for (di = 0; di < n_dep && depths[di] != dep; di++) {}
        if (li == NEEDLE_AXIS || di == NEEDLE_AXIS) continue;
        if (li == n_len) lengths[n_len++] = len;
        if (di == n_dep) depths[n_dep++] = dep;
        cells[li][di] = sqlite3_column_type(st, 2) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 2);
    }
    sqlite3_finalize(st);
    int rc = n_len ? plot_needle_grid(c, s, label, budget, lengths, n_len, depths, n_dep, cells) : 0;
    free(cells);
    return rc;
}

/* Bars of the average score per aggregation, for each policy (and budget) that ran with several. */
static int plot_aggregation(FigureCtx *c, const ReportSection *s) {
    char name[300], dat_path[1200];
    const char *aggs[16];
    int n_aggs = 0, any = 0;
    FILE *dat, *gp;
    for (int m = 0; m < s->n_methods; m++) {
        int k;
        for (int o = 0; o < s->n_methods; o++)
            any |= o != m && !strcmp(s->methods[o].policy, s->methods[m].policy) &&
                   strcmp(s->methods[o].aggregation, s->methods[m].aggregation);
        for (k = 0; k < n_aggs && strcmp(aggs[k], s->methods[m].aggregation); k++) {}
        if (k == n_aggs && n_aggs < 16) aggs[n_aggs++] = s->methods[m].aggregation;
    }
    if (!any || s->n_budgets == 0) return 0;
    snprintf(name, sizeof name, "%s_aggregation", s->stem);
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    fputs("policy", dat);
    for (int k = 0; k < n_aggs; k++) {
        fputc(' ', dat);
        report_put_quoted(dat, aggs[k]);
    }
    fputc('\n', dat);
    /* One row per (policy, budget), in method order. */
    for (int b = 0; b < s->n_budgets; b++)
        for (int m = 0; m < s->n_methods; m++) {
            int first = 1, several = 0;
            for (int o = 0; o < s->n_methods; o++) {
                if (strcmp(s->methods[o].policy, s->methods[m].policy)) continue;
                if (o < m) first = 0;
                several |= strcmp(s->methods[o].aggregation, s->methods[m].aggregation) != 0;
            }
            int any_value = 0;
            for (int o = 0; o < s->n_methods; o++)
                any_value |= !strcmp(s->methods[o].policy, s->methods[m].policy) &&
                             has_values(s, report_cell(s, o, b));
            if (!first || !several || !any_value) continue;
            char row[200];
            snprintf(row, sizeof row, "%s @ %s", s->methods[m].policy, s->budgets[b].label);
            report_put_quoted(dat, row);
            for (int k = 0; k < n_aggs; k++) {
                double v = NAN;
                for (int o = 0; o < s->n_methods; o++)
                    if (!strcmp(s->methods[o].policy, s->methods[m].policy) &&
                        !strcmp(s->methods[o].aggregation, aggs[k]))
                        v = report_mean(s, report_cell(s, o, b), -1);
                put_value(dat, v);
            }
            fputc('\n', dat);
        }
    fprintf(gp, "set title '%s — %s: aggregation ablation (average score)'\n", s->model, s->suite);
    fputs("set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.85 border -1\n"
          "set boxwidth 0.9\nset xtics rotate by -30 scale 0\nset ylabel 'average score'\nset yrange [0:100]\n"
          "set grid y\nset key outside right top title 'aggregation'\n",
          gp);
    fprintf(gp, "plot for [i=2:%d] '%s' using i:xtic(1) title columnheader(i)\n", n_aggs + 1, dat_path);
    return report_figure_close(c, name, dat, gp);
}

int report_figures(const ReportData *d, sqlite3 *db, const char *out_dir, const char *gnuplot, FILE *log,
                   KvErr *err) {
    FigureCtx c = {out_dir, gnuplot, log, -1, 0, 0, err};
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        if (plot_budget_curve(&c, s) || plot_aggregation(&c, s)) return -1;
        for (int b = 0; b < s->n_budgets; b++)
            if (plot_task_bars(&c, s, b)) return -1;
        if (!s->has_needle) continue;
        if (!isnan(report_mean(s, s->full, -1)) && plot_needle(&c, db, s, "full", NULL, NULL, NULL, "full"))
            return -1;
        for (int m = 0; m < s->n_methods; m++)
            for (int b = 0; b < s->n_budgets; b++) {
                const ReportMethod *x = &s->methods[m];
                if (plot_needle(&c, db, s, x->policy, x->aggregation, x->params, s->budgets[b].label, x->label))
                    return -1;
            }
    }
    if (report_trace_figures(&c, db, d->outlier)) return -1;
    if (c.have_gnuplot == 0)
        return kv_fail(err, "gnuplot not found ('%s'; Debian: apt-get install gnuplot-nox): tables written, figure "
                            "scripts (.gp/.dat) written to %s but not rendered", gnuplot, out_dir);
    if (c.n_failed)
        return kv_fail(err, "gnuplot failed on %d of %d figures in %s (see its messages above)", c.n_failed,
                       c.n_failed + c.n_rendered, out_dir);
    return 0;
}
