/* test_tokenizer.c — tokenizers against reference ids, Unicode tables against CPython, bad input.
 *
 * References (origins and licences: tests/data/tokenizers/README.md):
 *   tokenizers/NAME/expected_ids*.json   ids for the tokenizer in that folder: expected_ids.json from the JS
 *                                        port of HF tokenizers, expected_ids_hf.json from HF tokenizers itself
 *                                        (tests/reference/gen_tokenizer_cases.py); add_special_tokens=false,
 *                                        special strings parsed
 *   tokenizers/llama2-spm/variants_hf.json  the same vocabulary under Metaspace pre-tokenizers (same script)
 *   tokenizers/llamacpp-vectors/X.inp/.out  llama.cpp's test-tokenizer-0 vectors (ids from HF tokenizers);
 *                                        the vocabulary is X (a GGUF) or the path vocab_sources.txt gives
 *   unicode_cases.json                   NFC, categories and isspace from CPython's unicodedata
 *                                        (tests/reference/gen_unicode_cases.py)
 *   models/SmolLM2-135M-Instruct.Q4_1.gguf, when fetched: ids of spec models.md §4.4
 *   decode_cases.json                    decoded text from transformers 4.57.0, clean-up of spaces included
 *                                        (tests/reference/gen_decode_cases.py)
 * Every folder of cases is scanned, so dropping in another tokenizer folder or .inp/.out pair adds it.
 * Ids must match exactly; byte-level tokenizers must also give decode(encode(x)) == x (NFC(x) for Qwen2). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../engine/tokenizer.h"
#include "../engine/unicode.h"
#include "test.h"

#define TOK_DIR "tests/data/tokenizers"
#define SPM "\xE2\x96\x81" /* '▁' */
#define VECTORS_DIR TOK_DIR "/llamacpp-vectors"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void print_ids(const char *label, const int *ids, int n) {
    fprintf(stderr, "  %s:", label);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

static void write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, len, f);
    fclose(f);
}

static Tokenizer *load_or_null(TestCounts *tc, const char *path) {
    KvErr err = {{0}};
    Tokenizer *t = NULL;
    int rc = tokenizer_load(&t, path, &err);
    CHECK(tc, rc == 0, "load %s: %s", path, err.msg);
    return rc ? NULL : t;
}

/* Encodes text and compares with want[0..n_want); on a mismatch prints both. Returns 1 when equal. */
static int ids_match(const Tokenizer *t, const char *text, size_t len, const int *want, int n_want,
                     int *got_n_out) {
    TokenIds got = {0};
    KvErr err = {{0}};
    int ok = tokenizer_encode(t, text, len, 1, &got, &err) == 0 && got.n == n_want &&
             (n_want == 0 || memcmp(got.ids, want, (size_t)n_want * sizeof *want) == 0);
    if (!ok) {
        fprintf(stderr, "  text: \"%.*s\"%s%s\n", (int)(len > 200 ? 200 : len), text, err.msg[0] ? " error: " : "",
                err.msg);
        print_ids("want", want, n_want);
        print_ids("got ", got.ids, got.n);
    }
    if (got_n_out) *got_n_out = got.n;
    ids_free(&got);
    return ok;
}

/* SentencePiece vocabularies have '▁' itself as a token; byte-level ones spell it in the GPT-2 byte alphabet.
 * Only byte-level tokenizers promise exact round trips: SentencePiece adds '▁' after special tokens and reads
 * a literal '▁' back as a space. */
static int byte_level(const Tokenizer *t) { return tokenizer_token_id(t, "\xE2\x96\x81") < 0; }

/* decode(encode(x)) == x without transformers' clean-up of spaces; a tokenizer that normalises (Qwen2's NFC) gives back NFC(x) instead. */
static int roundtrip_ok(const Tokenizer *t, const char *text, size_t len) {
    TokenIds ids = {0};
    KvErr err = {{0}};
    if (tokenizer_encode(t, text, len, 1, &ids, &err)) return 0;
    char *back = tokenizer_decode(t, ids.ids, ids.n, TOK_DECODE_RAW, &err);
    int ok = back && strlen(back) == len && memcmp(back, text, len) == 0;
    char *nfc = NULL;
    size_t nfc_len;
    if (back && !ok && unicode_nfc(text, len, &nfc, &nfc_len, &err) == 0)
        ok = (nfc_len != len || memcmp(nfc, text, len) != 0) && strcmp(back, nfc) == 0;
    if (!ok) fprintf(stderr, "  roundtrip of \"%.*s\" gave \"%s\"\n", (int)(len > 200 ? 200 : len), text, back ? back : err.msg);
    free(nfc);
    free(back);
    ids_free(&ids);
    return ok;
}

