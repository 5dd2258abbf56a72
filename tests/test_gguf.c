/* test_gguf.c — the GGUF reader and the ggml dequantisers.
 *
 * Dequantisation of every supported type (the 15 llama.cpp writes for llama, qwen2 and mistral models) is compared
 * with PyPI gguf's gguf.quants.dequantize on random raw blocks, blocks from gguf's quantiser, and blocks with
 * extreme scales (tests/reference/gen_quant_cases.py writes both into tests/data/gguf/quant_cases.gguf):
 * tolerance 0, bit-exact, since both sides do the same float32 operations in the same order (ggml's
 * dequantize_row_* formulas). NaN and Inf scales propagate as IEEE arithmetic makes them, on both sides: a NaN
 * scale makes its whole (sub-)block NaN; an Inf scale gives +-Inf where the code is non-zero and NaN where it is 0
 * (0 * Inf), and Inf - Inf = NaN where a min is subtracted or added. A NaN equals any NaN here (both sides quiet a
 * signalling NaN on the multiply; a bare f16/bf16 NaN keeps its payload, and on x86-64 every NaN's bits matched
 * gguf-py's too), every other value compares by its bits. Metadata getters are checked on one key per GGUF value
 * type. Corrupt files (truncated at each section or inside a tensor's block or K-quant super-block, bad magic, bad
 * version, unknown tensor type, row length not whole blocks, data offset past the end, offset + size overflowing)
 * must fail with one line naming the file (and the tensor), in gguf_open, the model load and `kvbench info` (exit
 * status 1). The real SmolLM2 GGUF, when present, checks string arrays. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../engine/gguf.h"
#include "../engine/jsonfile.h"
#include "../engine/model.h"
#include "../cli/commands.h"
#include "test.h"

#define QUANT_CASES TEST_DATA("gguf/quant_cases.gguf")
#define TINY_LLAMA TEST_DATA("gguf/tiny_llama.gguf")
#define SMOLLM2 "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static void test_metadata(TestCounts *tc, GgufFile *g) {
    KvErr err = {{0}};
    uint32_t u;
    float f;
    int b;
    const char *s;
    size_t len;
    CHECK(tc, gguf_get_u32(g, "t.u8", &u, &err) == 0 && u == 200, "u8: %u %s", u, err.msg);
    CHECK(tc, gguf_get_u32(g, "t.u16", &u, &err) == 0 && u == 60000, "u16: %u", u);
    CHECK(tc, gguf_get_u32(g, "t.u32", &u, &err) == 0 && u == 4000000000u, "u32: %u", u);
    CHECK(tc, gguf_get_u32(g, "t.i64", &u, &err) == 0 && u == 12345, "i64: %u", u);
    CHECK(tc, gguf_get_u32(g, "t.i8", &u, &err) == -1 && strstr(err.msg, "negative"), "i8 -5: %s", err.msg);
    CHECK(tc, gguf_get_u32(g, "t.u64", &u, &err) == -1 && strstr(err.msg, "32 bits"), "u64 2^40: %s", err.msg);
    CHECK(tc, gguf_get_f32(g, "t.f32", &f, &err) == 0 && f == 1.5f, "f32: %g", f);
    CHECK(tc, gguf_get_f32(g, "t.f64", &f, &err) == 0 && f == 0.25f, "f64: %g", f);
    CHECK(tc, gguf_get_bool(g, "t.bool", &b, &err) == 0 && b == 1, "bool");
    CHECK(tc, gguf_get_str(g, "t.str", &s, &len, &err) == 0 && len == 6 && !memcmp(s, "h\xc3\xa9llo", 6), "str");
    CHECK(tc, gguf_get_str(g, "t.u8", &s, &len, &err) == -1 && strstr(err.msg, "quant_cases.gguf") &&
                  strstr(err.msg, "t.u8"), "type mismatch: %s", err.msg);
    CHECK(tc, gguf_get_u32(g, "no.such.key", &u, &err) == -1 && strstr(err.msg, "no.such.key") &&
                  strstr(err.msg, "quant_cases.gguf"), "missing: %s", err.msg);
    CHECK(tc, gguf_has(g, "t.i16") && !gguf_has(g, "t.i1"), "gguf_has");
    CHECK(tc, gguf_get_u32(g, "general.alignment", &u, &err) == 0 && u == 64, "alignment %u", u);

    GgufType et;
    uint64_t n;
    CHECK(tc, gguf_get_arr_info(g, "t.arr_str", &et, &n, &err) == 0 && et == GGUF_STRING && n == 3, "arr_str");
    CHECK(tc, gguf_get_arr_str(g, "t.arr_str", 1, &s, &len, &err) == 0 && len == 0, "empty element");
    CHECK(tc, gguf_get_arr_str(g, "t.arr_str", 2, &s, &len, &err) == 0 && len == 3 && !memcmp(s, "xyz", 3),
          "element 2");
    CHECK(tc, gguf_get_arr_str(g, "t.arr_str", 3, &s, &len, &err) == -1 && strstr(err.msg, "out of range"),
          "index 3: %s", err.msg);
    const void *data;
    CHECK(tc, gguf_get_arr_info(g, "t.arr_i32", &et, &n, &err) == 0 && et == GGUF_I32 && n == 3, "arr_i32");
    if (gguf_get_arr_data(g, "t.arr_i32", &data, &err) == 0) {
        int32_t v[3];
        memcpy(v, data, sizeof v);
        CHECK(tc, v[0] == 3 && v[1] == -1 && v[2] == 7, "i32 array %d %d %d", v[0], v[1], v[2]);
    } else {
        CHECK(tc, 0, "gguf_get_arr_data: %s", err.msg);
    }
    CHECK(tc, gguf_get_arr_data(g, "t.arr_str", &data, &err) == -1, "string array is not numeric");
}

/* Every tensor NAME has a NAME.expected f32 twin; compare bit for bit. */
static void test_dequant(TestCounts *tc, GgufFile *g) {
    KvErr err = {{0}};
    int n_cases = 0;
    char random[64] = {0}, special[64] = {0};  /* type codes with a case of each kind */
    for (int i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        if (strstr(t->name, ".expected")) continue;
        char name[80];
        snprintf(name, sizeof name, "%s.expected", t->name);
        const GgufTensor *e = gguf_find_tensor(g, name);
        CHECK(tc, e && e->type == GGML_F32 && e->ne[0] == t->ne[0] && e->ne[1] == t->ne[1], "%s", name);
        if (!e) continue;
        CHECK(tc, t->offset % 64 == 0, "%s offset %llu not 64-aligned", t->name, (unsigned long long)t->offset);
        size_t n = t->ne[0] * t->ne[1];
        CHECK(tc, ggml_type_bytes(t->type, n) == t->n_bytes, "%s bytes", t->name);
        float *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
        int rc = ggml_dequantize(t->type, t->data, got, n, &err);
        CHECK(tc, rc == 0, "%s: %s", t->name, err.msg);
        memcpy(want, e->data, n * sizeof *want);
        size_t bad = 0;
        for (size_t j = 0; j < n; j++)
            if (memcmp(&got[j], &want[j], 4) && !(isnan(got[j]) && isnan(want[j]))) {
                if (!bad) fprintf(stderr, "%s[%zu]: got %.9g want %.9g\n", t->name, j, got[j], want[j]);
                bad++;
            }
        CHECK(tc, rc == 0 && bad == 0, "%s (%s): %zu of %zu values differ (tolerance 0)", t->name,
              ggml_type_name(t->type), bad, n);
        free(got);
        free(want);
        n_cases++;
        if (t->type >= 0 && t->type < 64) (strstr(t->name, "_special") ? special : random)[t->type] = 1;
    }
    CHECK(tc, n_cases == 33, "expected 33 dequantisation cases, found %d", n_cases);
    /* every readable type has a random case and (but f32) an extreme-scale one */
    char none[128] = "", readable[256];
    for (int type = 1; type < 64; type++)
        if (!ggml_unreadable(type, readable, sizeof readable) && (!random[type] || !special[type]))
            snprintf(none + strlen(none), sizeof none - strlen(none), " %s", ggml_type_name(type));
    CHECK(tc, !none[0], "types without a random and an extreme-scale case:%s", none);
    ggml_readable_types(readable, sizeof readable);
    CHECK(tc, !strcmp(readable, "f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, "
                                "bf16"), "readable types: %s", readable);

    CHECK(tc, !strcmp(ggml_type_name(GGML_Q4_K), "q4_K") && !strcmp(ggml_type_name(99), "unknown"), "names");
    CHECK(tc, ggml_type_bytes(GGML_Q6_K, 512) == 420 && ggml_type_bytes(GGML_Q4_1, 33) == 0 &&
                  ggml_type_bytes(77, 32) == 0, "type bytes");
    float out[256];
    uint8_t zeros[256] = {0};
    CHECK(tc, ggml_dequantize(17, zeros, out, 256, &err) == -1 &&
                  strstr(err.msg, "type iq2_xs, which kvbench cannot read (it reads f32, f16, q4_0"), "iq2_xs: %s",
          err.msg);
    CHECK(tc, ggml_dequantize(5, zeros, out, 32, &err) == -1 && strstr(err.msg, "type code 5, which ggml does not"),
          "type 5: %s", err.msg);
    CHECK(tc, ggml_dequantize(GGML_Q8_0, zeros, out, 40, &err) == -1 && strstr(err.msg, "block"), "partial block");
}

