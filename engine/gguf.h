/* gguf.h — a reader for GGUF v3 files (llama.cpp's model format): metadata, tensor infos, tensor data.
 *
 * The file is read into memory once (mmap); lookups return pointers into it, valid until gguf_close.
 * Used by the model loader (weights, hyper-parameters) and by the tokenizer (vocabulary in metadata).
 * Spec: docs/spec/models.md §1. */
#ifndef KVBENCH_GGUF_H
#define KVBENCH_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* GGUF metadata value types (gguf_metadata_value_type). */
typedef enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12
} GgufType;

/* ggml tensor types kvbench can dequantise: every type llama.cpp writes for llama, qwen2 and mistral models. */
typedef enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_IQ4_NL = 20,
    GGML_IQ4_XS = 23, GGML_BF16 = 30
} GgmlType;

typedef struct {
    const char *name;     /* NUL-terminated copy */
    int type;             /* GgmlType */
    int n_dims;
    uint64_t ne[4];       /* ne[0] is the fastest-varying (row length) */
    uint64_t offset;      /* from the start of the data section */
    const uint8_t *data;  /* pointer into the mapped file */
    size_t n_bytes;
} GgufTensor;

typedef struct GgufFile GgufFile;

int gguf_open(GgufFile **out, const char *path, KvErr *err);
void gguf_close(GgufFile *g);
const char *gguf_path(const GgufFile *g);

/* Metadata lookups. Each returns 0 and writes the value, or -1 (with err naming the file and key) when the
 * key is missing or has another type. Integer getters accept any integer type that fits. */
int gguf_has(const GgufFile *g, const char *key);
int gguf_get_u32(const GgufFile *g, const char *key, uint32_t *out, KvErr *err);
int gguf_get_f32(const GgufFile *g, const char *key, float *out, KvErr *err);
int gguf_get_bool(const GgufFile *g, const char *key, int *out, KvErr *err);
/* Strings are not NUL-terminated in GGUF; *out points into the file and *len gives its length. */
int gguf_get_str(const GgufFile *g, const char *key, const char **out, size_t *len, KvErr *err);
/* Arrays: element type and count; then element access. String elements again come as (pointer, length). */
int gguf_get_arr_info(const GgufFile *g, const char *key, GgufType *elem_type, uint64_t *count, KvErr *err);
int gguf_get_arr_str(const GgufFile *g, const char *key, uint64_t index, const char **out, size_t *len, KvErr *err);
/* Numeric array as a pointer to packed elements of elem_type (little-endian, as in the file). */
int gguf_get_arr_data(const GgufFile *g, const char *key, const void **data, KvErr *err);

int gguf_n_tensors(const GgufFile *g);
const GgufTensor *gguf_tensor(const GgufFile *g, int index);
const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name); /* NULL if absent */

/* One ggml type: a block of `block` elements takes `bytes` bytes; dequant rebuilds n_blocks whole blocks to
 * f32 (NULL for a type kvbench cannot read). The CPU backend's per-type kernels start from this table. */
typedef void (*GgmlDequantFn)(const uint8_t *src, float *dst, size_t n_blocks);
typedef struct {
    const char *name;
    uint32_t block;   /* elements per block */
    uint32_t bytes;   /* bytes per block */
    GgmlDequantFn dequant;
} GgmlTypeTraits;
/* NULL for a type code ggml does not define (or has retired). */
const GgmlTypeTraits *ggml_type_traits(int type);
/* The 32 five-bit codes of a Q5_0 / Q5_1 block (qh: its 4 high-bit bytes, qs: its 16 nibble bytes), as the
 * dequantisers read them. */
void ggml_q5_codes(const uint8_t *qh, const uint8_t *qs, int q[32]);
/* ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block from its
 * 12 packed scale bytes s. */
void ggml_q4_k_scale_min(int j, const uint8_t *s, int *sc, int *mn);

/* NULL when kvbench can dequantise the type; else buf, saying "type NAME, which kvbench cannot read (it reads
 * f32, f16, ...)" (or that ggml does not define the code), for the caller to put after the tensor's name. */
const char *ggml_unreadable(int type, char *buf, size_t size);
/* The readable types, "f32, f16, ...", in type-code order. */
void ggml_readable_types(char *buf, size_t size);

/* Dequantises n_elems elements (a whole number of blocks) of the given type into f32. Returns -1 for a type
 * kvbench does not support (as ggml_unreadable). Shared by GGUF and safetensors (F16/BF16/F32). */
int ggml_dequantize(int type, const void *src, float *dst, size_t n_elems, KvErr *err);
const char *ggml_type_name(int type);
/* Bytes for n_elems of a type (n_elems must be a multiple of the block size); 0 for an unknown type. */
size_t ggml_type_bytes(int type, uint64_t n_elems);

#endif
