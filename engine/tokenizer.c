/* tokenizer.c — the tokenizer's public API: loading by path, encoding (added-token split, normaliser,
 * pre-tokenizer, BPE), decoding, and the vocabulary builder the loaders share.
 *
 * Encoding follows Hugging Face tokenizers' order: added tokens are cut out of the raw text first
 * (leftmost-longest), then each remaining segment is normalised (NFC for Qwen2; '▁' for spaces and a '▁'
 * prefix for SentencePiece models), split into words by the pre-tokenizer, and each word is BPE-merged
 * (tokenizer_bpe.c). Nothing is cached between calls: a Tokenizer is read-only after loading, so one can
 * serve several threads. Spec: docs/spec/models.md §3. */
#include "tokenizer_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "unicode.h"

/* ---------------------------------------------------------------- small containers */

int tok_reserve(void **p, int *cap, int need, size_t elem, KvErr *err) {
    if (need <= *cap) return 0;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap = ncap > INT32_MAX / 2 ? need : ncap * 2;
    void *np = realloc(*p, (size_t)ncap * elem);
    if (!np) return kv_fail(err, "tokenizer: out of memory growing a buffer to %d elements", ncap);
    *p = np;
    *cap = ncap;
    return 0;
}

int ids_push(TokenIds *v, int id, KvErr *err) {
    if (tok_reserve((void **)&v->ids, &v->cap, v->n + 1, sizeof *v->ids, err)) return -1;
    v->ids[v->n++] = id;
    return 0;
}

void ids_free(TokenIds *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ---------------------------------------------------------------- builder */

int tok_create(Tokenizer **out, TokModel model, int n_vocab, KvErr *err) {
    Tokenizer *t = kv_calloc(1, sizeof *t, err);
    if (!t) return -1;
    t->model = model;
    t->unk_id = t->bos_id = t->eos_id = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    if (tok_grow_vocab(t, n_vocab, err)) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tok_grow_vocab(Tokenizer *t, int n_vocab, KvErr *err) {
    if (n_vocab <= t->n_vocab) return 0;
    int64_t *off = realloc(t->tok_off, (size_t)n_vocab * sizeof *off);
    if (off) t->tok_off = off;
    int *len = realloc(t->tok_len, (size_t)n_vocab * sizeof *len);
    if (len) t->tok_len = len;
    float *sc = realloc(t->scores, (size_t)n_vocab * sizeof *sc);
    if (sc) t->scores = sc;
    unsigned char *sp = realloc(t->special, (size_t)n_vocab);
    if (sp) t->special = sp;
    int16_t *bo = realloc(t->byte_of, (size_t)n_vocab * sizeof *bo);
    if (bo) t->byte_of = bo;
    if (!off || !len || !sc || !sp || !bo)
        return kv_fail(err, "tokenizer: out of memory for a vocabulary of %d tokens", n_vocab);
    for (int i = t->n_vocab; i < n_vocab; i++) {
        t->tok_off[i] = -1;
        t->tok_len[i] = 0;
        t->scores[i] = 0.0f;
        t->special[i] = 0;
        t->byte_of[i] = -1;
    }
    t->n_vocab = n_vocab;
    return 0;
}

int tok_set_token(Tokenizer *t, int id, const char *s, size_t len, KvErr *err) {
    if (id < 0 || id >= t->n_vocab) return kv_fail(err, "tokenizer: token id %d outside 0..%d", id, t->n_vocab - 1);
    if (t->pool_len + len + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_len + len + 1) cap *= 2;
        char *np = realloc(t->pool, cap);
        if (!np) return kv_fail(err, "tokenizer: out of memory for token strings (%zu bytes)", cap);
        t->pool = np;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, s, len);
    t->pool[t->pool_len + len] = '\0';
    t->tok_off[id] = (int64_t)t->pool_len;
    t->tok_len[id] = (int)len;
    t->pool_len += len + 1;
    return 0;
}

const char *tok_text(const Tokenizer *t, int id) {
    return t->tok_off[id] < 0 ? NULL : t->pool + t->tok_off[id];
}

int tok_index_vocab(Tokenizer *t, KvErr *err) {
    free(t->vocab.slots);
    t->vocab.cap = pow2_at_least((uint64_t)t->n_vocab * 2);
    t->vocab.slots = kv_malloc(t->vocab.cap * sizeof *t->vocab.slots, err);
    if (!t->vocab.slots) return -1;
    memset(t->vocab.slots, 0xff, t->vocab.cap * sizeof *t->vocab.slots);
    uint32_t mask = t->vocab.cap - 1;
    for (int id = 0; id < t->n_vocab; id++) {
        if (t->tok_off[id] < 0) continue;
        const char *s = tok_text(t, id);
        size_t len = (size_t)t->tok_len[id];
        uint32_t h = (uint32_t)hash_bytes(s, len) & mask;
        int dup = 0;
        while (t->vocab.slots[h] >= 0) {
            int o = t->vocab.slots[h];
            if ((size_t)t->tok_len[o] == len && memcmp(tok_text(t, o), s, len) == 0) { dup = 1; break; }
            h = (h + 1) & mask;
        }
        if (!dup) t->vocab.slots[h] = id; /* the first id of a duplicated string wins */
    }
    return 0;
}

int tok_lookup(const Tokenizer *t, const char *s, size_t len) {
    uint32_t mask = t->vocab.cap - 1;
    uint32_t h = (uint32_t)hash_bytes(s, len) & mask;
    while (t->vocab.slots[h] >= 0) {
        int id = t->vocab.slots[h];
        if ((size_t)t->tok_len[id] == len && memcmp(tok_text(t, id), s, len) == 0) return id;
        h = (h + 1) & mask;
    }
    return -1;
}

int tok_add_merge(Tokenizer *t, int left, int right, int rank, int result, KvErr *err) {
    PairMap *m = &t->merges;
    if ((m->n + 1) * 2 > m->cap) {
        PairMap g = {0};
        g.cap = pow2_at_least((uint64_t)(m->n + 1) * 4);
        g.keys = kv_calloc(g.cap, sizeof *g.keys, err);
        g.rank = kv_malloc(g.cap * sizeof *g.rank, err);
        g.result = kv_malloc(g.cap * sizeof *g.result, err);
        if (!g.keys || !g.rank || !g.result) {
            free(g.keys);
            free(g.rank);
            free(g.result);
            return -1;
        }
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            uint32_t h = (uint32_t)hash_u64(m->keys[i]) & (g.cap - 1);
            while (g.keys[h]) h = (h + 1) & (g.cap - 1);
            g.keys[h] = m->keys[i];
            g.rank[h] = m->rank[i];
            g.result[h] = m->result[i];
        }
        g.n = m->n;
        free(m->keys);
        free(m->rank);
        free(m->result);
        *m = g;
    }
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t h = (uint32_t)hash_u64(key) & (m->cap - 1);
    while (m->keys[h]) {
        if (m->keys[h] == key) return 0; /* a repeated merge keeps its first (lowest) rank */
        h = (h + 1) & (m->cap - 1);
    }
    m->keys[h] = key;
    m->rank[h] = rank;
    m->result[h] = result;
    m->n++;
    return 0;
}

