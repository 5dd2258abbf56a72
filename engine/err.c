/* err.c — KvErr formatting and the small allocation / file helpers that report through it. */
#include "err.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A message quotes what the input holds (a JSON key, a task name, a path), which may contain line breaks or other
 * control characters: shown as spaces, so the message stays one line. */
static void one_line(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = ' ';
}

int kv_fail(KvErr *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        one_line(err->msg);
    }
    return -1;
}

int kv_wrap(KvErr *err, const char *fmt, ...) {
    if (err) {
        char prefix[512], old[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        char joined[sizeof prefix + sizeof old + 2];
        memcpy(old, err->msg, sizeof old);
        snprintf(joined, sizeof joined, "%s: %s", prefix, old);
        snprintf(err->msg, sizeof err->msg, "%.*s", (int)sizeof err->msg - 1, joined);
        one_line(err->msg);
    }
    return -1;
}

void *kv_malloc(size_t n, KvErr *err) {
    void *p = malloc(n ? n : 1);
    if (!p) kv_fail(err, "out of memory allocating %zu bytes", n);
    return p;
}

void *kv_calloc(size_t count, size_t size, KvErr *err) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) kv_fail(err, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

char *kv_read_file(const char *path, size_t *len_out, KvErr *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        kv_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    /* The size from fstat, of a regular file only: a directory opens for reading but has no size to seek to
     * (glibc's ftell then says 2^63 - 1), and a pipe or device has none either. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        kv_fail(err, "%s: cannot stat: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        kv_fail(err, "%s: is %s, not a file", path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        kv_fail(err, "%s: out of memory reading %zu bytes", path, size);
        return NULL;
    }
    size_t got = fread(buf, 1, size, f);
    fclose(f);
    if (got != size) {
        free(buf);
        kv_fail(err, "%s: short read (%zu of %zu bytes)", path, got, size);
        return NULL;
    }
    buf[size] = '\0';
    if (len_out) *len_out = size;
    return buf;
}

int kv_make_dirs(const char *dir, KvErr *err) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return kv_fail(err, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        int end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(path, 0777) && errno != EEXIST) return kv_fail(err, "%s: cannot create: %s", path, strerror(errno));
            struct stat st;
            if (stat(path, &st) || !S_ISDIR(st.st_mode)) return kv_fail(err, "%s: exists and is not a directory", path);
            if (end) break;
            *p = '/';
        }
    }
    return 0;
}
