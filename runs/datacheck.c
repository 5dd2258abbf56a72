/* datacheck.c — checks every input of a configuration before a run (datacheck.h), and the modelled GPU estimate.
 *
 * Unset environment variables are found on the raw JSON first, each one reported; the strings that use them are
 * rewritten without the reference so that config.c can still validate the rest, and the checks that would need
 * their value are skipped (the variable's line already says what is wrong). */
#include "datacheck.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../datasets/dataset.h"
#include "../engine/backend.h"
#include "../engine/jsonfile.h"
#include "../engine/model.h"
#include "../engine/tokenizer.h"
#include "../policies/duo.h"
#include "config.h"
#include "estimate.h"
#include "util.h"

#define MAX_TAINTED 64
#define WHERE_DATA "(where to get each dataset and model: configs/README.md, \"Data and models\")"

/* The keys whose values config.c expands ${VAR} in (get_string with expand). */
static const char *const EXPANDED_KEYS[] = {"path", "tokenizer", "data_path", "db", NULL};

/* Words → tokens when no tokenizer is at hand (the model is absent): Llama-3.1's tokenizer on the shipped
 * LongBench subsets, multi_news (prose: 521,622 tokens / 378,597 words) and lcc (code: 320,308 / 126,043). */
#define TOKENS_PER_WORD_PROSE 1.38
#define TOKENS_PER_WORD_CODE 2.54

static double default_tokens_per_word(const char *task) {
    return !strcmp(task, "lcc") || !strcmp(task, "repobench-p") ? TOKENS_PER_WORD_CODE : TOKENS_PER_WORD_PROSE;
}

typedef struct {
    const DataCheckOptions *opt;
    DataCheckResult *res;
    const char *file;
    char tainted[MAX_TAINTED][96];  /* JSON paths of values that name an unset variable */
    int n_tainted;
} Check;

static void report(Check *c, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(Check *c, const char *kind, const char *fmt, ...) {
    if (!strcmp(kind, "problem")) c->res->problems++;
    else if (!strcmp(kind, "warning")) c->res->warnings++;
    else if (!c->opt->list_ok) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(c->opt->out, "%s: ", kind);
    vfprintf(c->opt->out, fmt, ap);
    fputc('\n', c->opt->out);
    va_end(ap);
}

static int is_tainted(const Check *c, const char *where) {
    for (int i = 0; i < c->n_tainted; i++)
        if (!strcmp(c->tainted[i], where)) return 1;
    return 0;
}

/* ---------------------------------------------------------------- environment variables */

/* Reports every unset ${NAME} in s->valuestring and rewrites those references as "<NAME unset>". */
static int check_variables(Check *c, cJSON *s, const char *where) {
    const char *text = s->valuestring;
    size_t cap = strlen(text) * 2 + 64, n = 0;
    char *out = malloc(cap);
    int unset = 0;
    if (!out) {
        report(c, "problem", "%s: %s: out of memory", c->file, where);
        return -1;
    }
    for (const char *p = text; *p;) {
        const char *end = p[0] == '$' && p[1] == '{' ? strchr(p + 2, '}') : NULL;
        size_t len = end ? (size_t)(end - (p + 2)) : 0;
        char name[256];
        if (!end || len == 0 || len >= sizeof name) { /* config.c reports malformed references */
            out[n++] = *p++;
            continue;
        }
        memcpy(name, p + 2, len);
        name[len] = 0;
        const char *piece = p;
        size_t piece_len = (size_t)(end + 1 - p);
        char marker[300];
        if (!getenv(name)) {
            report(c, "problem", "%s: %s: environment variable %s is not set (used in \"%s\"; where the models and "
                   "data come from: configs/README.md, section \"Data and models\")", c->file, where, name, text);
            snprintf(marker, sizeof marker, "<%s unset>", name);
            piece = marker;
            piece_len = strlen(marker);
            unset = 1;
        }
        if (n + piece_len + 1 > cap) {
            char *grown = realloc(out, cap = 2 * (n + piece_len + 1));
            if (!grown) {
                free(out);
                report(c, "problem", "%s: %s: out of memory", c->file, where);
                return -1;
            }
            out = grown;
        }
        memcpy(out + n, piece, piece_len);
        n += piece_len;
        p = end + 1;
    }
    out[n] = 0;
    int rc = 0;
    if (unset) {
        if (c->n_tainted < MAX_TAINTED) snprintf(c->tainted[c->n_tainted++], sizeof c->tainted[0], "%s", where);
        if (!cJSON_SetValuestring(s, out)) rc = -1;
    }
    free(out);
    return rc;
}

static void walk_variables(Check *c, cJSON *node, const char *where) {
    int i = 0;
    for (cJSON *it = node->child; it; it = it->next, i++) {
        char at[96];
        if (cJSON_IsArray(node)) snprintf(at, sizeof at, "%s[%d]", where, i);
        else snprintf(at, sizeof at, "%s%s%s", where, *where ? "." : "", it->string);
        int expanded = 0;
        for (const char *const *k = EXPANDED_KEYS; *k && cJSON_IsObject(node); k++) expanded |= !strcmp(*k, it->string);
        if (cJSON_IsString(it) && expanded && strstr(it->valuestring, "${")) check_variables(c, it, at);
        else if (cJSON_IsObject(it) || cJSON_IsArray(it)) walk_variables(c, it, at);
    }
}

/* The config parsed with unset variables reported and blanked out; -1 (reported) when it does not parse. */
static int load_config(Check *c, RunConfig *cfg) {
    KvErr err = {{0}};
    char *text = kv_read_file(c->file, NULL, &err);
    if (!text) {
        report(c, "problem", "%s", err.msg);
        return -1;
    }
    cJSON *root = cJSON_Parse(text);
    char *printed = NULL;
    if (root) {
        walk_variables(c, root, "");
        printed = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
    }
    /* Unparsable JSON goes to config_parse as it is, for its line-numbered message. */
    int rc = config_parse(cfg, c->file, printed ? printed : text, &err);
    if (rc) report(c, "problem", "%s", err.msg);
    free(printed);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- models */

/* A Hugging Face index that names no shard loads no weights: refuse it here (model_load_config does not read
 * the weight map's entries). */
static void check_hf_index(Check *c, int i, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK)) return;
    KvErr err;
    cJSON *j = kv_read_json(path, &err);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!j) report(c, "problem", "%s: models[%d].path: %s", c->file, i, err.msg);
    else if (!cJSON_IsObject(map) || !map->child)
        report(c, "problem", "%s: models[%d].path: %s: the weight_map names no shard", c->file, i, path);
    cJSON_Delete(j);
}

