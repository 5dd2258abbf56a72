/* isa.h — the entries each instruction-set file gives the kernel table (kernels.h). Included by table.c,
 * which alone chooses among them, and by the files themselves (an instruction-set file hands the tails its
 * vectors do not cover to the portable entry, the layer below it). Compiled to nothing off x86-64. */
#ifndef KVBENCH_CPU_ISA_H
#define KVBENCH_CPU_ISA_H

#include "kernels.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_X86 1
#else
#define CPU_X86 0
#endif

/* portable.c: every operation, the reference */
CpuQ4RowsFn cpu_q4_rows_scalar;
CpuQ8RowsFn cpu_q8_rows_scalar;
CpuQ4RebuildFn cpu_q4_rebuild_scalar;
CpuQ8RebuildFn cpu_q8_rebuild_scalar;
CpuToF16Fn cpu_to_f16_scalar;
CpuToF32Fn cpu_to_f32_scalar;
CpuBlasOrderFn cpu_blas_order_scalar;
void cpu_fast_quantize_scalar(CpuFastX *x, int m, const float *row);
void cpu_fast_group_scalar(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);

#if CPU_X86
#include <immintrin.h>

#define CPU_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

/* A K-quant super-block's (256 elements) scales and offsets as the dequantiser computes them, for the block
 * rebuilders and the gemv order of avx2.c and avx512.c, which then rebuild 8 or 16 elements at a time in
 * registers (one arithmetic for both). Q4_K and Q5_K: scale[j] = d * scale_j and offset[j] = dmin * min_j of
 * their 8 sub-blocks of 32 (the same 12 packed bytes after d and dmin); Q6_K: scale[g] = d * scale_g of its 16
 * groups of 16. */
typedef struct {
    float scale[16], offset[16];
} CpuKScales;
typedef void CpuKScalesFn(const uint8_t *blk, CpuKScales *s);

/* Q4_K's eight 6-bit scales and mins, from the 12 packed bytes s after d and dmin, unpacked in lanes as gguf.c's
 * get_scale_min_k4 unpacks them one at a time: for j < 4 scale s[j] & 63 and min s[j + 4] & 63; for j >= 4 scale
 * (s[j + 4] & 15) | (s[j - 4] >> 6) << 4 and min (s[j + 4] >> 4) | (s[j] >> 6) << 4. */
static inline CPU_AVX2_TARGET void cpu_q4_k_scales(const uint8_t *blk, CpuKScales *s) {
    __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)(blk + 4)); /* s[0..12) and 4 bytes of codes */
    const char no = -1; /* a zero byte */
    /* per lane j: p = s[j] or s[j + 4], r = s[j + 4], q = 0 or s[j - 4], t = 0 or s[j] (j < 4 or j >= 4) */
    __m256i p = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, no, no, no, no,
                                                                         no, no, no, no)));
    __m256i r = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, no, no, no, no,
                                                                         no, no, no, no)));
    __m256i q = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(no, no, no, no, 0, 1, 2, 3, no, no, no,
                                                                         no, no, no, no, no)));
    __m256i t = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(no, no, no, no, 4, 5, 6, 7, no, no, no,
                                                                         no, no, no, no, no)));
    const __m256i bits = _mm256_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15);
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    __m256i sc = _mm256_or_si256(_mm256_and_si256(p, bits), _mm256_slli_epi32(_mm256_srli_epi32(q, 6), 4));
    __m256i mn = _mm256_or_si256(_mm256_and_si256(_mm256_srlv_epi32(r, shift), bits),
                                 _mm256_slli_epi32(_mm256_srli_epi32(t, 6), 4));
    _mm256_storeu_ps(s->scale, _mm256_mul_ps(_mm256_set1_ps(kv_f16_field(blk)), _mm256_cvtepi32_ps(sc)));
    _mm256_storeu_ps(s->offset, _mm256_mul_ps(_mm256_set1_ps(kv_f16_field(blk + 2)), _mm256_cvtepi32_ps(mn)));
}

static inline CPU_AVX2_TARGET void cpu_q6_k_scales(const uint8_t *blk, CpuKScales *s) {
    __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)(blk + 192));
    __m256 d = _mm256_set1_ps(kv_f16_field(blk + 208));
    _mm256_storeu_ps(s->scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    __m256 high = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)));
    _mm256_storeu_ps(s->scale + 8, _mm256_mul_ps(d, high));
}

/* ((c0 + c4) + (c1 + c5)) + ((c2 + c6) + (c3 + c7)) of the gemv order's eight chains (kernels.h). */
static inline CPU_AVX2_TARGET float cpu_gemv_chains_sum(__m256 c) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_hadd_ps(s, s));
}

