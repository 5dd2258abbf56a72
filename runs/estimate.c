/* estimate.c — the modelled GPU time and memory of a sweep (formulas in estimate.h). */
#include "estimate.h"

const DeviceModel DEVICE_H200 = {"NVIDIA H200 SXM (141 GB HBM3e)", 989e12, 4.8e12, 141e9, 0.5, 0.6};

/* The backend's forward chunk and its fixed margin (engine/cuda/cuda_backend.cu CHUNK_ROWS, MEM_MARGIN). */
#define CHUNK_ROWS 4096
#define MARGIN_BYTES (768.0 * 1024 * 1024)

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

static double bound_s(const DeviceModel *dev, double flops, double bytes) {
    double compute = flops / (dev->peak_flops * dev->flops_efficiency);
    double memory = bytes / (dev->bandwidth * dev->bw_efficiency);
    return compute > memory ? compute : memory;
}

/* Activation bytes per token row of a forward chunk (residual, projections, MLP halves). */
static double activation_row_bytes(const ModelConfig *m) {
    return 12.0 * m->d_model + 4.0 * (m->n_heads + 2.0 * m->n_kv_heads) * m->head_dim + 10.0 * m->d_ff;
}

double estimate_max_context(const ModelConfig *m, const DeviceModel *dev, const double *keep, int n_variants,
                            int window) {
    double kept = 1.0; /* the prefill's full cache */
    for (int v = 0; v < n_variants; v++)
        if (keep[v] < 1.0) kept += keep[v];
    double per_token = estimate_kv_bytes_per_token(m) * kept + 4.0 * window * m->n_heads;
    double fixed = estimate_weight_bytes(m) + MARGIN_BYTES + CHUNK_ROWS * activation_row_bytes(m);
    return dev->memory_bytes > fixed ? (dev->memory_bytes - fixed) / per_token : 0;
}

void estimate_add(Estimate *e, const ModelConfig *m, const DeviceModel *dev, int context, int question,
                  int new_tokens, const double *keep, int n_variants, int window) {
    const double L = context, q = question, G = new_tokens, B = n_variants;
    const double P = layer_params(m), P_out = head_params(m), W = estimate_weight_bytes(m);
    const double kv = estimate_kv_bytes_per_token(m);
    double kept_tokens = 0; /* Σ_v k_v·L */
    for (int v = 0; v < n_variants; v++) kept_tokens += keep[v] * L;

    double prefill_flops = 2 * P * L + 2.0 * m->n_layers * m->n_heads * m->head_dim * L * L + 2 * P_out;
    e->prefill_s += bound_s(dev, prefill_flops, W);
    e->feed_s += bound_s(dev, 2 * (P + P_out) * q * B, W + kv * kept_tokens);
    double step_bytes = W + kv * (kept_tokens + B * (q + G / 2));
    e->decode_s += G * bound_s(dev, 2 * (P + P_out) * B, step_bytes);

    double rows = L < CHUNK_ROWS ? L : CHUNK_ROWS;
    double activations = rows * activation_row_bytes(m) + 4.0 * window * L * m->n_heads;
    /* The full cache is the prefill's: it lives whether or not a variant decodes on it. */
    int has_full = 0;
    for (int v = 0; v < n_variants; v++) has_full |= keep[v] >= 1.0;
    double caches = kv * (L + (has_full ? q + G : 0));
    for (int v = 0; v < n_variants; v++)
        if (keep[v] < 1.0) caches += kv * (keep[v] * L + q + G);
    double bytes = W + caches + activations + MARGIN_BYTES;
    if (bytes > e->peak_bytes) e->peak_bytes = bytes;
    e->weights_bytes = W;
    e->samples++;
    e->context_tokens += context;
    if (context > e->longest_context) e->longest_context = context;
}
