/* dataset.h — every benchmark suite yields the same Sample (LongBench v1, RULER-4K, Needle-in-a-Haystack).
 *
 * A suite is opened for one task with options, then yields samples by index. Token counting (RULER's target
 * length, LongBench's middle truncation, `data show --model`) goes through a caller-given function, so this
 * module does not depend on the engine. Spec: ../shared/spec/datasets.md. */
#ifndef KVBENCH_DATASET_H
#define KVBENCH_DATASET_H

#include <stddef.h>

#include "../engine/err.h"

typedef struct {
    char *id;              /* stable across runs: "longbench:multi_news:17", "ruler:niah_single_1:3", ... */
    char *suite;           /* "longbench" | "ruler" | "niah" */
    char *task;            /* e.g. "multi_news" */
    int index;             /* position within the task after subsetting */
    char *context;         /* the text that is prefilled and compressed */
    char *question;        /* fed after compression (never compressed, spec policies.md §4.3) */
    char *answer_prefix;   /* appended after the chat template's question suffix ("" if none) */
    char **answers;        /* reference answers */
    int n_answers;
    char **all_classes;    /* classification tasks (trec, lsht); else NULL */
    int n_classes;
    int max_new_tokens;
    char *metric;          /* metrics/ name: qa_f1, rouge_l, classification, retrieval, count, code_sim,
                              string_match_all, string_match_part, needle */
    int use_chat;          /* render with the model's chat template (LongBench: not for the 6 no-chat tasks) */
    int add_bos;           /* without chat: prefix BOS (LongBench reference: no) */
    char *stop_on_newline; /* non-NULL ("\n") where generation also stops at a newline (samsum) */
    char *domain;          /* LongBench domain (single-doc QA, ...), RULER category, or "needle" */
    double depth_percent;  /* NIAH only; else -1 */
    int target_tokens;     /* RULER / NIAH target length; 0 otherwise */
    char *note;            /* e.g. "substitute qa data (no SQuAD path given)"; NULL if none */
} Sample;

void sample_free(Sample *s);

/* Counts the tokens of text; 0 on success. The runner passes the model's tokenizer (no special tokens added).
 * Token budgets are met by searching sizes with this function alone (RULER / NIAH haystack sizes, LongBench's
 * middle truncation by bisection over character positions), so no offsets callback is needed. */
typedef int (*TokenCountFn)(void *user, const char *text, int *n_tokens, KvErr *err);

/* A TokenCountFn that counts whitespace-separated words (tests; `data show` without a model). */
int dataset_count_words(void *user, const char *text, int *n_tokens, KvErr *err);

typedef struct {
    const char *data_path;     /* LongBench: a directory of JSONL files or data.zip; RULER: optional SQuAD /
                                  HotpotQA directory; NIAH: unused (shipped essays) */
    const char *assets_dir;    /* the project's datasets/assets (essays, word lists, configs); NULL = default */
    double fraction;           /* take this fraction per task (0 = all), drawn with `seed` */
    int first_n;               /* or the first N (0 = all) */
    unsigned long long seed;
    int target_tokens;         /* RULER / NIAH context length; LongBench: middle-truncate to this (0 = none) */
    int n_samples;             /* RULER: samples to generate per task; NIAH: unused */
    const double *depths;      /* NIAH depth grid in percent (NULL = default grid) */
    int n_depths;
    const int *lengths;        /* NIAH context lengths in tokens (NULL = target_tokens) */
    int n_lengths;
    int skip_bad_lines;        /* LongBench: skip malformed JSONL lines (counted) instead of failing */
    TokenCountFn count_tokens; /* required for RULER, NIAH and truncation */
    void *count_user;
} DatasetOptions;

typedef struct Dataset Dataset;

/* spec: "SUITE:TASK", e.g. "longbench:multi_news", "ruler:niah_multikey_3", "niah:needle". */
int dataset_open(Dataset **out, const char *spec, const DatasetOptions *opt, KvErr *err);
int dataset_count(const Dataset *ds);
/* Fills *out (caller frees with sample_free). */
int dataset_get(Dataset *ds, int index, Sample *out, KvErr *err);
/* Lines skipped as malformed (skip_bad_lines). */
int dataset_skipped(const Dataset *ds);
void dataset_close(Dataset *ds);

/* Prints every suite and task with its metric and max new tokens (`kvbench data list`). */
void dataset_print_list(void *file /* FILE* */);
/* Whether "SUITE:TASK" names a known task (for config validation before any work starts). */
int dataset_task_known(const char *spec, KvErr *err);

#endif
