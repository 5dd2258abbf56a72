/* traces.c — the fragility part of a report (the paper's retained-importance analysis), from the tables
 * `traces` and `trace_heads` written by `kvbench trace`.
 *
 * Table (fragility.md / .csv), per (model, setup, task, policy, params, budget, window, aggregation): mean R,
 * mean 5th percentile over heads, worst step (smallest model-average R_t), worst head (smallest R_t(l, k)), and
 * both outlier notions at the threshold (default 0.5, `kvbench report --outlier`): steps whose model-average
 * R_t is below it, (step, layer, kv-head) triples below it, and steps with any head below it. Rows are ordered
 * so that a policy's single-token observation (w = 1) sits right above its window aggregations (w = 32).
 * Figures, one per (model, setup, task, policy, params, budget, window) with the aggregations as series:
 * R_t over the decode steps (mean over heads as a line, minimum over heads dashed, per-head outlier steps
 * marked on the minimum, step outliers on the mean), and the empirical CDF of R_t(l, k) and of the per-step
 * mean on the range the data occupies. Samples are drawn one after the other along x. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../metrics/fragility.h"
#include "writers.h"

#define CDF_POINTS 400  /* quantiles drawn per CDF curve */

/* Every per-head row with its group key, in group order (%s: an optional WHERE clause). */
#define HEADS_QUERY                                                                                              \
    "SELECT s.model, s.setup, s.task, h.policy, h.params, h.budget, t.window, h.aggregation, h.sample_id,"       \
    "       h.n_layers * h.n_kv_heads, h.r"                                                                      \
    " FROM trace_heads h JOIN samples s ON s.id = h.sample_id"                                                  \
    " JOIN traces t ON t.sample_id = h.sample_id AND t.policy = h.policy AND t.aggregation = h.aggregation"     \
    "  AND t.params = h.params AND t.budget = h.budget AND t.step = h.step %s"                                  \
    " ORDER BY s.model, s.setup, s.task, h.budget, h.policy, h.params, t.window,"                           \
    " CASE h.aggregation WHEN 'mean' THEN 0 WHEN 'max' THEN 1 WHEN 'max+prior' THEN 2 ELSE 3 END, h.aggregation," \
    " h.sample_id, h.step"
enum { Q_MODEL, Q_SETUP, Q_TASK, Q_POLICY, Q_PARAMS, Q_BUDGET, Q_WINDOW, Q_AGG, Q_SAMPLE, Q_PAIRS, Q_R };
#define N_KEY 8  /* Q_MODEL .. Q_AGG: one table row */

static const char *col(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

static int db_fail(sqlite3 *db, KvErr *err) { return kv_fail(err, "reading the traces: %s", sqlite3_errmsg(db)); }

int report_has_traces(sqlite3 *db) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM trace_heads LIMIT 1", -1, &st, NULL) != SQLITE_OK) return 0;
    int any = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return any;
}

/* A row's R_t(l, k) (little-endian float32, store/store.c) into *r, grown to hold it; its count in *n. */
static int row_values(sqlite3_stmt *st, float **r, int *cap, int *n, KvErr *err) {
    /* n_layers x n_kv_heads as SQLite's 64-bit product: truncated to an int it could wrap to a count that
     * matches the blob (store_open refuses such rows; this read does not rely on it) */
    long long pairs = sqlite3_column_int64(st, Q_PAIRS);
    int bytes = sqlite3_column_bytes(st, Q_R);
    const unsigned char *blob = sqlite3_column_blob(st, Q_R);
    if (pairs <= 0 || pairs != bytes / 4 || bytes % 4 || !blob)
        return kv_fail(err, "trace_heads: a row of %s/%s has %d bytes for %lld heads", col(st, Q_POLICY),
                       col(st, Q_AGG), bytes, pairs);
    if (pairs > *cap) {
        float *grown = realloc(*r, sizeof(float) * 2 * (size_t)pairs);
        if (!grown) return kv_fail(err, "out of memory reading the traces");
        *r = grown;
        *cap = (int)(2 * pairs);
    }
    for (int i = 0; i < pairs; i++) {
        uint32_t u = 0;
        for (int b = 0; b < 4; b++) u |= (uint32_t)blob[4 * i + b] << (8 * b);
        memcpy(&(*r)[i], &u, 4);
    }
    *n = (int)pairs;
    return 0;
}

static int same_key(sqlite3_stmt *st, char keys[N_KEY][300]) {
    for (int i = 0; i < N_KEY; i++)
        if (strcmp(keys[i], col(st, i))) return 0;
    return 1;
}

/* The share of the keep-sets' entries that the max+prior prior raised to their head's mean (-1: none
 * recorded, another aggregation). */
static double clamped_share(sqlite3_stmt *q, char keys[N_KEY][300]) {
    const int at[] = {Q_MODEL, Q_SETUP, Q_TASK, Q_POLICY, Q_PARAMS, Q_BUDGET, Q_AGG};
    sqlite3_reset(q);
    for (int i = 0; i < 7; i++) sqlite3_bind_text(q, i + 1, keys[at[i]], -1, SQLITE_STATIC);
    double share = -1.0;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL && sqlite3_column_int64(q, 1) > 0)
        share = (double)sqlite3_column_int64(q, 0) / (double)sqlite3_column_int64(q, 1);
    return share;
}

