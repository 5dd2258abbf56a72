/* plot.c — the report's output kit (plot.h): its output files; a figure's data file (.dat) and gnuplot script
 * (.gp) opened in the output folder and closed by running gnuplot on the script there (PNG and SVG); the values,
 * intervals and the one look of every method (its colour from the policy name, its dash, point and bar pattern
 * from the aggregation) that every figure writer uses: figures.c, crossdomain.c, traces.c. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../policies/policy.h"
#include "escape.h"
#include "plot.h"

FILE *report_open_out(const char *dir, const char *name, char *path, size_t n, KvErr *err) {
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) kv_fail(err, "%s: cannot write", path);
    return f;
}

int report_close_out(FILE *f, const char *path, FILE *log, KvErr *err) {
    int bad = ferror(f);
    if (fclose(f) || bad) return kv_fail(err, "%s: write failed (disk full?)", path);
    if (log) fprintf(log, "wrote %s\n", path);
    return 0;
}

int report_open_pair(const char *dir, const char *stem, FILE **md, char *md_path, FILE **csv, char *csv_path, size_t n,
                     KvErr *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.md", stem);
    *md = report_open_out(dir, name, md_path, n, err);
    snprintf(name, sizeof name, "%s.csv", stem);
    *csv = *md ? report_open_out(dir, name, csv_path, n, err) : NULL;
    if (*csv) return 0;
    if (*md) fclose(*md), *md = NULL;
    return -1;
}

extern char **environ;

/* Runs `gnuplot ARG` in DIR (NULL: here) and waits; returns its exit status, or 127 when it could not be started.
 * The folder is the child's working directory, never part of a gnuplot command. */
