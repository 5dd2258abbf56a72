/* test_sweep_rules.c — the run-level rules of issue 16 (runs/config.c, runs/sweep.c, store/store.c): the config
 * keys "stop_rule", "over_length" and a model's "duo_attention_patterns" (parsed, bad values refused with one
 * line), and end to end on the 2-layer tiny Llama fixture (max_position_embeddings 2048) with a byte tokenizer:
 *   - by default a needle of 2100 tokens runs like the reference runs it (no error, samples.over_length = 1);
 *     "over_length": "error" keeps the earlier error row, under its own setup;
 *   - duoattention with a hand-made 2 x 2 pattern stores its effective kept fraction, 0.5 + 6/L at 40% (derived
 *     below), beside the nominal budget; `full` stores 1;
 *   - "duo_attention_patterns": "none" records the model's duoattention cells as N/A (skipped, logged);
 *   - a model with no pattern, given or shipped, stops the run before any sample, naming what is missing;
 *   - `kvbench trace` traces duoattention with the model's pattern;
 *   - rows of a tokenizer with transformers' clean-up of spaces are stored under their own label, and rows a
 *     build without it stored are never resumed as theirs;
 *   - `kvbench select` with duoattention and a pattern folder (SmolLM2's shape), or without one.
 * Each run is a forked child (tests/sweep_harness.h). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cli/commands.h"
#include "../runs/config.h"
#include "sweep_harness.h"
#include "test.h"

static void expect_bad(TestCounts *tc, const char *top, const char *model_key, const char *want) {
    char text[768];
    snprintf(text, sizeof text,
             "{%s \"models\": [{\"path\": \"m.gguf\"%s}], \"policies\": [\"full\"], \"datasets\": [{\"suite\": "
             "\"niah\", \"tasks\": [\"needle\"]}]}",
             top, model_key);
    RunConfig cfg;
    KvErr err = {{0}};
    CHECK(tc, config_parse(&cfg, "bad.json", text, &err) == -1, "accepted: %s %s", top, model_key);
    CHECK(tc, !strcmp(err.msg, want), "message: %s", err.msg);
}

static void test_parse(TestCounts *tc) {
    RunConfig cfg;
    KvErr err = {{0}};
    const char *text = "{\"stop_rule\": \"any_token\", \"over_length\": \"error\", \"models\": [{\"path\": \"m.gguf\", "
                       "\"duo_attention_patterns\": \"none\"}, {\"path\": \"n.gguf\"}], \"policies\": [\"full\", "
                       "\"duo_attention\"], \"budgets\": [\"20%\"], \"datasets\": [{\"suite\": \"niah\", \"tasks\": "
                       "[\"needle\"]}]}";
    int rc = config_parse(&cfg, "good.json", text, &err);
    CHECK(tc, rc == 0, "rejected: %s", err.msg);
    if (rc == 0) {
        CHECK(tc, cfg.stop_any_token == 1 && cfg.over_length_error == 1, "keys %d %d", cfg.stop_any_token,
              cfg.over_length_error);
        CHECK(tc, !strcmp(cfg.models[0].duo_patterns, "none") && cfg.models[1].duo_patterns == NULL, "patterns");
        CHECK(tc, cfg.n_variants == 2 && !strcmp(cfg.variants[1].policy.name, "duoattention"), "variants");
        config_free(&cfg);
    }
    rc = config_parse(&cfg, "default.json",
                      "{\"models\": [{\"path\": \"m.gguf\"}], \"policies\": [\"full\"], \"datasets\": [{\"suite\": "
                      "\"niah\", \"tasks\": [\"needle\"]}]}",
                      &err);
    CHECK(tc, rc == 0 && cfg.stop_any_token == 0 && cfg.over_length_error == 0, "defaults: %s", err.msg);
    if (rc == 0) config_free(&cfg);
    expect_bad(tc, "\"stop_rule\": \"first\",", "", "bad.json: stop_rule: expected \"reference\" or \"any_token\"");
    expect_bad(tc, "\"stop_rule\": 1,", "", "bad.json: stop_rule: expected \"reference\" or \"any_token\"");
    expect_bad(tc, "\"over_length\": \"truncate\",", "", "bad.json: over_length: expected \"run\" or \"error\"");
    expect_bad(tc, "", ", \"duo_attention_patterns\": 3", "bad.json: models[0].duo_attention_patterns: expected a string");
}

/* The tiny model's pattern: 2 layers x 2 kv-heads, sink 4, recent 8. At 40% (compression ratio 0.6)
 * round(4 * 0.6) = 2 heads stream, the two lowest (0.1 and 0.2); they keep 12 tokens, the others L:
 * kept fraction (2*12 + 2*L) / (4*L) = 0.5 + 6/L. */
