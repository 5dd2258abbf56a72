/* snapkv.c — SnapKV (Li et al. 2024): the window queries' pooled attention, top int(L*f) per head
 * (spec policies.md §2.2). */
#include "policy_internal.h"

POLICY_DESCRIPTOR(SNAPKV) = {
    .name = "snapkv",
    .press_name = "snapkv",
    .source = "Li et al. 2024; the reference's SnapKVPress",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION,
    .score = score_snapkv,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#1f77b4",
};