int tok_merge_lookup(const Tokenizer *t, int left, int right, int *rank, int *result) {
    const PairMap *m = &t->merges;
    if (m->cap == 0) return 0;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t h = (uint32_t)hash_u64(key) & (m->cap - 1);
    while (m->keys[h]) {
        if (m->keys[h] == key) {
            *rank = m->rank[h];
            *result = m->result[h];
            return 1;
        }
        h = (h + 1) & (m->cap - 1);
    }
    return 0;
}

int tok_add_added(Tokenizer *t, int id, const char *s, size_t len, int special, int lstrip, int rstrip,
                  KvErr *err) {
    if (len == 0) return 0;
    if (special && id >= 0 && id < t->n_vocab) t->special[id] = 1;
    /* Text is cut around the added tokens it contains, and encoding walks each piece as UTF-8: a token that
     * is not valid UTF-8 could only match part of a character of (valid) text, so it is never matched, as in
     * Hugging Face, whose added tokens are strings. It stays in the vocabulary and decodes as usual. */
    if (utf8_first_invalid(s, len) < len) return 0;
    if (tok_reserve((void **)&t->added, &t->cap_added, t->n_added + 1, sizeof *t->added, err)) return -1;
    AddedToken *a = &t->added[t->n_added];
    a->text = kv_malloc(len + 1, err);
    if (!a->text) return -1;
    memcpy(a->text, s, len);
    a->text[len] = '\0';
    a->len = (int)len;
    a->id = id;
    a->special = special;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    t->n_added++;
    return 0;
}

