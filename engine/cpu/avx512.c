/* avx512.c — the kernel table's AVX-512 entries (AVX-512F, 16 lanes; kernels.h, isa.h).
 *
 * Exact products from the codes as avx2.c's with 16 lanes, register tiles of 4 outputs x up to 4 rows (one
 * accumulator of 16 lanes per output, reduced as _mm512_reduce_add_ps does). SwiGLU, softmax and the
 * decode attention give the portable kernels' bits (portable.c fixes their orders in the source); the
 * attention reads a cache's rows where they are (a view's shared rows in its base, binary16 rows widened in
 * registers), so a view and an f16 cache need no copy. Rebuilt rows (GGUF Q4_K, Q5_K, Q6_K and Q5_0 blocks on
 * 16 lanes) and binary16 conversions: the portable bits. blas_order: 16 rows of x per vector (x transposed), each
 * lane one output's chain, so its sums are the portable order's (OpenBLAS's) whatever the lanes. gemv_order
 * (Q4_K, Q5_K, Q6_K): blocks rebuilt in registers straight into sgemv's eight chains, two weight rows per vector. */
#include "isa.h"

#if CPU_X86
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define Q4_GROUP CPU_Q4_GROUP

/* --------------------------------------------------------------- AVX-512: 16 lanes, tiles of 4 x up to 4 */

static inline AVX512_TARGET void block_avx512(const CpuQ4Block *b, __m512 *w0, __m512 *w1) {
    __m512 s = _mm512_set1_ps(_cvtsh_ss(b->scale)), o = _mm512_set1_ps(_cvtsh_ss(b->offset));
    __m128i c = _mm_loadu_si128((const __m128i *)b->codes), mask = _mm_set1_epi8(15);
    *w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(c, mask))), s, o);
    *w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(c, 4), mask))), s, o);
}

/* G (1 or 4) consecutive outputs from n for one row x, the blocks converted in registers. Written out for 4
 * rows so the accumulators stay in registers; each row's codes are prefetched ~1 KiB ahead. */
#define ROW_STEP_AVX512(acc, row)                                                                                  \
    do {                                                                                                           \
        const CpuQ4Block *blk_ = (row) + b;                                                                        \
        _mm_prefetch((const char *)(blk_ + 48), _MM_HINT_T0);                                                      \
        __m512 w0_, w1_;                                                                                           \
        block_avx512(blk_, &w0_, &w1_);                                                                            \
        acc = _mm512_fmadd_ps(w0_, x0, acc);                                                                       \
        acc = _mm512_fmadd_ps(w1_, x1, acc);                                                                       \
    } while (0)

static inline __attribute__((always_inline)) AVX512_TARGET void one_row_avx512(float *y, const float *x, int K,
                                                                               const CpuQ4Block *w,
                                                                               const float *bias, int n, int G,
                                                                               int accumulate) {
    int per_row = K / 32;
    const CpuQ4Block *r0 = w + (size_t)n * per_row, *r1 = r0 + per_row, *r2 = r1 + per_row, *r3 = r2 + per_row;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int b = 0; b < per_row; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
        ROW_STEP_AVX512(a0, r0);
        if (G == 4) {
            ROW_STEP_AVX512(a1, r1);
            ROW_STEP_AVX512(a2, r2);
            ROW_STEP_AVX512(a3, r3);
        }
    }
    cpu_store_out(y + n, _mm512_reduce_add_ps(a0), bias, n, accumulate);
    if (G == 4) {
        cpu_store_out(y + n + 1, _mm512_reduce_add_ps(a1), bias, n + 1, accumulate);
        cpu_store_out(y + n + 2, _mm512_reduce_add_ps(a2), bias, n + 2, accumulate);
        cpu_store_out(y + n + 3, _mm512_reduce_add_ps(a3), bias, n + 3, accumulate);
    }
}

/* The 16 sums of a full 4 x 4 register tile, each in _mm512_reduce_add_ps's order (lanes i and i+8, then i
 * and i+4, then i and i+2, then the last two), the shuffles and adds shared by the 16: the same bits as 16
 * separate reductions at a third of the instructions. Result lane 4r + g holds acc[g][r], so quarter r is the
 * row's 4 consecutive outputs; they are stored as store_out would, with bias[n..n+3] and accumulate. */
