/* gguf_writer.h — writes a small Llama-architecture GGUF (v3) whose matrices are random blocks of one ggml type,
 * for tests that need a model in every block type without committing one file per type (as
 * tests/reference/gen_quant_cases.py writes tiny_llama.gguf with gguf-py, here in C). Random codes, and the f16
 * scale fields of each block set to finite scales sized so the weights stay within ~0.1 (the offsets of those
 * fields per type are ggml-common.h's). Norms are f32 near 1. Shape legend as in engine/model.h. */
#ifndef KVBENCH_TEST_GGUF_WRITER_H
#define KVBENCH_TEST_GGUF_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/cpu/kernels.h"
#include "../engine/gguf.h"

typedef struct {
    int n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab;
} GgufShape;

/* ggml type codes and where each block type keeps its f16 scales, with the largest |code x sub-scale| a block
 * multiplies them by (so a scale of 0.1 / that keeps weights within ~0.1). */
typedef struct {
    int type;
    int f16_at[2], n_f16;
    float reach;
} GgufBlockLayout;

static const GgufBlockLayout GGUF_BLOCK_LAYOUTS[] = {
    {2, {0}, 1, 8},         /* q4_0 */
    {3, {0, 2}, 2, 15},     /* q4_1 */
    {6, {0}, 1, 16},        /* q5_0 */
    {7, {0, 2}, 2, 31},     /* q5_1 */
    {8, {0}, 1, 127},       /* q8_0 */
    {10, {80, 82}, 2, 45},  /* q2_K */
    {11, {108}, 1, 128},    /* q3_K */
    {12, {0, 2}, 2, 945},   /* q4_K */
    {13, {0, 2}, 2, 1953},  /* q5_K */
    {14, {208}, 1, 4064},   /* q6_K */
    {20, {0}, 1, 127},      /* iq4_nl */
    {23, {0}, 1, 4064},     /* iq4_xs */
};

static unsigned gguf_writer_state = 12345;
static unsigned gguf_writer_rand(void) { return (gguf_writer_state = gguf_writer_state * 1664525u + 1013904223u) >> 8; }
static float gguf_writer_uniform(void) { return (float)(gguf_writer_rand() & 0xFFFFFF) / 16777216.0f; }

static void gguf_put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void gguf_put_u32(FILE *f, uint32_t v) { gguf_put(f, &v, 4); }
static void gguf_put_u64(FILE *f, uint64_t v) { gguf_put(f, &v, 8); }
static void gguf_put_str(FILE *f, const char *s) {
    gguf_put_u64(f, strlen(s));
    gguf_put(f, s, strlen(s));
}
static void gguf_kv_u32(FILE *f, const char *key, uint32_t v) {
    gguf_put_str(f, key);
    gguf_put_u32(f, 4);
    gguf_put_u32(f, v);
}
static void gguf_kv_f32(FILE *f, const char *key, float v) {
    gguf_put_str(f, key);
    gguf_put_u32(f, 6);
    gguf_put(f, &v, 4);
}

/* n elements of `type` as random bytes with sane scales (block types), or as f16 / bf16 / f32 values near 0
 * (or near 1 when `norm`). Returns a malloc'd buffer of *bytes. */
static uint8_t *gguf_random_tensor(int type, uint64_t n, int norm, size_t *bytes) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    *bytes = (size_t)(n / t->block) * t->bytes;
    uint8_t *p = malloc(*bytes);
    for (size_t i = 0; i < *bytes; i++) p[i] = (uint8_t)gguf_writer_rand();
    if (t->block == 1) {
        for (uint64_t i = 0; i < n; i++) {
            float v = norm ? 1.0f + 0.2f * (gguf_writer_uniform() - 0.5f) : 0.2f * (gguf_writer_uniform() - 0.5f);
            uint32_t u;
            memcpy(&u, &v, 4);
            if (type == 0) memcpy(p + 4 * i, &v, 4);
            else {
                uint16_t h = type == 1 ? cpu_f32_to_f16(v) : (uint16_t)(u >> 16);
                memcpy(p + 2 * i, &h, 2);
            }
        }
        return p;
    }
    for (size_t li = 0; li < sizeof GGUF_BLOCK_LAYOUTS / sizeof GGUF_BLOCK_LAYOUTS[0]; li++) {
        const GgufBlockLayout *l = &GGUF_BLOCK_LAYOUTS[li];
        if (l->type != type) continue;
        for (uint64_t b = 0; b < n / t->block; b++)
            for (int k = 0; k < l->n_f16; k++) {
                uint16_t h = cpu_f32_to_f16((0.5f + gguf_writer_uniform()) * 0.1f / l->reach);
                memcpy(p + b * t->bytes + l->f16_at[k], &h, 2);
            }
    }
    return p;
}

