/* test_cmd_model.c — the engine's subcommands (info, tokenize, generate): usage errors exit 2 and failures 1
 * with a message; with SmolLM2's GGUF present, a tokenize round trip and the chat answer to "What is the
 * capital of France?" (Paris), read back from the command's stdout. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "../engine/err.h"
#include "../cli/commands.h"
#include "test.h"

#define GGUF_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* Runs a subcommand with its stdout (and stderr) captured into buf; returns its exit status. */
static int run_captured(int (*cmd)(int, char **), int argc, char **argv, char *buf, size_t size) {
    return test_run_command(cmd, argc, argv, buf, NULL, size);
}

int main(void) {
    TestCounts tc = {"test_cmd_model", 0, 0, 0};
    char out[8192];
#define RUN(cmd, ...) run_captured(cmd, (int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)), (char *[]){__VA_ARGS__}, out, sizeof out)
    CHECK(&tc, run_captured(cmd_info, 0, NULL, out, sizeof out) == 2 && strstr(out, "usage"), "info without a model: %s", out);
    CHECK(&tc, RUN(cmd_info, "tests/data/no-such-model.gguf") == 1 && strstr(out, "no-such-model"), "missing model: %s", out);
    CHECK(&tc, RUN(cmd_tokenize, "--text", "hi") == 2 && strstr(out, "usage"), "tokenize without a tokenizer: %s", out);
    CHECK(&tc, RUN(cmd_tokenize, "--model", "a", "--tokenizer", "b", "--text", "hi") == 2, "two sources: %s", out);
    CHECK(&tc, RUN(cmd_tokenize, "--model") == 2 && strstr(out, "needs a value"), "missing value: %s", out);
    CHECK(&tc, RUN(cmd_generate, "--model", "m", "--prompt", "p", "--max-new", "x") == 2 && strstr(out, "--max-new"),
          "bad --max-new: %s", out);
    CHECK(&tc, RUN(cmd_generate, "--model", "m", "--prompt", "p", "--frobnicate") == 2 && strstr(out, "frobnicate"),
          "unknown option: %s", out);
    CHECK(&tc, RUN(cmd_generate, "--model", "m", "--prompt", "p", "--cache", "f8") == 2 &&
                   strstr(out, "kvbench generate: --cache: cache 'f8': unknown KV cache type"),
          "a bad --cache, before any loading: %s", out);
    CHECK(&tc, RUN(cmd_generate, "--model", "tests/data/models/tiny-llama-hf", "--prompt", "p") == 1 &&
                   strstr(out, "tokenizer"), "a model without a tokenizer: %s", out);
    if (access(GGUF_PATH, R_OK) != 0) {
        SKIP(&tc, "the SmolLM2 checks: %s not found (make model)", GGUF_PATH);
        return test_finish(&tc);
    }
    CHECK(&tc, RUN(cmd_tokenize, "--model", GGUF_PATH, "--text", "Hello world") == 0, "encode: %s", out);
    char ids[256] = {0};
    memcpy(ids, out, strcspn(out, "\n") < sizeof ids - 1 ? strcspn(out, "\n") : sizeof ids - 1);
    CHECK(&tc, strlen(ids) > 0 && strspn(ids, "0123456789 ") == strlen(ids), "ids on one line: '%s'", ids);
    CHECK(&tc, RUN(cmd_tokenize, "--model", GGUF_PATH, "--text", ids, "--decode") == 0 && !strcmp(out, "Hello world\n"),
          "decode round trip: '%s'", out);
    CHECK(&tc, RUN(cmd_tokenize, "--model", GGUF_PATH, "--text", "12 x7", "--decode") == 1 && strstr(out, "x7"),
          "bad id: %s", out);
    CHECK(&tc, RUN(cmd_generate, "--model", GGUF_PATH, "--simd", "sse2", "--prompt", "p") == 1 &&
                   strstr(out, "simd 'sse2': unknown instruction set"),
          "--simd reaches the backend: %s", out);
    CHECK(&tc, RUN(cmd_generate, "--model", GGUF_PATH, "--chat", "--max-new", "16", "--prompt",
                   "What is the capital of France?") == 0 && strstr(out, "Paris"), "chat answer: %s", out);
    printf("test_cmd_model: generate answered: %s", out);
    return test_finish(&tc);
}
