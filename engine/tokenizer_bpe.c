/* tokenizer_bpe.c — BPE merging of one word: symbols in a doubly linked list, candidate pairs in a binary
 * heap keyed by (priority, position), so a word of n symbols costs O(n log n) — a SentencePiece segment can
 * be a whole 100k-token context, since those models have no pre-tokenizer.
 *
 * Two flavours share the loop:
 *   MERGE_RANKS  (Hugging Face BPE, llama.cpp "gpt2"): a pair merges if the merges table has it; the lowest
 *                rank goes first. Byte-level models start from one symbol per byte (its GPT-2 character);
 *                SentencePiece-style ones from one symbol per character, or its <0xXX> tokens when the
 *                character is not in the vocabulary (byte fallback).
 *   MERGE_SCORES (llama.cpp "llama", sentencepiece): a pair merges if its concatenation is a vocabulary
 *                piece; the highest score goes first; characters outside the vocabulary become byte tokens
 *                after merging.
 * Ties go to the leftmost pair in both, as in the reference implementations. A pair popped from the heap is
 * stale when either side has changed since it was pushed; lengths only grow, so comparing the combined
 * length with the recorded one detects it. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "unicode.h"

typedef struct {
    int start, len;   /* bytes of the symbol in the word buffer; len 0 once merged into its left neighbour */
    int id;           /* vocabulary id, -1 when the text is not a piece (MERGE_SCORES only) */
    int prev, next;   /* neighbours, -1 at the ends */
} Symbol;

typedef struct {
    double prio;      /* lower merges first */
    int left, right;  /* symbol indices */
    int size;         /* combined length in bytes when pushed */
    int id;           /* the merged token */
} Candidate;

struct BpeScratch {
    char *buf;        /* the word in the vocabulary's alphabet */
    int buf_cap;
    Symbol *sym;
    int sym_cap;
    Candidate *heap;
    int heap_n, heap_cap;
};

BpeScratch *bpe_scratch_new(KvErr *err) { return kv_calloc(1, sizeof(BpeScratch), err); }

void bpe_scratch_free(BpeScratch *s) {
    if (!s) return;
    free(s->buf);
    free(s->sym);
    free(s->heap);
    free(s);
}

