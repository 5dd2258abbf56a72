/* protected.c — table protected_sets (store/protected.h): per (layer, kv-head) protected and kept counts as
 * little-endian int32 blobs [n_layers][n_kv_heads]. */
#include "protected.h"

#include <stdint.h>
#include <stdio.h>
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

/* A read-only SQLite URI for path: file:, the path percent-encoded where a URI would read it otherwise. */
static void read_only_uri(const char *path, char *out, size_t n) {
    size_t used = (size_t)snprintf(out, n, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p && used + 4 < n; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr("/._-", *p);
        used += (size_t)snprintf(out + used, n - used, plain ? "%c" : "%%%02X", *p);
    }
    snprintf(out + used, n - used, "?mode=ro");
}

int protected_merge(const char *out_path, const char *const *src_paths, int n, KvErr *err) {
    Store *s = NULL;
    if (store_open(&s, out_path, 0, err)) return -1;
    sqlite3 *db = store_handle(s);
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        char uri[4200];
        sqlite3_stmt *st = NULL;
        read_only_uri(src_paths[i], uri, sizeof uri);
        if (sqlite3_prepare_v2(db, "ATTACH DATABASE ? AS psrc", -1, &st, NULL) != SQLITE_OK) {
            rc = db_fail(s, err, "attaching a source of protected sets");
            break;
        }
        sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
        int step = sqlite3_step(st);
        sqlite3_finalize(st);
        if (step != SQLITE_DONE) {
            rc = kv_fail(err, "%s: cannot attach to copy its protected sets: %s", src_paths[i], sqlite3_errmsg(db));
            break;
        }
        int has = 0;
        if (sqlite3_prepare_v2(db, "SELECT 1 FROM psrc.sqlite_schema WHERE name = 'protected_sets'", -1, &st, NULL) ==
            SQLITE_OK)
            has = sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
        if (has && (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
                    sqlite3_exec(db, TABLE, NULL, NULL, NULL) != SQLITE_OK ||
                    sqlite3_exec(db,
                                 "INSERT OR IGNORE INTO main.protected_sets(sample_id, policy, aggregation, params, "
                                 "budget, n_layers, n_kv_heads, protected, kept) SELECT m.id, p.policy, p.aggregation, "
                                 "p.params, p.budget, p.n_layers, p.n_kv_heads, p.protected, p.kept FROM "
                                 "psrc.protected_sets p JOIN psrc.samples x ON x.id = p.sample_id JOIN main.samples m "
                                 "ON m.model = x.model AND m.setup = x.setup AND m.sample_key = x.sample_key",
                                 NULL, NULL, NULL) != SQLITE_OK ||
                    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)) {
            rc = kv_fail(err, "%s: copying its protected sets: %s", src_paths[i], sqlite3_errmsg(db));
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        }
        sqlite3_exec(db, "DETACH DATABASE psrc", NULL, NULL, NULL);
    }
    store_close(s);
    return rc;
}
