/* provenance.c — what a report's rows came from, from the database's runs table: the configs, the kvbench
 * revisions (`git describe --always --dirty` at build time, Makefile; "-dirty": built from a tree with
 * uncommitted changes), the models with their identities, and the dates the runs span. Rows from several
 * revisions are reported with a warning naming them: code that changed between runs may score differently; so are
 * rows of runs limited by --limit (runs.sample_limit), which ran only the first samples of each task. */
#include <string.h>

#include "writers.h"

/* The runs that wrote a row (a sample, hence its results, or a trace). */
#define USED_RUNS " FROM runs WHERE id IN (SELECT run_id FROM samples UNION SELECT run_id FROM traces)"

/* Appends "text" to out (separated by "; "), or " ..." once when it no longer fits. */
static void append(char *out, size_t n, const char *text) {
    size_t k = strlen(out);
    if (k + strlen(text) + 8 >= n) {
        if (k + 5 < n && strcmp(out + (k > 4 ? k - 4 : 0), " ...")) strcat(out, " ...");
        return;
    }
    snprintf(out + k, n - k, "%s%s", k ? "; " : "", text);
}

/* Each row of sql (one or two text columns: "a" or "a (b)") appended to out; the row count in *count. */
static int list(sqlite3 *db, const char *sql, char *out, size_t n, int *count, KvErr *err) {
    sqlite3_stmt *st;
    out[0] = 0;
    *count = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "reading the runs: %s", sqlite3_errmsg(db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char item[1200];
        const char *a = (const char *)sqlite3_column_text(st, 0), *b = NULL;
        if (sqlite3_column_count(st) > 1) b = (const char *)sqlite3_column_text(st, 1);
        snprintf(item, sizeof item, "%s%s%s%s", a ? a : "", b ? " (" : "", b ? b : "", b ? ")" : "");
        append(out, n, item);
        (*count)++;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : kv_fail(err, "reading the runs: %s", sqlite3_errmsg(db));
}

/* How many of the runs behind the rows were limited by --limit (runs.sample_limit; a database written before the
 * column existed recorded none), and the smallest and largest limit; -1 on an SQL error. */
static int limited_runs(sqlite3 *db, int *n_runs, int *n_limited, int *lo, int *hi, KvErr *err) {
    sqlite3_stmt *st;
    *n_runs = *n_limited = *lo = *hi = 0;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'sample_limit'", -1, &st,
                           NULL) != SQLITE_OK)
        return kv_fail(err, "reading the runs: %s", sqlite3_errmsg(db));
    int has = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (!has) return 0;
    if (sqlite3_prepare_v2(db, "SELECT count(*), count(sample_limit), coalesce(min(sample_limit), 0), "
                               "coalesce(max(sample_limit), 0)" USED_RUNS, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "reading the runs: %s", sqlite3_errmsg(db));
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *n_runs = sqlite3_column_int(st, 0);
        *n_limited = sqlite3_column_int(st, 1);
        *lo = sqlite3_column_int(st, 2);
        *hi = sqlite3_column_int(st, 3);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : kv_fail(err, "reading the runs: %s", sqlite3_errmsg(db));
}

int report_provenance_load(sqlite3 *db, ReportProvenance *p, KvErr *err) {
    int n;
    memset(p, 0, sizeof *p);
    if (list(db, "SELECT DISTINCT config_name" USED_RUNS " ORDER BY 1", p->configs, sizeof p->configs, &n, err) ||
        list(db, "SELECT git_rev, CASE WHEN git_rev LIKE '%-dirty' THEN 'dirty: uncommitted changes' WHEN git_rev = "
                 "'unknown' THEN 'not built in a git checkout' ELSE 'clean' END FROM (SELECT DISTINCT git_rev" USED_RUNS
                 ") ORDER BY 1",
             p->revisions, sizeof p->revisions, &p->n_revisions, err) ||
        list(db, "SELECT DISTINCT model_name, model_id" USED_RUNS " ORDER BY 1, 2", p->models, sizeof p->models, &n,
             err) ||
        list(db, "SELECT MIN(started) || ' to ' || MAX(COALESCE(finished, started))" USED_RUNS, p->dates,
             sizeof p->dates, &n, err))
        return -1;
    int n_runs, n_limited, lo, hi;
    if (limited_runs(db, &n_runs, &n_limited, &lo, &hi, err)) return -1;
    size_t k = 0;
    if (p->n_revisions > 1)
        k = (size_t)snprintf(p->warning, sizeof p->warning, "Warning: the rows come from %d kvbench revisions (%s); "
                             "code that changed between them may score differently, so compare rows of one revision",
                             p->n_revisions, p->revisions);
    if (n_limited && k < sizeof p->warning) {
        char limit[48];
        if (lo == hi) snprintf(limit, sizeof limit, "%d", lo);
        else snprintf(limit, sizeof limit, "%d to %d", lo, hi);
        snprintf(p->warning + k, sizeof p->warning - k, "%s%d of %d runs were limited (--limit %s): they ran only "
                 "the first %s sample%s of each task, so their scores stand for those samples, not the whole task",
                 k ? ". " : "Warning: ", n_limited, n_runs, limit, limit, hi == 1 ? "" : "s");
    }
    return 0;
}

void report_put_provenance(FILE *f, const ReportProvenance *p, int tex) {
    const char *what[] = {"Configs", "kvbench revisions", "Models (identity)", "Runs"};
    const char *values[] = {p->configs, p->revisions, p->models, p->dates};
    char line[5000];
    for (int i = 0; i < 4; i++) {
        snprintf(line, sizeof line, "%s: %s", what[i], *values[i] ? values[i] : "none recorded");
        if (tex) report_put_tex_comment(f, line);
        else {
            fputs("- ", f);
            report_put_md(f, line);
            fputc('\n', f);
        }
    }
    if (!p->warning[0]) return;
    if (tex) {
        report_put_tex_comment(f, p->warning);
        fputs("\\paragraph{Warning.} ", f);
        report_put_tex(f, p->warning + strlen("Warning: "));
        fputs("\n", f);
    } else {
        fputs("\n**", f);
        report_put_md(f, p->warning);
        fputs("**\n", f);
    }
}
