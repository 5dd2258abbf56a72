/* cake.c — CAKE (Qin et al. 2025): layer budgets from attention entropy and variance, token scores with a
 * variance term (spec policies.md §2.6). */
#include "policy_internal.h"

POLICY_DESCRIPTOR(CAKE) = {
    .name = "cake",
    .press_name = "cake_global",
    .source = "Qin et al. 2025; the reference's cake_global press",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION,
    .score = score_cake,
    .span = SPAN_PREFIX,
    .allocation = ALLOC_CAKE,
    .colour = "#bcbd22",
    .tau1 = 1.6,
    .tau2 = 0.6,
    .gamma = 200.0,
};
