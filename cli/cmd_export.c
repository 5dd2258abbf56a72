/* cmd_export.c — `kvbench export --kvpress DIR --db PATH`: a results database in the layout of kvpress's
 * evaluation results (NVIDIA/kvpress evaluation/evaluate.py, EvaluationConfig.get_results_dir), so kvbench's
 * numbers sit beside kvpress's and its leaderboard's.
 *
 * One directory per (model, setup, suite, task, policy, aggregation, params, budget) with a scored row, named as
 * kvpress names its own: DATASET__DATA_DIR__MODEL__PRESS__RATIO (MODEL with "/" as "--", RATIO "%.2f", and
 * "__compressed_questions" when the setup compressed the question), holding
 *   metrics.json      the task's mean score x 100 rounded to 2 decimals: a bare number for LongBench (kvpress's
 *                     longbench scorer), else {"TASK": {"METRIC": score}} (its ruler scorer's shape);
 *   predictions.csv   one line per sample: sample_key, answers (JSON), predicted_answer, score, compression_ratio,
 *                     error (empty unless the row failed; a failed row is not in the mean);
 *   config.yaml       kvpress's keys (dataset, data_dir, model, press_name, compression_ratio, compress_questions)
 *                     and under `kvbench:` what made the row exactly: policy, aggregation, params, budget, setup,
 *                     metric, n (scored samples), n_failed, mean kept fraction, the database.
 * DATASET is the kvbench suite, DATA_DIR the task, PRESS "kvbench-POLICY[-AGGREGATION][-PARAMS]" (a token budget
 * appended as "-512tok", its RATIO 1 - the mean kept fraction). Every name is checked before anything is written:
 * one with a path separator, "__" (kvpress's separator), a control character or a leading dot is refused, as are
 * two rows that would share a directory. Files are written beside their final name and renamed into place. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../report/escape.h"
#include "../runs/util.h"
#include "commands.h"

static const char USAGE[] = "usage: kvbench export --kvpress DIR --db PATH\n";

enum { C_MODEL, C_SETUP, C_SUITE, C_TASK, C_METRIC, C_POLICY, C_AGGREGATION, C_PARAMS, C_BUDGET, N_TEXT };

typedef struct {
    char *text[N_TEXT];
    double keep_fraction;  /* the budget's (0 for token budgets) */
    double kept_fraction;  /* mean over scored rows of entries kept / all entries */
    double score;          /* mean score x 100 over scored rows */
    int n, n_failed;
    double ratio;          /* the compression ratio kvpress would name */
    char press[700];       /* kvbench-POLICY[-AGGREGATION][-PARAMS][-TOKEN BUDGET] */
    char name[1024];       /* the directory's name */
} Group;

static const char GROUPS_SQL[] =
    "SELECT s.model, s.setup, s.suite, s.task, s.metric, r.policy, r.aggregation, r.params, r.budget, "
    "MAX(r.keep_fraction), AVG(CASE WHEN r.error IS NULL THEN r.kept_fraction END), 100.0 * AVG(r.score), "
    "COUNT(r.score), SUM(r.error IS NOT NULL) "
    "FROM results r JOIN samples s ON s.id = r.sample_id "
    "GROUP BY s.model, s.setup, s.suite, s.task, s.metric, r.policy, r.aggregation, r.params, r.budget "
    "ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9";

static const char SAMPLES_SQL[] =
    "SELECT s.sample_key, s.answers, r.prediction, r.score, r.error "
    "FROM results r JOIN samples s ON s.id = r.sample_id "
    "WHERE s.model = ?1 AND s.setup = ?2 AND s.suite = ?3 AND s.task = ?4 AND s.metric = ?5 AND r.policy = ?6 "
    "AND r.aggregation = ?7 AND r.params = ?8 AND r.budget = ?9 ORDER BY s.idx, s.sample_key";

static const char *const COLUMN_NAMES[N_TEXT] = {"model",  "setup",       "suite",  "task",  "metric",
                                                 "policy", "aggregation", "params", "budget"};

static void groups_free(Group *g, int n) {
    for (int i = 0; i < n; i++)
        for (int c = 0; c < N_TEXT; c++) free(g[i].text[c]);
    free(g);
}

