/* test_forward.c — the CPU forward pass against the numpy float64 reference of tests/reference/gen_logits.py
 * (tiny synthetic Llama with llama3 RoPE scaling, tiny Qwen2 with q/k/v biases and tied embeddings, and
 * SmolLM2-135M from its Q4_1 GGUF when models/ has it; the opt-in fast decode also on the Qwen2.5 GGUFs' reference
 * cases of test_qwen, where models/ has them), and its internal consistency: prefill-then-decode
 * equals one long prefill (across chunk boundaries), a batch equals separate runs (also with different cache
 * lengths), gathering everything changes nothing, the observation and trace hooks agree with each other,
 * and bad inputs fail with a message.
 * Tolerances: logits relative error (max |diff| / max |ref|) <= 1e-3 against the reference; 1e-4 between two
 * f32 paths of this backend (they differ only in summation order). Greedy tokens identical for >= 32 steps. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/cpu/ops.h"
#include "../engine/generate.h"
#include "../engine/jsonfile.h"
#include "../engine/kvcache.h"
#include "forward_checks.h"
#include "test.h"

#define GGUF_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* ------------------------------------------------------------------------------------ kernels */

/* The polynomial exp behind softmax and SwiGLU against libm in double (relative 1e-6), and the blocked
 * (BLAS) attention against the per-row loop on random inputs with a non-empty past (1e-5). */
static void check_kernels(TestCounts *tc) {
    enum { n = 300, d = 16, T = 20, past = 37 };
    float x[n], g[n], u[n];
    unsigned state = 99;
#define UNIFORM() (((state = state * 1664525u + 1013904223u) >> 8) / 16777216.0f)
    for (int i = 0; i < n; i++) x[i] = g[i] = -80.0f + 95.0f * UNIFORM(), u[i] = UNIFORM() - 0.5f;
    /* the reference exponentiates the same f32 differences x - max, so only the exp approximation counts */
    float mx = -1e30f;
    double sum = 0, worst = 0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += exp((double)(x[i] - mx));
    float p[n];
    memcpy(p, x, sizeof p);
    cpu_softmax(p, n);
    for (int i = 0; i < n; i++) {
        double ref = exp((double)(x[i] - mx)) / sum;
        worst = fmax(worst, fabs(p[i] - ref) / fmax(ref, 1e-30));
    }
    CHECK(tc, worst <= 1e-6, "softmax relative error %.3g", worst);
    worst = 0;
    float h[n];
    memcpy(h, g, sizeof h);
    cpu_swiglu(h, u, n);
    for (int i = 0; i < n; i++) {
        double ref = g[i] / (1 + exp(-(double)g[i])) * u[i];
        worst = fmax(worst, fabs(h[i] - ref) / fmax(fabs(ref), 1e-30));
    }
    CHECK(tc, worst <= 1e-6, "swiglu relative error %.3g", worst);
    float q[T * d], k[(past + T) * d], v[(past + T) * d], blocked[T * d], rowwise[T * d], scores[T * (past + T)],
        probs[past + T];
    for (int i = 0; i < T * d; i++) q[i] = 2 * UNIFORM() - 1;
    for (int i = 0; i < (past + T) * d; i++) k[i] = 2 * UNIFORM() - 1, v[i] = 2 * UNIFORM() - 1;
    CpuKernels portable, best;
    KvErr ignored;
    cpu_kernels_init(&portable, "scalar", NULL, &ignored);
    cpu_kernels_init(&best, NULL, NULL, &ignored);
    cpu_attend_block(&portable, blocked, d, q, d, k, v, T, past, d, 0.25f, scores);
    {
        float fast[T * d];
        cpu_attend_block(&best, fast, d, q, d, k, v, T, past, d, 0.25f, scores);
        CHECK(tc, !memcmp(fast, blocked, sizeof fast), "blocked attention at %s equals the portable one bit for bit",
              best.simd_name);
    }
    for (int t = 0; t < T; t++) cpu_attend_row(rowwise + t * d, probs, q + t * d, k, v, past + t + 1, d, 0.25f);
    CHECK(tc, rel_err(blocked, rowwise, T * d) <= 1e-5, "blocked vs per-row attention %.3g",
          rel_err(blocked, rowwise, T * d));
    /* packed weights: Q4_1-style rows (f16 scale and minimum) and Q8_0-style rows pack exactly and multiply
     * like the f32 matrix; a matrix of arbitrary f32 values does not pack */
    enum { N = 6, KK = 64 };
    float w[N * KK], xr[2 * KK], y_f32[2 * N], y_packed[2 * N];
    int8_t codes[N * KK];
    float scales[N * KK / 32], offsets[N * KK / 32];
    CpuPacked packed = {codes, scales, offsets};
    for (int r = 0; r < N; r++)
        for (int blk = 0; blk < KK / 32; blk++) {
            /* f16-exact scale and minimum (11 significant bits; clang 14 has no _Float16 on x86) */
            float d = (float)(1 + (int)(1023 * UNIFORM())) / 8192.0f, mn = -(float)(int)(2047 * UNIFORM()) / 2048.0f;
            for (int i = 0; i < 32; i++) {
                int qv = r % 2 ? (int)(16 * UNIFORM()) % 16 : (int)(255 * UNIFORM()) - 127;
                w[r * KK + blk * 32 + i] = r % 2 ? (float)qv * (float)d + (float)mn : (float)qv * (float)d;
            }
        }
    for (int i = 0; i < 2 * KK; i++) xr[i] = 2 * UNIFORM() - 1;
    CHECK(tc, cpu_pack_exact(&packed, w, N, KK) == 1, "Q4_1 / Q8_0-style blocks pack");
    cpu_matmul(y_f32, xr, w, NULL, 2, N, KK, 0);
    static float tiles[64 * CPU_Q4_TILE_FLOATS(KK)] __attribute__((aligned(64)));
    cpu_matmul_q8(&portable, y_packed, xr, &packed, NULL, 2, N, KK, 0, tiles);
    CHECK(tc, rel_err(y_packed, y_f32, 2 * N) <= 1e-5, "packed vs f32 product %.3g", rel_err(y_packed, y_f32, 2 * N));
    w[5] += 1e-4f;
    CHECK(tc, cpu_pack_exact(&packed, w, N, KK) == 0, "a value off the block grid does not pack");
#undef UNIFORM
}

