/* test_model_input.c — no crash on any model input.
 *
 * 1. A Hugging Face directory whose index names no shard ({"weight_map":{}}) or no shard for a tensor is refused
 *    by `kvbench info`, `generate` and `run` alike: non-zero exit, the first stderr line names the index.
 * 2. The corpus of nasty inputs in tests/data/fuzz/<target>/ (malformed JSON, wrong types, huge numbers, empty
 *    maps, truncated files, and what `make fuzz` found) replayed through the fuzz targets' own harness
 *    (tests/fuzz/fuzz_inputs.h): each input loads or is refused with one line naming the file; the seed_* files
 *    (the fixtures' own) load; every other index and run config is refused. Under `make sanitize` this is the
 *    deterministic half of the fuzzing. */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/err.h"
#include "../cli/commands.h"
#include "fuzz/fuzz_inputs.h"
#include "test.h"

static char out[16384], errs[16384];

/* Runs a subcommand; 1 when it failed (non-zero) and its first stderr line names `file` and says `needle`. */
static int refuses(int (*cmd)(int, char **), int argc, char **argv, const char *file, const char *needle) {
    int rc = test_run_command(cmd, argc, argv, out, errs, sizeof out);
    size_t first = strcspn(errs, "\n");
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)(first < sizeof line - 1 ? first : sizeof line - 1), errs);
    return rc != 0 && strstr(line, file) && strstr(line, needle);
}

static void test_commands(TestCounts *tc) {
    static const struct { const char *index, *needle; } cases[] = {
        {"{\"weight_map\":{}}", "weight_map names no tensor"},
        {"{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\"}}",
         "no shard holds tensor 'model.embed_tokens.weight'"},
    };
    char config[512], db[512], cfg_text[1024];
    snprintf(config, sizeof config, "%s/run.json", fuzz_dir);
    snprintf(db, sizeof db, "%s/run.db", fuzz_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[1400];
        const char *idx = cases[i].index;
        CHECK(tc, fuzz_input("index", (const uint8_t *)idx, strlen(idx), why, sizeof why) == 0, "%s", why);
        char *info[] = {fuzz_dir};
        CHECK(tc, refuses(cmd_info, 1, info, "model.safetensors.index.json", cases[i].needle), "info: rc, '%s'",
              errs);
        char *gen[] = {"--model", fuzz_dir, "--prompt", "hi", "--max-new", "2"};
        CHECK(tc, refuses(cmd_generate, 6, gen, "model.safetensors.index.json", cases[i].needle), "generate: '%s'",
              errs);
        snprintf(cfg_text, sizeof cfg_text,
                 "{\"db\": \"%s\", \"max_new_tokens\": 2, \"models\": [{\"path\": \"%s\", \"name\": \"bad\"}],\n"
                 " \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"], \"lengths\": [200],\n"
                 "   \"depths\": [50]}],\n"
                 " \"policies\": [\"full\"], \"budgets\": [\"100%%\"]}\n", db, fuzz_dir);
        FILE *f = fopen(config, "w");
        if (f) fputs(cfg_text, f), fclose(f);
        char *run[] = {config};
        CHECK(tc, refuses(cmd_run, 1, run, "model.safetensors.index.json", cases[i].needle), "run: '%s'", errs);
        unlink(config);
        unlink(db);
    }
}

/* Integers on the command line past what they may be: exit 2, "out of range" (strtol's saturation and a narrowing
 * to int used to pass them on or call them "not an integer"). */
static void test_command_numbers(TestCounts *tc) {
    char *gen[] = {"--model", "m", "--prompt", "p", "--max-new", "99999999999999999999"};
    CHECK(tc, test_run_command(cmd_generate, 6, gen, out, errs, sizeof out) == 2 &&
                  strstr(errs, "--max-new is out of range [1, 1000000]"), "generate --max-new: %s", errs);
    char *run[] = {"tests/data/no-such-config.json", "--limit", "4294967297"};
    CHECK(tc, test_run_command(cmd_run, 3, run, out, errs, sizeof out) == 2 &&
                  strstr(errs, "--limit '4294967297': out of range [1, 100000000]"), "run --limit: %s", errs);
    char *sel[] = {"--model", "m", "--file", "f", "--policy", "snapkv", "--budget", "20%", "--window", "1e3"};
    CHECK(tc, test_run_command(cmd_select, 10, sel, out, errs, sizeof out) == 2 &&
                  strstr(errs, "--window '1e3': expected a whole number"), "select --window 1e3: %s", errs);
    sel[9] = "2147483648";
    CHECK(tc, test_run_command(cmd_select, 10, sel, out, errs, sizeof out) == 2 &&
                  strstr(errs, "--window '2147483648': out of range [1, 1048576]"), "select --window: %s", errs);
    sel[7] = "99999999999tok";
    sel[9] = "8";
    CHECK(tc, test_run_command(cmd_select, 10, sel, out, errs, sizeof out) == 2 && strstr(errs, "out of range"),
          "select --budget 99999999999tok: %s", errs);
    char *slurm[] = {"tests/data/no-such-config.json", "--shards", "18446744073709551617"};
    CHECK(tc, test_run_command(cmd_slurm, 3, slurm, out, errs, sizeof out) == 2 &&
                  strstr(errs, "--shards: '18446744073709551617' is out of range [1, 100000]"), "slurm: %s", errs);
}

static void replay(TestCounts *tc, const char *target, int others_refused) {
    char dir[256], path[600];
    snprintf(dir, sizeof dir, "tests/data/fuzz/%s", target);
    DIR *d = opendir(dir);
    CHECK(tc, d != NULL, "no corpus %s", dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        KvErr err;
        size_t len = 0;
        char *data = kv_read_file(path, &len, &err), why[1400] = "";
        if (!data) {
            CHECK(tc, 0, "%s", err.msg);
            continue;
        }
        int r = fuzz_input(target, (const uint8_t *)data, len, why, sizeof why);
        free(data);
        int seed = !strncmp(e->d_name, "seed_", 5);
        CHECK(tc, r >= 0, "%s: %s", path, why);
        if (seed) CHECK(tc, r == 1, "%s: the fixture's own file should load", path);
        else if (others_refused) CHECK(tc, r == 0, "%s: accepted", path);
        n++;
    }
    if (d) closedir(d);
    printf("test_model_input: %s: %d inputs replayed\n", target, n);
}

int main(void) {
    TestCounts tc = {"test_model_input", 0, 0, 0};
    CHECK(&tc, fuzz_make_dir() == 0, "cannot make a copy of %s", FUZZ_FIXTURE);
    test_commands(&tc);
    test_command_numbers(&tc);
    replay(&tc, "index", 1);
    replay(&tc, "tokenizer_config", 0);
    replay(&tc, "config_json", 0);
    replay(&tc, "run_config", 1);
    replay(&tc, "gguf_tokenizer", 0);
    replay(&tc, "gguf_tensors", 0);
    replay(&tc, "tokenizer_json", 0);
    replay(&tc, "spm_model", 0);
    replay(&tc, "results_db", 0);
    replay(&tc, "zip", 0);
    return test_finish(&tc);
}