int tok_apply_token_type(Tokenizer *t, int id, int type, KvErr *err) {
    const char *s = tok_text(t, id);
    if (!s) return 0;
    size_t len = (size_t)t->tok_len[id];
    if (type == TT_UNKNOWN && t->unk_id < 0) t->unk_id = id;
    if (type == TT_CONTROL || type == TT_UNKNOWN) return tok_add_added(t, id, s, len, 1, 0, 0, err);
    if (type == TT_USER_DEFINED) return tok_add_added(t, id, s, len, 0, 0, 0, err);
    return 0;
}

void tok_configure_spm_scores(Tokenizer *t, int add_space_prefix) {
    t->merge_kind = MERGE_SCORES;
    t->pretok = PRETOK_NONE;
    t->replace_space = 1;
    t->space_prefix = add_space_prefix ? SPACE_PREFIX_ALWAYS : SPACE_PREFIX_NONE;
    t->strip_decoded_space = add_space_prefix;
    t->byte_fallback = 1;
}

static int added_order(const void *pa, const void *pb) {
    const AddedToken *a = pa, *b = pb;
    int fa = (unsigned char)a->text[0], fb = (unsigned char)b->text[0];
    if (fa != fb) return fa - fb;
    if (a->len != b->len) return b->len - a->len;
    return a->id - b->id;
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100.. in byte order. */
static void gpt2_byte_map(uint16_t map[256]) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        map[b] = (uint16_t)(keep ? b : next++);
    }
}

int tok_finish(Tokenizer *t, const char *source, KvErr *err) {
    if (!t->vocab.slots && tok_index_vocab(t, err)) return -1;
    gpt2_byte_map(t->byte_cp);
    for (int c = 0; c < 324; c++) t->cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int n;
        if (t->model == TOK_BYTE_LEVEL) n = utf8_encode(t->byte_cp[b], buf);
        else n = snprintf(buf, sizeof buf, "<0x%02X>", b);
        t->byte_id[b] = tok_lookup(t, buf, (size_t)n);
        if (t->model == TOK_SPM && t->byte_id[b] >= 0) t->byte_of[t->byte_id[b]] = (int16_t)b;
    }
    if (t->model == TOK_SPM && t->pretok == PRETOK_NONE) {
        t->split_before_spaces = 1;
        for (int id = 0; id < t->n_vocab && t->split_before_spaces; id++) {
            const char *s = tok_text(t, id);
            for (int p = 1; s && p + 3 <= t->tok_len[id]; p++)
                if (memcmp(s + p, SPM_SPACE, 3) == 0 && !(p >= 3 && memcmp(s + p - 3, SPM_SPACE, 3) == 0)) {
                    t->split_before_spaces = 0;
                    break;
                }
        }
    }
    if (t->model == TOK_SPM && t->byte_fallback) {
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0)
                return kv_fail(err, "%s: byte fallback is on but the vocabulary has no <0x%02X> token", source, b);
    }
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id < 0 || t->added[i].id >= t->n_vocab)
            return kv_fail(err, "%s: added token '%s' has id %d outside the vocabulary", source, t->added[i].text,
                           t->added[i].id);
    if (t->n_added) qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_order);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_added && (unsigned char)t->added[k].text[0] < b) k++;
        t->added_first[b] = k;
    }
    return 0;
}

/* ---------------------------------------------------------------- loading */

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* In a directory: tokenizer.json, else a SentencePiece model named tokenizer.model* (Mistral ships
 * tokenizer.model.v3). */
static int load_directory(Tokenizer **out, const char *dir, KvErr *err) {
    char file[4096];
    struct stat st;
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    if (stat(file, &st) == 0) return tokenizer_load_hf(out, file, err);
    DIR *d = opendir(dir);
    if (!d) return kv_fail(err, "%s: cannot open directory", dir);
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        if (strncmp(e->d_name, "tokenizer.model", 15) == 0) {
            snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
            found = 1;
        }
    closedir(d);
    if (!found) return kv_fail(err, "%s: directory has neither tokenizer.json nor tokenizer.model", dir);
    return tokenizer_load_spm_model(out, file, err);
}

