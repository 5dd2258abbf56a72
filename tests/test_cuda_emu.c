/* test_cuda_emu.c — the CUDA kernels run on the CPU emulation (tests/gpu/emulate.sh --quick): the cache gather
 * and the q/k/v RoPE split against the host formula, then flash prefill, split-K decode and window attention
 * against the naive oracle kernel on small shapes of every kind the backend accepts (group sizes 1 to 8, head dims
 * 48 to 256, tile and split edges), with the GPU check's tolerances (2e-2), and every attention kernel on views
 * of a base cache against gathered copies (bit for bit), and the observation's value norms (the fused kernel and
 * the GEMM + L1 path) against a double oracle (1e-4 relative). Each PASS/FAIL line of the
 * emulation counts as one check; a missing closing line (the emulator did not build, a deadlock, a crash) fails.
 * Needs g++ and python3 (scripts/setup.sh installs both); about 50 CPU-seconds (2026-12-06, with the value norms). */
#include <stdio.h>
#include <string.h>

#include "test.h"

int main(void) {
    TestCounts tc = {"test_cuda_emu", 0, 0, 0};
    FILE *p = popen("bash tests/gpu/emulate.sh --quick 2>&1", "r");
    CHECK(&tc, p != NULL, "cannot run tests/gpu/emulate.sh");
    if (!p) return test_finish(&tc);
    char line[1024];
    int closed = 0;
    while (fgets(line, sizeof line, p)) {
        if (!strncmp(line, "PASS  ", 6) || !strncmp(line, "FAIL  ", 6)) {
            CHECK(&tc, line[0] == 'P', "%s", line);
        } else if (!strncmp(line, "emulation: ", 11)) {
            closed = 1;
        } else if (strstr(line, "error") || strstr(line, "emulator:")) {
            fputs(line, stderr); /* compiler or emulator diagnostics, for the failure below */
        }
    }
    int rc = pclose(p);
    CHECK(&tc, closed && rc == 0, "tests/gpu/emulate.sh --quick did not finish cleanly (exit status %d)", rc);
    return test_finish(&tc);
}
