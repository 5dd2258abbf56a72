/* test_chat_option.c — a dataset's "chat_template" key (runs/config.c, runs/sweep.c): parsed and validated; the
 * shipped configs' choice (the CPU demo's needle on the chat template, every other dataset on its suite's own
 * protocol), read from the list of configs git tracks so that a user's own file in configs/ cannot fail the test;
 * and end to end on a 2-layer synthetic SmolLM2 shape with SmolLM2's real tokenizer: needle samples
 * run with the key are prefilled and questioned in the ChatML rendering (the stored token counts equal those of
 * the prompt rendered here by hand), are stored under their own setup so that rows of one protocol never pass
 * for the other's on resume, `kvbench trace` keys them alike, and a model without a chat template is refused.
 * Each run is a forked child (tests/sweep_harness.h); the parent tokenizes only after the last run. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../datasets/dataset.h"
#include "../engine/tokenizer.h"
#include "../cli/commands.h"
#include "../runs/config.h"
#include "sweep_harness.h"
#include "test.h"

#define TOKENIZER "models/SmolLM2-135M-Instruct.Q4_1.gguf"
/* SmolLM2's answers are decoded with transformers' clean-up of spaces, which result rows name (traces hold no text) */
#define CLEAN ",clean_up_spaces"
/* SmolLM2-135M-Instruct's chat template for one user message with the generation prompt (its
 * tokenizer_config.json), cut where the user's message goes. */
#define SMOLLM2_HEAD                                                                                                 \
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"           \
    "<|im_start|>user\n"
#define SMOLLM2_TAIL "<|im_end|>\n<|im_start|>assistant\n"

/* A sweep over two needle cells; %s is the dataset entry's extra key (or nothing). */
static const char *CONFIG =
    "{\"name\": \"chat\", \"max_new_tokens\": 2, \"window\": 16,%s\n"
    " \"models\": [{\"path\": \"synthetic:smollm2-135m:layers=2\", \"name\": \"syn\",\n"
    "              \"tokenizer\": \"" TOKENIZER "\"}],\n"
    " \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [300], \"depths\": [0, 100]%s}],\n"
    " \"policies\": [\"full\", \"snapkv\"], \"budgets\": [\"40%%\"]}\n";
static const double DEPTHS[] = {0, 100};
enum { N_SAMPLES = 2, N_VARIANTS = 2 };

/* Writes DIR/name into path[128]; returns path. */
static char *write_config(char *path, const char *name, const char *top, const char *dataset_key) {
    snprintf(path, 128, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return path;
    fprintf(f, CONFIG, top, dataset_key);
    fclose(f);
    return path;
}

static void expect_parse_error(TestCounts *tc, const char *value) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"models\": [{\"path\": \"m.gguf\"}], \"policies\": [\"full\"], \"datasets\": [{\"suite\": \"niah\", "
             "\"tasks\": [\"needle\"]}, {\"suite\": \"niah\", \"tasks\": [\"needle\"], \"chat_template\": %s}]}",
             value);
    RunConfig cfg;
    KvErr err = {{0}};
    CHECK(tc, config_parse(&cfg, "bad.json", text, &err) == -1, "chat_template %s accepted", value);
    CHECK(tc, !strcmp(err.msg, "bad.json: datasets[1].chat_template: expected true or false"), "message: %s", err.msg);
    CHECK(tc, !strchr(err.msg, '\n'), "one line: %s", err.msg);
}

