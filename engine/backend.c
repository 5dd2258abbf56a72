/* backend.c — the table of backends; the one place that knows their names. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpu_backend_open(Backend **out, const Model *m, const BackendOptions *opt, KvErr *err);
#ifdef KVBENCH_CUDA
int cuda_backend_open(Backend **out, const Model *m, KvErr *err);
#endif

/* The cuda backend takes no options: its cache is its own (bf16 on the GPU, backend_open refuses f16), its
 * decode exact. */
#ifdef KVBENCH_CUDA
static int cuda_open(Backend **out, const Model *m, const BackendOptions *opt, KvErr *err) {
    if (opt->decode == BACKEND_DECODE_FAST)
        return kv_fail(err, "decode 'fast': the fast decode is the cpu backend's; backend 'cuda' decodes exactly: "
                            "set decode exact (or leave it unset) or use backend cpu");
    if (opt->simd[0] || opt->fast_kernel[0])
        return kv_fail(err, "simd '%s' / fast_kernel '%s': the cpu backend's kernels; backend 'cuda' has none (leave "
                            "both unset)", opt->simd, opt->fast_kernel);
    if (cuda_backend_open(out, m, err)) return -1;
    (*out)->used = (BackendOptions){.decode = BACKEND_DECODE_EXACT, .cache = KV_ELEM_F32, .simd_auto = 1};
    return 0;
}
#endif

typedef struct {
    const char *name;
    int (*open)(Backend **out, const Model *m, const BackendOptions *opt, KvErr *err);
} BackendEntry;

static const BackendEntry BACKENDS[] = {
    {"cpu", cpu_backend_open},
#ifdef KVBENCH_CUDA
    {"cuda", cuda_open},
#endif
};

static const BackendEntry *find(const char *name, KvErr *err) {
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
        if (!strcmp(name, BACKENDS[i].name)) return &BACKENDS[i];
    if (!strcmp(name, "cuda"))
        kv_fail(err, "backend 'cuda': this kvbench was built without CUDA (rebuild with nvcc on PATH, or make CUDA=1); "
                     "available: %s", backend_available());
    else
        kv_fail(err, "unknown backend '%s' (available: %s)", name, backend_available());
    return NULL;
}

int backend_open(Backend **out, const char *name, const Model *m, const BackendOptions *opt, KvErr *err) {
    *out = NULL;
    const BackendOptions defaults = {BACKEND_DECODE_EXACT, KV_ELEM_F32, "", "", 0};
    if (!opt) opt = &defaults;
    if (opt->cache == KV_ELEM_F16 && strcmp(name, "cpu"))
        return kv_fail(err, "cache 'f16': the half-precision cache is the cpu backend's; backend '%s' keeps its own "
                            "cache (bf16 on the GPU for cuda): set cache f32 (or leave it unset) or use backend cpu",
                       name);
    const BackendEntry *e = find(name, err);
    if (!e || e->open(out, m, opt, err)) return -1;
    (*out)->observes = backend_observes(name);
    return 0;
}

unsigned backend_observes(const char *name) {
    /* the cuda backend computes the window attention on the device, never the whole prefill's; KVzip's
     * reconstruction pass (a forward on the context cache, then kvcache_truncate) is the cpu backend's only */
    return !strcmp(name, "cpu") ? OBSERVES_ATTENTION_SUMS | OBSERVES_QUERY_STATS | OBSERVES_RECONSTRUCTION : 0;
}

void backend_options_used(const Backend *b, BackendOptions *used) { *used = b->used; }

void backend_setup_label(const BackendOptions *used, char *out, size_t size) {
    /* "fast2" is the fast decode's arithmetic since the batched fast decode (one f32 chain per output over exact
     * int32 block dots), so rows of the first fast arithmetic ("fast") never resume or average with it */
    snprintf(out, size, "%s%s%s%s", used->decode == BACKEND_DECODE_FAST ? ",decode=fast2" : "",
             used->cache == KV_ELEM_F16 ? ",cache=f16" : "", used->simd_auto ? "" : ",simd=",
             used->simd_auto ? "" : used->simd);
}

const char *const BACKEND_OPTION_NAMES[BACKEND_N_OPTIONS] = {"decode", "cache", "simd", "fast_kernel"};

int backend_option_set(BackendOptions *o, BackendOptionKey key, const char *value, KvErr *err) {
    if (!value || !*value) return 0;
    switch (key) {
    case BACKEND_OPT_DECODE:
        if (strcmp(value, "exact") && strcmp(value, "fast"))
            return kv_fail(err, "decode '%s': unknown decode path (exact, the default, or fast)", value);
        o->decode = strcmp(value, "fast") ? BACKEND_DECODE_EXACT : BACKEND_DECODE_FAST;
        return 0;
    case BACKEND_OPT_CACHE:
        if (strcmp(value, "f32") && strcmp(value, "f16"))
            return kv_fail(err, "cache '%s': unknown KV cache type (f32, the default, or f16)", value);
        o->cache = strcmp(value, "f16") ? KV_ELEM_F32 : KV_ELEM_F16;
        return 0;
    case BACKEND_OPT_SIMD:
        if (strlen(value) >= sizeof o->simd)
            return kv_fail(err, "simd '%.32s...': unknown instruction set (scalar, avx2 or avx512)", value);
        snprintf(o->simd, sizeof o->simd, "%s", value);
        return 0;
    case BACKEND_OPT_FAST_KERNEL:
        if (strlen(value) >= sizeof o->fast_kernel)
            return kv_fail(err, "fast_kernel '%.32s...': unknown fast kernel (scalar, avx2, vnni or amx)", value);
        snprintf(o->fast_kernel, sizeof o->fast_kernel, "%s", value);
        return 0;
    default:
        return kv_fail(err, "backend option %d: no such option", (int)key);
    }
}

int backend_load_model(Model **m, const char *name, const char *spec, KvErr *err) {
    *m = NULL;
    /* every backend keeps its own form of the weights, streamed in at open */
    return find(name, err) ? model_load_config(m, spec, err) : -1;
}

void backend_close(Backend *b) {
    if (b) b->destroy(b);
}

const char *backend_available(void) {
#ifdef KVBENCH_CUDA
    return "cpu,cuda";
#else
    return "cpu";
#endif
}
