/* test_cuda_nogpu.c — a CUDA build on a machine without a usable GPU: asking for the cuda backend gives one
 * clear line saying what was needed and what was found (from the library and from `kvbench generate`), never a
 * crash, and the cpu backend still works. Skipped, visibly, in a CPU-only build and where a GPU is present
 * (tests/gpu/check.sh covers that case). */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "../engine/backend.h"
#include "../engine/model.h"
#include "test.h"

#ifdef KVBENCH_CUDA
#include <cublas_api.h>

#include "../engine/cuda/cuda_api.h"

/* Whether this process has libcublas mapped (/proc/self/maps). */
static int cublas_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, "libcublas") != NULL;
    if (f) fclose(f);
    return found;
}

/* cuBLAS is not linked but opened on first use (engine/cuda/cublas_load.cu; linked, it cost every process about
 * 155 MiB of resident memory at start): absent until then, and the first call reaches the real library, whose
 * own status string comes back. */
static void check_cublas_on_demand(TestCounts *tc) {
    CHECK(tc, !cublas_mapped(), "libcublas is mapped before the CUDA backend asked for it");
    const char *s = cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(tc, s && !strcmp(s, "the requested functionality is not supported"), "cuBLAS opened on demand answered '%s'", s ? s : "(null)");
    CHECK(tc, cublas_mapped(), "libcublas is not mapped after its first call");
}

/* The message is one line that names the backend and points to the CPU fallback. */
static void check_message(TestCounts *tc, const char *msg) {
    CHECK(tc, strstr(msg, "cuda") != NULL, "message does not name the backend: %s", msg);
    CHECK(tc, strstr(msg, "needed") != NULL || strstr(msg, "needs") != NULL, "message does not say what was needed: %s",
          msg);
    CHECK(tc, strstr(msg, "--backend cpu") != NULL, "message does not point to the cpu backend: %s", msg);
    const char *nl = strchr(msg, '\n');
    CHECK(tc, nl == NULL || nl[1] == '\0', "message spans several lines: %s", msg);
}

/* The library: backend_open("cuda") fails before touching the weights, then the cpu backend runs a forward. */
static void check_library(TestCounts *tc, const char *device_msg) {
    KvErr err = {{0}};
    Model *m = NULL;
    if (model_load(&m, "synthetic:smollm2-135m:layers=1:vocab=512", &err)) {
        CHECK(tc, 0, "model_load: %s", err.msg);
        return;
    }
    Backend *be = NULL;
    int rc = backend_open(&be, "cuda", m, NULL, &err);
    CHECK(tc, rc == -1 && be == NULL, "backend_open(cuda) succeeded without a GPU");
    CHECK(tc, !strcmp(err.msg, device_msg), "backend_open(cuda) said '%s', the device check '%s'", err.msg,
          device_msg);

    KvCache *cache = NULL;
    float logits[512];
    int tokens[4] = {1, 2, 3, 4};
    if (backend_open(&be, "cpu", m, NULL, &err) || be->cache_new(be, &cache, 8, &err) ||
        be->forward(be, &cache, 1, tokens, 4, logits, NULL, NULL, &err)) {
        CHECK(tc, 0, "cpu backend after the cuda failure: %s", err.msg);
    } else {
        int finite = 1;
        for (int i = 0; i < 512; i++) finite &= isfinite(logits[i]);
        CHECK(tc, finite, "cpu backend logits are not finite");
        CHECK(tc, cache->n_pos == 4, "cpu cache advanced to %d, expected 4", cache->n_pos);
    }
    if (be) {
        be->cache_free(be, cache);
        backend_close(be);
    }
    model_free(m);
}

/* The command line: `kvbench generate --backend cuda` exits 1 with the device message on stderr. The ./kvbench
 * of the project root may come from another build tree; a CPU-only one is skipped, visibly. */
static void check_command(TestCounts *tc) {
    FILE *help = popen("./kvbench --help 2>&1", "r");
    char line[512] = {0};
    if (help) {
        if (!fgets(line, sizeof line, help)) line[0] = '\0';
        pclose(help);
    }
    if (!strstr(line, "cuda")) {
        SKIP(tc, "the command check: ./kvbench is not a CUDA build (%s)",
             line[0] ? "its help lists no cuda backend" : "it does not run");
        return;
    }
    FILE *p = popen("./kvbench generate --backend cuda --model models/SmolLM2-135M-Instruct.Q4_1.gguf "
                    "--prompt hello --max-new 2 2>&1",
                    "r");
    CHECK(tc, p != NULL, "cannot run ./kvbench");
    if (!p) return;
    char out[4096] = {0};
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    CHECK(tc, WIFEXITED(status) && WEXITSTATUS(status) == 1, "kvbench generate --backend cuda: status %d, output: %s",
          status, out);
    const char *prefix = "kvbench generate: backend 'cuda': ";
    CHECK(tc, strncmp(out, prefix, strlen(prefix)) == 0, "unexpected output: %s", out);
    check_message(tc, out);
}

int main(void) {
    TestCounts tc = {"test_cuda_nogpu", 0, 0, 0};
    CudaDeviceInfo info;
    KvErr err = {{0}};
    if (cuda_device_query(&info, &err) == 0) {
        SKIP(&tc, "a GPU is present (%s, compute capability %d.%d); run tests/gpu/check.sh", info.name, info.cc_major,
             info.cc_minor);
        return test_finish(&tc);
    }
    check_message(&tc, err.msg);
    check_library(&tc, err.msg);
    check_cublas_on_demand(&tc);
    check_command(&tc);
    return test_finish(&tc);
}

#else

int main(void) {
    TestCounts tc = {"test_cuda_nogpu", 0, 0, 0};
    SKIP(&tc, "built without CUDA (KVBENCH_CUDA undefined)");
    return test_finish(&tc);
}

#endif
