/* store.c — the SQLite results database: schema, one transaction per sample (results or traces), resume
 * lookups and identity checks, merge.
 *
 * Durability comes from SQLite, not from us: WAL journal, synchronous=NORMAL (a committed sample survives a
 * killed process; a power cut may lose the last few), BEGIN IMMEDIATE so concurrent shard processes on one
 * file queue instead of failing, busy_timeout for the wait. Tables are STRICT, so a wrong type is an error
 * at insert time rather than a surprise in the report. Damage is looked for when a database is opened
 * (PRAGMA quick_check: every page and index entry well-formed, without the slower cross-checks of
 * integrity_check), so rows are never appended to a broken file. */
#include "store.h"

#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct Store {
    sqlite3 *db;
    char path[1024];
    int last_written;  /* rows the last write added */
    int last_replaced; /* failed rows the last write replaced */
};

/* The columns each table is written with (also what a merge copies), in one place. */
#define RUN_COLUMNS                                                                                             \
    "uuid, config_name, config, config_hash, git_rev, model_name, model_path, model_id, tokenizer, backend, " \
    "host, shard, started, finished"
/* A sample's key, what describes it (replaced by a retry while it has no successful row), its identities. */
#define SAMPLE_KEY_COLUMNS "model, setup, sample_key"
#define SAMPLE_DESCRIPTION_COLUMNS                                                                              \
    "suite, task, domain, metric, idx, depth_percent, target_tokens, context_tokens, question_tokens, answers, " \
    "note"
#define SAMPLE_COLUMNS SAMPLE_KEY_COLUMNS ", " SAMPLE_DESCRIPTION_COLUMNS ", model_id, data_id, over_length"
#define SAMPLE_RETRY_COLUMNS "run_id, " SAMPLE_DESCRIPTION_COLUMNS ", over_length"
/* A result's key (with its sample) and its outcome (replaced when a failed row is run again). */
#define RESULT_KEY_COLUMNS "policy, aggregation, params, budget"
#define RESULT_OUTCOME_COLUMNS                                                                                  \
    "keep_fraction, budget_tokens, kept_tokens, prediction, score, generated_tokens, prefill_ms, select_ms, "  \
    "decode_ms, error, kept_fraction"
#define RESULT_COLUMNS RESULT_KEY_COLUMNS ", " RESULT_OUTCOME_COLUMNS
#define TRACE_COLUMNS "policy, aggregation, params, budget, window, step, mean_r, min_r"
#define TRACE_HEAD_COLUMNS "policy, aggregation, params, budget, step, n_layers, n_kv_heads, r"
#define TRACE_SET_COLUMNS "policy, aggregation, params, budget, kept, clamped_kept"

static const char *SCHEMA =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;\n"
    /* One row per kvbench run invocation and model. */
    "CREATE TABLE runs(\n"
    "  id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE,\n"
    "  config_name TEXT NOT NULL, config TEXT NOT NULL, config_hash TEXT NOT NULL, git_rev TEXT NOT NULL,\n"
    "  model_name TEXT NOT NULL, model_path TEXT NOT NULL, model_id TEXT NOT NULL, tokenizer TEXT NOT NULL,\n"
    "  backend TEXT NOT NULL, host TEXT NOT NULL, shard TEXT, started TEXT NOT NULL, finished TEXT,\n"
    "  sample_limit INTEGER) STRICT;\n"
    "CREATE TABLE samples(\n"
    "  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),\n"
    "  model TEXT NOT NULL, setup TEXT NOT NULL, sample_key TEXT NOT NULL,\n"
    "  suite TEXT NOT NULL, task TEXT NOT NULL, domain TEXT, metric TEXT, idx INTEGER NOT NULL,\n"
    "  depth_percent REAL, target_tokens INTEGER, context_tokens INTEGER, question_tokens INTEGER,\n"
    "  answers TEXT, note TEXT, model_id TEXT NOT NULL, data_id TEXT NOT NULL, over_length INTEGER,\n"
    "  UNIQUE(model, setup, sample_key)) STRICT;\n"
    /* The data identity check looks samples up by task. */
    "CREATE INDEX samples_task ON samples(model, setup, suite, task);\n"
    "CREATE TABLE results(\n"
    "  id INTEGER PRIMARY KEY, sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  keep_fraction REAL, budget_tokens INTEGER, kept_tokens REAL, prediction TEXT, score REAL,\n"
    "  generated_tokens INTEGER, prefill_ms REAL, select_ms REAL, decode_ms REAL, error TEXT, kept_fraction REAL,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget)) STRICT;\n"
    /* kvbench trace: retained importance per decode step (docs/fragility.md); the run that traced it. */
    "CREATE TABLE traces(\n"
    "  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),\n"
    "  sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  window INTEGER NOT NULL, step INTEGER NOT NULL, mean_r REAL NOT NULL, min_r REAL NOT NULL,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget, step)) STRICT;\n"
    /* The traces rows' per-head values: R_t(l, k) of every (layer, kv-head), r = little-endian float32
     * [n_layers][n_kv_heads] (metrics/fragility.h), so both outlier notions can be counted at any threshold. */
    "CREATE TABLE trace_heads(\n"
    "  id INTEGER PRIMARY KEY, sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  step INTEGER NOT NULL, n_layers INTEGER NOT NULL, n_kv_heads INTEGER NOT NULL, r BLOB NOT NULL,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget, step)) STRICT;\n"
    /* A traced keep-set: its entries, and those the max+prior prior raised to the head mean (ties; NULL: not
     * max+prior). */
    "CREATE TABLE trace_sets(\n"
    "  id INTEGER PRIMARY KEY, sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  kept INTEGER NOT NULL, clamped_kept INTEGER,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget)) STRICT;\n";

/* The views, also rewritten when a writable store opens an older database (views hold no data, so an older
 * definition is replaced, never migrated). Task averages on the 0-100 scale: n counts the rows the score is
 * the mean of (scored rows), failed rows are excluded from it and counted in n_failed. */
static const char *VIEWS =
    "DROP VIEW IF EXISTS domain_scores;\nDROP VIEW IF EXISTS task_scores;\n"
    "CREATE VIEW task_scores AS\n"
    "  SELECT s.model, s.setup, s.suite, s.task, MAX(s.domain) AS domain, r.policy, r.aggregation, r.params,\n"
    "         r.budget, MAX(r.keep_fraction) AS keep_fraction, COUNT(r.score) AS n,\n"
    "         SUM(r.error IS NOT NULL) AS n_failed, 100.0 * AVG(r.score) AS score\n"
    "  FROM results r JOIN samples s ON s.id = r.sample_id\n"
    "  GROUP BY s.model, s.setup, s.suite, s.task, r.policy, r.aggregation, r.params, r.budget;\n"
    /* Domain averages: the unweighted mean of the domain's task averages. */
    "CREATE VIEW domain_scores AS\n"
    "  SELECT model, setup, suite, domain, policy, aggregation, params, budget, MAX(keep_fraction) AS keep_fraction,\n"
    "         COUNT(*) AS n_tasks, AVG(score) AS score\n"
    "  FROM task_scores GROUP BY model, setup, suite, domain, policy, aggregation, params, budget;\n";

