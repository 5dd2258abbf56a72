/* test_cuda_flash.c — the flash prefill kernel's plan (engine/cuda/flash_plan.h) on a machine without a GPU.
 *
 * Layout, for every head dim the CUDA backend accepts (multiples of 16 up to 256): each WMMA tile pointer the
 * kernel forms is 32-byte aligned, each leading dimension a multiple of 16 bytes, the 8 rows of an ldmatrix
 * phase of Q/K/V fall in 8 different 16-byte bank groups, and the total fits sm_90's opt-in limit. Exact.
 *
 * Tile walk: the kernel's schedule emulated in plain C on one head — query tiles in the kernel's block order,
 * warps of 16 rows skipping key tiles past their last visible key, lane pairs splitting each row's columns, the
 * running max moved only past FA_SLACK, rescale factors, P rounded to bf16 as the kernel stores it — against a
 * direct softmax in double. Every visible key must be seen exactly once per row, and the outputs must agree
 * within 1e-5 without the bf16 rounding of P and 1e-2 with it (values in [-1, 1]). Logits that grow along the
 * keys force the max to move mid-row; small spreads keep it fixed (the lazy path). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/cuda/flash_plan.h"
#include "test.h"

/* The larger of two errors, NaN when either is (fmax and a plain comparison would let a NaN slip through). */
static double worse(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

static int aligned32(size_t bytes) { return bytes % 32 == 0; }

static void check_layout(TestCounts *tc, int d) {
    FlashLayout f = flash_layout(d);
    int ok = aligned32(f.q) && aligned32(f.k) && aligned32(f.v) && aligned32(f.s) && aligned32(f.p) &&
             f.m % 16 == 0 && f.l % 16 == 0 && f.alpha % 16 == 0;
    CHECK(tc, ok, "d=%d: a tile base is not 32-byte aligned", d);
    CHECK(tc, f.ld_qkv * 2 % 16 == 0 && f.ld_s * 4 % 16 == 0 && f.ld_p * 2 % 16 == 0,
          "d=%d: a leading dimension is not a multiple of 16 bytes", d);
    CHECK(tc, f.ld_qkv >= d && f.ld_s >= FA_BK && f.ld_p >= FA_BK, "d=%d: a row is too short", d);
    /* P overwrites S in place: each P row must sit inside its own S row's bytes, so a warp's P never touches
     * another warp's S. */
    CHECK(tc, f.p == f.s && f.ld_p * 2 == f.ld_s * 4, "d=%d: P rows do not coincide with S rows", d);
    CHECK(tc, f.total <= FA_SMEM_LIMIT, "d=%d: %zu bytes of shared memory, limit %d", d, f.total, FA_SMEM_LIMIT);
    if (d == 128) /* the paper's models: three blocks (twelve warps) per multiprocessor */
        CHECK(tc, 3 * (f.total + 1024) <= FA_SMEM_PER_SM, "d=128: %zu bytes per block leave room for fewer than 3 "
              "blocks per multiprocessor", f.total);
    /* Regions must not overlap: each ends where the next begins. */
    CHECK(tc, f.k == f.q + (size_t)FA_BQ * f.ld_qkv * 2 && f.v == f.k + (size_t)FA_BK * f.ld_qkv * 2 &&
              f.s == f.v + (size_t)FA_BK * f.ld_qkv * 2 && f.m == f.s + (size_t)FA_BQ * f.ld_s * 4 &&
              f.total == f.alpha + FA_BQ * 4,
          "d=%d: regions overlap or leave gaps", d);
    /* Every fragment pointer of the kernel: warp rows r0, key blocks j (of 16), dim blocks kk (of 16). */
    int bad = 0;
    for (int r0 = 0; r0 < FA_BQ; r0 += 16) {
        for (int kk = 0; kk < d / 16; kk++) {
            bad += !aligned32(f.q + (size_t)(r0 * f.ld_qkv + kk * 16) * 2);
            for (int j = 0; j < FA_BK / 16; j++) bad += !aligned32(f.k + (size_t)(j * 16 * f.ld_qkv + kk * 16) * 2);
        }
        for (int j = 0; j < FA_BK / 16; j++) {
            bad += !aligned32(f.s + (size_t)(r0 * f.ld_s + j * 16) * 4);
            bad += !aligned32(f.p + (size_t)(r0 * f.ld_p + j * 16) * 2);
            for (int dj = 0; dj < d / 16; dj++) bad += !aligned32(f.v + (size_t)(j * 16 * f.ld_qkv + dj * 16) * 2);
        }
        /* O's passes through S: FA_BK / 16 fragments at a time, each at S's own fragment pointers (above). */
    }
    CHECK(tc, bad == 0, "d=%d: %d WMMA fragment pointers not 32-byte aligned", d, bad);
    /* ldmatrix reads 8 rows of 16 bytes per phase: distinct bank groups need distinct (row stride / 16) mod 8. */
    int groups = 0;
    for (int r = 0; r < 8; r++) groups |= 1 << ((r * f.ld_qkv * 2 / 16) % 8);
    CHECK(tc, groups == 0xFF, "d=%d: Q/K/V rows of %d bytes collide in shared-memory banks", d, f.ld_qkv * 2);
}

static float bf16_round(float x) { /* round to nearest even, as __float2bfloat16 */
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static double uniform(unsigned long long *s) { /* [-1, 1) */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0;
}

/* One kv-head of `len` cached entries plus a chunk of Tc queries; logits z[t][j] (already in log2 units, as the
 * kernel scales them) and values v[j] of dim dv. Returns the worst |kernel schedule - direct| over all outputs
 * and counts rows whose visible keys were not each seen exactly once. */
static double walk(int len, int Tc, int dv, int round_p, double trend, unsigned long long seed, int *bad_rows) {
    int n_all = len + Tc;
    float *z = malloc(sizeof(float) * (size_t)Tc * n_all), *v = malloc(sizeof(float) * (size_t)n_all * dv);
    for (int t = 0; t < Tc; t++)
        for (int j = 0; j < n_all; j++) z[(size_t)t * n_all + j] = (float)(4.0 * uniform(&seed) + trend * j);
    for (size_t i = 0; i < (size_t)n_all * dv; i++) v[i] = (float)uniform(&seed);
    float *o = calloc((size_t)FA_BQ * dv, sizeof(float));
    int *seen = malloc(sizeof(int) * n_all);
    double worst = 0.0;
    int n_tiles = (Tc + FA_BQ - 1) / FA_BQ;
    for (int x = 0; x < n_tiles; x++) {
        int q0 = flash_tile(x, n_tiles) * FA_BQ, nq = Tc - q0 < FA_BQ ? Tc - q0 : FA_BQ;
        int n_keys = len + q0 + nq;
        float m[FA_BQ], l[FA_BQ];
        for (int r = 0; r < FA_BQ; r++) m[r] = -INFINITY, l[r] = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)FA_BQ * dv);
        for (int r0 = 0; r0 < FA_BQ; r0 += 16) {
            int last = flash_last_key(len, q0, nq, r0);
            for (int row = r0; row < r0 + 16; row++) {
                int limit = flash_limit(len, q0, nq, row);
                memset(seen, 0, sizeof(int) * n_all);
                for (int k0 = 0; k0 < n_keys; k0 += FA_BK) {
                    if (k0 > last) continue;
                    float sv[2][FA_BK / 2], tmax = -INFINITY, tsum = 0.0f, p[FA_BK];
                    for (int half = 0; half < 2; half++) /* the two lanes of the row */
                        for (int u = 0; u < FA_BK / 2; u++) {
                            int c = 2 * u + half, key = k0 + c;
                            sv[half][u] = key < limit ? z[(size_t)(q0 + row) * n_all + key] : -INFINITY;
                            if (key < limit) seen[key]++;
                            tmax = fmaxf(tmax, sv[half][u]);
                        }
                    float m_new = flash_next_max(m[row], tmax), alpha = 1.0f;
                    for (int half = 0; half < 2; half++)
                        for (int u = 0; u < FA_BK / 2; u++) {
                            float e = m_new == -INFINITY ? 0.0f : exp2f(sv[half][u] - m_new);
                            tsum += e;
                            p[2 * u + half] = round_p ? bf16_round(e) : e;
                        }
                    if (m_new != -INFINITY) alpha = exp2f(m[row] - m_new);
                    m[row] = m_new;
                    l[row] = l[row] * alpha + tsum;
                    for (int c = 0; c < dv; c++) {
                        float acc = alpha != 1.0f ? o[row * dv + c] * alpha : o[row * dv + c];
                        for (int k = 0; k < FA_BK; k++)
                            if (k0 + k < n_all) acc += p[k] * v[(size_t)(k0 + k) * dv + c];
                        o[row * dv + c] = acc;
                    }
                }
                if (row >= nq) continue;
                int once = 1;
                for (int j = 0; j < n_all; j++) once &= seen[j] == (j < limit);
                *bad_rows += !once;
                const float *zr = z + (size_t)(q0 + row) * n_all;
                double zmax = -INFINITY, den = 0.0;
                for (int j = 0; j < limit; j++) zmax = fmax(zmax, zr[j]);
                for (int j = 0; j < limit; j++) den += exp2(zr[j] - zmax);
                for (int c = 0; c < dv; c++) {
                    double ref = 0.0;
                    for (int j = 0; j < limit; j++) ref += exp2(zr[j] - zmax) / den * v[(size_t)j * dv + c];
                    double got = o[row * dv + c] / l[row];
                    double e = fabs(got - ref);
                    worst = worse(worst, e);
                }
            }
        }
    }
    free(z);
    free(v);
    free(o);
    free(seen);
    return worst;
}

