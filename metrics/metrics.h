/* metrics.h — the benchmark scorers, each matching its reference implementation on recorded cases:
 * LongBench's metrics.py (qa_f1, rouge_l via the `rouge` package, classification, retrieval, count,
 * code_sim via fuzzywuzzy over difflib), RULER's string_match_all / string_match_part, the needle score.
 * Spec: docs/spec/datasets.md §1.6, §2.6, §3. Recorded cases: tests/data/metrics/ (from
 * tests/reference/gen_metric_cases.py).
 *
 * Scale: metric_score gives one sample's score in [0, 1]; the task averages below are on the references'
 * 0–100 scale, rounded as they round. Text is UTF-8; invalid UTF-8 is scored as Python sees the same bytes
 * decoded with errors="replace" (each invalid sequence one U+FFFD), so any prediction can be scored. */
#ifndef KVBENCH_METRICS_H
#define KVBENCH_METRICS_H

#include "../engine/err.h"

/* Scores one prediction against its answers, as the reference does for the task:
 *   LongBench metrics: the first-line rule for trec / triviaqa / samsum / lsht (prediction.lstrip("\n")
 *     .split("\n")[0]), then the max over answers (from 0);
 *   string_match_all / string_match_part (RULER): the prediction stripped, its \x00-\x1f removed, stripped
 *     again; the fraction of answers found case-insensitively / 1 if any is found;
 *   needle: the best over answers of |set(pred.lower().split()) ∩ E| / |E|, E = set(answer.lower().split()).
 * task may be NULL. all_classes is required by classification. At least one answer is required, and every
 * answer, the prediction and every class must be non-NULL; retrieval answers must contain "Paragraph N";
 * needle answers must have a word. Otherwise -1 with a message naming the problem. */
int metric_score(const char *metric, const char *task, const char *prediction, const char *const *answers,
                 int n_answers, const char *const *all_classes, int n_classes, double *score, KvErr *err);

/* Whether a metric name is known; comma-separated list of names. */
int metric_known(const char *metric);
const char *metric_names(void);

/* A task's score from its samples' metric_score values, as the reference computes it (0–100 scale):
 * LongBench round(100 * sum / n, 2), RULER round(sum / n * 100, 2), needle the plain mean × 100 (the heat
 * map cells are means of it). Sums run in sample order; round is Python's (correctly rounded, half even). */
int metric_task_average(const char *metric, const double *scores, int n, double *average, KvErr *err);

/* Domain and suite averages (LongBench per domain / overall, RULER overall): the plain mean of the task
 * scores, unrounded, as DefensiveKV's results/statistic.py. n must be > 0. */
double metric_mean(const double *task_scores, int n);

/* Python's round(x, 2). */
double metric_round2(double x);

#endif