/* The simd level the backends are opened at (NULL: the automatic choice), as the runs layer would pass it. */
static const char *simd_level;

static BackendOptions level_options(void) {
    BackendOptions o = {0};
    KvErr ignored;
    backend_option_set(&o, BACKEND_OPT_SIMD, simd_level, &ignored);
    return o;
}

/* ------------------------------------------------------------------------------------ against the reference */

static void check_reference(TestCounts *tc, Backend *be, const char *name) {
    KvErr err = {{0}};
    int V = be->model->cfg.vocab_size;
    float *ref_logits;
    cJSON *ref = load_reference(tc, name, V, &ref_logits);
    if (!ref) return;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int ci = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(ref, "cases")) {
        int n, n_greedy;
        int *ids = json_ids(cJSON_GetObjectItem(cs, "ids"), &n);
        int *greedy = json_ids(cJSON_GetObjectItem(cs, "greedy"), &n_greedy);
        KvCache *c = prefill(tc, be, ids, n, 0, logits);
        double e = rel_err(logits, ref_logits + (size_t)ci * V, V);
        CHECK(tc, e <= 1e-3, "%s case %d: logits relative error %.3g", name, ci, e);
        be->cache_free(be, c);
        /* greedy through generate_greedy: the prompt feed, then single-token steps */
        CHECK(tc, be->cache_new(be, &c, n + n_greedy, &err) == 0, "%s", err.msg);
        GenerateOptions opt = {.max_new = n_greedy};
        TokenIds out;
        GenerateStats st;
        CHECK(tc, generate_greedy(be, &c, 1, ids, n, &opt, &out, &st, &err) == 0, "%s", err.msg);
        int same = 0;
        while (same < out.n && same < n_greedy && out.ids[same] == greedy[same]) same++;
        CHECK(tc, same >= 32 && out.n == n_greedy, "%s case %d: greedy tokens agree for %d steps", name, ci, same);
        printf("%s case %d: %d ids, logits rel err %.2e, greedy %d/%d identical, %.1f tok/s decode\n", name, ci, n,
               e, same, n_greedy, st.decode_tokens / (st.decode_ms / 1e3));
        ids_free(&out);
        be->cache_free(be, c);
        free(ids);
        free(greedy);
        ci++;
    }
    free(logits);
    free(ref_logits);
    cJSON_Delete(ref);
}

/* ------------------------------------------------------------------------------------ internal consistency */

/* ------------------------------------------------------------------------ weights streamed in, no f32 arena */

/* The observation hook of check_streamed: W_O as handed over against the f32 arena's, bit for bit. */
typedef struct {
    const Model *arena;
    int layers_same, layers_seen;
} WoCheck;

