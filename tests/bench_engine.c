/* bench_engine.c — speed and memory of kvbench's CPU backend on one model (SmolLM2-135M by default), in the
 * style of llama-bench: one prefill each of 512, 2048 and 8192 random tokens on an empty cache, peak RSS after
 * the longest, single-sequence decode (64 steps after a 128-token prompt) and 16 sequences decoding together
 * (16 steps), the cost of one 16-sequence step against one single-sequence step; the sweep's shape: 16
 * variants (20% and 40% of a 1024-token prefill, views of it) decoding together against the full cache
 * alone; the same decodes on the opt-in FAST path (KVBENCH_DECODE=fast; its 16-sequence step against its own
 * and the exact single step), and the head-variable cache bytes at a 20% budget vs full. tests/peer_llama.c
 * measures llama.cpp the same way; tests/run_bench.sh runs the two alternately and prints medians of the
 * per-pair ratios.
 * Output: "key tokens_per_wall_s tokens_per_cpu_s" per measurement (tests/bench_util.h), after a header.
 * Usage: bench_engine [MODEL] [--quick] [--max-prefill N] [--backend NAME] [--decode-context N]
 *                     [--variants-context N]
 * (--decode-context: the prompt length before the decodes, default 128; --variants-context: the prefill the
 * 16 variants share, default 1024; --quick: short decodes and --max-prefill 512; the prefills are those of
 * 512, 2048, 8192 up to N; backend default cpu; threads: OMP_NUM_THREADS; the CPU backend's opt-in paths from
 * the environment as in a run: KVBENCH_CACHE=f16 for the half-precision cache, KVBENCH_DECODE=fast; the
 * header names them) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/kvcache.h"
#include "../runs/util.h"
#include "bench_util.h"

/* One prefill of n tokens on an empty cache. */
static int bench_prefill(Backend *be, int n, BenchClock *spent, KvErr *err) {
    int *ids = malloc(sizeof(int) * n);
    KvCache *c;
    if (!ids) return kv_fail(err, "out of memory");
    bench_random_ids(ids, n, be->model->cfg.vocab_size, 7);
    int rc = be->cache_new(be, &c, n, err);
    if (!rc) {
        BenchClock t = bench_clock();
        rc = be->forward(be, &c, 1, ids, n, NULL, NULL, NULL, err);
        *spent = bench_since(t);
        be->cache_free(be, c);
    }
    free(ids);
    return rc;
}

/* B sequences after a prompt of `context` tokens, `steps` single-token steps together. */
static int bench_decode(Backend *be, int B, int context, int steps, BenchClock *spent, KvErr *err) {
    int V = be->model->cfg.vocab_size, rc = 0, made = 0;
    int *ids = malloc(sizeof(int) * context), tok[64];
    float *logits = malloc(sizeof(float) * (size_t)B * V);
    KvCache *caches[64];
    if (!ids || !logits) rc = kv_fail(err, "out of memory");
    if (!rc) bench_random_ids(ids, context, V, 11);
    for (; !rc && made < B; made++) {
        if (be->cache_new(be, &caches[made], context + steps, err)) {
            rc = -1;
            break;
        }
        rc = be->forward(be, &caches[made], 1, ids, context, NULL, NULL, NULL, err);
        tok[made] = ids[made];
    }
    BenchClock t = bench_clock();
    for (int s = 0; !rc && s < steps; s++) rc = be->forward(be, caches, B, tok, 1, logits, NULL, NULL, err);
    *spent = bench_since(t);
    for (int b = 0; b < made; b++) be->cache_free(be, caches[b]);
    free(ids);
    free(logits);
    return rc;
}

/* The sweep's decode: one prefill of `context` tokens; 16 variants that keep 20% (8 of them) and 40% (8) of
 * every head's entries, each head a different scattered subset (as a policy's keep-set is), as views of the
 * prefill (Backend.cache_view, what the sweep decodes on; gathered copies where the backend has no views);
 * `steps` single-token steps of the full cache alone (one), then of the 16 variants together (sixteen). */
