/* test_cpu_types.c — the CPU backend on every GGUF block type kvbench dequantises, read from the codes: for each
 * type (f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs; a type whose
 * dequantiser this build lacks is skipped with a printed line, so a new one is tested as soon as it lands), a
 * 1-layer Llama GGUF whose every matrix is random blocks of that type (tests/gguf_writer.h; D = F = 256, so
 * super-blocks of 256 fit a row) is opened twice:
 *  - as runs open it (backend_load_model: the backend keeps each matrix's blocks, or the codes they pack to), and
 *  - on the f32 weights the loader dequantises (model_load: every matrix rebuilt to f32 up front);
 * a 12-token prefill and 4 decode steps of 1 and of 3 sequences give the same logits bit for bit on both, at
 * every instruction-set level this CPU has, and are within 1e-5 of the plain reference forward
 * (engine/cpu/reference.c; max |diff| / max |ref|). Each level's rebuild entry of a block type equals gguf.c's
 * dequantiser bit for bit (NaN as NaN) on random blocks, zero / subnormal / largest / infinite / NaN scales included. (What
 * the codes save in memory: tests/rss_8b.sh.) */
#include <string.h>
#include <unistd.h>

#include "../engine/backend.h"
#include "../engine/cpu/reference.h"
#include "decode_run.h"
#include "gguf_writer.h"
#include "test.h"

enum { PROMPT = 12, STEPS = 4, B = 3 };


static int token_at(int b, int t, int V) { return (int)((5u * (unsigned)t + 11u * (unsigned)b + 1u) % (unsigned)V); }

/* logits[s][b][V] of n_seqs sequences: the prompt's last position (s = 0), then each decode step. */
static int run(Backend *be, int n_seqs, float *logits, KvErr *err) {
    return decode_run(be, n_seqs, PROMPT, STEPS, token_at, logits, NULL, err);
}

static void check_type(TestCounts *tc, int type, const char *dir) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    if (!t || !t->dequant) {
        SKIP(tc, "type %d (%s): this build has no dequantiser for it", type, t ? t->name : "?");
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/tiny_%s.gguf", dir, t->name);
    const GgufShape shape = {1, 256, 2, 1, 256, 48};
    CHECK(tc, gguf_write_llama(path, &shape, type) == 0, "%s: written", path);
    KvErr err = {{0}};
    Model *codes = NULL, *f32 = NULL;
    if (backend_load_model(&codes, "cpu", path, &err) || model_load(&f32, path, &err)) {
        CHECK(tc, 0, "%s: %s", path, err.msg);
        model_free(codes);
        model_free(f32);
        return;
    }
    int V = codes->cfg.vocab_size, n = (STEPS + 1) * B * V;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * V);
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int li = 0; li < 3; li++) {
        CpuKernels probe;
        if (cpu_kernels_init(&probe, levels[li], NULL, &err)) continue;
        BackendOptions opt = {.decode = BACKEND_DECODE_EXACT};
        snprintf(opt.simd, sizeof opt.simd, "%s", levels[li]);
        Backend *be_codes = NULL, *be_f32 = NULL;
        int rc = backend_open(&be_codes, "cpu", codes, &opt, &err) || backend_open(&be_f32, "cpu", f32, &opt, &err);
        CHECK(tc, rc == 0, "%s %s: %s", t->name, levels[li], err.msg);
        if (rc) {
            backend_close(be_codes);
            continue;
        }
        for (int seqs = 1; seqs <= B; seqs += B - 1) {
            CHECK(tc, run(be_codes, seqs, a, &err) == 0 && run(be_f32, seqs, b, &err) == 0, "%s: %s", t->name, err.msg);
            CHECK(tc, !memcmp(a, b, sizeof(float) * (STEPS + 1) * seqs * V),
                  "%s %s, %d sequences: the logits from the codes equal those from the dequantised f32 weights bit for bit",
                  t->name, levels[li], seqs);
        }
        /* against the reference forward (3 sequences, every step) */
        double worst = 0;
        for (int s = 0; s <= STEPS; s++)
            for (int q = 0; q < B; q++) {
                int ids[PROMPT + STEPS];
                for (int i = 0; i < PROMPT + s; i++) ids[i] = token_at(q, i, V);
                CHECK(tc, cpu_reference_forward(f32, ids, PROMPT + s, want, &err) == 0, "%s", err.msg);
                worst = fmax(worst, rel_err(a + ((size_t)s * B + q) * V, want, V));
            }
        CHECK(tc, worst <= 1e-5, "%s %s: within 1e-5 of the reference forward (%.3g)", t->name, levels[li], worst);
        if (li == 0) printf("test_cpu_types: %s: worst relative error vs the reference forward %.3g\n", t->name, worst);
        backend_close(be_codes);
        backend_close(be_f32);
    }
    free(a), free(b), free(want);
    model_free(codes);
    model_free(f32);
    unlink(path);
}

/* Every level's rebuild entry for `type` against gguf.c's dequantiser, bit for bit, on blocks of random bytes
 * (every bit pattern of codes and scales) and on blocks whose f16 scale fields are set to zero, +-subnormal, the
 * largest finite value, +-infinity and a NaN. An infinite or NaN scale gives infinite or NaN weights; a NaN's
 * sign and payload are the compiler's (clang builds gguf.c's x - m as x + -m), so NaN only has to stay NaN. */
static void check_rebuild(TestCounts *tc, int type) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    if (!t || !t->dequant || t->block < 2) return;
    enum { BLOCKS = 64 };
    static const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7D01};
    size_t bytes = (size_t)BLOCKS * t->bytes, n = (size_t)BLOCKS * t->block;
    uint8_t *raw = malloc(bytes);
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    for (size_t i = 0; i < bytes; i++) raw[i] = (uint8_t)gguf_writer_rand();
    for (size_t li = 0; li < sizeof GGUF_BLOCK_LAYOUTS / sizeof GGUF_BLOCK_LAYOUTS[0]; li++)
        for (int b = 0; GGUF_BLOCK_LAYOUTS[li].type == type && b < BLOCKS / 2; b++)
            for (int k = 0; k < GGUF_BLOCK_LAYOUTS[li].n_f16; k++)
                memcpy(raw + (size_t)b * t->bytes + GGUF_BLOCK_LAYOUTS[li].f16_at[k],
                       &special[(b + k) % (sizeof special / sizeof special[0])], 2);
    t->dequant(raw, want, BLOCKS);
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int li = 0; li < 3; li++) {
        CpuKernels k;
        KvErr err = {{0}};
        if (cpu_kernels_init(&k, levels[li], NULL, &err)) continue;
        memset(got, 0xA5, sizeof(float) * n);
        k.rebuild[type](raw, got, BLOCKS);
        size_t differ = 0, nans = 0;
        for (size_t i = 0; i < n; i++) {
            nans += isnan(want[i]);
            differ += isnan(want[i]) ? !isnan(got[i]) : memcmp(&got[i], &want[i], sizeof(float)) != 0;
        }
        CHECK(tc, differ == 0,
              "%s %s: the table's rebuild equals gguf.c's dequantiser bit for bit (%d blocks, special scales included; "
              "%zu NaN weights, NaN where it is NaN): %zu differ", t->name, levels[li], BLOCKS, nans, differ);
    }
    free(raw), free(want), free(got);
}

int main(void) {
    TestCounts tc = {"test_cpu_types", 0, 0, 0};
    char dir[] = "/tmp/kvbench_types_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    const int types[] = {1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_rebuild(&tc, types[i]);
        check_type(&tc, types[i], dir);
    }
    rmdir(dir);
    return test_finish(&tc);
}
