/* backend.c — the table of backends; the one place that knows their names. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

int cpu_backend_open(Backend **out, const Model *m, KvErr *err);
#ifdef KVBENCH_CUDA
int cuda_backend_open(Backend **out, const Model *m, KvErr *err);
#endif

typedef struct {
    const char *name;
    int (*open)(Backend **out, const Model *m, KvErr *err);
} BackendEntry;

static const BackendEntry BACKENDS[] = {
    {"cpu", cpu_backend_open},
#ifdef KVBENCH_CUDA
    {"cuda", cuda_backend_open},
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

int backend_open(Backend **out, const char *name, const Model *m, KvErr *err) {
    *out = NULL;
    int elem = backend_cache_elem(err);
    if (elem < 0) return -1;
    if (elem == KV_ELEM_F16 && strcmp(name, "cpu"))
        return kv_fail(err, "KVBENCH_CACHE=f16: the half-precision cache is the cpu backend's; backend '%s' keeps its "
                            "own cache (bf16 on the GPU for cuda): unset KVBENCH_CACHE or use backend cpu", name);
    const BackendEntry *e = find(name, err);
    return e ? e->open(out, m, err) : -1;
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

int backend_fast_decode(KvErr *err) {
    const char *decode = getenv("KVBENCH_DECODE");
    if (!decode || !*decode || !strcmp(decode, "exact")) return 0;
    if (!strcmp(decode, "fast")) return 1;
    return kv_fail(err, "KVBENCH_DECODE=%s: unknown decode path (exact, the default, or fast)", decode);
}

int backend_cache_elem(KvErr *err) {
    const char *cache = getenv("KVBENCH_CACHE");
    if (!cache || !*cache || !strcmp(cache, "f32")) return KV_ELEM_F32;
    if (!strcmp(cache, "f16")) return KV_ELEM_F16;
    return kv_fail(err, "KVBENCH_CACHE=%s: unknown KV cache type (f32, the default, or f16)", cache);
}
