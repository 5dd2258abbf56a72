/* products.c — the operations of ops.h: threads over the kernel table's entries, and the BLAS products. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ BLAS products */

/* Part p of parts of cpu_matmul's output features: a contiguous slice, cut at multiples of 16 rows to keep
 * BLAS's tiles whole; the last part ends at N. */
static void matmul_slice(int N, int p, int parts, int *n0, int *n1) {
    *n0 = (int)((long)N * p / parts) & ~15;
    *n1 = p == parts - 1 ? N : (int)((long)N * (p + 1) / parts) & ~15;
}

/* Outputs [n0, n1) of y as a product with a bias starts them: the bias added to them (accumulate) or copied
 * into them; returns the BLAS call's beta (0: the call overwrites them, 1: it adds to them). */
static float preset_bias(float *y, const float *bias, int M, int N, int n0, int n1, int accumulate) {
    if (!bias) return accumulate ? 1.0f : 0.0f;
    for (int m = 0; m < M; m++) {
        float *row = y + (size_t)m * N;
        if (accumulate) {
#pragma omp simd
            for (int i = n0; i < n1; i++) row[i] += bias[i];
        } else {
            memcpy(row + n0, bias + n0, (size_t)(n1 - n0) * sizeof(float));
        }
    }
    return 1.0f;
}

/* Outputs [n0, n1) of y = x w^T (+ bias) (+ y), w pointing at weight row n0: one single-threaded BLAS call. */
static void gemm_slice(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int n0,
                       int n1, int accumulate) {
    float beta = preset_bias(y, bias, M, N, n0, n1, accumulate);
    if (M == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n1 - n0, K, 1.0f, w, K, x, 1, beta, y + n0, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, x, K, w, K, beta, y + n0, N);
}

void cpu_matmul_part(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int accumulate,
                     int part, int parts) {
    int n0, n1;
    matmul_slice(N, part, parts, &n0, &n1);
    if (n1 > n0) gemm_slice(y, x, w + (size_t)n0 * K, bias, M, N, K, n0, n1, accumulate);
}

void cpu_matmul(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int accumulate) {
    /* Each thread takes a contiguous slice of the output features (weight rows) for all M rows, so every
     * weight is read by one thread only, once. */
    int parts = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int p = 0; p < parts; p++) cpu_matmul_part(y, x, w, bias, M, N, K, accumulate, p, parts);
}

/* Weight rows rebuilt at a time for the table's blas_order (a few KiB to a few hundred: they stay in cache). */
#define BLAS_ORDER_REBUILT_ROWS 12

/* Whether a tile of `rows` rows of a ggml type's blocks goes to blas_order rather than to BLAS: the table has
 * one that the probe found agreeing, and the BLAS call would sum as it does (OpenBLAS's SkylakeX dispatch takes
 * its level-3 driver, not gemv at M = 1 nor its small-matrix kernels, taken only up to M * rows * K = 100^3).
 * Only a ggml type's blocks: rebuilding a whole tile of those costs about what BLAS's kernel does, while 4-bit
 * and int8 codes rebuild cheaply and BLAS's kernel is faster than blas_order (SmolLM2's Q4_1 at 33 to 64 rows:
 * 5-12% slower on blas_order; Qwen2.5-1.5B's Q4_K / Q6_K at 53 rows: 2-11% faster on a quiet machine, 10-18% on a
 * loaded one; docs/performance.md). */
static int blas_order_serves(const CpuKernels *k, const CpuCodes *c, int M, int rows, int K) {
    return k->blas_order && c->blocks && M >= 2 && M <= CPU_BLAS_ORDER_MAX_X_ROWS &&
           (double)M * rows * K > 1e6;
}

/* Outputs [n0, n1) of y set as the BLAS call would start them (preset_bias, then zero where its beta is 0), for
 * blas_order to add its sums to. */
static void start_sums(float *y, const float *bias, int M, int N, int n0, int n1, int accumulate) {
    if (preset_bias(y, bias, M, N, n0, n1, accumulate) == 0.0f)
        for (int m = 0; m < M; m++) memset(y + (size_t)m * N + n0, 0, sizeof(float) * (size_t)(n1 - n0));
}