static void write_pattern(void) {
    mkdir(path_in("pattern"), 0755);
    FILE *f = fopen(path_in("pattern/full_attention_heads.tsv"), "w");
    if (f) fputs("0.9\t0.1\n0.2\t0.8\n", f), fclose(f);
    f = fopen(path_in("pattern/config.json"), "w");
    if (f) fputs("{\"sink_size\": 4, \"recent_size\": 8}", f), fclose(f);
}

static char *write_config(const char *name, const char *top, const char *model_key) {
    char *path = path_in(name);
    FILE *f = fopen(path, "w");
    if (!f) return path;
    fprintf(f,
            "{\"name\": \"rules\", \"max_new_tokens\": 2, \"window\": 16, %s\n"
            " \"models\": [{\"path\": \"tests/data/models/tiny-llama-hf\", \"name\": \"tiny\", \"tokenizer\": \"%s\"%s}],\n"
            " \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [800, 2100], \"depths\": [50]}],\n"
            " \"policies\": [\"full\", \"snapkv\", \"duoattention\"], \"budgets\": [\"40%%\"]}\n",
            top, path_in("bytes.json"), model_key);
    fclose(f);
    return path;
}

static void test_runs(TestCounts *tc) {
    char db[128], db_err[128], db_na[128], key[256];
    snprintf(db, sizeof db, "%s/a.db", dir);
    snprintf(db_err, sizeof db_err, "%s/b.db", dir);
    snprintf(db_na, sizeof db_na, "%s/c.db", dir);
    byte_tokenizer("bytes.json");
    write_pattern();
    snprintf(key, sizeof key, ", \"duo_attention_patterns\": \"%s\"", path_in("pattern"));

    /* the defaults: the reference's stop rule, over-long samples run and flagged */
    char *a[] = {write_config("a.json", "", key), "--db", db, NULL};
    CHECK(tc, run(cmd_run, "a", a) == 0, "default run failed");
    CHECK(tc, query_int(db, "SELECT count(*) FROM results WHERE error IS NULL") == 6, "6 rows without error: %lld",
          query_int(db, "SELECT count(*) FROM results WHERE error IS NULL"));
    CHECK(tc, query_int(db, "SELECT count(*) FROM samples WHERE setup = 'cq=0,max_new=2'") == 2, "default setup");
    CHECK(tc, query_int(db, "SELECT over_length FROM samples WHERE sample_key LIKE '%L2100%'") == 1, "long flagged");
    CHECK(tc, query_int(db, "SELECT over_length FROM samples WHERE sample_key LIKE '%L800%'") == 0, "short not");
    CHECK(tc, query_int(db, "SELECT count(*) FROM samples WHERE context_tokens + question_tokens + 2 > 2048") == 1,
          "one sample past the trained length");
    /* effective kept fractions: DuoAttention's formula, 1 for full, int(L*f)/L for SnapKV */
    CHECK(tc, query_int(db, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE r.policy = "
                            "'duoattention' AND abs(r.kept_fraction - (0.5 + 6.0 / s.context_tokens)) < 1e-12 AND "
                            "r.keep_fraction = 0.4") == 2,
          "duoattention kept fraction 0.5 + 6/L beside the nominal 0.4");
    CHECK(tc, query_int(db, "SELECT count(*) FROM results WHERE policy = 'full' AND kept_fraction = 1") == 2, "full");
    CHECK(tc, query_int(db, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE r.policy = "
                            "'snapkv' AND abs(r.kept_fraction - r.kept_tokens / s.context_tokens) < 1e-12 AND "
                            "r.kept_fraction < 0.41") == 2,
          "snapkv kept fraction");

    /* the earlier rules, opt-in: their own setup; the over-long sample is an error row */
    char *b[] = {write_config("b.json", "\"over_length\": \"error\", \"stop_rule\": \"any_token\",", key), "--db",
                 db_err, NULL};
    CHECK(tc, run(cmd_run, "b", b) == 3, "error-mode run: exit 3 (rows failed)");
    char *setups = dump_query(db_err, "SELECT setup || ' ' || count(*) FROM samples GROUP BY setup");
    CHECK(tc, !strcmp(setups, "cq=0,max_new=2,stop=any,long=error 2\n"), "opt-in setup: %s", setups);
    free(setups);
    CHECK(tc, query_int(db_err, "SELECT count(*) FROM results r JOIN samples s ON s.id = r.sample_id WHERE "
                                "s.sample_key LIKE '%L2100%' AND r.error LIKE '%exceed the model''s max context%'") ==
                  3,
          "over-long rows are errors");
    CHECK(tc, query_int(db_err, "SELECT count(*) FROM results WHERE error IS NULL") == 3, "short rows fine");

    /* N/A: no duoattention rows, a log line */
    char *c[] = {write_config("c.json", "", ", \"duo_attention_patterns\": \"none\""), "--db", db_na, NULL};
    CHECK(tc, run(cmd_run, "c", c) == 0 && log_contains("c", "tiny: duoattention N/A"), "N/A run");
    CHECK(tc, query_int(db_na, "SELECT count(*) FROM results") == 4 &&
                  query_int(db_na, "SELECT count(*) FROM results WHERE policy = 'duoattention'") == 0,
          "N/A rows");
    CHECK(tc, run(cmd_run, "c2", c) == 0 && log_contains("c2", "nothing to do"), "N/A resume");

    /* the CPU backend's opt-in FAST decode keys its rows apart: the same config runs again under its own setup,
     * never resumed from (or averaged with) the exact rows; an unknown value stops the run */
    setenv("KVBENCH_DECODE", "fast", 1);
    CHECK(tc, run(cmd_run, "c3", c) == 0 && !log_contains("c3", "nothing to do"), "fast run");
    CHECK(tc, query_int(db_na, "SELECT count(*) FROM samples WHERE setup = 'cq=0,max_new=2,decode=fast2'") == 2,
          "fast setup");
    setenv("KVBENCH_DECODE", "quick", 1);
    CHECK(tc, run(cmd_run, "c4", c) == 1 && log_contains("c4", "KVBENCH_DECODE: decode 'quick': unknown decode path"),
          "unknown decode path");
    unsetenv("KVBENCH_DECODE");
    /* the opt-in half-precision cache likewise, alone and with the fast decode */
    setenv("KVBENCH_CACHE", "f16", 1);
    CHECK(tc, run(cmd_run, "c5", c) == 0 && !log_contains("c5", "nothing to do") && log_contains("c5", "f16 KV cache"),
          "f16 cache run");
    CHECK(tc, query_int(db_na, "SELECT count(*) FROM samples WHERE setup = 'cq=0,max_new=2,cache=f16'") == 2,
          "f16 cache setup");
    CHECK(tc, run(cmd_run, "c6", c) == 0 && log_contains("c6", "nothing to do"), "f16 cache resume");
    setenv("KVBENCH_DECODE", "fast", 1);
    CHECK(tc, run(cmd_run, "c7", c) == 0 && !log_contains("c7", "nothing to do"), "fast decode, f16 cache run");
    CHECK(tc, query_int(db_na, "SELECT count(*) FROM samples WHERE setup = 'cq=0,max_new=2,decode=fast2,cache=f16'") == 2,
          "fast decode, f16 cache setup");
    unsetenv("KVBENCH_DECODE");
    setenv("KVBENCH_CACHE", "f8", 1);
    CHECK(tc, run(cmd_run, "c8", c) == 1 && log_contains("c8", "KVBENCH_CACHE: cache 'f8': unknown KV cache type"),
          "unknown cache type");
    unsetenv("KVBENCH_CACHE");
    CHECK(tc, run(cmd_run, "c9", c) == 0 && log_contains("c9", "nothing to do"), "exact rows still resume");

    /* the options by name (runs/util.h): the command line's flag over the model's "cpu" in the config over the
     * environment; the rows' setup names what ran, as it does when the environment asks for it */
    const char *db_opt = path_in("options.db");
    char *cf[] = {write_config("cf.json", "", ", \"duo_attention_patterns\": \"none\", \"cpu\": {\"decode\": \"fast\"}"),
                  "--db", (char *)db_opt, NULL, NULL, NULL};
    setenv("KVBENCH_DECODE", "exact", 1);
    CHECK(tc, run(cmd_run, "cf1", cf) == 0 &&
                  query_int(db_opt, "SELECT count(*) FROM samples WHERE setup = 'cq=0,max_new=2,decode=fast2'") == 2 &&
                  query_int(db_opt, "SELECT count(*) FROM samples") == 2,
          "the config's decode fast over KVBENCH_DECODE=exact, under the setup the environment's gives");
    unsetenv("KVBENCH_DECODE");
    cf[3] = "--decode";
    cf[4] = "exact";
    CHECK(tc, run(cmd_run, "cf2", cf) == 0 &&
                  query_int(db_opt, "SELECT count(*) FROM samples WHERE setup = 'cq=0,max_new=2'") == 2,
          "--decode exact over the config's fast");
    CHECK(tc, run(cmd_run, "cf3", cf) == 0 && log_contains("cf3", "nothing to do"), "--decode exact resumes");
    cf[4] = "quick";
    CHECK(tc, run(cmd_run, "cf4", cf) == 2 && log_contains("cf4", "kvbench run: --decode: decode 'quick': unknown "
                                                                  "decode path (exact, the default, or fast)"),
          "a bad --decode is a bad command line");
    char *cq[] = {write_config("cq.json", "", ", \"cpu\": {\"cache\": \"f8\"}"), "--db", (char *)db_opt, NULL};
    CHECK(tc, run(cmd_run, "cq", cq) == 1 && log_contains("cq", "cq.json: models[0].cpu.cache: cache 'f8': unknown KV "
                                                                "cache type"),
          "a bad \"cpu\" value names the file, the key and the problem");

    /* kvbench trace hands the pattern to duoattention too: 2 steps of retained importance per sample */
    char *t[] = {write_config("t.json", "\"trace\": {\"steps\": 2},", key), "--db", path_in("t.db"), "--limit", "1",
                 NULL};
    CHECK(tc, run(cmd_trace, "t", t) == 0, "trace run failed");
    CHECK(tc, query_int(path_in("t.db"), "SELECT count(*) FROM traces WHERE policy = 'duoattention'") == 2,
          "duoattention trace rows: %lld",
          query_int(path_in("t.db"), "SELECT count(*) FROM traces WHERE policy = 'duoattention'"));

    /* no pattern given and none shipped: refused before any sample, naming what is missing */
    char *d[] = {write_config("d.json", "", ""), "--db", path_in("d.db"), NULL};
    CHECK(tc, run(cmd_run, "d", d) == 1 && log_contains("d", "models[0] 'tiny': policy duoattention needs") &&
                  log_contains("d", "\"duo_attention_patterns\": FOLDER"),
          "missing pattern");
    CHECK(tc, query_int(path_in("d.db"), "SELECT count(*) FROM samples") <= 0, "nothing written");
    /* a pattern of the wrong shape: the same, before any sample */
    FILE *f = fopen(path_in("pattern/full_attention_heads.tsv"), "w");
    if (f) fputs("0.9\t0.1\t0.5\n", f), fclose(f);
    char *e[] = {write_config("e.json", "", key), "--db", path_in("e.db"), NULL};
    CHECK(tc, run(cmd_run, "e", e) == 1 && log_contains("e", "e.json: models[0] 'tiny': the DuoAttention pattern") &&
                  log_contains("e", "has 1 layers x 3 kv-heads, the model 2 x 2"),
          "mis-shaped pattern");
    CHECK(tc, query_int(path_in("e.db"), "SELECT count(*) FROM samples") <= 0, "nothing written");
}

