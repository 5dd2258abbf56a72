/* bench_runs.c — what one prefill per sample and batched variants buy.
 *
 * 1. Per sample, in this process: a sweep of the 8 policies × 2 budgets (15 variants: full is budget-free) on
 *    one RULER sample against a run of that sample with the full cache only, both through the runner
 *    (sweep_run), alternately, ROUNDS pairs. The cost of each side is the runner's wall-clock timing of the
 *    sample (prefill + policy time, each policy's observation counted once + batched question feed and
 *    decode), and beside it the process's CPU time over the sample; printed per pair with the decode steps
 *    each side ran (batched forward steps = the longest answer; sequence-steps = all answers' tokens), and the
 *    medians of the per-pair ratios (target <= 2x; the reference harness re-prefills and decodes each variant).
 * 2. Per whole process: the same two configs as `kvbench run` child processes, alternately, ROUNDS pairs: CPU
 *    seconds (getrusage of the child: model load, tokenizer, data, prefill, policies, decode, database),
 *    wall seconds and peak RSS of each, and the median of the per-pair CPU ratios.
 * 3. Decode throughput of 15 sequences in one batch against one sequence, on equal caches (one prefill of the
 *    same context, kept whole by each: views of it, as the sweep's variants are, or gathered copies where the
 *    backend has no views), 32 forced steps each (no stop tokens), from generate's own timings.
 * 4. Decode across samples: the sweep over 4 samples with each sample's variants decoded as its own batch
 *    ("decode_samples": 1, the default) against all 4 samples' variants as one batch ("decode_samples": 4),
 *    alternately, ROUNDS pairs: the question feeds and steps (the runner's decode timings), the decode's tokens per
 *    wall second, and the CPU seconds of the whole (the prefills and policies are the same on both sides).
 * Usage: bench_runs [MODEL.gguf] [CONTEXT_TOKENS] [ROUNDS] [KVBENCH]   (defaults: SmolLM2-135M, 1024, 3,
 * ./kvbench); run from the project root. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../engine/backend.h"
#include "../engine/generate.h"
#include "../runs/config.h"
#include "../runs/sweep.h"
#include "bench_util.h"

enum { MAX_ROUNDS = 15 };

typedef struct {
    double wall_ms, prefill_ms, select_ms, decode_ms;
    double cpu_ms;   /* CPU time of the sample (prefill to scores, all threads) */
    long generated;  /* sequence-steps: every variant's answer tokens */
    int steps;       /* batched decode steps: the longest answer */
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
    FILE *quiet = fopen("/dev/null", "w"); /* the runner's per-sample lines */
    SweepOptions opt = {.db_path = db_path, .log = quiet ? quiet : stderr};
    int rc = sweep_run(&cfg, &opt, &st, &err);
    if (quiet) fclose(quiet);
    config_free(&cfg);
    if (rc) {
        fprintf(stderr, "bench_runs: %s\n", err.msg);
        return -1;
    }
    sqlite3 *db;
    sqlite3_stmt *q;
    int failed = 0;
    memset(m, 0, sizeof *m);
    m->wall_ms = st.wall_ms;
    sqlite3_open(db_path, &db);
    if (sqlite3_prepare_v2(db,
                           "SELECT sum(generated_tokens), count(*), sum(error IS NOT NULL), max(generated_tokens) "
                           "FROM results",
                           -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        /* the policy time from the runner's totals: each row's select_ms repeats its policy's observation for
         * every budget, so a sum over rows would count the shared observation twice */
        m->prefill_ms = st.prefill_ms;
        m->select_ms = st.select_ms;
        m->decode_ms = st.decode_ms;
        m->cpu_ms = st.sample_cpu_ms;
        m->generated = sqlite3_column_int64(q, 0);
        m->rows = sqlite3_column_int(q, 1);
        m->steps = sqlite3_column_int(q, 3);
        failed = sqlite3_column_int(q, 2);
    }
    sqlite3_finalize(q);
    if (failed && sqlite3_prepare_v2(db, "SELECT error FROM results WHERE error IS NOT NULL LIMIT 1", -1, &q, NULL) ==
                      SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW)
            fprintf(stderr, "bench_runs: %d variants failed, e.g.: %s\n", failed, sqlite3_column_text(q, 0));
        sqlite3_finalize(q);
    }
    sqlite3_close(db);
    return failed || !m->rows ? -1 : 0;
}

