/* observed_attention.c — H2O (Zhang et al. 2023, arXiv 2306.14048) as kvpress 0.5.5's ObservedAttentionPress: each
 * entry scores the attention it received from every query of the context prefill, summed and divided by the number
 * of queries that see it (L - j), then averaged over the query heads of its group; each head keeps its top
 * int(L*f). Where the paper differs, kvbench follows kvpress: the paper's heavy hitters rank the plain accumulated
 * sum, which favours early tokens, and H2O evicts one entry per generated token with half the budget kept for the
 * most recent ones; kvpress scores the prefill once, averages, and keeps no recent window. It reads the prefill's
 * attention sums (NEEDS_ATTENTION_SUMS), which the cpu backend observes and the cuda backend does not. */
#include "policy_internal.h"

/* score[k][j] = mean over the G heads h of group k of attn_sums[h][j] / (L - j), in double, rounded once (kvpress:
 * float32 sums, quotient and mean). */
static int score_observed_attention(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o,
                                    LayerScores *out, KvErr *err) {
    (void)row, (void)cfg;
    const int L = o->L, G = o->H / o->K;
    out->score = kv_malloc(sizeof(float) * (size_t)o->K * L, err);
    if (!out->score) return -1;
    for (int k = 0; k < o->K; k++)
        for (int j = 0; j < L; j++) {
            double sum = 0.0;
            for (int g = 0; g < G; g++) sum += o->attn_sums[(size_t)(k * G + g) * L + j] / (L - j);
            out->score[(size_t)k * L + j] = (float)(sum / G);
        }
    return 0;
}

POLICY_DESCRIPTOR(OBSERVED_ATTENTION) = {
    .name = "observed-attention",
    .press_name = "ObservedAttentionPress",
    .source = "Zhang et al. 2023 (H2O); kvpress 0.5.5 ObservedAttentionPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_ATTENTION_SUMS,
    .score = score_observed_attention,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#ff9896",
};
