/* test_niah.c — Needle-in-a-Haystack: the lengths × depths grid, the needle's place at 0 %, 100 % and in between
 * (after a sentence's period, near the asked depth), the token budget (length − 200 for haystack + needle,
 * counted in whitespace words here), the haystack repeating past one copy of the essays, bad grids. */
#include <string.h>

#include "../datasets/dataset.h"
#include "test.h"

#define NEEDLE "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n"
#define HEAD "<|im_start|> This is a very long story book: <book> "
#define TAIL " </book>.\n"

static void check_default_grid(TestCounts *tc) {
    DatasetOptions o = {.count_tokens = dataset_count_words, .target_tokens = 3000};
    Dataset *ds;
    KvErr err;
    CHECK(tc, dataset_open(&ds, "niah:needle", &o, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_count(ds) == 10, "default grid: 10 depths, got %d", dataset_count(ds));
    static const double depths[10] = {0, 11, 22, 33, 44, 56, 67, 78, 89, 100};
    for (int i = 0; i < dataset_count(ds); i++) {
        Sample s;
        if (dataset_get(ds, i, &s, &err) != 0) {
            CHECK(tc, 0, "%s", err.msg);
            continue;
        }
        CHECK(tc, s.depth_percent == depths[i] && s.target_tokens == 3000, "grid cell %d: depth %g", i, s.depth_percent);
        const char *needle = strstr(s.context, NEEDLE);
        CHECK(tc, needle && !strstr(needle + 1, NEEDLE), "exactly one needle");
        CHECK(tc, !strncmp(s.context, HEAD, strlen(HEAD)), "prompt head");
        size_t len = strlen(s.context);
        CHECK(tc, len > strlen(TAIL) && !strcmp(s.context + len - strlen(TAIL), TAIL), "prompt tail");
        int n_ctx, n_q;
        dataset_count_words(NULL, s.context, &n_ctx, NULL);
        dataset_count_words(NULL, s.question, &n_q, NULL);
        /* haystack + needle fit length - 200; the head and tail add 11 words */
        CHECK(tc, n_ctx - 11 <= 3000 - 200 && n_ctx - 11 > 3000 - 200 - 5, "context %d words", n_ctx);
        if (needle) {
            size_t at = (size_t)(needle - s.context) - strlen(HEAD);
            size_t hay = len - strlen(HEAD) - strlen(TAIL) - strlen(NEEDLE);
            if (depths[i] == 0) CHECK(tc, at == 0, "depth 0 at the start");
            else if (depths[i] == 100) CHECK(tc, at == hay, "depth 100 at the end");
            else {
                CHECK(tc, needle[-1] == '.', "needle after a period, got '%c'", needle[-1]);
                double pct = 100.0 * (double)at / (double)hay;
                CHECK(tc, pct <= depths[i] && pct > depths[i] - 5, "depth %g placed at %.1f%%", depths[i], pct);
            }
        }
        CHECK(tc, !strcmp(s.metric, "needle") && s.max_new_tokens == 30 && s.stop_on_newline && s.use_chat == 0 &&
                      s.add_bos == 1,
              "needle task fields");
        CHECK(tc, s.n_answers == 1 && strstr(NEEDLE, s.answers[0]), "answer is the needle sentence");
        CHECK(tc, strstr(s.question, "Question: The best thing to do in San Francisco is: \nAnswer:") != NULL,
              "question '%s'", s.question);
        sample_free(&s);
    }
    dataset_close(ds);
}

static void check_custom_grid(TestCounts *tc) {
    const int lengths[] = {1000, 250000};
    const double depths[] = {25, 75};
    DatasetOptions o = {.count_tokens = dataset_count_words, .lengths = lengths, .n_lengths = 2, .depths = depths,
                        .n_depths = 2};
    Dataset *ds;
    KvErr err;
    CHECK(tc, dataset_open(&ds, "niah:needle", &o, &err) == 0, "%s", err.msg);
    CHECK(tc, dataset_count(ds) == 4, "2 x 2 grid");
    const char *ids[] = {"niah:needle:L1000:d25", "niah:needle:L1000:d75", "niah:needle:L250000:d25",
                         "niah:needle:L250000:d75"};
    for (int i = 0; i < 4; i++) {
        Sample s;
        if (dataset_get(ds, i, &s, &err) != 0) {
            CHECK(tc, 0, "%s", err.msg);
            continue;
        }
        int n;
        dataset_count_words(NULL, s.context, &n, NULL);
        char id[64];
        CHECK(tc, !strcmp(s.id, ids[i]) && dataset_sample_id(ds, i, id, sizeof id, &err) == 0 && !strcmp(id, ids[i]),
              "id %s", s.id);
        /* 250,000 words is more than the essays hold once (about 110,000): the haystack repeats */
        CHECK(tc, n - 11 <= lengths[i / 2] - 200 && n - 11 > lengths[i / 2] - 210, "length %d: %d words", lengths[i / 2], n);
        sample_free(&s);
    }
    dataset_close(ds);
}

static void check_bad_grids(TestCounts *tc) {
    Dataset *ds;
    KvErr err;
    const int short_len[] = {220};
    DatasetOptions o = {.count_tokens = dataset_count_words, .lengths = short_len, .n_lengths = 1};
    CHECK(tc, dataset_open(&ds, "niah:needle", &o, &err) != 0 && strstr(err.msg, "too short"), "%s", err.msg);
    const double bad_depth[] = {50, 120};
    o = (DatasetOptions){.count_tokens = dataset_count_words, .depths = bad_depth, .n_depths = 2};
    CHECK(tc, dataset_open(&ds, "niah:needle", &o, &err) != 0 && strstr(err.msg, "outside [0, 100]"), "%s", err.msg);
    o = (DatasetOptions){0};
    CHECK(tc, dataset_open(&ds, "niah:needle", &o, &err) != 0 && strstr(err.msg, "token counter"), "%s", err.msg);
    o.count_tokens = dataset_count_words;
    CHECK(tc, dataset_open(&ds, "niah:haystack", &o, &err) != 0 && strstr(err.msg, "unknown niah task"), "%s", err.msg);
    o.assets_dir = "tests/data";
    CHECK(tc, dataset_open(&ds, "niah:needle", &o, &err) != 0 && strstr(err.msg, "tests/data/niah"), "%s", err.msg);
}

int main(void) {
    TestCounts tc = {"test_niah", 0, 0, 0};
    check_default_grid(&tc);
    check_custom_grid(&tc);
    check_bad_grids(&tc);
    return test_finish(&tc);
}
