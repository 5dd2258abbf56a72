/* store.h — the results database (SQLite): runs, samples, one row per sample × variant, report views, and the
 * retained-importance traces of `kvbench trace` (one row per sample × variant × decode step).
 *
 * One transaction per sample (store_write_sample), WAL journal, so a run killed at any moment — kill -9
 * included — leaves only whole samples behind and resumes by skipping them (store_finished). A sample is
 * identified across runs and machines by (model, setup, sample key), a result by its sample and
 * (policy, aggregation, params, budget); shard databases merge on those keys. The schema is in store.c and
 * documented in configs/README.md; a database of another schema_version is refused. */
#ifndef KVBENCH_RUNS_STORE_H
#define KVBENCH_RUNS_STORE_H

#include <sqlite3.h>

#include "../engine/err.h"

#define STORE_SCHEMA_VERSION 1

typedef struct Store Store;

/* Opens (creating the file and schema if needed) or, with readonly, opens an existing database. */
int store_open(Store **out, const char *path, int readonly, KvErr *err);
void store_close(Store *s);
/* The connection, for the report's queries. */
sqlite3 *store_handle(Store *s);
const char *store_path(const Store *s);

typedef struct {
    const char *config_name, *config_text, *config_hash;
    const char *git_rev;
    const char *model_name, *model_path, *model_sha256, *tokenizer, *backend;
    const char *host;
    const char *shard;        /* "i/N" or NULL */
} StoreRun;

int store_begin_run(Store *s, const StoreRun *run, long long *run_id, KvErr *err);
int store_end_run(Store *s, long long run_id, KvErr *err);

/* The identity of one result row within its sample. */
typedef struct {
    const char *policy, *aggregation, *params, *budget;
} StoreVariantKey;

/* done[i] = 1 where (model, setup, sample_key, keys[i]) already has a row. */
int store_finished(Store *s, const char *model, const char *setup, const char *sample_key, const StoreVariantKey *keys,
                   int n_keys, unsigned char *done, KvErr *err);

typedef struct {
    const char *model, *setup, *sample_key;
    const char *suite, *task, *domain, *metric;
    int index;
    double depth_percent;       /* < 0: not a needle sample */
    int target_tokens;
    int context_tokens, question_tokens;
    const char *answers_json;   /* JSON array of the reference answers */
    const char *note;           /* may be NULL */
    int over_length;            /* context + question + max new tokens exceed the model's trained context length */
} StoreSample;

typedef struct {
    StoreVariantKey key;
    double keep_fraction;       /* 0 for token budgets */
    int budget_tokens;          /* nominal entries per (layer, kv-head) */
    double kept_tokens;         /* entries actually kept, averaged over (layer, kv-head) */
    const char *prediction;     /* NULL when failed */
    double score;               /* ignored when failed */
    int generated_tokens;
    double prefill_ms, select_ms, decode_ms;
    const char *error;          /* NULL unless the variant failed */
    double kept_fraction;       /* entries kept / (layers x kv-heads x context tokens): the effective budget
                                 * (NULL in the database when failed or unknown, i.e. <= 0 here) */
} StoreResult;

/* Writes a sample and its results in one transaction; rows already present are left as they are.
 * On failure (disk full, read-only file) nothing of this sample is written. */
int store_write_sample(Store *s, long long run_id, const StoreSample *sample, const StoreResult *results,
                       int n_results, KvErr *err);

/* done[i] = 1 where (model, setup, sample_key, keys[i]) already has trace rows. */
int store_traced(Store *s, const char *model, const char *setup, const char *sample_key, const StoreVariantKey *keys,
                 int n_keys, unsigned char *done, KvErr *err);

/* One decode step of one variant's trace (metrics/fragility.h): mean and minimum of R_t over (layer, kv-head). */
typedef struct {
    StoreVariantKey key;
    int window;                 /* the observation window the keep-set was chosen with (0: none, e.g. full) */
    int step;                   /* 0-based decode step */
    double mean_r, min_r;
} StoreTrace;

/* Writes a sample and its trace rows in one transaction; rows already present are left as they are. */
int store_write_traces(Store *s, long long run_id, const StoreSample *sample, const StoreTrace *rows, int n_rows,
                       KvErr *err);

/* Copies every run, sample, result and trace of the database at src_path that `s` does not hold yet. */
int store_merge(Store *s, const char *src_path, KvErr *err);

#endif