static void test_parse(TestCounts *tc) {
    RunConfig cfg;
    KvErr err = {{0}};
    const char *text = "{\"models\": [{\"path\": \"m.gguf\"}], \"policies\": [\"full\"], \"datasets\": ["
                       "{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"chat_template\": true},"
                       "{\"suite\": \"ruler\", \"tasks\": [\"vt\"], \"chat_template\": false},"
                       "{\"suite\": \"longbench\", \"tasks\": [\"trec\"]}]}";
    int rc = config_parse(&cfg, "good.json", text, &err);
    CHECK(tc, rc == 0, "rejected: %s", err.msg);
    if (rc == 0) {
        CHECK(tc, cfg.datasets[0].chat == RUN_CHAT_ON, "true: %d", cfg.datasets[0].chat);
        CHECK(tc, cfg.datasets[1].chat == RUN_CHAT_OFF, "false: %d", cfg.datasets[1].chat);
        CHECK(tc, cfg.datasets[2].chat == RUN_CHAT_SUITE, "absent: %d", cfg.datasets[2].chat);
        config_free(&cfg);
    }
    const char *bad[] = {"\"yes\"", "1", "0", "null", "[true]", "{}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect_parse_error(tc, bad[i]);
}

/* The configs git tracks, by name: the test reads these and nothing else of configs/, so a user's own file saved
 * there (an edited copy, a draft) cannot fail `make check`; a tracked config missing here fails the list check
 * below instead of going unchecked. */
static const char *const SHIPPED[] = {
    "ablation_aggregation.json", "cpu_demo.json",          "cpu_study.json",        "figure2.json",
    "fragility.json",            "fragility_cpu.json",     "fragility_tasks.json",  "niah.json",
    "paper_longbench_20.json",   "paper_longbench_40.json", "paper_longbench_60.json", "paper_longbench_80.json",
    "paper_ruler4k_quick.json",  "paper_ruler4k_20.json",   "paper_ruler4k_40.json",   "paper_niah_20.json",
    "paper_niah_40.json",        "qwen_study.json",         "fragility_qwen.json",     "qwen15_study.json",
    "fragility_qwen15.json",     "cpu_study_baselines.json", "qwen_study_baselines.json", "defensivekv_ladder.json",
    "qwen15_study_0.5b.json",    "qwen15_study_135m.json",
};
enum { N_SHIPPED = sizeof SHIPPED / sizeof SHIPPED[0] };

/* Every shipped config keeps its suites' protocols, except the CPU configs' needle (SmolLM2-135M-Instruct answers
 * the plain needle prompt with end-of-turn at once; the Qwen2.5 study keeps the chat template to compare). */
static void test_shipped(TestCounts *tc) {
    setenv("MODELS_DIR", "/models", 0);
    setenv("LONGBENCH_DIR", "/data/longbench", 0);
    setenv("RULER_QA_DIR", "/data/ruler_qa", 0);
    int n_files = 0, demo_needle = 0;
    for (int k = 0; k < N_SHIPPED; k++) {
        const char *name = SHIPPED[k];
        char path[512];
        snprintf(path, sizeof path, "configs/%s", name);
        RunConfig cfg;
        KvErr err = {{0}};
        int rc = config_load(&cfg, path, &err);
        CHECK(tc, rc == 0, "%s", err.msg);
        if (rc) continue;
        n_files++;
        for (int i = 0; i < cfg.n_datasets; i++) {
            const RunDataset *ds = &cfg.datasets[i];
            /* the CPU configs render SmolLM2's needle in the chat template (README, the CPU demo) */
            static const char *const cpu_configs[] = {
                "cpu_demo.json", "cpu_study.json", "qwen_study.json", "qwen15_study.json",
                "cpu_study_baselines.json", "qwen_study_baselines.json", "defensivekv_ladder.json",
                "qwen15_study_0.5b.json", "qwen15_study_135m.json"};
            int is_demo_needle = 0;
            for (size_t c = 0; c < sizeof cpu_configs / sizeof cpu_configs[0]; c++)
                is_demo_needle |= !strcmp(name, cpu_configs[c]) && !strcmp(ds->suite, "niah");
            demo_needle += is_demo_needle;
            CHECK(tc, ds->chat == (is_demo_needle ? RUN_CHAT_ON : RUN_CHAT_SUITE), "%s datasets[%d] (%s): chat %d",
                  path, i, ds->suite, ds->chat);
        }
        config_free(&cfg);
    }
    CHECK(tc, n_files == N_SHIPPED && demo_needle == 9, "%d configs, %d CPU needle datasets", n_files, demo_needle);
}

/* The list above is git's list (checked where the tree is a git checkout; a release tarball has no .git). */
static void test_shipped_list(TestCounts *tc) {
    if (system("git rev-parse --is-inside-work-tree >/dev/null 2>&1")) {
        fprintf(stderr, "test_chat_option: not a git checkout, the tracked-config list is not compared\n");
        return;
    }
    FILE *p = popen("git ls-files -- 'configs/*.json'", "r");
    char line[512];
    int n = 0;
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        const char *name = strncmp(line, "configs/", 8) ? line : line + 8;
        int k = 0;
        while (k < N_SHIPPED && strcmp(SHIPPED[k], name)) k++;
        CHECK(tc, k < N_SHIPPED, "tracked %s is not in test_chat_option's SHIPPED list", line);
        n++;
    }
    CHECK(tc, p && pclose(p) == 0 && n == N_SHIPPED, "git ls-files lists %d configs, SHIPPED %d", n, N_SHIPPED);
}

/* A user's untracked config in configs/ (here one whose needle is on the chat template, which the shipped-config
 * check would reject) changes nothing: the checks above pass with it present. */
