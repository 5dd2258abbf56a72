/* cuda_policy.cu — the policies' scoring and selection on the device: the window attention and value norms of
 * a layer stay in GPU memory, the layer's scores are kept there until policy_select's budgets, and only the
 * keep-set (positions) comes back to the host, with a few integers and doubles per layer (DefensiveKV's stage-1
 * counts, CAKE's entropy and variance sum) that the host's own functions turn into budgets.
 *
 * The keep-sets are the host's (policies/score.c, allocate.c) bit for bit: every score is computed with the
 * host's operations in the host's order (double sums run sequentially in the host's order, one thread per
 * column, row or head; products are rounded separately with __dmul_rn / __fmul_rn, never fused into an FMA the
 * host does not do), and every top-k compares the host's total order as the keys of policies/rank.h, selecting
 * exactly the entries whose key is at least the k-th largest. Budget integers come from the host's functions
 * (budget_keep_fraction, cake_layer_budgets, defensive_forced_count) or the host's one-line formulas.
 * The exception is CAKE's entropy, -sum A ln(A + 1e-10), whose logf is the device's: its last bit may differ from
 * the host's libm, and so, on a near tie, a layer's budget by one token (the emulation uses the host's logf;
 * tests/gpu/check.sh counts the keep-sets that differ on a GPU).
 * full, streamingllm and duoattention read no observation: their keep-sets are the host's policy_select.
 * The device reproduces the scorers score_snapkv (SnapKV, AdaKV), score_cake and, of the value-weighted ladder
 * (docs/ladder.md), exactly the three published settings: Ada-CriticalKV's, DefensiveKV's and
 * Layer-DefensiveKV's steps with the group folding as the aggregation. Any other ladder setting, and a policy
 * with a scorer of its own (knorm, keydiff, tova, random), is refused at begin so the caller scores on the host.
 * Shape legend: N layers, L context, w window, P = L - w prefix, H heads, K kv-heads, G = H/K. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/cuda/cuda_internal.h"
extern "C" {
#include "cuda_policy.h"
#include "policy_internal.h"
#include "rank.h"
}

enum { SELECT_THREADS = 128, COLUMN_THREADS = 128, LARGE_BLOCKS = 512 };

static unsigned blocks_for(long long n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* ------------------------------------------------------------------------------------------------------ */
/* Scoring kernels: each mirrors one loop of policies/score.c                                              */

/* fold_rows: out[s][j] = mean (double sum in row order) or max over `rows` rows of segment s, column j. */
__global__ void k_fold(const float *x, int rows, long long row_stride, long long seg_stride, int n, int mean,
                       float *out, long long out_stride) {
    int j = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    if (j >= n) return;
    const float *p = x + s * seg_stride + j;
    double acc = mean ? 0.0 : -INFINITY;
    for (int r = 0; r < rows; r++) {
        float v = p[(long long)r * row_stride];
        acc = mean ? __dadd_rn(acc, (double)v) : (v > acc ? v : acc);
    }
    out[s * out_stride + j] = (float)(mean ? acc / rows : acc);
}

/* window_variance and CAKE's statistic: for head h (w rows of stride L), var[h][j] = the unbiased variance of
 * column j, stat[h][j] = (float)(stat + gamma * var). */
__global__ void k_window_variance(const float *attn, int w, int L, int P, double gamma, float *stat, double *var) {
    int j = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y;
    if (j >= P) return;
    const float *a = attn + (long long)h * w * L + j;
    double mean = 0.0, v = 0.0;
    for (int i = 0; i < w; i++) mean = __dadd_rn(mean, (double)a[(long long)i * L]);
    mean /= w;
    for (int i = 0; i < w; i++) {
        double dv = __dsub_rn((double)a[(long long)i * L], mean);
        v = __dadd_rn(v, __dmul_rn(dv, dv));
    }
    v = w > 1 ? v / (w - 1) : 0.0;
    long long t = (long long)h * P + j;
    var[t] = v;
    stat[t] = (float)__dadd_rn((double)stat[t], __dmul_rn(gamma, v));
}

/* pool_avg of each row (running double sum, zero padded, / kernel); with restore, DefensiveKV's mass
 * restoration: the pooled row scaled by (sum of the input row) / (sum of the pooled row). */
__global__ void k_pool_rows(const float *x, long long in_stride, int rows, int n, int kernel, int restore,
                            float *out) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *a = x + row * in_stride;
    float *p = out + (long long)row * n;
    int r = kernel / 2;
    double s = 0.0;
    for (int t = 0; t <= r && t < n; t++) s = __dadd_rn(s, (double)a[t]);
    for (int j = 0; j < n; j++) {
        p[j] = (float)(s / kernel);
        if (j + r + 1 < n) s = __dadd_rn(s, (double)a[j + r + 1]);
        if (j - r >= 0) s = __dsub_rn(s, (double)a[j - r]);
    }
    if (!restore) return;
    double base = 0.0, psum = 0.0;
    for (int j = 0; j < n; j++) {
        base = __dadd_rn(base, (double)a[j]);
        psum = __dadd_rn(psum, (double)p[j]);
    }
    double scale = psum > 0.0 ? base / psum : 0.0;
    for (int j = 0; j < n; j++) p[j] = (float)__dmul_rn((double)p[j], scale);
}

/* clamp_at_mean (max+prior): row s of n entries raised to its mean (double sum in order) from below. */
__global__ void k_clamp_at_mean(float *x, long long stride, int rows, int n) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= rows) return;
    float *p = x + s * stride;
    double mean = 0.0;
    for (int j = 0; j < n; j++) mean = __dadd_rn(mean, (double)p[j]);
    float mu = (float)(mean / n);
    for (int j = 0; j < n; j++) p[j] = p[j] < mu ? mu : p[j];
}

/* *out = the max over `rows` rows of n entries (a max does not depend on the order: no NaN in scores). */
__global__ void k_max_rows(const float *x, long long stride, int rows, int n, float *out) {
    __shared__ float part[SELECT_THREADS];
    float m = -INFINITY;
    for (int s = 0; s < rows; s++)
        for (int j = threadIdx.x; j < n; j += blockDim.x) m = x[s * stride + j] > m ? x[s * stride + j] : m;
    part[threadIdx.x] = m;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half && part[threadIdx.x + half] > part[threadIdx.x])
            part[threadIdx.x] = part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}

