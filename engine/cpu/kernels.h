/* kernels.h — the CPU backend's kernel layer: weight forms, the portable reference kernels, and ONE table of
 * kernels (CpuKernels) filled once when the backend opens, after a single probe of the CPU's features.
 *
 * Layers (no file calls a file above it):
 *   portable.c                 the readable reference of every kernel (plain C; what the tests hold the rest to)
 *   avx2.c, avx512.c, vnni.c   the same operations per instruction set (the way ggml splits its CPU backend)
 *   table.c                    the probe and the table: which entry of which file serves each operation
 *   products.c                 threads over the table's entries: products, rebuilt tiles, attention blocks,
 *                              and each matrix's descriptor (ops.h CpuMatrix: its form and its products)
 *   intake.c                   the weights streamed in at open, one form of each matrix kept (intake.h)
 *   forward.c                  the backend (one forward for every number of tokens and sequences)
 *   reference.c                a plain reference forward (llama2.c style) on f32 weights, the tests' oracle
 * Nothing outside table.c names an instruction set: callers take the table's entries.
 * f32 arithmetic throughout. Shape legend: M rows of x, N outputs, K inputs, n keys, d head dim. */
#ifndef KVBENCH_CPU_KERNELS_H
#define KVBENCH_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../err.h"
#include "../half.h"

/* ------------------------------------------------------------------------------------------ weight forms */

#define CPU_PACK_BLOCK 32

/* A weight matrix [N][K] re-encoded without loss as blocks of 32 int8 codes: w = (q * scale) + offset in
 * f32, exactly the f32 value the loader produced (a Q8_0 GGUF's weights: 1.25 bytes per weight). */
typedef struct {
    int8_t *q;      /* [N][K] */
    float *scale;   /* [N][K/32] */
    float *offset;  /* [N][K/32] */
} CpuPacked;

/* One block of 32 weights that are exactly 4-bit codes (a GGUF Q4_1 or Q4_0 matrix): weight i is
 * code_i * scale + offset in f32 (scale, offset f16 bits; code i in the low nibble of codes[i] for i < 16,
 * code i in the high nibble of codes[i - 16] otherwise, as GGUF stores them). 0.625 bytes per weight. */
typedef struct {
    uint16_t scale, offset;
    uint8_t codes[16];
} CpuQ4Block;

/* A matrix [N][K] kept as its source's blocks of a quantised ggml type (a GGUF's Q4_K, Q6_K, Q5_0, ...: every
 * type whose ggml_type_traits has a dequant), N rows of row_blocks blocks, row_bytes each: ~ the file's bytes
 * per weight. Products rebuild rows of it to f32 with the table's rebuild[type] (the same values the loader's
 * dequantiser gives) and multiply those exactly as f32 weights. */
typedef struct {
    uint8_t *data;
    int type;
    size_t row_bytes, row_blocks;
} CpuBlocks;

/* ggml type codes the table has a rebuild entry for (gguf.h's GgmlType codes are below it). */
#define CPU_GGML_TYPES 64

/* Fill blocks / p (storage from the caller) and return 1 when every block of w[N][K] is exactly such a
 * block, else 0. K must be a multiple of 32. */
int cpu_pack_q4(CpuQ4Block *blocks, const float *w, int N, int K);
int cpu_pack_exact(CpuPacked *p, const float *w, int N, int K);

/* A head's keys or values where they are: entries [0, n_shared) are rows shared[j] of base, the rest rows
 * of own (a KvCache view's layout; a plain cache is n_shared 0, own its rows); binary16 when half. */
typedef struct {
    const void *base;
    const int *shared;
    int n_shared;
    const void *own;
    int half;
} CpuRows;

/* Output features per register tile of the exact code products (and per unit of work between threads). */
#define CPU_Q4_GROUP 4

static inline void cpu_store_out(float *y, float total, const float *bias, int n, int accumulate) {
    if (bias) total += bias[n];
    *y = accumulate ? *y + total : total;
}

/* --------------------------------------------------------------------------- the fast products' operands */

