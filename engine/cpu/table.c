/* table.c — the one place that knows the instruction sets: probes the CPU once per backend open and fills
 * the kernel table (kernels.h) with the entries of portable.c, avx2.c, avx512.c and vnni.c. */
#include "isa.h"

#include <string.h>

#include "../gguf.h"

#if CPU_X86
#include <cpuid.h>
#endif

typedef struct {
    int avx2;    /* AVX2 + FMA */
    int f16c;    /* CPUID leaf 1, ECX bit 29 (the AVX2 level does not promise it; clang 14 has no name for it) */
    int avx512;  /* AVX-512F */
    int vnni;    /* AVX-512F, BW, VL and VNNI */
    int amx;     /* AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), and Linux grants the tile state */
} CpuFeatures;

static CpuFeatures probe(void) {
    CpuFeatures f = {0, 0, 0, 0, 0};
#if CPU_X86
    __builtin_cpu_init();
    unsigned a, b, c, d;
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f");
    f.vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    f.amx = f.vnni && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) && cpu_amx_permitted();
#endif
    return f;
}

static const char *const simd_names[CPU_SIMD_LEVELS] = {"scalar", "avx2", "avx512"};
static const char *const fast_names[CPU_FAST_KERNELS] = {"scalar", "avx2", "vnni", "amx"};

const char *cpu_simd_name(CpuSimd simd) { return simd_names[simd]; }
const char *cpu_fast_kernel_name(CpuFastKernel k) { return fast_names[k]; }

static int simd_usable(const CpuFeatures *f, CpuSimd simd) {
    return simd == CPU_SIMD_SCALAR || (simd == CPU_SIMD_AVX2 && f->avx2) || (simd == CPU_SIMD_AVX512 && f->avx512);
}

static int fast_usable(const CpuFeatures *f, CpuFastKernel k) {
    return k == CPU_FAST_SCALAR || (k == CPU_FAST_AVX2 && f->avx2 && f->f16c) || (k == CPU_FAST_VNNI && f->vnni) ||
           (k == CPU_FAST_AMX && f->amx);
}

int cpu_fast_kernel_usable(CpuFastKernel k) {
    CpuFeatures f = probe();
    return fast_usable(&f, k);
}

/* The exact entries of level simd. */
static void fill_exact(CpuKernels *k, const CpuFeatures *f, CpuSimd simd) {
    *k = (CpuKernels){.simd = simd, .simd_name = simd_names[simd], .q4_rows = cpu_q4_rows_scalar,
                      .q8_rows = cpu_q8_rows_scalar, .q4_rebuild = cpu_q4_rebuild_scalar,
                      .q8_rebuild = cpu_q8_rebuild_scalar, .to_f16 = cpu_to_f16_scalar, .to_f32 = cpu_to_f32_scalar,
                      .softmax = cpu_softmax, .swiglu = cpu_swiglu, .attend_rows = NULL, .attend_multiple = 0,
                      .blas_order = NULL};
    /* the block rebuilders: every ggml type's dequantiser (the contract with gguf.c: a type gains its entry here
     * when its dequantiser lands there), replaced below by a vector version where one exists */
    for (int t = 0; t < CPU_GGML_TYPES; t++) {
        const GgmlTypeTraits *traits = ggml_type_traits(t);
        k->rebuild[t] = traits ? traits->dequant : NULL;
    }
    (void)f;
#if CPU_X86
    if (simd != CPU_SIMD_SCALAR) { /* the AVX2 block rebuilders and gemv orders (the AVX-512 level replaces some below) */
        if (k->rebuild[GGML_Q4_K]) k->rebuild[GGML_Q4_K] = cpu_rebuild_q4_k_avx2;
        if (k->rebuild[GGML_Q5_K]) k->rebuild[GGML_Q5_K] = cpu_rebuild_q5_k_avx2;
        if (k->rebuild[GGML_Q6_K]) k->rebuild[GGML_Q6_K] = cpu_rebuild_q6_k_avx2;
        if (k->rebuild[GGML_Q5_0]) k->rebuild[GGML_Q5_0] = cpu_rebuild_q5_0_avx2;
        if (k->rebuild[GGML_Q8_0]) k->rebuild[GGML_Q8_0] = cpu_rebuild_q8_0_avx2;
        if (k->rebuild[GGML_Q4_K]) k->gemv_order[GGML_Q4_K] = cpu_gemv_order_q4_k_avx2;
        if (k->rebuild[GGML_Q5_K]) k->gemv_order[GGML_Q5_K] = cpu_gemv_order_q5_k_avx2;
        if (k->rebuild[GGML_Q6_K]) k->gemv_order[GGML_Q6_K] = cpu_gemv_order_q6_k_avx2;
    }
    if (simd == CPU_SIMD_AVX2) {
        k->q4_rows = cpu_q4_rows_avx2, k->q8_rows = cpu_q8_rows_avx2;
        k->q4_rebuild = cpu_q4_rebuild_avx2, k->q8_rebuild = cpu_q8_rebuild_avx2;
        if (f->f16c) k->to_f16 = cpu_to_f16_f16c, k->to_f32 = cpu_to_f32_f16c;
    } else if (simd == CPU_SIMD_AVX512) {
        k->q4_rows = cpu_q4_rows_avx512, k->q8_rows = cpu_q8_rows_avx512;
        k->q4_rebuild = cpu_q4_rebuild_avx512, k->q8_rebuild = cpu_q8_rebuild_avx512;
        k->to_f16 = cpu_to_f16_avx512, k->to_f32 = cpu_to_f32_avx512;
        k->softmax = cpu_softmax_avx512, k->swiglu = cpu_swiglu_avx512;
        k->attend_rows = cpu_attend_rows_avx512, k->attend_multiple = 16;
        k->blas_order = cpu_blas_order_avx512;
        if (k->rebuild[GGML_Q4_K]) k->rebuild[GGML_Q4_K] = cpu_rebuild_q4_k_avx512;
        if (k->rebuild[GGML_Q5_K]) k->rebuild[GGML_Q5_K] = cpu_rebuild_q5_k_avx512;
        if (k->rebuild[GGML_Q6_K]) k->rebuild[GGML_Q6_K] = cpu_rebuild_q6_k_avx512;
        if (k->rebuild[GGML_Q4_K]) k->gemv_order[GGML_Q4_K] = cpu_gemv_order_q4_k_avx512;
        if (k->rebuild[GGML_Q5_K]) k->gemv_order[GGML_Q5_K] = cpu_gemv_order_q5_k_avx512;
        if (k->rebuild[GGML_Q6_K]) k->gemv_order[GGML_Q6_K] = cpu_gemv_order_q6_k_avx512;
        if (k->rebuild[GGML_Q5_0]) k->rebuild[GGML_Q5_0] = cpu_rebuild_q5_0_avx512;
    }
#endif
}

