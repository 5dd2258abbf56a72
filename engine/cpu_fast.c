/* cpu_fast.c — the opt-in FAST products of a decode step (KVBENCH_DECODE=fast; cpu_internal.h): activations
 * quantised per 32-block to int8, integer dot products with the weights' codes (4-bit Q4 blocks, or the
 * int8 codes of CpuPacked), for M rows at once.
 *
 * One arithmetic for every kernel and every M. Row x (one sequence's activations) is quantised per block b
 * of 32: d_b = max|x| / 127, xq = rint(x * (127 / max|x|)), s_b = sum(xq) (integers), xo_b = d_b * s_b.
 * For output n with block scale w_b, offset o_b (weight = code * w_b + o_b) and the exact int32 dot
 * dot_b = sum(code * xq):
 *     acc = 0;  for b in order:  acc = fma(fl(float(dot_b) * w_b), d_b, acc);  acc = fma(o_b, xo_b, acc)
 * then y = acc (+ bias) (+ the old y) as the exact path stores. Every (row, output) is its own chain of
 * rounded f32 steps in a fixed order, and the integer dots are exact whichever instructions sum them, so the
 * portable C, AVX2 (8 outputs in the lanes of a vector), AVX-512 VNNI (16 outputs) and AMX (16 rows x 16
 * outputs per tile product) kernels give the same bits, and row r of an M-row call equals the 1-row call on that row: a
 * batched fast decode equals B single fast decodes.
 *
 * Each thread takes a share of the outputs in groups of 16 and, per pass of up to 16 rows, reads each weight
 * block of its share once for all those rows. */
#include "cpu_internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define FAST_X86 1
#else
#define FAST_X86 0
#endif

#define FAST_ROWS 16  /* rows of x per pass over the weights */
#define FAST_GROUP 16 /* output features per vector, and per unit of work between threads */

/* Up to FAST_ROWS quantised rows, in the caller's tile: xq[FAST_ROWS][K], then per block b the rows'
 * values side by side (d[b][FAST_ROWS], ...), so a kernel can broadcast one or load all. */
typedef struct {
    int8_t *xq;
    float *d, *xo; /* d_b; d_b * s_b */
    int32_t *s;    /* s_b = sum(xq) of the block */
    int K, rows;
} FastX;

static FastX fast_x(float *tile, int K) {
    char *p = (char *)tile;
    size_t sums = sizeof(float) * FAST_ROWS * (size_t)(K / 32);
    FastX x = {(int8_t *)p, (float *)(p + (size_t)FAST_ROWS * K), (float *)(p + (size_t)FAST_ROWS * K + sums),
               (int32_t *)(p + (size_t)FAST_ROWS * K + 2 * sums), K, 0};
    return x;
}

static void quantize_row_scalar(FastX *x, int m, const float *row) {
    for (int b = 0; b < x->K / 32; b++) {
        const float *v = row + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)rintf(v[i] * inv);
            x->xq[(size_t)m * x->K + b * 32 + i] = (int8_t)q;
            sum += q;
        }
        x->d[b * FAST_ROWS + m] = amax / 127.0f;
        x->xo[b * FAST_ROWS + m] = (amax / 127.0f) * (float)sum;
        x->s[b * FAST_ROWS + m] = sum;
    }
}

/* The weights of one product: 4-bit blocks or int8 codes. */
typedef struct {
    float *y;
    const CpuQ4Block *q4;
    const CpuPacked *q8;
    const float *bias;
    int N;
} FastJob;

static inline void fast_store(float *y, float total, const float *bias, int n, int accumulate) {
    if (bias) total += bias[n];
    *y = accumulate ? *y + total : total;
}

