/* test_chat.c — chat renderings and the context | question split against references.
 *
 *   - "Hello" rendered by each family equals the exact strings of spec models.md §3.5 (written out below);
 *   - tests/data/chat_cases.json (tests/reference/gen_chat_cases.py: jinja2 + the reference pipeline's
 *     Python split + Hugging Face tokenizers) gives, per family and case, the context text, the question
 *     text, the full rendering of context + question, whether the two parts add up to it (+ answer prefix),
 *     the ids of each part for Llama-3.1 and Qwen2.5, or that the reference split raises;
 *   - "none", bad names and invalid UTF-8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../engine/chat.h"
#include "../engine/jsonfile.h"
#include "../engine/tokenizer.h"
#include "test.h"

static const struct {
    const char *name;
    const char *hello;
} SPEC_RENDERS[] = {
    {"llama3", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
               "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"mistral", "<s>[INST] Hello[/INST]"},
    {"qwen2", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"},
    {"smollm2", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"},
    {"none", "Hello"},
};

static const char *str_item(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_renders(TestCounts *tc, const cJSON *renders) {
    for (size_t i = 0; i < sizeof SPEC_RENDERS / sizeof SPEC_RENDERS[0]; i++) {
        KvErr err = {{0}};
        ChatFormat f;
        int rc = chat_format_parse(SPEC_RENDERS[i].name, &f, &err);
        CHECK(tc, rc == 0 && strcmp(chat_format_name(f), SPEC_RENDERS[i].name) == 0, "parse %s: %s",
              SPEC_RENDERS[i].name, err.msg);
        if (rc) continue;
        char *s = chat_render(f, "Hello", &err);
        CHECK(tc, s && strcmp(s, SPEC_RENDERS[i].hello) == 0, "%s render: '%s'", SPEC_RENDERS[i].name, s ? s : err.msg);
        const char *ref = str_item(renders, SPEC_RENDERS[i].name);
        if (ref) CHECK(tc, s && strcmp(s, ref) == 0, "%s render differs from the jinja2 reference", SPEC_RENDERS[i].name);
        free(s);
    }
    KvErr err = {{0}};
    ChatFormat f;
    CHECK(tc, chat_format_parse("chatml", &f, &err) == -1 && strstr(err.msg, "chatml"), "unknown name: %s", err.msg);
    CHECK(tc, chat_render(CHAT_LLAMA3, "bad \xFF byte", &err) == NULL && strstr(err.msg, "byte offset 4"),
          "invalid UTF-8 in render: %s", err.msg);
    /* Llama-3.1 trims the message as Python's str.strip does (Unicode spaces included). */
    char *s = chat_render(CHAT_LLAMA3, "\xC2\xA0 \n Hi \xE3\x80\x80\t", &err);
    CHECK(tc, s && strstr(s, "\n\nHi<|eot_id|>"), "llama3 trim: %s", s ? s : err.msg);
    free(s);
}

static int ids_equal(const TokenIds *got, const cJSON *want) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, want) {
        if (n >= got->n || got->ids[n] != v->valueint) return 0;
        n++;
    }
    return n == got->n;
}

static void check_part_ids(TestCounts *tc, const Tokenizer *t, const char *text, const cJSON *want,
                           const char *label) {
    TokenIds ids = {0};
    KvErr err = {{0}};
    int rc = tokenizer_encode(t, text, strlen(text), 1, &ids, &err);
    CHECK(tc, rc == 0 && ids_equal(&ids, want), "%s ids differ (%s)", label, err.msg);
    ids_free(&ids);
}

