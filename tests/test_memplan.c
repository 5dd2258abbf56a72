/* test_memplan.c — the sweep's memory planner (runs/memplan.h): splits into decode batches, the choice of views
 * or copies, and the sizes of --memory-limit. The runs under a limit (same rows, several batches) are in
 * test_e2e. */
#include <math.h>
#include <string.h>

#include "../runs/memplan.h"
#include "test.h"

static int same(const int *a, const int *b, int n) { return !memcmp(a, b, (size_t)n * sizeof *a); }

/* Every batch within budget, every fitting variant in one. */
static int within(const double *need, const int *batch_of, int n, int n_batches, double budget) {
    for (int b = 0; b < n_batches; b++) {
        double used = 0;
        int members = 0;
        for (int i = 0; i < n; i++)
            if (batch_of[i] == b) used += need[i], members++;
        if (used > budget || members == 0) return 0;
    }
    for (int i = 0; i < n; i++)
        if ((batch_of[i] < 0) != !(need[i] <= budget) || batch_of[i] >= n_batches) return 0;
    return 1;
}

static void test_split(TestCounts *tc) {
    KvErr err = {{0}};
    int got[8];
    {   /* everything fits: one batch */
        const double need[4] = {1, 2, 3, 4};
        const int want[4] = {0, 0, 0, 0};
        int nb = memplan_split(need, 4, 10, got, &err);
        CHECK(tc, nb == 1 && same(got, want, 4), "one batch: %d", nb);
    }
    {   /* first fit decreasing, by hand: 6 opens batch 0 (4 left), 5 opens 1 (5 left), 4 fills 0, 3 and 2 fill 1 */
        const double need[5] = {6, 5, 4, 3, 2};
        const int want[5] = {0, 1, 0, 1, 1};
        int nb = memplan_split(need, 5, 10, got, &err);
        CHECK(tc, nb == 2 && same(got, want, 5) && within(need, got, 5, nb, 10), "6 5 4 3 2 in 10: %d batches", nb);
    }
    {   /* the same variants in another order: the same batches (decreasing need decides, not the order) */
        const double need[5] = {2, 4, 6, 3, 5};
        const int want[5] = {1, 0, 0, 1, 1};
        int nb = memplan_split(need, 5, 10, got, &err);
        CHECK(tc, nb == 2 && same(got, want, 5), "shuffled: %d batches", nb);
    }
    {   /* ties keep their order: the first two share batch 0 */
        const double need[4] = {3, 3, 3, 3};
        const int want[4] = {0, 0, 1, 1};
        int nb = memplan_split(need, 4, 6, got, &err);
        CHECK(tc, nb == 2 && same(got, want, 4), "ties: %d batches", nb);
    }
    {   /* a variant larger than the budget does not run; a NaN need neither; the rest still pack */
        const double need[4] = {11, 5, NAN, 5};
        const int want[4] = {-1, 0, -1, 0};
        int nb = memplan_split(need, 4, 10, got, &err);
        CHECK(tc, nb == 1 && same(got, want, 4), "too large: %d batches", nb);
    }
    {   /* a need of exactly the budget fits alone; zero needs (the full variant) fit a zero budget; a negative
         * budget (the prefill's cache alone over the limit) fits nothing */
        const double need[3] = {10, 0, 10};
        const int want[3] = {0, 0, 1};
        int nb = memplan_split(need, 3, 10, got, &err);
        CHECK(tc, nb == 2 && same(got, want, 3), "exact fit: %d batches", nb);
        const double zero[2] = {0, 0};
        const int want0[2] = {0, 0}, none[2] = {-1, -1};
        CHECK(tc, memplan_split(zero, 2, 0, got, &err) == 1 && same(got, want0, 2), "zero budget");
        CHECK(tc, memplan_split(zero, 2, -1, got, &err) == 0 && same(got, none, 2), "negative budget");
    }
    {   /* no budget (no device limit, no --memory-limit): one batch; no variants: no batch */
        const double need[3] = {1e15, 1e12, 1};
        CHECK(tc, memplan_split(need, 3, INFINITY, got, &err) == 1 && got[0] == 0 && got[2] == 0, "infinite budget");
        CHECK(tc, memplan_split(need, 0, 10, got, &err) == 0, "no variants");
    }
    {   /* 33 variants (Figure 4's sweep) of four sizes: at most 11/9 of the lower bound + 1, every batch within */
        double need[33];
        int batch_of[33];
        double total = 0, budget = 100;
        for (int i = 0; i < 33; i++) total += need[i] = 7.0 + 6.0 * (i % 4);
        int nb = memplan_split(need, 33, budget, batch_of, &err);
        int bound = (int)ceil(total / budget);
        CHECK(tc, nb >= bound && nb <= 11.0 / 9 * bound + 1 && within(need, batch_of, 33, nb, budget),
              "33 variants: %d batches, lower bound %d", nb, bound);
    }
}

