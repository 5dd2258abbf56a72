/* test_model_load.c — model_load from GGUF files, Hugging Face directories and synthetic specs.
 *
 * Expected values come from tests/reference/gen_quant_cases.py (tiny GGUF models; the real SmolLM2 GGUF read
 * with PyPI gguf + numpy, Q/K rows un-permuted there with the inverse of llama.cpp's LlamaModel.permute) and
 * gen_hf_fixtures.py (tiny Llama / Qwen2 / Mistral safetensors directories). Weights are compared exactly
 * (tolerance 0: dequantisation and bf16/f16 widening are exact float32 arithmetic on both sides), whole-row
 * sums to 1e-9 relative; RoPE inverse frequencies (float32 here, float64 in the generator) to 2e-6 relative.
 * The Q/K un-permutation is also checked by its purpose: rotate-half RoPE on the loaded rows must give the
 * same q.k as llama.cpp's interleaved RoPE on the raw GGUF rows (1e-5 relative).
 * Bad input of every kind must fail with one line naming the file, under ASan too. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/gguf.h"
#include "../engine/model.h"
#include "../engine/safetensors.h"
#include "../engine/tokenizer.h"
#include "test.h"

#define SMOLLM2 "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static cJSON *load_json(const char *path) {
    KvErr err;
    char *text = kv_read_file(path, NULL, &err);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j) fprintf(stderr, "cannot read %s\n", path);
    return j;
}

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
static double num(const cJSON *o, const char *key) { return item(o, key) ? item(o, key)->valuedouble : -999; }

/* The model array a generator's "field" names, and its row length. */
static const float *field_ptr(const Model *m, const char *field, int layer, size_t *row_len) {
    const ModelConfig *c = &m->cfg;
    size_t D = (size_t)c->d_model, q = (size_t)c->n_heads * c->head_dim, kv = (size_t)c->n_kv_heads * c->head_dim;
    const LayerWeights *w = layer >= 0 ? &m->layers[layer] : NULL;
    struct { const char *name; const float *p; size_t len; } f[] = {
        {"tok_embd", m->tok_embd, D}, {"out_norm", m->out_norm, D}, {"lm_head", m->lm_head, D},
        {"attn_norm", w ? w->attn_norm : NULL, D}, {"wq", w ? w->wq : NULL, D}, {"wk", w ? w->wk : NULL, D},
        {"wv", w ? w->wv : NULL, D}, {"wo", w ? w->wo : NULL, q}, {"bq", w ? w->bq : NULL, q},
        {"bk", w ? w->bk : NULL, kv}, {"bv", w ? w->bv : NULL, kv}, {"ffn_norm", w ? w->ffn_norm : NULL, D},
        {"w_gate", w ? w->w_gate : NULL, D}, {"w_up", w ? w->w_up : NULL, D},
        {"w_down", w ? w->w_down : NULL, (size_t)c->d_ff},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!strcmp(f[i].name, field)) {
            *row_len = f[i].len;
            return f[i].p;
        }
    return NULL;
}

/* Every {field, layer, rows, values, sums} entry of a generator's "tensors" object. */
static void check_weights(TestCounts *tc, const Model *m, const cJSON *tensors, const char *what) {
    const cJSON *t;
    int n_checked = 0;
    cJSON_ArrayForEach(t, tensors) {
        size_t row_len = 0;
        const float *p = field_ptr(m, item(t, "field")->valuestring, (int)num(t, "layer"), &row_len);
        CHECK(tc, p != NULL, "%s: %s has no field %s", what, t->string, item(t, "field")->valuestring);
        if (!p) continue;
        const cJSON *rows = item(t, "rows"), *values = item(t, "values"), *sums = item(t, "sums");
        for (int i = 0; i < cJSON_GetArraySize(rows); i++) {
            int r = cJSON_GetArrayItem(rows, i)->valueint;
            const float *row = p + (size_t)r * row_len;
            const cJSON *v = cJSON_GetArrayItem(values, i);
            int bad = 0;
            for (int j = 0; j < cJSON_GetArraySize(v); j++)
                if (row[j] != (float)cJSON_GetArrayItem(v, j)->valuedouble) {
                    if (!bad) fprintf(stderr, "%s %s row %d [%d]: got %.9g want %.9g\n", what, t->string, r, j,
                                      row[j], cJSON_GetArrayItem(v, j)->valuedouble);
                    bad++;
                }
            double sum = 0, want = cJSON_GetArrayItem(sums, i)->valuedouble;
            for (size_t j = 0; j < row_len; j++) sum += row[j];
            CHECK(tc, bad == 0 && test_close(sum, want, 1e-9, want), "%s %s row %d: %d values differ, sum %.12g vs %.12g",
                  what, t->string, r, bad, sum, want);
        }
        n_checked++;
    }
    CHECK(tc, n_checked > 0, "%s: no tensors checked", what);
}

static void check_rope(TestCounts *tc, const Model *m, const cJSON *want, const char *what) {
    int bad = 0, n = cJSON_GetArraySize(want);
    CHECK(tc, n == m->cfg.head_dim / 2, "%s: %d frequencies", what, n);
    for (int i = 0; i < n && i < m->cfg.head_dim / 2; i++) {
        double w = cJSON_GetArrayItem(want, i)->valuedouble;
        if (fabs(m->rope_inv_freq[i] - w) > 2e-6 * w) {
            fprintf(stderr, "%s inv_freq[%d]: %.9g vs %.9g\n", what, i, m->rope_inv_freq[i], w);
            bad++;
        }
    }
    CHECK(tc, bad == 0, "%s: %d inverse frequencies off by more than 2e-6 relative", what, bad);
}

