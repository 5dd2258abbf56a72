/* rouge.c — Rouge-L F as LongBench gets it from the `rouge` package 1.0.1 (pltrdy), quirks included.
 *
 * This is the package's summary-level "union LCS", not ROUGE-1.5.5's: texts are cut into sentences at every
 * '.', words are the single-space pieces of each white-space-normalised sentence, and the LCS paths of every
 * (reference sentence, hypothesis sentence) pair add their words to ONE set, whose size is the LCS count;
 * m and n are the numbers of distinct words. LongBench turns any exception into 0, which happens
 *   - when either side has no sentence (empty text, or only periods): ValueError;
 *   - when the package's recursive LCS walk-back is too deep for Python: RecursionError. The walk makes one
 *     call per step, and under CPython 3.11's default limit of 1000 frames, with the 9 frames below it in
 *     LongBench's eval.py, a chain of ROUGE_RECON_MAX_CALLS calls survives and one more does not
 *     (measured by tests/reference/gen_metric_cases.py, which records cases on both sides). */
#include "scorers.h"

#include <stdlib.h>

/* Sentence list of one text: sentence s holds words [start[s], start[s+1]). */
typedef struct {
    USpan *words;
    size_t *start;
    size_t n_sentences, n_words;
} Sentences;

static void sentences_free(Sentences *s) {
    free(s->words);
    free(s->start);
}

/* [" ".join(p.split()) for p in text.split(".") if len(p) > 0], then each .split(" "): a piece of white
 * space only becomes the sentence "" with the one word "". */
static int sentences_of(USpan text, Sentences *out, KvErr *err) {
    *out = (Sentences){0};
    out->words = kv_malloc((text.n + 1) * sizeof *out->words, err);
    out->start = kv_malloc((text.n + 2) * sizeof *out->start, err);
    if (!out->words || !out->start) return sentences_free(out), -1;
    size_t i = 0;
    while (i <= text.n) {
        size_t end = i;
        while (end < text.n && text.cp[end] != '.') end++;
        if (end > i) {
            USpan *words;
            size_t n;
            if (mtext_split((USpan){text.cp + i, end - i}, &words, &n, err)) return sentences_free(out), -1;
            out->start[out->n_sentences++] = out->n_words;
            if (n == 0) out->words[out->n_words++] = (USpan){text.cp + i, 0};
            for (size_t k = 0; k < n; k++) out->words[out->n_words++] = words[k];
            free(words);
        }
        i = end + 1;
    }
    out->start[out->n_sentences] = out->n_words;
    return 0;
}

static int count_distinct(const int *ids, size_t n, int n_ids, KvErr *err) {
    char *seen = kv_calloc((size_t)n_ids, 1, err);
    if (!seen) return -1;
    int distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (!seen[ids[i]]) seen[ids[i]] = 1, distinct++;
    free(seen);
    return distinct;
}

/* One pair: the package's _lcs table and _recon walk over word ids x (reference) and y (hypothesis), marking
 * the words on the path in `in_union`. Returns 1 when the walk would exceed Python's recursion limit. */
static int union_lcs(const int *x, size_t nx, const int *y, size_t ny, char *in_union, KvErr *err) {
    size_t min = nx < ny ? nx : ny;
    if (min + 1 > ROUGE_RECON_MAX_CALLS) return 1; /* every walk takes at least min(nx, ny) steps */
    size_t w = ny + 1;
    if ((nx + 1) > ((size_t)1 << 26) / w) /* 256 MiB of table: a degenerate text, not a summary */
        return kv_fail(err, "sentence pair of %zu x %zu words is too long to score", nx, ny);
    int *t = kv_malloc((nx + 1) * w * sizeof *t, err);
    if (!t) return -1;
    for (size_t i = 0; i <= nx; i++)
        for (size_t j = 0; j <= ny; j++) {
            if (i == 0 || j == 0) t[i * w + j] = 0;
            else if (x[i - 1] == y[j - 1]) t[i * w + j] = t[(i - 1) * w + j - 1] + 1;
            else t[i * w + j] = t[(i - 1) * w + j] > t[i * w + j - 1] ? t[(i - 1) * w + j] : t[i * w + j - 1];
        }
    size_t i = nx, j = ny, calls = 1;
    while (i > 0 && j > 0) {
        if (x[i - 1] == y[j - 1]) in_union[x[i - 1]] = 1, i--, j--;
        else if (t[(i - 1) * w + j] > t[i * w + j - 1]) i--;
        else j--;
        calls++;
    }
    free(t);
    return calls > ROUGE_RECON_MAX_CALLS;
}

int rouge_l_f(USpan hyp, USpan ref, double *f, KvErr *err) {
    Sentences h, r;
    *f = 0.0;
    if (sentences_of(hyp, &h, err)) return -1;
    if (sentences_of(ref, &r, err)) return sentences_free(&h), -1;
    int rc = -1, n_ids = 0;
    USpan *all = NULL;
    int *ids = NULL;
    char *in_union = NULL;
    if (h.n_sentences == 0 || r.n_sentences == 0) { /* ValueError in the package */
        rc = 0;
        goto done;
    }
    size_t n_all = h.n_words + r.n_words;
    all = kv_malloc(n_all * sizeof *all, err);
    ids = kv_malloc(n_all * sizeof *ids, err);
    if (!all || !ids) goto done;
    for (size_t k = 0; k < h.n_words; k++) all[k] = h.words[k];
    for (size_t k = 0; k < r.n_words; k++) all[h.n_words + k] = r.words[k];
    if (mtext_intern(all, n_all, ids, &n_ids, err)) goto done;
    const int *hid = ids, *rid = ids + h.n_words;
    int n = count_distinct(hid, h.n_words, n_ids, err), m = count_distinct(rid, r.n_words, n_ids, err);
    in_union = kv_calloc((size_t)n_ids, 1, err);
    if (n < 0 || m < 0 || !in_union) goto done;
    for (size_t rs = 0; rs < r.n_sentences; rs++)
        for (size_t hs = 0; hs < h.n_sentences; hs++) {
            int deep = union_lcs(rid + r.start[rs], r.start[rs + 1] - r.start[rs], hid + h.start[hs],
                                 h.start[hs + 1] - h.start[hs], in_union, err);
            if (deep < 0) goto done;
            if (deep) { /* RecursionError in the package */
                rc = 0;
                goto done;
            }
        }
    int llcs = 0;
    for (int k = 0; k < n_ids; k++) llcs += in_union[k];
    double r_lcs = (double)llcs / m, p_lcs = (double)llcs / n;
    *f = 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8));
    rc = 0;
done:
    free(all);
    free(ids);
    free(in_union);
    sentences_free(&h);
    sentences_free(&r);
    return rc;
}
