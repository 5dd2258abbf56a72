/* intake.c — the CPU backend's weight intake (intake.h): every weight streamed in once at open and kept in one
 * form per matrix, norms and biases copied. */
#include "intake.h"

#include <stdlib.h>
#include <string.h>

#include "../gguf.h"

/* Keeps one form of matrix `index` from w[N][K]: 4-bit codes when every block is exactly such a block,
 * else int8 codes, else f32. The f32 weights are kept as well only when they live in the Model's arena
 * (borrowed, nothing to copy); the returned pointer is the f32 weights kept, or NULL. */
static int keep_matrix(CpuWeights *wt, int index, const float *w, int N, int K, int borrow, const float **f32,
                       KvErr *err) {
    *f32 = borrow ? w : NULL;
    if (K % CPU_PACK_BLOCK == 0) {
        CpuQ4Block *q4 = kv_malloc((size_t)N * (K / CPU_PACK_BLOCK) * sizeof *q4, err);
        if (!q4) return kv_wrap(err, "cpu backend: 4-bit copy of a %d x %d matrix", N, K);
        if (cpu_pack_q4(q4, w, N, K)) {
            wt->q4[index] = q4;
            return 0;
        }
        free(q4);
        size_t codes = (size_t)N * K, blocks = codes / CPU_PACK_BLOCK;
        CpuPacked p = {kv_malloc(codes + 2 * blocks * sizeof(float), err), NULL, NULL};
        if (!p.q) return kv_wrap(err, "cpu backend: packed copy of a %d x %d matrix", N, K);
        p.scale = (float *)(p.q + codes);
        p.offset = p.scale + blocks;
        if (cpu_pack_exact(&p, w, N, K)) {
            wt->packed[index] = p;
            return 0;
        }
        free(p.q);
    }
    if (borrow) return 0;
    float *copy = kv_malloc((size_t)N * K * sizeof *copy, err);
    if (!copy) return kv_wrap(err, "cpu backend: f32 copy of a %d x %d matrix", N, K);
    memcpy(copy, w, (size_t)N * K * sizeof *copy);
    wt->f32_copies[index] = copy;
    *f32 = copy;
    return 0;
}

/* Rows per try when a matrix of blocks is tested for packing: the f32 values of this many rows at a time. */
#define PACK_CHUNK_ROWS 256

/* Keeps matrix `index` from its source's blocks of ggml type `type` (N rows of row_bytes): as 4-bit or int8 codes
 * when the f32 values they rebuild to pack exactly (a Q4_0 / Q4_1 / Q8_0 GGUF: the codes keep_matrix keeps of
 * the same values, so the same bits as before), else the blocks themselves (~ the file's bytes per weight).
 * Tried PACK_CHUNK_ROWS rows at a time, so no f32 copy of the matrix is held. */
