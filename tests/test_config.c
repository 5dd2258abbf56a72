/* test_config.c — sweep configuration parsing: the expansion into variants, ${VAR} paths, and one clear error
 * (file + key) for every kind of bad input, plus the shipped configs/ files parse (with their variables set);
 * and the backend options' precedence (runs/util.h): flag over the model's "cpu" over the environment over
 * the default, each bad value named with where it came from. */
#include <stdlib.h>
#include <string.h>

#include "../runs/config.h"
#include "../runs/util.h"
#include "test.h"

static const char *GOOD =
    "{\"name\": \"t\", \"db\": \"${KVB_TEST_DIR}/x.db\",\n"
    " \"models\": [{\"path\": \"${KVB_TEST_DIR}/m.gguf\"}, {\"path\": \"synthetic:smollm2-135m\", \"name\": \"syn\",\n"
    "              \"tokenizer\": \"models/t.gguf\"}],\n"
    " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_1\", \"vt\"], \"target_tokens\": 1024,\n"
    "                \"n_samples\": 3, \"seed\": 7, \"ruler_sizing\": \"unit\"},\n"
    "              {\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [500, 1000], \"depths\": [0, 50, 100]}],\n"
    " \"policies\": [\"full\", \"streamingllm\", \"snapkv\", {\"name\": \"defensivekv\",\n"
    "              \"aggregations\": [\"mean\", \"max\", \"max+prior\", \"default\"], \"pool_kernel\": 7,\n"
    "               \"window\": 8}],\n"
    " \"budgets\": [\"20%\", 0.4],\n"
    " \"max_new_tokens\": 8, \"compress_question\": true, \"window\": 16, \"memory_limit\": \"8GiB\",\n"
    " \"decode_samples\": 6}\n";

/* Parses text and expects failure with every `want` substring in the message. */
static void expect_error(TestCounts *tc, const char *text, const char *want1, const char *want2) {
    RunConfig cfg;
    KvErr err = {{0}};
    int rc = config_parse(&cfg, "bad.json", text, &err);
    CHECK(tc, rc == -1, "accepted: %s", text);
    CHECK(tc, strstr(err.msg, "bad.json") != NULL, "message does not name the file: %s", err.msg);
    CHECK(tc, strstr(err.msg, want1) != NULL, "message lacks '%s': %s", want1, err.msg);
    if (want2) CHECK(tc, strstr(err.msg, want2) != NULL, "message lacks '%s': %s", want2, err.msg);
}

static const RunVariant *find(const RunConfig *cfg, const char *policy, const char *agg, const char *budget) {
    for (int i = 0; i < cfg->n_variants; i++) {
        const RunVariant *v = &cfg->variants[i];
        if (!strcmp(v->policy.name, policy) && (!agg || !strcmp(aggregation_name(v->policy.aggregation), agg)) &&
            !strcmp(v->budget_label, budget))
            return v;
    }
    return NULL;
}

