/* estimate.h — a modelled time and memory estimate of a sweep on one GPU (`kvbench data check` prints it).
 *
 * Modelled, not measured: nothing here comes from a timing. Each sample is one prefill of its context, then the
 * variants decode in as few batches as fit the memory beside the prefill's cache (runs/memplan.h, the sweep's
 * own planner, on the CUDA backend's sizes): in each batch a question fed to its variants and a batched greedy
 * decode, each step bounded by the larger of its arithmetic and its memory traffic:
 *
 *   P  = matrix parameters of the layers, N·(D·H·d + 2·D·K·d + H·d·D + 3·D·F); P_out = V·D (the LM head)
 *   kv = bytes of K and V per token of one sequence = 2·N·K·d·2 (bf16); ix = 4·N·K bytes of a view's row
 *        indices per kept token
 *   prefill  FLOPs = 2·P·L + 2·N·H·d·L² (causal attention: QKᵀ and PV over half the L² pairs) + 2·P_out
 *   per batch b of B_b variants, S_b = Σ_{v in b} k_v·L kept tokens (views read ix·S_b more):
 *   feed     FLOPs = 2·(P + P_out)·q·B_b,                     bytes = W + kv·S_b (+ ix·S_b)
 *   decode   FLOPs = 2·(P + P_out)·B_b per step,               bytes = W + kv·(S_b + B_b·(q + G/2)) (+ ix·S_b)
 *   time     = FLOPs / (peak · e_flops)  or  bytes / (bandwidth · e_bw), the larger (prefill, and each batch's
 *              feed and G decode steps)
 *   memory   = fixed + prefill + the largest batch's Σ need_v, where
 *     fixed  = W + activations of one chunk of min(L, 4096) rows: rows·(12·D + 4·(H + 2K)·d + 10·F) bytes
 *              + the observation window's probabilities w·L·H·4 bytes + 768 MiB (the backend's margin)
 *     prefill= kv·L (+ kv·(q + G) when the full variant decodes on it)
 *     need_v = pages(kv·(q + G) + ix·k_v·L) for a view, pages(kv·(k_v·L + q + G)) for a copy (whole 2 MiB
 *              pages), + its share of a step: H·⌈(k_v·L + q + G + 1)/256⌉·(d + 2)·4 split-K partials, 4·V
 *              logits, 2·D, 48·N·K head table (0 for the full variant, which decodes on the prefill's cache)
 *   budget   = device memory − fixed − prefill − 256 MiB (the planner's reserve): views, or copies where they
 *              need no more batches (the CUDA backend's views are not measured as fast as copies)
 *
 * with W = 2·(P + P_out·(tied ? 1 : 2)) bytes of bf16 weights (embedding and LM head), L context tokens, q
 * question tokens, G = the sample's max new tokens (an upper bound: answers that stop early decode less), k_v the
 * kept fraction of variant v (1 for the full cache). A sample fits when every variant fits a batch alone.
 * Efficiencies are assumptions, not measurements. Policy scoring and keep-set selection on the host are left
 * out. Shape legend as in engine/model.h. */
#ifndef KVBENCH_RUNS_ESTIMATE_H
#define KVBENCH_RUNS_ESTIMATE_H

#include "../engine/err.h"
#include "../engine/model.h"

typedef struct {
    const char *name;
    double peak_flops;       /* dense bf16 FLOP/s */
    double bandwidth;        /* memory bytes/s */
    double memory_bytes;     /* device memory */
    double flops_efficiency; /* assumed fraction of peak_flops the prefill and decode GEMMs reach */
    double bw_efficiency;    /* assumed fraction of bandwidth the decode steps reach */
} DeviceModel;

/* NVIDIA H200 SXM: 989 TFLOP/s dense bf16, 4.8 TB/s HBM3e, 141 GB (NVIDIA's H200 datasheet); efficiencies
 * assumed 0.5 and 0.6. */
extern const DeviceModel DEVICE_H200;

typedef struct {
    double prefill_s, feed_s, decode_s;   /* summed over samples */
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
 * window: the largest observation window of the attention-scored policies (0 if none). -1 when out of memory. */
int estimate_add(Estimate *e, const ModelConfig *m, const DeviceModel *dev, int context, int question,
                 int new_tokens, const double *keep, int n_variants, int window, KvErr *err);

/* The longest context whose sample fits dev (every variant fits a batch beside the prefill's cache; with
 * one_batch, all of them one batch; question and answer room left out): the variants keep keep[v] of it (token
 * budgets count as 0 at long contexts). 0 when not even one token fits, -1 when out of memory. */
double estimate_max_context(const ModelConfig *m, const DeviceModel *dev, const double *keep, int n_variants,
                            int window, int one_batch, KvErr *err);

/* Weight bytes in bf16 and the per-token K+V bytes of one sequence, as used above. */
double estimate_weight_bytes(const ModelConfig *m);
double estimate_kv_bytes_per_token(const ModelConfig *m);

#endif
