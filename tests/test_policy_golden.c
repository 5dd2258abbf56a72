/* test_policy_golden.c — every policy against the reference press code's golden vectors
 * (tests/data/policy_golden/README.md; directory from env POLICY_GOLDEN).
 *
 * Per case: observation_prepare on the stored inputs, then the intermediates (attention, SnapKV scores,
 * value norms, CAKE scores and layer figures, DefensiveKV's aggregated scores, stage-1 counts and final
 * scores) within a relative error of each array's max — 1e-5 for float32 cases, 3e-2 for bfloat16 cases,
 * which the reference ran with bf16 rounding at every step — and every run's keep-set: exact for float32
 * (the stored tie-low result where a run is tie-sensitive), an overlap of at least 95% of the kept entries
 * for bfloat16. One line per failing run on stderr. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/observation.h"
#include "../policies/policy_internal.h"
#include "test.h"

#define F32_TOL 1e-5
#define BF16_TOL 3e-2
#define BF16_MIN_OVERLAP 0.95

/* Reported at the end: the worst float32 intermediate error and the smallest bf16 overlap seen. */
static double worst_f32_error, min_bf16_overlap = 1.0;

typedef struct {
    char dir[1024];
    cJSON *manifest;
    int bf16;
    int N, H, K, d, D, L, w, P;
    float *q, *k, *v, *w_o;
    Observation *obs;  /* [N] prepared */
} Case;

static void *load_raw(const char *dir, const char *file, size_t count, size_t elem, KvErr *err) {
    char path[1300];
    snprintf(path, sizeof path, "%.1000s/%.255s", dir, file);
    size_t len = 0;
    char *buf = kv_read_file(path, &len, err);
    if (!buf) return NULL;
    if (len != count * elem) {
        kv_fail(err, "%s: %zu bytes, expected %zu", path, len, count * elem);
        free(buf);
        return NULL;
    }
    return buf;
}

static int shape_int(const cJSON *shapes, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(shapes, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static double item(const cJSON *arr, int i) { return cJSON_GetArrayItem(arr, i)->valuedouble; }

/* max |a-b| / max|ref| over n entries, row by row with a stride (to compare prefix columns). */
static double rel_error(const float *got, size_t got_stride, const float *ref, size_t ref_stride, size_t rows,
                        size_t cols) {
    double mx = 0.0, diff = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double x = ref[r * ref_stride + c], y = got[r * got_stride + c];
            mx = fabs(x) > mx ? fabs(x) : mx;
            diff = fabs(x - y) > diff ? fabs(x - y) : diff;
        }
    return diff / (mx > 0 ? mx : 1.0);
}

static int case_open(Case *c, const char *dir, KvErr *err) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%.1000s", dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = kv_read_file(path, NULL, err);
    if (!text) return -1;
    c->manifest = cJSON_Parse(text);
    free(text);
    if (!c->manifest) return kv_fail(err, "%s: not valid JSON", path);
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(c->manifest, "shapes");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(c->manifest, "compute_dtype");
    c->bf16 = cJSON_IsString(dtype) && !strcmp(dtype->valuestring, "bfloat16");
    c->N = shape_int(shapes, "n_layers"), c->H = shape_int(shapes, "n_heads"), c->K = shape_int(shapes, "n_kv_heads");
    c->d = shape_int(shapes, "head_dim"), c->D = shape_int(shapes, "hidden_size"), c->L = shape_int(shapes, "seq_len");
    c->w = shape_int(shapes, "window");
    c->P = c->L - c->w;
    if (c->N < 1 || c->H < 1 || c->K < 1 || c->d < 1 || c->D < 1 || c->L < 1 || c->w < 1)
        return kv_fail(err, "%s: missing or invalid shapes", path);
    size_t N = c->N, H = c->H, K = c->K, d = c->d, L = c->L, w = c->w, D = c->D;
    if (!(c->q = load_raw(dir, "q_win.f32", N * H * w * d, 4, err)) ||
        !(c->k = load_raw(dir, "k.f32", N * K * L * d, 4, err)) ||
        !(c->v = load_raw(dir, "v.f32", N * K * L * d, 4, err)) ||
        !(c->w_o = load_raw(dir, "w_o.f32", N * D * H * d, 4, err)))
        return -1;
    c->obs = calloc(N, sizeof *c->obs);
    for (int l = 0; l < c->N; l++) {
        const float **keys = malloc(sizeof(float *) * K * 2);
        for (size_t kh = 0; kh < K; kh++) {
            keys[kh] = c->k + ((size_t)l * K + kh) * L * d;
            keys[K + kh] = c->v + ((size_t)l * K + kh) * L * d;
        }
        c->obs[l] = (Observation){.layer = l, .n_layers = c->N, .L = c->L, .w = c->w, .H = c->H, .K = c->K,
                                  .d = c->d, .D = c->D, .q_win = c->q + (size_t)l * H * w * d, .keys = keys,
                                  .values = keys + K, .w_o = c->w_o + (size_t)l * D * H * d};
        if (observation_prepare(&c->obs[l], 1, err)) return -1;
    }
    return 0;
}