static int db_fail(Store *s, KvErr *err, const char *what) {
    return kv_fail(err, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static int exec(Store *s, const char *sql, KvErr *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        kv_fail(err, "%s: %s", s->path, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* Switches the database to WAL. Two processes opening one new database at once can deadlock on it, each holding
 * a read lock the other must see go; SQLite then answers SQLITE_BUSY to one of them at once, without calling
 * its busy handler (sqlite3_busy_handler's documentation), so that one waits and tries again, up to the busy
 * timeout's 30 s. */
static int set_wal(Store *s, KvErr *err) {
    int rc;
    for (int waited_ms = 0; ((rc = sqlite3_exec(s->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL)) & 0xff) ==
                                SQLITE_BUSY && waited_ms < 30000;
         waited_ms += 20)
        sqlite3_sleep(20);
    if (rc != SQLITE_OK) return kv_fail(err, "%s: cannot switch to WAL: %s", s->path, sqlite3_errmsg(s->db));
    return 0;
}

/* The value of a one-row, one-column text query into out ("" if no row); -1 on an SQL error. */
static int query_text(Store *s, const char *sql, char *out, size_t n, KvErr *err) {
    sqlite3_stmt *st;
    out[0] = 0;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(s, err, "reading the schema");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_fail(s, err, "reading the schema");
    return 0;
}

/* Columns added to a table of schema version 2 after its first databases were written (nullable: NULL is what
 * such a database's rows did not record): a writable open adds them, a read-only one reads the file without. */
static const char *const ADDED_COLUMNS[][2] = {{"runs", "sample_limit"}};
#define N_ADDED_COLUMNS (int)(sizeof ADDED_COLUMNS / sizeof ADDED_COLUMNS[0])

/* Whether table `table` of `schema` has column `column` (*has); -1 on an SQL error. */
static int has_column(Store *s, const char *schema, const char *table, const char *column, int *has, KvErr *err) {
    char sql[200], count[32];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('%s', '%s') WHERE name = '%s'", table, schema,
             column);
    if (query_text(s, sql, count, sizeof count, err)) return -1;
    *has = strcmp(count, "0") != 0;
    return 0;
}

/* Adds the columns of ADDED_COLUMNS a database of an earlier build lacks (inside the caller's transaction). */
static int add_columns(Store *s, KvErr *err) {
    for (int i = 0; i < N_ADDED_COLUMNS; i++) {
        char sql[200];
        int has;
        if (has_column(s, "main", ADDED_COLUMNS[i][0], ADDED_COLUMNS[i][1], &has, err)) return -1;
        snprintf(sql, sizeof sql, "ALTER TABLE main.%s ADD COLUMN %s INTEGER", ADDED_COLUMNS[i][0],
                 ADDED_COLUMNS[i][1]);
        if (!has && exec(s, sql, err)) return -1;
    }
    return 0;
}

/* Checks (or, for an empty writable database, creates) the schema. `schema` is "main" or an attached name. */
static int check_schema(Store *s, const char *schema, const char *label, int may_create, KvErr *err) {
    char sql[256], version[64], count[32];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.sqlite_schema", schema);
    if (query_text(s, sql, count, sizeof count, err)) return -1;
    if (!strcmp(count, "0")) {
        if (!may_create) return kv_fail(err, "%s: empty database (not written by kvbench run)", label);
        snprintf(sql, sizeof sql, "INSERT INTO meta VALUES('schema_version', '%d'), ('created_by', 'kvbench');",
                 STORE_SCHEMA_VERSION);
        if (exec(s, "BEGIN IMMEDIATE", err)) return -1;
        /* Two runs starting on one new file: the second finds the schema once it holds the write lock. */
        if (query_text(s, "SELECT count(*) FROM main.sqlite_schema", count, sizeof count, err) ||
            (!strcmp(count, "0") && (exec(s, SCHEMA, err) || exec(s, VIEWS, err) || exec(s, sql, err))) ||
            exec(s, "COMMIT", err)) {
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return kv_wrap(err, "creating the schema");
        }
        if (strcmp(count, "0")) return check_schema(s, schema, label, 0, err);
        return 0;
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.sqlite_schema WHERE name = 'meta'", schema);
    if (query_text(s, sql, count, sizeof count, err)) return -1;
    if (strcmp(count, "1")) return kv_fail(err, "%s: not a kvbench results database (no meta table)", label);
    snprintf(sql, sizeof sql, "SELECT value FROM %s.meta WHERE key = 'schema_version'", schema);
    if (query_text(s, sql, version, sizeof version, err)) return -1;
    if (atoi(version) != STORE_SCHEMA_VERSION)
        return kv_fail(err, "%s: database schema version %s, this kvbench reads version %d (use the kvbench that "
                            "wrote it, or a new --db)", label, version[0] ? version : "(none)", STORE_SCHEMA_VERSION);
    if (may_create && !strcmp(schema, "main")) {
        if (exec(s, "BEGIN IMMEDIATE", err) || add_columns(s, err) || exec(s, VIEWS, err) || exec(s, "COMMIT", err)) {
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return kv_wrap(err, "updating the views");
        }
    }
    return 0;
}

/* A file: URI for path with `query` ("mode=ro", "immutable=1"): bytes outside [A-Za-z0-9/._~-] percent-encoded,
 * so '?', '#' and '%' in a file name stay part of it, and leading slashes collapsed so "//x" is no authority. */
static int file_uri(const char *path, const char *query, char *out, size_t n, KvErr *err) {
    static const char HEX[] = "0123456789ABCDEF";
    const char *name = path;
    size_t k = (size_t)snprintf(out, n, "file:");
    while (path[0] == '/' && path[1] == '/') path++;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (k + 4 >= n) return kv_fail(err, "%s: path too long", name);
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("/._~-", *p))
            out[k++] = (char)*p;
        else {
            out[k++] = '%';
            out[k++] = HEX[*p >> 4];
            out[k++] = HEX[*p & 15];
        }
    }
    if (snprintf(out + k, n - k, "?%s", query) >= (int)(n - k)) return kv_fail(err, "%s: path too long", name);
    return 0;
}

/* The URI a database is read through without writing anything: immutable (no locks, no -shm, no -wal: what a
 * read-only directory or medium needs) when it has no write-ahead log; a log means a writer is at work or was
 * killed, whose committed rows are in the log only, so it is read as a live database (mode=ro). */
static int read_only_uri(const char *path, char *out, size_t n, KvErr *err) {
    char wal[1100];
    snprintf(wal, sizeof wal, "%s-wal", path);
    return file_uri(path, access(wal, F_OK) == 0 ? "mode=ro" : "immutable=1", out, n, err);
}

/* PRAGMA quick_check of `schema`: one line naming the damage, before anything reads or writes rows. A file
 * that cannot be read at all (no permission, a log it cannot share) is said so, not called damaged. */
static int check_damage(Store *s, const char *schema, const char *label, KvErr *err) {
    char sql[64], result[512] = "";
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "PRAGMA %s.quick_check(1)", schema);
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
            snprintf(result, sizeof result, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    if (rc == SQLITE_ROW && !strcmp(result, "ok")) return 0;
    if (rc != SQLITE_ROW && (rc & 0xff) != SQLITE_CORRUPT && (rc & 0xff) != SQLITE_NOTADB) {
        char wal[1100];
        snprintf(wal, sizeof wal, "%s-wal", label);
        return kv_fail(err, "%s: cannot read the database: %s%s", label, sqlite3_errmsg(s->db),
                       access(wal, F_OK) ? "" : " (it has a write-ahead log, -wal, from a run writing it or killed: "
                                                "reading that needs its -shm file or a writable directory; copy the "
                                                "database with its -wal file to a writable place)");
    }
    if ((rc & 0xff) == SQLITE_NOTADB) return kv_fail(err, "%s: not an SQLite database", label);
    return kv_fail(err, "%s: the database is damaged (quick_check: %s); nothing was done with it: restore it from a "
                        "copy, or use a new --db", label, rc == SQLITE_ROW ? result : sqlite3_errmsg(s->db));
}

/* ---------------------------------------------------------------- what a database holds */

/* The first row of `sql` (columns: table, rowid, problem), if any, refused in one line naming the database, the
 * table and the row. */
static int no_rows(Store *s, const char *label, const char *sql, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "%s: not a kvbench results database: %s", label, sqlite3_errmsg(s->db));
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        kv_fail(err, "%s: table %s, row %lld: %s (a damaged or foreign database: nothing was done with it)", label,
                (const char *)sqlite3_column_text(st, 0), (long long)sqlite3_column_int64(st, 1),
                (const char *)sqlite3_column_text(st, 2));
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : kv_fail(err, "%s: cannot read the database: %s", label, sqlite3_errmsg(s->db));
}

/* Every column of the kvbench schema present in `schema` with values of its declared type (and no NULL where
 * the schema says NOT NULL): kvbench's tables are STRICT, but a database made elsewhere (a non-STRICT copy, an
 * edited file) can hold a text score, which the report would read as 0, or a NULL identity, which compares as
 * neither equal nor different. The columns are read from SCHEMA itself, in a private in-memory database, so
 * this check and the tables store_open creates cannot drift apart. */
static int check_columns(Store *s, const char *schema, const char *label, KvErr *err) {
    sqlite3 *ref = NULL;
    sqlite3_stmt *cols = NULL;
    char *sql = NULL;
    int rc = -1;
    if (sqlite3_open(":memory:", &ref) != SQLITE_OK || sqlite3_exec(ref, SCHEMA, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(ref, "SELECT m.name, c.name, c.type, c.\"notnull\" FROM sqlite_schema m, "
                                "pragma_table_info(m.name) c WHERE m.type = 'table' ORDER BY m.name, c.cid",
                           -1, &cols, NULL) != SQLITE_OK) {
        kv_fail(err, "%s: cannot build the schema to compare with: %s", label, ref ? sqlite3_errmsg(ref) : "no memory");
        goto done;
    }
    /* One query per table: SELECT 'table', rowid, <the first bad column, said> FROM schema.table WHERE ... */
    char table[64] = "";
    size_t cap = 1 << 14, len = 0;
    sql = kv_malloc(cap, err);
    if (!sql) goto done;
    for (int more = sqlite3_step(cols) == SQLITE_ROW;;) {
        const char *t = more ? (const char *)sqlite3_column_text(cols, 0) : "";
        if (strcmp(t, table)) {
            if (table[0]) {
                len += (size_t)snprintf(sql + len, cap - len, " END AS bad FROM %s.%s AS %s) WHERE bad IS NOT NULL "
                                        "LIMIT 1", schema, table, table);
                if (len >= cap) {
                    kv_fail(err, "%s: schema check too long", label);
                    goto done;
                }
                if (no_rows(s, label, sql, err)) goto done;
            }
            if (!more) break;
            snprintf(table, sizeof table, "%s", t);
            len = (size_t)snprintf(sql, cap, "SELECT '%s', rowid, bad FROM (SELECT %s.rowid, CASE", table, table);
        }
        const char *c = (const char *)sqlite3_column_text(cols, 1), *type = (const char *)sqlite3_column_text(cols, 2);
        int notnull = sqlite3_column_int(cols, 3), added = 0, present = 1;
        for (int i = 0; i < N_ADDED_COLUMNS; i++)
            added |= !strcmp(table, ADDED_COLUMNS[i][0]) && !strcmp(c, ADDED_COLUMNS[i][1]);
        if (added && has_column(s, schema, table, c, &present, err)) goto done;
        if (!present) {
            more = sqlite3_step(cols) == SQLITE_ROW;
            continue;
        }
        const char *allowed = !strcmp(type, "TEXT") ? "'text'" : !strcmp(type, "INTEGER") ? "'integer'"
                              : !strcmp(type, "REAL") ? "'real', 'integer'" : "'blob'";
        /* Qualified (table.column): a missing column is an error, where a bare "name" would read as a string. */
        len += (size_t)snprintf(sql + len, cap - len,
                                " WHEN typeof(%s.\"%s\") NOT IN (%s%s) THEN 'column %s holds ' || "
                                "CASE typeof(%s.\"%s\") WHEN 'null' THEN 'NULL' ELSE typeof(%s.\"%s\") || ' ' || "
                                "substr(quote(%s.\"%s\"), 1, 40) END || ', expected %s%s'",
                                table, c, allowed, notnull ? "" : ", 'null'", c, table, c, table, c, table, c, type,
                                notnull ? " NOT NULL" : "");
        more = sqlite3_step(cols) == SQLITE_ROW;
    }
    rc = 0;
done:
    free(sql);
    sqlite3_finalize(cols);
    sqlite3_close(ref);
    return rc;
}

/* The rows' references and the trace rows' own consistency, which the report and a merge rely on: every row's
 * run and sample exist; a trace_heads row holds n_layers x n_kv_heads float32 values (each at most 65536, so
 * no count derived from them can wrap) and belongs to a traces row of the same step; steps and windows are not
 * negative. */
static int check_consistency(Store *s, const char *schema, const char *label, KvErr *err) {
    char sql[1200];
    snprintf(sql, sizeof sql, "SELECT \"table\", rowid, 'refers to a ' || parent || ' row that does not exist' FROM "
                              "pragma_foreign_key_check(NULL, '%s') LIMIT 1", schema);
    if (no_rows(s, label, sql, err)) return -1;
    snprintf(sql, sizeof sql,
             "SELECT 'trace_heads', h.id, CASE WHEN h.n_layers NOT BETWEEN 1 AND 65536 OR h.n_kv_heads NOT BETWEEN 1 "
             "AND 65536 THEN 'n_layers ' || h.n_layers || ', n_kv_heads ' || h.n_kv_heads || ' outside 1..65536' "
             "WHEN length(h.r) != 4 * h.n_layers * h.n_kv_heads THEN 'r has ' || length(h.r) || ' bytes for ' || "
             "h.n_layers || ' x ' || h.n_kv_heads || ' heads' ELSE 'no traces row of its step' END "
             "FROM %s.trace_heads h WHERE h.n_layers NOT BETWEEN 1 AND 65536 OR h.n_kv_heads NOT BETWEEN 1 AND 65536 "
             "OR length(h.r) != 4 * h.n_layers * h.n_kv_heads OR NOT EXISTS (SELECT 1 FROM %s.traces t WHERE "
             "t.sample_id = h.sample_id AND t.policy = h.policy AND t.aggregation = h.aggregation AND "
             "t.params = h.params AND t.budget = h.budget AND t.step = h.step) LIMIT 1", schema, schema);
    if (no_rows(s, label, sql, err)) return -1;
    snprintf(sql, sizeof sql, "SELECT 'traces', id, 'step ' || step || ', window ' || window || ': negative' FROM "
                              "%s.traces WHERE step < 0 OR window < 0 LIMIT 1", schema);
    return no_rows(s, label, sql, err);
}

/* A directory or device where a database file belongs, said in one line (SQLite would say "disk I/O error"). */
static int not_a_file(const char *path, const struct stat *st, KvErr *err) {
    if (S_ISREG(st->st_mode)) return 0;
    return kv_fail(err, "%s: is %s, not a database file", path,
                   S_ISDIR(st->st_mode) ? "a directory" : "not a regular file");
}

int store_open(Store **out, const char *path, int readonly, KvErr *err) {
    *out = NULL;
    Store *s = kv_calloc(1, sizeof *s, err);
    if (!s) return -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    char uri[3200];
    struct stat st;
    int exists = stat(path, &st) == 0;
    if ((readonly && !exists) || (exists && not_a_file(path, &st, err))) {
        if (!exists) kv_fail(err, "%s: cannot open database: %s", path, strerror(errno));
        free(s);
        return -1;
    }
    if (readonly ? read_only_uri(path, uri, sizeof uri, err) : file_uri(path, "mode=rwc", uri, sizeof uri, err)) {
        free(s);
        return -1;
    }
    int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_URI;
    if (sqlite3_open_v2(uri, &s->db, flags, NULL) != SQLITE_OK) {
        kv_fail(err, "%s: cannot open database: %s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
        store_close(s);
        return -1;
    }
    sqlite3_busy_timeout(s->db, 30000);
    sqlite3_extended_result_codes(s->db, 1);
    if (!readonly && sqlite3_db_readonly(s->db, "main") == 1) {
        kv_fail(err, "%s: the database is read-only (check the file's and its directory's permissions)", path);
        store_close(s);
        return -1;
    }
    if (check_damage(s, "main", path, err) || exec(s, "PRAGMA foreign_keys = ON", err) ||
        (!readonly && (set_wal(s, err) || exec(s, "PRAGMA synchronous = NORMAL", err))) ||
        check_schema(s, "main", path, !readonly, err) || check_columns(s, "main", path, err) ||
        check_consistency(s, "main", path, err)) {
        store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void store_close(Store *s) {
    if (!s) return;
    sqlite3_close(s->db);
    free(s);
}

sqlite3 *store_handle(Store *s) { return s->db; }
const char *store_path(const Store *s) { return s->path; }

/* ---------------------------------------------------------------- runs */

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
    if (v) sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, i);
}

/* A variant's key (policy, aggregation, params, budget) at parameters first .. first + 3. */
static void bind_key(sqlite3_stmt *st, int first, const StoreVariantKey *k) {
    bind_text(st, first, k->policy);
    bind_text(st, first + 1, k->aggregation);
    bind_text(st, first + 2, k->params);
    bind_text(st, first + 3, k->budget);
}

/* Steps a statement that returns no rows and finalizes it. */
static int step_done(Store *s, sqlite3_stmt *st, const char *what, KvErr *err) {
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        db_fail(s, err, what);
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    return 0;
}

static void random_uuid(char *out, size_t n) {
    unsigned char bytes[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(bytes, 1, sizeof bytes, f) != sizeof bytes) {
        /* No urandom: time and address bits are unique enough for a run id. */
        unsigned long long t = (unsigned long long)time(NULL) ^ (unsigned long long)(size_t)out;
        memcpy(bytes, &t, sizeof t);
    }
    if (f) fclose(f);
    size_t k = 0;
    for (int i = 0; i < 16 && k + 3 <= n; i++) k += (size_t)snprintf(out + k, n - k, "%02x", bytes[i]);
}

int store_begin_run(Store *s, const StoreRun *r, long long *run_id, KvErr *err) {
    sqlite3_stmt *st;
    char uuid[40];
    random_uuid(uuid, sizeof uuid);
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO runs(" RUN_COLUMNS ", sample_limit) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,"
                           "strftime('%Y-%m-%dT%H:%M:%SZ','now'), NULL, ?)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "recording the run");
    const char *values[] = {uuid,           r->config_name, r->config_text, r->config_hash, r->git_rev,
                            r->model_name,  r->model_path,  r->model_id, r->tokenizer,  r->backend,
                            r->host,        r->shard};
    for (int i = 0; i < 12; i++) bind_text(st, i + 1, values[i]);
    if (r->sample_limit > 0) sqlite3_bind_int(st, 13, r->sample_limit);
    else sqlite3_bind_null(st, 13);
    if (step_done(s, st, "recording the run", err)) return -1;
    *run_id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_end_run(Store *s, long long run_id, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "UPDATE runs SET finished = strftime('%Y-%m-%dT%H:%M:%SZ','now') WHERE id = ?", -1,
                           &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "closing the run");
    sqlite3_bind_int64(st, 1, run_id);
    return step_done(s, st, "closing the run", err);
}

/* ---------------------------------------------------------------- samples and results */

/* done[i] = 1 where the sample has a row of `table` (results or traces) for keys[i]; failed results (with an
 * error) do not count, so a resume retries them. */
static int has_rows(Store *s, const char *table, const char *model, const char *setup, const char *sample_key,
                    const StoreVariantKey *keys, int n_keys, unsigned char *done, KvErr *err) {
    sqlite3_stmt *st;
    char sql[320];
    memset(done, 0, (size_t)n_keys);
    snprintf(sql, sizeof sql,
             "SELECT DISTINCT r.policy, r.aggregation, r.params, r.budget FROM %s r JOIN samples m "
             "ON m.id = r.sample_id WHERE m.model = ? AND m.setup = ? AND m.sample_key = ?%s", table,
             strcmp(table, "results") ? "" : " AND r.error IS NULL");
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(s, err, "looking up finished rows");
    bind_text(st, 1, model);
    bind_text(st, 2, setup);
    bind_text(st, 3, sample_key);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *col[4];
        for (int c = 0; c < 4; c++) col[c] = (const char *)sqlite3_column_text(st, c);
        for (int i = 0; i < n_keys; i++)
            if (!strcmp(col[0], keys[i].policy) && !strcmp(col[1], keys[i].aggregation) &&
                !strcmp(col[2], keys[i].params) && !strcmp(col[3], keys[i].budget))
                done[i] = 1;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_fail(s, err, "looking up finished rows");
}

int store_finished(Store *s, const char *model, const char *setup, const char *sample_key, const StoreVariantKey *keys,
                   int n_keys, unsigned char *done, KvErr *err) {
    return has_rows(s, "results", model, setup, sample_key, keys, n_keys, done, err);
}

int store_traced(Store *s, const char *model, const char *setup, const char *sample_key, const StoreVariantKey *keys,
                 int n_keys, unsigned char *done, KvErr *err) {
    return has_rows(s, "traces", model, setup, sample_key, keys, n_keys, done, err);
}

/* Runs `sql` with text parameters binds[n] and copies the columns of its first row into outs[i] (sizes[i]
 * bytes each; "" when there is no row). */
static int first_row(Store *s, const char *sql, const char *const *binds, int n, char **outs, const size_t *sizes,
                     int n_outs, const char *what, KvErr *err) {
    sqlite3_stmt *st;
    for (int i = 0; i < n_outs; i++) outs[i][0] = 0;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(s, err, what);
    for (int i = 0; i < n; i++) bind_text(st, i + 1, binds[i]);
    int rc = sqlite3_step(st);
    for (int i = 0; rc == SQLITE_ROW && i < n_outs; i++)
        snprintf(outs[i], sizes[i], "%s", sqlite3_column_text(st, i) ? (const char *)sqlite3_column_text(st, i) : "");
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(s, err, what);
}

int store_check_model(Store *s, const char *model, const char *model_id, char *stored, size_t stored_size,
                      char *stored_path, size_t path_size, KvErr *err) {
    const char *binds[] = {model, model_id};
    char *outs[] = {stored, stored_path};
    size_t sizes[] = {stored_size, path_size};
    return first_row(s,
                     "SELECT m.model_id, coalesce((SELECT r.model_path FROM runs r WHERE r.model_name = m.model AND "
                     "r.model_id = m.model_id ORDER BY r.id DESC LIMIT 1), '?') FROM samples m "
                     "WHERE m.model = ?1 AND m.model_id != ?2 LIMIT 1",
                     binds, 2, outs, sizes, 2, "checking the model's identity", err);
}

int store_check_data(Store *s, const char *model, const char *setup, const char *suite, const char *task,
                     const char *data_id, char *stored, size_t stored_size, KvErr *err) {
    const char *binds[] = {model, setup, suite, task, data_id};
    return first_row(s,
                     "SELECT data_id FROM samples WHERE model = ? AND setup = ? AND suite = ? AND task = ? "
                     "AND data_id != ? LIMIT 1",
                     binds, 5, &stored, &stored_size, 1, "checking the data's identity", err);
}

void store_identity_change(const char *was, const char *now, char *out, size_t size) {
    /* Both lists pair by pair; the first pair that differs names the change. */
    for (const char *a = was, *b = now; *a || *b;) {
        size_t la = strcspn(a, ","), lb = strcspn(b, ",");
        if (la != lb || strncmp(a, b, la)) {
            if (memchr(a, '=', la) && memchr(b, '=', lb))
                snprintf(out, size, "%.*s -> %.*s", (int)la, a, (int)lb, b);
            else
                snprintf(out, size, "%s -> %s", was[0] ? was : "(none)", now[0] ? now : "(none)");
            return;
        }
        a += la + (a[la] == ',');
        b += lb + (b[lb] == ',');
    }
    snprintf(out, size, "(no change)");
}

/* The SET list of an upsert, "a = excluded.a, b = excluded.b", and the "?,?" of an INSERT, each written from
 * the comma-separated column list the INSERT names, so that a new column cannot be left out of one of them. */
static void set_from_excluded(char *out, size_t size, const char *columns) {
    size_t n = 0;
    out[0] = 0;
    for (const char *c = columns; *c && n < size;) {
        c += strspn(c, ", ");
        int len = (int)strcspn(c, ", ");
        if (!len) break;
        n += (size_t)snprintf(out + n, size - n, "%s%.*s = excluded.%.*s", n ? ", " : "", len, c, len, c);
        c += len;
    }
}

static void placeholders(char *out, size_t size, const char *columns) {
    size_t n = 0;
    out[0] = 0;
    for (const char *c = columns; c && n + 2 < size; c = strchr(c + 1, ','))
        n += (size_t)snprintf(out + n, size - n, "%s?", n ? "," : "");
}

/* The samples row, inserted, or (while the sample has no successful row) replaced by this attempt's description;
 * *sample_id receives its id. Refuses a sample the database holds under another model or data identity (a
 * concurrent run of another configuration, which the runner's checks at planning time cannot see coming). */
static int insert_sample(Store *s, long long run_id, const StoreSample *m, long long *sample_id, KvErr *err) {
    sqlite3_stmt *st;
    const char *model_id = m->model_id ? m->model_id : "", *data_id = m->data_id ? m->data_id : "";
    char values[128], set[1024], sql[2048];
    placeholders(values, sizeof values, "run_id, " SAMPLE_COLUMNS);
    set_from_excluded(set, sizeof set, SAMPLE_RETRY_COLUMNS);
    snprintf(sql, sizeof sql,
             "INSERT INTO samples(run_id, " SAMPLE_COLUMNS ") VALUES(%s) ON CONFLICT(" SAMPLE_KEY_COLUMNS ") DO UPDATE "
             "SET %s WHERE samples.model_id = excluded.model_id AND samples.data_id = excluded.data_id AND NOT EXISTS "
             "(SELECT 1 FROM results r WHERE r.sample_id = samples.id AND r.error IS NULL) AND NOT EXISTS (SELECT 1 "
             "FROM traces t WHERE t.sample_id = samples.id)", values, set);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "writing a sample");
    sqlite3_bind_int64(st, 1, run_id);
    const char *text[] = {m->model, m->setup, m->sample_key, m->suite, m->task, m->domain, m->metric};
    for (int i = 0; i < 7; i++) bind_text(st, i + 2, text[i]);
    sqlite3_bind_int(st, 9, m->index);
    if (m->depth_percent >= 0) sqlite3_bind_double(st, 10, m->depth_percent);
    else sqlite3_bind_null(st, 10);
    sqlite3_bind_int(st, 11, m->target_tokens);
    sqlite3_bind_int(st, 12, m->context_tokens);
    sqlite3_bind_int(st, 13, m->question_tokens);
    bind_text(st, 14, m->answers_json);
    bind_text(st, 15, m->note);
    bind_text(st, 16, model_id);
    bind_text(st, 17, data_id);
    sqlite3_bind_int(st, 18, m->over_length != 0);
    if (step_done(s, st, "writing a sample", err)) return -1;
    if (sqlite3_prepare_v2(s->db, "SELECT id, model_id, data_id FROM samples WHERE model = ? AND setup = ? AND "
                                  "sample_key = ?", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "writing a sample");
    for (int i = 0; i < 3; i++) bind_text(st, i + 1, text[i]);
    int rc = sqlite3_step(st), same = 0;
    char change[600] = "";
    if (rc == SQLITE_ROW) {
        *sample_id = sqlite3_column_int64(st, 0);
        const char *was_model = (const char *)sqlite3_column_text(st, 1);
        const char *was_data = (const char *)sqlite3_column_text(st, 2);
        same = !strcmp(was_model, model_id) && !strcmp(was_data, data_id);
        if (!same && strcmp(was_model, model_id)) store_identity_change(was_model, model_id, change, sizeof change);
        else if (!same) store_identity_change(was_data, data_id, change, sizeof change);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return db_fail(s, err, "writing a sample");
    if (!same)
        return kv_fail(err, "%s: the database holds this sample from other inputs (%s; another run writing into it?)",
                       s->path, change);
    return 0;
}

/* One result row: inserted, or replacing a failed row of its key; a successful row stays as it is. */
/* Inserts a result row, or replaces a failed one; *added / *replaced count which happened (neither: a row was there). */
static int insert_result(Store *s, long long sample_id, const StoreResult *r, int *added, int *replaced, KvErr *err) {
    sqlite3_stmt *st;
    char values[128], set[1024], sql[2048];
    placeholders(values, sizeof values, "sample_id, " RESULT_COLUMNS);
    set_from_excluded(set, sizeof set, RESULT_OUTCOME_COLUMNS);
    snprintf(sql, sizeof sql,
             "INSERT INTO results(sample_id, " RESULT_COLUMNS ") VALUES(%s) ON CONFLICT(sample_id, " RESULT_KEY_COLUMNS
             ") DO UPDATE SET %s WHERE results.error IS NOT NULL", values, set);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "writing a result");
    sqlite3_bind_int64(st, 1, sample_id);
    bind_key(st, 2, &r->key);
    sqlite3_bind_double(st, 6, r->keep_fraction);
    sqlite3_bind_int(st, 7, r->budget_tokens);
    sqlite3_bind_double(st, 8, r->kept_tokens);
    bind_text(st, 9, r->prediction);
    if (r->error) sqlite3_bind_null(st, 10);
    else sqlite3_bind_double(st, 10, r->score);
    sqlite3_bind_int(st, 11, r->generated_tokens);
    sqlite3_bind_double(st, 12, r->prefill_ms);
    sqlite3_bind_double(st, 13, r->select_ms);
    sqlite3_bind_double(st, 14, r->decode_ms);
    bind_text(st, 15, r->error);
    if (r->error || r->kept_fraction <= 0) sqlite3_bind_null(st, 16);
    else sqlite3_bind_double(st, 16, r->kept_fraction);
    /* An upsert's change count does not say insert from update; the last inserted rowid does, reset first (a
     * rowid SQLite assigns is never 0). */
    sqlite3_set_last_insert_rowid(s->db, 0);
    if (step_done(s, st, "writing a result", err)) return -1;
    if (sqlite3_changes(s->db)) {
        if (sqlite3_last_insert_rowid(s->db)) (*added)++;
        else (*replaced)++;
    }
    return 0;
}

int store_write_sample(Store *s, long long run_id, const StoreSample *sample, const StoreResult *results,
                       int n_results, KvErr *err) {
    long long sample_id = 0;
    int written = 0, replaced = 0;
    if (exec(s, "BEGIN IMMEDIATE", err)) return kv_wrap(err, "sample %s", sample->sample_key);
    int rc = insert_sample(s, run_id, sample, &sample_id, err);
    for (int i = 0; i < n_results && !rc; i++) rc = insert_result(s, sample_id, &results[i], &written, &replaced, err);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return kv_wrap(err, "sample %s not saved", sample->sample_key);
    }
    s->last_written = written;
    s->last_replaced = replaced;
    return 0;
}

int store_last_written(const Store *s) { return s->last_written; }
int store_last_replaced(const Store *s) { return s->last_replaced; }

static int insert_trace(Store *s, sqlite3_stmt *st, long long run_id, long long sample_id, const StoreTrace *t,
                        KvErr *err) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int64(st, 2, sample_id);
    bind_key(st, 3, &t->key);
    sqlite3_bind_int(st, 7, t->window);
    sqlite3_bind_int(st, 8, t->step);
    sqlite3_bind_double(st, 9, t->mean_r);
    sqlite3_bind_double(st, 10, t->min_r);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s, err, "writing a trace");
}

/* The per-head row of a trace row (table trace_heads): R_t as little-endian float32, whatever the host. */
static int insert_trace_heads(Store *s, sqlite3_stmt *st, long long sample_id, const StoreTrace *t, KvErr *err) {
    int n = t->n_layers * t->n_kv_heads;
    unsigned char *blob = kv_malloc((size_t)n * 4, err);
    if (!blob) return -1;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &t->r_heads[i], 4);
        for (int b = 0; b < 4; b++) blob[4 * i + b] = (unsigned char)(u >> (8 * b));
    }
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, sample_id);
    bind_key(st, 2, &t->key);
    sqlite3_bind_int(st, 6, t->step);
    sqlite3_bind_int(st, 7, t->n_layers);
    sqlite3_bind_int(st, 8, t->n_kv_heads);
    sqlite3_bind_blob(st, 9, blob, n * 4, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s, err, "writing a trace's head values");
    free(blob);
    return rc;
}

