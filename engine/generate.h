/* generate.h — greedy decoding of several sequences at once on a backend (spec policies.md §4.4).
 *
 * Each sequence has its own cache; all receive the same prompt tokens (the question), then decode
 * greedily until a stop token or max_new tokens. Finished sequences drop out of the batch. */
#ifndef KVBENCH_GENERATE_H
#define KVBENCH_GENERATE_H

#include "backend.h"
#include "tokenizer.h"

/* When a generated token ends the answer.
 * GEN_STOP_REFERENCE (the default, kvpress pipeline.py generate_answer): the first generated token is never
 *   tested; any later token in the stop set is kept in the output and ends the sequence. Decoding with
 *   skip_special drops a special stop token (an end-of-turn) and keeps a plain one such as "\n" (samsum).
 * GEN_STOP_ANY_TOKEN (kvbench's earlier rule, opt-in): every generated token is tested, the first included,
 *   and a stop token is dropped from the output. */
typedef enum { GEN_STOP_REFERENCE = 0, GEN_STOP_ANY_TOKEN = 1 } GenerateStopRule;

typedef struct {
    int max_new;            /* at most this many generated tokens */
    const int *stop_ids;    /* a generated stop id ends the sequence, under stop_rule */
    int n_stop;
    const TraceHook *trace; /* optional, per decode step */
    GenerateStopRule stop_rule;
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

/* The sequences of one sample in a joint decode: they receive its prompt (its question), then decode under its
 * options. out[n_seqs] as generate_greedy's. stats is filled: its prompt feed, and its share of the joint steps
 * (each step's time split by how many of the step's sequences are the group's). */
typedef struct {
    KvCache *const *caches;
    int n_seqs;
    const int *prompt;
    int n_prompt;
    GenerateOptions opt;
    TokenIds *out;
    GenerateStats stats;
} GenerateGroup;

/* generate_greedy over several groups at once (runs/sweep.c's decode across samples): each group's prompt is fed
 * to its caches in a forward of its own (prompts differ in length), then every single-token step runs all the
 * groups' unfinished sequences as one batch, so a step reads the weights once for all of them. A sequence's
 * tokens are those generate_greedy gives it alone wherever the backend's batched forward is row-invariant (the
 * CPU backend's is, and tests/test_generate.c holds it to that). A trace hook sees its group's sequence numbers. */
int generate_greedy_groups(Backend *be, GenerateGroup *groups, int n_groups, KvErr *err);

#endif
