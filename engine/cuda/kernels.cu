/* kernels.cu — the CUDA kernels of the backend and their launchers (declared in cuda_internal.h).
 *
 * Element-wise and row kernels are written plainly: one block per row, f32 arithmetic, bf16 only for storage.
 * Attention has four paths: the naive kernel (one block per query row; it is the oracle the kernel lab checks
 * the others against, and it serves the decode trace, which needs the probabilities themselves), a flash-style
 * prefill kernel on tensor cores (WMMA bf16, fp32 accumulation, online softmax, query x key tiles in shared
 * memory), a split-K decode kernel with a merge kernel (splitk.h), and the observation's window attention
 * (cuBLAS scores, then a masked row softmax). */
#include <mma.h>
#include <stdint.h>

#include "cuda_internal.h"
#include "flash_plan.h"

using namespace nvcuda;

/* ------------------------------------------------------------------------------------------------------ */
/* Reductions                                                                                              */

__device__ static inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Every thread of the block gets the result. blockDim.x is a multiple of 32; red holds 32 floats. */
template <bool IS_MAX>
__device__ static float block_reduce(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* red may still be read by a previous reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = IS_MAX ? -INFINITY : 0.0f;
    for (int i = 0; i < n_warps; i++) r = IS_MAX ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

/* Eight bf16 (one 16-byte load) to f32: a bf16 is the high half of its f32, so the conversion is exact bit
 * moves (element 2i is the low half of word i). */
__device__ static inline void bf16x8_to_f32(uint4 raw, float *f) {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

static unsigned blocks_for(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1048576 ? b : 1048576); /* grid-stride loops cover the rest */
}

/* ------------------------------------------------------------------------------------------------------ */
/* Conversions, embedding, norms, RoPE, SwiGLU                                                             */

__global__ static void k_f32_to_bf16(const float *src, bf16 *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ static void k_bf16_to_f32(const bf16 *src, float *dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

int launch_f32_to_bf16(const float *src, bf16 *dst, size_t n, cudaStream_t st, KvErr *err) {
    if (n == 0) return 0;
    k_f32_to_bf16<<<blocks_for(n, 256), 256, 0, st>>>(src, dst, n);
    LAUNCH_CHECK();
    return 0;
}

int launch_bf16_to_f32(const bf16 *src, float *dst, size_t n, cudaStream_t st, KvErr *err) {
    if (n == 0) return 0;
    k_bf16_to_f32<<<blocks_for(n, 256), 256, 0, st>>>(src, dst, n);
    LAUNCH_CHECK();
    return 0;
}

__global__ static void k_embed(const int *tokens, const bf16 *emb, float *x, int D) {
    const bf16 *row = emb + (size_t)tokens[blockIdx.x] * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) x[(size_t)blockIdx.x * D + c] = __bfloat162float(row[c]);
}

int launch_embed(const int *tokens, const bf16 *emb, float *x, int M, int D, cudaStream_t st, KvErr *err) {
    k_embed<<<M, 256, 0, st>>>(tokens, emb, x, D);
    LAUNCH_CHECK();
    return 0;
}

__global__ static void k_rmsnorm(const float *x, const float *w, bf16 *y, int D, float eps, int src_step,
                                 int src_offset) {
    __shared__ float red[32];
    const float *src = x + ((size_t)blockIdx.x * src_step + src_offset) * D;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < D; c += blockDim.x) ss += src[c] * src[c];
    ss = block_reduce<false>(ss, red);
    float inv = rsqrtf(ss / (float)D + eps);
    for (int c = threadIdx.x; c < D; c += blockDim.x)
        y[(size_t)blockIdx.x * D + c] = __float2bfloat16(src[c] * inv * w[c]);
}

int launch_rmsnorm(const float *x, const float *w, bf16 *y, int rows, int D, float eps, int src_step,
                   int src_offset, cudaStream_t st, KvErr *err) {
    k_rmsnorm<<<rows, 256, 0, st>>>(x, w, y, D, eps, src_step, src_offset);
    LAUNCH_CHECK();
    return 0;
}

/* One block per row r = b*Tc + t. RoPE pairs (i, i + d/2) as Hugging Face's rotate_half; the angle is
 * computed in f32 as pos * inv_freq[i], like the CPU backend and HF. The d/2 angles of a row are shared by all
 * its heads, so each is computed once (sincosf of a large angle takes the slow argument reduction). */
__global__ static void k_qkv_rope(const float *qkv, const float *bias, const float *inv_freq, bf16 *q,
                                  const DevHead *heads, const int *seq_pos, int layer, int N, int H, int K,
                                  int d, int Tc) {
    __shared__ float s_cos[ATTN_MAX_HEAD_DIM / 2], s_sin[ATTN_MAX_HEAD_DIM / 2];
    int r = blockIdx.x, b = r / Tc, t = r % Tc, half = d / 2;
    int width = (H + 2 * K) * d;
    const float *src = qkv + (size_t)r * width;
    float pos = (float)(seq_pos[b] + t);
    for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(pos * inv_freq[i], &s_sin[i], &s_cos[i]);
    __syncthreads();
    for (int idx = threadIdx.x; idx < (H + K) * half; idx += blockDim.x) {
        int head = idx / half, i = idx % half, col = head * d + i;
        float x1 = src[col] + (bias ? bias[col] : 0.0f);
        float x2 = src[col + half] + (bias ? bias[col + half] : 0.0f);
        float s = s_sin[i], c = s_cos[i];
        float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
        bf16 *dst;
        if (head < H) {
            dst = q + ((size_t)r * H + head) * d;
        } else {
            DevHead hd = heads[head_slot(b, layer, head - H, N, K)];
            dst = hd.k + (size_t)(hd.len - hd.n_shared + t) * d; /* an own row: new entries never are shared */
        }
        dst[i] = __float2bfloat16(y1);
        dst[i + half] = __float2bfloat16(y2);
    }
    for (int idx = threadIdx.x; idx < K * d; idx += blockDim.x) {
        int kh = idx / d, c = idx % d, col = (H + K) * d + idx;
        DevHead hd = heads[head_slot(b, layer, kh, N, K)];
        hd.v[(size_t)(hd.len - hd.n_shared + t) * d + c] = __float2bfloat16(src[col] + (bias ? bias[col] : 0.0f));
    }
}

int launch_qkv_rope(const float *qkv, const float *bias, const float *inv_freq, bf16 *q, const DevHead *heads,
                    const int *seq_pos, int layer, int N, int H, int K, int d, int B, int Tc, cudaStream_t st,
                    KvErr *err) {
    if (d % 2 != 0 || d > ATTN_MAX_HEAD_DIM)
        return kv_fail(err, "qkv/rope: head dim %d unsupported (even, at most %d)", d, ATTN_MAX_HEAD_DIM);
    k_qkv_rope<<<B * Tc, 128, 0, st>>>(qkv, bias, inv_freq, q, heads, seq_pos, layer, N, H, K, d, Tc);
    LAUNCH_CHECK();
    return 0;
}

__global__ static void k_swiglu(const float *gu, bf16 *act, int M, int F) {
    size_t n = (size_t)M * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / F, f = i % F;
        float g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
        act[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
    }
}

int launch_swiglu(const float *gu, bf16 *act, int M, int F, cudaStream_t st, KvErr *err) {
    k_swiglu<<<blocks_for((size_t)M * F, 256), 256, 0, st>>>(gu, act, M, F);
    LAUNCH_CHECK();
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Naive attention: the oracle                                                                             */

__global__ static void k_attention_naive(const bf16 *q, bf16 *out, float *probs, int probs_ld,
                                         const DevHead *heads, int layer, int N, int H, int K, int d, int Tc,
                                         int t0, float scale) {
    extern __shared__ float sh_naive[];
    float *sq = sh_naive, *red = sh_naive + d;
    int t = t0 + blockIdx.x, h = blockIdx.y, b = blockIdx.z, G = H / K;
    DevHead hd = heads[head_slot(b, layer, h / G, N, K)];
    int n = hd.len + t + 1;
    size_t qrow = ((size_t)(b * Tc + t) * H + h) * d;
    float *row = probs + (((size_t)b * H + h) * gridDim.x + blockIdx.x) * probs_ld;
    for (int c = threadIdx.x; c < d; c += blockDim.x) sq[c] = __bfloat162float(q[qrow + c]) * scale;
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const bf16 *kr = head_k(hd, j, d);
        float s = 0.0f;
        for (int c = 0; c < d; c++) s += sq[c] * __bfloat162float(kr[c]);
        row[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce<true>(mx, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float p = expf(row[j] - mx);
        row[j] = p;
        sum += p;
    }
    sum = block_reduce<false>(sum, red);
    for (int j = threadIdx.x; j < probs_ld; j += blockDim.x) row[j] = j < n ? row[j] / sum : 0.0f;
    __syncthreads(); /* the whole row must be normalised before the output reads it */
    if (!out) return;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < n; j++) o += row[j] * __bfloat162float(head_v(hd, j, d)[c]);
        out[qrow + c] = __float2bfloat16(o);
    }
}

int launch_attention_naive(const bf16 *q, bf16 *out, float *probs, int probs_ld, const DevHead *heads,
                           int layer, int N, int H, int K, int d, int B, int Tc, int t0, int n_rows,
                           cudaStream_t st, KvErr *err) {
    dim3 grid(n_rows, H, B);
    size_t smem = (size_t)(d + 32) * sizeof(float);
    k_attention_naive<<<grid, 256, smem, st>>>(q, out, probs, probs_ld, heads, layer, N, H, K, d, Tc, t0,
                                               1.0f / sqrtf((float)d));
    LAUNCH_CHECK();
    return 0;
}

/* Row r = h*w + i of scores[H*w][L]: scaled, masked past key L-w+i, softmaxed in place. */
__global__ static void k_window_softmax(float *scores, int w, int L, float scale) {
    __shared__ float red[32];
    float *row = scores + (size_t)blockIdx.x * L;
    int n = L - w + (int)(blockIdx.x % w) + 1;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
    mx = block_reduce<true>(mx, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float p = expf(row[j] * scale - mx);
        row[j] = p;
        sum += p;
    }
    sum = block_reduce<false>(sum, red);
    for (int j = threadIdx.x; j < L; j += blockDim.x) row[j] = j < n ? row[j] / sum : 0.0f;
}

int window_attention(cublasHandle_t h, const bf16 *q, const bf16 *const *keys, float *probs, int H, int K, int d,
                     int t0, int w, int L, cudaStream_t st, KvErr *err) {
    int G = H / K;
    /* Window query i of head h is row t0+i of q, i.e. a [w][d] matrix with row stride H*d. */
    for (int head = 0; head < H; head++)
        if (gemm_bf16(h, q + ((size_t)t0 * H + head) * d, H * d, keys[head / G], d, probs + (size_t)head * w * L,
                      CUDA_R_32F, L, w, L, d, 0.0f, err))
            return -1;
    k_window_softmax<<<H * w, 256, 0, st>>>(probs, w, L, 1.0f / sqrtf((float)d));
    LAUNCH_CHECK();
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Flash prefill: one block of 4 warps per (64-query tile, head, sequence); each warp owns 16 query rows.  */
/* Per 64-key tile: S = Q K^T on tensor cores into shared memory, online softmax by rows (running max and  */
/* sum per row in shared memory), P written over S, O += P V on tensor cores into accumulators that stay    */
/* in registers for the whole key walk. Rows whose max moves need O rescaled: the warp then passes O        */
/* through its own S rows, 64 columns at a time (rare, see FA_SLACK). Shared memory layout and row          */
/* arithmetic: flash_plan.h. NJ is the largest d / 16 an instantiation serves (the accumulators need a size */
/* known at compile time).                                                                                  */

template <int NJ>
__global__ static void __launch_bounds__(FA_WARPS * 32)
    k_flash_prefill(const bf16 *q, bf16 *out, const DevHead *heads, int layer, int N, int H, int K, int d, int Tc,
                    float scale_log2) {
    extern __shared__ __align__(128) unsigned char sh_flash[];
    const FlashLayout lay = flash_layout(d);
    const int ldq = lay.ld_qkv, lds = lay.ld_s, ldp = lay.ld_p;
    bf16 *sQ = reinterpret_cast<bf16 *>(sh_flash + lay.q);
    bf16 *sK = reinterpret_cast<bf16 *>(sh_flash + lay.k);
    bf16 *sV = reinterpret_cast<bf16 *>(sh_flash + lay.v);
    float *sS = reinterpret_cast<float *>(sh_flash + lay.s);
    bf16 *sP = reinterpret_cast<bf16 *>(sh_flash + lay.p); /* the same bytes as sS, row by row */
    float *sM = reinterpret_cast<float *>(sh_flash + lay.m);
    float *sL = reinterpret_cast<float *>(sh_flash + lay.l);
    float *sA = reinterpret_cast<float *>(sh_flash + lay.alpha);

    int q0 = flash_tile(blockIdx.x, gridDim.x) * FA_BQ, h = blockIdx.y, b = blockIdx.z, G = H / K;
    int nq = min(FA_BQ, Tc - q0);
    DevHead hd = heads[head_slot(b, layer, h / G, N, K)];
    int n_keys = hd.len + q0 + nq; /* what the tile's last query sees */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r0 = warp * 16;
    int vec = d / 8, nj = d / 16; /* uint4 = 8 bf16 per load; nj <= NJ */
    const uint4 zero = make_uint4(0, 0, 0, 0);

    for (int idx = threadIdx.x; idx < FA_BQ * vec; idx += blockDim.x) {
        int row = idx / vec, c8 = idx % vec;
        uint4 val = zero;
        if (row < nq) val = reinterpret_cast<const uint4 *>(q + ((size_t)(b * Tc + q0 + row) * H + h) * d)[c8];
        reinterpret_cast<uint4 *>(sQ + row * ldq)[c8] = val;
    }
    for (int idx = threadIdx.x; idx < FA_BQ; idx += blockDim.x) {
        sM[idx] = -INFINITY;
        sL[idx] = 0.0f;
    }
    int warp_last_key = flash_last_key(hd.len, q0, nq, r0);
    /* In the softmax, lanes 2i and 2i+1 share row r0+i, each taking every other column. */
    int my_row = r0 + (lane >> 1), half = lane & 1;
    int limit = flash_limit(hd.len, q0, nq, my_row);

    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa, fp[FA_BK / 16];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fk;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fv;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fs[FA_BK / 16], fo[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) wmma::fill_fragment(fo[j], 0.0f);

    for (int k0 = 0; k0 < n_keys; k0 += FA_BK) {
        __syncthreads(); /* every warp is done with the previous K/V tile */
        for (int idx = threadIdx.x; idx < FA_BK * vec; idx += blockDim.x) {
            int row = idx / vec, c8 = idx % vec, key = k0 + row;
            uint4 kv = zero, vv = zero;
            if (key < n_keys) {
                kv = reinterpret_cast<const uint4 *>(head_k(hd, key, d))[c8];
                vv = reinterpret_cast<const uint4 *>(head_v(hd, key, d))[c8];
            }
            reinterpret_cast<uint4 *>(sK + row * ldq)[c8] = kv;
            reinterpret_cast<uint4 *>(sV + row * ldq)[c8] = vv;
        }
        __syncthreads();
        if (k0 > warp_last_key) continue; /* warp-uniform: nothing of this tile is visible to these rows */

        /* S = Q K^T: each Q fragment is loaded once and used for the tile's 4 key blocks. */
#pragma unroll
        for (int j = 0; j < FA_BK / 16; j++) wmma::fill_fragment(fs[j], 0.0f);
        for (int kk = 0; kk < nj; kk++) {
            wmma::load_matrix_sync(fa, sQ + r0 * ldq + kk * 16, ldq);
#pragma unroll
            for (int j = 0; j < FA_BK / 16; j++) {
                wmma::load_matrix_sync(fk, sK + j * 16 * ldq + kk * 16, ldq);
                wmma::mma_sync(fs[j], fa, fk, fs[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < FA_BK / 16; j++)
            wmma::store_matrix_sync(sS + r0 * lds + j * 16, fs[j], lds, wmma::mem_row_major);
        __syncwarp();

        bool rescale, empty;
        float sv[FA_BK / 2]; /* my half of my row: logits, then probabilities */
        { /* online softmax of my_row over this tile, in log2 units */
            const float *srow = sS + my_row * lds;
            float tmax = -INFINITY;
#pragma unroll
            for (int u = 0; u < FA_BK / 2; u++) {
                int c = 2 * u + half;
                sv[u] = k0 + c < limit ? srow[c] * scale_log2 : -INFINITY;
                tmax = fmaxf(tmax, sv[u]);
            }
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            float m_old = sM[my_row];
            float m_new = flash_next_max(m_old, tmax);
            float alpha = 1.0f, tsum = 0.0f;
            empty = m_new == -INFINITY; /* nothing visible yet (or a padding row): P = 0 */
            if (!empty) {
                alpha = exp2f(m_old - m_new); /* exactly 1 when the max stays, 0 on the row's first keys */
#pragma unroll
                for (int u = 0; u < FA_BK / 2; u++) {
                    sv[u] = exp2f(sv[u] - m_new);
                    tsum += sv[u];
                }
            }
            tsum += __shfl_xor_sync(0xffffffffu, tsum, 1);
            /* O's factor: on the row's first keys O is still zero, so it needs none. */
            float o_scale = m_old == -INFINITY ? 1.0f : alpha;
            __syncwarp(); /* both lanes of the pair have read sM[my_row]; every lane has read its S values */
            if (!half) {
                sM[my_row] = m_new;
                sL[my_row] = sL[my_row] * alpha + tsum;
                sA[my_row] = o_scale;
            }
            rescale = __any_sync(0xffffffffu, o_scale != 1.0f); /* sA is read after the next __syncwarp */
        }
        if (rescale) { /* rare: O through the warp's S rows, FA_BK columns at a time, each row times its factor */
            __syncwarp();
#pragma unroll
            for (int j0 = 0; j0 < NJ; j0 += FA_BK / 16) {
                if (j0 >= nj) break;
#pragma unroll
                for (int jj = 0; jj < FA_BK / 16; jj++)
                    if (j0 + jj < nj) wmma::store_matrix_sync(sS + r0 * lds + jj * 16, fo[j0 + jj], lds,
                                                              wmma::mem_row_major);
                __syncwarp();
                int cols = min(FA_BK, d - j0 * 16);
                for (int r = r0; r < r0 + 16; r++) {
                    float a = sA[r];
                    if (a != 1.0f) /* warp-uniform */
                        for (int c = lane; c < cols; c += 32) sS[r * lds + c] *= a;
                }
                __syncwarp();
#pragma unroll
                for (int jj = 0; jj < FA_BK / 16; jj++)
                    if (j0 + jj < nj) wmma::load_matrix_sync(fo[j0 + jj], sS + r0 * lds + jj * 16, lds,
                                                             wmma::mem_row_major);
                __syncwarp(); /* loaded before the next pass or P overwrites these rows */
            }
        }
        { /* P over my row's S bytes (every lane of the warp has read its S values: the __syncwarp above) */
            bf16 *prow = sP + my_row * ldp;
#pragma unroll
            for (int u = 0; u < FA_BK / 2; u++) prow[2 * u + half] = __float2bfloat16(empty ? 0.0f : sv[u]);
        }
        __syncwarp(); /* P complete before any lane loads it */

        /* O += P V: the P fragments are loaded once and used for every output block. */
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++) wmma::load_matrix_sync(fp[kk], sP + r0 * ldp + kk * 16, ldp);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            if (j >= nj) break;
#pragma unroll
            for (int kk = 0; kk < FA_BK / 16; kk++) {
                wmma::load_matrix_sync(fv, sV + kk * 16 * ldq + j * 16, ldq);
                wmma::mma_sync(fo[j], fp[kk], fv, fo[j]);
            }
        }
    }
    /* O / l through the warp's S rows, FA_BK columns at a time; the warp's rows are its own to write. */
    __syncwarp(); /* the last tile's P is loaded, its sL written */
#pragma unroll
    for (int j0 = 0; j0 < NJ; j0 += FA_BK / 16) {
        if (j0 >= nj) break;
#pragma unroll
        for (int jj = 0; jj < FA_BK / 16; jj++)
            if (j0 + jj < nj) wmma::store_matrix_sync(sS + r0 * lds + jj * 16, fo[j0 + jj], lds, wmma::mem_row_major);
        __syncwarp();
        int cols = min(FA_BK, d - j0 * 16);
        for (int idx = lane; idx < 16 * cols; idx += 32) {
            int row = r0 + idx / cols, c = idx % cols;
            if (row < nq)
                out[((size_t)(b * Tc + q0 + row) * H + h) * d + j0 * 16 + c] =
                    __float2bfloat16(sS[row * lds + c] / sL[row]);
        }
        __syncwarp(); /* read before the next pass overwrites the rows */
    }
}

/* The instantiation for head dim d: the accumulators of the smallest NJ >= d / 16 (fewer registers). */
template <int NJ>
static int flash_launch(const bf16 *q, bf16 *out, const DevHead *heads, int layer, int N, int H, int K, int d,
                        int B, int Tc, size_t smem, cudaStream_t st, KvErr *err) {
    CU_CHECK(cudaFuncSetAttribute(k_flash_prefill<NJ>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((Tc + FA_BQ - 1) / FA_BQ, H, B);
    k_flash_prefill<NJ><<<grid, FA_WARPS * 32, smem, st>>>(q, out, heads, layer, N, H, K, d, Tc,
                                                           1.4426950408889634f / sqrtf((float)d));
    LAUNCH_CHECK();
    return 0;
}

int launch_flash_prefill(const bf16 *q, bf16 *out, const DevHead *heads, int layer, int N, int H, int K, int d,
                         int B, int Tc, cudaStream_t st, KvErr *err) {
    size_t smem = flash_layout(d).total;
    if (d % 16 != 0 || d > ATTN_MAX_HEAD_DIM || smem > FA_SMEM_LIMIT)
        return kv_fail(err, "flash attention: head dim %d unsupported (a multiple of 16, at most %d)", d,
                       ATTN_MAX_HEAD_DIM);
    if (H > 65535 || B > 65535)
        return kv_fail(err, "flash attention: %d heads x %d sequences exceed the grid (at most 65535 each)", H, B);
    if (d <= 64) return flash_launch<4>(q, out, heads, layer, N, H, K, d, B, Tc, smem, st, err);
    if (d <= 128) return flash_launch<8>(q, out, heads, layer, N, H, K, d, B, Tc, smem, st, err);
    return flash_launch<ATTN_MAX_HEAD_DIM / 16>(q, out, heads, layer, N, H, K, d, B, Tc, smem, st, err);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Split-K decode: one block per (split, kv-head, sequence) serving the G query heads of the group, so     */
/* each key and value is read once. Teams of lanes read whole rows in 16-byte chunks (splitk.h): a team    */
/* scores one key for every head (a dot product per lane, then a reduction over the team), then each team  */
/* slot accumulates P V over its share of the keys and the slots are summed in shared memory. Rows are     */
/* found through head_k / head_v: a view's shared entry costs one more 4-byte index read (the team's lanes */
/* read the same index) beside its 2·d-byte key and value rows, in both passes. GMAX is the largest group  */
/* an instantiation serves (its per-head registers need a size known at compile time: fewer registers,    */
/* more blocks per multiprocessor). Each lane loads DECODE_BATCH keys before it scores any, so that many   */
/* loads are in flight; every key's arithmetic and the order of every sum are the same as one at a time.   */

enum { DECODE_BATCH = 4 };

template <int GMAX>
__global__ static void __launch_bounds__(SPLITK_THREADS)
    k_decode_split(const bf16 *q, float *o_part, float *ml_part, const DevHead *heads, int layer, int N, int H,
                   int K, int d, int n_splits, float scale) {
    extern __shared__ float sh_dec[];
    int s = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, G = H / K;
    int team = splitk_team(d), slot = threadIdx.x / team, c8 = threadIdx.x % team, n_slots = blockDim.x / team;
    bool active = c8 < d / 8; /* the team lane holds dims c8*8 .. c8*8+7 */
    float *sc = sh_dec, *so = sc + G * SPLITK_KEYS, *red = so + n_slots * G * d;
    DevHead hd = heads[head_slot(b, layer, kh, N, K)];
    int j0, j1;
    splitk_range(s, hd.len + 1, &j0, &j1);
    int nk = j1 - j0;
    size_t part0 = ((size_t)b * H + (size_t)kh * G) * n_splits + s; /* partial of head g: part0 + g*n_splits */
    if (nk <= 0) {
        for (int g = 0; g < G; g++) {
            for (int c = threadIdx.x; c < d; c += blockDim.x) o_part[(part0 + (size_t)g * n_splits) * d + c] = 0;
            if (threadIdx.x == 0) {
                ml_part[(part0 + (size_t)g * n_splits) * 2] = -INFINITY;
                ml_part[(part0 + (size_t)g * n_splits) * 2 + 1] = 0.0f;
            }
        }
        return;
    }

    /* Scores. The group's queries are adjacent rows of q; each lane keeps its 8 dims of every head. */
    float qr[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (g < G && active) raw = reinterpret_cast<const uint4 *>(q + ((size_t)b * H + (size_t)kh * G + g) * d)[c8];
        bf16x8_to_f32(raw, qr[g]);
#pragma unroll
        for (int e = 0; e < 8; e++) qr[g][e] *= scale;
    }
    /* Slot `slot` scores keys slot, slot + n_slots, ...: DECODE_BATCH of them per pass. Same trip count for every
     * lane: the shuffles see full warps. */
    for (int i0 = 0; i0 < nk; i0 += DECODE_BATCH * n_slots) {
        uint4 raw[DECODE_BATCH];
#pragma unroll
        for (int u = 0; u < DECODE_BATCH; u++) {
            int i = i0 + u * n_slots + slot;
            raw[u] = make_uint4(0, 0, 0, 0);
            if (active && i < nk) raw[u] = reinterpret_cast<const uint4 *>(head_k(hd, j0 + i, d))[c8];
        }
#pragma unroll
        for (int u = 0; u < DECODE_BATCH; u++) {
            int i = i0 + u * n_slots + slot;
            float acc[GMAX];
#pragma unroll
            for (int g = 0; g < GMAX; g++) acc[g] = 0.0f;
            if (active && i < nk) {
                float kf[8];
                bf16x8_to_f32(raw[u], kf);
#pragma unroll
                for (int g = 0; g < GMAX; g++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g] += qr[g][e] * kf[e];
            }
#pragma unroll
            for (int g = 0; g < GMAX; g++) {
                if (g >= G) break;
                for (int o = team / 2; o > 0; o >>= 1) acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], o);
            }
            if (c8 == 0 && i < nk)
#pragma unroll
                for (int g = 0; g < GMAX; g++)
                    if (g < G) sc[g * SPLITK_KEYS + i] = acc[g];
        }
    }
    __syncthreads();

    for (int g = 0; g < G; g++) {
        float mx = -INFINITY;
        for (int i = threadIdx.x; i < nk; i += blockDim.x) mx = fmaxf(mx, sc[g * SPLITK_KEYS + i]);
        mx = block_reduce<true>(mx, red);
        float sum = 0.0f;
        for (int i = threadIdx.x; i < nk; i += blockDim.x) {
            float p = expf(sc[g * SPLITK_KEYS + i] - mx);
            sc[g * SPLITK_KEYS + i] = p;
            sum += p;
        }
        sum = block_reduce<false>(sum, red);
        if (threadIdx.x == 0) {
            ml_part[(part0 + (size_t)g * n_splits) * 2] = mx;
            ml_part[(part0 + (size_t)g * n_splits) * 2 + 1] = sum;
        }
    }
    __syncthreads();

    /* P V: slot `slot` takes keys slot, slot + n_slots, ...; its partial sums go to so[slot][g][:]. */
    if (active) {
        float o[GMAX][8];
#pragma unroll
        for (int g = 0; g < GMAX; g++)
#pragma unroll
            for (int e = 0; e < 8; e++) o[g][e] = 0.0f;
        for (int i0 = slot; i0 < nk; i0 += DECODE_BATCH * n_slots) {
            uint4 raw[DECODE_BATCH];
#pragma unroll
            for (int u = 0; u < DECODE_BATCH; u++) {
                int i = i0 + u * n_slots;
                raw[u] = make_uint4(0, 0, 0, 0);
                if (i < nk) raw[u] = reinterpret_cast<const uint4 *>(head_v(hd, j0 + i, d))[c8];
            }
#pragma unroll
            for (int u = 0; u < DECODE_BATCH; u++) {
                int i = i0 + u * n_slots;
                if (i >= nk) break;
                float vf[8];
                bf16x8_to_f32(raw[u], vf);
#pragma unroll
                for (int g = 0; g < GMAX; g++) {
                    float p = g < G ? sc[g * SPLITK_KEYS + i] : 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; e++) o[g][e] += p * vf[e];
                }
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++)
            if (g < G)
#pragma unroll
                for (int e = 0; e < 8; e++) so[((size_t)slot * G + g) * d + c8 * 8 + e] = o[g][e];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * d; idx += blockDim.x) {
        float sum = 0.0f;
        for (int sl = 0; sl < n_slots; sl++) sum += so[(size_t)sl * G * d + idx];
        o_part[(part0 + (size_t)(idx / d) * n_splits) * d + idx % d] = sum;
    }
}

/* One block per (head, sequence): each thread merges its output dimensions over the splits. */
__global__ static void k_decode_merge(const float *o_part, const float *ml_part, bf16 *out, int H, int d,
                                      int n_splits) {
    extern __shared__ float sh_merge[];
    int h = blockIdx.x, b = blockIdx.y;
    size_t part0 = ((size_t)b * H + h) * n_splits;
    float *m = sh_merge, *l = sh_merge + n_splits;
    for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
        m[s] = ml_part[(part0 + s) * 2];
        l[s] = ml_part[(part0 + s) * 2 + 1];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < d; c += blockDim.x)
        out[((size_t)b * H + h) * d + c] = __float2bfloat16(splitk_merge(m, l, o_part + part0 * d + c, n_splits, d));
}

int launch_decode_attention(const bf16 *q, bf16 *out, float *o_part, float *ml_part, const DevHead *heads,
                            int layer, int N, int H, int K, int d, int B, int n_splits, cudaStream_t st,
                            KvErr *err) {
    int G = H / K;
    if (G > ATTN_MAX_GROUP || d % 8 != 0 || d > ATTN_MAX_HEAD_DIM)
        return kv_fail(err, "decode attention: group %d / head dim %d unsupported (group <= %d, head dim a "
                            "multiple of 8 up to %d)", G, d, ATTN_MAX_GROUP, ATTN_MAX_HEAD_DIM);
    if (n_splits < 1 || K > 65535 || B > 65535 || H > 65535)
        return kv_fail(err, "decode attention: %d splits, %d kv-heads, %d sequences: outside the grid", n_splits, K,
                       B);
    size_t smem = (size_t)splitk_smem_floats(G, d) * sizeof(float);
    dim3 grid(n_splits, K, B);
    float scale = 1.0f / sqrtf((float)d);
    /* the instantiation of the smallest GMAX >= G */
    if (G <= 1) k_decode_split<1><<<grid, SPLITK_THREADS, smem, st>>>(q, o_part, ml_part, heads, layer, N, H, K, d,
                                                                       n_splits, scale);
    else if (G <= 2) k_decode_split<2><<<grid, SPLITK_THREADS, smem, st>>>(q, o_part, ml_part, heads, layer, N, H,
                                                                            K, d, n_splits, scale);
    else if (G <= 4) k_decode_split<4><<<grid, SPLITK_THREADS, smem, st>>>(q, o_part, ml_part, heads, layer, N, H,
                                                                            K, d, n_splits, scale);
    else k_decode_split<ATTN_MAX_GROUP><<<grid, SPLITK_THREADS, smem, st>>>(q, o_part, ml_part, heads, layer, N,
                                                                             H, K, d, n_splits, scale);
    LAUNCH_CHECK();
    size_t smem_merge = 2 * (size_t)n_splits * sizeof(float);
    if (smem_merge > 48 * 1024)
        return kv_fail(err, "decode attention: %d splits exceed the merge kernel's shared memory", n_splits);
    k_decode_merge<<<dim3(H, B), 128, smem_merge, st>>>(o_part, ml_part, out, H, d, n_splits);
    LAUNCH_CHECK();
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Observation helpers, cache gather, GEMM                                                                 */

__global__ static void k_l1_rows(const float *P, int D, float *out, float scale, int accumulate) {
    __shared__ float red[32];
    const float *row = P + (size_t)blockIdx.x * D;
    float s = 0.0f;
    for (int e = threadIdx.x; e < D; e += blockDim.x) s += fabsf(row[e]);
    s = block_reduce<false>(s, red);
    if (threadIdx.x == 0) out[blockIdx.x] = (accumulate ? out[blockIdx.x] : 0.0f) + scale * s;
}

int launch_l1_rows(const float *P, int rows, int D, float *out, float scale, int accumulate, cudaStream_t st,
                   KvErr *err) {
    if (rows == 0) return 0;
    k_l1_rows<<<rows, 256, 0, st>>>(P, D, out, scale, accumulate);
    LAUNCH_CHECK();
    return 0;
}

int value_norms_by_gemm(cublasHandle_t h, const bf16 *v, int L, int d, const bf16 *w_group, int ld_wo, int G, int D,
                        float *proj, int chunk_rows, float *out, float scale, cudaStream_t st, KvErr *err) {
    for (int g = 0; g < G; g++)
        for (int j0 = 0; j0 < L; j0 += chunk_rows) {
            int rc = L - j0 < chunk_rows ? L - j0 : chunk_rows;
            if (gemm_bf16(h, v + (size_t)j0 * d, d, w_group + (size_t)g * d, ld_wo, proj, CUDA_R_32F, D, rc, D, d, 0.0f,
                          err) ||
                launch_l1_rows(proj, rc, D, out + j0, scale, g > 0, st, err))
                return -1;
        }
    return 0;
}

/* The observation's value norms, fused: out[j] = scale * sum_g sum_n |sum_c v[j][c] W[n][g*d + c]| for the G
 * query heads of each kv-head, without the L x D projection in memory (the GEMM + L1 path wrote and re-read it,
 * one GEMM per query head and block of rows: about 30 TFLOP/s on an H200). One block of VN_WARPS warps per
 * VN_ROWS value rows of a kv-head (all kv-heads in one launch); each warp keeps its 16 rows' fragments of v in
 * registers for the whole walk over the G heads' D columns, VN_COLS at a time through shared memory (the next
 * columns loaded into registers while the current ones multiply). The absolute values of each 16 x 16 product add up element-wise in one accumulator
 * fragment (the same layout every time, so no shuffles), whose 16 columns are summed per row at the end. DK is
 * d / 16. */
#define VN_WARPS 8
#define VN_ROWS (VN_WARPS * 16)
#define VN_COLS 64

/* Shared rows of d + 16 elements: 32-byte aligned for WMMA, banks staggered. */
__host__ __device__ static size_t vn_smem_bytes(int d) {
    size_t tiles = (size_t)(VN_ROWS > VN_COLS ? VN_ROWS : VN_COLS) * (d + 16) * sizeof(bf16);
    return tiles + (size_t)VN_WARPS * 256 * sizeof(float);
}

typedef struct {
    const bf16 *v[ATTN_MAX_KV_HEADS];
} VnValues;

template <int DK>
__global__ static void __launch_bounds__(VN_WARPS * 32)
    k_value_norms(VnValues values, int L, const bf16 *wo, int ld_wo, int G, int D, float *out, float scale) {
    extern __shared__ __align__(128) unsigned char sh_vn[];
    const int d = DK * 16, ld = d + 16, vec = d / 8, kh = blockIdx.y;
    const bf16 *v = values.v[kh];
    wo += (size_t)kh * G * d;
    out += (size_t)kh * L;
    bf16 *tile = reinterpret_cast<bf16 *>(sh_vn); /* v's rows, then W's columns */
    float *sums = reinterpret_cast<float *>(sh_vn + vn_smem_bytes(d) - (size_t)VN_WARPS * 256 * sizeof(float));
    const int j0 = blockIdx.x * VN_ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint4 zero = make_uint4(0, 0, 0, 0);

    for (int idx = threadIdx.x; idx < VN_ROWS * vec; idx += blockDim.x) {
        int row = idx / vec, c8 = idx % vec;
        uint4 val = zero;
        if (j0 + row < L) val = reinterpret_cast<const uint4 *>(v + (size_t)(j0 + row) * d)[c8];
        reinterpret_cast<uint4 *>(tile + row * ld)[c8] = val;
    }
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[DK];
    for (int k = 0; k < DK; k++) wmma::load_matrix_sync(fa[k], tile + warp * 16 * ld + k * 16, ld);
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, total;
    wmma::fill_fragment(total, 0.0f);

    /* Each thread's share of one VN_COLS x d stage of W: column n of the stage is W's row n0 + n. */
    enum { PER_THREAD = (VN_COLS * DK * 2 + VN_WARPS * 32 - 1) / (VN_WARPS * 32) };
    uint4 next[PER_THREAD];
    const int n_stages = G * (D / VN_COLS);
    auto fetch = [&](int stage) {
        int g = stage / (D / VN_COLS), n0 = (stage % (D / VN_COLS)) * VN_COLS;
        for (int i = 0; i < PER_THREAD; i++) {
            int idx = threadIdx.x + i * VN_WARPS * 32, n = idx / vec, c8 = idx % vec;
            next[i] = idx < VN_COLS * vec
                          ? reinterpret_cast<const uint4 *>(wo + (size_t)(n0 + n) * ld_wo + (size_t)g * d)[c8]
                          : zero;
        }
    };
    fetch(0);
    for (int stage = 0; stage < n_stages; stage++) {
        __syncthreads(); /* the tile's previous contents (v's rows, or the last stage) are no longer read */
        for (int i = 0; i < PER_THREAD; i++) {
            int idx = threadIdx.x + i * VN_WARPS * 32;
            if (idx < VN_COLS * vec) reinterpret_cast<uint4 *>(tile + (idx / vec) * ld)[idx % vec] = next[i];
        }
        __syncthreads();
        if (stage + 1 < n_stages) fetch(stage + 1);
        for (int t = 0; t < VN_COLS / 16; t++) {
            wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < DK; k++) {
                wmma::load_matrix_sync(fb, tile + t * 16 * ld + k * 16, ld);
                wmma::mma_sync(acc, fa[k], fb, acc);
            }
            for (int e = 0; e < acc.num_elements; e++) total.x[e] += fabsf(acc.x[e]);
        }
    }
    float *mine = sums + warp * 256;
    wmma::store_matrix_sync(mine, total, 16, wmma::mem_row_major);
    __syncwarp();
    if (lane < 16 && j0 + warp * 16 + lane < L) {
        float s = 0.0f;
        for (int c = 0; c < 16; c++) s += mine[lane * 16 + c];
        out[j0 + warp * 16 + lane] = scale * s;
    }
}

int value_norms_fused_serves(const bf16 *const *v, int K, int d, int D, const bf16 *wo, int ld_wo) {
    int aligned = ld_wo % 8 == 0 && (uintptr_t)wo % 16 == 0;
    for (int kh = 0; kh < K; kh++) aligned &= (uintptr_t)v[kh] % 16 == 0;
    return (d == 64 || d == 128) && D % VN_COLS == 0 && K <= ATTN_MAX_KV_HEADS && aligned;
}

int launch_value_norms(const bf16 *const *v, int K, int L, int d, const bf16 *wo, int ld_wo, int G, int D, float *out,
                       float scale, cudaStream_t st, KvErr *err) {
    if (L == 0 || K == 0) return 0;
    if (!value_norms_fused_serves(v, K, d, D, wo, ld_wo))
        return kv_fail(err, "value norms: head dim %d, width %d, %d kv-heads or a base not 16-byte aligned: not "
                            "served by the fused kernel", d, D, K);
    VnValues values = {};
    for (int kh = 0; kh < K; kh++) values.v[kh] = v[kh];
    size_t smem = vn_smem_bytes(d); /* within the default 48 KiB at d <= 128 */
    dim3 grid((L + VN_ROWS - 1) / VN_ROWS, K);
    if (d == 64) k_value_norms<4><<<grid, VN_WARPS * 32, smem, st>>>(values, L, wo, ld_wo, G, D, out, scale);
    else k_value_norms<8><<<grid, VN_WARPS * 32, smem, st>>>(values, L, wo, ld_wo, G, D, out, scale);
    LAUNCH_CHECK();
    return 0;
}

/* The host's greedy pick (engine/generate.c argmax) per row: the first index of the largest value, scanning with
 * a strict >, so a NaN is never picked unless it is the row's first value (then nothing beats it: index 0). The
 * block's threads scan strided ranges in ascending order (each keeps its lowest index among equals) and fold
 * pairs by (value, lower index), a NaN counting as below -inf, which is the sequential scan's answer. */
__device__ static bool argmax_better(float va, int ia, float vb, int ib) {
    bool na = va != va, nb = vb != vb;
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return ia < ib;
}

__global__ static void k_argmax_rows(const float *x, int V, int *out) {
    __shared__ float best_v[256];
    __shared__ int best_i[256];
    const float *row = x + (size_t)blockIdx.x * V;
    float bv = row[0];
    int bi = 0;
    for (int e = threadIdx.x; e < V; e += blockDim.x)
        if (argmax_better(row[e], e, bv, bi)) bv = row[e], bi = e;
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half &&
            argmax_better(best_v[threadIdx.x + half], best_i[threadIdx.x + half], best_v[threadIdx.x], best_i[threadIdx.x]))
            best_v[threadIdx.x] = best_v[threadIdx.x + half], best_i[threadIdx.x] = best_i[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = row[0] != row[0] ? 0 : best_i[0];
}

int launch_argmax_rows(const float *x, int rows, int V, int *out, cudaStream_t st, KvErr *err) {
    if (rows == 0) return 0;
    k_argmax_rows<<<rows, 256, 0, st>>>(x, V, out);
    LAUNCH_CHECK();
    return 0;
}

__global__ static void k_qwin(const bf16 *q, float *q_win, int t0, int w, int H, int d) {
    size_t n = (size_t)H * w * d;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t h = idx / ((size_t)w * d), i = (idx / d) % w, c = idx % d;
        q_win[idx] = __bfloat162float(q[((t0 + i) * H + h) * d + c]);
    }
}

int launch_qwin(const bf16 *q, float *q_win, int t0, int w, int H, int d, cudaStream_t st, KvErr *err) {
    k_qwin<<<blocks_for((size_t)H * w * d, 256), 256, 0, st>>>(q, q_win, t0, w, H, d);
    LAUNCH_CHECK();
    return 0;
}

/* Work item i copies 16 bytes: chunk i % vecs of the K (even) or V (odd) row of entry i / (2 vecs), so
 * neighbouring threads copy neighbouring chunks of one row. */
__global__ static void k_gather_rows(const long long *src_rows, const long long *dst_rows, int n,
                                     const uint4 *src_k, const uint4 *src_v, uint4 *dst_k, uint4 *dst_v, int vecs) {
    size_t total = (size_t)n * 2 * vecs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t e = i / (2 * (size_t)vecs);
        int r = (int)(i % (2 * (size_t)vecs)), is_v = r >= vecs, c = r - (is_v ? vecs : 0);
        const uint4 *src = is_v ? src_v : src_k;
        uint4 *dst = is_v ? dst_v : dst_k;
        dst[(size_t)dst_rows[e] * vecs + c] = src[(size_t)src_rows[e] * vecs + c];
    }
}

int launch_gather_rows(const long long *src_rows, const long long *dst_rows, int n, const bf16 *src_k,
                       const bf16 *src_v, bf16 *dst_k, bf16 *dst_v, int d, cudaStream_t st, KvErr *err) {
    if (n == 0) return 0;
    const void *ptrs[4] = {src_k, src_v, dst_k, dst_v};
    int aligned = d % 8 == 0;
    for (int i = 0; i < 4; i++) aligned &= (uintptr_t)ptrs[i] % 16 == 0;
    if (!aligned)
        return kv_fail(err, "cache gather: head dim %d or a cache base not 16-byte aligned (rows are copied in "
                            "16-byte chunks)", d);
    int vecs = d / 8;
    k_gather_rows<<<blocks_for((size_t)n * 2 * vecs, 256), 256, 0, st>>>(
        src_rows, dst_rows, n, reinterpret_cast<const uint4 *>(src_k), reinterpret_cast<const uint4 *>(src_v),
        reinterpret_cast<uint4 *>(dst_k), reinterpret_cast<uint4 *>(dst_v), vecs);
    LAUNCH_CHECK();
    return 0;
}

/* Row-major Y = X W^T is column-major Y^T = W^T' X^T': cuBLAS sees W as a column-major Kd x N matrix
 * (transposed) and X as Kd x M. */
int gemm_bf16(cublasHandle_t h, const bf16 *X, int ldx, const bf16 *W, int ldw, void *Y, cudaDataType y_type,
              int ldy, int M, int N, int Kd, float beta, KvErr *err) {
    if (M == 0) return 0;
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, Kd, &alpha, W, CUDA_R_16BF, ldw, X, CUDA_R_16BF,
                              ldx, &beta, Y, y_type, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}
