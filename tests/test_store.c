/* test_store.c — the results database: schema and version check, one transaction per sample, resume lookups,
 * the task/domain views (hand-computed averages), merge of shard databases, and clean failures on a full
 * disk (simulated with max_page_count), a read-only connection, a path that cannot be created, a foreign file.
 * Identity: failed rows are retried and replaced, rows written are counted, samples of another model or data
 * identity are refused (write and merge); a damaged b-tree is refused at open with nothing written; a
 * read-only open writes nothing (no -wal / -shm) and works in a directory the process cannot write to.
 * runs.sample_limit: recorded, and absent from a database of an earlier build (read, merged, added on write). */
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../store/store.h"
#include "test.h"

static char dir[64];

static const StoreRun RUN = {"t", "{}", "abc", "rev", "m", "models/m.gguf", "00", "models/m.gguf", "cpu", "host", NULL, 0};

static StoreSample sample(const char *key, const char *task, const char *domain) {
    StoreSample m = {"m", "cq=0", key, "ruler", task, domain, "string_match_all", 0, -1, 4096, 3000, 40,
                     "[\"a\"]", NULL, "fp=aa", "seed=42,assets=01", 0};
    return m;
}

static StoreResult result(const char *policy, const char *budget, double score, const char *error) {
    StoreResult r;
    memset(&r, 0, sizeof r);
    r.key.policy = policy;
    r.key.aggregation = "mean";
    r.key.params = "w=32,k=5";
    r.key.budget = budget;
    r.keep_fraction = 0.2;
    r.budget_tokens = 600;
    r.kept_tokens = 600;
    r.prediction = error ? NULL : "answer";
    r.score = score;
    r.error = error;
    return r;
}

