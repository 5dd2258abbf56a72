/* cpu_q4.c — products with 4-bit packed weights (cpu_internal.h, CpuQ4Block): the decode steps of the CPU
 * backend, exact path.
 *
 * Decode is bound by the weight bytes it streams: a Q4_1 matrix kept as its 4-bit codes is 0.625 bytes per
 * weight (4 as f32, 1.25 as int8 codes). Each block is rebuilt to the loader's exact f32 weights
 * (code * scale + offset, the product exact in f32) and multiplied with f32 activations, so the arithmetic is
 * the f32 product of the dequantised model, as the reference pipeline computes it; only the summation order
 * differs (one accumulator of 16 lanes per output on AVX-512, 8 on AVX2, 16 on the portable path).
 *
 * Rows of x share the rebuilt weights: a call converts each block once, into a per-thread tile of 4 weight
 * rows that stays in L1, and multiplies it with all M rows in register tiles of 4 outputs x R rows. With
 * one row (single-sequence decode) the rebuilt block goes straight from registers into the products.
 * Every (output, row) pair is one accumulator chain over K in the same order whatever M and the tiling, so
 * a batched step equals B single steps bit for bit.
 *
 * SIMD levels are compiled with target attributes and chosen at run time (cpu_simd_choose); the portable
 * path is plain C. */
#include "cpu_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_Q4_X86 1
#else
#define CPU_Q4_X86 0
#endif

#define Q4_GROUP 4 /* output features per register tile (and per unit of work between threads) */

/* f16 bits of x when x is exactly an f16 value, else returns 0 and leaves *out alone. */
static int f32_to_f16_exact(float x, uint16_t *out) {
    if (!isfinite(x) || fabsf(x) > 65504.0f) return 0;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    float a = fabsf(x);
    uint16_t bits;
    if (a < ldexpf(1.0f, -14)) { /* subnormal: a multiple of 2^-24 */
        float m = ldexpf(a, 24);
        if (m != rintf(m)) return 0;
        bits = (uint16_t)m;
    } else {
        int e;
        float f = frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): 11 significant bits */
        float m = ldexpf(f, 11);
        if (m != rintf(m)) return 0;
        bits = (uint16_t)(((e + 14) << 10) | ((int)m - 1024));
    }
    *out = sign | bits;
    return cpu_f16_to_f32(*out | sign) == x;
}

/* ---------------------------------------------------------------------------------------------- packing */

/* Nearest f16 value of x > 0 (11 significant bits), kept in a float; 0 when x is out of f16's range. */
static float snap_f16(float x) {
    int e;
    frexpf(x, &e);
    float v = ldexpf(rintf(ldexpf(x, 11 - e)), e - 11);
    uint16_t bits;
    return f32_to_f16_exact(v, &bits) ? v : 0.0f;
}

/* Codes (w - offset) / s for the offsets lo - shift * s that are f16 values (the block minimum for Q4_1-style
 * blocks; for Q4_0-style ones, -8 * scale, the minimum less a whole number of scales). */
static int try_q4_scale(const float *w, float s, float lo, float hi, CpuQ4Block *blk) {
    uint16_t s_bits, o_bits;
    if (!(s > 0) || !f32_to_f16_exact(s, &s_bits)) return 0;
    float top = rintf((hi - lo) / s);
    for (int shift = 0; top <= 15 && shift <= 15 - (int)top; shift++) {
        float offset = lo - (float)shift * s;
        if (!f32_to_f16_exact(offset, &o_bits)) continue;
        int ok = 1;
        uint8_t codes[32];
        for (int i = 0; ok && i < 32; i++) {
            float c = rintf((w[i] - offset) / s);
            ok = c >= 0 && c <= 15 && c * s + offset == w[i];
            codes[i] = ok ? (uint8_t)c : 0;
        }
        if (!ok) continue;
        blk->scale = s_bits;
        blk->offset = o_bits;
        for (int i = 0; i < 16; i++) blk->codes[i] = (uint8_t)(codes[i] | codes[i + 16] << 4);
        return 1;
    }
    return 0;
}

