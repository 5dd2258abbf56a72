/* sweep.h — runs a configuration into a results database: models × tasks × samples, and per sample one
 * prefill shared by every policy variant, whose compressed caches then decode together in as few batches as fit
 * the memory (docs/DESIGN.md §1, runs/memplan.h), or, with decode_samples > 1, beside the variants of other samples
 * in one batch, so a step reads the weights once for several samples; the rows are the same either way. The plan
 * is the expansion minus the rows the database already holds, so a killed run resumes where it stopped; a failing
 * sample becomes failed rows and the run goes on. Runs that share a database share its samples: each claims a
 * sample before computing it (store/claims.h), skips those another live run holds, and at the end waits until
 * that run has stored them (or its claim lapses). */
#ifndef KVBENCH_RUNS_SWEEP_H
#define KVBENCH_RUNS_SWEEP_H

#include <stdio.h>

#include "../engine/backend.h"
#include "../engine/err.h"
#include "config.h"

typedef struct {
    const char *db_path;
    const char *assets_dir; /* the datasets' assets (util_assets_dir) */
    int limit;            /* the first N samples of each task, before sharding (so the shards of a limited
                             run together hold exactly the unsharded run's samples); 0 = all */
    int shard_index;      /* this process runs the samples whose key hashes to shard_index mod shard_count */
    int shard_count;      /* 0 or 1: no sharding */
    FILE *log;            /* progress and log lines */
    int progress_line;    /* redraw one progress line (a terminal) instead of a line per sample */
    int trace;            /* kvbench trace: retained-importance traces (runs/trace.h, config "trace" section) into
                           * the traces table instead of predictions and scores */
    double memory_limit;  /* --memory-limit: bytes for a sample's prefill cache and its variants while they decode
                           * (runs/memplan.h); overrides the config's "memory_limit"; 0 = that, or none */
    int decode_samples;   /* --decode-samples: most samples whose variants decode as one batch (the decode pool),
                           * where the memory holds them; overrides the config's "decode_samples"; 0 = that, or 1 */
    const char *backend_flags[BACKEND_N_OPTIONS]; /* the command line's --decode, --cache, --simd, --fast-kernel
                             * (NULL: not given); each model's backend is asked for these over its config's "cpu"
                             * options and the environment (runs/util.h util_backend_options); its rows' setups
                             * name what the backend reports it used (backend_options_used) */
} SweepOptions;

typedef struct {
    int samples_planned, samples_done;
    int samples_failed;   /* samples every pending variant of which failed */
    int samples_elsewhere; /* planned samples another run on the same database computed (store/claims.h): not
                            * computed here, not in samples_done */
    long rows_written;    /* rows this run added to the database: rows another run wrote first are not counted,
                           * so concurrent runs add up to the rows stored */
    long rows_replaced;   /* failed rows this run replaced in place (a retry) */
    long rows_failed;     /* variants that failed in this run (stored with their error; traces: not traced) */
    long prefill_tokens, decode_tokens;
    double prefill_ms, decode_ms, wall_ms;
    double select_ms;     /* policy time: each policy state's observation once (shared by its budgets), plus
                           * every keep-set's selection and cache gather (a row's select_ms counts its policy's
                           * observation again for each budget) */
    long decode_batches;  /* decode batches of all samples (runs/memplan.h: as few as fit the memory) */
    int samples_split;    /* samples whose variants decoded in more than one batch */
    double sample_cpu_ms; /* CPU time of the process (all threads) from each sample's tokens to its scores:
                           * prefill, policies, question feed and decode */
} SweepStats;

/* Parses "i/N" with 0 <= i < N. */
int sweep_parse_shard(const char *text, int *index, int *count, KvErr *err);

/* Returns 0 when every planned sample was processed (failed samples included: stats->rows_failed counts them),
 * -1 on a fatal error (the database cannot be written, a model cannot be loaded, the database holds rows of
 * this model name or task made from other inputs); rows written before it stay. A database that does not exist
 * yet is created for the first sample written, or at the end of a run that had nothing to do; a run that fails
 * before its first sample leaves none. stats may be NULL. */
int sweep_run(const RunConfig *cfg, const SweepOptions *opt, SweepStats *stats, KvErr *err);

#endif
