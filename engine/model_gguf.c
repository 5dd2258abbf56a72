/* model_gguf.c — a Llama / Mistral / Qwen2 model from a GGUF file (llama.cpp's format).
 *
 * Hyper-parameters come from the `<arch>.*` keys (arch = general.architecture: llama or qwen2), weights are
 * dequantised to f32 straight into the arena, row by row, so the Q/K row permutation of llama.cpp's
 * converter is undone for free on the way (spec models.md §1.9: GGUF row 2i of a head is HF row i, row 2i+1
 * is HF row i + d/2). Qwen2 GGUFs use NEOX RoPE and are not permuted. Llama-3.1's RoPE scaling arrives as a
 * tensor of per-frequency divisors (rope_freqs.weight). The file is unmapped before returning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf.h"
#include "model_internal.h"
#include "tokenizer.h"

/* Reads "<arch>.<key>" as an int; absent optional keys leave *out unchanged. */
static int arch_u32(const GgufFile *g, const char *arch, const char *key, int required, int *out, KvErr *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!required && !gguf_has(g, full)) return 0;
    uint32_t v;
    if (gguf_get_u32(g, full, &v, err)) return -1;
    if (v > (1u << 30)) return kv_fail(err, "%s: %s = %u out of range", gguf_path(g), full, v);
    *out = (int)v;
    return 0;
}

static int arch_f32(const GgufFile *g, const char *arch, const char *key, int required, float *out, KvErr *err) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!required && !gguf_has(g, full)) return 0;
    return gguf_get_f32(g, full, out, err);
}

static int optional_token(const GgufFile *g, const char *key, int *out, KvErr *err) {
    *out = -1;
    uint32_t v;
    if (!gguf_has(g, key)) return 0;
    if (gguf_get_u32(g, key, &v, err)) return -1;
    *out = (int)v;
    return 0;
}

