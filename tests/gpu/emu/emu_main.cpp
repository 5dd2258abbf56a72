/* emu_main.cpp — runs the kernel lab (engine/cuda/cuda_lab.cu, unchanged, included below as emulate.sh
 * translated it) and direct checks of the row kernels the lab does not cover (cache gather, q/k/v split with
 * RoPE) on the CPU emulation of CUDA (cuda_emu.h), with the GPU check's tolerances. Exits 1 on a failure.
 *     emu_main [--quick]     (--quick: small shapes of every kind instead of the lab's own, which take minutes;
 *                            without it also the long-context cases at the emulation's small shapes) */
#include "cuda_lab.cpp"

#define TOL_KERNEL 2e-2

/* The lab asks the backend for the device first; the emulator is the device. */
extern "C" int cuda_device_query(CudaDeviceInfo *info, KvErr *err) {
    (void)err;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "CPU emulation");
    info->cc_major = 9;
    return 0;
}

static int fails; /* worse(), the NaN-keeping max, comes with cuda_lab.cpp */
static void verdict(int ok, const char *what, double value, double tol) {
    printf("%s  %s: %.2e (<= %.0e)\n", ok ? "PASS" : "FAIL", what, value, tol);
    fails += !ok;
}

/* Gather: every kept row lands at its destination, K and V, and nothing else is written. */
static void check_gather(int d) {
    KvErr err = {{0}};
    int src_n = 50, dst_n = 40, n = 30;
    std::vector<bf16> sk(src_n * d), sv(src_n * d), dk(dst_n * d), dv(dst_n * d);
    for (int i = 0; i < src_n * d; i++) sk[i] = __float2bfloat16((float)i), sv[i] = __float2bfloat16((float)-i);
    for (int i = 0; i < dst_n * d; i++) dk[i] = dv[i] = __float2bfloat16(0.5f);
    std::vector<long long> src_rows(n), dst_rows(n);
    for (int e = 0; e < n; e++) src_rows[e] = (e * 7 + 3) % src_n, dst_rows[e] = e + 5;
    double bad = 0;
    if (launch_gather_rows(src_rows.data(), dst_rows.data(), n, sk.data(), sv.data(), dk.data(), dv.data(), d, 0, &err)) {
        printf("FAIL  gather d=%d: %s\n", d, err.msg);
        fails++;
        return;
    }
    for (int r = 0; r < dst_n; r++)
        for (int c = 0; c < d; c++) {
            int e = r - 5;
            float wk = e >= 0 && e < n ? (float)(src_rows[e] * d + c) : 0.5f;
            float wv = e >= 0 && e < n ? -(float)(src_rows[e] * d + c) : 0.5f;
            bad += fabsf(__bfloat162float(dk[r * d + c]) - __bfloat162float(__float2bfloat16(wk))) +
                   fabsf(__bfloat162float(dv[r * d + c]) - __bfloat162float(__float2bfloat16(wv)));
        }
    char what[64];
    snprintf(what, sizeof what, "gather rows, head dim %d: total abs difference", d);
    verdict(bad == 0, what, bad, 0);
}

