/* chunkkv.c — ChunkKV (Liu et al. 2025, arXiv 2502.00299), as kvpress 0.5.5's ChunkKVPress(SnapKVPress(),
 * chunk_length=20) ("chunkkv" in kvpress's evaluation): SnapKV's scores (kvpress's: the window at the layer max
 * plus 1), summed over the kv-heads and averaged over chunks of 20 positions (the last one shorter); each layer
 * keeps the top max(1, int(n_chunks*f)) chunks, the same positions in every head, so a layer keeps about L*f
 * entries per head rather than exactly int(L*f). The chunk selection (ALLOC_CHUNKS) takes any scorer that scores
 * every context position: ChunkKV over another scorer is a descriptor of its own naming that scorer. */
#include "policy_internal.h"

POLICY_DESCRIPTOR(CHUNKKV) = {
    .name = "chunkkv",
    .press_name = "ChunkKVPress",
    .source = "Liu et al. 2025; kvpress 0.5.5 ChunkKVPress(SnapKVPress)",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION,
    .score = score_snapkv_kvpress,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_CHUNKS,
    .chunk_length = 20,
    .colour = "#c49c94",
};