/* x[M][K] transposed into xt[K][ldx], lanes from M to ldx zero; returns ldx (M rounded up to 16). */
static int transpose_x(float *xt, const float *x, int M, int K) {
    int ldx = (M + 15) & ~15;
    for (int k = 0; k < K; k++) {
        float *row = xt + (size_t)k * ldx;
        for (int m = 0; m < M; m++) row[m] = x[(size_t)m * K + k];
        for (int m = M; m < ldx; m++) row[m] = 0.0f;
    }
    return ldx;
}

/* Rows per tile of a slice of `rows` weight rows of width K: the whole slice when it fits in
 * CPU_CODE_TILE_MAX floats, else equal parts of at most that, multiples of 16 rows (the last one shorter). */
static int tile_rows(int rows, int K) {
    int cap = (int)(CPU_CODE_TILE_MAX / (size_t)K) & ~15;
    cap = cap < 16 ? 16 : cap;
    if (rows <= cap) return rows;
    int tiles = (rows + cap - 1) / cap;
    return ((rows + tiles - 1) / tiles + 15) & ~15;
}

size_t cpu_code_tile_floats(int N, int K, int parts) {
    /* blas_order's rebuilt rows and x transposed */
    size_t most = (size_t)(BLAS_ORDER_REBUILT_ROWS + CPU_BLAS_ORDER_MAX_X_ROWS) * K;
    for (int p = 0; p < parts; p++) {
        int n0, n1;
        matmul_slice(N, p, parts, &n0, &n1);
        size_t floats = n1 > n0 ? (size_t)tile_rows(n1 - n0, K) * K : 0;
        most = floats > most ? floats : most;
    }
    return most;
}

void cpu_rebuild_rows(const CpuKernels *k, float *w, const CpuCodes *c, int n0, int n1, int K) {
    size_t per_row = (size_t)K / 32;
    if (c->q4) k->q4_rebuild(w, c->q4 + (size_t)n0 * per_row, (size_t)(n1 - n0) * per_row);
    else if (c->q8) k->q8_rebuild(w, c->q8, (size_t)n0 * per_row, (size_t)(n1 - n0) * per_row);
    else k->rebuild[c->blocks->type](c->blocks->data + (size_t)n0 * c->blocks->row_bytes, w,
                                      (size_t)(n1 - n0) * c->blocks->row_blocks);
}

void cpu_matmul_codes_part(const CpuKernels *k, float *y, const float *x, const CpuCodes *c, const float *bias, int M,
                           int N, int K, int accumulate, float *tile, int part, int parts) {
    int n0, n1;
    matmul_slice(N, part, parts, &n0, &n1);
    if (M == 1 && c->blocks && k->gemv_order[c->blocks->type]) {
        /* sgemv's sums with each block rebuilt in registers; sgemv sums a call's last 1 to 3 rows otherwise, and
         * those rows alone in a call as it sums them at a call's end: they stay BLAS's */
        int fused = n1 > n0 ? (n1 - n0) & ~3 : 0;
        start_sums(y, bias, 1, N, n0, n0 + fused, accumulate);
        k->gemv_order[c->blocks->type](y + n0, x, c->blocks->data + (size_t)n0 * c->blocks->row_bytes,
                                       c->blocks->row_bytes, fused, K);
        n0 += fused;
    }
    int step = n1 > n0 ? tile_rows(n1 - n0, K) : 1, ldx = 0; /* ldx: 0 until x is transposed in the tile */
    float *xt = tile + (size_t)BLAS_ORDER_REBUILT_ROWS * K;
    for (int t0 = n0; t0 < n1; t0 += step) {
        int t1 = n1 - t0 < step ? n1 : t0 + step;
        if (!blas_order_serves(k, c, M, t1 - t0, K)) { /* the tile rebuilt whole and handed to BLAS */
            cpu_rebuild_rows(k, tile, c, t0, t1, K);
            gemm_slice(y, x, tile, bias, M, N, K, t0, t1, accumulate);
            ldx = 0;
            continue;
        }
        /* the same sums without BLAS's copy of the tile: a few rows rebuilt at a time, in cache */
        if (!ldx) ldx = transpose_x(xt, x, M, K);
        start_sums(y, bias, M, N, t0, t1, accumulate);
        for (int g0 = t0; g0 < t1; g0 += BLAS_ORDER_REBUILT_ROWS) {
            int g1 = t1 - g0 < BLAS_ORDER_REBUILT_ROWS ? t1 : g0 + BLAS_ORDER_REBUILT_ROWS;
            cpu_rebuild_rows(k, tile, c, g0, g1, K);
            k->blas_order(y + g0, N, xt, ldx, M, K, tile, g1 - g0);
        }
    }
}

