#!/usr/bin/env python3
"""gen_logits.py — reference logits and greedy tokens for tests/test_forward.c, from an independent numpy
float64 implementation of the Llama / Qwen2 decoder (run by hand; the outputs are committed).

(a) Writes two tiny synthetic checkpoints in Hugging Face format (config.json + model.safetensors, f32):
    tests/data/models/tiny-llama-hf  (Llama, llama3 RoPE scaling with every branch of the smoothing taken,
                                      weights on GGUF Q4_1 / Q8_0 block grids, see snap_blocks)
    tests/data/models/tiny-qwen2-hf  (Qwen2: q/k/v biases, tied embeddings)
    and, for a few id sequences, the last-position logits and 40 greedy tokens, with rotate-half RoPE.
(b) For models/SmolLM2-135M-Instruct.Q4_1.gguf (skipped with a message when absent): the tensors as the gguf
    package dequantises them, Q/K rows left in GGUF order and RoPE applied to interleaved pairs (so the C
    loader's un-permutation is checked too), logits for 3 chat prompts given as ids and 40 greedy tokens each.

Outputs: tests/data/reference/NAME.json (ids, greedy tokens, shapes, the min top-1/top-2 logit gap along the
greedy path) and NAME.logits.f32 (little-endian f32 [cases][V]).
Usage: python3 tests/reference/gen_logits.py   (from the project root; needs numpy, safetensors, gguf)
"""
import json
import os
import sys

import numpy as np

OUT_MODELS = "tests/data/models"
OUT_REF = "tests/data/reference"
N_GREEDY = 40


# ---------------------------------------------------------------- the reference forward (float64)

