/* protected.c — table protected_sets (runs/protected.h): per (layer, kv-head) protected and kept counts as
 * little-endian int32 blobs [n_layers][n_kv_heads]. */
#include "protected.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *TABLE =
    "CREATE TABLE IF NOT EXISTS protected_sets(\n"
    "  id INTEGER PRIMARY KEY, sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  n_layers INTEGER NOT NULL, n_kv_heads INTEGER NOT NULL, protected BLOB NOT NULL, kept BLOB NOT NULL,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget)) STRICT;\n";

static int db_fail(Store *s, KvErr *err, const char *what) {
    return kv_fail(err, "%s: %s: %s", store_path(s), what, sqlite3_errmsg(store_handle(s)));
}

/* counts[n] as little-endian int32 into out. */
static void pack_le(const int *counts, int n, unsigned char *out) {
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)counts[i];
        for (int b = 0; b < 4; b++) out[4 * i + b] = (unsigned char)(v >> (8 * b));
    }
}

int protected_write(Store *s, const char *model, const char *setup, const char *sample_key, const ProtectedSet *sets,
                    int n, KvErr *err) {
    if (n == 0) return 0;
    sqlite3 *db = store_handle(s);
    sqlite3_stmt *st = NULL;
    unsigned char *blob = NULL;
    int rc = -1;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return db_fail(s, err, "protected sets");
    if (sqlite3_exec(db, TABLE, NULL, NULL, NULL) != SQLITE_OK) {
        db_fail(s, err, "creating table protected_sets");
        goto done;
    }
    if (sqlite3_prepare_v2(db,
                           "INSERT OR IGNORE INTO protected_sets(sample_id, policy, aggregation, params, budget, "
                           "n_layers, n_kv_heads, protected, kept) SELECT id, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11 FROM "
                           "samples WHERE model = ?1 AND setup = ?2 AND sample_key = ?3",
                           -1, &st, NULL) != SQLITE_OK) {
        db_fail(s, err, "protected sets");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const ProtectedSet *p = &sets[i];
        int pairs = p->n_layers * p->n_kv_heads;
        free(blob);
        if (!(blob = kv_malloc(8 * (size_t)(pairs ? pairs : 1), err))) goto done;
        pack_le(p->protected_counts, pairs, blob);
        pack_le(p->kept_counts, pairs, blob + 4 * (size_t)pairs);
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, setup, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, sample_key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, p->key.policy, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, p->key.aggregation, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, p->key.params, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 7, p->key.budget, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 8, p->n_layers);
        sqlite3_bind_int(st, 9, p->n_kv_heads);
        sqlite3_bind_blob(st, 10, blob, 4 * pairs, SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 11, blob + 4 * (size_t)pairs, 4 * pairs, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE) {
            db_fail(s, err, "writing protected sets");
            goto done;
        }
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        db_fail(s, err, "committing protected sets");
        goto done;
    }
    rc = 0;
done:
    if (rc) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_finalize(st);
    free(blob);
    return rc;
}
