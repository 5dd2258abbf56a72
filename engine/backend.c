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

int backend_open(Backend **out, const char *name, const Model *m, KvErr *err) {
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
        if (!strcmp(name, BACKENDS[i].name)) return BACKENDS[i].open(out, m, err);
    if (!strcmp(name, "cuda"))
        return kv_fail(err, "backend 'cuda': this kvbench was built without CUDA (rebuild with nvcc on PATH, "
                            "or make CUDA=1); available: %s", backend_available());
    return kv_fail(err, "unknown backend '%s' (available: %s)", name, backend_available());
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
