/* cmd_slurm.c — `kvbench slurm`: a sweep as a Slurm job array, one shard per array task, plus a merge job.
 *
 * kvbench does not schedule anything itself: each array task runs `kvbench run CONFIG --shard i/N` into its
 * own database (resumable, so a requeued task continues where it stopped), and a job that depends on the
 * whole array (afterok) merges the shard databases with `kvbench merge`. With --submit both are handed to
 * sbatch; without it the scripts are only written, for the user to inspect or submit by hand. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/err.h"
#include "../engine/num.h"
#include "commands.h"

typedef struct {
    const char *config;
    int shards;
    const char *partition;
    int gpus_per_task;
    int cpus_per_task;
    const char *time_limit;
    const char *dir;
    int limit;
    int submit;
} SlurmOptions;

static void slurm_usage(FILE *f) {
    fprintf(f, "usage: kvbench slurm CONFIG.json --shards N [--partition P] [--gpus-per-task G]\n"
               "                     [--cpus-per-task C] [--time T] [--dir DIR] [--limit N] [--submit]\n"
               "  writes DIR/array.sbatch (one shard per array task) and DIR/merge.sbatch (default DIR:\n"
               "  slurm-<config name>); with --submit, submits both, the merge after the whole array (afterok).\n"
               "  Results: DIR/shard_<i>.db per task, merged into DIR/merged.db.\n");
}

static int parse_positive(const char *flag, const char *text, int *out, KvErr *err) {
    long long v = 0;
    NumCheck r = num_parse_integer(text, 1, 100000, &v);
    if (r == NUM_OUT_OF_RANGE) return kv_fail(err, "%s: '%s' is out of range [1, 100000]", flag, text);
    if (r) return kv_fail(err, "%s: expected a positive integer, got '%s'", flag, text);
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, SlurmOptions *o, KvErr *err) {
    memset(o, 0, sizeof *o);
    o->cpus_per_task = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = strcmp(a, "--submit") != 0 && !strncmp(a, "--", 2);
        if (takes_value && !val) return kv_fail(err, "%s needs a value", a);
        if (!strcmp(a, "--submit")) o->submit = 1;
        else if (!strcmp(a, "--shards")) { if (parse_positive(a, val, &o->shards, err)) return -1; i++; }
        else if (!strcmp(a, "--gpus-per-task")) { if (parse_positive(a, val, &o->gpus_per_task, err)) return -1; i++; }
        else if (!strcmp(a, "--cpus-per-task")) { if (parse_positive(a, val, &o->cpus_per_task, err)) return -1; i++; }
        else if (!strcmp(a, "--limit")) { if (parse_positive(a, val, &o->limit, err)) return -1; i++; }
        else if (!strcmp(a, "--partition")) { o->partition = val; i++; }
        else if (!strcmp(a, "--time")) { o->time_limit = val; i++; }
        else if (!strcmp(a, "--dir")) { o->dir = val; i++; }
        else if (!strncmp(a, "--", 2)) return kv_fail(err, "unknown option '%s'", a);
        else if (!o->config) o->config = a;
        else return kv_fail(err, "unexpected argument '%s'", a);
    }
    if (!o->config) return kv_fail(err, "missing CONFIG.json");
    if (!o->shards) return kv_fail(err, "missing --shards N");
    return 0;
}

/* Slurm runs the scripts from another working directory, so every path in them is absolute. */
static int absolute_path(const char *path, char *out, size_t n, KvErr *err) {
    char *r = realpath(path, NULL);
    if (!r) return kv_fail(err, "%s: %s", path, strerror(errno));
    if (strlen(r) >= n) {
        free(r);
        return kv_fail(err, "%s: path too long", path);
    }
    strcpy(out, r);
    free(r);
    return 0;
}

/* Every path and value that goes into a script passes here first. A control character (a newline above all)
 * is refused everywhere: a comment or an #SBATCH line would end at it and the rest become a command of the job.
 * A value of an #SBATCH line (sbatch reads those lines itself, with no shell quoting) is also refused when it holds
 * a space, a quote, a backslash or '%' (Slurm's file-name pattern character); in the script's commands every
 * path is a single-quoted shell word, where anything else stays text. */
