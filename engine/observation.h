/* observation.h — what the engine hands to the eviction policies after each layer of a context prefill.
 *
 * The backend fills the raw tensors (window queries after RoPE, the layer's keys and values, the output
 * projection). attn and value_norm are computed at most once per layer — by the CUDA backend on the GPU, or
 * by observation_prepare below in plain C — and shared by every policy of a sweep (spec policies.md §1.2, §1.4).
 * Shape legend: L context length, w window, H heads, K kv-heads, G = H/K, d head dim, D hidden size. */
#ifndef KVBENCH_OBSERVATION_H
#define KVBENCH_OBSERVATION_H

#include "err.h"

typedef struct {
    int layer;                   /* 0-based layer index */
    int n_layers;                /* N */
    int L, w, H, K, d, D;
    const float *q_win;          /* [H][w][d] queries of positions L-w..L-1, after RoPE */
    const float *const *keys;    /* [K] -> [L][d] keys after RoPE */
    const float *const *values;  /* [K] -> [L][d] */
    const float *w_o;            /* [D][H*d] o_proj weight, Hugging Face layout */
    /* Opt-in (ObserveHook.attention_sums), else NULL: [H][L] per query head, the column sums of the softmaxed
     * attention of every query of the prefill (query i sees keys j <= i), in double. */
    const double *attn_sums;
    /* Opt-in (ObserveHook.query_stats), else NULL: [H][d + d*d] per query head the mean and then the covariance
     * (centred, divided by their count) of the queries before RoPE of positions query_stats_from..L-1, in double. */
    const double *query_stats;
    int query_stats_from;
    const float *rope_inv_freq;  /* [d/2] the model's RoPE inverse frequencies, with query_stats (else NULL) */
    /* Derived, filled by observation_prepare when NULL: */
    float *attn;                 /* [H][w][L] softmax of each window query over all L keys, causal in the window */
    float *value_norm;           /* [K][L] nu[k][j] = mean over the G query heads of || v[k][j] · W_O^(h) ||_1 */
    void *scratch;               /* owned storage behind attn / value_norm when computed here */
} Observation;

/* The observations beyond the window attention, value norms and raw tensors, which a backend gives only where it
 * can (Backend.observes, backend_observes) and a policy asks for only when it reads them (policy_missing_
 * observation). */
enum {
    OBSERVES_ATTENTION_SUMS = 1u << 0, /* attn_sums */
    OBSERVES_QUERY_STATS = 1u << 1,    /* query_stats, rope_inv_freq */
    /* an observed forward on top of a cache that already holds the context, its new entries then discarded
     * (kvcache_truncate): q_win the new tokens' queries after RoPE, keys the whole cache (KVzip's
     * reconstruction pass) */
    OBSERVES_RECONSTRUCTION = 1u << 2
};

/* Computes attn (always) and value_norm (when want_value_norm) if they are NULL, in f32.
 * Pure C reference; the golden policy tests call it on the reference inputs. */
int observation_prepare(Observation *obs, int want_value_norm, KvErr *err);
/* Frees what observation_prepare allocated (not the raw tensors). */
void observation_release(Observation *obs);

#endif
