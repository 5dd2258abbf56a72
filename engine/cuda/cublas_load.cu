/* cublas_load.cu — cuBLAS opened when the CUDA backend first calls it, not when the process starts.
 *
 * Linking libcublas makes every process pay for it at start: an empty program linked with -lcublas peaked at
 * 217 MiB of resident memory against 1 MiB without (measured 2026-12-02, CUDA 13), and a CUDA-enabled kvbench
 * running on the CPU backend carried about 155 MiB of it for nothing. So kvbench links only the CUDA runtime,
 * and these definitions stand in for the five cuBLAS entry points the backend calls: their declarations come
 * from cublas_v2.h, so the compiler checks the signatures, and the first call dlopens libcublas.so of the
 * headers' major version and forwards to the real functions. The executable does not export these names
 * (no -rdynamic), so libcublas's own calls never land here. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda_internal.h"

#define CUBLAS_LOAD_STR2(x) #x
#define CUBLAS_LOAD_STR(x) CUBLAS_LOAD_STR2(x)

namespace {

/* cublasGemmEx is overloaded in C++ (cublas_api.h adds an inline one), so its pointer type is spelled out; the
 * static_assert below checks it against the declaration the backend calls. */
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                  const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                  void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(sizeof(static_cast<GemmEx>(&cublasGemmEx)) == sizeof(GemmEx), "cublasGemmEx's declaration changed");

/* The library is one per process, as the dynamic loader's own state is; loaded once (pthread_once). */
struct Cublas {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    GemmEx gemm_ex;
    decltype(&cublasGetStatusString) status_string;
    char why[768]; /* why it could not be loaded; empty once it is */
};
Cublas cublas;
pthread_once_t cublas_once = PTHREAD_ONCE_INIT;

template <typename F> bool resolve(void *lib, const char *name, F *out) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    return *out != nullptr;
}

void load_cublas() {
    /* the name alone searches LD_LIBRARY_PATH, the executable's run path (CUDA's lib64, set at link) and the
     * system's; the build's CUDA directory is the fallback */
    const char *soname = "libcublas.so." CUBLAS_LOAD_STR(CUBLAS_VER_MAJOR);
    const char *paths[] = {soname, KVBENCH_CUDA_LIB "/libcublas.so." CUBLAS_LOAD_STR(CUBLAS_VER_MAJOR)};
    void *lib = nullptr;
    const char *first_error = nullptr;
    char first[384] = "";
    for (const char *path : paths) {
        if ((lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) break;
        if (!first_error && (first_error = dlerror())) snprintf(first, sizeof first, "%s", first_error);
    }
    if (!lib) {
        snprintf(cublas.why, sizeof cublas.why, "cuBLAS could not be loaded (%s; also tried %s): %s", soname,
                 paths[1], first);
        return;
    }
    const char *missing = !resolve(lib, "cublasCreate_v2", &cublas.create)                ? "cublasCreate_v2"
                          : !resolve(lib, "cublasDestroy_v2", &cublas.destroy)            ? "cublasDestroy_v2"
                          : !resolve(lib, "cublasSetStream_v2", &cublas.set_stream)       ? "cublasSetStream_v2"
                          : !resolve(lib, "cublasGemmEx", &cublas.gemm_ex)                ? "cublasGemmEx"
                          : !resolve(lib, "cublasGetStatusString", &cublas.status_string) ? "cublasGetStatusString"
                                                                                          : nullptr;
    if (missing) snprintf(cublas.why, sizeof cublas.why, "%s has no %s", soname, missing);
}

bool cublas_ready() {
    pthread_once(&cublas_once, load_cublas);
    return !cublas.why[0];
}

} // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
    return cublas_ready() ? cublas.create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
    return cublas_ready() ? cublas.destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    return cublas_ready() ? cublas.set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                         int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                                         void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
    if (!cublas_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return cublas.gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                          computeType, algo);
}

/* the reason the library is missing, when it is: every cuBLAS error message then says why */
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
    return cublas_ready() ? cublas.status_string(status) : cublas.why;
}

} // extern "C"
