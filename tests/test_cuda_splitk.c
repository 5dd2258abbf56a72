/* test_cuda_splitk.c — the split-K decode arithmetic of the CUDA backend (engine/cuda/splitk.h), emulated in
 * plain C so it is checked on machines without a GPU: splits cover every key of every head exactly once
 * (heads shorter than the longest get empty splits), the per-(sequence, layer, kv-head) table slots are a
 * bijection, and merging the partials equals a direct softmax-weighted sum (double reference, tolerance 1e-5
 * relative to the output's scale; f32 partials). The decode block's lane teams (splitk_team): for every head
 * dim the backend accepts, a team is a power of two that fits in a warp and covers the row's 16-byte chunks; the
 * kernel's butterfly (shuffle xor team/2 .. 1) leaves every lane with its own team's sum; the score and P V
 * loops read every (key, chunk) of a split exactly once; and the block's shared memory stays under the 48 KiB
 * static limit for groups up to 8. The GPU check compares the kernels themselves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/cuda/splitk.h"
#include "test.h"

/* The larger of two errors, NaN when either is (fmax and a plain comparison would let a NaN slip through). */
static double worse(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

static double uniform(unsigned long long *s) { /* [-1, 1) */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0;
}

/* One head of n keys inside a launch sized for max_n: partials as k_decode_split leaves them, then merged. */
static void check_head(TestCounts *tc, int n, int max_n, int d, unsigned long long seed) {
    int S = splitk_count(max_n);
    double *z = malloc(sizeof(double) * n), *v = malloc(sizeof(double) * (size_t)n * d);
    float *m = malloc(sizeof(float) * S), *l = malloc(sizeof(float) * S), *o = malloc(sizeof(float) * (size_t)S * d);
    for (int j = 0; j < n; j++) {
        z[j] = 8.0 * uniform(&seed); /* logits spread enough that the max matters */
        for (int c = 0; c < d; c++) v[(size_t)j * d + c] = uniform(&seed);
    }
    int covered = 0, empty = 0;
    for (int s = 0; s < S; s++) {
        int j0, j1;
        splitk_range(s, n, &j0, &j1);
        if (j1 <= j0) { /* what the kernel writes for an empty split */
            m[s] = -INFINITY;
            l[s] = 0.0f;
            for (int c = 0; c < d; c++) o[(size_t)s * d + c] = 0.0f;
            empty++;
            continue;
        }
        CHECK(tc, j0 == covered, "split %d starts at %d, expected %d", s, j0, covered);
        covered = j1;
        float mx = -INFINITY, sum = 0.0f;
        for (int j = j0; j < j1; j++) mx = fmaxf(mx, (float)z[j]);
        for (int c = 0; c < d; c++) o[(size_t)s * d + c] = 0.0f;
        for (int j = j0; j < j1; j++) {
            float p = expf((float)z[j] - mx);
            sum += p;
            for (int c = 0; c < d; c++) o[(size_t)s * d + c] += p * (float)v[(size_t)j * d + c];
        }
        m[s] = mx;
        l[s] = sum;
    }
    CHECK(tc, covered == n, "splits of a %d-key head cover %d keys", n, covered);
    CHECK(tc, empty == S - splitk_count(n), "%d empty splits for n=%d of max %d", empty, n, max_n);

    double zmax = -INFINITY, den = 0.0, worst = 0.0;
    for (int j = 0; j < n; j++) zmax = fmax(zmax, z[j]);
    for (int j = 0; j < n; j++) den += exp(z[j] - zmax);
    for (int c = 0; c < d; c++) {
        double ref = 0.0;
        for (int j = 0; j < n; j++) ref += exp(z[j] - zmax) / den * v[(size_t)j * d + c];
        double got = splitk_merge(m, l, o + c, S, d);
        worst = worse(worst, fabs(got - ref));
    }
    CHECK(tc, worst <= 1e-5, "n=%d max_n=%d: merged output off by %g", n, max_n, worst);
    free(z);
    free(v);
    free(m);
    free(l);
    free(o);
}

/* The decode kernel's thread roles for head dim d, emulated: returns the number of problems found. */
static int check_teams(int d) {
    int team = splitk_team(d), n_slots = SPLITK_THREADS / team, vecs = d / 8, bad = 0;
    if (team < vecs || team > 32 || 32 % team != 0 || (team & (team - 1)) != 0) return 1;
    for (int G = 1; G <= 8; G++) bad += splitk_smem_floats(G, d) * 4 > 48 * 1024;
    /* Butterfly within each warp: lane value = lane id; each lane must end with its team's sum. */
    for (int w = 0; w < SPLITK_THREADS / 32; w++) {
        long val[32], next[32];
        for (int lane = 0; lane < 32; lane++) val[lane] = w * 32 + lane;
        for (int o = team / 2; o > 0; o >>= 1) {
            for (int lane = 0; lane < 32; lane++) next[lane] = val[lane] + val[lane ^ o];
            memcpy(val, next, sizeof val);
        }
        for (int lane = 0; lane < 32; lane++) {
            int t = w * 32 + lane, first = t / team * team;
            long want = 0;
            for (int u = first; u < first + team; u++) want += u;
            bad += val[lane] != want;
        }
    }
    /* Coverage of a split of nk keys by (slot, chunk) in both loops of the kernel. */
    const int nks[] = {1, 7, 100, SPLITK_KEYS - 1, SPLITK_KEYS};
    for (size_t n = 0; n < sizeof nks / sizeof nks[0]; n++) {
        int nk = nks[n];
        int *hits = calloc((size_t)nk * vecs, sizeof(int)), *hits_pv = calloc((size_t)nk * vecs, sizeof(int));
        for (int t = 0; t < SPLITK_THREADS; t++) {
            int slot = t / team, c8 = t % team;
            if (c8 >= vecs) continue;
            for (int i0 = 0; i0 < nk; i0 += n_slots)
                if (i0 + slot < nk) hits[(i0 + slot) * vecs + c8]++;
            for (int i = slot; i < nk; i += n_slots) hits_pv[i * vecs + c8]++;
        }
        for (int i = 0; i < nk * vecs; i++) bad += hits[i] != 1 || hits_pv[i] != 1;
        free(hits);
        free(hits_pv);
    }
    return bad;
}

int main(void) {
    TestCounts tc = {"test_cuda_splitk", 0, 0, 0};
    for (int d = 8; d <= 256; d += 8) CHECK(&tc, check_teams(d) == 0, "decode lane teams at head dim %d", d);
    /* Lengths on both sides of the split size, one far past it, each in a launch sized for a longer head. */
    const int lens[] = {1, 2, 255, 256, 257, 511, 512, 700, 1100, 4097};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        check_head(&tc, lens[i], lens[i], 16, 1000 + i);
        check_head(&tc, lens[i], 4097, 16, 2000 + i);
    }
    CHECK(&tc, splitk_count(1) == 1 && splitk_count(SPLITK_KEYS) == 1 && splitk_count(SPLITK_KEYS + 1) == 2,
          "splitk_count at the boundaries");

    /* Table slots: every (sequence, layer, kv-head) gets its own slot in [0, B*N*K). */
    enum { B = 3, N = 4, K = 5 };
    int seen[B * N * K];
    memset(seen, 0, sizeof seen);
    int ok = 1;
    for (int b = 0; b < B; b++)
        for (int l = 0; l < N; l++)
            for (int k = 0; k < K; k++) {
                int s = head_slot(b, l, k, N, K);
                if (s < 0 || s >= B * N * K || seen[s]++) ok = 0;
            }
    CHECK(&tc, ok, "head_slot is not a bijection onto [0, B*N*K)");
    return test_finish(&tc);
}
