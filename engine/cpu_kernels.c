/* cpu_kernels.c — the CPU backend's numeric kernels (see cpu_internal.h).
 *
 * exp is a Cody–Waite range reduction plus a degree-6 polynomial (relative error ~2e-7) instead of libm's
 * expf, because a call stops the compiler from vectorising the softmax and SwiGLU loops, and an 8k-token
 * prefill of SmolLM2 takes ~9e9 exponentials in its softmaxes alone. */
#include "cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#pragma omp declare simd
static inline float exp_approx(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* n = round(x / ln2) by the 1.5 * 2^23 trick (no libm call, so the loop stays vectorisable) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Part p of parts of cpu_matmul's output features: a contiguous slice, cut at multiples of 16 rows to keep
 * BLAS's tiles whole; the last part ends at N. */
static void matmul_slice(int N, int p, int parts, int *n0, int *n1) {
    *n0 = (int)((long)N * p / parts) & ~15;
    *n1 = p == parts - 1 ? N : (int)((long)N * (p + 1) / parts) & ~15;
}

/* Outputs [n0, n1) of y = x w^T (+ bias) (+ y), w pointing at weight row n0: one single-threaded BLAS call. */
static void gemm_slice(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int n0,
                       int n1, int accumulate) {
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        for (int m = 0; m < M; m++) {
            float *row = y + (size_t)m * N;
            if (accumulate) {
#pragma omp simd
                for (int i = n0; i < n1; i++) row[i] += bias[i];
            } else {
                memcpy(row + n0, bias + n0, (size_t)(n1 - n0) * sizeof(float));
            }
        }
        beta = 1.0f;
    }
    if (M == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n1 - n0, K, 1.0f, w, K, x, 1, beta, y + n0, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, x, K, w, K, beta, y + n0, N);
}

void cpu_matmul(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int accumulate) {
    /* Each thread takes a contiguous slice of the output features (weight rows) for all M rows, so every
     * weight is read by one thread only, once. */
    int parts = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int p = 0; p < parts; p++) {
        int n0, n1;
        matmul_slice(N, p, parts, &n0, &n1);
        if (n1 > n0) gemm_slice(y, x, w + (size_t)n0 * K, bias, M, N, K, n0, n1, accumulate);
    }
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
    size_t most = 0;
    for (int p = 0; p < parts; p++) {
        int n0, n1;
        matmul_slice(N, p, parts, &n0, &n1);
        size_t floats = n1 > n0 ? (size_t)tile_rows(n1 - n0, K) * K : 0;
        most = floats > most ? floats : most;
    }
    return most;
}

void cpu_matmul_codes(CpuSimd simd, float *y, const float *x, const CpuQ4Block *q4, const CpuPacked *q8,
                      const float *bias, int M, int N, int K, int accumulate, float *tiles, size_t tile_floats) {
    int parts = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int p = 0; p < parts; p++) {
        float *tile = tiles + tile_floats * (size_t)omp_get_thread_num();
        int n0, n1;
        matmul_slice(N, p, parts, &n0, &n1);
        int step = n1 > n0 ? tile_rows(n1 - n0, K) : 1;
        for (int t0 = n0; t0 < n1; t0 += step) {
            int t1 = n1 - t0 < step ? n1 : t0 + step;
            if (q4) cpu_unpack_q4_rows(simd, tile, q4, t0, t1, K);
            else cpu_unpack_q8_rows(simd, tile, q8, t0, t1, K);
            gemm_slice(y, x, tile, bias, M, N, K, t0, t1, accumulate);
        }
    }
}

/* ---------------------------------------------------------------------------------------- packed weights */

/* Nearest f16 value (round to nearest even), kept in a float: the grid of GGUF block scales and offsets. */
static float round_to_f16(float x) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    frexpf(x, &e);                  /* |x| = f * 2^e, f in [0.5, 1): 11 significant bits above 2^(e-11) */
    int lsb = e - 11 < -24 ? -24 : e - 11; /* f16 subnormals step by 2^-24 */
    return ldexpf(rintf(ldexpf(x, -lsb)), lsb);
}

/* Whether block w[32] equals (q * scale) + offset for integer q in int8 range, with scale one of the f16
 * values near the smallest gap between distinct elements divided by k (the gap is scale itself unless no
 * two codes of the block are adjacent). Writes the codes on success. */
