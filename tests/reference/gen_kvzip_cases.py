#!/usr/bin/env python3
"""gen_kvzip_cases.py — golden keep-sets of kvpress 0.5.5's KVzipPress on real model inputs, for tests/test_kvpress.c
(run by hand; the outputs are committed under tests/data/kvzip/). A sibling of gen_kvpress_cases.py: KVzip scores in
a second pass after the prefill and selects over every layer at once, so its inputs and outputs have their own shape.

For each model (the project's GGUF files, dequantised to float32 by transformers' GGUF loader, sdpa attention: the
press's compress_post refuses eager) a real LongBench context (tests/data/longbench/multi_news.jsonl, sample 0, its
first CONTEXT_CHARS characters) is rendered with the tokenizer's chat template and cut as kvpress's pipeline cuts it
(the user message context + "\\n" + "#" * len(context), split at that separator), tokenized without special tokens,
and prefilled with the real press hooked in (`with press(model):`), as the pipeline does. KVzipPress runs with its
defaults but chunk_size CHUNK (2048 needs a context of more than 2048 tokens for a second chunk, whose inputs would
be megabytes per layer here): the context after the template's prefix is reconstructed in 2 chunks.
The generator records, for the saved layers, what the press's _compute_cross_attention computed from (the repeat
tokens' queries after RoPE, computed as the press computes them, and the cache's keys: the context's and the repeat
tokens'), every layer's scores as compress_post received them (before the sinks are raised), each chunk's repeat
input ids, and the entries the press masked (module.masked_key_indices) in every layer.

Outputs per model, in tests/data/kvzip/<model>/:
  manifest.json        shapes, the chat format's kvbench name, the context text and its token ids, prefix_length,
                       the chunks (context positions and repeat input ids), the saved layers, the runs (compression
                       ratio, entries pruned, the boundary gap, the entries in the boundary tie group)
  keys.f32             [layers][K][L][d] the context's keys after RoPE (the same in every chunk's pass)
  chunk<c>.queries.f32 [layers][H][q][d] chunk c's repeat queries after RoPE
  chunk<c>.keys.f32    [layers][K][q][d] chunk c's repeat keys after RoPE (the cache's last q)
  scores.f32           [N][K][L] every layer's scores before the sinks are raised (the same at every ratio)
  kvzip_cr<r>.label.u8 [N][K][L] per position: 1 kept, 0 masked, 2 in the boundary tie group (a score within
                       TIE_TOL of the largest score of the last pruned or the first kept one over every layer, where
                       the press's choice is top-k's tie order; kvbench must keep the same number of the group)
Usage: python3 tests/reference/gen_kvzip_cases.py   (from the project root; needs torch, transformers 4.57.0, gguf,
       kvpress==0.5.5; 3.0 minutes wall, 1.8 CPU-minutes for both models on 2 shared cores, 2026-12-06)
"""
import json
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import rotate_half

import kvpress.presses.kvzip_press as kvzip_module
from kvpress import KVzipPress
from kvpress.utils import get_prerope_query_states

MODELS = [
    ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"),
    ("qwen2.5", "Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf", "qwen2"),
]
CONTEXT_CHARS = 400
CHUNK = 64
RATIOS = [0.5, 0.8]
TIE_TOL = 1e-6
OUT = "tests/data/kvzip"


def context_text():
    with open("tests/data/longbench/multi_news.jsonl", encoding="utf-8") as f:
        return json.loads(f.readline())["context"][:CONTEXT_CHARS]


def pipeline_ids(tokenizer, context):
    """kvpress's KVPressTextGenerationPipeline.preprocess: the context part of the chat rendering."""
    separator = "\n" + "#" * len(context)
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": context + separator}],
                                             add_generation_prompt=True, tokenize=False, enable_thinking=False)
    context_part, _ = rendered.split(separator)
    return tokenizer.encode(context_part, add_special_tokens=False)


def run_press(model, tokenizer, ids, ratio, layers):
    press = KVzipPress(compression_ratio=ratio, chunk_size=CHUNK)
    seen = {"queries": {}, "keys": {}, "pairs": None, "scores": None}
    cross = press._compute_cross_attention

    def recording_cross(module, hidden_states, keys, kwargs):
        if module.layer_idx in layers:  # the press's own computation of its queries, recorded
            q_len = hidden_states.shape[1]
            queries = get_prerope_query_states(module, hidden_states)
            cos, sin = kwargs["position_embeddings"]
            queries = (queries * cos.unsqueeze(1)) + (rotate_half(queries) * sin.unsqueeze(1))
            chunk = len(seen["queries"].setdefault(module.layer_idx, []))
            seen["queries"][module.layer_idx].append(queries[0].detach().clone())
            seen["keys"].setdefault(module.layer_idx, []).append(keys[0, :, -q_len:].detach().clone())
            if chunk == 0:
                seen["keys"].setdefault(("context", module.layer_idx), keys[0, :, :len(ids)].detach().clone())
            else:  # the context's part of the cache is the same in every chunk's pass
                assert torch.equal(seen["keys"][("context", module.layer_idx)], keys[0, :, :len(ids)])
        return cross(module, hidden_states, keys, kwargs)

    prepare = press.prepare

    def recording_prepare(model_, tokenizer_, **kw):
        pairs = prepare(model_, tokenizer_, **kw)
        seen["pairs"] = pairs
        return pairs

    compress_post = press.compress_post

    def recording_compress_post(model_):
        seen["scores"] = press.score_val[:, 0].detach().clone()
        seen["prefix_length"] = press.prefix_length
        return compress_post(model_)

    press._compute_cross_attention = recording_cross
    press.prepare = recording_prepare
    press.compress_post = recording_compress_post
    cache = DynamicCache()
    with torch.no_grad(), press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    N, K, L = seen["scores"].shape
    masked = np.zeros((N, K, L), dtype=bool)
    for layer in model.model.layers:
        _, heads, positions = layer.self_attn.masked_key_indices
        masked[layer.self_attn.layer_idx, heads.numpy(), positions.numpy()] = True
        del layer.self_attn.masked_key_indices
    return seen, masked


