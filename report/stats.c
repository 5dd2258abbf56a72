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

/* What rounding can move a bound by: the same per-sample values summed over different samples differ in their last
 * bits (15 points as 15.000000000000002 and 14.999999999999998; a needle difference whose resamples reach 0 as
 * -7.1e-15). */
static double rounding_slack(const StatsInterval *ci) {
    return 1e-9 * fmax(1.0, fmax(fabs(ci->lo), fabs(ci->hi)));
}

int stats_excludes(const StatsInterval *ci, double v) {
    if (isnan(ci->lo) || isnan(ci->hi)) return 0;
    double slack = rounding_slack(ci);
    return ci->lo > v + slack || ci->hi < v - slack;
}

int stats_too_few(const StatsInterval *ci, int min_n) {
    return ci->n > 0 && (ci->n < min_n || ci->n_least < min_n);
}

int stats_resolved(const StatsInterval *ci, int min_n) {
    if (ci->n == 0 || stats_too_few(ci, min_n) || isnan(ci->lo) || isnan(ci->hi)) return 0;
    return ci->hi - ci->lo > rounding_slack(ci); /* zero width up to rounding */
}

int stats_significant(const StatsInterval *ci, double v, int min_n) {
    return stats_resolved(ci, min_n) && stats_excludes(ci, v);
}

typedef struct {
    StatsKind kind;
    int n_groups, n_domains;
    const int *count;         /* [G] members of each group in the data or the resample (0: left out) */
    const int *group_domain;  /* [G] for STATS_DOMAIN_CHANGE */
    double *dx, *dy;          /* [D] scratch */
    int *dn;                  /* [D] scratch */
} Combine;

/* The statistic from the group means gx[g], gy[g] of the groups with count[g] > 0. */
static double combine(const Combine *c, const double *gx, const double *gy) {
    if (c->kind == STATS_DOMAIN_CHANGE) {
        for (int k = 0; k < c->n_domains; k++) c->dx[k] = c->dy[k] = 0, c->dn[k] = 0;
        for (int g = 0; g < c->n_groups; g++) {
            int k = c->group_domain[g];
            if (!c->count[g] || k < 0 || k >= c->n_domains) continue;
            c->dx[k] += gx[g], c->dy[k] += gy[g], c->dn[k]++;
        }
        double sum = 0;
        int n = 0;
        for (int k = 0; k < c->n_domains; k++) {
            if (!c->dn[k]) continue;
            if (c->dy[k] == 0) return NAN;
            sum += 100.0 * (c->dx[k] / c->dy[k] - 1.0);
            n++;
        }
        return n ? sum / n : NAN;
    }
    double sx = 0, sy = 0;
    int n = 0;
    for (int g = 0; g < c->n_groups; g++) {
        if (!c->count[g]) continue;
        sx += gx[g], sy += gy[g], n++;
    }
    double mx = sx / n, my = sy / n;
    switch (c->kind) {
    case STATS_DIFF: return mx - my;
    case STATS_RATIO: return my != 0 ? 100.0 * mx / my : NAN;
    default: return mx;
    }
}

