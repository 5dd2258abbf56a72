/* test_e2e.c — `kvbench run` → database → `kvbench report`/`merge` end to end, on a 2-layer synthetic SmolLM2
 * shape with SmolLM2's real tokenizer, over RULER, needle and LongBench samples, with every kind of policy.
 *
 * Checks: row counts of a full run; a run killed with SIGKILL mid-way and rerun ends with exactly the rows of
 * the uninterrupted run (same predictions, nothing duplicated); two shards merged equal the whole; --limit;
 * samples too short for the observation window become failed rows while the run goes on; a run under a memory limit
 * (several batches) and runs that decode several samples as one batch give the same rows; the report writes
 * its files; bad inputs exit non-zero with a message naming the problem. Each run is a forked child calling
 * the subcommand, so the parent stays free of OpenMP threads and can kill a run at any moment. */
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../cli/commands.h"
#include "sweep_harness.h"
#include "test.h"

#define TOKENIZER "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static const char *CONFIG =
    "{\"name\": \"e2e\", \"max_new_tokens\": 4, \"window\": 48,\n"
    " \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", \"name\": \"syn\",\n"
    "              \"tokenizer\": \"" TOKENIZER "\"}],\n"
    " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_1\", \"vt\"], \"target_tokens\": 1024,\n"
    "                \"n_samples\": 2},\n"
    "              {\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [400], \"depths\": [0, 100]},\n"
    "              {\"suite\": \"longbench\", \"tasks\": [\"multi_news\"], \"data_path\": \"tests/data/longbench\",\n"
    "               \"first_n\": 2, \"target_tokens\": 400},\n"
    "              {\"suite\": \"longbench\", \"tasks\": [\"trec\"], \"data_path\": \"tests/data/longbench/fixtures\"}],\n"
    " \"policies\": [\"full\", \"streamingllm\", \"snapkv\", \"defensivekv\", \"layer-defensivekv\"],\n"
    " \"budgets\": [\"20%\", \"40%\"]}\n";
enum { N_SAMPLES = 11, N_VARIANTS = 9, N_TASKS = 5 };

/* Every result row as text, in a fixed order (timings excluded: they differ between runs). */
static char *dump_rows(const char *db_path) {
    return dump_query(db_path,
                      "SELECT s.sample_key || '|' || s.task || '|' || r.policy || '|' || r.aggregation || '|' || "
                      "r.params || '|' || r.budget || '|' || coalesce(r.prediction, '<null>') || '|' || "
                      "coalesce(printf('%.6f', r.score), '-') || '|' || coalesce(r.error, '') || '|' || "
                      "r.kept_tokens FROM results r JOIN samples s ON s.id = r.sample_id ORDER BY 1");
}

/* The "N rows written" of a run's summary line (-1 when absent). */
static long long logged_rows(const char *log_name) {
    char path[128], line[1024];
    long long rows = -1;
    snprintf(path, sizeof path, "%s/%s.log", dir, log_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, " rows written to ");
        if (!p) continue;
        while (p > line && p[-1] >= '0' && p[-1] <= '9') p--;
        rows = atoll(p);
    }
    if (f) fclose(f);
    return rows;
}

/* The "N samples needed more than one" of a run's decode batches line (-1 when absent). */
static long long logged_split(const char *log_name) {
    char path[128], line[1024];
    long long n = -1;
    snprintf(path, sizeof path, "%s/%s.log", dir, log_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, " decode batches; ");
        if (p) n = atoll(p + strlen(" decode batches; "));
    }
    if (f) fclose(f);
    return n;
}

