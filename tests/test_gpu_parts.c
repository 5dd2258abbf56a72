/* test_gpu_parts.c — tests/gpu/model_parts.sh, which carries a model to a lent GPU machine in parts: split then
 * join gives the file back bit for bit; a missing part, a part from another split, a damaged part and a file
 * SHA256SUMS does not name are each one line naming the part or file, exit 1, and leave nothing in models/.
 * Runs a copy of the script in a scratch tree (it works from its own ../.. ), on a 2.5 MiB file of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#define ROOT "/tmp/kvbench_gpu_parts"
#define MODEL "models/fake.gguf"

/* Runs a shell command in ROOT, its stdout and stderr into out; returns its exit status. */
static int sh(const char *cmd, char *out, size_t size) {
    char full[1024];
    snprintf(full, sizeof full, "cd " ROOT " && { %s; } 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, size - 1, p);
    out[n] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void) {
    TestCounts tc = {"gpu_parts", 0, 0, 0};
    static char out[8192];
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "rm -rf " ROOT " && mkdir -p " ROOT "/tests/gpu " ROOT "/models && cp tests/gpu/model_parts.sh " ROOT
             "/tests/gpu/ && head -c 2621440 /dev/urandom > " ROOT "/" MODEL " && cp " ROOT "/" MODEL " " ROOT
             "/original && (cd " ROOT " && sha256sum " MODEL " > models/SHA256SUMS)");
    if (system(cmd) != 0) {
        fprintf(stderr, "gpu_parts: cannot make the scratch tree %s\n", ROOT);
        return 1;
    }
    int rc = sh("bash tests/gpu/model_parts.sh split " MODEL " 1048576", out, sizeof out);
    CHECK(&tc, rc == 0 && strstr(out, "3 parts"), "split into 3 parts: %s", out);
    CHECK(&tc, access(ROOT "/.gpu-model/fake.gguf.part-3-of-3", R_OK) == 0, "part 3 of 3 written");
    rc = sh("bash tests/gpu/model_parts.sh split " MODEL " 1000", out, sizeof out);
    CHECK(&tc, rc == 1 && strstr(out, "part size '1000'"), "a part under 1 MiB refused: %s", out);

    sh("rm " MODEL, out, sizeof out);
    rc = sh("bash tests/gpu/model_parts.sh join " MODEL " && cmp " MODEL " original", out, sizeof out);
    CHECK(&tc, rc == 0 && strstr(out, "joined from 3 parts (sha256 checked)"), "join gives the file back: %s", out);
    rc = sh("bash tests/gpu/model_parts.sh join " MODEL, out, sizeof out);
    CHECK(&tc, rc == 0 && strstr(out, "already here"), "join again: nothing to do: %s", out);

    sh("rm " MODEL " && mv .gpu-model/fake.gguf.part-2-of-3 part2", out, sizeof out);
    rc = sh("bash tests/gpu/model_parts.sh join " MODEL, out, sizeof out);
    CHECK(&tc, rc == 1 && strstr(out, ".gpu-model/fake.gguf.part-2-of-3 is missing") && !strchr(strchr(out, '\n') + 1, '\n'),
          "a missing part is one line naming it: %s", out);
    CHECK(&tc, access(ROOT "/" MODEL, F_OK) != 0 && access(ROOT "/" MODEL ".part", F_OK) != 0,
          "nothing left in models/ after a missing part");

    sh("cp part2 .gpu-model/fake.gguf.part-2-of-4", out, sizeof out);
    rc = sh("bash tests/gpu/model_parts.sh join " MODEL, out, sizeof out);
    CHECK(&tc, rc == 1 && strstr(out, "from another split"), "a part of another split: %s", out);

    sh("rm .gpu-model/fake.gguf.part-2-of-4 && printf X | dd of=part2 bs=1 seek=100 conv=notrunc status=none && "
       "mv part2 .gpu-model/fake.gguf.part-2-of-3", out, sizeof out);
    rc = sh("bash tests/gpu/model_parts.sh join " MODEL, out, sizeof out);
    CHECK(&tc, rc == 1 && strstr(out, "joined from 3 parts: sha256") && strstr(out, "a part is damaged"),
          "a damaged part fails the sha256: %s", out);
    CHECK(&tc, access(ROOT "/" MODEL, F_OK) != 0 && access(ROOT "/" MODEL ".part", F_OK) != 0,
          "nothing left in models/ after a damaged part");

    rc = sh("bash tests/gpu/model_parts.sh join models/other.gguf", out, sizeof out);
    CHECK(&tc, rc == 1 && strstr(out, "models/SHA256SUMS has no line for models/other.gguf"), "unknown file: %s", out);
    rc = sh("bash tests/gpu/model_parts.sh", out, sizeof out);
    CHECK(&tc, rc == 2 && strstr(out, "usage:"), "no verb: usage, exit 2: %s", out);

    system("rm -rf " ROOT);
    return test_finish(&tc);
}