static int compare_wo(void *user, Observation *o, KvErr *err) {
    (void)err;
    WoCheck *wc = user;
    const ModelConfig *c = &wc->arena->cfg;
    wc->layers_seen++;
    wc->layers_same += !memcmp(o->w_o, wc->arena->layers[o->layer].wo,
                               sizeof(float) * c->d_model * c->n_heads * c->head_dim);
    return 0;
}

/* The backend opened the way runs open it (backend_load_model: the configuration only, the weights streamed
 * in at open and each matrix kept in one form, its codes where it packs) against the backend on the Model's
 * f32 arena (model_load: the prefill GEMMs read that arena, as every run did before), bit for bit:
 * prefill logits at lengths on both sides of the packed kernels' 32 rows and of a 512-token chunk, decode
 * steps after each, a batch of 34 sequences (the lm_head's product past the packed kernels too), and the
 * observation's W_O on every layer. The 34-sequence lm_head product is cut into tiles at SmolLM2's size,
 * bit for bit only under OpenBLAS's SkylakeX-family kernels (test_cpu_tiles): elsewhere it is held to 1e-5. */
static void check_streamed(TestCounts *tc, const char *spec, const Model *arena, Backend *be_arena, const int *ids) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    BackendOptions opt = level_options();
    if (backend_load_model(&m, "cpu", spec, &err) || backend_open(&be, "cpu", m, &opt, &err)) {
        CHECK(tc, 0, "%s without an f32 arena: %s", spec, err.msg);
        model_free(m);
        return;
    }
    CHECK(tc, !m->has_host_weights, "%s: backend_load_model leaves the weights to the backend", spec);
    int V = m->cfg.vocab_size;
    float *a = malloc(sizeof(float) * V * 34), *b = malloc(sizeof(float) * V * 34);
    const int lens[] = {1, 40, 600};
    int same = 0, total = 0;
    for (int li = 0; li < 3; li++) {
        KvCache *ca = prefill(tc, be_arena, ids, lens[li], 3, a), *cb = prefill(tc, be, ids, lens[li], 3, b);
        same += !memcmp(a, b, sizeof(float) * V), total++;
        for (int k = 0; k < 3; k++) {
            CHECK(tc, be_arena->forward(be_arena, &ca, 1, ids + 700 + k, 1, a, NULL, NULL, &err) == 0 &&
                          be->forward(be, &cb, 1, ids + 700 + k, 1, b, NULL, NULL, &err) == 0, "%s", err.msg);
            same += !memcmp(a, b, sizeof(float) * V), total++;
        }
        be_arena->cache_free(be_arena, ca);
        be->cache_free(be, cb);
    }
    CHECK(tc, same == total, "%s: %d of %d logits rows without the f32 arena equal those with it bit for bit", spec,
          same, total);
    KvCache *ba[34], *bb[34];
    for (int s = 0; s < 34; s++)
        CHECK(tc, be_arena->cache_new(be_arena, &ba[s], 3, &err) == 0 && be->cache_new(be, &bb[s], 3, &err) == 0,
              "%s", err.msg);
    CHECK(tc, be_arena->forward(be_arena, ba, 34, ids, 3, a, NULL, NULL, &err) == 0 &&
                  be->forward(be, bb, 34, ids, 3, b, NULL, NULL, &err) == 0, "%s", err.msg);
    const char *core = openblas_get_corename();
    int skylakex = core && (strstr(core, "kylake") || strstr(core, "ooperlake") || strstr(core, "apphire"));
    double e = rel_err(b, a, V * 34);
    CHECK(tc, skylakex ? !memcmp(a, b, sizeof(float) * V * 34) : e <= 1e-5,
          "%s: 34 sequences without the f32 arena vs with it: %.3g (OpenBLAS core %s)", spec, e, core);
    for (int s = 0; s < 34; s++) {
        be_arena->cache_free(be_arena, ba[s]);
        be->cache_free(be, bb[s]);
    }
    WoCheck wc = {arena, 0, 0};
    ObserveHook hook = {.window = 8, .on_layer = compare_wo, .user = &wc};
    KvCache *c = NULL;
    CHECK(tc, be->cache_new(be, &c, 40, &err) == 0 && be->forward(be, &c, 1, ids, 40, NULL, &hook, NULL, &err) == 0,
          "%s", err.msg);
    CHECK(tc, wc.layers_seen == m->cfg.n_layers && wc.layers_same == wc.layers_seen,
          "%s: the observation's W_O equals the f32 arena's on %d of %d layers", spec, wc.layers_same, wc.layers_seen);
    be->cache_free(be, c);
    free(a);
    free(b);
    backend_close(be);
    model_free(m);
}

