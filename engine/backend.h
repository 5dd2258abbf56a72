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
    /* Set (with derived_only) when the hook scores on the device (policies/cuda_policy.h): obs->attn and
     * obs->value_norm are then the CUDA backend's device arrays, valid during the call, and nothing is copied to
     * the host. A backend without device memory (cpu) refuses it. */
    int on_device;
    /* Opt-in, for a backend that observes OBSERVES_ATTENTION_SUMS and a prefill on an empty cache: [N][H][L] for the
     * L tokens of the forward, filled with each layer's column sums (Observation.attn_sums, layer l's [H][L] handed
     * with its observation); NULL costs nothing. */
    double *attention_sums;
    /* Opt-in, for a backend that observes OBSERVES_QUERY_STATS and a prefill on an empty cache: [N][H][d + d*d],
     * filled with each layer's pre-RoPE query mean and covariance over positions query_stats_from..L-1
     * (Observation.query_stats, layer l's [H][d + d*d] handed with its observation); NULL costs nothing. */
    double *query_stats;
    int query_stats_from;
} ObserveHook;

/* Called for every decode step (n_new == 1) with the new query's softmax over the sequence's cache:
 * probs[H][n_keys_of_head] is passed one query head at a time; entry i of the head's cache has position
 * cache->pos[l*K + h/G][i]. */
typedef struct {
    void (*on_attention)(void *user, int seq, int layer, int head, const float *probs, const int *positions,
                         int n_keys);
    void *user;
} TraceHook;

/* How a backend computes, asked for at backend_open (NULL: every default) and reported back as used
 * (backend_options_used). A zeroed struct is the default. Which options change bits (README "Numeric paths"):
 *  - decode FAST: activations quantised to int8 in every decode step's products: predictions may differ;
 *  - cache F16: keys and values stored as IEEE binary16: answers and keep-sets may differ;
 *  - simd: the exact products' summation order differs per instruction set, so a level other than the one the
 *    automatic choice takes on this CPU changes the logits' low bits (and may change a greedy answer);
 *  - fast_kernel: no (every fast kernel gives the same bits), so it is never part of a row's setup. */
typedef enum { BACKEND_DECODE_EXACT = 0, BACKEND_DECODE_FAST = 1 } BackendDecode;
typedef struct {
    BackendDecode decode;
    KvElem cache;
    char simd[16];        /* "" the automatic choice, else scalar | avx2 | avx512 (the cpu backend's) */
    char fast_kernel[16]; /* "" the best at that level, else scalar | avx2 | vnni | amx (the cpu backend's) */
    /* Reported only: 1 when `simd` is the level the automatic choice takes on this CPU (or the backend has no
     * levels), so a row need not name it. */
    int simd_auto;
} BackendOptions;

typedef struct Backend Backend;
struct Backend {
    const char *name;
    const Model *model;
    void *impl;
    BackendOptions used; /* what this backend computes with (backend_options_used); set by backend_open */
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
    int max_seqs;    /* most sequences one forward takes (the CUDA backend's rows); 0: no limit (the CPU's) */
    /* Its observed forward can hand the hook device arrays (ObserveHook.on_device), so a build with
     * policies/cuda_policy.h scores there; 0 for the CPU backend. */
    int scores_on_device;
    unsigned observes; /* OBSERVES_* bits (observation.h) its observed forward gives: backend_observes(name) */
    void (*cache_free)(Backend *b, KvCache *c);
    /* tokens[B*T] (sequence-major); logits[B*V] receives each sequence's last-position logits (may be NULL).
     * observe may be non-NULL only when B == 1; trace only when T == 1. */
    int (*forward)(Backend *b, KvCache *const *caches, int n_seqs, const int *tokens, int n_new, float *logits,
                   const ObserveHook *observe, const TraceHook *trace, KvErr *err);
    /* forward without observation that hands back only each sequence's greedy pick next_ids[B] (the first
     * index of its largest last-position logit, as engine/generate.c picks) where the logits live: the CUDA
     * backend's device, so B ints cross to the host instead of B·V floats. NULL when a backend has none (the
     * CPU's logits are in host memory already): callers pick from forward's logits. */
    int (*forward_greedy)(Backend *b, KvCache *const *caches, int n_seqs, const int *tokens, int n_new,
                          int *next_ids, const TraceHook *trace, KvErr *err);
    void (*destroy)(Backend *b);
};

/* name: "cpu" or "cuda" (the latter only in a CUDA build, with a usable GPU: otherwise an error that says
 * what was needed and what was found). opt: NULL for the defaults; an option the backend has not (the cuda
 * backend keeps its own bf16 cache and exact decode) fails with a line saying so. */
int backend_open(Backend **out, const char *name, const Model *m, const BackendOptions *opt, KvErr *err);
/* The options b actually computes with: the decode path, cache and level that run, names resolved (simd and
 * fast_kernel as the levels chosen). A row's setup is built from this report only (backend_setup_label). */
void backend_options_used(const Backend *b, BackendOptions *used);
/* The suffix a row's setup gets for the options that change bits (",decode=fast2", ",cache=f16",
 * ",simd=LEVEL" when the level is not the automatic one; "" for the defaults), from a report of
 * backend_options_used. */
void backend_setup_label(const BackendOptions *used, char *out, size_t size);
/* The options by name, as a model's "cpu" object in a config, the command line (--decode, --cache, --simd,
 * --fast-kernel) and the environment (KVBENCH_DECODE, ...) spell them; the runs layer picks each one's text
 * (runs/util.h util_backend_options), the engine reads only the struct. */
typedef enum {
    BACKEND_OPT_DECODE,
    BACKEND_OPT_CACHE,
    BACKEND_OPT_SIMD,
    BACKEND_OPT_FAST_KERNEL,
    BACKEND_N_OPTIONS
} BackendOptionKey;
extern const char *const BACKEND_OPTION_NAMES[BACKEND_N_OPTIONS]; /* "decode", "cache", "simd", "fast_kernel" */
/* Sets option `key` of o from its text (NULL or "" keeps the default); an unknown value fails naming the
 * option and the value ("decode 'quick': unknown decode path (exact, the default, or fast)"). simd and
 * fast_kernel names are checked against this CPU when the cpu backend opens. */
int backend_option_set(BackendOptions *o, BackendOptionKey key, const char *value, KvErr *err);
/* Loads the model at spec the way backend `name` wants it: only the configuration and tokenizer
 * (model_load_config), its backend_open streaming the weights from the file into its own form: the CPU
 * backend keeps the packed codes of every matrix that packs exactly (f32 for the rest), the CUDA backend bf16
 * on the GPU. No f32 copy of the model stays in host memory. An unknown backend fails here, before any
 * loading. (backend_open also takes a Model loaded with model_load; the CPU backend then reads its f32 arena
 * too.) */
int backend_load_model(Model **m, const char *name, const char *spec, KvErr *err);
void backend_close(Backend *b);
/* What backend `name` observes besides the window attention, value norms and raw tensors: OBSERVES_* bits
 * (observation.h), known for "cpu" and "cuda" whether or not this build holds them, so a config is checked before
 * any model loads; 0 for an unknown name. */
unsigned backend_observes(const char *name);
/* Names compiled into this binary, comma-separated. */
const char *backend_available(void);
#endif
