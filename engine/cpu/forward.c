/* forward.c — the CPU backend: a Llama / Mistral / Qwen2 decoder forward in f32 over head-variable KV caches,
 * on the kernel table (kernels.h) filled once at open from the BackendOptions it is given.
 *
 * One layer (layer_forward) for every forward: a pass of rows through it is B sequences with tc new tokens
 * each (Pass), a prefill or question feed in chunks of CPU_CHUNK tokens, a single-token step (any B, with or
 * without a trace hook) as one pass of tc = 1. What differs is only who runs the stages (Team): a chunk opens
 * one parallel region per stage, all B*tc rows through every weight matrix in one GEMM (OpenBLAS), attention
 * per (sequence, query head) in tiles of CPU_TILE x n scores, never n x n; a step runs in ONE parallel region,
 * its threads meeting at barriers. A step takes its products from the matrices' codes (the table's exact or
 * fast kernels) for up to CPU_FEW_ROWS rows, else (exact path) the chunk's BLAS slices, so its logits equal a
 * chunk's bit for bit and the path the backend reports (backend_options_used) is the one that ran.
 * Products: each matrix is a descriptor (ops.h CpuMatrix: its form and its products, made at open); the
 * forward takes a matrix's product for M rows from it by the path chosen at open (CpuPath: the exact code
 * kernels up to CPU_FEW_ROWS rows, or the fast products, else BLAS), never asking what the matrix is held as.
 * Threads: OpenMP only. Each thread calls a single-threaded OpenBLAS on its own slice of a product (set at
 * open: OpenBLAS's own thread pool and OpenMP's spinning workers would otherwise fight over the cores at
 * every switch between a product and a per-row loop, dozens of times per layer).
 * Decode steps are bound by the bytes of weights read: where a matrix is exactly GGUF-style block codes they
 * read a lossless packed copy: 4-bit codes (a Q4_1 / Q4_0 GGUF, 0.625 bytes per weight), else int8 codes (a
 * Q8_0 GGUF, 1.25 bytes per weight, CpuPacked). A code product converts each weight once for all rows of a
 * step, so B sequences decoding together cost little more than one.
 * Weights: the backend streams them in at open (intake.c: model_stream_weight_blocks) and keeps ONE form of
 * each matrix: its codes where it packs exactly, else a ggml type's blocks, else f32. Prefill GEMMs on a
 * matrix held as codes rebuild each thread's slice of it into a small f32 tile and make the same BLAS call
 * (cpu_matmul_codes), so no f32 copy of the model is held and the logits are those of the f32 weights bit
 * for bit. Only a Model loaded with its f32
 * arena (model_load) is read from that arena too (nothing more to hold).
 * KV cache: f32 rows by default (exact). The cache option f16 opts into binary16 rows (half the memory of the
 * cache, rounded to nearest even when stored): each layer's attention widens the rows of that layer back to
 * f32 into one scratch (s->kv_view, one layer of the batch's caches, never the whole cache) and runs the
 * same kernels on it, which the policies' observation reads too.
 * Shape legend: B sequences, T new tokens, tc of them in a pass, M rows (B * tc), N layers, D hidden, H heads,
 * K kv-heads, G = H/K, d head dim, F feed-forward, V vocab, n keys of a cache head. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "intake.h"
#include "ops.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Tokens per prefill chunk: enough rows for efficient GEMMs, few enough that the activations of an 8k
 * prefill stay ~12 MB. */
#define CPU_CHUNK 512
/* Row-wise loops (norms, RoPE, SwiGLU) go parallel from this many rows on: below, a fork and join costs
 * more than the loop, and a decode step would otherwise pay ~100 of them. */
#define CPU_PARALLEL_ROWS 16
/* From this many query rows per (sequence, head) on, attention goes through two GEMMs instead of per-row
 * loops, in tiles of CPU_TILE rows (CPU_TILE x n scores per thread). */
#define CPU_BLOCK_MIN_ROWS 8
#define CPU_TILE 128

/* Activations and attention scratch, grown on demand and kept between forwards (decode steps reuse it). */
typedef struct {
    int rows;            /* row capacity of the activation buffers */
    size_t score_floats; /* capacity of scores */
    size_t prob_floats;  /* capacity of probs (all threads) */
    size_t qwin_floats;  /* capacity of q_win */
    void *rows_arena;    /* one allocation carved into the row buffers below */
    float *x, *xn;       /* [M][D] residual stream, normed input */
    float *q, *att;      /* [M][H*d] queries (after RoPE), attention output */
    float *k, *v;        /* [M][K*d] */
    float *gate, *up;    /* [M][F] */
    float *cos_t, *sin_t;/* [M][d/2] RoPE angles of each row's position */
    float *scores;       /* [threads][CPU_TILE][n] blocked attention */
    float *probs;        /* [threads][G][n] per-row attention of a key head's G query heads */
    float *q_win;        /* [H][w][d] observation queries */
    float *q4_tiles;     /* [threads][CPU_Q4_TILE_FLOATS(widest K)], 64-byte aligned */
    float *code_tiles;   /* [threads][code_tile_floats] f32 weights rebuilt for a prefill GEMM */
    size_t code_tile_cap;
    size_t code_tile_floats;
    float *wo;           /* [D][H*d] a layer's W_O rebuilt for an observation */
    size_t wo_floats;
    int q4_tile_threads; /* threads q4_tiles has room for */
    int q4_tile_width;   /* K q4_tiles has room for */
    float *xn_parts;     /* [threads][M][D] each thread's normed rows in a decode step */
    size_t xn_part_floats;
    float *kv_view;      /* f16 caches: one layer's keys and values of every sequence, widened to f32 */
    size_t kv_view_floats;
    const float **k_view, **v_view; /* [B*K] where sequence b's kv-head kh of that layer starts in kv_view */
    int view_heads;      /* B*K the two arrays have room for */
} CpuScratch;

typedef struct {
    CpuProductKind kind;
    int max_rows;
} CpuPath;

typedef struct {
    CpuScratch s;
    CpuKernels k;        /* the kernel table, filled at open */
    /* Which product each matrix takes (the kind where it has one up to max_rows rows, else its BLAS product),
     * chosen at open: prefill chunks the exact code kernels up to CPU_FEW_ROWS rows (a batched decode of up to 32
     * sequences reads the codes, more rows OpenBLAS's GEMM); decode steps the same, or with decode = fast the
     * fast products (int8-quantised activations) at any rows. */
    CpuPath chunk_path, step_path;
    KvElem cache_elem;   /* the caches it makes: KV_ELEM_F32, or KV_ELEM_F16 */
    CpuWeights weights;  /* each matrix in its one form, the norms and biases (intake.h) */
} CpuImpl;

/* ------------------------------------------------------------------------------------------------ scratch */

