/* gguf.c — GGUF v3 reader and the ggml dequantisers kvbench needs.
 *
 * The file is mmap'd read-only and parsed once with a bounds-checked cursor: every length, count, offset
 * and size read from the file is checked against the file size before it is used, so a truncated or
 * corrupt file yields one error line ("PATH: problem at offset N") and never a read past the mapping.
 * String arrays (vocabularies, merges) get a table of element pointers at open, so element access is O(1).
 * Spec: docs/spec/models.md §1 (layout §1.1, types §1.4, block layouts and dequantisation §1.5). */
#include "gguf.h"
#include "half.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NAME 64   /* GGML_MAX_NAME, including the NUL */
#define GGUF_MAX_DIMS 4

/* ---------------------------------------------------------------------------------------------------------
 * ggml type table: block size and bytes per block for every type ggml defines (so any valid file can be
 * opened and size-checked), and a dequantiser for the ones kvbench supports. */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static void dequant_f32(const uint8_t *src, float *dst, size_t n) { memcpy(dst, src, n * sizeof(float)); }

static void dequant_f16(const uint8_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kv_f16_field(src + 2 * i);
}

static void dequant_bf16(const uint8_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)rd16(src + 2 * i) << 16;
        memcpy(&dst[i], &bits, 4);
    }
}

/* Q4_0 / Q4_1: low nibbles are elements 0..15, high nibbles 16..31 (not interleaved). */
static void dequant_q4_0(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 18, dst += 32) {
        float d = kv_f16_field(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((qs[j] & 0x0F) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 20, dst += 32) {
        float d = kv_f16_field(src), m = kv_f16_field(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(qs[j] & 0x0F) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 32 five-bit codes of a Q5_0 / Q5_1 block: low nibbles laid out as Q4_0's, the fifth bit of element j in
 * bit j of qh (a little-endian u32). */
void ggml_q5_codes(const uint8_t *qh, const uint8_t *qs, int q[32]) {
    uint32_t h = rd32(qh);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (int)((h >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
    }
}

/* Q5_0: d (f16), qh, qs; value (q - 16) * d. */
static void dequant_q5_0(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 22, dst += 32) {
        float d = kv_f16_field(src);
        int q[32];
        ggml_q5_codes(src + 2, src + 6, q);
        for (int j = 0; j < 32; j++) dst[j] = (float)(q[j] - 16) * d;
    }
}

/* Q5_1: d, m (f16), qh, qs; value q * d + m. */
static void dequant_q5_1(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 24, dst += 32) {
        float d = kv_f16_field(src), m = kv_f16_field(src + 2);
        int q[32];
        ggml_q5_codes(src + 4, src + 8, q);
        for (int j = 0; j < 32; j++) dst[j] = (float)q[j] * d + m;
    }
}

static void dequant_q8_0(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 34, dst += 32) {
        float d = kv_f16_field(src);
        for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)src[2 + j] * d;
    }
}

void ggml_q4_k_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void dequant_q4_k(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 144, dst += 256) {
        float d = kv_f16_field(src), dmin = kv_f16_field(src + 2);
        const uint8_t *scales = src + 4, *qs = src + 16;
        for (int c = 0; c < 4; c++) {
            int sc0, mn0, sc1, mn1;
            ggml_q4_k_scale_min(2 * c, scales, &sc0, &mn0);
            ggml_q4_k_scale_min(2 * c + 1, scales, &sc1, &mn1);
            float d0 = d * (float)sc0, m0 = dmin * (float)mn0, d1 = d * (float)sc1, m1 = dmin * (float)mn1;
            for (int l = 0; l < 32; l++) {
                dst[64 * c + l] = d0 * (float)(qs[32 * c + l] & 0x0F) - m0;
                dst[64 * c + 32 + l] = d1 * (float)(qs[32 * c + l] >> 4) - m1;
            }
        }
    }
}

