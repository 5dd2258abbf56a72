/* backend.h — the one interface both backends (cpu, cuda) implement, chosen by name from a table.
 *
 * A forward call runs n_new tokens for each of n_seqs sequences, each on its own cache (so the variants of
 * one sample, compressed differently, decode together and read each weight once per step). Prefill is a
 * forward on an empty cache with an ObserveHook; the question feed and each decode step are forwards on
 * gathered caches. Shape legend: B sequences, T new tokens, V vocab. */
#ifndef KVBENCH_BACKEND_H
#define KVBENCH_BACKEND_H

#include "err.h"
#include "kvcache.h"
#include "model.h"
#include "observation.h"

/* Called after each layer's attention during a forward with n_seqs == 1, for the last `window` tokens. */
typedef struct {
    int window;
    int want_value_norm;  /* a CUDA backend computes it on the device when set; the CPU leaves it to the policy side */
    int (*on_layer)(void *user, Observation *obs, KvErr *err);
    void *user;
    /* Set when the hook reads only attn and value_norm: a backend that computes those itself may then leave
     * q_win, keys, values and w_o NULL (the CUDA backend saves copying 2·K·L·d floats per layer to the host). */
    int derived_only;
} ObserveHook;

/* Called for every decode step (n_new == 1) with the new query's softmax over the sequence's cache:
 * probs[H][n_keys_of_head] is passed one query head at a time; entry i of the head's cache has position
 * cache->pos[l*K + h/G][i]. */
typedef struct {
    void (*on_attention)(void *user, int seq, int layer, int head, const float *probs, const int *positions,
                         int n_keys);
    void *user;
} TraceHook;

typedef struct Backend Backend;
struct Backend {
    const char *name;
    const Model *model;
    void *impl;
    /* An empty uniform cache with `capacity` entries per head. */
    int (*cache_new)(Backend *b, KvCache **out, int capacity, KvErr *err);
    /* A head-variable cache of the kept entries of src, with `extra_capacity` more per head. */
    int (*cache_gather)(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity, KvCache **out,
                        KvErr *err);
    /* cache_gather that shares src's kept rows instead of copying them (a kvcache_view: src must outlive it and
     * keep its first len entries; decoding on it is the same arithmetic as on the gathered copy, so the same
     * logits); NULL when a backend has none, then callers gather. */
    int (*cache_view)(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity, KvCache **out,
                      KvErr *err);
    /* Bytes a variant holds while it decodes (the sweep's memory planner, runs/memplan.h): the cache that
     * cache_view (view = 1) or cache_gather (view = 0) would make of src's keep with extra_capacity, plus its
     * share of a decode step's buffers. */
    double (*variant_bytes)(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity, int view);
    /* Bytes that can still be allocated for variants: the CUDA backend's cudaMemGetInfo free memory less a
     * reserve; NULL for the CPU backend (host memory: only a run's --memory-limit bounds it). */
    int (*memory_free)(Backend *b, double *bytes, KvErr *err);
    int views_fast;  /* decoding on views is measured at least as fast as on copies: the planner never gathers */
    void (*cache_free)(Backend *b, KvCache *c);
    /* tokens[B*T] (sequence-major); logits[B*V] receives each sequence's last-position logits (may be NULL).
     * observe may be non-NULL only when B == 1; trace only when T == 1. */
    int (*forward)(Backend *b, KvCache *const *caches, int n_seqs, const int *tokens, int n_new, float *logits,
                   const ObserveHook *observe, const TraceHook *trace, KvErr *err);
    void (*destroy)(Backend *b);
};

/* name: "cpu" or "cuda" (the latter only in a CUDA build, with a usable GPU: otherwise an error that says
 * what was needed and what was found). */
int backend_open(Backend **out, const char *name, const Model *m, KvErr *err);
/* Loads the model at spec the way backend `name` wants it: only the configuration and tokenizer
 * (model_load_config), its backend_open streaming the weights from the file into its own form: the CPU
 * backend keeps the packed codes of every matrix that packs exactly (f32 for the rest), the CUDA backend bf16
 * on the GPU. No f32 copy of the model stays in host memory. An unknown backend fails here, before any
 * loading. (backend_open also takes a Model loaded with model_load; the CPU backend then reads its f32 arena
 * too.) */
int backend_load_model(Model **m, const char *name, const char *spec, KvErr *err);
void backend_close(Backend *b);
/* Names compiled into this binary, comma-separated. */
const char *backend_available(void);
/* The CPU backend's opt-in FAST decode (environment KVBENCH_DECODE=fast; "exact", the default): activations
 * quantised to int8, so predictions may differ from the exact path. 1 when requested, 0 for exact, -1 (message
 * in err) for another value. Runs record it in their setup, so fast rows never pass for exact ones. */
int backend_fast_decode(KvErr *err);
/* The CPU backend's opt-in half-precision KV cache (environment KVBENCH_CACHE=f16; "f32", the default):
 * keys and values stored as IEEE binary16 (rounded to nearest even), attention and the policies' observation
 * reading them widened to f32 a layer at a time, so answers may differ from the exact path. KV_ELEM_F16 when
 * requested, KV_ELEM_F32 for f32, -1 (message in err) for another value. Runs record it in their setup
 * (`,cache=f16`). The CUDA backend keeps its own bf16 cache: opening it with KVBENCH_CACHE=f16 fails. */
int backend_cache_elem(KvErr *err);

#endif
