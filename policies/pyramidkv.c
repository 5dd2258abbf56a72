/* pyramidkv.c — PyramidKV (Cai et al. 2024, arXiv 2406.02069), as kvpress 0.5.5's PyramidKVPress: SnapKV's
 * scores (kvpress's: the window at the layer max plus 1), each head of layer l keeping a count that falls
 * linearly from the lowest layer to the highest. kvpress differs from the paper: it always compresses (the paper's
 * code keeps a fixed budget for short prompts), and where the pyramid does not fit (its narrow end below the
 * window) it keeps round(L*f) in every layer, SnapKV with Python's rounding rather than int(). Budgets count the
 * window: kvpress ranks it with the prefix (at max + 1, so it stays whenever the budget holds it). */
#include <math.h>

#include "policy_internal.h"

/* The pyramid's steepness: the narrow end is the wide end's share / BETA (kvpress's default). */
#define BETA 20

/* PyramidKVPress.get_layer_budget in double, as written there: the total over layers is what int(L*f) per layer
 * would keep plus the window; the wide end is capped at L - w. Python's round() is half to even, as nearbyint. */
static int pyramid_layer_budget(int layer, int n_layers, int L, int w, double f) {
    double max_capacity = w + L * f;
    double min_num = (max_capacity - w) / BETA;
    double max_num = (max_capacity - w) * 2 - min_num;
    if (max_num >= L - w) {
        max_num = L - w;
        min_num = (max_capacity - w) * 2 - max_num;
    }
    if (!(L >= max_num && max_num >= min_num && min_num >= w)) {
        int n = (int)nearbyint(L * f);
        return n > 1 ? n : 1;
    }
    double steps = n_layers > 1 ? (max_num - min_num) / (n_layers - 1) : 0.0;
    return (int)nearbyint(max_num - layer * steps);
}

POLICY_DESCRIPTOR(PYRAMIDKV) = {
    .name = "pyramidkv",
    .press_name = "PyramidKVPress",
    .source = "Cai et al. 2024; kvpress 0.5.5 PyramidKVPress",
    .role = POLICY_BASELINE,
    .aggregations = AGG_ALL,
    .default_aggregation = AGG_MEAN,
    .needs = NEEDS_ATTENTION,
    .score = score_snapkv_kvpress,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .layer_budget = pyramid_layer_budget,
    .colour = "#e377c2",
};
