/* avx2.c — the kernel table's AVX2 entries (AVX2 + FMA + F16C, 8 lanes; kernels.h, isa.h).
 *
 * Exact products from the codes (q4_rows, q8_rows): each block rebuilt to the loader's exact f32 weights
 * (code * scale + offset, the product exact in f32) and multiplied with f32 activations, one accumulator of
 * 8 lanes per output, reduced as hsum_avx2 does. Rows of x share the rebuilt weights: a call converts each
 * block once, into a per-thread tile of 4 weight rows that stays in L1, and multiplies it with all M rows in
 * register tiles of 4 outputs x 2 rows; with one row the rebuilt block goes from registers into the
 * products. Every (output, row) pair is one chain over K in the same order whatever M.
 * Rebuilt rows (the 4-bit and int8 codes, GGUF Q4_K, Q5_K, Q6_K, Q5_0 and Q8_0 blocks) and binary16 conversions: the
 * portable bits. gemv_order (Q4_K, Q5_K, Q6_K): blocks rebuilt in registers straight into sgemv's eight chains, one
 * weight row per vector. The fast kernel: portable.c's arithmetic, 8 outputs in the lanes of a vector. */
#include "isa.h"

#if CPU_X86
#include <immintrin.h>
#include <string.h>

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define Q4_GROUP CPU_Q4_GROUP

/* ------------------------------------------------------------------ AVX2: 8 lanes, tiles of 4 x up to 2 */

/* The 32 weights of a block as four vectors of 8. */
static inline AVX2_TARGET void block_avx2(const CpuQ4Block *b, __m256 out[4]) {
    __m256 s = _mm256_set1_ps(_cvtsh_ss(b->scale)), o = _mm256_set1_ps(_cvtsh_ss(b->offset));
    __m128i c = _mm_loadu_si128((const __m128i *)b->codes), mask = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(c, mask), hi = _mm_and_si128(_mm_srli_epi16(c, 4), mask);
    out[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), s, o);
    out[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), s, o);
    out[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), s, o);
    out[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), s, o);
}

static inline AVX2_TARGET float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* G (1 or 4) consecutive outputs from n for one row x, the blocks converted in registers (as on AVX-512). */
#define ROW_STEP_AVX2(acc, row)                                                                                    \
    do {                                                                                                           \
        const CpuQ4Block *blk_ = (row) + b;                                                                        \
        _mm_prefetch((const char *)(blk_ + 48), _MM_HINT_T0);                                                      \
        __m256 wv_[4];                                                                                             \
        block_avx2(blk_, wv_);                                                                                     \
        acc = _mm256_fmadd_ps(wv_[0], x0, acc);                                                                    \
        acc = _mm256_fmadd_ps(wv_[1], x1, acc);                                                                    \
        acc = _mm256_fmadd_ps(wv_[2], x2, acc);                                                                    \
        acc = _mm256_fmadd_ps(wv_[3], x3, acc);                                                                    \
    } while (0)

static inline __attribute__((always_inline)) AVX2_TARGET void one_row_avx2(float *y, const float *x, int K,
                                                                           const CpuQ4Block *w, const float *bias,
                                                                           int n, int G, int accumulate) {
    int per_row = K / 32;
    const CpuQ4Block *r0 = w + (size_t)n * per_row, *r1 = r0 + per_row, *r2 = r1 + per_row, *r3 = r2 + per_row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int b = 0; b < per_row; b++) {
        const float *xb = x + b * 32;
        __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8), x2 = _mm256_loadu_ps(xb + 16),
               x3 = _mm256_loadu_ps(xb + 24);
        ROW_STEP_AVX2(a0, r0);
        if (G == 4) {
            ROW_STEP_AVX2(a1, r1);
            ROW_STEP_AVX2(a2, r2);
            ROW_STEP_AVX2(a3, r3);
        }
    }
    cpu_store_out(y + n, hsum_avx2(a0), bias, n, accumulate);
    if (G == 4) {
        cpu_store_out(y + n + 1, hsum_avx2(a1), bias, n + 1, accumulate);
        cpu_store_out(y + n + 2, hsum_avx2(a2), bias, n + 2, accumulate);
        cpu_store_out(y + n + 3, hsum_avx2(a3), bias, n + 3, accumulate);
    }
}

