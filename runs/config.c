/* config.c — reads and validates a sweep configuration (schema: configs/README.md).
 *
 * Validation is strict and happens here, all of it, before the runner touches a model: every object has a
 * fixed set of keys, every value a type and a range, policies and tasks are checked against their registries.
 * Error messages name the file and the JSON path of the key ("configs/x.json: datasets[1].tasks[0]: ..."). */
#include "config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/dataset.h"
#include "../metrics/fragility.h"
#include "../engine/jsonfile.h"
#include "../engine/num.h"
#include "../policies/duo.h"
#include "memplan.h"
#include "util.h"

/* ---------------------------------------------------------------- small helpers */

static char *dup_str(const char *s, KvErr *err) {
    size_t n = strlen(s) + 1;
    char *d = kv_malloc(n, err);
    if (d) memcpy(d, s, n);
    return d;
}

char *config_expand_env(const char *text, KvErr *err) {
    size_t cap = strlen(text) + 1, n = 0;
    char *out = kv_malloc(cap, err);
    if (!out) return NULL;
    for (const char *p = text; *p;) {
        const char *piece = p;
        size_t piece_len = 1;
        if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p + 2, '}');
            if (!end) {
                free(out);
                kv_fail(err, "unterminated '${' in \"%s\"", text);
                return NULL;
            }
            char name[256];
            size_t name_len = (size_t)(end - (p + 2));
            if (name_len == 0 || name_len >= sizeof name) {
                free(out);
                kv_fail(err, "bad variable name in \"%s\"", text);
                return NULL;
            }
            memcpy(name, p + 2, name_len);
            name[name_len] = 0;
            piece = getenv(name);
            if (!piece) {
                free(out);
                kv_fail(err, "environment variable %s is not set (used in \"%s\"; where the models and data come from: "
                        "configs/README.md, section \"Data and models\")", name, text);
                return NULL;
            }
            piece_len = strlen(piece);
            p = end + 1;
        } else {
            p++;
        }
        if (n + piece_len + 1 > cap) {
            cap = 2 * (n + piece_len + 1);
            char *grown = realloc(out, cap);
            if (!grown) {
                free(out);
                kv_fail(err, "out of memory expanding \"%s\"", text);
                return NULL;
            }
            out = grown;
        }
        memcpy(out + n, piece, piece_len);
        n += piece_len;
    }
    out[n] = 0;
    return out;
}

/* The parse context: file name for messages, the JSON path of the object being read. */
typedef struct {
    const char *file;
    KvErr *err;
} Ctx;

static int bad(const Ctx *c, const char *where, const char *what) {
    return kv_fail(c->err, "%s: %s: %s", c->file, where, what);
}

static int check_keys(const Ctx *c, const cJSON *obj, const char *where, const char *const *allowed) {
    if (!cJSON_IsObject(obj)) return bad(c, where, "expected an object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(it->string, *a);
        if (!ok) {
            char list[512] = "";
            for (const char *const *a = allowed; *a; a++) {
                if (a != allowed) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, *a, sizeof list - strlen(list) - 1);
            }
            return kv_fail(c->err, "%s: %s: unknown key '%s' (allowed: %s)", c->file, where, it->string, list);
        }
    }
    return 0;
}

static void path_join(char *out, size_t n, const char *where, const char *key) {
    snprintf(out, n, "%s%s%s", where, *where ? "." : "", key);
}

/* Reads an optional string; *out stays NULL when absent. expand: ${VAR} substitution (paths). */
static int get_string(const Ctx *c, const cJSON *obj, const char *where, const char *key, int expand, char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char at[256];
    path_join(at, sizeof at, where, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return bad(c, at, "expected a string");
    if (!v->valuestring[0]) return bad(c, at, "must not be empty");
    if (!expand) return (*out = dup_str(v->valuestring, c->err)) ? 0 : -1;
    *out = config_expand_env(v->valuestring, c->err);
    return *out ? 0 : kv_wrap(c->err, "%s: %s", c->file, at);
}

/* "memory_limit": a size ("8GiB", runs/memplan.h's units) or a number of bytes. */
static int parse_memory_limit(const Ctx *c, const cJSON *root, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "memory_limit");
    if (!v) return 0;
    if (cJSON_IsNumber(v) && v->valuedouble >= 1 && isfinite(v->valuedouble)) {
        *out = floor(v->valuedouble);
        return 0;
    }
    if (!cJSON_IsString(v)) return bad(c, "memory_limit", "expected a size such as \"8GiB\" or a number of bytes");
    if (memplan_parse_bytes(v->valuestring, "memory_limit", out, c->err)) return kv_wrap(c->err, "%s", c->file);
    return 0;
}