/* SnapKV's window padding: score[k][P..L) = *value. */
__global__ void k_fill_window(float *score, int K, int L, int P, const float *value) {
    int t = blockIdx.x * blockDim.x + threadIdx.x, w = L - P;
    if (t >= K * w) return;
    score[(long long)(t / w) * L + P + t % w] = *value;
}

/* CAKE's entropy per query row: -sum_j A ln(A + 1e-10) in f32 products, double sum in order. */
__global__ void k_row_entropy(const float *attn, int rows, int L, int P, double *out) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *a = attn + (long long)r * L;
    double e = 0.0;
    for (int j = 0; j < P; j++) e = __dsub_rn(e, (double)__fmul_rn(a[j], logf(__fadd_rn(a[j], 1e-10f))));
    out[r] = e;
}

/* out[0] = sum of x[0..n) in order (the host's sequential sums of per-row or per-entry terms); thread 0 of one
 * warp (a launch takes whole warps). */
__global__ void k_serial_sum(const double *x, long long n, double *out) {
    if (threadIdx.x) return;
    double s = 0.0;
    for (long long i = 0; i < n; i++) s = __dadd_rn(s, x[i]);
    *out = s;
}

/* DefensiveKV step C: c[k][j] = delta[k][j] * nu[k][j] / sum_k nu[k][j] (0 where the column sums to 0). */
__global__ void k_value_weight(const float *delta, const float *nu, int K, int L, int P, float *score) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= P) return;
    double col = 0.0;
    for (int k = 0; k < K; k++) col = __dadd_rn(col, (double)nu[(long long)k * L + j]);
    for (int k = 0; k < K; k++) {
        long long t = (long long)k * P + j;
        score[t] = col > 0.0 ? (float)__dmul_rn((double)delta[t], (double)nu[(long long)k * L + j] / col) : 0.0f;
    }
}

/* DefensiveKV step D: threshold = mass_threshold - (sum over the H*w rows of columns [lo, hi)) / (H*w). */
__global__ void k_window_bias(const float *attn, int rows, int L, int lo, int hi, double mass_threshold,
                              double *threshold) {
    if (threadIdx.x) return; /* one thread: the host's order */
    double bias = 0.0;
    for (int r = 0; r < rows; r++)
        for (int j = lo; j < hi; j++) bias = __dadd_rn(bias, (double)attn[(long long)r * L + j]);
    *threshold = mass_threshold - bias / rows;
}

/* sort_desc_stable of each row of abar: one block per row, a bitonic sort of the rank keys in keys[n2] (n2 the
 * power of two >= n, padded with key 0, below every real key), then order[t] = the t-th position. */
__global__ void k_sort_rows(const float *x, int n, int n2, unsigned long long *keys, int *order) {
    const float *a = x + (long long)blockIdx.x * n;
    unsigned long long *key = keys + (long long)blockIdx.x * n2;
    for (int i = threadIdx.x; i < n2; i += blockDim.x) key[i] = i < n ? rank_key(a[i], (uint32_t)i) : 0ull;
    __syncthreads();
    for (int size = 2; size <= n2; size *= 2)
        for (int stride = size / 2; stride > 0; stride /= 2) {
            for (int i = threadIdx.x; i < n2; i += blockDim.x) {
                int j = i ^ stride;
                if (j > i) {
                    unsigned long long u = key[i], v = key[j];
                    if ((i & size) == 0 ? u < v : u > v) key[i] = v, key[j] = u; /* descending overall */
                }
            }
            __syncthreads();
        }
    for (int t = threadIdx.x; t < n; t += blockDim.x)
        order[(long long)blockIdx.x * n + t] = (int)rank_key_index(key[t]);
}

/* mass_prefix: n_mass[k] = the first t where the cumulative share of abar in `order` reaches the threshold. */
__global__ void k_mass_count(const float *abar, const int *order, int K, int P, const double *threshold,
                             int *n_mass) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    const float *a = abar + (long long)k * P;
    const int *o = order + (long long)k * P;
    double total = 0.0, cum = 0.0;
    for (int j = 0; j < P; j++) total = __dadd_rn(total, (double)a[j]);
    n_mass[k] = 0;
    for (int t = 0; t < P; t++) {
        cum = __dadd_rn(cum, total > 0.0 ? (double)(float)(a[o[t]] / total) : 0.0);
        if (cum >= *threshold) {
            n_mass[k] = t;
            break;
        }
    }
}

/* ------------------------------------------------------------------------------------------------------ */
/* Selection kernels (allocate.c)                                                                          */

/* mark_top for each segment s (one block): mask[s][i] = 1 for the k_s entries of score[s][0..n) with the
 * largest rank keys, 0 for the rest. The k-th largest key is found bit by bit from the top: the largest T
 * with at least k keys >= T; keys are distinct, so exactly k are. */
__global__ void k_topk_mark(const float *score, long long seg_stride, int n, const int *k_seg, int k_all,
                            unsigned char *mask, long long mask_stride) {
    __shared__ int part[SELECT_THREADS];
    const float *s = score + (long long)blockIdx.x * seg_stride;
    unsigned char *m = mask + (long long)blockIdx.x * mask_stride;
    int k = k_seg ? k_seg[blockIdx.x] : k_all;
    /* Below the score's 32 bits, the key holds 0xffffffff - index: every bit from the highest an index < n
     * can clear up to bit 31 is 1 in every key, so those need no pass. */
    int index_bits = 0;
    while (index_bits < 32 && (n - 1) >> index_bits) index_bits++;
    unsigned long long threshold = 0, always = 0xffffffffull & ~((1ull << index_bits) - 1);
    if (k > 0 && k < n)
        for (int bit = 63; bit >= 0; bit--) {
            if (bit < 32 && bit >= index_bits) {
                threshold |= always;
                bit = index_bits;
                continue;
            }
            unsigned long long candidate = threshold | 1ull << bit;
            int count = 0;
            for (int i = threadIdx.x; i < n; i += blockDim.x) count += rank_key(s[i], (uint32_t)i) >= candidate;
            part[threadIdx.x] = count;
            __syncthreads();
            for (int half = blockDim.x / 2; half > 0; half /= 2) {
                if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
                __syncthreads();
            }
            if (part[0] >= k) threshold = candidate;
            __syncthreads();
        }
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        m[i] = k <= 0 ? 0 : k >= n ? 1 : rank_key(s[i], (uint32_t)i) >= threshold;
}

