/* ops.h — the CPU backend's operations over the kernel table (products.c, pack.c): threads split each
 * product's output features and call the table's entries, the large products go to OpenBLAS (on tiles of
 * f32 weights rebuilt from their codes where the backend holds only codes), and the descriptor of a matrix that
 * chooses them (CpuMatrix). Used by intake.c, forward.c and the tests.
 * Shape legend: M rows of x, N outputs, K inputs, T query rows, n keys, d head dim. */
#ifndef KVBENCH_CPU_OPS_H
#define KVBENCH_CPU_OPS_H

#include "kernels.h"

/* y[M][N] = x[M][K] · w[N][K]^T (+ bias[N] when non-NULL) (+ the old y when accumulate): Hugging Face's
 * y = W x for M rows at once, so each weight matrix is read once per call whatever M is. Threads split the
 * N output features; each calls a single-threaded BLAS on its slice. */
void cpu_matmul(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int accumulate);
/* The slice `part` of `parts` of cpu_matmul (its whole call is the union of parts = omp_get_max_threads()
 * slices), for a caller already inside a parallel region. */
void cpu_matmul_part(float *y, const float *x, const float *w, const float *bias, int M, int N, int K, int accumulate,
                     int part, int parts);

/* A matrix held as codes: 4-bit blocks, else int8 codes, else a ggml type's blocks (the first non-NULL). */
typedef struct {
    const CpuQ4Block *q4;
    const CpuPacked *q8;
    const CpuBlocks *blocks;
} CpuCodes;

/* Rows [n0, n1) of a matrix held as codes rebuilt to the loader's f32 weights, into w[n1 - n0][K]: the same bits
 * at every level. */
void cpu_rebuild_rows(const CpuKernels *k, float *w, const CpuCodes *c, int n0, int n1, int K);

/* cpu_matmul for a matrix held only as codes: each thread takes cpu_matmul's slice of output
 * features, rebuilds it into its own tile of f32 weights and makes the same single-threaded BLAS call on it,
 * so the result is cpu_matmul's on the loader's f32 weights bit for bit. A slice wider than CPU_CODE_TILE_MAX
 * floats is cut into tiles of equal rows; that is bit for bit too under OpenBLAS's SkylakeX kernels
 * (AVX-512) for M > 32 (tests/test_cpu_tiles.c), but not under its Haswell / Zen kernels, whose sums depend on
 * where the rows are cut. tiles: one tile of tile_floats floats for each OpenMP thread,
 * tile_floats >= cpu_code_tile_floats(N, K, omp_get_max_threads()). */
#define CPU_CODE_TILE_MAX ((size_t)1 << 20)
size_t cpu_code_tile_floats(int N, int K, int parts);
/* Where a BLAS call on a tile of a ggml type's blocks would sum as the table's blas_order does (2 to
 * CPU_BLAS_ORDER_MAX_X_ROWS rows of x, past OpenBLAS's small-matrix kernels), the tile is not rebuilt whole:
 * blas_order sums a few rebuilt rows at a time, the same bits without BLAS's own copy of the weights. That holds only where
 * cpu_blas_order_agrees: blas_order against this machine's cblas_sgemm on shapes that take each of its
 * K-block rules and lane counts, bit for bit, with BLAS as the backend runs it (one thread per call: OpenBLAS's
 * threaded driver cuts K otherwise). The backend asks once when it opens and drops the entry otherwise
 * (OpenBLAS's other kernels cut K or sum otherwise). */
int cpu_blas_order_agrees(const CpuKernels *k);
/* One row of x on a ggml type's blocks with a gemv_order entry: those rows of a slice below its last multiple of 4
 * are summed by the entry, each block rebuilt in registers, the rest as before (rebuilt, then BLAS). That holds only
 * where cpu_gemv_order_agrees: the order (cpu_gemv_order_scalar) against this machine's cblas_sgemv at one thread,
 * bit for bit, on shapes that take one K block, a block and a rest, and two blocks and a rest. The backend asks
 * once when it opens and drops the entries otherwise. */
int cpu_gemv_order_agrees(void);
void cpu_matmul_codes(const CpuKernels *k, float *y, const float *x, const CpuCodes *c, const float *bias, int M, int N,
                      int K, int accumulate, float *tiles, size_t tile_floats);
/* Its slice `part` of `parts`, on that part's own tile. */
void cpu_matmul_codes_part(const CpuKernels *k, float *y, const float *x, const CpuCodes *c, const float *bias, int M,
                           int N, int K, int accumulate, float *tile, int part, int parts);