static int keep_blocks(CpuWeights *wt, const CpuKernels *k, int index, int type, const uint8_t *data, int N, int K,
                       size_t row_bytes, KvErr *err) {
    CpuBlockRebuildFn *rebuild = k->rebuild[type];
    size_t row_blocks = row_bytes / ggml_type_traits(type)->bytes, per_row = (size_t)K / CPU_PACK_BLOCK;
    float *rows = kv_malloc((size_t)PACK_CHUNK_ROWS * K * sizeof *rows, err);
    if (!rows) return kv_wrap(err, "cpu backend: rows of a %d x %d matrix", N, K);
    for (int form = 0; form < 2 && K % CPU_PACK_BLOCK == 0; form++) {
        CpuQ4Block *q4 = form ? NULL : kv_malloc((size_t)N * per_row * sizeof *q4, err);
        size_t codes = (size_t)N * K, n_blocks = codes / CPU_PACK_BLOCK;
        CpuPacked p = {form ? kv_malloc(codes + 2 * n_blocks * sizeof(float), err) : NULL, NULL, NULL};
        if (!q4 && !p.q) {
            free(rows);
            return kv_wrap(err, "cpu backend: a packed copy of a %d x %d matrix", N, K);
        }
        if (p.q) p.scale = (float *)(p.q + codes), p.offset = p.scale + n_blocks;
        int ok = 1;
        for (int n0 = 0; ok && n0 < N; n0 += PACK_CHUNK_ROWS) {
            int n = N - n0 < PACK_CHUNK_ROWS ? N - n0 : PACK_CHUNK_ROWS;
            rebuild(data + (size_t)n0 * row_bytes, rows, (size_t)n * row_blocks);
            if (q4) {
                ok = cpu_pack_q4(q4 + (size_t)n0 * per_row, rows, n, K);
            } else {
                CpuPacked part = {p.q + (size_t)n0 * K, p.scale + (size_t)n0 * per_row, p.offset + (size_t)n0 * per_row};
                ok = cpu_pack_exact(&part, rows, n, K);
            }
        }
        if (ok) {
            if (q4) wt->q4[index] = q4;
            else wt->packed[index] = p;
            free(rows);
            return 0;
        }
        free(q4);
        free(p.q);
    }
    free(rows);
    uint8_t *copy = kv_malloc((size_t)N * row_bytes, err);
    if (!copy) return kv_wrap(err, "cpu backend: the %s blocks of a %d x %d matrix", ggml_type_name(type), N, K);
    memcpy(copy, data, (size_t)N * row_bytes);
    wt->blocks[index] = (CpuBlocks){copy, type, row_bytes, row_blocks};
    return 0;
}

typedef struct {
    CpuWeights *wt;
    const CpuKernels *k;
    const Model *m;
} WeightIntake;

/* The shape m's configuration gives weight `role` of `layer`; 0 when the model has no such weight. */
static int expected_shape(const ModelConfig *c, WeightRole role, int layer, uint64_t *rows, uint64_t *cols) {
    uint64_t D = (uint64_t)c->d_model, F = (uint64_t)c->d_ff, hd = (uint64_t)c->n_heads * c->head_dim,
             kd = (uint64_t)c->n_kv_heads * c->head_dim;
    int global = role == WEIGHT_TOK_EMBD || role == WEIGHT_OUT_NORM || role == WEIGHT_LM_HEAD;
    int bias = role == WEIGHT_Q_BIAS || role == WEIGHT_K_BIAS || role == WEIGHT_V_BIAS;
    if (global ? layer != -1 : layer < 0 || layer >= c->n_layers) return 0;
    if ((bias && !c->qkv_bias) || (role == WEIGHT_LM_HEAD && c->tied_embeddings)) return 0;
    *rows = role == WEIGHT_TOK_EMBD || role == WEIGHT_LM_HEAD ? (uint64_t)c->vocab_size
            : role == WEIGHT_Q ? hd : role == WEIGHT_K || role == WEIGHT_V ? kd
            : role == WEIGHT_GATE || role == WEIGHT_UP ? F : role == WEIGHT_O || role == WEIGHT_DOWN ? D : 1;
    *cols = role == WEIGHT_O || role == WEIGHT_Q_BIAS ? hd : role == WEIGHT_K_BIAS || role == WEIGHT_V_BIAS ? kd
            : role == WEIGHT_DOWN ? F : D;
    return 1;
}

/* model_stream_weights' visitor: each weight into its place (keep_matrix for the matrices, a copy for the
 * norms and biases). */