static int bench_decode_variants(Backend *be, int context, int steps, BenchClock *one, BenchClock *sixteen,
                                 KvErr *err) {
    const ModelConfig *c = &be->model->cfg;
    int V = c->vocab_size, n_heads = c->n_layers * c->n_kv_heads, made = 0, rc = 0, tok[16];
    int *ids = malloc(sizeof(int) * context), *counts = malloc(sizeof(int) * n_heads);
    float *logits = malloc(sizeof(float) * 16 * V);
    KvCache *full = NULL, *variants[16];
    if (!ids || !counts || !logits) rc = kv_fail(err, "out of memory");
    if (!rc) bench_random_ids(ids, context, V, 13);
    if (!rc) rc = be->cache_new(be, &full, context + steps, err) || be->forward(be, &full, 1, ids, context, NULL, NULL, NULL, err);
    unsigned state = 5;
    for (; !rc && made < 16; made++) {
        KeepSet ks;
        for (int h = 0; h < n_heads; h++) counts[h] = (int)(context * (made < 8 ? 0.2 : 0.4));
        if (keepset_init(&ks, c->n_layers, c->n_kv_heads, counts, err)) {
            rc = -1;
            break;
        }
        for (int h = 0; h < n_heads; h++) /* an ascending random subset: position p kept with odds needed/left */
            for (int p = 0, j = 0; j < counts[h]; p++) {
                state = state * 1664525u + 1013904223u;
                if ((int)((state >> 8) % (unsigned)(context - p)) < counts[h] - j) ks.positions[ks.offsets[h] + j++] = p;
            }
        rc = (be->cache_view ? be->cache_view : be->cache_gather)(be, full, &ks, steps, &variants[made], err);
        keepset_free(&ks);
        if (rc) break;
        tok[made] = ids[made];
    }
    BenchClock t = bench_clock();
    for (int s = 0; !rc && s < steps; s++) rc = be->forward(be, &full, 1, tok, 1, logits, NULL, NULL, err);
    *one = bench_since(t);
    t = bench_clock();
    for (int s = 0; !rc && s < steps; s++) rc = be->forward(be, variants, 16, tok, 1, logits, NULL, NULL, err);
    *sixteen = bench_since(t);
    for (int b = 0; b < made; b++) be->cache_free(be, variants[b]);
    if (full) be->cache_free(be, full);
    free(ids);
    free(counts);
    free(logits);
    return rc;
}

/* Prints the variants' decode (bench_decode_variants) as rates and the step ratio (wall, CPU), under `tag`. */
static int report_variants(Backend *be, const char *tag, int context, int steps, KvErr *err) {
    BenchClock one, sixteen;
    if (bench_decode_variants(be, context, steps, &one, &sixteen, err)) return -1;
    char key[64];
    snprintf(key, sizeof key, "decode_full_1%s", tag);
    bench_print_rate(key, steps, one);
    snprintf(key, sizeof key, "decode_variants_16%s", tag);
    bench_print_rate(key, 16.0 * steps, sixteen);
    printf("decode_variants_16%s_step_vs_full_1 %.2f %.2f\n", tag, (sixteen.wall_s / steps) / (one.wall_s / steps),
           (sixteen.cpu_s / steps) / (one.cpu_s / steps));
    return 0;
}