/* One product of a cpu_matmul_q4 call: y[M][N] = x[M][K] . w[N][K]^T (+ bias[N]) (+ the old y). */
typedef struct {
    float *y;
    const CpuQ4Block *w;
    const float *bias;
    int N;
} CpuQ4Job;

/* The products of jobs[n_jobs] with the same x from the codes, in one parallel region (threads split all
 * jobs' output features) with the table's q4_rows / q8_rows: each weight block is read and converted to f32
 * once per call whatever M is. Results do not depend on M nor on the thread count; they do depend on the
 * level (summation order). tiles: threads * CPU_Q4_TILE_FLOATS(K) floats, 64-byte aligned. */
void cpu_matmul_q4(const CpuKernels *k, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                   int accumulate, float *tiles);
void cpu_matmul_q8(const CpuKernels *k, float *y, const float *x, const CpuPacked *w, const float *bias, int M, int N,
                   int K, int accumulate, float *tiles);
/* The SwiGLU feed-forward's first half in one parallel region: gate = x . wg^T, up = x . wu^T, then
 * gate = silu(gate) * up ([M][F] each), bit for bit what the separate products and the table's swiglu give. */
void cpu_ffn_q4(const CpuKernels *k, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu,
                const float *x, int M, int K, int F, float *tiles);
/* The share `part` of `parts` of each call above, for a caller already inside a parallel region (one region
 * per decode step); tile is that part's own CPU_Q4_TILE_FLOATS(K) floats. The union of all parts is the whole
 * call, bit for bit. */
void cpu_matmul_q4_part(const CpuKernels *k, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                        int accumulate, float *tile, int part, int parts);
void cpu_matmul_q8_part(const CpuKernels *k, float *y, const float *x, const CpuPacked *w, const float *bias, int M,
                        int N, int K, int accumulate, float *tile, int part, int parts);
void cpu_ffn_q4_part(const CpuKernels *k, float *gate, float *up, const CpuQ4Block *wg, const CpuQ4Block *wu,
                     const float *x, int M, int K, int F, float *tile, int part, int parts);

/* The fast counterparts of cpu_matmul_q4_part (at most 4 jobs), cpu_matmul_q8_part and, for a matrix of a source's
 * blocks of a type cpu_fast_block_type takes, cpu_matmul_codes_part on fast kernel f (the
 * table's fast_many or fast_few), with the same tiles, parts and store semantics (bias, accumulate). Each weight
 * block is read once per call for up to CPU_FAST_ROWS rows. */
void cpu_matmul_q4_fast_part(const CpuFastKernels *f, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                             int accumulate, float *tile, int part, int parts);
void cpu_matmul_q8_fast_part(const CpuFastKernels *f, float *y, const float *x, const CpuPacked *w, const float *bias,
                             int M, int N, int K, int accumulate, float *tile, int part, int parts);
void cpu_matmul_blocks_fast_part(const CpuFastKernels *f, float *y, const float *x, const CpuBlocks *w,
                                 const float *bias, int M, int N, int K, int accumulate, float *tile, int part,
                                 int parts);

/* ------------------------------------------------------------------------------- a matrix and its products */

/* A weight matrix as the forward multiplies it: its form and the product for each kind of call, chosen once
 * when the backend opens (cpu_matrix_init), as ggml's type traits give each type its dot product. The forward
 * then calls products through the descriptor and never asks what a matrix is held as. */
typedef enum { CPU_FORM_F32, CPU_FORM_Q4, CPU_FORM_Q8, CPU_FORM_BLOCKS } CpuForm;

/* The kinds of product: the exact code kernels for a few rows (CPU_FEW_ROWS at most: read each weight once for
 * all rows), the opt-in fast products (int8 activations), and the exact BLAS product for any rows (on the f32
 * weights, else on tiles rebuilt from the codes: the same bits as on the f32 weights). */
typedef enum { CPU_PRODUCT_FEW, CPU_PRODUCT_FAST, CPU_PRODUCT_MANY, CPU_PRODUCTS } CpuProductKind;
#define CPU_FEW_ROWS 32

/* One thread's scratch for a product: `few` CPU_Q4_TILE_FLOATS(K) floats, 64-byte aligned (the code kernels,
 * the fast ones); `many` the f32 weights a BLAS product on codes rebuilds (cpu_code_tile_floats). */
typedef struct {
    float *few;
    float *many;
} CpuTile;

typedef struct CpuMatrix CpuMatrix;

/* One output of a product: y[M][w->N] = x[M][w->K] . W^T (+ bias[N] when non-NULL) (+ the old y when
 * accumulate). */
typedef struct {
    float *y;
    const CpuMatrix *w;
    const float *bias;
} CpuProductJob;

