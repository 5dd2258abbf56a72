/* store.c — the SQLite results database: schema, one transaction per sample (results or traces), resume
 * lookups, merge.
 *
 * Durability comes from SQLite, not from us: WAL journal, synchronous=NORMAL (a committed sample survives a
 * killed process; a power cut may lose the last few), BEGIN IMMEDIATE so concurrent shard processes on one
 * file queue instead of failing, busy_timeout for the wait. Tables are STRICT, so a wrong type is an error
 * at insert time rather than a surprise in the report. */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct Store {
    sqlite3 *db;
    char path[1024];
};

/* The columns each table is written with (also what a merge copies), in one place. */
#define RUN_COLUMNS                                                                                             \
    "uuid, config_name, config, config_hash, git_rev, model_name, model_path, model_sha256, tokenizer, backend, " \
    "host, shard, started, finished"
#define SAMPLE_COLUMNS                                                                                          \
    "model, setup, sample_key, suite, task, domain, metric, idx, depth_percent, target_tokens, context_tokens, " \
    "question_tokens, answers, note, over_length"
#define RESULT_COLUMNS                                                                                          \
    "policy, aggregation, params, budget, keep_fraction, budget_tokens, kept_tokens, prediction, score, "       \
    "generated_tokens, prefill_ms, select_ms, decode_ms, error, kept_fraction"
#define TRACE_COLUMNS "policy, aggregation, params, budget, window, step, mean_r, min_r"

static const char *SCHEMA =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;\n"
    /* One row per kvbench run invocation and model. */
    "CREATE TABLE runs(\n"
    "  id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE,\n"
    "  config_name TEXT NOT NULL, config TEXT NOT NULL, config_hash TEXT NOT NULL, git_rev TEXT NOT NULL,\n"
    "  model_name TEXT NOT NULL, model_path TEXT NOT NULL, model_sha256 TEXT NOT NULL, tokenizer TEXT NOT NULL,\n"
    "  backend TEXT NOT NULL, host TEXT NOT NULL, shard TEXT, started TEXT NOT NULL, finished TEXT) STRICT;\n"
    "CREATE TABLE samples(\n"
    "  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),\n"
    "  model TEXT NOT NULL, setup TEXT NOT NULL, sample_key TEXT NOT NULL,\n"
    "  suite TEXT NOT NULL, task TEXT NOT NULL, domain TEXT, metric TEXT, idx INTEGER NOT NULL,\n"
    "  depth_percent REAL, target_tokens INTEGER, context_tokens INTEGER, question_tokens INTEGER,\n"
    "  answers TEXT, note TEXT, over_length INTEGER, UNIQUE(model, setup, sample_key)) STRICT;\n"
    "CREATE TABLE results(\n"
    "  id INTEGER PRIMARY KEY, sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  keep_fraction REAL, budget_tokens INTEGER, kept_tokens REAL, prediction TEXT, score REAL,\n"
    "  generated_tokens INTEGER, prefill_ms REAL, select_ms REAL, decode_ms REAL, error TEXT, kept_fraction REAL,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget)) STRICT;\n"
    /* kvbench trace: retained importance per decode step (README "Fragility"); the run that traced it. */
    "CREATE TABLE traces(\n"
    "  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),\n"
    "  sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE,\n"
    "  policy TEXT NOT NULL, aggregation TEXT NOT NULL, params TEXT NOT NULL, budget TEXT NOT NULL,\n"
    "  window INTEGER NOT NULL, step INTEGER NOT NULL, mean_r REAL NOT NULL, min_r REAL NOT NULL,\n"
    "  UNIQUE(sample_id, policy, aggregation, params, budget, step)) STRICT;\n"
    /* Task averages on the 0-100 scale (failed rows excluded from the mean, counted in n_failed). */
    "CREATE VIEW task_scores AS\n"
    "  SELECT s.model, s.setup, s.suite, s.task, MAX(s.domain) AS domain, r.policy, r.aggregation, r.params,\n"
    "         r.budget, MAX(r.keep_fraction) AS keep_fraction, COUNT(*) AS n, SUM(r.error IS NOT NULL) AS n_failed,\n"
    "         100.0 * AVG(r.score) AS score\n"
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
        if (exec(s, SCHEMA, err) || exec(s, sql, err) || exec(s, "COMMIT", err)) {
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return kv_wrap(err, "creating the schema");
        }
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
    return 0;
}

