/* tables.c — the report's tables: report.md (Markdown), report.tex (LaTeX, booktabs, domain column groups as in
 * the paper's LongBench table) and long-form CSV files for further analysis.
 *
 * Per section and budget: task scores (0-100, mean over samples, failed rows excluded and counted) with the
 * unweighted average over tasks, and domain averages. Then the relative quality loss against the full cache,
 * loss = 1 - avg(method) / avg(full) on the task averages, and the per-task ratio score / full. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report_internal.h"

static const char *LOSS_FORMULA =
    "loss = 1 - avg(method) / avg(full cache), where avg is the unweighted mean of the task averages; "
    "ratio = task score / full-cache task score";

typedef enum { FMT_MD, FMT_TEX } Format;

static void put_text(FILE *f, Format fmt, const char *s) {
    for (; *s; s++) {
        if (fmt == FMT_TEX && strchr("_%&#$", *s)) fputc('\\', f);
        if (fmt == FMT_MD && *s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

static void put_number(FILE *f, Format fmt, double v, const char *unit) {
    if (isnan(v)) fputs(fmt == FMT_TEX ? "--" : "–", f);
    else fprintf(f, "%.2f%s", v, fmt == FMT_TEX && !strcmp(unit, "%") ? "\\%" : unit);
}

void report_put_csv(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void put_csv_number(FILE *f, double v) {
    if (!isnan(v)) fprintf(f, "%.6g", v);
}

/* ---------------------------------------------------------------- one table, either format */

/* Begins a table with a first column "Method" and `n` value columns; cols[i] names column i, groups[i] its
 * group (domain) or NULL. */
static void table_begin(FILE *f, Format fmt, const char *caption, char *const *cols, const char *const *groups, int n) {
    if (fmt == FMT_MD) {
        fprintf(f, "\n**%s**\n\n| Method |", caption);
        for (int i = 0; i < n; i++) {
            fputc(' ', f);
            put_text(f, fmt, cols[i]);
            fputs(" |", f);
        }
        fputs("\n|---|", f);
        for (int i = 0; i < n; i++) fputs("---:|", f);
        fputc('\n', f);
        return;
    }
    fputs("\n\\begin{table}[ht]\n\\centering\\small\n\\caption{", f);
    put_text(f, fmt, caption);
    fputs("}\n\\resizebox{\\textwidth}{!}{%\n\\begin{tabular}{l", f);
    for (int i = 0; i < n; i++) fputc('r', f);
    fputs("}\n\\toprule\n", f);
    if (groups) {
        fputs(" ", f);
        for (int i = 0; i < n;) {
            int j = i;
            while (j < n && groups[j] && groups[i] && !strcmp(groups[j], groups[i])) j++;
            if (j == i) j = i + 1;
            fprintf(f, " & \\multicolumn{%d}{c}{", j - i);
            put_text(f, fmt, groups[i] ? groups[i] : "");
            fputs("}", f);
            i = j;
        }
        fputs(" \\\\\n", f);
    }
    fputs("Method", f);
    for (int i = 0; i < n; i++) {
        fputs(" & ", f);
        put_text(f, fmt, cols[i]);
    }
    fputs(" \\\\\n\\midrule\n", f);
}

static void table_row(FILE *f, Format fmt, const char *label, const double *values, int n, const char *unit) {
    if (fmt == FMT_MD) fputs("| ", f);
    put_text(f, fmt, label);
    for (int i = 0; i < n; i++) {
        fputs(fmt == FMT_MD ? " | " : " & ", f);
        put_number(f, fmt, values[i], unit);
    }
    fputs(fmt == FMT_MD ? " |\n" : " \\\\\n", f);
}

static void table_end(FILE *f, Format fmt) {
    if (fmt == FMT_TEX) fputs("\\bottomrule\n\\end{tabular}}\n\\end{table}\n", f);
}

/* ---------------------------------------------------------------- a section */

/* values[T+1]: task scores then their average. */
static void task_values(const ReportSection *s, const double *scores, double *values) {
    for (int t = 0; t < s->n_tasks; t++) values[t] = scores[t];
    values[s->n_tasks] = report_mean(s, scores, -1);
}

static void domain_values(const ReportSection *s, const double *scores, double *values) {
    for (int k = 0; k < s->n_domains; k++) values[k] = report_mean(s, scores, k);
    values[s->n_domains] = report_mean(s, scores, -1);
}

static int failed_rows(const ReportSection *s, int m, int b) {
    int n = 0;
    for (int t = 0; t < s->n_tasks; t++) n += s->n_failed[((size_t)m * s->n_budgets + b) * s->n_tasks + t];
    return n;
}

/* Whether a method has rows at a budget (scored or failed): a sweep need not run every method at every budget. */
static int ran_at(const ReportSection *s, int m, int b) {
    return !isnan(report_mean(s, report_cell(s, m, b), -1)) || failed_rows(s, m, b) > 0;
}