/* q/k/v split with RoPE and bias for B sequences at different positions, against the formula on the host. */
static void check_rope(int H, int K, int d, int B, int Tc) {
    KvErr err = {{0}};
    int N = 1, width = (H + 2 * K) * d, half = d / 2;
    std::vector<float> qkv((size_t)B * Tc * width), bias(width), inv_freq(half);
    for (size_t i = 0; i < qkv.size(); i++) qkv[i] = sinf((float)i * 0.37f);
    for (int i = 0; i < width; i++) bias[i] = 0.01f * (i % 7);
    for (int i = 0; i < half; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / d);
    int cap = 40;
    std::vector<std::vector<bf16>> ks(B * K, std::vector<bf16>(cap * d)), vs(B * K, std::vector<bf16>(cap * d));
    std::vector<DevHead> heads(B * K);
    std::vector<int> seq_pos(B);
    for (int b = 0; b < B; b++) seq_pos[b] = 1000 * b + 3;
    for (int i = 0; i < B * K; i++) heads[i] = DevHead{ks[i].data(), vs[i].data(), 2 + i % 3, 0, NULL, NULL, NULL};
    std::vector<bf16> q((size_t)B * Tc * H * d);
    if (launch_qkv_rope(qkv.data(), bias.data(), inv_freq.data(), q.data(), heads.data(), seq_pos.data(), 0, N, H, K,
                        d, B, Tc, 0, &err)) {
        printf("FAIL  qkv/rope: %s\n", err.msg);
        fails++;
        return;
    }
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tc; t++) {
            const float *src = &qkv[((size_t)b * Tc + t) * width];
            float pos = (float)(seq_pos[b] + t);
            for (int head = 0; head < H + K; head++)
                for (int i = 0; i < half; i++) {
                    int col = head * d + i;
                    float x1 = src[col] + bias[col], x2 = src[col + half] + bias[col + half];
                    float s = sinf(pos * inv_freq[i]), c = cosf(pos * inv_freq[i]);
                    float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
                    const bf16 *got = head < H ? &q[(((size_t)b * Tc + t) * H + head) * d]
                                               : heads[b * K + head - H].k + (size_t)(heads[b * K + head - H].len + t) * d;
                    worst = worse(worst, fabs(__bfloat162float(got[i]) - y1));
                    worst = worse(worst, fabs(__bfloat162float(got[i + half]) - y2));
                }
            for (int kh = 0; kh < K; kh++)
                for (int c = 0; c < d; c++) {
                    int col = (H + K) * d + kh * d + c;
                    const DevHead &hd = heads[b * K + kh];
                    worst = worse(worst, fabs(__bfloat162float(hd.v[(size_t)(hd.len + t) * d + c]) - (src[col] + bias[col])));
                }
        }
    verdict(worst <= 1e-2, "q/k/v split with RoPE and bias: max abs error", worst, 1e-2);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines survive a sanitizer's abort */
    KvErr err = {{0}};
    check_gather(128);
    check_gather(48);
    check_rope(6, 2, 64, 2, 5);
    check_rope(4, 4, 16, 1, 3);
    CudaSelftest lab;
    if (quick) { /* the lab's kinds of case, smaller: G = 3, 4, 1, 8 at d = 64, 128, 96, 256, 48 across tile and
                  * split edges, and a one-token chunk (decode over 1 and 2 entries) */
        static const int la[2 * 3] = {0, 37, 300, 5, 64, 1};
        static const int lb[1 * 2] = {65, 256};
        static const int lc[1 * 2] = {0, 260};
        static const int ld[1 * 1] = {130};
        static const int le[1 * 2] = {3, 0};
        static const int lf[1 * 2] = {0, 1};
        static const int lg[1 * 2] = {100, 0};
        /* The last two: keys whose scale grows along the sequence, so the flash kernel's rescale passes run. */
        const struct {
            int B, H, K, d, Tc;
            const int *lens;
            float key_growth;
        } cases[] = {{2, 9, 3, 64, 70, la, 0},  {1, 8, 2, 128, 66, lb, 0},   {1, 2, 2, 96, 2, lc, 0},
                     {1, 8, 1, 256, 20, ld, 0}, {1, 6, 2, 48, 33, le, 0},    {1, 4, 2, 64, 1, lf, 0},
                     {1, 4, 2, 128, 130, lg, 0.05f}, {1, 2, 1, 256, 70, lg, 0.05f}};
        memset(&lab, 0, sizeof lab);
        for (const auto &c : cases) {
            double fe = 0, de = 0;
            if (lab_case(c.B, c.H, c.K, c.d, c.Tc, c.lens, c.key_growth, &fe, &de, &err)) {
                printf("FAIL  lab case: %s\n", err.msg);
                return 1;
            }
            printf("lab case B=%d H=%d K=%d d=%d Tc=%d: flash %.2e, decode %.2e\n", c.B, c.H, c.K, c.d, c.Tc, fe, de);
            lab.flash_max_err = worse(lab.flash_max_err, fe);
            lab.decode_max_err = worse(lab.decode_max_err, de);
            lab.cases++;
        }
        if (lab_window(6, 2, 64, 40, 50, 32, &lab.window_max_err, &err)) {
            printf("FAIL  lab window: %s\n", err.msg);
            return 1;
        }
        if (lab_views_cases(&lab, VIEW_CASES_QUICK, &err)) {
            printf("FAIL  lab views: %s\n", err.msg);
            return 1;
        }
    } else {
        CudaSelftest lc;
        if (cuda_kernel_selftest(&lab, &err) || cuda_kernel_long_cases(&lc, 1, &err)) {
            printf("FAIL  kernel lab: %s\n", err.msg);
            return 1;
        }
        lab.flash_max_err = worse(lab.flash_max_err, lc.flash_max_err);
        lab.decode_max_err = worse(lab.decode_max_err, lc.decode_max_err);
        lab.cases += lc.cases;
    }
    verdict(lab.flash_max_err <= TOL_KERNEL, "kernel lab: flash prefill vs naive oracle", lab.flash_max_err, TOL_KERNEL);
    verdict(lab.decode_max_err <= TOL_KERNEL, "kernel lab: split-K decode vs naive oracle", lab.decode_max_err,
            TOL_KERNEL);
    verdict(lab.window_max_err <= TOL_KERNEL, "kernel lab: window attention vs naive oracle", lab.window_max_err,
            TOL_KERNEL);
    printf("%s  kernel lab: views vs gathered copies, %d shapes (flash, naive, split-K decode, q/k/v rows): %ld "
           "elements differ in any bit (== 0)\n", lab.views_mismatches == 0 && lab.views_cases > 0 ? "PASS" : "FAIL",
           lab.views_cases, lab.views_mismatches);
    fails += lab.views_mismatches != 0 || lab.views_cases == 0;
    CudaValueNormsLab vn;
    if (cuda_value_norms_lab(&vn, 1, &err)) {
        printf("FAIL  value norms lab: %s\n", err.msg);
        return 1;
    }
    verdict(vn.fused_max_rel_err <= CUDA_VALUE_NORMS_TOL, "value norms, fused kernel vs double oracle (relative)",
            vn.fused_max_rel_err, CUDA_VALUE_NORMS_TOL);
    verdict(vn.gemm_max_rel_err <= CUDA_VALUE_NORMS_TOL, "value norms, GEMM + L1 vs double oracle (relative)",
            vn.gemm_max_rel_err, CUDA_VALUE_NORMS_TOL);
    printf("emulation: %s (%d lab shapes)\n", fails ? "FAIL" : "PASS", lab.cases + vn.cases);
    return fails ? 1 : 0;
}