static double cost(const Measure *m) { return m->prefill_ms + m->select_ms + m->decode_ms; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Part 1: full, sweep, full, sweep, ... in this process; on a shared machine a run can be slowed by others at
 * any time, and alternating puts both sides under the same load. */
static int per_sample(const char *full, const char *sweep, int rounds) {
    double ratio[MAX_ROUNDS], cpu_ratio[MAX_ROUNDS];
    Measure f, s;
    for (int k = 0; k < rounds; k++) {
        if (measure(full, "/tmp/kvbench_bench_full.db", &f) || measure(sweep, "/tmp/kvbench_bench_sweep.db", &s))
            return -1;
        ratio[k] = cost(&s) / cost(&f);
        cpu_ratio[k] = s.cpu_ms / f.cpu_ms;
        printf("  pair %d  full: prefill %6.0f ms, feed+decode %6.0f ms, %3d steps, %5.2f CPU-s | sweep (%2d rows): "
               "prefill %6.0f ms, policies %5.0f ms, feed+decode %6.0f ms, %3d batched steps, %4ld sequence-steps, "
               "%5.2f CPU-s | %.2fx wall, %.2fx CPU\n",
               k + 1, f.prefill_ms, f.decode_ms, f.steps, f.cpu_ms / 1e3, s.rows, s.prefill_ms, s.select_ms,
               s.decode_ms, s.steps, s.generated, s.cpu_ms / 1e3, ratio[k], cpu_ratio[k]);
        fflush(stdout);
    }
    unlink("/tmp/kvbench_bench_full.db");
    unlink("/tmp/kvbench_bench_sweep.db");
    printf("sweep_ratio_sample %.2f   (wall; CPU %.2fx; medians of %d pairs; target <= 2x)\n", median(ratio, rounds),
           median(cpu_ratio, rounds), rounds);
    return 0;
}

/* Part 4: alone, joint, alone, joint, ... in this process, as part 1. */
static int across_samples(const char *alone, const char *joint, int rounds) {
    double ratio[MAX_ROUNDS], cpu_ratio[MAX_ROUNDS];
    Measure a, j;
    for (int k = 0; k < rounds; k++) {
        if (measure(alone, "/tmp/kvbench_bench_alone.db", &a) || measure(joint, "/tmp/kvbench_bench_joint.db", &j))
            return -1;
        ratio[k] = j.decode_ms / a.decode_ms;
        cpu_ratio[k] = j.cpu_ms / a.cpu_ms;
        printf("  pair %d  alone: feed+decode %6.0f ms, %.1f tok/s, %5.2f CPU-s | joint: feed+decode %6.0f ms, %.1f "
               "tok/s, %5.2f CPU-s | %ld sequence-steps each | decode %.2fx wall, whole %.2fx CPU\n",
               k + 1, a.decode_ms, a.generated / (a.decode_ms / 1e3), a.cpu_ms / 1e3, j.decode_ms,
               j.generated / (j.decode_ms / 1e3), j.cpu_ms / 1e3, a.generated, ratio[k], cpu_ratio[k]);
        fflush(stdout);
    }
    unlink("/tmp/kvbench_bench_alone.db");
    unlink("/tmp/kvbench_bench_joint.db");
    printf("across_samples_decode_ratio %.2f   (joint / alone, feed+decode wall; whole-run CPU %.2fx; medians of %d "
           "pairs)\n", median(ratio, rounds), median(cpu_ratio, rounds), rounds);
    return 0;
}

/* One `kvbench run CONFIG` child: its CPU seconds, wall seconds and peak RSS. Its output goes to log. */
static int run_process(const char *kvbench, const char *config_path, const char *db, const char *log,
                       BenchClock *spent, double *rss_mib) {
    unlink(db);
    fflush(stdout); /* or the child would print this process's pending output again */
    BenchClock t = bench_clock();
    pid_t pid = fork();
    if (pid < 0) return perror("bench_runs: fork"), -1;
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr)) _exit(127);
        execl(kvbench, kvbench, "run", config_path, "--db", db, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) return perror("bench_runs: wait4"), -1;
    spent->wall_s = bench_clock().wall_s - t.wall_s;
    spent->cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    *rss_mib = ru.ru_maxrss / 1024.0;
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "bench_runs: %s run %s failed (status %d); its output is in %s\n", kvbench, config_path,
                status, log);
        return -1;
    }
    unlink(db);
    return 0;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) return fprintf(stderr, "bench_runs: cannot write %s\n", path), -1;
    return 0;
}

