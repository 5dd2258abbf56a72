#!/usr/bin/env python3
"""gen_hf_fixtures.py — tiny Hugging Face model directories for tests/test_model_load.c.

Writes, under tests/data/hf_fixtures/ (run from the project root; needs PyPI numpy + gguf + safetensors; committed
outputs made with numpy 2.4.6, gguf 0.19.0, safetensors 0.8.0):
  llama/    LlamaForCausalLM, Llama-3.1 rope scaling (rope_type llama3), bf16, sharded into two files with
            model.safetensors.index.json, untied lm_head, generation_config.json with an eos list, a tokenizer.json
            whose post-processor adds BOS (and no add_bos_token in tokenizer_config.json)
  qwen2/    Qwen2ForCausalLM, q/k/v biases, tied embeddings, f32, one model.safetensors, a small byte-level BPE
            tokenizer.json, eos only as tokenizer_config's eos_token string
  mistral/  MistralForCausalLM, f16, one model.safetensors, eos/bos in config.json, add_bos_token true,
            no tokenizer.json (the model loads without a tokenizer)
  expected.json  per fixture: the config values the loader must report, sample rows of every weight as f32
            (the stored bf16/f16/f32 values widened exactly; first 32 values) with whole-row sums, and Llama-3.1 inverse
            frequencies from transformers' _compute_llama3_parameters formula (float64 here).
Shape of every fixture: 2 layers, D=64, H=4, K=2, d=16, F=96, V=80. safetensors files are written by hand
(8-byte header length, JSON header padded to 8 bytes, data), since numpy has no bfloat16; the f32 and f16 files
are read back with the safetensors package as a check of the writer.
"""
import json
import math
import os
import shutil

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize
from safetensors.numpy import load_file

OUT = "tests/data/hf_fixtures"
rng = np.random.default_rng(20260502)
D, H, K, d, F, V, N = 64, 4, 2, 16, 96, 80, 2


def to_dtype(x, dtype):
    """(raw bytes, the exact f32 values they hold) for an f32 array stored as dtype."""
    x = x.astype(np.float32)
    if dtype == "F32":
        return x.tobytes(), x
    if dtype == "F16":
        h = x.astype(np.float16)
        return h.tobytes(), h.astype(np.float32)
    raw = quantize(x, T.BF16)  # round-to-nearest-even, as torch's .to(bfloat16)
    back = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw.tobytes(), back.reshape(x.shape)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for *_, raw in tensors:
            f.write(raw)


def weights(bias, tied):
    g = lambda *s: rng.standard_normal(s) * 0.1  # noqa: E731
    w = [("model.embed_tokens.weight", "tok_embd", -1, g(V, D)), ("model.norm.weight", "out_norm", -1, 1 + g(D))]
    if not tied:
        w.append(("lm_head.weight", "lm_head", -1, g(V, D)))
    for l in range(N):
        p = f"model.layers.{l}."
        w += [(p + "input_layernorm.weight", "attn_norm", l, 1 + g(D)),
              (p + "self_attn.q_proj.weight", "wq", l, g(H * d, D)),
              (p + "self_attn.k_proj.weight", "wk", l, g(K * d, D)),
              (p + "self_attn.v_proj.weight", "wv", l, g(K * d, D)),
              (p + "self_attn.o_proj.weight", "wo", l, g(D, H * d)),
              (p + "post_attention_layernorm.weight", "ffn_norm", l, 1 + g(D)),
              (p + "mlp.gate_proj.weight", "w_gate", l, g(F, D)),
              (p + "mlp.up_proj.weight", "w_up", l, g(F, D)),
              (p + "mlp.down_proj.weight", "w_down", l, g(D, F))]
        if bias:
            w += [(p + "self_attn.q_proj.bias", "bq", l, g(H * d)), (p + "self_attn.k_proj.bias", "bk", l, g(K * d)),
                  (p + "self_attn.v_proj.bias", "bv", l, g(K * d))]
    return w


def llama3_inv_freq(theta, factor, lo, hi, orig):
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    out = []
    for f in inv:
        wl = 2 * math.pi / f
        if wl < orig / hi:
            out.append(f)
        elif wl > orig / lo:
            out.append(f / factor)
        else:
            s = (orig / wl - lo) / (hi - lo)
            out.append((1 - s) * f / factor + s * f)
    return [float(x) for x in out]