/* Every group of the database with its means; *out (n_out) owned by the caller. */
static int read_groups(sqlite3 *db, const char *path, Group **out, int *n_out, KvErr *err) {
    sqlite3_stmt *st = NULL;
    *out = NULL;
    *n_out = 0;
    if (sqlite3_prepare_v2(db, GROUPS_SQL, -1, &st, NULL) != SQLITE_OK)
        return kv_fail(err, "%s: %s", path, sqlite3_errmsg(db));
    Group *g = NULL;
    int n = 0, cap = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            Group *grown = realloc(g, sizeof *g * (size_t)(cap = cap ? 2 * cap : 64));
            if (!grown) break;
            g = grown;
        }
        Group *x = &g[n++];
        memset(x, 0, sizeof *x);
        for (int c = 0; c < N_TEXT; c++) {
            const unsigned char *t = sqlite3_column_text(st, c);
            x->text[c] = strdup(t ? (const char *)t : "");
        }
        x->keep_fraction = sqlite3_column_double(st, 9);
        x->kept_fraction = sqlite3_column_double(st, 10);
        x->score = sqlite3_column_double(st, 11);
        x->n = sqlite3_column_int(st, 12);
        x->n_failed = sqlite3_column_int(st, 13);
        for (int c = 0; c < N_TEXT; c++)
            if (!x->text[c]) rc = SQLITE_NOMEM;
        if (rc == SQLITE_NOMEM) break;
    }
    const char *msg = rc == SQLITE_DONE ? NULL : rc == SQLITE_ROW || rc == SQLITE_NOMEM ? "out of memory"
                                                                                          : sqlite3_errmsg(db);
    sqlite3_finalize(st);
    if (msg) {
        groups_free(g, n);
        return kv_fail(err, "%s: reading results: %s", path, msg);
    }
    *out = g;
    *n_out = n;
    return 0;
}

/* Why `s`, a name from the database, cannot be part of a directory name (NULL: it can). */
static const char *name_problem(const char *s) {
    if (!*s) return "it is empty";
    if (*s == '.') return "it starts with a dot";
    if (strchr(s, '/') || strchr(s, '\\')) return "it holds a path separator";
    if (strstr(s, "__")) return "it holds \"__\", the separator of kvpress's directory names";
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return "it holds a control character";
    return NULL;
}

/* The group's kvpress directory name and compression ratio, or a message naming the column at fault. */
static int name_group(Group *g, KvErr *err) {
    char model[300];
    size_t m = 0;
    for (const char *p = g->text[C_MODEL]; *p && m + 3 < sizeof model; p++) {
        if (*p == '/') model[m++] = '-', model[m++] = '-';  /* kvpress: model.replace("/", "--") */
        else model[m++] = *p;
    }
    model[m] = 0;
    const int token_budget = !(g->keep_fraction > 0.0);
    const int full = !strcmp(g->text[C_BUDGET], "full");
    for (int c = 0; c < N_TEXT; c++) {
        if (c == C_SETUP || c == C_METRIC || ((c == C_PARAMS || c == C_AGGREGATION) && !*g->text[c])) continue;
        const char *why = name_problem(c == C_MODEL ? model : g->text[c]);
        if (why) return kv_fail(err, "%s '%s' cannot name a directory: %s", COLUMN_NAMES[c], g->text[c], why);
    }
    g->ratio = full ? 0.0 : token_budget ? 1.0 - g->kept_fraction : 1.0 - g->keep_fraction;
    const int has_agg = *g->text[C_AGGREGATION] && strcmp(g->text[C_AGGREGATION], "none");
    int plen = snprintf(g->press, sizeof g->press, "kvbench-%s%s%s%s%s%s%s", g->text[C_POLICY], has_agg ? "-" : "",
                        has_agg ? g->text[C_AGGREGATION] : "", *g->text[C_PARAMS] ? "-" : "", g->text[C_PARAMS],
                        token_budget && !full ? "-" : "", token_budget && !full ? g->text[C_BUDGET] : "");
    int len = snprintf(g->name, sizeof g->name, "%s__%s__%s__%s__%.2f%s", g->text[C_SUITE], g->text[C_TASK], model,
                       g->press, g->ratio, strstr(g->text[C_SETUP], "cq=1") ? "__compressed_questions" : "");
    if (plen < 0 || (size_t)plen >= sizeof g->press || len < 0 || (size_t)len >= sizeof g->name)
        return kv_fail(err, "the directory name of %s/%s %s is too long", g->text[C_SUITE], g->text[C_TASK],
                       g->text[C_POLICY]);
    return 0;
}

