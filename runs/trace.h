/* trace.h — one sample's retained-importance trace (the paper's fragility analysis, docs/fragility.md).
 *
 * The sample is prepared as in a run (runs/prepare.h: tokenize, one observed prefill, a keep-set per
 * variant), then the question is fed and `steps` tokens are decoded greedily on the FULL prefill cache, with
 * the engine's TraceHook feeding one FragilityTrace (metrics/fragility.h) that measures every variant's
 * keep-set in that one decoding pass. The decode runs exactly `steps` steps (stop tokens do not end it), so
 * every sample contributes the same number of steps. With value_weighted importance the prefill also keeps
 * every layer's projected value norm ν (runs/prepare.h). Shape legend: S variants, T steps, N layers,
 * K kv-heads. */
#ifndef KVBENCH_RUNS_TRACE_H
#define KVBENCH_RUNS_TRACE_H

#include "../metrics/fragility.h"
#include "config.h"
#include "prepare.h"

typedef struct {
    int n_variants;          /* S */
    int n_steps;             /* T: the steps traced (the configured steps unless the sample failed) */
    int *failed;             /* [S] 1 when the variant has no trace; errs[s] says why */
    KvErr *errs;             /* [S] */
    double *mean_r, *min_r;  /* [T][S] per step: mean and minimum of R_t over (layer, kv-head) */
    long long *kept;         /* [S] entries in the keep-set */
    long long *clamped_kept; /* [S] of them, prefix entries the max+prior prior raised (-1: another aggregation) */
    int n_pairs;             /* N*K */
    float *r_heads;          /* [T][S][N*K] R_t(l, k), index l*K + k */
    int context_tokens, question_tokens;
    double prefill_ms, decode_ms;
} SampleTrace;

/* Traces variants[n] on sample s for `steps` decode steps. A failure of one variant's keep-set marks that
 * variant; a failure of the sample (tokenization, a context too long for the model, the prefill, the
 * decode) marks them all. Returns -1 only when out itself cannot be allocated. */
int trace_sample(const PrepareEnv *env, const Sample *s, const RunVariant *const *variants, int n, int steps,
                 Importance importance, SampleTrace *out, KvErr *err);
/* A trace of n variants that all failed for `why` (a sample the dataset could not build). */
int trace_failed(SampleTrace *out, int n, const KvErr *why, KvErr *err);
void sample_trace_free(SampleTrace *t);

#endif
