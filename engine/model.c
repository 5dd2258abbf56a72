/* model.c — model_load's dispatch, the one-arena weight layout shared by every source, named shapes,
 * RoPE frequencies and `kvbench info`'s summary.
 *
 * Every source (model_gguf.c, model_hf.c, model_synthetic.c) reads a ModelConfig and hands model_fill_weights
 * a way to convert one weight — so the layout, the tensor inventory and the three ways to fill (arena, none,
 * one at a time to a backend) live here once.
 * Shape legend as in model.h. */
#include "model.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h> /* malloc_trim */

/* Under AddressSanitizer the heap is the sanitizer's: glibc's malloc_trim then releases memory LeakSanitizer
 * still reads at exit (its tracer crashes on a stale dynamic-TLS entry), so the trim is left out there. */
#if defined(__SANITIZE_ADDRESS__)
#define KVBENCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVBENCH_ASAN 1
#endif
#endif
#endif

#include "chat.h"
#include "gguf.h"
#include "model_internal.h"
#include "tokenizer.h"

#define ARENA_ALIGN 64   /* bytes; every tensor starts on a cache line (and a SIMD / cuBLAS friendly address) */

/* ---------------------------------------------------------------------------------------------------------
 * Named shapes (spec models.md §2.3). */

typedef struct {
    const char *name;
    ModelConfig cfg;
    int eos[3];
} NamedShape;

