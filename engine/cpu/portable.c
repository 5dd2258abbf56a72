/* portable.c — the readable reference of every kernel of the CPU backend (kernels.h): plain C11, the loops
 * written so the compiler vectorises them (`omp simd`) where their order allows. Every instruction-set file
 * (avx2.c, avx512.c, vnni.c) gives these functions' bits, or states where it does not (the summation order of
 * the exact code products differs per level).
 *
 * exp is a Cody–Waite range reduction plus a degree-6 polynomial (relative error ~2e-7) instead of libm's
 * expf, because a call stops the compiler from vectorising the softmax and SwiGLU loops, and an 8k-token
 * prefill of SmolLM2 takes ~9e9 exponentials in its softmaxes alone.
 *
 * The fast products (decode = fast) have ONE arithmetic, stated here and followed by every kernel. Row x (one
 * sequence's activations) is quantised per block b of 32: d_b = max|x| / 127, xq = rint(x * (127 / max|x|)),
 * s_b = sum(xq) (integers), xo_b = d_b * s_b. For output n with block scale w_b, offset o_b (weight =
 * code * w_b + o_b) and the exact int32 dot dot_b = sum(code * xq):
 *     acc = 0;  for b in order:  acc = fma(fl(float(dot_b) * w_b), d_b, acc);  acc = fma(o_b, xo_b, acc)
 * then y = acc (+ bias) (+ the old y) as the exact path stores. A matrix kept as its source's blocks of a
 * ggml type (Q5_0, Q4_K, Q6_K, ...) takes the same chain, its block b read as cpu_fast_block gives it:
 * dot_b = sub_0 * sum(code * xq over the block's first 16) + sub_1 * sum(over its last 16), w_b = w, o_b = o.
 * Every (row, output) is its own chain of
 * rounded f32 steps in a fixed order and the integer dots are exact whichever instructions sum them, so the
 * portable, AVX2, VNNI and AMX kernels give the same bits, and row r of an M-row call equals the 1-row call. */
#include "isa.h"

#include "../gguf.h"

#include <math.h>
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
    /* the sum in index order (what the compiler made of the loop before; the SIMD decode kernel in avx512.c
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
     * the source so that every compiler and the SIMD decode kernel (avx512.c) give the same bits */
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


/* ---------------------------------------------------------------------------------------------- binary16 */

uint16_t cpu_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xFF, man = u & 0x7FFFFF;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 | (man >> 13) : 0)); /* inf, quiet NaN */
    int e = (int)exp - 127; /* unbiased exponent of a normal x */
    if (e > 15) return (uint16_t)(sign | 0x7C00);
    if (e >= -14) {
        /* normal half: keep 10 of the 23 mantissa bits, round the 13 dropped ones to nearest even; a carry out
         * of the mantissa steps the exponent (up to infinity past 65504), which the addition does by itself */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (man >> 13), rest = man & 0x1FFF;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    if (e < -25) return sign; /* below half the smallest subnormal (2^-25): rounds to zero (exp 0 lands here) */
    /* subnormal half m * 2^-24: x = full * 2^(e - 23) with the 24-bit significand full, so m = full * 2^(e + 1):
     * drop -e - 1 bits (14 to 24) and round them to nearest even */
    uint32_t full = man | 0x800000;
    int shift = -e - 1;
    uint32_t h = full >> shift, rest = full & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1))) h++; /* may round up into the smallest normal: right */
    return (uint16_t)(sign | h);
}

void cpu_to_f16_scalar(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

void cpu_to_f32_scalar(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kv_f16_to_f32(src[i]);
}

/* ------------------------------------------------------------------------------- products from the codes */

void cpu_unpack_q4_row(float *w, const CpuQ4Block *blocks, int n, int K) {
    const CpuQ4Block *row = blocks + (size_t)n * (K / 32);
    for (int b = 0; b < K / 32; b++) {
        float s = kv_f16_to_f32(row[b].scale), o = kv_f16_to_f32(row[b].offset);
        for (int i = 0; i < 16; i++) {
            w[b * 32 + i] = (float)(row[b].codes[i] & 15) * s + o;
            w[b * 32 + i + 16] = (float)(row[b].codes[i] >> 4) * s + o;
        }
    }
}

void cpu_q4_rebuild_scalar(float *w, const CpuQ4Block *blocks, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) cpu_unpack_q4_row(w + b * 32, blocks + b, 0, 32);
}

void cpu_q8_rebuild_scalar(float *w, const CpuPacked *p, size_t b0, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++)
        for (int i = 0; i < 32; i++)
            w[b * 32 + i] = (float)p->q[(b0 + b) * 32 + i] * p->scale[b0 + b] + p->offset[b0 + b];
}

/* Output column n of M rows from one rebuilt weight row: 16 lane sums, then the lanes added in order (both code
 * kernels' scalar entries). */
