/* cuda_internal.h — shared by the .cu files of the CUDA backend (C++17, nvcc): error-check macros, the
 * per-forward head table, and the kernel launchers of kernels.cu. Nothing here is visible to the C side.
 *
 * Layouts (row-major, bf16 unless said): activations [M rows][width], M = B sequences x Tc tokens, row b*Tc+t;
 * queries and attention outputs [M][H][d]; a cache head's entries [cap][d] back to back in one device arena.
 * Shape legend: B sequences, Tc tokens of this chunk, N layers, H heads, K kv-heads, G = H/K, d head dim,
 * D hidden, F feed-forward, V vocab. */
#ifndef KVBENCH_CUDA_INTERNAL_H
#define KVBENCH_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "../err.h"
}
#include "splitk.h"

typedef __nv_bfloat16 bf16;

/* Every CUDA / cuBLAS call is checked; a failure becomes a KvErr naming the source line and the call. The
 * enclosing function must have `KvErr *err` and return int. */
#define CU_CHECK(call)                                                                                      \
    do {                                                                                                    \
        cudaError_t cu_e_ = (call);                                                                         \
        if (cu_e_ != cudaSuccess)                                                                           \
            return kv_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(cu_e_));     \
    } while (0)
#define CUBLAS_CHECK(call)                                                                                  \
    do {                                                                                                    \
        cublasStatus_t cb_s_ = (call);                                                                      \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS)                                                                 \
            return kv_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(cb_s_));  \
    } while (0)
/* After a kernel launch: launch-configuration errors surface here, execution errors at the next sync. */
#define LAUNCH_CHECK() CU_CHECK(cudaGetLastError())

enum {
    ATTN_MAX_HEAD_DIM = 256, /* flash / decode kernels keep a head's query in shared memory */
    ATTN_MAX_GROUP = 8,      /* decode keeps one accumulator per query head of a group in registers */
    ATTN_MAX_KV_HEADS = 64,  /* the observation lists a layer's key heads in a fixed array */
};

/* One (sequence, layer, kv-head) of a forward: where its cache entries live and how many it held before this
 * chunk (the chunk's own entries follow at len..len+Tc-1). Query t of the chunk sees entries 0..len+t.
 * A view (kvcache.h) reads its first n_shared entries in place in its base cache: entry e < n_shared is row
 * idx[e] of the base head's rows sk / sv; entry e >= n_shared is own row e - n_shared at k / v. A cache that is
 * not a view has n_shared = 0 (sk, sv, idx unused), so every kernel reads entries through head_k / head_v. */
typedef struct {
    bf16 *k, *v;
    int len;
    int n_shared;
    const bf16 *sk, *sv;
    const int *idx;
} DevHead;

/* Where entry e of a head keeps its key (value) row of d elements. */
__device__ static inline const bf16 *head_k(const DevHead &h, int e, int d) {
    return e < h.n_shared ? h.sk + (size_t)h.idx[e] * d : h.k + (size_t)(e - h.n_shared) * d;
}
__device__ static inline const bf16 *head_v(const DevHead &h, int e, int d) {
    return e < h.n_shared ? h.sv + (size_t)h.idx[e] * d : h.v + (size_t)(e - h.n_shared) * d;
}

/* ---- kernels.cu: launchers (asynchronous on `st`; they return -1 only for a launch error) ---- */
int launch_f32_to_bf16(const float *src, bf16 *dst, size_t n, cudaStream_t st, KvErr *err);
int launch_bf16_to_f32(const bf16 *src, float *dst, size_t n, cudaStream_t st, KvErr *err);
/* x[M][D] = emb[tokens[r]] (f32). */
int launch_embed(const int *tokens, const bf16 *emb, float *x, int M, int D, cudaStream_t st, KvErr *err);
/* y[r] = x[r*src_step + src_offset] / rms * w, for r < rows (src_step/offset pick the last token of each
 * sequence for the logits). */
int launch_rmsnorm(const float *x, const float *w, bf16 *y, int rows, int D, float eps, int src_step,
                   int src_offset, cudaStream_t st, KvErr *err);
/* Splits qkv[M][(H+2K)d] (f32, bias added when given) into RoPE-rotated queries q[M][H][d] and the cache
 * entries len+t of every head of `layer` (rotated keys, values). seq_pos[b] is the position of token 0. */
int launch_qkv_rope(const float *qkv, const float *bias, const float *inv_freq, bf16 *q, const DevHead *heads,
                    const int *seq_pos, int layer, int N, int H, int K, int d, int B, int Tc, cudaStream_t st,
                    KvErr *err);
