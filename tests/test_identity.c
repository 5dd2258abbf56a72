/* test_identity.c — what a result row's identity is made of (configs/README.md "Resume and identity").
 *
 * Model identity (util_model_identity): the same bytes under another path give the same identity; a changed byte
 * in the head or in a sampled block, another size, another tokenizer or another config file of a directory give
 * another; files that are neither weights nor tokenizer (README.md) do not count; a synthetic spec is its own
 * identity. Data identity (dataset_identity): RULER's seed changes it (and only the seed pair), subset options
 * and n_samples do not; a LongBench task file gives the same identity from a directory and from data.zip, and an
 * edited copy another; the needle's lengths and depths (in the key) do not change it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../datasets/dataset.h"
#include "../runs/util.h"
#include "test.h"

static char dir[64];

static void write_bytes(const char *path, size_t n, unsigned seed) {
    FILE *f = fopen(path, "wb");
    unsigned x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        fputc((int)(x >> 16) & 0xff, f);
    }
    fclose(f);
}

static void flip_byte(const char *path, long offset) {
    FILE *f = fopen(path, "r+b");
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void identity(const char *path, const char *tokenizer, char *out, size_t n, TestCounts *tc) {
    KvErr err = {{0}};
    CHECK(tc, util_model_identity(path, tokenizer, out, n, &err) == 0, "%s: %s", path, err.msg);
}

static void test_model_identity(TestCounts *tc) {
    char a[128], b[128], id_a[256], id_b[256], id[256], cmd[512];
    /* 40 MiB: a 16 MiB head, then sampled blocks (files up to 32 MiB are read whole). */
    const size_t size = 40u << 20;
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/copy.gguf", dir);
    write_bytes(a, size, 1);
    snprintf(cmd, sizeof cmd, "cp %s %s", a, b);
    CHECK(tc, system(cmd) == 0, "cp");
    identity(a, NULL, id_a, sizeof id_a, tc);
    identity(b, NULL, id_b, sizeof id_b, tc);
    CHECK(tc, !strcmp(id_a, id_b), "a copy elsewhere: %s vs %s", id_a, id_b);
    CHECK(tc, strstr(id_a, "fp=") == id_a && strstr(id_a, ",bytes=41943040"), "format: %s", id_a);

    flip_byte(b, 1000); /* in the head (GGUF metadata) */
    identity(b, NULL, id, sizeof id, tc);
    CHECK(tc, strcmp(id, id_a) != 0, "a changed head byte kept the identity");
    flip_byte(b, 1000);
    flip_byte(b, 16l << 20); /* the first sampled block of the rest */
    identity(b, NULL, id, sizeof id, tc);
    CHECK(tc, strcmp(id, id_a) != 0, "a changed sampled byte kept the identity");
    flip_byte(b, 16l << 20);
    identity(b, NULL, id, sizeof id, tc);
    CHECK(tc, !strcmp(id, id_a), "restored bytes: another identity");
    FILE *f = fopen(b, "ab");
    fputc(0, f);
    fclose(f);
    identity(b, NULL, id, sizeof id, tc);
    CHECK(tc, strcmp(id, id_a) != 0 && strstr(id, ",bytes=41943041"), "another size kept the identity: %s", id);

    /* A separate tokenizer is part of it. */
    char tok[128];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    write_bytes(tok, 5000, 7);
    identity(a, tok, id, sizeof id, tc);
    CHECK(tc, strstr(id, id_a) == id && strstr(id, ",tokenizer="), "with a tokenizer: %s", id);
    identity("synthetic:smollm2-135m:layers=2", tok, id, sizeof id, tc);
    CHECK(tc, strstr(id, "synthetic=smollm2-135m:layers=2,tokenizer=") == id, "synthetic: %s", id);
    identity("synthetic:smollm2-135m:layers=3", NULL, id, sizeof id, tc);
    CHECK(tc, !strcmp(id, "synthetic=smollm2-135m:layers=3"), "synthetic: %s", id);

    /* A Hugging Face directory: its config, tokenizer and weights count, a README does not. */
    char hf[128], file[192], id_dir[256];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    mkdir(hf, 0755);
    const char *names[] = {"config.json", "tokenizer.json", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(file, sizeof file, "%s/%s", hf, names[i]);
        write_bytes(file, i == 2 ? 3u << 20 : 700, (unsigned)i + 11);
    }
    identity(hf, NULL, id_dir, sizeof id_dir, tc);
    snprintf(file, sizeof file, "%s/README.md", hf);
    write_bytes(file, 100, 3);
    identity(hf, NULL, id, sizeof id, tc);
    CHECK(tc, !strcmp(id, id_dir), "a README changed the identity");
    snprintf(file, sizeof file, "%s/config.json", hf);
    flip_byte(file, 10);
    identity(hf, NULL, id, sizeof id, tc);
    CHECK(tc, strcmp(id, id_dir) != 0, "another config.json kept the identity");
    flip_byte(file, 10);
    snprintf(file, sizeof file, "%s/model.safetensors", hf);
    flip_byte(file, 2l << 20);
    identity(hf, NULL, id, sizeof id, tc);
    CHECK(tc, strcmp(id, id_dir) != 0, "other weights kept the identity");

    KvErr err = {{0}};
    snprintf(file, sizeof file, "%s/none.gguf", dir);
    CHECK(tc, util_model_identity(file, NULL, id, sizeof id, &err) == -1 && strstr(err.msg, "none.gguf"),
          "a missing model: %s", err.msg);
}

