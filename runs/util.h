/* util.h — the runner's system chores: the environment (read here only: the backend options, the assets and
 * DuoAttention folders, each passed down as a parameter), directories, hashes, the build revision, a monotonic
 * clock. Kept apart so the commands and the sweep share one copy of each. */
#ifndef KVBENCH_RUNS_UTIL_H
#define KVBENCH_RUNS_UTIL_H

#include <stddef.h>

#include "../engine/backend.h"
#include "../engine/err.h"

/* The backend options of one model, each (engine/backend.h BACKEND_OPTION_NAMES: decode exact | fast, cache
 * f32 | f16, simd scalar | avx2 | avx512, fast_kernel scalar | avx2 | vnni | amx) from the first place that
 * names it: the command line (flags[key], the value of --decode, --cache, --simd or --fast-kernel; NULL: not
 * given), the model's "cpu" object in its config (config[key]; NULL: absent), the environment (KVBENCH_DECODE,
 * KVBENCH_CACHE, KVBENCH_SIMD, KVBENCH_FAST_KERNEL), else the default. flags or config may be NULL; config_where
 * names the model in messages ("configs/x.json: models[0]"). A bad value fails with one line naming where it
 * came from ("--decode: ...", "configs/x.json: models[0].cpu.decode: ...", "KVBENCH_DECODE: ...") and the
 * problem. The one place kvbench reads these variables: the engine takes BackendOptions only. */
int util_backend_options(BackendOptions *o, const char *const *flags, char *const *config, const char *config_where,
                         KvErr *err);
/* The option a command-line argument names ("--decode" -> BACKEND_OPT_DECODE, "--fast-kernel" ->
 * BACKEND_OPT_FAST_KERNEL), or -1. */
int util_backend_flag(const char *arg);
/* Checks the command line's values alone (a bad one is a bad command line, before anything loads): err names
 * the flag and the problem. */
int util_backend_flags_check(const char *const *flags, KvErr *err);
/* The flags' line of a command's usage. */
#define UTIL_BACKEND_FLAGS_USAGE "[--decode exact|fast] [--cache f32|f16] [--simd scalar|avx2|avx512] " \
                                 "[--fast-kernel scalar|avx2|vnni|amx]"

/* The folder of the datasets' assets (RULER templates, LongBench prompts, needle haystacks): $KVBENCH_ASSETS, else
 * datasets/assets of the current directory, else datasets/assets beside the kvbench binary (/proc/self/exe); when
 * none exists, err says to run from the repository root or to set KVBENCH_ASSETS. The one place kvbench reads
 * KVBENCH_ASSETS: the datasets take the folder as DatasetOptions.assets_dir. */
int util_assets_dir(char *out, size_t size, KvErr *err);

/* The folder of the shipped DuoAttention patterns: $KVBENCH_DUO_PATTERNS, else DUO_PATTERNS_SHIPPED (the
 * runner works from the project root). The one place kvbench reads KVBENCH_DUO_PATTERNS: policies/duo.h takes
 * the folder as a parameter. */
const char *util_duo_patterns_dir(void);

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