/* A string key with two values: *out = 0 for `first` (also when absent), 1 for `second`. */
static int get_choice(const Ctx *c, const cJSON *obj, const char *key, const char *first, const char *second,
                      int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char msg[160];
    if (!v) return 0;
    if (cJSON_IsString(v) && (!strcmp(v->valuestring, first) || !strcmp(v->valuestring, second))) {
        *out = !strcmp(v->valuestring, second);
        return 0;
    }
    snprintf(msg, sizeof msg, "expected \"%s\" or \"%s\"", first, second);
    return bad(c, key, msg);
}

static int get_number(const Ctx *c, const cJSON *obj, const char *where, const char *key, double lo, double hi,
                      int integer, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char at[256], msg[160];
    path_join(at, sizeof at, where, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad(c, at, integer ? "expected an integer" : "expected a number");
    long long whole;
    NumCheck r = integer ? num_integer(v->valuedouble, lo, hi, &whole)
                         : v->valuedouble >= lo && v->valuedouble <= hi ? NUM_OK : NUM_OUT_OF_RANGE;
    if (r == NUM_NOT_INTEGER) return bad(c, at, "expected an integer");
    if (r == NUM_OUT_OF_RANGE) {
        snprintf(msg, sizeof msg, "%g is out of range [%.16g, %.16g]", v->valuedouble, lo, hi);
        return bad(c, at, msg);
    }
    *out = v->valuedouble;
    return 0;
}

static int get_int(const Ctx *c, const cJSON *obj, const char *where, const char *key, int lo, int hi, int *out) {
    double d = *out;
    if (get_number(c, obj, where, key, lo, hi, 1, &d)) return -1;
    *out = (int)d;
    return 0;
}

static int get_bool(const Ctx *c, const cJSON *obj, const char *where, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char at[256];
    path_join(at, sizeof at, where, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad(c, at, "expected true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A required non-empty array at obj[key]. */
static const cJSON *get_array(const Ctx *c, const cJSON *obj, const char *where, const char *key, int required) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char at[256];
    path_join(at, sizeof at, where, key);
    if (!v) {
        if (required) bad(c, at, "missing (required)");
        return NULL;
    }
    if (!cJSON_IsArray(v) || !v->child) {
        bad(c, at, "expected a non-empty array");
        return NULL;
    }
    return v;
}

/* ---------------------------------------------------------------- sections */

/* A model's "cpu" object: its backend options, each checked here so that a bad value stops the run before
 * anything loads. */
static int parse_cpu_options(const Ctx *c, const cJSON *model, const char *where, RunModel *m) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(model, "cpu");
    const char *keys[BACKEND_N_OPTIONS + 1] = {NULL};
    char at[256];
    if (!o) return 0;
    for (int k = 0; k < BACKEND_N_OPTIONS; k++) keys[k] = BACKEND_OPTION_NAMES[k];
    path_join(at, sizeof at, where, "cpu");
    if (check_keys(c, o, at, keys)) return -1;
    BackendOptions checked = {0};
    for (int k = 0; k < BACKEND_N_OPTIONS; k++) {
        if (get_string(c, o, at, keys[k], 0, &m->cpu[k])) return -1;
        if (backend_option_set(&checked, (BackendOptionKey)k, m->cpu[k], c->err))
            return kv_wrap(c->err, "%s: %s.%s", c->file, at, keys[k]);
    }
    return 0;
}

static int parse_model(const Ctx *c, const cJSON *o, const char *where, RunModel *m) {
    static const char *const keys[] = {"path", "name", "backend", "tokenizer", "duo_attention_patterns", "cpu", NULL};
    char at[256];
    if (check_keys(c, o, where, keys)) return -1;
    if (get_string(c, o, where, "path", 1, &m->path) || get_string(c, o, where, "name", 0, &m->name) ||
        get_string(c, o, where, "backend", 0, &m->backend) || get_string(c, o, where, "tokenizer", 1, &m->tokenizer) ||
        get_string(c, o, where, "duo_attention_patterns", 1, &m->duo_patterns) || parse_cpu_options(c, o, where, m))
        return -1;
    path_join(at, sizeof at, where, "path");
    if (!m->path) return bad(c, at, "missing (required)");
    if (!m->backend && !(m->backend = dup_str("cpu", c->err))) return -1;
    if (strcmp(m->backend, "cpu") && strcmp(m->backend, "cuda")) {
        path_join(at, sizeof at, where, "backend");
        return bad(c, at, "expected \"cpu\" or \"cuda\"");
    }
    if (!m->name) {
        const char *base = m->path + strlen(m->path);
        while (base > m->path && base[-1] == '/') base--;
        const char *end = base;
        while (base > m->path && base[-1] != '/') base--;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(end - base), base);
        if (!(m->name = dup_str(name, c->err))) return -1;
    }
    return 0;
}

static int parse_dataset(const Ctx *c, const cJSON *o, const char *where, RunDataset *d) {
    static const char *const keys[] = {"suite", "tasks", "data_path", "fraction", "first_n", "seed", "target_tokens",
                                       "n_samples", "depths", "lengths", "skip_bad_lines", "chat_template",
                                       "ruler_sizing", NULL};
    char at[256];
    double seed = 42;
    int chat = -1;
    if (check_keys(c, o, where, keys)) return -1;
    if (get_string(c, o, where, "suite", 0, &d->suite) || get_string(c, o, where, "data_path", 1, &d->data_path) ||
        get_number(c, o, where, "fraction", 0, 1, 0, &d->fraction) ||
        get_int(c, o, where, "first_n", 0, 1 << 30, &d->first_n) ||
        get_number(c, o, where, "seed", 0, 9007199254740992.0, 1, &seed) ||
        get_int(c, o, where, "target_tokens", 0, 1 << 24, &d->target_tokens) ||
        get_int(c, o, where, "n_samples", 0, 1 << 24, &d->n_samples) ||
        get_bool(c, o, where, "skip_bad_lines", &d->skip_bad_lines) || get_bool(c, o, where, "chat_template", &chat))
        return -1;
    d->seed = (unsigned long long)seed;
    d->chat = chat < 0 ? RUN_CHAT_SUITE : chat ? RUN_CHAT_ON : RUN_CHAT_OFF;
    path_join(at, sizeof at, where, "suite");
    if (!d->suite) return bad(c, at, "missing (required)");
    char *sizing = NULL;
    if (get_string(c, o, where, "ruler_sizing", 0, &sizing)) return -1;
    if (sizing) {
        int unit = !strcmp(sizing, "unit"), reference = !strcmp(sizing, "reference");
        free(sizing);
        path_join(at, sizeof at, where, "ruler_sizing");
        if (!unit && !reference) return bad(c, at, "expected \"reference\" (the default) or \"unit\"");
        if (strcmp(d->suite, "ruler")) return bad(c, at, "applies to the ruler suite only");
        d->ruler_unit_sizing = unit;
    }
    const cJSON *tasks = get_array(c, o, where, "tasks", 1);
    if (!tasks) return -1;
    d->n_tasks = cJSON_GetArraySize(tasks);
    if (!(d->tasks = kv_calloc((size_t)d->n_tasks, sizeof *d->tasks, c->err))) return -1;
    int i = 0;
    for (const cJSON *t = tasks->child; t; t = t->next, i++) {
        char spec[256];
        snprintf(at, sizeof at, "%s.tasks[%d]", where, i);
        if (!cJSON_IsString(t)) return bad(c, at, "expected a task name");
        snprintf(spec, sizeof spec, "%s:%s", d->suite, t->valuestring);
        if (!dataset_task_known(spec, c->err)) return kv_wrap(c->err, "%s: %s", c->file, at);
        if (!(d->tasks[i] = dup_str(t->valuestring, c->err))) return -1;
    }
    const cJSON *depths = cJSON_GetObjectItemCaseSensitive(o, "depths");
    if (depths && !(depths = get_array(c, o, where, "depths", 1))) return -1;
    if (depths) {
        d->n_depths = cJSON_GetArraySize(depths);
        if (!(d->depths = kv_calloc((size_t)d->n_depths, sizeof *d->depths, c->err))) return -1;
        i = 0;
        for (const cJSON *t = depths->child; t; t = t->next, i++) {
            snprintf(at, sizeof at, "%s.depths[%d]", where, i);
            if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble > 100)
                return bad(c, at, "expected a depth percent in [0, 100]");
            d->depths[i] = t->valuedouble;
        }
    }
    const cJSON *lengths = cJSON_GetObjectItemCaseSensitive(o, "lengths");
    if (lengths && !(lengths = get_array(c, o, where, "lengths", 1))) return -1;
    if (lengths) {
        d->n_lengths = cJSON_GetArraySize(lengths);
        if (!(d->lengths = kv_calloc((size_t)d->n_lengths, sizeof *d->lengths, c->err))) return -1;
        i = 0;
        for (const cJSON *t = lengths->child; t; t = t->next, i++) {
            snprintf(at, sizeof at, "%s.lengths[%d]", where, i);
            long long n = 0;
            NumCheck r = cJSON_IsNumber(t) ? num_integer(t->valuedouble, 1, 1 << 24, &n) : NUM_NOT_INTEGER;
            if (r == NUM_OUT_OF_RANGE) return bad(c, at, "context length out of range [1, 16777216] tokens");
            if (r) return bad(c, at, "expected a context length in tokens (a positive integer)");
            d->lengths[i] = (int)n;
        }
    }
    return 0;
}