/* Loads the model's configuration and tokenizer (never its weights); NULL when it cannot (reported). */
/* The model's DuoAttention head pattern, where the config runs duoattention for it: found (given or shipped),
 * readable, and of the model's shape (m NULL: the shape is not known here). */
static void check_duo(Check *c, const RunConfig *cfg, int i, const Model *m) {
    const RunModel *rm = &cfg->models[i];
    char dir[1100];
    KvErr err = {{0}};
    DuoPattern duo;
    int has = config_duo_pattern_dir(cfg, rm, dir, sizeof dir, &err);
    if (has < 0 || (has == 1 && duo_pattern_load(&duo, dir, &err))) {
        report(c, "problem", "%s: models[%d] '%s': %s", c->file, i, rm->name, err.msg);
        return;
    }
    if (has == 0) {
        if (config_duo_na(cfg, rm)) report(c, "ok", "models[%d] %s: duoattention N/A (its cells are skipped)", i, rm->name);
        return;
    }
    if (m && (duo.n_layers != m->cfg.n_layers || duo.n_kv_heads != m->cfg.n_kv_heads))
        report(c, "problem", "%s: models[%d] '%s': the DuoAttention pattern %s has %d layers x %d kv-heads, the model %d x %d",
               c->file, i, rm->name, duo.source, duo.n_layers, duo.n_kv_heads, m->cfg.n_layers, m->cfg.n_kv_heads);
    else
        report(c, "ok", "models[%d] %s: DuoAttention pattern %s", i, rm->name, duo.source);
    duo_pattern_free(&duo);
}