/* The reference: outputs [n0, n1) for all rows of x, one scalar chain each. Rows of y start at y_row0. */
static void group_scalar(const FastJob *job, const FastX *x, int y_row0, int n0, int n1, int accumulate) {
    int K = x->K, per_row = K / 32;
    for (int m = 0; m < x->rows; m++)
        for (int n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int b = 0; b < per_row; b++) {
                const int8_t *xq = x->xq + (size_t)m * K + b * 32;
                int32_t dot = 0;
                float w, o;
                if (job->q4) {
                    const CpuQ4Block *blk = job->q4 + (size_t)n * per_row + b;
                    for (int i = 0; i < 16; i++) dot += (blk->codes[i] & 15) * xq[i] + (blk->codes[i] >> 4) * xq[i + 16];
                    w = cpu_f16_to_f32(blk->scale);
                    o = cpu_f16_to_f32(blk->offset);
                } else {
                    const int8_t *q = job->q8->q + (size_t)n * K + b * 32;
                    for (int i = 0; i < 32; i++) dot += q[i] * xq[i];
                    w = job->q8->scale[(size_t)n * per_row + b];
                    o = job->q8->offset[(size_t)n * per_row + b];
                }
                acc = fmaf((float)dot * w, x->d[b * FAST_ROWS + m], acc);
                acc = fmaf(o, x->xo[b * FAST_ROWS + m], acc);
            }
            fast_store(job->y + (size_t)(y_row0 + m) * job->N + n, acc, job->bias, n, accumulate);
        }
}

#if FAST_X86
#define FAST_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define FAST_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))

/* quantize_row_scalar with 16 lanes: the same operations (max is exact in any order; the conversion rounds
 * to nearest even as rintf does), so the same bytes and floats. */
static FAST_512 void quantize_row_avx512(FastX *x, int m, const float *row) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    for (int b = 0; b < x->K / 32; b++) {
        __m512 a = _mm512_loadu_ps(row + b * 32), c = _mm512_loadu_ps(row + b * 32 + 16);
        __m512 aa = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), abs_mask));
        __m512 ca = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(c), abs_mask));
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(aa, ca));
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
        __m512i qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, _mm512_set1_ps(inv)));
        int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
        _mm_storeu_si128((__m128i *)(x->xq + (size_t)m * x->K + b * 32), _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128((__m128i *)(x->xq + (size_t)m * x->K + b * 32 + 16), _mm512_cvtepi32_epi8(qc));
        x->d[b * FAST_ROWS + m] = amax / 127.0f;
        x->xo[b * FAST_ROWS + m] = (amax / 127.0f) * (float)sum;
        x->s[b * FAST_ROWS + m] = sum;
    }
}

/* Four vectors z[g] whose 128-bit lane L holds 4 dwords of output 4L + g, to r[j] = dword j of outputs 0..15
 * in order (a 4x4 transpose within each lane). */
static FAST_512 inline void transpose_lanes(const __m512i z[4], __m512i r[4]) {
    __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    r[0] = _mm512_unpacklo_epi64(t0, t2);
    r[1] = _mm512_unpackhi_epi64(t0, t2);
    r[2] = _mm512_unpacklo_epi64(t1, t3);
    r[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* 16 bytes at p + j * stride for outputs j = 0..15, as transpose_lanes wants them. */
static FAST_512 inline void load_lanes(const char *p, size_t stride, __m512i z[4]) {
    for (int g = 0; g < 4; g++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + (size_t)g * stride)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + (size_t)(4 + g) * stride)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + (size_t)(8 + g) * stride)), 2);
        z[g] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + (size_t)(12 + g) * stride)), 3);
    }
}

/* Block b of outputs n0..n0+15 as 8 vectors: w[r] lane j = codes 4r..4r+3 of output n0 + j (the dwords a
 * VNNI product takes; also AMX's B tile, row r), with the outputs' scales and offsets. q8 codes are biased
 * to unsigned (code + 128) when `biased`. */
static FAST_512 inline void weights_16(const FastJob *job, int K, int n0, int b, int biased, __m512i w[8],
                                       __m512 *scale, __m512 *offset) {
    int per_row = K / 32;
    __m512i z[4], r[4];
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (job->q4) {
        const CpuQ4Block *blk = job->q4 + (size_t)n0 * per_row + b;
        size_t stride = sizeof(CpuQ4Block) * (size_t)per_row;
        load_lanes((const char *)blk->codes, stride, z);
        transpose_lanes(z, r);
        const __m512i low = _mm512_set1_epi8(15);
        for (int j = 0; j < 4; j++) {
            w[j] = _mm512_and_si512(r[j], low);
            w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(r[j], 4), low);
        }
        __m512i so = _mm512_i32gather_epi32(_mm512_mullo_epi32(lanes, _mm512_set1_epi32((int)stride)), blk, 1);
        *scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(so));
        *offset = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(so, 16)));
    } else {
        const int8_t *q = job->q8->q + (size_t)n0 * K + b * 32;
        const __m512i bias = _mm512_set1_epi8(biased ? (char)0x80 : 0);
        for (int h = 0; h < 2; h++) {
            load_lanes((const char *)q + 16 * h, (size_t)K, z);
            transpose_lanes(z, r);
            for (int j = 0; j < 4; j++) w[4 * h + j] = _mm512_xor_si512(r[j], bias);
        }
        __m512i idx = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(per_row));
        *scale = _mm512_i32gather_ps(idx, job->q8->scale + (size_t)n0 * per_row + b, 4);
        *offset = _mm512_i32gather_ps(idx, job->q8->offset + (size_t)n0 * per_row + b, 4);
    }
}

