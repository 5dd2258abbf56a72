/* policy_cost.c — what each variant's policy cost beside the prefill, from the rows' own times (table results):
 * select_ms is the policy's time for its sample — its observation of the prefill, shared by every budget of one
 * state, and for KVzip the reconstruction pass, a second forward over the context (docs/policies.md) — plus its
 * keep-set's selection; prefill_ms is the sample's one prefill, shared by every variant.
 *
 * policy_cost.md and policy_cost.csv, one row per (model, setup, policy, aggregation, params, budget) over the rows
 * without an error: n rows, the mean context tokens, the mean prefill_ms and select_ms, and the ratio of the two
 * means. Wall-clock times of whatever machine ran each row: a description of the runs, not a benchmark. Nothing is
 * written when no row has a time. */
#include <stdio.h>

#include "writers.h"

#define QUERY                                                                                                      \
    "SELECT s.model, s.setup, r.policy, r.aggregation, r.params, r.budget, COUNT(*), AVG(s.context_tokens), "      \
    "AVG(r.prefill_ms), AVG(r.select_ms) FROM results r JOIN samples s ON s.id = r.sample_id "                    \
    "WHERE r.error IS NULL AND r.prefill_ms IS NOT NULL AND r.select_ms IS NOT NULL "                             \
    "GROUP BY s.model, s.setup, r.policy, r.aggregation, r.params, r.budget "                                     \
    "ORDER BY s.model, s.setup, r.policy, r.aggregation, r.params, r.budget"
enum { Q_KEY_COLUMNS = 6, Q_N = 6, Q_CONTEXT, Q_PREFILL, Q_SELECT };

static const char *col(sqlite3_stmt *st, int c) {
    const unsigned char *t = sqlite3_column_text(st, c);
    return t ? (const char *)t : "";
}

int report_policy_cost(sqlite3 *db, const char *out_dir, FILE *log, KvErr *err) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, QUERY, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "results: %s", sqlite3_errmsg(db));
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? 0 : kv_fail(err, "results: %s", sqlite3_errmsg(db));
    }
    char md_path[1200], csv_path[1200];
    FILE *md, *csv;
    if (report_open_pair(out_dir, "policy_cost", &md, md_path, &csv, csv_path, sizeof md_path, err)) {
        sqlite3_finalize(st);
        return -1;
    }
    fputs("# What each policy cost beside the prefill\n\nPer row: select ms is the policy's time for its sample (its "
          "observation of the prefill, shared by every budget of one state; for kvzip its reconstruction pass, a "
          "second forward over the context) plus its keep-set's selection; prefill ms the sample's one prefill, "
          "shared by every variant. Means over the n rows without an error, in wall-clock milliseconds of whatever "
          "machine ran each row.\n\n| model | setup | policy | aggregation | params | budget | n | context tokens | "
          "prefill ms | select ms | select / prefill |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
          md);
    fputs("model,setup,policy,aggregation,params,budget,n,context_tokens,prefill_ms,select_ms,select_per_prefill\n",
          csv);
    for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
        fputs("| ", md);
        for (int c = 0; c < Q_KEY_COLUMNS; c++) {
            report_put_md(md, col(st, c));
            fputs(" | ", md);
            report_put_csv(csv, col(st, c));
            fputc(',', csv);
        }
        double prefill = sqlite3_column_double(st, Q_PREFILL), select = sqlite3_column_double(st, Q_SELECT);
        int n = sqlite3_column_int(st, Q_N);
        double context = sqlite3_column_double(st, Q_CONTEXT);
        if (prefill > 0) {
            fprintf(md, "%d | %.0f | %.0f | %.1f | %.2f |\n", n, context, prefill, select, select / prefill);
            fprintf(csv, "%d,%.1f,%.3f,%.3f,%.6f\n", n, context, prefill, select, select / prefill);
        } else {
            fprintf(md, "%d | %.0f | %.0f | %.1f | – |\n", n, context, prefill, select);
            fprintf(csv, "%d,%.1f,%.3f,%.3f,\n", n, context, prefill, select);
        }
    }
    int failed = rc != SQLITE_DONE && kv_fail(err, "results: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    int closed = report_close_out(md, md_path, log, failed ? NULL : err);
    int closed_csv = report_close_out(csv, csv_path, log, failed || closed ? NULL : err);
    return failed || closed || closed_csv ? -1 : 0;
}
