/* generate.c — greedy decoding of several sequences at once (spec policies.md §4.4).
 *
 * Each group's prompt is fed to its sequences in one forward; its last logits give each sequence's first token.
 * Then single-token steps run on the sequences still going, of every group, compacted into one batch so a
 * finished sequence costs nothing. Under the reference stop rule (generate.h) a first token in the stop set, e.g. an
 * end-of-turn, is fed back like any other token, as kvpress's loop does. A trace hook sees the caller's sequence
 * numbers, not the batch slots. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One forward of n_new tokens per sequence, its greedy picks in next_ids[n_seqs]: picked where the logits live
 * (the backend's forward_greedy), else from the logits[n_seqs][V] forward hands over. */
static int forward_picks(Backend *be, KvCache *const *caches, int n_seqs, const int *tokens, int n_new, float *logits,
                         int *next_ids, const TraceHook *trace, KvErr *err) {
    if (be->forward_greedy) return be->forward_greedy(be, caches, n_seqs, tokens, n_new, next_ids, trace, err);
    if (be->forward(be, caches, n_seqs, tokens, n_new, logits, NULL, trace, err)) return -1;
    int V = be->model->cfg.vocab_size;
    for (int i = 0; i < n_seqs; i++) next_ids[i] = argmax(logits + (size_t)i * V, V);
    return 0;
}

static int is_stop(const GenerateOptions *opt, int id) {
    for (int i = 0; i < opt->n_stop; i++)
        if (opt->stop_ids[i] == id) return 1;
    return 0;
}

/* Maps the batch slot of a decode step back to the caller's group and sequence for the groups' trace hooks. */
typedef struct {
    const GenerateGroup *groups;
    const int *group_of, *seq_of; /* [total] of each global sequence */
    const int *slot_global;       /* [active] the global sequence in each slot */
} TraceRelay;

static void relay_attention(void *user, int slot, int layer, int head, const float *probs, const int *positions,
                            int n_keys) {
    const TraceRelay *r = user;
    int g = r->group_of[r->slot_global[slot]];
    const TraceHook *hook = r->groups[g].opt.trace;
    if (hook) hook->on_attention(hook->user, r->seq_of[r->slot_global[slot]], layer, head, probs, positions, n_keys);
}

int generate_greedy_groups(Backend *be, GenerateGroup *groups, int n_groups, KvErr *err) {
    int total = 0, max_feed = 0, traced = 0;
    for (int g = 0; g < n_groups; g++) {
        GenerateGroup *gr = &groups[g];
        gr->stats = (GenerateStats){0};
        for (int b = 0; b < gr->n_seqs; b++) gr->out[b] = (TokenIds){0};
    }
    if (n_groups < 1) return kv_fail(err, "generate: no sequences to decode");
    for (int g = 0; g < n_groups; g++) {
        const GenerateGroup *gr = &groups[g];
        if (gr->n_seqs < 1 || gr->n_prompt < 1)
            return kv_fail(err, "generate: need at least one sequence and one prompt token (got %d, %d)", gr->n_seqs,
                           gr->n_prompt);
        if (gr->opt.max_new < 0) return kv_fail(err, "generate: max_new %d is negative", gr->opt.max_new);
        total += gr->n_seqs;
        if (gr->n_seqs * gr->n_prompt > max_feed) max_feed = gr->n_seqs * gr->n_prompt;
        traced |= gr->opt.trace != NULL;
    }
    const int V = be->model->cfg.vocab_size;
    int *tokens = kv_malloc((size_t)(max_feed > total ? max_feed : total) * sizeof(int), err);
    int *group_of = tokens ? kv_malloc((size_t)total * 4 * sizeof(int), err) : NULL;
    KvCache **batch = group_of ? kv_malloc((size_t)total * sizeof *batch, err) : NULL;
    int *in_step = batch ? kv_calloc((size_t)n_groups, sizeof(int), err) : NULL;
    /* the logits only where the host picks */
    float *logits = in_step && !be->forward_greedy ? kv_malloc((size_t)total * V * sizeof(float), err) : NULL;
    int rc = -1;
    if (!in_step || (!logits && !be->forward_greedy)) goto done;
    int *seq_of = group_of + total, *slot_global = seq_of + total, *picks = slot_global + total;
    /* Feed: group g's sequences are the global ones from `first`; their first picks land in picks[first..]. */
    for (int g = 0, first = 0; g < n_groups; first += groups[g++].n_seqs) {
        GenerateGroup *gr = &groups[g];
        for (int b = 0; b < gr->n_seqs; b++) {
            memcpy(tokens + (size_t)b * gr->n_prompt, gr->prompt, (size_t)gr->n_prompt * sizeof(int));
            group_of[first + b] = g;
            seq_of[first + b] = b;
            batch[first + b] = gr->caches[b];
        }
        double t = now_ms();
        if (forward_picks(be, gr->caches, gr->n_seqs, tokens, gr->n_prompt, logits, picks + first, NULL, err)) {
            kv_wrap(err, "generate: feeding %d prompt tokens", gr->n_prompt);
            goto done;
        }
        gr->stats.feed_ms = now_ms() - t;
    }
    TraceRelay relay = {groups, group_of, seq_of, slot_global};
    TraceHook relay_hook = {relay_attention, &relay};
    /* Slots of the current batch: batch[i] is the cache of global sequence slot_global[i], its pick in picks[i]. */
    int active = total;
    for (int i = 0; i < total; i++) slot_global[i] = i;
    for (int step = 0; active > 0; step++) {
        int next = 0;
        for (int i = 0; i < active; i++) {
            int q = slot_global[i], id = picks[i];
            GenerateGroup *gr = &groups[group_of[q]];
            TokenIds *out = &gr->out[seq_of[q]];
            if (gr->opt.max_new == 0) continue;
            int stop = is_stop(&gr->opt, id);
            if (stop && gr->opt.stop_rule == GEN_STOP_ANY_TOKEN) continue;
            if (ids_push(out, id, err)) goto done;
            gr->stats.decode_tokens++;
            if (out->n == gr->opt.max_new || (stop && out->n > 1)) continue;
            /* compact in place: slot `next` <= i */
            slot_global[next] = q;
            batch[next] = gr->caches[seq_of[q]];
            tokens[next] = id;
            next++;
        }
        active = next;
        if (active == 0) break;
        memset(in_step, 0, (size_t)n_groups * sizeof *in_step);
        for (int i = 0; i < active; i++) in_step[group_of[slot_global[i]]]++;
        double t = now_ms();
        if (forward_picks(be, batch, active, tokens, 1, logits, picks, traced ? &relay_hook : NULL, err)) {
            kv_wrap(err, "generate: decode step %d", step + 1);
            goto done;
        }
        double step_ms = now_ms() - t;
        for (int g = 0; g < n_groups; g++) groups[g].stats.decode_ms += step_ms * in_step[g] / active;
    }
    rc = 0;
done:
    free(tokens);
    free(group_of);
    free(batch);
    free(in_step);
    free(logits);
    return rc;
}

int generate_greedy(Backend *be, KvCache *const *caches, int n_seqs, const int *prompt, int n_prompt,
                    const GenerateOptions *opt, TokenIds *out, GenerateStats *stats, KvErr *err) {
    GenerateGroup group = {.caches = caches, .n_seqs = n_seqs, .prompt = prompt, .n_prompt = n_prompt, .opt = *opt,
                           .out = out};
    int rc = generate_greedy_groups(be, &group, 1, err);
    if (stats) *stats = group.stats;
    return rc;
}
