/* datacheck.h — every input a sweep configuration names, checked in seconds and before any model loads:
 * `kvbench data check CONFIG.json`, and the first thing `kvbench run` and `kvbench trace` do.
 *
 * Checked, all of them, every problem listed (not just the first): the environment variables of the paths
 * (each unset one), the config's keys and values (config.c), each model path (a GGUF's header and metadata, a
 * Hugging Face directory's config.json, tokenizer and safetensors shard headers — read, never the weights; an
 * index that names no shard), a separate tokenizer, the backend being in this build, "chat_template" against
 * the model's template, every task of every dataset opened exactly as the run opens it (LongBench task files in
 * a directory or data.zip members, RULER's SQuAD / HotpotQA files, the needle haystack and other assets) and
 * its first sample built, and the database's directory. A RULER qa task without its SQuAD / HotpotQA file runs
 * as the labelled substitute: a warning, not a problem. Lengths are counted in whitespace words here (fast);
 * the run counts tokens. With `estimate`, the modelled H200 time and memory of each model (runs/estimate.h). */
#ifndef KVBENCH_RUNS_DATACHECK_H
#define KVBENCH_RUNS_DATACHECK_H

#include <stdio.h>

typedef struct {
    FILE *out;          /* one line per problem and warning ("problem: ...", "warning: ..."), and the rest */
    int list_ok;        /* also a line per input found good */
    int estimate;       /* also the modelled GPU estimate per model (counts every LongBench sample's length) */
    const char *db;     /* the database the run will use (--db), checked instead of the config's "db"; NULL: the
                           config's */
    int trace;          /* for `kvbench trace`: the config needs its "trace" section */
    const char *assets_dir; /* the datasets' assets (util_assets_dir) */
} DataCheckOptions;

typedef struct {
    int problems;       /* inputs that stop or spoil the run: it must not start */
    int warnings;       /* e.g. a RULER qa task as the labelled substitute */
} DataCheckResult;

/* Checks the configuration file at config_path; res says what was found. */
void datacheck_config(const char *config_path, const DataCheckOptions *opt, DataCheckResult *res);

#endif