/* The share `part` of `parts` of the products of jobs[n_jobs] (at most 3, sharing x, every w with this
 * product), for a caller inside a parallel region: the union of the parts is the whole product, and its bits
 * are those of the jobs one by one. */
typedef void CpuProductFn(const CpuKernels *k, const CpuProductJob *jobs, int n_jobs, const float *x, int M,
                          int accumulate, const CpuTile *tile, int part, int parts);
/* The share `part` of the SwiGLU feed-forward's first half, gate = silu(x . wg^T) * (x . wu^T) into gate,
 * up = x . wu^T ([M][F] each), with no barrier between the products and the gate (cpu_ffn_q4_part). */
typedef void CpuFfnFn(const CpuKernels *k, float *gate, float *up, const CpuMatrix *wg, const CpuMatrix *wu,
                      const float *x, int M, const CpuTile *tile, int part, int parts);

struct CpuMatrix {
    CpuForm form;
    int N, K;
    const float *f32;  /* the f32 weights where they are kept (beside codes where the Model's arena holds them) */
    CpuCodes codes;    /* the codes (all NULL on an f32 matrix) */
    CpuProductFn *product[CPU_PRODUCTS]; /* NULL where the form has no such product (FEW, FAST: f32, blocks) */
    CpuFfnFn *ffn[CPU_PRODUCTS];         /* the fused feed-forward for w as the gate, where there is one */
};

/* Describes the matrix [N][K] held as f32 (when non-NULL) and/or codes: its form (the codes' when it has some)
 * and its products. */
void cpu_matrix_init(CpuMatrix *w, int N, int K, const float *f32, CpuCodes codes);

/* G query heads that share k and v (grouped-query attention): head g's query at q + g*d, its output at
 * out + g*d, its probabilities at probs + g*n; bit for bit cpu_attend_row per head (for scores that are not
 * NaN) with the table's attend_rows where it serves d, else cpu_attend_row itself. */
void cpu_attend_heads(const CpuKernels *k, float *out, float *probs, const float *q, const float *kk, const float *v,
                      int n, int d, float scale, int G);
/* Whether the table reads rows in place at head dim d (cpu_attend_heads_rows); elsewhere the caller copies
 * (and widens) the rows into one f32 block and calls cpu_attend_heads. */
int cpu_attend_direct(const CpuKernels *k, int d);
/* cpu_attend_heads on rows read where they are (a view's shared rows, binary16 rows widened exactly), only
 * where cpu_attend_direct(k, d), for n >= 1 (a decoded token always sees its own key). */
void cpu_attend_heads_rows(const CpuKernels *k, float *out, float *probs, const float *q, const CpuRows *kr,
                           const CpuRows *vr, int n, int d, float scale, int G);
/* T query rows (row t at q + t*ldq) against n = n_past + T keys, causal: row t sees keys j <= n_past + t.
 * Two BLAS products through scores[T][n] (the caller's buffer), the table's softmax between. Output row t at
 * out + t*ldo. Single-threaded: the caller runs one block per thread. */
void cpu_attend_block(const CpuKernels *k, float *out, int ldo, const float *q, int ldq, const float *kk,
                      const float *v, int T, int n_past, int d, float scale, float *scores);
/* The column sums of the attention of T query rows of H heads (head h's row t at q + t*ldq + h*d, seeing its
 * kv-head's keys[h / (H/K)] j <= n_past + t): the probabilities of cpu_attend_block on tiles of `tile` rows from the
 * first row (the forward's blocked attention: the same bits), added to sums[h*ld_sums + j] in double. Columns
 * [n_past, n_past + T), the keys of these rows, start at 0. Parallel over heads, each head's rows added in order,
 * so the sums do not depend on the thread count; scores: each thread's tile * (n_past + T) floats, score_stride
 * apart. */
void cpu_attention_sums(const CpuKernels *k, double *sums, int ld_sums, const float *q, int ldq,
                        const float *const *keys, int H, int K, int T, int n_past, int d, float scale, int tile,
                        float *scores, size_t score_stride);
/* The pre-RoPE query statistics of a prefill (ObserveHook.query_stats): rows t of q (head h's at q + t*ldq + h*d,
 * position pos0 + t) from position `from` on added to stats[h*(d + d*d)]: the sum, then the upper triangle of the
 * sum of outer products (a chunk at pos0 0 starts them at 0); on the prefill's `last` chunk they become the mean and
 * the covariance (centred, over the count, symmetric). In double, parallel over heads, each head's rows added in
 * order, so the statistics do not depend on the thread count. */
void cpu_query_stats(double *stats, const float *q, int ldq, int H, int d, int T, int pos0, int from, int last);

#endif
