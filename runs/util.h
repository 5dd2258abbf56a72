/* util.h — the few system chores of the runner and the report: directories, hashes, the build revision,
 * a monotonic clock. Kept apart so store, sweep and report share one copy of each. */
#ifndef KVBENCH_RUNS_UTIL_H
#define KVBENCH_RUNS_UTIL_H

#include <stddef.h>

#include "../engine/err.h"

/* mkdir -p. */
int util_make_dirs(const char *dir, KvErr *err);
/* Creates the directory that will hold `file` (no-op for a bare file name). */
int util_make_parent_dirs(const char *file, KvErr *err);

/* FNV-1a 64-bit hash of a string (config hashes, shard assignment: the same on every machine). */
unsigned long long util_hash64(const char *text);

/* SHA-256 of a model as lowercase hex: a file's own digest; for a directory (Hugging Face checkpoint) the
 * digest of the `sha256sum` listing of its config.json and *.safetensors files; "synthetic" for a synthetic
 * spec. Runs coreutils' sha256sum, which is much faster on multi-GB files than plain C. */
int util_model_sha256(const char *path, char *out, size_t out_size, KvErr *err);

/* The git revision kvbench was built from (KVBENCH_GIT_REV at compile time), else that of the checkout the
 * executable sits in, else "unknown". */
void util_git_revision(char *out, size_t out_size);

/* Milliseconds from a monotonic clock. */
double util_now_ms(void);

#endif
