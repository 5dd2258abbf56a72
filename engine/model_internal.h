/* model_internal.h — what the three model sources (GGUF, Hugging Face directory, synthetic) share.
 *
 * model.c lays out one arena for a config and lists every weight of the model once, as a WeightRef
 * (where it goes, its shape, its GGUF and Hugging Face tensor names); each source then only has to say how
 * to convert one weight from its own format (a PlanTensor), and model_fill_weights does the rest: all of
 * them into the arena, none, or one at a time to a visitor. Shape legend as in model.h. */
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
    WeightRole role;
    int layer;            /* -1 outside the layers */
} WeightRef;

/* One source tensor to convert into dst: rows of `cols` elements of a ggml type (f32/f16/bf16 or a quantised
 * block type), each row_bytes long; perm_heads as in WeightRef. A synthetic model's tensor has no data: it is
 * generated (random with `seed`, or ones for a norm). */
typedef enum { COPY_FROM_DATA, COPY_SYNTHETIC_RANDOM, COPY_SYNTHETIC_ONES } CopySource;
typedef struct {
    CopySource source;
    const uint8_t *data;
    int type;
    uint64_t rows, cols;
    size_t row_bytes;
    int perm_heads;
    uint64_t seed, tensor;  /* COPY_SYNTHETIC_RANDOM: the generator's seed and the tensor's index */
    float *dst;
} TensorCopy;

/* How a source converts the weight w (the index-th of model_weight_refs): finds its tensor, checks it against w's
 * shape and type and describes the copy. Planning runs before the arena exists (w->dst is NULL); model_fill_weights
 * sets c->dst afterwards. */
typedef int (*PlanTensor)(void *source, const WeightRef *w, int index, TensorCopy *c, KvErr *err);

/* What a load does with the weights: into the arena, nothing (model_load_config), or each to a visitor. */
typedef struct {
    enum { FILL_ARENA, FILL_NONE, FILL_VISIT } mode;
    WeightVisitor visit;
    void *user;
    BlockVisitor blocks; /* FILL_VISIT: offered the matrices of quantised block types first; NULL: none */
} WeightFill;

/* Checks that a copy's type can be dequantised (by converting its first row into a buffer of its own), naming
 * `source` and the tensor on failure. After this, model_copy_all cannot fail. */
int model_copy_check(const TensorCopy *c, const char *source, const char *tensor, KvErr *err);

/* Converts every tensor to f32 in one parallel region (rows split across threads, no barrier per tensor). */
void model_copy_all(const TensorCopy *copies, int n);

/* Checks a config for values no model can have (non-positive sizes, heads not a multiple of kv-heads...);
 * source names the file the values came from. */
int model_check_config(const ModelConfig *cfg, const char *source, KvErr *err);

/* Allocates m->arena for m->cfg and points m->rope_inv_freq and, with weights, every weight field and
 * m->layers into it. */
int model_alloc(Model *m, int weights, KvErr *err);

/* After a source has read m->cfg: plans every weight with plan(source, ...) (so a missing tensor or a shape
 * that disagrees with the config is refused, in every mode, before anything is allocated), then allocates the
 * arena and converts the weights as fill says. With FILL_VISIT the weights go one at a time through a scratch
 * buffer. */
int model_fill_weights(Model *m, const WeightFill *fill, PlanTensor plan, void *source, KvErr *err);

/* Elements start..start+n-1 of synthetic tensor `tensor` (model_synthetic.c). */
void model_synthetic_values(float *dst, uint64_t start, uint64_t n, uint64_t seed, uint64_t tensor);

/* The weights of an allocated model in load order; *out is malloc'd. */
int model_weight_refs(const Model *m, WeightRef **out, int *n_out, KvErr *err);

/* Appends a stop token, ignoring duplicates (and ids outside the vocabulary). */
void model_add_eos(ModelConfig *cfg, int id);

/* The chat format of a family from its architecture, its name and its chat template text (any may be
 * empty): SmolLM2 by name, Llama-3 and Mistral by template markers, Qwen2 by architecture. */
ChatFormat model_chat_format(ModelArch arch, const char *name, const char *tmpl, size_t tmpl_len);

int model_load_gguf(Model *m, const char *path, const WeightFill *fill, KvErr *err);
int model_load_hf(Model *m, const char *dir, const WeightFill *fill, KvErr *err);
int model_load_synthetic(Model *m, const char *spec, const WeightFill *fill, KvErr *err);

#endif
