#!/usr/bin/env python3
"""gen_bootstrap_cases.py — expected values for report/stats.c (tests/test_report.c reads them).

Writes tests/data/report/bootstrap_cases.json: splitmix64 outputs, and for several data sets (one or several
groups, NaNs, left-out values, paired differences and ratios) the statistic and its 95% percentile-bootstrap
interval. The resampling is the one report/stats.h describes, implemented here independently: the same
splitmix64 stream (restarted from the seed for every interval); stratified by group when every group holds at
least MIN_STRATUM values (a draw from a group of n members being member[next() % n], groups visited in index
order), else pooled (a draw from a stratum of n values being its (next() % n)-th value, the stratum's values in
group order then index order, strata visited in index order; the strata are the domains for a cross-domain
change, else one stratum of every value; a group no draw fell in is left out of the resample's statistic); the
statistic (mean over groups of the group means of the drawn values) is computed with numpy and the interval with
numpy.percentile (method "linear").

Usage: python3 tests/reference/gen_bootstrap_cases.py   (numpy; run from the repository root)
"""
import json
import math

import numpy as np

MASK = (1 << 64) - 1
SEED = 0x6B7662656E636801  # STATS_SEED in report/stats.h
MIN_STRATUM = 5  # STATS_MIN_STRATUM in report/stats.h


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def domain_change(gx, gy, doms):
    """Unweighted mean over domains of 100 * (mean of its groups' x means / mean of their y means - 1)."""
    changes = []
    for d in sorted(set(k for k in doms if k >= 0)):
        xs = [v for v, k in zip(gx, doms) if k == d]
        ys = [v for v, k in zip(gy, doms) if k == d]
        if np.mean(ys) == 0:
            return math.nan
        changes.append(100.0 * (np.mean(xs) / np.mean(ys) - 1.0))
    return float(np.mean(changes))


def combine(kind, mx, my):
    if kind == "diff":
        return mx - my
    if kind == "ratio":
        return 100.0 * mx / my if my != 0 else math.nan
    return mx


def bootstrap(kind, x, y, group, n_groups, resamples, seed, group_domain=None):
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y if y is not None else [0.0] * len(x), dtype=np.float64)
    paired = kind != "mean"
    in_domain = lambda g: group_domain is None or group_domain[g] >= 0
    valid = [i for i in range(len(x)) if 0 <= group[i] < n_groups and in_domain(group[i])
             and not math.isnan(x[i]) and not (paired and math.isnan(y[i]))]
    members = [np.array([i for i in valid if group[i] == g], dtype=np.int64) for g in range(n_groups)]
    used = [g for g in range(n_groups) if len(members[g])]
    if not used:
        return {"n": 0, "groups_used": 0, "value": None, "lo": None, "hi": None, "n_least": 0, "pooled": 0}
    pooled = any(len(members[g]) < MIN_STRATUM for g in used)
    if group_domain is not None:
        per_domain = {}
        for g in used:
            per_domain[group_domain[g]] = per_domain.get(group_domain[g], 0) + len(members[g])
        n_least = min(per_domain.values())
    else:
        n_least = len(valid)

    def stat(draws_of):  # draws_of: {group: [indices]} for the groups that hold draws
        gs = sorted(draws_of)
        gx = [x[draws_of[g]].mean() for g in gs]
        gy = [y[draws_of[g]].mean() for g in gs]
        if kind == "domain_change":
            return domain_change(gx, gy, [group_domain[g] for g in gs])
        return combine(kind, np.mean(gx), np.mean(gy))

    value = stat({g: members[g] for g in used})
    if pooled:
        keys = sorted(set(group_domain[g] for g in used)) if group_domain is not None else [0]
        strata = [[(g, i) for g in used if group_domain is None or group_domain[g] == k for i in members[g]]
                  for k in keys]
    else:
        strata = [[(g, i) for i in members[g]] for g in used]
    state, stats = seed, np.empty(resamples)
    for r in range(resamples):
        draws_of = {}
        for stratum in strata:
            for _ in range(len(stratum)):
                state, out = splitmix64(state)
                g, i = stratum[out % len(stratum)]
                draws_of.setdefault(g, []).append(i)
        stats[r] = stat(draws_of)
    lo, hi = np.percentile(stats, [2.5, 97.5], method="linear")
    return {"n": len(valid), "groups_used": len(used), "value": float(value),
            "lo": None if math.isnan(lo) else float(lo), "hi": None if math.isnan(hi) else float(hi),
            "n_least": n_least, "pooled": int(pooled and len(used) > 1)}


