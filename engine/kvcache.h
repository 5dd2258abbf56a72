/* kvcache.h — a KV cache whose length varies per (layer, kv-head), and the keep-set that builds one.
 *
 * A prefill fills a uniform cache (every head holds the L context entries). An eviction policy returns a
 * KeepSet; gathering it gives a head-variable cache holding only the kept entries, so AdaKV-style budgets
 * save real memory. Decoding appends one entry to every head. Keys are stored after RoPE; `n_pos` is the
 * position of the next token and continues from the uncompressed context length (spec policies.md §1.1).
 * The struct is the same for both backends; `on_device` says whether k/v point to GPU memory. A host cache
 * holds f32 rows (the default, exact) or IEEE binary16 rows (`elem`, the CPU backend's opt-in
 * cache f16: half the memory, keys and values rounded to nearest even when stored).
 *
 * A view (kvcache_view, what the CPU backend's sweep decodes on) holds no copy of the kept rows: the first
 * n_shared[i] entries of head i are rows of its base cache, read in place, and only the entries appended
 * after them (question and answer tokens) are rows of its own. Its positions are its own. The variants of
 * one prefill then share the prefill's rows instead of holding 15 copies of them.
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

/* Element type of a host cache's k/v rows. */
typedef enum { KV_ELEM_F32 = 0, KV_ELEM_F16 = 1 } KvElem;

typedef struct KvCache {
    int n_layers, n_kv_heads, head_dim;  /* N, K, d */
    int n_pos;        /* tokens processed so far: the RoPE position of the next token */
    int on_device;    /* k/v live in GPU memory (CUDA backend; len, cap and pos stay on the host) */
    int *len;         /* [N*K] entries held (host memory, always) */
    int *cap;         /* [N*K] capacity (host memory, always) */
    float **k, **v;   /* [N*K] -> [cap][d] (floats on the CPU, or binary16 bits when elem is KV_ELEM_F16: read
                       * those through kvcache_k16 / kvcache_v16; the CUDA backend stores its own element type) */
    int **pos;        /* [N*K] -> [cap] original position of each entry */
    void *arena;      /* one allocation backing k/v/pos */
    size_t arena_bytes;
    KvElem elem;      /* host caches: what k/v rows hold (0, f32, for the CUDA backend's, which say on_device) */
    /* A view's base (NULL for a cache that owns all its rows): entry e < n_shared[i] of head i is row
     * shared[i][e] of base's head i; entry e >= n_shared[i] is own row e - n_shared[i] at k[i] / v[i]. */
    const struct KvCache *base;
    int *n_shared; /* [N*K] */
    int **shared;  /* [N*K] -> [n_shared] row indices in base, ascending */
} KvCache;

/* Head i's rows of an f16 cache as the binary16 bits they are. */
static inline unsigned short *kvcache_k16(const KvCache *c, int i) { return (unsigned short *)(void *)c->k[i]; }
static inline unsigned short *kvcache_v16(const KvCache *c, int i) { return (unsigned short *)(void *)c->v[i]; }
/* Bytes of one element of a host cache. */
static inline size_t kvcache_elem_bytes(KvElem e) { return e == KV_ELEM_F16 ? 2 : 4; }
/* Entries of head i that are rows of the base (0 for a cache that is not a view). */
static inline int kvcache_n_shared(const KvCache *c, int i) { return c->base ? c->n_shared[i] : 0; }
/* Where entry e of head i keeps its key (value) row: the base's row it shares, or its own. */
static inline const void *kvcache_key(const KvCache *c, int i, int e) {
    size_t row = (size_t)c->head_dim * kvcache_elem_bytes(c->elem);
    int shared = kvcache_n_shared(c, i);
    if (e < shared) return (const char *)c->base->k[i] + (size_t)c->shared[i][e] * row;
    return (const char *)c->k[i] + (size_t)(e - shared) * row;
}
static inline const void *kvcache_value(const KvCache *c, int i, int e) {
    size_t row = (size_t)c->head_dim * kvcache_elem_bytes(c->elem);
    int shared = kvcache_n_shared(c, i);
    if (e < shared) return (const char *)c->base->v[i] + (size_t)c->shared[i][e] * row;
    return (const char *)c->v[i] + (size_t)(e - shared) * row;
}

/* Host (CPU backend) caches. kvcache_new: empty f32, `capacity` entries per head; kvcache_new_elem: of
 * element type `elem`. */
int kvcache_new(KvCache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, KvErr *err);
int kvcache_new_elem(KvCache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, KvElem elem,
                     KvErr *err);
/* Gathers the kept entries of a uniform (or head-variable) cache into a new one with room for
 * `extra_capacity` more entries per head (question and answer tokens). n_pos and the element type are
 * copied (the rows as they are: gathering an f16 cache moves its bits, it never rounds again). */
int kvcache_gather(KvCache **out, const KvCache *src, const KeepSet *keep, int extra_capacity, KvErr *err);
/* kvcache_gather without copying the kept rows: a view of src (which must not be a view itself) that reads
 * them in place, with room for `extra_capacity` rows of its own per head. src must outlive the view and keep
 * its first len entries as they are (appending to src is fine: the sweep's full variant decodes on it).
 * Attention over a view and over the gathered copy is the same arithmetic on the same rows. */
int kvcache_view(KvCache **out, const KvCache *src, const KeepSet *keep, int extra_capacity, KvErr *err);
/* Bytes of the arena kvcache_view (view = 1) or kvcache_gather (view = 0) of keep with extra_capacity would
 * allocate (keep is checked when the cache is made, not here): what the sweep's memory planner counts. */
size_t kvcache_keep_bytes(const KvCache *src, const KeepSet *keep, int extra_capacity, int view);
/* Drops every entry after the first len of each head and sets n_pos to len: the cache as it was before a forward
 * appended to a uniform cache of len entries (KVzip's reconstruction pass, whose entries are discarded). Fails when
 * a head holds fewer than len entries or the cache is a view. */
int kvcache_truncate(KvCache *c, int len, KvErr *err);
void kvcache_free(KvCache *c);
/* Bytes of K and V of all entries (sum of len * d * 2 * sizeof(element), a view's shared rows included); for
 * the memory benchmark. */
size_t kvcache_bytes_used(const KvCache *c, size_t elem_bytes);

#endif