/* avx2.c: AVX2 + FMA + F16C */
CpuQ4RowsFn cpu_q4_rows_avx2;
CpuQ8RowsFn cpu_q8_rows_avx2;
CpuQ4RebuildFn cpu_q4_rebuild_avx2;
CpuQ8RebuildFn cpu_q8_rebuild_avx2;
CpuBlockRebuildFn cpu_rebuild_q4_k_avx2;
CpuBlockRebuildFn cpu_rebuild_q5_k_avx2;
CpuBlockRebuildFn cpu_rebuild_q6_k_avx2;
CpuBlockRebuildFn cpu_rebuild_q5_0_avx2;
CpuBlockRebuildFn cpu_rebuild_q8_0_avx2;
CpuGemvOrderFn cpu_gemv_order_q4_k_avx2;
CpuGemvOrderFn cpu_gemv_order_q5_k_avx2;
CpuGemvOrderFn cpu_gemv_order_q6_k_avx2;
CpuToF16Fn cpu_to_f16_f16c;
CpuToF32Fn cpu_to_f32_f16c;
void cpu_fast_group_avx2(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);

/* avx512.c: AVX-512F */
CpuQ4RowsFn cpu_q4_rows_avx512;
CpuQ8RowsFn cpu_q8_rows_avx512;
CpuQ4RebuildFn cpu_q4_rebuild_avx512;
CpuQ8RebuildFn cpu_q8_rebuild_avx512;
CpuToF16Fn cpu_to_f16_avx512;
CpuToF32Fn cpu_to_f32_avx512;
void cpu_softmax_avx512(float *x, int n);
void cpu_swiglu_avx512(float *g, const float *u, size_t n);
CpuAttendRowsFn cpu_attend_rows_avx512;
CpuBlockRebuildFn cpu_rebuild_q4_k_avx512;
CpuBlockRebuildFn cpu_rebuild_q5_k_avx512;
CpuBlockRebuildFn cpu_rebuild_q6_k_avx512;
CpuBlockRebuildFn cpu_rebuild_q5_0_avx512;
CpuBlasOrderFn cpu_blas_order_avx512;
CpuGemvOrderFn cpu_gemv_order_q4_k_avx512;
CpuGemvOrderFn cpu_gemv_order_q5_k_avx512;
CpuGemvOrderFn cpu_gemv_order_q6_k_avx512;

/* vnni.c: AVX-512 VNNI and AMX (the fast products) */
void cpu_fast_quantize_avx512(CpuFastX *x, int m, const float *row);
void cpu_fast_group_vnni(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);
void cpu_fast_group_amx(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);
CpuFastGroupFn cpu_fast_blocks_q4_k_vnni;
CpuFastGroupFn cpu_fast_blocks_q5_k_vnni;
CpuFastGroupFn cpu_fast_blocks_q6_k_vnni;
CpuFastGroupFn cpu_fast_blocks_q5_0_vnni;
void cpu_amx_begin(void);
void cpu_amx_end(void);
int cpu_amx_permitted(void);

/* The weights of the next 16 outputs are one contiguous run (rows n0+16..n0+31): at block b a kernel asks
 * for the b-th slice of it, so the run is in cache when its turn comes (16 rows read side by side are too
 * many streams for the hardware prefetcher). Inlined by force: gcc takes a function that only prefetches for
 * one without effects and drops the call. */
static inline __attribute__((always_inline)) void prefetch_next(const CpuFastJob *job, int K, int n0, int b) {
    int per_row = K / 32;
    if (n0 + 2 * CPU_FAST_GROUP > job->N) return;
    if (job->q4) {
        const char *next = (const char *)(job->q4 + (size_t)(n0 + CPU_FAST_GROUP) * per_row);
        for (int i = 0; i < (int)sizeof(CpuQ4Block) * CPU_FAST_GROUP; i += 64) __builtin_prefetch(next + b * sizeof(CpuQ4Block) * CPU_FAST_GROUP + i, 0, 3);
    } else {
        const char *next = (const char *)(job->q8->q + (size_t)(n0 + CPU_FAST_GROUP) * K);
        for (int i = 0; i < 32 * CPU_FAST_GROUP; i += 64) __builtin_prefetch(next + b * 32 * CPU_FAST_GROUP + i, 0, 3);
        __builtin_prefetch((const char *)(job->q8->scale + (size_t)(n0 + CPU_FAST_GROUP) * per_row + b * CPU_FAST_GROUP), 0, 3);
        __builtin_prefetch((const char *)(job->q8->offset + (size_t)(n0 + CPU_FAST_GROUP) * per_row + b * CPU_FAST_GROUP), 0, 3);
    }
}
#endif

#endif
