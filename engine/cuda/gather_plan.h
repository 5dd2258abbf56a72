/* gather_plan.h — host-side index arithmetic of the CUDA backend's head-variable caches, in plain C so that
 * tests/test_cuda_gather.c checks it without a GPU: where each (layer, kv-head) segment starts in a cache's
 * arena, and which source row feeds which destination row when a keep-set is gathered.
 *
 * A device cache stores every head's entries back to back: head i owns rows row0[i] .. row0[i]+cap[i]-1 of the
 * K region (and the same rows of the V region). Entry positions are ascending within a head (keep-set segments
 * are sorted, appended tokens come later), so a kept position is found by binary search. */
#ifndef KVBENCH_CUDA_GATHER_PLAN_H
#define KVBENCH_CUDA_GATHER_PLAN_H

#include "../err.h"
#include "../kvcache.h"

/* row0[i] = caps[0] + ... + caps[i-1]; returns the total row count. */
static inline long long cache_row_starts(const int *caps, int n_heads, long long *row0) {
    long long rows = 0;
    for (int i = 0; i < n_heads; i++) {
        row0[i] = rows;
        rows += caps[i];
    }
    return rows;
}

/* Index of position p among a head's ascending entry positions, or -1. */
static inline int cache_find_entry(const int *pos, int len, int p) {
    int lo = 0, hi = len - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (pos[mid] == p) return mid;
        if (pos[mid] < p)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* For each kept entry e (keep-set order): its source row src_rows[e] in src (rows start at src_row0) and its
 * destination row dst_rows[e] in a cache whose heads start at dst_row0; fills dst_pos[i][j] with the kept
 * positions. Fails on a position the source head does not hold. */
static inline int gather_plan(const KvCache *src, const long long *src_row0, const KeepSet *keep,
                              const long long *dst_row0, long long *src_rows, long long *dst_rows, int *const *dst_pos,
                              KvErr *err) {
    int e = 0;
    for (int i = 0; i < keep->n_layers * keep->n_kv_heads; i++) {
        const int *kept = keep->positions + keep->offsets[i];
        for (int j = 0; j < keep->counts[i]; j++, e++) {
            int idx = cache_find_entry(src->pos[i], src->len[i], kept[j]);
            if (idx < 0)
                return kv_fail(err, "backend 'cuda': keep-set position %d is not in layer %d kv-head %d of the cache",
                               kept[j], i / keep->n_kv_heads, i % keep->n_kv_heads);
            src_rows[e] = src_row0[i] + idx;
            dst_rows[e] = dst_row0[i] + j;
            dst_pos[i][j] = kept[j];
        }
    }
    return 0;
}

#endif
