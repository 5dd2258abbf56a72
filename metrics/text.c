/* text.c — code-point strings with Python's str semantics (decode, lower, split, strip, find, intern). */
#include "text.h"

#include <stdlib.h>
#include <string.h>

#define REPLACEMENT 0xFFFDu
#define CAPITAL_SIGMA 0x3A3u

static int in_ranges(const MtextRange *r, int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].first) hi = mid - 1;
        else if (cp > r[mid].last) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int mtext_is_space(uint32_t cp) { return in_ranges(MTEXT_SPACE, MTEXT_SPACE_N, cp); }
int mtext_is_alnum(uint32_t cp) { return in_ranges(MTEXT_ALNUM, MTEXT_ALNUM_N, cp); }
int mtext_is_decimal(uint32_t cp) { return in_ranges(MTEXT_DECIMAL, MTEXT_DECIMAL_N, cp); }
static int is_cased(uint32_t cp) { return in_ranges(MTEXT_CASED, MTEXT_CASED_N, cp); }
static int is_case_ignorable(uint32_t cp) { return in_ranges(MTEXT_CASE_IGNORABLE, MTEXT_CASE_IGNORABLE_N, cp); }

static uint32_t lower_simple(uint32_t cp) {
    int lo = 0, hi = MTEXT_LOWER_N - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const MtextLowerRun *r = &MTEXT_LOWER[mid];
        if (cp < r->first) hi = mid - 1;
        else if (cp > r->last) lo = mid + 1;
        else return (cp - r->first) % (uint32_t)r->stride == 0 ? (uint32_t)((int64_t)cp + r->delta) : cp;
    }
    return cp;
}

/* ---- decoding ---------------------------------------------------------------------------------- */

/* One code point at s[*i], advancing *i past it; a maximal invalid subsequence gives one U+FFFD and
 * leaves *i at the first byte that could start something valid (CPython's "replace" policy). */
static uint32_t decode_one(const unsigned char *s, size_t n, size_t *i) {
    unsigned char b = s[(*i)++];
    if (b < 0x80) return b;
    int need;
    uint32_t cp;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1, cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2, cp = b & 0x0F;
        if (b == 0xE0) lo = 0xA0; /* overlong */
        if (b == 0xED) hi = 0x9F; /* surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3, cp = b & 0x07;
        if (b == 0xF0) lo = 0x90; /* overlong */
        if (b == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return REPLACEMENT;
    }
    for (int k = 0; k < need; k++) {
        unsigned char c = *i < n ? s[*i] : 0;
        if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF)) return REPLACEMENT;
        cp = (cp << 6) | (c & 0x3F);
        (*i)++;
    }
    return cp;
}

int mtext_decode(UStr *out, const char *utf8, KvErr *err) {
    size_t n = strlen(utf8), i = 0, k = 0;
    out->cp = kv_malloc((n + 1) * sizeof *out->cp, err);
    out->n = 0;
    if (!out->cp) return -1;
    while (i < n) out->cp[k++] = decode_one((const unsigned char *)utf8, n, &i);
    out->n = k;
    return 0;
}

void mtext_free(UStr *s) {
    free(s->cp);
    s->cp = NULL;
    s->n = 0;
}

USpan mtext_span(const UStr *s) { return (USpan){s->cp, s->n}; }

/* ---- case ---------------------------------------------------------------------------------------- */

/* CPython's handle_capital_sigma: final form when a cased letter precedes (skipping case-ignorables)
 * and none follows (likewise). */
static uint32_t lower_sigma(USpan s, size_t i) {
    size_t j = i;
    while (j > 0 && is_case_ignorable(s.cp[j - 1])) j--;
    if (j == 0 || !is_cased(s.cp[j - 1])) return 0x3C3;
    j = i + 1;
    while (j < s.n && is_case_ignorable(s.cp[j])) j++;
    return j < s.n && is_cased(s.cp[j]) ? 0x3C3 : 0x3C2;
}

int mtext_lower(UStr *out, USpan in, KvErr *err) {
    /* U+0130 is the only code point that lowers to two; size for the worst case. */
    out->cp = kv_malloc((2 * in.n + 1) * sizeof *out->cp, err);
    out->n = 0;
    if (!out->cp) return -1;
    size_t k = 0;
    for (size_t i = 0; i < in.n; i++) {
        uint32_t c = in.cp[i];
        if (c < 0x80) {
            out->cp[k++] = c >= 'A' && c <= 'Z' ? c + 32 : c;
        } else if (c == 0x130) {
            out->cp[k++] = 'i';
            out->cp[k++] = 0x307;
        } else if (c == CAPITAL_SIGMA) {
            out->cp[k++] = lower_sigma(in, i);
        } else {
            out->cp[k++] = lower_simple(c);
        }
    }
    out->n = k;
    return 0;
}

/* ---- slicing ------------------------------------------------------------------------------------- */

int mtext_span_equal(USpan a, USpan b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.cp, b.cp, a.n * sizeof *a.cp) == 0);
}

int mtext_contains(USpan hay, USpan needle) {
    if (needle.n == 0) return 1;
    for (size_t i = 0; i + needle.n <= hay.n; i++)
        if (hay.cp[i] == needle.cp[0] && memcmp(hay.cp + i, needle.cp, needle.n * sizeof *needle.cp) == 0)
            return 1;
    return 0;
}

USpan mtext_strip(USpan s) {
    while (s.n > 0 && mtext_is_space(s.cp[0])) s.cp++, s.n--;
    while (s.n > 0 && mtext_is_space(s.cp[s.n - 1])) s.n--;
    return s;
}

USpan mtext_first_line(USpan s) {
    while (s.n > 0 && s.cp[0] == '\n') s.cp++, s.n--;
    size_t k = 0;
    while (k < s.n && s.cp[k] != '\n') k++;
    s.n = k;
    return s;
}

int mtext_split(USpan s, USpan **words, size_t *n_words, KvErr *err) {
    *words = kv_malloc((s.n / 2 + 1) * sizeof **words, err);
    *n_words = 0;
    if (!*words) return -1;
    size_t i = 0;
    while (i < s.n) {
        while (i < s.n && mtext_is_space(s.cp[i])) i++;
        size_t start = i;
        while (i < s.n && !mtext_is_space(s.cp[i])) i++;
        if (i > start) (*words)[(*n_words)++] = (USpan){s.cp + start, i - start};
    }
    return 0;
}

/* ---- interning ----------------------------------------------------------------------------------- */

static int span_cmp(USpan a, USpan b) {
    size_t n = a.n < b.n ? a.n : b.n;
    for (size_t i = 0; i < n; i++)
        if (a.cp[i] != b.cp[i]) return a.cp[i] < b.cp[i] ? -1 : 1;
    return a.n < b.n ? -1 : a.n > b.n;
}

typedef struct {
    USpan span;
    size_t index;
} IndexedSpan;

static int indexed_cmp(const void *pa, const void *pb) {
    const IndexedSpan *a = pa, *b = pb;
    return span_cmp(a->span, b->span);
}

int mtext_intern(const USpan *spans, size_t n, int *ids, int *n_distinct, KvErr *err) {
    IndexedSpan *order = kv_malloc(n * sizeof *order, err);
    if (!order) return -1;
    for (size_t i = 0; i < n; i++) order[i] = (IndexedSpan){spans[i], i};
    qsort(order, n, sizeof *order, indexed_cmp);
    int next = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !mtext_span_equal(order[i].span, order[i - 1].span)) next++;
        ids[order[i].index] = next;
    }
    *n_distinct = n ? next + 1 : 0;
    free(order);
    return 0;
}
