/* test_trace.c — `kvbench trace` → database → `kvbench report` end to end, on a 2-layer synthetic SmolLM2 shape
 * with SmolLM2's real tokenizer over shipped LongBench multi_news samples, and the window narrowing of the shared
 * prefill (runs/prepare.c).
 *
 * Checks: one row per sample × step × variant; R_t = 1 for the `full` keep-set at every step; 0 <= R_t <= 1 and
 * min <= mean; a trace killed with SIGKILL and rerun ends with exactly the rows of an uninterrupted one; a rerun
 * has nothing to do; two shards merged give the same rows; the report writes the fragility table and figures; bad trace sections fail with a message
 * naming the key. Then, in-process: a window-1 policy observed through a window-16 prefill selects exactly the
 * keep-set of a window-1 prefill. Runs are forked children (as in test_e2e.c) so the parent stays free of OpenMP
 * threads until the in-process part, which comes last. */
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../engine/model.h"
#include "../runs/commands.h"
#include "../runs/prepare.h"
#include "sweep_harness.h"
#include "test.h"

enum { N_SAMPLES = 4, STEPS = 6, N_VARIANTS = 13 }; /* full + (snapkv, defensivekv) x 3 aggregations x 2 windows */

static const char *CONFIG =
    "{\"name\": \"trace\", \"window\": [1, 16], \"trace\": {\"steps\": 6},\n"
    " \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", \"name\": \"syn\",\n"
    "              \"tokenizer\": \"models/SmolLM2-135M-Instruct.Q4_1.gguf\"}],\n"
    " \"datasets\": [{\"suite\": \"longbench\", \"tasks\": [\"multi_news\"], \"data_path\": \"tests/data/longbench\",\n"
    "                \"first_n\": 4, \"target_tokens\": 300}],\n"
    " \"policies\": [\"full\", \"snapkv\", \"defensivekv\"], \"aggregations\": [\"mean\", \"max\", \"max+prior\"],\n"
    " \"budgets\": [\"50%\"]}\n";

/* Every trace row as text in a fixed order; R_t printed to 6 decimals (both runs compute identically). */
static char *dump_rows(const char *db_path) {
    return dump_query(db_path,
                      "SELECT printf('%s|%s|%s|%s|%s|%d|%d|%.6f|%.6f', s.sample_key, t.policy, t.aggregation, "
                      "t.params, t.budget, t.window, t.step, t.mean_r, t.min_r) FROM traces t JOIN samples s "
                      "ON s.id = t.sample_id ORDER BY 1");
}

