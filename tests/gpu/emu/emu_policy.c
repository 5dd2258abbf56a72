/* emu_policy.c — the GPU check's device scoring part (check_device_scoring_random of tests/gpu/check_cuda.c,
 * unchanged) on the CPU emulation: every policy x aggregation x budget scored and selected by
 * policies/cuda_policy.cu against the host's policies on random observations full of ties, keep-sets equal
 * bit for bit, and a planted error caught. Built and run by tests/gpu/emulate.sh --policies. */
#define main check_cuda_main
#include "../check_cuda.c"
#undef main

int main(void) {
    Summary s = {0};
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_device_scoring_random(&s);
    printf("\nemulated device scoring: %s — %d checks, %d failed\n", s.fails ? "FAIL" : "PASS", s.checks, s.fails);
    return s.fails ? 1 : 0;
}
