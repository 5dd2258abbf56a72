/* score.c — per-layer scoring of the attention-based policies (spec policies.md §1.3, §2.2, §2.6, §2.7).
 *
 * Everything reads the window attention A[H][w][L] of observation_prepare; only the prefix columns j < P
 * are scored, the window is handled by each allocation. Arithmetic is f32 storage with double sums, so the
 * float32 golden runs are matched to ~1e-6 of each array's max.
 *
 * Aggregation (the paper's ablation, PolicyConfig.aggregation) means, per family:
 *   SnapKV, AdaKV, Ada-CriticalKV (reference = mean):
 *     mean       a[h,j] = mean_i A[h,i,j], pooled, then the mean over the G heads of the group (the reference)
 *     max        a[h,j] = max_i A[h,i,j], pooled, then the max over the group
 *     max+prior  max, then clamped from below at each kv-head's mean over the prefix (DefensiveKV's prior)
 *   CAKE (reference = mean): the same, with the query statistic mean_i A + gamma*var_i A (mean) or
 *     max_i A + gamma*var_i A (max, max+prior); the layer preference does not depend on it.
 *   DefensiveKV, Layer-DefensiveKV (reference = max+prior): each query row is pooled and its prefix mass
 *     restored first, then mean or max over the G heads and w window queries together; max+prior clamps
 *     at the kv-head's prefix mean. mean and max are exactly the golden defensivekv_agg_mean/max runs.
 * The value-weighted policies (Ada-CriticalKV, DefensiveKV, Layer-DefensiveKV) are one pipeline whose steps
 * are the ladder's parameters (policy.h LadderParams, docs/ladder.md): ladder.pooling picks the SnapKV or the
 * per-row scores above, ladder.group folds the G heads (by default as the aggregation), ladder.forced ==
 * mass computes DefensiveKV's stage-1 order, ladder.weighting the value weighting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy_internal.h"

/* F.avg_pool1d(kernel, stride 1, padding kernel/2, count_include_pad=True): zero padded, always / kernel.
 * A running sum over the window (in double, so nothing drifts at these lengths). */
static void pool_avg(const float *x, int n, int kernel, float *out) {
    int r = kernel / 2;
    double s = 0.0;
    for (int t = 0; t <= r && t < n; t++) s += x[t];
    for (int j = 0; j < n; j++) {
        out[j] = (float)(s / kernel);
        if (j + r + 1 < n) s += x[j + r + 1];
        if (j - r >= 0) s -= x[j - r];
    }
}

/* The reductions over rows below run in blocks of columns, one block per thread: every column is still
 * summed in row order, so results do not depend on the thread count. */
#define COLUMN_BLOCK 2048

/* Folds `rows` rows of x (row stride `stride`) into out[0..n): mean or max over the rows. Row by row within
 * a block of columns, so memory is read in order; acc[n] is scratch. */
static void fold_rows(const float *x, int rows, size_t stride, int n, Aggregation agg, double *acc, float *out) {
    #pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < n; j0 += COLUMN_BLOCK) {
        int j1 = n - j0 < COLUMN_BLOCK ? n : j0 + COLUMN_BLOCK;
        for (int j = j0; j < j1; j++) acc[j] = agg == AGG_MEAN ? 0.0 : -INFINITY;
        for (int r = 0; r < rows; r++) {
            const float *row = x + (size_t)r * stride;
            if (agg == AGG_MEAN)
                for (int j = j0; j < j1; j++) acc[j] += row[j];
            else
                for (int j = j0; j < j1; j++) acc[j] = row[j] > acc[j] ? row[j] : acc[j];
        }
        for (int j = j0; j < j1; j++) out[j] = (float)(agg == AGG_MEAN ? acc[j] / rows : acc[j]);
    }
}

/* max+prior: no entry scores below its head's mean (the uniform prior of DefensiveKV, §2.7 Step B); clamped[j]
 * records which entries it raised. The raised entries tie at the mean, and selection orders ties by position
 * (allocate.c), as the golden data does. The opt-in ablation ties_by_unclamped orders them by their unclamped
 * score instead: they get successive floats just below the mean, highest unclamped first. That is exact within
 * a head (they still rank below every entry the prior did not raise); against other heads' scores it moves
 * them down by at most n float steps, a relative 1.2e-7·n. */