static void case_close(Case *c) {
    for (int l = 0; c->obs && l < c->N; l++) {
        observation_release(&c->obs[l]);
        free((void *)c->obs[l].keys);
    }
    free(c->obs);
    free(c->q), free(c->k), free(c->v), free(c->w_o);
    cJSON_Delete(c->manifest);
}

/* Compares one per-layer array of the golden file `file` ([N][rows][cols]) with what fill() gives. */
static void check_array(TestCounts *tc, const Case *c, const char *file, const float *got_all, size_t rows,
                        size_t cols, size_t got_layer_stride, size_t got_row_stride) {
    KvErr err;
    float *ref = load_raw(c->dir, file, (size_t)c->N * rows * cols, 4, &err);
    CHECK(tc, ref != NULL, "%s", err.msg);
    if (!ref) return;
    double worst = 0.0;
    for (int l = 0; l < c->N; l++) {
        double e =
            rel_error(got_all + l * got_layer_stride, got_row_stride, ref + (size_t)l * rows * cols, cols, rows, cols);
        worst = e > worst ? e : worst;
    }
    double tol = c->bf16 ? BF16_TOL : F32_TOL;
    if (!c->bf16 && worst > worst_f32_error) worst_f32_error = worst;
    CHECK(tc, worst <= tol, "%s: %s: relative error %.3g > %.0e", c->dir, file, worst, tol);
    free(ref);
}

/* Scores every layer with one configuration; out[N] (caller frees with layer_scores_free). */
static int score_all(const Case *c, const char *policy, const char *agg, LayerScores *out, PolicyConfig *cfg) {
    KvErr err;
    if (policy_config(cfg, policy, agg, &err)) return -1;
    cfg->window = c->w;
    for (int l = 0; l < c->N; l++)
        if (score_layer(policy_row(policy), cfg, &c->obs[l], &out[l], &err)) {
            fprintf(stderr, "%s: %s\n", c->dir, err.msg);
            return -1;
        }
    return 0;
}

