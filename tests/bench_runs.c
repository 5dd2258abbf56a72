/* bench_runs.c — what one prefill per sample and batched variants buy: a sweep of the 8 policies × 2 budgets
 * (15 variants: full is budget-free) on one sample, against a run of that sample with the full cache only.
 *
 * Prints the cost ratio (target ≤ 2x; the reference harness pays ~15x: one prefill and one decode per variant),
 * from the per-sample timings the runner stores (prefill + policy time + batched decode), plus the wall time of
 * both runs, and the decode throughput of the batched variants against the single full-cache sequence.
 * Usage: bench_runs [MODEL.gguf] [CONTEXT_TOKENS]   (defaults: SmolLM2-135M, 2048); run from the project root. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runs/config.h"
#include "../runs/sweep.h"

typedef struct {
    double wall_ms, prefill_ms, select_ms, decode_ms;
    long generated;
    int rows;
} Measure;

static int measure(const char *config_text, const char *db_path, Measure *m) {
    RunConfig cfg;
    KvErr err = {{0}};
    SweepStats st;
    unlink(db_path);
    if (config_parse(&cfg, "bench_runs", config_text, &err)) {
        fprintf(stderr, "bench_runs: %s\n", err.msg);
        return -1;
    }
    SweepOptions opt = {db_path, 0, 0, 0, stderr, 0};
    int rc = sweep_run(&cfg, &opt, &st, &err);
    config_free(&cfg);
    if (rc) {
        fprintf(stderr, "bench_runs: %s\n", err.msg);
        return -1;
    }
    sqlite3 *db;
    sqlite3_stmt *q;
    memset(m, 0, sizeof *m);
    m->wall_ms = st.wall_ms;
    sqlite3_open(db_path, &db);
    if (sqlite3_prepare_v2(db,
                           "SELECT max(prefill_ms), sum(select_ms), max(decode_ms), sum(generated_tokens), count(*), "
                           "sum(error IS NOT NULL) FROM results",
                           -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        m->prefill_ms = sqlite3_column_double(q, 0);
        m->select_ms = sqlite3_column_double(q, 1);
        m->decode_ms = sqlite3_column_double(q, 2);
        m->generated = sqlite3_column_int64(q, 3);
        m->rows = sqlite3_column_int(q, 4);
        if (sqlite3_column_int(q, 5)) fprintf(stderr, "bench_runs: %d variants failed\n", sqlite3_column_int(q, 5));
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int tokens = argc > 2 ? atoi(argv[2]) : 2048;
    char sweep[2048], full[2048];
    const char *fmt =
        "{\"max_new_tokens\": 32, \"models\": [{\"path\": \"%s\", \"name\": \"bench\"}],"
        " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_2\"], \"target_tokens\": %d, \"n_samples\": 1}],"
        " \"policies\": [%s], \"budgets\": [\"20%%\", \"40%%\"]}";
    snprintf(sweep, sizeof sweep, fmt, model, tokens,
             "\"full\", \"streamingllm\", \"snapkv\", \"adakv\", \"cake\", \"criticalkv\", \"defensivekv\", "
             "\"layer-defensivekv\"");
    snprintf(full, sizeof full, fmt, model, tokens, "\"full\"");
    Measure s, f;
    if (measure(full, "/tmp/kvbench_bench_full.db", &f) || measure(sweep, "/tmp/kvbench_bench_sweep.db", &s)) return 1;
    unlink("/tmp/kvbench_bench_full.db");
    unlink("/tmp/kvbench_bench_sweep.db");
    double cost_f = f.prefill_ms + f.select_ms + f.decode_ms, cost_s = s.prefill_ms + s.select_ms + s.decode_ms;
    printf("bench_runs: %s, one RULER niah_single_2 sample at %d tokens, answers capped at 32 tokens\n", model, tokens);
    printf("  full cache only : prefill %8.0f ms  decode %8.0f ms  (%ld tokens, %.1f tok/s)\n", f.prefill_ms,
           f.decode_ms, f.generated, f.generated / (f.decode_ms / 1000));
    printf("  sweep, %2d rows  : prefill %8.0f ms  policies %6.0f ms  decode %8.0f ms  (%ld tokens, %.1f tok/s "
           "batched)\n",
           s.rows, s.prefill_ms, s.select_ms, s.decode_ms, s.generated, s.generated / (s.decode_ms / 1000));
    printf("  sweep / full    : %.2fx per sample (target <= 2x; %d separate runs would be ~%dx), wall %.2fx "
           "(%.1f s / %.1f s, model load and data included)\n",
           cost_s / cost_f, s.rows, s.rows, s.wall_ms / f.wall_ms, s.wall_ms / 1000, f.wall_ms / 1000);
    printf("  decode throughput batched / single: %.1fx\n",
           (s.generated / s.decode_ms) / (f.generated / f.decode_ms));
    return 0;
}
