/* scorers.h — the two LongBench scorers that are whole algorithms of their own (internal to metrics/):
 * Rouge-L of the `rouge` package 1.0.1 (rouge.c) and fuzzywuzzy's fuzz.ratio over difflib (fuzz.c). */
#ifndef KVBENCH_METRICS_SCORERS_H
#define KVBENCH_METRICS_SCORERS_H

#include "text.h"

/* The longest chain of recursive _recon calls the reference survives (see rouge.c). */
#define ROUGE_RECON_MAX_CALLS 991

/* Rouge().get_scores([hyp], [ref], avg=True)["rouge-l"]["f"], with LongBench's "any exception → 0". */
int rouge_l_f(USpan hyp, USpan ref, double *f, KvErr *err);

/* fuzzywuzzy 0.18 fuzz.ratio(a, b) without python-Levenshtein: round(100 * difflib ratio), 0..100. */
int fuzz_ratio(USpan a, USpan b, int *ratio, KvErr *err);

#endif
