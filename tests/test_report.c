/* test_report.c — the report from a hand-made database: task and domain averages, relative quality loss and
 * per-task ratios against hand-computed values, every table and figure file present (PNG signature checked),
 * and the failures: gnuplot missing (tables still written), an empty database, a missing database. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../report/report.h"
#include "../runs/store.h"
#include "test.h"

static char dir[64];

typedef struct {
    const char *task, *domain;
    double full, snap20, snap40, def_mean20, def_prior20; /* per-sample scores; two identical samples per task */
} TaskCase;

/* full: 80, 40, 60 -> avg 60, single-doc 60, multi-doc 60.
 * snapkv 20%: 50, 30, 55 -> avg 45 (-25.00%), single-doc 40; snapkv 40%: 70, 40, 55 -> 55 (-8.33%).
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
    return r;
}

static void fill_db(const char *path) {
    Store *s;
    KvErr err;
    long long run;
    StoreRun info = {"t", "{}", "h", "rev", "m", "m.gguf", "x", "m.gguf", "cpu", "host", NULL};
    if (store_open(&s, path, 0, &err) || store_begin_run(s, &info, &run, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    char key[64];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 2; i++) {
            const TaskCase *c = &CASES[t];
            snprintf(key, sizeof key, "longbench:%s:%d", c->task, i);
            StoreSample m = {"m", "cq=0", key, "longbench", c->task, c->domain, "qa_f1", i, -1, 0, 100, 10, "[]", NULL, 0};
            StoreResult r[] = {row("full", "mean", "full", 1, c->full), row("snapkv", "mean", "20%", 0.2, c->snap20),
                               row("snapkv", "mean", "40%", 0.4, c->snap40),
                               row("defensivekv", "mean", "20%", 0.2, c->def_mean20),
                               row("defensivekv", "max+prior", "20%", 0.2, c->def_prior20)};
            if (store_write_sample(s, run, &m, r, 5, &err)) exit(1);
        }
    /* Needle: 2 lengths × 3 depths, full scores 100 everywhere, snapkv 20% loses the deep needle. */
    int lengths[] = {500, 1000};
    double depths[] = {0, 50, 100};
    for (int l = 0; l < 2; l++)
        for (int d = 0; d < 3; d++) {
            snprintf(key, sizeof key, "niah:needle:%d:%g", lengths[l], depths[d]);
            StoreSample m = {"m", "cq=0", key, "niah", "needle", "needle", "needle", l * 3 + d, depths[d], lengths[l],
                             lengths[l], 10, "[]", NULL, 0};
            StoreResult r[] = {row("full", "mean", "full", 1, 1.0),
                               row("snapkv", "mean", "20%", 0.2, d == 1 && l == 1 ? 0.0 : 1.0)};
            if (store_write_sample(s, run, &m, r, 2, &err)) exit(1);
        }
    store_close(s);
}