/* ---------------------------------------------------------------- Unicode vs CPython */

static void test_unicode(TestCounts *tc) {
    static const char *CATS[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
                                 "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So",
                                 "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
    KvErr err = {{0}};
    char *text = kv_read_file(TEST_DATA("unicode_cases.json"), NULL, &err);
    CHECK(tc, text != NULL, "%s", err.msg);
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    CHECK(tc, root != NULL, "unicode_cases.json does not parse");
    if (!root) return;
    int nfc_bad = 0, nfc_n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "nfc")) {
        const char *in = cJSON_GetArrayItem(c, 0)->valuestring, *want = cJSON_GetArrayItem(c, 1)->valuestring;
        char *got = NULL;
        size_t got_len;
        if (unicode_nfc(in, strlen(in), &got, &got_len, &err) || strcmp(got, want) != 0) {
            if (nfc_bad++ < 5) fprintf(stderr, "  NFC(%s) = %s, want %s\n", in, got ? got : err.msg, want);
        }
        free(got);
        nfc_n++;
    }
    CHECK(tc, nfc_n > 300 && nfc_bad == 0, "NFC: %d of %d cases differ from CPython", nfc_bad, nfc_n);
    int cat_bad = 0, cat_n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "category")) {
        uint32_t cp = (uint32_t)cJSON_GetArrayItem(c, 0)->valueint;
        const char *want = cJSON_GetArrayItem(c, 1)->valuestring;
        UnicodeCategory got = unicode_category(cp);
        int letter = want[0] == 'L', number = want[0] == 'N';
        if (strcmp(CATS[got], want) != 0 || unicode_is_letter(cp) != letter || unicode_is_number(cp) != number) {
            if (cat_bad++ < 5) fprintf(stderr, "  category(U+%04X) = %s, want %s\n", cp, CATS[got], want);
        }
        cat_n++;
    }
    CHECK(tc, cat_n > 3000 && cat_bad == 0, "categories: %d of %d differ from CPython", cat_bad, cat_n);
    int sp_n = 0, sp_bad = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "isspace")) {
        sp_n++;
        sp_bad += !unicode_is_py_space((uint32_t)c->valueint);
    }
    int total_py_space = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) total_py_space += unicode_is_py_space(cp);
    CHECK(tc, sp_n > 20 && sp_bad == 0 && total_py_space == sp_n, "isspace: %d missing, %d vs %d in all", sp_bad,
          total_py_space, sp_n);
    cJSON_Delete(root);
    /* White_Space (regex \s) differs from Python's isspace on U+001C..U+001F (hand-checked against PropList). */
    CHECK(tc, unicode_is_white_space(0x2009) && unicode_is_white_space(0xA0) && unicode_is_white_space(0x3000) &&
                  !unicode_is_white_space(0x1C) && unicode_is_py_space(0x1C) && !unicode_is_white_space(0x200B),
          "White_Space set");
    size_t pos = 0;
    CHECK(tc, utf8_first_invalid("ab\xC3\xA9\xE2\x82", 6) == 4, "truncated sequence offset");
    CHECK(tc, utf8_first_invalid("\xC0\xAF", 2) == 0, "overlong rejected");
    CHECK(tc, utf8_first_invalid("\xED\xA0\x80", 3) == 0, "surrogate rejected");
    CHECK(tc, utf8_decode("\xF0\x9F\x98\x80", 4, &pos) == 0x1F600 && pos == 4, "4-byte decode");
}

/* ---------------------------------------------------------------- expected_ids.json folders */

static int check_expected_file(TestCounts *tc, const Tokenizer *t, const char *path, int *n_cases) {
    KvErr err = {{0}};
    char *text = kv_read_file(path, NULL, &err);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(tc, root != NULL, "%s: unreadable (%s)", path, err.msg);
    int pass = 0, n = 0, rt_pass = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(c, "ids"), *id;
        int n_want = 0, want[4096];
        cJSON_ArrayForEach(id, ids) if (n_want < 4096) want[n_want++] = id->valueint;
        int ok = ids_match(t, s, strlen(s), want, n_want, NULL);
        CHECK(tc, ok, "%s case %d", path, n);
        pass += ok;
        if (byte_level(t)) {
            int rt = roundtrip_ok(t, s, strlen(s));
            CHECK(tc, rt, "%s case %d decodes back", path, n);
            rt_pass += rt;
        }
        n++;
    }
    printf("  %-44s %3d/%3d ids exact, %3d/%3d round trips\n", path + strlen(TOK_DIR) + 1, pass, n, rt_pass,
           byte_level(t) ? n : 0);
    cJSON_Delete(root);
    *n_cases += n;
    return pass;
}

