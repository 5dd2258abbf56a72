/* stats.c — stratified (paired) percentile bootstrap; the method is described in stats.h. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

uint64_t stats_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double stats_quantile_sorted(const double *sorted, int n, double q) {
    if (n <= 0) return NAN;
    double pos = q * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1) return sorted[n - 1];
    if (i < 0) return sorted[0];
    double t = pos - i, a = sorted[i], b = sorted[i + 1], d = b - a;
    /* numpy's lerp: from the nearer end, so the result stays within [a, b] */
    return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

int stats_excludes(const StatsInterval *ci, double v) {
    return !isnan(ci->lo) && !isnan(ci->hi) && (ci->lo > v || ci->hi < v);
}

/* The statistic from per-group sums of the members drawn (or all members): mean over groups of group means. */
static double combine(StatsKind kind, double mean_x, double mean_y) {
    switch (kind) {
    case STATS_DIFF: return mean_x - mean_y;
    case STATS_RATIO: return mean_y != 0 ? 100.0 * mean_x / mean_y : NAN;
    default: return mean_x;
    }
}

int stats_bootstrap(StatsKind kind, const double *x, const double *y, const int *group, int n, int n_groups,
                    int resamples, uint64_t seed, StatsInterval *out, KvErr *err) {
    int paired = kind != STATS_MEAN;
    *out = (StatsInterval){0, 0, NAN, NAN, NAN};
    /* members of each group, in index order: offset[g] .. offset[g + 1] in member[] */
    int *offset = kv_calloc((size_t)n_groups + 1, sizeof *offset, err);
    int *member = kv_malloc(((size_t)n + 1) * sizeof *member, err);
    double *stat = kv_malloc(((size_t)resamples + 1) * sizeof *stat, err);
    if (!offset || !member || !stat) goto fail;
    for (int i = 0; i < n; i++)
        if (group[i] >= 0 && group[i] < n_groups && !isnan(x[i]) && !(paired && isnan(y[i]))) offset[group[i] + 1]++;
    for (int g = 0; g < n_groups; g++) offset[g + 1] += offset[g];
    int *fill = kv_calloc((size_t)n_groups + 1, sizeof *fill, err);
    if (!fill) goto fail;
    for (int i = 0; i < n; i++)
        if (group[i] >= 0 && group[i] < n_groups && !isnan(x[i]) && !(paired && isnan(y[i])))
            member[offset[group[i]] + fill[group[i]]++] = i;
    free(fill);
    out->n = offset[n_groups];
    if (out->n == 0) goto done;

    double sx = 0, sy = 0;
    for (int g = 0; g < n_groups; g++) {
        int ng = offset[g + 1] - offset[g];
        if (!ng) continue;
        double gx = 0, gy = 0;
        for (int k = offset[g]; k < offset[g + 1]; k++) {
            gx += x[member[k]];
            if (paired) gy += y[member[k]];
        }
        sx += gx / ng;
        sy += gy / ng;
        out->n_groups++;
    }
    out->value = combine(kind, sx / out->n_groups, sy / out->n_groups);

    uint64_t state = seed;
    int any_nan = 0;
    for (int r = 0; r < resamples; r++) {
        sx = sy = 0;
        for (int g = 0; g < n_groups; g++) {
            int ng = offset[g + 1] - offset[g];
            if (!ng) continue;
            double gx = 0, gy = 0;
            for (int k = 0; k < ng; k++) {
                int j = member[offset[g] + (int)(stats_splitmix64(&state) % (uint64_t)ng)];
                gx += x[j];
                if (paired) gy += y[j];
            }
            sx += gx / ng;
            sy += gy / ng;
        }
        stat[r] = combine(kind, sx / out->n_groups, sy / out->n_groups);
        any_nan |= isnan(stat[r]);
    }
    if (!any_nan) {
        qsort(stat, (size_t)resamples, sizeof *stat, cmp_double);
        out->lo = stats_quantile_sorted(stat, resamples, 0.025);
        out->hi = stats_quantile_sorted(stat, resamples, 0.975);
    }
done:
    free(offset);
    free(member);
    free(stat);
    return 0;
fail:
    free(offset);
    free(member);
    free(stat);
    return -1;
}