/* A tokenizer whose answers transformers decodes with clean_up_tokenization_spaces (here the byte tokenizer with
 * a tokenizer_config.json saying so) stores its rows under ",clean_up_spaces". A database of a build without the
 * clean-up holds the same rows under the plain setup: resumed, they stay as they are and the sample runs again
 * under the new label; then nothing is left to do. */
static void test_clean_up_resume(TestCounts *tc) {
    mkdir(path_in("clean"), 0755);
    byte_tokenizer("clean/tokenizer.json");
    FILE *f = fopen(path_in("clean/tokenizer_config.json"), "w");
    if (f) fputs("{\"clean_up_tokenization_spaces\": true}", f), fclose(f);
    char *cfg = path_in("clean.json"), db[128];
    snprintf(db, sizeof db, "%s/clean.db", dir);
    f = fopen(cfg, "w");
    if (f) {
        fprintf(f, "{\"name\": \"clean\", \"max_new_tokens\": 2, \"window\": 16, \"models\": [{\"path\": "
                   "\"tests/data/models/tiny-llama-hf\", \"name\": \"tiny\", \"tokenizer\": \"%s\"}], \"datasets\": "
                   "[{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [800], \"depths\": [50]}], "
                   "\"policies\": [\"full\", \"snapkv\"], \"budgets\": [\"40%%\"]}\n",
                path_in("clean"));
        fclose(f);
    }
    char *args[] = {cfg, "--db", db, NULL};
    CHECK(tc, run(cmd_run, "clean", args) == 0, "clean-up run failed");
    char *setups = dump_query(db, "SELECT setup || ' ' || count(*) FROM samples s JOIN results r ON r.sample_id = s.id "
                                  "GROUP BY setup");
    CHECK(tc, !strcmp(setups, "cq=0,max_new=2,clean_up_spaces 2\n"), "clean-up setup: %s", setups);
    free(setups);
    /* what the same run stored before: its rows under the setup without the rule */
    sqlite3 *h;
    CHECK(tc, sqlite3_open(db, &h) == SQLITE_OK &&
                  sqlite3_exec(h, "UPDATE samples SET setup = 'cq=0,max_new=2'", NULL, NULL, NULL) == SQLITE_OK,
          "make the old database");
    sqlite3_close(h);
    char *before = dump_query(db, "SELECT r.id || ' ' || r.prediction FROM results r ORDER BY r.id");
    CHECK(tc, run(cmd_run, "clean2", args) == 0 && log_contains("clean2", "tiny: 1 samples to run (2 rows)"),
          "old-rule rows are not resumed");
    setups = dump_query(db, "SELECT setup || ' ' || count(*) FROM samples s JOIN results r ON r.sample_id = s.id "
                            "GROUP BY setup ORDER BY setup");
    CHECK(tc, !strcmp(setups, "cq=0,max_new=2 2\ncq=0,max_new=2,clean_up_spaces 2\n"), "kept apart: %s", setups);
    free(setups);
    char *after = dump_query(db, "SELECT r.id || ' ' || r.prediction FROM results r JOIN samples s ON s.id = "
                                 "r.sample_id WHERE s.setup = 'cq=0,max_new=2' ORDER BY r.id");
    CHECK(tc, !strcmp(before, after), "old rows changed:\n%s\nnow\n%s", before, after);
    free(before);
    free(after);
    CHECK(tc, run(cmd_run, "clean3", args) == 0 && log_contains("clean3", "nothing to do"), "new rows resume");
}

