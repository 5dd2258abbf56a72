/* writers.h — the report's writers, each rendering the data model (model.h) with the output kit (plot.h) and
 * the escapers (escape.h): the tables (tables.c: report.md, report.tex, the CSV files), the figures (figures.c,
 * and those of crossdomain.c and traces.c), the rows' provenance (provenance.c), fragility (traces.c) and the
 * forced-set shares (forced_share.c), the policies' cost (policy_cost.c). The driver (report.c) calls them in turn. */
#ifndef KVBENCH_REPORT_WRITERS_H
#define KVBENCH_REPORT_WRITERS_H

#include <sqlite3.h>
#include <stdio.h>

#include "../engine/err.h"
#include "escape.h"
#include "model.h"
#include "plot.h"

int report_tables(const ReportData *d, const char *out_dir, FILE *log, KvErr *err);
int report_figures(const ReportData *d, sqlite3 *db, const char *out_dir, const char *gnuplot, FILE *log,
                   KvErr *err);

/* The provenance as a Markdown list (then the warning in bold), or as LaTeX comments (the warning also as a
 * paragraph, so it prints). */
void report_put_provenance(FILE *f, const ReportProvenance *p, int tex);

int report_crossdomain_figures(FigureCtx *c, const ReportData *d);
int report_crossmodel_figures(FigureCtx *c, const ReportData *d);

/* Fragility (traces.c), from the traces table of `kvbench trace`; both do nothing when it is empty. */
int report_has_traces(sqlite3 *db);
int report_trace_tables(sqlite3 *db, double outlier, const ReportProvenance *prov, const char *out_dir, FILE *log,
                        KvErr *err);
int report_trace_figures(FigureCtx *c, sqlite3 *db, double outlier);

/* The protected share of each value-weighted variant's keep-set (forced_share.c); nothing without rows. */
int report_forced_share(sqlite3 *db, const char *out_dir, FILE *log, KvErr *err);
/* Each variant's mean prefill and policy time per sample (policy_cost.c: KVzip's reconstruction pass shows there);
 * nothing without rows. */
int report_policy_cost(sqlite3 *db, const char *out_dir, FILE *log, KvErr *err);

#endif
