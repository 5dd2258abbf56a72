/* test_metrics.c — the metrics against their Python references.
 *
 * Recorded cases: every .jsonl file in tests/data/metrics/ (or the files given as arguments, or in $METRIC_CASES,
 * space-separated), one case a line {"metric", "task", "prediction", "answers", "all_classes", "expected"},
 * written by tests/reference/gen_metric_cases.py from LongBench's metrics, the `rouge` package and fuzzywuzzy
 * over difflib. Tolerance |C - Python| <= 1e-6 (the scores are short chains of the same double operations, so
 * in practice they agree to the last bit). Then hand-derived cases: the spec's table (datasets.md §1.6),
 * Unicode lower-casing, invalid UTF-8, the task averages and the bad inputs. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../metrics/metrics.h"
#include "../metrics/scorers.h"
#include "../cli/commands.h"
#include "test.h"

#define TOL 1e-6
#define MIN_CASES_PER_METRIC 200
#define SHOW_FAILURES 5

/* ---- recorded cases -------------------------------------------------------------------------------- */

/* Borrowed pointers into a cJSON array of strings; NULL (and n 0) for null. -1 if not an array of strings. */
static int string_list(const cJSON *item, const char ***out, int *n) {
    *out = NULL, *n = 0;
    if (!item || cJSON_IsNull(item)) return 0;
    if (!cJSON_IsArray(item)) return -1;
    *n = cJSON_GetArraySize(item);
    *out = calloc((size_t)*n + 1, sizeof **out);
    int i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) return free(*out), -1;
        (*out)[i] = e->valuestring;
    }
    return 0;
}

static void check_case_file(TestCounts *tc, const char *path, int *n_cases, double *seconds) {
    KvErr err;
    char *text = kv_read_file(path, NULL, &err);
    CHECK(tc, text != NULL, "%s", err.msg);
    if (!text) return;
    int line_no = 0, shown = 0, bad = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        cJSON *c = cJSON_Parse(line);
        const cJSON *metric = cJSON_GetObjectItemCaseSensitive(c, "metric");
        const cJSON *task = cJSON_GetObjectItemCaseSensitive(c, "task");
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(c, "prediction");
        const cJSON *expected = cJSON_GetObjectItemCaseSensitive(c, "expected");
        const char **answers = NULL, **classes = NULL;
        int n_answers = 0, n_classes = 0;
        int ok = c && cJSON_IsString(metric) && cJSON_IsString(pred) && cJSON_IsNumber(expected) &&
                 string_list(cJSON_GetObjectItemCaseSensitive(c, "answers"), &answers, &n_answers) == 0 &&
                 string_list(cJSON_GetObjectItemCaseSensitive(c, "all_classes"), &classes, &n_classes) == 0;
        CHECK(tc, ok, "%s:%d: malformed case line", path, line_no);
        if (ok) {
            double got = -1;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            int rc = metric_score(metric->valuestring, cJSON_IsString(task) ? task->valuestring : NULL,
                                  pred->valuestring, answers, n_answers, classes, n_classes, &got, &err);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            *seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            int pass = rc == 0 && fabs(got - expected->valuedouble) <= TOL;
            if (pass) {
                tc->passed++;
            } else {
                tc->failed++, bad++;
                if (shown++ < SHOW_FAILURES)
                    fprintf(stderr, "FAIL %s:%d: %s task=%s got %.17g expected %.17g%s%s\n  prediction: %.300s\n",
                            path, line_no, metric->valuestring, cJSON_IsString(task) ? task->valuestring : "-",
                            got, expected->valuedouble, rc ? " error: " : "", rc ? err.msg : "",
                            pred->valuestring);
            }
            (*n_cases)++;
        }
        free(answers);
        free(classes);
        cJSON_Delete(c);
    }
    if (bad > SHOW_FAILURES) fprintf(stderr, "... %s: %d failing cases in all\n", path, bad);
    free(text);
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The *.jsonl files of tests/data/metrics/, sorted. */
static int default_case_files(char ***out) {
    DIR *d = opendir(TEST_DATA("metrics"));
    int n = 0;
    *out = NULL;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".jsonl")) continue;
        *out = realloc(*out, (size_t)(n + 1) * sizeof **out);
        if (asprintf(&(*out)[n], "%s/%s", TEST_DATA("metrics"), e->d_name) < 0) break;
        n++;
    }
    closedir(d);
    qsort(*out, (size_t)n, sizeof **out, name_cmp);
    return n;
}