static void test_untracked_config(TestCounts *tc) {
    char path[128];
    snprintf(path, sizeof path, "configs/zz_untracked_test_%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CHECK(tc, f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs("{\"name\": \"mine\", \"models\": [{\"path\": \"synthetic:tiny\"}], \"datasets\": [{\"suite\": "
          "\"niah\", \"tasks\": [\"needle\"], \"chat_template\": true}], \"policies\": [\"full\"], "
          "\"budgets\": [\"20%\"]}\n", f);
    fclose(f);
    TestCounts inner = {"shipped with an untracked config", 0, 0, 0};
    test_shipped(&inner);
    test_shipped_list(&inner);
    remove(path);
    CHECK(tc, inner.failed == 0 && inner.passed > 0, "an untracked configs/ file failed %d checks", inner.failed);
}

static int count_special(const Tokenizer *tok, const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *text = malloc(na + nb + 1);
    TokenIds ids = {0};
    KvErr err = {{0}};
    memcpy(text, a, na);
    memcpy(text + na, b, nb + 1);
    int n = tokenizer_encode(tok, text, na + nb, 1, &ids, &err) ? -1 : ids.n;
    ids_free(&ids);
    free(text);
    return n;
}

static int count_plain(void *user, const char *text, int *n_tokens, KvErr *err) {
    TokenIds ids = {0};
    int rc = tokenizer_encode(user, text, strlen(text), 0, &ids, err);
    *n_tokens = ids.n;
    ids_free(&ids);
    return rc;
}

/* Stored (context, question) tokens of a needle cell under a setup. */
static void stored_tokens(const char *db, const char *setup, double depth, long long *ctx, long long *q) {
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %%s FROM samples WHERE setup = '%s' AND sample_key = 'niah:needle:L300:d%g'",
             setup, depth);
    char a[600], b[600];
    snprintf(a, sizeof a, sql, "context_tokens");
    snprintf(b, sizeof b, sql, "question_tokens");
    *ctx = query_int(db, a);
    *q = query_int(db, b);
}

/* The stored token counts of every cell are those of the hand-rendered prompts: ChatML for chat=1, the plain
 * prompt (BOS + context, question alone) for the suite's protocol and chat=0. */
static void check_renderings(TestCounts *tc, const char *db) {
    Tokenizer *tok = NULL;
    Dataset *ds = NULL;
    KvErr err = {{0}};
    int rc = tokenizer_load(&tok, TOKENIZER, &err);
    CHECK(tc, rc == 0, "%s", err.msg);
    if (rc) return;
    const int lengths[] = {300};
    DatasetOptions o = {.depths = DEPTHS, .n_depths = N_SAMPLES, .lengths = lengths, .n_lengths = 1,
                        .count_tokens = count_plain, .count_user = tok};
    rc = dataset_open(&ds, "niah:needle", &o, &err);
    CHECK(tc, rc == 0, "%s", err.msg);
    for (int i = 0; rc == 0 && i < N_SAMPLES; i++) {
        Sample s;
        if (dataset_get(ds, i, &s, &err)) {
            CHECK(tc, 0, "%s", err.msg);
            break;
        }
        int chat_ctx = count_special(tok, SMOLLM2_HEAD, s.context);
        int chat_q = count_special(tok, s.question, SMOLLM2_TAIL);
        int plain_ctx = 1 + count_special(tok, "", s.context); /* the suite's BOS */
        int plain_q = count_special(tok, s.question, "");
        CHECK(tc, chat_q > plain_q && chat_ctx > plain_ctx, "renderings: %d/%d vs %d/%d", chat_ctx, chat_q, plain_ctx,
              plain_q);
        const struct {
            const char *setup;
            int ctx, q;
        } want[] = {{"cq=0,max_new=2,chat=1" CLEAN, chat_ctx, chat_q},
                    {"trace,cq=0,steps=2,chat=1", chat_ctx, chat_q},
                    {"cq=0,max_new=2" CLEAN, plain_ctx, plain_q},
                    {"cq=0,max_new=2,chat=0" CLEAN, plain_ctx, plain_q}};
        for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
            long long c, q;
            stored_tokens(db, want[w].setup, DEPTHS[i], &c, &q);
            CHECK(tc, c == want[w].ctx && q == want[w].q, "%s d%g: stored %lld + %lld tokens, rendered %d + %d",
                  want[w].setup, DEPTHS[i], c, q, want[w].ctx, want[w].q);
        }
        sample_free(&s);
    }
    dataset_close(ds);
    tokenizer_free(tok);
}

static long long count_where(const char *db, const char *table, const char *setup) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s t JOIN samples s ON s.id = t.sample_id WHERE s.setup = '%s'",
             table, setup);
    return query_int(db, sql);
}