static void test_trace_runs(TestCounts *tc, const char *config) {
    const char *a = path_in("a.db");
    char *a_args[] = {(char *)config, "--db", (char *)a, NULL};
    int rc = run(cmd_trace, "a", a_args);
    CHECK(tc, rc == 0, "trace exited %d", rc);
    CHECK(tc, query_int(a, "SELECT count(*) FROM samples") == N_SAMPLES, "samples %lld",
          query_int(a, "SELECT count(*) FROM samples"));
    CHECK(tc, query_int(a, "SELECT count(*) FROM traces") == N_SAMPLES * STEPS * N_VARIANTS, "trace rows %lld",
          query_int(a, "SELECT count(*) FROM traces"));
    CHECK(tc, query_int(a, "SELECT count(DISTINCT step) FROM traces") == STEPS && query_int(a, "SELECT max(step) FROM traces") == STEPS - 1,
          "steps 0..%d", STEPS - 1);
    CHECK(tc, query_int(a, "SELECT count(*) FROM traces WHERE policy = 'full'") == N_SAMPLES * STEPS, "full rows");
    CHECK(tc, query_int(a, "SELECT count(*) FROM traces WHERE policy = 'full' AND (abs(mean_r - 1) > 1e-5 OR "
                           "abs(min_r - 1) > 1e-5)") == 0,
          "R_t = 1 for the full keep-set");
    CHECK(tc, query_int(a, "SELECT count(*) FROM traces WHERE mean_r < 0 OR mean_r > 1 + 1e-5 OR min_r > mean_r + 1e-9 "
                           "OR min_r < 0") == 0,
          "0 <= min R_t <= mean R_t <= 1");
    CHECK(tc, query_int(a, "SELECT count(DISTINCT window) FROM traces WHERE policy = 'snapkv'") == 2, "two windows");
    /* A 50% keep-set retains much but not all of the context's importance. */
    CHECK(tc, query_int(a, "SELECT count(*) FROM traces WHERE policy != 'full' AND mean_r > 0.999999") <
                  N_SAMPLES * STEPS * (N_VARIANTS - 1),
          "evicting half of the context retains everything at every step");
    CHECK(tc, query_int(a, "SELECT count(*) FROM results") == 0, "a trace writes no result rows");
    char *rows_a = dump_rows(a);

    /* Killed with SIGKILL after the first sample, then resumed: the same rows. */
    const char *b = path_in("b.db");
    char *b_args[] = {(char *)config, "--db", (char *)b, NULL};
    pid_t pid = start(cmd_trace, "b1", b_args);
    long long seen = 0;
    for (int i = 0; i < 30000 && seen < 1; i++) {
        usleep(2000);
        seen = query_int(b, "SELECT count(DISTINCT sample_id) FROM traces");
    }
    kill(pid, SIGKILL);
    rc = finish(pid);
    long long after_kill = query_int(b, "SELECT count(DISTINCT sample_id) FROM traces");
    CHECK(tc, rc == 128 + SIGKILL, "trace b was not killed (exit %d)", rc);
    CHECK(tc, after_kill >= 1 && after_kill < N_SAMPLES, "killed after %lld samples", after_kill);
    CHECK(tc, query_int(b, "SELECT count(*) FROM traces") == after_kill * STEPS * N_VARIANTS, "whole samples only");
    rc = run(cmd_trace, "b2", b_args);
    CHECK(tc, rc == 0, "resume exited %d", rc);
    char *rows_b = dump_rows(b);
    CHECK(tc, !strcmp(rows_a, rows_b), "resumed rows differ from the uninterrupted trace");
    rc = run(cmd_trace, "b3", b_args);
    CHECK(tc, rc == 0 && log_contains("b3", "nothing to do"), "rerun of a finished trace");
    CHECK(tc, query_int(b, "SELECT count(*) FROM traces") == N_SAMPLES * STEPS * N_VARIANTS, "no duplicates");
    /* Two shards merged: the same rows again. */
    char *s0[] = {(char *)config, "--db", path_in("s0.db"), "--shard", "0/2", NULL};
    char *s1[] = {(char *)config, "--db", path_in("s1.db"), "--shard", "1/2", NULL};
    CHECK(tc, run(cmd_trace, "s0", s0) == 0 && run(cmd_trace, "s1", s1) == 0, "shard traces");
    char *m_args[] = {path_in("m.db"), path_in("s0.db"), path_in("s1.db"), NULL};
    CHECK(tc, run(cmd_merge, "merge", m_args) == 0, "merge");
    char *rows_m = dump_rows(path_in("m.db"));
    CHECK(tc, !strcmp(rows_a, rows_m), "merged shard rows differ from the whole trace");
    CHECK(tc, query_int(path_in("m.db"), "SELECT count(*) FROM traces t JOIN runs r ON r.id = t.run_id WHERE "
                                         "r.shard IS NOT NULL") == N_SAMPLES * STEPS * N_VARIANTS,
          "merged traces keep their runs");
    free(rows_m);
    free(rows_a);
    free(rows_b);

    /* --limit 1 and the report. */
    char *l_args[] = {(char *)config, "--db", path_in("l.db"), "--limit", "1", NULL};
    CHECK(tc, run(cmd_trace, "limit", l_args) == 0, "limit trace");
    CHECK(tc, query_int(path_in("l.db"), "SELECT count(DISTINCT sample_id) FROM traces") == 1, "--limit 1");
    char *r_args[] = {"--db", (char *)b, "--out", path_in("report"), NULL};
    rc = run(cmd_report, "report", r_args);
    CHECK(tc, rc == 0, "report exited %d", rc);
    const char *files[] = {"fragility.md", "fragility.csv", "fragility_syn_multi_news_snapkv_50pct_w1_trace.png",
                           "fragility_syn_multi_news_snapkv_50pct_w1_trace.svg",
                           "fragility_syn_multi_news_defensivekv_50pct_w16_hist.png"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[256];
        struct stat st;
        snprintf(p, sizeof p, "%s/report/%s", dir, files[i]);
        CHECK(tc, stat(p, &st) == 0 && st.st_size > 0, "%s missing or empty", files[i]);
    }
    char csv[256];
    snprintf(csv, sizeof csv, "%s/report/fragility.csv", dir);
    FILE *f = fopen(csv, "r");
    int lines = 0;
    for (int ch; f && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    if (f) fclose(f);
    CHECK(tc, lines == 1 + N_VARIANTS, "fragility.csv has %d lines", lines);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_bad_input(TestCounts *tc) {
    static const struct {
        const char *json, *expect;
    } cases[] = {
        {"{\"models\": [{\"path\": \"synthetic:smollm2-135m\", \"tokenizer\": \"x\"}], \"datasets\": [{\"suite\": "
         "\"ruler\", \"tasks\": [\"vt\"]}], \"policies\": [\"snapkv\"], \"budgets\": [\"50%\"]}",
         "no \"trace\" section"},
        {"{\"trace\": {\"stepz\": 3}, \"models\": [{\"path\": \"synthetic:smollm2-135m\"}], \"datasets\": [{\"suite\": "
         "\"ruler\", \"tasks\": [\"vt\"]}], \"policies\": [\"snapkv\"], \"budgets\": [\"50%\"]}",
         "stepz"},
        {"{\"trace\": {\"steps\": 0}, \"models\": [{\"path\": \"synthetic:smollm2-135m\"}], \"datasets\": [{\"suite\": "
         "\"ruler\", \"tasks\": [\"vt\"]}], \"policies\": [\"snapkv\"], \"budgets\": [\"50%\"]}",
         "trace.steps"},
        {"{\"trace\": {\"steps\": 4}, \"window\": [1, 0], \"models\": [{\"path\": \"synthetic:smollm2-135m\"}], "
         "\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"vt\"]}], \"policies\": [\"snapkv\"], \"budgets\": "
         "[\"50%\"]}",
         "window[1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32], *path = path_in("bad.json");
        snprintf(name, sizeof name, "bad%zu", i);
        write_file(path, cases[i].json);
        char *args[] = {path, "--db", path_in("bad.db"), NULL};
        int rc = run(cmd_trace, name, args);
        CHECK(tc, rc == 1 && log_contains(name, "bad.json") && log_contains(name, cases[i].expect),
              "case %zu: exit %d, expected a message with '%s'", i, rc, cases[i].expect);
    }
    struct stat st;
    CHECK(tc, stat(path_in("bad.db"), &st) != 0, "a bad config created a database");
    char *none[] = {path_in("none.json"), NULL};
    CHECK(tc, run(cmd_trace, "none", none) == 1 && log_contains("none", "none.json"), "missing config");
    char *usage[] = {NULL};
    CHECK(tc, run(cmd_trace, "usage", usage) == 2, "no config");
}

/* A window-1 policy observing the last row of a window-16 prefill selects what a window-1 prefill selects. */
static void test_window_narrowing(TestCounts *tc) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    CHECK(tc, model_load(&m, "synthetic:smollm2-135m:layers=2:seed=7", &err) == 0, "%s", err.msg);
    if (!m) return;
    CHECK(tc, backend_open(&be, "cpu", m, &err) == 0, "%s", err.msg);
    if (!be) {
        model_free(m);
        return;
    }
    PrepareEnv env = {m, NULL, be, 0, NULL};
    TokenIds ctx = {0};
    for (int i = 0; i < 120; i++) ids_push(&ctx, (i * 7919 + 13) % 5000, &err);
    PolicyConfig w1, w16, full;
    policy_config(&w1, "snapkv", "max", &err);
    policy_config(&w16, "snapkv", "max", &err);
    policy_config(&full, "full", NULL, &err);
    w1.window = 1;
    w16.window = 16;
    const PolicyConfig *alone[] = {&w1}, *mixed[] = {&w16, &full, &w1};
    Prefill p1, p2;
    Budget b = {0.3, 0};
    KeepSet k1 = {0}, k2 = {0}, kf = {0};
    CHECK(tc, prefill_run(&p1, &env, &ctx, alone, 1, 0, &err) == 0, "%s", err.msg);
    CHECK(tc, prefill_run(&p2, &env, &ctx, mixed, 3, 0, &err) == 0, "%s", err.msg);
    CHECK(tc, p2.n_slots == 2 && p2.slot_of[1] == -1, "slots %d", p2.n_slots);
    CHECK(tc, prefill_select(&p1, 0, &b, &k1, &err) == 0, "%s", err.msg);
    CHECK(tc, prefill_select(&p2, 2, &b, &k2, &err) == 0, "%s", err.msg);
    CHECK(tc, prefill_select(&p2, 1, &b, &kf, &err) == 0 && kf.total == 2 * 3 * 120, "full keep-set %d", kf.total);
    CHECK(tc, k1.total == k2.total && k1.total > 0 &&
                  !memcmp(k1.positions, k2.positions, sizeof(int) * (size_t)k1.total),
          "window-1 keep-sets differ (%d vs %d entries)", k1.total, k2.total);
    keepset_free(&k1);
    keepset_free(&k2);
    keepset_free(&kf);
    prefill_free(&p1);
    prefill_free(&p2);
    ids_free(&ctx);
    backend_close(be);
    model_free(m);
}

int main(void) {
    TestCounts tc = {"test_trace", 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_trace_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char config[128];
    snprintf(config, sizeof config, "%s/trace.json", dir);
    write_file(config, CONFIG);
    test_trace_runs(&tc, config);
    test_bad_input(&tc);
    test_window_narrowing(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
