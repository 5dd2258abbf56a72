/* model.h — the report's data model: a results database loaded into one ReportSection per (model, setup,
 * suite) with its tasks (in the order they were run), domains, methods (policy × aggregation × params, full
 * cache apart), budgets and samples, the per-sample scores of every (method, budget) cell and their statistics
 * (report/stats.h); the paper's ordering and the aggregation ablation (ordering.c), the cross-domain change and
 * the models side by side (crossdomain.c), the rows' provenance (provenance.c). It knows no output format: the
 * writers (writers.h) render from it.
 * Shape legend: M methods, B budgets, T tasks, D domains, S samples. */
#ifndef KVBENCH_REPORT_MODEL_H
#define KVBENCH_REPORT_MODEL_H

#include <sqlite3.h>

#include "../engine/err.h"
#include "stats.h"

typedef struct {
    char *policy, *aggregation, *params;
    char label[160];      /* "snapkv", or "snapkv (max)" / "snapkv [w=16,k=5]" where the section has several */
    long long first_row;  /* id of its first result row: methods are listed in the order they were run */
} ReportMethod;

typedef struct {
    char *label;          /* "20%", "512tok" */
    double keep_fraction; /* 0 for token budgets */
} ReportBudget;

/* The full cache, or one method at one budget. Scores are on the 0-100 scale, never rounded before use. */
typedef struct {
    double *x;              /* [S] per-sample score; NaN where the row failed or is missing */
    int *n_failed;          /* [T] rows with an error */
    int *n_missing;         /* [T] samples of the task without a row (when the cell ran at all) */
    int ran;                /* the cell has at least one row */
    StatsInterval *task;    /* [T] task averages */
    StatsInterval *domain;  /* [D + 1] domain averages (mean of task averages), then the overall average */
    StatsInterval ratio;    /* 100 * avg / avg(full), paired over the samples both scored */
    StatsInterval diff_full;/* avg - avg(full), paired */
    StatsInterval diff_best;/* avg - avg(best baseline at this budget), paired; n = 0 when there is none or the
                             * method is an ablation variant */
} ReportCell;

/* Failed rows of one (method, budget) sharing one error message (method -1: the full cache). */
typedef struct {
    int method, budget;
    char *error;
    int count;
} ReportFailure;

/* The paper's ordering at 20% (ordering.c): Layer-DefensiveKV ≥ DefensiveKV > CriticalKV > AdaKV ≈ CAKE > SnapKV >
 * StreamingLLM as its links, each a paired comparison of two policies at their default aggregations. */
typedef enum { ORDER_GE, ORDER_GT, ORDER_APPROX } OrderKind;
#define REPORT_N_ORDER 7
typedef struct {
    const char *a, *b;       /* policy names */
    OrderKind kind;
    int method_a, method_b;  /* indices into the section's methods; -1 absent, -2 several parameter sets */
    StatsInterval diff;      /* avg(a) − avg(b) in points over the samples both scored, paired; n 0 when not run */
    const char *verdict;     /* "holds", "reversed", "not resolved (the interval includes 0)", ... */
} OrderRelation;

/* The ablations as paired differences at one budget: one policy (and params) at two aggregations, or two
 * value-weighted variants one step of DefensiveKV's ladder apart (docs/ladder.md; step[0] != 0). */
typedef struct {
    int left, right;         /* method indices: avg(left) − avg(right) */
    int budget;
    StatsInterval diff;      /* in points over the samples both scored, paired */
    const char *verdict;     /* "higher", "lower", "not resolved (...)", "too few samples", ... */
    int step_rank;           /* a ladder step: its place (policy_ladder_step), else -1 */
    char step[64];           /* a ladder step: "forced mass − topk" (left's value first), else empty */
} AblationPair;