static int cand_before(const Candidate *a, const Candidate *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static int heap_push(BpeScratch *s, Candidate c, KvErr *err) {
    if (tok_reserve((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof *s->heap, err)) return -1;
    int i = s->heap_n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_before(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
    return 0;
}

static Candidate heap_pop(BpeScratch *s) {
    Candidate top = s->heap[0], last = s->heap[--s->heap_n];
    int i = 0, n = s->heap_n;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* Whether symbols l and r (adjacent) may merge, and into what. */
static int pair_merge(const Tokenizer *t, const BpeScratch *s, int l, int r, Candidate *c) {
    const Symbol *a = &s->sym[l], *b = &s->sym[r];
    if (t->merge_kind == MERGE_RANKS) {
        int rank, id;
        if (a->id < 0 || b->id < 0 || !tok_merge_lookup(t, a->id, b->id, &rank, &id)) return 0;
        c->prio = rank;
        c->id = id;
    } else {
        /* As in sentencepiece, merges only produce normal pieces, never control or byte tokens. */
        int id = tok_lookup(t, s->buf + a->start, (size_t)(a->len + b->len));
        if (id < 0 || t->special[id] || t->byte_of[id] >= 0) return 0;
        c->prio = -(double)t->scores[id];
        c->id = id;
    }
    c->left = l;
    c->right = r;
    c->size = a->len + b->len;
    return 1;
}

static int try_push(const Tokenizer *t, BpeScratch *s, int l, int r, KvErr *err) {
    if (l < 0 || r < 0) return 0;
    Candidate c;
    if (!pair_merge(t, s, l, r, &c)) return 0;
    return heap_push(s, c, err);
}

static int add_symbol(BpeScratch *s, int *n, int start, int len, int id, KvErr *err) {
    if (tok_reserve((void **)&s->sym, &s->sym_cap, *n + 1, sizeof *s->sym, err)) return -1;
    Symbol *y = &s->sym[*n];
    y->start = start;
    y->len = len;
    y->id = id;
    y->prev = *n - 1;
    y->next = -1;
    if (*n > 0) s->sym[*n - 1].next = *n;
    (*n)++;
    return 0;
}

/* Initial symbols of a byte-level word: the word's bytes rewritten in the GPT-2 alphabet, one each. */
static int byte_level_symbols(const Tokenizer *t, const char *word, size_t len, BpeScratch *s, int *n,
                              KvErr *err) {
    if (len > (size_t)INT32_MAX / 2 - 1) return kv_fail(err, "tokenizer: word of %zu bytes is too long", len);
    if (tok_reserve((void **)&s->buf, &s->buf_cap, (int)len * 2 + 1, 1, err)) return -1;
    int pos = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)word[i];
        int k = utf8_encode(t->byte_cp[b], s->buf + pos);
        /* A byte whose character is not in the vocabulary is dropped, as Hugging Face does without unk. */
        if (t->byte_id[b] >= 0 && add_symbol(s, n, pos, k, t->byte_id[b], err)) return -1;
        pos += k;
    }
    s->buf[pos] = '\0';
    return pos;
}

/* Initial symbols of a SentencePiece word: its characters; with ranks, an unknown character becomes its
 * byte tokens (or unk) right away, with scores it stays a symbol without id until after merging. */
static int spm_symbols(const Tokenizer *t, const char *word, size_t len, BpeScratch *s, int *n, KvErr *err) {
    if (len > (size_t)INT32_MAX - 1) return kv_fail(err, "tokenizer: word of %zu bytes is too long", len);
    if (tok_reserve((void **)&s->buf, &s->buf_cap, (int)len + 1, 1, err)) return -1;
    memcpy(s->buf, word, len);
    s->buf[len] = '\0';
    size_t pos = 0;
    while (pos < len) {
        size_t start = pos;
        if (utf8_decode(word, len, &pos) < 0) /* checked by tokenizer_encode; a stalled position would loop */
            return kv_fail(err, "tokenizer: invalid UTF-8 in a word at byte offset %zu", pos);
        int clen = (int)(pos - start);
        int id = tok_lookup(t, word + start, (size_t)clen);
        if (id >= 0 || t->merge_kind == MERGE_SCORES) {
            if (add_symbol(s, n, (int)start, clen, id, err)) return -1;
        } else if (t->byte_fallback) {
            for (int k = 0; k < clen; k++)
                if (add_symbol(s, n, (int)start + k, 1, t->byte_id[(unsigned char)word[start + (size_t)k]], err))
                    return -1;
        } else if (t->unk_id >= 0) {
            if (add_symbol(s, n, (int)start, clen, t->unk_id, err)) return -1;
        }
    }
    return (int)len;
}

/* A symbol left without id after score-based merging: its bytes as <0xXX> tokens, else unk. */
static int emit_unknown(const Tokenizer *t, const BpeScratch *s, const Symbol *y, TokenIds *out, KvErr *err) {
    int all_bytes = 1;
    for (int k = 0; k < y->len; k++)
        if (t->byte_id[(unsigned char)s->buf[y->start + k]] < 0) all_bytes = 0;
    if (all_bytes) {
        for (int k = 0; k < y->len; k++)
            if (ids_push(out, t->byte_id[(unsigned char)s->buf[y->start + k]], err)) return -1;
        return 0;
    }
    return t->unk_id >= 0 ? ids_push(out, t->unk_id, err) : 0;
}

int bpe_encode_word(const Tokenizer *t, const char *word, size_t len, BpeScratch *s, TokenIds *out,
                    KvErr *err) {
    if (len == 0) return 0;
    int n = 0;
    int blen = t->model == TOK_BYTE_LEVEL ? byte_level_symbols(t, word, len, s, &n, err)
                                          : spm_symbols(t, word, len, s, &n, err);
    if (blen < 0) return -1;
    if (t->ignore_merges) {
        int id = tok_lookup(t, s->buf, (size_t)blen);
        if (id >= 0) return ids_push(out, id, err);
    }
    s->heap_n = 0;
    for (int i = 0; i + 1 < n; i++)
        if (try_push(t, s, i, i + 1, err)) return -1;
    while (s->heap_n > 0) {
        Candidate c = heap_pop(s);
        Symbol *a = &s->sym[c.left];
        if (a->len == 0 || a->next != c.right || a->len + s->sym[c.right].len != c.size) continue;
        Symbol *b = &s->sym[c.right];
        a->len += b->len;
        a->id = c.id;
        a->next = b->next;
        if (b->next >= 0) s->sym[b->next].prev = c.left;
        b->len = 0;
        if (try_push(t, s, a->prev, c.left, err) || try_push(t, s, c.left, a->next, err)) return -1;
    }
    for (int i = n > 0 ? 0 : -1; i >= 0; i = s->sym[i].next) {
        const Symbol *y = &s->sym[i];
        int rc = y->id >= 0 ? ids_push(out, y->id, err) : emit_unknown(t, s, y, out, err);
        if (rc) return -1;
    }
    return 0;
}