static void test_good(TestCounts *tc) {
    RunConfig cfg;
    KvErr err = {{0}};
    setenv("KVB_TEST_DIR", "/data/k", 1);
    int rc = config_parse(&cfg, "good.json", GOOD, &err);
    CHECK(tc, rc == 0, "good config rejected: %s", err.msg);
    if (rc) return;
    CHECK(tc, !strcmp(cfg.name, "t") && !strcmp(cfg.db, "/data/k/x.db"), "name/db: %s %s", cfg.name, cfg.db);
    CHECK(tc, cfg.n_models == 2, "models: %d", cfg.n_models);
    CHECK(tc, !strcmp(cfg.models[0].path, "/data/k/m.gguf") && !strcmp(cfg.models[0].name, "m.gguf"),
          "model 0: %s %s", cfg.models[0].path, cfg.models[0].name);
    CHECK(tc, !strcmp(cfg.models[0].backend, "cpu") && !cfg.models[0].tokenizer, "model 0 defaults");
    CHECK(tc, !strcmp(cfg.models[1].name, "syn") && !strcmp(cfg.models[1].tokenizer, "models/t.gguf"), "model 1");
    CHECK(tc, cfg.n_datasets == 2 && cfg.datasets[0].n_tasks == 2 && cfg.datasets[0].seed == 7 &&
                  cfg.datasets[0].target_tokens == 1024 && cfg.datasets[0].n_samples == 3 &&
                  cfg.datasets[0].ruler_unit_sizing == 1 && cfg.datasets[1].ruler_unit_sizing == 0,
          "dataset 0");
    CHECK(tc, cfg.datasets[1].seed == 42 && cfg.datasets[1].n_lengths == 2 && cfg.datasets[1].lengths[1] == 1000 &&
                  cfg.datasets[1].n_depths == 3 && cfg.datasets[1].depths[1] == 50,
          "dataset 1");
    /* full once; streamingllm and snapkv × 2 budgets; defensivekv: mean, max, max+prior (default = max+prior
     * is a duplicate) × 2 budgets. */
    int want = 1 + 2 + 2 + 3 * 2;
    CHECK(tc, cfg.n_variants == want, "variants: %d, want %d", cfg.n_variants, want);
    const RunVariant *full = find(&cfg, "full", NULL, "full");
    CHECK(tc, full && full->budget.keep_fraction == 1.0, "full variant");
    const RunVariant *snap = find(&cfg, "snapkv", "mean", "20%");
    CHECK(tc, snap && snap->budget.keep_fraction == 0.2 && !strcmp(snap->params, "w=16,k=5"), "snapkv 20%%");
    CHECK(tc, find(&cfg, "snapkv", "mean", "40%") != NULL, "snapkv 40%% (from the number 0.4)");
    const RunVariant *def = find(&cfg, "defensivekv", "max", "40%");
    CHECK(tc, def && def->policy.pool_kernel == 7 && def->policy.window == 8 && !strcmp(def->params, "w=8,k=7"),
          "defensivekv pool kernel and window override");
    const RunVariant *stream = find(&cfg, "streamingllm", NULL, "20%");
    CHECK(tc, stream && !strcmp(stream->params, ""), "streamingllm takes no window parameters");
    CHECK(tc, cfg.max_new_tokens == 8 && cfg.compress_question == 1, "switches");
    CHECK(tc, cfg.memory_limit == 8589934592.0, "memory_limit \"8GiB\": %.0f", cfg.memory_limit);
    CHECK(tc, cfg.decode_samples == 6, "decode_samples 6: %d", cfg.decode_samples);
    config_free(&cfg);
}

