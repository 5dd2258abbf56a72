/* tokenizer_hf.c — loads a Hugging Face tokenizer.json (model.type "BPE") and, when present next to it,
 * tokenizer_config.json for the bos/eos tokens and clean_up_tokenization_spaces.
 *
 * The families are recognised by structure, never by file name: a ByteLevel pre-tokenizer or decoder means
 * byte-level BPE, whose word splitting comes from the Split regex (Llama-3, Qwen2, GPT-2 strings matched
 * exactly), a bare ByteLevel(use_regex) (GPT-2) or Digits + ByteLevel (SmolLM2). Without ByteLevel it is
 * SentencePiece-style BPE, with spaces written as '▁' by a Prepend + Replace normaliser (Llama-2 style) or
 * a Metaspace pre-tokenizer (newer files). Anything else is refused with the construct named, rather than
 * tokenized almost right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jsonfile.h"
#include "tokenizer_internal.h"

/* Unused ids a tokenizer.json may leave below its largest id (reserved slots). */
enum { HF_ID_GAP = 1 << 16 };

typedef struct {
    const char *path;
    int byte_level;      /* a ByteLevel step seen */
    int metaspace;       /* a Metaspace pre-tokenizer seen */
    PretokKind pretok;
    int nfc, prepend, replace_space;
    SpacePrefix space_prefix;
} HfShape;

static const char *type_of(const cJSON *node) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(node, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "";
}

static int flag_of(const cJSON *node, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *str_of(const cJSON *node, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_normalizer(const cJSON *n, HfShape *sh, KvErr *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *ty = type_of(n);
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
            if (parse_normalizer(item, sh, err)) return -1;
        return 0;
    }
    if (strcmp(ty, "NFC") == 0) {
        sh->nfc = 1;
        return 0;
    }
    if (strcmp(ty, "Prepend") == 0) {
        const char *p = str_of(n, "prepend");
        if (!p || strcmp(p, SPM_SPACE) != 0)
            return kv_fail(err, "%s: unsupported normalizer Prepend of '%s' (only '\xE2\x96\x81')", sh->path, p ? p : "?");
        sh->prepend = 1;
        return 0;
    }
    if (strcmp(ty, "Replace") == 0) {
        const char *pat = str_of(cJSON_GetObjectItemCaseSensitive(n, "pattern"), "String");
        const char *content = str_of(n, "content");
        if (!pat || !content || strcmp(pat, " ") != 0 || strcmp(content, SPM_SPACE) != 0)
            return kv_fail(err, "%s: unsupported normalizer Replace (only ' ' -> '\xE2\x96\x81')", sh->path);
        sh->replace_space = 1;
        return 0;
    }
    return kv_fail(err, "%s: unsupported normalizer type '%s'", sh->path, ty);
}

static int parse_pre_tokenizer(const cJSON *p, HfShape *sh, KvErr *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"))
            if (parse_pre_tokenizer(item, sh, err)) return -1;
        return 0;
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        if (flag_of(p, "add_prefix_space", 0))
            return kv_fail(err, "%s: unsupported pre_tokenizer ByteLevel with add_prefix_space=true", sh->path);
        sh->byte_level = 1;
        if (flag_of(p, "use_regex", 1)) {
            if (sh->pretok != PRETOK_NONE && sh->pretok != PRETOK_DIGITS_GPT2)
                return kv_fail(err, "%s: unsupported pre_tokenizer: a Split regex followed by ByteLevel(use_regex)",
                               sh->path);
            if (sh->pretok == PRETOK_NONE) sh->pretok = PRETOK_GPT2;
        }
        return 0;
    }
    if (strcmp(ty, "Split") == 0) {
        const char *re = str_of(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
        const char *behavior = str_of(p, "behavior");
        if (!re) return kv_fail(err, "%s: unsupported pre_tokenizer Split without a Regex pattern", sh->path);
        PretokKind k = pretok_from_regex(re);
        if (k == PRETOK_NONE || !behavior || strcmp(behavior, "Isolated") != 0 || flag_of(p, "invert", 0))
            return kv_fail(err, "%s: unsupported pre_tokenizer Split regex '%s' (known: GPT-2, Llama-3, Qwen2)",
                           sh->path, re);
        sh->pretok = k;
        return 0;
    }
    if (strcmp(ty, "Digits") == 0) {
        if (!flag_of(p, "individual_digits", 0))
            return kv_fail(err, "%s: unsupported pre_tokenizer Digits(individual_digits=false)", sh->path);
        sh->pretok = PRETOK_DIGITS_GPT2;
        return 0;
    }
    if (strcmp(ty, "Metaspace") == 0) {
        const char *rep = str_of(p, "replacement");
        if (rep && strcmp(rep, SPM_SPACE) != 0)
            return kv_fail(err, "%s: unsupported Metaspace replacement '%s'", sh->path, rep);
        const char *scheme = str_of(p, "prepend_scheme");
        if (!scheme) scheme = flag_of(p, "add_prefix_space", 1) ? "always" : "never";
        if (strcmp(scheme, "always") == 0) sh->space_prefix = SPACE_PREFIX_ALWAYS;
        else if (strcmp(scheme, "first") == 0) sh->space_prefix = SPACE_PREFIX_FIRST;
        else if (strcmp(scheme, "never") == 0) sh->space_prefix = SPACE_PREFIX_NONE;
        else return kv_fail(err, "%s: unsupported Metaspace prepend_scheme '%s'", sh->path, scheme);
        sh->metaspace = 1;
        sh->replace_space = 1;
        if (flag_of(p, "split", 1)) sh->pretok = PRETOK_METASPACE;
        return 0;
    }
    return kv_fail(err, "%s: unsupported pre_tokenizer type '%s'", sh->path, ty);
}

/* Whether the decoder drops the first space of the text (Strip after Fuse, or Metaspace with a prefix). */
static int decoder_strips_space(const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return 0;
    const char *ty = type_of(d);
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(d, "decoders"))
            if (decoder_strips_space(item)) return 1;
        return 0;
    }
    if (strcmp(ty, "Strip") == 0) {
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start");
        return cJSON_IsNumber(start) && start->valueint >= 1;
    }
    if (strcmp(ty, "Metaspace") == 0) {
        const char *scheme = str_of(d, "prepend_scheme");
        return scheme ? strcmp(scheme, "never") != 0 : flag_of(d, "add_prefix_space", 1);
    }
    return 0;
}