/* n values of several magnitudes and signs for a probe of BLAS's sums (xorshift from seed). */
static void probe_values(float *v, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
        v[i] = ldexpf((float)(int32_t)seed / 2147483648.0f, (int)(seed % 7) - 3);
    }
}

int cpu_blas_order_agrees(const CpuKernels *k) {
    /* shapes past OpenBLAS's small-matrix bound that take each K-block rule (blocks of 320, then a rest between
     * 320 and 640 halved and rounded up to 16 four ways) and each lane count of blas_order (M = 2, 17, 37, 64),
     * with and without a bias */
    static const int shapes[][3] = {{2, 500, 1100}, {17, 64, 1000}, {37, 48, 650}, {64, 24, 700}};
    if (!k->blas_order) return 0;
    int agrees = 1;
    for (size_t s = 0; agrees && s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], rows = shapes[s][1], K = shapes[s][2], ldx = (M + 15) & ~15;
        size_t nx = (size_t)M * K, nw = (size_t)rows * K, ny = (size_t)M * rows;
        float *buf = malloc(sizeof(float) * (nx + nw + 2 * ny + rows + (size_t)K * ldx));
        if (!buf) return 0;
        float *x = buf, *w = x + nx, *bias = w + nw, *want = bias + rows, *got = want + ny, *xt = got + ny;
        probe_values(x, nx + nw + rows, 2463534242u + (uint32_t)s); /* x, w and bias */
        for (int with_bias = 0; agrees && with_bias <= 1; with_bias++) {
            const float *b = with_bias ? bias : NULL;
            memset(want, 0x7f, sizeof(float) * ny);
            memset(got, 0x7f, sizeof(float) * ny);
            gemm_slice(want, x, w, b, M, rows, K, 0, rows, 0);
            transpose_x(xt, x, M, K);
            start_sums(got, b, M, rows, 0, rows, 0);
            k->blas_order(got, rows, xt, ldx, M, K, w, rows);
            agrees = !memcmp(want, got, sizeof(float) * ny);
        }
        free(buf);
    }
    return agrees;
}

int cpu_gemv_order_agrees(void) {
    /* rows in multiples of 4; K in one block, a block and a rest, and the 1.5B's ffn_down (two blocks and a rest) */
    static const int shapes[][2] = {{8, 256}, {12, 4352}, {4, 8960}};
    int agrees = 1;
    for (size_t s = 0; agrees && s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], K = shapes[s][1];
        float *buf = malloc(sizeof(float) * ((size_t)rows * K + K + 3 * (size_t)rows));
        if (!buf) return 0;
        float *w = buf, *x = w + (size_t)rows * K, *bias = x + K, *want = bias + rows, *got = want + rows;
        probe_values(w, (size_t)rows * K + K + rows, 88675123u + (uint32_t)s); /* w, x and bias */
        for (int with_bias = 0; agrees && with_bias <= 1; with_bias++) {
            const float *b = with_bias ? bias : NULL;
            memset(want, 0x7f, sizeof(float) * rows);
            gemm_slice(want, x, w, b, 1, rows, K, 0, rows, 0);
            start_sums(got, b, 1, rows, 0, rows, 0);
            cpu_gemv_order_scalar(got, x, w, rows, K);
            agrees = !memcmp(want, got, sizeof(float) * rows);
        }
        free(buf);
    }
    return agrees;
}

void cpu_matmul_codes(const CpuKernels *k, float *y, const float *x, const CpuCodes *c, const float *bias, int M, int N,
                      int K, int accumulate, float *tiles, size_t tile_floats) {
    int parts = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int p = 0; p < parts; p++)
        cpu_matmul_codes_part(k, y, x, c, bias, M, N, K, accumulate,
                              tiles + tile_floats * (size_t)omp_get_thread_num(), p, parts);
}

/* ------------------------------------------------------------------------------- products from the codes */

