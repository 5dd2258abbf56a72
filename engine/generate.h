/* generate.h — greedy decoding of several sequences at once on a backend (spec policies.md §4.4).
 *
 * Each sequence has its own cache; all receive the same prompt tokens (the question), then decode
 * greedily until a stop token or max_new tokens. Finished sequences drop out of the batch. */
#ifndef KVBENCH_GENERATE_H
#define KVBENCH_GENERATE_H

#include "backend.h"
#include "tokenizer.h"

typedef struct {
    int max_new;            /* at most this many generated tokens */
    const int *stop_ids;    /* a generated stop id ends the sequence (not included in the output) */
    int n_stop;
    const TraceHook *trace; /* optional, per decode step */
} GenerateOptions;

typedef struct {
    double feed_ms;    /* time to feed the prompt tokens */
    double decode_ms;  /* time of the single-token steps */
    long decode_tokens;/* tokens produced over all sequences */
} GenerateStats;

/* caches[B] are advanced in place. out[b] receives the generated ids of sequence b (caller frees with
 * ids_free). */
int generate_greedy(Backend *be, KvCache *const *caches, int n_seqs, const int *prompt, int n_prompt,
                    const GenerateOptions *opt, TokenIds *out, GenerateStats *stats, KvErr *err);

#endif
