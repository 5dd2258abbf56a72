/* test_datacheck.c — `kvbench data check` and the check `kvbench run` does first (runs/datacheck.c), and the
 * modelled GPU estimate (runs/estimate.c) against a hand-derived case.
 *
 * Configs are written into a temporary directory: a good one (0 problems; RULER qa_1 without SQuAD is a warning,
 * the labelled substitute), and broken ones whose problems must all be listed at once — a zip without the task's
 * member, an unset variable, a wrong model path, a missing task file, a missing RULER qa file, an unwritable
 * database, a Hugging Face directory whose index names no shard or a missing shard, unparsable JSON — each
 * ending in exit 1, and `kvbench run` stopping before it creates its database. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../cli/commands.h"
#include "../runs/datacheck.h"
#include "../runs/estimate.h"
#include "test.h"

#define SMOLLM "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static char dir[64];

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static int copy_file(const char *from, const char *to) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    return system(cmd);
}

/* Writes CONFIG to dir/name and runs `kvbench data check` on it; out gets stdout + stderr. */
static int data_check(const char *name, const char *config, char *out, size_t size) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, config);
    char *argv[] = {"check", path};
    return test_run_command(cmd_data, 2, argv, out, NULL, size);
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static void check_good(TestCounts *tc) {
    static char out[1 << 16], cfg[4096];
    setenv("KVB_TEST_LONGBENCH", "tests/data/longbench", 1);
    snprintf(cfg, sizeof cfg,
             "{\"db\": \"%s/good.db\", \"models\": [{\"path\": \"" SMOLLM "\"}],"
             " \"datasets\": [{\"suite\": \"longbench\", \"data_path\": \"${KVB_TEST_LONGBENCH}/data.zip\", \"tasks\": [\"trec\"]},"
             "  {\"suite\": \"longbench\", \"data_path\": \"${KVB_TEST_LONGBENCH}\", \"tasks\": [\"multi_news\"], \"first_n\": 3},"
             "  {\"suite\": \"ruler\", \"n_samples\": 2, \"tasks\": [\"vt\", \"qa_1\"]},"
             "  {\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [1000], \"depths\": [0, 50]}],"
             " \"policies\": [\"full\", \"snapkv\"], \"budgets\": [\"20%%\"]}",
             dir);
    int rc = data_check("good.json", cfg, out, sizeof out);
    CHECK(tc, rc == 0 && strstr(out, "0 problems, 1 warning\n"), "good config: exit %d\n%s", rc, out);
    CHECK(tc, strstr(out, "ok: datasets[0] longbench:trec: ") && strstr(out, "ok: datasets[1] longbench:multi_news: 3 samples") &&
                  strstr(out, "ok: datasets[2] ruler:vt: 2 samples") && strstr(out, "ok: datasets[3] niah:needle: 2 samples") &&
                  strstr(out, "ok: models[0] SmolLM2-135M-Instruct.Q4_1.gguf: 30 layers"),
          "every input listed as found: %s", out);
    CHECK(tc, strstr(out, "warning: ") && strstr(out, "ruler:qa_1 runs as the labelled substitute 'qa_1_substitute'"),
          "qa_1 without SQuAD: %s", out);
    CHECK(tc, strstr(out, "estimate SmolLM2-135M-Instruct.Q4_1.gguf: none (backend cpu"), "no GPU estimate for a cpu model: %s",
          out);
}