/* G rebuilt weight rows (tile[g*K]) times R rows of x from m. */
static inline __attribute__((always_inline)) AVX2_TARGET void tile_avx2(float *y, int ldy, const float *x, int m,
                                                                        int R, int K, const float *tile,
                                                                        const float *bias, int n, int G,
                                                                        int accumulate) {
    __m256 acc[Q4_GROUP][2];
    for (int g = 0; g < G; g++)
        for (int r = 0; r < R; r++) acc[g][r] = _mm256_setzero_ps();
    for (int k = 0; k < K; k += 8) {
        __m256 xv[2];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) xv[r] = _mm256_loadu_ps(x + (size_t)(m + r) * K + k);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m256 wv = _mm256_load_ps(tile + (size_t)g * K + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[g][r] = _mm256_fmadd_ps(wv, xv[r], acc[g][r]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int r = 0; r < R; r++)
            cpu_store_out(y + (size_t)(m + r) * ldy + n + g, hsum_avx2(acc[g][r]), bias, n + g, accumulate);
}

/* All M rows of x against the G weight rows of a filled tile. */
static inline __attribute__((always_inline)) AVX2_TARGET void tiles_avx2(float *y, int ldy, const float *x, int M,
                                                                         int K, const float *tile, const float *bias,
                                                                         int n, int G, int accumulate) {
    int m = 0;
    for (; m + 2 <= M; m += 2) tile_avx2(y, ldy, x, m, 2, K, tile, bias, n, G, accumulate);
    if (m < M) tile_avx2(y, ldy, x, m, 1, K, tile, bias, n, G, accumulate);
}

static inline __attribute__((always_inline)) AVX2_TARGET void group_avx2(float *y, int ldy, const float *x, int M,
                                                                         int K, const CpuQ4Block *w,
                                                                         const float *bias, int n, int G,
                                                                         int accumulate, float *tile) {
    if (M == 1) {
        one_row_avx2(y, x, K, w, bias, n, G, accumulate);
        return;
    }
    int per_row = K / 32;
    for (int g = 0; g < G; g++)
        for (int b = 0; b < per_row; b++) {
            __m256 wv[4];
            block_avx2(w + (size_t)(n + g) * per_row + b, wv);
            for (int i = 0; i < 4; i++) _mm256_store_ps(tile + (size_t)g * K + b * 32 + i * 8, wv[i]);
        }
    tiles_avx2(y, ldy, x, M, K, tile, bias, n, G, accumulate);
}

AVX2_TARGET void cpu_q4_rows_avx2(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w,
                                  const float *bias, int n0, int n1, int accumulate, float *tile) {
    int n = n0;
    for (; n + Q4_GROUP <= n1; n += Q4_GROUP) group_avx2(y, ldy, x, M, K, w, bias, n, Q4_GROUP, accumulate, tile);
    for (; n < n1; n++) group_avx2(y, ldy, x, M, K, w, bias, n, 1, accumulate, tile);
}

/* int8 codes (CpuPacked): rebuilt exactly as the 4-bit ones (an 8-bit code times an f16 scale fits f32's 24
 * bits), one row in registers, several through the tile. */
static inline AVX2_TARGET void block_q8_avx2(const CpuPacked *w, size_t bi, __m256 out[4]) {
    __m256 s = _mm256_set1_ps(w->scale[bi]), o = _mm256_set1_ps(w->offset[bi]);
    const int8_t *q = w->q + bi * 32;
    for (int i = 0; i < 4; i++)
        out[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * i)))),
                                 s, o);
}

AVX2_TARGET void cpu_q8_rows_avx2(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w,
                                     const float *bias, int n0, int n1, int accumulate, float *tile) {
    int per_row = K / 32;
    for (int n = n0; n < n1;) {
        if (M == 1) {
            __m256 acc = _mm256_setzero_ps();
            for (int b = 0; b < per_row; b++) {
                const float *xb = x + b * 32;
                _mm_prefetch((const char *)(w->q + ((size_t)n * per_row + b) * 32 + 1024), _MM_HINT_T0);
                __m256 wv[4];
                block_q8_avx2(w, (size_t)n * per_row + b, wv);
                for (int i = 0; i < 4; i++) acc = _mm256_fmadd_ps(wv[i], _mm256_loadu_ps(xb + 8 * i), acc);
            }
            cpu_store_out(y + n, hsum_avx2(acc), bias, n, accumulate);
            n++;
            continue;
        }
        /* several rows: Q4_GROUP weight rows rebuilt into the tile at a time, as for the 4-bit codes */
        int G = n1 - n >= Q4_GROUP ? Q4_GROUP : 1;
        for (int g = 0; g < G; g++)
            for (int b = 0; b < per_row; b++) {
                __m256 wv[4];
                block_q8_avx2(w, (size_t)(n + g) * per_row + b, wv);
                for (int i = 0; i < 4; i++) _mm256_store_ps(tile + (size_t)g * K + b * 32 + i * 8, wv[i]);
            }
        if (G == Q4_GROUP) tiles_avx2(y, ldy, x, M, K, tile, bias, n, Q4_GROUP, accumulate);
        else tiles_avx2(y, ldy, x, M, K, tile, bias, n, 1, accumulate);
        n += G;
    }
}

