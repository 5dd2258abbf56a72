/* util.h — the few system chores of the runner and the report: directories, hashes, the build revision,
 * a monotonic clock. Kept apart so store, sweep and report share one copy of each. */
#ifndef KVBENCH_RUNS_UTIL_H
#define KVBENCH_RUNS_UTIL_H

#include <stddef.h>

#include "../engine/backend.h"
#include "../engine/err.h"

/* The backend options of a command: the environment's KVBENCH_DECODE (exact | fast), KVBENCH_CACHE
 * (f32 | f16), KVBENCH_SIMD (scalar | avx2 | avx512) and KVBENCH_FAST_KERNEL (scalar | avx2 | vnni | amx),
 * each a fallback for its default. The one place kvbench reads them: the engine takes BackendOptions only. */
int util_backend_options(BackendOptions *o, KvErr *err);

/* The folder of the datasets' assets (RULER templates, LongBench prompts, needle haystacks): $KVBENCH_ASSETS, else
 * datasets/assets of the current directory, else datasets/assets beside the kvbench binary (/proc/self/exe); when
 * none exists, err says to run from the repository root or to set KVBENCH_ASSETS. The one place kvbench reads
 * KVBENCH_ASSETS: the datasets take the folder as DatasetOptions.assets_dir. */
int util_assets_dir(char *out, size_t size, KvErr *err);

/* mkdir -p. */
int util_make_dirs(const char *dir, KvErr *err);
/* Creates the directory that will hold `file` (no-op for a bare file name). */
int util_make_parent_dirs(const char *file, KvErr *err);

/* Whether `file` (which does not exist yet) can be created with its missing directories: its nearest existing
 * ancestor is a directory in which this process can create a file (tried with a temporary file, removed at once:
 * permissions alone do not say it for root or on /proc and read-only mounts). On failure err says
 * "cannot create FILE (DIR is not a writable directory)", with the reason where the file could not be made. */
int util_check_creatable(const char *file, KvErr *err);

/* Bytes with the binary unit that keeps the number at least 1: "512 B", "512.00 KiB", "1.50 MiB", "8.00 GiB". */
void util_format_bytes(double bytes, char *out, size_t size);

/* text with its control characters and backslashes written as C escapes (\n, \t, \r, \\, \xNN), so a name
 * read from a file prints on one line of a log; cut to fit size. */
void util_escape_text(const char *text, char *out, size_t size);

/* FNV-1a 64-bit hash of a string (config hashes, shard assignment: the same on every machine). */
unsigned long long util_hash64(const char *text);
/* The same hash over n bytes, continued from h (start with util_hash64("")). */
unsigned long long util_hash64_bytes(unsigned long long h, const void *bytes, size_t n);

/* The identity of a model (and of its separate tokenizer file, if given): what changes when the weights or the
 * tokenizer change, computed without reading the whole of a 65 GB checkpoint. A file (GGUF, tokenizer) or each
 * *.json, *.safetensors, *.model, *.txt, *.tiktoken file of a directory (Hugging Face checkpoint) contributes its
 * name, size, first 16 MiB (GGUF metadata and tensor table, tokenizer, safetensors header) and 256 blocks of 64
 * KiB spread evenly over the rest (FNV-1a 64); a file of at most 32 MiB is read whole. So another quantisation,
 * architecture, tokenizer, config or retrained weights give another identity; an edit confined to a few bytes
 * between the sampled blocks does not (give such a model another name). Format: "fp=HEX,bytes=N" plus
 * ",tokenizer=HEX"; "synthetic=SPEC" for a synthetic model. */
int util_model_identity(const char *path, const char *tokenizer, char *out, size_t out_size, KvErr *err);

/* The git revision kvbench was built from: `git describe --always --dirty` at build time (KVBENCH_GIT_REV, set
 * by the Makefile; "-dirty" when the tree had uncommitted changes), "unknown" outside a git checkout. */
void util_git_revision(char *out, size_t out_size);

/* Milliseconds from a monotonic clock. */
double util_now_ms(void);
/* CPU milliseconds this process has used so far (all its threads). */
double util_cpu_ms(void);

#endif
