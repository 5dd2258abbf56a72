/* test_cpu_tiles.c — the prefill product from packed weights (cpu_matmul_codes, engine/cpu/products.c) and
 * the row rebuilders it uses (cpu_rebuild_rows: the kernel table's q4_rebuild / q8_rebuild, engine/cpu/):
 *  - rows rebuilt at every SIMD level this CPU has equal the weights they were packed from, bit for bit (the
 *    loader's f32 values: codes times f16 scales plus offsets, exact in f32);
 *  - cpu_matmul_codes equals cpu_matmul on those f32 weights bit for bit (the reference is today's prefill
 *    product; no tolerance: the tile path must not change a single bit), for 4-bit and int8 codes, with and
 *    without bias and accumulation, at 1, 2 and 3 threads, every SIMD level. Shapes: SmolLM2's (K = 576 and
 *    1536, N = 192..1536, M from 33, just past the packed decode kernels, to 600, past a prefill chunk),
 *    where each thread's slice fits one tile;
 *  - slices wider than a tile (N = 3000 x K = 1536, N = 1000 x K = 4096 at one thread) are cut into tiles:
 *    bit for bit under OpenBLAS's SkylakeX-family kernels, which this checks where they run; under others
 *    (Haswell, Zen) the sums depend on where rows are cut, and the test reports the difference instead;
 *  - cpu_code_tile_floats is what the product writes: the tiles are allocated at exactly that size, so the
 *    sanitizer build catches an overrun;
 *  - the table's blas_order (sums in OpenBLAS's SkylakeX order from a few rebuilt rows, for 2..64 rows of x):
 *    where the backend's probe keeps it (cpu_blas_order_agrees), the products above take it for M <= 64, and
 *    the decode shapes of the Qwen2.5 models (K = 896, 1536, 4864, 8960; M = 2..64) equal cpu_matmul bit for
 *    bit; the portable order (cpu_blas_order_scalar) and every level's entry equal cblas_sgemm on those
 *    shapes under a SkylakeX-family core (reported elsewhere); a kernel summing in other blocks is refused
 *    by the probe;
 *  - the table's gemv_order (one row of x on Q4_K / Q5_K / Q6_K blocks, sgemv's sums with each block rebuilt in
 *    registers): the portable order (cpu_gemv_order_scalar) equals cblas_sgemv at the Qwen2.5 models' K under a
 *    SkylakeX-family core, where the probe (cpu_gemv_order_agrees) keeps the entries; every level's entry equals
 *    the portable order on the rebuilt rows bit for bit (8-row groups and single rows; K of one block, a block and
 *    a rest, two blocks and a rest), and cpu_matmul_codes at M = 1 equals cpu_matmul on the f32 weights (1 and 2
 *    threads, bias, accumulate; slices ending in 1 to 3 rows, which stay BLAS's); a planted entry shows in the
 *    products, so the path is really taken. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "../engine/cpu/isa.h"
#include "../engine/gguf.h"
#include "../engine/cpu/ops.h"
#include "test.h"

static unsigned state = 11;
static float uniform(void) { return ((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f; }

/* x rounded to the nearest half-precision value (11 significant bits), as GGUF's block scales are. */
static float round_f16(float x) {
    int e;
    float m = frexpf(x, &e);
    return ldexpf(rintf(m * 2048.0f) / 2048.0f, e);
}

/* w[N][K] as a Q4_1 GGUF holds it after dequantisation (code * d + m, codes 0..15, d and m f16); with
 * q8, as Q8_0 does (code * d, codes -127..127). */
static void make_weights(float *w, int N, int K, int q8) {
    for (int r = 0; r < N; r++)
        for (int b = 0; b < K / 32; b++) {
            float d = round_f16(q8 ? 0.001f + 0.01f * uniform() : 0.002f + 0.05f * uniform());
            float m = round_f16(-0.05f - 0.35f * uniform()); /* a normal f16, away from 0 */
            for (int i = 0; i < 32; i++) {
                int q = q8 ? (int)(255 * uniform()) - 127 : (int)(16 * uniform()) % 16;
                if (!q8 && i < 2) q = i ? 15 : 0; /* the full code range, as GGUF's quantiser uses */
                w[(size_t)r * K + b * 32 + i] = q8 ? (float)q * d : (float)q * d + m;
            }
        }
}

