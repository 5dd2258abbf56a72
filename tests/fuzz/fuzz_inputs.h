/* fuzz_inputs.h — one untrusted input handed to the code that reads it, for the libFuzzer targets
 * (tests/fuzz/fuzz_target.c, `make fuzz`) and for test_model_input's replay of the corpus in tests/data/fuzz/.
 *
 * Targets: "index" (model.safetensors.index.json), "tokenizer_config" (tokenizer_config.json) and "config_json"
 * (config.json) of a Hugging Face directory — the input replaces that file in a copy of the tiny Llama fixture
 * (tests/data/hf_fixtures/llama, two shards) and the model is loaded — and "run_config" (a `kvbench run` config,
 * parsed). Any input must either load or be refused with one line naming the file; anything else (a crash, a
 * sanitizer report, a message without the file or over several lines) is a finding. Run from the project root. */
#ifndef KVBENCH_FUZZ_INPUTS_H
#define KVBENCH_FUZZ_INPUTS_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../engine/model.h"
#include "../../runs/config.h"

#define FUZZ_FIXTURE "tests/data/hf_fixtures/llama"

static char fuzz_dir[64];

static void fuzz_remove_dir(void) {
    DIR *d = opendir(fuzz_dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", fuzz_dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(fuzz_dir);
}

/* A temporary copy of the fixture (symlinks to its files, by absolute path), made once per process. */
static int fuzz_make_dir(void) {
    if (fuzz_dir[0]) return 0;
    char cwd[400], src[1024], dst[1024];
    snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/kvbench_fuzz_XXXXXX");
    if (!getcwd(cwd, sizeof cwd) || !mkdtemp(fuzz_dir)) return -1;
    atexit(fuzz_remove_dir);
    DIR *d = opendir(FUZZ_FIXTURE);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(src, sizeof src, "%s/%s/%s", cwd, FUZZ_FIXTURE, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", fuzz_dir, e->d_name);
        if (symlink(src, dst)) break;
    }
    int ok = d && !e;
    if (d) closedir(d);
    return ok ? 0 : -1;
}

/* Puts `data` in the directory as `file` (the file's fixture original restored by the next call for another file). */
static int fuzz_write(const char *file, const uint8_t *data, size_t n) {
    static const char *const replaceable[] = {"model.safetensors.index.json", "tokenizer_config.json", "config.json"};
    char p[1024], src[1024], cwd[400];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    for (size_t i = 0; i < sizeof replaceable / sizeof replaceable[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", fuzz_dir, replaceable[i]);
        snprintf(src, sizeof src, "%s/%s/%s", cwd, FUZZ_FIXTURE, replaceable[i]);
        unlink(p);
        if (strcmp(file, replaceable[i]) && symlink(src, p)) return -1;
    }
    snprintf(p, sizeof p, "%s/%s", fuzz_dir, file);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* 1 when the input was loaded (parsed), 0 when it was refused properly; else -1 with what went wrong in why. */
static int fuzz_input(const char *target, const uint8_t *data, size_t n, char *why, size_t why_n) {
    KvErr err = {{0}};
    const char *file = !strcmp(target, "index")              ? "model.safetensors.index.json"
                       : !strcmp(target, "tokenizer_config") ? "tokenizer_config.json"
                       : !strcmp(target, "config_json")      ? "config.json"
                                                             : NULL;
    int rc;
    const char *must_name;
    if (file) {
        if (fuzz_make_dir() || fuzz_write(file, data, n)) {
            snprintf(why, why_n, "cannot prepare %s in %s", file, fuzz_dir);
            return -1;
        }
        Model *m = NULL;
        rc = model_load(&m, fuzz_dir, &err);
        model_free(m);
        must_name = fuzz_dir;
    } else if (!strcmp(target, "run_config")) {
        char *text = malloc(n + 1);
        if (!text) return 0;
        memcpy(text, data, n);
        text[n] = '\0';
        RunConfig cfg;
        rc = config_parse(&cfg, "fuzz.json", text, &err);
        if (!rc) config_free(&cfg);
        free(text);
        must_name = "fuzz.json";
    } else {
        snprintf(why, why_n, "unknown fuzz target '%s'", target);
        return -1;
    }
    if (rc && (!strstr(err.msg, must_name) || strchr(err.msg, '\n'))) {
        snprintf(why, why_n, "%s: refused without one line naming %s: '%s'", target, must_name, err.msg);
        return -1;
    }
    return rc == 0;
}

#endif