static void check_recorded(TestCounts *tc, int argc, char **argv) {
    char **files = NULL;
    int n_files = 0, owned = 0;
    char *env = getenv("METRIC_CASES"), *env_copy = NULL;
    if (argc > 1) {
        files = argv + 1, n_files = argc - 1;
    } else if (env && *env) {
        env_copy = strdup(env);
        char *save = NULL;
        for (char *f = strtok_r(env_copy, " ", &save); f; f = strtok_r(NULL, " ", &save)) {
            files = realloc(files, (size_t)(n_files + 1) * sizeof *files);
            files[n_files++] = f;
        }
        owned = 1;
    } else {
        n_files = default_case_files(&files);
        owned = 2;
        CHECK(tc, n_files >= 9, "expected the 9 metric case files in %s, found %d", TEST_DATA("metrics"), n_files);
    }
    for (int f = 0; f < n_files; f++) {
        int n = 0;
        double seconds = 0;
        check_case_file(tc, files[f], &n, &seconds);
        printf("  %-40s %4d cases, %.1f us per score\n", files[f], n, n ? 1e6 * seconds / n : 0.0);
        if (owned == 2) CHECK(tc, n >= MIN_CASES_PER_METRIC, "%s: only %d cases", files[f], n);
    }
    if (owned == 2)
        for (int f = 0; f < n_files; f++) free(files[f]);
    if (owned) free(files);
    free(env_copy);
}

/* ---- hand-derived cases ---------------------------------------------------------------------------- */

static double score_of(const char *metric, const char *task, const char *pred, const char *answer) {
    KvErr err;
    double s = -1;
    const char *answers[] = {answer};
    if (metric_score(metric, task, pred, answers, 1, NULL, 0, &s, &err)) {
        fprintf(stderr, "  %s(%s, %s): %s\n", metric, pred, answer, err.msg);
        return -1;
    }
    return s;
}

#define CHECK_SCORE(tc, metric, task, pred, answer, want)                                           \
    do {                                                                                            \
        double got_ = score_of(metric, task, pred, answer);                                         \
        CHECK(tc, fabs(got_ - (want)) <= TOL, "%s(\"%s\", \"%s\") = %.17g, want %.17g", metric, pred, \
              answer, got_, (double)(want));                                                        \
    } while (0)

/* The spec's table (datasets.md §1.6), computed there with the reference Python. */
static void check_spec_table(TestCounts *tc) {
    CHECK_SCORE(tc, "qa_f1", NULL, "The Eiffel Tower, in Paris.", "Eiffel Tower", 0.6666666666666666);
    CHECK_SCORE(tc, "qa_f1", NULL, "an apple a day", "The apple", 0.6666666666666666);
    CHECK_SCORE(tc, "qa_f1", NULL, "Théâtre—the", "théâtre", 0);
    CHECK_SCORE(tc, "qa_f1", NULL, "", "yes", 0);
    CHECK_SCORE(tc, "rouge_l", NULL, "The cat sat on the mat. It was happy.", "A cat sat on a mat. The cat was happy.",
                0.7777777727777778);
    CHECK_SCORE(tc, "rouge_l", NULL, "the the the", "the cat", 0.6666666622222223);
    CHECK_SCORE(tc, "rouge_l", NULL, "no period here at all", "no period here", 0.7499999953125);
    CHECK_SCORE(tc, "rouge_l", NULL, "It rose 3.5 percent. Then fell.", "It rose 3.5 percent", 0.8333333284722222);
    CHECK_SCORE(tc, "rouge_l", NULL, "", "anything", 0.0);
    CHECK_SCORE(tc, "count", NULL, "There are 12 unique paragraphs, not 13.", "12", 0.5);
    CHECK_SCORE(tc, "retrieval", NULL, "Paragraph 7 or Paragraph 17", "Paragraph 7", 0.5);
    CHECK_SCORE(tc, "code_sim", NULL, "\n# comment\n    return x + 1\nfoo()", "    return x + 2", 0.94);
    CHECK_SCORE(tc, "code_sim", NULL, "```python\nprint(a)", "print(a)", 1.0);
    CHECK_SCORE(tc, "code_sim", NULL, "self.assertEqual(result, expected)", "self.assertEqual(res, expected)", 0.95);
    CHECK_SCORE(tc, "code_sim", NULL, "", "", 1.0);
    CHECK_SCORE(tc, "code_sim", NULL, "a", "", 0.0);
    CHECK_SCORE(tc, "code_sim", NULL, "abc", "abd", 0.67);

    KvErr err;
    double s = -1;
    const char *city[] = {"City"}, *trec[] = {"Entity", "Location", "Other location", "City", "Description"};
    CHECK(tc, metric_score("classification", "trec", "Location, City, Entity", city, 1, trec, 5, &s, &err) == 0 &&
                  fabs(s - 1.0 / 3) <= TOL, "classification = %g", s);
    const char *num[] = {"Number of something"}, *nums[] = {"Num", "Number", "Number of something"};
    CHECK(tc, metric_score("classification", "trec", "Number of something", num, 1, nums, 3, &s, &err) == 0 &&
                  fabs(s - 0.5) <= TOL, "classification skip quirk = %g", s);
}