/* The multi-block form of k_topk_mark's search over one segment of n entries: per pass, partial[block] = the
 * keys >= *threshold | bit in the block's stride of entries; then thread 0 sums them in order and takes the bit
 * when at least k are. */
__global__ void k_count_at_least(const float *s, long long n, const unsigned long long *threshold,
                                 unsigned long long bit, int *partial) {
    __shared__ int part[SELECT_THREADS];
    unsigned long long candidate = *threshold | bit;
    int count = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        count += rank_key(s[i], (uint32_t)i) >= candidate;
    part[threadIdx.x] = count;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

__global__ void k_threshold_take(const int *partial, int n_partial, unsigned long long bit, int k,
                                 unsigned long long *threshold) {
    if (threadIdx.x) return;
    long long sum = 0;
    for (int i = 0; i < n_partial; i++) sum += partial[i];
    if (sum >= k) *threshold |= bit;
}

__global__ void k_threshold_or(unsigned long long *threshold, unsigned long long bits) {
    if (threadIdx.x == 0) *threshold |= bits;
}

__global__ void k_mark_at_least(const float *s, long long n, const unsigned long long *threshold, int k,
                                unsigned char *mask) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        mask[i] = k <= 0 ? 0 : k >= n ? 1 : rank_key(s[i], (uint32_t)i) >= *threshold;
}

/* s[i] = FLT_MAX where mask[i] (the safeguard and stage-1 entries of AdaKV and Ada-CriticalKV). */
__global__ void k_raise_marked(float *s, const unsigned char *mask, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && mask[i]) s[i] = FLT_MAX;
}

/* counts[r] = the marked entries of mask row r (n entries, stride n). */
__global__ void k_count_rows(const unsigned char *mask, int rows, int n, int *counts) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int c = 0;
    for (int j = 0; j < n; j++) c += mask[(long long)r * n + j];
    counts[r] = c;
}

/* Ada-CriticalKV stage 1 size per head: (int)(budget * first_stage_ratio). */
__global__ void k_stage1_sizes(const int *budgets, int rows, double ratio, int *out) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = (int)((double)budgets[r] * ratio);
}

/* Ada-CriticalKV stage 2 weighting: s = (s + eps) * nu (f32, as the host); the protected entries (safeguard and
 * stage 1, raised to FLT_MAX) stay at FLT_MAX above every other, as the host's ladder_layer ranks them. */
__global__ void k_critical_weight(float *s, const float *nu, long long n, float eps) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && s[i] != FLT_MAX) s[i] = __fmul_rn(__fadd_rn(s[i], eps), nu[i]);
}

/* defensive_layer_scores, first part: out[k][j] = c[k][j] on the prefix, the layer max on the window. */
__global__ void k_defensive_base(const float *c, int K, int L, int P, const float *layer_max, float *out) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)K * L) return;
    int k = (int)(t / L), j = (int)(t % L);
    out[t] = j < P ? c[(long long)k * P + j] : *layer_max;
}

/* ... second part: the forced[k] first positions of head k's mass order at the layer max. */
__global__ void k_defensive_forced(const int *order, const int *forced, int K, int L, int P, const float *layer_max,
                                   float *out) {
    int t = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (k < K && t < forced[k]) out[(long long)k * L + order[(long long)k * P + t]] = *layer_max;
}

/* CAKE keeps the window: mask[k][P..L) = 1. */
__global__ void k_mark_window(unsigned char *mask, int rows, int L, int P) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (long long)rows * (L - P)) mask[(t / (L - P)) * L + P + t % (L - P)] = 1;
}

/* keepset_from_mask: row r's marked positions, ascending, to positions[offsets[r]..]. One block per row: each
 * thread takes a contiguous slice, counts it, and writes after the slices before it. */
__global__ void k_compact_rows(const unsigned char *mask, int L, const int *offsets, int *positions) {
    __shared__ int part[SELECT_THREADS];
    const unsigned char *m = mask + (long long)blockIdx.x * L;
    int per = (L + blockDim.x - 1) / blockDim.x, j0 = threadIdx.x * per, j1 = j0 + per < L ? j0 + per : L;
    int c = 0;
    for (int j = j0; j < j1; j++) c += m[j];
    part[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int t = 0, run = 0; t < (int)blockDim.x; t++) {
            int v = part[t];
            part[t] = run;
            run += v;
        }
    __syncthreads();
    int *out = positions + offsets[blockIdx.x] + part[threadIdx.x];
    for (int j = j0; j < j1; j++)
        if (m[j]) *out++ = j;
}

/* ------------------------------------------------------------------------------------------------------ */
/* The state                                                                                               */

/* How the device scores a layer, and how it allocates. */
typedef enum { DEV_SCORE_SNAPKV = 1, DEV_SCORE_CAKE, DEV_SCORE_DEFENSIVE } DeviceScoring;
typedef enum { DEV_ALLOC_UNIFORM = 1, DEV_ALLOC_ADAPTIVE, DEV_ALLOC_CRITICAL, DEV_ALLOC_CAKE, DEV_ALLOC_LAYER,
               DEV_ALLOC_GLOBAL } DeviceAllocation;

