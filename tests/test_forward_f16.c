/* test_forward_f16.c — the CPU backend's opt-in half-precision KV cache (KVBENCH_CACHE=f16) in the forward
 * pass: against the exact f32-cache forward and the numpy float64 reference of tests/reference/gen_logits.py
 * (tiny synthetic Llama, tiny Qwen2, SmolLM2-135M when models/ has it), and its own consistency.
 *
 * Tolerances, stated per check:
 *  - prompt logits, f16 cache vs f32 cache and vs the reference: relative error (max |diff| / max |ref|)
 *    <= 1e-2 (binary16 keeps 11 significant bits: each key and value is off by at most 2^-12 relative; the
 *    measured errors are printed). Greedy tokens are counted against the f32 cache's and the reference's,
 *    reported, not required (an approximate path: agreement is a measurement);
 *  - a prefill split at chunk boundaries vs one prefill, both f16: <= 1e-4 (the cache holds the same bits,
 *    only f32 summation orders differ, as test_forward.c allows between two f32 paths);
 *  - a batch of f16 caches of different lengths (a multi-token feed, then single-token steps) vs each
 *    sequence run alone: 0, bit for bit, where every matrix is packed (the tiny Llama, SmolLM2);
 *  - the observation the policies read: the keys and values it hands over equal the cache's binary16 rows
 *    widened to f32, bit for bit (what the policies see with this cache: the stored, rounded keys and values;
 *    the window queries stay f32 as on the exact path);
 *  - the cache's arena is at most 0.55x the f32 cache's (positions stay int).
 * The default path is not touched here: test_forward.c checks it unchanged. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/cpu/ops.h"
#include "../engine/generate.h"
#include "../engine/kvcache.h"
#include "forward_checks.h"
#include "test.h"

#define GGUF_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

/* The simd level the backends are opened at (NULL: the automatic choice). */
static const char *simd_level;

/* Opens the cpu backend on m with the cache option `cache` (NULL: the default), as the runs layer parses it. */
static int open_cpu(Backend **be, const Model *m, const char *cache, KvErr *err) {
    BackendOptions o = {0};
    if (backend_option_set(&o, BACKEND_OPT_CACHE, cache, err) || backend_option_set(&o, BACKEND_OPT_SIMD, simd_level, err))
        return -1;
    return backend_open(be, "cpu", m, &o, err);
}

/* Greedy tokens of both backends on the reference cases, and the prompt logits of each against the other and
 * against the reference. */
