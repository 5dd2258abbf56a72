/* peer_llama.c — llama.cpp measured exactly as tests/bench_engine.c measures kvbench: the same random token
 * ids, one prefill each of 512, 2048 and 8192 tokens on an emptied cache, peak RSS after the longest,
 * single-sequence decode (64 steps after a 128-token prompt), timed by the same clocks (tests/bench_util.h).
 * llama.cpp runs at its own defaults (llama_model_default_params, llama_context_default_params): flash
 * attention `auto`, an f16 cache, n_batch 2048 / n_ubatch 512, extra (repacked) weight buffers on; only the
 * context (the longest prefill) and the thread count are set. BENCH_LLAMA_EXTRA_BUFTS=0 turns the extra buffers off.
 * llama.cpp's log lines that say how it resolved those defaults (flash attention, weight buffers) are printed
 * as comments. Built by tests/run_bench.sh against scripts/build_llama_cpp.sh's libllama (not by the Makefile:
 * the project itself does not depend on llama.cpp).
 * Output: "key tokens_per_wall_s tokens_per_cpu_s" lines, as bench_engine's.
 * Usage: peer_llama MODEL THREADS [--quick] [--max-prefill N]   (as bench_engine's options) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "llama.h"

static void log_resolved_defaults(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)user;
    if (strstr(text, "flash_attn") || strstr(text, "Flash Attention") || strstr(text, "model buffer size") ||
        strstr(text, "KV buffer size") || strstr(text, "compute buffer size")) {
        printf("# llama.cpp: %s", text);
        fflush(stdout); /* the log before a crash is the only account of it */
    }
}

/* Feeds ids[n] to the context in n_batch-sized batches, as llama.cpp's own tools do. */
static int feed(struct llama_context *ctx, int *ids, int n) {
    int n_batch = (int)llama_n_batch(ctx);
    for (int at = 0; at < n; at += n_batch) {
        int len = n - at < n_batch ? n - at : n_batch;
        int rc = llama_decode(ctx, llama_batch_get_one(ids + at, len));
        if (rc) {
            fprintf(stderr, "peer_llama: llama_decode failed (%d) at token %d of %d\n", rc, at, n);
            return -1;
        }
    }
    return 0;
}

static int prefill(struct llama_context *ctx, int n, int vocab, BenchClock *spent) {
    int *ids = malloc(sizeof(int) * n);
    if (!ids) return fprintf(stderr, "peer_llama: out of memory\n"), -1;
    bench_random_ids(ids, n, vocab, 7);
    llama_memory_clear(llama_get_memory(ctx), 1);
    BenchClock t = bench_clock();
    int rc = feed(ctx, ids, n);
    *spent = bench_since(t);
    free(ids);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: peer_llama MODEL THREADS [--quick] [--max-prefill N]\n");
        return 2;
    }
    const char *path = argv[1];
    int threads = atoi(argv[2]), quick = 0, max_prefill = 8192;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1, max_prefill = 512;
        else if (!strcmp(argv[i], "--max-prefill") && i + 1 < argc) max_prefill = atoi(argv[++i]);
        else return fprintf(stderr, "peer_llama: unknown option '%s'\n", argv[i]), 2;
    }
    if (threads < 1) return fprintf(stderr, "peer_llama: threads must be >= 1, got '%s'\n", argv[2]), 2;
    llama_log_set(log_resolved_defaults, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    const char *extra = getenv("BENCH_LLAMA_EXTRA_BUFTS");
    if (extra && !strcmp(extra, "0")) mp.use_extra_bufts = 0;
    printf("# peer_llama: %s, %d threads, use_extra_bufts=%d\n", path, threads, (int)mp.use_extra_bufts);
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) return fprintf(stderr, "peer_llama: llama.cpp could not load %s\n", path), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = max_prefill > 512 ? max_prefill : 512; /* as kvbench, a cache for the longest prefill */
    cp.n_threads = cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "peer_llama: llama.cpp could not create a context\n"), 1;
    int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model)), rc = 0;
    BenchClock spent;
    rc = prefill(ctx, 64, vocab, &spent); /* first touch of weights and buffers, as bench_engine's */
    const int lens[] = {512, 2048, 8192};
    for (int i = 0; !rc && i < 3 && lens[i] <= max_prefill; i++) {
        char key[32];
        rc = prefill(ctx, lens[i], vocab, &spent);
        snprintf(key, sizeof key, "prefill_%d", lens[i]);
        if (!rc) bench_print_rate(key, lens[i], spent);
    }
    if (!rc) printf("peak_rss_mib %.0f\n", bench_peak_rss_mib());
    int steps = quick ? 16 : 64, ids[128];
    bench_random_ids(ids, 128, vocab, 11);
    llama_memory_clear(llama_get_memory(ctx), 1);
    if (!rc) rc = feed(ctx, ids, 128);
    /* bench_engine's decode feeds its first prompt token at each step; the same here. */
    BenchClock t = bench_clock();
    for (int s = 0; !rc && s < steps; s++) rc = feed(ctx, ids, 1);
    spent = bench_since(t);
    if (!rc) bench_print_rate("decode_1", steps, spent);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return rc ? 1 : 0;
}
