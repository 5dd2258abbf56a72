/* test_report.c — the statistics and the report.
 *
 * Statistics (report/stats.c): splitmix64 against its published first outputs, the quantile rule and the
 * bootstrap on hand-derived cases (constant data: a zero-width interval; a paired constant shift: exactly the
 * shift), and against tests/data/report/bootstrap_cases.json from tests/reference/gen_bootstrap_cases.py (numpy,
 * the same random stream and draws), to 1e-9 (the reference sums with numpy's pairwise summation).
 * The report of a hand-made database: sample counts, intervals, averages, the change column's sign, ratios from
 * unrounded means, the paired comparisons, a substituted task marked, failed and missing rows counted with their
 * errors, the ablation pivoted, the LaTeX (labels, bold, no \resizebox; compiled when pdflatex is present), one
 * colour per method across figures, Figure 4 / Figure 2 values, every figure rendered; an all-failed database
 * (a report saying there are no scores), gnuplot missing, an empty and a missing database; the command line
 * (--help on every command, `report CONFIG.json`); the paper's ordering link by link (CSV, Markdown, LaTeX), a
 * zero-width interval never significant; n = 1, 2 and 10 samples against the default min_n of 10 (the value with
 * its n and "too few samples", no interval, *, bold, verdict or error bar below it) and `--min-n 2`; the best
 * baseline never an ablation variant. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../report/report.h"
#include "../report/stats.h"
#include "../cli/cli.h"
#include "../store/store.h"
#include "../runs/util.h"
#include "test.h"

static char dir[64];

/* ---------------------------------------------------------------- statistics */

static void test_stats_hand(TestCounts *tc) {
    /* splitmix64 from seed 0: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4 (Vigna's reference splitmix64.c) */
    uint64_t st = 0;
    CHECK(tc, stats_splitmix64(&st) == 0xe220a8397b1dcdafULL, "splitmix64 first output");
    CHECK(tc, stats_splitmix64(&st) == 0x6e789e6aa1b965f4ULL, "splitmix64 second output");
    /* quantile: position q * (n - 1), linear between neighbours */
    double sorted[] = {1, 2, 3, 4, 5};
    CHECK(tc, test_close(stats_quantile_sorted(sorted, 5, 0.025), 1.1, 1e-12, 1), "q 0.025");
    CHECK(tc, test_close(stats_quantile_sorted(sorted, 5, 0.975), 4.9, 1e-12, 1), "q 0.975");
    CHECK(tc, stats_quantile_sorted(sorted, 5, 0.5) == 3 && stats_quantile_sorted(sorted, 1, 0.3) == 1, "q exact");

    KvErr err;
    StatsInterval ci;
    /* constant groups of 5 (stratified): every resample gives the same mean */
    double x[] = {40, 40, 40, 40, 40, 70, 70, 70, 70, 70, NAN};
    int g5[] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
    stats_bootstrap(STATS_MEAN, x, NULL, g5, 11, 2, 2000, STATS_SEED, &ci, &err);
    CHECK(tc, ci.n == 10 && ci.n_groups == 2 && ci.value == 55 && ci.lo == 55 && ci.hi == 55 && !ci.pooled,
          "constant groups: n %d value %g [%g, %g]", ci.n, ci.value, ci.lo, ci.hi);
    /* the same groups at 3 and 2 values: pooled, so a resample may draw 40s for the 70s' group and the interval
     * has width (stratified, it was zero-width: [55, 55]); pooled 1 then, and never pooled with one group */
    double x32[] = {40, 40, 40, 70, 70, NAN};
    int g[] = {0, 0, 0, 1, 1, 1};
    stats_bootstrap(STATS_MEAN, x32, NULL, g, 6, 2, 2000, STATS_SEED, &ci, &err);
    CHECK(tc, ci.n == 5 && ci.pooled && ci.lo < 55 && ci.hi > ci.lo, "tiny strata pooled: [%g, %g]", ci.lo, ci.hi);
    stats_bootstrap(STATS_MEAN, x32, NULL, g5, 5, 1, 2000, STATS_SEED, &ci, &err);
    CHECK(tc, !ci.pooled && ci.n_least == ci.n, "one group: not pooled");
    /* paired: y = x - 5 sample by sample, so every resampled difference is exactly 5 whatever x */
    double a[] = {10, 90, 35, 60, 0, 100}, b[6];
    for (int i = 0; i < 6; i++) b[i] = a[i] - 5;
    b[2] = NAN; /* a missing pair is left out */
    stats_bootstrap(STATS_DIFF, a, b, g, 6, 2, 2000, STATS_SEED, &ci, &err);
    CHECK(tc, ci.n == 5 && test_close(ci.value, 5, 1e-12, 1) && test_close(ci.lo, 5, 1e-12, 1) &&
                  test_close(ci.hi, 5, 1e-12, 1), "paired shift: %g [%g, %g]", ci.value, ci.lo, ci.hi);
    CHECK(tc, stats_excludes(&ci, 0) && !stats_excludes(&ci, 5), "excludes");
    /* a bound a few ulps past 0 touches it: the 1.5B study's needle, DefensiveKV − CriticalKV at 20% over 16
     * samples, gave [-21.02, -7.1e-15] and was called reversed; the same bound at -1e-6 is past it */
    StatsInterval touch = {.n = 16, .n_least = 16, .value = -9.09, .lo = -21.02, .hi = -7.105427358e-15};
    CHECK(tc, !stats_excludes(&touch, 0) && !stats_significant(&touch, 0, STATS_MIN_N),
          "a bound of -7.1e-15 does not exclude 0");
    touch.hi = -1e-6;
    CHECK(tc, stats_excludes(&touch, 0) && stats_significant(&touch, 0, STATS_MIN_N), "a bound of -1e-6 excludes 0");
    touch.lo = 7.1e-15, touch.hi = 30;
    CHECK(tc, !stats_excludes(&touch, 0), "a lower bound of +7.1e-15 does not exclude 0");
    /* cross-domain change: every sample of the method at 0.8 × the full cache, so each domain's change and their
     * mean are exactly -20 in every resample */
    double full[] = {50, 70, 20, 90, 10, 40}, meth[6];
    int gt[] = {0, 0, 1, 1, 2, 2}, task_dom[] = {0, 1, 1};
    for (int i = 0; i < 6; i++) meth[i] = 0.8 * full[i];
    stats_bootstrap_domains(STATS_DOMAIN_CHANGE, meth, full, gt, 6, 3, task_dom, 2, 2000, STATS_SEED, &ci, &err);
    CHECK(tc, ci.n == 6 && test_close(ci.value, -20, 1e-9, 20) && test_close(ci.lo, -20, 1e-9, 20) &&
                  test_close(ci.hi, -20, 1e-9, 20), "domain change: %g [%g, %g]", ci.value, ci.lo, ci.hi);
    /* domains 0: task 0 at 0.5 × full (−50); domain 1: tasks 1 and 2 at 1.0 × (0): mean −25 */
    for (int i = 0; i < 2; i++) meth[i] = 0.5 * full[i];
    for (int i = 2; i < 6; i++) meth[i] = full[i];
    stats_bootstrap_domains(STATS_DOMAIN_CHANGE, meth, full, gt, 6, 3, task_dom, 2, 500, STATS_SEED, &ci, &err);
    CHECK(tc, test_close(ci.value, -25, 1e-9, 25) && test_close(ci.lo, -25, 1e-9, 25), "two domains: %g [%g, %g]",
          ci.value, ci.lo, ci.hi);
    /* one group {0, 100}: a resample's mean is 0, 50 or 100 with p 1/4, 1/2, 1/4, so with 2000 resamples the
     * 2.5% and 97.5% quantiles are 0 and 100 */
    double two[] = {0, 100};
    int g0[] = {0, 0};
    stats_bootstrap(STATS_MEAN, two, NULL, g0, 2, 1, 2000, STATS_SEED, &ci, &err);
    CHECK(tc, ci.value == 50 && ci.lo == 0 && ci.hi == 100, "two values: %g [%g, %g]", ci.value, ci.lo, ci.hi);
    /* nothing valid */
    double none[] = {NAN};
    stats_bootstrap(STATS_MEAN, none, NULL, g0, 1, 1, 100, STATS_SEED, &ci, &err);
    CHECK(tc, ci.n == 0 && isnan(ci.value) && isnan(ci.lo), "no values");
    /* the same call twice gives the same interval (deterministic) */
    StatsInterval c1, c2;
    stats_bootstrap(STATS_MEAN, a, NULL, g, 6, 2, 1000, STATS_SEED, &c1, &err);
    stats_bootstrap(STATS_MEAN, a, NULL, g, 6, 2, 1000, STATS_SEED, &c2, &err);
    CHECK(tc, c1.lo == c2.lo && c1.hi == c2.hi && c1.lo < c1.value && c1.value < c1.hi, "deterministic");
}

static double num_or_nan(const cJSON *v) { return cJSON_IsNumber(v) ? v->valuedouble : NAN; }

static void test_stats_reference(TestCounts *tc) {
    KvErr err;
    char *text = kv_read_file("tests/data/report/bootstrap_cases.json", NULL, &err);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(tc, root != NULL, "bootstrap_cases.json: %s", text ? "bad JSON" : err.msg);
    if (!root) {
        free(text);
        return;
    }
    const cJSON *outs = cJSON_GetObjectItem(root, "splitmix64_seed0"), *o;
    uint64_t st = 0;
    cJSON_ArrayForEach(o, outs) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)stats_splitmix64(&st));
        CHECK(tc, !strcmp(hex, o->valuestring), "splitmix64 %s vs %s", hex, o->valuestring);
    }
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *kind_s = cJSON_GetObjectItem(c, "kind")->valuestring;
        StatsKind kind = !strcmp(kind_s, "diff")            ? STATS_DIFF
                         : !strcmp(kind_s, "ratio")         ? STATS_RATIO
                         : !strcmp(kind_s, "domain_change") ? STATS_DOMAIN_CHANGE
                                                            : STATS_MEAN;
        const cJSON *xs = cJSON_GetObjectItem(c, "x"), *ys = cJSON_GetObjectItem(c, "y"),
                    *gs = cJSON_GetObjectItem(c, "group");
        int n = cJSON_GetArraySize(xs);
        double x[64], y[64];
        int g[64];
        for (int i = 0; i < n && i < 64; i++) {
            x[i] = num_or_nan(cJSON_GetArrayItem(xs, i));
            y[i] = cJSON_IsArray(ys) ? num_or_nan(cJSON_GetArrayItem(ys, i)) : 0;
            g[i] = cJSON_GetArrayItem(gs, i)->valueint;
        }
        uint64_t seed = strtoull(cJSON_GetObjectItem(c, "seed")->valuestring, NULL, 10);
        const cJSON *gd = cJSON_GetObjectItem(c, "group_domain");
        int n_groups = cJSON_GetObjectItem(c, "n_groups")->valueint, group_domain[64], n_domains = 0;
        for (int i = 0; cJSON_IsArray(gd) && i < cJSON_GetArraySize(gd) && i < 64; i++) {
            group_domain[i] = cJSON_GetArrayItem(gd, i)->valueint;
            if (group_domain[i] + 1 > n_domains) n_domains = group_domain[i] + 1;
        }
        StatsInterval ci;
        int rc = stats_bootstrap_domains(kind, x, y, g, n, n_groups,
                                         cJSON_IsArray(gd) ? group_domain : NULL, n_domains,
                                         cJSON_GetObjectItem(c, "resamples")->valueint, seed, &ci, &err);
        double value = num_or_nan(cJSON_GetObjectItem(c, "value")), lo = num_or_nan(cJSON_GetObjectItem(c, "lo")),
               hi = num_or_nan(cJSON_GetObjectItem(c, "hi"));
        int same_nan = isnan(value) == isnan(ci.value) && isnan(lo) == isnan(ci.lo) && isnan(hi) == isnan(ci.hi);
        CHECK(tc, rc == 0 && ci.n == cJSON_GetObjectItem(c, "n")->valueint &&
                      ci.n_groups == cJSON_GetObjectItem(c, "groups_used")->valueint && same_nan &&
                      ci.n_least == cJSON_GetObjectItem(c, "n_least")->valueint &&
                      ci.pooled == cJSON_GetObjectItem(c, "pooled")->valueint &&
                      (isnan(value) || test_close(ci.value, value, 1e-9, value)) &&
                      (isnan(lo) || test_close(ci.lo, lo, 1e-9, lo)) && (isnan(hi) || test_close(ci.hi, hi, 1e-9, hi)),
              "%s: C n %d (least %d, pooled %d) %.12g [%.12g, %.12g], numpy %.12g [%.12g, %.12g]", name, ci.n,
              ci.n_least, ci.pooled, ci.value, ci.lo, ci.hi, value, lo, hi);
        n_cases++;
    }
    CHECK(tc, n_cases == 11, "%d reference cases", n_cases);
    cJSON_Delete(root);
    free(text);
}

