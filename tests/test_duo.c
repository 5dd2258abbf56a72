/* test_duo.c — DuoAttention (policies/duo.h): Python's rounding of the streaming-head count, keep-sets and
 * effective kept fractions on a hand-made 2-layer x 3-head pattern (derived in the comments), the policy life
 * cycle (names, budgets, a missing or mis-shaped pattern), the shipped patterns' parsing and their streaming
 * heads against numpy (tests/reference/gen_duo_cases.py -> tests/data/duo/streaming_heads.json), the lookup of
 * a shipped pattern by model name or path, and bad pattern folders (one clear error each). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/jsonfile.h"
#include "../policies/policy.h"
#include "test.h"

static char tmp_root[64];

/* Writes a pattern folder NAME under the temporary root with the given TSV and config.json texts (NULL: left
 * out); returns its path. */
static const char *write_pattern(const char *name, const char *tsv, const char *config) {
    static char dir[8][160];
    static int k;
    char *d = dir[k++ % 8], path[256];
    snprintf(d, sizeof dir[0], "%s/%s", tmp_root, name);
    mkdir(d, 0755);
    const char *texts[2] = {tsv, config}, *files[2] = {"full_attention_heads.tsv", "config.json"};
    for (int i = 0; i < 2; i++) {
        if (!texts[i]) continue;
        snprintf(path, sizeof path, "%s/%s", d, files[i]);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(texts[i], f);
            fclose(f);
        }
    }
    return d;
}

static void test_rounding(TestCounts *tc) {
    /* 256 heads (Llama / Mistral: 32 layers x 8 kv-heads) at the paper's four budgets */
    CHECK(tc, duo_streaming_count(256, 0.8) == 205, "204.8 -> 205");
    CHECK(tc, duo_streaming_count(256, 1 - 0.4) == 154, "153.6 -> 154");
    CHECK(tc, duo_streaming_count(256, 1 - 0.6) == 102, "102.4 -> 102");
    CHECK(tc, duo_streaming_count(256, 1 - 0.8) == 51, "51.2 -> 51");
    /* Python's round: exact halves go to the even neighbour */
    CHECK(tc, duo_streaming_count(8, 0.3125) == 2, "2.5 -> 2");
    CHECK(tc, duo_streaming_count(8, 0.4375) == 4, "3.5 -> 4");
    CHECK(tc, duo_streaming_count(4, 0.125) == 0, "0.5 -> 0");
    CHECK(tc, duo_streaming_count(4, 0.375) == 2, "1.5 -> 2");
    CHECK(tc, duo_streaming_count(6, 0) == 0 && duo_streaming_count(6, 1) == 6, "ends");
}

/* The hand pattern: 2 layers x 3 kv-heads, sink 2, recent 3.
 *   layer 0: 0.5  -0.2  0.9      clipped: 0.5  0    0.9     flat index 0 1 2
 *   layer 1: 0.5   1.7  0.1               0.5  1    0.1                3 4 5
 * Ascending with ties to the lower index: 1 (0), 5 (0.1), 0 (0.5), 3 (0.5), 2 (0.9), 4 (1). */
static const char *HAND_TSV = "0.5\t-0.2\t0.9\n0.5\t1.7\t0.1\n";
static const char *HAND_CONFIG = "{\"sink_size\": 2, \"recent_size\": 3, \"lr\": 0.02}";

static int segment_is(const KeepSet *ks, int s, const int *want, int n) {
    if (ks->counts[s] != n) return 0;
    for (int t = 0; t < n; t++)
        if (ks->positions[ks->offsets[s] + t] != want[t]) return 0;
    return 1;
}

