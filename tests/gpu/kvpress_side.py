#!/usr/bin/env python3
"""kvpress_side.py — NVIDIA's kvpress (PyPI 0.5.5) beside kvbench on the same machine, weights and contexts.

Makes a random-weight Hugging Face checkpoint (Llama-3.1-8B's shape with --layers layers, or a tiny one for a CPU
check), saved with transformers (safetensors) together with the Llama-3.1 tokenizer of tests/data/tokenizers, and
then for each real context (RULER at 4k and LongBench from the shipped subsets, read with `kvbench data show`):
  - keep-sets: kvpress's StreamingLLMPress (n_sink 4), SnapKVPress (window 32, kernel 5), AdaKVPress and
    CriticalAdaKVPress over that SnapKV at compression ratio 0.8, against kvbench's streamingllm, snapkv, adakv and
    criticalkv at 20% (`kvbench select --keep-out`, window 32): per (layer, kv-head) the overlap |kvbench ∩ kvpress|
    / |kvpress| and whether the sets are identical. kvbench follows the paper's kvpress fork (docs/spec/policies.md),
    not kvpress 0.5.5, and two implementations in bf16 differ on near-ties: the figures are measured differences,
    not a pass/fail;
  - time per sample: kvpress prefills once per press (model.generate under the press, 32 new tokens), kvbench's
    sweep prefills once for all of them (`kvbench run` over the same four methods and the full cache).
The kvpress keep-sets are read where kvpress makes them: for a ScorerPress the top-k of its `score` (as its
`compress` takes it), for AdaKV / CriticalAdaKV the complement of `module.masked_key_indices`.

Usage (repository root; needs torch, transformers 4.57 and kvpress 0.5.5; on a lent GPU machine, carry the wheels
as tests/gpu/README.md says):
    python3 tests/gpu/kvpress_side.py --device cuda --backend cuda --layers 4 --out build/gpu/kvpress
    python3 tests/gpu/kvpress_side.py --shape tiny --device cpu --backend cpu --out build/kvpress-cpu   # a check
Writes OUT/kvpress_side.txt (the summary, also printed) and OUT/kvpress_side.json.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import torch

SHAPES = {
    # Llama-3.1-8B-Instruct's config.json, layers set by --layers
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128, rope_theta=500000.0, max_position_embeddings=131072, rms_norm_eps=1e-5,
                         rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
    # the same family at toy width, for a check on a CPU
    "tiny": dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 rope_theta=500000.0, max_position_embeddings=131072, rms_norm_eps=1e-5),
}
TOKENIZER = "tests/data/tokenizers/llama3.1"
# name|suite:task|index|data
CONTEXTS = ["vt|ruler:vt|0|", "ns1|ruler:niah_single_1|0|", "nmk1|ruler:niah_multikey_1|0|", "cwe|ruler:cwe|0|",
            "mn0|longbench:multi_news|0|datasets/assets/longbench/subsets",
            "lcc1|longbench:lcc|1|datasets/assets/longbench/subsets"]
METHODS = ["streamingllm", "snapkv", "adakv", "criticalkv"]


def make_checkpoint(shape, layers, dtype, out):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, num_hidden_layers=layers, bos_token_id=128000, eos_token_id=128009,
                      tie_word_embeddings=False, torch_dtype=str(dtype).split(".")[-1], **SHAPES[shape])
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    # transformers' init (std 0.02) gives nearly uniform attention at toy widths, where every score ties; q and k
    # rows of std 1.3/sqrt(hidden) give the 8B width's logit scale at any width
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                proj.weight.normal_(0.0, 1.3 / cfg.hidden_size ** 0.5)
    model = model.to(dtype)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), out)
    return cfg


def context_text(kvbench, model_dir, entry, out):
    name, spec, index, data = entry.split("|")
    cmd = [kvbench, "data", "show", spec, "--index", index, "--model", model_dir] + (["--data", data] if data else [])
    raw = subprocess.run(cmd, capture_output=True, check=True).stdout
    m = re.search(rb"----- context \((\d+) bytes\) -----\n", raw)
    if not m:
        sys.exit(f"kvpress_side: {' '.join(cmd)}: no context in its output")
    path = os.path.join(out, f"{name}.txt")
    with open(path, "wb") as f:
        f.write(raw[m.end():m.end() + int(m.group(1))])
    return name, path


def presses():
    from kvpress import AdaKVPress, CriticalAdaKVPress, SnapKVPress, StreamingLLMPress
    snap = lambda: SnapKVPress(compression_ratio=0.8, window_size=32, kernel_size=5)
    return {
        "streamingllm": StreamingLLMPress(compression_ratio=0.8, n_sink=4),
        "snapkv": snap(),
        "adakv": AdaKVPress(press=snap()),
        "criticalkv": CriticalAdaKVPress(press=snap()),
    }


def kvpress_keepsets(model, press, ids):
    """Per layer, a list of per-kv-head sets of kept positions, taken where the press makes its choice."""
    from kvpress import ScorerPress
    from kvpress.utils import compute_n_kept
    kept = {}
    original = press.compress

    def capture(module, hidden_states, keys, values, attentions, kwargs):
        k_len = keys.shape[2]
        if isinstance(press, ScorerPress):
            scores = press.score(module, hidden_states, keys, values, attentions, kwargs)
            idx = scores.topk(compute_n_kept(k_len, press.compression_ratio), dim=-1).indices[0]
            kept[module.layer_idx] = [set(row.tolist()) for row in idx]
            return original(module, hidden_states, keys, values, attentions, kwargs)
        result = original(module, hidden_states, keys, values, attentions, kwargs)
        _, heads, seq = module.masked_key_indices
        sets = [set(range(k_len)) for _ in range(keys.shape[1])]
        for h, s in zip(heads.tolist(), seq.tolist()):
            sets[h].discard(s)
        kept[module.layer_idx] = sets
        return result

    press.compress = capture
    try:
        with torch.no_grad(), press(model):
            model(ids)
    finally:
        del press.compress
    return [kept[l] for l in sorted(kept)]


def kvbench_keepset(kvbench, backend, model_dir, ctx, method, path):
    subprocess.run([kvbench, "select", "--backend", backend, "--model", model_dir, "--file", ctx, "--policy", method,
                    "--budget", "20%", "--window", "32", "--keep-out", path], capture_output=True, check=True)
    with open(path) as f:
        head = f.readline().split()
        n_layers, n_kv = int(head[3]), int(head[5])
        sets = [set(map(int, line.split()[3:])) for line in f]
    return [sets[l * n_kv:(l + 1) * n_kv] for l in range(n_layers)], int(head[7])


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def kvpress_seconds(model, press, ids, device, new_tokens):
    sync(device)
    t0 = time.perf_counter()
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
              pad_token_id=model.config.eos_token_id)
    with torch.no_grad():
        if press is None:
            model.generate(ids, **kw)
        else:
            with press(model):
                model.generate(ids, **kw)
    sync(device)
    return time.perf_counter() - t0


def kvbench_sweep_seconds(kvbench, backend, model_dir, out, n_tasks, new_tokens):
    """kvbench run over RULER at 4k (one sample per task), the four methods and the full cache at 20%."""
    tasks = ["vt", "niah_single_1", "niah_multikey_1", "cwe"][:n_tasks]
    cfg = {"name": "kvpress_side", "db": os.path.join(out, "sweep.db"), "max_new_tokens": new_tokens,
           "models": [{"path": model_dir, "name": "random-llama", "backend": backend,
                       "duo_attention_patterns": "none"}],
           "datasets": [{"suite": "ruler", "target_tokens": 4096, "n_samples": 1, "seed": 42, "tasks": tasks}],
           "policies": ["full"] + METHODS, "budgets": ["20%"]}
    path = os.path.join(out, "sweep.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(cfg["db"] + suffix):
            os.remove(cfg["db"] + suffix)
    t0 = time.perf_counter()
    subprocess.run([kvbench, "run", path], capture_output=True, check=True)
    return (time.perf_counter() - t0) / len(tasks), tasks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backend", default="cuda", help="kvbench's backend")
    ap.add_argument("--kvbench", default="./kvbench")
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", type=int, default=len(CONTEXTS))
    ap.add_argument("--timing-samples", type=int, default=4, help="RULER samples timed on both sides (0: none)")
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    if not 1 <= args.layers <= 32 or not 1 <= args.contexts <= len(CONTEXTS) or not 0 <= args.timing_samples <= 4:
        sys.exit("kvpress_side: --layers in [1, 32], --contexts in [1, 6], --timing-samples in [0, 4]")
    import kvpress
    import transformers
    os.makedirs(args.out, exist_ok=True)
    model_dir = os.path.join(args.out, "model")
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    make_checkpoint(args.shape, args.layers, dtype, model_dir)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    # sdpa: kvpress's AdaKV masking patches the attention functions and refuses eager
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa")
    model = model.to(args.device).eval()
    lines = [f"kvpress_side: kvpress {kvpress.__version__ if hasattr(kvpress, '__version__') else '0.5.5'}, "
             f"transformers {transformers.__version__}, torch {torch.__version__}, device {args.device}"
             + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else "")
             + f"; kvbench backend {args.backend}; random {args.shape} shape, {args.layers} layers, {dtype}"]
    result = {"shape": args.shape, "layers": args.layers, "device": args.device, "backend": args.backend,
              "keepsets": {}, "timing": {}}
    stats = {m: {"overlap": [], "identical": 0, "heads": 0, "contexts": 0} for m in METHODS}
    for entry in CONTEXTS[:args.contexts]:
        name, ctx = context_text(args.kvbench, model_dir, entry, args.out)
        with open(ctx, encoding="utf-8") as f:
            ids = tok(f.read(), add_special_tokens=False, return_tensors="pt").input_ids.to(args.device)
        for method, press in presses().items():
            theirs = kvpress_keepsets(model, press, ids)
            ours, n_tokens = kvbench_keepset(args.kvbench, args.backend, model_dir, ctx, method,
                                             os.path.join(args.out, f"{name}.{method}.keep"))
            if n_tokens != ids.shape[1]:
                sys.exit(f"kvpress_side: {ctx}: kvbench tokenized {n_tokens} tokens, transformers {ids.shape[1]}")
            s = stats[method]
            s["contexts"] += 1
            for layer_ours, layer_theirs in zip(ours, theirs):
                for a, b in zip(layer_ours, layer_theirs):
                    s["heads"] += 1
                    s["identical"] += a == b
                    s["overlap"].append(len(a & b) / len(b) if b else float(not a))
        lines.append(f"  context {name}: {ids.shape[1]} tokens")
    for method, s in stats.items():
        mean = sum(s["overlap"]) / len(s["overlap"])
        result["keepsets"][method] = {"contexts": s["contexts"], "heads": s["heads"], "overlap_mean": mean,
                                      "overlap_min": min(s["overlap"]), "identical": s["identical"] / s["heads"]}
        lines.append(f"keep-sets {method}: {s['contexts']} contexts, {s['heads']} (layer, kv-head) pairs: overlap "
                     f"mean {mean:.4f} min {min(s['overlap']):.4f}; identical heads {s['identical'] / s['heads']:.4f}")
    if args.timing_samples:
        per_sample, tasks = kvbench_sweep_seconds(args.kvbench, args.backend, model_dir, args.out,
                                                  args.timing_samples, args.new_tokens)
        theirs = 0.0
        for task in tasks:
            _, ctx = context_text(args.kvbench, model_dir, f"t_{task}|ruler:{task}|0|", args.out)
            with open(ctx, encoding="utf-8") as f:
                ids = tok(f.read(), add_special_tokens=False, return_tensors="pt").input_ids.to(args.device)
            kvpress_seconds(model, None, ids[:, :64], args.device, 2)  # warm-up
            theirs += sum(kvpress_seconds(model, p, ids, args.device, args.new_tokens)
                          for p in [None] + list(presses().values()))
        theirs /= len(tasks)
        result["timing"] = {"samples": len(tasks), "kvbench_s_per_sample": per_sample,
                            "kvpress_s_per_sample": theirs}
        lines.append(f"time per sample (RULER 4k, n = {len(tasks)}, full cache + 4 methods at 20%, "
                     f"{args.new_tokens} new tokens): kvbench sweep {per_sample:.2f} s (one prefill, its whole run "
                     f"with model load), kvpress {theirs:.2f} s (one prefill per press, model already loaded)")
    with open(os.path.join(args.out, "kvpress_side.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "kvpress_side.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