/* The weights are read again from the source at backend_open: a file replaced in between by another model
 * (the tiny Llama GGUF by the tiny Qwen2, which has biases and tied embeddings) is refused with a message
 * naming it, before any weight lands in the wrong place. */
static void check_changed_source(TestCounts *tc) {
    char path[] = "/tmp/kvbench_forward_XXXXXX.gguf", cmd[600];
    int fd = mkstemps(path, 5);
    CHECK(tc, fd >= 0, "mkstemps");
    if (fd < 0) return;
    close(fd);
    snprintf(cmd, sizeof cmd, "cp tests/data/gguf/tiny_llama.gguf %s", path);
    CHECK(tc, system(cmd) == 0, "%s", cmd);
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    CHECK(tc, backend_load_model(&m, "cpu", path, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "cp tests/data/gguf/tiny_qwen2.gguf %s", path);
    CHECK(tc, system(cmd) == 0, "%s", cmd);
    int rc = m ? backend_open(&be, "cpu", m, NULL, &err) : -1;
    CHECK(tc, rc == -1 && !be && strstr(err.msg, "changed since it was opened") && strstr(err.msg, path),
          "backend_open on a replaced file: rc %d: %s", rc, err.msg);
    model_free(m);
    remove(path);
}

/* The greedy tokens of all cases decoded together: each case's cache prefilled on its own, then one batched
 * step per token (the sweep's batched decode). out[c][0..steps) receives case c's tokens. */
static int batched_greedy(Backend *be, int n_cases, int **ids, const int *n_ids, int steps, int **out, KvErr *err) {
    int V = be->model->cfg.vocab_size, rc = 0, made = 0;
    KvCache **caches = calloc((size_t)n_cases, sizeof *caches);
    float *logits = malloc(sizeof(float) * (size_t)n_cases * V);
    int *tok = malloc(sizeof(int) * (size_t)n_cases);
    if (!caches || !logits || !tok) rc = kv_fail(err, "out of memory");
    for (; !rc && made < n_cases; made++) {
        rc = be->cache_new(be, &caches[made], n_ids[made] + steps, err) ||
             be->forward(be, &caches[made], 1, ids[made], n_ids[made], logits + (size_t)made * V, NULL, NULL, err);
        if (rc && caches[made]) made++;
    }
    for (int s = 0; !rc && s < steps; s++) {
        for (int c = 0; c < n_cases; c++) {
            const float *l = logits + (size_t)c * V;
            int best = 0;
            for (int v = 1; v < V; v++) best = l[v] > l[best] ? v : best;
            out[c][s] = tok[c] = best;
        }
        if (s + 1 < steps) rc = be->forward(be, caches, n_cases, tok, 1, logits, NULL, NULL, err);
    }
    for (int c = 0; c < made; c++) be->cache_free(be, caches[c]);
    free(caches);
    free(logits);
    free(tok);
    return rc;
}

/* The fast decode reads codes only: on a model with f32 matrices (a synthetic model's random weights, an f32
 * checkpoint) it would decode exactly under its label, so the backend refuses it, naming the model. */
static void refuse_fast(TestCounts *tc, const char *spec) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    BackendOptions fast = {.decode = BACKEND_DECODE_FAST};
    CHECK(tc, model_load(&m, spec, &err) == 0, "%s", err.msg);
    CHECK(tc, m && backend_open(&be, "cpu", m, &fast, &err) == -1 && !be && strstr(err.msg, "block codes") &&
                  strstr(err.msg, spec),
          "decode fast on f32 matrices refused: %s", err.msg);
    model_free(m);
}

/* The opt-in fast decode (decode = fast) on the reference cases: its greedy tokens against the
 * reference's, reported (an approximate path: agreement is a measurement, not a requirement). Checked: it
 * runs, its prompt logits (prefill is exact on both paths) are the exact path's, and all cases decoded in
 * one batch give each case's single-sequence tokens (a batched fast decode equals B single ones). */