/* Part p of parts takes groups [G*p/parts, G*(p+1)/parts) of CPU_Q4_GROUP output features of the whole list
 * of jobs, so every weight is read by one thread once. */
void cpu_matmul_q4_part(const CpuKernels *k, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                        int accumulate, float *tile, int part, int parts) {
    long groups = 0;
    for (int j = 0; j < n_jobs; j++) groups += (jobs[j].N + CPU_Q4_GROUP - 1) / CPU_Q4_GROUP;
    long g0 = groups * part / parts, g1 = groups * (part + 1) / parts, base = 0;
    for (int j = 0; j < n_jobs; j++) {
        long gj = (jobs[j].N + CPU_Q4_GROUP - 1) / CPU_Q4_GROUP, lo = g0 > base ? g0 : base,
             hi = g1 < base + gj ? g1 : base + gj;
        if (lo < hi) {
            int n0 = (int)(lo - base) * CPU_Q4_GROUP, n1 = (int)(hi - base) * CPU_Q4_GROUP;
            k->q4_rows(jobs[j].y, jobs[j].N, x, M, K, jobs[j].w, jobs[j].bias, n0, n1 < jobs[j].N ? n1 : jobs[j].N,
                       accumulate, tile);
        }
        base += gj;
    }
}

void cpu_matmul_q4(const CpuKernels *k, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                   int accumulate, float *tiles) {
#pragma omp parallel
    cpu_matmul_q4_part(k, jobs, n_jobs, x, M, K, accumulate,
                       tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(), omp_get_thread_num(),
                       omp_get_num_threads());
}

/* Outputs [n0, n1) of part `part`: whole groups of CPU_Q4_GROUP. */
static void part_range(int N, int part, int parts, int *n0, int *n1) {
    long groups = (N + CPU_Q4_GROUP - 1) / CPU_Q4_GROUP;
    *n0 = (int)(groups * part / parts) * CPU_Q4_GROUP;
    *n1 = (int)(groups * (part + 1) / parts) * CPU_Q4_GROUP;
    *n1 = *n1 < N ? *n1 : N;
}

void cpu_ffn_q4_part(const CpuKernels *k, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu,
                     const float *x, int M, int K, int F, float *tile, int part, int parts) {
    int f0, f1;
    part_range(F, part, parts, &f0, &f1);
    if (f0 >= f1) return;
    k->q4_rows(gate, F, x, M, K, wg, NULL, f0, f1, 0, tile);
    k->q4_rows(up, F, x, M, K, wu, NULL, f0, f1, 0, tile);
    for (int m = 0; m < M; m++) k->swiglu(gate + (size_t)m * F + f0, up + (size_t)m * F + f0, (size_t)(f1 - f0));
}

void cpu_ffn_q4(const CpuKernels *k, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu,
                const float *x, int M, int K, int F, float *tiles) {
#pragma omp parallel
    cpu_ffn_q4_part(k, gate, up, wg, wu, x, M, K, F, tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(),
                    omp_get_thread_num(), omp_get_num_threads());
}

void cpu_matmul_q8_part(const CpuKernels *k, float *y, const float *x, const CpuPacked *w, const float *bias, int M,
                        int N, int K, int accumulate, float *tile, int part, int parts) {
    int n0, n1;
    part_range(N, part, parts, &n0, &n1);
    if (n0 < n1) k->q8_rows(y, N, x, M, K, w, bias, n0, n1, accumulate, tile);
}

void cpu_matmul_q8(const CpuKernels *k, float *y, const float *x, const CpuPacked *w, const float *bias, int M, int N,
                   int K, int accumulate, float *tiles) {
#pragma omp parallel
    cpu_matmul_q8_part(k, y, x, w, bias, M, N, K, accumulate,
                       tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(), omp_get_thread_num(),
                       omp_get_num_threads());
}

/* ------------------------------------------------------------------------------------------ fast products */

/* The quantised rows in a tile of CPU_Q4_TILE_FLOATS(K) floats (CpuFastX's layout): CPU_FAST_ROWS * K code bytes,
 * then four per-block arrays (d, xo, s, s16) of CPU_FAST_ROWS * K / 32 each, 24 K bytes in all. */
