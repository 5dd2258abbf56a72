/* layer_defensivekv.c — Layer-DefensiveKV (the paper's method with cross-layer budgets): DefensiveKV's scores,
 * top of every layer together (spec policies.md §2.8). */
#include "policy_internal.h"

const PolicyRow POLICY_LAYER_DEFENSIVEKV = {
    .name = "layer-defensivekv",
    .press_name = "efficient_layer_defensivekv",
    .source = "Feng et al. 2026 (arXiv 2510.13334); the reference's efficient_layer_defensivekv",
    .role = POLICY_PROPOSED,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MAX_PRIOR,
    .needs = NEEDS_ATTENTION | NEEDS_VALUE_NORM,
    .score = score_defensive,
    .span = SPAN_PREFIX,
    .allocation = ALLOC_GLOBAL,
    .colour = "#9467bd",
    .mass_threshold = 0.9,
};