/* Appends a variant unless an identical one is already there (e.g. "default" and the policy's own
 * aggregation named explicitly). */
static int add_variant(RunConfig *cfg, const RunVariant *v, int *cap, KvErr *err) {
    for (int i = 0; i < cfg->n_variants; i++) {
        const RunVariant *o = &cfg->variants[i];
        if (policy_configs_equal(&o->policy, &v->policy) && !strcmp(o->budget_label, v->budget_label) &&
            !strcmp(o->params, v->params))
            return 0;
    }
    if (cfg->n_variants == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        RunVariant *grown = realloc(cfg->variants, (size_t)*cap * sizeof *grown);
        if (!grown) return kv_fail(err, "out of memory");
        cfg->variants = grown;
    }
    cfg->variants[cfg->n_variants++] = *v;
    return 0;
}

static int parse_budget(const Ctx *c, const cJSON *b, const char *at, Budget *out, char *label, size_t label_n) {
    char text[64];
    if (cJSON_IsString(b)) snprintf(text, sizeof text, "%s", b->valuestring);
    else if (cJSON_IsNumber(b)) snprintf(text, sizeof text, "%.17g", b->valuedouble);
    else return bad(c, at, "expected a budget such as \"20%\", 0.2 or \"512tok\"");
    if (budget_parse(text, out, c->err)) return kv_wrap(c->err, "%s: %s", c->file, at);
    if (out->tokens > 0) snprintf(label, label_n, "%dtok", out->tokens);
    else snprintf(label, label_n, "%g%%", out->keep_fraction * 100.0);
    return 0;
}

