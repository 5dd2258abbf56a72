/* test_cpu_matrix.c — the matrix descriptor (engine/cpu/ops.h CpuMatrix, cpu_matrix_init): the form it names and
 * the products it chooses, against the operations they stand for, called directly:
 *  - a matrix of 4-bit codes is CPU_FORM_Q4, of int8 codes CPU_FORM_Q8, of a ggml type's blocks (Q8_0 blocks
 *    here) CPU_FORM_BLOCKS, of f32 only CPU_FORM_F32; FEW products only on 4-bit and int8 codes, FAST ones also
 *    on blocks of a type the fast products take (Q8_0, not Q2_K), the fused feed-forward only on 4-bit codes;
 *  - each product made part by part (3 parts, as a decode step's threads make it) equals, bit for bit, the
 *    ops.h call it stands for: FEW cpu_matmul_q4 / cpu_matmul_q8; FAST the fast kernels' part products on the
 *    table's kernel for M rows (fast_few below 8 rows, fast_many from 8); MANY cpu_matmul on the f32 weights
 *    (those kept, or those the codes rebuild to); the fused feed-forward cpu_ffn_q4; three 4-bit matrices in
 *    one call each one alone; with and without bias and accumulation, M = 1, 5, 9, 40 rows.
 * No tolerance: the descriptor chooses, it does not compute. */
#include <omp.h>
#include <string.h>

#include "../engine/cpu/ops.h"
#include "../engine/gguf.h"
#include "test.h"