static void tile_row_products(float *y, int ldy, const float *x, int M, int K, const float *tile, const float *bias,
                              int n, int accumulate) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * K;
        float lanes[16] = {0};
        for (int k = 0; k < K; k += 16)
            for (int i = 0; i < 16; i++) lanes[i] += tile[k + i] * xm[k + i];
        float total = 0.0f;
        for (int i = 0; i < 16; i++) total += lanes[i];
        cpu_store_out(y + (size_t)m * ldy + n, total, bias, n, accumulate);
    }
}

/* Portable path: 16 lanes per accumulator like AVX-512 (not the same order within a lane's sum: AVX-512
 * adds its lanes as a tree). */
void cpu_q4_rows_scalar(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w, const float *bias,
                        int n0, int n1, int accumulate, float *tile) {
    for (int n = n0; n < n1; n++) {
        cpu_unpack_q4_row(tile, w, n, K);
        tile_row_products(y, ldy, x, M, K, tile, bias, n, accumulate);
    }
}

void cpu_q8_rows_scalar(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w, const float *bias,
                           int n0, int n1, int accumulate, float *tile) {
    for (int n = n0; n < n1; n++) {
        for (int i = 0; i < K; i++) tile[i] = (float)w->q[(size_t)n * K + i] * w->scale[((size_t)n * K + i) / 32] +
                                              w->offset[((size_t)n * K + i) / 32];
        tile_row_products(y, ldy, x, M, K, tile, bias, n, accumulate);
    }
}

/* The order itself, one output at a time: per K block a chain of fused multiply-adds from zero, added to y. */
void cpu_blas_order_scalar(float *y, int ldy, const float *xt, int ldx, int M, int K, const float *w, int rows) {
    for (int k0 = 0, len; k0 < K; k0 += len) {
        len = cpu_blas_k_block(K, k0);
        for (int n = 0; n < rows; n++)
            for (int m = 0; m < M; m++) {
                float chain = 0.0f;
                for (int k = k0; k < k0 + len; k++) chain = fmaf(xt[(size_t)k * ldx + m], w[(size_t)n * K + k], chain);
                y[(size_t)m * ldy + n] += chain;
            }
    }
}

/* The same for one row of x (sgemv): per K block eight chains by k mod 8, combined pairwise, added to y. */
void cpu_gemv_order_scalar(float *y, const float *x, const float *w, int rows, int K) {
    for (int r = 0; r < rows; r++)
        for (int k0 = 0; k0 < K; k0 += CPU_GEMV_K_BLOCK) {
            int k1 = K - k0 < CPU_GEMV_K_BLOCK ? K : k0 + CPU_GEMV_K_BLOCK;
            float c[8] = {0};
            for (int k = k0; k < k1; k++) c[(k - k0) % 8] = fmaf(w[(size_t)r * K + k], x[k], c[(k - k0) % 8]);
            y[r] += ((c[0] + c[4]) + (c[1] + c[5])) + ((c[2] + c[6]) + (c[3] + c[7]));
        }
}

/* ------------------------------------------------------------------------------------------ fast products */

void cpu_fast_quantize_scalar(CpuFastX *x, int m, const float *row) {
    for (int b = 0; b < x->K / 32; b++) {
        const float *v = row + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)rintf(v[i] * inv);
            x->xq[(size_t)m * x->K + b * 32 + i] = (int8_t)q;
            sum += q;
            if (i == 15) x->s16[b * CPU_FAST_ROWS + m] = sum;
        }
        x->d[b * CPU_FAST_ROWS + m] = amax / 127.0f;
        x->xo[b * CPU_FAST_ROWS + m] = (amax / 127.0f) * (float)sum;
        x->s[b * CPU_FAST_ROWS + m] = sum;
    }
}


/* The reference: outputs [n0, n1) for all rows of x, one scalar chain each. Rows of y start at y_row0. */
void cpu_fast_group_scalar(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate) {
    int K = x->K, per_row = K / 32;
    for (int n = n0; n < n1; n++) {
        float acc[CPU_FAST_ROWS] = {0};
        for (int b = 0; b < per_row; b++) {
            CpuFastBlock fb = {.sub = {1, 1}};
            if (job->q4) {
                const CpuQ4Block *blk = job->q4 + (size_t)n * per_row + b;
                for (int i = 0; i < 16; i++) fb.code[i] = (int8_t)(blk->codes[i] & 15), fb.code[i + 16] = (int8_t)(blk->codes[i] >> 4);
                fb.w = kv_f16_to_f32(blk->scale);
                fb.o = kv_f16_to_f32(blk->offset);
            } else if (job->blocks) {
                cpu_fast_block(job->blocks->type, job->blocks->data + (size_t)n * job->blocks->row_bytes, b, &fb);
            } else {
                memcpy(fb.code, job->q8->q + (size_t)n * K + b * 32, 32);
                fb.w = job->q8->scale[(size_t)n * per_row + b];
                fb.o = job->q8->offset[(size_t)n * per_row + b];
            }
            for (int m = 0; m < x->rows; m++) {
                const int8_t *xq = x->xq + (size_t)m * K + b * 32;
                int32_t lo = 0, hi = 0;
                for (int i = 0; i < 16; i++) lo += fb.code[i] * xq[i], hi += fb.code[i + 16] * xq[i + 16];
                int32_t dot = fb.sub[0] * lo + fb.sub[1] * hi;
                acc[m] = fmaf((float)dot * fb.w, x->d[b * CPU_FAST_ROWS + m], acc[m]);
                acc[m] = fmaf(fb.o, x->xo[b * CPU_FAST_ROWS + m], acc[m]);
            }
        }
        for (int m = 0; m < x->rows; m++)
            cpu_store_out(job->y + (size_t)(y_row0 + m) * job->N + n, acc[m], job->bias, n, accumulate);
    }
}