static char *read_all(const char *path) {
    KvErr err;
    return kv_read_file(path, NULL, &err);
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

static void test_report(TestCounts *tc) {
    char db[128], out[128], path[256];
    KvErr err = {{0}};
    snprintf(db, sizeof db, "%s/r.db", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    fill_db(db);
    ReportOptions opt = {db, out, NULL, NULL};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0, "report: %s", err.msg);

    snprintf(path, sizeof path, "%s/report.md", out);
    char *md = read_all(path);
    CHECK(tc, md != NULL, "report.md missing");
    if (md) {
        CHECK(tc, strstr(md, "loss = 1 - avg(method) / avg(full cache)") != NULL, "formula stated");
        /* Task row of snapkv at 20% and the domain averages. */
        CHECK(tc, strstr(md, "| snapkv | 50.00 | 30.00 | 55.00 | 45.00 |") != NULL, "snapkv 20%% task row");
        CHECK(tc, strstr(md, "| full | 80.00 | 40.00 | 60.00 | 60.00 |") != NULL, "full task row");
        CHECK(tc, strstr(md, "| snapkv | 40.00 | 55.00 | 45.00 |") != NULL, "snapkv 20%% domain row");
        /* Loss table: avg and signed loss per budget; snapkv has no token budget column gaps. */
        CHECK(tc, strstr(md, "| snapkv | 45.00 | -25.00% | 55.00 | -8.33% |") != NULL, "snapkv loss row");
        CHECK(tc, strstr(md, "| defensivekv (max+prior) | 70.00 | 16.67% | – | – |") != NULL, "defensivekv loss");
        CHECK(tc, strstr(md, "| defensivekv (mean) | 60.00 | 0.00% |") != NULL, "label qualified by aggregation");
        /* Ratio at 20%: 50/80, 30/40, 55/60, mean of the three. */
        CHECK(tc, strstr(md, "| snapkv | 62.50 | 75.00 | 91.67 | 76.39 |") != NULL, "ratio row");
        /* Needle section: snapkv loses one of 6 cells. */
        CHECK(tc, strstr(md, "| snapkv | 83.33 | 83.33 |") != NULL, "needle row");
        free(md);
    }
    snprintf(path, sizeof path, "%s/task_scores.csv", out);
    char *csv = read_all(path);
    CHECK(tc, csv && strstr(csv, "\"m\",\"cq=0\",\"longbench\",\"single-doc QA\",\"qasper\",\"snapkv\",\"mean\","
                                 "\"w=32,k=5\",\"20%\",0.2,30,40,0.75,0"),
          "csv row");
    free(csv);
    snprintf(path, sizeof path, "%s/domain_scores.csv", out);
    csv = read_all(path);
    CHECK(tc, csv && strstr(csv, "\"(all)\",\"snapkv\",\"mean\",\"w=32,k=5\",\"40%\",55,60,0.0833333"), "summary csv");
    free(csv);
    const char *files[] = {"report.tex", "m_longbench_budget.gp", "m_longbench_budget.dat", "m_longbench_budget.svg",
                           "m_longbench_tasks_20p.svg", "m_longbench_aggregation.svg", "m_niah_needle_full.svg",
                           "m_niah_needle_snapkv_20p.dat"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        CHECK(tc, file_size(out, files[i]) > 0, "%s missing or empty", files[i]);
    const char *pngs[] = {"m_longbench_budget.png", "m_longbench_tasks_20p.png", "m_longbench_tasks_40p.png",
                          "m_longbench_aggregation.png", "m_niah_needle_full.png", "m_niah_needle_snapkv_20p.png"};
    for (size_t i = 0; i < sizeof pngs / sizeof pngs[0]; i++)
        CHECK(tc, is_png(out, pngs[i]) && file_size(out, pngs[i]) > 2000, "%s is not a rendered PNG", pngs[i]);
    snprintf(path, sizeof path, "%s/report.tex", out);
    char *tex = read_all(path);
    CHECK(tc, tex && strstr(tex, "\\multicolumn{2}{c}{single-doc QA}") && strstr(tex, "-25.00\\%"), "tex layout");
    free(tex);

    /* Without gnuplot: a clear error, and the tables are still there. */
    char out2[160];
    snprintf(out2, sizeof out2, "%s/out2", dir);
    ReportOptions nogp = {db, out2, "/nonexistent/gnuplot", NULL};
    rc = report_write(&nogp, &err);
    CHECK(tc, rc == -1 && strstr(err.msg, "gnuplot not found"), "no gnuplot: %s", err.msg);
    CHECK(tc, file_size(out2, "report.md") > 0 && file_size(out2, "m_longbench_budget.gp") > 0,
          "tables and scripts without gnuplot");
    CHECK(tc, file_size(out2, "m_longbench_budget.png") < 0, "no PNG without gnuplot");
}

static void test_errors(TestCounts *tc) {
    char db[128], out[128];
    KvErr err = {{0}};
    Store *s;
    snprintf(db, sizeof db, "%s/empty.db", dir);
    snprintf(out, sizeof out, "%s/out3", dir);
    store_open(&s, db, 0, &err);
    store_close(s);
    ReportOptions opt = {db, out, NULL, NULL};
    CHECK(tc, report_write(&opt, &err) == -1 && strstr(err.msg, "no results") && strstr(err.msg, "empty.db"),
          "empty: %s", err.msg);
    snprintf(db, sizeof db, "%s/none.db", dir);
    CHECK(tc, report_write(&opt, &err) == -1 && strstr(err.msg, "none.db"), "missing: %s", err.msg);
}

int main(void) {
    TestCounts tc = {"test_report", 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_report_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_report(&tc);
    test_errors(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!getenv("KVBENCH_KEEP_TMP") && system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    else if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    return test_finish(&tc);
}
