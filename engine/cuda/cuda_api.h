/* cuda_api.h — what the CUDA part of kvbench offers to plain C besides the backend table entry.
 *
 * cuda_backend_open is reached through backend_open("cuda"); the functions here serve the GPU check program
 * (tests/gpu/check_cuda.c) and the no-GPU test: the device check that backend_open runs first, the kernel lab's
 * self-test (every fast attention kernel against its naive oracle) and the two ceilings that timings are quoted
 * against. Only compiled into a CUDA build (KVBENCH_CUDA). */
#ifndef KVBENCH_CUDA_API_H
#define KVBENCH_CUDA_API_H

#include <stddef.h>

#include "../backend.h"
#include "../err.h"
#include "../model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];
    int cc_major, cc_minor;      /* compute capability */
    int driver_version;          /* cudaDriverGetVersion, e.g. 13000 */
    int runtime_version;         /* cudaRuntimeGetVersion of this build */
    size_t mem_free, mem_total;  /* bytes, cudaMemGetInfo */
    size_t l2_bytes;             /* the L2 cache */
    int n_sms;
} CudaDeviceInfo;

/* Checks that device 0 exists, that the driver is new enough for this build's runtime and that its compute
 * capability runs this build's code (sm_90 or newer). Fails with what was needed and what was found. */
int cuda_device_query(CudaDeviceInfo *info, KvErr *err);

int cuda_backend_open(Backend **out, const Model *m, KvErr *err);

/* Kernel lab: runs the flash prefill, split-K decode and window attention against the naive oracle kernel on
 * random head-variable caches (several sequences, GQA) and reports the largest absolute difference of each; and
 * every attention kernel on views of a base cache against the same kernel on gathered copies (bit for bit). */
typedef struct {
    double flash_max_err;   /* flash prefill vs naive, over every output element */
    double decode_max_err;  /* split-K decode + merge vs naive */
    double window_max_err;  /* observation window attention (GEMM + softmax) vs naive probabilities */
    int cases;              /* shapes tried */
    long views_mismatches;  /* elements (rows written, outputs, probabilities) where a view's attention differs in
                             * any bit from its gathered copy's: flash, naive, split-K decode, q/k/v split */
    int views_cases;        /* view shapes tried */
} CudaSelftest;
int cuda_kernel_selftest(CudaSelftest *out, KvErr *err);
/* The kernel lab's long-context cases (flash_max_err, decode_max_err, cases set): a 4,096-query chunk over a
 * 28k-entry cache through flash and naive, and split-K decode over 32k-entry caches at B = 16 through split-K and
 * naive; small = 1 runs the same paths at shapes the CPU emulation can (a 256-query chunk over 900 entries). */
int cuda_kernel_long_cases(CudaSelftest *out, int small, KvErr *err);

/* The observation's value norms: the fused kernel (launch_value_norms) and the GEMM + L1 path, each against a
 * double-precision oracle on the same bf16 values; errors relative to the oracle's norm, the largest over the
 * rows checked. small = 1 runs the shapes the CPU emulation can (SmolLM2's and Llama's heads, D <= 576);
 * otherwise Llama-3.1-8B's width over 32k values too. */
typedef struct {
    double fused_max_rel_err, gemm_max_rel_err;
    int cases;
} CudaValueNormsLab;
#define CUDA_VALUE_NORMS_TOL 1e-4 /* relative: both sum bf16 products in f32 (the emulation: 2.9e-7) */
int cuda_value_norms_lab(CudaValueNormsLab *out, int small, KvErr *err);
/* One layer's value norms at Llama-3.1-8B's shape (8 kv-heads of 4, d = 128, D = 4,096) over L values, in ms:
 * the GEMM + L1 path and the fused kernel, each the best of 5 after a warm-up. */
int cuda_measure_value_norms(int L, double *gemm_ms, double *fused_ms, KvErr *err);

/* Ceilings measured on this GPU: a large bf16 GEMM through cuBLAS (fp32 accumulation) in TFLOP/s, and a large
 * device-to-device cudaMemcpy in GB/s counting bytes read plus bytes written. */
int cuda_measure_ceilings(double *gemm_tflops, double *copy_gbs, KvErr *err);
/* The device's greedy pick (launch_argmax_rows, what Backend.forward_greedy hands back) of host rows x[rows][V]
 * into out[rows], for the check against the host's scan. */
int cuda_argmax_rows_host(const float *x, int rows, int V, int *out, KvErr *err);
/* Seconds one synchronous copy of `bytes` from the device to unpinned host memory takes (a decode step's logits
 * copy), the mean of 20 after 2 warm-ups. */
int cuda_measure_host_copy(size_t bytes, double *seconds, KvErr *err);

#ifdef __cplusplus
}
#endif

#endif