/* obj["window"]: one observation window or several (the fragility analysis compares w = 1 with w = 32); an
 * attention-scored policy runs once per window. Absent: *windows stays as it is. */
static int parse_windows(const Ctx *c, const cJSON *obj, const char *where, int *windows, int *n_windows) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(obj, "window");
    char at[256];
    path_join(at, sizeof at, where, "window");
    if (!w) return 0;
    if (cJSON_IsNumber(w)) {
        *n_windows = 1;
        return get_int(c, obj, where, "window", 1, 1 << 20, &windows[0]);
    }
    if (!cJSON_IsArray(w) || !w->child || cJSON_GetArraySize(w) > CONFIG_MAX_WINDOWS)
        return bad(c, at, "expected an integer or a non-empty array of at most 8 integers");
    int i = 0;
    for (const cJSON *x = w->child; x; x = x->next, i++) {
        char item[300];
        snprintf(item, sizeof item, "%s[%d]", at, i);
        long long v = 0;
        NumCheck r = cJSON_IsNumber(x) ? num_integer(x->valuedouble, 1, 1 << 20, &v) : NUM_NOT_INTEGER;
        if (r == NUM_OUT_OF_RANGE) {
            char msg[96];
            snprintf(msg, sizeof msg, "%g is out of range [1, 1048576]", x->valuedouble);
            return bad(c, item, msg);
        }
        if (r) return bad(c, item, "expected an integer in [1, 1048576]");
        windows[i] = (int)v;
    }
    *n_windows = i;
    return 0;
}

