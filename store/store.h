/* store.h — the results database (SQLite): runs, samples, one row per sample × variant, report views, and the
 * retained-importance traces of `kvbench trace` (one row per sample × variant × decode step).
 *
 * One transaction per sample (store_write_sample), WAL journal, so a run killed at any moment — kill -9
 * included — leaves only whole samples behind and resumes by skipping them (store_finished). A sample is
 * identified across runs and machines by (model, setup, sample key), a result by its sample and
 * (policy, aggregation, params, budget); shard databases merge on those keys. What made a sample besides its
 * key is its identity: the model's (model_id: weights and tokenizer) and its data's (data_id: data file,
 * assets, generator seed). A database holds one identity per model name and one data identity per (model,
 * setup, suite, task): the runner refuses to add rows of another (store_check_model, store_check_data), and
 * so do store_write_sample and store_merge. Failed rows (with an error) do not count as finished and are
 * replaced by the next attempt. The database is checked (PRAGMA quick_check) when opened. The schema is in
 * store.c and documented in docs/database.md; a database of another schema_version is refused. */
#ifndef KVBENCH_RUNS_STORE_H
#define KVBENCH_RUNS_STORE_H

#include <signal.h>
#include <sqlite3.h>

#include "../engine/err.h"

#define STORE_SCHEMA_VERSION 2

typedef struct Store Store;

/* Opens (creating the file and schema if needed) or, with readonly, opens an existing database without writing
 * to it or its directory (no -wal / -shm files are created: a database on a read-only medium can be read). Either
 * way a damaged database (PRAGMA quick_check) is refused before anything is done with it. */
int store_open(Store **out, const char *path, int readonly, KvErr *err);
void store_close(Store *s);
/* The connection, for the report's queries. */
sqlite3 *store_handle(Store *s);
const char *store_path(const Store *s);

typedef struct {
    const char *config_name, *config_text, *config_hash;
    const char *git_rev;
    const char *model_name, *model_path, *model_id, *tokenizer, *backend;  /* model_id: util_model_identity */
    const char *host;
    const char *shard;        /* "i/N" or NULL */
    int sample_limit;         /* --limit: at most this many samples per task; 0 = all (stored NULL) */
} StoreRun;

int store_begin_run(Store *s, const StoreRun *run, long long *run_id, KvErr *err);
int store_end_run(Store *s, long long run_id, KvErr *err);

/* The identity of one result row within its sample. */
typedef struct {
    const char *policy, *aggregation, *params, *budget;
} StoreVariantKey;

/* The identity the database holds for model name `model` where it differs from model_id: *stored gets it and
 * *stored_path the path of the run that made it; both "" when the database has no rows of another identity. */
int store_check_model(Store *s, const char *model, const char *model_id, char *stored, size_t stored_size,
                      char *stored_path, size_t path_size, KvErr *err);
/* The data identity the database holds for (model, setup, suite, task) where it differs from data_id ("" if none). */
int store_check_data(Store *s, const char *model, const char *setup, const char *suite, const char *task,
                     const char *data_id, char *stored, size_t stored_size, KvErr *err);

/* done[i] = 1 where (model, setup, sample_key, keys[i]) already has a row without an error. */
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
    const char *model_id;       /* the model's identity (util_model_identity); NULL = "" */
    const char *data_id;        /* the task's data identity (dataset_identity); NULL = "" */
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

/* Writes a sample and its results in one transaction; rows already present are left as they are, except failed
 * rows (error set), which a new attempt replaces. While a sample has no successful row its description (token
 * counts, answers, note) is the latest attempt's. Fails, writing nothing, when the database holds the sample
 * under another model or data identity, or cannot be written (disk full, read-only file). */
int store_write_sample(Store *s, long long run_id, const StoreSample *sample, const StoreResult *results,
                       int n_results, KvErr *err);
/* Rows the last successful store_write_sample / store_write_traces added (rows another run had already written,
 * and failed rows replaced in place, are not counted: runs writing one database at once add up to the rows it
 * holds), and the failed rows it replaced (by a success, or by a later failure). */
int store_last_written(const Store *s);
int store_last_replaced(const Store *s);

/* done[i] = 1 where (model, setup, sample_key, keys[i]) already has trace rows. */
int store_traced(Store *s, const char *model, const char *setup, const char *sample_key, const StoreVariantKey *keys,
                 int n_keys, unsigned char *done, KvErr *err);

/* One decode step of one variant's trace (metrics/fragility.h): mean and minimum of R_t over (layer, kv-head)
 * in table traces, and with r_heads every R_t(l, k) in table trace_heads. */
typedef struct {
    StoreVariantKey key;
    int window;                 /* the observation window the keep-set was chosen with (0: none, e.g. full) */
    int step;                   /* 0-based decode step */
    double mean_r, min_r;
    int n_layers, n_kv_heads;
    const float *r_heads;       /* [n_layers][n_kv_heads] or NULL (no trace_heads row) */
} StoreTrace;

/* One variant's keep-set of a traced sample (table trace_sets): its size, and how many prefix entries of it
 * the max+prior prior raised to their head's mean (-1, stored NULL, for other aggregations). */
typedef struct {
    StoreVariantKey key;
    long long kept, clamped_kept;
} StoreTraceSet;

/* Writes a sample, its trace rows and its keep-set rows in one transaction; rows already present are left as
 * they are. */
int store_write_traces(Store *s, long long run_id, const StoreSample *sample, const StoreTrace *rows, int n_rows,
                       const StoreTraceSet *sets, int n_sets, KvErr *err);

/* Copies every run, sample, result and trace of the databases src_paths[n] that `s` does not hold yet (a failed
 * row of `s` is replaced by a source's successful one). All inputs are checked first — readable, undamaged (as
 * store_open), of this schema, and agreeing on identity with `s` and with each other: one model identity per
 * model name, one data identity per (model, setup, suite, task); shards of one configuration always agree — and
 * if any is refused, nothing is copied. Sources are only read (read-only, immutable without a write-ahead log). */
int store_merge(Store *s, const char *const *src_paths, int n, KvErr *err);

/* store_merge into the database out_path, opened or created; a new one is created only when the merge succeeds
 * (a refused, failed or interrupted merge leaves no file, nor its -wal / -shm). */
int store_merge_into(const char *out_path, const char *const *src_paths, int n, KvErr *err);

typedef struct {
    /* When non-NULL, a merge stops (failing with "interrupted") soon after *stop becomes non-zero: at SQLite's next
     * progress callback, or between inputs. `kvbench merge` sets it from its SIGINT / SIGTERM / SIGHUP handler. */
    volatile sig_atomic_t *stop;
    double pause_ms; /* waits this long before copying each input (0: none), so a test can interrupt a merge mid-way */
} StoreMergeOptions;

/* store_merge_into with options (NULL: none). */
int store_merge_into_with(const char *out_path, const char *const *src_paths, int n, const StoreMergeOptions *opt,
                          KvErr *err);

/* Describes how identity `now` differs from `was` (comma-separated key=value lists): the first pair that
 * differs, "seed=42 -> seed=7", or both whole when they are not such lists. */
void store_identity_change(const char *was, const char *now, char *out, size_t size);

#endif