typedef struct {
    int N, K;
    CpuQ4Block *q4;
    CpuPacked q8;
    CpuBlocks blocks; /* a ggml type's blocks (data NULL when the matrix is codes) */
    float *w;
} Matrix;

/* w[N][K] as GGUF Q8_0 blocks (an f16 scale and 32 int8 codes), and mx->w their dequantisation by gguf.c. */
/* w[N][K] as blocks of a ggml type (Q8_0, Q4_K, Q5_K or Q6_K): random bytes, the f16 scale fields set to normal
 * values (so no weight is infinite or NaN), and w their dequantised f32 weights. */
static void matrix_make_blocks(Matrix *mx, int type, int N, int K) {
    static const struct { int type, n_f16, f16_at[2]; } scales[] = {{GGML_Q8_0, 1, {0}}, {GGML_Q4_K, 2, {0, 2}},
                                                                     {GGML_Q5_K, 2, {0, 2}}, {GGML_Q6_K, 1, {208}}};
    const GgmlTypeTraits *t = ggml_type_traits(type);
    size_t n_blocks = (size_t)N * K / t->block;
    *mx = (Matrix){.N = N, .K = K, .w = malloc(sizeof(float) * N * K)};
    mx->blocks = (CpuBlocks){malloc(n_blocks * t->bytes), type, (size_t)K / t->block * t->bytes, (size_t)K / t->block};
    for (size_t i = 0; i < n_blocks * t->bytes; i++) mx->blocks.data[i] = (uint8_t)(uniform() * 256);
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
        for (size_t b = 0; scales[si].type == type && b < n_blocks; b++)
            for (int f = 0; f < scales[si].n_f16; f++) {
                uint16_t d = cpu_f32_to_f16(0.001f + 0.01f * uniform());
                memcpy(mx->blocks.data + b * t->bytes + scales[si].f16_at[f], &d, 2);
            }
    t->dequant(mx->blocks.data, mx->w, n_blocks);
}

static int matrix_make(Matrix *mx, int N, int K, int q8) {
    size_t n = (size_t)N * K;
    mx->N = N, mx->K = K, mx->blocks = (CpuBlocks){0};
    mx->w = malloc(n * sizeof(float));
    make_weights(mx->w, N, K, q8);
    mx->q4 = q8 ? NULL : malloc(n / 32 * sizeof(CpuQ4Block));
    mx->q8 = (CpuPacked){q8 ? malloc(n) : NULL, q8 ? malloc(n / 32 * sizeof(float)) : NULL,
                         q8 ? malloc(n / 32 * sizeof(float)) : NULL};
    return q8 ? cpu_pack_exact(&mx->q8, mx->w, N, K) : cpu_pack_q4(mx->q4, mx->w, N, K);
}

static void matrix_free(Matrix *mx) {
    free(mx->w);
    free(mx->q4);
    free(mx->q8.q);
    free(mx->q8.scale);
    free(mx->q8.offset);
    free(mx->blocks.data);
}

static void check_unpack(TestCounts *tc, const CpuKernels *k, const Matrix *mx, const char *fmt) {
    int n0 = 3, n1 = mx->N < 40 ? mx->N : 40;
    float *rows = malloc(sizeof(float) * (n1 - n0) * mx->K);
    CpuCodes codes = {mx->q4, mx->q4 ? NULL : &mx->q8, NULL};
    cpu_rebuild_rows(k, rows, &codes, n0, n1, mx->K);
    CHECK(tc, !memcmp(rows, mx->w + (size_t)n0 * mx->K, sizeof(float) * (n1 - n0) * mx->K),
          "%s %s %d x %d: rows %d..%d rebuilt to the packed f32 weights bit for bit", k->simd_name, fmt, mx->N,
          mx->K, n0, n1);
    free(rows);
}

/* cpu_matmul_codes against cpu_matmul on the f32 weights, at `threads` threads; returns the number of
 * outputs that differ. */
