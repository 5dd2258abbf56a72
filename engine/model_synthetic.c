/* model_synthetic.c — a model at a real named shape with random weights:
 * "synthetic:SHAPE[:layers=N][:seed=S][:vocab=V]".
 *
 * For tests and for timing the backends at 8B / 32B shapes without the checkpoints. Matrices are uniform
 * with standard deviation 0.02 (the usual initializer_range), norms are 1, so activations stay O(1) through
 * any depth. Every weight is cut into fixed chunks, each with its own generator seeded from (seed, tensor,
 * chunk): filling runs in parallel and the weights do not depend on the number of threads. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

#define CHUNK ((uint64_t)1 << 16)   /* elements per independently seeded chunk */
#define WEIGHT_STD 0.02f

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

/* splitmix64's output function: the k-th draw of a generator started at s0 is mix64(s0 + k * GOLDEN_GAMMA),
 * so any element can be generated without the ones before it. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform on [-a, a) with a = std * sqrt(3), which has the requested standard deviation; two 24-bit draws per
 * 64-bit random number, converted through int32 (an unsigned 64-bit to float conversion is several times
 * slower). Element i of a chunk uses draw i/2 + 2 of the chunk's generator (the first draw is skipped). */
void model_synthetic_values(float *dst, uint64_t start, uint64_t n, uint64_t seed, uint64_t tensor) {
    const float a = WEIGHT_STD * sqrtf(3.0f);
    uint64_t e = start, end = start + n;
    while (e < end) {
        uint64_t chunk = e / CHUNK, i = e % CHUNK;
        uint64_t s0 = seed ^ (tensor * 0xD1B54A32D192ED03ull) ^ (chunk * 0xABC98388FB8FAC03ull);
        uint64_t r = mix64(s0 + (i / 2 + 2) * GOLDEN_GAMMA);
        if (i % 2 == 0) {
            dst[e++ - start] = ((float)(int32_t)(r >> 40) * 0x1p-23f - 1.0f) * a;
            if (e == end) break;
        }
        dst[e++ - start] = ((float)(int32_t)(r & 0xFFFFFF) * 0x1p-23f - 1.0f) * a;
    }
}

static int parse_option(const char *spec, const char *opt, size_t len, const char *key, long lo, long hi,
                        long *out, KvErr *err) {
    size_t k = strlen(key);
    if (len <= k + 1 || strncmp(opt, key, k) || opt[k] != '=') return 0;
    char buf[32];
    if (len - k - 1 >= sizeof buf) return kv_fail(err, "%s: value of '%s' too long", spec, key);
    memcpy(buf, opt + k + 1, len - k - 1);
    buf[len - k - 1] = '\0';
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || *end || end == buf || v < lo || v > hi)
        return kv_fail(err, "%s: %s=%s is not an integer in [%ld, %ld]", spec, key, buf, lo, hi);
    *out = v;
    return 1;
}

static int plan_synthetic(void *seed, const WeightRef *w, int index, TensorCopy *c, KvErr *err) {
    (void)err;
    *c = (TensorCopy){.source = w->is_norm ? COPY_SYNTHETIC_ONES : COPY_SYNTHETIC_RANDOM, .rows = w->rows,
                      .cols = w->cols, .seed = *(const uint64_t *)seed, .tensor = (uint64_t)index, .dst = w->dst};
    return 0;
}

int model_load_synthetic(Model *m, const char *spec, const WeightFill *fill, KvErr *err) {
    const char *p = spec + strlen("synthetic:"), *colon = strchr(p, ':');
    size_t shape_len = colon ? (size_t)(colon - p) : strlen(p);
    char shape[64];
    if (shape_len >= sizeof shape) return kv_fail(err, "%s: shape name too long", spec);
    memcpy(shape, p, shape_len);
    shape[shape_len] = '\0';
    if (model_shape_by_name(shape, &m->cfg, err)) return kv_wrap(err, "%s", spec);
    long layers = m->cfg.n_layers, seed = 0, vocab = m->cfg.vocab_size;
    while (colon) {
        const char *opt = colon + 1;
        colon = strchr(opt, ':');
        size_t len = colon ? (size_t)(colon - opt) : strlen(opt);
        int r = parse_option(spec, opt, len, "layers", 1, 1024, &layers, err);
        if (!r) r = parse_option(spec, opt, len, "seed", 0, INT64_MAX >> 1, &seed, err);
        if (!r) r = parse_option(spec, opt, len, "vocab", 1, 1 << 24, &vocab, err);
        if (r < 0) return -1;
        if (!r) return kv_fail(err, "%s: unknown option '%.*s' (layers=N, seed=S, vocab=V)", spec, (int)len, opt);
    }
    ModelConfig *c = &m->cfg;
    c->n_layers = (int)layers;
    if (vocab != c->vocab_size) {
        /* Special ids past a smaller vocabulary would never be produced: drop them. */
        int eos[8], n_eos = c->n_eos;
        memcpy(eos, c->eos_ids, sizeof eos);
        c->vocab_size = (int)vocab;
        c->n_eos = 0;
        for (int i = 0; i < n_eos; i++) model_add_eos(c, eos[i]);
        if (c->bos_id >= c->vocab_size) c->bos_id = -1, c->add_bos = 0;
    }
    snprintf(m->name, sizeof m->name, "synthetic-%s", shape);
    if (model_check_config(c, spec, err)) return -1;
    uint64_t seed_u = (uint64_t)seed;
    if (model_fill_weights(m, fill, plan_synthetic, &seed_u, err)) return -1;
    model_rope_inv_freq(c, m->rope_inv_freq);
    return 0;
}
