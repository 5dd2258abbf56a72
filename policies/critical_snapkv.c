/* critical_snapkv.c — CriticalKV in its non-adaptive form (Feng et al. 2025, arXiv 2502.03805), as kvpress 0.5.5's
 * CriticalKVPress(SnapKVPress()) ("critical_snapkv" in kvpress's evaluation): SnapKV's scores s (kvpress's: the
 * window at the layer max plus 1); per head the top max(1, int(L*f*first_stage_ratio)) of s are kept first, then
 * the rest of int(L*f) by (s + epsilon) * nu, nu the value norm ||v W_o^h||_1 averaged over the group. Every head
 * keeps the same count; the adaptive form with AdaKV's head budgets is `criticalkv` (the paper's baseline). */

#include "policy_internal.h"

/* base = s, score = (s + epsilon) * nu, in float32 as kvpress computes it. */
static int score_critical_snapkv(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o,
                                 LayerScores *out, KvErr *err) {
    const size_t n = (size_t)o->K * o->L;
    if (score_snapkv_kvpress(row, cfg, o, out, err)) return -1;
    out->base = kv_malloc(sizeof(float) * n, err);
    if (!out->base) return -1;
    const float epsilon = (float)row->epsilon;
    for (size_t t = 0; t < n; t++) {
        out->base[t] = out->score[t];
        out->score[t] = (out->score[t] + epsilon) * o->value_norm[t];
    }
    return 0;
}

POLICY_DESCRIPTOR(CRITICAL_SNAPKV) = {
    .name = "critical-snapkv",
    .press_name = "CriticalKVPress",
    .source = "Feng et al. 2025; kvpress 0.5.5 CriticalKVPress(SnapKVPress)",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION | NEEDS_VALUE_NORM,
    .score = score_critical_snapkv,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_TWO_STAGE,
    .colour = "#ffbb78",
    .epsilon = 1e-4,
    .first_stage_ratio = 0.5,
};
