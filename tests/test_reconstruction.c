/* test_reconstruction.c — KVzip's reconstruction pass on the cpu backend (OBSERVES_RECONSTRUCTION): an observed
 * forward of new tokens on top of a cache that holds the context, whose entries kvcache_truncate then drops.
 *
 * On a synthetic 2-layer SmolLM2-135M (random weights, f32): the observation hands the new tokens' queries after
 * RoPE and the whole cache's keys, the same as the last rows of one observed prefill of the context and the new
 * tokens together (allowed 1e-4 of the largest |value|, as the rows go through other GEMM shapes; 0 measured here,
 * 2026-12-06); after the truncation the
 * cache is the context's again, so a question fed on it gives the logits of a cache that never saw the pass, bit for
 * bit. prefill_run with kvzip (twice, as two budgets: one state, one pass) beside snapkv and full (the SmolLM2
 * GGUF's tokenizer for the prompts) leaves snapkv's keep-set and the full cache as they are without kvzip, and
 * kvzip's keep-set holds the sinks of every head and numel - int(numel * 0.8) entries at 20%. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/backend.h"
#include "../engine/chat.h"
#include "../runs/prepare.h"
#include "test.h"

#define SMOLLM2_GGUF "models/SmolLM2-135M-Instruct.Q4_1.gguf"

typedef struct {
    int w, L, H, K, d, layers_seen;
    float *q;    /* [N][H][w][d] */
    float *keys; /* [N][K][L][d] */
} Captured;

static int capture(void *user, Observation *obs, KvErr *err) {
    Captured *c = user;
    (void)err;
    if (obs->w != c->w || obs->L != c->L || !obs->q_win || !obs->keys) return 0;
    memcpy(c->q + (size_t)obs->layer * c->H * c->w * c->d, obs->q_win, sizeof(float) * (size_t)c->H * c->w * c->d);
    for (int k = 0; k < c->K; k++)
        memcpy(c->keys + ((size_t)obs->layer * c->K + k) * c->L * c->d, obs->keys[k],
               sizeof(float) * (size_t)c->L * c->d);
    c->layers_seen++;
    return 0;
}

/* The largest |a - b| relative to the largest |b| over n values. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double diff = 0.0, top = 1e-30;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        top = fmax(top, fabs((double)b[i]));
    }
    return diff / top;
}

static void test_pass(TestCounts *tc, Backend *be, const Model *m) {
    const ModelConfig *c = &m->cfg;
    enum { L0 = 90, T = 24, Q = 7 };
    int ids[L0 + T], question[Q];
    for (int i = 0; i < L0 + T; i++) ids[i] = (i * 7919 + 13) % 5000;
    for (int i = 0; i < Q; i++) question[i] = (i * 104729 + 5) % 5000;
    const size_t nq = (size_t)c->n_layers * c->n_heads * T * c->head_dim;
    const size_t nk = (size_t)c->n_layers * c->n_kv_heads * (L0 + T) * c->head_dim;
    Captured on_top = {T, L0 + T, c->n_heads, c->n_kv_heads, c->head_dim, 0, malloc(sizeof(float) * nq),
                       malloc(sizeof(float) * nk)};
    Captured together = on_top;
    together.q = malloc(sizeof(float) * nq);
    together.keys = malloc(sizeof(float) * nk);
    float *plain = malloc(sizeof(float) * c->vocab_size), *after = malloc(sizeof(float) * c->vocab_size);
    KvCache *a = NULL, *b = NULL, *joint = NULL, *view = NULL;
    KvErr err = {{0}};
    ObserveHook top_hook = {.window = T, .on_layer = capture, .user = &on_top};
    ObserveHook joint_hook = {.window = T, .on_layer = capture, .user = &together};
    int ok = on_top.q && on_top.keys && together.q && together.keys && plain && after &&
             !be->cache_new(be, &a, L0 + Q, &err) && !be->cache_new(be, &b, L0 + T, &err) &&
             !be->cache_new(be, &joint, L0 + T, &err) &&
             !be->forward(be, &a, 1, ids, L0, NULL, NULL, NULL, &err) &&
             !be->forward(be, &a, 1, question, Q, plain, NULL, NULL, &err) &&
             !be->forward(be, &b, 1, ids, L0, NULL, NULL, NULL, &err) &&
             !be->forward(be, &b, 1, ids + L0, T, NULL, &top_hook, NULL, &err) &&
             !be->forward(be, &joint, 1, ids, L0 + T, NULL, &joint_hook, NULL, &err);
    CHECK(tc, ok, "forwards: %s", err.msg);
    if (ok) {
        CHECK(tc, on_top.layers_seen == c->n_layers && together.layers_seen == c->n_layers,
              "observed layers: %d on top of the context, %d in one prefill (want %d)", on_top.layers_seen,
              together.layers_seen, c->n_layers);
        double dq = rel_diff(on_top.q, together.q, nq), dk = rel_diff(on_top.keys, together.keys, nk);
        CHECK(tc, dq <= 1e-4 && dk <= 1e-4, "the pass's queries and keys differ from one prefill's by %.3g, %.3g", dq,
              dk);
        printf("queries and keys on top of the context vs one prefill: %.3g, %.3g of the largest\n", dq, dk);
        /* the pass's entries dropped: the cache is the context's, and a question on it the plain one's */
        CHECK(tc, kvcache_truncate(b, L0, &err) == 0 && b->n_pos == L0 && b->len[0] == L0, "truncate: %s", err.msg);
        ok = !be->forward(be, &b, 1, question, Q, after, NULL, NULL, &err);
        CHECK(tc, ok && !memcmp(plain, after, sizeof(float) * c->vocab_size),
              "the question's logits after the pass differ from a cache that never saw it%s%s", ok ? "" : ": ",
              ok ? "" : err.msg);
        CHECK(tc, kvcache_truncate(b, L0 + Q + 1, &err) == -1 && strstr(err.msg, "fewer than"),
              "truncating past the held entries: %s", err.msg);
        KeepSet all = {0};
        CHECK(tc, keepset_full(&all, c->n_layers, c->n_kv_heads, L0, &err) == 0 &&
                      kvcache_view(&view, a, &all, 4, &err) == 0 && kvcache_truncate(view, L0, &err) == -1 &&
                      strstr(err.msg, "view"),
              "truncating a view: %s", err.msg);
        keepset_free(&all);
    }
    kvcache_free(view);
    be->cache_free(be, a);
    be->cache_free(be, b);
    be->cache_free(be, joint);
    free(on_top.q);
    free(on_top.keys);
    free(together.q);
    free(together.keys);
    free(plain);
    free(after);
}