static inline __attribute__((always_inline)) AVX512_TARGET void store_tile4x4_avx512(float *y, int ldy, int m,
                                                                                     __m512 acc[Q4_GROUP][4],
                                                                                     const float *bias, int n,
                                                                                     int accumulate) {
    __m512 half[8], quarter[4], pair[2];
    for (int i = 0; i < 8; i++) { /* accumulators 2i, 2i+1 (index g*4 + r): lanes 0-7 and 8-15 of half[i] */
        __m512 a = acc[(2 * i) / 4][(2 * i) % 4], b = acc[(2 * i + 1) / 4][(2 * i + 1) % 4];
        half[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int j = 0; j < 4; j++) /* quarter q of quarter[j]: accumulator 4j + q, 4 lanes */
        quarter[j] = _mm512_add_ps(_mm512_shuffle_f32x4(half[2 * j], half[2 * j + 1], 0x88),
                                   _mm512_shuffle_f32x4(half[2 * j], half[2 * j + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* within each quarter: (lane 0 + lane 2, lane 1 + lane 3) of two sources */
        pair[i] = _mm512_add_ps(_mm512_shuffle_ps(quarter[2 * i], quarter[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_ps(quarter[2 * i], quarter[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(pair[0], pair[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_ps(pair[0], pair[1], _MM_SHUFFLE(3, 1, 3, 1)));
    float lanes[16];
    _mm512_storeu_ps(lanes, sums);
    for (int r = 0; r < 4; r++) {
        __m128 total = _mm_loadu_ps(lanes + 4 * r);
        float *out = y + (size_t)(m + r) * ldy + n;
        if (bias) total = _mm_add_ps(total, _mm_loadu_ps(bias + n));
        _mm_storeu_ps(out, accumulate ? _mm_add_ps(_mm_loadu_ps(out), total) : total);
    }
}

static inline __attribute__((always_inline)) AVX512_TARGET void tile_avx512(float *y, int ldy, const float *x, int m,
                                                                            int R, int K, const float *tile,
                                                                            const float *bias, int n, int G,
                                                                            int accumulate) {
    __m512 acc[Q4_GROUP][4];
    for (int g = 0; g < G; g++)
        for (int r = 0; r < R; r++) acc[g][r] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 16) {
        __m512 xv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) xv[r] = _mm512_loadu_ps(x + (size_t)(m + r) * K + k);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m512 wv = _mm512_load_ps(tile + (size_t)g * K + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[g][r] = _mm512_fmadd_ps(wv, xv[r], acc[g][r]);
        }
    }
    if (G == Q4_GROUP && R == 4) {
        store_tile4x4_avx512(y, ldy, m, acc, bias, n, accumulate);
        return;
    }
    for (int g = 0; g < G; g++)
        for (int r = 0; r < R; r++)
            cpu_store_out(y + (size_t)(m + r) * ldy + n + g, _mm512_reduce_add_ps(acc[g][r]), bias, n + g, accumulate);
}

static inline __attribute__((always_inline)) AVX512_TARGET void tiles_avx512(float *y, int ldy, const float *x,
                                                                             int M, int K, const float *tile,
                                                                             const float *bias, int n, int G,
                                                                             int accumulate) {
    int m = 0;
    for (; m + 4 <= M; m += 4) tile_avx512(y, ldy, x, m, 4, K, tile, bias, n, G, accumulate);
    switch (M - m) {
    case 3: tile_avx512(y, ldy, x, m, 3, K, tile, bias, n, G, accumulate); break;
    case 2: tile_avx512(y, ldy, x, m, 2, K, tile, bias, n, G, accumulate); break;
    case 1: tile_avx512(y, ldy, x, m, 1, K, tile, bias, n, G, accumulate); break;
    }
}

static inline __attribute__((always_inline)) AVX512_TARGET void group_avx512(float *y, int ldy, const float *x,
                                                                             int M, int K, const CpuQ4Block *w,
                                                                             const float *bias, int n, int G,
                                                                             int accumulate, float *tile) {
    if (M == 1) {
        one_row_avx512(y, x, K, w, bias, n, G, accumulate);
        return;
    }
    int per_row = K / 32;
    for (int g = 0; g < G; g++)
        for (int b = 0; b < per_row; b++) {
            __m512 w0, w1;
            block_avx512(w + (size_t)(n + g) * per_row + b, &w0, &w1);
            _mm512_store_ps(tile + (size_t)g * K + b * 32, w0);
            _mm512_store_ps(tile + (size_t)g * K + b * 32 + 16, w1);
        }
    tiles_avx512(y, ldy, x, M, K, tile, bias, n, G, accumulate);
}

AVX512_TARGET void cpu_q4_rows_avx512(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w,
                                      const float *bias, int n0, int n1, int accumulate, float *tile) {
    int n = n0;
    for (; n + Q4_GROUP <= n1; n += Q4_GROUP) group_avx512(y, ldy, x, M, K, w, bias, n, Q4_GROUP, accumulate, tile);
    for (; n < n1; n++) group_avx512(y, ldy, x, M, K, w, bias, n, 1, accumulate, tile);
}

static inline AVX512_TARGET void block_q8_avx512(const CpuPacked *w, size_t bi, __m512 *w0, __m512 *w1) {
    __m512 s = _mm512_set1_ps(w->scale[bi]), o = _mm512_set1_ps(w->offset[bi]);
    const int8_t *q = w->q + bi * 32;
    *w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), s, o);
    *w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)))), s, o);
}

AVX512_TARGET void cpu_q8_rows_avx512(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w,
                                         const float *bias, int n0, int n1, int accumulate, float *tile) {
    int per_row = K / 32;
    for (int n = n0; n < n1;) {
        if (M == 1) {
            __m512 acc = _mm512_setzero_ps();
            for (int b = 0; b < per_row; b++) {
                _mm_prefetch((const char *)(w->q + ((size_t)n * per_row + b) * 32 + 1024), _MM_HINT_T0);
                __m512 w0, w1;
                block_q8_avx512(w, (size_t)n * per_row + b, &w0, &w1);
                acc = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + b * 32), acc);
                acc = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + b * 32 + 16), acc);
            }
            cpu_store_out(y + n, _mm512_reduce_add_ps(acc), bias, n, accumulate);
            n++;
            continue;
        }
        int G = n1 - n >= Q4_GROUP ? Q4_GROUP : 1;
        for (int g = 0; g < G; g++)
            for (int b = 0; b < per_row; b++) {
                __m512 w0, w1;
                block_q8_avx512(w, (size_t)(n + g) * per_row + b, &w0, &w1);
                _mm512_store_ps(tile + (size_t)g * K + b * 32, w0);
                _mm512_store_ps(tile + (size_t)g * K + b * 32 + 16, w1);
            }
        if (G == Q4_GROUP) tiles_avx512(y, ldy, x, M, K, tile, bias, n, Q4_GROUP, accumulate);
        else tiles_avx512(y, ldy, x, M, K, tile, bias, n, 1, accumulate);
        n += G;
    }
}