static int clamp_at_mean(float *x, int n, int ties_by_unclamped, unsigned char *clamped, KvErr *err) {
    double mean = 0.0;
    for (int j = 0; j < n; j++) mean += x[j];
    float mu = (float)(mean / n);
    for (int j = 0; j < n; j++) clamped[j] = x[j] < mu;
    if (!ties_by_unclamped) {
        for (int j = 0; j < n; j++) x[j] = clamped[j] ? mu : x[j];
        return 0;
    }
    int *order = kv_malloc(sizeof(int) * (size_t)n, err);
    if (!order || sort_desc_stable(x, n, order, err)) {
        free(order);
        return -1;
    }
    float v = mu;
    for (int t = 0; t < n; t++)
        if (clamped[order[t]]) x[order[t]] = v = nextafterf(v, -INFINITY);
    free(order);
    return 0;
}

/* Unbiased variance over the w window rows of one head, per prefix key: var[n], mean[n] scratch. */
static void window_variance(const float *a, int w, size_t stride, int n, double *mean, double *var) {
    #pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < n; j0 += COLUMN_BLOCK) {
        int j1 = n - j0 < COLUMN_BLOCK ? n : j0 + COLUMN_BLOCK;
        for (int j = j0; j < j1; j++) mean[j] = 0.0, var[j] = 0.0;
        for (int i = 0; i < w; i++)
            for (int j = j0; j < j1; j++) mean[j] += a[(size_t)i * stride + j];
        for (int j = j0; j < j1; j++) mean[j] /= w;
        for (int i = 0; i < w; i++)
            for (int j = j0; j < j1; j++) {
                double dv = a[(size_t)i * stride + j] - mean[j];
                var[j] += dv * dv;
            }
        for (int j = j0; j < j1; j++) var[j] = w > 1 ? var[j] / (w - 1) : 0.0;
    }
}

/* SnapKV / CAKE token scores out[K][P]: the query statistic per head (mean or max over the window queries,
 * plus gamma times the unbiased variance when gamma != 0), pooled, then folded over the group. var_sum
 * (optional) receives the sum of the variances over heads and prefix keys (CAKE's V_l). */
/* How the G heads of a group fold: the ladder's group step, else as the window queries. */
static Aggregation group_fold(const PolicyConfig *cfg, Aggregation fold) {
    if (!cfg->ladder.enabled) return fold;
    return cfg->ladder.group == LADDER_GROUP_MEAN ? AGG_MEAN : AGG_MAX;
}

static int score_pooled_heads(const Observation *o, const PolicyConfig *cfg, double gamma, float *out,
                              double *var_sum, unsigned char *clamped, KvErr *err) {
    const int L = o->L, w = o->w, P = L - w, G = o->H / o->K;
    Aggregation fold = cfg->aggregation == AGG_MEAN ? AGG_MEAN : AGG_MAX, gfold = group_fold(cfg, fold);
    float *stat = kv_malloc(sizeof(float) * (size_t)P, err);
    float *pooled = stat ? kv_malloc(sizeof(float) * (size_t)o->H * P, err) : NULL;
    double *scratch = pooled ? kv_malloc(sizeof(double) * 2 * (size_t)P, err) : NULL;
    if (!scratch) {
        free(stat);
        free(pooled);
        return -1;
    }
    if (var_sum) *var_sum = 0.0;
    for (int h = 0; h < o->H; h++) {
        const float *a = o->attn + (size_t)h * w * L;
        fold_rows(a, w, (size_t)L, P, fold, scratch, stat);
        if (gamma != 0.0 || var_sum) {
            double *var = scratch + P;
            window_variance(a, w, (size_t)L, P, scratch, var);
            for (int j = 0; j < P; j++) {
                stat[j] = (float)(stat[j] + gamma * var[j]);
                if (var_sum) *var_sum += var[j];
            }
        }
        pool_avg(stat, P, cfg->pool_kernel, pooled + (size_t)h * P);
    }
    int rc = 0;
    for (int k = 0; k < o->K && !rc; k++) {
        fold_rows(pooled + (size_t)k * G * P, G, (size_t)P, P, gfold, scratch, out + (size_t)k * P);
        if (cfg->aggregation == AGG_MAX_PRIOR)
            rc = clamp_at_mean(out + (size_t)k * P, P, cfg->ties_by_unclamped, clamped + (size_t)k * P, err);
    }
    free(stat);
    free(pooled);
    free(scratch);
    return rc;
}

