/* safetensors.h — a reader for Hugging Face .safetensors files: u64 header length, a JSON header naming
 * each tensor's dtype, shape and byte range, then the raw little-endian data.
 *
 * The file is mmap'd; tensor data pointers point into the mapping and stay valid until st_close. Every
 * header entry is checked at open (known dtype, byte range inside the data buffer and matching the shape),
 * so callers can trust what st_find returns. Spec: docs/spec/models.md §2.1. */
#ifndef KVBENCH_SAFETENSORS_H
#define KVBENCH_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;
    const char *dtype;      /* as in the header: "BF16", "F16", "F32", "I64", ... */
    int ggml_type;          /* GGML_F32 / GGML_F16 / GGML_BF16 (gguf.h), or -1 for a dtype kvbench cannot load */
    int n_dims;
    uint64_t shape[ST_MAX_DIMS];  /* row-major, shape[n_dims-1] fastest-varying */
    const uint8_t *data;
    size_t n_bytes;
} StTensor;

typedef struct SafeTensors SafeTensors;

int st_open(SafeTensors **out, const char *path, KvErr *err);
void st_close(SafeTensors *st);
const char *st_path(const SafeTensors *st);
int st_n_tensors(const SafeTensors *st);
const StTensor *st_tensor(const SafeTensors *st, int index);
const StTensor *st_find(const SafeTensors *st, const char *name); /* NULL if absent */

#endif