/* ---------------------------------------------------------------- a hand-made database */

typedef struct {
    const char *task, *domain;
    double full, snap20, snap40, def_mean20, def_prior20; /* per-sample scores; two identical samples per task */
} TaskCase;

/* full: 80, 40, 60 -> avg 60, single-doc 60, multi-doc 60.
 * snapkv 20%: 50, 30, 55 -> avg 45 (change -25.00%), single-doc 40; snapkv 40%: 70, 40, 55 -> 55 (-8.33%).
 * defensivekv 20%: mean 60 everywhere (0.00%), max+prior 70 (+16.67%). */
static const TaskCase CASES[] = {
    {"narrativeqa", "single-doc QA", 0.8, 0.5, 0.7, 0.6, 0.7},
    {"qasper", "single-doc QA", 0.4, 0.3, 0.4, 0.6, 0.7},
    {"hotpotqa", "multi-doc QA", 0.6, 0.55, 0.55, 0.6, 0.7},
};

static StoreResult row(const char *policy, const char *agg, const char *budget, double keep, double score) {
    StoreResult r;
    memset(&r, 0, sizeof r);
    r.key.policy = policy;
    r.key.aggregation = agg;
    r.key.params = strcmp(policy, "full") ? "w=32,k=5" : "";
    r.key.budget = budget;
    r.keep_fraction = keep;
    r.prediction = "p";
    r.score = score;
    r.prefill_ms = 100; /* policy_cost.md: the policy's time beside the prefill */
    r.select_ms = strcmp(policy, "full") ? 4 : 0;
    return r;
}

static StoreResult failed(const char *policy, const char *budget, double keep, const char *error) {
    StoreResult r = row(policy, "mean", budget, keep, 0);
    r.prediction = NULL;
    r.error = error;
    return r;
}

