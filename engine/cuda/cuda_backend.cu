/* cuda_backend.cu — the "cuda" backend: the interface of engine/backend.h on one NVIDIA GPU.
 *
 * Weights live on the device in bf16 (one cudaMalloc carved by a size table; Q/K/V and gate/up fused so each
 * is one GEMM), converted at open from what model_stream_weights hands over one tensor at a time: the host
 * arena, or for a model opened with model_load_config the file itself, so no f32 copy of a 32B model is ever
 * made on the host. The residual stream stays f32; cuBLAS
 * GEMMs take bf16 and accumulate in fp32. A forward runs in chunks of at most `rows` token rows so a 128k
 * context needs activations for one chunk only; the keys and values of every token go straight into the
 * cache, which the chunk's attention reads. Caches (KvCache with on_device = 1) keep K and V in device bf16,
 * one arena per cache; len, cap and pos stay in host memory, and each chunk uploads a table of (pointer, len)
 * per (sequence, layer, kv-head) for the kernels. The observation for the policies is computed on the device
 * (window attention, projected value norms) and copied to host f32, with the raw tensors unless the hook
 * reads only those two (derived_only), or handed over in device memory to a hook that scores there (on_device,
 * policies/cuda_policy.h).
 * Shape legend: see cuda_internal.h. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
extern "C" {
#include "cuda_api.h"
#include "gather_plan.h"
}

/* Token rows per chunk: large enough for GEMMs at full speed, small enough that 32B-class activations fit. */
enum { CHUNK_ROWS = 4096 };
static const size_t MEM_MARGIN = (size_t)768 << 20; /* cuBLAS workspace, CUDA context, fragmentation */
/* What the sweep's planner leaves free beyond MEM_MARGIN (which every allocation keeps): cudaMalloc rounds
 * each cache up to whole 2 MiB pages, and the decode's grown buffers are counted per variant only roughly. */
static const size_t PLAN_RESERVE = (size_t)256 << 20;
static const size_t ALLOC_PAGE = (size_t)2 << 20;

static double gib(size_t bytes) { return (double)bytes / (double)(1u << 30); }

/* ------------------------------------------------------------------------------------------------------ */
/* Device check                                                                                            */

extern "C" int cuda_device_query(CudaDeviceInfo *info, KvErr *err) {
    memset(info, 0, sizeof *info);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaRuntimeGetVersion(&info->runtime_version);
    cudaDriverGetVersion(&info->driver_version);
    int rt = info->runtime_version, drv = info->driver_version;
    if (drv == 0)
        return kv_fail(err, "backend 'cuda': no NVIDIA driver found (cudaGetDeviceCount: %s); needed: an NVIDIA "
                            "GPU of compute capability 9.0 or newer with a driver for CUDA %d.%d; the cpu backend "
                            "still works (--backend cpu)", cudaGetErrorString(e), rt / 1000, rt % 1000 / 10);
    if (e == cudaErrorInsufficientDriver || drv < rt)
        return kv_fail(err, "backend 'cuda': the NVIDIA driver supports CUDA %d.%d; needed: CUDA %d.%d or newer for "
                            "this build; update the driver or use --backend cpu", drv / 1000, drv % 1000 / 10,
                       rt / 1000, rt % 1000 / 10);
    if (e != cudaSuccess || n == 0)
        return kv_fail(err, "backend 'cuda': no usable NVIDIA GPU (cudaGetDeviceCount: %s, %d devices); needed: "
                            "one GPU of compute capability 9.0 or newer; the cpu backend still works (--backend cpu)",
                       e == cudaSuccess ? "ok" : cudaGetErrorString(e), n);
    cudaDeviceProp p;
    CU_CHECK(cudaGetDeviceProperties(&p, 0));
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->n_sms = p.multiProcessorCount;
    info->l2_bytes = (size_t)p.l2CacheSize;
    if (p.major < 9)
        return kv_fail(err, "backend 'cuda': GPU 0 (%s) has compute capability %d.%d; needed: 9.0 (Hopper) or newer, "
                            "the code this build carries (add a -gencode for your GPU to CUFLAGS in the Makefile), or "
                            "use --backend cpu", p.name, p.major, p.minor);
    CU_CHECK(cudaSetDevice(0));
    CU_CHECK(cudaMemGetInfo(&info->mem_free, &info->mem_total));
    return 0;
}

