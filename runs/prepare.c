/* prepare.c — tokenize, one observed prefill, keep-sets: what `kvbench run` and `kvbench trace` both do to a
 * sample before decoding. See prepare.h. */
#include "prepare.h"

#include <stdlib.h>
#include <string.h>

#include "../engine/chat.h"
#include "util.h"
#ifdef KVBENCH_CUDA
#include "../policies/cuda_policy.h"
#endif

ChatFormat prepare_chat_format(const PrepareEnv *env, const Sample *s) {
    return s->use_chat ? env->model->cfg.chat : CHAT_NONE;
}

int prepare_tokens(const PrepareEnv *env, const Sample *s, TokenIds *ctx, TokenIds *q, KvErr *err) {
    ChatFormat f = prepare_chat_format(env, s);
    char *bos_text = NULL, *joined = NULL;
    int bos = tokenizer_bos_id(env->tok);
    /* the BOS token's own text goes into the prompt: never an answer's clean-up */
    if (f == CHAT_NONE && s->add_bos && bos >= 0 &&
        !(bos_text = tokenizer_decode(env->tok, &bos, 1, TOK_DECODE_RAW, err)))
        return -1;
    const char *context = s->context, *question = s->question;
    if (env->compress_question) {
        /* The reference's compress_questions mode: question appended to the context, "\n" asked after. */
        size_t a = strlen(s->context), b = strlen(s->question);
        if (!(joined = kv_malloc(a + b + 1, err))) {
            free(bos_text);
            return -1;
        }
        memcpy(joined, s->context, a);
        memcpy(joined + a, s->question, b + 1);
        context = joined;
        question = "\n";
    }
    ChatSplit split = {0};
    int rc = chat_split(f, bos_text ? bos_text : "", context, question, s->answer_prefix ? s->answer_prefix : "",
                        &split, err);
    if (!rc) rc = tokenizer_encode(env->tok, split.context_text, strlen(split.context_text), 1, ctx, err);
    if (!rc) rc = tokenizer_encode(env->tok, split.question_text, strlen(split.question_text), 1, q, err);
    chat_split_free(&split);
    free(bos_text);
    free(joined);
    return rc;
}