static int read_config(const GgufFile *g, Model *m, KvErr *err) {
    ModelConfig *c = &m->cfg;
    const char *path = gguf_path(g), *s;
    size_t len;
    if (gguf_get_str(g, "general.architecture", &s, &len, err)) return -1;
    char arch[16];
    if (len == 5 && !memcmp(s, "llama", 5)) c->arch = ARCH_LLAMA;
    else if (len == 5 && !memcmp(s, "qwen2", 5)) c->arch = ARCH_QWEN2;
    else return kv_fail(err, "%s: unsupported architecture '%.*s' (kvbench loads llama and qwen2)", path,
                        (int)(len < 32 ? len : 32), s);
    snprintf(arch, sizeof arch, "%.*s", (int)len, s);

    const char *file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (gguf_has(g, "general.name") && !gguf_get_str(g, "general.name", &s, &len, err))
        snprintf(m->name, sizeof m->name, "%.*s", (int)len, s);
    else
        snprintf(m->name, sizeof m->name, "%.*s", (int)(strlen(file) - 5), file);
    /* Mistral is a Llama-architecture model to llama.cpp; only the name tells them apart. */
    for (char *p = m->name; c->arch == ARCH_LLAMA && *p; p++)
        if (!strncasecmp(p, "mistral", 7)) c->arch = ARCH_MISTRAL;

    c->rope_theta = 10000.0f;
    if (arch_u32(g, arch, "block_count", 1, &c->n_layers, err) ||
        arch_u32(g, arch, "embedding_length", 1, &c->d_model, err) ||
        arch_u32(g, arch, "feed_forward_length", 1, &c->d_ff, err) ||
        arch_u32(g, arch, "attention.head_count", 1, &c->n_heads, err) ||
        arch_u32(g, arch, "context_length", 1, &c->max_context, err) ||
        arch_f32(g, arch, "attention.layer_norm_rms_epsilon", 1, &c->rms_eps, err) ||
        arch_f32(g, arch, "rope.freq_base", 0, &c->rope_theta, err))
        return -1;
    c->n_kv_heads = c->n_heads;
    c->head_dim = c->n_heads > 0 ? c->d_model / c->n_heads : 0;
    if (arch_u32(g, arch, "attention.head_count_kv", 0, &c->n_kv_heads, err) ||
        arch_u32(g, arch, "attention.key_length", 0, &c->head_dim, err))
        return -1;
    int value_dim = c->head_dim, rope_dim = c->head_dim;
    if (arch_u32(g, arch, "attention.value_length", 0, &value_dim, err) ||
        arch_u32(g, arch, "rope.dimension_count", 0, &rope_dim, err))
        return -1;
    if (value_dim != c->head_dim)
        return kv_fail(err, "%s: key length %d != value length %d (not supported)", path, c->head_dim, value_dim);
    if (rope_dim != c->head_dim)
        return kv_fail(err, "%s: rope.dimension_count %d != head dim %d (partial RoPE is not supported)", path,
                       rope_dim, c->head_dim);
    char scaling_key[64];
    snprintf(scaling_key, sizeof scaling_key, "%s.rope.scaling.type", arch);
    if (gguf_has(g, scaling_key)) {
        if (gguf_get_str(g, scaling_key, &s, &len, err)) return -1;
        if (!(len == 4 && !memcmp(s, "none", 4)))
            return kv_fail(err, "%s: RoPE scaling '%.*s' is not supported (only Llama-3.1's, via rope_freqs)", path,
                           (int)(len < 32 ? len : 32), s);
    }

    const GgufTensor *embd = gguf_find_tensor(g, "token_embd.weight");
    if (!embd) return kv_fail(err, "%s: missing tensor 'token_embd.weight'", path);
    c->vocab_size = (int)(embd->ne[1] < (1u << 30) ? embd->ne[1] : 0);
    if (arch_u32(g, arch, "vocab_size", 0, &c->vocab_size, err)) return -1;
    c->tied_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    c->qkv_bias = c->arch == ARCH_QWEN2 || gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    if (gguf_find_tensor(g, "blk.0.attn_output.bias"))
        return kv_fail(err, "%s: attention output bias is not supported", path);

    int eos, eot, eom;
    if (optional_token(g, "tokenizer.ggml.bos_token_id", &c->bos_id, err) ||
        optional_token(g, "tokenizer.ggml.eos_token_id", &eos, err) ||
        optional_token(g, "tokenizer.ggml.eot_token_id", &eot, err) ||
        optional_token(g, "tokenizer.ggml.eom_token_id", &eom, err))
        return -1;
    model_add_eos(c, eos);
    model_add_eos(c, eot);
    model_add_eos(c, eom);
    /* llama.cpp's default: SentencePiece vocabularies add BOS, byte-level BPE ones do not. */
    const char *tok_model = "";
    size_t tok_len = 0;
    if (gguf_has(g, "tokenizer.ggml.model") && gguf_get_str(g, "tokenizer.ggml.model", &tok_model, &tok_len, err))
        return -1;
    c->add_bos = tok_len == 5 && !memcmp(tok_model, "llama", 5);
    if (gguf_has(g, "tokenizer.ggml.add_bos_token") && gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &c->add_bos, err))
        return -1;
    if (c->bos_id < 0) c->add_bos = 0;

    const char *tmpl = NULL;
    size_t tmpl_len = 0;
    if (gguf_has(g, "tokenizer.chat_template") && gguf_get_str(g, "tokenizer.chat_template", &tmpl, &tmpl_len, err))
        return -1;
    c->chat = model_chat_format(c->arch, m->name, tmpl, tmpl_len);
    return model_check_config(c, path, err);
}

static int shape_error(const GgufFile *g, const GgufTensor *t, const WeightRef *w, KvErr *err) {
    char got[96] = "", want[64];
    for (int i = 0; i < t->n_dims; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "", (unsigned long long)t->ne[i]);
    if (w->n_dims == 1) snprintf(want, sizeof want, "%llu", (unsigned long long)w->cols);
    else snprintf(want, sizeof want, "%llu, %llu", (unsigned long long)w->cols, (unsigned long long)w->rows);
    return kv_fail(err, "%s: tensor '%s' has shape [%s], expected [%s]", gguf_path(g), t->name, got, want);
}

