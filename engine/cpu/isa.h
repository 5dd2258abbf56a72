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
/* Q4_K's 6-bit scale and min of sub-block j from the block's 12 packed scale bytes s (gguf.c's
 * get_scale_min_k4). */
static inline void cpu_q4_k_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    *sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
}

/* avx2.c: AVX2 + FMA + F16C */
CpuQ4RowsFn cpu_q4_rows_avx2;
CpuQ8RowsFn cpu_q8_rows_avx2;
CpuQ4RebuildFn cpu_q4_rebuild_avx2;
CpuQ8RebuildFn cpu_q8_rebuild_avx2;
CpuBlockRebuildFn cpu_rebuild_q4_k_avx2;
CpuBlockRebuildFn cpu_rebuild_q6_k_avx2;
CpuBlockRebuildFn cpu_rebuild_q5_0_avx2;
CpuBlockRebuildFn cpu_rebuild_q8_0_avx2;
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
CpuBlockRebuildFn cpu_rebuild_q6_k_avx512;
CpuBlockRebuildFn cpu_rebuild_q5_0_avx512;
CpuBlasOrderFn cpu_blas_order_avx512;

/* vnni.c: AVX-512 VNNI and AMX (the fast products) */
void cpu_fast_quantize_avx512(CpuFastX *x, int m, const float *row);
void cpu_fast_group_vnni(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);
void cpu_fast_group_amx(const CpuFastJob *job, const CpuFastX *x, int y_row0, int n0, int n1, int accumulate);
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