struct CudaPolicy {
    PolicyConfig cfg;
    const PolicyRow *row;
    DeviceScoring scoring;
    DeviceAllocation allocation;
    int needs_value_norm;
    double alpha_safeguard, first_stage_ratio, epsilon, mass_threshold; /* the row's, or the ladder's constants */
    int N, K, L, w, P, H;
    int observed;
    PolicyState *host;           /* full, streamingllm, duoattention: the host's selection */
    /* kept per layer, as LayerScores on the host */
    float *score;                /* SNAPKV [N][K][L]; CAKE, DEFENSIVE [N][K][P] */
    float *value_norm;           /* criticalkv [N][K][L] */
    int *mass_order;             /* DEFENSIVE [N][K][P] */
    float *layer_max;            /* DEFENSIVE [N] (SNAPKV uses slot 0 while it scores) */
    int *n_mass;                 /* DEFENSIVE host [N][K] */
    double *preference;          /* CAKE host [N] */
    /* scratch of one layer */
    float *stat, *pooled, *delta, *abar;  /* [H][P], [H*w][P] (DEFENSIVE) or [H][P], [K][P], [K][P] */
    double *var, *scalars;                /* [max(H*P, H*w)], [4] */
    unsigned long long *keys;             /* [K][pow2 >= P] */
    int *dev_n_mass;                      /* [K] */
    float *upload;                        /* cuda_policy_observe_host: [H*w*L + K*L] */
};

static int dev_alloc(void **p, size_t bytes, const char *what, KvErr *err) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return kv_fail(err, "device scoring: cannot allocate %.1f MiB for %s: %s", bytes / 1048576.0, what,
                       cudaGetErrorString(e));
    return 0;
}

extern "C" void cuda_policy_end(CudaPolicy *p) {
    if (!p) return;
    policy_end(p->host);
    void *dev[] = {p->score, p->value_norm, p->mass_order, p->layer_max, p->stat, p->pooled, p->delta,
                   p->abar, p->var, p->scalars, p->keys, p->dev_n_mass, p->upload};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
    free(p->n_mass);
    free(p->preference);
    free(p);
}

/* The device path of an observing policy, or an error naming the policy and what the device does not reproduce.
 * The ladder's three published settings are matched by their steps (so defensivekv with allocation=global is
 * Layer-DefensiveKV's path); the group must fold as the aggregation does, as every published method's. */
static int device_path(CudaPolicy *p, const PolicyRow *row, const PolicyConfig *cfg, KvErr *err) {
    /* Only the descriptors the device reproduces: a known scorer with a known allocation and none of the hooks
     * that change it (a per-layer budget) */
    if (row->score == score_snapkv && !row->layer_budget &&
        (row->allocation == ALLOC_UNIFORM || row->allocation == ALLOC_ADAPTIVE)) {
        p->scoring = DEV_SCORE_SNAPKV;
        p->allocation = row->allocation == ALLOC_UNIFORM ? DEV_ALLOC_UNIFORM : DEV_ALLOC_ADAPTIVE;
        p->alpha_safeguard = row->alpha_safeguard;
        return 0;
    }
    if (row->score == score_cake && row->allocation == ALLOC_CAKE) {
        p->scoring = DEV_SCORE_CAKE, p->allocation = DEV_ALLOC_CAKE;
        return 0;
    }
    if (row->score != score_value_weighted || row->allocation != ALLOC_LADDER)
        return kv_fail(err, "policy %s: %s has no device scoring (scored on the host only)", row->name,
                       row->needs & NEEDS_KEYS ? "a scorer of the raw keys" : "its own scorer");
    const LadderParams *lp = &cfg->ladder;
    LadderGroup group = cfg->aggregation == AGG_MEAN ? LADDER_GROUP_MEAN : LADDER_GROUP_MAX;
    int critical = lp->pooling == LADDER_POOL_WINDOW && lp->forced == LADDER_FORCED_TOPK && lp->safeguard &&
                   lp->weighting == LADDER_WEIGHT_CRITICAL && lp->allocation == LADDER_ALLOC_HEAD;
    int defensive = lp->pooling == LADDER_POOL_ROWS && lp->forced == LADDER_FORCED_MASS && !lp->safeguard &&
                    lp->weighting == LADDER_WEIGHT_DEFENSIVE &&
                    (lp->allocation == LADDER_ALLOC_LAYER || lp->allocation == LADDER_ALLOC_GLOBAL);
    if (!lp->enabled || lp->group != group || !(critical || defensive)) {
        char text[256];
        if (policy_params_text(cfg, text, sizeof text) < 0 || !text[0]) snprintf(text, sizeof text, ",group");
        return kv_fail(err, "policy %s: ladder setting '%s' has no device scoring (only Ada-CriticalKV's, "
                            "DefensiveKV's and Layer-DefensiveKV's steps; scored on the host only)", row->name,
                       text + 1);
    }
    LadderConstants lc = ladder_constants();
    p->scoring = critical ? DEV_SCORE_SNAPKV : DEV_SCORE_DEFENSIVE;
    p->allocation = critical ? DEV_ALLOC_CRITICAL
                    : lp->allocation == LADDER_ALLOC_LAYER ? DEV_ALLOC_LAYER : DEV_ALLOC_GLOBAL;
    p->alpha_safeguard = lc.alpha_safeguard, p->first_stage_ratio = lc.first_stage_ratio;
    p->epsilon = lc.epsilon, p->mass_threshold = lc.mass_threshold;
    return 0;
}

