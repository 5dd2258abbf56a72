/* tokenizer_gguf.c — builds a Tokenizer from a GGUF file's tokenizer.ggml.* metadata (spec models.md §1.7).
 *
 * tokenizer.ggml.model "gpt2" is byte-level BPE with rank-ordered merges and a pre-tokenizer named by
 * tokenizer.ggml.pre; "llama" is SentencePiece BPE over scores with byte fallback. Token types follow
 * llama.cpp: control (3) and unknown (2) tokens are special (matched in text only with parse_special,
 * dropped by skip_special), user-defined (4) tokens are always matched as whole strings. Everything is
 * copied out of the file, so the GgufFile may be closed afterwards. */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer_internal.h"

typedef struct {
    const char *name;
    PretokKind pretok;
    int ignore_merges, nfc;
} GgufPre;

/* llama.cpp's pre-tokenizer names that kvbench reproduces exactly; Qwen2 gets the NFC of its HF tokenizer. */
static const GgufPre GGUF_PRES[] = {
    {"gpt-2", PRETOK_GPT2, 0, 0},          {"llama-bpe", PRETOK_LLAMA3, 1, 0},
    {"llama3", PRETOK_LLAMA3, 1, 0},       {"qwen2", PRETOK_QWEN2, 0, 1},
    {"smollm", PRETOK_DIGITS_GPT2, 0, 0},  {"starcoder", PRETOK_DIGITS_GPT2, 0, 0},
};

static int optional_id(const GgufFile *g, const char *key, int n_vocab, int *out, KvErr *err) {
    if (!gguf_has(g, key)) return 0;
    uint32_t v;
    if (gguf_get_u32(g, key, &v, err)) return -1;
    if (v >= (uint32_t)n_vocab)
        return kv_fail(err, "%s: %s = %u is outside the vocabulary (%d tokens)", gguf_path(g), key, v, n_vocab);
    *out = (int)v;
    return 0;
}

static int load_token_types(Tokenizer *t, const GgufFile *g, int n, KvErr *err) {
    const char *key = "tokenizer.ggml.token_type";
    if (!gguf_has(g, key)) return 0;
    GgufType et;
    uint64_t count;
    const void *data;
    if (gguf_get_arr_info(g, key, &et, &count, err) || gguf_get_arr_data(g, key, &data, err)) return -1;
    if (count != (uint64_t)n || (et != GGUF_I32 && et != GGUF_U32))
        return kv_fail(err, "%s: %s must be %d int32 values", gguf_path(g), key, n);
    for (int id = 0; id < n; id++) {
        int32_t ty;
        memcpy(&ty, (const char *)data + 4 * (size_t)id, 4);
        if (tok_apply_token_type(t, id, ty, err)) return -1;
    }
    return 0;
}

static int load_merges(Tokenizer *t, const GgufFile *g, KvErr *err) {
    const char *key = "tokenizer.ggml.merges";
    GgufType et;
    uint64_t count;
    if (gguf_get_arr_info(g, key, &et, &count, err)) return -1;
    if (et != GGUF_STRING) return kv_fail(err, "%s: %s is not an array of strings", gguf_path(g), key);
    for (uint64_t r = 0; r < count; r++) {
        const char *m;
        size_t len;
        if (gguf_get_arr_str(g, key, r, &m, &len, err)) return -1;
        const char *sp = memchr(m, ' ', len);
        if (!sp || len > 1000)
            return kv_fail(err, "%s: merge %llu '%.*s' is not two tokens", gguf_path(g), (unsigned long long)r,
                           (int)(len > 200 ? 200 : len), m);
        size_t alen = (size_t)(sp - m), blen = len - alen - 1;
        char joined[1024];
        memcpy(joined, m, alen);
        memcpy(joined + alen, sp + 1, blen);
        int a = tok_lookup(t, m, alen), b = tok_lookup(t, sp + 1, blen), res = tok_lookup(t, joined, alen + blen);
        if (a < 0 || b < 0 || res < 0)
            return kv_fail(err, "%s: merge %llu '%.*s' uses a token missing from tokenizer.ggml.tokens", gguf_path(g),
                           (unsigned long long)r, (int)len, m);
        if (tok_add_merge(t, a, b, (int)r, res, err)) return -1;
    }
    return 0;
}

static int load_scores(Tokenizer *t, const GgufFile *g, int n, KvErr *err) {
    const char *key = "tokenizer.ggml.scores";
    GgufType et;
    uint64_t count;
    const void *data;
    if (gguf_get_arr_info(g, key, &et, &count, err) || gguf_get_arr_data(g, key, &data, err)) return -1;
    if (et != GGUF_F32 || count != (uint64_t)n)
        return kv_fail(err, "%s: %s must be %d float32 values", gguf_path(g), key, n);
    memcpy(t->scores, data, (size_t)n * sizeof(float));
    return 0;
}

