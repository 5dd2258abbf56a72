/* test_cpu_kernels.c — the kernel table of the CPU backend (engine/cpu/) on every instruction-set level
 * this CPU has, the portable one always:
 *  - packing: Q4_1-style (f16 scale, f16 minimum, codes 0..15) and Q4_0-style (codes -8..7) blocks pack to
 *    4 bits and unpack to the very same f32 values; a value off the block grid does not pack;
 *  - products: cpu_matmul_q4 / cpu_matmul_q8 against a float64 sum of the same f32 weights, relative error
 *    (max |diff| / max |ref|) <= 1e-5 (f32 accumulation over K = 160 terms), with bias and accumulation;
 *  - rows are independent: row r of an M-row call equals the 1-row call on that row bit for bit (the batched
 *    decode equals B single decodes), for M = 1..6 and 17; the fused gate/up/SwiGLU equals the separate
 *    products and cpu_swiglu bit for bit; several jobs in one call equal one call each; the SIMD SwiGLU
 *    equals cpu_swiglu bit for bit, special values included, the SIMD softmax cpu_softmax, and the decode
 *    attention cpu_attend_row, for 1 to 9 query heads per key head; the attention that reads rows in place
 *    (cpu_attend_heads_rows: binary16 rows, a view's rows shared from a base then rows of its own) equals
 *    cpu_attend_row on the same rows copied into one f32 block, bit for bit;
 *  - the SIMD levels agree with the portable path within 1e-5 (summation order only);
 *  - cpu_kernels_init rejects an unknown name with a message. */
#include <stdint.h>
#include <string.h>

#include "../engine/cpu/ops.h"
#include "test.h"

enum { N = 13, K = 160, MAXM = 17 };

