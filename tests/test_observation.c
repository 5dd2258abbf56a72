/* test_observation.c — observation_prepare (engine/observation.c): window attention and projected value
 * norms on hand-derived cases, against a naive double-precision loop at a size that spans several value-norm
 * blocks (the same bits on 1 and 3 threads), and its errors. (The golden reference vectors are checked in test_policy_golden.c.) */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/observation.h"
#include "observation_checks.h"
#include "test.h"

#define TOL 1e-6

/* L=3, w=2, one head, d=1 (scale 1): keys 0, ln2, ln3; both window queries are 1.
 * Query 0 sits at position 1 and sees keys 0..1: softmax(0, ln2) = (1/3, 2/3), key 2 masked.
 * Query 1 sits at position 2 and sees all: softmax(0, ln2, ln3) = (1, 2, 3) / 6. */
static void test_attention_by_hand(TestCounts *tc) {
    float q[2] = {1, 1}, k[3] = {0, logf(2), logf(3)}, v[3] = {0}, w_o[1] = {1};
    const float *keys[1] = {k}, *values[1] = {v};
    Observation o = {.L = 3, .w = 2, .H = 1, .K = 1, .d = 1, .D = 1, .q_win = q, .keys = keys, .values = values,
                     .w_o = w_o};
    KvErr err;
    CHECK(tc, observation_prepare(&o, 0, &err) == 0, "%s", err.msg);
    const float want[6] = {1.0f / 3, 2.0f / 3, 0, 1.0f / 6, 2.0f / 6, 3.0f / 6};
    for (int t = 0; t < 6; t++)
        CHECK(tc, test_close(o.attn[t], want[t], TOL, 1), "attn[%d] %g want %g", t, o.attn[t], want[t]);
    CHECK(tc, o.value_norm == NULL, "value norms only on request");
    observation_release(&o);
    CHECK(tc, o.attn == NULL && o.scratch == NULL, "release clears what it freed");
}

/* H=2 query heads share K=1 kv-head (G=2), d=1, D=2, w_o = [[1, 2], [3, -4]] ([D][H*d]).
 * Head 0 projects through column 0 (1, 3), head 1 through column 1 (2, -4).
 * v=2: |(2, 6)|_1 = 8 and |(4, -8)|_1 = 12, mean 10.  v=-1: 4 and 6, mean 5.  v=0: 0. */
static void test_value_norm_by_hand(TestCounts *tc) {
    float q[2] = {0, 0}, k[3] = {0, 0, 0}, v[3] = {2, -1, 0}, w_o[4] = {1, 2, 3, -4};
    const float *keys[1] = {k}, *values[1] = {v};
    Observation o = {.L = 3, .w = 1, .H = 2, .K = 1, .d = 1, .D = 2, .q_win = q, .keys = keys, .values = values,
                     .w_o = w_o};
    KvErr err;
    CHECK(tc, observation_prepare(&o, 1, &err) == 0, "%s", err.msg);
    const float want[3] = {10, 5, 0};
    for (int j = 0; j < 3; j++)
        CHECK(tc, test_close(o.value_norm[j], want[j], TOL, 10), "nu[%d] %g want %g", j, o.value_norm[j], want[j]);
    /* equal keys: the last query sees three equal logits */
    for (int j = 0; j < 3; j++) CHECK(tc, test_close(o.attn[3 + j], 1.0 / 3, TOL, 1), "uniform attn[%d]", j);
    observation_release(&o);
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

/* The naive double loops of observation_checks.h at L=300 (three value-norm blocks), H=4, K=2, d=8, D=24 != H*d. */
static void test_against_naive(TestCounts *tc) {
    enum { L = 300, w = 16, H = 4, K = 2, d = 8, D = 24, G = H / K };
    unsigned seed = 7;
    float *q = malloc(sizeof(float) * H * w * d), *kv = malloc(sizeof(float) * 2 * K * L * d);
    float *w_o = malloc(sizeof(float) * D * H * d);
    for (int i = 0; i < H * w * d; i++) q[i] = 2 * frand(&seed);
    for (int i = 0; i < 2 * K * L * d; i++) kv[i] = frand(&seed);
    for (int i = 0; i < D * H * d; i++) w_o[i] = frand(&seed);
    const float *keys[K], *values[K];
    for (int k = 0; k < K; k++) keys[k] = kv + (size_t)k * L * d, values[k] = kv + (size_t)(K + k) * L * d;
    Observation o = {.L = L, .w = w, .H = H, .K = K, .d = d, .D = D, .q_win = q, .keys = keys, .values = values,
                     .w_o = w_o};
    KvErr err;
    int threads = omp_get_max_threads();
    omp_set_num_threads(3); /* value-norm tasks on several threads, whatever this machine has */
    CHECK(tc, observation_prepare(&o, 1, &err) == 0, "%s", err.msg);
    omp_set_num_threads(1);
    Observation serial = {.L = L, .w = w, .H = H, .K = K, .d = d, .D = D, .q_win = q, .keys = keys,
                          .values = values, .w_o = w_o};
    CHECK(tc, observation_prepare(&serial, 1, &err) == 0, "%s", err.msg);
    omp_set_num_threads(threads);
    CHECK(tc, !memcmp(serial.value_norm, o.value_norm, sizeof(float) * K * L),
          "value norms on 3 threads equal one thread's bit for bit");
    observation_release(&serial);
    double worst_attn, worst_nu;
    observation_naive_errors(&o, &worst_attn, &worst_nu);
    CHECK(tc, worst_attn < 1e-6, "attention differs from the naive loop by %g", worst_attn);
    CHECK(tc, worst_nu < 1e-5, "value norms differ from the naive loop by %g (relative)", worst_nu);
    /* Arrays handed in by a backend are used as they are, and not freed by release. */
    float *mine = o.attn;
    o.attn = NULL;
    float given[H * w * L];
    memcpy(given, mine, sizeof given);
    observation_release(&o);
    o.attn = given;
    CHECK(tc, observation_prepare(&o, 0, &err) == 0 && o.attn == given, "pre-filled attention is kept");
    observation_release(&o);
    CHECK(tc, o.attn == given, "release leaves a backend's array alone");
    free(q), free(kv), free(w_o);
}

static void test_errors(TestCounts *tc) {
    float x[64] = {0};
    const float *keys[2] = {x, x};
    KvErr err;
    Observation o = {
        .L = 4, .w = 8, .H = 2, .K = 2, .d = 1, .D = 1, .q_win = x, .keys = keys, .values = keys, .w_o = x};
    CHECK(tc, observation_prepare(&o, 0, &err) != 0 && strstr(err.msg, "longer than the context"), "window > L: %s",
          err.msg);
    o.w = 2, o.H = 3;
    CHECK(tc, observation_prepare(&o, 0, &err) != 0 && strstr(err.msg, "multiple"), "H %% K: %s", err.msg);
    o.H = 2, o.L = 0;
    CHECK(tc, observation_prepare(&o, 0, &err) != 0 && strstr(err.msg, "non-positive"), "L=0: %s", err.msg);
    o.L = 4, o.values = NULL;
    CHECK(tc, observation_prepare(&o, 1, &err) != 0 && strstr(err.msg, "no values"), "no values: %s", err.msg);
    observation_release(&o);
}

int main(void) {
    TestCounts tc = {"observation", 0, 0, 0};
    test_attention_by_hand(&tc);
    test_value_norm_by_hand(&tc);
    test_against_naive(&tc);
    test_errors(&tc);
    return test_finish(&tc);
}