typedef struct {
    char *model, *setup, *suite;
    char stem[200];       /* file-name stem: model_suite (plus the setup when the database has several) */
    char **tasks;         /* [T] */
    int *task_domain;     /* [T] index into domains */
    int *task_samples;    /* [T] samples of the task */
    unsigned char *task_substitute; /* [T] the task ran as a labelled substitute (RULER qa_N without its data) */
    int n_tasks;
    char **domains;
    int n_domains;
    ReportMethod *methods;/* [M] */
    int n_methods;
    ReportBudget *budgets;/* [B] */
    int n_budgets;
    int n_samples;
    int *sample_task;     /* [S] */
    long long *sample_id; /* [S] samples.id */
    char **sample_key;    /* [S] samples.sample_key: the generated task instance, the same key in every model */
    ReportCell full;
    ReportCell *cells;    /* [M][B] */
    int *best_baseline;   /* [B] method index of the best baseline at the budget, -1 if none */
    OrderRelation *order; /* [B][REPORT_N_ORDER] the paper's ordering, link by link (ordering.c) */
    AblationPair *pairs;  /* the aggregation pairs by budget, then left method, then right; then the ladder's
                           * steps by step, right method, left, budget (report_ablation_pairs) */
    int n_pairs;
    ReportFailure *failures;
    int n_failures;
    int n_rows, n_failed_rows;
    int has_needle;       /* samples carry a depth percent: draw heatmaps */
    int min_n;            /* ReportData.min_n */
    int resamples;        /* ReportData.resamples */
} ReportSection;

/* What the rows came from (provenance.c), from the runs that wrote them. */
typedef struct {
    char configs[1024];     /* "cpu_demo; niah" */
    char revisions[1024];   /* "51029b1 (clean); 3cf8890-dirty (dirty: uncommitted changes)" */
    char models[4096];      /* "SmolLM2-135M-Instruct (fp=...,bytes=...)" */
    char dates[128];        /* "2026-12-04T17:20:00Z to 2026-12-04T17:24:00Z" */
    int n_revisions;
    char warning[1300];     /* "" unless the rows come from several revisions or from runs limited by --limit */
} ReportProvenance;
int report_provenance_load(sqlite3 *db, ReportProvenance *p, KvErr *err);

typedef struct {
    ReportSection *sections;
    int n_sections;
    double outlier;      /* the fragility outlier threshold (ReportOptions.outlier, resolved) */
    int min_n;           /* fewest samples behind an interval or a verdict (ReportOptions.min_n, resolved) */
    int resamples;       /* bootstrap resamples per interval (ReportOptions.resamples, resolved) */
    int n_rows, n_failed_rows; /* over every section */
    ReportProvenance prov;
    struct CrossModel *crossmodels; /* [n_crossmodels] per fractional budget, with two models or more (crossdomain.c) */
    int n_crossmodels;
    struct ReportSizes *sizes; /* [n_sizes] the links model beside model, per suite and budget (sizes.c) */
    int n_sizes;
} ReportData;

/* The proposed methods of the paper (the others are its baselines, whose best each method is compared with). */
int report_is_proposed(const char *policy);
/* Whether the method runs its policy as published: at the policy's default aggregation and, for the
 * value-weighted policies, with the policy's own ladder steps (ordering.c; docs/ladder.md); the others are
 * ablation variants, compared with their own policy only (never picked as, or compared with, the best baseline,
 * never a link of the paper's ordering). */
int report_is_published(const ReportMethod *m);

int report_load(ReportData *d, sqlite3 *db, const char *db_path, int min_n, int resamples, KvErr *err);
void report_data_free(ReportData *d);

ReportCell *report_cell(const ReportSection *s, int method, int budget);
/* Whether any sample of the cell has a score. */
int report_has_scores(const ReportSection *s, const ReportCell *c);
/* Whether the section includes a substituted task (in domain k, or anywhere when k < 0). */
int report_has_substitute(const ReportSection *s, int domain);

/* The cross-domain change of one model at the budget nearest 20% (crossdomain.c, where the domain grouping is
 * stated): per method, the change against the full cache in each domain and their unweighted mean. */
typedef struct {
    const char *model;
    char setup[600];          /* the suites covered and their setups: "ruler: cq=0; niah: cq=0,chat=1" */
    char budget[64];          /* "" when the model has no fractional budget with a full cache */
    char (*domains)[160];     /* [D] */
    int *domain_substitute;   /* [D] the domain includes a substituted task */
    int n_domains;
    ReportMethod *methods;    /* [M] copies of the sections' methods (strings borrowed) */
    int n_methods;
    StatsInterval *change;    /* [M][D] 100 × (avg / avg(full) − 1) over the samples both scored, with its
                               * paired interval; value NaN where the domain has no score */
    StatsInterval *mean;      /* [M] the unweighted mean over the domains with a value (STATS_DOMAIN_CHANGE) */
    int *n_used;              /* [M] those domains */
    int min_n;                /* ReportData.min_n */
    int resamples;            /* ReportData.resamples */
} CrossDomain;
#define REPORT_CROSSDOMAIN_GROUPING                                                                              \
    "LongBench's six task families as LongBench assigns its datasets (single-doc QA, multi-doc QA, "             \
    "summarization, few-shot, synthetic, code), plus one domain \"synthetic retrieval (RULER, needle)\" holding " \
    "every RULER and needle task; our grouping, not the paper's (its 7 domains / 18 datasets are not published)"
