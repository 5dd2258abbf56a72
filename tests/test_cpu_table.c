/* test_cpu_table.c — the CPU backend's kernel table held to the plain reference forward (engine/cpu/reference.c),
 * entry by entry through whole forwards, at every instruction-set level this CPU has (scalar always), on a GGUF
 * of Q4_0 / Q4_1 / Q8_0 blocks (tests/data/gguf/tiny_llama.gguf: the 4-bit and int8 code kernels, rebuilt
 * tiles, tied embeddings) and an f32 Qwen2 checkpoint with q/k/v biases (tests/data/models/tiny-qwen2-hf: the
 * BLAS products):
 *  - exact path: a 40-token prefill's logits (past the code kernels' 32 rows: BLAS on rebuilt tiles, on the fast
 *    path too), then 4 decode steps of 3 sequences and of 34 sequences (past the code kernels' 32 rows), each
 *    sequence's logits within 1e-5 of the reference's (max |diff| / max |ref|: f32
 *    sums in another order than the reference's double ones); the 3- and 34-sequence steps equal the
 *    1-sequence step on the same rows bit for bit where both read the code kernels;
 *  - fast path (codes only): within 5e-2 of the reference (int8 activations); a step of 34 sequences equals 34
 *    single steps bit for bit (the fast arithmetic, not the exact BLAS products, ran past 32 rows); a step with a
 *    trace hook gives the logits of the step without one bit for bit (the trace rides the decode path that ran);
 *    on f32 matrices it is refused; measured: exact <= 1.4e-6, fast <= 3.6e-2;
 *  - the report: backend_options_used names what ran, and backend_setup_label makes a row's setup from it only
 *    (",decode=fast2" for the fast decode, ",simd=LEVEL" for a level other than the automatic one). */
#include <string.h>

#include "../engine/backend.h"
#include "../engine/cpu/kernels.h"
#include "../engine/cpu/reference.h"
#include "decode_run.h"
#include "test.h"

enum { PROMPT = 40, STEPS = 4, WIDE = 34, MAXB = WIDE }; /* a prompt past the code kernels' 32 rows */


/* Token t of sequence b (prompt, then the fed tokens of the decode steps): fixed, so the reference can replay it. */
static int token_at(int b, int t, int V) { return (int)((7u * (unsigned)t + 13u * (unsigned)b + 3u) % (unsigned)V); }

static int trace_calls;
static void count_trace(void *user, int seq, int layer, int head, const float *probs, const int *positions, int n) {
    (void)user, (void)seq, (void)layer, (void)head, (void)probs, (void)positions, (void)n;
    trace_calls++;
}

static int run(Backend *be, int B, int steps, float *logits, const TraceHook *trace, KvErr *err) {
    return decode_run(be, B, PROMPT, steps, token_at, logits, trace, err);
}

/* The reference's logits for sequence b after step s. */
static void reference(const Model *ref, int b, int s, float *out) {
    int ids[PROMPT + STEPS];
    for (int t = 0; t < PROMPT + s; t++) ids[t] = token_at(b, t, ref->cfg.vocab_size);
    KvErr err = {{0}};
    if (cpu_reference_forward(ref, ids, PROMPT + s, out, &err)) fprintf(stderr, "%s\n", err.msg);
}