/* ---------------------------------------------------------------------------------------------- SwiGLU */

/* portable.c's exp_approx on 16 lanes: the same operations in the same order, each rounded (no fused
 * multiply-add), and the clamp as its two comparisons, so every lane is bit for bit the portable value. */
static inline __attribute__((always_inline)) AVX512_TARGET __m512 exp_approx_avx512(__m512 x) {
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ), x, _mm512_set1_ps(-87.0f));
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(88.0f), _CMP_GT_OQ), x, _mm512_set1_ps(88.0f));
    const __m512 round = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), round), round);
    __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f))),
                             _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187045e-06f)));
    __m512 p = _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_mul_ps(r, _mm512_add_ps(_mm512_set1_ps(1.0f / 120), p));
    p = _mm512_mul_ps(r, _mm512_add_ps(_mm512_set1_ps(1.0f / 24), p));
    p = _mm512_mul_ps(r, _mm512_add_ps(_mm512_set1_ps(1.0f / 6), p));
    p = _mm512_mul_ps(r, _mm512_add_ps(_mm512_set1_ps(0.5f), p));
    p = _mm512_mul_ps(r, _mm512_add_ps(_mm512_set1_ps(1.0f), p));
    p = _mm512_add_ps(_mm512_set1_ps(1.0f), p);
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

/* ----------------------------------------------------------------------- sums in OpenBLAS's order (blas_order) */

/* Up to 12 weight rows at a time and their outputs held transposed, yt[row][lane], so each K block's chains
 * are added to them as vectors (lane by lane the same additions as one output at a time). */
#define WEIGHT_ROWS_PER_PASS 12

/* Rows [n0, n0 + NR) of w (the last row repeated past `rows`, its sums not kept) against xt, one K block:
 * NR x MV chains of 16 lanes, each lane one output's, added to yt at the end of the block. MV and NR are
 * constants where it is inlined, so the chains stay in registers. */
static inline __attribute__((always_inline)) AVX512_TARGET void blas_order_group(float *yt, const float *xt, int ldx,
                                                                               int K, const float *w, int rows,
                                                                               int n0, int k0, int len, const int MV,
                                                                               const int NR) {
    const float *wr[WEIGHT_ROWS_PER_PASS];
    __m512 acc[4][WEIGHT_ROWS_PER_PASS];
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++) wr[j] = w + (size_t)(n0 + j < rows ? n0 + j : rows - 1) * K;
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int i = 0; i < MV; i++) acc[i][j] = _mm512_setzero_ps();
    for (int k = k0; k < k0 + len; k++) {
        const float *xk = xt + (size_t)k * ldx;
        __m512 xv[4];
#pragma GCC unroll 4
        for (int i = 0; i < MV; i++) xv[i] = _mm512_loadu_ps(xk + 16 * i);
#pragma GCC unroll 12
        for (int j = 0; j < NR; j++) {
            __m512 b = _mm512_set1_ps(wr[j][k]);
#pragma GCC unroll 4
            for (int i = 0; i < MV; i++) acc[i][j] = _mm512_fmadd_ps(xv[i], b, acc[i][j]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int i = 0; i < MV; i++) {
            float *out = yt + (size_t)(n0 + j) * ldx + 16 * i;
            if (n0 + j < rows) _mm512_store_ps(out, _mm512_add_ps(_mm512_load_ps(out), acc[i][j]));
        }
}

static inline __attribute__((always_inline)) AVX512_TARGET void blas_order_rows(float *yt, const float *xt, int ldx,
                                                                              int K, const float *w, int rows,
                                                                              const int MV, const int NR) {
    for (int k0 = 0, len; k0 < K; k0 += len) {
        len = cpu_blas_k_block(K, k0);
        for (int n0 = 0; n0 < rows; n0 += NR) blas_order_group(yt, xt, ldx, K, w, rows, n0, k0, len, MV, NR);
    }
}

AVX512_TARGET void cpu_blas_order_avx512(float *y, int ldy, const float *xt, int ldx, int M, int K, const float *w,
                                         int rows) {
    _Alignas(64) float yt[WEIGHT_ROWS_PER_PASS * CPU_BLAS_ORDER_MAX_X_ROWS];
    for (int r0 = 0; r0 < rows; r0 += WEIGHT_ROWS_PER_PASS) {
        int nr = rows - r0 < WEIGHT_ROWS_PER_PASS ? rows - r0 : WEIGHT_ROWS_PER_PASS;
        for (int j = 0; j < nr; j++)
            for (int m = 0; m < ldx; m++) yt[j * ldx + m] = m < M ? y[(size_t)m * ldy + r0 + j] : 0.0f;
        const float *wr = w + (size_t)r0 * K;
        switch (ldx / 16) { /* at most 24 chains */
        case 1: blas_order_rows(yt, xt, ldx, K, wr, nr, 1, 12); break;
        case 2: blas_order_rows(yt, xt, ldx, K, wr, nr, 2, 12); break;
        case 3: blas_order_rows(yt, xt, ldx, K, wr, nr, 3, 6); break;
        default: blas_order_rows(yt, xt, ldx, K, wr, nr, 4, 6); break;
        }
        for (int j = 0; j < nr; j++)
            for (int m = 0; m < M; m++) y[(size_t)m * ldy + r0 + j] = yt[j * ldx + m];
    }
}

AVX512_TARGET void cpu_swiglu_avx512(float *g, const float *u, size_t n) {
    size_t i = 0;
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i);
        __m512 e = exp_approx_avx512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gv), sign)));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
                                              _mm512_loadu_ps(u + i)));
    }
    cpu_swiglu(g + i, u + i, n - i);
}