def main():
    rng = np.random.default_rng(13)
    cases = []

    def add(name, kind, x, y, group, n_groups, resamples=2000, seed=SEED, group_domain=None):
        exp = bootstrap(kind, x, y, group, n_groups, resamples, seed, group_domain)
        enc = lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else v
        cases.append({"name": name, "kind": kind, "x": [enc(v) for v in x],
                      "y": None if y is None else [enc(v) for v in y], "group": group, "n_groups": n_groups,
                      "resamples": resamples, "seed": str(seed), "group_domain": group_domain, **exp})

    add("one task, continuous", "mean", [float(v) for v in np.round(rng.uniform(0, 100, 12), 3)], None, [0] * 12, 1)
    binary = [float(v) for v in 100.0 * (rng.uniform(size=40) < 0.6)]
    add("four tasks, 0/100 scores", "mean", binary, None, [i % 4 for i in range(40)], 4)
    x = [float(v) for v in np.round(rng.uniform(0, 100, 11), 2)]
    x[3] = math.nan
    add("uneven groups, a NaN, a value left out", "mean", x, None, [0, 0, 0, 0, 0, 1, 1, 1, 2, -1, 2], 4)
    a = [float(v) for v in np.round(rng.uniform(20, 90, 24), 2)]
    b = [float(v) for v in np.round(np.array(a) + rng.normal(-8, 6, 24), 2)]
    b[5] = math.nan
    add("paired difference, a missing pair", "diff", b, a, [i % 3 for i in range(24)], 3)
    add("paired ratio", "ratio", b, a, [i % 3 for i in range(24)], 3)
    add("1000 resamples, other seed", "mean", binary[:15], None, [0] * 15, 1, 1000, 12345)
    add("nothing valid", "mean", [math.nan, math.nan], None, [0, 0], 1)
    # cross-domain change: 5 tasks in 3 domains (task 4 in none), paired, a missing pair
    fx = [float(v) for v in np.round(rng.uniform(10, 90, 30), 2)]
    mx = [float(v) for v in np.round(np.array(fx) * rng.uniform(0.5, 1.2, 30), 2)]
    mx[7] = math.nan
    add("cross-domain change", "domain_change", mx, fx, [i % 5 for i in range(30)], 5, group_domain=[0, 0, 1, 2, -1])
    # pooled: one value per task (13 tasks, RULER at --limit 1), two per task, and a pooled cross-domain change
    # whose domains are not in group order
    one = [float(v) for v in 100.0 * (rng.uniform(size=13) < 0.5)]
    add("one value per task, pooled", "mean", one, None, list(range(13)), 13)
    two_x = [float(v) for v in np.round(rng.uniform(0, 100, 16), 2)]
    two_y = [float(v) for v in np.round(np.array(two_x) + rng.normal(5, 10, 16), 2)]
    add("two values per task, paired, pooled", "diff", two_x, two_y, [i // 2 for i in range(16)], 8)
    px = [float(v) for v in np.round(rng.uniform(10, 90, 14), 2)]
    pm = [float(v) for v in np.round(np.array(px) * rng.uniform(0.6, 1.1, 14), 2)]
    add("cross-domain change, pooled by domain", "domain_change", pm, px, [i % 7 for i in range(14)], 7,
        group_domain=[1, 0, 1, 2, 0, -1, 2])

    state, outs = 0, []
    for _ in range(3):
        state, out = splitmix64(state)
        outs.append(f"{out:016x}")
    with open("tests/data/report/bootstrap_cases.json", "w") as f:
        json.dump({"generator": "tests/reference/gen_bootstrap_cases.py", "numpy": np.__version__,
                   "splitmix64_seed0": outs, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