static void dequant_q6_k(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 210, dst += 256) {
        float d = kv_f16_field(src + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = src + 64 * h, *qh = src + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(src + 192 + 8 * h);
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* Q2_K: scales[16] @0, qs[64] @16, d @80, dmin @82. 16 sub-blocks of 16; scales[s] holds sub-block s's 4-bit
 * scale (low nibble) and 4-bit min (high). Element i's 2-bit code is bits 2j..2j+1 of qs[32n + l], with
 * n = i / 128, j = i / 32 % 4, l = i % 32. Value d * sc * q - dmin * mn. */
static void dequant_q2_k(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 84, dst += 256) {
        const uint8_t *scales = src, *qs = src + 16;
        float d = kv_f16_field(src + 80), dmin = kv_f16_field(src + 82);
        for (int s = 0; s < 16; s++) {
            float dl = d * (float)(scales[s] & 0x0F), ml = dmin * (float)(scales[s] >> 4);
            for (int i = 16 * s; i < 16 * s + 16; i++)
                dst[i] = dl * (float)((qs[32 * (i / 128) + i % 32] >> (2 * (i / 32 % 4))) & 3) - ml;
        }
    }
}

/* Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. 16 sub-blocks of 16 with signed 6-bit scales: the
 * low 4 bits of scale s are scales[s] & 15 (s < 8) or scales[s - 8] >> 4, the high 2 bits are bits 2(s/4)..
 * of scales[8 + s % 4]; scale - 32. Element i's code: 2 bits as Q2_K's, minus 4 unless bit i / 32 of hmask[i % 32]
 * is set. Value d * (scale - 32) * code. */
static void dequant_q3_k(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 110, dst += 256) {
        const uint8_t *hmask = src, *qs = src + 32, *scales = src + 96;
        float d = kv_f16_field(src + 108);
        for (int s = 0; s < 16; s++) {
            int lo = s < 8 ? scales[s] & 0x0F : scales[s - 8] >> 4, hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            float dl = d * (float)((lo | hi << 4) - 32);
            for (int i = 16 * s; i < 16 * s + 16; i++) {
                int q = (qs[32 * (i / 128) + i % 32] >> (2 * (i / 32 % 4))) & 3;
                dst[i] = dl * (float)(q - ((hmask[i % 32] >> (i / 32)) & 1 ? 0 : 4));
            }
        }
    }
}

/* Q5_K: d @0, dmin @2, scales[12] @4 (as Q4_K's), qh[32] @16, qs[128] @48. Sub-block s (32 elements) takes
 * the low (s even) or high nibbles of qs[32 (s/2) .. +31] and its fifth bit from bit s of qh[l]. Value
 * d * sc * q - dmin * mn. */
static void dequant_q5_k(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 176, dst += 256) {
        float d = kv_f16_field(src), dmin = kv_f16_field(src + 2);
        const uint8_t *scales = src + 4, *qh = src + 16, *qs = src + 48;
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            ggml_q4_k_scale_min(s, scales, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            for (int l = 0; l < 32; l++) {
                int q = ((qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0F) | ((qh[l] >> s) & 1) << 4;
                dst[32 * s + l] = dl * (float)q - ml;
            }
        }
    }
}

/* IQ4_NL and IQ4_XS: 4-bit codes index a fixed non-linear table (kvalues_iq4nl). */
static const int8_t IQ4NL_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* 32 elements from 16 code bytes laid out as Q4_0's, times dl. */
static void iq4_row(const uint8_t *qs, float dl, float *dst) {
    for (int j = 0; j < 16; j++) {
        dst[j] = dl * (float)IQ4NL_VALUES[qs[j] & 0x0F];
        dst[j + 16] = dl * (float)IQ4NL_VALUES[qs[j] >> 4];
    }
}

/* IQ4_NL: d @0, qs[16] @2. */
static void dequant_iq4_nl(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 18, dst += 32) iq4_row(src + 2, kv_f16_field(src), dst);
}

/* IQ4_XS: d @0, scales_h (u16) @2, scales_l[4] @4, qs[128] @8. Sub-block s (32 elements, qs[16s..]) has the
 * 6-bit scale (scales_l[s/2] >> 4(s%2) & 15) | (scales_h >> 2s & 3) << 4, minus 32. */
