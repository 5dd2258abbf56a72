#!/usr/bin/env python3
"""gen_duo_cases.py — DuoAttention's streaming heads for the shipped head patterns, computed the way kvpress's
DuoAttentionPress does it (numpy), so policies/duo.c can be checked against numpy itself.

The press: scores = clip(loadtxt(full_attention_heads.tsv), 0, 1); n = round(scores.size * compression_ratio)
(Python's round: half to even); the streaming heads are np.argsort(scores, axis=None)[:n]; the reported
compression is mask.mean() * (1 - (sink + recent) / L). np.argsort's default kind is not stable, so among tied
scores its choice depends on numpy's version and the CPU's SIMD sort; kvbench breaks ties by the lower
(layer, head) index, i.e. kind="stable". This file records both, so the test checks the stable set exactly and
the README can say how many heads the unstable default swaps.
Run by hand from the project root:
    python3 tests/reference/gen_duo_cases.py
Writes tests/data/duo/streaming_heads.json."""
import json
import os

import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PATTERNS = os.path.join(ROOT, "policies", "assets", "duo_attention_patterns")
OUT = os.path.join(ROOT, "tests", "data", "duo", "streaming_heads.json")


def main():
    cases = []
    for model in ["Meta-Llama-3.1-8B-Instruct", "Mistral-7B-Instruct-v0.3"]:
        folder = os.path.join(PATTERNS, model)
        scores = np.clip(np.loadtxt(os.path.join(folder, "full_attention_heads.tsv"), dtype=float, delimiter="\t"),
                         0, 1)
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        sink, recent = cfg["sink_size"], cfg["recent_size"]
        for budget in [0.2, 0.4, 0.6, 0.8]:
            ratio = 1 - budget  # what kvbench's budget_compression_ratio gives for a keep fraction
            n = round(scores.size * ratio)
            stable = sorted(int(i) for i in np.argsort(scores, axis=None, kind="stable")[:n])
            default = sorted(int(i) for i in np.argsort(scores, axis=None)[:n])
            mask = np.zeros(scores.shape, dtype=bool)
            mask[np.unravel_index(np.array(stable, dtype=int), scores.shape)] = True
            kept = {str(L): 1 - float(mask.mean()) * (1 - (sink + recent) / L) for L in [4096, 16384]}
            cases.append({"model": model, "budget": budget, "compression_ratio": ratio, "n_streaming": n,
                          "streaming_stable": stable, "streaming_numpy_default": default,
                          "heads_swapped_by_default_sort": len(set(stable) - set(default)),
                          "kept_fraction": kept})
    with open(OUT, "w") as f:
        json.dump({"numpy": np.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
