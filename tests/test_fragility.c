/* test_fragility.c — retained importance R_t (metrics/fragility.c) on a hand-computed case, plus its
 * properties: R_t = 1 for the full keep-set, monotone in the keep-set, outlier counting, bad input; and a
 * random GQA case (several layers, heads in a shuffled cache order, question and generated entries after the
 * context) against numpy (tests/reference/gen_fragility_cases.py). */
#include <cjson/cJSON.h>
#include <string.h>

#include "../metrics/fragility.h"
#include "test.h"

static int *int_array(const cJSON *a) {
    int n = cJSON_GetArraySize(a), i = 0;
    int *out = calloc((size_t)(n ? n : 1), sizeof *out);
    for (const cJSON *x = a ? a->child : NULL; x; x = x->next) out[i++] = x->valueint;
    return out;
}

/* The numpy case: every step's heads fed in file order; per-step mean and min within 1e-5 (abar is
 * accumulated in f32). */
static void test_numpy_case(TestCounts *tc) {
    KvErr err;
    char *text = kv_read_file(TEST_DATA("fragility/random_case.json"), NULL, &err);
    CHECK(tc, text != NULL, "%s", err.msg);
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    CHECK(tc, root != NULL, "random_case.json does not parse");
    if (!root) return;
    int N = cJSON_GetObjectItem(root, "n_layers")->valueint, H = cJSON_GetObjectItem(root, "n_heads")->valueint;
    int K = cJSON_GetObjectItem(root, "n_kv_heads")->valueint, L = cJSON_GetObjectItem(root, "context_len")->valueint;
    const cJSON *jsets = cJSON_GetObjectItem(root, "sets");
    int S = cJSON_GetArraySize(jsets);
    KeepSet *sets = calloc((size_t)S, sizeof *sets);
    for (int s = 0; s < S; s++) {
        const cJSON *js = cJSON_GetArrayItem(jsets, s);
        int *counts = int_array(cJSON_GetObjectItem(js, "counts")), *pos = int_array(cJSON_GetObjectItem(js, "positions"));
        CHECK(tc, keepset_init(&sets[s], N, K, counts, &err) == 0, "%s", err.msg);
        memcpy(sets[s].positions, pos, sizeof(int) * (size_t)sets[s].total);
        free(counts);
        free(pos);
    }
    FragilityTrace ft;
    CHECK(tc, fragility_init(&ft, N, H, K, L, sets, S, &err) == 0, "%s", err.msg);
    for (const cJSON *step = cJSON_GetObjectItem(root, "steps")->child; step; step = step->next)
        for (const cJSON *h = step->child; h; h = h->next) {
            const cJSON *jp = cJSON_GetObjectItem(h, "probs");
            int n = cJSON_GetArraySize(jp), *positions = int_array(cJSON_GetObjectItem(h, "positions"));
            float *probs = calloc((size_t)n, sizeof *probs);
            int i = 0;
            for (const cJSON *x = jp->child; x; x = x->next) probs[i++] = (float)x->valuedouble;
            CHECK(tc, fragility_add_head(&ft, cJSON_GetObjectItem(h, "layer")->valueint,
                                         cJSON_GetObjectItem(h, "head")->valueint, probs, positions, n, &err) == 0,
                  "%s", err.msg);
            free(probs);
            free(positions);
        }
    const cJSON *mean = cJSON_GetObjectItem(root, "mean_r"), *min = cJSON_GetObjectItem(root, "min_r");
    CHECK(tc, ft.n_steps == cJSON_GetArraySize(mean), "steps %d", ft.n_steps);
    double worst = 0;
    for (int t = 0; t < ft.n_steps; t++)
        for (int s = 0; s < S; s++) {
            double em = cJSON_GetArrayItem(cJSON_GetArrayItem(mean, t), s)->valuedouble;
            double en = cJSON_GetArrayItem(cJSON_GetArrayItem(min, t), s)->valuedouble;
            double dm = fabs(ft.mean_r[t * S + s] - em), dn = fabs(ft.min_r[t * S + s] - en);
            if (dm > worst) worst = dm;
            if (dn > worst) worst = dn;
        }
    CHECK(tc, worst < 1e-5, "numpy case: largest difference %g", worst);
    fragility_free(&ft);
    for (int s = 0; s < S; s++) keepset_free(&sets[s]);
    free(sets);
    cJSON_Delete(root);
}

/* A keep-set over N layers x 1 kv-head from per-layer position lists (test-owned arrays). */
typedef struct {
    int counts[2], offsets[2], positions[8];
    KeepSet ks;
} TestSet;

static void make_set(TestSet *t, int n_layers, const int *per_layer_counts, const int *positions) {
    int total = 0;
    for (int l = 0; l < n_layers; l++) {
        t->counts[l] = per_layer_counts[l];
        t->offsets[l] = total;
        total += per_layer_counts[l];
    }
    memcpy(t->positions, positions, sizeof(int) * total);
    t->ks = (KeepSet){.n_layers = n_layers, .n_kv_heads = 1, .counts = t->counts, .offsets = t->offsets,
                      .positions = t->positions, .total = total};
}