static void dequant_iq4_xs(const uint8_t *src, float *dst, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++, src += 136, dst += 256) {
        float d = kv_f16_field(src);
        unsigned sh = rd16(src + 2);
        for (int s = 0; s < 8; s++) {
            int ls = ((src[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (int)((sh >> (2 * s)) & 3) << 4;
            iq4_row(src + 8 + 16 * s, d * (float)(ls - 32), dst + 32 * s);
        }
    }
}

/* Indexed by ggml_type; entries with a NULL name are ids ggml has retired. */
static const GgmlTypeTraits TYPE_TRAITS[] = {
    [GGML_F32] = {"f32", 1, 4, dequant_f32},
    [GGML_F16] = {"f16", 1, 2, dequant_f16},
    [GGML_Q4_0] = {"q4_0", 32, 18, dequant_q4_0},
    [GGML_Q4_1] = {"q4_1", 32, 20, dequant_q4_1},
    [GGML_Q5_0] = {"q5_0", 32, 22, dequant_q5_0},
    [GGML_Q5_1] = {"q5_1", 32, 24, dequant_q5_1},
    [GGML_Q8_0] = {"q8_0", 32, 34, dequant_q8_0},
    [9] = {"q8_1", 32, 40, NULL},
    [GGML_Q2_K] = {"q2_K", 256, 84, dequant_q2_k},
    [GGML_Q3_K] = {"q3_K", 256, 110, dequant_q3_k},
    [GGML_Q4_K] = {"q4_K", 256, 144, dequant_q4_k},
    [GGML_Q5_K] = {"q5_K", 256, 176, dequant_q5_k},
    [GGML_Q6_K] = {"q6_K", 256, 210, dequant_q6_k},
    [15] = {"q8_K", 256, 292, NULL},
    [16] = {"iq2_xxs", 256, 66, NULL},
    [17] = {"iq2_xs", 256, 74, NULL},
    [18] = {"iq3_xxs", 256, 98, NULL},
    [19] = {"iq1_s", 256, 50, NULL},
    [GGML_IQ4_NL] = {"iq4_nl", 32, 18, dequant_iq4_nl},
    [21] = {"iq3_s", 256, 110, NULL},
    [22] = {"iq2_s", 256, 82, NULL},
    [GGML_IQ4_XS] = {"iq4_xs", 256, 136, dequant_iq4_xs},
    [24] = {"i8", 1, 1, NULL},
    [25] = {"i16", 1, 2, NULL},
    [26] = {"i32", 1, 4, NULL},
    [27] = {"i64", 1, 8, NULL},
    [28] = {"f64", 1, 8, NULL},
    [29] = {"iq1_m", 256, 56, NULL},
    [GGML_BF16] = {"bf16", 1, 2, dequant_bf16},
    [34] = {"tq1_0", 256, 54, NULL},
    [35] = {"tq2_0", 256, 66, NULL},
    [39] = {"mxfp4", 32, 17, NULL},
};
#define N_TYPES ((int)(sizeof TYPE_TRAITS / sizeof TYPE_TRAITS[0]))

const GgmlTypeTraits *ggml_type_traits(int type) {
    if (type < 0 || type >= N_TYPES || !TYPE_TRAITS[type].name) return NULL;
    return &TYPE_TRAITS[type];
}

const char *ggml_type_name(int type) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    return t ? t->name : "unknown";
}

size_t ggml_type_bytes(int type, uint64_t n_elems) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    if (!t || n_elems % t->block) return 0;
    return (size_t)(n_elems / t->block) * t->bytes;
}

void ggml_readable_types(char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int t = 0; t < N_TYPES; t++)
        if (TYPE_TRAITS[t].dequant && len < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", TYPE_TRAITS[t].name);
}

const char *ggml_unreadable(int type, char *buf, size_t size) {
    const GgmlTypeTraits *t = ggml_type_traits(type);
    if (t && t->dequant) return NULL;
    char list[256];
    ggml_readable_types(list, sizeof list);
    if (t) snprintf(buf, size, "type %s, which kvbench cannot read (it reads %s)", t->name, list);
    else snprintf(buf, size, "type code %d, which ggml does not define (kvbench reads %s)", type, list);
    return buf;
}