static int scratch_rows(CpuScratch *s, const ModelConfig *c, int rows, KvErr *err) {
    if (rows <= s->rows) return 0;
    size_t hd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    const size_t widths[] = {c->d_model, c->d_model, hd, hd, kd, kd, c->d_ff, c->d_ff, c->head_dim / 2,
                             c->head_dim / 2};
    float **slots[] = {&s->x, &s->xn, &s->q, &s->att, &s->k, &s->v, &s->gate, &s->up, &s->cos_t, &s->sin_t};
    size_t total = 0;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) total += ((size_t)rows * widths[i] + 15) & ~(size_t)15;
    float *arena = kv_malloc(total * sizeof(float), err);
    if (!arena) return kv_wrap(err, "cpu backend: activations for %d rows", rows);
    free(s->rows_arena);
    s->rows_arena = arena;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        *slots[i] = arena;
        arena += ((size_t)rows * widths[i] + 15) & ~(size_t)15;
    }
    s->rows = rows;
    return 0;
}

static int scratch_floats(float **buf, size_t *cap, size_t want, const char *what, KvErr *err) {
    if (want <= *cap) return 0;
    float *p = kv_malloc(want * sizeof(float), err);
    if (!p) return kv_wrap(err, "cpu backend: %s", what);
    free(*buf);
    *buf = p;
    *cap = want;
    return 0;
}

/* The 4-bit kernels' per-thread weight tiles, for the widest input of any matrix. */
static int scratch_q4_tiles(CpuScratch *s, const ModelConfig *c, KvErr *err) {
    int threads = omp_get_max_threads();
    if (threads <= s->q4_tile_threads) return 0;
    int widest = c->d_model > c->d_ff ? c->d_model : c->d_ff;
    widest = widest > c->n_heads * c->head_dim ? widest : c->n_heads * c->head_dim;
    size_t bytes = CPU_Q4_TILE_FLOATS(widest) * (size_t)threads * sizeof(float);
    float *tiles = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!tiles) return kv_fail(err, "cpu backend: out of memory for %zu bytes of weight tiles", bytes);
    free(s->q4_tiles);
    s->q4_tiles = tiles;
    s->q4_tile_threads = threads;
    s->q4_tile_width = widest;
    return 0;
}

static void scratch_free(CpuScratch *s) {
    free(s->kv_view);
    free(s->k_view);
    free(s->code_tiles);
    free(s->wo);
    free(s->rows_arena);
    free(s->scores);
    free(s->probs);
    free(s->q_win);
    free(s->q4_tiles);
    free(s->xn_parts);
    memset(s, 0, sizeof *s);
}

/* Room in s->code_tiles for a forward of B sequences and M rows per chunk: the products on matrices held
 * only as codes that the code kernels do not make (past their rows, or a ggml type's blocks at any rows). */
static int scratch_code_tiles(CpuImpl *impl, const ModelConfig *c, int B, int M, KvErr *err) {
    int threads = omp_get_max_threads();
    size_t floats = 0;
    for (int i = 0; i <= cpu_lm_head_index(c); i++) {
        const CpuMatrix *w = &impl->weights.matrices[i];
        int rows = i < cpu_lm_head_index(c) ? M : B;
        if (w->f32 || (w->product[CPU_PRODUCT_FEW] && rows <= CPU_FEW_ROWS)) continue;
        size_t need = cpu_code_tile_floats(w->N, w->K, threads);
        floats = need > floats ? need : floats;
    }
    impl->s.code_tile_floats = floats;
    return scratch_floats(&impl->s.code_tiles, &impl->s.code_tile_cap, floats * threads, "weight tiles", err);
}

/* Thread `thread`'s scratch for the products. */
static CpuTile thread_tile(const CpuScratch *s, int thread) {
    return (CpuTile){s->q4_tiles + CPU_Q4_TILE_FLOATS(s->q4_tile_width) * (size_t)thread,
                     s->code_tiles ? s->code_tiles + s->code_tile_floats * (size_t)thread : NULL};
}

/* The product matrix w takes for M rows on `path`. */
static CpuProductFn *product_for(const CpuMatrix *w, const CpuPath *path, int M) {
    CpuProductFn *f = M <= path->max_rows ? w->product[path->kind] : NULL;
    return f ? f : w->product[CPU_PRODUCT_MANY];
}

/* This thread's share of the products of jobs[n_jobs] (sharing x) on `path`: consecutive jobs that take the
 * same product go as one call (the 4-bit kernels then split all their outputs between the threads at once). */
static void products_part(const CpuImpl *impl, const CpuPath *path, const CpuProductJob *jobs, int n_jobs,
                          const float *x, int M, int accumulate, const CpuTile *tile, int part, int parts) {
    for (int j0 = 0, j1; j0 < n_jobs; j0 = j1) {
        CpuProductFn *f = product_for(jobs[j0].w, path, M);
        for (j1 = j0 + 1; j1 < n_jobs && product_for(jobs[j1].w, path, M) == f; j1++) {}
        f(&impl->k, jobs + j0, j1 - j0, x, M, accumulate, tile, part, parts);
    }
}

/* The fused feed-forward (ops.h CpuFfnFn) gate and up take for M rows on `path`, or NULL where they take the
 * two products and the gate after a barrier. */
static CpuFfnFn *ffn_for(const CpuMatrix *gate, const CpuMatrix *up, const CpuPath *path, int M) {
    CpuFfnFn *f = M <= path->max_rows ? gate->ffn[path->kind] : NULL;
    return f == up->ffn[path->kind] ? f : NULL;
}

/* Whether every layer's W_O is kept in f32 (else an observation rebuilds it into s->wo). */
static int all_wo_f32(const CpuImpl *impl, const ModelConfig *c) {
    for (int l = 0; l < c->n_layers; l++)
        if (!impl->weights.matrices[l * W_PER_LAYER + W_O].f32) return 0;
    return 1;
}

/* Token `token`'s embedding row into x[D]. */
static void embed_row(const CpuImpl *impl, const ModelConfig *c, float *x, int token) {
    const CpuMatrix *w = &impl->weights.matrices[cpu_tok_embd_index(c)];
    if (w->f32) memcpy(x, w->f32 + (size_t)token * w->K, (size_t)w->K * sizeof(float));
    else cpu_rebuild_rows(&impl->k, x, &w->codes, token, token + 1, w->K);
}

/* ------------------------------------------------------------------------------------------- cache views */

/* Whether attention that wants one block of f32 rows per head (the BLAS prefill, the portable kernels) must
 * first copy this cache's rows into kv_view: an f16 cache (widened) or a view (its shared rows gathered). */
static int needs_view(const KvCache *kc) { return kc->elem == KV_ELEM_F16 || kc->base; }

/* Room to copy one layer of those caches among caches[B] after T more tokens: the largest layer's sum of
 * (len + T) * d keys and as many values (nothing when no cache needs it). */