/* Writes `path` through PATH.tmp renamed into place; write(f, user) fills it. */
typedef int (*Writer)(FILE *f, const void *user, KvErr *err);

static int write_file(const char *path, Writer write, const void *user, KvErr *err) {
    char tmp[1400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return kv_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
    int rc = write(f, user, err);
    if (fclose(f) && !rc) rc = kv_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path)) rc = kv_fail(err, "%s: cannot rename into place: %s", path, strerror(errno));
    if (rc) remove(tmp);
    return rc;
}

static void put_json_string(FILE *f, const char *s) {
    cJSON *str = cJSON_CreateString(s);
    char *text = str ? cJSON_PrintUnformatted(str) : NULL;
    fputs(text ? text : "\"\"", f);
    free(text);
    cJSON_Delete(str);
}

static int write_metrics(FILE *f, const void *user, KvErr *err) {
    (void)err;
    const Group *g = user;
    if (!strcmp(g->text[C_SUITE], "longbench")) {
        fprintf(f, "%.2f\n", g->score);
        return 0;
    }
    fputs("{\n    ", f);
    put_json_string(f, g->text[C_TASK]);
    fputs(": {\n        ", f);
    put_json_string(f, g->text[C_METRIC]);
    fprintf(f, ": %.2f\n    }\n}\n", g->score);
    return 0;
}

typedef struct {
    const Group *group;
    const char *db_path;
} ConfigFile;

static void put_yaml_pair(FILE *f, const char *indent, const char *key, const char *value) {
    fprintf(f, "%s%s: ", indent, key);
    put_json_string(f, value); /* a JSON string is a YAML double-quoted scalar */
    fputc('\n', f);
}

static int write_config(FILE *f, const void *user, KvErr *err) {
    (void)err;
    const ConfigFile *c = user;
    const Group *g = c->group;
    put_yaml_pair(f, "", "dataset", g->text[C_SUITE]);
    put_yaml_pair(f, "", "data_dir", g->text[C_TASK]);
    put_yaml_pair(f, "", "model", g->text[C_MODEL]);
    put_yaml_pair(f, "", "press_name", g->press);
    fprintf(f, "compression_ratio: %.6g\ncompress_questions: %s\nkvbench:\n", g->ratio,
            strstr(g->text[C_SETUP], "cq=1") ? "true" : "false");
    for (int col = C_SETUP; col < N_TEXT; col++)
        if (col != C_SUITE && col != C_TASK) put_yaml_pair(f, "  ", COLUMN_NAMES[col], g->text[col]);
    fprintf(f, "  n: %d\n  n_failed: %d\n  mean_kept_fraction: %.17g\n", g->n, g->n_failed, g->kept_fraction);
    put_yaml_pair(f, "  ", "database", c->db_path);
    return 0;
}

typedef struct {
    sqlite3_stmt *st;
    const Group *group;
    const char *db_path;
} SampleRows;

static int write_predictions(FILE *f, const void *user, KvErr *err) {
    const SampleRows *s = user;
    sqlite3_reset(s->st);
    for (int c = 0; c < N_TEXT; c++) sqlite3_bind_text(s->st, c + 1, s->group->text[c], -1, SQLITE_STATIC);
    fputs("sample_key,answers,predicted_answer,score,compression_ratio,error\n", f);
    int rc;
    while ((rc = sqlite3_step(s->st)) == SQLITE_ROW) {
        for (int c = 0; c < 3; c++) {
            const unsigned char *t = sqlite3_column_text(s->st, c);
            report_put_csv(f, t ? (const char *)t : "");
            fputc(',', f);
        }
        if (sqlite3_column_type(s->st, 3) != SQLITE_NULL) fprintf(f, "%.17g", sqlite3_column_double(s->st, 3));
        fprintf(f, ",%.6g,", s->group->ratio);
        const unsigned char *e = sqlite3_column_text(s->st, 4);
        if (e) report_put_csv(f, (const char *)e);
        fputc('\n', f);
    }
    if (rc != SQLITE_DONE)
        return kv_fail(err, "%s: reading samples: %s", s->db_path, sqlite3_errmsg(sqlite3_db_handle(s->st)));
    return 0;
}