int ggml_dequantize(int type, const void *src, float *dst, size_t n_elems, KvErr *err) {
    char why[384];
    if (ggml_unreadable(type, why, sizeof why)) return kv_fail(err, "%s", why);
    const GgmlTypeTraits *t = ggml_type_traits(type);
    if (n_elems % t->block)
        return kv_fail(err, "%zu elements of type %s is not a whole number of %u-element blocks", n_elems,
                       t->name, t->block);
    t->dequant(src, dst, n_elems / t->block);
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * The file. */

typedef struct {
    const char *key;            /* points into the file; key_len bytes, no NUL */
    size_t key_len;
    GgufType type;
    const uint8_t *val;         /* scalar value, or a string's length prefix */
    GgufType elem_type;         /* arrays only */
    uint64_t count;             /* arrays only */
    const uint8_t **str_elems;  /* string arrays only: each element's length prefix */
} GgufKv;

struct GgufFile {
    char path[1024];
    uint8_t *map;
    size_t size;
    uint32_t alignment;
    int n_kv;
    GgufKv *kv;
    int n_tensors;
    GgufTensor *tensors;
    char *names;                /* tensor names, NUL-terminated, back to back */
    const uint8_t **str_ptrs;   /* storage behind every GgufKv.str_elems */
};

typedef struct {
    const GgufFile *g;
    size_t pos;
    KvErr *err;
} Cursor;

static int need(Cursor *c, uint64_t n, const char *what) {
    if (n > c->g->size - c->pos)
        return kv_fail(c->err, "%s: truncated file: %s needs %llu bytes at offset %zu, file is %zu bytes",
                       c->g->path, what, (unsigned long long)n, c->pos, c->g->size);
    return 0;
}

static int rd_u32(Cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->g->map + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(Cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->g->map + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A gguf string: u64 length + bytes. */
static int rd_str(Cursor *c, const char **s, size_t *len, const char *what) {
    uint64_t n;
    if (rd_u64(c, &n, what) || need(c, n, what)) return -1;
    *s = (const char *)c->g->map + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

static size_t scalar_size(GgufType t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

static int parse_kv(GgufFile *g, Cursor *c, GgufKv *kv, int index, size_t *n_str_elems) {
    char what[128];
    snprintf(what, sizeof what, "metadata key #%d", index);
    if (rd_str(c, &kv->key, &kv->key_len, what)) return -1;
    snprintf(what, sizeof what, "metadata value of '%.*s'", (int)(kv->key_len < 64 ? kv->key_len : 64), kv->key);
    uint32_t type;
    if (rd_u32(c, &type, what)) return -1;
    kv->type = (GgufType)type;
    kv->val = g->map + c->pos;
    if (type == GGUF_STRING) {
        const char *s;
        size_t len;
        return rd_str(c, &s, &len, what);
    }
    if (type != GGUF_ARRAY) {
        size_t sz = scalar_size(kv->type);
        if (!sz) return kv_fail(c->err, "%s: %s has unknown value type %u", g->path, what, type);
        if (need(c, sz, what)) return -1;
        c->pos += sz;
        return 0;
    }
    uint32_t et;
    if (rd_u32(c, &et, what) || rd_u64(c, &kv->count, what)) return -1;
    kv->elem_type = (GgufType)et;
    kv->val = g->map + c->pos;
    if (et == GGUF_ARRAY) return kv_fail(c->err, "%s: %s is a nested array (not supported)", g->path, what);
    if (et == GGUF_STRING) {
        /* Walk the elements now (bounds-checked); their pointers are recorded in a second pass. */
        for (uint64_t i = 0; i < kv->count; i++) {
            const char *s;
            size_t len;
            if (rd_str(c, &s, &len, what)) return -1;
        }
        *n_str_elems += kv->count;
        return 0;
    }
    size_t sz = scalar_size(kv->elem_type);
    if (!sz) return kv_fail(c->err, "%s: %s has unknown array element type %u", g->path, what, et);
    if (kv->count > (c->g->size - c->pos) / sz)
        return kv_fail(c->err, "%s: truncated file: %s (%llu elements from offset %zu) runs past the end of the "
                               "file (%zu bytes)", g->path, what, (unsigned long long)kv->count, c->pos, g->size);
    c->pos += (size_t)kv->count * sz;
    return 0;
}

/* Builds the element pointer tables of the string arrays (elements were bounds-checked by parse_kv). */
static int index_string_arrays(GgufFile *g, size_t n_str_elems, KvErr *err) {
    g->str_ptrs = kv_malloc(n_str_elems * sizeof *g->str_ptrs, err);
    if (!g->str_ptrs) return kv_wrap(err, "%s", g->path);
    const uint8_t **next = g->str_ptrs;
    for (int i = 0; i < g->n_kv; i++) {
        GgufKv *kv = &g->kv[i];
        if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING) continue;
        kv->str_elems = next;
        const uint8_t *p = kv->val;
        for (uint64_t e = 0; e < kv->count; e++) {
            uint64_t len;
            memcpy(&len, p, 8);
            *next++ = p;
            p += 8 + len;
        }
    }
    return 0;
}

static const GgufKv *find_kv(const GgufFile *g, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; i < g->n_kv; i++)
        if (g->kv[i].key_len == n && !memcmp(g->kv[i].key, key, n)) return &g->kv[i];
    return NULL;
}

static int parse_tensor_info(GgufFile *g, Cursor *c, GgufTensor *t, int index, char *name_out) {
    char what[64];
    snprintf(what, sizeof what, "tensor info #%d", index);
    const char *name;
    size_t len;
    if (rd_str(c, &name, &len, what)) return -1;
    if (len >= GGUF_MAX_NAME)
        return kv_fail(c->err, "%s: %s has a %zu-byte name (at most %d allowed)", g->path, what, len,
                       GGUF_MAX_NAME - 1);
    memcpy(name_out, name, len);
    name_out[len] = '\0';
    t->name = name_out;
    uint32_t n_dims, type;
    if (rd_u32(c, &n_dims, what)) return -1;
    if (n_dims > GGUF_MAX_DIMS)
        return kv_fail(c->err, "%s: tensor '%s' has %u dimensions (at most %d)", g->path, t->name, n_dims,
                       GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t n_elems = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        t->ne[i] = 1;
        if ((uint32_t)i < n_dims && rd_u64(c, &t->ne[i], what)) return -1;
        if (t->ne[i] && n_elems > (UINT64_MAX >> 1) / t->ne[i])
            return kv_fail(c->err, "%s: tensor '%s' has an impossibly large shape", g->path, t->name);
        n_elems *= t->ne[i];
    }
    if (rd_u32(c, &type, what) || rd_u64(c, &t->offset, what)) return -1;
    t->type = (int)type;
    const GgmlTypeTraits *tt = ggml_type_traits(t->type);
    if (!tt)
        return kv_fail(c->err, "%s: tensor '%s' has unknown type %u, a code ggml does not define", g->path, t->name,
                       type);
    if (t->ne[0] % tt->block)
        return kv_fail(c->err, "%s: tensor '%s' row length %llu is not a multiple of the %s block size %u",
                       g->path, t->name, (unsigned long long)t->ne[0], tt->name, tt->block);
    if (n_elems / tt->block > SIZE_MAX / tt->bytes)
        return kv_fail(c->err, "%s: tensor '%s' is too large", g->path, t->name);
    t->n_bytes = ggml_type_bytes(t->type, n_elems);
    if (t->offset % g->alignment)
        return kv_fail(c->err, "%s: tensor '%s' data offset %llu is not a multiple of the alignment %u", g->path,
                       t->name, (unsigned long long)t->offset, g->alignment);
    return 0;
}

/* The tensor's data, offset bytes into the blob at data_start, must end inside the file; no sum here can
 * overflow (offset is any u64 from the file). A file that ends inside the data is a truncated block. */
static int check_data_bounds(GgufFile *g, GgufTensor *t, size_t data_start, KvErr *err) {
    size_t blob = data_start <= g->size ? g->size - data_start : 0;
    if (data_start > g->size || t->offset >= blob + (t->n_bytes == 0))
        return kv_fail(err, "%s: tensor '%s' data offset %llu (in the data section at file offset %zu) is past the "
                            "end of the file (%zu bytes)", g->path, t->name, (unsigned long long)t->offset, data_start,
                       g->size);
    if (t->n_bytes > blob - t->offset) {
        const GgmlTypeTraits *tt = ggml_type_traits(t->type);
        return kv_fail(err, "%s: tensor '%s' is truncated: its %zu bytes of %s (%zu blocks of %u bytes) at file "
                            "offset %zu run past the end of the file (%zu bytes), which ends inside block %zu",
                       g->path, t->name, t->n_bytes, tt->name, t->n_bytes / tt->bytes, tt->bytes,
                       data_start + (size_t)t->offset, g->size, (size_t)(blob - t->offset) / tt->bytes);
    }
    t->data = g->map + data_start + t->offset;
    return 0;
}

static int parse(GgufFile *g, KvErr *err) {
    Cursor c = {g, 0, err};
    if (g->size < 4 || memcmp(g->map, GGUF_MAGIC, 4))
        return kv_fail(err, "%s: not a GGUF file (bad magic)", g->path);
    c.pos = 4;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (rd_u32(&c, &version, "header version")) return -1;
    if (version != 2 && version != 3)
        return kv_fail(err, "%s: unsupported GGUF version %u (kvbench reads versions 2 and 3)", g->path, version);
    if (rd_u64(&c, &n_tensors, "header tensor count") || rd_u64(&c, &n_kv, "header metadata count")) return -1;
    /* Each key/value needs >= 12 bytes and each tensor info >= 24, which bounds the counts by the file size
     * before anything is allocated from them (and by INT_MAX, their type here, for files past 25 GB). */
    if (n_kv > g->size / 12 || n_tensors > g->size / 24 || n_kv > INT_MAX || n_tensors > INT_MAX)
        return kv_fail(err, "%s: truncated or corrupt header: %llu tensors and %llu metadata keys exceed what "
                            "%zu bytes can hold", g->path, (unsigned long long)n_tensors, (unsigned long long)n_kv,
                       g->size);
    g->n_kv = (int)n_kv;
    g->kv = kv_calloc(n_kv, sizeof *g->kv, err);
    if (!g->kv) return kv_wrap(err, "%s", g->path);
    size_t n_str_elems = 0;
    for (int i = 0; i < g->n_kv; i++)
        if (parse_kv(g, &c, &g->kv[i], i, &n_str_elems)) return -1;
    if (index_string_arrays(g, n_str_elems, err)) return -1;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKv *al = find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32)
            return kv_fail(err, "%s: general.alignment must be a uint32 (has type %d)", g->path, (int)al->type);
        memcpy(&g->alignment, al->val, 4);
        if (!g->alignment || (g->alignment & (g->alignment - 1)))
            return kv_fail(err, "%s: general.alignment %u is not a power of two", g->path, g->alignment);
    }

    g->n_tensors = (int)n_tensors;
    g->tensors = kv_calloc(n_tensors, sizeof *g->tensors, err);
    g->names = kv_malloc(n_tensors * GGUF_MAX_NAME, err);
    if (!g->tensors || !g->names) return kv_wrap(err, "%s", g->path);
    for (int i = 0; i < g->n_tensors; i++)
        if (parse_tensor_info(g, &c, &g->tensors[i], i, g->names + (size_t)i * GGUF_MAX_NAME)) return -1;

    size_t data_start = c.pos + (g->alignment - c.pos % g->alignment) % g->alignment;
    for (int i = 0; i < g->n_tensors; i++)
        if (check_data_bounds(g, &g->tensors[i], data_start, err)) return -1;
    return 0;
}

int gguf_open(GgufFile **out, const char *path, KvErr *err) {
    *out = NULL;
    GgufFile *g = kv_calloc(1, sizeof *g, err);
    if (!g) return kv_wrap(err, "%s", path);
    snprintf(g->path, sizeof g->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
        free(g);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        free(g);
        return kv_fail(err, "%s: not a regular file", path);
    }
    g->size = (size_t)st.st_size;
    if (g->size) {
        g->map = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (g->map == MAP_FAILED) {
            g->map = NULL;
            close(fd);
            free(g);
            return kv_fail(err, "%s: cannot mmap: %s", path, strerror(errno));
        }
    }
    close(fd);
    if (parse(g, err)) {
        gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void gguf_close(GgufFile *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    free(g->kv);
    free(g->tensors);
    free(g->names);
    free(g->str_ptrs);
    free(g);
}

const char *gguf_path(const GgufFile *g) { return g->path; }

/* ---------------------------------------------------------------------------------------------------------
 * Metadata lookups. */

int gguf_has(const GgufFile *g, const char *key) { return find_kv(g, key) != NULL; }

static const GgufKv *lookup(const GgufFile *g, const char *key, KvErr *err) {
    const GgufKv *kv = find_kv(g, key);
    if (!kv) kv_fail(err, "%s: missing metadata key '%s'", g->path, key);
    return kv;
}

static int wrong_type(const GgufFile *g, const char *key, const char *wanted, KvErr *err) {
    return kv_fail(err, "%s: metadata key '%s' is not %s", g->path, key, wanted);
}

int gguf_get_u32(const GgufFile *g, const char *key, uint32_t *out, KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    uint64_t u = 0;
    int64_t s = 0;
    int is_signed = 0;
    switch (kv->type) {
    case GGUF_U8: u = kv->val[0]; break;
    case GGUF_I8: s = (int8_t)kv->val[0]; is_signed = 1; break;
    case GGUF_U16: { uint16_t v; memcpy(&v, kv->val, 2); u = v; break; }
    case GGUF_I16: { int16_t v; memcpy(&v, kv->val, 2); s = v; is_signed = 1; break; }
    case GGUF_U32: { uint32_t v; memcpy(&v, kv->val, 4); u = v; break; }
    case GGUF_I32: { int32_t v; memcpy(&v, kv->val, 4); s = v; is_signed = 1; break; }
    case GGUF_U64: memcpy(&u, kv->val, 8); break;
    case GGUF_I64: memcpy(&s, kv->val, 8); is_signed = 1; break;
    default: return wrong_type(g, key, "an integer", err);
    }
    if (is_signed) {
        if (s < 0) return kv_fail(err, "%s: metadata key '%s' is negative (%lld)", g->path, key, (long long)s);
        u = (uint64_t)s;
    }
    if (u > UINT32_MAX)
        return kv_fail(err, "%s: metadata key '%s' = %llu does not fit 32 bits", g->path, key, (unsigned long long)u);
    *out = (uint32_t)u;
    return 0;
}

int gguf_get_f32(const GgufFile *g, const char *key, float *out, KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    if (kv->type == GGUF_F32) {
        memcpy(out, kv->val, 4);
    } else if (kv->type == GGUF_F64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
    } else {
        return wrong_type(g, key, "a float", err);
    }
    return 0;
}

int gguf_get_bool(const GgufFile *g, const char *key, int *out, KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_BOOL) return wrong_type(g, key, "a bool", err);
    *out = kv->val[0] != 0;
    return 0;
}

static void str_at(const uint8_t *p, const char **out, size_t *len) {
    uint64_t n;
    memcpy(&n, p, 8);
    *out = (const char *)p + 8;
    *len = (size_t)n;
}

int gguf_get_str(const GgufFile *g, const char *key, const char **out, size_t *len, KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_STRING) return wrong_type(g, key, "a string", err);
    str_at(kv->val, out, len);
    return 0;
}

int gguf_get_arr_info(const GgufFile *g, const char *key, GgufType *elem_type, uint64_t *count, KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_ARRAY) return wrong_type(g, key, "an array", err);
    *elem_type = kv->elem_type;
    *count = kv->count;
    return 0;
}

int gguf_get_arr_str(const GgufFile *g, const char *key, uint64_t index, const char **out, size_t *len,
                     KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
        return wrong_type(g, key, "an array of strings", err);
    if (index >= kv->count)
        return kv_fail(err, "%s: index %llu out of range for '%s' (%llu elements)", g->path,
                       (unsigned long long)index, key, (unsigned long long)kv->count);
    str_at(kv->str_elems[index], out, len);
    return 0;
}

int gguf_get_arr_data(const GgufFile *g, const char *key, const void **data, KvErr *err) {
    const GgufKv *kv = lookup(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_ARRAY || kv->elem_type == GGUF_STRING)
        return wrong_type(g, key, "a numeric array", err);
    *data = kv->val;
    return 0;
}

int gguf_n_tensors(const GgufFile *g) { return g->n_tensors; }

const GgufTensor *gguf_tensor(const GgufFile *g, int index) {
    return index >= 0 && index < g->n_tensors ? &g->tensors[index] : NULL;
}

const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}