/* Every expected_ids*.json in every folder of tests/data/tokenizers, against the folder's tokenizer. */
static void test_expected_ids(TestCounts *tc) {
    DIR *d = opendir(TOK_DIR);
    CHECK(tc, d != NULL, "cannot open %s", TOK_DIR);
    if (!d) return;
    int pass = 0, n = 0, files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char dir[512];
        if (e->d_name[0] == '.') continue;
        snprintf(dir, sizeof dir, "%s/%s", TOK_DIR, e->d_name);
        DIR *sub = is_dir(dir) ? opendir(dir) : NULL;
        if (!sub) continue;
        Tokenizer *t = NULL;
        struct dirent *f;
        while ((f = readdir(sub))) {
            size_t len = strlen(f->d_name);
            if (strncmp(f->d_name, "expected_ids", 12) != 0 || len < 5 || strcmp(f->d_name + len - 5, ".json") != 0)
                continue;
            if (!t) {
                KvErr err = {{0}};
                double t0 = now_s();
                int rc = tokenizer_load(&t, dir, &err);
                CHECK(tc, rc == 0, "load %s: %s", dir, err.msg);
                if (rc) break;
                printf("  %-44s loaded in %.2f s\n", e->d_name, now_s() - t0);
            }
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
            files++;
            pass += check_expected_file(tc, t, path, &n);
        }
        closedir(sub);
        tokenizer_free(t);
    }
    closedir(d);
    printf("expected_ids*.json: %d/%d cases exact in %d files\n", pass, n, files);
    CHECK(tc, files >= 7 && n >= 700, "expected llama3.1, qwen3, llama2-spm (x2), mistral-v3 (%d files, %d cases)", files, n);
}

/* llama2-spm/variants_hf.json: the Llama-2 vocabulary with Metaspace pre-tokenizers in place of its
 * normaliser, written to a temporary tokenizer.json per variant and checked against HF's ids. */
static void test_metaspace_variants(TestCounts *tc) {
    KvErr err = {{0}};
    char *base_text = kv_read_file(TOK_DIR "/llama2-spm/tokenizer.json", NULL, &err);
    char *var_text = kv_read_file(TOK_DIR "/llama2-spm/variants_hf.json", NULL, &err);
    cJSON *base = base_text ? cJSON_Parse(base_text) : NULL, *vars = var_text ? cJSON_Parse(var_text) : NULL;
    free(base_text);
    free(var_text);
    CHECK(tc, base && vars, "llama2-spm tokenizer.json / variants_hf.json: %s", err.msg);
    if (!base || !vars) {
        cJSON_Delete(base);
        cJSON_Delete(vars);
        return;
    }
    char dir[] = "/tmp/kvbench_tokvar_XXXXXX", path[256];
    int total = 0;
    CHECK(tc, mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(vars, "variants")) {
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(v, "replace"))
            cJSON_ReplaceItemInObject(base, r->string, cJSON_Duplicate(r, 1));
        char *json = cJSON_PrintUnformatted(base);
        write_file(path, json, strlen(json));
        free(json);
        Tokenizer *t = load_or_null(tc, path);
        if (!t) continue;
        int pass = 0, n = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(v, "cases")) {
            const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
            int want[4096], n_want = 0;
            const cJSON *id;
            cJSON_ArrayForEach(id, cJSON_GetObjectItem(c, "ids")) if (n_want < 4096) want[n_want++] = id->valueint;
            int ok = ids_match(t, s, strlen(s), want, n_want, NULL);
            CHECK(tc, ok, "%s case %d", cJSON_GetObjectItem(v, "name")->valuestring, n);
            pass += ok;
            n++;
        }
        printf("  llama2-spm %-32s %3d/%3d ids exact\n", cJSON_GetObjectItem(v, "name")->valuestring, pass, n);
        total += n;
        tokenizer_free(t);
    }
    CHECK(tc, total >= 360, "expected 3 Metaspace variants x 120 cases, read %d", total);
    unlink(path);
    rmdir(dir);
    cJSON_Delete(base);
    cJSON_Delete(vars);
}

/* ---------------------------------------------------------------- llama.cpp .inp/.out vectors */

