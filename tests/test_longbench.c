/* test_longbench.c — LongBench v1 reading: the context / question texts of real multi_news and lcc records and of
 * schema fixtures equal Python's str.format on DefensiveKV's split templates (tests/reference/
 * gen_longbench_fixtures.py); task properties; data.zip read in place; pandas' subset rows
 * (tests/reference/gen_pandas_sample.py); middle truncation against a brute-force reference; bad input. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../datasets/dataset.h"
#include "../datasets/ds_internal.h"
#include "../engine/jsonfile.h"
#include "test.h"

#define LB_DIR "tests/data/longbench" /* TEST_DATA() is parenthesised, so no concatenation with it */
#define FIX_DIR LB_DIR "/fixtures"

static cJSON *load_json(const char *path) {
    KvErr err;
    cJSON *j = kv_read_json(path, &err);
    if (!j) fprintf(stderr, "%s\n", err.msg);
    return j;
}

static int open_task(Dataset **ds, const char *task, const char *path, DatasetOptions *o, KvErr *err) {
    char spec[128];
    snprintf(spec, sizeof spec, "longbench:%s", task);
    o->data_path = path;
    return dataset_open(ds, spec, o, err);
}

static void check_expected_prompts(TestCounts *tc, const cJSON *expected) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(expected, "prompts")) {
        const char *task = cJSON_GetObjectItem(e, "task")->valuestring;
        int row = cJSON_GetObjectItem(e, "row")->valueint;
        int real = !strcmp(task, "multi_news") || !strcmp(task, "lcc");
        DatasetOptions o = {0};
        Dataset *ds;
        KvErr err;
        Sample s;
        if (open_task(&ds, task, real ? LB_DIR : FIX_DIR, &o, &err) != 0 || dataset_get(ds, row, &s, &err) != 0) {
            CHECK(tc, 0, "%s[%d]: %s", task, row, err.msg);
            continue;
        }
        char id[64];
        snprintf(id, sizeof id, "longbench:%s:%d", task, row);
        CHECK(tc, !strcmp(s.id, id), "id %s", s.id);
        CHECK(tc, !strcmp(s.context, cJSON_GetObjectItem(e, "context")->valuestring), "%s[%d] context differs", task,
              row);
        CHECK(tc, !strcmp(s.question, cJSON_GetObjectItem(e, "question")->valuestring), "%s[%d] question '%s'", task,
              row, s.question);
        const cJSON *answers = cJSON_GetObjectItem(e, "answers"), *classes = cJSON_GetObjectItem(e, "all_classes");
        CHECK(tc, s.n_answers == cJSON_GetArraySize(answers), "%s answers", task);
        for (int a = 0; a < s.n_answers && a < cJSON_GetArraySize(answers); a++)
            CHECK(tc, !strcmp(s.answers[a], cJSON_GetArrayItem(answers, a)->valuestring), "%s answer %d", task, a);
        CHECK(tc, s.n_classes == (cJSON_IsArray(classes) ? cJSON_GetArraySize(classes) : 0), "%s classes", task);
        CHECK(tc, !strcmp(s.answer_prefix, "") && s.add_bos == 0 && s.depth_percent == -1, "%s fields", task);
        sample_free(&s);
        dataset_close(ds);
    }
}

