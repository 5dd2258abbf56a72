/* test_cuda_gather.c — the head-variable cache arithmetic of the CUDA backend (engine/cuda/gather_plan.h),
 * emulated on the host: segment starts from capacities, and the row plan of a gather, applied to host arrays
 * standing in for the device arena. Two gathers in a row (the second from a head-variable cache with appended
 * tokens) must land every kept entry's row at its head's segment, in keep-set order, and a position the cache
 * no longer holds must be refused with a message. Exact (integer) comparisons. */
#include <stdlib.h>
#include <string.h>

#include "../engine/cuda/gather_plan.h"
#include "test.h"

enum { N = 2, K = 3, NK = N * K, D = 4, CTX = 10 };

/* A host stand-in for a device cache: rows of D floats, head i's segment at row0[i]. */
typedef struct {
    KvCache c;
    int len[NK], cap[NK], *pos[NK];
    long long row0[NK];
    float *rows;   /* [total rows][D] */
    int *pos_store;
} HostCache;

static float content(int head, int position, int col) { return (float)(head * 1000 + position * 10 + col); }

static void cache_make(HostCache *h, const int *caps) {
    memset(h, 0, sizeof *h);
    long long rows = cache_row_starts(caps, NK, h->row0);
    h->rows = calloc((size_t)rows * D, sizeof(float));
    h->pos_store = calloc((size_t)rows, sizeof(int));
    for (int i = 0; i < NK; i++) {
        h->cap[i] = caps[i];
        h->pos[i] = h->pos_store + h->row0[i];
    }
    h->c.n_layers = N, h->c.n_kv_heads = K, h->c.head_dim = D;
    h->c.len = h->len, h->c.cap = h->cap, h->c.pos = h->pos;
}

static void cache_append(HostCache *h, int i, int position) {
    float *r = h->rows + (size_t)(h->row0[i] + h->len[i]) * D;
    for (int c = 0; c < D; c++) r[c] = content(i, position, c);
    h->pos[i][h->len[i]++] = position;
}

static void cache_drop(HostCache *h) {
    free(h->rows);
    free(h->pos_store);
}

static void keep_make(KeepSet *ks, const int *counts, const int *positions) {
    memset(ks, 0, sizeof *ks);
    ks->n_layers = N, ks->n_kv_heads = K;
    ks->counts = malloc(NK * sizeof(int));
    ks->offsets = malloc(NK * sizeof(int));
    for (int i = 0; i < NK; i++) {
        ks->counts[i] = counts[i];
        ks->offsets[i] = ks->total;
        ks->total += counts[i];
    }
    ks->positions = malloc((size_t)(ks->total ? ks->total : 1) * sizeof(int));
    memcpy(ks->positions, positions, (size_t)ks->total * sizeof(int));
}

static void keep_drop(KeepSet *ks) {
    free(ks->counts);
    free(ks->offsets);
    free(ks->positions);
}

/* Plans and applies a gather from src into a new cache with `extra` spare entries per head, then checks
 * every row and position; returns 0 when the plan was refused (err filled). */
static int gather_check(TestCounts *tc, const HostCache *src, const KeepSet *ks, int extra, HostCache *dst,
                        KvErr *err) {
    int caps[NK];
    for (int i = 0; i < NK; i++) caps[i] = ks->counts[i] + extra;
    cache_make(dst, caps);
    long long *plan = malloc(2 * (size_t)(ks->total ? ks->total : 1) * sizeof(long long));
    if (gather_plan(&src->c, src->row0, ks, dst->row0, plan, plan + ks->total, dst->c.pos, err)) {
        free(plan);
        return 0;
    }
    for (int e = 0; e < ks->total; e++) /* what k_gather_rows does */
        memcpy(dst->rows + plan[ks->total + e] * D, src->rows + plan[e] * D, D * sizeof(float));
    free(plan);
    int bad = 0;
    for (int i = 0; i < NK; i++) {
        dst->len[i] = ks->counts[i];
        for (int j = 0; j < ks->counts[i]; j++) {
            int p = ks->positions[ks->offsets[i] + j];
            bad += dst->pos[i][j] != p;
            for (int c = 0; c < D; c++) bad += dst->rows[(dst->row0[i] + j) * D + c] != content(i, p, c);
        }
    }
    CHECK(tc, bad == 0, "%d wrong rows or positions after the gather", bad);
    return 1;
}

int main(void) {
    TestCounts tc = {"test_cuda_gather", 0, 0, 0};
    KvErr err = {{0}};

    int caps_full[NK], starts_ok = 1;
    for (int i = 0; i < NK; i++) caps_full[i] = CTX + i; /* unequal segments */
    long long row0[NK];
    long long total = cache_row_starts(caps_full, NK, row0);
    for (int i = 1; i < NK; i++) starts_ok &= row0[i] == row0[i - 1] + caps_full[i - 1];
    CHECK(&tc, row0[0] == 0 && starts_ok && total == row0[NK - 1] + caps_full[NK - 1], "segment starts");

    /* The prefill cache: every head holds positions 0..CTX-1. */
    HostCache full, g1, g2, g3;
    cache_make(&full, caps_full);
    for (int i = 0; i < NK; i++)
        for (int p = 0; p < CTX; p++) cache_append(&full, i, p);

    /* Gather 1: head-variable counts, one head empty. */
    const int counts1[NK] = {0, 3, 10, 1, 5, 2};
    const int pos1[] = {1, 4, 9, /**/ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, /**/ 7, /**/ 0, 2, 4, 6, 8, /**/ 3, 9};
    KeepSet ks1;
    keep_make(&ks1, counts1, pos1);
    CHECK(&tc, gather_check(&tc, &full, &ks1, 2, &g1, &err), "gather 1 refused: %s", err.msg);
    for (int i = 0; i < NK; i++) { /* the question: two tokens appended to every head */
        cache_append(&g1, i, CTX);
        cache_append(&g1, i, CTX + 1);
    }

    /* Gather 2, from the head-variable cache: kept positions include appended ones. */
    const int counts2[NK] = {2, 2, 3, 1, 0, 3};
    const int pos2[] = {10, 11, /**/ 4, 11, /**/ 0, 5, 10, /**/ 11, /**/ /**/ 3, 9, 10};
    KeepSet ks2;
    keep_make(&ks2, counts2, pos2);
    CHECK(&tc, gather_check(&tc, &g1, &ks2, 0, &g2, &err), "gather 2 refused: %s", err.msg);
    cache_drop(&g2);

    /* A position evicted by gather 1 (head 1 kept 1, 4, 9) cannot be gathered again. */
    const int pos3[] = {10, 11, /**/ 4, 5, /**/ 0, 5, 10, /**/ 11, /**/ /**/ 3, 9, 10};
    KeepSet ks3;
    keep_make(&ks3, counts2, pos3);
    memset(&err, 0, sizeof err);
    CHECK(&tc, !gather_check(&tc, &g1, &ks3, 0, &g3, &err), "gather of an evicted position succeeded");
    CHECK(&tc, strstr(err.msg, "position 5 is not in layer 0 kv-head 1") != NULL, "message: %s", err.msg);
    cache_drop(&g3);

    keep_drop(&ks1);
    keep_drop(&ks2);
    keep_drop(&ks3);
    cache_drop(&g1);
    cache_drop(&full);
    return test_finish(&tc);
}
