/* cmd_select.c — `kvbench select`: one policy's keep-set on a real prefill, to see what a policy keeps.
 *
 * Tokenizes a text file with the model's tokenizer (plain text: no chat template, no BOS), prefills it with
 * an observation hook (observation_prepare, then policy_observe, per layer) and, for a policy that reads one, the
 * reconstruction pass (KVzip; no chat template: an empty prefix and the suffix "\n"), selects the budget and prints
 * the kept counts per layer and kv-head with a summary. Usage errors exit 2, failures 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/backend.h"
#include "../engine/model.h"
#include "../engine/num.h"
#include "../engine/observation.h"
#include "../engine/tokenizer.h"
#include "../policies/policy.h"
#include "../runs/prepare.h"
#include "../runs/util.h"
#include "commands.h"

static const char USAGE[] =
    "usage: kvbench select --model M --file F --policy P --budget B [--aggregation A] [--window W] [--backend NAME]\n"
    "                      [--duo-patterns DIR] [--keep-out FILE]\n"
    "  B: a keep fraction (0.2 or 20%) or tokens per head (512tok); A: default, mean, max, max+prior\n"
    "  DIR: duoattention's head pattern folder (default: the shipped one the model's path names)\n"
    "  FILE: the keep-set's positions, one line per layer and kv-head (`L K COUNT POS...`), to compare backends\n";

typedef struct {
    PolicyState *state;
    int want_value_norm;
} SelectHook;

static int on_layer(void *user, Observation *obs, KvErr *err) {
    SelectHook *h = user;
    int rc = observation_prepare(obs, h->want_value_norm, err);
    if (!rc) rc = policy_observe(h->state, obs, err);
    observation_release(obs);
    return rc;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void print_keepset(const KeepSet *ks, int context_len) {
    int lo = ks->counts[0], hi = ks->counts[0];
    printf("layer  kept per kv-head\n");
    for (int l = 0; l < ks->n_layers; l++) {
        printf("%5d ", l);
        for (int k = 0; k < ks->n_kv_heads; k++) {
            int c = ks->counts[l * ks->n_kv_heads + k];
            printf(" %d", c);
            lo = c < lo ? c : lo;
            hi = c > hi ? c : hi;
        }
        printf("\n");
    }
    double all = (double)context_len * ks->n_layers * ks->n_kv_heads;
    printf("total kept %d of %.0f (%.2f%%), per head min %d max %d\n", ks->total, all, 100.0 * ks->total / all, lo,
           hi);
}

/* The keep-set as text: a header line, then `layer kv_head count positions...` per head, layer-major, so two
 * backends' choices on the same input can be compared position by position (tests/gpu/trained.sh). Written to
 * FILE.part and renamed, so a failed write leaves no file that looks complete. */
static int write_keepset(const char *path, const KeepSet *ks, int context_len, KvErr *err) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.part", path) >= (int)sizeof tmp) return kv_fail(err, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return kv_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
    fprintf(f, "kvbench-keepset 1 layers %d kv_heads %d context %d\n", ks->n_layers, ks->n_kv_heads, context_len);
    for (int l = 0; l < ks->n_layers; l++)
        for (int k = 0; k < ks->n_kv_heads; k++) {
            int i = l * ks->n_kv_heads + k;
            fprintf(f, "%d %d %d", l, k, ks->counts[i]);
            for (int e = 0; e < ks->counts[i]; e++) fprintf(f, " %d", ks->positions[ks->offsets[i] + e]);
            fputc('\n', f);
        }
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        int saved = errno;
        remove(tmp);
        return kv_fail(err, "%s: cannot write: %s", path, strerror(saved));
    }
    return 0;
}