static size_t compare(const CpuKernels *k, const Matrix *mx, int M, int threads, int with_bias, int accumulate) {
    int N = mx->N, K = mx->K;
    float *x = malloc(sizeof(float) * M * K), *bias = malloc(sizeof(float) * N);
    float *ref = malloc(sizeof(float) * M * N), *got = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) x[i] = 2 * uniform() - 1;
    for (int i = 0; i < N; i++) bias[i] = uniform() - 0.5f;
    for (int i = 0; i < M * N; i++) ref[i] = got[i] = uniform() - 0.5f;
    omp_set_num_threads(threads);
    size_t tile_floats = cpu_code_tile_floats(N, K, threads);
    float *tiles = malloc(sizeof(float) * tile_floats * threads);
    cpu_matmul(ref, x, mx->w, with_bias ? bias : NULL, M, N, K, accumulate);
    CpuCodes codes = {mx->q4, mx->q4 || mx->blocks.data ? NULL : &mx->q8, mx->blocks.data ? &mx->blocks : NULL};
    cpu_matmul_codes(k, got, x, &codes, with_bias ? bias : NULL, M, N, K, accumulate,
                     tiles, tile_floats);
    size_t differ = 0;
    for (int i = 0; i < M * N; i++) differ += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
    free(x), free(bias), free(ref), free(got), free(tiles);
    return differ;
}

/* The portable order with K cut into blocks of 256 instead: what the probe must refuse. */
static void blocks_of_256(float *y, int ldy, const float *xt, int ldx, int M, int K, const float *w, int rows) {
    for (int k0 = 0; k0 < K; k0 += 256) {
        int len = K - k0 < 256 ? K - k0 : 256;
        for (int n = 0; n < rows; n++)
            for (int m = 0; m < M; m++) {
                float chain = 0.0f;
                for (int k = k0; k < k0 + len; k++) chain = fmaf(xt[(size_t)k * ldx + m], w[(size_t)n * K + k], chain);
                y[(size_t)m * ldy + n] += chain;
            }
    }
}

/* f against one cblas_sgemm (beta 0) of M rows on N weight rows of K; returns the outputs that differ. */
static size_t order_against_blas(CpuBlasOrderFn *f, int M, int N, int K) {
    int ldx = (M + 15) & ~15;
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K), *xt = malloc(sizeof(float) * K * ldx);
    float *ref = malloc(sizeof(float) * M * N), *got = calloc((size_t)M * N, sizeof(float));
    for (int i = 0; i < M * K; i++) x[i] = 2 * uniform() - 1;
    for (int i = 0; i < N * K; i++) w[i] = uniform() - 0.5f;
    for (int k = 0; k < K; k++)
        for (int m = 0; m < ldx; m++) xt[(size_t)k * ldx + m] = m < M ? x[(size_t)m * K + k] : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, ref, N);
    f(got, N, xt, ldx, M, K, w, N);
    size_t differ = 0;
    for (int i = 0; i < M * N; i++) differ += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
    free(x), free(w), free(xt), free(ref), free(got);
    return differ;
}