static CpuFastKernels fast_entries(CpuFastKernel kernel) {
    CpuFastKernels e = {.name = fast_names[kernel], .quantize = cpu_fast_quantize_scalar, .group = cpu_fast_group_scalar};
    /* a source's blocks: the portable kernel for every type it takes, a vector one where there is one (AMX's
     * tiles take VNNI's: the same bits) */
    for (int type = 0; type < CPU_GGML_TYPES; type++)
        if (cpu_fast_block_type(type)) e.blocks[type] = cpu_fast_group_scalar;
#if CPU_X86
    if (kernel == CPU_FAST_AVX2) e.group = cpu_fast_group_avx2;
    if (kernel >= CPU_FAST_VNNI) {
        e.quantize = cpu_fast_quantize_avx512, e.group = cpu_fast_group_vnni;
        e.blocks[GGML_Q4_K] = cpu_fast_blocks_q4_k_vnni;
        e.blocks[GGML_Q5_K] = cpu_fast_blocks_q5_k_vnni;
        e.blocks[GGML_Q6_K] = cpu_fast_blocks_q6_k_vnni;
        e.blocks[GGML_Q5_0] = cpu_fast_blocks_q5_0_vnni;
    }
    if (kernel == CPU_FAST_AMX) e.group = cpu_fast_group_amx, e.begin = cpu_amx_begin, e.end = cpu_amx_end;
#endif
    return e;
}

int cpu_kernels_init(CpuKernels *k, const char *simd, const char *fast, KvErr *err) {
    CpuFeatures f = probe();
    CpuSimd best = f.avx512 ? CPU_SIMD_AVX512 : f.avx2 ? CPU_SIMD_AVX2 : CPU_SIMD_SCALAR, level = best;
    if (simd && *simd) {
        int i = 0;
        while (i < CPU_SIMD_LEVELS && strcmp(simd, simd_names[i])) i++;
        if (i == CPU_SIMD_LEVELS)
            return kv_fail(err, "simd '%s': unknown instruction set (scalar, avx2 or avx512)", simd);
        if (!simd_usable(&f, (CpuSimd)i))
            return kv_fail(err, "simd '%s': this CPU does not support %s (it supports: scalar%s%s)", simd, simd,
                           f.avx2 ? ", avx2" : "", f.avx512 ? ", avx512" : "");
        level = (CpuSimd)i;
    }
    /* the fast kernel: the best this CPU runs at that level, or the one named */
    CpuFastKernel kernel = level == CPU_SIMD_SCALAR                             ? CPU_FAST_SCALAR
                           : level == CPU_SIMD_AVX512 && f.amx                  ? CPU_FAST_AMX
                           : level == CPU_SIMD_AVX512 && f.vnni                 ? CPU_FAST_VNNI
                           : fast_usable(&f, CPU_FAST_AVX2)                     ? CPU_FAST_AVX2
                                                                                : CPU_FAST_SCALAR;
    if (fast && *fast) {
        int i = 0;
        while (i < CPU_FAST_KERNELS && strcmp(fast, fast_names[i])) i++;
        if (i == CPU_FAST_KERNELS)
            return kv_fail(err, "fast_kernel '%s': unknown fast kernel (scalar, avx2, vnni or amx)", fast);
        if (!fast_usable(&f, (CpuFastKernel)i))
            return kv_fail(err, "fast_kernel '%s': this CPU (or its kernel) does not run it; best here: %s", fast,
                           fast_names[kernel]);
        kernel = (CpuFastKernel)i;
    }
    fill_exact(k, &f, level);
    k->simd_auto = best;
    k->fast = kernel;
    k->fast_many = fast_entries(kernel);
    /* AMX's tile products pay off from about 8 rows (measured on SmolLM2's matrices); below, its VNNI kernel,
     * which gives the same bits */
    k->fast_few = fast_entries(kernel == CPU_FAST_AMX ? CPU_FAST_VNNI : kernel);
    return 0;
}
