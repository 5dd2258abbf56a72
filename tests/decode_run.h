/* decode_run.h — the CPU backend tests' batched run: n_seqs sequences, each prefilled alone with its own prompt,
 * then decoded together, so a test can hold the batch against single sequences and the reference forward. */
#ifndef KVBENCH_TESTS_DECODE_RUN_H
#define KVBENCH_TESTS_DECODE_RUN_H

#include <math.h>
#include <stdlib.h>

#include "../engine/backend.h"

/* max |a - b| / max |b| over n (logits against their reference). */
static inline double rel_err(const float *a, const float *b, int n) {
    double worst = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return worst / fmax(scale, 1e-30);
}

/* Token t of sequence b, for a vocabulary of V. */
typedef int (*DecodeRunToken)(int b, int t, int V);

/* logits[s][b][V]: s = 0 the prompt's last position, s = 1..steps each decode step of all n_seqs together (the
 * trace hook, if any, on those steps). */
static inline int decode_run(Backend *be, int n_seqs, int n_prompt, int steps, DecodeRunToken token_at, float *logits,
                             const TraceHook *trace, KvErr *err) {
    int V = be->model->cfg.vocab_size, rc = 0;
    int *ids = malloc(sizeof(int) * (size_t)(n_prompt + n_seqs));
    KvCache **caches = calloc((size_t)n_seqs, sizeof *caches);
    if (!ids || !caches) {
        free(ids);
        free(caches);
        return kv_fail(err, "out of memory");
    }
    for (int b = 0; b < n_seqs && !rc; b++) {
        for (int t = 0; t < n_prompt; t++) ids[t] = token_at(b, t, V);
        rc = be->cache_new(be, &caches[b], n_prompt + steps, err) ||
             be->forward(be, &caches[b], 1, ids, n_prompt, logits + (size_t)b * V, NULL, NULL, err);
    }
    for (int s = 1; s <= steps && !rc; s++) {
        for (int b = 0; b < n_seqs; b++) ids[b] = token_at(b, n_prompt + s - 1, V);
        rc = be->forward(be, caches, n_seqs, ids, 1, logits + (size_t)s * n_seqs * V, NULL, trace, err);
    }
    for (int b = 0; b < n_seqs; b++)
        if (caches[b]) be->cache_free(be, caches[b]);
    free(ids);
    free(caches);
    return rc;
}

#endif
