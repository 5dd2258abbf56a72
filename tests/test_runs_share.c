/* test_runs_share.c — runs that share a database, merges that are interrupted, and the run's smaller promises
 * (issue 39), end to end on a 2-layer synthetic SmolLM2 shape with SmolLM2's tokenizer.
 *
 * Checks: two processes on one database compute each sample once between them (claims, store/claims.h), and a
 * claim of a live process, of another host's live lease, of a killed process and of an expired lease are held or
 * taken over as they should be; a merge into a new file stopped by SIGINT or SIGTERM leaves no temporary file;
 * a merge through a link to its own output is refused; --limit reaches runs.sample_limit and the report's warning;
 * `run --help` lists --memory-limit; a memory limit is printed in its own unit and refuses a prefill it cannot
 * hold before computing it; 0x10 is not a size; the per-sample line and the summary count failed variants; a --db
 * that cannot be created stops the run before any work; a newline in a model name stays escaped in the log; run
 * outside the repository, kvbench finds its assets through KVBENCH_ASSETS or says to set it. */
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../report/model.h"
#include "../store/claims.h"
#include "../cli/cli.h"
#include "../cli/commands.h"
#include "../runs/memplan.h"
#include "../store/store.h"
#include "sweep_harness.h"
#include "test.h"

#define TOKENIZER "models/SmolLM2-135M-Instruct.Q4_1.gguf"
enum { N_SHARED = 4 };

/* A config of `n` RULER niah_single_1 samples (1024 tokens) under full and snapkv at 20%, model named `name`
 * (JSON-escaped by the caller), tokenizer at `tokenizer`; written to DIR/FILE, whose path it returns. */
static char *ruler_config(const char *file, int n, const char *name, const char *tokenizer) {
    char *path = path_in(file);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"name\": \"share\", \"max_new_tokens\": 2,\n"
            " \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", \"name\": \"%s\", \"tokenizer\": \"%s\"}],\n"
            " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_1\"], \"target_tokens\": 1024, "
            "\"n_samples\": %d}],\n"
            " \"policies\": [\"full\", \"snapkv\"], \"budgets\": [\"20%%\"]}\n",
            name, tokenizer, n);
    fclose(f);
    return path;
}

/* The numbers "X of Y samples done here" and ", Z done by another run" of a run's summary (-1 when absent). */
static void logged_samples(const char *log_name, long long *done, long long *elsewhere) {
    char path[128], line[2048];
    *done = *elsewhere = -1;
    snprintf(path, sizeof path, "%s/%s.log", dir, log_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, " samples done here");
        if (!p || strncmp(line, "kvbench run: ", 13)) continue;
        *done = atoll(line + 13);
        const char *e = strstr(line, " done by another run");
        if (!e) *elsewhere = 0;
        else {
            while (e > line && e[-1] >= '0' && e[-1] <= '9') e--;
            *elsewhere = atoll(e);
        }
    }
    if (f) fclose(f);
}

/* Item 7: two processes on one database share its samples. */
static void test_concurrent(TestCounts *tc, const char *config, const char *db) {
    char *args[] = {(char *)config, "--db", (char *)db, NULL};
    pid_t a = start(cmd_run, "share_a", args), b = start(cmd_run, "share_b", args);
    int ra = finish(a), rb = finish(b);
    long long done_a, done_b, else_a, else_b;
    logged_samples("share_a", &done_a, &else_a);
    logged_samples("share_b", &done_b, &else_b);
    CHECK(tc, ra == 0 && rb == 0, "concurrent runs exited %d, %d", ra, rb);
    CHECK(tc, done_a + done_b == N_SHARED && done_a >= 0 && done_b >= 0,
          "each sample computed once between two runs: %lld + %lld of %d", done_a, done_b, N_SHARED);
    CHECK(tc, query_int(db, "SELECT count(*) FROM results WHERE error IS NULL") == 2 * N_SHARED &&
                  query_int(db, "SELECT count(*) FROM claims") == 0,
          "rows stored, no claim left");
}

