/* test_cpu_f16.c — the binary16 conversions of the CPU backend's opt-in half-precision KV cache
 * (cache f16, engine/cpu/portable.c and the kernel table's to_f16 / to_f32) and the cache that holds them (engine/kvcache.c).
 *
 * References: numpy's float16 (tests/reference/gen_f16_cases.py writes tests/data/f16/: f32 -> f16 on 8181
 * cases chosen at every rounding branch, f16 -> f32 on 5890), a hand-derived table (ties to even, subnormals,
 * overflow to infinity), and exhaustive checks over all 65536 f16 bit patterns. Every SIMD level this CPU
 * has must give the portable converter's bits exactly (tolerance 0). An f16 cache gathered from a keep-set
 * equals the f32 cache gathered with the same keep-set, then converted (bits, tolerance 0). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/cpu/ops.h"
#include "../engine/kvcache.h"
#include "test.h"

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Reads "HEX HEX" lines (after a # comment) into a[] and b[]; returns the count, -1 when the file is missing. */
static int read_pairs(const char *path, uint32_t **a, uint32_t **b) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, cap = 0;
    char line[128];
    *a = *b = NULL;
    while (fgets(line, sizeof line, f)) {
        unsigned x, y;
        if (line[0] == '#' || sscanf(line, "%x %x", &x, &y) != 2) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            *a = realloc(*a, (size_t)cap * sizeof **a);
            *b = realloc(*b, (size_t)cap * sizeof **b);
            if (!*a || !*b) abort();
        }
        (*a)[n] = x;
        (*b)[n] = y;
        n++;
    }
    fclose(f);
    return n;
}

