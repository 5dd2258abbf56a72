/* cuda_lab.cu — the kernel lab: the fast attention kernels checked against the naive oracle on random
 * head-variable caches, and the two ceilings (cuBLAS bf16 GEMM rate, device copy bandwidth) that the GPU check
 * quotes timings against. In the spirit of llm.c's dev/cuda: the oracle stays, a faster kernel must match it.
 * Called by tests/gpu/check_cuda.c; nothing here runs during normal use. Each case's errors also go to stderr,
 * so a failing check names the shape that broke. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Adds to *bad the elements of a and b (n of T, device memory) whose bits differ. */
template <typename T>
static int bits_differ(const T *a, const T *b, size_t n, long *bad, KvErr *err) {
    std::vector<T> ha(n), hb(n);
    CU_CHECK(cudaMemcpy(ha.data(), a, n * sizeof(T), cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(hb.data(), b, n * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) *bad += memcmp(&ha[i], &hb[i], sizeof(T)) != 0;
    return 0;
}

/* One shape: B sequences, K kv-heads of G query heads, head dim d, Tc new tokens over caches whose heads held
 * lens[b*K + kh] entries before (one layer). Runs the chunk through flash and naive, then one decode token
 * through split-K and naive. edge_rows > 0 (B = 1): the naive oracle checks only the chunk's first and last
 * edge_rows / 2 query rows (a 4,096-query chunk over 28k keys would take it minutes). */
static int lab_case_rows(int B, int H, int K, int d, int Tc, const int *lens, float key_growth, int edge_rows,
                         double *flash_err, double *decode_err, KvErr *err) {
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
    int half = edge_rows > 0 && B == 1 && edge_rows < Tc ? edge_rows / 2 : 0, naive_rows = half ? half : Tc;
    if (pool.alloc((void **)&d_heads, heads.size() * sizeof(DevHead), err) ||
        upload_random(pool, &q, n_out, 2.0f, err) || pool.alloc((void **)&out_fast, n_out * sizeof(bf16), err) ||
        pool.alloc((void **)&out_ref, n_out * sizeof(bf16), err) ||
        pool.alloc((void **)&probs, (size_t)B * H * naive_rows * (max_n + 1) * sizeof(float), err) ||
        pool.alloc((void **)&o_part, (size_t)B * H * S * d * sizeof(float), err) ||
        pool.alloc((void **)&ml_part, (size_t)B * H * S * 2 * sizeof(float), err))
        return -1;
    CU_CHECK(cudaMemcpy(d_heads, heads.data(), heads.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
    if (launch_flash_prefill(q, out_fast, d_heads, 0, 1, H, K, d, B, Tc, 0, err)) return -1;
    if (!half) {
        if (launch_attention_naive(q, out_ref, probs, max_n, d_heads, 0, 1, H, K, d, B, Tc, 0, Tc, 0, err)) return -1;
        CU_CHECK(cudaDeviceSynchronize());
        if (max_abs_diff(out_fast, out_ref, n_out, flash_err, err)) return -1;
    } else {
        *flash_err = 0;
        for (int t0 = 0; t0 < Tc; t0 += Tc - half) { /* rows [0, half) and [Tc - half, Tc) */
            double e = 0;
            size_t at = (size_t)t0 * H * d, n_rows = (size_t)half * H * d;
            if (launch_attention_naive(q, out_ref, probs, max_n, d_heads, 0, 1, H, K, d, B, Tc, t0, half, 0, err))
                return -1;
            CU_CHECK(cudaDeviceSynchronize());
            if (max_abs_diff(out_fast + at, out_ref + at, n_rows, &e, err)) return -1;
            *flash_err = worse(*flash_err, e);
        }
    }

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

static int lab_case(int B, int H, int K, int d, int Tc, const int *lens, float key_growth, double *flash_err,
                    double *decode_err, KvErr *err) {
    return lab_case_rows(B, H, K, d, Tc, lens, key_growth, 0, flash_err, decode_err, err);
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

/* Views against gathered copies: B sequences of K kv-heads; head i of the base cache holds base_len rows, of
 * which the keep-set keeps counts[i] (spread over the head, ascending; 0 = an empty head). The copy holds the kept
 * rows and room for Tc more; the view reads them in the base through their indices and has room for Tc rows of
 * its own. Both take the same Tc new tokens (q/k/v split with RoPE writes their rows), then the chunk's
 * attention (flash and naive) and one decode step (split-K and naive): every row written and every output must
 * be the same bits, since both read the same rows in the same order. Adds the differing elements to
 * *mismatches. */
static int lab_views(int B, int H, int K, int d, int Tc, int base_len, const int *counts, long *mismatches,
                     KvErr *err) {
    DevPool pool;
    const int N = 1, width = (H + 2 * K) * d;
    std::vector<DevHead> copy(B * K), view(B * K);
    int max_n = 0;
    for (int i = 0; i < B * K; i++) {
        int n = counts[i], cap = n + Tc;
        bf16 *bk, *bv, *ck, *cv, *ok, *ov;
        int *idx;
        if (upload_random(pool, &bk, (size_t)base_len * d, 2.0f, err) ||
            upload_random(pool, &bv, (size_t)base_len * d, 1.0f, err) ||
            pool.alloc((void **)&ck, (size_t)cap * d * sizeof(bf16), err) ||
            pool.alloc((void **)&cv, (size_t)cap * d * sizeof(bf16), err) ||
            pool.alloc((void **)&ok, (size_t)Tc * d * sizeof(bf16), err) ||
            pool.alloc((void **)&ov, (size_t)Tc * d * sizeof(bf16), err) ||
            pool.alloc((void **)&idx, (size_t)n * sizeof(int), err))
            return -1;
        std::vector<int> rows(n);
        for (int e = 0; e < n; e++) /* n <= base_len rows spread over the head, ascending, offset per head */
            rows[e] = (int)((long long)e * base_len / n) + i * 7 % (base_len / n);
        for (int e = 0; e < n; e++) {
            CU_CHECK(cudaMemcpy(ck + (size_t)e * d, bk + (size_t)rows[e] * d, d * sizeof(bf16), cudaMemcpyDeviceToDevice));
            CU_CHECK(cudaMemcpy(cv + (size_t)e * d, bv + (size_t)rows[e] * d, d * sizeof(bf16), cudaMemcpyDeviceToDevice));
        }
        if (n) CU_CHECK(cudaMemcpy(idx, rows.data(), (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
        copy[i].k = ck, copy[i].v = cv, copy[i].len = n;
        view[i].k = ok, view[i].v = ov, view[i].len = n;
        view[i].n_shared = n, view[i].sk = bk, view[i].sv = bv, view[i].idx = idx;
        if (cap > max_n) max_n = cap;
    }
    DevHead *d_copy, *d_view;
    bf16 *q, *out_c, *out_v;
    float *qkv, *inv_freq, *probs_c, *probs_v, *o_part, *ml_part;
    int *seq_pos;
    size_t n_out = (size_t)B * Tc * H * d, n_probs = (size_t)B * H * Tc * (max_n + 1);
    int S = splitk_count(max_n + 1);
    std::vector<float> h_qkv((size_t)B * Tc * width), h_freq(d / 2);
    std::vector<int> h_pos(B);
    for (size_t i = 0; i < h_qkv.size(); i++) h_qkv[i] = 2.0f * lab_uniform();
    for (int i = 0; i < d / 2; i++) h_freq[i] = powf(10000.0f, -2.0f * i / d);
    for (int b = 0; b < B; b++) h_pos[b] = base_len + 17 * b;
    if (pool.alloc((void **)&d_copy, copy.size() * sizeof(DevHead), err) ||
        pool.alloc((void **)&d_view, view.size() * sizeof(DevHead), err) ||
        pool.alloc((void **)&q, n_out * sizeof(bf16), err) || pool.alloc((void **)&out_c, n_out * sizeof(bf16), err) ||
        pool.alloc((void **)&out_v, n_out * sizeof(bf16), err) ||
        pool.alloc((void **)&qkv, h_qkv.size() * sizeof(float), err) ||
        pool.alloc((void **)&inv_freq, h_freq.size() * sizeof(float), err) ||
        pool.alloc((void **)&seq_pos, (size_t)B * sizeof(int), err) ||
        pool.alloc((void **)&probs_c, n_probs * sizeof(float), err) ||
        pool.alloc((void **)&probs_v, n_probs * sizeof(float), err) ||
        pool.alloc((void **)&o_part, (size_t)B * H * S * d * sizeof(float), err) ||
        pool.alloc((void **)&ml_part, (size_t)B * H * S * 2 * sizeof(float), err))
        return -1;
    CU_CHECK(cudaMemcpy(qkv, h_qkv.data(), h_qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
    CU_CHECK(cudaMemcpy(inv_freq, h_freq.data(), h_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
    CU_CHECK(cudaMemcpy(seq_pos, h_pos.data(), (size_t)B * sizeof(int), cudaMemcpyHostToDevice));
    CU_CHECK(cudaMemcpy(d_copy, copy.data(), copy.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
    CU_CHECK(cudaMemcpy(d_view, view.data(), view.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
    long bad = 0;
    /* The question's rows: written by the split with RoPE into the copy after its kept rows, into the view's own. */
    if (launch_qkv_rope(qkv, NULL, inv_freq, out_c, d_copy, seq_pos, 0, N, H, K, d, B, Tc, 0, err) ||
        launch_qkv_rope(qkv, NULL, inv_freq, q, d_view, seq_pos, 0, N, H, K, d, B, Tc, 0, err))
        return -1;
    CU_CHECK(cudaDeviceSynchronize());
    if (bits_differ(out_c, q, n_out, &bad, err)) return -1;
    for (int i = 0; i < B * K; i++) {
        size_t n = (size_t)Tc * d;
        if (bits_differ(copy[i].k + (size_t)copy[i].len * d, view[i].k, n, &bad, err) ||
            bits_differ(copy[i].v + (size_t)copy[i].len * d, view[i].v, n, &bad, err))
            return -1;
    }
    /* The chunk's attention, then one decode step over every entry (rows 0..B-1 of q as the queries). */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int i = 0; i < B * K; i++) copy[i].len = view[i].len = counts[i] + Tc - 1;
            CU_CHECK(cudaMemcpy(d_copy, copy.data(), copy.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
            CU_CHECK(cudaMemcpy(d_view, view.data(), view.size() * sizeof(DevHead), cudaMemcpyHostToDevice));
        }
        int T = pass ? 1 : Tc;
        size_t n = (size_t)B * T * H * d;
        for (int kernel = 0; kernel < 2; kernel++) {
            const DevHead *tables[2] = {d_copy, d_view};
            bf16 *outs[2] = {out_c, out_v};
            for (int t = 0; t < 2; t++) {
                int rc = kernel == 0 ? launch_attention_naive(q, outs[t], t ? probs_v : probs_c, max_n + 1, tables[t], 0,
                                                              N, H, K, d, B, T, 0, T, 0, err)
                         : pass == 0 ? launch_flash_prefill(q, outs[t], tables[t], 0, N, H, K, d, B, T, 0, err)
                                     : launch_decode_attention(q, outs[t], o_part, ml_part, tables[t], 0, N, H, K, d, B,
                                                               S, 0, err);
                if (rc) return -1;
                CU_CHECK(cudaDeviceSynchronize());
            }
            if (bits_differ(out_c, out_v, n, &bad, err) ||
                (kernel == 0 && bits_differ(probs_c, probs_v, (size_t)B * H * T * (max_n + 1), &bad, err)))
                return -1;
        }
    }
    *mismatches += bad;
    return 0;
}

/* Views against copies: head-variable keep-sets with empty and full heads, the boundary between shared and own
 * entries on and around flash tile (64) and split (256) edges, G = 3, 4, 8 at d = 64, 128, 96, 256. */
static const int VIEW_COUNTS_A[6] = {0, 59, 64, 251, 252, 300};
static const int VIEW_COUNTS_B[2] = {0, 511};
static const int VIEW_COUNTS_C[1] = {130};
static const int VIEW_COUNTS_D[4] = {1, 1000, 0, 700};
static const struct {
    int B, H, K, d, Tc, base_len;
    const int *counts;
} VIEW_CASES[] = {{2, 9, 3, 64, 5, 300, VIEW_COUNTS_A},
                  {1, 8, 2, 128, 1, 520, VIEW_COUNTS_B},
                  {1, 4, 1, 96, 70, 200, VIEW_COUNTS_C},
                  {2, 16, 2, 256, 65, 1100, VIEW_COUNTS_D}};
enum { VIEW_CASES_QUICK = 3 }; /* the first three: what the emulation's --quick runs */

/* Runs the first n_cases view cases; fills views_mismatches and views_cases. */
static int lab_views_cases(CudaSelftest *out, int n_cases, KvErr *err) {
    for (int i = 0; i < n_cases; i++) {
        const auto &c = VIEW_CASES[i];
        long before = out->views_mismatches;
        if (lab_views(c.B, c.H, c.K, c.d, c.Tc, c.base_len, c.counts, &out->views_mismatches, err))
            return kv_wrap(err, "kernel lab, views case %d (B=%d H=%d K=%d d=%d Tc=%d)", i, c.B, c.H, c.K, c.d, c.Tc);
        fprintf(stderr, "kernel lab views case %d: B=%d H=%d K=%d d=%d Tc=%d: %ld elements differ from the copies\n",
                i, c.B, c.H, c.K, c.d, c.Tc, out->views_mismatches - before);
        out->views_cases++;
    }
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
    return lab_views_cases(out, (int)(sizeof VIEW_CASES / sizeof VIEW_CASES[0]), err);
}

extern "C" int cuda_kernel_long_cases(CudaSelftest *out, int small, KvErr *err) {
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, err)) return -1;
    memset(out, 0, sizeof *out);
    /* Llama's group (G = 4, d = 128). A prefill chunk of the multi-chunk path (4,096 queries, the backend's
     * CHUNK_ROWS) over a 28k cache, the cache's keys growing in scale so the flash rescale passes run; then
     * split-K decode at B = 16 over caches of 32k entries (128 splits), lengths differing per head. The naive
     * oracle checks the chunk's first and last 128 query rows. small: the same paths at shapes the CPU emulation
     * runs (a 256-query chunk over 900 entries, its first and last 32 rows; B = 16 over 600-1,100). */
    int chunk = small ? 256 : 4096, cache = small ? 900 : 28 * 1024, dec = small ? 1100 : 32 * 1024;
    int lens_chunk[1] = {cache};
    int lens_dec[16 * 2];
    for (int i = 0; i < 16 * 2; i++) lens_dec[i] = dec - (i * 37) % (small ? 500 : 3000);
    struct {
        int B, H, K, Tc;
        const int *lens;
        float key_growth;
    } cases[] = {{1, 4, 1, chunk, lens_chunk, small ? 0.002f : 0.00005f}, {16, 8, 2, 1, lens_dec, 0.0f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double fe = 0, de = 0;
        if (lab_case_rows(cases[i].B, cases[i].H, cases[i].K, 128, cases[i].Tc, cases[i].lens, cases[i].key_growth,
                          small ? 64 : 256, &fe, &de, err))
            return kv_wrap(err, "kernel lab long case %zu (B=%d H=%d K=%d d=128 Tc=%d over %d entries)", i,
                           cases[i].B, cases[i].H, cases[i].K, cases[i].Tc, cases[i].lens[0]);
        fprintf(stderr, "kernel lab long case %zu: B=%d H=%d K=%d d=128 Tc=%d over %d entries: flash %.2e, decode "
                "%.2e\n", i, cases[i].B, cases[i].H, cases[i].K, cases[i].Tc, cases[i].lens[0], fe, de);
        out->flash_max_err = worse(out->flash_max_err, fe);
        out->decode_max_err = worse(out->decode_max_err, de);
        out->cases++;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* The observation's value norms: the fused kernel and the GEMM + L1 path against a double-precision oracle  */

/* One shape: K kv-heads of L values of head dim d, and an o_proj whose first group of G heads is not theirs (so
 * kv-head kh reads columns (kh + 1)·G·d on, from a base that is not the matrix's). The fused kernel does all K in
 * one launch, the GEMM + L1 path one kv-head at a time. The oracle, in double from the same bf16 values, checks
 * the first and last oracle_rows / 2 rows of each kv-head (every row when oracle_rows >= L); errors are relative
 * to the oracle's norm. */
static int lab_value_norms_case(cublasHandle_t h, int K, int L, int d, int G, int D, int oracle_rows,
                                double *fused_err, double *gemm_err, KvErr *err) {
    DevPool pool;
    int ld_wo = (K + 1) * G * d, chunk = 512;
    std::vector<bf16 *> v(K);
    bf16 *wo;
    float *proj, *out_fused, *out_gemm;
    for (int kh = 0; kh < K; kh++)
        if (upload_random(pool, &v[kh], (size_t)L * d, 1.0f, err)) return -1;
    if (upload_random(pool, &wo, (size_t)D * ld_wo, 0.05f, err) ||
        pool.alloc((void **)&proj, (size_t)chunk * D * sizeof(float), err) ||
        pool.alloc((void **)&out_fused, (size_t)K * L * sizeof(float), err) ||
        pool.alloc((void **)&out_gemm, (size_t)K * L * sizeof(float), err))
        return -1;
    const bf16 *w_first = wo + (size_t)G * d;
    std::vector<const bf16 *> values(v.begin(), v.end());
    if (!value_norms_fused_serves(values.data(), K, d, D, w_first, ld_wo))
        return kv_fail(err, "value norms lab: d = %d, D = %d not served by the fused kernel", d, D);
    if (launch_value_norms(values.data(), K, L, d, w_first, ld_wo, G, D, out_fused, 1.0f / G, 0, err)) return -1;
    for (int kh = 0; kh < K; kh++)
        if (value_norms_by_gemm(h, v[kh], L, d, w_first + (size_t)kh * G * d, ld_wo, G, D, proj, chunk,
                                out_gemm + (size_t)kh * L, 1.0f / G, 0, err))
            return -1;
    CU_CHECK(cudaDeviceSynchronize());
    std::vector<bf16> hv((size_t)L * d), hw((size_t)D * ld_wo);
    std::vector<float> hf((size_t)K * L), hg((size_t)K * L);
    CU_CHECK(cudaMemcpy(hw.data(), wo, hw.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(hf.data(), out_fused, hf.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(hg.data(), out_gemm, hg.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<double> vrow(d);
    *fused_err = *gemm_err = 0;
    int half = oracle_rows < L ? oracle_rows / 2 : L;
    for (int kh = 0; kh < K; kh++) {
        CU_CHECK(cudaMemcpy(hv.data(), v[kh], hv.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
        for (int j = 0; j < L; j++) {
            if (j >= half && j < L - half) continue; /* the first and last rows only */
            for (int c = 0; c < d; c++) vrow[c] = __bfloat162float(hv[(size_t)j * d + c]);
            double norm = 0;
            for (int g = 0; g < G; g++)
                for (int n = 0; n < D; n++) {
                    const bf16 *w = hw.data() + (size_t)n * ld_wo + (size_t)((kh + 1) * G + g) * d;
                    double dot = 0;
                    for (int c = 0; c < d; c++) dot += vrow[c] * (double)__bfloat162float(w[c]);
                    norm += fabs(dot);
                }
            norm /= G;
            *fused_err = worse(*fused_err, fabs(hf[(size_t)kh * L + j] - norm) / norm);
            *gemm_err = worse(*gemm_err, fabs(hg[(size_t)kh * L + j] - norm) / norm);
        }
    }
    return 0;
}

extern "C" int cuda_value_norms_lab(CudaValueNormsLab *out, int small, KvErr *err) {
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, err)) return -1;
    memset(out, 0, sizeof *out);
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    /* SmolLM2's head (d = 64, G = 3, D = 576) and Llama's (d = 128, G = 4) over lengths that end inside a block of
     * rows; then, on a GPU, Llama-3.1-8B's whole width (D = 4,096) over 32k values, the oracle on the first and
     * last 128 rows. */
    struct {
        int K, L, d, G, D, oracle_rows;
    } cases[] = {{1, 300, 64, 3, 576, 300}, {2, 1000, 128, 4, 512, 1000}, {1, 32768, 128, 4, 4096, 256}};
    int n_cases = small ? 2 : 3, rc = 0;
    for (int i = 0; i < n_cases && rc == 0; i++) {
        double fe = 0, ge = 0;
        rc = lab_value_norms_case(h, cases[i].K, cases[i].L, cases[i].d, cases[i].G, cases[i].D, cases[i].oracle_rows,
                                  &fe, &ge, err);
        if (rc) {
            kv_wrap(err, "value norms lab case %d (K=%d L=%d d=%d G=%d D=%d)", i, cases[i].K, cases[i].L, cases[i].d,
                    cases[i].G, cases[i].D);
            break;
        }
        fprintf(stderr, "value norms lab case %d: K=%d L=%d d=%d G=%d D=%d: fused %.2e, GEMM + L1 %.2e (relative)\n",
                i, cases[i].K, cases[i].L, cases[i].d, cases[i].G, cases[i].D, fe, ge);
        out->fused_max_rel_err = worse(out->fused_max_rel_err, fe);
        out->gemm_max_rel_err = worse(out->gemm_max_rel_err, ge);
        out->cases++;
    }
    cublasDestroy(h);
    return rc;
}

/* The best of reps timed runs (after one warm-up) of one layer's value norms at K kv-heads of G: the GEMM + L1
 * path (fused = 0) or the fused kernel. */
static int value_norms_best_ms(cublasHandle_t h, cudaEvent_t e0, cudaEvent_t e1, int fused, const bf16 *const *values,
                               int K, int L, int d, const bf16 *wo, int G, int D, float *proj, int chunk, float *out,
                               int reps, double *best_ms, KvErr *err) {
    float best = INFINITY;
    for (int r = 0; r < reps + 1; r++) {
        CU_CHECK(cudaEventRecord(e0, 0));
        if (fused) {
            if (launch_value_norms(values, K, L, d, wo, K * G * d, G, D, out, 1.0f / G, 0, err)) return -1;
        } else {
            for (int kh = 0; kh < K; kh++)
                if (value_norms_by_gemm(h, values[kh], L, d, wo + (size_t)kh * G * d, K * G * d, G, D, proj, chunk,
                                        out + (size_t)kh * L, 1.0f / G, 0, err))
                    return -1;
        }
        CU_CHECK(cudaEventRecord(e1, 0));
        CU_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0 && ms < best) best = ms;
    }
    *best_ms = best;
    return 0;
}

extern "C" int cuda_measure_value_norms(int L, double *gemm_ms, double *fused_ms, KvErr *err) {
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, err)) return -1;
    const int K = 8, G = 4, d = 128, D = 4096, reps = 5;
    /* The backend's block of rows: as many f32 projections of D as half the L2 holds (cuda_backend.cu). */
    int chunk = (int)(dev.l2_bytes / 2 / ((size_t)D * sizeof(float)));
    if (chunk < 64) chunk = 64;
    DevPool pool;
    bf16 *v, *wo;
    float *proj, *out;
    if (upload_random(pool, &v, (size_t)K * L * d, 1.0f, err) ||
        upload_random(pool, &wo, (size_t)D * K * G * d, 0.05f, err) ||
        pool.alloc((void **)&proj, (size_t)chunk * D * sizeof(float), err) ||
        pool.alloc((void **)&out, (size_t)K * L * sizeof(float), err))
        return -1;
    const bf16 *values[K];
    for (int kh = 0; kh < K; kh++) values[kh] = v + (size_t)kh * L * d;
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        kv_fail(err, "value norms timing: cudaEventCreate failed");
    else if (!value_norms_best_ms(h, e0, e1, 0, values, K, L, d, wo, G, D, proj, chunk, out, reps, gemm_ms, err) &&
             !value_norms_best_ms(h, e0, e1, 1, values, K, L, d, wo, G, D, proj, chunk, out, reps, fused_ms, err))
        rc = 0;
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cublasDestroy(h);
    return rc;
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

extern "C" int cuda_argmax_rows_host(const float *x, int rows, int V, int *out, KvErr *err) {
    DevPool pool;
    float *dx = NULL;
    int *dout = NULL;
    if (pool.alloc((void **)&dx, sizeof(float) * (size_t)rows * V, err) ||
        pool.alloc((void **)&dout, sizeof(int) * (size_t)rows, err))
        return -1;
    cudaError_t e = cudaMemcpy(dx, x, sizeof(float) * (size_t)rows * V, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return kv_fail(err, "argmax: cudaMemcpy: %s", cudaGetErrorString(e));
    if (launch_argmax_rows(dx, rows, V, dout, 0, err)) return -1;
    e = cudaMemcpy(out, dout, sizeof(int) * (size_t)rows, cudaMemcpyDeviceToHost);
    return e != cudaSuccess ? kv_fail(err, "argmax: cudaMemcpy: %s", cudaGetErrorString(e)) : 0;
}

extern "C" int cuda_measure_host_copy(size_t bytes, double *seconds, KvErr *err) {
    DevPool pool;
    void *dev = NULL;
    if (pool.alloc(&dev, bytes, err)) return -1;
    char *host = (char *)kv_malloc(bytes ? bytes : 1, err); /* unpinned, as a caller's logits buffer */
    if (!host) return -1;
    const int reps = 20;
    double total = 0;
    int rc = 0;
    for (int i = 0; i < 2 + reps && !rc; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cudaError_t e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (e != cudaSuccess) rc = kv_fail(err, "host copy: cudaMemcpy: %s", cudaGetErrorString(e));
        if (i >= 2) total += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    free(host);
    *seconds = total / reps;
    return rc;
}