static unsigned state = 5;
static float uniform(void) { return ((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f; }

#define N_OUT 72
#define K_IN 96
#define PARTS 3

/* w[N_OUT][K_IN] exact as 4-bit codes (q8 0: code * d + m, d and m f16) or int8 codes (q8 1: code * d). */
static void make_weights(float *w, int q8) {
    for (int r = 0; r < N_OUT; r++)
        for (int b = 0; b < K_IN / 32; b++) {
            float d = kv_f16_to_f32(cpu_f32_to_f16(0.002f + 0.05f * uniform()));
            float m = kv_f16_to_f32(cpu_f32_to_f16(-0.05f - 0.35f * uniform()));
            for (int i = 0; i < 32; i++) {
                int q = q8 ? (int)(255 * uniform()) - 127 : (int)(16 * uniform()) % 16;
                if (!q8 && i < 2) q = i ? 15 : 0;
                w[(size_t)r * K_IN + b * 32 + i] = q8 ? (float)q * d : (float)q * d + m;
            }
        }
}

/* The descriptor's product of kind `kind` on jobs[n_jobs], part by part. */
static void run_parts(const CpuKernels *k, CpuProductFn *f, const CpuProductJob *jobs, int n_jobs, const float *x,
                      int M, int accumulate, float *few, float *many) {
    for (int p = 0; p < PARTS; p++) {
        CpuTile tile = {few, many};
        f(k, jobs, n_jobs, x, M, accumulate, &tile, p, PARTS);
    }
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* Three outputs of `out` floats each set to the same starting values (what accumulate adds to). */
static void reset(float *buf, const float *start, size_t out) {
    for (int j = 0; j < 3; j++) memcpy(buf + j * out, start, out * sizeof(float));
}

int main(void) {
    TestCounts tc = {"test_cpu_matrix", 0, 0, 0};
    CpuKernels k;
    KvErr err = {{0}};
    if (cpu_kernels_init(&k, NULL, NULL, &err)) {
        printf("test_cpu_matrix: %s\n", err.msg);
        return 1;
    }
    omp_set_num_threads(PARTS); /* cpu_matmul's slices: PARTS parts, as run_parts makes them */
    size_t n = (size_t)N_OUT * K_IN, per_row = K_IN / 32;
    float *w4 = malloc(n * sizeof(float)), *w8 = malloc(n * sizeof(float)), *wb = malloc(n * sizeof(float));
    CpuQ4Block *q4 = malloc(n / 32 * sizeof *q4);
    CpuPacked p8 = {malloc(n), malloc(n / 32 * sizeof(float)), malloc(n / 32 * sizeof(float))};
    make_weights(w4, 0);
    make_weights(w8, 1);
    CHECK(&tc, cpu_pack_q4(q4, w4, N_OUT, K_IN) && cpu_pack_exact(&p8, w8, N_OUT, K_IN), "the weights pack");
    /* Q8_0 blocks (an f16 scale, 32 int8 codes) and the f32 weights they rebuild to */
    const GgmlTypeTraits *q8_0 = ggml_type_traits(GGML_Q8_0);
    uint8_t *blocks = malloc((size_t)N_OUT * per_row * q8_0->bytes);
    for (size_t b = 0; b < (size_t)N_OUT * per_row; b++) {
        uint8_t *at = blocks + b * q8_0->bytes;
        uint16_t d = cpu_f32_to_f16(0.001f + 0.01f * uniform());
        memcpy(at, &d, 2);
        for (int i = 0; i < 32; i++) at[2 + i] = (uint8_t)(int8_t)((int)(255 * uniform()) - 127);
    }
    k.rebuild[GGML_Q8_0](blocks, wb, (size_t)N_OUT * per_row);
    CpuBlocks cb = {blocks, GGML_Q8_0, per_row * q8_0->bytes, per_row};

    CpuBlocks q2 = {blocks, GGML_Q2_K, per_row * q8_0->bytes, per_row}; /* a type the fast products refuse */
    CpuMatrix m4, m4f, m8, mb, mq2, mf;
    cpu_matrix_init(&m4, N_OUT, K_IN, NULL, (CpuCodes){q4, NULL, NULL});
    cpu_matrix_init(&m4f, N_OUT, K_IN, w4, (CpuCodes){q4, NULL, NULL});
    cpu_matrix_init(&m8, N_OUT, K_IN, NULL, (CpuCodes){NULL, &p8, NULL});
    cpu_matrix_init(&mb, N_OUT, K_IN, NULL, (CpuCodes){NULL, NULL, &cb});
    cpu_matrix_init(&mq2, N_OUT, K_IN, NULL, (CpuCodes){NULL, NULL, &q2});
    cpu_matrix_init(&mf, N_OUT, K_IN, w8, (CpuCodes){NULL, NULL, NULL});
    CHECK(&tc, m4.form == CPU_FORM_Q4 && m4f.form == CPU_FORM_Q4 && m8.form == CPU_FORM_Q8 &&
                   mb.form == CPU_FORM_BLOCKS && mf.form == CPU_FORM_F32, "the forms named");
    CHECK(&tc, m4.product[CPU_PRODUCT_FEW] && m4.product[CPU_PRODUCT_FAST] && m8.product[CPU_PRODUCT_FEW] &&
                   m8.product[CPU_PRODUCT_FAST] && !mb.product[CPU_PRODUCT_FEW] && mb.product[CPU_PRODUCT_FAST] &&
                   !mq2.product[CPU_PRODUCT_FEW] && !mq2.product[CPU_PRODUCT_FAST] &&
                   !mf.product[CPU_PRODUCT_FEW] && !mf.product[CPU_PRODUCT_FAST],
          "FEW products on 4-bit and int8 codes only; FAST ones on those and on blocks of a type the fast products take "
          "(Q8_0 yes, Q2_K no), never on f32");
    CHECK(&tc, m4.ffn[CPU_PRODUCT_FEW] && !m4.ffn[CPU_PRODUCT_FAST] && !m8.ffn[CPU_PRODUCT_FEW] &&
                   !mb.ffn[CPU_PRODUCT_FEW] && !mf.ffn[CPU_PRODUCT_FEW], "the fused feed-forward on 4-bit codes only");
    CHECK(&tc, m4f.product[CPU_PRODUCT_MANY] == mf.product[CPU_PRODUCT_MANY] &&
                   m4.product[CPU_PRODUCT_MANY] == mb.product[CPU_PRODUCT_MANY] &&
                   m4.product[CPU_PRODUCT_MANY] != mf.product[CPU_PRODUCT_MANY],
          "MANY: BLAS on the f32 weights where kept, else on tiles rebuilt from the codes");

    const int rows[] = {1, 5, 9, 40};
    size_t tile_floats = CPU_Q4_TILE_FLOATS(K_IN), code_floats = cpu_code_tile_floats(N_OUT, K_IN, PARTS);
    float *few = aligned_alloc(64, (tile_floats * PARTS * sizeof(float) + 63) & ~(size_t)63);
    float *many = malloc(code_floats * PARTS * sizeof(float));
    float *bias = malloc(3 * N_OUT * sizeof(float));
    for (int i = 0; i < 3 * N_OUT; i++) bias[i] = uniform() - 0.5f;
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        int M = rows[ri];
        size_t out = (size_t)M * N_OUT;
        float *x = malloc((size_t)M * K_IN * sizeof(float)), *start = malloc(out * sizeof(float));
        float *ref = malloc(3 * out * sizeof(float)), *got = malloc(3 * out * sizeof(float));
        for (int i = 0; i < M * K_IN; i++) x[i] = 2 * uniform() - 1;
        for (size_t i = 0; i < out; i++) start[i] = uniform() - 0.5f;
        for (int variant = 0; variant < 4; variant++) {
            const float *b = variant & 1 ? bias : NULL;
            int acc = variant >> 1;
            /* FEW */
            reset(ref, start, out), reset(got, start, out);
            CpuQ4Job job = {ref, q4, b, N_OUT};
            cpu_matmul_q4(&k, &job, 1, x, M, K_IN, acc, few);
            run_parts(&k, m4.product[CPU_PRODUCT_FEW], &(CpuProductJob){got, &m4, b}, 1, x, M, acc, few, many);
            CHECK(&tc, same(ref, got, out), "M=%d bias %d acc %d: FEW on 4-bit codes = cpu_matmul_q4", M, !!b, acc);
            cpu_matmul_q8(&k, ref + out, x, &p8, b, M, N_OUT, K_IN, acc, few);
            run_parts(&k, m8.product[CPU_PRODUCT_FEW], &(CpuProductJob){got + out, &m8, b}, 1, x, M, acc, few, many);
            CHECK(&tc, same(ref + out, got + out, out), "M=%d bias %d acc %d: FEW on int8 codes = cpu_matmul_q8", M,
                  !!b, acc);
            /* three 4-bit matrices in one call */
            reset(ref, start, out), reset(got, start, out);
            for (int j = 0; j < 3; j++) {
                CpuQ4Job one = {ref + j * out, q4, b ? bias + j * N_OUT : NULL, N_OUT};
                cpu_matmul_q4(&k, &one, 1, x, M, K_IN, acc, few);
            }
            const CpuProductJob three[3] = {{got, &m4, b}, {got + out, &m4, b ? bias + N_OUT : NULL},
                                            {got + 2 * out, &m4, b ? bias + 2 * N_OUT : NULL}};
            run_parts(&k, m4.product[CPU_PRODUCT_FEW], three, 3, x, M, acc, few, many);
            CHECK(&tc, same(ref, got, 3 * out), "M=%d bias %d acc %d: three 4-bit matrices in one call = each alone",
                  M, !!b, acc);
            /* FAST */
            reset(ref, start, out), reset(got, start, out);
            const CpuFastKernels *fk = M < 8 ? &k.fast_few : &k.fast_many;
            for (int p = 0; p < PARTS; p++) {
                cpu_matmul_q4_fast_part(fk, &job, 1, x, M, K_IN, acc, few, p, PARTS);
                cpu_matmul_q8_fast_part(fk, ref + out, x, &p8, b, M, N_OUT, K_IN, acc, few, p, PARTS);
            }
            run_parts(&k, m4.product[CPU_PRODUCT_FAST], &(CpuProductJob){got, &m4, b}, 1, x, M, acc, few, many);
            run_parts(&k, m8.product[CPU_PRODUCT_FAST], &(CpuProductJob){got + out, &m8, b}, 1, x, M, acc, few, many);
            CHECK(&tc, same(ref, got, 2 * out), "M=%d bias %d acc %d: FAST on 4-bit and int8 codes = the %s kernel", M,
                  !!b, acc, fk->name);
            /* MANY: f32 kept, 4-bit codes, Q8_0 blocks */
            reset(ref, start, out), reset(got, start, out);
            cpu_matmul(ref, x, w8, b, M, N_OUT, K_IN, acc);
            cpu_matmul(ref + out, x, w4, b, M, N_OUT, K_IN, acc);
            cpu_matmul(ref + 2 * out, x, wb, b, M, N_OUT, K_IN, acc);
            run_parts(&k, mf.product[CPU_PRODUCT_MANY], &(CpuProductJob){got, &mf, b}, 1, x, M, acc, few, many);
            run_parts(&k, m4.product[CPU_PRODUCT_MANY], &(CpuProductJob){got + out, &m4, b}, 1, x, M, acc, few, many);
            run_parts(&k, mb.product[CPU_PRODUCT_MANY], &(CpuProductJob){got + 2 * out, &mb, b}, 1, x, M, acc, few,
                      many);
            CHECK(&tc, same(ref, got, 3 * out), "M=%d bias %d acc %d: MANY on f32, 4-bit codes and Q8_0 blocks = "
                  "cpu_matmul on the f32 weights", M, !!b, acc);
        }
        /* the fused feed-forward, gate and up on the same codes */
        reset(ref, start, out), reset(got, start, out);
        cpu_ffn_q4(&k, ref, ref + out, q4, q4, x, M, K_IN, N_OUT, few);
        for (int p = 0; p < PARTS; p++) m4.ffn[CPU_PRODUCT_FEW](&k, got, got + out, &m4, &m4, x, M,
                                                               &(CpuTile){few, many}, p, PARTS);
        CHECK(&tc, same(ref, got, 2 * out), "M=%d: the fused feed-forward = cpu_ffn_q4", M);
        free(x), free(start), free(ref), free(got);
    }
    free(few), free(many), free(bias), free(w4), free(w8), free(wb), free(q4), free(blocks);
    free(p8.q), free(p8.scale), free(p8.offset);
    return test_finish(&tc);
}
