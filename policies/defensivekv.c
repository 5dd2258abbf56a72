/* defensivekv.c — DefensiveKV (Feng et al. 2026, the paper's method): defensive aggregation, value weighting
 * and a stage-1 mass guarantee, top of each layer (spec policies.md §2.7). The top rung of the ladder
 * (docs/ladder.md): the value-weighted pipeline with DefensiveKV's steps; its mass threshold is the ladder's. */
#include "policy_internal.h"

POLICY_DESCRIPTOR(DEFENSIVEKV) = {
    .name = "defensivekv",
    .press_name = "efficient_defensivekv",
    .source = "Feng et al. 2026 (arXiv 2510.13334); the reference's efficient_defensivekv",
    .role = POLICY_PROPOSED,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MAX_PRIOR,
    .needs = NEEDS_ATTENTION | NEEDS_VALUE_NORM,
    .score = score_value_weighted,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_LADDER,
    .colour = "#d62728",
    .mass_threshold = 0.9,
    .ladder = {.enabled = 1, .pooling = LADDER_POOL_ROWS, .forced = LADDER_FORCED_MASS, .safeguard = 0,
               .weighting = LADDER_WEIGHT_DEFENSIVE, .allocation = LADDER_ALLOC_LAYER},
};
