/* config.h — a sweep configuration (configs/NAME.json): models × datasets × policy variants.
 *
 * Everything is validated while loading — unknown keys, wrong types, unknown policies, aggregations or tasks,
 * budgets out of range, unset environment variables in paths — so a bad config fails with one line naming the
 * file and the key before any model is loaded. The schema is documented in configs/README.md.
 * A variant is one (policy, aggregation, budget) cell of the sweep; `full` is budget-independent and appears
 * once. Shape legend: none (no tensors here). */
#ifndef KVBENCH_RUNS_CONFIG_H
#define KVBENCH_RUNS_CONFIG_H

#include "../engine/backend.h"
#include "../engine/err.h"
#include "../policies/policy.h"

#define CONFIG_MAX_WINDOWS 8  /* observation windows one policy entry may list */
/* Most samples one decode batch may hold ("decode_samples", --decode-samples). */
#define CONFIG_MAX_DECODE_SAMPLES 4096

typedef struct {
    char *path;       /* GGUF file, HF directory or synthetic spec, ${VAR} expanded */
    char *name;       /* the key results are stored under (default: last path component) */
    char *backend;    /* "cpu" (default) or "cuda" */
    char *tokenizer;  /* optional separate tokenizer (needed by synthetic models), ${VAR} expanded */
    char *duo_patterns; /* "duo_attention_patterns": a DuoAttention pattern folder (${VAR} expanded), "none"
                         * (duoattention is N/A for this model: its cells are skipped), or NULL = the shipped
                         * pattern matched by name or path (policies/duo.h) */
    char *cpu[BACKEND_N_OPTIONS]; /* "cpu": {"decode", "cache", "simd", "fast_kernel"}: this model's backend
                                   * options (NULL: absent), below the command line's flags and above the
                                   * environment (runs/util.h util_backend_options) */
} RunModel;

/* A dataset's "chat_template": the suite's own prompt protocol (key absent), or every sample rendered with the
 * model's chat template (true) or as a plain prompt (false). Zero is "absent", so a zeroed RunDataset keeps
 * the suite's protocol. */
typedef enum { RUN_CHAT_SUITE = 0, RUN_CHAT_ON, RUN_CHAT_OFF } RunChat;

typedef struct {
    char *suite;                 /* "longbench" | "ruler" | "niah" */
    char **tasks;                /* task names within the suite */
    int n_tasks;
    char *data_path;             /* NULL if not given */
    double fraction;             /* 0 = all */
    int first_n;                 /* 0 = all */
    unsigned long long seed;
    int target_tokens;
    int n_samples;
    double *depths;              /* NIAH grid, NULL = the suite's default */
    int n_depths;
    int *lengths;
    int n_lengths;
    int skip_bad_lines;
    int ruler_unit_sizing;       /* "ruler_sizing": "unit" (DatasetOptions.ruler_unit_sizing); "reference" or absent: 0 */
    RunChat chat;                /* "chat_template": overrides Sample.use_chat of every sample */
} RunDataset;

typedef struct {
    PolicyConfig policy;         /* resolved: canonical name and aggregation */
    Budget budget;
    char budget_label[32];       /* "20%", "512tok", or "full" */
    char params[192];            /* "w=32,k=5" (+",intended", +",ties=unclamped", + the ladder steps that differ
                                  * from the policy's own, policy_params_text): settings that change the keep-set */
} RunVariant;

typedef struct {
    char *file;                  /* the path it was read from */
    char *text;                  /* the file's bytes, stored with every run */
    char *name;                  /* "name" or the file's base name */
    char *db;                    /* default database path ("db" key), NULL if absent */
    RunModel *models;
    int n_models;
    RunDataset *datasets;
    int n_datasets;
    RunVariant *variants;        /* policies × aggregations × budgets, duplicates removed */
    int n_variants;
    int compress_question;       /* compress context and question together (policies.md §1.1) */
    int max_new_tokens;          /* caps every task's max new tokens; 0 = the task's own */
    int trace_steps;             /* "trace": {"steps"}: decode steps `kvbench trace` records; 0 = no trace section */
    int trace_importance;        /* "trace": {"importance"}: an Importance (metrics/fragility.h), default attention */
    int stop_any_token;          /* "stop_rule": "any_token" (GEN_STOP_ANY_TOKEN); 0 = "reference" (the default) */
    int over_length_error;       /* "over_length": "error" fails a sample longer than the model's trained context;
                                  * 0 = "run" (the default, as the reference): it runs, flagged in samples.over_length */
    double memory_limit;         /* "memory_limit": bytes for a sample's prefill cache and its variants as they decode
                                  * (runs/memplan.h), e.g. "8GiB"; 0 = no limit beyond the device's. Rows are the same
                                  * under any limit (only the number of decode batches changes), so it is no part of
                                  * their setup */
    int decode_samples;          /* "decode_samples": most samples whose variants decode as one batch where the memory
                                  * holds them (runs/sweep.h); 0 = 1, each sample alone. Rows are the same (a
                                  * sequence's arithmetic does not depend on its batch): no part of their setup */
} RunConfig;

int config_load(RunConfig *cfg, const char *path, KvErr *err);
/* Parses config text; `file` names it in error messages. */
int config_parse(RunConfig *cfg, const char *file, const char *text, KvErr *err);
void config_free(RunConfig *cfg);

/* DuoAttention per model. config_duo_na: the config runs duoattention and the model's "duo_attention_patterns" is
 * "none" (its cells are N/A, skipped). config_variant_runs: variant v runs for model m (not an N/A duoattention
 * cell). config_duo_pattern_dir: 1 with dir set when the config runs duoattention and the model has a pattern (its
 * own folder, or the shipped one its name or path names); 0 when no duoattention runs for it; -1, naming what is
 * missing, when one should and there is none. */
int config_duo_na(const RunConfig *cfg, const RunModel *m);
int config_variant_runs(const RunConfig *cfg, const RunModel *m, int v);
int config_duo_pattern_dir(const RunConfig *cfg, const RunModel *m, char *dir, size_t n, KvErr *err);

/* Expands ${NAME} references from the environment into a malloc'd string; an unset variable is an error. */
char *config_expand_env(const char *text, KvErr *err);

#endif
