/* forward_checks.h — checks of the CPU forward shared by test_forward.c (the exact f32 cache),
 * test_forward_f16.c (the opt-in f16 cache) and test_qwen.c (Qwen2.5, groups of 7): a prefill split into pieces
 * against one prefill, sequences of different cache lengths decoded as one batch against each run alone, views
 * against gathered copies, a keep-all gather against the full cache, and the observation hook against the trace.
 * Header-only, static inline (each test uses a part), as test.h. */
#ifndef KVBENCH_FORWARD_CHECKS_H
#define KVBENCH_FORWARD_CHECKS_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/generate.h"
#include "../engine/kvcache.h"
#include "test.h"

static inline double rel_err(const float *a, const float *ref, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        double df = fabs((double)a[i] - ref[i]);
        md = df > md ? df : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    return md / (mr > 0 ? mr : 1);
}

static inline int *json_ids(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int *ids = malloc(sizeof(int) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) ids[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return ids;
}

/* Prefills ids on a fresh cache with room for `extra` more; returns the cache, logits in out[V]. */
static inline KvCache *prefill(TestCounts *tc, Backend *be, const int *ids, int n, int extra, float *out) {
    KvErr err = {{0}};
    KvCache *c = NULL;
    int rc = be->cache_new(be, &c, n + extra, &err);
    if (!rc) rc = be->forward(be, &c, 1, ids, n, out, NULL, NULL, &err);
    CHECK(tc, rc == 0, "prefill of %d tokens: %s", n, err.msg);
    return c;
}

/* The reference cases of tests/data/reference/NAME.json (run from the project root) and their prompt logits
 * ([n_cases][V] floats, checked for size). Returns the parsed cases and *logits, or NULL after a failed check
 * (nothing to free). */
static inline cJSON *load_reference(TestCounts *tc, const char *name, int V, float **logits) {
    KvErr err = {{0}};
    char path[256];
    snprintf(path, sizeof path, "tests/data/reference/%s.json", name);
    char *text = kv_read_file(path, NULL, &err);
    cJSON *ref = text ? cJSON_Parse(text) : NULL;
    free(text);
    *logits = NULL;
    CHECK(tc, ref != NULL, "%s: %s", path, err.msg);
    if (!ref) return NULL;
    snprintf(path, sizeof path, "tests/data/reference/%s", cJSON_GetObjectItem(ref, "logits")->valuestring);
    size_t bytes = 0;
    *logits = (float *)kv_read_file(path, &bytes, &err);
    int n_cases = cJSON_GetObjectItem(ref, "n_cases")->valueint;
    CHECK(tc, *logits && bytes == (size_t)n_cases * V * sizeof(float), "%s: %zu bytes for %d x %d", path, bytes,
          n_cases, V);
    if (!*logits) {
        cJSON_Delete(ref);
        return NULL;
    }
    return ref;
}

/* A prefill of n tokens in a prefill of `split` then pieces of `step` against one prefill (relative 1e-4: only
 * f32 summation orders differ across chunk boundaries). */
static inline void check_split_prefill(TestCounts *tc, Backend *be, const int *ids, int n, int split, int step) {
    int V = be->model->cfg.vocab_size;
    KvErr err = {{0}};
    float *one = malloc(sizeof(float) * V), *parts = malloc(sizeof(float) * V);
    KvCache *a = prefill(tc, be, ids, n, 0, one);
    KvCache *b = prefill(tc, be, ids, split, n - split, parts);
    for (int t = split; t < n; t += step) {
        int len = n - t < step ? n - t : step;
        CHECK(tc, be->forward(be, &b, 1, ids + t, len, parts, NULL, NULL, &err) == 0, "%s", err.msg);
    }
    double e = rel_err(parts, one, V);
    CHECK(tc, e <= 1e-4 && b->n_pos == n && b->len[0] == n, "prefill %d then pieces of %d vs one prefill of %d: %.3g",
          split, step, n, e);
    be->cache_free(be, a);
    be->cache_free(be, b);
    free(one);
    free(parts);
}

/* Three sequences with different cache lengths decode together; each must match its own run within relative
 * `tol` (0: bit for bit). */
static inline void check_batch(TestCounts *tc, Backend *be, const int *ids, double tol) {
    int V = be->model->cfg.vocab_size;
    KvErr err = {{0}};
    const int lens[3] = {20, 33, 7}, feed = 9, steps = 4;
    float *batch_logits = malloc(sizeof(float) * 3 * V), *solo = malloc(sizeof(float) * V);
    KvCache *bc[3], *sc[3];
    for (int s = 0; s < 3; s++) bc[s] = prefill(tc, be, ids + 5 * s, lens[s], feed + steps, solo);
    /* a batched multi-token feed (same tokens for all), then batched single steps with different tokens */
    int toks[3 * 9];
    for (int s = 0; s < 3; s++) memcpy(toks + 9 * s, ids + 40, sizeof(int) * feed);
    CHECK(tc, be->forward(be, bc, 3, toks, feed, batch_logits, NULL, NULL, &err) == 0, "%s", err.msg);
    int step_tok[4][3];
    for (int k = 0; k < steps; k++) {
        for (int s = 0; s < 3; s++) step_tok[k][s] = ids[60 + 3 * k + s];
        CHECK(tc, be->forward(be, bc, 3, step_tok[k], 1, batch_logits, NULL, NULL, &err) == 0, "%s", err.msg);
    }
    for (int s = 0; s < 3; s++) {
        sc[s] = prefill(tc, be, ids + 5 * s, lens[s], feed + steps, solo);
        CHECK(tc, be->forward(be, &sc[s], 1, ids + 40, feed, solo, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int k = 0; k < steps; k++)
            CHECK(tc, be->forward(be, &sc[s], 1, &step_tok[k][s], 1, solo, NULL, NULL, &err) == 0, "%s", err.msg);
        double e = rel_err(batch_logits + (size_t)s * V, solo, V);
        CHECK(tc, e <= tol, "batch sequence %d (cache %d) vs its own run: %.3g (tolerance %g)", s, lens[s], e, tol);
        be->cache_free(be, bc[s]);
        be->cache_free(be, sc[s]);
    }
    free(batch_logits);
    free(solo);
}

/* The sweep's shape on views (Backend.cache_view) against gathered copies: three keep-sets of one prefill
 * (evicting differently per head, keeping all, keeping a few) plus the full variant decoding on the prefill
 * cache itself, fed a question of 9 tokens (the blocked attention), then 3 (the row path), then single steps,
 * as one batch; the same with gathered copies and a second prefill. Logits equal bit for bit: a view is the
 * same arithmetic on the same rows. */
static inline void check_views(TestCounts *tc, Backend *be, const int *ids) {
    const ModelConfig *c = &be->model->cfg;
    int V = c->vocab_size, NK = c->n_layers * c->n_kv_heads, n = 60, extra = 16;
    KvErr err = {{0}};
    if (!be->cache_view) {
        printf("%s: backend has no views, not checked\n", tc->name);
        return;
    }
    float *a = malloc(sizeof(float) * 4 * V), *b = malloc(sizeof(float) * 4 * V);
    KvCache *base = prefill(tc, be, ids, n, extra, a), *copy_base = prefill(tc, be, ids, n, extra, b);
    KvCache *views[4], *copies[4];
    for (int set = 0; set < 3; set++) {
        /* set 0: head h drops the positions p with (p + h) % 3 == 0; set 1 keeps all; set 2 the last 5..8 */
        int *counts = malloc(sizeof(int) * NK);
        for (int h = 0; h < NK; h++) {
            counts[h] = set == 1 ? n : 5 + h % 4;
            if (set == 0)
                for (int p = counts[h] = 0; p < n; p++) counts[h] += (p + h) % 3 != 0;
        }
        KeepSet ks;
        CHECK(tc, keepset_init(&ks, c->n_layers, c->n_kv_heads, counts, &err) == 0, "%s", err.msg);
        for (int h = 0; h < NK; h++)
            for (int p = set == 2 ? n - counts[h] : 0, j = 0; p < n; p++)
                if (set != 0 || (p + h) % 3 != 0) ks.positions[ks.offsets[h] + j++] = p;
        CHECK(tc, be->cache_view(be, base, &ks, extra, &views[set], &err) == 0, "view %d: %s", set, err.msg);
        CHECK(tc, be->cache_gather(be, copy_base, &ks, extra, &copies[set], &err) == 0, "gather %d: %s", set, err.msg);
        keepset_free(&ks);
        free(counts);
    }
    views[3] = base, copies[3] = copy_base;
    int toks[4 * 9], same = 1;
    const int feeds[] = {9, 3, 1, 1, 1};
    for (int f = 0, at = 0; f < 5; at += feeds[f], f++) {
        for (int s = 0; s < 4; s++) /* the same question for all; then each its own token per step */
            memcpy(toks + feeds[f] * s, ids + 70 + at + s * (feeds[f] == 1), sizeof(int) * feeds[f]);
        CHECK(tc, be->forward(be, views, 4, toks, feeds[f], a, NULL, NULL, &err) == 0, "views: %s", err.msg);
        CHECK(tc, be->forward(be, copies, 4, toks, feeds[f], b, NULL, NULL, &err) == 0, "copies: %s", err.msg);
        same &= !memcmp(a, b, sizeof(float) * 4 * V);
    }
    CHECK(tc, same, "3 views and the full cache they share decode as their gathered copies, bit for bit");
    for (int s = 0; s < 3; s++) {
        be->cache_free(be, views[s]);
        be->cache_free(be, copies[s]);
    }
    be->cache_free(be, base);
    be->cache_free(be, copy_base);
    free(a);
    free(b);
}

/* A keep-everything gather decodes exactly like the full cache; a real eviction keeps positions going. */
static inline void check_gather(TestCounts *tc, Backend *be, const int *ids, int n) {
    KvErr err = {{0}};
    const ModelConfig *c = &be->model->cfg;
    float *logits = malloc(sizeof(float) * c->vocab_size);
    KvCache *full = prefill(tc, be, ids, n, 12, logits);
    KeepSet ks;
    CHECK(tc, keepset_full(&ks, c->n_layers, c->n_kv_heads, n, &err) == 0, "%s", err.msg);
    KvCache *g;
    CHECK(tc, be->cache_gather(be, full, &ks, 12, &g, &err) == 0, "%s", err.msg);
    GenerateOptions opt = {.max_new = 10};
    TokenIds out_full, out_g;
    CHECK(tc, generate_greedy(be, &full, 1, ids + n, 2, &opt, &out_full, NULL, &err) == 0, "%s", err.msg);
    CHECK(tc, generate_greedy(be, &g, 1, ids + n, 2, &opt, &out_g, NULL, &err) == 0, "%s", err.msg);
    CHECK(tc, out_full.n == 10 && out_g.n == 10 && !memcmp(out_full.ids, out_g.ids, sizeof(int) * 10),
          "keep-all gather decodes as the full cache");
    CHECK(tc, g->n_pos == n + 11 && g->pos[0][n] == n, "positions continue: n_pos %d, first appended at %d", g->n_pos,
          g->pos[0][n]);
    keepset_free(&ks);
    ids_free(&out_full);
    ids_free(&out_g);
    be->cache_free(be, g);
    be->cache_free(be, full);
    free(logits);
}

/* Observation of a prefill of n tokens vs the trace of the same last token decoded on a prefill of n-1:
 * softmax(q_win[h][w-1] . keys / sqrt(d)) must equal the traced probabilities of head h. */
typedef struct {
    int n_layers, H, d, L, w;
    float *q_last;  /* [N][H][d] last window query per layer */
    float *keys;    /* [N][K][L][d] */
    float *probs;   /* [N][H][L] from the trace */
    int positions_ok, layers_seen;
} HookCapture;

static inline int capture_obs(void *user, Observation *o, KvErr *err) {
    HookCapture *hc = user;
    if (o->layer != hc->layers_seen) return kv_fail(err, "layer %d out of order", o->layer);
    hc->layers_seen++;
    hc->L = o->L;
    hc->w = o->w;
    for (int h = 0; h < o->H; h++)
        memcpy(hc->q_last + ((size_t)o->layer * o->H + h) * o->d, o->q_win + ((size_t)h * o->w + o->w - 1) * o->d,
               sizeof(float) * o->d);
    for (int k = 0; k < o->K; k++)
        memcpy(hc->keys + (((size_t)o->layer * o->K + k) * o->L) * o->d, o->keys[k], sizeof(float) * o->L * o->d);
    return o->attn == NULL && o->value_norm == NULL && o->w_o != NULL ? 0 : kv_fail(err, "unexpected fields");
}

static inline void capture_trace(void *user, int seq, int layer, int head, const float *probs, const int *positions,
                          int n_keys) {
    HookCapture *hc = user;
    memcpy(hc->probs + ((size_t)layer * hc->H + head) * hc->L, probs, sizeof(float) * n_keys);
    for (int j = 0; j < n_keys; j++) hc->positions_ok &= positions[j] == j && seq == 0 && n_keys == hc->L;
}

static inline void check_hooks(TestCounts *tc, Backend *be, const int *ids, int n) {
    KvErr err = {{0}};
    const ModelConfig *c = &be->model->cfg;
    int N = c->n_layers, H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, G = H / K;
    HookCapture hc = {N, H, d, n, 0, malloc(sizeof(float) * N * H * d), malloc(sizeof(float) * N * K * n * d),
                      malloc(sizeof(float) * N * H * n), 1, 0};
    ObserveHook obs = {.window = 8, .on_layer = capture_obs, .user = &hc};
    TraceHook trace = {.on_attention = capture_trace, .user = &hc};
    KvCache *a, *b;
    CHECK(tc, be->cache_new(be, &a, n, &err) == 0, "%s", err.msg);
    CHECK(tc, be->forward(be, &a, 1, ids, n, NULL, &obs, NULL, &err) == 0, "observed prefill: %s", err.msg);
    CHECK(tc, hc.layers_seen == N && hc.L == n && hc.w == 8, "observation: %d layers, L %d, w %d", hc.layers_seen, hc.L,
          hc.w);
    b = prefill(tc, be, ids, n - 1, 1, NULL);
    CHECK(tc, be->forward(be, &b, 1, ids + n - 1, 1, NULL, NULL, &trace, &err) == 0, "traced step: %s", err.msg);
    CHECK(tc, hc.positions_ok, "trace positions and sequence numbers");
    double worst = 0;
    float *p = malloc(sizeof(float) * n);
    for (int l = 0; l < N; l++)
        for (int h = 0; h < H; h++) {
            const float *q = hc.q_last + ((size_t)l * H + h) * d;
            double mx = -1e30, sum = 0;
            for (int j = 0; j < n; j++) {
                const float *k = hc.keys + (((size_t)l * K + h / G) * n + j) * d;
                double s = 0;
                for (int i = 0; i < d; i++) s += (double)q[i] * k[i];
                p[j] = (float)(s / sqrt(d));
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = 0; j < n; j++) sum += exp(p[j] - mx);
            for (int j = 0; j < n; j++) {
                double diff = fabs(exp(p[j] - mx) / sum - hc.probs[((size_t)l * H + h) * n + j]);
                worst = diff > worst ? diff : worst;
            }
        }
    CHECK(tc, worst <= 1e-4, "observation queries/keys vs traced probabilities: max diff %.3g", worst);
    /* errors: window larger than the context, hooks in the wrong kind of forward */
    KvCache *e;
    CHECK(tc, be->cache_new(be, &e, 8, &err) == 0, "%s", err.msg);
    CHECK(tc, be->forward(be, &e, 1, ids, 5, NULL, &obs, NULL, &err) == -1 && strstr(err.msg, "window 8") &&
                  strstr(err.msg, "5 tokens"), "window > context: %s", err.msg);
    KvCache *two[2] = {e, e};
    CHECK(tc, be->forward(be, two, 2, ids, 1, NULL, &obs, NULL, &err) == -1 && strstr(err.msg, "one sequence"),
          "observe with a batch: %s", err.msg);
    CHECK(tc, be->forward(be, &e, 1, ids, 2, NULL, NULL, &trace, &err) == -1 && strstr(err.msg, "single-token"),
          "trace with a feed: %s", err.msg);
    int bad = c->vocab_size;
    CHECK(tc, be->forward(be, &e, 1, &bad, 1, NULL, NULL, NULL, &err) == -1 && strstr(err.msg, "outside the vocabulary"),
          "bad token: %s", err.msg);
    CHECK(tc, be->forward(be, &e, 1, ids, 9, NULL, NULL, NULL, &err) == -1 && strstr(err.msg, "full"),
          "over capacity: %s", err.msg);
    be->cache_free(be, e);
    be->cache_free(be, a);
    be->cache_free(be, b);
    free(p);
    free(hc.q_last);
    free(hc.keys);
    free(hc.probs);
}

#endif
