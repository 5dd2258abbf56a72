/* test_kvpress.c — the kvpress baselines against kvpress 0.5.5 itself: keep-sets on real model inputs
 * (tests/data/kvpress/<model>/, made by tests/reference/gen_kvpress_cases.py with the PyPI package; directory
 * from env KVPRESS_GOLDEN).
 *
 * Per model (SmolLM2-135M and Qwen2.5-0.5B, float32, a real LongBench context) the generator saved three
 * layers' keys after RoPE, the last `window` queries' attention, every query's attention summed per key
 * (ObservedAttention's input), the value norms and the pre-RoPE queries' mean and covariance (ExpectedAttention's,
 * with the RoPE frequencies kvbench computes from the manifest's rope_theta), as the press saw them, and
 * each press's kept positions at compression ratios 0.5 and 0.8. Here the kvbench policy of the same name observes
 * exactly those inputs (window = the manifest's, kernel 5) and must keep the same positions in every head:
 * exactly, except inside a head's boundary tie group — scores within 1e-6 of the head's largest finite |score| of
 * the last kept or first dropped one (0 for random, whose scores are torch.rand's bit for bit) — where the press's
 * choice is top-k's tie order: there kvbench must keep the same number of the group (it keeps the lowest
 * positions). The manifest counts the heads with such a group (Knorm's layer 0: repeated tokens' keys are
 * rotations of one vector, so their norms tie).
 * The policy runs over the model's every layer, as PyramidKV's budget depends on the layer index and the number of
 * layers: a saved layer observes its inputs, any other layer those of the first saved layer as a stand-in. Every
 * press here selects layer by layer, so a stand-in changes no saved layer's keep-set; only saved layers are
 * compared, each with its own n_kept. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/model.h"
#include "../policies/policy_internal.h"
#include "test.h"

typedef struct {
    int S, N, H, K, d, L, w; /* saved layers, the model's layers, query heads, kv-heads, head dim, context, window */
    int layers[8];           /* the saved layers' indices */
    float *keys;             /* [S][K][L][d] */
    float *values;           /* [S][K][L][d] */
    float *attn;             /* [S][H][w][L] */
    float *value_norm;       /* [S][K][L] */
    double *attn_sums;       /* [S][H][L] every query's attention summed per key, widened from the file's float32 */
    double *query_stats;     /* [S][H][d + d*d] the pre-RoPE queries' mean and covariance, widened likewise */
    float rope_inv_freq[256];/* [d/2] model_rope_inv_freq of the manifest's rope_theta */
} Inputs;

static void *load(const char *dir, const char *file, size_t bytes, KvErr *err) {
    char path[1300];
    snprintf(path, sizeof path, "%.1000s/%.255s", dir, file);
    size_t len = 0;
    char *buf = kv_read_file(path, &len, err);
    if (buf && len != bytes) {
        kv_fail(err, "%s: %zu bytes, expected %zu", path, len, bytes);
        free(buf);
        return NULL;
    }
    return buf;
}

static int get_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* One run: the policy over the saved layers, compared head by head with the press's labels (1 kept, 0 dropped, 2
 * in the boundary tie group). */