/* dataset_identity of SUITE:TASK opened with o (counting words). */
static void data_identity(const char *spec, DatasetOptions o, char *out, size_t n, TestCounts *tc) {
    Dataset *ds;
    KvErr err = {{0}};
    o.count_tokens = dataset_count_words;
    out[0] = 0;
    CHECK(tc, dataset_open(&ds, spec, &o, &err) == 0, "%s: %s", spec, err.msg);
    if (!ds) return;
    dataset_identity(ds, out, n);
    dataset_close(ds);
}

static void test_data_identity(TestCounts *tc) {
    char a[256], b[256], c[256];
    DatasetOptions o = {0};
    o.seed = 42;
    o.n_samples = 4;
    o.target_tokens = 1024;
    data_identity("ruler:niah_single_1", o, a, sizeof a, tc);
    CHECK(tc, strstr(a, "seed=42,assets=") == a && strstr(a, ",qa=none"), "ruler: %s", a);
    o.seed = 7;
    data_identity("ruler:niah_single_1", o, b, sizeof b, tc);
    CHECK(tc, strstr(b, "seed=7,") == b && !strcmp(strchr(a, ','), strchr(b, ',')), "seed 7: %s vs %s", a, b);
    o.seed = 42;
    o.n_samples = 9;
    o.first_n = 2;
    o.target_tokens = 2048;
    data_identity("ruler:niah_single_1", o, c, sizeof c, tc);
    CHECK(tc, !strcmp(a, c), "subsets, n_samples or the length changed the identity: %s vs %s", a, c);
    data_identity("ruler:qa_1", o, c, sizeof c, tc);
    CHECK(tc, strstr(c, ",qa=substitute"), "qa substitute: %s", c);
    /* The opt-in unit sizing names itself in the tasks it resizes, so the store never resumes their rows made by
     * the reference's coarse steps; the other tasks' identities, and every identity by default, are as before. */
    static const char *const unit[] = {"niah_single_1", "niah_multikey_2", "niah_multikey_3", "qa_1", "qa_2"};
    static const char *const coarse[] = {"niah_single_2", "niah_multikey_1", "vt", "cwe", "fwe"};
    for (int i = 0; i < 5; i++) {
        char spec[64], dflt[256];
        DatasetOptions u = o;
        u.ruler_unit_sizing = 1;
        snprintf(spec, sizeof spec, "ruler:%s", unit[i]);
        data_identity(spec, o, dflt, sizeof dflt, tc);
        data_identity(spec, u, c, sizeof c, tc);
        size_t n = strlen(c);
        CHECK(tc, !strstr(dflt, "sizing") && n > 12 && !strcmp(c + n - 12, ",sizing=unit") &&
                      !strncmp(c, dflt, strlen(dflt)),
              "%s: default %s, unit %s", spec, dflt, c);
        snprintf(spec, sizeof spec, "ruler:%s", coarse[i]);
        data_identity(spec, o, dflt, sizeof dflt, tc);
        data_identity(spec, u, c, sizeof c, tc);
        CHECK(tc, !strcmp(c, dflt), "%s: the unit sizing changed the identity: %s vs %s", spec, dflt, c);
    }

    DatasetOptions lb = {0};
    lb.data_path = "tests/data/longbench/fixtures";
    data_identity("longbench:trec", lb, a, sizeof a, tc);
    lb.data_path = "tests/data/longbench/data.zip";
    data_identity("longbench:trec", lb, b, sizeof b, tc);
    CHECK(tc, strstr(a, "file=") == a && !strcmp(a, b), "directory vs zip: %s vs %s", a, b);
    lb.fraction = 0.5;
    lb.seed = 3;
    data_identity("longbench:trec", lb, c, sizeof c, tc);
    CHECK(tc, !strcmp(a, c), "a subset changed the identity");
    /* An edited copy of the task file (one more record) is other data. */
    char copy_dir[128], cmd[512];
    snprintf(copy_dir, sizeof copy_dir, "%s/lb", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp tests/data/longbench/fixtures/trec.jsonl %s/ && head -n 1 "
             "tests/data/longbench/fixtures/trec.jsonl >> %s/trec.jsonl", copy_dir, copy_dir, copy_dir);
    CHECK(tc, system(cmd) == 0, "%s", cmd);
    DatasetOptions edited = {0};
    edited.data_path = copy_dir;
    data_identity("longbench:trec", edited, c, sizeof c, tc);
    CHECK(tc, c[0] && strcmp(a, c) != 0 && !strcmp(strchr(a, ','), strchr(c, ',')), "edited file: %s vs %s", a, c);

    DatasetOptions needle = {0};
    int l1[] = {300}, l2[] = {300, 600};
    needle.lengths = l1;
    needle.n_lengths = 1;
    data_identity("niah:needle", needle, a, sizeof a, tc);
    needle.lengths = l2;
    needle.n_lengths = 2;
    data_identity("niah:needle", needle, b, sizeof b, tc);
    CHECK(tc, strstr(a, "haystack=") == a && !strcmp(a, b), "needle: %s vs %s", a, b);
}

int main(void) {
    TestCounts tc = {"test_identity", 0, 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_identity_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_model_identity(&tc);
    test_data_identity(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}
