/* cuda_emu.h — just enough of CUDA, WMMA and cuBLAS to run the backend's kernels (engine/cuda/kernels.cu) and
 * the kernel lab (cuda_lab.cu) on the CPU, so their index arithmetic, synchronisation and numerics are exercised
 * on a machine without a GPU (tests/gpu/emulate.sh). Not a simulator of timing or of the memory model:
 *   - every CUDA thread of a block is a fiber (ucontext) on one OS thread; blocks run one after another;
 *     __syncthreads / __syncwarp / shuffles / votes are barriers over the block's or the warp's live fibers, and
 *     a round in which no fiber can move is reported as a deadlock (a barrier not every thread reaches);
 *   - device memory is host memory (cudaMalloc = malloc), so AddressSanitizer sees every out-of-bounds access;
 *     dynamic shared memory is filled with 0xFF bytes (NaN as f32 and as bf16) at each block's start, so reading
 *     shared memory nobody wrote shows up in the results;
 *   - launch limits are enforced: grid y/z <= 65535, block <= 1024 threads in whole warps, dynamic shared memory
 *     <= 48 KiB unless cudaFuncSetAttribute raised the kernel's limit (at most 227 KiB);
 *   - WMMA fragments hold the whole 16x16 tile in each thread, loaded and stored with the documented row/column
 *     major and ldm semantics (ldm and the 256-bit pointer alignment are checked); bf16 rounds to nearest even;
 *   - cublasGemmEx is a plain column-major GEMM with f32 accumulation. */
#ifndef KVBENCH_CUDA_EMU_H
#define KVBENCH_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <map>
#include <tuple>
#include <vector>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

/* ---- qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

/* ---- vector types ---- */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
struct float2 {
    float x, y;
};
static inline int min(int a, int b) { return a < b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int max(int a, int b) { return a > b ? a : b; }
/* Separately rounded arithmetic (never fused): the host compiler emits plain SSE operations, which are. */
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }

/* ---- bf16 ---- */
struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        r.bits = 0x7FC0; /* NaN */
    else
        r.bits = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float2 __bfloat1622float2(__nv_bfloat162 p) { return float2{__bfloat162float(p.x), __bfloat162float(p.y)}; }

/* ---- runtime API subset ---- */
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9, cudaErrorMemoryAllocation = 2 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
typedef enum { CUDA_R_16BF, CUDA_R_32F } cudaDataType;

namespace emu {
extern cudaError_t last_error;
extern std::map<const void *, int> smem_limits; /* kernel -> opt-in dynamic shared memory */
}
static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulator)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulator)";
    case cudaErrorMemoryAllocation: return "out of memory (emulator)";
    }
    return "unknown error (emulator)";
}
static inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t = 0) {
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *d, int v, size_t n) {
    memset(d, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
enum { cudaErrorInsufficientDriver = 35, cudaStreamNonBlocking = 1 };
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, l2CacheSize;
};
/* One Hopper-class device with 16 GiB, all of it free: enough for the small models the emulation runs, and a
 * clear "out of GPU memory" for the GPU check's oversized cache. */
static inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
static inline cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
static inline cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation of CUDA");
    p->major = 9;
    p->multiProcessorCount = 1;
    p->l2CacheSize = 1 << 20; /* small, so the value norms of the check's 300 tokens come in several blocks */
    return cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *free_b = *total_b = (size_t)16 << 30;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = (void *)1;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
static inline cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = 0;
    return cudaSuccess;
}
enum { cudaEventDisableTiming = 2 };
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
static inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = 0) { return cudaSuccess; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) {
    *ms = 1.0f;
    return cudaSuccess;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute, int value) {
    if (value < 0 || value > 232448) return cudaErrorInvalidValue;
    emu::smem_limits[(const void *)kernel] = value;
    return cudaSuccess;
}

/* ---- cuBLAS subset ---- */
typedef void *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT } cublasGemmAlgo_t;
static inline const char *cublasGetStatusString(cublasStatus_t s) { return s ? "invalid value (emulator)" : "success"; }
static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (void *)1;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
static inline float emu_load(const void *p, cudaDataType t, size_t i) {
    return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}
/* C = alpha op(A) op(B) + beta C, column-major, as cuBLAS defines it: op(A) is m x k, op(B) is k x n. The
 * operands are first copied to f32 rows of op(A) and columns of op(B), so each output is one contiguous dot. */
static inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, cublasComputeType_t, cublasGemmAlgo_t) {
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    float a = *(const float *)alpha, b = *(const float *)beta;
    std::vector<float> ra((size_t)m * k), cb((size_t)n * k);
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++)
            ra[(size_t)i * k + p] = emu_load(A, at, ta == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda);
    for (int j = 0; j < n; j++)
        for (int p = 0; p < k; p++)
            cb[(size_t)j * k + p] = emu_load(B, bt, tb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float *x = &ra[(size_t)i * k], *y = &cb[(size_t)j * k];
            float part[8] = {0};
            int p = 0;
            for (; p + 8 <= k; p += 8)
                for (int u = 0; u < 8; u++) part[u] += x[p + u] * y[p + u];
            float acc = 0.0f;
            for (; p < k; p++) acc += x[p] * y[p];
            for (int u = 0; u < 8; u++) acc += part[u];
            size_t ic = i + (size_t)j * ldc;
            float prev = b != 0.0f ? emu_load(C, ct, ic) : 0.0f;
            float v = a * acc + b * prev;
            if (ct == CUDA_R_32F)
                ((float *)C)[ic] = v;
            else
                ((__nv_bfloat16 *)C)[ic] = __float2bfloat16(v);
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the fiber scheduler ---- */
namespace emu {
struct Fiber {
    ucontext_t ctx;
    uint3 tid;
    int done;
    char *stack;
};
struct Barrier {
    int arrived, expected;
    long gen;
};
extern Fiber *cur;
extern ucontext_t sched_ctx;
extern dim3 grid_dim, block_dim;
extern uint3 block_idx;
extern unsigned char *dyn_smem_buf;
extern Barrier block_bar;
extern std::vector<Barrier> warp_bars;
extern std::vector<float> warp_slots; /* [warp][32] shuffle exchange */

void yield(void);
void barrier_wait(Barrier &b);
static inline int lane_id(void) {
    int t = (int)(cur->tid.x + block_dim.x * (cur->tid.y + block_dim.y * cur->tid.z));
    return t & 31;
}
static inline int warp_id(void) {
    int t = (int)(cur->tid.x + block_dim.x * (cur->tid.y + block_dim.y * cur->tid.z));
    return t >> 5;
}
static inline void *dyn_smem(void) { return dyn_smem_buf; }

void run_grid(const void *kernel_id, dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *arg);

/* kernel<<<grid, block, smem, stream>>>(args) becomes emu::Launcher(grid, block, smem, stream).run(kernel, args). */
struct Launcher {
    dim3 grid, block;
    size_t smem;
    Launcher(dim3 g, dim3 b, size_t s = 0, cudaStream_t = 0) : grid(g), block(b), smem(s) {}
    template <typename... P, typename... A> void run(void (*kernel)(P...), A... args) {
        struct Call {
            void (*k)(P...);
            std::tuple<P...> a;
        } call{kernel, std::tuple<P...>((P)args...)};
        run_grid((const void *)kernel, grid, block, smem,
                 [](void *c) {
                     Call *x = (Call *)c;
                     std::apply(x->k, x->a);
                 },
                 &call);
    }
};
} // namespace emu

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

static inline void __syncthreads(void) { emu::barrier_wait(emu::block_bar); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::barrier_wait(emu::warp_bars[emu::warp_id()]); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    int w = emu::warp_id(), lane = emu::lane_id();
    float *slot = &emu::warp_slots[(size_t)w * 32];
    __syncwarp();
    slot[lane] = v;
    __syncwarp();
    float r = slot[lane ^ o];
    return r;
}
static inline int __any_sync(unsigned, int pred) {
    int w = emu::warp_id(), lane = emu::lane_id();
    float *slot = &emu::warp_slots[(size_t)w * 32];
    __syncwarp();
    slot[lane] = pred ? 1.0f : 0.0f;
    __syncwarp();
    int any = 0;
    for (int i = 0; i < 32; i++) any |= slot[i] != 0.0f;
    return any;
}

/* ---- WMMA ---- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {
    static const bool is_row = true;
};
struct col_major {
    static const bool is_row = false;
};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static constexpr int num_elements = 16 * 16; /* the whole tile: element-wise code sees every element once */
    float x[16 * 16];
};
void check_ptr(const void *p, unsigned ldm, size_t elem);

/* The warp's lanes meet at every WMMA call, as the hardware requires; a load also waits for every lane to have
 * read before any goes on (a later store cannot overtake it), and a store writes each lane's share of the tile
 * (element e by lane e % 32), so a lane that reads the tile without a __syncwarp after the store sees garbage. */
void warp_meet(void);
template <typename Use, typename T, typename L> inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    for (int i = 0; i < 256; i++) f.x[i] = v;
}
/* Element (r, c) of the 16x16 tile: matrix_a is rows x k, matrix_b is k x cols. */
template <typename Use, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ldm) {
    check_ptr(p, ldm, 2);
    warp_meet();
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = __bfloat162float(L::is_row ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
    warp_meet();
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float, void> &f, const float *p, unsigned ldm,
                             layout_t l) {
    check_ptr(p, ldm, 4);
    warp_meet();
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    warp_meet();
}
int lane(void);
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float, void> &f, unsigned ldm,
                              layout_t l) {
    check_ptr(p, ldm, 4);
    warp_meet();
    for (int e = lane(); e < 256; e += 32) {
        int r = e / 16, c = e % 16;
        (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[e];
    }
}
template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float, void> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float, void> &c) {
    warp_meet();
    float out[256];
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++) {
            float acc = c.x[r * 16 + col];
            for (int k = 0; k < 16; k++) acc += a.x[r * 16 + k] * b.x[k * 16 + col];
            out[r * 16 + col] = acc;
        }
    memcpy(d.x, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda
#endif