static Model *check_model(Check *c, const RunConfig *cfg, int i) {
    const RunModel *rm = &cfg->models[i];
    char where[64];
    if (strcmp(rm->backend, "cpu") && !strstr(backend_available(), rm->backend))
        report(c, "problem", "%s: models[%d].backend: '%s' is not in this build (available: %s)", c->file, i,
               rm->backend, backend_available());
    snprintf(where, sizeof where, "models[%d].tokenizer", i);
    Tokenizer *own = NULL;
    KvErr err = {{0}};
    int tokenizer_ok = 1;
    if (rm->tokenizer && !is_tainted(c, where) && tokenizer_load(&own, rm->tokenizer, &err)) {
        report(c, "problem", "%s: %s: %s", c->file, where, err.msg);
        tokenizer_ok = 0;
    }
    tokenizer_free(own);
    snprintf(where, sizeof where, "models[%d].path", i);
    if (is_tainted(c, where)) {
        check_duo(c, cfg, i, NULL);
        return NULL;
    }
    struct stat st = {0};
    Model *m = NULL;
    int synthetic = !strncmp(rm->path, "synthetic:", 10);
    if (!synthetic && stat(rm->path, &st)) {
        report(c, "problem", "%s: %s: %s: %s %s", c->file, where, rm->path, strerror(errno), WHERE_DATA);
        check_duo(c, cfg, i, NULL);
        return NULL;
    }
    if (model_load_config(&m, rm->path, &err)) {
        report(c, "problem", "%s: %s: %s", c->file, where, err.msg);
        check_duo(c, cfg, i, NULL);
        return NULL;
    }
    if (!synthetic && S_ISDIR(st.st_mode)) check_hf_index(c, i, rm->path);
    if (!m->tokenizer && !rm->tokenizer)
        report(c, "problem", "%s: models[%d]: '%s' has no tokenizer (a synthetic model needs \"tokenizer\": PATH)",
               c->file, i, rm->name);
    for (int d = 0; d < cfg->n_datasets; d++)
        if (cfg->datasets[d].chat == RUN_CHAT_ON && m->cfg.chat == CHAT_NONE)
            report(c, "problem", "%s: datasets[%d].chat_template: model '%s' has no chat template", c->file, d,
                   rm->name);
    check_duo(c, cfg, i, m);
    if (tokenizer_ok)
        report(c, "ok", "models[%d] %s: %d layers, %d heads / %d kv-heads, max context %d, tokenizer %s", i, rm->name,
               m->cfg.n_layers, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.max_context,
               rm->tokenizer ? rm->tokenizer : m->tokenizer_kind);
    return m;
}

/* The shape of a model that is not at hand, from its name or path, for the estimate only. */
static int shape_from_name(const RunModel *rm, ModelConfig *out) {
    static const char *const SHAPES[][2] = {{"llama-3.1-8b", "llama-3.1-8b"}, {"mistral-7b", "mistral-7b-v0.3"},
                                            {"qwen2.5-32b", "qwen2.5-32b"}, {"smollm2-135m", "smollm2-135m"}};
    char text[2048];
    snprintf(text, sizeof text, "%s %s", rm->name, rm->path);
    for (char *p = text; *p; p++) *p = (char)tolower((unsigned char)*p);
    KvErr err;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        if (strstr(text, SHAPES[s][0])) return model_shape_by_name(SHAPES[s][1], out, &err);
    return -1;
}

/* ---------------------------------------------------------------- the estimate's inputs */

/* LongBench v1's published statistics (THUDM/LongBench, LongBench/README.md "Task statistics": average words
 * per sample, samples per task) and its max new tokens (datasets/assets/longbench/dataset2maxlen.json), for the
 * estimate when the data is not at hand. */
static const struct {
    const char *task;
    int avg_words, samples, max_new;
} LB_PUBLISHED[] = {
    {"narrativeqa", 18409, 200, 128},  {"qasper", 3619, 200, 128},          {"multifieldqa_en", 4559, 150, 64},
    {"hotpotqa", 9151, 200, 32},       {"2wikimqa", 4887, 200, 32},         {"musique", 11214, 200, 32},
    {"gov_report", 8734, 200, 512},    {"qmsum", 10614, 200, 512},          {"multi_news", 2113, 200, 512},
    {"trec", 5177, 200, 64},           {"triviaqa", 8209, 200, 32},         {"samsum", 6258, 200, 128},
    {"passage_count", 11141, 200, 32}, {"passage_retrieval_en", 9289, 200, 32}, {"lcc", 1235, 500, 64},
    {"repobench-p", 4206, 500, 64},
};

