/* protected.h — how much of each value-weighted variant's keep-set its allocation protects: per (layer,
 * kv-head), the kept entries that the safeguard, the forced set and (where the allocation protects it) the
 * window take (policy_protected_kept, docs/ladder.md), beside the kept count. One row per sample and variant
 * in table protected_sets (docs/database.md), keyed as results are; the report's forced-share summary
 * (report/forced_share.c) reads it.
 *
 * The table lives outside the results schema (store/store.c): it is created on the first write, a database
 * without it reads as having no such rows, and its rows are written in their own transaction right after the
 * sample's results (a run killed between the two leaves that sample without them); `kvbench merge` copies
 * them after the results (protected_merge). Shape legend: N layers, K kv-heads. */
#ifndef KVBENCH_STORE_PROTECTED_H
#define KVBENCH_STORE_PROTECTED_H

#include "../engine/err.h"
#include "store.h"

typedef struct {
    StoreVariantKey key;
    int n_layers, n_kv_heads;
    const int *protected_counts;  /* [N][K] */
    const int *kept_counts;       /* [N][K] */
} ProtectedSet;

/* Copies the protected sets of the databases src_paths[n] into out_path, for the samples out_path holds (run
 * after store_merge_into, which copies the samples and results); sets already there are left as they are, and a
 * source without the table adds nothing. */
int protected_merge(const char *out_path, const char *const *src_paths, int n, KvErr *err);

/* Writes the sets of sample (model, setup, sample_key), already written by store_write_sample, in one
 * transaction; sets already there are left as they are. */
int protected_write(Store *s, const char *model, const char *setup, const char *sample_key, const ProtectedSet *sets,
                    int n, KvErr *err);

#endif