def labels(scores, masked, n_sink):
    """[N][K][L] uint8 from the press's masked entries, the boundary tie group at 2 (see the docstring)."""
    s = scores.double().numpy().copy()
    s[..., :n_sink] = s.max() + 1.0
    flat = np.sort(s.ravel())
    n_pruned = int(masked.sum())
    last_pruned, first_kept = flat[n_pruned - 1], flat[n_pruned]
    slack = TIE_TOL * np.abs(scores.double().numpy()).max()
    out = (~masked).astype(np.uint8)
    gap = (first_kept - last_pruned) / np.abs(scores.double().numpy()).max()
    in_group = 0
    if first_kept - last_pruned <= slack:
        group = (s >= last_pruned - slack) & (s <= first_kept + slack)
        out[group] = 2
        in_group = int(group.sum())
    assert (out[masked] != 1).all() and (out[~masked] != 0).all()
    return out, gap, in_group


def main():
    torch.manual_seed(0)
    for short, gguf, chat in MODELS:
        if not os.path.exists(os.path.join("models", gguf)):
            print(f"skipped {short}: models/{gguf} is absent")
            continue
        model = AutoModelForCausalLM.from_pretrained("models", gguf_file=gguf, dtype=torch.float32,
                                                     attn_implementation="sdpa").eval()
        tokenizer = AutoTokenizer.from_pretrained("models", gguf_file=gguf)
        # the press loads its tokenizer by the model's name_or_path, which is the GGUF's folder: hand it this one
        kvzip_module.AutoTokenizer = type("GgufTokenizer", (), {"from_pretrained": staticmethod(lambda *a, **k: tokenizer)})
        cfg = model.config
        N = cfg.num_hidden_layers
        layers = [0, N // 2, N - 1]
        text = context_text()
        ids = pipeline_ids(tokenizer, text)
        out_dir = os.path.join(OUT, short)
        os.makedirs(out_dir, exist_ok=True)
        runs, first = [], None
        for ratio in RATIOS:
            seen, masked = run_press(model, tokenizer, ids, ratio, layers)
            if first is None:
                first = seen
            else:  # the scores and inputs precede the selection
                assert torch.equal(first["scores"], seen["scores"])
            lab, gap, in_group = labels(seen["scores"], masked, 4)
            stem = f"kvzip_cr{str(ratio).replace('.', 'p')}"
            lab.tofile(os.path.join(out_dir, stem + ".label.u8"))
            runs.append({"press": "kvzip", "press_class": "KVzipPress", "compression_ratio": ratio,
                         "press_args": {"layerwise": False, "n_sink": 4, "kvzip_plus_normalization": False,
                                        "chunk_size": CHUNK},
                         "n_pruned": int(masked.sum()), "labels": stem + ".label.u8",
                         "boundary_gap": gap, "entries_in_boundary_tie_group": in_group})
        np.concatenate([first["keys"][("context", l)].float().numpy().ravel() for l in layers]).astype(
            "<f4").tofile(os.path.join(out_dir, "keys.f32"))
        chunks = []
        start = first["prefix_length"]
        for c, (chunk_ids, repeat_ids) in enumerate(first["pairs"]):
            np.concatenate([first["queries"][l][c].float().numpy().ravel() for l in layers]).astype("<f4").tofile(
                os.path.join(out_dir, f"chunk{c}.queries.f32"))
            np.concatenate([first["keys"][l][c].float().numpy().ravel() for l in layers]).astype("<f4").tofile(
                os.path.join(out_dir, f"chunk{c}.keys.f32"))
            chunks.append({"start": start, "end": start + chunk_ids.shape[1], "input_ids": repeat_ids[0].tolist()})
            start += chunk_ids.shape[1]
        first["scores"].float().numpy().astype("<f4").tofile(os.path.join(out_dir, "scores.f32"))
        manifest = {
            "format_version": 1,
            "reference": f"kvpress 0.5.5 (PyPI) KVzipPress, torch {torch.__version__}, float32, sdpa attention",
            "model": gguf,
            "chat_format": chat,
            "context": f"tests/data/longbench/multi_news.jsonl sample 0, first {CONTEXT_CHARS} characters, "
                       "rendered and cut as kvpress's pipeline does",
            "context_text": text,
            "token_ids": ids,
            "prefix_length": first["prefix_length"],
            "chunk_size": CHUNK,
            "chunks": chunks,
            "shapes": {"n_layers": N, "n_heads": cfg.num_attention_heads, "n_kv_heads": cfg.num_key_value_heads,
                       "head_dim": cfg.hidden_size // cfg.num_attention_heads, "seq_len": len(ids)},
            "layers": layers,
            "runs": runs,
        }
        with open(os.path.join(out_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        print(f"{short}: {len(ids)} tokens, prefix {first['prefix_length']}, chunks "
              + ", ".join(f"[{c['start']}, {c['end']}) input {len(c['input_ids'])}" for c in chunks) + "; "
              + ", ".join(f"ratio {r['compression_ratio']}: gap {r['boundary_gap']:.2e}, "
                          f"{r['entries_in_boundary_tie_group']} tied" for r in runs))


if __name__ == "__main__":
    main()