static void report_fast(TestCounts *tc, const char *spec, const char *ref_name) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    BackendOptions fast = {.decode = BACKEND_DECODE_FAST}, used;
    /* loaded as a run loads it: a GGUF's matrices stay its blocks (model_load's f32 copy would not) */
    int rc = backend_load_model(&m, "cpu", spec, &err) || backend_open(&be, "cpu", m, &fast, &err);
    CHECK(tc, rc == 0, "%s with decode fast: %s", spec, err.msg);
    if (!rc) {
        backend_options_used(be, &used);
        CHECK(tc, used.decode == BACKEND_DECODE_FAST, "%s: the backend reports the fast decode it runs", spec);
    }
    if (rc) {
        model_free(m);
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "tests/data/reference/%s.json", ref_name);
    cJSON *ref = kv_read_json(path, &err);
    CHECK(tc, ref != NULL, "%s", err.msg);
    const cJSON *cs;
    int ci = 0, agree_total = 0, steps_total = 0;
    cJSON *cases = ref ? cJSON_GetObjectItem(ref, "cases") : NULL;
    enum { MAX_CASES = 32 };
    int *case_ids[MAX_CASES], n_case_ids[MAX_CASES], *single[MAX_CASES], *batched[MAX_CASES], *ref_greedy[MAX_CASES],
        n_steps = 0, kept = 0;
    cJSON_ArrayForEach(cs, cases) {
        int n, n_greedy;
        int *ids = json_ids(cJSON_GetObjectItem(cs, "ids"), &n);
        int *greedy = json_ids(cJSON_GetObjectItem(cs, "greedy"), &n_greedy);
        KvCache *c = NULL;
        CHECK(tc, be->cache_new(be, &c, n + n_greedy, &err) == 0, "%s", err.msg);
        GenerateOptions opt = {.max_new = n_greedy};
        TokenIds out;
        GenerateStats st;
        CHECK(tc, generate_greedy(be, &c, 1, ids, n, &opt, &out, &st, &err) == 0, "%s", err.msg);
        int same = 0;
        while (same < out.n && same < n_greedy && out.ids[same] == greedy[same]) same++;
        CHECK(tc, out.n >= 1 && out.ids[0] == greedy[0], "%s case %d: the first token comes from the exact prefill",
              ref_name, ci);
        printf("%s case %d, FAST decode: greedy tokens agree with the reference for %d of %d steps, %.1f tok/s\n",
               ref_name, ci, same, n_greedy, st.decode_tokens / (st.decode_ms / 1e3));
        agree_total += same;
        steps_total += n_greedy;
        if (kept < MAX_CASES && (kept == 0 || n_greedy == n_steps) && out.n == n_greedy) {
            n_steps = n_greedy;
            case_ids[kept] = ids, n_case_ids[kept] = n, ref_greedy[kept] = greedy;
            single[kept] = malloc(sizeof(int) * n_greedy), batched[kept] = malloc(sizeof(int) * n_greedy);
            memcpy(single[kept], out.ids, sizeof(int) * n_greedy);
            kept++;
        } else {
            printf("%s case %d: left out of the batched comparison (%d of %d greedy steps made; it takes cases of %d)\n",
                   ref_name, ci, out.n, n_greedy, n_steps);
            free(ids);
            free(greedy);
        }
        ids_free(&out);
        be->cache_free(be, c);
        ci++;
    }
    printf("%s FAST decode: %d of %d greedy steps agree before the first difference\n", ref_name, agree_total,
           steps_total);
    int n_cases = kept;
    if (n_cases > 0 && batched_greedy(be, n_cases, case_ids, n_case_ids, n_steps, batched, &err) == 0) {
        int same_as_single = 1, agree_batched = 0;
        for (int c = 0; c < n_cases; c++) {
            same_as_single &= !memcmp(batched[c], single[c], sizeof(int) * n_steps);
            int same = 0;
            while (same < n_steps && batched[c][same] == ref_greedy[c][same]) same++;
            agree_batched += same;
        }
        CHECK(tc, same_as_single, "%s: the %d cases decoded in one FAST batch give their single-sequence tokens",
              ref_name, n_cases);
        printf("%s FAST decode, all %d cases in one batch: %d of %d greedy steps agree before the first difference\n",
               ref_name, n_cases, agree_batched, n_cases * n_steps);
    } else {
        CHECK(tc, n_cases == 0, "%s batched FAST decode: %s", ref_name, err.msg);
    }
    for (int c = 0; c < n_cases; c++) free(case_ids[c]), free(ref_greedy[c]), free(single[c]), free(batched[c]);
    cJSON_Delete(ref);
    backend_close(be);
    model_free(m);
}

/* ------------------------------------------------------------------------------------- attention sums */

typedef struct {
    int L;
    float *q, *keys; /* [N][H][L][d], [N][K][L][d]: every query (a window of the whole prefill) and key */
    double *sums;    /* [N][H][L] as observed */
    double *stats;   /* [N][H][d + d*d] the query statistics as observed */
    int layers_seen;
} SumCapture;

