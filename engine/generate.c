/* generate.c — greedy decoding of several sequences at once (spec policies.md §4.4).
 *
 * The prompt is fed to every sequence in one forward; its last logits give each sequence's first token.
 * Then single-token steps run on the sequences still going, compacted into one batch so a finished
 * sequence costs nothing. Under the reference stop rule (generate.h) a first token in the stop set, e.g. an
 * end-of-turn, is fed back like any other token, as kvpress's loop does. A trace hook sees the caller's sequence numbers, not the batch slots. */
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

/* Maps the batch slot of a decode step back to the caller's sequence for the user's trace hook. */
typedef struct {
    const TraceHook *user_hook;
    const int *seq_of_slot;
} TraceRelay;

static void relay_attention(void *user, int slot, int layer, int head, const float *probs, const int *positions,
                            int n_keys) {
    const TraceRelay *r = user;
    r->user_hook->on_attention(r->user_hook->user, r->seq_of_slot[slot], layer, head, probs, positions, n_keys);
}

int generate_greedy(Backend *be, KvCache *const *caches, int n_seqs, const int *prompt, int n_prompt,
                    const GenerateOptions *opt, TokenIds *out, GenerateStats *stats, KvErr *err) {
    GenerateStats st = {0};
    for (int b = 0; b < n_seqs; b++) out[b] = (TokenIds){0};
    if (n_seqs < 1 || n_prompt < 1)
        return kv_fail(err, "generate: need at least one sequence and one prompt token (got %d, %d)", n_seqs, n_prompt);
    if (opt->max_new < 0) return kv_fail(err, "generate: max_new %d is negative", opt->max_new);
    int V = be->model->cfg.vocab_size;
    int *tokens = kv_malloc((size_t)n_seqs * n_prompt * sizeof(int), err);
    int *slot_seq = tokens ? kv_malloc((size_t)n_seqs * sizeof(int), err) : NULL;
    int *picks = slot_seq ? kv_malloc((size_t)n_seqs * sizeof(int), err) : NULL;
    KvCache **batch = picks ? kv_malloc((size_t)n_seqs * sizeof *batch, err) : NULL;
    /* the logits only where the host picks */
    float *logits = batch && !be->forward_greedy ? kv_malloc((size_t)n_seqs * V * sizeof(float), err) : NULL;
    int rc = -1;
    if (!batch || (!logits && !be->forward_greedy)) goto done;
    for (int b = 0; b < n_seqs; b++) memcpy(tokens + (size_t)b * n_prompt, prompt, (size_t)n_prompt * sizeof(int));
    double t = now_ms();
    if (forward_picks(be, caches, n_seqs, tokens, n_prompt, logits, picks, NULL, err)) {
        kv_wrap(err, "generate: feeding %d prompt tokens", n_prompt);
        goto done;
    }
    st.feed_ms = now_ms() - t;
    t = now_ms();
    TraceRelay relay = {opt->trace, slot_seq};
    TraceHook relay_hook = {relay_attention, &relay};
    /* Slots of the current batch: batch[i] is caches[slot_seq[i]], its pick in picks[i]. */
    int active = n_seqs;
    for (int b = 0; b < n_seqs; b++) slot_seq[b] = b;
    for (int step = 0; step < opt->max_new && active > 0; step++) {
        int next = 0;
        for (int i = 0; i < active; i++) {
            int b = slot_seq[i], id = picks[i];
            int stop = is_stop(opt, id);
            if (stop && opt->stop_rule == GEN_STOP_ANY_TOKEN) continue;
            if (ids_push(&out[b], id, err)) goto done;
            st.decode_tokens++;
            if (out[b].n == opt->max_new || (stop && out[b].n > 1)) continue;
            /* compact in place: slot `next` <= i */
            slot_seq[next] = b;
            batch[next] = caches[b];
            tokens[next] = id;
            next++;
        }
        active = next;
        if (active == 0) break;
        if (forward_picks(be, batch, active, tokens, 1, logits, picks, opt->trace ? &relay_hook : NULL, err)) {
            kv_wrap(err, "generate: decode step %d", step + 1);
            goto done;
        }
    }
    st.decode_ms = now_ms() - t;
    rc = 0;
done:
    free(tokens);
    free(slot_seq);
    free(picks);
    free(batch);
    free(logits);
    if (stats) *stats = st;
    return rc;
}