/* ---- corrupt files ------------------------------------------------------------------------------------ */

typedef struct {
    char dir[64];
    char path[128];
    unsigned char *bytes;
    size_t size;
} Scratch;

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* Writes the first n bytes of the (possibly patched) tiny model as NAME and expects gguf_open, the model load
 * and `kvbench info` (exit status 1) each to fail with one line naming that file and containing `needle`. */
static void expect_open_fails(TestCounts *tc, Scratch *s, const char *name, size_t n, const char *needle) {
    snprintf(s->path, sizeof s->path, "%s/%s", s->dir, name);
    if (write_file(s->path, s->bytes, n)) {
        CHECK(tc, 0, "cannot write %s", s->path);
        return;
    }
    GgufFile *g = NULL;
    KvErr err = {{0}};
    int rc = gguf_open(&g, s->path, &err);
    CHECK(tc, rc == -1 && g == NULL, "%s: opened although corrupt", name);
    CHECK(tc, strstr(err.msg, s->path) && strstr(err.msg, needle) && !strchr(err.msg, '\n'),
          "%s: message '%s' should name the file and say '%s'", name, err.msg, needle);
    gguf_close(g);
    Model *m = NULL;
    rc = model_load(&m, s->path, &err);
    CHECK(tc, rc == -1 && !m && strstr(err.msg, s->path) && strstr(err.msg, needle) && !strchr(err.msg, '\n'),
          "%s: model load: '%s' should say '%s'", name, err.msg, needle);
    model_free(m);
    char out[1024];
    rc = test_run_command(cmd_info, 1, (char *[]){s->path}, out, NULL, sizeof out);
    CHECK(tc, rc == 1 && strstr(out, s->path) && strstr(out, needle) && strchr(out, '\n') == out + strlen(out) - 1,
          "%s: kvbench info (status %d): '%s' should be one line saying '%s'", name, rc, out, needle);
    unlink(s->path);
}

