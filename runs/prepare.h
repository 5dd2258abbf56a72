/* prepare.h — the per-sample preparation shared by `kvbench run` (runs/sweep.c) and `kvbench trace`
 * (runs/trace.c): the sample's chat split tokenized, ONE prefill of the context during which every policy
 * observes each layer, then a keep-set per policy and budget (docs/DESIGN.md §1).
 *
 * Policies may observe with different windows (the fragility analysis compares w = 1 with w = 32): the
 * prefill's hook observes the largest window, and a policy with a smaller one sees the last rows of it — the
 * same softmax rows a prefill with that window would give, since the last queries of the context see every
 * earlier key either way. Shape legend: L context length, w window, H heads, K kv-heads. */
#ifndef KVBENCH_RUNS_PREPARE_H
#define KVBENCH_RUNS_PREPARE_H

#include "../datasets/dataset.h"
#include "../engine/backend.h"
#include "../engine/tokenizer.h"
#include "../policies/policy.h"

typedef struct {
    const Model *model;
    Tokenizer *tok;
    Backend *be;
    int compress_question;  /* context and question compressed together (policies.md §1.1) */
    int keep_value_norm;    /* prefill_run keeps every layer's projected value norm (kvbench trace, value_weighted) */
    const DuoPattern *duo_pattern; /* the model's DuoAttention head pattern, handed to duoattention; may be NULL */
    int host_scoring;       /* score on the host even where the device could (kvbench trace reads the host's
                             * state; the GPU check compares the two) */
    ChatFormat chat;        /* the chat format the context was rendered in (prepare_chat_format), which frames a
                             * reconstruction pass's inputs (NEEDS_RECONSTRUCTION, KVzip) */
} PrepareEnv;

/* The chat format prepare_tokens renders sample s in: the model's, or none for a sample without chat. */
ChatFormat prepare_chat_format(const PrepareEnv *env, const Sample *s);

/* The chat split of a sample tokenized: the context (prefilled, compressed) and the question (fed after). */
int prepare_tokens(const PrepareEnv *env, const Sample *s, TokenIds *ctx, TokenIds *q, KvErr *err);
/* Stop ids: the model's EOS ids, the tokenizer's EOS, and "\n" where the task stops at a newline. */
int prepare_stop_ids(const PrepareEnv *env, const Sample *s, TokenIds *out, KvErr *err);

/* KVzip's reconstruction pass over a context (policy.h ReconstructionSpec): each chunk's context positions and
 * input ids. The chat template's prefix (kvpress: the tokens of its text before the user message) is not
 * reconstructed; without a template the prefix is empty and the suffix "\n", as kvpress does for a tokenizer
 * without one. */
typedef struct {
    int n_chunks;
    int *start, *end;  /* [n_chunks] the chunk's context positions [start, end) */
    TokenIds *input;   /* [n_chunks] its input: the prompt (and the previous chunk's tail), suffix, chunk */
    int max_input;     /* the longest input: the entries a cache needs beyond the context */
} ReconstructionPlan;

int reconstruction_plan(const Tokenizer *tok, ChatFormat chat, const ReconstructionSpec *spec, const TokenIds *ctx,
                        ReconstructionPlan *out, KvErr *err);
void reconstruction_plan_free(ReconstructionPlan *plan);
/* The plan's chunks in order, each a forward on `cache` (holding exactly the context, with room for
 * plan->max_input more entries) observed at every layer by each of states[n] (policy_observe_reconstruction), the
 * cache truncated back to the context after each. A failed policy stops observing with its error in errs[i] and
 * failed[i] set; -1 is for the forward or the truncation. */
int reconstruction_run(Backend *be, KvCache *cache, const ReconstructionPlan *plan, PolicyState *const *states,
                       int n, int *failed, KvErr *errs, KvErr *err);

/* One policy state, shared by every budget of a (policy, aggregation, params). */
typedef struct {
    PolicyState *state;  /* scored on the host; NULL when the prefill scored on the device */
    void *device;        /* scored on the device: its CudaPolicy (policies/cuda_policy.h), else NULL */
    PolicyConfig cfg;
    double ms;      /* time in policy_observe (or policy_observe_copy) */
    int scores_from; /* an earlier slot that scores each layer the same way (policy_scores_equal), whose scores
                      * this one copies; -1: scores its own */
    int failed;     /* policy_begin or policy_observe failed: err says why */
    KvErr err;
} PolicySlot;

typedef struct {
    Backend *be;
    PolicySlot *slots;
    int n_slots;
    int *slot_of;        /* [n_policies] the slot of each policy given to prefill_run; -1 for full */
    int n_policies;
    int context_len;     /* L */
    KvCache *cache;      /* the full cache of the context, with the extra capacity asked for */
    float *value_norm;   /* [N][K][L] the observation's ν per layer when env->keep_value_norm, else NULL */
    double prefill_ms;   /* the forward, policy time excluded (the shared observation included) */
    double shared_ms;    /* of which the shared observation: window attention and value norms, computed once per
                          * layer for every policy (observation_prepare) */
    double reconstruction_ms;     /* KVzip's reconstruction pass (its slots' ms include it); 0 without one */
    double reconstruction_cpu_ms; /* its CPU time, every thread of the process */
    int on_device;       /* the slots scored and select on the device (a CUDA build on a backend that
                          * scores_on_device, every slot's policy one the device reproduces, one window, no raw
                          * tensors or kept value norms asked for); else on the host */
} Prefill;

/* Prefills ctx into a fresh cache with `extra_capacity` more entries per head, every distinct policy of
 * policies[n] observing, on the device where it can (Prefill.on_device: the same keep-sets, bit for bit, as
 * the host's on the same observation; tests/gpu/check_cuda.c) and on the host otherwise. Then, when a policy
 * reads one, the reconstruction pass under env->chat (one for every such policy: they share the spec of the first),
 * the cache holding room for its longest input. A policy that fails only marks its slot; -1 is for a forward
 * itself (the prefill's or the reconstruction's). */
int prefill_run(Prefill *p, const PrepareEnv *env, const TokenIds *ctx, const PolicyConfig *const *policies, int n,
                int extra_capacity, KvErr *err);
/* The keep-set of policies[i] at budget b (`full`: every context entry). Fails with the slot's error when
 * its policy failed during the prefill. */
int prefill_select(Prefill *p, int i, const Budget *b, KeepSet *out, KvErr *err);
/* Time policies[i] spent observing (0 for full). */
double prefill_observe_ms(const Prefill *p, int i);
void prefill_free(Prefill *p);

#endif