static void open_db(const char *path, Store **s, long long *run) {
    KvErr err;
    StoreRun info = {"t", "{}", "h", "rev", "m", "m.gguf", "x", "m.gguf", "cpu", "host", NULL, 0};
    if (store_open(s, path, 0, &err) || store_begin_run(*s, &info, run, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

static void write_sample(Store *s, long long run, const StoreSample *m, const StoreResult *r, int n) {
    KvErr err;
    if (store_write_sample(s, run, m, r, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

static void fill_db(const char *path) {
    Store *s;
    long long run;
    open_db(path, &s, &run);
    char key[64];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 2; i++) {
            const TaskCase *c = &CASES[t];
            snprintf(key, sizeof key, "longbench:%s:%d", c->task, i);
            StoreSample m = {"m", "cq=0", key, "longbench", c->task, c->domain, "qa_f1", i, -1, 0, 100, 10, "[]", NULL,
                             "m", "d", 0};
            StoreResult r[] = {row("full", "mean", "full", 1, c->full), row("snapkv", "mean", "20%", 0.2, c->snap20),
                               row("snapkv", "mean", "40%", 0.4, c->snap40),
                               row("defensivekv", "mean", "20%", 0.2, c->def_mean20),
                               row("defensivekv", "max+prior", "20%", 0.2, c->def_prior20)};
            write_sample(s, run, &m, r, 5);
        }
    /* Needle: 2 lengths × 3 depths, full scores 100 everywhere, snapkv 20% loses the deep needle. */
    int lengths[] = {500, 1000};
    double depths[] = {0, 50, 100};
    for (int l = 0; l < 2; l++)
        for (int d = 0; d < 3; d++) {
            snprintf(key, sizeof key, "niah:needle:%d:%g", lengths[l], depths[d]);
            StoreSample m = {"m", "cq=0", key, "niah", "needle", "needle", "needle", l * 3 + d, depths[d], lengths[l],
                             lengths[l], 10, "[]", NULL, "m", "d", 0};
            StoreResult r[] = {row("full", "mean", "full", 1, 1.0),
                               row("snapkv", "mean", "20%", 0.2, d == 1 && l == 1 ? 0.0 : 1.0)};
            write_sample(s, run, &m, r, 2);
        }
    /* RULER: niah_single_1, 12 samples: full 5 right (41.67), snapkv 20% 4 right (33.33): the ratio from
     * unrounded means is 80.00 (79.99 from the rounded ones). qa_1_substitute, 2 samples (the substitute's note):
     * full 1, 0; snapkv 20%: the first fails, the second scores 0; snapkv 40% ran on niah_single_1 only. */
    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof key, "ruler:niah_single_1:%d", i);
        StoreSample m = {"m", "cq=0", key, "ruler", "niah_single_1", "retrieval (niah)", "string_match_all", i, -1, 4096,
                         4000, 20, "[]", NULL, "m", "d", 0};
        StoreResult r[] = {row("full", "mean", "full", 1, i < 5), row("snapkv", "mean", "20%", 0.2, i < 4),
                           row("snapkv", "mean", "40%", 0.4, i < 5)};
        write_sample(s, run, &m, r, 3);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof key, "ruler:qa_1_substitute:%d", i);
        StoreSample m = {"m", "cq=0", key, "ruler", "qa_1_substitute", "question answering", "string_match_part", i, -1,
                         4096, 4000, 20, "[]", "substitute qa data: essay passages with one templated fact", "m", "d", 0};
        StoreResult r[] = {row("full", "mean", "full", 1, i == 0),
                           i == 0 ? failed("snapkv", "20%", 0.2, "context of 4100 tokens exceeds the limit")
                                  : row("snapkv", "mean", "20%", 0.2, 0)};
        write_sample(s, run, &m, r, 2);
    }
    store_close(s);
}

static char *read_all(const char *path) {
    KvErr err;
    return kv_read_file(path, NULL, &err);
}

static char *read_in(const char *d, const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", d, name);
    return read_all(path);
}

static long file_size(const char *dir_, const char *name) {
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir_, name);
    return stat(path, &st) ? -1 : (long)st.st_size;
}

static int is_png(const char *dir_, const char *name) {
    char path[256];
    unsigned char sig[8] = {0};
    snprintf(path, sizeof path, "%s/%s", dir_, name);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(sig, 1, 8, f);
    fclose(f);
    return n == 8 && sig[0] == 0x89 && !memcmp(sig + 1, "PNG", 3);
}

/* The colour a figure script gives the series titled `title` (the "lc rgb '#......'" of its clause). */
static int colour_of(const char *script, const char *title, char *out) {
    char needle[200];
    snprintf(needle, sizeof needle, "title '%s'", title);
    const char *t = script ? strstr(script, needle) : NULL;
    if (!t) return 0;
    const char *line = t;
    while (line > script && line[-1] != '\n') line--;
    const char *c = strstr(line, "lc rgb '#");
    if (!c || c > t) return 0;
    memcpy(out, c + 8, 7);
    out[7] = 0;
    return 1;
}

/* report.tex in a standard 10 pt article (utf8 inputenc and booktabs, nothing else), compiled when pdflatex
 * exists (scripts/setup.sh installs it, so CI runs it); any overfull box, horizontal (a table or line past
 * the text width) or vertical (past the page), or a float too large for the page fails. */
static void compile_tex(TestCounts *tc, const char *out) {
    if (system("command -v pdflatex >/dev/null 2>&1")) {
        SKIP(tc, "compiling report.tex: pdflatex not found (scripts/setup.sh installs it)");
        return;
    }
    char doc[256], cmd[700];
    snprintf(doc, sizeof doc, "%s/doc.tex", out);
    FILE *f = fopen(doc, "w");
    if (f) {
        fputs("\\documentclass[10pt]{article}\n\\usepackage[utf8]{inputenc}\n\\usepackage{booktabs}\n"
              "\\begin{document}\n\\input{report.tex}\n\\end{document}\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "cd %s && pdflatex -interaction=nonstopmode -halt-on-error doc.tex >pdflatex.log 2>&1",
             out);
    CHECK(tc, f && system(cmd) == 0 && file_size(out, "doc.pdf") > 1000, "pdflatex on report.tex (see %s/pdflatex.log)",
          out);
    char log_name[300], line[1024];
    snprintf(log_name, sizeof log_name, "%s/doc.log", out);
    FILE *log = fopen(log_name, "r");
    int overfull = 0, too_large = 0;
    double widest = 0;
    while (log && fgets(line, sizeof line, log)) {
        const char *at = strstr(line, "Overfull \\hbox ("), *v = strstr(line, "Overfull \\vbox (");
        if (at) overfull++, widest = fmax(widest, atof(at + strlen("Overfull \\hbox (")));
        if (v) overfull++, widest = fmax(widest, atof(v + strlen("Overfull \\vbox (")));
        too_large += strstr(line, "Float too large") != NULL;
    }
    if (log) fclose(log);
    CHECK(tc, log && overfull == 0 && too_large == 0, "report.tex in a 10 pt article: %d overfull boxes (the largest "
          "%.1f pt over), %d floats too large for the page (see %s)", overfull, widest, too_large, log_name);
}

static void check_md(TestCounts *tc, const char *md) {
    CHECK(tc, strstr(md, "change = 100 × (avg(method) / avg(full cache) − 1), negative when") != NULL, "formula");
    CHECK(tc, strstr(md, "(2000 resamples;") && strstr(md, "splitmix64") && strstr(md, "paired"), "method stated");
    /* summary, budgets side by side: avg [interval], change with its sign (a method below the full cache is
     * negative, one above positive), Δ best baseline (snapkv is the only baseline) */
    CHECK(tc, strstr(md, "| Method | 20%: avg | 20%: change % | 20%: Δ best baseline | 40%: avg |") != NULL, "columns");
    /* (every sample of a task scores alike and each task holds 2 samples: a task-stratified bootstrap would give
     * zero-width intervals; the pooled one draws across tasks, so an average over tasks that differ varies) */
    CHECK(tc, strstr(md, "| snapkv | 45.00 [40.00, 52.50] | -25.00\\* [-33.33, -15.00] | – | 55.00 [47.50, 62.50] | "
                         "-8.33\\* [-10.71, -5.00] | – |") != NULL, "snapkv summary row");
    CHECK(tc, strstr(md, "| defensivekv (max+prior) | **70.00** [70.00, 70.00] | **16.67** [0.00, 40.00] | "
                         "25.00\\* [17.50, 30.00] | – |") != NULL, "defensivekv summary row: bold, positive");
    CHECK(tc, strstr(md, "pooled") != NULL, "the pooled scheme stated");
    /* snapkv's RULER change at 40% is -1.4e-14 from summing in another order: printed 0.00, never -0.00 */
    CHECK(tc, !strstr(md, "-0.00") && strstr(md, "(n=12) | 0.00 | – |"), "no -0.00");
    /* defensivekv at mean is an ablation variant (its default is max+prior): no comparison with the best
     * baseline */
    CHECK(tc, strstr(md, "| defensivekv (mean) | 60.00 [60.00, 60.00] | 0.00 [-14.29, 20.00] | – | – | – | – |"),
          "an ablation variant has no Δ best baseline");
    /* task table with n, intervals */
    CHECK(tc, strstr(md, "| n | 2 | 2 | 2 | 6 |") != NULL, "n row");
    CHECK(tc, strstr(md, "| snapkv | 50.00 [50.00, 50.00] | 30.00 [30.00, 30.00] | 55.00 [55.00, 55.00] | 45.00 "
                         "[40.00, 52.50] |") != NULL, "snapkv task row");
    CHECK(tc, strstr(md, "| snapkv | 40.00 [30.00, 50.00] | 55.00 [55.00, 55.00] | 45.00 [40.00, 52.50] |") != NULL,
          "snapkv domain row");
    CHECK(tc, strstr(md, "| snapkv | 62.50 | 75.00 | 91.67 | 76.39 |") != NULL, "ratio row");
    /* ablation pivoted: a row per policy with several aggregations, columns mean / max+prior per budget */
    /* (only the budgets where the ablation ran: defensivekv has no 40% rows) */
    CHECK(tc, strstr(md, "| Method | 20%: mean | 20%: max+prior |\n|---|---:|---:|"
                         "\n| defensivekv | 60.00 [60.00, 60.00] | 70.00 [70.00, 70.00] |\n\n"),
          "ablation pivot");
    /* needle: snapkv loses one of 6 cells (83.33); the 0/100 scores give a real interval */
    const char *needle = strstr(md, "## m — niah");
    CHECK(tc, needle && strstr(needle, "| snapkv | 83.33 [50.00, 100.00] |"), "needle interval");
    /* the ablation paired: defensivekv max+prior − mean is 10 on every sample, so no verdict (zero width) */
    CHECK(tc, strstr(md, "| defensivekv: max+prior − mean | 10.00 [10.00, 10.00] | not resolved (zero-width"),
          "paired ablation row");
    /* RULER: unrounded ratio 80.00; the substitute marked; failures and missing rows counted with their reason */
    const char *ruler = strstr(md, "## m — ruler");
    CHECK(tc, ruler != NULL, "ruler section");
    if (!ruler) return;
    CHECK(tc, strstr(ruler, "niah_single_1 | question answering: qa_1_substitute† | Mean |") &&
                  strstr(ruler, "| snapkv | 80.00 |"), "ratio from unrounded means (80.00, not 79.99)");
    CHECK(tc, strstr(ruler, "† substituted task: RULER's qa_1 / qa_2 ran as the labelled substitute") &&
                  strstr(ruler, "20%: avg† |") && strstr(ruler, "| Avg† |"), "substitute marked in averages");
    CHECK(tc, strstr(ruler, "- failed: snapkv at 20%, 1 row: context of 4100 tokens exceeds the limit") != NULL,
          "failure counted with its error");
    CHECK(tc, strstr(ruler, "- missing: snapkv at 40%, 2 samples without a row") != NULL, "missing rows counted");
    CHECK(tc, strstr(ruler, "14 samples in 2 tasks; 40 result rows, 1 failed") != NULL, "coverage line");
    /* qa task: snapkv 20% has one scored sample of 2: n shown */
    CHECK(tc, strstr(ruler, "| snapkv | 33.33 [") && strstr(ruler, "| 0.00 (n=1, too few samples) |"),
          "below min_n: the value, its n, too few samples");
    /* paired change over the samples both scored: full 41.67 and 0 (sample 1 of qa) -> 20.83; snapkv 16.67 */
    CHECK(tc, strstr(ruler, "| snapkv | 16.67 [") && strstr(ruler, "| -20.00"), "paired change -20.00");
    /* cross-domain (Figure 2 style) at 20%: longbench single-doc 40/60, multi-doc 55/60, retrieval (ruler + needle
     * tasks): (33.33 + 0 + 83.33) / (41.67 + 0 + 100) [qa: snapkv 0 vs full 0 over ... see below] */
    CHECK(tc, strstr(md, "cross-domain change at 20%") && strstr(md, "not the paper's"), "cross-domain section");
}

static void test_report(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    snprintf(db, sizeof db, "%s/r.db", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    fill_db(db);
    ReportOptions opt = {db, out, NULL, NULL, 0, 2, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0, "report: %s", err.msg);

    char *md = read_in(out, "report.md");
    CHECK(tc, md != NULL, "report.md missing");
    if (md) check_md(tc, md);
    free(md);

    /* each variant's policy time beside the prefill, n per row */
    char *cost = read_in(out, "policy_cost.md");
    CHECK(tc, cost && strstr(cost, "| n | context tokens | prefill ms | select ms | select / prefill |") &&
                  strstr(cost, "| snapkv | mean | w=32,k=5 | 20% | ") && strstr(cost, " | 100 | 4.0 | 0.04 |\n") &&
                  strstr(cost, "| full | mean |  | full | ") && strstr(cost, " | 100 | 0.0 | 0.00 |\n"),
          "policy_cost.md:\n%.800s", cost ? cost : "(missing)");
    free(cost);

    char *csv = read_in(out, "task_scores.csv");
    CHECK(tc, csv && strstr(csv, "model,setup,suite,domain,task,policy,aggregation,params,budget,keep_fraction,"
                                 "substitute,n,mean,lo,hi,n_failed,n_missing,full_mean,ratio,note\n"), "task csv header");
    CHECK(tc, csv && strstr(csv, "\"m\",\"cq=0\",\"longbench\",\"single-doc QA\",\"qasper\",\"snapkv\",\"mean\","
                                 "\"w=32,k=5\",\"20%\",0.2,0,2,30,30,30,0,0,40,0.75,\n"), "task csv row");
    CHECK(tc, csv && strstr(csv, "\"qa_1_substitute\",\"snapkv\",\"mean\",\"w=32,k=5\",\"20%\",0.2,1,1,0,,,1,0,50,0,"
                                 "\"too few samples\"\n"),
          "substitute csv row: n 1 (no interval: too few samples), a failure");
    free(csv);
    csv = read_in(out, "domain_scores.csv");
    /* snapkv 40%: mean 55, change -8.333% with its interval, paired difference -5 */
    CHECK(tc, csv && strstr(csv, "\"(all)\",\"\",\"snapkv\",\"mean\",\"w=32,k=5\",\"40%\",0.4,0,6,55,47.5,62.5,60,"
                                 "-8.333333333,-10.71428571,-5,-5,-7.5,-2.5,\"snapkv\",,,,\n"), "summary csv");
    free(csv);

    /* LaTeX: labels, bold best, no resizing, booktabs rules, a budget's columns together, the budgets in parts
     * that fit the text width */
    char *tex = read_in(out, "report.tex");
    CHECK(tc, tex && !strstr(tex, "resizebox") && strstr(tex, "\\label{tab:m-longbench:summary}") &&
                  strstr(tex, "\\label{tab:m-longbench:main}") && strstr(tex, "\\textbf{70.00}") &&
                  strstr(tex, "\\cmidrule(lr){2-3}") && strstr(tex, "& $-$25.00$^{*}$ & -- \\\\") &&
                  (strstr(tex, "qa\\_1\\_substitute$^\\dagger$") ||
                   strstr(tex, "qa\\_\\allowbreak{}1\\_\\allowbreak{}substitute$^\\dagger$")),
          "tex layout");
    /* the paper's Table 1 layout: methods as rows in one block per budget (20% and 40% in one table), tasks as
     * columns grouped by domain, values only, n per column; the summary with the intervals likewise by budget;
     * not a table per budget and kind (9 tables in all, where there were 24) */
    const char *main_tab = tex ? strstr(tex, "\\label{tab:m-longbench:main}") : NULL;
    const char *main_end = main_tab ? strstr(main_tab, "\\end{table}") : NULL;
    const char *b20 = main_tab ? strstr(main_tab, "\\multicolumn{5}{l}{\\textit{budget 20\\%}}") : NULL;
    const char *b40 = main_tab ? strstr(main_tab, "\\multicolumn{5}{l}{\\textit{budget 40\\%}}") : NULL;
    CHECK(tc, b20 && b40 && b40 < main_end && strstr(main_tab, "Method & narrativeqa & qasper & hotpotqa & Avg \\\\") &&
                  strstr(main_tab, "$n$ & 2 & 2 & 2 & 6 \\\\") && strstr(main_tab, "snapkv & 50.00 & 30.00 & 55.00 & 45.00 \\\\") &&
                  (!strstr(main_tab, "defensivekv (mean)") || strstr(main_tab, "defensivekv (mean)") > main_end),
          "the paper's layout:\n%.1500s", main_tab ? main_tab : "(missing)");
    int n_tables = 0;
    for (const char *p = tex; p && (p = strstr(p, "\\begin{table}")); p++) n_tables++;
    CHECK(tc, n_tables == 9, "%d LaTeX tables", n_tables);
    free(tex);
    compile_tex(tc, out);

    /* one colour per method across figures; dash and point by aggregation */
    char *budget = read_in(out, "m_longbench_budget.gp"), *tasks = read_in(out, "m_longbench_tasks_20p.gp");
    char *fig4 = read_in(out, "m_longbench_fig4_ratio.gp"), *ruler = read_in(out, "m_ruler_tasks_20p.gp");
    char c1[8], c2[8], c3[8], c4[8];
    CHECK(tc, colour_of(budget, "snapkv", c1) && colour_of(tasks, "snapkv", c2) && colour_of(fig4, "snapkv", c3) &&
                  colour_of(ruler, "snapkv", c4) && !strcmp(c1, c2) && !strcmp(c1, c3) && !strcmp(c1, c4),
          "snapkv one colour");
    char *ablation = read_in(out, "m_longbench_aggregation.gp");
    CHECK(tc, colour_of(ablation, "defensivekv (mean)", c1) && colour_of(budget, "defensivekv (max+prior)", c2) &&
                  !strcmp(c1, c2) && colour_of(tasks, "defensivekv (max+prior)", c3) && !strcmp(c1, c3),
          "defensivekv one colour over its aggregations");
    /* Figure 4 and the budget lines: each policy at its default aggregation (defensivekv at max+prior), the
     * ablation variant (defensivekv at mean) in the ablation figure, with the full cache's line */
    CHECK(tc, budget && !strstr(budget, "title 'defensivekv (mean)'") && fig4 &&
                  !strstr(fig4, "title 'defensivekv (mean)'") &&
                  strstr(budget, "dt 4 pt 9 title 'defensivekv (max+prior)'") &&
                  strstr(budget, "dt 1 pt 7 title 'snapkv'"), "dash/point per aggregation, default aggregations only");
    CHECK(tc, ablation && strstr(ablation, "title 'defensivekv (mean)'") &&
                  strstr(ablation, "60.0000 with lines dt 2 lw 2 lc rgb 'black' title 'full cache (60.00)'"),
          "ablation figure: the variants and a full-cache line");
    free(ablation);
    CHECK(tc, budget && strstr(budget, "set xrange [18.4:41.6]") && strstr(budget, "set xtics ('20%%' 20.0000"),
          "budget axis spans the budgets run");
    CHECK(tc, tasks && strstr(tasks, "($2 == 0 ? 0 : NaN)") && strstr(tasks, "with vectors nohead"), "zero marks, error bars");
    CHECK(tc, budget && !strstr(budget, dir), "scripts name files relative to their folder");
    free(budget);
    free(tasks);
    free(ruler);
    /* Figure 4: score as % of the full cache, snapkv 75 at 20% (45/60) and 91.67 at 40% */
    char *dat = read_in(out, "m_longbench_fig4_ratio.dat");
    CHECK(tc, fig4 && strstr(fig4, "100 with lines") && dat && strstr(dat, " 75.0000 66.6667 85.0000\n") &&
                  strstr(dat, " 91.6667 89.2857 95.0000\n"), "figure 4 values");
    free(fig4);
    free(dat);
    /* Figure 2 style, over the samples both scored: snapkv at 20%: single-doc 100 × (40/60 − 1) = −33.33,
     * multi-doc 55/60 → −8.33, synthetic retrieval (niah_single_1; qa_1_substitute on its second sample only,
     * 0 and 0; needle): (33.33 + 0 + 83.33) / (41.67 + 0 + 100) → −17.65; mean −19.77 */
    dat = read_in(out, "m_fig2_crossdomain_20p.dat");
    CHECK(tc, dat && strstr(dat, "# snapkv\n0 -19.7712 ") && strstr(dat, "0 -33.3333\n") &&
                  strstr(dat, "0 -8.3333\n") && strstr(dat, "0 -17.6471\n"), "figure 2 values");
    /* what each bar averages: snapkv 3 domains, defensivekv (LongBench only) 2 of 3, said at its bar; the title
     * claims no fixed count */
    char *gp2 = read_in(out, "m_fig2_crossdomain_20p.gp");
    CHECK(tc, dat && strstr(dat, "# snapkv\n0 -19.7712 -29.4444 -13.8889 3\n") &&
                  strstr(dat, "# defensivekv (max+prior)\n2 16.6667 2.0833 45.8333 2\n") && gp2 &&
                  strstr(gp2, "$5 < 3 ? sprintf(' (%d of 3 domains)', $5)") && !strstr(gp2, "mean over 3 domains") &&
                  strstr(gp2, "set key above") && strstr(gp2, "valid(4)"), "figure 2 says what each bar averages");
    free(gp2);
    free(dat);

    const char *files[] = {"report.tex", "m_longbench_budget.dat", "m_longbench_budget.svg",
                           "m_longbench_tasks_20p.svg", "m_longbench_aggregation.svg", "m_niah_needle_20p.svg",
                           "m_niah_needle_20p.dat", "m_fig2_crossdomain_20p.svg"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        CHECK(tc, file_size(out, files[i]) > 0, "%s missing or empty", files[i]);
    const char *pngs[] = {"m_longbench_budget.png", "m_longbench_fig4_ratio.png", "m_longbench_tasks_20p.png",
                          "m_longbench_tasks_40p.png", "m_longbench_aggregation.png", "m_niah_needle_20p.png",
                          "m_fig2_crossdomain_20p.png", "m_ruler_tasks_40p.png"};
    for (size_t i = 0; i < sizeof pngs / sizeof pngs[0]; i++)
        CHECK(tc, is_png(out, pngs[i]) && file_size(out, pngs[i]) > 2000, "%s is not a rendered PNG", pngs[i]);
    /* the needle panel writes the score in each cell */
    char *needle = read_in(out, "m_niah_needle_20p.gp");
    CHECK(tc, needle && strstr(needle, "set multiplot layout 1,2") && strstr(needle, "with labels"), "needle panel");
    free(needle);
    /* a script re-runs from its own folder */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "cd %s && rm -f m_longbench_budget.png && gnuplot m_longbench_budget.gp", out);
    CHECK(tc, system(cmd) == 0 && is_png(out, "m_longbench_budget.png"), "gnuplot NAME.gp in the folder");

    /* Without gnuplot: a clear error, and the tables are still there. */
    char out2[160];
    snprintf(out2, sizeof out2, "%s/out2", dir);
    ReportOptions nogp = {db, out2, "/nonexistent/gnuplot", NULL, 0, 2, 0};
    rc = report_write(&nogp, &err);
    CHECK(tc, rc == -1 && strstr(err.msg, "gnuplot not found"), "no gnuplot: %s", err.msg);
    CHECK(tc, file_size(out2, "report.md") > 0 && file_size(out2, "m_longbench_budget.gp") > 0,
          "tables and scripts without gnuplot");
    CHECK(tc, file_size(out2, "m_longbench_budget.png") < 0, "no PNG without gnuplot");
}

/* Every row failed (RULER at a length shorter than its template): a report that says so, not a gnuplot error. */
static void test_all_failed(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    Store *s;
    long long run;
    snprintf(db, sizeof db, "%s/failed.db", dir);
    snprintf(out, sizeof out, "%s/out_failed", dir);
    open_db(db, &s, &run);
    for (int i = 0; i < 2; i++) {
        char key[64];
        snprintf(key, sizeof key, "ruler:vt:%d", i);
        StoreSample m = {"m", "cq=0", key, "ruler", "vt", "multi-hop tracing", "string_match_all", i, -1, 256, 0, 0,
                         "[]", NULL, "m", "d", 0};
        StoreResult r[] = {failed("full", "full", 1, "target 256 tokens is shorter than the template"),
                           failed("snapkv", "20%", 0.2, "target 256 tokens is shorter than the template")};
        write_sample(s, run, &m, r, 2);
    }
    store_close(s);
    FILE *log = tmpfile();
    ReportOptions opt = {db, out, NULL, log, 0, 2, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0, "all failed: %s", err.msg);
    char logbuf[2000] = "";
    if (log) {
        rewind(log);
        size_t n = fread(logbuf, 1, sizeof logbuf - 1, log);
        logbuf[n] = 0;
        fclose(log);
    }
    CHECK(tc, strstr(logbuf, "no scores: all 4 result rows") != NULL, "log says no scores: %s", logbuf);
    char *md = read_in(out, "report.md");
    CHECK(tc, md && strstr(md, "**No scores: all 4 result rows failed.**") &&
                  strstr(md, "- failed: snapkv at 20%, 2 rows: target 256 tokens is shorter than the template") &&
                  strstr(md, "- failed: full at full, 2 rows:") && strstr(md, "No scores in this section"),
          "all-failed report");
    free(md);
}

/* The cross-domain change of a model whose suites ran under different setups (the needle in the chat template):
 * one figure and table per model, each suite counted once (in the first setup it ran with). */
static void test_crossdomain_setups(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    Store *s;
    long long run;
    snprintf(db, sizeof db, "%s/setups.db", dir);
    snprintf(out, sizeof out, "%s/out_setups", dir);
    open_db(db, &s, &run);
    /* ruler (setup A): full 100, snapkv 50; needle (setup B): full 100, snapkv 100; ruler again under setup C
     * (full 100, snapkv 0) must not count */
    const char *setups[] = {"A", "B", "C"}, *suites[] = {"ruler", "niah", "ruler"};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++) {
            char key[64];
            snprintf(key, sizeof key, "%s:%d", suites[k], i);
            StoreSample m = {"m", setups[k], key, suites[k], k == 1 ? "needle" : "vt", k == 1 ? "needle" : "tracing",
                             "x", i, -1, 100, 100, 10, "[]", NULL, "m", "d", 0};
            StoreResult r[] = {row("full", "mean", "full", 1, 1.0),
                               row("snapkv", "mean", "20%", 0.2, k == 0 ? 0.5 : k == 1 ? 1.0 : 0.0)};
            write_sample(s, run, &m, r, 2);
        }
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL, 0, 2, 0};
    CHECK(tc, report_write(&opt, &err) == 0, "setups: %s", err.msg);
    char *md = read_in(out, "report.md");
    /* one domain (synthetic retrieval) from ruler A (-50) and the needle B (0): (50 + 100) / (100 + 100) -> -25 */
    CHECK(tc, md && strstr(md, "## m — cross-domain change at 20%\n\nSuites and setups: ruler: A; niah: B.") &&
                  strstr(md, "| snapkv | -25.00%"), "cross-domain over setups");
    free(md);
    CHECK(tc, file_size(out, "m_fig2_crossdomain_20p.png") > 2000, "one figure 2 per model");
}

/* The paper's ordering (report/ordering.c) on 12 samples (at least the default min_n of 10): per sample a base b
 * and small per-policy offsets e1, e2 (±1 and ±1.5 points) so that every paired difference varies a little:
 * streamingllm b, snapkv b + 10 + e1, adakv b + 20 + e2, cake adakv ± 1 alternately (mean difference 0),
 * criticalkv b + 15 + e1 (below adakv: the link is reversed), defensivekv at max+prior b + 30 + e2 and
 * layer-defensivekv exactly the same (a zero-width interval at 0: no verdict); defensivekv at mean b + 90 is an
 * ablation variant the ordering must not pick. On the 12th sample streamingllm scores 80 points above snapkv,
 * which makes that link's interval straddle 0 (not resolved). Points are on the 0-100 scale. */
static void test_ordering(TestCounts *tc) {
    char db[128], out[128];
    snprintf(db, sizeof db, "%s/order.db", dir);
    snprintf(out, sizeof out, "%s/order_out", dir);
    Store *s;
    long long run;
    open_db(db, &s, &run);
    const double base[] = {0.0, 0.05, 0.02, 0.04, 0.01, 0.03};
    for (int i = 0; i < 12; i++) {
        char key[64];
        snprintf(key, sizeof key, "ruler:vt:%d", i);
        StoreSample m = {"m", "cq=0", key, "ruler", "vt", "tracing", "string_match_all", i, -1, 4096, 4000, 20, "[]",
                         NULL, "m", "d", 0};
        double b = i < 11 ? base[i % 6] : 0.0, e1 = 0.01 * (i % 3 - 1), e2 = 0.01 * (i % 4 - 1.5);
        double snap = b + 0.10 + e1, stream = i < 11 ? b : 0.9, ada = b + 0.20 + e2;
        StoreResult r[] = {row("full", "mean", "full", 1, 0.9),
                           row("streamingllm", "none", "20%", 0.2, stream),
                           row("snapkv", "mean", "20%", 0.2, snap),
                           row("adakv", "mean", "20%", 0.2, ada),
                           row("cake", "mean", "20%", 0.2, ada + (i % 2 ? 0.01 : -0.01)),
                           row("criticalkv", "mean", "20%", 0.2, b + 0.15 + e1),
                           row("defensivekv", "max+prior", "20%", 0.2, b + 0.30 + e2),
                           row("defensivekv", "mean", "20%", 0.2, b + 0.90 > 1 ? 1 : b + 0.90),
                           row("layer-defensivekv", "max+prior", "20%", 0.2, b + 0.30 + e2)};
        r[1].key.params = "";
        write_sample(s, run, &m, r, 9);
    }
    store_close(s);
    KvErr err;
    ReportOptions opt = {db, out, NULL, NULL, 0, 0, 0};
    CHECK(tc, report_write(&opt, &err) == 0, "ordering report: %s", err.msg);
    char *csv = read_in(out, "ordering.csv"), *md = read_in(out, "report.md"), *tex = read_in(out, "report.tex");
    static const char *const want[][2] = {
        {"\"20%\",\">=\",\"layer-defensivekv\",\"max+prior\",\"defensivekv\",\"max+prior\",12,0,0,0,",
         "\"not resolved (zero-width interval: the samples do not vary)\""},
        {"\"20%\",\">\",\"defensivekv\",\"max+prior\",\"criticalkv\",\"mean\",12,15,", "\"holds\""},
        {"\"20%\",\">\",\"criticalkv\",\"mean\",\"adakv\",\"mean\",12,-5,", "\"reversed\""},
        {"\"20%\",\"~\",\"adakv\",\"mean\",\"cake\",\"mean\",12,0,", "\"holds (no difference resolved)\""},
        {"\"20%\",\">\",\"adakv\",\"mean\",\"snapkv\",\"mean\",12,10,", "\"holds\""},
        {"\"20%\",\">\",\"cake\",\"mean\",\"snapkv\",\"mean\",12,10,", "\"holds\""},
        {"\"20%\",\">\",\"snapkv\",\"mean\",\"streamingllm\",\"none\",12,", "\"not resolved (the interval includes 0)\""},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *at = csv ? strstr(csv, want[i][0]) : NULL, *eol = at ? strchr(at, '\n') : NULL;
        const char *v = at ? strstr(at, want[i][1]) : NULL;
        CHECK(tc, v && v < eol, "ordering.csv has %s ... %s\n%s", want[i][0], want[i][1], csv ? csv : "(missing)");
    }
    /* snapkv − streamingllm: about +10 on 11 samples, −80 on the 12th: mean 2.5; a resample holding the 12th
     * twice or more (probability 0.26) is below 0, so the interval straddles 0 */
    const char *st = csv ? strstr(csv, "\"snapkv\",\"mean\",\"streamingllm\"") : NULL;
    CHECK(tc, st && strstr(st, ",12,2.5,-"), "snapkv > streamingllm: %.200s", st ? st : "(missing)");
    CHECK(tc, md && strstr(md, "| criticalkv > adakv | -5.00\\* [-") && strstr(md, "] | reversed |") &&
                  strstr(md, "| layer-defensivekv ≥ defensivekv (max+prior) | 0.00 [0.00, 0.00] | not resolved"),
          "markdown ordering rows: * only where the interval has width");
    CHECK(tc, tex && strstr(tex, "layer-defensivekv $\\geq$ defensivekv (max+prior)") &&
                  strstr(tex, "tab:m-ruler:ordering"), "LaTeX ordering table");
    compile_tex(tc, out);
    free(csv);
    free(md);
    free(tex);
    /* --resamples below 1000: refused with the reason, nothing written (2 resamples gave intervals that excluded
     * their own estimate) */
    snprintf(out, sizeof out, "%s/ordering_few", dir);
    for (int k = 0; k < 2; k++) {
        ReportOptions few = {db, out, NULL, NULL, 0, 0, k ? 999 : 2};
        CHECK(tc, report_write(&few, &err) == -1 && strstr(err.msg, "too few for a 95% interval (at least 1000)"),
              "--resamples %d refused: %s", few.resamples, err.msg);
    }
    struct stat sb;
    CHECK(tc, stat(out, &sb) != 0, "nothing written for a refused count");
    /* 1000: accepted, and the count stated */
    ReportOptions thousand = {db, out, NULL, NULL, 0, 0, 1000};
    CHECK(tc, report_write(&thousand, &err) == 0, "report with 1000 resamples: %s", err.msg);
    md = read_in(out, "report.md");
    CHECK(tc, md && strstr(md, "(1000 resamples;") && !strstr(md, "2000 resamples"), "the count stated");
    free(md);
}

/* ---------------------------------------------------------------- the ladder's steps, paired */

static StoreResult with_params(StoreResult r, const char *params) {
    r.key.params = params;
    return r;
}

/* Ten LongBench samples, i = 0..9, value-weighted variants a ladder step or more apart (docs/ladder.md), scores
 * in points: criticalkv mean 40 + (i mod 3); max+prior with group mean 45 + 2·(i mod 2); max+prior 50;
 * + forced mass 47 + (i mod 2); max 30; defensivekv max+prior 40 + 2·(i mod 2), without its forced set
 * 44 + (i mod 2); layer-defensivekv max+prior 52 + (i mod 3); snapkv 35. Over i = 0..9 the mean of (i mod 2) is
 * 0.5 and of (i mod 3) 0.9, so the one-step differences are, by hand: aggregation 45 + 1.0 − 40.9 = +5.10,
 * group 50 − 46.0 = +4.00, forced mass − topk 47.5 − 50 = −2.50, forced none − mass 44.5 − 41.0 = +3.50,
 * allocation global − layer 52.9 − 41.0 = +11.90. criticalkv at mean, max and max+prior with the same params
 * gives the aggregation ablation's three pairs (not repeated as steps); criticalkv max is two steps from every
 * other variant; snapkv has no ladder. */
static void test_ladder_steps(TestCounts *tc) {
    char db[128], out[128];
    snprintf(db, sizeof db, "%s/ladder.db", dir);
    snprintf(out, sizeof out, "%s/ladder_out", dir);
    Store *s;
    long long run;
    open_db(db, &s, &run);
    for (int i = 0; i < 10; i++) {
        char key[64];
        snprintf(key, sizeof key, "longbench:qasper:%d", i);
        StoreSample m = {"m", "cq=0", key, "longbench", "qasper", "single-doc QA", "qa_f1", i, -1, 0, 100, 10, "[]",
                         NULL, "m", "d", 0};
        double two = i % 2, three = i % 3;
        StoreResult r[] = {row("full", "mean", "full", 1, 0.60),
                           row("snapkv", "mean", "20%", 0.2, 0.35),
                           row("criticalkv", "mean", "20%", 0.2, 0.40 + 0.01 * three),
                           with_params(row("criticalkv", "max+prior", "20%", 0.2, 0.45 + 0.02 * two), "w=32,k=5,group=mean"),
                           row("criticalkv", "max+prior", "20%", 0.2, 0.50),
                           with_params(row("criticalkv", "max+prior", "20%", 0.2, 0.47 + 0.01 * two), "w=32,k=5,forced=mass"),
                           row("criticalkv", "max", "20%", 0.2, 0.30),
                           row("defensivekv", "max+prior", "20%", 0.2, 0.40 + 0.02 * two),
                           with_params(row("defensivekv", "max+prior", "20%", 0.2, 0.44 + 0.01 * two), "w=32,k=5,forced=none"),
                           row("layer-defensivekv", "max+prior", "20%", 0.2, 0.52 + 0.01 * three)};
        write_sample(s, run, &m, r, 10);
    }
    store_close(s);
    KvErr err;
    ReportOptions opt = {db, out, NULL, NULL, 0, 0, 0};
    CHECK(tc, report_write(&opt, &err) == 0, "ladder report: %s", err.msg);
    char *csv = read_in(out, "ablation.csv"), *md = read_in(out, "report.md");
    static const char *const want[] = {
        "\"aggregation max+prior − mean\",\"criticalkv\",\"max+prior\",\"w=32,k=5,group=mean\",\"criticalkv\",\"mean\","
        "\"w=32,k=5\",10,5.1,",
        "\"group max − mean\",\"criticalkv\",\"max+prior\",\"w=32,k=5\",\"criticalkv\",\"max+prior\","
        "\"w=32,k=5,group=mean\",10,4,",
        "\"forced mass − topk\",\"criticalkv\",\"max+prior\",\"w=32,k=5,forced=mass\",\"criticalkv\",\"max+prior\","
        "\"w=32,k=5\",10,-2.5,",
        "\"forced none − mass\",\"defensivekv\",\"max+prior\",\"w=32,k=5,forced=none\",\"defensivekv\",\"max+prior\","
        "\"w=32,k=5\",10,3.5,",
        "\"allocation global − layer\",\"layer-defensivekv\",\"max+prior\",\"w=32,k=5\",\"defensivekv\","
        "\"max+prior\",\"w=32,k=5\",10,11.9,",
        "\"aggregation max+prior − max\",\"criticalkv\",\"max+prior\",\"w=32,k=5\",\"criticalkv\",\"max\","
        "\"w=32,k=5\",10,20,",
    };
    const char *last = csv;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *at = csv ? strstr(csv, want[i]) : NULL;
        CHECK(tc, at != NULL, "ablation.csv has %s\n%s", want[i], csv ? csv : "(missing)");
        /* the ladder's steps in its order (aggregation, group, forced, allocation), after the aggregation pairs */
        if (i < 5) {
            CHECK(tc, at && at > last, "step %zu in the ladder's order", i);
            if (at) last = at;
        }
    }
    int lines = 0;
    for (const char *p = csv; p && (p = strchr(p, '\n')); p++) lines++;
    CHECK(tc, lines == 1 + 3 + 5, "the header, 3 aggregation pairs and 5 ladder steps, no other pair: %d lines\n%s",
          lines, csv ? csv : "");
    /* the ladder's variants are ablation variants: the ordering compares each policy as published (defensivekv
     * max+prior 41.0 against criticalkv mean 40.9), not "a policy ran with several parameter sets" */
    char *order = read_in(out, "ordering.csv");
    CHECK(tc, order && strstr(order, "\"20%\",\">\",\"defensivekv\",\"max+prior\",\"criticalkv\",\"mean\",10,0.1,") &&
                  !strstr(order, "several parameter sets"),
          "the ordering over the published variants:\n%s", order ? order : "(missing)");
    free(order);
    CHECK(tc, md && strstr(md, "| forced mass − topk, from criticalkv (max+prior) [w=32,k=5] | -2.50\\* [") &&
                  strstr(md, "| allocation global − layer, from defensivekv [w=32,k=5] | 11.90\\* ["),
          "markdown rows labelled by the step and where it starts:\n%s", md ? md : "");
    compile_tex(tc, out);
    free(csv);
    free(md);
}