/* Finishes s and writes it. */
static void write_row(FILE *md, FILE *csv, sqlite3_stmt *sets, char keys[N_KEY][300], int samples,
                      FragilitySummary *s) {
    fragility_summary_finish(s);
    double tied = clamped_share(sets, keys);
    char tied_text[32] = "—";
    if (tied >= 0) snprintf(tied_text, sizeof tied_text, "%.1f%%", 100.0 * tied);
    const int named[] = {Q_POLICY, Q_AGG, Q_PARAMS, Q_BUDGET, Q_WINDOW};
    for (int i = 0; i < 5; i++) {
        fputs("| ", md);
        report_put_md(md, keys[named[i]]);
        fputc(' ', md);
    }
    fprintf(md, "| %d | %d | %.4f | %.4f | %.4f | %.4f | %d (%.1f%%) | %lld (%.2f%%) | %d (%.1f%%) | %s |\n", samples,
            s->n_steps,
            s->mean_r, s->mean_p5, s->worst_step_r, s->worst_head_r, s->step_outliers,
            s->n_steps ? 100.0 * s->step_outliers / s->n_steps : 0.0,
            s->head_outliers, s->n_head_values ? 100.0 * (double)s->head_outliers / (double)s->n_head_values : 0.0,
            s->steps_any_head, s->n_steps ? 100.0 * s->steps_any_head / s->n_steps : 0.0, tied_text);
    for (int i = 0; i < N_KEY; i++) {
        report_put_csv(csv, keys[i]);
        fputc(',', csv);
    }
    fprintf(csv, "%d,%d,%.6f,%.6f,%.6f,%.6f,%g,%d,%lld,%lld,%d,", samples, s->n_steps, s->mean_r, s->mean_p5,
            s->worst_step_r, s->worst_head_r, s->threshold, s->step_outliers, s->head_outliers, s->n_head_values,
            s->steps_any_head);
    if (tied >= 0) fprintf(csv, "%.6f", tied);
    fputc('\n', csv);
}

int report_trace_tables(sqlite3 *db, double outlier, const ReportProvenance *prov, const char *out_dir, FILE *log,
                        KvErr *err) {
    char md_path[1200], csv_path[1200], section[1000] = "", keys[N_KEY][300];
    sqlite3_stmt *st;
    if (!report_has_traces(db)) return 0;
    char sql[1500];
    snprintf(sql, sizeof sql, HEADS_QUERY, "");
    sqlite3_stmt *sets = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT SUM(t.clamped_kept), SUM(t.kept) FROM trace_sets t"
                           " JOIN samples s ON s.id = t.sample_id"
                           " WHERE s.model = ?1 AND s.setup = ?2 AND s.task = ?3 AND t.policy = ?4 AND t.params = ?5"
                           " AND t.budget = ?6 AND t.aggregation = ?7",
                           -1, &sets, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return db_fail(db, err);
    }
    FILE *md = report_open_out(out_dir, "fragility.md", md_path, sizeof md_path, err);
    FILE *csv = md ? report_open_out(out_dir, "fragility.csv", csv_path, sizeof csv_path, err) : NULL;
    if (!csv) {
        if (md) fclose(md);
        sqlite3_finalize(st);
        sqlite3_finalize(sets);
        return -1;
    }
    fputs("# kvbench fragility report\n\n", md);
    report_put_provenance(md, prov, 0);
    fprintf(md, "\nRetained importance R_t(l, k) of each keep-set along a full-cache "
                "greedy decode (docs/fragility.md; the importance is in the setup). mean R: mean over steps of "
                "the per-step mean over (layer, kv-head); p5: mean over steps of the 5th percentile over heads; "
                "worst step: the smallest per-step mean; worst head: the smallest R_t(l, k) of any step. Outliers "
                "below %.2f: step outliers (the per-step mean), head outliers ((step, layer, kv-head) triples, %% "
                "of all triples), and steps with any head below it. Prior-clamped share (max+prior only): the share "
                "of the keep-set's entries whose aggregated score the prior raised to their head's mean, where they "
                "tie and are ordered by position (params ties=unclamped: the opt-in ablation ordering them by the "
                "unclamped score).\n", outlier);
    fputs("model,setup,task,policy,params,budget,window,aggregation,samples,steps,mean_r,mean_p5,worst_step_r,"
          "worst_head_r,threshold,step_outliers,head_outliers,head_values,steps_any_head,clamped_share\n", csv);
    float *r = NULL, *scratch = NULL;
    int cap = 0, scap = 0, n = 0, samples = 0, have = 0, rc;
    long long sample = -1;
    FragilitySummary sum;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!have || !same_key(st, keys)) {
            if (have) write_row(md, csv, sets, keys, samples, &sum);
            char sec[1000];
            snprintf(sec, sizeof sec, "%s — %s — %s", col(st, Q_MODEL), col(st, Q_SETUP), col(st, Q_TASK));
            if (strcmp(sec, section)) {
                fputs("\n## ", md);
                report_put_md(md, sec);
                fprintf(md, "\n\n| policy | aggregation | params | budget | window | samples | steps | mean R | "
                            "p5 | worst step | worst head | step outliers | head outliers | steps with a head below | "
                            "prior-clamped share of the keep-set |\n"
                            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
                snprintf(section, sizeof section, "%s", sec);
            }
            for (int i = 0; i < N_KEY; i++) snprintf(keys[i], sizeof keys[i], "%s", col(st, i));
            fragility_summary_begin(&sum, outlier);
            samples = 0;
            sample = -1;
            have = 1;
        }
        if (row_values(st, &r, &cap, &n, err)) break;
        if (n > scap) {
            free(scratch);
            if (!(scratch = kv_malloc(sizeof(float) * (size_t)(scap = cap), err))) break;
        }
        if (sqlite3_column_int64(st, Q_SAMPLE) != sample) {
            sample = sqlite3_column_int64(st, Q_SAMPLE);
            samples++;
        }
        FragilityStep step;
        fragility_step_stats(r, n, outlier, scratch, &step);
        fragility_summary_add(&sum, &step, n);
    }
    if (rc == SQLITE_DONE && have) write_row(md, csv, sets, keys, samples, &sum);
    sqlite3_finalize(st);
    sqlite3_finalize(sets);
    free(r);
    free(scratch);
    if (rc != SQLITE_DONE) {
        fclose(md);
        fclose(csv);
        return rc == SQLITE_ROW ? -1 : db_fail(db, err);
    }
    if (report_close_out(md, md_path, log, err)) {
        fclose(csv);
        return -1;
    }
    return report_close_out(csv, csv_path, log, err);
}

