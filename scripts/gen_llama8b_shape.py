#!/usr/bin/env python3
"""gen_llama8b_shape.py OUT.gguf LAYERS — a GGUF of Llama-3.1-8B's shape with LAYERS layers, for tests/rss_8b.sh.

Hidden 4096, 32 query heads over 8 KV heads (head dim 128), feed-forward 14336, vocabulary 128256, RoPE base 5e5.
Quantised as llama.cpp's Q4_K_M mix, taken at its heavier end: Q4_K for token_embd, attn_q, attn_k, attn_output,
ffn_gate and ffn_up; Q6_K for output, attn_v and ffn_down (llama.cpp gives Q6_K to about half of the attn_v /
ffn_down tensors and Q4_K to the rest, so a real Q4_K_M file is a little smaller: 4.92 GB for 32 layers against
this mix's 5.17 GB). The codes are random; each block's f16 scales are set to finite values that keep the weights
within ~0.05 (the forward stays finite). Norms are f32 ones. Needs PyPI numpy + gguf (tests/reference/
requirements.txt). The output is large (about 1.0 GB at 2 layers, +139 MB per layer): not committed."""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

D, H, KV, HD, F, V = 4096, 32, 8, 128, 14336, 128256
# byte offsets of the f16 scale fields in one block (ggml-common.h), and the largest |code x sub-scale| a block
# multiplies them by
F16_FIELDS = {T.Q4_K: ([0, 2], 945.0), T.Q6_K: ([208], 4064.0)}
rng = np.random.default_rng(20261205)


def blocks(qtype, rows, cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    offsets, reach = F16_FIELDS[qtype]
    for off in offsets:
        scale = (0.5 + rng.random(nb)) * 0.05 / reach
        raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return raw.reshape(rows, cols // block * size)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_llama8b_shape.py OUT.gguf LAYERS")
    out, layers = sys.argv[1], int(sys.argv[2])
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"llama-3.1-8b-shape-{layers}l")
    w.add_block_count(layers)
    w.add_context_length(131072)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HD)
    w.add_vocab_size(V)

    def mat(name, qtype, rows, cols):
        raw = blocks(qtype, rows, cols)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)

    mat("token_embd.weight", T.Q4_K, V, D)
    w.add_tensor("output_norm.weight", np.ones(D, dtype=np.float32))
    mat("output.weight", T.Q6_K, V, D)
    for l in range(layers):
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", np.ones(D, dtype=np.float32))
        mat(b + "attn_q.weight", T.Q4_K, H * HD, D)
        mat(b + "attn_k.weight", T.Q4_K, KV * HD, D)
        mat(b + "attn_v.weight", T.Q6_K, KV * HD, D)
        mat(b + "attn_output.weight", T.Q4_K, D, H * HD)
        w.add_tensor(b + "ffn_norm.weight", np.ones(D, dtype=np.float32))
        mat(b + "ffn_gate.weight", T.Q4_K, F, D)
        mat(b + "ffn_up.weight", T.Q4_K, F, D)
        mat(b + "ffn_down.weight", T.Q6_K, D, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
