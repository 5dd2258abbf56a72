/* metrics.c — the metric table, LongBench's short metrics, RULER's string match, the needle score, and the
 * averages. Rouge-L and code similarity live in rouge.c and fuzz.c; Python string semantics in text.c.
 * Every scorer works on code points (text.h says why). */
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scorers.h"

typedef enum { SUITE_LONGBENCH, SUITE_RULER, SUITE_NEEDLE } Suite;

/* What every per-answer scorer sees: the prediction after its suite's clean-up, and the classes. */
typedef struct {
    USpan pred;
    const UStr *classes;
    int n_classes;
} Input;

typedef int (*AnswerScoreFn)(const Input *in, USpan answer, double *score, KvErr *err);

typedef struct {
    const char *name;
    Suite suite;
    AnswerScoreFn score; /* one answer */
    int mean_over_answers; /* string_match_all: the fraction of answers found; else the max over answers */
} Metric;

/* ---- LongBench: qa_f1 ------------------------------------------------------------------------------ */

/* Python's string.punctuation: the 32 printable ASCII characters that are neither letters nor digits. */
static int is_ascii_punct(uint32_t c) {
    int alnum = (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    return c > 0x20 && c < 0x7F && !alnum;
}

static int is_article(const uint32_t *w, size_t n) {
    static const char *const ARTICLES[] = {"a", "an", "the"};
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(ARTICLES[k]), i = 0;
        while (i < len && i < n && w[i] == (uint32_t)ARTICLES[k][i]) i++;
        if (i == len && n == len) return 1;
    }
    return 0;
}

/* LongBench's normalize_answer(s).split(): lower, drop ASCII punctuation, replace each whole \w-word a / an /
 * the by a space (\b is a boundary of Unicode \w: alnum or '_', and '_' is gone by then), split. *norm holds
 * the text the tokens point into. */
static int normalize_tokens(USpan s, UStr *norm, USpan **tokens, size_t *n_tokens, KvErr *err) {
    if (mtext_lower(norm, s, err)) return -1;
    size_t w = 0;
    for (size_t r = 0; r < norm->n; r++)
        if (!is_ascii_punct(norm->cp[r])) norm->cp[w++] = norm->cp[r];
    norm->n = w;
    w = 0;
    for (size_t r = 0; r < norm->n;) {
        if (!mtext_is_alnum(norm->cp[r])) {
            norm->cp[w++] = norm->cp[r++];
            continue;
        }
        size_t end = r;
        while (end < norm->n && mtext_is_alnum(norm->cp[end])) end++;
        if (is_article(norm->cp + r, end - r)) {
            norm->cp[w++] = ' ';
        } else {
            memmove(norm->cp + w, norm->cp + r, (end - r) * sizeof *norm->cp);
            w += end - r;
        }
        r = end;
    }
    norm->n = w;
    if (mtext_split(mtext_span(norm), tokens, n_tokens, err)) return mtext_free(norm), -1;
    return 0;
}

/* LongBench's f1_score over two token lists (Counter intersection). */
static int token_f1(const USpan *p, size_t np, const USpan *g, size_t ng, double *f1, KvErr *err) {
    size_t n = np + ng;
    USpan *all = kv_malloc(n * sizeof *all, err);
    int *ids = kv_malloc(n * sizeof *ids, err), n_ids = 0;
    int *count = NULL;
    int rc = -1;
    if (!all || !ids) goto done;
    memcpy(all, p, np * sizeof *p);
    memcpy(all + np, g, ng * sizeof *g);
    if (mtext_intern(all, n, ids, &n_ids, err)) goto done;
    count = kv_calloc((size_t)n_ids, sizeof *count, err);
    if (!count) goto done;
    for (size_t i = 0; i < np; i++) count[ids[i]]++;
    long same = 0;
    for (size_t i = np; i < n; i++)
        if (count[ids[i]] > 0) count[ids[i]]--, same++;
    *f1 = 0.0;
    if (same > 0) {
        double precision = 1.0 * same / np, recall = 1.0 * same / ng;
        *f1 = (2 * precision * recall) / (precision + recall);
    }
    rc = 0;
done:
    free(all);
    free(ids);
    free(count);
    return rc;
}