/* Deletes the samples (and by cascade their results) of the given keys. */
static void forget_samples(const char *db, char keys[][64], int n) {
    sqlite3 *h;
    sqlite3_open(db, &h);
    sqlite3_exec(h, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
    for (int i = 0; i < n; i++) {
        char sql[400];
        snprintf(sql, sizeof sql, "DELETE FROM samples WHERE sample_key = '%s'", keys[i]);
        sqlite3_exec(h, sql, NULL, NULL, NULL);
    }
    sqlite3_close(h);
}

/* A claims row of another host, its lease ending `lease_s` seconds from now (negative: ended). */
static void foreign_claim(const char *db, const char *setup, const char *key, double lease_s) {
    sqlite3 *h;
    sqlite3_stmt *st;
    sqlite3_open(db, &h);
    sqlite3_prepare_v2(h, "INSERT OR REPLACE INTO claims VALUES('syn', ?1, ?2, 'another-host', 1, 1, ?3)", -1, &st,
                       NULL);
    sqlite3_bind_text(st, 1, setup, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, (double)time(NULL) + lease_s);
    sqlite3_step(st);
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static long long has_sample(const char *db, const char *key) {
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE "
                              "s.sample_key = '%s' AND r.error IS NULL", key);
    return query_int(db, sql);
}

/* Item 7: claims left in the database. Four samples are taken out again and claimed: by this (live) process, by
 * a live lease of another host, by a process killed with SIGKILL, and by another host's expired lease. A run takes
 * over the last two and waits for the first two; once they are released, it computes them too. */
static void test_claims_left(TestCounts *tc, const char *config, const char *db) {
    char keys[4][64] = {{0}}, setup[160] = "";
    sqlite3 *h;
    sqlite3_stmt *st;
    sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
    sqlite3_prepare_v2(h, "SELECT setup, sample_key FROM samples ORDER BY idx LIMIT 4", -1, &st, NULL);
    for (int i = 0; i < 4 && sqlite3_step(st) == SQLITE_ROW; i++) {
        snprintf(setup, sizeof setup, "%s", (const char *)sqlite3_column_text(st, 0));
        snprintf(keys[i], sizeof keys[i], "%s", (const char *)sqlite3_column_text(st, 1));
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    CHECK(tc, keys[3][0] && setup[0], "four samples to take out");
    forget_samples(db, keys, 4);

    /* The killed claimant: a child that claims keys[2], says so through a pipe, and waits to be killed. */
    int ready[2];
    CHECK(tc, pipe(ready) == 0, "pipe");
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        Store *cs;
        Claimant c;
        KvErr e;
        int taken = 0;
        claims_self(&c);
        if (store_open(&cs, db, 0, &e) || claims_take(cs, &c, "syn", setup, keys[2], &taken, &e) || !taken) _exit(1);
        store_close(cs);
        if (write(ready[1], "y", 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char byte = 0;
    CHECK(tc, read(ready[0], &byte, 1) == 1 && byte == 'y', "the child claimed its sample");
    kill(child, SIGKILL);
    CHECK(tc, finish(child) == 128 + SIGKILL, "the claimant was killed");
    close(ready[0]);
    close(ready[1]);

    Store *s = NULL;
    Claimant me;
    KvErr err = {{0}};
    int taken = 0;
    claims_self(&me);
    CHECK(tc, store_open(&s, db, 0, &err) == 0 && claims_take(s, &me, "syn", setup, keys[0], &taken, &err) == 0 &&
                  taken,
          "this process claims a sample: %s", err.msg);
    store_close(s); /* no SQLite connection may cross the fork below (the claim stays: it names this process) */
    foreign_claim(db, setup, keys[1], 600);
    foreign_claim(db, setup, keys[3], -1);

    /* The run computes the samples of the killed process and of the expired lease, then waits for the two held. */
    char *args[] = {(char *)config, "--db", (char *)db, NULL};
    pid_t pid = start(cmd_run, "claims", args);
    for (int i = 0; i < 30000 && !log_contains("claims", "waiting for 2 samples"); i++) usleep(2000);
    CHECK(tc, log_contains("claims", "waiting for 2 samples another run on this database is computing"),
          "the run did not wait for the held samples");
    CHECK(tc, !has_sample(db, keys[0]) && !has_sample(db, keys[1]), "a live claim was taken over");
    CHECK(tc, has_sample(db, keys[2]) == 2 && has_sample(db, keys[3]) == 2,
          "the killed process's claim and the expired lease were not taken over");

    /* Released (this process) and lapsed (the other host): the waiting run computes both and ends. */
    CHECK(tc, store_open(&s, db, 0, &err) == 0 && claims_release(s, &me, "syn", setup, keys[0], &err) == 0,
          "release: %s", err.msg);
    store_close(s);
    foreign_claim(db, setup, keys[1], -1);
    int rc = finish(pid);
    long long done, elsewhere;
    logged_samples("claims", &done, &elsewhere);
    CHECK(tc, rc == 0 && done == 4 && elsewhere == 0 && has_sample(db, keys[0]) == 2 && has_sample(db, keys[1]) == 2,
          "released claims: exit %d, %lld done", rc, done);
    CHECK(tc, query_int(db, "SELECT count(*) FROM claims") == 0, "claims left after the runs");
}

/* Item 8: `kvbench merge` into a new file, signalled while it waits before copying: it ends by the signal and
 * leaves neither the output nor its temporary file (with -wal / -shm). */
static void test_merge_interrupted(TestCounts *tc, const char *db) {
    const int SIGNALS[] = {SIGINT, SIGTERM};
    for (int k = 0; k < 2; k++) {
        char out[128], tmp[200];
        snprintf(out, sizeof out, "%s/interrupted_%d.db", dir, k);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen(path_in("merge_signal.log"), "w", stderr)) _exit(99);
            /* as from a terminal: a test started in the background (`make test &`) inherits SIGINT ignored, which
             * kvbench merge keeps ignored, as it does under nohup */
            signal(SIGINT, SIG_DFL);
            char *args[] = {out, (char *)db, NULL};
            StoreMergeOptions slow = {NULL, 20000};
            _exit(cmd_merge_with(2, args, &slow));
        }
        snprintf(tmp, sizeof tmp, "%s.merging-%ld", out, (long)pid);
        for (int i = 0; i < 5000 && access(tmp, F_OK); i++) usleep(2000);
        int started = access(tmp, F_OK) == 0;
        kill(pid, SIGNALS[k]);
        int rc = finish(pid);
        char side[220];
        int left = 0;
        const char *suffix[] = {"", "-wal", "-shm"};
        for (int i = 0; i < 3; i++) {
            snprintf(side, sizeof side, "%s%s", tmp, suffix[i]);
            left += access(side, F_OK) == 0;
        }
        CHECK(tc, started && rc == 128 + SIGNALS[k] && left == 0 && access(out, F_OK) != 0,
              "merge stopped by signal %d: started %d, exit %d, %d temporary files left", SIGNALS[k], started, rc,
              left);
    }
}

/* Item 10: merge through a symbolic link to its own output is refused as the plain path is. */
static void test_merge_self_link(TestCounts *tc, const char *db) {
    char link_path[128];
    snprintf(link_path, sizeof link_path, "%s/self_link.db", dir);
    CHECK(tc, symlink(db, link_path) == 0, "symlink");
    long long before = query_int(db, "SELECT count(*) FROM runs");
    char *plain[] = {(char *)db, (char *)db, NULL}, *linked[] = {(char *)db, link_path, NULL};
    CHECK(tc, run(cmd_merge, "merge_self", plain) == 1 && log_contains("merge_self", "into itself"), "plain path");
    CHECK(tc, run(cmd_merge, "merge_link", linked) == 1 && log_contains("merge_link", "into itself") &&
                  query_int(db, "SELECT count(*) FROM runs") == before,
          "merge through a link to itself was not refused");
}

/* Item 9: --limit is recorded with the run and the report warns of it. */
static void test_limit_recorded(TestCounts *tc, const char *config) {
    const char *db = path_in("limited.db");
    char *args[] = {(char *)config, "--db", (char *)db, "--limit", "1", NULL};
    CHECK(tc, run(cmd_run, "limited", args) == 0, "limited run");
    CHECK(tc, query_int(db, "SELECT count(*) FROM runs WHERE sample_limit = 1") == 1, "runs.sample_limit");
    sqlite3 *h;
    ReportProvenance p;
    KvErr err = {{0}};
    sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL);
    CHECK(tc, report_provenance_load(h, &p, &err) == 0 && strstr(p.warning, "1 of 1 runs were limited (--limit 1)"),
          "report warning: '%s' %s", p.warning, err.msg);
    sqlite3_close(h);
    /* An unlimited run leaves the column NULL and adds no warning of it. */
    const char *all = path_in("shared.db");
    sqlite3_open_v2(all, &h, SQLITE_OPEN_READONLY, NULL);
    CHECK(tc, report_provenance_load(h, &p, &err) == 0 && !strstr(p.warning, "limited") &&
                  query_int(all, "SELECT count(*) FROM runs WHERE sample_limit IS NOT NULL") == 0,
          "an unlimited run: '%s'", p.warning);
    sqlite3_close(h);
}

/* Item 10: the run's command line, memory limit and log. */
static void test_run_messages(TestCounts *tc, const char *config) {
    /* `kvbench run --help` lists --memory-limit */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(path_in("help.log"), "w", stdout)) _exit(99);
        char *argv[] = {"kvbench", "run", "--help", NULL};
        int rc = kvbench_main(3, argv);
        fflush(NULL);
        _exit(rc);
    }
    CHECK(tc, finish(pid) == 0 && log_contains("help", "--memory-limit SIZE"), "run --help lists --memory-limit");

    /* 0x10 is not a size (C's strtod reads it as 16) */
    double bytes = 0;
    KvErr err = {{0}};
    CHECK(tc, memplan_parse_bytes("0x10", "--memory-limit", &bytes, &err) == -1 &&
                  memplan_parse_bytes("0x1p4", "--memory-limit", &bytes, &err) == -1 &&
                  memplan_parse_bytes("16", "--memory-limit", &bytes, &err) == 0 && bytes == 16,
          "hexadecimal sizes");
    char *hex[] = {(char *)config, "--memory-limit", "0x10", "--db", path_in("hex.db"), NULL};
    CHECK(tc, run(cmd_run, "hex", hex) == 2 && log_contains("hex", "'0x10'"), "--memory-limit 0x10");

    /* A limit below 1 MiB in its own unit; the 1024-token prefill it cannot hold is not computed (prefill_ms 0) */
    const char *small = path_in("small_limit.db");
    char *lim[] = {(char *)config, "--db", (char *)small, "--memory-limit", "512KiB", "--limit", "1", NULL};
    int rc = run(cmd_run, "small_limit", lim);
    CHECK(tc, rc == 3 && query_int(small, "SELECT count(*) FROM results WHERE error LIKE 'out of memory: the "
                                          "prefill''s cache of at least 1.__ MiB alone exceeds the memory limit of "
                                          "512.00 KiB' AND prefill_ms = 0") == 2,
          "a 512 KiB limit (exit %d)", rc);
    /* every variant failed: the per-sample line says so instead of a mean score of 0 */
    CHECK(tc, log_contains("small_limit", "no score (every variant failed)") &&
                  log_contains("small_limit", "; 2 rows failed;"),
          "a sample whose variants all failed");

    /* --db in a directory that cannot be created: refused before any work */
    char *nodir[] = {(char *)config, "--db", "/proc/kvbench_no_such_dir/x.db", NULL};
    CHECK(tc, run(cmd_run, "nodir", nodir) == 1 && log_contains("nodir", "cannot create /proc/kvbench_no_such_dir") &&
                  log_contains("nodir", "nothing was run") && !log_contains("nodir", "samples to run"),
          "an uncreatable --db");

    /* a newline in a model name stays escaped in the run log */
    char *nl = ruler_config("newline.json", 1, "syn\\nkvbench run: 9 of 9 samples done here", TOKENIZER);
    char *nl_args[] = {nl, "--db", path_in("newline.db"), NULL};
    CHECK(tc, run(cmd_run, "newline", nl_args) == 0 && log_contains("newline", "syn\\nkvbench run: 9 of 9") &&
                  !log_contains("newline", "\nkvbench run: 9 of 9"),
          "a newline in a model name reached the log");
}