/* The weights of the next 16 outputs are one contiguous run (rows n0+16..n0+31): at block b a kernel asks
 * for the b-th slice of it, so the run is in cache when its turn comes (16 rows read side by side are too
 * many streams for the hardware prefetcher). Inlined by force: gcc takes a function that only prefetches for
 * one without effects and drops the call. */
static inline __attribute__((always_inline)) void prefetch_next(const FastJob *job, int K, int n0, int b) {
    int per_row = K / 32;
    if (n0 + 2 * FAST_GROUP > job->N) return;
    if (job->q4) {
        const char *next = (const char *)(job->q4 + (size_t)(n0 + FAST_GROUP) * per_row);
        for (int i = 0; i < (int)sizeof(CpuQ4Block) * FAST_GROUP; i += 64) __builtin_prefetch(next + b * sizeof(CpuQ4Block) * FAST_GROUP + i, 0, 3);
    } else {
        const char *next = (const char *)(job->q8->q + (size_t)(n0 + FAST_GROUP) * K);
        for (int i = 0; i < 32 * FAST_GROUP; i += 64) __builtin_prefetch(next + b * 32 * FAST_GROUP + i, 0, 3);
        __builtin_prefetch((const char *)(job->q8->scale + (size_t)(n0 + FAST_GROUP) * per_row + b * FAST_GROUP), 0, 3);
        __builtin_prefetch((const char *)(job->q8->offset + (size_t)(n0 + FAST_GROUP) * per_row + b * FAST_GROUP), 0, 3);
    }
}

static FAST_512 inline __m512 fast_step(__m512 acc, __m512i dot, __m512 scale, __m512 offset, const FastX *x, int b,
                                        int m) {
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale), _mm512_set1_ps(x->d[b * FAST_ROWS + m]), acc);
    return _mm512_fmadd_ps(offset, _mm512_set1_ps(x->xo[b * FAST_ROWS + m]), acc);
}

static FAST_512 inline void store_16(const FastJob *job, const __m512 *acc, int rows, int y_row0, int n0,
                                     int accumulate) {
#pragma GCC unroll 16
    for (int m = 0; m < rows; m++) {
        __m512 t = acc[m];
        float *y = job->y + (size_t)(y_row0 + m) * job->N + n0;
        if (job->bias) t = _mm512_add_ps(t, _mm512_loadu_ps(job->bias + n0));
        if (accumulate) t = _mm512_add_ps(_mm512_loadu_ps(y), t);
        _mm512_storeu_ps(y, t);
    }
}

static FAST_512 inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Outputs n0..n0+15, all rows of x: VNNI's dpbusd takes unsigned bytes times signed ones, so q8 codes are
 * biased by 128 and 128 * s_b taken off (exact). Inlined with a constant row count (1, the single-sequence
 * decode) the weights and accumulators stay in registers. */