/* ---- the Q/K un-permutation, checked by what it is for ---------------------------------------------------
 * llama.cpp applies interleaved ("normal") RoPE to the GGUF row order, Hugging Face rotate-half RoPE to its
 * own order. If the loader un-permuted Q/K correctly, rotate-half RoPE on the loaded rows gives the same
 * attention logits q.k (per head, at any positions) as interleaved RoPE on the raw GGUF rows. */

static void rope_rotate(float *v, int d, const float *inv_freq, int pos, int interleaved) {
    for (int i = 0; i < d / 2; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + d / 2;
        double c = cos(pos * (double)inv_freq[i]), s = sin(pos * (double)inv_freq[i]);
        float x = v[a], y = v[b];
        v[a] = (float)(x * c - y * s);
        v[b] = (float)(x * s + y * c);
    }
}

static void matvec_rows(const float *w, int row0, int n_rows, int cols, const float *x, float *y) {
    for (int r = 0; r < n_rows; r++) {
        double acc = 0;
        for (int j = 0; j < cols; j++) acc += (double)w[(size_t)(row0 + r) * cols + j] * x[j];
        y[r] = (float)acc;
    }
}

static float *raw_gguf_matrix(const char *path, const char *name, size_t n) {
    GgufFile *g = NULL;
    KvErr err;
    float *out = NULL;
    if (gguf_open(&g, path, &err) == 0) {
        const GgufTensor *t = gguf_find_tensor(g, name);
        out = t ? malloc(n * sizeof *out) : NULL;
        if (out && ggml_dequantize(t->type, t->data, out, n, &err)) {
            free(out);
            out = NULL;
        }
    }
    gguf_close(g);
    return out;
}