/* Per model: the accumulating estimate and how its lengths were obtained. */
typedef struct {
    ModelConfig cfg;
    int have_cfg;
    const Tokenizer *tok;   /* NULL: default_tokens_per_word */
    Estimate est;
    int published;          /* some LongBench lengths are published averages */
    int failed;             /* the estimate ran out of memory (err says so) */
    KvErr err;
} ModelEstimate;

/* One sample's lengths in words (LongBench) or its target in tokens (RULER, NIAH); cap_tokens: LongBench's
 * middle truncation (target_tokens in the config), which the run applies in tokens to context + question. */
typedef struct {
    int ctx_words, q_words, target_tokens, max_new, cap_tokens;
} SampleLength;

static int words(const char *text) {
    int n = 0;
    dataset_count_words(NULL, text, &n, NULL);
    return n;
}

static int count_tokens(const Tokenizer *tok, const char *text, int *n) {
    TokenIds ids = {0};
    KvErr err;
    int rc = tokenizer_encode(tok, text, strlen(text), 1, &ids, &err);
    *n = ids.n;
    ids_free(&ids);
    return rc;
}

/* The distinct scorings of the variants that run on rm: a sweep scores each once (runs/prepare.c). */
static int count_scorings(const RunConfig *cfg, const RunModel *rm) {
    int n = 0;
    for (int v = 0; v < cfg->n_variants; v++) {
        const PolicyConfig *p = &cfg->variants[v].policy;
        if (!config_variant_runs(cfg, rm, v) || !policy_needs_attention(p)) continue;
        int seen = 0;
        for (int u = 0; u < v && !seen; u++) {
            const PolicyConfig *o = &cfg->variants[u].policy;
            /* the same policy at another budget scores the same way too */
            seen = config_variant_runs(cfg, rm, u) && policy_configs_score_equal(p, o);
        }
        n += !seen;
    }
    return n;
}

static void estimate_task(ModelEstimate *me, const RunConfig *cfg, const RunModel *rm, const SampleLength *len,
                          int n, double tokens_per_word) {
    int window = 0, nv = 0, n_scorings = count_scorings(cfg, rm);
    for (int v = 0; v < cfg->n_variants; v++)
        if (policy_needs_attention(&cfg->variants[v].policy) && cfg->variants[v].policy.window > window)
            window = cfg->variants[v].policy.window;
    double *keep = malloc((size_t)(cfg->n_variants ? cfg->n_variants : 1) * sizeof *keep);
    if (!keep) return;
    for (int i = 0; i < n; i++) {
        const SampleLength *s = &len[i];
        int G = s->max_new, q = (int)lround(s->q_words * tokens_per_word);
        if (cfg->max_new_tokens > 0 && cfg->max_new_tokens < G) G = cfg->max_new_tokens;
        /* RULER and NIAH fit context + question (+ RULER's answer room) to the target */
        int L = s->target_tokens > 0 ? s->target_tokens - q : (int)lround(s->ctx_words * tokens_per_word);
        if (s->cap_tokens > 0 && L > s->cap_tokens - q) L = s->cap_tokens - q;
        if (L < 1) L = 1;
        nv = 0;
        for (int v = 0; v < cfg->n_variants; v++) {
            const RunVariant *x = &cfg->variants[v];
            if (!config_variant_runs(cfg, rm, v)) continue;
            keep[nv++] = policy_keep_share(&x->policy, &x->budget, L);
        }
        if (estimate_add(&me->est, &me->cfg, &DEVICE_H200, L, q, G, keep, nv, window, n_scorings, &me->err))
            me->failed = 1;
    }
    free(keep);
}

/* A LongBench task whose data is missing: every sample at the published average length. */
static void estimate_published(const RunConfig *cfg, const RunDataset *rd, const char *task, ModelEstimate *models) {
    for (size_t k = 0; k < sizeof LB_PUBLISHED / sizeof LB_PUBLISHED[0]; k++) {
        if (strcmp(LB_PUBLISHED[k].task, task)) continue;
        int n = LB_PUBLISHED[k].samples;
        if (rd->fraction > 0) n = (int)lround(rd->fraction * n);
        if (rd->first_n > 0 && rd->first_n < n) n = rd->first_n;
        SampleLength *len = calloc((size_t)(n ? n : 1), sizeof *len);
        for (int i = 0; len && i < n; i++)
            len[i] = (SampleLength){LB_PUBLISHED[k].avg_words, 0, 0, LB_PUBLISHED[k].max_new, rd->target_tokens};
        for (int m = 0; len && m < cfg->n_models; m++)
            if (models[m].have_cfg) {
                models[m].published = 1;
                estimate_task(&models[m], cfg, &cfg->models[m], len, n, default_tokens_per_word(task));
            }
        free(len);
    }
}