static inline __attribute__((always_inline)) FAST_512 void group_vnni_rows(const FastJob *job, const FastX *x,
                                                                          int y_row0, int n0, int accumulate,
                                                                          const int rows) {
    int K = x->K, per_row = K / 32;
    __m512 acc[FAST_ROWS];
#pragma GCC unroll 16
    for (int m = 0; m < rows; m++) acc[m] = _mm512_setzero_ps();
    for (int b = 0; b < per_row; b++) {
        __m512i w[8];
        __m512 scale, offset;
        prefetch_next(job, K, n0, b);
        weights_16(job, K, n0, b, 1, w, &scale, &offset);
        for (int m = 0; m < rows; m++) {
            const int8_t *xq = x->xq + (size_t)m * K + b * 32;
            __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                d0 = _mm512_dpbusd_epi32(d0, w[r], bcast4(xq + 4 * r));
                d1 = _mm512_dpbusd_epi32(d1, w[4 + r], bcast4(xq + 16 + 4 * r));
            }
            __m512i dot = _mm512_add_epi32(d0, d1);
            if (!job->q4) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * x->s[b * FAST_ROWS + m]));
            acc[m] = fast_step(acc[m], dot, scale, offset, x, b, m);
        }
    }
    store_16(job, acc, rows, y_row0, n0, accumulate);
}

static FAST_512 void group_vnni(const FastJob *job, const FastX *x, int y_row0, int n0, int accumulate) {
    if (x->rows == 1) group_vnni_rows(job, x, y_row0, n0, accumulate, 1);
    else group_vnni_rows(job, x, y_row0, n0, accumulate, x->rows);
}

/* Tile registers: 0..3 = C [16 rows][16 outputs] int32 of four blocks in flight, 4 and 5 = A = xq
 * [16 rows][32 bytes], 6 and 7 = B = the weights [8 dwords][16 outputs]: TDPBSSD, signed bytes on both
 * sides (4-bit codes 0..15 and int8 codes alike). Four blocks at a time because one block's chain (tile
 * loads, product, store, vector loads) is mostly latency: with four C tiles the products overlap. */
#define AMX_BLOCKS 4

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} AmxConfig;

static FAST_AMX void amx_begin(void) {
    AmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < AMX_BLOCKS; t++) cfg.rows[t] = FAST_ROWS, cfg.colsb[t] = 64;
    cfg.rows[4] = cfg.rows[5] = FAST_ROWS, cfg.colsb[4] = cfg.colsb[5] = 32;
    cfg.rows[6] = cfg.rows[7] = 8, cfg.colsb[6] = cfg.colsb[7] = 64;
    /* gcc's _tile_loadconfig tells the compiler it reads 8 bytes only: make all 64 stores happen first */
    __asm__ __volatile__("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

static FAST_AMX void amx_end(void) { _tile_release(); }

/* Block b's product into C tile c (tile numbers are immediates, hence a macro), A and B tiles a and w. */
#define AMX_PRODUCT(c, a, w, b, i)                                                                                     \
    do {                                                                                                               \
        _tile_zero(c);                                                                                                 \
        _tile_loadd(a, x->xq + (b) * 32, K);                                                                           \
        _tile_loadd(w, wbuf[i], 64);                                                                                   \
        _tile_dpbssd(c, a, w);                                                                                         \
    } while (0)

/* group_amx for `rows` rows; inlined with rows = FAST_ROWS, every loop over the rows unrolls and the
 * accumulators live in registers (with a variable count gcc keeps them on the stack: a store and a reload
 * per row and block). */
static inline __attribute__((always_inline)) FAST_AMX void group_amx_rows(const FastJob *job, const FastX *x,
                                                                         int y_row0, int n0, int accumulate,
                                                                         const int rows) {
    int K = x->K, per_row = K / 32;
    __m512 acc[FAST_ROWS], scale[AMX_BLOCKS], offset[AMX_BLOCKS];
    __m512i wbuf[AMX_BLOCKS][8];
    int32_t dots[AMX_BLOCKS][FAST_ROWS][16] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int m = 0; m < rows; m++) acc[m] = _mm512_setzero_ps();
    for (int b0 = 0; b0 < per_row; b0 += AMX_BLOCKS) {
        int n_blocks = per_row - b0 < AMX_BLOCKS ? per_row - b0 : AMX_BLOCKS;
        for (int i = 0; i < n_blocks; i++) {
            prefetch_next(job, K, n0, b0 + i);
            weights_16(job, K, n0, b0 + i, 0, wbuf[i], &scale[i], &offset[i]);
        }
        if (n_blocks == AMX_BLOCKS) {
            AMX_PRODUCT(0, 4, 6, b0, 0);
            AMX_PRODUCT(1, 5, 7, b0 + 1, 1);
            AMX_PRODUCT(2, 4, 6, b0 + 2, 2);
            AMX_PRODUCT(3, 5, 7, b0 + 3, 3);
            _tile_stored(0, dots[0], 64);
            _tile_stored(1, dots[1], 64);
            _tile_stored(2, dots[2], 64);
            _tile_stored(3, dots[3], 64);
        } else {
            for (int i = 0; i < n_blocks; i++) {
                AMX_PRODUCT(0, 4, 6, b0 + i, i);
                _tile_stored(0, dots[i], 64);
            }
        }
        /* the blocks in order within each row's chain, as every kernel adds them; all rows' chains side by side */
        for (int i = 0; i < n_blocks; i++) {
#pragma GCC unroll 16
            for (int m = 0; m < rows; m++)
                acc[m] = fast_step(acc[m], _mm512_load_si512(dots[i][m]), scale[i], offset[i], x, b0 + i, m);
        }
    }
    store_16(job, acc, rows, y_row0, n0, accumulate);
}

