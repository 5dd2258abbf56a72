/* test_ladder.c — the ladder from Ada-CriticalKV to DefensiveKV (policy.h LadderParams, docs/ladder.md).
 *
 * 1. Every step away from each policy's own setting against an independent numpy reference
 *    (tests/reference/gen_ladder_cases.py, data in tests/data/ladder): 2 layers, 4 query heads in 2 groups, w=4,
 *    L=64, pooling kernel 5, keep fractions 0.2, 0.3, 0.5, 0.7; keep-sets compared exactly. Tolerance: none on
 *    the sets; the generator keeps only inputs whose top-k cuts have a margin above 2e-6 of the largest score
 *    and whose mass thresholds one above 1e-4, so float32 here and float64 there pick the same entries.
 * 2. The ladder is complete: criticalkv given every one of DefensiveKV's steps keeps what defensivekv keeps (and
 *    layer-defensivekv with the global allocation), and defensivekv given Ada-CriticalKV's keeps what criticalkv
 *    keeps, entry for entry.
 * 3. The protected counts (policy_protected_kept) against what each allocation protects by definition.
 * 4. Parameters: canonical params text, config keys, and bad values named by file, policy and parameter.
 * 5. Table protected_sets (store/protected.h) and the report's forced-share summary on hand-derived counts. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/observation.h"
#include "../policies/policy_internal.h"
#include "../report/writers.h"
#include "../runs/config.h"
#include "../store/protected.h"
#include "test.h"

#define DATA "tests/data/ladder"

typedef struct {
    cJSON *manifest;
    int N, H, K, w, L, kernel;
    float *attn, *nu;
    Observation *obs;
} Ref;

static void *load_f32(const char *file, size_t count, KvErr *err) {
    char path[256];
    snprintf(path, sizeof path, DATA "/%s", file);
    size_t len = 0;
    char *buf = kv_read_file(path, &len, err);
    if (buf && len != count * sizeof(float)) {
        kv_fail(err, "%s: %zu bytes, expected %zu", path, len, count * sizeof(float));
        free(buf);
        return NULL;
    }
    return buf;
}

static int ref_open(Ref *r, KvErr *err) {
    memset(r, 0, sizeof *r);
    char *text = kv_read_file(DATA "/manifest.json", NULL, err);
    if (!text) return -1;
    r->manifest = cJSON_Parse(text);
    free(text);
    if (!r->manifest) return kv_fail(err, DATA "/manifest.json: not valid JSON");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(r->manifest, "shapes");
    r->N = cJSON_GetObjectItemCaseSensitive(sh, "n_layers")->valueint;
    r->H = cJSON_GetObjectItemCaseSensitive(sh, "n_heads")->valueint;
    r->K = cJSON_GetObjectItemCaseSensitive(sh, "n_kv_heads")->valueint;
    r->w = cJSON_GetObjectItemCaseSensitive(sh, "window")->valueint;
    r->L = cJSON_GetObjectItemCaseSensitive(sh, "seq_len")->valueint;
    r->kernel = cJSON_GetObjectItemCaseSensitive(sh, "pool_kernel")->valueint;
    size_t N = r->N, H = r->H, K = r->K, w = r->w, L = r->L;
    if (!(r->attn = load_f32("attn.f32", N * H * w * L, err)) || !(r->nu = load_f32("nu.f32", N * K * L, err)))
        return -1;
    r->obs = calloc(N, sizeof *r->obs);
    for (int l = 0; l < r->N; l++)
        r->obs[l] = (Observation){.layer = l, .n_layers = r->N, .L = r->L, .w = r->w, .H = r->H, .K = r->K, .d = 1,
                                  .D = 1, .attn = r->attn + l * H * w * L, .value_norm = r->nu + l * K * L};
    return 0;
}

static void ref_close(Ref *r) {
    cJSON_Delete(r->manifest);
    free(r->attn);
    free(r->nu);
    free(r->obs);
}

/* Configures policy/aggregation with the (key, value) pairs of a cJSON object (NULL: none). */
static int configure(PolicyConfig *cfg, const Ref *r, const char *policy, const char *agg, const cJSON *params,
                     KvErr *err) {
    if (policy_config(cfg, policy, agg, err)) return -1;
    cfg->window = r->w;
    cfg->pool_kernel = r->kernel;
    for (const cJSON *p = params ? params->child : NULL; p; p = p->next)
        if (policy_set_param(cfg, p->string, p->valuestring, err)) return -1;
    return 0;
}

