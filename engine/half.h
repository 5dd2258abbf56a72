/* half.h — IEEE binary16 to binary32, the one decoder the engine has: GGUF f16 tensors and block scales
 * (gguf.c), the CPU kernels' packed scales (cpu/), the half-precision KV cache. Exact (every binary16 value is
 * a binary32 value); a NaN comes out quiet with its payload, as F16C's vcvtph2ps and ggml give it, so the
 * vector paths and this one agree bit for bit. The encoder, which rounds, is cpu_f32_to_f16 (cpu/kernels.h). */
#ifndef KVBENCH_HALF_H
#define KVBENCH_HALF_H

#include <stdint.h>
#include <string.h>

static inline float kv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in binary32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    bits = exp == 31 ? sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0)
                     : sign | ((exp + 112) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A little-endian binary16 field of a file or block (any alignment). */
static inline float kv_f16_field(const uint8_t *p) { return kv_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

#endif
