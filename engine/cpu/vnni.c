/* vnni.c — the kernel table's fast-product entries on AVX-512 VNNI (16 outputs per vector) and AMX
 * (TDPBSSD tiles of 16 rows x 16 outputs), and the AVX-512 row quantiser both use: portable.c's one
 * arithmetic (kernels.h, isa.h), so the portable kernel's bits. */
#include "isa.h"

#include "../gguf.h"

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
        int32_t first = _mm512_reduce_add_epi32(qa), sum = first + _mm512_reduce_add_epi32(qc);
        x->s16[b * CPU_FAST_ROWS + m] = first;
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

/* A 32-bit field at p + j * stride for outputs j = 0..15 (unaligned: byte offsets). */
static FAST_512 inline __m512i gather_16(const uint8_t *p, size_t stride) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_i32gather_epi32(_mm512_mullo_epi32(lanes, _mm512_set1_epi32((int)stride)), p, 1);
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
        __m512i so = gather_16((const uint8_t *)blk, stride);
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

/* ------------------------------------------------------------------- a source's blocks (Q5_0, Q4_K, Q5_K, Q6_K) */

/* Up to 8 consecutive blocks of 32 weights of 16 outputs, decoded from a source's blocks into weights_16's layout:
 * w[i][r] lane j = the codes 4r..4r+3 of output n0 + j in block b0 + i, as unsigned bytes (code + the type's
 * zero, which the kernel takes off as zero * sum(xq)); the outputs' f32 scales and offsets; Q6_K's integer
 * scales of each block's two halves. */
typedef struct {
    __m512i w[8][8];
    __m512 scale[8], offset[8];
    __m512i sub0[8], sub1[8];
} Blocks16;

/* The type's zero: what is added to a code to make it an unsigned byte. */
static inline int blocks_zero(int type) { return type == GGML_Q5_0 ? 16 : type == GGML_Q6_K ? 32 : 0; }

/* The 16 bytes at p + j * stride for outputs j = 0..15, transposed: r[i] lane j = bytes 4i..4i+3 of output j. */
static FAST_512 inline void load_t(const uint8_t *p, size_t stride, __m512i r[4]) {
    __m512i z[4];
    load_lanes((const char *)p, stride, z);
    transpose_lanes(z, r);
}

static FAST_512 inline __m512i nibble(__m512i v, int high) {
    return _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(15));
}

/* Byte `k` of each lane, sign-extended. */
static FAST_512 inline __m512i byte_signed(__m512i v, int k) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * k), 24); }

/* Slice `part` of `parts` of the next 16 outputs' rows, one contiguous run, so it is in cache when its turn
 * comes (prefetch_next's reason; a slice in order, not the same block of 16 rows: a sequential run is what the
 * memory streams fastest). */
static inline __attribute__((always_inline)) void prefetch_blocks(const CpuFastJob *job, int n0, int part, int parts) {
    if (n0 + 2 * CPU_FAST_GROUP > job->N) return;
    size_t run = CPU_FAST_GROUP * job->blocks->row_bytes, from = run * part / parts, to = run * (part + 1) / parts;
    const uint8_t *next = job->blocks->data + (size_t)(n0 + CPU_FAST_GROUP) * job->blocks->row_bytes;
    for (size_t i = from & ~(size_t)63; i < to; i += 64) __builtin_prefetch(next + i, 0, 3);
}

/* The f32 scales and offsets of Q4_K / Q5_K super-block sb's 8 blocks for outputs n0..n0+15 (lanes). */
static FAST_512 inline void k4_scales(const CpuFastJob *job, int n0, int sb, int five, __m512 scale[8], __m512 offset[8]) {
    size_t stride = job->blocks->row_bytes;
    const uint8_t *base = job->blocks->data + (size_t)n0 * stride + (size_t)sb * (five ? 176 : 144);
    __m512i dd = gather_16(base, stride), s0 = gather_16(base + 4, stride), s1 = gather_16(base + 8, stride),
            s2 = gather_16(base + 12, stride);
    __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)), dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const __m512i six = _mm512_set1_epi32(63), four = _mm512_set1_epi32(15), three = _mm512_set1_epi32(3);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int j = 0; j < 8; j++) {
        __m512i sc, mn;
        if (j < 4) {
            sc = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), six);
            mn = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), six);
        } else {
            __m512i hi = _mm512_srli_epi32(s2, 8 * (j - 4));
            sc = _mm512_or_si512(_mm512_and_si512(hi, four),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, 8 * (j - 4) + 6), three), 4));
            mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hi, 4), four),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, 8 * (j - 4) + 6), three), 4));
        }
        scale[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
        offset[j] = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn))), sign));
    }
}

