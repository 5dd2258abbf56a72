/* model_internal.h — what the three model sources (GGUF, Hugging Face directory, synthetic) share.
 *
 * model.c lays out one arena for a config and lists every weight of the model once, as a WeightRef
 * (where it goes, its shape, its GGUF and Hugging Face tensor names); each source then only has to fill
 * the list from its own format. Shape legend as in model.h. */
#ifndef KVBENCH_MODEL_INTERNAL_H
#define KVBENCH_MODEL_INTERNAL_H

#include <stdint.h>

#include "model.h"

typedef struct {
    char gguf_name[64];   /* e.g. "blk.3.attn_q.weight" */
    char hf_name[96];     /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    float *dst;           /* [rows][cols] in the arena */
    uint64_t rows, cols;  /* a 1-D tensor has rows == 1 */
    int n_dims;           /* 1 or 2, as stored in the files */
    int perm_heads;       /* Q/K of a GGUF Llama: heads whose rows the converter interleaved; else 0 */
    int is_norm;          /* RMSNorm weight (synthetic models initialise these to 1) */
} WeightRef;

/* One source tensor to convert into the arena: rows of `cols` elements of a ggml type (f32/f16/bf16 or a
 * quantised block type), each row_bytes long; perm_heads as in WeightRef. */
typedef struct {
    const uint8_t *data;
    int type;
    uint64_t rows, cols;
    size_t row_bytes;
    int perm_heads;
    float *dst;
} TensorCopy;

/* Checks that a copy's type can be dequantised (by converting its first row), naming `source` and the tensor
 * on failure. After this, model_copy_all cannot fail. */
int model_copy_check(const TensorCopy *c, const char *source, const char *tensor, KvErr *err);

/* Converts every tensor to f32 in one parallel region (rows split across threads, no barrier per tensor). */
void model_copy_all(const TensorCopy *copies, int n);

/* Checks a config for values no model can have (non-positive sizes, heads not a multiple of kv-heads...);
 * source names the file the values came from. */
int model_check_config(const ModelConfig *cfg, const char *source, KvErr *err);

/* Allocates m->arena for m->cfg and points every weight field (and m->layers, m->rope_inv_freq) into it. */
int model_alloc(Model *m, KvErr *err);

/* The weights of an allocated model in load order; *out is malloc'd. */
int model_weight_refs(const Model *m, WeightRef **out, int *n_out, KvErr *err);

/* Appends a stop token, ignoring duplicates (and ids outside the vocabulary). */
void model_add_eos(ModelConfig *cfg, int id);

/* The chat format of a family from its architecture, its name and its chat template text (any may be
 * empty): SmolLM2 by name, Llama-3 and Mistral by template markers, Qwen2 by architecture. */
ChatFormat model_chat_format(ModelArch arch, const char *name, const char *tmpl, size_t tmpl_len);

int model_load_gguf(Model *m, const char *path, KvErr *err);
int model_load_hf(Model *m, const char *dir, KvErr *err);
int model_load_synthetic(Model *m, const char *spec, KvErr *err);

#endif
