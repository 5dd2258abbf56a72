/* metrics.h — the benchmark scorers, each matching its reference implementation on recorded cases:
 * LongBench's metrics.py (qa_f1, rouge_l via the `rouge` package, classification, retrieval, count,
 * code_sim via fuzzywuzzy), RULER's string_match_all / string_match_part, the needle score.
 * Spec: ../shared/spec/datasets.md §1.6, §2.6, §3. */
#ifndef KVBENCH_METRICS_H
#define KVBENCH_METRICS_H

#include "../engine/err.h"

/* Scores one prediction against its answers, as the reference does for the task (the max over answers where
 * the reference takes it, the first-line rule for trec / triviaqa / samsum when `task` is one of them).
 * task may be NULL. all_classes is used by classification. Result in [0, 1] (LongBench scale / 100). */
int metric_score(const char *metric, const char *task, const char *prediction, const char *const *answers,
                 int n_answers, const char *const *all_classes, int n_classes, double *score, KvErr *err);

/* Whether a metric name is known; comma-separated list of names. */
int metric_known(const char *metric);
const char *metric_names(void);

#endif
