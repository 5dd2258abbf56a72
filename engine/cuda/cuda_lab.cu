/* cuda_lab.cu — the kernel lab: the fast attention kernels checked against the naive oracle on random
 * head-variable caches, and the two ceilings (cuBLAS bf16 GEMM rate, device copy bandwidth) that the GPU check
 * quotes timings against. In the spirit of llm.c's dev/cuda: the oracle stays, a faster kernel must match it.
 * Called by tests/gpu/check_cuda.c; nothing here runs during normal use. Each case's errors also go to stderr,
 * so a failing check names the shape that broke. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_internal.h"
extern "C" {
#include "cuda_api.h"
}

/* Device memory freed on every exit path of a test case. */
struct DevPool {
    std::vector<void *> ptrs;
    ~DevPool() {
        for (void *p : ptrs) cudaFree(p);
    }
    int alloc(void **out, size_t bytes, KvErr *err) {
        CU_CHECK(cudaMalloc(out, bytes ? bytes : 16));
        ptrs.push_back(*out);
        return 0;
    }
};

static unsigned long long lcg_state = 0x9E3779B97F4A7C15ull;
static float lab_uniform(void) { /* in [-1, 1) */
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg_state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* n values uniform in [-a, a) where a = amplitude · (1 + growth · i / row): rows of `row` values whose scale
 * grows along the sequence (growth 0: one amplitude for all). */
static int upload_ramp(DevPool &pool, bf16 **out, size_t n, size_t row, float amplitude, float growth, KvErr *err) {
    std::vector<bf16> h(n);
    for (size_t i = 0; i < n; i++)
        h[i] = __float2bfloat16(amplitude * (1.0f + growth * (float)(i / row)) * lab_uniform());
    if (pool.alloc((void **)out, n * sizeof(bf16), err)) return -1;
    CU_CHECK(cudaMemcpy(*out, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
    return 0;
}

static int upload_random(DevPool &pool, bf16 **out, size_t n, float amplitude, KvErr *err) {
    return upload_ramp(pool, out, n, 1, amplitude, 0.0f, err);
}

/* The larger of two errors, NaN when either is (fmax and a plain comparison would let a NaN slip through). */
static double worse(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

static int max_abs_diff(const bf16 *a, const bf16 *b, size_t n, double *out, KvErr *err) {
    std::vector<bf16> ha(n), hb(n);
    CU_CHECK(cudaMemcpy(ha.data(), a, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(hb.data(), b, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)__bfloat162float(ha[i]) - (double)__bfloat162float(hb[i]));
        m = worse(m, diff);
    }
    *out = m;
    return 0;
}

/* One shape: B sequences, K kv-heads of G query heads, head dim d, Tc new tokens over caches whose heads held
 * lens[b*K + kh] entries before (one layer). Runs the chunk through flash and naive, then one decode token
 * through split-K and naive. */
static int lab_case(int B, int H, int K, int d, int Tc, const int *lens, float key_growth, double *flash_err,
                    double *decode_err, KvErr *err) {
    DevPool pool;
    std::vector<DevHead> heads(B * K);
    int max_n = 0;
    for (int i = 0; i < B * K; i++) {
        int cap = lens[i] + Tc;
        if (upload_ramp(pool, &heads[i].k, (size_t)cap * d, d, 2.0f, key_growth, err) ||
            upload_random(pool, &heads[i].v, (size_t)cap * d, 1.0f, err))
            return -1;
        heads[i].len = lens[i];
        if (cap > max_n) max_n = cap;
    }
    DevHead *d_heads;
    bf16 *q, *out_fast, *out_ref;
    float *probs, *o_part, *ml_part;
    size_t n_out = (size_t)B * Tc * H * d;
    int S = splitk_count(max_n + 1);
    if (pool.alloc((void **)&d_heads, heads.size() * sizeof(DevHead), err) ||
        upload_random(pool, &q, n_out, 2.0f, err) || pool.alloc((void **)&out_fast, n_out * sizeof(bf16), err) ||
        pool.alloc((void **)&out_ref, n_out * sizeof(bf16), err) ||
        pool.alloc((void **)&probs, (size_t)B * H * Tc * (max_n + 1) * sizeof(float), err) ||
        pool.alloc((void **)&o_part, (size_t)B * H * S * d * sizeof(float), err) ||
        pool.alloc((void **)&ml_part, (size_t)B * H * S * 2 * sizeof(float), err))
        return -1;
    CU_CHECK(cudaMemcpy(d_heads, heads.data(), heads.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
    if (launch_flash_prefill(q, out_fast, d_heads, 0, 1, H, K, d, B, Tc, 0, err) ||
        launch_attention_naive(q, out_ref, probs, max_n, d_heads, 0, 1, H, K, d, B, Tc, 0, Tc, 0, err))
        return -1;
    CU_CHECK(cudaDeviceSynchronize());
    if (max_abs_diff(out_fast, out_ref, n_out, flash_err, err)) return -1;

    /* Decode: the token after the chunk, one query per sequence (rows 0..B-1 of q reused). */
    for (int i = 0; i < B * K; i++) heads[i].len = lens[i] + Tc - 1;
    CU_CHECK(cudaMemcpy(d_heads, heads.data(), heads.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
    size_t n_dec = (size_t)B * H * d;
    if (launch_decode_attention(q, out_fast, o_part, ml_part, d_heads, 0, 1, H, K, d, B, S, 0, err) ||
        launch_attention_naive(q, out_ref, probs, max_n, d_heads, 0, 1, H, K, d, B, 1, 0, 1, 0, err))
        return -1;
    CU_CHECK(cudaDeviceSynchronize());
    return max_abs_diff(out_fast, out_ref, n_dec, decode_err, err);
}

/* The observation's window attention against the naive kernel's probabilities: one sequence, every kv-head
 * holding len entries before a chunk of Tc tokens, window w. */
static int lab_window(int H, int K, int d, int len, int Tc, int w, double *window_err, KvErr *err) {
    DevPool pool;
    std::vector<DevHead> heads(K);
    std::vector<const bf16 *> keys(K);
    int L = len + Tc;
    for (int i = 0; i < K; i++) {
        if (upload_random(pool, &heads[i].k, (size_t)L * d, 2.0f, err) ||
            upload_random(pool, &heads[i].v, (size_t)L * d, 1.0f, err))
            return -1;
        heads[i].len = len;
        keys[i] = heads[i].k;
    }
    DevHead *d_heads;
    bf16 *q;
    float *ref, *fast;
    size_t n = (size_t)H * w * L;
    if (pool.alloc((void **)&d_heads, heads.size() * sizeof(DevHead), err) ||
        upload_random(pool, &q, (size_t)Tc * H * d, 2.0f, err) || pool.alloc((void **)&ref, n * sizeof(float), err) ||
        pool.alloc((void **)&fast, n * sizeof(float), err))
        return -1;
    CU_CHECK(cudaMemcpy(d_heads, heads.data(), heads.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    int rc = launch_attention_naive(q, NULL, ref, L, d_heads, 0, 1, H, K, d, 1, Tc, Tc - w, w, 0, err);
    if (!rc) rc = window_attention(h, q, keys.data(), fast, H, K, d, Tc - w, w, L, 0, err);
    cublasDestroy(h);
    if (rc) return -1;
    CU_CHECK(cudaDeviceSynchronize());
    std::vector<float> a(n), b(n);
    CU_CHECK(cudaMemcpy(a.data(), ref, n * sizeof(float), cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(b.data(), fast, n * sizeof(float), cudaMemcpyDeviceToHost));
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)a[i] - (double)b[i]);
        m = worse(m, diff);
    }
    *window_err = m;
    return 0;
}

extern "C" int cuda_kernel_selftest(CudaSelftest *out, KvErr *err) {
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, err)) return -1;
    memset(out, 0, sizeof *out);
    /* SmolLM2-like (G = 3, d = 64) and Llama-like (G = 4, d = 128); lengths cross tile (64) and split (256)
     * boundaries, include empty heads and a cache longer than several splits. Then the edges of the shapes the
     * backend accepts: no grouping (G = 1) at d = 96 (decode teams with idle lanes), G = 8 at d = 256 (the
     * largest flash layout), G = 3 at d = 48, and one-token chunks, whose decode reads caches of 1 and 2 entries. */
    static const int lens_a[2 * 3] = {0, 37, 130, 5, 64, 300};
    static const int lens_b[3 * 8] = {0, 1, 63, 64, 65, 255, 256, 700, 3, 100, 200, 300, 400, 500, 600, 1100,
                                      0, 0, 0, 0, 17, 17, 17, 900};
    static const int lens_c[1 * 4] = {0, 300, 5, 64};
    static const int lens_d[2 * 2] = {1, 513, 256, 0};
    static const int lens_e[1 * 2] = {260, 7};
    static const int lens_f[1 * 2] = {0, 1};
    /* Keys whose scale grows along the sequence (last two cases): each key tile's largest logit passes the row's
     * running max by more than FA_SLACK, so the flash kernel's rescale passes run (at d = 128: two passes of 64
     * columns through S; at d = 256: four). */
    static const int lens_g[1 * 2] = {0, 200};
    struct {
        int B, H, K, d, Tc;
        const int *lens;
        float key_growth;
    } cases[] = {{2, 9, 3, 64, 100, lens_a, 0},  {3, 32, 8, 128, 130, lens_b, 0}, {2, 9, 3, 64, 2, lens_a, 0},
                 {3, 32, 8, 128, 64, lens_b, 0}, {1, 4, 4, 96, 70, lens_c, 0},    {2, 16, 2, 256, 65, lens_d, 0},
                 {1, 6, 2, 48, 33, lens_e, 0},   {1, 4, 2, 64, 1, lens_f, 0},     {1, 8, 2, 128, 300, lens_g, 0.05f},
                 {1, 4, 2, 256, 200, lens_g, 0.05f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double fe = 0, de = 0;
        if (lab_case(cases[i].B, cases[i].H, cases[i].K, cases[i].d, cases[i].Tc, cases[i].lens, cases[i].key_growth,
                     &fe, &de, err))
            return kv_wrap(err, "kernel lab case %zu (B=%d H=%d K=%d d=%d Tc=%d)", i, cases[i].B, cases[i].H,
                           cases[i].K, cases[i].d, cases[i].Tc);
        fprintf(stderr, "kernel lab case %zu: B=%d H=%d K=%d d=%d Tc=%d: flash %.2e, decode %.2e\n", i, cases[i].B,
                cases[i].H, cases[i].K, cases[i].d, cases[i].Tc, fe, de);
        out->flash_max_err = worse(out->flash_max_err, fe);
        out->decode_max_err = worse(out->decode_max_err, de);
        out->cases++;
    }
    double we1 = 0, we2 = 0;
    if (lab_window(9, 3, 64, 200, 100, 32, &we1, err) || lab_window(32, 8, 128, 0, 700, 32, &we2, err))
        return kv_wrap(err, "kernel lab, window attention");
    out->window_max_err = worse(we1, we2);
    return 0;
}

extern "C" int cuda_measure_ceilings(double *gemm_tflops, double *copy_gbs, KvErr *err) {
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, err)) return -1;
    DevPool pool;
    const int n = 8192, reps = 10;
    bf16 *a, *b, *c; /* random operands: zeros would draw less power and flatter the clock */
    if (upload_random(pool, &a, (size_t)n * n, 1.0f, err) || upload_random(pool, &b, (size_t)n * n, 1.0f, err) ||
        pool.alloc((void **)&c, (size_t)n * n * sizeof(bf16), err))
        return -1;
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int rc = -1;
    float ms = 0;
    for (int i = 0; i < 2 + reps; i++) {
        if (i == 2) cudaEventRecord(e0);
        if (gemm_bf16(h, a, n, b, n, c, CUDA_R_16BF, n, n, n, n, 0.0f, err)) goto done;
    }
    cudaEventRecord(e1);
    if (cudaEventSynchronize(e1) != cudaSuccess) {
        kv_fail(err, "GEMM ceiling: %s", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    cudaEventElapsedTime(&ms, e0, e1);
    *gemm_tflops = 2.0 * n * (double)n * n * reps / (ms * 1e-3) / 1e12;
    {
        size_t bytes = (size_t)n * n * sizeof(bf16); /* 128 MiB, well past the L2 */
        for (int i = 0; i < 2 + reps; i++) {
            if (i == 2) cudaEventRecord(e0);
            if (cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess) {
                kv_fail(err, "copy ceiling: cudaMemcpyAsync failed");
                goto done;
            }
        }
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        *copy_gbs = 2.0 * bytes * reps / (ms * 1e-3) / 1e9;
    }
    rc = 0;
done:
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasDestroy(h);
    return rc;
}