/* `kvbench select --policy duo_attention --duo-patterns DIR` on SmolLM2 (30 layers x 3 kv-heads): scores rising
 * with the flat index make heads 0..71 (layers 0-23) the 72 = round(90 * 0.8) streaming heads at 20%; each keeps
 * sink 4 + recent 8 = 12 of the L context tokens, the 18 others all L. Without a pattern: one clear error. */
static void test_select(TestCounts *tc) {
    mkdir(path_in("smol_pattern"), 0755);
    FILE *f = fopen(path_in("smol_pattern/full_attention_heads.tsv"), "w");
    for (int l = 0; f && l < 30; l++) fprintf(f, "%g\t%g\t%g\n", (l * 3) / 90.0, (l * 3 + 1) / 90.0, (l * 3 + 2) / 90.0);
    if (f) fclose(f);
    f = fopen(path_in("smol_pattern/config.json"), "w");
    if (f) fputs("{\"sink_size\": 4, \"recent_size\": 8}", f), fclose(f);
    f = fopen(path_in("text.txt"), "w");
    if (f) fputs("The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door. ", f),
        fputs("Meanwhile the dog dreams of chasing the fox across the wide green fields of the quiet farm.", f), fclose(f);
    char out[16384];
    const char *argv[] = {"--model", "models/SmolLM2-135M-Instruct.Q4_1.gguf", "--file", path_in("text.txt"),
                          "--policy", "duo_attention", "--budget", "20%", "--duo-patterns", path_in("smol_pattern")};
    int rc = test_run_command(cmd_select, 10, (char **)argv, out, NULL, sizeof out);
    int kept = 0, total = 0;
    const char *t = strstr(out, "total kept ");
    CHECK(tc, rc == 0 && t && sscanf(t, "total kept %d of %d", &kept, &total) == 2, "select: %s", out);
    int L = total / 90;
    CHECK(tc, total == 90 * L && L > 12 && kept == 18 * L + 72 * 12, "kept %d of %d (L %d)", kept, total, L);
    CHECK(tc, strstr(out, "\n    0  12 12 12\n") && strstr(out, "\n   23  12 12 12\n"), "streaming layers:\n%s", out);
    const char *argv2[] = {"--model", "models/SmolLM2-135M-Instruct.Q4_1.gguf", "--file", path_in("text.txt"),
                           "--policy", "duoattention", "--budget", "20%"};
    rc = test_run_command(cmd_select, 8, (char **)argv2, out, NULL, sizeof out);
    CHECK(tc, rc == 1 && strstr(out, "kvbench select: no DuoAttention head pattern is shipped for "
                                     "models/SmolLM2-135M-Instruct.Q4_1.gguf (give --duo-patterns DIR)"),
          "no pattern: %s", out);
}

int main(void) {
    TestCounts tc = {"test_sweep_rules", 0, 0, 0};
    test_parse(&tc);
    snprintf(dir, sizeof dir, "/tmp/kvbench_rules_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_runs(&tc);
    test_clean_up_resume(&tc);
    test_select(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