extern "C" int cuda_policy_begin(CudaPolicy **out, const PolicyConfig *cfg, int n_layers, int n_kv_heads,
                                 int context_len, KvErr *err) {
    *out = NULL;
    /* The host's checks of the configuration and shape, once, through the host's own begin. */
    PolicyState *host = NULL;
    if (policy_begin(&host, cfg, n_layers, n_kv_heads, context_len, err)) return -1;
    const PolicyRow *row = policy_row(cfg->name);
    if (cfg->ties_by_unclamped) {
        policy_end(host);
        return kv_fail(err, "policy %s: ties_by_unclamped is scored on the host only, not on the device", row->name);
    }
    CudaPolicy *p = (CudaPolicy *)kv_calloc(1, sizeof *p, err);
    if (!p) {
        policy_end(host);
        return -1;
    }
    p->cfg = *cfg;
    p->row = row;
    p->N = n_layers, p->K = n_kv_heads, p->L = context_len, p->w = cfg->window, p->P = context_len - cfg->window;
    if (!policy_observes(cfg)) {
        p->host = host;
        *out = p;
        return 0;
    }
    policy_end(host);
    if (device_path(p, row, cfg, err)) {
        cuda_policy_end(p);
        return -1;
    }
    p->needs_value_norm = (row->needs & NEEDS_VALUE_NORM) != 0;
    size_t N = (size_t)p->N, K = (size_t)p->K, L = (size_t)p->L, P = (size_t)p->P;
    int rc = 0;
    switch (p->scoring) {
    case DEV_SCORE_SNAPKV:
        rc = dev_alloc((void **)&p->score, sizeof(float) * N * K * L, "the layers' scores", err) ||
             dev_alloc((void **)&p->layer_max, sizeof(float) * N, "the layer maxima", err) ||
             (p->needs_value_norm &&
              dev_alloc((void **)&p->value_norm, sizeof(float) * N * K * L, "the value norms", err));
        break;
    case DEV_SCORE_CAKE:
        rc = dev_alloc((void **)&p->score, sizeof(float) * N * K * P, "the layers' scores", err) ||
             !(p->preference = (double *)kv_calloc(N, sizeof(double), err));
        break;
    case DEV_SCORE_DEFENSIVE:
        rc = dev_alloc((void **)&p->score, sizeof(float) * N * K * P, "the layers' scores", err) ||
             dev_alloc((void **)&p->mass_order, sizeof(int) * N * K * P, "the mass orders", err) ||
             dev_alloc((void **)&p->layer_max, sizeof(float) * N, "the layer maxima", err) ||
             !(p->n_mass = (int *)kv_calloc(N * K, sizeof(int), err));
        break;
    }
    if (rc) {
        cuda_policy_end(p);
        return -1;
    }
    *out = p;
    return 0;
}

static int pow2_at_least(int n) {
    int m = 1;
    while (m < n) m *= 2;
    return m;
}

/* The scratch of one layer, on the first observed layer (H is known from then). */
static int scratch_alloc(CudaPolicy *p, int H, KvErr *err) {
    if (p->stat) return 0;
    size_t K = (size_t)p->K, P = (size_t)p->P, w = (size_t)p->w;
    size_t pooled_rows = p->scoring == DEV_SCORE_DEFENSIVE ? (size_t)H * w : (size_t)H;
    size_t var_n = (size_t)H * P > (size_t)H * w ? (size_t)H * P : (size_t)H * w;
    p->H = H;
    return dev_alloc((void **)&p->stat, sizeof(float) * (size_t)H * P, "scoring scratch", err) ||
           dev_alloc((void **)&p->pooled, sizeof(float) * pooled_rows * P, "scoring scratch", err) ||
           dev_alloc((void **)&p->delta, sizeof(float) * K * P, "scoring scratch", err) ||
           dev_alloc((void **)&p->abar, sizeof(float) * K * P, "scoring scratch", err) ||
           dev_alloc((void **)&p->var, sizeof(double) * var_n, "scoring scratch", err) ||
           dev_alloc((void **)&p->scalars, sizeof(double) * 4, "scoring scratch", err) ||
           dev_alloc((void **)&p->dev_n_mass, sizeof(int) * K, "scoring scratch", err) ||
           (p->scoring == DEV_SCORE_DEFENSIVE &&
            dev_alloc((void **)&p->keys, sizeof(unsigned long long) * K * pow2_at_least(p->P), "sort keys", err));
}

/* score_pooled_heads: out[K][P] (row stride out_stride), the query statistic of each head pooled, then folded
 * over the group; CAKE's variance sum into scalars[1]. */
static int pooled_heads(CudaPolicy *p, const float *attn, double gamma, int want_var, float *out,
                        long long out_stride, KvErr *err) {
    const int H = p->H, K = p->K, G = H / K, w = p->w, L = p->L, P = p->P;
    const int mean = p->cfg.aggregation == AGG_MEAN;
    dim3 cols(blocks_for(P, COLUMN_THREADS), H);
    k_fold<<<cols, COLUMN_THREADS>>>(attn, w, L, (long long)w * L, P, mean, p->stat, P);
    LAUNCH_CHECK();
    if (gamma != 0.0 || want_var) {
        k_window_variance<<<cols, COLUMN_THREADS>>>(attn, w, L, P, gamma, p->stat, p->var);
        LAUNCH_CHECK();
        k_serial_sum<<<1, 32>>>(p->var, (long long)H * P, p->scalars + 1);
        LAUNCH_CHECK();
    }
    k_pool_rows<<<blocks_for(H, 32), 32>>>(p->stat, P, H, P, p->cfg.pool_kernel, 0, p->pooled);
    LAUNCH_CHECK();
    k_fold<<<dim3(blocks_for(P, COLUMN_THREADS), K), COLUMN_THREADS>>>(p->pooled, G, P, (long long)G * P, P, mean,
                                                                        out, out_stride);
    LAUNCH_CHECK();
    if (p->cfg.aggregation == AGG_MAX_PRIOR) {
        k_clamp_at_mean<<<blocks_for(K, 32), 32>>>(out, out_stride, K, P);
        LAUNCH_CHECK();
    }
    return 0;
}

static int device_score_snapkv(CudaPolicy *p, int l, const float *attn, const float *nu, KvErr *err) {
    const int K = p->K, L = p->L, P = p->P;
    float *score = p->score + (size_t)l * K * L;
    if (pooled_heads(p, attn, 0.0, 0, score, L, err)) return -1;
    k_max_rows<<<1, SELECT_THREADS>>>(score, L, K, P, p->layer_max);
    LAUNCH_CHECK();
    k_fill_window<<<blocks_for((long long)K * (L - P), 256), 256>>>(score, K, L, P, p->layer_max);
    LAUNCH_CHECK();
    if (p->value_norm)
        CU_CHECK(cudaMemcpy(p->value_norm + (size_t)l * K * L, nu, sizeof(float) * K * L, cudaMemcpyDeviceToDevice));
    return 0;
}

