/* pack.c — recovering the codes of weights that are exactly GGUF-style blocks (kernels.h: cpu_pack_q4,
 * cpu_pack_exact): a Q4_1 / Q4_0 matrix's f32 weights back to 4-bit blocks, a Q8_0's to int8 codes, so a
 * decode step streams 0.625 or 1.25 bytes per weight instead of 4. */
#include "kernels.h"

#include <math.h>
#include <string.h>


/* f16 bits of x when x is exactly an f16 value, else returns 0 and leaves *out alone. */
static int f32_to_f16_exact(float x, uint16_t *out) {
    if (!isfinite(x) || fabsf(x) > 65504.0f) return 0;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    float a = fabsf(x);
    uint16_t bits;
    if (a < ldexpf(1.0f, -14)) { /* subnormal: a multiple of 2^-24 */
        float m = ldexpf(a, 24);
        if (m != rintf(m)) return 0;
        bits = (uint16_t)m;
    } else {
        int e;
        float f = frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): 11 significant bits */
        float m = ldexpf(f, 11);
        if (m != rintf(m)) return 0;
        bits = (uint16_t)(((e + 14) << 10) | ((int)m - 1024));
    }
    *out = sign | bits;
    return kv_f16_to_f32(*out | sign) == x;
}

/* ---------------------------------------------------------------------------------------------- packing */

/* Nearest f16 value of x > 0 (11 significant bits), kept in a float; 0 when x is out of f16's range. */
static float snap_f16(float x) {
    int e;
    frexpf(x, &e);
    float v = ldexpf(rintf(ldexpf(x, 11 - e)), e - 11);
    uint16_t bits;
    return f32_to_f16_exact(v, &bits) ? v : 0.0f;
}

/* Codes (w - offset) / s for the offsets lo - shift * s that are f16 values (the block minimum for Q4_1-style
 * blocks; for Q4_0-style ones, -8 * scale, the minimum less a whole number of scales). */
static int try_q4_scale(const float *w, float s, float lo, float hi, CpuQ4Block *blk) {
    uint16_t s_bits, o_bits;
    if (!(s > 0) || !f32_to_f16_exact(s, &s_bits)) return 0;
    float top = rintf((hi - lo) / s);
    for (int shift = 0; top <= 15 && shift <= 15 - (int)top; shift++) {
        float offset = lo - (float)shift * s;
        if (!f32_to_f16_exact(offset, &o_bits)) continue;
        int ok = 1;
        uint8_t codes[32];
        for (int i = 0; ok && i < 32; i++) {
            float c = rintf((w[i] - offset) / s);
            ok = c >= 0 && c <= 15 && c * s + offset == w[i];
            codes[i] = ok ? (uint8_t)c : 0;
        }
        if (!ok) continue;
        blk->scale = s_bits;
        blk->offset = o_bits;
        for (int i = 0; i < 16; i++) blk->codes[i] = (uint8_t)(codes[i] | codes[i + 16] << 4);
        return 1;
    }
    return 0;
}

/* Codes 0..15 of one block. GGUF's Q4_1 quantiser maps the block's range onto codes 0..15, so the scale is
 * first tried as (max - min) / 15 on the f16 grid; otherwise it is the smallest gap between distinct values
 * divided by k (the gap itself unless no two codes of the block are adjacent). */
static int pack_q4_block(const float *w, CpuQ4Block *blk) {
    float lo = w[0], hi = w[0];
    for (int i = 1; i < 32; i++) lo = w[i] < lo ? w[i] : lo, hi = w[i] > hi ? w[i] : hi;
    if (hi == lo) { /* a constant block: every code 0 */
        uint16_t o_bits;
        if (!f32_to_f16_exact(lo, &o_bits)) return 0;
        memset(blk, 0, sizeof *blk);
        blk->offset = o_bits;
        return 1;
    }
    if (try_q4_scale(w, snap_f16((hi - lo) / 15.0f), lo, hi, blk)) return 1;
    float sorted[32], step = INFINITY;
    for (int i = 0; i < 32; i++) {
        int j = i;
        for (; j > 0 && sorted[j - 1] > w[i]; j--) sorted[j] = sorted[j - 1];
        sorted[j] = w[i];
    }
    for (int i = 1; i < 32; i++) {
        float gap = sorted[i] - sorted[i - 1];
        if (gap > 0 && gap < step) step = gap;
    }
    for (int k = 1; k <= 15 && (hi - lo) / (step / (float)k) < 15.5f; k++)
        if (try_q4_scale(w, snap_f16(step / (float)k), lo, hi, blk)) return 1;
    return 0;
}