/* Finds and checks the tensor of a WeightRef and describes its conversion. */
static int plan_tensor(void *source, const WeightRef *w, int index, TensorCopy *c, KvErr *err) {
    const GgufFile *g = source;
    (void)index;
    const GgufTensor *t = gguf_find_tensor(g, w->gguf_name);
    if (!t) return kv_fail(err, "%s: missing tensor '%s'", gguf_path(g), w->gguf_name);
    int ok = t->n_dims == w->n_dims && t->ne[0] == w->cols && t->ne[1] == w->rows && t->ne[2] == 1 && t->ne[3] == 1;
    if (!ok) return shape_error(g, t, w, err);
    char why[384];
    if (ggml_unreadable(t->type, why, sizeof why))
        return kv_fail(err, "%s: tensor '%s' has %s", gguf_path(g), t->name, why);
    *c = (TensorCopy){.data = t->data, .type = t->type, .rows = w->rows, .cols = w->cols, .perm_heads = w->perm_heads,
                      .dst = w->dst};
    /* A permuted bias is a column of single-element rows. */
    if (w->perm_heads && w->n_dims == 1) c->rows = w->cols, c->cols = 1;
    c->row_bytes = ggml_type_bytes(t->type, c->cols);
    if (!c->row_bytes)
        return kv_fail(err, "%s: tensor '%s' of type %s cannot be split into rows of %llu", gguf_path(g), t->name,
                       ggml_type_name(t->type), (unsigned long long)c->cols);
    return model_copy_check(c, gguf_path(g), t->name, err);
}

/* inv_freq[i] = theta^(-2i/d) / rope_freqs[i] (ggml divides the angle by the factor). */
static int load_rope(const GgufFile *g, Model *m, KvErr *err) {
    ModelConfig *c = &m->cfg;
    model_rope_inv_freq(c, m->rope_inv_freq);
    const GgufTensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    if (!t) return 0;
    int half = c->head_dim / 2;
    if (t->type != GGML_F32 || t->n_dims != 1 || t->ne[0] != (uint64_t)half)
        return kv_fail(err, "%s: tensor 'rope_freqs.weight' must be f32 [%d], is %s [%llu]", gguf_path(g), half,
                       ggml_type_name(t->type), (unsigned long long)t->ne[0]);
    float max_factor = 1.0f;
    for (int i = 0; i < half; i++) {
        float f;
        memcpy(&f, t->data + 4 * i, 4);
        if (!(f > 0)) return kv_fail(err, "%s: rope_freqs.weight[%d] = %g is not positive", gguf_path(g), i, f);
        m->rope_inv_freq[i] /= f;
        if (f > max_factor) max_factor = f;
    }
    /* The divisors do not record Llama-3.1's low/high/original parameters; keep the factor for `info`. */
    c->rope_scaling = 1;
    c->rope_factor = max_factor;
    return 0;
}

int model_load_gguf(Model *m, const char *path, const WeightFill *fill, KvErr *err) {
    GgufFile *g = NULL;
    if (gguf_open(&g, path, err)) return -1;
    int rc = -1;
    if (read_config(g, m, err) || model_fill_weights(m, fill, plan_tensor, g, err) || load_rope(g, m, err))
        goto done;
    /* A second read that only streams the weights needs no tokenizer. */
    if (fill->mode != FILL_VISIT && gguf_has(g, "tokenizer.ggml.model")) {
        if (tokenizer_load_gguf(&m->tokenizer, g, err)) goto done;
        const char *s, *pre = "";
        size_t len, pre_len = 0;
        gguf_get_str(g, "tokenizer.ggml.model", &s, &len, NULL);
        if (gguf_has(g, "tokenizer.ggml.pre")) gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len, NULL);
        snprintf(m->tokenizer_kind, sizeof m->tokenizer_kind, "gguf %.*s%s%.*s%s", (int)(len < 16 ? len : 16), s,
                 pre_len ? " (pre " : "", (int)(pre_len < 16 ? pre_len : 16), pre, pre_len ? ")" : "");
    }
    rc = 0;
done:
    gguf_close(g);
    return rc;
}
