/* estimate.c — the modelled GPU time and memory of a sweep (formulas in estimate.h). */
#include "estimate.h"

#include <math.h>
#include <stdlib.h>

#include "memplan.h"

/* The rates, from tests/gpu/results/2026-12-04-h200-*.log (matrix and attention: t(T) = a·T + b·T² fitted to the
 * 16k and 32k prefills of -final.log; weights: the batch-1 step at 4k; K/V: -decode.log's steps of batch 16 and
 * 32 at 32k less their weight reads (1.66-1.68 TB/s; 1.0-1.1 at 4k, where the decode launches are short); views:
 * 7.01 against 6.39 and 13.07 against 11.47 ms per step at 32k; the observation: 0.145 s for 4.4 TFLOP of value
 * norms; the host: 0.401 s of scoring by 4 distinct scorings and 0.305 s for 14 keep-sets over 4 layers of 32
 * heads at 32k, -final.log). 139.3 GiB: what cudaMemGetInfo reported free. */
const DeviceModel DEVICE_H200 = {"NVIDIA H200 (measured 2026-12-04)", 139.3 * 1073741824.0, 585e12, 94e12, 2.3e12,
                                 1.67e12, 1.14, 30e12, 0.75e-9, 21e-9, "tests/gpu/results/2026-12-04-h200-*.log",
                                 "scoring and selection on the device (policies/cuda_policy.cu: equal to the host's "
                                 "keep-sets in emulation, never run on a GPU), so they are modelled at the host's "
                                 "rates; the fused value norms (engine/cuda/kernels.cu k_value_norms: within 3e-7 of "
                                 "a double oracle in emulation, never timed), modelled at the GEMM path's rate; decode "
                                 "across samples (runs/sweep.c's decode_samples: the rows of one sample at a time on "
                                 "the CPU and in emulation, never timed), modelled one sample a batch; cuDNN attention "
                                 "is not built (issue 36)"};

/* The CUDA backend's sizes (engine/cuda/cuda_backend.cu CHUNK_ROWS, MEM_MARGIN, PLAN_RESERVE, ALLOC_PAGE,
 * sizeof(DevHead); engine/cuda/splitk.h SPLITK_KEYS). */
#define CHUNK_ROWS 4096
#define MARGIN_BYTES (768.0 * 1024 * 1024)
#define RESERVE_BYTES (256.0 * 1024 * 1024)
#define PAGE_BYTES (2.0 * 1024 * 1024)
#define DEV_HEAD_BYTES 48.0
#define SPLIT_KEYS 256.0

static double layer_params(const ModelConfig *m) {
    double D = m->d_model, H = m->n_heads, K = m->n_kv_heads, d = m->head_dim, F = m->d_ff;
    return (double)m->n_layers * (D * H * d + 2 * D * K * d + H * d * D + 3 * D * F);
}

static double head_params(const ModelConfig *m) { return (double)m->vocab_size * m->d_model; }

double estimate_weight_bytes(const ModelConfig *m) {
    return 2.0 * (layer_params(m) + head_params(m) * (m->tied_embeddings ? 1 : 2));
}

double estimate_kv_bytes_per_token(const ModelConfig *m) {
    return 2.0 * m->n_layers * m->n_kv_heads * m->head_dim * 2.0;
}

/* A step of `flops` matrix arithmetic that reads the weights and kv_bytes of K/V: the slower of the two. */
static double step_s(const DeviceModel *dev, double flops, double weight_bytes, double kv_bytes) {
    double compute = flops / dev->matrix_flops;
    double memory = weight_bytes / dev->weight_bw + kv_bytes / dev->kv_bw;
    return compute > memory ? compute : memory;
}

/* Activation bytes per token row of a forward chunk (residual, projections, MLP halves). */
static double activation_row_bytes(const ModelConfig *m) {
    return 12.0 * m->d_model + 4.0 * (m->n_heads + 2.0 * m->n_kv_heads) * m->head_dim + 10.0 * m->d_ff;
}

/* One sample's decode plan on dev (estimate.h): need[2n] (views, then copies), batch_of[n]. */
typedef struct {
    double fixed, prefill, budget;
    int n_batches, use_views, fits;
} SamplePlan;