int cpu_pack_q4(CpuQ4Block *blocks, const float *w, int N, int K) {
    if (K % 32) return 0;
    int per_row = K / 32, ok = 1;
#pragma omp parallel for schedule(static) reduction(&& : ok)
    for (int n = 0; n < N; n++)
        for (int b = 0; ok && b < per_row; b++)
            ok = pack_q4_block(w + (size_t)n * K + (size_t)b * 32, &blocks[(size_t)n * per_row + b]);
    return ok;
}

/* Nearest f16 value (round to nearest even), kept in a float: the grid of GGUF block scales and offsets. */
static float round_to_f16(float x) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    frexpf(x, &e);                  /* |x| = f * 2^e, f in [0.5, 1): 11 significant bits above 2^(e-11) */
    int lsb = e - 11 < -24 ? -24 : e - 11; /* f16 subnormals step by 2^-24 */
    return ldexpf(rintf(ldexpf(x, -lsb)), lsb);
}

/* Whether block w[32] equals (q * scale) + offset for integer q in int8 range, with scale one of the f16
 * values near the smallest gap between distinct elements divided by k (the gap is scale itself unless no
 * two codes of the block are adjacent). Writes the codes on success. */
static int pack_block_with_offset(const float *w, float offset, int8_t *q, float *scale) {
    float sorted[CPU_PACK_BLOCK], step = INFINITY;
    for (int i = 0; i < CPU_PACK_BLOCK; i++) {
        int j = i;
        for (; j > 0 && sorted[j - 1] > w[i]; j--) sorted[j] = sorted[j - 1];
        sorted[j] = w[i];
    }
    for (int i = 1; i < CPU_PACK_BLOCK; i++) {
        float gap = sorted[i] - sorted[i - 1];
        if (gap > 0 && gap < step) step = gap;
    }
    if (step == INFINITY) { /* a constant block: all codes 0 when it equals the offset */
        memset(q, 0, CPU_PACK_BLOCK);
        *scale = 0.0f;
        return w[0] == offset;
    }
    for (int k = 1; k <= 4; k++) {
        float s = round_to_f16(step / (float)k);
        int ok = s > 0;
        for (int i = 0; ok && i < CPU_PACK_BLOCK; i++) {
            float code = rintf((w[i] - offset) / s);
            ok = code >= -128 && code <= 127 && code * s + offset == w[i];
            q[i] = ok ? (int8_t)code : 0;
        }
        if (ok) {
            *scale = s;
            return 1;
        }
    }
    return 0;
}

int cpu_pack_exact(CpuPacked *p, const float *w, int N, int K) {
    if (K % CPU_PACK_BLOCK) return 0;
    int blocks = K / CPU_PACK_BLOCK, ok = 1;
#pragma omp parallel for schedule(static) reduction(&& : ok)
    for (int n = 0; n < N; n++) {
        for (int b = 0; ok && b < blocks; b++) {
            size_t at = (size_t)n * K + (size_t)b * CPU_PACK_BLOCK, bi = (size_t)n * blocks + b;
            const float *wb = w + at;
            float lo = wb[0];
            for (int i = 1; i < CPU_PACK_BLOCK; i++) lo = wb[i] < lo ? wb[i] : lo;
            /* Q4_1-style codes sit above the block minimum; Q8_0 / Q4_0-style codes are symmetric around 0 */
            p->offset[bi] = lo;
            if (pack_block_with_offset(wb, lo, p->q + at, &p->scale[bi])) continue;
            p->offset[bi] = 0.0f;
            ok = pack_block_with_offset(wb, 0.0f, p->q + at, &p->scale[bi]);
        }
    }
    return ok;
}