int tokenizer_load(Tokenizer **out, const char *path, KvErr *err) {
    struct stat st;
    if (stat(path, &st) != 0) return kv_fail(err, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) return load_directory(out, path, err);
    if (has_suffix(path, ".gguf")) {
        GgufFile *g;
        if (gguf_open(&g, path, err)) return -1;
        int rc = tokenizer_load_gguf(out, g, err);
        gguf_close(g);
        return rc;
    }
    if (has_suffix(path, ".json")) return tokenizer_load_hf(out, path, err);
    if (strstr(path, ".model")) return tokenizer_load_spm_model(out, path, err);
    return kv_fail(err, "%s: not a tokenizer (expected tokenizer.json, tokenizer.model*, a .gguf or a directory)",
                   path);
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    free(t->pool);
    free(t->tok_off);
    free(t->tok_len);
    free(t->scores);
    free(t->special);
    free(t->byte_of);
    free(t->vocab.slots);
    free(t->merges.keys);
    free(t->merges.rank);
    free(t->merges.result);
    free(t);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->n_vocab; }
int tokenizer_bos_id(const Tokenizer *t) { return t->bos_id; }
int tokenizer_eos_id(const Tokenizer *t) { return t->eos_id; }

int tokenizer_is_special(const Tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab && t->special[id];
}

int tokenizer_token_id(const Tokenizer *t, const char *token) {
    return tok_lookup(t, token, strlen(token));
}

/* ---------------------------------------------------------------- encoding */

/* Buffers reused across the segments and words of one encode call. */
typedef struct {
    char *norm;             /* the normalised segment */
    int norm_cap;
    uint32_t *cp;           /* its code points */
    unsigned char *cls;     /* CH_* classes */
    int *off;               /* byte offset of each code point, plus the end */
    int cp_cap, cls_cap, off_cap;
    WordSpans words;
    BpeScratch *bpe;
} EncodeState;

static void encode_state_free(EncodeState *st) {
    free(st->norm);
    free(st->cp);
    free(st->cls);
    free(st->off);
    free(st->words.v);
    bpe_scratch_free(st->bpe);
}

