/* vnni.c — the kernel table's fast-product entries on AVX-512 VNNI (16 outputs per vector) and AMX
 * (TDPBSSD tiles of 16 rows x 16 outputs), and the AVX-512 row quantiser both use: portable.c's one
 * arithmetic (kernels.h, isa.h), so the portable kernel's bits. */
#include "isa.h"

#if CPU_X86
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FAST_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define FAST_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))

/* cpu_fast_quantize_scalar with 16 lanes: the same operations (max is exact in any order; the conversion rounds
 * to nearest even as rintf does), so the same bytes and floats. */
FAST_512 void cpu_fast_quantize_avx512(CpuFastX *x, int m, const float *row) {
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
        x->d[b * CPU_FAST_ROWS + m] = amax / 127.0f;
        x->xo[b * CPU_FAST_ROWS + m] = (amax / 127.0f) * (float)sum;
        x->s[b * CPU_FAST_ROWS + m] = sum;
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
static FAST_512 inline void weights_16(const CpuFastJob *job, int K, int n0, int b, int biased, __m512i w[8],
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


static FAST_512 inline __m512 fast_step(__m512 acc, __m512i dot, __m512 scale, __m512 offset, const CpuFastX *x, int b,
                                        int m) {
    acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale), _mm512_set1_ps(x->d[b * CPU_FAST_ROWS + m]), acc);
    return _mm512_fmadd_ps(offset, _mm512_set1_ps(x->xo[b * CPU_FAST_ROWS + m]), acc);
}

static FAST_512 inline void store_16(const CpuFastJob *job, const __m512 *acc, int rows, int y_row0, int n0,
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
static inline __attribute__((always_inline)) FAST_512 void group_vnni_rows(const CpuFastJob *job, const CpuFastX *x,
                                                                          int y_row0, int n0, int accumulate,
                                                                          const int rows) {
    int K = x->K, per_row = K / 32;
    __m512 acc[CPU_FAST_ROWS];
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
            if (!job->q4) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * x->s[b * CPU_FAST_ROWS + m]));
            acc[m] = fast_step(acc[m], dot, scale, offset, x, b, m);
        }
    }
    store_16(job, acc, rows, y_row0, n0, accumulate);
}

static FAST_512 void group_vnni(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int accumulate) {
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

FAST_AMX void cpu_amx_begin(void) {
    AmxConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < AMX_BLOCKS; t++) cfg.rows[t] = CPU_FAST_ROWS, cfg.colsb[t] = 64;
    cfg.rows[4] = cfg.rows[5] = CPU_FAST_ROWS, cfg.colsb[4] = cfg.colsb[5] = 32;
    cfg.rows[6] = cfg.rows[7] = 8, cfg.colsb[6] = cfg.colsb[7] = 64;
    /* gcc's _tile_loadconfig tells the compiler it reads 8 bytes only: make all 64 stores happen first */
    __asm__ __volatile__("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

FAST_AMX void cpu_amx_end(void) { _tile_release(); }

/* Block b's product into C tile c (tile numbers are immediates, hence a macro), A and B tiles a and w. */
#define AMX_PRODUCT(c, a, w, b, i)                                                                                     \
    do {                                                                                                               \
        _tile_zero(c);                                                                                                 \
        _tile_loadd(a, x->xq + (b) * 32, K);                                                                           \
        _tile_loadd(w, wbuf[i], 64);                                                                                   \
        _tile_dpbssd(c, a, w);                                                                                         \
    } while (0)

/* group_amx for `rows` rows; inlined with rows = CPU_FAST_ROWS, every loop over the rows unrolls and the
 * accumulators live in registers (with a variable count gcc keeps them on the stack: a store and a reload
 * per row and block). */
static inline __attribute__((always_inline)) FAST_AMX void group_amx_rows(const CpuFastJob *job, const CpuFastX *x,
                                                                         int y_row0, int n0, int accumulate,
                                                                         const int rows) {
    int K = x->K, per_row = K / 32;
    __m512 acc[CPU_FAST_ROWS], scale[AMX_BLOCKS], offset[AMX_BLOCKS];
    __m512i wbuf[AMX_BLOCKS][8];
    int32_t dots[AMX_BLOCKS][CPU_FAST_ROWS][16] __attribute__((aligned(64)));
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

static FAST_AMX void group_amx(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int accumulate) {
    if (x->rows == CPU_FAST_ROWS) group_amx_rows(job, x, y_row0, n0, accumulate, CPU_FAST_ROWS);
    else group_amx_rows(job, x, y_row0, n0, accumulate, x->rows);
}

/* The kernel may use AMX's tiles: asks Linux once per call (granted per process; the answer does not change). */
int cpu_amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}

/* Outputs [n0, n1): a whole group of 16 by the vector kernels, a shorter tail by the portable one. */
void cpu_fast_group_vnni(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate) {
    if (n1 - n0 == CPU_FAST_GROUP) group_vnni(job, x, y_row0, n0, accumulate);
    else cpu_fast_group_scalar(job, x, y_row0, n0, n1, accumulate);
}

void cpu_fast_group_amx(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate) {
    if (n1 - n0 == CPU_FAST_GROUP) group_amx(job, x, y_row0, n0, accumulate);
    else cpu_fast_group_scalar(job, x, y_row0, n0, n1, accumulate);
}
#endif