/* act[M][F] = silu(gu[:, :F]) * gu[:, F:] */
int launch_swiglu(const float *gu, bf16 *act, int M, int F, cudaStream_t st, KvErr *err);
/* The oracle: one block per (query row, head, sequence), rows t0..t0+n_rows-1 of the chunk. Writes each row's
 * softmax to probs[b][h][row][probs_ld] (zero past the row's keys; probs_ld >= every row's key count) and,
 * when out is non-NULL, the attention output to out[M][H][d]. */
int launch_attention_naive(const bf16 *q, bf16 *out, float *probs, int probs_ld, const DevHead *heads,
                           int layer, int N, int H, int K, int d, int B, int Tc, int t0, int n_rows,
                           cudaStream_t st, KvErr *err);
/* The observation's window attention for sequence 0: probs[H][w][L] = softmax over the L keys of head h/G of
 * query rows t0..t0+w-1 (causal: row i sees keys 0..L-w+i), scores by cuBLAS (one GEMM per query head), then a
 * row softmax. keys[K] are host-held device pointers. Same definition as the naive kernel, faster at 128k. */
int window_attention(cublasHandle_t h, const bf16 *q, const bf16 *const *keys, float *probs, int H, int K, int d,
                     int t0, int w, int L, cudaStream_t st, KvErr *err);
/* Causal prefill attention for a chunk of Tc > 1 tokens, flash-style: never materialises Tc x keys. */
int launch_flash_prefill(const bf16 *q, bf16 *out, const DevHead *heads, int layer, int N, int H, int K, int d,
                         int B, int Tc, cudaStream_t st, KvErr *err);
/* Decode attention (Tc == 1) split along the keys: n_splits = splitk_count(longest head + 1); partials
 * o_part[B][H][n_splits][d] and ml_part[B][H][n_splits][2] (m, l), then merged into out[B][H][d]. */
int launch_decode_attention(const bf16 *q, bf16 *out, float *o_part, float *ml_part, const DevHead *heads,
                            int layer, int N, int H, int K, int d, int B, int n_splits, cudaStream_t st,
                            KvErr *err);
/* out[r] = the first index of the largest of x[r][0..V) (engine/generate.c's greedy pick, bit for bit: a NaN
 * only when it is first), for r < rows. */
int launch_argmax_rows(const float *x, int rows, int V, int *out, cudaStream_t st, KvErr *err);
/* out[r] (+)= scale * sum_e |P[r][e]| for r < rows. */
int launch_l1_rows(const float *P, int rows, int D, float *out, float scale, int accumulate, cudaStream_t st,
                   KvErr *err);
/* One kv-head's value norms the plain way: out[j] = scale * sum_g || v[j] W[:, g*d .. +d) ||_1 for j < L, per query
 * head one GEMM of chunk_rows values at a time into proj[chunk_rows][D] (f32), then launch_l1_rows. h must work
 * on stream st. */
int value_norms_by_gemm(cublasHandle_t h, const bf16 *v, int L, int d, const bf16 *w_group, int ld_wo, int G, int D,
                        float *proj, int chunk_rows, float *out, float scale, cudaStream_t st, KvErr *err);
/* The same norms fused (kernels.cu k_value_norms), for all K kv-heads of a layer at once: out[kh][j] = scale *
 * sum_g sum_n |v[kh][j] . W[n][(kh*G + g)*d .. +d)| for j < L, v[kh][L][d] the kv-heads' values, W[D][ld_wo]
 * the layer's o_proj from wo on; no projection written. Served where value_norms_fused_serves says (d = 64 or
 * 128, D a multiple of 64, 16-byte aligned rows); elsewhere the GEMM + launch_l1_rows path. */
int value_norms_fused_serves(const bf16 *const *v, int K, int d, int D, const bf16 *wo, int ld_wo);
int launch_value_norms(const bf16 *const *v, int K, int L, int d, const bf16 *wo, int ld_wo, int G, int D, float *out,
                       float scale, cudaStream_t st, KvErr *err);
/* q_win[h][i][:] = q[t0+i][h][:] (f32) for i < w: the observation window's queries, row b = 0. */
int launch_qwin(const bf16 *q, float *q_win, int t0, int w, int H, int d, cudaStream_t st, KvErr *err);
/* Copies n entries: dst rows dst_rows[e] of dst_k/dst_v from src rows src_rows[e] (rows of d elements). */
int launch_gather_rows(const long long *src_rows, const long long *dst_rows, int n, const bf16 *src_k,
                       const bf16 *src_v, bf16 *dst_k, bf16 *dst_v, int d, cudaStream_t st, KvErr *err);
/* Y[M][N] = X[M][Kd] W[N][Kd]^T (+ Y when beta = 1): bf16 inputs, fp32 accumulation, Y f32 or bf16. */
int gemm_bf16(cublasHandle_t h, const bf16 *X, int ldx, const bf16 *W, int ldw, void *Y, cudaDataType y_type,
              int ldy, int M, int N, int Kd, float beta, KvErr *err);

#endif