static CpuFastX fast_x(float *tile, int K) {
    char *p = (char *)tile;
    size_t sums = sizeof(float) * CPU_FAST_ROWS * (size_t)(K / 32);
    CpuFastX x = {(int8_t *)p, (float *)(p + (size_t)CPU_FAST_ROWS * K),
                  (float *)(p + (size_t)CPU_FAST_ROWS * K + sums),
                  (int32_t *)(p + (size_t)CPU_FAST_ROWS * K + 2 * sums),
                  (int32_t *)(p + (size_t)CPU_FAST_ROWS * K + 3 * sums), K, 0};
    return x;
}

/* Each part takes a share of the outputs in groups of CPU_FAST_GROUP and, per pass of up to CPU_FAST_ROWS
 * rows, reads each weight block of its share once for all those rows. */
static void fast_part(const CpuFastKernels *f, const CpuFastJob *jobs, int n_jobs, const float *x, int M, int K,
                      int accumulate, float *tile, int part, int parts) {
    long groups = 0;
    for (int j = 0; j < n_jobs; j++) groups += (jobs[j].N + CPU_FAST_GROUP - 1) / CPU_FAST_GROUP;
    long g0 = groups * part / parts, g1 = groups * (part + 1) / parts;
    if (g0 >= g1) return;
    CpuFastX fx = fast_x(tile, K);
    if (f->begin) f->begin();
    for (int m0 = 0; m0 < M; m0 += CPU_FAST_ROWS) {
        fx.rows = M - m0 < CPU_FAST_ROWS ? M - m0 : CPU_FAST_ROWS;
        for (int m = 0; m < fx.rows; m++) f->quantize(&fx, m, x + (size_t)(m0 + m) * K);
        long base = 0;
        for (int j = 0; j < n_jobs; j++) {
            long gj = (jobs[j].N + CPU_FAST_GROUP - 1) / CPU_FAST_GROUP;
            CpuFastGroupFn *group = jobs[j].blocks ? f->blocks[jobs[j].blocks->type] : f->group;
            for (long g = g0 > base ? g0 : base; g < g1 && g < base + gj; g++) {
                int n0 = (int)(g - base) * CPU_FAST_GROUP;
                int n1 = n0 + CPU_FAST_GROUP < jobs[j].N ? n0 + CPU_FAST_GROUP : jobs[j].N;
                group(&jobs[j], &fx, m0, n0, n1, accumulate);
            }
            base += gj;
        }
    }
    if (f->end) f->end();
}

void cpu_matmul_q4_fast_part(const CpuFastKernels *f, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                             int accumulate, float *tile, int part, int parts) {
    CpuFastJob fj[4];
    for (int j = 0; j < n_jobs; j++) fj[j] = (CpuFastJob){jobs[j].y, jobs[j].w, NULL, jobs[j].bias, jobs[j].N, NULL};
    fast_part(f, fj, n_jobs, x, M, K, accumulate, tile, part, parts);
}

void cpu_matmul_q8_fast_part(const CpuFastKernels *f, float *y, const float *x, const CpuPacked *w, const float *bias,
                             int M, int N, int K, int accumulate, float *tile, int part, int parts) {
    CpuFastJob job = {y, NULL, w, bias, N, NULL};
    fast_part(f, &job, 1, x, M, K, accumulate, tile, part, parts);
}

void cpu_matmul_blocks_fast_part(const CpuFastKernels *f, float *y, const float *x, const CpuBlocks *w,
                                 const float *bias, int M, int N, int K, int accumulate, float *tile, int part,
                                 int parts) {
    CpuFastJob job = {y, NULL, NULL, bias, N, w};
    fast_part(f, &job, 1, x, M, K, accumulate, tile, part, parts);
}

/* ---------------------------------------------------------------------------------------------- attention */

int cpu_attend_direct(const CpuKernels *k, int d) { return k->attend_rows && d % k->attend_multiple == 0; }

void cpu_attend_heads_rows(const CpuKernels *k, float *out, float *probs, const float *q, const CpuRows *kr,
                           const CpuRows *vr, int n, int d, float scale, int G) {
    if (cpu_attend_direct(k, d) && n > 0) k->attend_rows(out, probs, q, kr, vr, n, d, scale, G);
}