/* Begins and observes every layer of r. */
static PolicyState *observe_all(const Ref *r, const PolicyConfig *cfg, KvErr *err) {
    PolicyState *st = NULL;
    if (policy_begin(&st, cfg, r->N, r->K, r->L, err)) return NULL;
    for (int l = 0; l < r->N; l++)
        if (policy_observe(st, &r->obs[l], err)) {
            policy_end(st);
            return NULL;
        }
    return st;
}

static int keepsets_equal(const KeepSet *a, const KeepSet *b) {
    if (a->n_layers != b->n_layers || a->n_kv_heads != b->n_kv_heads || a->total != b->total) return 0;
    for (int s = 0; s < a->n_layers * a->n_kv_heads; s++)
        if (a->counts[s] != b->counts[s] ||
            memcmp(a->positions + a->offsets[s], b->positions + b->offsets[s], sizeof(int) * (size_t)a->counts[s]))
            return 0;
    return 1;
}

static void test_reference(TestCounts *tc, const Ref *r) {
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(r->manifest, "runs");
    int n_runs = 0;
    for (const cJSON *run = runs->child; run; run = run->next, n_runs++) {
        const char *name = cJSON_GetObjectItemCaseSensitive(run, "name")->valuestring;
        double keep = cJSON_GetObjectItemCaseSensitive(run, "budget")->valuedouble;
        KvErr err;
        PolicyConfig cfg;
        PolicyState *st = NULL;
        KeepSet ks = {0};
        Budget b = {.keep_fraction = keep};
        if (configure(&cfg, r, cJSON_GetObjectItemCaseSensitive(run, "policy")->valuestring,
                      cJSON_GetObjectItemCaseSensitive(run, "aggregation")->valuestring,
                      cJSON_GetObjectItemCaseSensitive(run, "params"), &err) ||
            !(st = observe_all(r, &cfg, &err)) || policy_select(st, &b, &ks, &err)) {
            CHECK(tc, 0, "%s at %g: %s", name, keep, err.msg);
            policy_end(st);
            continue;
        }
        const cJSON *kept = cJSON_GetObjectItemCaseSensitive(run, "kept");
        int same = cJSON_GetArraySize(kept) == r->N * r->K, s = 0;
        for (const cJSON *seg = kept->child; same && seg; seg = seg->next, s++) {
            same = ks.counts[s] == cJSON_GetArraySize(seg);
            int i = 0;
            for (const cJSON *p = seg->child; same && p; p = p->next, i++)
                same = ks.positions[ks.offsets[s] + i] == p->valueint;
        }
        CHECK(tc, same, "%s at %g: the keep-set differs from the numpy reference (segment %d)", name, keep, s - 1);
        keepset_free(&ks);
        policy_end(st);
    }
    CHECK(tc, n_runs == 84, "%d reference runs, expected 84", n_runs);
}

/* Policy a with the steps `params` keeps what policy b keeps, at every budget. */
static void check_same(TestCounts *tc, const Ref *r, const char *a, const char *agg, const char *params_json,
                       const char *b) {
    static const double budgets[] = {0.2, 0.3, 0.5, 0.7};
    cJSON *params = cJSON_Parse(params_json);
    KvErr err;
    PolicyConfig ca, cb;
    PolicyState *sa = NULL, *sb = NULL;
    int ok = !configure(&ca, r, a, agg, params, &err) && !configure(&cb, r, b, agg, NULL, &err) &&
             (sa = observe_all(r, &ca, &err)) && (sb = observe_all(r, &cb, &err));
    CHECK(tc, ok, "%s %s: %s", a, params_json, err.msg);
    for (int i = 0; ok && i < 4; i++) {
        Budget bu = {.keep_fraction = budgets[i]};
        KeepSet x, y;
        if (policy_select(sa, &bu, &x, &err) || policy_select(sb, &bu, &y, &err)) {
            CHECK(tc, 0, "%s: %s", a, err.msg);
            break;
        }
        CHECK(tc, keepsets_equal(&x, &y), "%s %s %s keeps other entries than %s at %g", a, agg, params_json, b,
              budgets[i]);
        keepset_free(&x);
        keepset_free(&y);
    }
    policy_end(sa);
    policy_end(sb);
    cJSON_Delete(params);
}

