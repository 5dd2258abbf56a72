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
 * text line by line (kvpress's docstring points to the paper's repository for a version that compresses the cache
 * for real; kvpress and kvbench keep the same entries by a keep-set). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "policy_internal.h"

/* The prefill gives KVzip nothing: every layer starts at 0, and the reconstruction pass fills the chunks. */
static int score_kvzip(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                       KvErr *err) {
    (void)row, (void)cfg;
    out->score = kv_calloc((size_t)o->K * o->L, sizeof(float), err);
    return out->score ? 0 : -1;
}

/* Repeat queries per task: a task is one query head's block of rows, its logits KVZIP_ROWS x n_cols floats. */
#define KVZIP_ROWS 256

/* One layer of one chunk: q repeat queries (obs->q_win [H][q][d]) over the keys sinks [0, s), chunk [start, end)
 * and repeat [L, L + i] (query i, causal), where s = min(n_sink, start). As kvpress: float32 logits (sgemm, summed
 * in BLAS's order), scaled by 1/sqrt(d), a float32 exp of each; the softmax's sum in double, each probability
 * rounded once. score[k][start + c] gets the largest over the group's heads and the rows: each thread keeps its own
 * largest per kv-head, merged by max, so the result does not depend on the threads. Tasks run in parallel with a
 * single-threaded sgemm each, as the cpu backend's own products (it sets OpenBLAS to one thread). */
static int reconstruct_kvzip(const PolicyRow *row, const Observation *o, int start, int end, int L, float *score,
                             KvErr *err) {
    const int H = o->H, K = o->K, G = H / K, d = o->d, q = o->w, n_chunk = end - start;
    const int sinks = row->n_sink < start ? row->n_sink : start, n_cols = sinks + n_chunk + q;
    const int blocks = (q + KVZIP_ROWS - 1) / KVZIP_ROWS, threads = omp_get_max_threads();
    const float scale = 1.0f / sqrtf((float)d);
    float *z = kv_malloc(sizeof(float) * (size_t)threads * KVZIP_ROWS * n_cols, err);
    float *best = z ? kv_calloc((size_t)threads * K * n_chunk, sizeof(float), err) : NULL;
    if (!best) {
        free(z);
        return -1;
    }
    #pragma omp parallel num_threads(threads)
    {
        float *zt = z + (size_t)omp_get_thread_num() * KVZIP_ROWS * n_cols;
        float *bt = best + (size_t)omp_get_thread_num() * K * n_chunk;
        #pragma omp for schedule(dynamic)
        for (int task = 0; task < H * blocks; task++) {
            const int h = task / blocks, lo = task % blocks * KVZIP_ROWS;
            const int rows = q - lo < KVZIP_ROWS ? q - lo : KVZIP_ROWS;
            const float *query = o->q_win + ((size_t)h * q + lo) * d, *keys = o->keys[h / G];
            /* the three blocks of keys side by side in each row: sinks, chunk, repeat */
            const int from[3] = {0, start, L}, n[3] = {sinks, n_chunk, q}, col[3] = {0, sinks, sinks + n_chunk};
            for (int b = 0; b < 3; b++)
                if (n[b] > 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n[b], d, scale, query, d,
                                keys + (size_t)from[b] * d, d, 0.0f, zt + col[b], n_cols);
            float *mine = bt + (size_t)(h / G) * n_chunk;
            for (int r = 0; r < rows; r++) {
                float *zi = zt + (size_t)r * n_cols, top = -INFINITY;
                const int seen = sinks + n_chunk + lo + r + 1; /* the columns query lo + r sees */
                for (int c = 0; c < seen; c++) top = zi[c] > top ? zi[c] : top;
                double total = 0.0;
                for (int c = 0; c < seen; c++) total += (zi[c] = expf(zi[c] - top));
                for (int c = 0; c < n_chunk; c++) {
                    float p = (float)(zi[sinks + c] / total);
                    mine[c] = p > mine[c] ? p : mine[c];
                }
            }
        }
    }
    for (int k = 0; k < K; k++) {
        float *s = score + (size_t)k * L + start;
        for (int c = 0; c < n_chunk; c++) s[c] = 0.0f;
        for (int t = 0; t < threads; t++)
            for (int c = 0; c < n_chunk; c++) {
                float p = best[((size_t)t * K + k) * n_chunk + c];
                s[c] = p > s[c] ? p : s[c];
            }
    }
    free(z);
    free(best);
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
