/* model.h — one description of a Llama-family decoder (Llama, Mistral, Qwen2) and its weights in f32.
 *
 * Loaded from a GGUF file, a Hugging Face directory (config.json + safetensors), or made synthetic at a
 * named real shape with random weights. Whatever the source, weights end up in one layout so both backends
 * read the same thing: every matrix row-major [out][in] as in Hugging Face (y = W x), Q/K rows in the
 * rotate-half (HF) order — GGUF's Llama row permutation is undone at load (spec models.md §1.9).
 * Shape legend: N layers, D hidden, H heads, K kv-heads, d head dim, F feed-forward, V vocab. */
#ifndef KVBENCH_MODEL_H
#define KVBENCH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct Tokenizer;

typedef enum { ARCH_LLAMA = 0, ARCH_MISTRAL = 1, ARCH_QWEN2 = 2 } ModelArch;

/* The chat format of a family (engine/chat.h renders it). */
typedef enum { CHAT_NONE = 0, CHAT_LLAMA3 = 1, CHAT_MISTRAL = 2, CHAT_QWEN2 = 3, CHAT_SMOLLM2 = 4 } ChatFormat;

typedef struct {
    ModelArch arch;
    int n_layers;         /* N */
    int d_model;          /* D */
    int n_heads;          /* H */
    int n_kv_heads;       /* K */
    int head_dim;         /* d */
    int d_ff;             /* F */
    int vocab_size;       /* V */
    int max_context;      /* max_position_embeddings */
    float rope_theta;
    float rms_eps;
    /* Llama-3.1 ("llama3") RoPE scaling; rope_scaling == 0 means plain RoPE. A GGUF stores only the resulting
     * per-frequency factors (rope_freqs.weight): then rope_factor is their maximum, the other three are 0,
     * and Model.rope_inv_freq holds the scaled frequencies. */
    int rope_scaling;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int qkv_bias;         /* Qwen2: q/k/v projections have biases */
    int tied_embeddings;  /* lm_head shares token_embd */
    int bos_id;           /* -1 if none */
    int add_bos;          /* the tokenizer adds BOS to a prompt */
    int eos_ids[8];       /* stop tokens for generation */
    int n_eos;
    ChatFormat chat;
} ModelConfig;

typedef struct {
    float *attn_norm;           /* [D] */
    float *wq, *wk, *wv, *wo;   /* [H*d][D], [K*d][D], [K*d][D], [D][H*d] */
    float *bq, *bk, *bv;        /* [H*d], [K*d], [K*d]; NULL unless qkv_bias */
    float *ffn_norm;            /* [D] */
    float *w_gate, *w_up;       /* [F][D] */
    float *w_down;              /* [D][F] */
} LayerWeights;

typedef struct Model {
    ModelConfig cfg;
    float *tok_embd;            /* [V][D] */
    float *out_norm;            /* [D] */
    float *lm_head;             /* [V][D]; == tok_embd when tied */
    float *rope_inv_freq;       /* [d/2] inverse frequencies, scaling applied (from GGUF's rope_freqs.weight
                                   when present, so use this rather than recomputing from cfg) */
    LayerWeights *layers;       /* [N] */
    struct Tokenizer *tokenizer;/* NULL for a synthetic model without one */
    char source[1024];          /* the path or synthetic spec it came from */
    char name[128];             /* e.g. "SmolLM2-135M-Instruct" (general.name or directory name) */
    char tokenizer_kind[64];    /* e.g. "gguf gpt2 (pre smollm)", "tokenizer.json"; "" without a tokenizer */
    int has_host_weights;       /* 0 after model_load_config */
    void *arena;                /* one allocation holding every weight (only rope_inv_freq without them) */
    size_t arena_bytes;
} Model;

/* Each weight of a model, as model_stream_weights names it. */
typedef enum {
    WEIGHT_TOK_EMBD, WEIGHT_OUT_NORM, WEIGHT_LM_HEAD,  /* layer -1 */
    WEIGHT_ATTN_NORM, WEIGHT_Q, WEIGHT_K, WEIGHT_V, WEIGHT_O, WEIGHT_Q_BIAS, WEIGHT_K_BIAS, WEIGHT_V_BIAS,
    WEIGHT_FFN_NORM, WEIGHT_GATE, WEIGHT_UP, WEIGHT_DOWN,
} WeightRole;

/* Receives one weight in f32, [rows][cols] in the layout of the fields above; data is valid during the call. */
typedef int (*WeightVisitor)(void *user, WeightRole role, int layer, const float *data, uint64_t rows,
                             uint64_t cols, KvErr *err);

/* Receives one matrix as its source's blocks of a quantised ggml type (GgmlTypeTraits: a block of more than one
 * element): rows of cols / block blocks, row_bytes each, contiguous in the layout of the fields above (a GGUF
 * Llama's permuted Q/K rows already put back in order); data is valid during the call. Returns 0 when it kept
 * the matrix, 1 to have it handed over in f32 instead (WeightVisitor), -1 on an error. */
typedef int (*BlockVisitor)(void *user, WeightRole role, int layer, int type, const uint8_t *data, uint64_t rows,
                            uint64_t cols, size_t row_bytes, KvErr *err);

/* Loads a model from:
 *   - a path ending in .gguf,
 *   - a Hugging Face directory (config.json, *.safetensors [+ index], tokenizer.json, tokenizer_config.json),
 *   - "synthetic:SHAPE[:layers=N][:seed=S][:vocab=V]" with SHAPE one of smollm2-135m, llama-3.1-8b,
 *     mistral-7b-v0.3, qwen2.5-32b (random weights; tokenizer NULL).
 * Every failure names the file and the problem. */
int model_load(Model **out, const char *spec, KvErr *err);
/* The same without the weights: configuration, tokenizer and RoPE frequencies only (weight pointers NULL,
 * has_host_weights 0), for a backend that keeps its own copy in its own form and fills it through
 * model_stream_weights — so a 32B model never needs its 131 GB of f32 on the host. Both backends are opened
 * this way (backend_load_model): the CUDA one keeps bf16 on the GPU, the CPU one the packed codes of every
 * matrix that packs exactly and f32 only for the rest. model_load is for what reads the f32 weights itself
 * (tests, tools). */
int model_load_config(Model **out, const char *spec, KvErr *err);
/* Hands every weight to visit once, in load order: from the host arena when the model has one, otherwise
 * read again from the model's source one tensor at a time (host memory: one tensor in f32 at a time). */
int model_stream_weights(const Model *m, WeightVisitor visit, void *user, KvErr *err);
/* model_stream_weights offering each matrix stored in a quantised block type to `blocks` first (NULL: none),
 * so a backend can keep the codes instead of f32 (a model with a host arena hands over f32 only). */
int model_stream_weight_blocks(const Model *m, WeightVisitor visit, BlockVisitor blocks, void *user, KvErr *err);
void model_free(Model *m);

/* Fills cfg->... from a named shape; used by the synthetic loader and by CUDA timing. */
int model_shape_by_name(const char *shape, ModelConfig *cfg, KvErr *err);

/* RoPE inverse frequencies for a config (plain or Llama-3.1 scaled): out[d/2]. */
void model_rope_inv_freq(const ModelConfig *cfg, float *out);

/* One-paragraph summary for `kvbench info`. */
void model_print_info(const Model *m, void *file /* FILE* */);

#endif