def rope_inv_freq(cfg):
    d = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    sc = cfg.get("rope_scaling")
    if sc and sc.get("rope_type") == "llama3":
        factor, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old = sc["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        out = np.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        out = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, out)
        inv = out
    return inv


def apply_rope(x, pos, inv, interleaved):
    """x: [T, heads, d]. Rotate-half pairs (i, i+d/2) as Hugging Face, or (2i, 2i+1) as GGUF's Llama layout."""
    ang = pos[:, None] * inv[None, :]                     # [T, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = b * c + a * s
        return out
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def forward_last(W, cfg, ids, interleaved):
    """Logits of the last position of ids (full causal recompute, no cache)."""
    H, K, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    inv = rope_inv_freq(cfg)
    x = W["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = h @ W[p + "self_attn.q_proj.weight"].T
        k = h @ W[p + "self_attn.k_proj.weight"].T
        v = h @ W[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in W:
            q += W[p + "self_attn.q_proj.bias"]
            k += W[p + "self_attn.k_proj.bias"]
            v += W[p + "self_attn.v_proj.bias"]
        q = apply_rope(q.reshape(T, H, d), pos, inv, interleaved)
        k = apply_rope(k.reshape(T, K, d), pos, inv, interleaved)
        v = v.reshape(T, K, d)
        att = np.empty((T, H, d))
        for hh in range(H):
            kv = hh // (H // K)
            z = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            z = np.exp(z - z.max(axis=1, keepdims=True))
            att[:, hh, :] = (z / z.sum(axis=1, keepdims=True)) @ v[:, kv, :]
        x = x + att.reshape(T, H * d) @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    last = rmsnorm(x[-1], W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return head @ last


def run_cases(W, cfg, prompts, interleaved, name, model_path):
    logits, greedy, gaps = [], [], []
    for ids in prompts:
        ids = list(ids)
        first = forward_last(W, cfg, ids, interleaved)
        logits.append(first.astype(np.float32))
        seq, out, lg, gap = list(ids), [], first, np.inf
        for _ in range(N_GREEDY):
            top2 = np.sort(lg)[-2:]
            gap = min(gap, top2[1] - top2[0])
            t = int(np.argmax(lg))
            out.append(t)
            seq.append(t)
            lg = forward_last(W, cfg, seq, interleaved)
        greedy.append(out)
        gaps.append(float(gap))
        print(f"{name}: prompt of {len(ids)} ids -> greedy {out[:8]}... min top-2 gap {gap:.4g}")
    V = len(logits[0])
    np.stack(logits).astype("<f4").tofile(os.path.join(OUT_REF, name + ".logits.f32"))
    meta = {"model": model_path, "vocab": V, "n_cases": len(prompts), "logits": name + ".logits.f32",
            "logits_shape": [len(prompts), V], "n_greedy": N_GREEDY,
            "cases": [{"ids": list(map(int, p)), "greedy": g, "min_top2_gap": gp}
                      for p, g, gp in zip(prompts, greedy, gaps)]}
    with open(os.path.join(OUT_REF, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)


# ---------------------------------------------------------------- (a) tiny synthetic HF checkpoints

def snap_blocks(w, kind):
    """The f32 values a GGUF loader gets from Q4_1 (q in 0..15, f16 scale and min) or Q8_0 (q in -127..127,
    f16 scale) blocks of 32 along each row, computed as the loader does: float(q) * d (+ m), each op in f32.
    The tiny Llama's weights are such values, so the CPU backend's packed decode path runs on them."""
    b = w.reshape(-1, 32)
    if kind == "q4_1":
        lo, hi = b.min(axis=1), b.max(axis=1)
        d = ((hi - lo) / 15).astype(np.float16).astype(np.float32)[:, None]
        m = lo.astype(np.float16).astype(np.float32)[:, None]
        q = np.clip(np.rint((b - m) / d), 0, 15).astype(np.float32)
        return (q * d + m).reshape(w.shape)
    d = (np.abs(b).max(axis=1) / 127).astype(np.float16).astype(np.float32)[:, None]
    q = np.clip(np.rint(b / d), -127, 127).astype(np.float32)
    return (q * d).reshape(w.shape)


def tiny_checkpoint(arch, seed):
    from safetensors.numpy import save_file
    D, H, K, d, F, V, N = 64, 4, 2, 16, 128, 256, 2
    cfg = {"architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
           "model_type": arch, "hidden_size": D, "intermediate_size": F, "num_hidden_layers": N,
           "num_attention_heads": H, "num_key_value_heads": K, "head_dim": d, "vocab_size": V,
           "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    if arch == "llama":
        # wavelengths 2*pi*10000^(i/8) span the keep (< 256), smooth (256..1024) and divide (> 1024) branches
        cfg.update({"rope_theta": 10000.0, "tie_word_embeddings": False,
                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}})
    else:
        cfg.update({"rope_theta": 1000000.0, "tie_word_embeddings": True, "rope_scaling": None,
                    "use_sliding_window": False})
    rng = np.random.default_rng(seed)

    def mat(o, i):  # unit-variance outputs keep the tiny model's logits well separated
        return rng.standard_normal((o, i)) / np.sqrt(i)

    W = {"model.embed_tokens.weight": rng.standard_normal((V, D)), "model.norm.weight": 1 + 0.1 * rng.standard_normal(D)}
    for l in range(N):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(D)
        W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(D)
        W[p + "self_attn.q_proj.weight"] = 2 * mat(H * d, D)
        W[p + "self_attn.k_proj.weight"] = 2 * mat(K * d, D)
        W[p + "self_attn.v_proj.weight"] = mat(K * d, D)
        W[p + "self_attn.o_proj.weight"] = mat(D, H * d)
        W[p + "mlp.gate_proj.weight"] = mat(F, D)
        W[p + "mlp.up_proj.weight"] = mat(F, D)
        W[p + "mlp.down_proj.weight"] = mat(D, F)
        if arch == "qwen2":
            W[p + "self_attn.q_proj.bias"] = 0.5 * rng.standard_normal(H * d)
            W[p + "self_attn.k_proj.bias"] = 0.5 * rng.standard_normal(K * d)
            W[p + "self_attn.v_proj.bias"] = 0.5 * rng.standard_normal(K * d)
    if arch == "llama":
        W["lm_head.weight"] = 3 * mat(V, D)
    # stored as f32; the reference computes from exactly the stored values
    W = {k: v.astype(np.float32) for k, v in W.items()}
    if arch == "llama":
        for k in W:
            if k.endswith("proj.weight"):
                W[k] = snap_blocks(W[k], "q4_1")
        W["lm_head.weight"] = snap_blocks(W["lm_head.weight"], "q8_0")
    path = os.path.join(OUT_MODELS, f"tiny-{arch}-hf")
    os.makedirs(path, exist_ok=True)
    save_file(W, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    W = {k: v.astype(np.float64) for k, v in W.items()}
    prompts = [list(rng.integers(3, V, 7)), list(rng.integers(3, V, 33)), [1] + list(rng.integers(3, V, 90))]
    run_cases(W, cfg, prompts, False, f"tiny-{arch}", path)


# ---------------------------------------------------------------- (b) SmolLM2 from its GGUF

def load_smollm2(path):
    """The GGUF's tensors dequantised by the gguf package, in Hugging Face names, its config, and its vocabulary
    (token text -> id). Also used by gen_value_weighted_cases.py."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    r = GGUFReader(path)

    def field(key):
        return r.fields[key].contents()

    vocab = {tok: i for i, tok in enumerate(field("tokenizer.ggml.tokens"))}
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    sub = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
           "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    W = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(n) for n in reversed(t.shape)])
        if t.name in names:
            W[names[t.name]] = a
        else:
            _, l, kind, _ = t.name.split(".")
            W[f"model.layers.{l}.{sub[kind]}.weight"] = a
    H, K = int(field("llama.attention.head_count")), int(field("llama.attention.head_count_kv"))
    D = int(field("llama.embedding_length"))
    cfg = {"num_attention_heads": H, "num_key_value_heads": K, "head_dim": D // H,
           "num_hidden_layers": int(field("llama.block_count")), "rope_theta": float(field("llama.rope.freq_base")),
           "rms_norm_eps": float(field("llama.attention.layer_norm_rms_epsilon"))}
    return W, cfg, vocab


def smollm2(path):
    W, cfg, vocab = load_smollm2(path)

    def encode(tokens):
        """Prompt ids from whole vocabulary entries (GPT-2 byte alphabet: 'Ġ' = space, 'Ċ' = newline) and
        special tokens by name; only the ids matter to the test, which does not depend on the tokenizer."""
        return [vocab[t] for t in tokens]
    im_s, im_e, nl = "<|im_start|>", "<|im_end|>", "Ċ"

    def chat(words):
        return encode([im_s, "user", nl] + words + [im_e, nl, im_s, "ass", "istant", nl])

    prompts = [
        chat(["What", "Ġis", "Ġthe", "Ġcapital", "Ġof", "ĠFrance", "?"]),
        chat(["Write", "Ġa", "Ġshort", "Ġstory", "Ġabout", "Ġa", "Ġcat", "Ġwho", "Ġlearns", "Ġto", "Ġfly", "."]),
        chat(["Explain", "Ġwhy", "Ġthe", "Ġsky", "Ġis", "Ġblue", "Ġin", "Ġtwo", "Ġsentences", "."]),
    ]
    run_cases(W, cfg, prompts, True, "smollm2-135m", path)


def main():
    os.makedirs(OUT_REF, exist_ok=True)
    tiny_checkpoint("llama", 1234)
    tiny_checkpoint("qwen2", 5678)
    gguf_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
    if os.path.exists(gguf_path):
        smollm2(gguf_path)
    else:
        print(f"skipping SmolLM2: {gguf_path} not found (make model)", file=sys.stderr)


if __name__ == "__main__":
    main()
