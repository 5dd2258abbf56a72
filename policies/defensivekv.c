/* defensivekv.c — DefensiveKV (Feng et al. 2026, the paper's method): defensive aggregation, value weighting
 * and a stage-1 mass guarantee, top of each layer (spec policies.md §2.7). */
#include "policy_internal.h"

const PolicyRow POLICY_DEFENSIVEKV = {
    .name = "defensivekv",
    .press_name = "efficient_defensivekv",
    .source = "Feng et al. 2026 (arXiv 2510.13334); the reference's efficient_defensivekv",
    .role = POLICY_PROPOSED,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MAX_PRIOR,
    .needs = NEEDS_ATTENTION | NEEDS_VALUE_NORM,
    .score = score_defensive,
    .span = SPAN_PREFIX,
    .allocation = ALLOC_LAYER,
    .colour = "#d62728",
    .mass_threshold = 0.9,
};
