/* adakv.c — AdaKV (Feng et al. 2024) over SnapKV scores: a safeguard per head, then the top of the layer
 * (spec policies.md §2.3). */
#include "policy_internal.h"

POLICY_DESCRIPTOR(ADAKV) = {
    .name = "adakv",
    .press_name = "adasnapkv",
    .source = "Feng et al. 2024; the reference's AdaKVPress over SnapKV",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION,
    .score = score_snapkv,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_ADAPTIVE,
    .colour = "#2ca02c",
    .alpha_safeguard = 0.2,
};