/* blas_order: the order against OpenBLAS itself, the probe, and the products on the decode shapes. */
static void check_blas_order(TestCounts *tc, int skylakex, const char *core) {
    /* the Qwen2.5 models' K (0.5B: 896, 4864; 1.5B: 1536, 8960) and M from 2 to 64 lanes */
    const struct { int M, N, K; } shapes[] = {{2, 600, 896}, {5, 160, 8960}, {17, 100, 1536}, {48, 48, 4864},
                                              {53, 40, 1536}, {64, 30, 896}};
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        size_t differ = order_against_blas(cpu_blas_order_scalar, shapes[si].M, shapes[si].N, shapes[si].K);
        if (skylakex)
            CHECK(tc, differ == 0, "portable blas order M=%d N=%d K=%d: %zu outputs differ from cblas_sgemm",
                  shapes[si].M, shapes[si].N, shapes[si].K, differ);
        else
            printf("test_cpu_tiles: portable blas order M=%d N=%d K=%d under OpenBLAS core %s: %zu outputs differ "
                   "(not checked: the probe keeps blas_order off here)\n", shapes[si].M, shapes[si].N,
                   shapes[si].K, core, differ);
    }
    for (int li = 0; li < 3; li++) {
        CpuKernels k;
        KvErr err = {{0}};
        if (cpu_kernels_init(&k, levels[li], NULL, &err)) {
            SKIP(tc, "blas order at %s: not supported here (%s)", levels[li], err.msg);
            continue;
        }
        if (!k.blas_order) {
            printf("test_cpu_tiles: %s has no blas_order entry (its products stay BLAS's)\n", levels[li]);
            continue;
        }
        int agrees = cpu_blas_order_agrees(&k);
        if (skylakex) CHECK(tc, agrees, "%s: the probe keeps blas_order under core %s", levels[li], core);
        printf("test_cpu_tiles: %s blas_order %s under OpenBLAS core %s\n", levels[li], agrees ? "kept" : "dropped",
               core);
        if (!agrees) continue;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            CHECK(tc, order_against_blas(k.blas_order, shapes[si].M, shapes[si].N, shapes[si].K) == 0,
                  "%s blas_order M=%d N=%d K=%d equals cblas_sgemm", levels[li], shapes[si].M, shapes[si].N,
                  shapes[si].K);
            /* through cpu_matmul_codes on Q8_0 blocks (the form blas_order serves), every thread count, bias,
             * accumulate */
            {
                Matrix mx;
                matrix_make_blocks(&mx, GGML_Q8_0, shapes[si].N * 8, shapes[si].K);
                for (int threads = 1; threads <= 2; threads++)
                    for (int variant = 0; variant < 4; variant++) {
                        size_t differ = compare(&k, &mx, shapes[si].M, threads, variant & 1, variant >> 1);
                        CHECK(tc, differ == 0,
                              "%s Q8_0 blocks N=%d K=%d M=%d on blas_order, %d threads, bias %d, accumulate %d: %zu "
                              "outputs differ from cpu_matmul", levels[li], mx.N, mx.K, shapes[si].M,
                              threads, variant & 1, variant >> 1, differ);
                    }
                matrix_free(&mx);
            }
        }
        k.blas_order = blocks_of_256;
        CHECK(tc, !cpu_blas_order_agrees(&k), "%s: the probe refuses a blas_order that cuts K in blocks of 256",
              levels[li]);
        Matrix mx; /* and the blocks' product takes the table's entry: the planted order shows in its sums */
        matrix_make_blocks(&mx, GGML_Q8_0, 400, 1536);
        size_t differ = compare(&k, &mx, 40, 1, 0, 0);
        CHECK(tc, differ > 0, "%s: Q8_0 blocks at M=40 on a planted order differ from cpu_matmul (%zu outputs)",
              levels[li], differ);
        matrix_free(&mx);
    }
}

/* A gemv_order entry for Q4_K rows that sums each row in one chain: what the products must show when planted. */
static void one_chain_q4_k(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows, int K) {
    float *row = malloc(sizeof(float) * K);
    for (int r = 0; r < rows; r++) {
        ggml_type_traits(GGML_Q4_K)->dequant(w + (size_t)r * row_bytes, row, (size_t)K / 256);
        float chain = 0.0f;
        for (int k = 0; k < K; k++) chain = fmaf(row[k], x[k], chain);
        y[r] += chain;
    }
    free(row);
}

/* gemv_order: the order against OpenBLAS's sgemv, the probe, each level's entries against the rebuilt rows, and
 * one row of x on K-quant blocks through cpu_matmul_codes (whole slices and a slice's last 1 to 3 rows). */