static void check_broken(TestCounts *tc) {
    static char out[1 << 16], cfg[4096];
    unsetenv("KVB_TEST_UNSET");
    snprintf(cfg, sizeof cfg,
             "{\"db\": \"%s/good.json/x.db\","
             " \"models\": [{\"path\": \"%s/no-such-model.gguf\"}, {\"path\": \"${KVB_TEST_UNSET}/Llama\", \"name\": \"b\"}],"
             " \"datasets\": [{\"suite\": \"longbench\", \"data_path\": \"tests/data/longbench/data.zip\", \"tasks\": [\"trec\", \"lcc\"]},"
             "  {\"suite\": \"longbench\", \"data_path\": \"tests/data/longbench\", \"tasks\": [\"hotpotqa\"]},"
             "  {\"suite\": \"ruler\", \"data_path\": \"%s/no-squad\", \"tasks\": [\"qa_1\"]}],"
             " \"policies\": [\"full\"]}",
             dir, dir, dir);
    int rc = data_check("broken.json", cfg, out, sizeof out);
    CHECK(tc, rc == 1 && strstr(out, ": 6 problems, 0 warnings\n") && count(out, "problem: ") == 6,
          "six problems, all listed: exit %d\n%s", rc, out);
    const char *says[] = {
        "models[0].path: " /* dir */, "no-such-model.gguf: No such file or directory",
        "models[1].path: environment variable KVB_TEST_UNSET is not set (used in \"${KVB_TEST_UNSET}/Llama\"; where",
        "; where the models and data come from: configs/README.md, section \"Data and models\")",
        "datasets[0].tasks[1]: longbench:lcc: tests/data/longbench/data.zip: no member 'data/lcc.jsonl'",
        "datasets[1].tasks[0]: longbench:hotpotqa: ", "hotpotqa.jsonl",
        "datasets[2].tasks[0]: ruler:qa_1: ", "no-squad",
        "db: cannot create ", "good.json/x.db (", "good.json is not a writable directory)",
    };
    for (size_t i = 0; i < sizeof says / sizeof *says; i++) CHECK(tc, strstr(out, says[i]), "says '%s': %s", says[i], out);
    CHECK(tc, !strstr(out, "datasets[0].tasks[0]:"), "the member that is there is no problem: %s", out);

    /* kvbench run stops on the same check, before a database exists */
    char db[128], path[128];
    snprintf(db, sizeof db, "%s/run.db", dir);
    snprintf(path, sizeof path, "%s/run.json", dir);
    snprintf(cfg, sizeof cfg,
             "{\"db\": \"%s\", \"models\": [{\"path\": \"" SMOLLM "\"}],"
             " \"datasets\": [{\"suite\": \"longbench\", \"data_path\": \"tests/data/longbench/data.zip\", \"tasks\": [\"lcc\", \"qmsum\"]}],"
             " \"policies\": [\"full\"]}",
             db);
    write_file(path, cfg);
    char *argv[] = {path};
    static char err[1 << 14];
    rc = test_run_command(cmd_run, 1, argv, out, err, sizeof out);
    struct stat st;
    CHECK(tc, rc == 1 && count(err, "problem: ") == 2 && strstr(err, "2 problems in") && strstr(err, "nothing was run") &&
                  stat(db, &st) != 0,
          "run stops first: exit %d, db %s\n%s", rc, stat(db, &st) ? "absent" : "created", err);
    /* --db is the database checked, not the config's */
    char bad_db[160];
    snprintf(bad_db, sizeof bad_db, "%s/good.json/y.db", dir);
    char *db_argv[] = {path, "--db", bad_db};
    rc = test_run_command(cmd_run, 3, db_argv, out, err, sizeof out);
    CHECK(tc, rc == 1 && count(err, "problem: ") == 3 && strstr(err, "--db: cannot create ") && !strstr(err, "run.db"),
          "--db checked: exit %d\n%s", rc, err);
    char *trace_argv[] = {path};
    rc = test_run_command(cmd_trace, 1, trace_argv, out, err, sizeof out);
    CHECK(tc, rc == 1 && strstr(err, "nothing was run") && stat(db, &st) != 0, "trace stops first: %d %s", rc, err);
}

