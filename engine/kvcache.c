/* kvcache.c — host KV caches whose length varies per (layer, kv-head), and the gather that builds one
 * from a keep-set.
 *
 * One arena per cache (docs/DESIGN.md §4, habit 7): the per-head index arrays first, then for each head its key rows,
 * value rows and positions at a fixed offset, each 64-byte aligned so the attention loops stream whole
 * cache lines. Heads never move once carved, so a gathered cache with a 20% budget really holds 20%. A view
 * carves only its own rows (the question and answer), its positions and its indices into the base.
 * Shape legend: N layers, K kv-heads, d head dim. */
#include "kvcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KV_ALIGN 64

static size_t align_up(size_t n) { return (n + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN; }

/* Arena bytes of the per-head index arrays, and of one head's rows, positions (and a view's indices). */
static size_t index_bytes_of(size_t n_heads, int view) {
    return align_up(n_heads * (2 * sizeof(int) + 2 * sizeof(float *) + sizeof(int *) +
                               (view ? sizeof(int) + sizeof(int *) : 0)));
}
static size_t head_bytes_of(int rows, int n_shared, int head_dim, KvElem elem) {
    size_t entries = (size_t)rows + (size_t)n_shared;
    return 2 * align_up((size_t)rows * (size_t)head_dim * kvcache_elem_bytes(elem)) + align_up(entries * sizeof(int)) +
           align_up((size_t)n_shared * sizeof(int));
}

/* Carves an arena for N*K heads: head i gets rows[i] key and value rows of its own and, for a view
 * (shared not NULL), shared[i] row indices into the base; positions for all of them. len = 0 everywhere,
 * cap = shared + own rows. */
static int cache_alloc(KvCache **out, int n_layers, int n_kv_heads, int head_dim, const int *rows, const int *shared,
                       KvElem elem, KvErr *err) {
    *out = NULL;
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0)
        return kv_fail(err, "kvcache: invalid shape %d layers x %d kv-heads x %d head dim", n_layers, n_kv_heads,
                       head_dim);
    size_t n_heads = (size_t)n_layers * (size_t)n_kv_heads;
    size_t index_bytes = index_bytes_of(n_heads, shared != NULL);
    size_t data_bytes = 0, elem_bytes = kvcache_elem_bytes(elem);
    for (size_t i = 0; i < n_heads; i++) {
        int n_shared = shared ? shared[i] : 0;
        if (rows[i] < 0 || n_shared < 0)
            return kv_fail(err, "kvcache: negative capacity %d for head %zu", rows[i] < 0 ? rows[i] : n_shared, i);
        data_bytes += head_bytes_of(rows[i], n_shared, head_dim, elem);
    }
    KvCache *c = kv_calloc(1, sizeof *c, err);
    if (!c) return -1;
    uint8_t *arena = NULL;
    if (posix_memalign((void **)&arena, KV_ALIGN, index_bytes + data_bytes) != 0) {
        free(c);
        return kv_fail(err, "kvcache: out of memory allocating %zu bytes for %d layers x %d kv-heads",
                       index_bytes + data_bytes, n_layers, n_kv_heads);
    }
    c->n_layers = n_layers;
    c->n_kv_heads = n_kv_heads;
    c->head_dim = head_dim;
    c->elem = elem;
    c->arena = arena;
    c->arena_bytes = index_bytes + data_bytes;
    /* Index arrays: pointers first (their alignment is the strictest), then the int arrays. */
    c->k = (float **)arena;
    c->v = c->k + n_heads;
    c->pos = (int **)(c->v + n_heads);
    int **next_ptr = c->pos + n_heads;
    if (shared) c->shared = next_ptr, next_ptr += n_heads;
    c->len = (int *)next_ptr;
    c->cap = c->len + n_heads;
    if (shared) c->n_shared = c->cap + n_heads;
    uint8_t *p = arena + index_bytes;
    for (size_t i = 0; i < n_heads; i++) {
        int n_shared = shared ? shared[i] : 0;
        c->len[i] = 0;
        c->cap[i] = rows[i] + n_shared;
        c->k[i] = (float *)p;
        p += align_up((size_t)rows[i] * (size_t)head_dim * elem_bytes);
        c->v[i] = (float *)p;
        p += align_up((size_t)rows[i] * (size_t)head_dim * elem_bytes);
        c->pos[i] = (int *)p;
        p += align_up((size_t)c->cap[i] * sizeof(int));
        if (shared) {
            c->n_shared[i] = n_shared;
            c->shared[i] = (int *)p;
            p += align_up((size_t)n_shared * sizeof(int));
        }
    }
    *out = c;
    return 0;
}

