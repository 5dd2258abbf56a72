#!/usr/bin/env python3
"""gen_quant_cases.py — reference data for tests/test_gguf.c and the GGUF half of tests/test_model_load.c.

Writes, under tests/data/gguf/ (run from the project root; needs PyPI numpy + gguf, see requirements.txt; committed
outputs made with numpy 2.4.6, gguf 0.19.0):
  quant_cases.gguf     every ggml type kvbench dequantises (f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K,
                       q4_K, q5_K, q6_K, iq4_nl, iq4_xs) as random raw blocks (every bit pattern reachable, finite
                       scales), blocks quantised by gguf's own quantiser where it has one ("_real"), and
                       "<name>_special" blocks whose f16 scales are +-0, subnormal, min normal, +-max, +-Inf and
                       NaN, plus an all-zero block; each followed by "<name>.expected": the same values as f32 from
                       gguf.quants.dequantize (PyPI gguf's numpy port of ggml); also one metadata key per GGUF
                       value type, and a non-default alignment (64). The cases added for issue #24 draw from their
                       own generator (rng_new) so that the tiny models below stay byte-identical.
  tiny_llama.gguf      a 2-layer Llama-architecture model (D=64, H=4, K=2, d=16, F=96, V=80) quantised like
                       llama.cpp writes one: Q/K rows permuted by convert_hf_to_gguf.py's LlamaModel.permute,
                       a rope_freqs.weight tensor (Llama-3.1 scaling), an untied output.weight.
  tiny_qwen2.gguf      a 2-layer Qwen2 model: q/k/v biases, tied embeddings, f16/bf16 weights, not permuted.
  tiny_expected.json   for both tiny models: the hyper-parameters and sample rows of every weight in Hugging
                       Face order (dequantised, permutation undone), the RoPE inverse frequencies, and byte
                       offsets inside tiny_llama.gguf that the bad-input tests corrupt.
  smollm2_expected.json  when models/SmolLM2-135M-Instruct.Q4_1.gguf exists: sample rows of real weights,
                       dequantised by the gguf package, Q/K un-permuted with numpy.
"""
import json
import math
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

OUT = "tests/data/gguf"
FUZZ_SEEDS = "tests/data/fuzz/gguf_tensors"
SMOLLM2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
rng = np.random.default_rng(20260501)
# the cases added for issue #24 draw from their own generator, so the tiny models (drawn from `rng` after the
# first cases) stay byte-identical
rng_new = np.random.default_rng(20261205)

# byte offsets of the f16 scale fields inside one block, per type (ggml-common.h)
F16_FIELDS = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82],
              T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0]}
# the types added for issue #24 (every type llama.cpp writes for llama, qwen2 and mistral models)
NEW_TYPES = [("q5_0", T.Q5_0), ("q5_1", T.Q5_1), ("q2_K", T.Q2_K), ("q3_K", T.Q3_K), ("q5_K", T.Q5_K),
             ("iq4_nl", T.IQ4_NL), ("iq4_xs", T.IQ4_XS)]
# f16 scale bits at the edges: +-0, the smallest and largest subnormals, the smallest normal, +-max, +-Inf, a
# quiet NaN and a negative signalling NaN with a payload
SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0xFD01]


def random_f16(n, lo=-6, hi=2, r=rng):
    """Finite f16 scales of varied magnitude (random sign, exponent in 2^lo..2^hi)."""
    v = r.standard_normal(n) * np.exp2(r.integers(lo, hi, n))
    return v.astype(np.float16)