void cpu_attend_heads(const CpuKernels *k, float *out, float *probs, const float *q, const float *kk, const float *v,
                      int n, int d, float scale, int G) {
    if (cpu_attend_direct(k, d) && n > 0) {
        CpuRows keys = {NULL, NULL, 0, kk, 0}, values = {NULL, NULL, 0, v, 0};
        k->attend_rows(out, probs, q, &keys, &values, n, d, scale, G);
        return;
    }
    for (int g = 0; g < G; g++)
        cpu_attend_row(out + (size_t)g * d, probs + (size_t)g * n, q + (size_t)g * d, kk, v, n, d, scale);
}

/* scores[T][n_past + T]: the causal softmax of T query rows over their keys, zero past each row's last key. */
static void attend_probs(const CpuKernels *k, const float *q, int ldq, const float *kk, int T, int n_past, int d,
                         float scale, float *scores) {
    int n = n_past + T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, d, scale, q, ldq, kk, d, 0.0f, scores, n);
    for (int t = 0; t < T; t++) {
        float *row = scores + (size_t)t * n;
        int seen = n_past + t + 1;
        k->softmax(row, seen);
        memset(row + seen, 0, (size_t)(n - seen) * sizeof(float));
    }
}

void cpu_attend_block(const CpuKernels *k, float *out, int ldo, const float *q, int ldq, const float *kk,
                      const float *v, int T, int n_past, int d, float scale, float *scores) {
    int n = n_past + T;
    attend_probs(k, q, ldq, kk, T, n_past, d, scale, scores);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d, n, 1.0f, scores, n, v, d, 0.0f, out, ldo);
}

void cpu_attention_sums(const CpuKernels *k, double *sums, int ld_sums, const float *q, int ldq,
                        const float *const *keys, int H, int K, int T, int n_past, int d, float scale, int tile,
                        float *scores, size_t score_stride) {
    const int G = H / K;
#pragma omp parallel for schedule(dynamic)
    for (int h = 0; h < H; h++) {
        double *sum = sums + (size_t)h * ld_sums;
        float *p = scores + score_stride * (size_t)omp_get_thread_num();
        for (int j = n_past; j < n_past + T; j++) sum[j] = 0.0;
        for (int t0 = 0; t0 < T; t0 += tile) {
            int rows = T - t0 < tile ? T - t0 : tile, n = n_past + t0 + rows;
            attend_probs(k, q + (size_t)t0 * ldq + (size_t)h * d, ldq, keys[h / G], rows, n_past + t0, d, scale, p);
            for (int t = 0; t < rows; t++)
                for (int j = 0; j <= n_past + t0 + t; j++) sum[j] += p[(size_t)t * n + j];
        }
    }
}

void cpu_query_stats(double *stats, const float *q, int ldq, int H, int d, int T, int pos0, int from, int last) {
    const size_t per_head = (size_t)d + (size_t)d * d;
    const int count = pos0 + T - from;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        double *sum = stats + per_head * h, *outer = sum + d;
        if (pos0 == 0) memset(sum, 0, sizeof(double) * per_head);
        for (int t = from > pos0 ? from - pos0 : 0; t < T; t++) {
            const float *x = q + (size_t)t * ldq + (size_t)h * d;
            for (int a = 0; a < d; a++) {
                sum[a] += x[a];
                for (int b = a; b < d; b++) outer[(size_t)a * d + b] += (double)x[a] * x[b];
            }
        }
        if (!last || count < 1) continue;
        for (int a = 0; a < d; a++) sum[a] /= count;
        for (int a = 0; a < d; a++)
            for (int b = a; b < d; b++)
                outer[(size_t)a * d + b] = outer[(size_t)b * d + a] = outer[(size_t)a * d + b] / count - sum[a] * sum[b];
    }
}

/* ------------------------------------------------------------------------------ a matrix and its products */

static void product_q4(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                       int accumulate, const CpuTile *tile, int part, int parts) {
    CpuQ4Job q4[3];
    for (int j = 0; j < n_jobs; j++) q4[j] = (CpuQ4Job){jobs[j].y, jobs[j].w->codes.q4, jobs[j].bias, jobs[j].w->N};
    cpu_matmul_q4_part(k, q4, n_jobs, x, M, jobs[0].w->K, accumulate, tile->few, part, parts);
}

