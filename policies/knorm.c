/* knorm.c — Knorm (Devoto et al. 2024, arXiv 2406.11430), as kvpress 0.5.5's KnormPress: a key of small L2
 * norm tends to draw attention, so each entry scores the negative norm of its key (after RoPE, which keeps
 * norms) and each head keeps its top int(L*f). Like every kvpress ScorerPress it protects no window, and it
 * reads nothing but the keys: no attention, no window, no aggregation. */
#include <math.h>

#include "policy_internal.h"

/* score[K][L] = -||key||_2, summed in double and rounded once: kvpress sums in float32, so the two agree to an
 * ulp or so and rank alike except for keys whose norms are that close (tests/test_kvpress.c). */
static int score_knorm(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                       KvErr *err) {
    (void)row, (void)cfg;
    out->score = kv_malloc(sizeof(float) * (size_t)o->K * o->L, err);
    if (!out->score) return -1;
    for (int k = 0; k < o->K; k++)
        for (int j = 0; j < o->L; j++) {
            const float *key = o->keys[k] + (size_t)j * o->d;
            double sum = 0.0;
            for (int t = 0; t < o->d; t++) sum += (double)key[t] * key[t];
            out->score[(size_t)k * o->L + j] = (float)-sqrt(sum);
        }
    return 0;
}

POLICY_DESCRIPTOR(KNORM) = {
    .name = "knorm",
    .press_name = "KnormPress",
    .source = "Devoto et al. 2024; kvpress 0.5.5 KnormPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_KEYS,
    .score = score_knorm,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#17becf",
};