static int check_value(const char *what, const char *s, int sbatch_line, KvErr *err) {
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) {
            char shown[300]; /* the value on one line, each control character as '?' */
            snprintf(shown, sizeof shown, "%s", s);
            for (char *q = shown; *q; q++)
                if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
            return kv_fail(err, "%s '%s' holds a control character (a newline?): it cannot be written into a job "
                                "script", what, shown);
        }
        if (sbatch_line && strchr(" \"'\\%", c))
            return kv_fail(err, "%s '%s' holds '%c', which an #SBATCH line cannot carry (choose another %s)", what, s,
                           c, strstr(what, "dir") ? "--dir" : "value");
    }
    return 0;
}

/* s as one shell word into out[n]: single-quoted, a quote inside written '\''. Fails when it does not fit. */
static int shell_word(const char *s, char *out, size_t n) {
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

static void put_quoted(FILE *f, const char *s) {
    char word[PATH_MAX * 4 + 3]; /* the paths here are at most PATH_MAX */
    if (!shell_word(s, word, sizeof word)) fputs(word, f);
}

static int write_array_script(const char *path, const SlurmOptions *o, const char *exe, const char *cwd,
                              const char *config, const char *dir, const char *name, KvErr *err) {
    FILE *f = fopen(path, "w");
    if (!f) return kv_fail(err, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "#!/bin/bash\n# kvbench sweep of %s as a job array: one shard per task, resumable on requeue.\n",
            config);
    fprintf(f, "#SBATCH --job-name=kvbench-%s\n#SBATCH --array=0-%d\n#SBATCH --requeue\n", name, o->shards - 1);
    fprintf(f, "#SBATCH --output=%s/logs/shard_%%a.out\n#SBATCH --cpus-per-task=%d\n", dir, o->cpus_per_task);
    if (o->partition) fprintf(f, "#SBATCH --partition=%s\n", o->partition);
    if (o->gpus_per_task) fprintf(f, "#SBATCH --gpus-per-task=%d\n", o->gpus_per_task);
    if (o->time_limit) fprintf(f, "#SBATCH --time=%s\n", o->time_limit);
    fprintf(f, "set -euo pipefail\ncd ");
    put_quoted(f, cwd);
    fprintf(f, "\nexport OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-%d}\"\nexec ", o->cpus_per_task);
    put_quoted(f, exe);
    fprintf(f, " run ");
    put_quoted(f, config);
    fprintf(f, " --shard \"${SLURM_ARRAY_TASK_ID}/%d\" --db ", o->shards);
    put_quoted(f, dir);
    fprintf(f, "/shard_\"${SLURM_ARRAY_TASK_ID}\".db");
    if (o->limit) fprintf(f, " --limit %d", o->limit);
    fputc('\n', f);
    if (fclose(f) != 0) return kv_fail(err, "%s: write failed: %s", path, strerror(errno));
    return chmod(path, 0755) == 0 ? 0 : kv_fail(err, "%s: chmod: %s", path, strerror(errno));
}

static int write_merge_script(const char *path, const SlurmOptions *o, const char *exe, const char *dir,
                              const char *name, KvErr *err) {
    FILE *f = fopen(path, "w");
    if (!f) return kv_fail(err, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "#!/bin/bash\n# Merges the shard databases of the kvbench job array (submitted afterok).\n");
    fprintf(f, "#SBATCH --job-name=kvbench-%s-merge\n#SBATCH --output=%s/logs/merge.out\n", name, dir);
    fprintf(f, "#SBATCH --cpus-per-task=1\n");
    if (o->partition) fprintf(f, "#SBATCH --partition=%s\n", o->partition);
    fprintf(f, "set -euo pipefail\nexec ");
    put_quoted(f, exe);
    fprintf(f, " merge ");
    put_quoted(f, dir);
    fprintf(f, "/merged.db");
    for (int i = 0; i < o->shards; i++) {
        fputc(' ', f);
        put_quoted(f, dir);
        fprintf(f, "/shard_%d.db", i);
    }
    fputc('\n', f);
    if (fclose(f) != 0) return kv_fail(err, "%s: write failed: %s", path, strerror(errno));
    return chmod(path, 0755) == 0 ? 0 : kv_fail(err, "%s: chmod: %s", path, strerror(errno));
}

/* Runs sbatch --parsable with extra arguments; returns the job id ("123" or "123;cluster" -> "123"). */
static int sbatch(const char *extra, const char *script, char *job_id, size_t n, KvErr *err) {
    char cmd[PATH_MAX * 5], word[PATH_MAX * 4 + 3];
    if (shell_word(script, word, sizeof word)) return kv_fail(err, "%s: path too long", script);
    snprintf(cmd, sizeof cmd, "sbatch --parsable %s %s 2>&1", extra, word);
    FILE *p = popen(cmd, "r");
    if (!p) return kv_fail(err, "cannot run sbatch: %s", strerror(errno));
    char line[64] = "";
    if (!fgets(line, sizeof line, p)) line[0] = '\0';
    int status = pclose(p);
    line[strcspn(line, ";\r\n")] = '\0';
    if (status != 0 || !line[0] || strspn(line, "0123456789") != strlen(line))
        return kv_fail(err, "sbatch %s failed: %s", script, line[0] ? line : "(no output)");
    snprintf(job_id, n, "%s", line);
    return 0;
}

static int on_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, prog);
        if (access(buf, X_OK) == 0) return 1;
        p += len + (p[len] == ':');
    }
    return 0;
}

