#!/usr/bin/env python3
"""gen_value_weighted_cases.py — retained importance R_t(l, k) on SmolLM2-135M's real attention, both
importance definitions (docs/fragility.md), for tests/test_trace.c, from the independent float64 numpy
decoder of gen_logits.py (weights as the gguf package dequantises them).

A context of L ids is prefilled, then T more ids are fed one at a time (teacher forced, so the case does not
depend on greedy ties). For each fed step t, layer l, query head h: a_t(h, j) = the step's softmax over the
keys, renormalised over the context j < L; abar_t(k, j) = mean over the G heads of kv-head k.
  nu(l, k, j) = (1/G) sum_g || W_O^(kG+g) v(l, k, j) ||_1      (o_proj columns of head h: h*d .. h*d+d-1)
  attention:      I = abar_t(k, j)
  value_weighted: I = abar_t(k, j) nu(l, k, j) / sum_j' abar_t(k, j') nu(l, k, j')
  R_t(l, k) = sum of I over the keep-set S(l, k).
Two keep-sets: the first half of the context for every head, and j with (j + l + k) % 3 == 0.

Output: tests/data/fragility/smollm2_value_weighted.json
Usage: python3 tests/reference/gen_value_weighted_cases.py   (from the project root; needs numpy and gguf)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_logits import apply_rope, rmsnorm, rope_inv_freq, load_smollm2  # noqa: E402

GGUF = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = "tests/data/fragility/smollm2_value_weighted.json"

WORDS = ("The Ġcommittee Ġmet Ġon ĠMonday Ġto Ġdiscuss Ġthe Ġnew Ġbudget Ġfor Ġthe Ġcity Ġschools . ĠThe Ġmayor "
         "Ġsaid Ġthat Ġthe Ġplan Ġwould Ġadd Ġteachers Ġand Ġrepair Ġold Ġbuildings , Ġbut Ġcritics Ġargued Ġthat "
         "Ġthe Ġcost Ġwas Ġtoo Ġhigh Ġfor Ġthe Ġpeople .").split()
STEPS = "ĠIn Ġsummary , Ġthe Ġcommittee".split()


def trace(W, cfg, ids, L):
    """Per fed step t >= L: attention probs [N][H][t+1]; values of the context [N][L][K][d]."""
    H, K, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, T = cfg["rms_norm_eps"], len(ids)
    pos = np.arange(T, dtype=np.float64)
    inv = rope_inv_freq(cfg)
    x = W["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    probs, values = [], []
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = apply_rope((h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, d), pos, inv, True)
        k = apply_rope((h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, K, d), pos, inv, True)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, K, d)
        att = np.empty((T, H, d))
        layer_probs = np.empty((H, T, T))
        for hh in range(H):
            kv = hh // (H // K)
            z = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            z = np.exp(z - z.max(axis=1, keepdims=True))
            a = z / z.sum(axis=1, keepdims=True)
            layer_probs[hh] = a
            att[:, hh, :] = a @ v[:, kv, :]
        probs.append(layer_probs)
        values.append(v[:L])
        x = x + att.reshape(T, H * d) @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    return probs, values


def main():
    if not os.path.exists(GGUF):
        sys.exit(f"{GGUF} not found (make model)")
    W, cfg, vocab = load_smollm2(GGUF)
    ctx = [vocab[w] for w in WORDS]
    steps = [vocab[w] for w in STEPS]
    ids = ctx + steps
    L, T = len(ctx), len(steps)
    N, H, K, d = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    G = H // K
    probs, values = trace(W, cfg, ids, L)
    nu = np.zeros((N, K, L))
    for l in range(N):
        wo = W[f"model.layers.{l}.self_attn.o_proj.weight"]  # [D][H*d]
        for k in range(K):
            for g in range(G):
                h = k * G + g
                nu[l, k] += np.abs(values[l][:, k, :] @ wo[:, h * d:(h + 1) * d].T).sum(axis=1) / G
    sets = [[list(range(L // 2)) for _ in range(N * K)],
            [[j for j in range(L) if (j + l + k) % 3 == 0] for l in range(N) for k in range(K)]]
    r = {"attention": np.zeros((T, len(sets), N * K)), "value_weighted": np.zeros((T, len(sets), N * K))}
    for t in range(T):
        row = L + t
        for l in range(N):
            abar = np.zeros((K, L))
            for h in range(H):
                a = probs[l][h, row, :L]
                abar[h // G] += a / a.sum() / G
            for k in range(K):
                vw = abar[k] * nu[l, k]
                vw /= vw.sum()
                for s, ks in enumerate(sets):
                    kept = ks[l * K + k]
                    r["attention"][t, s, l * K + k] = abar[k, kept].sum()
                    r["value_weighted"][t, s, l * K + k] = vw[kept].sum()
    out = {"model": GGUF, "context_ids": ctx, "step_ids": steps, "n_layers": N, "n_heads": H, "n_kv_heads": K,
           "sets": [{"counts": [len(p) for p in ks], "positions": [j for p in ks for j in p]} for ks in sets],
           "value_norm": [float(x) for x in nu.ravel()],
           "r_attention": [float(x) for x in r["attention"].ravel()],
           "r_value_weighted": [float(x) for x in r["value_weighted"].ravel()]}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(f"{OUT}: L={L}, T={T}, N={N}, K={K}; value-weighted R of set 1, step 0: "
          f"min {r['value_weighted'][0, 1].min():.4f} max {r['value_weighted'][0, 1].max():.4f}")


if __name__ == "__main__":
    main()