static int score_qa_f1(const Input *in, USpan answer, double *score, KvErr *err) {
    UStr np, ng;
    USpan *tp = NULL, *tg = NULL;
    size_t ntp, ntg;
    if (normalize_tokens(in->pred, &np, &tp, &ntp, err)) return -1;
    int rc = -1;
    if (normalize_tokens(answer, &ng, &tg, &ntg, err) == 0) {
        rc = token_f1(tp, ntp, tg, ntg, score, err);
        free(tg);
        mtext_free(&ng);
    }
    free(tp);
    mtext_free(&np);
    return rc;
}

/* ---- LongBench: rouge_l, classification, retrieval, count, code_sim ------------------------------ */

static int score_rouge_l(const Input *in, USpan answer, double *score, KvErr *err) {
    return rouge_l_f(in->pred, answer, score, err);
}

/* Classes found in the prediction, then LongBench's removal loop run as Python runs it: list.remove drops
 * the FIRST equal element while the iterator's index moves on, so the element after a removed one is
 * skipped. Score 1/len(list) if the answer is still in it. */
static int score_classification(const Input *in, USpan answer, double *score, KvErr *err) {
    if (!in->classes) return kv_fail(err, "needs all_classes (none given)");
    USpan *list = kv_malloc((size_t)(in->n_classes + 1) * sizeof *list, err);
    if (!list) return -1;
    int n = 0;
    for (int c = 0; c < in->n_classes; c++)
        if (mtext_contains(in->pred, mtext_span(&in->classes[c]))) list[n++] = mtext_span(&in->classes[c]);
    for (int it = 0; it < n; it++) {
        USpan term = list[it];
        if (mtext_contains(answer, term) && !mtext_span_equal(term, answer)) {
            int first = 0;
            while (!mtext_span_equal(list[first], term)) first++;
            memmove(list + first, list + first + 1, (size_t)(n - first - 1) * sizeof *list);
            n--;
        }
    }
    *score = 0.0;
    for (int k = 0; k < n; k++)
        if (mtext_span_equal(list[k], answer)) *score = 1.0 / n;
    free(list);
    return 0;
}

