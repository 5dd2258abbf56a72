/* test.h — the smallest test harness: CHECK counts passes and failures, SKIP counts a part that cannot run
 * here, test_finish prints the "NAME: N passed, N failed, N skipped" line that tests/run_tests.sh adds up.
 * Each test program is one binary. */
#ifndef KVBENCH_TEST_H
#define KVBENCH_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int passed, failed, skipped;
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

/* A part of the test that cannot run here (its model file absent, a tool not installed, a kernel this CPU
 * lacks): counted apart from the passes, with one line naming what and why, so that an absent model never
 * reads as a pass. */
#define SKIP(tc, ...)                                                         \
    do {                                                                      \
        (tc)->skipped++;                                                      \
        printf("SKIP %s: ", (tc)->name);                                      \
        printf(__VA_ARGS__);                                                  \
        putchar('\n');                                                        \
    } while (0)

/* |a-b| <= tol * max(1, scale): relative to the given scale (e.g. an array's max). */
static inline int test_close(double a, double b, double tol, double scale) {
    double s = fabs(scale) > 1.0 ? fabs(scale) : 1.0;
    return fabs(a - b) <= tol * s;
}

static inline int test_finish(const TestCounts *tc) {
    printf("%s: %d passed, %d failed, %d skipped\n", tc->name, tc->passed, tc->failed, tc->skipped);
    return tc->failed ? 1 : 0;
}

/* Runs a kvbench subcommand in-process with its stdout captured into out and its stderr into err_out (or into
 * out as well when err_out is NULL), each NUL-terminated and cut at size; returns the command's exit status. */
static inline int test_run_command(int (*cmd)(int, char **), int argc, char **argv, char *out, char *err_out,
                                   size_t size) {
    fflush(stdout);
    fflush(stderr);
    FILE *tmp_out = tmpfile(), *tmp_err = err_out ? tmpfile() : NULL;
    int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    if (!tmp_out || (err_out && !tmp_err) || saved_out < 0 || saved_err < 0) {
        fprintf(stderr, "test_run_command: cannot redirect output\n");
        exit(1);
    }
    dup2(fileno(tmp_out), STDOUT_FILENO);
    dup2(fileno(err_out ? tmp_err : tmp_out), STDERR_FILENO);
    int status = cmd(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved_out);
    close(saved_err);
    FILE *files[2] = {tmp_out, tmp_err};
    char *bufs[2] = {out, err_out};
    for (int i = 0; i < 2; i++) {
        if (!files[i]) continue;
        rewind(files[i]);
        size_t n = fread(bufs[i], 1, size - 1, files[i]);
        bufs[i][n] = '\0';
        fclose(files[i]);
    }
    return status;
}

/* The project root is the working directory of every test (tests/run_tests.sh runs them from there). */
#define TEST_DATA(path) ("tests/data/" path)

#endif
