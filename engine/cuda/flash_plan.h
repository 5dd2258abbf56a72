/* flash_plan.h — the shared-memory layout and the per-row arithmetic (causal limits, tile skipping, the running
 * max) of the flash prefill kernel (kernels.cu), in plain C so that tests/test_cuda_flash.c checks them on a
 * machine without a GPU: every tile a WMMA call touches starts on a 256-bit boundary, every leading dimension is
 * a multiple of 16 bytes (8 bf16 or 4 f32), the layout fits sm_90's opt-in shared memory for every head dim the
 * backend accepts (multiples of 16 up to 256), and the tile walk with its online softmax equals a direct one.
 *
 * A block of FA_WARPS warps owns FA_BQ query rows (16 per warp) and walks the keys in tiles of FA_BK. Rows of
 * Q, K, V and S are padded by 16 bytes: unpadded rows of 128 or 256 bytes would put the 8 rows one ldmatrix
 * phase reads in the same banks (an 8-way conflict on every fragment load).
 *
 * A warp's 16 rows of S are its own scratch: P (bf16) overwrites them once the softmax has read S into
 * registers (ld_p = 2 ld_s), and O passes through them FA_BK columns at a time when rows are rescaled and at the
 * end. Without separate P and O regions a block at d = 128 needs 70 KB instead of 112 KB, so three blocks
 * (twelve warps) share a multiprocessor instead of two. */
#ifndef KVBENCH_CUDA_FLASH_PLAN_H
#define KVBENCH_CUDA_FLASH_PLAN_H

#include <stddef.h>

#ifdef __CUDACC__
#define FLASH_FN __host__ __device__ static inline
#else
#define FLASH_FN static inline
#endif

enum {
    FA_BQ = 64,              /* query rows per block */
    FA_BK = 64,              /* keys per tile */
    FA_WARPS = 4,            /* 16 query rows each */
    FA_SMEM_LIMIT = 232448,  /* sm_90's opt-in dynamic shared memory per block (227 KiB) */
    FA_SMEM_PER_SM = 233472, /* sm_90's shared memory per multiprocessor (228 KiB), 1 KiB of it reserved per block */
};

/* The running max of a row moves only when a tile's max passes it by this much (log2 units): exponents stay
 * below 2^FA_SLACK, and most tiles leave the row's max, hence its output, untouched (no rescale pass). */
#define FA_SLACK 8.0f

typedef struct {
    int ld_qkv, ld_s, ld_p;       /* leading dimensions in elements: Q/K/V bf16, S (and O's passes) f32, P bf16 */
    size_t q, k, v, s, p;         /* byte offsets of the tiles (p == s: P overwrites S row by row) */
    size_t m, l, alpha;           /* byte offsets of the per-row running max, sum and last rescale factor */
    size_t total;                 /* bytes */
} FlashLayout;

FLASH_FN FlashLayout flash_layout(int d) {
    FlashLayout f;
    f.ld_qkv = d + 8;
    f.ld_s = FA_BK + 4;
    f.ld_p = 2 * f.ld_s;
    size_t at = 0;
    f.q = at, at += (size_t)FA_BQ * f.ld_qkv * 2;
    f.k = at, at += (size_t)FA_BK * f.ld_qkv * 2;
    f.v = at, at += (size_t)FA_BK * f.ld_qkv * 2;
    f.s = f.p = at, at += (size_t)FA_BQ * f.ld_s * 4;
    f.m = at, at += (size_t)FA_BQ * 4;
    f.l = at, at += (size_t)FA_BQ * 4;
    f.alpha = at, at += (size_t)FA_BQ * 4;
    f.total = at;
    return f;
}

/* Query tile of block x among n_tiles: later tiles see more keys, so they get the low block indices, which
 * start first, and the short tiles fill the tail of the grid. */
FLASH_FN int flash_tile(int block_x, int n_tiles) { return n_tiles - 1 - block_x; }

/* Keys visible to row `row` of a query tile starting at chunk token q0 with nq valid rows, over a cache that held
 * `len` entries before the chunk (0 for the padding rows past nq). */
FLASH_FN int flash_limit(int len, int q0, int nq, int row) { return row < nq ? len + q0 + row + 1 : 0; }

/* The last key any of the 16 rows from r0 may see, -1 when all are padding: key tiles past it are skipped. */
FLASH_FN int flash_last_key(int len, int q0, int nq, int r0) {
    return r0 < nq ? len + q0 + (r0 + 15 < nq - 1 ? r0 + 15 : nq - 1) : -1;
}

/* The running max after a tile whose largest visible logit is tile_max (-inf when none). */
FLASH_FN float flash_next_max(float m_old, float tile_max) { return tile_max > m_old + FA_SLACK ? tile_max : m_old; }

#endif
