/* keepset.c — the keep-set of an eviction: kept positions per (layer, kv-head), layer-major.
 *
 * One allocation per array; offsets are derived from the counts at init so a policy only has to fill
 * `positions` segment by segment (each sorted ascending, the golden-data format). */
#include "kvcache.h"

#include <stdlib.h>

int keepset_init(KeepSet *ks, int n_layers, int n_kv_heads, const int *counts, KvErr *err) {
    *ks = (KeepSet){0};
    if (n_layers <= 0 || n_kv_heads <= 0)
        return kv_fail(err, "keepset: invalid shape %d layers x %d kv-heads", n_layers, n_kv_heads);
    int n_seg = n_layers * n_kv_heads;
    long total = 0;
    for (int s = 0; s < n_seg; s++) {
        if (counts[s] < 0) return kv_fail(err, "keepset: negative count %d for segment %d", counts[s], s);
        total += counts[s];
    }
    if (total > 0x7fffffffL) return kv_fail(err, "keepset: %ld entries overflow an int", total);
    ks->counts = kv_malloc(sizeof(int) * (size_t)n_seg, err);
    ks->offsets = ks->counts ? kv_malloc(sizeof(int) * (size_t)n_seg, err) : NULL;
    ks->positions = ks->offsets ? kv_malloc(sizeof(int) * (size_t)total, err) : NULL;
    if (!ks->positions) {
        keepset_free(ks);
        return -1;
    }
    ks->n_layers = n_layers;
    ks->n_kv_heads = n_kv_heads;
    ks->total = (int)total;
    int off = 0;
    for (int s = 0; s < n_seg; s++) {
        ks->counts[s] = counts[s];
        ks->offsets[s] = off;
        off += counts[s];
    }
    return 0;
}

int keepset_full(KeepSet *ks, int n_layers, int n_kv_heads, int context_len, KvErr *err) {
    if (context_len <= 0) return kv_fail(err, "keepset: context length %d is not positive", context_len);
    if (n_layers <= 0 || n_kv_heads <= 0)
        return kv_fail(err, "keepset: invalid shape %d layers x %d kv-heads", n_layers, n_kv_heads);
    int n_seg = n_layers * n_kv_heads;
    int *counts = kv_malloc(sizeof(int) * (size_t)n_seg, err);
    if (!counts) return -1;
    for (int s = 0; s < n_seg; s++) counts[s] = context_len;
    int rc = keepset_init(ks, n_layers, n_kv_heads, counts, err);
    free(counts);
    if (rc) return -1;
    for (int s = 0; s < n_seg; s++)
        for (int j = 0; j < context_len; j++) ks->positions[ks->offsets[s] + j] = j;
    return 0;
}

void keepset_free(KeepSet *ks) {
    if (!ks) return;
    free(ks->counts);
    free(ks->offsets);
    free(ks->positions);
    *ks = (KeepSet){0};
}