/* The "trace" section of `kvbench trace`: {"steps": N, "importance": "attention" | "value_weighted"}. */
static int parse_trace(const Ctx *c, const cJSON *root, int *steps, int *importance) {
    static const char *const keys[] = {"steps", "importance", NULL};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "trace");
    char *imp = NULL;
    if (!t) return 0;
    if (check_keys(c, t, "trace", keys) || get_int(c, t, "trace", "steps", 1, 1 << 20, steps) ||
        get_string(c, t, "trace", "importance", 0, &imp))
        return -1;
    if (!cJSON_GetObjectItemCaseSensitive(t, "steps")) return bad(c, "trace.steps", "missing (required)");
    Importance parsed = IMPORTANCE_ATTENTION;
    KvErr why = {{0}};
    int rc = imp && importance_parse(imp, &parsed, &why) ? bad(c, "trace.importance", why.msg) : 0;
    free(imp);
    *importance = (int)parsed;
    return rc;
}

/* The ladder's steps an entry may set (policy.h LadderParams, docs/ladder.md). */
static const char *const LADDER_PARAMS[] = {"pooling", "group", "forced", "safeguard", "weighting", "allocation"};
#define N_LADDER_PARAMS (int)(sizeof LADDER_PARAMS / sizeof LADDER_PARAMS[0])

/* Sets the ladder steps entry p names on a configured variant; a string each, or true/false for the safeguard.
 * Errors name the file, the key and the policy. */
static int apply_ladder(const Ctx *c, const cJSON *p, const char *where, PolicyConfig *pc) {
    for (int i = 0; cJSON_IsObject(p) && i < N_LADDER_PARAMS; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, LADDER_PARAMS[i]);
        if (!v) continue;
        char at[256];
        path_join(at, sizeof at, where, LADDER_PARAMS[i]);
        int safeguard = !strcmp(LADDER_PARAMS[i], "safeguard");
        const char *text = cJSON_IsString(v)                ? v->valuestring
                           : cJSON_IsBool(v) && safeguard ? (cJSON_IsTrue(v) ? "on" : "off")
                                                          : NULL;
        if (!text) return bad(c, at, "expected a string (the safeguard: true or false)");
        KvErr why = {{0}};
        if (policy_set_param(pc, LADDER_PARAMS[i], text, &why)) return bad(c, at, why.msg);
    }
    return 0;
}

/* One policies[] entry: a name, or {"name", "aggregations", "window", "pool_kernel", "intended_window_bias",
 * "ties_by_unclamped", and the ladder's "pooling", "group", "forced", "safeguard", "weighting", "allocation"}
 * (defaults: the top-level keys), expanded over its aggregations, windows (attention-scored policies) and the
 * budgets. Policies with different windows still share one prefill (runs/prepare.c observes the largest window
 * and hands each policy its last rows). */