/* The tokenizer for vectors NAME.gguf.inp: NAME.gguf itself, or the path vocab_sources.txt gives for it. */
static int vector_tokenizer_path(const char *gguf_name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", VECTORS_DIR, gguf_name);
    if (file_exists(out)) return 0;
    FILE *f = fopen(VECTORS_DIR "/vocab_sources.txt", "r");
    if (!f) return -1;
    char line[1024];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        char name[512], src[512];
        if (line[0] == '#' || sscanf(line, "%511s %511s", name, src) != 2) continue;
        if (strcmp(name, gguf_name) == 0) {
            snprintf(out, cap, "%s/%s", VECTORS_DIR, src);
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

static void check_vector_pair(TestCounts *tc, const char *inp_name, int *total_pass, int *total_n) {
    char gguf_name[512], path[1024], tok_path[1024];
    snprintf(gguf_name, sizeof gguf_name, "%.*s", (int)(strlen(inp_name) - 4), inp_name);
    int rc = vector_tokenizer_path(gguf_name, tok_path, sizeof tok_path);
    CHECK(tc, rc == 0, "no vocabulary for %s (add it to vocab_sources.txt)", inp_name);
    if (rc) return;
    KvErr err = {{0}};
    Tokenizer *t = NULL;
    rc = tokenizer_load(&t, tok_path, &err);
    CHECK(tc, rc == 0, "load %s: %s", tok_path, err.msg);
    if (rc) return;
    snprintf(path, sizeof path, "%s/%s", VECTORS_DIR, inp_name);
    size_t inp_len;
    char *inp = kv_read_file(path, &inp_len, &err);
    snprintf(path, sizeof path, "%s/%s.out", VECTORS_DIR, gguf_name);
    char *outs = kv_read_file(path, NULL, &err);
    CHECK(tc, inp && outs, "%s", err.msg);
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    int pass = 0, n = 0, rt_pass = 0, n_ids = 0;
    char *cur = inp, *line = outs;
    while (inp && outs && *line) {
        char *sep = strstr(cur, SEP);
        if (!sep) break;
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        int want[1024], n_want = 0, off = 0, k;
        while (n_want < 1024 && sscanf(line + off, "%d%n", &want[n_want], &k) == 1) {
            n_want++;
            off += k;
        }
        int got_n = 0;
        int ok = ids_match(t, cur, (size_t)(sep - cur), want, n_want, &got_n);
        CHECK(tc, ok, "%s test %d", inp_name, n);
        pass += ok;
        n_ids += got_n;
        if (byte_level(t)) {
            int rt = roundtrip_ok(t, cur, (size_t)(sep - cur));
            CHECK(tc, rt, "%s test %d decodes back", inp_name, n);
            rt_pass += rt;
        }
        n++;
        cur = sep + strlen(SEP);
        line = eol ? eol + 1 : line + strlen(line);
    }
    printf("  %-34s %2d/%2d ids exact (%d ids), %2d/%2d round trips\n", inp_name, pass, n, n_ids, rt_pass,
           byte_level(t) ? n : 0);
    CHECK(tc, n == 46, "%s: %d tests read, expected 46", inp_name, n);
    free(inp);
    free(outs);
    tokenizer_free(t);
    *total_pass += pass;
    *total_n += n;
}

static void test_llamacpp_vectors(TestCounts *tc) {
    DIR *d = opendir(VECTORS_DIR);
    CHECK(tc, d != NULL, "cannot open %s", VECTORS_DIR);
    if (!d) return;
    int pass = 0, n = 0, files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".inp") != 0) continue;
        files++;
        check_vector_pair(tc, e->d_name, &pass, &n);
    }
    closedir(d);
    printf("llama.cpp vectors: %d/%d cases exact in %d files\n", pass, n, files);
    CHECK(tc, files >= 5, "expected gpt-2, starcoder, llama-spm, llama-bpe, qwen2 vectors (%d files)", files);
}

/* ---------------------------------------------------------------- specifics */