static void test_rope_invariance(TestCounts *tc, const Model *m, const char *path, int layer) {
    const ModelConfig *c = &m->cfg;
    int D = c->d_model, d = c->head_dim, H = c->n_heads, K = c->n_kv_heads;
    char qn[64], kn[64];
    snprintf(qn, sizeof qn, "blk.%d.attn_q.weight", layer);
    snprintf(kn, sizeof kn, "blk.%d.attn_k.weight", layer);
    float *gq = raw_gguf_matrix(path, qn, (size_t)H * d * D), *gk = raw_gguf_matrix(path, kn, (size_t)K * d * D);
    float *x = malloc(D * sizeof *x), *v[6];
    for (int i = 0; i < 6; i++) v[i] = malloc(d * sizeof(float));
    CHECK(tc, gq && gk, "%s: raw Q/K of layer %d", path, layer);
    uint32_t st = 12345;
    for (int i = 0; i < D; i++) x[i] = (float)((st = st * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
    double worst = 0, worst_wrong = 0, scale = 0;
    for (int h = 0; gq && gk && h < H; h++) {
        int kh = h / (H / K), pq = 37, pk = 5;
        const LayerWeights *w = &m->layers[layer];
        matvec_rows(w->wq, h * d, d, D, x, v[0]);  /* loaded (HF order) */
        matvec_rows(w->wk, kh * d, d, D, x, v[1]);
        matvec_rows(gq, h * d, d, D, x, v[2]);     /* raw GGUF order */
        matvec_rows(gk, kh * d, d, D, x, v[3]);
        memcpy(v[4], v[2], d * sizeof(float));     /* GGUF order with the wrong (rotate-half) RoPE */
        memcpy(v[5], v[3], d * sizeof(float));
        rope_rotate(v[0], d, m->rope_inv_freq, pq, 0);
        rope_rotate(v[1], d, m->rope_inv_freq, pk, 0);
        rope_rotate(v[2], d, m->rope_inv_freq, pq, 1);
        rope_rotate(v[3], d, m->rope_inv_freq, pk, 1);
        rope_rotate(v[4], d, m->rope_inv_freq, pq, 0);
        rope_rotate(v[5], d, m->rope_inv_freq, pk, 0);
        double hf = 0, gg = 0, wrong = 0;
        for (int i = 0; i < d; i++) hf += v[0][i] * v[1][i], gg += v[2][i] * v[3][i], wrong += v[4][i] * v[5][i];
        worst = fmax(worst, fabs(hf - gg));
        worst_wrong = fmax(worst_wrong, fabs(wrong - gg));
        scale = fmax(scale, fabs(gg));
    }
    CHECK(tc, worst <= 1e-5 * fmax(scale, 1e-3), "%s layer %d: q.k differs by %g (scale %g)", path, layer, worst, scale);
    CHECK(tc, worst_wrong > 1e-3 * scale, "%s layer %d: test has no power (%g)", path, layer, worst_wrong);
    for (int i = 0; i < 6; i++) free(v[i]);
    free(x);
    free(gq);
    free(gk);
}

/* ---- tiny GGUF models ------------------------------------------------------------------------------- */

static void test_tiny_gguf(TestCounts *tc, const cJSON *exp, const char *arch, const char *path) {
    const cJSON *e = item(exp, arch);
    Model *m = NULL;
    KvErr err = {{0}};
    CHECK(tc, model_load(&m, path, &err) == 0, "%s: %s", path, err.msg);
    if (!m) return;
    const ModelConfig *c = &m->cfg;
    CHECK(tc, c->n_layers == 2 && c->d_model == 64 && c->n_heads == 4 && c->n_kv_heads == 2 && c->head_dim == 16 &&
                  c->d_ff == 96 && c->vocab_size == 80 && c->max_context == 2048, "%s shape", arch);
    CHECK(tc, c->tied_embeddings == (int)cJSON_IsTrue(item(e, "tied")) && c->qkv_bias == (int)cJSON_IsTrue(item(e, "bias")),
          "%s tied/bias", arch);
    CHECK(tc, c->tied_embeddings ? m->lm_head == m->tok_embd : m->lm_head != m->tok_embd, "%s lm_head", arch);
    CHECK(tc, c->rope_theta == 500000.0f && c->bos_id == 1 && m->tokenizer == NULL, "%s rope/bos", arch);
    CHECK(tc, !strcmp(m->name, !strcmp(arch, "llama") ? "tiny-llama-test" : "tiny-qwen2-test"), "name %s", m->name);
    if (!strcmp(arch, "llama")) {
        CHECK(tc, c->arch == ARCH_LLAMA && c->chat == CHAT_LLAMA3 && c->add_bos == 1 && c->rms_eps == 1e-5f, "llama cfg");
        CHECK(tc, c->n_eos == 2 && c->eos_ids[0] == 2 && c->eos_ids[1] == 3, "llama eos (eos + eot)");
        CHECK(tc, c->rope_scaling == 1 && c->rope_factor == 8.0f, "llama rope_freqs -> scaling, factor %g", c->rope_factor);
        check_rope(tc, m, item(e, "rope_inv_freq"), "tiny llama gguf");
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        model_print_info(m, f);
        fclose(f);
        CHECK(tc, strstr(buf, "per-frequency factors from the GGUF, max 8") && strstr(buf, "tokenizer    none") &&
                      strstr(buf, "eos          2 3"), "info:\n%s", buf);
        free(buf);
    } else {
        CHECK(tc, c->arch == ARCH_QWEN2 && c->chat == CHAT_QWEN2 && c->add_bos == 0 && c->rms_eps == 1e-6f, "qwen2 cfg");
        CHECK(tc, c->n_eos == 1 && c->eos_ids[0] == 2 && c->rope_scaling == 0, "qwen2 eos/rope");
        CHECK(tc, m->layers[1].bq && m->layers[0].bv, "qwen2 biases");
    }
    check_weights(tc, m, item(e, "tensors"), path);
    if (c->arch == ARCH_LLAMA) test_rope_invariance(tc, m, path, 1);
    model_free(m);
}

/* The small Llama in Q5_0 / Q5_1 / Q8_0 (tests/data/fuzz/gguf_tensors/seed_llama_q5.gguf, also a fuzz seed): its
 * weights, permuted Q/K rows of 5-bit blocks included, equal gguf-py's dequantisation (tolerance 0). */
static void test_q5_gguf(TestCounts *tc, const cJSON *exp) {
    const char *path = "tests/data/fuzz/gguf_tensors/seed_llama_q5.gguf";
    Model *m = NULL;
    KvErr err = {{0}};
    CHECK(tc, model_load(&m, path, &err) == 0, "%s: %s", path, err.msg);
    if (!m) return;
    const ModelConfig *c = &m->cfg;
    CHECK(tc, c->arch == ARCH_LLAMA && c->n_layers == 2 && c->d_model == 32 && c->n_heads == 2 && c->n_kv_heads == 1 &&
                  c->head_dim == 16 && c->d_ff == 64 && c->vocab_size == 16 && !c->tied_embeddings,
          "q5 llama shape");
    check_weights(tc, m, item(item(exp, "llama_q5"), "tensors"), path);
    model_free(m);
}

/* ---- the real SmolLM2 GGUF ---------------------------------------------------------------------------- */

static void test_smollm2(TestCounts *tc) {
    if (access(SMOLLM2, R_OK)) {
        SKIP(tc, "the SmolLM2 checks: %s not present (make model fetches it)", SMOLLM2);
        return;
    }
    Model *m = NULL;
    KvErr err = {{0}};
    double t0 = now_s();
    CHECK(tc, model_load(&m, SMOLLM2, &err) == 0, "%s", err.msg);
    if (!m) return;
    printf("test_model_load: SmolLM2-135M GGUF loaded and dequantised in %.2f s (%.0f MB f32)\n", now_s() - t0,
           m->arena_bytes / 1e6);
    const ModelConfig *c = &m->cfg;
    CHECK(tc, c->arch == ARCH_LLAMA && c->n_layers == 30 && c->d_model == 576 && c->n_heads == 9 &&
                  c->n_kv_heads == 3 && c->head_dim == 64 && c->d_ff == 1536 && c->vocab_size == 49152,
          "SmolLM2 shape");
    CHECK(tc, c->tied_embeddings && m->lm_head == m->tok_embd && !c->qkv_bias && c->max_context == 8192 &&
                  c->rope_theta == 100000.0f && !c->rope_scaling, "SmolLM2 tied / context / rope");
    CHECK(tc, c->bos_id == 1 && c->add_bos == 0 && c->n_eos >= 1 && c->eos_ids[0] == 2, "SmolLM2 bos/eos");
    CHECK(tc, c->chat == CHAT_SMOLLM2, "SmolLM2 chat format %d", c->chat);
    CHECK(tc, m->tokenizer && tokenizer_vocab_size(m->tokenizer) == 49152, "SmolLM2 tokenizer");
    CHECK(tc, fabsf(m->rope_inv_freq[1] - powf(100000.0f, -2.0f / 64)) < 1e-9f, "SmolLM2 inv_freq");
    cJSON *exp = load_json(TEST_DATA("gguf/smollm2_expected.json"));
    if (exp) check_weights(tc, m, exp, "SmolLM2");
    cJSON_Delete(exp);
    test_rope_invariance(tc, m, SMOLLM2, 0);
    test_rope_invariance(tc, m, SMOLLM2, 29);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    model_print_info(m, f);
    fclose(f);
    CHECK(tc, strstr(buf, "layers       30") && strstr(buf, "kv-heads 3") && strstr(buf, "smollm2") &&
                  strstr(buf, "tied embd    yes") && strstr(buf, "49152 tokens"), "info:\n%s", buf);
    free(buf);
    model_free(m);
}

/* ---- Hugging Face directories ------------------------------------------------------------------------ */

static void test_hf(TestCounts *tc, const cJSON *exp, const char *name) {
    const cJSON *e = item(exp, name);
    char dir[128];
    snprintf(dir, sizeof dir, "tests/data/hf_fixtures/%s", name);
    Model *m = NULL;
    KvErr err = {{0}};
    CHECK(tc, model_load(&m, dir, &err) == 0, "%s: %s", dir, err.msg);
    if (!m) return;
    const ModelConfig *c = &m->cfg;
    CHECK(tc, c->n_layers == 2 && c->d_model == 64 && c->n_heads == 4 && c->n_kv_heads == 2 && c->head_dim == 16 &&
                  c->d_ff == 96 && c->vocab_size == 80, "%s shape", name);
    CHECK(tc, (int)c->arch == (int)num(e, "arch") && c->rope_theta == (float)num(e, "rope_theta") &&
                  c->rms_eps == (float)num(e, "rms_eps") && c->max_context == (int)num(e, "max_context"),
          "%s arch/rope/eps/context", name);
    CHECK(tc, c->rope_scaling == (int)num(e, "rope_scaling") && c->tied_embeddings == (int)num(e, "tied") &&
                  c->qkv_bias == (int)num(e, "qkv_bias"), "%s scaling/tied/bias", name);
    CHECK(tc, c->bos_id == (int)num(e, "bos_id") && c->add_bos == (int)num(e, "add_bos"), "%s bos %d add %d", name,
          c->bos_id, c->add_bos);
    const cJSON *eos = item(e, "eos");
    int eos_ok = c->n_eos == cJSON_GetArraySize(eos);
    for (int i = 0; eos_ok && i < c->n_eos; i++) eos_ok = c->eos_ids[i] == cJSON_GetArrayItem(eos, i)->valueint;
    CHECK(tc, eos_ok, "%s eos (%d ids)", name, c->n_eos);
    CHECK(tc, (int)c->chat == (int)num(e, "chat"), "%s chat %d", name, c->chat);
    CHECK(tc, (m->tokenizer != NULL) == (int)num(e, "tokenizer"), "%s tokenizer", name);
    CHECK(tc, !strcmp(m->name, name), "%s name '%s'", name, m->name);
    if (c->rope_scaling)
        CHECK(tc, c->rope_factor == 8.0f && c->rope_low_freq_factor == 1.0f && c->rope_high_freq_factor == 4.0f &&
                      c->rope_original_max_pos == 8192, "llama3 parameters");
    check_rope(tc, m, item(e, "rope_inv_freq"), dir);
    check_weights(tc, m, item(e, "tensors"), dir);
    model_free(m);
}

/* ---- synthetic models ------------------------------------------------------------------------------ */

static uint64_t checksum(const Model *m) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = m->arena;
    /* hash the weights (after the LayerWeights table, whose pointers differ between loads) */
    for (size_t i = (size_t)m->cfg.n_layers * sizeof(LayerWeights); i < m->arena_bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void test_synthetic(TestCounts *tc) {
    ModelConfig c;
    KvErr err = {{0}};
    CHECK(tc, model_shape_by_name("llama-3.1-8b", &c, &err) == 0 && c.n_layers == 32 && c.d_model == 4096 &&
                  c.n_kv_heads == 8 && c.vocab_size == 128256 && c.rope_scaling && c.n_eos == 3 &&
                  c.eos_ids[2] == 128009 && c.chat == CHAT_LLAMA3, "llama-3.1-8b shape");
    CHECK(tc, model_shape_by_name("qwen2.5-32b", &c, &err) == 0 && c.n_layers == 64 && c.d_model == 5120 &&
                  c.n_heads == 40 && c.d_ff == 27648 && c.qkv_bias && c.rms_eps == 1e-6f && c.bos_id == -1,
          "qwen2.5-32b shape");
    CHECK(tc, model_shape_by_name("mistral-7b-v0.3", &c, &err) == 0 && c.arch == ARCH_MISTRAL &&
                  c.vocab_size == 32768 && c.rope_theta == 1e6f, "mistral shape");
    CHECK(tc, model_shape_by_name("gpt-5", &c, &err) == -1 && strstr(err.msg, "gpt-5") &&
                  strstr(err.msg, "smollm2-135m"), "unknown shape: %s", err.msg);

    /* llama3 scaling for d=128, theta=500000 (spec models.md §2.4): i=0..28 unchanged, 35..63 divided by 8 */
    model_shape_by_name("llama-3.1-8b", &c, &err);
    float inv[64];
    model_rope_inv_freq(&c, inv);
    CHECK(tc, inv[28] == 1.0f / powf(500000.0f, 56.0f / 128) && fabsf(inv[40] * 8 - 1.0f / powf(500000.0f, 80.0f / 128)) <
                  1e-12f && inv[30] < 1.0f / powf(500000.0f, 60.0f / 128) && inv[30] > inv[40], "llama3 bands");

    Model *a = NULL, *b = NULL;
    const char *spec = "synthetic:smollm2-135m:layers=2:seed=7:vocab=1000";
    omp_set_num_threads(1);
    CHECK(tc, model_load(&a, spec, &err) == 0, "%s", err.msg);
    omp_set_num_threads(2);
    CHECK(tc, model_load(&b, spec, &err) == 0, "%s", err.msg);
    if (a && b) {
        CHECK(tc, a->cfg.n_layers == 2 && a->cfg.vocab_size == 1000 && a->cfg.d_model == 576 && !a->tokenizer &&
                      a->cfg.chat == CHAT_SMOLLM2 && a->cfg.tied_embeddings, "synthetic config");
        CHECK(tc, checksum(a) == checksum(b), "weights depend on the thread count");
        double s = 0, s2 = 0;
        size_t n = (size_t)576 * 576;
        for (size_t i = 0; i < n; i++) s += a->layers[1].wq[i], s2 += (double)a->layers[1].wq[i] * a->layers[1].wq[i];
        double mean = s / n, sd = sqrt(s2 / n - mean * mean);
        CHECK(tc, fabs(mean) < 1e-3 && fabs(sd - 0.02) < 1e-3, "wq mean %g sd %g", mean, sd);
        CHECK(tc, a->layers[0].attn_norm[5] == 1.0f && a->out_norm[0] == 1.0f, "norms are 1");
        CHECK(tc, memcmp(a->layers[0].wq, a->layers[1].wq, 64 * sizeof(float)), "layers differ");
        CHECK(tc, fabsf(a->rope_inv_freq[1] - powf(100000.0f, -2.0f / 64)) < 1e-9f, "synthetic inv_freq");
    }
    model_free(b);
    b = NULL;
    CHECK(tc, model_load(&b, "synthetic:smollm2-135m:layers=2:seed=8:vocab=1000", &err) == 0, "%s", err.msg);
    if (a && b) CHECK(tc, checksum(a) != checksum(b), "seed changes the weights");
    model_free(a);
    model_free(b);

    CHECK(tc, model_load(&a, "synthetic:smollm2-135m:layers=1:vocab=2", &err) == 0, "%s", err.msg);
    if (a) CHECK(tc, a->cfg.n_eos == 0 && a->cfg.bos_id == 1, "special ids past a vocab override are dropped");
    model_free(a);

    struct { const char *spec, *needle; } bad[] = {
        {"synthetic:llama-9b", "unknown model shape 'llama-9b'"},
        {"synthetic:smollm2-135m:layers=0", "layers=0"},
        {"synthetic:smollm2-135m:layers=x", "layers=x"},
        {"synthetic:smollm2-135m:depth=3", "unknown option 'depth=3'"},
        {"synthetic:smollm2-135m:vocab=99999999999", "vocab="},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        a = NULL;
        int rc = model_load(&a, bad[i].spec, &err);
        CHECK(tc, rc == -1 && !a && strstr(err.msg, bad[i].needle) && strstr(err.msg, bad[i].spec),
              "%s: %s", bad[i].spec, err.msg);
    }
}

/* ---- bad input ----------------------------------------------------------------------------------------- */

typedef struct {
    char dir[64];
} TmpDir;

static int write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static void tmp_path(const TmpDir *t, const char *name, char *out, size_t n) { snprintf(out, n, "%s/%s", t->dir, name); }

static void tmp_clear(const TmpDir *t) {
    DIR *d = opendir(t->dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            tmp_path(t, e->d_name, p, sizeof p);
            unlink(p);
        }
    if (d) closedir(d);
}

/* Copies a fixture file into the temp dir, optionally replacing the first occurrence of `from` by `to`. */
static void copy_fixture(const TmpDir *t, const char *src, const char *name, const char *from, const char *to) {
    KvErr err;
    size_t n;
    char *text = kv_read_file(src, &n, &err), p[256];
    if (!text) return;
    tmp_path(t, name, p, sizeof p);
    char *at = from ? strstr(text, from) : NULL;
    FILE *f = fopen(p, "wb");
    if (f && at) {
        fwrite(text, 1, (size_t)(at - text), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    } else if (f) {
        fwrite(text, 1, n, f);
    }
    if (f) fclose(f);
    free(text);
}

static void expect_load_fails(TestCounts *tc, const char *spec, const char *file, const char *needle) {
    Model *m = NULL;
    KvErr err = {{0}};
    int rc = model_load(&m, spec, &err);
    CHECK(tc, rc == -1 && m == NULL && strstr(err.msg, file) && strstr(err.msg, needle) && !strchr(err.msg, '\n'),
          "loading %s: '%s' should name %s and say '%s'", spec, err.msg, file, needle);
    model_free(m);
}

/* A safetensors file from a header text and a data size. */
static void write_st(const TmpDir *t, const char *name, const char *header, size_t header_len_field, size_t data_len) {
    char p[256];
    tmp_path(t, name, p, sizeof p);
    size_t hl = strlen(header), n = 8 + hl + data_len;
    unsigned char *buf = calloc(1, n);
    uint64_t v = header_len_field;
    memcpy(buf, &v, 8);
    memcpy(buf + 8, header, hl);
    write_bytes(p, buf, n);
    free(buf);
}

static void expect_st_fails(TestCounts *tc, const TmpDir *t, const char *name, const char *needle) {
    char p[256];
    tmp_path(t, name, p, sizeof p);
    SafeTensors *st = NULL;
    KvErr err = {{0}};
    int rc = st_open(&st, p, &err);
    CHECK(tc, rc == -1 && !st && strstr(err.msg, p) && strstr(err.msg, needle), "%s: '%s' should say '%s'", name,
          err.msg, needle);
    st_close(st);
}

static void test_bad_safetensors(TestCounts *tc, const TmpDir *t) {
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    write_st(t, "good.safetensors", ok, strlen(ok), 24);
    SafeTensors *st = NULL;
    KvErr err = {{0}};
    char p[256];
    tmp_path(t, "good.safetensors", p, sizeof p);
    CHECK(tc, st_open(&st, p, &err) == 0, "%s", err.msg);
    if (st) {
        const StTensor *w = st_find(st, "w");
        CHECK(tc, st_n_tensors(st) == 1 && w && w->ggml_type == 0 && w->n_dims == 2 && w->shape[1] == 3 &&
                      w->n_bytes == 24 && !st_find(st, "x"), "good.safetensors");
        st_close(st);
    }
    write_st(t, "cut_len.safetensors", "", 0, 0);
    tmp_path(t, "cut_len.safetensors", p, sizeof p);
    truncate(p, 5);
    expect_st_fails(tc, t, "cut_len.safetensors", "truncated");
    write_st(t, "cut_header.safetensors", ok, strlen(ok) + 40, 0);
    expect_st_fails(tc, t, "cut_header.safetensors", "truncated");
    write_st(t, "huge_header.safetensors", ok, (size_t)1 << 40, 0);
    expect_st_fails(tc, t, "huge_header.safetensors", "exceeds");
    const char *bad_json = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]";
    write_st(t, "bad_json.safetensors", bad_json, strlen(bad_json), 24);
    expect_st_fails(tc, t, "bad_json.safetensors", "not a valid JSON");
    const char *past = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]}}";
    write_st(t, "past_end.safetensors", past, strlen(past), 24);
    expect_st_fails(tc, t, "past_end.safetensors", "out of range");
    const char *neg = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[-8,16]}}";
    write_st(t, "negative.safetensors", neg, strlen(neg), 24);
    expect_st_fails(tc, t, "negative.safetensors", "data_offsets");
    const char *mism = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,24]}}";
    write_st(t, "size_mismatch.safetensors", mism, strlen(mism), 24);
    expect_st_fails(tc, t, "size_mismatch.safetensors", "need 32");
    const char *dt = "{\"w\":{\"dtype\":\"F7\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    write_st(t, "dtype.safetensors", dt, strlen(dt), 24);
    expect_st_fails(tc, t, "dtype.safetensors", "unknown dtype 'F7'");
    const char *noshape = "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,24]}}";
    write_st(t, "noshape.safetensors", noshape, strlen(noshape), 24);
    expect_st_fails(tc, t, "noshape.safetensors", "needs dtype, shape");
    tmp_clear(t);
}

