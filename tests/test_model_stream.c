/* test_model_stream.c — model_load_config and model_stream_weights: the path by which the CUDA backend gets
 * its weights without an f32 copy of the model on the host. For every kind of source (GGUF, Hugging Face
 * directory, synthetic), a model opened without weights must stream exactly the tensors, bit for bit, that
 * model_load puts in its arena, each once, with the right role, layer and shape; a model with an arena must
 * stream its arena itself; a source that changed in between must be refused. */
#include <stdint.h>
#include <string.h>

#include "../engine/model.h"
#include "test.h"

#define SMOLLM2 "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* The arena's copy of a weight, by role and layer, and its shape. */
static const float *arena_weight(const Model *m, WeightRole role, int layer, uint64_t *rows, uint64_t *cols) {
    const ModelConfig *c = &m->cfg;
    uint64_t D = c->d_model, V = c->vocab_size, F = c->d_ff, q = (uint64_t)c->n_heads * c->head_dim,
             kv = (uint64_t)c->n_kv_heads * c->head_dim;
    const LayerWeights *w = layer >= 0 ? &m->layers[layer] : NULL;
    *rows = 1, *cols = 0;
    switch (role) {
    case WEIGHT_TOK_EMBD: *rows = V, *cols = D; return m->tok_embd;
    case WEIGHT_OUT_NORM: *cols = D; return m->out_norm;
    case WEIGHT_LM_HEAD: *rows = V, *cols = D; return m->lm_head;
    case WEIGHT_ATTN_NORM: *cols = D; return w->attn_norm;
    case WEIGHT_Q: *rows = q, *cols = D; return w->wq;
    case WEIGHT_K: *rows = kv, *cols = D; return w->wk;
    case WEIGHT_V: *rows = kv, *cols = D; return w->wv;
    case WEIGHT_O: *rows = D, *cols = q; return w->wo;
    case WEIGHT_Q_BIAS: *cols = q; return w->bq;
    case WEIGHT_K_BIAS: *cols = kv; return w->bk;
    case WEIGHT_V_BIAS: *cols = kv; return w->bv;
    case WEIGHT_FFN_NORM: *cols = D; return w->ffn_norm;
    case WEIGHT_GATE: *rows = F, *cols = D; return w->w_gate;
    case WEIGHT_UP: *rows = F, *cols = D; return w->w_up;
    case WEIGHT_DOWN: *rows = D, *cols = F; return w->w_down;
    }
    return NULL;
}

typedef struct {
    TestCounts *tc;
    const Model *full;      /* loaded with its arena: the expected values */
    const char *what;
    int n_seen, n_same_ptr, mismatches;
    unsigned char seen[16][64];  /* per role, per layer + 1 */
} StreamCheck;

static int visit(void *user, WeightRole role, int layer, const float *data, uint64_t rows, uint64_t cols,
                 KvErr *err) {
    (void)err;
    StreamCheck *s = user;
    uint64_t want_rows, want_cols;
    const float *want = arena_weight(s->full, role, layer, &want_rows, &want_cols);
    s->n_seen++;
    if (layer + 1 < 64) s->seen[role][layer + 1]++;
    if (!want || rows != want_rows || cols != want_cols) {
        CHECK(s->tc, 0, "%s: role %d layer %d: shape %llux%llu, expected %llux%llu", s->what, role, layer,
              (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)want_rows,
              (unsigned long long)want_cols);
        return 0;
    }
    s->n_same_ptr += data == want;
    if (memcmp(data, want, rows * cols * sizeof(float))) s->mismatches++;
    return 0;
}

static int expected_count(const ModelConfig *c) {
    return 2 + !c->tied_embeddings + c->n_layers * (9 + 3 * c->qkv_bias);
}

