/* check_cuda.c — the CUDA backend against the CPU backend, then its speed against ceilings measured in the same
 * run. Built and run by tests/gpu/check.sh on a machine with an NVIDIA GPU; prints one PASS/FAIL line per check,
 * one pass/miss line per speed target, a closing count, and exits 1 if any check failed (a missed target is
 * reported, not a failure), 2 without a usable GPU (one line saying what was needed and what was found).
 *
 * Correctness, on synthetic models at real shapes (random weights made here, nothing shipped):
 *   - kernel lab: flash prefill, split-K decode and window attention against the naive oracle kernel;
 *   - prefill logits, window attention, projected value norms and keys against the CPU backend;
 *   - keep-sets of every policy run on each backend's observation: the CUDA side may disagree with the CPU
 *     side no more than twice as much as the CPU side disagrees with itself when it scores from its own
 *     queries, keys, values and o_proj rounded to bf16, as the GPU holds them (the "separated by more than bf16
 *     rounding" criterion, measured rather than assumed), plus a small slack; exactly for policies that read no
 *     observation;
 *   - a batch of sequences on gathered head-variable caches: question feed and decode steps (logits, and the
 *     traced attention probabilities);
 *   - bad input: a cache larger than the GPU, a token outside the vocabulary, a full cache.
 * Speed, on Llama-3.1-8B shapes: prefill at 4k, 16k and 32k tokens in TFLOP/s (matrix and attention FLOPs)
 * against a large cuBLAS bf16 GEMM; decode at caches of 4k and 32k and batches of 1, 16 and 32 in GB/s (weights
 * plus kept KV bytes per step) against a device-to-device copy, views against copies; the sweep's observed
 * prefill (runs/prepare.c) and keep-sets against the plain prefill, with the device's and each policy's share.
 *
 * Usage: check_cuda [--quick]   (--quick skips the 16k- and 32k-token timings) */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../engine/backend.h"
#include "../../engine/cuda/cuda_api.h"
#include "../../engine/generate.h"
#include "../../policies/cuda_policy.h"
#include "../../engine/kvcache.h"
#include "../../engine/model.h"
#include "../../engine/observation.h"
#include "../../policies/duo.h"
#include "../../policies/policy.h"
#include "../../runs/prepare.h"

/* Tolerances (bf16 weights and activations against the f32 CPU reference). */
#define TOL_LOGITS 2e-2    /* max |a-b| / max |a| */
#define TOL_ATTN 2e-2      /* max |a-b| of probabilities */
#define TOL_REL 3e-2       /* value norms, keys: max |a-b| / max |a| */
#define TOL_KERNEL 2e-2    /* fast kernel vs oracle, absolute, outputs of magnitude <= 1 */
#define KEEP_SLACK 0.02    /* keep-set disagreement allowed beyond twice the bf16 self-disagreement */

enum { N_POLICIES = 8, CTX = 300, QUESTION = 16, STEPS = 4, N_DECODE = 4 };
static const char *POLICIES[N_POLICIES] = {"full",       "streamingllm", "snapkv",      "adakv",
                                           "cake",       "criticalkv",   "defensivekv", "layer-defensivekv"};
/* The sequences of the decode batch: keep-sets of these policies (indices into POLICIES). */
static const int DECODE_POLICIES[N_DECODE] = {0, 2, 6, 1};

typedef struct {
    int checks, fails, targets, misses;
} Summary;

static void verdict(Summary *s, int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s  ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    fflush(stdout);
    s->checks++;
    s->fails += !ok;
}

static void target(Summary *s, int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("target %s  ", ok ? "pass" : "MISS");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    fflush(stdout);
    s->targets++;
    s->misses += !ok;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static int random_token(int vocab) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int)(rng % (uint64_t)vocab);
}

/* The larger of two errors, NaN when either is (fmax and a plain comparison would let a NaN slip through). */
static double worse(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }

static double rel_err(const float *ref, const float *got, size_t n) {
    double scale = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(ref[i]));
        double e = fabs((double)ref[i] - got[i]);
        diff = worse(diff, e);
    }
    return diff / (scale > 0 ? scale : 1.0);
}

static double abs_err(const float *ref, const float *got, size_t n) {
    double diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)ref[i] - got[i]);
        diff = worse(diff, e);
    }
    return diff;
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Capturing a prefill's observations and running the policies on them                                    */

typedef struct {
    int is_cpu;                        /* the CPU observation needs observation_prepare */
    int round_bf16;                    /* also run the policies on bf16-rounded tensors (CPU side) */
    PolicyConfig cfg[N_POLICIES];
    PolicyState *st[N_POLICIES], *st_bf16[N_POLICIES];
    float **attn, **nu, **keys;        /* per layer: [H*w*L], [K*L], [K*L*d] */
    int L, w, H, K, d;
} Capture;

static int capture_begin(Capture *c, const Model *m, int is_cpu, int L, KvErr *err) {
    memset(c, 0, sizeof *c);
    c->is_cpu = is_cpu;
    c->round_bf16 = is_cpu;
    int N = m->cfg.n_layers;
    c->attn = calloc(N, sizeof(float *));
    c->nu = calloc(N, sizeof(float *));
    c->keys = calloc(N, sizeof(float *));
    if (!c->attn || !c->nu || !c->keys) return kv_fail(err, "out of memory");
    for (int p = 0; p < N_POLICIES; p++) {
        if (policy_config(&c->cfg[p], POLICIES[p], NULL, err) ||
            policy_begin(&c->st[p], &c->cfg[p], N, m->cfg.n_kv_heads, L, err) ||
            (c->round_bf16 && policy_begin(&c->st_bf16[p], &c->cfg[p], N, m->cfg.n_kv_heads, L, err)))
            return kv_wrap(err, "policy %s", POLICIES[p]);
    }
    return 0;
}

static void capture_end(Capture *c, int n_layers) {
    for (int p = 0; p < N_POLICIES; p++) {
        if (c->st[p]) policy_end(c->st[p]);
        if (c->st_bf16[p]) policy_end(c->st_bf16[p]);
    }
    for (int l = 0; l < n_layers && c->attn && c->nu && c->keys; l++) {
        free(c->attn[l]);
        free(c->nu[l]);
        free(c->keys[l]);
    }
    free(c->attn);
    free(c->nu);
    free(c->keys);
}

static float *copy_floats(const float *src, size_t n, int round) {
    float *dst = malloc(n * sizeof(float));
    if (dst)
        for (size_t i = 0; i < n; i++) dst[i] = round ? bf16_round(src[i]) : src[i];
    return dst;
}

static int on_layer(void *user, Observation *obs, KvErr *err) {
    Capture *c = user;
    if (c->is_cpu && observation_prepare(obs, 1, err)) return -1;
    int l = obs->layer;
    size_t n_attn = (size_t)obs->H * obs->w * obs->L, n_nu = (size_t)obs->K * obs->L;
    c->L = obs->L, c->w = obs->w, c->H = obs->H, c->K = obs->K, c->d = obs->d;
    c->attn[l] = copy_floats(obs->attn, n_attn, 0);
    c->nu[l] = copy_floats(obs->value_norm, n_nu, 0);
    c->keys[l] = malloc(n_nu * obs->d * sizeof(float));
    if (!c->attn[l] || !c->nu[l] || !c->keys[l]) return kv_fail(err, "out of memory");
    for (int k = 0; k < obs->K; k++)
        memcpy(c->keys[l] + (size_t)k * obs->L * obs->d, obs->keys[k], (size_t)obs->L * obs->d * sizeof(float));
    int rc = 0;
    for (int p = 0; p < N_POLICIES && !rc; p++) rc = policy_observe(c->st[p], obs, err);
    if (!rc && c->round_bf16) {
        /* The CUDA backend scores from bf16 queries, keys, values and o_proj: the same rounding, on the CPU's
         * own tensors, shows which choices are within rounding of each other. */
        Observation r = *obs;
        size_t n_q = (size_t)obs->H * obs->w * obs->d, n_kv = (size_t)obs->L * obs->d;
        size_t n_wo = (size_t)obs->D * obs->H * obs->d;
        float *q = copy_floats(obs->q_win, n_q, 1), *wo = copy_floats(obs->w_o, n_wo, 1);
        float **kv = calloc(2 * (size_t)obs->K, sizeof(float *));
        int ok = q && wo && kv;
        for (int k = 0; ok && k < obs->K; k++) {
            kv[k] = copy_floats(obs->keys[k], n_kv, 1);
            kv[obs->K + k] = copy_floats(obs->values[k], n_kv, 1);
            ok = kv[k] && kv[obs->K + k];
        }
        if (!ok) {
            rc = kv_fail(err, "out of memory");
        } else {
            r.q_win = q;
            r.keys = (const float *const *)kv;
            r.values = (const float *const *)(kv + obs->K);
            r.w_o = wo;
            r.attn = r.value_norm = NULL;
            r.scratch = NULL;
            rc = observation_prepare(&r, 1, err);
            for (int p = 0; p < N_POLICIES && !rc; p++) rc = policy_observe(c->st_bf16[p], &r, err);
            observation_release(&r);
        }
        for (int k = 0; kv && k < 2 * obs->K; k++) free(kv[k]);
        free(kv);
        free(q);
        free(wo);
    }
    if (c->is_cpu) observation_release(obs);
    return rc;
}

