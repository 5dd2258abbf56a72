/* err.h — the error value every fallible kvbench function fills.
 *
 * Functions that can fail return 0 on success and -1 on failure, and write one human-readable line
 * into a caller-owned KvErr ("FILE: problem"; control characters quoted from the input become spaces). The caller decides whether to print it, record it
 * in the results database, or prefix it with its own context. No global errno-style state. */
#ifndef KVBENCH_ERR_H
#define KVBENCH_ERR_H

#include <stddef.h>

typedef struct {
    char msg[1024];
} KvErr;

/* Formats msg into err (if err is non-NULL) and returns -1, so callers can write
 * `return kv_fail(err, "%s: truncated header", path);`. */
int kv_fail(KvErr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to an existing message (for adding file or sample context). Returns -1. */
int kv_wrap(KvErr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation helpers that fail with a message instead of returning NULL silently. */
void *kv_malloc(size_t n, KvErr *err);
void *kv_calloc(size_t count, size_t size, KvErr *err);

/* Reads a whole file into a NUL-terminated buffer. *len_out (optional) receives the byte count. */
char *kv_read_file(const char *path, size_t *len_out, KvErr *err);
/* mkdir -p: dir and every missing folder above it. */
int kv_make_dirs(const char *dir, KvErr *err);

#endif