static void test_complete(TestCounts *tc, const Ref *r) {
    const char *to_defensive =
        "{\"pooling\":\"rows\",\"forced\":\"mass\",\"safeguard\":\"off\",\"weighting\":\"defensive\",";
    char steps[256];
    snprintf(steps, sizeof steps, "%s\"allocation\":\"layer\"}", to_defensive);
    for (int a = 0; a < 3; a++) {
        const char *agg = a == 0 ? "max+prior" : a == 1 ? "max" : "mean";
        check_same(tc, r, "criticalkv", agg, steps, "defensivekv");
    }
    snprintf(steps, sizeof steps, "%s\"allocation\":\"global\"}", to_defensive);
    check_same(tc, r, "criticalkv", "max+prior", steps, "layer-defensivekv");
    const char *to_critical = "{\"pooling\":\"window\",\"forced\":\"topk\",\"safeguard\":\"on\","
                              "\"weighting\":\"critical\",\"allocation\":\"head\"}";
    check_same(tc, r, "defensivekv", "mean", to_critical, "criticalkv");
    check_same(tc, r, "layer-defensivekv", "max+prior", to_critical, "criticalkv");
    check_same(tc, r, "layer-defensivekv", "max+prior", "{\"allocation\":\"layer\"}", "defensivekv");
}

/* What each allocation protects, per (layer, kv-head), by definition:
 *   defensivekv (layer): the window and the mass set, w + min(n_mass, cap), all kept;
 *   forced none: the window alone, w;
 *   criticalkv (head): the top max(n_safe, int(B_k/2)) by score, B_k the head's kept count;
 *   criticalkv with neither safeguard nor forced set: nothing. */
static void test_protected(TestCounts *tc, const Ref *r) {
    static const struct {
        const char *policy, *agg, *params;
    } cases[] = {{"defensivekv", "max+prior", "{}"},
                 {"defensivekv", "max+prior", "{\"forced\":\"none\"}"},
                 {"criticalkv", "mean", "{}"},
                 {"criticalkv", "mean", "{\"forced\":\"none\",\"safeguard\":\"off\"}"},
                 {"snapkv", "mean", "{}"}};
    const int NK = r->N * r->K, P = r->L - r->w;
    for (int c = 0; c < 5; c++) {
        cJSON *params = cJSON_Parse(cases[c].params);
        KvErr err;
        PolicyConfig cfg;
        PolicyState *st = NULL;
        int ok = !configure(&cfg, r, cases[c].policy, cases[c].agg, params, &err) &&
                 (st = observe_all(r, &cfg, &err));
        CHECK(tc, ok, "%s: %s", cases[c].policy, err.msg);
        for (double keep = 0.3; ok && keep < 0.8; keep += 0.2) {
            Budget b = {.keep_fraction = keep};
            double f = budget_keep_fraction(&b, r->L);
            int n = (int)(r->L * f), prot[16], want[16];
            KeepSet ks;
            if (policy_select(st, &b, &ks, &err)) {
                CHECK(tc, 0, "%s: %s", cases[c].policy, err.msg);
                break;
            }
            int rc = policy_protected_kept(st, &b, &ks, prot, &err);
            for (int s = 0; s < NK; s++) {
                int n_safe = (int)(n * 0.2), half = (int)(ks.counts[s] * 0.5);
                want[s] = c <= 1   ? r->w
                          : c == 2 ? (n_safe > half ? n_safe : half)
                                   : 0;
            }
            if (c == 0) /* the mass set of each (layer, head) from the scores themselves */
                for (int s = 0; s < NK; s++) {
                    LayerScores ls;
                    ok = !score_layer(policy_row("defensivekv"), &cfg, &r->obs[s / r->K], &ls, &err);
                    want[s] += ok ? defensive_forced_count(&ls, s % r->K, P, r->w, f) : 0;
                    layer_scores_free(&ls);
                }
            if (c == 4) {
                CHECK(tc, rc == 1, "snapkv protects nothing by name: %d", rc);
            } else {
                CHECK(tc, rc == 0, "%s: %s", cases[c].policy, err.msg);
                for (int s = 0; s < NK; s++)
                    CHECK(tc, prot[s] == want[s], "%s %s at %g, head %d: %d protected, expected %d", cases[c].policy,
                          cases[c].params, keep, s, prot[s], want[s]);
            }
            keepset_free(&ks);
        }
        policy_end(st);
        cJSON_Delete(params);
    }
}