static int insert_trace_set(Store *s, sqlite3_stmt *st, long long sample_id, const StoreTraceSet *t, KvErr *err) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, sample_id);
    bind_key(st, 2, &t->key);
    sqlite3_bind_int64(st, 6, t->kept);
    if (t->clamped_kept < 0) sqlite3_bind_null(st, 7);
    else sqlite3_bind_int64(st, 7, t->clamped_kept);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s, err, "writing a trace's keep-set");
}

int store_write_traces(Store *s, long long run_id, const StoreSample *sample, const StoreTrace *rows, int n_rows,
                       const StoreTraceSet *sets, int n_sets, KvErr *err) {
    long long sample_id = 0;
    sqlite3_stmt *st = NULL, *heads = NULL, *kept = NULL;
    int written = 0;
    if (exec(s, "BEGIN IMMEDIATE", err)) return kv_wrap(err, "sample %s", sample->sample_key);
    int rc = insert_sample(s, run_id, sample, &sample_id, err);
    /* One prepared statement per table for the many rows of a sample (steps × variants). */
    if (!rc && (sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO traces(run_id, sample_id, " TRACE_COLUMNS ") "
                                          "VALUES(?,?,?,?,?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK ||
                sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO trace_heads(sample_id, " TRACE_HEAD_COLUMNS ") "
                                          "VALUES(?,?,?,?,?,?,?,?,?)", -1, &heads, NULL) != SQLITE_OK ||
                sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO trace_sets(sample_id, " TRACE_SET_COLUMNS ") "
                                          "VALUES(?,?,?,?,?,?,?)", -1, &kept, NULL) != SQLITE_OK))
        rc = db_fail(s, err, "writing a trace");
    for (int i = 0; i < n_rows && !rc; i++) {
        rc = insert_trace(s, st, run_id, sample_id, &rows[i], err);
        written += sqlite3_changes(s->db);
        if (!rc && rows[i].r_heads) rc = insert_trace_heads(s, heads, sample_id, &rows[i], err);
    }
    for (int i = 0; i < n_sets && !rc; i++) rc = insert_trace_set(s, kept, sample_id, &sets[i], err);
    sqlite3_finalize(st);
    sqlite3_finalize(heads);
    sqlite3_finalize(kept);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return kv_wrap(err, "sample %s not saved", sample->sample_key);
    }
    s->last_written = written;
    s->last_replaced = 0;
    return 0;
}