/* Codes 0..15 of one block. GGUF's Q4_1 quantiser maps the block's range onto codes 0..15, so the scale is
 * first tried as (max - min) / 15 on the f16 grid; otherwise it is the smallest gap between distinct values
 * divided by k (the gap itself unless no two codes of the block are adjacent). */
static int pack_q4_block(const float *w, CpuQ4Block *blk) {
    float lo = w[0], hi = w[0];
    for (int i = 1; i < 32; i++) lo = w[i] < lo ? w[i] : lo, hi = w[i] > hi ? w[i] : hi;
    if (hi == lo) { /* a constant block: every code 0 */
        uint16_t o_bits;
        if (!f32_to_f16_exact(lo, &o_bits)) return 0;
        memset(blk, 0, sizeof *blk);
        blk->offset = o_bits;
        return 1;
    }
    if (try_q4_scale(w, snap_f16((hi - lo) / 15.0f), lo, hi, blk)) return 1;
    float sorted[32], step = INFINITY;
    for (int i = 0; i < 32; i++) {
        int j = i;
        for (; j > 0 && sorted[j - 1] > w[i]; j--) sorted[j] = sorted[j - 1];
        sorted[j] = w[i];
    }
    for (int i = 1; i < 32; i++) {
        float gap = sorted[i] - sorted[i - 1];
        if (gap > 0 && gap < step) step = gap;
    }
    for (int k = 1; k <= 15 && (hi - lo) / (step / (float)k) < 15.5f; k++)
        if (try_q4_scale(w, snap_f16(step / (float)k), lo, hi, blk)) return 1;
    return 0;
}

int cpu_pack_q4(CpuQ4Block *blocks, const float *w, int N, int K) {
    if (K % 32) return 0;
    int per_row = K / 32, ok = 1;
#pragma omp parallel for schedule(static) reduction(&& : ok)
    for (int n = 0; n < N; n++)
        for (int b = 0; ok && b < per_row; b++)
            ok = pack_q4_block(w + (size_t)n * K + (size_t)b * 32, &blocks[(size_t)n * per_row + b]);
    return ok;
}

void cpu_unpack_q4_row(float *w, const CpuQ4Block *blocks, int n, int K) {
    const CpuQ4Block *row = blocks + (size_t)n * (K / 32);
    for (int b = 0; b < K / 32; b++) {
        float s = cpu_f16_to_f32(row[b].scale), o = cpu_f16_to_f32(row[b].offset);
        for (int i = 0; i < 16; i++) {
            w[b * 32 + i] = (float)(row[b].codes[i] & 15) * s + o;
            w[b * 32 + i + 16] = (float)(row[b].codes[i] >> 4) * s + o;
        }
    }
}

/* ------------------------------------------------------------------------------------------ SIMD choice */

static const char *const simd_names[] = {"scalar", "avx2", "avx512"};

const char *cpu_simd_name(CpuSimd simd) { return simd_names[simd]; }

static int simd_supported(CpuSimd simd) {
#if CPU_Q4_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (simd == CPU_SIMD_AVX2) return avx2;
    if (simd == CPU_SIMD_AVX512) return avx2 && __builtin_cpu_supports("avx512f");
#endif
    return simd == CPU_SIMD_SCALAR;
}

int cpu_simd_choose(CpuSimd *out, const char *request, KvErr *err) {
    if (!request || !*request) {
        *out = simd_supported(CPU_SIMD_AVX512) ? CPU_SIMD_AVX512
               : simd_supported(CPU_SIMD_AVX2) ? CPU_SIMD_AVX2 : CPU_SIMD_SCALAR;
        return 0;
    }
    for (int i = 0; i < 3; i++)
        if (!strcmp(request, simd_names[i])) {
            if (!simd_supported((CpuSimd)i))
                return kv_fail(err, "KVBENCH_SIMD=%s: this CPU does not support %s (it supports: scalar%s%s)", request,
                               request, simd_supported(CPU_SIMD_AVX2) ? ", avx2" : "",
                               simd_supported(CPU_SIMD_AVX512) ? ", avx512" : "");
            *out = (CpuSimd)i;
            return 0;
        }
    return kv_fail(err, "KVBENCH_SIMD=%s: unknown instruction set (scalar, avx2 or avx512)", request);
}