/* ---------------------------------------------------------------- figures */

/* A figure: one (model, setup, task, policy, params, budget, window), its aggregations as series. */
typedef struct {
    char *key[7];   /* model, setup, task, policy, params, budget, window (text) */
    char **aggs;
    int n_aggs;
} TraceFigure;

/* One series: per step (in sample order) the stats over heads, and every R_t(l, k) value. */
typedef struct {
    FragilityStep *steps;
    long long *sample;
    int n_steps, cap_steps;
    float *values;
    size_t n_values, cap_values;
} Series;

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

/* fragility_MODEL_TASK_POLICY_BUDGET_wW[_vw][_intended][_ties-unclamped]_KIND: the value-weighted importance
 * and the opt-in policy variants get their own files. */
static void figure_stem(const TraceFigure *f, const char *kind, char *out, size_t n) {
    const char *parts[] = {f->key[0], f->key[2], f->key[3], f->key[5]};
    snprintf(out, n, "fragility");
    for (int i = 0; i < 4; i++) {
        strncat(out, "_", n - strlen(out) - 1);
        put_stem_part(out, n, parts[i]);
    }
    size_t k = strlen(out);
    snprintf(out + k, n - k, "_w%s%s%s%s_%s", f->key[6], strstr(f->key[1], "importance=value_weighted") ? "_vw" : "",
             strstr(f->key[4], "intended") ? "_intended" : "",
             strstr(f->key[4], "ties=unclamped") ? "_ties-unclamped" : "",
             kind);
}

static char *dup_text(const char *s, KvErr *err) {
    char *d = kv_malloc(strlen(s) + 1, err);
    if (d) strcpy(d, s);
    return d;
}

static void figures_free(TraceFigure *f, int n) {
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 7; k++) free(f[i].key[k]);
        for (int a = 0; a < f[i].n_aggs; a++) free(f[i].aggs[a]);
        free(f[i].aggs);
    }
    free(f);
}

