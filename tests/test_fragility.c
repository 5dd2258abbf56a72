/* test_fragility.c — retained importance R_t (metrics/fragility.c) on a hand-computed case, plus its
 * properties: R_t = 1 for the full keep-set, monotone in the keep-set, the per-head values, both outlier
 * notions at two thresholds, percentiles, the value-weighted importance by hand, bad input; and a random GQA
 * case (several layers, heads in a shuffled cache order, question and generated entries after the context)
 * against numpy (tests/reference/gen_fragility_cases.py). The value-weighted importance on a real model's
 * attention is checked against numpy in test_trace.c. */
#include <cjson/cJSON.h>
#include <string.h>

#include "../engine/jsonfile.h"
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
    cJSON *root = kv_read_json(TEST_DATA("fragility/random_case.json"), &err);
    CHECK(tc, root != NULL, "%s", err.msg);
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
    CHECK(tc, fragility_init(&ft, N, H, K, L, sets, S, NULL, &err) == 0, "%s", err.msg);
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
    TestCounts tc = {"test_fragility", 0, 0, 0};
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
    CHECK(&tc, fragility_init(&ft, 2, 2, 1, 4, sets, 4, NULL, &err) == 0, "%s", err.msg);
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
    /* Per-head values, index l*K + k (K = 1): A = {.6875, .5}, B = {.3125, .5}. */
    for (int t = 0; t < ft.n_steps; t++) {
        const float *ra = ft.r_heads + (size_t)(t * 4 + 0) * 2, *rb = ft.r_heads + (size_t)(t * 4 + 1) * 2;
        CHECK(&tc, test_close(ra[0], 0.6875, tol, 1) && test_close(ra[1], 0.5, tol, 1), "A heads %g %g", ra[0], ra[1]);
        CHECK(&tc, test_close(rb[0], 0.3125, tol, 1) && test_close(rb[1], 0.5, tol, 1), "B heads %g %g", rb[0], rb[1]);
    }
    /* Threshold 0.5 (strictly below): B's mean .40625 is a step outlier at every step, its layer-0 head .3125
     * a head outlier (its layer-1 head sits at .5, not below); A has neither. p5 of {.5, .6875} is
     * .5 + .05 * .1875 = .509375 (linear interpolation), p50 .59375. */
    FragilitySummary s;
    CHECK(&tc, fragility_summary(&ft, 1, FRAGILITY_OUTLIER, &s, &err) == 0, "%s", err.msg);
    CHECK(&tc, s.n_steps == 3 && s.step_outliers == 3 && s.head_outliers == 3 && s.steps_any_head == 3 &&
                  s.n_head_values == 6,
          "B at .5: steps %d, step outliers %d, head outliers %lld, steps with a head below %d", s.n_steps,
          s.step_outliers, s.head_outliers, s.steps_any_head);
    CHECK(&tc, test_close(s.worst_step_r, 0.40625, tol, 1) && test_close(s.worst_head_r, 0.3125, tol, 1) &&
                  test_close(s.mean_p5, 0.3125 + 0.05 * 0.1875, tol, 1),
          "B worst step %g, worst head %g, p5 %g", s.worst_step_r, s.worst_head_r, s.mean_p5);
    CHECK(&tc, fragility_summary(&ft, 0, FRAGILITY_OUTLIER, &s, &err) == 0, "%s", err.msg);
    CHECK(&tc, s.step_outliers == 0 && s.head_outliers == 0 && s.steps_any_head == 0 &&
                  test_close(s.mean_r, 0.59375, tol, 1) && test_close(s.mean_p5, 0.509375, tol, 1),
          "A at .5: step outliers %d, head outliers %lld, mean %g, p5 %g", s.step_outliers, s.head_outliers, s.mean_r,
          s.mean_p5);
    /* Threshold 0.6: A's mean .59375 becomes a step outlier and its .5 head a head outlier; the full cache never. */
    CHECK(&tc, fragility_summary(&ft, 0, 0.6, &s, &err) == 0, "%s", err.msg);
    CHECK(&tc, s.step_outliers == 3 && s.head_outliers == 3 && s.steps_any_head == 3, "A at .6: %d %lld %d",
          s.step_outliers, s.head_outliers, s.steps_any_head);
    CHECK(&tc, fragility_summary(&ft, 2, 0.6, &s, &err) == 0, "%s", err.msg);
    CHECK(&tc, s.step_outliers == 0 && s.head_outliers == 0 && test_close(s.worst_head_r, 1.0, tol, 1),
          "full at .6: %d %lld worst %g", s.step_outliers, s.head_outliers, s.worst_head_r);
    /* Bad input: a layer out of order, a head out of range. */
    CHECK(&tc, fragility_add_head(&ft, 1, 0, l1, pos, 5, &err) == -1, "out-of-order layer accepted");
    CHECK(&tc, fragility_add_head(&ft, 0, 7, l1, pos, 5, &err) == -1, "head out of range accepted");
    fragility_free(&ft);
    CHECK(&tc, fragility_init(&ft, 2, 3, 2, 4, sets, 4, NULL, &err) == -1, "H not a multiple of K accepted");

    /* Value-weighted importance by hand: layer 0 has nu = [1 2 1 0], so abar·nu = [.3125 .25 .1875 0] over a
     * total of .75, I = [5/12, 1/3, 1/4, 0]: A {0,3} retains 5/12, B {1,2} 7/12, full 1. Layer 1 has a flat nu,
     * so I = abar = [.25 .25 .25 .25] and A, B retain .5 as under attention importance. */
    const float nu[2 * 4] = {1, 2, 1, 0, 3, 3, 3, 3};
    CHECK(&tc, fragility_init(&ft, 2, 2, 1, 4, sets, 4, nu, &err) == 0, "%s", err.msg);
    CHECK(&tc, fragility_add_head(&ft, 0, 0, l0h0, pos, 5, &err) == 0 &&
                  fragility_add_head(&ft, 0, 1, l0h1, pos, 5, &err) == 0 &&
                  fragility_add_head(&ft, 1, 1, l1, pos, 5, &err) == 0 &&
                  fragility_add_head(&ft, 1, 0, l1, pos, 5, &err) == 0,
          "%s", err.msg);
    const double want[6] = {5.0 / 12, 0.5, 7.0 / 12, 0.5, 1.0, 1.0};
    int heads_ok = ft.n_steps == 1;
    for (int i = 0; i < 6 && heads_ok; i++) heads_ok = test_close(ft.r_heads[i], want[i], tol, 1);
    CHECK(&tc, heads_ok,
          "value-weighted heads: A %g %g, B %g %g, full %g %g", ft.r_heads[0], ft.r_heads[1], ft.r_heads[2],
          ft.r_heads[3], ft.r_heads[4], ft.r_heads[5]);
    fragility_free(&ft);

    /* Step statistics of {.9 .1 .5 .3 .7}: sorted .1 .3 .5 .7 .9, p5 at rank .2 -> .1 + .2 * .2 = .14, p50 .5,
     * mean .5, min .1, two values below .5 (strictly). One value: every percentile is it. */
    FragilityStep st;
    float scratch[5];
    fragility_step_stats((const float[]){.9f, .1f, .5f, .3f, .7f}, 5, 0.5, scratch, &st);
    CHECK(&tc, test_close(st.p5, 0.14, 1e-6, 1) && test_close(st.p50, 0.5, 1e-6, 1) &&
                  test_close(st.mean, 0.5, 1e-6, 1) && test_close(st.min, 0.1, 1e-6, 1) && st.n_below == 2,
          "step stats p5 %g p50 %g mean %g min %g below %d", st.p5, st.p50, st.mean, st.min, st.n_below);
    fragility_step_stats((const float[]){.25f}, 1, 0.5, scratch, &st);
    CHECK(&tc, st.p5 == 0.25 && st.p50 == 0.25 && st.n_below == 1, "one value: p5 %g p50 %g", st.p5, st.p50);
    Importance imp;
    CHECK(&tc, importance_parse("value_weighted", &imp, &err) == 0 && imp == IMPORTANCE_VALUE_WEIGHTED &&
                  !strcmp(importance_name(imp), "value_weighted"),
          "importance names");
    CHECK(&tc, importance_parse("attn", &imp, &err) == -1 && strstr(err.msg, "value_weighted"), "bad importance: %s",
          err.msg);
    test_numpy_case(&tc);
    return test_finish(&tc);
}
