/* dataset.h — every benchmark suite yields the same Sample (LongBench v1, RULER-4K, Needle-in-a-Haystack).
 *
 * A suite is opened for one task with options, then yields samples by index. Token counting (RULER's target
 * length, LongBench's middle truncation, `data show --model`) goes through a caller-given function, so this
 * module does not depend on the engine. A Dataset is used by one thread at a time (dataset_get keeps the last
 * fitted size as the next search's starting point). Assets (prompt halves, essays, word lists, templates) are
 * read from datasets/assets/ (see DatasetOptions.assets_dir). Spec: docs/spec/datasets.md. */
#ifndef KVBENCH_DATASET_H
#define KVBENCH_DATASET_H

#include <stddef.h>

#include "../engine/err.h"

typedef struct {
    char *id;              /* stable across runs and subsets: "longbench:multi_news:17" (17 = 0-based line of the
                              file), "ruler:niah_single_1:3" (3 = generated row), "niah:needle:L4096:d33" */
    char *suite;           /* "longbench" | "ruler" | "niah" */
    char *task;            /* e.g. "multi_news"; "qa_1_substitute" / "qa_2_substitute" when RULER's QA sources
                              were not given and the labelled substitute ran */
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
    const char *data_path;     /* LongBench: a directory of TASK.jsonl files or LongBench's data.zip (read in
                                  place); RULER qa_1 / qa_2: a SQuAD v2 dev / HotpotQA dev file or a directory
                                  holding squad.json|dev-v2.0.json / hotpotqa.json|hotpot_dev_distractor_v1.json
                                  (without it a labelled substitute runs); NIAH: unused (shipped essays) */
    const char *assets_dir;    /* the project's datasets/assets (the runner passes util_assets_dir's); NULL =
                                * "datasets/assets" of the current directory */
    double fraction;           /* take round(fraction * n) rows per task (0 = all) in the order pandas'
                                  sample(frac, random_state=seed) picks them (seed < 2^32) */
    int first_n;               /* then at most the first N (0 = all) */
    unsigned long long seed;   /* subsets, and RULER's generator */
    int target_tokens;         /* RULER context length (default 4096, minus the task's tokens to generate);
                                  NIAH: the one context length when `lengths` is NULL (default 4096);
                                  LongBench: middle-truncate context + question to this (0 = none, as the
                                  reference) */
    int n_samples;             /* RULER: samples per task (default 500); others: unused */
    const double *depths;      /* NIAH depth grid in percent (NULL = default grid) */
    int n_depths;
    const int *lengths;        /* NIAH context lengths in tokens (NULL = target_tokens) */
    int n_lengths;
    int skip_bad_lines;        /* LongBench: skip malformed JSONL lines (counted) instead of failing */
    int ruler_unit_sizing;     /* RULER: grow the line haystacks and qa one line / document at a time (the current
                                  RULER's search) instead of the late-2024 RULER's coarse steps the reference data
                                  was made with (0, the default: the reference's sizing) */
    TokenCountFn count_tokens; /* required for RULER, NIAH and truncation */
    void *count_user;
} DatasetOptions;

typedef struct Dataset Dataset;

/* spec: "SUITE:TASK", e.g. "longbench:multi_news", "ruler:niah_multikey_3", "niah:needle". */
int dataset_open(Dataset **out, const char *spec, const DatasetOptions *opt, KvErr *err);
int dataset_count(const Dataset *ds);
/* Fills *out (caller frees with sample_free; on failure *out holds nothing to free). */
int dataset_get(Dataset *ds, int index, Sample *out, KvErr *err);
/* The id that sample `index` has (Sample.id), without building it: planners and shards key on ids, and a RULER /
 * NIAH sample costs token counting to build. */
int dataset_sample_id(const Dataset *ds, int index, char *out, size_t size, KvErr *err);
/* What decides a sample's text besides its id (which already names the task, the file line / generated row /
 * grid cell, and the runner appends the target length): fingerprints of the data file and the assets read,
 * and the generator's seed, as comma-separated key=value pairs, e.g. "seed=42,assets=1f..,qa=substitute".
 * Two datasets of one task with equal identities give equal samples for equal ids (with the same token
 * counter); subset options (fraction, first_n and their seed) only choose ids, so they are not part of it. */
void dataset_identity(const Dataset *ds, char *out, size_t size);
/* Lines skipped as malformed (skip_bad_lines). */
int dataset_skipped(const Dataset *ds);
void dataset_close(Dataset *ds);

/* Prints every suite and task with its metric and max new tokens (`kvbench data list`). */
void dataset_print_list(void *file /* FILE* */);
/* Whether "SUITE:TASK" names a known task (for config validation before any work starts). */
int dataset_task_known(const char *spec, KvErr *err);

#endif