/* The figures to draw (the full cache, R = 1 by definition, has none). */
static int list_figures(sqlite3 *db, TraceFigure **out, int *n_out, KvErr *err) {
    sqlite3_stmt *st;
    TraceFigure *figs = NULL;
    int n = 0, rc;
    *out = NULL;
    *n_out = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT s.model, s.setup, s.task, t.policy, t.params, t.budget, t.window, t.aggregation"
                           " FROM traces t JOIN samples s ON s.id = t.sample_id WHERE t.policy <> 'full'"
                           " GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY MIN(t.id)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, err);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int i;
        for (i = 0; i < n; i++) {
            int same = 1;
            for (int k = 0; k < 7 && same; k++) same = !strcmp(figs[i].key[k], col(st, k));
            if (same) break;
        }
        if (i == n) {
            TraceFigure *grown = realloc(figs, (size_t)(n + 1) * sizeof *grown);
            if (!grown) goto oom;
            figs = grown;
            memset(&figs[n], 0, sizeof figs[n]);
            n++;
            for (int k = 0; k < 7; k++)
                if (!(figs[i].key[k] = dup_text(col(st, k), err))) goto fail;
        }
        char **aggs = realloc(figs[i].aggs, (size_t)(figs[i].n_aggs + 1) * sizeof *aggs);
        if (!aggs) goto oom;
        figs[i].aggs = aggs;
        if (!(aggs[figs[i].n_aggs] = dup_text(col(st, 7), err))) goto fail;
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

static void series_free(Series *s) {
    free(s->steps);
    free(s->sample);
    free(s->values);
    memset(s, 0, sizeof *s);
}

/* Reads one aggregation's steps (sample order) and head values. */
static int series_load(sqlite3 *db, const TraceFigure *f, const char *agg, double outlier, Series *out, KvErr *err) {
    sqlite3_stmt *st;
    char sql[1700];
    memset(out, 0, sizeof *out);
    snprintf(sql, sizeof sql, HEADS_QUERY,
             "WHERE s.model = ?1 AND s.setup = ?2 AND s.task = ?3 AND h.policy = ?4 AND h.params = ?5"
             " AND h.budget = ?6 AND t.window = ?7 AND h.aggregation = ?8");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err);
    for (int k = 0; k < 6; k++) sqlite3_bind_text(st, k + 1, f->key[k], -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, atoi(f->key[6]));
    sqlite3_bind_text(st, 8, agg, -1, SQLITE_STATIC);
    float *r = NULL, *scratch = NULL;
    int cap = 0, n = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (row_values(st, &r, &cap, &n, err)) break;
        if (out->n_steps == out->cap_steps) {
            int c = out->cap_steps ? 2 * out->cap_steps : 256;
            FragilityStep *s = realloc(out->steps, sizeof *s * (size_t)c);
            if (s) out->steps = s;
            long long *m = s ? realloc(out->sample, sizeof *m * (size_t)c) : NULL;
            if (!m) {
                kv_fail(err, "out of memory reading the traces");
                break;
            }
            out->sample = m;
            out->cap_steps = c;
        }
        if (out->n_values + (size_t)n > out->cap_values) {
            size_t c = 2 * (out->n_values + (size_t)n);
            float *v = realloc(out->values, sizeof *v * c);
            float *sc = v ? realloc(scratch, sizeof *sc * (size_t)n) : NULL;
            if (v) out->values = v;
            if (!sc) {
                kv_fail(err, "out of memory reading the traces");
                break;
            }
            scratch = sc;
            out->cap_values = c;
        }
        memcpy(out->values + out->n_values, r, sizeof(float) * (size_t)n);
        out->n_values += (size_t)n;
        fragility_step_stats(r, n, outlier, scratch, &out->steps[out->n_steps]);
        out->sample[out->n_steps++] = sqlite3_column_int64(st, Q_SAMPLE);
    }
    sqlite3_finalize(st);
    free(r);
    free(scratch);
    if (rc != SQLITE_DONE) {
        series_free(out);
        return rc == SQLITE_ROW ? -1 : db_fail(db, err);
    }
    return 0;
}

/* What sets a figure's policy or importance apart from the default (the stem's _vw, _intended, _ties-unclamped),
 * in words for its title's second line: "" or "\n(value-weighted importance; ties by unclamped score)". */
static void variant_words(const char *setup, const char *params, char *out, size_t n) {
    int vw = strstr(setup, "importance=value_weighted") != NULL, intended = strstr(params, "intended") != NULL,
        ties = strstr(params, "ties=unclamped") != NULL;
    snprintf(out, n, "%s%s%s%s%s%s", vw || intended || ties ? "\n(" : "", vw ? "value-weighted importance" : "",
             intended ? (vw ? "; intended variant" : "intended variant") : "",
             ties ? (vw || intended ? "; ties by unclamped score" : "ties by unclamped score") : "",
             vw || intended || ties ? ")" : "", "");
}

/* "set title ..." of a figure: model — task: WHAT policy at budget, window w, and how it differs from the
 * default (two figures never share a title). */
static void put_title(FILE *gp, const TraceFigure *f, const char *what) {
    char title[1600], variant[200];
    variant_words(f->key[1], f->key[4], variant, sizeof variant);
    snprintf(title, sizeof title, "%s — %s: %s %s at %s, window %s%s", f->key[0], f->key[2], what, f->key[3], f->key[5],
             f->key[6], variant);
    fputs("set title ", gp);
    report_put_gp_string(gp, title);
    fputc('\n', gp);
}

/* "# WHAT NAME REST" heading a data block. */
static void put_block_comment(FILE *dat, const char *what, const char *name, const char *rest) {
    char line[600];
    snprintf(line, sizeof line, "%s %s%s", what, name, rest);
    report_put_dat_comment(dat, line);
}

/* ", DATA index I " continuing a plot command. */
static void put_series(FILE *gp, const char *dat_path, int index) {
    fputs(", \\\n  ", gp);
    report_put_gp_string(gp, dat_path);
    fprintf(gp, " index %d ", index);
}

/* R_t over the steps: per aggregation a data block "x mean min p5"; drawn are the mean, the 5th percentile
 * (the minimum is often one pathological head, see the table's worst head), and the outlier steps. */