/* Python's str.lower() and str.split() through the metrics: a case-sensitive-free substring test shows the
 * lowered text exactly. */
static void check_unicode(TestCounts *tc) {
    CHECK_SCORE(tc, "string_match_all", NULL, "σας", "ΣΑΣ", 1.0);        /* final sigma at the end */
    CHECK_SCORE(tc, "string_match_all", NULL, "σασ", "ΣΑΣ", 0.0);
    CHECK_SCORE(tc, "string_match_all", NULL, "ας.", "ΑΣ.", 1.0);        /* '.' is not cased: still final */
    CHECK_SCORE(tc, "string_match_all", NULL, "a\u00adς", "A\u00adΣ", 1.0); /* soft hyphen is case-ignorable */
    CHECK_SCORE(tc, "string_match_all", NULL, "i\u0307stanbul", "İSTANBUL", 1.0); /* U+0130 → two code points */
    CHECK_SCORE(tc, "string_match_all", NULL, "àéîõü ǆ москва", "ÀÉÎÕÜ ǅ МОСКВА", 1.0);
    CHECK_SCORE(tc, "string_match_all", NULL, "straße", "STRASSE", 0.0); /* lower() never folds ß */
    CHECK_SCORE(tc, "needle", NULL, "a\u3000b\u00a0c\x1c" "d", "a b c d", 1.0); /* str.split() white space */
    CHECK_SCORE(tc, "needle", NULL, "a\u200bb", "a b", 0.0);              /* U+200B is not white space */
    CHECK_SCORE(tc, "qa_f1", NULL, "the\u00e9", "\u00e9", 0.0); /* é is \w: "theé" is one word, no article */
    CHECK_SCORE(tc, "qa_f1", NULL, "\u00e9the", "\u00e9", 0.0); /* likewise "éthe" */
    CHECK_SCORE(tc, "qa_f1", NULL, "\u2014the", "\u2014", 1.0); /* "—" is not \w: "the" is an article */
}

static uint64_t fnv1a(uint64_t h, uint32_t v) {
    for (int k = 0; k < 4; k++) h = (h ^ ((v >> (8 * k)) & 0xFF)) * 0x100000001B3u;
    return h;
}

/* Whether lower-casing s ends in a final sigma. */
static int ends_final_sigma(uint32_t *cps, size_t n) {
    UStr low;
    KvErr err;
    if (mtext_lower(&low, (USpan){cps, n}, &err)) return -1;
    int final = low.cp[low.n - 1] == 0x3C2;
    mtext_free(&low);
    return final;
}

/* Every code point through text.c's lower-casing and classes, hashed as gen_metric_cases.py hashes Python's
 * (tests/data/metrics/unicode.json): the lookup code is checked exhaustively, not only on sampled text. */
