#!/usr/bin/env python3
"""gen_kvpress_cases.py — golden keep-sets of kvpress 0.5.5's presses on real model inputs, for
tests/test_kvpress.c (run by hand; the outputs are committed under tests/data/kvpress/).

For each model (the project's GGUF files, dequantised to float32 by transformers' GGUF loader, eager attention)
the first CONTEXT_TOKENS tokens of a real LongBench context (tests/data/longbench/multi_news.jsonl, sample 0)
go through one prefill per (press, compression ratio) with the real kvpress press hooked into the model
(`with press(model):`), as kvpress's pipeline does. The press's own score() is wrapped to record what it was
given (the layer's keys after RoPE, and the last query's attention for TOVA) and what it returned; the kept
positions are then ScorerPress.compress's own selection, scores.topk(compute_n_kept(L, ratio)), sorted per head.

Outputs per model, in tests/data/kvpress/<model>/:
  manifest.json          shapes, the saved layers, the presses and ratios, and per run the smallest gap between
                         the last kept and the first dropped score of any head (relative to the head's largest
                         |score|; a gap of 0 is a tie, where the keep-set is top-k's tie order, not the press's)
  keys.f32               [layers][K][L][d] keys after RoPE, as the press saw them
  attn_last.f32          [layers][H][L] the last query's attention row (TOVA's input)
  <press>_cr<r>.kept.i32 [layers][K][n_kept] kept positions, ascending per head
  <press>_cr<r>.label.u8 [layers][K][L] per position: 1 kept, 0 dropped, 2 in the head's boundary tie group
                         (a score within TIE_TOL of the last kept or the first dropped one, where the press's
                         keep-set is top-k's tie order; kvbench must keep the same number of the group)
RandomPress runs with seed 0; its scores are torch.rand's, which kvbench's random policy draws bit for bit
(scores_bitwise in the manifest), so only an exactly equal pair of draws would be a tie.
Usage: python3 tests/reference/gen_kvpress_cases.py   (from the project root; needs torch, transformers 4.57.0,
       gguf, kvpress==0.5.5; about 8 minutes per model on 2 shared cores, 2026-12-06)
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

import kvpress
from kvpress import KeyDiffPress, KnormPress, RandomPress, TOVAPress
from kvpress.utils import compute_n_kept

MODELS = [
    ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("qwen2.5", "Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf"),
]
CONTEXT_TOKENS = 128
# Scores this close (relative to the head's largest |score|) rank by summation order, not by the method: a few
# float32 ulps. Knorm has exact ties: at layer 0 a repeated token's keys are rotations of one vector.
TIE_TOL = 1e-6
RATIOS = [0.5, 0.8]
# kvbench policy name -> (press class, its arguments besides the ratio, whether kvbench computes the very same
# float32 scores: then only an exact tie is a tie)
PRESSES = {
    "knorm": (KnormPress, {}, False),
    "keydiff": (KeyDiffPress, {}, False),
    "tova": (TOVAPress, {}, False),
    "random": (RandomPress, {"seed": 0}, True),
}
OUT = "tests/data/kvpress"


def context_ids(tokenizer):
    with open("tests/data/longbench/multi_news.jsonl", encoding="utf-8") as f:
        text = json.loads(f.readline())["context"]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < CONTEXT_TOKENS:
        sys.exit(f"the LongBench sample has only {len(ids)} tokens")
    return ids[:CONTEXT_TOKENS]


def labels(scores, n_kept, tol):
    """[K][L] uint8: 1 above the boundary group, 0 below it, 2 in it (see the module's docstring)."""
    out = np.zeros(scores.shape, dtype=np.uint8)
    n_tied_heads = 0
    for k, row in enumerate(scores):
        top = np.sort(row)[::-1]
        bound, nxt = top[n_kept - 1], top[n_kept] if n_kept < len(row) else -np.inf
        slack = tol * np.abs(row).max()
        out[k] = row >= bound
        if bound - nxt <= slack:
            group = (row <= bound + slack) & (row >= nxt - slack)
            out[k][group] = 2
            n_tied_heads += 1
    return out, n_tied_heads


def run_press(model, ids, name, ratio, layers):
    """One prefill with the press hooked in; per saved layer what score() saw and the kept positions."""
    cls, args, _ = PRESSES[name]
    press = cls(compression_ratio=ratio, **args)
    seen = {}
    score = press.score

    def recording_score(module, hidden_states, keys, values, attentions, kwargs):
        s = score(module, hidden_states, keys, values, attentions, kwargs)
        if module.layer_idx in layers:
            seen[module.layer_idx] = (keys.detach().clone(), None if attentions is None else
                                      attentions[0, :, -1, :].detach().clone(), s.detach().clone())
        return s

    press.score = recording_score
    with torch.no_grad(), press(model):
        model(torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True)
    out = {}
    n_kept = compute_n_kept(len(ids), ratio)
    for layer in layers:
        keys, attn_last, scores = seen[layer]
        kept = scores.topk(n_kept, dim=-1).indices[0].sort(dim=-1).values  # ScorerPress.compress's selection
        top = scores[0].sort(dim=-1, descending=True).values
        scale = top.abs().max(dim=-1).values.clamp_min(1e-30)
        gap = ((top[:, n_kept - 1] - top[:, n_kept]) / scale).min().item() if n_kept < len(ids) else 1.0
        lab, tied = labels(scores[0].double().numpy(), n_kept, 0.0 if PRESSES[name][2] else TIE_TOL)
        assert all((lab[k][kept[k].numpy()] >= 1).all() for k in range(lab.shape[0]))  # top-k kept no 0-label
        out[layer] = (keys[0].float().numpy(), attn_last.float().numpy(), kept.numpy().astype(np.int32), gap, lab,
                      tied)
    return out


def main():
    torch.manual_seed(0)
    for short, gguf in MODELS:
        if not os.path.exists(os.path.join("models", gguf)):
            print(f"skipped {short}: models/{gguf} is absent")
            continue
        model = AutoModelForCausalLM.from_pretrained("models", gguf_file=gguf, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained("models", gguf_file=gguf)
        cfg = model.config
        N = cfg.num_hidden_layers
        layers = [0, N // 2, N - 1]
        ids = context_ids(tokenizer)
        out_dir = os.path.join(OUT, short)
        os.makedirs(out_dir, exist_ok=True)
        runs, inputs = [], None
        for name in PRESSES:
            for ratio in RATIOS:
                got = run_press(model, ids, name, ratio, layers)
                if inputs is None:
                    inputs = got
                for layer in layers:  # every press saw the same inputs
                    assert np.array_equal(got[layer][0], inputs[layer][0])
                    assert np.array_equal(got[layer][1], inputs[layer][1])
                stem = f"{name}_cr{str(ratio).replace('.', 'p')}"
                np.concatenate([got[l][2].ravel() for l in layers]).astype("<i4").tofile(
                    os.path.join(out_dir, stem + ".kept.i32"))
                np.concatenate([got[l][4].ravel() for l in layers]).tofile(os.path.join(out_dir, stem + ".label.u8"))
                cls, args, bitwise = PRESSES[name]
                runs.append({"press": name, "press_class": cls.__name__, "press_args": args,
                             "compression_ratio": ratio, "n_kept": compute_n_kept(len(ids), ratio),
                             "file": stem + ".kept.i32", "labels": stem + ".label.u8",
                             "min_boundary_gap": min(got[l][3] for l in layers),
                             "heads_with_boundary_ties": sum(got[l][5] for l in layers),
                             "scores_bitwise": bitwise})
        np.concatenate([inputs[l][0].ravel() for l in layers]).astype("<f4").tofile(os.path.join(out_dir, "keys.f32"))
        np.concatenate([inputs[l][1].ravel() for l in layers]).astype("<f4").tofile(
            os.path.join(out_dir, "attn_last.f32"))
        manifest = {
            "format_version": 1,
            "reference": f"kvpress {kvpress.__version__ if hasattr(kvpress, '__version__') else '0.5.5'} (PyPI), "
                         f"torch {torch.__version__}, float32, eager attention",
            "model": gguf,
            "context": "tests/data/longbench/multi_news.jsonl sample 0, first tokens, no special tokens",
            "token_ids": ids,
            "shapes": {"n_layers": N, "n_heads": cfg.num_attention_heads, "n_kv_heads": cfg.num_key_value_heads,
                       "head_dim": inputs[layers[0]][0].shape[-1], "seq_len": len(ids)},
            "layers": layers,
            "runs": runs,
        }
        with open(os.path.join(out_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        print(f"{short}: {len(runs)} runs, layers {layers}; heads with a boundary tie group per run: "
              + ", ".join(f"{r['file']} {r['heads_with_boundary_ties']}" for r in runs))


if __name__ == "__main__":
    main()