static void test_params(TestCounts *tc) {
    KvErr err;
    PolicyConfig a, b;
    char ta[160], tb[160];
    /* each policy's own steps give no text; group follows the aggregation */
    static const char *const own[][2] = {{"criticalkv", NULL},         {"criticalkv", "max+prior"},
                                         {"defensivekv", NULL},        {"defensivekv", "mean"},
                                         {"layer-defensivekv", "max"}, {"snapkv", NULL}};
    for (int i = 0; i < 6; i++) {
        CHECK(tc, !policy_config(&a, own[i][0], own[i][1], &err) && !policy_params_text(&a, ta, sizeof ta) && !*ta,
              "%s %s: own steps give '%s'", own[i][0], own[i][1] ? own[i][1] : "", ta);
    }
    /* setting a policy's own value changes nothing; the order of setting does not matter */
    policy_config(&a, "defensivekv", "max+prior", &err);
    policy_config(&b, "defensivekv", "max+prior", &err);
    CHECK(tc, !policy_set_param(&a, "group", "max", &err) && !policy_set_param(&a, "forced", "none", &err) &&
                  !policy_set_param(&a, "allocation", "head", &err),
          "%s", err.msg);
    CHECK(tc, !policy_set_param(&b, "allocation", "head", &err) && !policy_set_param(&b, "forced", "none", &err),
          "%s", err.msg);
    policy_params_text(&a, ta, sizeof ta);
    policy_params_text(&b, tb, sizeof tb);
    CHECK(tc, !strcmp(ta, ",forced=none,allocation=head") && !strcmp(ta, tb) && policy_configs_equal(&a, &b),
          "canonical text '%s' / '%s'", ta, tb);
    policy_set_param(&b, "group", "mean", &err);
    policy_params_text(&b, tb, sizeof tb);
    CHECK(tc, !strcmp(tb, ",group=mean,forced=none,allocation=head") && !policy_configs_equal(&a, &b),
          "group mean under max+prior: '%s'", tb);
    /* every step of criticalkv to DefensiveKV's values */
    policy_config(&a, "criticalkv", "max+prior", &err);
    static const char *const steps[][2] = {{"pooling", "rows"},  {"group", "max"},          {"forced", "mass"},
                                           {"safeguard", "off"}, {"weighting", "defensive"}, {"allocation", "layer"}};
    for (int i = 0; i < 6; i++) policy_set_param(&a, steps[i][0], steps[i][1], &err);
    policy_params_text(&a, ta, sizeof ta);
    CHECK(tc, !strcmp(ta, ",pooling=rows,forced=mass,safeguard=off,weighting=defensive,allocation=layer"),
          "criticalkv as DefensiveKV: '%s'", ta);
    /* bad input */
    policy_config(&a, "defensivekv", NULL, &err);
    CHECK(tc, policy_set_param(&a, "forced", "half", &err) && strstr(err.msg, "defensivekv") &&
                  strstr(err.msg, "forced 'half'") && strstr(err.msg, "topk, mass, none"),
          "bad value: %s", err.msg);
    CHECK(tc, policy_set_param(&a, "pool", "rows", &err) && strstr(err.msg, "unknown parameter 'pool'"),
          "bad key: %s", err.msg);
    policy_config(&a, "snapkv", NULL, &err);
    CHECK(tc, policy_set_param(&a, "forced", "none", &err) && strstr(err.msg, "snapkv takes no parameter 'forced'"),
          "snapkv: %s", err.msg);
}