/* Q6_K super-block sb's f32 scale (d) for outputs n0..n0+15; d sits in bytes 208..209: the field from 206 keeps
 * the gather inside the block. */
static FAST_512 inline __m512 q6_k_d(const CpuFastJob *job, int n0, int sb) {
    size_t stride = job->blocks->row_bytes;
    const uint8_t *base = job->blocks->data + (size_t)n0 * stride + (size_t)sb * 210;
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(gather_16(base + 206, stride), 16)));
}

/* Q4_K / Q5_K super-block sb (blocks 8 sb .. 8 sb + 7) of outputs n0..n0+15. */
static FAST_512 inline void decode_k4(const CpuFastJob *job, int n0, int sb, int five, Blocks16 *o) {
    size_t stride = job->blocks->row_bytes, bytes = five ? 176 : 144;
    const uint8_t *base = job->blocks->data + (size_t)n0 * stride + (size_t)sb * bytes;
    prefetch_blocks(job, n0, sb, (int)job->blocks->row_blocks);
    k4_scales(job, n0, sb, five, o->scale, o->offset);
    __m512i h[2][4];
    if (five) load_t(base + 16, stride, h[0]), load_t(base + 32, stride, h[1]);
    const uint8_t *qs = base + (five ? 48 : 16);
    for (int c = 0; c < 4; c++) {
        __m512i r[2][4];
        load_t(qs + 32 * c, stride, r[0]);
        load_t(qs + 32 * c + 16, stride, r[1]);
        for (int half = 0; half < 2; half++)
            for (int i = 0; i < 4; i++)
                for (int hi = 0; hi < 2; hi++) {
                    __m512i v = nibble(r[half][i], hi);
                    if (five) /* bit 2c + hi of qh[l] is the fifth bit of sub-block 2c + hi's code l */
                        v = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h[half][i], 2 * c + hi),
                                                                                 _mm512_set1_epi8(1)), 4));
                    o->w[2 * c + hi][4 * half + i] = v;
                }
    }
}

/* Q6_K super-block sb of outputs n0..n0+15: codes stored as q (0..63; zero 32), each block's two int8 scales. */
static FAST_512 inline void decode_q6_k(const CpuFastJob *job, int n0, int sb, Blocks16 *o) {
    size_t stride = job->blocks->row_bytes;
    const uint8_t *base = job->blocks->data + (size_t)n0 * stride + (size_t)sb * 210;
    prefetch_blocks(job, n0, sb, (int)job->blocks->row_blocks);
    __m512 d = q6_k_d(job, n0, sb);
    __m512i sc[4];
    load_t(base + 192, stride, sc);
    const __m512i three = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m512i ql[4][4], qh[2][4];
        for (int q = 0; q < 4; q++) load_t(base + 64 * h + 16 * q, stride, ql[q]);
        load_t(base + 128 + 32 * h, stride, qh[0]);
        load_t(base + 128 + 32 * h + 16, stride, qh[1]);
        for (int t = 0; t < 4; t++) {
            int blk = 4 * h + t, q0 = 2 * (t & 1);
            for (int half = 0; half < 2; half++)
                for (int i = 0; i < 4; i++) {
                    __m512i high = _mm512_and_si512(_mm512_srli_epi16(qh[half][i], 2 * t), three);
                    o->w[blk][4 * half + i] = _mm512_or_si512(nibble(ql[q0 + half][i], t >> 1), _mm512_slli_epi16(high, 4));
                }
            int k = 8 * h + 2 * t;
            o->sub0[blk] = byte_signed(sc[k / 4], k % 4);
            o->sub1[blk] = byte_signed(sc[(k + 1) / 4], (k + 1) % 4);
            o->scale[blk] = d;
            o->offset[blk] = _mm512_setzero_ps();
        }
    }
}

