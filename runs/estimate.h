/* estimate.h — a modelled time and memory estimate of a sweep on one GPU (`kvbench data check` prints it).
 *
 * Modelled, not measured: the CUDA backend has never run on a GPU, so nothing here comes from a timing. Each
 * sample is one prefill of its context, a question fed to every variant, and a batched greedy decode of every
 * variant at once (runs/sweep.c), each step bounded by the larger of its arithmetic and its memory traffic:
 *
 *   P  = matrix parameters of the layers, N·(D·H·d + 2·D·K·d + H·d·D + 3·D·F); P_out = V·D (the LM head)
 *   kv = bytes of K and V per token of one sequence = 2·N·K·d·2 (bf16)
 *   prefill  FLOPs = 2·P·L + 2·N·H·d·L² (causal attention: QKᵀ and PV over half the L² pairs) + 2·P_out
 *   feed     FLOPs = 2·(P + P_out)·q·B,                       bytes = W + Σ_v kv·k_v·L
 *   decode   FLOPs = 2·(P + P_out)·B per step,                 bytes = W + Σ_v kv·(k_v·L + q + G/2) per step
 *   time     = FLOPs / (peak · e_flops)  or  bytes / (bandwidth · e_bw), the larger (prefill, feed, and each of
 *              the G decode steps)
 *   memory   = W + kv·L (the prefill's cache; + kv·(q + G) when the full cache decodes on it)
 *              + Σ_{v compressed} kv·(k_v·L + q + G) (all live at once)
 *              + activations of one chunk of min(L, 4096) rows: rows·(12·D + 4·(H + 2K)·d + 10·F) bytes
 *              + the observation window's probabilities w·L·H·4 bytes + 768 MiB (cuBLAS, context: the backend's
 *              own margin)
 *
 * with W = 2·(P + P_out·(tied ? 1 : 2)) bytes of bf16 weights (embedding and LM head), L context tokens, q
 * question tokens, G = the sample's max new tokens (an upper bound: answers that stop early decode less), B variants, k_v the
 * kept fraction of variant v (1 for the full cache). Efficiencies are assumptions, not measurements. Policy
 * scoring and keep-set selection on the host are left out. Shape legend as in engine/model.h. */
#ifndef KVBENCH_RUNS_ESTIMATE_H
#define KVBENCH_RUNS_ESTIMATE_H

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
} Estimate;

/* Adds one sample of `context` tokens, `question` tokens and at most `new_tokens` generated, decoded by
 * n_variants variants of which variant v keeps the fraction keep[v] of the context (1 for the full cache);
 * window: the largest observation window of the attention-scored policies (0 if none). */
void estimate_add(Estimate *e, const ModelConfig *m, const DeviceModel *dev, int context, int question,
                  int new_tokens, const double *keep, int n_variants, int window);

/* The longest context whose modelled memory (as above, question and answer room left out) fits dev: the
 * variants keep keep[v] of it (token budgets count as 0 at long contexts). 0 when not even the weights fit. */
double estimate_max_context(const ModelConfig *m, const DeviceModel *dev, const double *keep, int n_variants,
                            int window);

/* Weight bytes in bf16 and the per-token K+V bytes of one sequence, as used above. */
double estimate_weight_bytes(const ModelConfig *m);
double estimate_kv_bytes_per_token(const ModelConfig *m);

#endif