/* The opt-in FAST products (decode = fast): rows of x quantised per 32-block to int8 and integer dot
 * products with the codes. One arithmetic in every kernel (portable.c states it), so every kernel gives the
 * same bits and row r of an M-row call equals the 1-row call on that row. */
#define CPU_FAST_ROWS 16  /* rows of x per pass over the weights */
#define CPU_FAST_GROUP 16 /* output features per unit of work between threads */

/* Up to CPU_FAST_ROWS quantised rows, in the caller's tile: xq[CPU_FAST_ROWS][K], then per block b the rows'
 * values side by side (d[b][CPU_FAST_ROWS], ...), so a kernel can broadcast one or load all. */
typedef struct {
    int8_t *xq;
    float *d, *xo; /* d_b = max|x| / 127; d_b * s_b */
    int32_t *s;    /* s_b = sum(xq) of the block */
    int32_t *s16;  /* the sum of the block's first 16 xq */
    int K, rows;
} CpuFastX;

/* The weights of one fast product: 4-bit blocks, int8 codes, or the source's blocks of a ggml type that
 * cpu_fast_block_type takes. */
typedef struct {
    float *y;
    const CpuQ4Block *q4;
    const CpuPacked *q8;
    const float *bias;
    int N;
    const CpuBlocks *blocks;
} CpuFastJob;

/* One block of 32 weights of a matrix kept as its source's blocks, as the fast products take it: integer codes,
 * the integer scales of its two halves, and an f32 scale and offset, such that weight i is
 * fl(fl(fl(w * sub[i / 16]) * code[i]) + o), the loader's f32 value (sub 1 where the type has one scale per 32;
 * o 0 where it has no offset, where a zero weight may then read +0 for the dequantiser's -0). */
typedef struct {
    int8_t code[32];
    int32_t sub[2];
    float w, o;
} CpuFastBlock;
/* Whether the fast products take blocks of ggml type `type`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and
 * Q6_K (one scale and offset per 32 weights, or Q6_K's two integer scales per 32 under one f32 scale). */
int cpu_fast_block_type(int type);
/* Block b (weights 32b .. 32b + 31) of one row of such blocks (row: its first byte). */
void cpu_fast_block(int type, const uint8_t *row, int b, CpuFastBlock *out);

/* --------------------------------------------------------------------------------------- the kernel table */

/* Outputs [n0, n1) of one matrix for all M rows: y[m*ldy + n] = x_m . w_n (+ bias[n]) (+ the old value).
 * Every (output, row) pair is one accumulator chain over K in the same order whatever M, so a batched
 * decode step equals B single ones bit for bit; the order differs between instruction sets. tile: scratch of
 * CPU_Q4_TILE_FLOATS(K) floats, 64-byte aligned. */
typedef void CpuQ4RowsFn(float *y, int ldy, const float *x, int M, int K, const CpuQ4Block *w, const float *bias,
                         int n0, int n1, int accumulate, float *tile);
typedef void CpuQ8RowsFn(float *y, int ldy, const float *x, int M, int K, const CpuPacked *w, const float *bias,
                         int n0, int n1, int accumulate, float *tile);
#define CPU_Q4_TILE_FLOATS(K) (6 * (size_t)(K))
/* n_blocks consecutive blocks rebuilt to the loader's f32 weights (32 floats each), the same bits at every
 * level. */
typedef void CpuQ4RebuildFn(float *w, const CpuQ4Block *blocks, size_t n_blocks);
typedef void CpuQ8RebuildFn(float *w, const CpuPacked *p, size_t b0, size_t n_blocks);
/* n_blocks blocks of a ggml type at src rebuilt to f32 at dst: the type's dequantiser (GgmlDequantFn), or an
 * instruction-set version of it with the same bits. */
