/* rank.h — the total order of every selection (policies/allocate.c): score descending, then index ascending,
 * NaN ranking as -inf, -0 tying with +0 (the float comparison's ==), as one unsigned 64-bit key: a larger key
 * ranks first. The CUDA backend's selection (policies/cuda_policy.cu) compares these keys, so its top-k is
 * the host's by construction; tests/test_cuda_rank.c checks the key against topk_stable and sort_desc_stable.
 * A plain header so that nvcc compiles it for the device too. */
#ifndef KVBENCH_POLICY_RANK_H
#define KVBENCH_POLICY_RANK_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RANK_INLINE __host__ __device__ static inline
#else
#define RANK_INLINE static inline
#endif

/* index < 2^32: the position within the ranked array (flattened layer-major, then head-major). */
RANK_INLINE uint64_t rank_key(float score, uint32_t index) {
    uint32_t bits;
    memcpy(&bits, &score, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) bits = 0xff800000u; /* NaN -> -inf */
    if (bits == 0x80000000u) bits = 0;                                                      /* -0 -> +0 */
    uint32_t ordered = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
    return (uint64_t)ordered << 32 | (uint64_t)(0xffffffffu - index);
}

/* The index a key was made from. */
RANK_INLINE uint32_t rank_key_index(uint64_t key) { return 0xffffffffu - (uint32_t)key; }

#endif