/* The fast kernel for M rows (the table's: AMX's tile products pay off from about 8 rows). */
static const CpuFastKernels *fast_kernels(const CpuKernels *k, int M) { return M < 8 ? &k->fast_few : &k->fast_many; }

static void product_q4_fast(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                            int accumulate, const CpuTile *tile, int part, int parts) {
    CpuQ4Job q4[3];
    for (int j = 0; j < n_jobs; j++) q4[j] = (CpuQ4Job){jobs[j].y, jobs[j].w->codes.q4, jobs[j].bias, jobs[j].w->N};
    cpu_matmul_q4_fast_part(fast_kernels(k, M), q4, n_jobs, x, M, jobs[0].w->K, accumulate, tile->few, part, parts);
}

static void product_q8(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                       int accumulate, const CpuTile *tile, int part, int parts) {
    for (int j = 0; j < n_jobs; j++)
        cpu_matmul_q8_part(k, jobs[j].y, x, jobs[j].w->codes.q8, jobs[j].bias, M, jobs[j].w->N, jobs[j].w->K,
                           accumulate, tile->few, part, parts);
}

static void product_q8_fast(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                            int accumulate, const CpuTile *tile, int part, int parts) {
    for (int j = 0; j < n_jobs; j++)
        cpu_matmul_q8_fast_part(fast_kernels(k, M), jobs[j].y, x, jobs[j].w->codes.q8, jobs[j].bias, M, jobs[j].w->N,
                                jobs[j].w->K, accumulate, tile->few, part, parts);
}

static void product_blocks_fast(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                                int accumulate, const CpuTile *tile, int part, int parts) {
    for (int j = 0; j < n_jobs; j++)
        cpu_matmul_blocks_fast_part(fast_kernels(k, M), jobs[j].y, x, jobs[j].w->codes.blocks, jobs[j].bias, M,
                                    jobs[j].w->N, jobs[j].w->K, accumulate, tile->few, part, parts);
}

static void product_blas_f32(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                             int accumulate, const CpuTile *tile, int part, int parts) {
    (void)k, (void)tile;
    for (int j = 0; j < n_jobs; j++)
        cpu_matmul_part(jobs[j].y, x, jobs[j].w->f32, jobs[j].bias, M, jobs[j].w->N, jobs[j].w->K, accumulate, part,
                        parts);
}

static void product_blas_codes(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                               int accumulate, const CpuTile *tile, int part, int parts) {
    for (int j = 0; j < n_jobs; j++)
        cpu_matmul_codes_part(k, jobs[j].y, x, &jobs[j].w->codes, jobs[j].bias, M, jobs[j].w->N, jobs[j].w->K,
                              accumulate, tile->many, part, parts);
}

static void ffn_q4(const CpuKernels *k, float *gate, float *up, const CpuMatrix *wg, const CpuMatrix *wu,
                   const float *x, int M, const CpuTile *tile, int part, int parts) {
    cpu_ffn_q4_part(k, gate, up, wg->codes.q4, wu->codes.q4, x, M, wg->K, wg->N, tile->few, part, parts);
}

void cpu_matrix_init(CpuMatrix *w, int N, int K, const float *f32, CpuCodes codes) {
    CpuForm form = codes.q4 ? CPU_FORM_Q4 : codes.q8 ? CPU_FORM_Q8 : codes.blocks ? CPU_FORM_BLOCKS : CPU_FORM_F32;
    *w = (CpuMatrix){.form = form, .N = N, .K = K, .f32 = f32, .codes = codes};
    w->product[CPU_PRODUCT_MANY] = f32 ? product_blas_f32 : product_blas_codes;
    if (form == CPU_FORM_Q4) {
        w->product[CPU_PRODUCT_FEW] = product_q4, w->product[CPU_PRODUCT_FAST] = product_q4_fast;
        w->ffn[CPU_PRODUCT_FEW] = ffn_q4;
    } else if (form == CPU_FORM_Q8) {
        w->product[CPU_PRODUCT_FEW] = product_q8, w->product[CPU_PRODUCT_FAST] = product_q8_fast;
    } else if (form == CPU_FORM_BLOCKS && cpu_fast_block_type(codes.blocks->type)) {
        w->product[CPU_PRODUCT_FAST] = product_blocks_fast;
    }
}
