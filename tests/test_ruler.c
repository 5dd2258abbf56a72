/* test_ruler.c — the RULER-4K generator: every task builds, fits its token budget, answers are in the context,
 * kvpress's split holds, samples are reproducible; niah_multikey_3 against the real RULER file (identical
 * structure once UUIDs are masked, length within 5% with the same counter); qa_1 / qa_2 from SQuAD / HotpotQA
 * files and the labelled substitute without them; bad input; time per sample.
 * Counters: a Llama-like approximation (letter runs of 4, digit runs of 3, one per other symbol; within 4% of
 * the real file's Llama-3 lengths) and whitespace words. */
#include <ctype.h>
#include <string.h>
#include <time.h>

#include "../datasets/dataset.h"
#include "test.h"

static int approx_llama(void *user, const char *text, int *n_tokens, KvErr *err) {
    (void)user;
    (void)err;
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        size_t run = 0;
        if (isalpha(*p)) {
            while (isalpha(p[run])) run++;
            n += (int)(run + 3) / 4;
        } else if (isdigit(*p)) {
            while (isdigit(p[run])) run++;
            n += (int)(run + 2) / 3;
        } else {
            run = 1;
            n += !isspace(*p);
        }
        p += run;
    }
    *n_tokens = n;
    return 0;
}

static char *joined(const Sample *s) {
    size_t a = strlen(s->context), b = strlen(s->question), c = strlen(s->answer_prefix);
    char *t = malloc(a + b + c + 1);
    memcpy(t, s->context, a);
    memcpy(t + a, s->question, b);
    memcpy(t + a + b, s->answer_prefix, c + 1);
    return t;
}

static int is_hex(int c) { return isdigit(c) || (c >= 'a' && c <= 'f'); }