/* Tokenizes, prefills with the hook, selects. Returns the exit status. */
static int run_select(const char *model_path, const char *file, const char *backend_name, const PolicyConfig *cfg,
                      const Budget *budget, const char *keep_out, KvErr *err) {
    Model *m = NULL;
    Backend *be = NULL;
    KvCache *cache = NULL;
    PolicyState *st = NULL;
    TokenIds ids = {0};
    KeepSet ks = {0};
    char *text = NULL;
    double *sums = NULL;  /* the attention sums a policy that reads them observes (ObserveHook.attention_sums) */
    double *stats = NULL; /* the query statistics likewise (ObserveHook.query_stats) */
    ReconstructionPlan plan = {0};
    ReconstructionSpec spec;
    int rc = -1;
    size_t len = 0;
    if (!(text = kv_read_file(file, &len, err)) || backend_load_model(&m, backend_name, model_path, err)) goto done;
    if (!m->tokenizer) {
        kv_fail(err, "%s: the model has no tokenizer to read a text file with", model_path);
        goto done;
    }
    if (tokenizer_encode(m->tokenizer, text, len, 0, &ids, err)) {
        kv_wrap(err, "%s", file);
        goto done;
    }
    const ModelConfig *c = &m->cfg;
    int needs_attention = policy_needs_attention(cfg), observes = policy_observes(cfg);
    if (ids.n == 0) {
        kv_fail(err, "%s: no tokens to prefill", file);
        goto done;
    }
    if (needs_attention && ids.n <= cfg->window) {
        kv_fail(err, "%s: %d tokens, but policy %s needs a context longer than its %d-token window", file, ids.n,
                cfg->name, cfg->window);
        goto done;
    }
    if (budget->tokens > ids.n) {
        kv_fail(err, "%s: budget of %d tokens is more than the context (%d tokens)", file, budget->tokens, ids.n);
        goto done;
    }
    int reconstructs = policy_reconstruction(cfg, &spec);
    if (reconstructs && reconstruction_plan(m->tokenizer, CHAT_NONE, &spec, &ids, &plan, err)) goto done;
    BackendOptions bo;
    if (util_backend_options(&bo, NULL, NULL, NULL, err) || backend_open(&be, backend_name, m, &bo, err) ||
        be->cache_new(be, &cache, ids.n + plan.max_input, err) ||
        policy_begin(&st, cfg, c->n_layers, c->n_kv_heads, ids.n, err))
        goto done;
    const char *missing = policy_missing_observation(cfg, be->observes);
    if (missing) {
        kv_fail(err, "policy %s needs %s, which backend %s does not observe", cfg->name, missing, be->name);
        goto done;
    }
    const size_t per_head_stats = c->head_dim + (size_t)c->head_dim * c->head_dim;
    if ((policy_needs_attention_sums(cfg) &&
         !(sums = kv_malloc(sizeof(double) * (size_t)c->n_layers * c->n_heads * ids.n, err))) ||
        (policy_query_stats_from(cfg) >= 0 &&
         !(stats = kv_malloc(sizeof(double) * c->n_layers * c->n_heads * per_head_stats, err))))
        goto done;
    SelectHook hook_state = {st, policy_needs_value_norm(cfg)};
    ObserveHook hook = {.window = cfg->window, .want_value_norm = hook_state.want_value_norm, .on_layer = on_layer,
                        .user = &hook_state, .derived_only = !policy_needs_keys(cfg), .attention_sums = sums,
                        .query_stats = stats, .query_stats_from = policy_query_stats_from(cfg)};
    double t0 = now_ms(), cpu0 = util_cpu_ms();
    if (be->forward(be, &cache, 1, ids.ids, ids.n, NULL, observes ? &hook : NULL, NULL, err)) goto done;
    double t1 = now_ms(), cpu1 = util_cpu_ms();
    int failed = 0;
    KvErr policy_err = {{0}};
    if (reconstructs && reconstruction_run(be, cache, &plan, &st, 1, &failed, &policy_err, err)) goto done;
    if (failed) {
        *err = policy_err;
        goto done;
    }
    double t_recon = now_ms(), cpu_recon = util_cpu_ms();
    if (policy_select(st, budget, &ks, err)) goto done;
    double t2 = now_ms();
    printf("model %s, %d tokens from %s, backend %s\n", m->name, ids.n, file, be->name);
    printf("policy %s", cfg->name);
    if (needs_attention)
        printf(" (aggregation %s, window %d, pool kernel %d)", aggregation_name(cfg->aggregation), cfg->window,
               cfg->pool_kernel);
    printf(", budget keep fraction %.17g (compression ratio %.17g)\n", budget_keep_fraction(budget, ids.n),
           budget_compression_ratio(budget, ids.n));
    print_keepset(&ks, ids.n);
    if (keep_out && write_keepset(keep_out, &ks, ids.n, err)) goto done;
    printf("prefill %.1f ms (%.0f CPU-ms)%s", t1 - t0, cpu1 - cpu0, observes ? " (with observation)" : "");
    if (reconstructs)
        printf(", reconstruction pass %.1f ms (%.0f CPU-ms) in %d chunk%s", t_recon - t1, cpu_recon - cpu1,
               plan.n_chunks, plan.n_chunks == 1 ? "" : "s");
    printf(", select %.2f ms\n", t2 - t_recon);
    rc = 0;
done:
    keepset_free(&ks);
    policy_end(st);
    if (cache) be->cache_free(be, cache);
    backend_close(be);
    ids_free(&ids);
    free(text);
    free(sums);
    free(stats);
    reconstruction_plan_free(&plan);
    if (m) model_free(m);
    return rc;
}