static void test_hand_pattern(TestCounts *tc) {
    KvErr err;
    DuoPattern p;
    const char *dir = write_pattern("hand", HAND_TSV, HAND_CONFIG);
    if (duo_pattern_load(&p, dir, &err)) {
        CHECK(tc, 0, "%s", err.msg);
        return;
    }
    CHECK(tc, p.n_layers == 2 && p.n_kv_heads == 3 && p.sink_size == 2 && p.recent_size == 3, "shape %dx%d %d/%d",
          p.n_layers, p.n_kv_heads, p.sink_size, p.recent_size);
    CHECK(tc, p.score[1] == 0 && p.score[4] == 1 && p.score[5] == 0.1, "clipped to [0, 1]");

    /* ratio 0.5: round(3.0) = 3 streaming heads, 1, 5 and 0 (0 beats 3 on the 0.5 tie) */
    unsigned char streaming[6];
    CHECK(tc, duo_streaming_heads(&p, 0.5, streaming, &err) == 0, "%s", err.msg);
    const unsigned char want_half[6] = {1, 1, 0, 0, 0, 1};
    CHECK(tc, !memcmp(streaming, want_half, 6), "streaming at 0.5");
    /* ratio 0.8: round(4.8) = 5, everything but head 4 */
    CHECK(tc, duo_streaming_heads(&p, 0.8, streaming, &err) == 0, "%s", err.msg);
    const unsigned char want_08[6] = {1, 1, 1, 1, 0, 1};
    CHECK(tc, !memcmp(streaming, want_08, 6), "streaming at 0.8");

    /* L = 10, ratio 0.5: a streaming head keeps sink [0, 2) and recent [7, 10); the others all 10.
     * kept = (3*5 + 3*10) / 60 = 0.75 = 1 - 0.5 * (1 - 5/10), the reference's formula. */
    KeepSet ks;
    CHECK(tc, duo_keepset(&p, 2, 3, 10, 0.5, &ks, &err) == 0, "%s", err.msg);
    const int sr[5] = {0, 1, 7, 8, 9}, all[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(tc, segment_is(&ks, 0, sr, 5) && segment_is(&ks, 1, sr, 5) && segment_is(&ks, 5, sr, 5), "streaming");
    CHECK(tc, segment_is(&ks, 2, all, 10) && segment_is(&ks, 3, all, 10) && segment_is(&ks, 4, all, 10), "full");
    CHECK(tc, ks.total == 45 && test_close(ks.total / 60.0, 1 - 0.5 * (1 - 5.0 / 10), 1e-12, 1), "kept %d", ks.total);
    keepset_free(&ks);

    /* L = 6: the reference masks sink..L-recent-1 = position 2 only */
    CHECK(tc, duo_keepset(&p, 2, 3, 6, 0.5, &ks, &err) == 0, "%s", err.msg);
    const int six[5] = {0, 1, 3, 4, 5};
    CHECK(tc, segment_is(&ks, 0, six, 5) && ks.total == 3 * 5 + 3 * 6, "L=6 total %d", ks.total);
    keepset_free(&ks);
    /* L = 5 = sink + recent and L = 4: nothing to mask, every head keeps all */
    for (int L = 4; L <= 5; L++) {
        CHECK(tc, duo_keepset(&p, 2, 3, L, 0.5, &ks, &err) == 0, "%s", err.msg);
        CHECK(tc, ks.total == 6 * L, "L=%d keeps everything (%d)", L, ks.total);
        keepset_free(&ks);
    }
    /* ratio 0: no streaming head; ratio 1: all six stream */
    CHECK(tc, duo_keepset(&p, 2, 3, 10, 0, &ks, &err) == 0 && ks.total == 60, "ratio 0");
    keepset_free(&ks);
    CHECK(tc, duo_keepset(&p, 2, 3, 10, 1, &ks, &err) == 0 && ks.total == 30, "ratio 1");
    keepset_free(&ks);
    CHECK(tc, duo_keepset(&p, 3, 2, 10, 0.5, &ks, &err) != 0 && strstr(err.msg, "2 layers x 3 kv-heads"), "shape: %s",
          err.msg);
    duo_pattern_free(&p);
}

/* Through the policy API: names, budgets (20% = compression ratio 0.8), the pattern requirement. */
static void test_policy(TestCounts *tc) {
    KvErr err;
    DuoPattern p;
    PolicyConfig cfg;
    PolicyState *st;
    Budget b;
    if (duo_pattern_load(&p, write_pattern("hand", HAND_TSV, HAND_CONFIG), &err)) {
        CHECK(tc, 0, "%s", err.msg);
        return;
    }
    CHECK(tc, policy_config(&cfg, "duo_attention", NULL, &err) == 0 && !strcmp(cfg.name, "duoattention"), "alias");
    CHECK(tc, policy_needs_duo_pattern(&cfg) && !policy_needs_attention(&cfg) && !policy_needs_value_norm(&cfg),
          "needs a pattern, not the observation");
    CHECK(tc, policy_config(&cfg, "duoattention", "max", &err) != 0, "takes no aggregation");
    policy_config(&cfg, "duoattention", NULL, &err);
    CHECK(tc, policy_begin(&st, &cfg, 2, 3, 10, &err) != 0 && strstr(err.msg, "duo_attention_patterns"),
          "no pattern: %s", err.msg);
    cfg.duo_pattern = &p;
    CHECK(tc, policy_begin(&st, &cfg, 4, 3, 10, &err) != 0 && strstr(err.msg, "4 x 3"), "mis-shaped: %s", err.msg);
    if (policy_begin(&st, &cfg, 2, 3, 10, &err)) {
        CHECK(tc, 0, "%s", err.msg);
        duo_pattern_free(&p);
        return;
    }
    KeepSet ks;
    /* 20%: ratio 0.8, 5 streaming heads keep 5 each, head 4 keeps 10: 35 of 60 */
    budget_parse("20%", &b, &err);
    CHECK(tc, policy_select(st, &b, &ks, &err) == 0 && ks.total == 35 && ks.counts[4] == 10, "20%%: %d", ks.total);
    keepset_free(&ks);
    /* 50%: the hand case above, 45 of 60 */
    budget_parse("0.5", &b, &err);
    CHECK(tc, policy_select(st, &b, &ks, &err) == 0 && ks.total == 45, "50%%: %d", ks.total);
    keepset_free(&ks);
    budget_parse("1", &b, &err);
    CHECK(tc, policy_select(st, &b, &ks, &err) == 0 && ks.total == 60, "100%% keeps all");
    keepset_free(&ks);
    policy_end(st);
    duo_pattern_free(&p);
}

static void test_shipped(TestCounts *tc) {
    KvErr err;
    char dir[1100];
    CHECK(tc, duo_pattern_find(DUO_PATTERNS_SHIPPED, "Meta-Llama-3.1-8B-Instruct", "/models/x", dir, sizeof dir, &err) == 1 &&
                  strstr(dir, "/Meta-Llama-3.1-8B-Instruct"),
          "by name: %s", dir);
    CHECK(tc, duo_pattern_find(DUO_PATTERNS_SHIPPED, "m", "/w/mistral-7b-instruct-v0.3.Q4_0.gguf", dir, sizeof dir, &err) == 1 &&
                  strstr(dir, "/Mistral-7B-Instruct-v0.3"),
          "by path, any case: %s", dir);
    CHECK(tc, duo_pattern_find(DUO_PATTERNS_SHIPPED, "Qwen2.5-32B-Instruct", "/m/Qwen2.5-32B-Instruct", dir, sizeof dir, &err) == 0,
          "none for Qwen");
    char shipped[256];
    duo_pattern_shipped(DUO_PATTERNS_SHIPPED, shipped, sizeof shipped);
    CHECK(tc, strstr(shipped, "Meta-Llama-3.1-8B-Instruct") && strstr(shipped, "Mistral-7B-Instruct-v0.3"), "%s",
          shipped);

    cJSON *root = kv_read_json("tests/data/duo/streaming_heads.json", &err);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    CHECK(tc, cJSON_GetArraySize(cases) == 8, "8 cases (%s)", root ? "parsed" : err.msg);
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) {
        const char *model = cJSON_GetObjectItem(c, "model")->valuestring;
        double budget = cJSON_GetObjectItem(c, "budget")->valuedouble;
        DuoPattern p;
        snprintf(dir, sizeof dir, "%s/%s", DUO_PATTERNS_SHIPPED, model);
        if (duo_pattern_load(&p, dir, &err)) {
            CHECK(tc, 0, "%s", err.msg);
            continue;
        }
        CHECK(tc, p.n_layers == 32 && p.n_kv_heads == 8 && p.sink_size == 128 && p.recent_size == 256,
              "%s: %dx%d sink %d recent %d", model, p.n_layers, p.n_kv_heads, p.sink_size, p.recent_size);
        Budget b = {.keep_fraction = budget};
        double ratio = budget_compression_ratio(&b, 4096);
        CHECK(tc, ratio == cJSON_GetObjectItem(c, "compression_ratio")->valuedouble, "%s %g: ratio", model, budget);
        unsigned char streaming[256], want[256] = {0};
        const cJSON *set = cJSON_GetObjectItem(c, "streaming_stable");
        for (const cJSON *i = set->child; i; i = i->next) want[i->valueint] = 1;
        CHECK(tc, duo_streaming_heads(&p, ratio, streaming, &err) == 0 && !memcmp(streaming, want, 256),
              "%s %g: streaming heads = numpy's stable argsort", model, budget);
        for (const cJSON *kf = cJSON_GetObjectItem(c, "kept_fraction")->child; kf; kf = kf->next) {
            KeepSet ks;
            int L = atoi(kf->string);
            CHECK(tc, duo_keepset(&p, 32, 8, L, ratio, &ks, &err) == 0, "%s", err.msg);
            /* exact in double: integer counts over a power-of-two denominator */
            CHECK(tc, (double)ks.total / (256.0 * L) == kf->valuedouble, "%s %g L=%d: kept %.10f, numpy %.10f",
                  model, budget, L, (double)ks.total / (256.0 * L), kf->valuedouble);
            keepset_free(&ks);
        }
        duo_pattern_free(&p);
    }
    cJSON_Delete(root);

    /* Mistral's pattern has a negative raw score (-0.000229...), clipped to 0 like the reference */
    DuoPattern m;
    snprintf(dir, sizeof dir, "%s/Mistral-7B-Instruct-v0.3", DUO_PATTERNS_SHIPPED);
    if (duo_pattern_load(&m, dir, &err) == 0) {
        double lo = 1;
        for (int i = 0; i < 256; i++) lo = m.score[i] < lo ? m.score[i] : lo;
        CHECK(tc, lo == 0, "min %g", lo);
        duo_pattern_free(&m);
    }
}

