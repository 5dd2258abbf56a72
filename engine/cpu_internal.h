/* cpu_internal.h — the numeric kernels of the CPU backend (engine/cpu_kernels.c, engine/cpu_q4.c), shared by
 * its forward pass (engine/cpu.c) and tested one by one. f32 arithmetic throughout; the large products go to
 * OpenBLAS (on tiles of f32 weights rebuilt from their codes where the backend holds only codes), the rest
 * are plain loops written so the compiler vectorises them (`omp simd`).
 * Shape legend: T query rows, n keys, d head dim, D hidden. */
#ifndef KVBENCH_CPU_INTERNAL_H
#define KVBENCH_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* y[M][N] = x[M][K] · w[N][K]^T (+ bias[N] when non-NULL) (+ the old y when accumulate): Hugging Face's
 * y = W x for M rows at once, so each weight matrix is read once per call whatever M is. Threads split the
 * N output features; each calls a single-threaded BLAS on its slice. */
void cpu_matmul(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int accumulate);

/* A weight matrix [N][K] re-encoded without loss as blocks of 32 codes: w = (q * scale) + offset in f32,
 * exactly the f32 value the loader produced. Weights dequantised from GGUF's Q4_0, Q4_1 and Q8_0 blocks are
 * such codes (f16 scale and offset, small integer q); recovering them lets a decode step stream 1.25 bytes
 * per weight instead of 4, and decode is bound by weight bytes. The backend then keeps only the codes (its
 * prefill rebuilds f32 tiles from them, cpu_matmul_codes); matrices that are not such codes (f32 or bf16
 * checkpoints) stay f32 only. */
typedef struct {
    int8_t *q;      /* [N][K] */
    float *scale;   /* [N][K/32] */
    float *offset;  /* [N][K/32] */
} CpuPacked;

#define CPU_PACK_BLOCK 32

/* Fills p (storage from the caller: N*K codes, N*K/32 scales and offsets) and returns 1 when every block of
 * w is exactly such a code, else 0 (p is then meaningless). K must be a multiple of 32. */
int cpu_pack_exact(CpuPacked *p, const float *w, int N, int K);


/* ---------------------------------------------------------------------------------- 4-bit packed weights */

/* Instruction set of the 4-bit kernels, chosen once at backend open: the best this CPU has, or the one the
 * environment variable KVBENCH_SIMD names (scalar | avx2 | avx512; tests force each in turn). */
typedef enum { CPU_SIMD_SCALAR, CPU_SIMD_AVX2, CPU_SIMD_AVX512 } CpuSimd;

/* request NULL or "" picks the best supported level; a named level this CPU lacks, or an unknown name,
 * fails with a message saying what is supported. */
int cpu_simd_choose(CpuSimd *out, const char *request, KvErr *err);
const char *cpu_simd_name(CpuSimd simd);

/* One block of 32 weights of a matrix that is exactly 4-bit codes (a GGUF Q4_1 or Q4_0 matrix): weight i is
 * code_i * scale + offset in f32 (scale, offset f16 bits; code i in the low nibble of codes[i] for i < 16,
 * code i in the high nibble of codes[i - 16] otherwise, as GGUF stores them). 0.625 bytes per weight;
 * the kernels rebuild exactly the f32 weight the loader produced (code * scale is exact in f32). */
typedef struct {
    uint16_t scale, offset;
    uint8_t codes[16];
} CpuQ4Block;

/* Fills blocks[N][K/32] and returns 1 when every block of w[N][K] is exactly such a block, else 0.
 * K must be a multiple of 32. */
int cpu_pack_q4(CpuQ4Block *blocks, const float *w, int N, int K);

/* The f32 weight row n of a packed matrix (the scalar reference the tests compare with). */
void cpu_unpack_q4_row(float *w, const CpuQ4Block *blocks, int n, int K);

/* Rows [n0, n1) of a packed matrix [N][K] rebuilt to the loader's f32 weights, into w[n1 - n0][K]; bit for bit
 * the same values at every SIMD level. */
void cpu_unpack_q4_rows(CpuSimd simd, float *w, const CpuQ4Block *blocks, int n0, int n1, int K);
void cpu_unpack_q8_rows(CpuSimd simd, float *w, const CpuPacked *p, int n0, int n1, int K);

/* cpu_matmul for a matrix held only as codes (q4, else q8): the prefill's product when the backend keeps no
 * f32 copy of the weights. Each thread takes cpu_matmul's slice of output features, rebuilds it into its own
 * tile of f32 weights and makes the same single-threaded BLAS call on it, so the result is cpu_matmul's on
 * the loader's f32 weights bit for bit. A slice wider than CPU_CODE_TILE_MAX floats is cut into tiles of
 * equal rows; that is bit for bit too under OpenBLAS's SkylakeX kernels (AVX-512) for M > 32 (checked by
 * tests/test_cpu_tiles.c), but not under its Haswell / Zen kernels, whose sums depend on where the rows are
 * cut. Every layer matrix of SmolLM2 fits whole at any thread count. tiles: one tile of tile_floats floats for each
 * OpenMP thread, tile_floats >= cpu_code_tile_floats(N, K, omp_get_max_threads()). */
