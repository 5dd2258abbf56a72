/* kvcache.h — a KV cache whose length varies per (layer, kv-head), and the keep-set that builds one.
 *
 * A prefill fills a uniform cache (every head holds the L context entries). An eviction policy returns a
 * KeepSet; gathering it gives a head-variable cache holding only the kept entries, so AdaKV-style budgets
 * save real memory. Decoding appends one entry to every head. Keys are stored after RoPE; `n_pos` is the
 * position of the next token and continues from the uncompressed context length (spec policies.md §1.1).
 * The struct is the same for both backends; `on_device` says whether k/v point to GPU memory.
 * Shape legend: N layers, K kv-heads, d head dim. */
#ifndef KVBENCH_KVCACHE_H
#define KVBENCH_KVCACHE_H

#include <stddef.h>

#include "err.h"

/* Positions kept per (layer, kv-head), layer-major, each segment sorted ascending (the golden format). */
typedef struct {
    int n_layers, n_kv_heads;  /* N, K */
    int *counts;               /* [N*K] entries kept by each head */
    int *offsets;              /* [N*K] start of each head's segment in positions */
    int *positions;            /* [sum counts] context positions */
    int total;                 /* sum of counts */
} KeepSet;

int keepset_init(KeepSet *ks, int n_layers, int n_kv_heads, const int *counts, KvErr *err);
/* A keep-set that keeps all L positions of every head (the `full` policy). */
int keepset_full(KeepSet *ks, int n_layers, int n_kv_heads, int context_len, KvErr *err);
void keepset_free(KeepSet *ks);

typedef struct {
    int n_layers, n_kv_heads, head_dim;  /* N, K, d */
    int n_pos;        /* tokens processed so far: the RoPE position of the next token */
    int on_device;    /* k/v live in GPU memory (CUDA backend; len, cap and pos stay on the host) */
    int *len;         /* [N*K] entries held (host memory, always) */
    int *cap;         /* [N*K] capacity (host memory, always) */
    float **k, **v;   /* [N*K] -> [cap][d] (floats on the CPU; the CUDA backend stores its own element type) */
    int **pos;        /* [N*K] -> [cap] original position of each entry */
    void *arena;      /* one allocation backing k/v/pos */
    size_t arena_bytes;
} KvCache;

/* Host (CPU backend) caches. kvcache_new: empty, `capacity` entries per head. */
int kvcache_new(KvCache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, KvErr *err);
/* Gathers the kept entries of a uniform (or head-variable) cache into a new one with room for
 * `extra_capacity` more entries per head (question and answer tokens). n_pos is copied. */
int kvcache_gather(KvCache **out, const KvCache *src, const KeepSet *keep, int extra_capacity, KvErr *err);
void kvcache_free(KvCache *c);
/* Bytes of K and V actually held (sum of len * d * 2 * sizeof(element)); for the memory benchmark. */
size_t kvcache_bytes_used(const KvCache *c, size_t elem_bytes);

#endif