/* ------------------------------------------------------------------------------------- decode attention */

/* cpu_softmax bit for bit on G (constant) rows of n, row g at x + g*n: the maximum (exact in any order), the
 * exps 16 at a time, each row's sum one by one in index order as cpu_softmax adds them (the rows' sums side
 * by side, so their chains of additions overlap), the scaling elementwise. */
static inline __attribute__((always_inline)) AVX512_TARGET void softmax_rows(float *x, int n, const int G) {
    float mx[4], total[4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        const float *row = x + (size_t)g * n;
        __m512 mxv = _mm512_set1_ps(-INFINITY);
        int i = 0;
        for (; i + 16 <= n; i += 16) mxv = _mm512_max_ps(mxv, _mm512_loadu_ps(row + i));
        mx[g] = _mm512_reduce_max_ps(mxv);
        for (; i < n; i++) mx[g] = row[i] > mx[g] ? row[i] : mx[g];
        total[g] = 0.0f;
    }
    for (int i0 = 0; i0 < n; i0 += 16) {
        __mmask16 live = n - i0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i0)) - 1);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            float *row = x + (size_t)g * n + i0;
            _mm512_mask_storeu_ps(row, live, exp_approx_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, row), _mm512_set1_ps(mx[g]))));
        }
        for (int i = i0; i < i0 + 16 && i < n; i++) {
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) total[g] += x[(size_t)g * n + i];
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        float *row = x + (size_t)g * n;
        __m512 inv = _mm512_set1_ps(1.0f / total[g]);
        for (int i0 = 0; i0 < n; i0 += 16) {
            __mmask16 live = n - i0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i0)) - 1);
            _mm512_mask_storeu_ps(row + i0, live, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row + i0), inv));
        }
    }
}


AVX512_TARGET void cpu_softmax_avx512(float *x, int n) {
    if (n > 0) softmax_rows(x, n, 1);
}

/* Row j of a head's keys or values as attention reads them in place (CpuRows): a shared row of the base or
 * an own row. */
static inline __attribute__((always_inline)) const char *row_at(const CpuRows *r, int j, size_t row_bytes) {
    if (j < r->n_shared) return (const char *)r->base + (size_t)r->shared[j] * row_bytes;
    return (const char *)r->own + (size_t)(j - r->n_shared) * row_bytes;
}

/* Rows are asked for this many keys ahead: a view's shared rows are scattered in its base, where the
 * hardware's stream prefetchers do not find them. */
#define ROWS_AHEAD 8
static inline __attribute__((always_inline)) void prefetch_row(const char *row, size_t row_bytes) {
    for (size_t at = 0; at < row_bytes; at += 64) __builtin_prefetch(row + at, 0, 3);
}

/* 16 floats at float index i of a row: f32, or binary16 widened (exactly) when HALF. */
static inline __attribute__((always_inline)) AVX512_TARGET __m512 row_load(const char *row, int i, const int HALF) {
    if (HALF) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(const void *)row + i)));
    return _mm512_loadu_ps((const float *)(const void *)row + i);
}

/* The 4x4 transposes of q.k: 16-float block i of keys r0..r3 as t[0..3], where t[c] holds floats i+4c..i+4c+3
 * of each key, key by 128-bit quarter. */
