/* duo.h — DuoAttention (arXiv 2410.10819) as the reference runs it (kvpress duo_attention_press.py in the
 * DefensiveKV repository; policies/assets/duo_attention_patterns/README.md).
 *
 * A head pattern gives every (layer, kv-head) a learned retrieval score. At compression ratio r the
 * round(N*K*r) lowest-scoring heads become streaming heads, which keep only the first sink_size and the last
 * recent_size context tokens; every other head keeps the whole context. The budget therefore sets how many
 * heads stream, not how many tokens are kept: the kept fraction is 1 - (streaming share) * (1 - (sink +
 * recent) / L), which is what the results rows store beside the nominal budget.
 * Shape legend: N layers, K kv-heads, L context length. */
#ifndef KVBENCH_POLICY_DUO_H
#define KVBENCH_POLICY_DUO_H

#include "../engine/err.h"
#include "../engine/kvcache.h"

typedef struct {
    int n_layers, n_kv_heads;  /* N, K: one score per (layer, kv-head) */
    double *score;             /* [N*K] layer-major, clipped to [0, 1] as the reference does */
    int sink_size, recent_size;/* from the pattern's config.json */
    char source[512];          /* the folder it was read from, for messages */
} DuoPattern;

/* Reads DIR/full_attention_heads.tsv (one row per layer, one tab-separated score per kv-head) and
 * DIR/config.json (sink_size, recent_size). Errors name the file, the line and the problem. */
int duo_pattern_load(DuoPattern *out, const char *dir, KvErr *err);
void duo_pattern_free(DuoPattern *p);

/* The folder of the shipped patterns, relative to the project root; the runs layer passes it, or the folder
 * its KVBENCH_DUO_PATTERNS names, to the two functions below as `root`. */
#define DUO_PATTERNS_SHIPPED "policies/assets/duo_attention_patterns"
/* The shipped pattern for a model: the pattern folder under root whose name the model's name or path contains
 * (case-insensitive), e.g. ".../Meta-Llama-3.1-8B-Instruct" or "mistral-7b-instruct-v0.3.Q4_0.gguf".
 * Writes the folder into dir and returns 1, or returns 0 when none matches; -1 on error. */
int duo_pattern_find(const char *root, const char *model_name, const char *model_path, char *dir, size_t dir_size,
                     KvErr *err);
/* Comma-separated names of the patterns under root into out, for messages ("none" if the folder is missing). */
void duo_pattern_shipped(const char *root, char *out, size_t size);

/* round(n_heads * compression_ratio) with Python's round (half to even), as the reference counts the
 * streaming heads. */
int duo_streaming_count(int n_heads, double compression_ratio);

/* streaming[N*K] = 1 for the duo_streaming_count lowest-scoring heads. Ties go to the lower (layer, head)
 * index, i.e. a stable ascending sort; the reference's np.argsort is not stable (its order among tied scores
 * depends on numpy's version and the CPU), which configs/README.md ("DuoAttention") quantifies for
 * the shipped patterns. */
int duo_streaming_heads(const DuoPattern *p, double compression_ratio, unsigned char *streaming, KvErr *err);

/* The keep-set for a context of L tokens: a streaming head keeps [0, sink) and [L - recent, L) (the
 * reference masks positions sink..L-recent-1, so a context of at most sink + recent tokens keeps
 * everything); every other head keeps all L. The pattern's shape must be the model's (n_layers, n_kv_heads). */
int duo_keepset(const DuoPattern *p, int n_layers, int n_kv_heads, int context_len, double compression_ratio,
                KeepSet *out, KvErr *err);

#endif