typedef void CpuBlockRebuildFn(const uint8_t *src, float *dst, size_t n_blocks);
/* The sums of OpenBLAS's SkylakeX sgemm, made from weights rebuilt a few rows at a time (no tile of f32 weights
 * for BLAS to copy again): y[m*ldy + n] += x_m . w_n for m < M and n < rows, where each sum is taken as that
 * library's level-3 driver and kernel take it: K cut into blocks (cpu_blas_k_block), one fused multiply-add chain
 * per block from zero in ascending k, each block's chain added to y in block order. With y first set as
 * the BLAS call's beta sets it, this is cblas_sgemm's result bit for bit wherever products.c's probe finds it so
 * (cpu_blas_order_agrees). xt: x transposed, [K][ldx], ldx = M rounded up to 16 (at most CPU_BLAS_ORDER_MAX_X_ROWS),
 * lanes from M to ldx zero; w: rows [rows][K]. */
typedef void CpuBlasOrderFn(float *y, int ldy, const float *xt, int ldx, int M, int K, const float *w, int rows);
#define CPU_BLAS_ORDER_MAX_X_ROWS 64
/* The length of the K block that starts at k0 (OpenBLAS's driver: blocks of 320 while at least 640 remain;
 * between 320 and 640 left, half of them rounded up to 16; then the rest). */
static inline int cpu_blas_k_block(int K, int k0) {
    int left = K - k0;
    return left >= 2 * 320 ? 320 : left > 320 ? (left / 2 + 15) / 16 * 16 : left;
}
/* The sums of OpenBLAS's sgemv (y = W x, W [rows][K] row-major, one BLAS thread) for the rows of a call below
 * its last multiple of 4, made from a ggml type's blocks rebuilt in registers to the table's rebuild bits (no
 * f32 row in memory): y[r] += w_r . x for r < rows, each sum taken as that library's transposed kernel takes
 * it: K cut into blocks of CPU_GEMV_K_BLOCK; in each block eight fused multiply-add chains from zero (chain j
 * takes the k with k mod 8 = j, in ascending k), combined as ((c0 + c4) + (c1 + c5)) + ((c2 + c6) + (c3 + c7))
 * and added to y in block order. With y first set as the call's beta sets it, cblas_sgemv's result bit for bit
 * wherever products.c's probe finds it so (cpu_gemv_order_agrees; the call's last 1 to 3 rows it sums otherwise).
 * w: the rows' blocks, row_bytes apart; K a multiple of 256. */
typedef void CpuGemvOrderFn(float *y, const float *x, const uint8_t *w, size_t row_bytes, int rows, int K);
#define CPU_GEMV_K_BLOCK 4096
/* binary16 <-> f32 rows (round to nearest even; the same bits as cpu_f32_to_f16 / kv_f16_to_f32). */
typedef void CpuToF16Fn(uint16_t *dst, const float *src, size_t n);
typedef void CpuToF32Fn(float *dst, const uint16_t *src, size_t n);
/* G query heads sharing keys and values, read where they are (CpuRows): bit for bit cpu_attend_row per head
 * on the same rows copied into one f32 block. n >= 1. */
typedef void CpuAttendRowsFn(float *out, float *probs, const float *q, const CpuRows *k, const CpuRows *v, int n,
                             int d, float scale, int G);

/* A fast kernel: quantise row m of x, the products of outputs [n0, n1) (at most CPU_FAST_GROUP) for all
 * x->rows rows, and the state a kernel holds over a call (AMX's tile configuration; NULL when none). */
typedef void CpuFastGroupFn(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);
typedef struct {
    const char *name;
    void (*quantize)(CpuFastX *x, int m, const float *row);
    CpuFastGroupFn *group;                   /* 4-bit blocks and int8 codes */
    CpuFastGroupFn *blocks[CPU_GGML_TYPES]; /* a source's blocks, per ggml type; NULL where cpu_fast_block_type
                                             * refuses the type */
    void (*begin)(void);
    void (*end)(void);
} CpuFastKernels;

/* Instruction-set levels of the exact kernels (the name a request gives: scalar | avx2 | avx512), and the
 * fast kernels (scalar | avx2 | vnni | amx). */
typedef enum { CPU_SIMD_SCALAR, CPU_SIMD_AVX2, CPU_SIMD_AVX512, CPU_SIMD_LEVELS } CpuSimd;
typedef enum { CPU_FAST_SCALAR, CPU_FAST_AVX2, CPU_FAST_VNNI, CPU_FAST_AMX, CPU_FAST_KERNELS } CpuFastKernel;