static inline __attribute__((always_inline)) AVX512_TARGET void key_quarters(const char *const r[4], int i, __m512 t[4],
                                                                             const int HALF) {
    __m512 a0 = row_load(r[0], i, HALF), a1 = row_load(r[1], i, HALF), a2 = row_load(r[2], i, HALF),
           a3 = row_load(r[3], i, HALF);
    __m512 lo01 = _mm512_shuffle_f32x4(a0, a1, 0x44), hi01 = _mm512_shuffle_f32x4(a0, a1, 0xEE);
    __m512 lo23 = _mm512_shuffle_f32x4(a2, a3, 0x44), hi23 = _mm512_shuffle_f32x4(a2, a3, 0xEE);
    t[0] = _mm512_shuffle_f32x4(lo01, lo23, 0x88), t[1] = _mm512_shuffle_f32x4(lo01, lo23, 0xDD);
    t[2] = _mm512_shuffle_f32x4(hi01, hi23, 0x88), t[3] = _mm512_shuffle_f32x4(hi01, hi23, 0xDD);
}

/* probs . v for output floats [i, i + 16 NV) of G heads: keys in order, multiply then add (no fused
 * multiply-add), each head's NV accumulators in registers (constant G and NV). */
static inline __attribute__((always_inline)) AVX512_TARGET void values_block(float *out, const float *probs,
                                                                             const CpuRows *v, int n, int d, int i,
                                                                             const int G, const int NV, const int HALF) {
    size_t row_bytes = (size_t)d * (HALF ? 2 : 4);
    __m512 o[4][4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) o[g][c] = _mm512_setzero_ps();
    for (int j = 0; j < n; j++) {
        const char *row = row_at(v, j, row_bytes);
        if (i == 0 && j + ROWS_AHEAD < n) prefetch_row(row_at(v, j + ROWS_AHEAD, row_bytes), row_bytes);
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) vv[c] = row_load(row, i + 16 * c, HALF);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m512 p = _mm512_set1_ps(probs[(size_t)g * n + j]);
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++) o[g][c] = _mm512_add_ps(o[g][c], _mm512_mul_ps(p, vv[c]));
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) _mm512_storeu_ps(out + (size_t)g * d + i + 16 * c, o[g][c]);
}

/* cpu_attend_row for G (constant, 1..4) query heads that share the keys and values, d a multiple of 16, bit
 * for bit cpu_attend_row's values for each head on the rows in order (portable.c fixes its orders in the
 * source):
 *  - q.k_j: four keys at a time, one per 128-bit quarter (key_quarters, once for all heads); quarter lanes
 *    are cpu_attend_row's four lanes (products i = l mod 4 added in order), then ((0 + lane 0) + lane 1 +
 *    lane 2) + lane 3 per quarter; leftover keys as cpu_attend_row does them;
 *  - softmax: softmax_rows;
 *  - probs . v: values_block.
 * Each head's operations are those of one head alone; the heads only share loads and shuffles, and their
 * independent chains of additions fill each other's latencies. Rows are read where they are (a view's shared
 * rows in its base) and binary16 rows widened in registers (exact), so a view and an f16 cache need no copy. */
static inline __attribute__((always_inline)) AVX512_TARGET void attend_heads_body(float *out, float *probs,
                                                                                  const float *q, const CpuRows *k,
                                                                                  const CpuRows *v, int n, int d,
                                                                                  float scale, const int G,
                                                                                  const int HALF) {
    const __m512 zero = _mm512_setzero_ps();
    size_t row_bytes = (size_t)d * (HALF ? 2 : 4);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const char *r[4] = {row_at(k, j, row_bytes), row_at(k, j + 1, row_bytes), row_at(k, j + 2, row_bytes),
                            row_at(k, j + 3, row_bytes)};
        if (j + ROWS_AHEAD + 4 <= n)
            for (int a = 0; a < 4; a++) prefetch_row(row_at(k, j + ROWS_AHEAD + a, row_bytes), row_bytes);
        __m512 acc[4] = {zero, zero, zero, zero};
        for (int i = 0; i < d; i += 16) {
            __m512 t[4];
            key_quarters(r, i, t, HALF);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    acc[g] = _mm512_add_ps(acc[g], _mm512_mul_ps(t[c], _mm512_broadcast_f32x4(_mm_loadu_ps(q + (size_t)g * d + i + 4 * c))));
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m512 sum = _mm512_add_ps(zero, acc[g]);
            sum = _mm512_add_ps(sum, _mm512_permute_ps(acc[g], _MM_SHUFFLE(1, 1, 1, 1)));
            sum = _mm512_add_ps(sum, _mm512_permute_ps(acc[g], _MM_SHUFFLE(2, 2, 2, 2)));
            sum = _mm512_add_ps(sum, _mm512_permute_ps(acc[g], _MM_SHUFFLE(3, 3, 3, 3)));
            sum = _mm512_mul_ps(sum, _mm512_set1_ps(scale));
            __m512 firsts = _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), sum);
            _mm_storeu_ps(probs + (size_t)g * n + j, _mm512_castps512_ps128(firsts));
        }
    }
    for (; j < n; j++) {
        const char *row = row_at(k, j, row_bytes);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m128 lane = _mm_setzero_ps();
            for (int i = 0; i < d; i += 4) {
                __m128 kj = HALF ? _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)(row + 2 * (size_t)i)))
                                 : _mm_loadu_ps((const float *)(const void *)row + i);
                lane = _mm_add_ps(lane, _mm_mul_ps(_mm_loadu_ps(q + (size_t)g * d + i), kj));
            }
            float l[4];
            _mm_storeu_ps(l, lane);
            float *pj = probs + (size_t)g * n + j;
            *pj = (((0.0f + l[0]) + l[1]) + l[2]) + l[3];
            *pj *= scale;
        }
    }
    softmax_rows(probs, n, G);
    for (int i = 0; i < d; i += 64) {
        switch ((d - i < 64 ? d - i : 64) / 16) {
        case 4: values_block(out, probs, v, n, d, i, G, 4, HALF); break;
        case 3: values_block(out, probs, v, n, d, i, G, 3, HALF); break;
        case 2: values_block(out, probs, v, n, d, i, G, 2, HALF); break;
        default: values_block(out, probs, v, n, d, i, G, 1, HALF); break;
        }
    }
}

