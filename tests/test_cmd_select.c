/* test_cmd_select.c — `kvbench select` end to end: usage errors and bad input exit 2 or 1 with one line,
 * and on the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, skipped when it is not fetched) a real
 * prefill gives the budgeted counts, while a context shorter than the window or a token budget larger than
 * the context fail cleanly. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/commands.h"
#include "test.h"

#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* Runs cmd_select with the given arguments, capturing its stdout and stderr into out[n]. */
static int run(char *out, size_t n, int argc, const char **argv) {
    return test_run_command(cmd_select, argc, (char **)argv, out, NULL, n);
}

#define RUN(out, ...) run(out, sizeof out, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)), \
                          (const char *[]){__VA_ARGS__})

static void test_usage(TestCounts *tc) {
    char out[4096];
    CHECK(tc, RUN(out, "--model", "m") == 2 && strstr(out, "required"), "missing options: %s", out);
    CHECK(tc, RUN(out, "--bogus", "1") == 2 && strstr(out, "unknown option '--bogus'"), "unknown option: %s", out);
    CHECK(
        tc,
        RUN(out, "--model", "m", "--file", "f", "--policy", "snapkv", "--budget") == 2 && strstr(out, "needs a value"),
        "missing value: %s", out);
    CHECK(tc, RUN(out, "--model", "m", "--file", "f", "--policy", "lru", "--budget", "0.2") == 2 &&
                  strstr(out, "unknown policy 'lru'"), "unknown policy: %s", out);
    CHECK(tc,
          RUN(out, "--model", "m", "--file", "f", "--policy", "snapkv", "--aggregation", "median", "--budget", "0.2") ==
                  2 &&
              strstr(out, "unknown aggregation 'median'"),
          "unknown aggregation: %s", out);
    CHECK(
        tc,
        RUN(out, "--model", "m", "--file", "f", "--policy", "snapkv", "--budget", "1.5") == 2 && strstr(out, "(0, 1]"),
        "budget out of range: %s", out);
    CHECK(tc, RUN(out, "--model", "m", "--file", "f", "--policy", "snapkv", "--budget", "0.2", "--window", "0") == 2 &&
                  strstr(out, "--window"), "bad window: %s", out);
    CHECK(tc,
          RUN(out, "--model", "m", "--file", "/nonexistent/ctx.txt", "--policy", "snapkv", "--budget", "0.2") == 1 &&
              strstr(out, "/nonexistent/ctx.txt: cannot open"),
          "missing file: %s", out);
    CHECK(tc, RUN(out, "--model", "/nonexistent/m.gguf", "--file", "tests/data/policy_golden/README.md", "--policy",
                  "snapkv", "--budget", "0.2") == 1 && strstr(out, "/nonexistent/m.gguf"), "missing model: %s", out);
}

/* --keep-out: the file holds every (layer, kv-head) once, layer-major, with its count and that many positions,
 * ascending and inside the context, summing to the printed total; an unwritable path is one line, exit 1, and
 * leaves no file. */
static void check_keep_out(TestCounts *tc, const char *ctx) {
    static char out[16384];
    const char *keep = "/tmp/kvbench_select_keep.txt";
    unlink(keep);
    int rc = RUN(out, "--model", MODEL, "--file", ctx, "--policy", "snapkv", "--budget", "40%", "--window", "8",
                 "--keep-out", keep);
    int kept = -1, all = 0;
    const char *total = strstr(out, "total kept ");
    if (total) sscanf(total, "total kept %d of %d", &kept, &all);
    FILE *f = fopen(keep, "r");
    CHECK(tc, rc == 0 && f, "select --keep-out ran and wrote %s: %s", keep, out);
    if (!f) return;
    int n_layers = 0, n_kv = 0, context = 0, ok = 1, sum = 0, heads = 0;
    ok = fscanf(f, "kvbench-keepset 1 layers %d kv_heads %d context %d", &n_layers, &n_kv, &context) == 3;
    for (int l = 0; ok && l < n_layers; l++)
        for (int k = 0; ok && k < n_kv; k++) {
            int fl, fk, count, prev = -1;
            ok = fscanf(f, "%d %d %d", &fl, &fk, &count) == 3 && fl == l && fk == k && count >= 0 && count <= context;
            for (int e = 0; ok && e < count; e++) {
                int pos;
                ok = fscanf(f, "%d", &pos) == 1 && pos > prev && pos < context;
                prev = pos;
            }
            sum += count;
            heads++;
        }
    int trailing = 0;
    CHECK(tc, ok && fscanf(f, "%d", &trailing) == EOF, "keep-set file well formed");
    fclose(f);
    CHECK(tc, n_layers == 30 && n_kv == 3 && heads == 90 && sum == kept && all == 90 * context,
          "keep-set file: %d x %d heads, %d kept of %d printed (%d)", n_layers, n_kv, sum, kept, all);
    unlink(keep);
    rc = RUN(out, "--model", MODEL, "--file", ctx, "--policy", "snapkv", "--budget", "40%", "--window", "8",
             "--keep-out", "/nonexistent/dir/keep.txt");
    CHECK(tc, rc == 1 && strstr(out, "/nonexistent/dir/keep.txt.part: cannot write") &&
                  access("/nonexistent/dir/keep.txt", F_OK) != 0,
          "unwritable --keep-out: %s", out);
}

static void test_on_model(TestCounts *tc) {
    if (access(MODEL, R_OK) != 0) {
        SKIP(tc, "the prefill cases: %s not fetched (make model)", MODEL);
        return;
    }
    const char *ctx = "/tmp/kvbench_select_ctx.txt";
    FILE *f = fopen(ctx, "w");
    fputs("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. Every cloud has a silver "
          "lining, and the early bird catches the worm, but the second mouse gets the cheese.", f);
    fclose(f);
    static char out[16384];
    int rc = RUN(out, "--model", MODEL, "--file", ctx, "--policy", "defensivekv", "--budget", "50%", "--window", "8");
    CHECK(tc, rc == 0 && strstr(out, "policy defensivekv (aggregation max+prior, window 8"), "select ran: %s", out);
    /* 30 layers x 3 kv-heads x L tokens; DefensiveKV keeps int(L*0.5*3) per layer */
    int L = 0, kept = 0, all = 0;
    const char *from = strstr(out, " tokens from ");  /* "model NAME, L tokens from FILE" */
    if (from) {
        const char *p = from;
        while (p > out && p[-1] != ' ') p--;
        L = atoi(p);
    }
    const char *total = strstr(out, "total kept ");
    if (total) sscanf(total, "total kept %d of %d", &kept, &all);
    CHECK(tc, L > 8 && all == 30 * 3 * L && kept == 30 * (int)(L * 0.5 * 3), "L=%d kept %d of %d", L, kept, all);
    check_keep_out(tc, ctx);
    rc = RUN(out, "--model", MODEL, "--file", ctx, "--policy", "snapkv", "--budget", "0.2", "--window", "200");
    CHECK(tc, rc == 1 && strstr(out, "longer than its 200-token window"), "window > context: %s", out);
    rc = RUN(out, "--model", MODEL, "--file", ctx, "--policy", "streamingllm", "--budget", "5000tok");
    CHECK(tc, rc == 1 && strstr(out, "more than the context"), "tokens > context: %s", out);
    unlink(ctx);
}

int main(void) {
    TestCounts tc = {"cmd_select", 0, 0, 0};
    test_usage(&tc);
    test_on_model(&tc);
    return test_finish(&tc);
}