/* A row's params text back to the policy (policy_apply_row_params), and which variants are one step apart
 * (policy_ladder_step), by hand from docs/ladder.md's table. */
static void test_row_params(TestCounts *tc) {
    KvErr err;
    PolicyConfig a, b;
    char text[192], step[64];
    static const char *const rows[][3] = {
        {"criticalkv", "mean", "w=32,k=5"},
        {"criticalkv", "max+prior", "w=16,k=7,intended,ties=unclamped,group=mean,forced=none"},
        {"defensivekv", "max+prior", "w=32,k=5,pooling=window,safeguard=on,weighting=critical,allocation=head"},
        {"streamingllm", "default", ""},
    };
    for (int i = 0; i < 4; i++) {
        int ok = !policy_config(&a, rows[i][0], rows[i][1], &err) && !policy_apply_row_params(&a, rows[i][2], &err) &&
                 !policy_row_params_text(&a, text, sizeof text);
        CHECK(tc, ok && !strcmp(text, rows[i][2]), "%s %s '%s' round trip: '%s' %s", rows[i][0], rows[i][1],
              rows[i][2], text, ok ? "" : err.msg);
    }
    policy_config(&a, "criticalkv", "mean", &err);
    CHECK(tc, policy_apply_row_params(&a, "w=0,k=5", &err) && strstr(err.msg, "w '0' is not a positive count"),
          "w=0: %s", err.msg);
    CHECK(tc, policy_apply_row_params(&a, "w=32,colour=red", &err) && strstr(err.msg, "unknown parameter 'colour'"),
          "unknown item: %s", err.msg);
    /* one step apart, the farther from Ada-CriticalKV first whichever side it is given on */
    static const struct {
        const char *policy_a, *agg_a, *params_a, *policy_b, *agg_b, *params_b;
        int side, rank;
        const char *step;
    } pairs[] = {
        {"criticalkv", "mean", "w=32,k=5", "criticalkv", "max+prior", "w=32,k=5,group=mean", -1, 0,
         "aggregation max+prior − mean"},
        {"criticalkv", "max+prior", "w=32,k=5", "criticalkv", "max+prior", "w=32,k=5,group=mean", 1, 2,
         "group max − mean"},
        {"criticalkv", "max+prior", "w=32,k=5,forced=mass", "criticalkv", "max+prior", "w=32,k=5,forced=mass,"
         "safeguard=off", -1, 4, "safeguard off − on"},
        {"criticalkv", "max+prior", "w=32,k=5,forced=mass,safeguard=off,weighting=defensive,allocation=layer",
         "defensivekv", "max+prior", "w=32,k=5", -1, 1, "pooling rows − window"},
        {"layer-defensivekv", "max", "w=32,k=5", "defensivekv", "max", "w=32,k=5", 1, 6, "allocation global − layer"},
        {"defensivekv", "max+prior", "w=32,k=5", "defensivekv", "max+prior", "w=32,k=5,forced=none", -1, 3,
         "forced none − mass"},
        /* not one step: two steps (aggregation and the group that follows it), another window, no ladder */
        {"criticalkv", "mean", "w=32,k=5", "criticalkv", "max", "w=32,k=5", 0, 0, ""},
        {"criticalkv", "mean", "w=32,k=5", "criticalkv", "mean", "w=16,k=5,forced=mass", 0, 0, ""},
        {"snapkv", "mean", "w=32,k=5", "snapkv", "max", "w=32,k=5", 0, 0, ""},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int rank = -1;
        int ok = !policy_config(&a, pairs[i].policy_a, pairs[i].agg_a, &err) &&
                 !policy_apply_row_params(&a, pairs[i].params_a, &err) &&
                 !policy_config(&b, pairs[i].policy_b, pairs[i].agg_b, &err) &&
                 !policy_apply_row_params(&b, pairs[i].params_b, &err);
        int side = ok ? policy_ladder_step(&a, &b, &rank, step, sizeof step) : 9;
        CHECK(tc, side == pairs[i].side && (!side || (rank == pairs[i].rank && !strcmp(step, pairs[i].step))),
              "pair %zu: side %d rank %d '%s' %s", i, side, rank, step, ok ? "" : err.msg);
    }
}