int stats_bootstrap_domains(StatsKind kind, const double *x, const double *y, const int *group, int n, int n_groups,
                            const int *group_domain, int n_domains, int resamples, uint64_t seed,
                            StatsInterval *out, KvErr *err) {
    int paired = kind != STATS_MEAN;
    *out = STATS_NONE;
    int G = n_groups, D = n_domains > 0 ? n_domains : 0;
    int *offset = kv_calloc((size_t)G + 2, sizeof *offset, err);
    int *fill = kv_calloc((size_t)G + 1, sizeof *fill, err);
    int *member = kv_malloc(((size_t)n + 1) * sizeof *member, err);
    int *size = kv_calloc((size_t)G + 1, sizeof *size, err), *drawn = kv_calloc((size_t)G + 1, sizeof *drawn, err);
    double *stat = kv_malloc(((size_t)resamples + 1) * sizeof *stat, err);
    double *gx = kv_malloc(((size_t)G + 1) * sizeof *gx, err), *gy = kv_malloc(((size_t)G + 1) * sizeof *gy, err);
    double *dx = kv_malloc(((size_t)D + 1) * sizeof *dx, err), *dy = kv_malloc(((size_t)D + 1) * sizeof *dy, err);
    int *dn = kv_calloc((size_t)D + 1, sizeof *dn, err);
    int rc = -1;
    if (!offset || !fill || !member || !size || !drawn || !stat || !gx || !gy || !dx || !dy || !dn) goto done;
    rc = 0;
    /* a group takes part when it lies in a domain (if there are domains); members of each group, in index order */
#define IN_DOMAIN(g) (!group_domain || (group_domain[g] >= 0 && group_domain[g] < D))
#define VALID(i)                                                                                                   \
    (group[i] >= 0 && group[i] < G && IN_DOMAIN(group[i]) && !isnan(x[i]) && !(paired && isnan(y[i])))
    for (int i = 0; i < n; i++)
        if (VALID(i)) offset[group[i] + 1]++;
    for (int g = 0; g < G; g++) offset[g + 1] += offset[g];
    for (int i = 0; i < n; i++)
        if (VALID(i)) member[offset[group[i]] + fill[group[i]]++] = i;
#undef VALID
#undef IN_DOMAIN
    out->n = offset[G];
    int pooled = 0;
    for (int g = 0; g < G; g++) {
        size[g] = offset[g + 1] - offset[g];
        out->n_groups += size[g] > 0;
        pooled |= size[g] > 0 && size[g] < STATS_MIN_STRATUM;
        if (size[g] && group_domain) dn[group_domain[g]] += size[g];
    }
    out->n_least = out->n;
    for (int k = 0; group_domain && k < D; k++)
        if (dn[k] && dn[k] < out->n_least) out->n_least = dn[k];
    /* with one group (or, pooled by domain, one group per domain) both schemes draw alike: no fallback to state */
    out->pooled = pooled && out->n_groups > 1;
    if (out->n == 0) goto done;
    Combine c = {kind, G, D, size, group_domain, dx, dy, dn};

    for (int g = 0; g < G; g++) {
        double sx = 0, sy = 0;
        for (int k = offset[g]; k < offset[g + 1]; k++) {
            sx += x[member[k]];
            if (paired) sy += y[member[k]];
        }
        gx[g] = size[g] ? sx / size[g] : 0;
        gy[g] = size[g] ? sy / size[g] : 0;
    }
    out->value = combine(&c, gx, gy);

    /* the pooled scheme's strata: the members of the groups of one domain are contiguous when the groups are in
     * domain order, which they need not be, so a stratum is walked group by group */
    int n_strata = pooled ? (group_domain ? D : 1) : G;
    c.count = drawn;
    uint64_t state = seed;
    int any_nan = 0;
    for (int r = 0; r < resamples; r++) {
        for (int g = 0; g < G; g++) gx[g] = gy[g] = 0, drawn[g] = 0;
        for (int k = 0; k < n_strata; k++) {
            int ns = 0;
            if (!pooled) ns = size[k];
            else
                for (int g = 0; g < G; g++) ns += (group_domain ? group_domain[g] == k : 1) ? size[g] : 0;
            for (int draw = 0; draw < ns; draw++) {
                int pick = (int)(stats_splitmix64(&state) % (uint64_t)ns), g = k;
                if (pooled) /* the pick-th member of the stratum */
                    for (g = 0; g < G; g++) {
                        if (group_domain && group_domain[g] != k) continue;
                        if (pick < size[g]) break;
                        pick -= size[g];
                    }
                int j = member[offset[g] + pick];
                gx[g] += x[j];
                if (paired) gy[g] += y[j];
                drawn[g]++;
            }
        }
        for (int g = 0; g < G; g++)
            if (drawn[g]) gx[g] /= drawn[g], gy[g] /= drawn[g];
        stat[r] = combine(&c, gx, gy);
        any_nan |= isnan(stat[r]);
    }
    if (!any_nan) {
        qsort(stat, (size_t)resamples, sizeof *stat, cmp_double);
        out->lo = stats_quantile_sorted(stat, resamples, 0.025);
        out->hi = stats_quantile_sorted(stat, resamples, 0.975);
    }
done:
    free(offset);
    free(fill);
    free(member);
    free(size);
    free(drawn);
    free(stat);
    free(gx);
    free(gy);
    free(dx);
    free(dy);
    free(dn);
    return rc;
}

int stats_bootstrap(StatsKind kind, const double *x, const double *y, const int *group, int n, int n_groups,
                    int resamples, uint64_t seed, StatsInterval *out, KvErr *err) {
    return stats_bootstrap_domains(kind, x, y, group, n, n_groups, NULL, 0, resamples, seed, out, err);
}