static FAST_AMX void group_amx(const FastJob *job, const FastX *x, int y_row0, int n0, int accumulate) {
    if (x->rows == FAST_ROWS) group_amx_rows(job, x, y_row0, n0, accumulate, FAST_ROWS);
    else group_amx_rows(job, x, y_row0, n0, accumulate, x->rows);
}

/* The kernel may use AMX's tiles: asks Linux once per call (granted per process; the answer does not change). */
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}
#endif

#if FAST_X86
#define FAST_AVX2 __attribute__((target("avx2,fma,f16c")))

/* The AVX2 kernel: 8 outputs per vector, as the VNNI one with 16 (transpose_lanes on 128-bit lanes). */
static FAST_AVX2 inline void weights_8(const FastJob *job, int K, int n0, int b, __m256i w[8], __m256 *scale,
                                       __m256 *offset) {
    int per_row = K / 32;
    __m256i z[4], r[4];
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (job->q4) {
        const CpuQ4Block *blk = job->q4 + (size_t)n0 * per_row + b;
        size_t stride = sizeof(CpuQ4Block) * (size_t)per_row;
        const char *p = (const char *)blk->codes;
        for (int g = 0; g < 4; g++)
            z[g] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + g * stride))),
                                           _mm_loadu_si128((const __m128i *)(p + (4 + g) * stride)), 1);
        __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
        __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
        r[0] = _mm256_unpacklo_epi64(t0, t2), r[1] = _mm256_unpackhi_epi64(t0, t2);
        r[2] = _mm256_unpacklo_epi64(t1, t3), r[3] = _mm256_unpackhi_epi64(t1, t3);
        const __m256i low = _mm256_set1_epi8(15);
        for (int j = 0; j < 4; j++) {
            w[j] = _mm256_and_si256(r[j], low);
            w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(r[j], 4), low);
        }
        /* the 8 (scale, offset) f16 pairs: 16-bit halves packed to 8 values, then converted */
        __m256i so = _mm256_i32gather_epi32((const int *)blk, _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)stride)), 1);
        const __m256i mask = _mm256_set1_epi32(0xffff);
        __m256i sp = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_and_si256(so, mask), _mm256_setzero_si256()), 0xD8);
        __m256i op = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(so, 16), _mm256_setzero_si256()), 0xD8);
        *scale = _mm256_cvtph_ps(_mm256_castsi256_si128(sp));
        *offset = _mm256_cvtph_ps(_mm256_castsi256_si128(op));
    } else {
        const int8_t *q = job->q8->q + (size_t)n0 * K + b * 32;
        for (int h = 0; h < 2; h++) {
            const char *p = (const char *)q + 16 * h;
            for (int g = 0; g < 4; g++)
                z[g] = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + (size_t)g * K))),
                    _mm_loadu_si128((const __m128i *)(p + (size_t)(4 + g) * K)), 1);
            __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
            __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
            w[4 * h] = _mm256_unpacklo_epi64(t0, t2), w[4 * h + 1] = _mm256_unpackhi_epi64(t0, t2);
            w[4 * h + 2] = _mm256_unpacklo_epi64(t1, t3), w[4 * h + 3] = _mm256_unpackhi_epi64(t1, t3);
        }
        __m256i idx = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(per_row));
        *scale = _mm256_i32gather_ps(job->q8->scale + (size_t)n0 * per_row + b, idx, 4);
        *offset = _mm256_i32gather_ps(job->q8->offset + (size_t)n0 * per_row + b, idx, 4);
    }
}