static void test_runs(TestCounts *tc) {
    char db[128], files[5][128]; /* not path_in's buffers: they are reused */
    snprintf(db, sizeof db, "%s/chat.db", dir);
    char *chat[] = {write_config(files[0], "chat.json", "", ", \"chat_template\": true"), "--db", db, NULL};
    char *plain[] = {write_config(files[1], "plain.json", "", ""), "--db", db, NULL};
    char *off[] = {write_config(files[2], "off.json", "", ", \"chat_template\": false"), "--db", db, NULL};
    char *trace[] = {write_config(files[3], "trace.json", " \"trace\": {\"steps\": 2},", ", \"chat_template\": true"),
                     "--db", db, NULL};

    CHECK(tc, run(cmd_run, "chat", chat) == 0, "chat run failed");
    CHECK(tc, count_where(db, "results", "cq=0,max_new=2,chat=1" CLEAN) == N_SAMPLES * N_VARIANTS, "chat rows: %lld",
          count_where(db, "results", "cq=0,max_new=2,chat=1" CLEAN));
    CHECK(tc, query_int(db, "SELECT count(*) FROM results WHERE error IS NOT NULL") == 0, "failed rows");
    /* The suite's protocol on the same database: a different prompt, so nothing is taken as done. */
    CHECK(tc, run(cmd_run, "plain", plain) == 0 && log_contains("plain", "2 samples to run"), "plain run");
    CHECK(tc, count_where(db, "results", "cq=0,max_new=2" CLEAN) == N_SAMPLES * N_VARIANTS, "plain rows");
    CHECK(tc, run(cmd_run, "chat2", chat) == 0 && log_contains("chat2", "nothing to do"), "chat rerun");
    CHECK(tc, run(cmd_run, "plain2", plain) == 0 && log_contains("plain2", "nothing to do"), "plain rerun");
    /* false is stored apart from "absent": for another suite it is a change of protocol. */
    CHECK(tc, run(cmd_run, "off", off) == 0 && log_contains("off", "2 samples to run"), "off run");
    CHECK(tc, run(cmd_trace, "trace", trace) == 0, "trace run");
    CHECK(tc, count_where(db, "traces", "trace,cq=0,steps=2,chat=1") == N_SAMPLES * N_VARIANTS * 2, "trace rows %lld",
          count_where(db, "traces", "trace,cq=0,steps=2,chat=1"));
    char *setups = dump_query(db, "SELECT setup || ' ' || count(*) FROM samples GROUP BY setup ORDER BY setup");
    CHECK(tc, !strcmp(setups, "cq=0,max_new=2,chat=0" CLEAN " 2\ncq=0,max_new=2,chat=1" CLEAN " 2\ncq=0,max_new=2" CLEAN
                              " 2\ntrace,cq=0,steps=2,chat=1 2\n"),
          "samples per setup:\n%s", setups);
    free(setups);

    /* A model without a chat template cannot honour true: refused before any sample. */
    char nochat[256];
    snprintf(nochat, sizeof nochat, "%s/nochat.json", dir);
    FILE *f = fopen(nochat, "w");
    if (f) {
        fprintf(f, "{\"models\": [{\"path\": \"tests/data/models/tiny-llama-hf\", \"tokenizer\": \"%s\"}],\n"
                   " \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [300],\n"
                   "               \"depths\": [0], \"chat_template\": true}], \"policies\": [\"full\"]}\n",
                byte_tokenizer("plain_tok.json"));
        fclose(f);
    }
    char *nochat_args[] = {nochat, "--db", path_in("nochat.db"), NULL};
    CHECK(tc, run(cmd_run, "nochat", nochat_args) == 1 &&
                  log_contains("nochat", "nochat.json: datasets[0].chat_template: model 'tiny-llama-hf' has no chat "
                                         "template"),
          "model without a chat template");
    CHECK(tc, access(path_in("nochat.db"), F_OK) != 0, "nochat, stopped before its first sample, left a database");

    /* A bad value stops `kvbench run` with the file and the key. */
    char *bad[] = {write_config(files[4], "bad.json", "", ", \"chat_template\": \"yes\""), "--db", path_in("bad.db"),
                   NULL};
    CHECK(tc, run(cmd_run, "bad", bad) == 1 &&
                  log_contains("bad", "bad.json: datasets[0].chat_template: expected true or false"),
          "bad value");

    check_renderings(tc, db);
}

int main(void) {
    TestCounts tc = {"test_chat_option", 0, 0, 0};
    test_parse(&tc);
    test_shipped(&tc);
    test_shipped_list(&tc);
    test_untracked_config(&tc);
    /* The tokenizer is SmolLM2's, from the default model that `make setup` / `make model` fetches. */
    CHECK(&tc, access(TOKENIZER, R_OK) == 0, "%s is missing: run `make model` first", TOKENIZER);
    if (tc.failed) return test_finish(&tc);
    snprintf(dir, sizeof dir, "/tmp/kvbench_chat_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_runs(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