static unsigned state = 7;
static float uniform(void) { return ((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f; }

/* x rounded to the nearest half-precision value (11 significant bits, ties to even, as a cast to _Float16
 * would, which clang 14 lacks on x86); exact for the normal f16 range these scales stay in. */
static float round_f16(float x) {
    int e;
    float m = frexpf(x, &e);
    return ldexpf(rintf(m * 2048.0f) / 2048.0f, e);
}

/* w[N][K]: rows alternate Q4_1-style (code * d + m) and Q4_0-style ((code - 8) * d) blocks, d and m f16. */
static void make_q4_weights(float *w) {
    for (int r = 0; r < N; r++)
        for (int b = 0; b < K / 32; b++) {
            float d = round_f16(0.002f + 0.05f * uniform()), m = round_f16(-0.4f * uniform());
            for (int i = 0; i < 32; i++) {
                int q = (int)(16 * uniform()) % 16;
                /* the first block of each row uses the full code range, as GGUF's quantiser does */
                if (b == 0 && i < 2) q = i ? 15 : 0;
                w[r * K + b * 32 + i] = r % 2 ? (float)(q - 8) * d : (float)q * d + m;
            }
        }
}

/* int8 codes as Q8_0 stores them: code * d, d an f16. */
static void make_q8_weights(float *w) {
    for (int r = 0; r < N; r++)
        for (int b = 0; b < K / 32; b++) {
            float d = round_f16(0.001f + 0.01f * uniform());
            for (int i = 0; i < 32; i++) w[r * K + b * 32 + i] = (float)((int)(255 * uniform()) - 127) * d;
        }
}

static double rel_err(const float *a, const double *ref, int n) {
    double worst = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        worst = fmax(worst, fabs(a[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    return worst / fmax(scale, 1e-30);
}

/* y = x . w^T + bias (+ y0 when accumulate) in float64. */
static void reference(double *y, const float *x, const float *w, const float *bias, const float *y0, int M) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bias[n] + (y0 ? y0[m * N + n] : 0.0);
            for (int k = 0; k < K; k++) s += (double)x[m * K + k] * w[n * K + k];
            y[m * N + n] = s;
        }
}

static void check_packing(TestCounts *tc, const float *w) {
    CpuQ4Block blocks[N * K / 32];
    CHECK(tc, cpu_pack_q4(blocks, w, N, K) == 1, "Q4_1 / Q4_0-style rows pack to 4 bits");
    float row[K];
    int same = 1;
    for (int n = 0; n < N; n++) {
        cpu_unpack_q4_row(row, blocks, n, K);
        same &= !memcmp(row, w + n * K, sizeof row);
    }
    CHECK(tc, same, "4-bit blocks unpack to the loader's f32 values exactly");
    float bad[N * K];
    memcpy(bad, w, sizeof bad);
    bad[40] += 1e-4f;
    CHECK(tc, cpu_pack_q4(blocks, bad, N, K) == 0, "a value off the block grid does not pack");
    float q8[N * K];
    make_q8_weights(q8);
    CHECK(tc, cpu_pack_q4(blocks, q8, N, K) == 0, "int8 codes do not pack to 4 bits");
}

static void check_level(TestCounts *tc, const CpuKernels *simd, const float *w4, const float *w8, float *scalar_out) {
    const char *name = simd->simd_name;
    static CpuQ4Block blocks[N * K / 32], blocks_b[N * K / 32];
    cpu_pack_q4(blocks, w4, N, K);
    int8_t codes[N * K];
    float scales[N * K / 32], offsets[N * K / 32];
    CpuPacked p8 = {codes, scales, offsets};
    CHECK(tc, cpu_pack_exact(&p8, w8, N, K) == 1, "Q8_0-style rows pack to int8");
    float x[MAXM * K], bias[N], y0[MAXM * N];
    state = 99; /* the same inputs for every level, to compare them */
    for (int i = 0; i < MAXM * K; i++) x[i] = 2 * uniform() - 1;
    for (int i = 0; i < N; i++) bias[i] = uniform() - 0.5f;
    for (int i = 0; i < MAXM * N; i++) y0[i] = uniform() - 0.5f;
    static float tiles[64 * CPU_Q4_TILE_FLOATS(K)] __attribute__((aligned(64)));
    float y[MAXM * N], one[N];
    double ref[MAXM * N];
    const int sizes[] = {1, 2, 3, 4, 5, 6, 17};
    for (int si = 0; si < 7; si++) {
        int M = sizes[si];
        for (int fmt = 0; fmt < 2; fmt++) {
            const float *w = fmt ? w8 : w4;
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                memcpy(y, y0, sizeof(float) * M * N);
                CpuQ4Job job = {y, blocks, bias, N};
                if (fmt) cpu_matmul_q8(simd, y, x, &p8, bias, M, N, K, accumulate, tiles);
                else cpu_matmul_q4(simd, &job, 1, x, M, K, accumulate, tiles);
                reference(ref, x, w, bias, accumulate ? y0 : NULL, M);
                double e = rel_err(y, ref, M * N);
                CHECK(tc, e <= 1e-5, "%s %s M=%d accumulate=%d: relative error %.3g", name, fmt ? "q8" : "q4", M,
                      accumulate, e);
                if (simd->simd == CPU_SIMD_SCALAR && M == 17 && !accumulate) memcpy(scalar_out + fmt * MAXM * N, y, sizeof y);
                if (simd->simd != CPU_SIMD_SCALAR && M == 17 && !accumulate) {
                    double worst = 0;
                    for (int i = 0; i < M * N; i++) ref[i] = scalar_out[fmt * MAXM * N + i];
                    worst = rel_err(y, ref, M * N);
                    CHECK(tc, worst <= 1e-5, "%s vs scalar (%s): %.3g", name, fmt ? "q8" : "q4", worst);
                }
                /* each row equals the single-row call on it, bit for bit */
                int same = 1;
                for (int m = 0; m < M; m++) {
                    memcpy(one, y0 + m * N, sizeof one);
                    CpuQ4Job solo = {one, blocks, bias, N};
                    if (fmt) cpu_matmul_q8(simd, one, x + m * K, &p8, bias, 1, N, K, accumulate, tiles);
                    else cpu_matmul_q4(simd, &solo, 1, x + m * K, 1, K, accumulate, tiles);
                    same &= !memcmp(one, y + m * N, sizeof one);
                }
                CHECK(tc, same, "%s %s M=%d accumulate=%d: rows equal single-row calls bit for bit", name,
                      fmt ? "q8" : "q4", M, accumulate);
            }
        }
        /* two jobs in one call (q/k/v style) equal one call each; the fused SwiGLU equals the separate steps */
        float w4b[N * K];
        for (int i = 0; i < N * K; i++) w4b[i] = w4[(i + 7 * K) % (N * K)];
        cpu_pack_q4(blocks_b, w4b, N, K);
        float ya[MAXM * N], yb[MAXM * N], sa[MAXM * N], sb[MAXM * N];
        CpuQ4Job pair[2] = {{ya, blocks, bias, N}, {yb, blocks_b, NULL, N}};
        cpu_matmul_q4(simd, pair, 2, x, M, K, 0, tiles);
        CpuQ4Job ja = {sa, blocks, bias, N}, jb = {sb, blocks_b, NULL, N};
        cpu_matmul_q4(simd, &ja, 1, x, M, K, 0, tiles);
        cpu_matmul_q4(simd, &jb, 1, x, M, K, 0, tiles);
        CHECK(tc, !memcmp(ya, sa, sizeof(float) * M * N) && !memcmp(yb, sb, sizeof(float) * M * N),
              "%s M=%d: two jobs in one call equal separate calls", name, M);
        float g[MAXM * N], u[MAXM * N];
        cpu_ffn_q4(simd, g, u, blocks, blocks_b, x, M, K, N, tiles);
        jb.bias = NULL;
        ja.bias = NULL;
        cpu_matmul_q4(simd, &ja, 1, x, M, K, 0, tiles);
        cpu_swiglu(sa, sb, (size_t)M * N);
        CHECK(tc, !memcmp(g, sa, sizeof(float) * M * N), "%s M=%d: fused gate/up/SwiGLU equals the separate steps",
              name, M);
    }
}

/* the table's swiglu against cpu_swiglu bit for bit: gates across exp's clamp (|g| > 87), around 0 (both
 * signs), tiny and huge values, infinities, and a length that leaves a tail after the 16-lane blocks. */
static void check_swiglu(TestCounts *tc, const CpuKernels *simd, const char *name) {
    enum { LEN = 16 * 40 + 7 };
    static float g[LEN], u[LEN], want[LEN];
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, 86.9f, 87.0f, 87.5f, 88.0f, 88.5f, -86.9f,
                             -87.0f, -88.0f, -88.5f, 1e30f, -1e30f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY};
    state = 5;
    for (int i = 0; i < LEN; i++) {
        int k = i % 64;
        g[i] = k < 20 ? special[k] : (k < 40 ? 200 * uniform() - 100 : 8 * uniform() - 4);
        u[i] = 4 * uniform() - 2;
    }
    memcpy(want, g, sizeof g);
    cpu_swiglu(want, u, LEN);
    simd->swiglu(g, u, LEN);
    int same = 1;
    for (int i = 0; i < LEN; i++) same &= !memcmp(&g[i], &want[i], sizeof(float));
    CHECK(tc, same, "%s: SwiGLU equals cpu_swiglu bit for bit over %d values", name, LEN);
}

/* cpu_attend_heads (the table's attend_rows where it serves) against cpu_attend_row per head, bit for bit: key counts around the 4-key and 16-lane
 * blocks, head dims of 1 to 8 vectors (80: a last partial group of the output registers), 1 to 9 query
 * heads per key head (past 4: a second pass of up to four), scores from small to large enough that most
 * probabilities underflow. */
static void check_attention(TestCounts *tc, const CpuKernels *simd, const char *name) {
    enum { MAXN = 300, MAXD = 128, MAXG = 9 };
    static float q[MAXG * MAXD], k[MAXN * MAXD], v[MAXN * MAXD], out[MAXG * MAXD], want[MAXD], probs[MAXG * MAXN],
        want_p[MAXN];
    const int ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 37, 300}, ds[] = {16, 64, 80, 128}, gs[] = {1, 2, 3, 4, 5, 9};
    const float spread[] = {0.1f, 1.0f, 12.0f};
    int same = 1, cases = 0;
    state = 11;
    for (int di = 0; di < 4; di++)
        for (int ni = 0; ni < 14; ni++)
            for (int si = 0; si < 3; si++) {
                int n = ns[ni], d = ds[di], G = gs[(di * 14 + ni + si) % 6];
                for (int i = 0; i < G * d; i++) q[i] = spread[si] * (2 * uniform() - 1);
                for (int i = 0; i < n * d; i++) k[i] = 2 * uniform() - 1, v[i] = 2 * uniform() - 1;
                cpu_attend_heads(simd, out, probs, q, k, v, n, d, 0.125f, G);
                for (int g = 0; g < G; g++) {
                    cpu_attend_row(want, want_p, q + g * d, k, v, n, d, 0.125f);
                    same &= !memcmp(out + g * d, want, sizeof(float) * d) &&
                            !memcmp(probs + g * n, want_p, sizeof(float) * n);
                    cases++;
                }
            }
    CHECK(tc, same, "%s: decode attention equals cpu_attend_row bit for bit (%d cases)", name, cases);
    /* the softmax alone, over rows whose spread reaches exp's clamp (differences below -87) */
    static float x[MAXN], y[MAXN];
    same = 1;
    for (int ni = 0; ni < 12; ni++)
        for (int si = 0; si < 4; si++) {
            int n = ns[ni];
            for (int i = 0; i < n; i++) x[i] = y[i] = (si == 3 ? 300.0f : spread[si] * 10) * (2 * uniform() - 1);
            cpu_softmax(x, n);
            simd->softmax(y, n);
            same &= !memcmp(x, y, sizeof(float) * n);
        }
    CHECK(tc, same, "%s: softmax equals cpu_softmax bit for bit", name);
}