int kvcache_new(KvCache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, KvErr *err) {
    return kvcache_new_elem(out, n_layers, n_kv_heads, head_dim, capacity, KV_ELEM_F32, err);
}

int kvcache_new_elem(KvCache **out, int n_layers, int n_kv_heads, int head_dim, int capacity, KvElem elem,
                     KvErr *err) {
    *out = NULL;
    if (elem != KV_ELEM_F32 && elem != KV_ELEM_F16) return kv_fail(err, "kvcache: unknown element type %d", (int)elem);
    if (capacity <= 0) return kv_fail(err, "kvcache: capacity must be positive (got %d)", capacity);
    if (n_layers <= 0 || n_kv_heads <= 0)
        return kv_fail(err, "kvcache: invalid shape %d layers x %d kv-heads", n_layers, n_kv_heads);
    size_t n_heads = (size_t)n_layers * (size_t)n_kv_heads;
    int *caps = kv_malloc(n_heads * sizeof *caps, err);
    if (!caps) return -1;
    for (size_t i = 0; i < n_heads; i++) caps[i] = capacity;
    int rc = cache_alloc(out, n_layers, n_kv_heads, head_dim, caps, NULL, elem, err);
    free(caps);
    return rc;
}

/* Index of `position` in a head's ascending position array, or -1. */
static int find_position(const int *pos, int n, int position) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (pos[mid] == position) return mid;
        if (pos[mid] < position) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Checks a keep-set (and the extra capacity) against src; *counts_out receives each head's kept count. */
static int keep_counts(const KvCache *src, const KeepSet *keep, int extra_capacity, int **counts_out,
                       const char *who, KvErr *err) {
    *counts_out = NULL;
    if (src->on_device) return kv_fail(err, "%s: source cache lives on the GPU (use the backend's gather)", who);
    if (keep->n_layers != src->n_layers || keep->n_kv_heads != src->n_kv_heads)
        return kv_fail(err, "%s: keep-set shape %d layers x %d kv-heads does not match the cache's %d x %d", who,
                       keep->n_layers, keep->n_kv_heads, src->n_layers, src->n_kv_heads);
    if (extra_capacity < 0) return kv_fail(err, "%s: negative extra capacity %d", who, extra_capacity);
    int n_heads = src->n_layers * src->n_kv_heads;
    int *counts = kv_malloc((size_t)n_heads * sizeof *counts, err);
    if (!counts) return -1;
    for (int i = 0; i < n_heads; i++) {
        int count = keep->counts[i];
        if (count < 0 || count > src->len[i] || keep->offsets[i] < 0 || keep->offsets[i] + count > keep->total) {
            free(counts);
            return kv_fail(err, "%s: layer %d kv-head %d keeps %d entries at offset %d, but the cache holds %d and "
                                "the keep-set %d in all",
                           who, i / src->n_kv_heads, i % src->n_kv_heads, count, keep->offsets[i], src->len[i],
                           keep->total);
        }
        counts[i] = count;
    }
    *counts_out = counts;
    return 0;
}

/* Entry of src's head i that holds the j-th kept position (ascending), or -1 with err set. */
static int kept_entry(const KvCache *src, const KeepSet *keep, int i, int j, const char *who, KvErr *err) {
    const int *want = keep->positions + keep->offsets[i];
    int at = find_position(src->pos[i], src->len[i], want[j]);
    if (at < 0 || (j > 0 && want[j] <= want[j - 1])) {
        kv_fail(err, "%s: layer %d kv-head %d: position %d %s", who, i / src->n_kv_heads, i % src->n_kv_heads,
                want[j], at < 0 ? "is not in the cache" : "is out of ascending order in the keep-set");
        return -1;
    }
    return at;
}

/* The kept entries of src into c (carved for them): rows copied, or for a view (c->base set) their indices in
 * src; positions and n_pos either way. */
