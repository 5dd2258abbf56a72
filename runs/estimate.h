/* estimate.h — a GPU time and memory estimate of a sweep on one GPU (`kvbench data check` prints it).
 *
 * Modelled from token counts, with rates measured on an H200 (tests/gpu/check.sh, 2026-12-04; the logs are in
 * tests/gpu/results/). Each sample is one prefill of its context, observed by the policies, then the variants
 * decode in as few batches as fit the memory beside the prefill's cache (runs/memplan.h, the sweep's own planner,
 * on the CUDA backend's sizes): in each batch a question fed to its variants and a batched greedy decode, each
 * step bounded by the larger of its arithmetic and its memory traffic:
 *
 *   P  = matrix parameters of the layers, N·(D·H·d + 2·D·K·d + H·d·D + 3·D·F); P_out = V·D (the LM head)
 *   kv = bytes of K and V per token of one sequence = 2·N·K·d·2 (bf16); ix = 4·N·K bytes of a view's row
 *        indices per kept token
 *   prefill  = max((2·P·L + 2·P_out) / R_matrix + 2·N·H·d·L² / R_attention, W / R_weights)
 *              (causal attention: QKᵀ and PV over half the L² pairs, in the flash kernel)
 *   observe  = 2·N·L·H·d·D / R_observe (the device: window attention, value norms, copies to the host)
 *              + n_scorings·N·H·w·L·t_score (the host: each distinct scoring, policy_configs_score_equal)
 *              + n_compressed·N·K·L·t_select (the host: one keep-set per compressed variant)
 *   per batch b of B_b variants, S_b = Σ_{v in b} k_v·L kept tokens, c = c_view for views and 1 for copies:
 *   feed     = max(2·(P + P_out)·q·B_b / R_matrix, W / R_weights + kv·S_b·c / R_kv)
 *   decode   = G × max(2·(P + P_out)·B_b / R_matrix, W / R_weights + kv·(S_b·c + B_b·(q + G/2)) / R_kv)
 *   memory   = fixed + prefill + the largest batch's Σ need_v, where
 *     fixed  = W + activations of one chunk of min(L, 4096) rows: rows·(12·D + 4·(H + 2K)·d + 10·F) bytes
 *              + the observation window's probabilities w·L·H·4 bytes + 768 MiB (the backend's margin)
 *     prefill= kv·L (+ kv·(q + G) when the full variant decodes on it)
 *     need_v = pages(kv·(q + G) + ix·k_v·L) for a view, pages(kv·(k_v·L + q + G)) for a copy (whole 2 MiB
 *              pages), + its share of a step: H·⌈(k_v·L + q + G + 1)/256⌉·(d + 2)·4 split-K partials, 4·V
 *              logits, 2·D, 48·N·K head table (0 for the full variant, which decodes on the prefill's cache)
 *   budget   = device memory − fixed − prefill − 256 MiB (the planner's reserve): views, or copies where they
 *              need no more batches (the CUDA backend's views are measured slower than copies: c_view)
 *
 * with W = 2·(P + P_out·(tied ? 1 : 2)) bytes of bf16 weights (embedding and LM head), L context tokens, q
 * question tokens, G = the sample's max new tokens (an upper bound: answers that stop early decode less), k_v the
 * kept fraction of variant v (1 for the full cache). A sample fits when every variant fits a batch alone. The
 * host's shares were measured on the lender's 16-core host and scale with its cores. Shape legend as in
 * engine/model.h. */
#ifndef KVBENCH_RUNS_ESTIMATE_H
#define KVBENCH_RUNS_ESTIMATE_H

#include "../engine/err.h"
#include "../engine/model.h"

typedef struct {
    const char *name;
    double memory_bytes;    /* device memory the planner may use (cudaMemGetInfo's free memory) */
    double matrix_flops;    /* R_matrix: FLOP/s of the backend's bf16 matrix products */
    double attention_flops; /* R_attention: FLOP/s of the flash prefill kernel's causal attention */
    double weight_bw;       /* R_weights: bytes/s of a decode step's weight reads */
    double kv_bw;           /* R_kv: bytes/s of the split-K decode kernel's K/V reads of gathered copies */
    double view_kv_cost;    /* c_view: a view's K/V reads take this many times a copy's */
    double observe_flops;   /* R_observe: the device's observation, per FLOP of its value norms */
    double score_s;         /* t_score: host seconds per H·w·L element of a layer, per distinct scoring */
    double select_s;        /* t_select: host seconds per N·K·L entry, per compressed variant's keep-set */
    const char *source;     /* where the rates were measured */
    const char *unmeasured; /* what the backend has, or will have, that these rates do not measure yet (NULL:
                             * nothing): such a part is modelled at the rate of the path it replaces */
} DeviceModel;

/* NVIDIA H200 (139.3 GiB free of 139.8), rates measured by tests/gpu/check.sh on 2026-12-04 on the
 * synthetic Llama-3.1-8B shape (4 layers): prefills of 4k, 16k and 32k tokens fitted as matrix + attention, decode
 * steps at caches of 4k and 32k and batches 1, 16, 32, the observation of an 8-policy sweep at 32k. */
extern const DeviceModel DEVICE_H200;

typedef struct {
    double prefill_s, observe_s, feed_s, decode_s; /* summed over samples */
    double peak_bytes;                    /* the largest sample's device memory */
    double weights_bytes;
    long samples;
    long long context_tokens;             /* Σ L */
    int longest_context;                  /* max L */
    long batches;                         /* decode batches, summed over samples */
    int most_batches;                     /* of one sample */
    long samples_copies;                  /* samples whose variants decode on gathered copies (the rest: views) */
    long samples_unfit;                   /* samples with a variant that does not fit a batch alone */
    int longest_fit;                      /* max L of the samples that fit */
} Estimate;

/* Adds one sample of `context` tokens, `question` tokens and at most `new_tokens` generated, decoded by
 * n_variants variants of which variant v keeps the fraction keep[v] of the context (1 for the full cache);
 * window: the largest observation window of the attention-scored policies (0 if none), n_scorings: how many
 * distinct scorings observe it. -1 when out of memory. */
int estimate_add(Estimate *e, const ModelConfig *m, const DeviceModel *dev, int context, int question,
                 int new_tokens, const double *keep, int n_variants, int window, int n_scorings, KvErr *err);

/* The longest context whose sample fits dev (every variant fits a batch beside the prefill's cache; with
 * one_batch, all of them one batch; question and answer room left out): the variants keep keep[v] of it (token
 * budgets count as 0 at long contexts). 0 when not even one token fits, -1 when out of memory. */
double estimate_max_context(const ModelConfig *m, const DeviceModel *dev, const double *keep, int n_variants,
                            int window, int one_batch, KvErr *err);

/* Weight bytes in bf16 and the per-token K+V bytes of one sequence, as used above. */
double estimate_weight_bytes(const ModelConfig *m);
double estimate_kv_bytes_per_token(const ModelConfig *m);

#endif