/* ------------------------------------------------------------------------------------------ rebuilt rows */

AVX2_TARGET void cpu_q4_rebuild_avx2(float *w, const CpuQ4Block *blocks, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m256 wv[4];
        block_avx2(blocks + b, wv);
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(w + b * 32 + i * 8, wv[i]);
    }
}

AVX2_TARGET void cpu_q8_rebuild_avx2(float *w, const CpuPacked *p, size_t b0, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m256 wv[4];
        block_q8_avx2(p, b0 + b, wv);
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(w + b * 32 + i * 8, wv[i]);
    }
}

/* ------------------------------------------------------------------------------------ GGUF block rebuilders */

/* Bytes p[0..8) widened to 8 int32 lanes. */
static inline AVX2_TARGET __m256i bytes8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

/* K-quant super-blocks rebuilt 8 elements at a time from their scales (isa.h's CpuKScales) with the
 * dequantiser's operations per element, Q4_K and Q5_K (d * scale) * code - dmin * min and Q6_K
 * (d * scale) * (code - 32), a multiply and then a subtraction, no fused multiply-add: gguf.c's bits. */

/* Elements 8 t.. of a Q4_K block: chunk t / 8 of 64 holds its low 32 in the low nibbles of 32 bytes, its high 32
 * in their high nibbles. */
static inline AVX2_TARGET __m256 q4_k_8(const uint8_t *blk, const CpuKScales *s, int t) {
    __m256i q = bytes8(blk + 16 + 32 * (t / 8) + 8 * (t % 4));
    q = t & 4 ? _mm256_srli_epi32(q, 4) : _mm256_and_si256(q, _mm256_set1_epi32(15));
    return _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(s->scale[t / 4]), _mm256_cvtepi32_ps(q)),
                         _mm256_set1_ps(s->offset[t / 4]));
}

/* Elements 8 t.. of a Q5_K block: as Q4_K's (its codes 32 bytes further on), the fifth bit of element l of
 * sub-block s (= t / 4) from bit s of qh[l]. */
static inline AVX2_TARGET __m256 q5_k_8(const uint8_t *blk, const CpuKScales *s, int t) {
    int sub = t / 4;
    __m256i q = bytes8(blk + 48 + 32 * (t / 8) + 8 * (t % 4)), h = bytes8(blk + 16 + 8 * (t % 4));
    q = t & 4 ? _mm256_srli_epi32(q, 4) : _mm256_and_si256(q, _mm256_set1_epi32(15));
    h = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, sub), _mm256_set1_epi32(1)), 4);
    return _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(s->scale[sub]), _mm256_cvtepi32_ps(_mm256_or_si256(q, h))),
                         _mm256_set1_ps(s->offset[sub]));
}

/* Elements 8 t.. of a Q6_K block: in half h (128 elements), quarter j takes the low (j < 2) or high nibbles of
 * ql's bytes 32 (j % 2).., and bits 2 j, 2 j + 1 of qh's bytes as its fifth and sixth. code - 32 is made exact
 * without a conversion: the code's bits under the exponent of 2^23 are the float 2^23 + code, less 2^23 + 32. */
static inline AVX2_TARGET __m256 q6_k_8(const uint8_t *blk, const CpuKScales *s, int t) {
    int h = t / 16, j = t / 4 % 4, l = 8 * (t % 4);
    __m256i a = bytes8(blk + 64 * h + 32 * (j % 2) + l), hb = bytes8(blk + 128 + 32 * h + l);
    __m256i low = j < 2 ? _mm256_and_si256(a, _mm256_set1_epi32(15)) : _mm256_srli_epi32(a, 4);
    __m256i high = j < 3 ? _mm256_slli_epi32(hb, 4 - 2 * j) : _mm256_srli_epi32(hb, 2); /* bits 2j, 2j+1 at 4, 5 */
    __m256i q = _mm256_or_si256(_mm256_or_si256(low, _mm256_set1_epi32(0x4B000000)),
                                _mm256_and_si256(high, _mm256_set1_epi32(0x30)));
    __m256 code = _mm256_sub_ps(_mm256_castsi256_ps(q), _mm256_set1_ps(8388640.0f));
    return _mm256_mul_ps(_mm256_set1_ps(s->scale[t / 2]), code);
}