static void test_specials_and_decode(TestCounts *tc) {
    Tokenizer *t = load_or_null(tc, TOK_DIR "/llama3.1");
    if (!t) return;
    CHECK(tc, tokenizer_vocab_size(t) == 128256, "llama3.1 vocab %d", tokenizer_vocab_size(t));
    CHECK(tc, tokenizer_bos_id(t) == 128000 && tokenizer_eos_id(t) == 128009, "bos %d eos %d", tokenizer_bos_id(t),
          tokenizer_eos_id(t));
    CHECK(tc, tokenizer_token_id(t, "<|eot_id|>") == 128009 && tokenizer_is_special(t, 128009) &&
                  !tokenizer_is_special(t, 9906),
          "special ids");
    const char *prompt = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>";
    int want[] = {128000, 128006, 882, 128007, 271, 9906, 128009};
    CHECK(tc, ids_match(t, prompt, strlen(prompt), want, 7, NULL), "chat prompt ids");
    /* parse_special = 0 leaves "<|eot_id|>" as text. */
    TokenIds ids = {0};
    KvErr err = {{0}};
    CHECK(tc, tokenizer_encode(t, "<|eot_id|>", 10, 0, &ids, &err) == 0 && ids.n > 1 && ids.ids[0] != 128009,
          "parse_special=0 must not produce the special id");
    ids_free(&ids);
    char *s = tokenizer_decode(t, want, 7, TOK_DECODE_SKIP_SPECIAL, &err);
    CHECK(tc, s && strcmp(s, "user\n\nHello") == 0, "skip_special decode: '%s'", s ? s : err.msg);
    free(s);
    int bad[] = {9906, 128256};
    s = tokenizer_decode(t, bad, 2, 0, &err);
    CHECK(tc, s == NULL && strstr(err.msg, "128256"), "out-of-range id must fail: %s", err.msg);
    free(s);
    int neg[] = {-1};
    CHECK(tc, tokenizer_decode(t, neg, 1, 0, &err) == NULL, "negative id must fail");
    /* A partial UTF-8 character decodes to U+FFFD, as Hugging Face's lossy decode does. */
    int half[] = {9468}; /* first byte(s) of an emoji in the expected ids */
    s = tokenizer_decode(t, half, 1, 0, &err);
    CHECK(tc, s && strstr(s, "\xEF\xBF\xBD"), "partial character gives U+FFFD");
    free(s);
    tokenizer_free(t);

    t = load_or_null(tc, TOK_DIR "/qwen3");
    if (t) {
        CHECK(tc, tokenizer_bos_id(t) == -1 && tokenizer_eos_id(t) == 151645, "qwen bos %d eos %d",
              tokenizer_bos_id(t), tokenizer_eos_id(t));
        /* NFC: a decomposed é must tokenize as the composed one. */
        TokenIds a = {0}, b = {0};
        CHECK(tc, tokenizer_encode(t, "caf\xC3\xA9", 5, 1, &a, &err) == 0 &&
                      tokenizer_encode(t, "cafe\xCC\x81", 6, 1, &b, &err) == 0 && a.n == b.n &&
                      memcmp(a.ids, b.ids, (size_t)a.n * sizeof(int)) == 0,
              "qwen NFC");
        ids_free(&a);
        ids_free(&b);
        tokenizer_free(t);
    }
    t = load_or_null(tc, TOK_DIR "/llama2-spm");
    if (t) {
        int hello[] = {1, 22557};
        s = tokenizer_decode(t, hello, 2, TOK_DECODE_SKIP_SPECIAL, &err);
        CHECK(tc, s && strcmp(s, "Hello") == 0, "spm decode: '%s'", s ? s : err.msg);
        free(s);
        CHECK(tc, tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2, "llama2 bos/eos");
        tokenizer_free(t);
    }
}

/* The SmolLM2 GGUF (make model) when present: ids from spec models.md §4.4. */
static void test_smollm2_gguf(TestCounts *tc) {
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!file_exists(path)) {
        printf("  (skipping SmolLM2 GGUF checks: %s not fetched)\n", path);
        return;
    }
    Tokenizer *t = load_or_null(tc, path);
    if (!t) return;
    struct { const char *text; int ids[20]; int n; } cases[] = {
        {"Hello, we can use", {19556, 28, 392, 416, 722}, 5},
        {"The capital of France is", {504, 3575, 282, 4649, 314}, 5},
        {"\n", {198}, 1},
        {"Hello world! 123", {19556, 905, 17, 216, 33, 34, 35}, 7},
        {"Caf\xC3\xA9 d\xC3\xA9j\xC3\xA0 vu.", {51, 1939, 2756, 32564, 90, 16739, 386, 101, 30}, 9},
        {"  multiple   spaces", {216, 2701, 256, 5600}, 4},
    };
    int pass = 0, n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int ok = ids_match(t, cases[i].text, strlen(cases[i].text), cases[i].ids, cases[i].n, NULL);
        CHECK(tc, ok, "SmolLM2 case %d", i);
        pass += ok;
    }
    printf("  SmolLM2 GGUF: %d/%d cases exact\n", pass, n);
    tokenizer_free(t);
}

/* ---------------------------------------------------------------- decode as transformers */

/* decode_cases.json (tests/reference/gen_decode_cases.py): per tokenizer the clean_up_tokenization_spaces that
 * transformers 4.57.0 settled on, and decode(ids, skip_special_tokens) byte for byte, with ("text") and without
 * ("raw") its clean-up. A tokenizer that is absent (SmolLM2 before make model) is skipped with a line. */