static void check_gemv_order(TestCounts *tc, int skylakex, const char *core) {
    /* the Qwen2.5 models' K (0.5B: 896, 4864; 1.5B: 1536, 8960) and a K past one block by 256 */
    const int Ks[] = {896, 1536, 4352, 4864, 8960};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int rows = 44, K = Ks[ki];
        float *w = malloc(sizeof(float) * rows * K), *x = malloc(sizeof(float) * K), *ref = malloc(sizeof(float) * rows),
              *got = malloc(sizeof(float) * rows);
        for (int i = 0; i < rows * K; i++) w[i] = uniform() - 0.5f;
        for (int i = 0; i < K; i++) x[i] = 2 * uniform() - 1;
        for (int i = 0; i < rows; i++) ref[i] = got[i] = uniform() - 0.5f; /* beta 1: y's old value starts each sum */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, K, 1.0f, w, K, x, 1, 1.0f, ref, 1);
        cpu_gemv_order_scalar(got, x, w, rows, K);
        size_t differ = 0;
        for (int i = 0; i < rows; i++) differ += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
        if (skylakex)
            CHECK(tc, differ == 0, "portable gemv order rows=%d K=%d: %zu outputs differ from cblas_sgemv", rows, K,
                  differ);
        else
            printf("test_cpu_tiles: portable gemv order K=%d under OpenBLAS core %s: %zu outputs differ (not checked: "
                   "the probe keeps gemv_order off here)\n", K, core, differ);
        free(w), free(x), free(ref), free(got);
    }
    int agrees = cpu_gemv_order_agrees();
    if (skylakex) CHECK(tc, agrees, "the probe keeps gemv_order under core %s", core);
    printf("test_cpu_tiles: gemv_order %s under OpenBLAS core %s\n", agrees ? "kept" : "dropped", core);
    const char *levels[] = {"scalar", "avx2", "avx512"};
    const int types[] = {GGML_Q4_K, GGML_Q5_K, GGML_Q6_K};
    for (int li = 0; li < 3; li++) {
        CpuKernels k;
        KvErr err = {{0}};
        if (cpu_kernels_init(&k, levels[li], NULL, &err)) {
            SKIP(tc, "gemv order at %s: not supported here (%s)", levels[li], err.msg);
            continue;
        }
        for (int ti = 0; ti < 3; ti++) {
            const char *name = ggml_type_traits(types[ti])->name;
            CpuGemvOrderFn *entry = k.gemv_order[types[ti]];
            if (!entry) {
                printf("test_cpu_tiles: %s has no gemv_order entry for %s (its single rows stay BLAS's)\n",
                       levels[li], name);
                continue;
            }
            /* the entry against the portable order on the rebuilt rows: 8-row groups and single rows */
            for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
                if (Ks[ki] % 256) continue;
                Matrix mx;
                matrix_make_blocks(&mx, types[ti], 21, Ks[ki]);
                float *x = malloc(sizeof(float) * mx.K), *want = malloc(sizeof(float) * mx.N),
                      *got = malloc(sizeof(float) * mx.N);
                for (int i = 0; i < mx.K; i++) x[i] = 2 * uniform() - 1;
                for (int i = 0; i < mx.N; i++) want[i] = got[i] = uniform() - 0.5f;
                cpu_gemv_order_scalar(want, x, mx.w, mx.N, mx.K);
                entry(got, x, mx.blocks.data, mx.blocks.row_bytes, mx.N, mx.K);
                size_t differ = 0;
                for (int i = 0; i < mx.N; i++) differ += memcmp(&want[i], &got[i], sizeof(float)) != 0;
                CHECK(tc, differ == 0, "%s gemv_order %s rows=%d K=%d equals the portable order on the rebuilt rows "
                      "(%zu differ)", levels[li], name, mx.N, mx.K, differ);
                free(x), free(want), free(got);
                matrix_free(&mx);
            }
            if (!agrees) continue;
            /* one row of x through the products: whole slices, and slices ending in 1 to 3 rows */
            const struct { int N, K; } shapes[] = {{256, 1536}, {1539, 1536}, {258, 8960}, {97, 4352}};
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                Matrix mx;
                matrix_make_blocks(&mx, types[ti], shapes[si].N, shapes[si].K);
                for (int threads = 1; threads <= 2; threads++)
                    for (int variant = 0; variant < 4; variant++) {
                        size_t differ = compare(&k, &mx, 1, threads, variant & 1, variant >> 1);
                        CHECK(tc, differ == 0,
                              "%s %s blocks N=%d K=%d, one row of x on gemv_order, %d threads, bias %d, accumulate %d: "
                              "%zu outputs differ from cpu_matmul", levels[li], name, mx.N, mx.K, threads,
                              variant & 1, variant >> 1, differ);
                    }
                matrix_free(&mx);
            }
        }
        if (!agrees || !k.gemv_order[GGML_Q4_K]) continue;
        k.gemv_order[GGML_Q4_K] = one_chain_q4_k;
        Matrix mx; /* the products take the table's entry: the planted one shows */
        matrix_make_blocks(&mx, GGML_Q4_K, 64, 1536);
        size_t differ = compare(&k, &mx, 1, 1, 0, 0);
        CHECK(tc, differ > 0, "%s: Q4_K blocks at M=1 on a planted entry differ from cpu_matmul (%zu outputs)",
              levels[li], differ);
        matrix_free(&mx);
    }
}