static int scratch_views(CpuScratch *s, const ModelConfig *c, KvCache *const *caches, int B, int T, KvErr *err) {
    int K = c->n_kv_heads;
    size_t most = 0;
    for (int l = 0; l < c->n_layers; l++) {
        size_t rows = 0;
        for (int b = 0; b < B; b++)
            for (int kh = 0; needs_view(caches[b]) && kh < K; kh++)
                rows += (size_t)caches[b]->len[l * K + kh] + (size_t)T;
        most = rows > most ? rows : most;
    }
    if (!most) return 0;
    if (B * K > s->view_heads) {
        const float **views = kv_malloc(2 * (size_t)B * K * sizeof *views, err);
        if (!views) return kv_wrap(err, "cpu backend: cache views");
        free(s->k_view);
        s->k_view = views;
        s->v_view = views + (size_t)B * K;
        s->view_heads = B * K;
    }
    return scratch_floats(&s->kv_view, &s->kv_view_floats, 2 * most * (size_t)c->head_dim, "cache views", err);
}

/* Where sequence b's kv-head kh of `layer` starts in kv_view (the heads of the caches that need a view laid
 * out in (b, kh) order, keys then values, each len * d floats). */
static size_t view_offset(KvCache *const *caches, int b, int kh, int layer, int K, int d) {
    size_t at = 0;
    for (int bb = 0; bb <= b; bb++)
        for (int k = 0; needs_view(caches[bb]) && k < (bb == b ? kh : K); k++)
            at += 2 * (size_t)caches[bb]->len[layer * K + k] * d;
    return at;
}

/* All len entries of head i's keys (values when `values`) as f32 rows at dst, in order: the shared rows one
 * by one from the base, the own rows in one piece (widened when the cache is f16). */
static void copy_rows(const CpuKernels *k, float *dst, const KvCache *kc, int i, int values, int d) {
    int shared = kvcache_n_shared(kc, i), n = kc->len[i];
    for (int e = 0; e < n;) {
        int run = e < shared ? 1 : n - e; /* a shared row alone; the own rows in one piece */
        const void *src = values ? kvcache_value(kc, i, e) : kvcache_key(kc, i, e);
        size_t count = (size_t)run * d;
        if (kc->elem == KV_ELEM_F16) k->to_f32(dst + (size_t)e * d, src, count);
        else memcpy(dst + (size_t)e * d, src, count * sizeof(float));
        e += run;
    }
}

/* Copies this part's share of the (sequence, kv-head) heads of `layer` that need a view into kv_view and
 * points k_view / v_view at them: task t = b*K + kh goes to part t mod parts. */
static void fill_views_part(CpuScratch *s, const CpuKernels *k, KvCache *const *caches, int B, int K, int d, int layer,
                            int part, int parts) {
    for (int t = part; t < B * K; t += parts) {
        int b = t / K, kh = t % K, i = layer * K + kh;
        const KvCache *kc = caches[b];
        if (!needs_view(kc)) continue;
        float *keys = s->kv_view + view_offset(caches, b, kh, layer, K, d), *values = keys + (size_t)kc->len[i] * d;
        copy_rows(k, keys, kc, i, 0, d);
        copy_rows(k, values, kc, i, 1, d);
        s->k_view[t] = keys;
        s->v_view[t] = values;
    }
}

/* The f32 rows attention reads for sequence b's kv-head kh of the current layer (cache index i): the cache's
 * own when it holds them as one f32 block, else their copy in kv_view. */
static const float *key_rows(const CpuScratch *s, const KvCache *kc, int b, int kh, int K, int i) {
    return needs_view(kc) ? s->k_view[b * K + kh] : kc->k[i];
}
static const float *value_rows(const CpuScratch *s, const KvCache *kc, int b, int kh, int K, int i) {
    return needs_view(kc) ? s->v_view[b * K + kh] : kc->v[i];
}

/* One query row of the G query heads of sequence b's kv-head kh (cache index i) over its first n entries:
 * the rows read where they are when the kernel can (`direct`: cpu_attend_direct), else the f32 block of
 * key_rows / value_rows (kv_view filled for caches that need one). */
static void attend_heads(const CpuScratch *s, const CpuKernels *k, const KvCache *kc, int b, int kh, int K, int i, int n,
                         const float *q, float *out, float *probs, int d, float scale, int G, int direct) {
    if (direct && needs_view(kc)) {
        int shared = kvcache_n_shared(kc, i), half = kc->elem == KV_ELEM_F16;
        CpuRows keys = {shared ? kc->base->k[i] : NULL, shared ? kc->shared[i] : NULL, shared, kc->k[i], half};
        CpuRows values = {shared ? kc->base->v[i] : NULL, shared ? kc->shared[i] : NULL, shared, kc->v[i], half};
        cpu_attend_heads_rows(k, out, probs, q, &keys, &values, n, d, scale, G);
    } else {
        cpu_attend_heads(k, out, probs, q, key_rows(s, kc, b, kh, K, i), value_rows(s, kc, b, kh, K, i), n, d,
                              scale, G);
    }
}

/* Stores n keys and values (d floats each, rows `stride` floats apart) at entry `at` of cache head i, as the
 * cache's element type. */
static void cache_store(const CpuKernels *kt, KvCache *kc, int i, int at, const float *k, const float *v,
                        size_t stride, int n, int d) {
    for (int t = 0; t < n; t++) {
        size_t dst = (size_t)(at - kvcache_n_shared(kc, i) + t) * d; /* a view's own rows follow its shared ones */
        if (kc->elem == KV_ELEM_F16) {
            kt->to_f16(kvcache_k16(kc, i) + dst, k + t * stride, (size_t)d);
            kt->to_f16(kvcache_v16(kc, i) + dst, v + t * stride, (size_t)d);
        } else {
            memcpy(kc->k[i] + dst, k + t * stride, (size_t)d * sizeof(float));
            memcpy(kc->v[i] + dst, v + t * stride, (size_t)d * sizeof(float));
        }
    }
}

/* ------------------------------------------------------------------------------------------------ checks */

