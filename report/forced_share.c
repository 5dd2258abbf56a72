/* forced_share.c — the share of each value-weighted variant's keep-set that its allocation protects (the
 * safeguard, the forced set, and the window where the allocation protects it; docs/ladder.md), from table
 * protected_sets (store/protected.h). Nothing is written when the database has no such rows.
 *
 * forced_share.md and forced_share.csv, one row per (model, budget, policy, aggregation, params), over every
 * sample of every task: n samples; the mean over samples of the protected share of all kept entries (every
 * layer and kv-head together); of the mean over (layer, kv-head) of each head's protected share of what it
 * keeps; and of the sample's largest layer share. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "writers.h"

#define QUERY                                                                                                      \
    "SELECT s.model, p.budget, p.policy, p.aggregation, p.params, p.n_layers, p.n_kv_heads, p.protected, p.kept " \
    "FROM protected_sets p JOIN samples s ON s.id = p.sample_id "                                                  \
    "ORDER BY s.model, p.budget, p.policy, p.aggregation, p.params, s.id"
enum { Q_MODEL, Q_BUDGET, Q_POLICY, Q_AGG, Q_PARAMS, Q_LAYERS, Q_HEADS, Q_PROTECTED, Q_KEPT, Q_KEY_COLUMNS = 5 };

typedef struct {
    int n;                       /* samples */
    double model, head, layer;   /* sums over samples of the three shares */
} Group;

static const char *col(sqlite3_stmt *st, int c) {
    const unsigned char *t = sqlite3_column_text(st, c);
    return t ? (const char *)t : "";
}

static int le_int(const unsigned char *p) {
    return (int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* One sample's three shares into g; -1 when its blobs do not hold n_layers x n_kv_heads counts. */
static int add_sample(sqlite3_stmt *st, Group *g) {
    long long layers = sqlite3_column_int64(st, Q_LAYERS), heads = sqlite3_column_int64(st, Q_HEADS);
    const unsigned char *prot = sqlite3_column_blob(st, Q_PROTECTED), *kept = sqlite3_column_blob(st, Q_KEPT);
    if (layers < 1 || heads < 1 || layers * heads > (1 << 24) ||
        sqlite3_column_bytes(st, Q_PROTECTED) != 4 * layers * heads ||
        sqlite3_column_bytes(st, Q_KEPT) != 4 * layers * heads)
        return -1;
    double all_prot = 0, all_kept = 0, head_share = 0, layer_max = 0;
    int n_heads = 0;
    for (long long l = 0; l < layers; l++) {
        double lp = 0, lk = 0;
        for (long long k = 0; k < heads; k++) {
            int p = le_int(prot + 4 * (l * heads + k)), c = le_int(kept + 4 * (l * heads + k));
            lp += p, lk += c;
            if (c > 0) head_share += (double)p / c, n_heads++;
        }
        all_prot += lp, all_kept += lk;
        if (lk > 0 && lp / lk > layer_max) layer_max = lp / lk;
    }
    g->model += all_kept > 0 ? all_prot / all_kept : 0;
    g->head += n_heads ? head_share / n_heads : 0;
    g->layer += layer_max;
    g->n++;
    return 0;
}

static void write_row(FILE *md, FILE *csv, char *const key[Q_KEY_COLUMNS], const Group *g) {
    fputs("| ", md);
    for (int c = 0; c < Q_KEY_COLUMNS; c++) {
        report_put_md(md, key[c]);
        fputs(" | ", md);
        report_put_csv(csv, key[c]);
        fputc(',', csv);
    }
    fprintf(md, "%d | %.1f%% | %.1f%% | %.1f%% |\n", g->n, 100 * g->model / g->n, 100 * g->head / g->n,
            100 * g->layer / g->n);
    fprintf(csv, "%d,%.6f,%.6f,%.6f\n", g->n, g->model / g->n, g->head / g->n, g->layer / g->n);
}

int report_forced_share(sqlite3 *db, const char *out_dir, FILE *log, KvErr *err) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, QUERY, -1, &st, NULL) != SQLITE_OK) return 0; /* no table: nothing to show */
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? 0 : kv_fail(err, "protected_sets: %s", sqlite3_errmsg(db));
    }
    char md_path[1200], csv_path[1200];
    FILE *md, *csv;
    if (report_open_pair(out_dir, "forced_share", &md, md_path, &csv, csv_path, sizeof md_path, err)) {
        sqlite3_finalize(st);
        return -1;
    }
    fputs("# The protected share of each variant's keep-set\n\nPer sample: of every entry a value-weighted variant "
          "kept, the share its allocation protects whatever the entry's value-weighted score (the safeguard, the "
          "forced set, and the window where the allocation protects it: docs/ladder.md), over all layers and "
          "kv-heads (model share); the mean over (layer, kv-head) of each head's protected share of what it keeps "
          "(head share); and the largest layer's share (largest layer). Each column is the mean over the n samples "
          "of every task.\n\n| model | budget | policy | aggregation | params | n | model share | head share | "
          "largest layer |\n|---|---|---|---|---|---|---|---|---|\n",
          md);
    fputs("model,budget,policy,aggregation,params,n,model_share,head_share,largest_layer_share\n", csv);
    char *key[Q_KEY_COLUMNS] = {0};
    Group g = {0};
    int failed = 0;
    for (; rc == SQLITE_ROW && !failed; rc = sqlite3_step(st)) {
        int same = key[0] != NULL;
        for (int c = 0; same && c < Q_KEY_COLUMNS; c++) same = !strcmp(key[c], col(st, c));
        if (!same) {
            if (g.n) write_row(md, csv, key, &g);
            g = (Group){0};
            for (int c = 0; c < Q_KEY_COLUMNS; c++) {
                free(key[c]);
                key[c] = strdup(col(st, c));
                failed |= key[c] == NULL;
            }
        }
        if (!failed && add_sample(st, &g)) {
            failed = 1;
            kv_fail(err, "protected_sets: a row of %s %s holds counts of another shape than %lld x %lld",
                    col(st, Q_POLICY), col(st, Q_PARAMS), sqlite3_column_int64(st, Q_LAYERS),
                    sqlite3_column_int64(st, Q_HEADS));
        }
    }
    if (!failed && rc != SQLITE_DONE) failed = kv_fail(err, "protected_sets: %s", sqlite3_errmsg(db)) != 0;
    if (!failed && g.n) write_row(md, csv, key, &g);
    for (int c = 0; c < Q_KEY_COLUMNS; c++) free(key[c]);
    sqlite3_finalize(st);
    int closed = report_close_out(md, md_path, log, err);
    int closed_csv = report_close_out(csv, csv_path, log, failed || closed ? NULL : err);
    return failed || closed || closed_csv ? -1 : 0;
}