int cmd_slurm(int argc, char **argv) {
    KvErr err = {{0}};
    SlurmOptions o;
    if (argc == 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help"))) {
        slurm_usage(stdout);
        return 0;
    }
    if (parse_args(argc, argv, &o, &err)) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        slurm_usage(stderr);
        return 2;
    }
    if (o.submit && !on_path("sbatch")) {
        fprintf(stderr, "kvbench slurm: sbatch not found on PATH: --submit needs Slurm's client tools "
                        "(run on a login node, or drop --submit to only write the scripts)\n");
        return 1;
    }
    char exe[PATH_MAX], cwd[PATH_MAX], config[PATH_MAX], dir[PATH_MAX], name[256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || !getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "kvbench slurm: cannot determine the kvbench executable or working directory\n");
        return 1;
    }
    exe[n] = '\0';
    if (absolute_path(o.config, config, sizeof config, &err)) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        return 1;
    }
    if (check_value("the config path", config, 0, &err) || check_value("the working directory", cwd, 0, &err) ||
        check_value("the kvbench executable's path", exe, 0, &err) ||
        (o.partition && check_value("--partition", o.partition, 1, &err)) ||
        (o.time_limit && check_value("--time", o.time_limit, 1, &err)) ||
        (o.dir && check_value("--dir", o.dir, 1, &err))) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        return 1;
    }
    /* the job's name: the config file's name up to its first '.', as a plain label */
    const char *base = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
    snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "."), base);
    for (char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_'))
            *p = '_';
    char default_dir[300];
    snprintf(default_dir, sizeof default_dir, "slurm-%s", name);
    const char *want_dir = o.dir ? o.dir : default_dir;
    char logs[PATH_MAX + 8];
    /* checked before anything is created; again below once symbolic links are resolved */
    if (want_dir[0] != '/' && check_value("the working directory (it holds --dir)", cwd, 1, &err)) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        return 1;
    }
    if (mkdir(want_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kvbench slurm: %s: cannot create: %s\n", want_dir, strerror(errno));
        return 1;
    }
    if (absolute_path(want_dir, dir, sizeof dir, &err) ||
        check_value(strcmp(want_dir, dir) ? "the directory (absolute path of --dir)" : "--dir", dir, 1, &err)) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        return 1;
    }
    snprintf(logs, sizeof logs, "%s/logs", dir);
    if (mkdir(logs, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kvbench slurm: %s: cannot create: %s\n", logs, strerror(errno));
        return 1;
    }
    char array_path[PATH_MAX + 16], merge_path[PATH_MAX + 16];
    snprintf(array_path, sizeof array_path, "%s/array.sbatch", dir);
    snprintf(merge_path, sizeof merge_path, "%s/merge.sbatch", dir);
    if (write_array_script(array_path, &o, exe, cwd, config, dir, name, &err) ||
        write_merge_script(merge_path, &o, exe, dir, name, &err)) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s (%d array tasks) and %s\n", array_path, o.shards, merge_path);
    if (!o.submit) return 0;
    char array_id[64], merge_id[64], dep[128];
    if (sbatch("", array_path, array_id, sizeof array_id, &err)) {
        fprintf(stderr, "kvbench slurm: %s\n", err.msg);
        return 1;
    }
    snprintf(dep, sizeof dep, "--dependency=afterok:%s", array_id);
    if (sbatch(dep, merge_path, merge_id, sizeof merge_id, &err)) {
        fprintf(stderr, "kvbench slurm: %s (the array job %s was submitted)\n", err.msg, array_id);
        return 1;
    }
    printf("submitted array job %s and merge job %s -> %s/merged.db\n", array_id, merge_id, dir);
    return 0;
}
