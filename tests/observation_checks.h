/* observation_checks.h — an Observation's attention and value norms (observation_prepare) against naive loops in
 * double precision, at any shape: test_observation.c on random inputs, test_qwen.c on a real prefill's
 * (Qwen2.5: groups of G = 7 query heads per kv-head). Header-only, static, as test.h. */
#ifndef KVBENCH_OBSERVATION_CHECKS_H
#define KVBENCH_OBSERVATION_CHECKS_H

#include <math.h>
#include <stdlib.h>

#include "../engine/observation.h"

/* The largest absolute difference of o->attn from the naive softmax of each window query over its causal keys,
 * and the largest relative difference (|diff| / max(1, nu)) of o->value_norm, when it is there, from
 * nu[k][j] = mean over the G heads h of group k of sum_e |v[k][j] . W_O[e][h*d..h*d+d)| (*worst_nu 0 without). */
static void observation_naive_errors(const Observation *o, double *worst_attn, double *worst_nu) {
    int L = o->L, w = o->w, H = o->H, K = o->K, d = o->d, D = o->D, G = H / K;
    double *logit = malloc(sizeof(double) * (size_t)L);
    *worst_attn = *worst_nu = 0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < w; i++) {
            const float *q = o->q_win + ((size_t)h * w + i) * d;
            double mx = -1e300, sum = 0;
            int last = L - w + i;
            for (int j = 0; j <= last; j++) {
                double s = 0;
                for (int c = 0; c < d; c++) s += (double)q[c] * o->keys[h / G][(size_t)j * d + c];
                logit[j] = s / sqrt((double)d);
                mx = logit[j] > mx ? logit[j] : mx;
            }
            for (int j = 0; j <= last; j++) sum += exp(logit[j] - mx);
            for (int j = 0; j < L; j++) {
                double want = j <= last ? exp(logit[j] - mx) / sum : 0.0;
                double e = fabs(o->attn[((size_t)h * w + i) * L + j] - want);
                *worst_attn = e > *worst_attn ? e : *worst_attn;
            }
        }
    for (int k = 0; o->value_norm && k < K; k++)
        for (int j = 0; j < L; j++) {
            double nu = 0;
            for (int g = 0; g < G; g++) {
                int h = k * G + g;
                for (int e = 0; e < D; e++) {
                    double p = 0;
                    for (int c = 0; c < d; c++)
                        p += (double)o->values[k][(size_t)j * d + c] * o->w_o[(size_t)e * H * d + h * d + c];
                    nu += fabs(p) / G;
                }
            }
            double e = fabs(o->value_norm[(size_t)k * L + j] - nu) / (nu > 1 ? nu : 1);
            *worst_nu = e > *worst_nu ? e : *worst_nu;
        }
    free(logit);
}

#endif