#define CPU_CODE_TILE_MAX ((size_t)1 << 20)
size_t cpu_code_tile_floats(int N, int K, int parts);
void cpu_matmul_codes(CpuSimd simd, float *y, const float *x, const CpuQ4Block *q4, const CpuPacked *q8,
                      const float *bias, int M, int N, int K, int accumulate, float *tiles, size_t tile_floats);

/* One product of a cpu_matmul_q4 call: y[M][N] = x[M][K] . w[N][K]^T (+ bias[N]) (+ the old y). */
typedef struct {
    float *y;
    const CpuQ4Block *w;
    const float *bias;
    int N;
} CpuQ4Job;

/* Per-thread scratch of the 4-bit kernels: this many floats for each OpenMP thread (4K for the exact path's
 * rebuilt weights; the fast path's 16 quantised rows take 5.5K). */
#define CPU_Q4_TILE_FLOATS(K) (6 * (size_t)(K))

/* The products of jobs[n_jobs] with the same x, in one parallel region (threads split all jobs' output
 * features). Each weight block is read and converted to f32 once per call, whatever M is: the B sequences
 * of a batched decode step share it. Results do not depend on M (row r of an M-row call equals the 1-row
 * call on x row r, bit for bit) nor on the thread count; they do depend on simd (summation order).
 * tiles: threads * CPU_Q4_TILE_FLOATS(K) floats, 64-byte aligned. */
void cpu_matmul_q4(CpuSimd simd, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K, int accumulate,
                   float *tiles);

/* cpu_matmul_q4 for one int8-coded matrix (CpuPacked), the same tiles and guarantees. */
void cpu_matmul_q8(CpuSimd simd, float *y, const float *x, const CpuPacked *w, const float *bias, int M, int N, int K,
                   int accumulate, float *tiles);

/* The SwiGLU feed-forward's first half in one parallel region: gate = x . wg^T, up = x . wu^T, then
 * gate = silu(gate) * up ([M][F] each), bit for bit what the separate products and cpu_swiglu give. */
void cpu_ffn_q4(CpuSimd simd, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu, const float *x,
                int M, int K, int F, float *tiles);

/* The share `part` of `parts` of each of the three calls above, for a caller that is already inside a
 * parallel region (one region per decode step); tile is that part's own CPU_Q4_TILE_FLOATS(K) floats. The
 * union of all parts is the whole call, bit for bit. */
void cpu_matmul_q4_part(CpuSimd simd, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K, int accumulate,
                        float *tile, int part, int parts);
void cpu_matmul_q8_part(CpuSimd simd, float *y, const float *x, const CpuPacked *w, const float *bias, int M, int N,
                        int K, int accumulate, float *tile, int part, int parts);
void cpu_ffn_q4_part(CpuSimd simd, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu, const float *x,
                     int M, int K, int F, float *tile, int part, int parts);

/* The opt-in FAST products (KVBENCH_DECODE=fast; engine/cpu_fast.c): rows of x quantised per 32-block to int8
 * and integer dot products with the codes, so NOT the reference arithmetic (within ~1e-2 relative of the exact
 * product; greedy answers may differ). One arithmetic in every kernel (cpu_fast.c states it): every kernel
 * gives the same bits, and row r of an M-row call equals the 1-row call on that row, so a batched fast decode
 * equals B single ones. Each weight block is read once per call for up to 16 rows. Kernels: the portable C
 * (the reference), AVX2 (maddubs, 8 outputs per vector), AVX-512 VNNI (16 outputs per vector), AMX (TDPBSSD
 * tiles of 16 rows x 16 outputs). */
typedef enum { CPU_FAST_SCALAR, CPU_FAST_AVX2, CPU_FAST_VNNI, CPU_FAST_AMX } CpuFastKernel;

/* Whether this CPU (and, for AMX, the kernel: Linux grants the tile state on request) runs kernel k. */
int cpu_fast_kernel_usable(CpuFastKernel k);
/* The best usable kernel at SIMD level simd (VNNI and AMX need AVX-512, the AVX2 kernel AVX2). */
CpuFastKernel cpu_fast_kernel_for(CpuSimd simd);
const char *cpu_fast_kernel_name(CpuFastKernel k);

/* The fast counterparts of cpu_matmul_q4 (at most 4 jobs) and cpu_matmul_q8, with the same tiles, parts and
 * store semantics (bias, accumulate). */
void cpu_matmul_q4_fast(CpuFastKernel kernel, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                        int accumulate, float *tiles);
void cpu_matmul_q8_fast(CpuFastKernel kernel, float *y, const float *x, const CpuPacked *w, const float *bias, int M,
                        int N, int K, int accumulate, float *tiles);
