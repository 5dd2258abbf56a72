#!/usr/bin/env python3
"""gen_kvpress_cases.py — golden keep-sets of kvpress 0.5.5's presses on real model inputs, for
tests/test_kvpress.c (run by hand; the outputs are committed under tests/data/kvpress/).

For each model (the project's GGUF files, dequantised to float32 by transformers' GGUF loader, eager attention)
the first CONTEXT_TOKENS tokens of a real LongBench context (tests/data/longbench/multi_news.jsonl, sample 0)
go through one prefill per (press, compression ratio) with the real kvpress press hooked into the model
(`with press(model):`), as kvpress's pipeline does. The press's own score() is wrapped to record what it was
given (the layer's keys after RoPE, the last WINDOW queries' attention, every query's attention summed per key as
ObservedAttention reads it, the value norms CriticalKV weights by, and ExpectedAttention's pre-RoPE query mean and
covariance over positions n_sink..L-1, the arguments of its apply_avg_rope) and what it returned; the kept positions
are then the press's own selection, scores.topk(n_kept), sorted per head, with ScorerPress.compress's
n_kept = compute_n_kept(L, ratio), or PyramidKVPress's per-layer get_layer_budget(layer, L), which depends on the
layer index and the number of layers.
The SnapKV-based presses (PyramidKV, CriticalKV and ChunkKV over SnapKV) run with window_size WINDOW and
kernel_size 5. ChunkKV's kept positions are its chunks' (chunk_selection), the same in every head; the generator
checks them against the keys left in the press's compressed cache.

Outputs per model, in tests/data/kvpress/<model>/:
  manifest.json          shapes (with the model's rope_theta), the saved layers, the presses and ratios, per run
                         n_kept of each saved layer and the smallest gap between the last kept and the first
                         dropped score of any head (relative to the head's largest finite |score|, the entries
                         CriticalKV's stage 1 sets to float max left out; a gap of 0 is a tie, where the keep-set
                         is top-k's tie order, not the press's; for LagKV also min_rank_gap, the smallest gap of
                         two neighbours in a partition's ranking, relative (lag_rank_gap))
  keys.f32               [layers][K][L][d] keys after RoPE, as the press saw them
  attn_window.f32        [layers][H][WINDOW][L] the last WINDOW queries' attention rows (eager attention's
                         weights, as SnapKV and TOVA read them: TOVA reads the last row)
  attn_sums.f32          [layers][H][L] eager attention's weights summed over all L queries (attentions.sum(2),
                         ObservedAttentionPress's sums before it divides by L - j)
  values.f32             [layers][K][L][d] values (LagKV's input besides the keys)
  query_mean.f32         [layers][H][d] ExpectedAttentionPress's query mean before its averaged RoPE: the pre-RoPE
                         queries (get_prerope_query_states) of positions n_sink..L-1 averaged
  query_cov.f32          [layers][H][d][d] their covariance, centred, divided by L - n_sink (the press's einsum)
  value_norm.f32         [layers][K][L] CriticalKVPress.vwl1norm: per kv-head the mean over its query heads of
                         ||v W_o^h||_1
  chunkkv.attn_window.f32  [layers][H][WINDOW][L] the window attention ChunkKV's SnapKV computed under sdpa
                         (run_press), the window's own columns 0
  <press>_cr<r>.kept.i32 [layers][K][n_kept] kept positions, ascending per head
  <press>_cr<r>.label.u8 [layers][K][L] per position: 1 kept, 0 dropped, 2 in the head's boundary tie group
                         (a score within TIE_TOL of the last kept or the first dropped one, where the press's
                         keep-set is top-k's tie order; kvbench must keep the same number of the group)
RandomPress runs with seed 0; its scores are torch.rand's, which kvbench's random policy draws bit for bit
(scores_bitwise in the manifest), so only an exactly equal pair of draws would be a tie.
Usage: python3 tests/reference/gen_kvpress_cases.py   (from the project root; needs torch, transformers 4.57.0,
       gguf, kvpress==0.5.5; about 3 minutes for both models on 2 shared cores, 2026-12-06; with observed-attention
       12 minutes wall, 4.3 CPU-minutes, on 2 cores shared with a study and another build, 2026-12-06; with
       expected-attention 17 and 19 minutes wall, 5.4 and 6.1 CPU-minutes in two runs, 2 cores under a load of
       about 11-13, 2026-12-06)
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

import kvpress
from kvpress import (ChunkKVPress, CriticalKVPress, ExpectedAttentionPress, KeyDiffPress, KnormPress, LagKVPress,
                     ObservedAttentionPress, PyramidKVPress, RandomPress, SnapKVPress, TOVAPress)
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
# The SnapKV-based presses' window: at 128 tokens PyramidKV's pyramid needs (L*(1-ratio))/beta >= window or the
# clamp at L - window (ratio 0.5 here); ratio 0.8 takes its SnapKV fallback, round(L*(1-ratio)). Both are tested.
WINDOW = 8
# LagKV's partition: 16 (kvpress's default is 128, which needs 260 tokens before it scores anything), so 128
# tokens are 4 sinks, 6 scored partitions and a tail of 28 (the last partition, the sixth's reference, and 12).
LAG = 16
# ChunkKV's chunk (kvpress's default): 128 tokens are 6 whole chunks and a last one of 8.
CHUNK = 20
SNAP = {"window_size": WINDOW, "kernel_size": 5}
# kvbench policy name -> (a function of the ratio making the press, its arguments for the manifest, whether
# kvbench computes the very same float32 scores: then only an exact tie is a tie)
PRESSES = {
    "knorm": (lambda r: KnormPress(compression_ratio=r), {}, False),
    "keydiff": (lambda r: KeyDiffPress(compression_ratio=r), {}, False),
    "tova": (lambda r: TOVAPress(compression_ratio=r), {}, False),
    "random": (lambda r: RandomPress(compression_ratio=r, seed=0), {"seed": 0}, True),
    "pyramidkv": (lambda r: PyramidKVPress(compression_ratio=r, **SNAP), dict(SNAP, beta=20), False),
    "critical-snapkv": (lambda r: CriticalKVPress(SnapKVPress(compression_ratio=r, **SNAP)),
                          {"press": dict(SNAP, cls="SnapKVPress"), "epsilon": 1e-4, "first_stage_ratio": 0.5},
                          False),
    "lagkv": (lambda r: LagKVPress(compression_ratio=r, n_sink=4, lag_size=LAG), {"n_sink": 4, "lag_size": LAG},
              False),
    "chunkkv": (lambda r: ChunkKVPress(SnapKVPress(compression_ratio=r, **SNAP), chunk_length=CHUNK),
                {"press": dict(SNAP, cls="SnapKVPress"), "chunk_length": CHUNK}, False),
    "observed-attention": (lambda r: ObservedAttentionPress(compression_ratio=r), {}, False),
    "expected-attention": (lambda r: ExpectedAttentionPress(compression_ratio=r),
                           {"n_future_positions": 512, "n_sink": 4, "use_covariance": True, "use_vnorm": True,
                            "epsilon": 0.0}, False),
}
FLOAT_MAX = float(np.finfo(np.float32).max)
OUT = "tests/data/kvpress"


def context_ids(tokenizer):
    with open("tests/data/longbench/multi_news.jsonl", encoding="utf-8") as f:
        text = json.loads(f.readline())["context"]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < CONTEXT_TOKENS:
        sys.exit(f"the LongBench sample has only {len(ids)} tokens")
    return ids[:CONTEXT_TOKENS]


def scale_of(row):
    """A head's largest |score|, leaving out CriticalKV's stage-1 entries (float max)."""
    finite = np.abs(row[row < FLOAT_MAX])
    return max(finite.max() if finite.size else 0.0, 1e-30)


def labels(scores, n_kept, tol):
    """[K][L] uint8: 1 above the boundary group, 0 below it, 2 in it (see the module's docstring)."""
    out = np.zeros(scores.shape, dtype=np.uint8)
    n_tied_heads = 0
    for k, row in enumerate(scores):
        top = np.sort(row)[::-1]
        bound, nxt = top[n_kept - 1], top[n_kept] if n_kept < len(row) else -np.inf
        slack = tol * scale_of(row)
        out[k] = row >= bound
        if bound - nxt <= slack:
            group = (row <= bound + slack) & (row >= nxt - slack)
            out[k][group] = 2
            n_tied_heads += 1
    return out, n_tied_heads


def chunk_selection(scores, ratio):
    """ChunkKVPress.compress's chunks, in its float32 arithmetic: [1][K][L] token scores summed over the kv-heads,
    averaged per chunk (the last, shorter one too), the top max(1, int(n_chunks * (1 - ratio))) chunks kept in
    every head. Returns the chunk scores and the kept chunk indices (L is a multiple of no chunk here)."""
    L = scores.shape[-1]
    n_whole, rest = L // CHUNK, L % CHUNK
    main = scores[..., :n_whole * CHUNK].sum(dim=1).view(-1, n_whole, CHUNK).mean(dim=-1)
    chunk_scores = torch.cat([main, scores[..., -rest:].sum(dim=1).mean(dim=-1, keepdim=True)], dim=-1)
    n_chunks = max(1, int((n_whole + 1) * (1 - ratio)))
    return chunk_scores[0], chunk_scores.topk(n_chunks, dim=-1).indices[0]


def chunk_labels(chunk_scores, kept_chunks, L, K):
    """[K][L] labels of ChunkKV (every head alike): a chunk's positions are 1 or 0 by its chunk, 2 inside the
    boundary tie group of the chunk scores (TIE_TOL of their largest |score|)."""
    c = chunk_scores.double().numpy()
    n = len(kept_chunks)
    top = np.sort(c)[::-1]
    bound, nxt = top[n - 1], top[n] if n < len(c) else -np.inf
    slack = TIE_TOL * np.abs(c).max()
    chunk_label = (c >= bound).astype(np.uint8)
    tied = bound - nxt <= slack
    if tied:
        chunk_label[(c <= bound + slack) & (c >= nxt - slack)] = 2
    lab = np.concatenate([np.repeat(chunk_label[:-1], CHUNK), np.repeat(chunk_label[-1:], L - (len(c) - 1) * CHUNK)])
    return np.tile(lab, (K, 1)), (bound - nxt) / max(np.abs(c).max(), 1e-30), K if tied else 0


def lag_rank_gap(press, keys, values):
    """LagKV ranks its partition scores: the smallest gap between two neighbours in one partition's order, relative
    to the larger (a gap of float32 rounding would make the rank the summation order's, not the method's)."""
    n_sink, lag = press.n_sink, press.lag_size
    L, d = keys.shape[2], keys.shape[3]
    end = n_sink + ((L - n_sink) // lag) * lag
    part = lambda x: x[:, :, n_sink:end].reshape(1, x.shape[1], -1, lag, d)
    score = ((press._get_states_score(part(keys)) + press._get_states_score(part(values))) / 2).double()
    ordered = score.sort(dim=-1).values
    return ((ordered[..., 1:] - ordered[..., :-1]) / ordered[..., 1:].abs()).min().item()


def run_press(model, ids, name, ratio, layers):
    """One prefill with the press hooked in; per saved layer what score() saw and the kept positions.
    ChunkKVPress refuses eager attention's weights, so it runs with sdpa: its SnapKVPress then computes the window
    attention itself (compute_window_attention, the prefix columns; recorded with the window's columns, which
    SnapKV does not read, at 0), and the hidden states of later layers differ from the eager run's by float32
    rounding, so its inputs are its own."""
    make, _, _ = PRESSES[name]
    press = make(ratio)
    chunked = isinstance(press, ChunkKVPress)
    scorer = press.press if chunked else press
    seen, computed, query_stats = {}, {}, {}
    score = scorer.score
    if isinstance(scorer, ExpectedAttentionPress):  # the query statistics as the press computed them, unrotated
        avg_rope = scorer.apply_avg_rope

        def recording_avg_rope(module, mu, cov, q_len):
            query_stats[module.layer_idx] = (mu[0].detach().clone(), cov[0].detach().clone())
            return avg_rope(module, mu, cov, q_len)

        scorer.apply_avg_rope = recording_avg_rope
    window_attention = SnapKVPress.compute_window_attention

    def recording_window_attention(module, hidden_states, keys, window_size, position_embeddings):
        a = window_attention(module, hidden_states, keys, window_size, position_embeddings)
        computed[module.layer_idx] = torch.nn.functional.pad(a, (0, window_size))[0].detach().clone()
        return a

    def recording_score(module, hidden_states, keys, values, attentions, kwargs):
        s = score(module, hidden_states, keys, values, attentions, kwargs)
        if module.layer_idx in layers:
            n_kept = (press.get_layer_budget(module, keys.shape[2]) if isinstance(press, PyramidKVPress)
                      else compute_n_kept(keys.shape[2], ratio))
            attn = computed[module.layer_idx] if chunked else attentions[0, :, -WINDOW:, :].detach().clone()
            attn_sums = None if chunked else attentions[0].sum(1).detach().clone()  # attentions.sum(2), as kvpress
            seen[module.layer_idx] = (keys.detach().clone(), attn,
                                      CriticalKVPress.vwl1norm(values, module)[0].detach().clone(),
                                      s.detach().clone(), n_kept, values.detach().clone(), attn_sums,
                                      query_stats.get(module.layer_idx))
        return s

    scorer.score = recording_score
    SnapKVPress.compute_window_attention = staticmethod(recording_window_attention)
    model.set_attn_implementation("sdpa" if chunked else "eager")
    cache = DynamicCache()
    try:
        with torch.no_grad(), press(model):
            model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    finally:
        SnapKVPress.compute_window_attention = staticmethod(window_attention)
        model.set_attn_implementation("eager")
    out = {}
    for layer in layers:
        keys, attn_window, value_norm, scores, n_kept, values, attn_sums, stats = seen[layer]
        s = scores[0].double().numpy()
        if chunked:
            chunk_scores, kept_chunks = chunk_selection(scores, ratio)
            lab, gap, tied = chunk_labels(chunk_scores, kept_chunks, len(ids), s.shape[0])
            kept = torch.tensor(np.sort(np.concatenate([np.arange(c * CHUNK, min((c + 1) * CHUNK, len(ids)))
                                                        for c in kept_chunks.tolist()])))
            kept = kept.unsqueeze(0).expand(s.shape[0], -1)
            n_kept = kept.shape[-1]
            # the press's own compressed cache holds exactly these keys: the selection above is kvpress's
            assert torch.equal(cache.layers[layer].keys[0], keys[0][:, kept[0], :])
        else:
            kept = scores.topk(n_kept, dim=-1).indices[0].sort(dim=-1).values  # the press's compress selection
            top = -np.sort(-s, axis=-1)
            gap = (min((top[k, n_kept - 1] - top[k, n_kept]) / scale_of(s[k]) for k in range(len(s)))
                   if n_kept < len(ids) else 1.0)
            lab, tied = labels(s, n_kept, 0.0 if PRESSES[name][2] else TIE_TOL)
        assert all((lab[k][kept[k].numpy()] >= 1).all() for k in range(lab.shape[0]))  # top-k kept no 0-label
        rank_gap = lag_rank_gap(press, keys, values) if isinstance(press, LagKVPress) else None
        out[layer] = (keys[0].float().numpy(), attn_window.float().numpy(), kept.numpy().astype(np.int32), gap, lab,
                      tied, value_norm.float().numpy(), n_kept, values[0].float().numpy(), rank_gap,
                      None if attn_sums is None else attn_sums.float().numpy(),
                      None if stats is None else tuple(x.float().numpy() for x in stats))
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
        if getattr(cfg, "head_dim", None) is None:
            # CriticalKVPress.vwl1norm reads config.head_dim, which Qwen2Config lacks (kvpress 0.5.5 fails there
            # with an AttributeError); the model itself uses hidden_size // num_attention_heads, set here.
            cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
        N = cfg.num_hidden_layers
        # ExpectedAttention's averaged rotation: kvbench takes the model's plain RoPE frequencies from rope_theta
        assert getattr(cfg, "rope_scaling", None) is None
        layers = [0, N // 2, N - 1]
        ids = context_ids(tokenizer)
        out_dir = os.path.join(OUT, short)
        os.makedirs(out_dir, exist_ok=True)
        runs, inputs, query_stats = [], None, None
        for name in PRESSES:
            for ratio in RATIOS:
                got = run_press(model, ids, name, ratio, layers)
                stem = f"{name}_cr{str(ratio).replace('.', 'p')}"
                own_inputs = name == "chunkkv"  # the sdpa run: its window attention is its own (run_press)
                if inputs is None:
                    inputs = got
                for layer in layers:  # every eager press saw the same inputs
                    for i in (0, 1, 6, 8, 10):
                        assert own_inputs or np.array_equal(got[layer][i], inputs[layer][i])
                if name == "expected-attention":  # the same at every ratio (the statistics precede the selection)
                    if query_stats is None:
                        query_stats = [got[l][11] for l in layers]
                    assert all(np.array_equal(a[i], b[i]) for a, b in zip(query_stats, (got[l][11] for l in layers))
                               for i in (0, 1))
                if own_inputs:  # the same at every ratio: the cache is pressed after each layer's attention
                    np.concatenate([got[l][1].ravel() for l in layers]).astype("<f4").tofile(
                        os.path.join(out_dir, name + ".attn_window.f32"))
                np.concatenate([got[l][2].ravel() for l in layers]).astype("<i4").tofile(
                    os.path.join(out_dir, stem + ".kept.i32"))
                np.concatenate([got[l][4].ravel() for l in layers]).tofile(os.path.join(out_dir, stem + ".label.u8"))
                _, args, bitwise = PRESSES[name]
                runs.append({"press": name, "press_class": type(PRESSES[name][0](ratio)).__name__,
                             "press_args": args, "compression_ratio": ratio,
                             "n_kept": [got[l][7] for l in layers],
                             "file": stem + ".kept.i32", "labels": stem + ".label.u8",
                             "min_boundary_gap": min(got[l][3] for l in layers),
                             "heads_with_boundary_ties": sum(got[l][5] for l in layers),
                             "scores_bitwise": bitwise,
                             **({"min_rank_gap": min(got[l][9] for l in layers)} if name == "lagkv" else {}),
                             **({"attn_window": name + ".attn_window.f32"} if own_inputs else {})})
        np.concatenate([inputs[l][0].ravel() for l in layers]).astype("<f4").tofile(os.path.join(out_dir, "keys.f32"))
        np.concatenate([inputs[l][1].ravel() for l in layers]).astype("<f4").tofile(
            os.path.join(out_dir, "attn_window.f32"))
        np.concatenate([inputs[l][6].ravel() for l in layers]).astype("<f4").tofile(
            os.path.join(out_dir, "value_norm.f32"))
        np.concatenate([inputs[l][8].ravel() for l in layers]).astype("<f4").tofile(os.path.join(out_dir, "values.f32"))
        np.concatenate([inputs[l][10].ravel() for l in layers]).astype("<f4").tofile(
            os.path.join(out_dir, "attn_sums.f32"))
        np.concatenate([s[0].ravel() for s in query_stats]).astype("<f4").tofile(os.path.join(out_dir, "query_mean.f32"))
        np.concatenate([s[1].ravel() for s in query_stats]).astype("<f4").tofile(os.path.join(out_dir, "query_cov.f32"))
        manifest = {
            "format_version": 2,
            "reference": f"kvpress {kvpress.__version__ if hasattr(kvpress, '__version__') else '0.5.5'} (PyPI), "
                         f"torch {torch.__version__}, float32, eager attention",
            "model": gguf,
            "context": "tests/data/longbench/multi_news.jsonl sample 0, first tokens, no special tokens",
            "token_ids": ids,
            "shapes": {"n_layers": N, "n_heads": cfg.num_attention_heads, "n_kv_heads": cfg.num_key_value_heads,
                       "head_dim": inputs[layers[0]][0].shape[-1], "seq_len": len(ids), "window": WINDOW,
                       "rope_theta": cfg.rope_theta},
            "layers": layers,
            "runs": runs,
        }
        with open(os.path.join(out_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        print(f"{short}: {len(runs)} runs, layers {layers}; heads with a boundary tie group per run: "
              + ", ".join(f"{r['file']} {r['heads_with_boundary_ties']}" for r in runs))


if __name__ == "__main__":
    main()
