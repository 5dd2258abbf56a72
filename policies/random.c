/* random.c — the random baseline, as kvpress 0.5.5's RandomPress with seed 0: each layer draws its scores
 * [K][L] from a fresh torch CPU generator seeded with 0 (torch.rand: MT19937 seeded by init_genrand, each float
 * the low 24 bits of one 32-bit output times 2^-24), and each head keeps its top int(L*f). The scores are
 * bit for bit torch's, so every layer of every sample of one length gets the same draw, as in kvpress with a
 * seed. kvpress's default is no seed (a different draw each run); kvbench's rows must be reproducible. Two draws
 * can be equal (24 bits each): kvbench then keeps the lower position, torch.topk either. */
#include <stdint.h>
#include <stdlib.h>

#include "policy_internal.h"

#define RANDOM_SEED 0u

enum { MT_N = 624, MT_M = 397 };

typedef struct {
    uint32_t state[MT_N];
    int next;
} Mt19937;

static void mt_seed(Mt19937 *mt, uint32_t seed) {
    mt->state[0] = seed;
    for (int i = 1; i < MT_N; i++)
        mt->state[i] = 1812433253u * (mt->state[i - 1] ^ (mt->state[i - 1] >> 30)) + (uint32_t)i;
    mt->next = MT_N;
}

static uint32_t mt_next(Mt19937 *mt) {
    if (mt->next >= MT_N) {
        for (int i = 0; i < MT_N; i++) {
            uint32_t y = (mt->state[i] & 0x80000000u) | (mt->state[(i + 1) % MT_N] & 0x7fffffffu);
            mt->state[i] = mt->state[(i + MT_M) % MT_N] ^ (y >> 1) ^ (y & 1u ? 0x9908b0dfu : 0u);
        }
        mt->next = 0;
    }
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

static int score_random(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                        KvErr *err) {
    (void)row, (void)cfg;
    const size_t n = (size_t)o->K * o->L;
    Mt19937 *mt = kv_malloc(sizeof *mt, err);
    out->score = mt ? kv_malloc(sizeof(float) * n, err) : NULL;
    if (!out->score) {
        free(mt);
        return -1;
    }
    mt_seed(mt, RANDOM_SEED);
    for (size_t t = 0; t < n; t++) out->score[t] = (float)(mt_next(mt) & 0xffffffu) * (1.0f / 16777216.0f);
    free(mt);
    return 0;
}

POLICY_DESCRIPTOR(RANDOM) = {
    .name = "random",
    .press_name = "RandomPress",
    .source = "kvpress 0.5.5 RandomPress (seed 0)",
    .role = POLICY_BASELINE,
    .score = score_random,
    .span = SPAN_CONTEXT,
    .allocation = ALLOC_UNIFORM,
    .colour = "#c7c7c7",
};
