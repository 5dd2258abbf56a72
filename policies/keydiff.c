/* keydiff.c — KeyDiff (Park et al. 2025, arXiv 2504.15364), as kvpress 0.5.5's KeyDiffPress: an entry whose
 * key points away from the head's mean key direction is distinctive, so it scores the negative cosine
 * similarity of its key (after RoPE) to the mean of the head's unit keys; each head keeps its top int(L*f).
 * kvpress scores the whole prefill at once; the paper's block-wise eviction is kvpress's BlockPress around it,
 * which kvbench does not run. Like every kvpress ScorerPress it protects no window and reads only the keys. */
#include <math.h>
#include <stdlib.h>

#include "policy_internal.h"

/* anchor = mean_j key_j / max(||key_j||, 1e-12) (F.normalize), score_j = -key_j·anchor / max(||key_j||·||anchor||,
 * 1e-8) (F.cosine_similarity), in double, rounded once. */
static int score_keydiff(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                         KvErr *err) {
    (void)row, (void)cfg;
    const int L = o->L, d = o->d;
    double *anchor = kv_malloc(sizeof(double) * (size_t)d, err), *norm = kv_malloc(sizeof(double) * (size_t)L, err);
    out->score = anchor && norm ? kv_malloc(sizeof(float) * (size_t)o->K * L, err) : NULL;
    if (!out->score) {
        free(anchor);
        free(norm);
        return -1;
    }
    for (int k = 0; k < o->K; k++) {
        const float *keys = o->keys[k];
        for (int t = 0; t < d; t++) anchor[t] = 0.0;
        for (int j = 0; j < L; j++) {
            double s = 0.0;
            for (int t = 0; t < d; t++) s += (double)keys[(size_t)j * d + t] * keys[(size_t)j * d + t];
            norm[j] = sqrt(s);
            for (int t = 0; t < d; t++) anchor[t] += keys[(size_t)j * d + t] / fmax(norm[j], 1e-12);
        }
        double anchor_norm = 0.0;
        for (int t = 0; t < d; t++) {
            anchor[t] /= L;
            anchor_norm += anchor[t] * anchor[t];
        }
        anchor_norm = sqrt(anchor_norm);
        for (int j = 0; j < L; j++) {
            double dot = 0.0;
            for (int t = 0; t < d; t++) dot += keys[(size_t)j * d + t] * anchor[t];
            out->score[(size_t)k * L + j] = (float)(-dot / fmax(norm[j] * anchor_norm, 1e-8));
        }
    }
    free(anchor);
    free(norm);
    return 0;
}

POLICY_DESCRIPTOR(KEYDIFF) = {
    .name = "keydiff",
    .press_name = "KeyDiffPress",
    .source = "Park et al. 2025; kvpress 0.5.5 KeyDiffPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_KEYS,
    .score = score_keydiff,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#aec7e8",
};