static int fill_kept(KvCache *c, const KvCache *src, const KeepSet *keep, const char *who, KvErr *err) {
    size_t row = (size_t)src->head_dim * kvcache_elem_bytes(src->elem); /* bytes */
    for (int i = 0; i < src->n_layers * src->n_kv_heads; i++) {
        for (int j = 0; j < keep->counts[i]; j++) {
            int at = kept_entry(src, keep, i, j, who, err);
            if (at < 0) return -1;
            if (c->base) {
                c->shared[i][j] = at;
            } else {
                memcpy((char *)c->k[i] + j * row, kvcache_key(src, i, at), row);
                memcpy((char *)c->v[i] + j * row, kvcache_value(src, i, at), row);
            }
            c->pos[i][j] = src->pos[i][at];
        }
        c->len[i] = keep->counts[i];
    }
    c->n_pos = src->n_pos;
    return 0;
}

int kvcache_gather(KvCache **out, const KvCache *src, const KeepSet *keep, int extra_capacity, KvErr *err) {
    *out = NULL;
    int *caps;
    if (keep_counts(src, keep, extra_capacity, &caps, "kvcache_gather", err)) return -1;
    for (int i = 0; i < src->n_layers * src->n_kv_heads; i++) caps[i] += extra_capacity;
    KvCache *c;
    int rc = cache_alloc(&c, src->n_layers, src->n_kv_heads, src->head_dim, caps, NULL, src->elem, err);
    free(caps);
    if (rc) return rc;
    if (fill_kept(c, src, keep, "kvcache_gather", err)) {
        kvcache_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

int kvcache_view(KvCache **out, const KvCache *src, const KeepSet *keep, int extra_capacity, KvErr *err) {
    *out = NULL;
    if (src->base) return kv_fail(err, "kvcache_view: the source cache is itself a view (gather it instead)");
    int *counts;
    if (keep_counts(src, keep, extra_capacity, &counts, "kvcache_view", err)) return -1;
    int n_heads = src->n_layers * src->n_kv_heads;
    int *own = kv_malloc((size_t)n_heads * sizeof *own, err);
    KvCache *c = NULL;
    int rc = own ? 0 : -1;
    for (int i = 0; !rc && i < n_heads; i++) own[i] = extra_capacity;
    if (!rc) rc = cache_alloc(&c, src->n_layers, src->n_kv_heads, src->head_dim, own, counts, src->elem, err);
    free(own);
    free(counts);
    if (rc) return rc;
    c->base = src;
    if (fill_kept(c, src, keep, "kvcache_view", err)) {
        kvcache_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

size_t kvcache_keep_bytes(const KvCache *src, const KeepSet *keep, int extra_capacity, int view) {
    size_t n_heads = (size_t)src->n_layers * (size_t)src->n_kv_heads, bytes = index_bytes_of(n_heads, view);
    for (size_t i = 0; i < n_heads; i++)
        bytes += view ? head_bytes_of(extra_capacity, keep->counts[i], src->head_dim, src->elem)
                      : head_bytes_of(keep->counts[i] + extra_capacity, 0, src->head_dim, src->elem);
    return bytes;
}

int kvcache_truncate(KvCache *c, int len, KvErr *err) {
    if (c->base) return kv_fail(err, "kvcache_truncate: a view shares its base's rows (truncate the base)");
    for (int i = 0; i < c->n_layers * c->n_kv_heads; i++)
        if (len < 0 || c->len[i] < len)
            return kv_fail(err, "kvcache_truncate: layer %d kv-head %d holds %d entries, fewer than %d",
                           i / c->n_kv_heads, i % c->n_kv_heads, c->len[i], len);
    for (int i = 0; i < c->n_layers * c->n_kv_heads; i++) c->len[i] = len;
    c->n_pos = len;
    return 0;
}

void kvcache_free(KvCache *c) {
    if (!c) return;
    free(c->arena);
    free(c);
}

size_t kvcache_bytes_used(const KvCache *c, size_t elem_bytes) {
    size_t total = 0;
    for (int i = 0; i < c->n_layers * c->n_kv_heads; i++)
        total += (size_t)c->len[i] * (size_t)c->head_dim * 2 * elem_bytes;
    return total;
}
