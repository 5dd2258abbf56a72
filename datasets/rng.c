/* rng.c — the two generators of datasets/.
 *
 * Synthesis (RULER, NIAH) uses xoshiro256** seeded through splitmix64 from (seed, stream, index): integer-only,
 * so a sample is the same on every platform and can be regenerated alone. LongBench subsets reproduce
 * pandas' DataFrame.sample(frac, random_state=s), which is numpy's legacy RandomState(s).permutation(n):
 * MT19937 seeded with init_genrand, then a Fisher–Yates pass from the top whose bounded draws take 32-bit
 * outputs masked to the bound's bit width and rejected above it (numpy's random_interval). */
#include <stdlib.h>

#include "ds_internal.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rng_seed(Rng *r, uint64_t seed, const char *stream, uint64_t index) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a of the stream name */
    for (const unsigned char *p = (const unsigned char *)stream; *p; p++) h = (h ^ *p) * 0x100000001B3ull;
    uint64_t x = seed;
    uint64_t a = splitmix64(&x) ^ h;
    x = a;
    uint64_t b = splitmix64(&x) ^ index;
    x = b;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

uint64_t rng_next(Rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t rng_below(Rng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* accept only whole copies of [0, n) */
    uint64_t x;
    do x = rng_next(r);
    while (x >= limit);
    return x % n;
}

void rng_shuffle(Rng *r, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(r, (uint64_t)i + 1);
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void rng_distinct(Rng *r, int n, int k, int *out) {
    for (int i = 0; i < k; i++) {
        int v, dup;
        do {
            v = (int)rng_below(r, (uint64_t)n);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= out[j] == v;
        } while (dup);
        out[i] = v;
    }
}

/* ---------------------------------------------------------------- numpy legacy RandomState */

typedef struct {
    uint32_t mt[624];
    int i;
} Mt19937;

static void mt_seed(Mt19937 *m, uint32_t seed) {
    m->mt[0] = seed;
    for (int i = 1; i < 624; i++) m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + (uint32_t)i;
    m->i = 624;
}

static uint32_t mt_next(Mt19937 *m) {
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->mt[k] & 0x80000000u) | (m->mt[(k + 1) % 624] & 0x7FFFFFFFu);
            m->mt[k] = m->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908B0DFu : 0u);
        }
        m->i = 0;
    }
    uint32_t y = m->mt[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    y ^= y >> 18;
    return y;
}

int np_legacy_permutation(uint32_t seed, int n, int *out, KvErr *err) {
    if (n < 0) return kv_fail(err, "permutation of a negative count %d", n);
    Mt19937 *m = kv_malloc(sizeof *m, err);
    if (!m) return -1;
    mt_seed(m, seed);
    for (int i = 0; i < n; i++) out[i] = i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t mask = (uint32_t)i;
        mask |= mask >> 1, mask |= mask >> 2, mask |= mask >> 4, mask |= mask >> 8, mask |= mask >> 16;
        uint32_t j;
        do j = mt_next(m) & mask;
        while (j > (uint32_t)i);
        int t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
    free(m);
    return 0;
}