/* cpu_attend_heads_rows against cpu_attend_row on the rows copied (widened) into one block, bit for bit: f32
 * and binary16 rows, held in one piece or as a view (every other row of a base, then rows of its own), key
 * counts around the 4-key blocks, head dims 16..128, 1 to 5 query heads. */
static void check_rows_in_place(TestCounts *tc, const CpuKernels *simd) {
    enum { MAXN = 200, MAXD = 128, MAXG = 5 };
    static float q[MAXG * MAXD], kw[MAXN * MAXD], vw[MAXN * MAXD], kb[2 * MAXN * MAXD], vb[2 * MAXN * MAXD],
        out[MAXG * MAXD], want[MAXD], probs[MAXG * MAXN], want_p[MAXN];
    static uint16_t kb16[2 * MAXN * MAXD], vb16[2 * MAXN * MAXD];
    static int shared[MAXN];
    const int ns[] = {1, 3, 4, 5, 8, 17, 136, 200}, ds[] = {16, 64, 80, 128};
    int same = 1, cases = 0;
    state = 29;
    for (int half = 0; half < 2; half++)
        for (int view = 0; view < 2; view++)
            for (int di = 0; di < 4; di++)
                for (int ni = 0; ni < 8; ni++) {
                    int n = ns[ni], d = ds[di], G = 1 + (di + ni) % MAXG;
                    int n_shared = view ? n - n / 4 : 0; /* a view: 3/4 shared, the rest its own */
                    for (int i = 0; i < G * d; i++) q[i] = 4 * uniform() - 2;
                    /* the base: 2n rows; a view shares rows 0, 2, 4, ... and keeps its own rows after the base's */
                    for (int i = 0; i < 2 * n * d; i++) {
                        kb[i] = 2 * uniform() - 1, vb[i] = 2 * uniform() - 1;
                        if (half) kb16[i] = cpu_f32_to_f16(kb[i]), vb16[i] = cpu_f32_to_f16(vb[i]),
                                  kb[i] = kv_f16_to_f32(kb16[i]), vb[i] = kv_f16_to_f32(vb16[i]);
                    }
                    for (int j = 0; j < n_shared; j++) shared[j] = 2 * j;
                    size_t own_at = view ? (size_t)n * d : 0; /* a plain head: its rows are the base's first n */
                    for (int j = 0; j < n; j++) {
                        size_t from = j < n_shared ? (size_t)shared[j] * d : own_at + (size_t)(j - n_shared) * d;
                        memcpy(kw + (size_t)j * d, kb + from, sizeof(float) * d);
                        memcpy(vw + (size_t)j * d, vb + from, sizeof(float) * d);
                    }
                    const void *kbase = half ? (const void *)kb16 : kb, *vbase = half ? (const void *)vb16 : vb;
                    size_t own_bytes = own_at * (half ? 2 : 4);
                    CpuRows keys = {kbase, shared, n_shared, (const char *)kbase + own_bytes, half};
                    CpuRows values = {vbase, shared, n_shared, (const char *)vbase + own_bytes, half};
                    cpu_attend_heads_rows(simd, out, probs, q, &keys, &values, n, d, 0.125f, G);
                    for (int g = 0; g < G; g++) {
                        cpu_attend_row(want, want_p, q + g * d, kw, vw, n, d, 0.125f);
                        same &= !memcmp(out + g * d, want, sizeof(float) * d) &&
                                !memcmp(probs + g * n, want_p, sizeof(float) * n);
                        cases++;
                    }
                }
    CHECK(tc, same, "attention on rows in place (f32/f16, whole/view) equals cpu_attend_row on their copy (%d heads)",
          cases);
}

int main(void) {
    TestCounts tc = {"test_cpu_kernels", 0, 0, 0};
    static float w4[N * K], w8[N * K], scalar_out[2 * MAXM * N];
    make_q4_weights(w4);
    make_q8_weights(w8);
    check_packing(&tc, w4);
    KvErr err = {{0}};
    CpuKernels kt, *simd = &kt;
    CHECK(&tc, cpu_kernels_init(&kt, "sse9", NULL, &err) != 0 && strstr(err.msg, "unknown"), "unknown level: %s", err.msg);
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        err.msg[0] = 0;
        if (cpu_kernels_init(&kt, levels[i], NULL, &err)) {
            SKIP(&tc, "%s: not supported here (%s)", levels[i], err.msg);
            continue;
        }
        check_level(&tc, simd, w4, w8, scalar_out);
        check_swiglu(&tc, simd, levels[i]);
        check_attention(&tc, simd, levels[i]);
        if (cpu_attend_direct(simd, 64)) check_rows_in_place(&tc, simd);
        printf("test_cpu_kernels: %s checked\n", levels[i]);
    }
    return test_finish(&tc);
}