static void test_errors(TestCounts *tc) {
    setenv("KVB_TEST_DIR", "/data/k", 1);
    unsetenv("KVB_UNSET_VAR");
    expect_error(tc, "{\"models\": [", "line 1", "not valid JSON");
    expect_error(tc, "{\n\n \"models\": [}", "line 3", NULL);
    expect_error(tc, "{\"modles\": []}", "unknown key 'modles'", "allowed:");
    expect_error(tc, "{\"models\": [{\"path\": 3}]}", "models[0].path", "expected a string");
    expect_error(tc, "{\"models\": [{\"path\": \"m\", \"cpu\": {\"decode\": \"quick\"}}]}",
                 "models[0].cpu.decode: decode 'quick': unknown decode path", NULL);
    expect_error(tc, "{\"models\": [{\"path\": \"m\", \"cpu\": {\"speed\": \"fast\"}}]}",
                 "models[0].cpu: unknown key 'speed'", "decode, cache, simd, fast_kernel");
    expect_error(tc, "{\"models\": [{\"path\": \"m\", \"cpu\": {\"simd\": 2}}]}", "models[0].cpu.simd",
                 "expected a string");
    expect_error(tc, "{\"models\": [{\"path\": \"m\", \"cpu\": \"fast\"}]}", "models[0].cpu", "expected an object");
    expect_error(tc, "{\"models\": [{\"name\": \"x\"}]}", "models[0].path", "missing");
    expect_error(tc, "{\"models\": [{\"path\": \"${KVB_UNSET_VAR}/m\"}]}", "models[0].path", "KVB_UNSET_VAR");
    expect_error(tc, "{\"models\": [{\"path\": \"m\", \"backend\": \"tpu\"}]}", "models[0].backend", NULL);
    expect_error(tc, "{\"models\": [{\"path\": \"a/m\"}, {\"path\": \"b/m\"}]}", "models[1]", "same name");
    const char *head = "{\"models\": [{\"path\": \"m\"}], ";
    char text[1024];
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"nope\"]}]}", head);
    expect_error(tc, text, "datasets[0].tasks[0]", "nope");
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"ruler\", \"tasks\": []}]}", head);
    expect_error(tc, text, "datasets[0].tasks", "non-empty array");
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"vt\"], \"ruler_sizing\": \"fine\"}]}",
             head);
    expect_error(tc, text, "datasets[0].ruler_sizing", "\"unit\"");
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"ruler_sizing\": \"unit\"}]}",
             head);
    expect_error(tc, text, "datasets[0].ruler_sizing", "ruler suite only");
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"vt\"], \"fraction\": 1.5}]}",
             head);
    expect_error(tc, text, "datasets[0].fraction", "out of range");
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"vt\"], \"n_samples\": 2.5}]}",
             head);
    expect_error(tc, text, "datasets[0].n_samples", "integer");
    snprintf(text, sizeof text, "%s\"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"depths\": [120]}]}",
             head);
    expect_error(tc, text, "datasets[0].depths[0]", NULL);
    const char *ds = "\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"vt\"]}], ";
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\", \"magic\"], \"budgets\": [\"20%%\"]}", head, ds);
    expect_error(tc, text, "policies[1]", "magic");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [\"150%%\"]}", head, ds);
    expect_error(tc, text, "budgets[0]", "150%");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [true]}", head, ds);
    expect_error(tc, text, "budgets[0]", "expected a budget");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"]}", head, ds);
    expect_error(tc, text, "budgets", "missing");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [0.2], \"aggregations\": [\"median\"]}",
             head, ds);
    expect_error(tc, text, "aggregations[0]", "median");
    snprintf(text, sizeof text, "%s%s\"policies\": [{\"name\": \"snapkv\", \"windw\": 3}], \"budgets\": [0.2]}", head,
             ds);
    expect_error(tc, text, "policies[0]", "unknown key 'windw'");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [0.2], \"compress_question\": 1}", head,
             ds);
    expect_error(tc, text, "compress_question", "true or false");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [0.2], \"max_new_tokens\": -1}", head,
             ds);
    expect_error(tc, text, "max_new_tokens", "out of range");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [0.2], \"memory_limit\": \"8XB\"}", head,
             ds);
    expect_error(tc, text, "memory_limit '8XB'", "8GiB");
    snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [0.2], \"memory_limit\": 0}", head, ds);
    expect_error(tc, text, "memory_limit", "number of bytes");
    const char *bad_joint[] = {"0", "4097", "2.5", "\"4\""};
    for (int i = 0; i < 4; i++) {
        snprintf(text, sizeof text, "%s%s\"policies\": [\"snapkv\"], \"budgets\": [0.2], \"decode_samples\": %s}",
                 head, ds, bad_joint[i]);
        expect_error(tc, text, "decode_samples", NULL);
    }

    RunConfig cfg;
    KvErr err = {{0}};
    CHECK(tc, config_load(&cfg, "tests/data/no_such_config.json", &err) == -1, "missing file accepted");
    CHECK(tc, strstr(err.msg, "no_such_config.json") != NULL, "missing file message: %s", err.msg);
}