static int take_weight(void *user, WeightRole role, int layer, const float *data, uint64_t rows, uint64_t cols,
                       KvErr *err) {
    WeightIntake *in = user;
    CpuWeights *wt = in->wt;
    const ModelConfig *c = &in->m->cfg;
    int borrow = in->m->has_host_weights;
    uint64_t want_rows, want_cols;
    if (!expected_shape(c, role, layer, &want_rows, &want_cols) || rows != want_rows || cols != want_cols)
        return kv_fail(err, "%s: the model changed since it was opened (weight %d of layer %d is %llu x %llu)",
                       in->m->source, (int)role, layer, (unsigned long long)rows, (unsigned long long)cols);
    wt->received++;
    if (layer < 0) {
        if (role == WEIGHT_OUT_NORM) {
            memcpy((float *)wt->out_norm, data, cols * sizeof(float));
            return 0;
        }
        int index = role == WEIGHT_TOK_EMBD ? cpu_tok_embd_index(c) : cpu_lm_head_index(c);
        const float *f32;
        if (keep_matrix(wt, index, data, (int)rows, (int)cols, borrow, &f32, err)) return -1;
        if (role == WEIGHT_TOK_EMBD) wt->tok_embd = f32;
        if (role == WEIGHT_LM_HEAD || c->tied_embeddings) wt->lm_head = f32;
        return 0;
    }
    LayerWeights *w = &wt->layers[layer];
    float *vector = role == WEIGHT_ATTN_NORM ? w->attn_norm : role == WEIGHT_FFN_NORM ? w->ffn_norm
                    : role == WEIGHT_Q_BIAS ? w->bq : role == WEIGHT_K_BIAS ? w->bk : role == WEIGHT_V_BIAS ? w->bv
                    : NULL;
    if (vector) {
        memcpy(vector, data, cols * sizeof(float));
        return 0;
    }
    int which = role == WEIGHT_Q ? W_Q : role == WEIGHT_K ? W_K : role == WEIGHT_V ? W_V : role == WEIGHT_O ? W_O
                : role == WEIGHT_GATE ? W_GATE : role == WEIGHT_UP ? W_UP : W_DOWN;
    float **slot[W_PER_LAYER] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
    const float *f32;
    if (keep_matrix(wt, layer * W_PER_LAYER + which, data, (int)rows, (int)cols, borrow, &f32, err)) return -1;
    *slot[which] = (float *)f32;
    return 0;
}

/* The matrix index of weight `role` of `layer`, or -1 for a norm or bias. */
static int matrix_index(const ModelConfig *c, WeightRole role, int layer) {
    if (role == WEIGHT_TOK_EMBD) return cpu_tok_embd_index(c);
    if (role == WEIGHT_LM_HEAD) return cpu_lm_head_index(c);
    int which = role == WEIGHT_Q ? W_Q : role == WEIGHT_K ? W_K : role == WEIGHT_V ? W_V : role == WEIGHT_O ? W_O
                : role == WEIGHT_GATE ? W_GATE : role == WEIGHT_UP ? W_UP : role == WEIGHT_DOWN ? W_DOWN : -1;
    return which < 0 || layer < 0 ? -1 : layer * W_PER_LAYER + which;
}

/* model_stream_weight_blocks' block visitor: a matrix of a quantised ggml type into keep_blocks (its f32
 * pointers stay NULL: products rebuild it from the codes); 1 (hand it over in f32) for a type the table has no
 * rebuild entry for. */
static int take_blocks(void *user, WeightRole role, int layer, int type, const uint8_t *data, uint64_t rows,
                       uint64_t cols, size_t row_bytes, KvErr *err) {
    WeightIntake *in = user;
    CpuWeights *wt = in->wt;
    const ModelConfig *c = &in->m->cfg;
    int index = matrix_index(c, role, layer);
    uint64_t want_rows, want_cols;
    if (type < 0 || type >= CPU_GGML_TYPES || !in->k->rebuild[type] || index < 0) return 1;
    if (!expected_shape(c, role, layer, &want_rows, &want_cols) || rows != want_rows || cols != want_cols)
        return kv_fail(err, "%s: the model changed since it was opened (weight %d of layer %d is %llu x %llu)",
                       in->m->source, (int)role, layer, (unsigned long long)rows, (unsigned long long)cols);
    wt->received++;
    return keep_blocks(wt, in->k, index, type, data, (int)rows, (int)cols, row_bytes, err) ? -1 : 0;
}