static int parse_policy(const Ctx *c, const cJSON *p, const char *where, const cJSON *default_aggs,
                        const int *default_windows, int n_windows, int pool_kernel, const cJSON *budgets,
                        RunConfig *cfg, int *cap) {
    static const char *const keys[] = {"name",      "aggregations", "window",    "pool_kernel", "intended_window_bias",
                                       "ties_by_unclamped", "pooling", "group",  "forced",      "safeguard",
                                       "weighting", "allocation",   NULL};
    char at[256];
    const char *name;
    const cJSON *aggs = default_aggs;
    int intended = 0, ties_unclamped = 0, explicit_aggs = 0, windows[CONFIG_MAX_WINDOWS];
    memcpy(windows, default_windows, sizeof(int) * (size_t)n_windows);
    if (cJSON_IsString(p)) {
        name = p->valuestring;
    } else {
        if (check_keys(c, p, where, keys)) return -1;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(p, "name");
        path_join(at, sizeof at, where, "name");
        if (!cJSON_IsString(n)) return bad(c, at, n ? "expected a string" : "missing (required)");
        name = n->valuestring;
        if (cJSON_GetObjectItemCaseSensitive(p, "aggregations")) {
            if (!(aggs = get_array(c, p, where, "aggregations", 1))) return -1;
            explicit_aggs = 1;
        }
        if (parse_windows(c, p, where, windows, &n_windows) ||
            get_int(c, p, where, "pool_kernel", 1, 1 << 10, &pool_kernel) ||
            get_bool(c, p, where, "intended_window_bias", &intended) ||
            get_bool(c, p, where, "ties_by_unclamped", &ties_unclamped))
            return -1;
    }
    PolicyConfig probe;
    if (policy_config(&probe, name, NULL, c->err)) return kv_wrap(c->err, "%s: %s", c->file, where);
    int uses_attention = policy_needs_attention(&probe), aggregates = policy_aggregates(&probe);
    int n_aggs = aggregates || explicit_aggs ? cJSON_GetArraySize(aggs) : 1;
    int n_w = uses_attention ? n_windows : 1;
    for (int i = 0; i < n_aggs * n_w; i++) {
        int a = i / n_w, window = windows[i % n_w];
        const cJSON *agg = aggregates || explicit_aggs ? cJSON_GetArrayItem(aggs, a) : NULL;
        snprintf(at, sizeof at, "%s%saggregations[%d]", explicit_aggs ? where : "", explicit_aggs ? "." : "", a);
        if (agg && !cJSON_IsString(agg)) return bad(c, at, "expected an aggregation name");
        RunVariant v;
        memset(&v, 0, sizeof v);
        if (policy_config(&v.policy, name, agg ? agg->valuestring : NULL, c->err))
            return kv_wrap(c->err, "%s: %s", c->file, agg ? at : where);
        if (uses_attention) {
            v.policy.window = window;
            v.policy.pool_kernel = pool_kernel;
            v.policy.intended_window_bias = intended;
            /* The tie order only matters where the prior clamps: other aggregations keep their plain key. */
            v.policy.ties_by_unclamped = ties_unclamped && v.policy.aggregation == AGG_MAX_PRIOR;
        }
        if (apply_ladder(c, p, where, &v.policy)) return -1;
        if (policy_row_params_text(&v.policy, v.params, sizeof v.params))
            return kv_fail(c->err, "%s: %s: the policy's parameters do not fit in a row's key", c->file, where);
        if (policy_keeps_all(&v.policy)) {
            v.budget.keep_fraction = 1.0;
            snprintf(v.budget_label, sizeof v.budget_label, "full");
            if (add_variant(cfg, &v, cap, c->err)) return -1;
            continue;
        }
        if (!budgets) return kv_fail(c->err, "%s: budgets: missing (required by policy '%s')", c->file, name);
        int b = 0;
        for (const cJSON *bj = budgets->child; bj; bj = bj->next, b++) {
            snprintf(at, sizeof at, "budgets[%d]", b);
            if (parse_budget(c, bj, at, &v.budget, v.budget_label, sizeof v.budget_label)) return -1;
            if (add_variant(cfg, &v, cap, c->err)) return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the whole file */

int config_parse(RunConfig *cfg, const char *file, const char *text, KvErr *err) {
    static const char *const keys[] = {"name", "description", "db", "models", "datasets", "policies",
                                       "aggregations", "budgets", "compress_question", "max_new_tokens",
                                       "window", "pool_kernel", "trace", "stop_rule", "over_length", "memory_limit",
                                       "decode_samples", NULL};
    Ctx c = {file, err};
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = kv_parse_json(text, strlen(text), file, err);
    if (!root) return -1;
    int rc = -1, cap = 0, windows[CONFIG_MAX_WINDOWS] = {32}, n_windows = 1, pool_kernel = 5;
    const cJSON *aggs = NULL, *budgets = NULL, *list;
    if (!(cfg->file = dup_str(file, err)) || !(cfg->text = dup_str(text, err))) goto done;
    if (check_keys(&c, root, "(top level)", keys)) goto done;
    if (get_string(&c, root, "", "name", 0, &cfg->name) || get_string(&c, root, "", "db", 1, &cfg->db) ||
        get_bool(&c, root, "", "compress_question", &cfg->compress_question) ||
        get_int(&c, root, "", "max_new_tokens", 0, 1 << 20, &cfg->max_new_tokens) ||
        parse_windows(&c, root, "", windows, &n_windows) ||
        parse_trace(&c, root, &cfg->trace_steps, &cfg->trace_importance) ||
        get_int(&c, root, "", "pool_kernel", 1, 1 << 10, &pool_kernel) ||
        get_choice(&c, root, "stop_rule", "reference", "any_token", &cfg->stop_any_token) ||
        get_choice(&c, root, "over_length", "run", "error", &cfg->over_length_error) ||
        parse_memory_limit(&c, root, &cfg->memory_limit) ||
        get_int(&c, root, "", "decode_samples", 1, CONFIG_MAX_DECODE_SAMPLES, &cfg->decode_samples))
        goto done;
    const cJSON *description = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (description && !cJSON_IsString(description)) {
        bad(&c, "description", "expected a string");
        goto done;
    }
    if (!cfg->name) {
        const char *base = strrchr(file, '/');
        base = base ? base + 1 : file;
        size_t n = strlen(base);
        if (n > 5 && !strcmp(base + n - 5, ".json")) n -= 5;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)n, base);
        if (!(cfg->name = dup_str(name, err))) goto done;
    }

    if (!(list = get_array(&c, root, "", "models", 1))) goto done;
    cfg->n_models = cJSON_GetArraySize(list);
    if (!(cfg->models = kv_calloc((size_t)cfg->n_models, sizeof *cfg->models, err))) goto done;
    for (int i = 0; i < cfg->n_models; i++) {
        char where[64];
        snprintf(where, sizeof where, "models[%d]", i);
        if (parse_model(&c, cJSON_GetArrayItem(list, i), where, &cfg->models[i])) goto done;
        for (int j = 0; j < i; j++)
            if (!strcmp(cfg->models[j].name, cfg->models[i].name)) {
                bad(&c, where, "two models with the same name (set \"name\" to tell them apart)");
                goto done;
            }
    }

    if (!(list = get_array(&c, root, "", "datasets", 1))) goto done;
    cfg->n_datasets = cJSON_GetArraySize(list);
    if (!(cfg->datasets = kv_calloc((size_t)cfg->n_datasets, sizeof *cfg->datasets, err))) goto done;
    for (int i = 0; i < cfg->n_datasets; i++) {
        char where[64];
        snprintf(where, sizeof where, "datasets[%d]", i);
        cfg->datasets[i].seed = 42;
        if (parse_dataset(&c, cJSON_GetArrayItem(list, i), where, &cfg->datasets[i])) goto done;
    }

    if (cJSON_GetObjectItemCaseSensitive(root, "aggregations") && !(aggs = get_array(&c, root, "", "aggregations", 1)))
        goto done;
    if (cJSON_GetObjectItemCaseSensitive(root, "budgets") && !(budgets = get_array(&c, root, "", "budgets", 1)))
        goto done;
    cJSON *default_aggs = NULL;
    if (!aggs) {
        default_aggs = cJSON_CreateArray();
        cJSON_AddItemToArray(default_aggs, cJSON_CreateString("default"));
        aggs = default_aggs;
    }
    if (!(list = get_array(&c, root, "", "policies", 1))) {
        cJSON_Delete(default_aggs);
        goto done;
    }
    int i = 0, failed = 0;
    for (const cJSON *p = list->child; p && !failed; p = p->next, i++) {
        char where[64];
        snprintf(where, sizeof where, "policies[%d]", i);
        if (!cJSON_IsString(p) && !cJSON_IsObject(p)) failed = bad(&c, where, "expected a policy name or object");
        else failed = parse_policy(&c, p, where, aggs, windows, n_windows, pool_kernel, budgets, cfg, &cap);
    }
    cJSON_Delete(default_aggs);
    if (failed) goto done;
    /* A policy that reads what a model's backend does not observe is refused here, before anything loads. */
    for (int m = 0; m < cfg->n_models; m++)
        for (int v = 0; v < cfg->n_variants; v++) {
            const RunModel *rm = &cfg->models[m];
            const char *missing = policy_missing_observation(&cfg->variants[v].policy, backend_observes(rm->backend));
            if (missing) {
                kv_fail(err, "%s: models[%d] '%s': policy %s needs %s, which backend %s does not observe", file, m,
                        rm->name, cfg->variants[v].policy.name, missing, rm->backend);
                goto done;
            }
        }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) config_free(cfg);
    return rc;
}

