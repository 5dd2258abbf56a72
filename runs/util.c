/* util.c — the runner's chores: the one reader of the environment (backend options, assets, DuoAttention
 * patterns), directories, hashes, the build revision, a clock. */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../policies/duo.h"

/* An option's spelling as a flag ("--fast-kernel") or an environment variable ("KVBENCH_FAST_KERNEL"). */
static void option_flag(int key, char *out, size_t size) {
    snprintf(out, size, "--%s", BACKEND_OPTION_NAMES[key]);
    for (char *p = out; *p; p++)
        if (*p == '_') *p = '-';
}

static void option_env(int key, char *out, size_t size) {
    snprintf(out, size, "KVBENCH_%s", BACKEND_OPTION_NAMES[key]);
    for (char *p = out; *p; p++) *p = (char)toupper((unsigned char)*p);
}

int util_backend_flag(const char *arg) {
    char flag[32];
    for (int key = 0; key < BACKEND_N_OPTIONS; key++) {
        option_flag(key, flag, sizeof flag);
        if (!strcmp(arg, flag)) return key;
    }
    return -1;
}

int util_backend_flags_check(const char *const *flags, KvErr *err) {
    BackendOptions checked = {0};
    char flag[32];
    for (int key = 0; key < BACKEND_N_OPTIONS; key++) {
        option_flag(key, flag, sizeof flag);
        if (backend_option_set(&checked, (BackendOptionKey)key, flags[key], err)) return kv_wrap(err, "%s", flag);
    }
    return 0;
}

int util_backend_options(BackendOptions *o, const char *const *flags, char *const *config, const char *config_where,
                         KvErr *err) {
    *o = (BackendOptions){0};
    for (int key = 0; key < BACKEND_N_OPTIONS; key++) {
        char where[1200];
        const char *value = NULL;
        if (flags && flags[key]) {
            value = flags[key];
            option_flag(key, where, sizeof where);
        } else if (config && config[key]) {
            value = config[key];
            snprintf(where, sizeof where, "%s.cpu.%s", config_where, BACKEND_OPTION_NAMES[key]);
        } else {
            option_env(key, where, sizeof where);
            value = getenv(where);
        }
        if (backend_option_set(o, (BackendOptionKey)key, value, err)) return kv_wrap(err, "%s", where);
    }
    return 0;
}

int util_assets_dir(char *out, size_t size, KvErr *err) {
    const char *env = getenv("KVBENCH_ASSETS");
    struct stat st;
    char exe[PATH_MAX] = "", cwd[PATH_MAX] = "?";
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return 0;
    }
    snprintf(out, size, "datasets/assets");
    if (!stat(out, &st) && S_ISDIR(st.st_mode)) return 0;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
        *slash = 0;
        snprintf(out, size, "%s/datasets/assets", exe);
        if (!stat(out, &st) && S_ISDIR(st.st_mode)) return 0;
    }
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "?");
    return kv_fail(err, "datasets/assets: not in the current directory (%s) nor beside the kvbench binary (%s): run "
                        "kvbench from its repository's root, or set KVBENCH_ASSETS=/path/to/kvbench/datasets/assets",
                   cwd, exe[0] ? exe : "unknown");
}

const char *util_duo_patterns_dir(void) {
    const char *env = getenv("KVBENCH_DUO_PATTERNS");
    return env && *env ? env : DUO_PATTERNS_SHIPPED;
}

int util_make_parent_dirs(const char *file, KvErr *err) {
    char dir[PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (!slash || slash == file) return 0;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - file), file);
    return kv_make_dirs(dir, err);
}

int util_check_creatable(const char *file, KvErr *err) {
    char dir[PATH_MAX], probe[PATH_MAX + 32];
    struct stat st;
    if (snprintf(dir, sizeof dir, "%s", file) >= (int)sizeof dir) return kv_fail(err, "%s: path too long", file);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) {
            snprintf(dir, sizeof dir, ".");
            break;
        }
        *slash = 0;
        if (!*dir) {
            snprintf(dir, sizeof dir, "/");
            break;
        }
        if (!stat(dir, &st)) break;
    }
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return kv_fail(err, "cannot create %s (%s is not a writable directory)", file, dir);
    snprintf(probe, sizeof probe, "%s/.kvbench-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        return kv_fail(err, "cannot create %s (%s is not a writable directory: %s)", file, dir, strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

void util_format_bytes(double bytes, char *out, size_t size) {
    static const char *UNITS[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(out, size, "%.0f B", bytes);
        return;
    }
    int u = 0;
    for (bytes /= 1024; bytes >= 1024 && u < 3; u++) bytes /= 1024;
    snprintf(out, size, "%.2f %s", bytes, UNITS[u]);
}

void util_escape_text(const char *text, char *out, size_t size) {
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && k + 5 < size; p++) {
        const char *named = *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : *p == '\r' ? "\\r" : *p == '\\' ? "\\\\" : NULL;
        if (named) k += (size_t)snprintf(out + k, size - k, "%s", named);
        else if (*p < 0x20 || *p == 0x7f) k += (size_t)snprintf(out + k, size - k, "\\x%02x", *p);
        else out[k++] = (char)*p;
    }
    if (size) out[k < size ? k : size - 1] = 0;
}