/* The f32 weights kept of matrix `index`, or NULL when it is held only as codes. */
static const float *matrix_f32(const CpuWeights *wt, const ModelConfig *c, int index) {
    if (index >= cpu_lm_head_index(c)) return index == cpu_lm_head_index(c) ? wt->lm_head : wt->tok_embd;
    const LayerWeights *w = &wt->layers[index / W_PER_LAYER];
    const float *all[W_PER_LAYER] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
    return all[index % W_PER_LAYER];
}

/* Streams every weight of m into the backend's own forms (from the Model's arena when it has one, else read
 * again from its source one tensor at a time). */
int cpu_weights_take(CpuWeights *wt, const CpuKernels *k, const Model *m, KvErr *err) {
    const ModelConfig *c = &m->cfg;
    int n = cpu_n_matrices(c), D = c->d_model, hd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    size_t per_layer = 2 * (size_t)D + (c->qkv_bias ? (size_t)hd + 2 * (size_t)kd : 0);
    wt->packed = kv_calloc((size_t)n, sizeof *wt->packed, err);
    wt->blocks = wt->packed ? kv_calloc((size_t)n, sizeof *wt->blocks, err) : NULL;
    wt->q4 = wt->blocks ? kv_calloc((size_t)n, sizeof *wt->q4, err) : NULL;
    wt->f32_copies = wt->q4 ? kv_calloc((size_t)n, sizeof *wt->f32_copies, err) : NULL;
    wt->layers = wt->f32_copies ? kv_calloc((size_t)c->n_layers, sizeof *wt->layers, err) : NULL;
    wt->vectors = wt->layers ? kv_malloc(((size_t)c->n_layers * per_layer + D) * sizeof(float), err) : NULL;
    if (!wt->vectors) return kv_wrap(err, "cpu backend: weights of %s", m->source);
    float *v = wt->vectors;
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *w = &wt->layers[l];
        w->attn_norm = v, v += D;
        w->ffn_norm = v, v += D;
        if (c->qkv_bias) w->bq = v, v += hd, w->bk = v, v += kd, w->bv = v, v += kd;
    }
    wt->out_norm = v;
    WeightIntake in = {wt, k, m};
    if (model_stream_weight_blocks(m, take_weight, take_blocks, &in, err)) return kv_wrap(err, "cpu backend");
    int want = 2 + !c->tied_embeddings + c->n_layers * (9 + 3 * (c->qkv_bias != 0));
    if (wt->received != want)
        return kv_fail(err, "cpu backend: %s handed over %d weights, the model has %d", m->source, wt->received, want);
    wt->matrices = kv_calloc((size_t)n, sizeof *wt->matrices, err);
    if (!wt->matrices) return kv_wrap(err, "cpu backend: weights of %s", m->source);
    for (int i = 0; i <= cpu_tok_embd_index(c); i++) {
        int N = c->vocab_size, K = D;
        if (i < cpu_lm_head_index(c)) cpu_matrix_shape(c, i % W_PER_LAYER, &N, &K);
        CpuCodes codes = {wt->q4[i], wt->packed[i].q ? &wt->packed[i] : NULL,
                          wt->blocks[i].data ? &wt->blocks[i] : NULL};
        cpu_matrix_init(&wt->matrices[i], N, K, matrix_f32(wt, c, i), codes);
    }
    return 0;
}

void cpu_weights_free(CpuWeights *wt, const ModelConfig *c) {
    for (int i = 0; wt->packed && i < cpu_n_matrices(c); i++) free(wt->packed[i].q);
    for (int i = 0; wt->q4 && i < cpu_n_matrices(c); i++) free(wt->q4[i]);
    for (int i = 0; wt->blocks && i < cpu_n_matrices(c); i++) free(wt->blocks[i].data);
    for (int i = 0; wt->f32_copies && i < cpu_n_matrices(c); i++) free(wt->f32_copies[i]);
    free(wt->packed);
    free(wt->q4);
    free(wt->blocks);
    free(wt->f32_copies);
    free(wt->layers);
    free(wt->vectors);
    free(wt->matrices);
    memset(wt, 0, sizeof *wt);
}