static int same_keepset(const KeepSet *x, const KeepSet *y) {
    return x->total == y->total && x->n_layers == y->n_layers && x->n_kv_heads == y->n_kv_heads &&
           !memcmp(x->counts, y->counts, sizeof(int) * (size_t)x->n_layers * x->n_kv_heads) &&
           !memcmp(x->positions, y->positions, sizeof(int) * (size_t)x->total);
}

static void test_prefill(TestCounts *tc, Backend *be, Model *m) {
    if (access(SMOLLM2_GGUF, R_OK)) {
        SKIP(tc, "%s is absent: prefill_run with kvzip not run", SMOLLM2_GGUF);
        return;
    }
    KvErr err = {{0}};
    Tokenizer *tok = NULL;
    CHECK(tc, tokenizer_load(&tok, SMOLLM2_GGUF, &err) == 0, "%s", err.msg);
    if (!tok) return;
    const ModelConfig *c = &m->cfg;
    PrepareEnv env = {m, tok, be, 0, 0, NULL, 0, CHAT_SMOLLM2};
    TokenIds ctx = {0};
    /* the SmolLM2 chat prefix, then 150 context ids */
    ChatSplit split = {0};
    int rc = chat_split(CHAT_SMOLLM2, "", "x", "q", "", &split, &err);
    size_t cut = rc ? 0 : strlen(split.context_text) - 1;
    if (!rc) rc = tokenizer_encode(tok, split.context_text, cut, 1, &ctx, &err);
    for (int i = 0; !rc && i < 150; i++) rc = ids_push(&ctx, (i * 7919 + 13) % 5000, &err);
    chat_split_free(&split);
    CHECK(tc, rc == 0, "%s", err.msg);
    PolicyConfig snap, zip, full;
    policy_config(&snap, "snapkv", NULL, &err);
    policy_config(&zip, "kvzip", NULL, &err);
    policy_config(&full, "full", NULL, &err);
    /* kvzip twice, as a sweep's two budgets of it: one state, one reconstruction pass */
    const PolicyConfig *alone[] = {&snap, &full}, *mixed[] = {&snap, &zip, &full, &zip};
    Prefill p1 = {0}, p2 = {0};
    Budget b = {0.2, 0};
    KeepSet s1 = {0}, s2 = {0}, z = {0};
    int ok = !rc && prefill_run(&p1, &env, &ctx, alone, 2, 8, &err) == 0 &&
             prefill_run(&p2, &env, &ctx, mixed, 4, 8, &err) == 0;
    CHECK(tc, ok, "prefill_run: %s", err.msg);
    if (ok) {
        CHECK(tc, p2.n_slots == 2 && p2.slot_of[1] == p2.slot_of[3], "kvzip's two variants in %d slots of %d",
              p2.slot_of[1] == p2.slot_of[3] ? 1 : 2, p2.n_slots);
        ok = !prefill_select(&p1, 0, &b, &s1, &err) && !prefill_select(&p2, 0, &b, &s2, &err) &&
             !prefill_select(&p2, 1, &b, &z, &err);
        CHECK(tc, ok, "select: %s", err.msg);
        CHECK(tc, ok && same_keepset(&s1, &s2), "snapkv's keep-set changes beside kvzip");
        CHECK(tc, p2.cache->n_pos == ctx.n && p2.cache->len[0] == ctx.n && p1.cache->n_pos == ctx.n,
              "the full cache after the reconstruction: %d entries, position %d (context %d)", p2.cache->len[0],
              p2.cache->n_pos, ctx.n);
        size_t head_bytes = sizeof(float) * (size_t)ctx.n * c->head_dim;
        int same_rows = 1;
        for (int i = 0; i < c->n_layers * c->n_kv_heads; i++)
            same_rows &= !memcmp(p1.cache->k[i], p2.cache->k[i], head_bytes) &&
                         !memcmp(p1.cache->v[i], p2.cache->v[i], head_bytes);
        CHECK(tc, same_rows, "the full cache's rows change with a reconstruction pass");
        long long numel = (long long)c->n_layers * c->n_kv_heads * ctx.n;
        int sinks = 1;
        for (int h = 0; ok && h < c->n_layers * c->n_kv_heads; h++)
            for (int j = 0; j < 4; j++) sinks &= z.counts[h] > j && z.positions[z.offsets[h] + j] == j;
        CHECK(tc, ok && z.total == numel - (long long)((double)numel * 0.8) && sinks,
              "kvzip keeps %d entries (want %lld), sinks in every head %d", z.total,
              numel - (long long)((double)numel * 0.8), sinks);
        CHECK(tc, p2.reconstruction_ms > 0 && p1.reconstruction_ms == 0 &&
                      p2.slots[p2.slot_of[1]].ms >= p2.reconstruction_ms,
              "the reconstruction pass's time: %.3f ms (slot %.3f ms)", p2.reconstruction_ms,
              p2.slots[p2.slot_of[1]].ms);
    }
    keepset_free(&s1);
    keepset_free(&s2);
    keepset_free(&z);
    prefill_free(&p1);
    prefill_free(&p2);
    /* without a tokenizer for the prompts kvzip fails alone, with a line that says so */
    env.tok = NULL;
    ok = !rc && prefill_run(&p2, &env, &ctx, mixed, 4, 8, &err) == 0;
    CHECK(tc, ok && prefill_select(&p2, 1, &b, &z, &err) == -1 && strstr(err.msg, "no tokenizer") &&
                  prefill_select(&p2, 0, &b, &s1, &err) == 0,
          "kvzip without a tokenizer: %s", err.msg);
    keepset_free(&s1);
    keepset_free(&z);
    if (ok) prefill_free(&p2);
    ids_free(&ctx);
    tokenizer_free(tok);
}

int main(void) {
    TestCounts tc = {"test_reconstruction", 0, 0, 0};
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    CHECK(&tc, model_load(&m, "synthetic:smollm2-135m:layers=2:seed=7", &err) == 0, "%s", err.msg);
    CHECK(&tc, m && backend_open(&be, "cpu", m, NULL, &err) == 0, "%s", err.msg);
    CHECK(&tc, (backend_observes("cpu") & OBSERVES_RECONSTRUCTION) &&
                   !(backend_observes("cuda") & OBSERVES_RECONSTRUCTION),
          "the cpu backend observes a reconstruction pass, cuda does not");
    if (be) {
        test_pass(&tc, be, m);
        test_prefill(&tc, be, m);
    }
    backend_close(be);
    if (m) model_free(m);
    return test_finish(&tc);
}