/* Outputs n0..n0+7, all rows of x. maddubs multiplies unsigned by signed bytes into saturating 16-bit pairs:
 * 4-bit codes (pairs at most 2 * 15 * 127) sum 8 products per 16-bit lane exactly before widening; int8 codes
 * go in as |code| times x with the code's sign (pairs at most 2 * 128 * 127) and widen at once. */
static FAST_AVX2 void group_avx2(const FastJob *job, const FastX *x, int y_row0, int n0, int accumulate) {
    int K = x->K, per_row = K / 32, rows = x->rows;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[FAST_ROWS];
    for (int m = 0; m < rows; m++) acc[m] = _mm256_setzero_ps();
    for (int b = 0; b < per_row; b++) {
        __m256i w[8];
        __m256 scale, offset;
        if (n0 % FAST_GROUP == 0) prefetch_next(job, K, n0, b); /* the first half asks for the next 16 */
        weights_8(job, K, n0, b, w, &scale, &offset);
        for (int m = 0; m < rows; m++) {
            const int8_t *xq = x->xq + (size_t)m * K + b * 32;
            __m256i dot;
            if (job->q4) {
                __m256i pairs = _mm256_setzero_si256();
                for (int r = 0; r < 8; r++) {
                    int32_t v;
                    memcpy(&v, xq + 4 * r, 4);
                    pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[r], _mm256_set1_epi32(v)));
                }
                dot = _mm256_madd_epi16(pairs, ones);
            } else {
                dot = _mm256_setzero_si256();
                for (int r = 0; r < 8; r++) {
                    int32_t v;
                    memcpy(&v, xq + 4 * r, 4);
                    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w[r]), _mm256_sign_epi8(_mm256_set1_epi32(v), w[r]));
                    dot = _mm256_add_epi32(dot, _mm256_madd_epi16(p, ones));
                }
            }
            acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale),
                                     _mm256_set1_ps(x->d[b * FAST_ROWS + m]), acc[m]);
            acc[m] = _mm256_fmadd_ps(offset, _mm256_set1_ps(x->xo[b * FAST_ROWS + m]), acc[m]);
        }
    }
    for (int m = 0; m < rows; m++) {
        __m256 t = acc[m];
        float *y = job->y + (size_t)(y_row0 + m) * job->N + n0;
        if (job->bias) t = _mm256_add_ps(t, _mm256_loadu_ps(job->bias + n0));
        if (accumulate) t = _mm256_add_ps(_mm256_loadu_ps(y), t);
        _mm256_storeu_ps(y, t);
    }
}
#endif

static const char *const kernel_names[] = {"scalar", "avx2", "vnni", "amx"};

const char *cpu_fast_kernel_name(CpuFastKernel k) { return kernel_names[k]; }

int cpu_fast_kernel_usable(CpuFastKernel k) {
#if FAST_X86
    int vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    unsigned a, bx, c, d;
    if (k == CPU_FAST_AVX2) /* F16C: CPUID leaf 1, ECX bit 29 (clang 14 has no name for it) */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid(1, &a, &bx, &c, &d) &&
               (c >> 29 & 1);
    if (k == CPU_FAST_VNNI) return vnni;
    if (k == CPU_FAST_AMX) {
        /* CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8 (clang 14's __builtin_cpu_supports knows no AMX) */
        int amx = __get_cpuid_count(7, 0, &a, &bx, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1);
        return vnni && amx && amx_permitted();
    }
#endif
    return k == CPU_FAST_SCALAR;
}

CpuFastKernel cpu_fast_kernel_for(CpuSimd simd) {
    if (simd == CPU_SIMD_SCALAR) return CPU_FAST_SCALAR;
    if (simd == CPU_SIMD_AVX512 && cpu_fast_kernel_usable(CPU_FAST_AMX)) return CPU_FAST_AMX;
    if (simd == CPU_SIMD_AVX512 && cpu_fast_kernel_usable(CPU_FAST_VNNI)) return CPU_FAST_VNNI;
    return cpu_fast_kernel_usable(CPU_FAST_AVX2) ? CPU_FAST_AVX2 : CPU_FAST_SCALAR;
}