static long long count(Store *s, const char *sql) {
    sqlite3_stmt *st;
    long long n = -1;
    if (sqlite3_prepare_v2(store_handle(s), sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static double real(Store *s, const char *sql) {
    sqlite3_stmt *st;
    double v = -1;
    if (sqlite3_prepare_v2(store_handle(s), sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void test_write_and_views(TestCounts *tc) {
    char path[128];
    Store *s;
    KvErr err = {{0}};
    long long run;
    snprintf(path, sizeof path, "%s/a.db", dir);
    CHECK(tc, store_open(&s, path, 0, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    CHECK(tc, count(s, "SELECT value FROM meta WHERE key='schema_version'") == STORE_SCHEMA_VERSION, "version");
    CHECK(tc, store_begin_run(s, &RUN, &run, &err) == 0, "begin: %s", err.msg);
    StoreSample m1 = sample("ruler:vt:0", "vt", "tracing"), m2 = sample("ruler:vt:1", "vt", "tracing");
    StoreSample m3 = sample("ruler:cwe:0", "cwe", "aggregation");
    StoreResult r1[] = {result("snapkv", "20%", 1.0, NULL), result("snapkv", "40%", 0.5, NULL),
                        result("defensivekv", "20%", 0, "context too long")};
    StoreResult r2[] = {result("snapkv", "20%", 0.0, NULL), result("snapkv", "40%", 1.0, NULL)};
    StoreResult r3[] = {result("snapkv", "20%", 0.25, NULL)};
    CHECK(tc, store_write_sample(s, run, &m1, r1, 3, &err) == 0, "write 1: %s", err.msg);
    CHECK(tc, store_write_sample(s, run, &m2, r2, 2, &err) == 0, "write 2: %s", err.msg);
    CHECK(tc, store_write_sample(s, run, &m3, r3, 1, &err) == 0, "write 3: %s", err.msg);
    /* Writing again is a no-op: nothing duplicated. */
    CHECK(tc, store_write_sample(s, run, &m1, r1, 3, &err) == 0, "rewrite: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM samples") == 3, "samples");
    CHECK(tc, count(s, "SELECT count(*) FROM results") == 6, "results: %lld", count(s, "SELECT count(*) FROM results"));

    StoreVariantKey keys[] = {r1[0].key, r1[2].key, {"snapkv", "max", "w=32,k=5", "20%"}};
    unsigned char done[3];
    CHECK(tc, store_finished(s, "m", "cq=0", "ruler:vt:0", keys, 3, done, &err) == 0, "finished: %s", err.msg);
    /* keys[1] has only a failed row: not finished, so a resume retries it. */
    CHECK(tc, done[0] == 1 && done[1] == 0 && done[2] == 0, "done flags %d %d %d", done[0], done[1], done[2]);
    CHECK(tc, store_finished(s, "m", "cq=1", "ruler:vt:0", keys, 3, done, &err) == 0 && !done[0] && !done[1],
          "another setup is not finished");

    /* vt snapkv 20%: mean(1, 0) = 50; cwe snapkv 20%: 25; domain rows are per task here; defensivekv: failed only. */
    CHECK(tc, test_close(real(s, "SELECT score FROM task_scores WHERE task='vt' AND policy='snapkv' AND budget='20%'"),
                         50.0, 1e-12, 1),
          "vt 20%%");
    CHECK(tc, test_close(real(s, "SELECT score FROM task_scores WHERE task='vt' AND policy='snapkv' AND budget='40%'"),
                         75.0, 1e-12, 1),
          "vt 40%%");
    CHECK(tc, count(s, "SELECT n_failed FROM task_scores WHERE policy='defensivekv'") == 1, "n_failed");
    /* n counts the rows the score averages: the failed row is in n_failed, not in n */
    CHECK(tc, count(s, "SELECT n FROM task_scores WHERE policy='defensivekv'") == 0, "n of a failed-only cell");
    CHECK(tc, count(s, "SELECT n FROM task_scores WHERE task='vt' AND policy='snapkv' AND budget='20%'") == 2,
          "n of a scored cell");
    CHECK(tc, count(s, "SELECT score IS NULL FROM task_scores WHERE policy='defensivekv'") == 1, "failed mean");
    CHECK(tc, test_close(real(s, "SELECT score FROM domain_scores WHERE domain='aggregation' AND budget='20%'"), 25.0,
                         1e-12, 1),
          "domain");
    CHECK(tc, store_end_run(s, run, &err) == 0, "end: %s", err.msg);
    CHECK(tc, count(s, "SELECT finished IS NOT NULL FROM runs") == 1, "finished time");

    /* Disk full: the page limit makes SQLite report SQLITE_FULL. The sample is rolled back, the rest intact. */
    sqlite3_exec(store_handle(s), "PRAGMA max_page_count = 1", NULL, NULL, NULL);
    char *big = malloc(1 << 20);
    memset(big, 'x', (1 << 20) - 1);
    big[(1 << 20) - 1] = 0;
    StoreResult rb = result("snapkv", "20%", 1, NULL);
    rb.prediction = big;
    StoreSample m4 = sample("ruler:vt:9", "vt", "tracing");
    int rc = store_write_sample(s, run, &m4, &rb, 1, &err);
    CHECK(tc, rc == -1, "write on a full disk succeeded");
    CHECK(tc, strstr(err.msg, "full") && strstr(err.msg, "ruler:vt:9") && strstr(err.msg, path), "full: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM samples") == 3 && count(s, "SELECT count(*) FROM results") == 6,
          "rows after a full disk");
    free(big);
    store_close(s);

    /* Read-only connection: the write fails cleanly. */
    CHECK(tc, store_open(&s, path, 1, &err) == 0, "open ro: %s", err.msg);
    if (s) {
        rc = store_write_sample(s, run, &m4, r3, 1, &err);
        CHECK(tc, rc == -1 && strstr(err.msg, "readonly"), "ro write: %s", err.msg);
        CHECK(tc, count(s, "SELECT count(*) FROM results") == 6, "rows after a read-only write");
        store_close(s);
    }
}

static void test_bad_files(TestCounts *tc) {
    char path[128];
    Store *s = NULL;
    KvErr err = {{0}};
    CHECK(tc, store_open(&s, "/proc/kvbench_no.db", 0, &err) == -1 && !s, "opened under /proc");
    CHECK(tc, strstr(err.msg, "/proc/kvbench_no.db") != NULL, "message: %s", err.msg);
    snprintf(path, sizeof path, "%s/missing.db", dir);
    CHECK(tc, store_open(&s, path, 1, &err) == -1, "opened a missing db read-only");
    CHECK(tc, strstr(err.msg, "missing.db") != NULL, "message: %s", err.msg);

    snprintf(path, sizeof path, "%s/garbage.db", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 200; i++) fputs("not a database at all ", f);
    fclose(f);
    CHECK(tc, store_open(&s, path, 0, &err) == -1, "opened garbage");
    CHECK(tc, strstr(err.msg, "garbage.db") && strstr(err.msg, "not an SQLite database") && !strstr(err.msg, "damaged"),
          "message: %s", err.msg);

    snprintf(path, sizeof path, "%s/other.db", dir);
    sqlite3 *db;
    sqlite3_open(path, &db);
    sqlite3_exec(db, "CREATE TABLE x(a)", NULL, NULL, NULL);
    sqlite3_close(db);
    CHECK(tc, store_open(&s, path, 0, &err) == -1 && strstr(err.msg, "not a kvbench"), "foreign db: %s", err.msg);

    snprintf(path, sizeof path, "%s/v.db", dir);
    CHECK(tc, store_open(&s, path, 0, &err) == 0, "open: %s", err.msg);
    sqlite3_exec(store_handle(s), "UPDATE meta SET value = '99' WHERE key = 'schema_version'", NULL, NULL, NULL);
    store_close(s);
    CHECK(tc, store_open(&s, path, 0, &err) == -1, "opened a version-99 db");
    CHECK(tc, strstr(err.msg, "schema version 99") && strstr(err.msg, "v.db"), "message: %s", err.msg);
}

static int merge1(Store *s, const char *src, KvErr *err) { return store_merge(s, &src, 1, err); }

static void test_merge(TestCounts *tc) {
    char a[128], b[128], out[128];
    Store *s;
    KvErr err = {{0}};
    long long run;
    snprintf(a, sizeof a, "%s/shard0.db", dir);
    snprintf(b, sizeof b, "%s/shard1.db", dir);
    snprintf(out, sizeof out, "%s/merged.db", dir);
    StoreSample m1 = sample("ruler:vt:0", "vt", "t"), m2 = sample("ruler:vt:1", "vt", "t");
    StoreResult r[] = {result("snapkv", "20%", 1.0, NULL), result("snapkv", "40%", 0.5, NULL)};
    store_open(&s, a, 0, &err);
    store_begin_run(s, &RUN, &run, &err);
    store_write_sample(s, run, &m1, r, 2, &err);
    store_close(s);
    store_open(&s, b, 0, &err);
    store_begin_run(s, &RUN, &run, &err);
    store_write_sample(s, run, &m2, r, 2, &err);
    store_write_sample(s, run, &m1, r, 1, &err); /* overlaps shard 0 */
    store_close(s);

    CHECK(tc, store_open(&s, out, 0, &err) == 0, "open out: %s", err.msg);
    if (!s) return;
    CHECK(tc, merge1(s, a, &err) == 0, "merge a: %s", err.msg);
    CHECK(tc, merge1(s, b, &err) == 0, "merge b: %s", err.msg);
    CHECK(tc, merge1(s, b, &err) == 0, "merge b again: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM runs") == 2, "runs %lld", count(s, "SELECT count(*) FROM runs"));
    CHECK(tc, count(s, "SELECT count(*) FROM samples") == 2, "samples");
    CHECK(tc, count(s, "SELECT count(*) FROM results") == 4, "results %lld", count(s, "SELECT count(*) FROM results"));
    CHECK(tc, count(s, "SELECT count(*) FROM results r JOIN samples m ON m.id = r.sample_id "
                       "JOIN runs u ON u.id = m.run_id") == 4,
          "foreign keys resolve");
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.db", dir);
    CHECK(tc, merge1(s, missing, &err) == -1 && strstr(err.msg, "none.db"), "missing input: %s", err.msg);
    CHECK(tc, merge1(s, out, &err) == -1, "merged into itself");

    /* Another configuration: the same task from another seed (and, apart, another model file under the same
     * name) disagrees on identity and is refused with nothing copied; a failed row is replaced by a success. */
    char c[128], d[128], e[128];
    snprintf(c, sizeof c, "%s/seed7.db", dir);
    snprintf(d, sizeof d, "%s/othermodel.db", dir);
    snprintf(e, sizeof e, "%s/retried.db", dir);
    Store *o;
    StoreSample m3 = sample("ruler:vt:5", "vt", "t"), m4 = sample("ruler:cwe:0", "cwe", "t");
    m3.data_id = "seed=7,assets=01";
    m4.model_id = "fp=bb";
    StoreResult fixed[] = {result("snapkv", "20%", 0.75, NULL), result("snapkv", "40%", 0.0, NULL)};
    const char *paths[] = {c, d, e};
    const StoreSample *samples[] = {&m3, &m4, &m1};
    StoreResult *rows[] = {r, r, fixed};
    for (int i = 0; i < 3; i++) {
        store_open(&o, paths[i], 0, &err);
        store_begin_run(o, &RUN, &run, &err);
        store_write_sample(o, run, samples[i], rows[i], 2, &err);
        store_close(o);
    }
    long long runs_before = count(s, "SELECT count(*) FROM runs");
    CHECK(tc, merge1(s, c, &err) == -1 && strstr(err.msg, "seed=42 -> seed=7") && strstr(err.msg, "ruler:vt") &&
                  strstr(err.msg, "seed7.db"),
          "merged another seed: %s", err.msg);
    CHECK(tc, merge1(s, d, &err) == -1 && strstr(err.msg, "fp=aa -> fp=bb") && strstr(err.msg, "model 'm'"),
          "merged another model: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM runs") == runs_before && count(s, "SELECT count(*) FROM samples") == 2,
          "a refused merge copied rows");
    /* All inputs are checked before anything is copied: a good input before a refused one is not merged either,
     * and two inputs that disagree with each other (not with the output) are refused. */
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/fresh.db", dir);
    store_open(&o, fresh, 0, &err);
    const char *good_then_bad[] = {a, d}, *disagreeing[] = {a, c};
    CHECK(tc, o && store_merge(o, good_then_bad, 2, &err) == -1 && strstr(err.msg, "nothing was merged") &&
                  count(o, "SELECT count(*) FROM samples") == 0,
          "a refused merge copied the inputs before it: %s", err.msg);
    CHECK(tc, o && store_merge(o, disagreeing, 2, &err) == -1 && strstr(err.msg, "seed=42 -> seed=7") &&
                  strstr(err.msg, "shard0.db") && count(o, "SELECT count(*) FROM samples") == 0,
          "inputs disagreeing with each other: %s", err.msg);
    const char *shards[] = {a, b};
    CHECK(tc, o && store_merge(o, shards, 2, &err) == 0 && count(o, "SELECT count(*) FROM results") == 4,
          "shards: %s", err.msg);
    store_close(o);

    /* The merged database's vt:0 snapkv 20% is a success (1.0) and stays; make it a failure to see it replaced. */
    sqlite3_exec(store_handle(s), "UPDATE results SET error = 'transient', score = NULL WHERE budget = '20%' AND "
                                  "sample_id = (SELECT id FROM samples WHERE sample_key = 'ruler:vt:0')", NULL, NULL, NULL);
    CHECK(tc, merge1(s, e, &err) == 0, "merge of a retried run: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM results r JOIN samples m ON m.id = r.sample_id WHERE m.sample_key = "
                       "'ruler:vt:0' AND r.error IS NULL") == 2 &&
                  test_close(real(s, "SELECT score FROM results WHERE budget = '20%' AND sample_id = (SELECT id FROM "
                                     "samples WHERE sample_key = 'ruler:vt:0')"), 0.75, 0, 0) &&
                  test_close(real(s, "SELECT score FROM results WHERE budget = '40%' AND sample_id = (SELECT id FROM "
                                     "samples WHERE sample_key = 'ruler:vt:0')"), 0.5, 0, 0),
          "failed row replaced, successful kept");
    store_close(s);
}

/* Failed rows are retried and replaced; store_last_written counts only rows this write added, store_last_replaced
 * the failed rows it replaced. */
static void test_retry_and_count(TestCounts *tc) {
    char path[128];
    Store *s;
    KvErr err = {{0}};
    long long run;
    snprintf(path, sizeof path, "%s/retry.db", dir);
    CHECK(tc, store_open(&s, path, 0, &err) == 0 && store_begin_run(s, &RUN, &run, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    StoreSample m = sample("ruler:vt:0", "vt", "t");
    StoreResult first[] = {result("snapkv", "20%", 1.0, NULL), result("snapkv", "40%", 0, "out of memory")};
    CHECK(tc, store_write_sample(s, run, &m, first, 2, &err) == 0 && store_last_written(s) == 2, "first write %d: %s",
          store_last_written(s), err.msg);
    /* Another run of the same rows (a concurrent run that planned them too): nothing new, nothing counted. */
    StoreResult again[] = {result("snapkv", "20%", 0.0, NULL)};
    CHECK(tc, store_write_sample(s, run, &m, again, 1, &err) == 0 && store_last_written(s) == 0, "rewrite counted %d",
          store_last_written(s));
    CHECK(tc, count(s, "SELECT score = 1.0 FROM results WHERE budget = '20%'") == 1, "a successful row was replaced");
    /* The retry of the failed row replaces it: one row, now with a score and no error. */
    StoreResult retry[] = {result("snapkv", "40%", 0.5, NULL)};
    m.context_tokens = 2999;
    CHECK(tc, store_write_sample(s, run, &m, retry, 1, &err) == 0 && store_last_written(s) == 0 &&
                  store_last_replaced(s) == 1, "retry counted %d written, %d replaced", store_last_written(s),
          store_last_replaced(s));
    CHECK(tc, count(s, "SELECT count(*) FROM results") == 2, "results after the retry");
    CHECK(tc, count(s, "SELECT count(*) FROM results WHERE budget = '40%' AND error IS NULL AND score = 0.5") == 1,
          "the failed row was not replaced");
    /* The sample had a successful row already, so its description stays the first attempt's. */
    CHECK(tc, count(s, "SELECT context_tokens FROM samples") == 3000, "sample description");
    /* A failure never replaces a success. */
    StoreResult worse[] = {result("snapkv", "40%", 0, "transient")};
    CHECK(tc, store_write_sample(s, run, &m, worse, 1, &err) == 0 && store_last_written(s) == 0, "failure counted");
    CHECK(tc, count(s, "SELECT count(*) FROM results WHERE error IS NOT NULL") == 0, "a success was replaced");
    store_close(s);

    /* Two runs on one database at once, both failing a row (the second's failure replaces the first's): the rows
     * they say they wrote add up to the rows stored. */
    Store *a, *b;
    snprintf(path, sizeof path, "%s/concurrent.db", dir);
    CHECK(tc, store_open(&a, path, 0, &err) == 0 && store_open(&b, path, 0, &err) == 0, "open: %s", err.msg);
    if (!a || !b) return;
    long long ra, rb;
    store_begin_run(a, &RUN, &ra, &err);
    store_begin_run(b, &RUN, &rb, &err);
    StoreResult fa[] = {result("snapkv", "20%", 1.0, NULL), result("snapkv", "40%", 0, "out of memory")};
    StoreResult fb[] = {result("snapkv", "40%", 0, "out of memory"), result("snapkv", "60%", 0.5, NULL)};
    int written = 0, replaced = 0;
    CHECK(tc, store_write_sample(a, ra, &m, fa, 2, &err) == 0, "%s", err.msg);
    written += store_last_written(a);
    replaced += store_last_replaced(a);
    CHECK(tc, store_write_sample(b, rb, &m, fb, 2, &err) == 0, "%s", err.msg);
    written += store_last_written(b);
    replaced += store_last_replaced(b);
    CHECK(tc, written == 3 && replaced == 1 && count(a, "SELECT count(*) FROM results") == written,
          "concurrent runs wrote %d (replaced %d) for %lld rows stored", written, replaced,
          count(a, "SELECT count(*) FROM results"));
    store_close(a);
    store_close(b);
}

/* A database with one sample (results) and one traced sample (traces, trace_heads, trace_sets). */
static void make_db(TestCounts *tc, const char *path) {
    Store *s;
    KvErr err = {{0}};
    long long run;
    unlink(path);
    CHECK(tc, store_open(&s, path, 0, &err) == 0 && store_begin_run(s, &RUN, &run, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    StoreSample m = sample("ruler:vt:0", "vt", "t"), t = sample("ruler:vt:1", "vt", "t");
    StoreResult r[] = {result("snapkv", "20%", 1.0, NULL), result("snapkv", "40%", 0.5, NULL)};
    float heads[6] = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.4f};
    StoreTrace tr[] = {{r[0].key, 32, 0, 0.7, 0.4, 2, 3, heads}, {r[0].key, 32, 1, 0.7, 0.4, 2, 3, heads}};
    StoreTraceSet set = {r[0].key, 100, -1};
    CHECK(tc, store_write_sample(s, run, &m, r, 2, &err) == 0 && store_write_traces(s, run, &t, tr, 2, &set, 1, &err) == 0,
          "write: %s", err.msg);
    store_close(s);
}

/* Runs `sql` on the database as another program could: its tables made non-STRICT and without NOT NULL first
 * (the declared types are then no longer enforced), foreign keys off. */
static void tamper(const char *path, const char *sql) {
    sqlite3 *db;
    sqlite3_open(path, &db);
    sqlite3_exec(db, "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(replace(sql, ') STRICT', ')'), "
                     "' NOT NULL', '') WHERE type = 'table'; PRAGMA writable_schema = OFF;", NULL, NULL, NULL);
    sqlite3_close(db);
    sqlite3_open(path, &db);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) fprintf(stderr, "tamper: %s: %s\n", sql, msg);
    sqlite3_free(msg);
    sqlite3_close(db);
}

/* Values of the wrong type, NULL identities, rows without their parent, inconsistent trace rows and a foreign
 * table: each refused by report's open (read-only) and by merge, with the input, table and row named first; a
 * refused merge into a new file leaves no file. */
static void test_foreign_rows(TestCounts *tc) {
    static const struct {
        const char *name, *sql, *needle;
    } cases[] = {
        {"text_score", "UPDATE results SET score = 'abc' WHERE id = 1", "table results, row 1: column score holds text 'abc'"},
        {"null_model_id", "UPDATE samples SET model_id = NULL WHERE id = 1", "column model_id holds NULL"},
        {"null_data_id", "UPDATE samples SET data_id = NULL WHERE id = 2", "table samples, row 2: column data_id holds NULL"},
        {"int_as_text", "UPDATE samples SET context_tokens = 'many' WHERE id = 1", "column context_tokens holds text 'many'"},
        {"blob_identity", "UPDATE runs SET model_id = x'00' WHERE id = 1", "table runs, row 1: column model_id holds blob"},
        {"orphan_result", "DELETE FROM samples WHERE id = 1", "refers to a samples row that does not exist"},
        {"heads_wrap", "UPDATE trace_heads SET n_layers = 65536, n_kv_heads = 32768 WHERE id = 1",
         "r has 24 bytes for 65536 x 32768 heads"},
        {"heads_negative", "UPDATE trace_heads SET n_layers = -2, n_kv_heads = -3 WHERE id = 1", "outside 1..65536"},
        {"heads_short", "UPDATE trace_heads SET r = x'0000' WHERE id = 2", "table trace_heads, row 2: r has 2 bytes for 2 x 3"},
        {"heads_no_step", "UPDATE trace_heads SET step = 7 WHERE id = 1", "no traces row of its step"},
        {"negative_step", "UPDATE traces SET step = -1 WHERE id = 1; UPDATE trace_heads SET step = -1 WHERE id = 1",
         "table traces, row 1: step -1"},
        {"missing_column", "ALTER TABLE results DROP COLUMN kept_fraction",
         "not a kvbench results database: no such column: results.kept_fraction"},
    };
    char good[128];
    snprintf(good, sizeof good, "%s/good.db", dir);
    make_db(tc, good);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[160], out[160], side[200];
        Store *s = NULL;
        KvErr err = {{0}};
        snprintf(path, sizeof path, "%s/%s.db", dir, cases[i].name);
        make_db(tc, path);
        tamper(path, cases[i].sql);
        CHECK(tc, store_open(&s, path, 1, &err) == -1 && !s && !strncmp(err.msg, path, strlen(path)) &&
                      strstr(err.msg, cases[i].needle),
              "%s: report's open: '%s'", cases[i].name, err.msg);
        snprintf(out, sizeof out, "%s/merged_%s.db", dir, cases[i].name);
        const char *inputs[] = {good, path};
        CHECK(tc, store_merge_into(out, inputs, 2, &err) == -1 && !strncmp(err.msg, path, strlen(path)) &&
                      strstr(err.msg, cases[i].needle),
              "%s: merge: '%s'", cases[i].name, err.msg);
        snprintf(side, sizeof side, "%s.merging-%ld", out, (long)getpid());
        CHECK(tc, access(out, F_OK) != 0 && access(side, F_OK) != 0, "%s: a refused merge left a file", cases[i].name);
    }
    /* Untampered, the same files merge into a new file, which then exists. */
    char out[160];
    snprintf(out, sizeof out, "%s/merged_good.db", dir);
    const char *inputs[] = {good};
    KvErr err = {{0}};
    Store *s = NULL;
    CHECK(tc, store_merge_into(out, inputs, 1, &err) == 0 && store_open(&s, out, 1, &err) == 0 &&
                  count(s, "SELECT count(*) FROM trace_heads") == 2 && count(s, "SELECT count(*) FROM results") == 2,
          "merge into a new file: %s", err.msg);
    store_close(s);
    /* A text file as an input: named first, not called damaged. */
    char text[160];
    snprintf(text, sizeof text, "%s/notes.txt", dir);
    FILE *f = fopen(text, "w");
    if (f) {
        fputs("just some notes, not a database\n", f);
        fclose(f);
    }
    snprintf(out, sizeof out, "%s/merged_text.db", dir);
    const char *with_text[] = {good, text};
    CHECK(tc, store_merge_into(out, with_text, 2, &err) == -1 && !strncmp(err.msg, text, strlen(text)) &&
                  strstr(err.msg, "not an SQLite database") && !strstr(err.msg, "damaged") && access(out, F_OK) != 0,
          "text file merged: '%s'", err.msg);
}

static void test_identity(TestCounts *tc) {
    char path[128], stored[256], stored_path[256], change[256];
    Store *s;
    KvErr err = {{0}};
    long long run;
    snprintf(path, sizeof path, "%s/identity.db", dir);
    CHECK(tc, store_open(&s, path, 0, &err) == 0 && store_begin_run(s, &RUN, &run, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    StoreSample m = sample("ruler:vt:0", "vt", "t");
    StoreResult r[] = {result("snapkv", "20%", 1.0, NULL)};
    CHECK(tc, store_write_sample(s, run, &m, r, 1, &err) == 0, "write: %s", err.msg);

    CHECK(tc, store_check_model(s, "m", "fp=aa", stored, sizeof stored, stored_path, sizeof stored_path, &err) == 0 &&
                  !stored[0],
          "same model flagged: %s", stored);
    CHECK(tc, store_check_model(s, "m", "fp=bb", stored, sizeof stored, stored_path, sizeof stored_path, &err) == 0 &&
                  !strcmp(stored, "fp=aa") && !strcmp(stored_path, "?"),
          "other model: '%s' '%s'", stored, stored_path);
    CHECK(tc, store_check_model(s, "other", "fp=bb", stored, sizeof stored, stored_path, sizeof stored_path, &err) == 0 &&
                  !stored[0],
          "another model name is free");
    CHECK(tc, store_check_data(s, "m", "cq=0", "ruler", "vt", "seed=42,assets=01", stored, sizeof stored, &err) == 0 &&
                  !stored[0],
          "same data flagged");
    CHECK(tc, store_check_data(s, "m", "cq=0", "ruler", "vt", "seed=7,assets=01", stored, sizeof stored, &err) == 0 &&
                  !strcmp(stored, "seed=42,assets=01"),
          "other data: '%s'", stored);
    CHECK(tc, store_check_data(s, "m", "cq=0", "ruler", "cwe", "seed=7,assets=01", stored, sizeof stored, &err) == 0 &&
                  !stored[0],
          "another task is free");

    /* A write under another identity is refused whole, naming the change. */
    StoreSample other = m;
    other.data_id = "seed=7,assets=01";
    StoreResult r2[] = {result("snapkv", "40%", 1.0, NULL)};
    CHECK(tc, store_write_sample(s, run, &other, r2, 1, &err) == -1 && strstr(err.msg, "seed=42 -> seed=7") &&
                  strstr(err.msg, "ruler:vt:0"),
          "other data written: %s", err.msg);
    other = m;
    other.model_id = "fp=bb";
    CHECK(tc, store_write_sample(s, run, &other, r2, 1, &err) == -1 && strstr(err.msg, "fp=aa -> fp=bb"),
          "other model written: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM results") == 1, "rows after refused writes");

    store_identity_change("seed=42,assets=01,qa=none", "seed=42,assets=02,qa=none", change, sizeof change);
    CHECK(tc, !strcmp(change, "assets=01 -> assets=02"), "change: %s", change);
    store_identity_change("synthetic:a", "fp=1,bytes=2", change, sizeof change);
    CHECK(tc, !strcmp(change, "synthetic:a -> fp=1,bytes=2"), "change: %s", change);
    store_identity_change("seed=1", "seed=1,qa=x", change, sizeof change);
    CHECK(tc, !strcmp(change, "(none) -> qa=x") || strstr(change, "qa=x"), "change: %s", change);
    store_close(s);
}

/* A database whose b-tree is damaged (header intact) is refused at open, writable or not, and not touched. */
static void test_damage(TestCounts *tc) {
    char path[128];
    Store *s;
    KvErr err = {{0}};
    long long run;
    snprintf(path, sizeof path, "%s/damaged.db", dir);
    CHECK(tc, store_open(&s, path, 0, &err) == 0 && store_begin_run(s, &RUN, &run, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    for (int i = 0; i < 40; i++) {
        char key[32];
        snprintf(key, sizeof key, "ruler:vt:%d", i);
        StoreSample m = sample(key, "vt", "t");
        StoreResult r[] = {result("snapkv", "20%", 1.0, NULL), result("snapkv", "40%", 0.5, NULL)};
        store_write_sample(s, run, &m, r, 2, &err);
    }
    long long root = count(s, "SELECT rootpage FROM sqlite_schema WHERE name = 'results'");
    long long page = count(s, "PRAGMA page_size");
    store_close(s); /* checkpoints the log into the file */
    /* Overwrite the results table's root page (not page 1, whose header stays intact) with a bad page type. */
    int fd = open(path, O_WRONLY);
    unsigned char junk[64];
    memset(junk, 0xee, sizeof junk);
    CHECK(tc, fd >= 0 && root > 1 && pwrite(fd, junk, sizeof junk, (off_t)((root - 1) * page)) == sizeof junk,
          "corrupting page %lld", root);
    if (fd >= 0) close(fd);
    struct stat before, after;
    stat(path, &before);
    CHECK(tc, store_open(&s, path, 0, &err) == -1 && !s && strstr(err.msg, "damaged") && strstr(err.msg, "damaged.db"),
          "damaged db opened for writing: %s", err.msg);
    CHECK(tc, store_open(&s, path, 1, &err) == -1 && strstr(err.msg, "damaged"), "damaged db opened read-only: %s",
          err.msg);
    stat(path, &after);
    CHECK(tc, before.st_size == after.st_size && before.st_mtime == after.st_mtime, "the damaged file was written");
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(tc, access(wal, F_OK) != 0, "a write-ahead log was left");

    /* Merging it is refused too, before anything is copied. */
    char out[128];
    snprintf(out, sizeof out, "%s/from_damaged.db", dir);
    CHECK(tc, store_open(&s, out, 0, &err) == 0, "open out: %s", err.msg);
    if (!s) return;
    CHECK(tc, merge1(s, path, &err) == -1 && strstr(err.msg, "damaged"), "merged a damaged db: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM runs") == 0, "rows merged from a damaged db");
    store_close(s);
}

/* Read-only opens write nothing: no -wal / -shm next to the file, and they work where the process cannot write
 * (a 0555 directory, entered as `nobody` when the test runs as root, since root ignores permissions). */
static void test_read_only(TestCounts *tc) {
    char ro_dir[128], path[160], wal[170], shm[170];
    Store *s;
    KvErr err = {{0}};
    long long run;
    snprintf(ro_dir, sizeof ro_dir, "%s/ro", dir);
    mkdir(ro_dir, 0755);
    snprintf(path, sizeof path, "%s/results.db", ro_dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    CHECK(tc, store_open(&s, path, 0, &err) == 0 && store_begin_run(s, &RUN, &run, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    StoreSample m = sample("ruler:vt:0", "vt", "t");
    StoreResult r[] = {result("snapkv", "20%", 1.0, NULL)};
    store_write_sample(s, run, &m, r, 1, &err);
    store_close(s);
    CHECK(tc, access(wal, F_OK) != 0 && access(shm, F_OK) != 0, "a closed database left -wal / -shm");

    CHECK(tc, store_open(&s, path, 1, &err) == 0, "open ro: %s", err.msg);
    if (s) {
        CHECK(tc, count(s, "SELECT count(*) FROM results") == 1, "rows read");
        CHECK(tc, access(wal, F_OK) != 0 && access(shm, F_OK) != 0, "a read-only open created -wal / -shm");
        store_close(s);
    }
    CHECK(tc, access(wal, F_OK) != 0 && access(shm, F_OK) != 0, "a read-only close left -wal / -shm");

    /* The directory and file made read-only; a child that cannot write there reads the database. */
    chmod(dir, 0755);
    chmod(path, 0444);
    chmod(ro_dir, 0555);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0) {
            struct passwd *nobody = getpwnam("nobody");
            if (!nobody || setgid(nobody->pw_gid) || setuid(nobody->pw_uid)) _exit(90);
        }
        if (access(ro_dir, W_OK) == 0) _exit(91); /* not a read-only place after all */
        Store *c;
        KvErr e = {{0}};
        if (store_open(&c, path, 1, &e)) {
            fprintf(stderr, "read-only open: %s\n", e.msg);
            _exit(92);
        }
        long long n = count(c, "SELECT count(*) FROM results");
        store_close(c);
        _exit(n == 1 ? 0 : 93);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(tc, WIFEXITED(status) && WEXITSTATUS(status) == 0, "read-only directory: child exit %d",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    chmod(ro_dir, 0755);
}

/* runs.sample_limit (--limit) is recorded; a database written before the column existed is read without it
 * (read-only, and as a merge input, its runs' limit NULL) and gains it when opened for writing. */
static void test_sample_limit(TestCounts *tc) {
    char old[128], out[128];
    Store *s = NULL;
    KvErr err = {{0}};
    long long run;
    snprintf(old, sizeof old, "%s/before_limit.db", dir);
    snprintf(out, sizeof out, "%s/after_limit.db", dir);
    StoreRun limited = RUN;
    limited.sample_limit = 3;
    StoreSample m = sample("ruler:vt:0", "vt", "tracing");
    StoreResult r[] = {result("snapkv", "20%", 1.0, NULL)};
    CHECK(tc, store_open(&s, old, 0, &err) == 0 && store_begin_run(s, &limited, &run, &err) == 0 &&
                  store_write_sample(s, run, &m, r, 1, &err) == 0,
          "limited run: %s", err.msg);
    CHECK(tc, s && count(s, "SELECT sample_limit FROM runs") == 3, "sample_limit recorded");
    /* as an earlier build wrote it */
    CHECK(tc, s && sqlite3_exec(store_handle(s), "ALTER TABLE runs DROP COLUMN sample_limit", NULL, NULL, NULL) ==
                       SQLITE_OK, "drop the column");
    store_close(s);
    CHECK(tc, store_open(&s, old, 1, &err) == 0, "read-only open of a database without sample_limit: %s", err.msg);
    store_close(s);
    const char *inputs[] = {old};
    CHECK(tc, store_merge_into(out, inputs, 1, &err) == 0 && store_open(&s, out, 1, &err) == 0 &&
                  count(s, "SELECT count(*) FROM runs WHERE sample_limit IS NULL") == 1,
          "merge of a database without sample_limit: %s", err.msg);
    store_close(s);
    CHECK(tc, store_open(&s, old, 0, &err) == 0 &&
                  count(s, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'sample_limit'") == 1,
          "a writable open adds sample_limit: %s", err.msg);
    store_close(s);
}

int main(void) {
    TestCounts tc = {"test_store", 0, 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_store_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_write_and_views(&tc);
    test_bad_files(&tc);
    test_merge(&tc);
    test_retry_and_count(&tc);
    test_identity(&tc);
    test_damage(&tc);
    test_read_only(&tc);
    test_foreign_rows(&tc);
    test_sample_limit(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