/* Fails with what was needed and what is free when `bytes` more would not fit. */
static int ensure_free(size_t bytes, const char *what, KvErr *err) {
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (bytes + MEM_MARGIN > free_b)
        return kv_fail(err, "backend 'cuda': out of GPU memory for %s: needs %.2f GiB (+%.2f GiB margin), %.2f GiB "
                            "free of %.2f GiB", what, gib(bytes), gib(MEM_MARGIN), gib(free_b), gib(total_b));
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Buffers grown on demand                                                                                 */

typedef struct {
    void *p;
    size_t bytes;
} DevBuf;

static int devbuf_reserve(DevBuf *b, size_t bytes, const char *what, KvErr *err) {
    if (b->bytes >= bytes) return 0;
    if (b->p) CU_CHECK(cudaFree(b->p));
    b->p = NULL;
    b->bytes = 0;
    if (ensure_free(bytes, what, err)) return -1;
    CU_CHECK(cudaMalloc(&b->p, bytes));
    b->bytes = bytes;
    return 0;
}

/* Pinned host memory, so device-to-host copies run at full speed and asynchronously. */
static int hostbuf_reserve(DevBuf *b, size_t bytes, KvErr *err) {
    if (b->bytes >= bytes) return 0;
    if (b->p) CU_CHECK(cudaFreeHost(b->p));
    b->p = NULL;
    b->bytes = 0;
    CU_CHECK(cudaMallocHost(&b->p, bytes));
    b->bytes = bytes;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* The backend's state                                                                                     */

typedef struct {
    bf16 *wqkv;               /* [(H+2K)d][D]: wq, wk, wv stacked */
    bf16 *wo;                 /* [D][H*d] */
    bf16 *wgu;                /* [2F][D]: w_gate, w_up stacked */
    bf16 *wdown;              /* [D][F] */
    float *bqkv;              /* [(H+2K)d] or NULL */
    float *attn_norm, *ffn_norm; /* [D] */
} CuLayer;

/* One layer's observation on its way to the hook: copied into pinned host memory on the stream, handed over
 * once `ready` has passed, while the GPU already works on the next layer (the policies' scoring on the host
 * and the next layer's prefill overlap). */
typedef struct {
    DevBuf host;              /* pinned: key/value pointer arrays, then attn, q_win, keys, values, value norms */
    cudaEvent_t ready;        /* recorded after the copies */
    Observation obs;
    int layer;                /* -1: nothing waiting */
} ObsSlot;

typedef struct {
    const Model *m;
    cudaStream_t st;
    cublasHandle_t blas;
    void *weights;            /* the one weight allocation */
    size_t weight_bytes;
    bf16 *tok_embd, *lm_head; /* [V][D]; the same pointer when tied */
    float *out_norm, *inv_freq;
    CuLayer *layers;          /* [N] host array of device pointers */
    int rows;                 /* token rows per chunk */
    int nu_rows;              /* value rows per projection of the value norms: its f32 output stays in L2 */
    void *act;                /* the one activation allocation */
    size_t act_bytes;
    float *x, *qkv, *gu;      /* [rows][D], [rows][(H+2K)d], [rows][2F] */
    bf16 *xb, *q, *ao, *ffn;  /* [rows][D], [rows][H*d], [rows][H*d], [rows][F] */
    DevBuf table, table_host; /* DevHead[B*N*K] then int seq_pos[B] then int tokens[B*Tc] */
    DevBuf logits, xlast;     /* [B][V] f32, [B][D] bf16 */
    DevBuf next_ids;          /* [B] int: the greedy picks of forward_greedy */
    DevBuf part_o, part_ml;   /* split-K partials */
    DevBuf probs, probs_host; /* naive attention rows: observation attn or trace */
    DevBuf obs_dev;           /* observation staging (f32) */
    ObsSlot observed[2];      /* layers l and l-1 of an observed chunk, by parity */
    DevBuf gather_rows;       /* cache gather index lists */
} Cuda;

/* A device cache: the KvCache handed out is the first member. A view's arena holds its own rows, then its
 * shared entries' row indices into the base (int, head after head: c.shared[i] points there). */
typedef struct {
    KvCache c;
    long long *row0;          /* [N*K] first own row of each head in the K (and V) region of the arena */
    bf16 *k_base, *v_base;
    void *host;               /* len, cap, k, v, pos (and a view's n_shared, shared) arrays and pos storage */
} CudaCache;

static Cuda *impl_of(Backend *b) { return (Cuda *)b->impl; }

/* ------------------------------------------------------------------------------------------------------ */
/* Weights                                                                                                 */

/* Assigns every device pointer at base + offset (256-byte aligned) and returns the total; called once with
 * base 0 to size the allocation, once with the real base. */
static size_t weight_layout(Cuda *cu, uintptr_t base) {
    const ModelConfig *c = &cu->m->cfg;
    size_t D = c->d_model, d = c->head_dim, H = c->n_heads, K = c->n_kv_heads, F = c->d_ff, V = c->vocab_size;
    size_t off = 0;
#define CARVE(ptr, type, count)                                                                             \
    do {                                                                                                    \
        (ptr) = (type *)(base + off);                                                                       \
        off += ((count) * sizeof(type) + 255) / 256 * 256;                                                  \
    } while (0)
    CARVE(cu->tok_embd, bf16, V * D);
    if (c->tied_embeddings)
        cu->lm_head = cu->tok_embd;
    else
        CARVE(cu->lm_head, bf16, V * D);
    CARVE(cu->out_norm, float, D);
    CARVE(cu->inv_freq, float, d / 2);
    for (int l = 0; l < c->n_layers; l++) {
        CuLayer *L = &cu->layers[l];
        CARVE(L->wqkv, bf16, (H + 2 * K) * d * D);
        CARVE(L->wo, bf16, D * H * d);
        CARVE(L->wgu, bf16, 2 * F * D);
        CARVE(L->wdown, bf16, D * F);
        if (c->qkv_bias)
            CARVE(L->bqkv, float, (H + 2 * K) * d);
        else
            L->bqkv = NULL;
        CARVE(L->attn_norm, float, D);
        CARVE(L->ffn_norm, float, D);
    }
#undef CARVE
    return off;
}

/* One model_stream_weights pass: each host f32 tensor goes through a device f32 staging buffer, converted to
 * bf16 by a kernel when its destination is a matrix. */
typedef struct {
    Cuda *cu;
    float *stage;             /* device, stage_n floats */
    size_t stage_n;
    int n_seen;
} Upload;

/* Where a weight goes on the device: its first element, and whether it is stored bf16 (matrices) or f32. */
static void *weight_dst(Cuda *cu, WeightRole role, int layer, int *is_bf16) {
    const ModelConfig *c = &cu->m->cfg;
    size_t D = c->d_model, d = c->head_dim, H = c->n_heads, K = c->n_kv_heads, F = c->d_ff;
    const CuLayer *L = layer >= 0 && layer < c->n_layers ? &cu->layers[layer] : NULL;
    *is_bf16 = 1;
    switch (role) {
    case WEIGHT_TOK_EMBD: return cu->tok_embd;
    case WEIGHT_LM_HEAD: return cu->lm_head;
    case WEIGHT_Q: return L ? L->wqkv : NULL;
    case WEIGHT_K: return L ? L->wqkv + H * d * D : NULL;
    case WEIGHT_V: return L ? L->wqkv + (H + K) * d * D : NULL;
    case WEIGHT_O: return L ? L->wo : NULL;
    case WEIGHT_GATE: return L ? L->wgu : NULL;
    case WEIGHT_UP: return L ? L->wgu + F * D : NULL;
    case WEIGHT_DOWN: return L ? L->wdown : NULL;
    default: break;
    }
    *is_bf16 = 0;
    switch (role) {
    case WEIGHT_OUT_NORM: return cu->out_norm;
    case WEIGHT_ATTN_NORM: return L ? L->attn_norm : NULL;
    case WEIGHT_FFN_NORM: return L ? L->ffn_norm : NULL;
    case WEIGHT_Q_BIAS: return L && L->bqkv ? L->bqkv : NULL;
    case WEIGHT_K_BIAS: return L && L->bqkv ? L->bqkv + H * d : NULL;
    case WEIGHT_V_BIAS: return L && L->bqkv ? L->bqkv + (H + K) * d : NULL;
    default: return NULL;
    }
}

static int upload_weight(void *user, WeightRole role, int layer, const float *data, uint64_t rows, uint64_t cols,
                         KvErr *err) {
    Upload *u = (Upload *)user;
    Cuda *cu = u->cu;
    int is_bf16;
    void *dst = weight_dst(cu, role, layer, &is_bf16);
    if (!dst) return kv_fail(err, "backend 'cuda': weight %d of layer %d has no place on the device", (int)role, layer);
    size_t n = (size_t)rows * cols;
    for (size_t i = 0; i < n; i += u->stage_n) {
        size_t k = n - i < u->stage_n ? n - i : u->stage_n;
        float *to = is_bf16 ? u->stage : (float *)dst + i;
        CU_CHECK(cudaMemcpyAsync(to, data + i, k * sizeof(float), cudaMemcpyHostToDevice, cu->st));
        if (is_bf16 && launch_f32_to_bf16(u->stage, (bf16 *)dst + i, k, cu->st, err)) return -1;
        /* data is only valid during this call, and the staging buffer is reused by the next piece */
        CU_CHECK(cudaStreamSynchronize(cu->st));
    }
    u->n_seen++;
    return 0;
}

static int upload_weights(Cuda *cu, KvErr *err) {
    const ModelConfig *c = &cu->m->cfg;
    Upload u = {cu, NULL, (size_t)16 << 20, 0};
    CU_CHECK(cudaMalloc(&u.stage, u.stage_n * sizeof(float)));
    int rc = model_stream_weights(cu->m, upload_weight, &u, err);
    if (!rc) {
        /* Every device weight written exactly once: the roles of one stream cover the size table. */
        int want = 2 + (cu->lm_head != cu->tok_embd) + c->n_layers * (9 + 3 * (c->qkv_bias != 0));
        if (u.n_seen != want)
            rc = kv_fail(err, "backend 'cuda': %s streamed %d weights, the device layout has %d", cu->m->source,
                         u.n_seen, want);
    }
    if (!rc) {
        cudaError_t ce = cudaMemcpyAsync(cu->inv_freq, cu->m->rope_inv_freq, (size_t)c->head_dim / 2 * sizeof(float),
                                         cudaMemcpyHostToDevice, cu->st);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(cu->st);
        if (ce != cudaSuccess) rc = kv_fail(err, "backend 'cuda': uploading the RoPE frequencies: %s", cudaGetErrorString(ce));
    }
    cudaFree(u.stage);
    return rc;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Caches                                                                                                  */

static void cuda_cache_free(Backend *b, KvCache *c) {
    (void)b;
    if (!c) return;
    CudaCache *cc = (CudaCache *)c;
    cudaFree(c->arena);
    free(cc->host);
    free(cc);
}

/* Device bytes of a cache with caps[i] entries for head i of which n_shared[i] are a view's shared entries
 * (n_shared NULL: none): own K and V rows, and an index per shared entry. */
static size_t cache_device_bytes(const int *caps, const int *n_shared, int NK, int d, long long *own_rows,
                                 long long *shared_rows) {
    long long own = 0, shared = 0;
    for (int i = 0; i < NK; i++) {
        int sh = n_shared ? n_shared[i] : 0;
        own += caps[i] - sh;
        shared += sh;
    }
    if (own_rows) *own_rows = own;
    if (shared_rows) *shared_rows = shared;
    return (size_t)own * d * sizeof(bf16) * 2 + (size_t)shared * sizeof(int);
}

/* A cache with caps[i] entries for head i, empty; for a view of base, the first n_shared[i] of them are the
 * base's rows (their indices filled by the caller). */
static int cache_alloc(Cuda *cu, const int *caps, const KvCache *base, const int *n_shared, CudaCache **out,
                       KvErr *err) {
    const ModelConfig *cfg = &cu->m->cfg;
    int NK = cfg->n_layers * cfg->n_kv_heads, d = cfg->head_dim;
    long long rows = 0, shared = 0, entries = 0;
    int most = 0;
    size_t bytes = cache_device_bytes(caps, n_shared, NK, d, &rows, &shared);
    for (int i = 0; i < NK; i++) {
        entries += caps[i];
        most = caps[i] > most ? caps[i] : most;
    }
    char what[200];
    if (n_shared)
        snprintf(what, sizeof what, "a KV cache view of %lld shared entries and room for %lld of its own (%d layers x "
                 "%d kv-heads)", shared, rows, cfg->n_layers, cfg->n_kv_heads);
    else
        snprintf(what, sizeof what, "a KV cache of %lld entries (%d layers x %d kv-heads, up to %d per head)", rows,
                 cfg->n_layers, cfg->n_kv_heads, most);
    if (ensure_free(bytes, what, err)) return -1;
    CudaCache *cc = (CudaCache *)kv_calloc(1, sizeof *cc, err);
    if (!cc) return -1;
    size_t host_bytes = (size_t)NK * (3 * sizeof(void *) + sizeof(long long) + 2 * sizeof(int)) +
                        (size_t)entries * sizeof(int) + (n_shared ? (size_t)NK * (sizeof(void *) + sizeof(int)) : 0);
    cc->host = kv_calloc(1, host_bytes, err);
    if (!cc->host) {
        free(cc);
        return -1;
    }
    KvCache *c = &cc->c;
    char *p = (char *)cc->host;
    c->k = (float **)p, p += NK * sizeof(void *);
    c->v = (float **)p, p += NK * sizeof(void *);
    c->pos = (int **)p, p += NK * sizeof(void *);
    cc->row0 = (long long *)p, p += NK * sizeof(long long);
    if (n_shared) {
        c->shared = (int **)p, p += NK * sizeof(void *);
        c->n_shared = (int *)p, p += NK * sizeof(int);
    }
    c->len = (int *)p, p += NK * sizeof(int);
    c->cap = (int *)p, p += NK * sizeof(int);
    int *pos_store = (int *)p;
    if (cudaMalloc(&c->arena, bytes ? bytes : 256) != cudaSuccess) {
        free(cc->host);
        free(cc);
        return kv_fail(err, "backend 'cuda': cudaMalloc of %.2f GiB for %s failed", gib(bytes), what);
    }
    c->arena_bytes = bytes;
    c->n_layers = cfg->n_layers;
    c->n_kv_heads = cfg->n_kv_heads;
    c->head_dim = d;
    c->on_device = 1;
    cc->k_base = (bf16 *)c->arena;
    cc->v_base = cc->k_base + (size_t)rows * d;
    int *idx = (int *)(cc->v_base + (size_t)rows * d);
    c->base = base;
    for (int i = 0, pos_row = 0; i < NK; i++) {
        int sh = n_shared ? n_shared[i] : 0;
        cc->row0[i] = i ? cc->row0[i - 1] + (c->cap[i - 1] - (n_shared ? n_shared[i - 1] : 0)) : 0;
        c->cap[i] = caps[i];
        c->k[i] = (float *)(cc->k_base + (size_t)cc->row0[i] * d); /* bf16 on the device, typed as in kvcache.h */
        c->v[i] = (float *)(cc->v_base + (size_t)cc->row0[i] * d);
        c->pos[i] = pos_store + pos_row;
        pos_row += caps[i];
        if (n_shared) {
            c->n_shared[i] = sh;
            c->shared[i] = idx; /* device memory, like k and v */
            idx += sh;
        }
    }
    *out = cc;
    return 0;
}

static int cuda_cache_new(Backend *b, KvCache **out, int capacity, KvErr *err) {
    Cuda *cu = impl_of(b);
    int NK = cu->m->cfg.n_layers * cu->m->cfg.n_kv_heads;
    if (capacity < 1) return kv_fail(err, "backend 'cuda': cache capacity %d must be positive", capacity);
    int *caps = (int *)kv_malloc((size_t)NK * sizeof(int), err);
    if (!caps) return -1;
    for (int i = 0; i < NK; i++) caps[i] = capacity;
    CudaCache *cc = NULL;
    int rc = cache_alloc(cu, caps, NULL, NULL, &cc, err);
    free(caps);
    if (rc) return -1;
    *out = &cc->c;
    return 0;
}

/* cache_gather (view = 0: the kept rows copied) and cache_view (view = 1: their row indices in src). */
static int cache_compress(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity, int view,
                          KvCache **out, KvErr *err) {
    Cuda *cu = impl_of(b);
    const ModelConfig *cfg = &cu->m->cfg;
    int NK = cfg->n_layers * cfg->n_kv_heads, d = cfg->head_dim;
    const char *who = view ? "cache_view" : "cache_gather";
    if (!src->on_device) return kv_fail(err, "backend 'cuda': %s needs a cache made by this backend", who);
    if (src->base) return kv_fail(err, "backend 'cuda': %s: the source cache is itself a view", who);
    if (keep->n_layers != cfg->n_layers || keep->n_kv_heads != cfg->n_kv_heads)
        return kv_fail(err, "backend 'cuda': keep-set is %d layers x %d kv-heads, the model has %d x %d",
                       keep->n_layers, keep->n_kv_heads, cfg->n_layers, cfg->n_kv_heads);
    if (extra_capacity < 0) return kv_fail(err, "backend 'cuda': extra capacity %d is negative", extra_capacity);
    for (int i = 0; i < NK; i++)
        if (keep->counts[i] < 0 || keep->counts[i] > src->len[i])
            return kv_fail(err, "backend 'cuda': keep-set keeps %d entries of layer %d kv-head %d, which holds %d",
                           keep->counts[i], i / cfg->n_kv_heads, i % cfg->n_kv_heads, src->len[i]);
    size_t n = keep->total ? (size_t)keep->total : 1;
    /* caps[NK], then (views) NK zero row starts: a view's indices count from its base head's first row */
    int *caps = (int *)kv_malloc((size_t)NK * sizeof(int), err);
    long long *rows = (long long *)kv_malloc((2 * n + NK) * sizeof(long long), err);
    int *idx = view ? (int *)kv_malloc(n * sizeof(int), err) : NULL;
    CudaCache *dst = NULL;
    int rc = !caps || !rows || (view && !idx) ? -1 : 0;
    for (int i = 0; !rc && i < NK; i++) caps[i] = keep->counts[i] + extra_capacity;
    if (!rc) rc = cache_alloc(cu, caps, view ? src : NULL, view ? keep->counts : NULL, &dst, err);
    if (!rc) {
        const CudaCache *s = (const CudaCache *)src;
        long long *src_rows = rows, *dst_rows = rows + n, *zero = rows + 2 * n;
        memset(zero, 0, (size_t)NK * sizeof(long long));
        rc = gather_plan(src, view ? zero : s->row0, keep, view ? zero : dst->row0, src_rows, dst_rows, dst->c.pos,
                         err);
        for (int i = 0; !rc && i < NK; i++) dst->c.len[i] = keep->counts[i];
        dst->c.n_pos = src->n_pos;
        cudaError_t ce = cudaSuccess;
        if (!rc && keep->total > 0 && view) {
            for (int e = 0; e < keep->total; e++) idx[e] = (int)src_rows[e];
            ce = cudaMemcpyAsync(dst->c.shared[0], idx, (size_t)keep->total * sizeof(int), cudaMemcpyHostToDevice,
                                 cu->st);
        } else if (!rc && keep->total > 0) {
            rc = devbuf_reserve(&cu->gather_rows, 2 * (size_t)keep->total * sizeof(long long), "gather index lists",
                                err);
            long long *dev = (long long *)cu->gather_rows.p;
            if (!rc) ce = cudaMemcpyAsync(dev, rows, 2 * (size_t)keep->total * sizeof(long long),
                                          cudaMemcpyHostToDevice, cu->st);
            if (!rc && ce == cudaSuccess)
                rc = launch_gather_rows(dev, dev + keep->total, keep->total, s->k_base, s->v_base, dst->k_base,
                                        dst->v_base, d, cu->st, err);
        }
        if (!rc && ce != cudaSuccess)
            rc = kv_fail(err, "%s:%d: %s: cudaMemcpyAsync: %s", __FILE__, __LINE__, who, cudaGetErrorString(ce));
        ce = cudaStreamSynchronize(cu->st); /* also keeps `rows` and `idx` alive until the copies have read them */
        if (!rc && ce != cudaSuccess)
            rc = kv_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, who, cudaGetErrorString(ce));
    }
    free(caps);
    free(rows);
    free(idx);
    if (rc) {
        if (dst) cuda_cache_free(b, &dst->c);
        return -1;
    }
    *out = &dst->c;
    return 0;
}

/* The cache (whole allocation pages) and the sequence's share of a decode step: split-K partials over its
 * longest head, its logits and last hidden state, its rows of the head table. */
static double cuda_variant_bytes(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity, int view) {
    (void)src;
    const ModelConfig *c = &impl_of(b)->m->cfg;
    int NK = c->n_layers * c->n_kv_heads, d = c->head_dim, longest = 0;
    double own = 0, shared = 0;
    for (int i = 0; i < NK; i++) {
        int n = keep->counts[i] + extra_capacity;
        longest = n > longest ? n : longest;
        own += view ? extra_capacity : n;
        shared += view ? keep->counts[i] : 0;
    }
    double cache = own * d * sizeof(bf16) * 2 + shared * sizeof(int);
    cache = ceil(cache / ALLOC_PAGE) * ALLOC_PAGE;
    double partials = (double)c->n_heads * splitk_count(longest + 1) * (d + 2) * sizeof(float);
    double step = partials + (double)c->vocab_size * sizeof(float) + (double)c->d_model * sizeof(bf16) +
                  (double)NK * sizeof(DevHead);
    return cache + step;
}

static int cuda_memory_free(Backend *b, double *bytes, KvErr *err) {
    (void)b;
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    double reserve = (double)(MEM_MARGIN + PLAN_RESERVE);
    *bytes = free_b > reserve ? (double)free_b - reserve : 0;
    return 0;
}

static int cuda_cache_gather(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity,
                             KvCache **out, KvErr *err) {
    return cache_compress(b, src, keep, extra_capacity, 0, out, err);
}

static int cuda_cache_view(Backend *b, const KvCache *src, const KeepSet *keep, int extra_capacity, KvCache **out,
                           KvErr *err) {
    return cache_compress(b, src, keep, extra_capacity, 1, out, err);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Forward                                                                                                 */

typedef struct {
    KvCache *const *caches;
    int B, T, Tc, t_start;   /* sequences, tokens of the call, tokens of this chunk, first token of it */
    DevHead *heads;          /* device table of this chunk */
    int w;                   /* observation window (0: no observation in this chunk) */
    const ObserveHook *observe;
    const TraceHook *trace;
} Chunk;

/* Enqueues one layer's window attention, raw tensors (unless derived_only) and (on request) projected value
 * norms, with their copies into the layer's slot; observe_deliver hands them to the hook. */
static int observe_layer(Cuda *cu, const Chunk *ch, int l, KvErr *err) {
    const ModelConfig *c = &cu->m->cfg;
    const KvCache *kc = ch->caches[0];
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, D = c->d_model, G = H / K;
    int w = ch->w, Tc = ch->Tc, L = kc->len[l * K] + Tc, t0 = Tc - w;
    int want_nu = ch->observe->want_value_norm, raw = !ch->observe->derived_only, on_device = ch->observe->on_device;
    ObsSlot *slot = &cu->observed[l % 2];
    size_t n_attn = (size_t)H * w * L, n_nu = (size_t)K * L;
    size_t n_q = raw ? (size_t)H * w * d : 0, n_kv = raw ? (size_t)K * L * d : 0;
    size_t n_stage = raw ? (n_q > (size_t)L * d ? n_q : (size_t)L * d) : 0; /* one head's f32 copy at a time */
    if (devbuf_reserve(&cu->probs, n_attn * sizeof(float), "the observation's window attention", err) ||
        devbuf_reserve(&cu->obs_dev, (n_stage + n_nu) * sizeof(float),
                       "observation staging", err) ||
        hostbuf_reserve(&slot->host, 2 * K * sizeof(float *) +
                                         (on_device ? 0 : n_attn + n_q + 2 * n_kv + n_nu) * sizeof(float), err))
        return -1;
    const float **h_kp = (const float **)slot->host.p, **h_vp = h_kp + K;
    float *h_attn = (float *)(h_vp + K), *h_q = h_attn + n_attn, *h_k = h_q + n_q, *h_v = h_k + n_kv;
    float *h_nu = h_v + n_kv;
    float *stage = (float *)cu->obs_dev.p, *nu = stage + n_stage;

    const bf16 *keys[ATTN_MAX_KV_HEADS];
    for (int kh = 0; kh < K; kh++) keys[kh] = (const bf16 *)kc->k[l * K + kh];
    if (window_attention(cu->blas, cu->q, keys, (float *)cu->probs.p, H, K, d, t0, w, L, cu->st, err)) return -1;
    if (!on_device)
        CU_CHECK(cudaMemcpyAsync(h_attn, cu->probs.p, n_attn * sizeof(float), cudaMemcpyDeviceToHost, cu->st));
    if (raw && launch_qwin(cu->q, stage, t0, w, H, d, cu->st, err)) return -1;
    if (raw) CU_CHECK(cudaMemcpyAsync(h_q, stage, n_q * sizeof(float), cudaMemcpyDeviceToHost, cu->st));
    for (int kh = 0; raw && kh < K; kh++) {
        const bf16 *src[2] = {(const bf16 *)kc->k[l * K + kh], (const bf16 *)kc->v[l * K + kh]};
        float *dst[2] = {h_k + (size_t)kh * L * d, h_v + (size_t)kh * L * d};
        for (int kv = 0; kv < 2; kv++) {
            if (launch_bf16_to_f32(src[kv], stage, (size_t)L * d, cu->st, err)) return -1;
            CU_CHECK(cudaMemcpyAsync(dst[kv], stage, (size_t)L * d * sizeof(float), cudaMemcpyDeviceToHost, cu->st));
        }
        h_kp[kh] = h_k + (size_t)kh * L * d;
        h_vp[kh] = h_v + (size_t)kh * L * d;
    }
    if (want_nu) {
        /* nu[k][j] = 1/G sum_g || v[k][j] W_O^(kG+g) ||_1, by the fused kernel where it serves the shape. Else per
         * query head one GEMM of the values with that head's d columns of o_proj into the (now idle) gate/up
         * buffer, then row L1 norms; the projection (L x D f32 per head, 0.5 GB at 32k tokens) is made in blocks
         * the L2 holds, so the norms read it there instead of from memory. */
        int chunk_rows = cu->nu_rows;
        const CuLayer *W = &cu->layers[l];
        const bf16 *values[ATTN_MAX_KV_HEADS];
        for (int kh = 0; kh < K; kh++) values[kh] = (const bf16 *)kc->v[l * K + kh];
        if (value_norms_fused_serves(values, K, d, D, W->wo, H * d)) {
            if (launch_value_norms(values, K, L, d, W->wo, H * d, G, D, nu, 1.0f / G, cu->st, err)) return -1;
        } else {
            for (int kh = 0; kh < K; kh++)
                if (value_norms_by_gemm(cu->blas, values[kh], L, d, W->wo + (size_t)kh * G * d, H * d, G, D, cu->gu,
                                        chunk_rows, nu + (size_t)kh * L, 1.0f / G, cu->st, err))
                    return -1;
        }
        if (!on_device) CU_CHECK(cudaMemcpyAsync(h_nu, nu, n_nu * sizeof(float), cudaMemcpyDeviceToHost, cu->st));
    }
    CU_CHECK(cudaEventRecord(slot->ready, cu->st));
    Observation obs;
    memset(&obs, 0, sizeof obs);
    obs.layer = l;
    obs.n_layers = c->n_layers;
    obs.L = L;
    obs.w = w;
    obs.H = H;
    obs.K = K;
    obs.d = d;
    obs.D = D;
    if (raw) {
        obs.q_win = h_q;
        obs.keys = h_kp;
        obs.values = h_vp;
        obs.w_o = cu->m->has_host_weights ? cu->m->layers[l].wo : NULL;
    }
    obs.attn = on_device ? (float *)cu->probs.p : h_attn;
    obs.value_norm = want_nu ? (on_device ? nu : h_nu) : NULL;
    slot->obs = obs;
    slot->layer = l;
    return 0;
}

/* Hands layer l's observation, once its copies are done, to the hook (nothing when none is waiting). */
static int observe_deliver(Cuda *cu, const Chunk *ch, int l, KvErr *err) {
    ObsSlot *slot = &cu->observed[l % 2];
    if (slot->layer != l) return 0;
    slot->layer = -1;
    CU_CHECK(cudaEventSynchronize(slot->ready));
    if (ch->observe->on_layer(ch->observe->user, &slot->obs, err)) return kv_wrap(err, "observation of layer %d", l);
    return 0;
}

/* Decode attention of every sequence and head through the naive kernel, whose probabilities go to the hook. */
static int trace_layer(Cuda *cu, const Chunk *ch, int l, KvErr *err) {
    const ModelConfig *c = &cu->m->cfg;
    int H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, G = H / K, B = ch->B;
    int max_n = 0;
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < K; kh++)
            if (ch->caches[b]->len[l * K + kh] + 1 > max_n) max_n = ch->caches[b]->len[l * K + kh] + 1;
    size_t n = (size_t)B * H * max_n;
    if (devbuf_reserve(&cu->probs, n * sizeof(float), "the decode trace", err) ||
        hostbuf_reserve(&cu->probs_host, n * sizeof(float), err) ||
        launch_attention_naive(cu->q, cu->ao, (float *)cu->probs.p, max_n, ch->heads, l, c->n_layers, H, K, d, B, 1,
                               0, 1, cu->st, err))
        return -1;
    CU_CHECK(cudaMemcpyAsync(cu->probs_host.p, cu->probs.p, n * sizeof(float), cudaMemcpyDeviceToHost, cu->st));
    CU_CHECK(cudaStreamSynchronize(cu->st));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int i = l * K + h / G;
            ch->trace->on_attention(ch->trace->user, b, l, h, (const float *)cu->probs_host.p + ((size_t)b * H + h) * max_n,
                                    ch->caches[b]->pos[i], ch->caches[b]->len[i] + 1);
        }
    return 0;
}

static int attention_layer(Cuda *cu, const Chunk *ch, int l, KvErr *err) {
    const ModelConfig *c = &cu->m->cfg;
    int N = c->n_layers, H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, B = ch->B;
    if (ch->Tc > 1) return launch_flash_prefill(cu->q, cu->ao, ch->heads, l, N, H, K, d, B, ch->Tc, cu->st, err);
    if (ch->trace) return trace_layer(cu, ch, l, err);
    int max_n = 0;
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < K; kh++)
            if (ch->caches[b]->len[l * K + kh] + 1 > max_n) max_n = ch->caches[b]->len[l * K + kh] + 1;
    int S = splitk_count(max_n);
    size_t n_part = (size_t)B * H * S;
    if (devbuf_reserve(&cu->part_o, n_part * d * sizeof(float), "decode partials", err) ||
        devbuf_reserve(&cu->part_ml, n_part * 2 * sizeof(float), "decode partials", err))
        return -1;
    return launch_decode_attention(cu->q, cu->ao, (float *)cu->part_o.p, (float *)cu->part_ml.p, ch->heads, l, N, H,
                                   K, d, B, S, cu->st, err);
}