typedef struct {
    CpuSimd simd;          /* level of the exact entries below */
    CpuSimd simd_auto;     /* the level an empty request picks on this CPU */
    CpuFastKernel fast;    /* kernel of fast_many */
    const char *simd_name;
    CpuQ4RowsFn *q4_rows;
    CpuQ8RowsFn *q8_rows;
    CpuQ4RebuildFn *q4_rebuild;
    CpuQ8RebuildFn *q8_rebuild;
    CpuBlockRebuildFn *rebuild[CPU_GGML_TYPES]; /* per ggml type; NULL for a type without a dequantiser */
    CpuBlasOrderFn *blas_order;                    /* NULL at levels without a vector one, or where the probe
                                                    * finds this machine's BLAS sums otherwise */
    CpuGemvOrderFn *gemv_order[CPU_GGML_TYPES]; /* per ggml type; NULL for a type without one, at levels
                                                    * without them, or where the probe finds sgemv's sums otherwise */
    CpuToF16Fn *to_f16;
    CpuToF32Fn *to_f32;
    void (*softmax)(float *x, int n);              /* bit for bit cpu_softmax for inputs that are not NaN */
    void (*swiglu)(float *g, const float *u, size_t n); /* bit for bit cpu_swiglu */
    CpuAttendRowsFn *attend_rows;                  /* NULL at levels without one */
    int attend_multiple;                           /* attend_rows needs d a multiple of this */
    CpuFastKernels fast_many;                      /* fast products of 8 rows and more */
    CpuFastKernels fast_few;                       /* fewer rows (AMX's tiles pay off from about 8) */
} CpuKernels;

/* Probes the CPU once (the first call; later calls reuse the answer) and fills k for the level `simd`
 * (NULL or "" the best this CPU has) and the fast kernel `fast` (NULL or "" the best at that level). A
 * named level or kernel this CPU lacks, or an unknown name, fails with a message saying what is supported. */
int cpu_kernels_init(CpuKernels *k, const char *simd, const char *fast, KvErr *err);
const char *cpu_simd_name(CpuSimd simd);
const char *cpu_fast_kernel_name(CpuFastKernel k);
/* Whether this CPU (and, for AMX, the kernel: Linux grants the tile state on request) runs fast kernel k. */
int cpu_fast_kernel_usable(CpuFastKernel k);

/* ------------------------------------------------------------------------------ portable reference kernels */

/* out = x / sqrt(mean(x^2) + eps) * w over one row of n. */
void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* Rotate-half RoPE on one row of n_heads heads of d: pairs (i, i + d/2) by the angles given for i < d/2. */
void cpu_rope(float *x, int n_heads, int d, const float *cos_t, const float *sin_t);
/* Softmax of x[0..n) in place (exp: a Cody–Waite reduction and a degree-6 polynomial, relative error ~2e-7). */
void cpu_softmax(float *x, int n);
/* g[i] = silu(g[i]) * u[i]: the SwiGLU gate. */
void cpu_swiglu(float *g, const float *u, size_t n);
/* One query row against n keys: probs[n] receives the softmax of q·k_j * scale, out[d] = sum_j probs_j v_j. */
void cpu_attend_row(float *out, float *probs, const float *q, const float *k, const float *v, int n, int d,
                    float scale);
/* IEEE binary16 bits of x rounded to nearest, ties to even (subnormals, overflow to infinity, NaN stays a
 * quiet NaN); the way back, exact, is kv_f16_to_f32 (../half.h). */
uint16_t cpu_f32_to_f16(float x);
/* The order of CpuGemvOrderFn on f32 rows w[rows][K] (K a multiple of 8), written out: what the probe holds
 * this machine's sgemv to and the tests hold the table's entries to. */
void cpu_gemv_order_scalar(float *y, const float *x, const float *w, int rows, int K);
/* The f32 weight row n of a 4-bit packed matrix. */
void cpu_unpack_q4_row(float *w, const CpuQ4Block *blocks, int n, int K);

#endif