/* SentencePiece space handling: ' ' -> '▁', and a '▁' in front when the scheme asks for one. */
static int spm_spaces(const Tokenizer *t, const char *s, size_t len, int at_text_start, EncodeState *st,
                      const char **out, size_t *out_len, KvErr *err) {
    int prefix = t->space_prefix == SPACE_PREFIX_ALWAYS || (t->space_prefix == SPACE_PREFIX_FIRST && at_text_start);
    if (t->prefix_if_absent && len > 0 && (s[0] == ' ' || (len >= 3 && memcmp(s, SPM_SPACE, 3) == 0))) prefix = 0;
    size_t spaces = 0;
    if (t->replace_space)
        for (size_t i = 0; i < len; i++) spaces += s[i] == ' ';
    size_t need = len + 2 * spaces + (prefix ? 3 : 0) + 1;
    if (need > (size_t)INT32_MAX) return kv_fail(err, "tokenizer: text segment of %zu bytes is too long", len);
    if (tok_reserve((void **)&st->norm, &st->norm_cap, (int)need, 1, err)) return -1;
    size_t n = 0;
    if (prefix) { memcpy(st->norm, SPM_SPACE, 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (t->replace_space && s[i] == ' ') { memcpy(st->norm + n, SPM_SPACE, 3); n += 3; }
        else st->norm[n++] = s[i];
    }
    *out = st->norm;
    *out_len = n;
    return 0;
}

static int encode_segment(const Tokenizer *t, const char *s, size_t len, int at_text_start, EncodeState *st,
                          TokenIds *out, KvErr *err) {
    if (len == 0) return 0;
    char *nfc = NULL;
    if (t->normalize_nfc) {
        size_t nlen;
        if (unicode_nfc(s, len, &nfc, &nlen, err)) return -1;
        s = nfc;
        len = nlen;
    }
    if (t->model == TOK_SPM && spm_spaces(t, s, len, at_text_start, st, &s, &len, err)) goto fail;
    if (len > (size_t)INT32_MAX - 1) {
        kv_fail(err, "tokenizer: text segment of %zu bytes is too long", len);
        goto fail;
    }
    if (t->pretok == PRETOK_NONE) {
        size_t start = 0;
        for (size_t p = 1; t->split_before_spaces && p + 3 <= len; p++) {
            if (memcmp(s + p, SPM_SPACE, 3) != 0 || (p >= 3 && memcmp(s + p - 3, SPM_SPACE, 3) == 0)) continue;
            if (bpe_encode_word(t, s + start, p - start, st->bpe, out, err)) goto fail;
            start = p;
        }
        if (bpe_encode_word(t, s + start, len - start, st->bpe, out, err)) goto fail;
        free(nfc);
        return 0;
    }
    int need = (int)len + 1;
    if (tok_reserve((void **)&st->cp, &st->cp_cap, need, sizeof *st->cp, err) ||
        tok_reserve((void **)&st->cls, &st->cls_cap, need, 1, err) ||
        tok_reserve((void **)&st->off, &st->off_cap, need, sizeof *st->off, err))
        goto fail;
    int n = 0;
    size_t pos = 0;
    while (pos < len) {
        st->off[n] = (int)pos;
        int32_t d = utf8_decode(s, len, &pos);
        /* tokenizer_encode checked the whole text and pieces are cut at character boundaries; checked again
         * here, where a stalled position would write past the len + 1 offsets reserved above */
        if (d < 0) {
            kv_fail(err, "tokenizer: invalid UTF-8 in a text segment at byte offset %zu", pos);
            goto fail;
        }
        uint32_t c = (uint32_t)d;
        st->cp[n] = c;
        st->cls[n] = (unsigned char)((unicode_is_letter(c) ? CH_LETTER : 0) | (unicode_is_number(c) ? CH_NUMBER : 0) |
                                     (unicode_is_white_space(c) ? CH_SPACE : 0));
        n++;
    }
    st->off[n] = (int)len;
    st->words.n = 0;
    if (pretok_split(t->pretok, st->cp, st->cls, n, &st->words, err)) goto fail;
    for (int w = 0; w < st->words.n; w++) {
        int a = st->off[st->words.v[w].start], b = st->off[st->words.v[w].end];
        if (bpe_encode_word(t, s + a, (size_t)(b - a), st->bpe, out, err)) goto fail;
    }
    free(nfc);
    return 0;
fail:
    free(nfc);
    return -1;
}

/* The leftmost-longest added token at or after pos; returns its index or -1. */
static int find_added(const Tokenizer *t, const char *text, size_t len, size_t pos, int parse_special,
                      size_t *at) {
    for (size_t i = pos; i < len; i++) {
        int b = (unsigned char)text[i];
        for (int k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
            const AddedToken *a = &t->added[k];
            if (a->special && !parse_special) continue;
            if ((size_t)a->len <= len - i && memcmp(text + i, a->text, (size_t)a->len) == 0) {
                *at = i;
                return k;
            }
        }
    }
    return -1;
}

/* What an lstrip/rstrip added token absorbs. ASCII whitespace only: such tokens of the supported families
 * sit next to spaces and newlines. */
static int is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int parse_special, TokenIds *out,
                     KvErr *err) {
    size_t bad = utf8_first_invalid(text, len);
    if (bad < len) return kv_fail(err, "tokenizer: invalid UTF-8 in the text at byte offset %zu", bad);
    EncodeState st = {0};
    st.bpe = bpe_scratch_new(err);
    if (!st.bpe) return -1;
    size_t seg = 0;
    int rc = 0;
    while (rc == 0) {
        size_t at = len;
        int k = t->n_added ? find_added(t, text, len, seg, parse_special, &at) : -1;
        size_t end = at, next = at;
        if (k >= 0) {
            const AddedToken *a = &t->added[k];
            next = at + (size_t)a->len;
            if (a->lstrip)
                while (end > seg && is_ascii_space(text[end - 1])) end--;
            if (a->rstrip)
                while (next < len && is_ascii_space(text[next])) next++;
        }
        rc = encode_segment(t, text + seg, end - seg, seg == 0, &st, out, err);
        if (rc || k < 0) break;
        rc = ids_push(out, t->added[k].id, err);
        seg = next;
    }
    encode_state_free(&st);
    return rc;
}

/* ---------------------------------------------------------------- decoding */

typedef struct {
    char *b;
    int n, cap;
} Bytes;

static int bytes_put(Bytes *o, const char *s, int n, KvErr *err) {
    if (tok_reserve((void **)&o->b, &o->cap, o->n + n + 1, 1, err)) return -1;
    memcpy(o->b + o->n, s, (size_t)n);
    o->n += n;
    return 0;
}

/* ByteLevel decoder: each character back to its byte; a token with a character outside the byte alphabet
 * (an added token such as a CJK string) is taken as its raw bytes, as Hugging Face does. */
static int decode_byte_level(const Tokenizer *t, const char *s, int len, Bytes *o, KvErr *err) {
    char tmp[256];
    int n = 0;
    size_t pos = 0;
    while (pos < (size_t)len) {
        int32_t c = utf8_decode(s, (size_t)len, &pos);
        int b = c < 0 || c >= 324 ? -1 : t->cp_byte[c];
        if (b < 0 || n == (int)sizeof tmp) return bytes_put(o, s, len, err);
        tmp[n++] = (char)b;
    }
    return bytes_put(o, tmp, n, err);
}