static void render_section(FILE *f, Format fmt, const ReportSection *s) {
    char caption[512], *cols[512];
    const char *groups[512];
    double values[512];
    int nt = s->n_tasks < 500 ? s->n_tasks : 500, nd = s->n_domains < 500 ? s->n_domains : 500;
    int has_full = !isnan(report_mean(s, s->full, -1));
    if (fmt == FMT_MD) fprintf(f, "\n## %s — %s (%s)\n", s->model, s->suite, s->setup);
    else fprintf(f, "\n%% %s / %s / %s\n", s->model, s->suite, s->setup);

    for (int b = -1; b < s->n_budgets; b++) {
        if (b < 0 && (s->n_budgets > 0 || !has_full)) continue; /* a full-cache-only section gets one table */
        const char *budget = b < 0 ? "full cache" : s->budgets[b].label;
        for (int t = 0; t < nt; t++) {
            cols[t] = s->tasks[t];
            groups[t] = s->domains[s->task_domain[t]];
        }
        cols[nt] = "Avg";
        groups[nt] = NULL;
        snprintf(caption, sizeof caption, "%s, %s, budget %s: task scores", s->model, s->suite, budget);
        table_begin(f, fmt, caption, cols, groups, nt + 1);
        if (has_full) {
            task_values(s, s->full, values);
            table_row(f, fmt, "full", values, nt + 1, "");
        }
        for (int m = 0; b >= 0 && m < s->n_methods; m++) {
            if (!ran_at(s, m, b)) continue;
            task_values(s, report_cell(s, m, b), values);
            table_row(f, fmt, s->methods[m].label, values, nt + 1, "");
        }
        table_end(f, fmt);

        for (int k = 0; k < nd; k++) cols[k] = s->domains[k];
        cols[nd] = "Avg";
        snprintf(caption, sizeof caption, "%s, %s, budget %s: domain averages", s->model, s->suite, budget);
        table_begin(f, fmt, caption, cols, NULL, nd + 1);
        if (has_full) {
            domain_values(s, s->full, values);
            table_row(f, fmt, "full", values, nd + 1, "");
        }
        for (int m = 0; b >= 0 && m < s->n_methods; m++) {
            if (!ran_at(s, m, b)) continue;
            domain_values(s, report_cell(s, m, b), values);
            table_row(f, fmt, s->methods[m].label, values, nd + 1, "");
        }
        table_end(f, fmt);
        for (int m = 0; b >= 0 && m < s->n_methods; m++) {
            int n = failed_rows(s, m, b);
            if (n && fmt == FMT_MD) fprintf(f, "\n%s at %s: %d failed rows (excluded from the means).\n",
                                            s->methods[m].label, budget, n);
        }
    }
    if (!has_full || s->n_budgets == 0 || s->n_methods == 0) return;

    /* Relative quality loss: per method, average and loss at each budget. */
    double full_avg = report_mean(s, s->full, -1);
    int nb = s->n_budgets < 250 ? s->n_budgets : 250;
    for (int b = 0; b < nb; b++) {
        cols[2 * b] = s->budgets[b].label;
        cols[2 * b + 1] = "loss";
        groups[2 * b] = groups[2 * b + 1] = s->budgets[b].label;
    }
    snprintf(caption, sizeof caption, "%s, %s: relative quality loss vs full cache (avg %.2f); %s", s->model,
             s->suite, full_avg, LOSS_FORMULA);
    table_begin(f, fmt, caption, cols, groups, 2 * nb);
    for (int m = 0; m < s->n_methods; m++) {
        /* Loss shown negative, as the paper's "SnapKV (-20.1%)". */
        for (int b = 0; b < nb; b++) {
            double avg = report_mean(s, report_cell(s, m, b), -1);
            values[2 * b] = avg;
            values[2 * b + 1] = full_avg > 0 ? 100.0 * (avg / full_avg - 1.0) : NAN;
        }
        if (fmt == FMT_MD) fputs("| ", f);
        put_text(f, fmt, s->methods[m].label);
        for (int i = 0; i < 2 * nb; i++) {
            fputs(fmt == FMT_MD ? " | " : " & ", f);
            put_number(f, fmt, values[i], i % 2 ? "%" : "");
        }
        fputs(fmt == FMT_MD ? " |\n" : " \\\\\n", f);
    }
    table_end(f, fmt);

    /* Per-task ratios at each budget. */
    for (int b = 0; b < s->n_budgets; b++) {
        for (int t = 0; t < nt; t++) {
            cols[t] = s->tasks[t];
            groups[t] = s->domains[s->task_domain[t]];
        }
        cols[nt] = "Mean";
        groups[nt] = NULL;
        snprintf(caption, sizeof caption, "%s, %s, budget %s: score ratio vs full cache (%%)", s->model, s->suite,
                 s->budgets[b].label);
        table_begin(f, fmt, caption, cols, groups, nt + 1);
        for (int m = 0; m < s->n_methods; m++) {
            if (!ran_at(s, m, b)) continue;
            const double *cell = report_cell(s, m, b);
            double sum = 0;
            int n = 0;
            for (int t = 0; t < nt; t++) {
                values[t] = s->full[t] > 0 ? 100.0 * cell[t] / s->full[t] : NAN;
                if (!isnan(values[t])) sum += values[t], n++;
            }
            values[nt] = n ? sum / n : NAN;
            table_row(f, fmt, s->methods[m].label, values, nt + 1, "");
        }
        table_end(f, fmt);
    }
}