static void check_unicode_exhaustive(TestCounts *tc) {
    KvErr err;
    char *json = kv_read_file(TEST_DATA("metrics/unicode.json"), NULL, &err);
    cJSON *ref = json ? cJSON_Parse(json) : NULL;
    const cJSON *want_lower = cJSON_GetObjectItemCaseSensitive(ref, "lower_fnv1a");
    const cJSON *want_classes = cJSON_GetObjectItemCaseSensitive(ref, "classes_fnv1a");
    CHECK(tc, cJSON_IsString(want_lower) && cJSON_IsString(want_classes), "tests/data/metrics/unicode.json: %s",
          json ? "missing keys" : err.msg);
    uint64_t lower = 0xCBF29CE484222325u, classes = 0xCBF29CE484222325u;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        UStr low;
        if (mtext_lower(&low, (USpan){&cp, 1}, &err)) break;
        lower = fnv1a(lower, (uint32_t)low.n);
        for (size_t k = 0; k < low.n; k++) lower = fnv1a(lower, low.cp[k]);
        mtext_free(&low);
        uint32_t after[2] = {cp, 0x3A3}, between[3] = {'A', cp, 0x3A3};
        uint32_t bits = (uint32_t)(mtext_is_space(cp) | mtext_is_alnum(cp) << 1 | mtext_is_decimal(cp) << 2 |
                                   ends_final_sigma(after, 2) << 3 | ends_final_sigma(between, 3) << 4);
        classes = fnv1a(classes, bits);
    }
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)lower);
    CHECK(tc, cJSON_IsString(want_lower) && !strcmp(got, want_lower->valuestring), "lower-case hash %s", got);
    snprintf(got, sizeof got, "%016llx", (unsigned long long)classes);
    CHECK(tc, cJSON_IsString(want_classes) && !strcmp(got, want_classes->valuestring), "class hash %s", got);
    cJSON_Delete(ref);
    free(json);
}