static int run_cli(int argc, char **argv) { return kvbench_main(argc, argv); }

/* ---------------------------------------------------------------- no verdict from too few samples */

/* One LongBench task with n samples whose scores vary: full 60 + 2·(i mod 3), snapkv 40 + 3·(i mod 4), adakv at
 * its default mean 45 + 2·(i mod 5) and at max 90 (an ablation variant that beats every baseline), criticalkv
 * 42 + (i mod 3), defensivekv at max+prior 55 + 2·(i mod 2). */
static void fill_n(const char *path, int n) {
    Store *s;
    long long run;
    open_db(path, &s, &run);
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "longbench:qasper:%d", i);
        StoreSample m = {"m", "cq=0", key, "longbench", "qasper", "single-doc QA", "qa_f1", i, -1, 0, 100, 10, "[]",
                         NULL, "m", "d", 0};
        StoreResult r[] = {row("full", "mean", "full", 1, 0.60 + 0.02 * (i % 3)),
                           row("snapkv", "mean", "20%", 0.2, 0.40 + 0.03 * (i % 4)),
                           row("adakv", "mean", "20%", 0.2, 0.45 + 0.02 * (i % 5)),
                           row("adakv", "max", "20%", 0.2, 0.90),
                           row("criticalkv", "mean", "20%", 0.2, 0.42 + 0.01 * (i % 3)),
                           row("defensivekv", "max+prior", "20%", 0.2, 0.55 + 0.02 * (i % 2))};
        write_sample(s, run, &m, r, 6);
    }
    store_close(s);
}