int main(void) {
    TestCounts tc = {"test_fragility", 0, 0};
    KvErr err;
    /* N=2 layers, H=2 query heads on K=1 kv-head (G=2), context L=4, one generated token at position 4.
     * Layer 0: head 0 probs [.1 .2 .3 .2 | .2] -> context mass .8 -> [.125 .25 .375 .25];
     *          head 1 probs [.4 0 0 .4 | .2]   -> [.5 0 0 .5];  abar = [.3125 .125 .1875 .375].
     * Layer 1: both heads [.2 .2 .2 .2 | .2]   -> abar = [.25 .25 .25 .25].
     * Set A keeps {0,3} in both layers: R = .6875 and .5 -> step mean .59375, min .5.
     * Set B keeps {1,2}: R = .3125 and .5 -> mean .40625 (an outlier, < .5), min .3125.
     * Full keeps {0,1,2,3}: R = 1 everywhere. Sub-A keeps {0} then {0}: R = .3125, .25 <= A's. */
    TestSet a, b, full, sub;
    make_set(&a, 2, (int[]){2, 2}, (int[]){0, 3, 0, 3});
    make_set(&b, 2, (int[]){2, 2}, (int[]){1, 2, 1, 2});
    make_set(&full, 2, (int[]){4, 4}, (int[]){0, 1, 2, 3, 0, 1, 2, 3});
    make_set(&sub, 2, (int[]){1, 1}, (int[]){0, 0});
    KeepSet sets[4] = {a.ks, b.ks, full.ks, sub.ks};
    FragilityTrace ft;
    CHECK(&tc, fragility_init(&ft, 2, 2, 1, 4, sets, 4, &err) == 0, "%s", err.msg);
    const int pos[5] = {0, 1, 2, 3, 4};
    const float l0h0[5] = {.1f, .2f, .3f, .2f, .2f}, l0h1[5] = {.4f, 0, 0, .4f, .2f}, l1[5] = {.2f, .2f, .2f, .2f, .2f};
    for (int step = 0; step < 3; step++) {
        /* heads in reverse order: the order within a layer must not matter */
        CHECK(&tc, fragility_add_head(&ft, 0, 1, l0h1, pos, 5, &err) == 0, "%s", err.msg);
        CHECK(&tc, fragility_add_head(&ft, 0, 0, l0h0, pos, 5, &err) == 0, "%s", err.msg);
        CHECK(&tc, fragility_add_head(&ft, 1, 0, l1, pos, 5, &err) == 0, "%s", err.msg);
        CHECK(&tc, fragility_add_head(&ft, 1, 1, l1, pos, 5, &err) == 0, "%s", err.msg);
    }
    CHECK(&tc, ft.n_steps == 3, "steps %d", ft.n_steps);
    const double tol = 1e-6;
    CHECK(&tc, test_close(ft.mean_r[0], 0.59375, tol, 1), "A mean %g", ft.mean_r[0]);
    CHECK(&tc, test_close(ft.min_r[0], 0.5, tol, 1), "A min %g", ft.min_r[0]);
    CHECK(&tc, test_close(ft.mean_r[1], 0.40625, tol, 1), "B mean %g", ft.mean_r[1]);
    CHECK(&tc, test_close(ft.min_r[1], 0.3125, tol, 1), "B min %g", ft.min_r[1]);
    for (int t = 0; t < ft.n_steps; t++) {
        CHECK(&tc, test_close(ft.mean_r[t * 4 + 2], 1.0, tol, 1), "full mean %g", ft.mean_r[t * 4 + 2]);
        CHECK(&tc, test_close(ft.min_r[t * 4 + 2], 1.0, tol, 1), "full min %g", ft.min_r[t * 4 + 2]);
        CHECK(&tc, ft.mean_r[t * 4 + 3] <= ft.mean_r[t * 4 + 0] + tol, "monotone: subset %g > superset %g",
              ft.mean_r[t * 4 + 3], ft.mean_r[t * 4 + 0]);
    }
    FragilitySummary s;
    fragility_summary(&ft, 1, &s);
    CHECK(&tc, s.n_outliers == 3 && test_close(s.worst_r, 0.3125, tol, 1), "B outliers %d worst %g", s.n_outliers,
          s.worst_r);
    fragility_summary(&ft, 0, &s);
    CHECK(&tc, s.n_outliers == 0 && test_close(s.mean_r, 0.59375, tol, 1), "A outliers %d mean %g", s.n_outliers,
          s.mean_r);
    /* Bad input: a layer out of order, a head out of range. */
    CHECK(&tc, fragility_add_head(&ft, 1, 0, l1, pos, 5, &err) == -1, "out-of-order layer accepted");
    CHECK(&tc, fragility_add_head(&ft, 0, 7, l1, pos, 5, &err) == -1, "head out of range accepted");
    fragility_free(&ft);
    CHECK(&tc, fragility_init(&ft, 2, 3, 2, 4, sets, 4, &err) == -1, "H not a multiple of K accepted");
    test_numpy_case(&tc);
    return test_finish(&tc);
}