int main(int argc, char **argv) {
    const char *spec = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int quick = 0, max_prefill = 8192, decode_context = 128, variants_context = 1024;
    const char *backend = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1, max_prefill = 512;
        else if (!strcmp(argv[i], "--max-prefill") && i + 1 < argc) max_prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--decode-context") && i + 1 < argc) decode_context = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variants-context") && i + 1 < argc) variants_context = atoi(argv[++i]);
        else spec = argv[i];
    }
    if (decode_context < 1 || decode_context > 1 << 20 || variants_context < 5 || variants_context > 1 << 20) {
        fprintf(stderr, "bench_engine: --decode-context must be 1..1048576, --variants-context 5..1048576\n");
        return 2;
    }
    KvErr err = {{0}};
    Model *m;
    Backend *be;
    /* the options a run would take from the environment (KVBENCH_CACHE, KVBENCH_SIMD, ...), read as kvbench's
     * runs layer reads them */
    BackendOptions opt;
    if (util_backend_options(&opt, NULL, NULL, NULL, &err) ||
        backend_load_model(&m, backend, spec, &err) || backend_open(&be, backend, m, &opt, &err)) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    const char *cache = getenv("KVBENCH_CACHE"), *decode = getenv("KVBENCH_DECODE");
    printf("# bench_engine: %s, %s backend, %d OpenMP threads, cache %s, decode %s after %d tokens\n", spec, backend,
           omp_get_max_threads(), cache && *cache ? cache : "f32", decode && *decode ? decode : "exact", decode_context);
    BenchClock spent;
    if (bench_prefill(be, 64, &spent, &err)) goto fail; /* first touch of weights and scratch */
    const int lens[] = {512, 2048, 8192};
    int longest = 0;
    for (int i = 0; i < 3 && lens[i] <= max_prefill; i++) {
        longest = lens[i];
        char key[32];
        if (bench_prefill(be, lens[i], &spent, &err)) goto fail;
        snprintf(key, sizeof key, "prefill_%d", lens[i]);
        bench_print_rate(key, lens[i], spent);
    }
    printf("peak_rss_mib %.0f\n", bench_peak_rss_mib());
    int steps = quick ? 16 : 64, steps_16 = quick ? 4 : 16;
    BenchClock one;
    if (bench_decode(be, 1, decode_context, steps, &one, &err)) goto fail;
    bench_print_rate("decode_1", steps, one);
    if (bench_decode(be, 16, decode_context, steps_16, &spent, &err)) goto fail;
    bench_print_rate("decode_16", 16.0 * steps_16, spent);
    /* what one step of 16 sequences costs against one step of one (wall, CPU): 16 x the multiply-adds, the
     * weights read and converted once */
    printf("decode_16_step_vs_1 %.2f %.2f\n", (spent.wall_s / steps_16) / (one.wall_s / steps),
           (spent.cpu_s / steps_16) / (one.cpu_s / steps));
    if (report_variants(be, "", variants_context, steps_16, &err)) goto fail;
    /* the same decodes on the opt-in FAST path (decode fast: a second backend),
     * and a fast 16-sequence step against the fast and the exact single-sequence steps */
    {
        Backend *fast;
        BenchClock one_fast;
        BackendOptions fast_opt = opt;
        fast_opt.decode = BACKEND_DECODE_FAST;
        int rc = backend_open(&fast, backend, m, &fast_opt, &err);
        if (rc) { /* refused where it cannot run (matrices not held as block codes): said, not measured */
            printf("# decode fast: not measured (%s)\n", err.msg);
            goto after_fast;
        }
        rc = bench_decode(fast, 1, 128, steps, &one_fast, &err) || bench_decode(fast, 16, 128, steps_16, &spent, &err);
        BenchClock fast_spent = spent;
        if (!rc) rc = report_variants(fast, "_fast", variants_context, steps_16, &err);
        spent = fast_spent;
        backend_close(fast);
        if (rc) goto fail;
        bench_print_rate("decode_1_fast", steps, one_fast);
        bench_print_rate("decode_16_fast", 16.0 * steps_16, spent);
        printf("decode_16_fast_step_vs_1 %.2f %.2f\n", (spent.wall_s / steps_16) / (one_fast.wall_s / steps),
               (spent.cpu_s / steps_16) / (one_fast.cpu_s / steps));
        printf("decode_16_fast_step_vs_exact_1 %.2f %.2f\n", (spent.wall_s / steps_16) / (one.wall_s / steps),
               (spent.cpu_s / steps_16) / (one.cpu_s / steps));
    }
after_fast:
    /* memory of a head-variable cache: 20% of an 8k context per head vs all of it */
    {
        const ModelConfig *c = &m->cfg;
        int L = longest ? longest : 512, n_heads = c->n_layers * c->n_kv_heads;
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
        size_t elem = kvcache_elem_bytes(full->elem);
        printf("cache_full_bytes %zu\ncache_20pct_bytes %zu\ncache_context %d\n", kvcache_bytes_used(full, elem),
               kvcache_bytes_used(g, elem), L);
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