static int plot_trace(FigureCtx *c, const TraceFigure *f, const Series *ser, double outlier) {
    char name[600], dat_path[1200];
    FILE *dat, *gp;
    figure_stem(f, "trace", name, sizeof name);
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    for (int a = 0; a < f->n_aggs; a++) {
        const Series *s = &ser[a];
        put_block_comment(dat, "aggregation", f->aggs[a], "");
        fputs("step mean_r min_r p5_r\n", dat);
        for (int x = 0; x < s->n_steps; x++) {
            fprintf(dat, "%d %.6f %.6f %.6f\n", x, s->steps[x].mean, s->steps[x].min, s->steps[x].p5);
            /* a grey line where the next sample starts */
            if (a == 0 && x > 0 && s->sample[x] != s->sample[x - 1])
                fprintf(gp, "set arrow from %g, graph 0 to %g, graph 1 nohead lc rgb 'gray70'\n", x - 0.5, x - 0.5);
        }
        fputs("\n\n", dat);
    }
    put_title(gp, f, "retained importance of");
    /* the footnote on its own line under the x-axis label: the bottom margin holds tics, label and note */
    fprintf(gp, "set xlabel 'decode step (samples one after another, grey lines between them)'\n"
                "set ylabel 'R_t: mean over heads (solid), 5th percentile over heads (dashed)'\n"
                "set yrange [-0.12:1.05]\nset autoscale xfix\nset grid\nset key outside right top\nset bmargin 5\n"
                "set label 1 'ticks below 0, one row per aggregation: steps with a head below the threshold; "
                "dots: steps whose mean is below it' at screen 0.01, screen 0.015 font ',8'\n"
                "plot %.2f with lines dt 3 lc rgb 'black' title 'outlier threshold'", outlier);
    for (int a = 0; a < f->n_aggs; a++) {
        const char *colour = report_agg_colour(f->aggs[a]);
        put_series(gp, dat_path, a);
        fprintf(gp, "using 1:2 with lines lw 1.5 lc rgb '%s' title ", colour);
        report_put_gp_string(gp, f->aggs[a]);
        put_series(gp, dat_path, a);
        fprintf(gp, "using 1:4 with lines lw 0.8 dt 2 lc rgb '%s' notitle", colour);
        put_series(gp, dat_path, a);
        fprintf(gp, "using 1:($3 < %g ? %g : 1/0) with points pt 5 ps 0.3 lc rgb '%s' notitle", outlier,
                -0.03 - 0.03 * a, colour);
        put_series(gp, dat_path, a);
        fprintf(gp, "using 1:($2 < %g ? $2 : 1/0) with points pt 7 ps 0.9 lc rgb '%s' notitle", outlier, colour);
    }
    fputc('\n', gp);
    return report_figure_close(c, dat, gp);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* CDF_POINTS quantiles of v[n] (sorted in place) as "value share" lines, then the last value again at the
 * plot's right edge, so a jump at R = 1 shows as a step rather than the edge of the frame. Returns the share
 * of values at exactly 1 (R reaches 1 when the keep-set holds every head's whole importance). */
static double put_cdf(FILE *dat, float *v, size_t n, double right) {
    if (n) qsort(v, n, sizeof *v, cmp_float); /* a series without values may have no array (v NULL) */
    size_t below = 0;
    for (int i = 0; i < CDF_POINTS && n; i++) {
        size_t at = (size_t)((double)i / (CDF_POINTS - 1) * (double)(n - 1) + 0.5);
        fprintf(dat, "%.6f %.6f\n", v[at], (double)(at + 1) / (double)n);
    }
    while (below < n && v[below] < 1.0f) below++;
    /* the step to 1 drawn exactly: the share below 1 just left of it, everything at it */
    if (n && below < n) fprintf(dat, "%.6f %.6f\n1.000000 %.6f\n", 1.0, (double)below / (double)n, 1.0);
    if (n) fprintf(dat, "%.6f 1.000000\n", right);
    fputs("\n\n", dat);
    return n ? (double)(n - below) / (double)n : 0.0;
}

/* Empirical CDFs: per aggregation R_t(l, k) over every (step, layer, kv-head) and the per-step mean; the x
 * range starts just below the smallest value, so the data fills the plot. */
static int plot_cdf(FigureCtx *c, const TraceFigure *f, Series *ser, double outlier) {
    char name[600], dat_path[1200];
    FILE *dat, *gp;
    double lo = 1.0;
    figure_stem(f, "cdf", name, sizeof name);
    if (report_figure_open(c, name, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    for (int a = 0; a < f->n_aggs; a++)
        for (size_t i = 0; i < ser[a].n_values; i++)
            if (ser[a].values[i] < lo) lo = ser[a].values[i];
    lo = floor(lo * 20.0) / 20.0;
    /* the axis runs past 1, so the mass at R = 1 is a visible step; the key states it too */
    double right = 1.0 + (1.0 - lo) * 0.06;
    double *at_one = kv_calloc(2 * (size_t)f->n_aggs, sizeof *at_one, c->err);
    for (int a = 0; at_one && a < f->n_aggs; a++) {
        Series *s = &ser[a];
        float *means = malloc(sizeof(float) * (size_t)(s->n_steps ? s->n_steps : 1));
        if (!means) {
            free(at_one);
            at_one = NULL;
            kv_fail(c->err, "out of memory drawing %s", name);
            break;
        }
        for (int t = 0; t < s->n_steps; t++) means[t] = (float)s->steps[t].mean;
        put_block_comment(dat, "aggregation", f->aggs[a], ": R_t(l, k)");
        fputs("value share\n", dat);
        at_one[2 * a] = put_cdf(dat, s->values, s->n_values, right);
        put_block_comment(dat, "aggregation", f->aggs[a], ": per-step mean");
        fputs("value share\n", dat);
        at_one[2 * a + 1] = put_cdf(dat, means, (size_t)s->n_steps, right);
        free(means);
    }
    if (!at_one) {
        fclose(dat);
        fclose(gp);
        return -1;
    }
    put_title(gp, f, "CDF of R_t,");
    fprintf(gp, "set xlabel 'retained importance R_t (the axis runs past 1: the step at 1 is the share at exactly 1, "
                "in the key)'\nset ylabel 'share at or below'\nset xrange [%.2f:%.4f]\n"
                "set yrange [0:1.02]\nset grid\nset key outside right top\n"
                "set arrow from %g, graph 0 to %g, graph 1 nohead dt 3 lc rgb 'black'\n"
                "set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb 'gray60'\nplot",
            lo, right, outlier, outlier);
    for (int a = 0; a < f->n_aggs; a++) {
        const char *colour = report_agg_colour(f->aggs[a]);
        char key[64];
        if (a) fputc(',', gp);
        fputs(" \\\n  ", gp);
        report_put_gp_string(gp, dat_path);
        fprintf(gp, " index %d using 1:2 with lines lw 1.5 lc rgb '%s' title ", 2 * a, colour);
        report_put_gp_string(gp, f->aggs[a]);
        snprintf(key, sizeof key, " per head (%.1f%% at 1)", 100.0 * at_one[2 * a]);
        fputs(" . ", gp);
        report_put_gp_string(gp, key);
        put_series(gp, dat_path, 2 * a + 1);
        fprintf(gp, "using 1:2 with lines lw 1 dt 2 lc rgb '%s' title ", colour);
        report_put_gp_string(gp, f->aggs[a]);
        snprintf(key, sizeof key, " per-step mean (%.1f%% at 1)", 100.0 * at_one[2 * a + 1]);
        fputs(" . ", gp);
        report_put_gp_string(gp, key);
    }
    free(at_one);
    fputc('\n', gp);
    return report_figure_close(c, dat, gp);
}

/* ---------------------------------------------------------------- the summary figure */

/* Every per-head row, grouped for the summary: one figure per (model, setup, budget), one row per (policy,
 * params, window, aggregation) over every task's samples. */
#define SUMMARY_QUERY                                                                                            \
    "SELECT s.model, s.setup, s.task, h.policy, h.params, h.budget, t.window, h.aggregation, h.sample_id,"       \
    "       h.n_layers * h.n_kv_heads, h.r"                                                                      \
    " FROM trace_heads h JOIN samples s ON s.id = h.sample_id"                                                  \
    " JOIN traces t ON t.sample_id = h.sample_id AND t.policy = h.policy AND t.aggregation = h.aggregation"     \
    "  AND t.params = h.params AND t.budget = h.budget AND t.step = h.step WHERE h.policy <> 'full'"           \
    " ORDER BY s.model, s.setup, h.budget, h.policy, h.params, t.window,"                                       \
    " CASE h.aggregation WHEN 'mean' THEN 0 WHEN 'max' THEN 1 WHEN 'max+prior' THEN 2 ELSE 3 END, h.aggregation," \
    " h.sample_id, h.step"

/* One row of the summary: the per-sample mean R (mean over the sample's steps of the per-step mean over heads)
 * and both outlier counts over every step. */
typedef struct {
    char policy[200], params[200], window[32], agg[100];
    double *sample_mean;
    int n_samples, cap;
    double sum;           /* of the current sample's per-step means */
    int steps_in_sample;
    int n_steps, step_outliers;
    long long n_heads, head_outliers;
} SummaryRow;

static int summary_end_sample(SummaryRow *r, KvErr *err) {
    if (!r->steps_in_sample) return 0;
    if (r->n_samples == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        double *g = realloc(r->sample_mean, sizeof *g * (size_t)cap);
        if (!g) return kv_fail(err, "out of memory summarising the traces");
        r->sample_mean = g, r->cap = cap;
    }
    r->sample_mean[r->n_samples++] = r->sum / r->steps_in_sample;
    r->sum = 0, r->steps_in_sample = 0;
    return 0;
}

/* A summary row's label: policy, aggregation, window, and its params less the window (already said). */
static void summary_label(const SummaryRow *r, char *out, size_t n) {
    char rest[200] = "";
    const char *p = r->params;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (strncmp(p, "w=", 2) && len < sizeof rest - strlen(rest) - 2)
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest), "%s%.*s", *rest ? "," : "", (int)len, p);
        p += len + (p[len] == ',');
    }
    snprintf(out, n, "%s %s w=%s%s%s%s (n=%d)", r->policy, r->agg, r->window, *rest ? " [" : "", rest, *rest ? "]" : "",
             r->n_samples);
}

/* fragility_summary_MODEL_BUDGET[_vw]: mean R with its interval and both outlier counts per row, three panels
 * sharing the rows. Colour = policy, point = aggregation, as in every figure. */
static int plot_summary(FigureCtx *c, const char *model, const char *setup, const char *budget, SummaryRow *rows,
                        int n_rows, double outlier) {
    char name[700] = "fragility_summary_", dat_path[1200], title[1600];
    FILE *dat, *gp;
    put_stem_part(name, sizeof name, model);
    strncat(name, "_", sizeof name - strlen(name) - 1);
    put_stem_part(name, sizeof name, budget);
    if (strstr(setup, "importance=value_weighted")) strncat(name, "_vw", sizeof name - strlen(name) - 1);
    int height = 210 + 20 * n_rows;
    if (report_figure_open_sized(c, name, 1400, height, &dat, &gp, dat_path, sizeof dat_path)) return -1;
    fputs("# row mean_r lo hi (95% bootstrap over samples; NaN bounds from fewer than min_n) colour point "
          "step_outliers step_outlier_pct head_outliers head_outlier_pct samples\n", dat);
    double lo_x = 1.0;
    for (int i = 0; i < n_rows; i++) {
        SummaryRow *r = &rows[i];
        StatsInterval ci = STATS_NONE;
        int *group = kv_calloc((size_t)(r->n_samples ? r->n_samples : 1), sizeof *group, c->err);
        if (!group || stats_bootstrap(STATS_MEAN, r->sample_mean, NULL, group, r->n_samples, 1, c->resamples,
                                      STATS_SEED, &ci, c->err)) {
            free(group);
            fclose(dat);
            fclose(gp);
            return -1;
        }
        free(group);
        char label[700];
        summary_label(r, label, sizeof label);
        report_put_dat_comment(dat, label);
        fprintf(dat, "%d", i);
        report_put_ci(dat, &ci, c->min_n);
        unsigned colour = (unsigned)strtoul(report_policy_colour(r->policy) + 1, NULL, 16);
        fprintf(dat, " %u %d %d %.4f %lld %.4f %d\n", colour, report_agg_point(r->agg), r->step_outliers,
                r->n_steps ? 100.0 * r->step_outliers / r->n_steps : 0.0, r->head_outliers,
                r->n_heads ? 100.0 * (double)r->head_outliers / (double)r->n_heads : 0.0, r->n_samples);
        if (!isnan(ci.value)) lo_x = fmin(lo_x, isnan(ci.lo) || stats_too_few(&ci, c->min_n) ? ci.value : ci.lo);
    }
    lo_x = fmax(0.0, floor(fmin(lo_x, outlier) * 10.0 - 0.5) / 10.0); /* the threshold always on the axis */
    snprintf(title, sizeof title, "%s — budget %s: retained importance R per policy, aggregation and observation "
             "window w%s\nleft: mean over samples of each sample's mean R (95%% bootstrap interval over samples; "
             "none from fewer than %d samples), dotted: the outlier threshold\nmiddle: step outliers (steps whose "
             "mean over heads is below %.2f); right: head outliers ((step, layer, kv-head) triples below %.2f)", model,
             budget,
             strstr(setup, "importance=value_weighted") ? " (value-weighted importance)" : "", c->min_n, outlier,
             outlier);
    c->own_svg = 1;
    fprintf(gp, "set yrange [%d.6:-0.6]\nset grid x\nset key off\nset style fill solid 0.8 border lc rgb 'black'\n"
                "do for [out = 1:2] {\n  if (out == 2) { ", n_rows - 1);
    report_put_svg_terminal(c, gp);
    fputs(" }\n  set multiplot layout 1,3 margins 0.3, 0.98, ", gp);
    fprintf(gp, "%.4f, %.4f spacing 0.03, 0 title ", 45.0 / height, 1.0 - 85.0 / height);
    report_put_gp_string(gp, title);
    fputs("\n  set ytics (", gp);
    for (int i = 0; i < n_rows; i++) {
        char label[700];
        summary_label(&rows[i], label, sizeof label);
        fputs(i ? ", " : "", gp);
        report_put_gp_tic(gp, label);
        fprintf(gp, " %d", i);
    }
    fprintf(gp, ") scale 0\n  set xlabel 'mean R'\n  set xrange [%.2f:1]\n"
                "  set arrow 1 from %g, graph 0 to %g, graph 1 nohead dt 3 lc rgb 'black'\n  plot ",
            lo_x, outlier, outlier);
    report_put_gp_string(gp, dat_path);
    fputs(" using 2:1:3:4:5 with xerrorbars lc rgb variable pt 7 ps 0 lw 1.2, \\\n    '' using 2:1:6:5 with points "
          "pt variable ps 1.3 lc rgb variable\n  unset arrow 1\n  unset ytics\n"
          "  set xlabel 'step outliers: % of steps (count)'\n  set xrange [0:*]\n  set offsets 0, graph 0.25, 0, 0\n"
          "  plot ",
          gp);
    report_put_gp_string(gp, dat_path);
    fputs(" using ($8 / 2):1:($8 / 2):(0.35):5 with boxxyerror lc rgb variable, \\\n    '' using 8:1:(sprintf('%d', "
          "$7)) with labels left offset char 0.5, 0 font ',8'\n"
          "  set xlabel 'head outliers: % of triples (count)'\n  plot ",
          gp);
    report_put_gp_string(gp, dat_path);
    fputs(" using ($10 / 2):1:($10 / 2):(0.35):5 with boxxyerror lc rgb variable, \\\n    '' using 10:1:(sprintf('%d', "
          "$9)) with labels left offset char 0.5, 0 font ',8'\n  unset multiplot\n  set offsets 0, 0, 0, 0\n}\n",
          gp);
    return report_figure_close(c, dat, gp);
}

static int trace_summary_figures(FigureCtx *c, sqlite3 *db, double outlier) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, SUMMARY_QUERY, -1, &st, NULL) != SQLITE_OK) return db_fail(db, c->err);
    char fig[3][300] = {"", "", ""};
    SummaryRow *rows = NULL;
    int n_rows = 0, cap_rows = 0, rc, fail = 0, cap = 0, n = 0, scap = 0;
    long long sample = -1;
    float *r = NULL, *scratch = NULL;
    while (!fail && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int new_fig = strcmp(fig[0], col(st, Q_MODEL)) || strcmp(fig[1], col(st, Q_SETUP)) ||
                      strcmp(fig[2], col(st, Q_BUDGET));
        SummaryRow *last = n_rows ? &rows[n_rows - 1] : NULL;
        int new_row = new_fig || strcmp(last->policy, col(st, Q_POLICY)) || strcmp(last->params, col(st, Q_PARAMS)) ||
                      strcmp(last->window, col(st, Q_WINDOW)) || strcmp(last->agg, col(st, Q_AGG));
        if ((new_row || sqlite3_column_int64(st, Q_SAMPLE) != sample) && last && summary_end_sample(last, c->err)) {
            fail = 1;
            break;
        }
        sample = sqlite3_column_int64(st, Q_SAMPLE);
        if (new_fig && n_rows) {
            fail = plot_summary(c, fig[0], fig[1], fig[2], rows, n_rows, outlier) != 0;
            for (int i = 0; i < n_rows; i++) free(rows[i].sample_mean);
            n_rows = 0;
            if (fail) break;
        }
        if (new_fig)
            for (int k = 0; k < 3; k++) snprintf(fig[k], sizeof fig[k], "%s", col(st, (int[]){Q_MODEL, Q_SETUP, Q_BUDGET}[k]));
        if (new_row) {
            if (n_rows == cap_rows) {
                SummaryRow *g = realloc(rows, sizeof *g * (size_t)(cap_rows = cap_rows ? 2 * cap_rows : 16));
                if (!g) {
                    fail = kv_fail(c->err, "out of memory summarising the traces") != 0;
                    break;
                }
                rows = g;
            }
            SummaryRow *x = &rows[n_rows++];
            memset(x, 0, sizeof *x);
            snprintf(x->policy, sizeof x->policy, "%s", col(st, Q_POLICY));
            snprintf(x->params, sizeof x->params, "%s", col(st, Q_PARAMS));
            snprintf(x->window, sizeof x->window, "%s", col(st, Q_WINDOW));
            snprintf(x->agg, sizeof x->agg, "%s", col(st, Q_AGG));
        }
        if (row_values(st, &r, &cap, &n, c->err)) {
            fail = 1;
            break;
        }
        if (n > scap) {
            free(scratch);
            if (!(scratch = kv_malloc(sizeof(float) * (size_t)(scap = cap), c->err))) {
                fail = 1;
                break;
            }
        }
        FragilityStep step;
        fragility_step_stats(r, n, outlier, scratch, &step);
        SummaryRow *x = &rows[n_rows - 1];
        x->sum += step.mean, x->steps_in_sample++;
        x->n_steps++, x->step_outliers += step.mean < outlier;
        x->n_heads += n, x->head_outliers += step.n_below;
    }
    if (!fail && rc != SQLITE_DONE) fail = db_fail(db, c->err) != 0;
    if (!fail && n_rows)
        fail = summary_end_sample(&rows[n_rows - 1], c->err) ||
               plot_summary(c, fig[0], fig[1], fig[2], rows, n_rows, outlier);
    for (int i = 0; i < n_rows; i++) free(rows[i].sample_mean);
    free(rows);
    free(r);
    free(scratch);
    sqlite3_finalize(st);
    return fail ? -1 : 0;
}

int report_trace_figures(FigureCtx *c, sqlite3 *db, double outlier) {
    TraceFigure *figs;
    int n;
    if (!report_has_traces(db)) return 0;
    if (list_figures(db, &figs, &n, c->err)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        Series *ser = kv_calloc((size_t)figs[i].n_aggs, sizeof *ser, c->err);
        if (!ser) {
            rc = -1;
            break;
        }
        for (int a = 0; a < figs[i].n_aggs && !rc; a++)
            rc = series_load(db, &figs[i], figs[i].aggs[a], outlier, &ser[a], c->err);
        if (!rc) rc = plot_trace(c, &figs[i], ser, outlier) || plot_cdf(c, &figs[i], ser, outlier) ? -1 : 0;
        for (int k = 0; k < figs[i].n_aggs; k++) series_free(&ser[k]);
        free(ser);
    }
    figures_free(figs, n);
    return rc ? rc : trace_summary_figures(c, db, outlier);
}
