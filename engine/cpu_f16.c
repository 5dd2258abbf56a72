/* cpu_f16.c — IEEE binary16 conversions for the CPU backend's opt-in half-precision KV cache
 * (KVBENCH_CACHE=f16, cpu_internal.h).
 *
 * The portable converters are the readable reference: f32 -> f16 rounds to nearest, ties to even, with
 * subnormal results, overflow to infinity and NaN kept NaN (quiet, the top 9 payload bits kept, as the F16C
 * instruction does); f16 -> f32 is exact. The SIMD rows use F16C (vcvtps2ph / vcvtph2ps, 8 lanes) or
 * AVX-512F (16 lanes) and give the same bits (tests/test_cpu_f16.c checks both against numpy's float16). */
#include "cpu_internal.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CPU_F16_X86 1
#else
#define CPU_F16_X86 0
#endif

uint16_t cpu_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xFF, man = u & 0x7FFFFF;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 | (man >> 13) : 0)); /* inf, quiet NaN */
    int e = (int)exp - 127; /* unbiased exponent of a normal x */
    if (e > 15) return (uint16_t)(sign | 0x7C00);
    if (e >= -14) {
        /* normal half: keep 10 of the 23 mantissa bits, round the 13 dropped ones to nearest even; a carry out
         * of the mantissa steps the exponent (up to infinity past 65504), which the addition does by itself */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (man >> 13), rest = man & 0x1FFF;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    if (e < -25) return sign; /* below half the smallest subnormal (2^-25): rounds to zero (exp 0 lands here) */
    /* subnormal half m * 2^-24: x = full * 2^(e - 23) with the 24-bit significand full, so m = full * 2^(e + 1):
     * drop -e - 1 bits (14 to 24) and round them to nearest even */
    uint32_t full = man | 0x800000;
    int shift = -e - 1;
    uint32_t h = full >> shift, rest = full & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1))) h++; /* may round up into the smallest normal: right */
    return (uint16_t)(sign | h);
}

float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, man = h & 1023, u;
    if (exp == 31) u = sign | 0x7F800000 | (man ? 0x400000 | (man << 13) : 0);
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) u = sign;
    else { /* subnormal: normalise the mantissa */
        int e = 113;
        while (!(man & 1024)) man <<= 1, e--;
        u = sign | ((uint32_t)e << 23) | ((man & 1023) << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#if CPU_F16_X86
__attribute__((target("avx512f"))) static void to_f16_avx512(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

__attribute__((target("avx512f"))) static void to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = cpu_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void to_f16_f16c(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) static void to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = cpu_f16_to_f32(src[i]);
}

/* The AVX2 level does not promise F16C (every AVX2 CPU made has it, but cpuid says so separately: leaf 1,
 * ECX bit 29; clang's __builtin_cpu_supports does not know the name). */
static int have_f16c(void) {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}
#endif

void cpu_f32_to_f16_rows(CpuSimd simd, uint16_t *dst, const float *src, size_t n) {
#if CPU_F16_X86
    if (simd == CPU_SIMD_AVX512) {
        to_f16_avx512(dst, src, n);
        return;
    }
    if (simd == CPU_SIMD_AVX2 && have_f16c()) {
        to_f16_f16c(dst, src, n);
        return;
    }
#endif
    (void)simd;
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f32_to_f16(src[i]);
}

void cpu_f16_to_f32_rows(CpuSimd simd, float *dst, const uint16_t *src, size_t n) {
#if CPU_F16_X86
    if (simd == CPU_SIMD_AVX512) {
        to_f32_avx512(dst, src, n);
        return;
    }
    if (simd == CPU_SIMD_AVX2 && have_f16c()) {
        to_f32_f16c(dst, src, n);
        return;
    }
#endif
    (void)simd;
    for (size_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(src[i]);
}
