/* report.c — the report's driver (report.h): opens the database, loads the data model (model.c) and runs the
 * writers in turn: the tables (tables.c), the fragility tables (traces.c), the forced-set shares
 * (forced_share.c), the policies' cost (policy_cost.c), the figures (figures.c). */
#include "report.h"

#include "../metrics/fragility.h"
#include "../store/store.h"
#include "writers.h"

int report_write(const ReportOptions *opt, KvErr *err) {
    Store *store;
    ReportData data;
    if (opt->resamples && opt->resamples < STATS_MIN_RESAMPLES)
        return kv_fail(err, "--resamples %d: too few for a 95%% interval (at least %d): its bounds are the 2.5%% and "
                            "97.5%% quantiles of the resampled values, which %d resamples cannot place",
                       opt->resamples, STATS_MIN_RESAMPLES, opt->resamples);
    if (store_open(&store, opt->db_path, 1, err)) return -1;
    if (report_load(&data, store_handle(store), opt->db_path, opt->min_n, opt->resamples, err)) {
        store_close(store);
        return -1;
    }
    sqlite3 *db = store_handle(store);
    data.outlier = opt->outlier > 0.0 ? opt->outlier : FRAGILITY_OUTLIER;
    int rc = report_provenance_load(db, &data.prov, err);
    if (!rc && data.prov.warning[0] && opt->log) fprintf(opt->log, "%s: %s\n", opt->db_path, data.prov.warning);
    if (data.n_sections == 0 && !report_has_traces(db))
        rc = kv_fail(err, "%s: no results yet (run `kvbench run CONFIG --db %s` or `kvbench trace CONFIG --db %s` "
                          "first)", opt->db_path, opt->db_path, opt->db_path);
    if (!rc) rc = kv_make_dirs(opt->out_dir, err);
    if (!rc && data.n_sections) rc = report_tables(&data, opt->out_dir, opt->log, err);
    if (!rc) rc = report_trace_tables(db, data.outlier, &data.prov, opt->out_dir, opt->log, err);
    if (!rc) rc = report_forced_share(db, opt->out_dir, opt->log, err);
    if (!rc) rc = report_policy_cost(db, opt->out_dir, opt->log, err);
    if (!rc)
        rc = report_figures(&data, db, opt->out_dir, opt->gnuplot ? opt->gnuplot : "gnuplot",
                            opt->log, err);
    if (!rc && opt->log && data.n_rows && data.n_rows == data.n_failed_rows)
        fprintf(opt->log, "no scores: all %d result rows of %s failed (their errors are counted in %s/report.md)\n",
                data.n_rows, opt->db_path, opt->out_dir);
    report_data_free(&data);
    store_close(store);
    return rc;
}