static int run_gnuplot(const char *gnuplot, const char *dir, const char *arg) {
    pid_t pid;
    char *argv[] = {(char *)gnuplot, (char *)arg, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (dir) posix_spawn_file_actions_addchdir_np(&fa, dir);
    int rc = posix_spawnp(&pid, gnuplot, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return 127;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void report_put_value(FILE *f, double v) {
    if (isnan(v)) fputs(" NaN", f);
    else fprintf(f, " %.4f", v);
}

/* Opens DIR/NAME.dat and DIR/NAME.gp under NAME made a file-name stem (c->name); the script starts with the
 * PNG terminal. */
int report_figure_open_sized(FigureCtx *c, const char *name, int width, int height, FILE **dat, FILE **gp,
                             char *dat_path, size_t n) {
    char gp_path[1200], full_dat[1200], file[sizeof c->name + 8];
    report_file_stem(c->name, sizeof c->name, name);
    snprintf(dat_path, n, "%s.dat", c->name);
    snprintf(full_dat, sizeof full_dat, "%s/%s.dat", c->dir, c->name);
    snprintf(gp_path, sizeof gp_path, "%s/%s.gp", c->dir, c->name);
    *dat = fopen(full_dat, "w");
    *gp = *dat ? fopen(gp_path, "w") : NULL;
    if (!*gp) {
        if (*dat) fclose(*dat);
        return kv_fail(c->err, "%s: cannot write", *dat ? gp_path : full_dat);
    }
    fprintf(*gp, "# %s.gp — written by kvbench report; `gnuplot %s.gp` in this folder redraws %s.png and .svg\n",
            c->name, c->name, c->name);
    snprintf(file, sizeof file, "%s.png", c->name);
    fprintf(*gp, "set terminal pngcairo size %d,%d noenhanced font 'sans,10'\nset output ", width, height);
    report_put_gp_string(*gp, file);
    fputc('\n', *gp);
    c->width = width;
    c->height = height;
    c->own_svg = 0;
    return 0;
}

int report_figure_open(FigureCtx *c, const char *name, FILE **dat, FILE **gp, char *dat_path, size_t n) {
    return report_figure_open_sized(c, name, 1000, 620, dat, gp, dat_path, n);
}

void report_put_svg_terminal(const FigureCtx *c, FILE *gp) {
    char file[sizeof c->name + 8];
    snprintf(file, sizeof file, "%s.svg", c->name);
    fprintf(gp, "set terminal svg size %d,%d noenhanced font 'sans,10'; set output ", c->width, c->height);
    report_put_gp_string(gp, file);
}

/* Finishes the script (the same plot again as SVG), closes both files and renders. */
int report_figure_close(FigureCtx *c, FILE *dat, FILE *gp) {
    char gp_path[1200];
    if (!c->own_svg) {
        report_put_svg_terminal(c, gp);
        fputs("\nreplot\n", gp);
    }
    int bad = ferror(dat) | ferror(gp);
    bad |= fclose(dat) | fclose(gp);
    snprintf(gp_path, sizeof gp_path, "%s/%s.gp", c->dir, c->name);
    if (bad) return kv_fail(c->err, "%s: write failed (disk full?)", gp_path);
    if (c->have_gnuplot < 0) c->have_gnuplot = run_gnuplot(c->gnuplot, NULL, "--version") == 0;
    if (!c->have_gnuplot) return 0;
    snprintf(gp_path, sizeof gp_path, "%s.gp", c->name);
    if (run_gnuplot(c->gnuplot, c->dir, gp_path)) {
        c->n_failed++;
        if (c->log) fprintf(c->log, "gnuplot failed on %s/%s\n", c->dir, gp_path);
        return 0;
    }
    c->n_rendered++;
    if (c->log) fprintf(c->log, "wrote %s/%s.png and .svg\n", c->dir, c->name);
    return 0;
}

/* ---------------------------------------------------------------- the look of a method */

/* A policy without a colour of its own (policies/<name>.c): one picked by a hash of the name, so it is the same
 * in every figure. */
static const char *OTHER_COLOURS[] = {"#e377c2", "#006d5b", "#b8860b", "#4b0082", "#a0522d", "#2f4f4f"};

const char *report_policy_colour(const char *policy) {
    const char *own = policy_colour(policy);
    if (own) return own;
    unsigned h = 2166136261u; /* FNV-1a */
    for (const char *p = policy; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return OTHER_COLOURS[h % (sizeof OTHER_COLOURS / sizeof OTHER_COLOURS[0])];
}

/* Aggregations: mean (and policies that do not aggregate) solid / circle / filled bar; max dashed / square /
 * hatched; max+prior dash-dot / triangle / cross-hatched; anything else dotted / diamond / another pattern. */
static int agg_index(const char *aggregation) {
    if (!strcmp(aggregation, "max")) return 1;
    if (!strcmp(aggregation, "max+prior")) return 2;
    if (!strcmp(aggregation, "mean") || !strcmp(aggregation, "none") || !*aggregation) return 0;
    return 3;
}
int report_agg_dash(const char *aggregation) { return (int[]){1, 2, 4, 3}[agg_index(aggregation)]; }
/* Where the series of one figure are the aggregations of one policy (the fragility figures): one colour per
 * aggregation, the same in every such figure whichever aggregations it holds. */
const char *report_agg_colour(const char *aggregation) {
    return (const char *[]){"#9400d3", "#009e73", "#56b4e9", "#e69f00"}[agg_index(aggregation)];
}
int report_agg_point(const char *aggregation) { return (int[]){7, 5, 9, 13}[agg_index(aggregation)]; }
int report_agg_pattern(const char *aggregation) { return (int[]){-1, 4, 5, 6}[agg_index(aggregation)]; }

void report_put_fill(FILE *gp, const char *aggregation) {
    int p = report_agg_pattern(aggregation);
    if (p < 0) fputs("fs solid 0.85 border lc rgb 'black'", gp);
    else fprintf(gp, "fs pattern %d border", p);
}

void report_put_ci(FILE *f, const StatsInterval *ci, int min_n) {
    int few = stats_too_few(ci, min_n);
    report_put_value(f, ci->value);
    report_put_value(f, few ? NAN : ci->lo);
    report_put_value(f, few ? NAN : ci->hi);
}
