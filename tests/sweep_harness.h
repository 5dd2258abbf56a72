/* sweep_harness.h — helpers of the end-to-end tests that drive kvbench subcommands (test_e2e.c, test_trace.c):
 * each run is a forked child calling the subcommand, so the parent stays free of OpenMP threads and can kill a
 * run at any moment; results are read back from the SQLite database. Files go to the test's temporary `dir`. */
#ifndef KVBENCH_SWEEP_HARNESS_H
#define KVBENCH_SWEEP_HARNESS_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../engine/err.h"

static char dir[64];

typedef int (*Command)(int, char **);

/* Starts `cmd args...` in a child with stderr to DIR/NAME.log; returns the pid. */
static pid_t start(Command cmd, const char *log_name, char **args) {
    int argc = 0;
    while (args[argc]) argc++;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char log[128];
        snprintf(log, sizeof log, "%s/%s.log", dir, log_name);
        if (!freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(99);
        int rc = cmd(argc, args);
        fflush(NULL); /* _exit does not flush stdio */
        _exit(rc);
    }
    return pid;
}

static int finish(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run(Command cmd, const char *log_name, char **args) { return finish(start(cmd, log_name, args)); }

static char *path_in(const char *name) {
    static char buf[8][128];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

/* The Llama fixture's tokenizer cut to 256 tokens (the byte alphabet, no merges), for the 256-token tiny Llama
 * fixture, whose checkpoint carries no chat template; written to DIR/NAME, whose path it returns. */
static inline char *byte_tokenizer(const char *name) {
    char *path = path_in(name);
    KvErr err = {{0}};
    char *text = kv_read_file("tests/data/hf_fixtures/llama/tokenizer.json", NULL, &err);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    for (cJSON *t = vocab ? vocab->child : NULL, *next; t; t = next) {
        next = t->next;
        if (t->valuedouble >= 256) cJSON_DeleteItemFromObjectCaseSensitive(vocab, t->string);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(model, "merges", cJSON_CreateArray());
    char *out = cJSON_PrintUnformatted(root);
    FILE *f = fopen(path, "w");
    if (f && out) fputs(out, f);
    if (f) fclose(f);
    free(out);
    cJSON_Delete(root);
    return path;
}

static int log_contains(const char *log_name, const char *text) {
    char path[128], buf[8192] = {0};
    snprintf(path, sizeof path, "%s/%s.log", dir, log_name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, text) != NULL;
}

static long long query_int(const char *db_path, const char *sql) {
    sqlite3 *db;
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 2000);
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* The one-column rows of a query, one per line (malloc'd), for comparing whole databases. */
static inline char *dump_query(const char *db_path, const char *sql) {
    sqlite3 *db;
    sqlite3_stmt *st;
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1);
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return out;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK)
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *row = (const char *)sqlite3_column_text(st, 0);
            size_t len = strlen(row);
            if (n + len + 2 > cap) {
                cap = 2 * (n + len + 2);
                out = realloc(out, cap);
            }
            memcpy(out + n, row, len);
            n += len;
            out[n++] = '\n';
            out[n] = 0;
        }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

#endif