void cpu_matmul_q4_fast_part(CpuFastKernel kernel, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                             int accumulate, float *tile, int part, int parts);
void cpu_matmul_q8_fast_part(CpuFastKernel kernel, float *y, const float *x, const CpuPacked *w, const float *bias,
                             int M, int N, int K, int accumulate, float *tile, int part, int parts);

/* ------------------------------------------------------------------------ binary16 (KVBENCH_CACHE=f16) */

/* IEEE binary16 bits of x rounded to nearest, ties to even (subnormals, overflow to infinity, NaN stays a
 * quiet NaN), and the exact f32 value of h: the portable reference (cpu_f16.c). */
uint16_t cpu_f32_to_f16(float x);
float cpu_f16_to_f32(uint16_t h);
/* n values at a time: AVX-512F or F16C where simd allows, the same bits as the portable converters. */
void cpu_f32_to_f16_rows(CpuSimd simd, uint16_t *dst, const float *src, size_t n);
void cpu_f16_to_f32_rows(CpuSimd simd, float *dst, const uint16_t *src, size_t n);

/* out = x / sqrt(mean(x^2) + eps) * w over one row of n. */
void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* Rotate-half RoPE on one row of n_heads heads of d: pairs (i, i + d/2) rotated by the angle whose
 * cos/sin are given for i < d/2. */
void cpu_rope(float *x, int n_heads, int d, const float *cos_t, const float *sin_t);

/* Softmax of x[0..n) in place. */
void cpu_softmax(float *x, int n);
/* cpu_softmax on 16 lanes where simd is AVX-512 (bit for bit its values for inputs that are not NaN), else
 * cpu_softmax itself (cpu_q4.c). */
void cpu_softmax_simd(CpuSimd simd, float *x, int n);

/* g[i] = silu(g[i]) * u[i]: the SwiGLU gate. */
void cpu_swiglu(float *g, const float *u, size_t n);
/* cpu_swiglu on 16 lanes where simd is AVX-512 (the same operations, each rounded: bit for bit cpu_swiglu's
 * values), else cpu_swiglu itself (cpu_q4.c). */
void cpu_swiglu_simd(CpuSimd simd, float *g, const float *u, size_t n);

/* One query row against n keys: probs[n] receives the softmax of q·k_j * scale, out[d] = sum_j probs_j v_j. */
void cpu_attend_row(float *out, float *probs, const float *q, const float *k, const float *v, int n, int d,
                    float scale);
/* cpu_attend_row for G query heads that share k and v (grouped-query attention): head g's query at q + g*d,
 * its output at out + g*d, its probabilities at probs + g*n. On 16 lanes where simd is AVX-512 and d is a
 * multiple of 16, the heads side by side (bit for bit cpu_attend_row's values for each head, for scores that
 * are not NaN), else cpu_attend_row per head (cpu_q4.c; the decode step's attention). */
void cpu_attend_heads_simd(CpuSimd simd, float *out, float *probs, const float *q, const float *k, const float *v,
                           int n, int d, float scale, int G);
/* A head's keys or values where they are: entries [0, n_shared) are rows shared[j] of base, the rest rows
 * of own (a KvCache view's layout; a plain cache is n_shared 0, own its rows); binary16 when half. */
typedef struct {
    const void *base;
    const int *shared;
    int n_shared;
    const void *own;
    int half;
} CpuRows;
/* Whether cpu_attend_heads_rows runs at this level and head dim (AVX-512, d a multiple of 16); elsewhere the
 * caller copies (and widens) the rows into one f32 block and calls cpu_attend_heads_simd. */
int cpu_attend_direct(CpuSimd simd, int d);
/* cpu_attend_heads_simd on rows read in place (a view's shared rows, binary16 rows widened in registers,
 * exactly): bit for bit cpu_attend_heads_simd on the same rows copied into one f32 block, without the copy.
 * Only where cpu_attend_direct(simd, d), and for n >= 1 (a decoded token always sees its own key). */
void cpu_attend_heads_rows(CpuSimd simd, float *out, float *probs, const float *q, const CpuRows *k,
                           const CpuRows *v, int n, int d, float scale, int G);

/* T query rows (row t at q + t*ldq) against n = n_past + T keys, causal: row t sees keys j <= n_past + t.
 * Two BLAS products through scores[T][n] (the caller's buffer, so a long prefill is tiled into blocks of
 * T rows and never holds an n x n matrix). Output row t at out + t*ldo. Single-threaded: the caller runs
 * one block per thread. The softmax is cpu_softmax_simd's at level simd. */
void cpu_attend_block(CpuSimd simd, float *out, int ldo, const float *q, int ldq, const float *k, const float *v, int T, int n_past,
                      int d, float scale, float *scores);

#endif
