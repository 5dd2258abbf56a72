/* emu_backend.c — the GPU check's CUDA-against-CPU part (check_model of tests/gpu/check_cuda.c, unchanged) on a
 * small synthetic model, with the CUDA backend (engine/cuda/cuda_backend.cu and the kernels) running on the CPU
 * emulation (cuda_emu.h): the device's argmax against the host's scan, prefill logits, window attention, value
 * norms, keys, keep-sets of all policies, the sweep's prefill scored on the device and on the host, a gathered
 * batch with question feed, decode steps (logits and greedy picks) and traces, and the bad-input checks, with the
 * GPU check's tolerances. Built and run by tests/gpu/emulate.sh --backend.
 *     emu_backend [MODEL]     (default synthetic:smollm2-135m:layers=2, what the GPU check runs first) */
#define main check_cuda_main
#include "../check_cuda.c"
#undef main

int main(int argc, char **argv) {
    Summary s = {0};
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_argmax(&s);
    check_model(&s, argc > 1 ? argv[1] : "synthetic:smollm2-135m:layers=2");
    printf("\nemulated backend: %s — %d checks, %d failed\n", s.fails ? "FAIL" : "PASS", s.checks, s.fails);
    return s.fails ? 1 : 0;
}