static void check_task_properties(TestCounts *tc) {
    struct {
        const char *task, *dir, *metric, *domain;
        int max_new, chat, stop_nl, count;
    } want[] = {
        {"multi_news", LB_DIR, "rouge_l", "summarization", 512, 1, 0, 200},
        {"lcc", LB_DIR, "code_sim", "code", 64, 0, 0, 100},
        {"trec", FIX_DIR, "classification", "few-shot", 64, 0, 0, 3},
        {"samsum", FIX_DIR, "rouge_l", "few-shot", 128, 0, 1, 2},
        {"qasper", FIX_DIR, "qa_f1", "single-doc QA", 128, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        DatasetOptions o = {0};
        Dataset *ds;
        KvErr err;
        Sample s;
        if (open_task(&ds, want[i].task, want[i].dir, &o, &err) != 0 || dataset_get(ds, 0, &s, &err) != 0) {
            CHECK(tc, 0, "%s: %s", want[i].task, err.msg);
            continue;
        }
        CHECK(tc, dataset_count(ds) == want[i].count && dataset_skipped(ds) == 0, "%s count %d", want[i].task,
              dataset_count(ds));
        CHECK(tc, !strcmp(s.metric, want[i].metric) && !strcmp(s.domain, want[i].domain), "%s metric %s / %s",
              want[i].task, s.metric, s.domain);
        CHECK(tc, s.max_new_tokens == want[i].max_new && s.use_chat == want[i].chat, "%s max_new %d chat %d",
              want[i].task, s.max_new_tokens, s.use_chat);
        CHECK(tc, (s.stop_on_newline != NULL) == want[i].stop_nl, "%s stop on newline", want[i].task);
        CHECK(tc, !strcmp(s.suite, "longbench") && !strcmp(s.task, want[i].task) && s.note == NULL, "%s names",
              want[i].task);
        sample_free(&s);
        dataset_close(ds);
    }
}

/* The split halves are the official templates cut in two (qasper loses one space in DefensiveKV's copy). */
static void check_assets_consistent(TestCounts *tc) {
    cJSON *split = load_json("datasets/assets/longbench/defensivekv_split_prompts.json");
    cJSON *full = load_json("datasets/assets/longbench/dataset2prompt.json");
    CHECK(tc, split && full, "assets missing");
    if (!split || !full) return;
    const cJSON *t;
    int n = 0;
    cJSON_ArrayForEach(t, full) {
        const char *cp = cJSON_GetObjectItem(cJSON_GetObjectItem(split, "context_prompt"), t->string)->valuestring;
        const char *qp = cJSON_GetObjectItem(cJSON_GetObjectItem(split, "question_prompt"), t->string)->valuestring;
        char joined[8192];
        snprintf(joined, sizeof joined, "%s%s%s", cp, strcmp(t->string, "qasper") ? "" : " ", qp);
        CHECK(tc, !strcmp(joined, t->valuestring), "%s: halves differ from the template", t->string);
        n++;
    }
    CHECK(tc, n == 21, "21 templates, got %d", n);
    cJSON_Delete(split);
    cJSON_Delete(full);
}

/* A 211-byte archive whose member claims 3.9 GB (tests/reference/gen_zip_cases.py): refused as truncated, having
 * allocated only what inflated. The refusal runs in a child limited to 1 GiB of address space, where an
 * allocation at the claimed size would fail with "out of memory" instead (not under AddressSanitizer, whose
 * shadow memory needs more address space than that). */
static void check_claimed_size(TestCounts *tc) {
    const char *zip = "tests/data/fuzz/zip/claims_3_9gb.zip";
    int fds[2];
    CHECK(tc, pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
#ifndef __SANITIZE_ADDRESS__
#if defined(__has_feature)
#if !__has_feature(address_sanitizer)
        struct rlimit lim = {1L << 30, 1L << 30};
        setrlimit(RLIMIT_AS, &lim);
#endif
#else
        struct rlimit lim = {1L << 30, 1L << 30};
        setrlimit(RLIMIT_AS, &lim);
#endif
#endif
        DatasetOptions o = {0};
        Dataset *ds;
        KvErr err = {{0}};
        int rc = open_task(&ds, "trec", zip, &o, &err);
        if (rc == 0) dataset_close(ds);
        if (write(fds[1], err.msg, strlen(err.msg)) < 0) _exit(2);
        _exit(rc == 0 ? 1 : 0);
    }
    close(fds[1]);
    char msg[600] = "";
    ssize_t n = read(fds[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(tc, WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(msg, zip) && strstr(msg, "truncated") &&
                  strstr(msg, "3900000000 claimed"), "claimed size: status %d, '%s'", status, msg);
}

static void check_zip(TestCounts *tc) {
    const char *tasks[] = {"trec", "samsum", "qasper"};
    for (int t = 0; t < 3; t++) {
        DatasetOptions o = {0};
        Dataset *dz, *dd;
        KvErr err;
        if (open_task(&dz, tasks[t], LB_DIR "/data.zip", &o, &err) != 0) {
            CHECK(tc, 0, "zip %s: %s", tasks[t], err.msg);
            continue;
        }
        CHECK(tc, open_task(&dd, tasks[t], FIX_DIR, &o, &err) == 0, "%s", err.msg);
        CHECK(tc, dataset_count(dz) == dataset_count(dd), "zip count");
        for (int i = 0; i < dataset_count(dz); i++) {
            Sample a, b;
            CHECK(tc, dataset_get(dz, i, &a, &err) == 0 && dataset_get(dd, i, &b, &err) == 0, "%s", err.msg);
            CHECK(tc, !strcmp(a.context, b.context) && !strcmp(a.question, b.question) && !strcmp(a.id, b.id),
                  "zip and directory differ (%s %d)", tasks[t], i);
            sample_free(&a);
            sample_free(&b);
        }
        dataset_close(dz);
        dataset_close(dd);
    }
    DatasetOptions o = {0};
    Dataset *ds;
    KvErr err;
    CHECK(tc, open_task(&ds, "lcc", LB_DIR "/data.zip", &o, &err) != 0 && strstr(err.msg, "no member 'data/lcc.jsonl'"),
          "missing member: %s", err.msg);
    char fake[] = "/tmp/kvbench_notzipXXXXXX.zip";
    int fd = mkstemps(fake, 4);
    CHECK(tc, fd >= 0 && write(fd, "not a zip at all", 16) == 16, "temp file");
    close(fd);
    CHECK(tc, open_task(&ds, "trec", fake, &o, &err) != 0 && strstr(err.msg, "cannot open as a zip"), "not a zip: %s",
          err.msg);
    unlink(fake);
    CHECK(tc, open_task(&ds, "trec", LB_DIR "/multi_news.jsonl", &o, &err) != 0 && strstr(err.msg, "expected a directory"),
          "a plain file: %s", err.msg);
    check_claimed_size(tc);
}

static void check_subsets(TestCounts *tc, const cJSON *pandas) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(pandas, "cases")) {
        int n = cJSON_GetObjectItem(c, "n")->valueint;
        DatasetOptions o = {.fraction = cJSON_GetObjectItem(c, "frac")->valuedouble,
                            .seed = (unsigned long long)cJSON_GetObjectItem(c, "seed")->valueint};
        const cJSON *rows = cJSON_GetObjectItem(c, "rows");
        int *got, n_got;
        KvErr err;
        CHECK(tc, ds_subset_rows(n, &o, &got, &n_got, &err) == 0, "%s", err.msg);
        int same = n_got == cJSON_GetArraySize(rows);
        for (int i = 0; same && i < n_got; i++) same = got[i] == cJSON_GetArrayItem(rows, i)->valueint;
        CHECK(tc, same, "pandas rows differ for n=%d frac=%g (%d picked, pandas %d)", n, o.fraction, n_got,
              cJSON_GetArraySize(rows));
        free(got);
    }
    const char *tasks[] = {"multi_news", "lcc"};
    for (int t = 0; t < 2; t++) {
        DatasetOptions o = {.fraction = 0.1, .seed = 42};
        Dataset *ds;
        KvErr err;
        const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(pandas, "quick_run"), tasks[t]);
        CHECK(tc, open_task(&ds, tasks[t], LB_DIR, &o, &err) == 0, "%s", err.msg);
        CHECK(tc, dataset_count(ds) == cJSON_GetArraySize(rows), "%s quick-run size", tasks[t]);
        for (int i = 0; i < dataset_count(ds); i++) {
            Sample s;
            char id[64];
            snprintf(id, sizeof id, "longbench:%s:%d", tasks[t], cJSON_GetArrayItem(rows, i)->valueint);
            char built[64];
            CHECK(tc, dataset_get(ds, i, &s, &err) == 0 && !strcmp(s.id, id) && s.index == i, "%s quick-run %d: %s",
                  tasks[t], i, s.id);
            CHECK(tc, dataset_sample_id(ds, i, built, sizeof built, &err) == 0 && !strcmp(built, id), "id %s", built);
            sample_free(&s);
        }
        dataset_close(ds);
    }
    DatasetOptions o = {.first_n = 5};
    Dataset *ds;
    KvErr err;
    Sample s;
    CHECK(tc, open_task(&ds, "lcc", LB_DIR, &o, &err) == 0 && dataset_count(ds) == 5, "first_n");
    CHECK(tc, dataset_get(ds, 4, &s, &err) == 0 && !strcmp(s.id, "longbench:lcc:4"), "first_n ids");
    sample_free(&s);
    CHECK(tc, dataset_get(ds, 5, &s, &err) != 0 && strstr(err.msg, "out of range"), "index past the end: %s", err.msg);
    char id[64];
    CHECK(tc, dataset_sample_id(ds, -1, id, sizeof id, &err) != 0 && strstr(err.msg, "out of range"), "%s", err.msg);
    dataset_close(ds);
    o = (DatasetOptions){.fraction = 0.1, .seed = 1ull << 33};
    CHECK(tc, open_task(&ds, "lcc", LB_DIR, &o, &err) != 0 && strstr(err.msg, "below 2^32"), "%s", err.msg);
    o = (DatasetOptions){.fraction = 1.5};
    CHECK(tc, open_task(&ds, "lcc", LB_DIR, &o, &err) != 0 && strstr(err.msg, "outside [0, 1]"), "%s", err.msg);
}