static void test_bad_patterns(TestCounts *tc) {
    static const struct {
        const char *name, *tsv, *config, *want;
    } bad[] = {
        {"not_number", "0.5\tx\n", "{\"sink_size\":1,\"recent_size\":1}", "line 1, column 2: not a finite number"},
        {"ragged", "0.5\t0.5\n0.1\n", "{\"sink_size\":1,\"recent_size\":1}", "line 2 has 1 scores, the first row has 2"},
        {"nan", "0.5\tnan\n", "{\"sink_size\":1,\"recent_size\":1}", "column 2: not a finite number"},
        {"comma", "0.5,0.5\n", "{\"sink_size\":1,\"recent_size\":1}", "tab-separated"},
        {"empty_column", "0.5\t\t0.3\n", "{\"sink_size\":1,\"recent_size\":1}", "line 1, column 2: empty"},
        {"trailing_tab", "0.5\t\n", "{\"sink_size\":1,\"recent_size\":1}", "line 1, column 2: empty"},
        {"empty", "\n\n", "{\"sink_size\":1,\"recent_size\":1}", "no scores"},
        {"no_tsv", NULL, "{\"sink_size\":1,\"recent_size\":1}", "full_attention_heads.tsv"},
        {"no_config", "0.5\n", NULL, "config.json"},
        {"bad_json", "0.5\n", "{sink", "config.json: not valid JSON"},
        {"no_recent", "0.5\n", "{\"sink_size\":1}", "missing number 'recent_size'"},
        {"zero_recent", "0.5\n", "{\"sink_size\":1,\"recent_size\":0}", "'recent_size' must be a whole number of at least 1"},
        {"frac_sink", "0.5\n", "{\"sink_size\":1.5,\"recent_size\":4}", "'sink_size' must be a whole number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        KvErr err = {{0}};
        DuoPattern p;
        const char *dir = write_pattern(bad[i].name, bad[i].tsv, bad[i].config);
        int rc = duo_pattern_load(&p, dir, &err);
        CHECK(tc, rc != 0 && strstr(err.msg, bad[i].want) && strstr(err.msg, dir), "%s: %s", bad[i].name, err.msg);
        CHECK(tc, p.score == NULL, "%s: nothing left allocated", bad[i].name);
    }
    KvErr err;
    DuoPattern p;
    CHECK(tc, duo_pattern_load(&p, "/nonexistent/pattern", &err) != 0 && strstr(err.msg, "not a folder"), "%s",
          err.msg);
}

int main(void) {
    TestCounts tc = {"test_duo", 0, 0, 0};
    snprintf(tmp_root, sizeof tmp_root, "/tmp/kvbench_duo_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_rounding(&tc);
    test_hand_pattern(&tc);
    test_policy(&tc);
    test_shipped(&tc);
    test_bad_patterns(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp_root);
    return test_finish(&tc);
}