static int device_score_cake(CudaPolicy *p, int l, const float *attn, KvErr *err) {
    const int K = p->K, L = p->L, P = p->P, rows = p->H * p->w;
    if (pooled_heads(p, attn, p->row->gamma, 1, p->score + (size_t)l * K * P, P, err)) return -1;
    k_row_entropy<<<blocks_for(rows, 64), 64>>>(attn, rows, L, P, p->var);
    LAUNCH_CHECK();
    k_serial_sum<<<1, 32>>>(p->var, rows, p->scalars);
    LAUNCH_CHECK();
    double sums[2]; /* entropy, variance sum */
    CU_CHECK(cudaMemcpy(sums, p->scalars, sizeof sums, cudaMemcpyDeviceToHost));
    p->preference[l] = pow(sums[0], 1.0 / p->row->tau1) * pow(sums[1], 1.0 / p->row->tau2); /* as score_cake */
    return 0;
}

static int device_score_defensive(CudaPolicy *p, int l, const float *attn, const float *nu, KvErr *err) {
    const int H = p->H, K = p->K, G = H / K, w = p->w, L = p->L, P = p->P, Gw = G * w;
    const int mean = p->cfg.aggregation == AGG_MEAN;
    /* Every query row of the layer pooled at once (H*w rows, head-major: kv-head k's rows are k*Gw..), then
     * folded per kv-head. */
    dim3 cols(blocks_for(P, COLUMN_THREADS), K);
    k_pool_rows<<<blocks_for(H * w, 32), 32>>>(attn, L, H * w, P, p->cfg.pool_kernel, 1, p->pooled);
    LAUNCH_CHECK();
    k_fold<<<cols, COLUMN_THREADS>>>(p->pooled, Gw, P, (long long)Gw * P, P, mean, p->delta, P);
    LAUNCH_CHECK();
    k_fold<<<cols, COLUMN_THREADS>>>(attn, Gw, L, (long long)Gw * L, P, 1, p->abar, P);
    LAUNCH_CHECK();
    if (p->cfg.aggregation == AGG_MAX_PRIOR) {
        k_clamp_at_mean<<<blocks_for(K, 32), 32>>>(p->delta, P, K, P);
        LAUNCH_CHECK();
    }
    float *score = p->score + (size_t)l * K * P;
    k_value_weight<<<blocks_for(P, COLUMN_THREADS), COLUMN_THREADS>>>(p->delta, nu, K, L, P, score);
    LAUNCH_CHECK();
    k_max_rows<<<1, SELECT_THREADS>>>(score, P, K, P, p->layer_max + l);
    LAUNCH_CHECK();
    int lo = p->cfg.intended_window_bias ? P : (P - w > 0 ? P - w : 0), hi = p->cfg.intended_window_bias ? L : P;
    k_window_bias<<<1, 32>>>(attn, H * w, L, lo, hi, p->mass_threshold, p->scalars + 2);
    LAUNCH_CHECK();
    int n2 = pow2_at_least(P);
    int *order = p->mass_order + (size_t)l * K * P;
    k_sort_rows<<<K, SELECT_THREADS>>>(p->abar, P, n2, p->keys, order);
    LAUNCH_CHECK();
    k_mass_count<<<blocks_for(K, 32), 32>>>(p->abar, order, K, P, p->scalars + 2, p->dev_n_mass);
    LAUNCH_CHECK();
    CU_CHECK(cudaMemcpy(p->n_mass + (size_t)l * K, p->dev_n_mass, sizeof(int) * K, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int cuda_policy_observe(CudaPolicy *p, const Observation *obs, KvErr *err) {
    const char *name = p->row->name;
    if (p->host) return 0; /* nothing observed */
    if (p->observed >= p->N || obs->layer != p->observed)
        return kv_fail(err, "policy %s (device): layer %d observed, expected layer %d of %d", name, obs->layer,
                       p->observed, p->N);
    if (obs->L != p->L || obs->K != p->K || obs->w != p->w || obs->H < obs->K || obs->H % obs->K ||
        (p->H && obs->H != p->H))
        return kv_fail(err, "policy %s (device): layer %d has L=%d K=%d H=%d w=%d, the policy began with L=%d K=%d "
                            "w=%d", name, obs->layer, obs->L, obs->K, obs->H, obs->w, p->L, p->K, p->w);
    if (!obs->attn || (p->needs_value_norm && !obs->value_norm))
        return kv_fail(err, "policy %s (device): layer %d was observed without %s", name, obs->layer,
                       obs->attn ? "value norms" : "attention");
    if (scratch_alloc(p, obs->H, err)) return -1;
    int rc = p->scoring == DEV_SCORE_SNAPKV ? device_score_snapkv(p, obs->layer, obs->attn, obs->value_norm, err)
             : p->scoring == DEV_SCORE_CAKE ? device_score_cake(p, obs->layer, obs->attn, err)
                                            : device_score_defensive(p, obs->layer, obs->attn, obs->value_norm, err);
    if (rc) return kv_wrap(err, "policy %s (device), layer %d", name, obs->layer);
    CU_CHECK(cudaDeviceSynchronize()); /* execution errors surface here, naming the layer */
    p->observed++;
    return 0;
}

extern "C" int cuda_policy_observe_host(CudaPolicy *p, const Observation *obs, KvErr *err) {
    if (p->host) return 0;
    size_t n_attn = (size_t)obs->H * obs->w * obs->L, n_nu = (size_t)obs->K * obs->L;
    if (!p->upload && dev_alloc((void **)&p->upload, sizeof(float) * (n_attn + n_nu), "the uploaded observation", err))
        return -1;
    Observation d = *obs;
    d.attn = p->upload;
    d.value_norm = obs->value_norm ? p->upload + n_attn : NULL;
    CU_CHECK(cudaMemcpy(d.attn, obs->attn, sizeof(float) * n_attn, cudaMemcpyHostToDevice));
    if (d.value_norm) CU_CHECK(cudaMemcpy(d.value_norm, obs->value_norm, sizeof(float) * n_nu, cudaMemcpyHostToDevice));
    return cuda_policy_observe(p, &d, err);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Selection                                                                                               */

/* Device buffers of one selection. */
typedef struct {
    unsigned char *keep, *safe; /* [N][K][L] each */
    float *work;                /* [N][K][L] scores of the Ada methods and DefensiveKV's */
    int *ints;                  /* [N*K] each: counts then offsets, per-head budgets or forced counts, Ada head
                                 * budgets, stage-1 sizes */
    int *partial;               /* [LARGE_BLOCKS] counts of the global top-k's passes */
    unsigned long long *threshold; /* the global top-k's */
    int *positions;
} SelectBufs;

static void select_free(SelectBufs *b) {
    void *dev[] = {b->keep, b->safe, b->work, b->ints, b->partial, b->threshold, b->positions};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
}

/* AdaKV's and Ada-CriticalKV's selection of every layer at once (adaptive_layer, critical_head): the top n_safe
 * of each head safeguarded at FLT_MAX, the top K*n of each layer; for Ada-CriticalKV that layer top only sets the
 * head budgets, then within each head stage 1 at FLT_MAX, (s + eps) * nu of the rest and the top budget. */
static int adaptive_all(CudaPolicy *p, SelectBufs *b, int n, KvErr *err) {
    const int N = p->N, K = p->K, L = p->L, NK = N * K;
    const long long KL = (long long)K * L, NKL = (long long)N * KL;
    const int critical = p->allocation == DEV_ALLOC_CRITICAL;
    int *budgets = b->ints + 2 * (size_t)NK, *stage1 = budgets + NK;
    CU_CHECK(cudaMemcpy(b->work, p->score, sizeof(float) * NKL, cudaMemcpyDeviceToDevice));
    k_topk_mark<<<NK, SELECT_THREADS>>>(b->work, L, L, NULL, (int)(n * p->alpha_safeguard), b->safe, L);
    LAUNCH_CHECK();
    k_raise_marked<<<blocks_for(NKL, 256), 256>>>(b->work, b->safe, NKL);
    LAUNCH_CHECK();
    unsigned char *layer_top = critical ? b->safe : b->keep;
    k_topk_mark<<<N, SELECT_THREADS>>>(b->work, KL, (int)KL, NULL, K * n, layer_top, KL);
    LAUNCH_CHECK();
    if (!critical) return 0;
    k_count_rows<<<blocks_for(NK, 32), 32>>>(layer_top, NK, L, budgets);
    LAUNCH_CHECK();
    k_stage1_sizes<<<blocks_for(NK, 32), 32>>>(budgets, NK, p->first_stage_ratio, stage1);
    LAUNCH_CHECK();
    k_topk_mark<<<NK, SELECT_THREADS>>>(b->work, L, L, stage1, 0, b->safe, L);
    LAUNCH_CHECK();
    k_raise_marked<<<blocks_for(NKL, 256), 256>>>(b->work, b->safe, NKL);
    LAUNCH_CHECK();
    k_critical_weight<<<blocks_for(NKL, 256), 256>>>(b->work, p->value_norm, NKL, (float)p->epsilon);
    LAUNCH_CHECK();
    k_topk_mark<<<NK, SELECT_THREADS>>>(b->work, L, L, budgets, 0, b->keep, L);
    LAUNCH_CHECK();
    return 0;
}

/* defensive_layer_scores of layer l into out[K][L], the forced counts from the host's defensive_forced_count. */
static int defensive_scores(CudaPolicy *p, int l, double f, int *forced_dev, float *out, KvErr *err) {
    const int K = p->K, L = p->L, P = p->P;
    int forced[ATTN_MAX_KV_HEADS], max_forced = 0;
    if (K > ATTN_MAX_KV_HEADS) return kv_fail(err, "device scoring: %d kv-heads, at most %d", K, ATTN_MAX_KV_HEADS);
    LayerScores ls = LayerScores();
    ls.n_mass = p->n_mass + (size_t)l * K;
    for (int k = 0; k < K; k++) {
        forced[k] = defensive_forced_count(&ls, k, P, p->w, f);
        max_forced = forced[k] > max_forced ? forced[k] : max_forced;
    }
    CU_CHECK(cudaMemcpy(forced_dev, forced, sizeof(int) * K, cudaMemcpyHostToDevice));
    k_defensive_base<<<blocks_for((long long)K * L, 256), 256>>>(p->score + (size_t)l * K * P, K, L, P,
                                                                p->layer_max + l, out);
    LAUNCH_CHECK();
    if (max_forced > 0) {
        k_defensive_forced<<<dim3(blocks_for(max_forced, 256), K), 256>>>(p->mass_order + (size_t)l * K * P,
                                                                          forced_dev, K, L, P, p->layer_max + l, out);
        LAUNCH_CHECK();
    }
    return 0;
}

/* The global top-k of n entries of b->work into b->keep: the bit-by-bit search of k_topk_mark with each
 * pass's count spread over many blocks (one block would read all N*K*L entries alone, once per bit). */
static int topk_mark_large(SelectBufs *b, long long n, int k, KvErr *err) {
    if (n > INT32_MAX) return kv_fail(err, "device selection: %lld entries in one top-k, at most %d", n, INT32_MAX);
    int index_bits = 0;
    while (index_bits < 32 && (n - 1) >> index_bits) index_bits++;
    unsigned long long always = 0xffffffffull & ~((1ull << index_bits) - 1);
    unsigned long long *threshold = b->threshold;
    unsigned blocks = blocks_for(n, SELECT_THREADS), max_blocks = LARGE_BLOCKS;
    blocks = blocks < max_blocks ? blocks : max_blocks;
    CU_CHECK(cudaMemset(threshold, 0, sizeof *threshold));
    if (k > 0 && k < n)
        for (int bit = 63; bit >= 0; bit--) {
            if (bit < 32 && bit >= index_bits) {
                k_threshold_or<<<1, 32>>>(threshold, always);
                LAUNCH_CHECK();
                bit = index_bits;
                continue;
            }
            k_count_at_least<<<blocks, SELECT_THREADS>>>(b->work, n, threshold, 1ull << bit, b->partial);
            LAUNCH_CHECK();
            k_threshold_take<<<1, 32>>>(b->partial, (int)blocks, 1ull << bit, k, threshold);
            LAUNCH_CHECK();
        }
    k_mark_at_least<<<blocks, SELECT_THREADS>>>(b->work, n, threshold, k, b->keep);
    LAUNCH_CHECK();
    return 0;
}

/* The allocation of every layer into b->keep (allocate_keepset's loop): the per-head and per-layer top-k of all
 * layers in one launch each, the global top-k by the multi-block search. */
static int allocate(CudaPolicy *p, SelectBufs *b, double f, KvErr *err) {
    const int N = p->N, K = p->K, L = p->L, P = p->P, w = p->w;
    const long long KL = (long long)K * L;
    const int n = (int)(L * f); /* per-head keep of the uniform and Ada methods */
    int *per_head = b->ints + (size_t)N * K;
    int rc = 0;
    switch (p->allocation) {
    case DEV_ALLOC_UNIFORM:
        k_topk_mark<<<N * K, SELECT_THREADS>>>(p->score, L, L, NULL, n, b->keep, L);
        break;
    case DEV_ALLOC_ADAPTIVE:
    case DEV_ALLOC_CRITICAL:
        rc = adaptive_all(p, b, n, err);
        break;
    case DEV_ALLOC_CAKE: {
        double total = (L * f - w) * N; /* as cake_allocation */
        if (total < 0)
            return kv_fail(err, "policy %s: the budget keeps %.1f tokens per head, fewer than the %d-token window",
                           p->row->name, L * f, w);
        double *raw = (double *)kv_malloc(sizeof(double) * N, err);
        int *layer_budget = raw ? (int *)kv_malloc(sizeof(int) * N * (K + 1), err) : NULL, *head = layer_budget + N;
        if (!layer_budget) {
            free(raw);
            return -1;
        }
        cake_layer_budgets(p->preference, N, (int)total, L - w, raw, layer_budget);
        for (int t = 0; t < N * K; t++) head[t] = layer_budget[t / K];
        cudaError_t e = cudaMemcpy(per_head, head, sizeof(int) * N * K, cudaMemcpyHostToDevice);
        free(raw);
        free(layer_budget);
        if (e != cudaSuccess) return kv_fail(err, "device selection: CAKE's budgets: %s", cudaGetErrorString(e));
        k_topk_mark<<<N * K, SELECT_THREADS>>>(p->score, P, P, per_head, 0, b->keep, L);
        k_mark_window<<<blocks_for((long long)N * K * w, 256), 256>>>(b->keep, N * K, L, P); /* errors stay set */
        break;
    }
    case DEV_ALLOC_LAYER:
    case DEV_ALLOC_GLOBAL:
        for (int l = 0; !rc && l < N; l++)
            rc = defensive_scores(p, l, f, per_head + (size_t)l * K, b->work + l * KL, err);
        if (!rc && p->allocation == DEV_ALLOC_LAYER)
            k_topk_mark<<<N, SELECT_THREADS>>>(b->work, KL, (int)KL, NULL, (int)(L * f * K), b->keep, KL);
        if (!rc && p->allocation == DEV_ALLOC_GLOBAL)
            rc = topk_mark_large(b, (long long)N * KL, (int)(L * f * K * N), err);
        break;
    }
    if (!rc) {
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = kv_fail(err, "device selection: %s", cudaGetErrorString(e));
    }
    return rc;
}

extern "C" int cuda_policy_select(CudaPolicy *p, const Budget *budget, KeepSet *out, KvErr *err) {
    *out = KeepSet();
    if (p->host) return policy_select(p->host, budget, out, err);
    const char *name = p->row->name;
    const int N = p->N, K = p->K, L = p->L;
    if (p->observed != N)
        return kv_fail(err, "policy %s: select after %d of %d layers were observed", name, p->observed, N);
    /* The host's checks and its f >= 1 and budget-keeps-nothing cases (they read no scores). */
    if (budget->tokens > 0 ? budget->tokens > L : !(budget->keep_fraction > 0.0 && budget->keep_fraction <= 1.0))
        return kv_fail(err, "policy %s: budget outside (0, 1] or above the %d-token context", name, L);
    double f = budget_keep_fraction(budget, L);
    if (f >= 1.0) return keepset_full(out, N, K, L, err);
    if ((int)(L * f) < 1)
        return kv_fail(err, "policy %s: budget %g of a %d-token context keeps no token per head", name, f, L);
    SelectBufs b = SelectBufs();
    size_t NKL = (size_t)N * K * L;
    DeviceAllocation a = p->allocation;
    int uses_work = a != DEV_ALLOC_UNIFORM && a != DEV_ALLOC_CAKE;
    size_t work = uses_work ? NKL : 1;
    int *counts = (int *)kv_malloc(sizeof(int) * N * K, err);
    int rc = !counts || dev_alloc((void **)&b.keep, NKL, "the keep mask", err) ||
             dev_alloc((void **)&b.safe, a == DEV_ALLOC_ADAPTIVE || a == DEV_ALLOC_CRITICAL ? NKL : 1,
                       "the safeguard mask", err) ||
             dev_alloc((void **)&b.work, sizeof(float) * work, "the selection scores", err) ||
             dev_alloc((void **)&b.ints, sizeof(int) * 4 * (size_t)N * K, "the budgets", err) ||
             dev_alloc((void **)&b.partial, sizeof(int) * LARGE_BLOCKS, "the top-k counts", err) ||
             dev_alloc((void **)&b.threshold, sizeof(unsigned long long), "the top-k threshold", err) ||
             allocate(p, &b, f, err);
    if (!rc) {
        k_count_rows<<<blocks_for(N * K, 32), 32>>>(b.keep, N * K, L, b.ints);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaMemcpy(counts, b.ints, sizeof(int) * N * K, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = kv_fail(err, "device selection: %s", cudaGetErrorString(e));
    }
    if (!rc) rc = keepset_init(out, N, K, counts, err);
    if (!rc && !(rc = dev_alloc((void **)&b.positions, sizeof(int) * (size_t)out->total, "the keep-set", err))) {
        cudaError_t e = cudaMemcpy(b.ints, out->offsets, sizeof(int) * N * K, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) {
            k_compact_rows<<<N * K, SELECT_THREADS>>>(b.keep, L, b.ints, b.positions);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess)
            e = cudaMemcpy(out->positions, b.positions, sizeof(int) * out->total, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = kv_fail(err, "device selection: the keep-set: %s", cudaGetErrorString(e));
    }
    if (rc) keepset_free(out);
    select_free(&b);
    free(counts);
    return rc ? kv_wrap(err, "policy %s (device)", name) : 0;
}