static void check_truncation(TestCounts *tc, const cJSON *expected) {
    const cJSON *tr = cJSON_GetObjectItem(expected, "truncation");
    int limit = cJSON_GetObjectItem(tr, "limit")->valueint;
    DatasetOptions o = {.target_tokens = limit, .count_tokens = dataset_count_words};
    Dataset *ds;
    KvErr err;
    Sample s;
    CHECK(tc, open_task(&ds, "multi_news", LB_DIR, &o, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_get(ds, 0, &s, &err) == 0, "%s", err.msg);
    CHECK(tc, !strcmp(s.context, cJSON_GetObjectItem(tr, "context")->valuestring), "truncated context differs");
    int nc, nq;
    dataset_count_words(NULL, s.context, &nc, NULL);
    dataset_count_words(NULL, s.question, &nq, NULL);
    CHECK(tc, nc + nq <= limit, "%d + %d words over the limit %d", nc, nq, limit);
    CHECK(tc, s.note && strstr(s.note, "middle-truncated"), "note says truncated");
    sample_free(&s);
    dataset_close(ds);
    o.target_tokens = 100000; /* longer than the sample: untouched, no note */
    CHECK(tc, open_task(&ds, "multi_news", LB_DIR, &o, &err) == 0 && dataset_get(ds, 0, &s, &err) == 0, "%s", err.msg);
    CHECK(tc, s.note == NULL && strlen(s.context) > 10000, "untouched");
    sample_free(&s);
    dataset_close(ds);
    o.target_tokens = 12; /* the question alone (10 words) is more than half */
    CHECK(tc, open_task(&ds, "multi_news", LB_DIR, &o, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_get(ds, 0, &s, &err) != 0 && strstr(err.msg, "more than half"), "%s", err.msg);
    dataset_close(ds);
    o.count_tokens = NULL;
    CHECK(tc, open_task(&ds, "multi_news", LB_DIR, &o, &err) != 0 && strstr(err.msg, "token counter"), "%s", err.msg);
}

static void check_bad_input(TestCounts *tc) {
    DatasetOptions o = {0};
    Dataset *ds;
    KvErr err;
    CHECK(tc, open_task(&ds, "trec", FIX_DIR "/bad_json", &o, &err) != 0 && strstr(err.msg, "trec.jsonl:3:") &&
                  strstr(err.msg, "not a JSON object"),
          "malformed line: %s", err.msg);
    o.skip_bad_lines = 1;
    CHECK(tc, open_task(&ds, "trec", FIX_DIR "/bad_json", &o, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_count(ds) == 3 && dataset_skipped(ds) == 1, "skip: %d kept, %d skipped", dataset_count(ds),
          dataset_skipped(ds));
    Sample s;
    CHECK(tc, dataset_get(ds, 2, &s, &err) == 0 && !strcmp(s.id, "longbench:trec:3"), "ids keep file lines: %s", s.id);
    sample_free(&s);
    dataset_close(ds);
    o.skip_bad_lines = 0;
    CHECK(tc, open_task(&ds, "trec", FIX_DIR "/bad_utf8", &o, &err) != 0 && strstr(err.msg, "trec.jsonl:2:") &&
                  strstr(err.msg, "invalid UTF-8"),
          "bad UTF-8: %s", err.msg);
    CHECK(tc, open_task(&ds, "trec", FIX_DIR "/no_answers", &o, &err) != 0 && strstr(err.msg, "trec.jsonl:2:") &&
                  strstr(err.msg, "answers"),
          "no answers: %s", err.msg);
    CHECK(tc, open_task(&ds, "musique", FIX_DIR, &o, &err) != 0 && strstr(err.msg, "musique.jsonl: cannot open"),
          "missing task file: %s", err.msg);
    CHECK(tc, open_task(&ds, "trec", NULL, &o, &err) != 0 && strstr(err.msg, "needs a data path"), "%s", err.msg);
    CHECK(tc, open_task(&ds, "trec", "tests/data/nowhere", &o, &err) != 0 && strstr(err.msg, "no such file"), "%s",
          err.msg);
    CHECK(tc, open_task(&ds, "multifieldqa_zh", FIX_DIR, &o, &err) != 0 && strstr(err.msg, "unknown longbench task"),
          "Chinese tasks are not in the 16: %s", err.msg);
    CHECK(tc, dataset_open(&ds, "longbnch:trec", &o, &err) != 0 && strstr(err.msg, "unknown suite"), "%s", err.msg);
    CHECK(tc, dataset_open(&ds, "trec", &o, &err) != 0 && strstr(err.msg, "SUITE:TASK"), "%s", err.msg);
    CHECK(tc, dataset_task_known("longbench:repobench-p", &err) && !dataset_task_known("ruler:qa_3", &err) &&
                  dataset_task_known("niah:needle", &err),
          "task_known");
    /* invalid UTF-8 check itself: overlong, surrogate, truncated sequences */
    size_t bad = 0;
    CHECK(tc, ds_utf8_valid("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80", 14, &bad), "valid UTF-8");
    CHECK(tc, !ds_utf8_valid("a\xc0\xaf", 3, &bad) && bad == 1, "overlong");
    CHECK(tc, !ds_utf8_valid("ab\xed\xa0\x80", 5, &bad) && bad == 2, "surrogate");
    CHECK(tc, !ds_utf8_valid("abc\xe2\x80", 5, &bad) && bad == 3, "truncated");
}

int main(void) {
    TestCounts tc = {"test_longbench", 0, 0, 0};
    cJSON *expected = load_json(LB_DIR "/expected_prompts.json"), *pandas = load_json(LB_DIR "/pandas_sample.json");
    CHECK(&tc, expected && pandas, "reference files missing");
    if (expected && pandas) {
        check_expected_prompts(&tc, expected);
        check_task_properties(&tc);
        check_assets_consistent(&tc);
        check_zip(&tc);
        check_subsets(&tc, pandas);
        check_truncation(&tc, expected);
        check_bad_input(&tc);
    }
    cJSON_Delete(expected);
    cJSON_Delete(pandas);
    return test_finish(&tc);
}
