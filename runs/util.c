/* util.c — directories, hashes, the build revision and a clock for the runner and the report. */
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int util_make_dirs(const char *dir, KvErr *err) {
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

int util_make_parent_dirs(const char *file, KvErr *err) {
    char dir[PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (!slash || slash == file) return 0;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - file), file);
    return util_make_dirs(dir, err);
}

unsigned long long util_hash64(const char *text) {
    unsigned long long h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ULL;
    return h;
}

/* Single-quotes a path for /bin/sh. */
static int shell_quote(const char *s, char *out, size_t n) {
    size_t k = 0;
    if (n < 3) return -1;
    out[k++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t len = piece ? 4 : 1;
        if (k + len + 2 > n) return -1;
        if (piece) memcpy(out + k, piece, len);
        else out[k] = *s;
        k += len;
    }
    out[k++] = '\'';
    out[k] = 0;
    return 0;
}

int util_model_sha256(const char *path, char *out, size_t out_size, KvErr *err) {
    struct stat st;
    char quoted[2 * PATH_MAX], cmd[4 * PATH_MAX], line[256];
    if (!strncmp(path, "synthetic:", 10)) {
        snprintf(out, out_size, "synthetic");
        return 0;
    }
    if (stat(path, &st)) return kv_fail(err, "%s: %s", path, strerror(errno));
    if (shell_quote(path, quoted, sizeof quoted)) return kv_fail(err, "%s: path too long", path);
    if (S_ISDIR(st.st_mode))
        snprintf(cmd, sizeof cmd, "cd %s && sha256sum config.json *.safetensors | sha256sum", quoted);
    else
        snprintf(cmd, sizeof cmd, "sha256sum %s", quoted);
    FILE *p = popen(cmd, "r");
    if (!p) return kv_fail(err, "%s: cannot run sha256sum: %s", path, strerror(errno));
    int got = fgets(line, sizeof line, p) != NULL;
    int status = pclose(p);
    if (!got || status != 0 || strlen(line) < 64)
        return kv_fail(err, "%s: sha256sum failed (is coreutils installed and the file readable?)", path);
    snprintf(out, out_size, "%.64s", line);
    return 0;
}

void util_git_revision(char *out, size_t out_size) {
#ifdef KVBENCH_GIT_REV
    snprintf(out, out_size, "%s", KVBENCH_GIT_REV);
#else
    char exe[PATH_MAX], quoted[2 * PATH_MAX], cmd[3 * PATH_MAX], line[128];
    snprintf(out, out_size, "unknown");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    if (shell_quote(exe, quoted, sizeof quoted)) return;
    snprintf(cmd, sizeof cmd, "git -C %s rev-parse HEAD 2>/dev/null", quoted);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    int got = fgets(line, sizeof line, p) != NULL;
    if (pclose(p) == 0 && got && strlen(line) >= 40) snprintf(out, out_size, "%.40s", line);
#endif
}

double util_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