static void check_hf_dirs(TestCounts *tc) {
    static char out[1 << 16], cfg[4096];
    const char *files[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    const char *names[] = {"empty_map", "missing_shard"};
    const char *index[] = {"{\"weight_map\": {}}",
                           "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00009.safetensors\"}}"};
    for (int k = 0; k < 2; k++) {
        char sub[256], from[256], to[320];
        snprintf(sub, sizeof sub, "%s/%s", dir, names[k]);
        mkdir(sub, 0755);
        for (int f = 0; f < 3; f++) {
            snprintf(from, sizeof from, "tests/data/hf_fixtures/llama/%s", files[f]);
            snprintf(to, sizeof to, "%s/%s", sub, files[f]);
            CHECK(tc, copy_file(from, to) == 0, "copy %s", from);
        }
        snprintf(to, sizeof to, "%s/model.safetensors.index.json", sub);
        write_file(to, index[k]);
    }
    snprintf(cfg, sizeof cfg,
             "{\"models\": [{\"path\": \"%s/empty_map\"}, {\"path\": \"%s/missing_shard\"}],"
             " \"datasets\": [{\"suite\": \"ruler\", \"n_samples\": 1, \"tasks\": [\"vt\"]}], \"policies\": [\"full\"]}",
             dir, dir);
    int rc = data_check("hf.json", cfg, out, sizeof out);
    CHECK(tc, rc == 1 && count(out, "problem: ") == 2 && strstr(out, "empty_map/model.safetensors.index.json: weight_map names no tensor") &&
                  strstr(out, "shard 'model-00001-of-00009.safetensors' is missing"),
          "HF directories: exit %d\n%s", rc, out);
    rc = data_check("bad.json", "{\"models\": [\n  {\"path\": ]}", out, sizeof out);
    CHECK(tc, rc == 1 && count(out, "problem: ") == 1 && strstr(out, "not valid JSON (line 2)"), "bad JSON: %s", out);
    char *none[] = {"check"};
    CHECK(tc, test_run_command(cmd_data, 1, none, out, NULL, sizeof out) == 2 && strstr(out, "check needs CONFIG.json"),
          "usage: %s", out);
}

/* The shipped configs that need no external data pass; the paper ones fail only on their variables / CUDA. */
static void check_shipped(TestCounts *tc) {
    static char out[1 << 16];
    char *argv[] = {"check", "configs/cpu_study.json"};
    int rc = test_run_command(cmd_data, 2, argv, out, NULL, sizeof out);
    CHECK(tc, rc == 0 && strstr(out, "0 problems, 2 warnings") && strstr(out, "qa_2_substitute"),
          "cpu_study: exit %d\n%s", rc, out);
    /* the Qwen2.5 configs: clean where make model-qwen / model-qwen15 has fetched the model, else that one problem */
    static const char *const qwen[][3] = {
        {"configs/qwen_study.json", "2 warnings", "models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf"},
        {"configs/fragility_qwen.json", "0 warnings", "models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf"},
        {"configs/qwen15_study.json", "2 warnings", "models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"},
        {"configs/fragility_qwen15.json", "0 warnings", "models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"},
        {"configs/qwen15_study_0.5b.json", "2 warnings", "models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf"},
        {"configs/qwen15_study_135m.json", "2 warnings", "models/SmolLM2-135M-Instruct.Q4_1.gguf"}};
    for (int i = 0; i < 6; i++) {
        int have_qwen = access(qwen[i][2], R_OK) == 0;
        char *q[] = {"check", (char *)qwen[i][0]};
        char want[64], missing[160];
        snprintf(want, sizeof want, "%d problem%s, %s", !have_qwen, have_qwen ? "s" : "", qwen[i][1]);
        snprintf(missing, sizeof missing, "%s: No such file", qwen[i][2] + strlen("models/"));
        rc = test_run_command(cmd_data, 2, q, out, NULL, sizeof out);
        CHECK(tc, rc == !have_qwen && strstr(out, want) && (have_qwen || strstr(out, missing)),
              "%s (model %s): exit %d\n%s", qwen[i][0], have_qwen ? "present" : "absent", rc, out);
    }
    unsetenv("MODELS_DIR");
    unsetenv("LONGBENCH_DIR");
    char *fig[] = {"check", "configs/figure2.json"};
    rc = test_run_command(cmd_data, 2, fig, out, NULL, sizeof out);
    CHECK(tc, rc == 1 && strstr(out, "environment variable MODELS_DIR is not set") &&
                  strstr(out, "estimate Llama-3.1-8B-Instruct: ") && strstr(out, "estimate Qwen2.5-32B-Instruct: ") &&
                  strstr(out, "published averages") &&
                  strstr(out, "estimate: not measured on a GPU yet: scoring and selection on the device"),
          "figure2 without its variables still estimates, and says what its rates do not measure: %s", out);
}

/* estimate.h's formulas on a tiny shape, every number derived by hand:
 *   N=2 D=4 H=2 K=1 d=2 F=8 V=10 untied: P = 2·(4·2·2 + 2·4·1·2 + 2·2·4 + 3·4·8) = 288, P_out = 40,
 *   W = 2·(288 + 2·40) = 736 bytes, kv = 2·2·1·2·2 = 16 bytes per token, ix = 4·2·1 = 8.
 *   Device: 2e9 bytes; R_matrix 1000 FLOP/s, R_attention 500, R_weights 100 B/s, R_kv 50 B/s, c_view 1.5,
 *   R_observe 200, t_score 0.01 s, t_select 0.001 s. Sample L=10, q=2, G=4, keep {1, 0.5}, window 0:
 *   prefill: (2·288·10 + 2·40)/1000 + 2·2·2·2·10²/500 = 5.84 + 3.2 = 9.04 s (> 736/100 = 7.36 s)
 *   observe: no window; one compressed variant's keep-set over N·K·L = 20 entries: 0.02 s
 *   plan: fixed = 736 + 10·(48 + 32 + 80) + 768 MiB = 805,308,704; prefill cache 16·(10 + 2 + 4) = 256;
 *     variant 0.5 keeps 5: its step share 2·⌈12/256⌉·4·4 + 4·10 + 2·4 + 48·2 = 176; view pages(16·6 + 8·5) =
 *     2 MiB, copy pages(16·11) = 2 MiB: 2,097,328 either way; full 0; budget 2e9 − 805,308,704 − 256 −
 *     256 MiB = 926,255,584: one batch, copies (no more batches than views)
 *   feed: 2·328·2·2/1000 = 2.624 s; 736/100 + 16·15/50 = 7.36 + 4.8 = 12.16 s
 *   decode: 2·328·2/1000 = 1.312 s; 7.36 + 16·(15 + 2·(2 + 2))/50 = 7.36 + 7.36 = 14.72 s, × 4 steps = 58.88 s
 *   memory: 805,308,704 + 256 + 2,097,328 = 807,406,288 bytes
 *   With window 3 and 2 scorings, observe adds 2·N·L·H·d·D/200 = 2·2·10·2·2·4/200 = 3.2 s and
 *   2·N·H·w·L·0.01 = 2·2·2·3·10·0.01 = 2.4 s: 5.62 s.
 *   A third variant at 0.5 on a device of 1,076,744,416 bytes (budget 3,000,000: one variant per batch, full
 *   beside the first): batch {full, 0.5} as above, batch {0.5}: feed max(1.312, 7.36 + 16·5/50 = 8.96) s;
 *   decode 4 × max(0.656, 7.36 + 16·(5 + 4)/50 = 10.24) = 40.96 s; two keep-sets: 0.04 s.
 *   On 1.07e9 bytes the budget is negative: the sample does not fit. */
static void check_estimate(TestCounts *tc) {
    ModelConfig m = {.n_layers = 2, .d_model = 4, .n_heads = 2, .n_kv_heads = 1, .head_dim = 2, .d_ff = 8,
                     .vocab_size = 10};
    DeviceModel dev = {"test", 2e9, 1000, 500, 100, 50, 1.5, 200, 0.01, 0.001, "by hand", NULL};
    KvErr err = {{0}};
    Estimate e = {0};
    const double keep[] = {1.0, 0.5, 0.5};
    CHECK(tc, estimate_add(&e, &m, &dev, 10, 2, 4, keep, 2, 0, 0, &err) == 0, "%s", err.msg);
    CHECK(tc, fabs(estimate_weight_bytes(&m) - 736) < 1e-9 && fabs(estimate_kv_bytes_per_token(&m) - 16) < 1e-9,
          "W %g kv %g", estimate_weight_bytes(&m), estimate_kv_bytes_per_token(&m));
    CHECK(tc, fabs(e.prefill_s - 9.04) < 1e-9 && fabs(e.observe_s - 0.02) < 1e-9 && fabs(e.feed_s - 12.16) < 1e-9 &&
              fabs(e.decode_s - 58.88) < 1e-9,
          "times %.6f %.6f %.6f %.6f", e.prefill_s, e.observe_s, e.feed_s, e.decode_s);
    CHECK(tc, fabs(e.peak_bytes - 807406288.0) < 1e-3 && e.samples == 1 && e.longest_context == 10,
          "peak %.1f", e.peak_bytes);
    CHECK(tc, e.batches == 1 && e.most_batches == 1 && e.samples_copies == 1 && e.samples_unfit == 0 &&
                  e.longest_fit == 10,
          "batches %ld copies %ld unfit %ld", e.batches, e.samples_copies, e.samples_unfit);
    /* window probabilities: 4·w·L·H bytes on top */
    Estimate w = {0};
    estimate_add(&w, &m, &dev, 10, 2, 4, keep, 2, 3, 2, &err);
    CHECK(tc, fabs(w.peak_bytes - e.peak_bytes - 4.0 * 3 * 10 * 2) < 1e-3, "window adds %.1f",
          w.peak_bytes - e.peak_bytes);
    CHECK(tc, fabs(w.observe_s - 5.62) < 1e-9, "window 3, 2 scorings: observe %.6f", w.observe_s);
    /* two batches where the memory holds one variant beside the prefill's cache */
    DeviceModel tight = dev;
    tight.memory_bytes = 1076744416.0;
    Estimate t = {0};
    CHECK(tc, estimate_add(&t, &m, &tight, 10, 2, 4, keep, 3, 0, 0, &err) == 0, "%s", err.msg);
    CHECK(tc, t.batches == 2 && t.samples_unfit == 0 && fabs(t.feed_s - 21.12) < 1e-9 &&
                  fabs(t.decode_s - 99.84) < 1e-9 && fabs(t.observe_s - 0.04) < 1e-9 &&
                  fabs(t.peak_bytes - 807406288.0) < 1e-3,
          "two batches: %ld, feed %.6f decode %.6f observe %.6f peak %.1f", t.batches, t.feed_s, t.decode_s,
          t.observe_s, t.peak_bytes);
    tight.memory_bytes = 1.07e9;
    Estimate u = {0};
    estimate_add(&u, &m, &tight, 10, 2, 4, keep, 3, 0, 0, &err);
    CHECK(tc, u.samples_unfit == 1 && u.longest_fit == 0, "does not fit: %ld", u.samples_unfit);
    /* the longest context that fits: a sample of it fits, one token more does not (question and answer left out) */
    tight.memory_bytes = 1.2e9;
    for (int one = 0; one < 2; one++) {
        double L = estimate_max_context(&m, &tight, keep, 3, 0, one, &err);
        Estimate a = {0}, b = {0};
        estimate_add(&a, &m, &tight, (int)L, 0, 0, keep, 3, 0, 0, &err);
        estimate_add(&b, &m, &tight, (int)L + 1, 0, 0, keep, 3, 0, 0, &err);
        CHECK(tc, L > 10 && a.samples_unfit == 0 && (one ? a.most_batches == 1 && (b.most_batches != 1 || b.samples_unfit)
                                                        : b.samples_unfit == 1),
              "max context%s %.0f: fits %ld/%ld, batches %d/%d", one ? " (one batch)" : "", L, a.samples_unfit,
              b.samples_unfit, a.most_batches, b.most_batches);
    }
}

/* DuoAttention's head patterns: SmolLM2 has none shipped (a problem naming the key), a folder of another shape is a
 * problem naming both shapes, "none" is N/A; the figure2 config finds the shipped Llama and Mistral patterns and
 * estimates Qwen2.5-32B without its N/A DuoAttention cells (8 variants, the others 9). */
/* LongBench's middle truncation (target_tokens) caps the estimate's context: the shipped lcc sample 0 has 13,997
 * SmolLM2 tokens, so uncapped the estimate's longest would be about that; capped at 3,000 it is at most 3,000. */
static void check_longbench_cap(TestCounts *tc) {
    static char out[1 << 14];
    if (access("models/SmolLM2-135M-Instruct.Q4_1.gguf", R_OK) != 0) {
        SKIP(tc, "the LongBench cap: models/SmolLM2-135M-Instruct.Q4_1.gguf not found (make model)");
        return;
    }
    for (int capped = 0; capped < 2; capped++) {
        char config[1024];
        snprintf(config, sizeof config,
                 "{\"name\": \"cap\", \"models\": [{\"path\": \"models/SmolLM2-135M-Instruct.Q4_1.gguf\", "
                 "\"backend\": \"cuda\"}], \"datasets\": [{\"suite\": \"longbench\", \"tasks\": [\"lcc\"], "
                 "\"data_path\": \"datasets/assets/longbench/subsets\", \"first_n\": 1%s}], "
                 "\"policies\": [\"full\", \"snapkv\"], \"budgets\": [\"20%%\"]}",
                 capped ? ", \"target_tokens\": 3000" : "");
        data_check("cap.json", config, out, sizeof out);
        const char *at = strstr(out, "(longest ");
        int longest = at ? atoi(at + 9) : -1;
        CHECK(tc, capped ? longest > 0 && longest <= 3000 : longest > 10000, "%s: longest %d\n%s",
              capped ? "capped at 3000" : "uncapped", longest, out);
    }
}

static void check_duo(TestCounts *tc) {
    static char out[1 << 16], cfg[2048];
    const char *fmt = "{\"db\": \"%s/duo.db\", \"models\": [{\"path\": \"" SMOLLM "\"%s}],"
                      " \"datasets\": [{\"suite\": \"ruler\", \"n_samples\": 1, \"tasks\": [\"vt\"]}],"
                      " \"policies\": [\"full\", \"duoattention\"], \"budgets\": [\"20%%\"]}";
    snprintf(cfg, sizeof cfg, fmt, dir, "");
    int rc = data_check("duo_missing.json", cfg, out, sizeof out);
    CHECK(tc, rc == 1 && count(out, "problem: ") == 1 && strstr(out, "policy duoattention needs the model's DuoAttention") &&
                  strstr(out, "\"duo_attention_patterns\": FOLDER"),
          "no pattern: exit %d\n%s", rc, out);
    snprintf(cfg, sizeof cfg, fmt, dir,
             ", \"duo_attention_patterns\": \"policies/assets/duo_attention_patterns/Mistral-7B-Instruct-v0.3\"");
    rc = data_check("duo_shape.json", cfg, out, sizeof out);
    CHECK(tc, rc == 1 && count(out, "problem: ") == 1 && strstr(out, "has 32 layers x 8 kv-heads, the model 30 x 3"),
          "mis-shaped pattern: exit %d\n%s", rc, out);
    snprintf(cfg, sizeof cfg, fmt, dir, ", \"duo_attention_patterns\": \"none\"");
    rc = data_check("duo_na.json", cfg, out, sizeof out);
    CHECK(tc, rc == 0 && strstr(out, "duoattention N/A"), "N/A: exit %d\n%s", rc, out);
    char *fig[] = {"check", "configs/figure2.json"};
    test_run_command(cmd_data, 2, fig, out, NULL, sizeof out);
    CHECK(tc, strstr(out, "DuoAttention pattern policies/assets/duo_attention_patterns/Meta-Llama-3.1-8B-Instruct") &&
                  strstr(out, "Qwen2.5-32B-Instruct: duoattention N/A") &&
                  strstr(out, "estimate Llama-3.1-8B-Instruct: ") && strstr(out, "9 variants each") &&
                  strstr(out, "8 variants each"),
          "figure2 patterns and estimate:\n%s", out);
}

int main(void) {
    TestCounts tc = {"test_datacheck", 0, 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_datacheck_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_estimate(&tc);
    check_good(&tc);
    check_broken(&tc);
    check_hf_dirs(&tc);
    check_shipped(&tc);
    check_duo(&tc);
    check_longbench_cap(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