/* ---------------------------------------------------------------- merge */

/* The identity groups a merge compares: every (model, model_id) and (model, setup, suite, task, data_id) already
 * taken, with where it came from (the output, or an input checked before), in temp tables of this connection. */
static const char *MERGE_GROUPS =
    "DROP TABLE IF EXISTS temp.merge_models; DROP TABLE IF EXISTS temp.merge_tasks;\n"
    "CREATE TEMP TABLE merge_models(model TEXT, model_id TEXT, origin TEXT);\n"
    "CREATE TEMP TABLE merge_tasks(model TEXT, setup TEXT, suite TEXT, task TEXT, data_id TEXT, origin TEXT);\n";

/* Adds the groups of `schema` (main or src) to the temp tables, labelled with `origin`. */
static int add_groups(Store *s, const char *schema, const char *origin, KvErr *err) {
    char sql[600];
    sqlite3_stmt *st;
    const char *forms[] = {"INSERT INTO temp.merge_models SELECT DISTINCT model, model_id, ?1 FROM %s.samples",
                           "INSERT INTO temp.merge_tasks SELECT DISTINCT model, setup, suite, task, data_id, ?1 "
                           "FROM %s.samples"};
    for (int i = 0; i < 2; i++) {
        snprintf(sql, sizeof sql, forms[i], schema);
        if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(s, err, "comparing identities");
        bind_text(st, 1, origin);
        if (step_done(s, st, "comparing identities", err)) return -1;
    }
    return 0;
}