int prepare_stop_ids(const PrepareEnv *env, const Sample *s, TokenIds *out, KvErr *err) {
    for (int i = 0; i < env->model->cfg.n_eos; i++)
        if (ids_push(out, env->model->cfg.eos_ids[i], err)) return -1;
    int eos = tokenizer_eos_id(env->tok);
    if (eos >= 0 && ids_push(out, eos, err)) return -1;
    if (s->stop_on_newline) {
        TokenIds nl = {0};
        int rc = tokenizer_encode(env->tok, s->stop_on_newline, strlen(s->stop_on_newline), 0, &nl, err);
        /* The newline is the last piece of its encoding (a SentencePiece tokenizer may put "▁" first). */
        if (!rc && nl.n > 0) rc = ids_push(out, nl.ids[nl.n - 1], err);
        ids_free(&nl);
        if (rc) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- KVzip's reconstruction pass */

void reconstruction_plan_free(ReconstructionPlan *plan) {
    for (int c = 0; plan->input && c < plan->n_chunks; c++) ids_free(&plan->input[c]);
    free(plan->input);
    free(plan->start);
    free(plan->end);
    memset(plan, 0, sizeof *plan);
}

/* The ids of text[0..len) appended to out (special tokens parsed, no BOS: kvpress's encode without special
 * tokens). */
static int append_text(const Tokenizer *tok, const char *text, size_t len, TokenIds *out, KvErr *err) {
    TokenIds ids = {0};
    int rc = tokenizer_encode(tok, text, len, 1, &ids, err);
    for (int i = 0; !rc && i < ids.n; i++) rc = ids_push(out, ids.ids[i], err);
    ids_free(&ids);
    return rc;
}

int reconstruction_plan(const Tokenizer *tok, ChatFormat chat, const ReconstructionSpec *spec, const TokenIds *ctx,
                        ReconstructionPlan *out, KvErr *err) {
    memset(out, 0, sizeof *out);
    /* kvpress renders a dummy message and cuts it as the harness cuts a context (chat_split): the prefix is the
     * context part before the dummy text, the suffix the question part */
    static const char dummy[] = "dummy context";
    ChatSplit split = {0};
    TokenIds prefix = {0}, suffix = {0};
    int rc = 0;
    if (chat == CHAT_NONE) {
        rc = append_text(tok, "\n", 1, &suffix, err);
    } else {
        rc = chat_split(chat, "", dummy, "", "", &split, err);
        size_t cut = rc ? 0 : strlen(split.context_text) - strlen(dummy);
        if (!rc) rc = append_text(tok, split.context_text, cut, &prefix, err);
        if (!rc) rc = append_text(tok, split.question_text, strlen(split.question_text), &suffix, err);
        chat_split_free(&split);
    }
    const int from = prefix.n, n_ctx = ctx->n - from;
    if (!rc && n_ctx < 1)
        rc = kv_fail(err, "reconstruction: the context's %d tokens hold nothing after the chat template's %d-token "
                          "prefix", ctx->n, from);
    const int n = rc ? 0 : n_ctx > spec->chunk ? (n_ctx - 1) / spec->chunk + 1 : 1;
    if (!rc && (!(out->start = kv_calloc((size_t)n, sizeof(int), err)) ||
                !(out->end = kv_calloc((size_t)n, sizeof(int), err)) ||
                !(out->input = kv_calloc((size_t)n, sizeof(TokenIds), err))))
        rc = -1;
    out->n_chunks = rc ? 0 : n;
    for (int c = 0; !rc && c < n; c++) {
        TokenIds *in = &out->input[c];
        out->start[c] = from + c * spec->chunk;
        out->end[c] = out->start[c] + spec->chunk < ctx->n ? out->start[c] + spec->chunk : ctx->n;
        const char *prompt = c ? spec->next_prompt : spec->first_prompt;
        rc = append_text(tok, prompt, strlen(prompt), in, err);
        /* a later chunk repeats from the previous one's last next_tail ids (all of it when shorter) */
        int tail = c ? out->end[c - 1] - out->start[c - 1] : 0;
        tail = tail < spec->next_tail ? tail : spec->next_tail;
        for (int i = out->start[c] - tail; !rc && i < out->start[c]; i++) rc = ids_push(in, ctx->ids[i], err);
        for (int i = 0; !rc && i < suffix.n; i++) rc = ids_push(in, suffix.ids[i], err);
        for (int i = out->start[c]; !rc && i < out->end[c]; i++) rc = ids_push(in, ctx->ids[i], err);
        out->max_input = in->n > out->max_input ? in->n : out->max_input;
    }
    ids_free(&prefix);
    ids_free(&suffix);
    if (rc) reconstruction_plan_free(out);
    return rc;
}

typedef struct {
    PolicyState *const *states;
    int n, start, end;
    int *failed;
    KvErr *errs;
} ReconstructCtx;

static int on_reconstruct_layer(void *user, Observation *obs, KvErr *err) {
    ReconstructCtx *c = user;
    (void)err;
    for (int i = 0; i < c->n; i++)
        if (!c->failed[i] && policy_observe_reconstruction(c->states[i], obs, c->start, c->end, &c->errs[i]))
            c->failed[i] = 1;
    return 0;
}

int reconstruction_run(Backend *be, KvCache *cache, const ReconstructionPlan *plan, PolicyState *const *states,
                       int n, int *failed, KvErr *errs, KvErr *err) {
    const int L = cache->len[0];
    for (int c = 0; c < plan->n_chunks; c++) {
        ReconstructCtx rc = {states, n, plan->start[c], plan->end[c], failed, errs};
        const TokenIds *in = &plan->input[c];
        /* every new token's query and the whole cache's keys: the window is the input */
        ObserveHook hook = {.window = in->n, .on_layer = on_reconstruct_layer, .user = &rc};
        int fail = be->forward(be, &cache, 1, in->ids, in->n, NULL, &hook, NULL, err);
        if (kvcache_truncate(cache, L, fail ? NULL : err) || fail)
            return kv_wrap(err, "reconstruction of context positions [%d, %d)", plan->start[c], plan->end[c]);
    }
    return 0;
}

/* ---------------------------------------------------------------- the observed prefill */

typedef struct {
    Prefill *p;
    int want_attention, want_value_norm;
    double policy_ms;
} ObserveCtx;

/* The observation as a prefill with the smaller window w would give it: the last w rows of attn and q_win
 * per head (copied into attn[H][w][L] and q[H][w][d]); keys, values and value norms are window-independent. */
static Observation narrow_window(const Observation *obs, int w, float *attn, float *q) {
    Observation sub = *obs;
    for (int h = 0; h < obs->H; h++) {
        memcpy(attn + (size_t)h * w * obs->L, obs->attn + ((size_t)h * obs->w + obs->w - w) * obs->L,
               sizeof(float) * (size_t)w * obs->L);
        if (obs->q_win)
            memcpy(q + (size_t)h * w * obs->d, obs->q_win + ((size_t)h * obs->w + obs->w - w) * obs->d,
                   sizeof(float) * (size_t)w * obs->d);
    }
    sub.w = w;
    sub.attn = attn;
    sub.q_win = obs->q_win ? q : NULL;
    sub.scratch = NULL;
    return sub;
}

#ifdef KVBENCH_CUDA
/* The layer's window attention and value norms, in device memory, scored there by every slot. */
static int on_layer_device(void *user, Observation *obs, KvErr *err) {
    ObserveCtx *c = user;
    Prefill *p = c->p;
    (void)err;
    for (int i = 0; i < p->n_slots; i++) {
        PolicySlot *s = &p->slots[i];
        if (s->failed) continue;
        double t = util_now_ms();
        if (cuda_policy_observe(s->device, obs, &s->err)) s->failed = 1;
        s->ms += util_now_ms() - t;
        c->policy_ms += util_now_ms() - t;
    }
    return 0;
}
#endif

/* Begins every slot on the device where it can: a CUDA build, a backend that hands its observation over there,
 * one window for every attention-scored slot, nothing asked for that only the host has (raw keys, every layer's
 * value norms kept, the caller's wish), and every slot's policy one the device reproduces. 1 with every slot
 * begun there; 0 with none (the caller then scores on the host). */
static int begin_on_device(Prefill *p, const PrepareEnv *env, int window, int want_keys, int L) {
#ifdef KVBENCH_CUDA
    if (!env->be->scores_on_device || env->host_scoring || env->keep_value_norm || want_keys) return 0;
    for (int k = 0; k < p->n_slots; k++)
        if (policy_needs_attention(&p->slots[k].cfg) && p->slots[k].cfg.window != window) return 0;
    const ModelConfig *c = &env->model->cfg;
    for (int k = 0; k < p->n_slots; k++) {
        KvErr refused;
        if (cuda_policy_begin((CudaPolicy **)&p->slots[k].device, &p->slots[k].cfg, c->n_layers, c->n_kv_heads, L,
                              &refused) == 0)
            continue;
        for (int j = 0; j < k; j++) {
            cuda_policy_end(p->slots[j].device);
            p->slots[j].device = NULL;
        }
        return 0;
    }
    return 1;
#else
    (void)p, (void)env, (void)window, (void)want_keys, (void)L;
    return 0;
#endif
}

static int on_layer(void *user, Observation *obs, KvErr *err) {
    ObserveCtx *c = user;
    Prefill *p = c->p;
    float *attn = NULL, *q = NULL;
    int rc = 0;
    double shared_start = util_now_ms();
    if ((c->want_attention || p->value_norm) && observation_prepare(obs, c->want_value_norm, err)) return -1;
    p->shared_ms += util_now_ms() - shared_start;
    if (p->value_norm)
        memcpy(p->value_norm + (size_t)obs->layer * obs->K * obs->L, obs->value_norm,
               sizeof(float) * (size_t)obs->K * obs->L);
    for (int i = 0; i < p->n_slots; i++) {
        PolicySlot *s = &p->slots[i];
        if (s->failed) continue;
        double t = util_now_ms();
        const Observation *seen = obs;
        Observation sub;
        if (policy_needs_attention(&s->cfg) && s->cfg.window < obs->w) {
            if (!attn && (!(attn = kv_malloc(sizeof(float) * (size_t)obs->H * obs->w * obs->L, err)) ||
                          !(q = kv_malloc(sizeof(float) * (size_t)obs->H * obs->w * obs->d, err)))) {
                rc = -1;
                break;
            }
            sub = narrow_window(obs, s->cfg.window, attn, q);
            seen = &sub;
        }
        const PolicySlot *from = s->scores_from >= 0 ? &p->slots[s->scores_from] : NULL;
        if (from && !from->failed ? policy_observe_copy(s->state, from->state, seen, &s->err)
                                  : policy_observe(s->state, seen, &s->err))
            s->failed = 1;
        s->ms += util_now_ms() - t;
        c->policy_ms += util_now_ms() - t;
    }
    free(attn);
    free(q);
    observation_release(obs);
    return rc;
}

/* The slots that read a reconstruction pass and have not failed: their states and slot indices (*n of them), and
 * the plan of the first one's spec, which every other one must share. A slot whose plan cannot be made fails
 * alone. */
static int find_reconstruction(Prefill *p, const PrepareEnv *env, const TokenIds *ctx, ReconstructionPlan *plan,
                               PolicyState ***states, int **slots, int *n, KvErr *err) {
    ReconstructionSpec first = {0}, spec;
    *n = 0;
    for (int k = 0; k < p->n_slots; k++) {
        PolicySlot *s = &p->slots[k];
        if (s->failed || !policy_reconstruction(&s->cfg, &spec)) continue;
        if (!*states && (!(*states = kv_calloc((size_t)p->n_slots, sizeof **states, err)) ||
                         !(*slots = kv_calloc((size_t)p->n_slots, sizeof **slots, err))))
            return -1;
        if (*n == 0) {
            first = spec;
            if (!env->tok) {
                s->failed = 1;
                kv_fail(&s->err, "policy %s: no tokenizer to write its reconstruction pass's prompts with",
                        s->cfg.name);
                continue;
            }
            if (reconstruction_plan(env->tok, env->chat, &spec, ctx, plan, &s->err)) {
                s->failed = 1;
                continue;
            }
        } else if (spec.chunk != first.chunk || spec.next_tail != first.next_tail ||
                   strcmp(spec.first_prompt, first.first_prompt) || strcmp(spec.next_prompt, first.next_prompt)) {
            s->failed = 1;
            kv_fail(&s->err, "policy %s: its reconstruction pass differs from %s's, and a prefill runs one",
                    s->cfg.name, p->slots[(*slots)[0]].cfg.name);
            continue;
        }
        (*states)[*n] = s->state;
        (*slots)[(*n)++] = k;
    }
    return 0;
}

static void reconstruction_free(ReconstructionPlan *plan, PolicyState **states, int *slots) {
    reconstruction_plan_free(plan);
    free(states);
    free(slots);
}

/* The reconstruction pass on the prefill's cache, its time counted to every slot that reads it. */
static int reconstruct(Prefill *p, const PrepareEnv *env, const ReconstructionPlan *plan, PolicyState **states,
                       const int *slots, int n, KvErr *err) {
    int *failed = kv_calloc((size_t)n, sizeof *failed, err);
    KvErr *errs = failed ? kv_calloc((size_t)n, sizeof *errs, err) : NULL;
    if (!errs) {
        free(failed);
        return -1;
    }
    double t = util_now_ms(), cpu = util_cpu_ms();
    int rc = reconstruction_run(env->be, p->cache, plan, states, n, failed, errs, err);
    p->reconstruction_ms = util_now_ms() - t;
    p->reconstruction_cpu_ms = util_cpu_ms() - cpu;
    for (int i = 0; i < n; i++) {
        PolicySlot *s = &p->slots[slots[i]];
        s->ms += p->reconstruction_ms;
        if (failed[i] || rc) {
            s->failed = 1;
            s->err = failed[i] ? errs[i] : *err;
        }
    }
    free(failed);
    free(errs);
    return rc;
}

int prefill_run(Prefill *p, const PrepareEnv *env, const TokenIds *ctx, const PolicyConfig *const *policies, int n,
                int extra_capacity, KvErr *err) {
    const int N = env->model->cfg.n_layers, K = env->model->cfg.n_kv_heads;
    memset(p, 0, sizeof *p);
    p->be = env->be;
    p->n_policies = n;
    p->context_len = ctx->n;
    if (!(p->slots = kv_calloc((size_t)(n ? n : 1), sizeof *p->slots, err)) ||
        !(p->slot_of = kv_calloc((size_t)(n ? n : 1), sizeof *p->slot_of, err))) {
        prefill_free(p);
        return -1;
    }
    ObserveCtx oc = {p, 0, env->keep_value_norm, 0};
    /* stats_from: the last such policy's; one that reads the statistics from elsewhere fails in score_layer */
    int want_keys = 0, want_sums = 0, stats_from = -1;
    if (env->keep_value_norm && !(p->value_norm = kv_malloc(sizeof(float) * (size_t)N * K * ctx->n, err))) {
        prefill_free(p);
        return -1;
    }
    int window = 1;
    for (int i = 0; i < n; i++) {
        const PolicyConfig *pc = policies[i];
        if (policy_keeps_all(pc)) {
            p->slot_of[i] = -1;
            continue;
        }
        int k;
        for (k = 0; k < p->n_slots; k++) {
            if (policy_configs_equal(&p->slots[k].cfg, pc)) break;
        }
        p->slot_of[i] = k;
        if (k < p->n_slots) continue;
        PolicySlot *s = &p->slots[p->n_slots++];
        s->cfg = *pc;
        s->scores_from = -1;
        if (policy_needs_duo_pattern(pc) && !pc->duo_pattern) s->cfg.duo_pattern = env->duo_pattern;
        if (policy_needs_attention(pc) && pc->window > window) window = pc->window;
        oc.want_attention |= policy_needs_attention(pc);
        oc.want_value_norm |= policy_needs_value_norm(pc);
        want_keys |= policy_needs_keys(pc);
        want_sums |= policy_needs_attention_sums(pc);
        if (policy_query_stats_from(pc) >= 0) stats_from = policy_query_stats_from(pc);
        const char *missing = policy_missing_observation(pc, env->be->observes);
        if (missing) {
            kv_fail(err, "policy %s needs %s, which backend %s does not observe", pc->name, missing, env->be->name);
            prefill_free(p);
            return -1;
        }
    }
    p->on_device = begin_on_device(p, env, window, want_keys, ctx->n);
    for (int k = 0; k < p->n_slots && !p->on_device; k++) {
        PolicySlot *s = &p->slots[k];
        if (policy_begin(&s->state, &s->cfg, N, K, ctx->n, &s->err)) s->failed = 1;
        /* Policies that differ only in allocation (layer-defensivekv after defensivekv, adakv after snapkv) score
         * each layer once: the later one copies the earlier one's scores, the same bits. */
        for (int j = 0; j < k && !s->failed; j++)
            if (!p->slots[j].failed && p->slots[j].scores_from < 0 &&
                policy_scores_equal(s->state, p->slots[j].state)) {
                s->scores_from = j;
                break;
            }
    }
    /* A context not longer than a window already failed that policy in policy_begin. */
    if (window > ctx->n) window = ctx->n;
    ReconstructionPlan plan = {0};
    PolicyState **recon = NULL;
    int *recon_slot = NULL, n_recon = 0;
    if (find_reconstruction(p, env, ctx, &plan, &recon, &recon_slot, &n_recon, err)) {
        prefill_free(p);
        return -1;
    }
    if (plan.max_input > extra_capacity) extra_capacity = plan.max_input;
    /* raw keys, the attention sums of every query and the query statistics only for a policy that reads them */
    ObserveHook hook = {.window = window, .want_value_norm = oc.want_value_norm, .on_layer = on_layer, .user = &oc,
                        .derived_only = !want_keys, .query_stats_from = stats_from};
#ifdef KVBENCH_CUDA
    if (p->on_device) hook.on_layer = on_layer_device, hook.on_device = 1;
#endif
    const ModelConfig *c = &env->model->cfg;
    double t = util_now_ms();
    const size_t stats = (size_t)N * c->n_heads * (c->head_dim + (size_t)c->head_dim * c->head_dim);
    if ((want_sums &&
         !(hook.attention_sums = kv_malloc(sizeof(double) * (size_t)N * c->n_heads * ctx->n, err))) ||
        (stats_from >= 0 && !(hook.query_stats = kv_malloc(sizeof(double) * stats, err))) ||
        env->be->cache_new(env->be, &p->cache, ctx->n + extra_capacity, err) ||
        env->be->forward(env->be, &p->cache, 1, ctx->ids, ctx->n, NULL, &hook, NULL, err)) {
        kv_wrap(err, "prefill of %d tokens", ctx->n);
        free(hook.attention_sums);
        free(hook.query_stats);
        reconstruction_free(&plan, recon, recon_slot);
        prefill_free(p);
        return -1;
    }
    free(hook.attention_sums);
    free(hook.query_stats);
    p->prefill_ms = util_now_ms() - t - oc.policy_ms;
    int rc = n_recon ? reconstruct(p, env, &plan, recon, recon_slot, n_recon, err) : 0;
    reconstruction_free(&plan, recon, recon_slot);
    if (rc) prefill_free(p);
    return rc;
}

int prefill_select(Prefill *p, int i, const Budget *b, KeepSet *out, KvErr *err) {
    memset(out, 0, sizeof *out);
    if (p->slot_of[i] < 0)
        return keepset_full(out, p->be->model->cfg.n_layers, p->be->model->cfg.n_kv_heads, p->context_len, err);
    PolicySlot *s = &p->slots[p->slot_of[i]];
    if (s->failed) {
        if (err) *err = s->err;
        return -1;
    }
#ifdef KVBENCH_CUDA
    if (p->on_device) return cuda_policy_select(s->device, b, out, err);
#endif
    return policy_select(s->state, b, out, err);
}

double prefill_observe_ms(const Prefill *p, int i) { return p->slot_of[i] < 0 ? 0.0 : p->slots[p->slot_of[i]].ms; }

void prefill_free(Prefill *p) {
    for (int k = 0; k < p->n_slots; k++) {
        policy_end(p->slots[k].state);
#ifdef KVBENCH_CUDA
        cuda_policy_end(p->slots[k].device);
#endif
    }
    if (p->cache) p->be->cache_free(p->be, p->cache);
    free(p->slots);
    free(p->slot_of);
    free(p->value_norm);
    memset(p, 0, sizeof *p);
}