static void check_run(TestCounts *tc, const char *dir, const Inputs *in, const cJSON *run) {
    const char *press = cJSON_GetObjectItemCaseSensitive(run, "press")->valuestring;
    const char *file = cJSON_GetObjectItemCaseSensitive(run, "labels")->valuestring;
    double ratio = cJSON_GetObjectItemCaseSensitive(run, "compression_ratio")->valuedouble;
    const cJSON *n_kept = cJSON_GetObjectItemCaseSensitive(run, "n_kept");
    KvErr err;
    PolicyConfig cfg;
    PolicyState *st = NULL;
    KeepSet ks = {0};
    /* ChunkKV ran under sdpa: its window attention is its own file (gen_kvpress_cases.py, run_press). */
    const cJSON *own_attn = cJSON_GetObjectItemCaseSensitive(run, "attn_window");
    const size_t attn_size = sizeof(float) * (size_t)in->S * in->H * in->w * in->L;
    float *run_attn = cJSON_IsString(own_attn) ? load(dir, own_attn->valuestring, attn_size, &err) : NULL;
    float *attn = cJSON_IsString(own_attn) ? run_attn : in->attn;
    unsigned char *label = attn ? load(dir, file, (size_t)in->S * in->K * in->L, &err) : NULL;
    int bad_counts = label && cJSON_GetArraySize(n_kept) != in->S;
    if (!label || bad_counts || policy_config(&cfg, press, NULL, &err)) {
        CHECK(tc, 0, "%s %s: %s", dir, file, bad_counts ? "n_kept is not one count per saved layer" : err.msg);
        free(label);
        free(run_attn);
        return;
    }
    cfg.window = in->w;
    cfg.pool_kernel = 5;
    /* A press run with another value of a descriptor's constant (LagKV's lag_size: 16 here, 128 in kvpress and
     * kvbench) runs on a copy of the descriptor through score_layer and allocate_keepset, the steps
     * policy_observe and policy_select take; every other press through the policy's life cycle. */
    const cJSON *lag = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "press_args"),
                                                        "lag_size");
    PolicyRow own = *policy_row(press);
    if (cJSON_IsNumber(lag)) own.lag_size = lag->valueint;
    LayerScores *scores = cJSON_IsNumber(lag) ? kv_calloc((size_t)in->N, sizeof *scores, &err) : NULL;
    int rc = cJSON_IsNumber(lag) ? (scores ? 0 : -1) : policy_begin(&st, &cfg, in->N, in->K, in->L, &err);
    for (int l = 0, s = 0; l < in->N && !rc; l++) {
        int from = s < in->S && in->layers[s] == l ? s++ : 0;
        const float *keys[in->K], *values[in->K];
        for (int k = 0; k < in->K; k++) {
            keys[k] = in->keys + (((size_t)from * in->K + k) * in->L) * in->d;
            values[k] = in->values + (((size_t)from * in->K + k) * in->L) * in->d;
        }
        Observation obs = {.layer = l, .n_layers = in->N, .L = in->L, .w = in->w, .H = in->H, .K = in->K,
                           .d = in->d, .D = in->H * in->d, .keys = keys, .values = values,
                           .attn = attn + (size_t)from * in->H * in->w * in->L,
                           .value_norm = in->value_norm + (size_t)from * in->K * in->L,
                           .attn_sums = in->attn_sums + (size_t)from * in->H * in->L,
                           .query_stats = in->query_stats + (size_t)from * in->H * (in->d + in->d * in->d),
                           .query_stats_from = policy_query_stats_from(&cfg), .rope_inv_freq = in->rope_inv_freq};
        rc = scores ? score_layer(&own, &cfg, &obs, &scores[l], &err) : policy_observe(st, &obs, &err);
    }
    Budget budget = {.keep_fraction = 1.0 - ratio};
    if (!rc && scores)
        rc = allocate_keepset(&own, &cfg, scores, in->N, in->K, in->L, budget_keep_fraction(&budget, in->L), &ks,
                              &err);
    else if (!rc)
        rc = policy_select(st, &budget, &ks, &err);
    for (int l = 0; scores && l < in->N; l++) layer_scores_free(&scores[l]);
    free(scores);
    CHECK(tc, rc == 0, "%s %s: %s", dir, file, err.msg);
    for (int h = 0; !rc && h < in->S * in->K; h++) {
        const unsigned char *lab = label + (size_t)h * in->L;
        const int s = h / in->K, at = in->layers[s] * in->K + h % in->K;
        const int want = cJSON_GetArrayItem(n_kept, s)->valueint;
        const int *pos = ks.positions + ks.offsets[at];
        int kept_dropped = 0, missed = 0;
        for (int t = 0; t < ks.counts[at]; t++) kept_dropped += lab[pos[t]] == 0;
        for (int j = 0, t = 0; j < in->L; j++) {
            while (t < ks.counts[at] && pos[t] < j) t++;
            missed += lab[j] == 1 && !(t < ks.counts[at] && pos[t] == j);
        }
        CHECK(tc, ks.counts[at] == want && !kept_dropped && !missed,
              "%s %s layer %d head %d: %d kept (kvpress %d), %d that kvpress drops, %d it keeps missing", dir, file,
              in->layers[s], h % in->K, ks.counts[at], want, kept_dropped, missed);
    }
    keepset_free(&ks);
    policy_end(st);
    free(label);
    free(run_attn);
}