/* Writes a llama GGUF of shape s at path: every matrix (token_embd, output, and each layer's seven) in
 * `type`, head dim d_model / n_heads. Returns 0, or -1 when the file cannot be written. */
static int gguf_write_llama(const char *path, const GgufShape *s, int type) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int D = s->d_model, hd = s->d_model, kd = s->n_kv_heads * (s->d_model / s->n_heads), F = s->d_ff;
    enum { MAXT = 64 };
    char names[MAXT][48];
    uint64_t rows[MAXT], cols[MAXT];
    int types[MAXT], n = 0;
#define GGUF_TENSOR(name_fmt, layer, r, c, ty)                                                                     \
    (snprintf(names[n], sizeof names[n], name_fmt, layer), rows[n] = (uint64_t)(r), cols[n] = (uint64_t)(c),       \
     types[n++] = (ty))
    GGUF_TENSOR("token_embd.weight%.0d", 0, s->vocab, D, type);
    GGUF_TENSOR("output_norm.weight%.0d", 0, 1, D, 0);
    GGUF_TENSOR("output.weight%.0d", 0, s->vocab, D, type);
    for (int l = 0; l < s->n_layers; l++) {
        GGUF_TENSOR("blk.%d.attn_norm.weight", l, 1, D, 0);
        GGUF_TENSOR("blk.%d.attn_q.weight", l, hd, D, type);
        GGUF_TENSOR("blk.%d.attn_k.weight", l, kd, D, type);
        GGUF_TENSOR("blk.%d.attn_v.weight", l, kd, D, type);
        GGUF_TENSOR("blk.%d.attn_output.weight", l, D, hd, type);
        GGUF_TENSOR("blk.%d.ffn_norm.weight", l, 1, D, 0);
        GGUF_TENSOR("blk.%d.ffn_gate.weight", l, F, D, type);
        GGUF_TENSOR("blk.%d.ffn_up.weight", l, F, D, type);
        GGUF_TENSOR("blk.%d.ffn_down.weight", l, D, F, type);
    }
#undef GGUF_TENSOR
    gguf_put(f, "GGUF", 4);
    gguf_put_u32(f, 3);
    gguf_put_u64(f, (uint64_t)n);
    gguf_put_u64(f, 8);
    gguf_put_str(f, "general.architecture");
    gguf_put_u32(f, 8);
    gguf_put_str(f, "llama");
    gguf_kv_u32(f, "llama.block_count", (uint32_t)s->n_layers);
    gguf_kv_u32(f, "llama.context_length", 256);
    gguf_kv_u32(f, "llama.embedding_length", (uint32_t)D);
    gguf_kv_u32(f, "llama.feed_forward_length", (uint32_t)F);
    gguf_kv_u32(f, "llama.attention.head_count", (uint32_t)s->n_heads);
    gguf_kv_u32(f, "llama.attention.head_count_kv", (uint32_t)s->n_kv_heads);
    gguf_kv_f32(f, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    uint8_t *data[MAXT];
    size_t bytes[MAXT], offset = 0;
    for (int i = 0; i < n; i++) {
        data[i] = gguf_random_tensor(types[i], rows[i] * cols[i], types[i] == 0, &bytes[i]);
        gguf_put_str(f, names[i]);
        gguf_put_u32(f, rows[i] == 1 ? 1 : 2);
        gguf_put_u64(f, cols[i]);
        if (rows[i] != 1) gguf_put_u64(f, rows[i]);
        gguf_put_u32(f, (uint32_t)types[i]);
        gguf_put_u64(f, offset);
        offset += (bytes[i] + 31) & ~(size_t)31;
    }
    static const uint8_t zeros[32];
    long at = ftell(f);
    gguf_put(f, zeros, (size_t)((32 - at % 32) % 32));
    for (int i = 0; i < n; i++) {
        gguf_put(f, data[i], bytes[i]);
        gguf_put(f, zeros, ((bytes[i] + 31) & ~(size_t)31) - bytes[i]);
        free(data[i]);
    }
    return fclose(f) ? -1 : 0;
}

#endif