static int decode_spm(const Tokenizer *t, int id, const char *s, int len, Bytes *o, KvErr *err) {
    if (t->byte_of[id] >= 0) {
        char b = (char)t->byte_of[id];
        return bytes_put(o, &b, 1, err);
    }
    for (int i = 0; i < len;) {
        if (i + 3 <= len && memcmp(s + i, SPM_SPACE, 3) == 0) {
            if (bytes_put(o, " ", 1, err)) return -1;
            i += 3;
        } else {
            if (bytes_put(o, s + i, 1, err)) return -1;
            i++;
        }
    }
    return 0;
}

/* Replaces each invalid UTF-8 sequence with U+FFFD, as Rust's from_utf8_lossy does. */
static char *utf8_lossy(const Bytes *in, KvErr *err) {
    Bytes o = {0};
    size_t pos = 0, len = (size_t)in->n;
    if (tok_reserve((void **)&o.b, &o.cap, in->n + 1, 1, err)) return NULL;
    while (pos < len) {
        size_t start = pos;
        if (utf8_decode(in->b, len, &pos) >= 0) {
            if (bytes_put(&o, in->b + start, (int)(pos - start), err)) goto fail;
            continue;
        }
        unsigned char lead = (unsigned char)in->b[pos];
        int want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        pos++;
        for (int k = 1; k < want && pos < len && ((unsigned char)in->b[pos] & 0xC0) == 0x80; k++) pos++;
        if (bytes_put(&o, "\xEF\xBF\xBD", 3, err)) goto fail;
    }
    o.b[o.n] = '\0';
    return o.b;
fail:
    free(o.b);
    return NULL;
}

/* transformers' PreTrainedTokenizerBase.clean_up_tokenization (4.57.0), in its order: each str.replace rewrites every
 * non-overlapping match left to right, on the text the previous one left. The patterns are ASCII, so matching bytes
 * of UTF-8 is matching characters; no replacement is longer than its pattern, so it runs in place. */
static void clean_up_tokenization(char *s) {
    static const char *const rules[][2] = {{" .", "."},       {" ?", "?"},     {" !", "!"},     {" ,", ","},
                                           {" ' ", "'"},      {" n't", "n't"}, {" 'm", "'m"},   {" 's", "'s"},
                                           {" 've", "'ve"},   {" 're", "'re"}};
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        const char *from = rules[r][0], *to = rules[r][1];
        size_t flen = strlen(from), tlen = strlen(to), w = 0;
        for (size_t i = 0; s[i];) {
            if (strncmp(s + i, from, flen) == 0) {
                memcpy(s + w, to, tlen);
                w += tlen;
                i += flen;
            } else {
                s[w++] = s[i++];
            }
        }
        s[w] = '\0';
    }
}

int tokenizer_clean_up_spaces(const Tokenizer *t) { return t->clean_up_spaces; }

char *tokenizer_decode(const Tokenizer *t, const int *ids, int n, int flags, KvErr *err) {
    Bytes o = {0};
    if (tok_reserve((void **)&o.b, &o.cap, 64, 1, err)) return NULL;
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= t->n_vocab || t->tok_off[id] < 0) {
            kv_fail(err, "tokenizer: cannot decode token id %d (vocabulary has ids 0..%d%s)", id, t->n_vocab - 1,
                    id >= 0 && id < t->n_vocab ? ", this one unused" : "");
            free(o.b);
            return NULL;
        }
        if ((flags & TOK_DECODE_SKIP_SPECIAL) && t->special[id]) continue;
        const char *s = tok_text(t, id);
        int rc = t->model == TOK_BYTE_LEVEL ? decode_byte_level(t, s, t->tok_len[id], &o, err)
                                            : decode_spm(t, id, s, t->tok_len[id], &o, err);
        if (rc) {
            free(o.b);
            return NULL;
        }
    }
    int skip = t->strip_decoded_space && o.n > 0 && o.b[0] == ' ';
    if (skip) {
        memmove(o.b, o.b + 1, (size_t)o.n - 1);
        o.n--;
    }
    char *res = utf8_lossy(&o, err);
    free(o.b);
    if (res && t->clean_up_spaces && !(flags & TOK_DECODE_RAW)) clean_up_tokenization(res);
    return res;
}