/* Hand-derived: f16 has 10 fraction bits, exponent bias 15, smallest subnormal 2^-24, largest finite 65504. */
static void check_hand_table(TestCounts *tc) {
    const struct { float x; uint16_t h; const char *why; } cases[] = {
        {1.0f, 0x3C00, "one"},
        {-2.0f, 0xC000, "minus two"},
        {1.0f + 0x1p-11f, 0x3C00, "halfway 1 and 1+2^-10: tie to even (down)"},
        {1.0f + 3 * 0x1p-11f, 0x3C02, "halfway 1+2^-10 and 1+2^-9: tie to even (up)"},
        {1.0f + 0x1p-11f + 0x1p-23f, 0x3C01, "just above halfway rounds up"},
        {65504.0f, 0x7BFF, "largest finite"},
        {65519.0f, 0x7BFF, "below halfway to 65536 stays finite"},
        {65520.0f, 0x7C00, "halfway to 65536: tie to even is infinity"},
        {1e10f, 0x7C00, "overflow"},
        {-INFINITY, 0xFC00, "minus infinity"},
        {0x1p-14f, 0x0400, "smallest normal"},
        {0x1p-14f - 0x1p-25f, 0x0400, "halfway below the smallest normal rounds up into it (0x3FF is odd)"},
        {0x1p-24f, 0x0001, "smallest subnormal"},
        {0x1p-25f, 0x0000, "half the smallest subnormal: tie to even is zero"},
        {0x1p-25f + 0x1p-40f, 0x0001, "just above it rounds up"},
        {3 * 0x1p-25f, 0x0002, "1.5 x 2^-24: tie to even is 2 x 2^-24"},
        {5 * 0x1p-25f, 0x0002, "2.5 x 2^-24: tie to even is 2 x 2^-24"},
        {0x1p-26f, 0x0000, "a quarter of the smallest subnormal"},
        {-0.0f, 0x8000, "minus zero keeps its sign"},
        {0x1p-130f, 0x0000, "an f32 subnormal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = cpu_f32_to_f16(cases[i].x);
        CHECK(tc, h == cases[i].h, "%s: %a -> %04x, want %04x", cases[i].why, cases[i].x, h, cases[i].h);
    }
    CHECK(tc, kv_f16_to_f32(0x0001) == 0x1p-24f && kv_f16_to_f32(0x03FF) == 1023 * 0x1p-24f &&
                  kv_f16_to_f32(0x7BFF) == 65504.0f && kv_f16_to_f32(0x7C00) == INFINITY &&
                  f32_bits(kv_f16_to_f32(0x8000)) == 0x80000000u,
          "widening: subnormals, the largest finite, infinity, minus zero");
    CHECK(tc, isnan(kv_f16_to_f32(0x7E00)) && isnan(kv_f16_to_f32(0x7C01)), "NaN widens to NaN");
    uint16_t qnan = cpu_f32_to_f16(NAN);
    CHECK(tc, (qnan & 0x7C00) == 0x7C00 && (qnan & 0x3FF), "NaN narrows to NaN (%04x)", qnan);
}

static void check_numpy(TestCounts *tc) {
    uint32_t *a, *b;
    int n = read_pairs("tests/data/f16/f32_to_f16.txt", &a, &b);
    CHECK(tc, n > 8000, "tests/data/f16/f32_to_f16.txt: %d cases (run from the project root)", n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        uint16_t h = cpu_f32_to_f16(bits_f32(a[i]));
        if (h != b[i] && bad++ < 5) fprintf(stderr, "f32 %08x -> %04x, numpy %04x\n", a[i], h, b[i]);
    }
    CHECK(tc, !bad, "f32 -> f16 equals numpy's float16 on every case (%d of %d differ)", bad, n);
    free(a);
    free(b);
    n = read_pairs("tests/data/f16/f16_to_f32.txt", &a, &b);
    CHECK(tc, n > 5000, "tests/data/f16/f16_to_f32.txt: %d cases", n);
    bad = 0;
    for (int i = 0; i < n; i++) {
        uint32_t u = f32_bits(kv_f16_to_f32((uint16_t)a[i]));
        if (u != b[i] && bad++ < 5) fprintf(stderr, "f16 %04x -> %08x, numpy %08x\n", a[i], u, b[i]);
    }
    CHECK(tc, !bad, "f16 -> f32 equals numpy's on every case (%d of %d differ)", bad, n);
    free(a);
    free(b);
}

/* Every f16 value survives widening and narrowing; every SIMD level gives the portable bits in both
 * directions, at lengths that leave every tail size. */
static void check_exhaustive(TestCounts *tc) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float x = kv_f16_to_f32((uint16_t)h);
        if (isnan(x)) continue;
        bad += cpu_f32_to_f16(x) != h;
    }
    CHECK(tc, !bad, "f16 -> f32 -> f16 is the identity on all non-NaN bit patterns (%d differ)", bad);
    uint16_t *all = malloc(0x10000 * sizeof *all), *back = malloc(0x10000 * sizeof *back);
    float *ref = malloc(0x10000 * sizeof *ref), *got = malloc(0x10000 * sizeof *got);
    float *x = malloc(0x10000 * sizeof *x);
    if (!all || !back || !ref || !got || !x) abort();
    for (uint32_t h = 0; h < 0x10000; h++) all[h] = (uint16_t)h, ref[h] = kv_f16_to_f32((uint16_t)h);
    /* f32 inputs for narrowing: each f16 value nudged by a pseudo-random number of f32 ulps (both directions,
     * crossing ties), plus the values themselves */
    uint32_t state = 12345;
    for (uint32_t i = 0; i < 0x10000; i++) {
        state = state * 1664525u + 1013904223u;
        uint32_t u = f32_bits(ref[i]);
        int nudge = (int)(state >> 20) - 2048;
        x[i] = isfinite(ref[i]) && (i & 1) ? bits_f32(u + (uint32_t)nudge) : ref[i];
    }
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int li = 0; li < 3; li++) {
        CpuKernels kt;
        KvErr err = {{0}};
        if (cpu_kernels_init(&kt, levels[li], NULL, &err)) {
            SKIP(tc, "%s: not supported here (%s)", levels[li], err.msg);
            continue;
        }
        int lens[] = {0x10000, 1, 7, 8, 15, 16, 17, 33, 1000};
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            int n = lens[k], wbad = 0, nbad = 0;
            memset(got, 0xFF, 0x10000 * sizeof *got);
            kt.to_f32(got, all, (size_t)n);
            for (int i = 0; i < n; i++)
                wbad += isnan(ref[i]) ? !isnan(got[i]) : f32_bits(got[i]) != f32_bits(ref[i]);
            kt.to_f16(back, x, (size_t)n);
            for (int i = 0; i < n; i++) {
                uint16_t want = cpu_f32_to_f16(x[i]);
                int nan = (want & 0x7C00) == 0x7C00 && (want & 0x3FF);
                nbad += nan ? !((back[i] & 0x7C00) == 0x7C00 && (back[i] & 0x3FF)) : back[i] != want;
            }
            CHECK(tc, !wbad && !nbad, "%s, %d values: %d widened and %d narrowed differ from the portable converter",
                  levels[li], n, wbad, nbad);
        }
    }
    free(all);
    free(back);
    free(ref);
    free(got);
    free(x);
}

/* Fills an f32 cache with values that are not f16 values (so rounding matters) and an f16 cache with their
 * conversion; gathering either with the same keep-set, then converting the f32 one, gives the same bits. */