static int is_byte_level_decoder(const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return 0;
    if (strcmp(type_of(d), "ByteLevel") == 0) return 1;
    const cJSON *item;
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(d, "decoders"))
        if (is_byte_level_decoder(item)) return 1;
    return 0;
}

/* The first special token of a TemplateProcessing "single" template (the BOS a post-processor adds). */
static const char *post_processor_bos(const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return NULL;
    if (strcmp(type_of(p), "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(p, "processors")) {
            const char *b = post_processor_bos(item);
            if (b) return b;
        }
        return NULL;
    }
    if (strcmp(type_of(p), "TemplateProcessing") != 0) return NULL;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p, "single"), 0);
    return str_of(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
}

/* bos_token / eos_token of tokenizer_config.json: a string or {"content": ...}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    return str_of(v, "content");
}

static int load_merges(Tokenizer *t, const cJSON *merges, const char *path, KvErr *err) {
    int rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        size_t alen, blen;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp) return kv_fail(err, "%s: merge %d '%s' is not two tokens", path, rank, m->valuestring);
            a = m->valuestring;
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
            alen = strlen(a);
            blen = strlen(b);
        } else {
            return kv_fail(err, "%s: merge %d is neither \"a b\" nor [a, b]", path, rank);
        }
        char joined[1024];
        if (alen + blen >= sizeof joined) return kv_fail(err, "%s: merge %d is too long", path, rank);
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        int ia = tok_lookup(t, a, alen), ib = tok_lookup(t, b, blen), ir = tok_lookup(t, joined, alen + blen);
        if (ia < 0 || ib < 0 || ir < 0)
            return kv_fail(err, "%s: merge %d ('%.*s' + '%.*s') uses a token missing from model.vocab", path, rank,
                           (int)alen, a, (int)blen, b);
        if (tok_add_merge(t, ia, ib, rank, ir, err)) return -1;
        rank++;
    }
    return 0;
}

static int build(Tokenizer **out, const cJSON *root, const char *path, KvErr *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return kv_fail(err, "%s: missing \"model\"", path);
    if (strcmp(type_of(model), "BPE") != 0)
        return kv_fail(err, "%s: unsupported model type '%s' (only BPE)", path, type_of(model));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab) || !vocab->child) return kv_fail(err, "%s: missing or empty model.vocab", path);
    const char *prefix = str_of(model, "continuing_subword_prefix"), *suffix = str_of(model, "end_of_word_suffix");
    if ((prefix && *prefix) || (suffix && *suffix))
        return kv_fail(err, "%s: unsupported BPE continuing_subword_prefix / end_of_word_suffix", path);

    HfShape sh = {.path = path};
    if (parse_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &sh, err) ||
        parse_pre_tokenizer(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &sh, err))
        return -1;
    const cJSON *decoder = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    int byte_level = sh.byte_level || is_byte_level_decoder(decoder);
    if (byte_level && (sh.prepend || sh.replace_space || sh.metaspace))
        return kv_fail(err, "%s: unsupported mix of ByteLevel and SentencePiece-style space handling", path);
    if (!byte_level && !sh.replace_space)
        return kv_fail(err, "%s: unsupported tokenizer: neither ByteLevel nor SentencePiece-style '\xE2\x96\x81' spaces",
                       path);
    if (byte_level && sh.pretok == PRETOK_NONE)
        return kv_fail(err, "%s: unsupported pre_tokenizer: ByteLevel without a word-splitting regex", path);

    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int max_id = -1, entries = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8)
            return kv_fail(err, "%s: model.vocab entry '%s' has no valid id", path, e->string);
        if (e->valueint > max_id) max_id = e->valueint;
        entries++;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 || !str_of(e, "content"))
            return kv_fail(err, "%s: an added_tokens entry lacks a valid id or content", path);
        if (id->valueint > max_id) max_id = id->valueint;
        entries++;
    }
    /* The vocabulary is sized by its largest id: ids far beyond the entries the file holds (a few KB naming id
     * 10^8 asked for gigabytes) are refused; real vocabularies are dense, with at most a few reserved gaps. */
    if (max_id >= entries + HF_ID_GAP)
        return kv_fail(err, "%s: token id %d, while the file defines %d tokens (ids must be dense)", path, max_id,
                       entries);

    Tokenizer *t;
    if (tok_create(&t, byte_level ? TOK_BYTE_LEVEL : TOK_SPM, max_id + 1, err)) return -1;
    t->pretok = sh.pretok;
    t->merge_kind = MERGE_RANKS;
    t->normalize_nfc = sh.nfc;
    t->replace_space = sh.replace_space;
    t->space_prefix = sh.metaspace ? sh.space_prefix : sh.prepend ? SPACE_PREFIX_ALWAYS : SPACE_PREFIX_NONE;
    t->prefix_if_absent = sh.metaspace;
    t->strip_decoded_space = !byte_level && decoder_strips_space(decoder);
    t->ignore_merges = flag_of(model, "ignore_merges", 0);
    t->byte_fallback = flag_of(model, "byte_fallback", 0);
    cJSON_ArrayForEach(e, vocab)
        if (tok_set_token(t, e->valueint, e->string, strlen(e->string), err)) goto fail;
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
        const char *content = str_of(e, "content");
        if (t->tok_off[id] < 0 && tok_set_token(t, id, content, strlen(content), err)) goto fail;
        if (tok_add_added(t, id, content, strlen(content), flag_of(e, "special", 0), flag_of(e, "lstrip", 0),
                          flag_of(e, "rstrip", 0), err))
            goto fail;
    }
    if (tok_index_vocab(t, err) || load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path, err))
        goto fail;
    const char *unk = str_of(model, "unk_token");
    if (unk) t->unk_id = tok_lookup(t, unk, strlen(unk));
    const char *bos = post_processor_bos(cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    if (bos) t->bos_id = tok_lookup(t, bos, strlen(bos));
    if (tok_finish(t, path, err)) goto fail;
    *out = t;
    return 0;
fail:
    tokenizer_free(t);
    return -1;
}

