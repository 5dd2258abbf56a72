/* test_data_cmd.c — `kvbench data list / show` (output and exit codes for good and bad arguments), and the
 * datasets with the real Llama-3.1 tokenizer (tests/data/tokenizers/llama3.1): RULER niah_multikey_3 token
 * lengths against the real RULER-4096 file's recorded lengths (within 5%), every RULER task and a NIAH cell
 * within budget and under a second per sample, LongBench middle truncation to a token limit. */
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../datasets/dataset.h"
#include "../engine/tokenizer.h"
#include "../cli/commands.h"
#include "test.h"

#define LLAMA3 "tests/data/tokenizers/llama3.1"

/* Runs cmd_data with stdout and stderr captured into out (NUL-terminated, truncated to size). */
static int run_data(char *out, size_t size, int argc, char **argv) {
    return test_run_command(cmd_data, argc, argv, out, NULL, size);
}

static void check_cli(TestCounts *tc) {
    static char out[1 << 20];
    char *list[] = {"list"};
    CHECK(tc, run_data(out, sizeof out, 1, list) == 0 && strstr(out, "ruler:qa_2") &&
                  strstr(out, "longbench:repobench-p") && strstr(out, "niah:needle"),
          "list");
    int lines = 0;
    for (char *p = out; (p = strchr(p, '\n')); p++) lines++;
    CHECK(tc, lines == 31, "header + 16 + 13 + 1 tasks, got %d lines", lines);
    char *show[] = {"show", "longbench:multi_news", "--index", "3", "--data", "tests/data/longbench"};
    CHECK(tc, run_data(out, sizeof out, 6, show) == 0 && strstr(out, "id:             longbench:multi_news:3") &&
                  strstr(out, "----- question (56 bytes) -----\nNow, write a one-page summary of all the news.\n\nSummary:"),
          "show longbench: %.300s", out);
    char *tok[] = {"show", "ruler:vt", "--index", "1", "--model", LLAMA3, "--samples", "2"};
    CHECK(tc, run_data(out, sizeof out, 8, tok) == 0 && strstr(out, " tokens\n") && strstr(out, "answer[4]:"),
          "show with a tokenizer: %.300s", out);
    struct {
        int argc, rc;
        char *argv[8];
        const char *says;
    } bad[] = {
        {0, 2, {0}, "usage: kvbench data list"},
        {1, 2, {"shw"}, "usage"},
        {2, 2, {"show", "ruler:vt"}, "needs --index"},
        {4, 2, {"show", "ruler:vt", "--index", "x1"}, "non-negative whole number, not 'x1'"},
        {4, 2, {"show", "ruler:vt", "--index", "-3"}, "not '-3'"},
        {4, 2, {"show", "ruler:vt", "--index", "99999999999999999999"}, "out of range [0, 1073741824]"},
        {6, 2, {"show", "ruler:vt", "--index", "0", "--samples", "4294967296"}, "'4294967296' is out of range"},
        {5, 2, {"show", "ruler:vt", "--index", "0", "--bogus"}, "unknown option '--bogus'"},
        {5, 2, {"show", "ruler:vt", "--index", "0", "--data"}, "a value is missing after '--data'"},
        {6, 2, {"show", "ruler:vt", "--index", "0", "--fraction", "1.5"}, "in [0, 1], not '1.5'"},
        {4, 1, {"show", "ruler:vt2", "--index", "0"}, "unknown ruler task 'vt2'"},
        {4, 1, {"show", "ruler:vt", "--index", "500"}, "index 500 is out of range"},
        {6, 1, {"show", "ruler:vt", "--index", "0", "--model", "tests/data/no-such-model"}, "no-such-model"},
        {6, 1, {"show", "longbench:lcc", "--index", "0", "--data", "tests/data/longbench/data.zip"}, "no member"},
        {6, 1, {"show", "ruler:vt", "--index", "0", "--target-tokens", "60"}, "shorter than the task's template"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run_data(out, sizeof out, bad[i].argc, bad[i].argv);
        CHECK(tc, rc == bad[i].rc && strstr(out, bad[i].says), "bad arguments case %zu: exit %d (want %d): %s", i, rc,
              bad[i].rc, out);
    }
}

static int count_llama(void *user, const char *text, int *n_tokens, KvErr *err) {
    TokenIds ids = {0};
    int rc = tokenizer_encode(user, text, strlen(text), 1, &ids, err);
    *n_tokens = ids.n;
    ids_free(&ids);
    return rc;
}

/* The "length" field of a RULER JSONL line (tokens of input + the 128 tokens to generate). */
static int json_length(const char *line) {
    const char *p = strstr(line, "\"length\": ");
    return p ? atoi(p + 10) : -1;
}

static void check_real_tokenizer(TestCounts *tc) {
    Tokenizer *tok;
    KvErr err;
    if (tokenizer_load(&tok, LLAMA3, &err) != 0) {
        CHECK(tc, 0, "%s", err.msg);
        return;
    }
    DatasetOptions o = {.count_tokens = count_llama, .count_user = tok, .seed = 42, .n_samples = 4};
    Dataset *ds;
    FILE *f = fopen(TEST_DATA("ruler/niah_multikey_3_4096_head.jsonl"), "r");
    static char line[1 << 16];
    CHECK(tc, f && dataset_open(&ds, "ruler:niah_multikey_3", &o, &err) == 0, "%s", err.msg);
    for (int i = 0; f && i < 4 && fgets(line, sizeof line, f); i++) {
        Sample s;
        int a, b, c;
        CHECK(tc, dataset_get(ds, i, &s, &err) == 0, "%s", err.msg);
        count_llama(tok, s.context, &a, &err);
        count_llama(tok, s.question, &b, &err);
        count_llama(tok, s.answer_prefix, &c, &err);
        int real = json_length(line) - 128;
        CHECK(tc, abs(a + b + c - real) <= real / 20, "Llama-3.1 tokens %d vs the real file's %d", a + b + c, real);
        sample_free(&s);
    }
    if (f) fclose(f);
    dataset_close(ds);
    static const char *tasks[] = {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                                  "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery",
                                  "vt", "cwe", "fwe", "qa_1", "qa_2"};
    for (int t = 0; t < 13; t++) {
        char spec[64];
        snprintf(spec, sizeof spec, "ruler:%s", tasks[t]);
        o.n_samples = 1;
        clock_t t0 = clock();
        Sample s;
        if (dataset_open(&ds, spec, &o, &err) != 0 || dataset_get(ds, 0, &s, &err) != 0) {
            CHECK(tc, 0, "%s: %s", spec, err.msg);
            continue;
        }
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        int a, b, c;
        count_llama(tok, s.context, &a, &err);
        count_llama(tok, s.question, &b, &err);
        count_llama(tok, s.answer_prefix, &c, &err);
        /* parts tokenized separately can differ from the whole by a token at each seam */
        CHECK(tc, a + b + c <= 4096 - s.max_new_tokens + 2 && a + b + c > 2000, "%s: %d tokens", spec, a + b + c);
        CHECK(tc, secs < 1.0, "%s: %.2f s to open and build one sample", spec, secs);
        sample_free(&s);
        dataset_close(ds);
    }
    const int lengths[] = {2000};
    const double depths[] = {50};
    DatasetOptions n = {.count_tokens = count_llama, .count_user = tok, .lengths = lengths, .n_lengths = 1,
                        .depths = depths, .n_depths = 1};
    Sample s;
    CHECK(tc, dataset_open(&ds, "niah:needle", &n, &err) == 0 && dataset_get(ds, 0, &s, &err) == 0, "%s", err.msg);
    int a = 0, b = 0;
    count_llama(tok, s.context, &a, &err);
    count_llama(tok, s.question, &b, &err);
    CHECK(tc, a + b <= 2000 && a + b > 1750, "niah 2000: %d + %d tokens", a, b);
    sample_free(&s);
    dataset_close(ds);
    DatasetOptions l = {.count_tokens = count_llama, .count_user = tok, .target_tokens = 1500,
                        .data_path = "tests/data/longbench"};
    CHECK(tc, dataset_open(&ds, "longbench:multi_news", &l, &err) == 0 && dataset_get(ds, 0, &s, &err) == 0, "%s",
          err.msg);
    count_llama(tok, s.context, &a, &err);
    count_llama(tok, s.question, &b, &err);
    CHECK(tc, a + b <= 1500 + 1 && a + b >= 1490 && s.note, "longbench truncated to %d + %d tokens", a, b);
    sample_free(&s);
    dataset_close(ds);
    tokenizer_free(tok);
}

int main(void) {
    TestCounts tc = {"test_data_cmd", 0, 0, 0};
    check_cli(&tc);
    check_real_tokenizer(&tc);
    return test_finish(&tc);
}
