/* test_export.c — `kvbench export --kvpress DIR`: a real database (a `kvbench run` of a 2-layer synthetic SmolLM2
 * shape with SmolLM2's tokenizer on two LongBench samples: the full cache, knorm and pyramidkv at 20% and 40
 * tokens per head) exported in kvpress's results layout; every directory's metrics.json is the group's mean score
 * as SQLite computes it from the database, config.yaml names the variant and its n, predictions.csv holds every
 * sample. A second export of the same database gives the same files. Bad input — a missing database, an output
 * folder under a regular file, a database whose task name holds a path separator, an unknown option — exits
 * non-zero with one line naming the problem, and the refused export writes nothing. */
#include <dirent.h>
#include <sys/stat.h>

#include "../cli/commands.h"
#include "sweep_harness.h"
#include "test.h"

#define TOKENIZER "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static const char *CONFIG =
    "{\"name\": \"export\", \"max_new_tokens\": 4, \"window\": 16, \"compress_question\": false,\n"
    " \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", \"name\": \"syn\",\n"
    "              \"tokenizer\": \"" TOKENIZER "\"}],\n"
    " \"datasets\": [{\"suite\": \"longbench\", \"tasks\": [\"multi_news\"], \"data_path\": \"tests/data/longbench\",\n"
    "               \"first_n\": 2, \"target_tokens\": 300}],\n"
    " \"policies\": [\"full\", \"knorm\", \"pyramidkv\"],\n"
    " \"budgets\": [\"20%\", \"40tok\"]}\n";

static char *read_in(const char *sub, const char *file) {
    char path[1400];
    KvErr err;
    snprintf(path, sizeof path, "%s/%s", sub, file);
    return kv_read_file(path, NULL, &err);
}

