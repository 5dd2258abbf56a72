/* criticalkv.c — Ada-CriticalKV (Feng et al. 2025), the paper's strongest baseline: AdaKV head budgets, then
 * two stages within each head, the second weighted by value norms (spec policies.md §2.5). It is the bottom rung
 * of the ladder (docs/ladder.md): the value-weighted pipeline with Ada-CriticalKV's steps, and its constants are
 * the ladder's alpha, first-stage ratio and epsilon. */
#include "policy_internal.h"

POLICY_DESCRIPTOR(CRITICALKV) = {
    .name = "criticalkv",
    .press_name = "criti_adasnapkv",
    .source = "Feng et al. 2025; the reference's CriticalAdaKVPress",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION | NEEDS_VALUE_NORM,
    .score = score_value_weighted,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_LADDER,
    .colour = "#ff7f0e",
    .alpha_safeguard = 0.2,
    .epsilon = 1e-4,
    .first_stage_ratio = 0.5,
    .ladder = {.enabled = 1, .pooling = LADDER_POOL_WINDOW, .forced = LADDER_FORCED_TOPK, .safeguard = 1,
               .weighting = LADDER_WEIGHT_CRITICAL, .allocation = LADDER_ALLOC_HEAD},
};