/* Item 10: the per-sample line's mean leaves failed variants out and the summary counts the failed rows. trec's
 * fixtures are shorter than snapkv's 48-token window, so snapkv fails where full runs. */
static void test_failed_rows_counted(TestCounts *tc) {
    char *path = path_in("trec.json");
    FILE *f = fopen(path, "w");
    fputs("{\"max_new_tokens\": 2, \"window\": 48, \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", "
          "\"name\": \"syn\", \"tokenizer\": \"" TOKENIZER "\"}], \"datasets\": [{\"suite\": \"longbench\", "
          "\"tasks\": [\"trec\"], \"data_path\": \"tests/data/longbench/fixtures\"}], \"policies\": [\"full\", "
          "\"snapkv\"], \"budgets\": [\"20%\"]}\n", f);
    fclose(f);
    char *args[] = {path, "--db", path_in("trec.db"), NULL};
    CHECK(tc, run(cmd_run, "trec", args) == 3 && log_contains("trec", "of the 1 that ran (1 failed)") &&
                  log_contains("trec", "; 3 rows failed;"),
          "failed variants in the per-sample line and the summary");
}

/* Item 10: outside the repository root, the assets come from KVBENCH_ASSETS, and without it the run says to set
 * it (the test binary is not beside datasets/assets, as kvbench is). */