/* ---------------------------------------------------------------- CSV */

static void write_csv_tasks(FILE *f, const ReportData *d) {
    fputs("model,setup,suite,domain,task,policy,aggregation,params,budget,keep_fraction,score,full_score,ratio,"
          "n_failed\n", f);
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        for (int m = -1; m < s->n_methods; m++)
            for (int b = 0; b < (m < 0 ? 1 : s->n_budgets); b++)
                for (int t = 0; t < s->n_tasks; t++) {
                    double v = m < 0 ? s->full[t] : report_cell(s, m, b)[t];
                    if (m < 0 && isnan(v)) continue;
                    const char *fields[] = {s->model, s->setup, s->suite, s->domains[s->task_domain[t]], s->tasks[t],
                                            m < 0 ? "full" : s->methods[m].policy,
                                            m < 0 ? "" : s->methods[m].aggregation,
                                            m < 0 ? "" : s->methods[m].params, m < 0 ? "full" : s->budgets[b].label};
                    for (int k = 0; k < 9; k++) {
                        report_put_csv(f, fields[k]);
                        fputc(',', f);
                    }
                    fprintf(f, "%.6g,", m < 0 ? 1.0 : s->budgets[b].keep_fraction);
                    put_csv_number(f, v);
                    fputc(',', f);
                    put_csv_number(f, s->full[t]);
                    fputc(',', f);
                    put_csv_number(f, s->full[t] > 0 ? v / s->full[t] : NAN);
                    fprintf(f, ",%d\n", m < 0 ? 0 : s->n_failed[((size_t)m * s->n_budgets + b) * s->n_tasks + t]);
                }
    }
}

static void write_csv_summary(FILE *f, const ReportData *d) {
    fputs("model,setup,suite,domain,policy,aggregation,params,budget,score,full_score,loss\n", f);
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        for (int m = 0; m < s->n_methods; m++)
            for (int b = 0; b < s->n_budgets; b++)
                for (int k = -1; k < s->n_domains; k++) {
                    double v = report_mean(s, report_cell(s, m, b), k), full = report_mean(s, s->full, k);
                    const char *fields[] = {s->model, s->setup, s->suite, k < 0 ? "(all)" : s->domains[k],
                                            s->methods[m].policy, s->methods[m].aggregation, s->methods[m].params,
                                            s->budgets[b].label};
                    for (int c = 0; c < 8; c++) {
                        report_put_csv(f, fields[c]);
                        fputc(',', f);
                    }
                    put_csv_number(f, v);
                    fputc(',', f);
                    put_csv_number(f, full);
                    fputc(',', f);
                    put_csv_number(f, full > 0 ? 1.0 - v / full : NAN);
                    fputc('\n', f);
                }
    }
}

/* ---------------------------------------------------------------- files */

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

int report_tables(const ReportData *d, const char *out_dir, FILE *log, KvErr *err) {
    char path[1200];
    FILE *f;
    if (!(f = report_open_out(out_dir, "report.md", path, sizeof path, err))) return -1;
    fprintf(f, "# kvbench report\n\nScores are task averages on the 0-100 scale, rounded to 2 decimals as the "
               "references round them (failed rows excluded); domain and overall averages are unweighted means of "
               "the task scores. %s.\n",
            LOSS_FORMULA);
    for (int i = 0; i < d->n_sections; i++) render_section(f, FMT_MD, &d->sections[i]);
    if (report_close_out(f, path, log, err)) return -1;

    if (!(f = report_open_out(out_dir, "report.tex", path, sizeof path, err))) return -1;
    fputs("% kvbench report: \\usepackage{booktabs,graphicx}\n", f);
    for (int i = 0; i < d->n_sections; i++) render_section(f, FMT_TEX, &d->sections[i]);
    if (report_close_out(f, path, log, err)) return -1;

    if (!(f = report_open_out(out_dir, "task_scores.csv", path, sizeof path, err))) return -1;
    write_csv_tasks(f, d);
    if (report_close_out(f, path, log, err)) return -1;
    if (!(f = report_open_out(out_dir, "domain_scores.csv", path, sizeof path, err))) return -1;
    write_csv_summary(f, d);
    return report_close_out(f, path, log, err);
}
