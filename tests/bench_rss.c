/* bench_rss.c MODEL [CONTEXT] [STEPS] — the CPU backend's resident memory on a model as runs open it
 * (backend_load_model + backend_open: weights streamed into the backend's own forms), then a prefill of CONTEXT
 * random tokens (default 8192) into a cache of CONTEXT + STEPS entries and STEPS single-token decode steps
 * (default 4). Prints, in MiB: the resident set after open (VmRSS), after the prefill and decode, and the peak
 * (getrusage ru_maxrss: the whole process, load included), then the wall seconds of each phase. tests/rss_8b.sh
 * runs it on GGUFs of Llama-3.1-8B's shape at two layer counts and extrapolates to 32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "bench_util.h"

static double vm_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atof(line + 6);
    if (f) fclose(f);
    return kib / 1024;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: bench_rss MODEL [CONTEXT] [STEPS]\n");
        return 2;
    }
    int context = argc > 2 ? atoi(argv[2]) : 8192, steps = argc > 3 ? atoi(argv[3]) : 4;
    if (context < 1 || context > 1 << 20 || steps < 0 || steps > 1024) {
        fprintf(stderr, "bench_rss: CONTEXT must be 1..1048576 and STEPS 0..1024\n");
        return 2;
    }
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    KvCache *cache = NULL;
    int *ids = malloc(sizeof(int) * (size_t)(context + steps)), rc = 1;
    float *logits = NULL;
    BenchClock t0 = bench_clock();
    if (!ids || backend_load_model(&m, "cpu", argv[1], &err) || backend_open(&be, "cpu", m, NULL, &err)) goto done;
    BenchClock opened = bench_since(t0);
    double rss_open = vm_rss_mib();
    bench_random_ids(ids, context + steps, m->cfg.vocab_size, 7);
    if (!(logits = malloc(sizeof(float) * (size_t)m->cfg.vocab_size))) goto done;
    t0 = bench_clock();
    if (be->cache_new(be, &cache, context + steps, &err) ||
        be->forward(be, &cache, 1, ids, context, logits, NULL, NULL, &err))
        goto done;
    BenchClock prefill = bench_since(t0);
    t0 = bench_clock();
    for (int s = 0; s < steps; s++)
        if (be->forward(be, &cache, 1, ids + context + s, 1, logits, NULL, NULL, &err)) goto done;
    BenchClock decode = bench_since(t0);
    printf("model %s\nlayers %d\ncontext %d\nrss_after_open_mib %.1f\nrss_after_run_mib %.1f\npeak_rss_mib %.1f\n"
           "open_wall_s %.1f\nprefill_wall_s %.1f\ndecode_wall_s_per_step %.2f\n",
           argv[1], m->cfg.n_layers, context, rss_open, vm_rss_mib(), bench_peak_rss_mib(), opened.wall_s,
           prefill.wall_s, steps ? decode.wall_s / steps : 0.0);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_rss: %s\n", err.msg[0] ? err.msg : "out of memory");
    if (cache) be->cache_free(be, cache);
    backend_close(be);
    model_free(m);
    free(ids);
    free(logits);
    return rc;
}