int store_open(Store **out, const char *path, int readonly, KvErr *err) {
    *out = NULL;
    Store *s = kv_calloc(1, sizeof *s, err);
    if (!s) return -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_URI;
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
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
    if (exec(s, "PRAGMA foreign_keys = ON", err) ||
        (!readonly && (exec(s, "PRAGMA journal_mode = WAL", err) || exec(s, "PRAGMA synchronous = NORMAL", err))) ||
        check_schema(s, "main", path, !readonly, err)) {
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
                           "INSERT INTO runs(" RUN_COLUMNS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,"
                           "strftime('%Y-%m-%dT%H:%M:%SZ','now'), NULL)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "recording the run");
    const char *values[] = {uuid,           r->config_name, r->config_text, r->config_hash, r->git_rev,
                            r->model_name,  r->model_path,  r->model_sha256, r->tokenizer,  r->backend,
                            r->host,        r->shard};
    for (int i = 0; i < 12; i++) bind_text(st, i + 1, values[i]);
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

/* done[i] = 1 where the sample has a row of `table` (results or traces) for keys[i]. */
static int has_rows(Store *s, const char *table, const char *model, const char *setup, const char *sample_key,
                    const StoreVariantKey *keys, int n_keys, unsigned char *done, KvErr *err) {
    sqlite3_stmt *st;
    char sql[300];
    memset(done, 0, (size_t)n_keys);
    snprintf(sql, sizeof sql,
             "SELECT DISTINCT r.policy, r.aggregation, r.params, r.budget FROM %s r JOIN samples m "
             "ON m.id = r.sample_id WHERE m.model = ? AND m.setup = ? AND m.sample_key = ?", table);
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

static int insert_sample(Store *s, long long run_id, const StoreSample *m, long long *sample_id, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO samples(run_id, " SAMPLE_COLUMNS ") "
                                  "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
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
    sqlite3_bind_int(st, 16, m->over_length != 0);
    if (step_done(s, st, "writing a sample", err)) return -1;
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM samples WHERE model = ? AND setup = ? AND sample_key = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(s, err, "writing a sample");
    for (int i = 0; i < 3; i++) bind_text(st, i + 1, text[i]);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *sample_id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : db_fail(s, err, "writing a sample");
}

static int insert_result(Store *s, long long sample_id, const StoreResult *r, KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO results(sample_id, " RESULT_COLUMNS ") "
                                  "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "writing a result");
    sqlite3_bind_int64(st, 1, sample_id);
    bind_text(st, 2, r->key.policy);
    bind_text(st, 3, r->key.aggregation);
    bind_text(st, 4, r->key.params);
    bind_text(st, 5, r->key.budget);
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
    return step_done(s, st, "writing a result", err);
}

int store_write_sample(Store *s, long long run_id, const StoreSample *sample, const StoreResult *results,
                       int n_results, KvErr *err) {
    long long sample_id = 0;
    if (exec(s, "BEGIN IMMEDIATE", err)) return kv_wrap(err, "sample %s", sample->sample_key);
    int rc = insert_sample(s, run_id, sample, &sample_id, err);
    for (int i = 0; i < n_results && !rc; i++) rc = insert_result(s, sample_id, &results[i], err);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return kv_wrap(err, "sample %s not saved", sample->sample_key);
    }
    return 0;
}

static int insert_trace(Store *s, sqlite3_stmt *st, long long run_id, long long sample_id, const StoreTrace *t,
                        KvErr *err) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_int64(st, 2, sample_id);
    bind_text(st, 3, t->key.policy);
    bind_text(st, 4, t->key.aggregation);
    bind_text(st, 5, t->key.params);
    bind_text(st, 6, t->key.budget);
    sqlite3_bind_int(st, 7, t->window);
    sqlite3_bind_int(st, 8, t->step);
    sqlite3_bind_double(st, 9, t->mean_r);
    sqlite3_bind_double(st, 10, t->min_r);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s, err, "writing a trace");
}

