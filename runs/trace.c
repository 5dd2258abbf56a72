/* trace.c — one sample's retained-importance trace: prepare as a run does, decode on the full cache with a
 * TraceHook, R_t of every keep-set per step. See trace.h. */
#include "trace.h"

#include <stdlib.h>
#include <string.h>

#include "../engine/generate.h"
#include "util.h"

/* The TraceHook cannot fail, so the first error is kept here and checked after the decode. */
typedef struct {
    FragilityTrace *ft;
    int failed;
    KvErr err;
} HookCtx;

static void on_attention(void *user, int seq, int layer, int head, const float *probs, const int *positions,
                         int n_keys) {
    HookCtx *c = user;
    (void)seq; /* one sequence: the full cache */
    if (!c->failed && fragility_add_head(c->ft, layer, head, probs, positions, n_keys, &c->err)) c->failed = 1;
}

static void fail_all(SampleTrace *t, const KvErr *err) {
    for (int i = 0; i < t->n_variants; i++)
        if (!t->failed[i]) {
            t->failed[i] = 1;
            t->errs[i] = *err;
        }
}

/* Prefill, keep-sets, traced decode; failures land in out->failed / out->errs. */
static void trace_prepared(const PrepareEnv *env, const TokenIds *ctx, const TokenIds *q,
                           const RunVariant *const *variants, int n, int steps, Importance importance,
                           SampleTrace *out) {
    const ModelConfig *mc = &env->model->cfg;
    KvErr err = {{0}};
    Prefill p = {0};
    KeepSet *sets = NULL;
    int *set_of = NULL, n_sets = 0;
    FragilityTrace ft = {0};
    TokenIds gen = {0};
    const PolicyConfig **policies = kv_calloc((size_t)n, sizeof *policies, &err);
    if (!policies) goto fail;
    for (int i = 0; i < n; i++) policies[i] = &variants[i]->policy;
    PrepareEnv penv = *env;
    penv.keep_value_norm = importance == IMPORTANCE_VALUE_WEIGHTED;
    penv.host_scoring = 1; /* the clamped share below reads the host's policy state */
    if (prefill_run(&p, &penv, ctx, policies, n, q->n + steps, &err)) goto fail;
    out->prefill_ms = p.prefill_ms;

    if (!(sets = kv_calloc((size_t)n, sizeof *sets, &err)) || !(set_of = kv_calloc((size_t)n, sizeof *set_of, &err)))
        goto fail;
    for (int i = 0; i < n; i++) {
        if (prefill_select(&p, i, &variants[i]->budget, &sets[n_sets], &out->errs[i])) {
            out->failed[i] = 1;
            keepset_free(&sets[n_sets]);
            continue;
        }
        if (p.slot_of[i] >= 0)
            policy_clamped_kept(p.slots[p.slot_of[i]].state, &sets[n_sets], &out->clamped_kept[i], &out->kept[i]);
        else
            out->kept[i] = sets[n_sets].total, out->clamped_kept[i] = -1;
        set_of[i] = n_sets++;
    }
    if (n_sets == 0) goto done;
    if (fragility_init(&ft, mc->n_layers, mc->n_heads, mc->n_kv_heads, ctx->n, sets, n_sets, p.value_norm, &err))
        goto fail;
    HookCtx hc = {&ft, 0, {{0}}};
    TraceHook hook = {on_attention, &hc};
    /* steps + 1 tokens: the last one is produced but never fed, so exactly `steps` forwards are traced. */
    GenerateOptions go = {steps + 1, NULL, 0, &hook, GEN_STOP_REFERENCE};
    GenerateStats gs = {0};
    if (generate_greedy(env->be, &p.cache, 1, q->ids, q->n, &go, &gen, &gs, &err)) goto fail;
    if (hc.failed) {
        err = hc.err;
        goto fail;
    }
    out->decode_ms = gs.feed_ms + gs.decode_ms;
    size_t pairs = (size_t)mc->n_layers * mc->n_kv_heads;
    if (!(out->mean_r = kv_calloc((size_t)ft.n_steps * n, sizeof(double), &err)) ||
        !(out->min_r = kv_calloc((size_t)ft.n_steps * n, sizeof(double), &err)) ||
        !(out->r_heads = kv_calloc((size_t)ft.n_steps * n * pairs, sizeof(float), &err)))
        goto fail;
    out->n_steps = ft.n_steps;
    out->n_pairs = (int)pairs;
    for (int t = 0; t < ft.n_steps; t++)
        for (int i = 0; i < n; i++)
            if (!out->failed[i]) {
                size_t from = (size_t)t * n_sets + set_of[i], to = (size_t)t * n + i;
                out->mean_r[to] = ft.mean_r[from];
                out->min_r[to] = ft.min_r[from];
                memcpy(out->r_heads + to * pairs, ft.r_heads + from * pairs, sizeof(float) * pairs);
            }
    goto done;
fail:
    out->n_steps = 0;
    fail_all(out, &err);
done:
    ids_free(&gen);
    fragility_free(&ft);
    for (int s = 0; s < n_sets; s++) keepset_free(&sets[s]);
    free(sets);
    free(set_of);
    free(policies);
    prefill_free(&p);
}

