/* plot.h — the report's output kit: its files (opened in the output folder, closed with a check for write
 * errors and a log line) and its figures (a .dat and a .gp per figure, gnuplot run on the script there), the
 * values and intervals a .dat holds, and the one look every method has in every figure. It knows no data model:
 * the writers (writers.h) use it. */
#ifndef KVBENCH_REPORT_PLOT_H
#define KVBENCH_REPORT_PLOT_H

#include <stdio.h>

#include "../engine/err.h"
#include "stats.h"

/* Output files shared by the writers: open DIR/NAME for writing; close, checking for write errors, and log. */
FILE *report_open_out(const char *dir, const char *name, char *path, size_t n, KvErr *err);
int report_close_out(FILE *f, const char *path, FILE *log, KvErr *err);
/* A table in both forms: DIR/STEM.md and DIR/STEM.csv opened together, paths in md_path and csv_path (n bytes
 * each); both or neither (0, or -1 with err naming the file that could not be written). */
int report_open_pair(const char *dir, const char *stem, FILE **md, char *md_path, FILE **csv, char *csv_path, size_t n,
                     KvErr *err);

/* A figure is DIR/NAME.dat (data) and DIR/NAME.gp (script rendering PNG then SVG), run through gnuplot in DIR,
 * so the script names its files relative to its own folder and can be re-run there. */
typedef struct {
    const char *dir;
    const char *gnuplot;
    FILE *log;
    int have_gnuplot;   /* -1 unknown, 0 missing, 1 found */
    int n_rendered, n_failed;
    KvErr *err;
    int width, height;  /* of the figure being written */
    int own_svg;        /* the script draws its SVG itself (a multiplot cannot replot): set before closing */
    int min_n;          /* no error bar from fewer samples (ReportData.min_n) */
    int resamples;      /* ReportData.resamples */
    char name[300];     /* the figure being written: its file-name stem (report_file_stem) */
} FigureCtx;
/* Opens both files, named by NAME made a file-name stem (c->name); the script starts with the PNG terminal;
 * dat_path receives the data file's name as the script refers to it (through report_put_gp_string, as every
 * string a script holds). */
int report_figure_open(FigureCtx *c, const char *name, FILE **dat, FILE **gp, char *dat_path, size_t n);
/* Same, with the canvas size in pixels (small-multiple panels need more room). */
int report_figure_open_sized(FigureCtx *c, const char *name, int width, int height, FILE **dat, FILE **gp,
                             char *dat_path, size_t n);
/* Finishes the script (the same plot again as SVG unless own_svg), closes both files and renders. */
int report_figure_close(FigureCtx *c, FILE *dat, FILE *gp);
/* "set terminal svg ...; set output 'NAME.svg'" for the figure being written (no newline). */
void report_put_svg_terminal(const FigureCtx *c, FILE *gp);

/* The fixed look of a method in every figure: colour by policy name (a table; other names get a colour from a
 * hash of the name, so it is stable too), dash type, point type and fill pattern by aggregation. */
const char *report_policy_colour(const char *policy);
int report_agg_dash(const char *aggregation);
int report_agg_point(const char *aggregation);
int report_agg_pattern(const char *aggregation);
/* The colour of an aggregation where one figure's series are the aggregations of one policy (fragility). */
const char *report_agg_colour(const char *aggregation);
/* gnuplot's fill style for a bar of the aggregation ("fs solid ..." or "fs pattern N border"). */
void report_put_fill(FILE *gp, const char *aggregation);
/* A number for a .dat file (" NaN" when absent). */
void report_put_value(FILE *f, double v);
/* " value lo hi" for a .dat file, the bounds NaN (no error bar) from fewer than min_n samples. */
void report_put_ci(FILE *f, const StatsInterval *ci, int min_n);

#endif
