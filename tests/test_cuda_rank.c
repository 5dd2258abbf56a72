/* test_cuda_rank.c — the device selection's rank key (policies/rank.h) orders exactly as the host's top-k and
 * sort (topk_stable, sort_desc_stable in policies/allocate.c): on random scores drawn from a few values (many
 * ties), with -0 and +0, infinities and NaN. Plain C: runs on every machine, GPU or not. */
#include <math.h>
#include <stdlib.h>

#include "../policies/policy_internal.h"
#include "../policies/rank.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static float draw(void) {
    static const float pool[] = {0.0f,     -0.0f,     1.0f, 0.5f,   0.25f,  -1.0f,
                                 INFINITY, -INFINITY, NAN,  1e-30f, -1e-30f, 3.0f};
    return next_u32() % 4 == 0 ? (float)(next_u32() % 1000) / 997.0f : pool[next_u32() % (sizeof pool / sizeof *pool)];
}

static int cmp_key_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

static void check_sort(TestCounts *tc) {
    KvErr err = {{0}};
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + (int)(next_u32() % 300);
        float *s = malloc(sizeof(float) * n);
        int *order = malloc(sizeof(int) * n);
        uint64_t *keys = malloc(sizeof(uint64_t) * n);
        for (int i = 0; i < n; i++) s[i] = draw();
        CHECK(tc, sort_desc_stable(s, n, order, &err) == 0, "%s", err.msg);
        for (int i = 0; i < n; i++) keys[i] = rank_key(s[i], (uint32_t)i);
        qsort(keys, (size_t)n, sizeof *keys, cmp_key_desc);
        int same = 1;
        for (int i = 0; i < n; i++) same &= (int)rank_key_index(keys[i]) == order[i];
        CHECK(tc, same, "sort of %d scores (trial %d)", n, trial);
        free(s);
        free(order);
        free(keys);
    }
}

static void check_topk(TestCounts *tc) {
    KvErr err = {{0}};
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + (int)(next_u32() % 300), k = (int)(next_u32() % (unsigned)(n + 1));
        float *s = malloc(sizeof(float) * n);
        int *top = malloc(sizeof(int) * (n + 1));
        unsigned char *host = calloc((size_t)n, 1);
        uint64_t *keys = malloc(sizeof(uint64_t) * n);
        for (int i = 0; i < n; i++) s[i] = draw();
        CHECK(tc, topk_stable(s, n, k, top, &err) == 0, "%s", err.msg);
        for (int i = 0; i < k; i++) host[top[i]] = 1;
        for (int i = 0; i < n; i++) keys[i] = rank_key(s[i], (uint32_t)i);
        qsort(keys, (size_t)n, sizeof *keys, cmp_key_desc);
        /* The device keeps every entry whose key is at least the k-th largest. */
        int same = 1;
        for (int i = 0; i < n; i++) same &= host[i] == (k > 0 && rank_key(s[i], (uint32_t)i) >= keys[k - 1]);
        CHECK(tc, same, "top %d of %d scores (trial %d)", k, n, trial);
        free(s);
        free(top);
        free(host);
        free(keys);
    }
}

static void check_specials(TestCounts *tc) {
    CHECK(tc, rank_key(0.0f, 3) == rank_key(-0.0f, 3), "rank_key(0.0f, 3) == rank_key(-0.0f, 3)");
    CHECK(tc, rank_key(NAN, 1) == rank_key(-INFINITY, 1), "rank_key(NAN, 1) == rank_key(-INFINITY, 1)");
    /* a tie goes to the lower index */
    CHECK(tc, rank_key(1.0f, 5) > rank_key(1.0f, 6), "rank_key(1.0f, 5) > rank_key(1.0f, 6)");
    CHECK(tc, rank_key(-1.0f, 0) < rank_key(0.0f, 9), "rank_key(-1.0f, 0) < rank_key(0.0f, 9)");
    CHECK(tc, rank_key(INFINITY, 9) > rank_key(3.4e38f, 0), "rank_key(INFINITY, 9) > rank_key(3.4e38f, 0)");
    CHECK(tc, rank_key(-INFINITY, 0) < rank_key(-3.4e38f, 9), "rank_key(-INFINITY, 0) < rank_key(-3.4e38f, 9)");
    CHECK(tc, rank_key_index(rank_key(2.0f, 12345)) == 12345, "rank_key_index(rank_key(2.0f, 12345)) == 12345");
}

int main(void) {
    TestCounts tc = {"test_cuda_rank", 0, 0, 0};
    check_sort(&tc);
    check_topk(&tc);
    check_specials(&tc);
    return test_finish(&tc);
}