AVX512_TARGET void cpu_attend_rows_avx512(float *out, float *probs, const float *q, const CpuRows *k,
                                              const CpuRows *v, int n, int d, float scale, int G) {
    for (int g0 = 0; g0 < G; g0 += 4) { /* four heads at a time: their accumulators fill the registers */
        float *o = out + (size_t)g0 * d, *p = probs + (size_t)g0 * n;
        const float *qg = q + (size_t)g0 * d;
        int heads = G - g0 < 4 ? G - g0 : 4;
#define ATTEND_HEADS(h)                                                                                                \
    (k->half ? attend_heads_body(o, p, qg, k, v, n, d, scale, h, 1) : attend_heads_body(o, p, qg, k, v, n, d, scale, h, 0))
        if (heads == 4) ATTEND_HEADS(4);
        else if (heads == 3) ATTEND_HEADS(3);
        else if (heads == 2) ATTEND_HEADS(2);
        else ATTEND_HEADS(1);
#undef ATTEND_HEADS
    }
}

/* ------------------------------------------------------------------------------------------ rebuilt rows */

AVX512_TARGET void cpu_q4_rebuild_avx512(float *w, const CpuQ4Block *blocks, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m512 w0, w1;
        block_avx512(blocks + b, &w0, &w1);
        _mm512_storeu_ps(w + b * 32, w0);
        _mm512_storeu_ps(w + b * 32 + 16, w1);
    }
}

AVX512_TARGET void cpu_q8_rebuild_avx512(float *w, const CpuPacked *p, size_t b0, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m512 w0, w1;
        block_q8_avx512(p, b0 + b, &w0, &w1);
        _mm512_storeu_ps(w + b * 32, w0);
        _mm512_storeu_ps(w + b * 32 + 16, w1);
    }
}

/* ------------------------------------------------------------------------------------ GGUF block rebuilders */

/* avx2.c's block rebuilders on 16 lanes, the same operations per element (no fused multiply-add where the
 * dequantiser has none): the same bits as gguf.c's dequantisers. */

/* Bytes p[0..16) widened to 16 int32 lanes. */
static inline AVX512_TARGET __m512i bytes16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* K-quant super-blocks rebuilt 16 elements at a time from their scales (isa.h's CpuKScales) with the
 * dequantiser's operations per element, Q4_K and Q5_K (d * scale) * code - dmin * min and Q6_K
 * (d * scale) * (code - 32), a multiply and then a subtraction, no fused multiply-add: gguf.c's bits. */

/* Elements 16 g.. of a Q4_K block: chunk g / 4 of 64 holds its low 32 in the low nibbles of 32 bytes, its high
 * 32 in their high nibbles. The 16 values a code can take in the sub-block are rebuilt first (as the dequantiser
 * rebuilds each element), and each element picks its own by its code (permutexvar reads a lane's low 4 bits). */
static inline AVX512_TARGET __m512 q4_k_16(const uint8_t *blk, const CpuKScales *s, int g) {
    __m512i q = bytes16(blk + 16 + 32 * (g / 4) + 16 * (g % 2));
    if (g & 2) q = _mm512_srli_epi32(q, 4);
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 values = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(s->scale[g / 2]), codes),
                                  _mm512_set1_ps(s->offset[g / 2]));
    return _mm512_permutexvar_ps(q, values);
}

/* Elements 16 g.. of a Q5_K block: as Q4_K's (its codes 32 bytes further on), the fifth bit of element l of
 * sub-block s (= g / 2) from bit s of qh[l]. The 32 values a code can take in the sub-block are rebuilt first, and
 * each element picks its own by its code (permutex2var reads a lane's low 5 bits). */
