"""gen_ladder_cases.py — an independent numpy reference for the ladder from Ada-CriticalKV to DefensiveKV
(docs/ladder.md; policies/policy.h LadderParams), written from the spec (docs/spec/policies.md §2.5, §2.7, §2.8)
and the ladder's definitions, not from the C code: float64 throughout, vectorised.

It draws small observations (window attention A[N][H][w][L] as causal softmaxes over all L keys, value norms
nu[N][K][L] > 0) and computes the keep-set of every single step away from Ada-CriticalKV and from DefensiveKV (and
their own settings) at several budgets. Ties are broken as kvbench documents (score descending, then the lower
flattened index). A seed is used only when every selection in it is robust: at each top-k cut the scores either
tie exactly (a structural tie: the prior's floor, the window pad, a protected sentinel, which both sides break by
index) or differ by more than 2e-6 of the largest score (about 16 float32 steps), and no cumulative mass lies within
1e-4 of its threshold;
so float32 arithmetic in C gives the same sets. tests/test_policies.c (test_ladder_reference) compares kvbench's
keep-sets with these exactly.

Usage: python tests/reference/gen_ladder_cases.py [out_dir]   (default tests/data/ladder)
"""
import json
import os
import sys

import numpy as np

BIG = float(np.finfo(np.float32).max)
ALPHA, RATIO, EPS, MASS = 0.2, 0.5, 1e-4, 0.9
CUT_TOL = 2e-6   # of the largest score: about 16 float32 steps
MASS_TOL = 1e-4  # cumulative shares: C adds float-rounded shares

CRITICAL = {"pooling": "window", "forced": "topk", "safeguard": "on", "weighting": "critical", "allocation": "head"}
DEFENSIVE = {"pooling": "rows", "forced": "mass", "safeguard": "off", "weighting": "defensive", "allocation": "layer"}
VALUES = {"pooling": ["window", "rows"], "group": ["mean", "max"], "forced": ["topk", "mass", "none"],
          "safeguard": ["off", "on"], "weighting": ["critical", "defensive"], "allocation": ["head", "layer", "global"]}


class NotRobust(Exception):
    pass


def order_desc(x):
    """Indices of x by (value descending, index ascending)."""
    return np.lexsort((np.arange(x.size), -x.ravel()))


def top(x, k):
    """The top k of flat x under that order; checks the cut is robust."""
    x = x.ravel()
    o = order_desc(x)
    if 0 < k < x.size:
        a, b = x[o[k - 1]], x[o[k]]
        scale = max(np.abs(x[np.isfinite(x) & (x < BIG)]).max(initial=0.0), 1e-30)
        if a != b and abs(a - b) < CUT_TOL * scale:
            raise NotRobust("cut %g %g" % (a, b))
    return o[:k]


def pool(x, kernel):
    r = kernel // 2
    P = x.shape[-1]
    pad = np.zeros(x.shape[:-1] + (P + 2 * r,))
    pad[..., r:r + P] = x
    return sum(pad[..., t:t + P] for t in range(kernel)) / kernel


def layer_scores(A, nu, K, w, agg, lp, kernel):
    """One layer: base [K][L] (window padded with the layer max), value-weighted c [K][L], M, mass order."""
    H, _, L = A.shape
    G, P = H // K, L - w
    Ap = A[:, :, :P]
    fold = np.mean if agg == "mean" else np.max
    gfold = np.mean if lp["group"] == "mean" else np.max
    if lp["pooling"] == "window":
        s = gfold(pool(fold(Ap, axis=1), kernel).reshape(K, G, P), axis=1)
    else:
        p = pool(Ap, kernel)
        base = Ap.sum(-1, keepdims=True)
        psum = p.sum(-1, keepdims=True)
        r = np.where(psum > 0, p / np.where(psum > 0, psum, 1) * base, 0.0).reshape(K, G, w, P)
        s = gfold(fold(r, axis=2), axis=1)
    if agg == "max+prior":
        s = np.maximum(s, s.mean(-1, keepdims=True))
    base_full = np.concatenate([s, np.full((K, w), s.max())], axis=1)
    if lp["weighting"] == "critical":
        c = (base_full + EPS) * nu
        M = c[:, :P].max()
    else:
        nuhat = nu[:, :P] / nu[:, :P].sum(0, keepdims=True)
        cp = s * nuhat
        M = cp.max()
        c = np.concatenate([cp, np.full((K, w), M)], axis=1)
    mass = None
    if lp["forced"] == "mass":
        abar = Ap.reshape(K, G * w, P).mean(1)
        bias = A[:, :, P - w:P].sum(-1).mean()
        theta = MASS - bias
        mass = []
        for k in range(K):
            pi = abar[k] / abar[k].sum()
            o = order_desc(pi)
            cum = np.cumsum(pi[o])
            if np.abs(cum - theta).min() < MASS_TOL:
                raise NotRobust("mass threshold")
            hit = np.nonzero(cum >= theta)[0]
            mass.append((o, int(hit[0]) if hit.size else 0))
    return base_full, c, M, mass


def forced_count(n_mass, P, w, f):
    cap = int(P * f - w)
    n = min(n_mass, cap)
    return n if n >= 0 else max(P + n, 0)