static void check_model(TestCounts *tc, const char *spec, int packed) {
    KvErr err = {{0}};
    Model *ref = NULL, *m = NULL;
    if (model_load(&ref, spec, &err) || backend_load_model(&m, "cpu", spec, &err)) {
        CHECK(tc, 0, "%s: %s", spec, err.msg);
        model_free(ref);
        return;
    }
    int V = m->cfg.vocab_size;
    /* the reference's logits of every (sequence, step), computed once */
    float *want = malloc(sizeof(float) * (STEPS + 1) * MAXB * V), *got = malloc(sizeof(float) * (STEPS + 1) * MAXB * V),
          *one = malloc(sizeof(float) * (STEPS + 1) * MAXB * V), *traced = malloc(sizeof(float) * (STEPS + 1) * 3 * V);
    for (int s = 0; s <= STEPS; s++)
        for (int b = 0; b < WIDE; b++) reference(ref, b, s, want + ((size_t)s * MAXB + b) * V);
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int li = 0; li < 3; li++) {
        CpuKernels probe;
        if (cpu_kernels_init(&probe, levels[li], NULL, &err)) {
            printf("test_cpu_table: %s: %s\n", spec, err.msg);
            continue;
        }
        for (int fast = 0; fast < 2; fast++) {
            BackendOptions opt = {.decode = fast ? BACKEND_DECODE_FAST : BACKEND_DECODE_EXACT}, used;
            snprintf(opt.simd, sizeof opt.simd, "%s", levels[li]);
            Backend *be = NULL;
            int rc = backend_open(&be, "cpu", m, &opt, &err);
            if (fast && !packed) {
                CHECK(tc, rc == -1 && strstr(err.msg, "block codes"), "%s: fast decode on f32 matrices refused: %s",
                      spec, err.msg);
                continue;
            }
            CHECK(tc, rc == 0, "%s %s: %s", spec, levels[li], err.msg);
            if (rc) continue;
            const char *path = fast ? "fast" : "exact";
            double tol = fast ? 5e-2 : 1e-5;
            backend_options_used(be, &used);
            char label[64];
            backend_setup_label(&used, label, sizeof label);
            char expect[64];
            snprintf(expect, sizeof expect, "%s%s%s", fast ? ",decode=fast2" : "", used.simd_auto ? "" : ",simd=",
                     used.simd_auto ? "" : levels[li]);
            CHECK(tc, used.decode == opt.decode && !strcmp(used.simd, levels[li]) && !strcmp(label, expect),
                  "%s %s %s: the report names what ran and the label comes from it ('%s', want '%s')", spec,
                  levels[li], path, label, expect);
            /* B = 1, 3, 34 against the reference, and against each other */
            const int widths[] = {1, 3, WIDE};
            for (int wi = 0; wi < 3; wi++) {
                int B = widths[wi];
                float *out = wi == 0 ? one : got;
                CHECK(tc, run(be, B, STEPS, out, NULL, &err) == 0, "%s: %s", spec, err.msg);
                double worst = 0;
                for (int s = 0; s <= STEPS; s++)
                    for (int b = 0; b < B; b++)
                        worst = fmax(worst, rel_err(out + ((size_t)s * B + b) * V, want + ((size_t)s * MAXB + b) * V, V));
                CHECK(tc, worst <= tol, "%s %s %s, %d sequences: prefill and %d decode steps within %.0e of the "
                      "reference forward (%.3g)", spec, levels[li], path, B, STEPS, tol, worst);
                printf("test_cpu_table: %s %s %s, %d sequences: worst relative error vs the reference %.3g\n", spec,
                       levels[li], path, B, worst);
                if (wi == 0) continue;
                /* the 1-sequence step on sequence 0 (every sequence runs alone in the B = 1 pass only for b = 0) */
                int same = 1;
                for (int s = 1; s <= STEPS; s++) same &= !memcmp(out + (size_t)s * B * V, one + (size_t)s * V, sizeof(float) * V);
                if (fast || (packed && B <= 32))
                    CHECK(tc, same, "%s %s %s: sequence 0 of a %d-sequence step equals the 1-sequence step bit for bit",
                          spec, levels[li], path, B);
            }
            /* a trace hook rides the same decode path: the same logits */
            TraceHook hook = {count_trace, NULL};
            trace_calls = 0;
            CHECK(tc, run(be, 3, STEPS, traced, &hook, &err) == 0, "%s: traced: %s", spec, err.msg);
            CHECK(tc, run(be, 3, STEPS, got, NULL, &err) == 0, "%s: %s", spec, err.msg);
            CHECK(tc, !memcmp(traced, got, sizeof(float) * (STEPS + 1) * 3 * V) &&
                          trace_calls == STEPS * 3 * m->cfg.n_layers * m->cfg.n_heads,
                  "%s %s %s: a traced decode gives the untraced logits bit for bit (%d of %d attention rows traced)",
                  spec, levels[li], path, trace_calls, STEPS * 3 * m->cfg.n_layers * m->cfg.n_heads);
            backend_close(be);
        }
    }
    free(want), free(got), free(one), free(traced);
    model_free(ref);
    model_free(m);
}

int main(void) {
    TestCounts tc = {"test_cpu_table", 0, 0, 0};
    check_model(&tc, "tests/data/gguf/tiny_llama.gguf", 1);
    check_model(&tc, "tests/data/models/tiny-qwen2-hf", 0);
    return test_finish(&tc);
}