static void test_decode_cases(TestCounts *tc) {
    KvErr err = {{0}};
    char *json = kv_read_file(TOK_DIR "/decode_cases.json", NULL, &err);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    free(json);
    CHECK(tc, root != NULL, "decode_cases.json unreadable: %s", err.msg);
    int n = 0, pass = 0, cleaned = 0, tokenizers = 0;
    const cJSON *tk;
    cJSON_ArrayForEach(tk, cJSON_GetObjectItem(root, "tokenizers")) {
        const char *path = cJSON_GetObjectItem(tk, "path")->valuestring;
        if (!file_exists(path) && !is_dir(path)) {
            printf("  (skipping decode cases of %s: not fetched)\n", path);
            continue;
        }
        Tokenizer *t = load_or_null(tc, path);
        if (!t) continue;
        tokenizers++;
        int want_clean = cJSON_IsTrue(cJSON_GetObjectItem(tk, "clean_up")), tk_pass = 0, tk_n = 0;
        CHECK(tc, tokenizer_clean_up_spaces(t) == want_clean, "%s: clean_up %d, transformers %d", path,
              tokenizer_clean_up_spaces(t), want_clean);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(tk, "cases")) {
            int ids[4096], n_ids = 0;
            int skip = cJSON_GetObjectItem(c, "skip_special")->valueint ? TOK_DECODE_SKIP_SPECIAL : 0;
            const cJSON *id;
            cJSON_ArrayForEach(id, cJSON_GetObjectItem(c, "ids")) if (n_ids < 4096) ids[n_ids++] = id->valueint;
            const char *want[2] = {cJSON_GetObjectItem(c, "text")->valuestring,
                                   cJSON_GetObjectItem(c, "raw")->valuestring};
            int ok = 1;
            for (int raw = 0; raw < 2; raw++) {
                char *got = tokenizer_decode(t, ids, n_ids, skip | (raw ? TOK_DECODE_RAW : 0), &err);
                int same = got && strcmp(got, want[raw]) == 0;
                CHECK(tc, same, "%s case %d%s: got \"%s\", transformers \"%s\"", path, tk_n, raw ? " raw" : "",
                      got ? got : err.msg, want[raw]);
                ok &= same;
                free(got);
            }
            cleaned += strcmp(want[0], want[1]) != 0;
            tk_pass += ok;
            tk_n++;
        }
        printf("  %-52s clean_up %d: %3d/%3d decodes exact\n", path, want_clean, tk_pass, tk_n);
        pass += tk_pass;
        n += tk_n;
        tokenizer_free(t);
    }
    cJSON_Delete(root);
    printf("decode_cases.json: %d/%d decodes exact over %d tokenizers, %d changed by the clean-up\n", pass, n,
           tokenizers, cleaned);
    CHECK(tc, tokenizers >= 9 && cleaned >= 30, "too few cases ran: %d tokenizers, %d cleaned", tokenizers, cleaned);
}

/* ---------------------------------------------------------------- bad input */

static void expect_load_error(TestCounts *tc, const char *path, const char *needle) {
    Tokenizer *t = NULL;
    KvErr err = {{0}};
    int rc = tokenizer_load(&t, path, &err);
    CHECK(tc, rc == -1 && t == NULL && strstr(err.msg, needle) && strstr(err.msg, path),
          "loading %s should fail with '%s', got rc=%d '%s'", path, needle, rc, err.msg);
    if (rc == 0) tokenizer_free(t);
    else printf("  error as expected: %s\n", err.msg);
}

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void put_str(FILE *f, const char *s) {
    put_u64(f, strlen(s));
    fwrite(s, 1, strlen(s), f);
}

/* A vocab-only GGUF v3 (no tensors; little-endian host assumed, as everywhere in kvbench) with a two-token
 * byte-level vocabulary and the given tokenizer.ggml.model / .pre. */
static void write_tokenizer_gguf(const char *path, const char *model, const char *pre) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite("GGUF", 1, 4, f);
    put_u32(f, 3);
    put_u64(f, 0); /* tensors */
    put_u64(f, 4); /* key-value pairs */
    put_str(f, "tokenizer.ggml.model");
    put_u32(f, 8);
    put_str(f, model);
    put_str(f, "tokenizer.ggml.pre");
    put_u32(f, 8);
    put_str(f, pre);
    put_str(f, "tokenizer.ggml.tokens");
    put_u32(f, 9);
    put_u32(f, 8);
    put_u64(f, 2);
    put_str(f, "a");
    put_str(f, "b");
    put_str(f, "tokenizer.ggml.merges");
    put_u32(f, 9);
    put_u32(f, 8);
    put_u64(f, 0);
    fclose(f);
}