static void test_runs(TestCounts *tc, const char *config) {
    /* Shards 0/2 and 1/2 in two processes, merged: together one uninterrupted run of every sample. */
    char *s0[] = {(char *)config, "--db", path_in("s0.db"), "--shard", "0/2", NULL};
    char *s1[] = {(char *)config, "--db", path_in("s1.db"), "--shard", "1/2", NULL};
    int rc0 = run(cmd_run, "s0", s0), rc1 = run(cmd_run, "s1", s1);
    /* Exit status 3: the runs finished, with failed rows (trec, below). */
    CHECK(tc, rc0 == 3 && rc1 == 3 && log_contains("s0", "rows failed") && log_contains("s0", "exit status 3"),
          "shard runs exited %d, %d", rc0, rc1);
    long long n0 = query_int(path_in("s0.db"), "SELECT count(*) FROM samples");
    long long n1 = query_int(path_in("s1.db"), "SELECT count(*) FROM samples");
    CHECK(tc, n0 + n1 == N_SAMPLES && n0 > 0 && n1 > 0, "shards hold %lld + %lld samples", n0, n1);
    char *m_args[] = {path_in("m.db"), path_in("s0.db"), path_in("s1.db"), NULL};
    CHECK(tc, run(cmd_merge, "merge", m_args) == 0, "merge");
    const char *m = path_in("m.db");
    CHECK(tc, query_int(m, "SELECT count(*) FROM samples") == N_SAMPLES, "samples %lld",
          query_int(m, "SELECT count(*) FROM samples"));
    CHECK(tc, query_int(m, "SELECT count(*) FROM results") == N_SAMPLES * N_VARIANTS, "results %lld",
          query_int(m, "SELECT count(*) FROM results"));
    CHECK(tc, query_int(m, "SELECT count(DISTINCT task) FROM samples") == N_TASKS, "tasks");
    CHECK(tc, query_int(m, "SELECT count(*) FROM runs WHERE finished IS NOT NULL AND model_id LIKE "
                           "'synthetic=smollm2-135m:layers=2,tokenizer=%' AND shard IN ('0/2', '1/2')") == 2,
          "run rows");
    CHECK(tc, query_int(m, "SELECT count(DISTINCT model_id) FROM samples") == 1 &&
                  query_int(m, "SELECT count(*) FROM samples WHERE data_id = '' OR model_id = ''") == 0 &&
                  query_int(m, "SELECT count(*) FROM samples WHERE suite = 'ruler' AND data_id NOT LIKE 'seed=42,%'") == 0,
          "sample identities");
    /* trec fixtures are shorter than the 48-token window: the attention policies fail there (6 variants of 3
     * samples) while full and streamingllm run, and so does the rest of the sweep. */
    CHECK(tc, query_int(m, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE s.task = 'trec' "
                           "AND r.error LIKE '%window%'") == 3 * 6,
          "trec failed rows: %lld", query_int(m, "SELECT count(*) FROM results WHERE error IS NOT NULL"));
    CHECK(tc, query_int(m, "SELECT count(*) FROM results WHERE error IS NOT NULL") == 3 * 6, "other failures");
    CHECK(tc, query_int(m, "SELECT count(*) FROM results WHERE error IS NULL AND (prediction IS NULL OR score IS NULL "
                           "OR score < 0 OR score > 1)") == 0,
          "successful rows have a prediction and a score in [0, 1]");
    /* Budgets: 20% keeps about a fifth of the context, full all of it. */
    CHECK(tc, query_int(m, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE r.error IS NULL "
                           "AND r.budget = '20%' AND abs(r.kept_tokens - 0.2 * s.context_tokens) > 2") == 0,
          "20%% keep-sets");
    CHECK(tc, query_int(m, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE "
                           "r.policy = 'full' AND r.kept_tokens != s.context_tokens") == 0,
          "full keeps everything");
    char *rows_m = dump_rows(m);

    /* Under a memory limit that leaves room for only a few variants beside the prefill's cache: the variants
     * decode in several batches, and every row is the one the unlimited run made, bit for bit. */
    char *ml_args[] = {(char *)config, "--db", path_in("ml.db"), "--memory-limit", "4MiB", NULL};
    int rc_ml = run(cmd_run, "ml", ml_args);
    char *rows_ml = dump_rows(path_in("ml.db"));
    long long split = logged_split("ml");
    CHECK(tc, rc_ml == 3 && !strcmp(rows_m, rows_ml), "rows under --memory-limit 4MiB differ (exit %d)", rc_ml);
    CHECK(tc, split > 0 && log_contains("ml", " batches, mean score"),
          "--memory-limit 4MiB: %lld samples decoded in more than one batch", split);
    CHECK(tc, log_contains("s0", "in 1 batch, mean score"), "an unlimited run decodes each sample in one batch");
    free(rows_ml);
    /* Decode across samples: the variants of up to 4 samples decode as one batch, every row the one-sample run's,
     * bit for bit; then up to every sample at once under the 4MiB limit, where the pool decodes early whenever the
     * next sample does not fit beside it and a sample that needs several batches decodes alone. */
    char *joint_args[] = {(char *)config, "--db", path_in("joint.db"), "--decode-samples", "4", NULL};
    int rc_joint = run(cmd_run, "joint", joint_args);
    char *rows_joint = dump_rows(path_in("joint.db"));
    CHECK(tc, rc_joint == 3 && !strcmp(rows_m, rows_joint), "rows under --decode-samples 4 differ (exit %d)", rc_joint);
    CHECK(tc, log_contains("joint", "in 1 batch with 3 other samples, mean score") &&
                  !log_contains("joint", "with 4 other"),
          "--decode-samples 4: samples decode four at a time");
    free(rows_joint);
    char *jml_args[] = {(char *)config, "--db", path_in("jml.db"), "--decode-samples", "11", "--memory-limit", "4MiB",
                        NULL};
    int rc_jml = run(cmd_run, "jml", jml_args);
    char *rows_jml = dump_rows(path_in("jml.db"));
    CHECK(tc, rc_jml == 3 && !strcmp(rows_m, rows_jml), "rows under --decode-samples 11 --memory-limit 4MiB differ "
          "(exit %d)", rc_jml);
    CHECK(tc, log_contains("jml", " other sample") && logged_split("jml") > 0,
          "--decode-samples 11 --memory-limit 4MiB: some samples decode together, some alone in several batches");
    free(rows_jml);
    char *bad_joint[] = {(char *)config, "--decode-samples", "0", NULL};
    CHECK(tc, run(cmd_run, "bad_joint", bad_joint) == 2 &&
                  log_contains("bad_joint", "--decode-samples '0': out of range"),
          "--decode-samples 0 is refused");
    /* A limit the prefill's cache of a 1024-token sample alone exceeds: none of its variants runs, and its rows
     * say why; the shorter samples still decode what fits. */
    char *tiny_args[] = {(char *)config, "--db", path_in("tiny.db"), "--memory-limit", "1MiB", "--limit", "1", NULL};
    int rc_tiny = run(cmd_run, "tiny", tiny_args);
    const char *tiny = path_in("tiny.db");
    long long long_rows = query_int(tiny, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE "
                                          "s.context_tokens > 600");
    long long said = query_int(tiny, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE "
                                     "s.context_tokens > 600 AND r.error LIKE 'out of memory: the prefill''s cache of % "
                                     "MiB alone exceeds the memory limit of 1.00 MiB'");
    CHECK(tc, rc_tiny == 3 && long_rows == 2 * N_VARIANTS && said == long_rows,
          "rows of the long samples under --memory-limit 1MiB (exit %d): %lld of %lld say why", rc_tiny, said,
          long_rows);
    CHECK(tc, query_int(tiny, "SELECT count(*) FROM results WHERE error IS NULL") > 0, "short samples still decode");

    /* B: killed with SIGKILL once some samples are in, then resumed: the same rows as the whole. */
    const char *b = path_in("b.db");
    char *b_args[] = {(char *)config, "--db", (char *)b, NULL};
    pid_t pid = start(cmd_run, "b1", b_args);
    long long seen = 0;
    for (int i = 0; i < 30000 && seen < 2; i++) {
        usleep(2000);
        seen = query_int(b, "SELECT count(*) FROM samples");
    }
    kill(pid, SIGKILL);
    int rc = finish(pid);
    long long after_kill = query_int(b, "SELECT count(*) FROM samples");
    CHECK(tc, rc == 128 + SIGKILL, "run b was not killed (exit %d)", rc);
    CHECK(tc, after_kill >= 2 && after_kill < N_SAMPLES, "killed after %lld samples", after_kill);
    CHECK(tc, query_int(b, "SELECT count(*) FROM results") == after_kill * N_VARIANTS, "whole samples only");
    rc = run(cmd_run, "b2", b_args);
    CHECK(tc, rc == 3, "resume exited %d", rc);
    CHECK(tc, log_contains("b2", "samples to run"), "resume log");
    char *rows_b = dump_rows(b);
    CHECK(tc, !strcmp(rows_m, rows_b), "resumed rows differ from the uninterrupted run");
    CHECK(tc, query_int(b, "SELECT count(*) FROM runs") == 2, "two run rows");
    /* A third run retries only the failed rows (the 3 trec samples' 6 attention variants, failing again: each
     * replaced in place, not counted as written, so written rows add up to the rows stored), duplicating nothing. */
    rc = run(cmd_run, "b3", b_args);
    CHECK(tc, rc == 3 && log_contains("b3", "3 samples to run (18 rows)") && log_contains("b3", " 0 rows written") &&
                  log_contains("b3", "(and 18 failed rows replaced)"),
          "rerun of a finished sweep with failed rows (exit %d)", rc);
    CHECK(tc, query_int(b, "SELECT count(*) FROM results") == N_SAMPLES * N_VARIANTS, "no duplicates");
    CHECK(tc, query_int(b, "SELECT count(*) FROM results WHERE error IS NOT NULL") == 18, "failed rows");

    /* A transient failure is retried: a successful row turned into a failed one is run again and comes back
     * with the prediction the uninterrupted run made. */
    sqlite3 *db;
    sqlite3_open(b, &db);
    sqlite3_exec(db, "UPDATE results SET error = 'transient: out of memory', prediction = NULL, score = NULL WHERE "
                     "policy = 'snapkv' AND budget = '20%' AND sample_id = (SELECT id FROM samples WHERE task = "
                     "'niah_single_1' ORDER BY sample_key LIMIT 1)", NULL, NULL, NULL);
    sqlite3_close(db);
    rc = run(cmd_run, "b4", b_args);
    char *rows_b4 = dump_rows(b);
    CHECK(tc, rc == 3 && log_contains("b4", "4 samples to run (19 rows)") && !strcmp(rows_m, rows_b4),
          "transient failure retried (exit %d)", rc);
    free(rows_b4);
    free(rows_b);
    free(rows_m);

    /* --limit 1: one sample per task. */
    char *l_args[] = {(char *)config, "--db", path_in("l.db"), "--limit", "1", NULL};
    CHECK(tc, run(cmd_run, "limit", l_args) == 3, "limit run");
    CHECK(tc, query_int(path_in("l.db"), "SELECT count(*) FROM samples") == N_TASKS, "--limit 1");

    /* The report from the resumed database. */
    char *r_args[] = {"--db", (char *)b, "--out", path_in("report"), NULL};
    rc = run(cmd_report, "report", r_args);
    CHECK(tc, rc == 0, "report exited %d", rc);
    const char *files[] = {"report.md", "report.tex", "task_scores.csv", "domain_scores.csv",
                           "syn_ruler_budget.png", "syn_ruler_fig4_ratio.png", "syn_longbench_tasks_20p.png",
                           "syn_niah_needle_20p.png", "syn_niah_needle_40p.png"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[256];
        struct stat st;
        snprintf(p, sizeof p, "%s/report/%s", dir, files[i]);
        CHECK(tc, stat(p, &st) == 0 && st.st_size > 0, "%s missing or empty", files[i]);
    }
}