/* ------------------------------------------------------------------ a source's blocks, as the fast products take them */

int cpu_fast_block_type(int type) {
    switch (type) {
    case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1: case GGML_Q8_0:
    case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: return 1;
    default: return 0;
    }
}

/* Each case reads its type's layout as gguf.c's dequantiser does, and w, sub and o are the factors in that
 * dequantiser's order of rounding (kernels.h CpuFastBlock). */
void cpu_fast_block(int type, const uint8_t *row, int b, CpuFastBlock *out) {
    out->sub[0] = out->sub[1] = 1;
    out->o = 0.0f;
    switch (type) {
    case GGML_Q4_0: case GGML_Q4_1: { /* d (, m), qs[16]: (q - 8) * d, or q * d + m */
        const uint8_t *blk = row + (size_t)b * (type == GGML_Q4_0 ? 18 : 20), *qs = blk + (type == GGML_Q4_0 ? 2 : 4);
        int zero = type == GGML_Q4_0 ? 8 : 0;
        for (int j = 0; j < 16; j++) out->code[j] = (int8_t)((qs[j] & 15) - zero), out->code[j + 16] = (int8_t)((qs[j] >> 4) - zero);
        out->w = kv_f16_field(blk);
        if (type == GGML_Q4_1) out->o = kv_f16_field(blk + 2);
        break;
    }
    case GGML_Q5_0: case GGML_Q5_1: { /* d (, m), qh, qs[16] */
        const uint8_t *blk = row + (size_t)b * (type == GGML_Q5_0 ? 22 : 24), *qh = blk + (type == GGML_Q5_0 ? 2 : 4);
        int q[32], zero = type == GGML_Q5_0 ? 16 : 0;
        ggml_q5_codes(qh, qh + 4, q);
        for (int j = 0; j < 32; j++) out->code[j] = (int8_t)(q[j] - zero);
        out->w = kv_f16_field(blk);
        if (type == GGML_Q5_1) out->o = kv_f16_field(blk + 2);
        break;
    }
    case GGML_Q8_0: {
        const uint8_t *blk = row + (size_t)b * 34;
        for (int j = 0; j < 32; j++) out->code[j] = (int8_t)blk[2 + j];
        out->w = kv_f16_field(blk);
        break;
    }
    case GGML_Q4_K: case GGML_Q5_K: { /* d, dmin, scales[12] (, qh[32]), qs[128]: sub-block j = b % 8 of 32 */
        const uint8_t *sb = row + (size_t)(b / 8) * (type == GGML_Q4_K ? 144 : 176), *s = sb + 4;
        const uint8_t *qs = sb + (type == GGML_Q4_K ? 16 : 48) + 32 * (b % 8 / 2), *qh = sb + 16;
        int j = b % 8, sc, mn;
        ggml_q4_k_scale_min(j, s, &sc, &mn);
        for (int l = 0; l < 32; l++)
            out->code[l] = (int8_t)(((qs[l] >> 4 * (j % 2)) & 15) | (type == GGML_Q5_K ? ((qh[l] >> j) & 1) << 4 : 0));
        out->w = kv_f16_field(sb) * (float)sc;
        out->o = -(kv_f16_field(sb + 2) * (float)mn);
        break;
    }
    case GGML_Q6_K: { /* ql[128], qh[64], scales[16] (int8, one per 16), d: block t = b % 4 of half h = b % 8 / 4 */
        const uint8_t *sb = row + (size_t)(b / 8) * 210;
        int h = b % 8 / 4, t = b % 4;
        const uint8_t *ql = sb + 64 * h + 32 * (t & 1), *qh = sb + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(sb + 192 + 8 * h);
        for (int l = 0; l < 32; l++)
            out->code[l] = (int8_t)((((ql[l] >> 4 * (t >> 1)) & 15) | ((qh[l] >> 2 * t) & 3) << 4) - 32);
        out->sub[0] = sc[2 * t];
        out->sub[1] = sc[2 * t + 1];
        out->w = kv_f16_field(sb + 208);
        break;
    }
    default: memset(out, 0, sizeof *out); /* cpu_fast_block_type refuses it: no caller gets here */
    }
}
