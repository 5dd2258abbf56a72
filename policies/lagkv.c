/* lagkv.c — LagKV (Liang et al. 2025, arXiv 2504.04704), as kvpress 0.5.5's LagKVPress: after n_sink sink tokens
 * the context is cut into partitions of lag_size tokens; each token of a partition is scored against the next
 * partition (its "lag" reference): per channel its key and its value are min-max normalised by the reference's
 * range, the spread (standard deviation) over channels is softmaxed over the partition, keys and values averaged.
 * The score is then the token's rank within its partition / lag_size (kvpress without cross_scoring), and the sinks
 * and the tail (the last partition and the leftover tokens) score 1, so they stay. A context shorter than
 * n_sink + 2*lag_size is not scored: sinks 1, then the positions in order, the newest highest. Each head keeps its
 * top int(L*f); it reads the raw keys and values only. */
#include <math.h>
#include <stdlib.h>

#include "policy_internal.h"

/* _get_states_score of one partition [start, start+lag) of x[L][d] against the next: out[lag], in double (kvpress:
 * float32). */
static void states_score(const float *x, int d, int start, int lag, double *lo, double *hi, double *out) {
    const float *ref = x + (size_t)(start + lag) * d;
    for (int c = 0; c < d; c++) {
        lo[c] = hi[c] = ref[c];
        for (int t = 1; t < lag; t++) {
            double v = ref[(size_t)t * d + c];
            lo[c] = v < lo[c] ? v : lo[c];
            hi[c] = v > hi[c] ? v : hi[c];
        }
    }
    double top = -INFINITY;
    for (int t = 0; t < lag; t++) {
        const float *v = x + (size_t)(start + t) * d;
        double mean = 0.0, var = 0.0;
        for (int c = 0; c < d; c++) mean += (v[c] - lo[c]) / (hi[c] - lo[c]);
        mean /= d;
        for (int c = 0; c < d; c++) {
            double z = (v[c] - lo[c]) / (hi[c] - lo[c]) - mean;
            var += z * z;
        }
        out[t] = sqrt(var / (d - 1)); /* torch.std: Bessel's correction */
        top = out[t] > top ? out[t] : top;
    }
    double sum = 0.0;
    for (int t = 0; t < lag; t++) sum += out[t] = exp(out[t] - top);
    for (int t = 0; t < lag; t++) out[t] /= sum;
}

static int score_lagkv(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                       KvErr *err) {
    (void)cfg;
    const int L = o->L, d = o->d, lag = row->lag_size, n_sink = row->n_sink;
    out->score = kv_malloc(sizeof(float) * (size_t)o->K * L, err);
    double *work = out->score ? kv_malloc(sizeof(double) * (4 * (size_t)lag + 2 * (size_t)d), err) : NULL;
    float *part = work ? kv_malloc(sizeof(float) * (size_t)lag, err) : NULL;
    int *order = part ? kv_malloc(sizeof(int) * (size_t)lag, err) : NULL;
    if (!order) {
        free(work);
        free(part);
        return -1;
    }
    double *key_score = work, *value_score = work + lag, *lo = work + 2 * lag, *hi = lo + d;
    const int end = n_sink + (L - n_sink) / lag * lag, scored = L < n_sink + 2 * lag ? 0 : end - lag;
    int rc = 0;
    for (int k = 0; k < o->K && !rc; k++) {
        float *s = out->score + (size_t)k * L;
        for (int j = 0; j < L; j++) s[j] = 1.0f;
        if (!scored) { /* too short to score: the sliding part in order, arange(L - n_sink) / (L - n_sink) */
            for (int j = n_sink; j < L; j++) s[j] = (float)(j - n_sink) / (float)(L - n_sink);
            continue;
        }
        for (int start = n_sink; start < scored && !rc; start += lag) {
            states_score(o->keys[k], d, start, lag, lo, hi, key_score);
            states_score(o->values[k], d, start, lag, lo, hi, value_score);
            for (int t = 0; t < lag; t++) part[t] = (float)((key_score[t] + value_score[t]) / 2);
            /* argsort().argsort(): each token's rank, lowest score 0; sort_desc_stable ranks the highest first */
            rc = sort_desc_stable(part, lag, order, err);
            for (int r = 0; !rc && r < lag; r++) s[start + order[r]] = (float)(lag - 1 - r) / (float)lag;
        }
    }
    free(work);
    free(part);
    free(order);
    return rc;
}

POLICY_DESCRIPTOR(LAGKV) = {
    .name = "lagkv",
    .press_name = "LagKVPress",
    .source = "Liang et al. 2025; kvpress 0.5.5 LagKVPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_KEYS | NEEDS_VALUES,
    .score = score_lagkv,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#dbdb8d",
    .n_sink = 4,
    .lag_size = 128,
};