/* Numbers past what their integer can hold are refused as out of range, before any conversion (converting them
 * is undefined behaviour: clang's -fsanitize=float-cast-overflow in `make sanitize` traps it). */
static void test_out_of_range(TestCounts *tc) {
    const char *head = "{\"models\": [{\"path\": \"m.gguf\"}], \"policies\": [\"snapkv\"], ";
    const char *ds = "\"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"vt\"]";
    static const struct { const char *dataset_extra, *top, *where, *want; } cases[] = {
        {"", "\"budgets\": [0.2], \"window\": 7e77", "window", "7e+77 is out of range [1, 1048576]"},
        {"", "\"budgets\": [0.2], \"window\": [7e77]", "window[0]", "7e+77 is out of range [1, 1048576]"},
        {"", "\"budgets\": [0.2], \"window\": [4, -1e300]", "window[1]", "out of range"},
        {"", "\"budgets\": [0.2], \"window\": [1.5]", "window[0]", "expected an integer"},
        {"", "\"budgets\": [0.2], \"window\": 2.5", "window", "expected an integer"},
        {", \"seed\": 1e30", "\"budgets\": [0.2]", "datasets[0].seed", "1e+30 is out of range"},
        {", \"seed\": 1e999", "\"budgets\": [0.2]", "datasets[0].seed", "inf is out of range"},
        {", \"n_samples\": 4294967296", "\"budgets\": [0.2]", "datasets[0].n_samples", "out of range"},
        {"", "\"budgets\": [0.2], \"max_new_tokens\": 1e300", "max_new_tokens", "out of range"},
        {"", "\"budgets\": [\"99999999999tok\"]", "budgets[0]", "out of range"},
        {"", "\"budgets\": [\"1e999tok\"]", "budgets[0]", "out of range"},
    };
    char text[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s%s%s}], %s}", head, ds, cases[i].dataset_extra, cases[i].top);
        expect_error(tc, text, cases[i].where, cases[i].want);
    }
    snprintf(text, sizeof text, "%s%s}], \"budgets\": [0.2], \"policies\": [{\"name\": \"snapkv\", \"window\": 1e20}]}",
             "{\"models\": [{\"path\": \"m.gguf\"}], ", ds);
    expect_error(tc, text, "policies[0].window", "out of range");
    snprintf(text, sizeof text,
             "%s\"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [500, 1e30]}], "
             "\"budgets\": [0.2]}", head);
    expect_error(tc, text, "datasets[0].lengths[1]", "context length out of range [1, 16777216]");
}

/* The shipped configs parse, with the variables they use pointing somewhere. */
static void test_shipped(TestCounts *tc) {
    static const char *files[] = {"configs/cpu_demo.json", "configs/paper_longbench_20.json",
                                  "configs/paper_longbench_40.json", "configs/paper_ruler4k_quick.json",
                                  "configs/ablation_aggregation.json", "configs/niah.json",
                                  "configs/paper_ruler4k_20.json", "configs/paper_ruler4k_40.json",
                                  "configs/paper_niah_20.json", "configs/paper_niah_40.json"};
    setenv("MODELS_DIR", "/models", 0);
    setenv("LONGBENCH_DIR", "/data/longbench", 0);
    setenv("RULER_QA_DIR", "/data/ruler_qa", 0);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        RunConfig cfg;
        KvErr err = {{0}};
        int rc = config_load(&cfg, files[i], &err);
        CHECK(tc, rc == 0, "%s: %s", files[i], err.msg);
        if (!rc) {
            CHECK(tc, cfg.n_variants > 0 && cfg.n_models > 0 && cfg.n_datasets > 0, "%s is empty", files[i]);
            config_free(&cfg);
        }
    }
}

/* A policy without aggregations (knorm, random) runs once per budget under a config's aggregations, while an
 * attention-scored one runs once per aggregation; naming an aggregation for it is an error. The shipped
 * baselines configs: full once and four policies at two budgets. */