/* ---------------------------------------------------------------------------------------------- kernels */

/* Every level computes outputs [n0, n1) of one matrix for all M rows: y[m*ldy + n]. */
typedef void RowsFn(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w, const float *bias, int n0,
                    int n1, int accumulate, float *tile);

static inline void store_out(float *y, float total, const float *bias, int n, int accumulate) {
    if (bias) total += bias[n];
    *y = accumulate ? *y + total : total;
}

/* Portable path: 16 lanes per accumulator like AVX-512 (not the same order within a lane's sum: AVX-512
 * adds its lanes as a tree). */
static void rows_scalar(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w, const float *bias,
                        int n0, int n1, int accumulate, float *tile) {
    for (int n = n0; n < n1; n++) {
        cpu_unpack_q4_row(tile, w, n, K);
        for (int m = 0; m < M; m++) {
            const float *xm = x + (size_t)m * K;
            float lanes[16] = {0};
            for (int k = 0; k < K; k += 16)
                for (int i = 0; i < 16; i++) lanes[i] += tile[k + i] * xm[k + i];
            float total = 0.0f;
            for (int i = 0; i < 16; i++) total += lanes[i];
            store_out(y + (size_t)m * ldy + n, total, bias, n, accumulate);
        }
    }
}

#if CPU_Q4_X86

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))

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
    store_out(y + n, hsum_avx2(a0), bias, n, accumulate);
    if (G == 4) {
        store_out(y + n + 1, hsum_avx2(a1), bias, n + 1, accumulate);
        store_out(y + n + 2, hsum_avx2(a2), bias, n + 2, accumulate);
        store_out(y + n + 3, hsum_avx2(a3), bias, n + 3, accumulate);
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
            store_out(y + (size_t)(m + r) * ldy + n + g, hsum_avx2(acc[g][r]), bias, n + g, accumulate);
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

static AVX2_TARGET void rows_avx2(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w,
                                  const float *bias, int n0, int n1, int accumulate, float *tile) {
    int n = n0;
    for (; n + Q4_GROUP <= n1; n += Q4_GROUP) group_avx2(y, ldy, x, M, K, w, bias, n, Q4_GROUP, accumulate, tile);
    for (; n < n1; n++) group_avx2(y, ldy, x, M, K, w, bias, n, 1, accumulate, tile);
}

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
    store_out(y + n, _mm512_reduce_add_ps(a0), bias, n, accumulate);
    if (G == 4) {
        store_out(y + n + 1, _mm512_reduce_add_ps(a1), bias, n + 1, accumulate);
        store_out(y + n + 2, _mm512_reduce_add_ps(a2), bias, n + 2, accumulate);
        store_out(y + n + 3, _mm512_reduce_add_ps(a3), bias, n + 3, accumulate);
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
            store_out(y + (size_t)(m + r) * ldy + n + g, _mm512_reduce_add_ps(acc[g][r]), bias, n + g, accumulate);
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

static AVX512_TARGET void rows_avx512(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w,
                                      const float *bias, int n0, int n1, int accumulate, float *tile) {
    int n = n0;
    for (; n + Q4_GROUP <= n1; n += Q4_GROUP) group_avx512(y, ldy, x, M, K, w, bias, n, Q4_GROUP, accumulate, tile);
    for (; n < n1; n++) group_avx512(y, ldy, x, M, K, w, bias, n, 1, accumulate, tile);
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

static inline AVX512_TARGET void block_q8_avx512(const CpuPacked *w, size_t bi, __m512 *w0, __m512 *w1) {
    __m512 s = _mm512_set1_ps(w->scale[bi]), o = _mm512_set1_ps(w->offset[bi]);
    const int8_t *q = w->q + bi * 32;
    *w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), s, o);
    *w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)))), s, o);
}