/* The last chunk ends with each sequence's logits in logits[B][V] on the host, or, with next_ids, only its
 * greedy pick: the logits stay on the device and B ints come back instead of B·V floats. */
static int run_chunk(Cuda *cu, Chunk *ch, const int *tokens, int last, float *logits, int *next_ids, KvErr *err) {
    const ModelConfig *c = &cu->m->cfg;
    int N = c->n_layers, H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, D = c->d_model, F = c->d_ff;
    int B = ch->B, Tc = ch->Tc, M = B * Tc, NK = N * K, QKV = (H + 2 * K) * d;

    /* The head table, the sequences' first positions and the tokens go up in one copy. */
    size_t heads_bytes = (size_t)B * NK * sizeof(DevHead);
    size_t bytes = heads_bytes + (size_t)B * sizeof(int) + (size_t)M * sizeof(int);
    if (devbuf_reserve(&cu->table, bytes, "the head table", err) || hostbuf_reserve(&cu->table_host, bytes, err))
        return -1;
    DevHead *th = (DevHead *)cu->table_host.p;
    int *seq_pos = (int *)((char *)cu->table_host.p + heads_bytes), *tok = seq_pos + B;
    for (int b = 0; b < B; b++) {
        KvCache *kc = ch->caches[b];
        for (int i = 0; i < NK; i++) {
            DevHead *h = &th[(size_t)b * NK + i];
            memset(h, 0, sizeof *h);
            h->k = (bf16 *)kc->k[i];
            h->v = (bf16 *)kc->v[i];
            h->len = kc->len[i];
            if (kc->base) {
                h->n_shared = kc->n_shared[i];
                h->sk = (const bf16 *)kc->base->k[i];
                h->sv = (const bf16 *)kc->base->v[i];
                h->idx = kc->shared[i];
            }
            for (int t = 0; t < Tc; t++) kc->pos[i][kc->len[i] + t] = kc->n_pos + t;
        }
        seq_pos[b] = kc->n_pos;
        for (int t = 0; t < Tc; t++) tok[b * Tc + t] = tokens[(size_t)b * ch->T + ch->t_start + t];
    }
    CU_CHECK(cudaMemcpyAsync(cu->table.p, cu->table_host.p, bytes, cudaMemcpyHostToDevice, cu->st));
    ch->heads = (DevHead *)cu->table.p;
    const int *d_seq_pos = (const int *)((char *)cu->table.p + heads_bytes), *d_tok = d_seq_pos + B;

    if (launch_embed(d_tok, cu->tok_embd, cu->x, M, D, cu->st, err)) return -1;
    cu->observed[0].layer = cu->observed[1].layer = -1; /* nothing left over from a failed forward */
    for (int l = 0; l < N; l++) {
        const CuLayer *W = &cu->layers[l];
        if (launch_rmsnorm(cu->x, W->attn_norm, cu->xb, M, D, c->rms_eps, 1, 0, cu->st, err) ||
            gemm_bf16(cu->blas, cu->xb, D, W->wqkv, D, cu->qkv, CUDA_R_32F, QKV, M, QKV, D, 0.0f, err) ||
            launch_qkv_rope(cu->qkv, W->bqkv, cu->inv_freq, cu->q, ch->heads, d_seq_pos, l, N, H, K, d, B, Tc, cu->st,
                            err) ||
            attention_layer(cu, ch, l, err))
            return kv_wrap(err, "backend 'cuda': layer %d", l);
        if (ch->w && observe_layer(cu, ch, l, err)) return -1;
        /* Scored on the device: before the next layer's observation overwrites the arrays it reads. */
        if (ch->w && ch->observe->on_device && observe_deliver(cu, ch, l, err)) return -1;
        if (gemm_bf16(cu->blas, cu->ao, H * d, W->wo, H * d, cu->x, CUDA_R_32F, D, M, D, H * d, 1.0f, err) ||
            launch_rmsnorm(cu->x, W->ffn_norm, cu->xb, M, D, c->rms_eps, 1, 0, cu->st, err) ||
            gemm_bf16(cu->blas, cu->xb, D, W->wgu, D, cu->gu, CUDA_R_32F, 2 * F, M, 2 * F, D, 0.0f, err) ||
            launch_swiglu(cu->gu, cu->ffn, M, F, cu->st, err) ||
            gemm_bf16(cu->blas, cu->ffn, F, W->wdown, F, cu->x, CUDA_R_32F, D, M, D, F, 1.0f, err))
            return kv_wrap(err, "backend 'cuda': layer %d", l);
        /* The host scores layer l-1 while the GPU runs layer l. */
        if (ch->w && l > 0 && observe_deliver(cu, ch, l - 1, err)) return -1;
    }
    if (ch->w && observe_deliver(cu, ch, N - 1, err)) return -1;
    if (last && (logits || next_ids)) {
        int V = c->vocab_size;
        if (devbuf_reserve(&cu->xlast, (size_t)B * D * sizeof(bf16), "the last hidden states", err) ||
            devbuf_reserve(&cu->logits, (size_t)B * V * sizeof(float), "the logits", err) ||
            launch_rmsnorm(cu->x, cu->out_norm, (bf16 *)cu->xlast.p, B, D, c->rms_eps, Tc, Tc - 1, cu->st, err) ||
            gemm_bf16(cu->blas, (const bf16 *)cu->xlast.p, D, cu->lm_head, D, cu->logits.p, CUDA_R_32F, V, B, V, D,
                      0.0f, err))
            return -1;
        if (logits)
            CU_CHECK(cudaMemcpyAsync(logits, cu->logits.p, (size_t)B * V * sizeof(float), cudaMemcpyDeviceToHost,
                                     cu->st));
        if (next_ids) {
            if (devbuf_reserve(&cu->next_ids, (size_t)B * sizeof(int), "the greedy picks", err) ||
                launch_argmax_rows((const float *)cu->logits.p, B, V, (int *)cu->next_ids.p, cu->st, err))
                return -1;
            CU_CHECK(cudaMemcpyAsync(next_ids, cu->next_ids.p, (size_t)B * sizeof(int), cudaMemcpyDeviceToHost,
                                     cu->st));
        }
    }
    CU_CHECK(cudaStreamSynchronize(cu->st));
    for (int b = 0; b < B; b++) {
        KvCache *kc = ch->caches[b];
        for (int i = 0; i < NK; i++) kc->len[i] += Tc;
        kc->n_pos += Tc;
    }
    return 0;
}