static void check_intermediates(TestCounts *tc, const Case *c) {
    const size_t N = c->N, K = c->K, L = c->L, P = c->P, H = c->H, w = c->w;
    float *buf = malloc(sizeof(float) * N * H * w * L);
    /* attention, prefix columns, and the value norms over all L. */
    for (size_t l = 0; l < N; l++) memcpy(buf + l * H * w * L, c->obs[l].attn, sizeof(float) * H * w * L);
    check_array(tc, c, "attn.f32", buf, H * w, P, H * w * L, L);
    for (size_t l = 0; l < N; l++) memcpy(buf + l * K * L, c->obs[l].value_norm, sizeof(float) * K * L);
    check_array(tc, c, "criti_nu.f32", buf, K, L, K * L, L);
    check_array(tc, c, "def_nu.f32", buf, K, P, K * L, L);

    LayerScores *ls = calloc(N, sizeof *ls);
    PolicyConfig cfg;
    if (!score_all(c, "snapkv", NULL, ls, &cfg)) {
        for (size_t l = 0; l < N; l++) memcpy(buf + l * K * L, ls[l].score, sizeof(float) * K * L);
        check_array(tc, c, "snapkv_scores.f32", buf, K, L, K * L, L);
    }
    for (size_t l = 0; l < N; l++) layer_scores_free(&ls[l]);
    if (!score_all(c, "cake", NULL, ls, &cfg)) {
        for (size_t l = 0; l < N; l++) memcpy(buf + l * K * P, ls[l].score, sizeof(float) * K * P);
        check_array(tc, c, "cake_hh_scores.f32", buf, K, P, K * P, P);
    }
    for (size_t l = 0; l < N; l++) layer_scores_free(&ls[l]);
    static const char *const aggs[] = {"max+prior", "max", "mean"};
    static const char *const files[] = {"def_delta_maxprior.f32", "def_delta_max.f32", "def_delta_mean.f32"};
    for (int a = 0; a < 3; a++) {
        if (!score_all(c, "defensivekv", aggs[a], ls, &cfg)) {
            for (size_t l = 0; l < N; l++) memcpy(buf + l * K * P, ls[l].delta, sizeof(float) * K * P);
            check_array(tc, c, files[a], buf, K, P, K * P, P);
            if (a == 0) {
                for (size_t l = 0; l < N; l++) memcpy(buf + l * K * P, ls[l].abar, sizeof(float) * K * P);
                check_array(tc, c, "def_abar.f32", buf, K, P, K * P, P);
            }
        }
        for (size_t l = 0; l < N; l++) layer_scores_free(&ls[l]);
    }
    free(ls);
    free(buf);
}

/* Run id prefix -> kvbench policy and aggregation. */
static const struct {
    const char *prefix, *policy, *aggregation;
} RUN_POLICIES[] = {
    {"streaming_llm", "streamingllm", NULL},    {"snapkv", "snapkv", NULL},
    {"adasnapkv", "adakv", NULL},               {"criti_adasnapkv", "criticalkv", NULL},
    {"cake_global", "cake", NULL},              {"efficient_defensivekv", "defensivekv", NULL},
    {"efficient_layer_defensivekv", "layer-defensivekv", NULL},
    {"defensivekv_agg_mean", "defensivekv", "mean"}, {"defensivekv_agg_max", "defensivekv", "max"},
};
#define N_RUN_POLICIES (int)(sizeof RUN_POLICIES / sizeof RUN_POLICIES[0])