/* Streams spec's weights from a config-only model and from a full one, against the full load. */
static void check_source(TestCounts *tc, const char *spec) {
    Model *full = NULL, *bare = NULL;
    KvErr err;
    CHECK(tc, model_load(&full, spec, &err) == 0, "%s: %s", spec, err.msg);
    CHECK(tc, model_load_config(&bare, spec, &err) == 0, "%s: %s", spec, err.msg);
    if (!full || !bare) {
        model_free(full);
        model_free(bare);
        return;
    }
    CHECK(tc, full->has_host_weights && !bare->has_host_weights, "%s: has_host_weights", spec);
    CHECK(tc, !bare->tok_embd && !bare->layers && bare->arena_bytes < 4096,
          "%s: a config-only model holds %zu bytes", spec, bare->arena_bytes);
    CHECK(tc, !memcmp(&full->cfg, &bare->cfg, sizeof full->cfg), "%s: configs differ", spec);
    CHECK(tc, !memcmp(full->rope_inv_freq, bare->rope_inv_freq, sizeof(float) * (size_t)full->cfg.head_dim / 2),
          "%s: RoPE frequencies differ", spec);
    CHECK(tc, (full->tokenizer != NULL) == (bare->tokenizer != NULL), "%s: tokenizer", spec);

    const Model *from[2] = {bare, full};
    for (int i = 0; i < 2; i++) {
        StreamCheck s = {.tc = tc, .full = full, .what = spec};
        CHECK(tc, model_stream_weights(from[i], visit, &s, &err) == 0, "%s: %s", spec, err.msg);
        int n = expected_count(&full->cfg);
        CHECK(tc, s.n_seen == n, "%s: %d weights streamed, expected %d", spec, s.n_seen, n);
        CHECK(tc, s.mismatches == 0, "%s: %d weights differ from the arena", spec, s.mismatches);
        /* From the arena the visitor sees the arena itself; from the source, a scratch copy. */
        CHECK(tc, s.n_same_ptr == (i == 1 ? n : 0), "%s: %d arena pointers", spec, s.n_same_ptr);
        int twice = 0;
        for (int r = 0; r < 16; r++)
            for (int l = 0; l < 64; l++) twice += s.seen[r][l] > 1;
        CHECK(tc, twice == 0, "%s: %d weights streamed twice", spec, twice);
    }
    model_free(full);
    model_free(bare);
}

static int fail_after(void *user, WeightRole role, int layer, const float *data, uint64_t rows, uint64_t cols,
                      KvErr *err) {
    (void)role, (void)data, (void)rows, (void)cols;
    int *left = user;
    if (--*left == 0) return kv_fail(err, "device full at layer %d", layer);
    return 0;
}

static void check_errors(TestCounts *tc) {
    KvErr err;
    Model *m = NULL;
    /* The visitor's error comes back unchanged and stops the stream. */
    CHECK(tc, model_load_config(&m, "synthetic:smollm2-135m:layers=2:vocab=100", &err) == 0, "%s", err.msg);
    if (m) {
        int left = 5;
        CHECK(tc, model_stream_weights(m, fail_after, &left, &err) == -1 && strstr(err.msg, "device full"), "%s",
              err.msg);
        CHECK(tc, left == 0, "the stream went on after an error (%d)", left);
        model_free(m);
    }
    /* The source changed between opening and streaming. */
    char dir[] = "/tmp/kvbench_stream_XXXXXX";
    CHECK(tc, mkdtemp(dir) != NULL, "mkdtemp");
    char path[512], cmd[1200];
    snprintf(cmd, sizeof cmd, "cp tests/data/models/tiny-llama-hf/* %s/", dir);
    CHECK(tc, system(cmd) == 0, "%s", cmd);
    m = NULL;
    CHECK(tc, model_load_config(&m, dir, &err) == 0, "%s", err.msg);
    if (m) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": *[0-9]*/\"num_hidden_layers\": 1/' %s", path);
        CHECK(tc, system(cmd) == 0, "%s", cmd);
        int left = 1 << 30;
        int rc = model_stream_weights(m, fail_after, &left, &err);
        CHECK(tc, rc == -1 && strstr(err.msg, "changed since it was opened") && strstr(err.msg, dir), "rc %d: %s", rc,
              rc ? err.msg : "");
        /* Gone altogether: the loader's own message, naming the directory. */
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(tc, system(cmd) == 0, "%s", cmd);
        rc = model_stream_weights(m, fail_after, &left, &err);
        CHECK(tc, rc == -1 && strstr(err.msg, dir), "rc %d: %s", rc, rc ? err.msg : "");
        model_free(m);
    }
}

int main(void) {
    TestCounts tc = {"test_model_stream", 0, 0, 0};
    check_source(&tc, "synthetic:smollm2-135m:layers=2:seed=3:vocab=1000");
    check_source(&tc, "synthetic:qwen2.5-32b:layers=1:vocab=64");   /* biases, untied head */
    check_source(&tc, "tests/data/gguf/tiny_llama.gguf");           /* permuted Q/K rows */
    check_source(&tc, "tests/data/gguf/tiny_qwen2.gguf");
    check_source(&tc, "tests/data/models/tiny-llama-hf");
    check_source(&tc, "tests/data/models/tiny-qwen2-hf");
    if (access(SMOLLM2, R_OK) == 0) check_source(&tc, SMOLLM2);     /* Q4_1 blocks */
    else SKIP(&tc, "SmolLM2: %s not present (make model)", SMOLLM2);
    check_errors(&tc);
    return test_finish(&tc);
}
