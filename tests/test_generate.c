/* test_generate.c — the stop rules of greedy decoding (engine/generate.h) on a tiny synthetic model, and what
 * decoding the kept stop token gives with SmolLM2's tokenizer.
 *
 * The reference (kvpress pipeline.py generate_answer) takes the first token from the question's last logit and
 * never tests it; each later token is appended and then tested, so a stop token ends the answer and is part of
 * it; `decode(skip_special_tokens=True)` then drops an end-of-turn but keeps "\n". The test first decodes with
 * no stop token, then derives by that rule (and by the opt-in any-token rule) what each stop set must give,
 * including a stop set holding the first token itself. */
#include <string.h>

#include "../engine/backend.h"
#include "../engine/generate.h"
#include "../engine/model.h"
#include "../engine/tokenizer.h"
#include "test.h"

enum { MAX_NEW = 8, N_PROMPT = 5 };

/* What a rule must output for the free-running sequence seq[0..n) and one stop id. */
static int expected(const int *seq, int n, int stop, GenerateStopRule rule, int *out) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int is_stop = seq[i] == stop;
        if (rule == GEN_STOP_ANY_TOKEN && is_stop) break;
        out[k++] = seq[i];
        if (rule == GEN_STOP_REFERENCE && is_stop && i > 0) break;
    }
    return k;
}

static int decode(TestCounts *tc, Backend *be, int n_seqs, const int *prompt, const GenerateOptions *opt,
                  TokenIds *out) {
    KvErr err;
    KvCache *caches[2] = {0};
    int rc = 0;
    for (int b = 0; b < n_seqs && !rc; b++) rc = be->cache_new(be, &caches[b], N_PROMPT + MAX_NEW, &err);
    if (!rc) rc = generate_greedy(be, caches, n_seqs, prompt, N_PROMPT, opt, out, NULL, &err);
    CHECK(tc, rc == 0, "%s", err.msg);
    for (int b = 0; b < n_seqs; b++)
        if (caches[b]) be->cache_free(be, caches[b]);
    return rc;
}

static void test_stop_rules(TestCounts *tc) {
    KvErr err;
    Model *m = NULL;
    Backend *be = NULL;
    if (model_load(&m, "synthetic:smollm2-135m:layers=1:vocab=512", &err) || backend_open(&be, "cpu", m, NULL, &err)) {
        CHECK(tc, 0, "%s", err.msg);
        model_free(m);
        return;
    }
    const int prompt[N_PROMPT] = {11, 42, 7, 300, 5};
    TokenIds free_run[2];
    GenerateOptions opt = {.max_new = MAX_NEW};
    if (decode(tc, be, 1, prompt, &opt, free_run)) goto done;
    CHECK(tc, free_run[0].n == MAX_NEW, "no stop: %d tokens", free_run[0].n);
    const int *seq = free_run[0].ids;
    /* stop on the first token, on the third, and on one never generated */
    int stops[3] = {seq[0], seq[2], -1};
    for (int v = 0; v < 512 && stops[2] < 0; v++) {
        int used = 0;
        for (int i = 0; i < MAX_NEW; i++) used |= seq[i] == v;
        if (!used) stops[2] = v;
    }
    for (int s = 0; s < 3; s++)
        for (int r = 0; r < 2; r++) {
            GenerateStopRule rule = r ? GEN_STOP_ANY_TOKEN : GEN_STOP_REFERENCE;
            GenerateOptions o = {.max_new = MAX_NEW, .stop_ids = &stops[s], .n_stop = 1, .stop_rule = rule};
            TokenIds out[2];
            int want[MAX_NEW], n_want = expected(seq, MAX_NEW, stops[s], rule, want);
            if (decode(tc, be, 2, prompt, &o, out)) continue;
            for (int b = 0; b < 2; b++) {
                CHECK(tc, out[b].n == n_want && (n_want == 0 || !memcmp(out[b].ids, want, sizeof(int) * (size_t)n_want)),
                      "stop %d, rule %d, seq %d: %d tokens, want %d", s, r, b, out[b].n, n_want);
                ids_free(&out[b]);
            }
            /* the rules' difference, stated directly: a first token in the stop set */
            if (s == 0 && rule == GEN_STOP_REFERENCE) CHECK(tc, n_want >= 2 && want[0] == seq[0], "first kept");
            if (s == 0 && rule == GEN_STOP_ANY_TOKEN) CHECK(tc, n_want == 0, "first stops");
            if (s == 2) CHECK(tc, n_want == MAX_NEW, "unused stop id changes nothing");
        }
    /* max_new 1: the one token is never tested under the reference rule */
    GenerateOptions one = {.max_new = 1, .stop_ids = &stops[0], .n_stop = 1};
    TokenIds out1[1];
    if (!decode(tc, be, 1, prompt, &one, out1)) {
        CHECK(tc, out1[0].n == 1 && out1[0].ids[0] == seq[0], "max_new 1: %d", out1[0].n);
        ids_free(&out1[0]);
    }
    ids_free(&free_run[0]);
done:
    backend_close(be);
    model_free(m);
}

/* Decoding the output with skip_special: an end-of-turn stop token disappears, a "\n" stop token stays. */
static void test_decoded_stop(TestCounts *tc) {
    KvErr err;
    Tokenizer *t = NULL;
    if (tokenizer_load(&t, "models/SmolLM2-135M-Instruct.Q4_1.gguf", &err)) {
        CHECK(tc, 0, "%s", err.msg);
        return;
    }
    TokenIds ids = {0};
    CHECK(tc, tokenizer_encode(t, "Dogs\n", 5, 0, &ids, &err) == 0, "%s", err.msg);
    int eos = tokenizer_eos_id(t);
    CHECK(tc, eos >= 0 && ids_push(&ids, eos, &err) == 0, "eos");
    char *text = tokenizer_decode(t, ids.ids, ids.n, TOK_DECODE_SKIP_SPECIAL, &err);
    CHECK(tc, text && !strcmp(text, "Dogs\n"), "decoded '%s'", text ? text : err.msg);
    free(text);
    ids_free(&ids);
    tokenizer_free(t);
}

int main(void) {
    TestCounts tc = {"test_generate", 0, 0, 0};
    test_stop_rules(&tc);
    test_decoded_stop(&tc);
    return test_finish(&tc);
}
