/* intake.h — the CPU backend's weights and their intake (intake.c): at open every weight is streamed in once
 * (model_stream_weight_blocks) and each matrix kept in ONE form: 4-bit codes where every block is exactly
 * such a block (a Q4_1 / Q4_0 GGUF), else int8 codes (a Q8_0 GGUF), else its source's blocks of a quantised
 * ggml type (Q4_K, Q6_K, Q5_0, ...), else f32. No f32 copy of a matrix held as codes is made; the f32 weights
 * are read where the Model holds them (model_load's arena) and nowhere else. Used by forward.c. */
#ifndef KVBENCH_CPU_INTAKE_H
#define KVBENCH_CPU_INTAKE_H

#include "../model.h"
#include "ops.h"

/* Matrices of one layer in LayerWeights order. */
enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_PER_LAYER };

typedef struct {
    /* Matrices by index: layer l's at l*W_PER_LAYER + W_Q.., then lm_head, then tok_embd (the lm_head's index
     * when tied). Each is held as 4-bit codes (q4), else int8 codes (packed[i].q), else its source's blocks of a
     * quantised ggml type (blocks[i].data), else f32 only. */
    CpuQ4Block **q4;
    CpuPacked *packed;
    CpuBlocks *blocks;
    float **f32_copies;  /* the f32 copies this backend made ([cpu_n_matrices]; NULL where none) */
    /* Norms and biases (own copies, in `vectors`); the f32 weights of each matrix where there are some (a
     * matrix that packs has none unless the Model holds its f32 arena), else NULL. */
    LayerWeights *layers;
    const float *tok_embd, *lm_head, *out_norm;
    float *vectors;
    CpuMatrix *matrices; /* [cpu_n_matrices] each matrix's descriptor: its form and products (ops.h) */
    int received;        /* weights streamed in */
} CpuWeights;

static inline int cpu_n_matrices(const ModelConfig *c) { return c->n_layers * W_PER_LAYER + 2; }
static inline int cpu_lm_head_index(const ModelConfig *c) { return c->n_layers * W_PER_LAYER; }
static inline int cpu_tok_embd_index(const ModelConfig *c) { return c->n_layers * W_PER_LAYER + !c->tied_embeddings; }

/* The shape [N][K] of matrix `which` (W_Q..W_DOWN) of a layer. */
static inline void cpu_matrix_shape(const ModelConfig *c, int which, int *N, int *K) {
    int hd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    const int rows[W_PER_LAYER] = {hd, kd, kd, c->d_model, c->d_ff, c->d_ff, c->d_model};
    const int cols[W_PER_LAYER] = {c->d_model, c->d_model, c->d_model, hd, c->d_model, c->d_model, c->d_ff};
    *N = rows[which];
    *K = cols[which];
}

/* Streams every weight of m into wt (zeroed by the caller), a ggml type's blocks tried for packing with k's
 * rebuild entries, and describes each matrix (wt->matrices). On failure wt holds what was kept so far:
 * cpu_weights_free releases it. */
int cpu_weights_take(CpuWeights *wt, const CpuKernels *k, const Model *m, KvErr *err);
void cpu_weights_free(CpuWeights *wt, const ModelConfig *c);

#endif