/* Invalid UTF-8 is scored as Python scores the bytes decoded with errors="replace". */
static void check_invalid_utf8(TestCounts *tc) {
    CHECK_SCORE(tc, "code_sim", NULL, "caf\xC3", "caf\xEF\xBF\xBD", 1.0);          /* truncated at the end */
    CHECK_SCORE(tc, "code_sim", NULL, "a\xE2\x82" "b", "a\xEF\xBF\xBD" "b", 1.0);     /* one U+FFFD for both */
    CHECK_SCORE(tc, "code_sim", NULL, "a\xE2(b", "a\xEF\xBF\xBD(b", 1.0);            /* '(' survives */
    CHECK_SCORE(tc, "code_sim", NULL, "\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD", 1.0);  /* overlong: two */
    CHECK_SCORE(tc, "code_sim", NULL, "\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 1.0); /* surrogate */
    CHECK_SCORE(tc, "code_sim", NULL, "\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 1.0);
    CHECK_SCORE(tc, "code_sim", NULL, "\xF0\x9F\x98", "\xEF\xBF\xBD", 1.0);
    CHECK_SCORE(tc, "qa_f1", NULL, "\xFF\xFE caf\xC3", "caf\xEF\xBF\xBD", 2.0 / 3);
    CHECK_SCORE(tc, "rouge_l", NULL, "\xFF. \x80\x80", "\xEF\xBF\xBD", 0.6666666622222223);
}

static void check_first_line(TestCounts *tc) {
    CHECK_SCORE(tc, "qa_f1", "triviaqa", "\n\nParis\nLondon", "London", 0.0);
    CHECK_SCORE(tc, "qa_f1", "hotpotqa", "\n\nParis\nLondon", "London", 2.0 / 3);
    CHECK_SCORE(tc, "rouge_l", "samsum", "x\nthe cat", "the cat", 0.0);
    CHECK_SCORE(tc, "string_match_part", "qa_1", "Par\nis", "paris", 1.0); /* RULER deletes control chars */
}

static void check_averages(TestCounts *tc) {
    KvErr err;
    double avg = -1;
    /* Python: round(100 * sum / n, 2) = 37.13 but round(sum / n * 100, 2) = 37.12 for these 40 scores. */
    const double t = 1.0 / 3;
    const double s[40] = {0, 0, 0.25, 0.2, 0.5, 0.2, 0, 1, 0.5, 0, 0.2, 0.25, 0.25, 0.2, 0, 0, 1, 0.2, 1, 0.25,
                          t, 0, 0.25, 0.5, t, 0.2, 0.5, 1, 1, 0.25, t, 1, t, t, 0.2, 0.5, 0.25, 1, t, 0.2};
    CHECK(tc, metric_task_average("qa_f1", s, 40, &avg, &err) == 0 && avg == 37.13, "LongBench average %.17g", avg);
    CHECK(tc, metric_task_average("string_match_all", s, 40, &avg, &err) == 0 && avg == 37.12, "RULER %.17g", avg);
    const double third[3] = {1, 0, 0};
    CHECK(tc, metric_task_average("rouge_l", third, 3, &avg, &err) == 0 && avg == 33.33, "1/3 → %.17g", avg);
    CHECK(tc, metric_task_average("needle", third, 3, &avg, &err) == 0 && fabs(avg - 100.0 / 3) < 1e-12,
          "needle mean %.17g", avg);
    CHECK(tc, metric_round2(2.675) == 2.67 && metric_round2(0.125) == 0.12 && metric_round2(0.375) == 0.38,
          "round2 like Python's round(x, 2)");
    CHECK(tc, metric_task_average("qa_f1", s, 0, &avg, &err) == -1 && strstr(err.msg, "no samples"), "%s", err.msg);
    CHECK(tc, metric_task_average("bleu", s, 3, &avg, &err) == -1 && strstr(err.msg, "unknown metric"), "%s",
          err.msg);
    const double tasks[3] = {30, 40, 50.5};
    CHECK(tc, fabs(metric_mean(tasks, 3) - 40.166666666666664) < 1e-12, "mean");
}

static void check_bad_input(TestCounts *tc) {
    KvErr err;
    double s;
    const char *one[] = {"x"}, *with_null[] = {"x", NULL};
    CHECK(tc, metric_score("bleu", NULL, "x", one, 1, NULL, 0, &s, &err) == -1 &&
                  strstr(err.msg, "unknown metric 'bleu'") && strstr(err.msg, "rouge_l"), "%s", err.msg);
    CHECK(tc, metric_score(NULL, NULL, "x", one, 1, NULL, 0, &s, &err) == -1, "NULL metric");
    CHECK(tc, metric_score("qa_f1", NULL, NULL, one, 1, NULL, 0, &s, &err) == -1 && strstr(err.msg, "prediction"),
          "%s", err.msg);
    CHECK(tc, metric_score("qa_f1", NULL, "x", NULL, 0, NULL, 0, &s, &err) == -1 && strstr(err.msg, "no reference"),
          "%s", err.msg);
    CHECK(tc, metric_score("string_match_all", NULL, "x", one, 0, NULL, 0, &s, &err) == -1, "zero answers");
    CHECK(tc, metric_score("qa_f1", NULL, "x", with_null, 2, NULL, 0, &s, &err) == -1 && strstr(err.msg, "answer 1"),
          "%s", err.msg);
    CHECK(tc, metric_score("classification", "trec", "x", one, 1, NULL, 0, &s, &err) == -1 &&
                  strstr(err.msg, "all_classes"), "%s", err.msg);
    CHECK(tc, metric_score("classification", "trec", "x", one, 1, with_null, 2, &s, &err) == -1, "NULL class");
    CHECK(tc, metric_score("retrieval", NULL, "7", one, 1, NULL, 0, &s, &err) == -1 && strstr(err.msg, "Paragraph"),
          "%s", err.msg);
    const char *blank[] = {" \n "};
    CHECK(tc, metric_score("needle", NULL, "x", blank, 1, NULL, 0, &s, &err) == -1 && strstr(err.msg, "no words"),
          "%s", err.msg);
    CHECK(tc, metric_known("qa_f1") && metric_known("needle") && !metric_known("QA_F1") && !metric_known(NULL),
          "metric_known");
    char *names = strdup(metric_names()), *save = NULL;
    int n_names = 0, all_known = 1;
    for (char *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save))
        n_names++, all_known &= metric_known(name);
    CHECK(tc, n_names == 9 && all_known, "metric_names lists %d names, all known: %d", n_names, all_known);
    free(names);
}

/* Rouge-L's recursion limit: identical sentences of k distinct words need k + 1 calls of the walk. */
static void check_rouge_depth(TestCounts *tc) {
    char *text = malloc(8 * (ROUGE_RECON_MAX_CALLS + 1)); /* " w" + up to 4 digits per word, and the NUL */
    if (!text) return;
    for (int k = ROUGE_RECON_MAX_CALLS - 2; k <= ROUGE_RECON_MAX_CALLS; k++) {
        size_t len = 0;
        for (int i = 0; i < k; i++) len += (size_t)sprintf(text + len, "%sw%d", i ? " " : "", i);
        double got = score_of("rouge_l", NULL, text, text);
        CHECK(tc, k < ROUGE_RECON_MAX_CALLS ? got > 0.99 : got == 0.0, "rouge_l on %d identical words = %g", k, got);
    }
    free(text);
}

/* Random bytes (mostly invalid UTF-8, with periods, newlines, digits and multi-byte lead bytes) through every
 * metric: each must score in [0, 1] without an error. The sanitizer build makes this a memory check too. */
static void check_random_bytes(TestCounts *tc) {
    static const char *const METRICS[] = {"qa_f1", "rouge_l", "classification", "retrieval", "count", "code_sim",
                                          "string_match_all", "string_match_part", "needle"};
    static const char ALPHABET[] = "ab .\n\t#/`7\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xCE\xA3\xC4\xB0\xFF\xED\xA0";
    uint64_t state = 0x9E3779B97F4A7C15u;
    char pred[301], answer[41];
    int bad = 0;
    for (int round = 0; round < 300; round++) {
        for (int k = 0; k < 2; k++) {
            char *buf = k ? answer : pred;
            int cap = k ? 40 : 300;
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            int n = (int)(state % (uint64_t)cap);
            for (int i = 0; i < n; i++) {
                state ^= state << 13, state ^= state >> 7, state ^= state << 17;
                buf[i] = ALPHABET[state % (sizeof ALPHABET - 1)];
            }
            buf[n] = 0;
        }
        for (int m = 0; m < 9; m++) {
            const char *ans[] = {!strcmp(METRICS[m], "retrieval") ? "Paragraph 7" : answer};
            const char *classes[] = {"a", "\xC3\xA9", answer, ""};
            if (!strcmp(METRICS[m], "needle") && !strpbrk(answer, "ab.#/`7")) continue; /* needs a word */
            KvErr err;
            double s = -1;
            if (metric_score(METRICS[m], "trec", pred, ans, 1, classes, 4, &s, &err) || !(s >= 0 && s <= 1)) {
                if (bad++ < SHOW_FAILURES) fprintf(stderr, "FAIL random bytes %s round %d: %g\n", METRICS[m], round, s);
            }
        }
    }
    CHECK(tc, bad == 0, "%d random-byte cases failed", bad);
}


/* Runs `kvbench score ARGS` in-process with its stdout and stderr captured. Returns the exit status. */
static int run_score_cmd(char *out, char *errs, size_t cap, int argc, char **argv) {
    return test_run_command(cmd_score, argc, argv, out, errs, cap);
}

static void check_command(TestCounts *tc) {
    char out[1024], errs[1024];
    char *qa[] = {"--metric", "qa_f1", "--pred", "The Eiffel Tower, in Paris.", "--answer", "x", "--answer",
                  "Eiffel Tower"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 8, qa) == 0 && !strcmp(out, "0.6666666666666666\n"), "got '%s'",
          out);
    char *trec[] = {"--metric", "classification", "--task", "trec", "--pred", "City\nCountry", "--answer", "City",
                    "--class", "City", "--class", "Country"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 12, trec) == 0 && !strcmp(out, "1.0\n"), "got '%s'", out);
    char *empty[] = {"--metric", "rouge_l", "--pred", "", "--answer", "x"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 6, empty) == 0 && !strcmp(out, "0.0\n"), "got '%s'", out);
    char *unknown[] = {"--metric", "bleu", "--pred", "x", "--answer", "x"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 6, unknown) == 2 && !out[0] &&
                  strstr(errs, "unknown metric 'bleu' (known: qa_f1, rouge_l"), "stderr '%s'", errs);
    char *no_answer[] = {"--metric", "qa_f1", "--pred", "x"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 4, no_answer) == 2 && strstr(errs, "--answer"), "'%s'", errs);
    char *no_value[] = {"--metric", "qa_f1", "--pred"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 3, no_value) == 2 && strstr(errs, "--pred needs a value"), "'%s'",
          errs);
    char *bad_option[] = {"--metric", "qa_f1", "--bogus", "x"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 4, bad_option) == 2 && strstr(errs, "unknown option '--bogus'"),
          "'%s'", errs);
    char *no_classes[] = {"--metric", "classification", "--pred", "x", "--answer", "x"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 6, no_classes) == 1 && strstr(errs, "all_classes"), "'%s'", errs);
    char *help[] = {"--help"};
    CHECK(tc, run_score_cmd(out, errs, sizeof out, 1, help) == 0 && strstr(out, "usage: kvbench score"), "help");
}

int main(int argc, char **argv) {
    TestCounts tc = {"test_metrics", 0, 0, 0};
    check_recorded(&tc, argc, argv);
    if (argc == 1) {
        check_spec_table(&tc);
        check_unicode(&tc);
        check_unicode_exhaustive(&tc);
        check_invalid_utf8(&tc);
        check_first_line(&tc);
        check_averages(&tc);
        check_bad_input(&tc);
        check_rouge_depth(&tc);
        check_command(&tc);
        check_random_bytes(&tc);
    }
    return test_finish(&tc);
}