int store_write_traces(Store *s, long long run_id, const StoreSample *sample, const StoreTrace *rows, int n_rows,
                       KvErr *err) {
    long long sample_id = 0;
    sqlite3_stmt *st = NULL;
    if (exec(s, "BEGIN IMMEDIATE", err)) return kv_wrap(err, "sample %s", sample->sample_key);
    int rc = insert_sample(s, run_id, sample, &sample_id, err);
    /* One prepared statement for the many rows of a sample (steps × variants). */
    if (!rc && sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO traces(run_id, sample_id, " TRACE_COLUMNS ") "
                                         "VALUES(?,?,?,?,?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK)
        rc = db_fail(s, err, "writing a trace");
    for (int i = 0; i < n_rows && !rc; i++) rc = insert_trace(s, st, run_id, sample_id, &rows[i], err);
    sqlite3_finalize(st);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return kv_wrap(err, "sample %s not saved", sample->sample_key);
    }
    return 0;
}

/* ---------------------------------------------------------------- merge */

int store_merge(Store *s, const char *src_path, KvErr *err) {
    sqlite3_stmt *st;
    char uri[1200];
    if (!strcmp(src_path, s->path)) return kv_fail(err, "%s: cannot merge a database into itself", src_path);
    FILE *f = fopen(src_path, "rb");
    if (!f) return kv_fail(err, "%s: cannot open database: no such file or not readable", src_path);
    fclose(f);
    snprintf(uri, sizeof uri, "file:%s?mode=ro", src_path);
    if (sqlite3_prepare_v2(s->db, "ATTACH DATABASE ? AS src", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "attaching");
    bind_text(st, 1, uri);
    if (step_done(s, st, src_path, err)) return -1;
    int rc = check_schema(s, "src", src_path, 0, err);
    if (!rc) rc = exec(s, "BEGIN IMMEDIATE", err);
    if (!rc) {
        rc = exec(s,
                  "INSERT OR IGNORE INTO main.runs(" RUN_COLUMNS ") SELECT " RUN_COLUMNS " FROM src.runs;\n"
                  "INSERT OR IGNORE INTO main.samples(run_id, " SAMPLE_COLUMNS ")\n"
                  "  SELECT (SELECT m.id FROM main.runs m WHERE m.uuid = r.uuid), " SAMPLE_COLUMNS "\n"
                  "  FROM src.samples JOIN (SELECT id AS rid, uuid FROM src.runs) r ON r.rid = run_id;\n"
                  "INSERT OR IGNORE INTO main.results(sample_id, " RESULT_COLUMNS ")\n"
                  "  SELECT (SELECT m.id FROM main.samples m WHERE m.model = x.model AND m.setup = x.setup\n"
                  "          AND m.sample_key = x.sample_key), " RESULT_COLUMNS "\n"
                  "  FROM src.results JOIN (SELECT id AS sid, model, setup, sample_key FROM src.samples) x\n"
                  "  ON x.sid = sample_id;\n"
                  "INSERT OR IGNORE INTO main.traces(run_id, sample_id, " TRACE_COLUMNS ")\n"
                  "  SELECT (SELECT m.id FROM main.runs m WHERE m.uuid = r.uuid),\n"
                  "         (SELECT m.id FROM main.samples m WHERE m.model = x.model AND m.setup = x.setup\n"
                  "          AND m.sample_key = x.sample_key), " TRACE_COLUMNS "\n"
                  "  FROM src.traces JOIN (SELECT id AS sid, model, setup, sample_key FROM src.samples) x\n"
                  "  ON x.sid = sample_id JOIN (SELECT id AS rid, uuid FROM src.runs) r ON r.rid = run_id;\n"
                  "COMMIT;",
                  err);
        if (rc) {
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            kv_wrap(err, "merging %s", src_path);
        }
    }
    sqlite3_exec(s->db, "DETACH DATABASE src", NULL, NULL, NULL);
    return rc;
}