static int trace_init(SampleTrace *out, int n, KvErr *err) {
    memset(out, 0, sizeof *out);
    out->n_variants = n;
    if (!(out->failed = kv_calloc((size_t)(n ? n : 1), sizeof *out->failed, err)) ||
        !(out->errs = kv_calloc((size_t)(n ? n : 1), sizeof *out->errs, err)) ||
        !(out->kept = kv_calloc((size_t)(n ? n : 1), sizeof *out->kept, err)) ||
        !(out->clamped_kept = kv_calloc((size_t)(n ? n : 1), sizeof *out->clamped_kept, err))) {
        sample_trace_free(out);
        return -1;
    }
    return 0;
}

int trace_failed(SampleTrace *out, int n, const KvErr *why, KvErr *err) {
    if (trace_init(out, n, err)) return -1;
    fail_all(out, why);
    return 0;
}

int trace_sample(const PrepareEnv *env, const Sample *s, const RunVariant *const *variants, int n, int steps,
                 Importance importance, SampleTrace *out, KvErr *err) {
    if (trace_init(out, n, err)) return -1;
    TokenIds ctx = {0}, q = {0};
    KvErr serr = {{0}};
    int max_ctx = env->model->cfg.max_context;
    if (steps < 1) kv_fail(&serr, "trace: %d steps (expected at least 1)", steps);
    else if (prepare_tokens(env, s, &ctx, &q, &serr)) kv_wrap(&serr, "tokenizing");
    else if (ctx.n < 1 || q.n < 1) kv_fail(&serr, "empty %s after tokenization", ctx.n < 1 ? "context" : "question");
    else if (max_ctx > 0 && ctx.n + q.n + steps + 1 > max_ctx)
        kv_fail(&serr, "context %d + question %d + %d traced steps exceed the model's max context of %d tokens", ctx.n,
                q.n, steps, max_ctx);
    out->context_tokens = ctx.n;
    out->question_tokens = q.n;
    PrepareEnv framed = *env;
    framed.chat = prepare_chat_format(env, s);
    if (serr.msg[0]) fail_all(out, &serr);
    else trace_prepared(&framed, &ctx, &q, variants, n, steps, importance, out);
    ids_free(&ctx);
    ids_free(&q);
    return 0;
}

void sample_trace_free(SampleTrace *t) {
    free(t->failed);
    free(t->errs);
    free(t->mean_r);
    free(t->min_r);
    free(t->r_heads);
    free(t->kept);
    free(t->clamped_kept);
    memset(t, 0, sizeof *t);
}