/* One line naming the first disagreement on identity between the attached source and the groups taken so far. */
static int check_merge_identity(Store *s, const char *src_path, KvErr *err) {
    char a[512], b[512], where[512], origin[1024], change[1100];
    char *outs[] = {where, a, b, origin};
    size_t sizes[] = {sizeof where, sizeof a, sizeof b, sizeof origin};
    if (first_row(s,
                  "SELECT 'model ''' || x.model || '''', x.model_id, y.model_id, y.origin FROM temp.merge_models y "
                  "JOIN (SELECT DISTINCT model, model_id FROM src.samples) x ON x.model = y.model AND "
                  "x.model_id != y.model_id LIMIT 1",
                  NULL, 0, outs, sizes, 4, "comparing identities", err))
        return -1;
    if (!where[0] &&
        first_row(s,
                  "SELECT 'model ''' || x.model || ''' setup ' || x.setup || ' task ' || x.suite || ':' || x.task, "
                  "x.data_id, y.data_id, y.origin FROM temp.merge_tasks y JOIN "
                  "(SELECT DISTINCT model, setup, suite, task, data_id FROM src.samples) x ON x.model = y.model AND "
                  "x.setup = y.setup AND x.suite = y.suite AND x.task = y.task AND x.data_id != y.data_id LIMIT 1",
                  NULL, 0, outs, sizes, 4, "comparing identities", err))
        return -1;
    if (!where[0]) return 0;
    store_identity_change(b, a, change, sizeof change);
    return kv_fail(err, "%s: %s was made from other inputs than in %s (%s): rows of different inputs are not merged "
                        "(give the model another name, or keep the databases apart); nothing was merged",
                   src_path, where, origin, change);
}

