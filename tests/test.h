/* test.h — the smallest test harness: CHECK counts passes and failures, test_finish prints the
 * "NAME: N passed, N failed" line that tests/run_tests.sh adds up. Each test program is one binary. */
#ifndef KVBENCH_TEST_H
#define KVBENCH_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *name;
    int passed, failed;
} TestCounts;

#define CHECK(tc, cond, ...)                                                  \
    do {                                                                      \
        if (cond) {                                                           \
            (tc)->passed++;                                                   \
        } else {                                                              \
            (tc)->failed++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* |a-b| <= tol * max(1, scale): relative to the given scale (e.g. an array's max). */
static inline int test_close(double a, double b, double tol, double scale) {
    double s = fabs(scale) > 1.0 ? fabs(scale) : 1.0;
    return fabs(a - b) <= tol * s;
}

static inline int test_finish(const TestCounts *tc) {
    printf("%s: %d passed, %d failed\n", tc->name, tc->passed, tc->failed);
    return tc->failed ? 1 : 0;
}

/* The project root is the working directory of every test (tests/run_tests.sh runs them from there). */
#define TEST_DATA(path) ("tests/data/" path)

#endif