static void fast_part(CpuFastKernel kernel, const FastJob *jobs, int n_jobs, const float *x, int M, int K,
                      int accumulate, float *tile, int part, int parts) {
    long groups = 0;
    for (int j = 0; j < n_jobs; j++) groups += (jobs[j].N + FAST_GROUP - 1) / FAST_GROUP;
    long g0 = groups * part / parts, g1 = groups * (part + 1) / parts;
    if (g0 >= g1) return;
    FastX fx = fast_x(tile, K);
#if FAST_X86
    if (kernel == CPU_FAST_AMX) amx_begin();
#endif
    for (int m0 = 0; m0 < M; m0 += FAST_ROWS) {
        fx.rows = M - m0 < FAST_ROWS ? M - m0 : FAST_ROWS;
        for (int m = 0; m < fx.rows; m++) {
#if FAST_X86
            if (kernel >= CPU_FAST_VNNI) quantize_row_avx512(&fx, m, x + (size_t)(m0 + m) * K);
            else
#endif
                quantize_row_scalar(&fx, m, x + (size_t)(m0 + m) * K);
        }
        long base = 0;
        for (int j = 0; j < n_jobs; j++) {
            long gj = (jobs[j].N + FAST_GROUP - 1) / FAST_GROUP;
            for (long g = g0 > base ? g0 : base; g < g1 && g < base + gj; g++) {
                int n0 = (int)(g - base) * FAST_GROUP, n1 = n0 + FAST_GROUP < jobs[j].N ? n0 + FAST_GROUP : jobs[j].N;
#if FAST_X86
                if (n1 - n0 == FAST_GROUP && kernel == CPU_FAST_AMX) group_amx(&jobs[j], &fx, m0, n0, accumulate);
                else if (n1 - n0 == FAST_GROUP && kernel == CPU_FAST_VNNI) group_vnni(&jobs[j], &fx, m0, n0, accumulate);
                else if (kernel == CPU_FAST_AVX2) {
                    int n = n0;
                    for (; n + 8 <= n1; n += 8) group_avx2(&jobs[j], &fx, m0, n, accumulate);
                    if (n < n1) group_scalar(&jobs[j], &fx, m0, n, n1, accumulate);
                } else
#endif
                    group_scalar(&jobs[j], &fx, m0, n0, n1, accumulate);
            }
            base += gj;
        }
    }
#if FAST_X86
    if (kernel == CPU_FAST_AMX) amx_end();
#endif
}

void cpu_matmul_q4_fast_part(CpuFastKernel kernel, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                             int accumulate, float *tile, int part, int parts) {
    FastJob fj[4];
    for (int j = 0; j < n_jobs; j++) fj[j] = (FastJob){jobs[j].y, jobs[j].w, NULL, jobs[j].bias, jobs[j].N};
    fast_part(kernel, fj, n_jobs, x, M, K, accumulate, tile, part, parts);
}

void cpu_matmul_q8_fast_part(CpuFastKernel kernel, float *y, const float *x, const CpuPacked *w, const float *bias,
                             int M, int N, int K, int accumulate, float *tile, int part, int parts) {
    FastJob job = {y, NULL, w, bias, N};
    fast_part(kernel, &job, 1, x, M, K, accumulate, tile, part, parts);
}

void cpu_matmul_q4_fast(CpuFastKernel kernel, const CpuQ4Job *jobs, int n_jobs, const float *x, int M, int K,
                        int accumulate, float *tiles) {
#pragma omp parallel
    cpu_matmul_q4_fast_part(kernel, jobs, n_jobs, x, M, K, accumulate,
                            tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(), omp_get_thread_num(),
                            omp_get_num_threads());
}

void cpu_matmul_q8_fast(CpuFastKernel kernel, float *y, const float *x, const CpuPacked *w, const float *bias, int M,
                        int N, int K, int accumulate, float *tiles) {
#pragma omp parallel
    cpu_matmul_q8_fast_part(kernel, y, x, w, bias, M, N, K, accumulate,
                            tiles + CPU_Q4_TILE_FLOATS(K) * (size_t)omp_get_thread_num(), omp_get_thread_num(),
                            omp_get_num_threads());
}