int config_load(RunConfig *cfg, const char *path, KvErr *err) {
    char *text = kv_read_file(path, NULL, err);
    memset(cfg, 0, sizeof *cfg);
    if (!text) return -1;
    int rc = config_parse(cfg, path, text, err);
    free(text);
    return rc;
}

void config_free(RunConfig *cfg) {
    for (int i = 0; i < cfg->n_models; i++) {
        free(cfg->models[i].path);
        free(cfg->models[i].name);
        free(cfg->models[i].backend);
        free(cfg->models[i].tokenizer);
        free(cfg->models[i].duo_patterns);
        for (int k = 0; k < BACKEND_N_OPTIONS; k++) free(cfg->models[i].cpu[k]);
    }
    for (int i = 0; i < cfg->n_datasets; i++) {
        RunDataset *d = &cfg->datasets[i];
        for (int t = 0; t < d->n_tasks; t++) free(d->tasks[t]);
        free(d->tasks);
        free(d->suite);
        free(d->data_path);
        free(d->depths);
        free(d->lengths);
    }
    free(cfg->models);
    free(cfg->datasets);
    free(cfg->variants);
    free(cfg->file);
    free(cfg->text);
    free(cfg->name);
    free(cfg->db);
    memset(cfg, 0, sizeof *cfg);
}