/* ---------------------------------------------------------------- datasets */

/* Opens one task as the run would, builds its first sample, and (estimate) collects every sample's length. */
static void check_task(Check *c, const RunConfig *cfg, int d, int t, ModelEstimate *models) {
    const RunDataset *rd = &cfg->datasets[d];
    char spec[256], where[64];
    snprintf(spec, sizeof spec, "%s:%s", rd->suite, rd->tasks[t]);
    int is_longbench = !strcmp(rd->suite, "longbench");
    snprintf(where, sizeof where, "datasets[%d].data_path", d);
    /* An unset variable in data_path is reported: LongBench's estimate goes on with its published lengths, the
     * other suites' tasks are checked without the path (a task that would have read it is not judged). */
    int path_unknown = is_tainted(c, where);
    if (path_unknown && is_longbench) {
        if (c->opt->estimate) estimate_published(cfg, rd, rd->tasks[t], models);
        return;
    }
    DatasetOptions o = {path_unknown ? NULL : rd->data_path, c->opt->assets_dir, rd->fraction, rd->first_n, rd->seed,
                        rd->target_tokens, rd->n_samples, rd->depths, rd->n_depths, rd->lengths, rd->n_lengths,
                        rd->skip_bad_lines, rd->ruler_unit_sizing, dataset_count_words, NULL};
    Dataset *ds = NULL;
    KvErr err = {{0}};
    if (dataset_open(&ds, spec, &o, &err)) {
        report(c, "problem", "%s: datasets[%d].tasks[%d]: %s%s%s", c->file, d, t, err.msg,
               is_longbench ? " " : "", is_longbench ? WHERE_DATA : "");
        if (c->opt->estimate && is_longbench) estimate_published(cfg, rd, rd->tasks[t], models);
        return;
    }
    int n = dataset_count(ds);
    Sample s;
    if (n < 1) {
        report(c, "problem", "%s: datasets[%d].tasks[%d] %s: no samples selected", c->file, d, t, spec);
    } else if (dataset_get(ds, 0, &s, &err)) {
        report(c, "problem", "%s: datasets[%d].tasks[%d] %s: sample 0: %s", c->file, d, t, spec, err.msg);
    } else {
        if (strcmp(s.task, rd->tasks[t]) && !path_unknown)
            report(c, "warning",
                   "%s: datasets[%d] %s runs as the labelled substitute '%s' (%s); its rows are stored under that "
                   "name. For RULER's own task give data_path %s",
                   c->file, d, spec, s.task, s.note ? s.note : "no source data",
                   WHERE_DATA);
        if (dataset_skipped(ds) > 0)
            report(c, "warning", "%s: datasets[%d] %s: %d malformed lines skipped (skip_bad_lines)", c->file, d, spec,
                   dataset_skipped(ds));
        if (!path_unknown || !strcmp(s.task, rd->tasks[t])) report(c, "ok", "datasets[%d] %s: %d samples", d, spec, n);
        if (c->opt->estimate) {
            SampleLength *len = calloc((size_t)n, sizeof *len);
            int max_new = s.max_new_tokens, filled = 0;
            /* LongBench: every sample's words; the needle: every cell's target (the grid's lengths); RULER: its
             * one target, less the room RULER leaves for the answer */
            for (int i = 0; len && i < n; i++, filled++) {
                Sample x;
                int ruler = !strcmp(rd->suite, "ruler");
                if (ruler) {
                    len[i] = (SampleLength){0, 0, (rd->target_tokens > 0 ? rd->target_tokens : 4096) - max_new, max_new, 0};
                    continue;
                }
                if (i > 0 && dataset_get(ds, i, &x, &err)) break;
                const Sample *y = i > 0 ? &x : &s;
                len[i] = is_longbench ? (SampleLength){words(y->context), words(y->question), 0, max_new, rd->target_tokens}
                                      : (SampleLength){0, 0, y->target_tokens, max_new, 0};
                if (i > 0) sample_free(&x);
            }
            for (int m = 0; len && m < cfg->n_models; m++) {
                if (!models[m].have_cfg) continue;
                double ratio = default_tokens_per_word(rd->tasks[t]);
                int a, b;
                if (is_longbench && models[m].tok && !count_tokens(models[m].tok, s.context, &a) &&
                    !count_tokens(models[m].tok, s.question, &b) && words(s.context) + words(s.question) > 0)
                    ratio = (double)(a + b) / (words(s.context) + words(s.question));
                estimate_task(&models[m], cfg, &cfg->models[m], len, filled, ratio);
            }
            free(len);
        }
        sample_free(&s);
    }
    dataset_close(ds);
}