static int capture_sums(void *user, Observation *o, KvErr *err) {
    SumCapture *sc = user;
    const size_t l = (size_t)o->layer, L = (size_t)o->L, d = (size_t)o->d;
    if (!o->attn_sums || o->L != sc->L) return kv_fail(err, "layer %d: no attention sums over %d tokens", o->layer, sc->L);
    if (!o->query_stats || o->query_stats_from != 4 || !o->rope_inv_freq)
        return kv_fail(err, "layer %d: no query statistics from position 4", o->layer);
    memcpy(sc->stats + l * o->H * (d + d * d), o->query_stats, sizeof(double) * o->H * (d + d * d));
    if (o->w == o->L) {
        memcpy(sc->q + l * o->H * L * d, o->q_win, sizeof(float) * o->H * L * d);
        for (int k = 0; k < o->K; k++) memcpy(sc->keys + (l * o->K + k) * L * d, o->keys[k], sizeof(float) * L * d);
    }
    memcpy(sc->sums + l * o->H * L, o->attn_sums, sizeof(double) * o->H * L);
    sc->layers_seen++;
    return 0;
}

/* ObserveHook.attention_sums against a double loop over every query and key of the prefill, the queries observed
 * as one window of n: the sums of that one-chunk prefill and of a prefill observed with window 1 (chunks of 512
 * and the rest, so the sums carry across chunks) agree with it to 1e-5 of the largest sum (float32 scores and
 * softmax, a different summation order); the sums on 1 and 3 threads are the same bits. A cache that already holds
 * entries is refused. ObserveHook.query_stats from position 4 likewise against the mean and the centred covariance
 * (two passes in double) of those queries turned back before RoPE (the backend's angles, inverted in double): to
 * 1e-6 of the largest |mean| and |covariance| entry (the f32 rotation's rounding; one pass over sums here). */
