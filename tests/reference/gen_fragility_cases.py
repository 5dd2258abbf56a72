"""gen_fragility_cases.py — expected retained importance R_t (docs/fragility.md) for tests/test_fragility.c,
computed with numpy, independently of metrics/fragility.c.

A random decode of T steps on N layers, H query heads over K kv-heads: every head's softmax over its cache
(the L context entries plus the question and generated entries after them, in a shuffled order per head), and
random keep-sets of the context, one of them the full context. R_t(l, k) = sum over j in S(l, k) of
abar_t(k, j), abar the group mean of each head's attention renormalised over the context entries.

Run by hand: python3 tests/reference/gen_fragility_cases.py > tests/data/fragility/random_case.json
"""
import json

import numpy as np

rng = np.random.default_rng(20260)
N, H, K, L, T, S = 3, 6, 2, 12, 4, 4
G = H // K


def keep_set(fraction):
    counts, positions = [], []
    for _ in range(N * K):
        n = max(1, int(round(fraction * L)))
        pos = sorted(rng.choice(L, size=n, replace=False).tolist())
        counts.append(n)
        positions.extend(pos)
    return {"counts": counts, "positions": positions}


sets = [keep_set(f) for f in (0.25, 0.5, 0.75)]
sets.append({"counts": [L] * (N * K), "positions": list(range(L)) * (N * K)})

steps = []
mean_r = np.zeros((T, S))
min_r = np.zeros((T, S))
for t in range(T):
    n_keys = L + 3 + t  # context, three question tokens, then one generated entry per step
    heads = []
    r = np.zeros((N, K, S))
    for l in range(N):
        abar = np.zeros((K, L))
        for h in range(H):
            logits = rng.normal(scale=2.0, size=n_keys)
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            order = rng.permutation(n_keys)  # entry i of the cache holds position order[i]
            heads.append({"layer": l, "head": h, "positions": order.tolist(),
                          "probs": [float(np.float32(p)) for p in probs[order]]})
            p32 = probs.astype(np.float32).astype(np.float64)
            ctx = p32[:L]
            abar[h // G] += ctx / ctx.sum() / G
        for k in range(K):
            for s, ks in enumerate(sets):
                off = sum(ks["counts"][: l * K + k])
                kept = ks["positions"][off: off + ks["counts"][l * K + k]]
                r[l, k, s] = abar[k, kept].sum()
    mean_r[t] = r.mean(axis=(0, 1))
    min_r[t] = r.min(axis=(0, 1))
    steps.append(heads)

json.dump({"n_layers": N, "n_heads": H, "n_kv_heads": K, "context_len": L, "sets": sets, "steps": steps,
           "mean_r": mean_r.tolist(), "min_r": min_r.tolist()}, fp=__import__("sys").stdout)