static void check_model(TestCounts *tc, const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    KvErr err;
    char *text = kv_read_file(path, NULL, &err);
    cJSON *m = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(m, "shapes");
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(m, "runs");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(m, "layers");
    Inputs in = {.S = cJSON_GetArraySize(layers), .N = get_int(shapes, "n_layers"), .H = get_int(shapes, "n_heads"),
                 .K = get_int(shapes, "n_kv_heads"), .d = get_int(shapes, "head_dim"), .L = get_int(shapes, "seq_len"),
                 .w = get_int(shapes, "window")};
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(shapes, "rope_theta");
    int ok = m && cJSON_IsArray(runs) && in.S > 0 && in.S <= 8 && in.N > 0 && in.H > 0 && in.K > 0 && in.d > 0 &&
             in.d <= 512 && in.L > 0 && in.w > 0 && cJSON_IsNumber(theta);
    if (ok) model_rope_inv_freq(&(ModelConfig){.head_dim = in.d, .rope_theta = (float)theta->valuedouble},
                                in.rope_inv_freq);
    for (int s = 0; ok && s < in.S; s++) {
        in.layers[s] = cJSON_GetArrayItem(layers, s)->valueint;
        ok = in.layers[s] >= (s ? in.layers[s - 1] + 1 : 0) && in.layers[s] < in.N;
    }
    CHECK(tc, ok, "%s: a manifest without shapes, ascending layers or runs", path);
    if (ok) {
        in.keys = load(dir, "keys.f32", sizeof(float) * (size_t)in.S * in.K * in.L * in.d, &err);
        in.attn = in.keys ? load(dir, "attn_window.f32", sizeof(float) * (size_t)in.S * in.H * in.w * in.L, &err)
                          : NULL;
        in.value_norm = in.attn ? load(dir, "value_norm.f32", sizeof(float) * (size_t)in.S * in.K * in.L, &err)
                                : NULL;
        in.values = in.value_norm ? load(dir, "values.f32", sizeof(float) * (size_t)in.S * in.K * in.L * in.d, &err)
                                  : NULL;
        const size_t n_sums = (size_t)in.S * in.H * in.L;
        float *sums = in.values ? load(dir, "attn_sums.f32", sizeof(float) * n_sums, &err) : NULL;
        in.attn_sums = sums ? kv_malloc(sizeof(double) * n_sums, &err) : NULL;
        for (size_t t = 0; in.attn_sums && t < n_sums; t++) in.attn_sums[t] = sums[t];
        free(sums);
        const size_t n_means = (size_t)in.S * in.H * in.d, per_head = (size_t)in.d + (size_t)in.d * in.d;
        float *mean = in.attn_sums ? load(dir, "query_mean.f32", sizeof(float) * n_means, &err) : NULL;
        float *cov = mean ? load(dir, "query_cov.f32", sizeof(float) * n_means * in.d, &err) : NULL;
        in.query_stats = cov ? kv_malloc(sizeof(double) * per_head * in.S * in.H, &err) : NULL;
        for (size_t h = 0; in.query_stats && h < (size_t)in.S * in.H; h++)
            for (size_t t = 0; t < per_head; t++)
                in.query_stats[h * per_head + t] = t < (size_t)in.d ? mean[h * in.d + t] : cov[h * in.d * in.d + t - in.d];
        free(mean);
        free(cov);
        if (!in.query_stats) {
            free(in.values);
            in.values = NULL;
        }
        CHECK(tc, in.values != NULL, "%s", err.msg);
        for (const cJSON *run = runs ? runs->child : NULL; in.values && run; run = run->next)
            check_run(tc, dir, &in, run);
    }
    free(in.keys);
    free(in.values);
    free(in.attn);
    free(in.value_norm);
    free(in.attn_sums);
    free(in.query_stats);
    cJSON_Delete(m);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    TestCounts tc = {"kvpress", 0, 0, 0};
    const char *root = getenv("KVPRESS_GOLDEN");
    if (!root || !*root) root = "tests/data/kvpress";
    DIR *dir = opendir(root);
    CHECK(&tc, dir != NULL, "%s: cannot open the golden directory", root);
    if (!dir) return test_finish(&tc);
    char *names[64];
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) && n < 64;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(dir);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    CHECK(&tc, n >= 2, "%s: %d model directories, expected SmolLM2's and Qwen2.5's", root, n);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%.500s/%.500s", root, names[i]);
        check_model(&tc, path);
        free(names[i]);
    }
    return test_finish(&tc);
}
