/* stats.h — the report's statistics: percentile-bootstrap 95% intervals, deterministic.
 *
 * Values are per-sample scores, each in a group (a task). The statistic is the unweighted mean over the groups
 * that hold at least one value of the group's mean — a task average when there is one group, the suite or domain
 * average (the mean of task averages, as the tables report it) when there are several.
 *
 * Two resampling schemes; which one ran is recorded in StatsInterval.pooled.
 * - Stratified by task (when every group holds at least STATS_MIN_STRATUM values): every resample draws, group by
 *   group in index order, as many members as the group holds, with replacement.
 * - Pooled (when some group holds fewer): every resample draws, stratum by stratum, as many members as the stratum
 *   holds from all of its members (in group order, then index order), with replacement; the strata are the domains
 *   for STATS_DOMAIN_CHANGE, else all values form one stratum. A group no draw falls in is left out of that
 *   resample's statistic. Why: a stratum of n values resampled within itself has a bootstrap variance (n − 1) / n of
 *   the plug-in one, so strata of 1 never vary (a zero-width interval) and strata of 2 give intervals about 29%
 *   too narrow; pooling draws across tasks, which also counts the variation between tasks (conservative).
 * A paired comparison draws the same indices for both sides (the samples are the same across policies), so
 * sample-level noise cancels; only samples present on both sides take part (a NaN on either side drops the
 * pair).
 *
 * The random stream is splitmix64 (Steele, Lea & Flood 2014) from a fixed seed, restarted for every interval,
 * so each interval depends only on its data; a draw from a group of n members is member[next() % n]. The
 * percentile interval is the 2.5% and 97.5% quantile of the resampled statistics with linear interpolation
 * between order statistics (numpy's default "linear" method). tests/reference/gen_bootstrap_cases.py
 * implements the same stream and draws in Python and computes the statistic with numpy. */
#ifndef KVBENCH_REPORT_STATS_H
#define KVBENCH_REPORT_STATS_H

#include <math.h>
#include <stdint.h>

#include "../engine/err.h"

#define STATS_RESAMPLES 2000
/* The fewest resamples behind a 95% percentile interval: its bounds are the 2.5% and 97.5% quantiles, so with
 * fewer than 1000 resamples each rests on fewer than 25 resampled values and the interval need not even contain
 * its own estimate (2 resamples: `33.33 [44.15, 52.06]`). `kvbench report --resamples N` refuses fewer. */
#define STATS_MIN_RESAMPLES 1000
/* Stratified resampling needs this many values in every group, else the pooled scheme runs (above). At 5 a
 * within-stratum bootstrap is at most 11% too narrow (sqrt(4/5) = 0.89). */
#define STATS_MIN_STRATUM 5
#define STATS_SEED 0x6b7662656e636801ULL /* "kvbench" and 1 */

/* splitmix64: the state advances by the golden-ratio constant; the output is the state mixed. */
uint64_t stats_splitmix64(uint64_t *state);

typedef enum {
    STATS_MEAN,  /* mean(x) */
    STATS_DIFF,  /* mean(x) - mean(y), paired */
    STATS_RATIO, /* 100 * mean(x) / mean(y), paired (NaN where mean(y) is 0) */
    STATS_DOMAIN_CHANGE, /* paired, groups in domains: the unweighted mean over domains of
                          * 100 * (mean(x) / mean(y) - 1), each mean over the domain's groups (stats_bootstrap_domains);
                          * NaN where a domain's mean(y) is 0 */
} StatsKind;

typedef struct {
    int n;                 /* values (pairs) that took part */
    int n_groups;          /* groups with at least one of them */
    double value;          /* the statistic on the data */
    double lo, hi;         /* 95% percentile-bootstrap interval; NaN when n is 0 */
    int n_least;           /* STATS_DOMAIN_CHANGE: the values of its smallest domain (every domain weighs the same,
                            * so a verdict needs min_n in each); n otherwise */
    int pooled;            /* the pooled scheme ran (some group held fewer than STATS_MIN_STRATUM values) */
} StatsInterval;
#define STATS_NONE ((StatsInterval){0, 0, NAN, NAN, NAN, 0, 0})

/* The statistic and its interval. x[n] (and y[n] unless kind is STATS_MEAN) with group[n] in [0, n_groups), or
 * negative to leave the value out. resamples >= 1 (the report uses STATS_MIN_RESAMPLES or more; the tests use
 * fewer on hand cases). Fails only on allocation. */
int stats_bootstrap(StatsKind kind, const double *x, const double *y, const int *group, int n, int n_groups,
                    int resamples, uint64_t seed, StatsInterval *out, KvErr *err);

/* The same with the groups in domains: group_domain[g] in [0, n_domains) (negative: the group and its values left
 * out, also of n), for STATS_DOMAIN_CHANGE (the cross-domain change); the draws are the same as
 * stats_bootstrap's, but for the pooled scheme's strata (the domains). */
int stats_bootstrap_domains(StatsKind kind, const double *x, const double *y, const int *group, int n, int n_groups,
                            const int *group_domain, int n_domains, int resamples, uint64_t seed,
                            StatsInterval *out, KvErr *err);

/* Whether the interval excludes v (0 for a difference, 100 for a ratio), whatever it rests on; a bound within
 * rounding of v (1e-9 of the interval's scale) touches v. */
int stats_excludes(const StatsInterval *ci, double v);

/* The fewest values an interval or a paired comparison is reported from (`kvbench report --min-n N`). A
 * percentile bootstrap from fewer samples is too unstable to act on: it only reshuffles the few values there are
 * (n = 1 always gives a zero-width interval, n = 2 at most three distinct means), so its bounds swing with each
 * sample and its real coverage falls well below the nominal 95%. At 10 a task's or a comparison's interval is
 * drawn from 92,378 distinct resamples; below it the report shows the value with its n and "too few samples". */
#define STATS_MIN_N 10

/* Whether a value rests on fewer than min_n values (in its smallest domain, for a cross-domain change): shown
 * with its n and "too few samples", without an interval. */
int stats_too_few(const StatsInterval *ci, int min_n);
/* Whether the interval can carry a verdict: it rests on at least min_n values and has a nonzero width, beyond
 * rounding (a zero-width interval says the resamples never varied, not that the statistic is known exactly). */
int stats_resolved(const StatsInterval *ci, int min_n);
/* A difference the data support: a resolved interval that excludes v. */
int stats_significant(const StatsInterval *ci, double v, int min_n);

/* The q-quantile (0..1) of sorted[n] by linear interpolation between order statistics, as numpy.quantile. */
double stats_quantile_sorted(const double *sorted, int n, double q);

#endif
