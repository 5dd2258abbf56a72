/* splitk.h — the index arithmetic and the merge of split-K (flash-decoding) attention, shared by the CUDA
 * kernels and a plain-C test that emulates them (tests/test_cuda_splitk.c), so the tricky part is checked on
 * a machine without a GPU.
 *
 * A decode query attends to the n entries of its head's cache. The keys are cut into splits of SPLITK_KEYS;
 * split s covers [s*SPLITK_KEYS, min(n, (s+1)*SPLITK_KEYS)) and leaves a partial (m_s = its max logit,
 * l_s = sum of exp(logit - m_s), o_s = sum of exp(logit - m_s) * v). Splits past the end of a short head are
 * empty (l_s = 0) because one launch serves heads of every length. The merge rescales every partial to the
 * common max. Per-head tables of device pointers are indexed [sequence][layer][kv-head]. */
#ifndef KVBENCH_CUDA_SPLITK_H
#define KVBENCH_CUDA_SPLITK_H

#ifdef __CUDACC__
#define SPLITK_FN __host__ __device__ static inline
#else
#define SPLITK_FN static inline
#endif

#include <math.h>

enum { SPLITK_KEYS = 256 };

/* Splits needed for the longest head. */
SPLITK_FN int splitk_count(int max_keys) { return (max_keys + SPLITK_KEYS - 1) / SPLITK_KEYS; }

/* Keys of split s for a head holding n entries: [*j0, *j1), empty when *j1 <= *j0. */
SPLITK_FN void splitk_range(int s, int n, int *j0, int *j1) {
    *j0 = s * SPLITK_KEYS;
    *j1 = n < *j0 + SPLITK_KEYS ? n : *j0 + SPLITK_KEYS;
}

/* The decode block's threads: a key's d dims are read as d/8 chunks of 16 bytes by a team of splitk_team(d)
 * lanes (the power of two >= d/8, at most 32, so teams never straddle a warp; lanes past d/8 idle), so each
 * warp reads whole consecutive rows. Thread t is lane t % team of team slot t / team; slot s takes the keys
 * s, s + slots, s + 2 slots, ... of the split. */
enum { SPLITK_THREADS = 128 };
SPLITK_FN int splitk_team(int d) {
    int t = 1;
    while (t < d / 8) t <<= 1;
    return t;
}

/* Shared floats of a decode block: scores [G][SPLITK_KEYS], per-slot outputs [slots][G][d], a reduction's 32. */
SPLITK_FN int splitk_smem_floats(int G, int d) {
    return G * SPLITK_KEYS + SPLITK_THREADS / splitk_team(d) * G * d + 32;
}

/* Slot of (sequence b, layer l, kv-head k) in a per-forward head table. */
SPLITK_FN int head_slot(int b, int layer, int kv_head, int n_layers, int n_kv_heads) {
    return (b * n_layers + layer) * n_kv_heads + kv_head;
}

/* Merges one output element over n_splits partials: m[s], l[s] per split, o[s * o_stride] the element's
 * unnormalised partial sums. Returns sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s with M the largest m_s of
 * a non-empty split. */
SPLITK_FN float splitk_merge(const float *m, const float *l, const float *o, int n_splits, int o_stride) {
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; s++)
        if (l[s] > 0.0f && m[s] > mx) mx = m[s];
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < n_splits; s++) {
        if (l[s] <= 0.0f) continue;
        float scale = expf(m[s] - mx);
        num += scale * o[(long)s * o_stride];
        den += scale * l[s];
    }
    return den > 0.0f ? num / den : 0.0f;
}

#endif