static long json_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? (long)v->valuedouble : -1;
}

static void patch_u32(Scratch *s, long off, uint32_t v) { memcpy(s->bytes + off, &v, 4); }
static void patch_u64(Scratch *s, long off, uint64_t v) { memcpy(s->bytes + off, &v, 8); }

static void test_corrupt(TestCounts *tc) {
    KvErr err = {{0}};
    cJSON *root = kv_read_json(TEST_DATA("gguf/tiny_expected.json"), &err);
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "llama"), "offsets");
    Scratch s = {.dir = "/tmp/kvbench_gguf_XXXXXX"};
    size_t size = 0;
    unsigned char *orig = (unsigned char *)kv_read_file(TINY_LLAMA, &size, &err);
    CHECK(tc, off && orig && mkdtemp(s.dir), "fixtures: %s", err.msg);
    if (!off || !orig) goto done;
    s.bytes = malloc(size);
    s.size = size;
    CHECK(tc, (size_t)json_int(off, "file_size") == size, "tiny_llama.gguf size");

    struct { const char *name; long at; const char *needle; } cuts[] = {
        {"cut_magic.gguf", 2, "bad magic"},
        {"cut_header.gguf", 12, "truncated"},
        {"cut_metadata_start.gguf", json_int(off, "metadata_start") + 5, "truncated"},
        {"cut_metadata_mid.gguf", json_int(off, "metadata_mid"), "truncated"},
        {"cut_metadata_end.gguf", json_int(off, "tensor_info_start") - 3, "truncated file: metadata value"},
        {"cut_tensor_infos.gguf", json_int(off, "attn_q_info") + 10, "truncated"},
        {"cut_tensor_type.gguf", json_int(off, "attn_q_type") + 2, "truncated"},
        {"cut_before_data.gguf", json_int(off, "data_start"), "tensor 'token_embd.weight' data offset 0"},
        /* the last tensor's last super-block or block cut short: a truncated block, named */
        {"cut_data.gguf", (long)size - 1, "tensor 'blk.1.ffn_down.weight' is truncated: its 6528 bytes of q8_0 "
                                          "(192 blocks of 34 bytes) at file offset 59264 run past the end of the "
                                          "file (65791 bytes), which ends inside block 191"},
        {"cut_data_block.gguf", (long)size - 3 * 34 - 10, "tensor 'blk.1.ffn_down.weight' is truncated"},
        {"empty.gguf", 0, "bad magic"},
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        memcpy(s.bytes, orig, size);
        expect_open_fails(tc, &s, cuts[i].name, (size_t)cuts[i].at, cuts[i].needle);
    }

    memcpy(s.bytes, orig, size);
    s.bytes[0] = 'X';
    expect_open_fails(tc, &s, "magic.gguf", size, "bad magic");
    memcpy(s.bytes, orig, size);
    patch_u32(&s, 4, 1);
    expect_open_fails(tc, &s, "version1.gguf", size, "unsupported GGUF version 1");
    memcpy(s.bytes, orig, size);
    patch_u32(&s, 4, 0x03000000);  /* a big-endian v3 file read little-endian */
    expect_open_fails(tc, &s, "version_be.gguf", size, "unsupported GGUF version");
    memcpy(s.bytes, orig, size);
    patch_u32(&s, json_int(off, "attn_q_type"), 99);
    expect_open_fails(tc, &s, "type99.gguf", size, "tensor 'blk.0.attn_q.weight' has unknown type 99");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, json_int(off, "attn_q_offset_field"), (uint64_t)size);
    expect_open_fails(tc, &s, "offset_past_end.gguf", size, "tensor 'blk.0.attn_q.weight' data offset");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, json_int(off, "attn_q_offset_field"), UINT64_MAX - 31);
    expect_open_fails(tc, &s, "offset_huge.gguf", size,
                      "tensor 'blk.0.attn_q.weight' data offset 18446744073709551584");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, json_int(off, "attn_q_offset_field"), 16);
    expect_open_fails(tc, &s, "offset_unaligned.gguf", size, "alignment");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, 8, (uint64_t)1 << 62);
    expect_open_fails(tc, &s, "count_huge.gguf", size, "exceed");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, json_int(off, "attn_q_ne1"), (uint64_t)1 << 40);
    expect_open_fails(tc, &s, "dims_huge.gguf", size, "past the end");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, json_int(off, "attn_q_ne1") - 8, 48);  /* row length not a whole number of q4_0 blocks */
    expect_open_fails(tc, &s, "row_partial.gguf", size,
                      "tensor 'blk.0.attn_q.weight' row length 48 is not a multiple of the q4_0 block size 32");
    memcpy(s.bytes, orig, size);
    patch_u64(&s, json_int(off, "metadata_start"), (uint64_t)1 << 50);  /* first key's length */
    expect_open_fails(tc, &s, "key_len_huge.gguf", size, "truncated");

    /* a K-quant super-block cut short: quant_cases.gguf ends 7 bytes into block 5 of q4_K_special */
    size_t qsize = 0;
    unsigned char *quant = (unsigned char *)kv_read_file(QUANT_CASES, &qsize, &err);
    GgufFile *g = NULL;
    const GgufTensor *t = quant && !gguf_open(&g, QUANT_CASES, &err) ? gguf_find_tensor(g, "q4_K_special") : NULL;
    unsigned char *at = t ? memmem(quant, qsize, t->data, t->n_bytes) : NULL;
    CHECK(tc, at, "q4_K_special in %s: %s", QUANT_CASES, err.msg);
    if (at) {
        free(s.bytes);
        s.bytes = quant;
        quant = NULL;
        expect_open_fails(tc, &s, "cut_superblock.gguf", (size_t)(at - s.bytes) + 5 * 144 + 7,
                          "tensor 'q4_K_special' is truncated: its 1728 bytes of q4_K (12 blocks of 144 bytes)");
        expect_open_fails(tc, &s, "cut_superblock.gguf", (size_t)(at - s.bytes) + 5 * 144 + 7, "inside block 5");
    }
    free(quant);
    gguf_close(g);
    g = NULL;
    CHECK(tc, gguf_open(&g, "tests/data/gguf/does_not_exist.gguf", &err) == -1 &&
                  strstr(err.msg, "does_not_exist.gguf") && strstr(err.msg, "cannot open"), "missing: %s", err.msg);
    CHECK(tc, gguf_open(&g, "tests/data/gguf", &err) == -1 && strstr(err.msg, "not a regular file"),
          "directory: %s", err.msg);
    rmdir(s.dir);