/* The line of md that starts with `start`, copied into line[n] ("" when there is none). */
static const char *line_of(const char *md, const char *start, char *line, size_t n) {
    line[0] = 0;
    const char *at = md ? strstr(md, start) : NULL;
    if (at) snprintf(line, n, "%.*s", (int)strcspn(at, "\n"), at);
    return line;
}

/* Table rows of report.md (lines "| ...", the header, separator and n rows aside) holding `what`. */
static int rows_with(const char *md, const char *what) {
    int count = 0;
    for (const char *p = md; p && *p;) {
        size_t len = strcspn(p, "\n");
        if (!strncmp(p, "| ", 2) && strncmp(p, "| Method", 8) && strncmp(p, "| n |", 5)) {
            char line[4096];
            snprintf(line, sizeof line, "%.*s", (int)len, p);
            count += strstr(line, what) != NULL;
        }
        p += len + (p[len] == '\n');
    }
    return count;
}

static void test_min_n(TestCounts *tc) {
    static const int ns[] = {1, 2, 10};
    for (int k = 0; k < 3; k++) {
        int n = ns[k];
        char db[128], out[128], line[4096], want[200];
        snprintf(db, sizeof db, "%s/n%d.db", dir, n);
        snprintf(out, sizeof out, "%s/n%d_out", dir, n);
        fill_n(db, n);
        KvErr err = {{0}};
        ReportOptions opt = {db, out, NULL, NULL, 0, 0, 0}; /* the default min_n, 10 */
        CHECK(tc, report_write(&opt, &err) == 0, "n=%d: %s", n, err.msg);
        char *md = read_in(out, "report.md"), *tex = read_in(out, "report.tex"), *csv = read_in(out, "task_scores.csv");
        char *order = read_in(out, "ordering.csv"), *dat = read_in(out, "m_longbench_budget.dat");
        /* the best baseline is adakv at its default aggregation, never its max variant */
        CHECK(tc, md && strstr(md, "Best baseline per budget: 20% adakv (mean);"), "n=%d: best baseline", n);
        line_of(md, "| adakv (max) |", line, sizeof line);
        CHECK(tc, strstr(line, "| – |") && !strstr(line, "| – | –"), "n=%d: the ablation variant has no Δ best: %s", n,
              line);
        if (n < 10) {
            /* snapkv at n=1: 40, change 100 × (40 / 60 − 1) = −33.33, Δ best 40 − 45 = −5 */
            if (n == 1)
                CHECK(tc, strstr(md, "| snapkv | 40.00 (n=1, too few samples) | -33.33 (n=1, too few samples) | "
                                     "-5.00 (n=1, too few samples) |"), "n=1 summary row:\n%s", md);
            snprintf(want, sizeof want, "(n=%d, too few samples)", n);
            CHECK(tc, rows_with(md, " [") == 0 && rows_with(md, "\\*") == 0 && rows_with(md, "**") == 0 &&
                          rows_with(md, want) > 0, "n=%d: no interval, * or bold in any table row", n);
            CHECK(tc, tex && strstr(tex, want) && !strstr(tex, "\\textbf") && !strstr(tex, "$^{*}$") &&
                          !strstr(tex, "\\scriptsize["), "n=%d: LaTeX likewise", n);
            snprintf(want, sizeof want, "\"snapkv\",\"mean\",\"w=32,k=5\",\"20%%\",0.2,0,%d,", n);
            const char *r = csv ? strstr(csv, want) : NULL;
            line_of(r, want, line, sizeof line);
            CHECK(tc, strstr(line, ",,,") && strstr(line, ",\"too few samples\""), "n=%d: CSV bounds empty, noted: %s", n,
                  line);
            int links = 0;
            for (const char *p = order; p && (p = strstr(p, "\"too few samples\"")); p++) links++;
            CHECK(tc, links == 3, "n=%d: the 3 links that ran say too few samples (%d):\n%s", n, links, order);
            CHECK(tc, order && !strstr(order, "\"holds") && !strstr(order, "\"reversed"), "n=%d: no verdict", n);
            CHECK(tc, dat && strstr(dat, n == 1 ? " 40.0000 NaN NaN\n" : " 41.5000 NaN NaN\n"), "n=%d: no error bar:\n%s", n,
                  dat ? dat : "-");
        } else {
            line_of(md, "| snapkv |", line, sizeof line);
            CHECK(tc, strstr(line, " [") && strstr(line, "\\*") && !strstr(line, "too few"), "n=10 snapkv: %s", line);
            CHECK(tc, rows_with(md, "**") > 0 && rows_with(md, "too few samples") == 0, "n=10: bold, no 'too few'");
            CHECK(tc, order && strstr(order, "\"adakv\",\"mean\",\"snapkv\",\"mean\",10,") &&
                          !strstr(order, "too few"), "n=10: verdicts:\n%s", order);
            CHECK(tc, dat && !strstr(dat, "NaN"), "n=10: error bars");
        }
        /* the ablation as paired differences: adakv max − mean = 90 − (45 + 2·(i mod 5)), on the same samples */
        char *abl = read_in(out, "ablation.csv");
        snprintf(want, sizeof want, "\"20%%\",0.2,\"aggregation max − mean\",\"adakv\",\"max\",\"w=32,k=5\",\"adakv\","
                 "\"mean\",\"w=32,k=5\",%d,%s", n,
                 n == 1 ? "45,,,\"too few samples\"" : n == 2 ? "44,,,\"too few samples\"" : "41,");
        CHECK(tc, abl && strstr(abl, "model,setup,suite,budget,keep_fraction,step,left_policy,left_aggregation,"
                                     "left_params,right_policy,right_aggregation,right_params,n,diff,lo,hi,"
                                     "verdict\n") && strstr(abl, want) &&
                      (n < 10 || strstr(abl, ",\"higher\"\n")),
              "n=%d: ablation.csv has %s:\n%s", n, want, abl ? abl : "(missing)");
        line_of(md, "| adakv: max − mean |", line, sizeof line);
        CHECK(tc, n < 10 ? strstr(line, "too few samples") != NULL : strstr(line, "| 41.00\\* [") && strstr(line, "| higher |"),
              "n=%d: the paired ablation row: %s", n, line);
        CHECK(tc, tex && strstr(tex, "adakv: max $-$ mean &"),
              "n=%d: LaTeX paired ablation", n);
        free(abl);
        free(md), free(tex), free(csv), free(order), free(dat);
    }
    /* --min-n on the command line: the n=2 database with intervals */
    static char text[4096];
    char db[128], out[128], line[4096];
    snprintf(db, sizeof db, "%s/n2.db", dir);
    snprintf(out, sizeof out, "%s/n2_min2", dir);
    char *argv[] = {"kvbench", "report", "--db", db, "--out", out, "--min-n", "2", NULL};
    CHECK(tc, test_run_command(run_cli, 8, argv, text, NULL, sizeof text) == 0, "report --min-n 2: %s", text);
    char *md = read_in(out, "report.md");
    line_of(md, "| snapkv |", line, sizeof line);
    CHECK(tc, strstr(line, "| snapkv | 41.50 [40.00, 43.00] |") && !strstr(line, "too few"), "--min-n 2: %s", line);
    free(md);
    char *bad[] = {"kvbench", "report", "--db", db, "--min-n", "0", NULL};
    CHECK(tc, test_run_command(run_cli, 6, bad, text, NULL, sizeof text) == 2 && strstr(text, "--min-n '0'"),
          "--min-n 0 refused: %s", text);
}