static void test_splits(TestCounts *tc, const cJSON *splits) {
    KvErr err = {{0}};
    Tokenizer *llama = NULL, *qwen = NULL;
    CHECK(tc, tokenizer_load(&llama, "tests/data/tokenizers/llama3.1", &err) == 0, "%s", err.msg);
    CHECK(tc, tokenizer_load(&qwen, "tests/data/tokenizers/qwen3", &err) == 0, "%s", err.msg);
    int n = 0, pass = 0, n_ids = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, splits) {
        const char *fam = str_item(c, "family"), *context = str_item(c, "context");
        const char *question = str_item(c, "question"), *prefix = str_item(c, "answer_prefix");
        ChatFormat f;
        if (chat_format_parse(fam, &f, &err)) {
            CHECK(tc, 0, "%s", err.msg);
            continue;
        }
        ChatSplit sp;
        int rc = chat_split(f, "", context, question, prefix, &sp, &err);
        n++;
        if (cJSON_IsTrue(cJSON_GetObjectItem(c, "error"))) {
            CHECK(tc, rc == -1 && strstr(err.msg, "chat_split"), "%s: split of '%s' must fail like the reference",
                  fam, context);
            pass += rc == -1;
            if (rc == 0) chat_split_free(&sp);
            else printf("  error as expected (%s, context \"%s\"): %s\n", fam, context, err.msg);
            continue;
        }
        CHECK(tc, rc == 0, "%s split: %s", fam, err.msg);
        if (rc) continue;
        int ok = strcmp(sp.context_text, str_item(c, "context_text")) == 0 &&
                 strcmp(sp.question_text, str_item(c, "question_text")) == 0;
        CHECK(tc, ok, "%s split of '%s': got '%s' | '%s'", fam, context, sp.context_text, sp.question_text);
        pass += ok;
        size_t mlen = strlen(context) + strlen(question);
        char *msg = malloc(mlen + 1);
        snprintf(msg, mlen + 1, "%s%s", context, question);
        char *full = chat_render(f, msg, &err);
        CHECK(tc, full && strcmp(full, str_item(c, "full")) == 0, "%s render of context + question", fam);
        if (full) {
            size_t a = strlen(sp.context_text), b = strlen(sp.question_text), fl = strlen(full), pl = strlen(prefix);
            int parts_equal = a + b == fl + pl && memcmp(sp.context_text, full, a) == 0 &&
                              memcmp(sp.question_text, full + a, fl - a) == 0 &&
                              memcmp(sp.question_text + (fl - a), prefix, pl) == 0;
            CHECK(tc, parts_equal == cJSON_IsTrue(cJSON_GetObjectItem(c, "parts_equal_full_plus_prefix")),
                  "%s: context_text + question_text vs render(context + question) + answer_prefix", fam);
        }
        const cJSON *cids = cJSON_GetObjectItem(c, "context_ids"), *qids = cJSON_GetObjectItem(c, "question_ids");
        const Tokenizer *t = f == CHAT_LLAMA3 ? llama : f == CHAT_QWEN2 ? qwen : NULL;
        if (t && cids && qids) {
            check_part_ids(tc, t, sp.context_text, cids, "context");
            check_part_ids(tc, t, sp.question_text, qids, "question");
            n_ids++;
        }
        free(msg);
        free(full);
        chat_split_free(&sp);
    }
    printf("chat splits: %d/%d cases as the reference (%d with both parts' ids checked)\n", pass, n, n_ids);
    CHECK(tc, n >= 32 && n_ids >= 12, "expected 8 cases x 4 families, ids for llama3 and qwen2");
    tokenizer_free(llama);
    tokenizer_free(qwen);
}

static void test_none_and_bad(TestCounts *tc) {
    KvErr err = {{0}};
    ChatSplit sp;
    int rc = chat_split(CHAT_NONE, "<s>", "Context text.", "Question?", "Answer:", &sp, &err);
    CHECK(tc, rc == 0 && strcmp(sp.context_text, "<s>Context text.") == 0 &&
                  strcmp(sp.question_text, "Question?Answer:") == 0,
          "none split");
    if (rc == 0) chat_split_free(&sp);
    rc = chat_split(CHAT_NONE, NULL, "C", "Q", NULL, &sp, &err);
    CHECK(tc, rc == 0 && strcmp(sp.context_text, "C") == 0 && strcmp(sp.question_text, "Q") == 0,
          "none split without bos or prefix");
    if (rc == 0) chat_split_free(&sp);
    rc = chat_split(CHAT_QWEN2, "", "bad \xC3", "Q", "", &sp, &err);
    CHECK(tc, rc == -1 && strstr(err.msg, "invalid UTF-8") && strstr(err.msg, "offset 4"), "invalid context: %s",
          err.msg);
    CHECK(tc, chat_split((ChatFormat)99, "", "C", "Q", "", &sp, &err) == -1, "unknown format must fail");
}

int main(void) {
    TestCounts tc = {"test_chat", 0, 0, 0};
    KvErr err = {{0}};
    cJSON *root = kv_read_json(TEST_DATA("chat_cases.json"), &err);
    CHECK(&tc, root != NULL, "%s", err.msg);
    test_renders(&tc, cJSON_GetObjectItem(root, "renders"));
    if (root) test_splits(&tc, cJSON_GetObjectItem(root, "splits"));
    test_none_and_bad(&tc);
    cJSON_Delete(root);
    return test_finish(&tc);
}