/* The record of which entries the prior raised, for max+prior only. */
static int alloc_clamped(const PolicyConfig *cfg, int K, int P, LayerScores *out, KvErr *err) {
    if (cfg->aggregation != AGG_MAX_PRIOR) return 0;
    return (out->clamped = kv_malloc((size_t)K * P, err)) ? 0 : -1;
}

/* SnapKV score s[K][L]: pooled heads, window padded with the max over the whole layer (§2.2 step 4). */
int score_snapkv(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out, KvErr *err) {
    (void)row;
    const int L = o->L, P = L - o->w, K = o->K;
    float *prefix = kv_malloc(sizeof(float) * (size_t)K * P, err);
    out->score = prefix ? kv_malloc(sizeof(float) * (size_t)K * L, err) : NULL;
    if (!out->score || alloc_clamped(cfg, K, P, out, err) ||
        score_pooled_heads(o, cfg, 0.0, prefix, NULL, out->clamped, err)) {
        free(prefix);
        return -1;
    }
    float mx = prefix[0];
    for (size_t t = 1; t < (size_t)K * P; t++) mx = prefix[t] > mx ? prefix[t] : mx;
    for (int k = 0; k < K; k++) {
        memcpy(out->score + (size_t)k * L, prefix + (size_t)k * P, sizeof(float) * (size_t)P);
        for (int j = P; j < L; j++) out->score[(size_t)k * L + j] = mx;
    }
    free(prefix);
    return 0;
}

int score_snapkv_kvpress(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                         KvErr *err) {
    if (score_snapkv(row, cfg, o, out, err)) return -1;
    /* kvpress: F.pad(value=scores.max().item() + 1), the float32 of a double sum that is exact. */
    for (int k = 0; k < o->K; k++)
        for (int j = o->L - o->w; j < o->L; j++) out->score[(size_t)k * o->L + j] += 1.0f;
    return 0;
}

/* CAKE (§2.6): token scores [K][P] and the layer preference from entropy and variance of A. */
int score_cake(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out, KvErr *err) {
    const int L = o->L, P = L - o->w;
    out->score = kv_malloc(sizeof(float) * (size_t)o->K * P, err);
    if (!out->score || alloc_clamped(cfg, o->K, P, out, err) ||
        score_pooled_heads(o, cfg, row->gamma, out->score, &out->variance_sum, out->clamped, err))
        return -1;
    /* Per query row in parallel, then summed in row order. */
    double *row_entropy = kv_malloc(sizeof(double) * (size_t)o->H * o->w, err);
    if (!row_entropy) return -1;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < o->H * o->w; r++) {
        const float *a = o->attn + (size_t)r * L;
        double e = 0.0;
        for (int j = 0; j < P; j++) e -= a[j] * logf(a[j] + 1e-10f); /* fp32 as the reference */
        row_entropy[r] = e;
    }
    out->entropy = 0.0;
    for (int r = 0; r < o->H * o->w; r++) out->entropy += row_entropy[r];
    free(row_entropy);
    out->preference = pow(out->entropy, 1.0 / row->tau1) * pow(out->variance_sum, 1.0 / row->tau2);
    return 0;
}

/* A kv-head's prefix positions by descending share of the mean attention, and how many come before the
 * cumulative share reaches the threshold (0 when it never does, as argmax of an all-false mask). */
