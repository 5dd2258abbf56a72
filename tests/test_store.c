/* test_store.c — the results database: schema and version check, one transaction per sample, resume lookups,
 * the task/domain views (hand-computed averages), merge of shard databases, and clean failures on a full
 * disk (simulated with max_page_count), a read-only connection, a path that cannot be created, a foreign file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runs/store.h"
#include "test.h"

static char dir[64];

static const StoreRun RUN = {"t", "{}", "abc", "rev", "m", "models/m.gguf", "00", "models/m.gguf", "cpu", "host", NULL};

static StoreSample sample(const char *key, const char *task, const char *domain) {
    StoreSample m = {"m", "cq=0", key, "ruler", task, domain, "string_match_all", 0, -1, 4096, 3000, 40,
                     "[\"a\"]", NULL, 0};
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
    CHECK(tc, done[0] == 1 && done[1] == 1 && done[2] == 0, "done flags %d %d %d", done[0], done[1], done[2]);
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
    CHECK(tc, strstr(err.msg, "garbage.db") && strstr(err.msg, "not a database"), "message: %s", err.msg);

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
    CHECK(tc, store_merge(s, a, &err) == 0, "merge a: %s", err.msg);
    CHECK(tc, store_merge(s, b, &err) == 0, "merge b: %s", err.msg);
    CHECK(tc, store_merge(s, b, &err) == 0, "merge b again: %s", err.msg);
    CHECK(tc, count(s, "SELECT count(*) FROM runs") == 2, "runs %lld", count(s, "SELECT count(*) FROM runs"));
    CHECK(tc, count(s, "SELECT count(*) FROM samples") == 2, "samples");
    CHECK(tc, count(s, "SELECT count(*) FROM results") == 4, "results %lld", count(s, "SELECT count(*) FROM results"));
    CHECK(tc, count(s, "SELECT count(*) FROM results r JOIN samples m ON m.id = r.sample_id "
                       "JOIN runs u ON u.id = m.run_id") == 4,
          "foreign keys resolve");
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.db", dir);
    CHECK(tc, store_merge(s, missing, &err) == -1 && strstr(err.msg, "none.db"), "missing input: %s", err.msg);
    CHECK(tc, store_merge(s, out, &err) == -1, "merged into itself");
    store_close(s);
}

int main(void) {
    TestCounts tc = {"test_store", 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_store_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_write_and_views(&tc);
    test_bad_files(&tc);
    test_merge(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