static const NamedShape SHAPES[] = {
    {"smollm2-135m",
     {.arch = ARCH_LLAMA, .n_layers = 30, .d_model = 576, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64,
      .d_ff = 1536, .vocab_size = 49152, .max_context = 8192, .rope_theta = 100000.0f, .rms_eps = 1e-5f,
      .tied_embeddings = 1, .bos_id = 1, .add_bos = 0, .chat = CHAT_SMOLLM2},
     {2, -1, -1}},
    {"llama-3.1-8b",
     {.arch = ARCH_LLAMA, .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
      .d_ff = 14336, .vocab_size = 128256, .max_context = 131072, .rope_theta = 500000.0f, .rms_eps = 1e-5f,
      .rope_scaling = 1, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
      .rope_original_max_pos = 8192, .bos_id = 128000, .add_bos = 1, .chat = CHAT_LLAMA3},
     {128001, 128008, 128009}},
    {"mistral-7b-v0.3",
     {.arch = ARCH_MISTRAL, .n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
      .d_ff = 14336, .vocab_size = 32768, .max_context = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
      .bos_id = 1, .add_bos = 1, .chat = CHAT_MISTRAL},
     {2, -1, -1}},
    {"qwen2.5-32b",
     {.arch = ARCH_QWEN2, .n_layers = 64, .d_model = 5120, .n_heads = 40, .n_kv_heads = 8, .head_dim = 128,
      .d_ff = 27648, .vocab_size = 152064, .max_context = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
      .qkv_bias = 1, .bos_id = -1, .add_bos = 0, .chat = CHAT_QWEN2},
     {151645, 151643, -1}},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

int model_shape_by_name(const char *shape, ModelConfig *cfg, KvErr *err) {
    for (size_t i = 0; i < N_SHAPES; i++) {
        if (strcmp(shape, SHAPES[i].name)) continue;
        *cfg = SHAPES[i].cfg;
        for (int e = 0; e < 3; e++) model_add_eos(cfg, SHAPES[i].eos[e]);
        return 0;
    }
    char names[256] = "";
    for (size_t i = 0; i < N_SHAPES; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", SHAPES[i].name);
    return kv_fail(err, "unknown model shape '%s' (known: %s)", shape, names);
}

void model_add_eos(ModelConfig *cfg, int id) {
    if (id < 0 || id >= cfg->vocab_size) return;
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == id) return;
    if (cfg->n_eos < (int)(sizeof cfg->eos_ids / sizeof cfg->eos_ids[0])) cfg->eos_ids[cfg->n_eos++] = id;
}

int model_check_config(const ModelConfig *c, const char *source, KvErr *err) {
    struct { const char *what; long v, lo, hi; } ranges[] = {
        {"layer count", c->n_layers, 1, 1024},       {"hidden size", c->d_model, 1, 1 << 16},
        {"attention heads", c->n_heads, 1, 1024},    {"kv heads", c->n_kv_heads, 1, 1024},
        {"head dim", c->head_dim, 2, 1024},          {"feed-forward size", c->d_ff, 1, 1 << 18},
        {"vocab size", c->vocab_size, 1, 1 << 24},   {"context length", c->max_context, 1, 1 << 30},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (ranges[i].v < ranges[i].lo || ranges[i].v > ranges[i].hi)
            return kv_fail(err, "%s: %s %ld out of range [%ld, %ld]", source, ranges[i].what, ranges[i].v,
                           ranges[i].lo, ranges[i].hi);
    if (c->n_heads % c->n_kv_heads)
        return kv_fail(err, "%s: %d attention heads is not a multiple of %d kv heads", source, c->n_heads,
                       c->n_kv_heads);
    if (c->head_dim % 2) return kv_fail(err, "%s: head dim %d is odd (RoPE rotates pairs)", source, c->head_dim);
    if (!(c->rope_theta > 0) || !(c->rms_eps > 0) || !(c->rms_eps < 1))
        return kv_fail(err, "%s: rope theta %g / rms eps %g out of range", source, c->rope_theta, c->rms_eps);
    if (c->rope_scaling &&
        (!(c->rope_factor >= 1) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
         !(c->rope_low_freq_factor > 0) || c->rope_original_max_pos <= 0))
        return kv_fail(err, "%s: llama3 rope scaling parameters out of range (factor %g, low %g, high %g, "
                            "original context %d)", source, c->rope_factor, c->rope_low_freq_factor,
                       c->rope_high_freq_factor, c->rope_original_max_pos);
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * The arena: laid out twice with the same code, once to measure (base NULL) and once to point. */

static float *carve(char *base, size_t *off, size_t n_floats) {
    size_t at = (*off + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    *off = at + n_floats * sizeof(float);
    return base ? (float *)(base + at) : NULL;
}

static void layout(Model *m, int weights, char *base, size_t *off) {
    const ModelConfig *c = &m->cfg;
    size_t D = (size_t)c->d_model, V = (size_t)c->vocab_size, F = (size_t)c->d_ff;
    size_t q = (size_t)c->n_heads * c->head_dim, kv = (size_t)c->n_kv_heads * c->head_dim;
    *off = weights ? (size_t)c->n_layers * sizeof(LayerWeights) : 0;
    m->layers = base && weights ? (LayerWeights *)base : NULL;
    m->rope_inv_freq = carve(base, off, (size_t)c->head_dim / 2);
    if (!weights) return;
    m->tok_embd = carve(base, off, V * D);
    m->out_norm = carve(base, off, D);
    m->lm_head = c->tied_embeddings ? m->tok_embd : carve(base, off, V * D);
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights w = {0};
        w.attn_norm = carve(base, off, D);
        w.wq = carve(base, off, q * D);
        w.wk = carve(base, off, kv * D);
        w.wv = carve(base, off, kv * D);
        w.wo = carve(base, off, D * q);
        if (c->qkv_bias) {
            w.bq = carve(base, off, q);
            w.bk = carve(base, off, kv);
            w.bv = carve(base, off, kv);
        }
        w.ffn_norm = carve(base, off, D);
        w.w_gate = carve(base, off, F * D);
        w.w_up = carve(base, off, F * D);
        w.w_down = carve(base, off, D * F);
        if (base) m->layers[l] = w;
    }
}

int model_alloc(Model *m, int weights, KvErr *err) {
    size_t bytes = 0;
    layout(m, weights, NULL, &bytes);
    void *arena = NULL;
    if (posix_memalign(&arena, ARENA_ALIGN, bytes))
        return kv_fail(err, "%s: out of memory allocating %.2f GB of weights", m->source, bytes / 1e9);
    m->arena = arena;
    m->arena_bytes = bytes;
    m->has_host_weights = weights;
    layout(m, weights, arena, &bytes);
    return 0;
}

static void add_ref(WeightRef *r, int *n, float *dst, uint64_t rows, uint64_t cols, int n_dims, int perm_heads,
                    int is_norm, WeightRole role, int layer, const char *gguf, const char *hf) {
    WeightRef *w = &r[(*n)++];
    *w = (WeightRef){.dst = dst, .rows = rows, .cols = cols, .n_dims = n_dims, .perm_heads = perm_heads,
                     .is_norm = is_norm, .role = role, .layer = layer};
    snprintf(w->gguf_name, sizeof w->gguf_name, "%s", gguf);
    snprintf(w->hf_name, sizeof w->hf_name, "%s", hf);
}

int model_weight_refs(const Model *m, WeightRef **out, int *n_out, KvErr *err) {
    const ModelConfig *c = &m->cfg;
    uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab_size, F = (uint64_t)c->d_ff;
    uint64_t q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    int hq = c->arch != ARCH_QWEN2 ? c->n_heads : 0;  /* llama.cpp permutes Q/K rows for LLAMA only */
    int hk = c->arch != ARCH_QWEN2 ? c->n_kv_heads : 0;
    WeightRef *r = kv_malloc((3 + (size_t)c->n_layers * 12) * sizeof *r, err);
    if (!r) return -1;
    int n = 0;
    add_ref(r, &n, m->tok_embd, V, D, 2, 0, 0, WEIGHT_TOK_EMBD, -1, "token_embd.weight", "model.embed_tokens.weight");
    add_ref(r, &n, m->out_norm, 1, D, 1, 0, 1, WEIGHT_OUT_NORM, -1, "output_norm.weight", "model.norm.weight");
    if (!c->tied_embeddings)
        add_ref(r, &n, m->lm_head, V, D, 2, 0, 0, WEIGHT_LM_HEAD, -1, "output.weight", "lm_head.weight");
    for (int l = 0; l < c->n_layers; l++) {
        const LayerWeights none = {0}, *w = m->layers ? &m->layers[l] : &none;  /* no arena: dst NULL */
        const struct {
            float *dst;
            uint64_t rows, cols;
            int n_dims, perm_heads, is_norm;
            WeightRole role;
            const char *gguf, *hf;
        } t[] = {
            {w->attn_norm, 1, D, 1, 0, 1, WEIGHT_ATTN_NORM, "attn_norm.weight", "input_layernorm.weight"},
            {w->wq, q, D, 2, hq, 0, WEIGHT_Q, "attn_q.weight", "self_attn.q_proj.weight"},
            {w->wk, kv, D, 2, hk, 0, WEIGHT_K, "attn_k.weight", "self_attn.k_proj.weight"},
            {w->wv, kv, D, 2, 0, 0, WEIGHT_V, "attn_v.weight", "self_attn.v_proj.weight"},
            {w->wo, D, q, 2, 0, 0, WEIGHT_O, "attn_output.weight", "self_attn.o_proj.weight"},
            {w->bq, 1, q, 1, hq, 0, WEIGHT_Q_BIAS, "attn_q.bias", "self_attn.q_proj.bias"},
            {w->bk, 1, kv, 1, hk, 0, WEIGHT_K_BIAS, "attn_k.bias", "self_attn.k_proj.bias"},
            {w->bv, 1, kv, 1, 0, 0, WEIGHT_V_BIAS, "attn_v.bias", "self_attn.v_proj.bias"},
            {w->ffn_norm, 1, D, 1, 0, 1, WEIGHT_FFN_NORM, "ffn_norm.weight", "post_attention_layernorm.weight"},
            {w->w_gate, F, D, 2, 0, 0, WEIGHT_GATE, "ffn_gate.weight", "mlp.gate_proj.weight"},
            {w->w_up, F, D, 2, 0, 0, WEIGHT_UP, "ffn_up.weight", "mlp.up_proj.weight"},
            {w->w_down, D, F, 2, 0, 0, WEIGHT_DOWN, "ffn_down.weight", "mlp.down_proj.weight"},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            int is_bias = t[i].role == WEIGHT_Q_BIAS || t[i].role == WEIGHT_K_BIAS || t[i].role == WEIGHT_V_BIAS;
            if (is_bias && !c->qkv_bias) continue;
            char g[64], h[96];
            snprintf(g, sizeof g, "blk.%d.%s", l, t[i].gguf);
            snprintf(h, sizeof h, "model.layers.%d.%s", l, t[i].hf);
            add_ref(r, &n, t[i].dst, t[i].rows, t[i].cols, t[i].n_dims, t[i].perm_heads, t[i].is_norm, t[i].role,
                    l, g, h);
        }
    }
    *out = r;
    *n_out = n;
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * Converting source tensors into the arena. */

/* Source row of HF row r when llama.cpp's converter interleaved each head's rows (spec models.md §1.9):
 * HF row i < d/2 of a head is GGUF row 2i, HF row i + d/2 is GGUF row 2i + 1. */
static uint64_t source_row(uint64_t r, int heads, uint64_t n_rows) {
    if (!heads) return r;
    uint64_t d = n_rows / (uint64_t)heads, h = r / d, i = r % d;
    return h * d + (i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1);
}

int model_copy_check(const TensorCopy *c, const char *source, const char *tensor, KvErr *err) {
    /* Into a row of its own: the check runs while planning, before the arena exists. */
    float *row = kv_malloc((size_t)c->cols * sizeof *row, err);
    if (!row) return kv_wrap(err, "%s: tensor '%s'", source, tensor);
    int rc = ggml_dequantize(c->type, c->data + source_row(0, c->perm_heads, c->rows) * c->row_bytes, row, c->cols,
                             err);
    free(row);
    return rc ? kv_wrap(err, "%s: tensor '%s'", source, tensor) : 0;
}

void model_copy_all(const TensorCopy *copies, int n) {
    #pragma omp parallel
    for (int t = 0; t < n; t++) {
        const TensorCopy *c = &copies[t];
        #pragma omp for schedule(static) nowait
        for (uint64_t r = 0; r < c->rows; r++) {
            float *dst = c->dst + r * c->cols;
            if (c->source == COPY_SYNTHETIC_ONES)
                for (uint64_t i = 0; i < c->cols; i++) dst[i] = 1.0f;
            else if (c->source == COPY_SYNTHETIC_RANDOM)
                model_synthetic_values(dst, r * c->cols, c->cols, c->seed, c->tensor);
            else
                ggml_dequantize(c->type, c->data + source_row(r, c->perm_heads, c->rows) * c->row_bytes, dst, c->cols,
                                NULL);
        }
    }
}

/* Drops the pages of a mapped source tensor once it has been handed over (FILL_VISIT): a file-backed mapping
 * read once stays resident until unmapped, so a backend keeping its own copy of every tensor would otherwise
 * hold the file twice at the end of its load (madvise on a read-only private mapping: the pages are read again
 * if touched, never lost). */
static void release_source(const TensorCopy *c) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    if (c->source != COPY_FROM_DATA || !c->data) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)c->data & ~(page - 1),
              hi = ((uintptr_t)c->data + c->rows * c->row_bytes + page - 1) & ~(page - 1);
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
    (void)c;
#endif
}

/* Offers matrix w, read from a source tensor of a quantised block type, to fill->blocks as its rows of blocks
 * (a permuted GGUF Q/K put back in order in a buffer of its own). 1 when the visitor kept it, 0 when it is to be
 * handed over in f32, -1 on an error. */
static int offer_blocks(const WeightFill *fill, const TensorCopy *c, const WeightRef *w, const char *source,
                        KvErr *err) {
    const GgmlTypeTraits *t = c->source == COPY_FROM_DATA ? ggml_type_traits(c->type) : NULL;
    if (!fill->blocks || !t || !t->dequant || t->block < 2 || w->n_dims != 2) return 0;
    const uint8_t *data = c->data;
    uint8_t *rows = NULL;
    if (c->perm_heads) {
        if (!(rows = kv_malloc(c->rows * c->row_bytes, err)))
            return kv_wrap(err, "%s: tensor '%s': a buffer for its rows", source, w->gguf_name);
        for (uint64_t r = 0; r < c->rows; r++)
            memcpy(rows + r * c->row_bytes, c->data + source_row(r, c->perm_heads, c->rows) * c->row_bytes, c->row_bytes);
        data = rows;
    }
    int rc = fill->blocks(fill->user, w->role, w->layer, c->type, data, c->rows, c->cols, c->row_bytes, err);
    free(rows);
    return rc < 0 ? -1 : rc == 0;
}

int model_fill_weights(Model *m, const WeightFill *fill, PlanTensor plan, void *source, KvErr *err) {
    WeightRef *refs = NULL;
    TensorCopy *copies = NULL;
    float *scratch = NULL;
    int n_refs = 0, rc = -1;
    /* Every tensor is found and checked against the config before anything the size of the model is allocated,
     * so a small file whose header claims a huge model is refused for what is wrong with it. Without an arena
     * the references have no destinations yet. */
    if (model_weight_refs(m, &refs, &n_refs, err)) return -1;
    if (!(copies = kv_malloc((size_t)n_refs * sizeof *copies, err))) goto done;
    for (int i = 0; i < n_refs; i++)
        if (plan(source, &refs[i], i, &copies[i], err)) goto done;
    if (model_alloc(m, fill->mode == FILL_ARENA, err)) goto done;
    if (fill->mode == FILL_ARENA) {
        free(refs);
        refs = NULL;
        if (model_weight_refs(m, &refs, &n_refs, err)) goto done;
        for (int i = 0; i < n_refs; i++) copies[i].dst = refs[i].dst;
        model_copy_all(copies, n_refs);  /* all conversions in one parallel region */
    } else if (fill->mode == FILL_VISIT) {
        /* a buffer of each tensor's own size, freed before the next: a large one (the token embeddings) is
         * not kept resident while the visitor builds its copies of the others */
        for (int i = 0; i < n_refs; i++) {
            int kept = offer_blocks(fill, &copies[i], &refs[i], m->source, err);
            if (kept < 0) goto done;
            if (kept) {
                release_source(&copies[i]);
                continue;
            }
            uint64_t n = refs[i].rows * refs[i].cols;
            if (!(scratch = kv_malloc(n * sizeof(float), err))) {
                kv_wrap(err, "%s: a %.2f GB buffer for one weight", m->source, n * 4e-9);
                goto done;
            }
            copies[i].dst = scratch;
            model_copy_all(&copies[i], 1);
            if (fill->visit(fill->user, refs[i].role, refs[i].layer, scratch, refs[i].rows, refs[i].cols, err))
                goto done;
            release_source(&copies[i]);
            free(scratch);
            scratch = NULL;
        }
    }
    rc = 0;
done:
    free(scratch);
    free(copies);
    free(refs);
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------
 * RoPE (spec models.md §2.4): HF computes in float32, so do we. */

void model_rope_inv_freq(const ModelConfig *cfg, float *out) {
    int d = cfg->head_dim;
    for (int i = 0; i < d / 2; i++) {
        float f = 1.0f / powf(cfg->rope_theta, (float)(2 * i) / (float)d);
        if (cfg->rope_scaling) {
            /* transformers' _compute_llama3_parameters */
            float lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor, factor = cfg->rope_factor;
            float L = (float)cfg->rope_original_max_pos;
            float wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > L / lo) {
                f = f / factor;
            } else if (!(wavelen < L / hi)) {
                float s = (L / wavelen - lo) / (hi - lo);
                f = (1.0f - s) * f / factor + s * f;
            }
        }
        out[i] = f;
    }
}

/* ---------------------------------------------------------------------------------------------------------
 * Chat format detection. */

static int contains(const char *hay, size_t len, const char *needle, int fold_case) {
    size_t n = strlen(needle);
    for (size_t i = 0; hay && n <= len && i <= len - n; i++) {
        size_t j = 0;
        while (j < n && (fold_case ? tolower((unsigned char)hay[i + j]) == tolower((unsigned char)needle[j])
                                   : hay[i + j] == needle[j]))
            j++;
        if (j == n) return 1;
    }
    return 0;
}

ChatFormat model_chat_format(ModelArch arch, const char *name, const char *tmpl, size_t tmpl_len) {
    size_t name_len = name ? strlen(name) : 0;
    if (contains(name, name_len, "smollm", 1) || contains(tmpl, tmpl_len, "SmolLM", 0)) return CHAT_SMOLLM2;
    if (arch == ARCH_QWEN2) return CHAT_QWEN2;
    if (contains(tmpl, tmpl_len, "<|start_header_id|>", 0)) return CHAT_LLAMA3;
    if (contains(tmpl, tmpl_len, "[INST]", 0)) return CHAT_MISTRAL;
    if (contains(name, name_len, "llama-3", 1) || contains(name, name_len, "llama 3", 1)) return CHAT_LLAMA3;
    if (arch == ARCH_MISTRAL) return CHAT_MISTRAL;
    return CHAT_NONE;
}

/* ---------------------------------------------------------------------------------------------------------
 * Loading and freeing. */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int load_with(Model **out, const char *spec, const WeightFill *fill, KvErr *err) {
    *out = NULL;
    Model *m = kv_calloc(1, sizeof *m, err);
    if (!m) return -1;
    snprintf(m->source, sizeof m->source, "%s", spec);
    struct stat st;
    int rc;
    if (!strncmp(spec, "synthetic:", 10)) rc = model_load_synthetic(m, spec, fill, err);
    else if (ends_with(spec, ".gguf")) rc = model_load_gguf(m, spec, fill, err);
    else if (!stat(spec, &st) && S_ISDIR(st.st_mode)) rc = model_load_hf(m, spec, fill, err);
    else rc = kv_fail(err, "%s: not a .gguf file, a Hugging Face model directory or synthetic:SHAPE", spec);
    if (rc) {
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

int model_load(Model **out, const char *spec, KvErr *err) {
    WeightFill fill = {FILL_ARENA, NULL, NULL, NULL};
    return load_with(out, spec, &fill, err);
}

int model_load_config(Model **out, const char *spec, KvErr *err) {
    WeightFill fill = {FILL_NONE, NULL, NULL, NULL};
    return load_with(out, spec, &fill, err);
}

int model_stream_weights(const Model *m, WeightVisitor visit, void *user, KvErr *err) {
    return model_stream_weight_blocks(m, visit, NULL, user, err);
}

int model_stream_weight_blocks(const Model *m, WeightVisitor visit, BlockVisitor blocks, void *user, KvErr *err) {
    if (!m->has_host_weights) {
        WeightFill fill = {FILL_VISIT, visit, user, blocks};
        Model *again = NULL;
        if (load_with(&again, m->source, &fill, err)) return -1;
        /* The source was read once for the configuration: it must still describe the same model. */
        const ModelConfig *a = &again->cfg, *b = &m->cfg;
        int same = a->arch == b->arch && a->n_layers == b->n_layers && a->d_model == b->d_model &&
                   a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim &&
                   a->d_ff == b->d_ff && a->vocab_size == b->vocab_size && a->qkv_bias == b->qkv_bias &&
                   a->tied_embeddings == b->tied_embeddings;
        model_free(again);
#if defined(__GLIBC__) && !defined(KVBENCH_ASAN)
        /* the per-tensor buffers were freed between the visitor's own allocations: hand the holes they left in
         * the heap back to the system (~7 MB for SmolLM2), or they stay resident for the process's life */
        malloc_trim(0);
#endif
        if (!same) return kv_fail(err, "%s: the model changed since it was opened", m->source);
        return 0;
    }
    WeightRef *refs;
    int n_refs;
    if (model_weight_refs(m, &refs, &n_refs, err)) return -1;
    int rc = 0;
    for (int i = 0; i < n_refs && !rc; i++)
        rc = visit(user, refs[i].role, refs[i].layer, refs[i].dst, refs[i].rows, refs[i].cols, err);
    free(refs);
    return rc;
}

void model_free(Model *m) {
    if (!m) return;
    if (m->tokenizer) tokenizer_free(m->tokenizer);
    free(m->arena);
    free(m);
}

static const char *arch_name(ModelArch a) {
    return a == ARCH_QWEN2 ? "qwen2" : a == ARCH_MISTRAL ? "mistral" : "llama";
}

void model_print_info(const Model *m, void *file) {
    FILE *f = file;
    const ModelConfig *c = &m->cfg;
    fprintf(f, "model        %s\n", m->name);
    fprintf(f, "source       %s\n", m->source);
    fprintf(f, "arch         %s\n", arch_name(c->arch));
    fprintf(f, "layers       %d\n", c->n_layers);
    fprintf(f, "hidden       %d\n", c->d_model);
    fprintf(f, "heads        %d (kv-heads %d, head dim %d)\n", c->n_heads, c->n_kv_heads, c->head_dim);
    fprintf(f, "d_ff         %d\n", c->d_ff);
    fprintf(f, "vocab        %d\n", c->vocab_size);
    if (c->rope_scaling && !c->rope_original_max_pos)
        fprintf(f, "rope         theta %g, llama3 scaling (per-frequency factors from the GGUF, max %g)\n",
                c->rope_theta, c->rope_factor);
    else if (c->rope_scaling)
        fprintf(f, "rope         theta %g, llama3 scaling (factor %g, low %g, high %g, original %d)\n", c->rope_theta,
                c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_pos);
    else
        fprintf(f, "rope         theta %g\n", c->rope_theta);
    fprintf(f, "context      %d\n", c->max_context);
    fprintf(f, "rms eps      %g\n", c->rms_eps);
    fprintf(f, "tied embd    %s\n", c->tied_embeddings ? "yes" : "no");
    fprintf(f, "qkv bias     %s\n", c->qkv_bias ? "yes" : "no");
    uint64_t D = c->d_model, F = c->d_ff, q = (uint64_t)c->n_heads * c->head_dim,
             kv = (uint64_t)c->n_kv_heads * c->head_dim;
    uint64_t per_layer = 2 * D + 2 * q * D + 2 * kv * D + 3 * F * D + (c->qkv_bias ? q + 2 * kv : 0);
    uint64_t params = (uint64_t)c->vocab_size * D * (c->tied_embeddings ? 1 : 2) + D + c->n_layers * per_layer;
    fprintf(f, "parameters   %.1f M (%.2f GB in f32, %.2f GB in bf16)\n", params / 1e6, params * 4e-9, params * 2e-9);
    if (m->has_host_weights)
        fprintf(f, "weights      %.1f MB in host memory (f32, one arena)\n", m->arena_bytes / 1e6);
    else
        fprintf(f, "weights      not in host memory (a backend streams them from the source)\n");
    fprintf(f, "chat format  %s\n", chat_format_name(c->chat));
    fprintf(f, "bos          %d (added: %s)\n", c->bos_id, c->add_bos ? "yes" : "no");
    fprintf(f, "eos         ");
    for (int i = 0; i < c->n_eos; i++) fprintf(f, " %d", c->eos_ids[i]);
    fprintf(f, "%s\n", c->n_eos ? "" : " none");
    if (m->tokenizer)
        fprintf(f, "tokenizer    %s, %d tokens\n", m->tokenizer_kind, tokenizer_vocab_size(m->tokenizer));
    else
        fprintf(f, "tokenizer    none\n");
}