static int mass_prefix(const float *abar, int P, double threshold, int *order, int *n_mass, KvErr *err) {
    if (sort_desc_stable(abar, P, order, err)) return -1;
    double total = 0.0;
    for (int j = 0; j < P; j++) total += abar[j];
    double cum = 0.0;
    *n_mass = 0;
    for (int t = 0; t < P; t++) {
        cum += total > 0.0 ? (double)(float)(abar[order[t]] / total) : 0.0;
        if (cum >= threshold) {
            *n_mass = t;
            break;
        }
    }
    return 0;
}

/* DefensiveKV Steps A-B into delta[K][P]: each query row pooled with its prefix mass restored, folded over the
 * window queries by the aggregation and over the group by the ladder's group step (both at once when they are
 * the same fold, as the reference's max over G*w rows), clamped under max+prior. */
static int score_rows(const Observation *o, const PolicyConfig *cfg, float *delta, unsigned char *clamped,
                      KvErr *err) {
    const int L = o->L, w = o->w, P = L - w, K = o->K, G = o->H / o->K;
    Aggregation fold = cfg->aggregation == AGG_MEAN ? AGG_MEAN : AGG_MAX, gfold = group_fold(cfg, fold);
    float *pooled = kv_malloc(sizeof(float) * (size_t)G * w * P, err);
    float *per_head = pooled && gfold != fold ? kv_malloc(sizeof(float) * (size_t)G * P, err) : NULL;
    double *acc = pooled && (gfold == fold || per_head) ? kv_malloc(sizeof(double) * (size_t)P, err) : NULL;
    int rc = acc ? 0 : -1;
    for (int k = 0; !rc && k < K; k++) {
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < G * w; r++) {
            const float *a = o->attn + ((size_t)k * G * w + r) * L;
            float *p = pooled + (size_t)r * P;
            pool_avg(a, P, cfg->pool_kernel, p);
            double base = 0.0, psum = 0.0;
            for (int j = 0; j < P; j++) {
                base += a[j];
                psum += p[j];
            }
            double scale = psum > 0.0 ? base / psum : 0.0;
            for (int j = 0; j < P; j++) p[j] = (float)(p[j] * scale);
        }
        float *d = delta + (size_t)k * P;
        if (gfold == fold) {
            fold_rows(pooled, G * w, (size_t)P, P, fold, acc, d);
        } else {
            for (int g = 0; g < G; g++)
                fold_rows(pooled + (size_t)g * w * P, w, (size_t)P, P, fold, acc, per_head + (size_t)g * P);
            fold_rows(per_head, G, (size_t)P, P, gfold, acc, d);
        }
        if (cfg->aggregation == AGG_MAX_PRIOR)
            rc = clamp_at_mean(d, P, cfg->ties_by_unclamped, clamped + (size_t)k * P, err);
    }
    free(pooled);
    free(per_head);
    free(acc);
    return rc;
}

/* DefensiveKV Step D, the forced set "mass": abar (the unpooled mean over the group and window queries), the
 * window bias (as coded: the last w prefix columns; intended: the window columns), and each head's order. */
static int score_mass(const Observation *o, const PolicyConfig *cfg, double mass_threshold, LayerScores *out,
                      KvErr *err) {
    const int L = o->L, w = o->w, P = L - w, K = o->K, G = o->H / o->K;
    const size_t KP = (size_t)K * P;
    out->abar = kv_malloc(sizeof(float) * KP, err);
    out->mass_order = out->abar ? kv_malloc(sizeof(int) * KP, err) : NULL;
    out->n_mass = out->mass_order ? kv_malloc(sizeof(int) * (size_t)K, err) : NULL;
    double *acc = out->n_mass ? kv_malloc(sizeof(double) * (size_t)P, err) : NULL;
    if (!acc) return -1;
    for (int k = 0; k < K; k++)
        fold_rows(o->attn + (size_t)k * G * w * L, G * w, (size_t)L, P, AGG_MEAN, acc, out->abar + (size_t)k * P);
    free(acc);
    int lo = cfg->intended_window_bias ? P : (P - w > 0 ? P - w : 0);
    int hi = cfg->intended_window_bias ? L : P;
    double bias = 0.0;
    for (int row_i = 0; row_i < o->H * w; row_i++) {
        const float *a = o->attn + (size_t)row_i * L;
        for (int j = lo; j < hi; j++) bias += a[j];
    }
    out->window_bias = bias / (o->H * w);
    out->threshold = mass_threshold - out->window_bias;
    for (int k = 0; k < K; k++)
        if (mass_prefix(out->abar + (size_t)k * P, P, out->threshold, out->mass_order + (size_t)k * P,
                        &out->n_mass[k], err))
            return -1;
    return 0;
}