static void check_attention_sums(TestCounts *tc, Backend *be, const int *ids, int n) {
    KvErr err = {{0}};
    const ModelConfig *c = &be->model->cfg;
    const int N = c->n_layers, H = c->n_heads, K = c->n_kv_heads, d = c->head_dim, G = H / K;
    const size_t per = (size_t)N * H * n;
    /* sums[run]: run 0 observes every query (window n, one chunk), runs 1 and 2 window 1 on 1 and 3 threads */
    double *sums = malloc(sizeof(double) * 3 * per), *ref = calloc(per, sizeof(double));
    double *filled = malloc(sizeof(double) * per); /* the hook's buffer */
    const size_t per_stats = (size_t)N * H * (d + d * d), from = 4;
    double *stats = malloc(sizeof(double) * 3 * per_stats), *hook_stats = malloc(sizeof(double) * per_stats);
    SumCapture whole = {n, malloc(sizeof(float) * per * d), malloc(sizeof(float) * (size_t)N * K * n * d), sums,
                        stats, 0};
    int threads = omp_get_max_threads();
    for (int run = 0; run < 3; run++) {
        SumCapture chunked = {n, NULL, NULL, sums + per * (size_t)run, stats + per_stats * (size_t)run, 0};
        SumCapture *sc = run ? &chunked : &whole;
        ObserveHook hook = {.window = run ? 1 : n, .on_layer = capture_sums, .user = sc, .attention_sums = filled,
                            .query_stats = hook_stats, .query_stats_from = (int)from};
        KvCache *kc = NULL;
        omp_set_num_threads(run == 2 ? 3 : 1);
        int rc = be->cache_new(be, &kc, n, &err) || be->forward(be, &kc, 1, ids, n, NULL, &hook, NULL, &err);
        CHECK(tc, !rc && sc->layers_seen == N, "prefill of %d with attention sums (run %d): %s", n, run, err.msg);
        if (kc) be->cache_free(be, kc);
    }
    omp_set_num_threads(threads);
    double top = 0, worst = 0;
    float *logit = malloc(sizeof(float) * n);
    for (int l = 0; l < N; l++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const float *q = whole.q + (((size_t)l * H + h) * n + i) * d;
                double mx = -1e300, total = 0;
                for (int j = 0; j <= i; j++) {
                    const float *k = whole.keys + (((size_t)l * K + h / G) * n + j) * d;
                    double dot = 0;
                    for (int t = 0; t < d; t++) dot += (double)q[t] * k[t];
                    logit[j] = (float)(dot / sqrt(d));
                    mx = logit[j] > mx ? logit[j] : mx;
                }
                for (int j = 0; j <= i; j++) total += exp(logit[j] - mx);
                for (int j = 0; j <= i; j++) ref[((size_t)l * H + h) * n + j] += exp(logit[j] - mx) / total;
            }
    for (size_t t = 0; t < per; t++) top = fmax(top, ref[t]);
    for (int run = 0; run < 2; run++)
        for (size_t t = 0; t < per; t++) worst = fmax(worst, fabs(sums[per * (size_t)run + t] - ref[t]) / top);
    CHECK(tc, worst <= 1e-5, "attention sums over %d tokens vs a double loop: max diff %.3g of the largest sum", n,
          worst);
    CHECK(tc, !memcmp(sums + per, sums + 2 * per, sizeof(double) * per),
          "attention sums on 3 threads: one thread's bits");
    double *pre = malloc(sizeof(double) * n * d), *ref_stats = malloc(sizeof(double) * per_stats);
    const float *inv_freq = be->model->rope_inv_freq;
    for (int l = 0; l < N; l++)
        for (int h = 0; h < H; h++) {
            double *mean = ref_stats + ((size_t)l * H + h) * (d + d * d), *cov = mean + d;
            for (int i = 0; i < n; i++) /* RoPE undone: (a, b) = (x0 c - x1 s, x1 c + x0 s) */
                for (int t = 0; t < d / 2; t++) {
                    const float *q = whole.q + (((size_t)l * H + h) * n + i) * d;
                    double c = (float)cos((double)i * inv_freq[t]), s = (float)sin((double)i * inv_freq[t]);
                    pre[(size_t)i * d + t] = q[t] * c + q[t + d / 2] * s;
                    pre[(size_t)i * d + t + d / 2] = q[t + d / 2] * c - q[t] * s;
                }
            for (int a = 0; a < d; a++) {
                mean[a] = 0;
                for (size_t i = from; i < (size_t)n; i++) mean[a] += pre[i * d + a] / (double)(n - from);
            }
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) {
                    cov[a * d + b] = 0;
                    for (size_t i = from; i < (size_t)n; i++)
                        cov[a * d + b] += (pre[i * d + a] - mean[a]) * (pre[i * d + b] - mean[b]) / (double)(n - from);
                }
        }
    double top_mean = 0, top_cov = 0, worst_mean = 0, worst_cov = 0;
    for (size_t t = 0; t < per_stats; t++)
        *(t % (d + d * d) < (size_t)d ? &top_mean : &top_cov) =
            fmax(t % (d + d * d) < (size_t)d ? top_mean : top_cov, fabs(ref_stats[t]));
    for (int run = 0; run < 2; run++)
        for (size_t t = 0; t < per_stats; t++) {
            double diff = fabs(stats[per_stats * (size_t)run + t] - ref_stats[t]);
            if (t % (d + d * d) < (size_t)d) worst_mean = fmax(worst_mean, diff / top_mean);
            else worst_cov = fmax(worst_cov, diff / top_cov);
        }
    printf("query statistics over %d tokens: max diff %.3g of the largest |mean|, %.3g of the largest |covariance|\n",
           n, worst_mean, worst_cov);
    CHECK(tc, worst_mean <= 1e-6 && worst_cov <= 1e-6,
          "query statistics over %d tokens vs a double loop: max diff %.3g of the largest |mean|, %.3g of the largest "
          "|covariance|", n, worst_mean, worst_cov);
    CHECK(tc, !memcmp(stats + per_stats, stats + 2 * per_stats, sizeof(double) * per_stats),
          "query statistics on 3 threads: one thread's bits");
    free(pre);
    free(ref_stats);
    KvCache *kc = prefill(tc, be, ids, 4, n, NULL);
    ObserveHook hook = {.window = 1, .on_layer = capture_sums, .user = &whole, .attention_sums = filled};
    CHECK(tc, kc && be->forward(be, &kc, 1, ids, n - 4, NULL, &hook, NULL, &err) == -1 &&
                  strstr(err.msg, "empty cache"), "attention sums after a cached prefix: %s", err.msg);
    hook.attention_sums = NULL, hook.query_stats = hook_stats;
    CHECK(tc, kc && be->forward(be, &kc, 1, ids, n - 4, NULL, &hook, NULL, &err) == -1 &&
                  strstr(err.msg, "empty cache"), "query statistics after a cached prefix: %s", err.msg);
    if (kc) be->cache_free(be, kc);
    free(logit);
    free(whole.q);
    free(whole.keys);
    free(filled);
    free(sums);
    free(ref);
    free(stats);
    free(hook_stats);
}