/* Q5_0 blocks b0 .. b0 + n - 1 of outputs n0..n0+15 (22 bytes: d, qh, qs[16]; codes stored as q, zero 16). */
static FAST_512 inline void decode_q5_0(const CpuFastJob *job, int n0, int b0, int n, Blocks16 *o) {
    size_t stride = job->blocks->row_bytes;
    const __m512i magic = _mm512_set1_epi32(0x00204081), ones = _mm512_set1_epi32(0x01010101);
    prefetch_blocks(job, n0, b0 / 8, (int)(job->blocks->row_blocks + 7) / 8);
    for (int i = 0; i < n; i++) {
        const uint8_t *base = job->blocks->data + (size_t)n0 * stride + (size_t)(b0 + i) * 22;
        __m512i dq = gather_16(base, stride), qh = gather_16(base + 2, stride), r[4];
        load_t(base + 6, stride, r);
        for (int hi = 0; hi < 2; hi++)
            for (int j = 0; j < 4; j++) {
                /* bits 16 hi + 4j .. +3 of qh, one to bit 4 of each byte: x * 0x00204081 puts bit k at bit 8k + k */
                __m512i bits = _mm512_and_si512(_mm512_srli_epi32(qh, 16 * hi + 4 * j), _mm512_set1_epi32(15));
                __m512i fifth = _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(bits, magic), ones), 4);
                o->w[i][4 * hi + j] = _mm512_or_si512(nibble(r[j], hi), fifth);
            }
        o->scale[i] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dq));
        o->offset[i] = _mm512_setzero_ps();
    }
}

/* Outputs n0..n0+15 of a source's blocks of `type`, all rows of x (group_vnni_rows' loop, the blocks decoded 8 at
 * a time). Inlined with constant rows and type, so each (type, 1 row) pair is its own loop. */
static inline __attribute__((always_inline)) FAST_512 void blocks_vnni_rows(const CpuFastJob *job, const CpuFastX *x,
                                                                           int y_row0, int n0, int accumulate,
                                                                           const int rows, const int type) {
    int K = x->K, per_row = K / 32, zero = blocks_zero(type);
    __m512 acc[CPU_FAST_ROWS];
    Blocks16 bk;
#pragma GCC unroll 16
    for (int m = 0; m < rows; m++) acc[m] = _mm512_setzero_ps();
    for (int b0 = 0; b0 < per_row; b0 += 8) {
        int n = per_row - b0 < 8 ? per_row - b0 : 8;
        if (type == GGML_Q4_K || type == GGML_Q5_K) decode_k4(job, n0, b0 / 8, type == GGML_Q5_K, &bk);
        else if (type == GGML_Q6_K) decode_q6_k(job, n0, b0 / 8, &bk);
        else decode_q5_0(job, n0, b0, n, &bk);
        for (int i = 0; i < n; i++) {
            int b = b0 + i;
            for (int m = 0; m < rows; m++) {
                const int8_t *xq = x->xq + (size_t)m * K + b * 32;
                __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    d0 = _mm512_dpbusd_epi32(d0, bk.w[i][r], bcast4(xq + 4 * r));
                    d1 = _mm512_dpbusd_epi32(d1, bk.w[i][4 + r], bcast4(xq + 16 + 4 * r));
                }
                __m512i dot;
                if (type == GGML_Q6_K) {
                    int32_t lo = x->s16[b * CPU_FAST_ROWS + m], all = x->s[b * CPU_FAST_ROWS + m];
                    d0 = _mm512_sub_epi32(d0, _mm512_set1_epi32(zero * lo));
                    d1 = _mm512_sub_epi32(d1, _mm512_set1_epi32(zero * (all - lo)));
                    dot = _mm512_add_epi32(_mm512_mullo_epi32(bk.sub0[i], d0), _mm512_mullo_epi32(bk.sub1[i], d1));
                } else {
                    dot = _mm512_add_epi32(d0, d1);
                    if (zero) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(zero * x->s[b * CPU_FAST_ROWS + m]));
                }
                acc[m] = fast_step(acc[m], dot, bk.scale[i], bk.offset[i], x, b, m);
            }
        }
    }
    store_16(job, acc, rows, y_row0, n0, accumulate);
}