static void test_bad_input(TestCounts *tc) {
    char dir[] = "/tmp/kvbench_tok_XXXXXX";
    CHECK(tc, mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    KvErr err = {{0}};

    size_t len;
    char *full = kv_read_file(TOK_DIR "/llama2-spm/tokenizer.json", &len, &err);
    CHECK(tc, full != NULL, "%s", err.msg);
    snprintf(path, sizeof path, "%s/truncated.json", dir);
    if (full) write_file(path, full, len / 2);
    free(full);
    expect_load_error(tc, path, "not valid JSON");

    snprintf(path, sizeof path, "%s/novocab.json", dir);
    const char *novocab = "{\"model\": {\"type\": \"BPE\", \"merges\": []}, \"pre_tokenizer\": null}";
    write_file(path, novocab, strlen(novocab));
    expect_load_error(tc, path, "model.vocab");

    snprintf(path, sizeof path, "%s/whitespace.json", dir);
    const char *unknown_pre = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                              " \"pre_tokenizer\": {\"type\": \"Whitespace\"}}";
    write_file(path, unknown_pre, strlen(unknown_pre));
    expect_load_error(tc, path, "unsupported pre_tokenizer type 'Whitespace'");

    snprintf(path, sizeof path, "%s/regex.json", dir);
    const char *unknown_re = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                             " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","
                             " \"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
                             " {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}}";
    write_file(path, unknown_re, strlen(unknown_re));
    expect_load_error(tc, path, "unsupported pre_tokenizer Split regex");

    snprintf(path, sizeof path, "%s/wordpiece.json", dir);
    const char *wordpiece = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}";
    write_file(path, wordpiece, strlen(wordpiece));
    expect_load_error(tc, path, "unsupported model type 'WordPiece'");

    /* clean_up_tokenization_spaces must be a boolean (or null) */
    snprintf(path, sizeof path, "%s/cfg", dir);
    mkdir(path, 0755);
    char *fixture = kv_read_file("tests/data/hf_fixtures/llama/tokenizer.json", &len, &err);
    char file[300];
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    if (fixture) write_file(file, fixture, len);
    free(fixture);
    snprintf(file, sizeof file, "%s/tokenizer_config.json", path);
    const char *bad_clean = "{\"clean_up_tokenization_spaces\": \"yes\"}";
    write_file(file, bad_clean, strlen(bad_clean));
    expect_load_error(tc, path, "tokenizer_config.json: clean_up_tokenization_spaces must be true, false or null");

    snprintf(path, sizeof path, "%s/garbage.model", dir);
    write_file(path, "\xff\xff\xff", 3);
    expect_load_error(tc, path, "SentencePiece");

    snprintf(path, sizeof path, "%s/missing.json", dir);
    expect_load_error(tc, path, "no such file");
    expect_load_error(tc, dir, "neither tokenizer.json nor tokenizer.model");

    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    write_file(path, "GGUF\x03\x00\x00\x00", 8);
    Tokenizer *t = NULL;
    CHECK(tc, tokenizer_load(&t, path, &err) == -1 && t == NULL && strstr(err.msg, "bad.gguf"),
          "truncated GGUF: %s", err.msg);
    printf("  error as expected: %s\n", err.msg);

    snprintf(path, sizeof path, "%s/ok.gguf", dir);
    write_tokenizer_gguf(path, "gpt2", "gpt-2");
    t = load_or_null(tc, path);
    TokenIds two = {0};
    CHECK(tc, t && tokenizer_encode(t, "ab", 2, 1, &two, &err) == 0 && two.n == 2 && two.ids[0] == 0 &&
                  two.ids[1] == 1,
          "hand-written GGUF tokenizer");
    ids_free(&two);
    tokenizer_free(t);
    snprintf(path, sizeof path, "%s/pre.gguf", dir);
    write_tokenizer_gguf(path, "gpt2", "falcon");
    expect_load_error(tc, path, "unsupported pre-tokenizer tokenizer.ggml.pre = 'falcon'");
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    write_tokenizer_gguf(path, "bert", "default");
    expect_load_error(tc, path, "unsupported tokenizer.ggml.model 'bert'");

    /* Hand-derived: merges as [a, b] pairs, and an lstrip/rstrip added token that swallows the spaces
     * around it (Hugging Face AddedToken semantics). */
    snprintf(path, sizeof path, "%s/small.json", dir);
    const char *small = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xC4\xA0\": 3},"
                        " \"merges\": [[\"a\", \"b\"]]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},"
                        " \"added_tokens\": [{\"id\": 4, \"content\": \"<m>\", \"special\": true, \"lstrip\": true,"
                        " \"rstrip\": true}]}";
    write_file(path, small, strlen(small));
    t = load_or_null(tc, path);
    if (t) {
        int want[] = {2, 3, 2, 4, 0, 3, 1};
        CHECK(tc, ids_match(t, "ab ab  <m>  a b", 15, want, 7, NULL), "lstrip/rstrip and [a, b] merges");
        tokenizer_free(t);
    }

    /* Hand-derived: a piece "a▁" lets a merge cross the start of a '▁' run, so the SentencePiece word must
     * not be split there: "a b" -> "▁a▁b" -> ▁ + (a▁)b = [0, 4]; "b a" has nothing to merge. */
    snprintf(path, sizeof path, "%s/crossing.json", dir);
    const char *crossing = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"" SPM "\": 0, \"a\": 1, \"b\": 2,"
                           " \"a" SPM "\": 3, \"a" SPM "b\": 4}, \"merges\": [\"a " SPM "\", \"a" SPM " b\"]},"
                           " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\","
                           " \"prepend\": \"" SPM "\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
                           " \"content\": \"" SPM "\"}]}, \"pre_tokenizer\": null}";
    write_file(path, crossing, strlen(crossing));
    t = load_or_null(tc, path);
    if (t) {
        int want_ab[] = {0, 4}, want_ba[] = {0, 2, 0, 1};
        CHECK(tc, ids_match(t, "a b", 3, want_ab, 2, NULL) && ids_match(t, "b a", 3, want_ba, 4, NULL),
              "merge across a '\xE2\x96\x81' run");
        tokenizer_free(t);
    }

    const char *names[] = {"truncated.json", "novocab.json", "whitespace.json", "regex.json", "wordpiece.json",
                           "garbage.model", "bad.gguf", "ok.gguf", "pre.gguf", "model.gguf", "small.json",
                           "crossing.json", "cfg/tokenizer.json", "cfg/tokenizer_config.json", "cfg"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path)) rmdir(path);
    }
    rmdir(dir);

    t = load_or_null(tc, TOK_DIR "/llama3.1");
    if (!t) return;
    TokenIds ids = {0};
    int rc = tokenizer_encode(t, "ok text \xC3\x28 here", 15, 1, &ids, &err);
    CHECK(tc, rc == -1 && strstr(err.msg, "invalid UTF-8") && strstr(err.msg, "byte offset 8"),
          "invalid UTF-8: rc=%d '%s'", rc, err.msg);
    printf("  error as expected: %s\n", err.msg);
    ids_free(&ids);
    tokenizer_free(t);
}

