/* fuzz_target.c — a libFuzzer target for one input of fuzz_inputs.h, chosen at compile time with
 * -DFUZZ_TARGET='"index"' (or tokenizer_config, config_json, run_config). Built and run by `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_inputs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char why[1400];
    if (fuzz_input(FUZZ_TARGET, data, size, why, sizeof why) < 0) {
        fprintf(stderr, "%s\n", why);
        abort();
    }
    return 0;
}

/* One thread touches SQLite here: without its mutexes the results_db target runs a tenth faster. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sqlite3_config(SQLITE_CONFIG_SINGLETHREAD);
    return 0;
}
