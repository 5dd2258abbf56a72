#!/usr/bin/env python3
"""gen_pandas_sample.py — which rows pandas picks for the DefensiveKV quick run's subsets, so the C reader's
numpy-legacy permutation can be checked against pandas itself.

DefensiveKV samples each task with pandas `sample(frac=fraction, random_state=42)` inside groupby("task"), each
group reseeded (spec policies.md §4.5). Run by hand from the project root:
    python3 tests/reference/gen_pandas_sample.py
Writes tests/data/longbench/pandas_sample.json: for a few (n, frac, seed) the picked row positions in pandas'
order, and for the real multi_news / lcc files the rows a grouped quick run (frac 0.1, seed 42) takes."""
import json
import os

import pandas as pd

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DATA = os.path.join(ROOT, "tests", "data", "longbench")


def picked(n, frac, seed):
    return [int(i) for i in pd.DataFrame({"row": range(n)}).sample(frac=frac, random_state=seed).index]


def main():
    cases = [{"n": n, "frac": f, "seed": s, "rows": picked(n, f, s)}
             for n, f, s in [(200, 0.1, 42), (500, 0.1, 42), (150, 0.1, 42), (100, 0.1, 42), (35, 0.5, 42),
                             (200, 0.25, 7), (25, 0.1, 42), (15, 0.1, 42)]]
    frames = []
    for task in ["multi_news", "lcc"]:
        df = pd.read_json(os.path.join(DATA, task + ".jsonl"), lines=True)
        df["task"] = task
        df["row"] = range(len(df))
        frames.append(df[["task", "row"]])
    both = pd.concat(frames, ignore_index=True)
    # = groupby("task").apply(lambda g: g.sample(frac=0.1, random_state=42)), written so every pandas version agrees
    quick = pd.concat([g.sample(frac=0.1, random_state=42) for _, g in both.groupby("task")])
    tasks = {t: [int(r) for r in quick[quick["task"] == t]["row"]] for t in ["multi_news", "lcc"]}
    json.dump({"pandas": pd.__version__, "cases": cases, "quick_run": tasks},
              open(os.path.join(DATA, "pandas_sample.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