static int configure(Tokenizer *t, const GgufFile *g, int spm, KvErr *err) {
    if (spm) {
        int prefix = 1;
        if (gguf_has(g, "tokenizer.ggml.add_space_prefix") &&
            gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix, err))
            return -1;
        tok_configure_spm_scores(t, prefix);
        return 0;
    }
    const char *pre = "default";
    size_t pre_len = 7;
    if (gguf_has(g, "tokenizer.ggml.pre") && gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len, err)) return -1;
    for (size_t i = 0; i < sizeof GGUF_PRES / sizeof GGUF_PRES[0]; i++) {
        if (strlen(GGUF_PRES[i].name) == pre_len && memcmp(GGUF_PRES[i].name, pre, pre_len) == 0) {
            t->merge_kind = MERGE_RANKS;
            t->pretok = GGUF_PRES[i].pretok;
            t->ignore_merges = GGUF_PRES[i].ignore_merges;
            t->normalize_nfc = GGUF_PRES[i].nfc;
            return 0;
        }
    }
    return kv_fail(err, "%s: unsupported pre-tokenizer tokenizer.ggml.pre = '%.*s' (supported: gpt-2, llama-bpe, "
                   "llama3, qwen2, smollm, starcoder)", gguf_path(g), (int)pre_len, pre);
}

/* Decode as transformers 4.57.0 decodes this GGUF's text. It converts the tokenizer by general.architecture
 * (integrations/ggml.py GGUF_TO_FAST_CONVERTERS); only its llama converter (llama, deci, decilm) departs from plain
 * byte-level decoding for a vocabulary whose tokenizer.ggml.model is not "llama" (its Llama-3 case: SmolLM2,
 * Llama-3.x): it sets clean_up_tokenization_spaces, and its decoder drops one leading space unless
 * tokenizer.ggml.add_space_prefix is false (SmolLM2's is; llama.cpp writes none for Llama-3). SentencePiece
 * vocabularies (Llama-2, Mistral; configure) and the other converters (qwen2, qwen3, gpt2, starcoder2, ...) keep
 * their class's default: no clean-up. */
static int gguf_decode_rules(Tokenizer *t, const GgufFile *g, int spm, KvErr *err) {
    static const char *const llama_converter[] = {"llama", "deci", "decilm"};
    const char *arch;
    size_t len;
    int llama = 0, prefix = 1;
    if (spm || !gguf_has(g, "general.architecture")) return 0;
    if (gguf_get_str(g, "general.architecture", &arch, &len, err)) return -1;
    for (size_t i = 0; i < sizeof llama_converter / sizeof llama_converter[0]; i++)
        if (strlen(llama_converter[i]) == len && memcmp(llama_converter[i], arch, len) == 0) llama = 1;
    if (!llama) return 0;
    if (gguf_has(g, "tokenizer.ggml.add_space_prefix") &&
        gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix, err))
        return -1;
    t->clean_up_spaces = 1;
    t->strip_decoded_space = prefix;
    return 0;
}

int tokenizer_load_gguf(Tokenizer **out, const struct GgufFile *g, KvErr *err) {
    const char *model;
    size_t model_len;
    if (gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len, err)) return -1;
    int spm;
    if (model_len == 4 && memcmp(model, "gpt2", 4) == 0) spm = 0;
    else if (model_len == 5 && memcmp(model, "llama", 5) == 0) spm = 1;
    else return kv_fail(err, "%s: unsupported tokenizer.ggml.model '%.*s' (gpt2 or llama)", gguf_path(g),
                        (int)model_len, model);
    GgufType et;
    uint64_t count;
    if (gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &count, err)) return -1;
    if (et != GGUF_STRING || count == 0 || count > 10000000)
        return kv_fail(err, "%s: tokenizer.ggml.tokens is not a non-empty array of strings", gguf_path(g));
    int n = (int)count;
    Tokenizer *t;
    if (tok_create(&t, spm ? TOK_SPM : TOK_BYTE_LEVEL, n, err)) return -1;
    if (configure(t, g, spm, err) || gguf_decode_rules(t, g, spm, err)) goto fail;
    for (int id = 0; id < n; id++) {
        const char *s;
        size_t len;
        if (gguf_get_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)id, &s, &len, err) ||
            tok_set_token(t, id, s, len, err))
            goto fail;
    }
    if (tok_index_vocab(t, err) || load_token_types(t, g, n, err)) goto fail;
    if (spm ? load_scores(t, g, n, err) : load_merges(t, g, err)) goto fail;
    if (optional_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id, err) ||
        optional_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id, err) ||
        optional_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk_id, err))
        goto fail;
    if (tok_finish(t, gguf_path(g), err)) goto fail;
    *out = t;
    return 0;
fail:
    tokenizer_free(t);
    return -1;
}