/* Layer figures of CAKE and the DefensiveKV family, against the run's "layer" object. */
static void check_layer_figures(TestCounts *tc, const Case *c, const cJSON *run, int p, const LayerScores *ls,
                                double f) {
    const char *id = cJSON_GetObjectItemCaseSensitive(run, "id")->valuestring;
    const cJSON *layer = cJSON_GetObjectItemCaseSensitive(run, "layer");
    double tol = c->bf16 ? BF16_TOL : F32_TOL;
    if (!strcmp(RUN_POLICIES[p].policy, "cake")) {
        const cJSON *ent = cJSON_GetObjectItemCaseSensitive(layer, "entropy");
        const cJSON *var = cJSON_GetObjectItemCaseSensitive(layer, "variance_sum");
        const cJSON *pref = cJSON_GetObjectItemCaseSensitive(layer, "preference");
        const cJSON *raw = cJSON_GetObjectItemCaseSensitive(layer, "raw_budgets");
        const cJSON *bud = cJSON_GetObjectItemCaseSensitive(layer, "layer_budgets");
        double prefs[64], raws[64];
        int budgets[64];
        int ok = 1;
        for (int l = 0; l < c->N; l++) {
            ok &= test_close(ls[l].entropy, item(ent, l), tol, fabs(item(ent, l)));
            ok &= test_close(ls[l].variance_sum, item(var, l), tol, fabs(item(var, l)));
            ok &= test_close(ls[l].preference, item(pref, l), tol, fabs(item(pref, l)));
            prefs[l] = ls[l].preference;
        }
        int total = (int)num(layer, "total_prefix_budget");
        CHECK(tc, total == (int)((c->L * f - c->w) * c->N), "%s: total prefix budget %d", id, total);
        cake_layer_budgets(prefs, c->N, total, c->P, raws, budgets);
        for (int l = 0; l < c->N; l++) {
            ok &= test_close(raws[l], item(raw, l), tol, fabs(item(raw, l)));
            if (!c->bf16) ok &= budgets[l] == (int)item(bud, l);
        }
        CHECK(tc, ok, "%s: CAKE layer figures differ", id);
        return;
    }
    if (strstr(RUN_POLICIES[p].policy, "defensivekv") == NULL) return;
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(layer, "window_bias");
    const cJSON *thr = cJSON_GetObjectItemCaseSensitive(layer, "threshold");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(layer, "layer_max_M");
    int ok = 1;
    for (int l = 0; l < c->N; l++) {
        ok &= test_close(ls[l].window_bias, item(bias, l), tol, 1.0);
        ok &= test_close(ls[l].threshold, item(thr, l), tol, 1.0);
        ok &= test_close(ls[l].layer_max, item(mx, l), tol, fabs(item(mx, l)));
    }
    CHECK(tc, ok, "%s: DefensiveKV layer figures (window bias, threshold, M) differ", id);
    if (c->bf16) return;
    /* stage-1 forced counts and the final per-layer scores */
    KvErr err;
    char file[256];
    snprintf(file, sizeof file, "%s.n_forced.i32", id);
    int *forced = load_raw(c->dir, file, (size_t)c->N * c->K, 4, &err);
    CHECK(tc, forced != NULL, "%s", err.msg);
    for (int l = 0; forced && l < c->N; l++)
        for (int k = 0; k < c->K; k++)
            CHECK(tc, defensive_forced_count(&ls[l], k, c->P, c->w, f) == forced[l * c->K + k],
                  "%s: layer %d head %d forces %d, reference %d", id, l, k,
                  defensive_forced_count(&ls[l], k, c->P, c->w, f), forced[l * c->K + k]);
    free(forced);
    float *scores = malloc(sizeof(float) * c->N * c->K * c->L);
    for (int l = 0; l < c->N; l++)
        defensive_layer_scores(&ls[l], c->K, c->L, c->w, f, scores + (size_t)l * c->K * c->L);
    snprintf(file, sizeof file, "%s.scores.f32", id);
    check_array(tc, c, file, scores, c->K, c->L, (size_t)c->K * c->L, c->L);
    free(scores);
}

static int compare_keep(const Case *c, const cJSON *run, const KeepSet *ks, char *why, size_t why_n) {
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(run, "outputs");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(out, "kept_positions_tie_low");
    const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(out, "kept_counts_tie_low");
    if (!pos || c->bf16) {
        pos = cJSON_GetObjectItemCaseSensitive(out, "kept_positions");
        cnt = cJSON_GetObjectItemCaseSensitive(out, "kept_counts");
    }
    KvErr err;
    int total = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pos, "shape"), 0)->valueint;
    int *ref = load_raw(c->dir, cJSON_GetObjectItemCaseSensitive(pos, "file")->valuestring, (size_t)total, 4, &err);
    int *counts =
        load_raw(c->dir, cJSON_GetObjectItemCaseSensitive(cnt, "file")->valuestring, (size_t)c->N * c->K, 4, &err);
    if (!ref || !counts) {
        snprintf(why, why_n, "%.200s", err.msg);
        free(ref), free(counts);
        return 0;
    }
    int shared = 0, same_counts = ks->total == total, off = 0;
    for (int s = 0; s < c->N * c->K; s++) {
        same_counts &= ks->counts[s] == counts[s];
        /* both segments sorted ascending: count the common positions */
        const int *a = ks->positions + ks->offsets[s], *b = ref + off;
        for (int i = 0, j = 0; i < ks->counts[s] && j < counts[s];) {
            if (a[i] == b[j]) shared++, i++, j++;
            else if (a[i] < b[j]) i++;
            else j++;
        }
        off += counts[s];
    }
    free(ref), free(counts);
    if (c->bf16) {
        double overlap = total ? (double)shared / total : 1.0;
        if (overlap < min_bf16_overlap) min_bf16_overlap = overlap;
        snprintf(why, why_n, "overlap %.3f of %d kept (bf16 reference)", overlap, total);
        return overlap >= BF16_MIN_OVERLAP;
    }
    snprintf(why, why_n, "%d kept (reference %d), %d shared, counts %s", ks->total, total, shared,
             same_counts ? "equal" : "differ");
    return same_counts && shared == total;
}