static int pack_block_with_offset(const float *w, float offset, int8_t *q, float *scale) {
    float sorted[CPU_PACK_BLOCK], step = INFINITY;
    for (int i = 0; i < CPU_PACK_BLOCK; i++) {
        int j = i;
        for (; j > 0 && sorted[j - 1] > w[i]; j--) sorted[j] = sorted[j - 1];
        sorted[j] = w[i];
    }
    for (int i = 1; i < CPU_PACK_BLOCK; i++) {
        float gap = sorted[i] - sorted[i - 1];
        if (gap > 0 && gap < step) step = gap;
    }
    if (step == INFINITY) { /* a constant block: all codes 0 when it equals the offset */
        memset(q, 0, CPU_PACK_BLOCK);
        *scale = 0.0f;
        return w[0] == offset;
    }
    for (int k = 1; k <= 4; k++) {
        float s = round_to_f16(step / (float)k);
        int ok = s > 0;
        for (int i = 0; ok && i < CPU_PACK_BLOCK; i++) {
            float code = rintf((w[i] - offset) / s);
            ok = code >= -128 && code <= 127 && code * s + offset == w[i];
            q[i] = ok ? (int8_t)code : 0;
        }
        if (ok) {
            *scale = s;
            return 1;
        }
    }
    return 0;
}

int cpu_pack_exact(CpuPacked *p, const float *w, int N, int K) {
    if (K % CPU_PACK_BLOCK) return 0;
    int blocks = K / CPU_PACK_BLOCK, ok = 1;
#pragma omp parallel for schedule(static) reduction(&& : ok)
    for (int n = 0; n < N; n++) {
        for (int b = 0; ok && b < blocks; b++) {
            size_t at = (size_t)n * K + (size_t)b * CPU_PACK_BLOCK, bi = (size_t)n * blocks + b;
            const float *wb = w + at;
            float lo = wb[0];
            for (int i = 1; i < CPU_PACK_BLOCK; i++) lo = wb[i] < lo ? wb[i] : lo;
            /* Q4_1-style codes sit above the block minimum; Q8_0 / Q4_0-style codes are symmetric around 0 */
            p->offset[bi] = lo;
            if (pack_block_with_offset(wb, lo, p->q + at, &p->scale[bi])) continue;
            p->offset[bi] = 0.0f;
            ok = pack_block_with_offset(wb, 0.0f, p->q + at, &p->scale[bi]);
        }
    }
    return ok;
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
#pragma omp simd
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

void cpu_rope(float *x, int n_heads, int d, const float *cos_t, const float *sin_t) {
    int half = d / 2;
    for (int h = 0; h < n_heads; h++) {
        float *a = x + (size_t)h * d, *b = a + half;
#pragma omp simd
        for (int i = 0; i < half; i++) {
            float x0 = a[i], x1 = b[i];
            a[i] = x0 * cos_t[i] - x1 * sin_t[i];
            b[i] = x1 * cos_t[i] + x0 * sin_t[i];
        }
    }
}

void cpu_softmax(float *x, int n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    /* the sum in index order (what the compiler made of the loop before; the SIMD decode kernel in cpu_q4.c
     * follows this order to give the same bits) */
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = exp_approx(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void cpu_swiglu(float *g, const float *u, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + exp_approx(-g[i])) * u[i];
}

void cpu_attend_row(float *out, float *probs, const float *q, const float *k, const float *v, int n, int d,
                    float scale) {
    /* q.k_j in four lanes (lane l sums the products i = l mod 4 in order, a tail of d mod 4 on lane 0), then
     * ((0 + lane 0) + lane 1 + lane 2) + lane 3: the order of the 4-lane vectorisation this loop had, fixed in
     * the source so that every compiler and the SIMD decode kernel (cpu_q4.c) give the same bits */
    for (int j = 0; j < n; j++) {
        const float *kj = k + (size_t)j * d;
        float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int i = 0;
        for (; i + 4 <= d; i += 4)
            for (int l = 0; l < 4; l++) lane[l] += q[i + l] * kj[i + l];
        for (; i < d; i++) lane[0] += q[i] * kj[i];
        probs[j] = (((0.0f + lane[0]) + lane[1]) + lane[2]) + lane[3];
        probs[j] *= scale;
    }
    cpu_softmax(probs, n);
    memset(out, 0, (size_t)d * sizeof(float));
    for (int j = 0; j < n; j++) {
        const float *vj = v + (size_t)j * d;
        float p = probs[j];
#pragma omp simd
        for (int i = 0; i < d; i++) out[i] += p * vj[i];
    }
}

void cpu_attend_block(CpuSimd simd, float *out, int ldo, const float *q, int ldq, const float *k, const float *v, int T, int n_past,
                      int d, float scale, float *scores) {
    int n = n_past + T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, d, scale, q, ldq, k, d, 0.0f, scores, n);
    for (int t = 0; t < T; t++) {
        float *row = scores + (size_t)t * n;
        int seen = n_past + t + 1;
        cpu_softmax_simd(simd, row, seen);
        memset(row + seen, 0, (size_t)(n - seen) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d, n, 1.0f, scores, n, v, d, 0.0f, out, ldo);
}