def select(layers, K, L, w, f, lp):
    """Keep mask [N][K][L] for keep fraction f."""
    N, P, n = len(layers), L - w, int(L * f)
    keep = np.zeros((N, K, L), dtype=bool)
    finals = []
    for l, (base, c, M, mass) in enumerate(layers):
        if lp["allocation"] == "head":
            work = base.copy()
            n_safe = int(n * ALPHA) if lp["safeguard"] == "on" else 0
            for k in range(K):
                work[k, top(work[k], n_safe)] = BIG
            budgets = np.bincount(top(work, K * n) // L, minlength=K)
            for k in range(K):
                if lp["forced"] == "topk":
                    work[k, top(work[k], int(budgets[k] * RATIO))] = BIG
                elif lp["forced"] == "mass":
                    o, nm = mass[k]
                    work[k, o[:forced_count(nm, P, w, f)]] = BIG
                final = np.where(work[k] == BIG, BIG, c[k])
                keep[l, k, top(final, int(budgets[k]))] = True
            continue
        final = c.copy()
        final[:, P:] = M
        for k in range(K):
            if mass is not None:
                o, nm = mass[k]
                final[k, o[:forced_count(nm, P, w, f)]] = M
            m = max(int(n * ALPHA) if lp["safeguard"] == "on" else 0, int(n * RATIO) if lp["forced"] == "topk" else 0)
            final[k, top(base[k], m)] = M
        if lp["allocation"] == "layer":
            keep[l].ravel()[top(final, int(L * f * K))] = True
        finals.append(final)
    if lp["allocation"] == "global":
        keep.ravel()[top(np.stack(finals), int(L * f * K * N))] = True
    return keep


def draw(rng, N, H, K, w, L):
    A = np.zeros((N, H, w, L))
    for l in range(N):
        for h in range(H):
            peaks = rng.choice(L - w, size=4, replace=False)
            for i in range(w):
                z = rng.normal(0, 1.5, L)
                z[peaks] += rng.uniform(2, 5, 4)
                if h >= H // K:
                    z[L - w:] += 7  # kv-head 1 looks mostly at the window: few prefix picks, the safeguard matters
                z[L - w + i + 1:] = -np.inf
                e = np.exp(z - z[np.isfinite(z)].max())
                A[l, h, i] = e / e.sum()
    A = A.astype(np.float32).astype(np.float64)
    nu = np.exp(rng.normal(0, 0.5, (N, K, L))).astype(np.float32).astype(np.float64)
    return A, nu


def variants():
    """(name, policy, aggregation, params set away from the policy's own) — the policies' own settings, every
    single step away from each, and the ladder's first step (CriticalKV max+prior with the group mean)."""
    out = [("criticalkv", "criticalkv", "mean", {}), ("defensivekv", "defensivekv", "max+prior", {}),
           ("layer-defensivekv", "layer-defensivekv", "max+prior", {}),
           ("criticalkv max+prior group=mean", "criticalkv", "max+prior", {"group": "mean"}),
           ("criticalkv max pooling=rows", "criticalkv", "max", {"pooling": "rows"})]
    for policy, agg, own in (("criticalkv", "mean", dict(CRITICAL, group="mean")),
                             ("defensivekv", "max+prior", dict(DEFENSIVE, group="max"))):
        for key, values in VALUES.items():
            for v in values:
                if v != own[key]:
                    out.append(("%s %s=%s" % (policy, key, v), policy, agg, {key: v}))
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/ladder"
    N, H, K, w, L, kernel = 2, 4, 2, 4, 64, 5
    budgets = [0.2, 0.3, 0.5, 0.7]
    for seed in range(100, 200):
        rng = np.random.default_rng(seed)
        A, nu = draw(rng, N, H, K, w, L)
        runs = []
        try:
            for name, policy, agg, params in variants():
                own = dict(CRITICAL if policy == "criticalkv" else DEFENSIVE)
                own["group"] = "mean" if agg == "mean" else "max"
                if policy == "layer-defensivekv":
                    own["allocation"] = "global"
                lp = dict(own, **params)
                layers = [layer_scores(A[l], nu[l], K, w, agg, lp, kernel) for l in range(N)]
                for keep_fraction in budgets:
                    f = 1.0 - (1.0 - keep_fraction)
                    keep = select(layers, K, L, w, f, lp)
                    runs.append({"name": name, "policy": policy, "aggregation": agg, "params": params,
                                 "budget": keep_fraction,
                                 "kept": [np.nonzero(keep[l, k])[0].tolist() for l in range(N) for k in range(K)]})
        except NotRobust:
            continue
        break
    else:
        sys.exit("no robust seed in 100..199")
    os.makedirs(out_dir, exist_ok=True)
    A.astype("<f4").tofile(os.path.join(out_dir, "attn.f32"))
    nu.astype("<f4").tofile(os.path.join(out_dir, "nu.f32"))
    manifest = {"generator": "tests/reference/gen_ladder_cases.py", "seed": seed,
                "shapes": {"n_layers": N, "n_heads": H, "n_kv_heads": K, "window": w, "seq_len": L,
                           "pool_kernel": kernel},
                "files": {"attn.f32": "[N][H][w][L] float32", "nu.f32": "[N][K][L] float32"},
                "runs": runs}
    with open(os.path.join(out_dir, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, separators=(",", ":"))
        fh.write("\n")
    print("seed %d: %d runs written to %s" % (seed, len(runs), out_dir))


if __name__ == "__main__":
    main()