static void test_bad_hf(TestCounts *tc, const TmpDir *t) {
    char p[256];
    const char *llama = "tests/data/hf_fixtures/llama", *mistral = "tests/data/hf_fixtures/mistral";
    expect_load_fails(tc, t->dir, "config.json", "cannot open");
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", "\"hidden_size\"", "\"hidden_sizes\"");
    expect_load_fails(tc, t->dir, "config.json", "missing key 'hidden_size'");
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", "\"num_attention_heads\": 4",
                 "\"num_attention_heads\": 3");
    expect_load_fails(tc, t->dir, "config.json", "not a multiple");
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", "\"vocab_size\": 80",
                 "\"vocab_size\": -80");
    expect_load_fails(tc, t->dir, "config.json", "vocab size -80 out of range");
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", "MistralForCausalLM", "GPT2LMHead");
    expect_load_fails(tc, t->dir, "config.json", "unsupported architecture 'GPT2LMHead'");
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", "{", "{{");
    expect_load_fails(tc, t->dir, "config.json", "not valid JSON (line 1)");
    copy_fixture(t, "tests/data/hf_fixtures/llama/config.json", "config.json", "\"llama3\"", "\"yarn\"");
    expect_load_fails(tc, t->dir, "config.json", "'yarn' is not supported");

    /* weights: no file at all, then an index naming a missing shard */
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", NULL, NULL);
    expect_load_fails(tc, t->dir, t->dir, "no model.safetensors");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", llama);
    copy_fixture(t, p, "model.safetensors.index.json", "model-00002-of-00002", "model-00003-of-00002");
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", llama);
    copy_fixture(t, p, "model-00001-of-00002.safetensors", NULL, NULL);
    copy_fixture(t, "tests/data/hf_fixtures/llama/config.json", "config.json", NULL, NULL);
    expect_load_fails(tc, t->dir, "model.safetensors.index.json", "shard 'model-00003-of-00002.safetensors' is missing");
    tmp_clear(t);

    /* a shard whose tensor has the wrong shape, and one with a dtype kvbench cannot load */
    copy_fixture(t, "tests/data/hf_fixtures/mistral/config.json", "config.json", "\"intermediate_size\": 96",
                 "\"intermediate_size\": 64");
    snprintf(p, sizeof p, "%s/model.safetensors", mistral);
    copy_fixture(t, p, "model.safetensors", NULL, NULL);
    expect_load_fails(tc, t->dir, "model.safetensors", "has shape [96, 64], expected [64, 64]");
    const char *i64 = "{\"model.embed_tokens.weight\":{\"dtype\":\"I64\",\"shape\":[80,64],\"data_offsets\":[0,40960]}}";
    write_st(t, "model.safetensors", i64, strlen(i64), 40960);
    expect_load_fails(tc, t->dir, "model.safetensors", "dtype I64");
    tmp_clear(t);
}

/* An index that names no shard, or no shard for a tensor, or a shard without the tensor, and config numbers past an
 * int: each refused with one line, by the full load and by the configuration-only load `kvbench info` uses. */
static void expect_both_fail(TestCounts *tc, const char *dir, const char *file, const char *needle) {
    expect_load_fails(tc, dir, file, needle);
    Model *m = NULL;
    KvErr err = {{0}};
    int rc = model_load_config(&m, dir, &err);
    CHECK(tc, rc == -1 && !m && strstr(err.msg, file) && strstr(err.msg, needle) && !strchr(err.msg, '\n'),
          "config-only load of %s: '%s' should name %s and say '%s'", dir, err.msg, file, needle);
    model_free(m);
}

static void test_bad_hf_index(TestCounts *tc, const TmpDir *t) {
    const char *llama = "tests/data/hf_fixtures/llama";
    char p[256];
    copy_fixture(t, "tests/data/hf_fixtures/llama/config.json", "config.json", NULL, NULL);
    for (int i = 1; i <= 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-0000%d-of-00002.safetensors", i);
        snprintf(p, sizeof p, "%s/%s", llama, name);
        copy_fixture(t, p, name, NULL, NULL);
    }
    tmp_path(t, "model.safetensors.index.json", p, sizeof p);
    static const struct { const char *index, *needle, *file; } cases[] = {
        {"{\"weight_map\":{}}", "weight_map names no tensor", NULL},
        {"{\"metadata\":{},\"weight_map\":[]}", "missing key 'weight_map'", NULL},
        {"{\"weight_map\":{\"model.norm.weight\":7}}", "weight_map entry 'model.norm.weight' is not a file name", NULL},
        {"{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\"}}",
         "no shard holds tensor 'model.embed_tokens.weight'", NULL},
        {"{\"weight_map\":{\"model.embed_tokens.weight\":\"model-00002-of-00002.safetensors\"}}",
         "missing tensor 'model.embed_tokens.weight' (model.safetensors.index.json places it in this shard)",
         "model-00002-of-00002.safetensors"},
        {"{\"weight_map\":{\"x\":\"../config.json\"}}", "is not a plain file name", NULL},
        {"{\"weight_map\":{\"x\":\"config.json\"}}", "header length", "config.json"},
        {"[]", "not a valid JSON object", NULL},
        {"{\"weight_map\":{\"x\":\"model-00001-of", "not valid JSON (line 1)", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_bytes(p, cases[i].index, strlen(cases[i].index));
        expect_both_fail(tc, t->dir, cases[i].file ? cases[i].file : "model.safetensors.index.json", cases[i].needle);
    }
    /* config.json numbers past an int: out of range, not "not an integer" (and no undefined conversion) */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", llama);
    copy_fixture(t, p, "model.safetensors.index.json", NULL, NULL);
    static const struct { const char *from, *to, *needle; } nums[] = {
        {"\"hidden_size\": 64", "\"hidden_size\": 1099511627776", "key 'hidden_size' = 1.09951e+12 is out of range"},
        {"\"hidden_size\": 64", "\"hidden_size\": -1e300", "key 'hidden_size' = -1e+300 is out of range"},
        {"\"hidden_size\": 64", "\"hidden_size\": 64.5", "key 'hidden_size' is not an integer"},
        {"\"vocab_size\": 80", "\"vocab_size\": 1e999", "key 'vocab_size' = inf is out of range"},
        {"\"eos_token_id\": 2", "\"eos_token_id\": 1e20", "eos_token_id = 1e+20 is out of range"},
        {"\"eos_token_id\": 2", "\"eos_token_id\": [2, -3e10]", "an eos_token_id list entry = -3e+10 is out of range"},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        KvErr err;
        char *text = kv_read_file("tests/data/hf_fixtures/llama/config.json", NULL, &err);
        int present = text && strstr(text, nums[i].from);
        free(text);
        CHECK(tc, present, "fixture config.json has no '%s'", nums[i].from);
        copy_fixture(t, "tests/data/hf_fixtures/llama/config.json", "config.json", nums[i].from, nums[i].to);
        expect_both_fail(tc, t->dir, "config.json", nums[i].needle);
    }
    tmp_clear(t);
}

/* A GGUF of a few hundred bytes whose metadata claims a model of terabytes: refused for its tensor shapes before
 * any arena is allocated (were the arena reserved first, the user would read "out of memory" instead). */
typedef struct {
    unsigned char buf[1024];
    size_t n;
} GgufBytes;

static void gb_put(GgufBytes *b, const void *p, size_t n) {
    if (b->n + n <= sizeof b->buf) memcpy(b->buf + b->n, p, n);
    b->n += n;
}
static void gb_u32(GgufBytes *b, uint32_t v) { gb_put(b, &v, 4); }
static void gb_u64(GgufBytes *b, uint64_t v) { gb_put(b, &v, 8); }
static void gb_str(GgufBytes *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}
static void gb_kv_u32(GgufBytes *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, 4 /* GGUF_TYPE_UINT32 */);
    gb_u32(b, v);
}

static void test_gguf_claims_huge_model(TestCounts *tc, const TmpDir *t) {
    GgufBytes b = {.n = 0};
    gb_put(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, 1);  /* tensors */
    gb_u64(&b, 9);  /* metadata */
    gb_str(&b, "general.architecture");
    gb_u32(&b, 8 /* GGUF_TYPE_STRING */);
    gb_str(&b, "llama");
    gb_kv_u32(&b, "llama.block_count", 1024);
    gb_kv_u32(&b, "llama.embedding_length", 65536);
    gb_kv_u32(&b, "llama.feed_forward_length", 262144);
    gb_kv_u32(&b, "llama.attention.head_count", 64);
    gb_kv_u32(&b, "llama.context_length", 4096);
    gb_kv_u32(&b, "llama.vocab_size", 1u << 24);
    gb_kv_u32(&b, "llama.attention.head_count_kv", 64);
    gb_str(&b, "llama.attention.layer_norm_rms_epsilon");
    gb_u32(&b, 6 /* GGUF_TYPE_FLOAT32 */);
    float eps = 1e-5f;
    gb_put(&b, &eps, 4);
    gb_str(&b, "token_embd.weight");
    gb_u32(&b, 2);
    gb_u64(&b, 4);
    gb_u64(&b, 4);
    gb_u32(&b, 0 /* f32 */);
    gb_u64(&b, 0);
    while (b.n % 32) gb_put(&b, "", 1);
    float data[16] = {0};
    gb_put(&b, data, sizeof data);
    CHECK(tc, b.n <= sizeof b.buf, "GgufBytes too small for %zu bytes", b.n);
    char p[256];
    tmp_path(t, "huge.gguf", p, sizeof p);
    write_bytes(p, b.buf, b.n);
    expect_load_fails(tc, p, "huge.gguf", "'token_embd.weight' has shape [4, 4], expected [65536, 16777216]");
    Model *m = NULL;
    KvErr err = {{0}};
    CHECK(tc, model_load_config(&m, p, &err) == -1 && strstr(err.msg, "has shape [4, 4]"), "config-only: %s", err.msg);
    model_free(m);
    tmp_clear(t);
}

static void test_bad_gguf_model(TestCounts *tc, const TmpDir *t, const cJSON *exp) {
    KvErr err;
    size_t size;
    unsigned char *orig = (unsigned char *)kv_read_file(TEST_DATA("gguf/tiny_llama.gguf"), &size, &err);
    const cJSON *off = item(item(exp, "llama"), "offsets");
    if (!orig || !off) {
        CHECK(tc, 0, "tiny_llama fixtures");
        free(orig);
        return;
    }
    unsigned char *b = malloc(size);
    char p[256];
    tmp_path(t, "model.gguf", p, sizeof p);

    /* a required key renamed in place (same length, so the file stays well-formed) */
    memcpy(b, orig, size);
    unsigned char *k = memmem(b, size, "llama.block_count", 17);
    if (k) k[16] = 'X';
    write_bytes(p, b, size);
    expect_load_fails(tc, p, "model.gguf", "missing metadata key 'llama.block_count'");

    memcpy(b, orig, size);
    k = memmem(b, size, "llama.attention.layer_norm_rms_epsilon", 38);
    if (k) k[0] = 'X';
    write_bytes(p, b, size);
    expect_load_fails(tc, p, "model.gguf", "layer_norm_rms_epsilon");

    /* attn_q claims 32 rows instead of 64: still inside the file, but not the model's shape */
    memcpy(b, orig, size);
    uint64_t rows = 32;
    memcpy(b + (long)num(off, "attn_q_ne1"), &rows, 8);
    write_bytes(p, b, size);
    expect_load_fails(tc, p, "model.gguf", "'blk.0.attn_q.weight' has shape [64, 32], expected [64, 64]");

    /* a valid ggml type kvbench does not dequantise (mxfp4: 17-byte blocks of 32, so the data still fits),
     * refused while planning, before the arena, by the full load and by the config-only load of `kvbench info` */
    memcpy(b, orig, size);
    uint32_t mxfp4 = 39;
    memcpy(b + (long)num(off, "attn_q_type"), &mxfp4, 4);
    write_bytes(p, b, size);
    const char *unreadable = "tensor 'blk.0.attn_q.weight' has type mxfp4, which kvbench cannot read (it reads f32, "
                             "f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, bf16)";
    expect_load_fails(tc, p, "model.gguf", unreadable);
    Model *m = NULL;
    CHECK(tc, model_load_config(&m, p, &err) == -1 && strstr(err.msg, unreadable), "config-only: %s", err.msg);

    memcpy(b, orig, size);
    k = memmem(b, size, "general.architecture", 20);
    unsigned char *v = k ? memmem(k, 64, "llama", 5) : NULL;
    if (v) memcpy(v, "gemma", 5);
    write_bytes(p, b, size);
    expect_load_fails(tc, p, "model.gguf", "unsupported architecture 'gemma'");

    write_bytes(p, orig, 100);
    expect_load_fails(tc, p, "model.gguf", "truncated");
    expect_load_fails(tc, "tests/data/gguf/nope.gguf", "nope.gguf", "cannot open");
    expect_load_fails(tc, "tests/data/gguf/tiny_expected.json", "tiny_expected.json", "not a .gguf file");
    tmp_clear(t);
    free(b);
    free(orig);
}

int main(void) {
    TestCounts tc = {"test_model_load", 0, 0, 0};
    cJSON *gexp = load_json(TEST_DATA("gguf/tiny_expected.json"));
    cJSON *hexp = load_json(TEST_DATA("hf_fixtures/expected.json"));
    CHECK(&tc, gexp && hexp, "expected-value files");
    if (gexp) {
        test_tiny_gguf(&tc, gexp, "llama", TEST_DATA("gguf/tiny_llama.gguf"));
        test_tiny_gguf(&tc, gexp, "qwen2", TEST_DATA("gguf/tiny_qwen2.gguf"));
        test_q5_gguf(&tc, gexp);
    }
    if (hexp) {
        test_hf(&tc, hexp, "llama");
        test_hf(&tc, hexp, "qwen2");
        test_hf(&tc, hexp, "mistral");
    }
    test_smollm2(&tc);
    test_synthetic(&tc);
    TmpDir t = {"/tmp/kvbench_model_XXXXXX"};
    if (mkdtemp(t.dir)) {
        test_bad_safetensors(&tc, &t);
        test_bad_hf(&tc, &t);
        test_bad_hf_index(&tc, &t);
        test_gguf_claims_huge_model(&tc, &t);
        if (gexp) test_bad_gguf_model(&tc, &t, gexp);
        tmp_clear(&t);
        rmdir(t.dir);
    }
    cJSON_Delete(gexp);
    cJSON_Delete(hexp);
    return test_finish(&tc);
}