/* The header names what the rows came from; a database mixing revisions says so, naming them. */
/* ---------------------------------------------------------------- two models, merged from two databases */

/* One model's database: 12 RULER and 12 LongBench (lcc) samples; full cache `full`, snapkv at 20% `snap`
 * everywhere, at 40% `snap40`, so each model's % of its own full cache is known by hand. */
static void fill_model(const char *path, const char *model, double full, double snap, double snap40) {
    Store *s;
    long long run;
    KvErr err;
    char model_id[64];
    snprintf(model_id, sizeof model_id, "fp=%s", model);
    StoreRun info = {"t", "{}", "h", "rev", model, "m.gguf", model_id, "m.gguf", "cpu", "host", NULL, 0};
    if (store_open(&s, path, 0, &err) || store_begin_run(s, &info, &run, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    for (int i = 0; i < 24; i++) {
        char key[64];
        int ruler = i < 12;
        snprintf(key, sizeof key, "%s:%d", ruler ? "ruler:vt" : "longbench:lcc", i);
        StoreSample m = {model, "cq=0", key, ruler ? "ruler" : "longbench", ruler ? "vt" : "lcc",
                         ruler ? "ruler" : "code", ruler ? "string_match_all" : "code_sim", i % 12, -1, 4096, 3000,
                         40, "[]", NULL, model_id, "d", 0};
        StoreResult r[] = {row("full", "mean", "full", 1, full), row("snapkv", "mean", "20%", 0.2, snap),
                           row("snapkv", "mean", "40%", 0.4, snap40)};
        write_sample(s, run, &m, r, 3);
    }
    store_close(s);
}

/* Every cell obeys min_n with its own n: model m has 3 LongBench samples (single-doc QA) and 12 needle samples,
 * model m2 12 needle samples only. m's single-doc QA change rests on 3 samples, its mean over the two domains
 * has 3 in a domain: no interval, * or error bar from either (they used to count all 15); the retrieval domain's
 * 12 give an interval. Side by side, m's value is likewise too few, m2's is not; "(1 domain)" in the singular. */
static void test_crossdomain_n(TestCounts *tc) {
    char db[128], out[128], line[4096];
    KvErr err = {{0}};
    Store *s;
    long long run;
    snprintf(db, sizeof db, "%s/domain_n.db", dir);
    snprintf(out, sizeof out, "%s/domain_n_out", dir);
    open_db(db, &s, &run);
    for (int k = 0; k < 27; k++) {
        const char *model = k < 15 ? "m" : "m2";
        int lb = k < 3, i = k < 15 ? k : k - 15;
        char key[64];
        snprintf(key, sizeof key, "%s:%d", lb ? "longbench:qasper" : "niah:needle", i);
        StoreSample m = {model, "cq=0", key, lb ? "longbench" : "niah", lb ? "qasper" : "needle",
                         lb ? "single-doc QA" : "needle", "x", i, -1, 100, 100, 10, "[]", NULL, "m", "d", 0};
        StoreResult r[] = {row("full", "mean", "full", 1, 0.8 + 0.01 * (i % 3)),
                           row("snapkv", "mean", "20%", 0.2, lb ? 0.3 + 0.1 * i : 0.5 + 0.05 * (i % 4))};
        write_sample(s, run, &m, r, 2);
    }
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL, 0, 0, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0 || strstr(err.msg, "gnuplot"), "domain n report: %s", err.msg);
    char *md = read_in(out, "report.md"), *dat = read_in(out, "m_fig2_crossdomain_20p.dat");
    const char *x = md ? strstr(md, "## m — cross-domain change at 20%") : NULL;
    line_of(x, "| snapkv |", line, sizeof line);
    CHECK(tc, strstr(line, "(n=3, too few samples)") && strstr(line, "(n=15, 3 in a domain: too few samples)") &&
                  !strstr(line, "**"), "m's cross-domain row: %s", line);
    CHECK(tc, strstr(line, "-29.01%\\* [-33.06, -25.05]") != NULL, "the 12-sample domain has its interval: %s", line);
    CHECK(tc, dat && strstr(dat, "NaN NaN\n"), "figure 2: no error bar on the mean:\n%s", dat ? dat : "-");
    const char *side = md ? strstr(md, "## Models side by side at 20%") : NULL;
    line_of(side, "| snapkv |", line, sizeof line);
    CHECK(tc, strstr(line, "(n=15, 3 in a domain: too few samples) | ") && strstr(line, "70.99%\\* [67.11, 74.87]"),
          "side by side: m too few, m2 with its interval: %s", line);
    CHECK(tc, side && strstr(side, "m (2 domains)") && strstr(side, "m2 (1 domain)") && !strstr(md, "1 domains"),
          "domain counts in words");
    free(md);
    free(dat);
}

static void test_two_models(TestCounts *tc) {
    char a[128], b[128], merged[128], out[128];
    KvErr err = {{0}};
    snprintf(a, sizeof a, "%s/small.db", dir);
    snprintf(b, sizeof b, "%s/qwen.db", dir);
    snprintf(merged, sizeof merged, "%s/both.db", dir);
    snprintf(out, sizeof out, "%s/both_out", dir);
    fill_model(a, "smollm2", 0.80, 0.40, 0.60); /* 50% and 75% of its own full cache */
    fill_model(b, "qwen2.5", 0.50, 0.45, 0.50); /* 90% and 100% */
    const char *inputs[] = {a, b};
    CHECK(tc, store_merge_into(merged, inputs, 2, &err) == 0, "merge of two models: %s", err.msg);
    ReportOptions opt = {merged, out, NULL, NULL, 0, 0, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0 || strstr(err.msg, "gnuplot"), "two-model report: %s", err.msg);
    char *md = read_in(out, "report.md"), *csv = read_in(out, "cross_model.csv"), *tex = read_in(out, "report.tex");
    char line[4096];
    /* each model's own sections, its own numbers only: snapkv's 20% average is 40 for smollm2, 45 for qwen2.5 */
    CHECK(tc, md && strstr(md, "## smollm2 — ruler") && strstr(md, "## qwen2.5 — ruler") &&
                  strstr(md, "## smollm2 — longbench") && strstr(md, "## qwen2.5 — longbench"),
          "one section per model and suite");
    const char *q = md ? strstr(md, "## qwen2.5 — ruler") : NULL;
    CHECK(tc, q && strstr(q, "| snapkv | 45.00") && !strstr(q, "| snapkv | 40.00"), "qwen2.5's section: its scores");
    /* side by side: 50 / 90 at 20%, 75 / 100 at 40%; never an average of the two (70 or 65.38 at 20%) */
    line_of(md, "| snapkv | 50.00%", line, sizeof line);
    CHECK(tc, strstr(line, "| 90.00% [90.00, 90.00] |") != NULL, "20%%: smollm2 50, qwen2.5 90 in one row: '%s'", line);
    line_of(md, "| snapkv | 75.00%", line, sizeof line);
    CHECK(tc, strstr(line, "| 100.00% [100.00, 100.00] |") != NULL, "40%%: smollm2 75, qwen2.5 100: '%s'", line);
    CHECK(tc, md && strstr(md, "## Models side by side at 20%") && strstr(md, "## Models side by side at 40%") &&
                  strstr(md, "smollm2 (2 domains)") && strstr(md, "qwen2.5 (2 domains)") && !strstr(md, "70.00") &&
                  !strstr(md, "65.38"),
          "models side by side, not averaged");
    CHECK(tc, csv && strstr(csv, "\"20%\",0.2,\"smollm2\",2,\"snapkv\",\"mean\",\"w=32,k=5\",24,50,50,50,") &&
                  strstr(csv, "\"20%\",0.2,\"qwen2.5\",2,\"snapkv\",\"mean\",\"w=32,k=5\",24,90,90,90,") &&
                  strstr(csv, "\"40%\",0.4,\"qwen2.5\",2,\"snapkv\",\"mean\",\"w=32,k=5\",24,100,100,100,"),
          "cross_model.csv:\n%s", csv ? csv : "(missing)");
    CHECK(tc, tex && strstr(tex, "\\label{tab:crossmodel:20-}"), "LaTeX table");
    free(md);
    free(csv);
    free(tex);
    /* the figure: one data block per model, each model's own values */
    char *dat = read_in(out, "crossmodel_20p.dat"), *gp = read_in(out, "crossmodel_20p.gp");
    const char *second = dat ? strstr(dat, "# qwen2.5") : NULL;
    CHECK(tc, dat && strstr(dat, "# smollm2") && second && strstr(dat, " 50.0000") < second &&
                  strstr(second, " 90.0000"),
          "crossmodel_20p.dat:\n%s", dat ? dat : "(missing)");
    CHECK(tc, gp && strstr(gp, "own full cache") && strstr(gp, "'smollm2'") && strstr(gp, "'qwen2.5'"),
          "crossmodel_20p.gp names both models");
    free(dat);
    free(gp);
    /* one model: no side-by-side table */
    snprintf(out, sizeof out, "%s/one_out", dir);
    ReportOptions one = {a, out, NULL, NULL, 0, 0, 0};
    rc = report_write(&one, &err);
    md = read_in(out, "report.md");
    CHECK(tc, md && !strstr(md, "side by side") && !strstr(md, "model beside model") &&
                  file_size(out, "cross_model.csv") < 0 && file_size(out, "sizes.csv") < 0,
          "one model: no cross-model, no links model beside model");
    free(md);
}

/* ---------------------------------------------------------------- the links model beside model */

/* Model `model` on RULER vt samples 0..n-1 (keys shared across models), scores in points /100: criticalkv mean
 * 50 (+ 2 on odd samples for model "large"), defensivekv max+prior = criticalkv + d(i), snapkv 40, adakv
 * 43 + (i mod 2); "large" also runs defensivekv at mean (an ablation pair the others lack). */
static void fill_size(const char *path, const char *model, int n, double (*d)(int)) {
    Store *s;
    long long run;
    KvErr err;
    StoreRun info = {"t", "{}", "h", "rev", model, "m.gguf", model, "m.gguf", "cpu", "host", NULL, 0};
    if (store_open(&s, path, 0, &err) || store_begin_run(s, &info, &run, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    int large = !strcmp(model, "large");
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "ruler:vt:%d@4096", i);
        StoreSample m = {model, "cq=0", key, "ruler", "vt", "ruler", "string_match_all", i, -1, 4096, 3000, 40, "[]",
                         NULL, model, "d", 0};
        double c = 0.50 + (large && i % 2 ? 0.02 : 0.0);
        StoreResult r[] = {row("full", "mean", "full", 1, 0.9), row("snapkv", "mean", "20%", 0.2, 0.40),
                           row("adakv", "mean", "20%", 0.2, 0.43 + 0.01 * (i % 2)),
                           row("criticalkv", "mean", "20%", 0.2, c),
                           row("defensivekv", "max+prior", "20%", 0.2, c + d(i) / 100),
                           row("defensivekv", "mean", "20%", 0.2, c)};
        write_sample(s, run, &m, r, large ? 6 : 5);
    }
    store_close(s);
}

/* DefensiveKV − CriticalKV per sample, by hand: small −5 + (i mod 3 − 1) (mean −5, every sample below 0);
 * mid ±2 alternating (mean 0); large 8 + (i mod 4 − 1.5) (mean 8). Over the 12 shared samples the changes are
 * +5 (small → mid: 5 ± 2 − (i mod 3 − 1), every sample above 0) and +8. */
static double d_small(int i) { return -5 + (i % 3 - 1); }
static double d_mid(int i) { return i % 2 ? 2 : -2; }
static double d_large(int i) { return 8 + (i % 4 - 1.5); }

/* Three models merged smallest first; "large" has 14 samples, two no other model ran: the links rest on the 12
 * shared ones. DefensiveKV > CriticalKV changes sign (−5 at small, +8 at large, both resolved), AdaKV > SnapKV
 * keeps it (+3.5 everywhere; its changes are exactly 0, a zero-width interval with no verdict); the aggregation
 * pair only "large" ran is listed, not run by the others. */
/* Three models' databases (fill_size: model k with n[k] samples and diffs[k]) merged smallest first into
 * DIR/STEM.db and reported into DIR/STEM_out (out). */
static void sizes_report(TestCounts *tc, const char *stem, const char *const names[3], double (*const diffs[3])(int),
                         const int n[3], char *out, size_t out_size) {
    char paths[3][160], merged[160];
    const char *inputs[3];
    KvErr err = {{0}};
    for (int k = 0; k < 3; k++) {
        snprintf(paths[k], sizeof paths[k], "%s/%s_%d.db", dir, stem, k);
        fill_size(paths[k], names[k], n[k], diffs[k]);
        inputs[k] = paths[k];
    }
    snprintf(merged, sizeof merged, "%s/%s.db", dir, stem);
    snprintf(out, out_size, "%s/%s_out", dir, stem);
    CHECK(tc, store_merge_into(merged, inputs, 3, &err) == 0, "merge of three models into %s: %s", merged, err.msg);
    ReportOptions opt = {merged, out, NULL, NULL, 0, 0, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0 || strstr(err.msg, "gnuplot"), "report of %s: %s", merged, err.msg);
}

static void test_sizes(TestCounts *tc) {
    char out[160];
    static const char *const names[] = {"small", "mid", "large"};
    static double (*const diffs[])(int) = {d_small, d_mid, d_large};
    static const int n[] = {12, 12, 14};
    sizes_report(tc, "sizes", names, diffs, n, out, sizeof out);
    char *csv = read_in(out, "sizes.csv"), *md = read_in(out, "report.md"), *tex = read_in(out, "report.tex");
    static const char *const want[] = {
        "\"ruler\",\"20%\",0.2,\"defensivekv > criticalkv\",\"defensivekv\",\"max+prior\",\"w=32,k=5\",\"criticalkv\","
        "\"mean\",\"w=32,k=5\",\"small\",12,-5,",
        "\"criticalkv\",\"mean\",\"w=32,k=5\",\"mid\",12,0,",
        "\"criticalkv\",\"mean\",\"w=32,k=5\",\"large\",12,8,",
        "\"adakv > snapkv\",\"adakv\",\"mean\",\"w=32,k=5\",\"snapkv\",\"mean\",\"w=32,k=5\",\"large\",12,3.5,",
        "\"aggregation max+prior − mean\",\"defensivekv\",\"max+prior\",\"w=32,k=5\",\"defensivekv\",\"mean\","
        "\"w=32,k=5\",\"small\",0,,,,,,,,\"not run\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(tc, csv && strstr(csv, want[i]), "sizes.csv has %s\n%s", want[i], csv ? csv : "(missing)");
    char line[4096];
    const char *at = csv ? strstr(csv, "\"criticalkv\",\"mean\",\"w=32,k=5\",\"mid\",12,0,") : NULL;
    line_of(at, "\"", line, sizeof line);
    CHECK(tc, strstr(line, ",5,") && strstr(line, "\"higher\",\"changes sign\""), "small → mid: +5, higher: %s", line);
    at = csv ? strstr(csv, "\"criticalkv\",\"mean\",\"w=32,k=5\",\"large\",12,8,") : NULL;
    line_of(at, "\"", line, sizeof line);
    CHECK(tc, strstr(line, ",8,") && strstr(line, "\"higher\",\"changes sign\""), "mid → large: +8, higher: %s", line);
    at = csv ? strstr(csv, "\"adakv > snapkv\",\"adakv\",\"mean\",\"w=32,k=5\",\"snapkv\",\"mean\",\"w=32,k=5\",\"mid\"") : NULL;
    line_of(at, "\"", line, sizeof line);
    CHECK(tc, strstr(line, ",12,3.5,") && strstr(line, ",0,0,0,\"not resolved (zero-width") &&
                  strstr(line, "\"the same sign in every model\""), "adakv > snapkv keeps its sign: %s", line);
    const char *table = md ? strstr(md, "## The links model beside model: ruler at 20%") : NULL;
    line_of(table, "| defensivekv > criticalkv |", line, sizeof line);
    CHECK(tc, strstr(line, "| 12 | -5.00\\* [") && strstr(line, "| 0.00 [") && strstr(line, "| 8.00\\* [") &&
                  strstr(line, "| changes sign |"), "the markdown row: %s", line);
    CHECK(tc, table && strstr(table, "small → mid: change") && strstr(table, "mid → large: change"),
          "the change columns name both models");
    CHECK(tc, tex && strstr(tex, "tab:sizes:"), "LaTeX table");
    compile_tex(tc, out);
    free(csv);
    free(md);
    free(tex);
}

/* Models whose names have no place to break (the sizes table's column headings): each heading gets the width of
 * its name, the table splits into parts rather than running past the text width (the 1.5B study's three models
 * overran it by up to 170 pt). */
static void test_tex_long_names(TestCounts *tc) {
    char out[160];
    static const char *const names[] = {"SmolLM2-135M-Instruct-Q41", "Qwen2.5-Coder-0.5B-Instruct-AWQ",
                                        "Qwen2.5-Coder-1.5B-Instruct-Q4KM"};
    static double (*const diffs[])(int) = {d_small, d_large, d_large};
    static const int n[] = {12, 12, 12};
    sizes_report(tc, "long_names", names, diffs, n, out, sizeof out);
    compile_tex(tc, out);
}

/* File names from a model named ".m%2": never hidden (no leading '.'), '%' as 'p' in the model's part as in the
 * budget's ("_m-p2"... "20p"), one mapping in every file. */
static void test_file_names(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    Store *s;
    long long run;
    snprintf(db, sizeof db, "%s/names.db", dir);
    snprintf(out, sizeof out, "%s/names_out", dir);
    open_db(db, &s, &run);
    for (int i = 0; i < 2; i++) {
        char key[64];
        snprintf(key, sizeof key, "niah:needle:%d", i);
        StoreSample m = {".m%2", "cq=0", key, "niah", "needle", "needle", "x", i, 50, 100, 100, 10, "[]", NULL, "m",
                         "d", 0};
        StoreResult r[] = {row("full", "mean", "full", 1, 1.0), row("snapkv", "mean", "20%", 0.2, 0.5 * i)};
        write_sample(s, run, &m, r, 2);
    }
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL, 0, 2, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0 || strstr(err.msg, "gnuplot"), "names report: %s", err.msg);
    CHECK(tc, file_size(out, "_m2p_niah_budget.dat") < 0 && file_size(out, "_mp2_niah_budget.dat") > 0 &&
                  file_size(out, "_mp2_niah_tasks_20p.dat") > 0 && file_size(out, "_mp2_fig2_crossdomain_20p.dat") > 0,
          "file names: '.' leads none, '%%' is 'p' in every part");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -q '^\\.'", out);
    CHECK(tc, system(cmd) != 0, "no hidden file in %s", out);
}

/* A tall table: snapkv with 40 parameter sets at 20% and 40% (81 rows in the paper's layout) on 10 samples of 3
 * tasks; report.tex cuts it at a budget's block (or a row) to fit the page, and compiles with no overfull box and
 * no float too large (the old report had tables up to 49 pt taller than the page). */
static void test_tex_tall(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    Store *s;
    long long run;
    snprintf(db, sizeof db, "%s/tall.db", dir);
    snprintf(out, sizeof out, "%s/tall_out", dir);
    open_db(db, &s, &run);
    static char params[40][96];
    static const char *tasks[] = {"narrativeqa", "qasper", "hotpotqa"};
    for (int i = 0; i < 10; i++) {
        char key[64];
        snprintf(key, sizeof key, "longbench:%s:%d", tasks[i % 3], i);
        StoreSample m = {"m", "cq=0", key, "longbench", tasks[i % 3], i % 3 == 2 ? "multi-doc QA" : "single-doc QA",
                         "qa_f1", i, -1, 0, 100, 10, "[]", NULL, "m", "d", 0};
        StoreResult r[81];
        r[0] = row("full", "mean", "full", 1, 0.5 + 0.03 * (i % 4));
        for (int k = 0; k < 40; k++) {
            snprintf(params[k], sizeof params[k], "w=%d,k=5,forced=mass,safeguard=off,weighting=defensive,allocation=layer",
                     8 + k);
            for (int b = 0; b < 2; b++) {
                r[1 + 2 * k + b] = row("snapkv", "mean", b ? "40%" : "20%", b ? 0.4 : 0.2, 0.3 + 0.01 * k + 0.02 * (i % 3));
                r[1 + 2 * k + b].key.params = params[k];
            }
        }
        write_sample(s, run, &m, r, 81);
    }
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL, 0, 0, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0 || strstr(err.msg, "gnuplot"), "tall report: %s", err.msg);
    char *tex = read_in(out, "report.tex");
    CHECK(tc, tex && strstr(tex, "\\label{tab:m-longbench:main:part2}"), "the tall table in parts");
    free(tex);
    compile_tex(tc, out);
}