/* ---------------------------------------------------------------- speed */

/* 1 MiB of mixed text (the test strings repeated): encode time per tokenizer, and the round trip. */
static void test_speed(TestCounts *tc) {
    KvErr err = {{0}};
    size_t len;
    char *inp = kv_read_file(VECTORS_DIR "/ggml-vocab-gpt-2.gguf.inp", &len, &err);
    CHECK(tc, inp != NULL, "%s", err.msg);
    if (!inp) return;
    size_t big_len = 1 << 20;
    char *big = malloc(big_len + 1);
    size_t n = 0;
    while (n + len <= big_len) {
        memcpy(big + n, inp, len);
        n += len;
    }
    big[n] = '\0';
    free(inp);
    const char *dirs[] = {TOK_DIR "/llama3.1", TOK_DIR "/qwen3", TOK_DIR "/llama2-spm",
                          VECTORS_DIR "/ggml-vocab-starcoder.gguf", VECTORS_DIR "/ggml-vocab-llama-spm.gguf"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        Tokenizer *t = load_or_null(tc, dirs[i]);
        if (!t) continue;
        TokenIds ids = {0};
        double t0 = now_s();
        int rc = tokenizer_encode(t, big, n, 1, &ids, &err);
        double dt = now_s() - t0;
        CHECK(tc, rc == 0, "%s", err.msg);
        char *back = rc ? NULL : tokenizer_decode(t, ids.ids, ids.n, TOK_DECODE_RAW, &err);
        CHECK(tc, back && (!byte_level(t) || (strlen(back) == n && memcmp(back, big, n) == 0)),
              "1 MiB round trip for %s", dirs[i]);
        printf("  encode %.2f MiB with %-44s %7d ids in %.3f s\n", (double)n / (1 << 20), dirs[i] + strlen(TOK_DIR) + 1,
               ids.n, dt);
        free(back);
        ids_free(&ids);
        tokenizer_free(t);
    }
    free(big);
}

int main(void) {
    TestCounts tc = {"test_tokenizer", 0, 0, 0};
    test_unicode(&tc);
    test_expected_ids(&tc);
    test_metaspace_variants(&tc);
    test_llamacpp_vectors(&tc);
    test_specials_and_decode(&tc);
    test_smollm2_gguf(&tc);
    test_decode_cases(&tc);
    test_bad_input(&tc);
    test_speed(&tc);
    return test_finish(&tc);
}