/* re.findall(r"\d+", s): maximal runs of Unicode decimal digits; runs has room for s.n / 2 + 1. */
static size_t digit_runs(USpan s, USpan *runs) {
    size_t n = 0;
    for (size_t i = 0; i < s.n;) {
        if (!mtext_is_decimal(s.cp[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < s.n && mtext_is_decimal(s.cp[i])) i++;
        runs[n++] = (USpan){s.cp + start, i - start};
    }
    return n;
}

/* count_score / retrieval_score: the share of the prediction's numbers that equal `target`. */
static int number_share(USpan pred, USpan target, double *score, KvErr *err) {
    USpan *runs = kv_malloc((pred.n / 2 + 1) * sizeof *runs, err);
    if (!runs) return -1;
    size_t n = digit_runs(pred, runs), right = 0;
    for (size_t k = 0; k < n; k++) right += mtext_span_equal(runs[k], target);
    *score = n ? (double)right / n : 0.0;
    free(runs);
    return 0;
}

static int score_count(const Input *in, USpan answer, double *score, KvErr *err) {
    return number_share(in->pred, answer, score, err);
}

/* The id of re.findall(r"Paragraph (\d+)", answer)[0]. */
static int paragraph_id(USpan answer, USpan *id) {
    static const char PREFIX[] = "Paragraph ";
    const size_t plen = sizeof PREFIX - 1;
    for (size_t i = 0; i + plen < answer.n; i++) {
        size_t k = 0;
        while (k < plen && answer.cp[i + k] == (uint32_t)PREFIX[k]) k++;
        if (k < plen) continue;
        size_t end = i + plen;
        while (end < answer.n && mtext_is_decimal(answer.cp[end])) end++;
        if (end > i + plen) {
            *id = (USpan){answer.cp + i + plen, end - i - plen};
            return 0;
        }
    }
    return -1;
}

static int score_retrieval(const Input *in, USpan answer, double *score, KvErr *err) {
    USpan id;
    if (paragraph_id(answer, &id)) return kv_fail(err, "answer has no \"Paragraph N\"");
    return number_share(in->pred, id, score, err);
}

static int score_code_sim(const Input *in, USpan answer, double *score, KvErr *err) {
    /* The first line of prediction.lstrip("\n").split("\n") without '`', '#' or "//"; "" if none. */
    USpan rest = in->pred, line = {in->pred.cp, 0};
    while (rest.n > 0 && rest.cp[0] == '\n') rest.cp++, rest.n--;
    for (;;) {
        size_t len = 0;
        int code = 1;
        while (len < rest.n && rest.cp[len] != '\n') {
            uint32_t c = rest.cp[len];
            if (c == '`' || c == '#' || (c == '/' && len + 1 < rest.n && rest.cp[len + 1] == '/')) code = 0;
            len++;
        }
        if (code) {
            line = (USpan){rest.cp, len};
            break;
        }
        if (len == rest.n) break;
        rest.cp += len + 1, rest.n -= len + 1;
    }
    int ratio;
    if (fuzz_ratio(line, answer, &ratio, err)) return -1;
    *score = ratio / 100.0;
    return 0;
}

/* ---- RULER string match and the needle ------------------------------------------------------------ */

static int score_string_match(const Input *in, USpan answer, double *score, KvErr *err) {
    UStr pred, ans;
    if (mtext_lower(&pred, in->pred, err)) return -1;
    if (mtext_lower(&ans, answer, err)) return mtext_free(&pred), -1;
    *score = mtext_contains(mtext_span(&pred), mtext_span(&ans)) ? 1.0 : 0.0;
    mtext_free(&pred);
    mtext_free(&ans);
    return 0;
}

static int score_needle(const Input *in, USpan answer, double *score, KvErr *err) {
    UStr lp = {0}, la = {0};
    USpan *wp = NULL, *wa = NULL, *all = NULL;
    size_t np = 0, na = 0;
    int *ids = NULL, n_ids = 0, rc = -1;
    char *side = NULL; /* bit 1: in the prediction, bit 2: in the answer */
    if (mtext_lower(&lp, in->pred, err) || mtext_lower(&la, answer, err)) goto done;
    if (mtext_split(mtext_span(&lp), &wp, &np, err) || mtext_split(mtext_span(&la), &wa, &na, err)) goto done;
    if (na == 0) {
        kv_fail(err, "answer has no words");
        goto done;
    }
    all = kv_malloc((np + na) * sizeof *all, err);
    ids = kv_malloc((np + na) * sizeof *ids, err);
    if (!all || !ids) goto done;
    memcpy(all, wp, np * sizeof *wp);
    memcpy(all + np, wa, na * sizeof *wa);
    if (mtext_intern(all, np + na, ids, &n_ids, err)) goto done;
    side = kv_calloc((size_t)n_ids, 1, err);
    if (!side) goto done;
    for (size_t k = 0; k < np; k++) side[ids[k]] |= 1;
    for (size_t k = np; k < np + na; k++) side[ids[k]] |= 2;
    int expected = 0, found = 0;
    for (int k = 0; k < n_ids; k++) expected += (side[k] & 2) != 0, found += side[k] == 3;
    *score = (double)found / expected;
    rc = 0;
done:
    mtext_free(&lp);
    mtext_free(&la);
    free(wp);
    free(wa);
    free(all);
    free(ids);
    free(side);
    return rc;
}

/* ---- the table ------------------------------------------------------------------------------------- */

static const Metric METRICS[] = {
    {"qa_f1", SUITE_LONGBENCH, score_qa_f1, 0},
    {"rouge_l", SUITE_LONGBENCH, score_rouge_l, 0},
    {"classification", SUITE_LONGBENCH, score_classification, 0},
    {"retrieval", SUITE_LONGBENCH, score_retrieval, 0},
    {"count", SUITE_LONGBENCH, score_count, 0},
    {"code_sim", SUITE_LONGBENCH, score_code_sim, 0},
    {"string_match_all", SUITE_RULER, score_string_match, 1},
    {"string_match_part", SUITE_RULER, score_string_match, 0},
    {"needle", SUITE_NEEDLE, score_needle, 0},
};
#define N_METRICS (int)(sizeof METRICS / sizeof METRICS[0])

static const Metric *metric_find(const char *name) {
    for (int i = 0; name && i < N_METRICS; i++)
        if (!strcmp(METRICS[i].name, name)) return &METRICS[i];
    return NULL;
}

int metric_known(const char *metric) { return metric_find(metric) != NULL; }

const char *metric_names(void) {
    return "qa_f1, rouge_l, classification, retrieval, count, code_sim, string_match_all, string_match_part, "
           "needle";
}

static int first_line_task(const char *task) {
    static const char *const TASKS[] = {"trec", "triviaqa", "samsum", "lsht"};
    for (int i = 0; task && i < 4; i++)
        if (!strcmp(task, TASKS[i])) return 1;
    return 0;
}

/* RULER's clean-up: strip, delete \x00-\x1f, strip (in place: the span only shrinks). */
static USpan ruler_clean(UStr *s) {
    USpan t = mtext_strip(mtext_span(s));
    size_t w = 0;
    for (size_t r = 0; r < t.n; r++)
        if (t.cp[r] >= 0x20) s->cp[w++] = t.cp[r];
    return mtext_strip((USpan){s->cp, w});
}

static void free_strs(UStr *s, int n) {
    for (int i = 0; s && i < n; i++) mtext_free(&s[i]);
    free(s);
}

int metric_score(const char *metric, const char *task, const char *prediction, const char *const *answers,
                 int n_answers, const char *const *all_classes, int n_classes, double *score, KvErr *err) {
    const Metric *m = metric_find(metric);
    if (!m) return kv_fail(err, "unknown metric '%s' (known: %s)", metric ? metric : "(null)", metric_names());
    if (!prediction) return kv_fail(err, "%s: prediction is NULL", metric);
    if (!answers || n_answers <= 0) return kv_fail(err, "%s: no reference answers", metric);
    for (int a = 0; a < n_answers; a++)
        if (!answers[a]) return kv_fail(err, "%s: answer %d is NULL", metric, a);
    if (n_classes < 0 || (n_classes > 0 && !all_classes)) return kv_fail(err, "%s: bad class list", metric);
    for (int c = 0; c < n_classes; c++)
        if (!all_classes[c]) return kv_fail(err, "%s: class %d is NULL", metric, c);

    UStr pred, answer = {0};
    if (mtext_decode(&pred, prediction, err)) return -1;
    UStr *classes = NULL;
    int rc = -1;
    if (all_classes) {
        classes = kv_calloc((size_t)n_classes + 1, sizeof *classes, err);
        if (!classes) goto done;
        for (int c = 0; c < n_classes; c++)
            if (mtext_decode(&classes[c], all_classes[c], err)) goto done;
    }
    Input in = {mtext_span(&pred), classes, n_classes};
    if (m->suite == SUITE_LONGBENCH && first_line_task(task)) in.pred = mtext_first_line(in.pred);
    if (m->suite == SUITE_RULER) in.pred = ruler_clean(&pred);
    double total = 0.0;
    for (int a = 0; a < n_answers; a++) {
        double s;
        if (mtext_decode(&answer, answers[a], err)) goto done;
        if (m->score(&in, mtext_span(&answer), &s, err)) goto done;
        mtext_free(&answer);
        if (m->mean_over_answers) total += s;
        else if (s > total) total = s;
    }
    *score = m->mean_over_answers ? total / n_answers : total;
    rc = 0;
done:
    if (rc) kv_wrap(err, "%s", metric);
    mtext_free(&answer);
    mtext_free(&pred);
    free_strs(classes, n_classes);
    return rc;
}

/* ---- averages -------------------------------------------------------------------------------------- */

double metric_round2(double x) {
    if (!isfinite(x)) return x;
    /* glibc prints the exact binary value rounded half-even, as CPython's round(x, 2) rounds it. */
    char buf[512];
    snprintf(buf, sizeof buf, "%.2f", x);
    return strtod(buf, NULL);
}

int metric_task_average(const char *metric, const double *scores, int n, double *average, KvErr *err) {
    const Metric *m = metric_find(metric);
    if (!m) return kv_fail(err, "unknown metric '%s' (known: %s)", metric ? metric : "(null)", metric_names());
    if (n <= 0 || !scores) return kv_fail(err, "%s: no samples to average", metric);
    double total = 0.0;
    for (int i = 0; i < n; i++) total += scores[i];
    switch (m->suite) {
    case SUITE_LONGBENCH: *average = metric_round2(100 * total / n); break;
    case SUITE_RULER: *average = metric_round2(total / n * 100); break;
    case SUITE_NEEDLE: *average = total / n * 100; break;
    }
    return 0;
}

double metric_mean(const double *task_scores, int n) {
    double total = 0.0;
    for (int i = 0; i < n; i++) total += task_scores[i];
    return total / n;
}