/* ---------------------------------------------- one row of x on Q4_K / Q6_K: the weights read row after row */

/* One row of x (a single-sequence step) makes the weights' decode the whole cost, and 16 rows read side by side
 * stream from memory at a fraction of a sequential read. So each output's row is read on its own, in order: the
 * 64 codes of a vector dotted with 64 xq (dpbusd), the block sums gathered from the lanes, and only the blocks'
 * integer dots of 16 outputs are then turned to lanes (one output each) for the chain, which is every kernel's. */
#define ROWWISE_SUPER 8 /* super-blocks per pass: 16 outputs' dots of 64 blocks, 4 KiB */
#define ROWWISE_AHEAD 2048 /* bytes a row's stream is prefetched ahead (1, 2, 4 and 8 KiB tried: 2 to 8 alike) */

/* Lane i of the result: a[2i] + a[2i + 1] for i < 8, b[2(i - 8)] + b[2(i - 8) + 1] after. */
static FAST_512 inline __m512i pair_sums(__m512i a, __m512i b) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
}

/* Vectors v[k] of 16 lanes, each lane 4 products of consecutive weights (64 per vector, 256 in all): lane g of
 * the result sums weights 16g .. 16g + 15. */
static FAST_512 inline __m512i group_sums(const __m512i v[4]) {
    return pair_sums(pair_sums(v[0], v[1]), pair_sums(v[2], v[3]));
}

/* The same v: the 8 sums of 32 weights (blocks). */
static FAST_512 inline __m256i block_sums(const __m512i v[4]) {
    __m512i u = group_sums(v);
    return _mm512_castsi512_si256(pair_sums(u, u));
}

/* The 8 block dots of one row's Q4_K super-block (codes 0..15, so no zero to take off). The 32 code bytes of
 * blocks 2c and 2c + 1 are their low and high nibbles: one half of the vector each. */
static FAST_512 inline __m256i row_dots_q4_k(const uint8_t *sb, const int8_t *xq) {
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1), low = _mm512_set1_epi8(15);
    __m512i v[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(sb + 16 + 32 * c)));
        q = _mm512_and_si512(_mm512_srlv_epi16(q, shift), low);
        v[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512(xq + 64 * c));
    }
    return block_sums(v);
}

/* The 8 block dots of one row's Q6_K super-block. Its codes q (0..63) are dotted with xq, the lanes summed to its
 * 16 groups of 16 weights (lane g: group g), zero_16 (32 times each group's xq sum) taken off, each group times
 * its int8 scale, then pairs of groups summed: block b's sub_0 * dot(first 16) + sub_1 * dot(last 16) exactly.
 * Half h's 64 ql bytes hold blocks 4h, 4h + 1 (low nibbles) and 4h + 2, 4h + 3 (high); its 32 qh bytes their
 * fifth and sixth bits, two per block. */
static FAST_512 inline __m256i row_dots_q6_k(const uint8_t *sb, const int8_t *xq, __m512i zero_16) {
    const __m512i low = _mm512_set1_epi8(15), two = _mm512_set1_epi8(3);
    const __m512i shift_lo = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i shift_hi = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    __m512i v[4];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i ql = _mm512_loadu_si512(sb + 64 * h);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(sb + 128 + 32 * h)));
        __m512i a = _mm512_or_si512(_mm512_and_si512(ql, low),
                                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), two), 4));
        __m512i b = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low),
                                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), two), 4));
        v[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, _mm512_loadu_si512(xq + 128 * h));
        v[2 * h + 1] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b, _mm512_loadu_si512(xq + 128 * h + 64));
    }
    __m512i groups = _mm512_sub_epi32(group_sums(v), zero_16);
    __m512i scales = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(sb + 192)));
    groups = _mm512_mullo_epi32(scales, groups);
    return _mm512_castsi512_si256(pair_sums(groups, groups));
}