static int check_inputs(const Model *m, KvCache *const *caches, int B, const int *tokens, int T,
                        const ObserveHook *observe, const TraceHook *trace, KvErr *err) {
    const ModelConfig *c = &m->cfg;
    if (B < 1 || T < 1) return kv_fail(err, "cpu forward: need at least one sequence and one token (got %d x %d)", B, T);
    if (observe && B != 1) return kv_fail(err, "cpu forward: an observation hook needs one sequence (got %d)", B);
    if (trace && T != 1) return kv_fail(err, "cpu forward: a trace hook needs single-token steps (got %d tokens)", T);
    if (trace && observe) return kv_fail(err, "cpu forward: a trace hook and an observation hook in one forward");
    for (int i = 0; i < B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return kv_fail(err, "cpu forward: token id %d (sequence %d, index %d) outside the vocabulary of %d",
                           tokens[i], i / T, i % T, c->vocab_size);
    for (int b = 0; b < B; b++) {
        const KvCache *kc = caches[b];
        if (kc->on_device) return kv_fail(err, "cpu forward: cache of sequence %d lives on the GPU", b);
        if (kc->n_layers != c->n_layers || kc->n_kv_heads != c->n_kv_heads || kc->head_dim != c->head_dim)
            return kv_fail(err, "cpu forward: cache of sequence %d is %d layers x %d kv-heads x %d, the model %d x %d x %d",
                           b, kc->n_layers, kc->n_kv_heads, kc->head_dim, c->n_layers, c->n_kv_heads, c->head_dim);
        for (int i = 0; i < c->n_layers * c->n_kv_heads; i++)
            if (kc->len[i] + T > kc->cap[i])
                return kv_fail(err, "cpu forward: cache of sequence %d is full: layer %d kv-head %d holds %d of %d "
                                    "entries, %d more needed", b, i / c->n_kv_heads, i % c->n_kv_heads, kc->len[i],
                               kc->cap[i], T);
    }
    if (observe) {
        const KvCache *kc = caches[0];
        int L = kc->len[0] + T;
        if (kc->base) return kv_fail(err, "cpu forward: an observation needs a cache of its own, not a view");
        if (observe->on_device) return kv_fail(err, "cpu forward: an observation on the device needs the cuda backend");
        if (observe->window < 1) return kv_fail(err, "cpu forward: observation window %d must be positive", observe->window);
        if (observe->window > L)
            return kv_fail(err, "cpu forward: observation window %d is larger than the context of %d tokens",
                           observe->window, L);
        if (observe->window > T)
            return kv_fail(err, "cpu forward: observation window %d is larger than the %d tokens of this forward",
                           observe->window, T);
        if ((observe->attention_sums || observe->query_stats) && kc->len[0])
            return kv_fail(err, "cpu forward: attention sums and query statistics need a prefill on an empty cache "
                                "(this one holds %d entries)", kc->len[0]);
        for (int i = 1; i < c->n_layers * c->n_kv_heads; i++)
            if (kc->len[i] != kc->len[0])
                return kv_fail(err, "cpu forward: an observation needs a uniform cache (layer %d kv-head %d holds %d, "
                                    "the first head %d)", i / c->n_kv_heads, i % c->n_kv_heads, kc->len[i], kc->len[0]);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ passes */

/* The rows of one pass through the layers: B sequences with tc new tokens each, row b*tc + t the token
 * tokens[b*T + t0 + t] of sequence b at position caches[b]->n_pos + t0 + t, attending causally over caches[b]
 * (its entries up to its own). A prefill chunk is a pass of up to CPU_CHUNK tokens of each sequence, a decode
 * step a pass of one token of each (tc = 1); the layer code is the same. How attention runs follows from tc:
 * from CPU_BLOCK_MIN_ROWS rows per sequence on in blocks of two GEMMs, else query row by query row. */
typedef struct {
    CpuImpl *impl;
    const Model *m;
    KvCache *const *caches;
    const int *tokens;
    int B, T, t0, tc;
    const CpuPath *path;        /* the products': the chunk path, or the step path (decode = fast) */
    const ObserveHook *observe; /* each layer's observation, when this pass ends the forward */
    const TraceHook *trace;     /* every query row's attention, in order */
    float scale;                /* 1 / sqrt(d) */
    int any_view;               /* some cache needs a view (needs_view) */
    int direct;                 /* attention reads rows in place (cpu_attend_direct) */
    size_t prob_stride, score_stride; /* each thread's share of s->probs and s->scores */
} Pass;

static Pass pass_make(CpuImpl *impl, const Model *m, KvCache *const *caches, int B, const int *tokens, int T, int t0,
                      int tc, const CpuPath *path) {
    int d = m->cfg.head_dim, threads = omp_get_max_threads();
    Pass ps = {.impl = impl, .m = m, .caches = caches, .tokens = tokens, .B = B, .T = T, .t0 = t0, .tc = tc,
               .path = path, .scale = 1.0f / sqrtf((float)d), .direct = cpu_attend_direct(&impl->k, d),
               .prob_stride = impl->s.prob_floats / (size_t)threads,
               .score_stride = impl->s.score_floats / (size_t)threads};
    for (int b = 0; b < B; b++) ps.any_view |= needs_view(caches[b]);
    return ps;
}

/* Claims the pass's entries in every head of each sequence's cache, every layer's at once (their positions are
 * known before any layer runs): a row then stores its key and value at its own entry whichever thread runs it,
 * and a layer reads only its own heads. */
static void claim_entries(const Pass *ps) {
    const ModelConfig *c = &ps->m->cfg;
    for (int b = 0; b < ps->B; b++) {
        KvCache *kc = ps->caches[b];
        for (int i = 0; i < c->n_layers * c->n_kv_heads; i++) {
            for (int t = 0; t < ps->tc; t++) kc->pos[i][kc->len[i] + t] = kc->n_pos + ps->t0 + t;
            kc->len[i] += ps->tc;
        }
    }
}

/* A barrier for the threads of a decode step's one parallel region. A waiter spins briefly (the other
 * thread is usually microseconds away), then sleeps on a futex until the last one arrives: on a loaded
 * machine a thread spinning for a descheduled partner takes the core that partner, or another process,
 * needs (libgomp's default spins ~300000 pauses per wait: the 0.1 tokens/s of issue 15), and a yielding
 * one waits a whole scheduler period to run again (measured: 1.2 s per decode step). */
typedef struct {
    atomic_int arrived;
    atomic_int generation;
    atomic_int sleepers;
} StepBarrier;

#define CPU_BARRIER_SPINS 1000

static void step_barrier(StepBarrier *b, int parties) {
    if (parties == 1) return;
    int gen = atomic_load(&b->generation);
    if (atomic_fetch_add(&b->arrived, 1) == parties - 1) {
        atomic_store(&b->arrived, 0);
        atomic_store(&b->generation, gen + 1);
#if defined(__linux__)
        if (atomic_load(&b->sleepers)) syscall(SYS_futex, &b->generation, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
        return;
    }
    for (int spins = 0; spins < CPU_BARRIER_SPINS; spins++) {
        if (atomic_load_explicit(&b->generation, memory_order_acquire) != gen) return;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    atomic_fetch_add(&b->sleepers, 1);
    while (atomic_load(&b->generation) == gen) {
#if defined(__linux__)
        syscall(SYS_futex, &b->generation, FUTEX_WAIT_PRIVATE, gen, NULL, NULL, 0);
#else
        sched_yield();
#endif
    }
    atomic_fetch_sub(&b->sleepers, 1);
}

/* Who runs a pass's stages: the threads of a prefill chunk and of a decode step work differently, the layer
 * is the same. A chunk (barrier NULL) runs its layers on the calling thread and opens one parallel region per
 * stage (a row loop only from CPU_PARALLEL_ROWS rows), so an observation hook between stages runs outside any
 * region and may open its own. A decode step runs its layers on every thread of ONE parallel region (a fork
 * and join per stage, ~10 per layer, would cost more than the step's work): each thread takes its part of a
 * stage, then waits at the barrier, and norms every row itself into its own xn, which only its own products
 * read (no barrier). The products of a stage are the same kernels and slices either way, so the bits are. */
typedef struct {
    StepBarrier *barrier; /* NULL: a chunk */
    int part, parts;      /* a step: this thread, of the region's threads */
    float *xn;            /* the normed rows the products read: s->xn, or this thread's share of xn_parts */
    CpuTile tile;         /* a step: this thread's scratch for the products */
} Team;

typedef void RowFn(const Pass *ps, int layer, int row);
typedef void PartFn(const Pass *ps, const void *arg, const CpuTile *tile, int part, int parts);

/* fn for rows [0, n), each on its own: a chunk's in static shares, a step thread's every parts-th. */
static void team_rows(const Team *tm, const Pass *ps, int layer, int n, RowFn *fn) {
    if (!tm->barrier) {
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_ROWS)
        for (int r = 0; r < n; r++) fn(ps, layer, r);
        return;
    }
    for (int r = tm->part; r < n; r += tm->parts) fn(ps, layer, r);
    step_barrier(tm->barrier, tm->parts);
}

/* fn for tasks [0, n) of unequal cost (attention): a chunk's handed out as threads free up, a step thread's
 * every parts-th; `ordered`: all of them in order on one thread (a trace hook takes them so). */
static void team_tasks(const Team *tm, const Pass *ps, int layer, int n, RowFn *fn, int ordered) {
    if (!tm->barrier) {
#pragma omp parallel for schedule(dynamic) if (!ordered)
        for (int task = 0; task < n; task++) fn(ps, layer, task);
        return;
    }
    for (int task = ordered ? (tm->part ? n : 0) : tm->part; task < n; task += ordered ? 1 : tm->parts)
        fn(ps, layer, task);
    step_barrier(tm->barrier, tm->parts);
}

/* fn's parts (a product's output features): a chunk's omp_get_max_threads() parts in one region, each on its
 * thread's tile (cpu_matmul's split), a step thread's own part. */
static void team_parts(const Team *tm, const Pass *ps, PartFn *fn, const void *arg) {
    if (!tm->barrier) {
        int parts = omp_get_max_threads();
#pragma omp parallel for schedule(static)
        for (int p = 0; p < parts; p++) {
            CpuTile tile = thread_tile(&ps->impl->s, omp_get_thread_num());
            fn(ps, arg, &tile, p, parts);
        }
        return;
    }
    fn(ps, arg, &tm->tile, tm->part, tm->parts);
    step_barrier(tm->barrier, tm->parts);
}

/* Normed row r of the n rows the products read next: x's row r*stride + offset, normed by weight. */
static void norm_row(const Team *tm, const Pass *ps, const float *weight, int stride, int offset, int r) {
    const ModelConfig *c = &ps->m->cfg;
    int D = c->d_model;
    cpu_rmsnorm(tm->xn + (size_t)r * D, ps->impl->s.x + ((size_t)r * stride + offset) * D, weight, D, c->rms_eps);
}

/* Those n normed rows into tm->xn: a chunk's in static shares, a step thread's all by itself (no barrier). */
static void team_norm(const Team *tm, const Pass *ps, const float *weight, int n, int stride, int offset) {
    if (!tm->barrier) {
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_ROWS)
        for (int r = 0; r < n; r++) norm_row(tm, ps, weight, stride, offset, r);
        return;
    }
    for (int r = 0; r < n; r++) norm_row(tm, ps, weight, stride, offset, r);
}

typedef struct {
    const CpuProductJob *jobs;
    int n_jobs;
    const float *x;
    int M, accumulate;
} ProductCall;

static void products_fn(const Pass *ps, const void *arg, const CpuTile *tile, int part, int parts) {
    const ProductCall *pc = arg;
    products_part(ps->impl, ps->path, pc->jobs, pc->n_jobs, pc->x, pc->M, pc->accumulate, tile, part, parts);
}

/* The products of jobs[n_jobs] on the M rows x on the pass's path (products_part). */
static void team_products(const Team *tm, const Pass *ps, const CpuProductJob *jobs, int n_jobs, const float *x,
                          int M, int accumulate) {
    team_parts(tm, ps, products_fn, &(ProductCall){jobs, n_jobs, x, M, accumulate});
}

/* ------------------------------------------------------------------------------------------- layer stages */

/* Row r's token embedding into x and its RoPE angles, in double: positions reach 10^5 and an f32 product
 * would lose the low bits. */
static void embed_fn(const Pass *ps, int layer, int r) {
    (void)layer;
    const ModelConfig *c = &ps->m->cfg;
    CpuScratch *s = &ps->impl->s;
    int b = r / ps->tc, t = r % ps->tc, half = c->head_dim / 2;
    embed_row(ps->impl, c, s->x + (size_t)r * c->d_model, ps->tokens[b * ps->T + ps->t0 + t]);
    double p = (double)ps->caches[b]->n_pos + ps->t0 + t;
    for (int i = 0; i < half; i++) {
        s->cos_t[(size_t)r * half + i] = (float)cos(p * ps->m->rope_inv_freq[i]);
        s->sin_t[(size_t)r * half + i] = (float)sin(p * ps->m->rope_inv_freq[i]);
    }
}

/* Row r's query and key rotated, its key and value stored at its entry (claim_entries) of each kv-head of
 * `layer` in its sequence's cache. */
static void rope_store_fn(const Pass *ps, int layer, int r) {
    const ModelConfig *c = &ps->m->cfg;
    CpuScratch *s = &ps->impl->s;
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, half = d / 2, t = r % ps->tc;
    size_t hd = (size_t)H * d, kd = (size_t)K * d;
    cpu_rope(s->q + (size_t)r * hd, H, d, s->cos_t + (size_t)r * half, s->sin_t + (size_t)r * half);
    cpu_rope(s->k + (size_t)r * kd, K, d, s->cos_t + (size_t)r * half, s->sin_t + (size_t)r * half);
    KvCache *kc = ps->caches[r / ps->tc];
    for (int kh = 0; kh < K; kh++) {
        int i = layer * K + kh;
        size_t row = (size_t)r * kd + (size_t)kh * d;
        cache_store(&ps->impl->k, kc, i, kc->len[i] - ps->tc + t, s->k + row, s->v + row, kd, 1, d);
    }
}

/* This part's share of the views of `layer` (*arg). */
static void views_fn(const Pass *ps, const void *arg, const CpuTile *tile, int part, int parts) {
    (void)tile;
    const ModelConfig *c = &ps->m->cfg;
    fill_views_part(&ps->impl->s, &ps->impl->k, ps->caches, ps->B, c->n_kv_heads, c->head_dim, *(const int *)arg,
                    part, parts);
}

/* Task (b, kh, t): query row t of sequence b, the G query heads of its kv-head kh together, over the entries
 * up to its own; a trace hook takes their probabilities as they are computed. */
static void attend_row_fn(const Pass *ps, int layer, int task) {
    const ModelConfig *c = &ps->m->cfg;
    CpuScratch *s = &ps->impl->s;
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, G = H / K, tc = ps->tc;
    int b = task / (K * tc), kh = task / tc % K, t = task % tc, i = layer * K + kh;
    const KvCache *kc = ps->caches[b];
    int n = kc->len[i] - tc + t + 1;
    size_t at = ((size_t)b * tc + t) * H * d + (size_t)kh * G * d;
    float *probs = s->probs + ps->prob_stride * (size_t)omp_get_thread_num();
    attend_heads(s, &ps->impl->k, kc, b, kh, K, i, n, s->q + at, s->att + at, probs, d, ps->scale, G, ps->direct);
    for (int g = 0; ps->trace && g < G; g++)
        ps->trace->on_attention(ps->trace->user, b, layer, kh * G + g, probs + (size_t)g * n, kc->pos[i], n);
}

/* Task (b, h, tile): query head h of sequence b for a tile of CPU_TILE query rows (CPU_TILE x n scores, never
 * n x n); a tile needs only the keys up to its last row, so the causal upper triangle is skipped tile by tile. */
static void attend_tile_fn(const Pass *ps, int layer, int task) {
    const ModelConfig *c = &ps->m->cfg;
    CpuScratch *s = &ps->impl->s;
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, G = H / K, tc = ps->tc;
    int tiles = (tc + CPU_TILE - 1) / CPU_TILE;
    int b = task / (H * tiles), h = task / tiles % H, t_lo = task % tiles * CPU_TILE, i = layer * K + h / G;
    int rows = tc - t_lo < CPU_TILE ? tc - t_lo : CPU_TILE;
    size_t hd = (size_t)H * d, row0 = (size_t)b * tc + t_lo;
    const KvCache *kc = ps->caches[b];
    cpu_attend_block(&ps->impl->k, s->att + row0 * hd + (size_t)h * d, (int)hd, s->q + row0 * hd + (size_t)h * d,
                     (int)hd, key_rows(s, kc, b, h / G, K, i), value_rows(s, kc, b, h / G, K, i), rows,
                     kc->len[i] - tc + t_lo, d, ps->scale, s->scores + ps->score_stride * (size_t)omp_get_thread_num());
}

/* Attention of `layer` for every row of the pass, after the views of the caches that need one where the BLAS
 * blocks, the portable kernels or the observation (`observed`) read one f32 block per head. */
static void layer_attention(const Team *tm, const Pass *ps, int layer, int observed) {
    const ModelConfig *c = &ps->m->cfg;
    if (ps->any_view && (ps->tc >= CPU_BLOCK_MIN_ROWS || !ps->direct || observed))
        team_parts(tm, ps, views_fn, &layer);
    if (ps->tc >= CPU_BLOCK_MIN_ROWS)
        team_tasks(tm, ps, layer, ps->B * c->n_heads * ((ps->tc + CPU_TILE - 1) / CPU_TILE), attend_tile_fn, 0);
    else
        team_tasks(tm, ps, layer, ps->B * c->n_kv_heads * ps->tc, attend_row_fn, ps->trace != NULL);
}

/* Hands the layer's observation to the hook: the last w queries of the chunk, the full cache heads and W_O
 * (rebuilt from its codes into s->wo when the backend holds no f32 copy of it). */
static int layer_observe(CpuImpl *impl, const Model *m, const KvCache *kc, int tc, int layer,
                         const ObserveHook *observe, KvErr *err) {
    CpuScratch *s = &impl->s;
    const ModelConfig *c = &m->cfg;
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, w = observe->window;
    size_t hd = (size_t)H * d;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < w; i++)
            memcpy(s->q_win + ((size_t)h * w + i) * d, s->q + (size_t)(tc - w + i) * hd + (size_t)h * d,
                   (size_t)d * sizeof(float));
    const float *keys[K], *values[K];
    for (int kh = 0; kh < K; kh++) { /* an f16 cache: its rows widened to f32, what attention read */
        keys[kh] = key_rows(s, kc, 0, kh, K, layer * K + kh);
        values[kh] = value_rows(s, kc, 0, kh, K, layer * K + kh);
    }
    int L = kc->len[layer * K];
    Observation obs = {.layer = layer, .n_layers = c->n_layers, .L = L, .w = w, .H = H, .K = K,
                       .d = d, .D = c->d_model, .q_win = s->q_win, .keys = keys, .values = values,
                       .w_o = impl->weights.matrices[layer * W_PER_LAYER + W_O].f32,
                       .attn_sums = observe->attention_sums ? observe->attention_sums + (size_t)layer * H * L : NULL,
                       .query_stats = observe->query_stats ? observe->query_stats + (size_t)layer * H * (d + d * d)
                                                           : NULL,
                       .query_stats_from = observe->query_stats_from,
                       .rope_inv_freq = observe->query_stats ? m->rope_inv_freq : NULL};
    if (!obs.w_o) {
        cpu_rebuild_rows(&impl->k, s->wo, &impl->weights.matrices[layer * W_PER_LAYER + W_O].codes, 0, c->d_model,
                         (int)hd);
        obs.w_o = s->wo;
    }
    if (observe->on_layer(observe->user, &obs, err)) return kv_wrap(err, "observation of layer %d", layer);
    return 0;
}

/* The chunk's rows added to the layer's attention sums of a prefill of T tokens (ObserveHook.attention_sums). */
static void layer_attention_sums(const Pass *ps, int layer) {
    CpuScratch *s = &ps->impl->s;
    const ModelConfig *c = &ps->m->cfg;
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim;
    const float *keys[K];
    for (int kh = 0; kh < K; kh++) keys[kh] = key_rows(s, ps->caches[0], 0, kh, K, layer * K + kh);
    cpu_attention_sums(&ps->impl->k, ps->observe->attention_sums + (size_t)layer * H * ps->T, ps->T, s->q, H * d,
                       keys, H, K, ps->tc, ps->t0, d, ps->scale, CPU_TILE, s->scores, ps->score_stride);
}

typedef struct {
    CpuFfnFn *ffn;
    const CpuMatrix *gate, *up;
    const float *x;
    int M;
} FfnCall;

/* This part's share of the fused feed-forward's first half (ffn_for). */
static void ffn_fn(const Pass *ps, const void *arg, const CpuTile *tile, int part, int parts) {
    const FfnCall *f = arg;
    f->ffn(&ps->impl->k, ps->impl->s.gate, ps->impl->s.up, f->gate, f->up, f->x, f->M, tile, part, parts);
}

/* gate = silu(gate) * up over this part's share of the M*F values of *arg = M rows. */
static void swiglu_fn(const Pass *ps, const void *arg, const CpuTile *tile, int part, int parts) {
    (void)tile;
    size_t n = (size_t)*(const int *)arg * ps->m->cfg.d_ff, lo = n * part / parts, hi = n * (part + 1) / parts;
    ps->impl->k.swiglu(ps->impl->s.gate + lo, ps->impl->s.up + lo, hi - lo);
}

/* THE layer, for a prefill chunk and a decode step alike: norm, Q/K/V with their biases, RoPE and the cache
 * write, attention (then the observation, when this pass ends an observed forward), W_O onto the residual,
 * norm, the SwiGLU feed-forward (fused where the pass's path has it for these rows), W_down onto the residual. */
static int layer_forward(const Team *tm, const Pass *ps, int l, KvErr *err) {
    CpuImpl *impl = ps->impl;
    CpuScratch *s = &impl->s;
    const LayerWeights *w = &impl->weights.layers[l];
    const CpuMatrix *mw = impl->weights.matrices + l * W_PER_LAYER;
    int M = ps->B * ps->tc, observed = ps->observe && ps->t0 + ps->tc == ps->T;
    team_norm(tm, ps, w->attn_norm, M, 1, 0);
    const CpuProductJob qkv[3] = {{s->q, &mw[W_Q], w->bq}, {s->k, &mw[W_K], w->bk}, {s->v, &mw[W_V], w->bv}};
    team_products(tm, ps, qkv, 3, tm->xn, M, 0);
    if (ps->observe && ps->observe->query_stats) { /* before RoPE; only a chunk pass observes: no parallel region */
        int H = ps->m->cfg.n_heads, d = ps->m->cfg.head_dim;
        cpu_query_stats(ps->observe->query_stats + (size_t)l * H * (d + d * d), s->q, H * d, H, d, ps->tc, ps->t0,
                        ps->observe->query_stats_from, observed);
    }
    team_rows(tm, ps, l, M, rope_store_fn);
    /* the attention sums read every chunk's f32 rows (only a chunk pass has an observe hook: no parallel region) */
    int summed = ps->observe && ps->observe->attention_sums;
    layer_attention(tm, ps, l, observed || summed);
    if (summed) layer_attention_sums(ps, l);
    if (observed && layer_observe(impl, ps->m, ps->caches[0], ps->tc, l, ps->observe, err)) return -1;
    team_products(tm, ps, &(CpuProductJob){s->x, &mw[W_O], NULL}, 1, s->att, M, 1);
    team_norm(tm, ps, w->ffn_norm, M, 1, 0);
    CpuFfnFn *ffn = ffn_for(&mw[W_GATE], &mw[W_UP], ps->path, M);
    if (ffn) {
        team_parts(tm, ps, ffn_fn, &(FfnCall){ffn, &mw[W_GATE], &mw[W_UP], tm->xn, M});
    } else {
        const CpuProductJob gate_up[2] = {{s->gate, &mw[W_GATE], NULL}, {s->up, &mw[W_UP], NULL}};
        team_products(tm, ps, gate_up, 2, tm->xn, M, 0);
        team_parts(tm, ps, swiglu_fn, &M);
    }
    team_products(tm, ps, &(CpuProductJob){s->x, &mw[W_DOWN], NULL}, 1, s->gate, M, 1);
    return 0;
}

/* The pass's rows through every layer, then (logits non-NULL) each sequence's last row through the final norm
 * and the head into logits[B][V]. */
static int pass_run(const Team *tm, const Pass *ps, float *logits, KvErr *err) {
    const ModelConfig *c = &ps->m->cfg;
    team_rows(tm, ps, 0, ps->B * ps->tc, embed_fn);
    for (int l = 0; l < c->n_layers; l++)
        if (layer_forward(tm, ps, l, err)) return -1;
    if (logits) {
        team_norm(tm, ps, ps->impl->weights.out_norm, ps->B, ps->tc, ps->tc - 1);
        const CpuProductJob head = {logits, &ps->impl->weights.matrices[cpu_lm_head_index(c)], NULL};
        team_products(tm, ps, &head, 1, tm->xn, ps->B, 0);
    }
    return 0;
}

/* Whether every matrix has a fast product: the fast decode's condition (it reads codes only). */
static int all_fast(const CpuImpl *impl, const ModelConfig *c) {
    for (int i = 0; i <= cpu_lm_head_index(c); i++)
        if (!impl->weights.matrices[i].product[CPU_PRODUCT_FAST]) return 0;
    return 1;
}

/* Every forward runs as passes of the layer above: a single-token step (any B, with or without a trace hook)
 * as ONE pass on the step path inside one parallel region, so the path a backend reports (backend_options_used)
 * is the one that ran; anything else (a prefill, a question feed, an observation) in chunks of CPU_CHUNK
 * tokens of every sequence on the chunk path. On the exact path the two take the same products for the same
 * rows, so a decode step's logits equal a one-token chunk's bit for bit. */
static int cpu_forward(Backend *be, KvCache *const *caches, int B, const int *tokens, int T, float *logits,
                       const ObserveHook *observe, const TraceHook *trace, KvErr *err) {
    const Model *m = be->model;
    const ModelConfig *c = &m->cfg;
    CpuImpl *impl = be->impl;
    CpuScratch *s = &impl->s;
    if (check_inputs(m, caches, B, tokens, T, observe, trace, err)) return -1;
    /* the observation window must fall inside the last chunk */
    int chunk = observe && observe->window >= CPU_CHUNK ? observe->window + 1 : CPU_CHUNK;
    int rows = B * (T < chunk ? T : chunk);
    int max_keys = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < c->n_layers * c->n_kv_heads; i++)
            if (caches[b]->len[i] + T > max_keys) max_keys = caches[b]->len[i] + T;
    if (scratch_rows(s, c, rows, err) ||
        scratch_floats(&s->probs, &s->prob_floats,
                       (size_t)omp_get_max_threads() * (size_t)(c->n_heads / c->n_kv_heads) * max_keys, "attention rows",
                       err) ||
        scratch_floats(&s->scores, &s->score_floats, (size_t)omp_get_max_threads() * CPU_TILE * max_keys,
                       "attention scores", err) ||
        (observe && scratch_floats(&s->q_win, &s->qwin_floats, (size_t)c->n_heads * observe->window * c->head_dim,
                                   "observation queries", err)) ||
        (observe && !all_wo_f32(impl, c) &&
         scratch_floats(&s->wo, &s->wo_floats, (size_t)c->d_model * c->n_heads * c->head_dim,
                        "the observation's output projection", err)) ||
        scratch_q4_tiles(s, c, err) || scratch_code_tiles(impl, c, B, rows, err) ||
        scratch_views(s, c, caches, B, T, err))
        return -1;
    if (T == 1 && !observe) {
        if (scratch_floats(&s->xn_parts, &s->xn_part_floats, (size_t)omp_get_max_threads() * B * c->d_model,
                           "per-thread normed rows", err))
            return -1;
        Pass ps = pass_make(impl, m, caches, B, tokens, 1, 0, 1, &impl->step_path);
        ps.trace = trace;
        claim_entries(&ps);
        StepBarrier barrier = {0, 0, 0};
        int failed = 0; /* only an observation fails, and a step has none: every thread returns 0 */
#pragma omp parallel reduction(| : failed)
        {
            int p = omp_get_thread_num();
            Team tm = {&barrier, p, omp_get_num_threads(), s->xn_parts + (size_t)p * B * c->d_model, thread_tile(s, p)};
            failed |= pass_run(&tm, &ps, logits, err) != 0;
        }
        if (failed) return -1;
    } else {
        for (int t0 = 0; t0 < T;) {
            int tc = T - t0 < chunk ? T - t0 : chunk;
            int rest = T - t0 - tc;
            if (observe && rest > 0 && rest < observe->window) tc -= observe->window - rest;
            Pass ps = pass_make(impl, m, caches, B, tokens, T, t0, tc, &impl->chunk_path);
            ps.observe = observe;
            claim_entries(&ps);
            Team tm = {.xn = s->xn};
            if (pass_run(&tm, &ps, t0 + tc == T ? logits : NULL, err)) return -1;
            t0 += tc;
        }
    }
    for (int b = 0; b < B; b++) caches[b]->n_pos += T;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ caches */

static int cpu_cache_new(Backend *be, KvCache **out, int capacity, KvErr *err) {
    const ModelConfig *c = &be->model->cfg;
    return kvcache_new_elem(out, c->n_layers, c->n_kv_heads, c->head_dim, capacity,
                            ((const CpuImpl *)be->impl)->cache_elem, err);
}

static int cpu_cache_gather(Backend *be, const KvCache *src, const KeepSet *keep, int extra_capacity, KvCache **out,
                            KvErr *err) {
    (void)be;
    return kvcache_gather(out, src, keep, extra_capacity, err);
}

static int cpu_cache_view(Backend *be, const KvCache *src, const KeepSet *keep, int extra_capacity, KvCache **out,
                          KvErr *err) {
    (void)be;
    return kvcache_view(out, src, keep, extra_capacity, err);
}

/* The cache's arena and its row of logits (the batch's other scratch is shared by its sequences). */
static double cpu_variant_bytes(Backend *be, const KvCache *src, const KeepSet *keep, int extra_capacity, int view) {
    return (double)kvcache_keep_bytes(src, keep, extra_capacity, view) + 4.0 * be->model->cfg.vocab_size;
}

static void cpu_cache_free(Backend *be, KvCache *c) {
    (void)be;
    kvcache_free(c);
}

static void cpu_destroy(Backend *be) {
    if (!be) return;
    CpuImpl *impl = be->impl;
    if (impl) {
        scratch_free(&impl->s);
        cpu_weights_free(&impl->weights, &be->model->cfg);
    }
    free(impl);
    free(be);
}

int cpu_backend_open(Backend **out, const Model *m, const BackendOptions *opt, KvErr *err) {
    *out = NULL;
    const ModelConfig *c = &m->cfg;
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads || c->head_dim < 2 || c->head_dim % 2)
        return kv_fail(err, "cpu backend: %s: unsupported head layout (%d heads, %d kv-heads, head dim %d)", m->source,
                       c->n_heads, c->n_kv_heads, c->head_dim);
    Backend *be = kv_calloc(1, sizeof *be, err);
    CpuImpl *impl = be ? kv_calloc(1, sizeof *impl, err) : NULL;
    if (!impl) {
        free(be);
        return -1;
    }
    openblas_set_num_threads(1);
    be->name = "cpu";
    be->model = m;
    be->impl = impl;
    be->cache_new = cpu_cache_new;
    be->cache_gather = cpu_cache_gather;
    be->cache_view = cpu_cache_view;
    be->variant_bytes = cpu_variant_bytes;
    be->views_fast = 1; /* tests/bench_runs.c: 15 sequences on views 3.8x one sequence, on copies 2.8x */
    be->cache_free = cpu_cache_free;
    be->forward = cpu_forward;
    be->destroy = cpu_destroy;
    int fast = opt->decode == BACKEND_DECODE_FAST;
    impl->chunk_path = (CpuPath){CPU_PRODUCT_FEW, CPU_FEW_ROWS};
    impl->step_path = fast ? (CpuPath){CPU_PRODUCT_FAST, INT_MAX} : impl->chunk_path;
    impl->cache_elem = opt->cache;
    if (cpu_kernels_init(&impl->k, opt->simd, opt->fast_kernel, err)) {
        kv_wrap(err, "cpu backend");
        cpu_destroy(be);
        return -1;
    }
    if (!cpu_blas_order_agrees(&impl->k)) impl->k.blas_order = NULL;
    if (!cpu_gemv_order_agrees()) memset(impl->k.gemv_order, 0, sizeof impl->k.gemv_order);
    if (cpu_weights_take(&impl->weights, &impl->k, m, err)) {
        cpu_destroy(be);
        return -1;
    }
    /* the fast decode reads codes only: a model with f32 matrices would decode exactly under its label */
    if (fast && !all_fast(impl, c)) {
        kv_fail(err, "cpu backend: %s: the fast decode needs every matrix held as GGUF block codes of Q4_0, Q4_1, Q5_0, "
                     "Q5_1, Q8_0, Q4_K, Q5_K or Q6_K; this model has matrices in f32 or in other block types: use the "
                     "exact decode",
                m->source);
        cpu_destroy(be);
        return -1;
    }
    if (impl->cache_elem == KV_ELEM_F16)
        fprintf(stderr, "kvbench: cpu backend: f16 KV cache: keys and values stored as IEEE binary16, half the cache "
                        "memory; answers may differ from the exact f32 cache\n");
    if (fast)
        fprintf(stderr, "kvbench: cpu backend: FAST decode (%s kernel): activations quantised to int8 per 32 weights, "
                        "integer dot products; answers may differ from the exact path\n",
                cpu_fast_kernel_name(impl->k.fast));
    be->used = (BackendOptions){.decode = opt->decode, .cache = opt->cache, .simd_auto = impl->k.simd == impl->k.simd_auto};
    snprintf(be->used.simd, sizeof be->used.simd, "%s", cpu_simd_name(impl->k.simd));
    snprintf(be->used.fast_kernel, sizeof be->used.fast_kernel, "%s", fast ? cpu_fast_kernel_name(impl->k.fast) : "");
    *out = be;
    return 0;
}