int main(void) {
    TestCounts tc = {"test_cpu_tiles", 0, 0, 0};
    openblas_set_num_threads(1); /* as the cpu backend runs BLAS: one thread per call, its own threads around it */
    int max_threads = omp_get_max_threads();
    const char *core = openblas_get_corename();
    int skylakex = core && (strstr(core, "kylake") || strstr(core, "ooperlake") || strstr(core, "apphire"));
    printf("test_cpu_tiles: OpenBLAS core %s\n", core ? core : "?");
    /* SmolLM2's shapes: every thread's slice is one tile */
    const struct { int N, K, M; } whole[] = {{192, 576, 33}, {576, 576, 600}, {1536, 576, 100}, {576, 1536, 40}};
    /* slices cut into several tiles at one thread: rows per tile 600 (3000 / 5) and 256 (1000 / 4) */
    const struct { int N, K, M; } cut[] = {{3000, 1536, 40}, {1000, 4096, 33}};
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int li = 0; li < 3; li++) {
        CpuKernels kt, *simd = &kt;
        KvErr err = {{0}};
        if (cpu_kernels_init(&kt, levels[li], NULL, &err)) {
            SKIP(&tc, "%s: not supported here (%s)", levels[li], err.msg);
            continue;
        }
        if (!cpu_blas_order_agrees(&kt)) kt.blas_order = NULL; /* as the backend opens */
        for (int q8 = 0; q8 < 2; q8++) {
            const char *fmt = q8 ? "int8" : "4-bit";
            for (size_t si = 0; si < sizeof whole / sizeof whole[0]; si++) {
                Matrix mx;
                CHECK(&tc, matrix_make(&mx, whole[si].N, whole[si].K, q8), "%s weights pack", fmt);
                check_unpack(&tc, simd, &mx, fmt);
                for (int threads = 1; threads <= 3; threads++)
                    for (int variant = 0; variant < 4; variant++) {
                        int with_bias = variant & 1, accumulate = variant >> 1;
                        size_t differ = compare(simd, &mx, whole[si].M, threads, with_bias, accumulate);
                        CHECK(&tc, differ == 0,
                              "%s %s N=%d K=%d M=%d, %d threads, bias %d, accumulate %d: %zu outputs differ from "
                              "cpu_matmul on the f32 weights", levels[li], fmt, mx.N, mx.K, whole[si].M, threads,
                              with_bias, accumulate, differ);
                    }
                matrix_free(&mx);
            }
            for (size_t si = 0; si < sizeof cut / sizeof cut[0]; si++) {
                Matrix mx;
                CHECK(&tc, matrix_make(&mx, cut[si].N, cut[si].K, q8), "%s weights pack", fmt);
                CHECK(&tc, cpu_code_tile_floats(mx.N, mx.K, 1) < (size_t)mx.N * mx.K,
                      "%d x %d at one thread is cut into tiles", mx.N, mx.K);
                size_t differ = compare(simd, &mx, cut[si].M, 1, 1, 0);
                if (skylakex)
                    CHECK(&tc, differ == 0, "%s %s N=%d K=%d M=%d in tiles: %zu outputs differ", levels[li], fmt, mx.N,
                          mx.K, cut[si].M, differ);
                else
                    printf("test_cpu_tiles: %s %s N=%d K=%d in tiles under OpenBLAS core %s: %zu of %d outputs differ "
                           "in their last bits (not checked: this core's sums depend on where rows are cut)\n",
                           levels[li], fmt, mx.N, mx.K, core, differ, mx.N * cut[si].M);
                matrix_free(&mx);
            }
        }
        printf("test_cpu_tiles: %s checked\n", levels[li]);
    }
    check_blas_order(&tc, skylakex, core);
    check_gemv_order(&tc, skylakex, core);
    omp_set_num_threads(max_threads);
    return test_finish(&tc);
}