unsigned long long util_hash64(const char *text) {
    unsigned long long h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    return h;
}

unsigned long long util_hash64_bytes(unsigned long long h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

#define FP_HEAD (16u << 20)
#define FP_BLOCK (64u << 10)
#define FP_BLOCKS 256

/* Continues *h over a file's name, size, head and sampled blocks (util_model_identity); *bytes += its size. */
static int fingerprint_file(const char *path, const char *name, unsigned long long *h, unsigned long long *bytes,
                            KvErr *err) {
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st)) {
        if (fd >= 0) close(fd);
        return kv_fail(err, "%s: %s", path, strerror(errno));
    }
    unsigned char *buf = kv_malloc(FP_BLOCK, err);
    if (!buf) {
        close(fd);
        return -1;
    }
    unsigned long long size = (unsigned long long)st.st_size;
    *h = util_hash64_bytes(util_hash64_bytes(*h, name, strlen(name) + 1), &size, sizeof size);
    *bytes += size;
    /* Offsets to read, in order: the whole file when small, else the head, then blocks spread over the rest. */
    int whole = size <= 2ull * FP_HEAD, rc = 0;
    unsigned long long head = whole ? size : FP_HEAD;
    for (unsigned long long off = 0; off < head && !rc; off += FP_BLOCK) {
        size_t n = (size_t)(head - off < FP_BLOCK ? head - off : FP_BLOCK);
        if (pread(fd, buf, n, (off_t)off) != (ssize_t)n) rc = kv_fail(err, "%s: read failed: %s", path, strerror(errno));
        else *h = util_hash64_bytes(*h, buf, n);
    }
    for (int i = 0; i < FP_BLOCKS && !whole && !rc; i++) {
        unsigned long long off = FP_HEAD + (size - FP_HEAD - FP_BLOCK) * (unsigned long long)i / (FP_BLOCKS - 1);
        if (pread(fd, buf, FP_BLOCK, (off_t)off) != (ssize_t)FP_BLOCK)
            rc = kv_fail(err, "%s: read failed: %s", path, strerror(errno));
        else *h = util_hash64_bytes(*h, buf, FP_BLOCK);
    }
    free(buf);
    close(fd);
    return rc;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int weight_or_tokenizer_file(const char *name) {
    static const char *const SUFFIXES[] = {".json", ".safetensors", ".model", ".txt", ".tiktoken"};
    size_t n = strlen(name);
    if (name[0] == '.') return 0;
    for (size_t i = 0; i < sizeof SUFFIXES / sizeof *SUFFIXES; i++) {
        size_t k = strlen(SUFFIXES[i]);
        if (n > k && !strcmp(name + n - k, SUFFIXES[i])) return 1;
    }
    return 0;
}

/* A file, or a directory's weight and tokenizer files in name order. */
static int fingerprint_path(const char *path, unsigned long long *h, unsigned long long *bytes, KvErr *err) {
    struct stat st;
    if (stat(path, &st)) return kv_fail(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return fingerprint_file(path, "", h, bytes, err);
    DIR *dir = opendir(path);
    if (!dir) return kv_fail(err, "%s: %s", path, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)) && !rc) {
        if (!weight_or_tokenizer_file(e->d_name)) continue;
        if (n == cap) {
            char **grown = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *grown);
            if (!grown) rc = kv_fail(err, "out of memory listing %s", path);
            else names = grown;
        }
        if (!rc && !(names[n++] = strdup(e->d_name))) rc = kv_fail(err, "out of memory listing %s", path);
    }
    closedir(dir);
    if (!rc) qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n && !rc; i++) {
        char file[PATH_MAX];
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        if (!stat(file, &st) && S_ISREG(st.st_mode)) rc = fingerprint_file(file, names[i], h, bytes, err);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int util_model_identity(const char *path, const char *tokenizer, char *out, size_t out_size, KvErr *err) {
    unsigned long long h = util_hash64(""), bytes = 0, th = util_hash64(""), tbytes = 0;
    int k;
    if (!strncmp(path, "synthetic:", 10)) {
        k = snprintf(out, out_size, "synthetic=%s", path + 10);
    } else {
        if (fingerprint_path(path, &h, &bytes, err)) return -1;
        k = snprintf(out, out_size, "fp=%016llx,bytes=%llu", h, bytes);
    }
    if (tokenizer) {
        if (fingerprint_path(tokenizer, &th, &tbytes, err)) return -1;
        k += snprintf(out + k, out_size > (size_t)k ? out_size - (size_t)k : 0, ",tokenizer=%016llx", th);
    }
    return (size_t)k < out_size ? 0 : kv_fail(err, "%s: model identity too long", path);
}

/* The Makefile passes the revision the binary was built from (build/git_rev.h); a build outside it says so. */
#ifndef KVBENCH_GIT_REV
#define KVBENCH_GIT_REV "unknown"
#endif
void util_git_revision(char *out, size_t out_size) { snprintf(out, out_size, "%s", KVBENCH_GIT_REV); }

double util_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double util_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
