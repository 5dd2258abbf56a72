/* bench_policies.c — cost of the eviction policies at SmolLM2-135M shapes (N=30, H=9, K=3, d=64, D=576)
 * and an 8192-token context, on synthetic observations: per policy, the scoring of all layers
 * (policy_observe) and one selection (policy_select) at 20% and 40%; plus observation_prepare for one layer
 * (window attention and value norms, computed once per layer and shared by every policy of a sweep).
 * Prints milliseconds, policy_selection_ms (every policy's scoring of all layers and two selections) and
 * policy_observation_ms (N shared observations), which tests/run_bench.sh divides by the measured prefill time
 * of the same context (target <= 5%). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../engine/observation.h"
#include "../policies/policy.h"

enum { N = 30, H = 9, K = 3, d = 64, D = 576, L = 8192, W = 32, DISTINCT = 3 };

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f;
}

int main(void) {
    unsigned seed = 1;
    KvErr err;
    /* As in a run: the CPU backend keeps BLAS single-threaded and parallelises with OpenMP itself. */
    openblas_set_num_threads(1);
    /* One real observation_prepare at full size. */
    float *q = malloc(sizeof(float) * H * W * d), *kv = malloc(sizeof(float) * 2 * K * L * d);
    float *w_o = malloc(sizeof(float) * D * H * d);
    for (size_t i = 0; i < (size_t)H * W * d; i++) q[i] = frand(&seed) - 0.5f;
    for (size_t i = 0; i < (size_t)2 * K * L * d; i++) kv[i] = frand(&seed) - 0.5f;
    for (size_t i = 0; i < (size_t)D * H * d; i++) w_o[i] = (frand(&seed) - 0.5f) * 0.1f;
    const float *keys[K], *values[K];
    for (int k = 0; k < K; k++) keys[k] = kv + (size_t)k * L * d, values[k] = kv + (size_t)(K + k) * L * d;
    Observation real = {.n_layers = N, .L = L, .w = W, .H = H, .K = K, .d = d, .D = D, .q_win = q, .keys = keys,
                        .values = values, .w_o = w_o};
    double t0 = now_ms();
    if (observation_prepare(&real, 0, &err)) return fprintf(stderr, "bench: %s\n", err.msg), 1;
    double t1 = now_ms();
    if (observation_prepare(&real, 1, &err)) return fprintf(stderr, "bench: %s\n", err.msg), 1;
    double t2 = now_ms();
    printf("observation_prepare per layer (L=%d): attention %.1f ms, value norms %.1f ms\n", L, t1 - t0, t2 - t1);

    /* DISTINCT synthetic layers (peaked causal softmax rows, positive norms), cycled over the 30 layers. */
    float *attn = malloc(sizeof(float) * DISTINCT * H * W * L), *nu = malloc(sizeof(float) * DISTINCT * K * L);
    for (int l = 0; l < DISTINCT; l++) {
        for (int r = 0; r < H * W; r++) {
            float *row = attn + ((size_t)l * H * W + r) * L;
            int last = L - W + r % W;
            double sum = 0;
            for (int j = 0; j < L; j++) {
                float u = frand(&seed);
                row[j] = j <= last ? expf(8.0f * u * u * u) : 0.0f;
                sum += row[j];
            }
            for (int j = 0; j < L; j++) row[j] = (float)(row[j] / sum);
        }
        for (int t = 0; t < K * L; t++) nu[(size_t)l * K * L + t] = 1.0f + frand(&seed);
    }
    static const char *const policies[] = {"full", "streamingllm", "snapkv", "adakv", "cake", "criticalkv",
                                           "defensivekv", "layer-defensivekv"};
    double observation_ms = N * (t2 - t0), selection_ms = 0; /* the shared observation of every layer */
    printf("%-18s %12s %12s %12s\n", "policy", "observe ms", "select 20%", "select 40%");
    for (int p = 0; p < 8; p++) {
        PolicyConfig cfg;
        PolicyState *st;
        if (policy_config(&cfg, policies[p], NULL, &err) || policy_begin(&st, &cfg, N, K, L, &err))
            return fprintf(stderr, "bench: %s\n", err.msg), 1;
        double a = now_ms();
        for (int l = 0; l < N && policy_needs_attention(&cfg); l++) {
            Observation o = {.layer = l, .n_layers = N, .L = L, .w = W, .H = H, .K = K, .d = d, .D = D,
                             .attn = attn + (size_t)(l % DISTINCT) * H * W * L,
                             .value_norm = nu + (size_t)(l % DISTINCT) * K * L};
            if (policy_observe(st, &o, &err)) return fprintf(stderr, "bench: %s\n", err.msg), 1;
        }
        double b = now_ms(), sel[2];
        for (int i = 0; i < 2; i++) {
            Budget budget = {.keep_fraction = i ? 0.4 : 0.2};
            KeepSet ks;
            double s0 = now_ms();
            if (policy_select(st, &budget, &ks, &err)) return fprintf(stderr, "bench: %s\n", err.msg), 1;
            sel[i] = now_ms() - s0;
            keepset_free(&ks);
        }
        printf("%-18s %12.1f %12.1f %12.1f\n", policies[p], b - a, sel[0], sel[1]);
        selection_ms += (b - a) + sel[0] + sel[1];
        policy_end(st);
    }
    /* For run_bench.sh: what a sweep of the 8 policies x 2 budgets adds to one 8192-token prefill — the
     * policies' own scoring and selection, and the observation they share (window attention, value norms). */
    printf("policy_selection_ms %.1f\npolicy_observation_ms %.1f\n", selection_ms, observation_ms);
    observation_release(&real);
    free(q), free(kv), free(w_o), free(attn), free(nu);
    return 0;
}
