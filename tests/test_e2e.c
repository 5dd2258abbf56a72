/* test_e2e.c — `kvbench run` → database → `kvbench report`/`merge` end to end, on a 2-layer synthetic SmolLM2
 * shape with SmolLM2's real tokenizer, over RULER, needle and LongBench samples, with every kind of policy.
 *
 * Checks: row counts of a full run; a run killed with SIGKILL mid-way and rerun ends with exactly the rows of
 * the uninterrupted run (same predictions, nothing duplicated); two shards merged equal the whole; --limit;
 * samples too short for the observation window become failed rows while the run goes on; the report writes
 * its files; bad inputs exit non-zero with a message naming the problem. Each run is a forked child calling
 * the subcommand, so the parent stays free of OpenMP threads and can kill a run at any moment. */
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../runs/commands.h"
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

static void test_runs(TestCounts *tc, const char *config) {
    /* Shards 0/2 and 1/2 in two processes, merged: together one uninterrupted run of every sample. */
    char *s0[] = {(char *)config, "--db", path_in("s0.db"), "--shard", "0/2", NULL};
    char *s1[] = {(char *)config, "--db", path_in("s1.db"), "--shard", "1/2", NULL};
    int rc0 = run(cmd_run, "s0", s0), rc1 = run(cmd_run, "s1", s1);
    CHECK(tc, rc0 == 0 && rc1 == 0, "shard runs exited %d, %d", rc0, rc1);
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
    CHECK(tc, query_int(m, "SELECT count(*) FROM runs WHERE finished IS NOT NULL AND model_sha256 = 'synthetic' "
                           "AND shard IN ('0/2', '1/2')") == 2,
          "run rows");
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
    CHECK(tc, rc == 0, "resume exited %d", rc);
    CHECK(tc, log_contains("b2", "samples to run"), "resume log");
    char *rows_b = dump_rows(b);
    CHECK(tc, !strcmp(rows_m, rows_b), "resumed rows differ from the uninterrupted run");
    CHECK(tc, query_int(b, "SELECT count(*) FROM runs") == 2, "two run rows");
    /* A third run has nothing to do. */
    rc = run(cmd_run, "b3", b_args);
    CHECK(tc, rc == 0 && log_contains("b3", "nothing to do"), "rerun of a finished sweep");
    CHECK(tc, query_int(b, "SELECT count(*) FROM results") == N_SAMPLES * N_VARIANTS, "no duplicates");
    free(rows_b);
    free(rows_m);

    /* --limit 1: one sample per task. */
    char *l_args[] = {(char *)config, "--db", path_in("l.db"), "--limit", "1", NULL};
    CHECK(tc, run(cmd_run, "limit", l_args) == 0, "limit run");
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
    CHECK(tc, run(cmd_merge, "merge_missing", merge_bad) == 1 && log_contains("merge_missing", "none.db"),
          "merge of a missing database");
}

int main(void) {
    TestCounts tc = {"test_e2e", 0, 0};
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
    test_bad_input(&tc, config);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