static void check_reference(TestCounts *tc, Backend *exact, Backend *half, const char *name) {
    KvErr err = {{0}};
    int V = exact->model->cfg.vocab_size;
    float *ref_logits;
    cJSON *ref = load_reference(tc, name, V, &ref_logits);
    if (!ref) return;
    float *le = malloc(sizeof(float) * V), *lh = malloc(sizeof(float) * V);
    int ci = 0, agree_exact = 0, agree_ref = 0, steps = 0, top1 = 0;
    double worst = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(ref, "cases")) {
        int n, n_greedy;
        int *ids = json_ids(cJSON_GetObjectItem(cs, "ids"), &n);
        int *greedy = json_ids(cJSON_GetObjectItem(cs, "greedy"), &n_greedy);
        KvCache *ce = prefill(tc, exact, ids, n, 0, le), *ch = prefill(tc, half, ids, n, 0, lh);
        double e_exact = rel_err(lh, le, V), e_ref = rel_err(lh, ref_logits + (size_t)ci * V, V);
        worst = e_exact > worst ? e_exact : worst;
        top1 += argmax(lh, V) == argmax(le, V);
        CHECK(tc, e_exact <= 1e-2 && e_ref <= 1e-2, "%s case %d: f16-cache logits vs the f32 cache %.3g, vs the "
              "reference %.3g (tolerance 1e-2)", name, ci, e_exact, e_ref);
        exact->cache_free(exact, ce);
        half->cache_free(half, ch);
        /* greedy through generate_greedy on each: the prompt feed, then single-token steps */
        TokenIds oe, oh;
        GenerateOptions opt = {.max_new = n_greedy};
        CHECK(tc, exact->cache_new(exact, &ce, n + n_greedy, &err) == 0 && half->cache_new(half, &ch, n + n_greedy, &err) == 0,
              "%s", err.msg);
        CHECK(tc, generate_greedy(exact, &ce, 1, ids, n, &opt, &oe, NULL, &err) == 0 &&
                      generate_greedy(half, &ch, 1, ids, n, &opt, &oh, NULL, &err) == 0, "%s", err.msg);
        int same_e = 0, same_r = 0;
        while (same_e < oh.n && same_e < oe.n && oh.ids[same_e] == oe.ids[same_e]) same_e++;
        while (same_r < oh.n && same_r < n_greedy && oh.ids[same_r] == greedy[same_r]) same_r++;
        printf("%s case %d, f16 cache: %d ids, logits rel err %.2e vs f32 cache, %.2e vs reference; greedy agrees "
               "with the f32 cache for %d and the reference for %d of %d steps\n",
               name, ci, n, e_exact, e_ref, same_e, same_r, n_greedy);
        agree_exact += same_e;
        agree_ref += same_r;
        steps += n_greedy;
        ids_free(&oe);
        ids_free(&oh);
        exact->cache_free(exact, ce);
        half->cache_free(half, ch);
        free(ids);
        free(greedy);
        ci++;
    }
    printf("%s f16 cache: %d cases, top-1 prompt token same as the f32 cache in %d, worst logits rel err %.2e; "
           "greedy steps before the first difference: %d of %d (f32 cache), %d of %d (reference)\n",
           name, ci, top1, worst, agree_exact, steps, agree_ref, steps);
    free(le);
    free(lh);
    free(ref_logits);
    cJSON_Delete(ref);
}

/* The keys and values of the last layer observed in a prefill vs the cache's rows widened. */
typedef struct {
    const KvCache *cache;
    int layers, same;
} ObsCheck;

static int observe_rows(void *user, Observation *o, KvErr *err) {
    (void)err;
    ObsCheck *oc = user;
    oc->layers++;
    const KvCache *c = oc->cache;
    size_t n = (size_t)o->L * o->d;
    float *row = malloc(sizeof(float) * n);
    for (int k = 0; k < o->K; k++) {
        int i = o->layer * o->K + k;
        oc->same &= c->len[i] == o->L;
        for (size_t j = 0; j < n; j++) row[j] = kv_f16_to_f32(kvcache_k16(c, i)[j]);
        oc->same &= !memcmp(row, o->keys[k], n * sizeof(float));
        for (size_t j = 0; j < n; j++) row[j] = kv_f16_to_f32(kvcache_v16(c, i)[j]);
        oc->same &= !memcmp(row, o->values[k], n * sizeof(float));
    }
    free(row);
    return 0;
}

static void check_observation(TestCounts *tc, Backend *be, const int *ids, int n) {
    KvErr err = {{0}};
    KvCache *c;
    CHECK(tc, be->cache_new(be, &c, n, &err) == 0, "%s", err.msg);
    ObsCheck oc = {c, 0, 1};
    ObserveHook obs = {.window = n < 8 ? n : 8, .on_layer = observe_rows, .user = &oc};
    CHECK(tc, be->forward(be, &c, 1, ids, n, NULL, &obs, NULL, &err) == 0, "observed prefill: %s", err.msg);
    CHECK(tc, oc.layers == be->model->cfg.n_layers && oc.same,
          "f16: the observation's keys and values are the cache's binary16 rows widened (%d layers)", oc.layers);
    be->cache_free(be, c);
}

