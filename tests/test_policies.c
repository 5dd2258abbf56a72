/* test_policies.c — every policy on tiny contexts worked out by hand, then properties on random
 * observations (kept counts equal the budgets, the window is kept where the spec says so, `full` keeps
 * everything, keep-sets are sorted and unique), the stable top-k against qsort, and bad input; and the order of
 * the ties the max+prior prior creates (by position; by the unclamped score under the opt-in ablation).
 * The hand cases use L=12, w=2 (prefix P=10) and pooling kernel 1 so that every score is a plain mean or
 * max of the attention rows written below; the expected keep-sets are derived in the comments. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/observation.h"
#include "../policies/policy_internal.h"
#include "test.h"

enum { L = 12, W = 2, P = L - W };

/* One layer's observation over a caller's attention [H][W][L] and value norms [K][L]. */
static Observation hand_obs(int layer, int n_layers, int H, int K, float *attn, float *nu) {
    return (Observation){.layer = layer, .n_layers = n_layers, .L = L, .w = W, .H = H, .K = K, .d = 1, .D = 1,
                         .attn = attn, .value_norm = nu};
}

/* Sets A[h][i][j] for the listed (j, value) pairs; the window columns take the rest of the row's mass. */
static void set_row(float *attn, int h, int i, const int *js, const float *vals, int n) {
    float *row = attn + ((size_t)h * W + i) * L, mass = 0;
    memset(row, 0, sizeof(float) * L);
    for (int t = 0; t < n; t++) row[js[t]] = vals[t], mass += vals[t];
    row[P] = row[P + 1] = (1.0f - mass) / 2;
}

/* Runs one policy over `n_layers` observations and selects one budget; returns the keep-set. */
static int run_policy(TestCounts *tc, const char *name, const char *agg, int pool, Observation *obs, int n_layers,
                      const char *budget, KeepSet *ks) {
    KvErr err;
    PolicyConfig cfg;
    PolicyState *st = NULL;
    Budget b;
    memset(ks, 0, sizeof *ks);
    if (policy_config(&cfg, name, agg, &err) || budget_parse(budget, &b, &err)) {
        CHECK(tc, 0, "%s: %s", name, err.msg);
        return -1;
    }
    cfg.window = W;
    cfg.pool_kernel = pool;
    int rc = policy_begin(&st, &cfg, n_layers, obs[0].K, L, &err);
    for (int l = 0; !rc && l < n_layers; l++) rc = policy_observe(st, &obs[l], &err);
    if (!rc) rc = policy_select(st, &b, ks, &err);
    CHECK(tc, rc == 0, "%s: %s", name, err.msg);
    policy_end(st);
    return rc;
}

/* Whether segment s of ks is exactly want[0..n) (ascending). */
static int segment_is(const KeepSet *ks, int s, const int *want, int n) {
    if (ks->counts[s] != n) return 0;
    for (int t = 0; t < n; t++)
        if (ks->positions[ks->offsets[s] + t] != want[t]) return 0;
    return 1;
}

