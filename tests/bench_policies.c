/* bench_policies.c — what the eviction policies add to a prefill, all measured in this one program on the
 * real model at an 8192-token context. Each round runs, back to back:
 *   plain     a prefill of the context with no observer (what a full-cache-only run pays);
 *   observed  the sweep's prefill (runs/prepare.c, prefill_run): the same forward with the 8 policies
 *             observing every layer, then prefill_select for the 7 budgeted policies at 20% and 40%.
 * From the observed prefill: scoring = the policies' policy_observe time (prepare.c's own per-slot timers);
 * shared = the shared observation, timed where it runs (observation_prepare: window attention and value norms,
 * computed once per layer for all policies); selection = the 14 prefill_select calls. observed - plain is the
 * end-to-end difference; it carries both prefills' round-to-round spread, which the timed parts do not.
 * Prints each round, the per-policy costs of the last round, and the medians over rounds of
 *   policy_share_pct       (scoring + selection) / plain prefill
 *   policy_share_timed_pct (scoring + shared + selection) / plain prefill: everything the policies add, timed
 *   policy_share_obs_pct   (observed - plain + selection) / plain prefill, wall; and the same in CPU time
 *                          (policy_share_obs_cpu_pct: the one that a loaded machine does not distort — the
 *                          per-policy timers of prepare.c, and so policy_share_pct, are wall-clock).
 * Usage: bench_policies [MODEL] [ROUNDS]   (defaults: SmolLM2-135M, 3; threads: OMP_NUM_THREADS) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "../runs/prepare.h"
#include "bench_util.h"

enum { CONTEXT = 8192, N_POLICIES = 8, MAX_ROUNDS = 15 };
static const char *const swept_policies[N_POLICIES] = {"full", "streamingllm", "snapkv", "adakv", "cake",
                                                     "criticalkv", "defensivekv", "layer-defensivekv"};

typedef struct {
    BenchClock plain, observed, selection;
    double scoring_ms, shared_ms, policy_ms[N_POLICIES], select_ms[N_POLICIES];
} Round;

static int run_round(const PrepareEnv *env, const TokenIds *ctx, const PolicyConfig *const *pcs, Round *r,
                     KvErr *err) {
    Backend *be = env->be;
    KvCache *c;
    memset(r, 0, sizeof *r);
    if (be->cache_new(be, &c, ctx->n, err)) return -1;
    BenchClock t = bench_clock();
    int rc = be->forward(be, &c, 1, ctx->ids, ctx->n, NULL, NULL, NULL, err);
    r->plain = bench_since(t);
    be->cache_free(be, c);
    if (rc) return -1;

    Prefill p;
    t = bench_clock();
    if (prefill_run(&p, env, ctx, pcs, N_POLICIES, 0, err)) return -1;
    r->observed = bench_since(t);
    r->shared_ms = p.shared_ms;
    for (int i = 0; i < N_POLICIES; i++) {
        r->policy_ms[i] = prefill_observe_ms(&p, i);
        r->scoring_ms += r->policy_ms[i];
    }
    t = bench_clock();
    for (int i = 1; i < N_POLICIES && !rc; i++) /* full (i = 0) keeps everything: no selection */
        for (int b = 0; b < 2 && !rc; b++) {
            Budget budget = {.keep_fraction = b ? 0.4 : 0.2};
            KeepSet ks;
            BenchClock s = bench_clock();
            rc = prefill_select(&p, i, &budget, &ks, err);
            r->select_ms[i] += bench_since(s).wall_s * 1e3;
            if (!rc) keepset_free(&ks);
        }
    r->selection = bench_since(t);
    prefill_free(&p);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (rounds < 1 || rounds > MAX_ROUNDS)
        return fprintf(stderr, "bench_policies: ROUNDS must be 1..%d, got '%s'\n", MAX_ROUNDS, argv[2]), 2;
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    PolicyConfig cfgs[N_POLICIES];
    const PolicyConfig *pcs[N_POLICIES];
    TokenIds ctx = {0};
    Round r[MAX_ROUNDS];
    if (backend_load_model(&m, "cpu", spec, &err) || backend_open(&be, "cpu", m, NULL, &err)) goto fail; /* as runs do */
    for (int i = 0; i < N_POLICIES; i++) {
        if (policy_config(&cfgs[i], swept_policies[i], NULL, &err)) goto fail;
        pcs[i] = &cfgs[i];
    }
    if (!(ctx.ids = kv_malloc(sizeof(int) * CONTEXT, &err))) goto fail;
    ctx.n = ctx.cap = CONTEXT;
    bench_random_ids(ctx.ids, CONTEXT, m->cfg.vocab_size, 7);
    PrepareEnv env = {m, NULL, be, 0, 0, NULL, 0, CHAT_NONE};
    printf("# bench_policies: %s, cpu backend, L=%d, 8 policies x 2 budgets, %d rounds\n", spec, CONTEXT, rounds);
    printf("%-6s %10s %11s %10s %10s %9s %8s %8s %9s %11s %9s\n", "round", "plain ms", "observed ms", "scoring ms",
           "shared obs", "select ms", "share %", "+obs %", "plain CPU", "observed CPU", "+obs CPU%");
    double share[MAX_ROUNDS], share_timed[MAX_ROUNDS], share_obs[MAX_ROUNDS], share_obs_cpu[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++) {
        if (run_round(&env, &ctx, pcs, &r[k], &err)) goto fail;
        double plain = r[k].plain.wall_s * 1e3, observed = r[k].observed.wall_s * 1e3,
               select = r[k].selection.wall_s * 1e3, obs = r[k].shared_ms;
        share[k] = 100 * (r[k].scoring_ms + select) / plain;
        share_timed[k] = 100 * (r[k].scoring_ms + obs + select) / plain;
        share_obs[k] = 100 * (observed - plain + select) / plain;
        share_obs_cpu[k] = 100 * (r[k].observed.cpu_s - r[k].plain.cpu_s + r[k].selection.cpu_s) / r[k].plain.cpu_s;
        printf("%-6d %10.0f %11.0f %10.1f %10.1f %9.1f %8.1f %8.1f %8.1fs %11.1fs %9.1f\n", k + 1, plain, observed,
               r[k].scoring_ms, obs, select, share[k], share_obs[k], r[k].plain.cpu_s, r[k].observed.cpu_s,
               share_obs_cpu[k]);
        fflush(stdout);
    }
    printf("%-18s %12s %12s   (round %d)\n", "policy", "observe ms", "select ms", rounds);
    for (int i = 0; i < N_POLICIES; i++)
        printf("%-18s %12.1f %12.1f\n", swept_policies[i], r[rounds - 1].policy_ms[i], r[rounds - 1].select_ms[i]);
    printf("policy_share_pct %.2f\npolicy_share_timed_pct %.2f\npolicy_share_obs_pct %.2f\npolicy_share_obs_cpu_pct "
           "%.2f\n",
           median(share, rounds), median(share_timed, rounds), median(share_obs, rounds), median(share_obs_cpu, rounds));
    ids_free(&ctx);
    backend_close(be);
    model_free(m);
    return 0;
fail:
    fprintf(stderr, "bench_policies: %s\n", err.msg);
    ids_free(&ctx);
    if (be) backend_close(be);
    if (m) model_free(m);
    return 1;
}