/* Part 2: the two configs as whole processes, alternately. */
static int per_process(const char *kvbench, const char *full, const char *sweep, int rounds) {
    const char *cf = "/tmp/kvbench_bench_full.json", *cs = "/tmp/kvbench_bench_sweep.json",
               *log = "/tmp/kvbench_bench_runs.log";
    double ratio[MAX_ROUNDS], wall_ratio[MAX_ROUNDS];
    if (write_file(cf, full) || write_file(cs, sweep)) return -1;
    for (int k = 0; k < rounds; k++) {
        BenchClock f, s;
        double rss_f, rss_s;
        if (run_process(kvbench, cf, "/tmp/kvbench_bench_full.db", log, &f, &rss_f) ||
            run_process(kvbench, cs, "/tmp/kvbench_bench_sweep.db", log, &s, &rss_s))
            return -1;
        ratio[k] = s.cpu_s / f.cpu_s;
        wall_ratio[k] = s.wall_s / f.wall_s;
        printf("  pair %d  full: %5.2f CPU-s %5.2f s %4.0f MiB | sweep: %5.2f CPU-s %5.2f s %4.0f MiB | %.2fx CPU, "
               "%.2fx wall\n", k + 1, f.cpu_s, f.wall_s, rss_f, s.cpu_s, s.wall_s, rss_s, ratio[k], wall_ratio[k]);
        fflush(stdout);
    }
    unlink(cf);
    unlink(cs);
    unlink(log);
    printf("sweep_ratio_process %.2f   (CPU seconds, median of %d pairs; wall %.2fx)\n", median(ratio, rounds),
           rounds, median(wall_ratio, rounds));
    return 0;
}

/* Decode tokens per wall-second (generate's own step timer) and per CPU-second (this process, the whole
 * generate call: one prompt token and `steps` steps) of n_seqs sequences on views (or copies) of one prefilled
 * cache. */
static int decode_rate(Backend *be, const KvCache *prefill, int n_seqs, int steps, double *tok_s, double *tok_cpu_s,
                       KvErr *err) {
    const ModelConfig *c = &be->model->cfg;
    KeepSet all;
    KvCache *caches[16] = {0};
    TokenIds out[16];
    GenerateStats gs;
    int prompt = 13, rc = keepset_full(&all, c->n_layers, c->n_kv_heads, prefill->n_pos, err);
    for (int i = 0; i < n_seqs && !rc; i++)
        rc = (be->cache_view ? be->cache_view : be->cache_gather)(be, prefill, &all, steps + 1, &caches[i], err);
    GenerateOptions go = {steps, NULL, 0, NULL, GEN_STOP_REFERENCE};
    BenchClock t = bench_clock();
    if (!rc) rc = generate_greedy(be, caches, n_seqs, &prompt, 1, &go, out, &gs, err);
    BenchClock spent = bench_since(t);
    if (!rc) {
        *tok_s = gs.decode_tokens / (gs.decode_ms / 1000);
        *tok_cpu_s = gs.decode_tokens / spent.cpu_s;
        for (int i = 0; i < n_seqs; i++) ids_free(&out[i]);
    }
    for (int i = 0; i < n_seqs; i++)
        if (caches[i]) be->cache_free(be, caches[i]);
    keepset_free(&all);
    return rc;
}

