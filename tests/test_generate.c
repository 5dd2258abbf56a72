/* test_generate.c — the stop rules of greedy decoding (engine/generate.h) on a tiny synthetic model, what
 * decoding the kept stop token gives with SmolLM2's tokenizer, and groups decoded jointly (decode across samples)
 * against each sequence decoded alone.
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

/* A cache holding n_context tokens of its own (a sample's context: the groups' caches differ in length). */
static int context_cache(Backend *be, const int *context, int n_context, int capacity, KvCache **out, KvErr *err) {
    if (be->cache_new(be, out, capacity, err)) return -1;
    if (n_context > 0 && be->forward(be, out, 1, context, n_context, NULL, NULL, NULL, err)) {
        be->cache_free(be, *out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* Four groups decoded jointly (different contexts, prompts, max_new, stop sets and rules, one group with max_new
 * 0) give every sequence the tokens it gets decoded alone, bit for bit: the CPU backend's batched forward is
 * row-invariant, which is what lets runs/sweep.c decode several samples at once with the same rows. */
static void test_groups(TestCounts *tc) {
    enum { N_GROUPS = 4, MAX_SEQS = 3, CAP = 64 };
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    if (model_load(&m, "synthetic:smollm2-135m:layers=2:vocab=512", &err) || backend_open(&be, "cpu", m, NULL, &err)) {
        CHECK(tc, 0, "%s", err.msg);
        model_free(m);
        return;
    }
    int context[20], prompts[N_GROUPS][9];
    for (int i = 0; i < 20; i++) context[i] = (i * 37 + 11) % 512;
    for (int g = 0; g < N_GROUPS; g++)
        for (int i = 0; i < 9; i++) prompts[g][i] = (g * 101 + i * 53 + 7) % 512;
    const int n_seqs[N_GROUPS] = {3, 2, 1, 2}, n_prompt[N_GROUPS] = {5, 9, 3, 4}, max_new[N_GROUPS] = {8, 5, 0, 6};
    /* sequence b of group g starts from the first context_len[g][b] context tokens */
    const int context_len[N_GROUPS][MAX_SEQS] = {{0, 7, 12}, {20, 3}, {5}, {12, 0}};
    const int stop_a = 17, stop_b = 300; /* likely in no free run; a stop that fires is checked by test_stop_rules */
    GenerateOptions opts[N_GROUPS] = {
        {.max_new = max_new[0]},
        {.max_new = max_new[1], .stop_ids = &stop_a, .n_stop = 1},
        {.max_new = max_new[2]},
        {.max_new = max_new[3], .stop_ids = &stop_b, .n_stop = 1, .stop_rule = GEN_STOP_ANY_TOKEN},
    };
    KvCache *caches[N_GROUPS][MAX_SEQS] = {{0}};
    TokenIds outs[N_GROUPS][MAX_SEQS] = {{{0}}};
    GenerateGroup groups[N_GROUPS];
    int rc = 0;
    for (int g = 0; g < N_GROUPS && !rc; g++) {
        for (int b = 0; b < n_seqs[g] && !rc; b++)
            rc = context_cache(be, context, context_len[g][b], CAP, &caches[g][b], &err);
        groups[g] = (GenerateGroup){.caches = caches[g], .n_seqs = n_seqs[g], .prompt = prompts[g],
                                    .n_prompt = n_prompt[g], .opt = opts[g], .out = outs[g]};
    }
    if (!rc) rc = generate_greedy_groups(be, groups, N_GROUPS, &err);
    CHECK(tc, rc == 0, "joint decode: %s", err.msg);
    long tokens = 0;
    for (int g = 0; g < N_GROUPS && !rc; g++)
        for (int b = 0; b < n_seqs[g]; b++) {
            KvCache *alone = NULL;
            TokenIds out = {0};
            GenerateStats st;
            int ok = !context_cache(be, context, context_len[g][b], CAP, &alone, &err) &&
                     !generate_greedy(be, &alone, 1, prompts[g], n_prompt[g], &opts[g], &out, &st, &err);
            CHECK(tc, ok, "alone: %s", err.msg);
            CHECK(tc, ok && out.n == outs[g][b].n &&
                          (out.n == 0 || !memcmp(out.ids, outs[g][b].ids, sizeof(int) * (size_t)out.n)),
                  "group %d, sequence %d: %d tokens jointly, %d alone, the same ids", g, b, outs[g][b].n, out.n);
            CHECK(tc, max_new[g] > 0 ? outs[g][b].n > 0 : outs[g][b].n == 0, "group %d: max_new %d gives %d tokens", g,
                  max_new[g], outs[g][b].n);
            tokens += out.n;
            ids_free(&out);
            if (alone) be->cache_free(be, alone);
        }
    long counted = 0;
    for (int g = 0; g < N_GROUPS; g++) counted += groups[g].stats.decode_tokens;
    CHECK(tc, rc || counted == tokens, "the groups' decode_tokens add up to their tokens: %ld, %ld", counted, tokens);
    /* a group without sequences is refused before any forward, naming the sizes */
    GenerateGroup empty = {.caches = caches[0], .n_seqs = 0, .prompt = prompts[0], .n_prompt = 5, .opt = opts[0],
                           .out = outs[0]};
    CHECK(tc, generate_greedy_groups(be, &empty, 1, &err) == -1 && strstr(err.msg, "at least one sequence"), "%s",
          err.msg);
    for (int g = 0; g < N_GROUPS; g++)
        for (int b = 0; b < n_seqs[g]; b++) {
            ids_free(&outs[g][b]);
            if (caches[g][b]) be->cache_free(be, caches[g][b]);
        }
    backend_close(be);
    model_free(m);
}

int main(void) {
    TestCounts tc = {"test_generate", 0, 0, 0};
    test_stop_rules(&tc);
    test_decoded_stop(&tc);
    test_groups(&tc);
    return test_finish(&tc);
}