/* Replaces every 8-4-4-4-12 hex UUID by "U" in place. */
static void mask_uuids(char *s) {
    static const int GROUPS[5] = {8, 4, 4, 4, 12};
    char *w = s;
    for (char *p = s; *p;) {
        char *q = p;
        int ok = 1;
        for (int g = 0; g < 5 && ok; g++) {
            for (int k = 0; k < GROUPS[g] && ok; k++, q++) ok = is_hex((unsigned char)*q);
            if (ok && g < 4) ok = *q++ == '-';
        }
        if (ok) {
            *w++ = 'U';
            p = q;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
}

/* The "input" string of a JSONL line (the real records' inputs have no escaped quotes beyond \" and \n). */
static char *json_input(const char *line) {
    const char *p = strstr(line, "\"input\": \"");
    if (!p) return NULL;
    p += 10;
    char *out = malloc(strlen(p) + 1), *w = out;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\') {
            p++;
            *w++ = *p == 'n' ? '\n' : *p;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return out;
}

static void check_against_real_file(TestCounts *tc) {
    FILE *f = fopen(TEST_DATA("ruler/niah_multikey_3_4096_head.jsonl"), "r");
    CHECK(tc, f != NULL, "real RULER fixture missing");
    if (!f) return;
    static char line[1 << 16];
    DatasetOptions o = {.count_tokens = approx_llama, .seed = 7, .n_samples = 4, .target_tokens = 4096};
    Dataset *ds;
    KvErr err;
    CHECK(tc, dataset_open(&ds, "ruler:niah_multikey_3", &o, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 4 && fgets(line, sizeof line, f); i++) {
        char *real = json_input(line);
        Sample s;
        CHECK(tc, dataset_get(ds, i, &s, &err) == 0, "%s", err.msg);
        char *mine = joined(&s);
        int n_real, n_mine;
        approx_llama(NULL, real, &n_real, NULL);
        approx_llama(NULL, mine, &n_mine, NULL);
        CHECK(tc, abs(n_mine - n_real) <= n_real / 20, "length %d vs real %d (5%%)", n_mine, n_real);
        CHECK(tc, n_mine <= 4096 - 128, "over budget: %d", n_mine);
        mask_uuids(real);
        mask_uuids(mine);
        CHECK(tc, !strcmp(real, mine), "structure differs from the real RULER record %d", i);
        CHECK(tc, s.n_answers == 1 && strlen(s.answers[0]) == 36 && s.answers[0][14] == '4', "uuid v4 answer");
        CHECK(tc, !strcmp(s.metric, "string_match_all") && s.max_new_tokens == 128, "metric %s", s.metric);
        free(real);
        free(mine);
        sample_free(&s);
    }
    dataset_close(ds);
    fclose(f);
}

static const char *TASKS[] = {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                              "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery",
                              "vt", "cwe", "fwe", "qa_1", "qa_2"};

static void check_every_task(TestCounts *tc) {
    for (int t = 0; t < 13; t++) {
        char spec[64];
        snprintf(spec, sizeof spec, "ruler:%s", TASKS[t]);
        DatasetOptions o = {.count_tokens = approx_llama, .seed = 42, .n_samples = 3};
        Dataset *ds;
        KvErr err;
        if (dataset_open(&ds, spec, &o, &err) != 0) {
            CHECK(tc, 0, "%s: %s", spec, err.msg);
            continue;
        }
        CHECK(tc, dataset_count(ds) == 3, "%s count", spec);
        for (int i = 0; i < 3; i++) {
            Sample s, again;
            clock_t t0 = clock();
            if (dataset_get(ds, i, &s, &err) != 0) {
                CHECK(tc, 0, "%s[%d]: %s", spec, i, err.msg);
                continue;
            }
            double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
            CHECK(tc, secs < 0.5, "%s: %.3f s for one sample", spec, secs);
            char *all = joined(&s);
            int n, budget = 4096 - s.max_new_tokens;
            approx_llama(NULL, all, &n, NULL);
            /* fits, and fills at least half the budget (RULER's coarse steps leave some room) */
            CHECK(tc, n <= budget && n > budget / 2, "%s: %d tokens for budget %d", spec, n, budget);
            char id[128];
            CHECK(tc, dataset_sample_id(ds, i, id, sizeof id, &err) == 0 && !strcmp(id, s.id), "%s: id %s", spec, id);
            CHECK(tc, s.n_answers > 0, "%s: no answers", spec);
            for (int a = 0; a < s.n_answers; a++)
                CHECK(tc, strstr(s.context, s.answers[a]) != NULL, "%s: answer '%s' not in the context", spec,
                      s.answers[a]);
            int niah = !strncmp(TASKS[t], "niah", 4);
            CHECK(tc, !strncmp(s.answer_prefix, niah ? "The special magic" : "Answer:", niah ? 17 : 7),
                  "%s: answer prefix '%s'", spec, s.answer_prefix);
            CHECK(tc, niah ? !strncmp(s.question, "What ", 5) : strstr(s.question, "Question") != NULL,
                  "%s: question '%s'", spec, s.question);
            CHECK(tc, s.context[strlen(s.context) - 1] == '\n', "%s: context should end at the question's line", spec);
            CHECK(tc, s.use_chat == 1 && s.target_tokens == 4096, "%s: chat/target", spec);
            CHECK(tc, dataset_get(ds, i, &again, &err) == 0 && !strcmp(again.context, s.context) &&
                          !strcmp(again.question, s.question),
                  "%s: not reproducible", spec);
            if (t >= 11) {
                CHECK(tc, s.note && strstr(s.note, "substitute") && strstr(s.task, "_substitute"),
                      "%s: the substitute must say so (task %s)", spec, s.task);
            } else {
                CHECK(tc, s.note == NULL && !strcmp(s.task, TASKS[t]), "%s: task %s", spec, s.task);
            }
            if (!strcmp(TASKS[t], "niah_single_1"))
                CHECK(tc, strstr(s.context, "A special magic number is hidden") && strstr(s.question, "What is the"),
                      "singular template");
            if (!strcmp(TASKS[t], "niah_multivalue"))
                CHECK(tc, strstr(s.question, "What are all the special magic numbers") && s.n_answers == 4,
                      "plural template");
            if (!strcmp(TASKS[t], "niah_multiquery"))
                CHECK(tc, s.n_answers == 4 && strstr(s.question, ", and "), "four queried keys");
            if (!strcmp(TASKS[t], "vt")) {
                char chain[64];
                snprintf(chain, sizeof chain, "VAR %s = VAR %s ", s.answers[1], s.answers[0]);
                CHECK(tc, s.n_answers == 5 && strstr(s.context, chain), "vt chain '%s'", chain);
                CHECK(tc, strstr(s.answer_prefix, "5 variables are assgined"), "vt prefix '%s'", s.answer_prefix);
            }
            if (!strcmp(TASKS[t], "cwe")) {
                /* a common word is repeated 30 times in the task list, after the 10x few-shot example */
                const char *list = strrchr(s.context, '\n') ? strstr(s.context, "Memorize the ones") : NULL;
                list = list ? strstr(list + 1, "Memorize the ones") : NULL;
                int reps = 0;
                char word[80];
                snprintf(word, sizeof word, ". %s ", s.answers[0]);
                for (const char *p = list; p && (p = strstr(p, word)); p++) reps++;
                CHECK(tc, s.n_answers == 10 && reps >= 29 && reps <= 30, "cwe: '%s' x%d", s.answers[0], reps);
            }
            free(all);
            sample_free(&again);
            sample_free(&s);
        }
        dataset_close(ds);
    }
}

static void check_seeds_and_subsets(TestCounts *tc) {
    DatasetOptions a = {.count_tokens = dataset_count_words, .seed = 1, .n_samples = 500, .fraction = 0.1};
    DatasetOptions b = a;
    b.seed = 2;
    Dataset *da, *db;
    KvErr err;
    CHECK(tc, dataset_open(&da, "ruler:niah_single_2", &a, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_open(&db, "ruler:niah_single_2", &b, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_count(da) == 50, "10%% of 500 is %d", dataset_count(da));
    Sample sa, sb;
    CHECK(tc, dataset_get(da, 0, &sa, &err) == 0 && dataset_get(db, 0, &sb, &err) == 0, "%s", err.msg);
    CHECK(tc, strcmp(sa.answers[0], sb.answers[0]) != 0, "different seeds give different needles");
    /* seed 1's quick-run subset starts at numpy RandomState(1).permutation(500)[0] = 304 */
    CHECK(tc, !strcmp(sa.id, "ruler:niah_single_2:304"), "subset id %s", sa.id);
    sample_free(&sa);
    sample_free(&sb);
    dataset_close(da);
    dataset_close(db);
}

static void check_qa_files(TestCounts *tc) {
    const char *specs[] = {"ruler:qa_1", "ruler:qa_2"};
    const char *paths[] = {TEST_DATA("ruler/squad_tiny.json"), TEST_DATA("ruler/hotpotqa_tiny.json")};
    for (int k = 0; k < 2; k++) {
        DatasetOptions o = {.count_tokens = approx_llama, .seed = 3, .n_samples = 5, .target_tokens = 1024,
                            .data_path = paths[k]};
        Dataset *ds;
        KvErr err;
        if (dataset_open(&ds, specs[k], &o, &err) != 0) {
            CHECK(tc, 0, "%s: %s", specs[k], err.msg);
            continue;
        }
        Sample s;
        CHECK(tc, dataset_get(ds, 1, &s, &err) == 0, "%s", err.msg);
        CHECK(tc, s.note == NULL && !strcmp(s.task, k ? "qa_2" : "qa_1"), "real qa task %s", s.task);
        CHECK(tc, !strcmp(s.metric, "string_match_part") && s.max_new_tokens == 32, "qa metric");
        CHECK(tc, strstr(s.context, "Document 1:\n") && strstr(s.context, s.answers[0]), "gold document present");
        /* SQuAD question 1 (answerable, file order) is about City01, with both answer texts */
        if (k == 0) CHECK(tc, strstr(s.question, "City01") && s.n_answers == 2, "squad question '%s'", s.question);
        else CHECK(tc, strstr(s.question, "place 1") && !strcmp(s.answers[0], "Blue1"), "hotpot '%s'", s.question);
        sample_free(&s);
        dataset_close(ds);
    }
    DatasetOptions o = {.count_tokens = approx_llama, .n_samples = 50, .data_path = paths[1]};
    Dataset *ds;
    KvErr err;
    CHECK(tc, dataset_open(&ds, "ruler:qa_2", &o, &err) != 0 && strstr(err.msg, "5 answerable"),
          "too few questions must fail: %s", err.msg);
    o.data_path = TEST_DATA("ruler");
    CHECK(tc, dataset_open(&ds, "ruler:qa_1", &o, &err) != 0 && strstr(err.msg, "squad.json"),
          "a directory without SQuAD must say what it looked for: %s", err.msg);
}

static void check_bad_input(TestCounts *tc) {
    Dataset *ds;
    KvErr err;
    DatasetOptions o = {.count_tokens = approx_llama, .target_tokens = 150, .n_samples = 2};
    CHECK(tc, dataset_open(&ds, "ruler:niah_single_2", &o, &err) == 0, "%s", err.msg);
    Sample s;
    CHECK(tc, dataset_get(ds, 0, &s, &err) != 0 && strstr(err.msg, "ruler:niah_single_2:0: haystack: the target length is shorter than the task's template"),
          "short target: %s", err.msg);
    dataset_close(ds);
    o.target_tokens = 100;
    CHECK(tc, dataset_open(&ds, "ruler:niah_single_1", &o, &err) != 0 && strstr(err.msg, "no room"),
          "target below tokens_to_generate: %s", err.msg);
    o.target_tokens = 0;
    CHECK(tc, dataset_open(&ds, "ruler:niah_single_4", &o, &err) != 0 && strstr(err.msg, "unknown ruler task"),
          "unknown task: %s", err.msg);
    o.count_tokens = NULL;
    CHECK(tc, dataset_open(&ds, "ruler:vt", &o, &err) != 0 && strstr(err.msg, "token counter"), "%s", err.msg);
    o.count_tokens = approx_llama;
    o.assets_dir = "tests/data/no-such-assets";
    CHECK(tc, dataset_open(&ds, "ruler:vt", &o, &err) != 0 && strstr(err.msg, "no-such-assets"), "%s", err.msg);
}

int main(void) {
    TestCounts tc = {"test_ruler", 0, 0, 0};
    check_against_real_file(&tc);
    check_every_task(&tc);
    check_seeds_and_subsets(&tc);
    check_qa_files(&tc);
    check_bad_input(&tc);
    return test_finish(&tc);
}