/* The number of entries in a folder (-1: cannot open it). */
static int count_entries(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The lines of a log (newlines counted). */
static int log_lines(const char *log_name) {
    char path[128];
    KvErr err;
    snprintf(path, sizeof path, "%s/%s.log", dir, log_name);
    char *text = kv_read_file(path, NULL, &err);
    int n = 0;
    for (const char *p = text; p && *p; p++) n += *p == '\n';
    free(text);
    return n;
}

/* One exported directory: its metrics against the database's mean, its config's press name and n, its
 * predictions' sample keys. */
static void check_group(TestCounts *tc, const char *out, const char *name, const char *press, const char *policy,
                        const char *params, const char *budget) {
    char sub[1024], sql[1024], want[64];
    snprintf(sub, sizeof sub, "%s/%s", out, name);
    snprintf(sql, sizeof sql,
             "SELECT printf('%%.2f', 100.0 * avg(r.score)) || char(10) FROM results r JOIN samples s ON "
             "s.id = r.sample_id WHERE s.task = 'multi_news' AND r.policy = '%s' AND r.params = '%s' AND "
             "r.budget = '%s' AND r.error IS NULL",
             policy, params, budget);
    char *mean = dump_query(path_in("run.db"), sql);
    char *metrics = read_in(sub, "metrics.json"), *config = read_in(sub, "config.yaml");
    char *pred = read_in(sub, "predictions.csv");
    snprintf(want, sizeof want, "press_name: \"%s\"\n", press);
    CHECK(tc, metrics && mean && !strncmp(metrics, mean, strlen(mean) - 1) && strlen(metrics) == strlen(mean) - 1,
          "%s: metrics.json '%s', the database's mean '%s'", name, metrics ? metrics : "(none)", mean ? mean : "");
    CHECK(tc, config && strstr(config, want) && strstr(config, "\n  n: 2\n") && strstr(config, "n_failed: 0") &&
                  strstr(config, "dataset: \"longbench\"") && strstr(config, "data_dir: \"multi_news\""),
          "%s: config.yaml lacks its press name or n:\n%s", name, config ? config : "(none)");
    CHECK(tc, pred && !strncmp(pred, "sample_key,answers,predicted_answer,score,compression_ratio,error\n", 66) &&
                  strstr(pred, "\n\"longbench:multi_news:0") && strstr(pred, "\n\"longbench:multi_news:1"),
          "%s: predictions.csv without its two samples:\n%.300s", name, pred ? pred : "(none)");
    free(mean);
    free(metrics);
    free(config);
    free(pred);
}

static void test_export(TestCounts *tc, const char *config) {
    char *run_args[] = {(char *)config, "--db", path_in("run.db"), NULL};
    CHECK(tc, run(cmd_run, "run", run_args) == 0, "kvbench run failed (see %s/run.log)", dir);
    CHECK(tc, query_int(path_in("run.db"), "SELECT count(*) FROM results WHERE error IS NULL") == 10,
          "the run wrote %lld scored rows, expected 2 samples x 5 variants",
          query_int(path_in("run.db"), "SELECT count(*) FROM results WHERE error IS NULL"));
    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    char *args[] = {"--kvpress", out, "--db", path_in("run.db"), NULL};
    CHECK(tc, run(cmd_export, "export", args) == 0, "kvbench export failed (see %s/export.log)", dir);
    CHECK(tc, count_entries(out) == 5, "%d directories exported, expected 5 (full, 2 x knorm, 2 x pyramidkv)",
          count_entries(out));
    check_group(tc, out, "longbench__multi_news__syn__kvbench-full__0.00", "kvbench-full", "full", "", "full");
    check_group(tc, out, "longbench__multi_news__syn__kvbench-knorm__0.80", "kvbench-knorm", "knorm", "", "20%");
    check_group(tc, out, "longbench__multi_news__syn__kvbench-pyramidkv-mean-w=16,k=5__0.80",
                "kvbench-pyramidkv-mean-w=16,k=5", "pyramidkv", "w=16,k=5", "20%");
    /* A token budget: its ratio is 1 - the mean kept fraction, and the budget is in the press name. */
    char *ratio = dump_query(path_in("run.db"),
                             "SELECT printf('%.2f', 1 - avg(kept_fraction)) FROM results WHERE policy = 'knorm' AND "
                             "budget = '40tok'");
    char name[256];
    snprintf(name, sizeof name, "longbench__multi_news__syn__kvbench-knorm-40tok__%.4s", ratio ? ratio : "");
    check_group(tc, out, name, "kvbench-knorm-40tok", "knorm", "", "40tok");
    free(ratio);

    /* Again: the same files. */
    char *m1 = read_in(out, "longbench__multi_news__syn__kvbench-knorm__0.80/predictions.csv");
    CHECK(tc, run(cmd_export, "export2", args) == 0 && count_entries(out) == 5, "a second export differs");
    char *m2 = read_in(out, "longbench__multi_news__syn__kvbench-knorm__0.80/predictions.csv");
    CHECK(tc, m1 && m2 && !strcmp(m1, m2), "a second export wrote other predictions");
    free(m1);
    free(m2);
}

static void test_bad_input(TestCounts *tc) {
    char out[128];
    snprintf(out, sizeof out, "%s/bad_out", dir);
    char *missing[] = {"--kvpress", out, "--db", path_in("nonesuch.db"), NULL};
    CHECK(tc, run(cmd_export, "missing", missing) == 1 && log_contains("missing", "nonesuch.db: no such database") &&
                  log_lines("missing") == 1,
          "a missing database");
    CHECK(tc, access(out, F_OK) != 0, "a refused export created its folder");

    FILE *f = fopen(path_in("plain"), "w");
    if (f) fclose(f);
    char under[160];
    snprintf(under, sizeof under, "%s/sub", path_in("plain"));
    char *unwritable[] = {"--kvpress", under, "--db", path_in("run.db"), NULL};
    CHECK(tc, run(cmd_export, "unwritable", unwritable) == 1 && log_contains("unwritable", "plain") &&
                  log_lines("unwritable") == 1,
          "an output folder under a regular file");

    /* A database whose task name would be a path. */
    Store *s = NULL;
    long long run_id;
    KvErr err;
    StoreRun info = {"t", "{}", "h", "rev", "m", "m.gguf", "x", "m.gguf", "cpu", "host", NULL, 0};
    StoreSample sample = {"m", "cq=0", "k0", "longbench", "multi/news", "d", "qa_f1", 0, -1, 0, 100, 10, "[\"a\"]",
                          NULL, "m", "d", 0};
    StoreResult result = {.key = {"knorm", "none", "", "20%"}, .keep_fraction = 0.2, .budget_tokens = 20,
                          .kept_tokens = 20, .prediction = "a", .score = 1, .kept_fraction = 0.2};
    int ok = !store_open(&s, path_in("bad.db"), 0, &err) && !store_begin_run(s, &info, &run_id, &err) &&
             !store_write_sample(s, run_id, &sample, &result, 1, &err);
    if (s) store_close(s);
    CHECK(tc, ok, "writing the bad database: %s", err.msg);
    char *bad[] = {"--kvpress", out, "--db", path_in("bad.db"), NULL};
    CHECK(tc, run(cmd_export, "bad_name", bad) == 1 &&
                  log_contains("bad_name", "task 'multi/news' cannot name a directory: it holds a path separator") &&
                  log_lines("bad_name") == 1,
          "a task name with a path separator");
    CHECK(tc, access(out, F_OK) != 0, "the refused export wrote something");

    char *unknown[] = {"--kvpres", out, NULL};
    CHECK(tc, run(cmd_export, "usage", unknown) == 2 && log_contains("usage", "unexpected argument '--kvpres'"),
          "an unknown option");
}

int main(void) {
    TestCounts tc = {"test_export", 0, 0, 0};
    CHECK(&tc, access(TOKENIZER, R_OK) == 0, "%s is missing: run `make model` first", TOKENIZER);
    if (tc.failed) return test_finish(&tc);
    snprintf(dir, sizeof dir, "/tmp/kvbench_export_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char config[128];
    snprintf(config, sizeof config, "%s/export.json", dir);
    FILE *f = fopen(config, "w");
    if (!f) return 1;
    fputs(CONFIG, f);
    fclose(f);
    test_export(&tc, config);
    test_bad_input(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