int main(void) {
    TestCounts tc = {"test_cuda_flash", 0, 0, 0};
    for (int d = 16; d <= 256; d += 16) check_layout(&tc, d);

    int seen_tiles[8] = {0}, ok = 1;
    for (int x = 0; x < 8; x++) seen_tiles[flash_tile(x, 8)]++;
    for (int i = 0; i < 8; i++) ok &= seen_tiles[i] == 1;
    CHECK(&tc, ok && flash_tile(0, 8) == 7, "flash_tile is not a reversal of the tiles");
    CHECK(&tc, flash_limit(10, 64, 5, 4) == 79 && flash_limit(10, 64, 5, 5) == 0, "flash_limit at the chunk's end");
    CHECK(&tc, flash_last_key(10, 64, 5, 0) == 78 && flash_last_key(10, 64, 5, 16) == -1 &&
               flash_last_key(0, 0, 64, 48) == 63,
          "flash_last_key");
    CHECK(&tc, flash_next_max(-INFINITY, 3.0f) == 3.0f && flash_next_max(-INFINITY, -INFINITY) == -INFINITY &&
               flash_next_max(3.0f, 10.0f) == 3.0f && flash_next_max(3.0f, 12.0f) == 12.0f,
          "flash_next_max");

    /* (cached entries, chunk tokens, logit trend per key): tile and warp edges, a short last tile, an empty
     * cache, and trends that move the max many times (0.3 per key) or keep it nearly fixed (0). */
    const struct {
        int len, Tc;
        double trend;
    } cases[] = {{0, 1, 0.0}, {0, 2, 0.0}, {0, 64, 0.3}, {5, 65, 0.0}, {63, 17, 0.3}, {64, 130, 0.05},
                 {300, 100, 0.3}, {1, 200, -0.1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int bad = 0;
        double exact = walk(cases[i].len, cases[i].Tc, 8, 0, cases[i].trend, 77 + i, &bad);
        CHECK(&tc, bad == 0, "len=%d Tc=%d: %d rows did not see each visible key once", cases[i].len, cases[i].Tc, bad);
        CHECK(&tc, exact <= 1e-5, "len=%d Tc=%d trend=%g: f32 walk off by %g", cases[i].len, cases[i].Tc,
              cases[i].trend, exact);
        double rounded = walk(cases[i].len, cases[i].Tc, 8, 1, cases[i].trend, 77 + i, &bad);
        CHECK(&tc, rounded <= 1e-2, "len=%d Tc=%d trend=%g: walk with bf16 P off by %g", cases[i].len, cases[i].Tc,
              cases[i].trend, rounded);
    }
    return test_finish(&tc);
}