static int plan_sample(const ModelConfig *m, const DeviceModel *dev, double L, double q, double G, const double *keep,
                       int n, int window, double *need, int *batch_of, SamplePlan *sp, KvErr *err) {
    const double kv = estimate_kv_bytes_per_token(m), ix = 4.0 * m->n_layers * m->n_kv_heads;
    double rows = L < CHUNK_ROWS ? L : CHUNK_ROWS;
    sp->fixed = estimate_weight_bytes(m) + rows * activation_row_bytes(m) + 4.0 * window * L * m->n_heads +
                MARGIN_BYTES;
    int has_full = 0;
    for (int v = 0; v < n; v++) has_full |= keep[v] >= 1.0;
    sp->prefill = kv * (L + (has_full ? q + G : 0));
    sp->budget = dev->memory_bytes - sp->fixed - sp->prefill - RESERVE_BYTES;
    for (int v = 0; v < n; v++) {
        double kept = keep[v] * L;
        double step = m->n_heads * ceil((kept + q + G + 1) / SPLIT_KEYS) * (m->head_dim + 2) * 4.0 +
                      4.0 * m->vocab_size + 2.0 * m->d_model + DEV_HEAD_BYTES * m->n_layers * m->n_kv_heads;
        if (keep[v] >= 1.0) { /* full: decodes on the prefill's cache */
            need[v] = need[n + v] = 0;
            continue;
        }
        need[v] = ceil((kv * (q + G) + ix * kept) / PAGE_BYTES) * PAGE_BYTES + step;
        need[n + v] = ceil(kv * (kept + q + G) / PAGE_BYTES) * PAGE_BYTES + step;
    }
    sp->n_batches = memplan_choose(need, need + n, n, sp->budget, 0, batch_of, &sp->use_views, err);
    if (sp->n_batches < 0) return -1;
    sp->fits = 1;
    for (int v = 0; v < n; v++) sp->fits &= batch_of[v] >= 0;
    return 0;
}

static int plan_buffers(int n, double **need, int **batch_of, KvErr *err) {
    *need = kv_malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof **need, err);
    *batch_of = kv_malloc((size_t)(n > 0 ? n : 1) * sizeof **batch_of, err);
    if (*need && *batch_of) return 0;
    free(*need);
    free(*batch_of);
    return -1;
}

double estimate_max_context(const ModelConfig *m, const DeviceModel *dev, const double *keep, int n_variants,
                            int window, int one_batch, KvErr *err) {
    double *need;
    int *batch_of;
    if (plan_buffers(n_variants, &need, &batch_of, err)) return -1;
    /* Fitting is monotone in L (the budget shrinks and every need grows with it): bisect on whole tokens. */
    double lo = 0, hi = 1e9;
    SamplePlan sp;
    while (hi - lo > 1) {
        double mid = floor((lo + hi) / 2);
        if (plan_sample(m, dev, mid, 0, 0, keep, n_variants, window, need, batch_of, &sp, err)) {
            lo = -1;
            break;
        }
        if (sp.fits && sp.budget >= 0 && (!one_batch || sp.n_batches <= 1)) lo = mid;
        else hi = mid;
    }
    free(need);
    free(batch_of);
    return lo;
}

int estimate_add(Estimate *e, const ModelConfig *m, const DeviceModel *dev, int context, int question,
                 int new_tokens, const double *keep, int n_variants, int window, int n_scorings, KvErr *err) {
    const double L = context, q = question, G = new_tokens, N = m->n_layers, H = m->n_heads;
    const double P = layer_params(m), P_out = head_params(m), W = estimate_weight_bytes(m);
    const double kv = estimate_kv_bytes_per_token(m);
    double *need;
    int *batch_of;
    SamplePlan sp;
    if (plan_buffers(n_variants, &need, &batch_of, err)) return -1;
    if (plan_sample(m, dev, L, q, G, keep, n_variants, window, need, batch_of, &sp, err)) {
        free(need);
        free(batch_of);
        return -1;
    }
    double prefill = (2 * P * L + 2 * P_out) / dev->matrix_flops +
                     2.0 * N * H * m->head_dim * L * L / dev->attention_flops;
    e->prefill_s += prefill > W / dev->weight_bw ? prefill : W / dev->weight_bw;
    int compressed = 0;
    for (int v = 0; v < n_variants; v++) compressed += keep[v] < 1.0;
    if (window > 0)
        e->observe_s += 2.0 * N * L * H * m->head_dim * m->d_model / dev->observe_flops +
                        n_scorings * N * H * window * L * dev->score_s;
    e->observe_s += compressed * N * m->n_kv_heads * L * dev->select_s;
    double largest = 0, c = sp.use_views ? dev->view_kv_cost : 1.0;
    for (int b = 0; b < sp.n_batches; b++) {
        double B = 0, kept = 0, held = 0;
        for (int v = 0; v < n_variants; v++)
            if (batch_of[v] == b) {
                B++;
                kept += keep[v] * L;
                held += need[(sp.use_views ? 0 : n_variants) + v];
            }
        e->feed_s += step_s(dev, 2 * (P + P_out) * q * B, W, kv * kept * c);
        e->decode_s += G * step_s(dev, 2 * (P + P_out) * B, W, kv * (kept * c + B * (q + G / 2)));
        if (held > largest) largest = held;
    }
    double bytes = sp.fixed + sp.prefill + largest;
    if (bytes > e->peak_bytes) e->peak_bytes = bytes;
    e->weights_bytes = W;
    e->samples++;
    e->context_tokens += context;
    if (context > e->longest_context) e->longest_context = context;
    e->batches += sp.n_batches;
    if (sp.n_batches > e->most_batches) e->most_batches = sp.n_batches;
    e->samples_copies += sp.n_batches > 0 && !sp.use_views;
    if (!sp.fits || sp.budget < 0) e->samples_unfit++;
    else if (context > e->longest_fit) e->longest_fit = context;
    free(need);
    free(batch_of);
    return 0;
}
