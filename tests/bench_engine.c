/* bench_engine.c — speed and memory of the CPU backend on one model (SmolLM2-135M by default), in the
 * style of llama-bench: prefill tokens/s at several context lengths, single-sequence and batched decode
 * tokens/s, peak RSS after the longest prefill, and the head-variable cache bytes at a 20% budget vs full.
 * tests/run_bench.sh runs it next to llama.cpp on the same GGUF and threads and prints the ratios.
 * Output: one "key value" line per measurement (machine-read by run_bench.sh), after a header.
 * Usage: bench_engine [MODEL] [--quick] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/backend.h"
#include "../engine/kvcache.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Peak resident set (VmHWM) in MiB. */
static double peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atof(line + 6);
    if (f) fclose(f);
    return kib / 1024;
}

static void random_ids(int *ids, int n, int vocab, unsigned seed) {
    for (int i = 0; i < n; i++) ids[i] = (int)((seed = seed * 1103515245u + 12345u) >> 8) % vocab;
}

/* Mean and sample sd of reps timings of a prefill of n tokens, as tokens/s. */
static int bench_prefill(Backend *be, int n, int reps, double *mean, double *sd, KvErr *err) {
    int *ids = malloc(sizeof(int) * n);
    random_ids(ids, n, be->model->cfg.vocab_size, 7);
    double sum = 0, sum2 = 0;
    for (int r = 0; r < reps; r++) {
        KvCache *c;
        if (be->cache_new(be, &c, n, err)) return -1;
        double t = now_s();
        int rc = be->forward(be, &c, 1, ids, n, NULL, NULL, NULL, err);
        double tps = n / (now_s() - t);
        be->cache_free(be, c);
        if (rc) return -1;
        sum += tps;
        sum2 += tps * tps;
    }
    free(ids);
    *mean = sum / reps;
    *sd = reps > 1 ? sqrt(fmax(0, (sum2 - sum * sum / reps) / (reps - 1))) : 0;
    return 0;
}

/* B sequences after a prompt of `context` tokens, `steps` single-token steps together: tokens/s over all. */
static int bench_decode(Backend *be, int B, int context, int steps, double *tps, KvErr *err) {
    int V = be->model->cfg.vocab_size;
    int *ids = malloc(sizeof(int) * context), tok[64];
    float *logits = malloc(sizeof(float) * (size_t)B * V);
    KvCache *caches[64];
    random_ids(ids, context, V, 11);
    for (int b = 0; b < B; b++) {
        if (be->cache_new(be, &caches[b], context + steps, err) ||
            be->forward(be, &caches[b], 1, ids, context, NULL, NULL, NULL, err))
            return -1;
        tok[b] = ids[b];
    }
    double t = now_s();
    for (int s = 0; s < steps; s++)
        if (be->forward(be, caches, B, tok, 1, logits, NULL, NULL, err)) return -1;
    *tps = (double)B * steps / (now_s() - t);
    for (int b = 0; b < B; b++) be->cache_free(be, caches[b]);
    free(ids);
    free(logits);
    return 0;
}

int main(int argc, char **argv) {
    const char *spec = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else spec = argv[i];
    }
    KvErr err = {{0}};
    Model *m;
    Backend *be;
    if (model_load(&m, spec, &err) || backend_open(&be, "cpu", m, &err)) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    printf("# bench_engine: %s, cpu backend, %d OpenMP threads\n", spec, omp_get_max_threads());
    double warm, unused;
    if (bench_prefill(be, 64, 1, &warm, &unused, &err)) goto fail; /* first touch of weights and scratch */
    const int lens[] = {512, 2048, 8192}, reps[] = {3, 2, 1};
    for (int i = 0; i < (quick ? 1 : 3); i++) {
        double mean, sd;
        if (bench_prefill(be, lens[i], reps[i], &mean, &sd, &err)) goto fail;
        printf("prefill_%d %.1f %.1f\n", lens[i], mean, sd);
        fflush(stdout);
    }
    printf("peak_rss_mib %.0f\n", peak_rss_mib());
    double tps;
    if (bench_decode(be, 1, 128, quick ? 16 : 64, &tps, &err)) goto fail;
    printf("decode_1 %.1f\n", tps);
    if (bench_decode(be, 16, 128, quick ? 4 : 16, &tps, &err)) goto fail;
    printf("decode_16 %.1f\n", tps);
    /* memory of a head-variable cache: 20% of an 8k context per head vs all of it */
    {
        const ModelConfig *c = &m->cfg;
        int L = quick ? 512 : 8192, n_heads = c->n_layers * c->n_kv_heads;
        KvCache *full;
        if (be->cache_new(be, &full, L, &err)) goto fail;
        for (int h = 0; h < n_heads; h++) {
            full->len[h] = L;
            for (int j = 0; j < L; j++) full->pos[h][j] = j;
        }
        full->n_pos = L;
        int *counts = malloc(sizeof(int) * n_heads);
        for (int h = 0; h < n_heads; h++) counts[h] = (int)(L * 0.2);
        KeepSet ks;
        KvCache *g;
        if (keepset_init(&ks, c->n_layers, c->n_kv_heads, counts, &err)) goto fail;
        for (int h = 0; h < n_heads; h++)
            for (int j = 0; j < counts[h]; j++) ks.positions[ks.offsets[h] + j] = j * 5;
        if (be->cache_gather(be, full, &ks, 0, &g, &err)) goto fail;
        printf("cache_full_bytes %zu\ncache_20pct_bytes %zu\ncache_context %d\n", kvcache_bytes_used(full, 4),
               kvcache_bytes_used(g, 4), L);
        keepset_free(&ks);
        free(counts);
        be->cache_free(be, g);
        be->cache_free(be, full);
    }
    backend_close(be);
    model_free(m);
    return 0;
fail:
    fprintf(stderr, "bench_engine: %s\n", err.msg);
    return 1;
}