static int forward_chunks(Backend *be, KvCache *const *caches, int n_seqs, const int *tokens, int n_new,
                          float *logits, int *next_ids, const ObserveHook *observe, const TraceHook *trace,
                          KvErr *err) {
    Cuda *cu = impl_of(be);
    const ModelConfig *c = &cu->m->cfg;
    int NK = c->n_layers * c->n_kv_heads;
    if (n_seqs < 1 || n_new < 1)
        return kv_fail(err, "backend 'cuda': forward of %d sequences x %d tokens", n_seqs, n_new);
    if (n_seqs > cu->rows)
        return kv_fail(err, "backend 'cuda': %d sequences in one batch, at most %d", n_seqs, cu->rows);
    if (observe && n_seqs != 1) return kv_fail(err, "backend 'cuda': an observed forward takes one sequence");
    if (observe && observe->on_device && !observe->derived_only)
        return kv_fail(err, "backend 'cuda': an observation on the device hands over only the derived arrays "
                            "(set derived_only)");
    if (observe && caches[0] && caches[0]->base)
        return kv_fail(err, "backend 'cuda': an observed forward needs a cache of its own, not a view");
    if (trace && n_new != 1) return kv_fail(err, "backend 'cuda': a traced forward takes one token per sequence");
    for (long i = 0; i < (long)n_seqs * n_new; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return kv_fail(err, "backend 'cuda': token id %d at index %ld is outside the vocabulary (0..%d)", tokens[i],
                           i, c->vocab_size - 1);
    for (int b = 0; b < n_seqs; b++) {
        const KvCache *kc = caches[b];
        if (!kc || !kc->on_device)
            return kv_fail(err, "backend 'cuda': sequence %d has no cache made by this backend", b);
        for (int i = 0; i < NK; i++)
            if (kc->len[i] + n_new > kc->cap[i])
                return kv_fail(err, "backend 'cuda': sequence %d: layer %d kv-head %d holds %d of %d entries, no room "
                                    "for %d more (gather with a larger extra capacity)", b, i / c->n_kv_heads,
                               i % c->n_kv_heads, kc->len[i], kc->cap[i], n_new);
    }
    int w = 0;
    if (observe) {
        w = observe->window;
        if (w < 1 || w > n_new)
            return kv_fail(err, "backend 'cuda': observation window %d must be in 1..%d, the tokens of this forward",
                           w, n_new);
        for (int i = 0; i < NK; i++)
            if (caches[0]->len[i] != caches[0]->len[(i / c->n_kv_heads) * c->n_kv_heads])
                return kv_fail(err, "backend 'cuda': an observed forward needs every kv-head of a layer to hold the "
                                    "same number of entries (layer %d differs)", i / c->n_kv_heads);
    }
    Chunk ch;
    memset(&ch, 0, sizeof ch);
    ch.caches = caches;
    ch.B = n_seqs;
    ch.T = n_new;
    ch.observe = observe;
    ch.trace = trace;
    int max_tc = cu->rows / n_seqs;
    for (int start = 0; start < n_new;) {
        int n = n_new - start < max_tc ? n_new - start : max_tc;
        int rest = n_new - start - n;
        if (w && rest > 0 && rest < w) n = n_new - start - w; /* the window must fall in the last chunk */
        int last = start + n == n_new;
        ch.t_start = start;
        ch.Tc = n;
        ch.w = last ? w : 0;
        if (run_chunk(cu, &ch, tokens, last, logits, next_ids, err)) return -1;
        start += n;
    }
    return 0;
}

static int cuda_forward(Backend *be, KvCache *const *caches, int n_seqs, const int *tokens, int n_new,
                        float *logits, const ObserveHook *observe, const TraceHook *trace, KvErr *err) {
    return forward_chunks(be, caches, n_seqs, tokens, n_new, logits, NULL, observe, trace, err);
}

static int cuda_forward_greedy(Backend *be, KvCache *const *caches, int n_seqs, const int *tokens, int n_new,
                               int *next_ids, const TraceHook *trace, KvErr *err) {
    return forward_chunks(be, caches, n_seqs, tokens, n_new, NULL, next_ids, NULL, trace, err);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Open / destroy                                                                                          */

static void cuda_destroy(Backend *b) {
    if (!b) return;
    Cuda *cu = impl_of(b);
    if (cu) {
        DevBuf *dev[] = {&cu->table, &cu->logits, &cu->xlast, &cu->next_ids, &cu->part_o, &cu->part_ml, &cu->probs,
                         &cu->obs_dev, &cu->gather_rows};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]->p);
        DevBuf *host[] = {&cu->table_host, &cu->probs_host, &cu->observed[0].host, &cu->observed[1].host};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) cudaFreeHost(host[i]->p);
        for (int i = 0; i < 2; i++)
            if (cu->observed[i].ready) cudaEventDestroy(cu->observed[i].ready);
        cudaFree(cu->act);
        cudaFree(cu->weights);
        if (cu->blas) cublasDestroy(cu->blas);
        if (cu->st) cudaStreamDestroy(cu->st);
        free(cu->layers);
        free(cu);
    }
    free(b);
}