static int bench_decode(const char *model_path, int tokens) {
    Model *m = NULL;
    Backend *be = NULL;
    KvCache *prefill = NULL;
    KvErr err = {{0}};
    double single = 0, batched = 0, single_cpu = 0, batched_cpu = 0;
    int *ids = malloc((size_t)tokens * sizeof *ids), rc = ids ? 0 : -1;
    if (!rc) rc = backend_load_model(&m, "cpu", model_path, &err); /* as runs load it */
    if (!rc) rc = backend_open(&be, "cpu", m, NULL, &err);
    /* Any token sequence serves for timing; a fixed stride through the vocabulary. */
    for (int i = 0; !rc && i < tokens; i++) ids[i] = (int)((17L + 7919L * i) % m->cfg.vocab_size);
    if (!rc) rc = be->cache_new(be, &prefill, tokens, &err);
    if (!rc) rc = be->forward(be, &prefill, 1, ids, tokens, NULL, NULL, NULL, &err);
    if (!rc) rc = decode_rate(be, prefill, 1, 32, &single, &single_cpu, &err);
    if (!rc) rc = decode_rate(be, prefill, 15, 32, &batched, &batched_cpu, &err);
    if (rc) fprintf(stderr, "bench_runs: %s\n", err.msg);
    else
        printf("decode, %d-token caches, 32 steps (tokens per wall-s | per CPU-s): 1 sequence %.1f | %.1f, 15 in one "
               "batch %.1f | %.1f (%.1fx | %.1fx)\n",
               tokens, single, single_cpu, batched, batched_cpu, batched / single, batched_cpu / single_cpu);
    if (prefill) be->cache_free(be, prefill);
    backend_close(be);
    model_free(m);
    free(ids);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int tokens = argc > 2 ? atoi(argv[2]) : 1024, rounds = argc > 3 ? atoi(argv[3]) : 3;
    const char *kvbench = argc > 4 ? argv[4] : "./kvbench";
    if (tokens < 64 || rounds < 1 || rounds > MAX_ROUNDS)
        return fprintf(stderr, "bench_runs: need CONTEXT_TOKENS >= 64 and ROUNDS in 1..%d\n", MAX_ROUNDS), 2;
    char sweep[2048], full[2048];
    const char *fmt =
        "{\"max_new_tokens\": 32, \"models\": [{\"path\": \"%s\", \"name\": \"bench\"}],"
        " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_2\"], \"target_tokens\": %d, \"n_samples\": 1}],"
        " \"policies\": [%s], \"budgets\": [\"20%%\", \"40%%\"]}";
    snprintf(sweep, sizeof sweep, fmt, model, tokens,
             "\"full\", \"streamingllm\", \"snapkv\", \"adakv\", \"cake\", \"criticalkv\", \"defensivekv\", "
             "\"layer-defensivekv\"");
    snprintf(full, sizeof full, fmt, model, tokens, "\"full\"");
    printf("bench_runs: %s, one RULER niah_single_2 sample at %d tokens, answers capped at 32 tokens\n", model, tokens);
    printf("per sample (the runner's stored timings; full-cache run vs the sweep of 8 policies x 2 budgets):\n");
    if (per_sample(full, sweep, rounds)) return 1;
    printf("per whole process (%s run, getrusage of the child):\n", kvbench);
    if (per_process(kvbench, full, sweep, rounds)) return 1;
    if (bench_decode(model, tokens)) return 1;
    char alone[2048], joint[2048];
    const char *fmt4 =
        "{\"max_new_tokens\": 32, \"decode_samples\": %d, \"models\": [{\"path\": \"%s\", \"name\": \"bench\"}],"
        " \"datasets\": [{\"suite\": \"ruler\", \"tasks\": [\"niah_single_2\"], \"target_tokens\": %d,"
        " \"n_samples\": 4}], \"policies\": [\"full\", \"streamingllm\", \"snapkv\", \"adakv\", \"cake\", \"criticalkv\", \"defensivekv\","
        " \"layer-defensivekv\"], \"budgets\": [\"20%%\", \"40%%\"]}";
    snprintf(alone, sizeof alone, fmt4, 1, model, tokens);
    snprintf(joint, sizeof joint, fmt4, 4, model, tokens);
    printf("decode across samples (4 RULER niah_single_2 samples x 15 variants; decode_samples 1 vs 4):\n");
    return across_samples(alone, joint, rounds) ? 1 : 0;
}