static void check_runs(TestCounts *tc, const Case *c) {
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c->manifest, "runs");
    int n_runs = cJSON_GetArraySize(runs), matched = 0;
    for (int p = 0; p < N_RUN_POLICIES; p++) {
        KvErr err;
        PolicyConfig cfg;
        PolicyState *st = NULL;
        CHECK(tc, policy_config(&cfg, RUN_POLICIES[p].policy, RUN_POLICIES[p].aggregation, &err) == 0, "%s", err.msg);
        cfg.window = c->w;
        CHECK(tc, policy_begin(&st, &cfg, c->N, c->K, c->L, &err) == 0, "%s", err.msg);
        for (int l = 0; st && l < c->N; l++) CHECK(tc, policy_observe(st, &c->obs[l], &err) == 0, "%s", err.msg);
        LayerScores *ls = calloc((size_t)c->N, sizeof *ls);
        int scored = score_all(c, RUN_POLICIES[p].policy, RUN_POLICIES[p].aggregation, ls, &cfg) == 0;
        for (const cJSON *run = runs->child; run && st; run = run->next) {
            const char *id = cJSON_GetObjectItemCaseSensitive(run, "id")->valuestring;
            size_t plen = strlen(RUN_POLICIES[p].prefix);
            if (strncmp(id, RUN_POLICIES[p].prefix, plen) || strncmp(id + plen, "_cr", 3)) continue;
            matched++;
            double ratio = num(run, "compression_ratio");
            Budget b = {.keep_fraction = 1.0 - ratio};
            double f = budget_keep_fraction(&b, c->L);
            CHECK(tc, f == num(run, "keep_fraction"), "%s: keep fraction %.17g, reference %.17g", id, f,
                  num(run, "keep_fraction"));
            KeepSet ks;
            if (policy_select(st, &b, &ks, &err)) {
                CHECK(tc, 0, "%s/%s: %s", c->dir, id, err.msg);
                continue;
            }
            char why[256];
            int ok = compare_keep(c, run, &ks, why, sizeof why);
            CHECK(tc, ok, "%s/%s: keep-set differs: %s", c->dir, id, why);
            if (scored) check_layer_figures(tc, c, run, p, ls, f);
            keepset_free(&ks);
        }
        for (int l = 0; l < c->N; l++) layer_scores_free(&ls[l]);
        free(ls);
        policy_end(st);
    }
    CHECK(tc, matched == n_runs, "%s: %d of %d runs have a policy", c->dir, matched, n_runs);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    TestCounts tc = {"policy_golden", 0, 0, 0};
    const char *root = getenv("POLICY_GOLDEN");
    if (!root || !*root) root = "tests/data/policy_golden";
    DIR *dir = opendir(root);
    CHECK(&tc, dir != NULL, "%s: cannot open the golden directory", root);
    if (!dir) return test_finish(&tc);
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) && n < 256;) {
        char path[1100];
        snprintf(path, sizeof path, "%.500s/%.255s/manifest.json", root, e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f) fclose(f), names[n++] = strdup(e->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    CHECK(&tc, n > 0, "%s: no case directories with a manifest.json", root);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%.500s/%.500s", root, names[i]);
        Case c;
        KvErr err;
        int failed_before = tc.failed;
        if (case_open(&c, path, &err)) {
            CHECK(&tc, 0, "%s", err.msg);
        } else {
            check_intermediates(&tc, &c);
            check_runs(&tc, &c);
        }
        printf("%s: %s\n", names[i], tc.failed == failed_before ? "ok" : "FAILED");
        case_close(&c);
        free(names[i]);
    }
    printf("worst float32 intermediate error %.2e (of each array's max); smallest bf16 keep-set overlap %.3f\n",
           worst_f32_error, min_bf16_overlap);
    return test_finish(&tc);
}
