/* tokenizer_pretok.c — the pre-tokenizer regexes as hand-written scanners (no regex engine).
 *
 * Each scanner reproduces one regex's leftmost-first alternation as Oniguruma (Hugging Face) runs it: at a
 * position the alternatives are tried in order and the first that matches wins, with the backtracking of
 * `\s+(?!\S)` (a whitespace run minus its last character when a non-space follows) and `\s*[\r\n]+` (up to
 * the last newline of a whitespace run) worked out by hand. The regexes (spec models.md §3.2):
 *   GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *           \s*[\r\n]+|\s+(?!\S)|\s+
 *   Qwen2   the Llama-3 regex with \p{N} in place of \p{N}{1,3}
 * Scanners work on decoded code points with precomputed classes (CH_LETTER, CH_NUMBER, CH_SPACE), over a
 * range [lo, hi) that acts as the whole input (the digit-split pre-tokenizer feeds sub-ranges). */
#include <string.h>

#include "tokenizer_internal.h"

static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

PretokKind pretok_from_regex(const char *regex) {
    if (strcmp(regex, LLAMA3_REGEX) == 0) return PRETOK_LLAMA3;
    if (strcmp(regex, QWEN2_REGEX) == 0) return PRETOK_QWEN2;
    if (strcmp(regex, GPT2_REGEX) == 0) return PRETOK_GPT2;
    return PRETOK_NONE;
}

typedef struct {
    const uint32_t *cp;
    const unsigned char *cls;
    int hi;          /* end of the range being scanned */
} Scan;

static int is_other(const Scan *s, int i) { return !(s->cls[i] & (CH_LETTER | CH_NUMBER | CH_SPACE)); }
static int is_newline(const Scan *s, int i) { return s->cp[i] == '\r' || s->cp[i] == '\n'; }

static int run_of(const Scan *s, int i, int cls) {
    while (i < s->hi && (s->cls[i] & cls)) i++;
    return i;
}

static uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d at i (ASCII case folded when fold); returns the end or -1. */
static int contraction(const Scan *s, int i, int fold) {
    if (s->cp[i] != '\'' || i + 1 >= s->hi) return -1;
    uint32_t a = fold ? lower_ascii(s->cp[i + 1]) : s->cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= s->hi) return -1;
    uint32_t b = fold ? lower_ascii(s->cp[i + 2]) : s->cp[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return -1;
}

/* \s+(?!\S)|\s+ at a whitespace character i: the run, less its last character when a non-space follows
 * and the run is longer than one. */
static int trailing_space(const Scan *s, int i) {
    int k = run_of(s, i, CH_SPACE);
    if (k < s->hi && k - i >= 2) return k - 1;
    return k;
}

static int gpt2_next(const Scan *s, int i) {
    int e = contraction(s, i, 0);
    if (e >= 0) return e;
    int j = s->cp[i] == ' ' && i + 1 < s->hi ? i + 1 : i;
    if (s->cls[j] & CH_LETTER) return run_of(s, j, CH_LETTER);
    if (s->cls[j] & CH_NUMBER) return run_of(s, j, CH_NUMBER);
    if (is_other(s, j)) {
        while (j < s->hi && is_other(s, j)) j++;
        return j;
    }
    return trailing_space(s, i);
}

static int llama3_next(const Scan *s, int i, int max_digits) {
    int e = contraction(s, i, 1);
    if (e >= 0) return e;
    unsigned char c = s->cls[i];
    if (c & CH_LETTER) return run_of(s, i, CH_LETTER);
    if (!(c & CH_NUMBER) && !is_newline(s, i) && i + 1 < s->hi && (s->cls[i + 1] & CH_LETTER))
        return run_of(s, i + 1, CH_LETTER);
    if (c & CH_NUMBER) {
        int j = i;
        while (j < s->hi && j - i < max_digits && (s->cls[j] & CH_NUMBER)) j++;
        return j;
    }
    int j = s->cp[i] == ' ' && i + 1 < s->hi ? i + 1 : i;
    if (is_other(s, j)) {
        while (j < s->hi && is_other(s, j)) j++;
        while (j < s->hi && is_newline(s, j)) j++;
        return j;
    }
    /* i is whitespace here: \s*[\r\n]+ takes the run up to its last newline. */
    int k = run_of(s, i, CH_SPACE), last_nl = -1;
    for (int m = i; m < k; m++)
        if (is_newline(s, m)) last_nl = m;
    if (last_nl >= 0) return last_nl + 1;
    return trailing_space(s, i);
}

static int push_word(WordSpans *out, int start, int end, KvErr *err) {
    if (tok_reserve((void **)&out->v, &out->cap, out->n + 1, sizeof *out->v, err)) return -1;
    out->v[out->n].start = start;
    out->v[out->n].end = end;
    out->n++;
    return 0;
}

static int scan_range(PretokKind kind, const Scan *s, int lo, WordSpans *out, KvErr *err) {
    for (int i = lo; i < s->hi;) {
        int e = kind == PRETOK_LLAMA3 ? llama3_next(s, i, 3)
              : kind == PRETOK_QWEN2  ? llama3_next(s, i, 1)
                                      : gpt2_next(s, i);
        if (push_word(out, i, e, err)) return -1;
        i = e;
    }
    return 0;
}

int pretok_split(PretokKind kind, const uint32_t *cp, const unsigned char *cls, int n, WordSpans *out,
                 KvErr *err) {
    Scan s = {cp, cls, n};
    switch (kind) {
    case PRETOK_NONE:
        return n ? push_word(out, 0, n, err) : 0;
    case PRETOK_GPT2:
    case PRETOK_LLAMA3:
    case PRETOK_QWEN2:
        return scan_range(kind, &s, 0, out, err);
    case PRETOK_DIGITS_GPT2:
        for (int i = 0; i < n;) {
            if (cls[i] & CH_NUMBER) {
                if (push_word(out, i, i + 1, err)) return -1;
                i++;
                continue;
            }
            int j = i;
            while (j < n && !(cls[j] & CH_NUMBER)) j++;
            Scan piece = {cp, cls, j};
            if (scan_range(PRETOK_GPT2, &piece, i, out, err)) return -1;
            i = j;
        }
        return 0;
    case PRETOK_METASPACE:
        for (int i = 0; i < n;) {
            int j = i + 1;
            while (j < n && cp[j] != 0x2581) j++;
            if (push_word(out, i, j, err)) return -1;
            i = j;
        }
        return 0;
    }
    return kv_fail(err, "tokenizer: unknown pre-tokenizer %d", (int)kind);
}