static void test_assets(TestCounts *tc) {
    char root[4096], tokenizer[4200], assets[4200];
    CHECK(tc, getcwd(root, sizeof root) != NULL, "getcwd");
    snprintf(tokenizer, sizeof tokenizer, "%s/" TOKENIZER, root);
    snprintf(assets, sizeof assets, "%s/datasets/assets", root);
    char *config = ruler_config("assets.json", 1, "syn", tokenizer);
    for (int with_env = 0; with_env < 2; with_env++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            const char *log = path_in(with_env ? "assets_env.log" : "assets_none.log");
            if (!freopen(log, "w", stderr) || chdir(dir)) _exit(99);
            if (with_env) setenv("KVBENCH_ASSETS", assets, 1);
            else unsetenv("KVBENCH_ASSETS");
            char *args[] = {config, "--db", with_env ? "assets_env.db" : "assets_none.db", NULL};
            int rc = cmd_run(3, args);
            fflush(NULL);
            _exit(rc);
        }
        int rc = finish(pid);
        if (with_env)
            CHECK(tc, rc == 0 && query_int(path_in("assets_env.db"), "SELECT count(*) FROM results WHERE error IS "
                                                                     "NULL") == 2,
                  "KVBENCH_ASSETS outside the repository (exit %d)", rc);
        else
            CHECK(tc, rc == 1 && log_contains("assets_none", "set KVBENCH_ASSETS="), "no assets found (exit %d)", rc);
    }
}

int main(void) {
    TestCounts tc = {"test_runs_share", 0, 0, 0};
    CHECK(&tc, access(TOKENIZER, R_OK) == 0, "%s is missing: run `make model` first", TOKENIZER);
    if (tc.failed) return test_finish(&tc);
    snprintf(dir, sizeof dir, "/tmp/kvbench_share_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char *config = ruler_config("share.json", N_SHARED, "syn", TOKENIZER);
    char db[128];
    snprintf(db, sizeof db, "%s", path_in("shared.db"));
    test_concurrent(&tc, config, db);
    test_claims_left(&tc, config, db);
    test_merge_interrupted(&tc, db);
    test_merge_self_link(&tc, db);
    test_limit_recorded(&tc, config);
    test_run_messages(&tc, config);
    test_failed_rows_counted(&tc);
    test_assets(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