static int check_shape(const ModelConfig *c, KvErr *err) {
    if (c->n_layers < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0)
        return kv_fail(err, "backend 'cuda': %d heads over %d kv-heads is not a grouped-query shape", c->n_heads,
                       c->n_kv_heads);
    if (c->head_dim % 16 != 0 || c->head_dim > ATTN_MAX_HEAD_DIM)
        return kv_fail(err, "backend 'cuda': head dim %d unsupported (a multiple of 16 up to %d)", c->head_dim,
                       ATTN_MAX_HEAD_DIM);
    if (c->n_kv_heads > ATTN_MAX_KV_HEADS)
        return kv_fail(err, "backend 'cuda': %d kv-heads, at most %d", c->n_kv_heads, ATTN_MAX_KV_HEADS);
    if (c->n_heads / c->n_kv_heads > ATTN_MAX_GROUP)
        return kv_fail(err, "backend 'cuda': %d query heads per kv-head, at most %d", c->n_heads / c->n_kv_heads,
                       ATTN_MAX_GROUP);
    return 0;
}

extern "C" int cuda_backend_open(Backend **out, const Model *m, KvErr *err) {
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, err)) return -1;
    const ModelConfig *c = &m->cfg;
    if (check_shape(c, err)) return -1;
    Backend *b = (Backend *)kv_calloc(1, sizeof *b, err);
    Cuda *cu = (Cuda *)kv_calloc(1, sizeof *cu, err);
    CuLayer *layers = (CuLayer *)kv_calloc((size_t)c->n_layers, sizeof *layers, err);
    if (!b || !cu || !layers) {
        free(b);
        free(cu);
        free(layers);
        return -1;
    }
    b->name = "cuda";
    b->model = m;
    b->impl = cu;
    b->cache_new = cuda_cache_new;
    b->cache_gather = cuda_cache_gather;
    b->cache_view = cuda_cache_view;
    /* views_fast stays 0: on an H200 (tests/gpu/results/2026-12-04-h200-decode.log) a decode step on views took
     * 6-14% longer than on gathered copies at a 32k cache, so the planner gathers wherever copies fit. */
    b->variant_bytes = cuda_variant_bytes;
    b->scores_on_device = 1;
    b->memory_free = cuda_memory_free;
    b->cache_free = cuda_cache_free;
    b->forward = cuda_forward;
    b->forward_greedy = cuda_forward_greedy;
    b->destroy = cuda_destroy;
    cu->m = m;
    cu->layers = layers;
    cu->rows = CHUNK_ROWS;
    b->max_seqs = cu->rows;
    {
        size_t most = (size_t)cu->rows * 2 * c->d_ff / c->d_model; /* what the gate/up buffer holds */
        size_t fit = dev.l2_bytes / 2 / ((size_t)c->d_model * sizeof(float));
        cu->nu_rows = (int)(fit < 64 ? 64 : fit > most ? most : fit);
    }

    size_t R = cu->rows, D = c->d_model, Hd = (size_t)c->n_heads * c->head_dim, F = c->d_ff;
    size_t QKV = (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    cu->weight_bytes = weight_layout(cu, 0);
    size_t act_f32 = R * (D + QKV + 2 * F), act_bf16 = R * (D + 2 * Hd + F);
    cu->act_bytes = act_f32 * sizeof(float) + act_bf16 * sizeof(bf16);
    char what[512];
    snprintf(what, sizeof what, "model %s (%.2f GiB of bf16 weights, %.2f GiB of activations)", m->name,
             gib(cu->weight_bytes), gib(cu->act_bytes));
    if (ensure_free(cu->weight_bytes + cu->act_bytes, what, err)) {
        cuda_destroy(b);
        return -1;
    }
    cudaError_t ce = cudaStreamCreateWithFlags(&cu->st, cudaStreamNonBlocking);
    for (int i = 0; i < 2 && ce == cudaSuccess; i++)
        ce = cudaEventCreateWithFlags(&cu->observed[i].ready, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaMalloc(&cu->weights, cu->weight_bytes);
    if (ce == cudaSuccess) ce = cudaMalloc(&cu->act, cu->act_bytes);
    if (ce != cudaSuccess) {
        kv_fail(err, "backend 'cuda': setting up %s: %s", what, cudaGetErrorString(ce));
        cuda_destroy(b);
        return -1;
    }
    cublasStatus_t bs = cublasCreate(&cu->blas);
    if (bs == CUBLAS_STATUS_SUCCESS && (bs = cublasSetStream(cu->blas, cu->st)) != CUBLAS_STATUS_SUCCESS)
        cublasDestroy(cu->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cu->blas = NULL;
        kv_fail(err, "backend 'cuda': cuBLAS could not be initialised: %s", cublasGetStatusString(bs));
        cuda_destroy(b);
        return -1;
    }
    weight_layout(cu, (uintptr_t)cu->weights);
    char *a = (char *)cu->act;
    cu->x = (float *)a, a += R * D * sizeof(float);
    cu->qkv = (float *)a, a += R * QKV * sizeof(float);
    cu->gu = (float *)a, a += R * 2 * F * sizeof(float);
    cu->xb = (bf16 *)a, a += R * D * sizeof(bf16);
    cu->q = (bf16 *)a, a += R * Hd * sizeof(bf16);
    cu->ao = (bf16 *)a, a += R * Hd * sizeof(bf16);
    cu->ffn = (bf16 *)a;
    if (upload_weights(cu, err)) {
        kv_wrap(err, "backend 'cuda': %s", m->name);
        cuda_destroy(b);
        return -1;
    }
    *out = b;
    return 0;
}