static void test_provenance(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    snprintf(db, sizeof db, "%s/prov.db", dir);
    snprintf(out, sizeof out, "%s/prov_out", dir);
    Store *s = NULL;
    long long run = 0;
    StoreRun one = {"paper_ruler", "{}", "h", "51029b1", "Llama", "l.gguf", "fp=1,bytes=2", "l.gguf", "cpu", "host",
                    NULL, 0};
    StoreResult r[] = {row("full", "mean", "full", 1, 1.0), row("snapkv", "mean", "20%", 0.2, 1.0)};
    CHECK(tc, store_open(&s, db, 0, &err) == 0 && store_begin_run(s, &one, &run, &err) == 0, "%s", err.msg);
    StoreSample m = {"Llama", "cq=0", "ruler:vt:0", "ruler", "vt", "retrieval", "string_match_all", 0, -1, 4096, 4000,
                     20, "[]", NULL, "m", "d", 0};
    write_sample(s, run, &m, r, 2);
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL, 0, 2, 0};
    CHECK(tc, report_write(&opt, &err) == 0, "%s", err.msg);
    char *md = read_in(out, "report.md"), *tex = read_in(out, "report.tex");
    CHECK(tc, md && strstr(md, "- Configs: paper\\_ruler\n") == NULL && strstr(md, "- Configs: paper_ruler\n") &&
                  strstr(md, "- kvbench revisions: 51029b1 (clean)\n") &&
                  strstr(md, "- Models (identity): Llama (fp=1,bytes=2)\n") && strstr(md, "- Runs: ") &&
                  !strstr(md, "Warning"),
          "report.md header:\n%.600s", md ? md : "-");
    CHECK(tc, tex && strstr(tex, "% kvbench revisions: 51029b1 (clean)") && !strstr(tex, "Warning"), "report.tex header");
    free(md);
    free(tex);
    /* a second run of another revision, built from a tree with uncommitted changes */
    StoreRun two = one;
    two.git_rev = "3cf8890-dirty";
    m.sample_key = "ruler:vt:1";
    CHECK(tc, store_open(&s, db, 0, &err) == 0 && store_begin_run(s, &two, &run, &err) == 0, "%s", err.msg);
    write_sample(s, run, &m, r, 2);
    store_close(s);
    CHECK(tc, report_write(&opt, &err) == 0, "%s", err.msg);
    md = read_in(out, "report.md");
    tex = read_in(out, "report.tex");
    CHECK(tc, md && strstr(md, "- kvbench revisions: 3cf8890-dirty (dirty: uncommitted changes); 51029b1 (clean)\n") &&
                  strstr(md, "**Warning: the rows come from 2 kvbench revisions (3cf8890-dirty"),
          "mixed revisions warned:\n%.900s", md ? md : "-");
    CHECK(tc, tex && strstr(tex, "\\paragraph{Warning.} the rows come from 2 kvbench revisions"), "LaTeX warning");
    free(md);
    free(tex);
    /* the build records its own revision: git describe of this checkout, or "unknown" outside git (the dirty flag
     * is the tree's at build time, which an edit since then changes: compared without it) */
    char rev[128];
    util_git_revision(rev, sizeof rev);
    FILE *p = popen("git describe --always --abbrev=12 2>/dev/null", "r");
    char want[128] = "";
    if (p && fgets(want, sizeof want, p)) want[strcspn(want, "\n")] = 0;
    if (p) pclose(p);
    size_t k = strlen(want);
    CHECK(tc, *want ? !strncmp(rev, want, k) && (!rev[k] || !strcmp(rev + k, "-dirty")) : !strcmp(rev, "unknown"),
          "build revision %s, git describe says %s", rev, want);
}