static void test_config(TestCounts *tc) {
    static const char *const head =
        "{\"models\": [{\"path\": \"m.gguf\"}], \"datasets\": [{\"suite\": \"niah\", \"tasks\": [\"needle\"]}],"
        " \"budgets\": [\"20%\"], \"policies\": [";
    static const struct {
        const char *policies, *want;
    } good[] = {
        {"{\"name\": \"defensivekv\", \"forced\": \"none\", \"safeguard\": false}", "w=32,k=5,forced=none"},
        {"{\"name\": \"defensivekv\", \"safeguard\": true, \"forced\": \"none\"}", "w=32,k=5,forced=none,safeguard=on"},
        {"{\"name\": \"criticalkv\", \"aggregations\": [\"max+prior\"], \"group\": \"max\"}", "w=32,k=5"},
        {"{\"name\": \"criticalkv\", \"aggregations\": [\"max+prior\"], \"group\": \"mean\"}", "w=32,k=5,group=mean"},
    };
    for (int i = 0; i < 4; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s]}", head, good[i].policies);
        RunConfig cfg;
        KvErr err;
        int rc = config_parse(&cfg, "ladder.json", text, &err);
        CHECK(tc, rc == 0 && cfg.n_variants == 1 && !strcmp(cfg.variants[0].params, good[i].want),
              "config %d: %s (params '%s', want '%s')", i, rc ? err.msg : "ok", rc ? "" : cfg.variants[0].params,
              good[i].want);
        if (!rc) config_free(&cfg);
    }
    /* two entries meaning the same variant collapse to one row key */
    char text[1024];
    snprintf(text, sizeof text, "%s%s]}", head,
             "{\"name\": \"defensivekv\", \"group\": \"max\"}, {\"name\": \"defensivekv\", \"forced\": \"mass\"}");
    RunConfig cfg;
    KvErr err;
    if (!config_parse(&cfg, "ladder.json", text, &err)) {
        CHECK(tc, cfg.n_variants == 1, "equal settings give %d variants", cfg.n_variants);
        config_free(&cfg);
    } else {
        CHECK(tc, 0, "%s", err.msg);
    }
    static const struct {
        const char *policies, *want;
    } bad[] = {
        {"{\"name\": \"defensivekv\", \"forced\": \"half\"}",
         "ladder.json: policies[0].forced: policy defensivekv: forced 'half' is not one of topk, mass, none"},
        {"{\"name\": \"snapkv\", \"weighting\": \"critical\"}",
         "ladder.json: policies[0].weighting: policy snapkv takes no parameter 'weighting'"},
        {"{\"name\": \"criticalkv\", \"safeguard\": 1}",
         "ladder.json: policies[0].safeguard: expected a string (the safeguard: true or false)"},
        {"{\"name\": \"criticalkv\", \"alocation\": \"layer\"}", "ladder.json: policies[0]"},
    };
    for (int i = 0; i < 4; i++) {
        snprintf(text, sizeof text, "%s%s]}", head, bad[i].policies);
        int rc = config_parse(&cfg, "ladder.json", text, &err);
        CHECK(tc, rc != 0 && strstr(err.msg, bad[i].want) && !strchr(err.msg, '\n'), "bad config %d: %s", i,
              rc ? err.msg : "accepted");
        if (!rc) config_free(&cfg);
    }
}

/* Two samples of one variant, 2 layers x 2 kv-heads:
 *   sample 1: protected 2 0 | 4 4 of kept 4 4 | 8 8: model share 10/24 = .416667, head share (.5+0+.5+.5)/4 = .375,
 *             layer shares 2/8 and 8/16, largest .5;
 *   sample 2: protected 1 1 | 1 1 of kept 2 2 | 2 2: .5 each.
 * Means over the 2 samples: .458333, .4375, .5. A second write of sample 1 changes nothing. */