typedef __m256 KValuesFn(const uint8_t *blk, const CpuKScales *s, int t);

static inline AVX2_TARGET __attribute__((always_inline)) void rebuild_k(const uint8_t *src, float *dst, size_t n_blocks,
                                                                         size_t block_bytes, CpuKScalesFn *scales,
                                                                         KValuesFn *values) {
    for (size_t b = 0; b < n_blocks; b++, src += block_bytes, dst += 256) {
        CpuKScales s;
        scales(src, &s);
        for (int t = 0; t < 32; t++) _mm256_storeu_ps(dst + 8 * t, values(src, &s, t));
    }
}

AVX2_TARGET void cpu_rebuild_q4_k_avx2(const uint8_t *src, float *dst, size_t n_blocks) {
    rebuild_k(src, dst, n_blocks, 144, cpu_q4_k_scales, q4_k_8);
}

AVX2_TARGET void cpu_rebuild_q5_k_avx2(const uint8_t *src, float *dst, size_t n_blocks) {
    rebuild_k(src, dst, n_blocks, 176, cpu_q4_k_scales, q5_k_8);
}

AVX2_TARGET void cpu_rebuild_q6_k_avx2(const uint8_t *src, float *dst, size_t n_blocks) {
    rebuild_k(src, dst, n_blocks, 210, cpu_q6_k_scales, q6_k_8);
}

/* The gemv order on rows of K-quant blocks, one vector of eight chains a row: each row's 8 rebuilt elements go
 * into its chains, so chain j takes k mod 8 = j in order. ROWS(X) names the rows taken at a time (each row's
 * chains a variable, so that they stay in registers). The same block of the next rows is prefetched: that many
 * short streams at once are more than the hardware prefetcher follows. */
#define GEMV_ZERO(r) __m256 chains_##r = _mm256_setzero_ps();
#define GEMV_SCALES(r)                                                                                             \
    {                                                                                                              \
        const uint8_t *blk_ = w + (size_t)(r) * row_bytes + b * block_bytes;                                       \
        _Pragma("GCC unroll 4") for (size_t at = 0; at < block_bytes + 63; at += 64)                               \
            __builtin_prefetch(blk_ + (size_t)n_rows * row_bytes + at, 0, 3);                                      \
        scales(blk_, &s[r]);                                                                                       \
    }
#define GEMV_STEP(r)                                                                                               \
    chains_##r = _mm256_fmadd_ps(values(w + (size_t)(r) * row_bytes + b * block_bytes, &s[r], t), xt, chains_##r);
#define GEMV_SUM(r) y[r] += cpu_gemv_chains_sum(chains_##r);
#define GEMV_ROWS(ROWS, n)                                                                                         \
    for (int k0 = 0; k0 < K; k0 += CPU_GEMV_K_BLOCK) {                                                             \
        int k1 = K - k0 < CPU_GEMV_K_BLOCK ? K : k0 + CPU_GEMV_K_BLOCK, n_rows = n;                                \
        ROWS(GEMV_ZERO)                                                                                            \
        for (int b = k0 / 256; b < k1 / 256; b++) {                                                                \
            CpuKScales s[n];                                                                                       \
            ROWS(GEMV_SCALES)                                                                                      \
            _Pragma("GCC unroll 32") for (int t = 0; t < 32; t++) {                                                \
                __m256 xt = _mm256_loadu_ps(x + 256 * b + 8 * t);                                                  \
                ROWS(GEMV_STEP)                                                                                    \
            }                                                                                                      \
        }                                                                                                          \
        ROWS(GEMV_SUM)                                                                                             \
    }
#define ROWS_4(X) X(0) X(1) X(2) X(3)
#define ROWS_1(X) X(0)

static inline AVX2_TARGET __attribute__((always_inline)) void gemv_k(float *y_all, const float *x, const uint8_t *w_all,
                                                                      size_t row_bytes, int rows, int K,
                                                                      size_t block_bytes, CpuKScalesFn *scales,
                                                                      KValuesFn *values) {
    int r0 = 0;
    for (; r0 + 4 <= rows; r0 += 4) {
        float *y = y_all + r0;
        const uint8_t *w = w_all + (size_t)r0 * row_bytes;
        GEMV_ROWS(ROWS_4, 4)
    }
    for (; r0 < rows; r0++) {
        float *y = y_all + r0;
        const uint8_t *w = w_all + (size_t)r0 * row_bytes;
        GEMV_ROWS(ROWS_1, 1)
    }
}