/* A small config: RULER niah_single_1 from `seed` on a synthetic model of `layers` layers named "syn". */
static char *small_config(const char *name, int seed, int layers, const char *longbench_path) {
    char *path = path_in(name);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"name\": \"small\", \"max_new_tokens\": 2,\n"
            " \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=%d\", \"name\": \"syn\", \"tokenizer\": \"" TOKENIZER
            "\"}],\n"
            " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_1\"], \"target_tokens\": 1024, "
            "\"n_samples\": 2, \"seed\": %d}%s%s%s],\n"
            " \"policies\": [\"full\", \"snapkv\"], \"budgets\": [\"20%%\"]}\n",
            layers, seed, longbench_path ? ", {\"suite\": \"longbench\", \"tasks\": [\"trec\"], \"data_path\": \"" : "",
            longbench_path ? longbench_path : "", longbench_path ? "\"}" : "");
    fclose(f);
    return path;
}

/* Resume and merge never mix rows of different inputs: a changed RULER seed or a model of the same name from
 * another path is refused with one line naming the change, and so is a merge of two such databases. A run that
 * stops before its first sample leaves no database. Two runs at once on one database count only their own rows. */
static void test_identity(TestCounts *tc) {
    char seed42[128], seed7[128], layers3[128];
    snprintf(seed42, sizeof seed42, "%s", small_config("seed42.json", 42, 2, NULL));
    snprintf(seed7, sizeof seed7, "%s", small_config("seed7.json", 7, 2, NULL));
    snprintf(layers3, sizeof layers3, "%s", small_config("layers3.json", 42, 3, NULL));
    char *db = path_in("ident.db");
    char *a42[] = {seed42, "--db", db, NULL};
    CHECK(tc, run(cmd_run, "i42", a42) == 0, "seed 42 run");
    char *rows_before = dump_rows(db);

    char *a7[] = {seed7, "--db", db, NULL};
    CHECK(tc, run(cmd_run, "i7", a7) == 1 && log_contains("i7", "seed=42 -> seed=7") &&
                  log_contains("i7", "ruler:niah_single_1") && log_contains("i7", "new --db") &&
                  !log_contains("i7", "samples done"),
          "seed change not refused (or refused with a summary of nothing done)");
    char *a3[] = {layers3, "--db", db, NULL};
    CHECK(tc, run(cmd_run, "il3", a3) == 1 &&
                  log_contains("il3", "synthetic=smollm2-135m:layers=2 -> synthetic=smollm2-135m:layers=3") &&
                  log_contains("il3", "model 'syn'"),
          "model change not refused");
    char *rows_after = dump_rows(db);
    CHECK(tc, !strcmp(rows_before, rows_after) && query_int(db, "SELECT count(*) FROM runs") == 1,
          "a refused run wrote rows");
    free(rows_before);
    free(rows_after);

    /* A copy whose results b-tree is damaged (header intact): the run stops at open with one line, writing nothing. */
    char *damaged = path_in("damaged.db"), cp[512];
    snprintf(cp, sizeof cp, "cp %s %s", db, damaged);
    long long root = query_int(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'results'");
    long long page = query_int(db, "PRAGMA page_size");
    int fd = system(cp) == 0 ? open(damaged, O_WRONLY) : -1;
    char junk[64];
    memset(junk, 0xee, sizeof junk);
    CHECK(tc, fd >= 0 && root > 1 && pwrite(fd, junk, sizeof junk, (off_t)((root - 1) * page)) == sizeof junk,
          "corrupting %s", damaged);
    if (fd >= 0) close(fd);
    struct stat before, after;
    stat(damaged, &before);
    char *ad[] = {seed42, "--db", damaged, NULL};
    CHECK(tc, run(cmd_run, "damaged", ad) == 1 && log_contains("damaged", "damaged.db: the database is damaged"),
          "a damaged database was not refused");
    stat(damaged, &after);
    CHECK(tc, before.st_size == after.st_size && before.st_mtime == after.st_mtime, "the damaged database was written");

    /* The seed-7 rows in a database of their own; merging it with the seed-42 one is refused, nothing copied (not
     * even the seed-42 input, checked first). */
    char *db7 = path_in("ident7.db");
    char *b7[] = {seed7, "--db", db7, NULL};
    CHECK(tc, run(cmd_run, "i7b", b7) == 0, "seed 7 run");
    CHECK(tc, query_int(db7, "SELECT count(*) FROM samples WHERE data_id LIKE 'seed=7,%'") == 2, "seed 7 identity");
    char *merged = path_in("ident_m.db");
    char *m_args[] = {merged, db, db7, NULL};
    CHECK(tc, run(cmd_merge, "imerge", m_args) == 1 && log_contains("imerge", "seed=42 -> seed=7") &&
                  log_contains("imerge", "ident7.db"),
          "merge of different configs not refused");
    CHECK(tc, access(merged, F_OK) != 0, "a refused merge left %s", merged);

    /* Stopping before the first sample (a LongBench path that does not exist) leaves no database. */
    char *bad_data = small_config("bad_data.json", 42, 2, "/nonexistent/longbench");
    char *fresh = path_in("never.db");
    char *bd[] = {bad_data, "--db", fresh, NULL};
    struct stat st;
    CHECK(tc, run(cmd_run, "bad_data", bd) == 1 && log_contains("bad_data", "/nonexistent/longbench") &&
                  stat(fresh, &st) != 0,
          "a run that stopped before its first sample left a database");

    /* A shard with no samples finishes with nothing to do and still leaves its (empty) database, which merges. */
    char *empty = path_in("empty_shard.db");
    char *es[] = {seed42, "--db", empty, "--shard", "999/1000", NULL};
    CHECK(tc, run(cmd_run, "empty_shard", es) == 0 && log_contains("empty_shard", "nothing to do") &&
                  query_int(empty, "SELECT count(*) FROM samples") == 0,
          "an empty shard left no database");
    char *me[] = {path_in("with_empty.db"), db, empty, NULL};
    CHECK(tc, run(cmd_merge, "merge_empty", me) == 0 && query_int(path_in("with_empty.db"), "SELECT count(*) FROM "
                                                                   "results") == 4,
          "merge with an empty shard");

    /* One config running a task twice from different seeds under one setup: their keys would collide. */
    char *dup = path_in("dup.json");
    FILE *f = fopen(dup, "w");
    fputs("{\"max_new_tokens\": 2, \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", \"name\": \"syn\", "
          "\"tokenizer\": \"" TOKENIZER "\"}],\n \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_1\"], "
          "\"n_samples\": 1, \"target_tokens\": 1024},\n  {\"suite\": \"ruler\", \"tasks\": [\"vt\", \"niah_single_1\"], "
          "\"n_samples\": 1, \"target_tokens\": 1024, \"seed\": 7}], \"policies\": [\"full\"]}\n", f);
    fclose(f);
    char *dup_db = path_in("dup.db");
    char *dd[] = {dup, "--db", dup_db, NULL};
    CHECK(tc, run(cmd_run, "dup", dd) == 1 && log_contains("dup", "datasets[0] and datasets[1]") &&
                  log_contains("dup", "seed=42 -> seed=7") && stat(dup_db, &st) != 0,
          "a task twice from different seeds");

    /* Two runs at once on one new database: each counts the rows it added, together exactly the rows stored. */
    char *both = path_in("both.db");
    char *c1[] = {seed42, "--db", both, NULL};
    pid_t p1 = start(cmd_run, "both1", c1), p2 = start(cmd_run, "both2", c1);
    int r1 = finish(p1), r2 = finish(p2);
    long long w1 = logged_rows("both1"), w2 = logged_rows("both2");
    long long stored = query_int(both, "SELECT count(*) FROM results");
    CHECK(tc, r1 == 0 && r2 == 0 && stored == 4 && w1 + w2 == stored, "concurrent runs: exit %d %d, %lld + %lld rows "
          "written, %lld stored", r1, r2, w1, w2, stored);
}

/* `kvbench report` of a database in a directory the process cannot write to (as `nobody` when the tests run as
 * root, since root ignores permissions): it reads, writes nothing next to the database, and succeeds. */
static void test_read_only_report(TestCounts *tc, const char *source_db) {
    char ro[128], db[160], out[128], cmd[1024];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    snprintf(db, sizeof db, "%s/results.db", ro);
    snprintf(out, sizeof out, "%s/ro_report", dir);
    mkdir(ro, 0755);
    mkdir(out, 0777);
    chmod(out, 0777);
    snprintf(cmd, sizeof cmd, "cp %s %s && chmod 0444 %s && chmod 0555 %s && chmod 0755 %s", source_db, db, db, ro, dir);
    CHECK(tc, system(cmd) == 0, "%s", cmd);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char log[160];
        snprintf(log, sizeof log, "%s/ro_report.out", out);
        if (!freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(99);
        if (geteuid() == 0) {
            struct passwd *nobody = getpwnam("nobody");
            if (!nobody || setgid(nobody->pw_gid) || setuid(nobody->pw_uid)) _exit(90);
        }
        if (access(ro, W_OK) == 0) _exit(91);
        char *args[] = {"--db", db, "--out", out, NULL};
        int rc = cmd_report(4, args);
        fflush(NULL);
        _exit(rc);
    }
    int rc = finish(pid);
    char wal[180], shm[180], md[160];
    snprintf(wal, sizeof wal, "%s-wal", db);
    snprintf(shm, sizeof shm, "%s-shm", db);
    snprintf(md, sizeof md, "%s/report.md", out);
    struct stat st;
    CHECK(tc, rc == 0 && stat(md, &st) == 0 && st.st_size > 0, "report in a read-only directory exited %d", rc);
    CHECK(tc, access(wal, F_OK) != 0 && access(shm, F_OK) != 0, "the report left -wal / -shm");
    chmod(ro, 0755);
}

static void test_bad_input(TestCounts *tc, const char *config) {
    char *missing[] = {path_in("none.json"), NULL};
    CHECK(tc, run(cmd_run, "missing", missing) == 1 && log_contains("missing", "none.json"), "missing config");

    char bad[128];
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    FILE *f = fopen(bad, "w");
    fputs("{\"models\": [{\"path\": \"synthetic:smollm2-135m\"}], \"datasets\": [{\"suite\": \"ruler\", \"tasks\": "
          "[\"vt\"]}], \"policies\": [\"snapkv\"], \"budgets\": [\"20%\"], \"max_new_tokns\": 3}",
          f);
    fclose(f);
    char *bad_args[] = {bad, "--db", path_in("bad.db"), NULL};
    CHECK(tc, run(cmd_run, "bad", bad_args) == 1 && log_contains("bad", "bad.json") &&
                  log_contains("bad", "max_new_tokns"),
          "unknown key");
    struct stat st;
    CHECK(tc, stat(path_in("bad.db"), &st) != 0, "a bad config created a database");

    char *shard[] = {(char *)config, "--shard", "2/2", NULL};
    CHECK(tc, run(cmd_run, "shard", shard) == 2 && log_contains("shard", "0 <= i < N"), "bad shard");
    char *limit[] = {(char *)config, "--limit", "x", NULL};
    CHECK(tc, run(cmd_run, "limit_bad", limit) == 2, "bad limit");
    char *ro[] = {(char *)config, "--db", "/proc/kvbench_e2e.db", NULL};
    CHECK(tc, run(cmd_run, "ro", ro) == 1 && log_contains("ro", "/proc/kvbench_e2e.db"), "unwritable database");
    char *rep[] = {"--db", path_in("none.db"), "--out", path_in("r2"), NULL};
    CHECK(tc, run(cmd_report, "report_missing", rep) == 1 && log_contains("report_missing", "none.db"),
          "report of a missing database");
    char *merge_bad[] = {path_in("m2.db"), path_in("none.db"), NULL};
    CHECK(tc, run(cmd_merge, "merge_missing", merge_bad) == 1 && log_contains("merge_missing", "none.db") &&
                  access(path_in("m2.db"), F_OK) != 0,
          "merge of a missing database (or it left its output)");
    /* A directory where a file belongs: one line, not an allocation of the size a directory seeks to (2^63). */
    char *dir_config[] = {"configs", NULL};
    CHECK(tc, run(cmd_run, "dir_config", dir_config) == 1 &&
                  log_contains("dir_config", "configs: is a directory, not a file") &&
                  !log_contains("dir_config", "out of memory"),
          "a directory as the config");
    char *dir_db[] = {"--db", dir, "--out", path_in("r3"), NULL};
    CHECK(tc, run(cmd_report, "dir_db", dir_db) == 1 && log_contains("dir_db", "is a directory, not a database file"),
          "a directory as the database");
    char *dir_merge[] = {path_in("m3.db"), dir, NULL};
    CHECK(tc, run(cmd_merge, "dir_merge", dir_merge) == 1 && log_contains("dir_merge", "is a directory, not a database") &&
                  access(path_in("m3.db"), F_OK) != 0,
          "a directory as a merge input");
}

int main(void) {
    TestCounts tc = {"test_e2e", 0, 0, 0};
    /* The tokenizer is SmolLM2's, from the default model that `make setup` / `make model` fetches. */
    CHECK(&tc, access(TOKENIZER, R_OK) == 0, "%s is missing: run `make model` first", TOKENIZER);
    if (tc.failed) return test_finish(&tc);
    snprintf(dir, sizeof dir, "/tmp/kvbench_e2e_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char config[128];
    snprintf(config, sizeof config, "%s/e2e.json", dir);
    FILE *f = fopen(config, "w");
    fputs(CONFIG, f);
    fclose(f);
    test_runs(&tc, config);
    test_identity(&tc);
    test_read_only_report(&tc, path_in("b.db"));
    test_bad_input(&tc, config);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
