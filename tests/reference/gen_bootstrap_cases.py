#!/usr/bin/env python3
"""gen_bootstrap_cases.py — expected values for report/stats.c (tests/test_report.c reads them).

Writes tests/data/report/bootstrap_cases.json: splitmix64 outputs, and for several data sets (one or several
groups, NaNs, left-out values, paired differences and ratios) the statistic and its 95% percentile-bootstrap
interval. The resampling is the one report/stats.h describes, implemented here independently: the same
splitmix64 stream (restarted from the seed for every interval), a draw from a group of n members being
member[next() % n], groups visited in index order; the statistic (mean over groups of the group means of the
drawn values) is computed with numpy and the interval with numpy.percentile (method "linear").

Usage: python3 tests/reference/gen_bootstrap_cases.py   (numpy; run from the repository root)
"""
import json
import math

import numpy as np

MASK = (1 << 64) - 1
SEED = 0x6B7662656E636801  # STATS_SEED in report/stats.h


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
    valid = [i for i in range(len(x)) if 0 <= group[i] < n_groups and not math.isnan(x[i])
             and not (paired and math.isnan(y[i]))]
    members = [np.array([i for i in valid if group[i] == g], dtype=np.int64) for g in range(n_groups)]
    doms = [group_domain[g] for g in range(n_groups) if len(members[g])] if group_domain else None
    members = [m for m in members if len(m)]
    if not members:
        return {"n": 0, "groups_used": 0, "value": None, "lo": None, "hi": None}
    def stat(gx, gy):
        return domain_change(gx, gy, doms) if kind == "domain_change" else combine(kind, np.mean(gx), np.mean(gy))

    value = stat([x[m].mean() for m in members], [y[m].mean() for m in members])
    state, stats = seed, np.empty(resamples)
    for r in range(resamples):
        gx, gy = [], []
        for m in members:
            draws = []
            for _ in range(len(m)):
                state, out = splitmix64(state)
                draws.append(m[out % len(m)])
            gx.append(x[draws].mean())
            gy.append(y[draws].mean())
        stats[r] = stat(gx, gy)
    lo, hi = np.percentile(stats, [2.5, 97.5], method="linear")
    return {"n": len(valid), "groups_used": len(members), "value": float(value),
            "lo": None if math.isnan(lo) else float(lo), "hi": None if math.isnan(hi) else float(hi)}


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