/* Attaches src_path read-only as "src" and checks it like store_open (damage, schema); detached on failure. */
static int attach_source(Store *s, const char *src_path, KvErr *err) {
    sqlite3_stmt *st;
    char uri[3200];
    struct stat sb, out;
    if (stat(src_path, &sb) && strcmp(src_path, s->path))
        return kv_fail(err, "%s: cannot open database: %s", src_path, strerror(errno));
    /* the same file under another name too (a symbolic or hard link, "./" in front) */
    if (!strcmp(src_path, s->path) || (!stat(s->path, &out) && out.st_dev == sb.st_dev && out.st_ino == sb.st_ino))
        return kv_fail(err, "%s: cannot merge a database into itself", src_path);
    if (not_a_file(src_path, &sb, err)) return -1;
    if (read_only_uri(src_path, uri, sizeof uri, err)) return -1;
    if (sqlite3_prepare_v2(s->db, "ATTACH DATABASE ? AS src", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "attaching");
    bind_text(st, 1, uri);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return kv_fail(err, (rc & 0xff) == SQLITE_NOTADB ? "%s: not an SQLite database" : "%s: cannot open database: %s",
                       src_path, sqlite3_errmsg(s->db));
    if (check_damage(s, "src", src_path, err) || check_schema(s, "src", src_path, 0, err) ||
        check_columns(s, "src", src_path, err) || check_consistency(s, "src", src_path, err)) {
        sqlite3_exec(s->db, "DETACH DATABASE src", NULL, NULL, NULL);
        return -1;
    }
    return 0;
}

/* Copies the attached source into main in one transaction, after checking it against main again inside it
 * (another process may have written main since the first pass). "WHERE true": an INSERT ... SELECT with an
 * upsert clause needs one (SQLite's parsing ambiguity). */
static int copy_source(Store *s, const char *src_path, KvErr *err) {
    if (exec(s, "BEGIN IMMEDIATE", err)) return -1;
    int rc = exec(s, MERGE_GROUPS, err);
    if (!rc) rc = add_groups(s, "main", s->path, err);
    if (!rc) rc = check_merge_identity(s, src_path, err);
    int has_limit = 0;
    if (!rc) rc = has_column(s, "src", "runs", "sample_limit", &has_limit, err);
    const char *copy_runs = has_limit ? "INSERT OR IGNORE INTO main.runs(" RUN_COLUMNS ", sample_limit) SELECT "
                                        RUN_COLUMNS ", sample_limit FROM src.runs"
                                      : "INSERT OR IGNORE INTO main.runs(" RUN_COLUMNS ") SELECT " RUN_COLUMNS
                                        " FROM src.runs";
    if (!rc && exec(s, copy_runs, err))
        rc = kv_wrap(err, "merging %s", src_path);
    char set[1024], merge[8192];
    set_from_excluded(set, sizeof set, RESULT_OUTCOME_COLUMNS);
    snprintf(merge, sizeof merge,
             "INSERT OR IGNORE INTO main.samples(run_id, " SAMPLE_COLUMNS ")\n"
             "  SELECT (SELECT m.id FROM main.runs m WHERE m.uuid = r.uuid), " SAMPLE_COLUMNS "\n"
             "  FROM src.samples JOIN (SELECT id AS rid, uuid FROM src.runs) r ON r.rid = run_id;\n"
             "INSERT INTO main.results(sample_id, " RESULT_COLUMNS ")\n"
             "  SELECT (SELECT m.id FROM main.samples m WHERE m.model = x.model AND m.setup = x.setup\n"
             "          AND m.sample_key = x.sample_key), " RESULT_COLUMNS "\n"
             "  FROM src.results JOIN (SELECT id AS sid, model, setup, sample_key FROM src.samples) x\n"
             "  ON x.sid = sample_id WHERE true\n"
             "  ON CONFLICT(sample_id, " RESULT_KEY_COLUMNS ") DO UPDATE SET %s\n"
             "  WHERE results.error IS NOT NULL AND excluded.error IS NULL;\n"
             "INSERT OR IGNORE INTO main.traces(run_id, sample_id, " TRACE_COLUMNS ")\n"
             "  SELECT (SELECT m.id FROM main.runs m WHERE m.uuid = r.uuid),\n"
             "         (SELECT m.id FROM main.samples m WHERE m.model = x.model AND m.setup = x.setup\n"
             "          AND m.sample_key = x.sample_key), " TRACE_COLUMNS "\n"
             "  FROM src.traces JOIN (SELECT id AS sid, model, setup, sample_key FROM src.samples) x\n"
             "  ON x.sid = sample_id JOIN (SELECT id AS rid, uuid FROM src.runs) r ON r.rid = run_id;\n"
             "INSERT OR IGNORE INTO main.trace_heads(sample_id, " TRACE_HEAD_COLUMNS ")\n"
             "  SELECT (SELECT m.id FROM main.samples m WHERE m.model = x.model AND m.setup = x.setup\n"
             "          AND m.sample_key = x.sample_key), " TRACE_HEAD_COLUMNS "\n"
             "  FROM src.trace_heads JOIN (SELECT id AS sid, model, setup, sample_key FROM src.samples) x\n"
             "  ON x.sid = sample_id;\n"
             "INSERT OR IGNORE INTO main.trace_sets(sample_id, " TRACE_SET_COLUMNS ")\n"
             "  SELECT (SELECT m.id FROM main.samples m WHERE m.model = x.model AND m.setup = x.setup\n"
             "          AND m.sample_key = x.sample_key), " TRACE_SET_COLUMNS "\n"
             "  FROM src.trace_sets JOIN (SELECT id AS sid, model, setup, sample_key FROM src.samples) x\n"
             "  ON x.sid = sample_id;\n"
             "COMMIT;", set);
    if (!rc && exec(s, merge, err))
        rc = kv_wrap(err, "merging %s", src_path);
    if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* SQLite's progress callback during a merge: non-zero interrupts the statement running. */
static int merge_stopped(void *opt) {
    const StoreMergeOptions *o = opt;
    return o && o->stop && *o->stop;
}

/* Waits opt->pause_ms, or less when the merge is stopped meanwhile. */
static void merge_pause(const StoreMergeOptions *opt) {
    for (double waited = 0; opt && waited < opt->pause_ms && !merge_stopped((void *)opt); waited += 10) {
        struct timespec ten_ms = {0, 10000000};
        nanosleep(&ten_ms, NULL);
    }
}

static int merge_with(Store *s, const char *const *src_paths, int n, const StoreMergeOptions *opt, KvErr *err) {
    /* First pass: every input readable, undamaged, of this schema, and agreeing on identity with the output and
     * with every input before it; only then anything is copied, so a refused merge leaves the output as it was. */
    int rc = exec(s, MERGE_GROUPS, err);
    if (!rc) rc = add_groups(s, "main", s->path, err);
    for (int i = 0; i < n && !rc; i++) {
        if ((rc = attach_source(s, src_paths[i], err))) break;
        rc = check_merge_identity(s, src_paths[i], err);
        if (!rc) rc = add_groups(s, "src", src_paths[i], err);
        sqlite3_exec(s->db, "DETACH DATABASE src", NULL, NULL, NULL);
    }
    for (int i = 0; i < n && !rc; i++) {
        merge_pause(opt);
        if (merge_stopped((void *)opt)) break;
        if ((rc = attach_source(s, src_paths[i], err))) break;
        rc = copy_source(s, src_paths[i], err);
        sqlite3_exec(s->db, "DETACH DATABASE src", NULL, NULL, NULL);
    }
    if (merge_stopped((void *)opt))
        rc = kv_fail(err, "%s: merge interrupted (inputs merged before the interruption stay merged; a new output is "
                          "not created)", s->path);
    sqlite3_exec(s->db, "DROP TABLE IF EXISTS temp.merge_models; DROP TABLE IF EXISTS temp.merge_tasks;", NULL, NULL,
                 NULL);
    return rc;
}

int store_merge(Store *s, const char *const *src_paths, int n, KvErr *err) {
    return merge_with(s, src_paths, n, NULL, err);
}

/* A database file and the -wal / -shm files SQLite may have left beside it. */
static void remove_database(const char *path) {
    char side[1200];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

int store_merge_into(const char *out_path, const char *const *src_paths, int n, KvErr *err) {
    return store_merge_into_with(out_path, src_paths, n, NULL, err);
}

int store_merge_into_with(const char *out_path, const char *const *src_paths, int n, const StoreMergeOptions *opt,
                          KvErr *err) {
    struct stat sb;
    char tmp[1100];
    /* A new output is made under a temporary name beside it and linked to its name only when every input was
     * merged, so a refused or failed merge leaves no file behind (nor replaces one made meanwhile). */
    int fresh = stat(out_path, &sb) != 0 && errno == ENOENT;
    if (strlen(out_path) > 1000) return kv_fail(err, "%s: path too long", out_path);
    if (fresh) snprintf(tmp, sizeof tmp, "%s.merging-%ld", out_path, (long)getpid());
    Store *s;
    int rc = store_open(&s, fresh ? tmp : out_path, 0, err);
    if (!rc) {
        if (fresh) snprintf(s->path, sizeof s->path, "%s", out_path); /* messages name the output */
        sqlite3_progress_handler(s->db, 1000, merge_stopped, (void *)opt);
        rc = merge_with(s, src_paths, n, opt, err);
        store_close(s);
    }
    if (fresh) {
        if (!rc && link(tmp, out_path))
            rc = kv_fail(err, "%s: cannot create: %s", out_path, strerror(errno));
        remove_database(tmp);
    }
    return rc;
}