def byte_level_tokenizer(specials, bos=None):
    """A small but complete byte-level BPE tokenizer.json (GPT-2 byte alphabet, two merges, three specials);
    with bos, a Llama-3 style post-processor that puts that special token before every text."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_chars = [chr(c) for _, c in sorted(zip(bs, cs))]
    vocab = {s: i for i, s in enumerate(specials)}
    for ch in byte_chars:
        vocab[ch] = len(vocab)
    merges = ["\u0120 t", "h e"]
    for m in merges:
        vocab[m.replace(" ", "")] = len(vocab)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(specials)]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    post = bl
    if bos:
        template = {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                             {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}}
        post = {"type": "Sequence", "processors": [{**bl, "use_regex": True}, template]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": bl, "post_processor": post, "decoder": bl,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def sample(mat):
    m = mat if mat.ndim == 2 else mat.reshape(1, -1)
    n = m.shape[0]
    rows = sorted({0, 1, d // 2, n - 1} & set(range(n)))
    return {"rows": rows, "values": [[float(x) for x in m[r][:32]] for r in rows],
            "sums": [float(m[r].astype(np.float64).sum()) for r in rows]}


def fixture(name, config, dtype, n_shards, bias, tied, extra_files):
    path = f"{OUT}/{name}"
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    with open(f"{path}/config.json", "w") as f:
        json.dump(config, f, indent=2)
    for fname, content in extra_files.items():
        with open(f"{path}/{fname}", "w") as f:
            json.dump(content, f, indent=2, ensure_ascii=False)
    ws = weights(bias, tied)
    exp = {"tensors": {}}
    stored = []
    for hf, field, layer, x in ws:
        raw, back = to_dtype(x, dtype)
        stored.append((hf, dtype, x.shape, raw))
        exp["tensors"][hf] = {"field": field, "layer": layer, **sample(back)}
    if n_shards == 1:
        write_safetensors(f"{path}/model.safetensors", stored)
        if dtype != "BF16":
            back = load_file(f"{path}/model.safetensors")
            assert all(np.array_equal(back[n].astype(np.float32), exp_x.astype(np.float32).astype(back[n].dtype).astype(np.float32))
                       for n, _, _, exp_x in ws)
    else:
        half = (len(stored) + 1) // 2
        parts = [stored[:half], stored[half:]]
        wmap, total = {}, 0
        for i, part in enumerate(parts):
            fname = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
            write_safetensors(f"{path}/{fname}", part)
            for t in part:
                wmap[t[0]] = fname
                total += len(t[3])
        with open(f"{path}/model.safetensors.index.json", "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)
    return exp


def base_config(arch, model_type):
    return {"architectures": [arch], "model_type": model_type, "hidden_size": D, "intermediate_size": F,
            "num_hidden_layers": N, "num_attention_heads": H, "num_key_value_heads": K, "vocab_size": V,
            "hidden_act": "silu", "torch_dtype": "bfloat16"}


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {}

    rs = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
          "rope_type": "llama3"}
    cfg = {**base_config("LlamaForCausalLM", "llama"), "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "rope_scaling": rs, "tie_word_embeddings": False, "attention_bias": False,
           "mlp_bias": False, "head_dim": d, "bos_token_id": 1, "eos_token_id": 2}
    e = fixture("llama", cfg, "BF16", 2, bias=False, tied=False, extra_files={
        "generation_config.json": {"bos_token_id": 1, "eos_token_id": [2, 3, 4], "do_sample": True},
        "tokenizer.json": byte_level_tokenizer(["<|end_of_text|>", "<|begin_of_text|>", "<|eot_id|>"],
                                               bos="<|begin_of_text|>"),
        "tokenizer_config.json": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                  "chat_template": "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"}})
    expected["llama"] = {**e, "arch": 0, "rope_theta": 500000.0, "rms_eps": 1e-5, "max_context": 131072,
                         "rope_scaling": 1, "tied": 0, "qkv_bias": 0, "bos_id": 1, "add_bos": 1, "eos": [2, 3, 4],
                         "chat": 1, "tokenizer": 1, "rope_inv_freq": llama3_inv_freq(500000.0, 8.0, 1.0, 4.0, 8192)}

    cfg = {**base_config("Qwen2ForCausalLM", "qwen2"), "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": True, "use_sliding_window": False,
           "sliding_window": 131072}
    e = fixture("qwen2", cfg, "F32", 1, bias=True, tied=True, extra_files={
        "tokenizer.json": byte_level_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
        "tokenizer_config.json": {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
                                  "chat_template": "{{ '<|im_start|>' + message['role'] }}"}})
    expected["qwen2"] = {**e, "arch": 2, "rope_theta": 1000000.0, "rms_eps": 1e-6, "max_context": 32768,
                         "rope_scaling": 0, "tied": 1, "qkv_bias": 1, "bos_id": -1, "add_bos": 0, "eos": [2],
                         "chat": 3, "tokenizer": 1,
                         "rope_inv_freq": [float(x) for x in 1.0 / 1e6 ** (np.arange(0, d, 2) / d)]}

    cfg = {**base_config("MistralForCausalLM", "mistral"), "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
           "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "bos_token_id": 1,
           "eos_token_id": 2}
    e = fixture("mistral", cfg, "F16", 1, bias=False, tied=False, extra_files={
        "tokenizer_config.json": {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                                  "eos_token": "</s>",
                                  "chat_template": "{{ bos_token }}{{ '[INST] ' + message['content'] + '[/INST]' }}"}})
    expected["mistral"] = {**e, "arch": 1, "rope_theta": 1000000.0, "rms_eps": 1e-5, "max_context": 32768,
                           "rope_scaling": 0, "tied": 0, "qkv_bias": 0, "bos_id": 1, "add_bos": 1, "eos": [2],
                           "chat": 2, "tokenizer": 0,
                           "rope_inv_freq": [float(x) for x in 1.0 / 1e6 ** (np.arange(0, d, 2) / d)]}

    with open(f"{OUT}/expected.json", "w") as f:
        json.dump(expected, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