/* ---------------------------------------------------------------- the database */

static void check_db(Check *c, const RunConfig *cfg) {
    const char *db = c->opt->db ? c->opt->db : cfg->db, *key = c->opt->db ? "--db" : "db";
    if (!db || (!c->opt->db && is_tainted(c, "db"))) return;
    struct stat st;
    if (!stat(db, &st)) {
        if (!S_ISREG(st.st_mode) || access(db, R_OK | W_OK))
            report(c, "problem", "%s: %s: %s is not a readable and writable file", c->file, key, db);
        return;
    }
    /* the nearest existing directory above it must let the run create the rest */
    KvErr err;
    if (util_check_creatable(db, &err))
        report(c, "problem", "%s: %s: %s", c->file, key, err.msg);
}

/* ---------------------------------------------------------------- the estimate's report */

static const char *duration(double s, char *buf, size_t n) {
    if (s < 120) snprintf(buf, n, "%.0f s", s);
    else if (s < 7200) snprintf(buf, n, "%.0f min", s / 60);
    else snprintf(buf, n, "%.1f h", s / 3600);
    return buf;
}

static void print_estimates(Check *c, const RunConfig *cfg, const ModelEstimate *models) {
    const DeviceModel *dev = &DEVICE_H200;
    FILE *f = c->opt->out;
    fprintf(f, "estimate on one %s — modelled from token counts at rates measured on it (%s): matrix products "
               "%.0f TFLOP/s, prefill attention %.0f TFLOP/s, decode weight reads %.1f TB/s and K/V reads %.2f TB/s "
               "(views x%.2f), %.0f GB; the policies' scoring and selection at the lender's 16 host cores; every "
               "answer is taken to run to its max new tokens (an upper bound); formulas in runs/estimate.h and "
               "docs/gpu.md\n",
            dev->name, dev->source, dev->matrix_flops / 1e12, dev->attention_flops / 1e12, dev->weight_bw / 1e12,
            dev->kv_bw / 1e12, dev->view_kv_cost, dev->memory_bytes / 1e9);
    if (dev->unmeasured) fprintf(f, "estimate: not measured on a GPU yet: %s\n", dev->unmeasured);
    for (int m = 0; m < cfg->n_models; m++) {
        const ModelEstimate *me = &models[m];
        const Estimate *e = &me->est;
        const char *name = cfg->models[m].name;
        if (strcmp(cfg->models[m].backend, "cuda")) {
            fprintf(f, "estimate %s: none (backend %s: the estimate is for the cuda backend)\n", name,
                    cfg->models[m].backend);
            continue;
        }
        if (!me->have_cfg) {
            fprintf(f, "estimate %s: none (its shape is unknown without the model)\n", name);
            continue;
        }
        int n_run = 0;
        for (int v = 0; v < cfg->n_variants; v++) n_run += config_variant_runs(cfg, &cfg->models[m], v);
        int window = 0;
        double *keep = malloc((size_t)(cfg->n_variants ? cfg->n_variants : 1) * sizeof *keep);
        for (int v = 0, k = 0; keep && v < cfg->n_variants; v++) {
            const RunVariant *x = &cfg->variants[v];
            if (!config_variant_runs(cfg, &cfg->models[m], v)) continue;
            keep[k++] = policy_keep_share(&x->policy, &x->budget, 0);
            if (policy_needs_attention(&x->policy) && x->policy.window > window) window = x->policy.window;
        }
        KvErr err = me->err;
        if (!keep && !me->failed) kv_fail(&err, "out of memory");
        double max_context =
            keep && !me->failed ? estimate_max_context(&me->cfg, dev, keep, n_run, window, 0, &err) : -1;
        double one_batch = max_context < 0 ? -1 : estimate_max_context(&me->cfg, dev, keep, n_run, window, 1, &err);
        free(keep);
        if (max_context < 0 || one_batch < 0) {
            report(c, "problem", "%s: model '%s': the estimate: %s", c->file, name, err.msg);
            continue;
        }
        char a[32], o[32], b[32], c3[32], t[32];
        fprintf(f,
                "estimate %s: %ld samples, %lld context tokens (longest %d), %d variants each: prefill %s, "
                "observation and selection %s, question %s, decode <= %s, total <= %s; peak memory %.1f GB (weights %.1f GB); %ld decode batches, "
                "at most %d per sample; %ld samples decode on views of the prefill, %ld on gathered copies (where "
                "they fit as few batches)%s\n",
                name, e->samples, e->context_tokens, e->longest_context, n_run,
                duration(e->prefill_s, a, sizeof a), duration(e->observe_s, o, sizeof o),
                duration(e->feed_s, b, sizeof b), duration(e->decode_s, c3, sizeof c3),
                duration(e->prefill_s + e->observe_s + e->feed_s + e->decode_s, t, sizeof t),
                e->peak_bytes / 1e9, e->weights_bytes / 1e9, e->batches, e->most_batches,
                e->samples - e->samples_copies, e->samples_copies,
                me->published ? "; LongBench lengths partly from its published averages (data not at hand: the "
                                "longest samples, hence the peak, are longer)"
                              : "");
        if (e->samples_unfit == 0)
            fprintf(f, "estimate %s: every sample fits one %.0f GB device; its %d variants fit up to a context of "
                       "about %.0f tokens (in one decode batch up to about %.0f)\n", name, dev->memory_bytes / 1e9,
                    n_run, max_context, one_batch);
        else
            fprintf(f, "estimate %s: %ld samples do not fit one %.0f GB device (a variant does not fit beside the "
                       "prefill's cache: their rows would be errors); the longest that fits has %d tokens, and its %d "
                       "variants fit up to a context of about %.0f tokens (in one decode batch up to about %.0f)\n",
                    name, e->samples_unfit, dev->memory_bytes / 1e9, e->longest_fit, n_run, max_context, one_batch);
        if (e->samples_unfit > 0)
            report(c, "warning",
                   "%s: model '%s': %ld of %ld samples (the longest %d tokens) do not fit the %s's %.0f GB even one "
                   "variant per decode batch; samples up to about %.0f tokens fit",
                   c->file, name, e->samples_unfit, e->samples, e->longest_context, dev->name,
                   dev->memory_bytes / 1e9, max_context);
    }
}