static void check_model(TestCounts *tc, const char *spec, const char *ref_name, int deep) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *be = NULL;
    BackendOptions opt = level_options();
    if (model_load(&m, spec, &err) || backend_open(&be, "cpu", m, &opt, &err)) {
        CHECK(tc, 0, "%s: %s", spec, err.msg);
        model_free(m);
        return;
    }
    if (m->cfg.d_model % CPU_PACK_BLOCK == 0) {
        /* the tiny Llama and SmolLM2 (Q4_1 GGUF) decode from packed weights; the tiny Qwen2 (plain f32) cannot */
        int K = m->cfg.d_model, N = m->cfg.n_heads * m->cfg.head_dim;
        CpuPacked p = {malloc((size_t)N * K), malloc(sizeof(float) * N * K / 32), malloc(sizeof(float) * N * K / 32)};
        int want = strcmp(ref_name, "tiny-qwen2") != 0;
        CHECK(tc, cpu_pack_exact(&p, m->layers[0].wq, N, K) == want, "%s: q_proj packs: %d", ref_name, !want);
        free(p.q);
        free(p.scale);
        free(p.offset);
    }
    check_reference(tc, be, ref_name);
    {
        int n = 710, *ids = malloc(sizeof(int) * n);
        unsigned state = 777;
        for (int i = 0; i < n; i++) ids[i] = (int)((state = state * 1103515245u + 12345u) >> 8) % m->cfg.vocab_size;
        check_streamed(tc, spec, m, be, ids);
        free(ids);
    }
    if (deep) {
        /* random ids beyond two prefill chunks (512) so the blocked attention sees a non-empty past */
        int n = 1100, *ids = malloc(sizeof(int) * n);
        unsigned state = 12345;
        for (int i = 0; i < n; i++) ids[i] = (int)((state = state * 1103515245u + 12345u) >> 8) % m->cfg.vocab_size;
        check_split_prefill(tc, be, ids, 91, 60, 1);
        check_split_prefill(tc, be, ids, n, 300, 333);
        /* the packed-weight kernels make each row independent of the others: the batch equals single runs bit
         * for bit where every matrix is packed (the tiny Llama); OpenBLAS's GEMM need not (the tiny Qwen2) */
        check_batch(tc, be, ids, strcmp(ref_name, "tiny-qwen2") != 0 ? 0.0 : 1e-4);
        check_gather(tc, be, ids, 50);
        check_views(tc, be, ids);
        check_hooks(tc, be, ids, 40);
        check_attention_sums(tc, be, ids, 700);
        check_attention_sums(tc, be, ids, 515);
        free(ids);
    }
    backend_close(be);
    model_free(m);
}

int main(void) {
    TestCounts tc = {"test_forward", 0, 0, 0};
    check_kernels(&tc);
    check_changed_source(&tc);
    check_model(&tc, "tests/data/models/tiny-llama-hf", "tiny-llama", 1);
    check_model(&tc, "tests/data/models/tiny-qwen2-hf", "tiny-qwen2", 1);
    report_fast(&tc, "tests/data/models/tiny-llama-hf", "tiny-llama");
    refuse_fast(&tc, "synthetic:smollm2-135m:layers=1:vocab=512");
    /* every instruction set of the packed kernels this CPU has (BackendOptions.simd forces one at backend open) */
    const char *levels[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        CpuKernels kt;
        KvErr err = {{0}};
        if (cpu_kernels_init(&kt, levels[i], NULL, &err)) {
            printf("test_forward: %s\n", err.msg);
            continue;
        }
        simd_level = levels[i];
        printf("test_forward: simd %s\n", levels[i]);
        check_model(&tc, "tests/data/models/tiny-llama-hf", "tiny-llama", 0);
        simd_level = NULL;
    }
    FILE *f = fopen(GGUF_PATH, "rb");
    if (f) {
        fclose(f);
        check_model(&tc, GGUF_PATH, "smollm2-135m", 0);
        report_fast(&tc, GGUF_PATH, "smollm2-135m");
    } else {
        SKIP(&tc, "the SmolLM2 checks: %s not found (make model)", GGUF_PATH);
    }
    /* the fast decode on a source's blocks (Q5_0, Q4_K, Q6_K): the Qwen2.5 models' reference cases (test_qwen) */
    static const char *const qwen[][3] = {
        {"models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf", "qwen2.5-coder-0.5b", "make model-qwen"},
        {"models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf", "qwen2.5-coder-1.5b", "make model-qwen15"}};
    for (int i = 0; i < 2; i++) {
        if ((f = fopen(qwen[i][0], "rb"))) {
            fclose(f);
            report_fast(&tc, qwen[i][0], qwen[i][1]);
        } else {
            SKIP(&tc, "the fast decode of %s: not found (%s)", qwen[i][0], qwen[i][2]);
        }
    }
    return test_finish(&tc);
}