static void test_no_aggregation(TestCounts *tc) {
    static const char *const text =
        "{\"name\": \"t\", \"models\": [{\"path\": \"m.gguf\"}],\n"
        " \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [500], \"depths\": [0]}],\n"
        " \"aggregations\": [\"mean\", \"max\", \"max+prior\"], \"policies\": [\"snapkv\", \"knorm\", \"random\"],\n"
        " \"budgets\": [\"20%\"]}\n";
    RunConfig cfg;
    KvErr err = {{0}};
    int rc = config_parse(&cfg, "t.json", text, &err);
    CHECK(tc, rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(tc, cfg.n_variants == 3 + 1 + 1, "variants: %d, want 5", cfg.n_variants);
        const RunVariant *knorm = find(&cfg, "knorm", "none", "20%");
        CHECK(tc, knorm && !strcmp(knorm->params, ""), "knorm: one variant, no window parameters");
        config_free(&cfg);
    }
    expect_error(tc,
                 "{\"name\": \"t\", \"models\": [{\"path\": \"m.gguf\"}], \"datasets\": [{\"suite\": \"niah\", "
                 "\"tasks\": [\"needle\"], \"lengths\": [500], \"depths\": [0]}], \"policies\": [{\"name\": \"knorm\", "
                 "\"aggregations\": [\"max\"]}], \"budgets\": [\"20%\"]}",
                 "knorm does not aggregate", NULL);
    /* observed-attention reads the attention sums of every prefill query, expected-attention the pre-RoPE query
     * statistics and kvzip a reconstruction pass, which the cuda backend does not observe: refused with one line naming the model, the policy and
     * the missing observation; the cpu backend runs them */
    static const char *const observing =
        "{\"name\": \"t\", \"models\": [{\"path\": \"m.gguf\"}, {\"path\": \"m.gguf\", \"name\": \"g\", "
        "\"backend\": \"%s\"}], \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [500], "
        "\"depths\": [0]}], \"policies\": [\"knorm\", \"%s\"], \"budgets\": [\"20%%\"]}";
    static const char *const needs[][2] = {
        {"observed-attention", "the attention sums of every prefill query"},
        {"expected-attention", "the mean and covariance of the prefill's queries before RoPE"},
        {"kvzip", "a reconstruction pass over the context (an observed forward on top of its cache)"}};
    for (int i = 0; i < 3; i++) {
        char text[512], want[256];
        snprintf(text, sizeof text, observing, "cuda", needs[i][0]);
        snprintf(want, sizeof want, "models[1] 'g': policy %s needs %s, which backend cuda does not observe",
                 needs[i][0], needs[i][1]);
        expect_error(tc, text, want, NULL);
        snprintf(text, sizeof text, observing, "cpu", needs[i][0]);
        rc = config_parse(&cfg, "t.json", text, &err);
        CHECK(tc, rc == 0 && cfg.n_variants == 2, "%s on the cpu backend: %s", needs[i][0], rc ? err.msg : "");
        if (!rc) config_free(&cfg);
    }
    static const char *const baselines[] = {"configs/cpu_study_baselines.json", "configs/qwen_study_baselines.json"};
    for (int i = 0; i < 2; i++) {
        rc = config_load(&cfg, baselines[i], &err);
        CHECK(tc, rc == 0, "%s: %s", baselines[i], err.msg);
        if (rc) continue;
        CHECK(tc, cfg.n_variants == 1 + 11 * 2, "%s: %d variants, want 23", baselines[i], cfg.n_variants);
        const RunVariant *pyramid = find(&cfg, "pyramidkv", "mean", "20%");
        CHECK(tc, pyramid && !strcmp(pyramid->params, "w=64,k=5"), "%s: pyramidkv at kvpress's window 64",
              baselines[i]);
        config_free(&cfg);
    }
}