/* tokenizer_config.json beside the tokenizer.json decides bos/eos when it names them (null means none), and
 * whether decode cleans up spaces (clean_up_tokenization_spaces; absent or null: no, the class default). */
static int apply_config(Tokenizer *t, const char *json_path, KvErr *err) {
    char cfg_path[4096];
    const char *slash = strrchr(json_path, '/');
    int dir_len = slash ? (int)(slash - json_path) + 1 : 0;
    snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json", dir_len, json_path);
    FILE *f = fopen(cfg_path, "rb");
    if (!f) return 0;
    fclose(f);
    cJSON *cfg = kv_read_json(cfg_path, err);
    if (!cfg) return -1;
    const char *keys[2] = {"bos_token", "eos_token"};
    int *ids[2] = {&t->bos_id, &t->eos_id};
    for (int k = 0; k < 2; k++) {
        if (!cJSON_GetObjectItemCaseSensitive(cfg, keys[k])) continue;
        const char *s = config_token(cfg, keys[k]);
        *ids[k] = s ? tok_lookup(t, s, strlen(s)) : -1;
        if (s && *ids[k] < 0) {
            kv_fail(err, "%s: %s '%s' is not in the vocabulary", cfg_path, keys[k], s);
            cJSON_Delete(cfg);
            return -1;
        }
    }
    const cJSON *clean = cJSON_GetObjectItemCaseSensitive(cfg, "clean_up_tokenization_spaces");
    if (clean && !cJSON_IsBool(clean) && !cJSON_IsNull(clean)) {
        kv_fail(err, "%s: clean_up_tokenization_spaces must be true, false or null", cfg_path);
        cJSON_Delete(cfg);
        return -1;
    }
    t->clean_up_spaces = cJSON_IsTrue(clean);
    cJSON_Delete(cfg);
    return 0;
}

int tokenizer_load_hf(Tokenizer **out, const char *json_path, KvErr *err) {
    cJSON *root = kv_read_json(json_path, err);
    if (!root) return -1;
    Tokenizer *t = NULL;
    int rc = build(&t, root, json_path, err);
    cJSON_Delete(root);
    if (rc) return -1;
    if (apply_config(t, json_path, err)) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
