/* report_internal.h — the report's in-memory view of a database: one ReportSection per (model, setup, suite)
 * with its tasks (in the order they were run), domains, methods (policy × aggregation × params, full cache
 * apart) and budgets, and the task-average score grid. tables.c and figures.c both render from it.
 * Shape legend: M methods, B budgets, T tasks. */
#ifndef KVBENCH_REPORT_INTERNAL_H
#define KVBENCH_REPORT_INTERNAL_H

#include <sqlite3.h>
#include <stdio.h>

#include "../engine/err.h"

typedef struct {
    char *policy, *aggregation, *params;
    char label[160];      /* "snapkv", or "snapkv (max)" / "snapkv [w=16,k=5]" where the section has several */
} ReportMethod;

typedef struct {
    char *label;          /* "20%", "512tok" */
    double keep_fraction; /* 0 for token budgets */
} ReportBudget;

typedef struct {
    char *model, *setup, *suite;
    char stem[200];       /* file-name stem: model_suite (plus the setup when the database has several) */
    char **tasks;         /* [T] */
    int *task_domain;     /* [T] index into domains */
    int n_tasks;
    char **domains;
    int n_domains;
    ReportMethod *methods;/* [M] */
    int n_methods;
    ReportBudget *budgets;/* [B] */
    int n_budgets;
    double *full;         /* [T] full-cache task score (0..100), NAN if absent */
    double *score;        /* [M][B][T] task score, NAN if absent */
    int *n_failed;        /* [M][B][T] failed rows */
    int has_needle;       /* samples carry a depth percent: draw heatmaps */
} ReportSection;

typedef struct {
    ReportSection *sections;
    int n_sections;
    double outlier;      /* the fragility outlier threshold (ReportOptions.outlier, resolved) */
} ReportData;

int report_load(ReportData *d, sqlite3 *db, const char *db_path, KvErr *err);
void report_data_free(ReportData *d);

/* Index helpers and averages shared by the renderers. */
double *report_cell(const ReportSection *s, int method, int budget);   /* -> [T] */
/* Unweighted mean over the tasks (of one domain, or all when domain < 0) that have a score; NAN if none. */
double report_mean(const ReportSection *s, const double *task_scores, int domain);

int report_tables(const ReportData *d, const char *out_dir, FILE *log, KvErr *err);
int report_figures(const ReportData *d, sqlite3 *db, const char *out_dir, const char *gnuplot, FILE *log,
                   KvErr *err);

/* Output files shared by the renderers: open DIR/NAME for writing; close, checking for write errors, and log. */
FILE *report_open_out(const char *dir, const char *name, char *path, size_t n, KvErr *err);
int report_close_out(FILE *f, const char *path, FILE *log, KvErr *err);
/* A CSV field, double-quoted (inner quotes doubled). */
void report_put_csv(FILE *f, const char *s);

/* A figure is DIR/NAME.dat (data) and DIR/NAME.gp (script rendering PNG then SVG), run through gnuplot. */
typedef struct {
    const char *dir;
    const char *gnuplot;
    FILE *log;
    int have_gnuplot;   /* -1 unknown, 0 missing, 1 found */
    int n_rendered, n_failed;
    KvErr *err;
} FigureCtx;
/* Opens both files; the script starts with the PNG terminal. */
int report_figure_open(FigureCtx *c, const char *name, FILE **dat, FILE **gp, char *dat_path, size_t n);
/* Finishes the script (the same plot again as SVG), closes both files and renders. */
int report_figure_close(FigureCtx *c, const char *name, FILE *dat, FILE *gp);
/* A double-quoted string for gnuplot. */
void report_put_quoted(FILE *f, const char *s);

/* Fragility (traces.c), from the traces table of `kvbench trace`; both do nothing when it is empty. */
int report_has_traces(sqlite3 *db);
int report_trace_tables(sqlite3 *db, double outlier, const char *out_dir, FILE *log, KvErr *err);
int report_trace_figures(FigureCtx *c, sqlite3 *db, double outlier);


#endif