static void test_backend_options(TestCounts *tc) {
    RunConfig cfg;
    KvErr err = {{0}};
    const char *text = "{\"models\": [{\"path\": \"m\", \"cpu\": {\"decode\": \"fast\", \"cache\": \"f16\"}}, "
                       "{\"path\": \"n\"}], \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"]}], "
                       "\"policies\": [\"full\"], \"budgets\": [\"20%\"]}";
    int parsed = config_parse(&cfg, "opt.json", text, &err) == 0;
    CHECK(tc, parsed, "%s", err.msg);
    if (!parsed) return;
    const RunModel *m = &cfg.models[0];
    CHECK(tc, !strcmp(m->cpu[BACKEND_OPT_DECODE], "fast") && !strcmp(m->cpu[BACKEND_OPT_CACHE], "f16") &&
                  !m->cpu[BACKEND_OPT_SIMD] && !m->cpu[BACKEND_OPT_FAST_KERNEL] && !cfg.models[1].cpu[0],
          "the \"cpu\" object read");
    BackendOptions o;
    const char *flags[BACKEND_N_OPTIONS] = {NULL, "f32", NULL, NULL};
    setenv("KVBENCH_DECODE", "exact", 1);
    setenv("KVBENCH_SIMD", "scalar", 1);
    CHECK(tc, util_backend_options(&o, flags, m->cpu, "opt.json: models[0]", &err) == 0 &&
                  o.decode == BACKEND_DECODE_FAST && o.cache == KV_ELEM_F32 && !strcmp(o.simd, "scalar") &&
                  !o.fast_kernel[0],
          "decode from the config over the environment, cache from the flag over the config, simd from the "
          "environment: %s", err.msg);
    CHECK(tc, util_backend_options(&o, NULL, cfg.models[1].cpu, "opt.json: models[1]", &err) == 0 &&
                  o.decode == BACKEND_DECODE_EXACT && !strcmp(o.simd, "scalar"),
          "a model without \"cpu\" takes the environment's");
    unsetenv("KVBENCH_DECODE");
    unsetenv("KVBENCH_SIMD");
    CHECK(tc, util_backend_options(&o, NULL, NULL, NULL, &err) == 0 && o.decode == BACKEND_DECODE_EXACT &&
                  o.cache == KV_ELEM_F32 && !o.simd[0] && !o.fast_kernel[0],
          "nothing named: the defaults");
    setenv("KVBENCH_FAST_KERNEL", "a-kernel-name-longer-than-sixteen", 1);
    CHECK(tc, util_backend_options(&o, NULL, NULL, NULL, &err) == -1 &&
                  strstr(err.msg, "KVBENCH_FAST_KERNEL: fast_kernel 'a-kernel-name-longer-than-sixtee...': unknown "
                                  "fast kernel"),
          "a bad environment value names the variable: %s", err.msg);
    unsetenv("KVBENCH_FAST_KERNEL");
    const char *bad_flags[BACKEND_N_OPTIONS] = {NULL, "f8", NULL, NULL};
    CHECK(tc, util_backend_flags_check(bad_flags, &err) == -1 &&
                  !strcmp(err.msg, "--cache: cache 'f8': unknown KV cache type (f32, the default, or f16)"),
          "a bad flag names the flag: %s", err.msg);
    CHECK(tc, util_backend_flag("--fast-kernel") == BACKEND_OPT_FAST_KERNEL && util_backend_flag("--decode") ==
                  BACKEND_OPT_DECODE && util_backend_flag("--fast_kernel") == -1 && util_backend_flag("decode") == -1,
          "the flags' spelling");
    config_free(&cfg);
}

int main(void) {
    TestCounts tc = {"test_config", 0, 0, 0};
    test_backend_options(&tc);
    test_good(&tc);
    test_errors(&tc);
    test_out_of_range(&tc);
    test_shipped(&tc);
    test_no_aggregation(&tc);
    return test_finish(&tc);
}