#define EXPECT_SEGMENT(tc, ks, s, ...)                                                         \
    do {                                                                                       \
        const int want_[] = {__VA_ARGS__};                                                     \
        int n_ = (int)(sizeof want_ / sizeof want_[0]);                                        \
        CHECK(tc, segment_is(ks, s, want_, n_), "%s segment %d: %d kept", #ks, s, (ks)->counts[s]); \
    } while (0)

/* StreamingLLM at L=12, f=0.5 (also "6tok"): n = 6, so positions 0..3 (sinks) and the last n - 4 = 2
 * (10, 11). With 2 tokens (exactly 2: 1 - (1 - 2/12) would give int(1.9999999999999996) = 1): n < 4 sinks,
 * so the two lowest of the tied 1-scores, 0 and 1. */
static void test_streamingllm(TestCounts *tc) {
    float attn[W * L] = {0};
    Observation o = hand_obs(0, 1, 1, 1, attn, NULL);
    KeepSet ks;
    if (!run_policy(tc, "streamingllm", NULL, 5, &o, 1, "0.5", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 10, 11);
    keepset_free(&ks);
    if (!run_policy(tc, "streaming_llm", NULL, 5, &o, 1, "6tok", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 10, 11);
    keepset_free(&ks);
    if (!run_policy(tc, "streamingllm", NULL, 5, &o, 1, "2tok", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 1);
    keepset_free(&ks);
}

/* SnapKV, H=2 query heads on K=1 kv-head.
 *   h0 i0: j0 .3, j3 .2, j5 .1      h0 i1: j0 .1, j3 .4, j7 .1
 *   h1 i0: j2 .5, j5 .1             h1 i1: j2 .3, j8 .2
 * mean (reference): window means h0 {j0 .2, j3 .3, j5 .05, j7 .05}, h1 {j2 .4, j5 .05, j8 .1}; group mean
 *   j0 .1, j2 .2, j3 .15, j5 .05, j7 .025, j8 .05; window padded with the max .2.
 *   n = int(12*0.5) = 6: j2, 10, 11 (.2, ties by position), j3, j0, then j5 before j8 (.05 tie) -> {0,2,3,5,10,11}.
 * max: h0 {j0 .3, j3 .4, j5 .1, j7 .1}, h1 {j2 .5, j5 .1, j8 .2}; group max j0 .3, j2 .5, j3 .4, j5 .1,
 *   j7 .1, j8 .2; window .5. n=6 -> {0,2,3,8,10,11}; f=0.6 gives n=7: next is j5 (.1, before j7).
 * max+prior: the head mean over P=10 is 1.6/10 = .16, so j1,j4,j5,j6,j7,j9 rise to .16 (j8 .2 stays):
 *   n=6 as max; n=7 takes the lowest of the .16 block, j1. */
static void test_snapkv(TestCounts *tc) {
    float attn[2 * W * L];
    set_row(attn, 0, 0, (int[]){0, 3, 5}, (float[]){.3f, .2f, .1f}, 3);
    set_row(attn, 0, 1, (int[]){0, 3, 7}, (float[]){.1f, .4f, .1f}, 3);
    set_row(attn, 1, 0, (int[]){2, 5}, (float[]){.5f, .1f}, 2);
    set_row(attn, 1, 1, (int[]){2, 8}, (float[]){.3f, .2f}, 2);
    Observation o = hand_obs(0, 1, 2, 1, attn, NULL);
    KeepSet ks;
    if (!run_policy(tc, "snapkv", NULL, 1, &o, 1, "0.5", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 2, 3, 5, 10, 11);
    keepset_free(&ks);
    if (!run_policy(tc, "snapkv", "max", 1, &o, 1, "0.5", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 2, 3, 8, 10, 11);
    keepset_free(&ks);
    if (!run_policy(tc, "snapkv", "max", 1, &o, 1, "0.6", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 2, 3, 5, 8, 10, 11);
    keepset_free(&ks);
    if (!run_policy(tc, "snapkv", "max+prior", 1, &o, 1, "0.6", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 8, 10, 11);
    keepset_free(&ks);
}

/* Pooling (kernel 5, zero padded, always / 5) by hand: one head whose window mean is 1 at j0 and j5
 * (rows sum to more than 1 here, which only the scores see). Pooled: j0..2 get .2 (from j0), j3..7 get .2
 * (from j5), j8, j9 get 0 (no window of 5 around j0 reaches j5). So the SnapKV score is .2 on j0..7, and
 * the window is padded with the max, also .2: ten entries tie. With n=9 (f=0.75) the lowest nine positions
 * win, j0..7 and j10 — the window's last token is evicted, as in the reference under the tie-low rule. */
static void test_pooling(TestCounts *tc) {
    float attn[W * L];
    set_row(attn, 0, 0, (int[]){0, 5}, (float[]){1, 1}, 2);
    set_row(attn, 0, 1, (int[]){0, 5}, (float[]){1, 1}, 2);
    KvErr err;
    PolicyConfig cfg;
    policy_config(&cfg, "snapkv", NULL, &err);
    cfg.window = W;
    Observation o = hand_obs(0, 1, 1, 1, attn, NULL);
    LayerScores ls;
    CHECK(tc, score_layer(policy_row("snapkv"), &cfg, &o, &ls, &err) == 0, "%s", err.msg);
    for (int j = 0; j < P; j++)
        CHECK(tc, test_close(ls.score[j], j < 8 ? 0.2 : 0.0, 1e-7, 1), "pooled j%d = %g", j, ls.score[j]);
    layer_scores_free(&ls);
    KeepSet ks;
    if (!run_policy(tc, "snapkv", NULL, 5, &o, 1, "0.75", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 4, 5, 6, 7, 10);
    keepset_free(&ks);
}

/* Two kv-heads (H=K=2), both window rows of a head equal, so mean = max = the row:
 *   head 0: j0 .30, j1 .20, j2 .10, j3 .05, j4 .05, j5 .04, j6 .03, j7 .02, j8 .01, j9 0
 *   head 1: .02 on j0..8, j9 .5
 * SnapKV score = the row; the layer max .5 pads the window of both heads. */
static void two_head_rows(float *attn) {
    int js0[] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, js1[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    float v0[] = {.30f, .20f, .10f, .05f, .05f, .04f, .03f, .02f, .01f};
    float v1[] = {.02f, .02f, .02f, .02f, .02f, .02f, .02f, .02f, .02f, .5f};
    for (int i = 0; i < W; i++) set_row(attn, 0, i, js0, v0, 9), set_row(attn, 1, i, js1, v1, 10);
}

/* AdaKV at f=0.5: n=6, n_safe = int(6*0.2) = 1. Safeguard: head 0's top is window j10 (.5, before j11);
 * head 1's is j9 (.5, tied with the window, lowest position). Top K*n = 12 of the layer: the two BIG, the
 * three remaining .5 (h0 j11, h1 j10, j11), then head 0's j0 .30, j1, j2, j3, j4 (.05 tie, both in), j5 .04,
 * j6 .03 = 12. Head 0 keeps 9, head 1 keeps 3.
 * SnapKV at f=0.5: head 0 {0,1,2,3,10,11} (j3 before j4), head 1 {0,1,2,9,10,11}.
 * CAKE, one layer: T = int((12*0.5 - 2)*1) = 4 prefix tokens per head, plus the window; the variance is 0
 * (so the preference is 0 and the one layer gets the even share, all of T), and head 0 takes j0..j3, head 1
 * j9, j0, j1, j2. */
static void test_adakv_snapkv_cake(TestCounts *tc) {
    float attn[2 * W * L];
    two_head_rows(attn);
    Observation o = hand_obs(0, 1, 2, 2, attn, NULL);
    KeepSet ks;
    if (!run_policy(tc, "adakv", NULL, 1, &o, 1, "0.5", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 4, 5, 6, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 1, 9, 10, 11);
    }
    keepset_free(&ks);
    if (!run_policy(tc, "snapkv", NULL, 1, &o, 1, "0.5", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 1, 0, 1, 2, 9, 10, 11);
    }
    keepset_free(&ks);
    if (!run_policy(tc, "cake", NULL, 1, &o, 1, "0.5", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 1, 0, 1, 2, 9, 10, 11);
    }
    keepset_free(&ks);
}

/* Ada-CriticalKV on the same rows at f=0.5: head budgets as AdaKV, B0=9, B1=3; stage 1 b1 = 4 and 1.
 * Head 0: stage 1 marks j10 (BIG), j11 (.5), j0, j1. Stage 2 ranks the rest by (s + 1e-4) * nu with
 *   nu = 1 except j7 10, j8 100, j9 1000: j8 1.01, j7 .2001, j2 .1001, j9 .1, then j3/j4 .0501 -> j3.
 *   Kept {0,1,2,3,7,8,9,10,11}: AdaKV's j4, j5, j6 lose to the large value norms.
 * Head 1: stage 1 marks j9 (already BIG). nu = 1 except j0 100: j0 (.02+1e-4)*100 = 2.01 beats the window's
 *   .5001, so it keeps {0, 9, 10}: the window is not protected (j10 before j11 on the tie). */
static void test_criticalkv(TestCounts *tc) {
    float attn[2 * W * L], nu[2 * L];
    two_head_rows(attn);
    for (int t = 0; t < 2 * L; t++) nu[t] = 1;
    nu[7] = 10, nu[8] = 100, nu[9] = 1000, nu[L + 0] = 100;
    Observation o = hand_obs(0, 1, 2, 2, attn, nu);
    KeepSet ks;
    if (!run_policy(tc, "criticalkv", NULL, 1, &o, 1, "0.5", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 7, 8, 9, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 1, 0, 9, 10);
    }
    keepset_free(&ks);
}

/* DefensiveKV: H=K=2, pooling kernel 1 (so the per-query pooled rows are the rows), equal value norms
 * (nuhat = .5 everywhere).
 *   h0 i0: j0 .4, j1 .2, j2 .1, j5 .1      h0 i1: j0 .4, j1 .1, j3 .2, j6 .1
 *   h1 i0: j4 .6, j8 .2                    h1 i1: j4 .6, j9 .2
 * Window bias as coded = mean over the 4 rows of the mass on prefix columns 8, 9 = (0+0+.2+.2)/4 = .1, so
 * the threshold is .8. Mean shares: head 0 j0 .5, j1 .1875, j3 .125 (cum .5, .6875, .8125 >= .8 at t=2):
 * 2 forced {0, 1}; head 1 j4 .75, j8 .125 (cum .875 at t=1): 1 forced {4}. Cap int(10*0.5 - 2) = 3.
 * max+prior: head 0 max j0 .4, j1 .2, j3 .2, j2/j5/j6 .1, mean 1.1/10 = .11 -> others .11;
 *   head 1 j4 .6, j8 .2, j9 .2, mean .1. c = delta/2; M = .3 (h1 j4).
 *   Final: head 0 {j0, j1 forced, window} = .3, j3 .1, others .055; head 1 {j4, window} = .3, j8, j9 .1,
 *   others .05. Top int(12*0.5*2) = 12: seven at .3, three at .1, then head 0's j2, j4 (.055, lowest).
 * mean: head 0 c = j0 .2, j1 .075, j3 .05, j2/j5/j6 .025; head 1 j4 .3, j8/j9 .05: seven at .3, three
 *   at .05, then head 0's j2, j5 -> head 0 {0,1,2,3,5,10,11}. max (no prior): same order, same set.
 * Layer-DefensiveKV with this layer twice: top int(12*0.5*2*2) = 24 of 48; 14 at .3, 6 at .1, then four
 *   of the .055 entries (head 0 of both layers), lowest flat index first: layer 0's j2, j4, j5, j6.
 * Intended window bias: the mass on the window columns is .2 in every row, threshold .7: head 1's j4 (.75)
 *   alone crosses it at t=0, so nothing is forced there; head 0 still forces 2. */
static void test_defensivekv(TestCounts *tc) {
    float attn[2 * W * L], nu[2 * L];
    set_row(attn, 0, 0, (int[]){0, 1, 2, 5}, (float[]){.4f, .2f, .1f, .1f}, 4);
    set_row(attn, 0, 1, (int[]){0, 1, 3, 6}, (float[]){.4f, .1f, .2f, .1f}, 4);
    set_row(attn, 1, 0, (int[]){4, 8}, (float[]){.6f, .2f}, 2);
    set_row(attn, 1, 1, (int[]){4, 9}, (float[]){.6f, .2f}, 2);
    for (int t = 0; t < 2 * L; t++) nu[t] = 3;
    Observation o[2] = {hand_obs(0, 2, 2, 2, attn, nu), hand_obs(1, 2, 2, 2, attn, nu)};
    KvErr err;
    PolicyConfig cfg;
    policy_config(&cfg, "defensivekv", NULL, &err);
    cfg.window = W, cfg.pool_kernel = 1;
    LayerScores ls;
    CHECK(tc, score_layer(policy_row("defensivekv"), &cfg, &o[0], &ls, &err) == 0, "%s", err.msg);
    CHECK(tc, test_close(ls.window_bias, 0.1, 1e-7, 1) && test_close(ls.threshold, 0.8, 1e-7, 1), "bias %g",
          ls.window_bias);
    CHECK(tc, ls.n_mass[0] == 2 && ls.n_mass[1] == 1, "mass counts %d %d", ls.n_mass[0], ls.n_mass[1]);
    CHECK(tc, defensive_forced_count(&ls, 0, P, W, 0.5) == 2 && defensive_forced_count(&ls, 0, P, W, 0.4) == 2,
          "forced below the cap");
    /* f=0.3: cap int(10*0.3 - 2) = 1; f=0.1: cap int(1 - 2) = -1, Python's [: -1] keeps P - 1 = 9. */
    CHECK(tc, defensive_forced_count(&ls, 0, P, W, 0.3) == 1 && defensive_forced_count(&ls, 0, P, W, 0.1) == 9,
          "cap %d, negative cap %d", defensive_forced_count(&ls, 0, P, W, 0.3),
          defensive_forced_count(&ls, 0, P, W, 0.1));
    CHECK(tc, test_close(ls.layer_max, 0.3, 1e-7, 1), "M %g", ls.layer_max);
    layer_scores_free(&ls);
    cfg.intended_window_bias = 1;
    CHECK(tc, score_layer(policy_row("defensivekv"), &cfg, &o[0], &ls, &err) == 0, "%s", err.msg);
    CHECK(tc, test_close(ls.window_bias, 0.2, 1e-7, 1) && ls.n_mass[0] == 2 && ls.n_mass[1] == 0,
          "intended bias %g, mass counts %d %d", ls.window_bias, ls.n_mass[0], ls.n_mass[1]);
    layer_scores_free(&ls);

    KeepSet ks;
    if (!run_policy(tc, "defensivekv", NULL, 1, o, 1, "0.5", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 4, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 1, 4, 8, 9, 10, 11);
    }
    keepset_free(&ks);
    for (int a = 0; a < 2; a++) {
        if (!run_policy(tc, "defensivekv", a ? "max" : "mean", 1, o, 1, "0.5", &ks)) {
            EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 5, 10, 11);
            EXPECT_SEGMENT(tc, &ks, 1, 4, 8, 9, 10, 11);
        }
        keepset_free(&ks);
    }
    if (!run_policy(tc, "layer-defensivekv", NULL, 1, o, 2, "0.5", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 4, 5, 6, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 1, 4, 8, 9, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 2, 0, 1, 3, 10, 11);
        EXPECT_SEGMENT(tc, &ks, 3, 4, 8, 9, 10, 11);
    }
    keepset_free(&ks);
}

/* CAKE's adjust_budgets by hand (cap = P of the layers):
 *   prefs 1,2,1, T=10, cap 8: raw 2.5, 5, 2.5 -> 2,5,2 (sum 9) -> +1 to the first: 3,5,2.
 *   prefs 1,8,1, T=20, cap 10: raw 2,16,2 -> layer 1 capped at 10, excess 6 split over layers 0, 2: 5,10,5.
 *   prefs 1,1,1, T=10, cap 8: 3.33 each -> 3,3,3 -> 4,3,3; all 0 (no variance anywhere): the same. */
static void test_cake_budgets(TestCounts *tc) {
    double raw[3];
    int b[3];
    cake_layer_budgets((double[]){1, 2, 1}, 3, 10, 8, raw, b);
    CHECK(tc, b[0] == 3 && b[1] == 5 && b[2] == 2 && test_close(raw[0], 2.5, 1e-12, 1), "1,2,1: %d %d %d", b[0], b[1],
          b[2]);
    cake_layer_budgets((double[]){1, 8, 1}, 3, 20, 10, raw, b);
    CHECK(tc, b[0] == 5 && b[1] == 10 && b[2] == 5, "1,8,1: %d %d %d", b[0], b[1], b[2]);
    cake_layer_budgets((double[]){1, 1, 1}, 3, 10, 8, raw, b);
    CHECK(tc, b[0] == 4 && b[1] == 3 && b[2] == 3, "1,1,1: %d %d %d", b[0], b[1], b[2]);
    cake_layer_budgets((double[]){0, 0, 0}, 3, 10, 8, raw, b);
    CHECK(tc, b[0] == 4 && b[1] == 3 && b[2] == 3, "no preference: %d %d %d", b[0], b[1], b[2]);
}

/* ---- properties on random observations ---- */

static unsigned rng_next(unsigned *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return *s;
}

/* Random causal softmax rows with a few heavy hitters, and positive value norms. */
static void random_obs(unsigned *seed, int N, int H, int K, int Lr, int w, float *attn, float *nu, Observation *obs) {
    for (int l = 0; l < N; l++) {
        float *a = attn + (size_t)l * H * w * Lr;
        for (int r = 0; r < H * w; r++) {
            float *row = a + (size_t)r * Lr;
            int last = Lr - w + r % w;
            double sum = 0;
            for (int j = 0; j < Lr; j++) {
                double x =
                    j <= last ? exp(3.0 * (rng_next(seed) % 1000) / 1000.0) * (rng_next(seed) % 11 == 0 ? 20 : 1) : 0;
                row[j] = (float)x, sum += x;
            }
            for (int j = 0; j < Lr; j++) row[j] = (float)(row[j] / sum);
        }
        for (int t = 0; t < K * Lr; t++) nu[(size_t)l * K * Lr + t] = 0.5f + (rng_next(seed) % 1000) / 500.0f;
        obs[l] = (Observation){.layer = l, .n_layers = N, .L = Lr, .w = w, .H = H, .K = K, .d = 1, .D = 1,
                               .attn = a, .value_norm = nu + (size_t)l * K * Lr};
    }
}

static void test_properties(TestCounts *tc) {
    enum { N = 3, H = 4, K = 2, LR = 96, WR = 8 };
    static float attn[N * H * WR * LR], nu[N * K * LR];
    Observation obs[N];
    unsigned seed = 12345;
    random_obs(&seed, N, H, K, LR, WR, attn, nu, obs);
    static const char *const policies[] = {"full", "streamingllm", "snapkv", "adakv", "cake", "criticalkv",
                                           "defensivekv", "layer-defensivekv"};
    static const char *const budgets[] = {"0.2", "0.35", "50%", "0.9", "1", "40tok", "96tok"};
    for (int p = 0; p < 8; p++) {
        KvErr err;
        PolicyConfig cfg;
        PolicyState *st;
        CHECK(tc, policy_config(&cfg, policies[p], NULL, &err) == 0, "%s", err.msg);
        cfg.window = WR;
        CHECK(tc, policy_begin(&st, &cfg, N, K, LR, &err) == 0, "%s", err.msg);
        for (int l = 0; l < N; l++) CHECK(tc, policy_observe(st, &obs[l], &err) == 0, "%s", err.msg);
        for (int bi = 0; bi < 7; bi++) {
            Budget b;
            budget_parse(budgets[bi], &b, &err);
            double f = budget_keep_fraction(&b, LR);
            int n = (int)(LR * f);
            KeepSet ks;
            if (policy_select(st, &b, &ks, &err)) {
                CHECK(tc, 0, "%s %s: %s", policies[p], budgets[bi], err.msg);
                continue;
            }
            int sorted = 1, window_kept = 1, full_budget = f == 1.0 || p == 0;
            long layer_sum[N] = {0};
            for (int s = 0; s < N * K; s++) {
                const int *pos = ks.positions + ks.offsets[s];
                for (int t = 0; t < ks.counts[s]; t++)
                    sorted &= pos[t] >= 0 && pos[t] < LR && (t == 0 || pos[t] > pos[t - 1]);
                int in_window = 0;
                for (int t = 0; t < ks.counts[s]; t++) in_window += pos[t] >= LR - WR;
                window_kept &= in_window == WR;
                layer_sum[s / K] += ks.counts[s];
            }
            CHECK(tc, sorted, "%s %s: positions not sorted, unique and in range", policies[p], budgets[bi]);
            const char *name = policies[p];
            if (full_budget) {
                CHECK(tc, ks.total == N * K * LR, "%s %s keeps everything: %d", name, budgets[bi], ks.total);
            } else if (!strcmp(name, "streamingllm") || !strcmp(name, "snapkv")) {
                int ok = 1;
                for (int s = 0; s < N * K; s++) ok &= ks.counts[s] == n;
                CHECK(tc, ok, "%s %s: every head keeps %d", name, budgets[bi], n);
                if (!strcmp(name, "snapkv") && n > WR)
                    CHECK(tc, window_kept, "snapkv %s keeps the window", budgets[bi]);
            } else if (!strcmp(name, "adakv") || !strcmp(name, "criticalkv")) {
                int ok = 1;
                for (int l = 0; l < N; l++) ok &= layer_sum[l] == K * n;
                for (int s = 0; s < N * K; s++) ok &= ks.counts[s] >= (int)(n * 0.2);
                CHECK(tc, ok, "%s %s: layers keep K*%d, heads at least the safeguard", name, budgets[bi], n);
            } else if (!strcmp(name, "cake")) {
                int T = (int)((LR * f - WR) * N);
                CHECK(tc, ks.total == K * (T + N * WR) && window_kept, "cake %s: %d kept, want %d with the window",
                      budgets[bi], ks.total, K * (T + N * WR));
            } else if (!strcmp(name, "defensivekv")) {
                int ok = 1;
                for (int l = 0; l < N; l++) ok &= layer_sum[l] == (int)(LR * f * K);
                CHECK(tc, ok && window_kept, "defensivekv %s: layers keep %d with the window", budgets[bi],
                      (int)(LR * f * K));
            } else {
                CHECK(tc, ks.total == (int)(LR * f * K * N), "layer-defensivekv %s: %d kept, want %d", budgets[bi],
                      ks.total, (int)(LR * f * K * N));
            }
            keepset_free(&ks);
        }
        /* out of range budgets fail at selection */
        KeepSet ks;
        Budget bad[] = {{.keep_fraction = 0.0}, {.keep_fraction = 1.5}, {.keep_fraction = -0.2}, {.tokens = LR + 1},
                        {.keep_fraction = 0.005}};
        for (int i = 0; i < 5; i++) {
            int rc = policy_select(st, &bad[i], &ks, &err);
            CHECK(tc, rc != 0 && strstr(err.msg, policies[p]), "%s bad budget %d: %s", policies[p], i,
                  rc ? err.msg : "accepted");
            if (!rc) keepset_free(&ks);
        }
        policy_end(st);
    }
}

/* A context barely longer than the window: DefensiveKV's stage-1 cap int(P*f - w) is negative (P=8, w=32... here
 * P=8, w=8, f=0.2: int(1.6 - 8) = -6, so Python's slicing forces all but the last 6 of the 8 prefix tokens);
 * the layer still keeps exactly int(L*f*K). */
static void test_short_context(TestCounts *tc) {
    enum { N = 1, H = 2, K = 1, LR = 16, WR = 8 };
    static float attn[N * H * WR * LR], nu[N * K * LR];
    Observation obs[N];
    unsigned seed = 99;
    random_obs(&seed, N, H, K, LR, WR, attn, nu, obs);
    KvErr err;
    PolicyConfig cfg;
    PolicyState *st;
    policy_config(&cfg, "defensivekv", NULL, &err);
    cfg.window = WR;
    CHECK(tc, policy_begin(&st, &cfg, N, K, LR, &err) == 0, "%s", err.msg);
    CHECK(tc, policy_observe(st, &obs[0], &err) == 0, "%s", err.msg);
    Budget b = {.keep_fraction = 0.2};
    KeepSet ks;
    CHECK(tc, policy_select(st, &b, &ks, &err) == 0 && ks.total == (int)(LR * (1 - (1 - 0.2)) * K), "%s", err.msg);
    keepset_free(&ks);
    policy_end(st);
    /* CAKE cannot give the window to every head when L*f < w */
    policy_config(&cfg, "cake", NULL, &err);
    cfg.window = WR;
    CHECK(tc, policy_begin(&st, &cfg, N, K, LR, &err) == 0 && policy_observe(st, &obs[0], &err) == 0, "%s", err.msg);
    CHECK(tc, policy_select(st, &b, &ks, &err) != 0 && strstr(err.msg, "window"), "cake short: %s", err.msg);
    policy_end(st);
}

/* The stable top-k against a full qsort under the same order, with many ties. */
static int cmp_desc(const void *pa, const void *pb, void *ctx) {
    const float *s = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (s[a] != s[b]) return s[a] > s[b] ? -1 : 1;
    return a < b ? -1 : 1;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void test_topk(TestCounts *tc) {
    enum { NMAX = 500 };
    static float s[NMAX];
    static int order[NMAX], got[NMAX];
    unsigned seed = 4242;
    KvErr err;
    int ok = 1;
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + (int)(rng_next(&seed) % NMAX), k = (int)(rng_next(&seed) % (n + 1));
        int levels = 1 + (int)(rng_next(&seed) % 8);  /* few distinct values: ties everywhere */
        for (int i = 0; i < n; i++) s[i] = (float)(rng_next(&seed) % levels), order[i] = i;
        qsort_r(order, (size_t)n, sizeof(int), cmp_desc, s);
        if (topk_stable(s, n, k, got, &err)) ok = 0;
        qsort(got, (size_t)k, sizeof(int), cmp_int);
        qsort(order, (size_t)k, sizeof(int), cmp_int);
        for (int i = 0; i < k; i++) ok &= got[i] == order[i];
        int sorted[NMAX];
        sort_desc_stable(s, n, sorted, &err);
        qsort_r(order, (size_t)n, sizeof(int), cmp_desc, s);
        for (int i = 0; i < n; i++) ok &= sorted[i] == order[i];
    }
    CHECK(tc, ok, "top-k differs from qsort");
    CHECK(tc, topk_stable(s, 4, 5, got, &err) != 0, "k > n fails");
}

static void test_bad_input(TestCounts *tc) {
    KvErr err;
    PolicyConfig cfg;
    Budget b;
    CHECK(tc, policy_config(&cfg, "snapkvv", NULL, &err) != 0 && strstr(err.msg, "unknown policy 'snapkvv'") &&
                  strstr(err.msg, "defensivekv"), "unknown policy: %s", err.msg);
    CHECK(tc, policy_config(&cfg, "snapkv", "median", &err) != 0 && strstr(err.msg, "median"),
          "unknown aggregation: %s", err.msg);
    CHECK(tc, policy_config(&cfg, "streamingllm", "max", &err) != 0 && strstr(err.msg, "no aggregation"),
          "streaming + max: %s", err.msg);
    CHECK(tc, policy_config(&cfg, "full", "default", &err) == 0 && cfg.aggregation == AGG_DEFAULT &&
                  !strcmp(aggregation_name(cfg.aggregation), "none"), "full takes the default");
    CHECK(tc,
          policy_config(&cfg, "efficient_defensivekv", NULL, &err) == 0 && !strcmp(cfg.name, "defensivekv") &&
              cfg.aggregation == AGG_MAX_PRIOR && cfg.window == 32 && cfg.pool_kernel == 5,
          "press name and defaults");
    CHECK(tc, policy_config(&cfg, "criticalkv", "max+prior", &err) == 0 && cfg.aggregation == AGG_MAX_PRIOR &&
                  policy_needs_value_norm(&cfg) && policy_needs_attention(&cfg), "criticalkv max+prior");
    policy_config(&cfg, "streamingllm", NULL, &err);
    CHECK(tc, !policy_needs_attention(&cfg) && !policy_needs_value_norm(&cfg), "streamingllm needs nothing");

    static const char *const bad[] = {"", "abc", "0", "-0.2", "1.5", "150%", "12.5tok", "0tok", "0.2x", "nan"};
    for (int i = 0; i < 10; i++)
        CHECK(tc, budget_parse(bad[i], &b, &err) != 0 && strlen(err.msg) > 0, "budget '%s' accepted", bad[i]);
    /* token counts past an int are out of range, said so before any conversion (undefined behaviour) */
    static const char *const huge[] = {"99999999999tok", "1e999tok", "-1e30 tokens", "inftok"};
    for (int i = 0; i < 4; i++)
        CHECK(tc, budget_parse(huge[i], &b, &err) != 0 && strstr(err.msg, "out of range") && strstr(err.msg, huge[i]),
              "budget '%s': %s", huge[i], err.msg);
    CHECK(tc, budget_parse("nantok", &b, &err) != 0 && strstr(err.msg, "whole number"), "nantok: %s", err.msg);
    CHECK(tc, budget_parse("1e-400", &b, &err) != 0 && strstr(err.msg, "(0, 1]"), "underflow: %s", err.msg);
    CHECK(tc, budget_parse("1e9tok", &b, &err) == 0 && b.tokens == 1000000000, "1e9tok");
    CHECK(tc, budget_parse("20%", &b, &err) == 0 && b.keep_fraction == 0.2 && b.tokens == 0, "20%%");
    CHECK(tc, budget_parse("512 tokens", &b, &err) == 0 && b.tokens == 512, "512 tokens");
    CHECK(tc, budget_parse("1", &b, &err) == 0 && b.keep_fraction == 1.0, "1");
    b = (Budget){.keep_fraction = 0.2};
    CHECK(tc, budget_compression_ratio(&b, 100) == 0.8 && budget_keep_fraction(&b, 4000) == 0.19999999999999996 &&
                  (int)(4000 * budget_keep_fraction(&b, 4000)) == 799, "the 1 - 0.8 quirk");

    PolicyState *st = NULL;
    policy_config(&cfg, "snapkv", NULL, &err);
    CHECK(tc, policy_begin(&st, &cfg, 2, 2, 32, &err) != 0 && strstr(err.msg, "longer than the window"),
          "context = window: %s", err.msg);
    CHECK(tc, policy_begin(&st, &cfg, 2, 2, 20, &err) != 0 && strstr(err.msg, "20 tokens"), "context < window: %s",
          err.msg);
    cfg.pool_kernel = 4;
    CHECK(tc, policy_begin(&st, &cfg, 2, 2, 64, &err) != 0 && strstr(err.msg, "odd"), "even kernel: %s", err.msg);
    cfg.pool_kernel = 5, cfg.window = 0;
    CHECK(tc, policy_begin(&st, &cfg, 2, 2, 64, &err) != 0 && strstr(err.msg, "window"), "window 0: %s", err.msg);
    cfg.window = W;
    float attn[2 * W * L];
    two_head_rows(attn);
    Observation o = hand_obs(1, 2, 2, 2, attn, NULL);
    CHECK(tc, policy_begin(&st, &cfg, 2, 2, L, &err) == 0, "%s", err.msg);
    CHECK(tc, policy_observe(st, &o, &err) != 0 && strstr(err.msg, "expected layer 0"), "out of order: %s", err.msg);
    KeepSet ks;
    b = (Budget){.keep_fraction = 0.5};
    CHECK(tc, policy_select(st, &b, &ks, &err) != 0 && strstr(err.msg, "0 of 2"), "select early: %s", err.msg);
    o.layer = 0, o.H = 3;
    CHECK(tc, policy_observe(st, &o, &err) != 0 && strstr(err.msg, "multiple"), "H %% K: %s", err.msg);
    o.H = 2, o.w = 3;
    CHECK(tc, policy_observe(st, &o, &err) != 0 && strstr(err.msg, "window"), "window mismatch: %s", err.msg);
    o.w = W, o.attn = NULL;
    CHECK(tc, policy_observe(st, &o, &err) != 0 && strstr(err.msg, "without attention"), "no attention: %s", err.msg);
    policy_end(st);
    policy_config(&cfg, "criticalkv", NULL, &err);
    cfg.window = W;
    o.attn = attn;
    CHECK(tc, policy_begin(&st, &cfg, 1, 2, L, &err) == 0 && policy_observe(st, &o, &err) != 0 &&
                  strstr(err.msg, "value norms"), "no value norms: %s", err.msg);
    policy_end(st);
    cfg.name = "nonesuch";
    CHECK(tc, policy_begin(&st, &cfg, 1, 2, L, &err) != 0 && strstr(err.msg, "nonesuch"), "begin unknown: %s", err.msg);

    KeepSet full;
    CHECK(tc, keepset_full(&full, 2, 3, 5, &err) == 0 && full.total == 30 && full.positions[full.offsets[4] + 4] == 4,
          "keepset_full");
    keepset_free(&full);
    CHECK(tc, keepset_init(&full, 1, 2, (int[]){3, -1}, &err) != 0 && strstr(err.msg, "negative"), "negative count");
    CHECK(tc, keepset_full(&full, 1, 2, 0, &err) != 0, "empty context");
}

/* max+prior ties (policies/score.c clamp_at_mean): one head whose two window rows both hold the prefix scores
 * s = [.1875 .0078125 .015625 .125 .0234375 .03125 .0625 .0390625 .046875 .0859375] (binary fractions, so the
 * mean is exactly .0625). The prior raises the six entries below the mean (1 2 4 5 7 8) to .0625, where they tie
 * with each other and with j6, which sits at the mean already. At f = 0.75 SnapKV keeps 9: the window (10 11,
 * padded with the max), the three entries above the mean (0 3 9), and four at .0625 — in the reference by
 * position among all seven tied (1 2 4 5: four prior-clamped entries kept); under the ties_by_unclamped ablation
 * the raised entries rank just below j6, which comes first, then by their unclamped score (8 7 5: three clamped),
 * the keep-set of max alone. policy_clamped_kept reports -1 for the other aggregations. */
static void test_prior_ties(TestCounts *tc) {
    static const float s[P] = {.1875f, .0078125f, .015625f, .125f, .0234375f, .03125f, .0625f, .0390625f, .046875f,
                               .0859375f};
    const int js[P] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    float attn[W * L];
    set_row(attn, 0, 0, js, s, P);
    set_row(attn, 0, 1, js, s, P);
    Observation o = hand_obs(0, 1, 1, 1, attn, NULL);
    const struct {
        const char *agg;
        int ties_by_unclamped;
        int want[9];
        long long clamped;
    } cases[] = {{"max+prior", 0, {0, 1, 2, 3, 4, 5, 9, 10, 11}, 4},
                 {"max+prior", 1, {0, 3, 5, 6, 7, 8, 9, 10, 11}, 3},
                 {"max", 0, {0, 3, 5, 6, 7, 8, 9, 10, 11}, -1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        KvErr err = {{0}};
        PolicyConfig cfg;
        PolicyState *st = NULL;
        KeepSet ks = {0};
        Budget b = {0.75, 0};
        CHECK(tc, policy_config(&cfg, "snapkv", cases[c].agg, &err) == 0, "%s", err.msg);
        cfg.window = W;
        cfg.pool_kernel = 1;
        cfg.ties_by_unclamped = cases[c].ties_by_unclamped;
        int rc = policy_begin(&st, &cfg, 1, 1, L, &err);
        if (!rc) rc = policy_observe(st, &o, &err);
        if (!rc) rc = policy_select(st, &b, &ks, &err);
        CHECK(tc, rc == 0, "case %zu: %s", c, err.msg);
        if (!rc) {
            CHECK(tc, segment_is(&ks, 0, cases[c].want, 9), "case %zu (%s, ties_by_unclamped %d): keep-set", c,
                  cases[c].agg, cases[c].ties_by_unclamped);
            long long clamped, kept;
            policy_clamped_kept(st, &ks, &clamped, &kept);
            CHECK(tc, clamped == cases[c].clamped && kept == 9, "case %zu: %lld of %lld kept entries clamped", c,
                  clamped, kept);
        }
        keepset_free(&ks);
        policy_end(st);
    }
}

static int keepsets_equal(const KeepSet *a, const KeepSet *b) {
    if (a->n_layers != b->n_layers || a->n_kv_heads != b->n_kv_heads || a->total != b->total) return 0;
    for (int s = 0; s < a->n_layers * a->n_kv_heads; s++) {
        if (a->counts[s] != b->counts[s]) return 0;
        if (memcmp(a->positions + a->offsets[s], b->positions + b->offsets[s], sizeof(int) * (size_t)a->counts[s]))
            return 0;
    }
    return 1;
}

/* Scores copied from a policy that scores the same way (what a sweep does: runs/prepare.c) select the same
 * keep-sets, entry for entry, as scores computed by the policy itself; policies that score differently are
 * never paired, and a copy between them is refused. */
static void test_shared_scores(TestCounts *tc) {
    enum { N = 3, H = 4, K = 2, LR = 96, WR = 8 };
    static float attn[N * H * WR * LR], nu[N * K * LR];
    Observation obs[N];
    unsigned seed = 777;
    random_obs(&seed, N, H, K, LR, WR, attn, nu, obs);
    /* {copying policy, source policy, aggregation (NULL: default), equal?} */
    static const struct {
        const char *name, *from, *agg;
        int equal;
    } pairs[] = {{"adakv", "snapkv", NULL, 1},          {"layer-defensivekv", "defensivekv", NULL, 1},
                 {"adakv", "snapkv", "max+prior", 1},   {"layer-defensivekv", "defensivekv", "mean", 1},
                 {"criticalkv", "snapkv", NULL, 0},     {"cake", "snapkv", NULL, 0},
                 {"defensivekv", "snapkv", "max+prior", 0}, {"snapkv", "snapkv", NULL, 1}};
    static const char *const budgets[] = {"0.2", "0.4", "40tok"};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        KvErr err;
        PolicyConfig cs, cf;
        PolicyState *own = NULL, *copy = NULL, *from = NULL;
        int ok = !policy_config(&cs, pairs[i].name, pairs[i].agg, &err) &&
                 !policy_config(&cf, pairs[i].from, pairs[i].agg, &err);
        cs.window = cf.window = WR;
        ok = ok && !policy_begin(&own, &cs, N, K, LR, &err) && !policy_begin(&copy, &cs, N, K, LR, &err) &&
             !policy_begin(&from, &cf, N, K, LR, &err);
        CHECK(tc, ok, "%s from %s: %s", pairs[i].name, pairs[i].from, err.msg);
        if (!ok) goto next;
        CHECK(tc, policy_scores_equal(copy, from) == pairs[i].equal, "%s and %s (%s): scores_equal should be %d",
              pairs[i].name, pairs[i].from, pairs[i].agg ? pairs[i].agg : "default", pairs[i].equal);
        if (!pairs[i].equal) {
            int rc = policy_observe(from, &obs[0], &err) || policy_observe_copy(copy, from, &obs[0], &err);
            CHECK(tc, rc && strstr(err.msg, "scores differently"), "%s from %s: copy refused: %s", pairs[i].name,
                  pairs[i].from, rc ? err.msg : "accepted");
            goto next;
        }
        for (int l = 0; l < N && ok; l++) {
            ok = !policy_observe(own, &obs[l], &err) && !policy_observe(from, &obs[l], &err) &&
                 !policy_observe_copy(copy, from, &obs[l], &err);
            CHECK(tc, ok, "%s from %s, layer %d: %s", pairs[i].name, pairs[i].from, l, err.msg);
        }
        for (int b = 0; b < 3 && ok; b++) {
            Budget budget;
            KeepSet a, c;
            budget_parse(budgets[b], &budget, &err);
            if (policy_select(own, &budget, &a, &err) || policy_select(copy, &budget, &c, &err)) {
                CHECK(tc, 0, "%s %s: %s", pairs[i].name, budgets[b], err.msg);
                break;
            }
            long long ck_a, k_a, ck_c, k_c;
            policy_clamped_kept(own, &a, &ck_a, &k_a);
            policy_clamped_kept(copy, &c, &ck_c, &k_c);
            CHECK(tc, keepsets_equal(&a, &c) && ck_a == ck_c && k_a == k_c,
                  "%s (%s) at %s: the keep-set from copied scores differs from its own", pairs[i].name,
                  pairs[i].agg ? pairs[i].agg : "default", budgets[b]);
            keepset_free(&a);
            keepset_free(&c);
        }
        /* the source one layer ahead is required */
        if (ok) {
            PolicyState *late = NULL;
            ok = !policy_begin(&late, &cs, N, K, LR, &err);
            int rc = ok && policy_observe_copy(late, from, &obs[0], &err);
            CHECK(tc, rc && strstr(err.msg, "has observed 3 layers"), "copy from a source not one layer ahead: %s",
                  rc ? err.msg : "accepted");
            policy_end(late);
        }
    next:
        policy_end(own);
        policy_end(copy);
        policy_end(from);
    }
}

/* The registry is what the build found in policies/: every file there with a POLICY_DESCRIPTOR(ID) line is
 * listed, ID its file name in capitals, and its policy is known by that file name ('_' written '-'). */
static void test_registry_files(TestCounts *tc) {
    int n, n_files = 0;
    policy_registry(&n);
    DIR *dir = opendir("policies");
    CHECK(tc, dir != NULL, "policies/: not found (run from the project root)");
    if (!dir) return;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t len = strlen(e->d_name);
        if (len < 3 || len > 64 || strcmp(e->d_name + len - 2, ".c")) continue;
        char path[96], line[256], id[64] = "", want[64], name[64];
        snprintf(path, sizeof path, "policies/%s", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "POLICY_DESCRIPTOR(%63[A-Z0-9_])", id) == 1) break;
        fclose(f);
        if (!id[0]) continue;
        n_files++;
        for (size_t i = 0; i + 2 < len; i++) {
            want[i] = (char)toupper((unsigned char)e->d_name[i]);
            name[i] = e->d_name[i] == '_' ? '-' : e->d_name[i];
        }
        want[len - 2] = name[len - 2] = 0;
        CHECK(tc, !strcmp(id, want), "%s: descriptor POLICY_%s, not POLICY_%s", path, id, want);
        const PolicyRow *row = policy_row(name);
        CHECK(tc, row && !strcmp(row->name, name), "%s: policy '%s' not in the registry", path, name);
    }
    closedir(dir);
    CHECK(tc, n_files == n, "%d descriptor files in policies/, %d policies in the registry", n_files, n);
}

/* The kvpress baselines' allocations on hand-made scores (allocate_keepset with the descriptor's row).
 * PyramidKV's layer budget (PyramidKVPress.get_layer_budget), L=1430, w=8, f=0.2 (0.19999999999999996), N=30:
 * L*f = 286, min = 286/20 = 14.3, max = 2*286 - 14.3 = 557.7 (below L - w), steps = 543.4/29 = 18.738: layers 0, 15,
 * 29 keep round(557.7) = 558, round(276.63) = 277, round(14.3) = 14. L=128, f=0.2: min = 1.28 < w, SnapKV's
 * round(25.6) = 26 (int() would be 25); L=10, f=0.25: round(2.5) = 2, Python's half to even.
 * ChunkKV, chunks of 20 over L=45 (20, 20 and the last 5), K=2: head 0 scores 1 on chunk 1, head 1 scores 0.5 on
 * chunk 2, else 0: chunk scores (sums over heads, mean per chunk) 0, 1, 0.5. At f=0.5, int(3*0.5) = 1 chunk: 20..39
 * in both heads; at f=0.7, int(2.1) = 2 chunks: 20..44. Under one chunk (L=12, f=0.25) each head its own top 3.
 * critical-snapkv at L=10, f=0.4: n = 4, stage 1 max(1, int(10*0.4*0.5)) = 2 by base (9 at 0, 8 at 1), then 2 more by
 * score among the rest (7 at 5, 6 at 9; position 0's and 1's scores are the lowest). */
/* allocate_keepset of one layer, a failure reported. */
static int allocate_one(TestCounts *tc, const PolicyRow *row, const PolicyConfig *cfg, const LayerScores *ls, int K,
                        int L, double f, KeepSet *ks) {
    KvErr err;
    int rc = allocate_keepset(row, cfg, ls, 1, K, L, f, ks, &err);
    CHECK(tc, rc == 0, "%s at L=%d, f=%g: %s", row->name, L, f, err.msg);
    return rc;
}

static void test_kvpress_allocations(TestCounts *tc) {
    const PolicyRow *pyramid = policy_row("pyramidkv"), *chunk = policy_row("chunkkv");
    const PolicyRow *critical = policy_row("critical-snapkv");
    CHECK(tc, pyramid && chunk && critical, "the kvpress baselines are registered");
    if (!pyramid || !chunk || !critical) return;
    const double f20 = 1.0 - (1.0 - 0.2), f25 = 1.0 - (1.0 - 0.25);
    CHECK(tc, pyramid->layer_budget(0, 30, 1430, 8, f20) == 558 && pyramid->layer_budget(15, 30, 1430, 8, f20) == 277 &&
                  pyramid->layer_budget(29, 30, 1430, 8, f20) == 14,
          "pyramid: %d %d %d, want 558 277 14", pyramid->layer_budget(0, 30, 1430, 8, f20),
          pyramid->layer_budget(15, 30, 1430, 8, f20), pyramid->layer_budget(29, 30, 1430, 8, f20));
    CHECK(tc, pyramid->layer_budget(3, 30, 128, 8, f20) == 26 && pyramid->layer_budget(0, 1, 10, 8, f25) == 2,
          "pyramid fallback: %d (want 26), %d (want 2)", pyramid->layer_budget(3, 30, 128, 8, f20),
          pyramid->layer_budget(0, 1, 10, 8, f25));

    KvErr err;
    PolicyConfig cfg;
    KeepSet ks;
    policy_config(&cfg, "chunkkv", NULL, &err);
    cfg.window = 1;
    float chunk_scores[2 * 45] = {0};
    for (int j = 20; j < 40; j++) chunk_scores[j] = 1.0f;
    for (int j = 40; j < 45; j++) chunk_scores[45 + j] = 0.5f;
    LayerScores ls = {.score = chunk_scores};
    if (!allocate_one(tc, chunk, &cfg, &ls, 2, 45, 0.5, &ks)) {
        int want[20];
        for (int t = 0; t < 20; t++) want[t] = 20 + t;
        CHECK(tc, segment_is(&ks, 0, want, 20) && segment_is(&ks, 1, want, 20), "chunkkv at 50%%: %d, %d kept",
              ks.counts[0], ks.counts[1]);
        keepset_free(&ks);
    }
    if (!allocate_one(tc, chunk, &cfg, &ls, 2, 45, 0.7, &ks)) {
        int want[25];
        for (int t = 0; t < 25; t++) want[t] = 20 + t;
        CHECK(tc, segment_is(&ks, 0, want, 25) && segment_is(&ks, 1, want, 25), "chunkkv at 70%%: %d, %d kept",
              ks.counts[0], ks.counts[1]);
        keepset_free(&ks);
    }
    static const float short_scores[2 * 12] = {0, 5, 0, 4, 0, 3, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 8, 7, 0};
    LayerScores short_ls = {.score = (float *)short_scores};
    if (!allocate_one(tc, chunk, &cfg, &short_ls, 2, 12, f25, &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 1, 3, 5);
        EXPECT_SEGMENT(tc, &ks, 1, 0, 9, 10);
        keepset_free(&ks);
    }
    static const float base[10] = {9, 8, 1, 1, 1, 1, 1, 1, 1, 1}, weighted[10] = {0, 0, 1, 2, 3, 7, 1, 2, 3, 6};
    LayerScores two = {.score = (float *)weighted, .base = (float *)base};
    policy_config(&cfg, "critical-snapkv", NULL, &err);
    if (!allocate_one(tc, critical, &cfg, &two, 1, 10, 0.4, &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 5, 9);
        keepset_free(&ks);
    }
}

/* The descriptors (policies/<name>.c) and what runs/ and report/ ask of them. */
static void test_descriptors(TestCounts *tc) {
    int n;
    const PolicyRow *const *all = policy_registry(&n);
    int n_reference = 0;
    for (int i = 0; i < n; i++) {
        const PolicyRow *r = all[i];
        for (int j = 0; j < i; j++)
            CHECK(tc, strcmp(r->name, all[j]->name) && strcmp(r->press_name, all[j]->press_name) &&
                          strcmp(r->name, all[j]->press_name) && strcmp(r->press_name, all[j]->name) &&
                          (!r->colour || !all[j]->colour || strcmp(r->colour, all[j]->colour)),
                  "%s and %s share a name or a colour", r->name, all[j]->name);
        CHECK(tc, policy_row(r->name) == r && policy_row(r->press_name) == r, "%s: found by both names", r->name);
        CHECK(tc, r->source && *r->source, "%s: no source", r->name);
        CHECK(tc, !r->aggregations == (r->default_aggregation == AGG_DEFAULT) &&
                      (!r->aggregations || (r->aggregations & AGG_BIT(r->default_aggregation))),
              "%s: the default aggregation is not one it takes", r->name);
        CHECK(tc, r->score || !(r->needs & (NEEDS_ATTENTION | NEEDS_VALUE_NORM | NEEDS_KEYS | NEEDS_VALUES |
                                             NEEDS_ATTENTION_SUMS | NEEDS_QUERY_STATS)),
              "%s: needs an observation but scores nothing", r->name);
        CHECK(tc, r->allocation != ALLOC_CHUNKS || r->chunk_length > 0, "%s: chunks of %d tokens", r->name,
              r->chunk_length);
        CHECK(tc, !(r->needs & NEEDS_RECONSTRUCTION) ||
                      (r->reconstruct && r->chunk_length > 0 && r->first_prompt && r->next_prompt && r->next_tail >= 0),
              "%s: a reconstruction pass without its scorer, chunk length or prompts", r->name);
        const int reads_context = r->allocation == ALLOC_UNIFORM || r->allocation == ALLOC_TWO_STAGE ||
                                  r->allocation == ALLOC_CHUNKS || r->allocation == ALLOC_PRUNE_GLOBAL;
        CHECK(tc, !reads_context || (r->score && r->span == SPAN_CONTEXT),
              "%s: its allocation reads scores of every context position", r->name);
        CHECK(tc, !r->layer_budget || r->allocation == ALLOC_UNIFORM, "%s: layer budgets without ALLOC_UNIFORM",
              r->name);
        CHECK(tc, r->allocation != ALLOC_TWO_STAGE || (r->first_stage_ratio > 0 && r->first_stage_ratio <= 1),
              "%s: two stages without a first-stage share", r->name);
        CHECK(tc, !r->colour || (strlen(r->colour) == 7 && r->colour[0] == '#'), "%s: colour '%s'", r->name,
              r->colour);
        CHECK(tc, (r->score == score_value_weighted) == r->ladder.enabled &&
                      (r->allocation == ALLOC_LADDER) == r->ladder.enabled &&
                      (!r->ladder.enabled || (r->span == SPAN_CONTEXT && (r->needs & NEEDS_VALUE_NORM))),
              "%s: the ladder's scorer, allocation and steps go together", r->name);
        n_reference += r->role == POLICY_REFERENCE;
        PolicyConfig cfg;
        KvErr err;
        CHECK(tc, policy_config(&cfg, r->name, NULL, &err) == 0, "%s", err.msg);
        CHECK(tc, policy_aggregates(&cfg) == !!r->aggregations && policy_observes(&cfg) == !!r->score,
              "%s: aggregates / observes", r->name);
        if (!r->aggregations) CHECK(tc, policy_config(&cfg, r->name, "mean", &err) != 0, "%s takes mean", r->name);
    }
    CHECK(tc, n_reference == 1 && policy_role("full") == POLICY_REFERENCE, "one reference, the full cache");
    CHECK(tc, policy_role("defensivekv") == POLICY_PROPOSED && policy_role("layer-defensivekv") == POLICY_PROPOSED &&
                  policy_role("criticalkv") == POLICY_BASELINE && policy_role("not-a-policy") == POLICY_BASELINE,
          "roles");
    CHECK(tc, policy_colour("duo_attention") == policy_colour("duoattention") && !policy_colour("not-a-policy"),
          "colours by either name");

    KvErr err;
    PolicyConfig full, snap, snap_max, snap_w16, def, def_press, knorm;
    policy_config(&full, "full", NULL, &err);
    policy_config(&snap, "snapkv", NULL, &err);
    policy_config(&snap_max, "snapkv", "max", &err);
    policy_config(&snap_w16, "snapkv", NULL, &err);
    snap_w16.window = 16;
    policy_config(&def, "defensivekv", NULL, &err);
    policy_config(&def_press, "efficient_defensivekv", NULL, &err);
    policy_config(&knorm, "knorm", NULL, &err);
    CHECK(tc, policy_keeps_all(&full) && !policy_keeps_all(&snap) && !policy_keeps_all(&knorm), "keeps all");
    CHECK(tc, policy_configs_equal(&def, &def_press) && policy_configs_equal(&snap, &snap) &&
                  !policy_configs_equal(&snap, &snap_max) && !policy_configs_equal(&snap, &snap_w16) &&
                  !policy_configs_equal(&snap, &def),
          "config equality");
    CHECK(tc, policy_needs_keys(&knorm) && !policy_needs_attention(&knorm) && !policy_aggregates(&knorm) &&
                  policy_observes(&knorm),
          "knorm reads only the keys");
    Budget b20, b512, b40;
    budget_parse("20%", &b20, &err);
    budget_parse("512tok", &b512, &err);
    budget_parse("40tok", &b40, &err);
    /* int(4000 * (1 - (1 - 0.2))) = int(799.9999999999998): the reference's double arithmetic (spec §0). */
    CHECK(tc, policy_budget_tokens(&snap, &b20, 4000) == 799 && policy_budget_tokens(&snap, &b512, 4000) == 512 &&
                  policy_budget_tokens(&full, &b20, 4000) == 4000,
          "budget tokens");
    CHECK(tc, policy_keep_share(&full, &b20, 100) == 1.0 && policy_keep_share(&snap, &b20, 100) == 0.2 &&
                  policy_keep_share(&snap, &b40, 100) == 0.4 && policy_keep_share(&snap, &b512, 100) == 1.0 &&
                  policy_keep_share(&snap, &b40, 0) == 0.0,
          "keep shares");
}

/* Knorm by hand: one layer, one kv-head, L=12 keys of d=1 with norms 5, 1, 3, 4, 2, 0, 6, 7, 8, 9, 10, 11 (after
 * RoPE); the negative norm ranks 0 (pos 5), -1 (pos 1), -2 (pos 4) first: 25% keeps int(12 * 0.25) = 3, positions
 * 1, 4, 5 and no window. */
static void test_knorm(TestCounts *tc) {
    static const float keys[L] = {5, 1, -3, 4, -2, 0, 6, -7, 8, 9, 10, 11};
    const float *rows[1] = {keys};
    Observation obs = {.layer = 0, .n_layers = 1, .L = L, .w = W, .H = 1, .K = 1, .d = 1, .D = 1, .keys = rows};
    KeepSet ks;
    if (!run_policy(tc, "knorm", NULL, 1, &obs, 1, "25%", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 1, 4, 5);
    keepset_free(&ks);
}

/* LagKV on a context shorter than 4 sinks + 2 partitions of 128 scores nothing: the sinks 1, then (j - 4) / 8 for
 * j = 4..11, so 50% keeps int(12 * 0.5) = 6: the sinks 0..3 and the newest two, 10 and 11. */
static void test_lagkv_short(TestCounts *tc) {
    static const float x[L] = {0};
    const float *rows[1] = {x};
    Observation obs = {.layer = 0, .n_layers = 1, .L = L, .w = W, .H = 1, .K = 1, .d = 1, .D = 1, .keys = rows,
                       .values = rows};
    KeepSet ks;
    if (!run_policy(tc, "lagkv", NULL, 1, &obs, 1, "50%", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 10, 11);
    keepset_free(&ks);
}

/* observed-attention (H2O as kvpress): two query heads of one kv-head; every query's attention summed per key,
 * head 0 {6, 1, ..., 1, 0.5}, head 1 {4, 1, ..., 1, 0.1}. Position j scores the mean over the heads of sum / (12 - j):
 * 10/12/2 = 0.417 at 0, 1/(12 - j) at 1..10 (0.5 at 10, 0.333 at 9), 0.6/2 = 0.3 at 11; 25% keeps 3: 0, 9, 10 (the
 * plain sums would keep 0, then the lowest of the tied 2s, 1 and 2). Without the sums it fails, and a backend that
 * does not observe them is named as missing them. */
static void test_observed_attention(TestCounts *tc) {
    double sums[2 * L];
    for (int j = 0; j < L; j++) sums[j] = sums[L + j] = 1.0;
    sums[0] = 6, sums[L] = 4, sums[L - 1] = 0.5, sums[2 * L - 1] = 0.1;
    Observation obs = {.layer = 0, .n_layers = 1, .L = L, .w = W, .H = 2, .K = 1, .d = 1, .D = 2, .attn_sums = sums};
    KeepSet ks;
    if (!run_policy(tc, "observed-attention", NULL, 1, &obs, 1, "25%", &ks)) EXPECT_SEGMENT(tc, &ks, 0, 0, 9, 10);
    keepset_free(&ks);
    PolicyConfig cfg;
    PolicyState *st = NULL;
    KvErr err;
    obs.attn_sums = NULL;
    int rc = policy_config(&cfg, "observed-attention", NULL, &err) || policy_begin(&st, &cfg, 1, 1, L, &err);
    CHECK(tc, !rc && policy_observe(st, &obs, &err) != 0 && strstr(err.msg, "without attention sums"),
          "observed without the sums: %s", err.msg);
    policy_end(st);
    const char *missing = rc ? NULL : policy_missing_observation(&cfg, 0);
    CHECK(tc, missing && strstr(missing, "attention sums") && !policy_missing_observation(&cfg, OBSERVES_ATTENTION_SUMS) &&
                  policy_needs_attention_sums(&cfg) && !policy_needs_attention(&cfg),
          "observed-attention reads the attention sums and nothing else a backend may lack");
    CHECK(tc, !policy_config(&cfg, "knorm", NULL, &err) && !policy_missing_observation(&cfg, 0),
          "knorm runs on any backend");
}

/* expected-attention (kvpress's ExpectedAttentionPress), d = 2, one frequency w = 0.002f, two query heads of one
 * kv-head. The rotation averaged over positions 12..523 is, by the Dirichlet kernel's closed form (not a sum),
 * c = cos(w (L + 511/2)) sin(512 w/2) / (512 sin(w/2)), s likewise with sin: R = [[c, -s], [s, c]]. Head 0 has mean
 * (1, 0) and no covariance: R mu = (c, s), logit k.(c, s) / sqrt(2); head 1 mean 0 and covariance diag(1, 0):
 * R S R^T = (c, s)(c, s)^T, logit (k.(c, s))^2 / 4. Each softmaxed over the keys after the 4 sinks, averaged, times
 * ||v||; the sinks score the largest plus 1. 50% keeps the sinks and the two largest. Without the statistics, with
 * a context of only sinks, or on a backend without them it fails, naming what is missing. */
static void test_expected_attention(TestCounts *tc) {
    const float inv_freq[1] = {0.002f}, key[L][2] = {{9, 9}, {9, 9}, {9, 9}, {9, 9}, {2, 0}, {0, 2}, {1, 1}, {-1, 1},
                                                    {0, 0}, {1, -1}, {-2, 0}, {0, -2}};
    float value[L][2];
    const double norm[L] = {1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 2};
    for (int j = 0; j < L; j++) value[j][0] = 0, value[j][1] = (float)norm[j];
    const double stats[2][6] = {{1, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0}};
    const double w = inv_freq[0], amp = sin(512 * w / 2) / (512 * sin(w / 2));
    const double c = cos(w * (L + 511 / 2.0)) * amp, s = sin(w * (L + 511 / 2.0)) * amp;
    double logit[2][L], total[2] = {0, 0}, want[L], top = 0;
    for (int j = 4; j < L; j++) {
        double u = c * key[j][0] + s * key[j][1];
        logit[0][j] = u / sqrt(2.0), logit[1][j] = u * u / 4;
        for (int h = 0; h < 2; h++) total[h] += exp(logit[h][j]);
    }
    for (int j = 4; j < L; j++) {
        want[j] = (exp(logit[0][j]) / total[0] + exp(logit[1][j]) / total[1]) / 2 * norm[j];
        top = fmax(top, want[j]);
    }
    for (int j = 0; j < 4; j++) want[j] = top + 1;
    const float *keys[1] = {key[0]}, *values[1] = {value[0]};
    Observation obs = {.layer = 0, .n_layers = 1, .L = L, .w = W, .H = 2, .K = 1, .d = 2, .D = 4, .keys = keys,
                       .values = values, .query_stats = stats[0], .query_stats_from = 4, .rope_inv_freq = inv_freq};
    PolicyConfig cfg;
    KvErr err;
    LayerScores ls;
    int rc = policy_config(&cfg, "expected-attention", NULL, &err) ||
             score_layer(policy_row("expected-attention"), &cfg, &obs, &ls, &err);
    CHECK(tc, !rc, "expected-attention: %s", err.msg);
    for (int j = 0; !rc && j < L; j++)
        CHECK(tc, test_close(ls.score[j], want[j], 1e-6, 0), "expected-attention j%d = %.9g, want %.9g", j,
              ls.score[j], want[j]);
    if (!rc) layer_scores_free(&ls);
    int best = 4, next = 5; /* the two largest after the sinks, by the closed form */
    for (int j = 4; j < L; j++) best = want[j] > want[best] ? j : best;
    for (int j = 4; j < L; j++) next = j != best && (next == best || want[j] > want[next]) ? j : next;
    int first = best < next ? best : next, second = best < next ? next : best;
    KeepSet ks;
    if (!run_policy(tc, "expected-attention", NULL, 1, &obs, 1, "50%", &ks))
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, first, second);
    keepset_free(&ks);
    obs.L = 4;
    CHECK(tc, score_layer(policy_row("expected-attention"), &cfg, &obs, &ls, &err) != 0 &&
                  strstr(err.msg, "nothing after its 4 sink tokens"), "a context of sinks only: %s", err.msg);
    obs.L = L, obs.query_stats = NULL;
    CHECK(tc, score_layer(policy_row("expected-attention"), &cfg, &obs, &ls, &err) != 0 &&
                  strstr(err.msg, "without the pre-RoPE query statistics"), "observed without them: %s", err.msg);
    const char *missing = policy_missing_observation(&cfg, OBSERVES_ATTENTION_SUMS);
    CHECK(tc, missing && strstr(missing, "covariance of the prefill's queries before RoPE") &&
                  !policy_missing_observation(&cfg, OBSERVES_QUERY_STATS) && policy_query_stats_from(&cfg) == 4 &&
                  policy_needs_keys(&cfg) && !policy_needs_attention_sums(&cfg),
          "expected-attention reads the query statistics from position 4, the keys and values");
}

/* Random with seed 0 draws torch.manual_seed(0); torch.rand(12): 0.4963, 0.7682, 0.0885, 0.1320, 0.3074, 0.6341,
 * 0.4901, 0.8964, 0.4556, 0.6323, 0.3489, 0.4017 (torch 2.15); 25% keeps the three largest, positions 1, 5, 7, and
 * a second layer draws the same. */
static void test_random(TestCounts *tc) {
    Observation obs[2] = {{.layer = 0, .n_layers = 2, .L = L, .w = W, .H = 1, .K = 1, .d = 1, .D = 1},
                          {.layer = 1, .n_layers = 2, .L = L, .w = W, .H = 1, .K = 1, .d = 1, .D = 1}};
    KeepSet ks;
    if (!run_policy(tc, "random", NULL, 1, obs, 2, "25%", &ks)) {
        EXPECT_SEGMENT(tc, &ks, 0, 1, 5, 7);
        EXPECT_SEGMENT(tc, &ks, 1, 1, 5, 7);
    }
    keepset_free(&ks);
    /* Past the generator's first 624 outputs: torch.rand(1, 2, 700) after manual_seed(0) has its three largest
     * at 337, 385, 530 (head 0) and 76, 78, 272 (head 1, draws 700..1399). */
    KvErr err;
    PolicyConfig cfg;
    PolicyState *st = NULL;
    Observation big = {.layer = 0, .n_layers = 1, .L = 700, .w = 1, .H = 2, .K = 2, .d = 1, .D = 1};
    Budget three = {.tokens = 3};
    int rc = policy_config(&cfg, "random", NULL, &err) || policy_begin(&st, &cfg, 1, 2, 700, &err) ||
             policy_observe(st, &big, &err) || policy_select(st, &three, &ks, &err);
    CHECK(tc, rc == 0, "random over 700 tokens: %s", err.msg);
    if (!rc) {
        EXPECT_SEGMENT(tc, &ks, 0, 337, 385, 530);
        EXPECT_SEGMENT(tc, &ks, 1, 76, 78, 272);
    }
    keepset_free(&ks);
    policy_end(st);
}

/* KVzip by hand. d = 4, so a query (2, 0, 0, 0) has the logit k[0] with a key k. Context L = 8, one repeat query,
 * the chunk [4, 6): the subset is the 4 sinks (logit 0), the chunk (ln 3, 0) and the repeat key (0), so the softmax's
 * total is 4 + 3 + 1 + 1 = 9 and the chunk scores 3/9 and 1/9; key 6 (logit ln 5) lies outside the subset (with it
 * the total would be 14). The selection over 2 layers of 8 at keep 0.75 drops int(16 * 0.25) = 4 entries: the 8
 * sinks are kept, then the top 4 of the rest, {.6 (layer 1, 5), .5 (0, 4), .4 (1, 7), .3 (0, 6)}. The state refuses
 * a select before the pass reached the context's end and a chunk out of order. */
static void test_kvzip(TestCounts *tc) {
    const PolicyRow *row = policy_row("kvzip");
    CHECK(tc, row && row->reconstruct, "kvzip is registered with its reconstruction scorer");
    if (!row || !row->reconstruct) return;
    enum { L = 8, d = 4 };
    float keys[(L + 1) * d] = {0}, query[d] = {2, 0, 0, 0}, score[L] = {0};
    keys[4 * d] = logf(3.0f);
    keys[6 * d] = logf(5.0f);
    const float *key_rows[1] = {keys};
    Observation o = {.layer = 0, .n_layers = 1, .L = L + 1, .w = 1, .H = 1, .K = 1, .d = d, .q_win = query,
                     .keys = key_rows};
    KvErr err = {{0}};
    CHECK(tc, row->reconstruct(row, &o, 4, 6, L, score, &err) == 0, "%s", err.msg);
    CHECK(tc, fabsf(score[4] - 1.0f / 3) < 1e-6f && fabsf(score[5] - 1.0f / 9) < 1e-6f && score[6] == 0.0f &&
                  score[3] == 0.0f, "kvzip chunk scores %g %g (want 1/3, 1/9), outside %g %g", score[4], score[5],
          score[3], score[6]);
    float s0[L] = {0, 0, 0, 0, .5f, .1f, .3f, .2f}, s1[L] = {0, 0, 0, 0, .05f, .6f, .01f, .4f};
    LayerScores layers[2] = {{.score = s0}, {.score = s1}};
    PolicyConfig cfg;
    policy_config(&cfg, "kvzip", NULL, &err);
    KeepSet ks = {0};
    CHECK(tc, allocate_keepset(row, &cfg, layers, 2, 1, L, 1.0 - (1.0 - 0.75), &ks, &err) == 0, "%s", err.msg);
    if (ks.total) {
        EXPECT_SEGMENT(tc, &ks, 0, 0, 1, 2, 3, 4, 6);
        EXPECT_SEGMENT(tc, &ks, 1, 0, 1, 2, 3, 5, 7);
    }
    keepset_free(&ks);
    PolicyState *st = NULL;
    Budget b = {0.5, 0};
    CHECK(tc, policy_begin(&st, &cfg, 1, 1, L, &err) == 0, "%s", err.msg);
    if (!st) return;
    Observation prefill = {.layer = 0, .n_layers = 1, .L = L, .H = 1, .K = 1, .d = d};
    CHECK(tc, policy_observe(st, &prefill, &err) == 0, "%s", err.msg);
    CHECK(tc, policy_observe_reconstruction(st, &o, 4, 6, &err) == 0, "%s", err.msg);
    CHECK(tc, policy_select(st, &b, &ks, &err) == -1 && strstr(err.msg, "before the reconstruction pass"),
          "select after [4, 6) of 8: %s", err.msg);
    CHECK(tc, policy_observe_reconstruction(st, &o, 7, 8, &err) == -1 && strstr(err.msg, "out of order"),
          "a chunk out of order: %s", err.msg);
    policy_end(st);
}

int main(void) {
    TestCounts tc = {"policies", 0, 0, 0};
    test_shared_scores(&tc);
    test_streamingllm(&tc);
    test_snapkv(&tc);
    test_prior_ties(&tc);
    test_pooling(&tc);
    test_adakv_snapkv_cake(&tc);
    test_criticalkv(&tc);
    test_defensivekv(&tc);
    test_cake_budgets(&tc);
    test_properties(&tc);
    test_short_context(&tc);
    test_topk(&tc);
    test_bad_input(&tc);
    test_descriptors(&tc);
    test_registry_files(&tc);
    test_kvpress_allocations(&tc);
    test_knorm(&tc);
    test_lagkv_short(&tc);
    test_observed_attention(&tc);
    test_expected_attention(&tc);
    test_random(&tc);
    test_kvzip(&tc);
    return test_finish(&tc);
}