int cmd_select(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *policy = NULL, *budget_text = NULL, *aggregation = NULL;
    const char *backend = "cpu", *window = NULL, *duo_dir = NULL, *keep_out = NULL;
    for (int i = 0; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--model")         ? &model
                            : !strcmp(argv[i], "--file")        ? &file
                            : !strcmp(argv[i], "--policy")      ? &policy
                            : !strcmp(argv[i], "--budget")      ? &budget_text
                            : !strcmp(argv[i], "--aggregation") ? &aggregation
                            : !strcmp(argv[i], "--window")      ? &window
                            : !strcmp(argv[i], "--backend")     ? &backend
                            : !strcmp(argv[i], "--duo-patterns") ? &duo_dir
                            : !strcmp(argv[i], "--keep-out")    ? &keep_out
                                                                : NULL;
        if (!slot) {
            fprintf(stderr, "kvbench select: unknown option '%s'\n%s", argv[i], USAGE);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvbench select: %s needs a value\n", argv[i]);
            return 2;
        }
        *slot = argv[++i];
    }
    if (!model || !file || !policy || !budget_text) {
        fprintf(stderr, "kvbench select: --model, --file, --policy and --budget are required\n%s", USAGE);
        return 2;
    }
    KvErr err = {{0}};
    PolicyConfig cfg;
    Budget budget;
    if (policy_config(&cfg, policy, aggregation, &err) || budget_parse(budget_text, &budget, &err)) {
        fprintf(stderr, "kvbench select: %s\n", err.msg);
        return 2;
    }
    if (window) {
        long long w = 0;
        NumCheck r = num_parse_integer(window, 1, 1 << 20, &w);
        if (r) {
            fprintf(stderr, "kvbench select: --window '%s': %s\n", window,
                    r == NUM_OUT_OF_RANGE ? "out of range [1, 1048576]"
                                          : "expected a whole number of tokens, at least 1");
            return 2;
        }
        cfg.window = (int)w;
    }
    DuoPattern duo = {0};
    if (policy_needs_duo_pattern(&cfg)) {
        char found[1100];
        int n = duo_dir ? 1 : duo_pattern_find(util_duo_patterns_dir(), "", model, found, sizeof found, &err);
        if (n == 0) kv_fail(&err, "no DuoAttention head pattern is shipped for %s (give --duo-patterns DIR)", model);
        if (n != 1 || duo_pattern_load(&duo, duo_dir ? duo_dir : found, &err)) {
            fprintf(stderr, "kvbench select: %s\n", err.msg);
            return 1;
        }
        cfg.duo_pattern = &duo;
    }
    int rc = run_select(model, file, backend, &cfg, &budget, keep_out, &err);
    if (rc) fprintf(stderr, "kvbench select: %s\n", err.msg);
    duo_pattern_free(&duo);
    return rc ? 1 : 0;
}
