/* tova.c — TOVA (Oren et al. 2024, arXiv 2401.06104), as kvpress 0.5.5's TOVAPress: each entry scores the last
 * context token's attention to it, averaged over every query head (not per group), the same for every kv-head;
 * the last token itself scores the maximum plus 1 so it always stays (kvpress's addition: the paper does not
 * force it). Each head keeps its top int(L*f). It reads only the last window row of the attention, so every
 * window gives the same keep-set; it takes no aggregation. */
#include "policy_internal.h"

static int score_tova(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                      KvErr *err) {
    (void)row, (void)cfg;
    const int L = o->L;
    out->score = kv_malloc(sizeof(float) * (size_t)o->K * L, err);
    if (!out->score) return -1;
    float top = 0.0f;
    for (int j = 0; j < L - 1; j++) {
        double sum = 0.0;
        for (int h = 0; h < o->H; h++) sum += o->attn[((size_t)h * o->w + o->w - 1) * L + j];
        out->score[j] = (float)(sum / o->H);
        top = j == 0 || out->score[j] > top ? out->score[j] : top;
    }
    out->score[L - 1] = top + 1.0f;
    for (int k = 1; k < o->K; k++)
        for (int j = 0; j < L; j++) out->score[(size_t)k * L + j] = out->score[j];
    return 0;
}

POLICY_DESCRIPTOR(TOVA) = {
    .name = "tova",
    .press_name = "TOVAPress",
    .source = "Oren et al. 2024; kvpress 0.5.5 TOVAPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_ATTENTION,
    .score = score_tova,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#98df8a",
};