def random_blocks(qtype, rows, cols, r=rng):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = r.integers(0, 256, (nb, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_f16(nb, r=r).view(np.uint8).reshape(nb, 2)
    return raw.reshape(rows, cols // block * size)


def random_half_bits(rows, cols, is_bf16):
    bits = rng.integers(0, 1 << 16, (rows, cols), dtype=np.uint32).astype(np.uint16)
    exp_mask, mant_mask = (0x7F80, 0x007F) if is_bf16 else (0x7C00, 0x03FF)
    nan = ((bits & exp_mask) == exp_mask) & ((bits & mant_mask) != 0)
    bits[nan] &= ~np.uint16(exp_mask)  # NaNs would not compare equal; make them finite
    return bits.view(np.uint8).reshape(rows, cols * 2)


def special_blocks(qtype):
    """One block per SPECIAL_F16 value in every f16 field (a second field takes the value six places on, so Inf
    meets +-0, NaN, Inf and finite values), random codes and sub-block scales, then one all-zero block."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = len(SPECIAL_F16)
    raw = rng_new.integers(0, 256, (n + 1, size), dtype=np.uint8)
    raw[n] = 0
    for k, off in enumerate(F16_FIELDS[qtype]):
        bits = np.array([SPECIAL_F16[(i + 6 * k) % n] for i in range(n)], dtype=np.uint16)
        raw[:n, off:off + 2] = bits.view(np.uint8).reshape(n, 2)
    return raw.reshape(1, -1)


def special_half_bits(is_bf16):
    """Every f16 (or bf16) bit pattern class: the SPECIAL_F16 values (for bf16: the same classes), 32 wide."""
    vals = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFA1] if is_bf16 \
        else SPECIAL_F16
    bits = np.array((vals * 3)[:32], dtype=np.uint16)
    return bits.view(np.uint8).reshape(1, 64)


def write_quant_cases():
    w = gguf.GGUFWriter(f"{OUT}/quant_cases.gguf", "test")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -7)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", 12345)
    w.add_float64("t.f64", 0.25)
    w.add_array("t.arr_str", ["a", "", "xyz"])
    w.add_array("t.arr_i32", [3, -1, 7])
    rows, cols = 3, 512
    cases = {"f16": (T.F16, random_half_bits(rows, cols, False)),
             "bf16": (T.BF16, random_half_bits(rows, cols, True))}
    for name, qt in [("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q8_0", T.Q8_0), ("q4_K", T.Q4_K), ("q6_K", T.Q6_K)]:
        cases[name] = (qt, random_blocks(qt, rows, cols))
    # realistic blocks too: quantised from normal data by gguf's own quantiser (where it has one)
    for name, qt in [("q4_0_real", T.Q4_0), ("q4_1_real", T.Q4_1), ("q8_0_real", T.Q8_0)]:
        cases[name] = (qt, quantize(rng.standard_normal((rows, cols)).astype(np.float32) * 0.05, qt))
    for name, qt in NEW_TYPES:
        cases[name] = (qt, random_blocks(qt, 1, 512, rng_new))
    for name, qt in [("q5_0_real", T.Q5_0), ("q5_1_real", T.Q5_1)]:
        cases[name] = (qt, quantize(rng_new.standard_normal((1, 512)).astype(np.float32) * 0.05, qt))
    # extreme, zero, Inf and NaN scales for every block type; NaN/Inf halves for f16 and bf16
    for name, qt in [("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q8_0", T.Q8_0), ("q4_K", T.Q4_K), ("q6_K", T.Q6_K)] \
            + NEW_TYPES:
        cases[name + "_special"] = (qt, special_blocks(qt))
    cases["f16_special"] = (T.F16, special_half_bits(False))
    cases["bf16_special"] = (T.BF16, special_half_bits(True))
    for name, (qt, raw) in cases.items():
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qt)
        with np.errstate(invalid="ignore"):  # NaN and Inf scales: 0 * Inf, Inf - Inf
            w.add_tensor(name + ".expected", dequantize(raw, qt).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- tiny models -------------------------------------------------------------------------------------------

def permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half row order -> GGUF interleaved order."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_inv_freq(theta, d, factor, lo, hi, orig):
    """transformers' _compute_llama3_parameters, in float64 then rounded to float32 (as HF computes in fp32)."""
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    low_wl, high_wl = orig / lo, orig / hi
    out = []
    for f in inv:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(f)
        elif wl > low_wl:
            out.append(f / factor)
        else:
            s = (orig / wl - lo) / (hi - lo)
            out.append((1 - s) * f / factor + s * f)
    return np.array(out)


def sample_rows(mat, rows, n_values=32):
    """Rows of a matrix: the first n_values values (all by default) and each whole row's float64 sum."""
    return {"rows": rows, "values": [[float(x) for x in mat[r][:n_values]] for r in rows],
            "sums": [float(mat[r].astype(np.float64).sum()) for r in rows]}


def tiny_model(path, arch, qtypes, permuted, bias, tied, rope_freqs, dims=(64, 4, 2, 16, 96, 80, 2), r=rng,
               name=None):
    D, H, K, d, F, V, N = dims
    theta = 500000.0
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name or f"tiny-{arch}-test")
    p = arch
    w.add_uint32(f"{p}.block_count", N)
    w.add_uint32(f"{p}.context_length", 2048)
    w.add_uint32(f"{p}.embedding_length", D)
    w.add_uint32(f"{p}.feed_forward_length", F)
    w.add_uint32(f"{p}.attention.head_count", H)
    w.add_uint32(f"{p}.attention.head_count_kv", K)
    w.add_float32(f"{p}.rope.freq_base", theta)
    w.add_float32(f"{p}.attention.layer_norm_rms_epsilon", 1e-6 if arch == "qwen2" else 1e-5)
    w.add_uint32(f"{p}.rope.dimension_count", d)
    w.add_uint32(f"{p}.vocab_size", V)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    if arch == "llama":
        w.add_uint32("tokenizer.ggml.eot_token_id", 3)
        w.add_bool("tokenizer.ggml.add_bos_token", True)
        w.add_string("tokenizer.chat_template", "{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}")
    else:
        w.add_string("tokenizer.chat_template", "{{ '<|im_start|>' + role }}")
    exp = {"arch": arch, "n_layers": N, "d_model": D, "n_heads": H, "n_kv_heads": K, "head_dim": d, "d_ff": F,
           "vocab": V, "tied": tied, "bias": bias, "tensors": {}}

    def add(name, field, layer, hf, qt, perm_heads=0):
        hf = hf.astype(np.float32)
        gg = permute(hf, perm_heads) if perm_heads and permuted else hf
        if qt in (T.F32,):
            raw, back = gg, gg
        elif qt == T.F16:
            raw = gg.astype(np.float16)
            back = raw.astype(np.float32)
        else:
            raw = quantize(gg, qt)
            back = dequantize(raw, qt)
        if qt in (T.F32, T.F16):
            w.add_tensor(name, raw)
        else:
            w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qt)
        back = unpermute(back, perm_heads) if perm_heads and permuted else back
        n = back.shape[0]
        rows = sorted({0, 1, d // 2 - 1, d // 2, d // 2 + 1, n - 1}) if back.ndim == 2 else [0]
        mat = back if back.ndim == 2 else back.reshape(1, -1)
        exp["tensors"][name] = {"field": field, "layer": layer, **sample_rows(mat, [r for r in rows if r < n])}

    g = lambda *s: r.standard_normal(s) * 0.1  # noqa: E731
    add("token_embd.weight", "tok_embd", -1, g(V, D), qtypes["embd"])
    add("output_norm.weight", "out_norm", -1, 1 + g(D), T.F32)
    if not tied:
        add("output.weight", "lm_head", -1, g(V, D), qtypes["out"])
    if rope_freqs:
        inv = llama3_inv_freq(theta, d, 8.0, 1.0, 4.0, 8192)
        plain = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
        w.add_tensor("rope_freqs.weight", (plain / inv).astype(np.float32))  # CONV's per-pair divisors
        exp["rope_inv_freq"] = [float(x) for x in inv]
    for l in range(N):
        b = f"blk.{l}."
        add(b + "attn_norm.weight", "attn_norm", l, 1 + g(D), T.F32)
        add(b + "attn_q.weight", "wq", l, g(H * d, D), qtypes["attn"][l], H)
        add(b + "attn_k.weight", "wk", l, g(K * d, D), qtypes["attn"][l], K)
        add(b + "attn_v.weight", "wv", l, g(K * d, D), qtypes["attn"][l])
        add(b + "attn_output.weight", "wo", l, g(D, H * d), qtypes["attn"][l])
        if bias:
            add(b + "attn_q.bias", "bq", l, g(H * d), T.F32)
            add(b + "attn_k.bias", "bk", l, g(K * d), T.F32)
            add(b + "attn_v.bias", "bv", l, g(K * d), T.F32)
        add(b + "ffn_norm.weight", "ffn_norm", l, 1 + g(D), T.F32)
        add(b + "ffn_gate.weight", "w_gate", l, g(F, D), qtypes["ffn"])
        add(b + "ffn_up.weight", "w_up", l, g(F, D), qtypes["ffn"])
        add(b + "ffn_down.weight", "w_down", l, g(D, F), qtypes["ffn"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return exp


def corruption_offsets(path):
    """Byte offsets in a GGUF for the bad-input tests (read back with gguf's own reader)."""
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight")
    nd = len(t.shape)
    info = t.field.offset
    name_end = info + 8 + len(t.name)
    f = r.fields["llama.block_count"]
    return {"file_size": os.path.getsize(path), "metadata_start": 24,
            "metadata_mid": int(f.offset) + 4, "tensor_info_start": int(r.tensors[0].field.offset),
            "attn_q_info": int(info), "attn_q_ne1": name_end + 4 + 8, "attn_q_type": name_end + 4 + 8 * nd,
            "attn_q_offset_field": name_end + 4 + 8 * nd + 4, "data_start": int(r.data_offset),
            "attn_q_data": int(t.data_offset)}


def write_tiny_models():
    exp = {}
    exp["llama"] = tiny_model(f"{OUT}/tiny_llama.gguf", "llama",
                              {"embd": T.Q8_0, "out": T.Q4_1, "attn": [T.Q4_0, T.Q4_1], "ffn": T.Q8_0},
                              permuted=True, bias=False, tied=False, rope_freqs=True)
    exp["llama"]["offsets"] = corruption_offsets(f"{OUT}/tiny_llama.gguf")
    exp["qwen2"] = tiny_model(f"{OUT}/tiny_qwen2.gguf", "qwen2",
                              {"embd": T.F16, "attn": [T.F16, T.F32], "ffn": T.F16},
                              permuted=False, bias=True, tied=True, rope_freqs=False)
    # a smaller Llama in the types of Qwen2.5-Coder's GGUF that gguf can quantise (Q/K rows of Q5_0 and Q5_1
    # permuted): a model-load case for test_model_load and a seed of the gguf_tensors fuzz target
    exp["llama_q5"] = tiny_model(f"{FUZZ_SEEDS}/seed_llama_q5.gguf", "llama",
                                 {"embd": T.Q8_0, "out": T.Q5_1, "attn": [T.Q5_0, T.Q5_1], "ffn": T.Q5_0},
                                 permuted=True, bias=False, tied=False, rope_freqs=False,
                                 dims=(32, 2, 1, 16, 64, 16, 2), r=rng_new, name="tiny-llama-q5-test")
    keep = ["token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
            "blk.1.attn_q.weight", "blk.0.ffn_down.weight"]  # one of each type and permutation, to stay small
    exp["llama_q5"]["tensors"] = {k: exp["llama_q5"]["tensors"][k] for k in keep}
    with open(f"{OUT}/tiny_expected.json", "w") as f:
        json.dump(exp, f, separators=(",", ":"))


def write_fuzz_seed_types():
    """A seed for the gguf_tensors fuzz target: one tensor of two random blocks of every readable type, and one
    of a type kvbench cannot read (iq2_xs), which the target must skip."""
    w = gguf.GGUFWriter(f"{FUZZ_SEEDS}/seed_types.gguf", "test")
    for name, qt in [("f16", T.F16), ("bf16", T.BF16)]:
        w.add_tensor(name, random_half_bits(1, 64, qt == T.BF16), raw_shape=(1, 64), raw_dtype=qt)
    w.add_tensor("f32", rng_new.standard_normal((1, 16)).astype(np.float32))
    for qt in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS]:
        block = gguf.GGML_QUANT_SIZES[qt][0]
        raw = random_blocks(qt, 1, 2 * block, rng_new)
        w.add_tensor(qt.name.lower(), raw, raw_shape=raw.shape, raw_dtype=qt)
    size = gguf.GGML_QUANT_SIZES[T.IQ2_XS][1]
    w.add_tensor("iq2_xs", rng_new.integers(0, 256, (1, size), dtype=np.uint8), raw_shape=(1, size),
                 raw_dtype=T.IQ2_XS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_smollm2_expected():
    if not os.path.exists(SMOLLM2):
        print(f"{SMOLLM2} not found: smollm2_expected.json not written")
        return
    r = gguf.GGUFReader(SMOLLM2)
    H, K, d = 9, 3, 64
    out = {}
    picks = [("token_embd.weight", "tok_embd", -1, [0, 1, 2, 1000, 49151], 0),
             ("output_norm.weight", "out_norm", -1, [0], 0),
             ("blk.0.attn_norm.weight", "attn_norm", 0, [0], 0),
             ("blk.0.attn_q.weight", "wq", 0, [0, 1, 31, 32, 33, 63, 64, 100, 575], H),
             ("blk.0.attn_k.weight", "wk", 0, [0, 1, 32, 64, 95, 191], K),
             ("blk.29.attn_q.weight", "wq", 29, [5, 40, 300], H),
             ("blk.29.attn_k.weight", "wk", 29, [3, 50, 150], K),
             ("blk.0.attn_v.weight", "wv", 0, [0, 33, 191], 0),
             ("blk.0.attn_output.weight", "wo", 0, [0, 575], 0),
             ("blk.7.ffn_gate.weight", "w_gate", 7, [0, 1535], 0),
             ("blk.7.ffn_up.weight", "w_up", 7, [10], 0),
             ("blk.7.ffn_down.weight", "w_down", 7, [0, 575], 0),
             ("blk.29.ffn_norm.weight", "ffn_norm", 29, [0], 0)]
    for name, field, layer, rows, heads in picks:
        t = next(t for t in r.tensors if t.name == name)
        m = dequantize(t.data, t.tensor_type).astype(np.float32)
        m = m.reshape(-1, int(t.shape[0]))
        if heads:
            m = unpermute(m, heads)
        out[name] = {"field": field, "layer": layer, "type": t.tensor_type.name, **sample_rows(m, rows, 48)}
    with open(f"{OUT}/smollm2_expected.json", "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(FUZZ_SEEDS, exist_ok=True)
    write_quant_cases()
    write_tiny_models()
    write_fuzz_seed_types()
    write_smollm2_expected()