static AVX2_TARGET void rows_q8_avx2(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w,
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
            store_out(y + n, hsum_avx2(acc), bias, n, accumulate);
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

static AVX512_TARGET void rows_q8_avx512(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w,
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
            store_out(y + n, _mm512_reduce_add_ps(acc), bias, n, accumulate);
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

#endif

static void rows_q8_scalar(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w, const float *bias,
                           int n0, int n1, int accumulate, float *tile) {
    for (int n = n0; n < n1; n++) {
        for (int i = 0; i < K; i++) tile[i] = (float)w->q[(size_t)n * K + i] * w->scale[((size_t)n * K + i) / 32] +
                                              w->offset[((size_t)n * K + i) / 32];
        for (int m = 0; m < M; m++) {
            const float *xm = x + (size_t)m * K;
            float lanes[16] = {0};
            for (int k = 0; k < K; k += 16)
                for (int i = 0; i < 16; i++) lanes[i] += tile[k + i] * xm[k + i];
            float total = 0.0f;
            for (int i = 0; i < 16; i++) total += lanes[i];
            store_out(y + (size_t)m * ldy + n, total, bias, n, accumulate);
        }
    }
}

void cpu_matmul_q8_part(CpuSimd simd, float *y, const float *x, const CpuPacked *w, const float *bias, int M, int N,
                        int K, int accumulate, float *tile, int part, int parts) {
    long groups = (N + Q4_GROUP - 1) / Q4_GROUP;
    int n0 = (int)(groups * part / parts) * Q4_GROUP, n1 = (int)(groups * (part + 1) / parts) * Q4_GROUP;
    n1 = n1 < N ? n1 : N;
    if (n0 >= n1) return;
#if CPU_Q4_X86
    if (simd == CPU_SIMD_AVX512) rows_q8_avx512(y, N, x, M, K, w, bias, n0, n1, accumulate, tile);
    else if (simd == CPU_SIMD_AVX2) rows_q8_avx2(y, N, x, M, K, w, bias, n0, n1, accumulate, tile);
    else
#endif
        rows_q8_scalar(y, N, x, M, K, w, bias, n0, n1, accumulate, tile);
}

void cpu_matmul_q8(CpuSimd simd, float *y, const float *x, const CpuPacked *w, const float *bias, int M, int N, int K,
                   int accumulate, float *tiles) {
#pragma omp parallel
    cpu_matmul_q8_part(simd, y, x, w, bias, M, N, K, accumulate,
                       tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(), omp_get_thread_num(),
                       omp_get_num_threads());
}

static RowsFn *rows_fn(CpuSimd simd) {
#if CPU_Q4_X86
    if (simd == CPU_SIMD_AVX512) return rows_avx512;
    if (simd == CPU_SIMD_AVX2) return rows_avx2;
#endif
    (void)simd;
    return rows_scalar;
}

/* ---------------------------------------------------------------------------------------------- SwiGLU */

#if CPU_Q4_X86
/* cpu_kernels.c's exp_approx on 16 lanes: the same operations in the same order, each rounded (no fused
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

static AVX512_TARGET void swiglu_avx512(float *g, const float *u, size_t n) {
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
#endif

void cpu_swiglu_simd(CpuSimd simd, float *g, const float *u, size_t n) {
#if CPU_Q4_X86
    if (simd == CPU_SIMD_AVX512) {
        swiglu_avx512(g, u, n);
        return;
    }
#endif
    (void)simd;
    cpu_swiglu(g, u, n);
}

/* ------------------------------------------------------------------------------------- decode attention */

#if CPU_Q4_X86
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

static AVX512_TARGET void softmax_avx512(float *x, int n) { softmax_rows(x, n, 1); }

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
 * for bit cpu_attend_row's values for each head on the rows in order (cpu_kernels.c fixes its orders in the
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

static AVX512_TARGET void attend_heads_avx512(float *out, float *probs, const float *q, const CpuRows *k,
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
#endif

void cpu_softmax_simd(CpuSimd simd, float *x, int n) {
#if CPU_Q4_X86
    if (simd == CPU_SIMD_AVX512 && n > 0) {
        softmax_avx512(x, n);
        return;
    }
#endif
    (void)simd;
    cpu_softmax(x, n);
}

void cpu_attend_heads_simd(CpuSimd simd, float *out, float *probs, const float *q, const float *k, const float *v,
                           int n, int d, float scale, int G) {
    if (cpu_attend_direct(simd, d) && n > 0) {
        CpuRows keys = {NULL, NULL, 0, k, 0}, values = {NULL, NULL, 0, v, 0};
        cpu_attend_heads_rows(simd, out, probs, q, &keys, &values, n, d, scale, G);
        return;
    }
    for (int g = 0; g < G; g++)
        cpu_attend_row(out + (size_t)g * d, probs + (size_t)g * n, q + (size_t)g * d, k, v, n, d, scale);
}

int cpu_attend_direct(CpuSimd simd, int d) { return CPU_Q4_X86 && simd == CPU_SIMD_AVX512 && d % 16 == 0; }

void cpu_attend_heads_rows(CpuSimd simd, float *out, float *probs, const float *q, const CpuRows *k,
                           const CpuRows *v, int n, int d, float scale, int G) {
#if CPU_Q4_X86
    if (cpu_attend_direct(simd, d) && n > 0) attend_heads_avx512(out, probs, q, k, v, n, d, scale, G);
#else
    (void)simd, (void)out, (void)probs, (void)q, (void)k, (void)v, (void)n, (void)d, (void)scale, (void)G;
#endif
}

/* ---------------------------------------------------------------------------------------------- threads */

/* Part p of parts takes groups [G*p/parts, G*(p+1)/parts) of Q4_GROUP output features of the whole list of
 * jobs, so every weight is read by one thread once. */
void cpu_matmul_q4_part(CpuSimd simd, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K, int accumulate,
                        float *tile, int part, int parts) {
    RowsFn *rows = rows_fn(simd);
    long groups = 0;
    for (int j = 0; j < n_jobs; j++) groups += (jobs[j].N + Q4_GROUP - 1) / Q4_GROUP;
    long g0 = groups * part / parts, g1 = groups * (part + 1) / parts, base = 0;
    for (int j = 0; j < n_jobs; j++) {
        long gj = (jobs[j].N + Q4_GROUP - 1) / Q4_GROUP, lo = g0 > base ? g0 : base, hi = g1 < base + gj ? g1 : base + gj;
        if (lo < hi) {
            int n0 = (int)(lo - base) * Q4_GROUP, n1 = (int)(hi - base) * Q4_GROUP;
            rows(jobs[j].y, jobs[j].N, x, M, K, jobs[j].w, jobs[j].bias, n0, n1 < jobs[j].N ? n1 : jobs[j].N,
                 accumulate, tile);
        }
        base += gj;
    }
}

void cpu_matmul_q4(CpuSimd simd, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K, int accumulate,
                   float *tiles) {
#pragma omp parallel
    cpu_matmul_q4_part(simd, jobs, n_jobs, x, M, K, accumulate,
                       tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(), omp_get_thread_num(),
                       omp_get_num_threads());
}

void cpu_ffn_q4_part(CpuSimd simd, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu, const float *x,
                     int M, int K, int F, float *tile, int part, int parts) {
    RowsFn *rows = rows_fn(simd);
    long groups = (F + Q4_GROUP - 1) / Q4_GROUP;
    int f0 = (int)(groups * part / parts) * Q4_GROUP, f1 = (int)(groups * (part + 1) / parts) * Q4_GROUP;
    f1 = f1 < F ? f1 : F;
    if (f0 >= f1) return;
    rows(gate, F, x, M, K, wg, NULL, f0, f1, 0, tile);
    rows(up, F, x, M, K, wu, NULL, f0, f1, 0, tile);
    for (int m = 0; m < M; m++) cpu_swiglu_simd(simd, gate + (size_t)m * F + f0, up + (size_t)m * F + f0, (size_t)(f1 - f0));
}

void cpu_ffn_q4(CpuSimd simd, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu, const float *x,
                int M, int K, int F, float *tiles) {
#pragma omp parallel
    cpu_ffn_q4_part(simd, gate, up, wg, wu, x, M, K, F, tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(),
                    omp_get_thread_num(), omp_get_num_threads());
}

/* ---------------------------------------------------------------------------------------- rebuilt rows */

/* Rows of a packed matrix back to the loader's f32 weights, for the prefill's GEMM tiles, the embedding
 * lookup and the observation's W_O. Rows are contiguous runs of blocks, so a range of rows is one run. */

#if CPU_Q4_X86
static AVX512_TARGET void unpack_q4_avx512(float *w, const CpuQ4Block *blocks, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m512 w0, w1;
        block_avx512(blocks + b, &w0, &w1);
        _mm512_storeu_ps(w + b * 32, w0);
        _mm512_storeu_ps(w + b * 32 + 16, w1);
    }
}

static AVX2_TARGET void unpack_q4_avx2(float *w, const CpuQ4Block *blocks, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m256 wv[4];
        block_avx2(blocks + b, wv);
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(w + b * 32 + i * 8, wv[i]);
    }
}

static AVX512_TARGET void unpack_q8_avx512(float *w, const CpuPacked *p, size_t b0, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m512 w0, w1;
        block_q8_avx512(p, b0 + b, &w0, &w1);
        _mm512_storeu_ps(w + b * 32, w0);
        _mm512_storeu_ps(w + b * 32 + 16, w1);
    }
}