static inline AVX512_TARGET __m512 q5_k_16(const uint8_t *blk, const CpuKScales *s, int g) {
    int sub = g / 2;
    __m512i q = bytes16(blk + 48 + 32 * (g / 4) + 16 * (g % 2)), h = bytes16(blk + 16 + 16 * (g % 2));
    if (g & 2) q = _mm512_srli_epi32(q, 4);
    h = sub < 4 ? _mm512_slli_epi32(h, 4 - sub) : _mm512_srli_epi32(h, sub - 4); /* bit s at bit 4 */
    __m512i code = _mm512_ternarylogic_epi32(q, h, _mm512_set1_epi32(15), 0xE4); /* bits 0-3 of q, the rest of h */
    const __m512 low = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 high = _mm512_setr_ps(16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
    __m512 scale = _mm512_set1_ps(s->scale[sub]), offset = _mm512_set1_ps(s->offset[sub]);
    return _mm512_permutex2var_ps(_mm512_sub_ps(_mm512_mul_ps(scale, low), offset), code,
                                  _mm512_sub_ps(_mm512_mul_ps(scale, high), offset));
}

/* Elements 16 g.. of a Q6_K block: in half h (128 elements), quarter j takes the low (j < 2) or high nibbles of
 * ql's bytes 32 (j % 2).., and bits 2 j, 2 j + 1 of qh's bytes as its fifth and sixth. code - 32 is made exact
 * without a conversion: the code's bits under the exponent of 2^23 are the float 2^23 + code, less 2^23 + 32. */
static inline AVX512_TARGET __m512 q6_k_16(const uint8_t *blk, const CpuKScales *s, int g) {
    int h = g / 8, j = g / 2 % 4, l = 16 * (g % 2);
    __m512i a = bytes16(blk + 64 * h + 32 * (j % 2) + l), hb = bytes16(blk + 128 + 32 * h + l);
    __m512i low = j < 2 ? _mm512_and_si512(a, _mm512_set1_epi32(15)) : _mm512_srli_epi32(a, 4);
    __m512i high = j < 3 ? _mm512_slli_epi32(hb, 4 - 2 * j) : _mm512_srli_epi32(hb, 2); /* bits 2j, 2j+1 at 4, 5 */
    /* low | (high & 0x30) | bits of 2^23, in one ternary-logic operation: select high where the mask is set */
    __m512i q = _mm512_ternarylogic_epi32(_mm512_or_si512(low, _mm512_set1_epi32(0x4B000000)), high,
                                          _mm512_set1_epi32(0x30), 0xD8);
    __m512 code = _mm512_sub_ps(_mm512_castsi512_ps(q), _mm512_set1_ps(8388640.0f));
    return _mm512_mul_ps(_mm512_set1_ps(s->scale[g]), code);
}

typedef __m512 KValuesFn(const uint8_t *blk, const CpuKScales *s, int g);

static inline AVX512_TARGET __attribute__((always_inline)) void rebuild_k(const uint8_t *src, float *dst,
                                                                           size_t n_blocks, size_t block_bytes,
                                                                           CpuKScalesFn *scales, KValuesFn *values) {
    for (size_t b = 0; b < n_blocks; b++, src += block_bytes, dst += 256) {
        CpuKScales s;
        scales(src, &s);
        for (int g = 0; g < 16; g++) _mm512_storeu_ps(dst + 16 * g, values(src, &s, g));
    }
}

AVX512_TARGET void cpu_rebuild_q4_k_avx512(const uint8_t *src, float *dst, size_t n_blocks) {
    rebuild_k(src, dst, n_blocks, 144, cpu_q4_k_scales, q4_k_16);
}

AVX512_TARGET void cpu_rebuild_q5_k_avx512(const uint8_t *src, float *dst, size_t n_blocks) {
    rebuild_k(src, dst, n_blocks, 176, cpu_q4_k_scales, q5_k_16);
}

AVX512_TARGET void cpu_rebuild_q6_k_avx512(const uint8_t *src, float *dst, size_t n_blocks) {
    rebuild_k(src, dst, n_blocks, 210, cpu_q6_k_scales, q6_k_16);
}

/* The gemv order on rows of K-quant blocks, two rows to a vector of chains: lanes 0-7 are the eight chains of
 * row 2p, lanes 8-15 those of row 2p + 1 (AVX-512F's 256-bit operations reach only 16 registers: too few for
 * eight rows' chains). Each row's 16 rebuilt elements feed its chains twice, elements 0-7 and then 8-15, so chain
 * j takes k mod 8 = j in order. PAIRS(X) names the pairs taken at a time; `stride` is row_bytes, or 0 for a
 * single row read as both rows of its pair (its second sum dropped). The same block of the next rows is
 * prefetched: that many short streams at once are more than the hardware prefetcher follows. */
#define GEMV_ZERO(p) __m512 chains_##p = _mm512_setzero_ps();
#define GEMV_SCALES(p)                                                                                             \
    for (int r_ = 2 * (p); r_ < 2 * (p) + 2; r_++) {                                                               \
        const uint8_t *blk_ = w + (size_t)r_ * stride + b * block_bytes;                                           \
        _Pragma("GCC unroll 4") for (size_t at = 0; at < block_bytes + 63; at += 64)                               \
            __builtin_prefetch(blk_ + (size_t)n_rows * row_bytes + at, 0, 3);                                      \
        scales(blk_, &s[r_]);                                                                                      \
    }
#define GEMV_STEP(p)                                                                                               \
    {                                                                                                              \
        __m512 a_ = values(w + (size_t)(2 * (p)) * stride + b * block_bytes, &s[2 * (p)], g);                      \
        __m512 b_ = values(w + (size_t)(2 * (p) + 1) * stride + b * block_bytes, &s[2 * (p) + 1], g);              \
        chains_##p = _mm512_fmadd_ps(_mm512_shuffle_f32x4(a_, b_, 0x44), x0, chains_##p);                          \
        chains_##p = _mm512_fmadd_ps(_mm512_shuffle_f32x4(a_, b_, 0xEE), x1, chains_##p);                          \
    }
#define GEMV_SUM(p)                                                                                                \
    y[2 * (p)] += cpu_gemv_chains_sum(_mm512_castps512_ps256(chains_##p));                                         \
    if (stride)                                                                                                    \
        y[2 * (p) + 1] +=                                                                                          \
            cpu_gemv_chains_sum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(chains_##p), 1)));
#define GEMV_ROWS(PAIRS, n)                                                                                        \
    for (int k0 = 0; k0 < K; k0 += CPU_GEMV_K_BLOCK) {                                                             \
        int k1 = K - k0 < CPU_GEMV_K_BLOCK ? K : k0 + CPU_GEMV_K_BLOCK, n_rows = stride ? n : 1;                   \
        PAIRS(GEMV_ZERO)                                                                                           \
        for (int b = k0 / 256; b < k1 / 256; b++) {                                                                \
            CpuKScales s[n];                                                                                       \
            PAIRS(GEMV_SCALES)                                                                                     \
            _Pragma("GCC unroll 16") for (int g = 0; g < 16; g++) {                                                \
                __m512 xg = _mm512_loadu_ps(x + 256 * b + 16 * g);                                                 \
                __m512 x0 = _mm512_shuffle_f32x4(xg, xg, 0x44), x1 = _mm512_shuffle_f32x4(xg, xg, 0xEE);           \
                PAIRS(GEMV_STEP)                                                                                   \
            }                                                                                                      \
        }                                                                                                          \
        PAIRS(GEMV_SUM)                                                                                            \
    }
#define PAIRS_4(X) X(0) X(1) X(2) X(3)
#define PAIRS_1(X) X(0)

static inline AVX512_TARGET __attribute__((always_inline)) void gemv_k(float *y_all, const float *x,
                                                                        const uint8_t *w_all, size_t row_bytes,
                                                                        int rows, int K, size_t block_bytes,
                                                                        CpuKScalesFn *scales, KValuesFn *values) {
    int r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        float *y = y_all + r0;
        const uint8_t *w = w_all + (size_t)r0 * row_bytes;
        const size_t stride = row_bytes;
        GEMV_ROWS(PAIRS_4, 8)
    }
    for (; r0 < rows; r0 += 2) {
        float *y = y_all + r0;
        const uint8_t *w = w_all + (size_t)r0 * row_bytes;
        const size_t stride = rows - r0 >= 2 ? row_bytes : 0;
        GEMV_ROWS(PAIRS_1, 2)
    }
}

AVX512_TARGET void cpu_gemv_order_q4_k_avx512(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows,
                                              int K) {
    gemv_k(y, x, w, row_bytes, rows, K, 144, cpu_q4_k_scales, q4_k_16);
}

AVX512_TARGET void cpu_gemv_order_q5_k_avx512(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows,
                                              int K) {
    gemv_k(y, x, w, row_bytes, rows, K, 176, cpu_q4_k_scales, q5_k_16);
}

AVX512_TARGET void cpu_gemv_order_q6_k_avx512(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows,
                                              int K) {
    gemv_k(y, x, w, row_bytes, rows, K, 210, cpu_q6_k_scales, q6_k_16);
}

/* Q5_0: (code - 16) * d, exact in f32; the fifth bit of element j from bit j of qh. */
AVX512_TARGET void cpu_rebuild_q5_0_avx512(const uint8_t *src, float *dst, size_t n_blocks) {
    const __m512i low = _mm512_set1_epi32(15), one = _mm512_set1_epi32(1), sixteen = _mm512_set1_epi32(16);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (size_t b = 0; b < n_blocks; b++, src += 22, dst += 32) {
        __m512 d = _mm512_set1_ps(kv_f16_field(src));
        uint32_t h;
        memcpy(&h, src + 2, 4);
        __m512i q = bytes16(src + 6);
        __m512i hl = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)(h & 0xFFFF)), lane), one);
        __m512i hh = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)(h >> 16)), lane), one);
        __m512i lo = _mm512_or_si512(_mm512_and_si512(q, low), _mm512_slli_epi32(hl, 4));
        __m512i hi = _mm512_or_si512(_mm512_srli_epi32(q, 4), _mm512_slli_epi32(hh, 4));
        _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, sixteen)), d));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, sixteen)), d));
    }
}

/* -------------------------------------------------------------------------------------------- binary16 */

__attribute__((target("avx512f"))) void cpu_to_f16_avx512(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

__attribute__((target("avx512f"))) void cpu_to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = kv_f16_to_f32(src[i]);
}
#endif
