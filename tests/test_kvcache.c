/* test_kvcache.c — the head-variable KV cache: arena layout, gather from keep-sets (uniform and
 * head-variable sources), views that share the kept rows of their base, positions, bytes used, and the
 * errors of bad keep-sets. Hand-derived cases. */
#include <stdint.h>
#include <string.h>

#include "../engine/kvcache.h"
#include "test.h"

/* Fills a uniform cache of L entries with k = 1000*head + 10*pos + i and v = -k, pos = index. */
static void fill(KvCache *c, int L) {
    for (int h = 0; h < c->n_layers * c->n_kv_heads; h++) {
        for (int j = 0; j < L; j++) {
            for (int i = 0; i < c->head_dim; i++) {
                c->k[h][j * c->head_dim + i] = (float)(1000 * h + 10 * j + i);
                c->v[h][j * c->head_dim + i] = -(float)(1000 * h + 10 * j + i);
            }
            c->pos[h][j] = j;
        }
        c->len[h] = L;
    }
    c->n_pos = L;
}

int main(void) {
    TestCounts tc = {"test_kvcache", 0, 0, 0};
    KvErr err = {{0}};
    enum { N = 2, K = 3, d = 4, L = 10 };
    KvCache *full;
    CHECK(&tc, kvcache_new(&full, N, K, d, L, &err) == 0, "%s", err.msg);
    fill(full, L);
    CHECK(&tc, kvcache_bytes_used(full, 4) == (size_t)N * K * L * d * 2 * 4, "bytes %zu", kvcache_bytes_used(full, 4));
    /* heads do not overlap and rows are 64-byte aligned */
    CHECK(&tc, ((uintptr_t)full->k[1] % 64) == 0 && full->k[1] >= full->k[0] + L * d, "head layout");

    /* head-variable keep-set: head h keeps h+1 entries, the last h+1 positions but one */
    int counts[N * K];
    for (int h = 0; h < N * K; h++) counts[h] = h + 1;
    KeepSet ks;
    CHECK(&tc, keepset_init(&ks, N, K, counts, &err) == 0, "%s", err.msg);
    for (int h = 0; h < N * K; h++)
        for (int j = 0; j < counts[h]; j++) ks.positions[ks.offsets[h] + j] = L - 2 - counts[h] + 1 + j;
    KvCache *g;
    CHECK(&tc, kvcache_gather(&g, full, &ks, 5, &err) == 0, "%s", err.msg);
    int ok = 1;
    for (int h = 0; h < N * K; h++) {
        ok &= g->len[h] == counts[h] && g->cap[h] == counts[h] + 5;
        for (int j = 0; j < counts[h]; j++) {
            int p = L - 2 - counts[h] + 1 + j;
            ok &= g->pos[h][j] == p && g->k[h][j * d + 3] == (float)(1000 * h + 10 * p + 3) &&
                  g->v[h][j * d] == -(float)(1000 * h + 10 * p);
        }
    }
    CHECK(&tc, ok, "gathered entries, positions and capacities");
    CHECK(&tc, g->n_pos == L, "n_pos %d continues from the context length", g->n_pos);
    CHECK(&tc, kvcache_bytes_used(g, 2) == (size_t)(1 + 2 + 3 + 4 + 5 + 6) * d * 2 * 2, "variable bytes %zu",
          kvcache_bytes_used(g, 2));
    CHECK(&tc, g->arena_bytes < full->arena_bytes + 4096, "gathered arena %zu is not larger than needed", g->arena_bytes);

    /* a view of the same keep-set: the same entries in the same order, read in place (the base's rows, no
     * copy), positions its own; its own rows follow the shared ones */
    KvCache *view;
    CHECK(&tc, kvcache_view(&view, full, &ks, 5, &err) == 0, "%s", err.msg);
    ok = view->base == full;
    for (int h = 0; h < N * K; h++) {
        ok &= view->len[h] == counts[h] && view->cap[h] == counts[h] + 5 && kvcache_n_shared(view, h) == counts[h];
        for (int j = 0; j < counts[h]; j++)
            ok &= view->pos[h][j] == g->pos[h][j] && !memcmp(kvcache_key(view, h, j), g->k[h] + j * d, sizeof(float) * d) &&
                  !memcmp(kvcache_value(view, h, j), g->v[h] + j * d, sizeof(float) * d) &&
                  kvcache_key(view, h, j) == full->k[h] + (size_t)g->pos[h][j] * d;
        ok &= kvcache_key(view, h, counts[h]) == view->k[h] && kvcache_value(view, h, counts[h] + 1) == view->v[h] + d;
    }
    CHECK(&tc, ok, "view entries equal the gathered ones and are the base's rows");
    CHECK(&tc, view->n_pos == L, "view n_pos %d continues from the context length", view->n_pos);
    /* gathering a view copies its rows out (kept positions looked up as in any cache) */
    KvCache *from_view, *v2;
    CHECK(&tc, kvcache_gather(&from_view, view, &ks, 0, &err) == 0, "%s", err.msg);
    ok = 1;
    for (int h = 0; h < N * K; h++) ok &= !memcmp(from_view->k[h], g->k[h], sizeof(float) * counts[h] * d);
    CHECK(&tc, ok, "a gather of a view copies the shared rows");
    CHECK(&tc, kvcache_view(&v2, view, &ks, 0, &err) == -1 && strstr(err.msg, "itself a view"), "view of a view: %s",
          err.msg);
    kvcache_free(from_view);
    kvcache_free(view);

    /* gathering from a head-variable cache looks positions up, not indices: keep the last entry of each head */
    int ones[N * K];
    for (int h = 0; h < N * K; h++) ones[h] = 1;
    KeepSet last;
    CHECK(&tc, keepset_init(&last, N, K, ones, &err) == 0, "%s", err.msg);
    for (int h = 0; h < N * K; h++) last.positions[h] = L - 2;
    KvCache *g2;
    CHECK(&tc, kvcache_gather(&g2, g, &last, 0, &err) == 0, "%s", err.msg);
    ok = 1;
    for (int h = 0; h < N * K; h++) ok &= g2->len[h] == 1 && g2->k[h][0] == (float)(1000 * h + 10 * (L - 2));
    CHECK(&tc, ok, "second gather by position");
    kvcache_free(g2);

    /* errors: a position the cache does not hold, out of order, wrong shape, too many entries */
    last.positions[2] = L - 1; /* head 2 of g holds positions 6..8 */
    CHECK(&tc, kvcache_gather(&g2, g, &last, 0, &err) == -1 && strstr(err.msg, "position 9 is not in the cache"),
          "missing position: %s", err.msg);
    ks.positions[ks.offsets[3] + 1] = ks.positions[ks.offsets[3]];
    CHECK(&tc, kvcache_gather(&g2, full, &ks, 0, &err) == -1 && strstr(err.msg, "ascending"), "order: %s", err.msg);
    KeepSet wrong;
    CHECK(&tc, keepset_full(&wrong, N, K + 1, 3, &err) == 0, "%s", err.msg);
    CHECK(&tc, kvcache_gather(&g2, full, &wrong, 0, &err) == -1 && strstr(err.msg, "does not match"), "shape: %s", err.msg);
    keepset_free(&wrong);
    CHECK(&tc, keepset_full(&wrong, N, K, L + 1, &err) == 0, "%s", err.msg);
    CHECK(&tc, kvcache_gather(&g2, full, &wrong, 0, &err) == -1 && strstr(err.msg, "holds 10"), "count: %s", err.msg);
    CHECK(&tc, kvcache_view(&g2, full, &wrong, 0, &err) == -1 && strstr(err.msg, "kvcache_view") && strstr(err.msg, "holds 10"),
          "view count: %s", err.msg);
    keepset_free(&wrong);
    CHECK(&tc, kvcache_new(&g2, N, K, d, 0, &err) == -1 && strstr(err.msg, "capacity"), "zero capacity: %s", err.msg);

    keepset_free(&ks);
    keepset_free(&last);
    kvcache_free(g);
    kvcache_free(full);
    return test_finish(&tc);
}