AVX2_TARGET void cpu_gemv_order_q4_k_avx2(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows,
                                          int K) {
    gemv_k(y, x, w, row_bytes, rows, K, 144, cpu_q4_k_scales, q4_k_8);
}

AVX2_TARGET void cpu_gemv_order_q5_k_avx2(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows,
                                          int K) {
    gemv_k(y, x, w, row_bytes, rows, K, 176, cpu_q4_k_scales, q5_k_8);
}

AVX2_TARGET void cpu_gemv_order_q6_k_avx2(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows,
                                          int K) {
    gemv_k(y, x, w, row_bytes, rows, K, 210, cpu_q6_k_scales, q6_k_8);
}

/* Q5_0: (code - 16) * d, a small integer times an f16 value, exact in f32 whatever computes it; 8 lanes, the
 * fifth bit of element j from bit j of qh. The same bits as the portable dequantiser. */
AVX2_TARGET void cpu_rebuild_q5_0_avx2(const uint8_t *src, float *dst, size_t n_blocks) {
    const __m256i low = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1), sixteen = _mm256_set1_epi32(16);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (size_t b = 0; b < n_blocks; b++, src += 22, dst += 32) {
        __m256 d = _mm256_set1_ps(kv_f16_field(src));
        uint32_t h;
        memcpy(&h, src + 2, 4);
        const uint8_t *qs = src + 6;
        for (int l = 0; l < 16; l += 8) {
            __m256i q = bytes8(qs + l);
            __m256i hl = _mm256_srlv_epi32(_mm256_set1_epi32((int)(h >> l)), lane);
            __m256i hh = _mm256_srlv_epi32(_mm256_set1_epi32((int)(h >> (l + 16))), lane);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low), _mm256_slli_epi32(_mm256_and_si256(hl, one), 4));
            __m256i hi = _mm256_or_si256(_mm256_srli_epi32(q, 4), _mm256_slli_epi32(_mm256_and_si256(hh, one), 4));
            _mm256_storeu_ps(dst + l, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(lo, sixteen)), d));
            _mm256_storeu_ps(dst + 16 + l, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(hi, sixteen)), d));
        }
    }
}

/* Q8_0: code * d (exact in f32), 8 lanes: the same bits as the portable dequantiser. */
AVX2_TARGET void cpu_rebuild_q8_0_avx2(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 34, dst += 32) {
        __m256 d = _mm256_set1_ps(kv_f16_field(src));
        for (int l = 0; l < 32; l += 8) {
            __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(src + 2 + l)));
            _mm256_storeu_ps(dst + l, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

/* -------------------------------------------------------------------------------------------- binary16 */

__attribute__((target("avx,f16c"))) void cpu_to_f16_f16c(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) void cpu_to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = kv_f16_to_f32(src[i]);
}

/* ---------------------------------------------------------------------------------------- fast products */

