/* kvzip.c — KVzip (Kim et al. 2025, arXiv 2505.23416) as kvpress 0.5.5's KVzipPress with its defaults (layerwise
 * off, 4 sinks, no KVzip+ normalisation, chunks of 2048): an entry scores the attention the model pays it while
 * it repeats the context. After the prefill, the context after the chat template's prefix is fed again, a chunk
 * at a time, behind "Repeat the previous context exactly." (or "Repeat the part of the previous context exactly,
 * starting with" and the previous chunk's last 8 ids) and the template's suffix, on top of the context cache
 * (NEEDS_RECONSTRUCTION: runs/prepare.c runs the pass, policy_observe_reconstruction hands each layer here). In
 * each layer the repeat tokens' queries after RoPE are softmaxed over a subset of the keys only — the first
 * min(n_sink, chunk start) sinks, the chunk's own context keys and the repeat tokens' keys, causally — and a chunk
 * key scores its largest probability over the group's query heads and every repeat query. Positions before the
 * first chunk (the template's prefix) after the sinks score 0. The selection is global (ALLOC_PRUNE_GLOBAL): the
 * sinks at the largest score plus 1, the bottom int(N*K*L*ratio) over every layer, kv-head and position dropped,
 * so layers and heads keep different counts. kvbench follows kvpress's code and was not compared with the paper's
 * text line by line; the paper's own repository also compresses for real, which kvpress (and kvbench) emulate by
 * the keep-set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy_internal.h"

/* The prefill gives KVzip nothing: every layer starts at 0, and the reconstruction pass fills the chunks. */
static int score_kvzip(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                       KvErr *err) {
    (void)row, (void)cfg;
    out->score = kv_calloc((size_t)o->K * o->L, sizeof(float), err);
    return out->score ? 0 : -1;
}

/* Rows of repeat queries per task: each task keeps the largest probability of each chunk key over its rows. */
#define KVZIP_ROWS 32

/* One layer of one chunk: q repeat queries (obs->q_win [H][q][d]) over the keys sinks [0, s), chunk [start, end)
 * and repeat [L, L + i] (query i, causal), where s = min(n_sink, start). The logits are float32 dot products as
 * kvpress's matmul gives them (summed in another order), scaled by 1/sqrt(d); the softmax is in double, each
 * probability rounded once to float. score[k][start + c] gets the largest over the group's heads and the rows. */
static int reconstruct_kvzip(const PolicyRow *row, const Observation *o, int start, int end, int L, float *score,
                             KvErr *err) {
    const int H = o->H, K = o->K, G = H / K, d = o->d, q = o->w, n_chunk = end - start;
    const int sinks = row->n_sink < start ? row->n_sink : start, n_cols = sinks + n_chunk + q;
    const int blocks = (q + KVZIP_ROWS - 1) / KVZIP_ROWS, tasks = H * blocks;
    const float scale = 1.0f / sqrtf((float)d);
    float *best = kv_calloc((size_t)tasks * n_chunk, sizeof(float), err);
    double *logit = best ? kv_malloc(sizeof(double) * (size_t)tasks * n_cols, err) : NULL;
    if (!logit) {
        free(best);
        return -1;
    }
    #pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < tasks; task++) {
        const int h = task / blocks, lo = task % blocks * KVZIP_ROWS, hi = lo + KVZIP_ROWS < q ? lo + KVZIP_ROWS : q;
        const float *keys = o->keys[h / G];
        float *mine = best + (size_t)task * n_chunk;
        double *z = logit + (size_t)task * n_cols;
        for (int i = lo; i < hi; i++) {
            const float *query = o->q_win + ((size_t)h * q + i) * d;
            const int n = sinks + n_chunk + i + 1; /* the columns query i sees */
            double top = -INFINITY, total = 0.0;
            for (int c = 0; c < n; c++) {
                const int j = c < sinks ? c : c < sinks + n_chunk ? start + c - sinks : L + c - sinks - n_chunk;
                const float *key = keys + (size_t)j * d;
                float dot = 0.0f;
                #pragma omp simd reduction(+ : dot)
                for (int t = 0; t < d; t++) dot += query[t] * key[t];
                z[c] = (double)(dot * scale);
                top = z[c] > top ? z[c] : top;
            }
            for (int c = 0; c < n; c++) total += exp(z[c] - top);
            for (int c = 0; c < n_chunk; c++) {
                float p = (float)(exp(z[sinks + c] - top) / total);
                mine[c] = p > mine[c] ? p : mine[c];
            }
        }
    }
    for (int k = 0; k < K; k++) {
        float *s = score + (size_t)k * L + start;
        for (int c = 0; c < n_chunk; c++) s[c] = 0.0f;
        for (int task = k * G * blocks; task < (k + 1) * G * blocks; task++)
            for (int c = 0; c < n_chunk; c++) {
                float p = best[(size_t)task * n_chunk + c];
                s[c] = p > s[c] ? p : s[c];
            }
    }
    free(best);
    free(logit);
    return 0;
}

POLICY_DESCRIPTOR(KVZIP) = {
    .name = "kvzip",
    .press_name = "KVzipPress",
    .source = "Kim et al. 2025; kvpress 0.5.5 KVzipPress",
    .role = POLICY_BASELINE,
    .needs = NEEDS_RECONSTRUCTION,
    .score = score_kvzip,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_PRUNE_GLOBAL,
    .colour = "#9edae5",
    .n_sink = 4,
    .chunk_length = 2048,
    .first_prompt = "\n\nRepeat the previous context exactly.",
    .next_prompt = "\n\nRepeat the part of the previous context exactly, starting with",
    .next_tail = 8,
    .reconstruct = reconstruct_kvzip,
};