static void check_gather(TestCounts *tc) {
    enum { N = 2, K = 3, d = 8, L = 12 };
    KvErr err = {{0}};
    KvCache *f32, *f16;
    int made = kvcache_new(&f32, N, K, d, L, &err) == 0;
    made &= kvcache_new_elem(&f16, N, K, d, L, KV_ELEM_F16, &err) == 0;
    CHECK(tc, made, "%s", err.msg);
    if (!made) return;
    CHECK(tc, f16->elem == KV_ELEM_F16 && f32->elem == KV_ELEM_F32, "element types");
    CHECK(tc, f16->arena_bytes < f32->arena_bytes * 3 / 4, "f16 arena %zu bytes, f32 %zu", f16->arena_bytes,
          f32->arena_bytes);
    for (int h = 0; h < N * K; h++) {
        for (int j = 0; j < L; j++) {
            for (int i = 0; i < d; i++) {
                float k = (float)(h * 100 + j) + 0.1f * (float)i + 1e-3f, v = -k / 7.0f;
                f32->k[h][j * d + i] = k;
                f32->v[h][j * d + i] = v;
                kvcache_k16(f16, h)[j * d + i] = cpu_f32_to_f16(k);
                kvcache_v16(f16, h)[j * d + i] = cpu_f32_to_f16(v);
            }
            f32->pos[h][j] = f16->pos[h][j] = j;
        }
        f32->len[h] = f16->len[h] = L;
    }
    f32->n_pos = f16->n_pos = L;
    int counts[N * K];
    for (int h = 0; h < N * K; h++) counts[h] = 2 + h;
    KeepSet ks;
    CHECK(tc, keepset_init(&ks, N, K, counts, &err) == 0, "%s", err.msg);
    for (int h = 0; h < N * K; h++)
        for (int j = 0; j < counts[h]; j++) ks.positions[ks.offsets[h] + j] = (5 * j + h) % L; /* distinct: 5 is prime to L */
    for (int h = 0; h < N * K; h++) /* ascending per head */
        for (int a = 0; a < counts[h]; a++)
            for (int b = a + 1; b < counts[h]; b++) {
                int *p = ks.positions + ks.offsets[h];
                if (p[b] < p[a]) {
                    int t = p[a];
                    p[a] = p[b];
                    p[b] = t;
                }
            }
    KvCache *g32 = NULL, *g16 = NULL;
    CHECK(tc, kvcache_gather(&g32, f32, &ks, 3, &err) == 0 && kvcache_gather(&g16, f16, &ks, 3, &err) == 0, "%s",
          err.msg);
    if (!g32 || !g16) return;
    int same = g16->elem == KV_ELEM_F16 && g16->n_pos == L;
    for (int h = 0; h < N * K; h++) {
        same &= g16->len[h] == counts[h] && g16->cap[h] == counts[h] + 3;
        for (int j = 0; j < counts[h]; j++) {
            same &= g16->pos[h][j] == g32->pos[h][j];
            for (int i = 0; i < d; i++)
                same &= kvcache_k16(g16, h)[j * d + i] == cpu_f32_to_f16(g32->k[h][j * d + i]) &&
                        kvcache_v16(g16, h)[j * d + i] == cpu_f32_to_f16(g32->v[h][j * d + i]);
        }
    }
    CHECK(tc, same, "gathered f16 cache equals the gathered f32 cache converted");
    CHECK(tc, kvcache_bytes_used(g16, kvcache_elem_bytes(g16->elem)) * 2 == kvcache_bytes_used(g32, 4),
          "f16 bytes are half");
    /* gathering a gathered (head-variable) f16 cache moves bits again: keep each head's last entry */
    int ones[N * K];
    for (int h = 0; h < N * K; h++) ones[h] = 1;
    KeepSet last;
    CHECK(tc, keepset_init(&last, N, K, ones, &err) == 0, "%s", err.msg);
    for (int h = 0; h < N * K; h++) last.positions[h] = g32->pos[h][counts[h] - 1];
    KvCache *r32 = NULL, *r16 = NULL;
    CHECK(tc, kvcache_gather(&r32, g32, &last, 0, &err) == 0 && kvcache_gather(&r16, g16, &last, 0, &err) == 0, "%s",
          err.msg);
    if (!r32 || !r16) return;
    same = r16->elem == KV_ELEM_F16;
    for (int h = 0; h < N * K; h++)
        for (int i = 0; i < d; i++)
            same &= r16->len[h] == 1 && kvcache_k16(r16, h)[i] == cpu_f32_to_f16(r32->k[h][i]) &&
                    kvcache_v16(r16, h)[i] == cpu_f32_to_f16(r32->v[h][i]);
    CHECK(tc, same, "regathered f16 cache equals the regathered f32 cache converted");
    keepset_free(&last);
    kvcache_free(r32);
    kvcache_free(r16);
    KvCache *bad;
    CHECK(tc, kvcache_new_elem(&bad, N, K, d, L, (KvElem)7, &err) == -1 && strstr(err.msg, "element type"),
          "unknown element type: %s", err.msg);
    keepset_free(&ks);
    kvcache_free(f32);
    kvcache_free(f16);
    kvcache_free(g32);
    kvcache_free(g16);
}

int main(void) {
    TestCounts tc = {"test_cpu_f16", 0, 0, 0};
    check_hand_table(&tc);
    check_numpy(&tc);
    check_exhaustive(&tc);
    check_gather(&tc);
    return test_finish(&tc);
}
