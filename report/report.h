/* report.h — tables and figures from a results database (written by `kvbench run`); reads SQLite only.
 *
 * For every (model, setup, suite) in the database: per-task scores and domain averages per budget in the
 * paper's layout (Markdown report.md, LaTeX report.tex, long-form CSV), the relative quality loss against the
 * full cache, and gnuplot figures (PNG and SVG): score against budget per policy, per-task bars, needle heatmaps
 * (depth × length), aggregation-ablation bars. gnuplot is an external program; without it the tables are still
 * written and report_write fails with a message saying so. */
#ifndef KVBENCH_REPORT_H
#define KVBENCH_REPORT_H

#include <stdio.h>

#include "../engine/err.h"

typedef struct {
    const char *db_path;
    const char *out_dir;
    const char *gnuplot;  /* the gnuplot program (default "gnuplot") */
    FILE *log;            /* one line per file written; NULL for quiet */
    double outlier;       /* fragility outlier threshold on R_t; 0 = the default 0.5 (metrics/fragility.h) */
    int min_n;            /* fewest samples behind an interval, a comparison or a verdict; 0 = STATS_MIN_N (stats.h) */
    int resamples;        /* bootstrap resamples behind every interval; 0 = STATS_RESAMPLES; fewer than
                           * STATS_MIN_RESAMPLES are refused (stats.h) */
} ReportOptions;

int report_write(const ReportOptions *opt, KvErr *err);

#endif
