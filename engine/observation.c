/* observation.c — the plain-C reference for what every attention-based policy reads from a layer:
 * the window attention (spec policies.md §1.2) and the projected value norms (§1.4), in f32.
 *
 * Both products go through BLAS: the window logits are a w x L x d GEMM per head, and the value norms need
 * the full projection v · W_O^(h) (L x d x D per head) because an L1 norm does not factor through it.
 * The projection is done in row blocks so the temporary stays small at long contexts.
 * Shape legend: L context length, w window, H heads, K kv-heads, G = H/K, d head dim, D hidden size. */
#include "observation.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* What observation_prepare allocated, so release frees only its own arrays. */
typedef struct {
    float *attn;        /* [H][w][L] */
    float *value_norm;  /* [K][L] */
} OwnedArrays;

/* Rows of v projected at a time: BLOCK x D floats of temporary. */
#define VALUE_NORM_BLOCK 128

static int check_shape(const Observation *o, KvErr *err) {
    if (o->L <= 0 || o->w <= 0 || o->H <= 0 || o->K <= 0 || o->d <= 0 || o->D <= 0)
        return kv_fail(err, "observation: layer %d has a non-positive shape (L=%d w=%d H=%d K=%d d=%d D=%d)",
                       o->layer, o->L, o->w, o->H, o->K, o->d, o->D);
    if (o->w > o->L)
        return kv_fail(err, "observation: layer %d window %d is longer than the context (%d tokens)", o->layer,
                       o->w, o->L);
    if (o->H % o->K)
        return kv_fail(err, "observation: %d query heads are not a multiple of %d kv-heads", o->H, o->K);
    return 0;
}

/* Softmax of each window query over all L keys; query i sits at position L-w+i and sees keys j <= L-w+i. */
static void window_attention(const Observation *o, float *attn) {
    const int L = o->L, w = o->w, d = o->d, G = o->H / o->K;
    const float scale = 1.0f / sqrtf((float)d);
    for (int h = 0; h < o->H; h++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, w, L, d, scale, o->q_win + (size_t)h * w * d, d,
                    o->keys[h / G], d, 0.0f, attn + (size_t)h * w * L, L);
#pragma omp parallel for schedule(static)
    for (int row = 0; row < o->H * w; row++) {
        float *a = attn + (size_t)row * L;
        int last = L - w + row % w;  /* last visible key */
        float mx = a[0];
        for (int j = 1; j <= last; j++) mx = a[j] > mx ? a[j] : mx;
        double sum = 0.0;
        for (int j = 0; j <= last; j++) {
            a[j] = expf(a[j] - mx);
            sum += a[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j <= last; j++) a[j] *= inv;
        for (int j = last + 1; j < L; j++) a[j] = 0.0f;
    }
}

/* nu[k][j] = (1/G) sum_g || v[k][j] · W_O^(h) ||_1, W_O^(h) = columns h*d..h*d+d-1 of w_o [D][H*d].
 * One task per (kv-head, block of rows), in parallel: each makes the same BLAS calls and sums the heads in the
 * same order as a single thread would, so the norms do not depend on the thread count. */
static int value_norms(const Observation *o, float *nu, KvErr *err) {
    const int L = o->L, d = o->d, D = o->D, H = o->H, G = o->H / o->K;
    const int blocks = (L + VALUE_NORM_BLOCK - 1) / VALUE_NORM_BLOCK;
    const size_t per_thread = (size_t)VALUE_NORM_BLOCK * D;
    float *proj = kv_malloc(sizeof(float) * per_thread * (size_t)omp_get_max_threads(), err);
    if (!proj) return -1;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < o->K * blocks; task++) {
        int k = task / blocks, j0 = task % blocks * VALUE_NORM_BLOCK;
        int rows = L - j0 < VALUE_NORM_BLOCK ? L - j0 : VALUE_NORM_BLOCK;
        float *out = nu + (size_t)k * L + j0, *p = proj + per_thread * (size_t)omp_get_thread_num();
        for (int r = 0; r < rows; r++) out[r] = 0.0f;
        for (int g = 0; g < G; g++) {
            int h = k * G + g;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, D, d, 1.0f, o->values[k] + (size_t)j0 * d, d,
                        o->w_o + (size_t)h * d, H * d, 0.0f, p, D);
            for (int r = 0; r < rows; r++) {
                const float *pr = p + (size_t)r * D;
                double l1 = 0.0;
                for (int e = 0; e < D; e++) l1 += fabsf(pr[e]);
                out[r] += (float)(l1 / G);
            }
        }
    }
    free(proj);
    return 0;
}

int observation_prepare(Observation *obs, int want_value_norm, KvErr *err) {
    if (check_shape(obs, err)) return -1;
    OwnedArrays *own = obs->scratch;
    if (!own) {
        own = kv_calloc(1, sizeof *own, err);
        if (!own) return -1;
        obs->scratch = own;
    }
    if (!obs->attn) {
        if (!obs->q_win || !obs->keys)
            return kv_fail(err, "observation: layer %d has no window queries or keys to compute attention from",
                           obs->layer);
        own->attn = kv_malloc(sizeof(float) * (size_t)obs->H * obs->w * obs->L, err);
        if (!own->attn) return -1;
        window_attention(obs, own->attn);
        obs->attn = own->attn;
    }
    if (want_value_norm && !obs->value_norm) {
        if (!obs->values || !obs->w_o)
            return kv_fail(err, "observation: layer %d has no values or output projection for the value norms",
                           obs->layer);
        own->value_norm = kv_malloc(sizeof(float) * (size_t)obs->K * obs->L, err);
        if (!own->value_norm) return -1;
        if (value_norms(obs, own->value_norm, err)) return -1;
        obs->value_norm = own->value_norm;
    }
    return 0;
}

void observation_release(Observation *obs) {
    OwnedArrays *own = obs->scratch;
    if (!own) return;
    if (obs->attn == own->attn) obs->attn = NULL;
    if (obs->value_norm == own->value_norm) obs->value_norm = NULL;
    free(own->attn);
    free(own->value_norm);
    free(own);
    obs->scratch = NULL;
}