/* The value-weighted policies (§2.5, §2.7 Steps A-D; docs/ladder.md): the aggregated score delta and its
 * window-padded form base, the value-weighted score, and the forced set "mass"; the rest of the protection is
 * applied per budget at selection. */
int score_value_weighted(const PolicyRow *row, const PolicyConfig *cfg, const Observation *o, LayerScores *out,
                         KvErr *err) {
    const LadderParams *lp = &cfg->ladder;
    if (!lp->enabled) return kv_fail(err, "policy %s: value-weighted scoring without the ladder's steps", row->name);
    const LadderConstants lc = ladder_constants();
    const int L = o->L, w = o->w, P = L - w, K = o->K;
    const size_t KP = (size_t)K * P, KL = (size_t)K * L;
    out->delta = kv_malloc(sizeof(float) * KP, err);
    out->base = out->delta ? kv_malloc(sizeof(float) * KL, err) : NULL;
    out->score = out->base ? kv_malloc(sizeof(float) * KL, err) : NULL;
    out->nu_prefix = out->score ? kv_malloc(sizeof(float) * KP, err) : NULL;
    if (!out->nu_prefix || alloc_clamped(cfg, K, P, out, err)) return -1;
    int rc = lp->pooling == LADDER_POOL_WINDOW ? score_pooled_heads(o, cfg, 0.0, out->delta, NULL, out->clamped, err)
                                               : score_rows(o, cfg, out->delta, out->clamped, err);
    if (rc || (lp->forced == LADDER_FORCED_MASS && score_mass(o, cfg, lc.mass_threshold, out, err))) return -1;
    /* base: the window padded with the max over the whole layer (SnapKV §2.2 step 4) */
    float mx = out->delta[0];
    for (size_t t = 1; t < KP; t++) mx = out->delta[t] > mx ? out->delta[t] : mx;
    for (int k = 0; k < K; k++) {
        memcpy(out->base + (size_t)k * L, out->delta + (size_t)k * P, sizeof(float) * (size_t)P);
        for (int j = P; j < L; j++) out->base[(size_t)k * L + j] = mx;
    }
    for (int k = 0; k < K; k++)
        memcpy(out->nu_prefix + (size_t)k * P, o->value_norm + (size_t)k * L, sizeof(float) * (size_t)P);
    out->layer_max = -INFINITY;
    if (lp->weighting == LADDER_WEIGHT_CRITICAL) {
        /* Ada-CriticalKV stage 2 (§2.5 step 4), over every position, in float as the reference */
        const float eps = (float)lc.epsilon;
        for (size_t t = 0; t < KL; t++) out->score[t] = (out->base[t] + eps) * o->value_norm[t];
        for (int k = 0; k < K; k++)
            for (int j = 0; j < P; j++) {
                float c = out->score[(size_t)k * L + j];
                out->layer_max = c > out->layer_max ? c : out->layer_max;
            }
        return 0;
    }
    /* Step C: value norms normalised across kv-heads at each position; the window at M (Step E) */
    for (int j = 0; j < P; j++) {
        double col = 0.0;
        for (int k = 0; k < K; k++) col += out->nu_prefix[(size_t)k * P + j];
        for (int k = 0; k < K; k++) {
            size_t t = (size_t)k * P + j;
            float c = col > 0.0 ? (float)(out->delta[t] * (out->nu_prefix[t] / col)) : 0.0f;
            out->score[(size_t)k * L + j] = c;
            out->layer_max = c > out->layer_max ? c : out->layer_max;
        }
    }
    for (int k = 0; k < K; k++)
        for (int j = P; j < L; j++) out->score[(size_t)k * L + j] = out->layer_max;
    return 0;
}