/* Outputs n0..n0+15 of a Q4_K or Q6_K matrix for the one row of x, a super-block (8 blocks) at a time. */
static inline __attribute__((always_inline)) FAST_512 void row_by_row(const CpuFastJob *job, const CpuFastX *x,
                                                                     int y_row0, int n0, int accumulate, const int type) {
    int K = x->K, n_chunks = K / 256;
    size_t stride = job->blocks->row_bytes, bytes = type == GGML_Q6_K ? 210 : 144;
    const uint8_t *data = job->blocks->data;
    int32_t dots[CPU_FAST_GROUP][8 * ROWWISE_SUPER] __attribute__((aligned(64)));
    __m512i zero_16[ROWWISE_SUPER];
    __m512 acc = _mm512_setzero_ps();
    /* output j's dots are a row of dots[] apart */
    const __m512i dots_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(8 * ROWWISE_SUPER));
    const __m512i thirty_two = _mm512_set1_epi8(32);
    for (int c0 = 0; c0 < n_chunks; c0 += ROWWISE_SUPER) {
        int nc = n_chunks - c0 < ROWWISE_SUPER ? n_chunks - c0 : ROWWISE_SUPER;
        if (type == GGML_Q6_K) /* 32 times each group of 16 xq's sum: the codes' zero */
            for (int c = 0; c < nc; c++) {
                __m512i z[4];
                for (int k = 0; k < 4; k++)
                    z[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), thirty_two,
                                               _mm512_loadu_si512(x->xq + 256 * (c0 + c) + 64 * k));
                zero_16[c] = group_sums(z);
            }
        for (int j = 0; j < CPU_FAST_GROUP; j++) {
            const uint8_t *row = data + (size_t)(n0 + j) * stride + (size_t)c0 * bytes;
            for (int c = 0; c < nc; c++) {
                const int8_t *xq = x->xq + 256 * (c0 + c);
                for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(row + c * bytes + ROWWISE_AHEAD + i, 0, 3);
                __m256i d = type == GGML_Q6_K ? row_dots_q6_k(row + c * bytes, xq, zero_16[c])
                                              : row_dots_q4_k(row + c * bytes, xq);
                _mm256_store_si256((__m256i *)(void *)&dots[j][8 * c], d);
            }
        }
        for (int c = 0; c < nc; c++) {
            __m512 scale[8], offset[8];
            int b0 = 8 * (c0 + c);
            if (type == GGML_Q6_K) {
                scale[0] = q6_k_d(job, n0, c0 + c);
                for (int i = 1; i < 8; i++) scale[i] = scale[0];
                for (int i = 0; i < 8; i++) offset[i] = _mm512_setzero_ps();
            } else {
                k4_scales(job, n0, c0 + c, 0, scale, offset);
            }
            for (int i = 0; i < 8; i++) {
                __m512i dot = _mm512_i32gather_epi32(dots_at, &dots[0][8 * c + i], 4);
                acc = fast_step(acc, dot, scale[i], offset[i], x, b0 + i, 0);
            }
        }
    }
    store_16(job, &acc, 1, y_row0, n0, accumulate);
}

#define FAST_BLOCKS_VNNI(name, type)                                                                                   \
    void name(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate) {                \
        if (n1 - n0 < CPU_FAST_GROUP) cpu_fast_group_scalar(job, x, y_row0, n0, n1, accumulate);                       \
        else if (x->rows == 1 && (type == GGML_Q4_K || type == GGML_Q6_K))                                            \
            row_by_row(job, x, y_row0, n0, accumulate, type);                                                   \
        else if (x->rows == 1) blocks_vnni_rows(job, x, y_row0, n0, accumulate, 1, type);                             \
        else blocks_vnni_rows(job, x, y_row0, n0, accumulate, x->rows, type);                                          \
    }
FAST_512 FAST_BLOCKS_VNNI(cpu_fast_blocks_q4_k_vnni, GGML_Q4_K)
FAST_512 FAST_BLOCKS_VNNI(cpu_fast_blocks_q5_k_vnni, GGML_Q5_K)
FAST_512 FAST_BLOCKS_VNNI(cpu_fast_blocks_q6_k_vnni, GGML_Q6_K)
FAST_512 FAST_BLOCKS_VNNI(cpu_fast_blocks_q5_0_vnni, GGML_Q5_0)

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