done:
    free(s.bytes);
    free(orig);
    cJSON_Delete(root);
}

static void test_tiny_layout(TestCounts *tc) {
    GgufFile *g = NULL;
    KvErr err = {{0}};
    CHECK(tc, gguf_open(&g, TINY_LLAMA, &err) == 0, "%s", err.msg);
    if (!g) return;
    CHECK(tc, !strcmp(gguf_path(g), TINY_LLAMA), "path");
    const GgufTensor *q = gguf_find_tensor(g, "blk.0.attn_q.weight");
    CHECK(tc, q && q->n_dims == 2 && q->ne[0] == 64 && q->ne[1] == 64 && q->type == GGML_Q4_0 &&
                  q->n_bytes == 64 * 2 * 18, "attn_q info");
    CHECK(tc, gguf_find_tensor(g, "blk.9.attn_q.weight") == NULL && gguf_tensor(g, -1) == NULL &&
                  gguf_tensor(g, gguf_n_tensors(g)) == NULL, "absent tensors");
    gguf_close(g);
}

/* String arrays of a real vocabulary: O(1) element access and the values llama.cpp's converter wrote. */
static void test_smollm2(TestCounts *tc) {
    if (access(SMOLLM2, R_OK)) {
        SKIP(tc, "the SmolLM2 checks: %s not present (make model fetches it)", SMOLLM2);
        return;
    }
    GgufFile *g = NULL;
    KvErr err = {{0}};
    CHECK(tc, gguf_open(&g, SMOLLM2, &err) == 0, "%s", err.msg);
    if (!g) return;
    GgufType et;
    uint64_t n = 0;
    const char *s;
    size_t len;
    CHECK(tc, gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n, &err) == 0 && et == GGUF_STRING &&
                  n == 49152, "tokens: %llu", (unsigned long long)n);
    CHECK(tc, gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s, &len, &err) == 0 && len == 13 &&
                  !memcmp(s, "<|endoftext|>", 13), "token 0");
    CHECK(tc, gguf_get_arr_str(g, "tokenizer.ggml.merges", 0, &s, &len, &err) == 0 && len == 4 &&
                  !memcmp(s, "\xc4\xa0 t", 4), "merge 0");
    CHECK(tc, gguf_get_arr_info(g, "tokenizer.ggml.merges", &et, &n, &err) == 0 && n == 48900, "merges");
    CHECK(tc, gguf_n_tensors(g) == 272, "272 tensors");
    const GgufTensor *e = gguf_find_tensor(g, "token_embd.weight");
    CHECK(tc, e && e->type == GGML_Q8_0 && e->ne[0] == 576 && e->ne[1] == 49152, "token_embd");
    gguf_close(g);
}

int main(void) {
    TestCounts tc = {"test_gguf", 0, 0, 0};
    GgufFile *g = NULL;
    KvErr err = {{0}};
    CHECK(&tc, gguf_open(&g, QUANT_CASES, &err) == 0, "%s", err.msg);
    if (g) {
        test_metadata(&tc, g);
        test_dequant(&tc, g);
        gguf_close(g);
    }
    test_tiny_layout(&tc);
    test_corrupt(&tc);
    test_smollm2(&tc);
    return test_finish(&tc);
}