/* ---------------------------------------------------------------- the whole check */

void datacheck_config(const char *config_path, const DataCheckOptions *opt, DataCheckResult *res) {
    Check c = {opt, res, config_path, {{0}}, 0};
    memset(res, 0, sizeof *res);
    RunConfig cfg;
    if (load_config(&c, &cfg)) return;
    if (opt->trace && cfg.trace_steps < 1)
        report(&c, "problem", "%s: no \"trace\" section (kvbench trace needs e.g. \"trace\": {\"steps\": 64})",
               config_path);
    ModelEstimate *models = calloc((size_t)cfg.n_models, sizeof *models);
    Model **loaded = calloc((size_t)cfg.n_models, sizeof *loaded);
    if (!models || !loaded) {
        report(&c, "problem", "%s: out of memory", config_path);
    } else {
        for (int i = 0; i < cfg.n_models; i++) {
            loaded[i] = check_model(&c, &cfg, i);
            if (loaded[i]) {
                models[i].cfg = loaded[i]->cfg;
                models[i].have_cfg = 1;
                models[i].tok = loaded[i]->tokenizer;
            } else {
                models[i].have_cfg = !shape_from_name(&cfg.models[i], &models[i].cfg);
            }
        }
        for (int d = 0; d < cfg.n_datasets; d++)
            for (int t = 0; t < cfg.datasets[d].n_tasks; t++) check_task(&c, &cfg, d, t, models);
        check_db(&c, &cfg);
        if (opt->estimate) print_estimates(&c, &cfg, models);
    }
    for (int i = 0; loaded && i < cfg.n_models; i++) model_free(loaded[i]);
    free(loaded);
    free(models);
    config_free(&cfg);
}