/* The AVX2 kernel: 8 outputs per vector, as the VNNI one with 16 (transpose_lanes on 128-bit lanes). */
static AVX2_TARGET inline void weights_8(const CpuFastJob *job, int K, int n0, int b, __m256i w[8], __m256 *scale,
                                       __m256 *offset) {
    int per_row = K / 32;
    __m256i z[4], r[4];
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (job->q4) {
        const CpuQ4Block *blk = job->q4 + (size_t)n0 * per_row + b;
        size_t stride = sizeof(CpuQ4Block) * (size_t)per_row;
        const char *p = (const char *)blk->codes;
        for (int g = 0; g < 4; g++)
            z[g] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + g * stride))),
                                           _mm_loadu_si128((const __m128i *)(p + (4 + g) * stride)), 1);
        __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
        __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
        r[0] = _mm256_unpacklo_epi64(t0, t2), r[1] = _mm256_unpackhi_epi64(t0, t2);
        r[2] = _mm256_unpacklo_epi64(t1, t3), r[3] = _mm256_unpackhi_epi64(t1, t3);
        const __m256i low = _mm256_set1_epi8(15);
        for (int j = 0; j < 4; j++) {
            w[j] = _mm256_and_si256(r[j], low);
            w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(r[j], 4), low);
        }
        /* the 8 (scale, offset) f16 pairs: 16-bit halves packed to 8 values, then converted */
        __m256i so = _mm256_i32gather_epi32((const int *)blk, _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)stride)), 1);
        const __m256i mask = _mm256_set1_epi32(0xffff);
        __m256i sp = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_and_si256(so, mask), _mm256_setzero_si256()), 0xD8);
        __m256i op = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(so, 16), _mm256_setzero_si256()), 0xD8);
        *scale = _mm256_cvtph_ps(_mm256_castsi256_si128(sp));
        *offset = _mm256_cvtph_ps(_mm256_castsi256_si128(op));
    } else {
        const int8_t *q = job->q8->q + (size_t)n0 * K + b * 32;
        for (int h = 0; h < 2; h++) {
            const char *p = (const char *)q + 16 * h;
            for (int g = 0; g < 4; g++)
                z[g] = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + (size_t)g * K))),
                    _mm_loadu_si128((const __m128i *)(p + (size_t)(4 + g) * K)), 1);
            __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
            __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
            w[4 * h] = _mm256_unpacklo_epi64(t0, t2), w[4 * h + 1] = _mm256_unpackhi_epi64(t0, t2);
            w[4 * h + 2] = _mm256_unpacklo_epi64(t1, t3), w[4 * h + 3] = _mm256_unpackhi_epi64(t1, t3);
        }
        __m256i idx = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(per_row));
        *scale = _mm256_i32gather_ps(job->q8->scale + (size_t)n0 * per_row + b, idx, 4);
        *offset = _mm256_i32gather_ps(job->q8->offset + (size_t)n0 * per_row + b, idx, 4);
    }
}

/* Outputs n0..n0+7, all rows of x. maddubs multiplies unsigned by signed bytes into saturating 16-bit pairs:
 * 4-bit codes (pairs at most 2 * 15 * 127) sum 8 products per 16-bit lane exactly before widening; int8 codes
 * go in as |code| times x with the code's sign (pairs at most 2 * 128 * 127) and widen at once. */
static AVX2_TARGET void fast_group8_avx2(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int accumulate) {
    int K = x->K, per_row = K / 32, rows = x->rows;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[CPU_FAST_ROWS];
    for (int m = 0; m < rows; m++) acc[m] = _mm256_setzero_ps();
    for (int b = 0; b < per_row; b++) {
        __m256i w[8];
        __m256 scale, offset;
        if (n0 % CPU_FAST_GROUP == 0) prefetch_next(job, K, n0, b); /* the first half asks for the next 16 */
        weights_8(job, K, n0, b, w, &scale, &offset);
        for (int m = 0; m < rows; m++) {
            const int8_t *xq = x->xq + (size_t)m * K + b * 32;
            __m256i dot;
            if (job->q4) {
                __m256i pairs = _mm256_setzero_si256();
                for (int r = 0; r < 8; r++) {
                    int32_t v;
                    memcpy(&v, xq + 4 * r, 4);
                    pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[r], _mm256_set1_epi32(v)));
                }
                dot = _mm256_madd_epi16(pairs, ones);
            } else {
                dot = _mm256_setzero_si256();
                for (int r = 0; r < 8; r++) {
                    int32_t v;
                    memcpy(&v, xq + 4 * r, 4);
                    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w[r]), _mm256_sign_epi8(_mm256_set1_epi32(v), w[r]));
                    dot = _mm256_add_epi32(dot, _mm256_madd_epi16(p, ones));
                }
            }
            acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale),
                                     _mm256_set1_ps(x->d[b * CPU_FAST_ROWS + m]), acc[m]);
            acc[m] = _mm256_fmadd_ps(offset, _mm256_set1_ps(x->xo[b * CPU_FAST_ROWS + m]), acc[m]);
        }
    }
    for (int m = 0; m < rows; m++) {
        __m256 t = acc[m];
        float *y = job->y + (size_t)(y_row0 + m) * job->N + n0;
        if (job->bias) t = _mm256_add_ps(t, _mm256_loadu_ps(job->bias + n0));
        if (accumulate) t = _mm256_add_ps(_mm256_loadu_ps(y), t);
        _mm256_storeu_ps(y, t);
    }
}

/* Outputs [n0, n1) in vectors of 8, the tail by the portable kernel (the same bits). */
void cpu_fast_group_avx2(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate) {
    int n = n0;
    for (; n + 8 <= n1; n += 8) fast_group8_avx2(job, x, y_row0, n, accumulate);
    if (n < n1) cpu_fast_group_scalar(job, x, y_row0, n, n1, accumulate);
}
#endif
