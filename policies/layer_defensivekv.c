/* layer_defensivekv.c — Layer-DefensiveKV (the paper's method with cross-layer budgets): DefensiveKV's scores,
 * top of every layer together (spec policies.md §2.8): DefensiveKV's steps with the ladder's global allocation,
 * and DefensiveKV's mass threshold (the ladder's constants, ladder_constants). */
#include "policy_internal.h"

POLICY_DESCRIPTOR(LAYER_DEFENSIVEKV) = {
    .name = "layer-defensivekv",
    .press_name = "efficient_layer_defensivekv",
    .source = "Feng et al. 2026 (arXiv 2510.13334); the reference's efficient_layer_defensivekv",
    .role = POLICY_PROPOSED,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MAX_PRIOR,
    .needs = NEEDS_ATTENTION | NEEDS_VALUE_NORM,
    .score = score_value_weighted,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_LADDER,
    .colour = "#9467bd",
    .ladder = {.enabled = 1, .pooling = LADDER_POOL_ROWS, .forced = LADDER_FORCED_MASS, .safeguard = 0,
               .weighting = LADDER_WEIGHT_DEFENSIVE, .allocation = LADDER_ALLOC_GLOBAL},
};
