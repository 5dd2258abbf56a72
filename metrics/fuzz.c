/* fuzz.c — fuzzywuzzy's fuzz.ratio over Python's difflib.SequenceMatcher (isjunk None, autojunk on).
 *
 * LongBench installs fuzzywuzzy without python-Levenshtein, so fuzz.ratio is difflib's ratio, not the
 * Levenshtein one (they differ: difflib finds the longest matching block and recurses on both sides of it,
 * which is not a longest common subsequence). Reproduced here on code points:
 *   b2j     positions of each code point of b, minus the "popular" ones when len(b) >= 200 (more than
 *           len(b)/100 + 1 occurrences), which never anchor a match but can extend one;
 *   match   find_longest_match's dynamic program over a[alo:ahi] × b[blo:bhi] (first longest wins), then
 *           the extension by equal neighbours;
 *   blocks  get_matching_blocks's stack of ranges; only the total size M matters for the ratio.
 * ratio = 2M / (len a + len b), fuzz.ratio = round-half-even(100 * ratio). */
#include "scorers.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    uint32_t cp;
    int pos;
} CodePos;

typedef struct {
    const uint32_t *a, *b;
    CodePos *b2j;   /* [n_b2j] (code point, position in b), sorted; popular code points removed */
    int n_b2j;
    int *j2len;     /* [len b] length of the match ending at (i-1, j) from the previous row */
    int *newj2len;  /* [len b] the row being built */
    int *touched, *newtouched; /* the j set in each row, to clear them cheaply */
} Matcher;

static int codepos_cmp(const void *pa, const void *pb) {
    const CodePos *a = pa, *b = pb;
    if (a->cp != b->cp) return a->cp < b->cp ? -1 : 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

/* First index of code point c in b2j, or n_b2j. */
static int b2j_find(const Matcher *m, uint32_t c) {
    int lo = 0, hi = m->n_b2j;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->b2j[mid].cp < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void longest_match(Matcher *m, int alo, int ahi, int blo, int bhi, int *bi, int *bj, int *bsize) {
    int besti = alo, bestj = blo, bestsize = 0, n_touched = 0;
    for (int i = alo; i < ahi; i++) {
        int n_new = 0;
        for (int k = b2j_find(m, m->a[i]); k < m->n_b2j && m->b2j[k].cp == m->a[i]; k++) {
            int j = m->b2j[k].pos;
            if (j < blo) continue;
            if (j >= bhi) break;
            int len = (j > 0 ? m->j2len[j - 1] : 0) + 1;
            m->newj2len[j] = len;
            m->newtouched[n_new++] = j;
            if (len > bestsize) besti = i - len + 1, bestj = j - len + 1, bestsize = len;
        }
        for (int t = 0; t < n_touched; t++) m->j2len[m->touched[t]] = 0;
        int *swap = m->j2len;
        m->j2len = m->newj2len, m->newj2len = swap;
        swap = m->touched;
        m->touched = m->newtouched, m->newtouched = swap;
        n_touched = n_new;
    }
    for (int t = 0; t < n_touched; t++) m->j2len[m->touched[t]] = 0;
    while (besti > alo && bestj > blo && m->a[besti - 1] == m->b[bestj - 1]) besti--, bestj--, bestsize++;
    while (besti + bestsize < ahi && bestj + bestsize < bhi && m->a[besti + bestsize] == m->b[bestj + bestsize])
        bestsize++;
    *bi = besti, *bj = bestj, *bsize = bestsize;
}

/* Total size of get_matching_blocks(). */
static int matched_total(Matcher *m, int la, int lb, KvErr *err) {
    /* Each pushed range lies strictly inside its parent and is disjoint from its sibling, so at most
     * min(la, lb) + 1 ranges wait at once. */
    int cap = (la < lb ? la : lb) + 2, top = 0, total = 0;
    int (*stack)[4] = kv_malloc((size_t)cap * sizeof *stack, err);
    if (!stack) return -1;
    stack[top][0] = 0, stack[top][1] = la, stack[top][2] = 0, stack[top][3] = lb, top++;
    while (top > 0) {
        top--;
        int alo = stack[top][0], ahi = stack[top][1], blo = stack[top][2], bhi = stack[top][3];
        int i, j, k;
        longest_match(m, alo, ahi, blo, bhi, &i, &j, &k);
        if (k == 0) continue;
        total += k;
        if (alo < i && blo < j) stack[top][0] = alo, stack[top][1] = i, stack[top][2] = blo, stack[top][3] = j, top++;
        if (i + k < ahi && j + k < bhi)
            stack[top][0] = i + k, stack[top][1] = ahi, stack[top][2] = j + k, stack[top][3] = bhi, top++;
    }
    free(stack);
    return total;
}

int fuzz_ratio(USpan a, USpan b, int *ratio, KvErr *err) {
    if (mtext_span_equal(a, b)) return *ratio = 100, 0;
    if (a.n == 0 || b.n == 0) return *ratio = 0, 0;
    if (a.n > (1u << 30) || b.n > (1u << 30))
        return kv_fail(err, "text of %zu code points is too long", a.n > b.n ? a.n : b.n);
    int la = (int)a.n, lb = (int)b.n, rc = -1;
    Matcher m = {.a = a.cp, .b = b.cp};
    m.b2j = kv_malloc((size_t)lb * sizeof *m.b2j, err);
    m.j2len = kv_calloc((size_t)lb, sizeof *m.j2len, err);
    m.newj2len = kv_calloc((size_t)lb, sizeof *m.newj2len, err);
    m.touched = kv_malloc((size_t)lb * sizeof *m.touched, err);
    m.newtouched = kv_malloc((size_t)lb * sizeof *m.newtouched, err);
    if (!m.b2j || !m.j2len || !m.newj2len || !m.touched || !m.newtouched) goto done;
    for (int j = 0; j < lb; j++) m.b2j[j] = (CodePos){b.cp[j], j};
    qsort(m.b2j, (size_t)lb, sizeof *m.b2j, codepos_cmp);
    m.n_b2j = lb;
    if (lb >= 200) { /* autojunk: drop the runs of popular code points */
        int popular_above = lb / 100 + 1, kept = 0;
        for (int s = 0; s < lb;) {
            int e = s;
            while (e < lb && m.b2j[e].cp == m.b2j[s].cp) e++;
            if (e - s <= popular_above)
                for (int k = s; k < e; k++) m.b2j[kept++] = m.b2j[k];
            s = e;
        }
        m.n_b2j = kept;
    }
    int total = matched_total(&m, la, lb, err);
    if (total < 0) goto done;
    double r = 2.0 * total / (la + lb);
    *ratio = (int)nearbyint(100 * r); /* Python's round(): half to even, the default rounding mode */
    rc = 0;
done:
    free(m.b2j);
    free(m.j2len);
    free(m.newj2len);
    free(m.touched);
    free(m.newtouched);
    return rc;
}