/* ---------------------------------------------------------------- DuoAttention per model */

static int runs_duo(const RunConfig *cfg) {
    for (int v = 0; v < cfg->n_variants; v++)
        if (policy_needs_duo_pattern(&cfg->variants[v].policy)) return 1;
    return 0;
}

int config_duo_na(const RunConfig *cfg, const RunModel *m) {
    return runs_duo(cfg) && m->duo_patterns && !strcmp(m->duo_patterns, "none");
}

int config_variant_runs(const RunConfig *cfg, const RunModel *m, int v) {
    return !(config_duo_na(cfg, m) && policy_needs_duo_pattern(&cfg->variants[v].policy));
}

int config_duo_pattern_dir(const RunConfig *cfg, const RunModel *m, char *dir, size_t n, KvErr *err) {
    if (!runs_duo(cfg) || config_duo_na(cfg, m)) return 0;
    if (m->duo_patterns) {
        snprintf(dir, n, "%s", m->duo_patterns);
        return 1;
    }
    const char *root = util_duo_patterns_dir();
    int found = duo_pattern_find(root, m->name, m->path, dir, n, err);
    if (found) return found;
    char shipped[512];
    duo_pattern_shipped(root, shipped, sizeof shipped);
    return kv_fail(err, "policy duoattention needs the model's DuoAttention head pattern and none is shipped for it "
                        "(shipped in %s: %s); set \"duo_attention_patterns\": FOLDER (full_attention_heads.tsv + "
                        "config.json) on the model entry, or \"none\" to record its duoattention cells as N/A",
                   root, shipped);
}