/* Whether section i is the first of its model; report_crossdomain then covers the model's suites, each in the
 * first setup it appears with, at the model's fractional budget nearest `keep` (exact: that budget only; none,
 * x->budget "", when the model lacks it). */
int report_first_of_model(const ReportData *d, int i);
#define REPORT_FIG2_KEEP 0.2
int report_crossdomain(const ReportData *d, int first_section, double keep, int exact, CrossDomain *x, KvErr *err);
void report_crossdomain_free(CrossDomain *x);

/* Several models side by side at one fractional budget (crossdomain.c): per method, each model's score as a
 * percentage of its own model's full cache, 100 + its cross-domain mean change (CrossDomain.mean). Models are
 * never averaged together. Made only when the database holds two models or more. */
typedef struct CrossModel {
    char budget[64];
    double keep_fraction;
    int n_models;
    const char **models;      /* [N] borrowed from the sections */
    int *n_domains;           /* [N] the domains behind each model's value */
    ReportMethod *methods;    /* [M] (policy, aggregation, params) over every model; labels from the first */
    int n_methods;
    StatsInterval *pct;       /* [M][N] value NaN where the model did not run the method at this budget */
    int min_n;
} CrossModel;
/* Every fractional budget that any model ran with a full cache, ascending; *n = 0 for fewer than two models.
 * report_load fills ReportData.crossmodels with it once. */
int report_crossmodels(const ReportData *d, CrossModel **out, int *n, KvErr *err);
void report_crossmodels_free(CrossModel *x, int n);

/* The paper's ordering and the ablations, model beside model (sizes.c): for one suite at one budget, the models
 * that ran it on shared samples, each link's paired difference per model over the samples every one of them
 * scored on both sides (matched by sample key: the same generated task instance; a model with another tokenizer
 * reads other filler text around it), and from each model to the next the change of that difference, paired by
 * sample. Models stand in the order the database first holds them (merge databases smallest model first). */
typedef struct {
    int order;               /* a link of the paper's ordering (index into the first model's order), or -1 */
    int pair, pair_model;    /* else ablation pair `pair` of model pair_model's section (its pairs) */
    StatsInterval *diff;     /* [N] avg(left) − avg(right) per model over the link's common samples */
    StatsInterval *change;   /* [N − 1] diff[i + 1] − diff[i], paired by sample */
    const char **change_verdict; /* [N − 1] report_diff_verdict: "higher" = larger at the later model */
    const char *sign;        /* "changes sign", "the same sign in every model", "not resolved", "not run" */
} SizeLink;

typedef struct ReportSizes {
    int n_models;
    int *section;            /* [N] each model's section of the suite (its first setup) */
    int budget;              /* index into the first section's budgets; the same label in every section */
    SizeLink *links;
    int n_links;
    int min_n;
} ReportSizes;
/* Every suite and budget that two models or more ran on shared samples (a model joins the first model of the
 * suite that shares a sample key with it; a suite can thus make several groups); *n = 0 when none. */
int report_sizes(const ReportData *d, ReportSizes **out, int *n, KvErr *err);
void report_sizes_free(ReportSizes *x, int n);

/* The links at one budget of the section. Fails only on allocation. */
int report_ordering(const ReportSection *s, int budget, OrderRelation out[REPORT_N_ORDER], KvErr *err);
const char *report_order_symbol(OrderKind kind);
/* A paired difference read as "higher" / "lower" (the interval excludes 0), or why it says neither. */
const char *report_diff_verdict(const StatsInterval *d, int min_n);
/* The canonical order of aggregations: mean, max, max+prior, then the others (0, 1, 2, 3). */
int report_agg_rank(const char *aggregation);
/* The section's aggregation ablation, paired (s->pairs): for each policy and params that ran with several
 * aggregations at a budget, every later minus every earlier aggregation in the canonical order (max − mean,
 * max+prior − mean, max+prior − max; others after them, by name); then the ladder's steps: every two
 * value-weighted variants one step apart (policy_ladder_step), the farther from Ada-CriticalKV on the left.
 * Fails only on allocation. */
int report_ablation_pairs(ReportSection *s, KvErr *err);

#endif