static int write_group(const char *out_dir, const Group *g, sqlite3_stmt *samples, const char *db_path,
                       KvErr *err) {
    char dir_path[2200], path[2300];
    snprintf(dir_path, sizeof dir_path, "%s/%s", out_dir, g->name);
    if (mkdir(dir_path, 0777) && errno != EEXIST)
        return kv_fail(err, "%s: cannot create: %s", dir_path, strerror(errno));
    ConfigFile config = {g, db_path};
    SampleRows rows = {samples, g, db_path};
    snprintf(path, sizeof path, "%s/predictions.csv", dir_path);
    if (write_file(path, write_predictions, &rows, err)) return -1;
    snprintf(path, sizeof path, "%s/metrics.json", dir_path);
    if (write_file(path, write_metrics, g, err)) return -1;
    snprintf(path, sizeof path, "%s/config.yaml", dir_path);
    return write_file(path, write_config, &config, err);
}

/* Names every group and checks them all before the first file is written. */
static int plan(Group *g, int n, int *n_scored, KvErr *err) {
    *n_scored = 0;
    for (int i = 0; i < n; i++) {
        if (!g[i].n) continue;
        if (name_group(&g[i], err)) return -1;
        for (int j = 0; j < i; j++)
            if (g[j].n && !strcmp(g[i].name, g[j].name))
                return kv_fail(err, "%s/%s %s %s %s: setups '%s' and '%s' would share the directory %s",
                               g[i].text[C_SUITE], g[i].text[C_TASK], g[i].text[C_POLICY], g[i].text[C_PARAMS],
                               g[i].text[C_BUDGET], g[j].text[C_SETUP], g[i].text[C_SETUP], g[i].name);
        (*n_scored)++;
    }
    return 0;
}

int cmd_export(int argc, char **argv) {
    const char *out_dir = NULL, *db_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--kvpress") ? &out_dir : !strcmp(argv[i], "--db") ? &db_path : NULL;
        if (!slot || i + 1 >= argc) {
            fprintf(stderr, "kvbench export: %s '%s'\n%s", slot ? "no value after" : "unexpected argument", argv[i],
                    USAGE);
            return 2;
        }
        *slot = argv[++i];
    }
    if (!out_dir || !db_path) {
        fprintf(stderr, "kvbench export: %s is required\n%s", out_dir ? "--db PATH" : "--kvpress DIR", USAGE);
        return 2;
    }
    if (access(db_path, F_OK)) {
        fprintf(stderr, "kvbench export: %s: no such database\n", db_path);
        return 1;
    }
    KvErr err = {{0}};
    Store *store = NULL;
    Group *groups = NULL;
    int n = 0, n_scored = 0, written = 0, rc = 1;
    sqlite3_stmt *samples = NULL;
    struct stat st;
    if (store_open(&store, db_path, 1, &err) || read_groups(store_handle(store), db_path, &groups, &n, &err) ||
        plan(groups, n, &n_scored, &err))
        goto done;
    if (kv_make_dirs(out_dir, &err)) goto done;
    if (stat(out_dir, &st) || !S_ISDIR(st.st_mode) || access(out_dir, W_OK)) {
        kv_fail(&err, "%s: not a writable directory", out_dir);
        goto done;
    }
    if (sqlite3_prepare_v2(store_handle(store), SAMPLES_SQL, -1, &samples, NULL) != SQLITE_OK) {
        kv_fail(&err, "%s: %s", db_path, sqlite3_errmsg(store_handle(store)));
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (!groups[i].n) continue;
        if (write_group(out_dir, &groups[i], samples, db_path, &err)) goto done;
        written++;
    }
    printf("kvbench export: %d result directories from %s -> %s/ (%d groups without a scored row left out)\n",
           written, db_path, out_dir, n - n_scored);
    rc = 0;
done:
    if (rc) fprintf(stderr, "kvbench export: %s\n", err.msg);
    sqlite3_finalize(samples);
    groups_free(groups, n);
    if (store) store_close(store);
    return rc;
}