int score_layer(const PolicyRow *row, const PolicyConfig *cfg, const Observation *obs, LayerScores *out,
                KvErr *err) {
    *out = (LayerScores){0};
    if (!row->score) return 0;
    if ((row->needs & NEEDS_ATTENTION) && !obs->attn)
        return kv_fail(err, "policy %s: layer %d was observed without attention", row->name, obs->layer);
    if ((row->needs & NEEDS_VALUE_NORM) && !obs->value_norm)
        return kv_fail(err, "policy %s: layer %d was observed without value norms", row->name, obs->layer);
    if ((row->needs & NEEDS_KEYS) && !obs->keys)
        return kv_fail(err, "policy %s: layer %d was observed without keys", row->name, obs->layer);
    if ((row->needs & NEEDS_VALUES) && !obs->values)
        return kv_fail(err, "policy %s: layer %d was observed without values", row->name, obs->layer);
    if ((row->needs & NEEDS_ATTENTION_SUMS) && !obs->attn_sums)
        return kv_fail(err, "policy %s: layer %d was observed without attention sums", row->name, obs->layer);
    if ((row->needs & NEEDS_QUERY_STATS) &&
        (!obs->query_stats || !obs->rope_inv_freq || obs->query_stats_from != row->n_sink))
        return kv_fail(err, "policy %s: layer %d was observed without the pre-RoPE query statistics from position %d "
                            "and the RoPE frequencies", row->name, obs->layer, row->n_sink);
    int rc = row->score(row, cfg, obs, out, err);
    if (rc) layer_scores_free(out);
    return rc;
}

void layer_scores_trim(LayerScores *ls, const PolicyConfig *cfg) {
    free(ls->abar);
    free(ls->delta);
    free(ls->nu_prefix);
    ls->abar = ls->delta = ls->nu_prefix = NULL;
    const PolicyRow *row = policy_row(cfg->name);
    if (!ladder_needs_base(&cfg->ladder) && !(row && row->allocation == ALLOC_TWO_STAGE)) {
        free(ls->base);
        ls->base = NULL;
    }
}

/* n bytes of src in a new buffer into *dst (NULL for NULL); -1 when out of memory. */
static int dup_bytes(void **dst, const void *src, size_t n, KvErr *err) {
    *dst = NULL;
    if (!src) return 0;
    if (!(*dst = kv_malloc(n ? n : 1, err))) return -1;
    memcpy(*dst, src, n);
    return 0;
}

int layer_scores_copy(const PolicyRow *row, const LayerScores *src, int K, int L, int w, LayerScores *dst,
                      KvErr *err) {
    const size_t KL = (size_t)K * L, KP = (size_t)K * (L - w);
    if (src->abar || src->delta || src->nu_prefix)
        return kv_fail(err, "policy %s: scores copied before they were trimmed", row->name);
    *dst = *src; /* the scalars; every buffer is replaced below, none is shared with src */
    dst->score = dst->base = NULL;
    dst->mass_order = dst->n_mass = NULL;
    dst->clamped = NULL;
    size_t n_score = row->span == SPAN_CONTEXT ? KL : KP;
    if (dup_bytes((void **)&dst->score, src->score, sizeof(float) * n_score, err) ||
        dup_bytes((void **)&dst->base, src->base, sizeof(float) * KL, err) ||
        dup_bytes((void **)&dst->mass_order, src->mass_order, sizeof(int) * KP, err) ||
        dup_bytes((void **)&dst->n_mass, src->n_mass, sizeof(int) * (size_t)K, err) ||
        dup_bytes((void **)&dst->clamped, src->clamped, KP, err)) {
        layer_scores_free(dst);
        return -1;
    }
    return 0;
}

void layer_scores_free(LayerScores *ls) {
    free(ls->score);
    free(ls->base);
    free(ls->abar);
    free(ls->delta);
    free(ls->nu_prefix);
    free(ls->mass_order);
    free(ls->n_mass);
    free(ls->clamped);
    *ls = (LayerScores){0};
}