/* Fraction of a's kept (head, position) pairs that b keeps too (segments are sorted ascending). */
static double keep_overlap(const KeepSet *a, const KeepSet *b) {
    long common = 0, total = a->total > b->total ? a->total : b->total;
    for (int i = 0; i < a->n_layers * a->n_kv_heads; i++) {
        const int *x = a->positions + a->offsets[i], *y = b->positions + b->offsets[i];
        int nx = a->counts[i], ny = b->counts[i], ix = 0, iy = 0;
        while (ix < nx && iy < ny) {
            if (x[ix] == y[iy])
                common++, ix++, iy++;
            else if (x[ix] < y[iy])
                ix++;
            else
                iy++;
        }
    }
    return total ? (double)common / total : 1.0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Scoring and selection on the device (policies/cuda_policy.h) against the host's, bit for bit          */

static const char *AGGREGATIONS[] = {"default", "mean", "max", "max+prior"};
static const char *DEVICE_BUDGETS[] = {"0.1", "0.2", "0.4", "0.8", "24tok"};
enum { N_AGG = 4, N_DEVICE_BUDGETS = 5 };
static const char *ALL_POLICIES[] = {"full", "streamingllm", "snapkv", "adakv", "cake", "criticalkv",
                                     "defensivekv", "layer-defensivekv", "duoattention"};
enum { N_ALL_POLICIES = 9 };

/* One prefill's observations, layer by layer, in host memory. */
typedef struct {
    int N, K, H, L, w;
    float **attn, **nu; /* [N] -> [H*w*L], [K*L] */
} ObsSet;

static int keepset_same(const KeepSet *a, const KeepSet *b) {
    if (a->n_layers != b->n_layers || a->n_kv_heads != b->n_kv_heads || a->total != b->total) return 0;
    size_t heads = (size_t)a->n_layers * a->n_kv_heads;
    return !memcmp(a->counts, b->counts, heads * sizeof(int)) && !memcmp(a->offsets, b->offsets, heads * sizeof(int)) &&
           !memcmp(a->positions, b->positions, (size_t)a->total * sizeof(int));
}

static Observation obs_layer(const ObsSet *o, int l) {
    Observation x;
    memset(&x, 0, sizeof x);
    x.layer = l, x.n_layers = o->N, x.L = o->L, x.w = o->w, x.H = o->H, x.K = o->K;
    x.attn = o->attn[l];
    x.value_norm = o->nu[l];
    return x;
}

/* Scores cfg on both sides (the device reading `device_obs`, normally o itself) and selects every budget:
 * returns the number of budgets whose keep-sets (or failures) differ, -1 when a side failed to score; each
 * difference is named on stderr unless quiet. *first receives the host's keep-set of the first budget when
 * asked. */
static int device_vs_host(const ObsSet *o, const ObsSet *device_obs, const PolicyConfig *cfg, KeepSet *first,
                          int quiet, KvErr *err) {
    PolicyState *host = NULL;
    CudaPolicy *dev = NULL;
    int differ = -1;
    if (policy_begin(&host, cfg, o->N, o->K, o->L, err) || cuda_policy_begin(&dev, cfg, o->N, o->K, o->L, err))
        goto done;
    for (int l = 0; l < o->N; l++) {
        Observation x = obs_layer(o, l), y = obs_layer(device_obs, l);
        if ((policy_needs_attention(cfg) && policy_observe(host, &x, err)) || cuda_policy_observe_host(dev, &y, err))
            goto done;
    }
    differ = 0;
    for (int b = 0; b < N_DEVICE_BUDGETS; b++) {
        Budget budget;
        KeepSet kh, kd;
        KvErr eh = {{0}}, ed = {{0}};
        if (budget_parse(DEVICE_BUDGETS[b], &budget, err)) {
            differ = -1;
            break;
        }
        int rh = policy_select(host, &budget, &kh, &eh), rd = cuda_policy_select(dev, &budget, &kd, &ed);
        int same = rh || rd ? rh && rd : keepset_same(&kh, &kd);
        if (!same && !quiet)
            fprintf(stderr, "device scoring: %s (%s) at %s: %s\n", cfg->name, aggregation_name(cfg->aggregation),
                    DEVICE_BUDGETS[b], rh || rd ? (rh ? eh.msg : ed.msg) : "keep-sets differ");
        differ += !same;
        if (first && b == 0 && !rh) *first = kh;
        else if (!rh) keepset_free(&kh);
        if (!rd) keepset_free(&kd);
    }
done:
    policy_end(host);
    cuda_policy_end(dev);
    return differ;
}

/* Every policy x aggregation x budget on o: the count of keep-sets that differ (or of failed scorings). */
static int device_scoring_all(const ObsSet *o, const DuoPattern *duo, int *compared, KvErr *err) {
    int differ = 0;
    *compared = 0;
    for (int p = 0; p < N_ALL_POLICIES; p++)
        for (int a = 0; a < N_AGG; a++) {
            PolicyConfig cfg;
            KvErr e = {{0}};
            if (policy_config(&cfg, ALL_POLICIES[p], AGGREGATIONS[a], &e)) continue; /* takes no aggregation */
            if (a == 0 && cfg.aggregation != AGG_DEFAULT) continue;                 /* one of the three below */
            cfg.window = o->w;
            cfg.duo_pattern = duo;
            int d = device_vs_host(o, o, &cfg, NULL, 0, err);
            if (d < 0) {
                fprintf(stderr, "device scoring: %s (%s): %s\n", cfg.name, AGGREGATIONS[a], err->msg);
                d = N_DEVICE_BUDGETS;
            }
            differ += d;
            *compared += N_DEVICE_BUDGETS;
        }
    return differ;
}

/* A DuoAttention pattern of N x K heads with scores from a few values (ties), sink 4, recent 8. */
static void duo_make(DuoPattern *d, int N, int K, double *score) {
    memset(d, 0, sizeof *d);
    d->n_layers = N, d->n_kv_heads = K, d->score = score, d->sink_size = 4, d->recent_size = 8;
    snprintf(d->source, sizeof d->source, "random pattern of the device scoring check");
    for (int i = 0; i < N * K; i++) score[i] = (double)(random_token(4)) / 4.0;
}

static void obs_free(ObsSet *o) {
    for (int l = 0; l < o->N && o->attn; l++) {
        free(o->attn[l]);
        free(o->nu ? o->nu[l] : NULL);
    }
    free(o->attn);
    free(o->nu);
}

/* Random observations with many ties: attention rows drawn from 0..3 (a few rows all zero or uniform),
 * normalised over each window row's causal keys; value norms from 0..3 with whole zero columns. */
static int obs_random(ObsSet *o, int N, int K, int G, int L, int w) {
    memset(o, 0, sizeof *o);
    o->N = N, o->K = K, o->H = K * G, o->L = L, o->w = w;
    o->attn = calloc((size_t)N, sizeof(float *));
    o->nu = calloc((size_t)N, sizeof(float *));
    if (!o->attn || !o->nu) return -1;
    for (int l = 0; l < N; l++) {
        o->attn[l] = calloc((size_t)o->H * w * L, sizeof(float));
        o->nu[l] = calloc((size_t)K * L, sizeof(float));
        if (!o->attn[l] || !o->nu[l]) return -1;
        for (int r = 0; r < o->H * w; r++) {
            float *a = o->attn[l] + (size_t)r * L;
            int seen = L - w + r % w + 1, kind = random_token(16);
            double sum = 0;
            for (int j = 0; j < seen; j++) sum += a[j] = kind == 0 ? 0.0f : kind == 1 ? 1.0f : (float)random_token(4);
            for (int j = 0; j < seen && sum > 0; j++) a[j] = (float)(a[j] / sum);
        }
        for (int j = 0; j < L; j++) {
            int zero_column = random_token(10) == 0;
            for (int k = 0; k < K; k++) o->nu[l][(size_t)k * L + j] = zero_column ? 0.0f : (float)random_token(4);
        }
    }
    return 0;
}

/* Deep copy of o (for the planted error). */
static int obs_copy(const ObsSet *o, ObsSet *c) {
    memset(c, 0, sizeof *c);
    *c = *o;
    c->attn = calloc((size_t)o->N, sizeof(float *));
    c->nu = calloc((size_t)o->N, sizeof(float *));
    if (!c->attn || !c->nu) return -1;
    for (int l = 0; l < o->N; l++) {
        c->attn[l] = copy_floats(o->attn[l], (size_t)o->H * o->w * o->L, 0);
        c->nu[l] = copy_floats(o->nu[l], (size_t)o->K * o->L, 0);
        if (!c->attn[l] || !c->nu[l]) return -1;
    }
    return 0;
}

/* A planted error must be caught: the device reads o with one prefix key of kv-head 0 in layer 0, one that
 * SnapKV's host keep-set at the first budget drops, raised to weight 1 in every window row of that head's
 * group; the comparison must then report a difference. */
static void check_planted(Summary *s, const char *label, const ObsSet *o) {
    KvErr err = {{0}};
    PolicyConfig cfg;
    KeepSet host = {0};
    ObsSet planted = {0};
    int ok = 0, j = -1;
    if (policy_config(&cfg, "snapkv", NULL, &err)) {
        verdict(s, 0, "%s device scoring, planted error: %s", label, err.msg);
        return;
    }
    cfg.window = o->w;
    if (device_vs_host(o, o, &cfg, &host, 0, &err) != 0 || obs_copy(o, &planted)) {
        verdict(s, 0, "%s device scoring, planted error: setup failed: %s", label, err.msg);
        goto done;
    }
    for (int c = 0, i = 0; c < o->L - o->w && j < 0; c++) { /* the first prefix position head 0 does not keep */
        while (i < host.counts[0] && host.positions[i] < c) i++;
        if (i == host.counts[0] || host.positions[i] != c) j = c;
    }
    for (int r = 0; j >= 0 && r < (o->H / o->K) * o->w; r++) planted.attn[0][(size_t)r * o->L + j] = 1.0f;
    ok = j >= 0 && device_vs_host(o, &planted, &cfg, NULL, 1, &err) > 0;
    verdict(s, ok, "%s device scoring, planted error (layer 0, kv-head 0, key %d raised on the device's side "
            "only): %s", label, j, ok ? "caught" : "NOT caught");
done:
    keepset_free(&host);
    obs_free(&planted);
}

/* Every policy x aggregation x budget, device against host, on the observations of o. */
static void check_device_scoring(Summary *s, const char *label, const ObsSet *o) {
    KvErr err = {{0}};
    double *duo_score = malloc(sizeof(double) * o->N * o->K);
    if (!duo_score) {
        verdict(s, 0, "%s device scoring: out of host memory", label);
        return;
    }
    DuoPattern duo;
    duo_make(&duo, o->N, o->K, duo_score);
    double t0 = now_s();
    int compared = 0, differ = device_scoring_all(o, &duo, &compared, &err);
    verdict(s, differ == 0 && compared > 0, "%s device scoring [N=%d K=%d H=%d L=%d w=%d]: %d of %d keep-sets "
            "(policy x aggregation x budget) differ from the host's in any position (== 0), %.1f s", label, o->N,
            o->K, o->H, o->L, o->w, differ, compared, now_s() - t0);
    free(duo_score);
    /* A ladder setting is taken by its steps, not the policy's name: defensivekv set to Layer-DefensiveKV's. */
    PolicyConfig cfg;
    int d = policy_config(&cfg, "defensivekv", NULL, &err) || policy_set_param(&cfg, "allocation", "global", &err)
                ? -1
                : (cfg.window = o->w, device_vs_host(o, o, &cfg, NULL, 0, &err));
    verdict(s, d == 0, "%s device scoring of defensivekv with allocation=global: %d of %d keep-sets differ from the "
            "host's (== 0)%s%s", label, d, N_DEVICE_BUDGETS, d < 0 ? ": " : "", d < 0 ? err.msg : "");
    check_planted(s, label, o);
}

/* What the device does not reproduce is refused at begin, naming the policy and the setting, so the caller scores
 * on the host: a ladder setting other than the three published ones, and a policy with a scorer of its own. */
static void check_device_refusals(Summary *s) {
    static const struct {
        const char *policy, *key, *value, *named;
    } cases[] = {{"criticalkv", "pooling", "rows", "pooling=rows"}, {"defensivekv", "group", "mean", "group=mean"},
                 {"layer-defensivekv", "safeguard", "on", "safeguard=on"}, {"knorm", NULL, NULL, "raw keys"},
                 {"tova", NULL, NULL, "its own scorer"}, {"pyramidkv", NULL, NULL, "its own scorer"},
                 {"chunkkv", NULL, NULL, "its own scorer"}, {"critical-snapkv", NULL, NULL, "its own scorer"},
                 {"lagkv", NULL, NULL, "raw keys"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PolicyConfig cfg;
        CudaPolicy *dev = NULL;
        KvErr err = {{0}};
        int set = policy_config(&cfg, cases[i].policy, NULL, &err) ||
                  (cases[i].key && policy_set_param(&cfg, cases[i].key, cases[i].value, &err));
        int refused = !set && cuda_policy_begin(&dev, &cfg, 2, 2, 64, &err) != 0;
        cuda_policy_end(dev);
        verdict(s, refused && strstr(err.msg, cases[i].policy) && strstr(err.msg, cases[i].named),
                "device scoring of %s%s%s refused at begin, naming the policy and '%s': %s", cases[i].policy,
                cases[i].key ? " with " : "", cases[i].key ? cases[i].named : "", cases[i].named,
                refused ? err.msg : "accepted");
    }
}

/* Random observations of a few shapes (ties everywhere, zero rows and columns), device against host. */
static void check_device_scoring_random(Summary *s) {
    check_device_refusals(s);
    static const int shapes[][5] = {/* N, K, G, L, w */ {3, 2, 2, 60, 8}, {2, 1, 4, 97, 16}, {2, 4, 1, 45, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ObsSet o;
        const int *x = shapes[i];
        if (obs_random(&o, x[0], x[1], x[2], x[3], x[4])) {
            verdict(s, 0, "random observations: out of host memory");
            obs_free(&o);
            return;
        }
        check_device_scoring(s, "random observations:", &o);
        obs_free(&o);
    }
}

/* The observation scored on the device: every policy's CudaPolicy reads the layer's device arrays. */
typedef struct {
    CudaPolicy *p[N_POLICIES];
    double seconds[N_POLICIES];
} DeviceScorers;

static int on_layer_device(void *user, Observation *obs, KvErr *err) {
    DeviceScorers *d = user;
    for (int p = 0; p < N_POLICIES; p++) {
        double t0 = now_s();
        if (cuda_policy_observe(d->p[p], obs, err)) return kv_wrap(err, "%s", POLICIES[p]);
        d->seconds[p] += now_s() - t0;
    }
    return 0;
}

/* A prefill of tokens[0..T) whose observation the policies cfg[N_POLICIES] score on the device (d, begun here;
 * the caller ends them with device_scorers_end, also after a failure). */
static int device_prefill(Backend *gpu, const int *tokens, int T, const PolicyConfig *cfg, DeviceScorers *d,
                          KvErr *err) {
    const ModelConfig *c = &gpu->model->cfg;
    KvCache *kc = NULL;
    int rc = 0, want_value_norm = 0;
    memset(d, 0, sizeof *d);
    for (int p = 0; p < N_POLICIES && !rc; p++) {
        rc = cuda_policy_begin(&d->p[p], &cfg[p], c->n_layers, c->n_kv_heads, T, err);
        want_value_norm |= policy_needs_value_norm(&cfg[p]);
    }
    if (!rc) rc = gpu->cache_new(gpu, &kc, T, err);
    if (!rc) {
        ObserveHook hook = {.window = cfg[0].window, .want_value_norm = want_value_norm, .on_layer = on_layer_device,
                            .user = d, .derived_only = 1, .on_device = 1};
        rc = gpu->forward(gpu, &kc, 1, tokens, T, NULL, &hook, NULL, err);
    }
    if (kc) gpu->cache_free(gpu, kc);
    return rc;
}

static void device_scorers_end(DeviceScorers *d) {
    for (int p = 0; p < N_POLICIES; p++) cuda_policy_end(d->p[p]);
}

/* The backend's own device observation (ObserveHook.on_device, no host copies) scored by every policy on the
 * device against the host's policies on the same prefill's host copies (cap, already observed): the same arrays,
 * so the keep-sets at 20% must be equal bit for bit. */
static void check_on_device(Summary *s, const char *spec, Backend *gpu, const int *tokens, int T, Capture *cap) {
    KvErr err = {{0}};
    DeviceScorers d;
    int differ = 0, rc = device_prefill(gpu, tokens, T, cap->cfg, &d, &err);
    Budget budget = {.keep_fraction = 0.2};
    for (int p = 0; p < N_POLICIES && !rc; p++) {
        KeepSet kh, kd;
        if (policy_select(cap->st[p], &budget, &kh, &err)) {
            rc = -1;
            break;
        }
        if (!(rc = cuda_policy_select(d.p[p], &budget, &kd, &err))) {
            differ += !keepset_same(&kh, &kd);
            keepset_free(&kd);
        }
        keepset_free(&kh);
    }
    device_scorers_end(&d);
    if (rc)
        verdict(s, 0, "%s observation scored on the device during the prefill: %s", spec, err.msg);
    else
        verdict(s, differ == 0, "%s observation scored on the device during the prefill (no host copies): %d of %d "
                "keep-sets at 20%% differ from the host's on the copied observation (== 0)", spec, differ, N_POLICIES);
}

/* The sweep's own prefill (runs/prepare.c) on this backend: scored on the device where it can (Prefill.on_device)
 * and on the host when asked (PrepareEnv.host_scoring), every policy's keep-sets at 20% and 40% equal bit for
 * bit; a set with a policy the device does not reproduce (knorm reads raw keys) scores on the host. */
static void check_sweep_prefill(Summary *s, const char *spec, const Model *m, Backend *gpu, const int *tokens, int T) {
    KvErr err = {{0}};
    PolicyConfig pc[N_POLICIES + 1];
    const PolicyConfig *pcs[N_POLICIES + 1];
    int rc = 0;
    for (int p = 0; p <= N_POLICIES && !rc; p++) {
        rc = policy_config(&pc[p], p < N_POLICIES ? POLICIES[p] : "knorm", NULL, &err);
        pcs[p] = &pc[p];
    }
    TokenIds ctx = {.ids = (int *)tokens, .n = T, .cap = T};
    Prefill dev, host, mixed;
    memset(&dev, 0, sizeof dev), memset(&host, 0, sizeof host), memset(&mixed, 0, sizeof mixed);
    PrepareEnv env = {.model = m, .be = gpu}, env_host = {.model = m, .be = gpu, .host_scoring = 1};
    if (!rc) rc = prefill_run(&dev, &env, &ctx, pcs, N_POLICIES, 0, &err) ||
                  prefill_run(&host, &env_host, &ctx, pcs, N_POLICIES, 0, &err) ||
                  prefill_run(&mixed, &env, &ctx, pcs, N_POLICIES + 1, 0, &err);
    int differ = 0, compared = 0;
    for (int p = 0; p < N_POLICIES && !rc; p++)
        for (int b = 0; b < 2 && !rc; b++) {
            Budget budget = {.keep_fraction = b ? 0.4 : 0.2};
            KeepSet kd, kh;
            memset(&kd, 0, sizeof kd), memset(&kh, 0, sizeof kh);
            rc = prefill_select(&dev, p, &budget, &kd, &err) || prefill_select(&host, p, &budget, &kh, &err);
            if (!rc) differ += !keepset_same(&kd, &kh), compared++;
            keepset_free(&kd);
            keepset_free(&kh);
        }
    if (rc)
        verdict(s, 0, "%s the sweep's prefill scored on the device and on the host: %s", spec, err.msg);
    else
        verdict(s, dev.on_device && !host.on_device && !mixed.on_device && differ == 0,
                "%s the sweep's prefill (runs/prepare.c): scored on the device %d (== 1), on the host when asked %d "
                "(== 0) and with knorm in the set %d (== 0); %d of %d keep-sets (8 policies x 20%%, 40%%) differ "
                "between device and host (== 0)", spec, dev.on_device, host.on_device, mixed.on_device, differ,
                compared);
    prefill_free(&dev);
    prefill_free(&host);
    prefill_free(&mixed);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Decode traces: the CPU's probabilities are kept, the CUDA backend's compared against them              */

typedef struct {
    int B, N, H;
    float **probs;   /* [B*N*H] copies from the CPU */
    int *n;          /* [B*N*H] */
    double max_diff; /* over every compared row */
    int mismatched;  /* rows whose key count or positions differ */
    int compare;     /* 0: record (CPU), 1: compare (CUDA) */
} TraceCmp;

static void on_attention(void *user, int seq, int layer, int head, const float *probs, const int *positions,
                         int n_keys) {
    TraceCmp *t = user;
    (void)positions;
    int i = (seq * t->N + layer) * t->H + head;
    if (!t->compare) {
        free(t->probs[i]);
        t->probs[i] = copy_floats(probs, (size_t)n_keys, 0);
        t->n[i] = n_keys;
        return;
    }
    if (!t->probs[i] || t->n[i] != n_keys) {
        t->mismatched++;
        return;
    }
    double e = abs_err(t->probs[i], probs, (size_t)n_keys);
    t->max_diff = worse(t->max_diff, e);
}

/* ------------------------------------------------------------------------------------------------------ */
/* CUDA against CPU on one synthetic model                                                                 */

/* Records what a derived_only observation hands over: only attn and value_norm may be set. */
typedef struct {
    int layers, raw_seen, derived_missing;
} DerivedOnly;

static int on_layer_derived(void *user, Observation *obs, KvErr *err) {
    (void)err;
    DerivedOnly *d = user;
    d->layers++;
    d->raw_seen += obs->q_win || obs->keys || obs->values || obs->w_o;
    d->derived_missing += !obs->attn || !obs->value_norm;
    return 0;
}

/* The model opened without host weights (model_load_config), its weights streamed from the source straight to
 * the GPU: the same bf16 weights, so the same logits as the backend opened on the host arena (want_logits),
 * and an observation without raw tensors when the hook asks for derived_only. */
static void check_streamed(Summary *s, const char *spec, const int *tokens, int n, int window, const float *want_logits) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *gpu = NULL;
    KvCache *kc = NULL;
    float *logits = NULL;
    DerivedOnly d = {0};
    double t0 = now_s();
    if (model_load_config(&m, spec, &err) || backend_open(&gpu, "cuda", m, NULL, &err)) {
        verdict(s, 0, "%s streamed weights: %s", spec, err.msg);
        goto done;
    }
    double opened = now_s() - t0;
    ObserveHook hook = {.window = window, .want_value_norm = 1, .on_layer = on_layer_derived, .user = &d,
                        .derived_only = 1};
    if (!(logits = malloc((size_t)m->cfg.vocab_size * sizeof(float))) || gpu->cache_new(gpu, &kc, n, &err) ||
        gpu->forward(gpu, &kc, 1, tokens, n, logits, &hook, NULL, &err)) {
        verdict(s, 0, "%s streamed weights: prefill: %s", spec, logits ? err.msg : "out of host memory");
        goto done;
    }
    double e = rel_err(want_logits, logits, (size_t)m->cfg.vocab_size);
    verdict(s, !m->has_host_weights && e <= 1e-6,
            "%s weights streamed from the source (no host copy, opened in %.1f s): logits match the host-loaded "
            "backend's, relative error %.1e (<= 1e-6)", spec, opened, e);
    verdict(s, d.layers == m->cfg.n_layers && !d.raw_seen && !d.derived_missing,
            "%s derived_only observation: %d layers, %d with raw tensors, %d without attn/value_norm", spec, d.layers,
            d.raw_seen, d.derived_missing);
done:
    if (kc) gpu->cache_free(gpu, kc);
    backend_close(gpu);
    model_free(m);
    free(logits);
}

/* generate.c's greedy pick: the first index of the largest value under a strict >. */
static int host_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Feeds tokens[N_DECODE][n_new] to caches through forward_greedy and counts into *differ the sequences whose pick
 * is not the host's argmax of want_logits[N_DECODE][V] (the same tokens' logits on identical caches). */
static int greedy_picks_differ(Backend *gpu, KvCache **caches, const int *tokens, int n_new, const float *want_logits,
                               long *differ, KvErr *err) {
    int picks[N_DECODE], V = gpu->model->cfg.vocab_size;
    if (!gpu->forward_greedy) return kv_fail(err, "backend %s has no forward_greedy", gpu->name);
    if (gpu->forward_greedy(gpu, caches, N_DECODE, tokens, n_new, picks, NULL, err)) return -1;
    for (int b = 0; b < N_DECODE; b++) *differ += picks[b] != host_argmax(want_logits + (size_t)b * V, V);
    return 0;
}

/* The device's argmax kernel on rows made to catch every way it could differ from the host's scan: ties (the
 * first index wins), -0 against +0, NaN first (index 0) and NaN elsewhere (never picked), all -inf, a maximum in
 * the last element, and random rows of a real vocabulary's width. */
static void check_argmax(Summary *s) {
    enum { ROWS = 9, V = 151936 };
    float *x = malloc(sizeof(float) * ROWS * V);
    int got[ROWS], want[ROWS];
    KvErr err = {{0}};
    if (!x) {
        verdict(s, 0, "argmax: out of host memory");
        return;
    }
    for (size_t i = 0; i < (size_t)ROWS * V; i++) x[i] = (float)(random_token(1000) - 500) / 7.0f;
    float *r = x;
    r[17] = r[90000] = r[151000] = 1e6f;                       /* row 0: a three-way tie */
    r += V, r[5] = -0.0f, r[6] = 0.0f;                         /* row 1: -0 before +0, both the max */
    for (int i = 0; i < V; i++) r[i] = i == 5 || i == 6 ? r[i] : -1.0f;
    r += V, r[0] = NAN, r[3] = 1e9f;                           /* row 2: NaN first: index 0 */
    r += V, r[1] = NAN, r[40000] = NAN, r[77] = 1e9f;          /* row 3: NaN elsewhere is skipped */
    r += V;                                                    /* row 4: all -inf: index 0 */
    for (int i = 0; i < V; i++) r[i] = -INFINITY;
    r += V, r[V - 1] = 1e9f;                                   /* row 5: the last element */
    for (int k = 0; k < ROWS; k++) want[k] = host_argmax(x + (size_t)k * V, V);
    int rc = cuda_argmax_rows_host(x, ROWS, V, got, &err), differ = 0;
    for (int k = 0; k < ROWS && !rc; k++) differ += got[k] != want[k];
    if (rc) verdict(s, 0, "argmax on the device: %s", err.msg);
    else
        verdict(s, differ == 0 && want[0] == 17 && want[1] == 5 && want[2] == 0 && want[3] == 77 && want[4] == 0 &&
                       want[5] == V - 1,
                "argmax on the device against the host's scan, %d rows of %d (ties, -0/+0, NaN, -inf, last): %d differ "
                "(== 0)", ROWS, V, differ);
    free(x);
}

/* Rows of a batch against the same sequences decoded alone: what decoding the variants of several samples in one
 * batch needs (issue 36), since a row's logits must not depend on which sequences share its batch. BATCH_ROWS
 * caches, the N_DECODE keep-sets (full, snapkv, defensivekv, streamingllm: different lengths) in turn, take the
 * question feed and STEPS greedy steps together; the first N_DECODE take the same tokens alone, one sequence a
 * call. Prints how many of their logits differ in any bit. Informational: cuBLAS may choose another kernel for
 * another row count, and nothing decodes across samples yet; a row that differs says what that needs. */
enum { BATCH_ROWS = 16 };
/* Returns the logits that differ in any bit (-1: the check could not run). */
static long report_batch_rows(const char *spec, Backend *gpu, const KvCache *gc, const KeepSet *ks_cpu) {
    KvErr err = {{0}};
    KvCache *batch[BATCH_ROWS] = {0}, *alone[N_DECODE] = {0};
    int V = gpu->model->cfg.vocab_size, extra = QUESTION + STEPS, rc = 0;
    float *lb = malloc(sizeof(float) * BATCH_ROWS * V), *la = malloc(sizeof(float) * N_DECODE * V);
    int *tokens = malloc(sizeof(int) * BATCH_ROWS * QUESTION), next[BATCH_ROWS];
    long differ = 0, compared = 0;
    if (!lb || !la || !tokens) rc = kv_fail(&err, "out of host memory");
    for (int b = 0; b < BATCH_ROWS && !rc; b++)
        rc = gpu->cache_gather(gpu, gc, &ks_cpu[DECODE_POLICIES[b % N_DECODE]], extra, &batch[b], &err) ||
             (b < N_DECODE && gpu->cache_gather(gpu, gc, &ks_cpu[DECODE_POLICIES[b]], extra, &alone[b], &err));
    for (int b = 0; b < BATCH_ROWS && !rc; b++)
        for (int t = 0; t < QUESTION; t++) tokens[b * QUESTION + t] = (37 * (b % N_DECODE) + 11 * t) % V;
    for (int step = 0; step <= STEPS && !rc; step++) {
        int n_new = step == 0 ? QUESTION : 1;
        const int *fed = step == 0 ? tokens : next;
        rc = gpu->forward(gpu, batch, BATCH_ROWS, fed, n_new, lb, NULL, NULL, &err);
        for (int b = 0; b < N_DECODE && !rc; b++)
            rc = gpu->forward(gpu, &alone[b], 1, fed + (size_t)b * n_new, n_new, la + (size_t)b * V, NULL, NULL, &err);
        for (size_t i = 0; i < (size_t)N_DECODE * V && !rc; i++) differ += memcmp(&lb[i], &la[i], sizeof(float)) != 0;
        compared += (long)N_DECODE * V;
        for (int b = 0; b < BATCH_ROWS && !rc; b++) next[b] = host_argmax(la + (size_t)(b % N_DECODE) * V, V);
    }
    if (rc)
        printf("INFO  %s batch rows against the same sequences alone: %s\n", spec, err.msg);
    else
        printf("INFO  %s batch rows against the same sequences alone (%d caches of 4 lengths in one batch, %d of them "
               "one a call; question feed and %d steps): %ld of %ld logits differ in any bit\n", spec, BATCH_ROWS,
               N_DECODE, STEPS, differ, compared);
    for (int b = 0; b < BATCH_ROWS; b++)
        if (batch[b]) gpu->cache_free(gpu, batch[b]);
    for (int b = 0; b < N_DECODE; b++)
        if (alone[b]) gpu->cache_free(gpu, alone[b]);
    free(lb);
    free(la);
    free(tokens);
    return rc ? -1 : differ;
}

/* Decode across samples (runs/sweep.c's decode pool): two samples' variants (the 4 keep-sets, questions of
 * different lengths) through one generate_greedy_groups, against each sample through generate_greedy alone. Where
 * report_batch_rows found the batch rows equal to the rows alone bit for bit (the emulation), every token must be
 * equal: a verdict. Where they differ (a cuBLAS kernel chosen by the batch's row count), the count is an INFO
 * line: it says how often that changes a greedy token. */
static void check_joint_decode(Summary *s, const char *spec, Backend *gpu, const KvCache *gc, const KeepSet *ks_cpu,
                               long batch_differ) {
    enum { N_SAMPLES = 2, MAX_NEW = 2 * STEPS };
    KvErr err = {{0}};
    KvCache *joint[N_SAMPLES][N_DECODE] = {{0}}, *alone[N_SAMPLES][N_DECODE] = {{0}};
    TokenIds out_joint[N_SAMPLES][N_DECODE] = {{{0}}}, out_alone[N_SAMPLES][N_DECODE] = {{{0}}};
    int prompts[N_SAMPLES][QUESTION], n_prompt[N_SAMPLES] = {QUESTION, QUESTION - 5}, rc = 0;
    const int V = gpu->model->cfg.vocab_size, extra = QUESTION + MAX_NEW;
    for (int g = 0; g < N_SAMPLES; g++)
        for (int t = 0; t < QUESTION; t++) prompts[g][t] = (53 * g + 29 * t + 3) % V;
    GenerateGroup groups[N_SAMPLES];
    const GenerateOptions opt = {.max_new = MAX_NEW};
    for (int g = 0; g < N_SAMPLES && !rc; g++) {
        for (int b = 0; b < N_DECODE && !rc; b++)
            rc = gpu->cache_gather(gpu, gc, &ks_cpu[DECODE_POLICIES[b]], extra, &joint[g][b], &err) ||
                 gpu->cache_gather(gpu, gc, &ks_cpu[DECODE_POLICIES[b]], extra, &alone[g][b], &err);
        groups[g] = (GenerateGroup){.caches = joint[g], .n_seqs = N_DECODE, .prompt = prompts[g],
                                    .n_prompt = n_prompt[g], .opt = opt, .out = out_joint[g]};
    }
    if (!rc) rc = generate_greedy_groups(gpu, groups, N_SAMPLES, &err);
    for (int g = 0; g < N_SAMPLES && !rc; g++)
        rc = generate_greedy(gpu, alone[g], N_DECODE, prompts[g], n_prompt[g], &opt, out_alone[g], NULL, &err);
    long differ = 0, compared = 0;
    for (int g = 0; g < N_SAMPLES && !rc; g++)
        for (int b = 0; b < N_DECODE; b++) {
            const TokenIds *x = &out_joint[g][b], *y = &out_alone[g][b];
            for (int t = 0; t < MAX_NEW; t++) differ += t >= x->n || t >= y->n || x->ids[t] != y->ids[t];
            compared += MAX_NEW;
        }
    if (rc)
        verdict(s, 0, "%s decode across samples: %s", spec, err.msg);
    else if (batch_differ == 0)
        verdict(s, differ == 0, "%s decode across samples (%d samples x %d caches, questions of %d and %d tokens, %d "
                "steps) against each sample alone: %ld of %ld tokens differ", spec, N_SAMPLES, N_DECODE, n_prompt[0],
                n_prompt[1], MAX_NEW, differ, compared);
    else
        printf("INFO  %s decode across samples against each sample alone (the batch rows differ, so tokens may): "
               "%ld of %ld tokens differ\n", spec, differ, compared);
    for (int g = 0; g < N_SAMPLES; g++)
        for (int b = 0; b < N_DECODE; b++) {
            ids_free(&out_joint[g][b]);
            ids_free(&out_alone[g][b]);
            if (joint[g][b]) gpu->cache_free(gpu, joint[g][b]);
            if (alone[g][b]) gpu->cache_free(gpu, alone[g][b]);
        }
}

static void check_model(Summary *s, const char *spec) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *cpu = NULL, *gpu = NULL;
    KvCache *cc = NULL, *gc = NULL, *cb[N_DECODE] = {0}, *gb[N_DECODE] = {0}, *gv[N_DECODE] = {0};
    KvCache *gg[N_DECODE] = {0}; /* the same copies again, decoded by forward_greedy */
    long pick_differ = 0;        /* its picks against the host's argmax of gb's logits */
    Capture cap_cpu, cap_gpu;
    memset(&cap_cpu, 0, sizeof cap_cpu);
    memset(&cap_gpu, 0, sizeof cap_gpu);
    KeepSet ks_cpu[N_POLICIES], ks_gpu[N_POLICIES], ks_bf16[N_POLICIES];
    memset(ks_cpu, 0, sizeof ks_cpu);
    memset(ks_gpu, 0, sizeof ks_gpu);
    memset(ks_bf16, 0, sizeof ks_bf16);
    TraceCmp tr = {0};
    float *lc = NULL, *lg = NULL, *lv = NULL;
    int *tokens = NULL;
    long view_bits = 0; /* logits of the views that differ in any bit from the gathered copies' */
    printf("\n== %s: CUDA against CPU ==\n", spec);
    double t0 = now_s();
    if (model_load(&m, spec, &err)) {
        verdict(s, 0, "%s: load: %s", spec, err.msg);
        return;
    }
    printf("model made in %.1f s\n", now_s() - t0);
    const ModelConfig *c = &m->cfg;
    int V = c->vocab_size, N = c->n_layers;
    lc = malloc((size_t)N_DECODE * V * sizeof(float));
    lg = malloc((size_t)N_DECODE * V * sizeof(float));
    lv = malloc((size_t)N_DECODE * V * sizeof(float));
    tokens = malloc((size_t)CTX * N_DECODE * sizeof(int));
    if (!lc || !lg || !lv || !tokens) {
        verdict(s, 0, "%s: out of host memory", spec);
        goto done;
    }
    if (backend_open(&cpu, "cpu", m, NULL, &err) || backend_open(&gpu, "cuda", m, NULL, &err)) {
        verdict(s, 0, "%s: backend_open: %s", spec, err.msg);
        goto done;
    }
    for (int i = 0; i < CTX; i++) tokens[i] = random_token(V);
    if (capture_begin(&cap_cpu, m, 1, CTX, &err) || capture_begin(&cap_gpu, m, 0, CTX, &err)) {
        verdict(s, 0, "%s: policies: %s", spec, err.msg);
        goto done;
    }
    {
        ObserveHook hc = {.window = cap_cpu.cfg[0].window, .want_value_norm = 1, .on_layer = on_layer, .user = &cap_cpu};
        ObserveHook hg = {.window = cap_cpu.cfg[0].window, .want_value_norm = 1, .on_layer = on_layer, .user = &cap_gpu};
        int extra = QUESTION + STEPS + 1;
        double tc0 = now_s();
        if (cpu->cache_new(cpu, &cc, CTX + extra, &err) || cpu->forward(cpu, &cc, 1, tokens, CTX, lc, &hc, NULL, &err)) {
            verdict(s, 0, "%s: CPU prefill: %s", spec, err.msg);
            goto done;
        }
        double tc1 = now_s();
        if (gpu->cache_new(gpu, &gc, CTX + extra, &err) || gpu->forward(gpu, &gc, 1, tokens, CTX, lg, &hg, NULL, &err)) {
            verdict(s, 0, "%s: CUDA prefill: %s", spec, err.msg);
            goto done;
        }
        printf("prefill of %d tokens: CPU %.2f s, CUDA %.3f s (first call)\n", CTX, tc1 - tc0, now_s() - tc1);
    }
    verdict(s, rel_err(lc, lg, V) <= TOL_LOGITS, "%s prefill logits: relative error %.2e (<= %.0e)", spec,
            rel_err(lc, lg, V), TOL_LOGITS);
    check_streamed(s, spec, tokens, CTX, cap_cpu.cfg[0].window, lg);
    {
        double ea = 0, en = 0, ek = 0;
        size_t n_attn = (size_t)cap_cpu.H * cap_cpu.w * cap_cpu.L, n_nu = (size_t)cap_cpu.K * cap_cpu.L;
        for (int l = 0; l < N; l++) {
            ea = worse(ea, abs_err(cap_cpu.attn[l], cap_gpu.attn[l], n_attn));
            en = worse(en, rel_err(cap_cpu.nu[l], cap_gpu.nu[l], n_nu));
            ek = worse(ek, rel_err(cap_cpu.keys[l], cap_gpu.keys[l], n_nu * cap_cpu.d));
        }
        verdict(s, ea <= TOL_ATTN, "%s window attention [H=%d][w=%d][L=%d]: max abs error %.2e (<= %.0e)", spec,
                cap_cpu.H, cap_cpu.w, cap_cpu.L, ea, TOL_ATTN);
        verdict(s, en <= TOL_REL, "%s projected value norms: relative error %.2e (<= %.0e)", spec, en, TOL_REL);
        verdict(s, ek <= TOL_REL, "%s keys after RoPE: relative error %.2e (<= %.0e)", spec, ek, TOL_REL);
    }
    {
        Budget budget;
        if (budget_parse("0.2", &budget, &err)) {
            verdict(s, 0, "budget: %s", err.msg);
            goto done;
        }
        for (int p = 0; p < N_POLICIES; p++) {
            if (policy_select(cap_cpu.st[p], &budget, &ks_cpu[p], &err) ||
                policy_select(cap_cpu.st_bf16[p], &budget, &ks_bf16[p], &err) ||
                policy_select(cap_gpu.st[p], &budget, &ks_gpu[p], &err)) {
                verdict(s, 0, "%s %s select: %s", spec, POLICIES[p], err.msg);
                goto done;
            }
            double og = keep_overlap(&ks_cpu[p], &ks_gpu[p]), ob = keep_overlap(&ks_cpu[p], &ks_bf16[p]);
            int exact = !policy_needs_attention(&cap_cpu.cfg[p]);
            int ok = exact ? og == 1.0 : (1.0 - og) <= 2.0 * (1.0 - ob) + KEEP_SLACK;
            verdict(s, ok, "%s keep-set %-17s at 20%%: CUDA/CPU overlap %.4f, CPU from bf16-rounded tensors/CPU overlap %.4f%s",
                    spec, POLICIES[p], og, ob, exact ? " (must be exact)" : "");
        }
    }

    {
        ObsSet o = {.N = N, .K = cap_gpu.K, .H = cap_gpu.H, .L = cap_gpu.L, .w = cap_gpu.w, .attn = cap_gpu.attn,
                    .nu = cap_gpu.nu};
        check_device_scoring(s, spec, &o);
        check_on_device(s, spec, gpu, tokens, CTX, &cap_gpu);
        check_sweep_prefill(s, spec, m, gpu, tokens, CTX);
    }

    /* A batch of sequences on gathered head-variable caches, the same keep-sets (the CPU's) on both sides. */
    {
        int extra = QUESTION + STEPS + 1; /* one spare entry for the bad-input checks */
        for (int b = 0; b < N_DECODE; b++) {
            const KeepSet *ks = &ks_cpu[DECODE_POLICIES[b]];
            if (cpu->cache_gather(cpu, cc, ks, extra, &cb[b], &err) ||
                gpu->cache_gather(gpu, gc, ks, extra, &gb[b], &err) ||
                gpu->cache_gather(gpu, gc, ks, extra, &gg[b], &err) ||
                gpu->cache_view(gpu, gc, ks, extra, &gv[b], &err)) {
                verdict(s, 0, "%s gather: %s", spec, err.msg);
                goto done;
            }
        }
        for (int i = 0; i < N_DECODE * QUESTION; i++) tokens[i] = random_token(V);
        if (cpu->forward(cpu, cb, N_DECODE, tokens, QUESTION, lc, NULL, NULL, &err) ||
            gpu->forward(gpu, gb, N_DECODE, tokens, QUESTION, lg, NULL, NULL, &err) ||
            gpu->forward(gpu, gv, N_DECODE, tokens, QUESTION, lv, NULL, NULL, &err) ||
            greedy_picks_differ(gpu, gg, tokens, QUESTION, lg, &pick_differ, &err)) {
            verdict(s, 0, "%s question feed: %s", spec, err.msg);
            goto done;
        }
        for (size_t i = 0; i < (size_t)N_DECODE * V; i++) view_bits += memcmp(&lg[i], &lv[i], sizeof(float)) != 0;
        double e = 0;
        for (int b = 0; b < N_DECODE; b++) e = worse(e, rel_err(lc + (size_t)b * V, lg + (size_t)b * V, V));
        verdict(s, e <= TOL_LOGITS, "%s question feed, %d sequences x %d tokens on gathered caches: logits "
                "relative error %.2e", spec, N_DECODE, QUESTION, e);
        tr.B = N_DECODE, tr.N = N, tr.H = c->n_heads;
        tr.probs = calloc((size_t)N_DECODE * N * c->n_heads, sizeof(float *));
        tr.n = calloc((size_t)N_DECODE * N * c->n_heads, sizeof(int));
        if (!tr.probs || !tr.n) {
            verdict(s, 0, "out of host memory");
            goto done;
        }
        TraceHook tc_hook = {.on_attention = on_attention, .user = &tr};
        double worst = 0;
        for (int step = 0; step < STEPS; step++) {
            int next[N_DECODE];
            for (int b = 0; b < N_DECODE; b++) { /* greedy on the CPU's logits, fed to both */
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (lc[(size_t)b * V + v] > lc[(size_t)b * V + best]) best = v;
                next[b] = best;
            }
            const TraceHook *hook = step == STEPS - 1 ? &tc_hook : NULL;
            tr.compare = 0;
            if (cpu->forward(cpu, cb, N_DECODE, next, 1, lc, NULL, hook, &err)) {
                verdict(s, 0, "%s CPU decode: %s", spec, err.msg);
                goto done;
            }
            tr.compare = 1;
            if (gpu->forward(gpu, gb, N_DECODE, next, 1, lg, NULL, hook, &err) ||
                gpu->forward(gpu, gv, N_DECODE, next, 1, lv, NULL, hook, &err) ||
                greedy_picks_differ(gpu, gg, next, 1, lg, &pick_differ, &err)) {
                verdict(s, 0, "%s CUDA decode: %s", spec, err.msg);
                goto done;
            }
            for (size_t i = 0; i < (size_t)N_DECODE * V; i++) view_bits += memcmp(&lg[i], &lv[i], sizeof(float)) != 0;
            for (int b = 0; b < N_DECODE; b++) worst = worse(worst, rel_err(lc + (size_t)b * V, lg + (size_t)b * V, V));
        }
        verdict(s, worst <= TOL_LOGITS, "%s %d decode steps, batch of %d head-variable caches: logits relative "
                "error %.2e", spec, STEPS, N_DECODE, worst);
        verdict(s, pick_differ == 0, "%s greedy picks on the device (Backend.forward_greedy: only the token ids come "
                "back) against the host's argmax of the same caches' logits: question feed and %d steps, %ld of %d "
                "differ (== 0)", spec, STEPS, pick_differ, (STEPS + 1) * N_DECODE);
        {   /* what the sweep's memory planner asks of the backend (runs/memplan.h) */
            double free_b = -1, view_b = gpu->variant_bytes(gpu, gc, &ks_cpu[2], extra, 1),
                   copy_b = gpu->variant_bytes(gpu, gc, &ks_cpu[2], extra, 0);
            int rc = gpu->memory_free(gpu, &free_b, &err);
            /* whole 2 MiB allocation pages: at 300 tokens the view and the copy both take one */
            verdict(s, !rc && free_b > 0 && view_b >= 2 << 20 && view_b <= copy_b && !gpu->views_fast,
                    "%s planner sizes: %.2f GiB free for variants, snapkv 20%% as a view %.2f MiB, as a copy %.2f MiB",
                    spec, free_b / 1073741824.0, view_b / 1048576.0, copy_b / 1048576.0);
        }
        verdict(s, view_bits == 0, "%s views of the prefill (Backend.cache_view) decode as their gathered copies: "
                "question feed and %d steps, %ld of %d logits differ in any bit", spec, STEPS, view_bits,
                (STEPS + 1) * N_DECODE * V);
        verdict(s, tr.mismatched == 0 && tr.max_diff <= TOL_ATTN, "%s decode trace (copies and views): max abs error "
                "of the attention probabilities %.2e, %d rows with different key counts", spec, tr.max_diff,
                tr.mismatched);
        int lens_ok = 1;
        for (int b = 0; b < N_DECODE; b++)
            for (int i = 0; i < N * c->n_kv_heads; i++)
                lens_ok &= cb[b]->len[i] == gb[b]->len[i] && cb[b]->len[i] == gv[b]->len[i];
        verdict(s, lens_ok, "%s cache lengths per (layer, kv-head) agree after decoding", spec);
    }

    check_joint_decode(s, spec, gpu, gc, ks_cpu, report_batch_rows(spec, gpu, gc, ks_cpu));

    /* Bad input: clear errors, no crash, the backend usable afterwards. */
    {
        KvCache *huge = NULL;
        int rc = gpu->cache_new(gpu, &huge, 1 << 28, &err);
        verdict(s, rc == -1 && strstr(err.msg, "out of GPU memory") && strstr(err.msg, "free"),
                "%s a cache of 2^28 entries per head: %s", spec, rc ? err.msg : "no error");
        if (!rc) gpu->cache_free(gpu, huge);
        int bad = V + 5;
        rc = gpu->forward(gpu, gb, 1, &bad, 1, lg, NULL, NULL, &err);
        verdict(s, rc == -1 && strstr(err.msg, "vocabulary"), "%s token id %d: %s", spec, bad, rc ? err.msg : "no error");
        rc = gpu->forward(gpu, gb, 1, tokens, 2, lg, NULL, NULL, &err);
        verdict(s, rc == -1 && strstr(err.msg, "no room"), "%s feeding past the capacity: %s", spec,
                rc ? err.msg : "no error");
        rc = gpu->forward(gpu, gb, 1, tokens, 1, lg, NULL, NULL, &err);
        verdict(s, rc == 0, "%s the backend still works after the errors%s%s", spec, rc ? ": " : "", rc ? err.msg : "");
    }
done:
    for (int b = 0; b < N_DECODE; b++)
        if (gg[b]) gpu->cache_free(gpu, gg[b]);
    for (int i = 0; tr.probs && i < tr.B * tr.N * tr.H; i++) free(tr.probs[i]);
    free(tr.probs);
    free(tr.n);
    for (int p = 0; p < N_POLICIES; p++) {
        keepset_free(&ks_cpu[p]);
        keepset_free(&ks_gpu[p]);
        keepset_free(&ks_bf16[p]);
    }
    if (m) {
        capture_end(&cap_cpu, m->cfg.n_layers);
        capture_end(&cap_gpu, m->cfg.n_layers);
    }
    for (int b = 0; b < N_DECODE; b++) {
        if (cb[b]) cpu->cache_free(cpu, cb[b]);
        if (gb[b]) gpu->cache_free(gpu, gb[b]);
        if (gv[b]) gpu->cache_free(gpu, gv[b]);
    }
    if (cc) cpu->cache_free(cpu, cc);
    if (gc) gpu->cache_free(gpu, gc);
    backend_close(cpu);
    backend_close(gpu);
    model_free(m);
    free(lc);
    free(lg);
    free(lv);
    free(tokens);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Speed                                                                                                   */

static double matrix_params(const ModelConfig *c) { /* per layer */
    double D = c->d_model, d = c->head_dim, H = c->n_heads, K = c->n_kv_heads, F = c->d_ff;
    return D * (H + 2 * K) * d + D * H * d + 3.0 * D * F;
}

static double prefill_flops(const ModelConfig *c, int T) {
    double attn = 4.0 * c->head_dim * c->n_heads * (double)T * (T + 1) / 2.0;
    return c->n_layers * (2.0 * T * matrix_params(c) + attn) + 2.0 * c->d_model * c->vocab_size;
}

static void random_tokens(int *t, int n, int V) {
    for (int i = 0; i < n; i++) t[i] = random_token(V);
}

/* A layer's observation received and dropped: what the device costs without the host's scoring. */
static int on_layer_received(void *user, Observation *obs, KvErr *err) {
    (void)user, (void)obs, (void)err;
    return 0;
}

/* Seconds per decode step of B sequences on caches made from src with `keep` (gathered copies, or views when
 * view is set), over `steps` steps after one warm-up. */
/* The sweep's observation and 14 keep-sets at T tokens with scoring and selection on the device; the extra
 * time over the plain prefill t_plain, with each policy's share. */
static void time_device_scoring(Summary *s, Backend *gpu, const int *tokens, int T, double t_plain) {
    KvErr err = {{0}};
    DeviceScorers d;
    memset(&d, 0, sizeof d);
    PolicyConfig pc[N_POLICIES];
    int rc = 0;
    for (int p = 0; p < N_POLICIES && !rc; p++) rc = policy_config(&pc[p], POLICIES[p], NULL, &err);
    double t0 = now_s(), t_observed = 0, t_select = 0, select_s[N_POLICIES] = {0};
    if (!rc) rc = device_prefill(gpu, tokens, T, pc, &d, &err);
    t_observed = now_s() - t0;
    for (int p = 1; p < N_POLICIES && !rc; p++) /* full (p = 0) keeps everything */
        for (int bi = 0; bi < 2 && !rc; bi++) {
            Budget budget = {.keep_fraction = bi ? 0.4 : 0.2};
            KeepSet ks;
            double ts = now_s();
            rc = cuda_policy_select(d.p[p], &budget, &ks, &err);
            select_s[p] += now_s() - ts;
            t_select += now_s() - ts;
            if (!rc) keepset_free(&ks);
        }
    device_scorers_end(&d);
    if (rc) {
        verdict(s, 0, "device scoring at %d tokens: %s", T, err.msg);
        return;
    }
    double extra = t_observed + t_select - t_plain;
    printf("prefill %d tokens with the 8 policies scoring on the device, then 14 selections on the device: %.3f s + "
           "%.3f s (+%.3f s, %.1f%% of the prefill)\n  per policy, scoring + selection:", T, t_observed, t_select,
           extra, 100 * extra / t_plain);
    for (int p = 0; p < N_POLICIES; p++)
        printf(" %s %.3f + %.3f s%s", POLICIES[p], d.seconds[p], select_s[p], p + 1 < N_POLICIES ? "," : "\n");
    target(s, extra <= 0.05 * t_plain, "observation and selection of 8 policies on the device at %d tokens: %.1f%% "
           "of prefill <= 5%%", T, 100 * extra / t_plain);
}

static int time_decode(Backend *gpu, KvCache *src, const KeepSet *keep, int B, int steps, int view, float *logits,
                       double *per_step, KvErr *err) {
    KvCache *caches[32] = {0};
    int rc = 0, next[32];
    double t = 0;
    for (int b = 0; b < B && !rc; b++)
        rc = (view ? gpu->cache_view : gpu->cache_gather)(gpu, src, keep, steps + 2, &caches[b], err);
    for (int step = 0; step < steps + 1 && !rc; step++) {
        random_tokens(next, B, gpu->model->cfg.vocab_size);
        double t0 = now_s();
        rc = gpu->forward(gpu, caches, B, next, 1, logits, NULL, NULL, err);
        if (step > 0) t += now_s() - t0; /* step 0 warms up */
    }
    for (int b = 0; b < B; b++)
        if (caches[b]) gpu->cache_free(gpu, caches[b]);
    *per_step = t / steps;
    return rc;
}

static void check_speed(Summary *s, const char *spec, double gemm_tflops, double copy_gbs, int quick) {
    KvErr err = {{0}};
    Model *m = NULL;
    Backend *gpu = NULL;
    int *tokens = NULL;
    float *logits = NULL;
    printf("\n== %s: speed ==\n", spec);
    if (model_load(&m, spec, &err) || backend_open(&gpu, "cuda", m, NULL, &err)) {
        verdict(s, 0, "%s: %s", spec, err.msg);
        goto done;
    }
    const ModelConfig *c = &m->cfg;
    int V = c->vocab_size, NK = c->n_layers * c->n_kv_heads, max_T = quick ? 4096 : 32768;
    tokens = malloc((size_t)max_T * sizeof(int));
    logits = malloc((size_t)64 * V * sizeof(float));
    if (!tokens || !logits) {
        verdict(s, 0, "out of host memory");
        goto done;
    }
    random_tokens(tokens, max_T, V);
    double t_plain_max = 0;
    const int prefill_lengths[3] = {4096, 16384, 32768};
    for (int li = 0; li < 3 && prefill_lengths[li] <= max_T; li++) {
        int T = prefill_lengths[li];
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) { /* the first is a warm-up */
            KvCache *kc = NULL;
            if (gpu->cache_new(gpu, &kc, T, &err)) {
                verdict(s, 0, "prefill %d: %s", T, err.msg);
                goto done;
            }
            double t0 = now_s();
            int rc = gpu->forward(gpu, &kc, 1, tokens, T, logits, NULL, NULL, &err);
            double t = now_s() - t0;
            gpu->cache_free(gpu, kc);
            if (rc) {
                verdict(s, 0, "prefill %d: %s", T, err.msg);
                goto done;
            }
            if (rep > 0 && t < best) best = t;
        }
        double tf = prefill_flops(c, T) / best / 1e12;
        t_plain_max = best;
        printf("prefill %6d tokens: %.3f s, %.1f TFLOP/s (%.0f%% of the GEMM ceiling)\n", T, best, tf,
               100 * tf / gemm_tflops);
        if (T == 32768)
            target(s, tf >= 0.5 * gemm_tflops, "prefill at 32k tokens: %.1f TFLOP/s >= 50%% of %.1f", tf, gemm_tflops);
    }
    {   /* observation + selection cost at the largest prefill: the sweep's own prefill (runs/prepare.c) with the
         * 8 policies observing, then the 7 budgeted ones selecting at 20% and 40% */
        int T = max_T, rc = 0, want_value_norm = 0;
        PolicyConfig pc[N_POLICIES];
        const PolicyConfig *pcs[N_POLICIES];
        for (int p = 0; p < N_POLICIES && !rc; p++) {
            rc = policy_config(&pc[p], POLICIES[p], NULL, &err);
            pcs[p] = &pc[p];
            want_value_norm |= !rc && policy_needs_value_norm(&pc[p]);
        }
        /* The device's share alone: the same observed prefill, its layers received and not scored. */
        double t_received = 0;
        KvCache *kc = NULL;
        if (!rc) rc = gpu->cache_new(gpu, &kc, T, &err);
        if (!rc) {
            ObserveHook bare = {.window = pc[2].window, .want_value_norm = want_value_norm,
                                .on_layer = on_layer_received, .user = NULL, .derived_only = 1};
            double t0 = now_s();
            rc = gpu->forward(gpu, &kc, 1, tokens, T, logits, &bare, NULL, &err);
            t_received = now_s() - t0;
        }
        if (kc) gpu->cache_free(gpu, kc);
        PrepareEnv env = {.model = m, .be = gpu, .host_scoring = 1}; /* the host path; the device's is timed below */
        TokenIds ctx = {.ids = tokens, .n = T, .cap = T};
        Prefill pf;
        memset(&pf, 0, sizeof pf);
        double t0 = now_s(), t_observed = 0, t_select = 0;
        if (!rc) rc = prefill_run(&pf, &env, &ctx, pcs, N_POLICIES, 0, &err);
        t_observed = now_s() - t0;
        for (int p = 1; p < N_POLICIES && !rc; p++) /* full (p = 0) keeps everything */
            for (int bi = 0; bi < 2 && !rc; bi++) {
                Budget budget = {.keep_fraction = bi ? 0.4 : 0.2};
                KeepSet ks;
                double ts = now_s();
                rc = prefill_select(&pf, p, &budget, &ks, &err);
                t_select += now_s() - ts;
                keepset_free(&ks);
            }
        if (rc) {
            verdict(s, 0, "observed prefill %d: %s", T, err.msg);
        } else {
            double extra = t_observed + t_select - t_plain_max, scoring = 0;
            for (int p = 0; p < N_POLICIES; p++) scoring += prefill_observe_ms(&pf, p) / 1e3;
            printf("prefill %d tokens as a sweep of the 8 policies runs it, then 14 selections (7 policies x 20%%, "
                   "40%%): %.3f s + %.3f s (+%.3f s, %.1f%% of the prefill)\n", T, t_observed, t_select, extra,
                   100 * extra / t_plain_max);
            printf("  the device's share (window attention, value norms, copies to the host; layers received, not "
                   "scored): %.3f s (+%.3f s, %.1f%% of the prefill)\n", t_received, t_received - t_plain_max,
                   100 * (t_received - t_plain_max) / t_plain_max);
            printf("  host scoring %.3f s over %d layers (overlapping the next layer's GPU work); per policy:", scoring,
                   c->n_layers);
            for (int p = 0; p < N_POLICIES; p++)
                printf(" %s %.3f s%s", POLICIES[p], prefill_observe_ms(&pf, p) / 1e3, p + 1 < N_POLICIES ? "," : "\n");
            target(s, extra <= 0.05 * t_plain_max, "observation and selection of 8 policies at %d tokens: %.1f%% of "
                   "prefill <= 5%%", T, 100 * extra / t_plain_max);
        }
        prefill_free(&pf);
        time_device_scoring(s, gpu, tokens, T, t_plain_max);
    }
    {   /* decode: B sequences with full caches of `ctx` entries, gathered from one prefill */
        double weight_bytes = 2.0 * (c->n_layers * matrix_params(c) + (double)c->d_model * V);
        const int ctxs[2] = {4096, 32768}, batches[3] = {1, 16, 32}, steps = 16;
        for (int ci = 0; ci < 2; ci++) {
            int ctx = ctxs[ci];
            if (ctx > max_T) continue;
            KvCache *src = NULL;
            KeepSet full;
            memset(&full, 0, sizeof full);
            if (gpu->cache_new(gpu, &src, ctx, &err) || gpu->forward(gpu, &src, 1, tokens, ctx, NULL, NULL, NULL, &err) ||
                keepset_full(&full, c->n_layers, c->n_kv_heads, ctx, &err)) {
                verdict(s, 0, "decode setup at %d: %s", ctx, err.msg);
                if (src) gpu->cache_free(gpu, src);
                keepset_free(&full);
                goto done;
            }
            for (int bi = 0; bi < 3; bi++) {
                int B = batches[bi];
                double per_step = 0, per_step_views = 0;
                if (time_decode(gpu, src, &full, B, steps, 0, logits, &per_step, &err)) {
                    verdict(s, 0, "decode ctx %d batch %d: %s", ctx, B, err.msg);
                    continue;
                }
                double kv_bytes = (double)B * NK * (ctx + steps / 2.0) * c->head_dim * 2 * 2;
                double gbs = (weight_bytes + kv_bytes) / per_step / 1e9;
                printf("decode ctx %6d batch %2d: %.2f ms/step, %.0f tokens/s, %.0f GB/s (%.0f%% of the copy "
                       "ceiling; weights %.2f GB + KV %.2f GB per step)\n", ctx, B, per_step * 1e3, B / per_step,
                       gbs, 100 * gbs / copy_gbs, weight_bytes / 1e9, kv_bytes / 1e9);
                target(s, gbs >= 0.7 * copy_gbs, "decode ctx %d batch %d: %.0f GB/s >= 70%% of %.0f", ctx, B, gbs,
                       copy_gbs);
                /* The parts of a step: without logits (no LM head, no copy), and the copy of B x V floats to
                 * unpinned host memory alone; the LM head is the rest. */
                double bare = 0, copy = 0;
                if (time_decode(gpu, src, &full, B, steps, 0, NULL, &bare, &err) ||
                    cuda_measure_host_copy((size_t)B * V * sizeof(float), &copy, &err))
                    verdict(s, 0, "decode ctx %d batch %d without logits: %s", ctx, B, err.msg);
                else
                    printf("decode ctx %6d batch %2d parts: layers %.2f ms (%.0f%%), LM head %.2f ms (%.0f%%), "
                           "logits copy to the host %.2f ms (%.0f%%); without the copy %.2f ms/step, %.0f GB/s\n",
                           ctx, B, bare * 1e3, 100 * bare / per_step, (per_step - bare - copy) * 1e3,
                           100 * (per_step - bare - copy) / per_step, copy * 1e3, 100 * copy / per_step,
                           (per_step - copy) * 1e3, (weight_bytes + kv_bytes) / (per_step - copy) / 1e9);
                /* The same step on views of the prefill (what the sweep decodes on when memory is short): the
                 * same rows, read through one 4-byte index per key and kv-head. */
                if (time_decode(gpu, src, &full, B, steps, 1, logits, &per_step_views, &err))
                    verdict(s, 0, "decode ctx %d batch %d on views: %s", ctx, B, err.msg);
                else
                    printf("decode ctx %6d batch %2d views vs copies: %.2f vs %.2f ms/step (views %+.1f%%)\n", ctx,
                           B, per_step_views * 1e3, per_step * 1e3, 100 * (per_step_views / per_step - 1));
            }
            gpu->cache_free(gpu, src);
            keepset_free(&full);
        }
    }
done:
    backend_close(gpu);
    model_free(m);
    free(tokens);
    free(logits);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    Summary s = {0};
    KvErr err = {{0}};
    CudaDeviceInfo dev;
    if (cuda_device_query(&dev, &err)) {
        printf("FAIL  no usable GPU: %s\n", err.msg);
        return 2;
    }
    printf("GPU 0: %s, compute capability %d.%d, %d SMs, %.1f GiB free of %.1f GiB, driver %d, runtime %d\n",
           dev.name, dev.cc_major, dev.cc_minor, dev.n_sms, dev.mem_free / 1073741824.0, dev.mem_total / 1073741824.0,
           dev.driver_version, dev.runtime_version);
    double gemm_tflops = 0, copy_gbs = 0;
    if (cuda_measure_ceilings(&gemm_tflops, &copy_gbs, &err)) {
        verdict(&s, 0, "ceilings: %s", err.msg);
    } else {
        printf("ceilings: cuBLAS bf16 GEMM 8192^3 %.1f TFLOP/s, device copy %.0f GB/s (read + write)\n", gemm_tflops,
               copy_gbs);
    }
    CudaSelftest lab;
    if (cuda_kernel_selftest(&lab, &err)) {
        verdict(&s, 0, "kernel lab: %s", err.msg);
    } else {
        verdict(&s, lab.flash_max_err <= TOL_KERNEL, "kernel lab: flash prefill vs naive oracle, %d shapes: max abs "
                "error %.2e (<= %.0e)", lab.cases, lab.flash_max_err, TOL_KERNEL);
        verdict(&s, lab.decode_max_err <= TOL_KERNEL, "kernel lab: split-K decode vs naive oracle, %d shapes: max abs "
                "error %.2e (<= %.0e)", lab.cases, lab.decode_max_err, TOL_KERNEL);
        verdict(&s, lab.window_max_err <= TOL_ATTN, "kernel lab: observation window attention (GEMM + softmax) vs "
                "naive oracle: max abs error of the probabilities %.2e (<= %.0e)", lab.window_max_err, TOL_ATTN);
        verdict(&s, lab.views_cases > 0 && lab.views_mismatches == 0, "kernel lab: views vs gathered copies, %d "
                "shapes (flash, naive, split-K decode, q/k/v rows): %ld elements differ in any bit (== 0)",
                lab.views_cases, lab.views_mismatches);
    }
    CudaSelftest lab_long;
    if (cuda_kernel_long_cases(&lab_long, 0, &err)) {
        verdict(&s, 0, "kernel lab, long context: %s", err.msg);
    } else {
        verdict(&s, lab_long.flash_max_err <= TOL_KERNEL, "kernel lab: flash prefill of a 4,096-query chunk over a "
                "28k cache vs naive oracle: max abs error %.2e (<= %.0e)", lab_long.flash_max_err, TOL_KERNEL);
        verdict(&s, lab_long.decode_max_err <= TOL_KERNEL, "kernel lab: split-K decode at B = 16 over 32k caches vs "
                "naive oracle: max abs error %.2e (<= %.0e)", lab_long.decode_max_err, TOL_KERNEL);
    }
    CudaValueNormsLab vn;
    if (cuda_value_norms_lab(&vn, 0, &err)) {
        verdict(&s, 0, "value norms lab: %s", err.msg);
    } else {
        verdict(&s, vn.fused_max_rel_err <= CUDA_VALUE_NORMS_TOL, "value norms, fused kernel vs double oracle, %d "
                "shapes up to 32k values of Llama-3.1-8B's width: max relative error %.2e (<= %.0e)", vn.cases,
                vn.fused_max_rel_err, CUDA_VALUE_NORMS_TOL);
        verdict(&s, vn.gemm_max_rel_err <= CUDA_VALUE_NORMS_TOL, "value norms, GEMM + L1 path vs double oracle: max "
                "relative error %.2e (<= %.0e)", vn.gemm_max_rel_err, CUDA_VALUE_NORMS_TOL);
    }
    {   /* one layer's value norms at 32k (4k with --quick): 2·L·d·D·H flops either way */
        int L = quick ? 4096 : 32768;
        double gemm_ms = 0, fused_ms = 0, flops = 2.0 * L * 128 * 4096 * 32;
        if (cuda_measure_value_norms(L, &gemm_ms, &fused_ms, &err))
            verdict(&s, 0, "value norms timing: %s", err.msg);
        else
            printf("value norms of one layer, Llama-3.1-8B's shape, %d values: GEMM + L1 %.2f ms (%.1f TFLOP/s), "
                   "fused %.2f ms (%.1f TFLOP/s): %.2fx\n", L, gemm_ms, flops / gemm_ms / 1e9, fused_ms,
                   flops / fused_ms / 1e9, gemm_ms / fused_ms);
    }
    check_device_scoring_random(&s);
    check_argmax(&s);
    check_model(&s, "synthetic:smollm2-135m:layers=2");
    check_model(&s, "synthetic:llama-3.1-8b:layers=2");
    if (gemm_tflops > 0) check_speed(&s, "synthetic:llama-3.1-8b:layers=4", gemm_tflops, copy_gbs, quick);
    printf("\ncheck_cuda: %s — %d checks, %d failed; %d speed targets, %d missed\n", s.fails ? "FAIL" : "PASS",
           s.checks, s.fails, s.targets, s.misses);
    return s.fails ? 1 : 0;
}
