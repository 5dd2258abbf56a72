/* ds_internal.h — what the suites of datasets/ share and the public contract does not show: the suite table
 * dataset.c dispatches through, a growable string that reports allocation failure once at the end, template
 * filling, asset paths, token counting through the caller's callback, the size search that fits a generated
 * text to a token budget, and the seeded generators (ours for synthesis, numpy's legacy one for pandas subsets).
 * Suites: longbench.c, ruler.c, niah.c; shared code: ds_util.c, rng.c. */
#ifndef KVBENCH_DS_INTERNAL_H
#define KVBENCH_DS_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "dataset.h"

/* ---- the suite table (one row per suite, chosen by the SUITE part of "SUITE:TASK") ---- */
typedef struct {
    const char *name;
    int (*open)(void **state, const char *task, const DatasetOptions *opt, KvErr *err);
    int (*count)(const void *state);
    int (*get)(void *state, int index, Sample *out, KvErr *err);
    /* Sample.id of sample index without building the sample (index already range-checked). */
    void (*sample_id)(const void *state, int index, char *out, size_t size);
    /* dataset_identity: what else decides a sample's text (data files, generator parameters) */
    void (*identity)(const void *state, char *out, size_t size);
    int (*skipped)(const void *state);
    void (*close)(void *state);
    int (*task_known)(const char *task);
    void (*print_list)(FILE *f);
} SuiteOps;

extern const SuiteOps LONGBENCH_SUITE, RULER_SUITE, NIAH_SUITE;

/* ---- growable string: appends after an allocation failure are ignored; sb_finish reports it ---- */
typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} StrBuf;

void sb_add(StrBuf *b, const char *s, size_t n);
void sb_adds(StrBuf *b, const char *s);
void sb_addf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns the NUL-terminated string (caller frees) or NULL with err set; the buffer is reset either way. */
char *sb_finish(StrBuf *b, KvErr *err);
void sb_free(StrBuf *b);

/* ---- strings ---- */
char *ds_strdup(const char *s, KvErr *err);
char *ds_strndup(const char *s, size_t n, KvErr *err);
/* Copies n strings into a malloc'd array of malloc'd strings (NULL when n == 0). */
int ds_strv_dup(char ***out, const char *const *v, int n, KvErr *err);
void ds_strv_free(char **v, int n);
/* Replaces each "{name}" of names[] in tmpl by values[] in one left-to-right pass, so braces inside the
 * values (LongBench code and text contain them) are never substituted again. */
char *ds_fill(const char *tmpl, int n, const char *const *names, const char *const *values, KvErr *err);
/* Whether s[0..n) is valid UTF-8; on failure *bad receives the offset of the first bad byte. */
int ds_utf8_valid(const char *s, size_t n, size_t *bad);

/* ---- identity ---- */
#define DS_HASH_INIT 1469598103934665603ULL
/* FNV-1a 64 of n bytes continued from h (start with DS_HASH_INIT): fingerprints of data files and assets
 * (dataset_identity), not a defence against tampering. */
uint64_t ds_hash(uint64_t h, const void *p, size_t n);
/* The same over a string and its terminating NUL, so consecutive strings cannot run into each other. */
uint64_t ds_hash_str(uint64_t h, const char *s);
/* Continues *h over the bytes of assets_dir/rel. */
int ds_hash_asset(uint64_t *h, const char *assets_dir, const char *rel, KvErr *err);

/* ---- assets and JSON ---- */
/* opt->assets_dir (the runner's, runs/util.h util_assets_dir: $KVBENCH_ASSETS among its places), else
 * "datasets/assets" of the current directory. */
const char *ds_assets_dir(const DatasetOptions *opt);
/* Reads and parses assets_dir/rel; the caller frees with cJSON_Delete. */
struct cJSON *ds_load_json(const char *assets_dir, const char *rel, KvErr *err);
/* Object member that must be a string; NULL with err naming what and where otherwise. */
const char *ds_json_str(const struct cJSON *obj, const char *key, const char *where, KvErr *err);

/* ---- subsets ---- */
/* Sample rows of a task of n: with opt->fraction the first round(fraction*n) of numpy's
 * RandomState(seed).permutation(n) (= pandas' sample(frac, random_state=seed), in pandas' order), else all
 * in order; then at most opt->first_n. *rows is malloc'd. */
int ds_subset_rows(int n, const DatasetOptions *opt, int **rows, int *n_rows, KvErr *err);

/* ---- token counting and fitting ---- */
int ds_count_tokens(const DatasetOptions *opt, const char *text, int *n, KvErr *err);

/* Builds the text for a size and counts its tokens (the suite's generator behind the size search). */
typedef int (*SizeProbeFn)(void *ctx, int size, int *n_tokens, KvErr *err);

/* Largest size in {base + m*step : m >= 0, size <= max_size} whose probe stays within budget tokens, found by
 * bracketing from hint (the previous sample's answer, 0 if none) and bisection, so a sample costs a handful
 * of probes. Fails, naming what, when even `base` does not fit: the target is shorter than the template. */
int ds_fit_size(SizeProbeFn probe, void *ctx, int base, int step, int max_size, int budget, int hint,
                int *size_out, const char *what, KvErr *err);

/* ---- generators ---- */
typedef struct {
    uint64_t s[4];
} Rng;

/* xoshiro256** seeded by splitmix64 from (seed, stream name, index): each sample is reproducible alone. */
void rng_seed(Rng *r, uint64_t seed, const char *stream, uint64_t index);
uint64_t rng_next(Rng *r);
/* Uniform in [0, n), n > 0, by rejection (no modulo bias). */
uint64_t rng_below(Rng *r, uint64_t n);
void rng_shuffle(Rng *r, int *a, int n);
/* k distinct values of [0, n) in draw order (k small: rejection with a linear duplicate check). */
void rng_distinct(Rng *r, int n, int k, int *out);

/* numpy's RandomState(seed).permutation(n) (MT19937, legacy bounded draws), which pandas'
 * DataFrame.sample(frac, random_state=seed) takes the first round(frac*n) entries of. */
int np_legacy_permutation(uint32_t seed, int n, int *out, KvErr *err);

#endif