/* deep: also the chunk-boundary prefills; reference: also the reference cases (greedy on both caches). */
static void check_model(TestCounts *tc, const char *spec, const char *ref_name, int deep, int reference, int packed) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *exact = NULL, *half = NULL;
    if (model_load(&m, spec, &err) || open_cpu(&exact, m, NULL, &err) || open_cpu(&half, m, "f16", &err)) {
        CHECK(tc, 0, "%s: %s", spec, err.msg);
        backend_close(exact);
        model_free(m);
        return;
    }
    KvCache *a, *b;
    CHECK(tc, exact->cache_new(exact, &a, 1000, &err) == 0 && half->cache_new(half, &b, 1000, &err) == 0, "%s", err.msg);
    CHECK(tc, a->elem == KV_ELEM_F32 && b->elem == KV_ELEM_F16 && b->arena_bytes <= a->arena_bytes * 0.55,
          "%s: f16 cache arena %zu bytes, f32 %zu", ref_name, b->arena_bytes, a->arena_bytes);
    exact->cache_free(exact, a);
    half->cache_free(half, b);
    if (reference) check_reference(tc, exact, half, ref_name);
    int n = 1100, *ids = malloc(sizeof(int) * n);
    unsigned state = 12345;
    for (int i = 0; i < n; i++) ids[i] = (int)((state = state * 1103515245u + 12345u) >> 8) % m->cfg.vocab_size;
    check_batch(tc, half, ids, packed ? 0.0 : 1e-4);
    check_observation(tc, half, ids, 40);
    check_observation(tc, half, ids, 6); /* a prefill too short for the blocked attention */
    check_views(tc, half, ids);
    if (deep) {
        check_split_prefill(tc, half, ids, 91, 60, 1);
        check_split_prefill(tc, half, ids, n, 300, 333);
        check_observation(tc, half, ids, 700); /* the window in the second chunk */
    }
    free(ids);
    backend_close(exact);
    backend_close(half);
    model_free(m);
}

static void check_option(TestCounts *tc) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    CHECK(tc, model_load(&m, "tests/data/models/tiny-llama-hf", &err) == 0, "%s", err.msg);
    CHECK(tc, open_cpu(&be, m, "f8", &err) == -1 && be == NULL && strstr(err.msg, "cache 'f8': unknown KV cache type"),
          "unknown cache type: %s", err.msg);
    CHECK(tc, open_cpu(&be, m, "f32", &err) == 0, "f32 is the default, by name: %s", err.msg);
    KvCache *c = NULL;
    CHECK(tc, be && be->cache_new(be, &c, 4, &err) == 0 && c->elem == KV_ELEM_F32, "f32 cache");
    if (be) be->cache_free(be, c);
    backend_close(be);
    be = NULL;
    BackendOptions half = {.cache = KV_ELEM_F16};
    CHECK(tc, backend_open(&be, "cuda", m, &half, &err) == -1 && strstr(err.msg, "cpu backend's"),
          "f16 with the cuda backend: %s", err.msg);
    model_free(m);
}

int main(void) {
    TestCounts tc = {"test_forward_f16", 0, 0, 0};
    check_option(&tc);
    check_model(&tc, "tests/data/models/tiny-llama-hf", "tiny-llama", 1, 1, 1);
    check_model(&tc, "tests/data/models/tiny-qwen2-hf", "tiny-qwen2", 0, 1, 0);
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        CpuKernels kt;
        KvErr err = {{0}};
        if (cpu_kernels_init(&kt, levels[i], NULL, &err)) {
            printf("test_forward_f16: %s\n", err.msg);
            continue;
        }
        simd_level = levels[i];
        printf("test_forward_f16: simd %s\n", levels[i]);
        check_model(&tc, "tests/data/models/tiny-llama-hf", "tiny-llama", 0, 0, 1);
        simd_level = NULL;
    }
    FILE *f = fopen(GGUF_PATH, "rb");
    if (f) {
        fclose(f);
        check_model(&tc, GGUF_PATH, "smollm2-135m", 0, 1, 1);
    } else {
        SKIP(&tc, "the SmolLM2 checks: %s not found (make model)", GGUF_PATH);
    }
    return test_finish(&tc);
}