static void test_choose(TestCounts *tc) {
    KvErr err = {{0}};
    int got[4], views = -1;
    const double view[3] = {1, 1, 1}, copy_fit[3] = {3, 3, 3}, copy_big[3] = {6, 6, 6};
    /* copies that fit as few batches as views are chosen where views are not known to be as fast */
    CHECK(tc, memplan_choose(view, copy_fit, 3, 10, 0, got, &views, &err) == 1 && views == 0, "copies fit");
    /* ... never where they are */
    CHECK(tc, memplan_choose(view, copy_fit, 3, 10, 1, got, &views, &err) == 1 && views == 1, "views fast");
    /* copies needing more batches: views */
    CHECK(tc, memplan_choose(view, copy_big, 3, 10, 0, got, &views, &err) == 1 && views == 1 && got[2] == 0,
          "copies too large");
    /* copies leaving a variant out that views would run: views */
    const double copy_out[3] = {1, 1, 11};
    CHECK(tc, memplan_choose(view, copy_out, 3, 10, 0, got, &views, &err) == 1 && views == 1 && got[2] == 0,
          "a copy that does not fit");
    /* a backend without views: copies, split */
    const int want[3] = {0, 1, 2};
    CHECK(tc, memplan_choose(NULL, copy_big, 3, 10, 0, got, &views, &err) == 3 && views == 0 && same(got, want, 3),
          "no views");
}

static void test_bytes(TestCounts *tc) {
    KvErr err = {{0}};
    double b = 0;
    CHECK(tc, !memplan_parse_bytes("4MiB", "--memory-limit", &b, &err) && b == 4194304.0, "4MiB: %.0f", b);
    CHECK(tc, !memplan_parse_bytes("8G", "--memory-limit", &b, &err) && b == 8589934592.0, "8G: %.0f", b);
    CHECK(tc, !memplan_parse_bytes("1.5GB", "--memory-limit", &b, &err) && b == 1.5e9, "1.5GB: %.0f", b);
    CHECK(tc, !memplan_parse_bytes("2000", "--memory-limit", &b, &err) && b == 2000, "2000: %.0f", b);
    CHECK(tc, !memplan_parse_bytes("512 KiB", "--memory-limit", &b, &err) && b == 524288, "512 KiB: %.0f", b);
    const char *bad[] = {"", "0", "-1", "4XB", " 4M", "4M ", "nan", "inf", "0.1", "MiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = memplan_parse_bytes(bad[i], "--memory-limit", &b, &err);
        CHECK(tc, rc == -1 && strstr(err.msg, "--memory-limit") && strstr(err.msg, "8GiB"), "'%s': %s", bad[i],
              rc ? err.msg : "accepted");
    }
}

int main(void) {
    TestCounts tc = {"test_memplan", 0, 0, 0};
    test_split(&tc);
    test_choose(&tc);
    test_bytes(&tc);
    return test_finish(&tc);
}