static void test_errors(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    Store *s;
    snprintf(db, sizeof db, "%s/empty.db", dir);
    snprintf(out, sizeof out, "%s/out3", dir);
    store_open(&s, db, 0, &err);
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL, 0, 2, 0};
    CHECK(tc, report_write(&opt, &err) == -1 && strstr(err.msg, "no results") && strstr(err.msg, "empty.db"),
          "empty: %s", err.msg);
    snprintf(db, sizeof db, "%s/none.db", dir);
    CHECK(tc, report_write(&opt, &err) == -1 && strstr(err.msg, "none.db"), "missing: %s", err.msg);
}


static void test_cli(TestCounts *tc) {
    static char out[8192];
    const char *cmds[] = {"run", "report", "trace", "merge", "slurm", "info", "tokenize", "generate", "select", "data",
                          "score"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *argv[] = {"kvbench", (char *)cmds[i], "--help", NULL};
        int rc = test_run_command(run_cli, 3, argv, out, NULL, sizeof out);
        char want[64];
        snprintf(want, sizeof want, "usage: kvbench %s", cmds[i]);
        CHECK(tc, rc == 0 && strstr(out, want), "%s --help: rc %d, %s", cmds[i], rc, out);
    }
    char *info[] = {"kvbench", "info", "-h", NULL};
    CHECK(tc, test_run_command(run_cli, 3, info, out, NULL, sizeof out) == 0 && !strstr(out, "cannot"),
          "info -h does not open a model: %s", out);
    /* the program runs OpenMP passive unless the user chose a wait policy (cli/main.c restarts itself once) */
    static const char *const waits[][2] = {{"env -u OMP_WAIT_POLICY ./kvbench --help", "OpenMP wait policy: passive"},
                                           {"OMP_WAIT_POLICY=active ./kvbench --help", "OpenMP wait policy: active"}};
    for (int i = 0; i < 2; i++) {
        FILE *p = popen(waits[i][0], "r");
        size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
        out[n] = 0;
        int rc = p ? pclose(p) : -1;
        CHECK(tc, rc == 0 && strstr(out, waits[i][1]), "%s: rc %d, %s", waits[i][0], rc, out);
    }
    char *data[] = {"kvbench", "data", "list", "--help", NULL};
    CHECK(tc, test_run_command(run_cli, 4, data, out, NULL, sizeof out) == 0 && strstr(out, "usage: kvbench data"),
          "data list --help");

    /* report CONFIG.json: the config's db, the report beside it */
    char cfg[160], db[160], body[600];
    snprintf(cfg, sizeof cfg, "%s/c.json", dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    snprintf(body, sizeof body, "{\"name\": \"c\", \"db\": \"%s\", \"models\": [{\"path\": \"synthetic:tiny\"}], "
             "\"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"]}], \"policies\": [\"full\"], "
             "\"budgets\": [\"20%%\"]}", db);
    FILE *f = fopen(cfg, "w");
    if (f) {
        fputs(body, f);
        fclose(f);
    }
    char *rep[] = {"kvbench", "report", cfg, NULL};
    int rc = test_run_command(run_cli, 3, rep, out, NULL, sizeof out);
    char beside[200];
    snprintf(beside, sizeof beside, "%s/r_report", dir);
    CHECK(tc, rc == 0 && file_size(beside, "report.md") > 0, "report CONFIG.json: rc %d: %s", rc, out);
    /* a refused report names no output: "DB -> OUT" only once it is written */
    char *few[] = {"kvbench", "report", "--db", db, "--resamples", "20", NULL};
    rc = test_run_command(run_cli, 6, few, out, NULL, sizeof out);
    CHECK(tc, rc == 1 && strstr(out, "--resamples 20: too few for a 95% interval") && !strstr(out, " -> "),
          "report --resamples 20: rc %d: %s", rc, out);
    char *both[] = {"kvbench", "report", cfg, "--db", db, NULL};
    CHECK(tc, test_run_command(run_cli, 5, both, out, NULL, sizeof out) == 2, "config and --db");

    /* no config, no --db, no results/kvbench.db: the only database in results/ (the demo's), or a clear error */
    char cwd[512], cmd[600];
    if (!getcwd(cwd, sizeof cwd) || chdir(dir)) return;
    char *bare[] = {"kvbench", "report", NULL};
    CHECK(tc, test_run_command(run_cli, 2, bare, out, NULL, sizeof out) == 1 && strstr(out, "no database"),
          "no database: %s", out);
    snprintf(cmd, sizeof cmd, "mkdir -p results && cp r.db results/cpu_demo.db");
    CHECK(tc, system(cmd) == 0, "copy");
    CHECK(tc, test_run_command(run_cli, 2, bare, out, NULL, sizeof out) == 0 &&
                  strstr(out, "results/cpu_demo.db -> results/cpu_demo_report/") &&
                  file_size("results/cpu_demo_report", "report.md") > 0,
          "the demo's database by default: %s", out);
    CHECK(tc, system("cp r.db results/other.db") == 0, "copy");
    CHECK(tc, test_run_command(run_cli, 2, bare, out, NULL, sizeof out) == 1 && strstr(out, "2 databases"),
          "two databases: %s", out);
    if (chdir(cwd)) fprintf(stderr, "cannot return to %s\n", cwd);
}

int main(void) {
    TestCounts tc = {"test_report", 0, 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_report_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_stats_hand(&tc);
    test_stats_reference(&tc);
    test_report(&tc);
    test_all_failed(&tc);
    test_crossdomain_setups(&tc);
    test_crossdomain_n(&tc);
    test_ordering(&tc);
    test_ladder_steps(&tc);
    test_min_n(&tc);
    test_two_models(&tc);
    test_sizes(&tc);
    test_file_names(&tc);
    test_tex_tall(&tc);
    test_tex_long_names(&tc);
    test_provenance(&tc);
    test_errors(&tc);
    test_cli(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!getenv("KVBENCH_KEEP_TMP") && system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    else if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    return test_finish(&tc);
}