static void test_forced_share(TestCounts *tc) {
    char dir[] = "/tmp/kvbench_ladder_XXXXXX", path[128], text[4096];
    if (!mkdtemp(dir)) {
        CHECK(tc, 0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/r.db", dir);
    Store *s = NULL;
    KvErr err;
    long long run = 0;
    const StoreRun r = {"t", "{}", "abc", "rev", "m", "m.gguf", "00", "m.gguf", "cpu", "host", NULL, 0};
    StoreResult row = {.key = {"criticalkv", "max+prior", "w=32,k=5,forced=mass", "20%"}, .keep_fraction = 0.2,
                       .prediction = "a", .score = 1};
    const int prot1[] = {2, 0, 4, 4}, kept1[] = {4, 4, 8, 8}, prot2[] = {1, 1, 1, 1}, kept2[] = {2, 2, 2, 2};
    int ok = !store_open(&s, path, 0, &err) && !store_begin_run(s, &r, &run, &err);
    for (int i = 0; ok && i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "ruler:vt:%d", i % 2);
        StoreSample m = {"m", "cq=0", key, "ruler", "vt", "tracing", "string_match_all", i % 2, -1, 4096, 3000, 40,
                         "[\"a\"]", NULL, "fp=aa", "seed=42", 0};
        ProtectedSet set = {row.key, 2, 2, i % 2 ? prot2 : prot1, i % 2 ? kept2 : kept1};
        ok = !store_write_sample(s, run, &m, &row, 1, &err) && !protected_write(s, "m", "cq=0", key, &set, 1, &err);
    }
    CHECK(tc, ok, "protected sets written: %s", err.msg);
    snprintf(path, sizeof path, "%s/forced_share.csv", dir);
    ok = ok && !report_forced_share(store_handle(s), dir, NULL, &err);
    CHECK(tc, ok, "forced share: %s", err.msg);
    char *csv = ok ? kv_read_file(path, NULL, &err) : NULL;
    snprintf(text, sizeof text, "%s", csv ? csv : "");
    CHECK(tc, strstr(text, "\"m\",\"20%\",\"criticalkv\",\"max+prior\",\"w=32,k=5,forced=mass\",2,0.458333,0.437500,"
                           "0.500000\n") != NULL,
          "forced_share.csv:\n%s", text);
    free(csv);
    store_close(s);
    remove(path);
    /* kvbench merge copies them with the samples: the merged database gives the same summary */
    char src[128], merged[128];
    snprintf(src, sizeof src, "%s/r.db", dir);
    snprintf(merged, sizeof merged, "%s/m.db", dir);
    const char *srcs[] = {src};
    ok = !store_merge_into(merged, srcs, 1, &err) && !protected_merge(merged, srcs, 1, &err) &&
         !protected_merge(merged, srcs, 1, &err) && !store_open(&s, merged, 1, &err) &&
         !report_forced_share(store_handle(s), dir, NULL, &err);
    char *again = ok ? kv_read_file(path, NULL, &err) : NULL;
    CHECK(tc, ok && again && !strcmp(again, text), "merged: %s", ok ? again : err.msg);
    free(again);
    if (ok) store_close(s);
    remove(path);
    snprintf(path, sizeof path, "%s/forced_share.md", dir);
    remove(path);
    /* a database without the table shows nothing */
    snprintf(path, sizeof path, "%s/empty.db", dir);
    ok = !store_open(&s, path, 0, &err) && !report_forced_share(store_handle(s), dir, NULL, &err);
    snprintf(path, sizeof path, "%s/forced_share.md", dir);
    CHECK(tc, ok && access(path, F_OK) != 0, "no table, no summary: %s", err.msg);
    store_close(s);
    const char *const files[] = {"r.db", "r.db-wal", "r.db-shm", "empty.db", "empty.db-wal", "empty.db-shm",
                                 "m.db", "m.db-wal", "m.db-shm"};
    for (int i = 0; i < 9; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

int main(void) {
    TestCounts tc = {"ladder", 0, 0, 0};
    Ref r;
    KvErr err;
    if (ref_open(&r, &err)) {
        CHECK(&tc, 0, "%s", err.msg);
    } else {
        test_reference(&tc, &r);
        test_complete(&tc, &r);
        test_protected(&tc, &r);
    }
    ref_close(&r);
    test_params(&tc);
    test_row_params(&tc);
    test_config(&tc);
    test_forced_share(&tc);
    return test_finish(&tc);
}