static AVX2_TARGET void unpack_q8_avx2(float *w, const CpuPacked *p, size_t b0, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        __m256 wv[4];
        block_q8_avx2(p, b0 + b, wv);
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(w + b * 32 + i * 8, wv[i]);
    }
}
#endif

void cpu_unpack_q4_rows(CpuSimd simd, float *w, const CpuQ4Block *blocks, int n0, int n1, int K) {
    size_t per_row = (size_t)K / 32;
    (void)simd; /* one level only without x86 */
#if CPU_Q4_X86
    if (simd == CPU_SIMD_AVX512) unpack_q4_avx512(w, blocks + n0 * per_row, (n1 - n0) * per_row);
    else if (simd == CPU_SIMD_AVX2) unpack_q4_avx2(w, blocks + n0 * per_row, (n1 - n0) * per_row);
    else
#endif
        for (int n = n0; n < n1; n++) cpu_unpack_q4_row(w + (size_t)(n - n0) * K, blocks, n, K);
}

void cpu_unpack_q8_rows(CpuSimd simd, float *w, const CpuPacked *p, int n0, int n1, int K) {
    size_t per_row = (size_t)K / 32, b0 = n0 * per_row, n_blocks = (n1 - n0) * per_row;
    (void)simd;
#if CPU_Q4_X86
    if (simd == CPU_SIMD_AVX512) unpack_q8_avx512(w, p, b0, n_blocks);
    else if (simd == CPU_SIMD_AVX2) unpack_q8_avx2(w, p, b0, n_blocks);
    else
#endif
        for (size_t b = 0; b < n_blocks; b++)
            for (int i = 0; i < 32; i++)
                w[b * 32 + i] = (float)p->q[(b0 + b) * 32 + i] * p->scale[b0 + b] + p->offset[b0 + b];
}
